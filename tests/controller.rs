//! `ateam controller` as a user runs it: the real binary in the background against a real
//! engine (Docker and rootful Podman), judged from the engine's CLI and `ateam status`.
//! Run by scripts/test.sh once the engines are up; ignored by a plain `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::private_engine::PrivateEngine;
use common::{Engine, text};

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

/// A member of the World's team (or of a second team in its store). They share the one
/// folder `rw` writes (one writer per folder is not what these cases are about), and say so.
fn member(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {{name: {name}}}\nspec: {{parent: lead, access: rw, restart: Always, resources: {{memory: 64Mi, pids: 64}}, shareWrites: true{extra}}}\n"
    )
}

/// The common world (`common::World`: engine, folder, team, `ateam`, teardown, the engine
/// of the test's own when it has one) and what is this crate's own: the controller it runs.
struct World {
    w: common::World,
    controller: Option<Child>,
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
    fn new(engine: Engine, tag: &str) -> World {
        let w = World {
            w: common::World::new(engine, "ctl", tag),
            controller: None,
        };
        w.dirs(&["repo", "sessions", "manifests"]);
        // Members run as nobody (ateam runs as root here): their write grant is theirs.
        std::os::unix::fs::chown(w.path("repo"), Some(65534), Some(65534)).unwrap();
        w.write("team.yaml", &TEAM.replace("TEAM", &w.team));
        w
    }

    fn write(&self, name: &str, text: &str) {
        let path = self.root().join("manifests").join(name);
        // As an editor saves: a temp file renamed over the old one.
        let tmp = self.root().join("manifests").join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.command();
        c.args(args).env_remove("RUST_LOG").stdin(Stdio::null());
        c
    }

    fn ateam(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// Starts `ateam controller` on the manifests folder, logging to a file.
    fn start(&mut self, extra: &[&str]) {
        let log = std::fs::File::create(self.root().join("controller.log")).unwrap();
        let manifests = self.root().join("manifests");
        let mut args = vec!["controller", "-f", manifests.to_str().unwrap()];
        args.extend(extra);
        let child = self
            .cmd(&args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.controller = Some(child);
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.root().join("controller.log")).unwrap_or_default()
    }

    /// The controller never waits for the store's lock on itself: its reconciles take turns
    /// before the lock, so a wait it logs names another process.
    fn never_waited_on_itself(&self) {
        let own = format!("pid {}", self.controller.as_ref().unwrap().id());
        let log = self.log();
        assert!(
            !log.lines()
                .any(|l| l.contains("waiting for the store's lock") && l.contains(&own)),
            "{:?}: waited on itself:\n{log}",
            self.engine
        );
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = self.engine_cli().args(args).output().unwrap();
        text(&out.stdout).trim().to_string()
    }

    /// The id of the member's container, when it has one.
    fn id(&self, member: &str) -> Option<String> {
        let out = self.cli(&[
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            &format!("label=ateam.dev/team={}", self.team),
            "--filter",
            &format!("label=ateam.dev/member={member}"),
            "--format",
            "{{.ID}}",
        ]);
        out.lines().next().map(str::to_string)
    }

    fn row(&self, member: &str) -> serde_json::Value {
        let out = self.ateam(&["status", &self.team, "-o", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["teams"][0]["members"]
            .as_array()
            .and_then(|a| a.iter().find(|r| r["name"] == member).cloned())
            .unwrap_or_default()
    }

    /// Waits until `ok` holds, or fails with what the controller logged.
    fn until(&self, what: &str, secs: u64, ok: impl Fn() -> bool) -> Duration {
        let start = Instant::now();
        while !ok() {
            if start.elapsed() >= Duration::from_secs(secs) {
                let status = self.ateam(&["status", &self.team]);
                panic!(
                    "{:?}: never {what}; status:\n{}{}\ncontroller log:\n{}",
                    self.engine,
                    text(&status.stdout),
                    text(&status.stderr),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        start.elapsed()
    }

    fn running(&self, member: &str) -> bool {
        self.row(member)["state"] == "running"
    }

    fn pid(&self, member: &str) -> String {
        self.cli(&[
            "inspect",
            "--format",
            "{{.State.Pid}}",
            &self.id(member).unwrap(),
        ])
    }

    fn signal(&mut self, sig: &str) -> Option<i32> {
        let child = self.controller.as_mut().unwrap();
        Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.controller = None;
                return status.code();
            }
            assert!(Instant::now() < deadline, "the controller did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for World {
    /// The controller; the common world then ends the team.
    fn drop(&mut self) {
        if let Some(mut c) = self.controller.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Kill -9 a `restart: Always` member's process (as a crash would): it is back, having
/// passed its gate, without anyone running apply.
fn a_killed_member_comes_back(engine: Engine) {
    let mut w = World::new(engine, "heal");
    w.write("worker.yaml", &member("worker", ""));
    w.start(&[]);
    w.until("ran the member", 60, || w.running("worker"));
    let pid = w.pid("worker");
    assert!(pid.parse::<u32>().is_ok_and(|p| p > 1), "{pid}");
    let killed = Command::new("kill").args(["-KILL", &pid]).status().unwrap();
    assert!(killed.success());
    w.until("restarted it", 30, || {
        w.running("worker") && w.row("worker")["restarts"] == 1
    });
    // It is the same container, started again (not replaced).
    assert!(w.id("worker").is_some());
    assert!(w.log().contains("reason=\"restart\""), "{}", w.log());
}

/// Editing one member's manifest replaces that member and no other.
fn an_edit_replaces_only_that_member(engine: Engine) {
    let mut w = World::new(engine, "edit");
    w.write("a.yaml", &member("a", ""));
    w.write("b.yaml", &member("b", ""));
    w.start(&[]);
    w.until("ran both", 60, || w.running("a") && w.running("b"));
    let (a, b) = (w.id("a").unwrap(), w.id("b").unwrap());
    w.write("a.yaml", &member("a", "").replace("64Mi", "80Mi"));
    w.until("replaced a", 60, || {
        w.id("a").is_some_and(|id| id != a) && w.running("a")
    });
    assert_eq!(w.id("b").unwrap(), b, "{engine:?}: b was touched");
    w.never_waited_on_itself();
}

/// A broken edit tears nothing down: the last good state stays, status says why.
fn a_broken_edit_tears_nothing_down(engine: Engine) {
    let mut w = World::new(engine, "broken");
    w.write("a.yaml", &member("a", ""));
    w.start(&[]);
    w.until("ran a", 60, || w.running("a"));
    let a = w.id("a").unwrap();
    w.write("a.yaml", "apiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {name: a}\nspec: {parent: lead, memroy: 1}\n");
    w.until("refused the edit", 20, || {
        text(&w.ateam(&["status"]).stdout).contains("the manifests were refused")
    });
    let status = text(&w.ateam(&["status"]).stdout);
    assert!(status.contains("a.yaml:4:"), "{status}");
    assert!(w.running("a"));
    assert_eq!(w.id("a").unwrap(), a);
}

/// A removed manifest file: its member is reported, and removed only with --prune.
fn a_removed_file_leaves_its_member_reported(engine: Engine) {
    let mut w = World::new(engine, "gone");
    w.write("a.yaml", &member("a", ""));
    w.write("b.yaml", &member("b", ""));
    w.start(&[]);
    w.until("ran both", 60, || w.running("a") && w.running("b"));
    std::fs::remove_file(w.root().join("manifests/b.yaml")).unwrap();
    w.until("noticed", 20, || w.log().contains("changed=1"));
    // It reconciles after noticing (a debounce, then the team): wait until status reports b
    // as an orphan (or b is gone, which the assertion below names)...
    w.until("reported b as an orphan", 60, || {
        w.row("b")["state"] == "orphan" || w.id("b").is_none()
    });
    // ...then give it time to do what it must not.
    std::thread::sleep(Duration::from_secs(2));
    assert!(w.id("b").is_some(), "{engine:?}: removed without --prune");
    assert_eq!(w.row("b")["state"], "orphan");
    assert_eq!(w.signal("-TERM"), Some(0));
    w.start(&["--prune"]);
    w.until("pruned b", 60, || w.id("b").is_none());
    assert!(w.running("a"));
}

/// SIGTERM stops the controller cleanly; a second controller of the same state folder is
/// refused while one runs; status says whether one runs.
fn one_controller_per_state_folder_and_sigterm_stops_it(engine: Engine) {
    let mut w = World::new(engine, "term");
    w.write("a.yaml", &member("a", ""));
    w.start(&[]);
    w.until("ran a", 60, || w.running("a"));
    let second = w.ateam(&["controller", "-f", "manifests", "--once"]);
    assert_eq!(second.status.code(), Some(6), "{}", text(&second.stderr));
    assert!(
        text(&second.stderr).contains("a controller already runs"),
        "{}",
        text(&second.stderr)
    );
    assert!(text(&w.ateam(&["status"]).stdout).contains("controller: running since"));
    assert_eq!(w.signal("-TERM"), Some(0));
    assert!(text(&w.ateam(&["status"]).stdout).contains("controller: not running"));
    // --once converges and exits; the member was left running by the one that stopped.
    let once = w.ateam(&["controller", "-f", "manifests", "--once"]);
    assert_eq!(once.status.code(), Some(0), "{}", text(&once.stderr));
    assert!(w.running("a"));
}

/// A member that crashes at once, again and again, is restarted at once the first time and
/// then with growing delays (here 1 s, 2 s, 4 s ...), not in a tight loop.
fn a_crash_looping_member_backs_off(engine: Engine) {
    let mut w = World::new(engine, "loop");
    w.write(
        "a.yaml",
        &member("a", ", command: [sh, -c, \"echo crash; exit 3\"]"),
    );
    w.start(&["--crash-backoff", "1s"]);
    w.until("restarted it twice", 60, || {
        w.row("a")["restarts"].as_u64().unwrap_or(0) >= 2
    });
    let at = Instant::now();
    let restarts_then = w.row("a")["restarts"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(5));
    let restarts_now = w.row("a")["restarts"].as_u64().unwrap();
    // With 1, 2, 4 s delays, at most three more restarts fit in 5 s (a tight loop: dozens).
    assert!(
        restarts_now - restarts_then <= 3,
        "{engine:?}: {restarts_then} -> {restarts_now} in {:?}",
        at.elapsed()
    );
    assert!(
        w.log().contains("crash loop: the restart waits"),
        "{}",
        w.log()
    );
    // Status says when the next try is due, in the table and for machines.
    w.until("showed the next restart", 30, || {
        w.row("a")["nextRestart"].is_string()
            && text(&w.ateam(&["status"]).stdout).contains("crash-looping, next restart at")
    });
}

/// A member the controller restarts keeps how it last ended in status, while it runs
/// again: the engine forgets the exit at the restart, the store keeps it.
fn a_restarted_member_keeps_its_last_exit(engine: Engine) {
    let mut w = World::new(engine, "lastexit");
    w.write(
        "a.yaml",
        &member("a", ", command: [sh, -c, \"sleep 3; exit 5\"]"),
    );
    w.start(&[]);
    w.until("restarted it with its last exit kept", 60, || {
        let r = w.row("a");
        r["state"] == "running"
            && r["restarts"].as_u64().unwrap_or(0) >= 1
            && r["lastExit"]["exitCode"] == 5
            && r["lastExit"]["reason"] == "error"
            && r["lastExit"]["at"].is_string()
    });
}

/// SIGTERM while the controller brings up ten members: it finishes what runs and exits 0;
/// the next controller converges with exactly one container per member.
fn sigterm_during_a_big_bring_up_then_the_next_start_converges(engine: Engine) {
    let mut w = World::new(engine, "big");
    for i in 0..10 {
        w.write(&format!("m{i}.yaml"), &member(&format!("m{i}"), ""));
    }
    w.start(&[]);
    w.until("started bringing members up", 30, || {
        w.log().contains("running action")
    });
    assert_eq!(w.signal("-TERM"), Some(0), "{}", w.log());
    let once = w.ateam(&["controller", "-f", "manifests", "--once"]);
    assert_eq!(once.status.code(), Some(0), "{}", text(&once.stderr));
    for i in 0..10 {
        let ids = w.cli(&[
            "ps",
            "-a",
            "-q",
            "--filter",
            &format!("label=ateam.dev/team={}", w.team),
            "--filter",
            &format!("label=ateam.dev/member=m{i}"),
        ]);
        assert_eq!(ids.lines().count(), 1, "{engine:?}: m{i}: {ids}");
        assert!(w.running(&format!("m{i}")), "{engine:?}: m{i}");
    }
}

/// A team applied into the same state folder from other manifests is not the controller's:
/// even with --prune it is left running.
fn a_team_from_other_manifests_is_left_alone(engine: Engine) {
    let w = World::new(engine, "mine");
    w.write("a.yaml", &member("a", ""));
    // Another team, applied by hand from a folder of its own, into the same store.
    let other = format!("{}-x", w.team);
    let dir = w.root().join("other");
    std::fs::create_dir(&dir).unwrap();
    std::fs::create_dir(w.root().join("sessions-other")).unwrap();
    let yaml = TEAM
        .replace("TEAM", &other)
        .replace("sessionDir: ../sessions", "sessionDir: ../sessions-other")
        + "---\n"
        + &member("b", "");
    std::fs::write(dir.join("team.yaml"), yaml).unwrap();
    let out = w.ateam(&["apply", "-f", dir.join("team.yaml").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let once = w.ateam(&["controller", "-f", "manifests", "--once", "--prune"]);
    assert_eq!(once.status.code(), Some(0), "{}", text(&once.stderr));
    assert!(w.running("a"));
    let st = w.ateam(&["status", &other, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    let b = v["teams"][0]["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "b")
        .unwrap();
    assert_eq!(b["state"], "running", "{engine:?}: {b}");
    let _ = w.ateam(&["delete", "--team", &other, "--purge"]);
}

/// Kill -9 a member's egress proxy: the controller sees its socket fall silent (no engine
/// event tells) and starts it again, without anyone running apply and without a new
/// container.
fn a_killed_egress_proxy_comes_back(engine: Engine) {
    let mut w = World::new(engine, "proxy");
    w.write(
        "net.yaml",
        "apiVersion: ateam.dev/v1alpha1\nkind: AccessGrant\nmetadata: {name: net}\nspec: {network: {allow: [\"127.0.0.1:9\"]}}\n",
    );
    w.write(
        "worker.yaml",
        &member("worker", "").replace("access: rw", "access: net"),
    );
    w.start(&[]);
    w.until("ran the member", 60, || w.running("worker"));
    let pid_file = w
        .root()
        .join("state/teams")
        .join(&w.team)
        .join("members/worker/egress/proxy.pid");
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_string();
    let id = w.id("worker");
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success()
    );
    let took = w.until("restarted the proxy", 30, || {
        std::fs::read_to_string(&pid_file)
            .map(|p| p.trim() != pid)
            .unwrap_or(false)
            && w.row("worker")["egress"]["proxy"] == "running"
    });
    assert!(took < Duration::from_secs(15), "{engine:?}: {took:?}");
    assert_eq!(w.id("worker"), id, "{engine:?}: the member was replaced");
    assert!(w.log().contains("startEgressProxy"), "{}", w.log());
}

/// A web server on the host's loopback that answers every request (the allowed endpoint).
fn serve_ok() -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = c.read(&mut [0u8; 4096]);
            let _ = c.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
        }
    });
    port
}

/// A port nothing listens on now (bound, then let go).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// One scrape, parsed by Python's `prometheus_client` (tests/support/scrape_metrics.py).
fn scrape(port: u16) -> serde_json::Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/scrape_metrics.py"
    );
    // Debian's python3, where python3-prometheus-client is installed (not a pyenv shim).
    let out = Command::new("/usr/bin/python3")
        .arg(script)
        .arg(format!("http://127.0.0.1:{port}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "scrape failed: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The value of the sample `name` whose labels include `labels`; none if absent.
fn sample(s: &serde_json::Value, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s["samples"].as_array().unwrap().iter().find_map(|x| {
        let ok = x[0] == name && labels.iter().all(|(k, v)| x[1][*k] == *v);
        ok.then(|| x[2].as_f64().unwrap())
    })
}

/// What the metrics say that `status` says too, as `(figure, value)` lines; memory apart.
fn figures_of_status(doc: &serde_json::Value) -> Vec<(String, f64)> {
    let rows = doc["teams"][0]["members"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    let mut states = std::collections::BTreeMap::<(String, String), f64>::new();
    for r in &rows {
        let kind = match r["kind"].as_str().unwrap() {
            "MainSession" => "main_session",
            "Member" => "member",
            _ => "transcript",
        };
        *states
            .entry((kind.into(), r["state"].as_str().unwrap().into()))
            .or_default() += 1.0;
        if kind != "member" {
            continue;
        }
        let name = r["name"].as_str().unwrap();
        out.push((format!("restarts {name}"), r["restarts"].as_f64().unwrap()));
        if let Some(e) = r["egress"]["lastMinute"].as_object() {
            for v in ["allowed", "refused", "failed"] {
                out.push((format!("egress {name} {v}"), e[v].as_f64().unwrap()));
            }
        }
    }
    for ((kind, state), n) in states {
        out.push((format!("members {kind} {state}"), n));
    }
    out
}

/// The same figures, read from a scrape.
fn figures_of_scrape(
    team: &str,
    status: &[(String, f64)],
    s: &serde_json::Value,
) -> Vec<(String, f64)> {
    status
        .iter()
        .map(|(k, _)| {
            let w: Vec<&str> = k.splitn(3, ' ').collect();
            let v = match w[0] {
                "restarts" => sample(
                    s,
                    "ateam_member_restarts_total",
                    &[("team", team), ("member", w[1])],
                ),
                "egress" => sample(
                    s,
                    "ateam_egress_decisions_last_minute",
                    &[("team", team), ("member", w[1]), ("verdict", w[2])],
                ),
                _ => sample(
                    s,
                    "ateam_members",
                    &[("team", team), ("kind", w[1]), ("state", w[2])],
                ),
            };
            (k.clone(), v.unwrap_or(-1.0))
        })
        .collect()
}

/// `controller --metrics`: a scrape parsed by Python's Prometheus parser says what `status -o
/// json` says: members by state, restarts (one member killed and healed), the egress decisions
/// of a proxied member that made an allowed and a refused request, memory within a tolerance;
/// reconciles are counted (an edit adds some); any other path is 404.
fn the_metrics_match_status(engine: Engine) {
    let mut w = World::new(engine, "metr");
    let web = serve_ok();
    w.write(
        "net.yaml",
        &format!("apiVersion: ateam.dev/v1alpha1\nkind: AccessGrant\nmetadata: {{name: net}}\nspec: {{network: {{allow: [\"127.0.0.1:{web}\"]}}}}\n"),
    );
    w.write("a.yaml", &member("a", ""));
    w.write("b.yaml", &member("b", ""));
    w.write(
        "c.yaml",
        &member("c", "").replace("access: rw", "access: net"),
    );
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    w.start(&["--metrics", &addr]);
    w.until("ran the members", 90, || {
        ["a", "b", "c"].iter().all(|m| w.running(m))
    });
    // c: one request its list allows, one it refuses.
    let allowed = w.ateam(&[
        "exec",
        "c",
        "--team",
        &w.team,
        "--",
        "sh",
        "-c",
        &format!("wget -q -O - http://127.0.0.1:{web}/"),
    ]);
    assert!(
        text(&allowed.stdout).contains("ok"),
        "{engine:?}: {}",
        text(&allowed.stderr)
    );
    let refused = w.ateam(&[
        "exec",
        "c",
        "--team",
        &w.team,
        "--",
        "sh",
        "-c",
        "wget -q -O - http://127.0.0.1:9/",
    ]);
    assert!(
        !refused.status.success(),
        "{engine:?}: the refused request got through"
    );
    // a: killed, and healed by the controller.
    let pid = w.pid("a");
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success()
    );
    w.until("restarted a", 30, || {
        w.running("a") && w.row("a")["restarts"] == 1
    });

    let status = || {
        let out = w.ateam(&["status", &w.team, "-o", "json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default()
    };
    // The scrape's figures are at most CACHE_FOR (5 s) old: wait until they agree.
    let start = Instant::now();
    let scraped = loop {
        let doc = status();
        let want = figures_of_status(&doc);
        let s = scrape(port);
        let got = figures_of_scrape(&w.team, &want, &s);
        if !want.is_empty() && want == got {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "{engine:?}: the metrics never matched status:\nstatus  {want:?}\nmetrics {got:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let fig = figures_of_status(&status());
    let get = |k: &str| fig.iter().find(|(n, _)| n == k).map(|x| x.1);
    // The story happened (the comparison above is not of zeros).
    assert_eq!(get("restarts a"), Some(1.0), "{engine:?}: {fig:?}");
    assert!(get("egress c allowed") >= Some(1.0), "{engine:?}: {fig:?}");
    assert!(get("egress c refused") >= Some(1.0), "{engine:?}: {fig:?}");
    assert_eq!(
        get("members member running"),
        Some(3.0),
        "{engine:?}: {fig:?}"
    );
    assert_eq!(scraped["otherPath"], 404);
    assert_eq!(scraped["families"]["ateam_reconciles"], "counter");
    assert_eq!(
        scraped["families"]["ateam_reconcile_duration_seconds"],
        "histogram"
    );
    assert_eq!(scraped["families"]["ateam_member_memory_bytes"], "gauge");
    assert!(
        scraped["contentType"]
            .as_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
        "{scraped}"
    );

    // Memory moves: within a quarter (or 4 MiB) of what status read, and under the limit.
    let doc = status();
    let s = scrape(port);
    for m in ["a", "b", "c"] {
        let row = doc["teams"][0]["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == m)
            .unwrap()
            .clone();
        let want = row["usage"]["memoryBytes"].as_f64().unwrap();
        let got = sample(
            &s,
            "ateam_member_memory_bytes",
            &[("team", &w.team), ("member", m)],
        )
        .unwrap();
        assert!(
            (got - want).abs() <= (want / 4.0).max(4.0 * 1024.0 * 1024.0),
            "{engine:?}: {m}: {got} vs {want}"
        );
        assert!(got > 0.0, "{engine:?}: {m}");
        let limit = sample(
            &s,
            "ateam_member_memory_limit_bytes",
            &[("team", &w.team), ("member", m)],
        );
        assert_eq!(limit, Some(64.0 * 1024.0 * 1024.0), "{engine:?}: {m}");
        assert!(
            sample(
                &s,
                "ateam_member_cpu_seconds_total",
                &[("team", &w.team), ("member", m)]
            )
            .is_some()
        );
    }

    // An edit: its team is reconciled again, and counted.
    let reconciles = |s: &serde_json::Value| {
        s["samples"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x[0] == "ateam_reconciles_total" && x[1]["team"] == w.team.as_str())
            .map(|x| x[2].as_f64().unwrap())
            .sum::<f64>()
    };
    let before = reconciles(&scrape(port));
    assert!(before >= 1.0, "{engine:?}: no reconcile counted");
    w.write("b.yaml", &member("b", "").replace("64Mi", "80Mi"));
    w.until("counted the edit's reconcile", 60, || {
        reconciles(&scrape(port)) > before
    });
}

/// The engine's service stops and starts again under a running controller: the controller
/// says so, keeps trying, and puts the member back once the engine is there again.
fn an_engine_restart_is_lived_through(engine: Engine) {
    // Declared first, dropped last: the world's clean-up still talks to it.
    let mut eng = PrivateEngine::new(engine);
    let mut w = World::new(engine, "engine");
    w.set_uri(Some(eng.uri()));
    w.write("worker.yaml", &member("worker", ""));
    w.start(&[]);
    w.until("ran the member", 60, || w.running("worker"));
    let pid = w.pid("worker");
    eng.stop();
    if engine == Engine::Podman {
        // Podman's containers outlive its service: a crash while it is away...
        let killed = Command::new("kill").args(["-KILL", &pid]).status().unwrap();
        assert!(killed.success());
    }
    w.until("saw the engine go", 30, || {
        w.log().contains("engine event stream ended") || w.log().contains("engine unavailable")
    });
    std::thread::sleep(Duration::from_secs(2));
    eng.start();
    // ...is seen when it is back, as is Docker's stop of every container.
    w.until("put the member back", 90, || {
        w.running("worker") && w.pid("worker") != pid
    });
    assert!(w.log().contains("reason=\"restart\""), "{}", w.log());
}

/// A promotion killed half way by `ateam apply` is finished by the controller: the member's
/// transcript is at the session's place, the session runs, its child keeps its container.
fn the_controller_finishes_an_interrupted_promotion(engine: Engine) {
    let mut w = World::new(engine, "prom");
    w.write("a.yaml", &member("a", ""));
    w.write(
        "b.yaml",
        &member("b", "").replace("parent: lead", "parent: a"),
    );
    let manifests = w.root().join("manifests");
    let apply = |env: &[(&str, &str)]| {
        w.cmd(&["apply", "-f", manifests.to_str().unwrap()])
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let out = apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let from = w.root().join("sessions/members/a");
    std::fs::write(from.join("notes.txt"), "half done\n").unwrap();
    let b = w.id("b").unwrap();
    w.write(
        "a.yaml",
        "apiVersion: ateam.dev/v1alpha1\nkind: MainSession\nmetadata: {name: a}\nspec: {command: [sleep, \"100000\"], cwd: ../repo, promotedFrom: a}\n",
    );
    let out = apply(&[("ATEAM_TEST_PROMOTION", "crash-after:moved")]);
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    let socket = w
        .root()
        .join("state/teams")
        .join(&w.team)
        .join("sessions/a/tmux.sock");
    assert!(std::os::unix::net::UnixStream::connect(&socket).is_err());
    w.start(&[]);
    w.until("finished the promotion", 60, || {
        w.row("a")["kind"] == "MainSession"
            && w.row("a")["state"] == "running"
            && w.id("a").is_none()
    });
    assert_eq!(
        std::fs::read_to_string(w.root().join("sessions/a/notes.txt")).unwrap(),
        "half done\n"
    );
    assert!(!from.exists());
    assert!(
        !w.root()
            .join("state/teams")
            .join(&w.team)
            .join("sessions/a/promotion.json")
            .exists()
    );
    assert_eq!(w.id("b").unwrap(), b, "the child keeps its container");
    assert_eq!(w.row("b")["parent"], "a");
    let _ = Command::new("tmux")
        .arg("-S")
        .arg(&socket)
        .arg("kill-server")
        .output();
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
    the_controller_finishes_an_interrupted_promotion,
    a_killed_member_comes_back,
    an_edit_replaces_only_that_member,
    a_broken_edit_tears_nothing_down,
    a_removed_file_leaves_its_member_reported,
    one_controller_per_state_folder_and_sigterm_stops_it,
    a_crash_looping_member_backs_off,
    a_restarted_member_keeps_its_last_exit,
    sigterm_during_a_big_bring_up_then_the_next_start_converges,
    a_team_from_other_manifests_is_left_alone,
    a_killed_egress_proxy_comes_back,
    an_engine_restart_is_lived_through,
    the_metrics_match_status,
);
