//! What carries an allowed connection once its upstream is open: a CONNECT tunnel or a plain
//! HTTP request forwarded, relayed until either side closes or the policy no longer allows
//! it; or, for a host with rules, the member's TLS handed to `intercept::serve`. Apart from
//! `connection`, which decides, because this part only carries what was decided.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UnixStream};

use super::intercept::{self as icpt, Proxy as _};
use super::relay;
use super::request::{Request, answer, refuse};
use super::state::State;
use super::{CONNECT_TIMEOUT, HEAD_TIMEOUT};
use crate::core::intercept::Intercept;
use crate::servers::egress::log::{Event, Verdict};

/// Carries an allowed tunnel (or forwarded request) until it ends, or until what it reaches
/// is no longer allowed (then it is closed, and the log says so).
pub(super) async fn tunnel(
    conn: UnixStream,
    rest: &[u8],
    req: &Request,
    (addr, upstream): (SocketAddr, TcpStream),
    state: &State,
) {
    tokio::select! {
        () = connected(conn, rest, req, upstream) => {}
        () = state.revoked(&req.host, req.port, false) => {
            state.record(Event {
                ts: Event::now(),
                verdict: Verdict::Refused,
                method: req.method.clone(),
                host: req.host.clone(),
                port: req.port,
                path: None,
                addr: Some(addr.to_string()),
                status: 403,
                reason: Some(format!("{}:{} is no longer in this member's allow list: its open connection is closed", req.host, req.port)),
                count: None,
                learned: false,
            });
        }
    }
}

/// An allowed connection, once its upstream is open: a CONNECT is told so, a plain
/// request's head is sent on, what the client sent past its head follows, and the bytes
/// are relayed both ways until either side closes.
async fn connected(mut conn: UnixStream, rest: &[u8], req: &Request, mut upstream: TcpStream) {
    let _ = upstream.set_nodelay(true);
    let sent = match &req.forward {
        None => {
            conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
        }
        Some(head) => upstream.write_all(head).await,
    };
    if sent.is_err() || (!rest.is_empty() && upstream.write_all(rest).await.is_err()) {
        return;
    }
    let _ = relay::relay(&conn, &upstream).await;
}

/// A CONNECT to a host with rules: its certificate and secret read (or 503), then the
/// member's TLS served by `intercept::serve`. Each request inside is logged; the CONNECT
/// itself only when it fails.
pub(super) async fn intercepted(
    mut conn: UnixStream,
    rest: Vec<u8>,
    (i, permit): (Intercept, tokio::sync::OwnedSemaphorePermit),
    mut event: Event,
    upstream: (SocketAddr, TcpStream),
    state: Arc<State>,
) {
    let prepared = match state
        .intercepts()
        .and_then(|f| state.prepared.lock().expect("prepared lock").get(&i, &f))
    {
        Ok(p) => p,
        Err(reason) => {
            event.verdict = Verdict::Failed;
            event.status = 503;
            event.reason = Some(reason.clone());
            state.record(event);
            let _ = answer(&mut conn, &refuse(503, reason)).await;
            return;
        }
    };
    if conn
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let member = icpt::Prefixed {
        head: rest,
        inner: conn,
    };
    let accepted = icpt::Accepted {
        host: event.host,
        port: event.port,
        i,
        upstream,
        prepared,
        permit,
        limits: icpt::Limits {
            head: HEAD_TIMEOUT,
            connect: CONNECT_TIMEOUT,
        },
    };
    icpt::serve(member, accepted, state).await;
}
