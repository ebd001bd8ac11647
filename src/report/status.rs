//! Building a team's status from its model, what was observed and the plan made from them.
//! Pure: the facts on disk come in through `Extras`, so every row is tested without an
//! engine, and a row's verdict is the plan's (status, diff and apply --dry-run agree).

use std::path::PathBuf;
use std::time::SystemTime;

use super::diff::{action_text, drift_text, short};
use super::rows::{
    EgressCounts, EgressStatus, Grants, LeftOut, MemberStatus, OriginStatus, RowKind, TeamStatus,
};
use crate::core::container::{LastExit, labels, rfc3339, rfc3339_epoch};
use crate::model::{Network, Parent, Team};
use crate::plan::{Action, ContainerState, Drift, Finding, Observed, ObservedContainer, Plan};

/// Facts status needs that are not in the plan: read from disk by the caller.
pub struct Extras<'a> {
    pub now: SystemTime,
    pub transcript_usage: &'a dyn Fn(&std::path::Path) -> (u64, Option<SystemTime>),
    pub restarts: &'a dyn Fn(&str, &str) -> u64,
    /// The last exit ateam recorded for `(team, member)` (`store::Record`).
    pub last_exit: &'a dyn Fn(&str, &str) -> Option<LastExit>,
    /// A main session's terminal, by team and name.
    pub session: &'a dyn Fn(&str, &str) -> SessionFacts,
    /// `Some(uid)` when a member of this `user` (`None`: the host's default) runs as `uid`
    /// and cannot write this folder (`host::access`).
    pub not_writable: &'a dyn Fn(&std::path::Path, Option<crate::model::UserId>) -> Option<u32>,
}

/// A member's grants, with the write grants its uid cannot write marked.
fn grants_of(m: &crate::model::Member, extras: &Extras<'_>) -> Grants {
    let mut g = Grants::of(&m.access);
    for p in &m.access.write {
        if let Some(uid) = (extras.not_writable)(p, m.user) {
            g.not_writable.push(p.clone());
            g.not_writable_by = Some(uid);
        }
    }
    g
}

/// What status shows of a main session beyond the plan.
pub struct SessionFacts {
    /// Its tmux socket.
    pub socket: PathBuf,
    /// When ateam started it, in seconds since the epoch.
    pub started: Option<i64>,
}

impl Extras<'_> {
    fn secs_since(&self, t: SystemTime) -> u64 {
        self.now.duration_since(t).map(|d| d.as_secs()).unwrap_or(0)
    }

    fn age(&self, c: &ObservedContainer) -> u64 {
        let now = self
            .now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        (now - c.created).max(0) as u64
    }
}

/// The later of two exits (RFC 3339 UTC times compare as text; one without a time is older).
fn later(a: Option<LastExit>, b: Option<LastExit>) -> Option<LastExit> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.at > a.at { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The status of one team, from its model, what was observed and the plan made from them.
/// A row is drifted exactly when the plan says so (`Plan::subject_drifted`): status, diff
/// and apply --dry-run give one verdict.
pub fn team_status(
    team: &Team,
    engine: &str,
    observed: &Observed,
    plan: &Plan,
    extras: &Extras,
) -> TeamStatus {
    let mine = |member: &str| {
        observed.containers.iter().find(|c| {
            c.labels.get(labels::TEAM).map(String::as_str) == Some(&team.name)
                && c.labels.get(labels::MEMBER).map(String::as_str) == Some(member)
                && observed.recorded.contains(&c.id)
                && !crate::core::container::is_replacement(
                    &crate::core::container::container_name(&team.name, member),
                    &c.name,
                    &c.labels,
                )
        })
    };
    // What the plan would do about this row, in diff's words: the detail of a row whose
    // state alone does not say why it drifted.
    let planned = |subject: &str| {
        let lines: Vec<String> = plan
            .actions
            .iter()
            .filter(|a| a.subject() == (team.name.as_str(), subject))
            .map(action_text)
            .collect();
        (!lines.is_empty()).then(|| format!("apply would: {}", lines.join("; ")))
    };
    let drifted = |subject: &str| plan.subject_drifted(&team.name, subject);
    let mut rows = Vec::new();
    for s in &team.sessions {
        let running = !plan.actions.iter().any(|a| matches!(a, Action::StartSession { session, .. } | Action::Promote { session, .. } if session.name == s.name && session.team == team.name));
        let SessionFacts { socket, started } = (extras.session)(&team.name, &s.name);
        let transcript = if s.transcript_dir.as_os_str().is_empty() {
            crate::core::layout::session_transcript_dir(&team.session_dir, &s.name)
        } else {
            s.transcript_dir.clone()
        };
        let (bytes, last) = (extras.transcript_usage)(&transcript);
        let now_secs = extras
            .now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let started = started.filter(|_| running);
        let origin = match (&s.promoted_from, &s.takes_over) {
            (Some(m), _) => Some(format!("promoted from member {m}")),
            (None, Some(old)) => Some(format!("took over from {old}")),
            (None, None) => None,
        };
        rows.push(MemberStatus {
            name: s.name.clone(),
            kind: RowKind::MainSession,
            parent: None,
            state: if running {
                "running".into()
            } else {
                "not running".into()
            },
            detail: if running { origin } else { planned(&s.name) },
            drifted: drifted(&s.name),
            container: None,
            container_id: None,
            created_at: started.and_then(rfc3339_epoch),
            age_secs: started.map(|t| (now_secs - t).max(0) as u64),
            restarts: 0,
            next_restart: None,
            last_exit: None,
            transcript: Some(transcript),
            transcript_bytes: bytes,
            last_activity_at: last.map(rfc3339),
            last_activity_secs: last.map(|t| extras.secs_since(t)),
            grants: None,
            limits_unenforced: false,
            egress: None,
            terminal: Some(socket),
            origin: None,
            usage: None,
        });
    }
    for m in &team.members {
        let c = mine(&m.name);
        let action = plan.actions.iter().find(|a| {
            a.subject() == (team.name.as_str(), m.name.as_str())
                && matches!(
                    a,
                    Action::Create { .. }
                        | Action::Recreate { .. }
                        | Action::Start { .. }
                        | Action::FinishReplacement { .. }
                        | Action::RestoreName { .. }
                )
        });
        let conflict = plan.findings.iter().any(|f| matches!(f, Finding::Conflict { team: t, member, .. } if *t == team.name && *member == m.name));
        let (state, detail) = match (c, action) {
            _ if conflict => (
                "conflict".to_string(),
                Some("a container ateam did not make holds its name".to_string()),
            ),
            (None, _) => ("missing".into(), None),
            (
                Some(_),
                Some(Action::Recreate {
                    reason: r @ Drift::Policy { .. },
                    ..
                }),
            ) => ("policy violation".into(), Some(drift_text(r))),
            (Some(_), Some(Action::Recreate { reason, .. })) => {
                ("drifted".into(), Some(drift_text(reason)))
            }
            (Some(c), Some(Action::RestoreName { name, .. })) => (
                "renamed".into(),
                Some(format!("renamed to {}; apply names it {name} again", c.name)),
            ),
            (Some(c), _) => match c.state {
                ContainerState::Running if !c.released => (
                    "held at gate".into(),
                    Some("started since ateam last checked it (a restart, or an interrupted apply): its command does not run; apply checks and releases it".into()),
                ),
                ContainerState::Running | ContainerState::Restarting => ("running".into(), None),
                ContainerState::Exited { code } => (
                    format!("exited {code}"),
                    action.map(|_| "the restart policy asks for a restart".to_string()),
                ),
                ContainerState::Created => ("created".into(), Some("never started".into())),
                ContainerState::Paused => (
                    "paused".into(),
                    Some("someone paused it; apply lets it go on".into()),
                ),
                ContainerState::Removing => ("removing".into(), None),
                ContainerState::Dead => ("dead".into(), None),
            },
        };
        let drifted = drifted(&m.name);
        let detail = match detail {
            None if drifted => planned(&m.name),
            d => d,
        };
        let (state, detail, drifted, egress) = egress_state(team, m, plan, state, detail, drifted);
        // A running member whose helper server is silent: its requests fail until apply (or
        // the controller) starts the server.
        let helpers_down = plan.actions.iter().any(|a| {
            matches!(a, Action::StartHelperServer { team: t, member } if *t == team.name && *member == m.name)
        });
        let state = if helpers_down && state == "running" {
            "helpers down".to_string()
        } else {
            state
        };
        let (bytes, last) = (extras.transcript_usage)(&m.transcript_dir);
        rows.push(MemberStatus {
            name: m.name.clone(),
            kind: RowKind::Member,
            parent: Some(match &m.parent {
                Parent::MainSession(p) | Parent::Member(p) => p.clone(),
            }),
            state,
            detail,
            drifted,
            container: c.map(|c| c.name.clone()),
            container_id: c.map(|c| c.id.clone()),
            created_at: c.and_then(|c| rfc3339_epoch(c.created)),
            age_secs: c.map(|c| extras.age(c)),
            restarts: (extras.restarts)(&team.name, &m.name),
            next_restart: None,
            last_exit: later(
                (extras.last_exit)(&team.name, &m.name),
                c.and_then(|c| c.last_exit.clone()),
            ),
            transcript: Some(m.transcript_dir.clone()),
            transcript_bytes: bytes,
            last_activity_at: last.map(rfc3339),
            last_activity_secs: last.map(|t| extras.secs_since(t)),
            grants: Some(grants_of(m, extras)),
            limits_unenforced: observed.limits_unenforced && c.is_some(),
            egress,
            terminal: None,
            origin: Some(OriginStatus::of(&m.origin)),
            usage: None,
        });
    }
    let strangers = plan
        .findings
        .iter()
        .filter_map(|f| match f {
            Finding::Stranger {
                team,
                member,
                container,
            } => Some((team, member, container)),
            _ => None,
        })
        .chain(plan.actions.iter().filter_map(|a| match a {
            Action::RemoveStranger {
                team,
                member,
                container,
            } => Some((team, member, container)),
            _ => None,
        }));
    // A container that is no member of the manifests: an orphan or a stranger.
    let unwanted_row =
        |member: &str, container: &crate::plan::ContainerRef, state: &str, detail| {
            let c = observed.containers.iter().find(|c| c.id == container.id);
            MemberStatus {
                name: member.to_string(),
                kind: RowKind::Member,
                parent: None,
                state: state.into(),
                detail: Some(detail),
                drifted: true,
                container: Some(container.name.clone()),
                container_id: Some(container.id.clone()),
                created_at: c.and_then(|c| rfc3339_epoch(c.created)),
                age_secs: c.map(|c| extras.age(c)),
                restarts: 0,
                next_restart: None,
                last_exit: c.and_then(|c| c.last_exit.clone()),
                transcript: None,
                transcript_bytes: 0,
                last_activity_at: None,
                last_activity_secs: None,
                grants: None,
                limits_unenforced: false,
                egress: None,
                terminal: None,
                origin: None,
                usage: None,
            }
        };
    for (_, member, container) in strangers.filter(|(t, _, _)| **t == team.name) {
        rows.push(unwanted_row(
            member,
            container,
            "stranger",
            format!(
                "{} {} carries ateam's labels but ateam did not make it: never adopted nor released; apply removes it when it holds a member's name, --prune in any case",
                container.name,
                short(&container.id)
            ),
        ));
    }
    for f in &plan.findings {
        match f {
            Finding::Orphan {
                team: t,
                member,
                container,
            } if *t == team.name => rows.push(unwanted_row(
                member,
                container,
                "orphan",
                "no manifest wants it; apply --prune removes it".into(),
            )),
            Finding::RetainedTranscript {
                team: t,
                member,
                path,
            } if *t == team.name => {
                let (bytes, last) = (extras.transcript_usage)(path);
                rows.push(MemberStatus {
                    name: member.clone(),
                    kind: RowKind::Transcript,
                    parent: None,
                    state: "retained".into(),
                    detail: Some(
                        "the member is gone; its transcript is kept (delete --purge removes it)"
                            .into(),
                    ),
                    drifted: false,
                    container: None,
                    container_id: None,
                    created_at: None,
                    age_secs: None,
                    restarts: 0,
                    next_restart: None,
                    last_exit: None,
                    transcript: Some(path.clone()),
                    transcript_bytes: bytes,
                    last_activity_at: last.map(rfc3339),
                    last_activity_secs: last.map(|t| extras.secs_since(t)),
                    grants: None,
                    limits_unenforced: false,
                    egress: None,
                    terminal: None,
                    origin: None,
                    usage: None,
                });
            }
            Finding::OrphanSession { team: t, session } if *t == team.name => {
                let SessionFacts { socket, started } = (extras.session)(&team.name, session);
                rows.push(MemberStatus {
                    name: session.clone(),
                    kind: RowKind::MainSession,
                    parent: None,
                    state: "orphan".into(),
                    detail: Some(
                        "its terminal runs but no manifest wants it; apply --prune stops it".into(),
                    ),
                    drifted: true,
                    container: None,
                    container_id: None,
                    created_at: started.and_then(rfc3339_epoch),
                    age_secs: None,
                    restarts: 0,
                    next_restart: None,
                    last_exit: None,
                    transcript: None,
                    transcript_bytes: 0,
                    last_activity_at: None,
                    last_activity_secs: None,
                    grants: None,
                    limits_unenforced: false,
                    egress: None,
                    terminal: Some(socket),
                    origin: None,
                    usage: None,
                });
            }
            _ => {}
        }
    }
    TeamStatus {
        team: team.name.clone(),
        engine: engine.to_string(),
        members: rows,
        drifted: plan.team_drifted(&team.name),
    }
}

/// A member's egress proxy as the plan sees it: down (to start), or holding an old list.
fn egress_state(
    team: &Team,
    m: &crate::model::Member,
    plan: &Plan,
    state: String,
    detail: Option<String>,
    drifted: bool,
) -> (String, Option<String>, bool, Option<EgressStatus>) {
    if !matches!(m.access.network, Network::Allow(_)) {
        return (state, detail, drifted, None);
    }
    let ours = |t: &String, member: &String| *t == team.name && *member == m.name;
    let down = plan
        .actions
        .iter()
        .any(|a| matches!(a, Action::StartEgressProxy { team: t, member, .. } if ours(t, member)));
    let stale = plan.actions.iter().any(
        |a| matches!(a, Action::UpdateEgressPolicy { team: t, member, .. } if ours(t, member)),
    );
    let (proxy, note) = if down {
        ("down", Some("egress proxy not running; apply starts it"))
    } else if stale {
        (
            "stale list",
            Some("egress allow list changed; apply gives the proxy the new list"),
        )
    } else {
        ("running", None)
    };
    let egress = Some(EgressStatus {
        proxy: proxy.into(),
        refused: vec![],
        refused_left_out: LeftOut::default(),
        suggested_grant: None,
        not_suggested: vec![],
        not_suggested_more: 0,
        last_minute: EgressCounts::default(),
    });
    let Some(note) = note else {
        return (state, detail, drifted, egress);
    };
    let state = if down && state == "running" {
        "egress down".to_string()
    } else {
        state
    };
    let detail = Some(match detail {
        Some(d) => format!("{d}; {note}"),
        None => note.to_string(),
    });
    (state, detail, true, egress)
}
