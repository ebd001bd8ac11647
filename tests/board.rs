//! The team's board over MCP, on Docker, rootful Podman and rootless Podman: the lead's
//! agent (`ateam mcp`, as main session `lead`) makes two tasks; members `a` and `b`, each
//! through its own socket inside its container (`/.ateam/bridge --stdio /.ateam/mcp.sock`,
//! real JSON-RPC lines), claim one each, complete it and message the lead; the lead reads
//! both; `ateam tasks` shows the history. A member cannot complete another's task, send as
//! another, or launch a helper in a team without helper requests; a message with control
//! and bidi characters is shown escaped, one of 100 MB is refused; a member's flood of
//! 10,000 messages is paced and does not slow the board for the others (measured).
//! Ignored by a plain `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::mcp::{self, answer, call, init, initialized, ok_answer};
use common::{Engine, rootless_user, text};

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
    fn new(engine: Engine) -> World {
        let w = World(common::World::new(engine, "board", "board-"));
        w.dirs(&["work", "state", "sessions"]);
        w.give(&["", "work", "state", "sessions"]);
        let yaml = format!(
            r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true, board: true}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g}}
spec: {{read: [./work]}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: a}}
spec: {{parent: lead, access: g, command: [sleep, "100000"], resources: {{memory: 64Mi, pids: 64}}}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: b}}
spec: {{parent: lead, access: g, command: [sleep, "100000"], resources: {{memory: 64Mi, pids: 64}}}}
"#,
            team = w.team
        );
        w.write("team.yaml", &yaml);
        w
    }

    /// One MCP session of `lead` through `ateam mcp`: the calls, in order, each answered
    /// before the next is sent; their answers.
    fn lead(&self, calls: &[(&str, Value)]) -> Vec<Value> {
        let mut c = self.command();
        c.args(["mcp", "--team", &self.team, "--session", "lead"]);
        mcp::session(c, calls)
    }

    /// The calls of member `member`, from inside it through its own socket, one MCP
    /// session each (a session's calls are answered as they finish, not in order; an agent
    /// waits for each): their answers.
    fn member(&self, member: &str, calls: &[(&str, Value)]) -> Vec<Value> {
        calls
            .iter()
            .map(|(tool, args)| {
                let input = format!(
                    "{}\n{}\n{}\n",
                    init(0),
                    initialized(),
                    call(1, tool, args.clone())
                );
                let out = self.inside(member, &input);
                out.lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .find(|v| v["id"] == 1)
                    .unwrap_or_else(|| panic!("no answer to {tool} {args}: {out}"))
            })
            .collect()
    }

    /// What the bridge printed for `input`, sent in one piece, inside `member` as it.
    fn inside(&self, member: &str, input: &str) -> String {
        let mut child = self
            .command()
            .args([
                "exec",
                member,
                "--team",
                &self.team,
                "-i",
                "--",
                "/.ateam/bridge",
                "--stdio",
                "/.ateam/mcp.sock",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    }
}

fn refused(v: &Value, says: &str) {
    let (text, err) = answer(v);
    assert!(err, "not refused: {text}");
    assert!(text.contains(says), "refused, but not for `{says}`: {text}");
}

fn a_team_works_together(engine: Engine) {
    let w = World::new(engine);
    w.ok(&["apply", "-f", "team.yaml"]);
    // The lead makes two tasks, the second after the first.
    let made = w.lead(&[
        (
            "team_task",
            json!({"action": "create", "title": "write the parser", "body": "in src/parse.rs"}),
        ),
        (
            "team_task",
            json!({"action": "create", "title": "test the parser", "dependsOn": [1]}),
        ),
    ]);
    assert_eq!(ok_answer(&made[0])["task"]["id"], 1, "{made:?}");
    assert_eq!(ok_answer(&made[1])["task"]["id"], 2);

    // b claims the second, but cannot start it before the first is done.
    let b = w.member(
        "b",
        &[
            ("team_task", json!({"action": "claim", "id": 2})),
            ("team_task", json!({"action": "start", "id": 2})),
        ],
    );
    assert_eq!(ok_answer(&b[0])["task"]["state"], "claimed");
    refused(&b[1], "waits for task 1");

    // a does the first and tells the lead; b may not complete it, nor send as another.
    let a = w.member(
        "a",
        &[
            ("team_task", json!({"action": "start", "id": 1})),
            (
                "team_task",
                json!({"action": "complete", "id": 1, "note": "parser written"}),
            ),
            (
                "team_message",
                json!({"action": "send", "to": ["lead"], "body": "task 1 is done"}),
            ),
        ],
    );
    assert_eq!(ok_answer(&a[0])["task"]["owner"]["member"], "a", "{a:?}");
    assert_eq!(ok_answer(&a[1])["task"]["state"], "done");
    ok_answer(&a[2]);
    let b = w.member(
        "b",
        &[
            ("team_task", json!({"action": "reopen", "id": 1})),
            (
                "team_message",
                json!({"action": "send", "body": "from a", "from": "a"}),
            ),
            ("team_task", json!({"action": "start", "id": 2})),
            ("team_task", json!({"action": "complete", "id": 2})),
            (
                "team_message",
                json!({"action": "send", "to": ["lead"], "body": "task 2 is done\u{1b}[31m\u{202e}evil"}),
            ),
            (
                "team_agent",
                json!({"request": {"name": "helper", "image": "ateam-demo:latest", "command": ["true"]}}),
            ),
        ],
    );
    refused(&b[0], "creator or a lead");
    let (text, err) = answer(&b[1]);
    assert!(err, "a message with a sender of its own was taken: {text}");
    ok_answer(&b[2]);
    ok_answer(&b[3]);
    ok_answer(&b[4]);
    refused(&b[5], "helper");

    // The lead hears both, each marked with its author.
    let heard = w.lead(&[("team_message", json!({"action": "history"}))]);
    let heard = ok_answer(&heard[0]);
    let from: Vec<&Value> = heard["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["writtenBy"])
        .collect();
    assert_eq!(
        from,
        [&json!({"member": "a"}), &json!({"member": "b"})],
        "{heard}"
    );

    // The person sees the history, and what b wrote escaped.
    let tasks = w.ok(&["tasks", "--team", &w.team, "show", "1"]);
    for what in [
        "created by main session lead",
        "started by member a",
        "completed by member a: parser written",
    ] {
        assert!(tasks.contains(what), "`{what}` not in:\n{tasks}");
    }
    // status, events and the metrics' source say the board in numbers.
    let status = w.ok(&["status", &w.team]);
    assert!(
        status.contains("board: 0 todo, 0 claimed, 0 in progress, 2 done; 2 messages"),
        "{status}"
    );
    let doc: Value = serde_json::from_str(&w.ok(&["status", &w.team, "-o", "json"])).unwrap();
    assert_eq!(doc["teams"][0]["board"]["done"], 2, "{doc:#}");
    let events = w.ok(&["events", &w.team]);
    assert!(
        events.contains("task 1 `write the parser` completed by member a"),
        "{events}"
    );
    let said = w.ok(&["messages", "--team", &w.team]);
    assert!(said.contains("\\u{1b}[31m\\u{202e}evil"), "{said}");
    assert!(
        !said.contains('\u{1b}') && !said.contains('\u{202e}'),
        "{said}"
    );
}

fn a_member_that_leaves_gives_its_tasks_back(engine: Engine) {
    let w = World::new(engine);
    w.ok(&["apply", "-f", "team.yaml"]);
    w.ok(&["tasks", "--team", &w.team, "add", "one"]);
    w.ok(&["tasks", "--team", &w.team, "add", "two"]);
    let a = w.member("a", &[("team_task", json!({"action": "start", "id": 1}))]);
    assert_eq!(ok_answer(&a[0])["task"]["state"], "inProgress");
    let b = w.member("b", &[("team_task", json!({"action": "claim", "id": 2}))]);
    assert_eq!(ok_answer(&b[0])["task"]["state"], "claimed");
    // a leaves the manifests: its task goes back, b's stays b's.
    let yaml = std::fs::read_to_string(w.root().join("team.yaml")).unwrap();
    let without_a: Vec<&str> = yaml
        .split("---\n")
        .filter(|d| !d.contains("metadata: {name: a}"))
        .collect();
    let p = w.root().join("team-without-a.yaml");
    std::fs::write(&p, without_a.join("---\n")).unwrap();
    if engine == Engine::Rootless {
        let (_, uid, gid) = rootless_user();
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
    }
    // Kept (no --prune), its container may still be at work: nothing goes back.
    let kept = w.ateam(&["diff", "-f", "team-without-a.yaml"]);
    assert!(
        !text(&kept.stdout).contains("back to todo"),
        "{}",
        text(&kept.stdout)
    );
    let diff = w.ateam(&["diff", "-f", "team-without-a.yaml", "--prune"]);
    assert!(
        text(&diff.stdout).contains("a's tasks on the board back to todo"),
        "{}",
        text(&diff.stdout)
    );
    w.ok(&["apply", "-f", "team-without-a.yaml", "--prune"]);
    let tasks: Vec<Value> =
        serde_json::from_str(&w.ok(&["tasks", "--team", &w.team, "--json"])).unwrap();
    assert_eq!(tasks[0]["state"], "todo", "{tasks:#?}");
    assert_eq!(tasks[0].get("owner"), None, "{tasks:#?}");
    let note = tasks[0]["history"].as_array().unwrap().last().unwrap()["note"].clone();
    assert_eq!(note, "member a is in no manifest any more");
    assert_eq!(tasks[1]["owner"], json!({"member": "b"}));
    let events = w.ok(&["events", &w.team]);
    assert!(events.contains("tasks-returned"), "{events}");
    // Nothing more to do: the board converged.
    let again = w.ateam(&["diff", "-f", "team-without-a.yaml", "--prune"]);
    assert!(
        !text(&again.stdout).contains("back to todo"),
        "{}",
        text(&again.stdout)
    );
}

fn a_main_session_hands_its_work_on(engine: Engine) {
    let w = World::new(engine);
    w.ok(&["apply", "-f", "team.yaml"]);
    let held = w.lead(&[
        ("team_task", json!({"action": "create", "title": "plan"})),
        ("team_task", json!({"action": "start", "id": 1})),
    ]);
    assert_eq!(
        ok_answer(&held[1])["task"]["owner"],
        json!({"mainSession": "lead"})
    );
    // lead2 takes lead over: what lead held is lead2's now.
    let yaml = std::fs::read_to_string(w.root().join("team.yaml")).unwrap().replace(
        "metadata: {name: lead}\nspec: {command: [sleep, \"100000\"], cwd: ./work}",
        "metadata: {name: lead2}\nspec: {command: [sleep, \"100000\"], cwd: ./work, takesOver: lead}",
    );
    assert!(yaml.contains("takesOver"), "{yaml}");
    let p = w.root().join("team-heir.yaml");
    std::fs::write(&p, yaml).unwrap();
    if engine == Engine::Rootless {
        let (_, uid, gid) = rootless_user();
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
    }
    w.ok(&["apply", "-f", "team-heir.yaml"]);
    let tasks: Vec<Value> =
        serde_json::from_str(&w.ok(&["tasks", "--team", &w.team, "--json"])).unwrap();
    assert_eq!(tasks[0]["owner"], json!({"main": "lead2"}), "{tasks:#?}");
    assert_eq!(tasks[0]["state"], "inProgress");
    let last = tasks[0]["history"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["note"], "main session lead was taken over by lead2",
        "{last:#}"
    );
}

fn floods_are_bounded(engine: Engine) {
    let w = World::new(engine);
    w.ok(&["apply", "-f", "team.yaml"]);
    // A body of 100 MB is never read whole: the line is dropped, the session goes on.
    let big = "a".repeat(100 * 1024 * 1024);
    let mut input = format!("{}\n{}\n", init(0), initialized());
    input.push_str(&format!(
        "{}\n",
        call(1, "team_message", json!({"action": "send", "body": big}))
    ));
    drop(big);
    input.push_str(&format!(
        "{}\n",
        call(
            2,
            "team_message",
            json!({"action": "send", "body": "small"})
        )
    ));
    let out = w.inside("a", &input);
    let answers: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        answers
            .iter()
            .any(|v| v["id"] == 2 && v["result"]["isError"] != true),
        "the session did not go on after the big line: {}",
        &out[..out.len().min(2000)]
    );
    let kept = w.ok(&["messages", "--team", &w.team, "--json"]);
    let kept: Vec<Value> = serde_json::from_str(&kept).unwrap();
    assert_eq!(kept.len(), 1, "only the small message is kept");

    // a sends 10,000 messages at once; meanwhile b's calls stay as quick as before.
    let t = Instant::now();
    let b = w.member(
        "b",
        &[("team_message", json!({"action": "history", "limit": 1}))],
    );
    ok_answer(&b[0]);
    let before = t.elapsed();
    let flood: Vec<(&str, Value)> = (0..10_000)
        .map(|i| {
            (
                "team_message",
                json!({"action": "send", "body": format!("spam {i}")}),
            )
        })
        .collect();
    let started = Instant::now();
    let mut flooder = w
        .command()
        .args([
            "exec",
            "a",
            "--team",
            &w.team,
            "-i",
            "--",
            "/.ateam/bridge",
            "--stdio",
            "/.ateam/mcp.sock",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = format!("{}\n{}\n", init(0), initialized());
    for (i, (tool, args)) in flood.iter().enumerate() {
        input.push_str(&format!("{}\n", call(i as u64 + 1, tool, args.clone())));
    }
    let mut stdin = flooder.stdin.take().unwrap();
    let feeding = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let flooding = std::thread::spawn(move || text(&flooder.wait_with_output().unwrap().stdout));
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(500));
        let t = Instant::now();
        let b = w.member(
            "b",
            &[("team_message", json!({"action": "history", "limit": 1}))],
        );
        ok_answer(&b[0]);
        slowest = slowest.max(t.elapsed());
    }
    feeding.join().unwrap();
    let out = flooding.join().unwrap();
    let took = started.elapsed();
    let sent = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["result"]["isError"] == false)
        .count();
    eprintln!(
        "{engine:?}: flood of 10000 over {took:?}: {sent} taken; b's slowest call {slowest:?} (before the flood: {before:?})"
    );
    // 30 at once, then 5 a second.
    let most = 30 + 5 * (took.as_secs() as usize + 1);
    assert!(
        sent <= most,
        "{sent} messages taken in {took:?} (at most {most})"
    );
    assert!(slowest < Duration::from_secs(3), "b waited {slowest:?}");

    // A new session for each call is paced as one: the pace is the member's.
    let again = call(
        1,
        "team_message",
        json!({"action": "send", "body": "again"}),
    );
    let script = format!(
        "i=0; while [ $i -lt 200 ]; do printf '%s\\n' '{}' '{}' '{again}' | /.ateam/bridge --stdio /.ateam/mcp.sock > /dev/null; i=$((i+1)); done",
        init(0),
        initialized()
    );
    let t = Instant::now();
    let out = w.ateam(&["exec", "a", "--team", &w.team, "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let took = t.elapsed();
    let kept: Vec<Value> =
        serde_json::from_str(&w.ok(&["messages", "--team", &w.team, "--json", "-n", "100000"]))
            .unwrap();
    let again = kept.iter().filter(|m| m["body"] == "again").count();
    eprintln!("{engine:?}: 200 sessions of one call each over {took:?}: {again} taken");
    // The bucket refilled while b was asking: at most a burst, then 5 a second.
    let most = 30 + 5 * (took.as_secs() as usize + 1);
    assert!(again <= most, "{again} taken in {took:?} (at most {most})");
    assert!(again > 0, "no session's call was taken at all");
}

macro_rules! on_every_engine {
    ($($name:ident => $e:expr),* $(,)?) => {
        $(
            mod $name {
                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_team_works_together() {
                    super::a_team_works_together($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_member_that_leaves_gives_its_tasks_back() {
                    super::a_member_that_leaves_gives_its_tasks_back($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_main_session_hands_its_work_on() {
                    super::a_main_session_hands_its_work_on($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn floods_are_bounded() {
                    super::floods_are_bounded($e);
                }
            }
        )*
    };
}

on_every_engine!(
    docker => super::Engine::Docker,
    podman => super::Engine::Podman,
    rootless_podman => super::Engine::Rootless,
);
