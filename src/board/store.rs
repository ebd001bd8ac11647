//! Where a team's board lives, and the one place its changes are made: every change takes
//! the board's lock, reads, applies the rules of `board`, and writes atomically, so that the
//! sessions' servers, `ateam mcp` and the person's commands, each its own process, never
//! lose each other's changes.
//!
//! ```text
//! <state>/teams/<team>/board/lock               flock'ed by every change
//! <state>/teams/<team>/board/tasks.json         the tasks (`Tasks`), rewritten atomically
//! <state>/teams/<team>/board/messages.jsonl     messages, appended; past MAX_LOG_BYTES it
//!                                               becomes messages.jsonl.1 (one kept): the
//!                                               oldest go, and `dropped` counts them
//! <state>/teams/<team>/board/messages.json      the next message's id, how many were
//!                                               dropped, and what each session has read
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{Actor, MAX_MESSAGE, MAX_RECIPIENTS, Message, Refused, Roster, Task, TaskOp, Tasks};
use crate::core::layout;
use crate::files::{self, Owner};

/// Size at which the message log is rotated: two files of this size at most.
pub(crate) const MAX_LOG_BYTES: u64 = 1024 * 1024;
/// Largest tasks file read (MAX_TASKS tasks of the largest size is more: `create` refuses
/// before).
const MAX_TASKS_BYTES: u64 = 64 * 1024 * 1024;
/// Messages one `history` or `search` returns at most.
pub(crate) const MAX_LISTED: usize = 100;

/// Why the board could not be read or written (not a refusal: those are `Refused`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BoardError {
    /// A file of the board could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A file of the board does not parse: it is left as it is for the person to look at.
    #[error("{}: not a board file ateam wrote ({why}); move it away to start a new board", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        why: String,
    },
}

/// What the board knows of its messages besides the log.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    next_id: u64,
    /// Messages rotated out of the log for good.
    dropped: u64,
    /// The newest message id each session has read (`Actor::key`).
    read: BTreeMap<String, u64>,
    /// What each idle agent was last woken for (`News::mark`), so that it is woken once
    /// for each piece of news, not in a loop when it does not read it.
    #[serde(default)]
    woken: BTreeMap<String, (u64, u64)>,
}

/// What an agent that is not running has on the board, for its wake (`plan`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct News {
    /// Unread messages to it.
    pub messages: usize,
    /// Tasks for it still to do.
    pub tasks: usize,
    /// The newest of those messages' ids and of those tasks' ids.
    pub mark: (u64, u64),
    /// The mark it was last woken for.
    pub woken: (u64, u64),
}

impl News {
    /// Whether there is something it was not woken for yet.
    pub(crate) fn is_new(&self) -> bool {
        self.mark.0 > self.woken.0 || self.mark.1 > self.woken.1
    }
}

/// What is new for a session: messages to it it has not read, tasks for it still to do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Unread {
    /// Messages to it (or to everyone) newer than the newest it read.
    pub messages: usize,
    /// Tasks it owns that are `todo` or `claimed`.
    pub tasks: usize,
}

/// Some messages, and how many the log no longer holds.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listed {
    /// Oldest first.
    pub messages: Vec<Message>,
    /// Messages rotated out of the log for good.
    pub dropped: u64,
}

impl Actor {
    /// A key for maps in the board's files.
    fn key(&self) -> String {
        match self {
            Actor::Member(n) => format!("member:{n}"),
            Actor::Main(n) => format!("main:{n}"),
            Actor::Person => "person".into(),
        }
    }
}

/// A board in numbers, for `status`, `top` and the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Tasks nobody works on.
    pub todo: usize,
    /// Tasks reserved, not started.
    pub claimed: usize,
    /// Tasks under way.
    pub in_progress: usize,
    /// Tasks finished.
    pub done: usize,
    /// Messages the board holds.
    pub messages: usize,
    /// Messages it no longer holds (past its bound).
    pub dropped: u64,
}

/// One team's board.
#[derive(Debug, Clone)]
pub struct Board {
    dir: PathBuf,
    owner: Owner,
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Board {
    /// The board of `team` (its folder is made, private to `owner`, at the first change).
    pub fn new(state_dir: &Path, team: &str, owner: Owner) -> Board {
        Board::in_run_dir(&layout::team_run_dir(state_dir, team), owner)
    }

    /// The board of the team whose folder is `run_dir` (`layout::team_run_dir`).
    pub(crate) fn in_run_dir(run_dir: &Path, owner: Owner) -> Board {
        Board {
            dir: run_dir.join("board"),
            owner,
        }
    }

    /// The board in numbers.
    pub fn summary(&self) -> Result<Summary, BoardError> {
        let mut s = Summary::default();
        for t in self.tasks()?.tasks {
            match t.state {
                super::TaskState::Todo => s.todo += 1,
                super::TaskState::Claimed => s.claimed += 1,
                super::TaskState::InProgress => s.in_progress += 1,
                super::TaskState::Done => s.done += 1,
            }
        }
        let listed = self.messages()?;
        s.messages = listed.messages.len();
        s.dropped = listed.dropped;
        Ok(s)
    }

    /// What `who` has on the board that it was not woken for (nothing when there is no
    /// board yet).
    pub(crate) fn news(&self, who: &Actor) -> Result<News, BoardError> {
        if !self.dir.exists() {
            return Ok(News::default());
        }
        let meta: Meta = self.read_json("messages.json", MAX_LOG_BYTES)?;
        let read = meta.read.get(&who.key()).copied().unwrap_or(0);
        let mut news = News {
            woken: meta.woken.get(&who.key()).copied().unwrap_or_default(),
            ..News::default()
        };
        for m in self.messages()?.messages {
            if m.id > read && m.is_for(who) {
                news.messages += 1;
                news.mark.0 = news.mark.0.max(m.id);
            }
        }
        for t in self.tasks()?.tasks {
            if t.owner.as_ref() == Some(who)
                && matches!(t.state, super::TaskState::Todo | super::TaskState::Claimed)
            {
                news.tasks += 1;
                news.mark.1 = news.mark.1.max(t.id);
            }
        }
        Ok(news)
    }

    /// Notes that `who` was woken for `mark`.
    pub(crate) fn mark_woken(&self, who: &Actor, mark: (u64, u64)) -> Result<(), BoardError> {
        self.locked(|| {
            let mut meta: Meta = self.read_json("messages.json", MAX_LOG_BYTES)?;
            meta.woken.insert(who.key(), mark);
            self.write_json("messages.json", &meta)
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn io(&self, name: &str) -> impl Fn(std::io::Error) -> BoardError {
        let path = self.path(name);
        move |source| BoardError::Io {
            path: path.clone(),
            source,
        }
    }

    /// Runs `f` holding the board's lock.
    fn locked<T>(&self, f: impl FnOnce() -> Result<T, BoardError>) -> Result<T, BoardError> {
        files::private_dir(&self.dir, self.owner).map_err(self.io(""))?;
        let lock = files::open_lock(&self.path("lock")).map_err(self.io("lock"))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| self.io("lock")(e.into()))?;
        f()
    }

    /// The tasks, as last written.
    pub fn tasks(&self) -> Result<Tasks, BoardError> {
        self.read_json("tasks.json", MAX_TASKS_BYTES)
    }

    /// Applies a task operation, serialized with every other change; a change is also an
    /// event of the team (`ateam events`), its title as its author wrote it (events escape).
    pub fn task(
        &self,
        op: TaskOp,
        by: &Actor,
        roster: &Roster,
    ) -> Result<Result<Task, Refused>, BoardError> {
        let done = self.locked(|| {
            let mut tasks = self.tasks()?;
            let done = tasks.apply(op, by, roster, now());
            if done.is_ok() {
                self.write_json("tasks.json", &tasks)?;
            }
            Ok(done)
        })?;
        if let Ok(t) = &done {
            self.record(t, by);
        }
        Ok(done)
    }

    /// The change just made to `t`, as an event of its team.
    fn record(&self, t: &Task, by: &Actor) {
        use crate::events::{Event, EventKind};
        let (Some(run_dir), Some(what)) = (self.dir.parent(), t.history.last()) else {
            return;
        };
        let (Some(state_dir), Some(team)) = (
            run_dir.parent().and_then(Path::parent),
            run_dir.file_name().and_then(|n| n.to_str()),
        ) else {
            return;
        };
        let title: String = t.title.chars().take(80).collect();
        let who = by.name().unwrap_or("-");
        let reason = format!("task {} `{title}` {} by {by}", t.id, what.what);
        let e = Event::new(team, who, EventKind::BoardTask, &reason);
        crate::events::record(state_dir, self.owner, &e);
    }

    /// Returns `owner`'s claimed and started tasks to `todo`, saying why.
    pub(crate) fn give_back(&self, owner: &Actor, why: &str) -> Result<Vec<u64>, BoardError> {
        if !self.path("tasks.json").exists() {
            return Ok(Vec::new());
        }
        self.locked(|| {
            let mut tasks = self.tasks()?;
            let ids = tasks.give_back(owner, why, now());
            if !ids.is_empty() {
                self.write_json("tasks.json", &tasks)?;
            }
            Ok(ids)
        })
    }

    /// Hands `from`'s open tasks to `to`, saying why.
    pub(crate) fn hand_over(
        &self,
        from: &Actor,
        to: &Actor,
        why: &str,
    ) -> Result<Vec<u64>, BoardError> {
        if !self.path("tasks.json").exists() {
            return Ok(Vec::new());
        }
        self.locked(|| {
            let mut tasks = self.tasks()?;
            let ids = tasks.hand_over(from, to, why, now());
            if !ids.is_empty() {
                self.write_json("tasks.json", &tasks)?;
            }
            Ok(ids)
        })
    }

    /// Sends a message from `from` to `to` (empty: everyone).
    pub fn send(
        &self,
        from: &Actor,
        to: Vec<String>,
        body: String,
        roster: &Roster,
    ) -> Result<Result<Message, Refused>, BoardError> {
        if let Err(r) = check_message(&to, &body, roster) {
            return Ok(Err(r));
        }
        self.locked(|| {
            let mut meta: Meta = self.read_json("messages.json", MAX_LOG_BYTES)?;
            meta.next_id = meta.next_id.max(1);
            let m = Message {
                id: meta.next_id,
                at: now(),
                from: from.clone(),
                to,
                body,
            };
            meta.next_id += 1;
            // The id is taken first: a crash between the two writes leaves a gap, never a
            // second message with one id.
            self.write_json("messages.json", &meta)?;
            self.append(&m, &mut meta)?;
            Ok(Ok(m))
        })
    }

    /// Appends `m` to the log, rotating it first when it would grow past its bound.
    fn append(&self, m: &Message, meta: &mut Meta) -> Result<(), BoardError> {
        let mut line = serde_json::to_vec(m).map_err(|e| self.corrupt("messages.jsonl", &e))?;
        line.push(b'\n');
        let path = self.path("messages.jsonl");
        let size = std::fs::symlink_metadata(&path).map_or(0, |m| m.len());
        if size + line.len() as u64 > MAX_LOG_BYTES {
            let old = self.path("messages.jsonl.1");
            meta.dropped += count_lines(&old);
            std::fs::rename(&path, &old).map_err(self.io("messages.jsonl"))?;
            self.write_json("messages.json", meta)?;
        }
        let mut f = files::open_append(&path, self.owner).map_err(self.io("messages.jsonl"))?;
        f.write_all(&line).map_err(self.io("messages.jsonl"))
    }

    /// Every message the log holds, oldest first, and how many it dropped.
    pub fn messages(&self) -> Result<Listed, BoardError> {
        let meta: Meta = self.read_json("messages.json", MAX_LOG_BYTES)?;
        let mut messages = Vec::new();
        for name in ["messages.jsonl.1", "messages.jsonl"] {
            let Some(f) = self.open(name)? else { continue };
            let bounded = BufReader::new(f.take(MAX_LOG_BYTES + MAX_MESSAGE as u64 * 8));
            // A line that does not parse (cut by a crash) is skipped.
            messages.extend(
                bounded
                    .lines()
                    .map_while(Result::ok)
                    .filter_map(|l| serde_json::from_str::<Message>(&l).ok()),
            );
        }
        Ok(Listed {
            messages,
            dropped: meta.dropped,
        })
    }

    /// `by`'s view of the messages: the last `limit` newer than `since`; marks what it
    /// was shown as read.
    pub fn history(
        &self,
        by: &Actor,
        since: Option<u64>,
        limit: usize,
    ) -> Result<Listed, BoardError> {
        let mut all = self.messages()?;
        all.messages.retain(|m| m.id > since.unwrap_or(0));
        let skip = all
            .messages
            .len()
            .saturating_sub(limit.clamp(1, MAX_LISTED));
        all.messages.drain(..skip);
        if let Some(newest) = all.messages.last().map(|m| m.id) {
            self.mark_read(by, newest)?;
        }
        Ok(all)
    }

    fn mark_read(&self, by: &Actor, id: u64) -> Result<(), BoardError> {
        self.locked(|| {
            let mut meta: Meta = self.read_json("messages.json", MAX_LOG_BYTES)?;
            let mark = meta.read.entry(by.key()).or_default();
            if *mark < id {
                *mark = id;
                self.write_json("messages.json", &meta)?;
            }
            Ok(())
        })
    }

    /// Messages whose text holds `query` (case-insensitive), the newest `limit`.
    pub fn search(&self, query: &str, limit: usize) -> Result<Listed, BoardError> {
        let q = query.to_lowercase();
        let mut all = self.messages()?;
        all.messages.retain(|m| m.body.to_lowercase().contains(&q));
        let skip = all
            .messages
            .len()
            .saturating_sub(limit.clamp(1, MAX_LISTED));
        all.messages.drain(..skip);
        Ok(all)
    }

    /// What is new for `by`.
    pub(crate) fn unread(&self, by: &Actor) -> Result<Unread, BoardError> {
        let meta: Meta = self.read_json("messages.json", MAX_LOG_BYTES)?;
        let mark = meta.read.get(&by.key()).copied().unwrap_or(0);
        let messages = self
            .messages()?
            .messages
            .iter()
            .filter(|m| m.id > mark && m.is_for(by))
            .count();
        let tasks = self
            .tasks()?
            .tasks
            .iter()
            .filter(|t| {
                t.owner.as_ref() == Some(by)
                    && matches!(t.state, super::TaskState::Todo | super::TaskState::Claimed)
            })
            .count();
        Ok(Unread { messages, tasks })
    }

    /// Opens a board file for reading, refusing a link (the board's folder is ateam's alone,
    /// but nothing is followed that need not be); `None` when it is not there yet.
    fn open(&self, name: &str) -> Result<Option<File>, BoardError> {
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(self.path(name))
        {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io(name)(e)),
        }
    }

    fn read_json<T: Default + for<'de> Deserialize<'de>>(
        &self,
        name: &str,
        max: u64,
    ) -> Result<T, BoardError> {
        let Some(f) = self.open(name)? else {
            return Ok(T::default());
        };
        let mut bytes = Vec::new();
        f.take(max).read_to_end(&mut bytes).map_err(self.io(name))?;
        serde_json::from_slice(&bytes).map_err(|e| self.corrupt(name, &e))
    }

    fn write_json<T: Serialize>(&self, name: &str, value: &T) -> Result<(), BoardError> {
        let bytes = serde_json::to_vec(value).map_err(|e| self.corrupt(name, &e))?;
        files::write_atomic(&self.path(name), &bytes, 0o600, self.owner).map_err(self.io(name))
    }

    fn corrupt(&self, name: &str, e: &serde_json::Error) -> BoardError {
        BoardError::Corrupt {
            path: self.path(name),
            why: e.to_string(),
        }
    }
}

fn count_lines(path: &Path) -> u64 {
    std::fs::read(path).map_or(0, |b| b.iter().filter(|c| **c == b'\n').count() as u64)
}

/// A message's recipients are the team's sessions, few; its text is bounded.
fn check_message(to: &[String], body: &str, roster: &Roster) -> Result<(), Refused> {
    if body.trim().is_empty() {
        return Err(Refused::Bound("a message needs a body".into()));
    }
    super::check_text("message", body, MAX_MESSAGE)?;
    if to.len() > MAX_RECIPIENTS {
        return Err(Refused::Bound(format!(
            "a message names at most {MAX_RECIPIENTS} recipients (none: everyone)"
        )));
    }
    for name in to {
        if roster.actor(name).is_none() {
            return Err(Refused::NoSession(name.clone()));
        }
    }
    Ok(())
}
