use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;
use crate::report::{EgressCounts, MemberStatus, OriginStatus, TeamStatus, Usage};

#[test]
fn loopback_addresses_are_taken() {
    for (raw, want) in [
        ("127.0.0.1:9464", "127.0.0.1:9464"),
        ("127.1.2.3:80", "127.1.2.3:80"),
        ("[::1]:9464", "[::1]:9464"),
        ("localhost:9464", "127.0.0.1:9464"),
    ] {
        assert_eq!(listen_addr(raw, false).unwrap().to_string(), want, "{raw}");
    }
}

#[test]
fn other_addresses_need_the_flag() {
    for raw in [
        "0.0.0.0:9464",
        "[::]:9464",
        "10.0.0.5:9464",
        "[2001:db8::1]:1",
    ] {
        assert_eq!(
            listen_addr(raw, false),
            Err(AddrError::NotLoopback(raw.into())),
            "{raw}"
        );
        assert!(listen_addr(raw, true).is_ok(), "{raw}");
    }
}

#[test]
fn names_and_junk_are_not_addresses() {
    // A host name is never looked up (only `localhost`, taken as 127.0.0.1).
    for raw in [
        "example.com:9464",
        "9464",
        "127.0.0.1",
        "localhost",
        "localhost:x",
        "",
    ] {
        assert_eq!(
            listen_addr(raw, true),
            Err(AddrError::Syntax(raw.into())),
            "{raw}"
        );
    }
}

fn row(name: &str, kind: RowKind, state: &str) -> MemberStatus {
    let mut r = blank(name);
    r.kind = kind;
    r.state = state.into();
    r
}

/// A row with nothing known but its name.
fn blank(name: &str) -> MemberStatus {
    MemberStatus {
        name: name.into(),
        kind: RowKind::Member,
        parent: None,
        state: String::new(),
        detail: None,
        drifted: false,
        container: None,
        container_id: None,
        created_at: None,
        age_secs: None,
        restarts: 0,
        next_restart: None,
        last_exit: None,
        transcript: None,
        transcript_bytes: 0,
        last_activity_at: None,
        last_activity_secs: None,
        grants: None,
        limits_unenforced: false,
        egress: None,
        terminal: None,
        origin: None,
        usage: None,
        workspace: None,
        agent: None,
    }
}

fn egress(allowed: u64, refused: u64, failed: u64) -> crate::report::EgressStatus {
    crate::report::EgressStatus {
        proxy: "running".into(),
        refused: vec![],
        refused_left_out: Default::default(),
        suggested_grant: None,
        not_suggested: vec![],
        not_suggested_more: 0,
        approvals: vec![],
        last_minute: EgressCounts {
            allowed,
            refused,
            failed,
        },
    }
}

fn document() -> StatusDocument {
    let mut web = row("web", RowKind::Member, "running");
    web.restarts = 2;
    web.usage = Some(Usage {
        cpu_seconds: Some(1.5),
        memory_bytes: Some(4096),
        memory_limit_bytes: Some(1 << 20),
        pids: Some(3),
        pids_limit: None,
        shared: false,
    });
    let mut e = egress(4, 1, 0);
    let pending = |id: &str, why: Option<&str>| crate::approvals::Pending {
        id: id.into(),
        team: "alpha".into(),
        member: "web".into(),
        grant: "g".into(),
        want: crate::approvals::Want::Host { entry: id.into() },
        count: 1,
        first_seen: 1.0,
        last_seen: 1.0,
        reason: String::new(),
        not_approvable: why.map(str::to_string),
        helper: None,
    };
    // Two asks, one of them never approvable: one pending approval.
    e.approvals = vec![pending("a", None), pending("b", Some("loopback"))];
    web.egress = Some(e);
    web.workspace = Some(crate::report::WorkspaceStatus {
        path: "/w/web".into(),
        branch: "ateam/alpha/web".into(),
        ahead: 3,
        behind: 0,
        uncommitted: 2,
        uncollected: 1,
        error: None,
    });
    // A hostile-looking helper name: quotes, a backslash and a newline are escaped.
    let mut helper = row("h\"\\\nx", RowKind::Member, "exited 1");
    helper.origin = Some(OriginStatus {
        kind: "requested".into(),
        requested_by: Some("web".into()),
        requested_at: None,
        forked_from: None,
        forked_at: None,
    });
    let lead = row("lead", RowKind::MainSession, "running");
    let old = row("gone", RowKind::Transcript, "retained");
    StatusDocument::new(
        vec![TeamStatus {
            team: "alpha".into(),
            engine: "docker".into(),
            members: vec![web, helper, lead, old],
            drifted: true,
            board: None,
        }],
        None,
        SystemTime::UNIX_EPOCH,
    )
}

/// The lines of `text` that are samples of `family` (with or without labels).
fn samples<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|r| r.starts_with(['{', ' ']))
        })
        .collect()
}

#[test]
fn a_fixed_document_renders_every_family() {
    let queue = Arc::new(QueueStats::default());
    let m = Metrics::new(queue);
    m.reconciled("alpha", ReconcileResult::Ok, Duration::from_millis(30));
    m.reconciled("alpha", ReconcileResult::Ok, Duration::from_millis(50));
    m.reconciled("alpha", ReconcileResult::Error, Duration::from_secs(2));
    m.manifests_loaded(true);
    m.manifests_loaded(false);
    let mut snap = Snapshot::of(&document(), Duration::from_millis(12));
    snap.helper_requests = [(("alpha".to_string(), "refused"), 7)].into();
    m.set_snapshot(snap);
    let text = m.render();
    let expect = [
        (
            "ateam_helper_requests",
            r#"ateam_helper_requests{team="alpha",outcome="refused"} 7"#,
        ),
        (
            "ateam_reconciles_total",
            r#"ateam_reconciles_total{team="alpha",result="ok"} 2"#,
        ),
        (
            "ateam_reconciles_total",
            r#"ateam_reconciles_total{team="alpha",result="error"} 1"#,
        ),
        (
            "ateam_reconcile_duration_seconds_count",
            r#"ateam_reconcile_duration_seconds_count{team="alpha"} 3"#,
        ),
        (
            "ateam_manifest_loads_total",
            r#"ateam_manifest_loads_total{result="invalid"} 1"#,
        ),
        (
            "ateam_workspace_ahead_commits",
            r#"ateam_workspace_ahead_commits{team="alpha",member="web"} 3"#,
        ),
        (
            "ateam_workspace_uncommitted_files",
            r#"ateam_workspace_uncommitted_files{team="alpha",member="web"} 2"#,
        ),
        (
            "ateam_workspace_uncollected_commits",
            r#"ateam_workspace_uncollected_commits{team="alpha",member="web"} 1"#,
        ),
        ("ateam_queue_depth", "ateam_queue_depth 0"),
        ("ateam_reconciles_running", "ateam_reconciles_running 0"),
        ("ateam_status_ok", "ateam_status_ok 1"),
        (
            "ateam_members",
            r#"ateam_members{team="alpha",kind="member",state="running"} 1"#,
        ),
        (
            "ateam_members",
            r#"ateam_members{team="alpha",kind="member",state="exited 1"} 1"#,
        ),
        (
            "ateam_members",
            r#"ateam_members{team="alpha",kind="main_session",state="running"} 1"#,
        ),
        (
            "ateam_members",
            r#"ateam_members{team="alpha",kind="transcript",state="retained"} 1"#,
        ),
        (
            "ateam_helper_members",
            r#"ateam_helper_members{team="alpha"} 1"#,
        ),
        (
            "ateam_member_restarts_total",
            r#"ateam_member_restarts_total{team="alpha",member="web"} 2"#,
        ),
        (
            "ateam_member_restarts_total",
            r#"ateam_member_restarts_total{team="alpha",member="h\"\\\nx"} 0"#,
        ),
        (
            "ateam_member_cpu_seconds_total",
            r#"ateam_member_cpu_seconds_total{team="alpha",member="web"} 1.5"#,
        ),
        (
            "ateam_member_memory_bytes",
            r#"ateam_member_memory_bytes{team="alpha",member="web"} 4096"#,
        ),
        (
            "ateam_member_memory_limit_bytes",
            r#"ateam_member_memory_limit_bytes{team="alpha",member="web"} 1048576"#,
        ),
        (
            "ateam_member_pids",
            r#"ateam_member_pids{team="alpha",member="web"} 3"#,
        ),
        (
            "ateam_egress_decisions_last_minute",
            r#"ateam_egress_decisions_last_minute{team="alpha",member="web",verdict="allowed"} 4"#,
        ),
        (
            "ateam_egress_decisions_last_minute",
            r#"ateam_egress_decisions_last_minute{team="alpha",member="web",verdict="refused"} 1"#,
        ),
        (
            "ateam_egress_decisions_last_minute",
            r#"ateam_egress_decisions_last_minute{team="alpha",member="web",verdict="failed"} 0"#,
        ),
        (
            "ateam_member_pending_approvals",
            r#"ateam_member_pending_approvals{team="alpha",member="web"} 1"#,
        ),
    ];
    for (family, line) in expect {
        assert!(
            samples(&text, family).contains(&line),
            "missing {line:?} in:\n{text}"
        );
    }
    // Only what is known: no pids limit, no figures for rows without a container's usage,
    // no egress series for an unproxied member, no per-member series for sessions.
    assert!(
        samples(&text, "ateam_member_pids_limit").is_empty(),
        "{text}"
    );
    assert_eq!(
        samples(&text, "ateam_member_memory_bytes").len(),
        1,
        "{text}"
    );
    assert_eq!(
        samples(&text, "ateam_egress_decisions_last_minute").len(),
        3,
        "{text}"
    );
    assert_eq!(
        samples(&text, "ateam_member_restarts_total").len(),
        2,
        "{text}"
    );
    // Raw control characters never reach the text.
    assert!(!text.contains("h\"\\\nx"), "{text}");
}

#[test]
fn a_failed_look_leaves_the_member_figures_out() {
    let m = Metrics::new(Arc::new(QueueStats::default()));
    m.set_snapshot(Snapshot::of(&document(), Duration::ZERO));
    m.set_snapshot(Snapshot::failed(Duration::from_secs(10)));
    let text = m.render();
    assert!(
        samples(&text, "ateam_status_ok").contains(&"ateam_status_ok 0"),
        "{text}"
    );
    assert!(samples(&text, "ateam_members").is_empty(), "{text}");
    assert!(
        samples(&text, "ateam_member_memory_bytes").is_empty(),
        "{text}"
    );
}

#[test]
fn members_cannot_grow_the_scrape_without_bound() {
    let mut doc = document();
    let rows = &mut doc.teams[0].members;
    for i in 0..MAX_MEMBER_SERIES + 50 {
        rows.push(row(
            &format!("h{i}"),
            RowKind::Member,
            &format!("exited {i}"),
        ));
    }
    let s = Snapshot::of(&doc, Duration::ZERO);
    assert_eq!(s.members.len(), MAX_MEMBER_SERIES);
    // The fixed document has two member rows before the added ones.
    assert_eq!(s.left_out, 52);
    let states: Vec<_> = s.states.keys().filter(|k| k.0 == "alpha").collect();
    assert!(states.len() <= MAX_STATES + 1, "{states:?}");
    let other = s.states[&("alpha".to_string(), "member", "other".to_string())];
    // Every row is still counted, in `other` if its state is one too many.
    assert_eq!(
        s.states.values().sum::<u64>(),
        4 + MAX_MEMBER_SERIES as u64 + 50
    );
    assert!(other > 0);
}
