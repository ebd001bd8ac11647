//! What a member gets at run time (issue 22): its write grants and HOME writable by its uid
//! (or apply refuses before any change), the program its command really runs checked before
//! any change, and `ateam exec` with the member's environment, ended with its client. Each
//! case drives the real `ateam` binary (ATEAM_TEST_BIN) against a real engine and judges from
//! outside and from inside the member. Run on Docker, rootful Podman and rootless Podman
//! (ateam as the unprivileged user) by scripts/test.sh; ignored by a plain `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[macro_use]
mod common;
use common::{Engine, rootless_user, text};

const SECRET: &str = "s3cr3t-value-22";

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
    /// A team with one member `worker` (extra YAML for its spec after `extra`); its write
    /// grant `repo` is left as `repo` says: `Some((uid, gid))` to chown it, `None` root's.
    fn new(engine: Engine, tag: &str, extra: &str, repo: Option<(u32, u32)>) -> World {
        let w = World(common::World::new(engine, "runtime", &format!("{tag}-")));
        w.dirs(&["repo", "docs", "state", "sessions"]);
        w.give(&["", "docs", "state", "sessions"]);
        if let Some((uid, gid)) = repo {
            std::os::unix::fs::chown(w.root().join("repo"), Some(uid), Some(gid)).unwrap();
        }
        let yaml = format!(
            "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, \"100000\"], cwd: ./repo}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: rw}}
spec: {{read: [./docs], write: [./repo]}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: worker}}
spec: {{parent: lead, access: rw, secretEnv: [T22_SECRET], resources: {{memory: 64Mi, pids: 64}}{extra}}}
",
            team = w.team
        );
        w.0.write("team.yaml", &yaml);
        w
    }

    /// The member's uid:gid when a test leaves `user` unset: the rootless user, else nobody
    /// (ateam runs as root in a root-owned folder, with no sudo user).
    fn member_user(engine: Engine) -> (u32, u32) {
        match engine {
            Engine::Rootless => {
                let (_, uid, gid) = rootless_user();
                (uid, gid)
            }
            Engine::Docker | Engine::Podman => (65534, 65534),
        }
    }

    fn manifest(&self) -> PathBuf {
        self.root().join("team.yaml")
    }

    /// `ateam ARGS` as this engine's user, with the member's secret in its environment.
    fn command(&self, args: &[&str]) -> Command {
        let state = self.root().join("state");
        let mut c = common::ateam_command_env(self.engine, &state, &[("T22_SECRET", SECRET)]);
        c.args(args).current_dir(self.root()).stdin(Stdio::null());
        c
    }

    fn ateam(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn apply_out(&self) -> Output {
        self.ateam(&["apply", "-f", self.manifest().to_str().unwrap()])
    }

    fn apply(&self) {
        let out = self.apply_out();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{:?}: apply failed:\n{}\n{}",
            self.engine,
            text(&out.stdout),
            text(&out.stderr)
        );
    }

    fn cli(&self, args: &[&str]) -> Output {
        common::engine_command(self.engine, false)
            .args(args)
            .output()
            .unwrap()
    }

    fn ids(&self) -> Vec<String> {
        let out = self.cli(&[
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            &format!("label=ateam.dev/team={}", self.team),
            "--format",
            "{{.ID}}",
        ]);
        text(&out.stdout).lines().map(str::to_string).collect()
    }

    fn transcript(&self) -> String {
        std::fs::read_to_string(self.root().join("sessions/members/worker/transcript.log"))
            .unwrap_or_default()
    }

    /// Until the demo agent has started and gone to sleep.
    fn wait_started(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let t = self.transcript();
            if t.contains("agent: started as") && t.ends_with("sleeping\n") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{:?}: worker never started:\n{t}",
                self.engine
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A shell command inside the member, as the member (`ateam exec`).
    fn inside(&self, script: &str) -> Output {
        self.ateam(&[
            "exec", "worker", "--team", &self.team, "--", "sh", "-c", script,
        ])
    }
}

/// A write grant the member's uid could use, for `engine`.
fn writable_repo(engine: Engine) -> Option<(u32, u32)> {
    Some(World::member_user(engine))
}

// ------------------------------------------------------------------ 1. writable grants

/// A write grant owned by root, 0755: the member (nobody, or the rootless user) could not
/// write it. apply refuses before any change, naming the folder, owner, mode, uid and fix.
fn a_write_grant_the_member_cannot_write_is_refused(engine: Engine) {
    let w = World::new(engine, "unwritable", "", None);
    std::fs::set_permissions(
        w.root().join("repo"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = w.apply_out();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{engine:?}: {err}");
    let (uid, _) = World::member_user(engine);
    let repo = w.root().join("repo");
    for want in [
        repo.display().to_string(),
        "owned by 0:0".to_string(),
        "mode 0755".to_string(),
        format!("uid {uid}"),
        "chown".to_string(),
    ] {
        assert!(err.contains(&want), "{engine:?}: no `{want}` in:\n{err}");
    }
    assert!(w.ids().is_empty(), "{engine:?}: a container was made");
}

/// A grant made unwritable after apply (chmod by the person): status never shows it as
/// writable (`rw!:repo (not writable by uid N)`, and `notWritable` in its data).
fn status_never_shows_an_unwritable_grant_as_writable(engine: Engine) {
    let w = World::new(engine, "rwbang", "", writable_repo(engine));
    w.apply();
    w.wait_started();
    let table = text(&w.ateam(&["status", &w.team]).stdout);
    assert!(table.contains("rw:repo"), "{engine:?}: {table}");
    std::fs::set_permissions(
        w.root().join("repo"),
        std::os::unix::fs::PermissionsExt::from_mode(0o555),
    )
    .unwrap();
    let (uid, _) = World::member_user(engine);
    let table = text(&w.ateam(&["status", &w.team]).stdout);
    assert!(
        table.contains(&format!("rw!:repo (not writable by uid {uid})")),
        "{engine:?}: {table}"
    );
    assert!(!table.contains("rw:repo"), "{engine:?}: {table}");
    let json: serde_json::Value =
        serde_json::from_slice(&w.ateam(&["status", &w.team, "-o", "json"]).stdout).unwrap();
    let row = json["teams"][0]["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "worker")
        .unwrap()
        .clone();
    assert_eq!(
        row["grants"]["notWritable"][0],
        w.root().join("repo").display().to_string(),
        "{engine:?}: {row}"
    );
    // And the member indeed cannot write it.
    let write = w.inside(&format!("touch {}/x", w.root().join("repo").display()));
    assert_ne!(write.status.code(), Some(0), "{engine:?}");
}

// ------------------------------------------------------------------------ 2. HOME

/// An image that has the HOME folder (`/home/agent`, root's, 0755): the tmpfs over it is
/// the member's own, and `touch $HOME/x` works as the member.
fn home_is_the_members_own(engine: Engine) {
    let tag = format!(
        "localhost/ateam-home-{}:t22",
        &format!("{engine:?}").to_lowercase()
    );
    let maker = format!("ateam-home-maker-{}", std::process::id());
    // Rootless Podman 4.3's service cannot commit ("runroot must be set"): its user's own
    // podman can, into the same storage.
    let engine_cli = || match engine {
        Engine::Rootless => {
            let (name, uid, _) = rootless_user();
            let mut c = Command::new("runuser");
            c.args(["-u", &name, "--", "env"])
                .arg(format!("XDG_RUNTIME_DIR=/run/ateam-ci/user-{uid}"))
                .arg(format!("HOME=/home/{name}"))
                .arg("podman")
                .current_dir("/");
            c
        }
        Engine::Docker | Engine::Podman => common::engine_command(engine, false),
    };
    let cli = |args: &[&str]| {
        let out = engine_cli().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{engine:?}: {args:?}: {}",
            text(&out.stderr)
        );
    };
    let _ = engine_cli().args(["rm", "-f", &maker]).output();
    cli(&[
        "run",
        "--name",
        &maker,
        "--user",
        "0:0",
        "--entrypoint",
        "mkdir",
        "ateam-demo:latest",
        "-p",
        "/home/agent",
    ]);
    cli(&["commit", &maker, &tag]);
    cli(&["rm", "-f", &maker]);
    let extra = format!(", image: \"{tag}\", imagePullPolicy: Never, command: [/bin/agent.sh]");
    let w = World::new(engine, "home", &extra, writable_repo(engine));
    w.apply();
    w.wait_started();
    let out = w.inside("touch \"$HOME/x\" && echo home-ok; stat -c '%u:%g %a' \"$HOME\"");
    let said = text(&out.stdout);
    let (uid, gid) = World::member_user(engine);
    assert!(
        said.contains("home-ok"),
        "{engine:?}: cannot write HOME: {said}{}",
        text(&out.stderr)
    );
    // Its owner is the member; the mode is 0700 where the engine takes it (Podman), the
    // image folder's (0755) on Docker, which keeps that over the option.
    assert!(
        said.contains(&format!("{uid}:{gid} ")),
        "{engine:?}: {said}"
    );
    drop(w);
    let _ = engine_cli().args(["rmi", "-f", &tag]).output();
}

// ------------------------------------------------------------------ 3. preflight

/// `env -u X nosuchprog` (and `sh -c 'exec nosuchprog'`): the program that would really run
/// is missing, so apply refuses before any change (exit 4), naming it.
fn preflight_checks_the_program_that_really_runs(engine: Engine) {
    for command in [
        "[env, -u, FOO, nosuchprog-t22]",
        "[sh, -c, \"A=1 exec nosuchprog-t22 --flag\"]",
    ] {
        let extra = format!(", command: {command}");
        let w = World::new(engine, "preflight", &extra, writable_repo(engine));
        let out = w.apply_out();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{engine:?}: {command}: {err}");
        assert!(
            err.contains("`nosuchprog-t22`") && err.contains("is not an executable file"),
            "{engine:?}: {err}"
        );
        assert!(
            w.ids().is_empty(),
            "{engine:?}: {command}: a container was made"
        );
    }
}

// ------------------------------------------------------------------------ 4. exec

/// `ateam exec` (and `exec -i`, through the engine's CLI) has the member's secretEnv, as
/// the member's own command does.
fn exec_gets_the_members_secrets(engine: Engine) {
    let w = World::new(engine, "execenv", "", writable_repo(engine));
    w.apply();
    w.wait_started();
    let out = w.inside("echo \"secret=$T22_SECRET home=$HOME\"");
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!("secret={SECRET} home=/home/agent")),
        "{engine:?}: {said}{}",
        text(&out.stderr)
    );
    let out = w.ateam(&[
        "exec",
        "-i",
        "worker",
        "--team",
        &w.team,
        "--",
        "sh",
        "-c",
        "echo \"secret=$T22_SECRET\"",
    ]);
    assert!(
        text(&out.stdout).contains(&format!("secret={SECRET}")),
        "{engine:?}: -i: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Host pids of processes whose command line is exactly `words`.
fn pids_of(words: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = words
        .iter()
        .flat_map(|w| [w.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// Whether `sleep SECS` runs in the World's member, as its own `ps` shows it (the engine's
/// exec, which no gate or client lease ends).
fn sleeping_inside(w: &World, secs: &str) -> bool {
    std::thread::sleep(Duration::from_millis(400));
    let name = format!("ateam_{}_worker", w.team);
    let out = w
        .engine_cli()
        .args(["exec", &name, "ps", "-o", "args"])
        .output()
        .unwrap();
    text(&out.stdout)
        .lines()
        .any(|l| l.trim() == format!("sleep {secs}"))
}

/// Host pids of the ateam client whose command line holds `marker`.
fn clients_with(marker: &str) -> Vec<u32> {
    let bin = common::ateam_bin();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c).into_owned();
                c.starts_with(&format!("{bin}\0")) && c.contains(marker)
            })
        })
        .collect()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("gave up waiting for {what}");
    false
}

/// `c` as one `sh` line (its environment, program and arguments, single-quoted), for
/// `script`, which runs it at a terminal of its own.
fn shell_line(c: &Command) -> String {
    let q = |s: &std::ffi::OsStr| format!("'{}'", s.to_string_lossy().replace('\'', "'\\''"));
    let mut line = String::from("exec env");
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            line.push(' ');
            let mut kv = k.to_os_string();
            kv.push("=");
            kv.push(v);
            line.push_str(&q(&kv));
        }
    }
    line.push(' ');
    line.push_str(&q(c.get_program()));
    for a in c.get_args() {
        line.push(' ');
        line.push_str(&q(a));
    }
    line
}

/// The `ateam exec` client is killed (SIGKILL: it can clean nothing up): its command must
/// not go on running in the member. Every way: the API exec, `-i` and `-it` at a terminal
/// (`script`), the last two through the engine's CLI.
fn exec_ends_its_process_when_the_client_goes(engine: Engine) {
    let w = World::new(engine, "execkill", "", writable_repo(engine));
    w.apply();
    w.wait_started();
    for (n, how) in [(0, ""), (1, "-i"), (2, "-it")] {
        // Its own number per case: the engines' cases run at once in this one process, and
        // each kills the clients whose command line holds its number.
        let case = match engine {
            Engine::Docker => 0,
            Engine::Podman => 1,
            Engine::Rootless => 2,
        } + if common::gvisor() { 3 } else { 0 };
        let secs = format!(
            "{}",
            770000 + (std::process::id() % 1000) * 100 + case * 10 + n
        );
        let script = format!("exec sleep {secs}");
        let mut args = vec!["exec"];
        if !how.is_empty() {
            args.push(how);
        }
        args.extend(["worker", "--team", &w.team, "--", "sh", "-c", &script]);
        let mut command = w.command(&args);
        if how == "-it" && common::gvisor() && engine != Engine::Docker {
            // Podman 4 cannot give an exec a terminal under gVisor: refused, and said so.
            let out = command.output().unwrap();
            assert!(
                out.status.code() != Some(0)
                    && text(&out.stderr).contains("cannot give an exec a terminal"),
                "{engine:?}: {}",
                text(&out.stderr)
            );
            continue;
        }
        if how == "-it" {
            let line = shell_line(&command);
            command = Command::new("script");
            command
                .args(["-qec", &line, "/dev/null"])
                .current_dir(w.root())
                .stdin(Stdio::piped());
        }
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Under gVisor the member's processes are its sandbox's: looked for inside.
        let running = || {
            if common::gvisor() {
                sleeping_inside(&w, &secs)
            } else {
                !pids_of(&["sleep", &secs]).is_empty()
            }
        };
        // (A look inside is one engine exec: polled less often than the host's /proc.)
        assert!(
            wait_for("the exec's sleep", Duration::from_secs(30), running),
            "{engine:?}: exec {how}: the exec never ran"
        );
        let clients = clients_with(&script);
        assert!(
            !clients.is_empty(),
            "{engine:?}: exec {how}: no ateam client found"
        );
        for pid in clients {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = child.wait();
        let gone = wait_for("the exec's end", Duration::from_secs(20), || !running());
        // Whatever the outcome, leave nothing behind.
        for pid in pids_of(&["sleep", &secs]) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            gone,
            "{engine:?}: exec {how}: the exec's process outlived its client"
        );
    }
}

/// A member that is not running: `exec` says so (exit 2, its state), not the engine's error.
fn exec_into_a_stopped_member_says_it_is_not_running(engine: Engine) {
    let w = World::new(
        engine,
        "execstopped",
        ", command: [sh, -c, \"exit 0\"], restart: Never",
        writable_repo(engine),
    );
    let _ = w.apply_out();
    let exited = wait_for("the member's exit", Duration::from_secs(30), || {
        let out = w.ateam(&["status", &w.team]);
        text(&out.stdout).contains("exited 0")
    });
    assert!(
        exited,
        "{engine:?}: {}",
        text(&w.ateam(&["status", &w.team]).stdout)
    );
    let out = w.ateam(&["exec", "worker", "--team", &w.team, "--", "true"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{engine:?}: {err}");
    assert!(
        err.contains("is not running (exited 0)"),
        "{engine:?}: {err}"
    );
}

macro_rules! cases {
    ($($engine:ident),*) => {
        $(
            on_every_engine!($engine:
                a_write_grant_the_member_cannot_write_is_refused,
                status_never_shows_an_unwritable_grant_as_writable,
                home_is_the_members_own,
                preflight_checks_the_program_that_really_runs,
                exec_gets_the_members_secrets,
                exec_ends_its_process_when_the_client_goes,
                exec_into_a_stopped_member_says_it_is_not_running,
            );
        )*
    };
}

cases!(docker, podman, rootless_podman);
// The same attacks on members under gVisor (docs/gvisor.md).
cases!(docker_gvisor, podman_gvisor, rootless_podman_gvisor);
