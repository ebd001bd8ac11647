//! ateam as a user drives it: the `ateam` binary against real engines, on a copy of the
//! example team. Run by scripts/test.sh once the engines are up; ignored by a plain
//! `cargo test`. Every case runs on Docker and on rootful Podman.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

mod common;
use common::standin::{chown_tree, copy_dir};
use common::terminal::Terminal;
use common::{Engine, text, var};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ateam::core::layout::store_id;

/// The common world (`common::World`: engine, folder, team, `ateam`, teardown) on a copy of
/// the demo; its team is deleted without `--purge`, then every container of its store goes.
struct World(common::World);

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.0
    }
}

impl World {
    /// A copy of examples/demo-team under a unique team name.
    fn new(engine: Engine, tag: &str) -> World {
        let w = World(common::World::new(engine, "e2e", tag).without_purge());
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo-team");
        copy_dir(&src, &w.root());
        let _ = std::fs::remove_dir_all(w.path("sessions/members"));
        // A person's checkout that root runs ateam in (no sudo): its members run as the
        // person, the owner of the Team's folder, and so can write the person's repository.
        chown_tree(&w.root(), PERSON.0, PERSON.1);
        w.edit(|t| t.replace("name: demo\n", &format!("name: {}\n", w.team)));
        w
    }

    fn manifest(&self) -> PathBuf {
        self.path("team.yaml")
    }

    fn edit(&self, f: impl FnOnce(&str) -> String) {
        let text = std::fs::read_to_string(self.manifest()).unwrap();
        std::fs::write(self.manifest(), f(&text)).unwrap();
    }

    /// ateam with an agent's key set, its output piped.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.command_env(&[("ANTHROPIC_API_KEY", "test-key")]);
        c.args(args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    }

    /// As a user in a new shell: no engine variables, no --backend.
    fn bare(&self, args: &[&str]) -> Output {
        Command::new(common::ateam_bin())
            .args(args)
            .env("ATEAM_STATE_DIR", self.state())
            .env_remove("DOCKER_HOST")
            .env_remove("CONTAINER_HOST")
            .output()
            .unwrap()
    }

    fn ateam(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn apply(&self) -> Output {
        let out = self.ateam(&["apply", "-f", self.manifest().to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "apply failed:\n{}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        out
    }

    /// The engine's own CLI, for looking and for changes made behind ateam's back.
    fn engine_cli(&self, args: &[&str]) -> Output {
        self.0.engine_cli().args(args).output().unwrap()
    }

    /// name -> id of every container of this store, running or not.
    fn containers(&self) -> BTreeMap<String, String> {
        let filter = format!("label=ateam.dev/store={}", store_id(&self.state()));
        let out = self.engine_cli(&[
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            &filter,
            "--format",
            "{{.Names}} {{.ID}}",
        ]);
        text(&out.stdout)
            .lines()
            .filter_map(|l| {
                l.split_once(' ')
                    .map(|(n, i)| (n.to_string(), i.to_string()))
            })
            .collect()
    }

    fn name(&self, member: &str) -> String {
        ateam::core::container::container_name(&self.team, member)
    }

    fn transcript(&self, member: &str) -> PathBuf {
        self.root()
            .join("sessions/members")
            .join(member)
            .join("transcript.log")
    }

    fn status_json(&self) -> serde_json::Value {
        let out = self.ateam(&["status", "-o", "json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for World {
    /// The team (`delete`, no purge), then whatever container of its store is left (a second
    /// team's, a stranger's).
    fn drop(&mut self) {
        self.0.remove();
        let names: Vec<String> = self.containers().into_keys().collect();
        if !names.is_empty() {
            let mut args = vec!["rm", "-f"];
            args.extend(names.iter().map(String::as_str));
            let _ = self.engine_cli(&args);
        }
    }
}

/// Who owns the copy of the demo: a person, not root.
const PERSON: (u32, u32) = (1000, 1000);

/// The demo's writer writes into its repository (asserted from inside), as the person whose
/// checkout it is; what it writes is theirs on the host.
fn the_demo_writer_writes_its_repository(engine: Engine) {
    use std::os::unix::fs::MetadataExt;
    let w = World::new(engine, "writes");
    w.apply();
    wait_for(&w.transcript("writer"), "sleeping");
    let repo = w.root().join("workspace/repo");
    let out = w.ateam(&[
        "exec",
        "writer",
        "--",
        "sh",
        "-c",
        &format!(
            "id -u; echo edit > {}/by-writer && echo wrote",
            repo.display()
        ),
    ]);
    let said = text(&out.stdout);
    assert!(said.contains("wrote"), "{said}{}", text(&out.stderr));
    assert_eq!(said.lines().next(), Some("1000"), "{said}");
    let meta = std::fs::metadata(repo.join("by-writer")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), PERSON);
    let status = w.ateam(&["status", &w.team]);
    assert!(
        text(&status.stdout).contains("rw:repo"),
        "{}",
        text(&status.stdout)
    );
}

fn wait_for(path: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(path)
        .map(|s| s.contains(what))
        .unwrap_or(false)
    {
        assert!(
            Instant::now() < deadline,
            "{} never contained {what:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The state of one member in `status -o json`.
fn state_of(status: &serde_json::Value, name: &str) -> String {
    status["teams"][0]["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in status: {status:#}"))["state"]
        .as_str()
        .unwrap()
        .to_string()
}

// ----------------------------------------------------------------------------------- cases

fn apply_is_idempotent_and_recreates_only_what_changed(engine: Engine) {
    let w = World::new(engine, "idem");
    let out = w.apply();
    assert!(
        text(&out.stdout).contains("applied: 3 member(s) running"),
        "{}",
        text(&out.stdout)
    );
    let first = w.containers();
    assert_eq!(first.len(), 3, "{first:?}");

    let again = w.apply();
    assert!(
        text(&again.stdout).contains("no changes"),
        "{}",
        text(&again.stdout)
    );
    assert_eq!(w.containers(), first, "a no-op apply replaced nothing");

    wait_for(&w.transcript("writer"), "sleeping");
    let before = std::fs::read_to_string(w.transcript("writer")).unwrap();
    w.edit(|t| t.replace("memory: 1Gi", "memory: 768Mi"));
    let diff = w.ateam(&["diff", "-f", w.manifest().to_str().unwrap()]);
    assert_eq!(diff.status.code(), Some(1), "diff exits 1 on changes");
    assert!(
        text(&diff.stdout)
            .contains("~ recreate writer: memoryBytes changed from 1073741824 to 805306368"),
        "{}",
        text(&diff.stdout)
    );
    w.apply();
    let after = w.containers();
    for m in ["reviewer", "tester"] {
        assert_eq!(after[&w.name(m)], first[&w.name(m)], "{m} was not touched");
    }
    assert_ne!(
        after[&w.name("writer")],
        first[&w.name("writer")],
        "writer was recreated"
    );
    assert_eq!(after.len(), 3, "no leftover replacement: {after:?}");
    wait_for(&w.transcript("writer"), "sleeping");
    let now = std::fs::read_to_string(w.transcript("writer")).unwrap();
    assert!(
        now.starts_with(&before),
        "the transcript survived the recreate"
    );
    let diff = w.ateam(&["diff", "-f", w.manifest().to_str().unwrap()]);
    assert_eq!(diff.status.code(), Some(0), "{}", text(&diff.stdout));
}

fn status_names_every_drift_and_apply_converges(engine: Engine) {
    let w = World::new(engine, "drift");
    w.apply();
    // Status finds the engine the team was applied on, without -f, --backend or variables.
    let ok = w.bare(&["status", "--exit-code"]);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "in sync:\n{}{}",
        text(&ok.stdout),
        text(&ok.stderr)
    );
    assert!(
        text(&ok.stdout).contains(&format!("TEAM {} ({})", w.team, engine.backend())),
        "{}",
        text(&ok.stdout)
    );
    // Behind ateam's back: kill one, stop one, remove one, and start a stranger with its labels.
    let ids = w.containers();
    assert!(
        w.engine_cli(&["kill", &ids[&w.name("reviewer")]])
            .status
            .success()
    );
    assert!(
        w.engine_cli(&["stop", "-t", "1", &ids[&w.name("writer")]])
            .status
            .success()
    );
    assert!(
        w.engine_cli(&["rm", "-f", &ids[&w.name("tester")]])
            .status
            .success()
    );
    let store = format!("ateam.dev/store={}", store_id(&w.state()));
    let team = format!("ateam.dev/team={}", w.team);
    let ghost = w.engine_cli(&[
        "run",
        "-d",
        "--name",
        &w.name("ghost"),
        "--network",
        "none",
        "--label",
        "ateam.dev/managed-by=ateam",
        "--label",
        &store,
        "--label",
        &team,
        "--label",
        "ateam.dev/member=ghost",
        "ateam-demo:latest",
        "sleep",
        "1000",
    ]);
    assert!(ghost.status.success(), "{}", text(&ghost.stderr));

    let status = w.status_json();
    assert_eq!(state_of(&status, "reviewer"), "exited 137");
    assert!(
        state_of(&status, "writer").starts_with("exited"),
        "{}",
        state_of(&status, "writer")
    );
    assert_eq!(state_of(&status, "tester"), "missing");
    // It carries the labels but ateam did not make it: a stranger, never an orphan to adopt.
    assert_eq!(state_of(&status, "ghost"), "stranger");
    assert_eq!(status["teams"][0]["drifted"], true);
    let table = w.ateam(&["status", "--exit-code"]);
    assert_eq!(table.status.code(), Some(1), "--exit-code fails on drift");
    for word in ["exited 137", "missing", "stranger"] {
        assert!(
            text(&table.stdout).contains(word),
            "{word}:\n{}",
            text(&table.stdout)
        );
    }

    // apply restarts and recreates; the stranger stays until --prune, and apply says so:
    // the machine still differs from the manifests.
    let out = w.ateam(&["apply", "-f", w.manifest().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("! stranger"),
        "{}",
        text(&out.stderr)
    );
    let status = w.status_json();
    for m in ["reviewer", "writer", "tester"] {
        assert_eq!(state_of(&status, m), "running", "{m}");
    }
    assert_eq!(state_of(&status, "ghost"), "stranger");
    assert_eq!(
        status["teams"][0]["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "reviewer")
            .unwrap()["restarts"],
        1
    );
    let out = w.ateam(&["apply", "--prune", "-f", w.manifest().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!w.containers().contains_key(&w.name("ghost")));
    let ok = w.ateam(&["status", "--exit-code"]);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "converged:\n{}",
        text(&ok.stdout)
    );
}

fn delete_keeps_transcripts_and_purge_removes_them(engine: Engine) {
    let w = World::new(engine, "del");
    w.apply();
    wait_for(&w.transcript("reviewer"), "sleeping");
    let out = w.ateam(&["delete", "-f", w.manifest().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("transcripts kept in"),
        "{}",
        text(&out.stdout)
    );
    assert!(w.containers().is_empty(), "{:?}", w.containers());
    assert!(
        w.transcript("reviewer").exists() && w.root().join("sessions/lead").is_dir(),
        "delete keeps transcripts, the main session's too"
    );

    w.apply();
    // A member removed from the manifests keeps its transcript, and status lists it.
    w.edit(|t| {
        let i = t
            .rfind("---\napiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata:\n  name: tester")
            .unwrap();
        t[..i].to_string()
    });
    let out = w.ateam(&["apply", "--prune", "-f", w.manifest().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let status = w.status_json();
    assert_eq!(state_of(&status, "tester"), "retained");
    let out = w.ateam(&["delete", "--team", &w.team, "--purge"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !w.transcript("reviewer").exists()
            && !w.transcript("tester").exists()
            && !w.root().join("sessions/lead").exists(),
        "--purge removes transcripts, the main session's too"
    );
    assert!(
        w.root().join("workspace/repo/README.md").exists(),
        "granted files are never touched"
    );
}

/// `delete --team NAME --purge` after a plain delete removes the transcripts that delete kept
/// (the team's record is gone by then), and leaves nothing of the team in the state folder.
fn purge_after_a_plain_delete_removes_what_was_kept(engine: Engine) {
    let w = World::new(engine, "pur");
    w.apply();
    wait_for(&w.transcript("reviewer"), "sleeping");
    let out = w.ateam(&["delete", "--team", &w.team]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        w.transcript("reviewer").exists() && w.root().join("sessions/lead").is_dir(),
        "delete keeps transcripts, the main session's too"
    );
    assert!(w.containers().is_empty(), "{:?}", w.containers());
    // Deleted is not applied: status no longer lists the team.
    let status = w.status_json();
    assert!(
        !status.to_string().contains(&format!("\"{}\"", w.team)),
        "{status}"
    );
    let out = w.ateam(&["delete", "--team", &w.team, "--purge"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("transcripts deleted"),
        "{}",
        text(&out.stdout)
    );
    for m in ["reviewer", "writer", "tester"] {
        assert!(!w.transcript(m).exists(), "{m}'s transcript is purged");
    }
    let left: Vec<_> = std::fs::read_dir(w.state().join("teams").join(&w.team))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert_eq!(
        left,
        ["deleted-at"],
        "nothing of the team is left in the state folder but the mark that keeps a running controller from making it again"
    );
    assert!(w.root().join("workspace/repo/README.md").exists());
    // Nothing is left to purge now: the team is unknown (an error, not a difference).
    let out = w.ateam(&["delete", "--team", &w.team, "--purge"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("has not been applied"),
        "{}",
        text(&out.stderr)
    );
}

fn logs_and_exec_look_inside(engine: Engine) {
    let w = World::new(engine, "look");
    w.apply();
    wait_for(&w.transcript("reviewer"), "sleeping");
    let logs = w.bare(&["logs", "reviewer", "--tail", "3"]);
    assert_eq!(logs.status.code(), Some(0), "{}", text(&logs.stderr));
    assert!(
        text(&logs.stdout).contains("agent: sleeping"),
        "{}",
        text(&logs.stdout)
    );
    assert_eq!(text(&logs.stdout).lines().count(), 3);
    // Not an agent member: no transcript of an agent's to read, and `transcript` says so.
    let t = w.bare(&["transcript", "reviewer"]);
    assert_eq!(t.status.code(), Some(2));
    assert!(
        text(&t.stderr).contains("is not an agent member"),
        "{}",
        text(&t.stderr)
    );
    let exec = w.bare(&[
        "exec",
        "reviewer",
        "--",
        "sh",
        "-c",
        "ls /sys/class/net; exit 3",
    ]);
    assert_eq!(exec.status.code(), Some(3), "exec passes the exit code on");
    assert_eq!(text(&exec.stdout).trim(), "lo");
    // -f follows until the member stops: the agent's goodbye arrives, then the command ends.
    // With `--tail 1` it first shows the agent's last line: once that is there it follows, and
    // only then is the member stopped (after a fixed pause, a follower slow to start on a
    // loaded machine would find the member stopped and miss the goodbye).
    let mut follow = w
        .cmd(&["logs", "-f", "reviewer", "--tail", "1"])
        .spawn()
        .unwrap();
    let followed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let mut stdout = follow.stdout.take().unwrap();
        let followed = followed.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut stdout, &mut buf) {
                followed.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let shown = || text(&followed.lock().unwrap());
    let attached = common::eventually(Duration::from_secs(30), || {
        shown().contains("agent: sleeping")
    });
    assert!(
        attached,
        "logs -f never showed the agent's last line: {}",
        shown()
    );
    assert!(
        w.engine_cli(&["stop", "-t", "5", &w.name("reviewer")])
            .status
            .success()
    );
    let out = follow.wait_with_output().unwrap();
    reader.join().unwrap();
    let stdout = shown();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("stopping on signal"), "{stdout}");
    let unknown = w.bare(&["logs", "nobody"]);
    assert_eq!(unknown.status.code(), Some(2), "a usage error");
    assert!(
        text(&unknown.stderr).contains("no applied team has a member `nobody`"),
        "{}",
        text(&unknown.stderr)
    );
}

fn a_member_held_at_its_gate_is_released_by_the_next_apply(engine: Engine) {
    let w = World::new(engine, "gate");
    w.apply();
    wait_for(&w.transcript("tester"), "sleeping");
    // As if an apply died between start and release: no release file, container restarted.
    let ctl = w
        .state()
        .join("teams")
        .join(&w.team)
        .join("members/tester/ctl");
    std::fs::remove_file(ctl.join("go")).unwrap();
    std::fs::remove_file(w.transcript("tester")).unwrap();
    assert!(
        w.engine_cli(&["restart", "-t", "1", &w.name("tester")])
            .status
            .success()
    );
    std::thread::sleep(Duration::from_secs(1));
    // (The old process said goodbye on its way out; nothing new started.)
    let log = std::fs::read_to_string(w.transcript("tester")).unwrap_or_default();
    assert!(
        !log.contains("started as"),
        "the gate holds the member's command back: {log}"
    );
    let status = w.status_json();
    assert_eq!(state_of(&status, "tester"), "held at gate");
    let id = w.containers()[&w.name("tester")].clone();
    w.apply();
    wait_for(&w.transcript("tester"), "sleeping");
    assert_eq!(
        w.containers()[&w.name("tester")],
        id,
        "checked and released, not replaced"
    );
    assert_eq!(state_of(&w.status_json(), "tester"), "running");
}

fn a_member_that_cannot_start_is_named_with_its_output(engine: Engine) {
    let w = World::new(engine, "fail");
    // A command that is not in the image: refused before anything is made, for any member.
    w.edit(|t| {
        t.replace(
            "command: [/bin/agent.sh]",
            "command: [no-such-agent, --flag]",
        )
    });
    let out = w.ateam(&["apply", "-f", w.manifest().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("member `tester`: its command `no-such-agent` is not an executable file in image `ateam-demo:latest`"),
        "{err}"
    );
    assert!(
        err.contains("1 member(s) refused; nothing was changed"),
        "{err}"
    );
    assert!(w.containers().is_empty(), "{:?}", w.containers());
    // A command that runs and fails at once: the others come up, and apply names it with
    // its exit code and its last output; status keeps how it ended.
    w.edit(|t| {
        t.replace(
            "[no-such-agent, --flag]",
            "[sh, -c, \"echo cannot work here; exit 3\"]",
        )
    });
    let out = w.ateam(&["apply", "-f", w.manifest().to_str().unwrap()]);
    let err = text(&out.stderr);
    // apply looks once more when it is done; the member may not have ended yet by then.
    if out.status.code() != Some(0) {
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("tester exited with code 3") && err.contains("cannot work here"),
            "{err}"
        );
        assert!(err.contains("1 of 3 member(s) not running"), "{err}");
    }
    let start = Instant::now();
    while state_of(&w.status_json(), "tester") != "exited 3" {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "tester never ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(state_of(&w.status_json(), "reviewer"), "running");
    let status = w.status_json();
    let tester = status["teams"][0]["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "tester")
        .unwrap()
        .clone();
    assert_eq!(tester["lastExit"]["exitCode"], 3, "{tester}");
    assert_eq!(tester["lastExit"]["reason"], "error", "{tester}");
    // Fixing the manifest fixes the member.
    w.edit(|t| {
        t.replace(
            "command: [sh, -c, \"echo cannot work here; exit 3\"]",
            "command: [/bin/agent.sh]",
        )
    });
    w.apply();
    assert_eq!(state_of(&w.status_json(), "tester"), "running");
}

/// A team of ten plain members, for the crash and concurrency cases: they share the one
/// folder `g` writes, and say so.
fn ten_members(w: &World, memory: &str) {
    let mut t = format!(
        "apiVersion: ateam.dev/v1alpha1\nkind: Team\nmetadata: {{name: {}}}\nspec: {{image: ateam-demo:latest, sessionDir: ./sessions}}\n---\n\
         apiVersion: ateam.dev/v1alpha1\nkind: AccessGrant\nmetadata: {{name: g}}\nspec: {{write: [./workspace/repo]}}\n",
        w.team
    );
    for i in 0..10 {
        t.push_str(&format!(
            "---\napiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {{name: m{i}}}\nspec: {{parent: lead, access: g, resources: {{memory: {memory}}}, shareWrites: true}}\n"
        ));
    }
    t.push_str("---\napiVersion: ateam.dev/v1alpha1\nkind: MainSession\nmetadata: {name: lead}\nspec: {command: [sh]}\n");
    std::fs::write(w.manifest(), t).unwrap();
}

fn converged_ten(w: &World) {
    let c = w.containers();
    let names: Vec<&String> = c.keys().collect();
    let want: Vec<String> = (0..10).map(|i| w.name(&format!("m{i}"))).collect();
    assert_eq!(
        names,
        want.iter().collect::<Vec<_>>(),
        "exactly the ten members, no duplicates, no leftovers"
    );
    let status = w.status_json();
    for i in 0..10 {
        assert_eq!(state_of(&status, &format!("m{i}")), "running");
    }
}

fn a_killed_apply_is_finished_by_the_next_one(engine: Engine) {
    let w = World::new(engine, "kill");
    for (round, delay_ms) in [40u64, 150, 300, 500, 800, 1200].into_iter().enumerate() {
        // Even rounds change every member (recreate), odd rounds start from nothing.
        if round % 2 == 1 {
            let _ = w.ateam(&["delete", "--team", &w.team]);
        }
        ten_members(&w, if round % 4 < 2 { "64Mi" } else { "80Mi" });
        let mut child: Child = w
            .cmd(&["apply", "-f", w.manifest().to_str().unwrap()])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let out = w.ateam(&["apply", "-f", w.manifest().to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "round {round} (killed after {delay_ms} ms): {}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        converged_ten(&w);
        let again = w.apply();
        assert!(
            text(&again.stdout).contains("no changes"),
            "round {round}: {}",
            text(&again.stdout)
        );
    }
}

fn concurrent_applies_serialize(engine: Engine) {
    let w = World::new(engine, "conc");
    ten_members(&w, "64Mi");
    let children: Vec<Child> = (0..5)
        .map(|_| {
            w.cmd(&["apply", "-f", w.manifest().to_str().unwrap()])
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for o in &outs {
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}\n{}",
            text(&o.stdout),
            text(&o.stderr)
        );
    }
    let waited = outs
        .iter()
        .filter(|o| text(&o.stderr).contains("waiting for another ateam command"))
        .count();
    assert!(
        waited >= 1,
        "the applies ran one at a time: at least one waited"
    );
    let created = outs
        .iter()
        .filter(|o| text(&o.stdout).contains("applied: 10 member(s)"))
        .count();
    let noop = outs
        .iter()
        .filter(|o| text(&o.stdout).contains("no changes"))
        .count();
    assert_eq!(
        (created, noop),
        (1, 4),
        "one apply did the work, the four after it found nothing to do"
    );
    converged_ten(&w);
    // While another process holds the store, --no-wait fails at once and changes nothing.
    let me = ateam::files::Owner { uid: 0, gid: 0 };
    let held = ateam::store::Store::new(w.state(), me)
        .lock(true, |_| {})
        .unwrap();
    let o = w.ateam(&["apply", "--no-wait", "-f", w.manifest().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(6), "the state folder is busy");
    assert!(
        text(&o.stderr).contains("another ateam command is changing this store"),
        "{}",
        text(&o.stderr)
    );
    drop(held);
    converged_ten(&w);
}

/// The JSON log lines among apply's stderr (the progress lines are plain text there).
fn log_events(stderr: &[u8]) -> Vec<serde_json::Value> {
    text(stderr)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn logs_name_each_action_and_stay_off_stdout(engine: Engine) {
    let w = World::new(engine, "log");
    let manifest = w.manifest();
    let apply = || {
        let out = w.ateam(&[
            "--log-format",
            "json",
            "-v",
            "apply",
            "-f",
            manifest.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).starts_with("applied: 3 member(s) running"),
            "{}",
            text(&out.stdout)
        );
        log_events(&out.stderr)
    };
    let action = |events: &[serde_json::Value], member: &str, name: &str| {
        events
            .iter()
            .find(|e| {
                e["level"] == "INFO"
                    && e["fields"]["message"] == "running action"
                    && e["fields"]["action"] == name
                    && e["span"]["name"] == "member"
                    && e["span"]["member"] == member
            })
            .unwrap_or_else(|| panic!("no {name} of {member} in {events:#?}"))
            .clone()
    };
    let events = apply();
    for m in ["reviewer", "tester", "writer"] {
        let e = action(&events, m, "create");
        assert_eq!(e["span"]["team"], w.team.as_str(), "{e}");
        assert_eq!(e["fields"]["reason"], "missing", "{e}");
    }

    let before = w.containers();
    w.edit(|t| t.replace("memory: 1Gi", "memory: 768Mi"));
    let e = action(&apply(), "writer", "recreate");
    assert_eq!(
        e["fields"]["container"],
        before[&w.name("writer")].as_str(),
        "{e}"
    );
    assert_eq!(e["fields"]["reason"], "spec", "{e}");
    assert!(
        e["fields"]["detail"]
            .as_str()
            .unwrap()
            .contains("memoryBytes changed from 1073741824 to 805306368"),
        "{e}"
    );

    // The most verbose logs, in either format, leave status's JSON document alone.
    for format in ["json", "text"] {
        let out = w.ateam(&["-vvv", "--log-format", format, "status", "-o", "json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let status: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
        assert_eq!(state_of(&status, "writer"), "running");
        assert!(
            text(&out.stderr).contains("observed"),
            "{}",
            text(&out.stderr)
        );
    }
    let out = w.ateam(&["-vv", "--log-format", "json", "status", "-o", "json"]);
    let observed = log_events(&out.stderr)
        .into_iter()
        .find(|e| e["fields"]["message"] == "observed")
        .unwrap();
    assert_eq!(observed["level"], "DEBUG");
    assert_eq!(observed["fields"]["listed"], 3, "{observed}");
    // The inspects of running members are kept from the apply's last look (the same
    // processes still run). On Docker only while its buffer of 256 events still holds the
    // anchor: other tests on the same engine may have pushed it out, then all are asked.
    let count = |k: &str| observed["fields"][k].as_u64().unwrap_or(99);
    assert_eq!(count("inspected") + count("reused"), 3, "{observed}");
    let kept: &[u64] = if engine == Engine::Podman {
        &[3]
    } else {
        &[3, 0]
    };
    assert!(kept.contains(&count("reused")), "{engine:?}: {observed}");
    assert!(observed["fields"]["elapsed_ms"].is_number(), "{observed}");
}

/// `imagePullPolicy` against a local registry (Debian's docker-registry, started by
/// scripts/engines.sh): `Never` refuses a missing image before any change, `IfNotPresent`
/// pulls it once, `Always` pulls again before a member is made, so a tag's new content is
/// what a replaced member runs.
fn image_pull_policies_against_a_local_registry(engine: Engine) {
    let w = World::new(engine, "pull");
    let image = format!("{}/ateam-demo:{}", var("ATEAM_TEST_REGISTRY"), w.team);
    // Pushed from the shared Docker (the registry serves every engine), absent from this one.
    let docker = |args: &[&str]| {
        let out = Command::new("docker")
            .arg("-H")
            .arg(var("ATEAM_TEST_DOCKER"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout).trim().to_string()
    };
    docker(&["tag", &var("ATEAM_TEST_IMAGE"), &image]);
    docker(&["push", &image]);
    docker(&["rmi", &image]);
    let _ = w.engine_cli(&["rmi", &image]);
    w.edit(|t| {
        t.replace(
            "image: ateam-demo:latest",
            &format!("image: {image}\n  imagePullPolicy: Never"),
        )
    });
    let never = w.ateam(&["apply", "-f", w.manifest().to_str().unwrap()]);
    assert_eq!(never.status.code(), Some(4), "{}", text(&never.stderr));
    assert!(
        text(&never.stderr).contains("imagePullPolicy is Never"),
        "{}",
        text(&never.stderr)
    );
    assert!(w.containers().is_empty(), "nothing made");

    w.edit(|t| t.replace("imagePullPolicy: Never", "imagePullPolicy: IfNotPresent"));
    w.apply();
    wait_for(&w.transcript("reviewer"), "sleeping");
    let version = || {
        let out = w.bare(&["exec", "reviewer", "--", "sh", "-c", "echo v=${V:-1}"]);
        text(&out.stdout).trim().to_string()
    };
    assert_eq!(version(), "v=1");

    // New content under the same tag, in the registry only: this engine keeps the old.
    let inspect = w.engine_cli(&["image", "inspect", "--format", "{{.Id}}", &image]);
    let v1 = text(&inspect.stdout).trim().to_string();
    let c = docker(&["create", &var("ATEAM_TEST_IMAGE")]);
    docker(&["commit", "--change", "ENV V=2", &c, &image]);
    docker(&["rm", &c]);
    docker(&["push", &image]);
    if engine == Engine::Docker {
        docker(&["tag", &v1, &image]);
    } else {
        docker(&["rmi", &image]);
    }
    // IfNotPresent keeps what the engine has, even for a replaced member...
    w.edit(|t| t.replace("memory: 512Mi", "memory: 500Mi"));
    w.apply();
    assert_eq!(version(), "v=1");
    // ...Always pulls before making one.
    w.edit(|t| {
        t.replace("imagePullPolicy: IfNotPresent", "imagePullPolicy: Always")
            .replace("memory: 500Mi", "memory: 480Mi")
    });
    w.apply();
    assert_eq!(version(), "v=2");
    let _ = w.engine_cli(&["rmi", "-f", &image]);
}

/// `-l` label selectors: status and logs pick members by their labels (the verdict is
/// theirs alone), delete picks teams by the Team's labels.
fn label_selectors_pick_members_and_teams(engine: Engine) {
    let w = World::new(engine, "labels");
    // The Team (the first object) gets a label.
    w.edit(|t| {
        t.replacen(
            "metadata:\n  name: ",
            "metadata:\n  labels: {env: test}\n  name: ",
            1,
        )
    });
    w.apply();
    wait_for(&w.transcript("reviewer"), "sleeping");
    wait_for(&w.transcript("writer"), "sleeping");
    let out = w.ateam(&["status", "-l", "role=review", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = doc["teams"][0]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["reviewer"], "{doc}");
    // Drift of another member is not the selected members' verdict.
    assert!(
        w.engine_cli(&["stop", "-t", "1", &w.name("writer")])
            .status
            .success()
    );
    let theirs = w.ateam(&["status", "--exit-code", "-l", "role=review"]);
    assert_eq!(theirs.status.code(), Some(0), "{}", text(&theirs.stdout));
    let writers = w.ateam(&["status", "--exit-code", "-l", "role!=review,role"]);
    assert_eq!(writers.status.code(), Some(1), "{}", text(&writers.stdout));
    let logs = w.bare(&["logs", "-l", "role=review", "--tail", "1"]);
    assert_eq!(logs.status.code(), Some(0), "{}", text(&logs.stderr));
    assert!(
        text(&logs.stdout).starts_with("[reviewer] "),
        "{}",
        text(&logs.stdout)
    );
    let none = w.bare(&["delete", "-l", "env=prod"]);
    assert_eq!(none.status.code(), Some(2), "{}", text(&none.stderr));
    assert!(!w.containers().is_empty(), "nothing deleted");
    let gone = w.bare(&["delete", "-l", "env=test"]);
    assert_eq!(gone.status.code(), Some(0), "{}", text(&gone.stderr));
    assert!(w.containers().is_empty(), "{:?}", w.containers());
}

/// `attach` and `exec -it` as a person uses them, at a terminal: the way out is said first,
/// what is typed reaches the session or the member, and detaching leaves the session running.
fn attach_and_exec_it_at_a_terminal(engine: Engine) {
    let w = World::new(engine, "attach");
    w.apply();
    wait_for(&w.transcript("reviewer"), "sleeping");
    let env = format!(
        "env ATEAM_STATE_DIR={} DOCKER_HOST={} CONTAINER_HOST={} {} --backend {}",
        w.state().display(),
        var("ATEAM_TEST_DOCKER"),
        var("ATEAM_TEST_PODMAN_ROOTFUL"),
        &common::ateam_bin(),
        engine.backend(),
    );
    let term = Terminal::new(&w.root(), 160, 40, &format!("{env} attach lead"));
    term.wait_for("lead session");
    // Said in tmux's status line; inside the test's own tmux, with the outer prefix first
    // (send-keys below goes to the pane directly, as the outer tmux would pass it on).
    term.wait_for("detach with Ctrl-b Ctrl-b d");
    term.keys(&["echo typed-$((6*7))", "Enter"]);
    term.wait_for("typed-42");
    term.keys(&["C-b", "d"]);
    // Detached: tmux's client, then `ateam attach`, end (the pane is dead).
    let deadline = Instant::now() + Duration::from_secs(20);
    while term
        .tmux(&["display-message", "-p", "-t", "term", "#{pane_dead}"])
        .trim()
        != "1"
    {
        assert!(
            Instant::now() < deadline,
            "still attached:\n{}",
            term.screen()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Still running, and what was typed happened in it.
    let session = w
        .state()
        .join(format!("teams/{}/sessions/lead/tmux.sock", w.team));
    let inner = Command::new("tmux")
        .arg("-S")
        .arg(&session)
        .args(["capture-pane", "-p", "-t", "lead"])
        .output()
        .unwrap();
    assert!(
        text(&inner.stdout).contains("typed-42"),
        "{}",
        text(&inner.stdout)
    );
    drop(term);

    // A shell in a member, as the member's user (never root), with a terminal.
    let term = Terminal::new(
        &w.root(),
        160,
        40,
        &format!("{env} exec -it reviewer -- sh"),
    );
    // (Quotes in what is typed, so that only the output says `uid=`.)
    term.keys(&["tty; echo ui''d=$(id -u)", "Enter"]);
    let screen = term.wait_for("uid=");
    assert!(screen.contains("/dev/pts/"), "a terminal: {screen}");
    assert!(!screen.contains("uid=0"), "not root: {screen}");
    term.keys(&["exit", "Enter"]);
    drop(term);

    // A member's console is its output, read-only.
    let term = Terminal::new(&w.root(), 160, 40, &format!("{env} attach reviewer"));
    term.wait_for("read-only");
    term.wait_for("agent: sleeping");
    let unknown = w.bare(&["attach", "nobody"]);
    assert_ne!(unknown.status.code(), Some(0));
}

/// `logs --since` and `--timestamps`.
fn logs_since_and_timestamps(engine: Engine) {
    let w = World::new(engine, "since");
    w.apply();
    wait_for(&w.transcript("reviewer"), "sleeping");
    let stamped = w.bare(&["logs", "reviewer", "--timestamps", "--tail", "2"]);
    assert_eq!(stamped.status.code(), Some(0), "{}", text(&stamped.stderr));
    let out = text(&stamped.stdout);
    assert!(
        out.lines().count() == 2 && out.lines().all(|l| l.starts_with("20") && l.contains('T')),
        "{out}"
    );
    std::thread::sleep(Duration::from_secs(2));
    // Nothing was printed in the last second (the agent sleeps): --since 1s is empty...
    let recent = w.bare(&["logs", "reviewer", "--since", "1s"]);
    assert_eq!(recent.status.code(), Some(0), "{}", text(&recent.stderr));
    assert_eq!(text(&recent.stdout), "", "nothing new");
    // ...and an hour back has it all.
    let hour = w.bare(&["logs", "reviewer", "--since", "1h"]);
    assert!(text(&hour.stdout).contains("agent: sleeping"));
    let bad = w.bare(&["logs", "reviewer", "--since", "yesterday-ish"]);
    assert_eq!(bad.status.code(), Some(2), "clap's usage error");
    assert!(
        text(&bad.stderr).contains("neither an age"),
        "{}",
        text(&bad.stderr)
    );
}

/// On the CI machine's engines the doctor passes with the example team; a team whose image the
/// engine does not have fails it, naming the image and how to get it there.
fn doctor_finds_the_engine_and_the_image(engine: Engine) {
    let w = World::new(engine, "doc");
    let name = engine.backend();
    let manifest = w.manifest();
    let out = w.ateam(&["doctor", "-f", manifest.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(&format!("ok    engine    {name} at "))),
        "{stdout}"
    );
    let image = var("ATEAM_TEST_IMAGE");
    assert!(
        stdout.lines().any(|l| l.starts_with("ok    image")
            && l.contains(&format!("image {image} on {name}"))
            && l.ends_with("present")),
        "{stdout}"
    );
    w.edit(|t| t.replace("image: ateam-demo:latest", "image: ateam-not-here:0"));
    let out = w.ateam(&["doctor", "-f", manifest.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("FAIL  image")
            && l.contains("ateam-not-here:0")
            && l.ends_with("missing (ateam never pulls)")),
        "{stdout}"
    );
    // In a new shell, without the engine's variables: the engine the teams were applied on
    // is found through the state folder, and the socket tried is named.
    w.edit(|t| t.replace("image: ateam-not-here:0", "image: ateam-demo:latest"));
    w.apply();
    let uri = common::engine_uri(engine);
    let stdout = text(&w.bare(&["doctor"]).stdout);
    assert!(
        stdout.lines().any(|l| l.starts_with(&format!(
            "ok    engine    {name} at {uri} (where this state folder's teams were applied)"
        ))),
        "{stdout}"
    );
    assert!(!stdout.contains("no container engine answers"), "{stdout}");
}

macro_rules! e2e {
    ($engine:ident: $($case:ident),* $(,)?) => {
        mod $engine {
            $(
                #[test]
                #[ignore = "needs container engines: run scripts/test.sh"]
                fn $case() {
                    super::$case(crate::common::engine_of(stringify!($engine)));
                }
            )*
        }
    };
}

macro_rules! every_engine {
    ($($case:ident),* $(,)?) => {
        e2e!(docker: $($case),*);
        e2e!(podman: $($case),*);
    };
}

/// A main session gone from the manifests while its terminal runs: drift (`orphan`), kept
/// until `apply --prune` ends it.
fn a_session_no_manifest_wants_is_drift_until_pruned(engine: Engine) {
    let w = World::new(engine, "os");
    let two = sessions_team(&w, "lead", WRITER_MEMBER).replacen(
        "---\napiVersion: ateam.dev/v1alpha1\nkind: AccessGrant",
        "---\napiVersion: ateam.dev/v1alpha1\nkind: MainSession\nmetadata: {name: spare}\nspec: {command: [sleep, \"100000\"], cwd: ./workspace/repo}\n---\napiVersion: ateam.dev/v1alpha1\nkind: AccessGrant",
        1,
    );
    w.write_manifest(&two);
    w.apply();
    assert!(w.session_runs("spare"));
    w.write_manifest(&sessions_team(&w, "lead", WRITER_MEMBER));
    let m = w.manifest();
    let out = w.ateam(&[
        "status",
        "--exit-code",
        "-o",
        "json",
        "-f",
        m.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row(&s, "spare")["state"], "orphan");
    let out = w.apply_with(&[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "drift is left: {}",
        text(&out.stderr)
    );
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(
        said.contains("? main session spare: its terminal runs, no manifest wants it"),
        "{said}"
    );
    assert!(w.session_runs("spare"), "kept without --prune");
    assert_eq!(row(&w.status_json(), "spare")["state"], "orphan");
    let out = w.ateam(&["apply", "--prune", "-f", w.manifest().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!w.session_runs("spare"));
    assert!(
        w.root().join("sessions/spare").is_dir(),
        "its transcript stays"
    );
    w.kill_sessions();
}

/// What the image probe found is kept by the image's id and read by the next apply: shown
/// by poisoning it (the next create is refused as if the command were missing), then by
/// removing it (looked up afresh, and kept again).
fn image_probe_findings_are_kept_by_image_id(engine: Engine) {
    let w = World::new(engine, "ip");
    w.apply();
    let dir = w.state().join("images");
    let all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // Beside the probe's findings, the image's roots, kept by the same id (the team's
    // members have intercepted hosts or not: the file is there only if one had).
    let files: Vec<PathBuf> = all
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .cloned()
        .collect();
    assert_eq!(files.len(), 1, "one image, one file of findings: {all:?}");
    for other in all.iter().filter(|p| !files.contains(p)) {
        assert_eq!(
            other.file_name().unwrap().to_string_lossy(),
            files[0]
                .with_extension("roots.pem")
                .file_name()
                .unwrap()
                .to_string_lossy(),
            "{all:?}"
        );
    }
    let kept: BTreeMap<String, bool> =
        serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    assert_eq!(kept.get("/bin/agent.sh"), Some(&true), "{kept:?}");
    // Poisoned: the tester's next container (a changed memory cap recreates it) is refused
    // before any change, without a probe that would have found the command.
    let poisoned: BTreeMap<&String, bool> = kept.keys().map(|k| (k, false)).collect();
    std::fs::write(&files[0], serde_json::to_vec(&poisoned).unwrap()).unwrap();
    w.edit(|t| t.replace("memory: 256Mi", "memory: 200Mi"));
    let before = w.containers();
    let out = w.apply_with(&[]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("its command `/bin/agent.sh` is not an executable file"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(w.containers(), before);
    std::fs::remove_file(&files[0]).unwrap();
    w.apply();
    assert!(files[0].exists(), "found afresh and kept");
}

every_engine!(
    two_writers_commit_on_their_own_branches_and_the_person_collects_both,
    the_demo_writer_writes_its_repository,
    image_probe_findings_are_kept_by_image_id,
    a_session_no_manifest_wants_is_drift_until_pruned,
    apply_is_idempotent_and_recreates_only_what_changed,
    status_names_every_drift_and_apply_converges,
    delete_keeps_transcripts_and_purge_removes_them,
    logs_and_exec_look_inside,
    a_member_that_cannot_start_is_named_with_its_output,
    a_member_held_at_its_gate_is_released_by_the_next_apply,
    a_killed_apply_is_finished_by_the_next_one,
    concurrent_applies_serialize,
    logs_name_each_action_and_stay_off_stdout,
    attach_and_exec_it_at_a_terminal,
    logs_since_and_timestamps,
    image_pull_policies_against_a_local_registry,
    label_selectors_pick_members_and_teams,
    doctor_finds_the_engine_and_the_image,
    purge_after_a_plain_delete_removes_what_was_kept,
    roles_are_seen_from_inside_and_status_shows_the_sessions,
    a_member_is_promoted_by_editing_the_manifest,
    an_interrupted_promotion_is_finished_or_rolled_back,
    a_handover_writes_the_resume_file_and_reparents,
);

// ------------------------------------------------- main sessions: roles, promotion, handover

/// The team of the session cases: a lead session that writes its environment into its
/// transcript folder; `writer` (a Member, or a MainSession promoted from it: `writer_doc`)
/// with a transcript it writes once; `tester`, which works for writer. Both members write
/// ./workspace/repo, and say they share it.
fn sessions_team(w: &World, lead: &str, writer_doc: &str) -> String {
    format!(
        "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, maxDepth: 3}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: {lead}}}
spec:
  cwd: ./workspace/repo
  command: [sh, -c, 'env > \"$ATEAM_SESSION_DIR/env.txt\"; exec sleep 100000']
{extra}---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: repo}}
spec: {{write: [./workspace/repo]}}
---
{writer_doc}---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: tester}}
spec:
  parent: writer
  access: repo
  shareWrites: true
  command: [sh, -c, 'echo $ATEAM_ROLE $(hostname) $ATEAM_RELEASE > \"$ATEAM_SESSION_DIR/role\"; exec sleep 100000']
  restart: Always
",
        team = w.team,
        extra = if lead == "lead" {
            String::new()
        } else {
            "  takesOver: lead\n".to_string()
        },
    )
}

/// writer as a member: its transcript written once (so its checksums hold still).
const WRITER_MEMBER: &str = "apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: writer}
spec:
  parent: lead
  access: repo
  shareWrites: true
  command: [sh, -c, 'd=$ATEAM_SESSION_DIR; [ -f $d/transcript.log ] || { echo working > $d/transcript.log; mkdir $d/notes; seq 1 5000 > $d/notes/big.txt; }; exec sleep 100000']
  restart: Always
";

const WRITER_PROMOTED: &str = "apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: writer}
spec:
  cwd: ./workspace/repo
  promotedFrom: writer
  command: [sh, -c, 'env > \"$ATEAM_SESSION_DIR/session-env.txt\"; exec sleep 100000']
";

impl World {
    fn write_manifest(&self, yaml: &str) {
        std::fs::write(self.manifest(), yaml).unwrap();
    }

    fn apply_with(&self, env: &[(&str, &str)]) -> Output {
        let mut c = self.cmd(&["apply", "-f", self.manifest().to_str().unwrap()]);
        c.envs(env.iter().copied());
        c.output().unwrap()
    }

    fn session_socket(&self, name: &str) -> PathBuf {
        ateam::core::layout::session_socket_path(&self.state(), &self.team, name)
    }

    fn session_runs(&self, name: &str) -> bool {
        std::os::unix::net::UnixStream::connect(self.session_socket(name)).is_ok()
    }

    fn kill_sessions(&self) {
        for s in ["lead", "lead2", "writer"] {
            let _ = Command::new("tmux")
                .arg("-S")
                .arg(self.session_socket(s))
                .arg("kill-server")
                .output();
        }
    }

    /// The container's state as the engine says it (`running`, `exited`...).
    fn engine_state(&self, id: &str) -> String {
        let out = self.engine_cli(&["inspect", "--format", "{{.State.Status}}", id]);
        text(&out.stdout).trim().to_string()
    }
}

/// Every file under `dir`, by its path inside, with its content's checksum; but what the
/// promoted session itself writes there (`session-env.txt`).
fn checksums(dir: &Path) -> BTreeMap<PathBuf, String> {
    use sha2::{Digest, Sha256};
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let sum = Sha256::digest(std::fs::read(&p).unwrap());
                out.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    sum.iter().map(|b| format!("{b:02x}")).collect::<String>(),
                );
            }
        }
    }
    out.remove(Path::new("session-env.txt"));
    out
}

fn inode(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().ino()
}

fn row<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status["teams"][0]["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in status: {status:#}"))
}

fn roles_are_seen_from_inside_and_status_shows_the_sessions(engine: Engine) {
    let w = World::new(engine, "ro");
    w.write_manifest(&sessions_team(&w, "lead", WRITER_MEMBER));
    w.apply();
    let lead_dir = w.root().join("sessions/lead");
    wait_for(&lead_dir.join("env.txt"), "ATEAM_ROLE=main");
    let env = std::fs::read_to_string(lead_dir.join("env.txt")).unwrap();
    for want in [
        format!("ATEAM_TEAM={}", w.team),
        "ATEAM_NAME=lead".into(),
        format!("ATEAM_SESSION_DIR={}", lead_dir.display()),
    ] {
        assert!(env.lines().any(|l| l == want), "{want} not in\n{env}");
    }
    // A member: its command's own environment, and a shell run in it.
    let role = w.root().join("sessions/members/tester/role");
    wait_for(&role, "member");
    // The gate hands the command the release it ran on: this container, this start.
    let role = std::fs::read_to_string(&role).unwrap();
    let words: Vec<&str> = role.split_whitespace().collect();
    assert!(
        words.len() == 5 && words[2].starts_with(words[1]) && words[2].len() == 64,
        "{role}"
    );
    let pid1 = w.ateam(&[
        "exec",
        "tester",
        "--",
        "cut",
        "-d",
        " ",
        "-f",
        "22",
        "/proc/1/stat",
    ]);
    assert!(
        words[4] == text(&pid1.stdout).trim(),
        "release {role} vs init start {}",
        text(&pid1.stdout)
    );
    let out = w.ateam(&[
        "exec",
        "writer",
        "--",
        "sh",
        "-c",
        "echo $ATEAM_ROLE $ATEAM_TEAM $ATEAM_NAME",
    ]);
    assert_eq!(
        text(&out.stdout).trim(),
        format!("member {} writer", w.team),
        "{}",
        text(&out.stderr)
    );

    let s = w.status_json();
    let lead = row(&s, "lead");
    assert_eq!(lead["kind"], "MainSession");
    assert_eq!(lead["state"], "running");
    assert_eq!(
        lead["terminal"],
        w.session_socket("lead").display().to_string()
    );
    assert_eq!(lead["transcript"], lead_dir.display().to_string());
    assert!(lead["createdAt"].is_string(), "since when: {lead:#}");
    assert!(lead["lastActivityAt"].is_string(), "{lead:#}");
    let table = text(&w.ateam(&["status"]).stdout);
    assert!(
        table.contains(&format!(
            "lead: terminal `tmux -S {} attach`",
            w.session_socket("lead").display()
        )),
        "{table}"
    );
    w.kill_sessions();
}

fn a_member_is_promoted_by_editing_the_manifest(engine: Engine) {
    let w = World::new(engine, "pr");
    w.write_manifest(&sessions_team(&w, "lead", WRITER_MEMBER));
    w.apply();
    let from = w.root().join("sessions/members/writer");
    wait_for(&from.join("notes/big.txt"), "5000");
    let before = checksums(&from);
    let dir_inode = inode(&from);
    let ids = w.containers();
    let tester = ids[&w.name("tester")].clone();

    // Without promotedFrom: refused, nothing changes.
    let bare = WRITER_PROMOTED.replace("  promotedFrom: writer\n", "");
    w.write_manifest(&sessions_team(&w, "lead", &bare));
    let out = w.apply_with(&[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("`writer` was a Member of team")
            && text(&out.stderr).contains("promotedFrom: writer"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(w.containers(), ids);

    w.write_manifest(&sessions_team(&w, "lead", WRITER_PROMOTED));
    let diff = text(
        &w.ateam(&["diff", "-f", w.manifest().to_str().unwrap()])
            .stdout,
    );
    assert!(
        diff.contains("~ promote member writer to main session"),
        "{diff}"
    );
    w.apply();
    let to = w.root().join("sessions/writer");
    assert!(
        !from.exists(),
        "the member's transcript folder is moved away"
    );
    assert_eq!(inode(&to), dir_inode, "moved, not copied");
    wait_for(&to.join("session-env.txt"), "ATEAM_ROLE=main");
    assert_eq!(checksums(&to), before);
    let now = w.containers();
    assert!(!now.contains_key(&w.name("writer")), "{now:?}");
    assert_eq!(
        now[&w.name("tester")],
        tester,
        "the child keeps its container"
    );
    assert_eq!(w.engine_state(&tester), "running");
    let s = w.status_json();
    assert_eq!(row(&s, "writer")["kind"], "MainSession");
    assert_eq!(row(&s, "writer")["state"], "running");
    assert_eq!(row(&s, "tester")["parent"], "writer");
    assert!(
        !ateam::core::layout::promotion_path(&ateam::core::layout::session_dir(
            &w.state(),
            &w.team,
            "writer"
        ))
        .exists(),
        "the journal is gone once done"
    );
    let out = w.apply();
    assert!(
        text(&out.stdout).contains("no changes"),
        "{}",
        text(&out.stdout)
    );
    w.kill_sessions();
}

fn an_interrupted_promotion_is_finished_or_rolled_back(engine: Engine) {
    let w = World::new(engine, "pi");
    let member = sessions_team(&w, "lead", WRITER_MEMBER);
    let promoted = sessions_team(&w, "lead", WRITER_PROMOTED);
    w.write_manifest(&member);
    w.apply();
    let from = w.root().join("sessions/members/writer");
    let to = w.root().join("sessions/writer");
    wait_for(&from.join("notes/big.txt"), "5000");
    let before = checksums(&from);
    let journal = ateam::core::layout::promotion_path(&ateam::core::layout::session_dir(
        &w.state(),
        &w.team,
        "writer",
    ));
    // Killed after each recorded step, then the manifests go back to the member: the next
    // apply undoes the promotion and the member runs again with its transcript in place.
    for step in ["begun", "stopped", "moved", "started"] {
        w.write_manifest(&promoted);
        let out = w.apply_with(&[("ATEAM_TEST_PROMOTION", &format!("crash-after:{step}"))]);
        assert_eq!(
            out.status.code(),
            Some(137),
            "{step}: {}",
            text(&out.stderr)
        );
        assert!(
            journal.exists(),
            "{step}: the journal records how far it got"
        );
        w.write_manifest(&member);
        w.apply();
        assert!(!journal.exists(), "{step}");
        assert!(!w.session_runs("writer"), "{step}: the session is stopped");
        assert_eq!(checksums(&from), before, "{step}: the transcript is back");
        assert!(
            !to.exists() || std::fs::read_dir(&to).unwrap().next().is_none(),
            "{step}"
        );
        let id = &w.containers()[&w.name("writer")];
        assert_eq!(w.engine_state(id), "running", "{step}");
    }
    // A step that fails: rolled back at once, the member left stopped where it was.
    w.write_manifest(&promoted);
    let out = w.apply_with(&[("ATEAM_TEST_PROMOTION", "fail-after:moved")]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("failed on purpose after step `moved`"),
        "{}",
        text(&out.stderr)
    );
    assert!(!journal.exists());
    assert_eq!(checksums(&from), before);
    assert!(!w.session_runs("writer"));
    let id = w.containers()[&w.name("writer")].clone();
    assert_ne!(w.engine_state(&id), "running", "the member stays stopped");
    // Killed half way, and the manifests still ask for it: the next apply finishes it.
    let out = w.apply_with(&[("ATEAM_TEST_PROMOTION", "crash-after:moved")]);
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    w.apply();
    assert!(!journal.exists());
    assert!(w.session_runs("writer"));
    assert_eq!(checksums(&to), before);
    assert!(!w.containers().contains_key(&w.name("writer")));
    w.kill_sessions();
}

fn a_handover_writes_the_resume_file_and_reparents(engine: Engine) {
    let w = World::new(engine, "ho");
    w.write_manifest(&sessions_team(&w, "lead", WRITER_MEMBER));
    w.apply();
    wait_for(
        &w.root().join("sessions/members/writer/transcript.log"),
        "working",
    );
    let ids = w.containers();
    // lead removed, nobody takes over: refused, naming the members that report to it.
    let orphaned =
        sessions_team(&w, "lead", WRITER_MEMBER).replacen("name: lead}", "name: lead2}", 1);
    w.write_manifest(&orphaned);
    let out = w.apply_with(&[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("MainSession `lead` is removed, and members report to it: writer"),
        "{}",
        text(&out.stderr)
    );
    // lead2 takes over: the members keep their containers and report to it.
    w.write_manifest(&sessions_team(&w, "lead2", WRITER_MEMBER).replacen(
        "name: lead}",
        "name: lead2}",
        1,
    ));
    w.apply();
    assert_eq!(w.containers(), ids);
    assert!(w.session_runs("lead2"));
    assert!(!w.session_runs("lead"), "lead2 resumes where lead stopped");
    let resume = w.root().join("sessions/lead2/RESUME.md");
    let text_ = std::fs::read_to_string(&resume).unwrap();
    assert!(
        text_.contains("taken over from `lead` by `lead2`"),
        "{text_}"
    );
    assert!(text_.contains("## writer (running)"), "{text_}");
    assert!(text_.contains("## tester (running)"), "{text_}");
    assert!(
        text_.contains("(`notes/big.txt`)") && text_.contains("      5000\n"),
        "writer's last activity and the last lines of its newest transcript file: {text_}"
    );
    let s = w.status_json();
    assert_eq!(row(&s, "writer")["parent"], "lead2");
    assert_eq!(row(&s, "lead2")["state"], "running");

    // Every session and member gone from the manifests while the members still run (kept,
    // without --prune): refused, naming them; nothing changes.
    let team_only: String = w
        .manifest()
        .to_str()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .unwrap()
        .split("---\n")
        .filter(|d| d.contains("kind: Team") || d.contains("kind: AccessGrant"))
        .collect::<Vec<_>>()
        .join("---\n");
    w.write_manifest(&team_only);
    let out = w.apply_with(&[]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("would have no MainSession while its members tester, writer still run"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(w.containers(), ids);
    w.kill_sessions();
}

// ------------------------------------------------------------------- workspaces

/// git as the person in their repository (the test runs as root: the person's checkout is
/// uid 1000's, so ownership is not git's business here).
fn person_git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(repo)
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

/// Every file of the person's `.git` but objects and the refs ateam writes, with its bytes.
fn git_files(dir: &Path, rel: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for e in std::fs::read_dir(dir.join(rel)).unwrap() {
        let e = e.unwrap();
        let r = rel.join(e.file_name());
        if r.starts_with("objects")
            || r.starts_with("refs/ateam")
            || r.starts_with("refs/heads/bob-work")
            || r.starts_with("logs/refs/heads/bob-work")
        {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            git_files(dir, &r, out);
        } else {
            out.push((r, std::fs::read(e.path()).unwrap()));
        }
    }
}

/// A writer with a workspace: commits once on its own branch (git of Debian's, in the
/// clients' image), then waits.
fn writer(name: &str) -> String {
    format!(
        "---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: {name}}}
spec:
  parent: lead
  image: ateam-clients:latest
  workspace: {{repo: ./workspace/repo}}
  command: [sh, -c, 'echo {name} > {name}.txt && git add {name}.txt && git -c user.name={name} -c user.email={name}@x commit -qm \"{name} was here\" && git log --format=%s -1 > \"$ATEAM_SESSION_DIR/done\"; exec sleep 100000']
"
    )
}

/// The new user's goal: two agents on their own branches of one repository. Each member gets
/// a repository of its own (the person's objects shared read-only), commits on
/// `ateam/<team>/<member>`; `changes` shows it, `collect` brings both into the person's
/// repository, whose `.git` is byte-identical but for the refs ateam wrote (and objects).
fn two_writers_commit_on_their_own_branches_and_the_person_collects_both(engine: Engine) {
    let w = World::new(engine, "ws");
    let repo = w.root().join("workspace/repo");
    person_git(&repo, &["init", "-q", "-b", "main"]);
    person_git(&repo, &["add", "-A"]);
    person_git(&repo, &["commit", "-qm", "first"]);
    chown_tree(&repo, PERSON.0, PERSON.1);
    let mut before = Vec::new();
    git_files(&repo.join(".git"), Path::new(""), &mut before);
    w.write_manifest(&format!(
        "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{cwd: ./workspace/repo, command: [sleep, \"100000\"]}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: notes}}
spec: {{write: [./workspace/docs]}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: notes}}
spec:
  parent: lead
  access: notes
  snapshotWrites: 1Mi
  command: [sh, -c, 'echo note >> note.txt; exec sleep 100000']
{alice}{bob}",
        team = w.team,
        alice = writer("alice"),
        bob = writer("bob"),
    ));
    w.apply();
    for m in ["alice", "bob"] {
        wait_for(
            &w.root().join(format!("sessions/members/{m}/done")),
            &format!("{m} was here"),
        );
    }
    // Each on its own branch, in its own folder; the person's checkout untouched.
    let ws = |m: &str| w.root().join(format!("sessions/workspaces/{m}"));
    assert!(ws("alice").join("alice.txt").exists() && !ws("alice").join("bob.txt").exists());
    assert!(!repo.join("alice.txt").exists());
    let out = w.ateam(&["changes", "alice"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains(&format!("branch ateam/{}/alice", w.team))
            && shown.contains("alice was here"),
        "{shown}"
    );
    let out = w.ateam(&["snapshots", "notes"]);
    assert!(
        text(&out.stdout).contains("copy  before start"),
        "a plain write grant, copied before its start: {}",
        text(&out.stdout)
    );
    let out = w.ateam(&["snapshots", "bob"]);
    assert!(
        text(&out.stdout).contains("workspace  before start"),
        "{}",
        text(&out.stdout)
    );
    // Status shows each writer's branch and how far its work is.
    let ws_row = |s: &serde_json::Value, m: &str| row(s, m)["workspace"].clone();
    let s = w.status_json();
    let a = ws_row(&s, "alice");
    assert_eq!(a["branch"], format!("ateam/{}/alice", w.team), "{a}");
    assert_eq!(
        (a["ahead"].as_u64(), a["uncollected"].as_u64()),
        (Some(1), Some(1)),
        "{a}"
    );
    assert_eq!(a["uncommitted"].as_u64(), Some(0), "{a}");
    let doctor = text(&w.ateam(&["doctor"]).stdout);
    assert!(
        doctor.contains("alice: 0 file(s) not committed, 1 commit(s) not collected"),
        "{doctor}"
    );
    // Collected: as refs of ateam's, and bob's also into a branch; nothing checked out.
    for args in [
        vec!["collect", "alice"],
        vec!["collect", "bob", "--into", "bob-work"],
    ] {
        let out = w.ateam(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    let alice = format!("refs/ateam/{}/alice", w.team);
    assert_eq!(
        person_git(&repo, &["log", "-1", "--format=%s", &alice]),
        "alice was here"
    );
    assert_eq!(
        person_git(&repo, &["log", "-1", "--format=%s", "bob-work"]),
        "bob was here"
    );
    assert_eq!(
        person_git(&repo, &["show", &format!("{alice}:alice.txt")]),
        "alice"
    );
    person_git(&repo, &["fsck", "--strict", "--no-dangling"]);
    // (Each `ateam status` reads afresh: the figures' cache lives in one process.)
    let s = w.status_json();
    assert_eq!(ws_row(&s, "bob")["uncollected"].as_u64(), Some(0), "{s:#}");
    let mut after = Vec::new();
    git_files(&repo.join(".git"), Path::new(""), &mut after);
    before.sort();
    after.sort();
    assert_eq!(
        before, after,
        "the person's .git changed beyond the refs ateam wrote"
    );
    // The person's own git works on what came back, as the person.
    let out = Command::new("git")
        .current_dir(&repo)
        .uid_gid(PERSON)
        .args(["log", "--oneline", "bob-work"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

trait AsPerson {
    fn uid_gid(&mut self, who: (u32, u32)) -> &mut Self;
}

impl AsPerson for Command {
    fn uid_gid(&mut self, (uid, gid): (u32, u32)) -> &mut Self {
        use std::os::unix::process::CommandExt;
        self.uid(uid).gid(gid).env("HOME", "/nonexistent")
    }
}
