//! The work queue: which object to reconcile next, and when.
//!
//! Keys, not events, are queued: an event only says which object to look at again, so ten
//! events for one object before it runs are one entry. The queue promises:
//! - at most one waiting entry per key; scheduling a waiting key again keeps the earlier due
//!   time (a change that arrives while a retry waits 5 min runs now, a retry that is asked for
//!   while a change waits does not delay it);
//! - at most one running reconcile per key: a key scheduled while it runs waits, and runs
//!   once more after [`Queue::done`];
//! - at most `max_running` keys running at once;
//! - [`Queue::schedule`] ("now") waits a short debounce window, so a burst of events for one
//!   key (an engine emits create, attach, start, ... for one container) is one run. The window
//!   counts from the first event of the burst, so an endless stream of events still runs the
//!   key once per window instead of starving it.
//!
//! The queue is plain data owned by one driver loop ([`super::Controller::run`]); nothing
//! here spawns. Time is tokio's, so tests drive it on a paused clock.

use std::collections::{BTreeMap, BTreeSet};
use std::future;
use std::num::NonZeroUsize;
use std::time::Duration;

use tokio::time::Instant;

/// How the queue paces work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// Keys reconciled at once. Reconciles wait on the engine, not the CPU, but each one may
    /// create containers: 4 keeps a small machine responsive.
    pub max_running: NonZeroUsize,
    /// How long a schedule for "now" waits for more events of the same key.
    pub debounce: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            max_running: const { NonZeroUsize::new(4).expect("4 is not zero") },
            debounce: Duration::from_millis(500),
        }
    }
}

/// Keys waiting for their due time, and keys running.
#[derive(Debug)]
pub struct Queue<K> {
    config: QueueConfig,
    /// When each waiting key is due. A running key may wait too: it runs again after.
    due: BTreeMap<K, Instant>,
    /// The same entries in due order, to find the next one.
    by_time: BTreeSet<(Instant, K)>,
    running: BTreeSet<K>,
}

impl<K: Ord + Clone> Queue<K> {
    /// An empty queue.
    pub fn new(config: QueueConfig) -> Self {
        Self {
            config,
            due: BTreeMap::new(),
            by_time: BTreeSet::new(),
            running: BTreeSet::new(),
        }
    }

    /// Something about `key` changed: reconcile it after the debounce window.
    pub fn schedule(&mut self, key: K) {
        self.schedule_at(key, Instant::now() + self.config.debounce);
    }

    /// Reconcile `key` after `delay` (a requeue or a backoff: no debounce, the time is meant).
    pub fn schedule_after(&mut self, key: K, delay: Duration) {
        self.schedule_at(key, Instant::now() + delay);
    }

    /// Reconcile `key` at `at`, unless it already waits for an earlier time.
    pub fn schedule_at(&mut self, key: K, at: Instant) {
        match self.due.get(&key) {
            Some(&earlier) if earlier <= at => {}
            Some(&later) => {
                self.by_time.remove(&(later, key.clone()));
                self.by_time.insert((at, key.clone()));
                self.due.insert(key, at);
            }
            None => {
                self.by_time.insert((at, key.clone()));
                self.due.insert(key, at);
            }
        }
    }

    /// Wait for the next key that is due, not running, and fits under `max_running`; it is
    /// marked running, and the caller must call [`Queue::done`] when its reconcile ends.
    ///
    /// Cancel-safe: the queue only changes after the last await, so dropping this future (in
    /// a `select!` that picked another branch) loses nothing. It never completes while
    /// nothing is eligible; the driver's other branches (new requests, a finished reconcile)
    /// change that, and the driver then asks again.
    pub async fn next_ready(&mut self) -> K {
        loop {
            match self.next_due() {
                Some(at) => tokio::time::sleep_until(at).await,
                None => future::pending::<()>().await,
            }
            if let Some(key) = self.pop_due(Instant::now()) {
                return key;
            }
        }
    }

    /// The reconcile of `key` ended: a schedule that came in meanwhile may now run.
    pub fn done(&mut self, key: &K) {
        self.running.remove(key);
    }

    /// When `key` is due, if it waits.
    #[cfg(test)]
    pub fn due_at(&self, key: &K) -> Option<Instant> {
        self.due.get(key).copied()
    }

    /// Keys running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Keys waiting (including running keys that will run again).
    pub fn waiting(&self) -> usize {
        self.due.len()
    }

    /// The earliest waiting key that could start (is not running), if a slot is free.
    fn next_eligible(&self) -> Option<&(Instant, K)> {
        if self.running.len() >= self.config.max_running.get() {
            return None;
        }
        self.by_time
            .iter()
            .find(|(_, key)| !self.running.contains(key))
    }

    fn next_due(&self) -> Option<Instant> {
        self.next_eligible().map(|&(at, _)| at)
    }

    /// Take the earliest eligible key if it is due by `now`, and mark it running.
    fn pop_due(&mut self, now: Instant) -> Option<K> {
        let (at, key) = self.next_eligible().filter(|(at, _)| *at <= now)?.clone();
        self.by_time.remove(&(at, key.clone()));
        self.due.remove(&key);
        self.running.insert(key.clone());
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_running: usize, debounce_ms: u64) -> QueueConfig {
        QueueConfig {
            max_running: NonZeroUsize::new(max_running).expect("non-zero"),
            debounce: Duration::from_millis(debounce_ms),
        }
    }

    /// Whether `next_ready` yields a key within `within` of virtual time.
    async fn ready_within(
        queue: &mut Queue<&'static str>,
        within: Duration,
    ) -> Option<&'static str> {
        tokio::time::timeout(within, queue.next_ready()).await.ok()
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_schedule_keeps_the_earlier_due_time() {
        let start = Instant::now();
        let mut queue = Queue::new(config(4, 0));
        queue.schedule_after("a", Duration::from_secs(10));
        queue.schedule_after("a", Duration::from_secs(5));
        queue.schedule_after("a", Duration::from_secs(20));
        assert_eq!(queue.waiting(), 1);
        assert_eq!(queue.due_at(&"a"), Some(start + Duration::from_secs(5)));

        assert_eq!(queue.next_ready().await, "a");
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        queue.done(&"a");
        // The later requests were folded into the one run: nothing is left.
        assert_eq!(queue.waiting(), 0);
        assert_eq!(
            ready_within(&mut queue, Duration::from_secs(3600)).await,
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn schedule_after_fires_at_its_virtual_time_and_in_order() {
        let start = Instant::now();
        let mut queue = Queue::new(config(4, 250));
        queue.schedule_after("late", Duration::from_secs(90));
        queue.schedule_after("soon", Duration::from_secs(30));
        queue.schedule("now");

        assert_eq!(queue.next_ready().await, "now");
        assert_eq!(start.elapsed(), Duration::from_millis(250));
        assert_eq!(queue.next_ready().await, "soon");
        assert_eq!(start.elapsed(), Duration::from_secs(30));
        assert_eq!(queue.next_ready().await, "late");
        assert_eq!(start.elapsed(), Duration::from_secs(90));
        assert_eq!(queue.running(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_scheduled_while_running_waits_for_done_then_runs_once() {
        let start = Instant::now();
        let mut queue = Queue::new(config(4, 0));
        queue.schedule("a");
        assert_eq!(queue.next_ready().await, "a");
        queue.schedule("a");
        queue.schedule_after("a", Duration::from_secs(1));
        assert_eq!(queue.waiting(), 1);
        // Due, but running: not handed out again.
        assert_eq!(
            ready_within(&mut queue, Duration::from_secs(60)).await,
            None
        );
        queue.done(&"a");
        assert_eq!(queue.next_ready().await, "a");
        assert_eq!(start.elapsed(), Duration::from_secs(60));
        queue.done(&"a");
        assert_eq!(
            ready_within(&mut queue, Duration::from_secs(3600)).await,
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_hands_out_nothing_until_a_slot_frees() {
        let mut queue = Queue::new(config(2, 0));
        for key in ["a", "b", "c"] {
            queue.schedule(key);
        }
        assert_eq!(queue.next_ready().await, "a");
        assert_eq!(queue.next_ready().await, "b");
        assert_eq!(
            ready_within(&mut queue, Duration::from_secs(60)).await,
            None
        );
        queue.done(&"b");
        assert_eq!(queue.next_ready().await, "c");
        assert_eq!(queue.running(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_within_the_debounce_window_is_one_entry() {
        let start = Instant::now();
        let mut queue = Queue::new(config(4, 200));
        for _ in 0..100 {
            queue.schedule("a");
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(queue.waiting(), 1);
        assert_eq!(queue.next_ready().await, "a");
        // Due 200 ms after the first event of the burst, not the last.
        assert_eq!(start.elapsed(), Duration::from_millis(200));
        queue.done(&"a");
        assert_eq!(
            ready_within(&mut queue, Duration::from_secs(3600)).await,
            None
        );
    }
}
