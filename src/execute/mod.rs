//! Carrying out a plan: actions of one member run in order, members run side by side with
//! bounded concurrency. Every engine and file write of ateam's happens here, one file per
//! kind of action (`Op`): `containers`, `servers`, `sessions`, `host`, `team` (a delete's
//! teardown, after the containers); `preflight` checks
//! before any change; `events` says what was done.
//!
//! Logged: each member's actions run in a `member` span (team, member); each action is one
//! `info` event (its name as in the plan's JSON, the container when one exists, the reason),
//! and each failure one `warn` event with the error (the caller reports it to the user).

mod containers;
mod errors;
mod events;
mod host;
mod preflight;
mod servers;
mod sessions;
mod team;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use futures_util::{StreamExt, stream};
use tracing::{Instrument, debug, info, info_span};

use crate::backend::BackendError;
use crate::plan::spec::DesiredMember;
use crate::plan::{Action, Op, Plan, ServerOp, SessionOp};
use crate::runtime::{ProxyStarting, Runtime};
pub use errors::ActionError;
use events::{about, events_of};

/// The default bound on members brought up at once: min(8, 2 x CPUs).
pub(crate) fn default_concurrency() -> usize {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (2 * cpus).min(8)
}

/// Where an apply reports progress (a terminal display, or plain lines).
pub trait Progress: Send + Sync {
    /// `member` of `team` reached `step`.
    fn step(&self, team: &str, member: &str, step: Step);
}

/// A member's step in an apply, as its progress line shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Its container is being made.
    Creating,
    /// Its container is being checked against the policy, before and after its start.
    Verifying,
    /// Its existing container is being started.
    Starting,
    /// Its old container goes and its replacement takes its name.
    Replacing,
    /// Its container is being removed.
    Removing,
    /// Its container runs, verified.
    Ready,
    /// Its action failed (the failure is reported with the others).
    Failed,
}

impl Step {
    /// The word a person reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Creating => "creating",
            Step::Verifying => "verifying",
            Step::Starting => "starting",
            Step::Replacing => "replacing",
            Step::Removing => "removing",
            Step::Ready => "ready",
            Step::Failed => "failed",
        }
    }

    /// Whether nothing follows it for this member in this apply.
    pub fn is_last(self) -> bool {
        match self {
            Step::Ready | Step::Removing | Step::Failed => true,
            Step::Creating | Step::Verifying | Step::Starting | Step::Replacing => false,
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Progress for no one: the controller, the helper server and `top` log each action
/// (`execute` does) instead.
pub struct Quiet;

impl Progress for Quiet {
    fn step(&self, _: &str, _: &str, _: Step) {}
}

/// One failure, by member.
#[derive(Debug)]
pub struct Failure {
    /// Team name.
    pub team: String,
    /// Member (or main session) name.
    pub member: String,
    /// What went wrong.
    pub error: ActionError,
}

/// Carries out a plan's actions on the runtime's engine.
pub(crate) struct Executor<'a> {
    /// The engine, store and user to act with.
    pub rt: &'a Runtime,
    /// Members acted on at once (`default_concurrency`).
    pub concurrency: usize,
    /// Looks up a secret's value in ateam's environment.
    pub secret: &'a (dyn Fn(&str) -> Option<String> + Sync),
    /// Where progress goes.
    pub progress: &'a dyn Progress,
}

/// Actions of one key run in order. A session's key is apart from any member's.
fn key(a: &Action) -> (String, String) {
    let (team, subject) = a.subject();
    let apart = match &a.op {
        Op::Session(s) => match s {
            SessionOp::Start { .. } | SessionOp::Promote { .. } | SessionOp::Stop { .. } => true,
            // A rollback gives the member its transcript back: before the member's own actions.
            SessionOp::RollBack { .. } => false,
        },
        Op::Container(_) | Op::Server(_) | Op::Host(_) | Op::Team(_) => false,
    };
    let subject = match apart {
        true => format!("session/{subject}"),
        false => subject.to_string(),
    };
    (team.to_string(), subject)
}

impl Executor<'_> {
    /// Runs every action; returns the failures (empty when all went well).
    pub async fn run(&self, plan: &Plan, desired: &[DesiredMember]) -> Vec<Failure> {
        // Owned, not borrowed: the future must be Send for a caller that spawns it (the
        // controller), and rustc cannot prove that of closures over borrowed groups.
        let mut groups: BTreeMap<(String, String), Vec<Action>> = BTreeMap::new();
        for a in &plan.actions {
            groups.entry(key(a)).or_default().push(a.clone());
        }
        let by_name: BTreeMap<(String, String), DesiredMember> = desired
            .iter()
            .map(|m| ((m.team.clone(), m.member.clone()), m.clone()))
            .collect();
        let by_name = Arc::new(by_name);
        stream::iter(groups)
            .map(|((team, member), actions)| {
                let by_name = by_name.clone();
                let span = info_span!("member", team = %team, member = %member);
                async move {
                    let wanted = by_name.get(&(team.clone(), member.clone()));
                    self.one_key(team, member, &actions, wanted).await
                }
                .instrument(span)
            })
            .buffer_unordered(self.concurrency.max(1))
            .filter_map(|f| async move { f })
            .collect()
            .await
    }

    /// The actions of one key, in order, until one fails: its failure.
    async fn one_key(
        &self,
        team: String,
        member: String,
        actions: &[Action],
        wanted: Option<&DesiredMember>,
    ) -> Option<Failure> {
        // The member's proxy, started by its action and waited for by the create (or
        // replacement) that follows it in this group, at its release.
        let mut proxy = None;
        for (n, a) in actions.iter().enumerate() {
            let about = about(a);
            info!(
                action = about.action,
                container = about.container,
                reason = about.reason,
                detail = about.detail.as_deref(),
                "running action"
            );
            let started = Instant::now();
            let launched_next = actions[n + 1..].iter().any(|b| b.made().is_some());
            let Carried { released, done } = match (&a.op, launched_next) {
                (Op::Server(ServerOp::StartEgress { policy, .. }), true) => Carried::done(
                    self.begin_egress_proxy(wanted, &a.team, &a.subject, policy)
                        .map(|starting| proxy = Some(starting)),
                ),
                (op, _) => self.carry_out(a, op, wanted, &mut proxy).await,
            };
            for e in events_of(a, released.as_deref(), done.as_ref().err()) {
                crate::events::record(&self.rt.state_dir, self.rt.owner, &e);
            }
            if let Err(error) = done {
                if let Some(m) = wanted {
                    self.record_failed_start(a, m, &error);
                }
                // At info: the failure is returned and the caller says it (apply prints it;
                // the controller logs it at warn), so a person at the default level does not
                // read it twice. Named here too, for when the span is not recorded.
                info!(
                    team = %team,
                    member = %member,
                    action = about.action,
                    container = about.container,
                    error = %error,
                    elapsed_ms = started.elapsed().as_micros() as f64 / 1e3,
                    "action failed; the member's next actions are skipped"
                );
                self.progress.step(&team, &member, Step::Failed);
                return Some(Failure {
                    team,
                    member,
                    error,
                });
            }
            debug!(
                action = about.action,
                elapsed_ms = started.elapsed().as_micros() as f64 / 1e3,
                "action done"
            );
        }
        None
    }

    /// Carries out an action by the file of its kind; with the container whose command it let
    /// run, if it got that far (its event names it, even when a later step failed).
    async fn carry_out(
        &self,
        a: &Action,
        op: &Op,
        wanted: Option<&DesiredMember>,
        proxy: &mut Option<ProxyStarting>,
    ) -> Carried {
        match op {
            Op::Container(op) => self.container(a, op, wanted, proxy).await,
            Op::Server(op) => Carried::done(self.server(a, op, wanted).await),
            Op::Session(op) => Carried::done(self.session(a, op).await),
            Op::Host(op) => Carried::done(self.host(a, op, wanted)),
            Op::Team(op) => Carried::done(self.team(a, op).await),
        }
    }
}

/// An action carried out: how it ended, and the container whose command it let run, if it got
/// that far (a replacement is released before its old container is removed, and that can
/// still fail).
struct Carried {
    done: Result<(), ActionError>,
    released: Option<String>,
}

impl Carried {
    /// An action that lets no container's command run.
    fn done(done: Result<(), ActionError>) -> Carried {
        Carried {
            done,
            released: None,
        }
    }

    /// A create's outcome: its container is released exactly when it succeeded.
    fn launched(r: Result<String, ActionError>) -> Carried {
        match r {
            Ok(id) => Carried {
                done: Ok(()),
                released: Some(id),
            },
            Err(e) => Carried {
                done: Err(e),
                released: None,
            },
        }
    }
}

/// The error of a failed engine call for `member`, for `map_err`.
fn backend_error(member: &str) -> impl FnOnce(BackendError) -> ActionError {
    let member = member.to_string();
    move |source| ActionError::Backend { member, source }
}

/// A failed step of a main session's start, stop, promotion or rollback.
fn session_step(session: &str, source: crate::sessions::SessionError) -> ActionError {
    ActionError::SessionStep {
        session: session.to_string(),
        source: Box::new(source),
    }
}

/// Runs `f` (a terminal, a detached process, their files) off the async workers; a task that
/// panicked or was cancelled is said as a failure of `subject`.
async fn blocking<T: Send + 'static>(
    subject: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ActionError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ActionError::Session {
            session: subject.to_string(),
            message: e.to_string(),
        })
}
