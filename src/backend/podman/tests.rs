use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use super::{
    create::{create_body, transient},
    inspect::inspected_of,
};
use crate::backend::{Backend, BackendError, CreateRequest, EngineKind};
use crate::core::container::{ContainerState, Effective, Mount};
use containers_api::conn::hyper::StatusCode;
use futures_util::FutureExt;
use futures_util::StreamExt;
use podman_api::models::ContainerInspectResponseLibpod;
use podman_api::opts::ContainerListOpts;
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use std::panic::AssertUnwindSafe;
use std::path::Path;

const MIB64: u64 = 64 * 1024 * 1024;

#[tokio::test(start_paused = true)]
async fn only_the_subid_race_is_tried_again() {
    let fault = |m: &str| podman_api::Error::Fault {
        code: StatusCode::INTERNAL_SERVER_ERROR,
        message: m.into(),
    };
    let tries = std::cell::Cell::new(0);
    let got = transient(|| {
        tries.set(tries.get() + 1);
        let n = tries.get();
        async move {
            if n < 3 {
                Err(fault("keep-id requires additional UIDs or GIDs defined in /etc/subuid and /etc/subgid"))
            } else {
                Ok(n)
            }
        }
    })
    .await;
    assert_eq!(got.unwrap(), 3);
    // Any other error: at once, once.
    tries.set(0);
    let got: std::result::Result<(), _> = transient(|| {
        tries.set(tries.get() + 1);
        async { Err(fault("image not known")) }
    })
    .await;
    assert!(got.is_err());
    assert_eq!(tries.get(), 1);
    // The race for good: four tries, then its error.
    tries.set(0);
    let got: std::result::Result<(), _> = transient(|| {
        tries.set(tries.get() + 1);
        async { Err(fault("cannot read subids")) }
    })
    .await;
    assert!(got.is_err());
    assert_eq!(tries.get(), 4);
}

fn request(name: &str, image: &str, user: &str, ro: &Path, rw: &Path, run: &str) -> CreateRequest {
    let mut mounts = vec![Mount::same(ro, true), Mount::same(rw, false)];
    mounts.sort();
    CreateRequest {
        gvisor: false,
        nproc: None,
        name: name.into(),
        image: image.into(),
        entrypoint: vec!["/bin/sh".into(), "-c".into()],
        cmd: vec![format!("echo hello-from-{run}; exec sleep 300")],
        env: BTreeMap::from([("ATEAM_TEST".into(), "1".into())]),
        user: user.into(),
        workdir: "/tmp".into(),
        mounts,
        tmpfs: BTreeMap::from([("/tmp".into(), "rw,nosuid,nodev,size=16m".into())]),
        memory_bytes: MIB64,
        memory_swap_bytes: MIB64,
        pids: 64,
        nano_cpus: Some(500_000_000),
        network_none: true,
        network_name: None,
        labels: BTreeMap::from([("ateam.test.run".into(), run.into())]),
        cap_drop_all: true,
        no_new_privileges: true,
        read_only_rootfs: true,
        init: true,
        userns_keep_id: false,
        cgroupns_private: true,
        terminal: false,
    }
}

#[test]
fn create_body_spells_every_hardening_key() {
    let mut req = request(
        "n",
        "img",
        "1000:1000",
        Path::new("/a"),
        Path::new("/b"),
        "r",
    );
    req.userns_keep_id = true;
    let b = create_body(&req);
    assert_eq!(b["no_new_privileges"], json!(true));
    assert!(b.get("no_new_privilages").is_none());
    assert_eq!(b["cap_drop"], json!(["ALL"]));
    assert_eq!(b["read_only_filesystem"], json!(true));
    assert_eq!(b["init"], json!(true));
    assert_eq!(b["netns"], json!({"nsmode": "none"}));
    assert_eq!(b["userns"], json!({"nsmode": "keep-id"}));
    assert_eq!(b["cgroupns"], json!({"nsmode": "private"}));
    assert_eq!(b["restart_policy"], json!("no"));
    assert_eq!(
        b["resource_limits"],
        json!({
            "memory": {"limit": MIB64, "swap": MIB64},
            "pids": {"limit": 64},
            "cpu": {"quota": 50_000, "period": 100_000},
        })
    );
    assert_eq!(
        b["mounts"],
        json!([
            {"destination": "/a", "source": "/a", "type": "bind", "options": ["rbind", "ro", "rprivate"]},
            {"destination": "/b", "source": "/b", "type": "bind", "options": ["rbind", "rw", "rprivate"]},
            {"destination": "/tmp", "source": "tmpfs", "type": "tmpfs", "options": ["rw", "nosuid", "nodev", "size=16m"]},
        ])
    );
    assert_eq!(b["entrypoint"], json!(["/bin/sh", "-c"]));
    assert_eq!(b["work_dir"], json!("/tmp"));
}

/// While a stop waits for the process, Podman says `stopping` and `Running: false`; the
/// process, and the pid a look reads its start from, are still there.
#[test]
fn a_stopping_container_still_runs_its_pid() {
    let d: ContainerInspectResponseLibpod = serde_json::from_value(json!({
        "Id": "c1", "Name": "ateam_t_m",
        "State": {"Status": "stopping", "Running": false, "Pid": 42, "ExitCode": 0}
    }))
    .expect("parses");
    let i = inspected_of(&d);
    assert_eq!(i.summary.state, ContainerState::Running);
    assert_eq!(i.pid, Some(42));
}

#[test]
fn effective_reads_libpod_inspect() {
    // Trimmed from a real Podman 4.3.1 inspect, plus a port and a volume.
    let d: ContainerInspectResponseLibpod = serde_json::from_value(json!({
        "Id": "abc", "Name": "n", "BoundingCaps": null,
        "State": {"Status": "running", "Running": true, "Pid": 42, "ExitCode": 0,
                  "StartedAt": "2024-01-01T00:00:00Z"},
        "Config": {"User": "1000:1000", "Image": "localhost/ateam-demo:latest",
                   "Labels": {"k": "v"}},
        "Mounts": [
            {"Type": "bind", "Source": "/s", "Destination": "/d", "RW": false},
            {"Type": "volume", "Name": "vol", "Source": "/var/lib/v", "Destination": "/v", "RW": true}
        ],
        "HostConfig": {
            "CapAdd": [], "CapDrop": ["CAP_CHOWN"], "SecurityOpt": ["no-new-privileges"],
            "ReadonlyRootfs": true, "Init": true, "NetworkMode": "none",
            "Tmpfs": {"/tmp": "rw,rprivate,tmpcopyup"}, "Memory": 67108864,
            "MemorySwap": 67108864, "PidsLimit": 64, "NanoCpus": 0, "CpuQuota": 50000,
            "CpuPeriod": 100000, "RestartPolicy": {"Name": "no", "MaximumRetryCount": 0},
            "PidMode": "host", "IpcMode": "shareable", "UTSMode": "private",
            "UsernsMode": "", "CgroupMode": "private",
            "PortBindings": {"8080/tcp": null, "9090/tcp": [{"HostIp": "", "HostPort": "19090"}]}
        }
    }))
    .expect("parses");
    let i = inspected_of(&d);
    assert_eq!(i.pid, Some(42));
    assert_eq!(i.summary.state, ContainerState::Running);
    assert_eq!(i.started_at.as_deref(), Some("2024-01-01T00:00:00+00:00"));
    let e = i.effective;
    assert!(e.cap_drop_all && e.no_new_privileges && e.read_only_rootfs && e.init);
    assert_eq!(
        e.bind_mounts,
        vec![Mount {
            source: "/s".into(),
            target: "/d".into(),
            read_only: true
        }]
    );
    assert_eq!(e.other_mounts, vec!["volume:/var/lib/v:/v".to_string()]);
    assert_eq!(
        e.tmpfs,
        BTreeMap::from([("/tmp".to_string(), "rw,rprivate,tmpcopyup".to_string())])
    );
    assert_eq!(e.nano_cpus, 500_000_000);
    assert_eq!(e.namespaces["pid"], "host");
    assert_eq!(e.namespaces["cgroupns"], "private");
    assert_eq!(
        e.published_ports,
        vec![
            ":19090->9090/tcp".to_string(),
            "exposed:8080/tcp".to_string()
        ]
    );
}

/// One engine under test.
struct Target {
    uri: String,
    user: &'static str,
    uid: u32,
    rootless: bool,
}

fn target(var: &str, rootless: bool) -> Target {
    let uri = std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run scripts/engines.sh as root, then `source /run/ateam-ci/env`")
    });
    let (user, uid) = if rootless {
        ("1001:1001", 1001)
    } else {
        ("1000:1000", 1000)
    };
    Target {
        uri,
        user,
        uid,
        rootless,
    }
}

fn image() -> String {
    std::env::var("ATEAM_TEST_IMAGE").unwrap_or_else(|_| "ateam-demo:latest".into())
}

fn unique() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!("ateam-ptest-{}-{nanos}", std::process::id())
}

/// Runs `scenario` and removes everything it created, even when it fails.
async fn run(t: Target, scenario: impl AsyncFnOnce(&PodmanBackend, &Target, &str)) {
    let b = PodmanBackend::connect(&t.uri).await.expect("connect");
    let run = unique();
    let result = AssertUnwindSafe(scenario(&b, &t, &run))
        .catch_unwind()
        .await;
    let labels = BTreeMap::from([("ateam.test.run".to_string(), run.clone())]);
    for s in b.list(&labels).await.unwrap_or_default() {
        let _ = b.remove(&s.id).await;
    }
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

fn proc_status(pid: u32, key: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("{key} missing in /proc/{pid}/status"))
        .trim()
        .to_string()
}

async fn scenario(b: &PodmanBackend, t: &Target, run: &str) {
    let image = image();

    let info = b.ping().await.expect("ping");
    assert_eq!(
        info.kind,
        EngineKind::Podman {
            rootless: t.rootless
        }
    );
    assert_eq!(b.kind(), info.kind);
    assert!(
        !info.version.is_empty() && !info.api_version.is_empty(),
        "{info:?}"
    );
    assert!(matches!(info.cgroup_version, 1 | 2));
    assert_eq!(
        info.limits_enforced,
        !(t.rootless && info.cgroup_version == 1)
    );
    if t.rootless && info.cgroup_version == 1 {
        assert!(!info.limits_enforced);
    }

    let cmd = b.image_command(&image).await.expect("image_command");
    assert!(!cmd.is_empty(), "the demo image has a command");
    let missing = "localhost/ateam-no-such-image:never";
    assert!(matches!(
        b.image_command(missing).await,
        Err(BackendError::ImageMissing { .. })
    ));

    let labels = BTreeMap::from([("ateam.test.run".to_string(), run.to_string())]);
    let mut events = b.events(&labels).await.expect("events");

    let ro = tempfile::tempdir().expect("tempdir");
    let rw = tempfile::tempdir().expect("tempdir");
    for d in [ro.path(), rw.path()] {
        std::os::unix::fs::chown(d, Some(t.uid), Some(t.uid)).expect("chown");
    }
    let name = format!("{run}-a");
    let mut req = request(&name, &image, t.user, ro.path(), rw.path(), run);
    req.userns_keep_id = t.rootless;
    let id = b.create(&req).await.expect("create");

    // Created, not started.
    let i = b.inspect(&id).await.expect("inspect");
    assert_eq!(i.summary.id, id);
    assert_eq!(i.summary.name, name);
    assert_eq!(i.summary.state, ContainerState::Created);
    assert_eq!(
        i.summary.labels.get("ateam.test.run").map(String::as_str),
        Some(run)
    );
    assert!(i.summary.created > 0);
    assert_eq!(i.pid, None);
    assert_eq!(i.started_at, None);
    assert!(i.image.contains("ateam-demo"), "{}", i.image);
    // Rootless on cgroup v1 accepts the limits but ignores them: inspect shows 0.
    let limited = info.limits_enforced;
    let mut got = i.effective.clone();
    got.bind_mounts.sort();
    assert!(
        crate::core::container::ContainerRuntime::Runc.reported_as(&got.runtime),
        "{}",
        got.runtime
    );
    let want = Effective {
        // Podman names the runtime by its path where it found it.
        runtime: got.runtime.clone(),
        image: got.image.clone(),
        entrypoint: vec!["/bin/sh".into(), "-c".into()],
        cmd: req.cmd.clone(),
        security_opt: vec!["no-new-privileges".into()],
        apparmor_profile: String::new(),
        masked_paths: None,
        readonly_paths: None,
        sysctls: vec![],
        cgroup_parent: got.cgroup_parent.clone(),
        oom_kill_disable: false,
        device_cgroup_rules: vec![],
        user: t.user.into(),
        privileged: false,
        cap_add: vec![],
        cap_drop_all: true,
        no_new_privileges: true,
        read_only_rootfs: true,
        init: true,
        network_mode: "none".into(),
        networks: vec![],
        bind_mounts: req.mounts.clone(),
        tmpfs: BTreeMap::from([(
            "/tmp".to_string(),
            "rw,nosuid,nodev,size=16m,rprivate,tmpcopyup".to_string(),
        )]),
        other_mounts: vec![],
        memory_bytes: if limited { MIB64 } else { 0 },
        memory_swap_bytes: if limited { MIB64 as i64 } else { 0 },
        pids_limit: if limited { 64 } else { 0 },
        nano_cpus: if limited { 500_000_000 } else { 0 },
        restart_policy: "no".into(),
        devices: vec![],
        group_add: vec![],
        namespaces: got.namespaces.clone(),
        published_ports: vec![],
    };
    assert!(got.image.ends_with("ateam-demo:latest"), "{}", got.image);
    assert_eq!(got, want);
    let shared: Vec<_> = got
        .namespaces
        .iter()
        .filter(|(_, m)| !matches!(m.as_str(), "" | "private" | "shareable"))
        .collect();
    assert!(shared.is_empty(), "{:?}", got.namespaces);

    b.start(&id).await.expect("start");
    b.start(&id)
        .await
        .expect("starting a running container is fine");
    let i = b.inspect(&id).await.expect("inspect running");
    assert_eq!(i.summary.state, ContainerState::Running);
    assert!(i.started_at.is_some());
    let pid = i.pid.expect("a running container has a pid");
    assert_eq!(proc_status(pid, "CapBnd"), "0000000000000000");
    assert_eq!(proc_status(pid, "CapEff"), "0000000000000000");
    assert_eq!(proc_status(pid, "NoNewPrivs"), "1");

    let sh = |s: &str| vec!["/bin/sh".to_string(), "-c".to_string(), s.to_string()];
    let out = b
        .exec(&id, &["id".into(), "-u".into()])
        .await
        .expect("exec id");
    assert_eq!(
        (out.code, out.stdout.trim()),
        (0, t.uid.to_string().as_str()),
        "{out:?}"
    );

    let out = b
        .exec(&id, &sh("echo out; echo err >&2; exit 3"))
        .await
        .expect("exec streams");
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (3, "out\n", "err\n")
    );

    let ro_file = ro.path().join("x");
    let out = b
        .exec(&id, &["touch".into(), ro_file.display().to_string()])
        .await
        .expect("exec touch");
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("Read-only file system"), "{out:?}");
    assert!(!ro_file.exists());

    let rw_file = rw.path().join("f");
    let out = b
        .exec(&id, &sh(&format!("echo hi > {}", rw_file.display())))
        .await
        .expect("exec write");
    assert_eq!(out.code, 0, "{out:?}");
    let meta = std::fs::metadata(&rw_file).expect("written on the host");
    assert_eq!((meta.uid(), meta.gid()), (t.uid, t.uid));

    let out = b
        .exec(&id, &sh("echo x > /etc/x"))
        .await
        .expect("exec rootfs");
    assert_ne!(out.code, 0, "read-only rootfs: {out:?}");

    let logs = super::super::logs_text(b, &id, 10).await.expect("logs");
    assert!(logs.contains(&format!("hello-from-{run}")), "{logs:?}");

    let listed = b.list(&labels).await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, id);
    assert_eq!(listed[0].name, name);
    assert_eq!(listed[0].state, ContainerState::Running);
    let found = b.find_by_name(&name).await.expect("find").expect("found");
    assert_eq!(found.id, id);
    // Podman's name filter matches substrings: a prefix must not be taken for the name.
    assert!(b.find_by_name(run).await.expect("find").is_none());
    assert!(
        b.find_by_name(&format!("{name}x"))
            .await
            .expect("find")
            .is_none()
    );

    assert!(matches!(
        b.create(&req).await,
        Err(BackendError::NameConflict { name: n }) if n == name
    ));
    let mut other = req.clone();
    other.name = format!("{run}-b");
    other.image = missing.into();
    assert!(matches!(
        b.create(&other).await,
        Err(BackendError::ImageMissing { .. })
    ));

    b.stop(&id, 5).await.expect("stop");
    b.stop(&id, 5)
        .await
        .expect("stopping a stopped container is fine");
    let i = b.inspect(&id).await.expect("inspect stopped");
    assert!(
        matches!(i.summary.state, ContainerState::Exited { .. }),
        "{:?}",
        i.summary.state
    );
    assert_eq!(i.pid, None);

    // A process that ignores SIGTERM: stop must kill it after `timeout_secs`, not 10 s.
    let mut stubborn = req.clone();
    stubborn.name = format!("{run}-d");
    stubborn.cmd = vec!["trap '' TERM; sleep 300".into()];
    let sid = b.create(&stubborn).await.expect("create stubborn");
    b.start(&sid).await.expect("start stubborn");
    let t0 = std::time::Instant::now();
    b.stop(&sid, 1).await.expect("stop stubborn");
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(6), "stop waited {took:?}");
    assert!(matches!(
        b.inspect(&sid).await.expect("inspect").summary.state,
        ContainerState::Exited { .. }
    ));
    assert!(matches!(
        b.rename(&id, &stubborn.name).await,
        Err(BackendError::NameConflict { name: n }) if n == stubborn.name
    ));
    b.remove(&sid).await.expect("remove stubborn");

    let renamed = format!("{run}-c");
    b.rename(&id, &renamed).await.expect("rename");
    assert_eq!(b.inspect(&id).await.expect("inspect").summary.name, renamed);

    b.remove(&id).await.expect("remove");
    b.remove(&id).await.expect("removing what is gone is fine");
    assert!(matches!(
        b.inspect(&id).await,
        Err(BackendError::NotFound { .. })
    ));
    assert!(matches!(
        b.start(&id).await,
        Err(BackendError::NotFound { .. })
    ));
    assert!(b.list(&labels).await.expect("list").is_empty());

    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(ev) = events.next().await {
            if ev.expect("event").id == id {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "an event for the container");
}

#[tokio::test]
#[ignore = "needs Podman: scripts/engines.sh"]
async fn rootful_podman() {
    run(target("ATEAM_TEST_PODMAN_ROOTFUL", false), scenario).await;
}

#[tokio::test]
#[ignore = "needs Podman: scripts/engines.sh"]
async fn rootless_podman() {
    run(target("ATEAM_TEST_PODMAN_ROOTLESS", true), scenario).await;
}

/// An exec into a member and a `ps --sync` (which `podman rm -f` of anything also does)
/// change nothing: their events must not reach the controller, or a crowd of 200 is looked
/// at 200 times for nothing. The next event that does is the first one seen.
async fn quiet_scenario(b: &PodmanBackend, t: &Target, run: &str) {
    let (ro, rw) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    for d in [ro.path(), rw.path()] {
        std::os::unix::fs::chown(d, Some(t.uid), Some(t.uid)).expect("chown");
    }
    let mut req = request(
        &format!("{run}-a"),
        &image(),
        t.user,
        ro.path(),
        rw.path(),
        run,
    );
    req.userns_keep_id = t.rootless;
    let a = b.create(&req).await.expect("create a");
    b.start(&a).await.expect("start a");
    // Past the second of a's own events: the stream replays from the second it starts in.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let labels = BTreeMap::from([("ateam.test.run".to_string(), run.to_string())]);
    let mut events = b.events(&labels).await.expect("events");
    let out = b.exec(&a, &["true".into()]).await.expect("exec");
    assert_eq!(out.code, 0, "{out:?}");
    let synced = ContainerListOpts::builder().all(true).sync(true).build();
    b.podman
        .containers()
        .list(&synced)
        .await
        .expect("ps --sync");
    req.name = format!("{run}-b");
    let marker = b.create(&req).await.expect("create b");
    let first = tokio::time::timeout(Duration::from_secs(20), events.next()).await;
    match first {
        Ok(Some(Ok(ev))) => assert_eq!(ev.id, marker, "a quiet event got through: {ev:?}"),
        other => panic!("no event for the marker: {other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs Podman: scripts/engines.sh"]
async fn rootful_podman_quiet_events() {
    run(target("ATEAM_TEST_PODMAN_ROOTFUL", false), quiet_scenario).await;
}

#[tokio::test]
#[ignore = "needs Podman: scripts/engines.sh"]
async fn rootless_podman_quiet_events() {
    run(target("ATEAM_TEST_PODMAN_ROOTLESS", true), quiet_scenario).await;
}
