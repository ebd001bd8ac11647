//! The driver loop: one task owns the queue; event sources reach it through [`Handle`]s;
//! reconciles run as tasks in a `JoinSet` the loop owns and awaits.

use std::collections::BTreeMap;
use std::fmt::{Debug, Display};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::{Id, JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::backoff::{ErrorBackoff, ErrorBackoffConfig};
use super::queue::{Queue, QueueConfig};
use super::{Next, error_policy};

/// A request from an event source.
#[derive(Debug)]
enum Request<K> {
    /// Something changed: reconcile after the debounce window.
    Now(K),
    /// Reconcile at this time (or earlier, if asked).
    At(K, Instant),
}

/// The controller is gone (it was shut down): stop sending it work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the controller has stopped")]
pub struct Stopped;

/// Asks a running controller to reconcile a key; cheap to clone, one per event source.
///
/// The channel is unbounded so that a source can schedule from synchronous code (a file
/// watcher's callback) without waiting: the loop does nothing per request but update a map,
/// and the queue merges requests per key, so the backlog stays short.
#[derive(Debug)]
pub struct Handle<K> {
    requests: mpsc::UnboundedSender<Request<K>>,
}

impl<K> Clone for Handle<K> {
    fn clone(&self) -> Self {
        Self {
            requests: self.requests.clone(),
        }
    }
}

impl<K> Handle<K> {
    /// Something about `key` changed: reconcile it soon (after the debounce window).
    pub fn schedule(&self, key: K) -> Result<(), Stopped> {
        self.requests.send(Request::Now(key)).map_err(|_| Stopped)
    }

    /// Reconcile `key` after `delay`, counted from now.
    pub fn schedule_after(&self, key: K, delay: Duration) -> Result<(), Stopped> {
        let at = Instant::now() + delay;
        self.requests
            .send(Request::At(key, at))
            .map_err(|_| Stopped)
    }
}

/// A reconcile that did not return `Ok`.
#[derive(Debug)]
enum Failure<E> {
    Error(E),
    /// The reconcile panicked (a bug); the object is retried like after an error, so one bad
    /// object does not stop the controller.
    Panic(JoinError),
}

/// How full the queue is, as the loop last saw it: read by the metrics without a lock.
#[derive(Debug, Default)]
pub struct QueueStats {
    waiting: AtomicUsize,
    running: AtomicUsize,
}

impl QueueStats {
    /// Keys waiting to run (a debounce, a requeue or a backoff delay).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Reconciles running now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    fn set<K: Ord + Clone>(&self, queue: &Queue<K>) {
        self.waiting.store(queue.waiting(), Ordering::Relaxed);
        self.running.store(queue.running(), Ordering::Relaxed);
    }
}

/// The work queue, the per-object error backoff, and the loop that runs reconciles.
#[derive(Debug)]
pub struct Controller<K> {
    queue: Queue<K>,
    errors: ErrorBackoffConfig,
    stats: Arc<QueueStats>,
    /// Kept so [`Controller::handle`] can make more handles; dropped when `run` starts.
    requests_tx: mpsc::UnboundedSender<Request<K>>,
    requests: mpsc::UnboundedReceiver<Request<K>>,
}

impl<K> Controller<K>
where
    K: Ord + Clone + Send + Debug + 'static,
{
    /// A controller with nothing queued yet.
    pub fn new(queue: QueueConfig, errors: ErrorBackoffConfig) -> Self {
        let (requests_tx, requests) = mpsc::unbounded_channel();
        Self {
            queue: Queue::new(queue),
            errors,
            stats: Arc::default(),
            requests_tx,
            requests,
        }
    }

    /// A handle for an event source. Make them before [`Controller::run`].
    pub fn handle(&self) -> Handle<K> {
        Handle {
            requests: self.requests_tx.clone(),
        }
    }

    /// The queue's figures, kept up to date by [`Controller::run`].
    pub fn stats(&self) -> Arc<QueueStats> {
        self.stats.clone()
    }

    /// Run reconciles until `shutdown` is cancelled, then wait for the running ones to finish
    /// (starting no new one) and return. Keys that were only waiting are dropped: the next
    /// controller reconciles everything at start anyway.
    ///
    /// Dropping the returned future instead aborts the running reconciles (the `JoinSet` is
    /// dropped): the second, impatient phase of a shutdown.
    pub async fn run<F, Fut, E>(self, reconcile: F, shutdown: CancellationToken)
    where
        F: Fn(K) -> Fut,
        Fut: Future<Output = Result<Next, E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let Self {
            mut queue,
            errors,
            stats,
            requests_tx,
            mut requests,
        } = self;
        // When every handle is gone, only requeues and backoff remain as sources of work.
        drop(requests_tx);
        let mut settle = Settle {
            errors,
            backoff: BTreeMap::new(),
            running: BTreeMap::new(),
        };
        let mut tasks = JoinSet::new();
        let mut sources_open = true;
        loop {
            tokio::select! {
                // Shutdown first; then finished reconciles, which free slots and keys.
                biased;
                () = shutdown.cancelled() => break,
                Some(joined) = tasks.join_next_with_id() => settle.finished(&mut queue, joined),
                request = requests.recv(), if sources_open => match request {
                    Some(Request::Now(key)) => queue.schedule(key),
                    Some(Request::At(key, at)) => queue.schedule_at(key, at),
                    None => sources_open = false,
                },
                key = queue.next_ready() => {
                    let span = tracing::info_span!("reconcile", key = ?key);
                    let task = tasks.spawn(reconcile(key.clone()).instrument(span));
                    settle.running.insert(task.id(), key);
                }
            }
            stats.set(&queue);
        }
        tracing::debug!(
            running = tasks.len(),
            "controller stopping: draining reconciles"
        );
        while let Some(joined) = tasks.join_next_with_id().await {
            settle.finished(&mut queue, joined);
            stats.set(&queue);
        }
    }
}

/// What the loop remembers about reconciles between runs.
struct Settle<K> {
    errors: ErrorBackoffConfig,
    /// Objects whose last reconcile failed; removed on success.
    backoff: BTreeMap<K, ErrorBackoff>,
    /// Which key each running task reconciles (a panicked task reports only its id).
    running: BTreeMap<Id, K>,
}

impl<K: Ord + Clone + Debug> Settle<K> {
    /// A reconcile ended: apply what it asked for, or back off, and free its key.
    fn finished<E: Display>(
        &mut self,
        queue: &mut Queue<K>,
        joined: Result<(Id, Result<Next, E>), JoinError>,
    ) {
        let (id, outcome) = match joined {
            Ok((id, Ok(action))) => (id, Ok(action)),
            Ok((id, Err(error))) => (id, Err(Failure::Error(error))),
            Err(error) => (error.id(), Err(Failure::Panic(error))),
        };
        let Some(key) = self.running.remove(&id) else {
            tracing::error!(task = %id, "a reconcile task ended that the controller did not start");
            return;
        };
        let action = match outcome {
            Ok(action) => {
                self.backoff.remove(&key);
                action
            }
            Err(failure) => {
                let errors = self.errors;
                let backoff = self
                    .backoff
                    .entry(key.clone())
                    .or_insert_with(|| ErrorBackoff::new(errors, random_seed()));
                let action = error_policy(backoff);
                let failures = backoff.failures();
                match &failure {
                    Failure::Error(error) => {
                        tracing::warn!(?key, %error, failures, ?action, "reconcile failed");
                    }
                    Failure::Panic(error) => {
                        tracing::error!(?key, %error, failures, ?action, "reconcile panicked");
                    }
                }
                action
            }
        };
        match action {
            Next::Requeue(delay) => queue.schedule_after(key.clone(), delay),
            Next::AwaitChange => {}
        }
        queue.done(&key);
    }
}

/// A fresh seed for one object's jitter, from std's randomly keyed hasher.
fn random_seed() -> u64 {
    RandomState::new().build_hasher().finish()
}
