//! Moving a connection's bytes once the proxy let it through: member (Unix socket) <->
//! upstream (TCP), each direction on its own.
//!
//! The bytes go through a pipe with splice(2), not through the proxy's memory: since Linux
//! 6.5 splicing into a socket passes the pipe's pages on (MSG_SPLICE_PAGES) and TCP and Unix
//! stream sockets splice their received pages out without copying, so the proxy touches no
//! byte it carries. Where splice is refused for these descriptors (EINVAL: an old kernel, a
//! socket type without it) a direction falls back to read(2)/write(2) through a buffer,
//! keeping what the pipe already holds.
//!
//! Half-close is kept: end of file on one side, once everything read from it was passed on,
//! shuts the other side down for writing; the other direction goes on until its own end.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::{Interest, Ready};
use tokio::net::{TcpStream, UnixStream};

/// The pipe capacity asked for, per direction. Only what is in flight is held, and a pipe of
/// spliced pages references them rather than copying; a bigger pipe means fewer calls per
/// byte (256 KiB took a third less CPU than 64 KiB in the bridge). It counts against the
/// user's pipe quota (docs/egress.md); refused, the pipe keeps its default size.
const PIPE_SIZE: usize = 256 * 1024;
/// The buffer of the copying fallback, per direction.
const COPY_BUF: usize = 64 * 1024;
/// The send buffer asked for on the member's Unix socket: how much may be on the way to the
/// bridge. The default (net.core.wmem_default, 208 KiB) wakes the bridge for small batches;
/// 1 MiB gave downloads about a quarter more throughput here (docs/benchmarks-egress.md). The kernel
/// caps it at net.core.wmem_max.
const MEMBER_SNDBUF: usize = 1024 * 1024;

/// What the relay needs of a tokio socket: readiness and non-blocking calls on its descriptor.
pub(super) trait Socket: AsFd {
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<Ready>>;
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

impl Socket for TcpStream {
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<Ready>> {
        TcpStream::ready(self, interest)
    }
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        TcpStream::try_io(self, interest, f)
    }
}

impl Socket for UnixStream {
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<Ready>> {
        UnixStream::ready(self, interest)
    }
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        UnixStream::try_io(self, interest, f)
    }
}

/// Carries both directions between the member and upstream until both ended, or until one
/// fails (then both are dropped, as `tokio::io::copy_bidirectional` does).
pub(super) async fn relay(member: &UnixStream, upstream: &TcpStream) -> io::Result<()> {
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(member, MEMBER_SNDBUF);
    relay_with(member, upstream, Way::new).await
}

async fn relay_with(a: &impl Socket, b: &impl Socket, way: fn() -> Way) -> io::Result<()> {
    tokio::try_join!(pump(a, b, way()), pump(b, a, way()))?;
    Ok(())
}

/// One direction: fill from `from`, drain all of it into `to`, again, until `from` ends; then
/// shut `to` down for writing.
async fn pump(from: &impl Socket, to: &impl Socket, mut way: Way) -> io::Result<()> {
    loop {
        let n = retry(from, Interest::READABLE, || way.fill(from.as_fd())).await?;
        if n == 0 {
            break;
        }
        while way.held() > 0 {
            retry(to, Interest::WRITABLE, || way.drain(to.as_fd())).await?;
        }
    }
    rustix::net::shutdown(to, rustix::net::Shutdown::Write)?;
    Ok(())
}

/// Waits until `s` is ready for `interest` and runs `f`, again while it would block.
async fn retry<S: Socket, R>(
    s: &S,
    interest: Interest,
    mut f: impl FnMut() -> io::Result<R>,
) -> io::Result<R> {
    loop {
        s.ready(interest).await?;
        match s.try_io(interest, &mut f) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            r => return r,
        }
    }
}

/// Where one direction's bytes wait between reading and writing.
enum Way {
    /// In a pipe, `held` bytes of it.
    Spliced {
        read: OwnedFd,
        write: OwnedFd,
        held: usize,
    },
    /// In memory: `buf[start..end]`.
    Copied {
        buf: Box<[u8]>,
        start: usize,
        end: usize,
    },
}

fn splice_flags() -> SpliceFlags {
    SpliceFlags::MOVE | SpliceFlags::NONBLOCK
}

impl Way {
    fn new() -> Way {
        match rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK) {
            Ok((read, write)) => {
                let _ = rustix::pipe::fcntl_setpipe_size(&write, PIPE_SIZE);
                Way::Spliced {
                    read,
                    write,
                    held: 0,
                }
            }
            // Out of descriptors for a pipe: copy.
            Err(_) => Way::copied(Vec::new()),
        }
    }

    fn copied(held: Vec<u8>) -> Way {
        let end = held.len();
        let mut buf = held;
        buf.resize(COPY_BUF.max(end), 0);
        Way::Copied {
            buf: buf.into_boxed_slice(),
            start: 0,
            end,
        }
    }

    fn held(&self) -> usize {
        match self {
            Way::Spliced { held, .. } => *held,
            Way::Copied { start, end, .. } => end - start,
        }
    }

    /// Reads what `from` has (called only when nothing is held); 0 at end of file.
    fn fill(&mut self, from: BorrowedFd<'_>) -> io::Result<usize> {
        match self {
            Way::Spliced { write, held, .. } => {
                match rustix::pipe::splice(from, None, &*write, None, PIPE_SIZE, splice_flags()) {
                    Ok(n) => {
                        *held += n;
                        Ok(n)
                    }
                    Err(Errno::INVAL) => {
                        *self = Way::copied(Vec::new());
                        self.fill(from)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Way::Copied { buf, start, end } => {
                let n = rustix::io::read(from, &mut buf[..])?;
                (*start, *end) = (0, n);
                Ok(n)
            }
        }
    }

    /// Writes some of what is held to `to`.
    fn drain(&mut self, to: BorrowedFd<'_>) -> io::Result<()> {
        match self {
            Way::Spliced { read, held, .. } => {
                match rustix::pipe::splice(&*read, None, to, None, *held, splice_flags()) {
                    Ok(n) => {
                        *held -= n;
                        Ok(())
                    }
                    Err(Errno::INVAL) => {
                        // Take back what the pipe holds, and copy from now on.
                        let mut out = vec![0u8; *held];
                        let mut got = 0;
                        while got < out.len() {
                            got += rustix::io::read(&*read, &mut out[got..])?;
                        }
                        *self = Way::copied(out);
                        self.drain(to)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Way::Copied { buf, start, end } => {
                *start += rustix::io::write(to, &buf[*start..*end])?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Both ways, both forms, through real sockets: every byte arrives in order, and each
    /// side's end of file reaches the other only after its bytes.
    #[tokio::test]
    async fn bytes_and_ends_cross_in_both_directions() {
        for force_copy in [false, true] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (member, proxy_side) = UnixStream::pair().unwrap();
            let upstream = TcpStream::connect(addr).await.unwrap();
            let (mut server, _) = listener.accept().await.unwrap();
            let relay = tokio::spawn(async move {
                let way = if force_copy {
                    || Way::copied(Vec::new())
                } else {
                    Way::new
                };
                relay_with(&proxy_side, &upstream, way).await
            });
            let up: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
            let down: Vec<u8> = (0..5_000_000u32).map(|i| (i % 241) as u8).collect();
            let (mut mr, mut mw) = member.into_split();
            let send_up = {
                let up = up.clone();
                tokio::spawn(async move {
                    mw.write_all(&up).await.unwrap();
                    mw.shutdown().await.unwrap();
                })
            };
            let server_task = {
                let down = down.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    server.read_to_end(&mut got).await.unwrap();
                    server.write_all(&down).await.unwrap();
                    server.shutdown().await.unwrap();
                    got
                })
            };
            // A lost end of file would leave both sides waiting: a failure, not a hang.
            let mut got_down = Vec::new();
            tokio::time::timeout(Duration::from_secs(30), mr.read_to_end(&mut got_down))
                .await
                .expect("the member never saw the end of the download")
                .unwrap();
            send_up.await.unwrap();
            let got_up = tokio::time::timeout(Duration::from_secs(30), server_task)
                .await
                .expect("the server never saw the end of the upload")
                .unwrap();
            relay.await.unwrap().unwrap();
            assert!(
                got_up == up,
                "upstream bytes differ (copying: {force_copy})"
            );
            assert!(
                got_down == down,
                "downstream bytes differ (copying: {force_copy})"
            );
        }
    }
}
