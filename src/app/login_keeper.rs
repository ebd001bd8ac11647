//! The login keeper (`ateam login-keeper`, hidden): one detached process per state folder,
//! started by apply (and the controller) whenever a member's proxy injects a login, that
//! refreshes each login in use ahead of its end and gives every such proxy the new access
//! token. It holds `keeper.lock` for as long as it runs, so a second one started meanwhile
//! exits at once; it refreshes under the store's lock like everyone else; it ends by itself
//! once no proxy has injected a login for a while. Restarts lose nothing: the login is on
//! disk, and the next apply or controller pass starts a keeper again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{FlockOperation, flock};

use crate::core::intercept::injected_logins;
use crate::core::layout;
use crate::core::logins::{LoginKind, refresh_at};
use crate::detached::{Launch, PROXY_ENV};
use crate::files::{self, Owner};
use crate::logins::{LoginError, lock, now_ms, values_of};
use crate::servers::egress::{self, Paths};

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LoginError + '_ {
    move |source| LoginError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The keeper looks again at least this often (a member that came or went, a new import).
const LOOK_EVERY: Duration = Duration::from_secs(30);
/// Never sooner than this after its last look.
const LOOK_SOONEST: Duration = Duration::from_millis(500);
/// While no proxy injects a login (apply is still making them), it looks this often...
const IDLE_EVERY: Duration = Duration::from_secs(2);
/// ...and ends after this many such looks in a row (a minute).
const IDLE_LOOKS: u32 = 30;

/// Whether a keeper runs for this state folder (someone holds `keeper.lock`).
pub fn running(state_dir: &Path) -> bool {
    let path = layout::keeper_lock_path(&layout::logins_dir(state_dir));
    let Ok(file) = files::open_lock(&path) else {
        return false;
    };
    flock(&file, FlockOperation::NonBlockingLockShared).is_err()
}

/// Starts a keeper for this state folder unless one runs. True when it started one.
pub fn ensure(state_dir: &Path, owner: Owner) -> Result<bool, LoginError> {
    let dir = layout::logins_dir(state_dir);
    files::private_dir(&dir, owner).map_err(io(&dir))?;
    if running(state_dir) {
        return Ok(false);
    }
    start(state_dir, crate::detached::exe)?;
    Ok(true)
}

/// Starts `program` as the keeper of `state_dir`.
fn start(state_dir: &Path, program: fn() -> std::io::Result<PathBuf>) -> Result<(), LoginError> {
    let err = layout::keeper_err_path(&layout::logins_dir(state_dir));
    let launch = Launch {
        program,
        args: vec![
            "--state-dir".into(),
            state_dir.as_os_str().to_owned(),
            "login-keeper".into(),
        ],
        keep: PROXY_ENV,
        stderr: Some(&err),
    };
    let mut child = launch.spawn().map_err(LoginError::Keeper)?;
    // It lives on after apply; reaped here while this process lasts, by init after.
    std::thread::spawn(move || child.wait());
    Ok(())
}

/// The binary now at the path this process was started from (after an upgrade replaced it,
/// the kernel names the old one `<path> (deleted)`).
fn replacement() -> std::io::Result<PathBuf> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let s = exe.as_os_str().to_string_lossy();
    Ok(PathBuf::from(s.strip_suffix(" (deleted)").unwrap_or(&s)))
}

/// Runs the keeper until no proxy injects a login (or SIGTERM). Returns at once when another
/// keeper holds the folder.
pub fn run(state_dir: &Path) -> Result<(), LoginError> {
    let _ = rustix::process::setsid();
    let owner = Owner {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
    };
    let dir = layout::logins_dir(state_dir);
    files::private_dir(&dir, owner).map_err(io(&dir))?;
    let path = layout::keeper_lock_path(&dir);
    let file = files::open_lock(&path).map_err(io(&path))?;
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        return Ok(());
    }
    tracing::info!(state = %state_dir.display(), "login keeper started");
    let mut idle = 0;
    loop {
        // Between two looks (never in the middle of a refresh): an upgraded ateam's keeper
        // takes over, with the new code.
        if crate::detached::runs_a_replaced_binary(std::process::id()) {
            tracing::info!("ateam was replaced: the keeper hands over to the new binary");
            drop(file);
            return start(state_dir, replacement);
        }
        let users = proxies(state_dir);
        if users.is_empty() {
            // Nothing to keep (apply is still making the proxies, or the team is gone: its
            // folders are not made again here).
            idle += 1;
            if idle >= IDLE_LOOKS {
                tracing::info!("no proxy injects a login: the keeper ends");
                return Ok(());
            }
            std::thread::sleep(IDLE_EVERY);
            continue;
        }
        idle = 0;
        let wait = match tick(state_dir, owner, &users) {
            Ok(next) => next,
            Err(e) => {
                tracing::warn!(error = %e, "the logins could not be kept");
                LOOK_EVERY
            }
        };
        std::thread::sleep(wait.clamp(LOOK_SOONEST, LOOK_EVERY));
    }
}

/// One look: under the store's lock, each login in use refreshed if due, and each proxy given
/// the current values where it holds others. How long until the next refresh is due.
fn tick(
    state_dir: &Path,
    owner: Owner,
    users: &[(Paths, Vec<LoginKind>)],
) -> Result<Duration, LoginError> {
    let mut kinds: Vec<LoginKind> = users.iter().flat_map(|(_, k)| k.clone()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let held = lock(state_dir, owner)?;
    let mut values = std::collections::BTreeMap::new();
    let mut next = LOOK_EVERY;
    for kind in kinds {
        match held.fresh(kind, now_ms()) {
            Ok(login) => {
                if let Some(at) = refresh_at(&login) {
                    next = next.min(Duration::from_millis(at.saturating_sub(now_ms())));
                }
                values.extend(values_of(&login));
            }
            Err(e) => tracing::warn!(login = kind.name(), error = %e, "login not refreshed"),
        }
    }
    for (paths, _) in users {
        match egress::put_login_values(paths, &values) {
            Ok(true) => {
                tracing::info!(proxy = %paths.dir.display(), "proxy given the new login token")
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(proxy = %paths.dir.display(), error = %e, "proxy not given the login token")
            }
        }
    }
    Ok(next)
}

/// Every proxy of the state folder whose policy injects a login, with those logins: each
/// member's egress folder under `teams/*/members/*/`.
fn proxies(state_dir: &Path) -> Vec<(Paths, Vec<LoginKind>)> {
    let mut out = Vec::new();
    for team in subdirs(&layout::teams_dir(state_dir)) {
        let run = layout::team_run_dir(state_dir, &team);
        for member in subdirs(&layout::members_dir(&run)) {
            let paths = Paths::new(state_dir, &team, &member);
            let Some(policy) = egress::read_policy(&paths.policy) else {
                continue;
            };
            let kinds = injected_logins(&policy.intercept);
            if !kinds.is_empty() && paths.intercept.exists() {
                out.push((paths, kinds));
            }
        }
    }
    out
}

fn subdirs(dir: &PathBuf) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}
