//! The start gate binary (built from gate/main.rs by build.rs) and its release file; and the
//! egress bridge (bridge/main.rs), which the gate starts in members with an allow list.

use std::path::Path;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use crate::files::{
    Owner, read_small, remove_if_present, write_atomic, write_atomic_in_member_dir,
};

/// The static gate binary, embedded so that one `ateam` binary is all a user installs.
pub const GATE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ateam-gate"));

/// The static egress bridge, installed beside the gate in members with an allow list.
pub const BRIDGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ateam-bridge"));

/// The file name of a binary in the shared folder: its content hash, so that an upgraded
/// ateam never links an old one.
fn shared_name(prefix: &str, bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    format!(
        "{prefix}-{}",
        digest[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}

fn gate_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| shared_name("ateam-gate", GATE))
}

fn bridge_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| shared_name("ateam-bridge", BRIDGE))
}

/// Puts the gate into a member's control folder: written once into `shared` (a folder of the
/// state), then hard-linked, so that fifty members cost one 1 MiB write, not fifty. It is
/// 0755 and the store owner's: members of several uids run the same file, and none can
/// change it.
pub fn install(ctl: &Path, shared: &Path, owner: Owner) -> std::io::Result<()> {
    install_binary(GATE, gate_name(), "gate", ctl, shared, owner)
}

/// Puts the egress bridge into a member's control folder, as `install` does the gate.
pub fn install_bridge(ctl: &Path, shared: &Path, owner: Owner) -> std::io::Result<()> {
    install_binary(BRIDGE, bridge_name(), "bridge", ctl, shared, owner)
}

fn install_binary(
    bytes: &[u8],
    shared_name: &str,
    file: &str,
    ctl: &Path,
    shared: &Path,
    owner: Owner,
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let source = shared.join(shared_name);
    if !source.exists() {
        super::files::private_dir(shared, owner)?;
        write_atomic(&source, bytes, 0o755, owner)?;
    }
    let path = ctl.join(file);
    // The control folder's entry as itself: a link the member's uid planted there is not
    // the gate, whatever it points at.
    let same = |a: &Path, b: &Path| match (std::fs::symlink_metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => false,
    };
    if same(&path, &source) {
        return Ok(());
    }
    remove_if_present(&path)?;
    match std::fs::hard_link(&source, &path) {
        Ok(()) => Ok(()),
        // Another file system (a state folder spread over mounts): copy instead.
        Err(_) => write_atomic_in_member_dir(&path, bytes, 0o755, owner),
    }
}

/// Holds the member back: removes the release file before a container is (re)started.
pub fn close(ctl: &Path) -> std::io::Result<()> {
    remove_if_present(&ctl.join("go"))
}

/// Lets the container with this id run its command, for this start only: `start` is the
/// `procfs::start_token` of its init, which a restart changes.
pub fn release(ctl: &Path, container_id: &str, start: &str, owner: Owner) -> std::io::Result<()> {
    let text = format!("{container_id} {start}");
    write_atomic_in_member_dir(&ctl.join("go"), text.as_bytes(), 0o600, owner)
}

/// Whether the gate of the container `id`, whose init is `pid`, was released for the start
/// now running. A release of an earlier start does not count: the gate still holds.
pub fn is_released(ctl: &Path, id: &str, pid: Option<u32>) -> bool {
    let (Some(text), Some(pid)) = (read_small(&ctl.join("go"), 4096), pid) else {
        return false;
    };
    let Ok(now) = super::procfs::start_token(pid) else {
        return false;
    };
    match text.trim().split_once(' ') {
        Some((who, start)) => !who.is_empty() && id.starts_with(who) && start == now,
        None => false,
    }
}

/// An `ateam exec` in progress, as the gate sees it: a file `exec-<pid>-<nanos>` in the
/// member's control folder (read-only inside, so a member cannot keep it fresh), rewritten
/// every second while this client lives. The gate (`--exec --alive`) ends the command when it
/// is older than a few seconds or gone: a killed client, whatever the signal, stops writing.
pub struct ExecLease {
    ctl: std::path::PathBuf,
    name: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ExecLease {
    /// Writes the file and starts rewriting it.
    pub fn start(ctl: &Path, owner: Owner) -> std::io::Result<ExecLease> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!("exec-{}-{nanos}", std::process::id());
        let path = ctl.join(&name);
        write_atomic_in_member_dir(&path, b"", 0o600, owner)?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(250));
                let _ = write_atomic_in_member_dir(&path, b"", 0o600, owner);
                for _ in 0..3 {
                    if flag.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(250));
                }
            }
        });
        Ok(ExecLease {
            ctl: ctl.to_path_buf(),
            name,
            stop,
            thread: Some(thread),
        })
    }

    /// The file as the gate in the member sees it.
    pub fn in_container(&self) -> String {
        format!("{}/{}", crate::core::container::CTL_TARGET, self.name)
    }
}

impl Drop for ExecLease {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Ok(dir) = crate::files::Dir::open(&self.ctl) {
            let _ = dir.remove_file(std::ffi::OsStr::new(&self.name));
        }
    }
}
