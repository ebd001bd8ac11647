//! What the planner decides from besides the two states. Each input is decided elsewhere and
//! handed in, so that a plan is final when `plan()` returns: nobody edits it afterwards.

use std::collections::BTreeMap;
use std::time::SystemTime;

/// The planner's inputs beyond what is wanted and what is there.
///
/// Crash-loop pacing comes in as `deferred`, a set already decided, not as `now` with each
/// member's streak: the planner stays a function of its arguments, with no clock and no memory
/// to update. A streak grows only when a restart is really held back, which the controller
/// learns from the plan it gets back (`Plan::deferred`) and records; a planner given the
/// streaks would have to hand back new streaks as well. The controller asks its
/// `backoff::CrashLoop` of each member "were it to need a restart now, when may it happen?"
/// before planning; the answer holds whether or not the member exited, and the planner uses it
/// only for a member whose restart policy asks for a restart (as kube-runtime keeps timing
/// outside the reconciler, which only says when to look again).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// Remove ateam containers of the teams in scope that no manifest wants.
    pub prune: bool,
    /// Requested helpers no longer wanted (`requests::merge`; `App::look` adds them): their
    /// containers are removed without `--prune`, saying why.
    pub dropped: Vec<Dropped>,
    /// `(team, member)` whose restart, were one due, waits until then (the crash-loop
    /// policy): the plan starts nothing for them and says so in `Plan::deferred`.
    pub deferred: BTreeMap<(String, String), SystemTime>,
    /// Plan actions and findings for this member alone (of the teams in scope), never for a
    /// main session: a helper request brings up one member and is no occasion to change the
    /// others, and the controller heals a member that died with a look at it alone
    /// (`observe::observe_listed`, which reads nothing of the others).
    pub only: Option<String>,
    /// `(team, member)` the person asked to restart: a new container through the gate
    /// (`Drift::Asked`), judged as any apply's before the old one goes.
    pub restart: Option<(String, String)>,
}

impl PlanOptions {
    /// Only `prune` set: what `diff`, `delete` and most tests ask.
    pub fn pruning(prune: bool) -> Self {
        PlanOptions {
            prune,
            ..PlanOptions::default()
        }
    }

    /// Why `(team, member)` goes, when it is a helper no longer wanted.
    pub(super) fn dropped_why(&self, team: &str, member: &str) -> Option<String> {
        self.dropped
            .iter()
            .find(|d| d.team == team && d.member == member)
            .map(|d| format!("a helper no longer wanted: {}", d.why))
    }

    /// Whether the person asked for `(team, member)` to be restarted.
    pub(super) fn asked(&self, team: &str, member: &str) -> bool {
        self.restart
            .as_ref()
            .is_some_and(|(t, m)| t == team && m == member)
    }

    /// When the restart of `(team, member)` may happen, if the crash-loop policy holds it.
    pub(super) fn held_until(&self, team: &str, member: &str) -> Option<SystemTime> {
        self.deferred
            .get(&(team.to_string(), member.to_string()))
            .copied()
    }
}

/// A requested member that is no longer wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// Team name.
    pub team: String,
    /// Member name.
    pub member: String,
    /// Why it is dropped, in words.
    pub why: String,
}
