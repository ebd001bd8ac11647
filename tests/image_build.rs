//! A member on the image its repository defines (`image: {devcontainer: ...}`, `image:
//! {build: ...}`), built by each engine from a local image (ateam-toolchain:bookworm) with no
//! network: run on Docker, rootful and rootless Podman. Also: an unchanged definition is not
//! built again, a changed one is (and `diff` shows the new image), a FROM the engine lacks is
//! refused before any change with the reason, and `validate` refuses a definition that leads
//! outside its repository without building anything.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

#[macro_use]
mod common;

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use common::standin::chown_tree;
use common::{Engine, text};

/// The owner of the team's folder under a root caller: a user of the machine, whose uid the
/// members run as.
const FOLDER_OWNER: u32 = 4242;

/// The Dockerfile of the test's repository: its build fails unless RUN has no network but
/// loopback, and it copies a file of the context and an argument into the image.
const DOCKERFILE: &str = "# the project's dev image\n\
ARG BASE=ateam-toolchain:bookworm\n\
FROM ${BASE} AS dev\n\
ARG GREETING=none\n\
RUN python3 -c \"import socket,sys; n=[i[1] for i in socket.if_nameindex()]; print('interfaces', n); sys.exit(0 if n == ['lo'] else 1)\"\n\
COPY hello.txt /opt/hello.txt\n\
RUN echo \"$GREETING\" > /opt/greeting.txt\n";

const DEVCONTAINER: &str = r#"{
  // As an editor reads it: comments, trailing commas.
  "name": "app",
  "build": {
    "dockerfile": "Dockerfile",
    "context": "..", /* the repository */
    "args": {"GREETING": "hi from devcontainer",},
  },
  "customizations": {"vscode": {"extensions": ["ms-python.python"]}},
}"#;

/// The common world (`common::World`: engine, folder, team, `ateam`, teardown) and this
/// crate's repository and the images its builds made.
struct World(common::World);

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.0
    }
}

impl World {
    /// A repository `app/` (its Dockerfile in `.devcontainer/`, `hello.txt` with a text of
    /// this run's own, so the first build is a real one) and a team whose member `dev` runs
    /// on the image its devcontainer.json defines and `plain` on the same Dockerfile named
    /// by `build:`.
    fn new(engine: Engine, name: &str) -> World {
        let w = World(common::World::new(engine, "build", &format!("ib{name}")));
        let app = w.path("app");
        std::fs::create_dir_all(app.join(".devcontainer")).unwrap();
        std::fs::create_dir_all(w.path("out")).unwrap();
        std::fs::write(app.join(".devcontainer/Dockerfile"), DOCKERFILE).unwrap();
        std::fs::write(app.join(".devcontainer/devcontainer.json"), DEVCONTAINER).unwrap();
        std::fs::write(app.join("hello.txt"), format!("hello {}\n", w.team)).unwrap();
        std::fs::write(w.manifest_path(), w.manifest()).unwrap();
        let (uid, gid) = w.rootless_person().unwrap_or((FOLDER_OWNER, FOLDER_OWNER));
        chown_tree(&w.root(), uid, gid);
        w
    }

    fn manifest(&self) -> String {
        let limits = if self.engine == Engine::Rootless {
            "\n  allowUnenforcedLimits: true"
        } else {
            ""
        };
        let member = |name: &str, image: &str| {
            format!(
                "---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: {name}}}
spec:
  parent: lead
  access: out
  image: {image}
  command: [sh, -c, \"cat /opt/hello.txt /opt/greeting.txt > {name}.txt\"]
  restart: Never
  shareWrites: true
  resources: {{memory: 256Mi}}
"
            )
        };
        format!(
            "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec:
  sessionDir: ./sessions{limits}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec:
  command: [sh, -c, \"exec sh\"]
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: out}}
spec:
  write: [./out]
{}{}",
            member(
                "dev",
                "{devcontainer: ./app/.devcontainer/devcontainer.json}"
            ),
            member(
                "plain",
                "{build: {context: ./app, dockerfile: .devcontainer/Dockerfile, args: {GREETING: hi from devcontainer}}}"
            ),
            team = self.team,
        )
    }

    fn manifest_path(&self) -> PathBuf {
        self.path("team.yaml")
    }

    fn apply(&self) -> Output {
        let m = self.manifest_path().display().to_string();
        self.ateam(&["-v", "apply", "-f", &m])
    }

    /// The images of the team's containers, as the engine names them (Podman's
    /// `localhost/` left out).
    fn images(&self) -> Vec<String> {
        let out = self
            .engine_cli()
            .args([
                "ps",
                "-a",
                "--filter",
                &format!("label=ateam.dev/team={}", self.team),
                "--format",
                "{{.Image}}",
            ])
            .output()
            .unwrap();
        let mut images: Vec<String> = text(&out.stdout)
            .split_whitespace()
            .map(|i| i.trim_start_matches("localhost/").to_string())
            .collect();
        images.sort();
        images.dedup();
        images
    }

    /// Waits for `name` to have written its file; its content.
    fn written(&self, name: &str) -> String {
        let path = self.root().join("out").join(format!("{name}.txt"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(s) = std::fs::read_to_string(&path)
                && s.lines().count() >= 2
            {
                return s;
            }
            if Instant::now() > deadline {
                let logs = self.ateam(&["logs", name]);
                panic!(
                    "{name} wrote nothing: {}{}",
                    text(&logs.stdout),
                    text(&logs.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn remove_image(&self, image: &str) {
        let _ = common::engine_command(self.engine, true)
            .args(["rmi", "-f", image])
            .output();
    }
}

impl Drop for World {
    /// The team (the common world), then the images its builds made.
    fn drop(&mut self) {
        let images = self.images();
        self.0.remove();
        for i in images.iter().filter(|i| i.contains("ateam-build")) {
            self.remove_image(i);
        }
    }
}

fn built(out: &Output) -> usize {
    text(&out.stderr).matches("image built").count()
}

fn ok(out: &Output, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Both forms of one definition: one build (one tag), both members run on it; again, no
/// build; a changed file of the context: `diff` shows the new image, apply builds it once and
/// recreates both members on it.
fn a_member_runs_on_the_image_its_repository_defines(engine: Engine) {
    let w = World::new(engine, "ok");
    let t0 = Instant::now();
    let out = w.apply();
    ok(&out, "first apply");
    let first_apply = t0.elapsed();
    assert_eq!(built(&out), 1, "one build for both: {}", text(&out.stderr));
    let want = format!("hello {}\nhi from devcontainer\n", w.team);
    assert_eq!(w.written("dev"), want);
    assert_eq!(w.written("plain"), want);
    let images = w.images();
    assert_eq!(images.len(), 1, "{images:?}");
    assert!(images[0].starts_with("ateam-build:"), "{images:?}");

    // Unchanged: nothing built, nothing to do.
    let t1 = Instant::now();
    let again = w.apply();
    ok(&again, "second apply");
    let second_apply = t1.elapsed();
    assert_eq!(built(&again), 0, "{}", text(&again.stderr));
    let m = w.manifest_path().display().to_string();
    let diff = w.ateam(&["diff", "-f", &m]);
    assert!(
        text(&diff.stdout).contains("no changes"),
        "{}",
        text(&diff.stdout)
    );

    // Changed: a new tag, which diff shows, built once, both members made anew on it.
    std::fs::write(w.root().join("app/hello.txt"), "hello again\n").unwrap();
    let diff = w.ateam(&["diff", "-f", &m]);
    let shown = text(&diff.stdout);
    assert!(
        shown.contains(&images[0]) && shown.matches("ateam-build:").count() >= 2,
        "diff shows the image change: {shown}"
    );
    std::fs::remove_file(w.root().join("out/dev.txt")).unwrap();
    std::fs::remove_file(w.root().join("out/plain.txt")).unwrap();
    let out = w.apply();
    ok(&out, "apply of the change");
    assert_eq!(built(&out), 1, "{}", text(&out.stderr));
    assert_eq!(w.written("dev"), "hello again\nhi from devcontainer\n");
    let now = w.images();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0], images[0]);
    w.remove_image(&images[0]);
    eprintln!(
        "[image_build] {engine:?}: first apply with the build {:.2} s, again {:.2} s",
        first_apply.as_secs_f64(),
        second_apply.as_secs_f64()
    );
}

/// A FROM the engine lacks: apply refuses before any change, saying it builds from local
/// images only; a RUN that fails: refused with what the builder said. No container is made.
fn a_build_that_cannot_be_made_is_refused_with_the_reason(engine: Engine) {
    let w = World::new(engine, "nf");
    let df = w.root().join("app/.devcontainer/Dockerfile");
    let text_now = std::fs::read_to_string(&df).unwrap();
    std::fs::write(
        &df,
        text_now.replace(
            "ARG BASE=ateam-toolchain:bookworm",
            "ARG BASE=ateam-no-such-base:1",
        ),
    )
    .unwrap();
    let out = w.apply();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{}\n{err}", text(&out.stdout));
    assert!(
        err.contains("builds FROM `ateam-no-such-base:1`")
            && err.contains("local images only")
            && err.contains(&df.display().to_string()),
        "{err}"
    );
    assert!(w.images().is_empty(), "nothing made");

    // A RUN that fails: refused with the builder's own words, nothing made.
    std::fs::write(
        &df,
        format!("{text_now}RUN echo the repository says no; exit 3\n"),
    )
    .unwrap();
    let out = w.apply();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{}\n{err}", text(&out.stdout));
    assert!(
        err.contains("building the Dockerfile") && err.contains("the repository says no"),
        "{err}"
    );
    assert!(w.images().is_empty(), "nothing made");
}

/// `validate` refuses, at the manifest's line and field, a devcontainer.json whose context
/// leads outside its repository, a Dockerfile outside its context, and a `build:` whose
/// Dockerfile climbs out; no engine is asked.
#[test]
fn validate_refuses_a_definition_that_leaves_its_repository() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let app = root.join("repo/app");
    std::fs::create_dir_all(app.join(".devcontainer")).unwrap();
    std::fs::write(app.join(".devcontainer/Dockerfile"), DOCKERFILE).unwrap();
    std::fs::write(app.join("hello.txt"), "x").unwrap();
    std::fs::write(root.join("repo/Dockerfile"), "FROM x\n").unwrap();
    std::fs::write(
        app.join(".devcontainer/devcontainer.json"),
        r#"{"build": {"dockerfile": "Dockerfile", "context": "../.."}}"#,
    )
    .unwrap();
    std::fs::write(
        app.join(".devcontainer/other.json"),
        r#"{"build": {"dockerfile": "../../Dockerfile", "context": "."}}"#,
    )
    .unwrap();
    let yaml = "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: v}
spec: {sessionDir: ./sessions}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: lead}
spec: {command: [sh]}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: a}
spec:
  parent: lead
  image: {devcontainer: ./repo/app/.devcontainer/devcontainer.json}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: b}
spec:
  parent: lead
  image: {devcontainer: ./repo/app/.devcontainer/other.json}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: c}
spec:
  parent: lead
  image: {build: {context: ./repo/app, dockerfile: ../Dockerfile}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: d}
spec:
  parent: lead
  image: {build: {context: ./repo/app, dockerfile: .devcontainer/Dockerfile, target: dev}, pull: x}
";
    let manifest = root.join("team.yaml");
    std::fs::write(&manifest, yaml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ateam"))
        .env("ATEAM_STATE_DIR", root.join("state"))
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .args(["validate", "-f"])
        .arg(&manifest)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    let m = manifest.display().to_string();
    for (line, says) in [
        (
            format!("{m}:16:"),
            "build.context `../..` leads outside its repository",
        ),
        (
            format!("{m}:23:"),
            "build.dockerfile `../../Dockerfile` is not inside the build context",
        ),
        (format!("{m}:30:"), "no `..`"),
        (format!("{m}:37:"), "unknown field `pull`"),
    ] {
        assert!(
            err.lines().any(|l| l.contains(&line) && l.contains(says))
                || (err.contains(&line) && err.contains(says)),
            "{line} {says}:\n{err}"
        );
    }
}

on_every_engine!(docker: a_member_runs_on_the_image_its_repository_defines, a_build_that_cannot_be_made_is_refused_with_the_reason);
on_every_engine!(podman: a_member_runs_on_the_image_its_repository_defines, a_build_that_cannot_be_made_is_refused_with_the_reason);
on_every_engine!(rootless_podman: a_member_runs_on_the_image_its_repository_defines, a_build_that_cannot_be_made_is_refused_with_the_reason);
