//! How long to wait before trying again, as values: no clock is read here (the caller passes
//! `now`), so each number is a function of the inputs and tests state exact delays.
//!
//! Two policies, because they answer different questions:
//! - [`ErrorBackoff`]: a reconcile of one object failed (the engine was down, a folder was
//!   missing). Wait 1 s, then 2 s, 4 s, ... up to 5 min, with ±10 % jitter so that objects that
//!   failed together (the engine restarted) do not all retry in the same instant. A success
//!   resets it.
//! - [`CrashLoop`]: a member's container exited and its restart policy asks for a restart. Like
//!   the kubelet: restart at once the first time, then wait 10 s, 20 s, 40 s, ... up to 5 min,
//!   and forget the streak once the member has run 10 min. No jitter: a member's restarts are
//!   its own, and a user reading `status` can predict the next one.
//!
//! Both are configurable so tests (and a future `--crash-backoff` flag) can use short values.

use std::time::Duration;

use tokio::time::Instant;

/// A backoff setting that would make no sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackoffError {
    /// A zero first delay would retry in a hot loop.
    #[error("the first delay must be longer than zero")]
    ZeroFirstDelay,
    /// The cap must let the first delay happen.
    #[error("the longest delay ({max:?}) is shorter than the first ({first:?})")]
    MaxBelowFirst {
        /// The first delay.
        first: Duration,
        /// The longest delay.
        max: Duration,
    },
    /// More than 100 % jitter could make a delay negative.
    #[error("jitter of {percent} % is more than 100 %")]
    JitterTooLarge {
        /// The jitter asked for.
        percent: u32,
    },
}

/// `first * 2^n`, capped at `max`, without overflowing for large `n`.
fn doubled(first: Duration, max: Duration, n: u32) -> Duration {
    match 1u32.checked_shl(n) {
        Some(factor) => first.saturating_mul(factor).min(max),
        None => max,
    }
}

fn check(first: Duration, max: Duration) -> Result<(), BackoffError> {
    if first.is_zero() {
        return Err(BackoffError::ZeroFirstDelay);
    }
    if max < first {
        return Err(BackoffError::MaxBelowFirst { first, max });
    }
    Ok(())
}

/// The numbers of the reconcile-error backoff (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorBackoffConfig {
    first: Duration,
    max: Duration,
    jitter_percent: u32,
}

impl Default for ErrorBackoffConfig {
    /// 1 s doubling to 5 min, ±10 %.
    fn default() -> Self {
        Self {
            first: Duration::from_secs(1),
            max: Duration::from_secs(300),
            jitter_percent: 10,
        }
    }
}

impl ErrorBackoffConfig {
    /// `first` after the first failure, doubling up to `max`, each delay moved by up to
    /// `jitter_percent` of itself either way (0 turns jitter off).
    pub fn new(first: Duration, max: Duration, jitter_percent: u32) -> Result<Self, BackoffError> {
        check(first, max)?;
        if jitter_percent > 100 {
            return Err(BackoffError::JitterTooLarge {
                percent: jitter_percent,
            });
        }
        Ok(Self {
            first,
            max,
            jitter_percent,
        })
    }

    /// The delay after `failures` failures in a row (1 is the first), for the object whose
    /// jitter comes from `seed`. Zero failures means no delay.
    ///
    /// The cap applies before the jitter, so delays at the cap still spread out (by up to
    /// `jitter_percent` above `max`) instead of all landing on `max` together.
    pub fn delay(&self, failures: u32, seed: u64) -> Duration {
        let Some(n) = failures.checked_sub(1) else {
            return Duration::ZERO;
        };
        let nominal = doubled(self.first, self.max, n);
        let nanos = nominal.as_nanos();
        let spread = nanos * u128::from(self.jitter_percent) / 100;
        // A point in [nominal - spread, nominal + spread], chosen by the hash.
        let offset = u128::from(mix(seed, failures)) % (2 * spread + 1);
        let jittered = nanos - spread + offset;
        Duration::from_nanos(u64::try_from(jittered).unwrap_or(u64::MAX))
    }
}

/// A cheap, well-spread hash of (seed, attempt) (splitmix64's finalizer): jitter must differ
/// between objects and attempts, but stay reproducible given them.
fn mix(seed: u64, attempt: u32) -> u64 {
    let mut z = seed ^ u64::from(attempt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One object's failures in a row, and the delay each asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ErrorBackoff {
    config: ErrorBackoffConfig,
    seed: u64,
    failures: u32,
}

impl ErrorBackoff {
    /// `seed` picks this object's jitter; the controller draws it at random per object.
    pub fn new(config: ErrorBackoffConfig, seed: u64) -> Self {
        Self {
            config,
            seed,
            failures: 0,
        }
    }

    /// Count one more failure and return how long to wait before the next try.
    pub(crate) fn next_delay(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.config.delay(self.failures, self.seed)
    }

    /// A reconcile succeeded: the next failure waits the first delay again.
    #[cfg(test)]
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// The numbers of the crash-loop policy (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashLoopConfig {
    first: Duration,
    max: Duration,
    reset_after: Duration,
}

impl Default for CrashLoopConfig {
    /// The kubelet's numbers: 10 s doubling to 5 min, forgotten after 10 min of running.
    fn default() -> Self {
        Self {
            first: Duration::from_secs(10),
            max: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
        }
    }
}

impl CrashLoopConfig {
    /// `first` before the first restart, doubling up to `max`; a run of at least
    /// `reset_after` ends the streak.
    pub fn new(
        first: Duration,
        max: Duration,
        reset_after: Duration,
    ) -> Result<Self, BackoffError> {
        check(first, max)?;
        Ok(Self {
            first,
            max,
            reset_after,
        })
    }

    /// The delay before restart number `restart` of a streak (0 is the first restart).
    pub fn delay(&self, restart: u32) -> Duration {
        doubled(self.first, self.max, restart)
    }

    /// Whether a run this long ends the crash loop.
    pub(crate) fn resets(&self, ran_for: Duration) -> bool {
        ran_for >= self.reset_after
    }
}

/// One member's restarts under the crash-loop policy: the controller keeps one per member,
/// asks it before planning when a restart may happen (`hold`), and tells it what the plan
/// did (`started`, `wait`). The first exit of a streak is restarted at once, as the kubelet
/// does; each quick exit after it waits `first`, doubling up to `max`; a run of
/// `reset_after` since the last start ends the streak. Time is tokio's, so tests run it on
/// the paused clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashLoop {
    config: CrashLoopConfig,
    /// Restarts in a row without a long enough run in between.
    streak: u32,
    /// When ateam last started it.
    last_start: Option<Instant>,
    /// A restart waiting out its delay.
    due: Option<Instant>,
}

impl CrashLoop {
    /// A member that has not crash-looped yet.
    pub fn new(config: CrashLoopConfig) -> Self {
        Self {
            config,
            streak: 0,
            last_start: None,
            due: None,
        }
    }

    /// Were the member to need a restart at `now`, when it may happen: `None` for at once.
    /// Asking changes nothing: the answer holds whether or not the member exited.
    pub fn hold(&self, now: Instant) -> Option<Instant> {
        if let Some(due) = self.due {
            return (due > now).then_some(due);
        }
        if self.streak == 0 || self.config.resets(self.ran_for(now)) {
            return None;
        }
        Some(now + self.config.delay(self.streak - 1))
    }

    /// The member was restarted at `now` (when `hold` let it): a streak begins, or goes on
    /// after its wait.
    pub fn started(&mut self, now: Instant) {
        if self.due.take().is_none() {
            self.streak = 1;
        }
        self.last_start = Some(now);
    }

    /// The member's restart waits until `until` (what `hold` said). Returns whether it began
    /// waiting now (the streak grows), not already before.
    pub fn wait(&mut self, until: Instant) -> bool {
        if self.due.is_some() {
            return false;
        }
        self.streak = self.streak.saturating_add(1);
        self.due = Some(until);
        true
    }

    /// How long since ateam last started it (`Duration::MAX` if it never did).
    pub(crate) fn ran_for(&self, now: Instant) -> Duration {
        self.last_start
            .map_or(Duration::MAX, |s| now.saturating_duration_since(s))
    }

    /// When a waiting restart is due.
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// Restarts in the current streak.
    #[cfg(test)]
    pub(crate) fn streak(&self) -> u32 {
        self.streak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn no_jitter() -> ErrorBackoffConfig {
        ErrorBackoffConfig::new(secs(1), secs(300), 0).expect("valid")
    }

    #[test]
    fn error_backoff_doubles_caps_and_resets() {
        let mut backoff = ErrorBackoff::new(no_jitter(), 7);
        let delays: Vec<u64> = (0..11).map(|_| backoff.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(backoff.failures(), 11);
        backoff.reset();
        assert_eq!(backoff.failures(), 0);
        assert_eq!(backoff.next_delay(), secs(1));
        assert_eq!(backoff.next_delay(), secs(2));
    }

    #[test]
    fn error_backoff_does_not_overflow_after_many_failures() {
        let config = ErrorBackoffConfig::default();
        assert_eq!(no_jitter().delay(u32::MAX, 0), secs(300));
        assert!(config.delay(40, 0) <= secs(330));
        assert_eq!(config.delay(0, 0), Duration::ZERO);
    }

    #[test]
    fn jitter_stays_within_ten_percent_is_reproducible_and_spreads() {
        let config = ErrorBackoffConfig::default();
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..200u64 {
            for failures in 1..=12u32 {
                let nominal = no_jitter().delay(failures, seed);
                let delay = config.delay(failures, seed);
                assert!(delay >= nominal * 9 / 10, "{delay:?} < 90 % of {nominal:?}");
                assert!(
                    delay <= nominal * 11 / 10,
                    "{delay:?} > 110 % of {nominal:?}"
                );
                assert_eq!(
                    delay,
                    config.delay(failures, seed),
                    "same inputs, same delay"
                );
            }
            seen.insert(config.delay(1, seed));
        }
        // 200 objects failing together do not retry at one instant.
        assert!(
            seen.len() > 150,
            "only {} distinct first delays",
            seen.len()
        );
    }

    #[test]
    fn nonsense_settings_are_refused() {
        assert_eq!(
            ErrorBackoffConfig::new(Duration::ZERO, secs(1), 10),
            Err(BackoffError::ZeroFirstDelay)
        );
        assert_eq!(
            CrashLoopConfig::new(secs(10), secs(5), secs(600)),
            Err(BackoffError::MaxBelowFirst {
                first: secs(10),
                max: secs(5)
            })
        );
        assert_eq!(
            ErrorBackoffConfig::new(secs(1), secs(5), 101),
            Err(BackoffError::JitterTooLarge { percent: 101 })
        );
    }

    /// One exit the controller sees at `Instant::now()`, as its reconcile handles it: asks
    /// `hold`, and restarts at once or waits (on the paused clock) and then restarts. The
    /// delay it waited, in seconds.
    async fn exit_and_restart(crash: &mut CrashLoop) -> u64 {
        let now = Instant::now();
        let Some(until) = crash.hold(now) else {
            crash.started(now);
            return 0;
        };
        assert!(crash.wait(until), "a new wait");
        let waited = until - now;
        tokio::time::advance(waited).await;
        let now = Instant::now();
        assert_eq!(crash.hold(now), None, "due now");
        crash.started(now);
        waited.as_secs()
    }

    /// A member that runs `ran` seconds after each start, then exits.
    async fn runs(crash: &mut CrashLoop, ran: u64) -> u64 {
        tokio::time::advance(secs(ran)).await;
        exit_and_restart(crash).await
    }

    #[tokio::test(start_paused = true)]
    async fn crash_loop_restarts_at_once_then_waits_10_20_40_up_to_300_seconds() {
        let mut crash = CrashLoop::new(CrashLoopConfig::default());
        let mut delays = Vec::new();
        for _ in 0..9 {
            delays.push(runs(&mut crash, 1).await);
        }
        assert_eq!(delays, [0, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(crash.streak(), 9);
    }

    #[tokio::test(start_paused = true)]
    async fn crash_loop_resets_after_ten_minutes_of_running() {
        let mut crash = CrashLoop::new(CrashLoopConfig::default());
        for _ in 0..4 {
            runs(&mut crash, 5).await;
        }
        // Just short of 10 min since its last start: still in the loop.
        assert_eq!(runs(&mut crash, 599).await, 80);
        // 10 min: the streak is over, this exit is the first of a new one.
        assert_eq!(runs(&mut crash, 600).await, 0);
        assert_eq!(crash.streak(), 1);
        assert_eq!(runs(&mut crash, 3).await, 10);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_restart_stays_held_until_it_is_due() {
        let mut crash = CrashLoop::new(CrashLoopConfig::default());
        runs(&mut crash, 1).await;
        tokio::time::advance(secs(1)).await;
        let now = Instant::now();
        let until = crash.hold(now).expect("the second exit waits");
        assert_eq!(until - now, secs(10));
        // Asking again changes nothing; nor does a reconcile that finds it still waiting.
        assert_eq!(crash.hold(now), Some(until));
        assert!(crash.wait(until));
        assert_eq!((crash.streak(), crash.due()), (2, Some(until)));
        tokio::time::advance(secs(4)).await;
        assert_eq!(crash.hold(Instant::now()), Some(until));
        assert!(!crash.wait(until), "already waiting");
        assert_eq!(crash.streak(), 2);
        // Due: it restarts, and the streak goes on (the next quick exit waits 20 s).
        tokio::time::advance(secs(6)).await;
        assert_eq!(crash.hold(Instant::now()), None);
        crash.started(Instant::now());
        assert_eq!((crash.streak(), crash.due()), (2, None));
        assert_eq!(runs(&mut crash, 1).await, 20);
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_never_started_by_ateam_restarts_at_once() {
        let crash = CrashLoop::new(CrashLoopConfig::default());
        assert_eq!(crash.ran_for(Instant::now()), Duration::MAX);
        assert_eq!(crash.hold(Instant::now()), None);
        // Short settings (`--crash-backoff 1s`): 1, 2, 4 s.
        let config = CrashLoopConfig::new(secs(1), secs(300), secs(600)).expect("valid");
        let mut crash = CrashLoop::new(config);
        let mut delays = Vec::new();
        for _ in 0..4 {
            delays.push(runs(&mut crash, 0).await);
        }
        assert_eq!(delays, [0, 1, 2, 4]);
    }
}
