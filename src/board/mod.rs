//! The team's board: tasks and messages that a team's sessions hand each other (`team_task`,
//! `team_message` over MCP, `ateam tasks` and `ateam messages` for the person).
//!
//! This module is the rules, as pure functions of the board and who acts: who may do what
//! to which task, what a task's state may become, and the bounds on what anyone writes.
//! `store` keeps the board in the state folder and applies every change under one lock, so
//! changes from every session are serialized in one place.
//!
//! Authority: a member acts only as itself (it claims, starts, releases and completes tasks
//! for itself and sends under its own name); a main session and the person may act on any
//! task; nobody acts as another. Whatever a session writes is its data: kept as written
//! (bounded), shown escaped, and delivered marked as coming from that session.

pub mod store;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest task title, in bytes.
pub(crate) const MAX_TITLE: usize = 200;
/// Longest task body or note, in bytes.
pub(crate) const MAX_BODY: usize = 16 * 1024;
/// Longest message, in bytes.
pub(crate) const MAX_MESSAGE: usize = 8 * 1024;
/// Tasks a board holds (done ones included): past it, `create` is refused until the person
/// removes done tasks (`ateam tasks prune`).
pub(crate) const MAX_TASKS: usize = 2000;
/// Changes kept in a task's history (the oldest are dropped).
pub(crate) const MAX_HISTORY: usize = 64;
/// Dependencies one task may name.
pub(crate) const MAX_DEPENDS: usize = 32;
/// Recipients one message may name.
pub(crate) const MAX_RECIPIENTS: usize = 32;

/// Who acts on the board.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Actor {
    /// A member, through its own socket.
    Member(String),
    /// A main session, through `ateam mcp`.
    Main(String),
    /// The person, from the command line.
    Person,
}

impl Actor {
    /// Whether it may act on any task of the team (main sessions and the person).
    pub fn leads(&self) -> bool {
        match self {
            Actor::Member(_) => false,
            Actor::Main(_) | Actor::Person => true,
        }
    }

    /// Its session's name (none for the person).
    pub fn name(&self) -> Option<&str> {
        match self {
            Actor::Member(n) | Actor::Main(n) => Some(n),
            Actor::Person => None,
        }
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Member(n) => write!(f, "member {}", crate::core::untrusted::shown(n)),
            Actor::Main(n) => write!(f, "main session {}", crate::core::untrusted::shown(n)),
            Actor::Person => f.write_str("the person"),
        }
    }
}

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum TaskState {
    /// Nobody works on it (it may be assigned: `owner` is who it is for).
    Todo,
    /// Reserved by its owner, not started.
    Claimed,
    /// Its owner works on it.
    InProgress,
    /// Finished.
    Done,
}

impl TaskState {
    /// Its name, as the tools and the command line say it.
    pub fn name(self) -> &'static str {
        match self {
            TaskState::Todo => "todo",
            TaskState::Claimed => "claimed",
            TaskState::InProgress => "inProgress",
            TaskState::Done => "done",
        }
    }
}

/// One change of a task, for its history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Seconds since the epoch.
    pub at: u64,
    /// Who made it.
    pub by: Actor,
    /// What it was (`created`, `claimed`, `started`, ...).
    pub what: String,
    /// Why, or a note, as its author wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A task on the board.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Its number, from 1, never reused.
    pub id: u64,
    /// One line.
    pub title: String,
    /// What is to be done.
    #[serde(default)]
    pub body: String,
    /// Where it is.
    pub state: TaskState,
    /// Who it is for, or who reserved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Actor>,
    /// Tasks that must be done before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<u64>,
    /// Who made it.
    pub created_by: Actor,
    /// What happened to it, oldest first (the last `MAX_HISTORY`).
    pub history: Vec<Change>,
}

/// A message on the board.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Its number, from 1, never reused.
    pub id: u64,
    /// Seconds since the epoch.
    pub at: u64,
    /// Who sent it.
    pub from: Actor,
    /// Who is told of it (names of the team's sessions); empty: everyone. Everyone on the
    /// team may read every message: recipients select who is notified, not who reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<String>,
    /// What it says, as its author wrote it.
    pub body: String,
}

impl Message {
    /// Whether `who` is among those told of it (not its own sender).
    pub(crate) fn is_for(&self, who: &Actor) -> bool {
        if &self.from == who {
            return false;
        }
        match who.name() {
            Some(n) => self.to.is_empty() || self.to.iter().any(|t| t == n),
            None => self.to.is_empty(),
        }
    }
}

/// What a task operation is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOp {
    /// A new task, for `owner` if named (a member may name only itself).
    Create {
        /// One line, bounded: what `ateam tasks` lists.
        title: String,
        /// What is to be done, bounded; the creator's data, shown escaped.
        body: String,
        /// Whom it is for.
        owner: Option<String>,
        /// Tasks it waits for.
        depends_on: Vec<u64>,
    },
    /// Changes what a task says (its creator, its owner, or a lead).
    Edit {
        /// Which.
        id: u64,
        /// A new title.
        title: Option<String>,
        /// A new body.
        body: Option<String>,
        /// New dependencies.
        depends_on: Option<Vec<u64>>,
    },
    /// Reserves a task for the caller.
    Claim {
        /// Which.
        id: u64,
    },
    /// Starts a task: claimed by the caller (or claims it), its dependencies done.
    Start {
        /// Which.
        id: u64,
    },
    /// Gives a claimed or started task back to `todo`.
    Release {
        /// Which.
        id: u64,
        /// Why.
        note: Option<String>,
    },
    /// Finishes a task.
    Complete {
        /// Which.
        id: u64,
        /// What came of it.
        note: Option<String>,
    },
    /// Puts a done task back to `todo`.
    Reopen {
        /// Which.
        id: u64,
        /// Why.
        note: Option<String>,
    },
}

/// Why the board refused an operation: said to the caller as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// No such task.
    #[error("there is no task {0}")]
    NoTask(u64),
    /// Not the caller's to do.
    #[error("{0}")]
    NotYours(String),
    /// Not from the task's state.
    #[error("task {id} is {state}: it cannot be {verb}", state = .state.name())]
    State {
        /// Which task.
        id: u64,
        /// Where it is.
        state: TaskState,
        /// What was asked.
        verb: &'static str,
    },
    /// A dependency is not done.
    #[error("task {id} waits for task {waits} ({state}); start it when that one is done", state = .state.name())]
    Waiting {
        /// Which task.
        id: u64,
        /// The dependency.
        waits: u64,
        /// Where that one is.
        state: TaskState,
    },
    /// Too long, too many, or not text a session may write.
    #[error("{0}")]
    Bound(String),
    /// Not a session of the team.
    #[error("`{}` is not a session of this team", crate::core::untrusted::shown(.0))]
    NoSession(String),
}

/// The tasks of a board, as `store` keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tasks {
    /// The next task's id.
    pub next_id: u64,
    /// Every task, by id.
    pub tasks: Vec<Task>,
}

/// The team's sessions, by name: whom a task may be for and a message may name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roster {
    /// Members' names.
    pub members: BTreeSet<String>,
    /// Main sessions' names.
    pub mains: BTreeSet<String>,
}

impl Roster {
    /// The session named `name`, if the team has it.
    pub(crate) fn actor(&self, name: &str) -> Option<Actor> {
        if self.members.contains(name) {
            Some(Actor::Member(name.to_string()))
        } else if self.mains.contains(name) {
            Some(Actor::Main(name.to_string()))
        } else {
            None
        }
    }
}

/// Text a session writes: bounded, and no NUL (the rest is kept and shown escaped).
pub(crate) fn check_text(what: &str, s: &str, max: usize) -> Result<(), Refused> {
    if s.len() > max {
        return Err(Refused::Bound(format!(
            "the {what} is {} bytes; at most {max} are kept",
            s.len()
        )));
    }
    if s.contains('\0') {
        return Err(Refused::Bound(format!("the {what} holds a NUL byte")));
    }
    Ok(())
}

impl Tasks {
    /// The task `id`.
    pub fn get(&self, id: u64) -> Result<&Task, Refused> {
        self.tasks
            .iter()
            .find(|t| t.id == id)
            .ok_or(Refused::NoTask(id))
    }

    fn get_mut(&mut self, id: u64) -> Result<&mut Task, Refused> {
        self.tasks
            .iter_mut()
            .find(|t| t.id == id)
            .ok_or(Refused::NoTask(id))
    }

    /// Applies `op` by `by` at `now`; returns the task it made or changed.
    pub fn apply(
        &mut self,
        op: TaskOp,
        by: &Actor,
        roster: &Roster,
        now: u64,
    ) -> Result<Task, Refused> {
        let note = match &op {
            TaskOp::Release { note, .. }
            | TaskOp::Complete { note, .. }
            | TaskOp::Reopen { note, .. } => note.clone(),
            TaskOp::Create { .. }
            | TaskOp::Edit { .. }
            | TaskOp::Claim { .. }
            | TaskOp::Start { .. } => None,
        };
        let (id, change) = match op {
            TaskOp::Create {
                title,
                body,
                owner,
                depends_on,
            } => return self.create(title, body, owner, depends_on, by, roster, now),
            TaskOp::Edit {
                id,
                title,
                body,
                depends_on,
            } => (id, self.edit(id, title, body, depends_on, by)?),
            TaskOp::Claim { id } => (id, self.claim(id, by)?),
            TaskOp::Start { id } => (id, self.start(id, by)?),
            TaskOp::Release { id, note } => (id, self.release(id, by, note.as_deref())?),
            TaskOp::Complete { id, note } => (id, self.complete(id, by, note.as_deref())?),
            TaskOp::Reopen { id, note } => (id, self.reopen(id, by, note.as_deref())?),
        };
        let task = self.get_mut(id)?;
        push_history(task, by, change, note, now);
        Ok(task.clone())
    }

    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        title: String,
        body: String,
        owner: Option<String>,
        depends_on: Vec<u64>,
        by: &Actor,
        roster: &Roster,
        now: u64,
    ) -> Result<Task, Refused> {
        check_title(&title)?;
        check_text("body", &body, MAX_BODY)?;
        if self.tasks.len() >= MAX_TASKS {
            return Err(Refused::Bound(format!(
                "the board holds {MAX_TASKS} tasks, its most; the person removes done ones with `ateam tasks prune`"
            )));
        }
        self.check_depends(None, &depends_on)?;
        let owner = match owner {
            None => None,
            Some(name) => {
                let who = roster.actor(&name).ok_or(Refused::NoSession(name))?;
                if !by.leads() && &who != by {
                    return Err(Refused::NotYours(format!(
                        "{by} may make a task only for itself or for nobody; a lead assigns tasks to others"
                    )));
                }
                Some(who)
            }
        };
        self.next_id = self.next_id.max(1);
        let task = Task {
            id: self.next_id,
            title,
            body,
            state: TaskState::Todo,
            owner,
            depends_on,
            created_by: by.clone(),
            history: vec![Change {
                at: now,
                by: by.clone(),
                what: "created".into(),
                note: None,
            }],
        };
        self.next_id += 1;
        self.tasks.push(task.clone());
        Ok(task)
    }

    fn edit(
        &mut self,
        id: u64,
        title: Option<String>,
        body: Option<String>,
        depends_on: Option<Vec<u64>>,
        by: &Actor,
    ) -> Result<&'static str, Refused> {
        let t = self.get(id)?;
        if !(by.leads() || &t.created_by == by || t.owner.as_ref() == Some(by)) {
            return Err(Refused::NotYours(format!(
                "task {id} is not {by}'s to edit: its creator, its owner or a lead edits it"
            )));
        }
        if let Some(title) = &title {
            check_title(title)?;
        }
        if let Some(body) = &body {
            check_text("body", body, MAX_BODY)?;
        }
        if let Some(deps) = &depends_on {
            self.check_depends(Some(id), deps)?;
        }
        let t = self.get_mut(id)?;
        if let Some(title) = title {
            t.title = title;
        }
        if let Some(body) = body {
            t.body = body;
        }
        if let Some(deps) = depends_on {
            t.depends_on = deps;
        }
        Ok("edited")
    }

    fn claim(&mut self, id: u64, by: &Actor) -> Result<&'static str, Refused> {
        let t = self.get_mut(id)?;
        if t.state != TaskState::Todo {
            return Err(state(t, "claimed"));
        }
        if let Some(o) = &t.owner
            && o != by
            && !by.leads()
        {
            return Err(Refused::NotYours(format!(
                "task {id} is assigned to {o}: only it claims it"
            )));
        }
        t.owner = Some(by.clone());
        t.state = TaskState::Claimed;
        Ok("claimed")
    }

    fn start(&mut self, id: u64, by: &Actor) -> Result<&'static str, Refused> {
        let t = self.get(id)?;
        match t.state {
            TaskState::Todo => {}
            TaskState::Claimed if t.owner.as_ref() == Some(by) => {}
            TaskState::Claimed => return Err(not_owner(t, by, "start")),
            TaskState::InProgress | TaskState::Done => return Err(state(t, "started")),
        }
        for d in &t.depends_on {
            let dep = self.get(*d)?;
            if dep.state != TaskState::Done {
                return Err(Refused::Waiting {
                    id,
                    waits: *d,
                    state: dep.state,
                });
            }
        }
        if t.state == TaskState::Todo {
            self.claim(id, by)?;
        }
        let t = self.get_mut(id)?;
        t.owner = Some(by.clone());
        t.state = TaskState::InProgress;
        Ok("started")
    }

    fn release(
        &mut self,
        id: u64,
        by: &Actor,
        note: Option<&str>,
    ) -> Result<&'static str, Refused> {
        check_note(note)?;
        let t = self.get_mut(id)?;
        match t.state {
            TaskState::Claimed | TaskState::InProgress => {}
            TaskState::Todo | TaskState::Done => return Err(state(t, "released")),
        }
        if t.owner.as_ref() != Some(by) && !by.leads() {
            return Err(not_owner(t, by, "release"));
        }
        t.state = TaskState::Todo;
        t.owner = None;
        Ok("released")
    }

    fn complete(
        &mut self,
        id: u64,
        by: &Actor,
        note: Option<&str>,
    ) -> Result<&'static str, Refused> {
        check_note(note)?;
        let t = self.get_mut(id)?;
        match t.state {
            TaskState::Claimed | TaskState::InProgress => {}
            TaskState::Todo if by.leads() => {}
            TaskState::Todo | TaskState::Done => return Err(state(t, "completed")),
        }
        if t.owner.as_ref() != Some(by) && !by.leads() {
            return Err(not_owner(t, by, "complete"));
        }
        t.state = TaskState::Done;
        Ok("completed")
    }

    fn reopen(&mut self, id: u64, by: &Actor, note: Option<&str>) -> Result<&'static str, Refused> {
        check_note(note)?;
        let t = self.get_mut(id)?;
        if t.state != TaskState::Done {
            return Err(state(t, "reopened"));
        }
        if !(by.leads() || &t.created_by == by) {
            return Err(Refused::NotYours(format!(
                "task {id} is not {by}'s to reopen: its creator or a lead reopens it"
            )));
        }
        t.state = TaskState::Todo;
        t.owner = None;
        Ok("reopened")
    }

    /// Returns every task `owner` has claimed or started to `todo`, with `why` (a session
    /// that left, crashed or was replaced holds no work). Returns their ids.
    pub(crate) fn give_back(&mut self, owner: &Actor, why: &str, now: u64) -> Vec<u64> {
        let mut ids = Vec::new();
        for t in &mut self.tasks {
            if t.owner.as_ref() == Some(owner)
                && matches!(t.state, TaskState::Claimed | TaskState::InProgress)
            {
                t.state = TaskState::Todo;
                t.owner = None;
                let change = Change {
                    at: now,
                    by: Actor::Person,
                    what: "returned".into(),
                    note: Some(why.to_string()),
                };
                t.history.push(change);
                trim_history(t);
                ids.push(t.id);
            }
        }
        ids
    }

    /// Hands every task `from` owns to `to` (a member promoted to the main session of its
    /// name keeps its work; a session taken over hands it to its heir). Returns their ids.
    pub(crate) fn hand_over(&mut self, from: &Actor, to: &Actor, why: &str, now: u64) -> Vec<u64> {
        let mut ids = Vec::new();
        for t in &mut self.tasks {
            if t.owner.as_ref() == Some(from) && t.state != TaskState::Done {
                t.owner = Some(to.clone());
                t.history.push(Change {
                    at: now,
                    by: Actor::Person,
                    what: "handed over".into(),
                    note: Some(why.to_string()),
                });
                trim_history(t);
                ids.push(t.id);
            }
        }
        ids
    }

    /// Dependencies exist, are few, and make no cycle through `id`.
    fn check_depends(&self, id: Option<u64>, deps: &[u64]) -> Result<(), Refused> {
        if deps.len() > MAX_DEPENDS {
            return Err(Refused::Bound(format!(
                "a task waits for at most {MAX_DEPENDS} others"
            )));
        }
        for d in deps {
            self.get(*d)?;
        }
        let Some(id) = id else { return Ok(()) };
        // Whether `id` is reachable from `deps`: then waiting on them waits on itself.
        let mut seen = BTreeSet::new();
        let mut todo: Vec<u64> = deps.to_vec();
        while let Some(d) = todo.pop() {
            if d == id {
                return Err(Refused::Bound(format!(
                    "task {id} would wait for itself (a cycle of dependencies)"
                )));
            }
            if seen.insert(d)
                && let Ok(t) = self.get(d)
            {
                todo.extend(&t.depends_on);
            }
        }
        Ok(())
    }
}

fn check_title(title: &str) -> Result<(), Refused> {
    if title.trim().is_empty() {
        return Err(Refused::Bound("a task needs a title".into()));
    }
    check_text("title", title, MAX_TITLE)
}

fn check_note(note: Option<&str>) -> Result<(), Refused> {
    note.map_or(Ok(()), |n| check_text("note", n, MAX_BODY))
}

fn state(t: &Task, verb: &'static str) -> Refused {
    Refused::State {
        id: t.id,
        state: t.state,
        verb,
    }
}

fn not_owner(t: &Task, by: &Actor, verb: &str) -> Refused {
    let owner = t
        .owner
        .as_ref()
        .map_or("nobody".to_string(), ToString::to_string);
    Refused::NotYours(format!(
        "task {} is {owner}'s: {by} may not {verb} it (a member acts only for itself)",
        t.id
    ))
}

fn push_history(t: &mut Task, by: &Actor, what: &str, note: Option<String>, now: u64) {
    t.history.push(Change {
        at: now,
        by: by.clone(),
        what: what.into(),
        note,
    });
    trim_history(t);
}

fn trim_history(t: &mut Task) {
    if t.history.len() > MAX_HISTORY {
        let extra = t.history.len() - MAX_HISTORY;
        t.history.drain(..extra);
    }
}
