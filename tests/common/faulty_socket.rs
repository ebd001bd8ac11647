//! An engine socket with one fault in it: every request passes through to the real engine's
//! socket, except those a rule picks, which get a 500 as an engine answers a failed call, or
//! wait until the test lets them go on. A fault placed by what it is (the removal of one
//! container), not by timing, on a real engine.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// What happens to a request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fault {
    Pass,
    /// Answered with a 500.
    Fail,
    /// Held until `FaultySocket::let_go`, then passed on.
    Hold,
}

/// What happens to each request, by `(method, path, body)` (the body when it has a length:
/// Podman names a container to create in it, Docker in the path).
pub type Rule = dyn Fn(&str, &str, &[u8]) -> Fault + Send + Sync;

pub struct FaultySocket {
    /// A folder of its own: ateam refuses grants near an engine's socket.
    _dir: tempfile::TempDir,
    path: PathBuf,
    injected: Arc<AtomicUsize>,
    held: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl FaultySocket {
    /// Listens in a folder of its own, in front of `upstream` (a `unix://` address or a path).
    pub fn new(upstream: &str, rule: Box<Rule>) -> FaultySocket {
        let upstream = PathBuf::from(upstream.trim_start_matches("unix://"));
        let dir = tempfile::Builder::new()
            .prefix("ateam-faulty-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("engine.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let injected = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicBool::new(true));
        let rule: Arc<Rule> = Arc::from(rule);
        let (count, done, hold) = (injected.clone(), stop.clone(), held.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if done.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                let (upstream, rule) = (upstream.clone(), rule.clone());
                let (count, hold) = (count.clone(), hold.clone());
                std::thread::spawn(move || serve(client, &upstream, &*rule, &count, &hold));
            }
        });
        FaultySocket {
            _dir: dir,
            path,
            injected,
            held,
            stop,
        }
    }

    pub fn uri(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// How many requests got their fault (a 500, or held) so far.
    pub fn injected(&self) -> usize {
        self.injected.load(Ordering::Relaxed)
    }

    /// Lets the held requests, and any later one the rule holds, go on.
    pub fn let_go(&self) {
        self.held.store(false, Ordering::Relaxed);
    }
}

impl Drop for FaultySocket {
    fn drop(&mut self) {
        self.let_go();
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so that it sees `stop`.
        let _ = UnixStream::connect(&self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One connection, one request: its head is read, then either the fault is answered or the
/// request goes on to the engine with `Connection: close`, so that the engine's answer ends
/// where its stream does and the client opens a new connection for its next request.
fn serve(
    client: UnixStream,
    upstream: &Path,
    rule: &Rule,
    injected: &AtomicUsize,
    held: &AtomicBool,
) {
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let end = line == "\r\n";
        if !end && !line.to_ascii_lowercase().starts_with("connection:") {
            head.push(line);
        }
        if end {
            break;
        }
    }
    let mut words = head.first().map(|l| l.split(' ')).into_iter().flatten();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let length = head.iter().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    let mut body = vec![0u8; length.unwrap_or(0)];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let mut client = client;
    let fault = rule(method, target, &body);
    if fault != Fault::Pass {
        injected.fetch_add(1, Ordering::Relaxed);
    }
    while fault == Fault::Hold && held.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    if fault == Fault::Fail {
        let body = br#"{"message":"a fault injected by the test"}"#;
        let _ = write!(
            client,
            "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = client.write_all(body);
        return;
    }
    let Ok(mut engine) = UnixStream::connect(upstream) else {
        return;
    };
    let mut out = head.concat().into_bytes();
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out.extend_from_slice(&body);
    // What the reader holds past that is the start of a body without a length.
    out.extend_from_slice(reader.buffer());
    if engine.write_all(&out).is_err() {
        return;
    }
    let mut to_engine = engine.try_clone().unwrap();
    let mut from_client = client.try_clone().unwrap();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_client, &mut to_engine);
        let _ = to_engine.shutdown(std::net::Shutdown::Write);
    });
    let mut buf = [0u8; 16 * 1024];
    loop {
        match engine.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if client.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = client.shutdown(std::net::Shutdown::Both);
}
