//! One member connection from its request to its verdict: routed (tunnelled, intercepted or
//! refused: a login's refresh host, the deny list), an intercepted one admitted under the
//! handshake bound, judged and connected (`decide`), logged, then handed to what carries it
//! (`tunnel`). Apart from the accept loop (`serve`) because this is the one path every
//! request takes, read here from start to end.

use std::sync::Arc;
use std::time::Instant;

use tokio::net::UnixStream;

use super::decide::decide;
use super::intercept::{self as icpt, Proxy as _, Route};
use super::request::{Request, answer, read_request, refuse};
use super::state::State;
use super::tunnel::{intercepted, tunnel};
use crate::core::intercept::Intercept;
use crate::servers::egress::log::{self, Event, Verdict};

/// One connection: its request read, routed (tunnelled, intercepted or refused), judged
/// against the allowlist, then connected; every outcome but a probe is logged.
pub(super) async fn handle(mut conn: UnixStream, state: Arc<State>) {
    let started = Instant::now();
    let mut buf = Vec::with_capacity(4096);
    let Some((head_len, req)) = read_request(&mut conn, &mut buf, &state).await else {
        return;
    };
    let mut event = logged(&req);
    let intercept = match route(&req, &state) {
        Route::Tunnel => None,
        Route::Refuse(reason) => {
            event.status = 403;
            event.reason = Some(reason.clone());
            state.record(event);
            let _ = answer(&mut conn, &refuse(403, reason)).await;
            return;
        }
        Route::Intercept(i) => {
            // Before anything is connected or computed: the handshake's place, or a refusal.
            let admitted = state
                .handshakes
                .lock()
                .expect("handshakes lock")
                .admit(Instant::now());
            match admitted {
                Ok(permit) => Some((i, permit)),
                Err(r) => {
                    if let Some(n) = r.log {
                        event.verdict = Verdict::Failed;
                        event.status = 503;
                        event.reason = Some(format!(
                            "{}: {n} refused since the last such line",
                            r.reason
                        ));
                        state.record(event);
                    }
                    let _ = answer(&mut conn, &refuse(503, r.reason)).await;
                    return;
                }
            }
        }
    };
    let learning = intercept.is_none() && state.learns(&req.host, req.port);
    event.learned = learning;
    let (addr, upstream) = match decide(&req, &state, learning).await {
        Ok((addr, stream)) => {
            event.addr = Some(addr.to_string());
            (addr, stream)
        }
        Err((addr, r)) => {
            if r.status >= 500 {
                event.verdict = Verdict::Failed;
            }
            event.addr = addr.map(|a| a.to_string());
            event.status = r.status;
            event.reason = Some(r.reason.clone());
            state.record(event);
            let _ = answer(&mut conn, &r).await;
            return;
        }
    };
    if let Some((i, permit)) = intercept {
        let rest = buf[head_len..].to_vec();
        return intercepted(conn, rest, (*i, permit), event, (addr, upstream), state).await;
    }
    if learning {
        event.reason = Some(format!(
            "learned: {}:{} {}",
            req.host,
            req.port,
            log::NOT_LISTED
        ));
    }
    event.verdict = Verdict::Allowed;
    event.status = 200;
    tracing::debug!(
        elapsed_us = started.elapsed().as_micros() as u64,
        "connected"
    );
    state.record(event);
    tunnel(conn, &buf[head_len..], &req, (addr, upstream), &state).await;
}

/// The line `req` gets in the member's log, as far as is known before it is judged: refused,
/// until `handle` finds otherwise.
fn logged(req: &Request) -> Event {
    Event {
        ts: Event::now(),
        verdict: Verdict::Refused,
        method: req.method.clone(),
        host: req.host.clone(),
        port: req.port,
        path: None,
        addr: None,
        status: 0,
        reason: None,
        count: None,
        learned: false,
    }
}

/// Where `req` goes by the policy in force: tunnelled, intercepted, or refused at once.
fn route(req: &Request, state: &State) -> Route {
    match state.rules() {
        // A member that uses a login never reaches where logins are refreshed, whatever its
        // list allows: refused before a name is resolved or anything connected.
        Ok(rules) => {
            match login_refusal(&rules.1, &req.host).or_else(|| state.denied(&req.host, req.port)) {
                Some(reason) => Route::Refuse(reason),
                None => icpt::route(&rules.1, &req.host, req.port, req.forward.is_none()),
            }
        }
        // `decide` refuses it, with the reason.
        Err(_) => Route::Tunnel,
    }
}

/// Why a member whose intercepts inject a login may not reach `host`, if it may not.
fn login_refusal(intercepts: &[Intercept], host: &str) -> Option<String> {
    if crate::core::intercept::injected_logins(intercepts).is_empty() {
        return None;
    }
    crate::core::logins::refused_host(host)
}
