//! One verdict, honest exit codes, documents for machines: the real `ateam` binary, judged
//! by its exit code (docs/exit-codes.md), by the engine's CLI and by an independent reader of
//! its output (Python's json and PyYAML, checked against manifests/*.schema.json with the
//! `jsonschema` package). The cases without an engine run in a plain `cargo test`; the
//! others are ignored there and run by scripts/test.sh on Docker and rootful Podman.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Engine, text};

fn both(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    )
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The binary with a state folder of its own and no engine in reach.
fn offline(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ateam"))
        .args(args)
        .current_dir(repo())
        .env("ATEAM_STATE_DIR", state)
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .env("CONTAINER_HOST", "unix:///nonexistent/podman.sock")
        .env("XDG_RUNTIME_DIR", "/nonexistent")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

// ------------------------------------------------------------ without an engine

#[test]
fn an_unknown_team_is_a_usage_error_2() {
    let state = tempfile::tempdir().unwrap();
    let out = offline(state.path(), &["status", "nosuch"]);
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert!(
        text(&out.stderr).contains("team `nosuch` has not been applied"),
        "{}",
        both(&out)
    );
    // Named beside manifests that do not hold it: the same.
    let out = offline(
        state.path(),
        &["status", "nosuch", "-f", "examples/demo-team/team.yaml"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert!(
        text(&out.stderr).contains("team `nosuch` is not in these manifests"),
        "{}",
        both(&out)
    );
    for args in [
        &["delete"][..],
        &["logs", "nobody"],
        &["status", "--no-such-flag"],
    ] {
        let out = offline(state.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", both(&out));
    }
}

#[test]
fn invalid_manifests_are_3_for_every_command_that_reads_them() {
    let state = tempfile::tempdir().unwrap();
    let broken = "tests/broken/16-parent-missing.yaml";
    for args in [
        &["validate", "-f", broken][..],
        &["apply", "-f", broken],
        &["apply", "--dry-run", "-f", broken],
        &["diff", "-f", broken],
        &["status", "-f", broken],
        &["status", "--exit-code", "-f", broken],
        &["controller", "--once", "-f", broken],
    ] {
        let out = offline(state.path(), args);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {}", both(&out));
        assert!(
            text(&out.stderr).contains("spec.parent: parent `leed`"),
            "{args:?}: {}",
            both(&out)
        );
    }
}

#[test]
fn an_unreadable_state_folder_is_6() {
    let state = tempfile::tempdir().unwrap();
    let team = state.path().join("teams/demo");
    std::fs::create_dir_all(&team).unwrap();
    std::fs::write(team.join("applied.json"), "not json").unwrap();
    for args in [
        &["status"][..],
        &["status", "--exit-code", "-o", "json"],
        &["validate", "-f", "examples/demo-team/team.yaml"],
        &["diff", "-f", "examples/demo-team/team.yaml"],
    ] {
        let out = offline(state.path(), args);
        assert_eq!(out.status.code(), Some(6), "{args:?}: {}", both(&out));
        assert!(
            text(&out.stderr).contains("applied.json: not a model ateam wrote"),
            "{args:?}: {}",
            both(&out)
        );
    }
    // Written by a newer ateam: refused, not misread.
    std::fs::write(team.join("applied.json"), r#"{"version": 99}"#).unwrap();
    let out = offline(state.path(), &["status"]);
    assert_eq!(out.status.code(), Some(6), "{}", both(&out));
    assert!(text(&out.stderr).contains("written by a newer ateam"));
    // Held by another command, with --no-wait.
    let state = tempfile::tempdir().unwrap();
    let me = ateam::files::Owner {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
    };
    let store = ateam::store::Store::new(state.path().to_path_buf(), me);
    let _held = store.lock(true, |_| {}).unwrap();
    let out = offline(
        state.path(),
        &["apply", "--no-wait", "-f", "examples/demo-team/team.yaml"],
    );
    assert_eq!(out.status.code(), Some(6), "{}", both(&out));
}

#[test]
fn an_engine_out_of_reach_is_5() {
    let state = tempfile::tempdir().unwrap();
    for args in [
        &[
            "--backend",
            "docker",
            "diff",
            "-f",
            "examples/demo-team/team.yaml",
        ][..],
        &[
            "--backend",
            "docker",
            "apply",
            "--dry-run",
            "-f",
            "examples/demo-team/team.yaml",
        ],
        &[
            "--backend",
            "podman",
            "status",
            "-f",
            "examples/demo-team/team.yaml",
        ],
        &["diff", "-f", "examples/demo-team/team.yaml"],
    ] {
        let out = offline(state.path(), args);
        assert_eq!(out.status.code(), Some(5), "{args:?}: {}", both(&out));
    }
    // The engine a team was applied on is gone.
    let team = state.path().join("teams/demo");
    std::fs::create_dir_all(&team).unwrap();
    let applied = repo().join("tests/fixtures/store-v0.1.0/teams/demo/applied.json");
    std::fs::copy(applied, team.join("applied.json")).unwrap();
    std::fs::write(
        team.join("engine.json"),
        r#"{"version":1,"engine":"docker","uri":"unix:///nonexistent/docker.sock"}"#,
    )
    .unwrap();
    let out = offline(state.path(), &["status", "--exit-code"]);
    assert_eq!(out.status.code(), Some(5), "{}", both(&out));
    assert!(
        text(&out.stderr).contains("team `demo` was applied on docker"),
        "{}",
        both(&out)
    );
}

// ------------------------------------------------------------ on an engine

const TEAM: &str = r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: TEAM}
spec: {image: ateam-demo:latest, sessionDir: ./sessions}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: lead}
spec: {command: [sleep, "100000"], cwd: ./repo}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: rw}
spec: {read: [./docs], write: [./repo], network: {allow: [example.com]}}
"#;

/// A member of the World's team: they share the one folder `rw` writes (one writer per
/// folder is not what these cases are about), and say so.
fn member(name: &str, extra: &str) -> String {
    format!(
        "---\napiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {{name: {name}}}\nspec: {{parent: lead, access: rw, resources: {{memory: 64Mi, pids: 64}}, shareWrites: true{extra}}}\n"
    )
}

/// A team of its own in a folder of its own, on one engine: the common world
/// (`common::World`: engine, folder, team, `ateam`, teardown with `--purge`) and this crate's
/// manifests and looks.
struct World(common::World);

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.0
    }
}

impl World {
    fn new(engine: Engine, tag: &str) -> World {
        let w = World(common::World::new(engine, "verdict", tag));
        w.dirs(&["repo", "docs", "sessions"]);
        // Members run as nobody (ateam runs as root here): their write grant is theirs.
        std::os::unix::fs::chown(w.path("repo"), Some(65534), Some(65534)).unwrap();
        w
    }

    /// Writes the manifest: the team and these members.
    fn members(&self, members: &[String]) {
        let yaml = TEAM.replace("TEAM", &self.team) + &members.concat();
        std::fs::write(self.manifest(), yaml).unwrap();
    }

    fn manifest(&self) -> PathBuf {
        self.path("team.yaml")
    }

    /// ateam with `TEST_TOKEN` set (the secret a member may be handed).
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.command_env(&[("TEST_TOKEN", "secret-value")]);
        c.args(args).env_remove("RUST_LOG").stdin(Stdio::null());
        c
    }

    fn ateam(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn code(&self, args: &[&str]) -> Option<i32> {
        self.ateam(args).status.code()
    }

    fn apply(&self, extra: &[&str]) -> Output {
        let mut args = vec!["apply", "-f", "team.yaml"];
        args.extend(extra);
        self.ateam(&args)
    }

    /// The three verdicts on these manifests: status --exit-code, diff, apply --dry-run.
    fn verdicts(&self) -> [Option<i32>; 3] {
        [
            self.code(&["status", "--exit-code", "-f", "team.yaml"]),
            self.code(&["diff", "-f", "team.yaml"]),
            self.code(&["apply", "--dry-run", "-f", "team.yaml"]),
        ]
    }

    fn cli(&self, args: &[&str]) -> Output {
        self.engine_cli().args(args).output().unwrap()
    }

    /// Names of the containers with this team's label.
    fn containers(&self) -> Vec<String> {
        let out = self.cli(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=ateam.dev/team={}", self.team),
            "--format",
            "{{.Names}}",
        ]);
        text(&out.stdout).lines().map(str::to_string).collect()
    }

    /// Probe containers of this world's store left behind (there must be none).
    fn probes(&self) -> Vec<String> {
        let store = ateam::core::layout::store_id(&self.state());
        let out = self.cli(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=ateam.dev/probe={store}"),
            "--format",
            "{{.Names}}",
        ]);
        text(&out.stdout).lines().map(str::to_string).collect()
    }

    fn status(&self) -> serde_json::Value {
        let out = self.ateam(&["status", &self.team, "-o", "json"]);
        assert_eq!(out.status.code(), Some(0), "{}", both(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn row(&self, name: &str) -> serde_json::Value {
        self.status()["teams"][0]["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .cloned()
            .unwrap_or_default()
    }

    fn until(&self, what: &str, ok: impl Fn() -> bool) {
        let start = Instant::now();
        while !ok() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{:?}: never {what}",
                self.engine
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// status --exit-code, diff and apply --dry-run agree, case by case: in sync, a member held
/// at its gate, an orphan kept without --prune, a stranger; and apply says the same.
fn one_verdict_for_status_diff_and_dry_run(engine: Engine) {
    let w = World::new(engine, "verdict");
    w.members(&[member("a", ""), member("b", "")]);
    let out = w.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert_eq!(w.verdicts(), [Some(0); 3], "{engine:?}: in sync");
    assert!(text(&w.ateam(&["diff", "-f", "team.yaml"]).stdout).contains("no changes"));

    // Restarted behind ateam's back: held at its gate until apply checks it.
    let b = ateam::core::container::container_name(&w.team, "b");
    assert!(w.cli(&["restart", "-t", "1", &b]).status.success());
    assert_eq!(w.verdicts(), [Some(1); 3], "{engine:?}: held at the gate");
    assert_eq!(w.apply(&[]).status.code(), Some(0));
    assert_eq!(w.verdicts(), [Some(0); 3], "{engine:?}: released");

    // b leaves the manifests: an orphan, kept without --prune, drift all the same.
    w.members(&[member("a", "")]);
    assert_eq!(w.verdicts(), [Some(1); 3], "{engine:?}: an orphan");
    let diff = w.ateam(&["diff", "-f", "team.yaml"]);
    assert!(
        text(&diff.stdout).contains("? orphan b")
            && text(&diff.stdout).contains("the machine differs from the manifests"),
        "{}",
        both(&diff)
    );
    let out = w.apply(&[]);
    assert_eq!(out.status.code(), Some(1), "{engine:?}: {}", both(&out));
    assert!(text(&out.stderr).contains("? orphan b"), "{}", both(&out));
    assert_eq!(
        w.code(&["status", "--exit-code"]),
        Some(1),
        "{engine:?}: the applied state sees the orphan too"
    );
    let out = w.apply(&["--prune"]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert_eq!(w.verdicts(), [Some(0); 3], "{engine:?}: pruned");

    // A stranger: ateam's labels on a container ateam did not make.
    let store = ateam::core::layout::store_id(&w.root().join("state"));
    let run = w.cli(&[
        "run",
        "-d",
        "--name",
        &format!("ghost-{}", w.team),
        "--network",
        "none",
        "--label",
        "ateam.dev/managed-by=ateam",
        "--label",
        &format!("ateam.dev/store={store}"),
        "--label",
        &format!("ateam.dev/team={}", w.team),
        "--label",
        "ateam.dev/member=ghost",
        "ateam-demo:latest",
        "sleep",
        "1000",
    ]);
    assert!(run.status.success(), "{}", both(&run));
    assert_eq!(w.verdicts(), [Some(1); 3], "{engine:?}: a stranger");
    assert_eq!(w.code(&["status", "--exit-code"]), Some(1));
    assert_eq!(w.apply(&["--prune"]).status.code(), Some(0));
    assert_eq!(
        w.verdicts(),
        [Some(0); 3],
        "{engine:?}: the stranger is gone"
    );
}

/// A missing secret, a missing image, a missing command: apply refuses before its first
/// change (exit 4), names the member and what is missing, and the engine holds nothing of
/// the team afterwards (not even the probe that looked into the image).
fn apply_refuses_before_its_first_change(engine: Engine) {
    let w = World::new(engine, "refuse");
    let ok = member("ok", "");
    let cases: [(String, &[&str]); 6] = [
        (
            member("needy", ", secretEnv: [NO_SUCH_SECRET_VAR, TEST_TOKEN]"),
            &[
                "member `needy`",
                "secretEnv `NO_SUCH_SECRET_VAR` is not set",
            ],
        ),
        (
            member(
                "imageless",
                ", image: \"ateam-no-such-image:1\", imagePullPolicy: Never",
            ),
            &[
                "member `imageless`",
                "image `ateam-no-such-image:1` is not on",
            ],
        ),
        (
            member("imageless", ", image: \"ateam-no-such-image:1\""),
            &[
                "member `imageless`",
                "image `ateam-no-such-image:1`: ",
                "could not pull it",
            ],
        ),
        (
            member("absolute", ", command: [/usr/bin/no-such-agent]"),
            &[
                "member `absolute`",
                "its command `/usr/bin/no-such-agent` is not an executable file in image `ateam-demo:latest`",
            ],
        ),
        (
            member("bare", ", command: [no-such-agent, --flag]"),
            &[
                "member `bare`",
                "its command `no-such-agent` is not an executable file",
                "looked for /bin/no-such-agent",
            ],
        ),
        (
            // A file of the image, but not one it can run.
            member("plain", ", command: [/etc/passwd]"),
            &["member `plain`", "its command `/etc/passwd`"],
        ),
    ];
    for (bad, words) in cases {
        w.members(&[ok.clone(), bad]);
        let out = w.apply(&[]);
        assert_eq!(out.status.code(), Some(4), "{engine:?}: {}", both(&out));
        for word in words {
            assert!(
                text(&out.stderr).contains(word),
                "{engine:?}: no {word:?}: {}",
                both(&out)
            );
        }
        assert!(
            text(&out.stderr).contains("1 member(s) refused; nothing was changed"),
            "{}",
            both(&out)
        );
        assert!(
            w.containers().is_empty(),
            "{engine:?}: {:?}",
            w.containers()
        );
        assert!(w.probes().is_empty(), "{engine:?}: {:?}", w.probes());
        assert!(
            !w.root().join("state/teams").join(&w.team).exists(),
            "{engine:?}: the refused team was recorded"
        );
    }
    // The same members, fixed: symlinks in the image are followed (/bin/sh), a set secret
    // passes, and a command in a mounted folder is looked for on the host, not in the image.
    let script = w.root().join("repo/run.sh");
    std::fs::write(&script, "#!/bin/sh\nexec sleep 100000\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    w.members(&[
        ok,
        member("needy", ", secretEnv: [TEST_TOKEN]"),
        member("shell", ", command: [sh, -c, \"exec sleep 100000\"]"),
        member("mounted", &format!(", command: [{}]", script.display())),
    ]);
    let out = w.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{engine:?}: {}", both(&out));
    assert_eq!(w.containers().len(), 4, "{engine:?}: {:?}", w.containers());
    assert!(w.probes().is_empty(), "{engine:?}: {:?}", w.probes());
}

/// Every refusal of every member in one run (secrets, command, a folder below a write grant),
/// each with its fix; the fix the refusal names (`chown -R`) is the one that works.
fn apply_says_every_refusal_at_once(engine: Engine) {
    let w = World::new(engine, "every");
    // `chown` of the grant alone, as a person does: a folder below it stays root's.
    std::fs::create_dir_all(w.root().join("repo/src/deep")).unwrap();
    w.members(&[
        member(
            "needy",
            ", secretEnv: [NO_SUCH_SECRET_VAR, ALSO_NOT_SET_VAR]",
        ),
        member(
            "bare",
            ", secretEnv: [THIRD_UNSET_VAR], command: [no-such-agent]",
        ),
    ]);
    // diff and doctor -f say it all before an apply, as apply will.
    let diff = w.ateam(&["diff", "-f", "team.yaml"]);
    let doctor = w.ateam(&["doctor", "-f", "team.yaml"]);
    assert_eq!(
        doctor.status.code(),
        Some(1),
        "{engine:?}: {}",
        both(&doctor)
    );
    for says in [
        "member `needy`: secretEnv `NO_SUCH_SECRET_VAR` is not set",
        "member `bare`: secretEnv `THIRD_UNSET_VAR` is not set",
        "(in the write grant",
    ] {
        assert!(
            text(&diff.stderr).contains(&format!("apply would refuse: {says}"))
                || text(&diff.stderr).contains(says),
            "{engine:?}: diff: {}",
            both(&diff)
        );
        assert!(
            text(&doctor.stdout)
                .lines()
                .any(|l| l.starts_with("FAIL  apply") && l.contains(says)),
            "{engine:?}: doctor: {}",
            both(&doctor)
        );
    }
    let out = w.apply(&[]);
    assert_eq!(out.status.code(), Some(4), "{engine:?}: {}", both(&out));
    let err = text(&out.stderr);
    for word in [
        "member `needy`: secretEnv `NO_SUCH_SECRET_VAR` is not set",
        "member `needy`: secretEnv `ALSO_NOT_SET_VAR` is not set",
        "member `bare`: secretEnv `THIRD_UNSET_VAR` is not set",
        "member `bare`: its command `no-such-agent` is not an executable file",
        &format!(
            "{}/repo/src (in the write grant {}/repo)",
            w.root().display(),
            w.root().display()
        ),
        "nor 1 more folder(s) of the grant",
        &format!("`chown -R 65534:65534 {}/repo`", w.root().display()),
        "2 member(s) refused; nothing was changed",
    ] {
        assert!(
            err.contains(word),
            "{engine:?}: no {word:?}: {}",
            both(&out)
        );
    }
    assert!(
        w.containers().is_empty(),
        "{engine:?}: {:?}",
        w.containers()
    );
    // The fix as named: then only the secrets and the command are left to say.
    let chown = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(w.root().join("repo"))
        .status()
        .unwrap();
    assert!(chown.success());
    let out = w.apply(&[]);
    assert_eq!(out.status.code(), Some(4), "{engine:?}: {}", both(&out));
    assert!(
        !text(&out.stderr).contains("write grant"),
        "{engine:?}: {}",
        both(&out)
    );
    // A one-shot member done by the next apply is counted as finished, not as running.
    let once = member("once", ", restart: Never, command: [\"true\"]");
    w.members(&[member("needy", ""), once.clone()]);
    let out = w.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{engine:?}: {}", both(&out));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !text(&w.ateam(&["status", &w.team]).stdout).contains("exited 0") {
        assert!(Instant::now() < deadline, "{engine:?}: once never ended");
        std::thread::sleep(Duration::from_millis(200));
    }
    w.members(&[member("needy", "").replace("64Mi", "80Mi"), once]);
    let out = w.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{engine:?}: {}", both(&out));
    assert!(
        text(&out.stdout).contains("applied: 1 member(s) running, 1 finished"),
        "{engine:?}: {}",
        both(&out)
    );
}

/// How a member ended stays in status: from the engine while it is exited, and from the
/// store once apply has restarted it (the engine forgets it then).
fn status_keeps_the_last_exit_across_a_restart(engine: Engine) {
    let w = World::new(engine, "exit");
    w.members(&[member(
        "flaky",
        ", restart: OnFailure, command: [sh, -c, \"sleep 5; exit 7\"]",
    )]);
    let out = w.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert!(w.row("flaky")["lastExit"].is_null(), "{}", w.row("flaky"));
    w.until("saw it exit", || w.row("flaky")["state"] == "exited 7");
    let exited = w.row("flaky");
    assert_eq!(exited["lastExit"]["exitCode"], 7, "{exited}");
    assert_eq!(exited["lastExit"]["reason"], "error", "{exited}");
    let at = exited["lastExit"]["at"].as_str().unwrap().to_string();
    assert!(
        humantime::parse_rfc3339(&at).is_ok(),
        "{engine:?}: not RFC 3339: {at}"
    );
    let table = text(&w.ateam(&["status"]).stdout);
    assert!(
        table.contains("LAST EXIT") && table.contains("7 ("),
        "{table}"
    );
    // apply restarts it; while it runs again, status still says how it last ended.
    let out = w.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let running = w.row("flaky");
    assert_eq!(running["state"], "running", "{running}");
    assert_eq!(running["restarts"], 1, "{running}");
    assert_eq!(running["lastExit"]["exitCode"], 7, "{running}");
    assert_eq!(running["lastExit"]["at"], at.as_str(), "{running}");
}

/// Every document ateam prints for machines, read by another program: Python's json and
/// PyYAML (which refuses YAML tags it does not know), each validated against its schema in
/// manifests/ with the jsonschema package, every time parsed as RFC 3339.
fn documents_validate_against_their_schemas(engine: Engine) {
    let w = World::new(engine, "docs");
    // Nothing applied yet: still documents.
    let mut docs = vec![("status", "json", w.ateam(&["status", "-o", "json"]))];
    w.members(&[
        member("a", ""),
        member("b", ", restart: Never, command: [sh, -c, \"exit 3\"]"),
    ]);
    docs.push((
        "diff",
        "yaml",
        w.ateam(&["diff", "-f", "team.yaml", "-o", "yaml"]),
    ));
    w.apply(&[]);
    w.until("saw b exit", || w.row("b")["state"] == "exited 3");
    // An orphan and a change: a diff with changes and findings.
    w.members(&[member("a", ", env: {MODE: fast}")]);
    for fmt in ["json", "yaml"] {
        docs.push(("status", fmt, w.ateam(&["status", "-o", fmt])));
        docs.push((
            "status",
            fmt,
            w.ateam(&["status", "-f", "team.yaml", "-o", fmt]),
        ));
        docs.push((
            "diff",
            fmt,
            w.ateam(&["diff", "-f", "team.yaml", "-o", fmt]),
        ));
    }
    let dir = w.root().join("docs-out");
    std::fs::create_dir(&dir).unwrap();
    let mut args: Vec<String> = vec![];
    for (i, (kind, fmt, out)) in docs.iter().enumerate() {
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{kind} -o {fmt}: {}",
            both(out)
        );
        let path = dir.join(format!("{i}-{kind}.{fmt}"));
        std::fs::write(&path, &out.stdout).unwrap();
        args.push(kind.to_string());
        args.push(path.display().to_string());
    }
    let python = std::env::var("ATEAM_TEST_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into());
    let out = Command::new(python)
        .arg("-c")
        .arg(CHECK_DOCUMENTS)
        .arg(repo().join("manifests"))
        .args(&args)
        .output()
        .expect("python3 runs (apt-get install python3-yaml python3-jsonschema)");
    assert!(out.status.success(), "{engine:?}: {}", both(&out));
    let seen = text(&out.stdout);
    assert!(seen.contains("checked 8 documents"), "{seen}");
}

/// Reads each document with json or PyYAML (safe_load: a YAML tag fails), validates it
/// with jsonschema, and parses every `...At`, `at` and `since` as RFC 3339.
const CHECK_DOCUMENTS: &str = r#"
import datetime, json, sys
import jsonschema, yaml

schemas = sys.argv[1]
pairs = sys.argv[2:]
def times(v, key=""):
    if isinstance(v, dict):
        for k, x in v.items():
            times(x, k)
    elif isinstance(v, list):
        for x in v:
            times(x, key)
    elif isinstance(v, str) and (key.endswith("At") or key in ("at", "since", "nextRestart")):
        datetime.datetime.fromisoformat(v.replace("Z", "+00:00"))
n = 0
for kind, path in zip(pairs[::2], pairs[1::2]):
    text = open(path).read()
    doc = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    schema = json.load(open(f"{schemas}/{kind}.schema.json"))
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["apiVersion"] == "ateam.dev/v1alpha1", path
    times(doc)
    if kind == "status":
        for t in doc["teams"]:
            for m in t["members"]:
                g = m["grants"]
                if m["kind"] == "Member" and m["parent"] is not None:
                    assert g["network"]["mode"] == "allow", m
                    assert g["network"]["allow"] == ["example.com"], m
                    assert all(p.startswith("/") for p in g["read"] + g["write"]), m
    n += 1
print(f"checked {n} documents")
"#;

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
    apply_says_every_refusal_at_once,
    one_verdict_for_status_diff_and_dry_run,
    apply_refuses_before_its_first_change,
    status_keeps_the_last_exit_across_a_restart,
    documents_validate_against_their_schemas,
);
