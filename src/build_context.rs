//! A build context from a repository, read as untrusted input: the folder is opened once and
//! everything below it is reached from that descriptor, never through a symlink (a link is
//! sent as a link, which the engine's builder resolves inside the context, never followed
//! here); a FIFO, socket or device is refused without being opened for reading; the walk is
//! bounded in files, bytes and depth. The result is a tar the engines take as a build
//! context, deterministic (sorted, no times, no owners), and the hash of it and of the
//! build's other inputs, which names the image (`core::image_build::tag`).
//!
//! Validation reads it to name the image; the executor reads it again to build, and builds
//! only what hashes as validation saw it.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Read as _;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use sha2::{Digest, Sha256};

/// Bytes of file content a context may hold in all.
pub const MAX_BYTES: u64 = 64 << 20;
/// Files, folders and links a context may hold.
pub const MAX_ENTRIES: usize = 20_000;
/// Folders deep below the context.
const MAX_DEPTH: usize = 64;
/// The Dockerfile's own bound.
const MAX_DOCKERFILE: u64 = 1 << 20;

/// Why a context cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// The folder, or something below it, cannot be opened or read.
    #[error("cannot read `{path}` of the build context: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// More than `MAX_BYTES` or `MAX_ENTRIES`.
    #[error(
        "the build context `{path}` holds more than {what}: a context is bounded; build from a smaller folder (`.git` is left out already)"
    )]
    TooLarge {
        /// The context.
        path: PathBuf,
        /// Which bound.
        what: String,
    },
    /// A FIFO, socket or device in the context.
    #[error(
        "`{path}` in the build context is not a file, folder or symlink (a FIFO, socket or device): take it out of the context"
    )]
    Special {
        /// Where.
        path: PathBuf,
    },
    /// The Dockerfile is not a regular file in the context.
    #[error(
        "the Dockerfile `{path}` is not a regular file inside the build context (a symlink is not followed)"
    )]
    NoDockerfile {
        /// Where it was looked for.
        path: PathBuf,
    },
}

/// A context read: the tar, its hash with the build's other inputs, the Dockerfile's text.
#[derive(Debug)]
pub struct Context {
    /// The context as the engine's build API takes it.
    pub tar: Vec<u8>,
    /// SHA-256 (hex) of the tar, the Dockerfile's path, the arguments and the target.
    pub hash: String,
    pub dockerfile: String,
}

/// Reads the context `dir` (a folder whose path the caller checked has no symlink) with
/// `dockerfile` a path inside it, for a build with these `args` and `target`.
pub fn read(
    dir: &Path,
    dockerfile: &str,
    args: &BTreeMap<String, String>,
    target: Option<&str>,
) -> Result<Context, ContextError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ContextError::Io { path, source }
    };
    let root = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(dir)(e.into()))?;
    let mut walk = Walk {
        top: dir,
        tar: tar::Builder::new(Vec::new()),
        bytes: 0,
        entries: 0,
        dockerfile: None,
        wanted: Path::new(dockerfile),
    };
    walk.folder(&root, Path::new(""), 0)?;
    let tar = walk.tar.into_inner().map_err(|e| io(dir)(e))?;
    let text = walk.dockerfile.ok_or_else(|| ContextError::NoDockerfile {
        path: dir.join(dockerfile),
    })?;
    let mut h = Sha256::new();
    h.update(b"ateam-build/1\0");
    for part in [dockerfile, target.unwrap_or("")] {
        h.update(part.as_bytes());
        h.update(b"\0");
    }
    for (k, v) in args {
        h.update(format!("{}:{k}={}:{v}\0", k.len(), v.len()).as_bytes());
    }
    h.update(&tar);
    let hash = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok(Context {
        tar,
        hash,
        dockerfile: text,
    })
}

struct Walk<'a> {
    top: &'a Path,
    tar: tar::Builder<Vec<u8>>,
    bytes: u64,
    entries: usize,
    dockerfile: Option<String>,
    wanted: &'a Path,
}

impl Walk<'_> {
    fn too_large(&self, what: String) -> ContextError {
        ContextError::TooLarge {
            path: self.top.to_path_buf(),
            what,
        }
    }

    fn io(&self, rel: &Path) -> impl FnOnce(std::io::Error) -> ContextError + use<> {
        let path = self.top.join(rel);
        move |source| ContextError::Io { path, source }
    }

    /// Everything below the open folder `fd` (at `rel`), in name order.
    fn folder(&mut self, fd: &OwnedFd, rel: &Path, depth: usize) -> Result<(), ContextError> {
        if depth > MAX_DEPTH {
            return Err(self.too_large(format!("{MAX_DEPTH} levels of folders")));
        }
        let mut names: Vec<Vec<u8>> = Vec::new();
        for e in rustix::fs::Dir::read_from(fd).map_err(|e| self.io(rel)(e.into()))? {
            let e = e.map_err(|e| self.io(rel)(e.into()))?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." || (depth == 0 && name == b".git") {
                continue;
            }
            names.push(name.to_vec());
        }
        names.sort();
        for name in names {
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                return Err(self.too_large(format!("{MAX_ENTRIES} files and folders")));
            }
            let name = OsStr::from_bytes(&name);
            let path = rel.join(name);
            let st = rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| self.io(&path)(e.into()))?;
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    let child = rustix::fs::openat(
                        fd,
                        name,
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(|e| self.io(&path)(e.into()))?;
                    self.append(&path, tar::EntryType::Directory, 0o755, &[], None)?;
                    self.folder(&child, &path, depth + 1)?;
                }
                FileType::RegularFile => self.file(fd, name, &path)?,
                FileType::Symlink => {
                    let target = rustix::fs::readlinkat(fd, name, Vec::new())
                        .map_err(|e| self.io(&path)(e.into()))?;
                    let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
                    self.append(&path, tar::EntryType::Symlink, 0o777, &[], Some(&target))?;
                }
                FileType::Fifo
                | FileType::Socket
                | FileType::CharacterDevice
                | FileType::BlockDevice
                | FileType::Unknown => {
                    return Err(ContextError::Special {
                        path: self.top.join(&path),
                    });
                }
            }
        }
        Ok(())
    }

    /// A regular file, opened without following a link or blocking, its bytes counted.
    fn file(&mut self, fd: &OwnedFd, name: &OsStr, path: &Path) -> Result<(), ContextError> {
        let f = rustix::fs::openat(
            fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| self.io(path)(e.into()))?;
        let st = rustix::fs::fstat(&f).map_err(|e| self.io(path)(e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(ContextError::Special {
                path: self.top.join(path),
            });
        }
        let left = MAX_BYTES - self.bytes;
        let mut data = Vec::new();
        std::fs::File::from(f)
            .take(left + 1)
            .read_to_end(&mut data)
            .map_err(self.io(path))?;
        self.bytes += data.len() as u64;
        if self.bytes > MAX_BYTES {
            return Err(self.too_large(format!("{} MiB", MAX_BYTES >> 20)));
        }
        if path == self.wanted {
            if data.len() as u64 > MAX_DOCKERFILE {
                return Err(
                    self.too_large(format!("{} MiB in its Dockerfile", MAX_DOCKERFILE >> 20))
                );
            }
            self.dockerfile = Some(String::from_utf8_lossy(&data).into_owned());
        }
        let mode = if st.st_mode & 0o111 != 0 {
            0o755
        } else {
            0o644
        };
        self.append(path, tar::EntryType::Regular, mode, &data, None)
    }

    fn append(
        &mut self,
        path: &Path,
        kind: tar::EntryType,
        mode: u32,
        data: &[u8],
        link: Option<&Path>,
    ) -> Result<(), ContextError> {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(data.len() as u64);
        let done = match link {
            Some(target) => self.tar.append_link(&mut h, path, target),
            None => self.tar.append_data(&mut h, path, data),
        };
        done.map_err(self.io(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, text) in files {
            let p = d.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        d
    }

    #[test]
    fn the_hash_follows_every_input_and_nothing_else() {
        let d = ctx(&[
            ("Dockerfile", "FROM x\n"),
            ("src/a.py", "1"),
            (".git/HEAD", "x"),
        ]);
        let none = BTreeMap::new();
        let a = read(d.path(), "Dockerfile", &none, None).unwrap();
        assert_eq!(a.dockerfile, "FROM x\n");
        // Read again (another mtime, another .git): the same.
        std::fs::write(d.path().join(".git/HEAD"), "y").unwrap();
        std::fs::write(d.path().join("src/a.py"), "1").unwrap();
        let again = read(d.path(), "Dockerfile", &none, None).unwrap();
        assert_eq!(a.hash, again.hash);
        assert_eq!(a.tar, again.tar);
        // A file's content, an argument, the target: each changes it.
        std::fs::write(d.path().join("src/a.py"), "2").unwrap();
        let b = read(d.path(), "Dockerfile", &none, None).unwrap();
        assert_ne!(a.hash, b.hash);
        let args = BTreeMap::from([("V".to_string(), "1".to_string())]);
        let c = read(d.path(), "Dockerfile", &args, None).unwrap();
        assert_ne!(b.hash, c.hash);
        let t = read(d.path(), "Dockerfile", &none, Some("dev")).unwrap();
        assert_ne!(b.hash, t.hash);
    }

    #[test]
    fn links_fifos_and_size_are_held_to_the_rules() {
        let d = ctx(&[("src/a", "1")]);
        // The Dockerfile a link to a file outside: not followed, so not there.
        let outside = ctx(&[("Dockerfile", "FROM x\n")]);
        std::os::unix::fs::symlink(
            outside.path().join("Dockerfile"),
            d.path().join("Dockerfile"),
        )
        .unwrap();
        let e = read(d.path(), "Dockerfile", &BTreeMap::new(), None).unwrap_err();
        assert!(matches!(e, ContextError::NoDockerfile { .. }), "{e}");
        // A link is sent as a link, never read through.
        std::fs::remove_file(d.path().join("Dockerfile")).unwrap();
        std::fs::write(d.path().join("Dockerfile"), "FROM x\n").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", d.path().join("src/secret")).unwrap();
        let c = read(d.path(), "Dockerfile", &BTreeMap::new(), None).unwrap();
        let mut ar = tar::Archive::new(c.tar.as_slice());
        let link = ar
            .entries()
            .unwrap()
            .map(|e| e.unwrap())
            .find(|e| e.path().unwrap() == Path::new("src/secret"))
            .unwrap();
        assert_eq!(link.header().entry_type(), tar::EntryType::Symlink);
        assert_eq!(link.header().size().unwrap(), 0);
        // The context itself a link: refused.
        let l = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(d.path(), l.path().join("ctx")).unwrap();
        assert!(read(&l.path().join("ctx"), "Dockerfile", &BTreeMap::new(), None).is_err());
        // A FIFO: refused, not opened (a read would block).
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.path().join("src/fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let e = read(d.path(), "Dockerfile", &BTreeMap::new(), None).unwrap_err();
        assert!(matches!(e, ContextError::Special { .. }), "{e}");
        std::fs::remove_file(d.path().join("src/fifo")).unwrap();
        // Too large: refused once past the bound.
        let f = std::fs::File::create(d.path().join("big")).unwrap();
        f.set_len(MAX_BYTES + 1).unwrap();
        let e = read(d.path(), "Dockerfile", &BTreeMap::new(), None).unwrap_err();
        assert!(matches!(e, ContextError::TooLarge { .. }), "{e}");
    }
}
