//! Files ateam owns on the host: private folders (0700) and atomically written files (0600);
//! and `Dir`, the one way ateam touches anything below a folder a member owns (its transcript
//! folder, its control folder): a member may have planted a symlink, a FIFO or a hostile
//! name there, and ateam often runs as root.
//!
//! The rules `Dir` keeps: the folder is opened once (its last component never through a
//! symlink) and everything below is reached from that descriptor; a file is created only as a
//! fresh name (`O_CREAT | O_EXCL | O_NOFOLLOW`) and put in place with `renameat`, which
//! replaces a planted link rather than writing through it; ownership and mode are set on the
//! descriptor, never by path; reads go through `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! non-blocking, and only regular files are read; walks never follow a link and are bounded.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

/// Who should own what ateam writes for a member: the user it runs for. When ateam runs as
/// root on behalf of another uid (the test setup does), files are handed to that uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// The owning user.
    pub uid: u32,
    /// The owning group.
    pub gid: u32,
}

impl Owner {
    /// Hands the open file or folder to this owner: by descriptor, so that no name a member
    /// can swap is looked up between creating it and giving it away.
    fn apply(self, fd: BorrowedFd<'_>) -> std::io::Result<()> {
        if rustix::process::geteuid().is_root() && self.uid != 0 {
            rustix::fs::fchown(
                fd,
                Some(rustix::process::Uid::from_raw(self.uid)),
                Some(rustix::process::Gid::from_raw(self.gid)),
            )?;
        }
        Ok(())
    }
}

fn invalid(msg: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, msg.to_string())
}

/// The file name of `path`, which must be one plain component below a folder.
fn split(path: &Path) -> std::io::Result<(&Path, &OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => Ok((
            if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            },
            name,
        )),
        _ => Err(invalid("not a file name in a folder")),
    }
}

/// `name` must be a single component: no `/`, not `.` or `..`, not empty.
fn one_component(name: &OsStr) -> std::io::Result<&OsStr> {
    let mut c = Path::new(name).components();
    match (c.next(), c.next()) {
        (Some(Component::Normal(n)), None) if n.as_bytes() == name.as_bytes() => Ok(n),
        _ => Err(invalid("not a single file name")),
    }
}

/// A name no one can have planted in advance: `O_EXCL` refuses any that exists, and the
/// random part makes guessing it pointless.
fn temp_name(name: &OsStr) -> OsString {
    static RANDOM: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = RANDOM.get_or_init(Default::default).build_hasher();
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    // Short enough that any name ateam writes still fits NAME_MAX.
    let shown: String = name.to_string_lossy().chars().take(64).collect();
    format!(".{shown}.tmp-{:016x}", h.finish()).into()
}

/// What a walk found: a path inside the walked folder, and what `lstat` says of it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its path relative to the walked folder.
    pub rel: PathBuf,
    /// File, folder, symlink...: as `lstat` says, a symlink not followed.
    pub kind: FileType,
    /// Its size in bytes.
    pub len: u64,
    /// When it was last modified; `None` for a time before the epoch.
    pub modified: Option<SystemTime>,
    /// Its owner.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
    /// Its permission bits (`0o7777`).
    pub mode: u32,
}

impl Entry {
    fn new(rel: PathBuf, st: &Stat) -> Entry {
        let modified = (st.st_mtime >= 0).then(|| {
            UNIX_EPOCH + Duration::new(st.st_mtime as u64, st.st_mtime_nsec as u32 % 1_000_000_000)
        });
        Entry {
            rel,
            kind: FileType::from_raw_mode(st.st_mode),
            len: st.st_size.max(0) as u64,
            modified,
            uid: st.st_uid,
            gid: st.st_gid,
            mode: st.st_mode & 0o7777,
        }
    }
}

/// How far a walk goes: a member can make a tree deep or wide enough to stall a status.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Levels of folders below the walked one that are entered.
    pub depth: usize,
    /// Entries looked at in all (the walk stops there).
    pub entries: usize,
}

/// An open folder: everything below it is reached from this descriptor, never by a path
/// looked up again.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

impl Dir {
    /// Opens a folder a member may own: `path`'s last component must be a real folder, not
    /// a symlink (its parents are the person's and trusted).
    pub fn open(path: &Path) -> std::io::Result<Dir> {
        Self::open_with(path, OFlags::NOFOLLOW)
    }

    /// Opens a folder of the person's or of ateam's own, following symlinks the person made
    /// (a state folder may be a link).
    pub(crate) fn open_trusted(path: &Path) -> std::io::Result<Dir> {
        Self::open_with(path, OFlags::empty())
    }

    fn open_with(path: &Path, extra: OFlags) -> std::io::Result<Dir> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | extra,
            Mode::empty(),
        )
        .map_err(not_a_folder)?;
        Ok(Dir { fd })
    }

    /// The open folder, for `*at` calls relative to it.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether `name` is there, as itself (a symlink counts, and is not followed).
    pub fn exists(&self, name: &OsStr) -> std::io::Result<bool> {
        match rustix::fs::statat(&self.fd, one_component(name)?, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes `bytes` as `name` so that a crash leaves either the old or the new content: a
    /// fresh temp file beside it (never one that exists, never through a link), its mode and
    /// owner set on the descriptor, fsync, `renameat` over `name` (a symlink there is
    /// replaced, not followed), fsync of the folder.
    pub fn write_atomic(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        owner: Owner,
    ) -> std::io::Result<()> {
        let name = one_component(name)?;
        let (tmp, fd) = self.create_fresh(name, mode)?;
        let written = (|| {
            let mut f = File::from(fd);
            f.write_all(bytes)?;
            rustix::fs::fchmod(&f, Mode::from_raw_mode(mode))?;
            owner.apply(f.as_fd())?;
            f.sync_all()?;
            rustix::fs::renameat(&self.fd, &tmp, &self.fd, name)?;
            rustix::fs::fsync(&self.fd).map_err(std::io::Error::from)
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        }
        written
    }

    /// Creates a new file of a name no one planted (a few tries, should one be taken).
    fn create_fresh(&self, name: &OsStr, mode: u32) -> std::io::Result<(OsString, OwnedFd)> {
        let mut last = Errno::EXIST;
        for _ in 0..16 {
            let tmp = temp_name(name);
            match rustix::fs::openat(
                &self.fd,
                &tmp,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode & 0o700),
            ) {
                Ok(fd) => return Ok((tmp, fd)),
                Err(Errno::EXIST) => last = Errno::EXIST,
                Err(e) => return Err(e.into()),
            }
        }
        Err(last.into())
    }

    /// Opens `rel` (a path inside this folder) for reading, only if every component is a real
    /// folder or file beneath it (no symlink, no `..` out) and it is a regular file: a FIFO
    /// or a device is refused without blocking.
    pub(crate) fn open_regular(&self, rel: &Path) -> std::io::Result<File> {
        let fd = open_beneath(
            self.fd(),
            rel,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC,
        )?;
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not a regular file",
            ));
        }
        Ok(File::from(fd))
    }

    /// Opens the folder `rel` below this one as `open_regular` opens a file: no symlink on
    /// the way, nothing outside.
    pub(crate) fn open_dir(&self, rel: &Path) -> std::io::Result<Dir> {
        let fd = open_beneath(self.fd(), rel, FOLDER_BENEATH).map_err(not_a_folder)?;
        Ok(Dir { fd })
    }

    /// The text of the symlink `rel` below this folder: the link itself is read, never
    /// followed, and the folders on the way to it are reached as `open_dir` reaches them.
    pub fn read_link(&self, rel: &Path) -> std::io::Result<OsString> {
        use std::os::unix::ffi::OsStringExt;
        let parent = rel.parent().unwrap_or(Path::new(""));
        let name = rel.file_name().unwrap_or_default();
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        let pfd = open_beneath(self.fd(), parent, FOLDER_BENEATH)?;
        let target = rustix::fs::readlinkat(&pfd, name, Vec::new())?;
        Ok(OsString::from_vec(target.into_bytes()))
    }

    /// At most `max` bytes of `rel` from `offset` on, read as `open_regular` opens it, and the
    /// file's size then (a file that shrank below `offset` gives no bytes).
    pub(crate) fn read_range(
        &self,
        rel: &Path,
        offset: u64,
        max: u64,
    ) -> std::io::Result<(Vec<u8>, u64)> {
        use std::io::{Seek, SeekFrom};
        let mut f = self.open_regular(rel)?;
        let len = f.metadata()?.len();
        let mut buf = Vec::new();
        if offset < len {
            f.seek(SeekFrom::Start(offset))?;
            let want = max.min(len - offset);
            buf.reserve(usize::try_from(want.min(1 << 20)).unwrap_or(1 << 20));
            f.take(want).read_to_end(&mut buf)?;
        }
        Ok((buf, len))
    }

    /// The last `max` bytes of `rel` (read as `open_regular` opens it), and where they begin.
    pub(crate) fn read_last(&self, rel: &Path, max: u64) -> std::io::Result<(Vec<u8>, u64)> {
        use std::io::{Seek, SeekFrom};
        let mut f = self.open_regular(rel)?;
        let start = f.metadata()?.len().saturating_sub(max);
        f.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::new();
        f.take(max).read_to_end(&mut buf)?;
        Ok((buf, start))
    }

    /// `read_last` from the start of a line: a first line the read began inside is left out.
    pub fn read_tail(&self, rel: &Path, max: u64) -> std::io::Result<(Vec<u8>, u64)> {
        let (mut buf, start) = self.read_last(rel, max)?;
        if start > 0 {
            let cut = buf
                .iter()
                .position(|&b| b == b'\n')
                .map_or(buf.len(), |n| n + 1);
            buf.drain(..cut);
            return Ok((buf, start + cut as u64));
        }
        Ok((buf, 0))
    }

    /// The regular files below this folder that `wanted` takes (by their path inside it),
    /// newest first, at most `keep` of them, found by a bounded walk that follows no link.
    pub(crate) fn newest_files(
        &self,
        bounds: Bounds,
        keep: usize,
        mut wanted: impl FnMut(&Path) -> bool,
    ) -> Vec<Entry> {
        let mut found: Vec<Entry> = Vec::new();
        self.walk(bounds, |e| {
            if e.kind == FileType::RegularFile && e.modified.is_some() && wanted(&e.rel) {
                found.push(e.clone());
            }
        });
        // Newest first; of one time, the larger name (a later rollout's) first.
        found.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| b.rel.cmp(&a.rel)));
        found.truncate(keep);
        found
    }

    /// The first `max` bytes of `rel`, read as `open_regular` opens it.
    pub(crate) fn read_regular(&self, rel: &Path, max: u64) -> std::io::Result<Vec<u8>> {
        // Sized up front: a growing buffer reads a small file in many small `read`s.
        let mut buf = Vec::with_capacity(usize::try_from(max.min(4096)).unwrap_or(4096));
        self.open_regular(rel)?.take(max).read_to_end(&mut buf)?;
        Ok(buf)
    }

    /// Removes the file `name` if it is there (a symlink itself, never its target).
    pub fn remove_file(&self, name: &OsStr) -> std::io::Result<()> {
        match rustix::fs::unlinkat(&self.fd, one_component(name)?, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Calls `f` for every entry below this folder, depth first, never following a symlink
    /// (each folder is opened from its parent's descriptor with `O_NOFOLLOW`, so one swapped
    /// for a link meanwhile is not entered), within `bounds`. Returns whether the walk saw
    /// everything.
    pub fn walk(&self, bounds: Bounds, mut f: impl FnMut(&Entry)) -> bool {
        let mut seen = 0;
        walk_in(
            &self.fd,
            &PathBuf::new(),
            0,
            bounds,
            &mut seen,
            false,
            &mut f,
        )
    }

    /// `walk`, calling `f` for the folders alone: the others are told apart by what the
    /// folder's listing says of them, with no `stat` each (a tree of 100,000 files costs a
    /// tenth of the time). Their entries still count against `bounds`.
    pub(crate) fn walk_dirs(&self, bounds: Bounds, mut f: impl FnMut(&Entry)) -> bool {
        let mut seen = 0;
        walk_in(
            &self.fd,
            &PathBuf::new(),
            0,
            bounds,
            &mut seen,
            true,
            &mut f,
        )
    }
}

fn walk_in(
    fd: &OwnedFd,
    rel: &Path,
    depth: usize,
    bounds: Bounds,
    seen: &mut usize,
    dirs_only: bool,
    f: &mut dyn FnMut(&Entry),
) -> bool {
    let Ok(entries) = rustix::fs::Dir::read_from(fd) else {
        return true;
    };
    let mut complete = true;
    for e in entries {
        let Ok(e) = e else { break };
        let name = e.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        *seen += 1;
        if *seen > bounds.entries {
            return false;
        }
        // What the listing says is not a folder is none (`Unknown`: some file systems do
        // not say, and `stat` does).
        if dirs_only && !matches!(e.file_type(), FileType::Directory | FileType::Unknown) {
            continue;
        }
        let Ok(st) = rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let entry = Entry::new(rel.join(OsStr::from_bytes(name.to_bytes())), &st);
        if dirs_only && entry.kind != FileType::Directory {
            continue;
        }
        f(&entry);
        if entry.kind != FileType::Directory {
            continue;
        }
        if depth + 1 >= bounds.depth {
            complete = false;
            continue;
        }
        let Ok(child) = rustix::fs::openat(
            fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        if !walk_in(&child, &entry.rel, depth + 1, bounds, seen, dirs_only, f) {
            return false;
        }
    }
    complete
}

/// How a folder below a `Dir` is opened for reading.
const FOLDER_BENEATH: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// `openat2` of `rel` below `at`, resolved only beneath it and through no symlink or magic
/// link (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`): every read below a
/// `Dir` is opened so.
fn open_beneath(at: BorrowedFd<'_>, rel: &Path, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        at,
        rel,
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// A handle (`O_PATH`) on the folder at `path`, looked up through no symlink in any component
/// (`O_NOFOLLOW | O_DIRECTORY`, `RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`): what a granted
/// folder is judged and pinned by (`host::access`, `runtime::pin`). A symlink on the way
/// fails with `ELOOP` (or `EXDEV`), something not a folder with `ENOTDIR`.
pub(crate) fn folder_handle(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// A handle (`O_PATH`) on `rel` resolved inside `root` as if `root` were `/`
/// (`RESOLVE_IN_ROOT`: an absolute symlink met on the way means one below `root`, `..` stops
/// at it): how a path inside a container (`/proc/<pid>/root`) is looked at (`runtime::procfs`).
pub(crate) fn handle_in_root(root: BorrowedFd<'_>, rel: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        root,
        rel,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT,
    )
}

/// What `statx` says of an open handle itself (`AT_EMPTY_PATH`, the basic fields).
pub(crate) fn handle_stat(fd: BorrowedFd<'_>) -> rustix::io::Result<rustix::fs::Statx> {
    rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::BASIC_STATS,
    )
}

/// A symlink or another file where a folder was expected: say so plainly.
fn not_a_folder(e: Errno) -> std::io::Error {
    match e {
        Errno::LOOP | Errno::NOTDIR => std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "exists and is not a folder (a symlink is never followed here)",
        ),
        e => e.into(),
    }
}

/// Creates `dir` and any missing parents; every folder this creates is 0700 and the owner's.
/// An existing folder is left as it is (it may be the user's own, with its own mode).
pub(crate) fn private_dir(dir: &Path, owner: Owner) -> std::io::Result<()> {
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
    let d = Dir::open(dir)?;
    rustix::fs::fchmod(&d.fd, Mode::from_raw_mode(0o700))?;
    owner.apply(d.fd())
}

/// Writes `bytes` to `path` atomically (`Dir::write_atomic` in its folder, which is the
/// person's or ateam's and may be reached through the person's symlinks).
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32, owner: Owner) -> std::io::Result<()> {
    let (dir, name) = split(path)?;
    Dir::open_trusted(dir)?.write_atomic(name, bytes, mode, owner)
}

/// `write_atomic` into a folder a member owns (its control folder): the folder itself is
/// opened without following a link, as `Dir::open` does.
pub(crate) fn write_atomic_in_member_dir(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    owner: Owner,
) -> std::io::Result<()> {
    let (dir, name) = split(path)?;
    Dir::open(dir)?.write_atomic(name, bytes, mode, owner)
}

/// A folder of ateam's that belongs to one member (its transcript or control folder): its
/// parents are made as `parent` (the person), the folder itself is 0700 and `owner`'s, even
/// when it existed before with another owner (a member whose `user` changed). Not
/// recursive: files already in it keep their owner. The folder is opened without following a
/// symlink and changed through that descriptor.
pub fn member_dir(dir: &Path, parent: Owner, owner: Owner) -> std::io::Result<()> {
    let (up, name) = split(dir)?;
    private_dir(up, parent)?;
    let up = Dir::open_trusted(up)?;
    let created = match rustix::fs::mkdirat(&up.fd, name, Mode::from_raw_mode(0o700)) {
        Ok(()) => true,
        Err(Errno::EXIST) => false,
        Err(e) => return Err(e.into()),
    };
    let fd = rustix::fs::openat(
        &up.fd,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(not_a_folder)?;
    if created {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
    }
    let st = rustix::fs::fstat(&fd)?;
    if created || (st.st_uid, st.st_gid) != (owner.uid, owner.gid) {
        owner.apply(fd.as_fd())?;
    }
    Ok(())
}

/// Hands an existing regular file to `owner` (a file left by a process that ran as the
/// member's old uid, such as its proxy's log): no link followed, no FIFO opened; a file that
/// is not there is fine.
pub(crate) fn give_file(path: &Path, owner: Owner) -> std::io::Result<()> {
    match open_regular(path) {
        Ok(f) => owner.apply(f.as_fd()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens a file in a folder whose last component may belong to a member's uid (its egress
/// folder, its control folder) as `Dir::open_regular` does: no link, no FIFO.
pub(crate) fn open_regular(path: &Path) -> std::io::Result<File> {
    let (dir, name) = split(path)?;
    Dir::open(dir)?.open_regular(Path::new(name))
}

/// Reads a file of the kernel's (`/proc`, `/sys/fs/cgroup`), whose size says nothing: into a
/// page-sized buffer at once, so a file of a few hundred bytes costs two `read`s, not the
/// seven of `fs::read`'s growing probes (a look at 200 members reads 1000 of them).
pub(crate) fn read_kernel(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(4096);
    File::open(path)?.read_to_end(&mut buf)?;
    Ok(buf)
}

/// `read_kernel`, as text.
pub(crate) fn read_kernel_text(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_kernel(path)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Reads a small file of a member's control folder (`restarts`, `go`): no symlink, no FIFO,
/// at most `max` bytes. Whatever is wrong reads as nothing.
pub(crate) fn read_small(path: &Path, max: u64) -> Option<String> {
    let (dir, name) = split(path).ok()?;
    let bytes = Dir::open(dir)
        .ok()?
        .read_regular(Path::new(name), max)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Binds a Unix socket at `path` in a folder a member may own (its control folder), 0600
/// from the start (by umask, not a `chmod` by path) and handed to `owner` with a `chown` that
/// never follows a link: a member that swaps the socket for a symlink meanwhile gets its own
/// link changed, and the bind is refused. Returns the listener and the socket's inode.
pub(crate) fn bind_private_socket(
    path: &Path,
    owner: Option<Owner>,
) -> std::io::Result<(std::os::unix::net::UnixListener, u64)> {
    let (dir, name) = split(path)?;
    let d = Dir::open(dir)?;
    d.remove_file(name)?;
    // Bound, handed to its owner, and only then listening: a client that connects as soon
    // as it can must never find the socket still root's.
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let sock = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let addr = SocketAddrUnix::new(path)?;
    let old = rustix::process::umask(Mode::from_raw_mode(0o177));
    let bound = rustix::net::bind(&sock, &addr);
    rustix::process::umask(old);
    bound?;
    if let Some(o) = owner
        && rustix::process::geteuid().is_root()
    {
        rustix::fs::chownat(
            &d.fd,
            name,
            Some(rustix::process::Uid::from_raw(o.uid)),
            Some(rustix::process::Gid::from_raw(o.gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )?;
    }
    let st = rustix::fs::statat(&d.fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Socket {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "the socket was replaced as it was made",
        ));
    }
    rustix::net::listen(&sock, 128)?;
    Ok((std::os::unix::net::UnixListener::from(sock), st.st_ino))
}

/// Opens (creating, 0600) a lock file to flock; its content is left as it is.
pub(crate) fn open_lock(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc_nofollow())
        .open(path)
}

fn libc_nofollow() -> i32 {
    OFlags::NOFOLLOW.bits() as i32
}

/// Opens (creating, 0600, handed to `owner`) a file of ateam's to append to: each `write`
/// lands whole at its end whoever else appends (readable too, to look at its last line). A
/// symlink there is refused, not followed.
pub(crate) fn open_append(path: &Path, owner: Owner) -> std::io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc_nofollow())
        .open(path)?;
    owner.apply(f.as_fd())?;
    Ok(f)
}

/// Creates or truncates a log file ateam hands to a process it starts (its standard error),
/// in a folder that may belong to a member's uid: a symlink there is refused, not followed.
pub(crate) fn create_log(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc_nofollow())
        .open(path)
}

/// Removes a file if it is there.
pub(crate) fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};

    fn me() -> Owner {
        Owner {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        }
    }

    fn fifo(p: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    #[test]
    fn private_dirs_and_atomic_files() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b/c");
        private_dir(&d, me()).unwrap();
        for p in [t.path().join("a"), t.path().join("a/b"), d.clone()] {
            assert_eq!(
                fs::metadata(&p).unwrap().mode() & 0o777,
                0o700,
                "{}",
                p.display()
            );
        }
        let f = d.join("secrets");
        write_atomic(&f, b"A=1\0", 0o600, me()).unwrap();
        write_atomic(&f, b"A=2\0", 0o600, me()).unwrap();
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

    /// The old temp name `.NAME.tmp-<pid>`, and the final name, planted as symlinks to a file
    /// outside and to a name that does not exist: neither target is written or created, and
    /// the final name becomes a file of its own.
    #[test]
    fn an_atomic_write_never_goes_through_a_planted_link() {
        let t = tempfile::tempdir().unwrap();
        let (inside, outside) = (t.path().join("member"), t.path().join("outside"));
        fs::create_dir_all(&inside).unwrap();
        fs::create_dir_all(&outside).unwrap();
        let victim = outside.join("precious");
        fs::write(&victim, "mine\n").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
        let absent = outside.join("created");
        let pid = std::process::id();
        symlink(&victim, inside.join(format!(".RESUME.md.tmp-{pid}"))).unwrap();
        symlink(&absent, inside.join(format!(".go.tmp-{pid}"))).unwrap();
        symlink(&victim, inside.join("RESUME.md")).unwrap();
        symlink(&absent, inside.join("go")).unwrap();
        let d = Dir::open(&inside).unwrap();
        d.write_atomic(OsStr::new("RESUME.md"), b"resume", 0o600, me())
            .unwrap();
        d.write_atomic(OsStr::new("go"), b"go", 0o600, me())
            .unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "mine\n");
        assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o777, 0o644);
        assert!(!absent.exists());
        for (name, text) in [("RESUME.md", "resume"), ("go", "go")] {
            let p = inside.join(name);
            assert!(fs::symlink_metadata(&p).unwrap().is_file(), "{name}");
            assert_eq!(fs::read_to_string(&p).unwrap(), text);
        }
        // The planted links are left as they were, and no temp file of ateam's is.
        assert_eq!(fs::read_dir(&inside).unwrap().count(), 4);
        // A name with a folder in it is refused, not resolved.
        assert!(
            d.write_atomic(OsStr::new("../x"), b"", 0o600, me())
                .is_err()
        );
        assert!(d.write_atomic(OsStr::new("a/b"), b"", 0o600, me()).is_err());
    }

    /// A folder swapped for a symlink is not opened (nor created, nor chowned) through it.
    #[test]
    fn a_member_folder_that_is_a_symlink_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let elsewhere = t.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o755)).unwrap();
        let dir = t.path().join("members/m");
        fs::create_dir_all(t.path().join("members")).unwrap();
        symlink(&elsewhere, &dir).unwrap();
        let e = member_dir(&dir, me(), me()).unwrap_err();
        assert!(e.to_string().contains("not a folder"), "{e}");
        assert!(Dir::open(&dir).is_err());
        assert_eq!(fs::metadata(&elsewhere).unwrap().mode() & 0o777, 0o755);
        // A real one is made 0700.
        let real = t.path().join("members/n");
        member_dir(&real, me(), me()).unwrap();
        assert_eq!(fs::metadata(&real).unwrap().mode() & 0o777, 0o700);
    }

    /// Reads: never through a symlink (last or a parent component), never a FIFO (which would
    /// block), never more than asked.
    #[test]
    fn reads_are_of_regular_files_beneath_only() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("d");
        fs::create_dir_all(d.join("sub")).unwrap();
        fs::write(d.join("sub/ok"), "0123456789").unwrap();
        fs::write(t.path().join("secret"), "root's").unwrap();
        symlink(t.path().join("secret"), d.join("link")).unwrap();
        symlink(t.path(), d.join("up")).unwrap();
        fifo(&d.join("fifo"));
        let dir = Dir::open(&d).unwrap();
        assert_eq!(dir.read_regular(Path::new("sub/ok"), 4).unwrap(), b"0123");
        for bad in ["link", "up/secret", "../secret", "fifo", "sub"] {
            assert!(dir.read_regular(Path::new(bad), 100).is_err(), "{bad}");
        }
        assert_eq!(
            read_small(&d.join("sub/ok"), 100).as_deref(),
            Some("0123456789")
        );
        assert_eq!(read_small(&d.join("fifo"), 100), None);
        assert_eq!(read_small(&d.join("link"), 100), None);
        assert!(dir.exists(OsStr::new("link")).unwrap());
        assert!(!dir.exists(OsStr::new("nothing")).unwrap());
    }

    /// A walk counts a link as a link (not its target), never enters a linked folder or a
    /// loop, does not open a FIFO, and stops at its bounds.
    #[test]
    fn a_walk_never_follows_and_is_bounded() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("d");
        fs::create_dir_all(d.join("a/b/c")).unwrap();
        fs::write(d.join("a/b/c/deep"), "x").unwrap();
        fs::write(d.join("f"), "12345").unwrap();
        let big = t.path().join("big");
        File::create(&big).unwrap().set_len(1 << 40).unwrap();
        symlink(&big, d.join("to-big")).unwrap();
        symlink("/", d.join("to-root")).unwrap();
        symlink("loop", d.join("loop")).unwrap();
        fifo(&d.join("fifo"));
        let dir = Dir::open(&d).unwrap();
        let mut all = Vec::new();
        let done = dir.walk(
            Bounds {
                depth: 8,
                entries: 100,
            },
            |e| all.push(e.clone()),
        );
        assert!(done);
        let names: Vec<String> = all.iter().map(|e| e.rel.display().to_string()).collect();
        assert_eq!(all.len(), 9, "{names:?}");
        assert!(names.contains(&"a/b/c/deep".to_string()), "{names:?}");
        let bytes: u64 = all
            .iter()
            .filter(|e| e.kind == FileType::RegularFile)
            .map(|e| e.len)
            .sum();
        assert_eq!(bytes, 6);
        // Too deep, too many: it stops and says so.
        assert!(!dir.walk(
            Bounds {
                depth: 2,
                entries: 100
            },
            |_| {}
        ));
        let mut n = 0;
        assert!(!dir.walk(
            Bounds {
                depth: 8,
                entries: 3
            },
            |_| n += 1
        ));
        assert_eq!(n, 3);
    }

    /// A socket is 0600 from the start; a link planted at its name is removed, not followed.
    #[test]
    fn a_private_socket_is_made_without_a_path_chmod() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        fs::write(&victim, "x").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
        let sock = t.path().join("egress.sock");
        symlink(&victim, &sock).unwrap();
        let (_l, ino) = bind_private_socket(&sock, Some(me())).unwrap();
        let m = fs::symlink_metadata(&sock).unwrap();
        assert_eq!(m.ino(), ino);
        assert_eq!(m.mode() & 0o777, 0o600);
        assert!(std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
        assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o777, 0o644);
        assert_eq!(fs::read_to_string(&victim).unwrap(), "x");
    }

    /// Whoever connects first already finds the socket its owner's: the launcher's check
    /// right after its first answer once found it still root's (a chown after `listen`).
    #[test]
    fn a_private_socket_answers_only_once_it_is_its_owners() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let nobody = Owner {
            uid: 65534,
            gid: 65534,
        };
        let t = tempfile::tempdir().unwrap();
        let sock = t.path().join("egress.sock");
        for _ in 0..1000 {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (p, s) = (sock.clone(), stop.clone());
            let watcher = std::thread::spawn(move || {
                while !s.load(std::sync::atomic::Ordering::Relaxed) {
                    if std::os::unix::net::UnixStream::connect(&p).is_ok() {
                        return fs::symlink_metadata(&p).map(|m| m.uid()).ok();
                    }
                }
                None
            });
            let bound = bind_private_socket(&sock, Some(nobody)).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(200));
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            if let Some(uid) = watcher.join().unwrap() {
                assert_eq!(
                    uid, 65534,
                    "a client connected before the socket was handed over"
                );
            }
            drop(bound);
            fs::remove_file(&sock).unwrap();
        }
    }
}
