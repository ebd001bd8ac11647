//! How long to wait before trying again, as pure values: no clock is read here, so each
//! number is a function of the inputs and tests state exact delays.
//!
//! Two policies, because they answer different questions:
//! - [`ErrorBackoff`]: a reconcile of one object failed (the engine was down, a folder was
//!   missing). Wait 1 s, then 2 s, 4 s, ... up to 5 min, with ±10 % jitter so that objects that
//!   failed together (the engine restarted) do not all retry in the same instant. A success
//!   resets it.
//! - [`CrashLoop`]: a member's container exited and its restart policy asks for a restart. Like
//!   the kubelet: wait 10 s, then 20 s, 40 s, ... up to 5 min, and forget the streak once the
//!   member has run 10 min without exiting. No jitter: a member's restarts are its own, and a
//!   user reading `status` can predict the next one.
//!
//! Both are configurable so tests (and a future `--crash-backoff` flag) can use short values.

use std::ops::Add;
use std::time::Duration;

/// A backoff setting that would make no sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackoffError {
    /// A zero first delay would retry in a hot loop.
    #[error("the first delay must be longer than zero")]
    ZeroFirstDelay,
    /// The cap must let the first delay happen.
    #[error("the longest delay ({max:?}) is shorter than the first ({first:?})")]
    MaxBelowFirst { first: Duration, max: Duration },
    /// More than 100 % jitter could make a delay negative.
    #[error("jitter of {percent} % is more than 100 %")]
    JitterTooLarge { percent: u32 },
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
pub struct ErrorBackoff {
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
    pub fn next_delay(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.config.delay(self.failures, self.seed)
    }

    /// A reconcile succeeded: the next failure waits the first delay again.
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
    pub fn resets(&self, ran_for: Duration) -> bool {
        ran_for >= self.reset_after
    }

    /// When the next start is due, given the member's past runs (oldest first); `None` if it
    /// never exited. Only the exits since the last run of at least `reset_after` count, that
    /// long run's own exit being the streak's first. Generic over the clock: works with
    /// `tokio::time::Instant`, `SystemTime` (an engine's `FinishedAt`), or a `Duration`
    /// since any epoch.
    pub fn next_try<T>(&self, exits: &[Exit<T>]) -> Option<T>
    where
        T: Copy + Add<Duration, Output = T>,
    {
        let last = exits.last()?;
        let streak = exits
            .iter()
            .rev()
            .position(|exit| self.resets(exit.ran_for))
            .map_or(exits.len(), |from_end| from_end + 1);
        let restart = u32::try_from(streak - 1).unwrap_or(u32::MAX);
        Some(last.at + self.delay(restart))
    }
}

/// One run of a member that ended: when it exited and how long it had run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit<T> {
    pub at: T,
    pub ran_for: Duration,
}

/// One member's restart streak, for a caller that keeps a counter instead of a history; it
/// agrees with [`CrashLoopConfig::next_try`] on the same runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashLoop {
    config: CrashLoopConfig,
    restarts: u32,
}

impl CrashLoop {
    pub fn new(config: CrashLoopConfig) -> Self {
        Self {
            config,
            restarts: 0,
        }
    }

    /// The member exited after running `ran_for`: how long to wait before starting it again.
    /// A run of at least `reset_after` starts a new streak first.
    pub fn next_delay(&mut self, ran_for: Duration) -> Duration {
        if self.config.resets(ran_for) {
            self.reset();
        }
        let delay = self.config.delay(self.restarts);
        self.restarts = self.restarts.saturating_add(1);
        delay
    }

    /// Forget the streak (the member was replaced, or the user restarted it).
    pub fn reset(&mut self) {
        self.restarts = 0;
    }

    /// Restarts in the current streak.
    pub fn restarts(&self) -> u32 {
        self.restarts
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

    #[test]
    fn crash_loop_waits_10_20_40_up_to_300_seconds() {
        let mut crash = CrashLoop::new(CrashLoopConfig::default());
        let delays: Vec<u64> = (0..8)
            .map(|_| crash.next_delay(secs(1)).as_secs())
            .collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(crash.restarts(), 8);
    }

    #[test]
    fn crash_loop_resets_after_ten_minutes_of_running() {
        let mut crash = CrashLoop::new(CrashLoopConfig::default());
        for _ in 0..4 {
            crash.next_delay(secs(5));
        }
        // Just short of 10 min: still in the loop.
        assert_eq!(crash.next_delay(secs(599)), secs(160));
        // 10 min: the streak is over, this exit is the first of a new one.
        assert_eq!(crash.next_delay(secs(600)), secs(10));
        assert_eq!(crash.next_delay(secs(3)), secs(20));
        crash.reset();
        assert_eq!(crash.next_delay(secs(3)), secs(10));
    }

    #[test]
    fn crash_loop_next_try_from_the_history() {
        let config = CrashLoopConfig::default();
        let exit = |at: u64, ran_for: u64| Exit {
            at: secs(at),
            ran_for: secs(ran_for),
        };
        assert_eq!(config.next_try::<Duration>(&[]), None);
        assert_eq!(config.next_try(&[exit(100, 5)]), Some(secs(110)));
        // Restarted on time each time, ran 5 s each: 10, 20, 40 s.
        let history = [exit(100, 5), exit(115, 5), exit(140, 5)];
        assert_eq!(config.next_try(&history), Some(secs(180)));
        // The run before the last lasted 10 min: the streak began at its exit.
        let history = [exit(100, 5), exit(800, 600), exit(815, 5)];
        assert_eq!(config.next_try(&history), Some(secs(835)));
        // The last run itself lasted 10 min.
        let history = [exit(100, 5), exit(115, 5), exit(1000, 700)];
        assert_eq!(config.next_try(&history), Some(secs(1010)));
        // A long crash loop stays at the cap.
        let history: Vec<_> = (0..20).map(|i| exit(1000 * i, 1)).collect();
        assert_eq!(config.next_try(&history), Some(secs(19_000 + 300)));
    }

    #[test]
    fn crash_loop_counter_and_history_agree() {
        let config = CrashLoopConfig::new(secs(1), secs(16), secs(30)).expect("valid");
        let runs = [3u64, 1, 40, 2, 2, 2, 2, 2, 2, 31, 1];
        let mut crash = CrashLoop::new(config);
        let mut history = Vec::new();
        let mut now = secs(0);
        for ran_for in runs {
            now += secs(ran_for);
            history.push(Exit {
                at: now,
                ran_for: secs(ran_for),
            });
            let delay = crash.next_delay(secs(ran_for));
            assert_eq!(config.next_try(&history), Some(now + delay));
            now += delay;
        }
    }
}
