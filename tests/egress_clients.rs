//! Egress as real clients meet it (issue 22): curl, Python's urllib, Node and git, inside a
//! member of the image scripts/client-image.sh builds (ateam-clients:latest), reach a
//! service on the host's loopback by the name `host.ateam.internal:PORT` through the
//! member's proxy, and nothing else there; the name resolves to nothing inside the member
//! and `NO_PROXY` does not hold it; `logs --egress --since` shows only what is newer; a
//! member whose `user` changes keeps a working proxy. On Docker, rootful Podman and rootless
//! Podman (ateam then runs as the unprivileged user, through runuser). Ignored by a plain
//! `cargo test`.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

mod common;
use common::{Engine, rootless_user, text};

const IMAGE: &str = "ateam-clients:latest";

/// A web server on the host's loopback: `/` answers `body`; any other path is a file below
/// `root` (a git repository served the dumb way), or 404.
fn serve(body: &'static str, root: Option<PathBuf>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let root = root.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                let n = c.read(&mut buf).unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                let path = path.split('?').next().unwrap_or("/").to_string();
                let found = match (&root, path.as_str()) {
                    (_, "/") => Some(body.as_bytes().to_vec()),
                    (Some(r), p) if !p.contains("..") => std::fs::read(r.join(&p[1..])).ok(),
                    _ => None,
                };
                let _ = match found {
                    Some(b) => write!(c, "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n", b.len())
                        .and_then(|_| c.write_all(&b)),
                    None => write!(c, "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
                };
            });
        }
    });
    port
}

/// A bare repository with one commit, ready to be served over dumb HTTP.
fn git_repo(dir: &Path) -> PathBuf {
    let git = |args: &[&str], cwd: &Path| {
        let out = Command::new("git")
            .args(args)
            .current_dir(cwd)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    };
    let work = dir.join("src");
    std::fs::create_dir_all(&work).unwrap();
    git(&["init", "-q", "-b", "main"], &work);
    std::fs::write(work.join("README"), "served by the host\n").unwrap();
    git(&["add", "README"], &work);
    git(&["commit", "-q", "-m", "one"], &work);
    git(&["clone", "-q", "--bare", ".", "../repo.git"], &work);
    git(&["update-server-info"], &dir.join("repo.git"));
    dir.to_path_buf()
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
        let w = World(common::World::new(engine, "clients", &format!("{tag}-")));
        w.dirs(&["work", "state", "sessions"]);
        w.give(&["", "work", "state", "sessions"]);
        w
    }

    fn manifest(&self) -> PathBuf {
        self.root().join("team.yaml")
    }

    /// The team: member `c` of the clients' image with the allow list `allow`, as `user`.
    fn write(&self, allow: &[String], user: Option<&str>) {
        let list = allow
            .iter()
            .map(|e| format!("\"{e}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let user = user.map(|u| format!(", user: \"{u}\"")).unwrap_or_default();
        let yaml = format!(
            r#"apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: {IMAGE}, sessionDir: ./sessions, allowUnenforcedLimits: true, helperRequests: true}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: net}}
spec: {{read: [./work], network: {{allow: [{list}]}}}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: c}}
spec: {{parent: lead, access: net, command: [sleep, "100000"], resources: {{memory: 256Mi, pids: 128}}{user}}}
"#,
            team = self.team,
        );
        self.0.write("team.yaml", &yaml);
    }

    fn apply(&self) -> Output {
        self.ateam(&["apply", "-f", self.manifest().to_str().unwrap()])
    }

    fn applied(&self) {
        let out = self.apply();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{:?}: apply failed:\n{}\n{}",
            self.engine,
            text(&out.stdout),
            text(&out.stderr)
        );
    }

    /// stdout and stderr of a shell script run inside `c`, as the member.
    fn inside(&self, script: &str) -> String {
        let out = self.ateam(&["exec", "c", "--team", &self.team, "--", "sh", "-c", script]);
        format!(
            "{}{}[exit {:?}]",
            text(&out.stdout),
            text(&out.stderr),
            out.status.code()
        )
    }

    fn row(&self) -> serde_json::Value {
        let out = self.ateam(&["status", &self.team, "-o", "json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["teams"][0]["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "c")
            .cloned()
            .unwrap()
    }

    fn member_dir(&self) -> PathBuf {
        self.root()
            .join("state/teams")
            .join(&self.team)
            .join("members/c")
    }

    fn egress_log(&self, since: Option<&str>) -> String {
        let mut args = vec!["logs", "c", "--team", &self.team, "--egress"];
        if let Some(s) = since {
            args.extend(["--since", s]);
        }
        let out = self.ateam(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    }
}

/// Node 20's `fetch` ignores HTTP_PROXY (and undici's ProxyAgent is not exposed): a Node
/// client uses the proxy by sending the absolute URL to it, as agents' own proxy support does.
fn node_get(url: &str) -> String {
    format!(
        "node -e 'const p=new URL(process.env.HTTP_PROXY);require(\"http\").get({{host:p.hostname,port:p.port,path:\"{url}\"}},r=>{{let b=\"\";r.on(\"data\",d=>b+=d);r.on(\"end\",()=>console.log(\"node\",r.statusCode,b))}}).on(\"error\",e=>console.log(\"node error\",e.code))' 2>&1"
    )
}

fn python_get(url: &str) -> String {
    format!(
        "python3 -c 'import urllib.request, urllib.error\ntry: print(\"python\", urllib.request.urlopen(\"{url}\", timeout=20).read().decode())\nexcept urllib.error.HTTPError as e: print(\"python\", e.code, e.read().decode())' 2>&1"
    )
}

fn real_clients_reach_a_host_service_by_name(engine: Engine) {
    let files = tempfile::tempdir().unwrap();
    let served = git_repo(files.path());
    let allowed = serve("host-service-answers", Some(served));
    let other = serve("other-port-answers", None);
    let w = World::new(engine, "clients");
    w.write(&[format!("host.ateam.internal:{allowed}")], None);
    w.applied();
    let base = format!("http://host.ateam.internal:{allowed}");
    let refused = format!("http://host.ateam.internal:{other}/");

    // NO_PROXY keeps loopback the member's own and never holds the name.
    let env = w.inside("echo \"no_proxy=$NO_PROXY|$no_proxy http_proxy=$HTTP_PROXY\"");
    assert!(
        env.contains("no_proxy=localhost,127.0.0.1,::1|localhost,127.0.0.1,::1")
            && !env.contains("ateam.internal"),
        "{engine:?}: {env}"
    );

    // curl: plain forwarding and a CONNECT tunnel reach the allowed port; another is refused.
    let got = w.inside(&format!(
        "curl -sS --max-time 20 {base}/; echo; curl -sS --max-time 20 --proxytunnel {base}/; echo; curl -sS --max-time 20 {refused}"
    ));
    assert_eq!(
        got.matches("host-service-answers").count(),
        2,
        "{engine:?}: curl did not reach the host's service twice: {got}"
    );
    assert!(
        got.contains(&format!(
            "host.ateam.internal:{other} is not in this member's allow list"
        )) && !got.contains("other-port-answers"),
        "{engine:?}: another port of the host was not refused: {got}"
    );
    // The member's loopback is its own: the host's port is not there, by address.
    let got = w.inside(&format!(
        "curl -sS --max-time 10 http://127.0.0.1:{allowed}/ 2>&1"
    ));
    assert!(
        !got.contains("host-service-answers") && got.contains("Failed to connect"),
        "{engine:?}: {got}"
    );

    // Python's urllib, with its own proxy support (the environment).
    let got = w.inside(&format!(
        "{}; {}",
        python_get(&format!("{base}/")),
        python_get(&refused)
    ));
    assert!(
        got.contains("python host-service-answers") && got.contains("python 403"),
        "{engine:?}: python: {got}"
    );

    // Node, through the proxy; and without it the name resolves to nothing in the member.
    let got = w.inside(&format!(
        "{}; {}; node -e 'fetch(\"{base}/\").then(r=>r.text()).then(t=>console.log(\"direct\",t),e=>console.log(\"direct failed\",e.cause&&e.cause.code))' 2>&1",
        node_get(&format!("{base}/")),
        node_get(&refused)
    ));
    assert!(
        got.contains("node 200 host-service-answers")
            && got.contains("node 403")
            && got.contains("direct failed")
            && !got.contains("direct host-service-answers"),
        "{engine:?}: node: {got}"
    );
    let got = w.inside(
        "python3 -c 'import socket\ntry: print(\"RESOLVED\", socket.getaddrinfo(\"host.ateam.internal\", 80))\nexcept OSError as e: print(\"unresolved\", e)' 2>&1",
    );
    assert!(
        got.contains("unresolved") && !got.contains("RESOLVED"),
        "{engine:?}: {got}"
    );

    // git over http, through the proxy (libcurl honours the same variables).
    let got = w.inside(&format!(
        "cd /tmp && git clone -q {base}/repo.git r 2>&1 && cat r/README"
    ));
    assert!(got.contains("served by the host"), "{engine:?}: git: {got}");

    // Every allowed connection went to the host's loopback on the allowed port.
    let log = std::fs::read_to_string(w.member_dir().join("egress/log.jsonl")).unwrap();
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let allowed_events: Vec<_> = events
        .iter()
        .filter(|e| e["verdict"] == "allowed")
        .collect();
    assert!(allowed_events.len() >= 5, "{engine:?}: {log}");
    for e in &allowed_events {
        assert_eq!(e["addr"], format!("127.0.0.1:{allowed}"), "{engine:?}: {e}");
    }
}

/// `logs --egress --since 2m` leaves out what is older (it printed everything).
fn logs_egress_since_leaves_older_events_out(engine: Engine) {
    let port = serve("host-service-answers", None);
    let w = World::new(engine, "since");
    w.write(&[format!("127.0.0.1:{port}")], None);
    w.applied();
    let got = w.inside(&format!(
        "curl -sS --max-time 20 --noproxy '' http://127.0.0.1:{port}/"
    ));
    assert!(got.contains("host-service-answers"), "{engine:?}: {got}");
    let path = w.member_dir().join("egress/log.jsonl");
    let line = std::fs::read_to_string(&path).unwrap();
    let mut old: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    old["ts"] = serde_json::json!(old["ts"].as_f64().unwrap() - 3600.0);
    old["host"] = serde_json::json!("an-hour-ago.example");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    writeln!(f, "{old}").unwrap();
    assert!(w.egress_log(None).contains("an-hour-ago.example"));
    let recent = w.egress_log(Some("2m"));
    assert!(
        !recent.contains("an-hour-ago.example") && recent.contains(&format!("127.0.0.1:{port}")),
        "{engine:?}: logs --egress --since 2m: {recent}"
    );
}

fn uid_of_pid(pid: &str) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim())).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A member whose `user` changes gets a proxy, socket and log of its new uid; apply is not
/// done, nor the member `running`, with egress that its member cannot use.
fn a_members_proxy_follows_its_uid(engine: Engine) {
    let port = serve("host-service-answers", None);
    let w = World::new(engine, "uid");
    // By address, and curl told to use the proxy for it: what the old proxy already knew,
    // so that only the uid change is judged here.
    let allow = [format!("127.0.0.1:{port}")];
    let get = format!(
        "id -u; curl -sS --max-time 20 --noproxy '' http://127.0.0.1:{port}/; echo; curl -sS --max-time 20 -o /dev/null -w 'helpers %{{http_code}}\\n' $ATEAM_HELPERS_URL 2>&1"
    );
    let (first, second) = match engine {
        Engine::Rootless => {
            let (_, uid, gid) = rootless_user();
            (format!("{uid}:{gid}"), "4002:4002".to_string())
        }
        Engine::Docker | Engine::Podman => ("4001:4001".to_string(), "4002:4002".to_string()),
    };
    w.write(&allow, Some(&first));
    w.applied();
    let got = w.inside(&get);
    assert!(got.contains("host-service-answers"), "{engine:?}: {got}");

    w.write(&allow, Some(&second));
    if engine == Engine::Rootless {
        // Rootless Podman maps only the caller: a member's uid cannot change there, and apply
        // refuses before any change. What can be checked: the proxy is untouched and works.
        let out = w.apply();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{err}");
        assert!(err.contains("4002:4002"), "{err}");
        let got = w.inside(&get);
        assert!(got.contains("host-service-answers"), "{engine:?}: {got}");
        return;
    }
    w.applied();
    let got = w.inside(&get);
    assert!(
        got.starts_with("4002\n") && got.contains("host-service-answers"),
        "{engine:?}: after the uid change the member's egress does not work: {got}"
    );
    assert!(
        got.contains("helpers ") && !got.contains("helpers 000") && !got.contains("denied"),
        "{engine:?}: after the uid change the member's helper server is not reachable: {got}"
    );
    let row = w.row();
    assert_eq!(row["state"], "running", "{engine:?}: {row}");
    assert_eq!(row["egress"]["proxy"], "running", "{engine:?}: {row}");
    let dir = w.member_dir();
    let pid = std::fs::read_to_string(dir.join("egress/proxy.pid")).unwrap();
    assert_eq!(uid_of_pid(&pid), Some(4002), "{engine:?}: the proxy's uid");
    for f in ["ctl/egress.sock", "ctl/helpers.sock", "egress/log.jsonl"] {
        let md = std::fs::symlink_metadata(dir.join(f)).unwrap();
        assert_eq!(md.uid(), 4002, "{engine:?}: {f} belongs to {}", md.uid());
    }
    // The new proxy writes the log: the request after the change is in it.
    let shown = w.egress_log(None);
    assert_eq!(
        shown.lines().filter(|l| l.contains(" allowed ")).count(),
        2,
        "{engine:?}: {shown}"
    );
}

macro_rules! on_every_engine {
    ($($engine:ident => $e:expr),* $(,)?) => {
        $(
            mod $engine {
                #[test]
                #[ignore = "needs the engines: scripts/engines.sh (and its client image)"]
                fn real_clients_reach_a_host_service_by_name() {
                    super::real_clients_reach_a_host_service_by_name($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh (and its client image)"]
                fn logs_egress_since_leaves_older_events_out() {
                    super::logs_egress_since_leaves_older_events_out($e);
                }

                #[test]
                #[ignore = "needs the engines: scripts/engines.sh (and its client image)"]
                fn a_members_proxy_follows_its_uid() {
                    super::a_members_proxy_follows_its_uid($e);
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
