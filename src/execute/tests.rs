use std::collections::BTreeSet;

use super::events::{About, event_of};
use super::*;
use crate::core::container::{ExitReason, replacement_name};
use crate::core::intercept::EgressPolicy;
use crate::model::RestartPolicy;
use crate::plan::{ContainerOp, ContainerRef, Drift, HostOp, Removal, StartReason, TeamOp};
use crate::runtime::RunError;
use crate::store::Record;

fn c() -> ContainerRef {
    ContainerRef {
        id: "0123abcd".into(),
        name: "ateam-t-m".into(),
    }
}

/// A start of member m's container `c()`.
fn start(reason: StartReason) -> Action {
    Action::new(
        "t",
        "m",
        ContainerOp::Start {
            container: c(),
            reason,
        },
    )
}

#[test]
fn events_say_what_was_done_and_why_and_a_gate_refusal_is_held() {
    use crate::events::EventKind;
    let restart = start(StartReason::Restart {
        code: 137,
        policy: RestartPolicy::Always,
    });
    let e = event_of(&restart, None, None).unwrap();
    assert_eq!((e.kind, e.member.as_str()), (EventKind::Restarted, "m"));
    assert!(e.reason.contains("after exit 137"), "{}", e.reason);
    assert_eq!(e.container.as_deref(), Some("0123abcd"));
    let held = ActionError::Run(RunError::PolicyViolation {
        member: "m".into(),
        id: "0123abcd".into(),
        stage: "after start",
        violations: vec![],
    });
    assert_eq!(
        event_of(&restart, None, Some(&held)).unwrap().kind,
        EventKind::Held
    );
    let rolled = ActionError::Run(RunError::Rollback {
        cause: Box::new(RunError::Process {
            member: "m".into(),
            id: "0123abcd".into(),
            what: "uid 0".into(),
        }),
        id: "0123abcd".into(),
        rollback: BackendError::NotFound {
            id: "0123abcd".into(),
        },
    });
    assert_eq!(
        event_of(&restart, None, Some(&rolled)).unwrap().kind,
        EventKind::Held
    );
    let other = ActionError::Run(RunError::MissingSecret {
        member: "m".into(),
        name: "KEY".into(),
    });
    let e = event_of(&restart, None, Some(&other)).unwrap();
    assert_eq!(e.kind, EventKind::Failed);
    assert!(e.reason.contains("secretEnv `KEY`"), "{}", e.reason);
    let stop = Action::new("t", "m", ServerOp::StopEgress);
    assert_eq!(event_of(&stop, None, None), None);
    assert_eq!(
        event_of(&stop, None, Some(&other)).unwrap().kind,
        EventKind::Failed
    );
}

/// A replacement released, then unable to remove its old container: its start is an
/// event naming it (the soak found a start with none), and the failure follows.
#[test]
fn a_replacement_released_then_failed_says_its_start() {
    use crate::events::EventKind;
    let d = crate::plan::tests::want(vec![crate::plan::tests::member("m")]);
    let member = Box::new(d.members[0].clone());
    let recreate = Action::of(
        &member,
        ContainerOp::Recreate {
            old: c(),
            reason: Drift::Dead,
            member: member.clone(),
        },
    );
    let gone = ActionError::Backend {
        member: "m".into(),
        source: BackendError::NotFound {
            id: "0123abcd".into(),
        },
    };
    let said = |released, failed| {
        events_of(&recreate, released, failed)
            .into_iter()
            .map(|e| (e.kind, e.container))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        said(Some("feed0001"), Some(&gone)),
        vec![
            (EventKind::Created, Some("feed0001".to_string())),
            (EventKind::Failed, Some("0123abcd".to_string())),
        ]
    );
    let e = &events_of(&recreate, Some("feed0001"), Some(&gone))[0];
    assert!(e.reason.contains("to replace 0123abcd"), "{}", e.reason);
    assert_eq!(
        said(None, Some(&gone)),
        vec![(EventKind::Failed, Some("0123abcd".to_string()))]
    );
    assert_eq!(
        said(Some("feed0001"), None),
        vec![(EventKind::Replaced, Some("feed0001".to_string()))]
    );
    // A restart released, then unable to count itself: the restart is said too.
    let restart = start(StartReason::NotReleased);
    let kinds: Vec<_> = events_of(&restart, Some("0123abcd"), Some(&gone))
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, vec![EventKind::Released, EventKind::Failed]);
}

#[test]
fn an_action_is_logged_with_its_container_and_reason() {
    let start = start(StartReason::Restart {
        code: 3,
        policy: RestartPolicy::OnFailure,
    });
    assert_eq!(
        about(&start),
        About {
            action: "start",
            container: Some("0123abcd"),
            reason: "restart",
            detail: Some("exited 3, restart policy OnFailure".into()),
        }
    );
    let path = "/s/members/m".into();
    let dir = Action::new("t", "m", HostOp::MakeTranscriptDir { path });
    assert_eq!(
        about(&dir),
        About {
            action: "makeTranscriptDir",
            container: None,
            reason: "missing",
            detail: None,
        }
    );
}

/// The names in the log are the plan's own (`diff -o json`, by `Action::name`), and each one,
/// with its reason, is in the documentation of `diff -o json` (docs/output.md).
#[test]
fn every_action_is_named_once_and_documented() {
    let doc = include_str!("../../docs/output.md");
    let (path, policy) = (std::path::PathBuf::from("/x"), EgressPolicy::default());
    let d = crate::plan::tests::want(vec![crate::plan::tests::member("m")]);
    let member = Box::new(d.members[0].clone());
    let session = Box::new(crate::plan::spec::DesiredSession {
        team: "t".into(),
        name: "m".into(),
        socket: path.clone(),
        cwd: path.clone(),
        command: vec![],
        env: Default::default(),
        transcript_dir: path.clone(),
        dir: path.clone(),
        promoted_from: None,
        takes_over: None,
    });
    let journal = Box::new(crate::core::session::Promotion {
        team: "t".into(),
        name: "m".into(),
        step: crate::core::session::PromotionStep::Moved,
        containers: vec![],
        from: "/s/members/m".into(),
        to: "/s/m".into(),
        had_transcript: true,
        begun_at: "2026-11-30T00:00:00Z".into(),
    });
    let ops: Vec<Op> = vec![
        HostOp::MakeTranscriptDir { path: path.clone() }.into(),
        HostOp::ReturnTasks { why: "gone".into() }.into(),
        ServerOp::StartEgress {
            socket: path.clone(),
            policy: policy.clone(),
        }
        .into(),
        ServerOp::UpdateEgress { policy }.into(),
        ServerOp::StopEgress.into(),
        ServerOp::StartHelper.into(),
        ServerOp::StopHelper.into(),
        SessionOp::Start {
            session: session.clone(),
            resume: vec![],
        }
        .into(),
        SessionOp::Stop {
            socket: path.clone(),
            taken_over_by: None,
        }
        .into(),
        SessionOp::Stop {
            socket: path,
            taken_over_by: Some("heir".into()),
        }
        .into(),
        SessionOp::Promote {
            session,
            containers: vec![],
            journal: None,
            resume: vec![],
        }
        .into(),
        SessionOp::RollBack { journal }.into(),
        ContainerOp::Create {
            member: member.clone(),
        }
        .into(),
        ContainerOp::Recreate {
            member,
            old: c(),
            reason: Drift::Dead,
        }
        .into(),
        ContainerOp::Start {
            container: c(),
            reason: StartReason::NeverStarted,
        }
        .into(),
        ContainerOp::Remove {
            container: c(),
            removal: Removal::Orphan { why: None },
        }
        .into(),
        ContainerOp::Remove {
            container: c(),
            removal: Removal::Duplicate,
        }
        .into(),
        ContainerOp::Remove {
            container: c(),
            removal: Removal::Stranger,
        }
        .into(),
        ContainerOp::Remove {
            container: c(),
            removal: Removal::Suspended,
        }
        .into(),
        ContainerOp::FinishReplacement {
            container: c(),
            name: "n".into(),
        }
        .into(),
        ContainerOp::RestoreName {
            container: c(),
            name: "n".into(),
        }
        .into(),
        ContainerOp::Unpause { container: c() }.into(),
        ContainerOp::Stop { container: c() }.into(),
        TeamOp::RemoveNetwork { name: "n".into() }.into(),
        TeamOp::StopSessions { sockets: vec![] }.into(),
        TeamOp::Purge { paths: vec![] }.into(),
        TeamOp::StopHelperServers.into(),
        TeamOp::ClearRunDir {
            path: "/x".into(),
            all: false,
        }
        .into(),
    ];
    let mut names = BTreeSet::new();
    for op in ops {
        let a = Action::new("t", "m", op);
        let said = about(&a);
        assert_eq!(said.action, a.name());
        names.insert(a.name());
        for token in [a.name(), a.reason()] {
            assert!(
                doc.contains(&format!("`{token}`")),
                "docs/output.md lacks `{token}`"
            );
        }
    }
    assert_eq!(
        names.len(),
        27,
        "every action has a name of its own: {names:?}"
    );
    for d in [
        Drift::Spec { changes: vec![] },
        Drift::SpecHash {
            from: "a".into(),
            to: "b".into(),
        },
        Drift::Policy { violations: vec![] },
        Drift::Dead,
    ] {
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["kind"], d.kind(), "{json}");
    }
    for r in [
        StartReason::NeverStarted,
        StartReason::NotReleased,
        StartReason::Restart {
            code: 1,
            policy: RestartPolicy::Always,
        },
    ] {
        // Externally tagged: a name, or an object with one key.
        let json = serde_json::to_value(r).unwrap();
        let name = json
            .as_str()
            .map(str::to_string)
            .or_else(|| json.as_object()?.keys().next().cloned())
            .unwrap();
        assert_eq!(name, r.name(), "{json}");
    }
}

/// The executor against the fake engine (`backend::fake`) on the runtime's rig: the engine
/// calls of a replacement and a create, stopped at each step, and the events they leave.
mod with_fake {
    use super::*;
    use crate::backend::fake::{Call, Fault};
    use crate::core::container::ContainerState;
    use crate::events::EventKind;
    use crate::runtime::rig::{Init, Rig, TEAM};

    /// The old container a replacement replaces; the new one is the fake's first.
    const OLD: &str = "01d000000001";
    const NEW: &str = "fake00000001";

    fn no_secret(_: &str) -> Option<String> {
        None
    }

    async fn run(rig: &Rig, plan: &Plan) -> Vec<Failure> {
        let ex = Executor {
            rt: &rig.rt,
            concurrency: 1,
            secret: &no_secret,
            progress: &Quiet,
        };
        ex.run(plan, &rig.desired.members).await
    }

    fn plan(action: Action) -> Plan {
        Plan {
            actions: vec![action],
            ..Plan::default()
        }
    }

    /// The member's old container, running, and a plan that replaces it.
    fn replacing(rig: &Rig) -> Plan {
        rig.fake
            .add(rig.existing(OLD, ContainerState::Running, None));
        let old = ContainerRef {
            id: OLD.into(),
            name: rig.member.spec.name.clone(),
        };
        plan(Action::of(
            &rig.member,
            ContainerOp::Recreate {
                member: Box::new(rig.member.clone()),
                old,
                reason: Drift::Dead,
            },
        ))
    }

    fn events(rig: &Rig) -> Vec<(EventKind, Option<String>)> {
        crate::events::read(&rig.rt.state_dir, TEAM)
            .into_iter()
            .map(|e| (e.kind, e.container))
            .collect()
    }

    fn temp(rig: &Rig) -> String {
        replacement_name(&rig.member.spec.name)
    }

    /// The calls of a replacement up to and with the check after start.
    fn launched(rig: &Rig) -> Vec<Call> {
        vec![
            Call::FindByName { name: temp(rig) },
            Call::Create { name: temp(rig) },
            Call::Inspect { id: NEW.into() },
            Call::Start { id: NEW.into() },
            Call::Inspect { id: NEW.into() },
        ]
    }

    fn names(rig: &Rig) -> Vec<(String, String)> {
        rig.fake
            .containers()
            .into_values()
            .map(|c| (c.summary.id, c.summary.name))
            .collect()
    }

    fn failed_start_recorded(rig: &Rig) -> bool {
        Record::load(&rig.member.record)
            .last_exit
            .is_some_and(|l| l.reason == ExitReason::StartFailed)
    }

    #[tokio::test]
    async fn a_replacement_releases_the_new_then_removes_the_old_and_takes_its_name() {
        let rig = Rig::new();
        let init = Init::spawn();
        rig.fake.set_pid(Some(init.pid()));
        let plan = replacing(&rig);
        let failures = run(&rig, &plan).await;
        assert!(failures.is_empty(), "{failures:?}");
        let mut want = launched(&rig);
        want.extend([
            Call::Remove { id: OLD.into() },
            Call::Rename {
                id: NEW.into(),
                name: rig.member.spec.name.clone(),
            },
        ]);
        assert_eq!(rig.fake.calls(), want);
        assert_eq!(
            names(&rig),
            vec![(NEW.into(), rig.member.spec.name.clone())]
        );
        assert!(rig.released().unwrap().starts_with(NEW));
        assert_eq!(events(&rig), vec![(EventKind::Replaced, Some(NEW.into()))]);
    }

    #[tokio::test]
    async fn a_replacement_whose_create_fails_leaves_the_old_alone() {
        let rig = Rig::new();
        rig.fake.fail(Fault::nth("create", 1));
        let plan = replacing(&rig);
        let failures = run(&rig, &plan).await;
        assert!(
            matches!(
                failures[..],
                [Failure {
                    error: ActionError::Run(RunError::Backend { .. }),
                    ..
                }]
            ),
            "{failures:?}"
        );
        assert_eq!(rig.fake.calls(), launched(&rig)[..2]);
        assert_eq!(
            names(&rig),
            vec![(OLD.into(), rig.member.spec.name.clone())]
        );
        assert_eq!(events(&rig), vec![(EventKind::Failed, Some(OLD.into()))]);
        assert!(failed_start_recorded(&rig));
    }

    #[tokio::test]
    async fn a_replacement_whose_start_fails_removes_the_new_one() {
        let rig = Rig::new();
        rig.fake.fail(Fault::nth("start", 1));
        let plan = replacing(&rig);
        let failures = run(&rig, &plan).await;
        assert_eq!(failures.len(), 1);
        let mut want = launched(&rig)[..4].to_vec();
        want.push(Call::Remove { id: NEW.into() });
        assert_eq!(rig.fake.calls(), want);
        assert_eq!(
            names(&rig),
            vec![(OLD.into(), rig.member.spec.name.clone())]
        );
        assert_eq!(rig.released(), None);
        assert_eq!(events(&rig), vec![(EventKind::Failed, Some(OLD.into()))]);
    }

    /// The gate holds a replacement that differs from the policy once started: it is
    /// removed before its command ran, and the event says held.
    #[tokio::test]
    async fn a_replacement_that_fails_its_check_after_start_is_held_and_removed() {
        let rig = Rig::new();
        let init = Init::spawn();
        rig.fake.set_pid(Some(init.pid()));
        rig.fake.doctor(|i| {
            if i.summary.id == NEW && i.summary.state == ContainerState::Running {
                i.effective.privileged = true;
            }
        });
        let plan = replacing(&rig);
        let failures = run(&rig, &plan).await;
        assert!(
            matches!(
                failures[..],
                [Failure {
                    error: ActionError::Run(RunError::PolicyViolation {
                        stage: "after start",
                        ..
                    }),
                    ..
                }]
            ),
            "{failures:?}"
        );
        let mut want = launched(&rig);
        want.push(Call::Remove { id: NEW.into() });
        assert_eq!(rig.fake.calls(), want);
        assert_eq!(rig.released(), None, "the gate never opened");
        assert_eq!(
            names(&rig),
            vec![(OLD.into(), rig.member.spec.name.clone())]
        );
        assert_eq!(events(&rig), vec![(EventKind::Held, Some(OLD.into()))]);
    }

    /// Released, then unable to remove the old container: both stay, the new one under
    /// its temporary name, and the events say its start before the failure.
    #[tokio::test]
    async fn a_replacement_whose_old_cannot_be_removed_says_the_start_then_the_failure() {
        let rig = Rig::new();
        let init = Init::spawn();
        rig.fake.set_pid(Some(init.pid()));
        rig.fake
            .fail(Fault::when(|c| *c == Call::Remove { id: OLD.into() }));
        let plan = replacing(&rig);
        let failures = run(&rig, &plan).await;
        assert_eq!(failures.len(), 1, "{failures:?}");
        let mut want = launched(&rig);
        want.push(Call::Remove { id: OLD.into() });
        assert_eq!(rig.fake.calls(), want, "no rename");
        assert_eq!(
            names(&rig),
            vec![
                (OLD.into(), rig.member.spec.name.clone()),
                (NEW.into(), temp(&rig)),
            ]
        );
        assert!(rig.released().unwrap().starts_with(NEW));
        assert_eq!(
            events(&rig),
            vec![
                (EventKind::Created, Some(NEW.into())),
                (EventKind::Failed, Some(OLD.into())),
            ]
        );
    }

    /// A leftover replacement of an earlier attempt (ours, holding the temporary name) is
    /// removed before the new one is made.
    #[tokio::test]
    async fn a_replacement_removes_the_leftover_of_an_earlier_attempt_first() {
        let rig = Rig::new();
        let init = Init::spawn();
        rig.fake.set_pid(Some(init.pid()));
        let mut stale = rig.existing("57a1e0000001", ContainerState::Created, None);
        stale.summary.name = temp(&rig);
        rig.fake.add(stale);
        let plan = replacing(&rig);
        assert!(run(&rig, &plan).await.is_empty());
        let calls = rig.fake.calls();
        assert_eq!(
            calls[..3],
            [
                Call::FindByName { name: temp(&rig) },
                Call::Remove {
                    id: "57a1e0000001".into()
                },
                Call::Create { name: temp(&rig) },
            ]
        );
    }

    #[tokio::test]
    async fn a_failed_create_is_an_event_and_the_members_last_exit() {
        let rig = Rig::new();
        rig.fake.fail(Fault::nth("create", 1));
        let plan = plan(Action::create(rig.member.clone()));
        let failures = run(&rig, &plan).await;
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert_eq!(
            rig.fake.calls(),
            vec![Call::Create {
                name: rig.member.spec.name.clone()
            }]
        );
        assert_eq!(events(&rig), vec![(EventKind::Failed, None)]);
        assert!(failed_start_recorded(&rig));
        assert!(rig.fake.containers().is_empty());
    }

    /// A create that finds its name held by an unfinished container of this store removes
    /// it and creates again; one of anyone else is left alone and the create fails.
    #[tokio::test]
    async fn a_create_takes_its_name_back_only_from_an_unfinished_container_of_ours() {
        let rig = Rig::new();
        let init = Init::spawn();
        rig.fake.set_pid(Some(init.pid()));
        let name = rig.member.spec.name.clone();
        rig.fake
            .add(rig.existing("0dd000000001", ContainerState::Created, None));
        let create = plan(Action::create(rig.member.clone()));
        assert!(run(&rig, &create).await.is_empty());
        assert_eq!(
            rig.fake.calls(),
            vec![
                Call::Create { name: name.clone() },
                Call::FindByName { name: name.clone() },
                Call::Remove {
                    id: "0dd000000001".into()
                },
                Call::Create { name: name.clone() },
                Call::Inspect { id: NEW.into() },
                Call::Start { id: NEW.into() },
                Call::Inspect { id: NEW.into() },
            ]
        );
        assert_eq!(events(&rig), vec![(EventKind::Created, Some(NEW.into()))]);

        let rig = Rig::new();
        let mut foreign = rig.existing("f0e000000001", ContainerState::Running, None);
        foreign.summary.labels.clear();
        rig.fake.add(foreign);
        let create = plan(Action::create(rig.member.clone()));
        let failures = run(&rig, &create).await;
        assert!(
            matches!(
                failures[..],
                [Failure {
                    error: ActionError::Run(RunError::Backend {
                        source: BackendError::NameConflict { .. },
                        ..
                    }),
                    ..
                }]
            ),
            "{failures:?}"
        );
        assert_eq!(
            rig.fake.calls(),
            vec![
                Call::Create { name: name.clone() },
                Call::FindByName { name },
            ]
        );
        assert_eq!(rig.fake.containers().len(), 1, "never touched");
    }
}
