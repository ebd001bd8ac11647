//! The start gate binary (built from gate/main.rs by build.rs) and its release file; and the
//! egress bridge (bridge/main.rs), which the gate starts in members with an allow list.

use std::path::Path;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use crate::core::layout::gate_release_path;
use crate::files::{
    Owner, read_small, remove_if_present, write_atomic, write_atomic_in_member_dir,
};

/// The static gate binary, embedded so that one `ateam` binary is all a user installs.
pub(crate) const GATE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ateam-gate"));

/// The static egress bridge, installed beside the gate in members with an allow list.
pub(crate) const BRIDGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ateam-bridge"));

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
pub(crate) fn install_bridge(ctl: &Path, shared: &Path, owner: Owner) -> std::io::Result<()> {
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
    remove_if_present(&gate_release_path(ctl))
}

/// Lets the container with this id run its command, for this start only: `start` is the
/// token of its init as the gate reads it inside, which a restart changes. Under gVisor the
/// host sees another start (`host`: the sandbox process's `procfs::start_token`), which
/// `names_start` reads from a second line.
pub fn release(
    ctl: &Path,
    container_id: &str,
    start: &str,
    host: Option<&str>,
    owner: Owner,
) -> std::io::Result<()> {
    let mut text = format!("{container_id} {start}");
    if let Some(host) = host {
        text.push_str(&format!("\n{HOST_LINE}{}", host_digest(host)));
    }
    write_atomic_in_member_dir(&gate_release_path(ctl), text.as_bytes(), 0o600, owner)
}

/// The member's next task for its container `container_id` (`ateam task`): the gate runs
/// `command` in place of the container's own at its next start (gate/main.rs `task_for`).
pub fn set_task(
    ctl: &Path,
    container_id: &str,
    command: &[String],
    owner: Owner,
) -> std::io::Result<()> {
    let mut bytes = format!("{container_id}\n").into_bytes();
    for a in command {
        if a.as_bytes().contains(&0) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an argument holds a NUL byte",
            ));
        }
        bytes.extend_from_slice(a.as_bytes());
        bytes.push(0);
    }
    write_atomic_in_member_dir(&crate::core::layout::task_path(ctl), &bytes, 0o600, owner)
}

/// Whether the gate of the container `id`, whose init is `pid`, was released for the start
/// now running. A release of an earlier start does not count: the gate still holds.
pub fn is_released(ctl: &Path, id: &str, pid: Option<u32>) -> bool {
    let token = pid.and_then(|p| super::procfs::start_token(p).ok());
    released_for(ctl, id, token.as_deref())
}

/// `is_released`, with the running start's `procfs::start_token` already read (None when
/// it could not be: not released).
pub(crate) fn released_for(ctl: &Path, id: &str, now: Option<&str>) -> bool {
    release_text(ctl).is_some_and(|text| names_start(&text, id, now))
}

/// The member's release file as it is now, if there is one (`released_for` in two steps: a
/// look reads it while the engine lists).
pub(crate) fn release_text(ctl: &Path) -> Option<String> {
    read_small(&gate_release_path(ctl), 4096)
}

/// The release line that gives a gVisor sandbox's start as the host sees it.
const HOST_LINE: &str = "host ";

/// The host's start token as the release file holds it: a digest, as the member reads that
/// file and gVisor otherwise hides the host's boot id from it.
fn host_digest(token: &str) -> String {
    Sha256::digest(token.as_bytes())[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether the release file's `text` lets the container `id` run in its start `now` (its
/// init's `procfs::start_token`, or under gVisor its sandbox's).
pub(crate) fn names_start(text: &str, id: &str, now: Option<&str>) -> bool {
    let Some(now) = now else { return false };
    let mut lines = text.trim().lines();
    let Some((who, start)) = lines.next().and_then(|l| l.trim().split_once(' ')) else {
        return false;
    };
    let same = match lines.find_map(|l| l.strip_prefix(HOST_LINE)) {
        Some(digest) => digest.trim() == host_digest(now),
        None => start == now,
    };
    !who.is_empty() && id.starts_with(who) && same
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
    /// Writes the file and starts keeping it fresh (its modification time, through a
    /// descriptor kept open: no path is looked up again, nothing is synced). Leases of clients
    /// gone for a minute are removed first.
    pub fn start(ctl: &Path, owner: Owner) -> std::io::Result<ExecLease> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!("exec-{}-{nanos}", std::process::id());
        let dir = crate::files::Dir::open(ctl)?;
        remove_stale_leases(ctl, &dir);
        dir.write_atomic(std::ffi::OsStr::new(&name), b"", 0o600, owner)?;
        let file = dir.open_regular(Path::new(&name))?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut ticks = 0u32;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(250));
                ticks += 1;
                if ticks.is_multiple_of(4) {
                    let _ = file.set_modified(std::time::SystemTime::now());
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

/// Removes the `exec-*` leases in `dir` untouched for a minute (their clients were killed).
fn remove_stale_leases(ctl: &Path, dir: &crate::files::Dir) {
    let Ok(entries) = std::fs::read_dir(ctl) else {
        return;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("exec-") {
            continue;
        }
        let stale = rustix::fs::statat(
            dir.fd(),
            name.as_os_str(),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .is_ok_and(|st| now - st.st_mtime > 60);
        if stale {
            let _ = dir.remove_file(&name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_names_one_start_as_each_side_sees_it() {
        let ctl = tempfile::tempdir().unwrap();
        let me = Owner {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        // Under runc the start is the one both sides see.
        release(ctl.path(), "abc123", "boot 42", None, me).unwrap();
        assert!(released_for(ctl.path(), "abc123def", Some("boot 42")));
        assert!(!released_for(ctl.path(), "abc123def", Some("boot 43")));
        assert!(!released_for(ctl.path(), "other", Some("boot 42")));
        // Under gVisor the gate reads the first line; ateam the host's start, kept as a
        // digest: the member, which reads the file, never sees the host's boot id.
        release(ctl.path(), "abc123", "sandbox 7", Some("hostboot 99"), me).unwrap();
        let text = release_text(ctl.path()).unwrap();
        assert!(
            text.starts_with("abc123 sandbox 7\n") && !text.contains("hostboot"),
            "{text}"
        );
        assert!(released_for(ctl.path(), "abc123def", Some("hostboot 99")));
        assert!(!released_for(ctl.path(), "abc123def", Some("hostboot 98")));
        assert!(!released_for(ctl.path(), "abc123def", Some("sandbox 7")));
    }

    #[test]
    fn an_exec_lease_is_kept_fresh_while_held_and_gone_after() {
        let ctl = tempfile::tempdir().unwrap();
        let me = Owner {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        // A lease its client left a while ago is removed by the next one; a fresh one stays.
        let old = ctl.path().join("exec-1-1");
        std::fs::write(&old, "").unwrap();
        let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(600);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let other = ctl.path().join("exec-2-2");
        std::fs::write(&other, "").unwrap();
        let lease = ExecLease::start(ctl.path(), me).unwrap();
        assert!(!old.exists(), "a stale lease is removed");
        assert!(other.exists(), "a live one is not");
        let path = ctl
            .path()
            .join(lease.in_container().rsplit('/').next().unwrap());
        let first = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1300));
        let later = std::fs::metadata(&path).unwrap().modified().unwrap();
        assert!(later > first, "rewritten while held");
        assert!(lease.in_container().starts_with("/.ateam/exec-"));
        drop(lease);
        assert!(!path.exists(), "removed when the exec is done");
    }
}
