//! The host side of a member's egress: an HTTP proxy on a Unix socket that only that member
//! can reach (the socket lies in its control folder). It speaks `CONNECT host:port` and plain
//! HTTP forwarding (`GET http://host/...`), resolves names itself, judges every address it
//! got, and connects to the very address it judged, so a name cannot be made to resolve to
//! something else between check and use. Every decision is one line in the member's egress
//! log. One process per member: a member is only ever judged by its own list.
//!
//! - `intercept`: its path for a host with rules, and `handshakes`, the bound on that TLS work;
//! - `relay`: how it moves an allowed connection's bytes (splice(2), or copying).

mod handshakes;
mod intercept;
mod relay;

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};

use super::listeners::{self, Owners};
use super::log::{Event, Log, Verdict};
use super::{InterceptFile, PolicyFile, ProxyError};
use crate::core::egress::{Allowlist, HOST_SERVICE, HOST_SERVICE_ADDRS, Host};
use crate::core::intercept::Intercept;
use crate::core::layout;
use handshakes::Handshakes;
use intercept::{self as icpt, Proxy as _, Route};

/// Longest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;
/// How long a member has to send its request head: a connection that sends nothing holds a
/// slot this long at most.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long resolving a name, and then connecting, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once, at most; more are answered 503 and closed at once, so that
/// a member holding thousands open costs the host a bounded number of descriptors and no
/// spinning. An agent uses a handful.
const MAX_CONNECTIONS: usize = 256;
/// Descriptors one relayed connection holds: both sockets and a pipe per direction.
const FDS_PER_CONNECTION: u64 = 6;
/// Descriptors kept for everything else (the listener, the log, the runtime, resolving).
const FDS_SPARE: u64 = 64;
/// Threads that may resolve names at once (tokio's blocking pool; its default is 512).
const RESOLVER_THREADS: usize = 8;
/// The proxy's data (heap and thread stacks): with the bounds above it needs tens of MiB;
/// this is the backstop (`detached::limit_self`).
pub const MAX_DATA: u64 = 256 << 20;
/// How often a refusal for being over the bound is written to the member's log, at most.
const OVERLOAD_LOG_EVERY: Duration = Duration::from_secs(60);
/// How often the proxy looks at its socket and the host's addresses.
const HOUSEKEEPING: Duration = Duration::from_secs(5);

/// What the proxy runs with (from `ateam egress-proxy`'s arguments).
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it listens.
    pub socket: PathBuf,
    /// The allowlist file it reads (`PolicyFile`), again whenever it changes.
    pub policy: PathBuf,
    /// Where it writes what it allowed and refused.
    pub log: PathBuf,
    /// Its pid file.
    pub pid_file: PathBuf,
}

/// The allowlist as last read, and how to tell that its file changed.
struct Policy {
    /// Shared, not copied, by every connection that looks at it.
    list: Result<Arc<(Allowlist, Vec<Intercept>)>, String>,
    /// `appliedBy` and `hostListeners`: whose listeners on the host are reached.
    owners: (Vec<u32>, Vec<u32>),
    /// What is refused even where the list reaches it (the grant's `deny`).
    deny: Allowlist,
    /// A learning run's bounds, if one was asked for.
    learn: Option<super::LearnFile>,
    stamp: Stamps,
}

/// How to tell that the policy, the allowed-once file, the member's start or the learning
/// run changed.
type Stamps = [Option<(i64, u64, u64, u64)>; 4];

/// A folder held open: the proxy reaches its files through it after it gave up root, when
/// the private folders above it are closed to it.
struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    fn open(path: &Path) -> Result<Dir, ProxyError> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ProxyError::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Modification time, inode and size of `name`: what tells that it changed.
    fn stamp(&self, name: &str) -> Option<(i64, u64, u64, u64)> {
        let st = rustix::fs::statat(&self.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).ok()?;
        Some((
            st.st_mtime,
            st.st_mtime_nsec as u64,
            st.st_ino,
            st.st_size as u64,
        ))
    }

    fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )?;
        let mut out = Vec::new();
        std::fs::File::from(fd).read_to_end(&mut out)?;
        Ok(out)
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

struct State {
    /// The member's control folder: its gate's release file names the start running now.
    ctl_dir: Dir,
    /// The policy file's folder and name.
    policy_dir: Dir,
    policy_name: String,
    policy: Mutex<Policy>,
    /// `intercept.json`, beside the policy file, as last read.
    intercept: Mutex<Intercepts>,
    own: Mutex<Vec<IpAddr>>,
    log: Mutex<Log>,
    /// TLS configurations per intercepted host, built once per intercept file.
    prepared: Mutex<icpt::Cache>,
    /// Bumped whenever the policy or the intercept file is read anew: open connections look
    /// again whether what they carry is still allowed.
    generation: tokio::sync::watch::Sender<u64>,
    /// The bound on intercepted handshakes.
    handshakes: Mutex<Handshakes>,
}

/// The stamps of what the list in force is read from.
fn stamps(dir: &Dir, name: &str, ctl: &Dir) -> Stamps {
    [
        dir.stamp(name),
        dir.stamp(layout::EGRESS_ONCE_NAME),
        ctl.stamp(layout::GATE_RELEASE_NAME),
        dir.stamp(layout::EGRESS_LEARN_NAME),
    ]
}

fn read_policy(dir: &Dir, name: &str, ctl: &Dir) -> Policy {
    let stamp = stamps(dir, name, ctl);
    let shown = dir.path.join(name);
    let mut owners = (Vec::new(), Vec::new());
    let mut deny = Allowlist::default();
    let list = dir
        .read(name)
        .map_err(|e| format!("cannot read the allowlist {}: {e}", shown.display()))
        .and_then(|b| {
            serde_json::from_slice::<PolicyFile>(&b)
                .map_err(|e| format!("the allowlist {} is not valid: {e}", shown.display()))
        })
        .and_then(|mut p| {
            once(dir, ctl, &mut p);
            // An intercept that names no host would fail open (its host tunnelled): the whole
            // policy is refused instead, like a bad entry.
            for i in &p.intercept {
                icpt::check(i).map_err(|e| format!("the allowlist {}: {e}", shown.display()))?;
            }
            owners = (p.applied_by, p.host_listeners);
            // A deny entry that does not parse would let through what it names: the whole
            // policy is refused instead.
            deny = Allowlist::parse(&p.deny)
                .map_err(|e| format!("the allowlist {}: deny: {e}", shown.display()))?;
            Ok(Arc::new((Allowlist::parse(&p.allow)?, p.intercept)))
        });
    let learn = dir
        .read(layout::EGRESS_LEARN_NAME)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    Policy {
        list,
        owners,
        deny,
        learn,
        stamp,
    }
}

/// Adds to `p` what the person allowed once for the member's start running now: the
/// allowed-once file counts only while the gate's release file names the very start it was
/// written for (a restart releases another: it is gone). An entry of it that does not parse,
/// or a rule for a host without rules, makes it count for nothing.
fn once(dir: &Dir, ctl: &Dir, p: &mut PolicyFile) {
    let Ok(bytes) = dir.read(layout::EGRESS_ONCE_NAME) else {
        return;
    };
    let Ok(o) = serde_json::from_slice::<super::OnceFile>(&bytes) else {
        return;
    };
    let now = ctl
        .read(layout::GATE_RELEASE_NAME)
        .map(|b| String::from_utf8_lossy(&b).trim().to_string());
    if now.ok().as_deref() != Some(o.start.trim()) || o.start.trim().is_empty() {
        return;
    }
    if Allowlist::parse(&o.allow).is_err()
        || !o
            .rules
            .iter()
            .all(|r| p.intercept.iter().any(|i| i.host == r.host))
    {
        return;
    }
    p.allow.extend(o.allow);
    for r in o.rules {
        if let Some(i) = p.intercept.iter_mut().find(|i| i.host == r.host) {
            i.http.push(r.rule);
        }
    }
}

/// The certificates and secrets as last read, and how to tell that their file changed.
struct Intercepts {
    file: Result<Arc<InterceptFile>, String>,
    stamp: Option<(i64, u64, u64, u64)>,
}

fn read_intercepts(dir: &Dir) -> Intercepts {
    let stamp = dir.stamp(layout::EGRESS_INTERCEPT_NAME);
    let shown = dir.path.join(layout::EGRESS_INTERCEPT_NAME);
    // The error names the file and serde's position, never its content (it holds secrets).
    let file = dir
        .read(layout::EGRESS_INTERCEPT_NAME)
        .map_err(|e| format!("cannot read {}: {e}", shown.display()))
        .and_then(|b| {
            serde_json::from_slice::<InterceptFile>(&b).map_err(|e| {
                format!(
                    "{} is not valid at line {} column {}",
                    shown.display(),
                    e.line(),
                    e.column()
                )
            })
        })
        .map(Arc::new);
    Intercepts { file, stamp }
}

/// The host's own addresses (every interface's), refused like loopback unless named exactly.
fn own_addresses() -> Vec<IpAddr> {
    if_addrs::get_if_addrs()
        .map(|v| v.into_iter().map(|i| i.ip()).collect())
        .unwrap_or_default()
}

impl State {
    /// The stamps of the policy's files now.
    fn stamps(&self) -> Stamps {
        stamps(&self.policy_dir, &self.policy_name, &self.ctl_dir)
    }

    /// The list in force: re-read when its file changed (apply rewrites it atomically).
    fn list(&self) -> Result<Arc<(Allowlist, Vec<Intercept>)>, String> {
        self.rules()
    }

    /// The list and the intercepts in force.
    fn rules(&self) -> Result<Arc<(Allowlist, Vec<Intercept>)>, String> {
        let mut p = self.policy.lock().expect("policy lock");
        if self.stamps() != p.stamp {
            *p = read_policy(&self.policy_dir, &self.policy_name, &self.ctl_dir);
            self.generation.send_modify(|g| *g += 1);
        }
        p.list.clone()
    }

    /// Why `host:port` is refused whatever the list says, if the grant's `deny` names it.
    fn denied(&self, host: &str, port: u16) -> Option<String> {
        let _ = self.rules();
        let p = self.policy.lock().expect("policy lock");
        let h = Host::parse(host)?;
        p.deny
            .allows(&h, port)
            .then(|| format!("{h}:{port} {}", super::log::DENIED))
    }

    /// Whether a learning run lets `host:port` past the list now (`LearnFile::learns`), the
    /// list not naming it.
    fn learns(&self, host: &str, port: u16) -> bool {
        let Ok(rules) = self.rules() else {
            return false;
        };
        let p = self.policy.lock().expect("policy lock");
        let listed = Host::parse(host).is_some_and(|h| rules.0.allows(&h, port));
        !listed
            && p.learn
                .as_ref()
                .is_some_and(|l| l.learns(host, port, Event::now()))
    }

    /// Whose listeners on the host the member may reach, by the policy in force.
    fn owners(&self) -> Owners {
        let mut p = self.policy.lock().expect("policy lock");
        if self.stamps() != p.stamp {
            *p = read_policy(&self.policy_dir, &self.policy_name, &self.ctl_dir);
            self.generation.send_modify(|g| *g += 1);
        }
        Owners {
            applied_by: p.owners.0.clone(),
            named: p.owners.1.clone(),
            own: rustix::process::geteuid().as_raw(),
        }
    }

    /// The intercept file in force: re-read when it changed.
    fn intercepts(&self) -> Result<Arc<InterceptFile>, String> {
        let mut f = self.intercept.lock().expect("intercept lock");
        if self.policy_dir.stamp(layout::EGRESS_INTERCEPT_NAME) != f.stamp {
            *f = read_intercepts(&self.policy_dir);
            self.generation.send_modify(|g| *g += 1);
        }
        f.file.clone()
    }

    fn reload(&self) {
        *self.policy.lock().expect("policy lock") =
            read_policy(&self.policy_dir, &self.policy_name, &self.ctl_dir);
        *self.intercept.lock().expect("intercept lock") = read_intercepts(&self.policy_dir);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Builds the TLS configurations of every host the policy intercepts, as the member's
    /// first CONNECT to each would; what fails is left for that CONNECT to refuse.
    fn prepare_all(&self) {
        let (Ok(rules), Ok(file)) = (self.rules(), self.intercepts()) else {
            return;
        };
        for i in &rules.1 {
            let _ = self.prepared.lock().expect("prepared lock").get(i, &file);
        }
    }

    /// Whether a connection to `host:port` opened earlier is still allowed as it was made:
    /// intercepted with rules (`intercepted`), or tunnelled by the allowlist.
    fn still_allowed(&self, host: &str, port: u16, intercepted: bool) -> bool {
        let Ok(rules) = self.rules() else {
            return false;
        };
        if self.denied(host, port).is_some() {
            return false;
        }
        let (list, intercepts) = &*rules;
        match icpt::route(intercepts, host, port, true) {
            Route::Intercept(_) => intercepted,
            Route::Refuse(_) => false,
            Route::Tunnel => {
                !intercepted
                    && (Host::parse(host).is_some_and(|h| list.allows(&h, port))
                        || self.learns(host, port))
            }
        }
    }
}

impl icpt::Proxy for State {
    /// The intercept in force for what a connection's CONNECT asked for, with its TLS
    /// configurations and secret; `None` when that host is no longer intercepted.
    fn intercept_in_force(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Option<(Intercept, Arc<icpt::Prepared>)>, String> {
        let rules = self.rules()?;
        match icpt::route(&rules.1, host, port, true) {
            Route::Intercept(i) => {
                let file = self.intercepts()?;
                let p = self
                    .prepared
                    .lock()
                    .expect("prepared lock")
                    .get(&i, &file)?;
                Ok(Some((*i, p)))
            }
            Route::Tunnel | Route::Refuse(_) => Ok(None),
        }
    }

    /// Resolves once `host:port` is no longer allowed as its connection was made: looked at
    /// whenever the policy is read anew (at a request, and at each housekeeping tick).
    async fn revoked(&self, host: &str, port: u16, intercepted: bool) {
        let mut rx = self.generation.subscribe();
        loop {
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
            if !self.still_allowed(host, port, intercepted) {
                return;
            }
        }
    }

    fn record(&self, e: Event) {
        self.log.lock().expect("log lock").write(&e);
    }
}

/// Sets up as the user that started it (binds the socket, replacing a stale one; writes the
/// pid file; opens its folders), then leaves ateam's session, becomes `user` for good when
/// started as root, and serves until SIGTERM, or until its socket is removed or replaced (the
/// member is gone). One thread, a single-threaded runtime: one member's traffic needs no
/// more, and the ids can only be changed safely while there is one thread.
pub fn run(cfg: Config, user: Option<&str>) -> Result<(), ProxyError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ProxyError::Io { path, source }
    };
    let _ = rustix::process::setsid();
    let user = user.map(super::parse_user).transpose()?;
    let socket_dir = Dir::open(cfg.socket.parent().unwrap_or(Path::new("/")))?;
    let ctl_dir = Dir::open(cfg.socket.parent().unwrap_or(Path::new("/")))?;
    let policy_dir = Dir::open(cfg.policy.parent().unwrap_or(Path::new("/")))?;
    let log_dir = Dir::open(cfg.log.parent().unwrap_or(Path::new("/")))?;
    let owner = user.map(|u| crate::files::Owner {
        uid: u.uid,
        gid: u.gid,
    });
    // The control folder is the member's uid's: never chmod or chown through a name there.
    let (listener, ino) =
        crate::files::bind_private_socket(&cfg.socket, owner).map_err(io(&cfg.socket))?;
    let me = crate::files::Owner {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
    };
    crate::files::write_atomic(
        &cfg.pid_file,
        std::process::id().to_string().as_bytes(),
        0o600,
        owner.unwrap_or(me),
    )
    .map_err(io(&cfg.pid_file))?;
    if let Some(u) = user {
        super::drop_privileges(u)?;
    }
    listener.set_nonblocking(true).map_err(io(&cfg.socket))?;
    let state = Arc::new(State {
        policy: Mutex::new(read_policy(&policy_dir, &file_name(&cfg.policy), &ctl_dir)),
        ctl_dir,
        policy_name: file_name(&cfg.policy),
        intercept: Mutex::new(read_intercepts(&policy_dir)),
        policy_dir,
        own: Mutex::new(own_addresses()),
        log: Mutex::new(Log::open(log_dir.fd, &file_name(&cfg.log))),
        prepared: Mutex::new(icpt::Cache::default()),
        generation: tokio::sync::watch::Sender::new(0),
        handshakes: Mutex::new(Handshakes::default()),
    });
    // The TLS configurations of the intercepted hosts (the host's roots parsed, each leaf's
    // key) are made now, beside the serving, not at the member's first CONNECT: its agent
    // starts while apply still creates its container. After the privileges were dropped.
    let warm = state.clone();
    std::thread::spawn(move || warm.prepare_all());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(RESOLVER_THREADS)
        .build()
        .map_err(io(&cfg.socket))?;
    let socket_name = file_name(&cfg.socket);
    rt.block_on(async move {
        let listener = UnixListener::from_std(listener).map_err(io(&cfg.socket))?;
        serve(listener, state, &cfg, || {
            socket_dir.stamp(&socket_name).map(|s| s.2) == Some(ino)
        })
        .await
    })
}

async fn serve(
    listener: UnixListener,
    state: Arc<State>,
    cfg: &Config,
    still_ours: impl Fn() -> bool,
) -> Result<(), ProxyError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ProxyError::Io { path, source }
    };
    let bound =
        connection_bound(rustix::process::getrlimit(rustix::process::Resource::Nofile).current);
    let slots = Arc::new(tokio::sync::Semaphore::new(bound));
    let mut backoff = crate::detached::Backoff::default();
    let mut over = Overload::default();
    let mut pausing = false;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(io(&cfg.socket))?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(io(&cfg.socket))?;
    let mut tick = tokio::time::interval(HOUSEKEEPING);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let conn = match accepted {
                    Ok((conn, _)) => conn,
                    Err(e) => {
                        if let Some(pause) = backoff.after(&e) {
                            // Once per run of failures: proxy.err stays small.
                            if !pausing {
                                tracing::warn!(error = %e, "accept failed; pausing 10 ms..1 s until it works");
                                pausing = true;
                            }
                            tokio::time::sleep(pause).await;
                        }
                        continue;
                    }
                };
                backoff.reset();
                pausing = false;
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    over.refuse(&conn, bound, &state);
                    continue;
                };
                let state = state.clone();
                // Ended tasks are taken as new ones come: a flood of short connections
                // must not pile up their handles until the next tick.
                while tasks.try_join_next().is_some() {}
                tasks.spawn(async move {
                    handle(conn, state).await;
                    drop(permit);
                });
            }
            _ = tick.tick() => {
                // The socket removed or replaced: this proxy is no longer the member's.
                if !still_ours() {
                    return Ok(());
                }
                *state.own.lock().expect("own lock") = own_addresses();
                // A changed policy reaches idle connections too (`State::revoked`).
                let _ = (state.rules(), state.intercepts());
                while tasks.try_join_next().is_some() {}
            }
            _ = hup.recv() => state.reload(),
            _ = term.recv() => break,
        }
    }
    // Removed by the one who stops it (ateam, which may enter the private folders).
    Ok(())
}

/// How many connections this proxy serves at once: `MAX_CONNECTIONS`, or fewer when its
/// descriptor limit (`files`) would run out first.
fn connection_bound(files: Option<u64>) -> usize {
    let fit = files.map_or(u64::MAX, |f| {
        f.saturating_sub(FDS_SPARE) / FDS_PER_CONNECTION
    });
    (fit.min(MAX_CONNECTIONS as u64) as usize).max(1)
}

/// Connections refused for being over the bound, and when that was last logged.
#[derive(Default)]
struct Overload {
    refused: u64,
    logged: Option<Instant>,
}

impl Overload {
    /// Answers 503 without waiting (the answer fits in a new socket's buffer; if not, the
    /// member gets a bare close) and drops the connection; logs it at most once a minute.
    fn refuse(&mut self, conn: &UnixStream, bound: usize, state: &State) {
        let reason = format!("over {bound} connections at once");
        let head = format!(
            "HTTP/1.1 503 ateam egress: {reason}\r\nContent-Length: 0\r\nConnection: close\r\nX-Ateam-Egress: refused\r\n\r\n"
        );
        let flags = rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL;
        let _ = rustix::net::send(conn, head.as_bytes(), flags);
        self.refused += 1;
        if self
            .logged
            .is_some_and(|t| t.elapsed() < OVERLOAD_LOG_EVERY)
        {
            return;
        }
        tracing::warn!(
            bound,
            refused = self.refused,
            "connections over the bound refused"
        );
        state.record(Event {
            ts: Event::now(),
            verdict: Verdict::Failed,
            // Not read: nothing of a request to name.
            method: "-".into(),
            host: "-".into(),
            port: 0,
            path: None,
            addr: None,
            status: 503,
            reason: Some(format!("{reason}: {} refused so far", self.refused)),
            count: None,
            learned: false,
        });
        self.logged = Some(Instant::now());
    }
}

/// A request as far as the proxy needs it.
struct Request {
    method: String,
    host: String,
    port: u16,
    /// For plain HTTP: the head to send upstream (origin-form, our own Host and Connection).
    forward: Option<Vec<u8>>,
}

/// Why a request is answered by the proxy itself.
struct Refused {
    status: u16,
    reason: String,
    /// For a failed connect: the address and the error alone, to be put in a sentence.
    detail: String,
}

fn refuse(status: u16, reason: impl Into<String>) -> Refused {
    let reason = reason.into();
    Refused {
        status,
        detail: reason.clone(),
        reason,
    }
}

/// One connection: its request read, routed (tunnelled, intercepted or refused), judged
/// against the allowlist, then connected; every outcome but a probe is logged.
async fn handle(mut conn: UnixStream, state: Arc<State>) {
    let started = Instant::now();
    let mut buf = Vec::with_capacity(4096);
    let Some((head_len, req)) = read_request(&mut conn, &mut buf, &state).await else {
        return;
    };
    let mut event = Event {
        ts: Event::now(),
        verdict: Verdict::Refused,
        method: req.method.clone(),
        host: req.host.clone(),
        port: req.port,
        path: None,
        addr: None,
        status: 0,
        reason: None,
        count: None,
        learned: false,
    };
    let route = match state.rules() {
        // A member that uses a login never reaches where logins are refreshed, whatever its
        // list allows: refused before a name is resolved or anything connected.
        Ok(rules) => {
            match login_refusal(&rules.1, &req.host).or_else(|| state.denied(&req.host, req.port)) {
                Some(reason) => Route::Refuse(reason),
                None => icpt::route(&rules.1, &req.host, req.port, req.forward.is_none()),
            }
        }
        // `decide` refuses it, with the reason.
        Err(_) => Route::Tunnel,
    };
    let intercept = match route {
        Route::Tunnel => None,
        Route::Refuse(reason) => {
            event.status = 403;
            event.reason = Some(reason.clone());
            state.record(event);
            let _ = answer(&mut conn, &refuse(403, reason)).await;
            return;
        }
        Route::Intercept(i) => {
            // Before anything is connected or computed: the handshake's place, or a refusal.
            let admitted = state
                .handshakes
                .lock()
                .expect("handshakes lock")
                .admit(Instant::now());
            match admitted {
                Ok(permit) => Some((i, permit)),
                Err(r) => {
                    if let Some(n) = r.log {
                        event.verdict = Verdict::Failed;
                        event.status = 503;
                        event.reason = Some(format!(
                            "{}: {n} refused since the last such line",
                            r.reason
                        ));
                        state.record(event);
                    }
                    let _ = answer(&mut conn, &refuse(503, r.reason)).await;
                    return;
                }
            }
        }
    };
    let learning = intercept.is_none() && state.learns(&req.host, req.port);
    event.learned = learning;
    let (addr, upstream) = match decide(&req, &state, learning).await {
        Ok((addr, stream)) => {
            event.addr = Some(addr.to_string());
            (addr, stream)
        }
        Err((addr, r)) => {
            if r.status >= 500 {
                event.verdict = Verdict::Failed;
            }
            event.addr = addr.map(|a| a.to_string());
            event.status = r.status;
            event.reason = Some(r.reason.clone());
            state.record(event);
            let _ = answer(&mut conn, &r).await;
            return;
        }
    };
    if let Some((i, permit)) = intercept {
        let rest = buf[head_len..].to_vec();
        return intercepted(conn, rest, (*i, permit), event, (addr, upstream), state).await;
    }
    if learning {
        event.reason = Some(format!(
            "learned: {}:{} {}",
            req.host,
            req.port,
            super::log::NOT_LISTED
        ));
    }
    event.verdict = Verdict::Allowed;
    event.status = 200;
    tracing::debug!(
        elapsed_us = started.elapsed().as_micros() as u64,
        "connected"
    );
    state.record(event);
    tunnel(conn, &buf[head_len..], &req, (addr, upstream), &state).await;
}

/// Carries an allowed tunnel (or forwarded request) until it ends, or until what it reaches
/// is no longer allowed (then it is closed, and the log says so).
async fn tunnel(
    conn: UnixStream,
    rest: &[u8],
    req: &Request,
    (addr, upstream): (SocketAddr, TcpStream),
    state: &State,
) {
    tokio::select! {
        () = connected(conn, rest, req, upstream) => {}
        () = state.revoked(&req.host, req.port, false) => {
            state.record(Event {
                ts: Event::now(),
                verdict: Verdict::Refused,
                method: req.method.clone(),
                host: req.host.clone(),
                port: req.port,
                path: None,
                addr: Some(addr.to_string()),
                status: 403,
                reason: Some(format!("{}:{} is no longer in this member's allow list: its open connection is closed", req.host, req.port)),
                count: None,
                learned: false,
            });
        }
    }
}

/// Why a member whose intercepts inject a login may not reach `host`, if it may not.
fn login_refusal(intercepts: &[Intercept], host: &str) -> Option<String> {
    if crate::core::intercept::injected_logins(intercepts).is_empty() {
        return None;
    }
    crate::core::logins::refused_host(host)
}

/// The request's head, read within `HEAD_TIMEOUT` into `buf`, and its length; none when
/// the connection is answered already: a probe, a client gone, too slow (408), or a head
/// that does not parse (refused and logged).
async fn read_request(
    conn: &mut UnixStream,
    buf: &mut Vec<u8>,
    state: &State,
) -> Option<(usize, Request)> {
    let head_len = match tokio::time::timeout(HEAD_TIMEOUT, read_head(conn, buf)).await {
        Ok(Ok(Some(n))) => n,
        // A probe (liveness check) or a client that went away: nothing to record.
        Ok(Ok(None)) | Ok(Err(_)) => return None,
        Err(_) => {
            let why = format!("no request within {}s", HEAD_TIMEOUT.as_secs());
            let _ = answer(conn, &refuse(408, why)).await;
            return None;
        }
    };
    match parse(&buf[..head_len]) {
        Ok(r) => Some((head_len, r)),
        Err(r) => {
            let _ = answer(conn, &r).await;
            state.record(Event {
                ts: Event::now(),
                verdict: Verdict::Refused,
                method: String::from_utf8_lossy(buf.split(|b| *b == b' ').next().unwrap_or(b""))
                    .chars()
                    .take(16)
                    .collect(),
                host: String::new(),
                port: 0,
                path: None,
                addr: None,
                status: r.status,
                reason: Some(r.reason),
                count: None,
                learned: false,
            });
            None
        }
    }
}

/// An allowed connection, once its upstream is open: a CONNECT is told so, a plain
/// request's head is sent on, what the client sent past its head follows, and the bytes
/// are relayed both ways until either side closes.
async fn connected(mut conn: UnixStream, rest: &[u8], req: &Request, mut upstream: TcpStream) {
    let _ = upstream.set_nodelay(true);
    let sent = match &req.forward {
        None => {
            conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
        }
        Some(head) => upstream.write_all(head).await,
    };
    if sent.is_err() || (!rest.is_empty() && upstream.write_all(rest).await.is_err()) {
        return;
    }
    let _ = relay::relay(&conn, &upstream).await;
}

/// A CONNECT to a host with rules: its certificate and secret read (or 503), then the
/// member's TLS served by `intercept::serve`. Each request inside is logged; the CONNECT
/// itself only when it fails.
async fn intercepted(
    mut conn: UnixStream,
    rest: Vec<u8>,
    (i, permit): (Intercept, tokio::sync::OwnedSemaphorePermit),
    mut event: Event,
    upstream: (SocketAddr, TcpStream),
    state: Arc<State>,
) {
    let prepared = match state
        .intercepts()
        .and_then(|f| state.prepared.lock().expect("prepared lock").get(&i, &f))
    {
        Ok(p) => p,
        Err(reason) => {
            event.verdict = Verdict::Failed;
            event.status = 503;
            event.reason = Some(reason.clone());
            state.record(event);
            let _ = answer(&mut conn, &refuse(503, reason)).await;
            return;
        }
    };
    if conn
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let member = icpt::Prefixed {
        head: rest,
        inner: conn,
    };
    let accepted = icpt::Accepted {
        host: event.host,
        port: event.port,
        i,
        upstream,
        prepared,
        permit,
        limits: icpt::Limits {
            head: HEAD_TIMEOUT,
            connect: CONNECT_TIMEOUT,
        },
    };
    icpt::serve(member, accepted, state).await;
}

/// Reads until the end of the head (`\r\n\r\n`); `None` when the peer sent nothing at all.
async fn read_head(conn: &mut UnixStream, buf: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    let mut chunk = [0u8; 4096];
    loop {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            };
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some(from + i + 4));
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    }
}

/// `host:port` or `[v6]:port`.
fn split_authority(a: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    if let Some(rest) = a.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port?,
            None => return None,
        };
        return Some((format!("[{h}]"), port));
    }
    match a.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), p.parse().ok()?)),
        None => Some((a.to_string(), default_port?)),
    }
}

fn parse(head: &[u8]) -> Result<Request, Refused> {
    let mut headers = [httparse::EMPTY_HEADER; 96];
    let mut r = httparse::Request::new(&mut headers);
    match r.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(refuse(400, "not an HTTP request")),
    }
    let method = r.method.unwrap_or_default().to_string();
    let target = r.path.unwrap_or_default();
    if method == "CONNECT" {
        let (host, port) = split_authority(target, None)
            .ok_or_else(|| refuse(400, format!("CONNECT needs host:port, not `{target}`")))?;
        return Ok(Request {
            method,
            host,
            port,
            forward: None,
        });
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return Err(if target.starts_with("https://") {
            refuse(
                501,
                "https through this proxy needs CONNECT (the client sent the URL in the clear)",
            )
        } else {
            refuse(
                400,
                format!("a proxy request needs an absolute http:// URL or CONNECT, not `{target}`"),
            )
        });
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let (host, port) = split_authority(authority, Some(80))
        .ok_or_else(|| refuse(400, format!("bad host in `{target}`")))?;
    let mut out = format!(
        "{method} {path} HTTP/1.{}\r\nHost: {authority}\r\n",
        r.version.unwrap_or(1)
    )
    .into_bytes();
    for h in r.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if matches!(
            name.as_str(),
            "host" | "connection" | "keep-alive" | "proxy-connection" | "proxy-authorization"
        ) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    // One request per connection: the next one is judged again, on its own connection.
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Request {
        method,
        host,
        port,
        forward: Some(out),
    })
}

/// Judges a request by name, resolves it, judges each address, and connects to the first
/// address that passes. The error carries the address judged, if any. `learning`: a
/// learning run lets it past the list (its address is judged all the same).
async fn decide(
    req: &Request,
    state: &State,
    learning: bool,
) -> Result<(SocketAddr, TcpStream), (Option<SocketAddr>, Refused)> {
    let rules = state.list().map_err(|e| (None, refuse(503, e)))?;
    let list = &rules.0;
    let host = Host::parse(&req.host).ok_or_else(|| {
        (
            None,
            refuse(400, format!("`{}` is not a host name", req.host)),
        )
    })?;
    if !list.allows(&host, req.port) && !learning {
        return Err((
            None,
            refuse(
                403,
                format!("{host}:{} {}", req.port, super::log::NOT_LISTED),
            ),
        ));
    }
    // The host's loopback by name: never resolved (no DNS answer can move it), and only
    // for an entry naming it with this very port.
    if matches!(&host, Host::Name(n) if n == HOST_SERVICE) {
        return host_service(list, req.port, &state.owners()).await;
    }
    let addrs: Vec<SocketAddr> = match &host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, req.port)],
        Host::Name(n) => {
            match tokio::time::timeout(
                CONNECT_TIMEOUT,
                tokio::net::lookup_host((n.as_str(), req.port)),
            )
            .await
            {
                Ok(Ok(a)) => a.collect(),
                Ok(Err(e)) => return Err((None, refuse(502, format!("cannot resolve {n}: {e}")))),
                Err(_) => return Err((None, refuse(504, format!("resolving {n} timed out")))),
            }
        }
    };
    let own = state.own.lock().expect("own lock").clone();
    let mut first_refusal = None;
    let mut last_error = None;
    for a in addrs {
        if let Err(why) = list.judge_address(a.ip(), a.port(), &own) {
            first_refusal.get_or_insert((a, why));
            continue;
        }
        // A port of this host's own: only its person's (or a named uid's) listener.
        let owners = listeners::on_this_host(a.ip(), &own).then(|| state.owners());
        match connect(a, owners.as_ref()).await {
            Ok(s) => return Ok((a, s)),
            Err(r) if r.status == 403 => return Err((Some(a), r)),
            Err(r) => last_error = Some((a, r)),
        }
    }
    if let Some((a, r)) = last_error {
        return Err((Some(a), r));
    }
    match first_refusal {
        Some((a, why)) => Err((
            Some(a),
            refuse(
                403,
                match host {
                    Host::Ip(_) => format!("address {why}"),
                    Host::Name(n) => format!("{n} resolves to {why}"),
                },
            ),
        )),
        None => Err((None, refuse(502, format!("{} has no address", req.host)))),
    }
}

/// `host.ateam.internal:PORT`: connects to the host's loopback on PORT, IPv4 first, and
/// only to a listener of `owners`: one of another uid is refused, not passed over.
async fn host_service(
    list: &Allowlist,
    port: u16,
    owners: &Owners,
) -> Result<(SocketAddr, TcpStream), (Option<SocketAddr>, Refused)> {
    if !list.allows_host_service(port) {
        return Err((
            None,
            refuse(
                403,
                format!("{HOST_SERVICE}:{port} {}", super::log::NOT_LISTED),
            ),
        ));
    }
    let mut why = Vec::new();
    let mut status = 502;
    for ip in HOST_SERVICE_ADDRS {
        let a = SocketAddr::new(ip, port);
        match connect(a, Some(owners)).await {
            Ok(s) => return Ok((a, s)),
            Err(r) if r.status == 403 => return Err((Some(a), r)),
            Err(r) => {
                if r.status == 504 {
                    status = 504;
                }
                why.push(r.detail);
            }
        }
    }
    let first = SocketAddr::new(HOST_SERVICE_ADDRS[0], port);
    let reason = format!(
        "nothing answers on the host's loopback port {port} ({})",
        why.join("; ")
    );
    Err((Some(first), refuse(status, reason)))
}

/// Connects to `a`; with `owners`, only to a listener one of them owns (403 otherwise):
/// judged from the kernel's table before connecting, so that a foreign listener gets no
/// connection, and again for the socket that accepted, before any byte is sent, so that one
/// that took the port in between gets nothing either. `detail` is the failure alone.
async fn connect(a: SocketAddr, owners: Option<&Owners>) -> Result<TcpStream, Refused> {
    let failed = |status: u16, detail: String| Refused {
        status,
        reason: format!("cannot connect to {detail}"),
        detail,
    };
    if let Some(o) = owners {
        let table = listeners::table().map_err(|e| refuse(503, e.to_string()))?;
        if let Some(l) = listeners::listeners_for(&table, a)
            .into_iter()
            .find(|l| !o.trusts(l.uid))
        {
            return Err(refuse(403, o.refusal(l.local, l.uid)));
        }
    }
    let s = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(failed(502, format!("{a}: {e}"))),
        Err(_) => {
            let mut r = failed(504, format!("{a}: timed out"));
            r.reason = format!("connecting to {a} timed out");
            return Err(r);
        }
    };
    match owners {
        Some(o) => accepted_by_owner(s, a, o).await,
        None => Ok(s),
    }
}

/// The connection `s` to `a`, if the socket that accepted it is of `owners`; closed (and
/// 403) if not, or if the kernel's table never shows it.
async fn accepted_by_owner(s: TcpStream, a: SocketAddr, o: &Owners) -> Result<TcpStream, Refused> {
    let (Ok(ours), Ok(peer)) = (s.local_addr(), s.peer_addr()) else {
        return Err(refuse(502, format!("the connection to {a} closed at once")));
    };
    // The accepted socket is in the table once the handshake is, which `connect` waited
    // for; a few short looks cover a table read in the middle of its update.
    for _ in 0..5 {
        let table = listeners::table().map_err(|e| refuse(503, e.to_string()))?;
        if let Some(got) = listeners::accepted_by(&table, ours, peer) {
            if o.trusts(got.uid) {
                return Ok(s);
            }
            drop(s);
            return Err(refuse(403, o.refusal(peer, got.uid)));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Err(refuse(
        403,
        format!("cannot tell whose listener accepted the connection to {peer}"),
    ))
}

/// The proxy's own answer: the reason in the status line (clients such as busybox `wget`
/// print only that) and in the body.
async fn answer(conn: &mut UnixStream, r: &Refused) -> std::io::Result<()> {
    let phrase: String = r
        .reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let body = format!("ateam egress: {phrase}\n");
    let head = format!(
        "HTTP/1.1 {} ateam egress: {phrase}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\nX-Ateam-Egress: refused\r\n\r\n",
        r.status,
        body.len()
    );
    conn.write_all(format!("{head}{body}").as_bytes()).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_allowed_once_counts_for_the_start_it_names_alone() {
        let egress = tempfile::tempdir().unwrap();
        let ctl = tempfile::tempdir().unwrap();
        let policy = PolicyFile {
            team: "t".into(),
            member: "a".into(),
            allow: vec!["example.com".into()],
            intercept: vec![],
            applied_by: vec![],
            host_listeners: vec![],
            deny: vec!["denied.example".into()],
        };
        std::fs::write(
            egress.path().join("policy.json"),
            serde_json::to_vec(&policy).unwrap(),
        )
        .unwrap();
        let once = super::super::OnceFile {
            start: "c1 s1".into(),
            allow: vec!["pypi.org".into(), "denied.example".into()],
            rules: vec![],
        };
        std::fs::write(
            egress.path().join(layout::EGRESS_ONCE_NAME),
            serde_json::to_vec(&once).unwrap(),
        )
        .unwrap();
        let (dir, ctl_dir) = (
            Dir::open(egress.path()).unwrap(),
            Dir::open(ctl.path()).unwrap(),
        );
        let pypi = Host::parse("pypi.org").unwrap();
        let allows = |host: &Host| {
            read_policy(&dir, "policy.json", &ctl_dir)
                .list
                .unwrap()
                .0
                .allows(host, 443)
        };
        // Not released: nothing allowed once.
        assert!(!allows(&pypi));
        std::fs::write(ctl.path().join("go"), "c1 s1\n").unwrap();
        assert!(allows(&pypi));
        // Denied stays denied: the deny list is judged first, whatever the list allows.
        let p = read_policy(&dir, "policy.json", &ctl_dir);
        assert!(p.deny.allows(&Host::parse("denied.example").unwrap(), 443));
        // Another start (a restart): gone.
        std::fs::write(ctl.path().join("go"), "c1 s2").unwrap();
        assert!(!allows(&pypi));
        // A rule for a host without rules: the file counts for nothing.
        std::fs::write(ctl.path().join("go"), "c1 s1").unwrap();
        let bad = super::super::OnceFile {
            rules: vec![super::super::OnceRule {
                host: "nohost.example".into(),
                rule: crate::core::intercept::HttpRule {
                    methods: vec![],
                    paths: vec![],
                },
            }],
            ..once
        };
        std::fs::write(
            egress.path().join(layout::EGRESS_ONCE_NAME),
            serde_json::to_vec(&bad).unwrap(),
        )
        .unwrap();
        assert!(!allows(&pypi));
    }

    #[test]
    fn the_connection_bound_fits_the_descriptor_limit() {
        assert_eq!(connection_bound(Some(1_048_576)), MAX_CONNECTIONS);
        assert_eq!(connection_bound(None), MAX_CONNECTIONS);
        // A soft limit of 1024: 160 relayed connections, 960 descriptors, and room to spare.
        assert_eq!(connection_bound(Some(1024)), 160);
        assert_eq!(connection_bound(Some(10)), 1);
    }

    #[test]
    fn requests_parse_into_what_is_judged() {
        let r = parse(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n")
            .ok()
            .unwrap();
        assert_eq!(
            (r.method.as_str(), r.host.as_str(), r.port),
            ("CONNECT", "api.example.com", 443)
        );
        assert!(r.forward.is_none());
        let r = parse(b"CONNECT [::1]:8080 HTTP/1.1\r\n\r\n").ok().unwrap();
        assert_eq!((r.host.as_str(), r.port), ("[::1]", 8080));
        let r = parse(
            b"GET http://user@Example.com:8080/a?b HTTP/1.1\r\nHost: evil.example\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .ok()
        .unwrap();
        assert_eq!((r.host.as_str(), r.port), ("Example.com", 8080));
        let fwd = String::from_utf8(r.forward.unwrap()).unwrap();
        assert_eq!(
            fwd,
            "GET /a?b HTTP/1.1\r\nHost: Example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let r = parse(b"GET http://example.com HTTP/1.0\r\n\r\n")
            .ok()
            .unwrap();
        assert_eq!(r.port, 80);
        for (bad, status) in [
            (&b"GET https://example.com/ HTTP/1.1\r\n\r\n"[..], 501),
            (b"GET /local HTTP/1.1\r\n\r\n", 400),
            (b"CONNECT example.com HTTP/1.1\r\n\r\n", 400),
            (b"\x16\x03\x01garbage\r\n\r\n", 400),
        ] {
            assert_eq!(parse(bad).err().map(|r| r.status), Some(status), "{bad:?}");
        }
    }
}
