//! The planning step of the reconciler: a pure function from what the manifests want and what
//! the machine has to the list of things to do. No I/O happens here, so every case is a table
//! row in the tests.

mod action;
mod members;
pub(crate) mod observed;
mod options;
mod sessions;
pub mod spec;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::core::container::ContainerState;
use crate::core::container::{self as names, labels};
pub use crate::core::session::Promotion;
pub use action::{
    Action, ContainerOp, ContainerRef, Drift, FieldChange, HostOp, Op, Removal, ServerOp,
    SessionOp, StartReason, TeamOp,
};
pub use observed::{Observed, ObservedContainer};
pub use options::{Dropped, PlanOptions};
pub use sessions::ResumeEntry;
pub use spec::{DesiredMember, DesiredState};

/// What to do, and what to tell the user without doing anything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The changes; apply makes those of one member in this order, members side by side.
    pub actions: Vec<Action>,
    /// What the user should know that no action addresses.
    pub findings: Vec<Finding>,
    /// Restarts the crash-loop policy holds back (`PlanOptions::deferred`): nothing is done
    /// for them now, and the controller looks again when the first is due.
    pub deferred: Vec<Deferred>,
    /// Why the plan must not be carried out at all: apply refuses it whole, before any
    /// change (`diff` and `status` show the plan all the same).
    pub refusals: Vec<Refusal>,
}

impl Plan {
    /// Nothing for apply to do (there may still be drift it leaves alone: `drifted`).
    pub(crate) fn is_noop(&self) -> bool {
        self.actions.is_empty()
    }

    /// Whether the machine differs from the manifests: the one definition of drift that
    /// `diff`, `apply --dry-run` and `status` share. Anything apply would do is drift, and
    /// so is what it leaves alone but a person must act on (`Finding::is_drift`): an orphan
    /// kept without `--prune`, a stranger, a conflict.
    pub fn drifted(&self) -> bool {
        !self.actions.is_empty() || self.findings.iter().any(Finding::is_drift)
    }

    /// `drifted`, for one team.
    pub(crate) fn team_drifted(&self, team: &str) -> bool {
        self.drift().any(|(t, _)| t == team)
    }

    /// `drifted`, for one member (or main session) of a team: what status marks on its row.
    pub(crate) fn subject_drifted(&self, team: &str, subject: &str) -> bool {
        self.drift().any(|(t, s)| t == team && s == subject)
    }

    /// `(team, member or main session)` of every action and drift finding.
    pub fn drift(&self) -> impl Iterator<Item = (&str, &str)> {
        self.actions.iter().map(Action::subject).chain(
            self.findings
                .iter()
                .filter(|f| f.is_drift())
                .map(Finding::subject),
        )
    }
}

/// Something the user should know that the plan does not act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "finding", rename_all = "camelCase")]
pub enum Finding {
    /// An ateam container of a team in scope that no manifest wants (`--prune` removes it).
    Orphan {
        /// Team name.
        team: String,
        /// Member name.
        member: String,
        /// The orphaned container.
        container: ContainerRef,
    },
    /// A container holds the name a member needs but ateam (this store) did not make it; it is
    /// never touched.
    Conflict {
        /// Team name.
        team: String,
        /// Member name.
        member: String,
        /// The container that holds the name.
        container: ContainerRef,
        /// Which other ateam store made it, if its labels say so.
        owner: Option<String>,
    },
    /// Exited and its restart policy says to leave it.
    Finished {
        /// Team name.
        team: String,
        /// Member name.
        member: String,
        /// Its exit code.
        code: i64,
    },
    /// A container with this store's labels that ateam did not make (its id is in no record):
    /// never adopted, released or started; `--prune` removes it.
    Stranger {
        /// Team name.
        team: String,
        /// Member name.
        member: String,
        /// The stranger container.
        container: ContainerRef,
    },
    /// A main session's terminal runs that no manifest wants (`--prune` ends it).
    OrphanSession {
        /// Team name.
        team: String,
        /// Session name.
        session: String,
    },
    /// The person suspended it (`ateam suspend`): kept down, with its state, until `ateam
    /// resume`.
    Suspended {
        /// Team name.
        team: String,
        /// Member name.
        member: String,
        /// Since when (RFC 3339).
        since: String,
    },
    /// The transcript of a member that no manifest wants any more; kept until `--purge`.
    RetainedTranscript {
        /// Team name.
        team: String,
        /// Member name.
        member: String,
        /// The transcript directory.
        path: PathBuf,
    },
}

impl Finding {
    /// Whether the machine differs from the manifests here. An orphan, a stranger and a
    /// conflict are drift although apply leaves them (without `--prune`, or ever): the
    /// manifests do not describe them. A finished member and a kept transcript are what the
    /// manifests asked for, a suspended member what the person asked for.
    pub fn is_drift(&self) -> bool {
        match self {
            Finding::Orphan { .. }
            | Finding::Conflict { .. }
            | Finding::Stranger { .. }
            | Finding::OrphanSession { .. } => true,
            Finding::Finished { .. }
            | Finding::Suspended { .. }
            | Finding::RetainedTranscript { .. } => false,
        }
    }

    /// `(team, member)`.
    pub fn subject(&self) -> (&str, &str) {
        match self {
            Finding::Orphan { team, member, .. }
            | Finding::Conflict { team, member, .. }
            | Finding::Finished { team, member, .. }
            | Finding::Stranger { team, member, .. }
            | Finding::Suspended { team, member, .. }
            | Finding::RetainedTranscript { team, member, .. } => (team, member),
            Finding::OrphanSession { team, session } => (team, session),
        }
    }

    /// Its name, as the `finding` tag of its JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Finding::Orphan { .. } => "orphan",
            Finding::Conflict { .. } => "conflict",
            Finding::Finished { .. } => "finished",
            Finding::Stranger { .. } => "stranger",
            Finding::Suspended { .. } => "suspended",
            Finding::RetainedTranscript { .. } => "retainedTranscript",
            Finding::OrphanSession { .. } => "orphanSession",
        }
    }
}

/// A member's restart that waits out its crash-loop delay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deferred {
    /// Team name.
    pub team: String,
    /// Member name.
    pub member: String,
    /// When the restart may happen (as `PlanOptions::deferred` said).
    pub until: SystemTime,
}

/// A reason to carry out none of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "refusal", rename_all = "camelCase")]
pub enum Refusal {
    /// The team would have no main session while members ateam made for it (no longer in
    /// the manifests) still run: nobody would be there to report to.
    NoMainSession {
        /// Team name.
        team: String,
        /// The members that still run.
        members: Vec<String>,
    },
}

/// Plans the changes that make `observed` match `desired`. Everything it decides from is an
/// argument (`PlanOptions`: prune, helpers no longer wanted, restarts held back, one member
/// alone), and nobody edits the plan it returns: apply carries it out as it is, or refuses it
/// whole (`Plan::refusals`).
pub fn plan(desired: &DesiredState, observed: &Observed, opts: PlanOptions) -> Plan {
    let pass = Pass::new(desired, observed, &opts);
    let mut plan = Plan::default();
    let mut ours = pass.ours_and_strangers(&mut plan);
    // Main sessions, promotions and handovers; members being promoted are no orphans.
    let promoting = sessions::plan_sessions(desired, observed, &ours, opts.prune, &mut plan);
    for key in &promoting {
        ours.remove(&(key.0.as_str(), key.1.as_str()));
    }
    for m in &desired.members {
        let mine = ours
            .remove(&(m.team.as_str(), m.member.as_str()))
            .unwrap_or_default();
        if let Some(since) = &m.suspended {
            pass.plan_suspended(m, since, mine, &mut plan);
            continue;
        }
        pass.plan_services(m, &mut plan);
        pass.plan_containers(m, mine, &mut plan);
    }
    let dropped = pass.plan_orphans(ours, &mut plan);
    pass.stop_egress_proxies(&promoting, &mut plan);
    pass.stop_helper_servers(&mut plan);
    pass.retained_transcripts(&promoting, &mut plan);
    // Helpers no longer wanted go after everything else.
    plan.actions.extend(dropped);
    pass.return_tasks(&promoting, &mut plan);
    plan.refusals = leaderless(desired, observed, &plan);
    if let Some(only) = &opts.only {
        plan.actions
            .retain(|a| a.subject().1 == only && !a.is_session());
        plan.findings.retain(|f| f.subject().1 == only);
    }
    plan
}

/// Containers this store made (labelled and recorded), by `(team, member)`.
type Ours<'a> = BTreeMap<(&'a str, &'a str), Vec<&'a ObservedContainer>>;

/// What every step of one planning pass reads.
struct Pass<'a> {
    desired: &'a DesiredState,
    observed: &'a Observed,
    opts: &'a PlanOptions,
    /// The teams in scope: only their containers, proxies and transcripts are looked at.
    in_scope: BTreeSet<&'a str>,
    /// `(team, member)` of every member wanted.
    wanted: BTreeSet<(&'a str, &'a str)>,
}

impl<'a> Pass<'a> {
    fn new(desired: &'a DesiredState, observed: &'a Observed, opts: &'a PlanOptions) -> Self {
        Pass {
            desired,
            observed,
            opts,
            in_scope: desired.teams.iter().map(|t| t.name.as_str()).collect(),
            wanted: desired
                .members
                .iter()
                .map(|m| (m.team.as_str(), m.member.as_str()))
                .collect(),
        }
    }

    /// Ours, grouped by `(team, member)`. Strangers carry the labels but are in no record:
    /// they are never adopted, and planned here.
    fn ours_and_strangers(&self, plan: &mut Plan) -> Ours<'a> {
        let mut ours: Ours<'a> = BTreeMap::new();
        let mut strangers: Vec<((&str, &str), &ObservedContainer)> = Vec::new();
        for c in &self.observed.containers {
            if let Some(key) = owned_key(c, &self.desired.store) {
                if self.observed.recorded.contains(&c.id) {
                    ours.entry(key).or_default().push(c);
                } else if self.in_scope.contains(key.0) {
                    strangers.push((key, c));
                }
            }
        }
        self.plan_strangers(strangers, plan);
        ours
    }

    /// A stranger that holds the name a wanted member's container (or its replacement) needs
    /// is removed as the replacement of that name; any other is reported, or pruned.
    fn plan_strangers(&self, strangers: Vec<((&str, &str), &ObservedContainer)>, plan: &mut Plan) {
        let names: BTreeSet<String> = self
            .desired
            .members
            .iter()
            .flat_map(|m| [m.spec.name.clone(), names::replacement_name(&m.spec.name)])
            .collect();
        for ((team, member), c) in strangers {
            let (team, member, container) = (team.to_string(), member.to_string(), cref(c));
            if names.contains(&c.name) || self.opts.prune {
                let removal = Removal::Stranger;
                plan.actions.push(Action::new(
                    team,
                    member,
                    ContainerOp::Remove { container, removal },
                ));
            } else {
                plan.findings.push(Finding::Stranger {
                    team,
                    member,
                    container,
                });
            }
        }
    }

    /// Left over: ours but not wanted. Reported, or removed with `--prune`; a helper no
    /// longer wanted is removed all the same, saying why, and returned to go last.
    fn plan_orphans(&self, ours: Ours<'_>, plan: &mut Plan) -> Vec<Action> {
        let mut dropped = Vec::new();
        for ((team, member), containers) in ours {
            if !self.in_scope.contains(team) || self.wanted.contains(&(team, member)) {
                continue;
            }
            let why = self.opts.dropped_why(team, member);
            for c in containers {
                let (team, member, container) = (team.to_string(), member.to_string(), cref(c));
                let why = match (self.opts.prune, why.clone()) {
                    (false, None) => {
                        plan.findings.push(Finding::Orphan {
                            team,
                            member,
                            container,
                        });
                        continue;
                    }
                    (true, why) | (false, why @ Some(_)) => why,
                };
                let removal = Removal::Orphan { why };
                let remove = Action::new(team, member, ContainerOp::Remove { container, removal });
                match self.opts.prune {
                    true => plan.actions.push(remove),
                    false => dropped.push(remove),
                }
            }
        }
        dropped
    }

    /// Egress proxies of members that no longer have an allowlist: stopped once their
    /// container goes (a recreate without one, a prune), or at once when none is left.
    fn stop_egress_proxies(&self, promoting: &BTreeSet<(String, String)>, plan: &mut Plan) {
        let (desired, observed) = (self.desired, self.observed);
        for (team, member) in &observed.egress_proxies {
            if !self.in_scope.contains(team.as_str())
                || desired
                    .members
                    .iter()
                    .any(|m| m.team == *team && m.member == *member && m.egress.is_some())
            {
                continue;
            }
            // A dropped helper's or fork's container goes in this plan, with or without prune.
            let container_stays = !self.opts.prune
                && self.opts.dropped_why(team, member).is_none()
                && !promoting.contains(&(team.clone(), member.clone()))
                && !self.wanted.contains(&(team.as_str(), member.as_str()))
                && observed.containers.iter().any(|c| {
                    observed.recorded.contains(&c.id)
                        && owned_key(c, &desired.store) == Some((team.as_str(), member.as_str()))
                });
            if !container_stays {
                plan.actions
                    .push(Action::new(team, member, ServerOp::StopEgress));
            }
        }
    }

    /// Tasks held on the board by members that left the manifests, whose agent crashed, or
    /// whose container is made again go back to `todo` (a promoted member keeps them).
    fn return_tasks(&self, promoting: &BTreeSet<(String, String)>, plan: &mut Plan) {
        for (team, member) in &self.observed.board_held {
            let key = (team.clone(), member.clone());
            if !self.in_scope.contains(team.as_str()) || promoting.contains(&key) {
                continue;
            }
            let wanted = self
                .desired
                .members
                .iter()
                .find(|m| m.team == *team && m.member == *member);
            let why = match wanted {
                None if self
                    .desired
                    .sessions
                    .iter()
                    .any(|s| s.team == *team && s.name == *member) =>
                {
                    continue;
                }
                // Its container is kept (no --prune) and may still be at work.
                None if self.still_runs(team, member, plan) => continue,
                None => Some(format!("member {member} is in no manifest any more")),
                // Its command starts again at `resume`: its work is not to wait for it.
                Some(m) if m.suspended.is_some() => Some(format!("member {member} is suspended")),
                Some(m) => self.left_why(m, plan),
            };
            if let Some(why) = why {
                plan.actions
                    .push(Action::new(team, member, HostOp::ReturnTasks { why }));
            }
        }
    }

    /// Whether a member no manifest wants still has a live container this plan keeps.
    fn still_runs(&self, team: &str, member: &str, plan: &Plan) -> bool {
        let removed = plan.actions.iter().any(|a| {
            a.subject() == (team, member)
                && matches!(
                    a.op,
                    Op::Container(ContainerOp::Remove {
                        removal: Removal::Orphan { .. },
                        ..
                    })
                )
        });
        let name = crate::core::container::container_name(team, member);
        !removed
            && self
                .observed
                .containers
                .iter()
                .any(|c| c.name == name && c.state.is_live())
    }

    /// Why a wanted member holds no work any more, if it does not: its container is made
    /// again, is gone, or its agent exited with an error.
    fn left_why(&self, m: &DesiredMember, plan: &Plan) -> Option<String> {
        let member = &m.member;
        for a in &plan.actions {
            if a.subject() != (&m.team, member) {
                continue;
            }
            match a.container_op() {
                Some(ContainerOp::Recreate { .. }) => {
                    return Some(format!(
                        "member {member} is replaced (its container is made again)"
                    ));
                }
                Some(ContainerOp::Create { .. }) => {
                    return Some(format!("member {member}'s container is gone"));
                }
                _ => {}
            }
        }
        self.observed
            .containers
            .iter()
            .filter(|c| c.name == m.spec.name && self.observed.recorded.contains(&c.id))
            .find_map(|c| match c.state {
                ContainerState::Exited { code } if code != 0 => {
                    Some(format!("member {member}'s agent exited {code}"))
                }
                ContainerState::Exited { .. }
                | ContainerState::Created
                | ContainerState::Running
                | ContainerState::Paused
                | ContainerState::Restarting
                | ContainerState::Removing
                | ContainerState::Dead => None,
            })
    }

    /// Helper servers of members no longer wanted, or whose team turned requests off: at
    /// once (a member no manifest wants has nobody to ask for).
    fn stop_helper_servers(&self, plan: &mut Plan) {
        for (team, member) in &self.observed.helper_servers {
            let wants = self
                .desired
                .members
                .iter()
                .any(|m| m.team == *team && m.member == *member && m.helpers.is_some());
            if self.in_scope.contains(team.as_str()) && !wants {
                plan.actions
                    .push(Action::new(team, member, ServerOp::StopHelper));
            }
        }
    }

    /// Transcripts of members no manifest wants any more: reported, never removed here.
    fn retained_transcripts(&self, promoting: &BTreeSet<(String, String)>, plan: &mut Plan) {
        for t in &self.desired.teams {
            let members_dir = crate::core::layout::transcripts_dir(&t.session_dir);
            for dir in &self.observed.transcript_dirs {
                let Some(name) = dir.strip_prefix(&members_dir).ok().and_then(|r| r.to_str())
                else {
                    continue;
                };
                if !name.contains('/')
                    && !self.wanted.contains(&(t.name.as_str(), name))
                    && !promoting.contains(&(t.name.clone(), name.to_string()))
                {
                    plan.findings.push(Finding::RetainedTranscript {
                        team: t.name.clone(),
                        member: name.to_string(),
                        path: dir.clone(),
                    });
                }
            }
        }
    }
}

/// A team left without a main session while members it had still run (kept as orphans: no
/// `--prune`): nobody would be there to report to. (Members still in the manifests always
/// have a session: validation resolves every parent chain to one.)
fn leaderless(desired: &DesiredState, observed: &Observed, plan: &Plan) -> Vec<Refusal> {
    let live = |id: &str| {
        observed
            .containers
            .iter()
            .any(|c| c.id == id && c.state.is_live())
    };
    let mut refusals = Vec::new();
    for t in &desired.teams {
        if desired.sessions.iter().any(|s| s.team == t.name) {
            continue;
        }
        let mut members: Vec<String> = Vec::new();
        for f in &plan.findings {
            if let Finding::Orphan {
                team,
                member,
                container,
            } = f
                && *team == t.name
                && live(&container.id)
            {
                members.push(member.clone());
            }
        }
        members.dedup();
        if !members.is_empty() {
            refusals.push(Refusal::NoMainSession {
                team: t.name.clone(),
                members,
            });
        }
    }
    refusals
}

/// Field-by-field differences; maps are walked into, lists are compared whole.
pub(crate) fn diff_values(path: &str, old: &Value, new: &Value, out: &mut Vec<FieldChange>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                diff_values(
                    &p,
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        _ if old != new => out.push(FieldChange {
            field: path.to_string(),
            from: old.clone(),
            to: new.clone(),
        }),
        _ => {}
    }
}

/// `(team, member)` of a container this store made.
fn owned_key<'a>(c: &'a ObservedContainer, store: &str) -> Option<(&'a str, &'a str)> {
    if c.labels.get(labels::MANAGED_BY).map(String::as_str) != Some("ateam")
        || c.labels.get(labels::STORE).map(String::as_str) != Some(store)
    {
        return None;
    }
    Some((
        c.labels.get(labels::TEAM)?.as_str(),
        c.labels.get(labels::MEMBER)?.as_str(),
    ))
}

fn cref(c: &ObservedContainer) -> ContainerRef {
    ContainerRef {
        id: c.id.clone(),
        name: c.name.clone(),
    }
}
