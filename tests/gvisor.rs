//! `runtime: gvisor` on Docker, rootful and rootless Podman: the member runs in a gVisor
//! sandbox (its kernel says so, the engine names runsc), it is checked at its gate and
//! released, its processes are bounded by its `pids` though the host's cgroup does not count
//! them, they are not on the host's process list, its egress proxy allows exactly what it
//! allows; an engine that cannot run gVisor refuses it before anything is made, and a runc
//! member on a Podman service that runs gVisor is refused by the policy. The real binary,
//! judged from outside (the engine's CLI, the host's /proc, the files) and from inside
//! (busybox in the member). Ignored by a plain `cargo test`.
//!
//! The attack suites run under gVisor too (their `*_gvisor` modules), as do suspend, resume
//! and fork (tests/suspend.rs).

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

#[macro_use]
mod common;
use common::{Engine, text};

/// A team whose member `a` writes `work`, reaches `127.0.0.1:<allowed>` alone and may have
/// 40 processes; `runtime` is the Team's line (`common::World::write` adds `runtime: gvisor`
/// under a `_gvisor` module when the Team names none).
fn world(engine: Engine, tag: &str, allowed: u16, runtime: &str) -> common::World {
    let w = common::World::new(engine, "gvisor", tag);
    w.dirs(&["work", "state", "sessions"]);
    w.give(&["", "work", "state", "sessions"]);
    if w.rootless_person().is_none() {
        std::os::unix::fs::chown(w.path("work"), Some(65534), Some(65534)).unwrap();
    }
    let yaml = format!(
        r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true{runtime}}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g}}
spec: {{write: [./work], network: {{allow: ["127.0.0.1:{allowed}"]}}}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: a}}
spec: {{parent: lead, access: g, command: [sleep, "100000"], resources: {{memory: 64Mi, pids: 40}}}}
"#,
        team = w.team
    );
    w.write("team.yaml", &yaml);
    w
}

/// stdout and stderr of a shell script run inside member `a`, as the member.
fn inside(w: &common::World, script: &str) -> String {
    let out = w.ateam(&["exec", "a", "--team", &w.team, "--", "sh", "-c", script]);
    format!(
        "{}{}[exit {:?}]",
        text(&out.stdout),
        text(&out.stderr),
        out.status.code()
    )
}

/// What the engine says of the member's container, by a Go template.
fn engine_says(w: &common::World, format: &str) -> String {
    let name = format!("ateam_{}_a", w.team);
    let out = w
        .engine_cli()
        .args(["inspect", "--format", format, &name])
        .output()
        .unwrap();
    text(&out.stdout).trim().to_string()
}

/// Whether a process with exactly this command line runs on the host.
fn on_the_host(cmdline: &[&str]) -> bool {
    let want: Vec<u8> = cmdline
        .iter()
        .flat_map(|w| [w.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .any(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
}

/// The member runs under gVisor, released by its gate, and is everything a member is.
fn a_member_runs_in_a_sandbox_checked_at_its_gate(engine: Engine) {
    let allowed = common::serve("allowed-answer");
    let w = world(engine, "run", allowed, "");
    let doctor = text(&w.ateam(&["doctor", "-f", "team.yaml"]).stdout);
    assert!(
        doctor
            .lines()
            .any(|l| l.starts_with("ok") && l.contains("gvisor")),
        "{engine:?}: {doctor}"
    );
    w.ok(&["apply", "-f", "team.yaml"]);
    // The engine made it with gVisor's runtime, and its kernel is gVisor's.
    let runtime = match engine {
        Engine::Docker => engine_says(&w, "{{.HostConfig.Runtime}}"),
        Engine::Podman | Engine::Rootless => engine_says(&w, "{{.OCIRuntime}}"),
    };
    assert!(runtime.ends_with("runsc"), "{engine:?}: runtime {runtime}");
    let kernel = inside(&w, "uname -r; dmesg 2>/dev/null | head -1");
    assert!(
        kernel.starts_with("4.4.0\n") && kernel.contains("gVisor"),
        "{engine:?}: not gVisor's kernel: {kernel}"
    );
    // Released, no drift: status says running and exits 0.
    let status = w.ateam(&["status", &w.team, "--exit-code"]);
    assert_eq!(
        status.status.code(),
        Some(0),
        "{engine:?}: {}{}",
        text(&status.stdout),
        text(&status.stderr)
    );
    // No capabilities, the member's uid, as the Sentry has them.
    let creds = inside(&w, "grep -E '^(Uid|CapEff|CapBnd):' /proc/1/status");
    let (uid, _) = w.rootless_person().unwrap_or((65534, 65534));
    assert!(
        creds.contains(&format!("Uid:\t{uid}\t")) && creds.matches("0000000000000000").count() == 2,
        "{engine:?}: {creds}"
    );
    // Its write reaches the grant on the host, as the member.
    let wrote = inside(&w, &format!("echo mine > {}/f", w.path("work").display()));
    assert!(wrote.ends_with("[exit Some(0)]"), "{engine:?}: {wrote}");
    let meta = std::fs::metadata(w.path("work/f")).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        uid,
        "{engine:?}"
    );
    // Its egress: the allowed endpoint answers through the proxy's socket, another is refused.
    let got = inside(
        &w,
        &format!("wget -q -O- http://127.0.0.1:{allowed}/; wget -q -O- http://127.0.0.1:1/"),
    );
    assert!(
        got.contains("allowed-answer") && got.contains("403"),
        "{engine:?}: {got}"
    );
    // A FIFO it makes in its grant stays in its sandbox: the host sees none (so none of
    // the attack suite's FIFO plants can be made from under gVisor).
    let fifo = inside(
        &w,
        &format!(
            "mkfifo {0}/p && test -p {0}/p && echo made",
            w.path("work").display()
        ),
    );
    assert!(fifo.contains("made"), "{engine:?}: {fifo}");
    let seen = std::fs::symlink_metadata(w.path("work/p"));
    assert!(
        !seen.is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type())),
        "{engine:?}: the member's FIFO is on the host"
    );
    // Its processes are the Sentry's tasks: not on the host's process list.
    let marker = format!("{}", 880000 + std::process::id() % 1000);
    let ran = inside(&w, &format!("sleep {marker} & sleep 0.5; ps -o args"));
    assert!(
        ran.contains(&format!("sleep {marker}")),
        "{engine:?}: {ran}"
    );
    assert!(
        !on_the_host(&["sleep", &marker]),
        "{engine:?}: a process under gVisor is on the host's list"
    );
}

/// The host's pids cgroup counts the sandbox's threads, not the member's processes: its
/// `pids` holds all the same (RLIMIT_NPROC, which the Sentry enforces).
fn its_pids_bound_its_processes(engine: Engine) {
    let w = world(engine, "pids", 9, "");
    w.ok(&["apply", "-f", "team.yaml"]);
    let limits = inside(&w, "grep 'Max processes' /proc/1/limits");
    assert!(
        limits.split_whitespace().nth(2) == Some("40"),
        "{engine:?}: {limits}"
    );
    // In a user namespace of its own a process would fork past RLIMIT_NPROC: the gate
    // refuses the member's command one (runsc applies no engine seccomp profile).
    let userns = inside(&w, "unshare -U true");
    assert!(
        userns.contains("Operation not permitted") && !userns.ends_with("[exit Some(0)]"),
        "{engine:?}: {userns}"
    );
    // The loop's shell gives up at the fork the limit refuses; root's `ps` (an engine exec,
    // which the member's limit does not bound) counts what runs.
    inside(&w, "for i in $(seq 1 60); do sleep 30 & done");
    let name = format!("ateam_{}_a", w.team);
    let root = |args: &[&str]| {
        let out = w
            .engine_cli()
            .args(["exec", "-u", "0", &name])
            .args(args)
            .output()
            .unwrap();
        text(&out.stdout)
    };
    let alive = root(&["ps", "-o", "args"])
        .lines()
        .filter(|l| l.trim() == "sleep 30")
        .count();
    assert!(
        (20..40).contains(&alive),
        "{engine:?}: {alive} of 60 processes ran under pids 40"
    );
    root(&["pkill", "-f", "sleep 30"]);
    // The sandbox lives on: its member still answers.
    let still = inside(&w, "echo still-here");
    assert!(still.contains("still-here"), "{engine:?}: {still}");
}

/// A Podman service that runs runc cannot run a member under gVisor (Podman 4 ignores the
/// runtime a create names): apply says so, with what to do, and makes nothing.
fn an_engine_without_gvisor_refuses_before_anything_is_made(engine: Engine) {
    let w = world(engine, "none", 9, ", runtime: gvisor");
    let out = w.ateam(&["apply", "-f", "team.yaml"]);
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{engine:?}: {err}");
    assert!(
        err.contains("runtime `gvisor` cannot run on podman")
            && err.contains("--runtime runsc")
            && err.contains("nothing was changed"),
        "{engine:?}: {err}"
    );
    // `doctor` says the same, as a failed check.
    let doctor = text(&w.ateam(&["doctor", "-f", "team.yaml"]).stdout);
    assert!(
        doctor.lines().any(|l| l.starts_with("FAIL")
            && l.contains("gvisor")
            && l.contains("--runtime runsc")),
        "{engine:?}: {doctor}"
    );
    let label = format!("label=ateam.dev/team={}", w.team);
    let made = w
        .engine_cli()
        .args(["ps", "-aq", "--filter", &label])
        .output()
        .unwrap();
    assert_eq!(
        text(&made.stdout).trim(),
        "",
        "{engine:?}: a container was made"
    );
}

/// A member that says runc on a Podman service that runs gVisor gets gVisor, which is not
/// what its gate's checks are of: the policy refuses the container and removes it.
fn a_runc_member_on_a_gvisor_service_is_refused(engine: Engine) {
    let w = world(engine, "runc", 9, ", runtime: runc");
    let out = w.ateam(&["apply", "-f", "team.yaml"]);
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{engine:?}: {err}");
    assert!(
        err.contains("runtime: expected runc, found /usr/bin/runsc"),
        "{engine:?}: {err}"
    );
    let label = format!("label=ateam.dev/team={}", w.team);
    let running = w
        .engine_cli()
        .args(["ps", "-q", "--filter", &label])
        .output()
        .unwrap();
    assert_eq!(text(&running.stdout).trim(), "", "{engine:?}: it runs");
}

on_every_engine!(docker_gvisor:
    a_member_runs_in_a_sandbox_checked_at_its_gate,
    its_pids_bound_its_processes,
);
on_every_engine!(podman_gvisor:
    a_member_runs_in_a_sandbox_checked_at_its_gate,
    its_pids_bound_its_processes,
    a_runc_member_on_a_gvisor_service_is_refused,
);
on_every_engine!(rootless_podman_gvisor:
    a_member_runs_in_a_sandbox_checked_at_its_gate,
    its_pids_bound_its_processes,
    a_runc_member_on_a_gvisor_service_is_refused,
);
// The engines' own services, which run runc.
on_every_engine!(podman: an_engine_without_gvisor_refuses_before_anything_is_made);
on_every_engine!(rootless_podman: an_engine_without_gvisor_refuses_before_anything_is_made);
