//! The host side of a member's egress: an HTTP proxy on a Unix socket that only that member
//! can reach (the socket lies in its control folder). It speaks `CONNECT host:port` and plain
//! HTTP forwarding (`GET http://host/...`), resolves names itself, judges every address it
//! got, and connects to the very address it judged, so a name cannot be made to resolve to
//! something else between check and use. Every decision is one line in the member's egress
//! log. One process per member: a member is only ever judged by its own list.
//!
//! Here is its start (`run`); the rest, by job:
//!
//! - `serve`: the accept loop, its bound on connections, housekeeping, SIGTERM and SIGHUP;
//! - `connection`: one connection from its request to its verdict, and `request`, how that
//!   request is read and parsed and how the proxy answers when it refuses;
//! - `decide`: the allowlist's judgement of names and addresses, and `upstream`, the
//!   connecting to what it allowed (a listener of this host's only if its owner is trusted);
//! - `tunnel`: what carries an allowed connection (a CONNECT tunnel or a forwarded request);
//! - `state`: what the proxy holds while it serves, and `policy` and `dir`, how it reads
//!   the member's allowlist and intercepts through folders held open;
//! - `intercept`: its path for a host with rules, and `handshakes`, the bound on that TLS work;
//! - `relay`: how it moves an allowed connection's bytes (splice(2), or copying).

mod connection;
mod decide;
mod dir;
mod handshakes;
mod intercept;
mod policy;
mod relay;
mod request;
mod serve;
mod state;
mod tunnel;
mod upstream;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UnixListener;

use super::ProxyError;
use super::log::Log;
use dir::Dir;
use handshakes::Handshakes;
use intercept as icpt;
use policy::{read_intercepts, read_policy};
use state::{State, own_addresses};

/// How long a member has to send its request head: a connection that sends nothing holds a
/// slot this long at most.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long resolving a name, and then connecting, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Threads that may resolve names at once (tokio's blocking pool; its default is 512).
const RESOLVER_THREADS: usize = 8;
/// The proxy's data (heap and thread stacks): with its bounds (on connections, in `serve`;
/// on resolving, here) it needs tens of MiB; this is the backstop (`detached::limit_self`).
pub const MAX_DATA: u64 = 256 << 20;

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

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
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
        serve::serve(listener, state, &cfg, || {
            socket_dir.stamp(&socket_name).map(|s| s.2) == Some(ino)
        })
        .await
    })
}
