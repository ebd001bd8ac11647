//! Faults of the machine (issue 18): a full state folder (a small tmpfs), one made read-only, a
//! record from a newer ateam, a lock file naming a dead process, and the engine going away in
//! the middle of an apply. Each time ateam says what is wrong (exit 6 for the state folder),
//! changes nothing it cannot finish, keeps running members running, and the next apply once
//! the fault is gone converges. The real binary against real Docker and rootful Podman, as
//! root (mounting needs it). Ignored by a plain `cargo test`: scripts/test.sh runs it.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::faulty_socket::{Fault, FaultySocket};
use common::private_engine::PrivateEngine;
use common::{Engine, engine_uri, text};

const TEAM: &str = r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: TEAM}
spec: {image: ateam-demo:latest, sessionDir: ../sessions}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: lead}
spec: {command: [sleep, "100000"], cwd: ../repo}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: rw}
spec: {write: [../repo]}
"#;

/// The common world (`common::World`: engine, folder, team, `ateam`, teardown, the engine
/// of the test's own when it has one) and what is this crate's own: a state folder on a
/// tmpfs of its own.
struct World {
    w: common::World,
    /// The state folder is a tmpfs of this test's (unmounted on drop).
    mounted: bool,
}

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.w
    }
}

impl std::ops::DerefMut for World {
    fn deref_mut(&mut self) -> &mut common::World {
        &mut self.w
    }
}

impl World {
    /// A world whose state folder is a tmpfs of `size` when given.
    fn new(engine: Engine, tag: &str, size: Option<&str>) -> World {
        let mut w = World {
            w: common::World::new(engine, "faults", tag),
            mounted: false,
        };
        w.dirs(&["repo", "sessions", "manifests", "state"]);
        std::os::unix::fs::chown(w.path("repo"), Some(65534), Some(65534)).unwrap();
        if let Some(size) = size {
            let st = w.state();
            let out = Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
                .arg("tmpfs")
                .arg(&st)
                .output()
                .unwrap();
            assert!(out.status.success(), "mount: {}", text(&out.stderr));
            w.mounted = true;
        }
        w
    }

    /// The manifests: the team and `members` members (`m0`, `m1`, ...), sharing the one
    /// folder `rw` writes (and saying so).
    fn members(&self, members: usize) {
        let mut yaml = TEAM.replace("TEAM", &self.team);
        for i in 0..members {
            yaml.push_str(&format!(
                "---\napiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {{name: m{i}}}\nspec: {{parent: lead, access: rw, restart: Always, resources: {{memory: 32Mi, pids: 32}}, shareWrites: true}}\n"
            ));
        }
        std::fs::write(self.root().join("manifests/team.yaml"), yaml).unwrap();
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.command();
        c.args(args).stdin(Stdio::null());
        c
    }

    fn ateam(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn apply(&self) -> Output {
        let manifests = self.root().join("manifests");
        self.ateam(&["apply", "-f", manifests.to_str().unwrap()])
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = self.engine_cli().args(args).output().unwrap();
        text(&out.stdout).trim().to_string()
    }

    /// Every container of the team: (name, id, running), sorted by name.
    fn containers(&self) -> Vec<(String, String, bool)> {
        let ids = self.cli(&[
            "ps",
            "-a",
            "-q",
            "--no-trunc",
            "--filter",
            &format!("label=ateam.dev/team={}", self.team),
        ]);
        let mut out: Vec<(String, String, bool)> = ids
            .lines()
            .map(|id| {
                let s = self.cli(&["inspect", "--format", "{{.Name}} {{.State.Running}}", id]);
                let (name, running) = s.split_once(' ').unwrap_or((&s, "false"));
                let name = name.trim_start_matches('/').to_string();
                (name, id.to_string(), running == "true")
            })
            .collect();
        out.sort();
        out
    }

    /// Exactly one container per member `m0..m{n}`, each running, and no other.
    fn assert_one_each(&self, n: usize) {
        let names: Vec<String> = self.containers().into_iter().map(|c| c.0).collect();
        let mut want: Vec<String> = (0..n)
            .map(|i| format!("ateam_{}_m{i}", self.team))
            .collect();
        want.sort();
        assert_eq!(names, want, "{:?}", self.containers());
        let out = self.ateam(&["status", &self.team, "--exit-code"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    }

    /// Fills the state folder's file system; the filler is returned, to free it.
    fn fill(&self) -> PathBuf {
        let filler = self.state().join("filler");
        let _ = Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", filler.display()))
            .arg("bs=4k")
            .output()
            .unwrap();
        let st = rustix::fs::statvfs(self.state()).unwrap();
        assert_eq!(st.f_bavail, 0, "the state folder is full");
        filler
    }

    fn remount(&self, how: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{how}")])
            .arg(self.state())
            .output()
            .unwrap();
        assert!(out.status.success(), "remount: {}", text(&out.stderr));
    }
}

impl Drop for World {
    /// The state folder writable and emptied of its filler, the team ended (the common
    /// world), then the tmpfs unmounted.
    fn drop(&mut self) {
        if self.mounted {
            self.remount("rw");
            let _ = std::fs::remove_file(self.state().join("filler"));
        }
        self.w.remove();
        if self.mounted {
            let _ = Command::new("umount").arg("-l").arg(self.state()).status();
        }
    }
}

/// Every record in the state folder still reads as JSON: none was left cut or half written.
fn assert_records_whole(state: &Path) {
    let mut stack = vec![state.to_path_buf()];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = e.path();
            let kind = e.file_type().unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if kind.is_dir() {
                stack.push(path);
            } else if name.contains(".tmp-") {
                panic!("a temp file left behind: {}", path.display());
            } else if name.ends_with(".json") {
                let bytes = std::fs::read(&path).unwrap();
                serde_json::from_slice::<serde_json::Value>(&bytes)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                seen += 1;
            }
        }
    }
    assert!(seen > 0, "no record found under {}", state.display());
}

/// Says the state folder, and the cause once (not "PATH: cause: PATH: cause: cause").
fn assert_says(out: &Output, state: &Path, cause: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error said: {err}"));
    assert!(line.contains(&state.display().to_string()), "{err}");
    assert_eq!(line.matches(cause).count(), 1, "{err}");
}

/// The state folder fills up during an apply that adds a member: exit 6 naming it, no
/// record cut, the running members untouched; once space is freed the next apply converges.
fn a_full_state_folder_fails_cleanly_then_converges(engine: Engine) {
    let w = World::new(engine, "full", Some("2m"));
    w.members(3);
    let out = w.apply();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let before = w.containers();
    let filler = w.fill();
    w.members(4);
    let out = w.apply();
    assert_says(&out, &w.state(), "No space left on device");
    assert_records_whole(&w.state());
    let now: Vec<_> = w
        .containers()
        .into_iter()
        .filter(|c| !c.0.ends_with("_m3"))
        .collect();
    assert_eq!(now, before, "the running members keep running, untouched");
    std::fs::remove_file(filler).unwrap();
    let out = w.apply();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    w.assert_one_each(4);
}

/// The state folder fills up under a running controller while an edit adds a member: the
/// controller keeps running (and says why it cannot record), the running members are
/// untouched, no record is cut; once space is freed it converges without being restarted.
fn a_full_state_folder_under_the_controller(engine: Engine) {
    let w = World::new(engine, "ctlfull", Some("2m"));
    w.members(2);
    let log_path = w.root().join("controller.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut controller = w
        .cmd(&["controller", "-f", "manifests"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let until = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !ok() {
            assert!(Instant::now() < deadline, "never {what}; log:\n{}", log());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let converged = || w.ateam(&["status", &w.team, "--exit-code"]).status.code() == Some(0);
    until("converged", &|| converged() && w.containers().len() == 2);
    let before = w.containers();
    let filler = w.fill();
    w.members(3);
    until("said the disk is full", &|| {
        log().contains("No space left on device")
    });
    assert!(
        controller.try_wait().unwrap().is_none(),
        "the controller died:\n{}",
        log()
    );
    assert_records_whole(&w.state());
    let now: Vec<_> = w
        .containers()
        .into_iter()
        .filter(|c| !c.0.ends_with("_m2"))
        .collect();
    assert_eq!(now, before, "the running members keep running, untouched");
    std::fs::remove_file(filler).unwrap();
    until("converged once space was freed", &|| {
        converged() && w.containers().len() == 3
    });
    let _ = Command::new("kill")
        .args(["-TERM", &controller.id().to_string()])
        .status();
    let _ = controller.wait();
    w.assert_one_each(3);
}

/// A state folder made read-only: exit 6 naming it, nothing changed on the engine.
fn a_read_only_state_folder_changes_nothing(engine: Engine) {
    let w = World::new(engine, "ro", Some("4m"));
    w.members(2);
    let out = w.apply();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let before = w.containers();
    w.remount("ro");
    w.members(3);
    let out = w.apply();
    assert_says(&out, &w.state(), "Read-only file system");
    assert_eq!(w.containers(), before);
    w.remount("rw");
    let out = w.apply();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    w.assert_one_each(3);
}

/// A member record of a later ateam's format: refused before anything is changed (before,
/// it read as empty, and the apply replaced the member and overwrote the record).
fn a_record_from_a_newer_ateam_changes_nothing(engine: Engine) {
    let w = World::new(engine, "newer", None);
    w.members(2);
    let out = w.apply();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let before = w.containers();
    let record = w
        .state()
        .join("teams")
        .join(&w.team)
        .join("members/m0/containers.json");
    let future = format!(r#"{{"version":99,"ids":["{}"],"more":{{}}}}"#, before[0].1);
    std::fs::write(&record, &future).unwrap();
    let out = w.apply();
    let err = text(&out.stderr);
    assert_says(&out, &record, "newer ateam");
    assert!(err.contains("record version 99"), "{err}");
    assert_eq!(w.containers(), before);
    assert_eq!(std::fs::read_to_string(&record).unwrap(), future);
}

/// A lock file left by a process that died: its `flock` went with it, so apply neither
/// waits nor says it waits.
fn a_lock_left_by_a_dead_process_is_free(engine: Engine) {
    let w = World::new(engine, "lock", None);
    w.members(1);
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    std::fs::write(w.state().join("lock"), format!("pid {dead}\n")).unwrap();
    let out = w
        .cmd(&["apply", "--no-wait", "-f", "manifests"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("waiting"), "{err}");
    w.assert_one_each(1);
}

/// The engine goes away in the middle of an apply of ten members (after the first is
/// ready): the next apply, once it is back, converges with one container per member.
fn the_engine_gone_mid_apply_then_the_next_apply_converges(engine: Engine) {
    // Declared first, dropped last: the world's clean-up still talks to it.
    let mut eng = PrivateEngine::new(Engine::Docker);
    let mut w = World::new(engine, "gone", None);
    w.set_uri(Some(eng.uri()));
    w.members(10);
    let mut child = w
        .cmd(&["apply", "--concurrency", "2", "-f", "manifests"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.ends_with(": ready") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let first = rx.recv_timeout(Duration::from_secs(120));
    assert!(first.is_ok(), "no member became ready");
    eng.stop();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "apply never ended");
        std::thread::sleep(Duration::from_millis(50));
    };
    let said = reader.join().unwrap();
    assert!(
        !status.success(),
        "apply succeeded without its engine:\n{said}"
    );
    eng.start();
    let made = w.containers().len();
    assert!(made > 0, "nothing was made before the engine went:\n{said}");
    let out = w.apply();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    w.assert_one_each(10);
}

/// A replacement is released (its command runs), then its old container cannot be removed
/// (the engine fails that one call): the new container's start is in ateam's events all the
/// same, so that every start of a member's command can be found as one ateam released (the
/// soak saw one with none, when an engine restart fell between the two steps); the next
/// apply converges with one container.
fn a_replacement_whose_old_container_stays_says_its_start(engine: Engine) {
    let mut w = World::new(engine, "half", None);
    w.members(1);
    let out = w.apply();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let old = w.containers()[0].1.clone();
    let path = w.root().join("manifests/team.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, yaml.replace("memory: 32Mi", "memory: 48Mi")).unwrap();
    let upstream = engine_uri(engine);
    let short = old[..12].to_string();
    let socket = FaultySocket::new(
        &upstream,
        Box::new(move |method, target, _| {
            if method == "DELETE" && target.contains(&short) {
                Fault::Fail
            } else {
                Fault::Pass
            }
        }),
    );
    w.set_uri(Some(socket.uri()));
    let out = w.apply();
    w.set_uri(None);
    let said = text(&out.stderr);
    assert!(
        socket.injected() > 0,
        "the old container was never removed:\n{said}"
    );
    assert!(
        !out.status.success(),
        "apply succeeded with the fault:\n{said}"
    );
    let now = w.containers();
    let new: Vec<&String> = now
        .iter()
        .filter(|(_, id, running)| *id != old && *running)
        .map(|(_, id, _)| id)
        .collect();
    assert_eq!(new.len(), 1, "{now:?}\n{said}");
    let out = w.ateam(&["events", &w.team, "-o", "json"]);
    let events: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let starts = ["created", "replaced", "started", "restarted", "released"];
    let released = events.iter().any(|e| {
        starts.contains(&e["kind"].as_str().unwrap_or(""))
            && e["container"]
                .as_str()
                .is_some_and(|c| !c.is_empty() && new[0].starts_with(c))
    });
    assert!(
        released,
        "no event says {} was started: {events:#?}",
        new[0]
    );
    let out = w.apply();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    w.assert_one_each(1);
}

/// A member's command runs from its release on, while the apply that made it may still be
/// making others (here the engine holds the second member's create): `exec` finds the first
/// one at once, through the record of what was applied (it was written after the whole run,
/// so a member just up was `no applied team has a member` until then).
fn a_member_up_is_found_while_its_apply_goes_on(engine: Engine) {
    let mut w = World::new(engine, "early", None);
    w.members(2);
    let upstream = engine_uri(engine);
    let second = format!("ateam_{}_m1", w.team);
    let socket = FaultySocket::new(
        &upstream,
        Box::new(move |method, target, body| {
            let named = target.contains(&second)
                || String::from_utf8_lossy(body).contains(&format!("\"{second}\""));
            if method == "POST" && target.contains("/containers/create") && named {
                Fault::Hold
            } else {
                Fault::Pass
            }
        }),
    );
    w.set_uri(Some(socket.uri()));
    let mut apply = w
        .cmd(&["apply", "--concurrency", "2", "-f", "manifests"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    w.set_uri(None);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last;
    loop {
        last = w.ateam(&["exec", "m0", "--", "true"]);
        if last.status.success() {
            break;
        }
        assert!(
            apply.try_wait().unwrap().is_none(),
            "the apply ended before the test let the held create go"
        );
        assert!(
            Instant::now() < deadline,
            "exec never found m0 while its apply went on: {}",
            text(&last.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(socket.injected() > 0, "the second create was never held");
    assert!(
        apply.try_wait().unwrap().is_none(),
        "the apply was not still going"
    );
    socket.let_go();
    assert!(apply.wait().unwrap().success());
    w.assert_one_each(2);
}

macro_rules! on_engines {
    ($($case:ident),* $(,)?) => {
        mod docker {
            $( #[test] #[ignore = "needs the engines: scripts/engines.sh"]
               fn $case() { super::$case(super::Engine::Docker) } )*
        }
        mod podman {
            $( #[test] #[ignore = "needs the engines: scripts/engines.sh"]
               fn $case() { super::$case(super::Engine::Podman) } )*
        }
    };
}

on_engines!(
    a_full_state_folder_fails_cleanly_then_converges,
    a_full_state_folder_under_the_controller,
    a_read_only_state_folder_changes_nothing,
    a_record_from_a_newer_ateam_changes_nothing,
    a_lock_left_by_a_dead_process_is_free,
    a_replacement_whose_old_container_stays_says_its_start,
    a_member_up_is_found_while_its_apply_goes_on,
);

mod private_docker {
    #[test]
    #[ignore = "needs the engines: scripts/engines.sh"]
    fn the_engine_gone_mid_apply_then_the_next_apply_converges() {
        super::the_engine_gone_mid_apply_then_the_next_apply_converges(super::Engine::Docker)
    }
}
