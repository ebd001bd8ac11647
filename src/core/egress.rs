//! The egress allowlist as data: what an entry of `network: {allow: [...]}` means, whether a
//! request matches it, and which addresses are never reached unless named exactly. Pure: the
//! manifest validation and the host-side proxy (`crate::servers::egress`) judge by the same code.
//!
//! An entry is `host`, `host:port`, `*.domain`, `*.domain:port`, an IPv4 address (with or
//! without a port) or an IPv6 address in brackets (`[::1]:8080`). Without a port an entry
//! allows 443 and 80. Names compare without case and without a trailing dot; `*.domain`
//! matches every name below `domain`, not `domain` itself.
//!
//! `host.ateam.internal:PORT` is the host's loopback on PORT (a local model server, say). It is
//! a name and not `127.0.0.1` because every real client honours `NO_PROXY`, which names
//! loopback: a request for `127.0.0.1` never reaches the proxy. The proxy never resolves the
//! name: it connects to `127.0.0.1:PORT` (then `[::1]:PORT`) itself, only for an entry naming
//! the name with that very port. No wildcard matches it, and no other name below
//! `ateam.internal` is an entry.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The ports an entry without a port allows.
pub(crate) const DEFAULT_PORTS: [u16; 2] = [443, 80];

/// The name by which a member reaches a port on the host's loopback through its proxy.
pub(crate) const HOST_SERVICE: &str = "host.ateam.internal";

/// The domain ateam keeps for its own names: no entry names anything else below it.
const RESERVED_DOMAIN: &str = "ateam.internal";

/// Where `host.ateam.internal:PORT` connects, in this order.
pub(crate) const HOST_SERVICE_ADDRS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::LOCALHOST),
    IpAddr::V6(Ipv6Addr::LOCALHOST),
];

/// Whether `name` (lower case, no trailing dot) is ateam's, or below ateam's domain.
pub(crate) fn reserved(name: &str) -> bool {
    name == RESERVED_DOMAIN || name.ends_with(&format!(".{RESERVED_DOMAIN}"))
}

/// What an entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A host name, lower case, without a trailing dot.
    Name(String),
    /// `*.domain`: every name below `domain` (lower case).
    Below(String),
    /// An address, written as such.
    Ip(IpAddr),
}

/// One parsed allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The host or domain it names.
    pub target: Target,
    /// `None`: the default ports.
    pub port: Option<u16>,
}

impl Entry {
    /// Parses an entry as written in a manifest; the error says what is wrong, for a person.
    pub fn parse(s: &str) -> Result<Entry, String> {
        if let Some((_, rest)) = s.split_once("://") {
            let host = rest.split('/').next().unwrap_or(rest);
            return Err(format!(
                "`{s}` is a URL; write the host name only, for example `{host}`"
            ));
        }
        let port = |p: &str| match p.parse::<u16>() {
            Ok(n) if n != 0 && !p.starts_with('+') => Ok(n),
            _ => Err(format!("`{s}` has an invalid port `{p}`")),
        };
        // `[v6]` or `[v6]:port`.
        if let Some(rest) = s.strip_prefix('[') {
            let (addr, after) = rest
                .split_once(']')
                .ok_or_else(|| format!("`{s}`: an IPv6 address needs its closing `]`"))?;
            let ip: Ipv6Addr = addr
                .parse()
                .map_err(|_| format!("`{s}`: `{addr}` is not an IPv6 address"))?;
            let port = match after {
                "" => None,
                p => Some(port(p.strip_prefix(':').ok_or_else(|| {
                    format!("`{s}`: write a port after the address as `]:PORT`")
                })?)?),
            };
            return Ok(Entry {
                target: Target::Ip(IpAddr::V6(ip)),
                port,
            });
        }
        if s.parse::<Ipv6Addr>().is_ok() {
            return Err(format!(
                "`{s}`: write an IPv6 address in brackets, for example `[{s}]:443`"
            ));
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(port(p)?)),
            None => (s, None),
        };
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            return Ok(Entry {
                target: Target::Ip(IpAddr::V4(ip)),
                port,
            });
        }
        let lower = host.to_ascii_lowercase();
        let (wild, name) = match lower.strip_prefix("*.") {
            Some(n) => (true, n),
            None => (false, lower.as_str()),
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        let ok = !name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            return Err(format!(
                "`{s}` is not a host name (examples: api.example.com, *.example.com, host:443, 127.0.0.1:8080, [::1]:8080)"
            ));
        }
        if reserved(name) {
            return match (wild, name == HOST_SERVICE, port) {
                (false, true, Some(_)) => Ok(Entry {
                    target: Target::Name(name.to_string()),
                    port,
                }),
                (false, true, None) => Err(format!(
                    "`{s}` needs the port of the host's service: `{HOST_SERVICE}:PORT`, for example `{HOST_SERVICE}:11434`"
                )),
                _ => Err(format!(
                    "`{s}`: names below `{RESERVED_DOMAIN}` are ateam's; the host's loopback is `{HOST_SERVICE}:PORT`, one entry per port"
                )),
            };
        }
        Ok(Entry {
            target: if wild {
                Target::Below(name.to_string())
            } else {
                Target::Name(name.to_string())
            },
            port,
        })
    }

    /// Whether this entry allows port `p`.
    pub(crate) fn allows_port(&self, p: u16) -> bool {
        match self.port {
            Some(mine) => mine == p,
            None => DEFAULT_PORTS.contains(&p),
        }
    }

    /// Whether a request for `host` (a name or an address literal) on `port` matches.
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        self.allows_port(port)
            && match (&self.target, host) {
                (Target::Name(n), Host::Name(h)) => n == h,
                (Target::Below(d), Host::Name(h)) => {
                    !reserved(h) && h.len() > d.len() + 1 && h.ends_with(d.as_str()) && {
                        let cut = h.len() - d.len() - 1;
                        h.as_bytes()[cut] == b'.'
                    }
                }
                (Target::Ip(a), Host::Ip(b)) => same_ip(*a, *b),
                (Target::Name(_) | Target::Below(_), Host::Ip(_))
                | (Target::Ip(_), Host::Name(_)) => false,
            }
    }

    /// Whether this entry lets through everything `inner` does (a child's grant within its
    /// parent's).
    pub fn covers(&self, inner: &Entry) -> bool {
        let ports_ok = match (self.port, inner.port) {
            (None, None) => true,
            (Some(a), Some(b)) => a == b,
            (None, Some(b)) => DEFAULT_PORTS.contains(&b),
            (Some(_), None) => false,
        };
        let host_ok = match (&self.target, &inner.target) {
            (Target::Name(a), Target::Name(b)) => a == b,
            // The host's loopback is covered only by the same name and port.
            (Target::Below(_), Target::Name(n)) if reserved(n) => false,
            (Target::Below(d), Target::Name(n) | Target::Below(n)) => {
                n.len() > d.len() + 1 && n.ends_with(&format!(".{d}"))
                    || matches!(&inner.target, Target::Below(x) if x == d)
            }
            (Target::Ip(a), Target::Ip(b)) => same_ip(*a, *b),
            _ => false,
        };
        ports_ok && host_ok
    }

    /// For an entry naming loopback with a port (`127.0.0.1:PORT`, `[::1]:PORT`): how to
    /// write it so that clients honouring `NO_PROXY` send it to the proxy at all.
    pub fn advice(&self) -> Option<String> {
        match (&self.target, self.port) {
            (Target::Ip(ip), Some(p)) if canonical(*ip).is_loopback() => Some(format!(
                "`{self}` is reached only by clients that ignore NO_PROXY (which names loopback, \
                 so curl, Python, Node, git and the agents go to the member's own loopback); \
                 write `{HOST_SERVICE}:{p}` and use http://{HOST_SERVICE}:{p} in the member"
            )),
            _ => None,
        }
    }

    /// Whether this entry names an address exactly, with a port: the one way to reach an
    /// address that is otherwise refused (loopback, private, the host's own...).
    pub(crate) fn exact_address(&self) -> Option<(IpAddr, u16)> {
        match (&self.target, self.port) {
            (Target::Ip(ip), Some(p)) => Some((canonical(*ip), p)),
            _ => None,
        }
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Name(n) => f.write_str(n)?,
            Target::Below(d) => write!(f, "*.{d}")?,
            Target::Ip(IpAddr::V4(a)) => write!(f, "{a}")?,
            Target::Ip(IpAddr::V6(a)) => write!(f, "[{a}]")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// The host part of a request: a name (lower case, no trailing dot) or an address literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A name, lower case, without a trailing dot.
    Name(String),
    /// An address, v4 or v6 (brackets taken off).
    Ip(IpAddr),
}

impl Host {
    /// `example.com`, `10.0.0.1`, `[::1]` or `::1`.
    pub fn parse(s: &str) -> Option<Host> {
        let bare = s
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(s);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Some(Host::Ip(ip));
        }
        let lower = s.to_ascii_lowercase();
        let name = lower.strip_suffix('.').unwrap_or(&lower);
        let ok = !name.is_empty()
            && name.len() <= 253
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            && !name.split('.').any(str::is_empty);
        ok.then(|| Host::Name(name.to_string()))
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
        }
    }
}

/// A parsed allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Allowlist {
    /// The entries, in the order written.
    pub entries: Vec<Entry>,
}

impl Allowlist {
    /// Parses every entry; the first bad one is the error.
    pub fn parse<S: AsRef<str>>(list: &[S]) -> Result<Allowlist, String> {
        Ok(Allowlist {
            entries: list
                .iter()
                .map(|s| Entry::parse(s.as_ref()))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether some entry allows `host:port` by name (the address is judged apart).
    pub fn allows(&self, host: &Host, port: u16) -> bool {
        self.entries.iter().any(|e| e.matches(host, port))
    }

    /// Whether the list has `host.ateam.internal:PORT` for this very port (no other entry
    /// reaches the host's loopback by that name).
    pub(crate) fn allows_host_service(&self, port: u16) -> bool {
        self.entries.iter().any(|e| {
            matches!(&e.target, Target::Name(n) if n == HOST_SERVICE) && e.port == Some(port)
        })
    }

    /// Whether the list names this address and port exactly.
    pub(crate) fn names_exactly(&self, ip: IpAddr, port: u16) -> bool {
        let ip = canonical(ip);
        self.entries
            .iter()
            .any(|e| e.exact_address() == Some((ip, port)))
    }

    /// Whether an address may be connected to, for a request already allowed by name.
    /// `own` are the host's own addresses. The error is the reason, for a person.
    pub(crate) fn judge_address(
        &self,
        ip: IpAddr,
        port: u16,
        own: &[IpAddr],
    ) -> Result<(), String> {
        let c = canonical(ip);
        let why = special(c).or_else(|| {
            own.iter()
                .any(|o| canonical(*o) == c)
                .then_some("one of this host's own addresses")
        });
        match why {
            None => Ok(()),
            Some(_) if self.names_exactly(c, port) => Ok(()),
            Some(why) => Err(format!(
                "{}, {why}; only an entry naming exactly `{}` reaches it",
                show(ip),
                show_port(c, port)
            )),
        }
    }
}

fn show(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    }
}

fn show_port(ip: IpAddr, port: u16) -> String {
    format!("{}:{port}", show(ip))
}

/// Two addresses are the same when they are after unwrapping IPv4-mapped forms.
fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    canonical(a) == canonical(b)
}

/// An address with an IPv4 address embedded in IPv6 (mapped `::ffff:a.b.c.d`, compatible
/// `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:AABB:CCDD::`) reduced to that IPv4
/// address, so that each form is judged as the address it reaches.
pub fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    // IPv4-compatible (deprecated): `::a.b.c.d`, but not `::` and `::1`.
    if s[..6] == [0; 6] && (s[6] != 0 || s[7] > 1) {
        return IpAddr::V4(tail);
    }
    // NAT64, the well-known prefix.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return IpAddr::V4(tail);
    }
    // 6to4 carries the IPv4 address in the second and third groups.
    if s[0] == 0x2002 {
        return IpAddr::V4(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    ip
}

/// Why an address is not a public one, if it is not: these are refused unless named exactly.
pub(crate) fn special(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(a) => {
            let o = a.octets();
            if a.is_loopback() {
                Some("a loopback address")
            } else if a.is_unspecified() || o[0] == 0 {
                Some("an unspecified address")
            } else if a.is_private() {
                Some("a private address")
            } else if a.is_link_local() {
                Some("a link-local address (the cloud metadata service lives there)")
            } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
                Some("a carrier-grade NAT address")
            } else if a.is_multicast() {
                Some("a multicast address")
            } else if a.is_broadcast() || o[0] >= 240 {
                Some("a reserved address")
            } else if o[0] == 198 && (o[1] & 0xfe) == 18 {
                Some("a benchmarking address")
            } else if o[0] == 192 && o[1] == 0 && o[2] == 0 {
                Some("an IETF protocol address")
            } else {
                None
            }
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            if a.is_loopback() {
                Some("a loopback address")
            } else if a.is_unspecified() {
                Some("an unspecified address")
            } else if a == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
                Some("the cloud metadata service's address")
            } else if (s[0] & 0xfe00) == 0xfc00 {
                Some("a private (unique local) address")
            } else if (s[0] & 0xffc0) == 0xfe80 || (s[0] & 0xffc0) == 0xfec0 {
                Some("a link-local address")
            } else if a.is_multicast() {
                Some("a multicast address")
            } else if s[0] == 0x100 && s[1..4] == [0, 0, 0] {
                Some("a discard-only address")
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(s: &str) -> Entry {
        Entry::parse(s).unwrap()
    }

    fn host(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    #[test]
    fn entries_parse_and_print() {
        for (s, shown) in [
            ("api.example.com", "api.example.com"),
            ("API.Example.com.", "api.example.com"),
            ("*.example.com:8443", "*.example.com:8443"),
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("[::1]:8080", "[::1]:8080"),
            ("[2001:db8::1]", "[2001:db8::1]"),
        ] {
            assert_eq!(e(s).to_string(), shown, "{s}");
        }
        for bad in [
            "http://x",
            "a..b",
            "x:0",
            "x:65536",
            "x:+1",
            "::1",
            "[::1",
            "[::1]8080",
            "",
            "*.",
            "a b",
        ] {
            assert!(Entry::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_ports_and_wildcards_match() {
        let list =
            Allowlist::parse(&["api.example.com", "*.pkg.dev", "git.example.org:22"]).unwrap();
        assert!(list.allows(&host("api.example.com"), 443));
        assert!(list.allows(&host("API.example.com."), 80));
        assert!(!list.allows(&host("api.example.com"), 8080));
        assert!(!list.allows(&host("example.com"), 443));
        assert!(!list.allows(&host("xapi.example.com"), 443));
        assert!(list.allows(&host("a.b.pkg.dev"), 443));
        assert!(!list.allows(&host("pkg.dev"), 443));
        assert!(!list.allows(&host("evilpkg.dev"), 443));
        assert!(list.allows(&host("git.example.org"), 22));
        assert!(!list.allows(&host("git.example.org"), 443));
        // A name never matches an address entry, nor an address a name entry.
        let ips = Allowlist::parse(&["10.1.2.3:80"]).unwrap();
        assert!(ips.allows(&host("10.1.2.3"), 80));
        assert!(ips.allows(&host("[::ffff:10.1.2.3]"), 80));
        assert!(!list.allows(&host("93.184.216.34"), 443));
    }

    #[test]
    fn a_child_entry_is_covered_only_when_the_parent_allows_all_of_it() {
        assert!(e("*.example.com").covers(&e("api.example.com")));
        assert!(e("*.example.com").covers(&e("*.a.example.com")));
        assert!(e("*.example.com").covers(&e("*.example.com")));
        assert!(!e("*.example.com").covers(&e("example.com")));
        assert!(e("api.example.com").covers(&e("api.example.com:443")));
        assert!(!e("api.example.com").covers(&e("api.example.com:8080")));
        assert!(!e("api.example.com:443").covers(&e("api.example.com")));
        assert!(e("127.0.0.1:9").covers(&e("127.0.0.1:9")));
        assert!(!e("127.0.0.1:9").covers(&e("127.0.0.2:9")));
    }

    #[test]
    fn special_addresses_are_refused_unless_named_exactly() {
        let refused = [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
            "10.0.0.1",
            "172.16.3.4",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00:ec2::254",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::10.0.0.1",
            "2002:7f00:1::",
        ];
        let list = Allowlist::default();
        for a in refused {
            let ip: IpAddr = a.parse().unwrap();
            assert!(
                list.judge_address(ip, 443, &[]).is_err(),
                "{a} must be refused"
            );
        }
        for a in [
            "93.184.216.34",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert!(list.judge_address(ip, 443, &[]).is_ok(), "{a} is public");
        }
        let own: IpAddr = "203.0.113.7".parse().unwrap();
        let err = list.judge_address(own, 443, &[own]).unwrap_err();
        assert!(err.contains("own addresses"), "{err}");
        // Named exactly, with its port: reachable, in any spelling of the address.
        let local = Allowlist::parse(&["127.0.0.1:8080", "[::1]:9000"]).unwrap();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(local.judge_address(lo, 8080, &[lo]).is_ok());
        assert!(
            local
                .judge_address("::ffff:127.0.0.1".parse().unwrap(), 8080, &[])
                .is_ok()
        );
        assert!(local.judge_address(lo, 8081, &[]).is_err());
        assert!(
            local
                .judge_address("::1".parse().unwrap(), 9000, &[])
                .is_ok()
        );
        // Without a port it is not exact.
        let loose = Allowlist::parse(&["127.0.0.1"]).unwrap();
        let err = loose.judge_address(lo, 443, &[]).unwrap_err();
        assert!(
            err.contains("loopback") && err.contains("127.0.0.1:443"),
            "{err}"
        );
    }

    #[test]
    fn the_host_service_is_one_port_named_exactly() {
        let list =
            Allowlist::parse(&["host.ateam.internal:11434", "*.internal", "*.ateam.test"]).unwrap();
        assert!(list.allows_host_service(11434));
        assert!(list.allows(&host("HOST.ateam.internal."), 11434));
        // Another port, and no wildcard, reaches it.
        assert!(!list.allows_host_service(11435));
        assert!(!list.allows(&host("host.ateam.internal"), 443));
        assert!(!list.allows(&host("host.ateam.internal"), 11435));
        let wild = Allowlist::parse(&["*.internal"]).unwrap();
        assert!(!wild.allows(&host("host.ateam.internal"), 443));
        assert!(!wild.allows_host_service(443));
        assert!(wild.allows(&host("db.corp.internal"), 443));
        // A parent's wildcard never covers a child's host service.
        assert!(!e("*.internal").covers(&e("host.ateam.internal:443")));
        assert!(e("host.ateam.internal:9").covers(&e("host.ateam.internal:9")));
        assert!(!e("host.ateam.internal:9").covers(&e("host.ateam.internal:10")));
        // Without a port, and other names of ateam's domain, are not entries.
        for bad in [
            "host.ateam.internal",
            "*.ateam.internal",
            "ateam.internal:80",
            "x.ateam.internal:80",
            "*.host.ateam.internal:80",
        ] {
            assert!(Entry::parse(bad).is_err(), "{bad}");
        }
        let err = Entry::parse("host.ateam.internal").unwrap_err();
        assert!(err.contains("host.ateam.internal:PORT"), "{err}");
    }

    #[test]
    fn a_loopback_entry_says_how_to_write_it_now() {
        for (s, port) in [
            ("127.0.0.1:11434", 11434),
            ("[::1]:8080", 8080),
            ("127.1.2.3:9", 9),
        ] {
            let advice = e(s).advice().unwrap();
            assert!(
                advice.contains(&format!("host.ateam.internal:{port}")),
                "{s}: {advice}"
            );
        }
        for s in [
            "10.0.0.1:80",
            "127.0.0.1",
            "api.example.com:443",
            "host.ateam.internal:1",
        ] {
            assert_eq!(e(s).advice(), None, "{s}");
        }
    }
}
