//! `ateam helper-server`: what answers on one member's `/.ateam/helpers.sock`. The socket is
//! the member's alone (in its control folder, 0600, its user's), so whoever connects is judged
//! as that member and no other.
//!
//! It speaks just enough HTTP/1.1 (heads parsed by `httparse`, as the egress proxy's are) for
//! busybox `wget --post-data` (through the bridge the gate starts on `ATEAM_HELPERS_URL`) and
//! for `curl --unix-socket`:
//!
//! - `POST /helpers` with a `Request` as JSON: 201 and the member made, or the rule broken
//!   (400, 403, 409, 422) as `{"refused": ..., "rule": ..., "field": ...}`;
//! - `GET /helpers`: the helpers this member asked for.
//!
//! A hostile member must not hurt it: heads are capped at 8 KiB and bodies at 64 KiB (413),
//! a request must arrive within 10 s (408), at most 4 connections are served at once (503
//! to the rest), requests beyond a burst and a pace are answered 429 after a pause
//! (`Bucket`), and requests are judged one at a time, without the store's lock until one is
//! accepted (a refusal must not hold up an apply).
//!
//! - `http`: one request read within those limits, one answer written;
//! - `grant`: a request judged and, accepted, its member brought up;
//! - `tools`: the team's tools (MCP) on the member's second socket.

mod grant;
mod http;
mod tools;

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::files::Owner;
use crate::model::Origin;
use crate::requests::{self, Refusal, Request};

use http::{CLOSED_EMPTY, respond};
pub use http::{HttpRequest, read_request};

/// A helper server's data (heap and thread stacks): it judges one request at a time and
/// serves four connections at most, in well under 100 MiB; this is the backstop
/// (`detached::limit_self`).
pub const MAX_DATA: u64 = 1 << 30;

const READ_WITHIN: Duration = Duration::from_secs(10);
const MAX_CONNECTIONS: usize = 4;
/// Requests a server judges: a burst, then a steady pace. A member asking in a loop is
/// answered 429 beyond it, so what it costs the host (a judgement reads the store and
/// validates the whole team) is bounded whatever the member does.
const BURST: u32 = 20;
const PER_SECOND: u32 = 2;
/// How long a 429 waits before it is sent, holding one of the few places: a loop that asks
/// again at once is slowed to a few requests a second, not spun.
const TARPIT: Duration = Duration::from_millis(250);

/// A token bucket: `burst` requests at once, then `per_second`.
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    tokens: f64,
    last: Instant,
    burst: f64,
    per_second: f64,
}

impl Bucket {
    /// A full bucket.
    pub fn new(burst: u32, per_second: u32, now: Instant) -> Bucket {
        Bucket {
            tokens: f64::from(burst),
            last: now,
            burst: f64::from(burst),
            per_second: f64::from(per_second),
        }
    }

    /// Whether there is no token now (none is taken).
    pub fn is_empty(&self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens + elapsed * self.per_second < 1.0
    }

    /// Takes one request's token, or says how long until there is one.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / self.per_second,
            ))
        }
    }
}

/// What one helper server serves: one member's requests.
#[derive(Debug, Clone)]
pub struct Config {
    /// ateam's state folder.
    pub state_dir: PathBuf,
    /// Team name.
    pub team: String,
    /// The member whose requests it judges.
    pub member: String,
    /// Who the socket belongs to: the user the member runs as.
    pub socket_owner: Owner,
}

/// Why the helper server could not begin to listen (its socket, its pid file); reported by
/// `ateam helper-server` itself, into `server.err`. Starting it from apply or the controller
/// fails as `servers::helper::StartError`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListenError {
    /// A file of the server's could not be made or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Listens until killed, its data bounded by `MAX_DATA`.
pub fn run(cfg: Config) -> Result<(), ListenError> {
    crate::detached::limit_self(MAX_DATA);
    let _ = rustix::process::setsid();
    let paths = super::Paths::new(&cfg.state_dir, &cfg.team, &cfg.member);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ListenError::Io { path, source }
    };
    // The control folder is the member's uid's: never chmod or chown through a name there.
    let (listener, _) = crate::files::bind_private_socket(&paths.socket, Some(cfg.socket_owner))
        .map_err(io(&paths.socket))?;
    let pid = format!("{}\n", std::process::id());
    let me = Owner {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
    };
    crate::files::write_atomic(&paths.pid, pid.as_bytes(), 0o600, me).map_err(io(&paths.pid))?;
    // The team's tools, on the member's second socket: failing to listen there leaves
    // helper requests served, and says why in the server's standard error.
    let cfg = Arc::new(cfg);
    if let Err(e) = tools::listen(&cfg) {
        eprintln!("ateam helper-server: the team's tools: {e}");
    }
    let busy = Arc::new(AtomicUsize::new(0));
    let bucket = Arc::new(Mutex::new(Bucket::new(BURST, PER_SECOND, Instant::now())));
    let mut backoff = crate::detached::Backoff::default();
    for conn in listener.incoming() {
        let mut conn = match conn {
            Ok(c) => c,
            // Out of descriptors: the connection stays pending; retrying at once would spin.
            Err(e) => {
                if let Some(pause) = backoff.after(&e) {
                    std::thread::sleep(pause);
                }
                continue;
            }
        };
        backoff.reset();
        if busy.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            busy.fetch_sub(1, Ordering::SeqCst);
            let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
            respond(
                &mut conn,
                503,
                &json!({"refused": "too many connections at once; try again"}),
            );
            continue;
        }
        let (busy, cfg, bucket) = (busy.clone(), cfg.clone(), bucket.clone());
        // Each connection is bounded in time (READ_WITHIN, then one judgement), and the
        // count above bounds how many threads exist at once.
        std::thread::spawn(move || {
            serve(&mut conn, &cfg, &bucket);
            busy.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Ok(())
}

/// The answer to a request over the rate (`Bucket`).
fn rate_limited(wait: Duration) -> serde_json::Value {
    json!({
        "refused": format!(
            "more than {PER_SECOND} requests a second (after a burst of {BURST}); try again in {} ms",
            wait.as_millis().max(1)
        ),
        "rule": "rate-limit",
    })
}

/// A refusal as the body of its answer.
fn refused(r: &Refusal) -> serde_json::Value {
    json!({"refused": r.message, "rule": r.rule, "field": r.field})
}

/// Requests are judged one at a time, over HTTP or the team's tools; the refusals said
/// (`Quieter`) are counted here.
static ONE_AT_A_TIME: std::sync::LazyLock<Mutex<crate::events::Quieter>> =
    std::sync::LazyLock::new(Mutex::default);

/// Judges a request, grants it if it may be, and records what came of it as an event.
pub(crate) fn judge_and_grant(cfg: &Config, req: &Request) -> Answer {
    let mut one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let answer = grant::grant(cfg, req);
    record(cfg, req, &answer, &mut one);
    answer
}

fn serve(conn: &mut UnixStream, cfg: &Config, bucket: &Mutex<Bucket>) {
    let deadline = Instant::now() + READ_WITHIN;
    let _ = conn.set_read_timeout(Some(READ_WITHIN));
    let _ = conn.set_write_timeout(Some(READ_WITHIN));
    let read = read_request(conn, deadline);
    let mut bucket = bucket.lock().unwrap_or_else(|p| p.into_inner());
    if matches!(&read, Err((_, why)) if why == CLOSED_EMPTY) {
        // A liveness check takes no token (status must not use up the member's); a loop of
        // them is slowed like any other once the member has none left.
        if bucket.is_empty(Instant::now()) {
            drop(bucket);
            std::thread::sleep(TARPIT);
        }
        return;
    }
    // Every request read counts, whatever it is: a loop of malformed ones costs too.
    let token = bucket.take(Instant::now());
    drop(bucket);
    if let Err(wait) = token {
        std::thread::sleep(TARPIT);
        return respond(conn, 429, &rate_limited(wait));
    }
    let req = match read {
        Ok(r) => r,
        Err((status, why)) => return respond(conn, status, &json!({"refused": why})),
    };
    let (status, body) = match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/helpers") => match serde_json::from_slice::<Request>(&req.body) {
            Ok(r) => judge_and_grant(cfg, &r),
            Err(e) => (
                400,
                json!({"refused": format!("not a helper request: {e}"), "rule": "request-shape"}),
            ),
        },
        ("GET", "/helpers") => (200, mine(cfg)),
        (_, "/helpers") => (405, json!({"refused": "use POST or GET"})),
        _ => (
            404,
            json!({"refused": "the only path is /helpers (POST a request, GET the list)"}),
        ),
    };
    respond(conn, status, &body);
}

/// The answer to a judged request as an event of the team: granted, or refused with its
/// rule (a refusal at most once a minute per rule: `Quieter`). The name and the reason are
/// the member's words: `events` escapes them when it shows them.
fn record(cfg: &Config, req: &Request, answer: &Answer, quiet: &mut crate::events::Quieter) {
    use crate::events::{Event, EventKind};
    let (status, body) = answer;
    let name: String = req.name.chars().take(64).collect();
    let e = if *status == 201 {
        let state = body["state"].as_str().unwrap_or("");
        let why = format!("granted helper `{name}` ({state})");
        Event::new(&cfg.team, &cfg.member, EventKind::HelperGranted, &why)
    } else {
        let rule = body["rule"].as_str().unwrap_or("refused");
        let Some(more) = quiet.admit(rule, Instant::now()) else {
            return;
        };
        let also = match more {
            0 => String::new(),
            n => format!(" ({n} more refused by this rule since the last said)"),
        };
        let why = format!(
            "refused helper `{name}` by rule {rule}: {}{also}",
            body["refused"].as_str().unwrap_or("")
        );
        // The refusals this one stands for: counted by `events` and the metrics.
        Event {
            count: more + 1,
            ..Event::new(&cfg.team, &cfg.member, EventKind::HelperRefused, &why)
        }
    };
    let Some(owner) = store_owner(cfg) else {
        return;
    };
    crate::events::record(&cfg.state_dir, owner, &e);
}

/// The store's owner: the state folder's.
fn store_owner(cfg: &Config) -> Option<Owner> {
    let m = std::fs::metadata(&cfg.state_dir).ok()?;
    Some(Owner {
        uid: std::os::unix::fs::MetadataExt::uid(&m),
        gid: std::os::unix::fs::MetadataExt::gid(&m),
    })
}

/// The helpers this member asked for that are recorded.
fn mine(cfg: &Config) -> serde_json::Value {
    let names: Vec<String> = requests::records(&cfg.state_dir, &cfg.team)
        .into_iter()
        .filter(|r| matches!(&r.member.origin, Origin::Requested { by, .. } if *by == cfg.member))
        .map(|r| r.member.name)
        .collect();
    json!({ "helpers": names })
}

/// An answer: a status and its JSON body.
pub type Answer = (u16, serde_json::Value);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_a_burst_then_a_pace() {
        let t0 = Instant::now();
        let mut b = Bucket::new(3, 2, t0);
        for _ in 0..3 {
            assert!(b.take(t0).is_ok());
        }
        let wait = b.take(t0).unwrap_err();
        assert!(wait > Duration::from_millis(400) && wait <= Duration::from_millis(500));
        assert!(b.take(t0 + Duration::from_millis(500)).is_ok());
        assert!(b.take(t0 + Duration::from_millis(600)).is_err());
        // Idle for long, it holds no more than its burst.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(b.take(later).is_ok());
        }
        assert!(b.take(later).is_err());
        assert!(b.is_empty(later));
        assert!(!b.is_empty(later + Duration::from_millis(500)));
    }
}
