//! Attacks on a writer's workspace from inside the member (docs/workspaces.md): the member
//! owns its repository, `.git` included, so it plants config, hooks, nested repositories,
//! symlinks, FIFOs and hostile names there; then the person runs ateam's commands on it
//! (`changes`, `collect`, `snapshots`, `rollback`, a restart, which snapshots), and the test
//! judges from outside. Every ateam command is bounded (a hang fails the test). Run on Docker,
//! rootful Podman and rootless Podman (ateam as the unprivileged user) by scripts/test.sh;
//! ignored by a plain `cargo test`. ATEAM_TEST_BIN picks the binary.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[macro_use]
mod common;
use common::{Engine, rootless_user, text};

/// The longest any one ateam command may take here: every refusal must be prompt.
const BOUND: Duration = Duration::from_secs(60);

/// The common world (`common::World`: engine, folder, team, `ateam`, teardown) and what is
/// this crate's own.
struct World(common::World);

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.0
    }
}

impl World {
    /// A person's repository `repo` (README, src/b.py on main), owned by the person, a
    /// world-writable `marks` folder outside every mount, and the team of `members` (name,
    /// script; `@MARKS@` and `@ROOT@` in a script name those folders).
    fn new(engine: Engine, tag: &str, members: &[(&str, &str)]) -> World {
        let w = World(common::World::new(engine, "ws", &format!("{tag}-")));
        let repo = w.repo();
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::write(repo.join("README"), "the project\n").unwrap();
        std::fs::write(repo.join("src/b.py"), "def b():\n    return 1\n").unwrap();
        git_in(&repo, &["init", "-q", "-b", "main"]);
        git_in(&repo, &["add", "-A"]);
        git_in(&repo, &["commit", "-qm", "first"]);
        w.dirs(&["state", "sessions", "marks"]);
        let mut yaml = format!(
            "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {}}}
spec: {{image: ateam-clients:latest, sessionDir: ./sessions, allowUnenforcedLimits: true}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{cwd: ./repo, command: [sleep, \"100000\"]}}
",
            w.team
        );
        for (name, script) in members {
            let script = script
                .replace("@MARKS@", &w.marks().to_string_lossy())
                .replace("@ROOT@", &w.root().to_string_lossy());
            yaml.push_str(&member(name, &script));
        }
        let yaml = if common::gvisor() {
            common::with_gvisor(&yaml)
        } else {
            yaml.to_string()
        };
        std::fs::write(w.manifest(), yaml).unwrap();
        chown_tree(&w.root(), w.person());
        std::fs::set_permissions(w.marks(), std::fs::Permissions::from_mode(0o777)).unwrap();
        w
    }

    fn repo(&self) -> PathBuf {
        self.root().join("repo")
    }

    fn marks(&self) -> PathBuf {
        self.root().join("marks")
    }

    fn manifest(&self) -> PathBuf {
        self.root().join("team.yaml")
    }

    /// The member's workspace on the host.
    fn ws(&self, member: &str) -> PathBuf {
        self.root().join("sessions/workspaces").join(member)
    }

    fn transcript_dir(&self, member: &str) -> PathBuf {
        self.root().join("sessions/members").join(member)
    }

    /// Who owns the checkout and whom members run as: uid 1000 where root runs ateam (the
    /// Team folder's owner), the unprivileged user on rootless Podman.
    fn person(&self) -> (u32, u32) {
        match self.engine {
            Engine::Rootless => {
                let (_, uid, gid) = rootless_user();
                (uid, gid)
            }
            _ => (1000, 1000),
        }
    }

    /// An ateam command, which must end within `BOUND`.
    fn ateam(&self, args: &[&str]) -> Output {
        let mut c = common::ateam_command(self.engine, &self.root().join("state"));
        c.args(args).current_dir(self.root());
        bounded(c, &format!("{:?}: ateam {args:?}", self.engine))
    }

    fn ateam_ok(&self, args: &[&str]) -> String {
        let out = self.ateam(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{:?}: ateam {args:?}:\n{}\n{}",
            self.engine,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// An ateam command that must be refused, saying `words`, with no terminal control in
    /// what it says.
    fn refused(&self, args: &[&str], words: &str) {
        let out = self.ateam(args);
        let said = text(&out.stderr);
        assert!(
            !out.status.success() && said.contains(words),
            "{:?}: ateam {args:?} was not refused with {words:?}: exit {:?}\n{}\n{said}",
            self.engine,
            out.status.code(),
            text(&out.stdout)
        );
        assert_plain(&said, &format!("ateam {args:?}"));
    }

    fn apply(&self) -> Output {
        self.ateam(&["apply", "-f", self.manifest().to_str().unwrap()])
    }

    fn apply_ok(&self) {
        let manifest = self.manifest();
        self.ateam_ok(&["apply", "-f", manifest.to_str().unwrap()]);
    }

    /// A shell command inside the member, as the member; it must succeed.
    fn inside(&self, member: &str, script: &str) -> String {
        let script = format!("cd \"$ATEAM_WORKSPACE\" && {script}");
        self.ateam_ok(&[
            "exec", member, "--team", &self.team, "--", "sh", "-c", &script,
        ])
    }

    /// Until the member's command has started `n` times and waits.
    fn wait_starts(&self, member: &str, n: u32) {
        let file = self.transcript_dir(member).join("starts");
        let ok = common::eventually(Duration::from_secs(30), || {
            std::fs::read_to_string(&file).is_ok_and(|s| s.trim() == n.to_string())
        });
        assert!(
            ok,
            "{:?}: {member} never started {n} times: {:?}",
            self.engine,
            std::fs::read_to_string(&file)
        );
    }

    /// The member's state as `status` shows it.
    fn state(&self, member: &str) -> String {
        let out = self.ateam_ok(&["status", &self.team, "-o", "json"]);
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
        doc["teams"][0]["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["name"] == member)
            .map(|m| m["state"].as_str().unwrap_or("").to_string())
            .collect::<Vec<_>>()
            .join("+")
    }

    /// Makes the member's command exit 3 (its `stop` file), and waits until it has.
    fn make_exit(&self, member: &str) {
        let stop = self.transcript_dir(member).join("stop");
        std::fs::write(&stop, "").unwrap();
        let ok = common::eventually(Duration::from_secs(30), || self.state(member) == "exited 3");
        assert!(ok, "{:?}: {member}: {}", self.engine, self.state(member));
    }

    /// The events of the team as `events -o json` gives them.
    fn events(&self) -> Vec<serde_json::Value> {
        let out = self.ateam_ok(&["events", &self.team, "-o", "json"]);
        serde_json::from_str(&out).unwrap()
    }

    /// Every file the planted commands left in `marks`.
    fn marked(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.marks())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// git on the host as the person (or the member: on the host they are one uid), with
    /// only the repository's own config, in `dir`.
    fn host_git(&self, dir: &Path, args: &[&str]) -> Output {
        let (uid, gid) = self.person();
        let mut c = Command::new("git");
        c.current_dir(dir)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", "/nonexistent")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(args)
            .uid(uid)
            .gid(gid);
        bounded(c, &format!("host git {args:?}"))
    }
}

/// A writer with a workspace of `./repo`, restarted when it fails, running `script` (a
/// shell script, in its workspace).
fn member(name: &str, script: &str) -> String {
    let body: String = script.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        "---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: {name}}}
spec:
  parent: lead
  workspace: {{repo: ./repo}}
  restart: OnFailure
  command:
    - sh
    - -c
    - |
{body}"
    )
}

/// The end of every member's script: counts its starts, then waits for its `stop` file and
/// exits 3 (a failure, so the next apply starts it again, after a snapshot).
const WAIT: &str = r#"d=$ATEAM_SESSION_DIR
echo $(( $(cat $d/starts 2>/dev/null || echo 0) + 1 )) > $d/starts
while [ ! -e $d/stop ]; do sleep 0.2; done
rm -f $d/stop
exit 3
"#;

/// Runs `c` (its own process group), killed and failed if it takes longer than `BOUND`.
fn bounded(mut c: Command, what: &str) -> Output {
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = c.spawn().unwrap();
    let pump = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = pump(Box::new(child.stdout.take().unwrap()));
    let err = pump(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + BOUND;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let pgid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            let _ = child.wait();
            panic!("{what} took longer than {BOUND:?}: it hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// git as root in a folder of the test's (the person's repository, before it is handed over).
fn git_in(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=p",
            "-c",
            "user.email=p@x",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    text(&out.stdout).trim().to_string()
}

fn chown_tree(p: &Path, (uid, gid): (u32, u32)) {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).unwrap();
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path(), (uid, gid));
        }
    }
}

/// Whether `c` could steer a terminal: a control character but a line end or a tab, a
/// bidirectional override or isolate, a line or paragraph separator.
fn steers(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}' | '\u{FEFF}')
}

fn assert_plain(said: &str, what: &str) {
    if let Some(c) = said.chars().find(|c| steers(*c)) {
        panic!("{what} printed {c:?} raw:\n{said:?}");
    }
}

// ---------------------------------------------------- what the member plants never runs

/// alice's first start: commits files with hostile names and subject (and names a branch of
/// its own so, which ateam never lists), makes a nested repository with a clean filter, then
/// plants every hook and every config that runs a command, and `.gitattributes` that select
/// its drivers. Each planted command would leave
/// its own file in `marks` (on the host; inside the container there is no such folder).
const PLANTER: &str = r#"d=$ATEAM_SESSION_DIR
M=@MARKS@
if [ ! -e $d/planted ]; then
  set -e
  g="git -c user.name=alice -c user.email=a@x"
  printf 'title \033]0;owned\007 \342\200\256gpj.exe \302\233 31m\n' > "$(printf 'esc\033]0;x\007name')"
  printf 'bidi\n' > "$(printf 'b\342\200\256di\342\201\246.txt')"
  printf 'cr\n' > "$(printf 'tab\there\rcr')"
  $g add -A
  $g commit -qm "$(printf 'subject \033[2J\033]0;pwned\007 \342\200\256 \302\233 \342\200\250 line')"
  git rev-parse HEAD > "$(printf '.git/refs/heads/x\033]0;y\007\342\200\256')"
  mkdir -p vendor/lib
  (cd vendor/lib && git init -q && echo same > f && printf '* filter=x\n' > .gitattributes &&
    $g add f .gitattributes && $g commit -qm nested &&
    git config filter.x.clean "touch $M/nested-clean; cat" && touch -d 2001-01-01 f)
  mkdir -p .git/hooks .git/info myhooks
  for h in pre-commit post-commit reference-transaction post-checkout pre-auto-gc post-index-change pre-push fsmonitor askpass; do
    printf '#!/bin/sh\ntouch %s/hook-%s\n' "$M" "$h" > .git/hooks/$h
    printf '#!/bin/sh\ntouch %s/hookspath-%s\n' "$M" "$h" > myhooks/$h
    chmod +x .git/hooks/$h myhooks/$h
  done
  git config core.hooksPath "$PWD/myhooks"
  git config core.fsmonitor "$PWD/myhooks/fsmonitor"
  git config core.askPass "$PWD/myhooks/askpass"
  git config core.pager "touch $M/pager; cat"
  git config core.sshCommand "touch $M/ssh-command; false"
  git config core.alternateRefsCommand "touch $M/alternate-refs"
  git config credential.helper "!touch $M/credential-helper"
  git config uploadpack.packObjectsHook "touch $M/pack-objects-hook"
  git config filter.x.clean "touch $M/clean; cat"
  git config filter.x.smudge "touch $M/smudge; cat"
  git config diff.x.textconv "touch $M/textconv; cat"
  git config diff.x.command "touch $M/diff-command; true"
  git config diff.external "touch $M/diff-external; true"
  printf '* filter=x diff=x\n' > .gitattributes
  printf '* filter=x diff=x\n' > .git/info/attributes
  echo changed >> README
  touch $d/planted
  set +e
fi
"#;

/// Everything alice planted (config, hooks, attributes, a nested repository's filter) runs
/// for none of ateam's commands: `changes --diff` and `--json`, `snapshots`, `collect`, the
/// snapshot of a restart, `changes` again with the nested repository recorded, `rollback`
/// and its undoing, the start after it. As the control, git run the member's way on the
/// host (the member's uid, the repository's own config) runs what was planted. And
/// everything alice named (files, a subject) comes back escaped.
fn planted_config_hooks_and_nested_repositories_never_run_for_ateam(engine: Engine) {
    let script = format!("{PLANTER}{WAIT}");
    let w = World::new(engine, "plant", &[("alice", &script)]);
    w.apply_ok();
    w.wait_starts("alice", 1);
    assert!(w.transcript_dir("alice").join("planted").exists());
    let changes = w.ateam(&["changes", "alice", "--diff"]);
    assert!(changes.status.success(), "{}", text(&changes.stderr));
    let shown = format!("{}{}", text(&changes.stdout), text(&changes.stderr));
    assert_plain(&shown, "changes --diff");
    for escaped in ["\\u{1b}]0;pwned\\u{7}", "\\u{202e}", "\\u{9b}", "\\u{2028}"] {
        assert!(
            shown.contains(escaped),
            "{engine:?}: no {escaped}:\n{shown}"
        );
    }
    let json = w.ateam_ok(&["changes", "alice", "--json"]);
    assert_plain(&json, "changes --json");
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    // Escaped as the text is: no bidi override, line separator or C1 control even decoded.
    let subject = doc["commits"][0].as_str().unwrap();
    assert!(subject.contains("\\u{1b}]0;pwned"), "{engine:?}: {doc}");
    assert_plain(&doc.to_string(), "changes --json, decoded");
    let snaps = w.ateam_ok(&["snapshots", "alice"]);
    assert!(snaps.contains("before start"), "{snaps}");
    w.ateam_ok(&["collect", "alice", "--into", "from-alice"]);
    assert_eq!(
        git_in(&w.repo(), &["log", "-1", "--format=%s", "from-alice"]),
        "subject \u{1b}[2J\u{1b}]0;pwned\u{7} \u{202e} \u{9b} \u{2028} line"
    );
    // A restart: its snapshot records the nested repository, which the next `changes` meets.
    w.make_exit("alice");
    w.apply_ok();
    w.wait_starts("alice", 2);
    let again = w.ateam_ok(&["changes", "alice", "--diff"]);
    assert_plain(&again, "changes --diff");
    let rolled = w.ateam_ok(&["rollback", "alice"]);
    let saved = rolled
        .split("what was there is snapshot ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("{rolled}"));
    w.ateam_ok(&["rollback", "alice", "--to", saved]);
    w.apply_ok();
    w.wait_starts("alice", 3);
    assert_eq!(
        w.marked(),
        Vec::<String>::new(),
        "{engine:?}: what the member planted ran for ateam"
    );
    // The control: the member's way (its uid, its repository's config), on the host.
    let ws = w.ws("alice");
    w.host_git(&ws, &["status", "--porcelain"]);
    w.host_git(&ws, &["diff"]);
    w.host_git(&ws, &["ls-remote", "ssh://127.0.0.1/nowhere"]);
    w.host_git(&ws.join("vendor/lib"), &["status", "--porcelain"]);
    let marked = w.marked();
    for m in [
        "hookspath-fsmonitor",
        "diff-",
        "ssh-command",
        "nested-clean",
    ] {
        assert!(
            marked.iter().any(|x| x.starts_with(m)),
            "{engine:?}: the planted {m} is not live even for the member's own git: {marked:?}"
        );
    }
}

// ------------------------------------------- a tampered .git is refused, never followed

/// bob's first start breaks its `.git` (its objects a symlink); when it then fails, the next
/// start must be held until the person undoes it.
const BREAKER: &str = r#"if [ ! -e $ATEAM_SESSION_DIR/broke ]; then
  touch $ATEAM_SESSION_DIR/broke
  mv .git/objects .git/objects.real && ln -s objects.real .git/objects
fi
"#;

/// alice, running, swaps parts of its `.git` for symlinks to the person's `.git` and to bob's,
/// points its alternates elsewhere, and puts FIFOs where git or ateam would read: each time
/// `changes` and `collect` are refused promptly, saying what was found. Its HEAD a FIFO:
/// `rollback` is refused, and so is the next start. bob broke its own `.git` and failed: its
/// restart is held. The person undoes both on the host, and the next apply starts both.
fn a_tampered_git_is_refused_and_a_failed_snapshot_holds_the_start(engine: Engine) {
    let bob_script = format!("{BREAKER}{WAIT}");
    let w = World::new(engine, "tamper", &[("alice", WAIT), ("bob", &bob_script)]);
    w.apply_ok();
    w.wait_starts("alice", 1);
    w.wait_starts("bob", 1);
    let repo_git = w.repo().join(".git");
    let bob_git = w.ws("bob").join(".git");
    let branch = format!("refs/heads/ateam/{}/alice", w.team);
    // What alice plants, how it undoes it, what ateam says; `changes` refuses each, and
    // `collect` each in `.git` (collect reads no work tree).
    let mut tampers: Vec<(String, String, &str)> = vec![
        (
            format!("mv .git .git.real && ln -s {} .git", repo_git.display()),
            "rm .git && mv .git.real .git".into(),
            "its .git or .git/objects is not a folder",
        ),
        (
            format!("mv .git .git.real && ln -s {} .git", bob_git.display()),
            "rm .git && mv .git.real .git".into(),
            "its .git or .git/objects is not a folder",
        ),
        (
            format!(
                "mv .git/objects .git/objects.real && ln -s {}/objects .git/objects",
                repo_git.display()
            ),
            "rm .git/objects && mv .git/objects.real .git/objects".into(),
            "its .git or .git/objects is not a folder",
        ),
        (
            format!(
                "mv .git/objects/pack .git/pack.real && ln -s {}/objects.real/pack .git/objects/pack",
                bob_git.display()
            ),
            "rm .git/objects/pack && mv .git/pack.real .git/objects/pack".into(),
            "objects/pack is not what git keeps there",
        ),
        (
            format!(
                "cp .git/objects/info/alternates $ATEAM_SESSION_DIR/alt && echo {}/objects.real >> .git/objects/info/alternates",
                bob_git.display()
            ),
            "cp $ATEAM_SESSION_DIR/alt .git/objects/info/alternates".into(),
            "its objects/info/alternates was changed",
        ),
        (
            format!(
                "cp .git/objects/info/alternates $ATEAM_SESSION_DIR/alt && echo {} > .git/objects/info/alternates",
                w.repo().display()
            ),
            "cp $ATEAM_SESSION_DIR/alt .git/objects/info/alternates".into(),
            "its objects/info/alternates was changed",
        ),
        (
            "mv .git/objects/info/alternates $ATEAM_SESSION_DIR/alt && mkfifo .git/objects/info/alternates"
                .into(),
            "rm .git/objects/info/alternates && mv $ATEAM_SESSION_DIR/alt .git/objects/info/alternates".into(),
            "its objects/info/alternates: not a regular file",
        ),
        (
            "mkdir -p .git/objects/ab && mkfifo .git/objects/ab/cdef".into(),
            "rm -r .git/objects/ab".into(),
            "objects/ab/cdef is not what git keeps there",
        ),
        (
            "mkfifo .git/objects/pack/pack-x.pack".into(),
            "rm .git/objects/pack/pack-x.pack".into(),
            "objects/pack/pack-x.pack is not what git keeps there",
        ),
        (
            format!(
                "mv .git/refs/heads/ateam .git/ateam.real && ln -s {}/refs/heads .git/refs/heads/ateam",
                repo_git.display()
            ),
            "rm .git/refs/heads/ateam && mv .git/ateam.real .git/refs/heads/ateam".into(),
            "its branch",
        ),
        (
            format!("mv .git/{branch} $ATEAM_SESSION_DIR/ref && mkfifo .git/{branch}"),
            format!("rm .git/{branch} && mv $ATEAM_SESSION_DIR/ref .git/{branch}"),
            "its branch",
        ),
    ];
    let in_git = tampers.len();
    // FIFOs where git opens a file of the work tree: it would wait for a writer.
    for (plant, undo) in [
        ("mkdir -p d/e && mkfifo d/e/.gitignore", "rm -r d"),
        (
            "mkdir -p n && git init -q n && rm n/.git/HEAD && mkfifo n/.git/HEAD",
            "rm -rf n",
        ),
    ] {
        tampers.push((plant.into(), undo.into(), "it waited to open a FIFO"));
    }
    for (i, (plant, undo, words)) in tampers.iter().enumerate() {
        w.inside("alice", plant);
        w.refused(&["changes", "alice", "--diff"], words);
        if i < in_git {
            w.refused(&["collect", "alice"], words);
        }
        w.inside("alice", undo);
    }
    // Undone, all works again.
    w.ateam_ok(&["changes", "alice"]);
    // HEAD a FIFO: rollback (which stops alice first) reads it, and refuses.
    w.inside("alice", "rm .git/HEAD && mkfifo .git/HEAD");
    w.refused(&["rollback", "alice"], "its HEAD");
    // Both starts held: bob's and alice's snapshots fail; status and events say why.
    w.make_exit("bob");
    let out = w.apply();
    let said = text(&out.stderr);
    assert!(!out.status.success(), "{engine:?}: {said}");
    assert_plain(&said, "apply");
    let held: Vec<serde_json::Value> = w
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "held")
        .collect();
    for (m, why) in [
        ("bob", "its .git or .git/objects is not a folder"),
        ("alice", "its HEAD"),
    ] {
        assert!(
            held.iter()
                .any(|e| e["member"] == m && e["reason"].as_str().unwrap_or("").contains(why)),
            "{engine:?}: no held event of {m} saying {why:?}: {held:#?}\n{said}"
        );
    }
    assert!(w.state("bob").starts_with("exited"), "{}", w.state("bob"));
    // The person undoes both, on the host, and applies again: both start.
    let alice_git = w.ws("alice").join(".git");
    std::fs::remove_file(alice_git.join("HEAD")).unwrap();
    std::fs::write(alice_git.join("HEAD"), format!("ref: {branch}\n")).unwrap();
    std::os::unix::fs::chown(
        alice_git.join("HEAD"),
        Some(w.person().0),
        Some(w.person().1),
    )
    .unwrap();
    std::fs::remove_file(bob_git.join("objects")).unwrap();
    std::fs::rename(bob_git.join("objects.real"), bob_git.join("objects")).unwrap();
    w.apply_ok();
    w.wait_starts("alice", 2);
    w.wait_starts("bob", 2);
    assert_eq!(w.state("alice"), "running");
    assert_eq!(w.state("bob"), "running");
}

// ------------------------------------------------------------------------- rollback

/// alice's first start commits good work (and checks that git works inside and that the
/// person's objects are read-only to it).
const GOOD_WORK: &str = r#"d=$ATEAM_SESSION_DIR
if [ ! -e $d/worked ]; then
  touch $d/worked
  g="git -c user.name=alice -c user.email=a@x"
  echo good > good.txt && echo 'def b(): return 2' > src/b.py
  $g add -A && $g commit -qm "good work"
  if touch @ROOT@/repo/.git/objects/probe 2>/dev/null; then echo writable; else echo read-only; fi > $d/objects
fi
"#;

/// The start after good work recorded it; then the member deletes files, commits, leaves
/// junk. Stopped, `rollback` puts back what that start saw (files, branch, index); a
/// rollback to the snapshot the first one took restores the bad state; the next apply
/// starts the member again.
fn rollback_restores_what_the_start_saw_and_is_undone_by_another(engine: Engine) {
    let script = format!("{GOOD_WORK}{WAIT}");
    let w = World::new(engine, "rollback", &[("alice", &script)]);
    w.apply_ok();
    w.wait_starts("alice", 1);
    assert_eq!(
        std::fs::read_to_string(w.transcript_dir("alice").join("objects")).unwrap(),
        "read-only\n",
        "{engine:?}: the person's objects are writable inside"
    );
    w.make_exit("alice");
    w.apply_ok();
    w.wait_starts("alice", 2);
    w.inside(
        "alice",
        "git rm -q -r src README && git -c user.name=a -c user.email=a@x commit -qm 'delete everything' && echo junk > junk.txt && rm good.txt",
    );
    let ws = w.ws("alice");
    let log = |w: &World| {
        text(&w.host_git(&ws, &["log", "-1", "--format=%s"]).stdout)
            .trim()
            .to_string()
    };
    let status = |w: &World| text(&w.host_git(&ws, &["status", "--porcelain"]).stdout);
    assert_eq!(log(&w), "delete everything");
    let rolled = w.ateam_ok(&["rollback", "alice"]);
    assert!(rolled.contains("before start"), "{rolled}");
    // The running member was stopped by the executor, which says so.
    let events = w.ateam_ok(&["events"]);
    assert!(
        events
            .lines()
            .any(|l| l.contains("stopped") && l.contains("workspace is rolled back")),
        "{engine:?}: {events}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("src/b.py")).unwrap(),
        "def b(): return 2\n"
    );
    assert!(ws.join("README").exists() && ws.join("good.txt").exists());
    assert!(!ws.join("junk.txt").exists(), "{engine:?}: the junk stayed");
    assert_eq!(log(&w), "good work", "{engine:?}: the branch is not back");
    assert_eq!(status(&w), "", "{engine:?}: index and tree disagree");
    let saved = rolled
        .split("what was there is snapshot ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("{rolled}"));
    w.ateam_ok(&["rollback", "alice", "--to", saved]);
    assert!(!ws.join("src").exists() && !ws.join("good.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("junk.txt")).unwrap(),
        "junk\n"
    );
    assert_eq!(log(&w), "delete everything");
    // good.txt, deleted and not committed, is so again.
    assert_eq!(status(&w), " D good.txt\n?? junk.txt\n", "{engine:?}");
    w.apply_ok();
    w.wait_starts("alice", 3);
    let snaps = w.ateam_ok(&["snapshots", "alice"]);
    assert_eq!(snaps.matches("before rollback").count(), 2, "{snaps}");
    assert_eq!(snaps.matches("before start").count(), 3, "{snaps}");
}

macro_rules! cases {
    ($($engine:ident),*) => {
        $(
            on_every_engine!($engine:
                planted_config_hooks_and_nested_repositories_never_run_for_ateam,
                a_tampered_git_is_refused_and_a_failed_snapshot_holds_the_start,
                rollback_restores_what_the_start_saw_and_is_undone_by_another,
            );
        )*
    };
}

cases!(docker, podman, rootless_podman);

// The same attacks on members under gVisor (docs/gvisor.md), but the tampered git's: most of
// its plants are FIFOs, and a FIFO a member makes under gVisor stays in its sandbox (the host
// never sees one: tests/gvisor.rs).
macro_rules! gvisor_cases {
    ($($engine:ident),*) => {
        $(
            on_every_engine!($engine:
                planted_config_hooks_and_nested_repositories_never_run_for_ateam,
                rollback_restores_what_the_start_saw_and_is_undone_by_another,
            );
        )*
    };
}

gvisor_cases!(docker_gvisor, podman_gvisor, rootless_podman_gvisor);
