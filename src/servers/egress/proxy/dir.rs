//! A folder held open by descriptor, and its files read and stamped through it: the proxy
//! reads its policy and writes its log this way after it gave up root, when the private
//! folders above them are closed to it. A file of its own because not only the policy's
//! reading (`policy`) uses it: the proxy's start (`run`) holds its socket's and its log's
//! folders the same way.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::servers::egress::ProxyError;

/// A folder held open: the proxy reaches its files through it after it gave up root, when
/// the private folders above it are closed to it.
pub(super) struct Dir {
    pub(super) fd: OwnedFd,
    pub(super) path: PathBuf,
}

impl Dir {
    pub(super) fn open(path: &Path) -> Result<Dir, ProxyError> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ProxyError::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Modification time, inode and size of `name`: what tells that it changed.
    pub(super) fn stamp(&self, name: &str) -> Option<(i64, u64, u64, u64)> {
        let st = rustix::fs::statat(&self.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).ok()?;
        Some((
            st.st_mtime,
            st.st_mtime_nsec as u64,
            st.st_ino,
            st.st_size as u64,
        ))
    }

    pub(super) fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )?;
        let mut out = Vec::new();
        std::fs::File::from(fd).read_to_end(&mut out)?;
        Ok(out)
    }
}
