//! `ateam events` on real engines (Docker and rootful Podman): each kind of event appears
//! after the action that makes it, in order, `-w` prints a new one within a second, and the
//! history outlives a controller restart. The real binary, a real controller in the
//! background, judged from `ateam events -o json`. Ignored by a plain `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::io::BufRead;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[macro_use]
mod common;
use common::{Engine, text};

/// The common world (`common::World`: engine, folder, team, `ateam`, teardown) and what is
/// this crate's own: the controllers it started.
struct World {
    w: common::World,
    children: Vec<Child>,
}

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.w
    }
}

/// A member of the World's team: they share the one folder `g` writes (one writer per
/// folder is not what these cases are about), and say so.
fn member(name: &str, extra: &str) -> String {
    format!(
        "---\napiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {{name: {name}}}\nspec: {{parent: lead, access: g, restart: Always, resources: {{memory: 64Mi, pids: 64}}, shareWrites: true{extra}}}\n"
    )
}

impl World {
    fn new(engine: Engine) -> World {
        let w = World {
            w: common::World::new(engine, "events", "ev"),
            children: vec![],
        };
        w.dirs(&["work", "state", "sessions"]);
        // Members run as nobody (ateam runs as root here): their write grant is theirs.
        std::os::unix::fs::chown(w.root().join("work"), Some(65534), Some(65534)).unwrap();
        w
    }

    fn write(&self, members: &[String]) {
        let mut yaml = format!(
            r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true, helperRequests: true, maxMembers: 5}}
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
"#,
            self.team
        );
        for m in members {
            yaml.push_str(m);
        }
        // As an editor saves: a temp file renamed over the old one.
        let tmp = self.root().join(".team.yaml.tmp");
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, self.root().join("team.yaml")).unwrap();
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

    fn controller(&mut self) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.root().join("controller.log"))
            .unwrap();
        let child = self
            .cmd(&["controller", "-f", "team.yaml", "--crash-backoff", "1s"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.insert(0, child);
    }

    /// SIGTERM to the controller, and wait for it to end.
    fn stop_controller(&mut self) {
        let mut c = self.children.remove(0);
        Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the controller did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn events(&self) -> Vec<serde_json::Value> {
        let out = self.ateam(&["events", &self.team, "-o", "json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap()
    }

    /// The first event of `kind` about `member` whose reason holds `words`, waited for.
    fn wait_event(&self, kind: &str, member: &str, words: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(e) = self.events().into_iter().find(|e| {
                e["kind"] == kind
                    && e["member"] == member
                    && e["reason"].as_str().unwrap_or("").contains(words)
            }) {
                return e;
            }
            assert!(
                Instant::now() < deadline,
                "{:?}: no {kind} event of {member} with {words:?}; events:\n{:#?}\ncontroller log:\n{}",
                self.engine,
                self.events(),
                std::fs::read_to_string(self.root().join("controller.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = common::engine_command(self.engine, true)
            .args(args)
            .output()
            .unwrap();
        text(&out.stdout).trim().to_string()
    }

    fn id(&self, member: &str) -> String {
        self.cli(&[
            "ps",
            "-q",
            "--no-trunc",
            "--filter",
            &format!("label=ateam.dev/team={}", self.team),
            "--filter",
            &format!("label=ateam.dev/member={member}"),
        ])
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
    }

    /// `sh -c script` inside `member`, as the member.
    fn inside(&self, member: &str, script: &str) -> String {
        let out = self.ateam(&[
            "exec", member, "--team", &self.team, "--", "sh", "-c", script,
        ]);
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    }
}

impl Drop for World {
    /// The controllers; the common world then ends the team.
    fn drop(&mut self) {
        for mut c in self.children.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Every kind in the order its action was taken; `-w` keeps up; a controller restart keeps
/// the history.
fn events_say_what_happened_in_order(engine: Engine) {
    let mut w = World::new(engine);
    w.write(&[member("worker", ", command: [sleep, \"100000\"]")]);
    w.controller();
    let mut seq = vec![w.wait_event("created", "worker", "created")];
    // Each start ateam released names its container, a create's too (the soak, scripts/
    // soak.py, checks every start a member's command made against these).
    let first = w.id("worker");
    assert_eq!(seq[0]["container"], first[..12], "{engine:?}: {:#}", seq[0]);

    // `events -w -o json`, one object per line, read as it comes.
    let mut watch = w
        .cmd(&["events", &w.team, "-w", "-o", "json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<(f64, serde_json::Value)>();
    let out = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let v = serde_json::from_str(&line).expect("one JSON object per line");
            if tx.send((now(), v)).is_err() {
                break;
            }
        }
    });
    w.children.push(watch);

    // An edit: replaced, and -w prints it within a second of its time.
    w.write(&[member("worker", ", command: [sleep, \"100000\"]").replace("64Mi", "80Mi")]);
    seq.push(w.wait_event("replaced", "worker", "replaced because"));
    let replaced = seq.last().unwrap();
    assert_eq!(
        replaced["container"],
        w.id("worker")[..12],
        "{engine:?}: {replaced:#}"
    );
    assert!(
        replaced["reason"]
            .as_str()
            .unwrap()
            .ends_with(&format!("(was {})", &first[..12])),
        "{engine:?}: {replaced:#}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let lag = loop {
        let (got, e) = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("-w printed the replacement");
        if e["kind"] == "replaced" {
            break got - e["ts"].as_f64().unwrap();
        }
    };
    eprintln!(
        "{engine:?}: -w printed the event {:.0} ms after it",
        lag * 1e3
    );
    assert!(lag < 1.0, "{engine:?}: -w lagged {lag:.3}s");

    // kill -9 of its process: restarted after exit 137.
    let pid = w.cli(&["inspect", "--format", "{{.State.Pid}}", &w.id("worker")]);
    assert!(pid.parse::<u32>().is_ok_and(|p| p > 1), "{pid}");
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success()
    );
    seq.push(w.wait_event("restarted", "worker", "after exit 137"));

    // A member that exits at once, again and again: a crash-loop backoff.
    w.write(&[
        member("worker", ", command: [sleep, \"100000\"]").replace("64Mi", "80Mi"),
        member("crash", ", command: [sh, -c, \"exit 3\"]"),
    ]);
    seq.push(w.wait_event("crash-loop", "crash", "backoff"));

    // A look-alike with the store's labels under another name: seen, once.
    let id = w.id("worker");
    let labels = w.cli(&["inspect", "--format", "{{json .Config.Labels}}", &id]);
    let labels: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&labels).unwrap();
    let mut args: Vec<String> = ["run", "-d", "--name", &format!("lookalike-{}", w.team)]
        .map(String::from)
        .to_vec();
    args.extend(["--network".into(), "none".into()]);
    for (k, v) in &labels {
        if k.starts_with("ateam.dev/") {
            args.extend(["--label".into(), format!("{k}={}", v.as_str().unwrap())]);
        }
    }
    args.extend(["ateam-demo:latest", "sleep", "1000"].map(String::from));
    w.cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    seq.push(w.wait_event("stranger-seen", "worker", "did not make it"));

    // A connection the allow list refuses.
    let got = w.inside(
        "worker",
        "wget -q -O /dev/null http://refused.example/ 2>&1",
    );
    eprintln!("{engine:?}: {got}");
    seq.push(w.wait_event("egress-refused", "worker", "refused.example:80"));

    // A helper request granted, then one refused with its rule.
    let ask = |json: &str| {
        w.inside(
            "worker",
            &format!("wget -Y off -q -O - --post-data '{json}' \"$ATEAM_HELPERS_URL\" 2>&1"),
        )
    };
    eprintln!(
        "{engine:?}: {}",
        ask(r#"{"name": "h1", "command": ["sleep", "100000"]}"#)
    );
    seq.push(w.wait_event("helper-granted", "worker", "`h1`"));
    eprintln!("{engine:?}: {}", ask(r#"{"name": "h2", "read": ["/etc"]}"#));
    seq.push(w.wait_event("helper-refused", "worker", "rule narrower-than-requester"));

    // A restart by hand: held at its gate until the controller checks and releases it.
    // (Its id from before the look-alike, which has its labels too.)
    w.cli(&["restart", "-t", "1", &id]);
    seq.push(w.wait_event("released", "worker", "held at its gate"));

    let ts: Vec<f64> = seq.iter().map(|e| e["ts"].as_f64().unwrap()).collect();
    assert!(
        ts.windows(2).all(|p| p[0] <= p[1]),
        "{engine:?}: out of order:\n{seq:#?}"
    );
    let listed = w.events();
    assert!(
        listed
            .windows(2)
            .all(|p| p[0]["ts"].as_f64() <= p[1]["ts"].as_f64()),
        "{engine:?}: not newest last"
    );
    let strangers = listed
        .iter()
        .filter(|e| e["kind"] == "stranger-seen")
        .count();
    assert_eq!(strangers, 1, "{engine:?}: a stranger said more than once");

    // A controller restart: the history is still there, in the text table too.
    w.stop_controller();
    w.controller();
    let after = w.events();
    for e in &seq {
        assert!(after.contains(e), "{engine:?}: lost {e:#}");
    }
    let table = text(&w.ateam(&["events", &w.team]).stdout);
    for kind in [
        "created",
        "replaced",
        "restarted",
        "crash-loop",
        "stranger-seen",
        "egress-refused",
        "helper-granted",
        "helper-refused",
        "released",
    ] {
        assert!(table.contains(kind), "{engine:?}: {kind} missing:\n{table}");
    }
    assert!(table.starts_with("LAST SEEN"), "{table}");
}

/// `ateam delete` under a running controller: the team stays deleted (no container for 30 s,
/// an edit of its manifests included), status says why, its events and egress log stay
/// readable; the next apply brings it back and the controller keeps it again; `--purge`
/// takes the record too.
fn a_deleted_team_stays_deleted_and_keeps_its_record(engine: Engine) {
    let mut w = World::new(engine);
    let worker = member("worker", ", command: [sleep, \"100000\"]");
    w.write(std::slice::from_ref(&worker));
    w.controller();
    w.wait_event("created", "worker", "created");
    w.inside(
        "worker",
        "wget -q -O /dev/null http://refused.example/ 2>&1",
    );
    w.wait_event("egress-refused", "worker", "refused.example:80");

    let out = w.ateam(&["delete", "--team", &w.team]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("it leaves the team(s) deleted until you apply them again"),
        "{}",
        text(&out.stdout)
    );
    let ours = |w: &World| {
        w.cli(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=ateam.dev/team={}", w.team),
        ])
    };
    let start = Instant::now();
    let mut edited = false;
    while start.elapsed() < Duration::from_secs(30) {
        assert_eq!(
            ours(&w),
            "",
            "{engine:?}: made again after {:?}",
            start.elapsed()
        );
        if !edited && start.elapsed() > Duration::from_secs(5) {
            // An edit of the manifests is no apply: still deleted.
            w.write(&[worker.replace("64Mi", "80Mi")]);
            edited = true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let status = text(&w.ateam(&["status"]).stdout);
    assert!(
        status.contains(&format!("team {}: deleted at", w.team))
            && status.contains("left deleted until ateam apply"),
        "{engine:?}: {status}"
    );
    let kinds: Vec<String> = w
        .events()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect();
    for k in ["created", "egress-refused", "deleted"] {
        assert!(
            kinds.iter().any(|x| x == k),
            "{engine:?}: no {k} after delete: {kinds:?}"
        );
    }
    let log = w.ateam(&["logs", "worker", "--team", &w.team, "--egress"]);
    assert!(
        text(&log.stdout).contains("refused.example"),
        "{engine:?}: {}{}",
        text(&log.stdout),
        text(&log.stderr)
    );

    // The next apply brings it back; the controller keeps it again: its next look at the
    // team (the new container's engine event) no longer leaves it deleted.
    let out = w.ateam(&["apply", "-f", "team.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = text(&w.ateam(&["status"]).stdout);
        if !status.contains("left deleted") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{engine:?}: still left deleted: {status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        !w.id("worker").is_empty(),
        "{engine:?}: the worker runs again"
    );
    // The container apply made is the one kept: the controller's look right after the
    // apply judges it as apply did (it once read its limits as unlimited and replaced it).
    std::thread::sleep(Duration::from_secs(2));
    let replaced: Vec<serde_json::Value> = w
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "replaced")
        .collect();
    assert_eq!(replaced, Vec::<serde_json::Value>::new(), "{engine:?}");

    // --purge: the record goes too; the controller still leaves the team deleted.
    let out = w.ateam(&["delete", "--team", &w.team, "--purge"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(w.events(), Vec::<serde_json::Value>::new(), "{engine:?}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ours(&w), "", "{engine:?}: made again after --purge");
}

on_every_engine!(docker: events_say_what_happened_in_order, a_deleted_team_stays_deleted_and_keeps_its_record);
on_every_engine!(podman: events_say_what_happened_in_order, a_deleted_team_stays_deleted_and_keeps_its_record);
