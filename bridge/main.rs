//! ateam-bridge: a member's way out. Started by the gate inside a member whose grant has an
//! allow list, it listens on the member's own loopback (`HTTP_PROXY` points at it) and joins
//! each connection to the member's egress socket, `/.ateam/egress.sock`, where ateam's proxy
//! on the host judges every request. It knows nothing of the list: it only carries bytes.
//! In a team with `helperRequests`, the gate starts a second one, from `ATEAM_HELPERS_URL`'s
//! port to `/.ateam/helpers.sock`, where the member's helper server listens.
//!
//! Built by build.rs as a static, std-only binary so that it runs in any image, mounted
//! read-only. One thread serves every connection (poll(2) over non-blocking sockets), so the
//! bridge costs the member one process of its `pids` limit and 128 KiB of buffers per open
//! connection, however many it opens.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::exit;

/// Bytes held per direction of a connection.
const BUF: usize = 64 * 1024;

#[repr(C)]
struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}

const POLLIN: i16 = 0x1;
const POLLOUT: i16 = 0x4;

unsafe extern "C" {
    fn poll(fds: *mut PollFd, nfds: u64, timeout: i32) -> i32;
}

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
    if let Err(e) = listener.set_nonblocking(true) {
        eprintln!("ateam-bridge: {e}");
        exit(1);
    }
    // Tell the gate it may start the member's command.
    {
        let mut out = std::io::stdout();
        let _ = out.write_all(b"ready\n").and_then(|()| out.flush());
    }
    serve(&listener, &socket);
}

/// One direction of a connection: bytes read from one side, not yet written to the other.
struct Pipe {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The reading side said end of file.
    eof: bool,
    /// ...and everything was passed on, and the writing side half-closed.
    done: bool,
}

impl Pipe {
    fn new() -> Pipe {
        Pipe {
            buf: vec![0u8; BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            eof: false,
            done: false,
        }
    }

    fn wants_read(&self) -> bool {
        !self.eof && self.end < self.buf.len()
    }

    fn wants_write(&self) -> bool {
        self.start < self.end
    }

    /// Reads what `from` has into the free space; false on an error (the connection is over).
    fn fill(&mut self, from: &mut impl Read) -> bool {
        while self.wants_read() {
            match from.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// Writes what it holds to `to`; at end of file with nothing left, half-closes `to`.
    fn drain<W: Write>(&mut self, to: &mut W, shut: impl Fn(&W)) -> bool {
        while self.wants_write() {
            match to.write(&self.buf[self.start..self.end]) {
                Ok(0) => return false,
                Ok(n) => self.start += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        self.start = 0;
        self.end = 0;
        if self.eof && !self.done {
            shut(to);
            self.done = true;
        }
        true
    }
}

struct Conn {
    tcp: TcpStream,
    unix: UnixStream,
    /// Member to proxy.
    up: Pipe,
    /// Proxy to member.
    down: Pipe,
}

impl Conn {
    fn interest(&self) -> (i16, i16) {
        let mut tcp = 0;
        let mut unix = 0;
        if self.up.wants_read() {
            tcp |= POLLIN;
        }
        if self.down.wants_write() {
            tcp |= POLLOUT;
        }
        if self.down.wants_read() {
            unix |= POLLIN;
        }
        if self.up.wants_write() {
            unix |= POLLOUT;
        }
        (tcp, unix)
    }

    /// Moves what can be moved now; false when the connection is over.
    fn step(&mut self) -> bool {
        let ok = self.up.fill(&mut self.tcp)
            && self
                .up
                .drain(&mut self.unix, |u| drop(u.shutdown(Shutdown::Write)))
            && self.down.fill(&mut self.unix)
            && self
                .down
                .drain(&mut self.tcp, |t| drop(t.shutdown(Shutdown::Write)));
        ok && !(self.up.done && self.down.done)
    }
}

fn serve(listener: &TcpListener, socket: &str) {
    let mut conns: Vec<Conn> = Vec::new();
    let mut fds: Vec<PollFd> = Vec::new();
    loop {
        fds.clear();
        fds.push(PollFd {
            fd: listener.as_raw_fd(),
            events: POLLIN,
            revents: 0,
        });
        for c in &conns {
            let (t, u) = c.interest();
            // Nothing asked of a side: left out of this round (poll skips a negative fd), so
            // that a hang-up it cannot act on yet does not wake the loop again and again.
            fds.push(PollFd {
                fd: if t == 0 { -1 } else { c.tcp.as_raw_fd() },
                events: t,
                revents: 0,
            });
            fds.push(PollFd {
                fd: if u == 0 { -1 } else { c.unix.as_raw_fd() },
                events: u,
                revents: 0,
            });
        }
        let n = unsafe { poll(fds.as_mut_ptr(), fds.len() as u64, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == ErrorKind::Interrupted {
                continue;
            }
            eprintln!("ateam-bridge: poll: {}", std::io::Error::last_os_error());
            exit(1);
        }
        // Connections with news (ready, hung up or in error) move on. From the last to the
        // first, so that removing one (the last takes its place) disturbs none still to come.
        for i in (0..conns.len()).rev() {
            let news = fds[1 + 2 * i].revents != 0 || fds[2 + 2 * i].revents != 0;
            if news && !conns[i].step() {
                conns.swap_remove(i);
            }
        }
        if fds[0].revents != 0 {
            accept(listener, socket, &mut conns);
        }
    }
}

fn accept(listener: &TcpListener, socket: &str, conns: &mut Vec<Conn>) {
    loop {
        let tcp = match listener.accept() {
            Ok((t, _)) => t,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // Out of descriptors or memory for now: try again at the next round.
            Err(_) => return,
        };
        let _ = tcp.set_nodelay(true);
        match UnixStream::connect(socket) {
            Ok(unix) => {
                if tcp.set_nonblocking(true).is_ok() && unix.set_nonblocking(true).is_ok() {
                    let mut c = Conn {
                        tcp,
                        unix,
                        up: Pipe::new(),
                        down: Pipe::new(),
                    };
                    if c.step() {
                        conns.push(c);
                    }
                }
            }
            // Without its server the member gets an HTTP answer that says so, not a reset.
            Err(e) => {
                let what = if socket.ends_with("helpers.sock") {
                    "helper server"
                } else {
                    "egress proxy"
                };
                let body = format!("ateam {what} not reachable at {socket}: {e}\n");
                let mut tcp = tcp;
                let _ = write!(
                    tcp,
                    "HTTP/1.1 502 ateam {what} not running\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        }
    }
}
