//! Main sessions in the plan: a terminal to start, a promotion to carry out, finish or undo,
//! and what a session that takes over another is told of the team's members.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Action, ContainerState, Finding, Observed, ObservedContainer, Plan, SessionOp, cref};
use crate::core::layout;
use crate::plan::spec::{DesiredSession, DesiredState};

/// One member, as a session that takes over is told of it in its resume file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeEntry {
    /// The member's name.
    pub member: String,
    /// `running`, `exited 3`, `no container`...
    pub state: String,
    /// Its transcript folder.
    pub transcript: PathBuf,
}

/// Plans the team's main sessions; returns the members being promoted (team, name), whose
/// containers the promotion takes care of (they are no orphans).
pub(super) fn plan_sessions(
    desired: &DesiredState,
    observed: &Observed,
    ours: &BTreeMap<(&str, &str), Vec<&ObservedContainer>>,
    prune: bool,
    plan: &mut Plan,
) -> BTreeSet<(String, String)> {
    let mut promoting = BTreeSet::new();
    let in_scope: BTreeSet<&str> = desired.teams.iter().map(|t| t.name.as_str()).collect();
    stop_unwanted(desired, observed, &in_scope, prune, plan);
    roll_back(desired, observed, &in_scope, plan);
    for s in &desired.sessions {
        let resume = resume_entries(s, desired, ours);
        if let Some(from) = &s.promoted_from {
            let journal = observed
                .promotions
                .iter()
                .find(|j| j.team == s.team && j.name == s.name);
            let containers: Vec<_> = ours
                .get(&(s.team.as_str(), s.name.as_str()))
                .map(|v| v.iter().map(|c| cref(c)).collect())
                .unwrap_or_default();
            // Something of the member is left (a journal, a container, its transcript):
            // the promotion is still to do. Otherwise it is done, or there was no member.
            if journal.is_some()
                || !containers.is_empty()
                || observed.transcript_dirs.contains(from)
            {
                promoting.insert((s.team.clone(), s.name.clone()));
                let op = SessionOp::Promote {
                    session: Box::new(s.clone()),
                    containers,
                    journal: journal.map(|j| Box::new(j.clone())),
                    resume,
                };
                plan.actions.push(Action::session(s, op));
                continue;
            }
        }
        if !observed.live_sockets.contains(&s.socket) {
            let session = Box::new(s.clone());
            plan.actions
                .push(Action::session(s, SessionOp::Start { session, resume }));
        }
    }
    promoting
}

/// Terminals no manifest wants: ended when a session takes over (its members now report to
/// the heir, which resumes where this one stopped) or with --prune; else reported.
fn stop_unwanted(
    desired: &DesiredState,
    observed: &Observed,
    in_scope: &BTreeSet<&str>,
    prune: bool,
    plan: &mut Plan,
) {
    for (team, name) in &observed.live_sessions {
        // (A promotion being undone stops its own session.)
        if !in_scope.contains(team.as_str())
            || desired
                .sessions
                .iter()
                .any(|s| s.team == *team && s.name == *name)
            || observed
                .promotions
                .iter()
                .any(|j| j.team == *team && j.name == *name)
        {
            continue;
        }
        let heir = desired
            .sessions
            .iter()
            .find(|s| s.team == *team && s.takes_over.as_deref() == Some(name.as_str()));
        if heir.is_some() || prune {
            let socket = desired
                .teams
                .iter()
                .find(|t| t.name == *team)
                .map(|t| layout::session_socket_in(&layout::session_dir_in(&t.run_dir, name)))
                .unwrap_or_default();
            let taken_over_by = heir.map(|h| h.name.clone());
            let op = SessionOp::Stop {
                socket,
                taken_over_by,
            };
            plan.actions.push(Action::new(team, name, op));
        } else {
            plan.findings.push(Finding::OrphanSession {
                team: team.clone(),
                session: name.clone(),
            });
        }
    }
}

/// A promotion left half done that the manifests no longer ask for: undone first, so that
/// the member's own actions (keyed by its name, run after) find its transcript back.
fn roll_back(
    desired: &DesiredState,
    observed: &Observed,
    in_scope: &BTreeSet<&str>,
    plan: &mut Plan,
) {
    for j in &observed.promotions {
        let asked = desired
            .sessions
            .iter()
            .any(|s| s.team == j.team && s.name == j.name && s.promoted_from.is_some());
        if !asked && in_scope.contains(j.team.as_str()) {
            let journal = Box::new(j.clone());
            let op = SessionOp::RollBack { journal };
            plan.actions.push(Action::new(&j.team, &j.name, op));
        }
    }
}

/// What a session that takes over is told of the team: each member, as it stands.
fn resume_entries(
    s: &DesiredSession,
    desired: &DesiredState,
    ours: &BTreeMap<(&str, &str), Vec<&ObservedContainer>>,
) -> Vec<ResumeEntry> {
    if s.takes_over.is_none() {
        return vec![];
    }
    desired
        .members
        .iter()
        .filter(|m| m.team == s.team)
        .map(|m| {
            let c = ours.get(&(m.team.as_str(), m.member.as_str()));
            ResumeEntry {
                member: m.member.clone(),
                state: state_text(
                    c.and_then(|v| v.iter().map(|c| c.state).max_by_key(|s| s.is_live())),
                ),
                transcript: m.transcript_dir.clone(),
            }
        })
        .collect()
}

fn state_text(s: Option<ContainerState>) -> String {
    match s {
        None => "no container".into(),
        Some(ContainerState::Running) => "running".into(),
        Some(ContainerState::Exited { code }) => format!("exited {code}"),
        Some(other) => format!("{other:?}").to_lowercase(),
    }
}
