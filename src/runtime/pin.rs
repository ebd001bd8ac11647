//! Pinning granted folders: open each one without following any symlink, keep it open, and
//! later check that the folder a container really got is that same folder (device and inode).
//! This closes the gap between validation and the engine's mount: a folder swapped for a
//! symlink in between is caught before any member code runs.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, StatxFlags, statx};

use crate::core::container::EngineKind;
use crate::core::container::Mount;
use crate::host::mounts::Mounts;

/// A folder held open since it was checked.
#[derive(Debug)]
pub struct Pinned {
    /// The folder as granted.
    pub path: PathBuf,
    /// Its device, as `statx` gives it when pinned.
    pub dev: u64,
    /// Its inode, as `statx` gives it when pinned.
    pub ino: u64,
    /// Its owner and mode when pinned: whether the member can write it is judged on this
    /// very folder (`host::access`).
    pub owned: crate::host::access::Owned,
    _fd: OwnedFd,
}

/// Why a granted folder could not be pinned, or was not the one a container got.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// The path could not be opened as a folder without following a symlink.
    #[error("cannot pin `{path}`: {reason}")]
    Open {
        /// The folder as granted.
        path: PathBuf,
        /// What the system said.
        reason: String,
    },
    /// The container sees another folder than the one that was checked.
    #[error("`{path}` in the container is not the folder that was checked (expected device {} inode {}, found device {} inode {}); it was replaced, perhaps by a symlink", .expected.0, .expected.1, .found.0, .found.1)]
    Swapped {
        /// Where the container has it mounted.
        path: PathBuf,
        /// (device, inode) when pinned.
        expected: (u64, u64),
        /// (device, inode) of what the container shows there.
        found: (u64, u64),
    },
    /// The folder could not be looked at through the container's root, so it is not known
    /// to be the same.
    #[error("cannot look at `{path}` inside the container: {reason}")]
    Inspect {
        /// Where the container has it mounted.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// Opens `path` as a directory, refusing symlinks in every component
/// (`files::folder_handle`: openat2 with RESOLVE_NO_SYMLINKS), and records its device and inode.
pub fn pin(path: &Path) -> Result<Pinned, PinError> {
    let err = |reason: String| PinError::Open {
        path: path.to_path_buf(),
        reason,
    };
    let fd = crate::files::folder_handle(path).map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => err("a component is a symlink".into()),
        // A final symlink opened without following is "not a directory": say what it is.
        rustix::io::Errno::NOTDIR
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) =>
        {
            err("it is a symlink, not the granted folder".into())
        }
        rustix::io::Errno::NOTDIR => err("not a directory".into()),
        other => err(other.to_string()),
    })?;
    let st = crate::files::handle_stat(fd.as_fd()).map_err(|e| err(e.to_string()))?;
    Ok(Pinned {
        path: path.to_path_buf(),
        dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
        ino: st.stx_ino,
        owned: crate::host::access::Owned {
            uid: st.stx_uid,
            gid: st.stx_gid,
            mode: u32::from(st.stx_mode) & 0o7777,
        },
        _fd: fd,
    })
}

/// Device and inode of `target` as process `pid` sees it (through `/proc/<pid>/root`), not
/// following a final symlink.
pub(crate) fn seen_by(pid: u32, target: &Path) -> Result<(u64, u64), PinError> {
    let rel = target.strip_prefix("/").unwrap_or(target);
    let path = Path::new("/proc")
        .join(pid.to_string())
        .join("root")
        .join(rel);
    let st = statx(
        CWD,
        &path,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS,
    )
    .map_err(|e| PinError::Inspect {
        path: target.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok((
        rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
        st.stx_ino,
    ))
}

/// Checks that the container of `pid` has exactly the pinned folder at `target`.
pub fn check(pid: u32, target: &Path, pinned: &Pinned) -> Result<(), PinError> {
    let found = seen_by(pid, target)?;
    if found == (pinned.dev, pinned.ino) {
        Ok(())
    } else {
        Err(PinError::Swapped {
            path: target.to_path_buf(),
            expected: (pinned.dev, pinned.ino),
            found,
        })
    }
}

/// Whether `kind`'s read-only bind mounts are read-only all the way down, file systems mounted
/// below the folder included. Neither engine's is, as measured by
/// tests/attacks_grants.rs (`a_tmpfs_below_a_read_only_grant_is_refused`).
pub fn read_only_is_recursive(kind: EngineKind) -> bool {
    match kind {
        // Recursive read-only (`ReadOnlyForceRecursive`) needs API 1.44; Debian's dockerd
        // 20.10 speaks 1.41.
        EngineKind::Docker => false,
        // Podman 4.3 with runc, rootful and rootless: `ro` leaves mounts below writable, and
        // the `rro` option is refused ("invalid option type").
        EngineKind::Podman { .. } => false,
    }
}

/// The first read-only mount of `mounts` that has a file system mounted strictly below its
/// source, and that file system's mount point: the engines bind folders recursively, so the
/// member gets it too, writable unless read-only mounts are recursive.
pub(crate) fn mount_below_read_only<'a>(
    mounts: &'a [Mount],
    table: &Mounts,
) -> Option<(&'a Mount, PathBuf)> {
    mounts.iter().filter(|m| m.read_only).find_map(|m| {
        table
            .below(&m.source)
            .next()
            .map(|below| (m, below.point.clone()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_real_folders_and_refuses_symlinks() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, t.path().join("link")).unwrap();
        std::fs::write(t.path().join("file"), "").unwrap();
        std::fs::set_permissions(&real, std::os::unix::fs::PermissionsExt::from_mode(0o750))
            .unwrap();
        let p = pin(&real).unwrap();
        // Its owner and mode, for judging whether a member can write it.
        let meta = std::fs::metadata(&real).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (p.owned.uid, p.owned.gid, p.owned.mode),
            (meta.uid(), meta.gid(), 0o750)
        );
        // Our own process sees the same folder through /proc/self/root.
        check(std::process::id(), &real, &p).unwrap();
        assert!(matches!(
            pin(&t.path().join("link")),
            Err(PinError::Open { .. })
        ));
        assert!(matches!(
            pin(&t.path().join("link/x")),
            Err(PinError::Open { .. })
        ));
        assert!(
            pin(&t.path().join("file"))
                .unwrap_err()
                .to_string()
                .contains("not a directory")
        );
    }

    #[test]
    fn finds_a_file_system_below_a_read_only_mount() {
        let table = Mounts::parse(
            "1 0 8:1 / / rw - ext4 /dev/sda rw\n\
             2 1 0:40 / /srv/ro/cache rw - tmpfs tmpfs rw\n\
             3 1 0:41 / /srv/rw/cache rw - tmpfs tmpfs rw\n",
        );
        let m = |p: &str, ro: bool| Mount::same(Path::new(p), ro);
        for (mounts, want) in [
            (vec![m("/srv/ro", true)], Some(("/srv/ro", "/srv/ro/cache"))),
            (
                vec![m("/srv/rw", false), m("/srv/ro", true)],
                Some(("/srv/ro", "/srv/ro/cache")),
            ),
            // A write grant may hold mounts: they are as writable as the grant.
            (vec![m("/srv/rw", false)], None),
            // The mount itself, or a folder beside it, is not below.
            (vec![m("/srv/ro/cache", true), m("/srv/r", true)], None),
            (vec![m("/srv/ro/cache/x", true)], None),
        ] {
            let got = mount_below_read_only(&mounts, &table)
                .map(|(m, p)| (m.source.display().to_string(), p.display().to_string()));
            assert_eq!(
                got,
                want.map(|(a, b)| (a.to_string(), b.to_string())),
                "{mounts:?}"
            );
        }
        assert!(!read_only_is_recursive(EngineKind::Docker));
    }

    #[test]
    fn a_swapped_folder_is_caught() {
        let t = tempfile::tempdir().unwrap();
        let grant = t.path().join("grant");
        let other = t.path().join("other");
        std::fs::create_dir(&grant).unwrap();
        std::fs::create_dir(&other).unwrap();
        let p = pin(&grant).unwrap();
        std::fs::rename(&grant, t.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&other, &grant).unwrap();
        // The path now names a symlink: lstat sees a different inode.
        assert!(matches!(
            check(std::process::id(), &grant, &p),
            Err(PinError::Swapped { .. })
        ));
    }
}
