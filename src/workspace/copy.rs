//! Copy snapshots of plain write grants (folders that are not a workspace), for members that
//! opt in (`Member.snapshotWrites: SIZE`): before every start each granted folder is copied
//! into `<sessionDir>/snapshots/<member>/<ms>/<i>`, bounded in bytes and entries; a folder
//! over the bound holds the start. The folders are the member's: nothing is read through a
//! symlink (each is copied as a link), no FIFO or device is opened (they are left out), and
//! everything is reached beneath the granted folder's descriptor.

use std::io::Write;
use std::path::{Path, PathBuf};

use rustix::fs::FileType;

use super::{Snapshot, WorkspaceError, io};
use crate::files::{self, Bounds, Dir, Owner};

/// How many copy snapshots of a member are kept (the oldest go first).
const KEEP: usize = 10;
/// Entries of one granted folder a copy looks at, at most.
const MAX_ENTRIES: usize = 200_000;

/// A member's copy snapshots, as ateam takes and restores them.
#[derive(Debug, Clone)]
pub struct CopyPlace {
    /// The member, for messages.
    pub member: String,
    /// Its write grants, in the manifest's order.
    pub folders: Vec<PathBuf>,
    /// `<sessionDir>/snapshots/<member>`.
    pub store: PathBuf,
    /// The bound on the bytes of one snapshot, all folders together.
    pub max_bytes: u64,
    /// What sets that bound, for the refusal (`snapshotWrites`, `--max-copy`).
    pub bound: &'static str,
    /// The member's uid: restored files are its.
    pub member_owner: Owner,
    /// Who owns the snapshots (ateam's caller).
    pub ateam_owner: Owner,
}

/// Holds the member's copy lock (beside its store) until dropped: a start and a person's
/// rollback never copy at once.
fn lock(p: &CopyPlace) -> Result<std::fs::File, WorkspaceError> {
    let parent = p.store.parent().unwrap_or(Path::new("/"));
    files::private_dir(parent, p.ateam_owner).map_err(io(parent))?;
    let path = p.store.with_extension("lock");
    let f = files::open_lock(&path).map_err(io(&path))?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).map_err(|e| {
        WorkspaceError::Io {
            path,
            source: e.into(),
        }
    })?;
    Ok(f)
}

/// Copies every folder of `p` as it is now, as snapshot `<ms>`.
pub fn take(p: &CopyPlace, reason: &str) -> Result<Snapshot, WorkspaceError> {
    let _lock = lock(p)?;
    copy_all(p, reason)
}

fn copy_all(p: &CopyPlace, reason: &str) -> Result<Snapshot, WorkspaceError> {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let id = at.as_millis().to_string();
    let dir = p.store.join(&id);
    files::private_dir(&dir, p.ateam_owner).map_err(io(&dir))?;
    let mut budget = p.max_bytes;
    for (i, folder) in p.folders.iter().enumerate() {
        let to = dir.join(i.to_string());
        if let Err(e) = copy_tree(folder, &to, &mut budget, p) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    }
    let why = dir.join("reason");
    files::write_atomic(&why, reason.as_bytes(), 0o600, p.ateam_owner).map_err(io(&why))?;
    prune(p);
    Ok(Snapshot {
        id: id.clone(),
        commit: id,
        at: at.as_secs(),
        reason: reason.to_string(),
    })
}

/// The member's copy snapshots, the newest first.
pub fn list(p: &CopyPlace) -> Vec<Snapshot> {
    let Ok(entries) = std::fs::read_dir(&p.store) else {
        return Vec::new();
    };
    let mut out: Vec<Snapshot> = entries
        .flatten()
        .filter_map(|e| {
            let id = e.file_name().to_str()?.to_string();
            let ms: u64 = id.parse().ok()?;
            let reason = files::read_small(&e.path().join("reason"), 4096)?;
            Some(Snapshot {
                id: id.clone(),
                commit: id,
                at: ms / 1000,
                reason,
            })
        })
        .collect();
    out.sort_by(|a, b| b.id.cmp(&a.id));
    out
}

/// Puts every folder back as snapshot `to` (the newest when `None`) had it, after a copy of
/// the present. The member must be stopped. Returns the snapshot of the present and the one
/// restored.
pub fn restore(p: &CopyPlace, to: Option<&str>) -> Result<(Snapshot, Snapshot), WorkspaceError> {
    let all = list(p);
    let target = match to {
        None => all.first(),
        Some(id) => all.iter().find(|s| s.id == id),
    }
    .cloned()
    .ok_or_else(|| WorkspaceError::Refused(format!("{} has no such snapshot", p.member)))?;
    let _lock = lock(p)?;
    let saved = copy_all(p, "before rollback")?;
    for (i, folder) in p.folders.iter().enumerate() {
        empty(folder)?;
        let from = p.store.join(&target.id).join(i.to_string());
        put_back(&from, folder, p.member_owner)?;
    }
    Ok((saved, target))
}

/// A new folder `dst`, the member's (`p.member_owner`), with what the member's folder `src`
/// holds now, by the rules of a copy snapshot (no link followed, no FIFO opened, within what
/// is left of `budget` bytes, which it lowers, and the entry bound): first into `stage`,
/// ateam's own, then out of it. For `ateam fork`, whose member gets copies of its origin's
/// folders. `dst` must not exist.
pub fn copy_out(
    p: &CopyPlace,
    src: &Path,
    stage: &Path,
    dst: &Path,
    budget: &mut u64,
) -> Result<(), WorkspaceError> {
    if std::fs::symlink_metadata(dst).is_ok() {
        return Err(WorkspaceError::Refused(format!(
            "{} exists already: nothing is copied over it",
            dst.display()
        )));
    }
    let copied = copy_tree(src, stage, budget, p).and_then(|()| {
        files::member_dir(dst, p.ateam_owner, p.member_owner).map_err(io(dst))?;
        put_back(stage, dst, p.member_owner)
    });
    let _ = std::fs::remove_dir_all(stage);
    copied
}

/// Copies `src` (the member's) into `dst` (ateam's), within `budget` bytes.
fn copy_tree(
    src: &Path,
    dst: &Path,
    budget: &mut u64,
    p: &CopyPlace,
) -> Result<(), WorkspaceError> {
    let dir = Dir::open(src).map_err(io(src))?;
    files::private_dir(dst, p.ateam_owner).map_err(io(dst))?;
    let mut failed: Option<WorkspaceError> = None;
    let bounds = Bounds {
        depth: 64,
        entries: MAX_ENTRIES,
    };
    let complete = dir.walk(bounds, |e| {
        if failed.is_some() {
            return;
        }
        let to = dst.join(&e.rel);
        let done = match e.kind {
            FileType::Directory => files::private_dir(&to, p.ateam_owner).map_err(io(&to)),
            FileType::RegularFile => copy_file(&dir, &e.rel, &to, e.len, budget, p),
            FileType::Symlink => copy_link(&dir, &e.rel, &to),
            // FIFOs, sockets, devices: nothing to keep, and never opened.
            FileType::Fifo
            | FileType::Socket
            | FileType::CharacterDevice
            | FileType::BlockDevice
            | FileType::Unknown => Ok(()),
        };
        if let Err(err) = done {
            failed = Some(err);
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    if !complete {
        return Err(WorkspaceError::Refused(format!(
            "{} holds more than {MAX_ENTRIES} entries or folders deeper than 64: no copy snapshot of it",
            src.display()
        )));
    }
    Ok(())
}

fn copy_file(
    dir: &Dir,
    rel: &Path,
    to: &Path,
    len: u64,
    budget: &mut u64,
    p: &CopyPlace,
) -> Result<(), WorkspaceError> {
    let over = || {
        WorkspaceError::Refused(format!(
            "the write grants of {} hold more than {} allows ({}): raise it, or take files out",
            p.member,
            p.bound,
            crate::core::quantity::human_bytes(p.max_bytes)
        ))
    };
    if len > *budget {
        return Err(over());
    }
    let mut from = dir.open_regular(rel).map_err(io(rel))?;
    let mut out = std::fs::File::create(to).map_err(io(to))?;
    // Its mode bits (an executable script stays one), without set-id bits.
    let mode = from.metadata().map_err(io(rel))?.permissions();
    let mode = std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777;
    out.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
        .map_err(io(to))?;
    // At most what the budget allows, even if the file grew since it was listed.
    let copied = std::io::copy(&mut std::io::Read::take(&mut from, *budget + 1), &mut out)
        .map_err(io(to))?;
    if copied > *budget {
        return Err(over());
    }
    *budget -= copied;
    out.flush().map_err(io(to))?;
    Ok(())
}

/// A symlink is kept as a link (its text), never followed.
fn copy_link(dir: &Dir, rel: &Path, to: &Path) -> Result<(), WorkspaceError> {
    let target = dir.read_link(rel).map_err(|e| WorkspaceError::Io {
        path: rel.to_path_buf(),
        source: e,
    })?;
    std::os::unix::fs::symlink(target, to).map_err(io(to))
}

/// Removes everything inside `folder` (not the folder): a link is removed, never followed.
fn empty(folder: &Path) -> Result<(), WorkspaceError> {
    let entries = std::fs::read_dir(folder).map_err(io(folder))?;
    for e in entries.flatten() {
        let path = e.path();
        let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let gone = if is_dir {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        gone.map_err(io(&path))?;
    }
    Ok(())
}

/// Copies the snapshot `from` (ateam's) into `folder`, everything the member's.
fn put_back(from: &Path, folder: &Path, owner: Owner) -> Result<(), WorkspaceError> {
    let give = |path: &Path| -> Result<(), WorkspaceError> {
        if rustix::process::geteuid().is_root() {
            rustix::fs::chownat(
                rustix::fs::CWD,
                path,
                Some(rustix::process::Uid::from_raw(owner.uid)),
                Some(rustix::process::Gid::from_raw(owner.gid)),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(|e| WorkspaceError::Io {
                path: path.to_path_buf(),
                source: e.into(),
            })?;
        }
        Ok(())
    };
    for e in std::fs::read_dir(from).map_err(io(from))?.flatten() {
        let (src, dst) = (e.path(), folder.join(e.file_name()));
        let kind = e.file_type().map_err(io(&src))?;
        if kind.is_dir() {
            std::fs::create_dir(&dst).map_err(io(&dst))?;
            give(&dst)?;
            put_back(&src, &dst, owner)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&src).map_err(io(&src))?;
            std::os::unix::fs::symlink(target, &dst).map_err(io(&dst))?;
            give(&dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(io(&dst))?;
            give(&dst)?;
        }
    }
    Ok(())
}

/// Keeps the newest `KEEP` snapshots.
fn prune(p: &CopyPlace) {
    for old in list(p).into_iter().skip(KEEP) {
        let _ = std::fs::remove_dir_all(p.store.join(&old.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Owner {
        Owner {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        }
    }

    fn place(root: &Path, max_bytes: u64) -> CopyPlace {
        CopyPlace {
            member: "m".into(),
            folders: vec![],
            store: root.join("stage"),
            max_bytes,
            bound: "--max-copy",
            member_owner: me(),
            ateam_owner: me(),
        }
    }

    #[test]
    fn a_copy_out_keeps_links_as_links_leaves_fifos_and_holds_to_its_budget() {
        let t = tempfile::tempdir().unwrap();
        let (src, secret) = (t.path().join("src"), t.path().join("secret"));
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::create_dir(&secret).unwrap();
        std::fs::write(secret.join("key"), "not the member's").unwrap();
        std::fs::write(src.join("sub/f"), "12345").unwrap();
        std::os::unix::fs::symlink(&secret, src.join("link")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            src.join("pipe"),
            FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let p = place(t.path(), 100);
        let (stage, dst) = (t.path().join("stage"), t.path().join("dst"));
        let mut budget = 100;
        copy_out(&p, &src, &stage, &dst, &mut budget).unwrap();
        assert_eq!(budget, 95);
        assert_eq!(std::fs::read_to_string(dst.join("sub/f")).unwrap(), "12345");
        let link = std::fs::symlink_metadata(dst.join("link")).unwrap();
        assert!(link.file_type().is_symlink());
        assert!(!dst.join("pipe").exists());
        assert!(!stage.exists(), "the staging folder goes");
        // Over what is left: refused, and the half-made copy is not the member's.
        let mut left = 3;
        let err = copy_out(&p, &src, &stage, &t.path().join("dst2"), &mut left).unwrap_err();
        assert!(err.to_string().contains("--max-copy allows"), "{err}");
        assert!(!t.path().join("dst2").exists());
        // Never over what exists.
        let err = copy_out(&p, &src, &stage, &dst, &mut 100).unwrap_err();
        assert!(err.to_string().contains("exists already"), "{err}");
    }
}
