//! The proxy's accept loop: connections served at once up to a bound its descriptor limit
//! fits (the rest answered 503 at once, and that logged at most once a minute), accept
//! failures waited out, housekeeping (its socket still its own, the host's addresses, the
//! policy looked at again), and its end (SIGTERM) and reload (SIGHUP). Apart from `run`,
//! which sets the process up, and from `connection`, which serves one connection.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{UnixListener, UnixStream};

use super::Config;
use super::connection::handle;
use super::intercept::Proxy as _;
use super::state::{State, own_addresses};
use crate::servers::egress::ProxyError;
use crate::servers::egress::log::{Event, Verdict};

/// Connections served at once, at most; more are answered 503 and closed at once, so that
/// a member holding thousands open costs the host a bounded number of descriptors and no
/// spinning. An agent uses a handful.
const MAX_CONNECTIONS: usize = 256;
/// Descriptors one relayed connection holds: both sockets and a pipe per direction.
const FDS_PER_CONNECTION: u64 = 6;
/// Descriptors kept for everything else (the listener, the log, the runtime, resolving).
const FDS_SPARE: u64 = 64;
/// How often a refusal for being over the bound is written to the member's log, at most.
const OVERLOAD_LOG_EVERY: Duration = Duration::from_secs(60);
/// How often the proxy looks at its socket and the host's addresses.
const HOUSEKEEPING: Duration = Duration::from_secs(5);

/// Accepts connections, each served on a task of its own while a slot is free, until
/// SIGTERM or until its socket is no longer `still_ours`; reads the policy again on SIGHUP,
/// and looks at its socket, the host's addresses and the policy every `HOUSEKEEPING`.
pub(super) async fn serve(
    listener: UnixListener,
    state: Arc<State>,
    cfg: &Config,
    still_ours: impl Fn() -> bool,
) -> Result<(), ProxyError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ProxyError::Io { path, source }
    };
    let bound =
        connection_bound(rustix::process::getrlimit(rustix::process::Resource::Nofile).current);
    let slots = Arc::new(tokio::sync::Semaphore::new(bound));
    let mut backoff = crate::detached::Backoff::default();
    let mut over = Overload::default();
    let mut pausing = false;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(io(&cfg.socket))?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(io(&cfg.socket))?;
    let mut tick = tokio::time::interval(HOUSEKEEPING);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let conn = match accepted {
                    Ok((conn, _)) => conn,
                    Err(e) => {
                        if let Some(pause) = backoff.after(&e) {
                            // Once per run of failures: proxy.err stays small.
                            if !pausing {
                                tracing::warn!(error = %e, "accept failed; pausing 10 ms..1 s until it works");
                                pausing = true;
                            }
                            tokio::time::sleep(pause).await;
                        }
                        continue;
                    }
                };
                backoff.reset();
                pausing = false;
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    over.refuse(&conn, bound, &state);
                    continue;
                };
                let state = state.clone();
                // Ended tasks are taken as new ones come: a flood of short connections
                // must not pile up their handles until the next tick.
                while tasks.try_join_next().is_some() {}
                tasks.spawn(async move {
                    handle(conn, state).await;
                    drop(permit);
                });
            }
            _ = tick.tick() => {
                // The socket removed or replaced: this proxy is no longer the member's.
                if !still_ours() {
                    return Ok(());
                }
                *state.own.lock().expect("own lock") = own_addresses();
                // A changed policy reaches idle connections too (`State::revoked`).
                let _ = (state.rules(), state.intercepts());
                while tasks.try_join_next().is_some() {}
            }
            _ = hup.recv() => state.reload(),
            _ = term.recv() => break,
        }
    }
    // Removed by the one who stops it (ateam, which may enter the private folders).
    Ok(())
}

/// How many connections this proxy serves at once: `MAX_CONNECTIONS`, or fewer when its
/// descriptor limit (`files`) would run out first.
fn connection_bound(files: Option<u64>) -> usize {
    let fit = files.map_or(u64::MAX, |f| {
        f.saturating_sub(FDS_SPARE) / FDS_PER_CONNECTION
    });
    (fit.min(MAX_CONNECTIONS as u64) as usize).max(1)
}

/// Connections refused for being over the bound, and when that was last logged.
#[derive(Default)]
struct Overload {
    refused: u64,
    logged: Option<Instant>,
}

impl Overload {
    /// Answers 503 without waiting (the answer fits in a new socket's buffer; if not, the
    /// member gets a bare close) and drops the connection; logs it at most once a minute.
    fn refuse(&mut self, conn: &UnixStream, bound: usize, state: &State) {
        let reason = format!("over {bound} connections at once");
        let head = format!(
            "HTTP/1.1 503 ateam egress: {reason}\r\nContent-Length: 0\r\nConnection: close\r\nX-Ateam-Egress: refused\r\n\r\n"
        );
        let flags = rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL;
        let _ = rustix::net::send(conn, head.as_bytes(), flags);
        self.refused += 1;
        if self
            .logged
            .is_some_and(|t| t.elapsed() < OVERLOAD_LOG_EVERY)
        {
            return;
        }
        tracing::warn!(
            bound,
            refused = self.refused,
            "connections over the bound refused"
        );
        state.record(Event {
            ts: Event::now(),
            verdict: Verdict::Failed,
            // Not read: nothing of a request to name.
            method: "-".into(),
            host: "-".into(),
            port: 0,
            path: None,
            addr: None,
            status: 503,
            reason: Some(format!("{reason}: {} refused so far", self.refused)),
            count: None,
            learned: false,
        });
        self.logged = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_bound_fits_the_descriptor_limit() {
        assert_eq!(connection_bound(Some(1_048_576)), MAX_CONNECTIONS);
        assert_eq!(connection_bound(None), MAX_CONNECTIONS);
        // A soft limit of 1024: 160 relayed connections, 960 descriptors, and room to spare.
        assert_eq!(connection_bound(Some(1024)), 160);
        assert_eq!(connection_bound(Some(10)), 1);
    }
}
