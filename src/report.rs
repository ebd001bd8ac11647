//! What ateam tells people and tools: the plan as a diff, and the status of each team. Pure
//! functions over plans and observations, so the wording is tested without an engine.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

use serde::Serialize;

use crate::core::container::labels;
use crate::manifest::quantity::human_bytes;
use crate::model::{Network, Parent, Team};
use crate::plan::{
    Action, ContainerState, Drift, Finding, Observed, ObservedContainer, Plan, StartReason,
};

/// The plan, one line per change, grouped by team.
pub fn render_diff(plan: &Plan) -> String {
    let mut by_team: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for a in &plan.actions {
        let (team, line) = match a {
            Action::MakeTranscriptDir { team, member, path } => (
                team,
                format!("  + transcript folder of {member}: {}", path.display()),
            ),
            Action::StartEgressProxy { team, member, .. } => {
                (team, format!("  + egress proxy of {member}"))
            }
            Action::UpdateEgressPolicy {
                team,
                member,
                allow,
            } => (
                team,
                format!("  ~ egress allow list of {member}: {}", allow.join(",")),
            ),
            Action::StopEgressProxy { team, member } => {
                (team, format!("  - egress proxy of {member}"))
            }
            Action::StartSession { session } => (
                &session.team,
                format!(
                    "  + start main session {} (tmux -S {})",
                    session.name,
                    session.socket.display()
                ),
            ),
            Action::Create { member } => (
                &member.team,
                format!("  + create {} ({})", member.member, member.spec.name),
            ),
            Action::Recreate { member, reason, .. } => (
                &member.team,
                format!("  ~ recreate {}: {}", member.member, drift_text(reason)),
            ),
            Action::Start {
                team,
                member,
                reason,
                ..
            } => (team, format!("  > start {member}: {}", start_text(reason))),
            Action::RemoveOrphan {
                team,
                member,
                container,
            } => (
                team,
                format!(
                    "  - remove {member} ({}): no manifest wants it",
                    container.name
                ),
            ),
            Action::RemoveDuplicate {
                team,
                member,
                container,
            } => (
                team,
                format!(
                    "  - remove duplicate of {member} ({} {})",
                    container.name,
                    short(&container.id)
                ),
            ),
            Action::FinishReplacement {
                team, member, name, ..
            } => (
                team,
                format!("  ~ finish replacing {member}: rename to {name}"),
            ),
            Action::RestoreName {
                team,
                member,
                container,
                name,
            } => (
                team,
                format!(
                    "  ~ rename {member} back: {} was renamed, its name is {name}",
                    container.name
                ),
            ),
            Action::Unpause { team, member, .. } => {
                (team, format!("  > unpause {member}: someone paused it"))
            }
            Action::RemoveStranger {
                team,
                member,
                container,
            } => (
                team,
                format!(
                    "  - remove stranger {} {}: it carries the labels of {member} but ateam did not make it",
                    container.name,
                    short(&container.id)
                ),
            ),
        };
        by_team.entry(team.clone()).or_default().push(line);
    }
    for f in &plan.findings {
        let (team, line) = match f {
            Finding::Orphan {
                team,
                member,
                container,
            } => (
                team,
                format!(
                    "  ? orphan {member} ({}): kept; --prune removes it",
                    container.name
                ),
            ),
            Finding::Conflict {
                team,
                member,
                container,
                ..
            } => (
                team,
                format!(
                    "  ! conflict: {} exists and ateam did not make it; {member} cannot be created",
                    container.name
                ),
            ),
            Finding::RetainedTranscript { team, member, path } => (
                team,
                format!(
                    "  = transcript of removed member {member} kept: {}",
                    path.display()
                ),
            ),
            Finding::Stranger {
                team,
                member,
                container,
            } => (
                team,
                format!(
                    "  ! stranger {} {}: it carries the labels of {member} but ateam did not make it; never adopted, --prune removes it",
                    container.name,
                    short(&container.id)
                ),
            ),
            Finding::Finished { .. } => continue,
        };
        by_team.entry(team.clone()).or_default().push(line);
    }
    let mut out = String::new();
    for (team, lines) in by_team {
        out.push_str(&format!("team {team}:\n"));
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
    }
    if plan.actions.is_empty() {
        out.push_str("no changes\n");
    }
    out
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

pub fn drift_text(d: &Drift) -> String {
    match d {
        Drift::Spec { changes } => changes
            .iter()
            .map(|c| format!("{} changed from {} to {}", c.field, c.from, c.to))
            .collect::<Vec<_>>()
            .join("; "),
        Drift::SpecHash { from, to } => format!("spec hash changed from {from} to {to}"),
        Drift::Policy { violations } => format!(
            "policy violation: {}",
            violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ),
        Drift::Dead => "the engine marks it dead".into(),
    }
}

pub fn start_text(r: &StartReason) -> String {
    match r {
        StartReason::NeverStarted => "created but never started".into(),
        StartReason::NotReleased => {
            "held at its gate: started since ateam last checked it (a restart, or an interrupted apply)".into()
        }
        StartReason::Restart { code, policy } => {
            format!("exited {code}, restart policy {policy:?}")
        }
    }
}

/// One row of `status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    pub name: String,
    pub kind: &'static str,
    pub parent: String,
    /// running, exited N, missing, drifted, policy violation, orphan, conflict, ...
    pub state: String,
    /// Why, when the state is not plain (the drifted field, the violations).
    pub detail: Option<String>,
    pub container: Option<String>,
    pub age_secs: Option<u64>,
    pub restarts: u64,
    pub transcript: Option<PathBuf>,
    pub transcript_bytes: u64,
    pub last_activity_secs: Option<u64>,
    pub grants: String,
    /// Memory and pids limits are not enforced by this engine (allowed by the team).
    pub limits_unenforced: bool,
    /// When a running controller restarts this crash-looping member next (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_restart: Option<String>,
    /// This row differs from the manifests.
    pub drifted: bool,
    /// Its egress proxy, for a member with an allow list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressStatus>,
}

/// A member's egress: its proxy, and what it refused since the last apply.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressStatus {
    /// `running`, `down` (apply starts it) or `stale list` (apply gives it the new list).
    pub proxy: String,
    pub refused: Vec<crate::egress::log::Refusal>,
    /// The AccessGrant that would allow what was refused, ready to paste.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggested_grant: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TeamStatus {
    pub team: String,
    pub engine: String,
    pub members: Vec<MemberStatus>,
    pub drifted: bool,
}

/// Facts status needs that are not in the plan: read from disk by the caller.
pub struct Extras<'a> {
    pub now: SystemTime,
    pub transcript_usage: &'a dyn Fn(&std::path::Path) -> (u64, Option<SystemTime>),
    pub restarts: &'a dyn Fn(&str, &str) -> u64,
}

/// The status of one team, from its model, what was observed and the plan made from them.
pub fn team_status(
    team: &Team,
    engine: &str,
    observed: &Observed,
    plan: &Plan,
    extras: &Extras,
) -> TeamStatus {
    let secs = |t: SystemTime| {
        extras
            .now
            .duration_since(t)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    };
    let age = |c: &ObservedContainer| {
        let now = extras
            .now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Some((now - c.created).max(0) as u64)
    };
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
    let mut rows = Vec::new();
    for s in &team.sessions {
        let running = !plan.actions.iter().any(|a| matches!(a, Action::StartSession { session } if session.name == s.name && session.team == team.name));
        rows.push(MemberStatus {
            name: s.name.clone(),
            kind: "MainSession",
            parent: "-".into(),
            state: if running {
                "running".into()
            } else {
                "not running".into()
            },
            detail: None,
            container: None,
            age_secs: None,
            restarts: 0,
            transcript: Some(team.session_dir.clone()),
            transcript_bytes: 0,
            last_activity_secs: None,
            grants: "host (your own access)".into(),
            limits_unenforced: false,
            next_restart: None,
            drifted: !running,
            egress: None,
        });
    }
    for m in &team.members {
        let c = mine(&m.name);
        let action = plan.actions.iter().find(|a| match a {
            Action::Create { member } | Action::Recreate { member, .. } => {
                member.team == team.name && member.member == m.name
            }
            Action::Start {
                team: t, member, ..
            }
            | Action::FinishReplacement {
                team: t, member, ..
            }
            | Action::RestoreName {
                team: t, member, ..
            } => *t == team.name && *member == m.name,
            _ => false,
        });
        let conflict = plan.findings.iter().any(|f| matches!(f, Finding::Conflict { team: t, member, .. } if *t == team.name && *member == m.name));
        let (state, detail, drifted) = match (c, action) {
            _ if conflict => (
                "conflict".to_string(),
                Some("a container ateam did not make holds its name".to_string()),
                true,
            ),
            (None, _) => ("missing".into(), None, true),
            (
                Some(_),
                Some(Action::Recreate {
                    reason: r @ Drift::Policy { .. },
                    ..
                }),
            ) => ("policy violation".into(), Some(drift_text(r)), true),
            (Some(_), Some(Action::Recreate { reason, .. })) => {
                ("drifted".into(), Some(drift_text(reason)), true)
            }
            (Some(c), Some(Action::RestoreName { name, .. })) => (
                "renamed".into(),
                Some(format!("renamed to {}; apply names it {name} again", c.name)),
                true,
            ),
            (Some(c), _) => match c.state {
                ContainerState::Running if !c.released => (
                    "held at gate".into(),
                    Some("started since ateam last checked it (a restart, or an interrupted apply): its command does not run; apply checks and releases it".into()),
                    true,
                ),
                ContainerState::Running | ContainerState::Restarting => {
                    ("running".into(), None, false)
                }
                ContainerState::Exited { code } => {
                    let restart_due = action.is_some();
                    (
                        format!("exited {code}"),
                        restart_due.then(|| "the restart policy asks for a restart".to_string()),
                        restart_due,
                    )
                }
                ContainerState::Created => ("created".into(), Some("never started".into()), true),
                ContainerState::Paused => (
                    "paused".into(),
                    Some("someone paused it; apply lets it go on".into()),
                    true,
                ),
                ContainerState::Removing => ("removing".into(), None, true),
                ContainerState::Dead => ("dead".into(), None, true),
            },
        };
        let (state, detail, drifted, egress) = egress_state(team, m, plan, state, detail, drifted);
        let (bytes, last) = (extras.transcript_usage)(&m.transcript_dir);
        rows.push(MemberStatus {
            name: m.name.clone(),
            kind: "Member",
            parent: match &m.parent {
                Parent::MainSession(p) | Parent::Member(p) => p.clone(),
            },
            state,
            detail,
            container: c.map(|c| c.name.clone()),
            age_secs: c.and_then(age),
            restarts: (extras.restarts)(&team.name, &m.name),
            transcript: Some(m.transcript_dir.clone()),
            transcript_bytes: bytes,
            last_activity_secs: last.map(secs),
            grants: grants_summary(&m.access),
            limits_unenforced: observed.limits_unenforced && c.is_some(),
            next_restart: None,
            drifted,
            egress,
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
        |member: &str, container: &crate::plan::ContainerRef, state: &str, detail| MemberStatus {
            name: member.to_string(),
            kind: "Member",
            parent: "-".into(),
            state: state.into(),
            detail: Some(detail),
            container: Some(container.name.clone()),
            age_secs: observed
                .containers
                .iter()
                .find(|c| c.id == container.id)
                .and_then(age),
            restarts: 0,
            transcript: None,
            transcript_bytes: 0,
            last_activity_secs: None,
            grants: "-".into(),
            limits_unenforced: false,
            next_restart: None,
            drifted: true,
            egress: None,
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
                    kind: "Transcript",
                    parent: "-".into(),
                    state: "retained".into(),
                    detail: Some(
                        "the member is gone; its transcript is kept (delete --purge removes it)"
                            .into(),
                    ),
                    container: None,
                    age_secs: None,
                    restarts: 0,
                    transcript: Some(path.clone()),
                    transcript_bytes: bytes,
                    last_activity_secs: last.map(secs),
                    grants: "-".into(),
                    limits_unenforced: false,
                    next_restart: None,
                    drifted: false,
                    egress: None,
                });
            }
            _ => {}
        }
    }
    let drifted = rows.iter().any(|r| r.drifted);
    TeamStatus {
        team: team.name.clone(),
        engine: engine.to_string(),
        members: rows,
        drifted,
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
        suggested_grant: None,
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

/// An allowlist entry as status shows it: one that names a local address exactly (the way to
/// reach a service on this machine on purpose) is marked.
fn allow_entry_shown(h: &str) -> String {
    match crate::core::egress::Entry::parse(h)
        .ok()
        .and_then(|e| e.exact_address())
    {
        Some((ip, _)) if crate::core::egress::special(ip).is_some() => format!("{h}(local)"),
        _ => h.to_string(),
    }
}

fn grants_summary(g: &crate::model::AccessGrant) -> String {
    let names = |v: &[PathBuf]| {
        v.iter()
            .map(|p| {
                p.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "/".into())
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let net = match &g.network {
        Network::None => "none".to_string(),
        Network::Allow(h) => format!(
            "allow {}",
            h.iter()
                .map(|e| allow_entry_shown(e))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Network::Open => "open(widest:any host)".into(),
    };
    let mut parts = Vec::new();
    if !g.read.is_empty() {
        parts.push(format!("ro:{}", names(&g.read)));
    }
    if !g.write.is_empty() {
        parts.push(format!("rw:{}", names(&g.write)));
    }
    parts.push(format!("net:{net}"));
    parts.join(" ")
}

fn ago(secs: Option<u64>) -> String {
    match secs {
        None => "-".into(),
        Some(s) if s < 60 => format!("{s}s"),
        Some(s) if s < 3600 => format!("{}m", s / 60),
        Some(s) if s < 86400 => format!("{}h", s / 3600),
        Some(s) => format!("{}d", s / 86400),
    }
}

/// The table people read.
pub fn render_status(teams: &[TeamStatus]) -> String {
    let mut out = String::new();
    for t in teams {
        out.push_str(&format!(
            "TEAM {} ({}){}\n",
            t.team,
            t.engine,
            if t.drifted { ": drifted" } else { "" }
        ));
        let header = [
            "NAME",
            "KIND",
            "PARENT",
            "STATE",
            "AGE",
            "RESTARTS",
            "TRANSCRIPT",
            "ACTIVE",
            "GRANTS",
        ];
        let rows: Vec<[String; 9]> = t
            .members
            .iter()
            .map(|m| {
                let mut state = m.state.clone();
                if m.limits_unenforced {
                    state.push_str(", limits not enforced");
                }
                [
                    m.name.clone(),
                    m.kind.to_string(),
                    m.parent.clone(),
                    state,
                    ago(m.age_secs),
                    m.restarts.to_string(),
                    if m.kind == "MainSession" {
                        "-".into()
                    } else {
                        human_bytes(m.transcript_bytes)
                    },
                    ago(m.last_activity_secs),
                    m.grants.clone(),
                ]
            })
            .collect();
        let mut width = header.map(str::len);
        for r in &rows {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let line = |cells: Vec<&str>| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    s.push_str(c);
                } else {
                    s.push_str(&format!("{c:<w$}  ", w = width[i]));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        out.push_str(&line(header.to_vec()));
        for r in &rows {
            out.push_str(&line(r.iter().map(String::as_str).collect()));
        }
        for m in t.members.iter().filter(|m| m.detail.is_some()) {
            out.push_str(&format!(
                "  {}: {}\n",
                m.name,
                m.detail.as_deref().unwrap_or_default()
            ));
        }
        if let Some(dir) = t
            .members
            .iter()
            .find(|m| m.kind == "MainSession")
            .and_then(|m| m.transcript.as_ref())
        {
            out.push_str(&format!("  transcripts: {}\n", dir.display()));
        }
        out.push('\n');
    }
    out
}
