use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::models::ContainerInspectResponse;
use futures_util::stream::StreamExt;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::*;
use super::{
    inspect::{epoch_seconds, inspected_of},
    list::{exit_code_from_status, primary_name, regex_escape},
};
use crate::backend::{Backend, BackendError, CreateRequest, EngineKind, ExecOutput};
use crate::core::container::{ContainerState, Effective, Mount};

const IMAGE: &str = "ateam-demo:latest";

fn uri() -> String {
    std::env::var("ATEAM_TEST_DOCKER").unwrap_or_else(|_| {
        panic!(
            "ATEAM_TEST_DOCKER is not set: run scripts/engines.sh as root, then \
             `. /run/ateam-ci/env` (it points at the test dockerd socket)"
        )
    })
}

async fn backend() -> DockerBackend {
    let uri = uri();
    match DockerBackend::connect(&uri).await {
        Ok(b) => b,
        Err(e) => panic!("cannot connect to {uri}: {e}"),
    }
}

fn unique(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("ateam-test-{tag}-{}-{nanos}", std::process::id())
}

/// Removes the named containers when the test ends, also when it panics.
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let names = std::mem::take(&mut self.0);
        // Drop cannot await, and the test's runtime is busy: use a runtime of our own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("cleanup runtime");
            rt.block_on(async {
                if let Ok(b) = DockerBackend::connect(&uri()).await {
                    for n in names {
                        let _ = b.remove(&n).await;
                    }
                }
            });
        })
        .join();
    }
}

fn request(name: &str, labels: &BTreeMap<String, String>, ro: &std::path::Path) -> CreateRequest {
    CreateRequest {
        gvisor: false,
        nproc: None,
        name: name.into(),
        image: IMAGE.into(),
        entrypoint: vec!["/bin/agent.sh".into()],
        cmd: vec![],
        env: BTreeMap::from([("ATEAM_READ_DIRS".to_string(), "/ro".to_string())]),
        user: "1000:1000".into(),
        workdir: "/ro".into(),
        mounts: vec![Mount {
            source: ro.to_path_buf(),
            target: "/ro".into(),
            read_only: true,
        }],
        tmpfs: BTreeMap::from([("/tmp".to_string(), "rw,nosuid,nodev,size=16m".to_string())]),
        memory_bytes: 64 << 20,
        memory_swap_bytes: 64 << 20,
        pids: 64,
        nano_cpus: Some(500_000_000),
        network_none: true,
        network_name: None,
        labels: labels.clone(),
        cap_drop_all: true,
        no_new_privileges: true,
        read_only_rootfs: true,
        init: true,
        userns_keep_id: false,
        cgroupns_private: true,
        terminal: false,
    }
}

fn ro_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod 0755");
    std::fs::write(dir.path().join("seen"), "hello").expect("write a file");
    dir
}

async fn wait_running(b: &DockerBackend, id: &str) {
    for _ in 0..50 {
        if b.inspect(id).await.expect("inspect").summary.state == ContainerState::Running {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{id} never ran");
}

#[tokio::test]
#[ignore = "needs a Docker engine: scripts/engines.sh"]
async fn ping_reports_the_engine() {
    let info = backend().await.ping().await.expect("ping");
    assert_eq!(info.kind, EngineKind::Docker);
    assert!(!info.version.is_empty(), "{info:?}");
    // Negotiated down to the daemon's own version (20.10 -> 1.41), never bollard's default.
    let (major, minor) = info.api_version.split_once('.').expect("x.y");
    assert_eq!(major, "1");
    assert!(minor.parse::<u32>().expect("minor") <= 53, "{info:?}");
    assert!(matches!(info.cgroup_version, 1 | 2), "{info:?}");
    assert!(
        info.limits_enforced,
        "rootful Docker enforces limits: {info:?}"
    );
}

#[tokio::test]
#[ignore = "needs a Docker engine: scripts/engines.sh"]
async fn a_hardened_container_is_created_inspected_run_and_removed() {
    let b = backend().await;
    let name = unique("life");
    let renamed = format!("{name}-renamed");
    let _cleanup = Cleanup(vec![name.clone(), renamed.clone()]);
    let dir = ro_dir();
    let labels = BTreeMap::from([
        ("ateam.test".to_string(), name.clone()),
        ("ateam.member".to_string(), "tester".to_string()),
    ]);
    let req = request(&name, &labels, dir.path());

    let id = b.create(&req).await.expect("create");
    let got = b.inspect(&id).await.expect("inspect");
    let e = &got.effective;
    // Docker's own lists of hidden kernel paths, as reported; the policy checks them.
    assert!(
        e.masked_paths
            .as_ref()
            .is_some_and(|m| m.iter().any(|p| p == "/proc/kcore")),
        "{:?}",
        e.masked_paths
    );
    let expected = Effective {
        runtime: "runc".into(),
        image: IMAGE.into(),
        entrypoint: vec!["/bin/agent.sh".into()],
        cmd: vec![],
        security_opt: vec!["no-new-privileges".into()],
        apparmor_profile: e.apparmor_profile.clone(),
        masked_paths: e.masked_paths.clone(),
        readonly_paths: e.readonly_paths.clone(),
        sysctls: vec![],
        cgroup_parent: String::new(),
        oom_kill_disable: false,
        device_cgroup_rules: vec![],
        user: "1000:1000".into(),
        privileged: false,
        cap_add: vec![],
        cap_drop_all: true,
        no_new_privileges: true,
        read_only_rootfs: true,
        init: true,
        network_mode: "none".into(),
        networks: vec![],
        bind_mounts: vec![Mount {
            source: dir.path().to_path_buf(),
            target: PathBuf::from("/ro"),
            read_only: true,
        }],
        tmpfs: BTreeMap::from([("/tmp".to_string(), "rw,nosuid,nodev,size=16m".to_string())]),
        other_mounts: vec![],
        memory_bytes: 64 << 20,
        memory_swap_bytes: 64 << 20,
        pids_limit: 64,
        nano_cpus: 500_000_000,
        restart_policy: "no".into(),
        devices: vec![],
        group_add: vec![],
        namespaces: [
            ("pid", ""),
            ("ipc", "private"),
            ("uts", ""),
            ("userns", ""),
            ("cgroupns", "private"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        published_ports: vec![],
    };
    assert_eq!(e.user, expected.user);
    assert_eq!(e.privileged, expected.privileged);
    assert_eq!(e.cap_add, expected.cap_add);
    assert_eq!(e.cap_drop_all, expected.cap_drop_all);
    assert_eq!(e.no_new_privileges, expected.no_new_privileges);
    assert_eq!(e.read_only_rootfs, expected.read_only_rootfs);
    assert_eq!(e.init, expected.init);
    assert_eq!(e.network_mode, expected.network_mode);
    assert_eq!(e.bind_mounts, expected.bind_mounts);
    assert_eq!(e.tmpfs, expected.tmpfs);
    assert_eq!(e.other_mounts, expected.other_mounts);
    assert_eq!(e.memory_bytes, expected.memory_bytes);
    assert_eq!(e.memory_swap_bytes, expected.memory_swap_bytes);
    assert_eq!(e.pids_limit, expected.pids_limit);
    assert_eq!(e.nano_cpus, expected.nano_cpus);
    assert_eq!(e.restart_policy, expected.restart_policy);
    assert_eq!(e.devices, expected.devices);
    assert_eq!(e.group_add, expected.group_add);
    assert_eq!(e.namespaces, expected.namespaces);
    assert_eq!(e.published_ports, expected.published_ports);
    assert_eq!(*e, expected);
    assert_eq!(got.summary.id, id);
    assert_eq!(got.summary.name, name);
    // The image's own labels come along (Docker merges them in): ours must all be there.
    assert!(
        labels
            .iter()
            .all(|(k, v)| got.summary.labels.get(k) == Some(v)),
        "{:?}",
        got.summary.labels
    );
    assert!(got.summary.labels.contains_key("ateam.demo.sha256"));
    assert_eq!(got.summary.state, ContainerState::Created);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    assert!(
        (now - got.summary.created).abs() < 120,
        "created {} vs now {now}",
        got.summary.created
    );
    assert_eq!(got.pid, None);
    assert_eq!(got.image, IMAGE);
    assert_eq!(got.started_at, None);

    b.start(&id).await.expect("start");
    b.start(&id)
        .await
        .expect("starting a running container is fine");
    wait_running(&b, &id).await;
    let running = b.inspect(&id).await.expect("inspect running");
    assert!(running.pid.is_some_and(|p| p > 1), "{:?}", running.pid);
    assert!(running.started_at.is_some());
    assert_eq!(running.restart_count, 0);

    let out = b
        .exec(&id, &["id".into(), "-u".into()])
        .await
        .expect("exec id");
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), "1000", "{out:?}");
    let out = b
        .exec(&id, &["touch".into(), "/ro/x".into()])
        .await
        .expect("exec touch");
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("Read-only"), "{out:?}");
    assert!(!dir.path().join("x").exists());
    let out = b
        .exec(
            &id,
            &[
                "sh".into(),
                "-c".into(),
                "echo out; echo err >&2; exit 3".into(),
            ],
        )
        .await
        .expect("exec sh");
    assert_eq!(
        out,
        ExecOutput {
            code: 3,
            stdout: "out\n".into(),
            stderr: "err\n".into()
        }
    );

    let mut logs = String::new();
    for _ in 0..50 {
        logs = super::super::logs_text(&b, &id, 100).await.expect("logs");
        if logs.contains("agent: sleeping") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(logs.contains("agent: started as uid=1000"), "{logs}");
    assert!(logs.contains("read dir /ro (read-only): seen"), "{logs}");
    let last = super::super::logs_text(&b, &id, 1)
        .await
        .expect("logs tail 1");
    assert_eq!(last.lines().count(), 1, "{last}");

    let listed = b.list(&labels).await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, id);
    assert_eq!(listed[0].name, name);
    assert_eq!(listed[0].labels, got.summary.labels);
    assert_eq!(listed[0].state, ContainerState::Running);
    assert_eq!(listed[0].created, got.summary.created);
    let one_label = BTreeMap::from([("ateam.test".to_string(), name.clone())]);
    assert_eq!(b.list(&one_label).await.expect("list").len(), 1);
    let wrong = BTreeMap::from([
        ("ateam.test".to_string(), name.clone()),
        ("ateam.member".to_string(), "someone-else".to_string()),
    ]);
    assert!(b.list(&wrong).await.expect("list").is_empty());

    let found = b.find_by_name(&name).await.expect("find").expect("found");
    assert_eq!(found.id, id);
    // The name filter is a regex and a substring: neither a prefix nor a `.` matches.
    assert!(
        b.find_by_name(&name[..name.len() - 1])
            .await
            .expect("find")
            .is_none()
    );
    assert!(
        b.find_by_name(&name.replacen('-', ".", 1))
            .await
            .expect("find")
            .is_none()
    );

    match b.create(&req).await {
        Err(BackendError::NameConflict { name: n }) => assert_eq!(n, name),
        other => panic!("expected NameConflict, got {other:?}"),
    }

    b.stop(&id, 10).await.expect("stop");
    b.stop(&id, 10)
        .await
        .expect("stopping a stopped container is fine");
    let stopped = b.inspect(&id).await.expect("inspect stopped");
    // The agent exits 0 on SIGTERM: a quick stop, not a kill.
    assert_eq!(stopped.summary.state, ContainerState::Exited { code: 0 });
    assert_eq!(stopped.pid, None);
    let listed = b.list(&labels).await.expect("list stopped");
    assert_eq!(listed[0].state, ContainerState::Exited { code: 0 });

    b.rename(&id, &renamed).await.expect("rename");
    assert_eq!(b.inspect(&id).await.expect("inspect").summary.name, renamed);
    assert!(b.find_by_name(&name).await.expect("find").is_none());

    b.remove(&id).await.expect("remove");
    match b.inspect(&id).await {
        Err(BackendError::NotFound { id: gone }) => assert_eq!(gone, id),
        other => panic!("expected NotFound, got {other:?}"),
    }
    b.remove(&id).await.expect("removing what is gone is fine");
    assert!(matches!(
        b.start(&id).await,
        Err(BackendError::NotFound { .. })
    ));
}

#[tokio::test]
#[ignore = "needs a Docker engine: scripts/engines.sh"]
async fn an_exited_container_lists_with_its_exit_code() {
    let b = backend().await;
    let name = unique("exit");
    let _cleanup = Cleanup(vec![name.clone()]);
    let dir = ro_dir();
    let labels = BTreeMap::from([("ateam.test".to_string(), name.clone())]);
    let mut req = request(&name, &labels, dir.path());
    req.entrypoint = vec!["/bin/sh".into(), "-c".into(), "exit 7".into()];
    let id = b.create(&req).await.expect("create");
    b.start(&id).await.expect("start");
    let mut state = ContainerState::Created;
    for _ in 0..50 {
        state = b.list(&labels).await.expect("list")[0].state;
        if matches!(state, ContainerState::Exited { .. }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state, ContainerState::Exited { code: 7 });
    assert_eq!(
        b.inspect(&id).await.expect("inspect").summary.state,
        ContainerState::Exited { code: 7 }
    );
}

#[tokio::test]
#[ignore = "needs a Docker engine: scripts/engines.sh"]
async fn the_demo_image_command_is_the_agent() {
    let b = backend().await;
    assert_eq!(
        b.image_command(IMAGE).await.expect("image command"),
        ["/bin/agent.sh"]
    );
}

#[tokio::test]
#[ignore = "needs a Docker engine: scripts/engines.sh"]
async fn a_missing_image_is_never_pulled() {
    let b = backend().await;
    let missing = "ateam-test-no-such-image:latest";
    match b.image_command(missing).await {
        Err(BackendError::ImageMissing { engine, image }) => {
            assert_eq!((engine.as_str(), image.as_str()), ("docker", missing))
        }
        other => panic!("expected ImageMissing, got {other:?}"),
    }
    let name = unique("noimage");
    let _cleanup = Cleanup(vec![name.clone()]);
    let dir = ro_dir();
    let mut req = request(&name, &BTreeMap::new(), dir.path());
    req.image = missing.into();
    match b.create(&req).await {
        Err(BackendError::ImageMissing { image, .. }) => assert_eq!(image, missing),
        other => panic!("expected ImageMissing, got {other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs a Docker engine: scripts/engines.sh"]
async fn a_missing_bind_source_fails_instead_of_being_created() {
    let b = backend().await;
    let name = unique("nosource");
    let _cleanup = Cleanup(vec![name.clone()]);
    let dir = ro_dir();
    let absent = dir.path().join("absent");
    let mut req = request(&name, &BTreeMap::new(), &absent);
    req.mounts[0].source = absent.clone();
    match b.create(&req).await {
        Err(BackendError::Engine { op, message, .. }) => {
            assert_eq!(op, "create container");
            assert!(message.contains("does not exist"), "{message}");
        }
        other => panic!("expected an engine error, got {other:?}"),
    }
    assert!(!absent.exists(), "Docker created the missing bind source");
}

#[tokio::test]
#[ignore = "needs a Docker engine: scripts/engines.sh"]
async fn events_report_a_start() {
    let b = backend().await;
    let name = unique("events");
    let _cleanup = Cleanup(vec![name.clone()]);
    let dir = ro_dir();
    let labels = BTreeMap::from([("ateam.test".to_string(), name.clone())]);
    let id = b
        .create(&request(&name, &labels, dir.path()))
        .await
        .expect("create");
    // Subscribe, act, and only then poll: nothing in between may be lost.
    let mut events = b.events(&labels).await.expect("events");
    b.start(&id).await.expect("start");
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = events.next().await {
            if ev.expect("event").id == id {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "no event for {id}");
    // Other labels see nothing of it.
    let other = BTreeMap::from([("ateam.test".to_string(), format!("{name}-other"))]);
    let mut quiet = b.events(&other).await.expect("events");
    b.stop(&id, 5).await.expect("stop");
    let nothing = tokio::time::timeout(Duration::from_secs(2), quiet.next()).await;
    assert!(nothing.is_err(), "unexpected event: {nothing:?}");
}

#[tokio::test]
async fn nothing_answering_is_unavailable_and_names_the_socket() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sock = dir.path().join("docker.sock");
    match DockerBackend::connect(&format!("unix://{}", sock.display())).await {
        Err(BackendError::Unavailable { engine, socket, .. }) => {
            assert_eq!(
                (engine.as_str(), socket),
                ("docker", sock.display().to_string())
            )
        }
        other => panic!("expected Unavailable, got {:?}", other.err()),
    }
    // Port 1 on loopback: nothing listens there.
    match DockerBackend::connect("tcp://127.0.0.1:1").await {
        Err(BackendError::Unavailable { socket, hint, .. }) => {
            assert_eq!(socket, "127.0.0.1:1");
            assert!(hint.contains("refused"), "{hint}");
        }
        other => panic!("expected Unavailable, got {:?}", other.err()),
    }
    assert!(matches!(
        DockerBackend::connect("ssh://somewhere").await,
        Err(BackendError::Engine { .. })
    ));
}

/// Everything the hardened create never sets, as Docker 20.10 reports it.
#[test]
fn an_unsafe_inspect_shows_every_difference() {
    let json = serde_json::json!({
        "Id": "abc",
        "Name": "/loose",
        "Created": "2024-02-29T12:34:56.5Z",
        "RestartCount": 2,
        "State": {"Status": "running", "Running": true, "Pid": 4242, "ExitCode": 0,
                  "StartedAt": "2024-02-29T12:35:00Z"},
        "Config": {"User": "", "Image": "x:1", "Labels": {"a": "b"},
                   "ExposedPorts": {"80/tcp": {}}},
        "HostConfig": {
            "Privileged": true, "CapAdd": ["SYS_ADMIN"], "CapDrop": ["all"],
            "SecurityOpt": ["no-new-privileges:true", "seccomp=unconfined"],
            "ReadonlyRootfs": false, "Init": null, "NetworkMode": "host",
            "Tmpfs": {"/run": ""}, "Memory": 0, "MemorySwap": -1, "PidsLimit": null,
            "NanoCpus": 0, "CpuQuota": 150000, "CpuPeriod": 100000,
            "RestartPolicy": {"Name": "always", "MaximumRetryCount": 0},
            "Devices": [{"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse",
                         "CgroupPermissions": "rwm"}],
            "GroupAdd": ["docker"], "PidMode": "host", "IpcMode": "shareable",
            "UTSMode": "host", "UsernsMode": "", "CgroupnsMode": "host",
            "PortBindings": {"22/tcp": [{"HostIp": "", "HostPort": "2222"}], "443/tcp": []},
            "PublishAllPorts": true
        },
        "Mounts": [
            {"Type": "bind", "Source": "/var/run/docker.sock",
             "Destination": "/var/run/docker.sock", "RW": true},
            {"Type": "volume", "Name": "v", "Source": "/var/lib/docker/volumes/v/_data",
             "Destination": "/data", "RW": true},
            {"Type": "tmpfs", "Source": "", "Destination": "/run", "RW": true},
            {"Type": "tmpfs", "Source": "", "Destination": "/scratch", "RW": true}
        ]
    });
    let c: ContainerInspectResponse = serde_json::from_value(json).expect("deserialize");
    let i = inspected_of(c);
    assert_eq!(
        i.effective,
        Effective {
            runtime: String::new(),
            image: "x:1".into(),
            entrypoint: vec![],
            cmd: vec![],
            security_opt: vec!["no-new-privileges:true".into(), "seccomp=unconfined".into()],
            apparmor_profile: String::new(),
            masked_paths: None,
            readonly_paths: None,
            sysctls: vec![],
            cgroup_parent: String::new(),
            oom_kill_disable: false,
            device_cgroup_rules: vec![],
            user: "".into(),
            privileged: true,
            cap_add: vec!["SYS_ADMIN".into()],
            cap_drop_all: true,
            no_new_privileges: true,
            read_only_rootfs: false,
            init: false,
            network_mode: "host".into(),
            networks: vec![],
            bind_mounts: vec![Mount {
                source: "/var/run/docker.sock".into(),
                target: "/var/run/docker.sock".into(),
                read_only: false,
            }],
            tmpfs: BTreeMap::from([
                ("/run".to_string(), String::new()),
                ("/scratch".to_string(), String::new())
            ]),
            other_mounts: vec!["volume:/var/lib/docker/volumes/v/_data:/data".into()],
            memory_bytes: 0,
            memory_swap_bytes: -1,
            pids_limit: 0,
            nano_cpus: 1_500_000_000,
            restart_policy: "always".into(),
            devices: vec!["/dev/fuse:/dev/fuse".into()],
            group_add: vec!["docker".into()],
            namespaces: [
                ("pid", "host"),
                ("ipc", "shareable"),
                ("uts", "host"),
                ("userns", ""),
                ("cgroupns", "host")
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            published_ports: vec!["22/tcp".into(), "all".into(), "exposed:80/tcp".into()],
        }
    );
    assert_eq!(i.summary.name, "loose");
    assert_eq!(i.summary.state, ContainerState::Running);
    assert_eq!(i.summary.created, 1_709_210_096);
    assert_eq!(i.pid, Some(4242));
    assert_eq!(i.image, "x:1");
    assert_eq!(i.restart_count, 2);
    assert_eq!(i.started_at.as_deref(), Some("2024-02-29T12:35:00Z"));
}

#[test]
fn dates_and_statuses_parse() {
    assert_eq!(epoch_seconds("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(
        epoch_seconds("2024-02-29T12:34:56.123456789Z"),
        Some(1_709_210_096)
    );
    assert_eq!(
        epoch_seconds("2024-02-29T14:34:56+02:00"),
        Some(1_709_210_096)
    );
    assert_eq!(epoch_seconds("0001-01-01T00:00:00Z"), Some(-62_135_596_800));
    assert_eq!(epoch_seconds("yesterday"), None);
    assert_eq!(
        exit_code_from_status("Exited (137) 3 minutes ago"),
        Some(137)
    );
    assert_eq!(
        exit_code_from_status("Exited (0) Less than a second ago"),
        Some(0)
    );
    assert_eq!(exit_code_from_status("Up 3 minutes"), None);
    assert_eq!(regex_escape("a.b-c_1"), "a\\.b\\-c\\_1");
    assert_eq!(
        primary_name(&["/web/db".into(), "/db".into()]),
        "db".to_string()
    );
}
