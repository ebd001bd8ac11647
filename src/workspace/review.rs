//! What a writer did, for review (`ateam diff`/`changes`), and its collection into the
//! person's repository (`ateam collect`).

use super::git::Git;
use super::snapshots::stage_all;
use super::{COLLECTED_REF, Place, WorkspaceError, copy_index, refs, tampered, vet};
use crate::files::Owner;

/// What a writer did: commits ahead of its base, files changed and not committed, the diff
/// against the base; all as git prints it, escaped for a terminal by the caller.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Changes {
    /// The member's branch.
    pub branch: String,
    /// The commit the workspace was made at.
    pub base: String,
    /// The branch's commit, `None` when the member deleted its branch.
    pub tip: Option<String>,
    /// `<id> <subject>`, newest first, at most 200.
    pub commits: Vec<String>,
    /// How many commits the branch has that the base has not.
    pub ahead: u64,
    /// How many commits of the base the branch does not have.
    pub behind: u64,
    /// `<status>\t<path>` of files that differ from the branch's commit.
    pub uncommitted: Vec<String>,
    /// Commits not yet collected into the person's repository.
    pub uncollected: u64,
    /// The diff from the base to the work tree (committed or not), when asked for.
    pub diff: Option<String>,
}

/// The member's branch's commit, checked to be a commit its objects hold.
async fn tip(p: &Place) -> Result<Option<String>, WorkspaceError> {
    let name = format!("refs/heads/{}", p.ws.branch);
    let Some(tip) =
        refs::read(&p.member_git(), &name).map_err(|e| tampered(p, format!("its branch {e}")))?
    else {
        return Ok(None);
    };
    p.shadow()
        .run(&["cat-file", "-e", &format!("{tip}^{{commit}}")])
        .await
        .map_err(|_| {
            tampered(
                p,
                format!("its branch names {tip}, which is no commit it has"),
            )
        })?;
    Ok(Some(tip))
}

/// What the writer changed (`diff`: with the whole diff, at most `max_diff` bytes).
pub async fn changes(p: &Place, diff: bool) -> Result<Changes, WorkspaceError> {
    let _lock = p.lock().await?;
    vet(p)?;
    let base = p.base().await?;
    let tip = tip(p).await?;
    let shadow = p.shadow();
    let count = |range: String| {
        let shadow = shadow.clone();
        async move {
            let out = shadow.run(&["rev-list", "--count", &range]).await?;
            Ok::<u64, WorkspaceError>(out.text().parse().unwrap_or(0))
        }
    };
    let (commits, ahead, behind, uncollected) = match &tip {
        Some(t) => {
            let log = shadow
                .run(&[
                    "log",
                    "--max-count=200",
                    "--format=%h %s",
                    &format!("{base}..{t}"),
                ])
                .await?;
            let collected = shadow
                .try_run(&["rev-parse", "--verify", "--quiet", COLLECTED_REF], None)
                .await?;
            let from = if collected.0 {
                collected.1.text()
            } else {
                base.clone()
            };
            (
                String::from_utf8_lossy(&log.stdout)
                    .lines()
                    .map(str::to_string)
                    .collect(),
                count(format!("{base}..{t}")).await?,
                count(format!("{t}..{base}")).await?,
                count(format!("{from}..{t}")).await?,
            )
        }
        None => (Vec::new(), 0, 0, 0),
    };
    // The work tree through a copy of the snapshot index: only what changed is hashed, and
    // the snapshot index is left as the last snapshot made it.
    let index = p.shadow.join("index.changes");
    copy_index(&p.shadow.join("index"), &index, p.member_owner)?;
    let look = p.shadow().index(&index);
    stage_all(&look).await?;
    let against = tip.clone().unwrap_or_else(|| base.clone());
    let files = look
        .run(&[
            "diff",
            "--cached",
            "--name-status",
            "--no-renames",
            &against,
        ])
        .await?;
    let diff = if diff {
        let out = look
            .clone()
            .max_output(16 << 20)
            .run(&[
                "diff",
                "--cached",
                "--no-ext-diff",
                "--no-textconv",
                "--stat",
                "--patch",
                &base,
            ])
            .await?;
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        None
    };
    let _ = std::fs::remove_file(&index);
    Ok(Changes {
        branch: p.ws.branch.clone(),
        base,
        tip,
        commits,
        ahead,
        behind,
        uncommitted: String::from_utf8_lossy(&files.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
        uncollected,
        diff,
    })
}

/// What `collect` brought in.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Collected {
    /// The ref of the person's repository that now names the member's work.
    pub ref_name: String,
    /// The member's commit it names.
    pub commit: String,
    /// The branch it was also brought into, with `--into`.
    pub into: Option<String>,
}

/// The ref of the person's repository a member's work is collected into.
pub fn collected_ref(team: &str, member: &str) -> String {
    format!("refs/ateam/{team}/{member}")
}

/// Brings the member's branch into the person's repository as `refs/ateam/<team>/<member>`
/// (and, with `into`, fast-forwards that branch to it): a pack made in the shadow, as the
/// member, fed to `index-pack --strict` in the person's repository, as its owner. Nothing is
/// checked out.
pub async fn collect(
    p: &Place,
    person: Owner,
    into: Option<&str>,
) -> Result<Collected, WorkspaceError> {
    let _lock = p.lock().await?;
    vet(p)?;
    let base = p.base().await?;
    let Some(tip) = tip(p).await? else {
        return Err(WorkspaceError::Refused(format!(
            "{} has no branch {} to collect",
            p.member, p.ws.branch
        )));
    };
    let repo = p.person(person);
    if let Some(b) = into {
        check_into(&repo, b, &tip).await?;
    }
    if tip != base {
        let pack = p
            .shadow()
            .max_output(1 << 30)
            .run_with(
                &["pack-objects", "--stdout", "--revs", "--thin", "--quiet"],
                Some(format!("{tip}\n^{base}\n").as_bytes()),
            )
            .await?;
        repo.run_with(
            &["index-pack", "--stdin", "--fix-thin", "--strict"],
            Some(&pack.stdout),
        )
        .await?;
    }
    let name = collected_ref(&p.team, &p.member);
    repo.run(&["update-ref", "-m", "ateam collect", &name, &tip])
        .await?;
    if let Some(b) = into {
        repo.run(&[
            "update-ref",
            "-m",
            "ateam collect",
            &format!("refs/heads/{b}"),
            &tip,
        ])
        .await?;
    }
    p.shadow().run(&["update-ref", COLLECTED_REF, &tip]).await?;
    Ok(Collected {
        ref_name: name,
        commit: tip,
        into: into.map(str::to_string),
    })
}

/// `--into BRANCH` must name a branch that is not checked out, and the member's work must
/// fast-forward it (or it is new).
async fn check_into(repo: &Git, branch: &str, tip: &str) -> Result<(), WorkspaceError> {
    let full = format!("refs/heads/{branch}");
    let (ok, _) = repo.try_run(&["check-ref-format", &full], None).await?;
    if !ok {
        return Err(WorkspaceError::Refused(format!(
            "`{branch}` is not a branch name"
        )));
    }
    let (_, head) = repo.try_run(&["symbolic-ref", "-q", "HEAD"], None).await?;
    if head.text() == full {
        return Err(WorkspaceError::Refused(format!(
            "`{branch}` is checked out in the repository; collect into another branch and merge it yourself"
        )));
    }
    let (exists, current) = repo
        .try_run(&["rev-parse", "--verify", "--quiet", &full], None)
        .await?;
    if exists {
        let (ff, _) = repo
            .try_run(&["merge-base", "--is-ancestor", &current.text(), tip], None)
            .await
            .unwrap_or((false, current));
        if !ff {
            return Err(WorkspaceError::Refused(format!(
                "`{branch}` has commits the member's branch has not: it would not be a fast-forward"
            )));
        }
    }
    Ok(())
}
