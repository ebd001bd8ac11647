//! Status rows and documents from a plan, without an engine.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::*;
use crate::core::container::ContainerState;
use crate::host::Host;
use crate::model::{Member, Model, RestartPolicy};
use crate::plan::spec::desired_state;
use crate::plan::{PlanOptions, plan};

fn host() -> Host {
    Host {
        uid: 1000,
        gid: 1000,
        home: "/home/u".into(),
        memory_bytes: 16 << 30,
        state_dir: "/home/u/.local/state/ateam".into(),
        sudo_user: None,
        engine_dirs: Default::default(),
    }
}

fn team(members: &[&str]) -> Team {
    let member = |name: &str| Member {
        runtime: Default::default(),
        name: name.into(),
        user: None,
        parent: Parent::MainSession("lead".into()),
        depth: 1,
        access: AccessGrant {
            name: "g".into(),
            read: vec!["/src/docs".into()],
            write: vec!["/src/repo".into()],
            network: Network::Allow(vec!["example.com".into()]),
            intercept: vec![],
            host_listeners: vec![],
            deny: vec![],
        },
        image: "ateam-demo:latest".into(),
        image_build: None,
        command: None,
        cwd: "/src/repo".into(),
        env: BTreeMap::new(),
        secret_env: vec![],
        memory_bytes: 1 << 30,
        pids: 512,
        nano_cpus: None,
        restart: RestartPolicy::OnFailure,
        image_pull_policy: Default::default(),
        labels: BTreeMap::new(),
        transcript_dir: format!("/home/u/sessions/members/{name}").into(),
        workspace: None,
        snapshot_writes: None,
        agent: None,
        origin: Default::default(),
        share_writes: false,
    };
    Team::named("t", "/home/u/sessions").with_members(members.iter().map(|m| member(m)).collect())
}

/// Every member of `t` running as ateam made it, with its transcript folder.
fn in_sync(t: &Team) -> Observed {
    let d = desired_state(
        &Model {
            teams: vec![t.clone()],
        },
        &host(),
    );
    let containers: Vec<ObservedContainer> = d
        .members
        .iter()
        .map(|m| ObservedContainer {
            id: format!("id-{}", m.member),
            name: m.spec.name.clone(),
            labels: m.container_labels(&d.store),
            state: ContainerState::Running,
            created: 100,
            effective: Some(crate::policy::compliant(&m.spec)),
            released: true,
            last_exit: None,
            pid: None,
            pid_files: None,
        })
        .collect();
    Observed {
        recorded: containers.iter().map(|c| c.id.clone()).collect(),
        containers,
        transcript_dirs: d.members.iter().map(|m| m.transcript_dir.clone()).collect(),
        // Each allowlist member's proxy alive, with its list.
        live_sockets: d
            .members
            .iter()
            .filter_map(|m| m.egress.as_ref().map(|e| e.socket.clone()))
            .collect(),
        limits_unenforced: false,
        egress_policies: d
            .members
            .iter()
            .filter_map(|m| {
                m.egress
                    .as_ref()
                    .map(|e| (e.socket.clone(), e.policy.clone()))
            })
            .collect(),
        egress_proxies: d
            .members
            .iter()
            .filter(|m| m.egress.is_some())
            .map(|m| (m.team.clone(), m.member.clone()))
            .collect(),
        helper_servers: Default::default(),
        live_sessions: Default::default(),
        promotions: vec![],
        board_news: BTreeMap::new(),
        board_held: BTreeSet::new(),
    }
}

fn status(t: &Team, o: &Observed, record: Option<LastExit>) -> (TeamStatus, Plan) {
    let d = desired_state(
        &Model {
            teams: vec![t.clone()],
        },
        &host(),
    );
    let p = plan(&d, o, PlanOptions::default());
    let mut facts = StatusFacts::empty(SystemTime::UNIX_EPOCH + Duration::from_secs(1000));
    for m in &t.members {
        let f = MemberFacts {
            last_exit: record.clone(),
            ..Default::default()
        };
        facts.members.insert((t.name.clone(), m.name.clone()), f);
    }
    let live = o.live_sessions.iter().map(|(_, name)| name);
    for name in t.sessions.iter().map(|s| &s.name).chain(live) {
        let f = SessionFacts {
            socket: "/run/tmux.sock".into(),
            started: None,
        };
        facts.sessions.insert((t.name.clone(), name.clone()), f);
    }
    (team_status(t, "docker", o, &p, &facts), p)
}

fn row<'a>(s: &'a TeamStatus, name: &str) -> &'a MemberStatus {
    s.members.iter().find(|m| m.name == name).unwrap()
}

#[test]
fn rows_are_drifted_exactly_where_the_plan_says() {
    let t = team(&["a", "b"]);
    let (s, p) = status(&t, &in_sync(&t), None);
    assert!(!s.drifted && !p.drifted());
    assert!(s.members.iter().all(|m| !m.drifted));
    // A missing transcript folder: running, but drift (apply makes the folder), and the row
    // says what apply would do.
    let mut o = in_sync(&t);
    o.transcript_dirs.clear();
    let (s, p) = status(&t, &o, None);
    assert!(s.drifted && p.drifted());
    let a = row(&s, "a");
    assert_eq!(a.state, "running");
    assert!(a.drifted);
    assert!(
        a.detail
            .as_deref()
            .unwrap()
            .starts_with("apply would: + transcript folder of a"),
        "{a:?}"
    );
    // An orphan: a row of its own, drifted; the team too.
    let (s, p) = status(&team(&["a"]), &in_sync(&t), None);
    assert!(p.drifted() && s.drifted);
    let b = row(&s, "b");
    assert_eq!((b.state.as_str(), b.drifted), ("orphan", true));
    assert_eq!((b.parent.as_deref(), b.grants.as_ref()), (None, None));
    assert_eq!(b.container_id.as_deref(), Some("id-b"));
}

#[test]
fn the_last_exit_is_the_engines_while_exited_else_the_stores() {
    let t = team(&["a"]);
    let old = LastExit::exited(3, false, Some("1970-01-01T00:05:00Z".into()), None);
    let newer = LastExit::exited(
        137,
        true,
        Some("1970-01-01T00:10:00Z".into()),
        Some("oom".into()),
    );
    // Running again after a restart: the store's record.
    let (s, _) = status(&t, &in_sync(&t), Some(old.clone()));
    assert_eq!(row(&s, "a").last_exit, Some(old.clone()));
    // Exited since: the engine's, newer than the record.
    let mut o = in_sync(&t);
    o.containers[0].state = ContainerState::Exited { code: 137 };
    o.containers[0].last_exit = Some(newer.clone());
    let (s, _) = status(&t, &o, Some(old));
    let a = row(&s, "a");
    assert_eq!(a.last_exit, Some(newer));
    assert_eq!(a.state, "exited 137");
    let table = render_status(
        std::slice::from_ref(&s),
        SystemTime::UNIX_EPOCH + Duration::from_secs(1000),
    );
    assert!(table.contains("oom-killed (6m ago)"), "{table}");
    assert!(
        table.contains("a: last exit at 1970-01-01T00:10:00Z: oom"),
        "{table}"
    );
}

#[test]
fn documents_are_plain_camel_case_data_with_absolute_times() {
    let t = team(&["a", "b"]);
    let mut o = in_sync(&t);
    o.containers.retain(|c| c.id != "id-b");
    let (s, p) = status(&t, &o, None);
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
    let doc = serde_json::to_value(StatusDocument::new(vec![s], None, now)).unwrap();
    assert_eq!(doc["apiVersion"], "ateam.dev/v1alpha1");
    assert_eq!(doc["kind"], "Status");
    assert_eq!(doc["observedAt"], "1970-01-01T00:16:40Z");
    assert_eq!(doc["drifted"], true);
    let a = &doc["teams"][0]["members"][0];
    assert_eq!(a["createdAt"], "1970-01-01T00:01:40Z");
    assert_eq!(a["ageSecs"], 900);
    assert_eq!(
        a["grants"],
        serde_json::json!({
            "name": "g",
            "read": ["/src/docs"],
            "write": ["/src/repo"],
            "network": {
                "mode": "allow",
                "allow": ["example.com"],
                "tunnelled": ["example.com"],
                "intercepted": [],
                "injected": [],
            },
        })
    );
    let diff = serde_json::to_value(diff_document(&p)).unwrap();
    assert_eq!(diff["kind"], "Diff");
    assert_eq!(diff["drifted"], true);
    assert_eq!(diff["changes"][0]["action"], "create");
    assert_eq!(diff["changes"][0]["reason"], "missing");
    assert_eq!(diff["changes"][0]["name"], "b");
    // Nothing applied: still a document.
    let empty = serde_json::to_value(StatusDocument::new(vec![], None, now)).unwrap();
    assert_eq!(empty["teams"], serde_json::json!([]));
    assert_eq!(empty["drifted"], false);
}

#[test]
fn a_requested_member_shows_who_asked_for_it() {
    let mut t = team(&["a", "kid"]);
    t.members[1].parent = Parent::Member("a".into());
    t.members[1].origin = crate::model::Origin::Requested {
        by: "a".into(),
        at: "2026-01-01T00:00:00Z".into(),
    };
    let (s, _) = status(&t, &in_sync(&t), None);
    let kid = row(&s, "kid").origin.clone().unwrap();
    assert_eq!(kid.kind, "requested");
    assert_eq!(kid.requested_by.as_deref(), Some("a"));
    assert_eq!(row(&s, "a").origin.as_ref().unwrap().kind, "manifest");
    let table = render_status(
        std::slice::from_ref(&s),
        SystemTime::UNIX_EPOCH + Duration::from_secs(1000),
    );
    assert!(table.contains("  a: asked for helpers kid\n"), "{table}");
    assert!(
        table.contains("  kid: requested by a at 2026-01-01T00:00:00Z\n"),
        "{table}"
    );
}

/// 30,000 refused destinations (the attack of issue 16: a member knocking everywhere, plus
/// the engine's API on loopback and the metadata service) print a bounded number of lines,
/// and the grant to paste never holds a local or metadata address or a dangerous port.
#[test]
fn refusals_are_bounded_and_local_addresses_are_never_offered_silently() {
    use crate::servers::egress::log::{Event, SHOWN, Verdict, refusals};
    let t = team(&["a"]);
    let (mut s, _) = status(&t, &in_sync(&t), None);
    let ev = |host: String, port: u16| Event {
        ts: 10.0,
        verdict: Verdict::Refused,
        method: "CONNECT".into(),
        host,
        port,
        path: None,
        addr: None,
        status: 403,
        count: None,
        learned: false,
        reason: Some("not in the allow list".into()),
    };
    let mut events: Vec<Event> = (0..30_000)
        .map(|i| ev(format!("h{i}.example.net"), 443))
        .collect();
    // The most refused of all: the Docker API on loopback, the metadata service, ssh.
    for _ in 0..5 {
        events.push(ev("127.0.0.1".into(), 2375));
        events.push(ev("169.254.169.254".into(), 80));
        events.push(ev("git.example.org".into(), 22));
        events.push(ev("[::ffff:127.0.0.1]".into(), 6379));
    }
    let refused = refusals(&events, 0.0);
    let m = s.members.iter_mut().find(|m| m.name == "a").unwrap();
    let e = m.egress.as_mut().expect("an allowlist member has egress");
    e.add_refusals("t", &t.members[0].access, refused, None);
    assert_eq!(e.refused.len(), SHOWN);
    assert_eq!(e.refused_left_out.destinations, 30_004 - SHOWN);
    let grant = e.suggested_grant.clone().expect("a grant to paste");
    for bad in ["127.0.0.1", "169.254.169.254", ":22", "6379"] {
        assert!(!grant.contains(bad), "{bad} offered:\n{grant}");
    }
    let added = grant.matches(".example.net\"").count();
    assert_eq!(added, SHOWN, "{grant}");
    let warned = e.not_suggested.join("\n");
    for says in [
        "`127.0.0.1:2375` is a loopback address: it opens services listening on this machine itself; port 2375 is the Docker API without TLS: allowing it gives the member that host",
        "`169.254.169.254:80` is a link-local address (the cloud metadata service lives there): it opens the cloud metadata service",
        "`git.example.org:22`: port 22 is ssh",
        "`[::ffff:127.0.0.1]:6379` is a loopback address",
    ] {
        assert!(warned.contains(says), "{says:?} not in:\n{warned}");
    }
    let text = render_refusals(std::slice::from_ref(&s));
    let lines = text.lines().count();
    assert!(lines < 60, "{lines} lines:\n{text}");
    assert!(
        text.contains(&format!(
            "and {} more destinations ({} refusals)",
            30_004 - SHOWN,
            30_004 - SHOWN
        )),
        "{text}"
    );
    assert!(
        text.contains("not offered, allow only if you mean it:"),
        "{text}"
    );
    assert!(
        text.contains("to allow the most refused, change the grant to:"),
        "{text}"
    );
}

#[test]
fn grant_folders_are_shown_escaped() {
    // A helper's grant names folders its member chose; the table never prints them raw.
    let g = AccessGrant {
        name: "g".into(),
        read: vec!["/w/r\u{202e}txt".into()],
        write: vec!["/w/x\u{1b}]0;PWNED\u{7}".into()],
        network: Network::None,
        intercept: vec![],
        host_listeners: vec![],
        deny: vec![],
    };
    let s = Grants::of(&g).summary();
    assert_eq!(s, "ro:r\\u{202e}txt rw:x\\u{1b}]0;PWNED\\u{7} net:none");
}

#[test]
fn local_allow_entries_are_marked() {
    assert_eq!(
        super::allow_entry_shown("host.ateam.internal:11434"),
        "host.ateam.internal:11434(local)"
    );
    assert_eq!(
        super::allow_entry_shown("127.0.0.1:80"),
        "127.0.0.1:80(local)"
    );
    assert_eq!(
        super::allow_entry_shown("api.example.com"),
        "api.example.com"
    );
    assert_eq!(super::allow_entry_shown("*.internal"), "*.internal");
}

#[test]
fn hosts_with_rules_and_injected_secrets_are_shown_by_name() {
    use crate::core::intercept::{Credential, Intercept};
    let g = AccessGrant {
        name: "g".into(),
        read: vec![],
        write: vec![],
        network: Network::Allow(vec!["pypi.org".into(), "api.anthropic.com".into()]),
        intercept: vec![Intercept {
            host: "api.anthropic.com".into(),
            credentials: Some(Credential::Header {
                header: "x-api-key".into(),
                secret: "ANTHROPIC_API_KEY".into(),
            }),
            http: vec![],
            git: None,
            upstream_ca: None,
        }],
        host_listeners: vec![],
        deny: vec![],
    };
    let grants = Grants::of(&g);
    assert_eq!(grants.network.tunnelled, ["pypi.org"]);
    assert_eq!(grants.network.intercepted, ["api.anthropic.com"]);
    assert_eq!(
        grants.network.injected[0].to_string(),
        "ANTHROPIC_API_KEY -> api.anthropic.com (x-api-key)"
    );
    assert_eq!(
        grants.summary(),
        "net:allow pypi.org,api.anthropic.com(rules)"
    );
    let json = serde_json::to_string(&grants).unwrap();
    assert!(
        json.contains("\"injected\":[{\"secret\":\"ANTHROPIC_API_KEY\""),
        "{json}"
    );
}

#[test]
fn the_table_says_which_secret_is_injected_where() {
    use crate::core::intercept::{Credential, Intercept};
    let mut t = team(&["a", "b"]);
    let g = &mut t.members[0].access;
    g.network = Network::Allow(vec!["api.openai.com".into()]);
    g.intercept = vec![Intercept {
        host: "api.openai.com".into(),
        credentials: Some(Credential::Bearer {
            secret: "OPENAI_API_KEY".into(),
        }),
        http: vec![],
        git: None,
        upstream_ca: None,
    }];
    t.members[0].secret_env = vec!["OPENAI_API_KEY".into()];
    let (s, _) = status(&t, &in_sync(&t), None);
    let table = render_status(
        std::slice::from_ref(&s),
        SystemTime::UNIX_EPOCH + Duration::from_secs(1000),
    );
    assert!(table.contains("net:allow api.openai.com(rules)"), "{table}");
    assert!(
        table.contains("a: injects OPENAI_API_KEY -> api.openai.com (bearer)"),
        "{table}"
    );
    assert!(!table.contains("b: injects"), "{table}");
}

/// `status -w` prints again when the state changes, not when a figure that moves at every
/// look does (times, usage, transcript activity).
#[test]
fn a_watch_fingerprint_ignores_what_moves_at_every_look() {
    let t = team(&["a"]);
    let (s, _) = status(&t, &in_sync(&t), None);
    let doc = |s: TeamStatus| StatusDocument::new(vec![s], None, SystemTime::now());
    let base = doc(s.clone()).fingerprint();
    let mut moved = s.clone();
    let m = &mut moved.members[0];
    m.age_secs = Some(99);
    m.transcript_bytes += 10;
    m.last_activity_at = Some("2026-12-02T00:00:00Z".into());
    m.usage = Some(Usage {
        cpu_seconds: Some(3.0),
        ..Usage::default()
    });
    assert_eq!(doc(moved).fingerprint(), base);
    let mut changed = s;
    changed.members[0].state = "exited 137".into();
    assert_ne!(doc(changed).fingerprint(), base);
}

/// The facts beside the plan reach the rows: a running container's usage with the limits it
/// runs under, and a running controller's pacing (a stopped controller paces nothing); the
/// controller line lists every restart it waits for.
#[test]
fn facts_reach_the_rows_and_the_controller_line() {
    let t = team(&["a", "b"]);
    let o = in_sync(&t);
    let d = desired_state(
        &Model {
            teams: vec![t.clone()],
        },
        &host(),
    );
    let p = plan(&d, &o, PlanOptions::default());
    let mut facts = StatusFacts::empty(SystemTime::UNIX_EPOCH + Duration::from_secs(1000));
    let counted = crate::core::container::Usage {
        cpu_ns: Some(2_500_000_000),
        memory: Some(1 << 20),
        pids: Some(3),
        shared: false,
    };
    facts.usage.insert("id-a".into(), counted);
    let controller = ControllerStatus {
        running: true,
        pid: 7,
        since: "1970-01-01T00:01:00Z".into(),
        last_reconcile: None,
        errors: Default::default(),
        manifest_errors: vec![],
        restarts_due: BTreeMap::from([
            ("t/b".to_string(), "1970-01-01T00:20:00Z".to_string()),
            ("u/x".to_string(), "1970-01-01T00:30:00Z".to_string()),
        ]),
        left_deleted: BTreeMap::from([("v".to_string(), "1970-01-01T00:40:00Z".to_string())]),
    };
    facts.controller = Some(controller.clone());
    let s = team_status(&t, "docker", &o, &p, &facts);
    let a = row(&s, "a");
    let u = a.usage.expect("a running container's usage");
    assert_eq!(
        (u.cpu_seconds, u.memory_bytes, u.pids),
        (Some(2.5), Some(1 << 20), Some(3))
    );
    assert_eq!(u.memory_limit_bytes, Some(1 << 30));
    assert_eq!(u.pids_limit, Some(512));
    assert_eq!(a.next_restart, None);
    let b = row(&s, "b");
    assert_eq!(
        (b.usage, b.next_restart.as_deref()),
        (None, Some("1970-01-01T00:20:00Z"))
    );
    assert_eq!(
        b.detail.as_deref(),
        Some("crash-looping; the controller restarts it at 1970-01-01T00:20:00Z")
    );
    assert_eq!(
        render_controller(Some(&controller)),
        "controller: running since 1970-01-01T00:01:00Z (pid 7)\n  t/b: crash-looping, next restart at 1970-01-01T00:20:00Z\n  u/x: crash-looping, next restart at 1970-01-01T00:30:00Z\n  team v: deleted at 1970-01-01T00:40:00Z; left deleted until ateam apply of it\n"
    );
    let stopped = ControllerStatus {
        running: false,
        ..controller
    };
    facts.controller = Some(stopped.clone());
    let s = team_status(&t, "docker", &o, &p, &facts);
    assert_eq!(row(&s, "b").next_restart, None);
    assert_eq!(
        render_controller(Some(&stopped)),
        "controller: not running (the last one started 1970-01-01T00:01:00Z)\n"
    );
    assert_eq!(
        render_controller(None),
        "controller: not running (ateam controller keeps teams converged)\n"
    );
}

/// A member with `agent:`: `diff` says which build it runs and from where, and the JSON
/// document lists that folder among its mounts, read-only where the command runs it.
#[test]
fn diff_shows_the_agents_build_and_its_mount() {
    let mut t = team(&["a"]);
    let dir = "/home/u/.cache/ateam/agents/claude-2.1.332-1c89f2f1e0bee937-2";
    t.members[0].agent = Some(crate::model::Agent {
        name: "claude".into(),
        task: "fix it".into(),
        model: None,
        model_url: None,
        args: vec![],
        interactive: false,
        home: "/home/u/sessions/members/a/claude".into(),
        version: Some("2.1.332".into()),
        sha256: Some(crate::core::agents::AgentKind::Claude.pinned().sha256),
        dir: Some(dir.into()),
        login: Default::default(),
        team_tools: false,
        model_ca: None,
        model_host: None,
    });
    let d = desired_state(
        &Model {
            teams: vec![t.clone()],
        },
        &host(),
    );
    let p = plan(&d, &Observed::default(), PlanOptions::default());
    let text = crate::report::diff::render_diff(&p);
    assert!(
        text.contains(&format!(
            "      its agent: claude 2.1.332, from {dir} (read-only at /opt/ateam-agent)\n"
        )),
        "{text}"
    );
    let doc = diff_document(&p);
    let runs = doc
        .changes
        .iter()
        .find_map(|c| c.runs.as_ref())
        .expect("a create");
    let mount = runs
        .mounts
        .iter()
        .find(|m| m.target == std::path::Path::new("/opt/ateam-agent"))
        .expect("the agent's mount");
    assert_eq!(mount.source, std::path::Path::new(dir));
    assert!(mount.read_only);
}

/// An agent member that exited 0 after its write was refused: `failed` beside its exit code,
/// the tool that failed named under the table; the same session read to its end (a later
/// task done): `done`, and no note. What the member wrote is escaped.
#[test]
fn an_agent_that_exits_0_after_a_refused_write_shows_as_failed() {
    use crate::core::agents::AgentKind;
    use crate::core::transcript::{Verdict, parse, tasks};
    let bytes: &[u8] =
        include_bytes!("../../tests/fixtures/transcripts/claude-2.1.332-three-tasks.jsonl");
    let mut t = team(&["a"]);
    t.members[0].agent = Some(crate::model::Agent {
        name: "claude".into(),
        task: "x".into(),
        model: None,
        model_url: None,
        args: vec![],
        interactive: false,
        home: "/home/u/sessions/members/a/claude".into(),
        version: None,
        sha256: None,
        dir: None,
        login: Default::default(),
        team_tools: false,
        model_ca: None,
        model_host: None,
    });
    let mut o = in_sync(&t);
    o.containers[0].state = ContainerState::Exited { code: 0 };
    o.containers[0].last_exit = Some(LastExit::exited(
        0,
        false,
        Some("1970-01-01T00:16:00Z".into()),
        None,
    ));
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
    let seen = |len: usize, o: &Observed| {
        let d = desired_state(
            &Model {
                teams: vec![t.clone()],
            },
            &host(),
        );
        let p = plan(&d, o, PlanOptions::default());
        let mut facts = StatusFacts::empty(now);
        let agent = crate::transcripts::AgentFacts {
            session: Some("claude/projects/-w/s\u{1b}[2J.jsonl".into()),
            tasks: tasks(&parse(AgentKind::Claude, &bytes[..len])),
        };
        let f = MemberFacts {
            agent: Some(agent),
            ..Default::default()
        };
        facts.members.insert(("t".into(), "a".into()), f);
        team_status(&t, "docker", o, &p, &facts)
    };
    let s = seen(154_503, &o);
    let a = row(&s, "a").agent.clone().unwrap();
    assert_eq!((a.outcome, a.tasks), (Verdict::Failed, 2));
    assert_eq!(a.failed_tools.len(), 1);
    assert_eq!(a.failed_tools[0].tool, "Write");
    assert!(!crate::core::untrusted::steering(
        a.session.as_deref().unwrap()
    ));
    let table = render_status(std::slice::from_ref(&s), now);
    assert!(table.contains(" 0 (40s ago) failed "), "{table}");
    assert!(
        table.contains(
            "  a: claude failed: task 2 failed: the tools that failed: Write (EACCES: permission denied"
        ),
        "{table}"
    );
    assert!(table.contains("(ateam transcript a)\n"), "{table}");
    let json = serde_json::to_value(StatusDocument::new(vec![s], None, now)).unwrap();
    assert_eq!(json["teams"][0]["members"][0]["agent"]["outcome"], "failed");

    // To the end of the session: task 3 done; and while running, nothing beside the exit.
    let s = seen(bytes.len(), &o);
    assert_eq!(row(&s, "a").agent.as_ref().unwrap().outcome, Verdict::Done);
    let table = render_status(std::slice::from_ref(&s), now);
    assert!(table.contains(" 0 (40s ago) done "), "{table}");
    assert!(!table.contains("a: claude"), "{table}");
    let s = seen(bytes.len(), &in_sync(&t));
    assert_eq!(row(&s, "a").agent.as_ref().unwrap().outcome, Verdict::Done);
}

/// A replacement's reason is a short diff: a list by what it gained and lost (a mount by
/// its target), a long value cut; a short scalar is said whole.
#[test]
fn a_replacement_reason_is_a_short_diff_of_what_changed() {
    use crate::plan::{Drift, FieldChange};
    use serde_json::json;
    let mount = |t: &str| json!({"source": format!("/home/person/projects/shop/{t}"), "target": format!("/work/{t}"), "readOnly": false, "propagation": "rprivate"});
    let d = Drift::Spec {
        changes: vec![
            FieldChange {
                field: "memoryBytes".into(),
                from: json!(1073741824),
                to: json!(805306368),
            },
            FieldChange {
                field: "mounts".into(),
                from: json!([mount("repo"), mount("docs"), mount("cache")]),
                to: json!([mount("repo"), mount("cache"), mount("notes")]),
            },
            FieldChange {
                field: "env.NOTE".into(),
                from: json!("x".repeat(300)),
                to: json!("y"),
            },
        ],
    };
    let text = drift_text(&d);
    assert_eq!(
        text,
        format!(
            "memoryBytes changed from 1073741824 to 805306368; mounts: added /work/notes, removed /work/docs; env.NOTE changed from \"{}... to \"y\"",
            "x".repeat(56)
        )
    );
    assert!(text.len() < 200, "{}", text.len());
}
