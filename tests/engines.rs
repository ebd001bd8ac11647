//! The backends against real engines: one list of cases, run on Docker, rootful Podman and
//! rootless Podman (the last as an unprivileged user). `scripts/test.sh` starts the engines
//! (scripts/engines.sh) and runs these; a plain `cargo test` lists them as ignored.
//!
//! Each case writes a real team manifest into a temp folder, validates it, and brings members
//! up through `ateam::runtime`, then checks through the engine (inspect), from inside the
//! container (exec) and on the host (file owners).

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ateam::backend::connect::{Candidate, Engine};
use ateam::backend::{Backend, BackendError, EngineInfo, EngineKind};
use ateam::files::Owner;
use ateam::host::Host;
use ateam::manifest::{Source, validate};
use ateam::plan::spec::{DesiredMember, DesiredState, desired_state};
use ateam::plan::{Action, ContainerOp, Drift, PlanOptions, Removal, plan};
use ateam::runtime::pin::PinError;
use ateam::runtime::{RunError, Runtime};

/// One engine under test.
struct Eng {
    name: &'static str,
    uri: String,
    backend: Arc<dyn Backend>,
    info: EngineInfo,
    /// The user members run as (and own their files).
    owner: Owner,
}

async fn engine(name: &'static str) -> Eng {
    let (var, engine) = match name {
        "docker" => ("ATEAM_TEST_DOCKER", Engine::Docker),
        "podman" => ("ATEAM_TEST_PODMAN_ROOTFUL", Engine::Podman),
        _ => ("ATEAM_TEST_PODMAN_ROOTLESS", Engine::Podman),
    };
    let uri = std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run scripts/engines.sh and source /run/ateam-ci/env")
    });
    let me = rustix::process::getuid().as_raw();
    let owner = if name == "podman_rootless" {
        assert_ne!(
            me, 0,
            "rootless cases run as the unprivileged user (scripts/test.sh does this)"
        );
        Owner {
            uid: me,
            gid: rustix::process::getgid().as_raw(),
        }
    } else {
        // Root talks to the rootful engines on behalf of an ordinary user, as a user in the
        // docker group would: members run as that user.
        let user = std::env::var("ATEAM_TEST_ROOTLESS_USER").unwrap_or_else(|_| "ateamci".into());
        let id = |flag: &str| -> u32 {
            let out = Command::new("id").args([flag, &user]).output().expect("id");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("no user {user}"))
        };
        Owner {
            uid: id("-u"),
            gid: id("-g"),
        }
    };
    let (backend, info) = ateam::backend::connect::connect_to(&Candidate {
        engine,
        uri: uri.clone(),
        origin: "test",
    })
    .await
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        matches!(info.kind, EngineKind::Podman { rootless: true }),
        name == "podman_rootless",
        "{info:?}"
    );
    Eng {
        name,
        uri,
        backend,
        info,
        owner,
    }
}

/// A team in a temp folder: manifests, grants, transcripts and state all inside it.
struct Team {
    dir: tempfile::TempDir,
    desired: DesiredState,
    rt: Runtime,
    cli: Vec<String>,
}

const MANIFEST: &str = r#"
apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: TEAM}
spec: {image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: ALLOW}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: lead}
spec: {command: [sh], cwd: ./repo}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: ro}
spec: {read: [./repo, ./docs]}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: rw}
spec: {read: [./docs], write: [./repo]}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: reviewer}
spec: {parent: lead, access: ro, resources: {memory: 64Mi, pids: 64}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: writer}
spec: {parent: lead, access: rw, resources: {memory: 96Mi, pids: 80}, secretEnv: [TEST_TOKEN]}
"#;

impl Team {
    /// `tag` keeps container names apart across cases and runs.
    fn new(e: &Eng, tag: &str, allow_unenforced: bool, image: &str) -> Team {
        let dir = tempfile::Builder::new()
            .prefix("ateam-engines-")
            .tempdir()
            .unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["repo", "docs", "home", "sessions", "state"] {
            std::fs::create_dir(root.join(d)).unwrap();
        }
        std::fs::write(root.join("docs/README"), "read me\n").unwrap();
        // The user's own folders, as they would be on a workstation.
        for d in [
            "",
            "repo",
            "docs",
            "home",
            "sessions",
            "state",
            "docs/README",
        ] {
            std::os::unix::fs::chown(root.join(d), Some(e.owner.uid), Some(e.owner.gid)).unwrap();
        }
        let name = format!(
            "{tag}-{}-{}",
            std::process::id() % 100000,
            e.name.replace('_', "-")
        );
        let text = MANIFEST
            .replace("TEAM", &name)
            .replace("ALLOW", &allow_unenforced.to_string())
            .replace("ateam-demo:latest", image);
        let host = Host {
            uid: e.owner.uid,
            gid: e.owner.gid,
            home: root.join("home"),
            memory_bytes: 8 << 30,
            state_dir: root.join("state"),
            sudo_user: None,
            engine_dirs: Default::default(),
        };
        let src = Source {
            path: root.join("team.yaml"),
            dir: root.clone(),
            text,
            given: None,
        };
        let model = validate(&[src], &host, &[]).unwrap_or_else(|p| panic!("{p:#?}"));
        let desired = desired_state(&model, &host);
        let rt = Runtime {
            backend: e.backend.clone(),
            info: e.info.clone(),
            store: desired.store.clone(),
            owner: e.owner,
            state_dir: host.state_dir.clone(),
            looked: Default::default(),
        };
        let cli = match e.name {
            "docker" => vec!["docker".into(), "-H".into(), e.uri.clone()],
            _ => vec!["podman".into(), "--url".into(), e.uri.clone()],
        };
        Team {
            dir,
            desired,
            rt,
            cli,
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    fn member(&self, name: &str) -> &DesiredMember {
        self.desired
            .members
            .iter()
            .find(|m| m.member == name)
            .unwrap()
    }

    async fn up(&self, name: &str) -> Result<String, RunError> {
        let m = self.member(name);
        let p = self
            .rt
            .prepare(m, &|k| (k == "TEST_TOKEN").then(|| "s3cret".to_string()))
            .await?;
        self.rt.launch(p, None).await
    }

    async fn sh(&self, id: &str, script: &str) -> ateam::backend::ExecOutput {
        self.rt
            .backend
            .exec(id, &["sh".into(), "-c".into(), script.into()])
            .await
            .unwrap()
    }

    /// Runs the engine's own CLI (for changes made "out of band").
    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.cli[0])
            .args(&self.cli[1..])
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        // Best effort, whatever the test did: no container outlives its case.
        let names: Vec<String> = self
            .desired
            .members
            .iter()
            .map(|m| m.spec.name.clone())
            .collect();
        let mut args = vec!["rm", "-f"];
        args.extend(names.iter().map(String::as_str));
        let _ = self.cli(&args);
    }
}

/// Waits for a file the member writes once its command runs.
fn wait_for(path: &Path, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.contains(what)
        {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{} never contained {what:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ----------------------------------------------------------------------------------- cases

async fn policy_holds_through_the_engine_and_the_member_runs(e: &Eng) {
    let t = Team::new(e, "policy", true, "ateam-demo:latest");
    let id = t
        .up("writer")
        .await
        .unwrap_or_else(|err| panic!("{}: {err}", e.name));
    let m = t.member("writer");
    let inspected = e.backend.inspect(&id).await.unwrap();
    let mut expected = ateam::policy::compliant(&m.spec);
    if !e.info.limits_enforced {
        // Rootless Podman on cgroup v1 drops the limits; the team allowed it.
        (
            expected.memory_bytes,
            expected.memory_swap_bytes,
            expected.pids_limit,
        ) = (
            inspected.effective.memory_bytes,
            inspected.effective.memory_swap_bytes,
            inspected.effective.pids_limit,
        );
    }
    let mut got = inspected.effective.clone();
    got.bind_mounts.sort();
    expected.bind_mounts.sort();
    // What the policy judges by rule rather than by value (each engine spells these its own
    // way): judged here through the policy itself, then compared as the rest.
    let limits = if e.info.limits_enforced {
        ateam::policy::Limits::Enforced
    } else {
        ateam::policy::Limits::Unenforced
    };
    let violations = ateam::policy::verify(&m.spec, &got, limits);
    assert!(violations.is_empty(), "{}: {violations:?}", e.name);
    expected.image = got.image.clone();
    expected.cmd = got.cmd.clone();
    expected.tmpfs = got.tmpfs.clone();
    expected.namespaces = got.namespaces.clone();
    (expected.masked_paths, expected.readonly_paths) =
        (got.masked_paths.clone(), got.readonly_paths.clone());
    (expected.apparmor_profile, expected.security_opt) =
        (got.apparmor_profile.clone(), got.security_opt.clone());
    assert_eq!(got, expected, "{}", e.name);
    // The gate released the member: its command ran, as the user, and wrote its transcript.
    let log = wait_for(&m.transcript_dir.join("transcript.log"), "sleeping");
    assert!(log.contains(&format!("uid={}", e.owner.uid)), "{log}");
    let meta = std::fs::metadata(m.transcript_dir.join("transcript.log")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (e.owner.uid, e.owner.gid));
    // The secret reached the member's process, and is nowhere in the engine's configuration.
    let env = t.sh(&id, "cat /proc/1/environ /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep TEST_TOKEN || true").await;
    assert!(env.stdout.contains("TEST_TOKEN=s3cret"), "{env:?}");
    let raw = t.cli(&["inspect", &id]);
    assert!(
        !String::from_utf8_lossy(&raw.stdout).contains("s3cret"),
        "the secret shows in inspect"
    );
}

async fn a_read_grant_cannot_be_written(e: &Eng) {
    let t = Team::new(e, "readonly", true, "ateam-demo:latest");
    let id = t.up("reviewer").await.unwrap();
    let docs = t.root().join("docs");
    let out = t.sh(&id, &format!("touch {}/new", docs.display())).await;
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("Read-only file system"), "{out:?}");
    let read = t.sh(&id, &format!("cat {}/README", docs.display())).await;
    assert_eq!(read.stdout, "read me\n");
    assert!(!docs.join("new").exists());
}

async fn a_write_grant_is_writable_and_files_are_the_users(e: &Eng) {
    let t = Team::new(e, "write", true, "ateam-demo:latest");
    let id = t.up("writer").await.unwrap();
    let repo = t.root().join("repo");
    let out = t
        .sh(&id, &format!("echo work > {}/result.txt", repo.display()))
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let meta = std::fs::metadata(repo.join("result.txt")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (e.owner.uid, e.owner.gid),
        "{}",
        e.name
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("result.txt")).unwrap(),
        "work\n"
    );
}

async fn nothing_outside_the_grants_is_visible(e: &Eng) {
    let t = Team::new(e, "visible", true, "ateam-demo:latest");
    let reviewer = t.up("reviewer").await.unwrap();
    t.up("writer").await.unwrap();
    let root = t.root();
    let hidden = [
        root.join("home"),
        root.join("state"),
        t.member("writer").transcript_dir.clone(),
        PathBuf::from("/run/ateam-ci"),
        PathBuf::from("/var/run/docker.sock"),
        PathBuf::from("/run/podman"),
    ];
    for p in hidden {
        let out = t.sh(&reviewer, &format!("ls -d {}", p.display())).await;
        assert_ne!(
            out.code,
            0,
            "{} is visible in the reviewer: {out:?}",
            p.display()
        );
    }
    // The transcripts folder shows only its own transcript (the rest of the path is just the
    // mount point's parents).
    let members = t
        .sh(
            &reviewer,
            &format!("ls {}", root.join("sessions/members").display()),
        )
        .await;
    assert_eq!(
        members.stdout.split_whitespace().collect::<Vec<_>>(),
        ["reviewer"],
        "{members:?}"
    );
    // Its own transcript folder is there and writable.
    let own = t.member("reviewer").transcript_dir.clone();
    assert_eq!(
        t.sh(&reviewer, &format!("touch {}/mine", own.display()))
            .await
            .code,
        0
    );
    // Its control folder holds the gate and its own files only, read-only.
    let ctl = t.sh(&reviewer, "ls /.ateam; touch /.ateam/x").await;
    assert_eq!(
        ctl.stdout.split_whitespace().collect::<Vec<_>>(),
        ["gate", "go", "secrets"],
        "{ctl:?}"
    );
    assert!(ctl.stderr.contains("Read-only"), "{ctl:?}");
    // The root filesystem is read-only; /tmp and HOME are private tmpfs.
    assert_ne!(t.sh(&reviewer, "touch /etc/x").await.code, 0);
    assert_eq!(t.sh(&reviewer, "touch /tmp/x $HOME/x").await.code, 0);
}

async fn no_network_interface_but_loopback(e: &Eng) {
    let t = Team::new(e, "net", true, "ateam-demo:latest");
    let id = t.up("reviewer").await.unwrap();
    let out = t.sh(&id, "ls /sys/class/net").await;
    assert_eq!(
        out.stdout.split_whitespace().collect::<Vec<_>>(),
        ["lo"],
        "{out:?}"
    );
    let log = wait_for(
        &t.member("reviewer").transcript_dir.join("transcript.log"),
        "network:",
    );
    assert!(log.contains("network: cannot reach"), "{log}");
}

async fn a_folder_swapped_for_a_symlink_is_caught_before_the_member_runs(e: &Eng) {
    let t = Team::new(e, "swap", true, "ateam-demo:latest");
    let m = t.member("writer").clone();
    let p = t.rt.prepare(&m, &|_| Some("x".into())).await.unwrap();
    // Between validation (and pinning) and the engine's mount, the grant becomes a symlink to
    // a folder the member was never granted.
    let root = t.root();
    std::fs::rename(root.join("repo"), root.join("repo.moved")).unwrap();
    std::os::unix::fs::symlink(root.join("home"), root.join("repo")).unwrap();
    let err =
        t.rt.launch(p, None)
            .await
            .expect_err("the swap must be caught");
    eprintln!("{}: the swap was caught: {err}", e.name);
    match &err {
        RunError::Pin {
            source: PinError::Swapped { path, .. },
            ..
        } => assert_eq!(path, &root.join("repo")),
        other => panic!("{}: unexpected {other}", e.name),
    }
    assert!(
        e.backend
            .find_by_name(&m.spec.name)
            .await
            .unwrap()
            .is_none(),
        "the container was removed"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !m.transcript_dir.join("transcript.log").exists(),
        "the member's command never ran"
    );
}

async fn a_container_tampered_with_is_a_policy_violation_and_a_look_alike_a_stranger(e: &Eng) {
    let t = Team::new(e, "tamper", true, "ateam-demo:latest");
    let id = t.up("reviewer").await.unwrap();
    let m = t.member("reviewer").clone();
    let observed = ateam::observe::observe(e.backend.as_ref(), &e.info, &t.desired)
        .await
        .unwrap();
    let p = plan(&t.desired, &observed, PlanOptions::default());
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a.container_op(), Some(ContainerOp::Recreate { .. }))),
        "in sync at first: {p:?}"
    );

    // Limits changed out of band on the genuine container: a policy violation to put right.
    if e.info.limits_enforced {
        // Podman 4.3's `update` has no --pids-limit.
        let pids: &[&str] = if e.name == "docker" {
            &["--pids-limit", "1000"]
        } else {
            &[]
        };
        let mut args = vec!["update", "--memory", "200m", "--memory-swap", "400m"];
        args.extend(pids);
        args.push(&id);
        let out = t.cli(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let observed = ateam::observe::observe(e.backend.as_ref(), &e.info, &t.desired)
            .await
            .unwrap();
        let p = plan(&t.desired, &observed, PlanOptions::default());
        let items: Vec<String> = p
            .actions
            .iter()
            .find_map(|a| match a.container_op() {
                Some(ContainerOp::Recreate {
                    reason: Drift::Policy { violations },
                    ..
                }) => Some(violations.iter().map(|v| v.item.clone()).collect()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{}: no policy violation planned: {p:?}", e.name));
        let must: &[&str] = if pids.is_empty() {
            &["memory"]
        } else {
            &["memory", "pids limit"]
        };
        for must in must {
            assert!(
                items.iter().any(|i| i == must),
                "{}: {must} not in {items:?}",
                e.name
            );
        }
    }

    // Replaced out of band by a privileged container with an extra mount, same labels: a
    // stranger. It is never adopted nor checked as the member; it is removed as the holder of
    // the member's name, and the member made anew.
    assert!(t.cli(&["rm", "-f", &id]).status.success());
    let mut args: Vec<String> = vec![
        "run".into(),
        "-d".into(),
        "--name".into(),
        m.spec.name.clone(),
        "--privileged".into(),
    ];
    for (k, v) in m.container_labels(&t.desired.store) {
        args.extend(["--label".into(), format!("{k}={v}")]);
    }
    args.extend([
        "-v".into(),
        format!("{}:/host-docs:ro", t.root().join("docs").display()),
    ]);
    args.extend(["--user".into(), format!("{}:{}", e.owner.uid, e.owner.gid)]);
    args.extend(["ateam-demo:latest".into(), "sleep".into(), "1000".into()]);
    let out = t.cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fake = String::from_utf8_lossy(&out.stdout).trim().to_string();

    let observed = ateam::observe::observe(e.backend.as_ref(), &e.info, &t.desired)
        .await
        .unwrap();
    let p = plan(&t.desired, &observed, PlanOptions::default());
    let mine: Vec<&Action> = p
        .actions
        .iter()
        .filter(|a| {
            a.subject == "reviewer"
                && matches!(
                    a.container_op(),
                    Some(
                        ContainerOp::Remove {
                            removal: Removal::Stranger,
                            ..
                        } | ContainerOp::Start { .. }
                            | ContainerOp::Create { .. }
                            | ContainerOp::Recreate { .. }
                    )
                )
        })
        .collect();
    let ops: Vec<_> = mine.iter().filter_map(|a| a.container_op()).collect();
    assert!(
        matches!(&ops[..], [ContainerOp::Remove { container, removal: Removal::Stranger }, ContainerOp::Create { .. }] if fake.starts_with(&container.id[..12])),
        "{}: {mine:?}",
        e.name
    );
}

async fn a_missing_image_is_named_and_never_pulled(e: &Eng) {
    let t = Team::new(e, "noimage", true, "ateam-no-such-image:1");
    let err = t.up("reviewer").await.expect_err("no such image");
    let text = err.to_string();
    assert!(
        matches!(
            &err,
            RunError::Backend {
                source: BackendError::ImageMissing { .. },
                ..
            }
        ),
        "{}: {text}",
        e.name
    );
    assert!(
        text.contains("ateam-no-such-image:1") && text.contains("imagePullPolicy is Never"),
        "{text}"
    );
    assert!(
        e.backend
            .find_by_name(&t.member("reviewer").spec.name)
            .await
            .unwrap()
            .is_none()
    );
}

async fn a_foreign_container_with_the_name_is_never_touched(e: &Eng) {
    let t = Team::new(e, "foreign", true, "ateam-demo:latest");
    let name = t.member("reviewer").spec.name.clone();
    let out = t.cli(&[
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        "none",
        "ateam-demo:latest",
        "sleep",
        "1000",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let foreign_id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let observed = ateam::observe::observe(e.backend.as_ref(), &e.info, &t.desired)
        .await
        .unwrap();
    let p = plan(&t.desired, &observed, PlanOptions::pruning(true));
    assert!(
        p.findings.iter().any(
            |f| matches!(f, ateam::plan::Finding::Conflict { member, .. } if member == "reviewer")
        ),
        "{p:?}"
    );
    assert!(
        !p.actions.iter().any(|a| a.subject == "reviewer"
            && matches!(a.container_op(), Some(ContainerOp::Create { .. })))
    );
    let err = t.up("reviewer").await.expect_err("the name is taken");
    assert!(
        matches!(
            &err,
            RunError::Backend {
                source: BackendError::NameConflict { .. },
                ..
            }
        ),
        "{err}"
    );
    let still = e
        .backend
        .find_by_name(&name)
        .await
        .unwrap()
        .expect("still there");
    assert!(foreign_id.starts_with(&still.id) || still.id.starts_with(&foreign_id));
}

async fn limits_are_enforced_or_refused(e: &Eng) {
    if e.info.limits_enforced {
        let t = Team::new(e, "limits", false, "ateam-demo:latest");
        let id = t.up("writer").await.unwrap();
        let inspected = e.backend.inspect(&id).await.unwrap();
        assert_eq!(inspected.effective.memory_bytes, 96 << 20);
        assert_eq!(inspected.effective.pids_limit, 80);
        // The kernel agrees, seen from inside.
        let out = t
            .sh(
                &id,
                "cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/memory/memory.limit_in_bytes",
            )
            .await;
        assert_eq!(
            out.stdout.split_whitespace().collect::<Vec<_>>(),
            ["80", &(96u64 << 20).to_string()],
            "{out:?}"
        );
    } else {
        let strict = Team::new(e, "limits", false, "ateam-demo:latest");
        let err = strict
            .up("writer")
            .await
            .expect_err("limits cannot be enforced here");
        assert!(matches!(err, RunError::LimitsNotEnforced { .. }), "{err}");
        assert!(err.to_string().contains("allowUnenforcedLimits"), "{err}");
        assert!(
            e.backend
                .find_by_name(&strict.member("writer").spec.name)
                .await
                .unwrap()
                .is_none()
        );
        let relaxed = Team::new(e, "limitsok", true, "ateam-demo:latest");
        relaxed.up("writer").await.expect("allowed explicitly");
    }
}

async fn a_restart_checks_again_before_the_member_runs(e: &Eng) {
    let t = Team::new(e, "restart", true, "ateam-demo:latest");
    let id = t.up("writer").await.unwrap();
    let m = t.member("writer").clone();
    let log = m.transcript_dir.join("transcript.log");
    wait_for(&log, "sleeping");
    // A plain restart: checked again, released again, the member runs again.
    e.backend.stop(&id, 5).await.unwrap();
    std::fs::remove_file(&log).unwrap();
    t.rt.restart(&m, &id)
        .await
        .unwrap_or_else(|err| panic!("{}: {err}", e.name));
    wait_for(&log, "sleeping");
    // The engine mounts folders anew at each start: a grant swapped while the member was
    // stopped is caught, and the container removed before the member runs.
    e.backend.stop(&id, 5).await.unwrap();
    std::fs::remove_file(&log).unwrap();
    let root = t.root();
    std::fs::rename(root.join("repo"), root.join("repo.moved")).unwrap();
    std::os::unix::fs::symlink(root.join("home"), root.join("repo")).unwrap();
    let err =
        t.rt.restart(&m, &id)
            .await
            .expect_err("the swap must be caught");
    assert!(
        matches!(err, RunError::Pin { .. } | RunError::Backend { .. }),
        "{}: {err}",
        e.name
    );
    // Caught when pinning, before the start: the container was not started (or, had the
    // engine started it, it was removed).
    if let Some(c) = e.backend.find_by_name(&m.spec.name).await.unwrap() {
        assert!(!c.state.is_live(), "{}: {:?}", e.name, c.state);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(!log.exists(), "the member did not run");
}

/// A restart on Podman before 5 finds the new first process from the engine's pid files and
/// the kernel, and judges the configuration its look inspected: the gate opens for that very
/// process, and a look that read a configuration the policy refuses holds the member back
/// even though the engine's own is fine (the proof the look's was judged, not a new inspect).
/// Elsewhere the start is inspected as before.
async fn a_restart_judges_what_its_look_read(e: &Eng) {
    let t = Team::new(e, "looked", true, "ateam-demo:latest");
    let id = t.up("writer").await.unwrap();
    let m = t.member("writer").clone();
    let log = m.transcript_dir.join("transcript.log");
    wait_for(&log, "sleeping");
    let restart_after = |looked: ateam::runtime::Looked| {
        let rt = Runtime {
            backend: t.rt.backend.clone(),
            info: t.rt.info.clone(),
            store: t.rt.store.clone(),
            owner: t.rt.owner,
            state_dir: t.rt.state_dir.clone(),
            looked: [(id.clone(), looked)].into(),
        };
        let m = m.clone();
        let id = id.clone();
        async move { rt.restart(&m, &id).await }
    };
    e.backend.stop(&id, 5).await.unwrap();
    std::fs::remove_file(&log).unwrap();
    let seen = e.backend.inspect(&id).await.unwrap();
    assert_eq!(seen.pid_files.is_some(), e.name != "docker", "{}", e.name);
    let by_files = e.info.inspect_holds_while_running() && seen.pid_files.is_some();
    restart_after((&seen).into())
        .await
        .unwrap_or_else(|err| panic!("{}: {err}", e.name));
    wait_for(&log, "sleeping");
    let now = e.backend.inspect(&id).await.unwrap();
    assert!(
        ateam::runtime::gate::is_released(&m.ctl_dir, &id, now.pid),
        "{}: released for the engine's own first process",
        e.name
    );
    e.backend.stop(&id, 5).await.unwrap();
    std::fs::remove_file(&log).unwrap();
    let mut writable: ateam::runtime::Looked = (&e.backend.inspect(&id).await.unwrap()).into();
    if let Some(effective) = writable.effective.as_mut() {
        effective.read_only_rootfs = false;
    }
    let result = restart_after(writable).await;
    if by_files {
        let err = result.expect_err("the look's configuration is judged");
        assert!(
            matches!(
                err,
                RunError::PolicyViolation {
                    stage: "after start",
                    ..
                }
            ),
            "{}: {err}",
            e.name
        );
        assert!(
            e.backend
                .find_by_name(&m.spec.name)
                .await
                .unwrap()
                .is_none()
        );
        std::thread::sleep(Duration::from_millis(500));
        assert!(!log.exists(), "{}: the member did not run", e.name);
    } else {
        result.unwrap_or_else(|err| panic!("{}: inspected again: {err}", e.name));
        wait_for(&log, "sleeping");
    }
}

async fn unprivileged_user_gets_a_clear_error_on_the_docker_socket(e: &Eng) {
    assert_eq!(e.name, "podman_rootless");
    let sock = std::env::var("ATEAM_TEST_DOCKER").expect("ATEAM_TEST_DOCKER");
    let c = Candidate {
        engine: Engine::Docker,
        uri: sock.clone(),
        origin: "test",
    };
    let err = ateam::backend::connect::connect_to(&c)
        .await
        .err()
        .expect("permission denied");
    assert!(
        matches!(err, BackendError::PermissionDenied { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains(sock.trim_start_matches("unix://")),
        "{err}"
    );
}

/// Docker's first process is found from the kernel (`procfs::docker_init`), as the launch
/// does instead of an inspect after the start: the inspect's own pid, with Docker's init
/// in front (`--init`, as members run) and with a process `exec` added (the shim's child
/// too, but not pid 1 of the container); none for an id that is no container, and none on
/// Podman (its cgroups are named otherwise, and its pid files serve).
async fn the_first_process_is_found_from_the_kernel(e: &Eng) {
    use ateam::runtime::procfs::docker_init;
    let t = Team::new(e, "kernelpid", true, "ateam-demo:latest");
    let name = format!("{}-probe", t.desired.teams[0].name);
    let image = "ateam-demo:latest";
    let run = t.cli(&["run", "-d", "--init", "--name", &name, image, "sleep", "60"]);
    assert!(run.status.success(), "{}: {run:?}", e.name);
    let id = String::from_utf8_lossy(&run.stdout).trim().to_string();
    let inspected = e.backend.inspect(&id).await.unwrap();
    let found = docker_init(&id);
    let exec = t.cli(&["exec", "-d", &id, "sleep", "60"]);
    assert!(exec.status.success(), "{}: {exec:?}", e.name);
    // `exec -d` returns once the process is made.
    let with_exec = docker_init(&id);
    let _ = t.cli(&["rm", "-f", &name]);
    match e.name {
        "docker" => {
            assert!(found.is_some(), "{}", e.name);
            assert_eq!((found, with_exec), (inspected.pid, inspected.pid));
        }
        _ => assert_eq!((found, with_exec), (None, None), "{}", e.name),
    }
    assert_eq!(docker_init(&"0".repeat(64)), None);
    assert_eq!(docker_init("../../../../proc/self"), None);
}

macro_rules! engine_cases {
    ($engine:ident: $($case:ident),* $(,)?) => {
        mod $engine {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs container engines: run scripts/test.sh"]
                async fn $case() {
                    super::$case(&super::engine(stringify!($engine)).await).await;
                }
            )*
        }
    };
}

macro_rules! every_engine {
    ($($case:ident),* $(,)?; rootless only: $($extra:ident),*) => {
        engine_cases!(docker: $($case),*);
        engine_cases!(podman: $($case),*);
        engine_cases!(podman_rootless: $($case,)* $($extra),*);
    };
}

every_engine!(
    policy_holds_through_the_engine_and_the_member_runs,
    a_read_grant_cannot_be_written,
    a_write_grant_is_writable_and_files_are_the_users,
    nothing_outside_the_grants_is_visible,
    no_network_interface_but_loopback,
    a_folder_swapped_for_a_symlink_is_caught_before_the_member_runs,
    a_container_tampered_with_is_a_policy_violation_and_a_look_alike_a_stranger,
    a_missing_image_is_named_and_never_pulled,
    a_foreign_container_with_the_name_is_never_touched,
    limits_are_enforced_or_refused,
    a_restart_checks_again_before_the_member_runs,
    a_restart_judges_what_its_look_read,
    the_first_process_is_found_from_the_kernel;
    rootless only: unprivileged_user_gets_a_clear_error_on_the_docker_socket
);
