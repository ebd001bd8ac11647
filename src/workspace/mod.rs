//! A writer's workspace: a repository of the member's own, beside the person's (the person's
//! objects shared read-only through `objects/info/alternates`, its own `.git`, refs, config
//! and hooks, owned by the member's uid), and ateam's shadow of it, where every git command
//! of ateam's on it runs (`git::Git`): the shadow is ateam's repository, with the member's
//! objects and the person's as alternates, its own index and the snapshot refs. The member's
//! `.git` is only ever read as files (its refs, with no link followed) and as objects.
//!
//! What git itself guarantees here (git 2.39, Debian 12's; the pinned settings hold back to
//! 2.32): config comes only from the files and the command line it is given (so no member
//! config is read, and `-c` beats any), hooks only from `core.hooksPath`; `.gitignore` and
//! `.gitattributes` are not followed through symlinks in a work tree (2.32); attributes
//! select drivers only by config, so with none configured a member's filters, textconv and
//! diff drivers name nothing; `index-pack --strict` checks every object it receives.

pub mod copy;
pub(crate) mod git;
mod refs;
mod review;
mod snapshots;

use std::path::{Path, PathBuf};

use crate::files::{self, Owner};
use crate::model;
use git::{Git, GitError};
pub use review::{Changes, Collected, changes, collect, collected_ref};
pub use snapshots::{reset, rollback, snapshot, snapshots};

/// Whether the repository at `git_dir` has the ref `name`, read as files (validation's
/// check of a base, with no git run).
pub(crate) fn ref_exists(git_dir: &Path, name: &str) -> bool {
    matches!(refs::read(git_dir, name), Ok(Some(_)))
}

/// Whether the repository at `git_dir` has a HEAD that names a commit (not an unborn branch).
pub(crate) fn refs_head_exists(git_dir: &Path) -> bool {
    matches!(refs::head(git_dir, "HEAD"), Ok(Some(_)))
}

/// What went wrong with a workspace.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// A git command failed.
    #[error("{0}")]
    Git(#[from] GitError),
    /// A file or folder could not be made or read.
    #[error("{path}: {source}")]
    Io {
        /// What was being made or read.
        path: PathBuf,
        /// Why it could not be.
        source: std::io::Error,
    },
    /// The member's repository is not as ateam made it, in a way that would make git read
    /// from elsewhere.
    #[error("workspace {path}: {what}; ateam reads nothing of it until that is undone")]
    Tampered {
        /// The member's folder.
        path: PathBuf,
        /// What was found.
        what: String,
    },
    /// The base does not name a commit of the person's repository.
    #[error("base `{base}` is not a commit of {repo}")]
    NoBase {
        /// As the manifest names it.
        base: String,
        /// The person's repository.
        repo: PathBuf,
    },
    /// A request that cannot be met as asked.
    #[error("{0}")]
    Refused(String),
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorkspaceError + '_ {
    move |source| WorkspaceError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `what` was found in `p`'s repository, which ateam will not read past.
fn tampered(p: &Place, what: String) -> WorkspaceError {
    WorkspaceError::Tampered {
        path: p.ws.path.clone(),
        what: crate::core::untrusted::shown(&what).into_owned(),
    }
}

/// A member's workspace as ateam works on it.
#[derive(Debug, Clone)]
pub struct Place {
    /// The team, for messages and refs.
    pub team: String,
    /// The member it is the workspace of: its branch and shadow refs are named after it.
    pub member: String,
    /// What the manifest asks for.
    pub ws: model::Workspace,
    /// ateam's shadow repository of it.
    pub shadow: PathBuf,
    /// The member's uid: every command reading its folder runs as it.
    pub member_owner: Owner,
    /// Who ateam works for (the owner of the folders it makes above the member's).
    pub ateam_owner: Owner,
}

/// One snapshot: its id (the commit's short id), commit, when and why it was taken.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Snapshot {
    /// The commit's short id, what `rollback --to` takes.
    pub id: String,
    /// The commit in the shadow.
    pub commit: String,
    /// Seconds since the epoch.
    pub at: u64,
    /// Why it was taken (`before start`, `before rollback`...).
    pub reason: String,
}

/// The ref prefix of snapshots in the shadow.
const SNAPSHOTS: &str = "refs/ateam/snapshots/";
/// The base commit the workspace was made at.
const BASE_REF: &str = "refs/ateam/base";
/// The last commit collected into the person's repository.
const COLLECTED_REF: &str = "refs/ateam/collected";

impl Place {
    /// The place of `team`/`member`'s workspace `ws`; its shadow beside it, in `.ateam`.
    pub fn new(
        team: &str,
        member: &str,
        ws: &model::Workspace,
        member_owner: Owner,
        ateam_owner: Owner,
    ) -> Place {
        let shadow = ws
            .path
            .parent()
            .unwrap_or(Path::new("/"))
            .join(".ateam")
            .join(format!("{member}.git"));
        Place {
            team: team.to_string(),
            member: member.to_string(),
            ws: ws.clone(),
            shadow,
            member_owner,
            ateam_owner,
        }
    }

    fn member_git(&self) -> PathBuf {
        self.ws.path.join(".git")
    }

    /// git in the shadow, as the member, with the member's folder as its work tree.
    fn shadow(&self) -> Git {
        Git::new(&self.shadow)
            .work_tree(&self.ws.path)
            .index(&self.shadow.join("index"))
            .user(self.member_owner)
    }

    /// git in the person's repository, as its owner.
    fn person(&self, owner: Owner) -> Git {
        Git::new(&self.ws.git_dir).user(owner)
    }

    /// The base commit the workspace was made at.
    pub async fn base(&self) -> Result<String, WorkspaceError> {
        Ok(self
            .shadow()
            .run(&["rev-parse", "--verify", BASE_REF])
            .await?
            .text())
    }

    /// Holds the workspace's lock (a file of ateam's beside the shadow) until dropped: a
    /// snapshot before a start and a person's rollback never work on one index at once.
    pub async fn lock(&self) -> Result<std::fs::File, WorkspaceError> {
        let dir = self.shadow.parent().expect("the shadow is in .ateam");
        files::private_dir(dir, self.ateam_owner).map_err(io(dir))?;
        let path = self.shadow.with_extension("lock");
        let file = files::open_lock(&path).map_err(io(&path))?;
        let shadow = self.shadow.clone();
        tokio::task::spawn_blocking(move || {
            rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).map(|()| {
                clear_stale_locks(&shadow);
                file
            })
        })
        .await
        .map_err(|e| WorkspaceError::Refused(format!("the workspace lock: {e}")))?
        .map_err(|e| WorkspaceError::Io {
            path,
            source: e.into(),
        })
    }

    /// Whether ateam has made this workspace.
    pub fn exists(&self) -> bool {
        self.shadow.join("HEAD").exists() && self.member_git().is_dir()
    }
}

/// Removes the `*.lock` files a git of ateam's left in the shadow when it was stopped (its
/// bound, a FIFO): with the workspace's lock held no other git of ateam's works there, and
/// git would refuse every later command (`index.lock: File exists`).
fn clear_stale_locks(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let (Ok(kind), path) = (e.file_type(), e.path()) else {
            continue;
        };
        if kind.is_dir() && e.file_name() != "objects" {
            clear_stale_locks(&path);
        } else if kind.is_file() && path.extension().is_some_and(|x| x == "lock") {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Makes the member's repository and ateam's shadow of it, unless both are there: the branch
/// at the base's commit, checked out, owned by the member. An existing workspace is the
/// person's data and is kept as it is (a changed base or branch applies to a new one only).
pub async fn ensure(p: &Place) -> Result<bool, WorkspaceError> {
    let _lock = p.lock().await?;
    if p.exists() {
        vet(p)?;
        return Ok(false);
    }
    let base = resolve_base(p).await?;
    let root =
        p.ws.path
            .parent()
            .expect("a workspace is in the workspaces folder");
    // Above the member's folder: the person's, passable (not readable) by a member's uid,
    // whose git makes the repository: the workspaces folder, the shadows' folder, and the
    // Team's sessionDir above them (ateam makes it 0700 when it is not there yet).
    files::private_dir(root, p.ateam_owner).map_err(io(root))?;
    let shadow_root = p.shadow.parent().expect("the shadow is in .ateam");
    for d in [root, shadow_root].into_iter().chain(root.parent()) {
        passable(d).map_err(io(d))?;
    }
    files::member_dir(&p.ws.path, p.ateam_owner, p.member_owner).map_err(io(&p.ws.path))?;
    files::member_dir(&p.shadow, p.ateam_owner, p.member_owner).map_err(io(&p.shadow))?;
    let fresh = |dir: &Path| Git::new(&dir.join(".git")).user(p.member_owner);
    let ws = p.ws.path.to_string_lossy().into_owned();
    let branch_ref = format!("refs/heads/{}", p.ws.branch);
    fresh(&p.ws.path)
        .run(&["init", "--quiet", "--template=", &ws])
        .await?;
    let member_git = Git::new(&p.member_git()).user(p.member_owner);
    member_git
        .run(&["symbolic-ref", "HEAD", &branch_ref])
        .await?;
    write_alternates(&p.member_git(), &[&p.ws.objects], p.member_owner)?;
    member_git.run(&["update-ref", &branch_ref, &base]).await?;
    Git::new(&p.shadow)
        .user(p.member_owner)
        .run(&[
            "init",
            "--quiet",
            "--bare",
            "--template=",
            &p.shadow.to_string_lossy(),
        ])
        .await?;
    write_alternates(
        &p.shadow,
        &[&p.member_git().join("objects"), &p.ws.objects],
        p.member_owner,
    )?;
    let shadow = p.shadow();
    shadow.run(&["update-ref", BASE_REF, &base]).await?;
    // The checkout through the shadow's index: it then holds every file's stat, so the first
    // snapshot hashes only what changed, and the member's index is a copy of it.
    shadow.run(&["read-tree", "--reset", "-u", &base]).await?;
    copy_index(
        &p.shadow.join("index"),
        &p.member_git().join("index"),
        p.member_owner,
    )?;
    Ok(true)
}

/// The base as a commit id of the person's repository.
async fn resolve_base(p: &Place) -> Result<String, WorkspaceError> {
    let spec = format!("{}^{{commit}}", p.ws.base);
    match Git::new(&p.ws.git_dir)
        .run(&[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &spec,
        ])
        .await
    {
        Ok(o) if !o.text().is_empty() => Ok(o.text()),
        Ok(_) | Err(GitError::Failed { .. }) => Err(WorkspaceError::NoBase {
            base: p.ws.base.clone(),
            repo: p.ws.repo.clone(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// Lets other uids pass through `dir` (0711) without reading it: a member's uid reaches its
/// own folder below.
fn passable(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o7777;
    if mode & 0o011 != 0o011 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o011))?;
    }
    Ok(())
}

fn write_alternates(git_dir: &Path, dirs: &[&Path], owner: Owner) -> Result<(), WorkspaceError> {
    let text: String = dirs.iter().map(|d| format!("{}\n", d.display())).collect();
    let path = git_dir.join("objects/info/alternates");
    files::write_atomic_in_member_dir(&path, text.as_bytes(), 0o644, owner).map_err(io(&path))
}

/// Copies an index with its modification time: git trusts an entry whose stat matches only
/// if it is older than the index file (else it is "racily clean" and hashed again), so a
/// copy made later would take a file changed in the same second, at the same size, for
/// unchanged (and `changes` would not show it).
fn copy_index(from: &Path, to: &Path, owner: Owner) -> Result<(), WorkspaceError> {
    let (bytes, stat) = files::open_regular(from)
        .and_then(|mut f| {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut v)?;
            Ok((v, rustix::fs::fstat(&f)?))
        })
        .map_err(io(from))?;
    files::write_atomic_in_member_dir(to, &bytes, 0o644, owner).map_err(io(to))?;
    let (dir, name) = (to.parent().unwrap_or(Path::new("/")), to.file_name());
    let at = rustix::fs::Timespec {
        tv_sec: stat.st_mtime,
        tv_nsec: stat.st_mtime_nsec as _,
    };
    files::Dir::open(dir)
        .and_then(|d| {
            rustix::fs::utimensat(
                d.fd(),
                name.unwrap_or_default(),
                &rustix::fs::Timestamps {
                    last_access: at,
                    last_modification: at,
                },
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(std::io::Error::from)
        })
        .map_err(io(to))
}

/// Checks that the member's repository makes git read objects from nowhere but itself and
/// the person's repository: `.git` and its `objects` real folders (no symlink), every folder
/// of `objects` a real folder, its alternates exactly ateam's. Run before every command on
/// it; while the member is stopped (a snapshot before a start) nothing can change after.
pub(crate) fn vet(p: &Place) -> Result<(), WorkspaceError> {
    let objects = p.member_git().join("objects");
    let dir = files::Dir::open(&p.ws.path)
        .and_then(|_| files::Dir::open(&p.member_git()))
        .and_then(|_| files::Dir::open(&objects))
        .map_err(|e| tampered(p, format!("its .git or .git/objects is not a folder ({e})")))?;
    let want = format!("{}\n", p.ws.objects.display());
    match dir.read_regular(Path::new("info/alternates"), 4096) {
        Ok(text) if text == want.as_bytes() => {}
        Ok(_) => {
            return Err(tampered(
                p,
                "its objects/info/alternates was changed".into(),
            ));
        }
        Err(e) => return Err(tampered(p, format!("its objects/info/alternates: {e}"))),
    }
    let mut bad = None;
    let complete = dir.walk(
        // Folders of objects and the objects in them: a member's ten thousand commits of
        // loose objects pass, a tree made to stall ateam does not.
        files::Bounds {
            depth: 2,
            entries: 500_000,
        },
        |e| {
            let depth = e.rel.components().count();
            let kind_ok = if depth == 1 {
                e.kind.is_dir()
            } else {
                e.kind.is_file()
            };
            if !kind_ok && bad.is_none() {
                bad = Some(e.rel.clone());
            }
        },
    );
    if let Some(path) = bad {
        return Err(tampered(
            p,
            format!(
                "objects/{} is not what git keeps there (a symlink, a FIFO?)",
                crate::core::untrusted::shown(&path.to_string_lossy())
            ),
        ));
    }
    if !complete {
        return Err(tampered(
            p,
            "its objects folder holds too many entries".into(),
        ));
    }
    Ok(())
}
