//! The egress proxy on its own, without an engine: the real `ateam egress-proxy` on a socket
//! in a temp folder, spoken to as the bridge would. Runs in every test run.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Proxy {
    child: Child,
    dir: tempfile::TempDir,
}

impl Proxy {
    fn start(allow: &[String]) -> Proxy {
        let dir = tempfile::tempdir().unwrap();
        let p = Proxy {
            child: Command::new(env!("CARGO_BIN_EXE_ateam"))
                .arg("egress-proxy")
                .arg("--socket")
                .arg(dir.path().join("egress.sock"))
                .arg("--policy")
                .arg(dir.path().join("policy.json"))
                .arg("--log")
                .arg(dir.path().join("log.jsonl"))
                .arg("--pid-file")
                .arg(dir.path().join("proxy.pid"))
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
            dir,
        };
        p.set(allow);
        let deadline = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(p.socket()).is_err() {
            assert!(Instant::now() < deadline, "the proxy never answered");
            std::thread::sleep(Duration::from_millis(10));
        }
        p
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("egress.sock")
    }

    /// Writes the list as apply does: a new file renamed over the old one.
    fn set(&self, allow: &[String]) {
        let tmp = self.dir.path().join(".policy.tmp");
        let json = serde_json::json!({"team": "t", "member": "m", "allow": allow});
        std::fs::write(&tmp, json.to_string()).unwrap();
        std::fs::rename(&tmp, self.dir.path().join("policy.json")).unwrap();
    }

    /// Sends `request`, returns everything the proxy (and what is behind it) answered.
    fn ask(&self, request: &str) -> String {
        let mut s = UnixStream::connect(self.socket()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    fn log(&self) -> Vec<serde_json::Value> {
        read_log(&self.dir.path().join("log.jsonl"))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_log(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A server on loopback that answers each request with the request line it got.
fn echo_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let n = c.read(&mut buf).unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let body = head.replace("\r\n", "|");
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

#[test]
fn the_proxy_forwards_what_the_list_allows_and_refuses_the_rest_with_the_reason() {
    let port = echo_server();
    let p = Proxy::start(&[format!("127.0.0.1:{port}")]);

    // Plain HTTP: sent on in origin form, with the checked host and one request only.
    let got = p.ask(&format!(
        "GET http://127.0.0.1:{port}/x?y HTTP/1.1\r\nHost: evil.example\r\nProxy-Connection: keep-alive\r\n\r\n"
    ));
    assert!(got.starts_with("HTTP/1.0 200 OK"), "{got}");
    assert!(
        got.contains(&format!(
            "GET /x?y HTTP/1.1|Host: 127.0.0.1:{port}|Connection: close"
        )) && !got.contains("evil")
            && !got.contains("Proxy-Connection"),
        "{got}"
    );
    // CONNECT: a tunnel to the very address.
    let got = p.ask(&format!(
        "CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nGET /tunnelled HTTP/1.0\r\n\r\n"
    ));
    assert!(
        got.starts_with("HTTP/1.1 200 Connection established") && got.contains("GET /tunnelled"),
        "{got}"
    );
    // Refused: another port, a name for loopback, https in the clear, not HTTP at all.
    for (req, status, reason) in [
        (
            format!("GET http://127.0.0.1:{}/ HTTP/1.1\r\n\r\n", port ^ 1),
            "403",
            "is not in this member's allow list",
        ),
        (
            "CONNECT example.com:443 HTTP/1.1\r\n\r\n".to_string(),
            "403",
            "example.com:443 is not in this member's allow list",
        ),
        (
            "GET https://example.com/ HTTP/1.1\r\n\r\n".to_string(),
            "501",
            "needs CONNECT",
        ),
        ("hello\r\n\r\n".to_string(), "400", "not an HTTP request"),
    ] {
        let got = p.ask(&req);
        assert!(
            got.starts_with(&format!("HTTP/1.1 {status} ateam egress: ")) && got.contains(reason),
            "{req:?}: {got}"
        );
    }
    // A new list is read at the next connection: now a name for loopback is listed, and its
    // address refused, as it is not named exactly.
    std::thread::sleep(Duration::from_millis(20));
    p.set(&[format!("localhost:{port}")]);
    let got = p.ask(&format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n"));
    assert!(
        got.starts_with("HTTP/1.1 403") && got.contains("resolves to") && got.contains("loopback"),
        "{got}"
    );
    let got = p.ask(&format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"));
    assert!(
        got.starts_with("HTTP/1.1 403"),
        "the old list still held: {got}"
    );

    // Every decision is logged; a probe (connect, nothing sent) is not.
    drop(UnixStream::connect(p.socket()).unwrap());
    std::thread::sleep(Duration::from_millis(100));
    let log = p.log();
    let verdicts: Vec<&str> = log.iter().map(|e| e["verdict"].as_str().unwrap()).collect();
    assert_eq!(
        verdicts,
        [
            "allowed", "allowed", "refused", "refused", "refused", "refused", "refused", "refused"
        ],
        "{log:?}"
    );
    assert_eq!(log[0]["addr"], format!("127.0.0.1:{port}"));
    assert_eq!(log[1]["method"], "CONNECT");
}

#[test]
fn a_closed_port_is_a_failure_not_a_refusal() {
    // A port nothing listens on (bound, then let go).
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p = Proxy::start(&[format!("127.0.0.1:{port}")]);
    let got = p.ask(&format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n"));
    assert!(got.starts_with("HTTP/1.1 502"), "{got}");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(p.log()[0]["verdict"], "failed");
}

/// `host.ateam.internal:PORT` is the host's loopback on that port alone: never looked up by
/// name (no DNS answer can move it), never reached by a wildcard, nor on another port.
#[test]
fn the_host_service_name_reaches_only_its_port_on_loopback() {
    let port = echo_server();
    let other = echo_server();
    let p = Proxy::start(&[
        format!("host.ateam.internal:{port}"),
        "*.internal".into(),
        format!("127.0.0.1:{other}"),
    ]);
    let got = p.ask(&format!(
        "GET http://HOST.ateam.internal.:{port}/x HTTP/1.1\r\nHost: x\r\n\r\n"
    ));
    assert!(
        got.starts_with("HTTP/1.0 200 OK") && got.contains("GET /x HTTP/1.1"),
        "{got}"
    );
    let got = p.ask(&format!(
        "CONNECT host.ateam.internal:{port} HTTP/1.1\r\n\r\nGET /tunnelled HTTP/1.0\r\n\r\n"
    ));
    assert!(
        got.starts_with("HTTP/1.1 200 Connection established") && got.contains("GET /tunnelled"),
        "{got}"
    );
    // Another loopback port, even one the list names by address, and the wildcard's ports.
    for target in [
        format!("host.ateam.internal:{other}"),
        "host.ateam.internal:443".into(),
    ] {
        let got = p.ask(&format!("CONNECT {target} HTTP/1.1\r\n\r\n"));
        assert!(
            got.starts_with("HTTP/1.1 403") && got.contains("is not in this member's allow list"),
            "{target}: {got}"
        );
    }
    // Nothing listening on the allowed port: a failure that says where it looked.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    p.set(&[format!("host.ateam.internal:{closed_port}")]);
    let got = p.ask(&format!(
        "CONNECT host.ateam.internal:{closed_port} HTTP/1.1\r\n\r\n"
    ));
    assert!(
        got.starts_with("HTTP/1.1 502")
            && got.contains(&format!(
                "nothing answers on the host's loopback port {closed_port}"
            )),
        "{got}"
    );
    let log = p.log();
    let allowed: Vec<_> = log.iter().filter(|e| e["verdict"] == "allowed").collect();
    assert_eq!(allowed.len(), 2, "{log:?}");
    for e in allowed {
        assert_eq!(e["addr"], format!("127.0.0.1:{port}"), "{e}");
    }
}
