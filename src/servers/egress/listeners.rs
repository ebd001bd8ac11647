//! Who owns a TCP socket on this host, read from the kernel (`/proc/net/tcp` and
//! `/proc/net/tcp6`, in the reader's network namespace). The proxy asks before it connects
//! a member to a port of the host's own (loopback, or one of its addresses), so that another
//! local user who bound the port first gets no connection, and after, so that a listener
//! swapped in between the look and the connect gets no byte.
//!
//! A row reads `sl local rem st queues timer retr uid timeout inode ...`; addresses are the
//! kernel's 32-bit words in hex, each in the host's byte order; ports are plain hex.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// `st` of a listening socket (`TCP_LISTEN`).
const LISTEN: u8 = 0x0A;

/// One row of the kernel's TCP table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Socket {
    /// Its local address (IPv4-mapped IPv6 reduced to IPv4).
    pub local: SocketAddr,
    /// Its peer's (`0.0.0.0:0` or `[::]:0` for a listener).
    pub remote: SocketAddr,
    /// Its TCP state (`0A`: listening, `01`: established, `03`: SYN received).
    pub state: u8,
    /// Whose it is: the uid that made it, or for an accepted one its listener's.
    pub uid: u32,
}

impl Socket {
    /// Whether this socket listens.
    pub fn listens(&self) -> bool {
        self.state == LISTEN
    }
}

/// Why the table could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the kernel's TCP table {path}: {source}")]
pub struct TableError {
    /// The file.
    pub path: &'static str,
    /// The error.
    #[source]
    pub source: std::io::Error,
}

/// Every TCP socket of this network namespace, IPv4 and IPv6. A host without IPv6 has no
/// `tcp6`: that is no error.
pub fn table() -> Result<Vec<Socket>, TableError> {
    let mut out = Vec::new();
    for (path, required) in [("/proc/net/tcp", true), ("/proc/net/tcp6", false)] {
        match std::fs::read_to_string(path) {
            Ok(text) => out.extend(parse(&text)),
            Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(TableError { path, source }),
        }
    }
    Ok(out)
}

/// The rows of one table's text; the header and a line that does not parse are skipped.
pub fn parse(text: &str) -> Vec<Socket> {
    text.lines().filter_map(row).collect()
}

fn row(line: &str) -> Option<Socket> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 8 || !f[0].ends_with(':') {
        return None;
    }
    Some(Socket {
        local: address(f[1])?,
        remote: address(f[2])?,
        state: u8::from_str_radix(f[3], 16).ok()?,
        uid: f[7].parse().ok()?,
    })
}

/// `0100007F:1F90` or 32 hex digits and a port.
fn address(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| {
        ip.get(i * 8..i * 8 + 8)
            .and_then(|w| u32::from_str_radix(w, 16).ok())
            .map(u32::to_ne_bytes)
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b)).to_canonical()
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The listeners a connection to `to` may reach: those bound to its address or to a
/// wildcard, of its family or a dual-stack IPv6 one (the kernel picks among them; every one
/// is judged). A connection to the unspecified address goes to loopback.
pub(crate) fn listeners_for(table: &[Socket], to: SocketAddr) -> Vec<Socket> {
    let ip = match to.ip().to_canonical() {
        IpAddr::V4(a) if a.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(a) if a.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip @ (IpAddr::V4(_) | IpAddr::V6(_)) => ip,
    };
    table
        .iter()
        .filter(|s| s.listens() && s.local.port() == to.port())
        .filter(|s| {
            let at = s.local.ip();
            at == ip
                || match (at, ip) {
                    (IpAddr::V4(a), IpAddr::V4(_)) => a.is_unspecified(),
                    // `[::]` takes IPv4 too unless it is IPv6-only, which the table hides.
                    (IpAddr::V6(a), _) => a.is_unspecified(),
                    (IpAddr::V4(_), IpAddr::V6(_)) => false,
                }
        })
        .copied()
        .collect()
}

/// The socket that accepted our connection from `ours` to `peer`: the row whose local
/// address is our peer and whose remote address is us. Its uid is its listener's.
pub(crate) fn accepted_by(table: &[Socket], ours: SocketAddr, peer: SocketAddr) -> Option<Socket> {
    let canon = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    let (ours, peer) = (canon(ours), canon(peer));
    table
        .iter()
        .find(|s| !s.listens() && s.local == peer && s.remote == ours)
        .copied()
}

/// Whose listeners a member may reach on the host: the person who applied its team, and the
/// uids its grant names (both from the proxy's policy file).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Owners {
    /// The person's uids; empty in a policy file of an older ateam.
    pub applied_by: Vec<u32>,
    /// The grant's `hostListeners`.
    pub named: Vec<u32>,
    /// The proxy's own uid: the person's stand-in when `applied_by` is empty (an older
    /// ateam's file). The proxy runs as the member's uid, which a non-root person's apply
    /// makes the person's; trusting it alone keeps such a member working without trusting
    /// anyone else.
    pub own: u32,
}

impl Owners {
    /// Whether `uid` may own a listener the member reaches. Root always may: it can read
    /// every secret of the person's already (their files, their processes' memory), so a
    /// key it receives is not a key it did not have; the threat is another unprivileged user.
    pub fn trusts(&self, uid: u32) -> bool {
        uid == 0
            || self.named.contains(&uid)
            || if self.applied_by.is_empty() {
                uid == self.own
            } else {
                self.applied_by.contains(&uid)
            }
    }

    /// Why a listener of `uid` on `at` is refused, for the member and the log.
    pub fn refusal(&self, at: SocketAddr, uid: u32) -> String {
        let list = |v: &[u32]| {
            v.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" or ")
        };
        let person = if self.applied_by.is_empty() {
            format!(
                "uid {} (this proxy's own: its policy file names no one, apply again)",
                self.own
            )
        } else {
            format!("uid {} (who applied the team)", list(&self.applied_by))
        };
        let named = if self.named.is_empty() {
            "a uid the grant names".to_string()
        } else {
            format!("uid {} (which the grant names)", list(&self.named))
        };
        let at = match at.ip().to_canonical() {
            IpAddr::V6(a) => format!("[{a}]:{}", at.port()),
            IpAddr::V4(a) => format!("{a}:{}", at.port()),
        };
        format!("the listener on {at} belongs to uid {uid}, not to {person} nor to {named}")
    }
}

/// Whether a connection to `ip` stays on this host: loopback, the unspecified address
/// (which reaches loopback), or one of the host's own addresses (`own`).
pub(crate) fn on_this_host(ip: IpAddr, own: &[IpAddr]) -> bool {
    let c = ip.to_canonical();
    c.is_loopback() || c.is_unspecified() || own.iter().any(|o| o.to_canonical() == c)
}

/// For `apply`: a warning for each host service a grant names (`host.ateam.internal:PORT`,
/// a loopback or own address with a port) that a listener of another uid holds right now.
/// Advice, not a refusal: the proxy judges each connection when it is made.
pub fn held_by_others(desired: &crate::model::Model, host: &crate::host::Host) -> Vec<String> {
    use crate::core::egress::{Entry, HOST_SERVICE, HOST_SERVICE_ADDRS, Target};
    let Ok(table) = table() else {
        return Vec::new();
    };
    let own: Vec<IpAddr> = if_addrs::get_if_addrs()
        .map(|v| v.into_iter().map(|i| i.ip()).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for t in &desired.teams {
        let applied_by = host.appliers(t.folder().as_deref());
        for g in &t.grants {
            let crate::model::Network::Allow(list) = &g.network else {
                continue;
            };
            let owners = Owners {
                applied_by: applied_by.clone(),
                named: g.host_listeners.clone(),
                own: host.uid,
            };
            for (i, h) in list.iter().enumerate() {
                let addrs: Vec<SocketAddr> = match Entry::parse(h) {
                    Ok(Entry {
                        target: Target::Name(n),
                        port: Some(p),
                    }) if n == HOST_SERVICE => HOST_SERVICE_ADDRS
                        .iter()
                        .map(|ip| SocketAddr::new(*ip, p))
                        .collect(),
                    Ok(e) => e
                        .exact_address()
                        .filter(|(ip, _)| on_this_host(*ip, &own))
                        .map(|(ip, p)| SocketAddr::new(ip, p))
                        .into_iter()
                        .collect(),
                    Err(_) => continue,
                };
                let foreign = addrs.iter().find_map(|a| {
                    listeners_for(&table, *a)
                        .into_iter()
                        .find(|l| !owners.trusts(l.uid))
                });
                if let Some(l) = foreign {
                    out.push(format!(
                        "warning: team {}: AccessGrant/{} spec.network.allow[{i}]: `{h}`: {}; its members will be refused it (name the uid in spec.hostListeners if it is meant)",
                        t.name,
                        g.name,
                        owners.refusal(l.local, l.uid)
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows as a little-endian kernel writes them.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1002        0 41 1 0 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 42 1 0 100 0 0 10 0
   2: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1002        0 43 1 0 20 4 30 10 -1
   3: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1001        0 44 1 0 20 4 30 10 -1
   garbage line
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 51 1 0 100 0 0 10 0
   1: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000    33        0 52 1 0 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:0050 0000000000000000FFFF00000100007F:9C40 01 00000000:00000000 00:00000000 00000000    33        0 53 1 0 20 4 30 10 -1
";

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn rows_of_both_tables_parse_into_addresses_states_and_owners() {
        let t = parse(TCP);
        assert_eq!(t.len(), 4, "the header and the garbage are skipped");
        assert_eq!(
            t[0],
            Socket {
                local: at("127.0.0.1:8080"),
                remote: at("0.0.0.0:0"),
                state: LISTEN,
                uid: 1002
            }
        );
        assert_eq!(t[1].local, at("0.0.0.0:22"));
        assert_eq!((t[2].state, t[2].remote), (1, at("127.0.0.1:54321")));
        let t6 = parse(TCP6);
        assert_eq!(t6.len(), 3);
        assert_eq!((t6[0].local, t6[0].uid), (at("[::1]:8081"), 1001));
        assert_eq!(t6[1].local, at("[::]:80"));
        // A dual-stack socket's IPv4 peer is written IPv4-mapped: reduced to IPv4.
        assert_eq!(
            (t6[2].local, t6[2].remote),
            (at("127.0.0.1:80"), at("127.0.0.1:40000"))
        );
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn a_connection_may_reach_its_address_the_wildcards_and_dual_stack_listeners() {
        let mut t = parse(TCP);
        t.extend(parse(TCP6));
        let uids =
            |to: &str| -> Vec<u32> { listeners_for(&t, at(to)).iter().map(|s| s.uid).collect() };
        assert_eq!(uids("127.0.0.1:8080"), [1002]);
        assert_eq!(uids("0.0.0.0:8080"), [1002], "unspecified is loopback");
        assert_eq!(uids("127.0.0.1:22"), [0], "the IPv4 wildcard");
        assert_eq!(uids("[::1]:8081"), [1001]);
        assert_eq!(uids("127.0.0.1:8081"), Vec::<u32>::new());
        assert_eq!(
            uids("127.0.0.1:80"),
            [33],
            "a dual-stack wildcard takes IPv4"
        );
        assert_eq!(uids("[::ffff:127.0.0.1]:8080"), [1002]);
        assert_eq!(
            uids("[::1]:8080"),
            Vec::<u32>::new(),
            "no IPv4 listener for IPv6"
        );
        assert_eq!(uids("127.0.0.1:9"), Vec::<u32>::new());
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn the_accepted_socket_is_the_one_whose_peer_is_us() {
        let mut t = parse(TCP);
        t.extend(parse(TCP6));
        let got = accepted_by(&t, at("127.0.0.1:54321"), at("127.0.0.1:8080")).unwrap();
        assert_eq!(got.uid, 1002);
        // Our own end (uid 1001) is never taken for the accepted one; nor another's.
        assert!(accepted_by(&t, at("127.0.0.1:54322"), at("127.0.0.1:8080")).is_none());
        let mapped = accepted_by(&t, at("[::ffff:127.0.0.1]:40000"), at("127.0.0.1:80"));
        assert_eq!(mapped.map(|s| s.uid), Some(33));
    }

    #[test]
    fn the_real_table_shows_a_listener_of_ours_with_our_uid() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let me = rustix::process::geteuid().as_raw();
        let found = listeners_for(&table().unwrap(), to);
        assert_eq!(found.iter().map(|s| s.uid).collect::<Vec<_>>(), [me]);
        let c = std::net::TcpStream::connect(to).unwrap();
        let got = accepted_by(&table().unwrap(), c.local_addr().unwrap(), to);
        assert_eq!(got.map(|s| s.uid), Some(me));
    }
}
