//! Whether a child's hosts with rules stay within its parent's. Rules only narrow, so a
//! child may add rules to a host its parent tunnels; but a credential is a capability, not a
//! restriction: a child may hold one only where its parent holds the very same.
//!
//! Destinations themselves (is every child entry covered by a parent entry) are judged by
//! `core::egress::Entry::covers`; this judges what the rules add.

use super::{EgressPolicy, GitRule, HttpRule, Intercept};
use crate::core::egress::{self, DEFAULT_PORTS, Entry, Target};

/// The first way a child's policy is wider than its parent's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wider {
    /// The child's `allow` entry at fault.
    pub index: usize,
    /// Why, for a person (names hosts and secrets, never values).
    pub reason: String,
}

/// Is `child`'s rules-wise the same as or narrower than `parent`'s. `None` for the parent:
/// it has unrestricted network (`open`), which tunnels everything and holds no credential.
pub fn within(child: &EgressPolicy, parent: Option<&EgressPolicy>) -> Result<(), Wider> {
    let empty = EgressPolicy::default();
    let parent_rules: Vec<(Entry, &Intercept)> = parent
        .unwrap_or(&empty)
        .intercept
        .iter()
        .filter_map(|i| Entry::parse(&i.host).ok().map(|e| (e, i)))
        .collect();
    for (index, host) in child.allow.iter().enumerate() {
        let Ok(entry) = Entry::parse(host) else {
            continue; // reported as a bad entry already
        };
        let wider = |reason: String| Err(Wider { index, reason });
        let mine = child.intercept.iter().find(|i| i.host == *host);
        // The parent's hosts with rules this entry reaches.
        let reached: Vec<&(Entry, &Intercept)> = parent_rules
            .iter()
            .filter(|(p, _)| reaches(&entry, p))
            .collect();
        let Some(mine) = mine else {
            if let Some((_, p)) = reached.first() {
                return wider(format!(
                    "tunnels `{host}`, where its parent's grant has rules on `{}`; give this entry rules within the parent's",
                    p.host
                ));
            }
            continue;
        };
        let Some((_, theirs)) = reached.iter().find(|(p, _)| p.covers(&entry)) else {
            if let Some((_, p)) = reached.first() {
                return wider(format!(
                    "has rules on `{host}`, which reach more ports than its parent's rules on `{}`",
                    p.host
                ));
            }
            // The parent tunnels it: any rules narrow, but no credential comes with a tunnel.
            if let Some(c) = &mine.credentials {
                return wider(format!(
                    "injects `{}` into `{host}`, a credential its parent's grant does not have there",
                    c.secret()
                ));
            }
            continue;
        };
        if let Err(reason) = intercept_within(mine, theirs) {
            return wider(reason);
        }
    }
    Ok(())
}

/// Does a request allowed by `child` always get through `parent` (same host), with no
/// credential `parent` lacks.
pub(crate) fn intercept_within(child: &Intercept, parent: &Intercept) -> Result<(), String> {
    let host = &child.host;
    if let Some(c) = &child.credentials
        && parent.credentials.as_ref() != Some(c)
    {
        return Err(format!(
            "injects `{}` into `{host}`, a credential its parent's grant does not have there in the same form",
            c.secret()
        ));
    }
    // Another CA trusted for the upstream: the credential could go to whoever it certifies.
    if child.upstream_ca.is_some() && child.upstream_ca != parent.upstream_ca {
        return Err(format!(
            "trusts an upstream CA for `{host}` that its parent's grant does not trust there"
        ));
    }
    let parent_all = parent.http.is_empty() && parent.git.is_none();
    if parent_all {
        return Ok(());
    }
    if child.http.is_empty() && child.git.is_none() {
        return Err(format!(
            "allows every request to `{host}`, where its parent's rules allow only some"
        ));
    }
    if let Some(r) = child
        .http
        .iter()
        .find(|r| !parent.http.iter().any(|p| http_covers(p, r)))
    {
        return Err(format!(
            "allows {} on `{host}`, which no http rule of its parent's covers",
            describe(r)
        ));
    }
    if let Some(g) = &child.git {
        match &parent.git {
            None => {
                return Err(format!(
                    "allows git on `{host}`, where its parent's rules allow no git"
                ));
            }
            Some(p) => git_covers(p, g, host)?,
        }
    }
    Ok(())
}

/// Every request `child` allows, `parent` allows: methods a subset, each path pattern equal
/// to or under a parent pattern ending in `**`.
pub(crate) fn http_covers(parent: &HttpRule, child: &HttpRule) -> bool {
    let methods = parent.methods.is_empty()
        || (!child.methods.is_empty() && child.methods.iter().all(|m| parent.methods.contains(m)));
    let paths = parent.paths.is_empty()
        || (!child.paths.is_empty()
            && child
                .paths
                .iter()
                .all(|c| parent.paths.iter().any(|p| path_covers(p, c))));
    methods && paths
}

/// `/a/**` covers every pattern that starts with `/a/` (whatever follows matches `**`).
fn path_covers(parent: &str, child: &str) -> bool {
    parent == child
        || parent
            .strip_suffix("**")
            .is_some_and(|prefix| child.starts_with(prefix))
}

fn git_covers(parent: &GitRule, child: &GitRule, host: &str) -> Result<(), String> {
    if child.push && !parent.push {
        return Err(format!(
            "allows git push to `{host}`, where its parent's rules allow only fetch"
        ));
    }
    if parent.repositories.is_empty() {
        return Ok(());
    }
    if child.repositories.is_empty() {
        return Err(format!(
            "allows git on any repository of `{host}`, where its parent's rules name some"
        ));
    }
    let bare = |r: &str| r.trim_end_matches(".git").to_ascii_lowercase();
    match child
        .repositories
        .iter()
        .find(|c| !parent.repositories.iter().any(|p| bare(p) == bare(c)))
    {
        Some(r) => Err(format!(
            "allows git on `{host}/{r}`, a repository its parent's rules do not name"
        )),
        None => Ok(()),
    }
}

fn describe(r: &HttpRule) -> String {
    let list = |v: &[String], any: &str| {
        if v.is_empty() {
            any.to_string()
        } else {
            v.join(", ")
        }
    };
    format!(
        "{} {}",
        list(&r.methods, "any method"),
        list(&r.paths, "on any path")
    )
}

/// Does a connection allowed by `entry` ever go to the host of `rules` (never a wildcard).
pub fn reaches(entry: &Entry, rules: &Entry) -> bool {
    let host = match &rules.target {
        Target::Name(n) => egress::Host::Name(n.clone()),
        Target::Ip(a) => egress::Host::Ip(*a),
        Target::Below(_) => return false,
    };
    ports(rules).iter().any(|p| entry.matches(&host, *p))
}

/// The ports an entry allows.
pub fn ports(e: &Entry) -> Vec<u16> {
    match e.port {
        Some(p) => vec![p],
        None => DEFAULT_PORTS.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Credential;
    use super::*;

    fn rules(host: &str) -> Intercept {
        Intercept {
            host: host.into(),
            credentials: None,
            http: vec![],
            git: None,
            upstream_ca: None,
        }
    }

    fn bearer(host: &str, secret: &str) -> Intercept {
        Intercept {
            credentials: Some(Credential::Bearer {
                secret: secret.into(),
            }),
            ..rules(host)
        }
    }

    fn http(methods: &[&str], paths: &[&str]) -> HttpRule {
        HttpRule {
            methods: methods.iter().map(|s| s.to_string()).collect(),
            paths: paths.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn policy(allow: &[&str], intercept: Vec<Intercept>) -> EgressPolicy {
        EgressPolicy {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            intercept,
            ..Default::default()
        }
    }

    #[test]
    fn rules_narrow_a_tunnel_but_bring_no_credential() {
        let parent = policy(&["api.x.org"], vec![]);
        let narrowed = policy(&["api.x.org"], vec![rules("api.x.org")]);
        assert_eq!(within(&narrowed, Some(&parent)), Ok(()));
        let with_key = policy(&["api.x.org"], vec![bearer("api.x.org", "KEY")]);
        let e = within(&with_key, Some(&parent)).unwrap_err();
        assert!(e.reason.contains("injects `KEY`"), "{}", e.reason);
        // An open parent tunnels everything and holds no credential either.
        assert!(within(&with_key, None).is_err());
        assert_eq!(within(&narrowed, None), Ok(()));
    }

    #[test]
    fn credentials_must_be_the_parents_own() {
        let parent = policy(&["api.x.org"], vec![bearer("api.x.org", "KEY")]);
        let same = policy(&["api.x.org"], vec![bearer("api.x.org", "KEY")]);
        assert_eq!(within(&same, Some(&parent)), Ok(()));
        let other = policy(&["api.x.org"], vec![bearer("api.x.org", "OTHER")]);
        assert_eq!(within(&other, Some(&parent)).unwrap_err().index, 0);
        // Without the credential: narrower, the requests go out bare.
        let bare = policy(&["api.x.org"], vec![rules("api.x.org")]);
        assert_eq!(within(&bare, Some(&parent)), Ok(()));
        // A tunnel where the parent has rules would skip them.
        let tunnel = policy(&["a.org", "*.x.org"], vec![]);
        let e = within(&tunnel, Some(&parent)).unwrap_err();
        assert_eq!(e.index, 1);
        assert!(e.reason.contains("tunnels `*.x.org`"), "{}", e.reason);
    }

    #[test]
    fn http_and_git_rules_stay_within() {
        let mut p = rules("api.x.org");
        p.http = vec![http(&["GET", "HEAD"], &["/repos/acme/**"])];
        p.git = Some(GitRule {
            repositories: vec!["acme/shop".into()],
            push: false,
        });
        let parent = policy(&["api.x.org"], vec![p]);
        let check = |c: Intercept| within(&policy(&["api.x.org"], vec![c]), Some(&parent));
        let mut c = rules("api.x.org");
        assert!(check(c.clone()).is_err(), "no rules: every request");
        c.http = vec![http(&["GET"], &["/repos/acme/shop/**", "/repos/acme/x"])];
        assert_eq!(check(c.clone()), Ok(()));
        c.http = vec![http(&["POST"], &["/repos/acme/x"])];
        assert!(check(c.clone()).is_err());
        c.http = vec![http(&["GET"], &["/repos/other/x"])];
        assert!(check(c.clone()).is_err());
        c.http = vec![http(&[], &["/repos/acme/x"])];
        assert!(
            check(c.clone()).is_err(),
            "any method is wider than GET, HEAD"
        );
        c.http = vec![];
        c.git = Some(GitRule {
            repositories: vec!["acme/shop.git".into()],
            push: false,
        });
        assert_eq!(check(c.clone()), Ok(()));
        c.git = Some(GitRule {
            repositories: vec!["acme/shop".into()],
            push: true,
        });
        assert!(check(c.clone()).is_err(), "push");
        c.git = Some(GitRule {
            repositories: vec![],
            push: false,
        });
        assert!(check(c).is_err(), "any repository");
    }

    #[test]
    fn path_patterns() {
        assert!(path_covers("/a/**", "/a/b/*"));
        assert!(path_covers("/**", "/anything"));
        assert!(path_covers("/a/b", "/a/b"));
        assert!(!path_covers("/a/*", "/a/b/c"));
        assert!(!path_covers("/a/**", "/ab"));
    }
}
