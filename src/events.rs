//! What the controller and apply did and why, per team, newest last: `ateam events`.
//!
//! One JSON object per line in `<state>/teams/<team>/events.jsonl` (`core::layout`), each
//! appended in one `write` on an `O_APPEND` descriptor, so that apply, the controller and the
//! helper servers can write at once without tearing each other's lines. Bounded as the egress
//! log is: past `MAX_EVENTS_BYTES` the file becomes `events.jsonl.1` (one kept), under an
//! `flock` of the file so that two writers never rotate twice.
//!
//! Recording never fails what it records: an apply that cannot write its events still
//! applies (the first failure is logged, once per process).
//!
//! Egress refusals are not written here: the member-uid proxy writes its own log, and this
//! file is ateam's. `egress_refusals` turns a proxy's log into events at read time, a run of
//! knocks on one host collapsed into one event with a count, as `kubectl get events` does.
//! So are the ends of an agent member's tasks (`agent_task_events`): the agent's own
//! transcript says when each task ended and how, whether or not a controller watched the
//! member exit; read at read time, they are there as long as the transcript is.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{FlockOperation, flock};
use serde::{Deserialize, Serialize};

use crate::core::container::rfc3339;
use crate::core::layout;
use crate::core::untrusted::shown;
use crate::files::{self, Owner};
use crate::servers::egress::log as egress_log;

/// Size at which a team's events file is rotated: two files of this size at most.
pub(crate) const MAX_EVENTS_BYTES: u64 = 1024 * 1024;

/// Longest reason kept (in bytes): an error quoting what a member chose stays one line.
pub(crate) const MAX_REASON: usize = 1024;

/// Refusals of one host by one member closer than this to each other are one event.
pub(crate) const COLLAPSE_WITHIN: Duration = Duration::from_secs(60);

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// A member's container was made and started.
    Created,
    /// A member's container was replaced (the reason says what differed).
    Replaced,
    /// A created container that never ran was started.
    Started,
    /// A member that exited was started again, as its restart policy asks.
    Restarted,
    /// A start outside ateam held the member at its gate; ateam checked and released it.
    Released,
    /// The gate held a member and the check after start refused it: its container went.
    Held,
    /// A container of ateam's was removed (no manifest wants it, a duplicate, a stranger).
    Removed,
    /// Something renamed or paused a member, or a promotion was rolled back: put right.
    Repaired,
    /// Carrying out an action failed for another reason than the gate.
    Failed,
    /// A container with this store's labels that ateam did not make.
    StrangerSeen,
    /// The controller defers a restart of a member that keeps exiting.
    CrashLoop,
    /// A member's helper request brought up a helper.
    HelperGranted,
    /// A member's helper request was refused (the reason names the rule).
    HelperRefused,
    /// A member was refused something the person could answer (`approvals`), read with
    /// the team's model at read time; one per pending approval, at its first refusal.
    ApprovalPending,
    /// A member's egress proxy refused a connection (from the proxy's log).
    EgressRefused,
    /// A main session's terminal started.
    SessionStarted,
    /// A main session's terminal was stopped.
    SessionStopped,
    /// A member became a main session.
    Promoted,
    /// A person gave an agent its next task (`ateam task`), in the same container.
    TaskGiven,
    /// An agent member's task ended done (from the agent's own transcript).
    AgentDone,
    /// The board returned tasks a member held to `todo`: it left, crashed or was replaced.
    TasksReturned,
    /// A task on the team's board changed (made, claimed, started, completed, ...).
    BoardTask,
    /// An agent member's task ended failed: its own error, or a tool call refused (from the
    /// agent's own transcript).
    AgentFailed,
    /// A person's command was refused before it changed anything (a restart that could not
    /// bring the member back).
    Refused,
    /// The person deleted the team: a controller leaves it deleted until it is applied again.
    Deleted,
    /// The person stopped a member's container (`ateam rollback`, for its workspace).
    Stopped,
    /// The person suspended a member (`ateam suspend`): down, its state kept.
    Suspended,
    /// The person resumed a suspended member (`ateam resume`).
    Resumed,
    /// The person made a member from a running one (`ateam fork`).
    Forked,
}

impl EventKind {
    /// `Warning` for what a person may have to act on, `Normal` otherwise (kubectl's TYPE).
    pub fn severity(self) -> &'static str {
        match self {
            EventKind::Created
            | EventKind::Replaced
            | EventKind::Started
            | EventKind::Restarted
            | EventKind::Released
            | EventKind::Removed
            | EventKind::Repaired
            | EventKind::HelperGranted
            | EventKind::SessionStarted
            | EventKind::SessionStopped
            | EventKind::Promoted
            | EventKind::TaskGiven
            | EventKind::AgentDone
            | EventKind::BoardTask
            | EventKind::Deleted
            | EventKind::Stopped
            | EventKind::Suspended
            | EventKind::Resumed
            | EventKind::Forked => "Normal",
            EventKind::TasksReturned => "Warning",
            EventKind::Held
            | EventKind::Failed
            | EventKind::StrangerSeen
            | EventKind::CrashLoop
            | EventKind::HelperRefused
            | EventKind::EgressRefused
            | EventKind::ApprovalPending
            | EventKind::AgentFailed
            | EventKind::Refused => "Warning",
        }
    }

    /// Its name, as in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Replaced => "replaced",
            EventKind::Started => "started",
            EventKind::Restarted => "restarted",
            EventKind::Released => "released",
            EventKind::Held => "held",
            EventKind::Removed => "removed",
            EventKind::Repaired => "repaired",
            EventKind::Failed => "failed",
            EventKind::StrangerSeen => "stranger-seen",
            EventKind::CrashLoop => "crash-loop",
            EventKind::HelperGranted => "helper-granted",
            EventKind::HelperRefused => "helper-refused",
            EventKind::EgressRefused => "egress-refused",
            EventKind::ApprovalPending => "approval-pending",
            EventKind::SessionStarted => "session-started",
            EventKind::TasksReturned => "tasks-returned",
            EventKind::BoardTask => "board-task",
            EventKind::SessionStopped => "session-stopped",
            EventKind::Promoted => "promoted",
            EventKind::TaskGiven => "task-given",
            EventKind::AgentDone => "agent-done",
            EventKind::AgentFailed => "agent-failed",
            EventKind::Refused => "refused",
            EventKind::Deleted => "deleted",
            EventKind::Stopped => "stopped",
            EventKind::Suspended => "suspended",
            EventKind::Resumed => "resumed",
            EventKind::Forked => "forked",
        }
    }
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

fn one() -> u64 {
    1
}

/// One event. `at`/`ts` are the last time it was seen; a collapsed run of refusals also has
/// its `count` and when it was first seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// RFC 3339, UTC, whole seconds.
    pub at: String,
    /// Seconds since the epoch (what events are sorted by).
    pub ts: f64,
    /// The team it is about.
    pub team: String,
    /// The member, or the main session.
    pub member: String,
    /// What happened.
    pub kind: EventKind,
    /// Why, or what, in one bounded line (`MAX_REASON`).
    pub reason: String,
    /// The container it is about (12 characters), when one is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    /// How many times it was seen; 1 but for a collapsed run of refusals.
    pub count: u64,
    /// When a collapsed run was first seen (RFC 3339); `None` for a single event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_at: Option<String>,
}

impl Event {
    /// An event of now. The reason is made one line and bounded (`MAX_REASON`).
    pub fn new(team: &str, member: &str, kind: EventKind, reason: &str) -> Event {
        Event::at(SystemTime::now(), team, member, kind, reason)
    }

    /// An event at `t`.
    pub fn at(t: SystemTime, team: &str, member: &str, kind: EventKind, reason: &str) -> Event {
        Event {
            at: rfc3339(t),
            ts: t
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            team: team.to_string(),
            member: member.to_string(),
            kind,
            reason: one_line(reason, MAX_REASON),
            container: None,
            count: 1,
            first_at: None,
        }
    }

    /// About this container (kept as its short id).
    pub fn container(mut self, id: &str) -> Event {
        self.container = Some(id.chars().take(12).collect());
        self
    }

    /// `shown`, for an event made outside this module (a pending approval, read at the edge).
    pub fn escaped(self) -> Event {
        self.shown()
    }

    /// This event with every text escaped that could steer a terminal: a reason may quote
    /// what a member chose (a helper's name, a host it asked for).
    fn shown(self) -> Event {
        let safe = |s: String| shown(&s).into_owned();
        Event {
            at: safe(self.at),
            team: safe(self.team),
            member: safe(self.member),
            reason: safe(self.reason),
            container: self.container.map(safe),
            first_at: self.first_at.map(safe),
            ..self
        }
    }
}

/// `s` on one line (runs of white space, line ends included, become one space), at most
/// `max` bytes, cut at a character boundary.
fn one_line(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    for word in s.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    if out.len() > max {
        let mut end = max.saturating_sub(3);
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push_str("...");
    }
    out
}

static WARNED: AtomicBool = AtomicBool::new(false);

/// Appends `e` to its team's events; a failure is logged (once per process), never returned:
/// an event that cannot be written must not undo or fail what it records.
pub fn record(state_dir: &Path, owner: Owner, e: &Event) {
    if let Err(err) = append(state_dir, owner, e)
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(team = %e.team, error = %err, "could not record an event (further failures are not logged)");
    }
}

fn append(state_dir: &Path, owner: Owner, e: &Event) -> std::io::Result<()> {
    let path = layout::team_events_path(state_dir, &e.team);
    if let Some(dir) = path.parent() {
        files::private_dir(dir, owner)?;
    }
    let mut line = serde_json::to_vec(e).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut file = locked(&path, owner)?;
    let size = file.metadata()?.len();
    if size + line.len() as u64 > MAX_EVENTS_BYTES {
        // Under the lock: whoever waits for it finds the file renamed and opens the new one.
        std::fs::rename(&path, egress_log::rotated(&path))?;
        file = locked(&path, owner)?;
    } else if size > 0 && !ends_a_line(&file, size) {
        // A line cut by a crash: end it, so that it does not swallow this one.
        line.insert(0, b'\n');
    }
    file.write_all(&line)
}

fn ends_a_line(file: &File, size: u64) -> bool {
    let mut last = [0u8; 1];
    std::os::unix::fs::FileExt::read_at(file, &mut last, size - 1).is_ok_and(|n| n == 1)
        && last[0] == b'\n'
}

/// The events file, open for appending and `flock`ed, and still the file of that name (a
/// writer that rotated it meanwhile leaves the lock on the old one: open again).
fn locked(path: &Path, owner: Owner) -> std::io::Result<File> {
    for _ in 0..8 {
        let file = files::open_append(path, owner)?;
        flock(&file, FlockOperation::LockExclusive)?;
        let held = file.metadata()?;
        match std::fs::symlink_metadata(path) {
            Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => return Ok(file),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("the events file keeps being rotated"))
}

/// A team's events, oldest first (the rotated file first). A line that does not parse (cut
/// by a crash) is skipped; text is returned escaped (`Event::shown`).
pub fn read(state_dir: &Path, team: &str) -> Vec<Event> {
    read_path(&layout::team_events_path(state_dir, team))
}

fn read_path(path: &Path) -> Vec<Event> {
    let mut out = Vec::new();
    for p in [egress_log::rotated(path), path.to_path_buf()] {
        let Ok(f) = files::open_regular(&p) else {
            continue;
        };
        // A file is at most MAX_EVENTS_BYTES and one line: never read more.
        let bounded = BufReader::new(f.take(MAX_EVENTS_BYTES + MAX_REASON as u64 * 4));
        for line in bounded.split(b'\n').map_while(Result::ok) {
            if let Ok(e) = serde_json::from_slice::<Event>(&line) {
                out.push(e.shown());
            }
        }
    }
    out
}

/// Whether a `stranger-seen` of this container is among the team's events already (so that
/// each reconcile that sees it does not say it again).
pub(crate) fn stranger_recorded(state_dir: &Path, team: &str, container: &str) -> bool {
    let short: String = container.chars().take(12).collect();
    read(state_dir, team)
        .iter()
        .any(|e| e.kind == EventKind::StrangerSeen && e.container.as_deref() == Some(&short))
}

/// A member's egress refusals as events: refusals of one `host:port` that follow each other
/// within `COLLAPSE_WITHIN` are one event, with their count, first and last time. `log` is
/// what `servers::egress::log::read` returns (already escaped), oldest first.
pub(crate) fn egress_refusals(team: &str, member: &str, log: &[egress_log::Event]) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    // (host, port) -> index in `out` of its latest run.
    let mut open: std::collections::HashMap<(&str, u16), usize> = Default::default();
    for r in log
        .iter()
        .filter(|r| r.verdict == egress_log::Verdict::Refused)
    {
        let t = UNIX_EPOCH + Duration::from_secs_f64(r.ts.clamp(0.0, 253_402_300_799.0));
        if let Some(&i) = open.get(&(r.host.as_str(), r.port))
            && r.ts - out[i].ts <= COLLAPSE_WITHIN.as_secs_f64()
            && r.ts >= out[i].ts
        {
            let e = &mut out[i];
            e.first_at.get_or_insert_with(|| e.at.clone());
            e.count += r.times();
            e.ts = r.ts;
            e.at = rfc3339(t);
            continue;
        }
        let why = r.reason.as_deref().unwrap_or("refused");
        let reason = format!(
            "{} {}:{}{} refused ({}): {why}",
            r.method,
            r.host,
            r.port,
            r.path.as_deref().unwrap_or(""),
            r.status
        );
        let mut e = Event::at(t, team, member, EventKind::EgressRefused, &reason);
        e.ts = r.ts;
        // A summary line of a minute's refusals past the ones written one by one.
        e.count = r.times();
        open.insert((r.host.as_str(), r.port), out.len());
        out.push(e);
    }
    out
}

/// Sessions of an agent member whose tasks are events, newest first.
pub const AGENT_SESSIONS: usize = 10;

/// The ended tasks of an agent member's session as events: `agent-done`, or `agent-failed`
/// with why (its error, the tools that failed), at the time each ended (else `fallback`,
/// the session's last change). Text the member wrote comes back escaped.
pub(crate) fn agent_task_events(
    team: &str,
    member: &str,
    agent: &str,
    tasks: &[crate::core::transcript::TaskSummary],
    fallback: SystemTime,
) -> Vec<Event> {
    use crate::core::transcript::{Verdict, first_chars};
    tasks
        .iter()
        .filter_map(|t| {
            let verdict = t.verdict()?;
            let kind = match verdict {
                Verdict::Failed => EventKind::AgentFailed,
                Verdict::Done | Verdict::Running | Verdict::Unknown => EventKind::AgentDone,
            };
            let why = t.why();
            let mut reason = format!("{agent} task {} {}", t.number, verdict.as_str());
            if !why.is_empty() {
                reason.push_str(&format!(": {why}"));
            }
            if !t.prompt.is_empty() {
                reason.push_str(&format!(" (task: {})", first_chars(&t.prompt, 80)));
            }
            let at = t
                .ended_at
                .as_deref()
                .and_then(|a| humantime::parse_rfc3339(a).ok())
                .unwrap_or(fallback);
            Some(Event::at(at, team, member, kind, &reason).shown())
        })
        .collect()
}

/// The tasks of each session read, by file, with its size and time then: a watch
/// (`events -w`) reads again only the session that grew.
#[derive(Debug, Default)]
pub struct SessionCache {
    judged: std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, Judged>>,
}

type Judged = (u64, SystemTime, Vec<crate::core::transcript::TaskSummary>);

impl SessionCache {
    fn tasks(
        &self,
        a: &crate::transcripts::AgentHome,
        s: &crate::transcripts::Session,
    ) -> Vec<crate::core::transcript::TaskSummary> {
        let key = a.transcripts.join(&s.rel);
        let mut judged = self.judged.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((len, at, tasks)) = judged.get(&key)
            && (*len, *at) == (s.len, s.modified)
        {
            return tasks.clone();
        }
        if judged.len() > 4096 {
            judged.clear();
        }
        let tasks = crate::transcripts::judge(a, s);
        judged.insert(key, (s.len, s.modified, tasks.clone()));
        tasks
    }
}

/// The task events of agent member `a`'s newest sessions (`AGENT_SESSIONS`).
fn agent_events(team: &str, a: &crate::transcripts::AgentHome, cache: &SessionCache) -> Vec<Event> {
    let name = match a.kind {
        crate::core::agents::AgentKind::Claude => "claude",
        crate::core::agents::AgentKind::Codex => "codex",
    };
    crate::transcripts::sessions(a)
        .iter()
        .take(AGENT_SESSIONS)
        .flat_map(|s| {
            let tasks = cache.tasks(a, s);
            agent_task_events(team, &shown(&a.member), name, &tasks, s.modified)
        })
        .collect()
}

/// Every event of `team`: its own, its members' egress refusals, and the ended tasks of its
/// agent members `agents` (from their transcripts, through `cache`), by time (newest last;
/// events of one time keep the order they were written in).
pub fn team_events(
    state_dir: &Path,
    team: &str,
    agents: &[crate::transcripts::AgentHome],
    cache: &SessionCache,
) -> Vec<Event> {
    let mut all = read(state_dir, team);
    let members = layout::members_dir(&layout::team_run_dir(state_dir, team));
    if let Ok(entries) = std::fs::read_dir(&members) {
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        for m in names {
            let log = egress_log::read(&layout::egress_log_path(&layout::egress_dir(
                state_dir, team, &m,
            )));
            all.extend(egress_refusals(team, &shown(&m), &log));
        }
    }
    for a in agents {
        all.extend(agent_events(team, a, cache));
    }
    all.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    all
}

/// Says when an event a member can repeat at will (a refused helper request) is worth
/// writing: the first of its key, then at most one per `COLLAPSE_WITHIN`, saying how many
/// were left out since. A member knocking in a loop must not push the team's history out of
/// the bounded file. Keys are few (refusal rules); at most `MAX_KEYS` are kept.
#[derive(Debug, Default)]
pub(crate) struct Quieter {
    seen: std::collections::HashMap<String, (std::time::Instant, u64)>,
}

const MAX_KEYS: usize = 64;

impl Quieter {
    /// `Some(left out since the last written)` to write it now; `None` to leave it out.
    pub(crate) fn admit(&mut self, key: &str, now: std::time::Instant) -> Option<u64> {
        if let Some((last, skipped)) = self.seen.get_mut(key) {
            if now.duration_since(*last) < COLLAPSE_WITHIN {
                *skipped += 1;
                return None;
            }
            let n = *skipped;
            (*last, *skipped) = (now, 0);
            return Some(n);
        }
        if self.seen.len() >= MAX_KEYS {
            self.seen.clear();
        }
        self.seen.insert(key.to_string(), (now, 0));
        Some(0)
    }
}

#[cfg(test)]
mod tests;
