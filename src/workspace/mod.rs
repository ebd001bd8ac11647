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
pub mod git;
mod refs;

use std::path::{Path, PathBuf};

use crate::files::{self, Owner};
use crate::model;
use git::{Git, GitError};

/// Whether the repository at `git_dir` has the ref `name`, read as files (validation's
/// check of a base, with no git run).
pub fn ref_exists(git_dir: &Path, name: &str) -> bool {
    matches!(refs::read(git_dir, name), Ok(Some(_)))
}

/// Whether the repository at `git_dir` has a HEAD that names a commit (not an unborn branch).
pub fn refs_head_exists(git_dir: &Path) -> bool {
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
    /// The member.
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
pub fn vet(p: &Place) -> Result<(), WorkspaceError> {
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

/// Records the member's folder as it is: HEAD, and the work tree with untracked files (not
/// ignored ones), as a commit under the shadow's `refs/ateam/snapshots/`, HEAD its parent.
pub async fn snapshot(p: &Place, reason: &str) -> Result<Snapshot, WorkspaceError> {
    let _lock = p.lock().await?;
    take(p, reason).await
}

/// `snapshot`, with the lock held.
async fn take(p: &Place, reason: &str) -> Result<Snapshot, WorkspaceError> {
    vet(p)?;
    let head =
        refs::head(&p.member_git(), &p.ws.branch).map_err(|e| tampered(p, format!("its {e}")))?;
    let shadow = p.shadow();
    if let Some(h) = &head {
        shadow
            .run(&["cat-file", "-e", &format!("{h}^{{commit}}")])
            .await
            .map_err(|_| tampered(p, format!("its HEAD names {h}, which is no commit it has")))?;
    }
    stage_all(&shadow).await?;
    let tree = shadow.run(&["write-tree"]).await?.text();
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let message = format!(
        "{reason}\n\nateam snapshot of {}/{}; HEAD {}\n",
        p.team,
        p.member,
        head.as_deref().unwrap_or("(none)")
    );
    let mut args = vec!["commit-tree", tree.as_str(), "-m", message.as_str()];
    if let Some(h) = &head {
        args.extend(["-p", h.as_str()]);
    }
    let commit = shadow.run(&args).await?.text();
    let name = format!("{SNAPSHOTS}{}", at.as_millis());
    shadow.run(&["update-ref", &name, &commit]).await?;
    Ok(Snapshot {
        id: commit[..12.min(commit.len())].to_string(),
        commit,
        at: at.as_secs(),
        reason: reason.to_string(),
    })
}

/// `git add --all` of the member's folder into `git`'s index. For each nested repository the
/// index records (a gitlink) `add` asks `git status` inside it whether it is dirty, and that
/// git would read the nested repository's config, the member's (its filters would run): it
/// cannot start (ateam's git has no `PATH`), so such an `add` fails, and is run again with the
/// gitlinks left out (they keep the commit first recorded). A tree with none costs nothing.
async fn stage_all(git: &Git) -> Result<(), WorkspaceError> {
    let plain = git.run(&["add", "--all", "--", "."]).await;
    let Err(GitError::Failed { .. }) = plain else {
        return Ok(plain.map(|_| ())?);
    };
    let index = git
        .clone()
        .max_output(1 << 30)
        .run(&["ls-files", "--stage", "-z"])
        .await?;
    let mut spec = b".\0".to_vec();
    for entry in index.stdout.split(|b| *b == 0) {
        // `160000 <id> <stage>\t<path>`: a gitlink.
        if let Some(rest) = entry.strip_prefix(b"160000 ")
            && let Some(tab) = rest.iter().position(|b| *b == b'\t')
        {
            spec.extend_from_slice(b":(exclude,literal)");
            spec.extend_from_slice(&rest[tab + 1..]);
            spec.push(0);
        }
    }
    if spec.len() == 2 {
        return Ok(plain.map(|_| ())?);
    }
    git.run_with(
        &[
            "add",
            "--all",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
        ],
        Some(&spec),
    )
    .await?;
    Ok(())
}

/// Every snapshot, the newest first.
pub async fn snapshots(p: &Place) -> Result<Vec<Snapshot>, WorkspaceError> {
    if !p.exists() {
        return Ok(Vec::new());
    }
    let out = p
        .shadow()
        .run(&[
            "for-each-ref",
            "--sort=-refname",
            "--format=%(refname)%00%(objectname)%00%(contents:subject)",
            SNAPSHOTS,
        ])
        .await?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\0');
            let name = f.next()?;
            let commit = f.next()?.to_string();
            let reason = f.next().unwrap_or("").to_string();
            let ms: u64 = name.strip_prefix(SNAPSHOTS)?.parse().ok()?;
            Some(Snapshot {
                id: commit[..12.min(commit.len())].to_string(),
                commit,
                at: ms / 1000,
                reason,
            })
        })
        .collect())
}

/// Puts the member's folder back as snapshot `to` recorded it (the newest when `None`):
/// first a snapshot of the present (so the rollback itself can be undone), then the work
/// tree, the branch at the snapshot's HEAD, and an index of that HEAD. The member must be
/// stopped. Returns the snapshot of the present and the one restored.
pub async fn rollback(p: &Place, to: Option<&str>) -> Result<(Snapshot, Snapshot), WorkspaceError> {
    let _lock = p.lock().await?;
    let all = snapshots(p).await?;
    let target = match to {
        None => all.first().cloned(),
        Some(id) => all
            .iter()
            .find(|s| s.commit.starts_with(id) && id.len() >= 4)
            .cloned(),
    }
    .ok_or_else(|| {
        WorkspaceError::Refused(match to {
            Some(id) => format!(
                "no snapshot `{}` of {}",
                crate::core::untrusted::shown(id),
                p.member
            ),
            None => format!("{} has no snapshot yet", p.member),
        })
    })?;
    let saved = take(p, "before rollback").await?;
    let head = p
        .shadow()
        .try_run(
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{}^1", target.commit),
            ],
            None,
        )
        .await?;
    let head = head.0.then(|| head.1.text());
    restore(p, &target.commit, head.as_deref()).await?;
    Ok((saved, target))
}

/// Puts the member's folder back at its base (after a snapshot of the present).
pub async fn reset(p: &Place) -> Result<Snapshot, WorkspaceError> {
    let _lock = p.lock().await?;
    let saved = take(p, "before reset").await?;
    let base = p.base().await?;
    restore(p, &base, Some(&base)).await?;
    Ok(saved)
}

/// The work tree as `tree_ish` has it, and the branch (and HEAD) at `head`.
async fn restore(p: &Place, tree_ish: &str, head: Option<&str>) -> Result<(), WorkspaceError> {
    let shadow = p.shadow();
    // The shadow's index is the present (the snapshot just taken): files it has that the
    // target has not are removed, ignored files are left alone.
    shadow
        .run(&["read-tree", "--reset", "-u", tree_ish])
        .await?;
    let git = p.member_git();
    let branch_ref = format!("refs/heads/{}", p.ws.branch);
    if let Some(h) = head {
        refs::write(&git, &branch_ref, h, p.member_owner).map_err(io(&git))?;
        let index = p.shadow.join("index.head");
        let staged = p.shadow().index(&index);
        staged.run(&["read-tree", h]).await?;
        // Exit 1 only says some files differ from HEAD: that is the point.
        staged
            .try_run(&["update-index", "-q", "--refresh"], None)
            .await?;
        copy_index(&index, &git.join("index"), p.member_owner)?;
        let _ = std::fs::remove_file(&index);
    }
    let head_text = format!("ref: {branch_ref}\n");
    files::write_atomic_in_member_dir(
        &git.join("HEAD"),
        head_text.as_bytes(),
        0o644,
        p.member_owner,
    )
    .map_err(io(&git))
}

/// What a writer did: commits ahead of its base, files changed and not committed, the diff
/// against the base; all as git prints it, escaped for a terminal by the caller.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Changes {
    /// The member's branch.
    pub branch: String,
    /// The commit the workspace was made at.
    pub base: String,
    /// The branch's commit, `None` when the member deleted its branch.
    pub tip: Option<String>,
    /// `<id> <subject>`, newest first, at most 200.
    pub commits: Vec<String>,
    /// How many commits the branch has that the base has not.
    pub ahead: u64,
    /// How many commits of the base the branch does not have.
    pub behind: u64,
    /// `<status>\t<path>` of files that differ from the branch's commit.
    pub uncommitted: Vec<String>,
    /// Commits not yet collected into the person's repository.
    pub uncollected: u64,
    /// The diff from the base to the work tree (committed or not), when asked for.
    pub diff: Option<String>,
}

/// The member's branch's commit, checked to be a commit its objects hold.
async fn tip(p: &Place) -> Result<Option<String>, WorkspaceError> {
    let name = format!("refs/heads/{}", p.ws.branch);
    let Some(tip) =
        refs::read(&p.member_git(), &name).map_err(|e| tampered(p, format!("its branch {e}")))?
    else {
        return Ok(None);
    };
    p.shadow()
        .run(&["cat-file", "-e", &format!("{tip}^{{commit}}")])
        .await
        .map_err(|_| {
            tampered(
                p,
                format!("its branch names {tip}, which is no commit it has"),
            )
        })?;
    Ok(Some(tip))
}

/// What the writer changed (`diff`: with the whole diff, at most `max_diff` bytes).
pub async fn changes(p: &Place, diff: bool) -> Result<Changes, WorkspaceError> {
    let _lock = p.lock().await?;
    vet(p)?;
    let base = p.base().await?;
    let tip = tip(p).await?;
    let shadow = p.shadow();
    let count = |range: String| {
        let shadow = shadow.clone();
        async move {
            let out = shadow.run(&["rev-list", "--count", &range]).await?;
            Ok::<u64, WorkspaceError>(out.text().parse().unwrap_or(0))
        }
    };
    let (commits, ahead, behind, uncollected) = match &tip {
        Some(t) => {
            let log = shadow
                .run(&[
                    "log",
                    "--max-count=200",
                    "--format=%h %s",
                    &format!("{base}..{t}"),
                ])
                .await?;
            let collected = shadow
                .try_run(&["rev-parse", "--verify", "--quiet", COLLECTED_REF], None)
                .await?;
            let from = if collected.0 {
                collected.1.text()
            } else {
                base.clone()
            };
            (
                String::from_utf8_lossy(&log.stdout)
                    .lines()
                    .map(str::to_string)
                    .collect(),
                count(format!("{base}..{t}")).await?,
                count(format!("{t}..{base}")).await?,
                count(format!("{from}..{t}")).await?,
            )
        }
        None => (Vec::new(), 0, 0, 0),
    };
    // The work tree through a copy of the snapshot index: only what changed is hashed, and
    // the snapshot index is left as the last snapshot made it.
    let index = p.shadow.join("index.changes");
    copy_index(&p.shadow.join("index"), &index, p.member_owner)?;
    let look = p.shadow().index(&index);
    stage_all(&look).await?;
    let against = tip.clone().unwrap_or_else(|| base.clone());
    let files = look
        .run(&[
            "diff",
            "--cached",
            "--name-status",
            "--no-renames",
            &against,
        ])
        .await?;
    let diff = if diff {
        let out = look
            .clone()
            .max_output(16 << 20)
            .run(&[
                "diff",
                "--cached",
                "--no-ext-diff",
                "--no-textconv",
                "--stat",
                "--patch",
                &base,
            ])
            .await?;
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        None
    };
    let _ = std::fs::remove_file(&index);
    Ok(Changes {
        branch: p.ws.branch.clone(),
        base,
        tip,
        commits,
        ahead,
        behind,
        uncommitted: String::from_utf8_lossy(&files.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
        uncollected,
        diff,
    })
}

/// What `collect` brought in.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Collected {
    /// The ref of the person's repository that now names the member's work.
    pub ref_name: String,
    /// The member's commit it names.
    pub commit: String,
    /// The branch it was also brought into, with `--into`.
    pub into: Option<String>,
}

/// The ref of the person's repository a member's work is collected into.
pub fn collected_ref(team: &str, member: &str) -> String {
    format!("refs/ateam/{team}/{member}")
}

/// Brings the member's branch into the person's repository as `refs/ateam/<team>/<member>`
/// (and, with `into`, fast-forwards that branch to it): a pack made in the shadow, as the
/// member, fed to `index-pack --strict` in the person's repository, as its owner. Nothing is
/// checked out.
pub async fn collect(
    p: &Place,
    person: Owner,
    into: Option<&str>,
) -> Result<Collected, WorkspaceError> {
    let _lock = p.lock().await?;
    vet(p)?;
    let base = p.base().await?;
    let Some(tip) = tip(p).await? else {
        return Err(WorkspaceError::Refused(format!(
            "{} has no branch {} to collect",
            p.member, p.ws.branch
        )));
    };
    let repo = p.person(person);
    if let Some(b) = into {
        check_into(&repo, b, &tip).await?;
    }
    if tip != base {
        let pack = p
            .shadow()
            .max_output(1 << 30)
            .run_with(
                &["pack-objects", "--stdout", "--revs", "--thin", "--quiet"],
                Some(format!("{tip}\n^{base}\n").as_bytes()),
            )
            .await?;
        repo.run_with(
            &["index-pack", "--stdin", "--fix-thin", "--strict"],
            Some(&pack.stdout),
        )
        .await?;
    }
    let name = collected_ref(&p.team, &p.member);
    repo.run(&["update-ref", "-m", "ateam collect", &name, &tip])
        .await?;
    if let Some(b) = into {
        repo.run(&[
            "update-ref",
            "-m",
            "ateam collect",
            &format!("refs/heads/{b}"),
            &tip,
        ])
        .await?;
    }
    p.shadow().run(&["update-ref", COLLECTED_REF, &tip]).await?;
    Ok(Collected {
        ref_name: name,
        commit: tip,
        into: into.map(str::to_string),
    })
}

/// `--into BRANCH` must name a branch that is not checked out, and the member's work must
/// fast-forward it (or it is new).
async fn check_into(repo: &Git, branch: &str, tip: &str) -> Result<(), WorkspaceError> {
    let full = format!("refs/heads/{branch}");
    let (ok, _) = repo.try_run(&["check-ref-format", &full], None).await?;
    if !ok {
        return Err(WorkspaceError::Refused(format!(
            "`{branch}` is not a branch name"
        )));
    }
    let (_, head) = repo.try_run(&["symbolic-ref", "-q", "HEAD"], None).await?;
    if head.text() == full {
        return Err(WorkspaceError::Refused(format!(
            "`{branch}` is checked out in the repository; collect into another branch and merge it yourself"
        )));
    }
    let (exists, current) = repo
        .try_run(&["rev-parse", "--verify", "--quiet", &full], None)
        .await?;
    if exists {
        let (ff, _) = repo
            .try_run(&["merge-base", "--is-ancestor", &current.text(), tip], None)
            .await
            .unwrap_or((false, current));
        if !ff {
            return Err(WorkspaceError::Refused(format!(
                "`{branch}` has commits the member's branch has not: it would not be a fast-forward"
            )));
        }
    }
    Ok(())
}
