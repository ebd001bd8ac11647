//! Snapshots of a member's folder in the shadow (`refs/ateam/snapshots/`): taken before each
//! start and each rollback, listed, and restored (`ateam rollback`).

use super::git::{Git, GitError};
use super::{Place, SNAPSHOTS, Snapshot, WorkspaceError, copy_index, io, refs, tampered, vet};
use crate::files;

/// Records the member's folder as it is: HEAD, and the work tree with untracked files (not
/// ignored ones), as a commit under the shadow's `refs/ateam/snapshots/`, HEAD its parent.
pub async fn snapshot(p: &Place, reason: &str) -> Result<Snapshot, WorkspaceError> {
    let _lock = p.lock().await?;
    take(p, reason).await
}

/// `snapshot`, with the lock held.
async fn take(p: &Place, reason: &str) -> Result<Snapshot, WorkspaceError> {
    vet(p)?;
    let head =
        refs::head(&p.member_git(), &p.ws.branch).map_err(|e| tampered(p, format!("its {e}")))?;
    let shadow = p.shadow();
    if let Some(h) = &head {
        shadow
            .run(&["cat-file", "-e", &format!("{h}^{{commit}}")])
            .await
            .map_err(|_| tampered(p, format!("its HEAD names {h}, which is no commit it has")))?;
    }
    stage_all(&shadow).await?;
    let tree = shadow.run(&["write-tree"]).await?.text();
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let message = format!(
        "{reason}\n\nateam snapshot of {}/{}; HEAD {}\n",
        p.team,
        p.member,
        head.as_deref().unwrap_or("(none)")
    );
    let mut args = vec!["commit-tree", tree.as_str(), "-m", message.as_str()];
    if let Some(h) = &head {
        args.extend(["-p", h.as_str()]);
    }
    let commit = shadow.run(&args).await?.text();
    let name = format!("{SNAPSHOTS}{}", at.as_millis());
    shadow.run(&["update-ref", &name, &commit]).await?;
    Ok(Snapshot {
        id: commit[..12.min(commit.len())].to_string(),
        commit,
        at: at.as_secs(),
        reason: reason.to_string(),
    })
}

/// `git add --all` of the member's folder into `git`'s index. For each nested repository the
/// index records (a gitlink) `add` asks `git status` inside it whether it is dirty, and that
/// git would read the nested repository's config, the member's (its filters would run): it
/// cannot start (ateam's git has no `PATH`), so such an `add` fails, and is run again with the
/// gitlinks left out (they keep the commit first recorded). A tree with none costs nothing.
pub(super) async fn stage_all(git: &Git) -> Result<(), WorkspaceError> {
    let plain = git.run(&["add", "--all", "--", "."]).await;
    let Err(GitError::Failed { .. }) = plain else {
        return Ok(plain.map(|_| ())?);
    };
    let index = git
        .clone()
        .max_output(1 << 30)
        .run(&["ls-files", "--stage", "-z"])
        .await?;
    let mut spec = b".\0".to_vec();
    for entry in index.stdout.split(|b| *b == 0) {
        // `160000 <id> <stage>\t<path>`: a gitlink.
        if let Some(rest) = entry.strip_prefix(b"160000 ")
            && let Some(tab) = rest.iter().position(|b| *b == b'\t')
        {
            spec.extend_from_slice(b":(exclude,literal)");
            spec.extend_from_slice(&rest[tab + 1..]);
            spec.push(0);
        }
    }
    if spec.len() == 2 {
        return Ok(plain.map(|_| ())?);
    }
    git.run_with(
        &[
            "add",
            "--all",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
        ],
        Some(&spec),
    )
    .await?;
    Ok(())
}

/// Every snapshot, the newest first.
pub async fn snapshots(p: &Place) -> Result<Vec<Snapshot>, WorkspaceError> {
    if !p.exists() {
        return Ok(Vec::new());
    }
    let out = p
        .shadow()
        .run(&[
            "for-each-ref",
            "--sort=-refname",
            "--format=%(refname)%00%(objectname)%00%(contents:subject)",
            SNAPSHOTS,
        ])
        .await?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\0');
            let name = f.next()?;
            let commit = f.next()?.to_string();
            let reason = f.next().unwrap_or("").to_string();
            let ms: u64 = name.strip_prefix(SNAPSHOTS)?.parse().ok()?;
            Some(Snapshot {
                id: commit[..12.min(commit.len())].to_string(),
                commit,
                at: ms / 1000,
                reason,
            })
        })
        .collect())
}

/// Puts the member's folder back as snapshot `to` recorded it (the newest when `None`):
/// first a snapshot of the present (so the rollback itself can be undone), then the work
/// tree, the branch at the snapshot's HEAD, and an index of that HEAD. The member must be
/// stopped. Returns the snapshot of the present and the one restored.
pub async fn rollback(p: &Place, to: Option<&str>) -> Result<(Snapshot, Snapshot), WorkspaceError> {
    let _lock = p.lock().await?;
    let all = snapshots(p).await?;
    let target = match to {
        None => all.first().cloned(),
        Some(id) => all
            .iter()
            .find(|s| s.commit.starts_with(id) && id.len() >= 4)
            .cloned(),
    }
    .ok_or_else(|| {
        WorkspaceError::Refused(match to {
            Some(id) => format!(
                "no snapshot `{}` of {}",
                crate::core::untrusted::shown(id),
                p.member
            ),
            None => format!("{} has no snapshot yet", p.member),
        })
    })?;
    let saved = take(p, "before rollback").await?;
    let head = p
        .shadow()
        .try_run(
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{}^1", target.commit),
            ],
            None,
        )
        .await?;
    let head = head.0.then(|| head.1.text());
    restore(p, &target.commit, head.as_deref()).await?;
    Ok((saved, target))
}

/// Puts the member's folder back at its base (after a snapshot of the present).
pub async fn reset(p: &Place) -> Result<Snapshot, WorkspaceError> {
    let _lock = p.lock().await?;
    let saved = take(p, "before reset").await?;
    let base = p.base().await?;
    restore(p, &base, Some(&base)).await?;
    Ok(saved)
}

/// The work tree as `tree_ish` has it, and the branch (and HEAD) at `head`.
async fn restore(p: &Place, tree_ish: &str, head: Option<&str>) -> Result<(), WorkspaceError> {
    let shadow = p.shadow();
    // The shadow's index is the present (the snapshot just taken): files it has that the
    // target has not are removed, ignored files are left alone.
    shadow
        .run(&["read-tree", "--reset", "-u", tree_ish])
        .await?;
    let git = p.member_git();
    let branch_ref = format!("refs/heads/{}", p.ws.branch);
    if let Some(h) = head {
        refs::write(&git, &branch_ref, h, p.member_owner).map_err(io(&git))?;
        let index = p.shadow.join("index.head");
        let staged = p.shadow().index(&index);
        staged.run(&["read-tree", h]).await?;
        // Exit 1 only says some files differ from HEAD: that is the point.
        staged
            .try_run(&["update-index", "-q", "--refresh"], None)
            .await?;
        copy_index(&index, &git.join("index"), p.member_owner)?;
        let _ = std::fs::remove_file(&index);
    }
    let head_text = format!("ref: {branch_ref}\n");
    files::write_atomic_in_member_dir(
        &git.join("HEAD"),
        head_text.as_bytes(),
        0o644,
        p.member_owner,
    )
    .map_err(io(&git))
}
