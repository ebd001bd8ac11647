//! The person's subscription logins, kept by ateam alone (`core::logins` says what a login
//! is). A login lives in `<state>/logins/<kind>.json` (0600, the store owner's, in a 0700
//! folder no member mounts and no proxy reads). Every read that may refresh, every refresh and
//! every import holds `<state>/logins/lock` (flock): apply, the controller, the keeper and
//! `ateam login` may run at once, and a rotated refresh token must be spent once. A refresh
//! writes the new tokens atomically before anyone uses them, so a crash leaves either the old
//! login or the new one.
//!
//! - `http`: the refresh's one request.
//!
//! The detached process that refreshes ahead of expiry and gives each proxy that injects a
//! login the new access token is `app::login_keeper` (it writes proxies' files: above
//! `egress`).

pub(crate) mod http;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

use crate::core::layout;
use crate::core::logins::{self as core, ImportError, Login, LoginKind, Refreshed};
use crate::files::{self, Owner};

/// Why a login could not be read, imported or refreshed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoginError {
    /// A file of the store could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// No login of this kind was imported.
    #[error("no {} login: import it with `ateam login import {}` (after logging in with the agent on this machine)", .kind.name(), .kind.name())]
    NotImported {
        /// Whose.
        kind: LoginKind,
    },
    /// The provider refused the login's refresh token: it was spent elsewhere (the agent on
    /// the host refreshed it after the import), revoked, or expired.
    #[error("the {} login's refresh token was refused ({why}): log in again with the agent and `ateam login import {}`", .kind.name(), .kind.name())]
    Refused {
        /// Whose.
        kind: LoginKind,
        /// The provider's answer.
        why: String,
    },
    /// The agent's file is not a login ateam can import.
    #[error("{path}: {source}")]
    Import {
        /// The file (or `-`).
        path: String,
        /// What is wrong with it.
        #[source]
        source: ImportError,
    },
    /// The store's file does not parse (written by another version, or by hand).
    #[error("{}: not a login of this ateam: {why}; import it again", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// serde's reason.
        why: String,
    },
    /// The keeper could not be started.
    #[error("cannot start the login keeper: {0}")]
    Keeper(#[source] crate::detached::LaunchError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LoginError + '_ {
    move |source| LoginError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The store's lock, held while it lives.
#[must_use = "the lock is released when this is dropped"]
pub struct Held {
    _file: std::fs::File,
    dir: PathBuf,
    owner: Owner,
}

/// Takes the store's lock (waiting for whoever holds it: a refresh takes seconds at most).
pub fn lock(state_dir: &Path, owner: Owner) -> Result<Held, LoginError> {
    let dir = layout::logins_dir(state_dir);
    files::private_dir(&dir, owner).map_err(io(&dir))?;
    let path = layout::logins_lock_path(&dir);
    let file = files::open_lock(&path).map_err(io(&path))?;
    flock(&file, FlockOperation::LockExclusive).map_err(|e| LoginError::Io {
        path: path.clone(),
        source: e.into(),
    })?;
    Ok(Held {
        _file: file,
        dir,
        owner,
    })
}

impl Held {
    /// The login of `kind` as stored, if imported.
    pub fn load(&self, kind: LoginKind) -> Result<Option<Login>, LoginError> {
        load_in(&self.dir, kind)
    }

    /// Stores `login` (atomically, 0600), replacing any of its kind.
    pub fn save(&self, login: &Login) -> Result<(), LoginError> {
        let path = layout::login_path(&self.dir, login.kind.name());
        let json = serde_json::to_vec_pretty(login).expect("a login always serializes");
        files::write_atomic(&path, &json, 0o600, self.owner).map_err(io(&path))
    }

    /// Forgets the login of `kind`; false when there was none.
    pub fn remove(&self, kind: LoginKind) -> Result<bool, LoginError> {
        let path = layout::login_path(&self.dir, kind.name());
        let there = path.exists();
        files::remove_if_present(&path).map_err(io(&path))?;
        Ok(there)
    }

    /// The login of `kind`, refreshed first when it is due at `now` (ms). A refresh that
    /// failed for a while is recorded and the old token returned (the keeper tries again);
    /// a refused refresh token is an error: only a new import helps.
    pub fn fresh(&self, kind: LoginKind, now: u64) -> Result<Login, LoginError> {
        let login = self.load(kind)?.ok_or(LoginError::NotImported { kind })?;
        if login.refused {
            return Err(refused(&login));
        }
        if core::refresh_at(&login).is_none_or(|at| at > now) {
            return Ok(login);
        }
        let next = refresh(&login, now);
        self.save(&next)?;
        if next.refused {
            return Err(refused(&next));
        }
        Ok(next)
    }

    /// The values a proxy injects for `kinds`, each login refreshed first if due: by the
    /// names of `intercept.json` (`LoginKind::secret_name`, `account_secret_name`).
    pub fn values(
        &self,
        kinds: &[LoginKind],
        now: u64,
    ) -> Result<BTreeMap<String, String>, LoginError> {
        let mut out = BTreeMap::new();
        for kind in kinds {
            out.extend(values_of(&self.fresh(*kind, now)?));
        }
        Ok(out)
    }
}

fn refused(login: &Login) -> LoginError {
    LoginError::Refused {
        kind: login.kind,
        why: login.last_error.clone().unwrap_or_default(),
    }
}

/// What a proxy injects for `login`, by name.
pub fn values_of(login: &Login) -> BTreeMap<String, String> {
    let mut out = BTreeMap::from([(
        login.kind.secret_name().to_string(),
        login.access_token.clone(),
    )]);
    if let (Some(name), Some(id)) = (login.kind.account_secret_name(), &login.account_id) {
        out.insert(name.to_string(), id.clone());
    }
    out
}

fn load_in(dir: &Path, kind: LoginKind) -> Result<Option<Login>, LoginError> {
    let path = layout::login_path(dir, kind.name());
    let bytes = match files::open_regular(&path) {
        Ok(mut f) => {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut b).map_err(io(&path))?;
            b
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| LoginError::Corrupt {
            path,
            why: format!("line {} column {}", e.line(), e.column()),
        })
}

/// The login of `kind` as stored, without the lock (for `status`: it changes nothing).
pub fn peek(state_dir: &Path, kind: LoginKind) -> Result<Option<Login>, LoginError> {
    load_in(&layout::logins_dir(state_dir), kind)
}

/// Refreshes `login` at its token endpoint now: the login with new tokens, or with the
/// failure recorded. The caller holds the lock and saves the result.
pub fn refresh(login: &Login, now: u64) -> Login {
    let Some(rt) = &login.refresh_token else {
        return login.clone();
    };
    let body = core::refresh_body(login, rt);
    let answer = http::post_json(&login.token_url, login.token_ca.as_deref(), &body);
    let at = now_ms().max(now);
    let next = match answer {
        Ok((status, body)) => match core::refreshed(login, status, &body, at) {
            Refreshed::Done(next) => *next,
            Refreshed::Refused(why) => core::failed(login, &why, true, at),
            Refreshed::Failed(why) => core::failed(login, &why, false, at),
        },
        Err(why) => core::failed(login, &why, false, at),
    };
    match &next.last_error {
        None => tracing::info!(
            login = login.kind.name(),
            refreshes = next.refreshes,
            "login refreshed"
        ),
        Some(why) => {
            tracing::warn!(login = login.kind.name(), error = %why, refused = next.refused, "login refresh failed")
        }
    }
    next
}

/// Imports a login from the agent's own file (`bytes`, read from `from`): it becomes
/// ateam's, replacing any of its kind. Returns it, and whether one was replaced.
pub fn import(state_dir: &Path, owner: Owner, login: Login) -> Result<(Login, bool), LoginError> {
    let held = lock(state_dir, owner)?;
    let replaced = held.load(login.kind).ok().flatten().is_some();
    held.save(&login)?;
    Ok((login, replaced))
}

/// Reads an agent's credential file into a login (`core::logins::import`), `from` naming it.
pub fn read_agent_file(
    kind: LoginKind,
    bytes: &[u8],
    from: &str,
    token_url: Option<&str>,
    token_ca: Option<String>,
) -> Result<Login, LoginError> {
    core::import(kind, bytes, from, token_url, token_ca, now_ms()).map_err(|source| {
        LoginError::Import {
            path: from.to_string(),
            source,
        }
    })
}
