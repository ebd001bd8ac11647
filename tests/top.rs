//! Watching a team on real engines (Docker and rootful Podman): `ateam top` driven in a real
//! terminal (tmux, 80x24: send-keys, capture-pane) shows a member going from running to
//! exited, a refusal appearing and a selected member's output, and `q` gives the terminal back
//! as it was; `status -w` prints a new document soon after a change. Ignored by a plain
//! `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::io::BufRead;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[macro_use]
mod common;
use common::terminal::Terminal;
use common::{Engine, text, var};

on_every_engine!(docker: top_shows_a_team_at_work_and_q_gives_the_terminal_back, status_watch_prints_each_change);
on_every_engine!(podman: top_shows_a_team_at_work_and_q_gives_the_terminal_back, status_watch_prints_each_change);

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
    fn new(engine: Engine, tag: &str) -> World {
        let w = World(common::World::new(engine, "top", tag).without_purge());
        w.dirs(&["work", "state", "sessions"]);
        std::os::unix::fs::chown(w.root().join("work"), Some(65534), Some(65534)).unwrap();
        // alpha and beta both write ./work, and say they share it: one writer per folder is
        // not what these cases are about.
        let yaml = format!(
            r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g}}
spec: {{write: [./work], network: {{allow: [example.com]}}}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: alpha}}
spec: {{parent: lead, access: g, restart: Never, resources: {{memory: 64Mi, pids: 64}}, shareWrites: true, secretEnv: [TOP_SECRET], command: [sh, -c, "echo hello-from-alpha; exec sleep 100000"]}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: beta}}
spec: {{parent: lead, access: g, restart: Never, resources: {{memory: 64Mi, pids: 64}}, shareWrites: true, command: [sleep, "100000"]}}
"#,
            team = w.team
        );
        std::fs::write(w.root().join("team.yaml"), yaml).unwrap();
        w
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = common::ateam_command(self.engine, &self.root().join("state"));
        c.args(args)
            .env_remove("RUST_LOG")
            .current_dir(self.root())
            .stdin(Stdio::null());
        c
    }

    fn ateam(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// Applied with alpha's secret, which the shell `top` runs in does not have.
    fn apply(&self) {
        let out = self
            .cmd(&["apply", "-f", "team.yaml"])
            .env("TOP_SECRET", "s3cret")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }

    fn container(&self, member: &str) -> String {
        format!("ateam_{}_{member}", self.team)
    }

    fn container_id(&self, member: &str) -> String {
        let out = common::engine_command(self.engine, false)
            .args(["inspect", "-f", "{{.Id}}", &self.container(member)])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    }

    /// The engine's CLI stops the member's container at once (as a crash would).
    fn kill(&self, member: &str) {
        let out = common::engine_command(self.engine, false)
            .args(["kill", &self.container(member)])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    }

    /// `ateam top` as a person starts it in a shell: the shell's line before it and after it
    /// stay on the screen, and `stty` says how the terminal was left.
    fn top(&self) -> Terminal {
        let backend = match self.engine {
            Engine::Docker => "docker",
            Engine::Podman | Engine::Rootless => "podman",
        };
        let command = format!(
            "echo before-top; env ATEAM_STATE_DIR={} DOCKER_HOST={} CONTAINER_HOST={} {} --backend {backend} top; echo after-top; stty -a | tr ' ' '\\n' | grep -x -- '-\\?icanon\\|-\\?echo'; sleep 100000",
            self.root().join("state").display(),
            var("ATEAM_TEST_DOCKER"),
            var("ATEAM_TEST_PODMAN_ROOTFUL"),
            common::ateam_bin(),
        );
        Terminal::new(&self.root(), 80, 24, &command)
    }
}

impl Drop for World {
    /// The team (`delete`, no purge), then the lead's tmux server.
    fn drop(&mut self) {
        self.0.remove();
        let socket = self
            .root()
            .join(format!("state/teams/{}/sessions/lead/tmux.sock", self.team));
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(socket)
            .arg("kill-server")
            .stderr(Stdio::null())
            .status();
    }
}

/// The table row of `member` on `screen`.
fn row<'a>(screen: &'a str, team: &str, member: &str) -> Option<&'a str> {
    let name = format!("{team}/{member} ");
    screen.lines().find(|l| l.starts_with(&name))
}

fn top_shows_a_team_at_work_and_q_gives_the_terminal_back(engine: Engine) {
    let w = World::new(engine, "tp");
    w.apply();
    let t = w.top();
    let team = w.team.clone();
    let running = |s: &str| {
        ["alpha", "beta"]
            .iter()
            .all(|m| row(s, &team, m).is_some_and(|r| r.contains("running")))
    };
    let s = t.wait_until("both members running", running);
    assert!(s.contains("ateam top"), "{s}");
    assert!(
        row(&s, &team, "lead").is_some_and(|r| r.contains("running (tty)")),
        "the main session is a row: {s}"
    );
    assert!(
        row(&s, &team, "alpha").unwrap().contains("/64M"),
        "memory against its cap: {s}"
    );
    // A member goes from running to exited.
    w.kill("beta");
    t.wait_until("beta exited", |s| {
        row(s, &team, "beta").is_some_and(|r| r.contains("exited"))
    });
    // A refusal appears in the last minute's column: allowed/refused.
    let out = w.ateam(&[
        "exec",
        "alpha",
        "--team",
        &w.team,
        "--",
        "sh",
        "-c",
        "wget -q -O /dev/null http://refused.example/ 2>&1; true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    t.wait_until("alpha's refusal counted", |s| {
        row(s, &team, "alpha").is_some_and(|r| r.contains("0/1"))
    });
    // The selected member's output, then its egress decisions.
    let lines: Vec<String> = t.screen().lines().map(str::to_string).collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(&format!("{team}/alpha ")))
        .unwrap();
    let first = lines
        .iter()
        .position(|l| l.starts_with(&format!("{team}/")))
        .unwrap();
    for _ in first..at {
        t.keys(&["Down"]);
    }
    t.wait_for("hello-from-alpha");
    t.keys(&["Tab"]);
    t.wait_until("the refusal in alpha's egress decisions", |s| {
        s.contains("REFUSED") && s.contains("refused.example")
    });
    // A restart asks first, and is judged whole before anything goes: top's shell lacks
    // alpha's secret, so alpha keeps its container, and the refusal is said and recorded.
    let before = w.container_id("alpha");
    t.keys(&["r"]);
    t.wait_for("y/n");
    t.keys(&["y"]);
    t.wait_for(&format!("{}/alpha not restarted", w.team));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        w.container_id("alpha"),
        before,
        "a refused restart removed nothing"
    );
    assert!(row(&t.screen(), &team, "alpha").is_some_and(|r| r.contains("running")));
    let events = text(&w.ateam(&["events", &w.team]).stdout);
    assert!(
        events.contains("refused") && events.contains("TOP_SECRET"),
        "{events}"
    );
    // The same through `ateam restart`, with the secret: a new container through the gate.
    let out = w.ateam(&["restart", "alpha"]);
    assert_ne!(out.status.code(), Some(0), "restarted without its secret");
    assert!(
        text(&out.stderr).contains("refused before anything changed"),
        "{}",
        text(&out.stderr)
    );
    let out = w
        .cmd(&["restart", "alpha"])
        .env("TOP_SECRET", "s3cret")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_ne!(w.container_id("alpha"), before, "a new container");
    // beta exited: top's restart gives it a new container, running.
    let exited = w.container_id("beta");
    let beta = lines
        .iter()
        .position(|l| l.starts_with(&format!("{team}/beta ")))
        .unwrap();
    assert!(beta > at, "rows by name: {lines:#?}");
    for _ in at..beta {
        t.keys(&["Down"]);
    }
    t.keys(&["r"]);
    t.wait_for("y/n");
    t.keys(&["y"]);
    t.wait_for(&format!("{}/beta restarted", w.team));
    assert_ne!(w.container_id("beta"), exited, "a new container");
    t.wait_until("both running again", |s| {
        ["alpha", "beta"]
            .iter()
            .all(|m| row(s, &team, m).is_some_and(|r| r.contains("running")))
    });
    t.keys(&["?"]);
    t.wait_for("any key closes");
    t.keys(&["x"]);
    t.wait_until("the keys closed", |s| !s.contains("any key closes"));
    t.keys(&["q"]);
    let s = t.wait_until("the shell after top, and stty's word", |s| {
        s.lines()
            .skip_while(|l| !l.contains("after-top"))
            .any(|l| l.trim().ends_with("echo"))
    });
    assert!(
        s.contains("before-top"),
        "what was on the screen is back: {s}"
    );
    assert!(!s.contains("ateam top"), "the dashboard is gone: {s}");
    let modes: Vec<&str> = s
        .lines()
        .skip_while(|l| !l.contains("after-top"))
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        modes,
        ["icanon", "echo"],
        "the terminal is cooked again: {s}"
    );
}

fn status_watch_prints_each_change(engine: Engine) {
    let w = World::new(engine, "sw");
    w.apply();
    let mut child = w
        .cmd(&["status", "-w", "-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    let state = |line: &str, member: &str| -> String {
        let d: serde_json::Value = serde_json::from_str(line).unwrap();
        d["teams"][0]["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == member)
            .map(|m| m["state"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    let (_, first) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(state(&first, "beta"), "running", "{first}");
    // Nothing changes: nothing more is printed (times and usage figures move, not the state).
    assert!(
        rx.recv_timeout(Duration::from_secs(3)).is_err(),
        "printed again with no change"
    );
    let mut latencies = vec![];
    for member in ["beta", "alpha"] {
        w.kill(member);
        let killed = Instant::now();
        let (at, line) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(state(&line, member).starts_with("exited"), "{line}");
        latencies.push(at.duration_since(killed));
    }
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("status -w printed a change after {latencies:?}");
    // Within a second, as the issue asks (the watch looks every 250 ms; seen: 40-200 ms).
    for l in &latencies {
        assert!(*l < Duration::from_secs(1), "{latencies:?}");
    }
}
