//! Suspended members: the person's decision that a member stays down with its state kept
//! (`ateam suspend`), recorded beside its control folder, and read by every look as desired
//! state (the planner keeps a suspended member down; the controller does not undo it). And
//! the note `ateam resume` leaves for the member's next start: the HOME to put back.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{StoreError, io, read_versioned, versioned};
use crate::core::layout;
use crate::files::{self, Owner};

/// A suspended member: since when, and what was kept of what its container alone held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Suspension {
    /// When it was suspended (RFC 3339).
    pub since: String,
    /// Its HOME's archive, in its transcript folder, when HOME was kept; none when its
    /// container was not running (its HOME was already gone) or the person let it go.
    pub home: Option<PathBuf>,
    /// The memory its container and its proxy held, as counted just before they went.
    #[serde(default)]
    pub freed_bytes: Option<u64>,
}

/// What `ateam resume` leaves for the member's next start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resume {
    /// The archive to put back into HOME before the gate opens.
    pub home: PathBuf,
}

/// The suspension of `member` of `team`, if it is suspended.
pub fn load(state_dir: &Path, team: &str, member: &str) -> Result<Option<Suspension>, StoreError> {
    read(&layout::member_suspended_path(state_dir, team, member))
}

/// Records that `member` of `team` is suspended (atomically, 0600).
pub(crate) fn save(
    state_dir: &Path,
    team: &str,
    member: &str,
    s: &Suspension,
    owner: Owner,
) -> Result<(), StoreError> {
    write(
        &layout::member_suspended_path(state_dir, team, member),
        s,
        owner,
    )
}

/// Forgets the suspension of `member` of `team` (its next look brings it up).
pub(crate) fn forget(state_dir: &Path, team: &str, member: &str) -> Result<(), StoreError> {
    let path = layout::member_suspended_path(state_dir, team, member);
    files::remove_if_present(&path).map_err(io(&path))
}

/// The HOME to put back at the next start of `member` of `team`, if `resume` left one.
pub(crate) fn resume_note(
    state_dir: &Path,
    team: &str,
    member: &str,
) -> Result<Option<Resume>, StoreError> {
    read(&layout::member_resume_path(state_dir, team, member))
}

/// Leaves `r` for the next start of `member` of `team`.
pub(crate) fn save_resume_note(
    state_dir: &Path,
    team: &str,
    member: &str,
    r: &Resume,
    owner: Owner,
) -> Result<(), StoreError> {
    write(
        &layout::member_resume_path(state_dir, team, member),
        r,
        owner,
    )
}

/// The note was acted on (or cannot be).
pub(crate) fn forget_resume_note(
    state_dir: &Path,
    team: &str,
    member: &str,
) -> Result<(), StoreError> {
    let path = layout::member_resume_path(state_dir, team, member);
    files::remove_if_present(&path).map_err(io(&path))
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => read_versioned(path, &bytes).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StoreError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn write<T: Serialize>(path: &Path, record: &T, owner: Owner) -> Result<(), StoreError> {
    if let Some(dir) = path.parent() {
        files::private_dir(dir, owner).map_err(io(dir))?;
    }
    files::write_atomic(path, &versioned(record, true), 0o600, owner).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suspension_and_a_resume_note_read_back_and_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let owner = Owner {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        assert_eq!(load(dir.path(), "t", "m").unwrap(), None);
        let s = Suspension {
            since: "2026-12-07T04:00:00Z".into(),
            home: Some("/x/.ateam-suspended-home.tar".into()),
            freed_bytes: Some(42),
        };
        save(dir.path(), "t", "m", &s, owner).unwrap();
        assert_eq!(load(dir.path(), "t", "m").unwrap(), Some(s));
        assert_eq!(load(dir.path(), "t", "other").unwrap(), None);
        forget(dir.path(), "t", "m").unwrap();
        assert_eq!(load(dir.path(), "t", "m").unwrap(), None);
        let r = Resume {
            home: "/x/h.tar".into(),
        };
        save_resume_note(dir.path(), "t", "m", &r, owner).unwrap();
        assert_eq!(resume_note(dir.path(), "t", "m").unwrap(), Some(r));
        forget_resume_note(dir.path(), "t", "m").unwrap();
        assert_eq!(resume_note(dir.path(), "t", "m").unwrap(), None);
    }

    #[test]
    fn a_broken_record_is_an_error_not_a_member_brought_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = layout::member_suspended_path(dir.path(), "t", "m");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            load(dir.path(), "t", "m"),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
