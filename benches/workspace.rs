//! Workspaces against their peers, side by side in one run (issue 35): making a writer's
//! workspace against `git worktree add` of the same repository, and a snapshot against `git
//! stash create` of the same changed tree. The repository: 10,000 files, and history of
//! random (incompressible) edits to 1,000 of them per commit, about 1 MB a commit.
//!
//! `cargo bench --bench workspace [-- COMMITS...]` (default 100, about 100 MB of history;
//! give several, such as `10 100`, to see whether both stay flat as history grows).

#![allow(
    clippy::unwrap_used,
    reason = "a benchmark that cannot set up fails loudly"
)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ateam::files::Owner;
use ateam::model::Workspace;
use ateam::workspace::{self, Place};

const FILES: usize = 10_000;
const RUNS: usize = 5;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@x",
            "-c",
            "safe.directory=*",
        ])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A small xorshift: the same repository every run, without a crate for it.
struct Rand(u64);
impl Rand {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n.div_ceil(8))
            .flat_map(|_| self.next().to_le_bytes())
            .take(n)
            .collect()
    }
}

/// The repository, made with `git fast-import` (seconds, not minutes).
fn make_repo(dir: &Path, commits: usize) {
    std::fs::create_dir_all(dir).expect("folder");
    git(dir, &["init", "-q", "-b", "main"]);
    let mut fi = Command::new("git")
        .current_dir(dir)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("fast-import");
    let mut w = std::io::BufWriter::new(fi.stdin.take().expect("stdin"));
    let mut r = Rand(0x5eed);
    for c in 0..commits {
        writeln!(
            w,
            "commit refs/heads/main\ncommitter b <b@x> {} +0000\ndata 3\nc{c:02}",
            1_700_000_000 + c
        )
        .unwrap();
        let files: Vec<usize> = if c == 0 {
            (0..FILES).collect()
        } else {
            (0..1000).map(|_| (r.next() as usize) % FILES).collect()
        };
        for f in files {
            let body = r.bytes(1024);
            writeln!(
                w,
                "M 644 inline src/d{:03}/f{f:05}.txt\ndata {}",
                f % 500,
                body.len()
            )
            .unwrap();
            w.write_all(&body).unwrap();
            writeln!(w).unwrap();
        }
    }
    drop(w);
    assert!(fi.wait().expect("fast-import").success());
    git(dir, &["checkout", "-q", "-f", "main"]);
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn me() -> Owner {
    Owner {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
    }
}

fn place(repo: &Path, sessions: &Path, name: &str) -> Place {
    let ws = Workspace {
        repo: repo.to_path_buf(),
        git_dir: repo.join(".git"),
        objects: repo.join(".git/objects"),
        base: "main".into(),
        branch: format!("ateam/b/{name}"),
        path: ateam::core::layout::workspace_dir(sessions, name),
    };
    Place::new("b", name, &ws, me(), me())
}

/// Changes the same ten files of a work tree (for a snapshot or a stash to record).
fn touch_ten(tree: &Path, round: usize) {
    for i in 0..10 {
        let f = tree.join(format!("src/d{:03}/f{:05}.txt", i % 500, i));
        std::fs::write(f, format!("round {round}\n")).unwrap();
    }
}

fn bench(commits: usize, rt: &tokio::runtime::Runtime) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("repo");
    let t = Instant::now();
    make_repo(&repo, commits);
    let size = git(&repo, &["count-objects", "-vH"]);
    let pack = size
        .lines()
        .find(|l| l.starts_with("size-pack"))
        .unwrap_or("")
        .to_string();
    println!(
        "history of {commits} commits, {FILES} files ({pack}), made in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let sessions = tmp.path().join("sessions");
    let (mut peer, mut ours) = (Vec::new(), Vec::new());
    for i in 0..RUNS {
        // Paired, alternating which goes first: neither gets the warmer cache each time.
        let wt = tmp.path().join(format!("wt{i}"));
        let p = place(&repo, &sessions, &format!("m{i}"));
        let mut one = |which: bool| {
            let t = Instant::now();
            if which {
                git(
                    &repo,
                    &[
                        "worktree",
                        "add",
                        "-q",
                        "-b",
                        &format!("wt{i}"),
                        wt.to_str().unwrap(),
                        "main",
                    ],
                );
                peer.push(t.elapsed());
            } else {
                rt.block_on(workspace::ensure(&p)).expect("workspace");
                ours.push(t.elapsed());
            }
        };
        one(i % 2 == 0);
        one(i % 2 != 0);
    }
    let (a, b) = (median(peer), median(ours));
    println!(
        "  workspace: git worktree add {:.0} ms, ateam {:.0} ms: {:.2}x",
        a.as_secs_f64() * 1e3,
        b.as_secs_f64() * 1e3,
        b.as_secs_f64() / a.as_secs_f64()
    );
    // Snapshots: the first workspace and the person's checkout, ten files changed in each.
    let p = place(&repo, &sessions, "m0");
    rt.block_on(workspace::snapshot(&p, "warm"))
        .expect("snapshot");
    git(&repo, &["status", "-s"]);
    let (mut peer, mut ours) = (Vec::new(), Vec::new());
    for i in 0..RUNS {
        touch_ten(&repo, i);
        touch_ten(&p.ws.path, i);
        let mut one = |which: bool| {
            let t = Instant::now();
            if which {
                git(&repo, &["stash", "create"]);
                peer.push(t.elapsed());
            } else {
                rt.block_on(workspace::snapshot(&p, "bench"))
                    .expect("snapshot");
                ours.push(t.elapsed());
            }
        };
        one(i % 2 == 0);
        one(i % 2 != 0);
    }
    let (a, b) = (median(peer), median(ours));
    println!(
        "  snapshot: git stash create {:.0} ms, ateam {:.0} ms: {:.2}x",
        a.as_secs_f64() * 1e3,
        b.as_secs_f64() * 1e3,
        b.as_secs_f64() / a.as_secs_f64()
    );
}

fn main() {
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = if counts.is_empty() { vec![100] } else { counts };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for c in counts {
        bench(c, &rt);
    }
}
