//! The allowlist's decision on a request its route did not refuse: its name judged (or let
//! past by a learning run), resolved by the proxy itself, each address judged, and the first
//! that passes connected (`upstream`), so that the address judged is the one used; the
//! host's own loopback (`host.ateam.internal`) by its entry alone, never resolved. Apart
//! from `connection` because this judgement is the proxy's reason to be, read on its own.

use std::net::SocketAddr;

use tokio::net::TcpStream;

use super::CONNECT_TIMEOUT;
use super::request::{Refused, Request, refuse};
use super::state::State;
use super::upstream::connect;
use crate::core::egress::{Allowlist, HOST_SERVICE, HOST_SERVICE_ADDRS, Host};
use crate::servers::egress::listeners::{self, Owners};
use crate::servers::egress::log;

/// Judges a request by name, resolves it, judges each address, and connects to the first
/// address that passes. The error carries the address judged, if any. `learning`: a
/// learning run lets it past the list (its address is judged all the same).
pub(super) async fn decide(
    req: &Request,
    state: &State,
    learning: bool,
) -> Result<(SocketAddr, TcpStream), (Option<SocketAddr>, Refused)> {
    let rules = state.list().map_err(|e| (None, refuse(503, e)))?;
    let list = &rules.0;
    let host = Host::parse(&req.host).ok_or_else(|| {
        (
            None,
            refuse(400, format!("`{}` is not a host name", req.host)),
        )
    })?;
    if !list.allows(&host, req.port) && !learning {
        return Err((
            None,
            refuse(403, format!("{host}:{} {}", req.port, log::NOT_LISTED)),
        ));
    }
    // The host's loopback by name: never resolved (no DNS answer can move it), and only
    // for an entry naming it with this very port.
    if matches!(&host, Host::Name(n) if n == HOST_SERVICE) {
        return host_service(list, req.port, &state.owners()).await;
    }
    let addrs: Vec<SocketAddr> = match &host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, req.port)],
        Host::Name(n) => {
            match tokio::time::timeout(
                CONNECT_TIMEOUT,
                tokio::net::lookup_host((n.as_str(), req.port)),
            )
            .await
            {
                Ok(Ok(a)) => a.collect(),
                Ok(Err(e)) => return Err((None, refuse(502, format!("cannot resolve {n}: {e}")))),
                Err(_) => return Err((None, refuse(504, format!("resolving {n} timed out")))),
            }
        }
    };
    let own = state.own.lock().expect("own lock").clone();
    let mut first_refusal = None;
    let mut last_error = None;
    for a in addrs {
        if let Err(why) = list.judge_address(a.ip(), a.port(), &own) {
            first_refusal.get_or_insert((a, why));
            continue;
        }
        // A port of this host's own: only its person's (or a named uid's) listener.
        let owners = listeners::on_this_host(a.ip(), &own).then(|| state.owners());
        match connect(a, owners.as_ref()).await {
            Ok(s) => return Ok((a, s)),
            Err(r) if r.status == 403 => return Err((Some(a), r)),
            Err(r) => last_error = Some((a, r)),
        }
    }
    if let Some((a, r)) = last_error {
        return Err((Some(a), r));
    }
    match first_refusal {
        Some((a, why)) => Err((
            Some(a),
            refuse(
                403,
                match host {
                    Host::Ip(_) => format!("address {why}"),
                    Host::Name(n) => format!("{n} resolves to {why}"),
                },
            ),
        )),
        None => Err((None, refuse(502, format!("{} has no address", req.host)))),
    }
}

/// `host.ateam.internal:PORT`: connects to the host's loopback on PORT, IPv4 first, and
/// only to a listener of `owners`: one of another uid is refused, not passed over.
async fn host_service(
    list: &Allowlist,
    port: u16,
    owners: &Owners,
) -> Result<(SocketAddr, TcpStream), (Option<SocketAddr>, Refused)> {
    if !list.allows_host_service(port) {
        return Err((
            None,
            refuse(403, format!("{HOST_SERVICE}:{port} {}", log::NOT_LISTED)),
        ));
    }
    let mut why = Vec::new();
    let mut status = 502;
    for ip in HOST_SERVICE_ADDRS {
        let a = SocketAddr::new(ip, port);
        match connect(a, Some(owners)).await {
            Ok(s) => return Ok((a, s)),
            Err(r) if r.status == 403 => return Err((Some(a), r)),
            Err(r) => {
                if r.status == 504 {
                    status = 504;
                }
                why.push(r.detail);
            }
        }
    }
    let first = SocketAddr::new(HOST_SERVICE_ADDRS[0], port);
    let reason = format!(
        "nothing answers on the host's loopback port {port} ({})",
        why.join("; ")
    );
    Err((Some(first), refuse(status, reason)))
}
