//! Attacks on invariant 9c, "nothing a member can write is read as the person's intent", and
//! on what `status` prints from what a member does, each driving the real `ateam` binary
//! (ATEAM_TEST_BIN, default this build's):
//!
//! - a write grant (or a team's transcripts folder, where each member owns its own) that is,
//!   holds or lies inside a `-f` path, also under another name (a bind mount): the member
//!   would write a MainSession, which runs on the host as the person;
//! - a symlink in a manifests folder (or named with -f) that leads out of it, to a file the
//!   author could not read (a pull request adding `x.yaml -> /etc/shadow`): no error may show
//!   a line of it;
//! - under a running controller: such a grant is refused before anything runs, and an edit
//!   adding one is refused while the member keeps running as it was, so what it tries to
//!   write into the manifests folder never runs;
//! - 30,000 refused destinations in a member's egress log, with the engine's API on loopback
//!   and the metadata service among them: `status` stays short and never offers those in the
//!   grant to paste without saying what they open.
//!
//! The validation cases need no engine and run in every test run; the others are ignored
//! engine tests, run on Docker, rootful Podman and rootless Podman by scripts/test.sh.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[macro_use]
mod common;
use common::{Engine, rootless_user, text};

fn both(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    )
}

/// A team whose member `m` writes `write` (YAML list items, relative to the manifest).
fn team_yaml(name: &str, session_dir: &str, write: &str) -> String {
    format!(
        "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {name}}}
spec: {{image: ateam-demo:latest, sessionDir: '{session_dir}', allowUnenforcedLimits: true}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, '100000'], cwd: ../repo}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: rw}}
spec: {{write: [{write}]}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: m}}
spec: {{parent: lead, access: rw, restart: Always, resources: {{memory: 64Mi, pids: 64}}}}
"
    )
}

/// A folder of its own, with `manifests/`, `repo/` and `sessions/` in it.
struct Lab {
    dir: tempfile::TempDir,
    /// Mounts made here, unmounted on drop.
    mounts: Vec<PathBuf>,
}

impl Lab {
    fn new() -> Lab {
        let dir = tempfile::Builder::new()
            .prefix("ateam-attack-")
            .tempdir()
            .unwrap();
        let lab = Lab {
            dir,
            mounts: vec![],
        };
        for d in ["manifests", "repo", "sessions"] {
            std::fs::create_dir(lab.root().join(d)).unwrap();
        }
        lab
    }

    fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.root().join(rel);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `ateam validate -f paths...` with no engine reachable: a refusal is validation's.
    fn validate(&self, paths: &[&Path]) -> Output {
        let mut c = Command::new(common::ateam_bin());
        c.env("ATEAM_STATE_DIR", self.root().join("state"))
            .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
            .env("CONTAINER_HOST", "unix:///nonexistent/podman.sock")
            .args(["--backend", "docker", "validate"]);
        for p in paths {
            c.arg("-f").arg(p);
        }
        c.current_dir(self.root()).output().unwrap()
    }

    fn bind(&mut self, from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        let out = Command::new("mount")
            .arg("--bind")
            .arg(from)
            .arg(to)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount (needs root): {}", both(&out));
        self.mounts.push(to.to_path_buf());
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for m in self.mounts.iter().rev() {
            let _ = Command::new("umount").arg(m).output();
        }
    }
}

/// Refused by validation (exit 3), at the field's line, saying every one of `words`, with
/// nothing stored.
fn assert_invalid(lab: &Lab, out: &Output, words: &[&str]) {
    assert_eq!(out.status.code(), Some(3), "not refused: {}", both(out));
    let err = text(&out.stderr);
    for w in words {
        assert!(err.contains(w), "the refusal does not say {w:?}:\n{err}");
    }
    assert!(!lab.root().join("state").exists(), "a refusal made a store");
}

// ------------------------------------------------------------------- no engine needed

/// A member that can write the manifests folder, the folder holding the manifest file, or a
/// folder inside the manifests folder (a new `*.yaml` there is read too), under its own name
/// or a bind mount's, writes the person's intent: refused at the grant's entry.
#[test]
fn a_write_grant_over_the_manifests_is_refused() {
    let mut lab = Lab::new();
    let root = lab.root();
    let manifests = root.join("manifests");
    std::fs::create_dir(manifests.join("work")).unwrap();
    let alias = root.join("alias");
    lab.bind(&manifests, &alias);
    let given = "a manifest path given with -f";
    let file = |write: &str| {
        lab.write(
            "manifests/team.yaml",
            &team_yaml("mf", "../sessions", write),
        )
    };
    // The folder given with -f, granted as it is.
    let f = file(".");
    let out = lab.validate(&[&manifests]);
    assert_invalid(
        &lab,
        &out,
        &[
            "team.yaml:14:16: AccessGrant/rw: spec.write[0]",
            &format!(
                "`{}` is {}, {given}",
                manifests.display(),
                manifests.display()
            ),
            "a MainSession it writes runs on the host",
        ],
    );
    // A folder inside it: the member creates `x.yaml` there, the walk reads it.
    file("./work");
    let out = lab.validate(&[&manifests]);
    assert_invalid(
        &lab,
        &out,
        &[&format!("is inside {}, {given}", manifests.display())],
    );
    // The file given with -f: its folder holds it (a member would rename over it).
    file(".");
    let out = lab.validate(&[&f]);
    assert_invalid(&lab, &out, &[&format!("contains {}, {given}", f.display())]);
    // The same folder under another name: a bind mount of the manifests folder.
    file("../alias");
    let out = lab.validate(&[&f]);
    assert_invalid(
        &lab,
        &out,
        &["spec.write[0]", &alias.display().to_string(), given],
    );
    // A second -f path is as much the person's: `-f manifests/team.yaml -f repo/`.
    file("../repo");
    let out = lab.validate(&[&f, &root.join("repo")]);
    assert_invalid(
        &lab,
        &out,
        &[&format!(
            "`{}` is {}, {given}",
            root.join("repo").display(),
            root.join("repo").display()
        )],
    );
    // A folder beside the manifests is fine.
    file("../repo");
    let out = lab.validate(&[&manifests]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
}

/// Each member owns its transcript folder (`<sessionDir>/members/<name>`): inside a folder
/// given with -f, a member writes a manifest there as through a write grant.
#[test]
fn a_transcripts_folder_inside_the_manifests_is_refused() {
    let lab = Lab::new();
    let manifests = lab.root().join("manifests");
    lab.write(
        "manifests/team.yaml",
        &team_yaml("mfs", "./sessions", "../repo"),
    );
    let out = lab.validate(&[&manifests]);
    assert_invalid(
        &lab,
        &out,
        &[
            "team.yaml:4:",
            "spec.sessionDir",
            &format!(
                "`{}/sessions/members` is inside {}, a manifest path given with -f",
                manifests.display(),
                manifests.display()
            ),
        ],
    );
    // The same file named with -f: its folder is not walked.
    let out = lab.validate(&[&manifests.join("team.yaml")]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
}

/// A pull request adds `x.yaml -> <a file only root reads>` to the manifests folder, and CI
/// runs `ateam validate -f manifests/` as root: the link is refused by name, and not one line
/// of its target appears, whether the target is a scalar, broken YAML or a manifest.
#[test]
fn a_symlink_out_of_the_manifests_folder_is_never_read() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let lab = Lab::new();
    let root = lab.root();
    let manifests = root.join("manifests");
    lab.write(
        "manifests/team.yaml",
        &team_yaml("mfl", "../sessions", "../repo"),
    );
    let secrets = [
        "root:$y$j9T$SECRETHASH0:19000:0:99999:7:::\n",
        "kind: [SECRETHASH1\n",
        "apiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {name: SECRETHASH2}\nspec: {parent: nosuch}\n",
    ];
    let link = manifests.join("x.yaml");
    for (i, secret) in secrets.iter().enumerate() {
        let target = lab.write(&format!("secret{i}"), secret);
        std::fs::set_permissions(&target, PermissionsExt::from_mode(0o600)).unwrap();
        let _ = std::fs::remove_file(&link);
        symlink(&target, &link).unwrap();
        let out = lab.validate(&[&manifests]);
        assert_invalid(
            &lab,
            &out,
            &[
                &format!("{}: a symlink to {:?}", link.display(), target),
                "outside the folder given with -f",
            ],
        );
        assert!(
            !both(&out).contains("SECRETHASH"),
            "a line of the target was shown: {}",
            both(&out)
        );
    }
    // The real /etc/shadow, where there is one: its first line never appears.
    if let Ok(shadow) = std::fs::read_to_string("/etc/shadow") {
        let _ = std::fs::remove_file(&link);
        symlink("/etc/shadow", &link).unwrap();
        let out = lab.validate(&[&manifests]);
        assert_eq!(out.status.code(), Some(3), "{}", both(&out));
        let first = shadow.lines().next().unwrap_or("root:");
        assert!(!both(&out).contains(first), "{}", both(&out));
    }
    // Named with -f, a link out of the folder holding it is refused the same way.
    let _ = std::fs::remove_file(&link);
    let named = root.join("repo/team.yaml");
    symlink(root.join("secret1"), &named).unwrap();
    let out = lab.validate(&[&named]);
    assert_invalid(
        &lab,
        &out,
        &["a symlink to", "outside the folder holding it"],
    );
    assert!(!both(&out).contains("SECRETHASH"), "{}", both(&out));
    // A link that stays inside its folder is read as before, in a walk or named.
    let inside = manifests.join("inside.yml");
    symlink(manifests.join("team.yaml"), &inside).unwrap();
    for given in [&manifests, &inside] {
        let out = lab.validate(&[given]);
        assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    }
}

// ------------------------------------------------------------------- engines needed

/// A lab for one engine: ateam as that engine's user, folders it owns. The common world
/// (`common::World`: engine, folder, team, `ateam`, teardown) and what is this crate's own:
/// the controller it runs.
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

impl World {
    fn new(engine: Engine, tag: &str) -> World {
        let w = World {
            w: common::World::new(engine, "attack", tag),
            controller: None,
        };
        w.dirs(&["manifests", "repo", "sessions"]);
        w.give(&["", "manifests", "repo", "sessions"]);
        let member_uid = w.rootless_person().map_or(65534, |(uid, _)| uid);
        // The member's write grant is its own; so is the manifests folder, as a folder a
        // person shares with an agent would be: only ateam's rules keep the member out.
        for d in ["repo", "manifests"] {
            std::os::unix::fs::chown(w.path(d), Some(member_uid), Some(member_uid)).unwrap();
        }
        w
    }

    fn write(&self, rel: &str, text: &str) {
        // As an editor saves: a temp file renamed over the old one.
        let path = self.path(rel);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        if let Some((uid, gid)) = self.rootless_person() {
            std::os::unix::fs::chown(&tmp, Some(uid), Some(gid)).unwrap();
        }
        std::fs::rename(&tmp, &path).unwrap();
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.command();
        c.args(args).stdin(Stdio::null());
        c
    }

    fn manifests(&self) -> String {
        self.path("manifests").display().to_string()
    }

    fn row(&self, member: &str) -> serde_json::Value {
        let out = self.ateam(&["status", &self.team, "-o", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["teams"][0]["members"]
            .as_array()
            .and_then(|a| a.iter().find(|r| r["name"] == member).cloned())
            .unwrap_or_default()
    }

    fn ids(&self) -> Vec<String> {
        let out = self
            .engine_cli()
            .args(["ps", "-aq", "--no-trunc", "--filter"])
            .arg(format!("label=ateam.dev/team={}", self.team))
            .output()
            .unwrap();
        text(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    fn until(&self, what: &str, secs: u64, ok: impl Fn() -> bool) {
        let start = Instant::now();
        while !ok() {
            assert!(
                start.elapsed() < Duration::from_secs(secs),
                "{:?}: never {what}; controller log:\n{}",
                self.engine,
                std::fs::read_to_string(self.path("controller.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for World {
    /// The controller, then the lead's terminal (before the common world removes the folder
    /// its socket is in, on rootless Podman), then the team (the common world).
    fn drop(&mut self) {
        // SIGTERM, which runuser passes on to a rootless controller (SIGKILL would orphan it).
        if let Some(mut c) = self.controller.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(ateam::core::layout::session_socket_path(
                &self.state(),
                &self.team,
                "lead",
            ))
            .arg("kill-server")
            .output();
    }
}

/// Under `ateam controller -f manifests/`: a grant over the manifests folder is refused before
/// anything runs; once the team runs, an edit that adds one is refused and the member keeps
/// its container, so the MainSession it tries to write there (which would run on the host as
/// the person) is never written, let alone run.
fn a_member_cannot_get_a_main_session_it_writes_run(engine: Engine) {
    let mut w = World::new(engine, "mfctl");
    let bad = team_yaml(&w.team, "../sessions", "../repo, .");
    w.write("manifests/team.yaml", &bad);
    let once = w.ateam(&["controller", "-f", &w.manifests(), "--once"]);
    // Refused: invalid manifests (docs/exit-codes.md), nothing changed.
    assert!(
        matches!(once.status.code(), Some(3)),
        "{engine:?}: {}",
        both(&once)
    );
    assert!(
        text(&once.stderr).contains("a manifest path given with -f"),
        "{engine:?}: {}",
        both(&once)
    );
    assert!(w.ids().is_empty(), "{engine:?}: a container was made");
    assert!(
        !w.state().join("teams").join(&w.team).exists(),
        "{engine:?}: the team was stored"
    );

    w.write(
        "manifests/team.yaml",
        &team_yaml(&w.team, "../sessions", "../repo"),
    );
    let log = std::fs::File::create(w.root().join("controller.log")).unwrap();
    let child = w
        .cmd(&["controller", "-f", &w.manifests()])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    w.controller = Some(child);
    w.until("ran the member", 90, || w.row("m")["state"] == "running");
    let ids = w.ids();
    w.write("manifests/team.yaml", &bad);
    w.until("refused the edit", 30, || {
        let s = text(&w.ateam(&["status", &w.team]).stdout);
        s.contains("the manifests were refused") && s.contains("a manifest path given with -f")
    });
    // What the member would now do, were the manifests folder its to write.
    let pwned = w.root().join("pwned");
    let evil = format!(
        "apiVersion: ateam.dev/v1alpha1\nkind: MainSession\nmetadata: {{name: pwn}}\nspec: {{command: [sh, -c, 'touch {}; sleep 100000'], cwd: ../repo}}\n",
        pwned.display()
    );
    let script = format!("printf '%s' \"$0\" > {}/evil.yaml", w.manifests());
    let _ = w.ateam(&[
        "exec", "m", "--team", &w.team, "--", "sh", "-c", &script, &evil,
    ]);
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        !w.root().join("manifests/evil.yaml").exists(),
        "{engine:?}: the member wrote into the manifests folder"
    );
    assert!(!pwned.exists(), "{engine:?}: the member's MainSession ran");
    assert_eq!(w.ids(), ids, "{engine:?}: the member's container changed");
    assert_eq!(w.row("m")["state"], "running", "{engine:?}");
}

/// 30,000 refused destinations, and among the most refused the engine's API on loopback and
/// the metadata service: `status` prints a bounded number of lines, and offers neither in the
/// grant to paste but names them with what they would open.
fn status_stays_short_and_never_offers_a_local_address_silently(engine: Engine) {
    let w = World::new(engine, "mfst");
    let yaml = team_yaml(&w.team, "../sessions", "../repo").replace(
        "spec: {write: [../repo]}",
        "spec: {write: [../repo], network: {allow: [example.com]}}",
    );
    w.write("manifests/team.yaml", &yaml);
    let file = w.root().join("manifests/team.yaml");
    let out = w.ateam(&["apply", "-f", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{engine:?}: {}", both(&out));
    // The rotated log, which the running proxy no longer holds open: the format of
    // src/egress/log.rs, written directly.
    let dir = ateam::core::layout::egress_dir(&w.state(), &w.team, "m");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 5.0;
    let line = |host: &str, port: u16| {
        format!(
            "{{\"ts\":{now},\"verdict\":\"refused\",\"method\":\"CONNECT\",\"host\":\"{host}\",\"port\":{port},\"status\":403,\"reason\":\"{host}:{port} is not in this member's allow list\"}}\n"
        )
    };
    let mut log = String::new();
    for i in 0..30_000 {
        log.push_str(&line(&format!("h{i}.example.net"), 443));
    }
    for _ in 0..3 {
        log.push_str(&line("127.0.0.1", 2375));
        log.push_str(&line("169.254.169.254", 80));
    }
    let rotated = dir.join("log.jsonl.1");
    std::fs::write(&rotated, log).unwrap();
    if engine == Engine::Rootless {
        let (_, uid, gid) = rootless_user();
        std::os::unix::fs::chown(&rotated, Some(uid), Some(gid)).unwrap();
    }
    let out = w.ateam(&["status", &w.team]);
    let shown = text(&out.stdout);
    let lines = shown.lines().count();
    assert!(lines < 80, "{engine:?}: {lines} lines:\n{shown}");
    // 30,002 destinations, and what the member itself knocked on.
    assert!(
        shown.contains("and 2999") && shown.contains(" more destinations ("),
        "{engine:?}: {shown}"
    );
    for bad in ["- \"127.0.0.1:2375\"", "- \"169.254.169.254:80\""] {
        assert!(!shown.contains(bad), "{engine:?}: offered {bad}:\n{shown}");
    }
    for says in [
        "`127.0.0.1:2375` is a loopback address",
        "the Docker API without TLS: allowing it gives the member that host",
        "`169.254.169.254:80` is a link-local address",
        "cloud credentials",
    ] {
        assert!(shown.contains(says), "{engine:?}: no {says:?}:\n{shown}");
    }
    let row = w.row("m");
    assert_eq!(row["egress"]["refused"].as_array().map(Vec::len), Some(10));
}

macro_rules! cases {
    ($($engine:ident),*) => {
        $(
            on_every_engine!($engine:
                a_member_cannot_get_a_main_session_it_writes_run,
                status_stays_short_and_never_offers_a_local_address_silently,
            );
        )*
    };
}

cases!(docker, podman, rootless_podman);
