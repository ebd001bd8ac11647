//! The kernel floor of scripts/bench-egress.py: a relay with no proxy logic at all. It
//! accepts on LISTEN, connects to TARGET (each a TCP port on loopback or a Unix socket path)
//! and moves the bytes both ways with splice(2) through a 256 KiB pipe per direction; a Unix
//! socket's send buffer is 1 MiB, as ateam's bridge and proxy ask. THREADS threads, started
//! before the first connection, each accept one connection at a time and serve it with
//! poll(2) over its two sockets, so that no connection waits for a thread to be created.
//! What it costs is what the sockets and the hops cost the kernel.
//!
//! Built by the benchmark: rustc -O --edition=2021 scripts/bench-relay.rs (std only).
//! Usage: bench-relay LISTEN TARGET; prints `ready` once listening.

use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;

const THREADS: usize = 128;
const PIPE_SIZE: usize = 256 * 1024;
const UNIX_SNDBUF: i32 = 1024 * 1024;
const F_SETPIPE_SZ: i32 = 1031;
const SPLICE_F_MOVE: u32 = 1;
const SPLICE_F_NONBLOCK: u32 = 2;
const SOL_SOCKET: i32 = 1;
const SO_SNDBUF: i32 = 7;
const POLLIN: i16 = 1;
const POLLOUT: i16 = 4;
const EAGAIN: i32 = 11;

#[repr(C)]
struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}

extern "C" {
    fn pipe(fds: *mut i32) -> i32;
    fn close(fd: i32) -> i32;
    fn fcntl(fd: i32, cmd: i32, ...) -> i32;
    fn poll(fds: *mut PollFd, n: u64, timeout: i32) -> i32;
    fn setsockopt(fd: i32, level: i32, name: i32, value: *const i32, len: u32) -> i32;
    fn splice(a: i32, oa: *mut i64, b: i32, ob: *mut i64, len: usize, flags: u32) -> isize;
}

enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn prepared(self) -> Sock {
        match &self {
            Sock::Tcp(s) => {
                let _ = s.set_nodelay(true);
                let _ = s.set_nonblocking(true);
            }
            Sock::Unix(s) => {
                unsafe { setsockopt(s.as_raw_fd(), SOL_SOCKET, SO_SNDBUF, &UNIX_SNDBUF, 4) };
                let _ = s.set_nonblocking(true);
            }
        }
        self
    }
    fn connect(target: &str) -> std::io::Result<Sock> {
        Ok(if target.starts_with('/') {
            Sock::Unix(UnixStream::connect(target)?)
        } else {
            Sock::Tcp(TcpStream::connect((
                "127.0.0.1",
                target.parse::<u16>().unwrap_or(0),
            ))?)
        }
        .prepared())
    }
    fn fd(&self) -> RawFd {
        match self {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
        }
    }
    fn shut(&self) {
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(Shutdown::Write),
            Sock::Unix(s) => s.shutdown(Shutdown::Write),
        };
    }
}

/// One direction: a pipe, the bytes it holds, whether its source ended, whether it is done.
struct Way {
    r: i32,
    w: i32,
    held: usize,
    eof: bool,
    done: bool,
}

impl Way {
    fn new() -> Way {
        let mut p = [0i32; 2];
        unsafe {
            pipe(p.as_mut_ptr());
            fcntl(p[1], F_SETPIPE_SZ, PIPE_SIZE as i32);
        }
        Way {
            r: p[0],
            w: p[1],
            held: 0,
            eof: false,
            done: false,
        }
    }
    /// Moves what can be moved now; false on an error.
    fn step(&mut self, from: &Sock, to: &Sock) -> bool {
        let null = std::ptr::null_mut();
        let flags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;
        loop {
            if self.held == 0 && !self.eof {
                let n = unsafe { splice(from.fd(), null, self.w, null, PIPE_SIZE, flags) };
                match n {
                    0 => self.eof = true,
                    n if n > 0 => self.held = n as usize,
                    _ => return std::io::Error::last_os_error().raw_os_error() == Some(EAGAIN),
                }
            }
            while self.held > 0 {
                let m = unsafe { splice(self.r, null, to.fd(), null, self.held, flags) };
                if m <= 0 {
                    return m < 0 && std::io::Error::last_os_error().raw_os_error() == Some(EAGAIN);
                }
                self.held -= m as usize;
            }
            if self.eof {
                if !self.done {
                    to.shut();
                    self.done = true;
                }
                return true;
            }
        }
    }
}

impl Drop for Way {
    fn drop(&mut self) {
        unsafe {
            close(self.r);
            close(self.w);
        }
    }
}

fn serve(a: Sock, target: &str) {
    let Ok(b) = Sock::connect(target) else {
        return;
    };
    let (mut up, mut down) = (Way::new(), Way::new());
    loop {
        if !up.step(&a, &b) || !down.step(&b, &a) || (up.done && down.done) {
            return;
        }
        let want = |w: &Way| if w.held == 0 && !w.eof { POLLIN } else { 0 };
        let out = |w: &Way| if w.held > 0 { POLLOUT } else { 0 };
        let mut fds = [
            PollFd {
                fd: a.fd(),
                events: want(&up) | out(&down),
                revents: 0,
            },
            PollFd {
                fd: b.fd(),
                events: want(&down) | out(&up),
                revents: 0,
            },
        ];
        for f in &mut fds {
            if f.events == 0 {
                f.fd = -1;
            }
        }
        unsafe { poll(fds.as_mut_ptr(), 2, -1) };
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: bench-relay LISTEN TARGET");
        std::process::exit(2);
    }
    let target: Arc<str> = args[2].clone().into();
    enum L {
        Tcp(TcpListener),
        Unix(UnixListener),
    }
    let listener = Arc::new(if args[1].starts_with('/') {
        L::Unix(UnixListener::bind(&args[1]).expect("bind"))
    } else {
        L::Tcp(
            TcpListener::bind(("127.0.0.1", args[1].parse::<u16>().expect("port"))).expect("bind"),
        )
    });
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (listener, target) = (listener.clone(), target.clone());
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || loop {
                    let conn = match &*listener {
                        L::Tcp(l) => l.accept().map(|(c, _)| Sock::Tcp(c)),
                        L::Unix(l) => l.accept().map(|(c, _)| Sock::Unix(c)),
                    };
                    if let Ok(c) = conn {
                        serve(c.prepared(), &target);
                    }
                })
                .expect("thread")
        })
        .collect();
    let mut out = std::io::stdout();
    let _ = out.write_all(b"ready\n").and_then(|()| out.flush());
    for t in threads {
        let _ = t.join();
    }
}
