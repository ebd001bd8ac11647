//! Egress through the proxy, judged from inside a member with busybox `wget` and `nc`, on
//! Docker, rootful Podman and rootless Podman (ateam then runs as the unprivileged user,
//! through runuser, as in tests/attacks.rs). Each engine runs one story, because every apply
//! costs seconds on this machine: an allowed endpoint answers; another port or host is
//! refused with the reason; a name resolving to loopback, the metadata address, a private
//! address and an IPv4-mapped loopback are refused (as literals, and as names that
//! scripts/engines.sh puts into the host's /etc/hosts); without the proxy variables nothing gets
//! out; one member's socket is not reachable from another, and each is judged by its own
//! list; a killed proxy is seen by `status` and healed by `apply`; a new list works without a
//! new container; delete stops the proxy. Ignored by a plain `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{Engine, rootless_user, text};

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
                let n = c.read(&mut buf).unwrap_or(0);
                // `/slow` keeps the connection open a while, so that many overlap.
                if String::from_utf8_lossy(&buf[..n]).contains(" /slow ") {
                    std::thread::sleep(Duration::from_millis(700));
                }
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
    fn new(engine: Engine, tag: &str) -> World {
        let w = World(common::World::new(engine, "egress", &format!("{tag}-")));
        w.dirs(&["work", "state", "sessions"]);
        w.give(&["", "work", "state", "sessions"]);
        w
    }

    fn manifest(&self) -> PathBuf {
        self.root().join("team.yaml")
    }

    /// The team: member `a` with the allow list `a`, member `b` with `b`.
    fn write(&self, a: &[String], b: &[String]) {
        let list = |v: &[String]| {
            v.iter()
                .map(|e| format!("\"{e}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let yaml = format!(
            r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: net-a}}
spec: {{read: [./work], network: {{allow: [{a}]}}}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: net-b}}
spec: {{read: [./work], network: {{allow: [{b}]}}}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: a}}
spec: {{parent: lead, access: net-a, command: [sleep, "100000"], resources: {{memory: 64Mi, pids: 64}}}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: b}}
spec: {{parent: lead, access: net-b, command: [sleep, "100000"], resources: {{memory: 64Mi, pids: 64}}}}
"#,
            team = self.team,
            a = list(a),
            b = list(b)
        );
        self.0.write("team.yaml", &yaml);
    }

    /// The team with one member `o` whose grant says `network: open`.
    fn write_open(&self) {
        let yaml = format!(
            r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: wide}}
spec: {{read: [./work], network: open}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: o}}
spec: {{parent: lead, access: wide, command: [sleep, "100000"], resources: {{memory: 64Mi, pids: 64}}}}
"#,
            team = self.team
        );
        self.0.write("team.yaml", &yaml);
    }

    /// The engine's own CLI.
    fn cli(&self, args: &[&str]) -> String {
        let out = common::engine_command(self.engine, true)
            .args(args)
            .current_dir("/tmp")
            .output()
            .unwrap();
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    }

    fn apply(&self) -> String {
        let out = self.ateam(&["apply", "-f", self.manifest().to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{:?}: apply failed:\n{}\n{}",
            self.engine,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// stdout and stderr of a shell script run inside `member`, as the member.
    fn inside(&self, member: &str, script: &str) -> String {
        let out = self.ateam(&[
            "exec", member, "--team", &self.team, "--", "sh", "-c", script,
        ]);
        format!(
            "{}{}[exit {:?}]",
            text(&out.stdout),
            text(&out.stderr),
            out.status.code()
        )
    }

    fn get(&self, member: &str, url: &str) -> String {
        self.inside(member, &format!("wget -q -O - {url} 2>&1"))
    }

    /// A CONNECT by hand (busybox wget cannot), answered by the proxy.
    fn connect(&self, member: &str, target: &str) -> String {
        self.inside(
            member,
            &format!("printf 'CONNECT {target} HTTP/1.1\\r\\n\\r\\n' | nc 127.0.0.1 3128 2>&1"),
        )
    }

    fn status(&self) -> serde_json::Value {
        let out = self.ateam(&["status", &self.team, "-o", "json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn row(&self, name: &str) -> serde_json::Value {
        self.status()["teams"][0]["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap()
    }

    fn container(&self, name: &str) -> String {
        self.row(name)["container"].as_str().unwrap_or("").into()
    }

    fn member_dir(&self, member: &str) -> PathBuf {
        self.root()
            .join("state/teams")
            .join(&self.team)
            .join("members")
            .join(member)
    }

    fn proxy_pid(&self, member: &str) -> Option<i32> {
        std::fs::read_to_string(self.member_dir(member).join("egress/proxy.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

/// Test names, each resolving on the host to an address the proxy refuses (scripts/engines.sh
/// writes them into /etc/hosts).
const LOOPBACK_NAME: &str = "loopback.ateam.test";
const METADATA_NAME: &str = "metadata.ateam.test";
const PRIVATE_NAME: &str = "private.ateam.test";
const MAPPED_NAME: &str = "mapped.ateam.test";

/// The test names resolve on the host as the tests expect: otherwise a refusal would be for a
/// name that does not resolve, and prove nothing.
fn hosts_file_has_the_test_names() {
    use std::net::ToSocketAddrs;
    for (name, want) in [
        (LOOPBACK_NAME, "127.0.0.1"),
        (METADATA_NAME, "169.254.169.254"),
        (PRIVATE_NAME, "10.11.12.13"),
        (MAPPED_NAME, "::ffff:127.0.0.1"),
    ] {
        let got: Vec<String> = (name, 80)
            .to_socket_addrs()
            .map(|a| a.map(|a| a.ip().to_string()).collect())
            .unwrap_or_default();
        assert_eq!(
            got,
            [want],
            "{name} must resolve to {want} alone on the host: run scripts/engines.sh"
        );
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| !c.is_empty())
        .unwrap_or(false)
}

fn a_member_reaches_exactly_its_allowed_hosts(engine: Engine) {
    let allowed = serve("allowed-endpoint");
    let other = serve("other-endpoint");
    let w = World::new(engine, "egress");
    let a_list = vec![
        format!("127.0.0.1:{allowed}"),
        // A name for a loopback address whose exact address and port the list does not name.
        format!("localhost:{other}"),
        "169.254.169.254".to_string(),
        "10.0.0.1".to_string(),
        "[::ffff:127.0.0.1]".to_string(),
        // Names that the host's resolver (scripts/engines.sh puts them into /etc/hosts) turns
        // into addresses the proxy must refuse: listed, so that a refusal is about the address.
        format!("{LOOPBACK_NAME}:{other}"),
        METADATA_NAME.to_string(),
        PRIVATE_NAME.to_string(),
        MAPPED_NAME.to_string(),
    ];
    w.write(&a_list, &[format!("127.0.0.1:{other}")]);
    w.apply();

    // The allowed endpoint answers, through the proxy variables.
    let got = w.get("a", &format!("http://127.0.0.1:{allowed}/"));
    assert!(got.contains("allowed-endpoint"), "{engine:?}: {got}");
    let got = w.connect("a", &format!("127.0.0.1:{allowed}"));
    assert!(
        got.contains("200 Connection established"),
        "{engine:?}: {got}"
    );
    // Many at once, within the member's pids limit (64): the bridge is one process however
    // many connections it carries.
    let got = w.inside(
        "a",
        &format!(
            "for i in $(seq 1 24); do wget -q -O - http://127.0.0.1:{allowed}/slow > /tmp/r$i 2>&1 & done; wait; cat /tmp/r* | grep -o allowed-endpoint | wc -l; cat /tmp/r*"
        ),
    );
    assert_eq!(
        got.lines().next().map(str::trim),
        Some("24"),
        "{engine:?}: {got}"
    );
    // Another port, another host: refused, with the reason.
    let got = w.get("a", &format!("http://127.0.0.1:{other}/"));
    assert!(
        got.contains("403") && got.contains("is not in this member's allow list"),
        "{engine:?}: {got}"
    );
    let got = w.get("a", "http://example.com/");
    assert!(
        got.contains("403") && got.contains("example.com:80 is not in"),
        "{engine:?}: {got}"
    );
    // Listed names that resolve to what is refused (loopback, the metadata address, a private
    // address, an IPv4-mapped loopback): the proxy judges the address a name resolves to,
    // whatever the list says of the name, and the reason names the address and its rule. All
    // four are tried before the verdict, so that a failure shows each one.
    hosts_file_has_the_test_names();
    let names = [
        (
            "get",
            format!("http://{LOOPBACK_NAME}:{other}/"),
            format!("{LOOPBACK_NAME} resolves to 127.0.0.1, a loopback address"),
        ),
        (
            "get",
            format!("http://{METADATA_NAME}/latest/meta-data/"),
            format!("{METADATA_NAME} resolves to 169.254.169.254, a link-local address"),
        ),
        (
            "get",
            format!("http://{PRIVATE_NAME}/"),
            format!("{PRIVATE_NAME} resolves to 10.11.12.13, a private address"),
        ),
        (
            "connect",
            format!("{MAPPED_NAME}:443"),
            format!("{MAPPED_NAME} resolves to [::ffff:127.0.0.1], a loopback address"),
        ),
    ];
    let mut wrong = Vec::new();
    for (how, url, reason) in names {
        let got = if how == "get" {
            w.get("a", &url)
        } else {
            w.connect("a", &url)
        };
        if !(got.contains("403") && got.contains(&reason)) {
            wrong.push(format!("{url}: wanted 403 and `{reason}`, got: {got}"));
        }
    }
    assert!(wrong.is_empty(), "{engine:?}:\n{}", wrong.join("\n"));
    // Listed, but what they reach is refused: a name resolving to loopback, the metadata
    // address, a private address, an IPv4-mapped loopback.
    let got = w.connect("a", &format!("localhost:{other}"));
    assert!(
        got.contains("403") && got.contains("loopback"),
        "{engine:?}: {got}"
    );
    let got = w.get("a", "http://169.254.169.254/latest/meta-data/");
    assert!(
        got.contains("403") && got.contains("link-local"),
        "{engine:?}: {got}"
    );
    let got = w.get("a", "http://10.0.0.1/");
    assert!(
        got.contains("403") && got.contains("private"),
        "{engine:?}: {got}"
    );
    let got = w.connect("a", "[::ffff:127.0.0.1]:80");
    assert!(
        got.contains("403") && got.contains("loopback"),
        "{engine:?}: {got}"
    );
    // Without the proxy variables nothing gets out: loopback only.
    let got = w.inside(
        "a",
        &format!(
            "env -u http_proxy -u HTTP_PROXY wget -q -O - http://127.0.0.1:{allowed}/ 2>&1; echo exit=$?; ip -o addr 2>/dev/null || cat /proc/net/dev"
        ),
    );
    assert!(
        !got.contains("allowed-endpoint") && got.contains("exit=1"),
        "{engine:?}: {got}"
    );
    assert!(!got.contains("eth0"), "{engine:?}: an interface: {got}");

    // Each member is judged by its own list, through its own socket only.
    let got = w.get("b", &format!("http://127.0.0.1:{allowed}/"));
    assert!(got.contains("403"), "{engine:?}: {got}");
    let got = w.get("b", &format!("http://127.0.0.1:{other}/"));
    assert!(got.contains("other-endpoint"), "{engine:?}: {got}");
    let a_socket = w.member_dir("a").join("ctl/egress.sock");
    let got = w.inside(
        "b",
        &format!(
            // Asked again while the bridge is not listening yet (a loaded machine), not after
            // a fixed pause.
            "ls -la /.ateam/; test -e {} && echo SEEN; /.ateam/bridge --listen 127.0.0.1:4000 --socket {} & \
             i=0; while :; do out=$(env -u http_proxy -u HTTP_PROXY wget -q -O - http://127.0.0.1:4000/ 2>&1); \
             case \"$out\" in *refused*) i=$((i+1)); if [ $i -lt 300 ]; then sleep 0.1; continue; fi;; esac; \
             echo \"$out\"; break; done; kill %1",
            a_socket.display(),
            a_socket.display()
        ),
    );
    assert!(!got.contains("SEEN"), "{engine:?}: {got}");
    assert!(got.contains("502"), "{engine:?}: {got}");
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let sock = std::fs::metadata(&a_socket).unwrap();
        let dir = std::fs::metadata(a_socket.parent().unwrap()).unwrap();
        assert_eq!(sock.permissions().mode() & 0o777, 0o600, "{engine:?}");
        assert_eq!(dir.permissions().mode() & 0o777, 0o700, "{engine:?}");
        let want = if engine == Engine::Rootless {
            rootless_user().1
        } else {
            65534
        };
        assert_eq!((sock.uid(), dir.uid()), (want, want), "{engine:?}");
    }

    // What was refused is in the log and in status, with the grant that would allow it.
    let out = w.ateam(&["logs", "a", "--team", &w.team, "--egress"]);
    let log = text(&out.stdout);
    assert!(
        log.contains("allowed GET 127.0.0.1") && log.contains("REFUSED GET example.com:80"),
        "{engine:?}: {log}{}",
        text(&out.stderr)
    );
    let row = w.row("a");
    // Its figures are its own, or said to be shared: rootless Podman on cgroup v1 leaves
    // members in the user's cgroup, whose figures are everyone's.
    let usage = &row["usage"];
    let v1 = std::path::Path::new("/sys/fs/cgroup/memory").is_dir();
    if engine == Engine::Rootless && v1 {
        assert!(
            usage["shared"] == true && usage["memoryBytes"].is_null(),
            "{engine:?}: {usage}"
        );
    } else {
        assert!(
            usage["shared"].is_null() && usage["memoryBytes"].is_u64(),
            "{engine:?}: {usage}"
        );
    }
    let refused = row["egress"]["refused"].as_array().unwrap();
    assert!(
        refused.iter().any(|r| r["host"] == "example.com"),
        "{engine:?}: {row}"
    );
    // The grant to paste is the manifest's own, the entry added, its spelling kept (`./work`),
    // and it validates once pasted in place of the old one.
    let grant = row["egress"]["suggestedGrant"].as_str().unwrap_or("");
    assert!(
        (grant.contains("example.com]") || grant.contains("\"example.com\"]"))
            && grant.contains("read: [./work]")
            && !grant.contains(&format!("127.0.0.1:{other}")),
        "{engine:?}: {grant}"
    );
    let manifest = std::fs::read_to_string(w.manifest()).unwrap();
    let old = manifest
        .split("---\n")
        .find(|d| d.contains("name: net-a}"))
        .unwrap();
    let pasted = w.root().join("pasted.yaml");
    std::fs::write(&pasted, manifest.replace(old, grant)).unwrap();
    let out = w.ateam(&["validate", "-f", pasted.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{engine:?}: {}{grant}",
        text(&out.stderr)
    );
    std::fs::remove_file(&pasted).unwrap();
    // A loopback address is not offered to paste: it is named, with what it would open.
    let withheld = row["egress"]["notSuggested"].to_string();
    assert!(
        withheld.contains(&format!("`127.0.0.1:{other}` is a loopback address")),
        "{engine:?}: {row}"
    );

    // A killed proxy: status sees it, --exit-code fails, apply heals it.
    let pid = w.proxy_pid("a").expect("a pid file");
    assert!(alive(pid), "{engine:?}");
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let row = w.row("a");
    assert_eq!(row["state"], "egress down", "{engine:?}: {row}");
    assert_eq!(row["egress"]["proxy"], "down", "{engine:?}: {row}");
    let code = w.ateam(&["status", &w.team, "--exit-code"]).status.code();
    assert_eq!(code, Some(1), "{engine:?}");
    let id = w.container("a");
    w.apply();
    assert_eq!(w.row("a")["state"], "running", "{engine:?}");
    let got = w.get("a", &format!("http://127.0.0.1:{allowed}/"));
    assert!(got.contains("allowed-endpoint"), "{engine:?}: {got}");

    // A new list changes what gets through, in the same container.
    let mut wider = a_list.clone();
    wider.push(format!("127.0.0.1:{other}"));
    w.write(&wider, &[format!("127.0.0.1:{other}")]);
    w.apply();
    assert_eq!(w.container("a"), id, "{engine:?}: recreated");
    let got = w.get("a", &format!("http://127.0.0.1:{other}/"));
    assert!(got.contains("other-endpoint"), "{engine:?}: {got}");
    assert_eq!(
        w.ateam(&["status", &w.team, "--exit-code"]).status.code(),
        Some(0),
        "{engine:?}"
    );

    // Delete stops the proxies and removes their sockets.
    let pid = w.proxy_pid("a").expect("a pid file");
    let out = w.ateam(&["delete", "--team", &w.team]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(pid), "{engine:?}: the proxy outlived its team");
    assert!(!a_socket.exists(), "{engine:?}");
}

/// `network: open` is a network of the team's own, not the engine's shared default bridge;
/// it goes with the team.
fn an_open_member_gets_its_teams_own_network(engine: Engine) {
    let w = World::new(engine, "open");
    w.write_open();
    w.apply();
    let row = w.row("o");
    assert_eq!(row["state"], "running", "{engine:?}: {row}");
    assert_eq!(
        row["grants"]["network"]["mode"], "open",
        "{engine:?}: {row}"
    );
    let table = w.ateam(&["status", &w.team]);
    assert!(
        text(&table.stdout).contains("net:open(widest:any host)"),
        "{engine:?}: {}",
        text(&table.stdout)
    );
    let container = w.container("o");
    let nets = w.cli(&[
        "inspect",
        &container,
        "--format",
        "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
    ]);
    let nets: Vec<&str> = nets.split_whitespace().collect();
    assert_eq!(nets.len(), 1, "{engine:?}: {nets:?}");
    let net = nets[0].to_string();
    assert!(
        net.starts_with("ateam-") && net.ends_with(&format!("-{}", w.team)),
        "{engine:?}: {net}"
    );
    let inside = w.inside("o", "ip -o addr 2>/dev/null || cat /proc/net/dev");
    assert!(inside.contains("eth0"), "{engine:?}: {inside}");
    let out = w.ateam(&["delete", "--team", &w.team]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let left = w.cli(&["network", "ls", "--format", "{{.Name}}"]);
    assert!(
        !left.lines().any(|l| l.trim() == net),
        "{engine:?}: {net} outlived its team: {left}"
    );
}

/// A member asks its proxy for a "host" with a right-to-left override and a line separator
/// (the HTTP parser already refuses C0 escapes): what `logs --egress` and `status` print of
/// it is escaped, so it can neither reorder the line nor start one of ateam's own.
fn what_a_member_asks_for_reaches_no_terminal_unescaped(engine: Engine) {
    let w = World::new(engine, "escapes");
    w.write(&["example.com".into()], &["example.com".into()]);
    w.apply();
    let answer = w.connect("a", "pwned\\342\\200\\250\\342\\200\\256moc.live:443");
    assert!(answer.contains("40"), "{engine:?}: not refused: {answer}");
    for args in [
        vec!["logs", "a", "--egress", "--team", &w.team],
        vec!["status", &w.team],
    ] {
        let out = w.ateam(&args);
        let shown = text(&out.stdout);
        assert!(
            shown.contains("pwned"),
            "{engine:?}: {args:?} does not show the refusal: {shown}{}",
            text(&out.stderr)
        );
        assert!(
            !shown.contains('\u{2028}') && !shown.contains('\u{202e}'),
            "{engine:?}: {args:?} printed the member's escapes as they are: {shown:?}"
        );
    }
}

macro_rules! on_every_engine {
    ($($engine:ident => $e:expr),* $(,)?) => {
        $(
            mod $engine {
                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn a_member_reaches_exactly_its_allowed_hosts() {
                    super::a_member_reaches_exactly_its_allowed_hosts($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn what_a_member_asks_for_reaches_no_terminal_unescaped() {
                    super::what_a_member_asks_for_reaches_no_terminal_unescaped($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh"]
                fn an_open_member_gets_its_teams_own_network() {
                    super::an_open_member_gets_its_teams_own_network($e);
                }
            }
        )*
    };
}

on_every_engine!(
    docker => super::Engine::Docker,
    podman => super::Engine::Podman,
    rootless_podman => super::Engine::Rootless,
);
