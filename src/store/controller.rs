//! What a running controller tells the rest of ateam: its record in the state folder
//! (`controller.json`, versioned, rewritten atomically after every reconcile) and the lock
//! that makes it the only controller of that folder. `status` reads both: a record without a
//! held lock is a controller that is gone.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};
use serde::{Deserialize, Serialize};

use crate::core::layout;
use crate::files::{self, Owner};

/// What the running controller says of itself, for `status` (`controller.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerRecord {
    /// The record's format, 1 today, so that a later format can be told apart.
    pub version: u32,
    /// The controller's process.
    pub pid: u32,
    /// RFC 3339.
    pub since: String,
    /// RFC 3339, with what it reconciled and how it went.
    pub last_reconcile: Option<LastReconcile>,
    /// The manifests' problems, when the last edit was refused (the last good state stays).
    pub manifest_errors: Vec<String>,
    /// The last error per team, cleared when a reconcile of it succeeds.
    pub errors: BTreeMap<String, String>,
    /// `team/member` -> when the next restart of a crash-looping member is due (RFC 3339).
    pub restarts_due: BTreeMap<String, String>,
    /// Team -> when the person deleted it (RFC 3339): its manifests still name it, and this
    /// controller leaves it deleted until it is applied again.
    #[serde(default)]
    pub left_deleted: BTreeMap<String, String>,
}

/// The controller's latest reconcile of a team.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastReconcile {
    /// When it ended, RFC 3339.
    pub at: String,
    /// The team it reconciled.
    pub team: String,
    /// It succeeded (the error is in `ControllerRecord::errors`).
    pub ok: bool,
}

/// Why a controller could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatusError {
    #[error("a controller already runs for the state folder {} (pid {pid})", .dir.display())]
    /// Another controller holds the state folder's lock.
    AlreadyRunning {
        /// The state folder.
        dir: PathBuf,
        /// The other controller's pid, from its record; `unknown` without one.
        pid: String,
    },
    #[error("{}: {source}", .path.display())]
    /// The state folder or its lock file could not be made or opened.
    Io {
        /// The state folder or the lock file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// Held while a controller runs; the kernel drops it if the controller dies.
#[must_use = "the controller lock is released when this is dropped"]
pub struct ControllerLock {
    _file: File,
}

/// Takes the one-controller lock of a state folder, or says who holds it.
pub fn lock(state_dir: &Path, owner: Owner) -> Result<ControllerLock, StatusError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StatusError::Io { path, source }
    };
    files::private_dir(state_dir, owner).map_err(io(state_dir))?;
    let path = layout::controller_lock_path(state_dir);
    let file = files::open_lock(&path).map_err(io(&path))?;
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        let pid = read(state_dir).map_or("unknown".to_string(), |r| r.pid.to_string());
        return Err(StatusError::AlreadyRunning {
            dir: state_dir.to_path_buf(),
            pid,
        });
    }
    Ok(ControllerLock { _file: file })
}

/// Whether a controller holds the lock of `state_dir` now.
pub fn running(state_dir: &Path) -> bool {
    let Ok(file) = File::open(layout::controller_lock_path(state_dir)) else {
        return false;
    };
    // Taking it means nobody holds it; it is let go at once when `file` drops.
    flock(&file, FlockOperation::NonBlockingLockShared).is_err()
}

/// Writes the record atomically, owned by `owner`: a reader sees the old one or the new one.
pub fn write(state_dir: &Path, record: &ControllerRecord, owner: Owner) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(record).expect("a record serializes");
    files::write_atomic(
        &layout::controller_record_path(state_dir),
        &json,
        0o600,
        owner,
    )
}

/// The record of the controller of `state_dir`, if one ever ran (whether it still runs:
/// `running`).
pub fn read(state_dir: &Path) -> Option<ControllerRecord> {
    let bytes = std::fs::read(layout::controller_record_path(state_dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_controller_per_state_folder_and_status_sees_it() {
        let t = tempfile::tempdir().unwrap();
        let me = Owner {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        assert!(!running(t.path()));
        let held = lock(t.path(), me).unwrap();
        write(
            t.path(),
            &ControllerRecord {
                version: 1,
                pid: 42,
                ..Default::default()
            },
            me,
        )
        .unwrap();
        assert!(running(t.path()));
        match lock(t.path(), me) {
            Err(StatusError::AlreadyRunning { pid, .. }) => assert_eq!(pid, "42"),
            other => panic!("{:?}", other.err()),
        }
        drop(held);
        assert!(!running(t.path()));
        assert_eq!(read(t.path()).unwrap().pid, 42);
    }
}
