//! The start gate binary (built from gate/main.rs by build.rs) and its release file.

use std::path::Path;

use super::files::{Owner, remove_if_present, write_atomic};

/// The static gate binary, embedded so that one `ateam` binary is all a user installs.
pub const GATE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ateam-gate"));

/// Puts the gate into a member's control folder, unless the same bytes are there already.
pub fn install(ctl: &Path, owner: Owner) -> std::io::Result<()> {
    let path = ctl.join("gate");
    if std::fs::read(&path).map(|b| b == GATE).unwrap_or(false) {
        return Ok(());
    }
    write_atomic(&path, GATE, 0o700, owner)
}

/// Holds the member back: removes the release file before a container is (re)started.
pub fn close(ctl: &Path) -> std::io::Result<()> {
    remove_if_present(&ctl.join("go"))
}

/// Lets the container with this id run its command.
pub fn release(ctl: &Path, container_id: &str, owner: Owner) -> std::io::Result<()> {
    write_atomic(&ctl.join("go"), container_id.as_bytes(), 0o600, owner)
}
