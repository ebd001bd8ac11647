//! One look at the fake engine (`backend::fake`) on the runtime's rig: which containers are
//! listed and inspected, and the `Observed` the planner gets from them.

use super::*;
use crate::backend::fake::{Call, Fault};
use crate::runtime::rig::{Rig, ours};

fn of_member(rig: &Rig, id: &str, member: &str, state: ContainerState) -> Inspected {
    let mut c = rig.existing(id, state, None);
    c.summary
        .labels
        .insert(labels::MEMBER.into(), member.into());
    c
}

/// The fake's calls, the time a replay of recent events was asked from left out.
fn calls(rig: &Rig) -> Vec<Call> {
    rig.fake
        .calls()
        .into_iter()
        .map(|c| match c {
            Call::RecentEvents { .. } => Call::RecentEvents { since_nano: 0 },
            c => c,
        })
        .collect()
}

fn seen(o: &Observed) -> Vec<(&str, ContainerState, bool, bool)> {
    o.containers
        .iter()
        .map(|c| (c.id.as_str(), c.state, c.released, c.effective.is_some()))
        .collect()
}

/// Ours in scope are inspected, their states kept, and a running member counts as released
/// only when its gate names that very start; another team's are not inspected.
#[tokio::test]
async fn a_look_inspects_ours_in_scope_and_says_which_start_was_released() {
    let rig = Rig::new();
    let me = std::process::id();
    let mut released = of_member(&rig, "a00000000001", "m", ContainerState::Running);
    released.pid = Some(me);
    let mut duplicate = released.clone();
    duplicate.summary.id = "a00000000002".into();
    rig.fake.add(released);
    rig.fake.add(duplicate);
    rig.fake.add(of_member(
        &rig,
        "b00000000001",
        "gone",
        ContainerState::Exited { code: 3 },
    ));
    let mut other_team = of_member(&rig, "c00000000001", "m", ContainerState::Paused);
    other_team
        .summary
        .labels
        .insert(labels::TEAM.into(), "other".into());
    rig.fake.add(other_team);
    for id in ["a00000000001", "a00000000002"] {
        Record::update(&rig.member.record, id, true, rig.rt.owner).unwrap();
    }
    let token = crate::runtime::procfs::start_token(me).unwrap();
    std::fs::create_dir_all(&rig.member.ctl_dir).unwrap();
    std::fs::write(
        rig.member.ctl_dir.join("go"),
        format!("a00000000001 {token}"),
    )
    .unwrap();

    let o = observe(rig.fake.as_ref(), &rig.rt.info, &rig.desired)
        .await
        .unwrap();
    assert_eq!(
        seen(&o),
        vec![
            ("a00000000001", ContainerState::Running, true, true),
            ("a00000000002", ContainerState::Running, false, true),
            (
                "b00000000001",
                ContainerState::Exited { code: 3 },
                false,
                true
            ),
        ]
    );
    let mut calls = calls(&rig);
    assert_eq!(
        calls.remove(0),
        Call::List {
            labels: ours(&rig.rt.store)
        }
    );
    // No kept inspect: the last minute's events are asked for the anchor of these inspects.
    assert_eq!(calls.remove(0), Call::RecentEvents { since_nano: 0 });
    calls.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(
        calls,
        ["a00000000001", "a00000000002", "b00000000001"].map(|id| Call::Inspect { id: id.into() })
    );
    assert_eq!(o.recorded.len(), 2);
    assert!(o.limits_unenforced);
}

/// A wanted member with no recorded container of its own: everything is listed once more, and
/// a container of anyone else holding its name is seen (not inspected); one removed between
/// list and inspect is simply not there.
#[tokio::test]
async fn a_member_without_its_container_sees_a_stranger_holding_its_name() {
    let rig = Rig::new();
    rig.fake.add(of_member(
        &rig,
        "e00000000001",
        "m",
        ContainerState::Created,
    ));
    rig.fake.fail(
        Fault::when(|c| {
            *c == Call::Inspect {
                id: "e00000000001".into(),
            }
        })
        .with(|| BackendError::NotFound {
            id: "e00000000001".into(),
        }),
    );
    let mut stranger = rig.existing("f00000000001", ContainerState::Running, None);
    stranger.summary.labels.clear();
    rig.fake.add(stranger);
    let mut unrelated = rig.existing("f00000000002", ContainerState::Running, None);
    unrelated.summary.labels.clear();
    unrelated.summary.name = "someone-else".into();
    rig.fake.add(unrelated);

    let o = observe(rig.fake.as_ref(), &rig.rt.info, &rig.desired)
        .await
        .unwrap();
    assert_eq!(
        seen(&o),
        vec![("f00000000001", ContainerState::Running, false, false)]
    );
    assert_eq!(
        calls(&rig),
        vec![
            Call::List {
                labels: ours(&rig.rt.store)
            },
            Call::List {
                labels: BTreeMap::new()
            },
            Call::RecentEvents { since_nano: 0 },
            Call::Inspect {
                id: "e00000000001".into()
            },
        ]
    );
}

/// An engine that fails a look fails the whole look: the planner never plans from half a
/// machine.
#[tokio::test]
async fn a_failed_inspect_fails_the_look() {
    let rig = Rig::new();
    rig.fake.add(of_member(
        &rig,
        "a00000000001",
        "m",
        ContainerState::Running,
    ));
    rig.fake.fail(Fault::nth("inspect", 1));
    let e = observe(rig.fake.as_ref(), &rig.rt.info, &rig.desired)
        .await
        .unwrap_err();
    assert!(
        matches!(e, BackendError::Engine { ref op, .. } if op == "inspect"),
        "{e}"
    );
}

/// A process that has exited and been reaped: its pid names nothing (until reused).
fn gone_pid() -> u32 {
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

/// Member `m`'s recorded container `a00000000001`, running to the engine, whose first
/// process is gone.
fn add_running_with_a_gone_pid(rig: &Rig) {
    let mut c = of_member(rig, "a00000000001", "m", ContainerState::Running);
    c.pid = Some(gone_pid());
    rig.fake.add(c);
    Record::update(&rig.member.record, "a00000000001", true, rig.rt.owner).unwrap();
}

/// The engine calls a member running a moment after its first process died: it is asked
/// again until it tells the exit, which the plan then restarts as an exit (recorded, paced
/// by the crash-loop policy), not as a gate to open.
#[tokio::test]
async fn a_start_whose_process_died_is_asked_again_until_its_exit_shows() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let rig = Rig::new();
    add_running_with_a_gone_pid(&rig);
    let asked = std::sync::Arc::new(AtomicUsize::new(0));
    let n = asked.clone();
    rig.fake.doctor(move |i| {
        if n.fetch_add(1, Ordering::SeqCst) >= 2 {
            i.summary.state = ContainerState::Exited { code: 137 };
            i.pid = None;
        }
    });

    let o = observe(rig.fake.as_ref(), &rig.rt.info, &rig.desired)
        .await
        .unwrap();
    assert_eq!(
        seen(&o),
        vec![(
            "a00000000001",
            ContainerState::Exited { code: 137 },
            false,
            true
        )]
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        3,
        "asked until the exit showed"
    );
}

/// An engine that keeps calling it running is believed after a second: a look never waits
/// longer than that on a dead pid.
#[tokio::test(start_paused = true)]
async fn a_start_the_engine_keeps_calling_running_is_taken_as_it_stands() {
    let rig = Rig::new();
    add_running_with_a_gone_pid(&rig);

    let started = tokio::time::Instant::now();
    let o = observe(rig.fake.as_ref(), &rig.rt.info, &rig.desired)
        .await
        .unwrap();
    assert_eq!(
        seen(&o),
        vec![("a00000000001", ContainerState::Running, false, true)]
    );
    let inspects = rig
        .fake
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::Inspect { .. }))
        .count();
    assert_eq!(inspects, 101);
    assert!(started.elapsed() <= std::time::Duration::from_millis(1100));
}

/// A container of member `member` of team `t` as ateam made it for `desired` (as for
/// `m` when `desired` does not want that member), in `state`.
fn labelled(
    rig: &Rig,
    desired: &DesiredState,
    (id, member): (&str, &str),
    state: ContainerState,
    pid: Option<u32>,
) -> Inspected {
    let mut c = of_member(rig, id, member, state);
    let m = desired.members.iter().find(|m| m.member == member);
    let m = m.unwrap_or(&desired.members[0]);
    c.summary.labels = m.container_labels(&rig.rt.store);
    c.summary
        .labels
        .insert(labels::MEMBER.into(), member.into());
    c.summary.name = format!("ateam_t_{member}");
    c.pid = pid;
    c
}

/// A look narrowed to one member (`only`) plans for it what the team's whole look plans for
/// it, in every case the planner tells apart: a member that exited, one running, one with no
/// container whose name a stranger holds, one no manifest wants any more. A look-alike with
/// its labels in no record, under another name, is left to the team's look. The narrowed look
/// lists nothing of the team: it inspects the member's recorded ids and its container's name.
#[tokio::test]
async fn a_look_at_one_member_plans_for_it_what_the_teams_look_plans() {
    let rig = Rig::new();
    let me = std::process::id();
    let full = rig.desired_of(&["m", "n", "p"]);
    let run_dir = full.teams[0].run_dir.clone();
    let record = |member: &str, id: &str| {
        let path = layout::member_record_path(&run_dir, member);
        Record::update(&path, id, true, rig.rt.owner).unwrap();
    };
    let specs: BTreeMap<String, _> = full
        .members
        .iter()
        .map(|m| (m.member.clone(), crate::policy::compliant(&m.spec)))
        .collect();
    rig.fake.doctor(move |i| {
        if let Some(e) = i
            .summary
            .labels
            .get(labels::MEMBER)
            .and_then(|m| specs.get(m))
        {
            i.effective = e.clone();
        }
    });
    let exited = ContainerState::Exited { code: 137 };
    rig.fake
        .add(labelled(&rig, &full, ("a1", "m"), exited, None));
    record("m", "a1");
    let created = ContainerState::Created;
    let mut lookalike = labelled(&rig, &full, ("a2", "m"), created, None);
    lookalike.summary.name = "ateam_t_m_lookalike".into();
    rig.fake.add(lookalike);
    let running = ContainerState::Running;
    rig.fake
        .add(labelled(&rig, &full, ("b1", "n"), running, Some(me)));
    record("n", "b1");
    rig.fake
        .add(labelled(&rig, &full, ("c1", "gone"), running, Some(me)));
    record("gone", "c1");
    let mut holder = labelled(&rig, &full, ("d1", "p"), running, None);
    holder.summary.labels.clear();
    holder.summary.name = full.members[2].spec.name.clone();
    rig.fake.add(holder);
    for dir in ["m", "gone"] {
        std::fs::create_dir_all(full.teams[0].session_dir.join("members").join(dir)).unwrap();
    }

    let whole = observe(rig.fake.as_ref(), &rig.rt.info, &full)
        .await
        .unwrap();
    for only in ["m", "n", "p", "gone"] {
        let opts = || crate::plan::PlanOptions {
            only: Some(only.to_string()),
            ..Default::default()
        };
        let want = crate::plan::plan(&full, &whole, opts());
        let mut narrow = full.clone();
        narrow.members.retain(|m| m.member == only);
        let before = rig.fake.calls().len();
        let seen = observe_listed(rig.fake.as_ref(), &rig.rt.info, &narrow, None, Some(only))
            .await
            .unwrap();
        let got = crate::plan::plan(&narrow, &seen, opts());
        // The look-alike under another name in no record is the team's look's to see.
        let lookalike = |d: &String| d.contains("\"a2\"");
        let (mut actions, mut findings) = (debugs(&want.actions), debugs(&want.findings));
        if only == "m" {
            assert!(
                actions.iter().chain(&findings).any(lookalike),
                "{actions:?} {findings:?}"
            );
        }
        actions.retain(|d| !lookalike(d));
        findings.retain(|d| !lookalike(d));
        assert_eq!(debugs(&got.actions), actions, "{only}");
        assert_eq!(debugs(&got.findings), findings, "{only}");
        if only == "m" {
            let restart = want.actions.iter().find(|a| {
                matches!(
                    a.container_op(),
                    Some(crate::plan::ContainerOp::Start { .. })
                )
            });
            assert!(restart.is_some(), "m is restarted: {:?}", want.actions);
        }
        assert!(
            !want.actions.is_empty() || !want.findings.is_empty(),
            "{only}"
        );

        // Asked by its record's ids and its container's name: no list of the team.
        let calls = rig.fake.calls().split_off(before);
        let record = Record::load(&layout::member_record_path(&run_dir, only));
        let name = format!("ateam_t_{only}");
        for c in &calls {
            match c {
                Call::Inspect { id } => assert!(
                    record.ids.contains(id) || *id == name,
                    "{only}: inspected {id}"
                ),
                Call::List { labels } => {
                    assert!(labels.is_empty(), "{only}: everything, for a name holder")
                }
                other => panic!("{only}: {other:?}"),
            }
        }
        assert!(
            calls.iter().any(|c| matches!(c, Call::Inspect { .. })),
            "{only}: {calls:?}"
        );
    }
}

fn debugs<T: std::fmt::Debug>(items: &[T]) -> Vec<String> {
    items.iter().map(|i| format!("{i:?}")).collect()
}

/// A team that keeps no inspect asks the engine's recent events only when the list finds a
/// container of it to inspect, and then only the last minute's (the anchor of its
/// inspects), never a replay of all the engine holds: Docker's was 10-40 ms of a first apply.
#[tokio::test]
async fn a_team_without_kept_inspects_asks_events_only_for_what_it_inspects() {
    let rig = Rig::new();
    let asked = |rig: &Rig| -> Vec<i64> {
        rig.fake
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::RecentEvents { since_nano } => Some(since_nano),
                _ => None,
            })
            .collect()
    };
    observe(rig.fake.as_ref(), &rig.rt.info, &rig.desired)
        .await
        .unwrap();
    assert_eq!(
        asked(&rig),
        Vec::<i64>::new(),
        "nothing listed: nothing asked"
    );

    let mut c = of_member(&rig, "a00000000001", "m", ContainerState::Running);
    c.pid = Some(std::process::id());
    rig.fake.add(c);
    let before = now_nano();
    observe(rig.fake.as_ref(), &rig.rt.info, &rig.desired)
        .await
        .unwrap();
    let since = asked(&rig);
    assert_eq!(since.len(), 1, "{since:?}");
    let minute = 60_000_000_000;
    assert!(
        since[0] >= before - minute - 1_000_000_000 && since[0] <= before,
        "{since:?}"
    );
}
