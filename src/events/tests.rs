use super::*;

fn me() -> Owner {
    Owner {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
    }
}

fn refusal(host: &str, port: u16, ts: f64) -> egress_log::Event {
    egress_log::Event {
        ts,
        verdict: egress_log::Verdict::Refused,
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
fn events_are_bounded_and_read_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let n = 25_000;
    for i in 0..n {
        let t = UNIX_EPOCH + Duration::from_secs(1_000_000 + i);
        let e = Event::at(t, "t", "worker", EventKind::Restarted, "after exit 137");
        record(dir.path(), me(), &e);
    }
    let path = layout::team_events_path(dir.path(), "t");
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    assert!(size(&path) <= MAX_EVENTS_BYTES, "{}", size(&path));
    let old = egress_log::rotated(&path);
    assert!(size(&old) > 0 && size(&old) <= MAX_EVENTS_BYTES);
    let back = read(dir.path(), "t");
    assert!(
        back.len() < n as usize && back.len() > 1000,
        "{}",
        back.len()
    );
    assert!(back.windows(2).all(|w| w[0].ts < w[1].ts));
    assert_eq!(back.last().unwrap().ts, (1_000_000 + n - 1) as f64);
    let mode = std::fs::metadata(&path).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
}

#[test]
fn a_torn_last_line_is_skipped_and_does_not_swallow_the_next() {
    let dir = tempfile::tempdir().unwrap();
    record(
        dir.path(),
        me(),
        &Event::new("t", "a", EventKind::Created, "created"),
    );
    let path = layout::team_events_path(dir.path(), "t");
    // A crash in the middle of a line.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(br#"{"at":"2026-01-01T00:00:00Z","ts":1.0,"te"#)
        .unwrap();
    assert_eq!(read(dir.path(), "t").len(), 1);
    record(
        dir.path(),
        me(),
        &Event::new("t", "a", EventKind::Replaced, "because"),
    );
    let kinds: Vec<EventKind> = read(dir.path(), "t").iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Created, EventKind::Replaced]);
}

#[test]
fn a_symlink_in_place_of_the_file_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, "").unwrap();
    let path = layout::team_events_path(dir.path(), "t");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    record(
        dir.path(),
        me(),
        &Event::new("t", "a", EventKind::Created, "x"),
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"");
}

#[test]
fn what_a_member_chose_is_read_back_escaped_and_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = "helper `\u{1b}]2;pwned\u{7}\u{202e}` refused:\nline two";
    record(
        dir.path(),
        me(),
        &Event::new("t", "a", EventKind::HelperRefused, hostile),
    );
    let back = read(dir.path(), "t");
    let r = &back[0].reason;
    assert!(
        !r.chars().any(|c| c.is_control() || c == '\u{202e}'),
        "{r:?}"
    );
    assert!(r.contains("\\u{1b}]2;pwned\\u{7}\\u{202e}"), "{r}");
    assert!(r.ends_with("refused: line two"), "{r}");
    // Bounded too.
    let long = "x".repeat(MAX_REASON * 3);
    assert_eq!(
        Event::new("t", "a", EventKind::Failed, &long).reason.len(),
        MAX_REASON
    );
}

#[test]
fn refusals_of_one_host_collapse_while_they_keep_coming() {
    let log: Vec<egress_log::Event> = [
        refusal("a.example", 443, 100.0),
        refusal("a.example", 443, 130.0),
        refusal("b.example", 443, 140.0),
        refusal("a.example", 443, 185.0),
        // More than a minute after the last one: a new event.
        refusal("a.example", 443, 300.0),
        refusal("a.example", 80, 301.0),
    ]
    .into();
    let mut allowed = refusal("a.example", 443, 150.0);
    allowed.verdict = egress_log::Verdict::Allowed;
    let log = [log, vec![allowed]].concat();
    let ev = egress_refusals("t", "w", &log);
    let got: Vec<(u64, f64, bool)> = ev
        .iter()
        .map(|e| (e.count, e.ts, e.first_at.is_some()))
        .collect();
    assert_eq!(
        got,
        [
            (3, 185.0, true),
            (1, 140.0, false),
            (1, 300.0, false),
            (1, 301.0, false)
        ]
    );
    assert!(ev[0].reason.contains("CONNECT a.example:443 refused (403)"));
    assert_eq!(ev[0].first_at.as_deref(), Some("1970-01-01T00:01:40Z"));
    assert!(ev.iter().all(|e| e.kind == EventKind::EgressRefused));
}

#[test]
fn a_teams_events_and_its_refusals_come_in_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
    record(
        dir.path(),
        me(),
        &Event::at(at(10), "t", "w", EventKind::Created, "created"),
    );
    record(
        dir.path(),
        me(),
        &Event::at(at(30), "t", "w", EventKind::Replaced, "x"),
    );
    let egress = layout::egress_dir(dir.path(), "t", "w");
    std::fs::create_dir_all(&egress).unwrap();
    let fd = rustix::fs::open(
        &egress,
        rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    egress_log::Log::open(fd, "log.jsonl").write(&refusal("a.example", 443, 20.0));
    let kinds: Vec<EventKind> = team_events(dir.path(), "t", &[], &SessionCache::default())
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            EventKind::Created,
            EventKind::EgressRefused,
            EventKind::Replaced
        ]
    );
}

#[test]
fn a_stranger_is_recorded_once_per_container() {
    let dir = tempfile::tempdir().unwrap();
    let id = "0123456789abcdef0123";
    assert!(!stranger_recorded(dir.path(), "t", id));
    record(
        dir.path(),
        me(),
        &Event::new("t", "w", EventKind::StrangerSeen, "x").container(id),
    );
    assert!(stranger_recorded(dir.path(), "t", id));
    assert!(!stranger_recorded(dir.path(), "t", "fedcba9876543210"));
}

#[test]
fn kinds_are_kebab_case_in_json() {
    for k in [
        EventKind::StrangerSeen,
        EventKind::HelperRefused,
        EventKind::CrashLoop,
    ] {
        assert_eq!(
            serde_json::to_value(k).unwrap(),
            serde_json::Value::from(k.name())
        );
    }
}

#[test]
fn a_refusal_repeated_in_a_loop_is_written_once_a_minute_with_its_count() {
    let mut q = Quieter::default();
    let t0 = std::time::Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    assert_eq!(q.admit("rule-a", at(0)), Some(0));
    assert_eq!(q.admit("rule-a", at(1)), None);
    assert_eq!(q.admit("rule-a", at(59)), None);
    // Another rule is its own.
    assert_eq!(q.admit("rule-b", at(2)), Some(0));
    assert_eq!(q.admit("rule-a", at(61)), Some(2));
    assert_eq!(q.admit("rule-a", at(62)), None);
}

/// A summary line of the proxy (a minute's refusals past the ones written one by one) counts
/// as many refusals as it says, in the run it belongs to.
#[test]
fn a_summary_line_of_refusals_counts_what_it_says() {
    let mut summary = refusal("a.example", 443, 20.0);
    summary.count = Some(57);
    let log = [refusal("a.example", 443, 10.0), summary];
    let events = egress_refusals("t", "m", &log);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].count, 58);
    let alone = egress_refusals("t", "m", &log[1..]);
    assert_eq!(alone[0].count, 57);
}

/// An agent member's session of three tasks (the second's write refused): an event per
/// ended task, at its end, `agent-failed` a warning naming the tool that failed; read from
/// the transcript in the member's folder, none written.
#[test]
fn an_agents_ended_tasks_are_events_from_its_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("sessions/members/coder");
    let projects = folder.join("claude/projects/-w");
    std::fs::create_dir_all(&projects).unwrap();
    std::fs::write(
        projects.join("s1.jsonl"),
        include_bytes!("../../tests/fixtures/transcripts/claude-2.1.332-three-tasks.jsonl"),
    )
    .unwrap();
    let a = crate::transcripts::AgentHome {
        member: "coder".into(),
        kind: crate::core::agents::AgentKind::Claude,
        transcripts: folder,
        home: "claude".into(),
    };
    let all = team_events(dir.path(), "t", &[a], &SessionCache::default());
    let kinds: Vec<EventKind> = all.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EventKind::AgentDone,
            EventKind::AgentFailed,
            EventKind::AgentDone
        ]
    );
    let failed = &all[1];
    assert_eq!(
        (failed.member.as_str(), failed.kind.severity()),
        ("coder", "Warning")
    );
    assert!(
        failed.reason.starts_with(
            "claude task 2 failed: the tools that failed: Write (EACCES: permission denied"
        ),
        "{failed:?}"
    );
    assert!(
        failed
            .reason
            .ends_with("(task: create the file /tmp/tr/cl/locked/two.txt containing exactly: two)"),
        "{failed:?}"
    );
    assert!(failed.at.starts_with("2026-12-06T07:49:"), "{failed:?}");
    assert!(all.windows(2).all(|w| w[0].ts <= w[1].ts));
    assert!(read(dir.path(), "t").is_empty(), "nothing written");
}
