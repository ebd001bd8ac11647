//! The planner, case by case. Each test states the machine (observed) and the plan it expects.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::spec::desired_state;
use super::*;
use crate::core::container::labels;
use crate::core::intercept::EgressPolicy;
use crate::host::Host;
use crate::model::{AccessGrant, Member, Model, Network, Parent, RestartPolicy, Team};
use crate::policy;

/// A table row: what to change, and the change the planner must name.
type Edit<T> = Box<dyn Fn(&mut T)>;

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

pub(crate) fn member(name: &str) -> Member {
    Member {
        runtime: Default::default(),
        name: name.into(),
        user: None,
        parent: Parent::MainSession("lead".into()),
        depth: 1,
        access: AccessGrant {
            name: "g".into(),
            read: vec!["/src/docs".into()],
            write: vec!["/src/repo".into()],
            network: Network::None,
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
    }
}

fn team(members: Vec<Member>) -> Model {
    Model {
        teams: vec![Team::named("t", "/home/u/sessions").with_members(members)],
    }
}

pub(crate) fn want(members: Vec<Member>) -> DesiredState {
    desired_state(&team(members), &host())
}

/// The container ateam would have made for `m`, in `state`, with a compliant config.
fn running(d: &DesiredState, name: &str, state: ContainerState) -> ObservedContainer {
    let m = d.members.iter().find(|m| m.member == name).unwrap();
    ObservedContainer {
        id: format!("id-{name}"),
        name: m.spec.name.clone(),
        labels: m.container_labels(&d.store),
        state,
        created: 100,
        effective: Some(policy::compliant(&m.spec)),
        released: true,
        last_exit: None,
        pid: None,
        pid_files: None,
    }
}

fn transcripts(names: &[&str]) -> BTreeSet<PathBuf> {
    names
        .iter()
        .map(|n| PathBuf::from(format!("/home/u/sessions/members/{n}")))
        .collect()
}

pub(crate) fn in_sync(d: &DesiredState, names: &[&str]) -> Observed {
    let containers: Vec<ObservedContainer> = names
        .iter()
        .map(|n| running(d, n, ContainerState::Running))
        .collect();
    Observed {
        recorded: containers.iter().map(|c| c.id.clone()).collect(),
        containers,
        transcript_dirs: transcripts(names),
        live_sockets: BTreeSet::new(),
        egress_policies: BTreeMap::new(),
        egress_proxies: BTreeSet::new(),
        limits_unenforced: false,
        helper_servers: BTreeSet::new(),
        live_sessions: BTreeSet::new(),
        promotions: vec![],
        board_news: BTreeMap::new(),
        board_held: BTreeSet::new(),
    }
}

/// Adds a container ateam made (recorded) to what is observed.
fn made(o: &mut Observed, c: ObservedContainer) {
    o.recorded.insert(c.id.clone());
    o.containers.push(c);
}

fn kinds(p: &Plan) -> Vec<String> {
    p.actions
        .iter()
        .map(|a| {
            let member = &a.subject;
            match &a.op {
                Op::Host(HostOp::MakeTranscriptDir { .. }) => format!("mkdir {member}"),
                Op::Host(HostOp::ReturnTasks { .. }) => format!("return-tasks {member}"),
                Op::Server(ServerOp::StartEgress { .. }) => format!("proxy {member}"),
                Op::Server(ServerOp::UpdateEgress { .. }) => format!("allow {member}"),
                Op::Server(ServerOp::StopEgress) => format!("stop-proxy {member}"),
                Op::Server(ServerOp::StartHelper) => format!("helpers {member}"),
                Op::Server(ServerOp::StopHelper) => format!("stop-helpers {member}"),
                Op::Session(op) => session_kind(member, op),
                Op::Container(op) => container_kind(member, op),
                Op::Team(_) => format!("team {}", a.name()),
            }
        })
        .collect()
}

fn session_kind(session: &str, op: &SessionOp) -> String {
    match op {
        SessionOp::Start { session, resume } if resume.is_empty() => {
            format!("session {}", session.name)
        }
        SessionOp::Start { session, resume } => format!(
            "session {} resume {}",
            session.name,
            resume
                .iter()
                .map(|r| format!("{}={}", r.member, r.state))
                .collect::<Vec<_>>()
                .join(",")
        ),
        SessionOp::Promote {
            session, journal, ..
        } => match journal {
            Some(j) => format!("promote {} from {}", session.name, j.step.as_str()),
            None => format!("promote {}", session.name),
        },
        SessionOp::RollBack { journal } => format!("roll-back {}", journal.name),
        SessionOp::Stop { taken_over_by, .. } => match taken_over_by {
            Some(heir) => format!("stop-session {session} for {heir}"),
            None => format!("stop-session {session}"),
        },
    }
}

fn container_kind(member: &str, op: &ContainerOp) -> String {
    match op {
        ContainerOp::Create { member } => format!("create {}", member.member),
        ContainerOp::Recreate { member, .. } => format!("recreate {}", member.member),
        ContainerOp::Start { .. } => format!("start {member}"),
        ContainerOp::Remove { container, removal } => match removal {
            Removal::Orphan { .. } => format!("remove-orphan {member}"),
            Removal::Duplicate => format!("remove-duplicate {}", container.id),
            Removal::Stranger => format!("remove-stranger {}", container.id),
            Removal::Suspended => format!("remove-suspended {}", container.id),
        },
        ContainerOp::FinishReplacement { container, .. } => format!("finish {}", container.id),
        ContainerOp::RestoreName { container, name } => format!("rename {} {name}", container.id),
        ContainerOp::Unpause { .. } => format!("unpause {member}"),
        ContainerOp::Stop { .. } => format!("stop {member}"),
    }
}

/// The one action of `p`'s, as its container op.
fn only_op(p: &Plan) -> Option<&ContainerOp> {
    match &p.actions[..] {
        [a] => a.container_op(),
        _ => None,
    }
}

fn reason(p: &Plan) -> &Drift {
    match only_op(p) {
        Some(ContainerOp::Recreate { reason, .. }) => reason,
        _ => panic!("expected one recreate, got {:?}", p.actions),
    }
}

#[test]
fn nothing_observed_creates_everything() {
    let d = want(vec![member("a"), member("b")]);
    let p = plan(&d, &Observed::default(), PlanOptions::default());
    assert_eq!(kinds(&p), ["mkdir a", "create a", "mkdir b", "create b"]);
    assert!(p.findings.is_empty());
}

#[test]
fn everything_in_sync_plans_nothing() {
    let d = want(vec![member("a"), member("b")]);
    let p = plan(&d, &in_sync(&d, &["a", "b"]), PlanOptions::pruning(true));
    assert_eq!(p, Plan::default());
    assert!(p.is_noop());
}

#[test]
fn each_kind_of_spec_drift_names_the_field() {
    let old = want(vec![member("a")]);
    let observed = in_sync(&old, &["a"]);
    let cases: Vec<(&str, Edit<Member>, Value, Value)> = vec![
        (
            "memoryBytes",
            Box::new(|m| m.memory_bytes = 2 << 30),
            (1u64 << 30).into(),
            (2u64 << 30).into(),
        ),
        (
            "image",
            Box::new(|m| m.image = "other:1".into()),
            "ateam-demo:latest".into(),
            "other:1".into(),
        ),
        (
            "env.MODE",
            Box::new(|m| {
                m.env.insert("MODE".into(), "fast".into());
            }),
            Value::Null,
            "fast".into(),
        ),
        ("pids", Box::new(|m| m.pids = 64), 512.into(), 64.into()),
        (
            "nanoCpus",
            Box::new(|m| m.nano_cpus = Some(500_000_000)),
            Value::Null,
            500_000_000.into(),
        ),
        (
            "network",
            Box::new(|m| m.access.network = Network::Open),
            "none".into(),
            // Its team's own network, by name.
            serde_json::json!({"open": crate::core::container::team_network_name(
                &crate::core::layout::store_id(&host().state_dir),
                "t"
            )}),
        ),
        (
            "cwd",
            Box::new(|m| m.cwd = "/src/docs".into()),
            "/src/repo".into(),
            "/src/docs".into(),
        ),
        (
            "secretEnv",
            Box::new(|m| m.secret_env = vec!["TOKEN".into()]),
            serde_json::json!([]),
            serde_json::json!(["TOKEN"]),
        ),
    ];
    for (field, edit, from, to) in cases {
        let mut m = member("a");
        edit(&mut m);
        let p = plan(&want(vec![m]), &observed, PlanOptions::default());
        match reason(&p) {
            Drift::Spec { changes } => {
                assert_eq!(changes.len(), 1, "{field}: {changes:?}");
                assert_eq!(
                    (changes[0].field.as_str(), &changes[0].from, &changes[0].to),
                    (field, &from, &to)
                );
            }
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn a_new_grant_is_a_mount_change() {
    let old = want(vec![member("a")]);
    let mut m = member("a");
    m.access.read.push("/src/more".into());
    let p = plan(
        &want(vec![m]),
        &in_sync(&old, &["a"]),
        PlanOptions::default(),
    );
    let Drift::Spec { changes } = reason(&p) else {
        panic!()
    };
    let fields: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, ["env.ATEAM_READ_DIRS", "mounts"]);
}

#[test]
fn unknown_old_spec_still_recreates_by_hash() {
    let d = want(vec![member("a")]);
    let mut o = in_sync(&d, &["a"]);
    o.containers[0].labels.remove(labels::SPEC);
    o.containers[0]
        .labels
        .insert(labels::SPEC_HASH.into(), "0000".into());
    let p = plan(&d, &o, PlanOptions::default());
    assert_eq!(
        reason(&p),
        &Drift::SpecHash {
            from: "0000".into(),
            to: d.members[0].hash.clone()
        }
    );
}

#[test]
fn tampering_is_a_policy_violation() {
    let d = want(vec![member("a")]);
    let tamper: Vec<(&str, Edit<policy::Effective>)> = vec![
        ("privileged", Box::new(|e| e.privileged = true)),
        (
            "bind mounts",
            Box::new(|e| {
                e.bind_mounts
                    .push(crate::core::container::Mount::same("/etc".as_ref(), true))
            }),
        ),
        ("network", Box::new(|e| e.network_mode = "bridge".into())),
        (
            "capabilities added",
            Box::new(|e| e.cap_add.push("SYS_ADMIN".into())),
        ),
        (
            "read-only root filesystem",
            Box::new(|e| e.read_only_rootfs = false),
        ),
        (
            "other mounts",
            Box::new(|e| e.other_mounts.push("/var/run/docker.sock".into())),
        ),
        ("user", Box::new(|e| e.user = "0:0".into())),
        ("memory", Box::new(|e| e.memory_bytes = 0)),
        ("image", Box::new(|e| e.image = "evil:latest".into())),
        (
            "entrypoint",
            Box::new(|e| e.entrypoint = vec!["/bin/sh".into()]),
        ),
        (
            "security options",
            Box::new(|e| e.security_opt.push("seccomp=unconfined".into())),
        ),
        (
            "security options",
            Box::new(|e| e.security_opt.push("apparmor=unconfined".into())),
        ),
        (
            "security options",
            Box::new(|e| e.security_opt.push("label=disable".into())),
        ),
        (
            "security options",
            Box::new(|e| e.security_opt.push("systempaths=unconfined".into())),
        ),
        (
            "AppArmor profile",
            Box::new(|e| e.apparmor_profile = "unconfined".into()),
        ),
        (
            "masked paths",
            Box::new(|e| e.masked_paths = Some(vec!["/proc/acpi".into()])),
        ),
        (
            "read-only paths",
            Box::new(|e| e.readonly_paths = Some(vec![])),
        ),
        (
            "sysctls",
            Box::new(|e| e.sysctls.push("net.ipv4.ip_forward=1".into())),
        ),
        (
            "cgroup parent",
            Box::new(|e| e.cgroup_parent = "/evil".into()),
        ),
        ("OOM killer", Box::new(|e| e.oom_kill_disable = true)),
        (
            "device cgroup rules",
            Box::new(|e| e.device_cgroup_rules.push("c 1:3 rwm".into())),
        ),
        (
            "tmpfs",
            Box::new(|e| {
                e.tmpfs.insert("/tmp".into(), "rw,exec,size=1g".into());
            }),
        ),
        (
            "namespaces",
            Box::new(|e| {
                e.namespaces.insert("pid".into(), "host".into());
            }),
        ),
        (
            "namespaces",
            Box::new(|e| {
                e.namespaces.insert("ipc".into(), "container:abc".into());
            }),
        ),
        (
            "namespaces",
            Box::new(|e| {
                e.namespaces.insert("cgroupns".into(), "host".into());
            }),
        ),
        (
            "devices",
            Box::new(|e| e.devices.push("/dev/kmsg:/dev/kmsg".into())),
        ),
    ];
    for (item, edit) in tamper {
        let mut o = in_sync(&d, &["a"]);
        edit(o.containers[0].effective.as_mut().unwrap());
        let p = plan(&d, &o, PlanOptions::default());
        let Drift::Policy { violations } = reason(&p) else {
            panic!("{item}")
        };
        assert_eq!(
            violations
                .iter()
                .map(|v| v.item.as_str())
                .collect::<Vec<_>>(),
            [item]
        );
    }
}

#[test]
fn orphans_are_reported_unless_prune_is_asked() {
    let old = want(vec![member("a"), member("gone")]);
    let observed = in_sync(&old, &["a", "gone"]);
    let d = want(vec![member("a")]);

    let p = plan(&d, &observed, PlanOptions::default());
    assert!(p.actions.is_empty());
    assert!(
        matches!(&p.findings[..], [Finding::Orphan { member, .. }, Finding::RetainedTranscript { .. }] if member == "gone")
    );

    let p = plan(&d, &observed, PlanOptions::pruning(true));
    assert_eq!(kinds(&p), ["remove-orphan gone"]);
}

#[test]
fn other_teams_and_other_stores_are_not_ours() {
    let d = want(vec![member("a")]);
    let mut o = in_sync(&d, &["a"]);
    let mut other_team = running(&d, "a", ContainerState::Running);
    other_team.id = "x1".into();
    other_team.name = "ateam_u_a".into();
    other_team.labels.insert(labels::TEAM.into(), "u".into());
    let mut other_store = running(&d, "a", ContainerState::Running);
    other_store.id = "x2".into();
    other_store.name = "elsewhere".into();
    other_store
        .labels
        .insert(labels::STORE.into(), "another".into());
    o.containers.extend([other_team, other_store]);
    assert_eq!(plan(&d, &o, PlanOptions::pruning(true)), Plan::default());
}

#[test]
fn a_foreign_container_with_the_name_is_a_conflict_never_touched() {
    let d = want(vec![member("a")]);
    let foreign = ObservedContainer {
        id: "f00".into(),
        name: "ateam_t_a".into(),
        labels: BTreeMap::new(),
        state: ContainerState::Running,
        created: 1,
        effective: None,
        released: true,
        last_exit: None,
        pid: None,
        pid_files: None,
    };
    let o = Observed {
        containers: vec![foreign],
        transcript_dirs: transcripts(&["a"]),
        ..Default::default()
    };
    let p = plan(&d, &o, PlanOptions::pruning(true));
    assert!(p.actions.is_empty(), "{p:?}");
    assert!(
        matches!(&p.findings[..], [Finding::Conflict { container, owner: None, .. }] if container.id == "f00")
    );
}

#[test]
fn stopped_members_follow_their_restart_policy() {
    use ContainerState::*;
    use RestartPolicy::*;
    let cases = [
        (Never, Exited { code: 1 }, None),
        (Never, Exited { code: 0 }, None),
        (OnFailure, Exited { code: 0 }, None),
        (
            OnFailure,
            Exited { code: 137 },
            Some(StartReason::Restart {
                code: 137,
                policy: OnFailure,
            }),
        ),
        (
            Always,
            Exited { code: 0 },
            Some(StartReason::Restart {
                code: 0,
                policy: Always,
            }),
        ),
        (Never, Created, Some(StartReason::NeverStarted)),
    ];
    for (policy, state, expect) in cases {
        let mut m = member("a");
        m.restart = policy;
        let d = want(vec![m]);
        let mut o = in_sync(&d, &["a"]);
        o.containers[0].state = state;
        let p = plan(&d, &o, PlanOptions::default());
        match expect {
            Some(why) => assert!(
                matches!(only_op(&p), Some(ContainerOp::Start { reason, .. }) if *reason == why),
                "{policy:?} {state:?}: {p:?}"
            ),
            None => {
                assert!(p.actions.is_empty(), "{policy:?} {state:?}: {p:?}");
                assert!(matches!(&p.findings[..], [Finding::Finished { .. }]));
            }
        }
    }
}

/// An agent that ended is woken once for each piece of news on its board: not for news it
/// was woken for already, not when it has no wake command, never while it runs.
#[test]
fn the_board_wakes_an_ended_agent_once_per_news() {
    use crate::board::store::News;
    let news = |mark: (u64, u64), woken: (u64, u64)| News {
        messages: 1,
        tasks: 0,
        mark,
        woken,
    };
    let cases = [
        (
            true,
            ContainerState::Exited { code: 0 },
            Some(news((3, 0), (2, 0))),
            true,
        ),
        (
            true,
            ContainerState::Exited { code: 0 },
            Some(news((3, 0), (3, 0))),
            false,
        ),
        (true, ContainerState::Exited { code: 0 }, None, false),
        (
            false,
            ContainerState::Exited { code: 0 },
            Some(news((3, 0), (0, 0))),
            false,
        ),
        (
            true,
            ContainerState::Running,
            Some(news((3, 0), (0, 0))),
            false,
        ),
    ];
    for (wakes, state, news, woken) in cases {
        let mut m = member("a");
        m.restart = RestartPolicy::Never;
        let mut d = want(vec![m]);
        d.members[0].wake = wakes.then(|| vec!["agent".to_string(), "--continue".to_string()]);
        let mut o = in_sync(&d, &["a"]);
        o.containers[0].state = state;
        if let Some(n) = news {
            o.board_news.insert(("t".into(), "a".into()), n);
        }
        let p = plan(&d, &o, PlanOptions::default());
        let started = matches!(
            only_op(&p),
            Some(ContainerOp::Start {
                reason: StartReason::Board {
                    messages: 1,
                    mark: (3, 0),
                    ..
                },
                ..
            })
        );
        assert_eq!(started, woken, "{wakes} {state:?} {news:?}: {p:?}");
    }
}

/// What a member holds on the board goes back to todo when it leaves the manifests, its
/// agent exits with an error, or its container is made again; not while it runs or after
/// it ended well.
#[test]
fn tasks_held_by_a_member_that_left_go_back() {
    let cases = [
        (ContainerState::Running, false),
        (ContainerState::Exited { code: 0 }, false),
        (ContainerState::Exited { code: 1 }, true),
    ];
    for (state, returned) in cases {
        let mut m = member("a");
        m.restart = RestartPolicy::Never;
        let d = want(vec![m]);
        let mut o = in_sync(&d, &["a"]);
        o.containers[0].state = state;
        o.board_held.insert(("t".into(), "a".into()));
        let p = plan(&d, &o, PlanOptions::default());
        let back = kinds(&p).contains(&"return-tasks a".to_string());
        assert_eq!(back, returned, "{state:?}: {p:?}");
    }
    // No manifest wants it any more.
    let d = want(vec![member("a")]);
    let mut o = in_sync(&d, &["a"]);
    o.board_held.insert(("t".into(), "a".into()));
    let p = plan(&want(vec![]), &o, PlanOptions::default());
    assert!(
        !kinds(&p).contains(&"return-tasks a".to_string()),
        "kept without --prune: {p:?}"
    );
    let prune = PlanOptions {
        prune: true,
        ..PlanOptions::default()
    };
    let p = plan(&want(vec![]), &o, prune);
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(&a.op, Op::Host(HostOp::ReturnTasks { why }) if why.contains("no manifest"))),
        "{p:?}"
    );
}

#[test]
fn the_restart_policy_is_not_part_of_the_container() {
    let d = want(vec![member("a")]);
    let mut m = member("a");
    m.restart = RestartPolicy::Always;
    assert_eq!(want(vec![m]).members[0].hash, d.members[0].hash);
}

#[test]
fn dead_is_recreated_paused_and_renamed_are_put_right() {
    let d = want(vec![member("a")]);
    let mut o = in_sync(&d, &["a"]);
    o.containers[0].state = ContainerState::Dead;
    assert_eq!(reason(&plan(&d, &o, PlanOptions::default())), &Drift::Dead);
    o.containers[0].state = ContainerState::Paused;
    assert_eq!(kinds(&plan(&d, &o, PlanOptions::default())), ["unpause a"]);
    o.containers[0].state = ContainerState::Running;
    o.containers[0].name = "renamed-by-hand".into();
    assert_eq!(
        kinds(&plan(&d, &o, PlanOptions::default())),
        ["rename id-a ateam_t_a"]
    );
}

#[test]
fn a_restart_asked_for_replaces_that_member_alone_whatever_its_state() {
    let d = want(vec![member("a"), member("b")]);
    let mut o = in_sync(&d, &["a", "b"]);
    let asked = PlanOptions {
        restart: Some(("t".into(), "a".into())),
        ..PlanOptions::default()
    };
    assert_eq!(reason(&plan(&d, &o, asked.clone())), &Drift::Asked);
    assert_eq!(plan(&d, &o, asked.clone()).actions.len(), 1);
    // Finished, or held back by the crash-loop policy: the person's word wins.
    o.containers[0].state = ContainerState::Exited { code: 0 };
    assert_eq!(reason(&plan(&d, &o, asked.clone())), &Drift::Asked);
    let held = PlanOptions {
        deferred: [(
            ("t".into(), "a".into()),
            std::time::SystemTime::now() + std::time::Duration::from_secs(60),
        )]
        .into(),
        ..asked.clone()
    };
    assert_eq!(reason(&plan(&d, &o, held)), &Drift::Asked);
    // Another team's member of the same name is not asked for.
    let other = PlanOptions {
        restart: Some(("u".into(), "a".into())),
        ..PlanOptions::default()
    };
    assert!(
        plan(&d, &o, other)
            .actions
            .iter()
            .all(|a| !matches!(a.container_op(), Some(ContainerOp::Recreate { .. })))
    );
}

#[test]
fn a_container_with_our_labels_that_we_did_not_make_is_a_stranger() {
    let d = want(vec![member("a")]);
    let mut stranger = running(&d, "a", ContainerState::Running);
    stranger.id = "evil".into();
    stranger.name = "look-alike".into();
    // Beside the genuine member: reported, never adopted; --prune removes it.
    let mut o = in_sync(&d, &["a"]);
    o.containers.push(stranger.clone());
    let p = plan(&d, &o, PlanOptions::default());
    assert!(p.actions.is_empty(), "{p:?}");
    assert!(
        matches!(&p.findings[..], [Finding::Stranger { container, .. }] if container.id == "evil")
    );
    let p = plan(&d, &o, PlanOptions::pruning(true));
    assert_eq!(kinds(&p), ["remove-stranger evil"]);
    // Alone, even exited or never released: never started, released or kept as the member;
    // the member is created beside it.
    for state in [
        ContainerState::Exited { code: 1 },
        ContainerState::Created,
        ContainerState::Running,
    ] {
        let mut s = stranger.clone();
        s.state = state;
        let o = Observed {
            containers: vec![s],
            transcript_dirs: transcripts(&["a"]),
            ..Default::default()
        };
        assert_eq!(kinds(&plan(&d, &o, PlanOptions::default())), ["create a"]);
    }
    // Holding the member's own name (or its replacement's): removed as the replacement of
    // that name, then the member is made.
    for name in ["ateam_t_a", "ateam_t_a_next"] {
        let mut s = stranger.clone();
        s.name = name.into();
        let o = Observed {
            containers: vec![s],
            transcript_dirs: transcripts(&["a"]),
            ..Default::default()
        };
        assert_eq!(
            kinds(&plan(&d, &o, PlanOptions::default())),
            ["remove-stranger evil", "create a"]
        );
    }
}

#[test]
fn a_label_ateam_did_not_set_is_a_policy_violation() {
    let d = want(vec![member("a")]);
    let mut o = in_sync(&d, &["a"]);
    o.containers[0]
        .labels
        .insert("ateam.dev/trusted".into(), "yes".into());
    let p = plan(&d, &o, PlanOptions::default());
    let Drift::Policy { violations } = reason(&p) else {
        panic!("{p:?}")
    };
    assert_eq!(violations[0].item, "labels");
    // An image's own labels are not ateam's business.
    let mut o = in_sync(&d, &["a"]);
    o.containers[0]
        .labels
        .insert("org.opencontainers.image.title".into(), "demo".into());
    assert!(plan(&d, &o, PlanOptions::default()).is_noop());
}

#[test]
fn names_never_collide() {
    use crate::core::container::{container_name, replacement_name};
    assert_ne!(container_name("t", "a-b"), container_name("t-a", "b"));
    let names = [
        container_name("t", "a"),
        container_name("t", "a-next"),
        container_name("t", "next"),
    ];
    for n in &names {
        assert!(!names.contains(&replacement_name(n)), "{n}");
    }
    // A change to member `a` leaves member `a-next` alone.
    let d = want(vec![member("a"), member("a-next")]);
    let mut o = in_sync(&d, &["a", "a-next"]);
    o.containers[0]
        .labels
        .insert(labels::SPEC_HASH.into(), "old".into());
    assert_eq!(kinds(&plan(&d, &o, PlanOptions::default())), ["recreate a"]);
}

#[test]
fn deleted_members_keep_their_transcripts() {
    let d = want(vec![member("a")]);
    let mut o = in_sync(&d, &["a"]);
    o.transcript_dirs.extend(transcripts(&["old1", "old2"]));
    let p = plan(&d, &o, PlanOptions::pruning(true));
    assert!(p.actions.is_empty(), "nothing removes a transcript: {p:?}");
    let kept: Vec<&str> = p
        .findings
        .iter()
        .map(|f| match f {
            Finding::RetainedTranscript { member, .. } => member.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kept, ["old1", "old2"]);
}

#[test]
fn missing_transcript_folder_is_made_without_touching_the_container() {
    let d = want(vec![member("a")]);
    let mut o = in_sync(&d, &["a"]);
    o.transcript_dirs.clear();
    assert_eq!(kinds(&plan(&d, &o, PlanOptions::default())), ["mkdir a"]);
}

#[test]
fn duplicates_keep_the_current_one() {
    let d = want(vec![member("a")]);
    let mut o = in_sync(&d, &["a"]);
    let mut stale = running(&d, "a", ContainerState::Running);
    stale.id = "stale".into();
    stale.created = 999;
    stale.labels.insert(labels::SPEC_HASH.into(), "old".into());
    made(&mut o, stale);
    assert_eq!(
        kinds(&plan(&d, &o, PlanOptions::default())),
        ["remove-duplicate stale"]
    );
}

#[test]
fn spec_hash_is_stable_and_changes_with_any_field() {
    let a = want(vec![member("a")]).members[0].clone();
    assert_eq!(
        a.hash,
        want(vec![member("a")]).members[0].hash,
        "same input, same hash"
    );
    assert_eq!(a.hash.len(), 16);
    let mut m = member("a");
    m.labels.insert("k".into(), "v".into());
    assert_ne!(want(vec![m]).members[0].hash, a.hash);
    let mut m = member("a");
    m.command = Some(vec!["sh".into()]);
    assert_ne!(want(vec![m]).members[0].hash, a.hash);
}

#[test]
fn sessions_and_egress_proxies_start_when_their_socket_is_silent() {
    let mut d = team(vec![member("a"), member("b")]);
    d.teams[0].members[1].access.network = Network::Allow(vec!["api.example.com".into()]);
    d.teams[0].sessions.push(crate::model::MainSession {
        name: "lead".into(),
        cwd: "/src/repo".into(),
        command: vec!["claude".into()],
        env: BTreeMap::new(),
        labels: BTreeMap::new(),
        transcript_dir: PathBuf::new(),
        promoted_from: None,
        takes_over: None,
    });
    let d = desired_state(&d, &host());
    let proxy = crate::core::layout::egress_socket_path(&host().state_dir, "t", "b");
    assert_eq!(d.members[1].egress.as_ref().unwrap().socket, proxy);
    let mut o = in_sync(&d, &["a", "b"]);
    assert_eq!(
        kinds(&plan(&d, &o, PlanOptions::default())),
        ["session lead", "proxy b"]
    );
    o.live_sockets.insert(proxy.clone());
    o.live_sockets.insert(d.sessions[0].socket.clone());
    o.egress_proxies.insert(("t".into(), "b".into()));
    // Alive, but its file holds another list: the list is rewritten, the container stays.
    o.egress_policies.insert(
        proxy.clone(),
        EgressPolicy {
            allow: vec!["old.example.com".into()],
            intercept: vec![],
            ..Default::default()
        },
    );
    assert_eq!(kinds(&plan(&d, &o, PlanOptions::default())), ["allow b"]);
    // A file of an ateam before owners were judged: the same list, but no `appliedBy`, so
    // it is rewritten to name the person whose listeners the member may reach.
    o.egress_policies.insert(
        proxy.clone(),
        EgressPolicy {
            allow: vec!["api.example.com".into()],
            intercept: vec![],
            ..Default::default()
        },
    );
    assert_eq!(kinds(&plan(&d, &o, PlanOptions::default())), ["allow b"]);
    o.egress_policies.insert(
        proxy,
        EgressPolicy {
            allow: vec!["api.example.com".into()],
            intercept: vec![],
            applied_by: vec![1000],
            host_listeners: vec![],
            deny: vec![],
        },
    );
    assert!(plan(&d, &o, PlanOptions::default()).is_noop());
}

#[test]
fn a_suspended_member_is_kept_down_with_its_servers_and_its_tasks_go_back() {
    let mut t = team(vec![member("a"), member("b")]);
    t.teams[0].members[1].access.network = Network::Allow(vec!["api.example.com".into()]);
    t.teams[0].helper_requests = true;
    let mut d = desired_state(&t, &host());
    d.members[1].suspended = Some("2026-12-07T04:00:00Z".into());
    let b = &d.members[1];
    let (proxy, helpers) = (b.egress.clone().unwrap().socket, b.helpers.clone().unwrap());
    let mut o = in_sync(&d, &["a", "b"]);
    for s in [&proxy, &helpers, &d.members[0].helpers.clone().unwrap()] {
        o.live_sockets.insert(s.clone());
    }
    o.egress_proxies.insert(("t".into(), "b".into()));
    o.helper_servers.insert(("t".into(), "a".into()));
    o.helper_servers.insert(("t".into(), "b".into()));
    o.board_held.insert(("t".into(), "b".into()));
    let p = plan(&d, &o, PlanOptions::default());
    let id = o.containers[1].id.clone();
    assert_eq!(
        kinds(&p),
        [
            format!("remove-suspended {id}"),
            "stop-proxy b".into(),
            "stop-helpers b".into(),
            "return-tasks b".into(),
        ]
    );
    assert_eq!(
        p.findings,
        [Finding::Suspended {
            team: "t".into(),
            member: "b".into(),
            since: "2026-12-07T04:00:00Z".into(),
        }]
    );
    // Once it is down, nothing is started, whatever its restart policy; not even its
    // transcript folder is made again: nothing of it is touched.
    o.containers.remove(1);
    o.live_sockets.remove(&proxy);
    o.live_sockets.remove(&helpers);
    o.egress_proxies.clear();
    o.helper_servers.remove(&("t".into(), "b".into()));
    o.transcript_dirs = transcripts(&["a"]);
    o.board_held.clear();
    let p = plan(&d, &o, PlanOptions::default());
    assert!(p.actions.is_empty(), "{:?}", kinds(&p));
    assert!(!p.drifted());
    // Resumed: made again, its proxy and helper server first.
    d.members[1].suspended = None;
    let p = plan(&d, &o, PlanOptions::default());
    assert_eq!(kinds(&p), ["proxy b", "helpers b", "mkdir b", "create b"]);
}

#[test]
fn a_new_allow_list_keeps_the_container_and_a_lost_one_stops_the_proxy() {
    let mut t = team(vec![member("a")]);
    t.teams[0].members[0].access.network = Network::Allow(vec!["api.example.com".into()]);
    let before = desired_state(&t, &host());
    t.teams[0].members[0].access.network = Network::Allow(vec!["other.example.com".into()]);
    let after = desired_state(&t, &host());
    assert_eq!(before.members[0].hash, after.members[0].hash);
    let env = &after.members[0].spec.env;
    assert_eq!(env["HTTPS_PROXY"], "http://127.0.0.1:3128");
    assert_eq!(env["http_proxy"], "http://127.0.0.1:3128");
    assert_eq!(env["ATEAM_EGRESS_SOCKET"], "/.ateam/egress.sock");

    // No allow list any more: the container is recreated, then the proxy stopped.
    t.teams[0].members[0].access.network = Network::None;
    let none = desired_state(&t, &host());
    let mut o = in_sync(&before, &["a"]);
    o.egress_proxies.insert(("t".into(), "a".into()));
    assert_eq!(
        kinds(&plan(&none, &o, PlanOptions::default())),
        ["recreate a", "stop-proxy a"]
    );
    // Member gone, container kept as an orphan: its proxy stays with it; with --prune both go.
    let gone = desired_state(&team(vec![]), &host());
    assert_eq!(
        kinds(&plan(&gone, &o, PlanOptions::default())),
        Vec::<String>::new()
    );
    assert_eq!(
        kinds(&plan(&gone, &o, PlanOptions::pruning(true))),
        ["remove-orphan a", "stop-proxy a"]
    );
    // Nothing left of the member: the proxy is stopped.
    o.containers.clear();
    assert_eq!(
        kinds(&plan(&gone, &o, PlanOptions::default())),
        ["stop-proxy a"]
    );
}

#[test]
fn unenforced_limits_are_waived_only_where_the_team_allows_it() {
    let mut m = member("a");
    m.memory_bytes = 64 << 20;
    let mut d = team(vec![m]);
    let strict = desired_state(&d, &host());
    let mut o = in_sync(&strict, &["a"]);
    // What rootless Podman on cgroup v1 reports: the limits are simply not there.
    let eff = o.containers[0].effective.as_mut().unwrap();
    (eff.memory_bytes, eff.memory_swap_bytes, eff.pids_limit) = (0, 0, 0);
    o.limits_unenforced = true;
    let p = plan(&strict, &o, PlanOptions::default());
    let Drift::Policy { violations } = reason(&p) else {
        panic!()
    };
    assert_eq!(violations.len(), 3, "{violations:?}");
    d.teams[0].allow_unenforced_limits = true;
    let relaxed = desired_state(&d, &host());
    assert!(plan(&relaxed, &o, PlanOptions::default()).is_noop());
}

#[test]
fn an_interrupted_recreate_is_finished_or_undone() {
    let d = want(vec![member("a")]);
    let replacement = |old: &str| {
        let mut r = running(&d, "a", ContainerState::Running);
        r.id = "new".into();
        r.name = crate::core::container::replacement_name(&r.name);
        r.labels.insert(labels::REPLACES.into(), old.into());
        r
    };
    // Crash after the replacement was verified and the old one removed: finish by renaming.
    let mut o = in_sync(&d, &[]);
    o.transcript_dirs = transcripts(&["a"]);
    made(&mut o, replacement("id-a"));
    assert_eq!(kinds(&plan(&d, &o, PlanOptions::default())), ["finish new"]);
    // Crash before the old one was removed: undo the replacement, keep the old one.
    let mut o = in_sync(&d, &["a"]);
    made(&mut o, replacement("id-a"));
    assert_eq!(
        kinds(&plan(&d, &o, PlanOptions::default())),
        ["remove-duplicate new"]
    );
    // A replacement that never got going is removed and the member created afresh.
    let mut o = in_sync(&d, &[]);
    o.transcript_dirs = transcripts(&["a"]);
    let mut r = replacement("id-a");
    r.state = ContainerState::Created;
    made(&mut o, r);
    assert_eq!(
        kinds(&plan(&d, &o, PlanOptions::default())),
        ["remove-duplicate new", "create a"]
    );
}

#[test]
fn a_running_container_never_released_is_checked_then_released() {
    let d = want(vec![member("a")]);
    let mut o = in_sync(&d, &["a"]);
    o.containers[0].released = false;
    let p = plan(&d, &o, PlanOptions::default());
    assert!(
        matches!(
            only_op(&p),
            Some(ContainerOp::Start {
                reason: StartReason::NotReleased,
                ..
            })
        ),
        "{p:?}"
    );
}

/// `open` is its team's network only: the engine's default bridge, another network beside
/// it, or the host's are violations (Podman reports `bridge` as the mode for any network).
#[test]
fn an_open_member_is_on_its_teams_network_only() {
    let mut m = member("a");
    m.access.network = Network::Open;
    let d = want(vec![m]);
    let spec = &d.members[0].spec;
    let net = spec.network.name().unwrap().to_string();
    assert!(net.starts_with("ateam-") && net.ends_with("-t"), "{net}");
    let ok = policy::compliant(spec);
    assert!(policy::verify(spec, &ok, policy::Limits::Enforced).is_empty());
    let mut podman = ok.clone();
    podman.network_mode = "bridge".into();
    assert!(policy::verify(spec, &podman, policy::Limits::Enforced).is_empty());
    let edits: Vec<Edit<policy::Effective>> = vec![
        Box::new(|e| e.networks = vec!["bridge".into()]),
        Box::new(|e| e.networks.push("ateam-other-team".into())),
        Box::new(|e| e.network_mode = "host".into()),
        Box::new(|e| e.networks.clear()),
    ];
    for edit in edits {
        let mut e = ok.clone();
        edit(&mut e);
        let v = policy::verify(spec, &e, policy::Limits::Enforced);
        assert!(v.iter().any(|v| v.item == "network"), "{e:?}: {v:?}");
    }
}

/// One verdict for diff, apply --dry-run and status: every action is drift, and so is
/// every orphan, stranger and conflict apply leaves alone; a finished member and a kept
/// transcript are not.
#[test]
fn drift_is_any_action_or_what_apply_leaves_but_the_manifests_do_not_describe() {
    let d = want(vec![member("a")]);
    let observed = |edit: &dyn Fn(&mut Observed)| {
        let mut o = in_sync(&d, &["a"]);
        edit(&mut o);
        o
    };
    let mut finished = running(&d, "a", ContainerState::Exited { code: 0 });
    finished.released = false;
    let held = {
        let mut c = running(&d, "a", ContainerState::Running);
        c.released = false;
        c
    };
    let orphan = {
        let old = want(vec![member("gone")]);
        running(&old, "gone", ContainerState::Running)
    };
    let mut stranger = running(&d, "a", ContainerState::Running);
    stranger.id = "evil".into();
    stranger.name = "look-alike".into();
    let mut duplicate = running(&d, "a", ContainerState::Exited { code: 1 });
    duplicate.id = "dup".into();
    duplicate.created = 1;
    let foreign = ObservedContainer {
        labels: BTreeMap::new(),
        id: "f00".into(),
        ..running(&d, "a", ContainerState::Running)
    };
    let cases: Vec<(&str, Observed, bool)> = vec![
        ("in sync", observed(&|_| {}), false),
        (
            "finished as its policy allows",
            observed(&|o| o.containers = vec![finished.clone()]),
            false,
        ),
        (
            "a kept transcript",
            observed(&|o| {
                o.transcript_dirs.extend(transcripts(&["old"]));
            }),
            false,
        ),
        (
            "held at its gate",
            observed(&|o| o.containers = vec![held.clone()]),
            true,
        ),
        ("an orphan", observed(&|o| made(o, orphan.clone())), true),
        (
            "a stranger",
            observed(&|o| o.containers.push(stranger.clone())),
            true,
        ),
        (
            "a duplicate",
            observed(&|o| made(o, duplicate.clone())),
            true,
        ),
        (
            "a conflict",
            Observed {
                containers: vec![foreign.clone()],
                transcript_dirs: transcripts(&["a"]),
                ..Default::default()
            },
            true,
        ),
        (
            "a missing transcript folder",
            observed(&|o| o.transcript_dirs.clear()),
            true,
        ),
    ];
    for (case, o, drifted) in cases {
        let p = plan(&d, &o, PlanOptions::default());
        assert_eq!(p.drifted(), drifted, "{case}: {p:?}");
        assert_eq!(p.team_drifted("t"), drifted, "{case}");
        assert!(!p.team_drifted("other"), "{case}");
        // With --prune the orphan and the stranger become changes: drift all the same.
        let pruned = plan(&d, &o, PlanOptions::pruning(true));
        assert_eq!(pruned.drifted(), drifted, "{case} with --prune: {pruned:?}");
    }
}

fn session(name: &str) -> crate::model::MainSession {
    crate::model::MainSession {
        name: name.into(),
        cwd: "/src/repo".into(),
        command: vec!["claude".into()],
        env: BTreeMap::new(),
        labels: BTreeMap::new(),
        transcript_dir: format!("/home/u/sessions/{name}").into(),
        promoted_from: None,
        takes_over: None,
    }
}

/// Before: lead, with members a and b (b works for a); after: a promoted to a main session.
fn promoting_a() -> (DesiredState, DesiredState) {
    let mut before = team(vec![member("a"), member("b")]);
    before.teams[0].members[1].parent = Parent::Member("a".into());
    before.teams[0].sessions.push(session("lead"));
    let mut after = team(vec![member("b")]);
    after.teams[0].members[0].parent = Parent::MainSession("a".into());
    let mut a = session("a");
    a.promoted_from = Some("a".into());
    after.teams[0].sessions = vec![session("lead"), a];
    (
        desired_state(&before, &host()),
        desired_state(&after, &host()),
    )
}

#[test]
fn a_promotion_stops_the_member_moves_its_transcript_and_starts_the_session() {
    let (before, after) = promoting_a();
    let mut o = in_sync(&before, &["a", "b"]);
    o.live_sockets.insert(after.sessions[0].socket.clone());
    let p = plan(&after, &o, PlanOptions::default());
    // The member's container is the promotion's: no orphan, no removal of its own; b (whose
    // parent was a) keeps its container.
    assert_eq!(kinds(&p), ["promote a"]);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let Op::Session(SessionOp::Promote {
        session,
        containers,
        ..
    }) = &p.actions[0].op
    else {
        unreachable!()
    };
    assert_eq!(containers.len(), 1);
    assert_eq!(
        session.promoted_from.as_deref(),
        Some(std::path::Path::new("/home/u/sessions/members/a"))
    );
    assert_eq!(session.transcript_dir, PathBuf::from("/home/u/sessions/a"));
    assert_eq!(session.env["ATEAM_ROLE"], "main");

    // Only the transcript left (the member had no container): still promoted (moved).
    let mut o2 = in_sync(&after, &["b"]);
    o2.transcript_dirs
        .insert("/home/u/sessions/members/a".into());
    o2.live_sockets.insert(after.sessions[0].socket.clone());
    assert_eq!(
        kinds(&plan(&after, &o2, PlanOptions::default())),
        ["promote a"]
    );

    // Done: nothing of the member is left, and the session runs: nothing to do.
    let mut done = in_sync(&after, &["b"]);
    done.transcript_dirs.insert("/home/u/sessions/a".into());
    for s in &after.sessions {
        done.live_sockets.insert(s.socket.clone());
    }
    assert!(plan(&after, &done, PlanOptions::default()).is_noop());
    // Done, but the session's terminal ended: it is started like any session.
    done.live_sockets.remove(&after.sessions[1].socket);
    assert_eq!(
        kinds(&plan(&after, &done, PlanOptions::default())),
        ["session a"]
    );
}

#[test]
fn an_interrupted_promotion_goes_on_or_is_undone_when_no_longer_wanted() {
    use crate::core::session::{Promotion, PromotionStep};
    let (before, after) = promoting_a();
    let journal = Promotion {
        team: "t".into(),
        name: "a".into(),
        step: PromotionStep::Moved,
        containers: vec!["id-a".into()],
        from: "/home/u/sessions/members/a".into(),
        to: "/home/u/sessions/a".into(),
        had_transcript: true,
        begun_at: "2026-11-30T00:00:00Z".into(),
    };
    let mut o = in_sync(&after, &["b"]);
    o.live_sockets.insert(after.sessions[0].socket.clone());
    o.promotions.push(journal.clone());
    assert_eq!(
        kinds(&plan(&after, &o, PlanOptions::default())),
        ["promote a from moved"]
    );
    // The manifests went back to the member: the promotion is undone, before the member's
    // own actions (its transcript folder is missing until then).
    let mut o = in_sync(&before, &["b"]);
    o.live_sockets.insert(before.sessions[0].socket.clone());
    o.promotions.push(journal);
    let k = kinds(&plan(&before, &o, PlanOptions::default()));
    assert_eq!(k[0], "roll-back a");
    assert!(k.contains(&"create a".to_string()), "{k:?}");
}

#[test]
fn a_session_that_takes_over_is_told_of_every_member() {
    let mut d = team(vec![member("a"), member("b")]);
    let mut heir = session("lead2");
    heir.takes_over = Some("lead".into());
    d.teams[0].sessions.push(heir);
    let d = desired_state(&d, &host());
    let mut o = in_sync(&d, &["a"]);
    o.containers[0].state = ContainerState::Exited { code: 3 };
    let k = kinds(&plan(&d, &o, PlanOptions::default()));
    assert_eq!(
        k[0], "session lead2 resume a=exited 3,b=no container",
        "{k:?}"
    );
}

/// A promoted session that also takes over is told of the team, as a plain heir is (before,
/// its resume file said the team had no members).
#[test]
fn a_promoted_session_that_takes_over_is_told_of_every_member() {
    let (before, _) = promoting_a();
    let mut after = team(vec![member("b")]);
    after.teams[0].members[0].parent = Parent::MainSession("lead".into());
    let mut a = session("a");
    a.promoted_from = Some("a".into());
    a.takes_over = Some("lead".into());
    after.teams[0].sessions = vec![a];
    let after = desired_state(&after, &host());
    let o = in_sync(&before, &["a", "b"]);
    let p = plan(&after, &o, PlanOptions::default());
    let resume = p.actions.iter().find_map(|a| {
        if let Op::Session(SessionOp::Promote { resume, .. }) = &a.op {
            Some(resume)
        } else {
            None
        }
    });
    let names: Vec<(&str, &str)> = resume
        .expect("a promotion")
        .iter()
        .map(|r| (r.member.as_str(), r.state.as_str()))
        .collect();
    assert_eq!(names, [("b", "running")], "{:?}", kinds(&p));
}

#[test]
fn members_and_sessions_know_their_role() {
    let mut d = team(vec![member("a")]);
    d.teams[0].sessions.push(session("lead"));
    let d = desired_state(&d, &host());
    let env = &d.members[0].spec.env;
    assert_eq!(
        (
            env["ATEAM_ROLE"].as_str(),
            env["ATEAM_TEAM"].as_str(),
            env["ATEAM_NAME"].as_str()
        ),
        ("member", "t", "a")
    );
    let env = &d.sessions[0].env;
    assert_eq!(
        (
            env["ATEAM_ROLE"].as_str(),
            env["ATEAM_TEAM"].as_str(),
            env["ATEAM_NAME"].as_str()
        ),
        ("main", "t", "lead")
    );
    assert_eq!(env["ATEAM_SESSION_DIR"], "/home/u/sessions/lead");
}

#[test]
fn helper_servers_are_started_when_silent_and_stopped_when_not_wanted() {
    let mut d = team(vec![member("a"), member("b")]);
    d.teams[0].helper_requests = true;
    let d = desired_state(&d, &host());
    let mut o = in_sync(&d, &["a", "b"]);
    assert_eq!(
        kinds(&plan(&d, &o, PlanOptions::default())),
        ["helpers a", "helpers b"]
    );
    for m in &d.members {
        o.live_sockets.insert(m.helpers.clone().unwrap());
        o.helper_servers.insert((m.team.clone(), m.member.clone()));
    }
    assert!(plan(&d, &o, PlanOptions::default()).is_noop());
    // The team turns requests off: both servers stop (and the members are recreated: their
    // gate no longer starts the helpers bridge).
    let mut off = team(vec![member("a"), member("b")]);
    off.teams[0].helper_requests = false;
    let off = desired_state(&off, &host());
    assert_eq!(
        kinds(&plan(&off, &o, PlanOptions::default())),
        [
            "recreate a",
            "recreate b",
            "stop-helpers a",
            "stop-helpers b"
        ]
    );
}

#[test]
fn a_session_no_manifest_wants_is_reported_stopped_on_takeover_or_prune() {
    let mut d = team(vec![member("a")]);
    d.teams[0].sessions.push(session("lead"));
    let d = desired_state(&d, &host());
    let mut o = in_sync(&d, &["a"]);
    o.live_sockets.insert(d.sessions[0].socket.clone());
    o.live_sessions.insert(("t".into(), "lead".into()));
    o.live_sessions.insert(("t".into(), "old".into()));
    // Left alone, reported (drift).
    let p = plan(&d, &o, PlanOptions::default());
    assert!(p.is_noop());
    assert!(
        matches!(&p.findings[..], [Finding::OrphanSession { session, .. }] if session == "old")
    );
    assert!(p.drifted());
    // --prune ends it.
    assert_eq!(
        kinds(&plan(&d, &o, PlanOptions::pruning(true))),
        ["stop-session old"]
    );
    // A session that takes it over ends it (and starts, told of the members).
    let mut d2 = team(vec![member("a")]);
    let mut heir = session("lead");
    heir.takes_over = Some("old".into());
    d2.teams[0].sessions.push(heir);
    let d2 = desired_state(&d2, &host());
    assert_eq!(
        kinds(&plan(&d2, &o, PlanOptions::default())),
        ["stop-session old for lead"]
    );
}

/// Every variable ateam sets in a member is one `Member.env` may not name: none is ever
/// overwritten behind the manifest's back (`core::env::reserved_env`).
#[test]
fn every_variable_ateam_sets_is_refused_in_member_env() {
    let mut m = member("a");
    m.access.network = Network::Allow(vec![
        "host.ateam.internal:11434".into(),
        "api.example.com".into(),
    ]);
    m.access.intercept = vec![crate::core::intercept::Intercept {
        host: "api.example.com".into(),
        credentials: None,
        http: vec![],
        git: None,
        upstream_ca: None,
    }];
    let mut d = team(vec![m]);
    d.teams[0].helper_requests = true;
    let spec = &desired_state(&d, &host()).members[0].spec;
    assert!(spec.env.contains_key("HTTP_PROXY") && spec.env.contains_key("ATEAM_HELPERS_URL"));
    assert_eq!(spec.env["SSL_CERT_FILE"], "/.ateam/ca-bundle.pem");
    assert_eq!(spec.env["NODE_EXTRA_CA_CERTS"], "/.ateam/ca.pem");
    for k in spec.env.keys() {
        assert!(
            crate::core::env::reserved_env(k, true).is_some(),
            "ateam sets `{k}` but Member.env may name it"
        );
    }
    // The proxy's own name is never one that clients keep from the proxy.
    assert!(!spec.env["NO_PROXY"].contains("ateam.internal"));
    assert_eq!(crate::core::env::reserved_env("HTTP_PROXY", false), None);
    assert_eq!(crate::core::env::reserved_env("MY_VAR", true), None);
}

/// What the planner is told of a helper no longer wanted.
fn dropped(member: &str) -> Dropped {
    Dropped {
        team: "t".into(),
        member: member.into(),
        why: "its requester `a` is no longer wanted".into(),
    }
}

#[test]
fn a_dropped_helper_is_removed_saying_why_and_nothing_else_is_planned_for_it() {
    let mut old = team(vec![member("a"), member("h")]);
    old.teams[0].helper_requests = true;
    let old = desired_state(&old, &host());
    let mut o = in_sync(&old, &["a", "h"]);
    for m in &old.members {
        o.live_sockets.insert(m.helpers.clone().unwrap());
        o.helper_servers.insert((m.team.clone(), m.member.clone()));
    }
    let mut now = team(vec![member("a")]);
    now.teams[0].helper_requests = true;
    let d = desired_state(&now, &host());
    let why = "a helper no longer wanted: its requester `a` is no longer wanted";
    for prune in [false, true] {
        let opts = PlanOptions {
            prune,
            dropped: vec![dropped("h")],
            ..PlanOptions::default()
        };
        let p = plan(&d, &o, opts);
        // Its helper server stops, and its container goes with or without --prune: after
        // everything else, or where --prune removes orphans.
        let (expected, at) = if prune {
            (["remove-orphan h", "stop-helpers h"], 0)
        } else {
            (["stop-helpers h", "remove-orphan h"], 1)
        };
        assert_eq!(kinds(&p), expected, "prune {prune}");
        assert!(
            matches!(
                p.actions[at].container_op(),
                Some(ContainerOp::Remove { removal: Removal::Orphan { why: Some(w) }, .. }) if w == why
            ),
            "{p:?}"
        );
        // No orphan to report, so no team left without a main session either.
        assert!(
            matches!(&p.findings[..], [Finding::RetainedTranscript { member, .. }] if member == "h"),
            "{p:?}"
        );
        assert!(p.refusals.is_empty(), "{p:?}");
    }
    // Not dropped: an orphan as any other (and, running, a team without a main session).
    let p = plan(&d, &o, PlanOptions::default());
    assert_eq!(kinds(&p), ["stop-helpers h"]);
    assert!(matches!(&p.findings[0], Finding::Orphan { member, .. } if member == "h"));
}

#[test]
fn a_restart_the_crash_loop_holds_back_is_deferred_until_its_time() {
    use ContainerState::*;
    let until = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
    let held = PlanOptions {
        deferred: BTreeMap::from([(("t".to_string(), "a".to_string()), until)]),
        ..PlanOptions::default()
    };
    let deferred = vec![Deferred {
        team: "t".into(),
        member: "a".into(),
        until,
    }];
    // (case, state of `a`, actions expected, deferrals expected)
    let cases: [(&str, ContainerState, &[&str], Vec<Deferred>); 4] = [
        ("exited 1", Exited { code: 1 }, &[], deferred.clone()),
        // No restart due: the hold says nothing.
        ("running", Running, &[], vec![]),
        ("finished", Exited { code: 0 }, &[], vec![]),
        // Only restarts are paced.
        ("never started", Created, &["start a"], vec![]),
    ];
    for (case, state, actions, expected) in cases {
        let d = want(vec![member("a"), member("b")]);
        let mut o = in_sync(&d, &["a", "b"]);
        o.containers[0].state = state;
        o.containers[1].state = Exited { code: 1 };
        let p = plan(&d, &o, held.clone());
        // `b`, not held, restarts at once.
        let mut want_actions: Vec<&str> = actions.to_vec();
        want_actions.push("start b");
        assert_eq!(kinds(&p), want_actions, "{case}");
        assert_eq!(p.deferred, expected, "{case}");
    }
    // Deferred alone is no change to make: apply has nothing to do, nor is it drift.
    let d = want(vec![member("a")]);
    let mut o = in_sync(&d, &["a"]);
    o.containers[0].state = Exited { code: 1 };
    let p = plan(&d, &o, held);
    assert!(p.is_noop() && !p.drifted(), "{p:?}");
    assert_eq!(p.deferred, deferred);
}

#[test]
fn a_team_left_without_a_main_session_while_old_members_run_is_refused() {
    let old = want(vec![member("a"), member("gone")]);
    let refused = vec![Refusal::NoMainSession {
        team: "t".into(),
        members: vec!["gone".into()],
    }];
    let d = want(vec![member("a")]);
    // (case, observed, options, refusals expected)
    let running = in_sync(&old, &["a", "gone"]);
    let mut exited = running.clone();
    exited.containers[1].state = ContainerState::Exited { code: 0 };
    let prune = PlanOptions::pruning(true);
    let cases = [
        (
            "an old member runs",
            &running,
            PlanOptions::default(),
            refused,
        ),
        ("it has exited", &exited, PlanOptions::default(), vec![]),
        ("--prune removes it", &running, prune, vec![]),
    ];
    for (case, o, opts, expected) in cases {
        let p = plan(&d, o, opts);
        assert_eq!(p.refusals, expected, "{case}: {p:?}");
    }
    // A team with a main session has someone to report to.
    let mut led = team(vec![member("a")]);
    led.teams[0].sessions.push(session("lead"));
    let led = desired_state(&led, &host());
    let mut o = running.clone();
    o.live_sockets.insert(led.sessions[0].socket.clone());
    assert!(plan(&led, &o, PlanOptions::default()).refusals.is_empty());
}

#[test]
fn only_one_member_plans_that_member_alone_and_never_a_session() {
    let mut t = team(vec![member("a"), member("b")]);
    t.teams[0].sessions.push(session("lead"));
    let d = desired_state(&t, &host());
    let opts = PlanOptions {
        only: Some("b".into()),
        ..PlanOptions::default()
    };
    assert_eq!(
        kinds(&plan(&d, &Observed::default(), opts)),
        ["mkdir b", "create b"]
    );
    assert_eq!(
        kinds(&plan(&d, &Observed::default(), PlanOptions::default())),
        ["session lead", "mkdir a", "create a", "mkdir b", "create b"]
    );
}

#[test]
fn one_members_desired_state_is_that_member_of_the_whole() {
    let t = team(vec![member("a"), member("b"), member("c")]);
    let whole = desired_state(&t, &host());
    let one = super::spec::desired_state_of(&t, &host(), Some("b"));
    assert_eq!(one.members.len(), 1);
    assert_eq!(one.members[0].member, "b");
    assert_eq!(one.members[0].hash, whole.members[1].hash);
    assert_eq!(one.members[0].spec, whole.members[1].spec);
    assert_eq!(
        (one.store, one.teams),
        (whole.store.clone(), whole.teams.clone())
    );
    assert!(
        super::spec::desired_state_of(&t, &host(), Some("z"))
            .members
            .is_empty()
    );
}
