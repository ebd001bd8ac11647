//! Workspaces with real git, on the host: made, snapshotted, changed by a "member" (git run
//! as the member's uid, as it would inside its container), rolled back, collected; and what a
//! hostile member plants in its `.git` never runs for ateam. (The engines' tests run the
//! same through real members: tests/engines.rs.)

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use ateam::files::Owner;
use ateam::model::Workspace;
use ateam::workspace::{self, Place, WorkspaceError};

/// The member's uid: nobody when the tests run as root (as CI does), else the caller.
fn member_owner() -> Owner {
    if rustix::process::geteuid().is_root() {
        Owner {
            uid: 65534,
            gid: 65534,
        }
    } else {
        me()
    }
}

fn me() -> Owner {
    Owner {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
    }
}

/// git as the person, in `dir`.
fn person_git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=p",
            "-c",
            "user.email=p@x",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// git as the member would run it in its container: its uid, its own config.
fn member_git(dir: &Path, args: &[&str]) -> std::process::Output {
    let o = member_owner();
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("HOME", "/nonexistent")
        .args([
            "-c",
            "user.name=m",
            "-c",
            "user.email=m@x",
            "-c",
            "safe.directory=*",
        ])
        .args(args);
    if rustix::process::geteuid().is_root() {
        c.uid(o.uid).gid(o.gid);
    }
    c.output().unwrap()
}

fn as_member(dir: &Path, args: &[&str]) -> String {
    let out = member_git(dir, args);
    assert!(
        out.status.success(),
        "member git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A shell command as the member (to plant things in its folder).
fn member_sh(script: &str) {
    let o = member_owner();
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    if rustix::process::geteuid().is_root() {
        c.uid(o.uid).gid(o.gid);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Rig {
    _dir: tempfile::TempDir,
    root: PathBuf,
    repo: PathBuf,
    place: Place,
}

fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let repo = root.join("repo");
    std::fs::create_dir(&repo).unwrap();
    person_git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("a.py"), "print('a')\n").unwrap();
    std::fs::create_dir(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/b.py"), "def b():\n    return 1\n").unwrap();
    person_git(&repo, &["add", "-A"]);
    person_git(&repo, &["commit", "-qm", "one"]);
    let sessions = root.join("sessions");
    std::fs::create_dir(&sessions).unwrap();
    let place = Place {
        team: "t".into(),
        member: "m".into(),
        ws: Workspace {
            repo: repo.clone(),
            git_dir: repo.join(".git"),
            objects: repo.join(".git/objects"),
            base: "main".into(),
            branch: "ateam/t/m".into(),
            path: ateam::core::layout::workspace_dir(&sessions, "m"),
        },
        shadow: ateam::core::layout::workspace_shadow(&sessions, "m"),
        member_owner: member_owner(),
        ateam_owner: me(),
    };
    Rig {
        _dir: dir,
        root,
        repo,
        place,
    }
}

/// Every file of `dir` with its bytes, but `skip`.
fn tree_bytes(dir: &Path, skip: &dyn Fn(&Path) -> bool) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if skip(&rel) {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_writer_commits_on_its_branch_and_the_person_collects_it() {
    let r = rig();
    let p = &r.place;
    let before = tree_bytes(&r.repo.join(".git"), &|_| false);
    assert!(workspace::ensure(p).await.unwrap(), "made");
    let ws = &p.ws.path;
    assert_eq!(
        std::fs::read_to_string(ws.join("src/b.py")).unwrap(),
        "def b():\n    return 1\n"
    );
    // git works inside, as the member: status, branch, commit, log.
    assert_eq!(as_member(ws, &["status", "--porcelain"]), "");
    assert_eq!(as_member(ws, &["branch", "--show-current"]), "ateam/t/m");
    std::fs::write(ws.join("src/b.py"), "def b():\n    return 2\n").unwrap();
    ateam::files::Dir::open(ws).unwrap();
    rustix::fs::chown(
        ws.join("src/b.py"),
        Some(rustix::process::Uid::from_raw(p.member_owner.uid)),
        Some(rustix::process::Gid::from_raw(p.member_owner.gid)),
    )
    .unwrap();
    as_member(ws, &["commit", "-qam", "fix b"]);
    member_sh(&format!("echo new > {}/new.txt", ws.display()));
    let c = workspace::changes(p, true).await.unwrap();
    assert_eq!(c.commits.len(), 1, "{c:?}");
    assert!(c.commits[0].ends_with("fix b"), "{c:?}");
    assert_eq!(c.uncommitted, vec!["A\tnew.txt".to_string()]);
    assert_eq!(c.uncollected, 1);
    let diff = c.diff.unwrap();
    assert!(
        diff.contains("+    return 2") && diff.contains("+new"),
        "{diff}"
    );
    // The person's repository is untouched until the collect.
    assert_eq!(tree_bytes(&r.repo.join(".git"), &|_| false), before);
    let got = workspace::collect(p, me(), Some("fix-b")).await.unwrap();
    let tip = as_member(ws, &["rev-parse", "HEAD"]);
    assert_eq!(got.commit, tip);
    assert_eq!(person_git(&r.repo, &["rev-parse", "refs/ateam/t/m"]), tip);
    assert_eq!(person_git(&r.repo, &["rev-parse", "fix-b"]), tip);
    assert_eq!(
        person_git(&r.repo, &["log", "-1", "--format=%s", "fix-b"]),
        "fix b"
    );
    // Nothing else of the person's .git changed: new refs and their logs, new objects.
    let new = |rel: &Path| {
        rel.starts_with("objects")
            || rel.starts_with("refs/ateam")
            || rel.starts_with("refs/heads/fix-b")
            || rel.starts_with("logs/refs/heads/fix-b")
    };
    assert_eq!(
        tree_bytes(&r.repo.join(".git"), &new),
        before
            .into_iter()
            .filter(|(p, _)| !new(p))
            .collect::<Vec<_>>()
    );
    assert_eq!(workspace::changes(p, false).await.unwrap().uncollected, 0);
    // The person's own git reads what came back (fsck included).
    person_git(&r.repo, &["fsck", "--strict", "--no-dangling"]);
    // A second collect into a branch that moved elsewhere is refused, not forced.
    person_git(&r.repo, &["branch", "-f", "other", "main"]);
    person_git(&r.repo, &["checkout", "-q", "other"]);
    std::fs::write(r.repo.join("o.txt"), "o").unwrap();
    person_git(&r.repo, &["add", "o.txt"]);
    person_git(&r.repo, &["commit", "-qm", "other"]);
    person_git(&r.repo, &["checkout", "-q", "main"]);
    let e = workspace::collect(p, me(), Some("other"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("fast-forward"), "{e}");
    let e = workspace::collect(p, me(), Some("main")).await.unwrap_err();
    assert!(e.to_string().contains("checked out"), "{e}");
    let _ = r.root;
}

#[tokio::test]
async fn a_bad_run_is_rolled_back_and_the_rollback_undone() {
    let r = rig();
    let p = &r.place;
    workspace::ensure(p).await.unwrap();
    let ws = &p.ws.path;
    let first = workspace::snapshot(p, "before start").await.unwrap();
    // The bad run: deletes files and commits, leaves junk.
    as_member(ws, &["rm", "-q", "-r", "src"]);
    as_member(ws, &["commit", "-qm", "delete everything"]);
    member_sh(&format!("echo junk > {}/junk.txt", ws.display()));
    let (saved, restored) = workspace::rollback(p, Some(&first.id)).await.unwrap();
    assert_eq!(restored.commit, first.commit);
    assert_eq!(
        std::fs::read_to_string(ws.join("src/b.py")).unwrap(),
        "def b():\n    return 1\n"
    );
    assert!(
        !ws.join("junk.txt").exists(),
        "the bad run's files are gone"
    );
    assert_eq!(
        as_member(ws, &["log", "-1", "--format=%s"]),
        "one",
        "the branch is back"
    );
    assert_eq!(
        as_member(ws, &["status", "--porcelain"]),
        "",
        "index and tree agree"
    );
    // And undone: back to what the bad run left.
    workspace::rollback(p, Some(&saved.id)).await.unwrap();
    assert!(!ws.join("src").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("junk.txt")).unwrap(),
        "junk\n"
    );
    assert_eq!(
        as_member(ws, &["log", "-1", "--format=%s"]),
        "delete everything"
    );
    let all = workspace::snapshots(p).await.unwrap();
    assert!(all.len() >= 3, "{all:?}");
    assert!(all.iter().any(|s| s.reason == "before rollback"));
    // Reset: the base again.
    workspace::reset(p).await.unwrap();
    assert!(ws.join("src/b.py").exists() && !ws.join("junk.txt").exists());
}

/// Where a planted command leaves its mark: writable by the member's uid too, so that a
/// command run as the member would leave it.
fn marks(r: &Rig) -> PathBuf {
    let marks = r.root.join("marks");
    std::fs::create_dir(&marks).unwrap();
    std::fs::set_permissions(&marks, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    marks
}

/// Whether the marker a planted command would write exists.
fn ran(marker: &Path) -> bool {
    marker.exists()
}

#[tokio::test]
async fn nothing_a_member_plants_in_its_git_runs_for_ateam() {
    let r = rig();
    let p = &r.place;
    workspace::ensure(p).await.unwrap();
    let ws = &p.ws.path;
    let marker = marks(&r).join("pwned");
    let cmd = format!("touch {}", marker.display());
    member_sh(&format!("echo c > {}/c.txt", ws.display()));
    as_member(ws, &["add", "c.txt"]);
    as_member(ws, &["commit", "-qm", "a commit to collect"]);
    // Hooks of every kind, hooksPath, fsmonitor, filters, textconv, diff drivers, a pager,
    // an external diff, sshCommand, alternateRefsCommand.
    let git = ws.join(".git");
    member_sh(&format!(
        "set -e; mkdir -p {g}/hooks {w}/myhooks
for h in pre-commit post-commit reference-transaction post-checkout pre-auto-gc post-index-change; do
  printf '#!/bin/sh\\n{cmd}\\n' > {g}/hooks/$h; chmod +x {g}/hooks/$h
  printf '#!/bin/sh\\n{cmd}\\n' > {w}/myhooks/$h; chmod +x {w}/myhooks/$h
done
cat >> {g}/config <<EOF
[core]
  hooksPath = {w}/myhooks
  fsmonitor = {w}/myhooks/pre-commit
  pager = {cmd}
  sshCommand = {cmd}
  alternateRefsCommand = {cmd}
[filter \"x\"]
  clean = {cmd}
  smudge = {cmd}
  process = {cmd}
  required
[diff \"x\"]
  textconv = {cmd}
  command = {cmd}
[diff]
  external = {cmd}
EOF
printf '* filter=x diff=x\\n' > {w}/.gitattributes
echo changed > {w}/a.py",
        g = git.display(),
        w = ws.display(),
    ));
    workspace::snapshot(p, "before start").await.unwrap();
    workspace::changes(p, true).await.unwrap();
    let s = workspace::snapshot(p, "again").await.unwrap();
    workspace::rollback(p, Some(&s.id)).await.unwrap();
    workspace::collect(p, me(), None).await.unwrap();
    assert!(!ran(&marker), "a member's git config or hook ran for ateam");
    // The control: what was planted is live for git run in the member's own repository.
    member_git(ws, &["diff", "HEAD~1"]);
    assert!(
        ran(&marker),
        "the planted config did not run even for the member's own git"
    );
}

#[tokio::test]
async fn a_tampered_git_is_refused_not_followed() {
    let r = rig();
    let p = &r.place;
    workspace::ensure(p).await.unwrap();
    let ws = &p.ws.path;
    let other = r.root.join("other");
    std::fs::create_dir(&other).unwrap();
    person_git(&other, &["init", "-q"]);
    // Alternates pointing at another repository.
    let alt = ws.join(".git/objects/info/alternates");
    let kept = std::fs::read(&alt).unwrap();
    member_sh(&format!(
        "echo {}/.git/objects >> {}",
        other.display(),
        alt.display()
    ));
    let e = workspace::changes(p, false).await.unwrap_err();
    assert!(matches!(e, WorkspaceError::Tampered { .. }), "{e}");
    std::fs::write(&alt, kept).unwrap();
    // An objects folder that is a symlink, a FIFO among them.
    member_sh(&format!(
        "cd {}/.git/objects && ln -s {}/.git/objects/info zz",
        ws.display(),
        other.display()
    ));
    let e = workspace::snapshot(p, "x").await.unwrap_err();
    assert!(e.to_string().contains("objects/zz"), "{e}");
    member_sh(&format!(
        "rm {}/.git/objects/zz && mkfifo {}/.git/objects/pack/p.pack",
        ws.display(),
        ws.display()
    ));
    let e = workspace::collect(p, me(), None).await.unwrap_err();
    assert!(e.to_string().contains("pack/p.pack"), "{e}");
    member_sh(&format!("rm {}/.git/objects/pack/p.pack", ws.display()));
    // A .git replaced by a symlink to the person's.
    member_sh(&format!(
        "mv {w}/.git {w}/.git.old && ln -s {} {w}/.git",
        r.repo.join(".git").display(),
        w = ws.display()
    ));
    let e = workspace::snapshot(p, "x").await.unwrap_err();
    assert!(matches!(e, WorkspaceError::Tampered { .. }), "{e}");
    // A branch that names a control-character ref or no id at all.
    member_sh(&format!(
        "rm {w}/.git && mv {w}/.git.old {w}/.git && printf 'ref: \\033]0;x\\n' > {w}/.git/refs/heads/ateam/t/m",
        w = ws.display()
    ));
    let e = workspace::changes(p, false).await.unwrap_err();
    assert!(!e.to_string().contains('\u{1b}'), "{e:?}");
}

/// A repository the member makes inside its work tree: `git add` asks a nested repository it
/// has recorded whether it is dirty by running `git status` in it, which reads that
/// repository's own config (the member's) and runs its clean filter on a file whose stat
/// changed. Nothing of it may run for ateam's snapshot or `changes`.
#[tokio::test]
async fn a_repository_nested_in_the_work_tree_runs_nothing_for_ateam() {
    let r = rig();
    let p = &r.place;
    workspace::ensure(p).await.unwrap();
    let ws = &p.ws.path;
    let marker = marks(&r).join("nested");
    let cmd = format!("touch {}; cat", marker.display());
    let nested = ws.join("vendor/lib");
    member_sh(&format!("mkdir -p {}", nested.display()));
    as_member(&nested, &["init", "-q"]);
    member_sh(&format!(
        "cd {n} && echo same > f && printf '* filter=x\\n' > .gitattributes",
        n = nested.display()
    ));
    as_member(&nested, &["add", "f", ".gitattributes"]);
    as_member(&nested, &["commit", "-qm", "nested"]);
    member_sh(&format!(
        "cd {n} && git config filter.x.clean '{cmd}' && git config core.fsmonitor '{cmd}' && touch -d 2001-01-01 f",
        n = nested.display()
    ));
    assert!(!ran(&marker));
    // The first snapshot records the nested repository; the next commands meet it recorded.
    workspace::snapshot(p, "before start").await.unwrap();
    workspace::changes(p, true).await.unwrap();
    workspace::snapshot(p, "again").await.unwrap();
    assert!(
        !ran(&marker),
        "the nested repository's clean filter ran for ateam"
    );
    // The control: the member's own git there runs it.
    member_git(&nested, &["status", "--porcelain"]);
    assert!(ran(&marker), "the planted filter is not live");
}

/// FIFOs where git opens a file of the work tree (a `.gitignore`, a `.gitattributes`, a
/// nested repository's HEAD): git would wait there for a writer until its bound (120 s);
/// it is stopped at once instead, and says why.
#[tokio::test]
async fn a_fifo_where_git_reads_a_file_stops_it_at_once() {
    let r = rig();
    let p = &r.place;
    workspace::ensure(p).await.unwrap();
    let ws = &p.ws.path;
    for (plant, undo) in [
        ("mkdir -p d/e && mkfifo d/e/.gitignore", "rm -r d"),
        (
            "echo x > new.txt && mkfifo .gitattributes",
            "rm .gitattributes new.txt",
        ),
        (
            "mkdir -p n && git init -q n && rm n/.git/HEAD && mkfifo n/.git/HEAD",
            "rm -rf n",
        ),
    ] {
        member_sh(&format!("cd {} && {plant}", ws.display()));
        let started = std::time::Instant::now();
        let e = workspace::changes(p, true).await.unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{plant}: {e}");
        let e = workspace::snapshot(p, "x").await.unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{plant}: {e}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{plant}: {:?}",
            started.elapsed()
        );
        member_sh(&format!("cd {} && {undo}", ws.display()));
    }
    workspace::snapshot(p, "after").await.unwrap();
}

/// A commit the member crafted that git would refuse to check out (a `.GIT/hooks` folder in
/// its tree): `collect` refuses it (`index-pack --strict`), and the person's repository gets
/// no ref of it.
#[tokio::test]
async fn a_crafted_commit_is_never_collected() {
    let r = rig();
    let p = &r.place;
    workspace::ensure(p).await.unwrap();
    let ws = &p.ws.path;
    member_sh(&format!(
        "cd {} && g='git -c safe.directory=*' && blob=$(echo evil | $g hash-object -w --stdin) &&
hooks=$(printf '100755 blob %s\\tpost-checkout\\n' $blob | $g mktree) &&
dot=$(printf '040000 tree %s\\thooks\\n' $hooks | $g mktree) &&
root=$(printf '040000 tree %s\\t.GIT\\n' $dot | $g mktree) &&
c=$($g -c user.name=m -c user.email=m@x commit-tree -p HEAD -m evil $root) &&
$g update-ref refs/heads/ateam/t/m $c",
        ws.display()
    ));
    let e = workspace::collect(p, me(), None).await.unwrap_err();
    assert!(e.to_string().contains("hasDotgit"), "{e}");
    let refs = person_git(&r.repo, &["for-each-ref", "refs/ateam"]);
    assert_eq!(refs, "", "a ref of the crafted commit");
}

/// A file the member changes in the second ateam checked it out, at the same size: git
/// hashes it again only because the index is not older than it, so the copy of the index
/// `changes` works on must keep the index's time, or the change is not shown.
#[tokio::test]
async fn a_change_in_the_second_of_the_checkout_is_shown() {
    let r = rig();
    let p = &r.place;
    // At the start of a second: the checkout and the change fall in the same one.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    std::thread::sleep(std::time::Duration::from_nanos(
        1_000_000_000 - u64::from(now.subsec_nanos()) + 5_000_000,
    ));
    workspace::ensure(p).await.unwrap();
    let b = p.ws.path.join("src/b.py");
    member_sh(&format!(
        "printf 'def b():\\n    return 3\\n' > {}",
        b.display()
    ));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let c = workspace::changes(p, false).await.unwrap();
    assert_eq!(c.uncommitted, vec!["M\tsrc/b.py".to_string()]);
}

/// Copy snapshots of a plain write grant: taken as the member left it (a link kept as a link,
/// never followed; a FIFO left out, never opened), over the bound refused, restored after a
/// copy of the present, and that restore undone.
#[test]
fn a_plain_write_grant_is_copied_bounded_and_restored() {
    use ateam::workspace::copy::{self, CopyPlace};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let grant = root.join("notes");
    std::fs::create_dir(&grant).unwrap();
    rustix::fs::chown(
        &grant,
        Some(rustix::process::Uid::from_raw(member_owner().uid)),
        Some(rustix::process::Gid::from_raw(member_owner().gid)),
    )
    .unwrap();
    let g = grant.display().to_string();
    member_sh(&format!(
        "cd {g} && mkdir -p a/b && echo one > a/b/one.txt && printf '#!/bin/sh\\n' > run.sh && chmod 755 run.sh \
         && ln -s /etc/shadow secret && mkfifo pipe"
    ));
    let p = CopyPlace {
        member: "m".into(),
        folders: vec![grant.clone()],
        store: root.join("sessions/snapshots/m"),
        max_bytes: 1 << 20,
        bound: "snapshotWrites",
        member_owner: member_owner(),
        ateam_owner: me(),
    };
    let first = copy::take(&p, "before start").unwrap();
    let kept = p.store.join(&first.id).join("0");
    assert_eq!(
        std::fs::read_to_string(kept.join("a/b/one.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_link(kept.join("secret")).unwrap(),
        Path::new("/etc/shadow")
    );
    assert!(!kept.join("pipe").exists(), "a FIFO is left out");
    // The bad run: files deleted, one changed, one added.
    member_sh(&format!(
        "cd {g} && rm -r a && echo bad > run.sh && echo junk > junk.txt"
    ));
    let (saved, restored) = copy::restore(&p, None).unwrap();
    assert_eq!(restored.id, first.id);
    assert_eq!(
        std::fs::read_to_string(grant.join("a/b/one.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(grant.join("run.sh")).unwrap(),
        "#!/bin/sh\n"
    );
    let mode = std::fs::metadata(grant.join("run.sh")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o755
    );
    assert!(!grant.join("junk.txt").exists());
    let owner =
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(grant.join("a/b/one.txt")).unwrap());
    assert_eq!(owner, member_owner().uid, "restored files are the member's");
    // Undone: the bad run's state again.
    copy::restore(&p, Some(&saved.id)).unwrap();
    assert_eq!(
        std::fs::read_to_string(grant.join("junk.txt")).unwrap(),
        "junk\n"
    );
    assert!(!grant.join("a").exists());
    // Over the bound: refused, and nothing half-made is kept.
    member_sh(&format!("head -c 2000000 /dev/zero > {g}/big"));
    let before = copy::list(&p).len();
    let e = copy::take(&p, "before start").unwrap_err();
    assert!(e.to_string().contains("snapshotWrites"), "{e}");
    assert_eq!(copy::list(&p).len(), before);
}
