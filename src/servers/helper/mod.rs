//! Helper servers as objects ateam reconciles, as it does egress proxies: one detached
//! `ateam helper-server` per member of a team with `helperRequests: true`, seen alive when its
//! socket answers (observe), started when it does not and stopped (its socket removed) when
//! its member is no longer wanted or the team turns requests off (the plan's
//! `StartHelperServer` and `StopHelperServer`, carried out here).
//!
//! - `server`: the server itself (`ateam helper-server`, a hidden command).

pub mod server;

use std::path::{Path, PathBuf};

use crate::core::layout;
use crate::detached::{self, Detach, Launch, LaunchError, START_TIMEOUT};
use crate::files::{self, Owner};

/// Whether something answers on the socket: the server's liveness.
pub use crate::detached::answers;

/// Why a member's helper server could not be started (by apply or the controller); what
/// fails inside the server itself is `server::ListenError`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A file of the server's could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The server was started but nothing answered on its socket within `START_TIMEOUT`.
    #[error("the helper server did not answer on {} within {}s{}", .socket.display(), START_TIMEOUT.as_secs(), .why.as_ref().map(|w| format!(": {w}")).unwrap_or_default())]
    NotAnswering {
        /// The server's socket.
        socket: PathBuf,
        /// What the server said on standard error, if anything.
        why: Option<String>,
    },
}

/// Every file of one member's helper server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// Where it listens: in the member's control folder.
    pub socket: PathBuf,
    /// Its own folder (never mounted).
    pub dir: PathBuf,
    /// Its pid file, in the team's folder.
    pub pid: PathBuf,
    /// What it said on standard error when it last started.
    pub err: PathBuf,
}

impl Paths {
    /// The paths of a member's helper server under ateam's state folder.
    pub fn new(state_dir: &Path, team: &str, member: &str) -> Paths {
        let dir = layout::helpers_dir(state_dir, team, member);
        Paths {
            socket: layout::helpers_socket_path(state_dir, team, member),
            pid: layout::helpers_pid_path(&layout::team_run_dir(state_dir, team), member),
            err: layout::helpers_err_path(&dir),
            dir,
        }
    }
}

/// The arguments of `ateam helper-server` for one member.
pub fn args(state_dir: &Path, team: &str, member: &str, owner: Owner) -> Vec<std::ffi::OsString> {
    vec![
        "--state-dir".into(),
        state_dir.into(),
        "helper-server".into(),
        "--team".into(),
        team.into(),
        "--member".into(),
        member.into(),
        "--socket-owner".into(),
        format!("{}:{}", owner.uid, owner.gid).into(),
    ]
}

/// Starts the member's server, detached (it makes itself a session of its own, so that a
/// terminal's hang-up or Ctrl-C to apply does not reach it; standard error in `server.err`),
/// and waits until it answers. `member` owns the socket (0600): the member, and only it, may
/// connect. The server runs as the user running ateam: it changes the team.
pub fn start(
    state_dir: &Path,
    team: &str,
    member: &str,
    store_owner: Owner,
    member_owner: Owner,
) -> Result<(), StartError> {
    let paths = Paths::new(state_dir, team, member);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StartError::Io { path, source }
    };
    files::private_dir(&paths.dir, store_owner).map_err(io(&paths.dir))?;
    if let Some(ctl) = paths.socket.parent() {
        files::member_dir(ctl, store_owner, member_owner).map_err(io(ctl))?;
    }
    stop(&paths).map_err(io(&paths.pid))?;
    let launch = Launch {
        program: detached::exe,
        args: args(state_dir, team, member, member_owner),
        // Only what finds the engine and judges grants: never apply's `secretEnv` values.
        keep: detached::SERVER_ENV,
        stderr: Some(&paths.err),
    };
    let io = |path: PathBuf, source| StartError::Io { path, source };
    launch
        .start(Detach::Reaped, &paths.socket, &paths.err)
        .map_err(|e| match e {
            LaunchError::Stderr { path, source } => io(path, source),
            LaunchError::Program(source) => io("ateam".into(), source),
            LaunchError::Spawn { exe, source } => io(exe, source),
            LaunchError::Launcher(status) => StartError::NotAnswering {
                socket: paths.socket.clone(),
                why: Some(format!("its launcher exited with {status}")),
            },
            LaunchError::NotAnswering { why } => StartError::NotAnswering {
                socket: paths.socket.clone(),
                why,
            },
        })
}

/// Stops the member's server, if one runs (its pid file names a live `ateam helper-server`
/// of this very socket's member: a reused pid is never signalled), and removes its socket.
pub fn stop(paths: &Paths) -> std::io::Result<()> {
    detached::stop(|| running_pid(paths), &paths.socket, &paths.pid)
}

/// The pid of this member's server, when it runs. (The pid file lives in the member's own
/// folder, so a live helper-server with that pid is this member's.)
pub(crate) fn running_pid(paths: &Paths) -> Option<u32> {
    detached::running_pid(&paths.pid, |args| {
        args.iter().any(|a| *a == b"helper-server")
    })
}

/// Stops every helper server of `team` (its deletion).
pub(crate) fn stop_team(state_dir: &Path, team: &str) {
    let members = layout::members_dir(&layout::team_run_dir(state_dir, team));
    if let Ok(rd) = std::fs::read_dir(&members) {
        for e in rd.flatten() {
            if let Some(name) = e.file_name().to_str() {
                let _ = stop(&Paths::new(state_dir, team, name));
            }
        }
    }
}
