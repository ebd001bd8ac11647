//! What a member is judged by, read from its files: the allowlist (`PolicyFile`) with what
//! its person allowed once for the start running now, the learning run's bounds, and the
//! intercepts' certificates and secrets (`InterceptFile`), each with the stamps that tell
//! when its file changed. Apart from the proxy's state (`state`), which decides when to read
//! them anew, because reading and checking a policy is a job of its own, tested alone.

use std::sync::Arc;

use super::dir::Dir;
use super::intercept as icpt;
use crate::core::egress::Allowlist;
use crate::core::intercept::Intercept;
use crate::core::layout;
use crate::servers::egress::{InterceptFile, LearnFile, OnceFile, PolicyFile};

/// The allowlist as last read, and how to tell that its file changed.
pub(super) struct Policy {
    /// Shared, not copied, by every connection that looks at it.
    pub(super) list: Result<Arc<(Allowlist, Vec<Intercept>)>, String>,
    /// `appliedBy` and `hostListeners`: whose listeners on the host are reached.
    pub(super) owners: (Vec<u32>, Vec<u32>),
    /// What is refused even where the list reaches it (the grant's `deny`).
    pub(super) deny: Allowlist,
    /// A learning run's bounds, if one was asked for.
    pub(super) learn: Option<LearnFile>,
    pub(super) stamp: Stamps,
}

/// How to tell that the policy, the allowed-once file, the member's start or the learning
/// run changed.
pub(super) type Stamps = [Option<(i64, u64, u64, u64)>; 4];

/// The stamps of what the list in force is read from.
pub(super) fn stamps(dir: &Dir, name: &str, ctl: &Dir) -> Stamps {
    [
        dir.stamp(name),
        dir.stamp(layout::EGRESS_ONCE_NAME),
        ctl.stamp(layout::GATE_RELEASE_NAME),
        dir.stamp(layout::EGRESS_LEARN_NAME),
    ]
}

pub(super) fn read_policy(dir: &Dir, name: &str, ctl: &Dir) -> Policy {
    let stamp = stamps(dir, name, ctl);
    let shown = dir.path.join(name);
    let mut owners = (Vec::new(), Vec::new());
    let mut deny = Allowlist::default();
    let list = dir
        .read(name)
        .map_err(|e| format!("cannot read the allowlist {}: {e}", shown.display()))
        .and_then(|b| {
            serde_json::from_slice::<PolicyFile>(&b)
                .map_err(|e| format!("the allowlist {} is not valid: {e}", shown.display()))
        })
        .and_then(|mut p| {
            once(dir, ctl, &mut p);
            // An intercept that names no host would fail open (its host tunnelled): the whole
            // policy is refused instead, like a bad entry.
            for i in &p.intercept {
                icpt::check(i).map_err(|e| format!("the allowlist {}: {e}", shown.display()))?;
            }
            owners = (p.applied_by, p.host_listeners);
            // A deny entry that does not parse would let through what it names: the whole
            // policy is refused instead.
            deny = Allowlist::parse(&p.deny)
                .map_err(|e| format!("the allowlist {}: deny: {e}", shown.display()))?;
            Ok(Arc::new((Allowlist::parse(&p.allow)?, p.intercept)))
        });
    let learn = dir
        .read(layout::EGRESS_LEARN_NAME)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    Policy {
        list,
        owners,
        deny,
        learn,
        stamp,
    }
}

/// Adds to `p` what the person allowed once for the member's start running now: the
/// allowed-once file counts only while the gate's release file names the very start it was
/// written for (a restart releases another: it is gone). An entry of it that does not parse,
/// or a rule for a host without rules, makes it count for nothing.
fn once(dir: &Dir, ctl: &Dir, p: &mut PolicyFile) {
    let Ok(bytes) = dir.read(layout::EGRESS_ONCE_NAME) else {
        return;
    };
    let Ok(o) = serde_json::from_slice::<OnceFile>(&bytes) else {
        return;
    };
    let now = ctl
        .read(layout::GATE_RELEASE_NAME)
        .map(|b| String::from_utf8_lossy(&b).trim().to_string());
    if now.ok().as_deref() != Some(o.start.trim()) || o.start.trim().is_empty() {
        return;
    }
    if Allowlist::parse(&o.allow).is_err()
        || !o
            .rules
            .iter()
            .all(|r| p.intercept.iter().any(|i| i.host == r.host))
    {
        return;
    }
    p.allow.extend(o.allow);
    for r in o.rules {
        if let Some(i) = p.intercept.iter_mut().find(|i| i.host == r.host) {
            i.http.push(r.rule);
        }
    }
}

/// The certificates and secrets as last read, and how to tell that their file changed.
pub(super) struct Intercepts {
    pub(super) file: Result<Arc<InterceptFile>, String>,
    pub(super) stamp: Option<(i64, u64, u64, u64)>,
}

pub(super) fn read_intercepts(dir: &Dir) -> Intercepts {
    let stamp = dir.stamp(layout::EGRESS_INTERCEPT_NAME);
    let shown = dir.path.join(layout::EGRESS_INTERCEPT_NAME);
    // The error names the file and serde's position, never its content (it holds secrets).
    let file = dir
        .read(layout::EGRESS_INTERCEPT_NAME)
        .map_err(|e| format!("cannot read {}: {e}", shown.display()))
        .and_then(|b| {
            serde_json::from_slice::<InterceptFile>(&b).map_err(|e| {
                format!(
                    "{} is not valid at line {} column {}",
                    shown.display(),
                    e.line(),
                    e.column()
                )
            })
        })
        .map(Arc::new);
    Intercepts { file, stamp }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::egress::Host;
    use crate::servers::egress::OnceRule;

    #[test]
    fn what_is_allowed_once_counts_for_the_start_it_names_alone() {
        let egress = tempfile::tempdir().unwrap();
        let ctl = tempfile::tempdir().unwrap();
        let policy = PolicyFile {
            team: "t".into(),
            member: "a".into(),
            allow: vec!["example.com".into()],
            intercept: vec![],
            applied_by: vec![],
            host_listeners: vec![],
            deny: vec!["denied.example".into()],
        };
        std::fs::write(
            egress.path().join("policy.json"),
            serde_json::to_vec(&policy).unwrap(),
        )
        .unwrap();
        let once = OnceFile {
            start: "c1 s1".into(),
            allow: vec!["pypi.org".into(), "denied.example".into()],
            rules: vec![],
        };
        std::fs::write(
            egress.path().join(layout::EGRESS_ONCE_NAME),
            serde_json::to_vec(&once).unwrap(),
        )
        .unwrap();
        let (dir, ctl_dir) = (
            Dir::open(egress.path()).unwrap(),
            Dir::open(ctl.path()).unwrap(),
        );
        let pypi = Host::parse("pypi.org").unwrap();
        let allows = |host: &Host| {
            read_policy(&dir, "policy.json", &ctl_dir)
                .list
                .unwrap()
                .0
                .allows(host, 443)
        };
        // Not released: nothing allowed once.
        assert!(!allows(&pypi));
        std::fs::write(ctl.path().join("go"), "c1 s1\n").unwrap();
        assert!(allows(&pypi));
        // Denied stays denied: the deny list is judged first, whatever the list allows.
        let p = read_policy(&dir, "policy.json", &ctl_dir);
        assert!(p.deny.allows(&Host::parse("denied.example").unwrap(), 443));
        // Another start (a restart): gone.
        std::fs::write(ctl.path().join("go"), "c1 s2").unwrap();
        assert!(!allows(&pypi));
        // A rule for a host without rules: the file counts for nothing.
        std::fs::write(ctl.path().join("go"), "c1 s1").unwrap();
        let bad = OnceFile {
            rules: vec![OnceRule {
                host: "nohost.example".into(),
                rule: crate::core::intercept::HttpRule {
                    methods: vec![],
                    paths: vec![],
                },
            }],
            ..once
        };
        std::fs::write(
            egress.path().join(layout::EGRESS_ONCE_NAME),
            serde_json::to_vec(&bad).unwrap(),
        )
        .unwrap();
        assert!(!allows(&pypi));
    }
}
