//! Connecting to an address already judged, within `CONNECT_TIMEOUT`; for a port of this
//! host's own, only to a listener of the uids the policy trusts, looked up in the kernel's
//! table before connecting and again for the socket that accepted. Apart from `decide`
//! because this is how a connection is made, whatever decided it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;

use super::CONNECT_TIMEOUT;
use super::request::{Refused, refuse};
use crate::servers::egress::listeners::{self, Owners};

/// Connects to `a`; with `owners`, only to a listener one of them owns (403 otherwise):
/// judged from the kernel's table before connecting, so that a foreign listener gets no
/// connection, and again for the socket that accepted, before any byte is sent, so that one
/// that took the port in between gets nothing either. `detail` is the failure alone.
pub(super) async fn connect(a: SocketAddr, owners: Option<&Owners>) -> Result<TcpStream, Refused> {
    let failed = |status: u16, detail: String| Refused {
        status,
        reason: format!("cannot connect to {detail}"),
        detail,
    };
    if let Some(o) = owners {
        let table = listeners::table().map_err(|e| refuse(503, e.to_string()))?;
        if let Some(l) = listeners::listeners_for(&table, a)
            .into_iter()
            .find(|l| !o.trusts(l.uid))
        {
            return Err(refuse(403, o.refusal(l.local, l.uid)));
        }
    }
    let s = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(failed(502, format!("{a}: {e}"))),
        Err(_) => {
            let mut r = failed(504, format!("{a}: timed out"));
            r.reason = format!("connecting to {a} timed out");
            return Err(r);
        }
    };
    match owners {
        Some(o) => accepted_by_owner(s, a, o).await,
        None => Ok(s),
    }
}

/// The connection `s` to `a`, if the socket that accepted it is of `owners`; closed (and
/// 403) if not, or if the kernel's table never shows it.
async fn accepted_by_owner(s: TcpStream, a: SocketAddr, o: &Owners) -> Result<TcpStream, Refused> {
    let (Ok(ours), Ok(peer)) = (s.local_addr(), s.peer_addr()) else {
        return Err(refuse(502, format!("the connection to {a} closed at once")));
    };
    // The accepted socket is in the table once the handshake is, which `connect` waited
    // for; a few short looks cover a table read in the middle of its update.
    for _ in 0..5 {
        let table = listeners::table().map_err(|e| refuse(503, e.to_string()))?;
        if let Some(got) = listeners::accepted_by(&table, ours, peer) {
            if o.trusts(got.uid) {
                return Ok(s);
            }
            drop(s);
            return Err(refuse(403, o.refusal(peer, got.uid)));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Err(refuse(
        403,
        format!("cannot tell whose listener accepted the connection to {peer}"),
    ))
}
