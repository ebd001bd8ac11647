use super::store::{Board, MAX_LOG_BYTES};
use super::*;

fn roster() -> Roster {
    Roster {
        members: ["a", "b"].into_iter().map(String::from).collect(),
        mains: ["lead"].into_iter().map(String::from).collect(),
    }
}

fn a() -> Actor {
    Actor::Member("a".into())
}
fn b() -> Actor {
    Actor::Member("b".into())
}
fn lead() -> Actor {
    Actor::Main("lead".into())
}

fn create(t: &mut Tasks, by: &Actor, title: &str, owner: Option<&str>, deps: &[u64]) -> Task {
    t.apply(
        TaskOp::Create {
            title: title.into(),
            body: String::new(),
            owner: owner.map(String::from),
            depends_on: deps.to_vec(),
        },
        by,
        &roster(),
        1,
    )
    .unwrap()
}

fn op(t: &mut Tasks, by: &Actor, op: TaskOp) -> Result<Task, Refused> {
    t.apply(op, by, &roster(), 2)
}

#[test]
fn a_task_goes_from_todo_to_done_and_keeps_its_history() {
    let mut t = Tasks::default();
    let task = create(&mut t, &lead(), "fix the test", None, &[]);
    assert_eq!(task.id, 1);
    op(&mut t, &a(), TaskOp::Claim { id: 1 }).unwrap();
    op(&mut t, &a(), TaskOp::Start { id: 1 }).unwrap();
    let done = op(
        &mut t,
        &a(),
        TaskOp::Complete {
            id: 1,
            note: Some("green".into()),
        },
    )
    .unwrap();
    assert_eq!(done.state, TaskState::Done);
    assert_eq!(done.owner, Some(a()));
    let what: Vec<&str> = done.history.iter().map(|c| c.what.as_str()).collect();
    assert_eq!(what, ["created", "claimed", "started", "completed"]);
    assert_eq!(done.history[3].note.as_deref(), Some("green"));
    assert_eq!(done.history[3].by, a());
}

#[test]
fn a_member_acts_only_for_itself() {
    let mut t = Tasks::default();
    create(&mut t, &lead(), "one", None, &[]);
    op(&mut t, &a(), TaskOp::Start { id: 1 }).unwrap();
    for o in [
        TaskOp::Complete { id: 1, note: None },
        TaskOp::Release { id: 1, note: None },
        TaskOp::Claim { id: 1 },
    ] {
        let r = op(&mut t, &b(), o.clone()).unwrap_err();
        assert!(
            matches!(r, Refused::NotYours(_) | Refused::State { .. }),
            "{o:?}: {r}"
        );
    }
    assert_eq!(t.get(1).unwrap().state, TaskState::InProgress);
    // A member makes tasks for itself or nobody; a lead for anyone.
    let r = t
        .apply(
            TaskOp::Create {
                title: "x".into(),
                body: String::new(),
                owner: Some("b".into()),
                depends_on: vec![],
            },
            &a(),
            &roster(),
            1,
        )
        .unwrap_err();
    assert!(matches!(r, Refused::NotYours(_)), "{r}");
    let for_b = create(&mut t, &lead(), "for b", Some("b"), &[]);
    assert_eq!(for_b.owner, Some(b()));
    let r = op(&mut t, &a(), TaskOp::Claim { id: for_b.id }).unwrap_err();
    assert!(r.to_string().contains("assigned to member b"), "{r}");
    op(&mut t, &b(), TaskOp::Claim { id: for_b.id }).unwrap();
    // A lead completes anyone's.
    op(&mut t, &lead(), TaskOp::Complete { id: 1, note: None }).unwrap();
    // Nobody names a session the team does not have.
    let r = t
        .apply(
            TaskOp::Create {
                title: "x".into(),
                body: String::new(),
                owner: Some("ghost".into()),
                depends_on: vec![],
            },
            &lead(),
            &roster(),
            1,
        )
        .unwrap_err();
    assert!(matches!(r, Refused::NoSession(_)), "{r}");
}

#[test]
fn dependencies_gate_starting_not_claiming() {
    let mut t = Tasks::default();
    create(&mut t, &lead(), "first", None, &[]);
    create(&mut t, &lead(), "second", None, &[1]);
    op(&mut t, &b(), TaskOp::Claim { id: 2 }).unwrap();
    let r = op(&mut t, &b(), TaskOp::Start { id: 2 }).unwrap_err();
    assert!(
        matches!(
            r,
            Refused::Waiting {
                id: 2,
                waits: 1,
                ..
            }
        ),
        "{r}"
    );
    op(&mut t, &a(), TaskOp::Start { id: 1 }).unwrap();
    op(&mut t, &a(), TaskOp::Complete { id: 1, note: None }).unwrap();
    op(&mut t, &b(), TaskOp::Start { id: 2 }).unwrap();
    // No cycles, no unknown tasks.
    let r = op(
        &mut t,
        &lead(),
        TaskOp::Edit {
            id: 1,
            title: None,
            body: None,
            depends_on: Some(vec![2]),
        },
    )
    .unwrap_err();
    assert!(r.to_string().contains("cycle"), "{r}");
    let r = t
        .apply(
            TaskOp::Create {
                title: "x".into(),
                body: String::new(),
                owner: None,
                depends_on: vec![99],
            },
            &a(),
            &roster(),
            1,
        )
        .unwrap_err();
    assert_eq!(r, Refused::NoTask(99));
}

#[test]
fn what_a_session_writes_is_bounded() {
    let mut t = Tasks::default();
    for (title, body) in [
        ("x".repeat(MAX_TITLE + 1), String::new()),
        ("  ".into(), String::new()),
        ("ok".into(), "y".repeat(MAX_BODY + 1)),
        ("nul\0".into(), String::new()),
    ] {
        let r = t
            .apply(
                TaskOp::Create {
                    title,
                    body,
                    owner: None,
                    depends_on: vec![],
                },
                &a(),
                &roster(),
                1,
            )
            .unwrap_err();
        assert!(matches!(r, Refused::Bound(_)), "{r}");
    }
    assert!(t.tasks.is_empty());
}

#[test]
fn a_session_that_leaves_gives_its_work_back() {
    let mut t = Tasks::default();
    create(&mut t, &lead(), "one", None, &[]);
    create(&mut t, &lead(), "two", None, &[]);
    create(&mut t, &lead(), "three", None, &[]);
    op(&mut t, &a(), TaskOp::Start { id: 1 }).unwrap();
    op(&mut t, &a(), TaskOp::Claim { id: 2 }).unwrap();
    op(&mut t, &b(), TaskOp::Claim { id: 3 }).unwrap();
    let ids = t.give_back(&a(), "member a was removed", 9);
    assert_eq!(ids, [1, 2]);
    let one = t.get(1).unwrap();
    assert_eq!((one.state, one.owner.clone()), (TaskState::Todo, None));
    assert_eq!(
        one.history.last().unwrap().note.as_deref(),
        Some("member a was removed")
    );
    assert_eq!(t.get(3).unwrap().owner, Some(b()));
}

#[test]
fn a_promoted_member_or_an_heir_keeps_the_work() {
    let mut t = Tasks::default();
    create(&mut t, &lead(), "one", None, &[]);
    create(&mut t, &lead(), "two", Some("a"), &[]);
    create(&mut t, &lead(), "three", None, &[]);
    op(&mut t, &a(), TaskOp::Start { id: 1 }).unwrap();
    op(&mut t, &a(), TaskOp::Start { id: 3 }).unwrap();
    op(&mut t, &a(), TaskOp::Complete { id: 3, note: None }).unwrap();
    let main_a = Actor::Main("a".into());
    let ids = t.hand_over(&a(), &main_a, "promoted to a main session", 9);
    assert_eq!(ids, [1, 2], "open tasks only");
    assert_eq!(t.get(1).unwrap().state, TaskState::InProgress);
    assert_eq!(t.get(1).unwrap().owner, Some(main_a.clone()));
    assert_eq!(
        t.get(3).unwrap().owner,
        Some(a()),
        "a done task keeps who did it"
    );
    assert_eq!(
        t.get(2).unwrap().history.last().unwrap().what,
        "handed over"
    );
}

#[test]
fn changes_from_many_processes_are_never_lost() {
    let dir = tempfile::tempdir().unwrap();
    let owner = crate::files::Owner {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
    };
    let board = Board::new(dir.path(), "t", owner);
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let board = board.clone();
            std::thread::spawn(move || {
                let who = if i % 2 == 0 { a() } else { b() };
                for j in 0..25 {
                    board
                        .send(&who, vec![], format!("{i}-{j}"), &roster())
                        .unwrap()
                        .unwrap();
                    board
                        .task(
                            TaskOp::Create {
                                title: format!("{i}-{j}"),
                                body: String::new(),
                                owner: None,
                                depends_on: vec![],
                            },
                            &lead(),
                            &roster(),
                        )
                        .unwrap()
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let listed = board.messages().unwrap();
    assert_eq!(listed.messages.len(), 200);
    let mut ids: Vec<u64> = listed.messages.iter().map(|m| m.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 200);
    let tasks = board.tasks().unwrap();
    assert_eq!(tasks.tasks.len(), 200);
    assert_eq!(tasks.next_id, 201);
}

#[test]
fn messages_are_read_marked_and_rotated_with_a_count() {
    let dir = tempfile::tempdir().unwrap();
    let owner = crate::files::Owner {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
    };
    let board = Board::new(dir.path(), "t", owner);
    board
        .send(&lead(), vec!["a".into()], "for a".into(), &roster())
        .unwrap()
        .unwrap();
    board
        .send(&lead(), vec!["b".into()], "for b".into(), &roster())
        .unwrap()
        .unwrap();
    assert_eq!(board.unread(&a()).unwrap().messages, 1);
    assert_eq!(board.unread(&lead()).unwrap().messages, 0);
    let seen = board.history(&a(), None, 10).unwrap();
    assert_eq!(seen.messages.len(), 2, "everyone reads every message");
    assert_eq!(board.unread(&a()).unwrap().messages, 0);
    assert_eq!(board.unread(&b()).unwrap().messages, 1);
    // Unknown recipients and empty bodies are refused.
    let r = board
        .send(&a(), vec!["ghost".into()], "x".into(), &roster())
        .unwrap()
        .unwrap_err();
    assert!(matches!(r, Refused::NoSession(_)));
    // Past the log's bound the oldest go, counted.
    let body = "z".repeat(MAX_MESSAGE);
    let n = (2 * MAX_LOG_BYTES as usize) / MAX_MESSAGE + 10;
    for _ in 0..n {
        board
            .send(&a(), vec![], body.clone(), &roster())
            .unwrap()
            .unwrap();
    }
    let listed = board.messages().unwrap();
    assert!(listed.dropped > 0);
    assert_eq!(listed.dropped as usize + listed.messages.len(), n + 2);
    assert!(
        std::fs::metadata(dir.path().join("teams/t/board/messages.jsonl"))
            .unwrap()
            .len()
            <= MAX_LOG_BYTES
    );
    let found = board.search("FOR A", 10).unwrap();
    assert!(found.messages.is_empty(), "the oldest were dropped");
}
