//! ateam-bridge: a member's way out. Started by the gate inside a member whose grant has an
//! allow list, it listens on the member's own loopback (`HTTP_PROXY` points at it) and joins
//! each connection to the member's egress socket, `/.ateam/egress.sock`, where ateam's proxy
//! on the host judges every request. It knows nothing of the list: it only carries bytes.
//! In a team with `helperRequests`, the gate starts a second one, from `ATEAM_HELPERS_URL`'s
//! port to `/.ateam/helpers.sock`, where the member's helper server listens.
//!
//! Built by build.rs as a static, std-only binary so that it runs in any image, mounted
//! read-only. One thread serves every connection (poll(2) over non-blocking sockets), so the
//! bridge costs the member one process of its `pids` limit however many connections it opens.
//!
//! Bytes go from socket to socket through a pipe per direction with splice(2): the pipe holds
//! references to the sockets' pages, so the bridge copies nothing it carries and a connection
//! costs two pipes, not two buffers. Where the kernel refuses splice for these sockets
//! (EINVAL), a direction copies through a 64 KiB buffer instead.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::process::exit;

/// The pipe capacity asked for per direction: the bytes in flight, held as references to the
/// sockets' pages, not as copies. It counts against the user's pipe quota (docs/egress.md);
/// refused, a pipe keeps the kernel's default (64 KiB).
const PIPE_SIZE: usize = 256 * 1024;
/// The buffer per direction where splice is not supported (the copying fallback).
const BUF: usize = 64 * 1024;
/// The send buffer asked for on the Unix socket to the proxy (the proxy asks the same for its
/// side): fewer, bigger batches per wake-up than the default 208 KiB; capped by the kernel at
/// net.core.wmem_max.
const UNIX_SNDBUF: i32 = 1024 * 1024;

#[repr(C)]
struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}

const POLLIN: i16 = 0x1;
const POLLOUT: i16 = 0x4;
const O_NONBLOCK: i32 = 0o4000;
const O_CLOEXEC: i32 = 0o2000000;
const F_SETPIPE_SZ: i32 = 1031;
const SPLICE_F_MOVE: u32 = 1;
const SPLICE_F_NONBLOCK: u32 = 2;
const EINVAL: i32 = 22;
const SOL_SOCKET: i32 = 1;
const SO_SNDBUF: i32 = 7;

unsafe extern "C" {
    fn poll(fds: *mut PollFd, nfds: u64, timeout: i32) -> i32;
    fn pipe2(fds: *mut i32, flags: i32) -> i32;
    fn setsockopt(fd: i32, level: i32, name: i32, value: *const i32, len: u32) -> i32;
    fn fcntl(fd: i32, cmd: i32, ...) -> i32;
    fn splice(
        fd_in: i32,
        off_in: *mut i64,
        fd_out: i32,
        off_out: *mut i64,
        len: usize,
        flags: u32,
    ) -> isize;
}

/// `--stdio SOCKET`: joins standard input and output to the socket, for an agent that
/// starts an MCP server as a command (the team's tools, `/.ateam/mcp.sock`). Two threads,
/// one per direction; each line the server sends is written out as it comes.
fn stdio(socket: &str) -> ! {
    let conn = match UnixStream::connect(socket) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ateam-bridge: cannot reach {socket}: {e}");
            exit(1);
        }
    };
    let mut up = match conn.try_clone() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ateam-bridge: {e}");
            exit(1);
        }
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut up);
        let _ = up.shutdown(Shutdown::Write);
    });
    let mut down = conn;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; BUF];
    loop {
        match down.read(&mut buf) {
            Ok(0) => exit(0),
            Ok(n) => {
                if out.write_all(&buf[..n]).and_then(|()| out.flush()).is_err() {
                    exit(0);
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => exit(1),
        }
    }
}

fn main() {
    let mut argv = std::env::args().skip(1);
    if let (Some(flag), Some(socket), None) = (argv.next(), argv.next(), argv.next())
        && flag == "--stdio"
    {
        stdio(&socket);
    }
    let mut listen = String::from("127.0.0.1:3128");
    let mut socket = String::from("/.ateam/egress.sock");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--listen", Some(v)) => listen = v,
            ("--socket", Some(v)) => socket = v,
            _ => {
                eprintln!(
                    "usage: ateam-bridge [--listen ADDR] [--socket PATH] | ateam-bridge --stdio PATH"
                );
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

/// Where one direction's bytes wait between reading and writing.
enum Way {
    /// In a pipe (moved with splice(2), not copied through this process): `held` bytes.
    Spliced {
        read: File,
        write: File,
        held: usize,
    },
    /// In memory, `buf[start..end]`: where the kernel refuses splice for these sockets.
    Copied {
        buf: Box<[u8]>,
        start: usize,
        end: usize,
    },
}

impl Way {
    fn new() -> Way {
        let mut fds = [-1i32; 2];
        if unsafe { pipe2(fds.as_mut_ptr(), O_NONBLOCK | O_CLOEXEC) } != 0 {
            return Way::copied(Vec::new());
        }
        let (read, write) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
        unsafe { fcntl(write.as_raw_fd(), F_SETPIPE_SZ, PIPE_SIZE as i32) };
        Way::Spliced {
            read,
            write,
            held: 0,
        }
    }

    fn copied(held: Vec<u8>) -> Way {
        let end = held.len();
        let mut buf = held;
        buf.resize(BUF.max(end), 0);
        Way::Copied {
            buf: buf.into_boxed_slice(),
            start: 0,
            end,
        }
    }
}

fn move_bytes(from: i32, to: i32, len: usize) -> std::io::Result<usize> {
    let n = unsafe {
        splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            SPLICE_F_MOVE | SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One direction of a connection: bytes read from one side, not yet written to the other.
struct Pipe {
    way: Way,
    /// The reading side said end of file.
    eof: bool,
    /// ...and everything was passed on, and the writing side half-closed.
    done: bool,
}

impl Pipe {
    fn new() -> Pipe {
        Pipe {
            way: Way::new(),
            eof: false,
            done: false,
        }
    }

    fn wants_read(&self) -> bool {
        !self.eof
            && match &self.way {
                // Only into an empty pipe: a pipe counts pages, not bytes, so one with room
                // for bytes may still refuse more, and the socket would wake poll in vain.
                Way::Spliced { held, .. } => *held == 0,
                Way::Copied { buf, end, .. } => *end < buf.len(),
            }
    }

    fn wants_write(&self) -> bool {
        match &self.way {
            Way::Spliced { held, .. } => *held > 0,
            Way::Copied { start, end, .. } => start < end,
        }
    }

    /// Reads what `from` has into the free space; false on an error (the connection is over).
    fn fill<R: Read + AsRawFd>(&mut self, from: &mut R) -> bool {
        while self.wants_read() {
            let got = match &mut self.way {
                Way::Spliced { write, held, .. } => {
                    match move_bytes(from.as_raw_fd(), write.as_raw_fd(), PIPE_SIZE) {
                        Ok(n) => {
                            *held += n;
                            Ok(n)
                        }
                        Err(e) if e.raw_os_error() == Some(EINVAL) => {
                            self.way = Way::copied(Vec::new());
                            continue;
                        }
                        Err(e) => Err(e),
                    }
                }
                Way::Copied { buf, end, .. } => from.read(&mut buf[*end..]).inspect(|n| *end += n),
            };
            match got {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// Writes what it holds to `to`; at end of file with nothing left, half-closes `to`.
    fn drain<W: Write + AsRawFd>(&mut self, to: &mut W, shut: impl Fn(&W)) -> bool {
        while self.wants_write() {
            let put = match &mut self.way {
                Way::Spliced { read, held, .. } => {
                    match move_bytes(read.as_raw_fd(), to.as_raw_fd(), *held) {
                        Ok(n) => {
                            *held -= n;
                            Ok(n)
                        }
                        Err(e) if e.raw_os_error() == Some(EINVAL) => {
                            // Take back what the pipe holds, and copy from now on.
                            let mut out = vec![0u8; *held];
                            if read.read_exact(&mut out).is_err() {
                                return false;
                            }
                            self.way = Way::copied(out);
                            continue;
                        }
                        Err(e) => Err(e),
                    }
                }
                Way::Copied { buf, start, end } => {
                    to.write(&buf[*start..*end]).inspect(|n| *start += n)
                }
            };
            match put {
                Ok(0) => return false,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if let Way::Copied { start, end, .. } = &mut self.way {
            (*start, *end) = (0, 0);
        }
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

/// Errors of accept that mean "out of descriptors or memory for now" (EMFILE, ENFILE,
/// ENOBUFS, ENOMEM): the pending connection stays, so the listener stays readable.
const EXHAUSTED: [i32; 4] = [24, 23, 105, 12];
/// The first pause of accepting after such an error, and the longest (it doubles).
const PAUSE_FIRST_MS: i32 = 10;
const PAUSE_MAX_MS: i32 = 1000;

fn serve(listener: &TcpListener, socket: &str) {
    let mut conns: Vec<Conn> = Vec::new();
    let mut fds: Vec<PollFd> = Vec::new();
    // While out of descriptors, the listener is left out of poll until this deadline, so
    // that its pending connection does not wake the loop again and again.
    let mut paused: Option<std::time::Instant> = None;
    let mut pause_ms = PAUSE_FIRST_MS;
    loop {
        let timeout = match paused {
            Some(until) => {
                let left = until.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    paused = None;
                    -1
                } else {
                    left.as_millis().max(1) as i32
                }
            }
            None => -1,
        };
        fds.clear();
        fds.push(PollFd {
            fd: if paused.is_some() {
                -1
            } else {
                listener.as_raw_fd()
            },
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
        let n = unsafe { poll(fds.as_mut_ptr(), fds.len() as u64, timeout) };
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
            match accept(listener, socket, &mut conns) {
                Accepted::AllThereWas => pause_ms = PAUSE_FIRST_MS,
                Accepted::Exhausted => {
                    paused = Some(
                        std::time::Instant::now()
                            + std::time::Duration::from_millis(pause_ms as u64),
                    );
                    pause_ms = (pause_ms * 2).min(PAUSE_MAX_MS);
                }
            }
        }
    }
}

/// How an accept round ended.
enum Accepted {
    /// Nothing more is pending (or one connection failed on its own).
    AllThereWas,
    /// Out of descriptors or memory: accept again after a pause.
    Exhausted,
}

fn accept(listener: &TcpListener, socket: &str, conns: &mut Vec<Conn>) -> Accepted {
    loop {
        let tcp = match listener.accept() {
            Ok((t, _)) => t,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Accepted::AllThereWas,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.raw_os_error().is_some_and(|c| EXHAUSTED.contains(&c)) => {
                return Accepted::Exhausted;
            }
            Err(_) => return Accepted::AllThereWas,
        };
        let _ = tcp.set_nodelay(true);
        match UnixStream::connect(socket) {
            Ok(unix) => {
                unsafe {
                    setsockopt(unix.as_raw_fd(), SOL_SOCKET, SO_SNDBUF, &UNIX_SNDBUF, 4);
                }
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
