//! The proxy's record of what it let through and what it refused: one JSON object per line,
//! in a file that is rotated once it passes `MAX_LOG_BYTES` (the previous one kept as `.1`),
//! so a member that keeps knocking cannot fill the disk. `ateam logs --egress` and `status`
//! read it back.
//!
//! Refusals go to a file of their own (`refused`, rotated at `MAX_REFUSED_BYTES`), a member
//! decides what it asks for: 2 MiB of allowed or failed requests must not rotate away the
//! refusals `status` and `events` show. And its refusals are bounded a minute (`quota`), so
//! that its own refusal noise cannot either: the refusal log always holds at least the last
//! `KEPT_MINUTES` of refusals, counted in full.

mod quota;

pub use quota::{FULL_PER_MINUTE, MAX_BYTES_PER_MINUTE, OTHERS};

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::core::untrusted::shown;

/// The end of the proxy's reason for a host its member's allow list does not name.
pub(crate) const NOT_LISTED: &str = "is not in this member's allow list";

/// The end of the proxy's reason for a destination its member's grant denies.
pub(crate) const DENIED: &str = "is in this member's deny list";

/// Size at which the log is rotated: two files of this size at most.
pub(crate) const MAX_LOG_BYTES: u64 = 1024 * 1024;

/// Size at which the refusal log is rotated: two files of this size at most.
pub(crate) const MAX_REFUSED_BYTES: u64 = 2 * 1024 * 1024;

/// Minutes of refusals the refusal log holds at least, whatever the member asks for: the
/// rotated file alone holds `MAX_REFUSED_BYTES` less one line, `MAX_BYTES_PER_MINUTE` a minute.
#[cfg(test)]
pub(crate) const KEPT_MINUTES: u64 =
    (MAX_REFUSED_BYTES - MAX_BYTES_PER_MINUTE) / MAX_BYTES_PER_MINUTE;

/// What the proxy decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Let through (a tunnel opened, or a request sent on).
    Allowed,
    /// Refused by the member's list or the address rules: what `status` reports.
    Refused,
    /// Allowed by the list, but the name did not resolve or the connection failed; or not
    /// judged, the proxy being over its bound of connections at once.
    Failed,
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Seconds since the epoch.
    pub ts: f64,
    /// What the proxy decided.
    pub verdict: Verdict,
    /// `CONNECT`, `GET`, ...
    pub method: String,
    /// As the member asked for it (a name or an address).
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// For a request to a host with rules: its path, never its query (queries carry keys).
    /// Absent from the lines of a tunnel, and of ateam before rules existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The address connected to (allowed), or judged (refused by address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// The HTTP status the member got.
    pub status: u16,
    /// Why it was refused or failed; `None` when allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A summary line: this many refusals of this destination in one minute, past the ones
    /// written one by one (`quota`); `None` for one decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Let through by a learning run (`ateam apply --learn`) though the allow list does not
    /// name it: an ask for the person, as a refusal is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learned: bool,
}

impl Event {
    /// The time now as `ts` takes it (0 should the clock be before the epoch).
    pub fn now() -> f64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    }

    /// How many decisions this line stands for.
    pub fn times(&self) -> u64 {
        self.count.unwrap_or(1)
    }

    /// This event with every text a member chose escaped (`core::untrusted::shown`).
    fn shown(self) -> Event {
        let safe = |s: String| shown(&s).into_owned();
        Event {
            method: safe(self.method),
            host: safe(self.host),
            path: self.path.map(safe),
            addr: self.addr.map(safe),
            reason: self.reason.map(safe),
            ..self
        }
    }

    /// The line `logs --egress` prints.
    pub fn line(&self) -> String {
        let when = humantime::format_rfc3339_seconds(
            UNIX_EPOCH + std::time::Duration::from_secs_f64(self.ts.max(0.0)),
        );
        let verdict = match self.verdict {
            Verdict::Allowed => "allowed",
            Verdict::Refused => "REFUSED",
            Verdict::Failed => "failed",
        };
        let mut s = format!(
            "{when} {verdict} {} {}:{}{} -> {}",
            self.method,
            self.host,
            self.port,
            self.path.as_deref().unwrap_or(""),
            self.addr.as_deref().unwrap_or("-")
        );
        s.push_str(&format!(" ({})", self.status));
        if let Some(r) = &self.reason {
            s.push_str(": ");
            s.push_str(r);
        }
        if let Some(n) = self.count {
            s.push_str(&format!(
                " [x{n} this minute, past the {FULL_PER_MINUTE} written one by one]"
            ));
        }
        s
    }
}

/// The writer, owned by the proxy (one process per log: no locking needed). It works through
/// its folder's descriptor, opened before the proxy gave up root: the folders above it are
/// private to ateam's user. Refusals go to the refusal log (`refused`), within the minute's
/// quota; everything else to the log.
///
/// A full disk must neither stop the proxy nor spoil the log: a write that fails (or lands in
/// part) leaves the file "torn", and the next line that is written starts with a newline, so
/// that the cut line stands alone (readers skip it) rather than swallowing the next one. The
/// first failure is said once on the proxy's standard error.
pub struct Log {
    dir: std::os::fd::OwnedFd,
    main: Sink,
    refused: Sink,
    quota: quota::Quota,
    warned: bool,
}

/// One file of lines, rotated to `.1` at `max` bytes.
struct Sink {
    name: String,
    max: u64,
    file: Option<File>,
    size: u64,
    /// The file does not end with a whole line.
    torn: bool,
}

impl Sink {
    fn open(dir: &std::os::fd::OwnedFd, name: String, max: u64) -> Sink {
        let mut s = Sink {
            name,
            max,
            file: None,
            size: 0,
            torn: false,
        };
        s.reopen(dir);
        s
    }

    fn reopen(&mut self, dir: &std::os::fd::OwnedFd) {
        use rustix::fs::{Mode, OFlags, openat};
        self.file = openat(
            dir,
            self.name.as_str(),
            OFlags::RDWR | OFlags::APPEND | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
        )
        .ok()
        .map(File::from);
        self.size = self
            .file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map(|m| m.len())
            .unwrap_or(0);
        // A line cut by a crash or a full disk before this proxy started.
        let mut last = [0u8; 1];
        self.torn = self.size > 0
            && self.file.as_ref().is_some_and(|f| {
                std::os::unix::fs::FileExt::read_at(f, &mut last, self.size - 1)
                    .is_ok_and(|n| n == 1)
                    && last[0] != b'\n'
            });
    }

    /// Appends one line (ending with a newline), rotating first if it would pass `max`.
    fn append(&mut self, dir: &std::os::fd::OwnedFd, mut line: Vec<u8>) -> std::io::Result<()> {
        if self.size + line.len() as u64 > self.max {
            let old = format!("{}.1", self.name);
            let _ = rustix::fs::renameat(dir, self.name.as_str(), dir, old.as_str());
            self.reopen(dir);
        }
        if self.torn {
            line.insert(0, b'\n');
        }
        let Some(f) = &mut self.file else {
            return Err(std::io::Error::other("the log could not be opened"));
        };
        match f.write_all(&line) {
            Ok(()) => {
                self.size += line.len() as u64;
                self.torn = false;
                Ok(())
            }
            Err(err) => {
                // Some of it may have landed: the size is looked at again, and the line ended.
                self.size = f.metadata().map(|m| m.len()).unwrap_or(self.size);
                self.torn = true;
                Err(err)
            }
        }
    }
}

impl Log {
    /// The log `name` in the folder `dir`, and its refusal log beside it (`refused_name`).
    pub fn open(dir: std::os::fd::OwnedFd, name: &str) -> Log {
        let main = Sink::open(&dir, name.to_string(), MAX_LOG_BYTES);
        let refused = Sink::open(&dir, refused_name(name), MAX_REFUSED_BYTES);
        Log {
            dir,
            main,
            refused,
            quota: quota::Quota::default(),
            warned: false,
        }
    }

    /// Appends one event; a log that cannot be written never stops the proxy.
    pub fn write(&mut self, e: &Event) {
        for s in self.quota.turn(e.ts) {
            self.append(&s, true);
        }
        self.append(e, e.verdict == Verdict::Refused);
    }

    fn append(&mut self, e: &Event, refusal: bool) {
        let Ok(mut line) = serde_json::to_vec(e) else {
            return;
        };
        line.push(b'\n');
        let sink = if !refusal {
            &mut self.main
        } else if e.count.is_some() || self.quota.admit(e, line.len()) {
            &mut self.refused
        } else {
            return;
        };
        if let Err(err) = sink.append(&self.dir, line)
            && !std::mem::replace(&mut self.warned, true)
        {
            tracing::warn!(log = %sink.name, error = %err, "cannot write the egress log; still serving (further failures are not logged)");
        }
    }
}

impl Drop for Log {
    /// The proxy is going away: the refusals counted this minute are written.
    fn drop(&mut self) {
        for s in self.quota.summaries() {
            self.append(&s, true);
        }
    }
}

/// The refusal log's name beside the log `name`: `log.jsonl` -> `log-refused.jsonl`.
fn refused_name(name: &str) -> String {
    match name.strip_suffix(".jsonl") {
        Some(stem) => format!("{stem}-refused.jsonl"),
        None => format!("{name}-refused"),
    }
}

/// The refusal log beside the log `path` (`log-refused.jsonl`; rotated as `rotated` says).
pub fn refused(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(refused_name(&name))
}

/// The previous log, once rotated (`log.jsonl.1`).
pub fn rotated(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".1");
    PathBuf::from(p)
}

/// Every event still in the log and the refusal log (each one's rotated file first), by
/// time, oldest first (events of one time in the order read). Lines that do not parse (a
/// line cut by a crash) are skipped. A log written before refusals had a file of their own
/// holds its refusals itself: read once, as any line. What the member chose (the method, the
/// host it asked for, a reason that quotes them) comes back made safe to show: a `CONNECT`
/// of a "host" made of terminal escapes must not reach the person's terminal through
/// `status` or `logs`.
pub fn read(path: &Path) -> Vec<Event> {
    let refused = refused(path);
    let mut out = Vec::new();
    for p in [
        rotated(path),
        path.to_path_buf(),
        rotated(&refused),
        refused,
    ] {
        read_file(&p, &mut out);
    }
    out.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    out
}

fn read_file(p: &Path, out: &mut Vec<Event>) {
    // The folder is the member uid's: a link or a FIFO there is not read.
    let Ok(f) = crate::files::open_regular(p) else {
        return;
    };
    // By bytes, not `lines()`: a line cut inside a character is not UTF-8, and must be
    // skipped, not end the reading of every line after it.
    for line in BufReader::new(f).split(b'\n').map_while(Result::ok) {
        if let Ok(e) = serde_json::from_slice::<Event>(&line) {
            out.push(e.shown());
        }
    }
}

/// Refusals grouped by what was asked for: `host:port` -> (count, last reason).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Refusal {
    /// The host as the member asked for it, made safe to show.
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// How many times it was refused.
    pub count: u64,
    /// The reason of the latest refusal.
    pub reason: String,
}

/// The refusals among `events` since `since` (seconds since the epoch), most frequent first.
pub fn refusals(events: &[Event], since: f64) -> Vec<Refusal> {
    let mut by: BTreeMap<(String, u16), Refusal> = BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| e.verdict == Verdict::Refused && e.ts >= since)
    {
        let r = by
            .entry((e.host.clone(), e.port))
            .or_insert_with(|| Refusal {
                host: e.host.clone(),
                port: e.port,
                count: 0,
                reason: String::new(),
            });
        r.count += e.times();
        r.reason = e.reason.clone().unwrap_or_default();
    }
    let mut v: Vec<Refusal> = by.into_values().collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then(a.host.cmp(&b.host)));
    v
}

/// The allowlist entry that would let a refused request through: the name with its port
/// unless the port is a default one; an address always with its port (only an exact entry
/// reaches a local address).
pub(crate) fn entry_for(r: &Refusal) -> String {
    use crate::core::egress::{DEFAULT_PORTS, Host, reserved};
    match Host::parse(&r.host) {
        Some(h @ Host::Ip(_)) => format!("{h}:{}", r.port),
        // The host's loopback by name is an entry only with its port.
        Some(Host::Name(n)) if DEFAULT_PORTS.contains(&r.port) && !reserved(&n) => n,
        Some(Host::Name(n)) => format!("{n}:{}", r.port),
        None => format!("{}:{}", r.host, r.port),
    }
}

/// How many refused destinations `status` lists, and how many entries its grant to paste
/// adds: a member that knocks on thousands of hosts must not bury the status table.
pub(crate) const SHOWN: usize = 10;

/// What a port serves, when opening it to a member gives away more than a web service.
fn port_opens(port: u16) -> Option<&'static str> {
    Some(match port {
        22 => "ssh: a shell on that host for whoever holds a key or password",
        23 => "telnet: a shell on that host",
        2375 => "the Docker API without TLS: allowing it gives the member that host",
        2376 => "the Docker API: allowing it gives the member that host",
        2379 | 2380 => "etcd: a Kubernetes cluster's whole state, its secrets included",
        3306 => "MySQL: a database",
        3389 => "remote desktop: a session on that host",
        5432 => "PostgreSQL: a database",
        5900 => "VNC: a remote desktop",
        6379 => "Redis, which asks for no password by default",
        6443 => "the Kubernetes API",
        9200 => "Elasticsearch: a database",
        10250 => "the kubelet's API: it runs commands in every pod of that node",
        11211 => "memcached, which asks for no password",
        27017 => "MongoDB: a database",
        _ => return None,
    })
}

/// What a non-public address opens to a member.
fn address_opens(ip: std::net::IpAddr) -> &'static str {
    use std::net::IpAddr;
    match crate::core::egress::canonical(ip) {
        IpAddr::V4(a) if a.is_loopback() => "services listening on this machine itself",
        IpAddr::V6(a) if a.is_loopback() => "services listening on this machine itself",
        IpAddr::V4(a) if a.is_link_local() => {
            "the cloud metadata service, which hands out this machine's cloud credentials"
        }
        IpAddr::V6(a) if a.segments()[..2] == [0xfd00, 0xec2] => {
            "the cloud metadata service, which hands out this machine's cloud credentials"
        }
        IpAddr::V4(_) | IpAddr::V6(_) => {
            "machines of this host's own networks, out of the internet's reach"
        }
    }
}

/// Why the entry for `r` is not offered to paste, if it is not: a loopback, link-local,
/// metadata or private address, or a port that serves more than the web. The reason says
/// what allowing it would open.
pub fn withheld(r: &Refusal) -> Option<String> {
    if r.host == OTHERS && r.port == 0 {
        return Some(format!(
            "`{OTHERS}` counts the refusals of many destinations past a minute's first \
             {FULL_PER_MINUTE} (`ateam logs --egress` names those): it is no entry"
        ));
    }
    use crate::core::egress::{HOST_SERVICE, HOST_SERVICE_ADDRS, Host, reserved, special};
    let addr = match Host::parse(&r.host) {
        Some(Host::Ip(ip)) => special(ip).map(|what| (what, address_opens(ip))),
        // By name or by address, the host's loopback is offered by nobody but the person.
        Some(Host::Name(n)) if n == HOST_SERVICE => {
            Some(("the host's loopback", address_opens(HOST_SERVICE_ADDRS[0])))
        }
        Some(Host::Name(n)) if reserved(&n) => Some((
            "below ateam.internal, ateam's own domain",
            "nothing: no such name is an entry",
        )),
        Some(Host::Name(_)) | None => None,
    };
    let entry = entry_for(r);
    match (addr, port_opens(r.port)) {
        (None, None) => None,
        (Some((what, opens)), None) => Some(format!("`{entry}` is {what}: it opens {opens}")),
        (None, Some(p)) => Some(format!("`{entry}`: port {} is {p}", r.port)),
        (Some((what, opens)), Some(p)) => Some(format!(
            "`{entry}` is {what}: it opens {opens}; port {} is {p}",
            r.port
        )),
    }
}

/// What `status` offers a person who sees refusals: the grant to paste, and what it leaves
/// out and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Suggestion {
    /// The AccessGrant with at most `SHOWN` new entries (the most refused first), ready to
    /// paste into the manifest; `None` when nothing would be added.
    pub grant: Option<String>,
    /// Entries left out of it on purpose (at most `SHOWN`), each saying what it would open.
    pub withheld: Vec<String>,
    /// Further entries left out to keep the suggestion short.
    pub more: usize,
}

/// The host with rules of `grant` that `r` was refused by, if any.
fn ruled_host<'a>(
    grant: &'a crate::model::AccessGrant,
    r: &Refusal,
) -> Option<&'a crate::core::intercept::Intercept> {
    use crate::core::egress::{Entry, Host};
    let host = Host::parse(&r.host)?;
    grant
        .intercept
        .iter()
        .find(|i| Entry::parse(&i.host).is_ok_and(|e| e.matches(&host, r.port)))
}

/// Whether `grant`'s `deny` names what `r` asked for.
fn denied(grant: &crate::model::AccessGrant, r: &Refusal) -> bool {
    let deny = crate::core::egress::Allowlist::parse(&grant.deny).unwrap_or_default();
    crate::core::egress::Host::parse(&r.host).is_some_and(|h| deny.allows(&h, r.port))
}

/// The grant with the refused hosts added (`refused`: most frequent first): `source`, the
/// grant's document as the person's manifest says it now, with the entries added and all
/// else as they wrote it; without one, the grant written out from the applied model.
pub(crate) fn suggest(
    team: &str,
    grant: &crate::model::AccessGrant,
    refused: &[Refusal],
    source: Option<&str>,
) -> Suggestion {
    let crate::model::Network::Allow(list) = &grant.network else {
        return Suggestion::default();
    };
    let mut out = Suggestion::default();
    if grant.name.is_empty() {
        return out;
    }
    let mut allow = list.clone();
    // What the grant denies is the person's no: never suggested.
    for r in refused.iter().filter(|r| !denied(grant, r)) {
        // A host with rules refused a request: its rules said no, not the list. Which rule
        // to widen is a person's call; say which refused, suggest nothing.
        if let Some(i) = ruled_host(grant, r) {
            if out.withheld.len() < SHOWN {
                out.withheld.push(format!(
                    "`{}:{}` has rules (entry `{}`), which refused it: {}; widen them by hand if you mean it",
                    r.host, r.port, i.host, r.reason
                ));
            } else {
                out.more += 1;
            }
            continue;
        }
        let e = entry_for(r);
        if allow.contains(&e) {
            continue;
        }
        // What no grant can name (a request that named no host) is never offered.
        let why = withheld(r).or_else(|| {
            crate::core::egress::Entry::parse(&e)
                .err()
                .map(|why| format!("`{e}` is no entry a grant can name ({why}): nothing to allow"))
        });
        match why {
            Some(why) if out.withheld.len() < SHOWN => out.withheld.push(why),
            None if allow.len() - list.len() < SHOWN => allow.push(e),
            Some(_) | None => out.more += 1,
        }
    }
    if allow.len() == list.len() {
        return out;
    }
    let added = &allow[list.len()..];
    if let Some(text) = source.and_then(|d| crate::manifest::edit::add_allow_entries(d, added)) {
        out.grant = Some(text);
        return out;
    }
    // Written out from the model, a host's `upstreamCA` would be its PEM, not the person's
    // file: say the entries instead.
    if grant.intercept.iter().any(|i| i.upstream_ca.is_some()) {
        out.withheld.push(format!(
            "add {} to spec.network.allow of AccessGrant `{}` (its manifest was not found to show it whole)",
            added
                .iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", "),
            grant.name
        ));
        return out;
    }
    let mut s = format!(
        "apiVersion: ateam.dev/v1alpha1\nkind: AccessGrant\nmetadata: {{name: {}}}\nspec:\n  team: {team}\n",
        grant.name
    );
    let paths = |v: &[PathBuf]| {
        v.iter()
            .map(|p| format!("    - {}\n", p.display()))
            .collect::<String>()
    };
    if !grant.read.is_empty() {
        s.push_str(&format!("  read:\n{}", paths(&grant.read)));
    }
    if !grant.write.is_empty() {
        s.push_str(&format!("  write:\n{}", paths(&grant.write)));
    }
    s.push_str("  network:\n    allow:\n");
    for a in allow {
        // A host with rules stays one, in its map form (JSON is YAML too).
        match grant.intercept.iter().find(|i| i.host == a) {
            Some(i) => {
                let rules = crate::manifest::rules::host_rules(i);
                let map = serde_json::to_string(&rules).unwrap_or_default();
                s.push_str(&format!("      - {map}\n"));
            }
            None => s.push_str(&format!("      - \"{a}\"\n")),
        }
    }
    out.grant = Some(s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(verdict: Verdict, host: &str, port: u16, ts: f64) -> Event {
        Event {
            ts,
            verdict,
            method: "CONNECT".into(),
            host: host.into(),
            port,
            path: None,
            addr: None,
            status: 403,
            reason: Some("not in the allow list".into()),
            count: None,
            learned: false,
        }
    }

    #[test]
    fn lines_without_a_path_still_read_and_a_path_is_shown_after_the_port() {
        let old = r#"{"ts":1.0,"verdict":"refused","method":"CONNECT","host":"a.example","port":443,"status":403}"#;
        let e: Event = serde_json::from_str(old).unwrap();
        assert_eq!(e.path, None);
        assert!(
            e.line().contains("CONNECT a.example:443 -> - (403)"),
            "{}",
            e.line()
        );
        let e = Event {
            path: Some("/v1/models".into()),
            method: "GET".into(),
            ..e
        };
        assert!(
            e.line().contains("GET a.example:443/v1/models -> -"),
            "{}",
            e.line()
        );
        assert!(
            serde_json::to_string(&e)
                .unwrap()
                .contains(r#""path":"/v1/models""#)
        );
    }

    #[test]
    fn what_a_member_asked_for_is_read_back_escaped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let fd = rustix::fs::open(
            dir.path(),
            rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let mut e = ev(Verdict::Refused, "\u{1b}]2;pwned\u{7}\u{202e}", 443, 1.0);
        e.reason = Some("`\u{1b}[2J` is not a host name".into());
        Log::open(fd, "log.jsonl").write(&e);
        let back = read(&path);
        let line = back[0].line();
        assert!(
            !line.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{line:?}"
        );
        assert!(
            line.contains("\\u{1b}]2;pwned\\u{7}\\u{202e}:443"),
            "{line}"
        );
        let r = refusals(&back, 0.0);
        assert!(
            !r[0].host.contains('\u{1b}') && !r[0].reason.contains('\u{1b}'),
            "{r:?}"
        );
    }

    /// A line cut by a full disk (here: in the middle of a character) neither hides the lines
    /// after it from readers nor glues itself to the next line the proxy writes.
    #[test]
    fn a_torn_line_costs_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let open = || {
            let fd = rustix::fs::open(
                dir.path(),
                rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
                rustix::fs::Mode::empty(),
            )
            .unwrap();
            Log::open(fd, "log.jsonl")
        };
        open().write(&ev(Verdict::Allowed, "a.example", 443, 1.0));
        let mut whole = ev(Verdict::Refused, "b.example", 443, 2.0);
        whole.reason = Some("é".repeat(8));
        let line = serde_json::to_vec(&whole).unwrap();
        let cut = line.iter().position(|&b| b == 0xc3).unwrap() + 1;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&line[..cut]).unwrap();
        drop(f);
        let mut log = open();
        log.write(&ev(Verdict::Allowed, "c.example", 443, 3.0));
        log.write(&ev(Verdict::Allowed, "d.example", 443, 4.0));
        let hosts: Vec<String> = read(&path).into_iter().map(|e| e.host).collect();
        assert_eq!(hosts, ["a.example", "c.example", "d.example"]);
    }

    #[test]
    fn the_log_is_bounded_and_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let fd = rustix::fs::open(
            dir.path(),
            rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let mut log = Log::open(fd, "log.jsonl");
        let n = 30_000;
        for i in 0..n {
            log.write(&ev(Verdict::Allowed, "example.com", 443, i as f64));
        }
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        assert!(size(&path) <= MAX_LOG_BYTES);
        assert!(size(&rotated(&path)) <= MAX_LOG_BYTES);
        let back = read(&path);
        assert!(back.len() < n && !back.is_empty());
        assert!(back.windows(2).all(|w| w[0].ts < w[1].ts));
        assert_eq!(back.last().unwrap().ts, (n - 1) as f64);
    }

    fn open_in(dir: &Path) -> Log {
        let fd = rustix::fs::open(
            dir,
            rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        Log::open(fd, "log.jsonl")
    }

    fn size(p: &Path) -> u64 {
        std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
    }

    /// Issue 34: a member sent 3 MiB of allowed and failed requests after a refusal, to
    /// rotate it out of the log; the refusal has a file of its own and is still read.
    #[test]
    fn a_refusal_outlives_three_mib_of_allowed_and_failed_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let mut log = open_in(dir.path());
        log.write(&ev(Verdict::Refused, "evil.example", 443, 1000.0));
        let (mut ts, mut sent) = (1000.0, 0);
        while sent < 3 * 1024 * 1024 {
            ts += 0.01;
            let v = if (ts as u64).is_multiple_of(2) {
                Verdict::Allowed
            } else {
                Verdict::Failed
            };
            let e = ev(v, "noise.example", 443, ts);
            sent += serde_json::to_vec(&e).unwrap().len() + 1;
            log.write(&e);
        }
        drop(log);
        assert!(size(&path) <= MAX_LOG_BYTES && size(&rotated(&path)) <= MAX_LOG_BYTES);
        let back = read(&path);
        let r = refusals(&back, 0.0);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].host.as_str(), r[0].count), ("evil.example", 1));
        assert!(
            back.windows(2).all(|w| w[0].ts <= w[1].ts),
            "merged by time"
        );
        assert_eq!(back[0].verdict, Verdict::Refused);
    }

    /// 10,000 refusals in one minute: the first `FULL_PER_MINUTE` one by one, the rest on a
    /// few summary lines; the file stays within a minute's bound and the counts add up, by
    /// destination for the first few and together for the others.
    #[test]
    fn ten_thousand_refusals_in_a_minute_stay_bounded_and_add_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let mut log = open_in(dir.path());
        let n = 10_000;
        for i in 0..n {
            let host = format!("h{}.example", i % 50);
            log.write(&ev(Verdict::Refused, &host, 443, 600.0 + i as f64 / 1000.0));
        }
        // The next minute begins: the summaries are written.
        log.write(&ev(Verdict::Allowed, "ok.example", 443, 661.0));
        let written = size(&refused(&path));
        assert!(written <= MAX_BYTES_PER_MINUTE, "{written} bytes");
        let back = read(&path);
        let lines = back
            .iter()
            .filter(|e| e.verdict == Verdict::Refused)
            .count();
        assert!(lines <= FULL_PER_MINUTE as usize + 5, "{lines} lines");
        let r = refusals(&back, 0.0);
        assert_eq!(r.iter().map(|r| r.count).sum::<u64>(), n);
        let h0 = r.iter().find(|r| r.host == "h0.example").unwrap();
        assert_eq!(
            h0.count,
            n / 50,
            "h0 was among the first counted on its own"
        );
        let others = r.iter().find(|r| r.host == OTHERS).unwrap();
        assert!(others.count > 0 && others.port == 0);
        assert!(withheld(others).is_some(), "never offered as an entry");
        let summary = back.iter().find(|e| e.count.is_some()).unwrap();
        assert!(summary.line().contains("this minute"), "{}", summary.line());
    }

    /// The promise of docs/security.md: whatever the member asks for (long hosts full of
    /// escapes, as many as it can), the last `KEPT_MINUTES` (at least an hour) of refusals
    /// are all still counted.
    #[test]
    fn the_refusal_log_keeps_at_least_an_hour_of_the_worst_noise() {
        const { assert!(KEPT_MINUTES >= 60) };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let mut log = open_in(dir.path());
        let minutes = 150;
        let per_minute = 400;
        let ugly = "\u{1b}".repeat(60);
        for m in 0..minutes {
            for i in 0..per_minute {
                let host = format!("{ugly}{}", i % 7);
                let mut e = ev(
                    Verdict::Refused,
                    &host,
                    443,
                    (m * 60) as f64 + i as f64 / 10.0,
                );
                e.reason = Some("\u{1b}".repeat(500));
                log.write(&e);
            }
        }
        drop(log);
        assert!(size(&refused(&path)) <= MAX_REFUSED_BYTES);
        assert!(size(&rotated(&refused(&path))) <= MAX_REFUSED_BYTES);
        let since = ((minutes - KEPT_MINUTES as usize) * 60) as f64;
        let kept: u64 = refusals(&read(&path), since).iter().map(|r| r.count).sum();
        assert_eq!(kept, KEPT_MINUTES * per_minute as u64);
    }

    /// A log written before refusals had their own file holds refusals itself: they are read
    /// once, beside the new ones.
    #[test]
    fn refusals_in_a_log_of_before_are_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let old = ev(Verdict::Refused, "a.example", 443, 10.0);
        let mut line = serde_json::to_string(&old).unwrap();
        line.push('\n');
        std::fs::write(&path, line).unwrap();
        let mut log = open_in(dir.path());
        log.write(&ev(Verdict::Allowed, "b.example", 443, 20.0));
        log.write(&ev(Verdict::Refused, "a.example", 443, 30.0));
        drop(log);
        let back = read(&path);
        assert_eq!(back.len(), 3);
        assert_eq!(refusals(&back, 0.0)[0].count, 2);
        assert_eq!(refused(&path), dir.path().join("log-refused.jsonl"));
    }

    #[test]
    fn refusals_since_a_time_become_a_grant_to_paste() {
        let events = vec![
            ev(Verdict::Refused, "old.example.com", 443, 1.0),
            ev(Verdict::Refused, "api.example.com", 443, 10.0),
            ev(Verdict::Refused, "api.example.com", 443, 11.0),
            ev(Verdict::Allowed, "ok.example.com", 443, 12.0),
            ev(Verdict::Refused, "git.example.com", 8443, 13.0),
            ev(Verdict::Refused, "127.0.0.1", 5432, 14.0),
        ];
        let r = refusals(&events, 5.0);
        // The host's loopback by name is withheld too, and named with its port.
        let host_service = refusals(
            &[ev(Verdict::Refused, "host.ateam.internal", 443, 6.0)],
            5.0,
        );
        let s = suggest(
            "t",
            &crate::model::AccessGrant {
                name: "web".into(),
                read: vec![],
                write: vec![],
                network: crate::model::Network::Allow(vec!["ok.example.com".into()]),
                intercept: vec![],
                host_listeners: vec![],
                deny: vec![],
            },
            &host_service,
            None,
        );
        assert_eq!(s.grant, None);
        assert_eq!(
            s.withheld,
            [
                "`host.ateam.internal:443` is the host's loopback: it opens services listening on this machine itself"
            ]
        );
        assert_eq!(
            r.iter()
                .map(|r| (r.host.as_str(), r.count))
                .collect::<Vec<_>>(),
            [
                ("api.example.com", 2),
                ("127.0.0.1", 1),
                ("git.example.com", 1)
            ]
        );
        let grant = crate::model::AccessGrant {
            name: "web".into(),
            read: vec!["/src".into()],
            write: vec![],
            network: crate::model::Network::Allow(vec!["ok.example.com".into()]),
            intercept: vec![],
            host_listeners: vec![],
            deny: vec![],
        };
        let s = suggest("t", &grant, &r, None);
        let yaml = s.grant.unwrap();
        assert!(yaml.contains("metadata: {name: web}"), "{yaml}");
        assert!(yaml.contains("- \"ok.example.com\"\n      - \"api.example.com\"\n      - \"git.example.com:8443\""), "{yaml}");
        // A loopback address is not in it: it is named, with what it would open.
        assert!(!yaml.contains("127.0.0.1"), "{yaml}");
        assert_eq!(
            s.withheld,
            [
                "`127.0.0.1:5432` is a loopback address: it opens services listening on this machine itself; port 5432 is PostgreSQL: a database"
            ]
        );
        // It is a grant ateam accepts as it is.
        let value = &yaml_rust2::YamlLoader::load_from_str(&yaml).unwrap()[0];
        let allow = &value["spec"]["network"]["allow"];
        assert_eq!(allow[2].as_str(), Some("git.example.com:8443"));
        for e in allow.as_vec().unwrap() {
            crate::core::egress::Entry::parse(e.as_str().unwrap()).unwrap();
        }
    }

    #[test]
    fn a_host_with_rules_stays_in_its_map_form_and_its_refusals_are_not_suggested() {
        use crate::core::intercept::{Credential, HttpRule, Intercept};
        let ruled = Intercept {
            host: "api.github.com".into(),
            credentials: Some(Credential::Bearer {
                secret: "GITHUB_TOKEN".into(),
            }),
            http: vec![HttpRule {
                methods: vec!["GET".into()],
                paths: vec!["/repos/acme/shop/**".into()],
            }],
            git: None,
            upstream_ca: None,
        };
        let grant = crate::model::AccessGrant {
            name: "web".into(),
            read: vec![],
            write: vec![],
            network: crate::model::Network::Allow(vec!["api.github.com".into()]),
            intercept: vec![ruled.clone()],
            host_listeners: vec![],
            deny: vec![],
        };
        let mut by_rule = ev(Verdict::Refused, "api.github.com", 443, 10.0);
        by_rule.method = "POST".into();
        by_rule.reason = Some("no http rule allows POST /repos/acme/shop/issues".into());
        let r = refusals(&[by_rule, ev(Verdict::Refused, "pypi.org", 443, 11.0)], 5.0);
        let s = suggest("t", &grant, &r, None);
        assert_eq!(
            s.withheld,
            [
                "`api.github.com:443` has rules (entry `api.github.com`), which refused it: no http rule allows POST /repos/acme/shop/issues; widen them by hand if you mean it"
            ]
        );
        let yaml = s.grant.expect("pypi.org is suggested");
        let obj: crate::manifest::raw::Object<crate::manifest::raw::AccessGrantSpec> =
            serde_json::from_value(
                crate::manifest::yaml::parse(&yaml).unwrap()[0]
                    .value
                    .clone(),
            )
            .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let crate::manifest::raw::NetworkSpec::Allow(allow) = obj.spec.network else {
            panic!("{yaml}")
        };
        assert_eq!(
            allow,
            [
                crate::manifest::raw::AllowEntry::Rules(crate::manifest::rules::host_rules(&ruled)),
                "pypi.org".into()
            ]
        );
    }

    /// A refusal of a request that named no host is never offered (`:0` would not
    /// validate); with its manifest's document, the grant offered is that document with the
    /// entries added, the person's relative paths and `upstreamCA` file kept; without it, a
    /// host's `upstreamCA` is never written out as its PEM.
    #[test]
    fn a_suggestion_validates_as_pasted_and_keeps_the_persons_spelling() {
        use crate::core::intercept::Intercept;
        let grant = crate::model::AccessGrant {
            name: "g".into(),
            read: vec![],
            write: vec!["/home/p/repo".into()],
            network: crate::model::Network::Allow(vec!["model.example".into()]),
            intercept: vec![Intercept {
                host: "model.example".into(),
                credentials: None,
                http: vec![],
                git: None,
                upstream_ca: Some(
                    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
                ),
            }],
            host_listeners: vec![],
            deny: vec![],
        };
        let r = refusals(
            &[
                ev(Verdict::Refused, "", 0, 10.0),
                ev(Verdict::Refused, "pypi.org", 443, 11.0),
            ],
            5.0,
        );
        let source = "# mine\napiVersion: ateam.dev/v1alpha1\nkind: AccessGrant\nmetadata: {name: g}\nspec:\n  write: [./repo]\n  network:\n    allow:\n      - {host: model.example, upstreamCA: ./model-ca.pem}\n";
        let s = suggest("t", &grant, &r, Some(source));
        assert_eq!(
            s.grant.as_deref(),
            Some(
                "# mine\napiVersion: ateam.dev/v1alpha1\nkind: AccessGrant\nmetadata: {name: g}\nspec:\n  write: [./repo]\n  network:\n    allow:\n      - {host: model.example, upstreamCA: ./model-ca.pem}\n      - pypi.org\n"
            )
        );
        assert!(
            s.withheld
                .iter()
                .any(|w| w.contains("`:0` is no entry a grant can name")),
            "{:?}",
            s.withheld
        );
        let s = suggest("t", &grant, &r, None);
        assert_eq!(s.grant, None);
        assert!(
            s.withheld
                .iter()
                .any(|w| w.contains("add `pypi.org` to spec.network.allow of AccessGrant `g`")),
            "{:?}",
            s.withheld
        );
        assert!(
            s.withheld.iter().all(|w| !w.contains("BEGIN")),
            "{:?}",
            s.withheld
        );
    }
}
