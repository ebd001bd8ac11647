//! Suspend and resume: a member the person wants down for a while, its memory freed and its
//! state kept, then back where it was.
//!
//! A member's state is outside its container (read-only root) but for HOME, a tmpfs: its
//! write grants, its workspace and its transcript folder (its agent's own state is there) stay
//! as they are, and HOME is written by the member's own `tar`, as the member, into an archive
//! in its transcript folder (ateam never reads it on the host). The suspension is recorded in
//! the state folder, where every look reads it as desired state: the plan removes the
//! container and stops the proxy and helper server, and starts none while it lasts, so a
//! running controller keeps it down. `resume` forgets it and converges the member: a new
//! container, judged whole and verified at its gate as any start is, with HOME put back before
//! the gate opens (`runtime`). Process state is not kept: the member's command starts again
//! (an agent resumes its own session from its transcript folder).

use std::path::Path;

use super::apply::{ApplyOptions, carry_out, prepare};
use super::restart::{Verdict, not_a_member, verdict};
use super::{App, AppError};
use crate::core::container::{ContainerState, MEMBER_HOME, labels, rfc3339};
use crate::core::layout;
use crate::events::{Event, EventKind};
use crate::execute::Progress;
use crate::plan::PlanOptions;
use crate::plan::spec::DesiredState;
use crate::store::StoreError;
use crate::store::suspended::{self, Resume, Suspension};

/// Why a suspend or a resume did not happen, or did not finish.
#[derive(Debug, thiserror::Error)]
#[allow(
    missing_docs,
    reason = "a variant's fields are the values its message names; its doc says when it happens"
)]
pub enum LifecycleError {
    /// The team or engine could not be read, or the store's lock taken.
    #[error(transparent)]
    App(#[from] AppError),
    /// The suspension record could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The applied team has no member of that name.
    #[error("team `{team}` has no member `{member}`{hint}")]
    NoSuchMember {
        team: String,
        member: String,
        /// What the name is, when it is something else.
        hint: &'static str,
    },
    /// Suspended already: nothing changed.
    #[error("{team}/{member} is suspended already (since {since})")]
    Already {
        team: String,
        member: String,
        since: String,
    },
    /// `resume` of a member that is not suspended.
    #[error("{team}/{member} is not suspended")]
    NotSuspended { team: String, member: String },
    /// Its HOME could not be kept: nothing changed, the member runs on.
    #[error(
        "{team}/{member}: its HOME could not be kept ({why}); nothing changed. `--discard-home` suspends it without"
    )]
    Home {
        team: String,
        member: String,
        why: String,
    },
    /// Refused before anything changed.
    #[error("refused before anything changed: {0}")]
    Refused(String),
    /// The converge failed for the member.
    #[error("{0}")]
    NotDone(String),
}

/// What a suspend kept and freed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspended {
    /// The record as written.
    pub suspension: Suspension,
    /// Whether its container ran (a finished or crashed member has no HOME left to keep).
    pub was_running: bool,
}

/// How a suspend goes.
#[derive(Debug, Clone, Copy, Default)]
pub struct SuspendOptions {
    /// Fail at once when another command holds the store's lock.
    pub no_wait: bool,
    /// Suspend without keeping HOME (for an image without `tar`).
    pub discard_home: bool,
}

/// Suspends `member` of the applied team `team`, under the store's lock: its HOME kept, the
/// suspension recorded, then its container removed and its proxy and helper server stopped.
/// A HOME that cannot be kept changes nothing (unless `discard_home`).
pub async fn suspend(
    app: &App,
    (team, member): (&str, &str),
    opts: SuspendOptions,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
    progress: &dyn Progress,
    waiting: impl FnOnce(&str),
) -> Result<Suspended, LifecycleError> {
    let desired = app.applied(Some(team))?;
    known(app, team, member)?;
    let _lock = app
        .store
        .lock(opts.no_wait, waiting)
        .map_err(AppError::from)?;
    let state_dir = &app.host.state_dir;
    if let Some(s) = suspended::load(state_dir, team, member)? {
        return Err(LifecycleError::Already {
            team: team.into(),
            member: member.into(),
            since: s.since,
        });
    }
    let only = PlanOptions {
        only: Some(member.to_string()),
        ..PlanOptions::default()
    };
    let look = app.look(&desired, only.clone()).await?;
    let running = running_container(&look.observed, team, member);
    let mut suspension = Suspension {
        since: rfc3339(std::time::SystemTime::now()),
        home: None,
        freed_bytes: None,
    };
    if let Some((id, pid)) = &running {
        suspension.freed_bytes = held_memory(app, team, member, id, *pid);
        let m = look.desired.members.iter().find(|m| m.member == member);
        if let (false, Some(m)) = (opts.discard_home, m) {
            let archive = layout::suspended_home_archive(&m.transcript_dir);
            write_home(&look, id, &archive)
                .await
                .map_err(|why| LifecycleError::Home {
                    team: team.into(),
                    member: member.into(),
                    why,
                })?;
            suspension.home = Some(archive);
        }
    }
    suspended::save(state_dir, team, member, &suspension, app.owner)?;
    let said = match &suspension.home {
        Some(h) => format!("suspended; its HOME kept in {}", h.display()),
        None => "suspended".to_string(),
    };
    record(app, team, member, EventKind::Suspended, &said);
    let opts = ApplyOptions {
        only: only.only,
        ..ApplyOptions::default()
    };
    let report = super::apply::converge(app, &desired, opts, secret, progress).await?;
    match verdict(&report.outcome, team, member) {
        Verdict::Up => {}
        Verdict::Refused(why) => return Err(LifecycleError::Refused(why)),
        Verdict::NotUp(why) => return Err(LifecycleError::NotDone(why)),
    }
    Ok(Suspended {
        suspension,
        was_running: running.is_some(),
    })
}

/// Resumes a suspended `member` of the applied team `team`, under the store's lock: the
/// suspension forgotten (HOME left to be put back at its start) and the member converged:
/// a new container through its gate. Returns the suspension it ended.
pub async fn resume(
    app: &App,
    (team, member): (&str, &str),
    no_wait: bool,
    secret: &(dyn Fn(&str) -> Option<String> + Sync),
    progress: &dyn Progress,
    waiting: impl FnOnce(&str),
) -> Result<Suspension, LifecycleError> {
    let desired = app.applied(Some(team))?;
    known(app, team, member)?;
    let _lock = app.store.lock(no_wait, waiting).map_err(AppError::from)?;
    let state_dir = &app.host.state_dir;
    let Some(s) = suspended::load(state_dir, team, member)? else {
        return Err(LifecycleError::NotSuspended {
            team: team.into(),
            member: member.into(),
        });
    };
    if let Some(home) = &s.home {
        let note = Resume { home: home.clone() };
        suspended::save_resume_note(state_dir, team, member, &note, app.owner)?;
    }
    suspended::forget(state_dir, team, member)?;
    record(app, team, member, EventKind::Resumed, "resumed");
    let opts = ApplyOptions {
        only: Some(member.to_string()),
        ..ApplyOptions::default()
    };
    let result = match prepare(app, &desired, opts.plan_options(), secret).await {
        Ok(look) => carry_out(app, &desired, look, &opts, secret, progress)
            .await
            .map_err(LifecycleError::from)
            .and_then(|r| match verdict(&r.outcome, team, member) {
                Verdict::Up => Ok(s),
                Verdict::Refused(why) => Err(LifecycleError::Refused(why)),
                Verdict::NotUp(why) => Err(LifecycleError::NotDone(why)),
            }),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = &result {
        record(
            app,
            team,
            member,
            EventKind::Refused,
            &format!("resume: {e}"),
        );
    }
    result
}

/// `ds` with each suspended member marked (`DesiredMember::suspended`), as the state folder
/// records them: every look's desired state. A record that cannot be read keeps the member
/// down: a suspension is never undone by a broken file.
pub(crate) fn mark(ds: &mut DesiredState, state_dir: &std::path::Path) {
    for m in &mut ds.members {
        m.suspended = match suspended::load(state_dir, &m.team, &m.member) {
            Ok(s) => s.map(|s| s.since),
            Err(e) => {
                tracing::warn!(member = %m.member, error = %e, "a suspension record is unreadable: the member stays down");
                Some(format!("an unknown time ({e})"))
            }
        };
    }
}

/// A member of the applied team `team`, requested helpers included.
fn known(app: &App, team: &str, member: &str) -> Result<(), LifecycleError> {
    let all = app.applied_with_requests(Some(team))?;
    let hint = all.teams.first().and_then(|t| not_a_member(t, member));
    match hint {
        None => Ok(()),
        Some(hint) => Err(LifecycleError::NoSuchMember {
            team: team.into(),
            member: member.into(),
            hint,
        }),
    }
}

/// The running container of `member` of `team` (by its container's name), among the
/// recorded ones `observed` holds: id and host pid.
pub(super) fn running_container(
    observed: &crate::plan::Observed,
    team: &str,
    member: &str,
) -> Option<(String, Option<u32>)> {
    let name = crate::core::container::container_name(team, member);
    observed
        .containers
        .iter()
        .find(|c| {
            c.name == name
                && observed.recorded.contains(&c.id)
                && c.labels.get(labels::TEAM).map(String::as_str) == Some(team)
                && c.state == ContainerState::Running
        })
        .map(|c| (c.id.clone(), c.pid))
}

/// The member's HOME written by its own `tar`, as the member, inside its container `id`, to
/// `archive` (in its transcript folder); why not, if it could not be.
pub(super) async fn write_home(look: &super::Look, id: &str, archive: &Path) -> Result<(), String> {
    let archive = archive.display().to_string();
    let cmd = ["tar", "-c", "-f", &archive, "-C", MEMBER_HOME, "."].map(String::from);
    match look.backend.exec(id, &cmd).await {
        Ok(out) if out.code == 0 => Ok(()),
        Ok(out) => Err(format!(
            "its `tar` exited {}: {}",
            out.code,
            out.stderr.trim()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// What the member holds in memory now: its container's cgroup and its egress proxy's and
/// helper server's resident sets (ateam's own processes).
fn held_memory(app: &App, team: &str, member: &str, id: &str, pid: Option<u32>) -> Option<u64> {
    let container = pid.and_then(|p| crate::runtime::cgroup::container_usage(id, p).memory);
    let proxy = crate::servers::egress::Paths::new(&app.host.state_dir, team, member);
    let proxy = crate::servers::egress::running_pid(&proxy).and_then(resident);
    let sum = container.unwrap_or(0) + proxy.unwrap_or(0);
    (container.is_some() || proxy.is_some()).then_some(sum)
}

/// A host process's resident set, from `/proc/<pid>/status`.
fn resident(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn record(app: &App, team: &str, member: &str, kind: EventKind, said: &str) {
    crate::events::record(
        &app.host.state_dir,
        app.owner,
        &Event::new(team, member, kind, said),
    );
}
