use super::record::Record;
use super::*;
use crate::core::intercept::Intercept;

fn refused(host: &str, port: u16, ts: f64, reason: &str) -> Event {
    Event {
        ts,
        verdict: Verdict::Refused,
        method: "CONNECT".into(),
        host: host.into(),
        port,
        path: None,
        addr: None,
        status: 403,
        reason: Some(reason.into()),
        count: None,
        learned: false,
    }
}

fn not_listed(host: &str, port: u16, ts: f64) -> Event {
    refused(host, port, ts, &format!("{host}:{port} {NOT_LISTED}"))
}

fn grant(allow: &[&str]) -> AccessGrant {
    AccessGrant {
        name: "net".into(),
        network: Network::Allow(allow.iter().map(|s| s.to_string()).collect()),
        ..AccessGrant::empty()
    }
}

fn subject(g: &AccessGrant) -> Subject<'_> {
    Subject {
        team: "t",
        member: "a",
        grant: g,
        parent: ParentGrant::Session,
        start: Some("c1 s1"),
    }
}

#[test]
fn refusals_collapse_by_what_they_would_grant_with_stable_ids() {
    let g = grant(&["example.com"]);
    let events = [
        not_listed("pypi.org", 443, 10.0),
        not_listed("PYPI.org", 80, 11.0),
        not_listed("pypi.org", 443, 12.0),
        not_listed("files.example", 8080, 13.0),
    ];
    let p = pending(&subject(&g), &events, &Record::default());
    assert_eq!(p.len(), 2, "{p:#?}");
    assert_eq!(
        p[0].want,
        Want::Host {
            entry: "pypi.org".into()
        }
    );
    assert_eq!(
        (p[0].count, p[0].first_seen, p[0].last_seen),
        (3, 10.0, 12.0)
    );
    assert_eq!(p[0].not_approvable, None);
    assert_eq!(
        p[1].want,
        Want::Host {
            entry: "files.example:8080".into()
        }
    );
    // The same ask, the same id, at every look; another member's is another.
    assert_eq!(p[0].id, id("t", "a", &p[0].want));
    assert_eq!(p[0].id.len(), 8);
    assert_ne!(p[0].id, id("t", "b", &p[0].want));
    let again = pending(&subject(&g), &events[..1], &Record::default());
    assert_eq!(again[0].id, p[0].id);
}

#[test]
fn what_status_never_offers_is_shown_but_not_approvable() {
    let g = grant(&["example.com"]);
    let events = [
        not_listed("127.0.0.1", 2375, 1.0),
        not_listed("169.254.169.254", 80, 2.0),
        not_listed("10.1.2.3", 443, 3.0),
        not_listed("git.example", 22, 4.0),
        not_listed("host.ateam.internal", 11434, 5.0),
        // Listed, refused for its address: no entry changes that.
        refused(
            "example.com",
            443,
            6.0,
            "example.com resolves to 127.0.0.1, a loopback address",
        ),
        // A minute's count of many destinations: no ask at all.
        refused(OTHERS, 0, 7.0, "many"),
    ];
    let p = pending(&subject(&g), &events, &Record::default());
    assert_eq!(p.len(), 6, "{p:#?}");
    for x in &p {
        assert!(x.not_approvable.is_some(), "{x:#?}");
    }
    assert!(
        p[0].not_approvable
            .as_deref()
            .unwrap()
            .contains("Docker API")
    );
    assert!(p[5].not_approvable.as_deref().unwrap().contains("already"));
}

#[test]
fn granted_since_or_dismissed_asks_are_not_pending() {
    let events = [
        not_listed("pypi.org", 443, 10.0),
        not_listed("b.example", 443, 20.0),
    ];
    // The grant allows it now: not pending.
    let g = grant(&["pypi.org"]);
    let p = pending(&subject(&g), &events, &Record::default());
    assert_eq!(p.len(), 1);
    assert_eq!(
        p[0].want,
        Want::Host {
            entry: "b.example".into()
        }
    );
    // Dismissed at 20: only a refusal after it asks again.
    let mut r = Record::default();
    r.dismissed.insert(p[0].id.clone(), 20.0);
    assert!(pending(&subject(&g), &events, &r).is_empty());
    let later = [events[1].clone(), not_listed("b.example", 443, 21.0)];
    let p = pending(&subject(&g), &later, &r);
    assert_eq!((p.len(), p[0].count, p[0].first_seen), (1, 1, 21.0));
}

#[test]
fn a_member_is_never_offered_more_than_its_parent_has() {
    let parent = grant(&["*.example.com", "pypi.org"]);
    let g = grant(&[]);
    let s = Subject {
        parent: ParentGrant::Member {
            name: "lead",
            grant: &parent,
        },
        ..subject(&g)
    };
    let events = [
        not_listed("docs.example.com", 443, 1.0),
        not_listed("npmjs.org", 443, 2.0),
    ];
    let p = pending(&s, &events, &Record::default());
    assert_eq!(p[0].not_approvable, None, "{p:#?}");
    let why = p[1].not_approvable.as_deref().unwrap();
    assert!(
        why.contains("parent `lead`") && why.contains("npmjs.org"),
        "{why}"
    );
    let closed = AccessGrant {
        network: Network::None,
        ..parent.clone()
    };
    let s = Subject {
        parent: ParentGrant::Member {
            name: "lead",
            grant: &closed,
        },
        ..subject(&g)
    };
    assert!(
        pending(&s, &events, &Record::default())[0]
            .not_approvable
            .is_some()
    );
}

fn ruled(http: Vec<HttpRule>) -> AccessGrant {
    AccessGrant {
        intercept: vec![Intercept {
            host: "api.example".into(),
            credentials: None,
            http,
            git: None,
            upstream_ca: None,
        }],
        ..grant(&["api.example"])
    }
}

fn request(method: &str, path: &str, ts: f64, reason: &str) -> Event {
    Event {
        method: method.into(),
        path: Some(path.into()),
        ..refused("api.example", 443, ts, reason)
    }
}

#[test]
fn a_request_its_rules_refused_asks_for_one_rule() {
    let rules = vec![HttpRule {
        methods: vec!["GET".into()],
        paths: vec!["/ok/**".into()],
    }];
    let g = ruled(rules.clone());
    let outside = "POST /v1/x on api.example is outside the http rules (GET /ok/**)";
    let events = [
        request("POST", "/v1/x", 1.0, outside),
        request("POST", "/v1/x", 2.0, outside),
        request(
            "GET",
            "/a/*/b",
            3.0,
            "GET /a/*/b on api.example is outside the http rules",
        ),
        // As the log shows a control character a member sent: escaped, no path of a URL.
        request(
            "GET",
            "/a\\u{1b}[2J",
            3.5,
            "GET /a on api.example is outside the http rules",
        ),
        // Refused for a header: a rule would not change it.
        request("GET", "/ok/1", 4.0, "a credential of another account"),
    ];
    let p = pending(&subject(&g), &events, &Record::default());
    assert_eq!(p.len(), 4, "{p:#?}");
    let why = p[2].not_approvable.clone().unwrap_or_default();
    assert!(why.contains("URL's path"), "{p:#?}");
    let p: Vec<Pending> = p
        .into_iter()
        .enumerate()
        .filter_map(|(i, x)| (i != 2).then_some(x))
        .collect();
    assert_eq!(
        p[0].want,
        Want::Request {
            host: "api.example".into(),
            method: "POST".into(),
            path: "/v1/x".into()
        }
    );
    assert_eq!((p[0].count, p[0].not_approvable.as_deref()), (2, None));
    assert!(p[1].not_approvable.as_deref().unwrap().contains("pattern"));
    assert!(
        p[2].not_approvable
            .as_deref()
            .unwrap()
            .contains("does not change")
    );
    // With the rule added, the ask is granted and no longer pending.
    let wider = widened(&g, &p[0].want);
    let g2 = AccessGrant {
        intercept: wider.intercept,
        ..g.clone()
    };
    assert_eq!(g2.intercept[0].http.len(), 2);
    let p = pending(&subject(&g2), &events[..2], &Record::default());
    assert!(p.is_empty(), "{p:#?}");
}

#[test]
fn what_the_grant_denies_is_never_asked_nor_suggested() {
    let g = AccessGrant {
        deny: vec!["*.ads.example".into(), "pypi.org".into()],
        ..grant(&["example.com"])
    };
    let events = [
        not_listed("pypi.org", 443, 1.0),
        not_listed("x.ads.example", 443, 2.0),
        not_listed("b.example", 443, 3.0),
        // Allowed by a wildcard and denied: refused by the deny list, still no ask.
        refused(
            "pypi.org",
            443,
            4.0,
            "pypi.org:443 is in this member's deny list",
        ),
    ];
    let p = pending(&subject(&g), &events, &Record::default());
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(
        p[0].want,
        Want::Host {
            entry: "b.example".into()
        }
    );
    let refusals = crate::servers::egress::log::refusals(&events, 0.0);
    let s = crate::servers::egress::log::suggest("t", &g, &refusals, None);
    let grant = s.grant.unwrap();
    assert!(grant.contains("b.example"), "{grant}");
    assert!(
        !grant.contains("pypi.org") && !grant.contains("ads.example"),
        "{grant}"
    );
}

#[test]
fn an_ask_allowed_once_is_not_pending_in_that_start_only() {
    let g = grant(&["example.com"]);
    let events = [not_listed("pypi.org", 443, 1.0)];
    let p = pending(&subject(&g), &events, &Record::default());
    let once = super::record::Once {
        id: p[0].id.clone(),
        want: p[0].want.clone(),
        start: "c1 s1".into(),
        at: 2.0,
    };
    let r = Record {
        once: vec![once],
        ..Record::default()
    };
    assert!(pending(&subject(&g), &events, &r).is_empty());
    // Another start (a restart): asked again.
    let restarted = Subject {
        start: Some("c1 s2"),
        ..subject(&g)
    };
    assert_eq!(pending(&restarted, &events, &r).len(), 1);
    let stopped = Subject {
        start: None,
        ..subject(&g)
    };
    assert_eq!(pending(&stopped, &events, &r).len(), 1);
}

fn ask(entry: &str, helper: &str, at: f64) -> asks::Ask {
    let mut a = asks::Asks::default();
    a.add(&[entry.to_string()], helper, at);
    a.asks.remove(0)
}

#[test]
fn a_helper_requests_hosts_are_asks_of_its_requesters_grant() {
    let g = AccessGrant {
        deny: vec!["evil.example".into()],
        ..grant(&["example.com", "*.docs.example"])
    };
    let asks = [
        ask("PyPI.org", "tester", 5.0),
        ask("example.com", "tester", 6.0),
        ask("api.docs.example", "tester", 6.0),
        ask("evil.example", "tester", 7.0),
        ask("127.0.0.1:2375", "tester", 8.0),
    ];
    // The member's own refusal of the same host is the same ask: one approval, both counted.
    let events = [not_listed("pypi.org", 443, 3.0)];
    let p = pending_with(&subject(&g), &events, &asks, &Record::default());
    assert_eq!(p.len(), 2, "{p:#?}");
    assert_eq!(
        p[0].want,
        Want::Host {
            entry: "pypi.org".into()
        }
    );
    assert_eq!((p[0].count, p[0].first_seen, p[0].last_seen), (2, 3.0, 5.0));
    assert_eq!(p[0].helper.as_deref(), Some("tester"));
    assert_eq!(p[0].not_approvable, None);
    assert!(p[0].reason.contains("helper `tester`"), "{}", p[0].reason);
    assert_eq!(p[0].id, id("t", "a", &p[0].want));
    assert!(line(&p[0], 10.0).contains("helper `tester`"));
    // What status never offers stays not approvable, from a helper request too.
    assert!(
        p[1].not_approvable
            .as_deref()
            .unwrap()
            .contains("Docker API"),
        "{p:#?}"
    );
    // Dismissed after its last ask: gone; asked again after: back.
    let mut r = Record::default();
    r.dismissed.insert(p[0].id.clone(), 5.0);
    assert_eq!(pending_with(&subject(&g), &events, &asks, &r).len(), 1);
    let later = [ask("pypi.org", "tester", 9.0)];
    assert_eq!(pending_with(&subject(&g), &events, &later, &r).len(), 1);
}

#[test]
fn a_helper_ask_never_goes_past_the_requesters_parent() {
    let parent = grant(&["docs.example.com"]);
    let g = grant(&[]);
    let s = Subject {
        parent: ParentGrant::Member {
            name: "lead",
            grant: &parent,
        },
        ..subject(&g)
    };
    let asks = [
        ask("docs.example.com", "h", 1.0),
        ask("npmjs.org", "h", 2.0),
    ];
    let p = pending_with(&s, &[], &asks, &Record::default());
    assert_eq!(p[0].not_approvable, None, "{p:#?}");
    assert!(
        p[1].not_approvable
            .as_deref()
            .unwrap()
            .contains("parent `lead`")
    );
}

#[test]
fn helper_asks_are_kept_bounded_and_as_entries() {
    let mut a = asks::Asks::default();
    a.add(&["PYPI.org".into(), "not a host".into()], "h", 1.0);
    a.add(&["pypi.org".into()], "h2", 2.0);
    assert_eq!(a.asks.len(), 1);
    assert_eq!(
        (
            a.asks[0].entry.as_str(),
            a.asks[0].helper.as_str(),
            a.asks[0].count
        ),
        ("pypi.org", "h2", 2)
    );
    for i in 0..(asks::KEPT + 10) {
        a.add(&[format!("h{i}.example")], "h", 10.0 + i as f64);
    }
    assert_eq!(a.asks.len(), asks::KEPT);
    assert_eq!(
        a.asks.last().unwrap().entry,
        format!("h{}.example", asks::KEPT + 9)
    );
    assert!(!a.asks.iter().any(|x| x.entry == "pypi.org"));
    // A name no manifest may give (here one that would steer a terminal) asks nothing.
    let mut b = asks::Asks::default();
    b.add(&["pypi.org".into()], "h\u{1b}[2Jx", 1.0);
    b.add(&["pypi.org".into()], "Tester", 1.0);
    assert!(b.asks.is_empty(), "{b:?}");
}

#[test]
fn helper_asks_are_read_from_a_regular_file_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("helper-asks.json");
    let me = crate::files::Owner {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
    };
    asks::record(&path, &["pypi.org".into()], "h", 1.0, me).unwrap();
    assert_eq!(asks::load(&path).asks.len(), 1);
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(asks::load(&link).asks.is_empty());
    let mut text = std::fs::read_to_string(&path).unwrap();
    text = text.replace("\"h\"", "\"h\\u001b[2J\"");
    std::fs::write(&path, &text).unwrap();
    assert!(asks::load(&path).asks.is_empty(), "{text}");
    std::fs::write(&path, "{not json").unwrap();
    assert!(asks::load(&path).asks.is_empty());
}
