//! The person's answers kept in the state folder, per member
//! (`core::layout::member_approvals_path`, 0600, ateam's user, never mounted): the asks it
//! dismissed (deny once) and those it allowed for one start (allow once). The answers
//! "always" are in the manifests instead, where the person reads and undoes them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Want;
use crate::files::Owner;

/// Why the record could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// It could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The record.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// It holds what ateam never wrote.
    #[error("{} is not a record of approvals: {source}", .path.display())]
    Invalid {
        /// The record.
        path: PathBuf,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
}

/// One member's answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Record {
    /// Dismissed asks (deny once), by id: when; a refusal after that asks again.
    #[serde(default)]
    pub dismissed: BTreeMap<String, f64>,
    /// Asks allowed for one start of the member.
    #[serde(default)]
    pub once: Vec<Once>,
}

/// An ask allowed for one start of the member (allow once).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Once {
    /// The approval's id.
    pub id: String,
    /// What it allows.
    pub want: Want,
    /// The start it holds for: the gate's release of it (`container-id start-token`).
    pub start: String,
    /// When the person allowed it, seconds since the epoch.
    pub at: f64,
}

impl Record {
    /// What is allowed once for the start `start` (the gate's release text).
    pub fn once_for(&self, start: &str) -> Vec<&Once> {
        self.once.iter().filter(|o| o.start == start).collect()
    }
}

/// The record at `path`; none yet is an empty one. A link or a FIFO there is not read.
pub fn load(path: &Path) -> Result<Record, RecordError> {
    let io = |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = match crate::files::open_regular(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Record::default()),
        Err(e) => return Err(io(e)),
    };
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 20), &mut bytes).map_err(io)?;
    serde_json::from_slice(&bytes).map_err(|source| RecordError::Invalid {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `record` atomically, 0600, `owner`'s.
pub fn save(path: &Path, record: &Record, owner: Owner) -> Result<(), RecordError> {
    let json = serde_json::to_vec_pretty(record).map_err(|source| RecordError::Invalid {
        path: path.to_path_buf(),
        source,
    })?;
    crate::files::write_atomic(path, &json, 0o600, owner).map_err(|source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    })
}
