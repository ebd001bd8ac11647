//! `ateam helper-server`: what answers on one member's `/.ateam/helpers.sock`. The socket is
//! the member's alone (in its control folder, 0600, its user's), so whoever connects is judged
//! as that member and no other.
//!
//! It speaks just enough HTTP/1.1 for busybox `wget --post-data` (through the bridge the gate
//! starts on `ATEAM_HELPERS_URL`) and for `curl --unix-socket`:
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

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::app::App;
use crate::app::apply::{ApplyOptions, Outcome, converge};
use crate::core::container::rfc3339;
use crate::execute::Quiet;
use crate::files::Owner;
use crate::model::{Desired, Origin};
use crate::requests::{self, Refusal, Request};

const MAX_HEAD: usize = 8 * 1024;
const MAX_BODY: usize = 64 * 1024;
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

/// What `read_request` says of a connection closed before its first byte: the liveness
/// check of `status`, apply and the controller (`servers::answers`).
const CLOSED_EMPTY: &str = "the connection closed without a request";

/// A token bucket: `burst` requests at once, then `per_second`.
#[derive(Debug, Clone)]
pub struct Bucket {
    tokens: f64,
    last: Instant,
    burst: f64,
    per_second: f64,
}

impl Bucket {
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

#[derive(Debug, Clone)]
pub struct Config {
    pub state_dir: PathBuf,
    pub team: String,
    pub member: String,
    /// Who the socket belongs to: the user the member runs as.
    pub socket_owner: Owner,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Listens until killed.
pub fn run(cfg: Config) -> Result<(), ServeError> {
    let _ = rustix::process::setsid();
    let paths = requests::servers::Paths::new(&cfg.state_dir, &cfg.team, &cfg.member);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ServeError::Io { path, source }
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
    let busy = Arc::new(AtomicUsize::new(0));
    let one_at_a_time = Arc::new(Mutex::new(crate::events::Quieter::default()));
    let bucket = Arc::new(Mutex::new(Bucket::new(BURST, PER_SECOND, Instant::now())));
    let cfg = Arc::new(cfg);
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
        let (busy, lock, cfg, bucket) = (
            busy.clone(),
            one_at_a_time.clone(),
            cfg.clone(),
            bucket.clone(),
        );
        // Each connection is bounded in time (READ_WITHIN, then one judgement), and the
        // count above bounds how many threads exist at once.
        std::thread::spawn(move || {
            serve(&mut conn, &cfg, &lock, &bucket);
            busy.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Ok(())
}

/// One HTTP request as far as this server cares.
#[derive(Debug, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
}

/// Reads one request from `r`, within the limits; the status to answer with if it cannot.
pub fn read_request(r: &mut impl Read, deadline: Instant) -> Result<HttpRequest, (u16, String)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err((431, format!("the request head is over {MAX_HEAD} bytes")));
        }
        if Instant::now() > deadline {
            return Err((408, "the request did not arrive in time".into()));
        }
        match r.read(&mut chunk) {
            Ok(0) if buf.is_empty() => return Err((400, CLOSED_EMPTY.into())),
            Ok(0) => return Err((400, "the connection closed before a whole request".into())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err((408, "the request did not arrive in time".into())),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (method, path) = (
        first.next().unwrap_or("").to_string(),
        first.next().unwrap_or("").to_string(),
    );
    let mut length = 0usize;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let k = k.trim().to_ascii_lowercase();
        if k == "content-length" {
            length = v
                .trim()
                .parse()
                .map_err(|_| (400, "a bad Content-Length".to_string()))?;
        } else if k == "transfer-encoding" {
            return Err((411, "send the body with a Content-Length".into()));
        }
    }
    if length > MAX_BODY {
        return Err((413, format!("a request body is at most {MAX_BODY} bytes")));
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        if Instant::now() > deadline {
            return Err((408, "the request did not arrive in time".into()));
        }
        match r.read(&mut chunk) {
            Ok(0) => return Err((400, "the body is shorter than its Content-Length".into())),
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err((408, "the request did not arrive in time".into())),
        }
    }
    body.truncate(length);
    Ok(HttpRequest { method, path, body })
}

/// Writes the answer. A refusal's reason phrase carries its rule and words too: busybox
/// `wget` shows the status line of an error, not its body.
fn respond(w: &mut impl Write, status: u16, body: &serde_json::Value) {
    let plain = match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let reason = match (body["rule"].as_str(), body["refused"].as_str()) {
        (Some(rule), Some(why)) => phrase(&format!("{plain} ({rule}): {why}")),
        (None, Some(why)) => phrase(&format!("{plain}: {why}")),
        _ => plain.to_string(),
    };
    let mut text = serde_json::to_string_pretty(body).expect("a value serializes");
    text.push('\n');
    let _ = write!(
        w,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

/// A reason phrase: one line of printable text, at most 400 bytes.
fn phrase(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > 400 {
        let mut cut = 400;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
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

fn refused(r: &Refusal) -> serde_json::Value {
    json!({"refused": r.message, "rule": r.rule, "field": r.field})
}

fn serve(
    conn: &mut UnixStream,
    cfg: &Config,
    lock: &Mutex<crate::events::Quieter>,
    bucket: &Mutex<Bucket>,
) {
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
            Ok(r) => {
                let mut one = lock.lock().unwrap_or_else(|p| p.into_inner());
                let answer = handle(cfg, &r);
                record(cfg, &r, &answer, &mut one);
                answer
            }
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
    // The store's owner is the state folder's.
    let owner = match std::fs::metadata(&cfg.state_dir) {
        Ok(m) => Owner {
            uid: std::os::unix::fs::MetadataExt::uid(&m),
            gid: std::os::unix::fs::MetadataExt::gid(&m),
        },
        Err(_) => return,
    };
    crate::events::record(&cfg.state_dir, owner, &e);
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
type Answer = (u16, serde_json::Value);

/// Judges `req` once without the store's lock, so that a refusal (the common case for a
/// hostile member, in a loop) never holds up an apply (`apply --no-wait` fails while the
/// lock is held); then, accepted, judges it again under the lock (another apply may have
/// changed the team meanwhile), records it and brings its member up.
fn handle(cfg: &Config, req: &Request) -> Answer {
    let app = App::new(Some(cfg.state_dir.clone()), None);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return (500, json!({"refused": e.to_string()})),
    };
    if let Err(answer) = judged(&app, &rt, cfg, req, true) {
        return answer;
    }
    let _lock = match app.store.lock(false, |_| {}) {
        Ok(l) => l,
        Err(e) => return (503, json!({"refused": format!("the state folder: {e}")})),
    };
    // The engine was asked a moment ago: what an apply may have changed since is in the
    // store (a member of the name it made is in its team now).
    let (team, member) = match judged(&app, &rt, cfg, req, false) {
        Ok(x) => x,
        Err(answer) => return answer,
    };
    if let Err(e) = requests::save(&cfg.state_dir, &cfg.team, &member, app.owner) {
        return (500, json!({"refused": e.to_string()}));
    }
    tracing::info!(team = %cfg.team, by = %cfg.member, member = %member.name, "helper requested");
    let name = member.name.clone();
    let desired = Desired { teams: vec![team] };
    let report = rt.block_on(async {
        // No value of apply's environment is here: an injected secret's value comes from
        // the requester's own proxy, which injects it for the same host.
        let held = crate::egress::held_secrets(&crate::egress::Paths::new(
            &cfg.state_dir,
            &cfg.team,
            &cfg.member,
        ));
        let lookup = |n: &str| held.get(n).cloned();
        // Only the new member is touched: a request is no occasion to change the others,
        // and never a main session (the person's, on the host).
        let mut only = |plan: &mut crate::plan::Plan| {
            plan.actions
                .retain(|a| a.subject().1 == name && !a.is_session());
        };
        converge(
            &app,
            &desired,
            ApplyOptions::default(),
            &lookup,
            &Quiet,
            &mut only,
        )
        .await
    });
    let undo = |why: String, status: u16| {
        let _ = requests::forget(&cfg.state_dir, &cfg.team, &name);
        (
            status,
            json!({"refused": why, "rule": "could-not-start", "member": name}),
        )
    };
    match report {
        Err(e) => undo(format!("{e}"), 502),
        Ok(r) => match r.outcome {
            Outcome::Refused(f) => undo(
                f.iter()
                    .map(|f| f.error.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
                422,
            ),
            Outcome::Applied { failures, .. } if failures.iter().any(|f| f.member == name) => undo(
                failures
                    .iter()
                    .map(|f| f.error.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
                502,
            ),
            Outcome::Applied {
                not_running,
                finished,
                ..
            } => {
                let state = if let Some(n) = not_running.iter().find(|n| n.member == name) {
                    format!("not running: {}", n.why)
                } else if finished.iter().any(|(_, m)| *m == name) {
                    "finished".into()
                } else {
                    "running".into()
                };
                (
                    201,
                    json!({"created": name, "team": cfg.team, "requestedBy": cfg.member, "image": member.image, "state": state}),
                )
            }
            Outcome::NoChanges => (
                201,
                json!({"created": name, "team": cfg.team, "requestedBy": cfg.member, "image": member.image, "state": "running"}),
            ),
        },
    }
}

/// The team as stored and the member `req` would make, or the answer refusing it: the
/// rules of manifests (`requests::judge`), then the names the store remembers
/// (`requests::remembered`), then, with `engine`, the engine: a container of the helper's name
/// that ateam did not make for it (an orphan a person kept, a stranger) would be replaced by
/// its converge.
fn judged(
    app: &App,
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    req: &Request,
    engine: bool,
) -> Result<(crate::model::Team, crate::model::Member), Answer> {
    let state =
        |e: &dyn std::fmt::Display| (503, json!({"refused": format!("the state folder: {e}")}));
    let stored = app.store.teams().map_err(|e| state(&e))?;
    let Some(team) = stored.iter().find(|t| t.name == cfg.team).cloned() else {
        return Err((
            403,
            json!({"refused": format!("team `{}` is no longer applied", cfg.team)}),
        ));
    };
    let merged: Vec<_> = requests::merge(&Desired { teams: stored }, &cfg.state_dir)
        .0
        .teams;
    let Some(this) = merged.iter().find(|t| t.name == cfg.team) else {
        return Err((500, json!({"refused": "the team went away"})));
    };
    let at = rfc3339(std::time::SystemTime::now());
    let member = requests::judge(req, &cfg.member, this, &merged, &app.host, &at)
        .and_then(|m| requests::remembered(&cfg.state_dir, this, &m.name).map(|()| m))
        .map_err(|r| (r.status, refused(&r)))?;
    if engine {
        rt.block_on(on_engine(app, &team, &member.name))
            .map_err(|r| (r.status, refused(&r)))?;
    }
    Ok((team, member))
}

/// Refuses a name that a container on the engine holds already: `ateam_<team>_<name>` (or
/// its replacement's `_next`), or one labelled as this team's member of that name (any
/// store's). A new helper has no
/// container yet, so any such is someone else's.
async fn on_engine(app: &App, team: &crate::model::Team, name: &str) -> Result<(), Refusal> {
    use crate::core::container::{container_name, labels, replacement_name};
    let engine = |e: &dyn std::fmt::Display| {
        Refusal::new(
            503,
            "engine",
            None,
            format!("the engine could not be asked about `{name}`: {e}"),
        )
    };
    let (backend, _) = app
        .connect(std::slice::from_ref(team))
        .await
        .map_err(|e| engine(&e))?;
    let container = container_name(&team.name, name);
    let mut by_name = None;
    for n in [replacement_name(&container), container] {
        if let Some(c) = backend.find_by_name(&n).await.map_err(|e| engine(&e))? {
            by_name = Some(c);
        }
    }
    let wanted = [
        (labels::TEAM.to_string(), team.name.clone()),
        (labels::MEMBER.to_string(), name.to_string()),
    ];
    let by_labels = backend
        .list(&wanted.into_iter().collect())
        .await
        .map_err(|e| engine(&e))?;
    match by_name.or(by_labels.into_iter().next()) {
        None => Ok(()),
        Some(c) => Err(Refusal::new(
            409,
            "container-name",
            Some("name"),
            format!(
                "container `{}` ({}) holds the name `{name}` in team `{}` already; ateam did not make it for this helper and will not replace it; choose another name",
                c.name,
                &c.id[..c.id.len().min(12)],
                team.name
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8]) -> Result<HttpRequest, (u16, String)> {
        read_request(
            &mut std::io::Cursor::new(bytes.to_vec()),
            Instant::now() + Duration::from_secs(5),
        )
    }

    #[test]
    fn reads_what_busybox_wget_sends() {
        let r = read(b"POST /helpers HTTP/1.1\r\nHost: 127.0.0.1:3129\r\nUser-Agent: Wget\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 13\r\n\r\n{\"name\":\"k\"}\n")
            .unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/helpers");
        assert_eq!(r.body, b"{\"name\":\"k\"}\n");
    }

    #[test]
    fn hostile_requests_are_cut_short() {
        // A body over the limit is refused from its length, before it is read.
        let e = read(b"POST /helpers HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n").unwrap_err();
        assert_eq!(e.0, 413);
        // An endless head.
        let mut endless = b"POST /helpers HTTP/1.1\r\nX: ".to_vec();
        endless.extend(std::iter::repeat_n(b'a', 100_000));
        assert_eq!(read(&endless).unwrap_err().0, 431);
        // No length: chunked bodies are not read.
        let e = read(
            b"POST /helpers HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        )
        .unwrap_err();
        assert_eq!(e.0, 411);
        // A body shorter than it said, or a connection closed early.
        assert_eq!(
            read(b"POST /helpers HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
                .unwrap_err()
                .0,
            400
        );
        assert_eq!(read(b"POST /hel").unwrap_err().0, 400);
        assert_eq!(
            read(b"POST /helpers HTTP/1.1\r\nContent-Length: x\r\n\r\n")
                .unwrap_err()
                .0,
            400
        );
    }

    /// A reader that gives one byte at a time, slowly: a request that does not arrive in
    /// time is given up, however much of it trickles in.
    struct Trickle(usize);

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            std::thread::sleep(Duration::from_millis(20));
            self.0 += 1;
            buf[0] = b'a';
            Ok(1)
        }
    }

    #[test]
    fn a_slow_client_is_given_up() {
        let started = Instant::now();
        let e =
            read_request(&mut Trickle(0), Instant::now() + Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.0, 408);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

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

    #[test]
    fn a_refusal_says_its_rule_in_the_status_line() {
        let mut out = Vec::new();
        respond(
            &mut out,
            422,
            &json!({"refused": "reads `/etc`,\nwhich...", "rule": "narrower-than-requester"}),
        );
        let text = String::from_utf8(out).unwrap();
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            "HTTP/1.1 422 Unprocessable Content (narrower-than-requester): reads `/etc`, which..."
        );
        assert!(text.contains("\"rule\": \"narrower-than-requester\""));
    }
}
