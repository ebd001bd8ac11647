//! Building a team's status from its model, what was observed and the plan made from them.
//! Pure: the facts on disk come in as `StatusFacts`, so every row is tested without an
//! engine, and a row's verdict is the plan's (status, diff and apply --dry-run agree).

use std::path::{Path, PathBuf};

use super::diff::{action_text, drift_text, short};
use super::facts::{MemberFacts, StatusFacts, TranscriptUsage};
use super::rows::{
    AgentStatus, EgressCounts, EgressStatus, Grants, LeftOut, MemberStatus, OriginStatus, RowKind,
    TeamStatus,
};
use crate::core::container::{LastExit, labels, rfc3339, rfc3339_epoch};
use crate::model::{MainSession, Member, Network, Parent, Team};
use crate::plan::{
    Action, ContainerOp, ContainerRef, ContainerState, Drift, Finding, Observed, ObservedContainer,
    Op, Plan, Removal, ServerOp, SessionOp,
};

/// A member's grants, with the write grants its uid cannot write marked.
fn grants_of(m: &Member, facts: Option<&MemberFacts>) -> Grants {
    let mut g = Grants::of(&m.access);
    if let Some(f) = facts {
        g.not_writable = f.not_writable.clone();
        g.not_writable_by = f.not_writable_by;
    }
    g
}

/// Where a main session's transcript is: its own `transcriptDir`, else in the team's
/// session folder.
pub fn session_transcript(team: &Team, s: &MainSession) -> PathBuf {
    if s.transcript_dir.as_os_str().is_empty() {
        crate::core::layout::session_transcript_dir(&team.session_dir, &s.name)
    } else {
        s.transcript_dir.clone()
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
/// and apply --dry-run give one verdict. Rows come in a fixed order: main sessions, members,
/// strangers, then what the plan found and leaves alone.
pub fn team_status(
    team: &Team,
    engine: &str,
    observed: &Observed,
    plan: &Plan,
    facts: &StatusFacts,
) -> TeamStatus {
    let inputs = Inputs {
        team,
        observed,
        plan,
        facts,
    };
    let mut rows: Vec<MemberStatus> = team
        .sessions
        .iter()
        .map(|s| inputs.session_row(s))
        .collect();
    rows.extend(team.members.iter().map(|m| inputs.member_row(m)));
    rows.extend(inputs.stranger_rows());
    rows.extend(plan.findings.iter().filter_map(|f| inputs.finding_row(f)));
    for row in &mut rows {
        inputs.pace(row);
    }
    TeamStatus {
        team: team.name.clone(),
        engine: engine.to_string(),
        members: rows,
        drifted: plan.team_drifted(&team.name),
        board: facts.boards.get(&team.name).copied(),
    }
}

/// What a team's rows are built from, so that each kind of row is a function of its own.
struct Inputs<'a> {
    team: &'a Team,
    observed: &'a Observed,
    plan: &'a Plan,
    facts: &'a StatusFacts,
}

impl<'a> Inputs<'a> {
    /// The container of `member` that the row shows: one ateam made and recorded, and not a
    /// replacement still under its temporary name.
    fn container(&self, member: &str) -> Option<&'a ObservedContainer> {
        let team = self.team.name.as_str();
        self.observed.containers.iter().find(|c| {
            c.labels.get(labels::TEAM).map(String::as_str) == Some(team)
                && c.labels.get(labels::MEMBER).map(String::as_str) == Some(member)
                && self.observed.recorded.contains(&c.id)
                && !crate::core::container::is_replacement(
                    &crate::core::container::container_name(team, member),
                    &c.name,
                    &c.labels,
                )
        })
    }

    /// A crash-looping row the running controller waits to restart: when, and why it is
    /// not running meanwhile.
    fn pace(&self, row: &mut MemberStatus) {
        if let Some(due) = self.facts.restart_due(&self.team.name, &row.name) {
            row.next_restart = Some(due.clone());
            row.detail = Some(format!(
                "crash-looping; the controller restarts it at {due}"
            ));
        }
    }

    /// What the plan would do about this row, in diff's words: the detail of a row whose
    /// state alone does not say why it drifted.
    fn apply_would(&self, subject: &str) -> Option<String> {
        let lines: Vec<String> = self
            .plan
            .actions
            .iter()
            .filter(|a| a.subject() == (self.team.name.as_str(), subject))
            .map(action_text)
            .collect();
        (!lines.is_empty()).then(|| format!("apply would: {}", lines.join("; ")))
    }

    fn drifted(&self, subject: &str) -> bool {
        self.plan.subject_drifted(&self.team.name, subject)
    }

    /// A main session's row: running unless the plan starts it (or promotes a member into
    /// it), with its terminal, its transcript and where it came from.
    fn session_row(&self, s: &MainSession) -> MemberStatus {
        let (team, facts) = (self.team, self.facts);
        let running = !self.plan.actions.iter().any(|a| {
            a.subject() == (&team.name, &s.name)
                && matches!(
                    a.op,
                    Op::Session(SessionOp::Start { .. } | SessionOp::Promote { .. })
                )
        });
        let terminal = facts.session(&team.name, &s.name);
        let transcript = session_transcript(team, s);
        let TranscriptUsage { bytes, last_change } = facts.transcript(&transcript);
        let started = terminal.and_then(|t| t.started).filter(|_| running);
        let origin = match (&s.promoted_from, &s.takes_over) {
            (Some(m), _) => Some(format!("promoted from member {m}")),
            (None, Some(old)) => Some(format!("took over from {old}")),
            (None, None) => None,
        };
        MemberStatus {
            name: s.name.clone(),
            kind: RowKind::MainSession,
            parent: None,
            state: if running {
                "running".into()
            } else {
                "not running".into()
            },
            detail: if running {
                origin
            } else {
                self.apply_would(&s.name)
            },
            drifted: self.drifted(&s.name),
            container: None,
            container_id: None,
            created_at: started.and_then(rfc3339_epoch),
            age_secs: started.map(|t| (facts.now_secs() - t).max(0) as u64),
            restarts: 0,
            next_restart: None,
            last_exit: None,
            transcript: Some(transcript),
            transcript_bytes: bytes,
            last_activity_at: last_change.map(rfc3339),
            last_activity_secs: last_change.map(|t| facts.secs_since(t)),
            grants: None,
            limits_unenforced: false,
            egress: None,
            terminal: terminal.map(|t| t.socket.clone()),
            origin: None,
            usage: None,
            workspace: None,
            agent: None,
        }
    }

    /// A member's row: the state of its container (or why apply would touch it), then of
    /// its egress proxy and its helper server; what it used and what it may use.
    fn member_row(&self, m: &Member) -> MemberStatus {
        let (team, facts) = (self.team, self.facts);
        let c = self.container(&m.name);
        let known = facts.member(&team.name, &m.name);
        let (state, detail) = self.member_state(m, c);
        let drifted = self.drifted(&m.name);
        let detail = match detail {
            None if drifted => self.apply_would(&m.name),
            d => d,
        };
        let (state, detail, drifted, mut egress) =
            egress_state(team, m, self.plan, state, detail, drifted);
        if let (Some(e), Some(logged)) = (egress.as_mut(), known.and_then(|k| k.egress.as_ref())) {
            e.add_refusals(
                &team.name,
                &m.access,
                logged.refused.clone(),
                logged.grant_source.as_deref(),
            );
            e.last_minute = logged.last_minute;
            e.approvals = logged.approvals.clone();
        }
        let state = if self.helpers_down(m) && state == "running" {
            "helpers down".to_string()
        } else {
            state
        };
        let TranscriptUsage { bytes, last_change } = facts.transcript(&m.transcript_dir);
        MemberStatus {
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
            age_secs: c.map(|c| facts.age(c)),
            restarts: known.map_or(0, |k| k.restarts),
            next_restart: None,
            last_exit: later(
                known.and_then(|k| k.last_exit.clone()),
                c.and_then(|c| c.last_exit.clone()),
            ),
            transcript: Some(m.transcript_dir.clone()),
            transcript_bytes: bytes,
            last_activity_at: last_change.map(rfc3339),
            last_activity_secs: last_change.map(|t| facts.secs_since(t)),
            grants: Some(grants_of(m, known)),
            limits_unenforced: self.observed.limits_unenforced && c.is_some(),
            egress,
            terminal: None,
            origin: Some(OriginStatus::of(&m.origin)),
            usage: c.and_then(|c| facts.usage_of(c)),
            workspace: None,
            agent: agent_status(m, c, known),
        }
    }

    /// A member's state and why, from its container `c` and what the plan does to it: a
    /// conflict, a suspension or a missing container first, then a planned replacement or rename, else
    /// what the engine says.
    fn member_state(&self, m: &Member, c: Option<&ObservedContainer>) -> (String, Option<String>) {
        let team = self.team.name.as_str();
        let conflict = self.plan.findings.iter().any(|f| matches!(f, Finding::Conflict { team: t, member, .. } if *t == team && *member == m.name));
        if conflict {
            return (
                "conflict".to_string(),
                Some("a container ateam did not make holds its name".to_string()),
            );
        }
        let suspended = self.plan.findings.iter().find_map(|f| {
            let Finding::Suspended {
                team: t,
                member,
                since,
            } = f
            else {
                return None;
            };
            (*t == team && *member == m.name).then_some(since)
        });
        if let Some(since) = suspended {
            return (
                "suspended".to_string(),
                Some(format!(
                    "since {since}; its state is kept; `ateam resume {}` brings it back",
                    m.name
                )),
            );
        }
        let Some(c) = c else {
            return ("missing".into(), None);
        };
        let planned = self
            .plan
            .actions
            .iter()
            .filter(|a| a.subject() == (team, m.name.as_str()))
            .find_map(ContainerPlan::of);
        match planned {
            Some(ContainerPlan::Recreate(reason)) => {
                let state = match reason {
                    Drift::Policy { .. } => "policy violation",
                    Drift::Spec { .. } | Drift::SpecHash { .. } | Drift::Dead => "drifted",
                    // Status never asks for a restart.
                    Drift::Asked => "restarting",
                };
                (state.into(), Some(drift_text(reason)))
            }
            Some(ContainerPlan::RestoreName(name)) => (
                "renamed".into(),
                Some(format!(
                    "renamed to {}; apply names it {name} again",
                    c.name
                )),
            ),
            Some(ContainerPlan::BringUp) => engine_state(c, true),
            None => engine_state(c, false),
        }
    }

    /// The member's helper server is silent (the plan starts it): its requests fail until
    /// apply, or the controller, starts the server.
    fn helpers_down(&self, m: &Member) -> bool {
        self.plan.actions.iter().any(|a| {
            a.subject() == (&self.team.name, &m.name)
                && matches!(a.op, Op::Server(ServerOp::StartHelper))
        })
    }

    /// Containers with a member's labels that ateam did not make: those the plan leaves,
    /// then those it removes, a row each.
    fn stranger_rows(&self) -> Vec<MemberStatus> {
        let found = self.plan.findings.iter().filter_map(stranger_found);
        let removed = self.plan.actions.iter().filter_map(stranger_removed);
        found
            .chain(removed)
            .filter(|(t, _, _)| **t == self.team.name)
            .map(|(_, member, container)| {
                self.unwanted_row(
                    member,
                    container,
                    "stranger",
                    format!(
                        "{} {} carries ateam's labels but ateam did not make it: never adopted nor released; apply removes it when it holds a member's name, --prune in any case",
                        container.name,
                        short(&container.id)
                    ),
                )
            })
            .collect()
    }

    /// The row of something the plan found and leaves alone: an orphan container, a kept
    /// transcript, a terminal no manifest wants. The other findings show elsewhere: a
    /// conflict and a finished member on the member's row, a stranger among the strangers.
    fn finding_row(&self, f: &Finding) -> Option<MemberStatus> {
        let ours = |t: &String| *t == self.team.name;
        match f {
            Finding::Orphan {
                team,
                member,
                container,
            } => ours(team).then(|| {
                self.unwanted_row(
                    member,
                    container,
                    "orphan",
                    "no manifest wants it; apply --prune removes it".into(),
                )
            }),
            Finding::RetainedTranscript { team, member, path } => {
                ours(team).then(|| self.retained_row(member, path))
            }
            Finding::OrphanSession { team, session } => {
                ours(team).then(|| self.orphan_session_row(session))
            }
            Finding::Conflict { .. }
            | Finding::Stranger { .. }
            | Finding::Finished { .. }
            | Finding::Suspended { .. } => None,
        }
    }

    /// A container that is no member of the manifests: an orphan or a stranger.
    fn unwanted_row(
        &self,
        member: &str,
        container: &ContainerRef,
        state: &str,
        detail: String,
    ) -> MemberStatus {
        let c = self
            .observed
            .containers
            .iter()
            .find(|c| c.id == container.id);
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
            age_secs: c.map(|c| self.facts.age(c)),
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
            usage: c.and_then(|c| self.facts.usage_of(c)),
            workspace: None,
            agent: None,
        }
    }

    /// The kept transcript of a member no manifest wants any more.
    fn retained_row(&self, member: &str, path: &Path) -> MemberStatus {
        let TranscriptUsage { bytes, last_change } = self.facts.transcript(path);
        MemberStatus {
            name: member.to_string(),
            kind: RowKind::Transcript,
            parent: None,
            state: "retained".into(),
            detail: Some(
                "the member is gone; its transcript is kept (delete --purge removes it)".into(),
            ),
            drifted: false,
            container: None,
            container_id: None,
            created_at: None,
            age_secs: None,
            restarts: 0,
            next_restart: None,
            last_exit: None,
            transcript: Some(path.to_path_buf()),
            transcript_bytes: bytes,
            last_activity_at: last_change.map(rfc3339),
            last_activity_secs: last_change.map(|t| self.facts.secs_since(t)),
            grants: None,
            limits_unenforced: false,
            egress: None,
            terminal: None,
            origin: None,
            usage: None,
            workspace: None,
            agent: None,
        }
    }

    /// A main session whose terminal runs though no manifest wants it.
    fn orphan_session_row(&self, session: &str) -> MemberStatus {
        let terminal = self.facts.session(&self.team.name, session);
        MemberStatus {
            name: session.to_string(),
            kind: RowKind::MainSession,
            parent: None,
            state: "orphan".into(),
            detail: Some(
                "its terminal runs but no manifest wants it; apply --prune stops it".into(),
            ),
            drifted: true,
            container: None,
            container_id: None,
            created_at: terminal.and_then(|t| t.started).and_then(rfc3339_epoch),
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
            terminal: terminal.map(|t| t.socket.clone()),
            origin: None,
            usage: None,
            workspace: None,
            agent: None,
        }
    }
}

/// What the plan does to a member's own container, as far as the state on its row tells.
#[derive(Clone, Copy)]
enum ContainerPlan<'p> {
    /// Replaced, for this reason.
    Recreate(&'p Drift),
    /// Renamed back to this name.
    RestoreName(&'p str),
    /// Created, started, or its replacement renamed into place: the engine's state says
    /// the rest.
    BringUp,
}

impl<'p> ContainerPlan<'p> {
    /// `a` as such; none for an action on anything else (a proxy, a session, a folder,
    /// another container).
    fn of(a: &'p Action) -> Option<ContainerPlan<'p>> {
        match a.container_op()? {
            ContainerOp::Recreate { reason, .. } => Some(ContainerPlan::Recreate(reason)),
            ContainerOp::RestoreName { name, .. } => Some(ContainerPlan::RestoreName(name)),
            ContainerOp::Create { .. }
            | ContainerOp::Start { .. }
            | ContainerOp::FinishReplacement { .. } => Some(ContainerPlan::BringUp),
            ContainerOp::Remove { .. } | ContainerOp::Unpause { .. } | ContainerOp::Stop { .. } => {
                None
            }
        }
    }
}

/// A member's state as the engine reports its container; `brought_up`: the plan starts it
/// (an exited one: its restart policy asks for a restart).
fn engine_state(c: &ObservedContainer, brought_up: bool) -> (String, Option<String>) {
    match c.state {
        ContainerState::Running if !c.released => (
            "held at gate".into(),
            Some("started since ateam last checked it (a restart, or an interrupted apply): its command does not run; apply checks and releases it".into()),
        ),
        ContainerState::Running | ContainerState::Restarting => ("running".into(), None),
        ContainerState::Exited { code } => (
            format!("exited {code}"),
            brought_up.then(|| "the restart policy asks for a restart".to_string()),
        ),
        ContainerState::Created => ("created".into(), Some("never started".into())),
        ContainerState::Paused => (
            "paused".into(),
            Some("someone paused it; apply lets it go on".into()),
        ),
        ContainerState::Removing => ("removing".into(), None),
        ContainerState::Dead => ("dead".into(), None),
    }
}

/// An agent member's outcome: its latest task's (escaped: the member wrote it), beside how
/// its container stands.
fn agent_status(
    m: &Member,
    c: Option<&ObservedContainer>,
    known: Option<&MemberFacts>,
) -> Option<AgentStatus> {
    use crate::core::transcript::{Run, outcome};
    let a = m.agent.as_ref()?;
    let facts = known.and_then(|k| k.agent.as_ref());
    let latest = facts.and_then(|f| f.latest()).cloned().map(|t| t.shown());
    let run = match c.map(|c| (c.state, c.released)) {
        Some(
            (ContainerState::Running, true)
            | (ContainerState::Paused | ContainerState::Restarting, _),
        ) => Run::Running,
        Some((ContainerState::Exited { code }, _)) => Run::Exited(Some(code)),
        Some((ContainerState::Dead, _)) => Run::Exited(None),
        // Held at its gate, made and never started, being removed: its command does not run.
        Some(
            (ContainerState::Running, false)
            | (ContainerState::Created | ContainerState::Removing, _),
        )
        | None => Run::NotStarted,
    };
    let o = outcome(latest.as_ref(), run);
    Some(AgentStatus {
        name: a.name.clone(),
        outcome: o.verdict,
        reason: o.reason,
        failed_tools: o.failed_tools,
        tasks: facts.map_or(0, |f| f.tasks.len() as u64),
        task: latest.map(|t| t.prompt).filter(|p| !p.is_empty()),
        session: facts.and_then(|f| f.session.as_ref()).map(|s| {
            crate::core::untrusted::shown(&m.transcript_dir.join(s).to_string_lossy()).into_owned()
        }),
    })
}

/// A stranger the plan leaves: `(team, member, container)`.
fn stranger_found(f: &Finding) -> Option<(&String, &String, &ContainerRef)> {
    match f {
        Finding::Stranger {
            team,
            member,
            container,
        } => Some((team, member, container)),
        Finding::Orphan { .. }
        | Finding::Conflict { .. }
        | Finding::OrphanSession { .. }
        | Finding::RetainedTranscript { .. }
        | Finding::Suspended { .. }
        | Finding::Finished { .. } => None,
    }
}

/// A stranger the plan removes: `(team, member, container)`.
fn stranger_removed(a: &Action) -> Option<(&String, &String, &ContainerRef)> {
    match a.container_op()? {
        ContainerOp::Remove {
            container,
            removal: Removal::Stranger,
        } => Some((&a.team, &a.subject, container)),
        ContainerOp::Remove { .. }
        | ContainerOp::Create { .. }
        | ContainerOp::Recreate { .. }
        | ContainerOp::Start { .. }
        | ContainerOp::FinishReplacement { .. }
        | ContainerOp::RestoreName { .. }
        | ContainerOp::Unpause { .. }
        | ContainerOp::Stop { .. } => None,
    }
}

/// A member's egress proxy as the plan sees it: down (to start), or holding an old list.
fn egress_state(
    team: &Team,
    m: &Member,
    plan: &Plan,
    state: String,
    detail: Option<String>,
    drifted: bool,
) -> (String, Option<String>, bool, Option<EgressStatus>) {
    if !matches!(m.access.network, Network::Allow(_)) {
        return (state, detail, drifted, None);
    }
    let ours = plan
        .actions
        .iter()
        .filter(|a| a.subject() == (&team.name, &m.name));
    let down = ours
        .clone()
        .any(|a| matches!(a.op, Op::Server(ServerOp::StartEgress { .. })));
    let stale = ours
        .clone()
        .any(|a| matches!(a.op, Op::Server(ServerOp::UpdateEgress { .. })));
    let (proxy, note) = if state == "suspended" {
        // Stopped with its member, started again by `resume`.
        ("suspended", None)
    } else if down {
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
        approvals: vec![],
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
