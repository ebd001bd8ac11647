//! The core of `ateam controller`: what decides when each object is reconciled again.
//!
//! The pieces, after kube-runtime's controller and scheduler:
//! - [`queue`]: a work queue of keys (an object's `(team, kind, name)`): one waiting entry per
//!   key, one running reconcile per key, a bound on keys running at once, a debounce for
//!   bursts, and delayed entries for requeues and backoff;
//! - [`backoff`]: the delays, as pure values: per-object backoff after reconcile errors (the
//!   loop applies it), and the kubelet-like crash-loop policy for member restarts (a reconcile
//!   asks it which restarts must wait, the plan holds those back, and the reconcile returns a
//!   `Requeue` until the first is due);
//! - [`Controller`] (in `runner`): the one loop that feeds the queue from event sources
//!   (through [`Handle`]s), runs reconciles as owned tasks, and applies what each returns;
//! - [`metrics`]: `--metrics ADDR`: its counters and `status`' figures for Prometheus.
//!
//! Reconcile from the whole state, never from the trigger. An event (an engine event, a
//! manifest edit, a timer) only says *which* object to look at again; the reconcile reads what
//! is wanted and what is there, and converges. That is why events can be merged, dropped in
//! bursts, or replayed after a restart without harm, and why the queue holds keys, not events.
//!
//! Backoff lives outside the reconciler: a reconcile returns `Ok(Next)` or an error, and
//! [`error_policy`] turns repeated errors into growing delays. The reconciler stays a plain
//! function of the state, and every object's retries are paced by the same rule.

pub mod backoff;
pub mod daemon;
pub(crate) mod exits;
pub mod metrics;
pub(crate) mod queue;
mod runner;
#[cfg(test)]
mod tests;
pub(crate) mod watch;

use std::time::Duration;

use backoff::ErrorBackoff;
pub use runner::{Controller, Handle, QueueStats, Stopped};

/// What a reconcile asks for next when it succeeded (kube-runtime calls it `Action`; here that
/// word is the plan's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Look again after this long even if nothing changes (a member waiting out its
    /// crash-loop delay, a periodic resync).
    Requeue(Duration),
    /// Converged: run again only when an event names this object.
    AwaitChange,
}

/// What to do after a reconcile of one object failed once more: wait per the object's
/// backoff (which counts the failure), then try again.
pub(crate) fn error_policy(backoff: &mut ErrorBackoff) -> Next {
    Next::Requeue(backoff.next_delay())
}
