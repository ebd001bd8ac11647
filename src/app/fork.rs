//! Fork: a second member made from a running one, with its own copies of the origin's write
//! grants, transcript folder (its agent's session with it) and HOME, a new name, and its own
//! container, proxy and credentials. The origin runs on untouched; the two go on apart.
//!
//! The copies are taken by the rules of a copy snapshot (`workspace::copy`: no link
//! followed, no FIFO opened, bounded), first into ateam's own staging folder and then out
//! into folders of the fork's (`<sessionDir>/forks/<name>/<i>-<folder>`, and its transcript
//! folder).
//! HOME is written by the origin's own `tar` into its transcript folder, so it travels with
//! the transcript's copy, and is put back by the fork's own `tar` before its gate opens (as at
//! `resume`). The fork is recorded with the helpers members ask for
//! (`<state>/teams/<team>/requested/<name>.json`, `Origin::Forked`) and merged into the team
//! wherever ateam looks, while its origin is wanted (`requests::merge`). A member with a
//! workspace is refused: its repository is not a folder to copy (collect its branch, and give
//! a new member a workspace on it).

use std::path::{Path, PathBuf};

use super::apply::ApplyOptions;
use super::restart::{Verdict, not_a_member, verdict};
use super::suspend::{LifecycleError, running_container, write_home};
use super::{App, AppError};
use crate::core::container::rfc3339;
use crate::core::layout;
use crate::events::{Event, EventKind};
use crate::execute::Progress;
use crate::model::{Member, Origin};
use crate::plan::PlanOptions;
use crate::store::suspended::{self, Resume};

/// The archive of the origin's HOME, in its transcript folder while the fork is made.
const FORK_HOME_NAME: &str = ".ateam-fork-home.tar";

/// How a fork goes.
#[derive(Debug, Clone, Copy)]
pub struct ForkOptions {
    /// Fail at once when another command holds the store's lock.
    pub no_wait: bool,
    /// The bound on the bytes copied, all folders together.
    pub max_bytes: u64,
}

/// What a fork made.
#[derive(Debug, Clone)]
pub struct Forked {
    /// The fork's write grants, in the origin's order.
    pub copies: Vec<PathBuf>,
    /// Its transcript folder (a copy of the origin's).
    pub transcript: PathBuf,
    /// Whether the origin's HOME came with it (the origin was running).
    pub home: bool,
}

/// Makes `new` from `from` of the applied team `team`, under the store's lock, and brings it
/// up through its gate. Refused before anything is copied: a name that is taken or was, an
/// origin that is no member, a member with a workspace.
pub async fn fork(
    app: &App,
    (team, from): (&str, &str),
    new: &str,
    opts: ForkOptions,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
    progress: &dyn Progress,
    waiting: impl FnOnce(&str),
) -> Result<Forked, LifecycleError> {
    let all = app.applied_with_requests(Some(team))?;
    let t = all.teams.first().ok_or_else(|| AppError::NotApplied {
        team: team.to_string(),
        state_dir: app.host.state_dir.clone(),
    })?;
    if let Some(hint) = not_a_member(t, from) {
        return Err(LifecycleError::NoSuchMember {
            team: team.into(),
            member: from.into(),
            hint,
        });
    }
    let origin = t
        .members
        .iter()
        .find(|m| m.name == from)
        .cloned()
        .ok_or_else(|| LifecycleError::Refused(format!("no member `{from}`")))?;
    let _lock = app
        .store
        .lock(opts.no_wait, waiting)
        .map_err(AppError::from)?;
    check_name(app, t, new)?;
    if origin.workspace.is_some() {
        return Err(LifecycleError::Refused(format!(
            "`{from}` writes a workspace, which a fork does not copy: `ateam collect {from}` brings its branch into your repository, for a new member's workspace to start from"
        )));
    }
    let forked = copy(app, t, &origin, new, opts.max_bytes).await?;
    let at = rfc3339(std::time::SystemTime::now());
    let member = forked_member(&origin, new, &forked, &at);
    crate::requests::save(&app.host.state_dir, team, &member, app.owner)
        .map_err(|e| LifecycleError::Refused(e.to_string()))?;
    if forked.home {
        let home = layout::suspended_home_archive(&forked.transcript);
        let note = Resume { home };
        suspended::save_resume_note(&app.host.state_dir, team, new, &note, app.owner)?;
    }
    let said = format!("forked from {from}");
    crate::events::record(
        &app.host.state_dir,
        app.owner,
        &Event::new(team, new, EventKind::Forked, &said),
    );
    let desired = app.applied(Some(team))?;
    let o = ApplyOptions {
        only: Some(new.to_string()),
        ..ApplyOptions::default()
    };
    let report = super::apply::converge(app, &desired, o, secret, progress).await?;
    match verdict(&report.outcome, team, new) {
        Verdict::Up => Ok(forked),
        Verdict::Refused(why) => Err(LifecycleError::Refused(why)),
        Verdict::NotUp(why) => Err(LifecycleError::NotDone(why)),
    }
}

/// Drops the fork `name` of the applied team `team` (`ateam fork --drop`), under the store's
/// lock: its record forgotten and the team converged, which removes its container and stops
/// its proxy as for a helper no longer wanted. Its copies and transcript are kept.
pub async fn drop_fork(
    app: &App,
    team: &str,
    name: &str,
    no_wait: bool,
    progress: &dyn Progress,
    waiting: impl FnOnce(&str),
) -> Result<(), LifecycleError> {
    let desired = app.applied(Some(team))?;
    let _lock = app.store.lock(no_wait, waiting).map_err(AppError::from)?;
    let forked = crate::requests::records(&app.host.state_dir, team)
        .into_iter()
        .any(|r| r.member.name == name && matches!(r.member.origin, Origin::Forked { .. }));
    if !forked {
        return Err(LifecycleError::Refused(format!(
            "team `{team}` has no fork `{name}`"
        )));
    }
    crate::requests::forget(&app.host.state_dir, team, name)
        .map_err(|e| LifecycleError::Refused(e.to_string()))?;
    let plan = PlanOptions {
        dropped: vec![crate::plan::Dropped {
            team: team.to_string(),
            member: name.to_string(),
            why: "the person dropped the fork".into(),
        }],
        ..PlanOptions::default()
    };
    let secret = |_: &str| None;
    let look = super::apply::prepare(app, &desired, plan, &secret).await?;
    let o = ApplyOptions::default();
    let report = super::apply::carry_out(app, &desired, look, &o, &secret, progress).await?;
    match report.outcome {
        super::apply::Outcome::Refused(f) => Err(LifecycleError::Refused(
            f.iter()
                .map(|x| x.error.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        )),
        super::apply::Outcome::Applied { failures, .. } if !failures.is_empty() => {
            Err(LifecycleError::NotDone(
                failures
                    .iter()
                    .map(|x| x.error.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
            ))
        }
        super::apply::Outcome::Applied { .. } | super::apply::Outcome::NoChanges => Ok(()),
    }
}

/// A name for the fork that nothing has or had: a valid name, no member's or main
/// session's, none the store or the session folder remembers (`requests::remembered`).
fn check_name(app: &App, t: &crate::model::Team, new: &str) -> Result<(), LifecycleError> {
    let refused = |why: String| Err(LifecycleError::Refused(why));
    if !crate::manifest::is_name(new) {
        return refused(format!(
            "`{new}` is not a valid name: use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
        ));
    }
    if not_a_member(t, new) != Some("") {
        return refused(format!("`{new}` is taken in team `{}`", t.name));
    }
    crate::requests::remembered(&app.host.state_dir, t, new)
        .or_else(|r| refused(r.message.replace("a new helper", "a fork")))?;
    let copies = layout::fork_dir(&t.session_dir, new);
    if std::fs::symlink_metadata(&copies).is_ok() {
        return refused(format!("{} is kept from an earlier fork", copies.display()));
    }
    Ok(())
}

/// The origin's HOME into its transcript folder (when it runs), then the copies: each write
/// grant and the transcript folder. The origin's HOME archive goes again when copied.
async fn copy(
    app: &App,
    t: &crate::model::Team,
    origin: &Member,
    new: &str,
    max_bytes: u64,
) -> Result<Forked, LifecycleError> {
    let desired = crate::model::Model {
        teams: vec![t.clone()],
    };
    let only = PlanOptions {
        only: Some(origin.name.clone()),
        ..PlanOptions::default()
    };
    let look = app.look(&desired, only).await?;
    let archive = origin.transcript_dir.join(FORK_HOME_NAME);
    let archive_text = archive.display().to_string();
    let home = match running_container(&look.observed, &t.name, &origin.name) {
        Some((id, _)) => {
            write_home(&look, &id, &archive).await.map_err(|why| {
                LifecycleError::Refused(format!("its HOME could not be copied ({why})"))
            })?;
            Some(id)
        }
        None => None,
    };
    let copied = copy_folders(app, t, origin, new, max_bytes);
    if let Some(id) = &home {
        let rm = ["rm", "-f", &archive_text].map(String::from);
        if let Err(e) = look.backend.exec(id, &rm).await {
            tracing::warn!(member = %origin.name, error = %e, "{archive_text} not removed");
        }
    }
    let mut forked = copied?;
    if home.is_some() {
        // In the fork's own copy, not yet seen by any container of it.
        let from = forked.transcript.join(FORK_HOME_NAME);
        let to = layout::suspended_home_archive(&forked.transcript);
        std::fs::rename(&from, &to)
            .map_err(|e| LifecycleError::Refused(format!("{}: {e}", from.display())))?;
        forked.home = true;
    }
    Ok(forked)
}

/// Copies the origin's write grants to `<sessionDir>/forks/<new>/<i>-<name>` and its transcript
/// folder to the fork's, each the fork's (its uid is the origin's).
fn copy_folders(
    app: &App,
    t: &crate::model::Team,
    origin: &Member,
    new: &str,
    max_bytes: u64,
) -> Result<Forked, LifecycleError> {
    let base = layout::fork_dir(&t.session_dir, new);
    let stage = base.join(".staging");
    let place = crate::workspace::copy::CopyPlace {
        member: origin.name.clone(),
        folders: origin.access.write.clone(),
        store: stage.clone(),
        max_bytes,
        bound: "--max-copy",
        member_owner: app.workspace_owner(origin),
        ateam_owner: app.owner,
    };
    let refused = |e: crate::workspace::WorkspaceError| LifecycleError::Refused(e.to_string());
    let mut copies = Vec::new();
    let mut budget = max_bytes;
    for (i, folder) in origin.access.write.iter().enumerate() {
        // By position and the origin's name for it: two grants may share a last name.
        let name = folder.file_name().map(|n| n.to_string_lossy().into_owned());
        let to = base.join(format!("{i}-{}", name.unwrap_or_default()));
        crate::workspace::copy::copy_out(&place, folder, &stage, &to, &mut budget)
            .map_err(refused)?;
        copies.push(to);
    }
    let transcript = layout::transcript_dir(&t.session_dir, new);
    let from = &origin.transcript_dir;
    crate::workspace::copy::copy_out(&place, from, &stage, &transcript, &mut budget)
        .map_err(refused)?;
    Ok(Forked {
        copies,
        transcript,
        home: false,
    })
}

/// The origin, as the fork: its name, its origin, and every path of the origin's that it has
/// a copy of (write grants, transcript folder) rebased onto the copy, in its grant, working
/// folder, command and variables (an agent's expansion names its transcript folder).
fn forked_member(origin: &Member, new: &str, f: &Forked, at: &str) -> Member {
    let mut pairs: Vec<(PathBuf, PathBuf)> =
        vec![(origin.transcript_dir.clone(), f.transcript.clone())];
    pairs.extend(
        origin
            .access
            .write
            .iter()
            .cloned()
            .zip(f.copies.iter().cloned()),
    );
    let re = |p: &Path| rebase_path(p, &pairs);
    let mut m = origin.clone();
    m.name = new.to_string();
    m.origin = Origin::Forked {
        from: origin.name.clone(),
        at: at.to_string(),
    };
    m.transcript_dir = f.transcript.clone();
    m.access.write = f.copies.clone();
    m.access.read = origin.access.read.iter().map(|p| re(p)).collect();
    m.cwd = re(&origin.cwd);
    m.command = origin
        .command
        .as_ref()
        .map(|c| c.iter().map(|a| rebase_text(a, &pairs)).collect());
    for v in m.env.values_mut() {
        *v = rebase_text(v, &pairs);
    }
    if let Some(a) = m.agent.as_mut() {
        a.home = re(&a.home);
    }
    m
}

/// `p` with the first of `pairs` whose folder holds it rebased onto its copy.
fn rebase_path(p: &Path, pairs: &[(PathBuf, PathBuf)]) -> PathBuf {
    for (from, to) in pairs {
        if let Ok(rest) = p.strip_prefix(from) {
            return if rest.as_os_str().is_empty() {
                to.clone()
            } else {
                to.join(rest)
            };
        }
    }
    p.to_path_buf()
}

/// Every occurrence in `s` of a folder of `pairs` as a whole path (followed by nothing, `/`,
/// `:`, `=`, `,` or a space), rebased onto its copy.
fn rebase_text(s: &str, pairs: &[(PathBuf, PathBuf)]) -> String {
    let mut out = s.to_string();
    for (from, to) in pairs {
        let (from, to) = (from.display().to_string(), to.display().to_string());
        let mut done = String::new();
        let mut rest = out.as_str();
        while let Some(i) = rest.find(&from) {
            let after = rest[i + from.len()..].chars().next();
            let whole = matches!(after, None | Some('/' | ':' | '=' | ',' | ' '));
            done.push_str(&rest[..i]);
            done.push_str(if whole { &to } else { &from });
            rest = &rest[i + from.len()..];
        }
        done.push_str(rest);
        out = done;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_rebased_as_whole_folders_only() {
        let pairs = vec![
            (PathBuf::from("/s/members/a"), PathBuf::from("/s/members/b")),
            (PathBuf::from("/w/src"), PathBuf::from("/s/forks/b/0")),
        ];
        assert_eq!(
            rebase_text("--dir=/s/members/a/x:/w/src /w/srcx /s/members/ab", &pairs),
            "--dir=/s/members/b/x:/s/forks/b/0 /w/srcx /s/members/ab"
        );
        assert_eq!(
            rebase_path(Path::new("/w/src/sub"), &pairs),
            PathBuf::from("/s/forks/b/0/sub")
        );
        assert_eq!(
            rebase_path(Path::new("/w/src"), &pairs),
            PathBuf::from("/s/forks/b/0")
        );
        assert_eq!(
            rebase_path(Path::new("/w/srcx"), &pairs),
            PathBuf::from("/w/srcx")
        );
    }
}
