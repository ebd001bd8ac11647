//! Access grants: the folders a member may read and write, and the network it may reach; and
//! whether one grant is within another, as a member's must be within its parent's.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{Build, Parsed, TeamObjects};
use crate::core::egress;
use crate::core::intercept::Intercept;
use crate::manifest::paths::{check_grant, resolve, within};
use crate::manifest::raw::{self, NetworkSpec};
use crate::manifest::rules;
use crate::model::{AccessGrant, Network};

/// How a grant uses a folder: one a member may write must also keep clear of what no member
/// may write (`Fence::check_writable`).
#[derive(Debug, Clone, Copy)]
enum Use {
    Read,
    Write,
}

impl Use {
    fn field(self) -> &'static str {
        match self {
            Use::Read => "read",
            Use::Write => "write",
        }
    }
}

impl Build<'_> {
    /// The team's grants, by name.
    pub(super) fn grants<'o>(&mut self, t: &TeamObjects<'o>) -> BTreeMap<&'o str, AccessGrant> {
        let mut grants = BTreeMap::new();
        for (o, g) in &t.grants {
            let write = self.grant_paths(o, &g.write, Use::Write);
            let read: Vec<PathBuf> = self
                .grant_paths(o, &g.read, Use::Read)
                .into_iter()
                .filter(|r| !write.contains(r))
                .collect();
            let (network, intercept) = self.network(o, &g.network);
            let host_listeners = self.host_listeners(o, g, &network);
            let deny = self.deny(o, g, &network);
            grants.insert(
                o.name.as_str(),
                AccessGrant {
                    name: o.name.clone(),
                    read,
                    write,
                    network,
                    intercept,
                    host_listeners,
                    deny,
                },
            );
        }
        grants
    }

    /// The folders of `spec.read` or `spec.write`, resolved, each judged where the user wrote
    /// it: kept even when refused, so that the checks after still see the grant as written.
    fn grant_paths(&mut self, o: &Parsed, list: &[String], how: Use) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for (i, raw) in list.iter().enumerate() {
            let p = resolve(raw, &o.src.dir, &self.host.home);
            let judged = check_grant(&p, self.host)
                .and_then(|()| self.fence.check_grant(&p))
                .and_then(|()| match how {
                    Use::Write => self.fence.check_writable(&p),
                    Use::Read => Ok(()),
                });
            if let Err(e) = judged {
                self.problems
                    .push(o.value_problem(&format!("spec.{}[{i}]", how.field()), e));
            }
            out.push(p);
        }
        out
    }

    /// The grant's network, and the rules of those of its hosts that have them.
    fn network(&mut self, o: &Parsed, spec: &NetworkSpec) -> (Network, Vec<Intercept>) {
        let hosts = match spec {
            NetworkSpec::None => return (Network::None, Vec::new()),
            NetworkSpec::Open => return (Network::Open, Vec::new()),
            NetworkSpec::Allow(hosts) => hosts,
        };
        let problems = &mut *self.problems;
        if hosts.is_empty() {
            problems.push(o.problem(
                "spec.network",
                "an empty allow list: write `network: none` for no network",
            ));
        }
        let mut intercept = Vec::new();
        for (i, entry) in hosts.iter().enumerate() {
            let at = format!("spec.network.allow[{i}]");
            match entry {
                raw::AllowEntry::Host(h) => {
                    if let Err(e) = check_host_pattern(h) {
                        problems.push(o.value_problem(&at, e));
                    }
                }
                raw::AllowEntry::Rules(r) => {
                    let (i, bad) = rules::intercept_of(r, &o.src.dir, &self.host.home);
                    for (field, e) in bad {
                        problems.push(o.value_problem(&format!("{at}.{field}"), e));
                    }
                    intercept.push(i);
                }
            }
        }
        for (j, e) in rules::overlaps(hosts) {
            problems.push(o.value_problem(&format!("spec.network.allow[{j}]"), e));
        }
        let allow = hosts.iter().map(|h| h.host().to_string()).collect();
        (Network::Allow(allow), intercept)
    }
}

impl Build<'_> {
    /// `spec.deny`: entries as an allow list's, meaningful only where the proxy judges.
    fn deny(&mut self, o: &Parsed, g: &raw::AccessGrantSpec, network: &Network) -> Vec<String> {
        if g.deny.is_empty() {
            return Vec::new();
        }
        if !matches!(network, Network::Allow(_)) {
            self.problems.push(o.value_problem(
                "spec.deny",
                "only an allow list (`network: {allow: [...]}`) has a proxy that refuses what `deny` names; remove deny or write an allow list".to_string(),
            ));
        }
        for (i, d) in g.deny.iter().enumerate() {
            if let Err(e) = egress::Entry::parse(d) {
                self.problems
                    .push(o.value_problem(&format!("spec.deny[{i}]"), e));
            }
        }
        g.deny.clone()
    }

    /// `spec.hostListeners`: meaningful only where the proxy judges (an allow list), each
    /// uid once.
    fn host_listeners(
        &mut self,
        o: &Parsed,
        g: &raw::AccessGrantSpec,
        network: &Network,
    ) -> Vec<u32> {
        if g.host_listeners.is_empty() {
            return Vec::new();
        }
        if !matches!(network, Network::Allow(_)) {
            self.problems.push(o.value_problem(
                "spec.hostListeners",
                "only an allow list (`network: {allow: [...]}`) reaches host services through the proxy; remove hostListeners or write an allow list".to_string(),
            ));
        }
        let mut seen = Vec::new();
        for (i, uid) in g.host_listeners.iter().enumerate() {
            if seen.contains(uid) {
                self.problems.push(o.value_problem(
                    &format!("spec.hostListeners[{i}]"),
                    format!("uid {uid} is named twice"),
                ));
            } else {
                seen.push(*uid);
            }
        }
        seen
    }
}

fn check_host_pattern(h: &str) -> Result<(), String> {
    egress::Entry::parse(h).map(|_| ())
}

/// Does the allowlist entry `outer` let through everything `inner` does.
fn host_covers(outer: &str, inner: &str) -> bool {
    match (egress::Entry::parse(outer), egress::Entry::parse(inner)) {
        (Ok(o), Ok(i)) => o.covers(&i),
        (Err(_), _) | (_, Err(_)) => false,
    }
}

/// Is `child` the same as or narrower than `parent`; the first way it is wider if not.
pub(crate) fn narrower(child: &AccessGrant, parent: &AccessGrant) -> Result<(), (String, String)> {
    for (i, r) in child.read.iter().enumerate() {
        if !parent
            .read
            .iter()
            .chain(&parent.write)
            .any(|p| within(r, p))
        {
            return Err((
                format!("read[{i}]"),
                format!("reads `{}`, which its parent may not read", r.display()),
            ));
        }
    }
    for (i, w) in child.write.iter().enumerate() {
        if !parent.write.iter().any(|p| within(w, p)) {
            return Err((
                format!("write[{i}]"),
                format!("writes `{}`, which its parent may not write", w.display()),
            ));
        }
    }
    if let Some((i, uid)) = child
        .host_listeners
        .iter()
        .enumerate()
        .find(|(_, u)| !parent.host_listeners.contains(u))
    {
        return Err((
            format!("hostListeners[{i}]"),
            format!("names uid {uid}, whose listeners its parent's grant may not reach"),
        ));
    }
    let ok = match (&child.network, &parent.network) {
        (Network::None, _) | (Network::Open, Network::Open) => true,
        (Network::Allow(c), Network::Allow(p)) => {
            if let Some((i, h)) = c
                .iter()
                .enumerate()
                .find(|(_, h)| !p.iter().any(|o| host_covers(o, h)))
            {
                return Err((
                    format!("network.allow[{i}]"),
                    format!(
                        "allows `{h}`, which its parent's allow list does not cover (an entry without a port is 443 and 80)"
                    ),
                ));
            }
            rules_within(child, c, Some((p, parent)))?;
            true
        }
        (Network::Allow(c), Network::Open) => {
            rules_within(child, c, None)?;
            true
        }
        (Network::Open, Network::None | Network::Allow(_)) | (Network::Allow(_), Network::None) => {
            false
        }
    };
    if ok {
        Ok(())
    } else {
        Err((
            "network".into(),
            "allows more network than its parent's grant".into(),
        ))
    }
}

/// The child's hosts with rules within its parent's (`core::intercept::covers`); `None`
/// for a parent with open network.
fn rules_within(
    child: &AccessGrant,
    allow: &[String],
    parent: Option<(&[String], &AccessGrant)>,
) -> Result<(), (String, String)> {
    use crate::core::intercept::{EgressPolicy, covers};
    let policy = |allow: &[String], g: &AccessGrant| EgressPolicy {
        allow: allow.to_vec(),
        intercept: g.intercept.clone(),
        ..Default::default()
    };
    let parent = parent.map(|(a, g)| policy(a, g));
    covers::within(&policy(allow, child), parent.as_ref())
        .map_err(|w| (format!("network.allow[{}]", w.index), w.reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_patterns() {
        assert!(host_covers("*.example.com", "api.example.com"));
        assert!(host_covers("*.example.com", "*.a.example.com"));
        assert!(!host_covers("*.example.com", "example.com"));
        assert!(host_covers("api.example.com", "api.example.com:443"));
        assert!(!host_covers("api.example.com:443", "api.example.com"));
        assert!(check_host_pattern("api.example.com:443").is_ok());
        assert!(check_host_pattern("*.example.com").is_ok());
        assert!(check_host_pattern("http://x").is_err());
        assert!(check_host_pattern("a..b").is_err());
    }
}
