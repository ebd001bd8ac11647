//! The members' crash-loop records: what a restart waits, asked before planning and told
//! what the plan did after.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::controller::backoff::{CrashLoop, CrashLoopConfig};
use crate::plan::{ContainerOp, Plan, StartReason};

/// Every member's crash-loop record, by `(team, member)`: asked before planning (`holds`),
/// told what the plan did after (`record`). The first exit is restarted at once (as the
/// kubelet does); each quick exit after it waits 10 s, 20 s, … up to 5 min; a run of 10 min
/// resets the count (`backoff::CrashLoop`).
#[derive(Debug, Default)]
pub(in crate::controller) struct Restarts(BTreeMap<(String, String), CrashLoop>);

/// A restart that began to wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::controller) struct Waiting {
    pub team: String,
    pub member: String,
    pub delay: Duration,
    /// Since ateam last started it.
    pub ran_for: Duration,
}

impl Restarts {
    /// The planner's input for `team` (`PlanOptions::deferred`): each member whose restart,
    /// were one due at `now`, would wait; until when, on the wall clock (`wall` is `now`).
    pub(in crate::controller) fn holds(
        &self,
        team: &str,
        now: Instant,
        wall: SystemTime,
    ) -> BTreeMap<(String, String), SystemTime> {
        self.0
            .iter()
            .filter(|((t, _), _)| t == team)
            .filter_map(|(key, c)| c.hold(now).map(|until| (key.clone(), wall + (until - now))))
            .collect()
    }

    /// What the plan made at `now` (the time `holds` was asked): its restarts began, its
    /// deferrals wait. Returns the deferrals that began to wait now.
    pub(in crate::controller) fn record(
        &mut self,
        plan: &Plan,
        cfg: CrashLoopConfig,
        now: Instant,
    ) -> Vec<Waiting> {
        for a in &plan.actions {
            if let Some(ContainerOp::Start {
                reason: StartReason::Restart { .. },
                ..
            }) = a.container_op()
            {
                self.0
                    .entry((a.team.clone(), a.subject.clone()))
                    .or_insert_with(|| CrashLoop::new(cfg))
                    .started(now);
            }
        }
        let mut began = Vec::new();
        for d in &plan.deferred {
            let Some(c) = self.0.get_mut(&(d.team.clone(), d.member.clone())) else {
                continue;
            };
            let ran_for = c.ran_for(now);
            if let Some(until) = c.hold(now)
                && c.wait(until)
            {
                began.push(Waiting {
                    team: d.team.clone(),
                    member: d.member.clone(),
                    delay: until - now,
                    ran_for,
                });
            }
        }
        began
    }

    /// `team/member` of each restart waiting out its delay.
    pub(in crate::controller) fn waiting(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|(_, c)| c.due().is_some())
            .map(|((t, m), _)| format!("{t}/{m}"))
            .collect()
    }
}
