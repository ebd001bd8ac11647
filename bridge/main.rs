//! ateam-bridge: a member's way out. Started by the gate inside a member whose grant has an
//! allow list, it listens on the member's own loopback (`HTTP_PROXY` points at it) and joins
//! each connection to the member's egress socket, `/.ateam/egress.sock`, where ateam's proxy
//! on the host judges every request. It knows nothing of the list: it only carries bytes.
//!
//! Built by build.rs as a static, std-only binary so that it runs in any image, mounted
//! read-only. Each connection costs two small threads (one per direction).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::exit;
use std::thread;

const STACK: usize = 64 * 1024;
const BUF: usize = 64 * 1024;

fn main() {
    let mut listen = String::from("127.0.0.1:3128");
    let mut socket = String::from("/.ateam/egress.sock");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--listen", Some(v)) => listen = v,
            ("--socket", Some(v)) => socket = v,
            _ => {
                eprintln!("usage: ateam-bridge [--listen ADDR] [--socket PATH]");
                exit(2);
            }
        }
    }
    let listener = match TcpListener::bind(&listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ateam-bridge: cannot listen on {listen}: {e}");
            exit(1);
        }
    };
    // Tell the gate it may start the member's command, then let go of the pipe.
    {
        let mut out = std::io::stdout();
        let _ = out.write_all(b"ready\n").and_then(|()| out.flush());
    }
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let socket = socket.clone();
        let _ = thread::Builder::new()
            .stack_size(STACK)
            .spawn(move || join(conn, &socket));
    }
}

/// Carries one connection to the proxy and back. Without a proxy the member gets an HTTP
/// answer that says so, not a silent reset.
fn join(tcp: TcpStream, socket: &str) {
    let _ = tcp.set_nodelay(true);
    let unix = match UnixStream::connect(socket) {
        Ok(u) => u,
        Err(e) => {
            let body = format!("ateam egress proxy not reachable at {socket}: {e}\n");
            let mut tcp = tcp;
            let _ = write!(
                tcp,
                "HTTP/1.1 502 ateam egress proxy not running\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            return;
        }
    };
    let (Ok(tcp2), Ok(unix2)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let up = thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || pump(tcp2, unix2, |u| u.shutdown(Shutdown::Write)));
    pump(unix, tcp, |t| t.shutdown(Shutdown::Write));
    if let Ok(h) = up {
        let _ = h.join();
    }
}

/// Copies `from` to `to` until end of file, then half-closes `to`.
fn pump<R: Read, W: Write>(mut from: R, mut to: W, close: impl FnOnce(&W) -> std::io::Result<()>) {
    let mut buf = vec![0u8; BUF];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = close(&to);
}
