//! Files ateam owns on the host: private folders (0700) and atomically written files (0600).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Who should own what ateam writes for a member: the user it runs for. When ateam runs as
/// root on behalf of another uid (the test setup does), files are handed to that uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    fn apply(self, path: &Path) -> std::io::Result<()> {
        if rustix::process::geteuid().is_root() && self.uid != 0 {
            std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))?;
        }
        Ok(())
    }
}

/// Creates `dir` and any missing parents; every folder this creates is 0700 and the owner's.
/// An existing folder is left as it is (it may be the user's own, with its own mode).
pub fn private_dir(dir: &Path, owner: Owner) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        private_dir(parent, owner)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(e),
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    owner.apply(dir)
}

/// Writes `bytes` to `path` so that a crash leaves either the old or the new content: a temp
/// file in the same folder, fsync, rename, fsync of the folder.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32, owner: Owner) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
    }
    owner.apply(&tmp)?;
    fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()
}

/// A folder of ateam's that belongs to one member (its transcript or control folder): its
/// parents are made as `parent` (the person), the folder itself is 0700 and `owner`'s, even
/// when it existed before with another owner (a member whose `user` changed). Not
/// recursive: files already in it keep their owner.
pub fn member_dir(dir: &Path, parent: Owner, owner: Owner) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if let Some(p) = dir.parent() {
        private_dir(p, parent)?;
    }
    private_dir(dir, owner)?;
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "exists and is not a folder",
        ));
    }
    if (meta.uid(), meta.gid()) != (owner.uid, owner.gid) {
        owner.apply(dir)?;
    }
    Ok(())
}

/// Opens (creating, 0600) a lock file to flock; its content is left as it is.
pub fn open_lock(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

/// Removes a file if it is there.
pub fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn private_dirs_and_atomic_files() {
        let t = tempfile::tempdir().unwrap();
        let me = Owner {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        let d = t.path().join("a/b/c");
        private_dir(&d, me).unwrap();
        for p in [t.path().join("a"), t.path().join("a/b"), d.clone()] {
            assert_eq!(
                fs::metadata(&p).unwrap().mode() & 0o777,
                0o700,
                "{}",
                p.display()
            );
        }
        let f = d.join("secrets");
        write_atomic(&f, b"A=1\0", 0o600, me).unwrap();
        write_atomic(&f, b"A=2\0", 0o600, me).unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"A=2\0");
        assert_eq!(fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            fs::read_dir(&d).unwrap().count(),
            1,
            "no temp file left behind"
        );
        remove_if_present(&f).unwrap();
        remove_if_present(&f).unwrap();
    }
}
