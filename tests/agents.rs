//! Real coding agents as members, end to end: the example manifests of examples/agents/ as a
//! user applies them, with the real Claude Code and Codex CLI (images from
//! scripts/agent-images.sh) talking through their egress proxies to the test suite's stand-in
//! of the remote model (tests/support/model_server.py), which asks each to write a file in its
//! write grant; beside it in the same team, the same agent asked to write in a folder it was
//! granted read-only: it exits 0 all the same, and status, events and `ateam transcript` say
//! it failed and which tool. On Docker, rootful and rootless Podman (ateam then runs as the unprivileged
//! user, through runuser). Run by scripts/test.sh once the engines and the images are there;
//! ignored by a plain `cargo test`. ATEAM_TEST_BIN picks the ateam binary (default: this
//! build's; for rootless Podman a copy that user can reach).

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::standin::{StandIn, chown_tree, copy_dir};
use common::{Engine, rootless_user, shell_line, text};

/// One agent, as its example and the stand-in know it.
struct Agent {
    name: &'static str,
    key_var: &'static str,
    family: &'static str,
    /// Its own transcript, relative to the member's transcript folder: a folder and the
    /// suffix of the file names the agent writes there, at any depth.
    transcript: (&'static str, &'static str),
    /// The tools it writes a file with (the stand-in picks one the agent offers).
    writes_with: &'static [&'static str],
}

const CLAUDE: Agent = Agent {
    name: "claude",
    key_var: "ANTHROPIC_API_KEY",
    family: "anthropic",
    transcript: ("claude/projects", ".jsonl"),
    writes_with: &["Write"],
};

const CODEX: Agent = Agent {
    name: "codex",
    key_var: "OPENAI_API_KEY",
    family: "openai",
    transcript: ("codex/sessions", ".jsonl"),
    writes_with: &["shell_command", "shell", "exec_command"],
};

/// The stand-in model (`common::standin`): every request it served is an entry of its log.
type Model = StandIn;

/// A copy of an example of examples/agents/ under a unique team name, pointed at the
/// stand-in; deleted with --purge on drop, also when an assertion failed: the common world
/// (`common::World`: engine, folder, team, `ateam`, teardown) and the agents' keys.
struct World {
    w: common::World,
    /// The agents' API key variables: only they are set, so members get them by `secretEnv`.
    key_vars: Vec<&'static str>,
}

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.w
    }
}

impl World {
    /// The agent's example; with `blocked`, a second member of the same agent beside its
    /// coder, whose task is to write in a folder it may only read (`blocked_member`).
    fn new(engine: Engine, agent: &Agent, model: &Model, blocked: bool) -> World {
        let example = Example {
            folder: agent.name,
            team: &format!("{}-agent", agent.name),
            key_vars: std::slice::from_ref(&agent.key_var),
        };
        let tag = format!("ag{}", &agent.name[..2]);
        World::of(engine, &example, &tag, model, |root| {
            if !blocked {
                return;
            }
            let manifest = root.join("team.yaml");
            let mut text = std::fs::read_to_string(&manifest).unwrap();
            text.push_str(&blocked_member(&text));
            std::fs::write(&manifest, text).unwrap();
            std::fs::create_dir_all(root.join("workspace/docs")).unwrap();
            std::fs::write(root.join("workspace/docs/README"), "read only\n").unwrap();
        })
    }

    /// The example's copy, its Team renamed after `tag` (`common::World::new`); `prepare`
    /// runs on the copy before it is handed to its owner.
    fn of(
        engine: Engine,
        example: &Example,
        tag: &str,
        model: &Model,
        prepare: impl FnOnce(&Path),
    ) -> World {
        let w = World {
            w: common::World::new(engine, "agents", tag),
            key_vars: example.key_vars.to_vec(),
        };
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/agents")
            .join(example.folder);
        copy_dir(&src, &w.root());
        let manifest = w.path("team.yaml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let text = text.replace(
            &format!("name: {}\n", example.team),
            &format!("name: {}\n", w.team),
        );
        let mut text = model_address(&text, model.port);
        if engine == Engine::Rootless {
            // This machine's rootless Podman (cgroup v1) cannot enforce the limits: say so.
            text = text.replace(
                "  sessionDir: ./sessions\n",
                "  sessionDir: ./sessions\n  allowUnenforcedLimits: true\n",
            );
        }
        std::fs::write(&manifest, text).unwrap();
        prepare(&w.root());
        // The user's own folder, as it would be had the user made the copy: on rootless
        // Podman the engine's user; under root, a user of the machine, whose folder a root
        // caller's members work in as that user (docs/manifests.md).
        let (uid, gid) = w.rootless_person().unwrap_or((FOLDER_OWNER, FOLDER_OWNER));
        chown_tree(&w.root(), uid, gid);
        w
    }

    /// ateam as this engine's user runs it, with only the agents' keys in its environment
    /// (members get them by `secretEnv`).
    fn cmd(&self, args: &[&str]) -> Command {
        let keys: Vec<(&str, &str)> = self.key_vars.iter().map(|k| (*k, "test-key")).collect();
        let mut c = self.command_env(&keys);
        c.args(args);
        c
    }

    fn ateam(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// `ateam ARGS` left running, its output piped; stopped on drop.
    fn ateam_spawn(&self, args: &[&str]) -> Running {
        let mut child = self
            .cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Read as it comes, so that a test can wait for a line before it stops the command.
        let out = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut stdout = child.stdout.take().unwrap();
        let reader = {
            let out = out.clone();
            std::thread::spawn(move || {
                use std::io::Read;
                let mut buf = [0u8; 4096];
                while let Ok(n) = stdout.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    out.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            })
        };
        Running {
            child: Some(child),
            out,
            reader: Some(reader),
        }
    }

    fn manifest(&self) -> String {
        self.path("team.yaml").display().to_string()
    }

    /// The coder's row in `status -o json`.
    fn coder(&self) -> serde_json::Value {
        self.member("coder")
    }

    /// A member's row in `status -o json`.
    fn member(&self, name: &str) -> serde_json::Value {
        let out = self.ateam(&["status", "-o", "json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("status -o json: {e}: {}", text(&out.stdout)));
        doc["teams"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["team"] == self.team.as_str())
            .flat_map(|t| t["members"].as_array().unwrap().iter())
            .find(|m| m["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in status: {doc:#}"))
    }
}

/// An example of examples/agents/ as a World copies it.
struct Example<'a> {
    /// Its folder.
    folder: &'a str,
    /// Its Team's name.
    team: &'a str,
    /// The keys its members' grants inject.
    key_vars: &'a [&'static str],
}

/// A second member of the example's agent, beside its coder: its grant is the model host and
/// a folder it may only read, and its task is to write a file there. The agent's write fails
/// (a read-only file system); it says it is done and exits 0.
fn blocked_member(example: &str) -> String {
    let agent = example
        .split("  agent:\n")
        .nth(1)
        .and_then(|a| a.split("  resources:").next())
        .unwrap();
    let agent: String = agent
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("task:") {
                "    task: \"create the file notes.txt containing exactly: blocked\"".to_string()
            } else {
                l.to_string()
            }
        })
        .map(|l| l + "\n")
        .collect();
    let network = example
        .split("  network:\n")
        .nth(1)
        .and_then(|n| n.split("---").next())
        .unwrap();
    format!(
        "---\napiVersion: ateam.dev/v1alpha1\nkind: AccessGrant\nmetadata:\n  name: read-only\nspec:\n  \
         read: [./workspace/docs]\n  network:\n{network}---\napiVersion: ateam.dev/v1alpha1\n\
         kind: Member\nmetadata:\n  name: blocked\nspec:\n  parent: lead\n  access: read-only\n  \
         cwd: ./workspace/docs\n  agent:\n{agent}  resources:\n    memory: 2Gi\n    pids: 512\n  \
         restart: Never\n"
    )
}

/// The example's model server, `host.ateam.internal:8790` (this host's loopback, port 8790),
/// moved to the stand-in's port.
fn model_address(manifest: &str, port: u16) -> String {
    manifest.replace("host.ateam.internal:8790", &model_host(port))
}

fn model_host(port: u16) -> String {
    format!("host.ateam.internal:{port}")
}

/// Every file below `dir` whose name ends with `suffix`.
fn files_below(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let (path, ft) = (e.path(), e.file_type().unwrap());
        if ft.is_dir() {
            out.extend(files_below(&path, suffix));
        } else if ft.is_file() && path.to_string_lossy().ends_with(suffix) {
            out.push(path);
        }
    }
    out
}

/// The owner of the example's copy under a root caller: a user of the machine, not root.
const FOLDER_OWNER: u32 = 4242;

/// Who a member runs as when neither Member nor Team says `user` (docs/manifests.md): under
/// a root caller with no `sudo` user, the owner of the Team's folder; on rootless Podman,
/// the user (keep-id).
fn expected_uid(engine: Engine) -> u32 {
    match engine {
        Engine::Rootless => rootless_user().1,
        Engine::Docker | Engine::Podman => FOLDER_OWNER,
    }
}

/// Apply the example, wait for the agent's turn to end, and check what it left: the edit on
/// the host with the documented owner, its own transcript in ateam's transcript folder and in
/// status, and an egress log of the model host only.
fn an_agent_edits_its_grant_through_its_proxy(engine: Engine, agent: &Agent) {
    let scratch = tempfile::tempdir().unwrap();
    let model = Model::start(scratch.path(), &[]);
    let w = World::new(engine, agent, &model, true);
    let t0 = Instant::now();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let out = w.ateam(&["apply", "-f", &w.manifest()]);
    let applied = t0.elapsed();
    // Followed from before the agent's first line (it waits for the session to begin).
    let follow = w.ateam_spawn(&["transcript", "coder", "-f"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "apply failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    // The agents run one turn each and exit: wait for `exited` of both.
    let deadline = t0 + Duration::from_secs(120);
    loop {
        let row = w.coder();
        let exited =
            |r: &serde_json::Value| r["state"].as_str().unwrap_or("").starts_with("exited");
        if exited(&row) && exited(&w.member("blocked")) {
            break;
        }
        if Instant::now() > deadline {
            let logs = w.ateam(&["logs", "coder"]);
            panic!(
                "{} never ended its turn: {row:#}\n{}{}",
                agent.name,
                text(&logs.stdout),
                text(&logs.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let ended = t0.elapsed();
    // Status reads transcript folders while it waits for the engine's list: the look that
    // first saw the exit may have read the folder just before the agent's last lines. The
    // next look reads it after.
    let row = w.coder();
    let logs = w.ateam(&["logs", "coder"]);
    let logs = format!("{}{}", text(&logs.stdout), text(&logs.stderr));
    assert_eq!(row["state"], "exited 0", "{row:#}\n{logs}");

    // The edit, on the host, by the member's user.
    let edit = w.root().join("workspace/repo/hello.txt");
    let content = std::fs::read_to_string(&edit)
        .unwrap_or_else(|e| panic!("{}: {e}; the agent said:\n{logs}", edit.display()));
    assert_eq!(content, format!("hello from {}\n", agent.name));
    let meta = std::fs::metadata(&edit).unwrap();
    assert_eq!(
        meta.uid(),
        expected_uid(engine),
        "owner of {}",
        edit.display()
    );

    // The agent's own transcript, in ateam's transcript folder, and status counts it.
    let folder = PathBuf::from(row["transcript"].as_str().unwrap());
    assert_eq!(folder, w.root().join("sessions/members/coder"));
    let transcripts = files_below(&folder.join(agent.transcript.0), agent.transcript.1);
    let own = transcripts
        .iter()
        .find(|p| {
            std::fs::read_to_string(p)
                .map(|s| s.contains(&format!("hello from {}", agent.name)))
                .unwrap_or(false)
        })
        .unwrap_or_else(|| panic!("no transcript of the task among {transcripts:?}"));
    let own_bytes = std::fs::metadata(own).unwrap().len();
    let bytes = row["transcriptBytes"].as_u64().unwrap_or(0);
    assert!(
        bytes >= own_bytes && own_bytes > 0,
        "status counts {bytes} bytes, the agent's transcript alone has {own_bytes}: {row:#}"
    );
    assert!(!row["lastActivityAt"].is_null(), "{row:#}");

    // The model saw the whole scripted turn, and nothing else was asked of it.
    let requests = model.entries();
    let steps: Vec<&str> = requests.iter().filter_map(|r| r["step"].as_str()).collect();
    assert!(
        steps.contains(&"tool") && steps.contains(&"done"),
        "{steps:?}"
    );
    for r in &requests {
        assert_eq!(r["family"], agent.family, "an unexpected request: {r}");
        assert_eq!(r["host"], model_host(model.port).as_str(), "{r}");
        // The member holds only a placeholder: this is the proxy's injection.
        assert_eq!(r["api_key"], "test-key", "the key the proxy injects: {r}");
    }

    // The egress logs: the model host, allowed, and nothing else. The proxy writes a line when
    // a connection ends, which may be just after the agent exited: wait a little for both.
    // The stand-in served both members.
    let model_requests = requests.iter().filter(|r| r["method"] == "POST").count();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (egress, blocked_egress) = loop {
        let out = text(&w.ateam(&["logs", "coder", "--egress"]).stdout);
        let other = text(&w.ateam(&["logs", "blocked", "--egress"]).stdout);
        let n = format!("{out}{other}")
            .lines()
            .filter(|l| l.contains("allowed"))
            .count();
        if n >= model_requests || Instant::now() > deadline {
            break (out, other);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let both = format!("{egress}{blocked_egress}");
    let lines: Vec<&str> = both.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines.len() >= model_requests.max(4),
        "{model_requests} requests reached the model; egress logs: {egress}{blocked_egress}"
    );
    for l in &lines {
        assert!(
            l.contains("allowed") && l.contains(&model_host(model.port)),
            "egress log has more than the model host: {egress}{blocked_egress}"
        );
    }
    assert!(egress.lines().any(|l| l.contains("allowed")), "{egress}");

    a_failed_write_shows_as_failed(&w, agent, &row);
    followed_to_its_end(follow, agent);

    let first = requests
        .iter()
        .filter_map(|r| r["t"].as_f64())
        .fold(f64::INFINITY, f64::min)
        - started;
    a_next_task_continues_the_session(&w, &model, agent, &row);
    eprintln!(
        "[agents] {} on {engine:?}: apply {:.2} s, first model request {first:.2} s, \
         exited {:.2} s after apply began",
        agent.name,
        applied.as_secs_f64(),
        ended.as_secs_f64()
    );
}

/// `ateam task`: the agent's next task, in its own session (the model sees the first task in
/// its history), in the same container, through the gate (the start is released again).
fn a_next_task_continues_the_session(
    w: &World,
    model: &Model,
    agent: &Agent,
    row: &serde_json::Value,
) {
    let before = model.entries().len();
    let task = format!(
        "create the file second.txt containing exactly: next from {}",
        agent.name
    );
    let out = w.ateam(&["task", "coder", &task, "--wait"]);
    let logs = w.ateam(&["logs", "coder"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "ateam task:\n{}{}\nlogs:\n{}{}",
        text(&out.stdout),
        text(&out.stderr),
        text(&logs.stdout),
        text(&logs.stderr)
    );
    let second = w.root().join("workspace/repo/second.txt");
    assert_eq!(
        std::fs::read_to_string(&second).unwrap_or_default(),
        format!("next from {}\n", agent.name),
        "{}",
        text(&logs.stdout)
    );
    let again = w.coder();
    assert_eq!(
        again["containerId"], row["containerId"],
        "the same container: {again:#}"
    );
    assert_eq!(again["state"], "exited 0", "{again:#}");
    let requests = model.entries();
    let carried = |rs: &[serde_json::Value]| {
        rs.iter()
            .filter(|r| r["step"] == "tool")
            .map(|r| r["tasks"].as_u64().unwrap_or(0))
            .max()
            .unwrap_or(0)
    };
    let (first, next) = (carried(&requests[..before]), carried(&requests[before..]));
    assert!(
        next > first && first > 0,
        "the second task's request carries the first in its history: {first} then {next} task sentences"
    );
    let events = text(&w.ateam(&["events", &w.team]).stdout);
    assert!(events.contains("task-given"), "{events}");
    // The manifest's task is the first one only: applying again starts nothing.
    let out = w.ateam(&["apply", "-f", &w.manifest()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(w.coder()["state"], "exited 0");
}

/// A tmux server of the test's own (its own socket), ended on drop.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs")
    }

    fn screen(&self) -> String {
        text(&self.run(&["capture-pane", "-p", "-t", "t"]).stdout)
    }

    /// Waits until the screen shows `what`.
    fn wait_for(&self, what: &str, why: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.screen();
            if screen.contains(what) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "{why}: the screen never showed {what:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// An interactive agent (`agent.interactive`): its terminal UI runs in a terminal the engine
/// keeps; `ateam attach` in tmux gives it a task by keystrokes, the answer shows, the person
/// detaches (it keeps running) and comes back to the same screen.
fn an_interactive_agent_answers_through_attach(engine: Engine, agent: &Agent) {
    let scratch = tempfile::tempdir().unwrap();
    let model = Model::start(scratch.path(), &[]);
    let w = World::new(engine, agent, &model, false);
    let manifest = w.root().join("team.yaml");
    let yaml = std::fs::read_to_string(&manifest).unwrap();
    let task_line = yaml
        .lines()
        .find(|l| l.trim_start().starts_with("task:"))
        .unwrap()
        .to_string();
    std::fs::write(&manifest, yaml.replace(&task_line, "    interactive: true")).unwrap();
    let out = w.ateam(&["apply", "-f", &w.manifest()]);
    assert_eq!(out.status.code(), Some(0), "apply: {}", text(&out.stderr));
    assert_eq!(w.coder()["state"], "running");

    let tmux = Tmux {
        socket: scratch.path().join("tmux.sock"),
    };
    let state = w.root().join("state");
    let attach = common::ateam_command_env(engine, &state, &[(w.key_vars[0], "test-key")]);
    let mut attach = attach;
    attach.args(["attach", "coder"]);
    // The pane stays when attach ends, so that a failure shows what it said.
    let line = format!("{}; echo attach ended: $?; sleep 600", shell_line(&attach));
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "120",
        "-y",
        "40",
        &line,
    ]);
    assert!(out.status.success(), "tmux: {}", text(&out.stderr));
    let ready = match agent.name {
        "claude" => "bypass permissions",
        _ => "OpenAI Codex",
    };
    tmux.wait_for(ready, "the agent's UI through attach");
    let task = format!(
        "create the file talk.txt containing exactly: talked to {}",
        agent.name
    );
    // The agent's title shows before its input takes keys (a loaded machine, the
    // terminal's first redraws): keys typed then are lost, and Enter sends nothing. The task
    // is typed again until the input shows it, then sent.
    let typed = format!("talked to {}", agent.name);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        tmux.run(&["send-keys", "-t", "t", "-l", &task]);
        let shown = Instant::now() + Duration::from_secs(5);
        while Instant::now() < shown && !tmux.screen().contains(&typed) {
            std::thread::sleep(Duration::from_millis(200));
        }
        if tmux.screen().contains(&typed) || Instant::now() > deadline {
            break;
        }
    }
    tmux.wait_for(&typed, "the task typed into the agent's input");
    std::thread::sleep(Duration::from_millis(500));
    tmux.run(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("Done: the file is written.", "the agent's answer");
    let talk = w.root().join("workspace/repo/talk.txt");
    assert_eq!(
        std::fs::read_to_string(&talk).unwrap_or_default(),
        format!("talked to {}\n", agent.name)
    );
    // Detach: the attach ends (0), the agent keeps running.
    tmux.run(&["send-keys", "-t", "t", "C-]"]);
    tmux.wait_for("attach ended: 0", "a detach with Ctrl-]");
    assert_eq!(
        w.coder()["state"],
        "running",
        "the agent keeps running after a detach"
    );
    // Back again: the same session, its earlier turn drawn again.
    let out = tmux.run(&["respawn-pane", "-k", "-t", "t", &line]);
    assert!(out.status.success(), "tmux: {}", text(&out.stderr));
    tmux.wait_for("talk.txt", "the earlier turn after attaching again");
    // Nothing but the model host was reached; the key was the proxy's.
    for r in model.entries() {
        assert_eq!(r["api_key"], "test-key", "{r}");
    }
}

/// The member whose write failed exited 0, and shows as failed all the same: in status (the
/// tool that failed named, beside `exited 0`), in events, and in `ateam transcript` (the call
/// and its error); the coder shows as done.
fn a_failed_write_shows_as_failed(w: &World, agent: &Agent, coder: &serde_json::Value) {
    let blocked = w.member("blocked");
    assert_eq!(blocked["state"], "exited 0", "{blocked:#}");
    let said = |m: &str| text(&w.ateam(&["transcript", m]).stdout);
    assert_eq!(
        coder["agent"]["outcome"],
        "done",
        "{coder:#}\n{}",
        said("coder")
    );
    assert_eq!(coder["agent"]["name"], agent.name);
    let a = &blocked["agent"];
    assert_eq!(a["outcome"], "failed", "{blocked:#}\n{}", said("blocked"));
    let tool = a["failedTools"][0]["tool"].as_str().unwrap_or("");
    assert!(agent.writes_with.contains(&tool), "{blocked:#}");
    assert_eq!(a["failedTools"][0]["refused"], true, "{blocked:#}");
    let error = a["failedTools"][0]["error"]
        .as_str()
        .unwrap()
        .to_lowercase();
    assert!(
        error.contains("read-only file system") || error.contains("erofs"),
        "{error}"
    );
    assert!(
        a["reason"]
            .as_str()
            .unwrap()
            .starts_with("task 1 failed: the tools that failed: "),
        "{blocked:#}"
    );
    assert!(!Path::new(&w.root().join("workspace/docs/notes.txt")).exists());

    // The table: `failed` beside the exit code, and why under it.
    let table = text(&w.ateam(&["status"]).stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("blocked "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        row.contains("exited 0") && row.contains(" failed "),
        "{table}"
    );
    let note = format!(
        "  blocked: {} failed: task 1 failed: the tools that failed: {tool} (",
        agent.name
    );
    assert!(table.contains(&note), "{table}");

    // Events: the coder's task done, the blocked one's failed, naming the tool.
    let out = w.ateam(&["events", &w.team, "-o", "json"]);
    let events: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let of = |member: &str, kind: &str| {
        events
            .iter()
            .find(|e| e["member"] == member && e["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} of {member}: {events:#?}"))
    };
    of("coder", "agent-done");
    let failed = of("blocked", "agent-failed");
    assert!(
        failed["reason"].as_str().unwrap().starts_with(&format!(
            "{} task 1 failed: the tools that failed: {tool} (",
            agent.name
        )),
        "{failed}"
    );

    // The transcript: the task, the call, its error, the verdict.
    let out = w.ateam(&["transcript", "blocked"]);
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{shown}{}", text(&out.stderr));
    for want in [
        "  > create the file notes.txt containing exactly: blocked",
        &format!("  {tool} "),
        "    FAILED: ",
        "  = task 1 failed: the tools that failed: ",
    ] {
        assert!(shown.contains(want), "{want:?} not in:\n{shown}");
    }
    let failed_line = shown
        .lines()
        .find(|l| l.starts_with("    FAILED: "))
        .unwrap();
    assert!(
        failed_line.to_lowercase().contains("read-only file system"),
        "{shown}"
    );
    let out = w.ateam(&["transcript", "coder", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["tasks"][0]["ended"], true, "{doc:#}");
    assert_eq!(
        doc["tasks"][0]["failedTools"],
        serde_json::json!([]),
        "{doc:#}"
    );
}

/// A command left running (`ateam transcript -f`), told to stop (SIGTERM) when done with or
/// dropped.
struct Running {
    child: Option<Child>,
    /// What it printed so far.
    out: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Waits (up to `within`) until it printed each of `want`.
    fn wait_for(&self, want: &[String], within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let out = self.out.lock().unwrap().clone();
            if want.iter().all(|w| out.contains(w)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops it; what it printed. Under runuser (rootless Podman) ateam is runuser's child:
    /// it is told itself, so runuser returns as soon as it ends (told, runuser would wait two
    /// seconds before it ends its child).
    fn stop(&mut self) -> String {
        let Some(mut child) = self.child.take() else {
            return String::new();
        };
        let pid = child.id();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        let mut pids: Vec<u32> = children
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() {
            pids.push(pid);
        }
        for p in pids {
            if let Some(p) = rustix::process::Pid::from_raw(p as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
            }
        }
        let _ = child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.out.lock().unwrap().clone()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `ateam transcript coder -f`, started before the agent wrote anything, printed its task and
/// the task's end as the agent wrote them; it runs until told to stop.
fn followed_to_its_end(mut follow: Running, agent: &Agent) {
    let wanted = [
        format!(
            "  > create the file hello.txt containing exactly: hello from {}",
            agent.name
        ),
        format!("  {}: Done: the file is written.", agent.name),
        "  = task 1 done".to_string(),
    ];
    // It reads the file every 250 ms: the agent's last lines may be a moment old.
    follow.wait_for(&wanted, Duration::from_secs(20));
    let shown = follow.stop();
    for want in wanted {
        assert!(
            shown.contains(&want),
            "{want:?} not in what -f printed:\n{shown}"
        );
    }
}

fn claude_code_edits_its_grant_through_its_proxy(engine: Engine) {
    an_agent_edits_its_grant_through_its_proxy(engine, &CLAUDE);
}

fn codex_edits_its_grant_through_its_proxy(engine: Engine) {
    an_agent_edits_its_grant_through_its_proxy(engine, &CODEX);
}

/// The Codex example with no model host in its grant (write only) and `modelCA` on its
/// agent: `agent:` grants the host itself, `diff` says so, and the agent's turn reaches the
/// stand-in through its proxy with the key injected.
fn an_agent_reaches_its_model_without_a_grant(engine: Engine) {
    let scratch = tempfile::tempdir().unwrap();
    let model = Model::start(scratch.path(), &[]);
    let example = Example {
        folder: "codex",
        team: "codex-agent",
        key_vars: &[CODEX.key_var],
    };
    let w = World::of(engine, &example, "agng", &model, |root| {
        let manifest = root.join("team.yaml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let (head, rest) = text.split_once("  network:\n").unwrap();
        let (_, tail) = rest.split_once("---").unwrap();
        let text = format!("{head}---{tail}").replace(
            "    modelUrl: https://host.ateam.internal:",
            "    modelCA: ./model-ca.pem\n    modelUrl: https://host.ateam.internal:",
        );
        assert!(!text.contains("credentials"), "{text}");
        std::fs::write(&manifest, text).unwrap();
    });
    let diff = w.ateam(&["diff", "-f", &w.manifest()]);
    let shown = text(&diff.stdout);
    assert!(
        shown.contains(&format!(
            "its model host: {}, allowed by its agent",
            model_host(model.port)
        )),
        "{shown}{}",
        text(&diff.stderr)
    );
    let out = w.ateam(&["apply", "-f", &w.manifest()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "apply failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let row = loop {
        let row = w.coder();
        if row["state"].as_str().unwrap_or("").starts_with("exited") {
            break row;
        }
        assert!(Instant::now() < deadline, "never ended its turn: {row:#}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let logs = w.ateam(&["logs", "coder"]);
    assert_eq!(row["state"], "exited 0", "{row:#}\n{}", text(&logs.stderr));
    let edit = w.root().join("workspace/repo/hello.txt");
    assert_eq!(
        std::fs::read_to_string(&edit).unwrap_or_default(),
        "hello from codex\n"
    );
    let requests = model.entries();
    assert!(requests.iter().any(|r| r["step"] == "done"), "{requests:?}");
    for r in &requests {
        assert_eq!(r["host"], model_host(model.port).as_str(), "{r}");
        assert_eq!(r["api_key"], "test-key", "the key the proxy injects: {r}");
    }
    // Status shows the host among the member's grants, with what is injected there.
    let grants = &row["grants"]["network"];
    assert_eq!(grants["mode"], "allow", "{row:#}");
    assert_eq!(
        grants["injected"][0]["host"],
        model_host(model.port).as_str(),
        "{row:#}"
    );
}

/// The fix examples/agents/fix-a-test asks of each agent.
const FIXED: &str = "def add(a, b): return a + b\n";

/// Claude Code on the host as the lead's agent (ateam's pinned build, from the cache apply
/// filled), against a stand-in over plain HTTP, its team tools from `ateam mcp` as the lead
/// (run as the engine's user). Not as root with `--dangerously-skip-permissions`: the team
/// tools alone are allowed.
fn lead_claude(w: &World, model: &Model, dir: &Path, prompt: &str) -> Output {
    let (user, _, _) = rootless_user();
    let caches = [
        format!("{}/.cache/ateam/agents", common::var("HOME")),
        "/root/.cache/ateam/agents".to_string(),
        format!("/home/{user}/.cache/ateam/agents"),
    ];
    let claude = caches
        .iter()
        .filter_map(|c| std::fs::read_dir(c).ok())
        .flatten()
        .flatten()
        .map(|e| e.path().join("claude"))
        .find(|p| p.is_file())
        .expect("apply fetched Claude Code's build");
    let server = common::ateam_command(w.engine, &w.root().join("state"));
    let mut args: Vec<String> = server
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    args.extend(["mcp", "--team", &w.team, "--session", "lead"].map(String::from));
    let env: serde_json::Map<String, serde_json::Value> = server
        .get_envs()
        .filter_map(|(k, v)| {
            Some((
                k.to_string_lossy().into_owned(),
                v?.to_string_lossy().into_owned().into(),
            ))
        })
        .collect();
    let config = serde_json::json!({"mcpServers": {"team": {
        "type": "stdio",
        "command": server.get_program().to_string_lossy(),
        "args": args,
        "env": env,
    }}});
    // Both flags take every value up to the next flag: the prompt comes first.
    Command::new(claude)
        .args(["-p", prompt, "--mcp-config", &config.to_string()])
        .args([
            "--allowedTools",
            "mcp__team__team_task",
            "mcp__team__team_message",
        ])
        .env_clear()
        .env("PATH", common::var("PATH"))
        .env("HOME", dir)
        .env("CLAUDE_CONFIG_DIR", dir.join("claude"))
        .env(
            "ANTHROPIC_BASE_URL",
            format!("http://127.0.0.1:{}", model.port),
        )
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// examples/agents/fix-a-test, with both agents' keys.
const FIX_A_TEST: Example = Example {
    folder: "fix-a-test",
    team: "fix-a-test",
    key_vars: &[CLAUDE.key_var, CODEX.key_var],
};

/// The example's `repo/` made the person's repository: its files committed on `main`.
fn commit_the_repository(root: &Path) {
    let repo = root.join("repo");
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=person",
            "-c",
            "user.email=p@x",
            "commit",
            "-qm",
            "first",
        ],
    ] {
        host_git(&repo, args);
    }
}

/// git as the test runs it on the host, on a repository of another owner.
fn host_git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "safe.directory=*", "-C"])
        .arg(repo)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// examples/agents/fix-a-test: Claude Code and Codex CLI on the toolchain image (no agent
/// in it: ateam mounts each one's build), each in a workspace of a Python repository whose
/// test fails. Each runs the test (red), writes the fix, runs it again (green) and commits,
/// as the stand-in's script asks; checked from outside: the tool results the agents sent
/// back (the stand-in's log), the commit on each member's branch (`changes`, then `collect`
/// and the host's git) and the file in each workspace.
fn agents_fix_a_failing_test_and_commit(engine: Engine) {
    let scratch = tempfile::tempdir().unwrap();
    let model = Model::start(scratch.path(), &[]);
    // The person's repository: the example's files, committed. No sessions folder yet: ateam
    // makes it, passable for the members' uid, whose git makes their workspaces through it.
    let w = World::of(engine, &FIX_A_TEST, "fix", &model, |root| {
        commit_the_repository(root);
    });
    let t0 = Instant::now();
    let out = w.ateam(&["apply", "-f", &w.manifest()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "apply failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let deadline = t0 + Duration::from_secs(180);
    for agent in [&CLAUDE, &CODEX] {
        let row = loop {
            let row = w.member(agent.name);
            if row["state"].as_str().unwrap_or("").starts_with("exited")
                || Instant::now() > deadline
            {
                break row;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let logs = w.ateam(&["logs", agent.name]);
        let logs = format!("{}{}", text(&logs.stdout), text(&logs.stderr));
        assert_eq!(row["state"], "exited 0", "{}: {row:#}\n{logs}", agent.name);
    }
    let ended = t0.elapsed();
    let requests = model.entries();
    for agent in [&CLAUDE, &CODEX] {
        let mine: Vec<&serde_json::Value> = requests
            .iter()
            .filter(|r| r["family"] == agent.family && r["step"] != "other")
            .collect();
        let steps: Vec<&str> = mine.iter().filter_map(|r| r["step"].as_str()).collect();
        let mut want = vec!["run-tests", "read", "fix", "rerun-tests", "commit", "done"];
        if agent.name == "codex" {
            want.retain(|s| *s != "read");
        }
        assert_eq!(steps, want, "{}: {mine:#?}", agent.name);
        // What the agent's shell answered: the test failed, then after the fix it passed.
        let result = |i: usize| mine[i]["tool_result"].as_str().unwrap_or("").to_string();
        let red = result(1);
        assert!(
            red.contains("1 failed"),
            "{}: the first run: {red}",
            agent.name
        );
        let green = result(steps.len() - 2);
        assert!(
            green.contains("2 passed") && !green.contains("failed"),
            "{}: the run after the fix: {green}",
            agent.name
        );

        // The commit on the member's branch, as ateam shows it and as the host's git reads it
        // once collected into the person's repository.
        let out = w.ateam(&["changes", agent.name, "--json"]);
        let changes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "changes --json: {e}: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            )
        });
        assert_eq!(changes["ahead"], 1, "{changes:#}");
        assert!(
            changes["commits"][0]
                .as_str()
                .unwrap_or("")
                .ends_with(" fix add"),
            "{changes:#}"
        );
        assert_eq!(changes["uncommitted"], serde_json::json!([]), "{changes:#}");
        let out = w.ateam(&["collect", agent.name]);
        assert!(out.status.success(), "collect: {}", text(&out.stderr));
        let repo = w.root().join("repo");
        let branch = format!("refs/ateam/{}/{}", w.team, agent.name);
        assert_eq!(
            host_git(&repo, &["show", &format!("{branch}:calc.py")]),
            FIXED
        );
        assert_eq!(
            host_git(&repo, &["log", "-1", "--format=%an %s", &branch]).trim(),
            format!("{} fix add", agent.name)
        );
        // And the file in its workspace.
        let ws = w.root().join("sessions/workspaces").join(agent.name);
        assert_eq!(std::fs::read_to_string(ws.join("calc.py")).unwrap(), FIXED);
    }
    eprintln!(
        "[agents] both fixed the test on {engine:?}: {:.2} s after apply began",
        ended.as_secs_f64()
    );
}

/// The board (`board: true`), with the real agents: after their first task, the lead (its
/// tools through `ateam mcp`) makes two tasks; each agent, given its next task with `ateam
/// task`, claims one, starts it, completes it and messages the lead through the team's MCP
/// tools (the stand-in plays those calls); the lead sees both done and both messages, each
/// marked with its author; `ateam tasks show` has the history.
fn agents_work_together_on_the_board(engine: Engine) {
    let scratch = tempfile::tempdir().unwrap();
    let model = Model::start(scratch.path(), &[]);
    let w = World::of(engine, &FIX_A_TEST, "brd", &model, |root| {
        commit_the_repository(root);
        let manifest = root.join("team.yaml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let first = "create the file first.txt containing exactly: ready";
        let text = text
            .replace("  sessionDir: ./sessions\n", "  sessionDir: ./sessions\n  board: true\n")
            .replace(
                "task: \"fix the failing test: run `python3 -m pytest -q`, write `calc.py` as `def add(a, b): return a + b`, run the tests again, and commit as `fix add`\"",
                &format!("task: \"{first}\""),
            );
        std::fs::write(&manifest, text).unwrap();
    });
    let out = w.ateam(&["apply", "-f", &w.manifest()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(180);
    for agent in [&CLAUDE, &CODEX] {
        while !w.member(agent.name)["state"]
            .as_str()
            .unwrap_or("")
            .starts_with("exited")
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(w.member(agent.name)["state"], "exited 0", "{}", agent.name);
    }
    let lead = |calls: &[(&str, serde_json::Value)]| {
        let state = w.root().join("state");
        let mut c = common::ateam_command(w.engine, &state);
        c.args(["mcp", "--team", &w.team, "--session", "lead"]);
        common::mcp::session(c, calls)
    };
    // The lead's agent: Claude Code on the host, its tools from `ateam mcp` as the lead.
    let lead_dir = tempfile::tempdir().unwrap();
    let lead_model = Model::start_plain(lead_dir.path());
    let lead_agent = |prompt: &str| {
        let out = lead_claude(&w, &lead_model, lead_dir.path(), prompt);
        assert!(
            out.status.success(),
            "the lead's agent: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    };
    lead_agent(
        "use the team tool team_task with {\"action\": \"create\", \"title\": \"fix add\"}; use the team tool team_task with {\"action\": \"create\", \"title\": \"document add\"}",
    );
    let made = lead(&[("team_task", serde_json::json!({"action": "read", "id": 2}))]);
    assert_eq!(
        common::mcp::ok_answer(&made[0])["task"]["writtenBy"],
        serde_json::json!({"mainSession": "lead"}),
        "{made:?}: {:#?}",
        lead_model.entries()
    );
    for (agent, id) in [(&CLAUDE, 1), (&CODEX, 2)] {
        let call = |action: &str, extra: &str| {
            format!(
                "use the team tool team_task with {{\"action\": \"{action}\", \"id\": {id}{extra}}}"
            )
        };
        let task = [
            call("claim", ""),
            call("start", ""),
            call("complete", &format!(", \"note\": \"done by {}\"", agent.name)),
            format!(
                "use the team tool team_message with {{\"action\": \"send\", \"to\": [\"lead\"], \"body\": \"task {id} is done\"}}"
            ),
        ]
        .join("; ");
        let out = w.ateam(&["task", agent.name, &task, "--wait"]);
        let logs = w.ateam(&["logs", agent.name]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}{}\n{}",
            agent.name,
            text(&out.stderr),
            text(&logs.stdout),
            text(&logs.stderr)
        );
        let calls: Vec<serde_json::Value> = model
            .entries()
            .into_iter()
            .filter(|r| r["family"] == agent.family && r["step"] == "team-tool")
            .collect();
        assert_eq!(calls.len(), 4, "{}: {:#?}", agent.name, model.entries());
        // The answer to its last call (the message), carried by its final request.
        let last = model
            .entries()
            .into_iter()
            .rfind(|r| r["family"] == agent.family && r["step"] == "done")
            .unwrap();
        let said = last["tool_result"].as_str().unwrap_or("");
        assert!(said.contains("\"sent\""), "{}: {last:#}", agent.name);
    }
    // What each agent's tools answered, as the stand-in saw it: the task done, by it.
    let results: Vec<String> = model
        .entries()
        .iter()
        .filter_map(|r| r["tool_result"].as_str().map(String::from))
        .collect();
    assert!(
        results.iter().any(|r| r.contains("\"state\": \"done\"")),
        "{results:#?}"
    );
    // The lead's agent sees both completions.
    lead_agent("use the team tool team_task with {\"action\": \"list\", \"state\": \"done\"}");
    let seen = lead_model
        .entries()
        .into_iter()
        .rfind(|r| r["step"] == "done")
        .unwrap();
    let seen = seen["tool_result"].as_str().unwrap_or("").to_string();
    assert!(
        seen.contains("fix add") && seen.contains("document add"),
        "the lead's agent saw: {seen}"
    );
    let heard = lead(&[
        ("team_message", serde_json::json!({"action": "history"})),
        ("team_task", serde_json::json!({"action": "list"})),
    ]);
    let messages = common::mcp::ok_answer(&heard[0]);
    let from: Vec<&serde_json::Value> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["writtenBy"])
        .collect();
    assert_eq!(
        from,
        [
            &serde_json::json!({"member": "claude"}),
            &serde_json::json!({"member": "codex"})
        ],
        "{messages:#}"
    );
    let tasks = common::mcp::ok_answer(&heard[1]);
    for t in tasks["tasks"].as_array().unwrap() {
        assert_eq!(t["state"], "done", "{tasks:#}");
    }
    // The lead writes to claude, whose agent has ended: the next apply wakes it (its next
    // task, in its session) and it reads the message through its tools; once only.
    lead(&[(
        "team_message",
        serde_json::json!({"action": "send", "to": ["claude"], "body": "please also add a docstring"}),
    )]);
    let out = w.ateam(&["apply", "-f", &w.manifest()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let read = common::eventually(Duration::from_secs(90), || {
        model.entries().iter().any(|r| {
            r["family"] == "anthropic"
                && r["tool_result"]
                    .as_str()
                    .is_some_and(|t| t.contains("please also add a docstring"))
        })
    });
    assert!(
        read,
        "claude never read the lead's message: {:#?}",
        model.entries()
    );
    let events = text(&w.ateam(&["events", &w.team]).stdout);
    assert!(events.contains("woken by the team's board"), "{events}");
    while w.member("claude")["state"] != "exited 0"
        && Instant::now() < deadline + Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = w.ateam(&["apply", "-f", &w.manifest()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let events = text(&w.ateam(&["events", &w.team]).stdout);
    assert_eq!(
        events.matches("woken by the team's board").count(),
        1,
        "{events}"
    );
    let shown = text(&w.ateam(&["tasks", "--team", &w.team, "show", "2"]).stdout);
    for what in [
        "created by main session lead",
        "claimed by member codex",
        "completed by member codex: done by codex",
    ] {
        assert!(shown.contains(what), "`{what}` not in:\n{shown}");
    }
}

fn engine_of(name: &str) -> Engine {
    match name {
        "docker" => Engine::Docker,
        "podman" => Engine::Podman,
        _ => Engine::Rootless,
    }
}

macro_rules! agents {
    ($($engine:ident),*) => {
        $(
            mod $engine {
                #[test]
                #[ignore = "needs container engines and scripts/agent-images.sh: run scripts/test.sh"]
                fn claude_code_edits_its_grant_through_its_proxy() {
                    super::claude_code_edits_its_grant_through_its_proxy(super::engine_of(stringify!($engine)));
                }

                #[test]
                #[ignore = "needs container engines and scripts/agent-images.sh: run scripts/test.sh"]
                fn claude_code_answers_through_attach() {
                    super::an_interactive_agent_answers_through_attach(super::engine_of(stringify!($engine)), &super::CLAUDE);
                }

                #[test]
                #[ignore = "needs container engines and scripts/agent-images.sh: run scripts/test.sh"]
                fn codex_answers_through_attach() {
                    super::an_interactive_agent_answers_through_attach(super::engine_of(stringify!($engine)), &super::CODEX);
                }

                #[test]
                #[ignore = "needs container engines and scripts/agent-images.sh: run scripts/test.sh"]
                fn codex_edits_its_grant_through_its_proxy() {
                    super::codex_edits_its_grant_through_its_proxy(super::engine_of(stringify!($engine)));
                }

                #[test]
                #[ignore = "needs container engines and scripts/agent-images.sh: run scripts/test.sh"]
                fn an_agent_reaches_its_model_without_a_grant() {
                    super::an_agent_reaches_its_model_without_a_grant(super::engine_of(stringify!($engine)));
                }

                #[test]
                #[ignore = "needs container engines and scripts/agent-images.sh: run scripts/test.sh"]
                fn agents_fix_a_failing_test_and_commit() {
                    super::agents_fix_a_failing_test_and_commit(super::engine_of(stringify!($engine)));
                }

                #[test]
                #[ignore = "needs container engines and scripts/agent-images.sh: run scripts/test.sh"]
                fn agents_work_together_on_the_board() {
                    super::agents_work_together_on_the_board(super::engine_of(stringify!($engine)));
                }
            }
        )*
    };
}

agents!(docker, podman, rootless_podman);
