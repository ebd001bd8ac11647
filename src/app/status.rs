//! `status` as a library call: one look at the machine, the facts beside it (restarts, last
//! exits, sessions, the controller's record, egress decisions, what each member uses now) and
//! the pure `report::team_status` over them. `ateam status`, `status -w`, `ateam top` and the
//! controller's metrics all read the same document.

use std::path::Path;
use std::time::SystemTime;

use crate::core::layout::{member_ctl_dir, member_record_path, team_run_dir};
use crate::core::selector::Selector;
use crate::egress::{self, Paths};
use crate::execute::{restarts, transcript_usage};
use crate::model::Desired;
use crate::plan::{Observed, PlanOptions};
use crate::report::{
    ControllerStatus, EgressCounts, Extras, LastReconcile, RowKind, StatusDocument, TeamStatus,
    Usage, team_status,
};
use crate::store::Record;

use super::{App, AppError};

/// How far back `EgressStatus::last_minute` counts.
const RECENT_SECS: f64 = 60.0;

/// The status of the teams in `desired` (already narrowed to those asked for), their rows
/// narrowed to `selector`'s.
pub async fn status(
    app: &App,
    desired: &Desired,
    selector: Option<&Selector>,
) -> Result<StatusDocument, AppError> {
    let state_dir = app.host.state_dir.clone();
    let now = SystemTime::now();
    let controller = controller_status(&state_dir);
    if desired.teams.is_empty() {
        return Ok(StatusDocument::new(vec![], controller, now));
    }
    let look = app.look(desired, PlanOptions::default()).await?;
    // With the helpers members asked for: they are rows too.
    let model = look.model;
    let dir = state_dir.clone();
    let count = move |team: &str, member: &str| restarts(&member_ctl_dir(&dir, team, member));
    let dir = state_dir.clone();
    let last_exit = move |team: &str, member: &str| {
        Record::load(&member_record_path(&team_run_dir(&dir, team), member)).last_exit
    };
    let dir = state_dir.clone();
    let session = move |team: &str, name: &str| {
        let d = crate::core::layout::session_dir(&dir, team, name);
        crate::report::SessionFacts {
            socket: crate::core::layout::session_socket_path(&dir, team, name),
            started: crate::sessions::started_at(&d),
        }
    };
    let default_user = app.host.default_member_user();
    let not_writable = move |p: &Path, user: Option<crate::model::UserId>| {
        let user = user.unwrap_or(default_user);
        crate::host::access::check_writable(p, user)
            .err()
            .map(|_| user.uid)
    };
    let extras = Extras {
        now,
        transcript_usage: &transcript_usage,
        restarts: &count,
        last_exit: &last_exit,
        session: &session,
        not_writable: &not_writable,
    };
    let engine = look.info.kind.to_string();
    let mut teams: Vec<_> = model
        .teams
        .iter()
        .map(|t| team_status(t, &engine, &look.observed, &look.plan, &extras))
        .collect();
    add_restarts_due(&state_dir, &mut teams);
    add_egress(&state_dir, &model, &mut teams);
    add_usage(&look.observed, &mut teams);
    if let Some(sel) = selector {
        select(&mut teams, &model, sel);
    }
    Ok(StatusDocument::new(teams, controller, now))
}

/// Crash-looping members waiting out their delay, as the running controller paces them.
fn add_restarts_due(state_dir: &Path, teams: &mut [TeamStatus]) {
    let Some(record) = crate::store::controller::read(state_dir) else {
        return;
    };
    if !crate::store::controller::running(state_dir) {
        return;
    }
    for t in teams {
        for m in &mut t.members {
            if let Some(due) = record.restarts_due.get(&format!("{}/{}", t.team, m.name)) {
                m.next_restart = Some(due.clone());
                m.detail = Some(format!(
                    "crash-looping; the controller restarts it at {due}"
                ));
            }
        }
    }
}

/// Each proxied member's refusals since the last apply, and its decisions in the last minute.
fn add_egress(state_dir: &Path, desired: &Desired, teams: &mut [TeamStatus]) {
    let now = egress::log::Event::now();
    for t in teams.iter_mut() {
        let Some(team) = desired.teams.iter().find(|x| x.name == t.team) else {
            continue;
        };
        for row in &mut t.members {
            let (Some(e), Some(m)) = (
                row.egress.as_mut(),
                team.members.iter().find(|m| m.name == row.name),
            ) else {
                continue;
            };
            let paths = Paths::new(state_dir, &team.name, &m.name);
            let events = egress::log::read(&paths.log);
            let refused = egress::log::refusals(&events, egress::since_last_apply(&paths));
            e.add_refusals(&team.name, &m.access, refused);
            e.last_minute = EgressCounts::of(&events, now - RECENT_SECS);
        }
    }
}

/// What each running member's cgroup counts now, with the limits it runs under.
fn add_usage(observed: &Observed, teams: &mut [TeamStatus]) {
    for row in teams.iter_mut().flat_map(|t| t.members.iter_mut()) {
        let Some(c) = row
            .container_id
            .as_ref()
            .and_then(|id| observed.containers.iter().find(|c| &c.id == id))
        else {
            continue;
        };
        let (Some(pid), true) = (c.pid, c.state.is_live()) else {
            continue;
        };
        let u = crate::runtime::cgroup::usage(pid);
        let limits = c.effective.as_ref();
        row.usage = Some(Usage {
            cpu_seconds: u.cpu_ns.map(|ns| ns as f64 / 1e9),
            memory_bytes: u.memory,
            memory_limit_bytes: limits.map(|e| e.memory_bytes).filter(|&m| m > 0),
            pids: u.pids,
            pids_limit: limits
                .and_then(|e| u64::try_from(e.pids_limit).ok())
                .filter(|&p| p > 0),
        });
    }
}

/// Keeps the rows of main sessions and members whose labels match (rows nothing describes,
/// an orphan or a kept transcript, have no labels), and the teams left with any; each team's
/// verdict is then its selected rows'.
fn select(teams: &mut Vec<TeamStatus>, desired: &Desired, sel: &Selector) {
    for t in teams.iter_mut() {
        let Some(model) = desired.teams.iter().find(|m| m.name == t.team) else {
            continue;
        };
        let chosen = |kind: RowKind, name: &str| match kind {
            RowKind::MainSession => model
                .sessions
                .iter()
                .any(|s| s.name == name && sel.matches(&s.labels)),
            RowKind::Member => model
                .members
                .iter()
                .any(|m| m.name == name && sel.matches(&m.labels)),
            RowKind::Transcript => false,
        };
        t.members.retain(|r| chosen(r.kind, &r.name));
        t.drifted = t.members.iter().any(|r| r.drifted);
    }
    teams.retain(|t| !t.members.is_empty());
}

/// The controller's record, for the document.
pub fn controller_status(state_dir: &Path) -> Option<ControllerStatus> {
    use crate::store::controller as status;
    let r = status::read(state_dir)?;
    Some(ControllerStatus {
        running: status::running(state_dir),
        pid: r.pid,
        since: r.since,
        last_reconcile: r.last_reconcile.map(|l| LastReconcile {
            at: l.at,
            team: l.team,
            ok: l.ok,
        }),
        errors: r.errors,
        manifest_errors: r.manifest_errors,
    })
}
