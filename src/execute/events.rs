//! What the log and `ateam events` say of an action carried out.

use super::ActionError;
use crate::events::{Event, EventKind as K};
use crate::plan::{Action, ContainerOp, HostOp, Op, Removal, SessionOp, StartReason};
use crate::report::{drift_text, start_text};
use crate::runtime::RunError;

/// What the log says about an action.
#[derive(Debug, PartialEq)]
pub(super) struct About<'a> {
    /// Its name, as the plan's JSON says it (`diff -o json`).
    pub(super) action: &'static str,
    /// The container it acts on, when one exists before it runs.
    pub(super) container: Option<&'a str>,
    /// Why the plan wants it: a short token (for a recreate and a start, the `kind` of its
    /// `Drift` or the name of its `StartReason`, as in the plan's JSON).
    pub(super) reason: &'static str,
    /// The reason in words, when there is more to say than the token (as `diff` says it).
    pub(super) detail: Option<String>,
}

pub(super) fn about(a: &Action) -> About<'_> {
    let detail = match a.container_op() {
        Some(ContainerOp::Recreate { reason, .. }) => Some(drift_text(reason)),
        Some(ContainerOp::Start { reason, .. }) => Some(start_text(reason)),
        Some(
            ContainerOp::Create { .. }
            | ContainerOp::Remove { .. }
            | ContainerOp::FinishReplacement { .. }
            | ContainerOp::RestoreName { .. }
            | ContainerOp::Unpause { .. }
            | ContainerOp::Stop { .. },
        )
        | None => None,
    };
    About {
        action: a.name(),
        container: a.container().map(|c| c.id.as_str()),
        reason: a.reason(),
        detail,
    }
}

/// What `ateam events` says of an action carried out (`failed`: how it failed): the changes to
/// members and main sessions a person asks about, not the plumbing (proxies, helper servers,
/// transcript folders), whose failures are events all the same.
///
/// `released` is the container whose command the action let run (a create's, a replacement's,
/// a start's): the event names it, so that every start ateam released can be found by its
/// container (a replacement's reason names the old one). An action that failed after it
/// released one (a replacement whose old container could not be removed) says both: the
/// start, then the failure; a start without its event would look like one past the gate.
pub(super) fn events_of(
    a: &Action,
    released: Option<&str>,
    failed: Option<&ActionError>,
) -> Vec<Event> {
    match (failed, released) {
        (None, _) => event_of(a, released, None).into_iter().collect(),
        (Some(err), None) => event_of(a, None, Some(err)).into_iter().collect(),
        (Some(err), Some(id)) => {
            let start = if let Some(ContainerOp::Recreate { old, .. }) = a.container_op() {
                let reason = format!(
                    "created and started to replace {}; the replacement did not finish",
                    short_id(&old.id)
                );
                Some(Event::new(&a.team, &a.subject, K::Created, &reason).container(id))
            } else {
                event_of(a, Some(id), None)
            };
            start
                .into_iter()
                .chain(event_of(a, None, Some(err)))
                .collect()
        }
    }
}

/// The one event of an action that ended as `failed` says; see `events_of`.
pub(super) fn event_of(
    a: &Action,
    made: Option<&str>,
    failed: Option<&ActionError>,
) -> Option<Event> {
    let (kind, reason) = match failed {
        Some(err) => (failure_kind(err), err.to_string()),
        None => match &a.op {
            Op::Container(op) => container_said(op),
            Op::Session(op) => session_said(op),
            Op::Host(HostOp::ReturnTasks { why }) => (
                K::TasksReturned,
                format!("its tasks on the board went back to todo: {why}"),
            ),
            Op::Host(HostOp::MakeTranscriptDir { .. }) | Op::Server(_) | Op::Team(_) => {
                return None;
            }
        },
    };
    let e = Event::new(&a.team, &a.subject, kind, &reason);
    Some(match (made, a.container()) {
        (Some(id), _) => e.container(id),
        (None, Some(c)) => e.container(&c.id),
        (None, None) => e,
    })
}

/// What an event says of a container op done.
fn container_said(op: &ContainerOp) -> (K, String) {
    match op {
        ContainerOp::Create { .. } => (K::Created, "created and started".into()),
        ContainerOp::Recreate { reason, old, .. } => (
            K::Replaced,
            format!(
                "replaced because {} (was {})",
                drift_text(reason),
                short_id(&old.id)
            ),
        ),
        ContainerOp::FinishReplacement { .. } => {
            (K::Replaced, "an interrupted replacement finished".into())
        }
        ContainerOp::Start { reason, .. } => start_said(reason),
        ContainerOp::Remove { removal, .. } => (
            K::Removed,
            match removal {
                Removal::Orphan { why } => format!(
                    "removed: {}",
                    why.as_deref().unwrap_or("no manifest wants it")
                ),
                Removal::Duplicate => "removed: a duplicate".into(),
                Removal::Stranger => "removed a container ateam did not make".into(),
                Removal::Suspended => "suspended: its container removed, its state kept".into(),
            },
        ),
        ContainerOp::RestoreName { name, .. } => (
            K::Repaired,
            format!("renamed behind ateam's back; named back to {name}"),
        ),
        ContainerOp::Unpause { .. } => {
            (K::Repaired, "paused behind ateam's back; let go on".into())
        }
        ContainerOp::Stop { .. } => (
            K::Stopped,
            "stopped: its workspace is rolled back (ateam rollback)".into(),
        ),
    }
}

/// What an event says of a start, by why it was started.
fn start_said(reason: &StartReason) -> (K, String) {
    match reason {
        StartReason::Restart { code, policy } => (
            K::Restarted,
            format!("restarted after exit {code} (restart policy {policy:?})"),
        ),
        StartReason::NeverStarted => (
            K::Started,
            "started: it was created but never started".into(),
        ),
        StartReason::Board {
            messages, tasks, ..
        } => (
            K::TaskGiven,
            format!("woken by the team's board: {messages} message(s), {tasks} task(s) for it"),
        ),
        StartReason::NotReleased => (
            K::Released,
            "held at its gate since a start ateam had not checked; checked and released".into(),
        ),
    }
}

/// What an event says of a session op done.
fn session_said(op: &SessionOp) -> (K, String) {
    match op {
        SessionOp::Start { .. } => (K::SessionStarted, "main session started".into()),
        SessionOp::Stop {
            taken_over_by: Some(heir),
            ..
        } => (
            K::SessionStopped,
            format!("main session stopped: taken over by {heir}"),
        ),
        SessionOp::Stop { .. } => (
            K::SessionStopped,
            "main session stopped: no manifest wants it".into(),
        ),
        SessionOp::Promote { .. } => (
            K::Promoted,
            "promoted from a member to a main session".into(),
        ),
        SessionOp::RollBack { .. } => (
            K::Repaired,
            "an interrupted promotion no manifest asks for was rolled back".into(),
        ),
    }
}

/// A container id as `events` and `status` show it.
fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// `held` when the checks at the gate refused a member (its container is gone before its
/// command ran), `failed` otherwise.
fn failure_kind(err: &ActionError) -> K {
    fn at_gate(e: &RunError) -> bool {
        match e {
            RunError::Pin { .. }
            | RunError::PolicyViolation { .. }
            | RunError::Process { .. }
            | RunError::Workspace { .. } => true,
            RunError::Rollback { cause, .. } => at_gate(cause),
            RunError::Ca { .. }
            | RunError::Egress { .. }
            | RunError::Backend { .. }
            | RunError::LimitsNotEnforced { .. }
            | RunError::RuntimeUnavailable { .. }
            | RunError::MissingSecret { .. }
            | RunError::NoCommand { .. }
            | RunError::Image { .. }
            | RunError::CommandNotFound { .. }
            | RunError::RootlessUser { .. }
            | RunError::Io { .. }
            | RunError::WritableBelowReadOnly { .. }
            | RunError::NotWritable { .. }
            | RunError::TranscriptFolder { .. }
            | RunError::Agent { .. } => false,
        }
    }
    match err {
        ActionError::Run(e) if at_gate(e) => K::Held,
        ActionError::Run(_)
        | ActionError::Backend { .. }
        | ActionError::Io { .. }
        | ActionError::Egress { .. }
        | ActionError::Helpers { .. }
        | ActionError::Session { .. }
        | ActionError::SessionStep { .. } => K::Failed,
    }
}
