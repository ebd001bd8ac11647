//! The bound on an intercepting proxy's TLS work: each intercepted CONNECT costs the host a
//! handshake (a key exchange and a signature) that costs the member nothing (it can replay
//! one ready-made ClientHello), so handshakes are admitted at a bounded rate and only a few
//! at once. The excess is refused before anything is connected or computed, and logged at
//! most once a minute with its count. An agent opens a handful of connections and keeps
//! them alive: the bounds are far above what it needs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Handshakes admitted in a burst.
pub const BURST: f64 = 32.0;
/// Handshakes admitted a second, once the burst is spent.
pub const PER_SECOND: f64 = 16.0;
/// Handshakes in progress at once: a slow one (a member that sends half a ClientHello)
/// holds its place until `HEAD_TIMEOUT`.
pub const AT_ONCE: usize = 8;
/// How often a run of refusals is written to the member's egress log, at most.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// A token bucket and a semaphore, with the count of refusals not yet logged.
pub struct Handshakes {
    tokens: f64,
    at: Instant,
    busy: Arc<Semaphore>,
    refused: u64,
    logged: Option<Instant>,
}

impl Default for Handshakes {
    fn default() -> Self {
        Handshakes {
            tokens: BURST,
            at: Instant::now(),
            busy: Arc::new(Semaphore::new(AT_ONCE)),
            refused: 0,
            logged: None,
        }
    }
}

/// Why a handshake was not admitted, and whether this refusal is the one to log (with how
/// many were refused since the last one logged).
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    /// For the member and the log.
    pub reason: String,
    /// `Some(n)`: log this one, standing for `n` refusals.
    pub log: Option<u64>,
}

impl Handshakes {
    /// A place for one handshake, held until it ends; or the refusal.
    pub fn admit(&mut self, now: Instant) -> Result<OwnedSemaphorePermit, Refusal> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + elapsed * PER_SECOND).min(BURST);
        let why = if self.tokens < 1.0 {
            format!("over {PER_SECOND} TLS handshakes a second (a burst of {BURST})")
        } else {
            match self.busy.clone().try_acquire_owned() {
                Ok(p) => {
                    self.tokens -= 1.0;
                    return Ok(p);
                }
                Err(_) => format!("over {AT_ONCE} TLS handshakes at once"),
            }
        };
        self.refused += 1;
        let log = if self
            .logged
            .is_none_or(|t| now.saturating_duration_since(t) >= LOG_EVERY)
        {
            self.logged = Some(now);
            Some(std::mem::take(&mut self.refused))
        } else {
            None
        };
        Err(Refusal { reason: why, log })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_are_admitted_at_a_bounded_rate_and_a_few_at_once() {
        let mut h = Handshakes::default();
        let t0 = Instant::now();
        let mut held = Vec::new();
        for _ in 0..AT_ONCE {
            held.push(h.admit(t0).unwrap());
        }
        let r = h.admit(t0).unwrap_err();
        assert!(r.reason.contains("at once"), "{r:?}");
        assert_eq!(r.log, Some(1), "the first refusal is logged");
        held.clear();
        // The rest of the burst, then the rate.
        let mut admitted = AT_ONCE;
        while h.admit(t0).is_ok() {
            admitted += 1;
        }
        assert_eq!(admitted, BURST as usize);
        let r = h.admit(t0).unwrap_err();
        assert!(r.reason.contains("a second"), "{r:?}");
        assert_eq!(r.log, None, "within a minute of the last log: counted only");
        let later = t0 + Duration::from_millis(500);
        let mut more = 0;
        while h.admit(later).is_ok() {
            more += 1;
        }
        assert_eq!(more, (PER_SECOND / 2.0) as usize);
        // A minute on, the next refusal is logged with the count of those in between.
        let mut h2 = Handshakes::default();
        let _held: Vec<_> = (0..AT_ONCE).map(|_| h2.admit(t0).unwrap()).collect();
        assert_eq!(h2.admit(t0).unwrap_err().log, Some(1));
        assert_eq!(h2.admit(t0).unwrap_err().log, None);
        assert_eq!(h2.admit(t0).unwrap_err().log, None);
        assert_eq!(h2.admit(t0 + LOG_EVERY).unwrap_err().log, Some(3));
    }
}
