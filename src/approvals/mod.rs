//! Pending approvals: what a member was refused that the person could grant, collapsed by
//! what it would grant, each with a short id stable across looks. Pure: the refusals come
//! from the egress log (`servers::egress::log::read`), the answers already given from `record`.
//!
//! An approval is one of two asks (`Want`): an entry for the allow list (a host, a port), or
//! one more http rule (a method and a path) on a host with rules. What `status` would never
//! offer (loopback, link-local, metadata and private addresses, ports that serve more than
//! the web; `servers::egress::log::withheld`), what the member's parent could not grant (the same
//! judge as a child's grant, `core::intercept::covers`), and what the rules refused for a
//! reason another rule would not change, is listed with why, and never approvable here.
//!
//! The answers are the person's alone: `ateam approvals` on the host writes them into the
//! state folder and the manifests; no member has a socket or a file that reaches them.

pub(crate) mod asks;
pub(crate) mod record;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::core::egress::{Allowlist, Entry, Host, Target};
use crate::core::intercept::{EgressPolicy, HttpRule, Intercept, covers, judge};
use crate::core::layout;
use crate::model::{AccessGrant, Member, Network, Parent, Team};
use crate::servers::egress::log::{
    Event, NOT_LISTED, OTHERS, Refusal, Verdict, entry_for, withheld,
};

/// What an approval would grant.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase", tag = "kind", deny_unknown_fields)]
pub enum Want {
    /// An entry of the grant's allow list: `host`, `host:port`, an address with its port.
    Host {
        /// The entry, as `status` would suggest it (`servers::egress::log::entry_for`).
        entry: String,
    },
    /// One request to a host with rules: a rule `{methods: [method], paths: [path]}` more.
    Request {
        /// The host with rules, as its entry is written (`Intercept::host`).
        host: String,
        /// The method as sent.
        method: String,
        /// The path as logged (never its query).
        path: String,
    },
}

impl Want {
    /// What it would grant, for a person: `` `pypi.org` `` or `` `GET /v1/x` on `api.example` ``.
    pub fn describe(&self) -> String {
        match self {
            Want::Host { entry } => format!("`{entry}`"),
            Want::Request { host, method, path } => format!("`{method} {path}` on `{host}`"),
        }
    }

    /// The http rule it adds, for a request.
    pub fn rule(&self) -> Option<HttpRule> {
        match self {
            Want::Host { .. } => None,
            Want::Request { method, path, .. } => Some(HttpRule {
                methods: vec![method.clone()],
                paths: vec![path.clone()],
            }),
        }
    }

    fn key(&self) -> String {
        match self {
            Want::Host { entry } => format!("host\0{entry}"),
            Want::Request { host, method, path } => format!("request\0{host}\0{method}\0{path}"),
        }
    }
}

/// A short id for what `member` of `team` asks: the same ask has the same id at every look
/// (and in every output), so a person can answer the one they read.
pub fn id(team: &str, member: &str, want: &Want) -> String {
    let d = Sha256::digest(format!("{team}\0{member}\0{}", want.key()).as_bytes());
    d[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// One pending approval.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pending {
    /// Its id (`ateam approvals allow ID`).
    pub id: String,
    /// The member's team.
    pub team: String,
    /// The member refused.
    pub member: String,
    /// The AccessGrant it would change.
    pub grant: String,
    /// What it would grant.
    pub want: Want,
    /// Refusals it stands for.
    pub count: u64,
    /// The first of them, seconds since the epoch.
    pub first_seen: f64,
    /// The last of them, seconds since the epoch.
    pub last_seen: f64,
    /// The proxy's reason, of the last.
    pub reason: String,
    /// Why it cannot be approved here, if it cannot (it is shown all the same).
    pub not_approvable: Option<String>,
    /// The helper whose request asked for it (the last, if many), when a helper request
    /// did: a helper is never wider than its requester, so the requester's grant is asked.
    pub helper: Option<String>,
}

/// Whose grant a member's approvals may not exceed.
#[derive(Debug, Clone, Copy)]
pub enum ParentGrant<'a> {
    /// A main session: the person's own access.
    Session,
    /// A member, with its grant.
    Member {
        /// Its name, which the refusal's words give the person.
        name: &'a str,
        /// What the member's approvals may not exceed.
        grant: &'a AccessGrant,
    },
}

/// The member whose refusals are judged.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// Its team: approvals and their ids are per team.
    pub team: &'a str,
    /// Its name.
    pub member: &'a str,
    /// Its grant as applied.
    pub grant: &'a AccessGrant,
    /// Whose grant bounds what may be approved for it.
    pub parent: ParentGrant<'a>,
    /// The start of it running now (its gate's release text), if it runs: what the person
    /// allowed once for this start is not asked again.
    pub start: Option<&'a str>,
}

/// The pending approvals among `events` (a member's egress log), oldest ask first, without
/// those the person answered (`answered`) or the grant allows by now.
pub fn pending(s: &Subject, events: &[Event], answered: &record::Record) -> Vec<Pending> {
    pending_with(s, events, &[], answered)
}

/// `pending`, with the hosts its helper requests asked for (`asks`) as asks of its grant.
pub(crate) fn pending_with(
    s: &Subject,
    events: &[Event],
    asks: &[asks::Ask],
    answered: &record::Record,
) -> Vec<Pending> {
    let Network::Allow(list) = &s.grant.network else {
        return Vec::new();
    };
    let Ok(allow) = Allowlist::parse(list) else {
        return Vec::new();
    };
    // What the grant denies is never asked again (a bad entry is validate's to refuse).
    let deny = Allowlist::parse(&s.grant.deny).unwrap_or_default();
    let allowed_once: Vec<&str> = s
        .start
        .map(|start| answered.once_for(start))
        .unwrap_or_default()
        .into_iter()
        .map(|o| o.id.as_str())
        .collect();
    let mut by: BTreeMap<Want, Pending> = BTreeMap::new();
    // A learning run's passes are asks as refusals are.
    for e in events.iter().filter(|e| {
        (e.verdict == Verdict::Refused || e.learned)
            && !Host::parse(&e.host).is_some_and(|h| deny.allows(&h, e.port))
    }) {
        let Some((want, blocked)) = classify(s, &allow, e) else {
            continue;
        };
        let id = id(s.team, s.member, &want);
        if answered.dismissed.get(&id).is_some_and(|&at| e.ts <= at)
            || allowed_once.contains(&id.as_str())
        {
            continue;
        }
        let p = by.entry(want.clone()).or_insert_with(|| Pending {
            id,
            team: s.team.to_string(),
            member: s.member.to_string(),
            grant: s.grant.name.clone(),
            want,
            count: 0,
            first_seen: e.ts,
            last_seen: e.ts,
            reason: String::new(),
            not_approvable: None,
            helper: None,
        });
        p.count += e.times();
        p.last_seen = p.last_seen.max(e.ts);
        p.first_seen = p.first_seen.min(e.ts);
        p.reason = e.reason.clone().unwrap_or_default();
        p.not_approvable = blocked;
    }
    for a in asks {
        let Some((want, blocked)) = classify_ask(s, &allow, &deny, a) else {
            continue;
        };
        let id = id(s.team, s.member, &want);
        if answered
            .dismissed
            .get(&id)
            .is_some_and(|&at| a.last_seen <= at)
            || allowed_once.contains(&id.as_str())
        {
            continue;
        }
        let p = by.entry(want.clone()).or_insert_with(|| Pending {
            id,
            team: s.team.to_string(),
            member: s.member.to_string(),
            grant: s.grant.name.clone(),
            want,
            count: 0,
            first_seen: a.first_seen,
            last_seen: a.last_seen,
            reason: String::new(),
            not_approvable: blocked.clone(),
            helper: None,
        });
        p.count += a.count;
        p.first_seen = p.first_seen.min(a.first_seen);
        if a.last_seen >= p.last_seen {
            p.reason = format!(
                "a request for helper `{}` asks for it: a helper is never wider than its requester",
                a.helper
            );
        }
        p.last_seen = p.last_seen.max(a.last_seen);
        p.helper = Some(a.helper.clone());
    }
    let mut v: Vec<Pending> = by.into_values().collect();
    v.sort_by(|a, b| a.first_seen.total_cmp(&b.first_seen).then(a.id.cmp(&b.id)));
    v
}

/// How many pending approvals `status` lists per member (`ateam approvals` lists them all).
pub(crate) const SHOWN: usize = 10;

/// One approval in words, for `status` and `ateam approvals`: its id, what it would grant,
/// how often and when it was asked (`now`: seconds since the epoch), and whether it can be
/// approved here.
pub fn line(p: &Pending, now: f64) -> String {
    let ago = |t: f64| {
        humantime::format_duration(std::time::Duration::from_secs((now - t).max(0.0) as u64))
    };
    let seen = if p.count == 1 {
        format!("once, {} ago", ago(p.last_seen))
    } else {
        format!(
            "{}x, first {} ago, last {} ago",
            p.count,
            ago(p.first_seen),
            ago(p.last_seen)
        )
    };
    let answer = match &p.not_approvable {
        None => format!("grant `{}`", p.grant),
        Some(why) => format!("not approvable here: {why}"),
    };
    let by = match &p.helper {
        Some(h) => format!(", asked by a request for helper `{h}`"),
        None => String::new(),
    };
    format!(
        "{} {}/{} {} ({seen}{by}); {answer}",
        p.id,
        p.team,
        p.member,
        p.want.describe()
    )
}

/// `member` of `t` as `pending` judges it: its grant, its parent's, and its start now.
pub fn subject<'a>(t: &'a Team, member: &'a Member, start: Option<&'a str>) -> Subject<'a> {
    let parent = match &member.parent {
        Parent::MainSession(_) => ParentGrant::Session,
        Parent::Member(p) => match t.members.iter().find(|m| m.name == *p) {
            Some(pm) => ParentGrant::Member {
                name: &pm.name,
                grant: &pm.access,
            },
            // A parent that is not in the team judges nothing wider: offer nothing.
            None => ParentGrant::Member {
                name: p,
                grant: &CLOSED,
            },
        },
    };
    Subject {
        team: &t.name,
        member: &member.name,
        grant: &member.access,
        parent,
        start,
    }
}

/// A grant with nothing: the parent of a member whose parent is not found.
static CLOSED: AccessGrant = AccessGrant {
    name: String::new(),
    read: Vec::new(),
    write: Vec::new(),
    network: Network::None,
    intercept: Vec::new(),
    host_listeners: Vec::new(),
    deny: Vec::new(),
};

/// The pending approvals of `member` of `t`: its egress log read, with the person's answers
/// in the state folder. An unreadable record of answers counts as none (it is said on the
/// log): the asks are shown, which grants nothing.
pub fn of_member(state_dir: &Path, t: &Team, member: &Member, events: &[Event]) -> Vec<Pending> {
    let path = layout::member_approvals_path(state_dir, &t.name, &member.name);
    let answered = record::load(&path).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "the answers to approvals are not readable");
        record::Record::default()
    });
    let start = release(state_dir, &t.name, &member.name);
    let asks = asks::load(&layout::member_helper_asks_path(
        state_dir,
        &t.name,
        &member.name,
    ));
    pending_with(
        &subject(t, member, start.as_deref()),
        events,
        &asks.asks,
        &answered,
    )
}

/// The gate's release of the member's start running now (`container-id start-token`), if
/// it was released: what an allow once holds for.
pub fn release(state_dir: &Path, team: &str, member: &str) -> Option<String> {
    let ctl = layout::member_ctl_dir(state_dir, team, member);
    crate::files::read_small(&layout::gate_release_path(&ctl), 4096)
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

/// What a refusal asks for, and why it cannot be approved (if so); `None` for what no answer
/// concerns: a count of many destinations, or an ask granted since.
fn classify(s: &Subject, allow: &Allowlist, e: &Event) -> Option<(Want, Option<String>)> {
    if e.host == OTHERS && e.port == 0 {
        return None;
    }
    let host = Host::parse(&e.host);
    let ruled = host.as_ref().and_then(|h| {
        s.grant
            .intercept
            .iter()
            .find(|i| Entry::parse(&i.host).is_ok_and(|en| en.matches(h, e.port)))
    });
    match (ruled, &e.path) {
        (Some(i), Some(path)) if e.method != "CONNECT" => {
            let by_rules = e.reason.as_deref().is_some_and(judge::refused_by_rules);
            if by_rules && judge::rules_allow(i, &e.method, path) {
                return None; // granted since
            }
            let want = Want::Request {
                host: i.host.clone(),
                method: e.method.clone(),
                path: path.clone(),
            };
            let blocked = if by_rules {
                request_blocked(i, &e.method, path).or_else(|| within_parent(s, &want).err())
            } else {
                Some(format!(
                    "refused for a reason a rule does not change: {}",
                    e.reason.as_deref().unwrap_or("refused")
                ))
            };
            Some((want, blocked))
        }
        _ => {
            let r = Refusal {
                host: e.host.clone(),
                port: e.port,
                count: e.times(),
                reason: e.reason.clone().unwrap_or_default(),
            };
            let want = Want::Host {
                entry: entry_for(&r),
            };
            let listed = host.as_ref().is_some_and(|h| allow.allows(h, e.port));
            if listed && r.reason.ends_with(NOT_LISTED) {
                return None; // granted since
            }
            let blocked = if listed {
                Some(format!(
                    "the allow list has it already; refused for another reason: {}",
                    r.reason
                ))
            } else {
                withheld(&r)
                    .or_else(|| match &want {
                        Want::Host { entry } => Entry::parse(entry)
                            .err()
                            .map(|why| format!("`{entry}` is no entry a grant can name ({why})")),
                        Want::Request { .. } => None,
                    })
                    .or_else(|| within_parent(s, &want).err())
            };
            Some((want, blocked))
        }
    }
}

/// What a helper request's ask of a host would grant, and why it cannot be approved (if
/// so); `None` when the grant allows it by now or denies it.
fn classify_ask(
    s: &Subject,
    allow: &Allowlist,
    deny: &Allowlist,
    a: &asks::Ask,
) -> Option<(Want, Option<String>)> {
    let entry = Entry::parse(&a.entry).ok()?;
    if allow.entries.iter().any(|e| e.covers(&entry))
        || deny.entries.iter().any(|d| d.covers(&entry))
    {
        return None;
    }
    let want = Want::Host {
        entry: entry.to_string(),
    };
    // What `status` never offers, judged as a refusal of the entry's host and port would be.
    let (host, port) = match (&entry.target, entry.port) {
        (Target::Name(n), p) => (n.clone(), p.unwrap_or(443)),
        (Target::Below(d), p) => (format!("*.{d}"), p.unwrap_or(443)),
        (Target::Ip(ip), p) => (ip.to_string(), p.unwrap_or(443)),
    };
    let r = Refusal {
        host,
        port,
        count: a.count,
        reason: String::new(),
    };
    let blocked = withheld(&r).or_else(|| within_parent(s, &want).err());
    Some((want, blocked))
}

/// Why one more rule for `method path` on `i` would not be approved: a path that would be a
/// pattern, or a request a rule for it would still not let through (a push where `git`
/// says no push).
fn request_blocked(i: &Intercept, method: &str, path: &str) -> Option<String> {
    if path.contains('*') || !path.starts_with('/') || path.len() > 1024 {
        return Some(format!(
            "`{path}` would be a path pattern, not this one path: widen the rules by hand if you mean it"
        ));
    }
    // What a URL's path may hold (RFC 3986), no more: the member chose it, and it is written
    // into the person's manifest (a path shown escaped is no path it sent).
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()+,;=:@/%".contains(&b);
    if !path.bytes().all(plain) {
        return Some(format!(
            "`{path}` holds characters a URL's path does not: change the rules by hand if you mean it"
        ));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Some(format!("`{method}` is not a method a rule names"));
    }
    let mut wider = i.clone();
    wider.http.push(HttpRule {
        methods: vec![method.into()],
        paths: vec![path.into()],
    });
    (!judge::rules_allow(&wider, method, path)).then(|| {
        format!(
            "a rule for `{method} {path}` would not let it through: the host's git rule decides it"
        )
    })
}

/// The grant with `want` granted: its allow list with the entry, or its host with the rule.
pub(crate) fn widened(grant: &AccessGrant, want: &Want) -> EgressPolicy {
    let list = match &grant.network {
        Network::Allow(l) => l.clone(),
        Network::None | Network::Open => Vec::new(),
    };
    let mut p = EgressPolicy {
        allow: list,
        intercept: grant.intercept.clone(),
        ..EgressPolicy::default()
    };
    match want {
        Want::Host { entry } => p.allow.push(entry.clone()),
        Want::Request { host, .. } => {
            if let Some(i) = p.intercept.iter_mut().find(|i| i.host == *host) {
                i.http.extend(want.rule());
            }
        }
    }
    p
}

/// Whether the member's parent could grant `want` itself: a child is never wider.
fn within_parent(s: &Subject, want: &Want) -> Result<(), String> {
    let ParentGrant::Member { name, grant } = s.parent else {
        return Ok(());
    };
    let parent = match &grant.network {
        Network::Open => return Ok(()),
        Network::None => {
            return Err(format!(
                "its parent `{name}` has no network: a member is never wider than its parent"
            ));
        }
        Network::Allow(l) => EgressPolicy {
            allow: l.clone(),
            intercept: grant.intercept.clone(),
            ..EgressPolicy::default()
        },
    };
    let child = widened(s.grant, want);
    let theirs = Allowlist::parse(&parent.allow).unwrap_or_default();
    if let Want::Host { entry } = want
        && let Ok(mine) = Entry::parse(entry)
        && !theirs.entries.iter().any(|p| p.covers(&mine))
    {
        return Err(format!(
            "its parent `{name}`'s grant `{}` does not allow `{entry}`: a member is never wider than its parent",
            grant.name
        ));
    }
    covers::within(&child, Some(&parent)).map_err(|w| {
        format!(
            "it would make it wider than its parent `{name}`'s grant `{}`: {}",
            grant.name, w.reason
        )
    })
}

#[cfg(test)]
mod tests;
