//! Attacks on what ateam's own per-member processes cost the host and what they hold
//! (docs/security.md, 9d): a member floods its egress proxy and its helper server with idle
//! connections (each socket is mounted into it, so it can open as many as it likes), runs its
//! bridge out of descriptors, and ateam's environment, `secretEnv` values included, must not
//! reach either process. On
//! Docker, rootful Podman and rootless Podman (ateam then runs as the unprivileged user,
//! through runuser). ateam runs with a soft descriptor limit of 1024, systemd's default for
//! services and sessions (the rootless user's login here has that already). Ignored by a
//! plain `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Engine, rootless_user, text};

/// Idle connections a member opens at once (the issue's measurement).
const FLOOD: usize = 1100;
/// How long the proxy's CPU is watched while the flood holds.
const WATCH: Duration = Duration::from_secs(5);
/// The share of one core the proxy or helper server may take meanwhile.
const MAX_CPU: f64 = 0.20;
/// The variable named by the member's `secretEnv`.
const SECRET_VAR: &str = "EGRESS_ATTACK_TOKEN";

/// A web server on the host's loopback that answers every request with `body`.
fn serve(body: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = c.read(&mut buf);
                let _ = write!(
                    c,
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

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
    /// A team with helper requests whose member `a` may reach `127.0.0.1:<port>` and gets
    /// `SECRET_VAR`; applied with `secret` in ateam's environment.
    fn applied(engine: Engine, tag: &str, port: u16, secret: &str) -> World {
        World::applied_allowing(engine, tag, &format!("\"127.0.0.1:{port}\""), secret)
    }

    /// The same team, its grant allowing `allow` (YAML flow items).
    fn applied_allowing(engine: Engine, tag: &str, allow: &str, secret: &str) -> World {
        let w = World(common::World::new(
            engine,
            "attack-egress",
            &format!("{tag}-"),
        ));
        w.dirs(&["work", "state", "sessions"]);
        let yaml = format!(
            r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true, helperRequests: true, maxMembers: 3}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: net}}
spec: {{read: [./work], network: {{allow: [{allow}]}}}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: a}}
spec: {{parent: lead, access: net, command: [sleep, "100000"], secretEnv: [{SECRET_VAR}], resources: {{memory: 64Mi, pids: 64}}}}
"#,
            team = w.team
        );
        let yaml = if common::gvisor() {
            common::with_gvisor(&yaml)
        } else {
            yaml.to_string()
        };
        std::fs::write(w.manifest(), yaml).unwrap();
        w.give(&["", "work", "state", "sessions", "team.yaml"]);
        let out = w.ateam(&["apply", "-f", w.manifest().to_str().unwrap()], secret);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{engine:?}: apply failed:\n{}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        w
    }

    fn manifest(&self) -> PathBuf {
        self.root().join("team.yaml")
    }

    /// ateam as the engine's user, with `SECRET_VAR=secret` and another variable in its
    /// environment, under a soft descriptor limit of 1024.
    fn ateam(&self, args: &[&str], secret: &str) -> Output {
        let base = common::ateam_command(self.engine, &self.root().join("state"));
        let bin = common::ateam_bin();
        let mut extra: Vec<String> = vec![
            format!("{SECRET_VAR}={secret}"),
            "ATEAM_TEST_UNRELATED=also-not-for-the-proxy".into(),
        ];
        extra.extend(["prlimit", "--nofile=1024:", "--"].map(String::from));
        let mut c = if self.engine == Engine::Rootless {
            // runuser -u U -- env -i VARS... BIN --backend podman: the variables and prlimit
            // go just before the binary.
            let mut c = Command::new(base.get_program());
            for a in base.get_args() {
                if a.to_str() == Some(bin.as_str()) {
                    c.args(&extra);
                }
                c.arg(a);
            }
            c
        } else {
            let mut c = Command::new(&extra[2]);
            c.args(&extra[3..])
                .arg(base.get_program())
                .args(base.get_args());
            for (k, v) in base.get_envs() {
                match v {
                    Some(v) => c.env(k, v),
                    None => c.env_remove(k),
                };
            }
            c.env(SECRET_VAR, secret)
                .env("ATEAM_TEST_UNRELATED", "also-not-for-the-proxy");
            c
        };
        c.args(args)
            .current_dir(self.root())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn inside(&self, script: &str) -> String {
        let out = self.ateam(
            &["exec", "a", "--team", &self.team, "--", "sh", "-c", script],
            "-",
        );
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    }

    fn member_dir(&self) -> PathBuf {
        self.root()
            .join("state/teams")
            .join(&self.team)
            .join("members/a")
    }

    fn pid(&self, file: &str) -> i32 {
        let path = self.member_dir().join(file);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{:?}: {}: {e}", self.engine, path.display()))
            .trim()
            .parse()
            .unwrap()
    }
}

/// CPU time (user + system) of `pid`, in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5), counted from the state (field 3).
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn ticks_per_second() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    text(&out.stdout).trim().parse().unwrap()
}

/// Opens up to `n` connections to `socket` without blocking. The listener's backlog is
/// 128: a connect past it fails (`EAGAIN`) until the server accepts, which a server at nice
/// 10 on a loaded machine does late. Such a connect is tried again while the server keeps
/// accepting; a listener that accepts nothing more for 2 s ends the flood there.
fn flood(socket: &Path, n: usize) -> Vec<OwnedFd> {
    use rustix::io::Errno;
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    // This test's own descriptors: as many as its hard limit allows.
    let files = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: files.maximum,
            ..files
        },
    );
    let addr = SocketAddrUnix::new(socket).unwrap();
    let mut out = Vec::new();
    let mut progress = Instant::now();
    while out.len() < n && progress.elapsed() < Duration::from_secs(2) {
        let Ok(fd) = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        ) else {
            break;
        };
        match rustix::net::connect(&fd, &addr) {
            Ok(()) => {
                out.push(fd);
                progress = Instant::now();
            }
            Err(Errno::AGAIN) => std::thread::sleep(Duration::from_millis(1)),
            Err(_) => break,
        }
    }
    out
}

/// The share of a core `pid` used over `WATCH`.
fn cpu_share(pid: i32) -> f64 {
    let before = cpu_ticks(pid);
    std::thread::sleep(WATCH);
    (cpu_ticks(pid) - before) as f64 / ticks_per_second() / WATCH.as_secs_f64()
}

/// What the last connection of a flood got within 10 s: a connection over the bound is
/// answered as soon as the proxy (at nice 10, on a loaded machine) accepts it, not left
/// hanging.
fn answer_to(fd: OwnedFd) -> String {
    let mut s = std::os::unix::net::UnixStream::from(fd);
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).unwrap_or(0);
    text(&buf[..n])
}

/// /proc/<pid>/limits' soft and hard limit of open files, and the nice value.
fn files_and_nice(pid: i32) -> (String, String, i64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let nice = after.split_whitespace().nth(16).unwrap().parse().unwrap();
    (f[3].into(), f[4].into(), nice)
}

/// 1,100 idle connections to the egress proxy, then to the helper server: neither spins
/// (under 20 % of a core over 5 s), connections over the proxy's bound are answered 503 at
/// once, and once they close the member's egress works again.
fn a_flood_of_idle_connections_costs_the_host_no_cpu(engine: Engine) {
    let port = serve("still-reachable");
    let w = World::applied(engine, "flood", port, "-");
    let proxy = w.pid("egress/proxy.pid");
    let server = w.pid("helpers/server.pid");
    let mut wrong = Vec::new();
    for (what, pid) in [("proxy", proxy), ("helper server", server)] {
        let (soft, hard, nice) = files_and_nice(pid);
        if soft != hard || nice != 10 {
            wrong.push(format!(
                "{what}: open files {soft}/{hard}, nice {nice}: wanted the hard limit and 10"
            ));
        }
    }
    let mut conns = flood(&w.member_dir().join("ctl/egress.sock"), FLOOD);
    if conns.len() < FLOOD {
        wrong.push(format!(
            "the proxy stopped accepting after {} connections, below the flood's {FLOOD}",
            conns.len()
        ));
    }
    std::thread::sleep(Duration::from_secs(1));
    let share = cpu_share(proxy);
    if share > MAX_CPU {
        wrong.push(format!(
            "the proxy used {:.0} % of a core with {} idle connections",
            share * 100.0,
            conns.len()
        ));
    }
    let last = answer_to(conns.pop().unwrap());
    if !last.starts_with("HTTP/1.1 503") {
        wrong.push(format!("a connection over the bound got `{last}`"));
    }
    drop(conns);
    let out = w.ateam(&["logs", "a", "--team", &w.team, "--egress"], "-");
    if !text(&out.stdout).contains("connections at once") {
        wrong.push(format!(
            "the refusals are not in the log: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        ));
    }
    let conns = flood(&w.member_dir().join("ctl/helpers.sock"), FLOOD);
    std::thread::sleep(Duration::from_secs(1));
    let share = cpu_share(server);
    if share > MAX_CPU {
        wrong.push(format!(
            "the helper server used {:.0} % of a core with {} idle connections",
            share * 100.0,
            conns.len()
        ));
    }
    drop(conns);
    // Both floods are closed now; the proxy frees their places as it sees the connections go,
    // in its own time on a loaded machine: ask again until egress gets through (for up to a
    // minute), not once after a fixed pause.
    let mut got = String::new();
    common::eventually(Duration::from_secs(60), || {
        got = w.inside(&format!("wget -q -O - http://127.0.0.1:{port}/ 2>&1"));
        got.contains("still-reachable")
    });
    if !got.contains("still-reachable") {
        wrong.push(format!("after the flood, egress: {got}"));
    }
    assert!(wrong.is_empty(), "{engine:?}:\n{}", wrong.join("\n"));
}

/// ateam's environment holds a `secretEnv` value (and other variables): the member gets its
/// secret, and neither its egress proxy nor its helper server holds that value or any
/// variable it does not need.
fn secrets_never_reach_the_proxy_or_the_helper_server(engine: Engine) {
    let marker = format!("marker-{}-{}", std::process::id(), engine as u8);
    let w = World::applied(engine, "secret", serve("unused"), &marker);
    // The member's command (the gate execs it with its secrets) has it.
    let got = w.inside("for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>&1");
    assert!(
        got.contains(&marker),
        "{engine:?}: the member lacks its secret: {got}"
    );
    let mut wrong = Vec::new();
    for (what, file, allowed) in [
        ("proxy", "egress/proxy.pid", &["RUST_LOG"][..]),
        (
            "helper server",
            "helpers/server.pid",
            &[
                "PATH",
                "HOME",
                "XDG_RUNTIME_DIR",
                "XDG_DATA_HOME",
                "XDG_CONFIG_HOME",
                "DOCKER_HOST",
                "CONTAINER_HOST",
                "SUDO_UID",
                "SUDO_GID",
                "ATEAM_EGRESS_EXE",
                "RUST_LOG",
            ][..],
        ),
    ] {
        let pid = w.pid(file);
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let environ = text(&environ);
        if environ.contains(&marker) {
            wrong.push(format!("the {what} holds the secret's value"));
        }
        let names: Vec<&str> = environ
            .split('\0')
            .filter(|v| !v.is_empty())
            .map(|v| v.split('=').next().unwrap_or(""))
            .collect();
        let extra: Vec<&&str> = names.iter().filter(|n| !allowed.contains(n)).collect();
        if !extra.is_empty() {
            wrong.push(format!("the {what} got {extra:?}"));
        }
    }
    assert!(wrong.is_empty(), "{engine:?}:\n{}", wrong.join("\n"));
}

/// The member's own bridge, out of descriptors (a member may lower its limit, or open that
/// many): accepting is paused and retried later, not retried at once in a loop that burns the
/// member's CPU. A second bridge, started by hand under `ulimit -n 24`, fills its table with
/// idle connections (each holds up to six descriptors) until accept fails with EMFILE.
fn the_bridge_does_not_spin_out_of_descriptors(engine: Engine) {
    let w = World::applied(engine, "bridge", serve("unused"), "-");
    let got = w.inside(
        "ulimit -n 24; /.ateam/bridge --listen 127.0.0.1:4000 --socket /.ateam/egress.sock >/dev/null 2>&1 & b=$!; \
         i=0; until grep -q ':0FA0 00000000:0000 0A' /proc/net/tcp || [ $i -ge 300 ]; do i=$((i+1)); sleep 0.1; done; \
         mkfifo /tmp/f; exec 3<>/tmp/f; \
         for i in $(seq 1 12); do nc 127.0.0.1 4000 <&3 >/dev/null 2>&1 & done; \
         i=0; until [ $(ls /proc/$b/fd | wc -l) -ge 24 ] || [ $i -ge 300 ]; do i=$((i+1)); sleep 0.1; done; sleep 1; \
         echo fds $(ls /proc/$b/fd | wc -l); \
         echo ticks $(cut -d' ' -f14,15 /proc/$b/stat); sleep 3; echo ticks $(cut -d' ' -f14,15 /proc/$b/stat); kill $b",
    );
    let ticks: Vec<u64> = got
        .lines()
        .filter_map(|l| l.strip_prefix("ticks "))
        .flat_map(|l| l.split_whitespace().map(|t| t.parse::<u64>().unwrap()))
        .collect();
    assert_eq!(ticks.len(), 4, "{engine:?}: {got}");
    let share = (ticks[2] + ticks[3] - ticks[0] - ticks[1]) as f64 / ticks_per_second() / 3.0;
    assert!(
        got.contains("fds 24"),
        "{engine:?}: the bridge's table never filled: {got}"
    );
    assert!(
        share < MAX_CPU,
        "{engine:?}: the bridge used {:.0} % of a core out of descriptors: {got}",
        share * 100.0
    );
}

/// Another local uid's server on a host port the member's list names gets no connection and
/// the member, `logs --egress`, `status` and `events` say why; the person's own server (root's
/// here, the unprivileged user's on rootless Podman) is reached.
fn a_member_never_reaches_another_uids_host_service(engine: Engine) {
    let person = match engine {
        Engine::Rootless => rootless_user().1,
        Engine::Docker | Engine::Podman => 0,
    };
    let foreign = common::UidListener::start(65534);
    let mine = common::UidListener::start(person);
    let (f, m) = (foreign.port, mine.port);
    let allow = format!("\"host.ateam.internal:{f}\", \"host.ateam.internal:{m}\"");
    let w = World::applied_allowing(engine, "owner", &allow, "-");
    let got = w.inside(&format!(
        "wget -q -O - http://host.ateam.internal:{m}/ 2>&1"
    ));
    assert!(
        got.contains(&format!("listener-of-{person}")),
        "{engine:?}: the person's own listener: {got}"
    );
    let why = format!(
        "the listener on 127.0.0.1:{f} belongs to uid 65534, not to uid {person} (who applied the team)"
    );
    let got = w.inside(&format!(
        "wget -q -O - http://host.ateam.internal:{f}/v1/messages 2>&1"
    ));
    assert!(
        got.contains(&why) && !got.contains("listener-of-65534"),
        "{engine:?}: {got}"
    );
    assert_eq!(
        foreign.accepted(),
        0,
        "{engine:?}: the foreign listener got a connection"
    );
    let log = text(
        &w.ateam(&["logs", "a", "--team", &w.team, "--egress"], "-")
            .stdout,
    );
    assert!(log.contains(&why), "{engine:?}: {log}");
    let status = text(&w.ateam(&["status", &w.team, "-o", "json"], "-").stdout);
    assert!(status.contains(&why), "{engine:?}: {status}");
    let events = text(&w.ateam(&["events", &w.team, "-o", "json"], "-").stdout);
    assert!(events.contains(&why), "{engine:?}: {events}");
}

macro_rules! on_every_engine {
    ($($engine:ident => $e:expr),* $(,)?) => {
        $(
            mod $engine {
                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_flood_of_idle_connections_costs_the_host_no_cpu() {
                    crate::common::set_gvisor(stringify!($engine).ends_with("_gvisor"));
                    super::a_flood_of_idle_connections_costs_the_host_no_cpu($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn secrets_never_reach_the_proxy_or_the_helper_server() {
                    crate::common::set_gvisor(stringify!($engine).ends_with("_gvisor"));
                    super::secrets_never_reach_the_proxy_or_the_helper_server($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_member_never_reaches_another_uids_host_service() {
                    crate::common::set_gvisor(stringify!($engine).ends_with("_gvisor"));
                    super::a_member_never_reaches_another_uids_host_service($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn the_bridge_does_not_spin_out_of_descriptors() {
                    crate::common::set_gvisor(stringify!($engine).ends_with("_gvisor"));
                    super::the_bridge_does_not_spin_out_of_descriptors($e);
                }
            }
        )*
    };
}

on_every_engine!(
    docker => super::Engine::Docker,
    podman => super::Engine::Podman,
    rootless_podman => super::Engine::Rootless,
    docker_gvisor => super::Engine::Docker,
    podman_gvisor => super::Engine::Podman,
    rootless_podman_gvisor => super::Engine::Rootless,
);
