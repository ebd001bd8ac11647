//! What a coding agent's own transcript says: Claude Code's session JSONL
//! (`<CLAUDE_CONFIG_DIR>/projects/<cwd>/<session>.jsonl`) and Codex CLI's rollout JSONL
//! (`<CODEX_HOME>/sessions/YYYY/MM/DD/rollout-*.jsonl`), read into the same items: the tasks
//! it was given, what it said, the tools it called and what came back, its own errors, the
//! end of each task. Then the verdict of each task, and the outcome of the latest beside the
//! container's state (`outcome`): the agent that exits 0 after every write failed is
//! `failed`, not green.
//!
//! Pure: bytes in, values out, so every rule is tested on transcripts the real CLIs wrote
//! (tests/fixtures/transcripts). Finding and reading the files (bounded, never through a
//! link, never a FIFO) is `crate::transcripts`. Every text here is the member's: it is shown
//! only through `render` (or escaped for JSON), which escapes it as `untrusted::shown` does.
//!
//! A session may hold several tasks (`claude -p --continue`, `codex exec resume`): each
//! user prompt begins one, and the outcome is the latest one's.

mod claude;
mod codex;
pub mod render;

use serde::Serialize;

use crate::core::agents::AgentKind;

/// The longest line read (bytes): longer ones (a huge tool output) are counted as skipped,
/// so a member cannot make a reader hold more than this for one line.
pub(crate) const MAX_LINE: usize = 4 << 20;

/// The longest text kept of one item (bytes); the rest is cut (`…`). A reader shows a few
/// lines of a tool's output anyway.
pub(crate) const MAX_TEXT: usize = 64 << 10;

/// Failed tool calls kept per task (the rest are counted).
pub(crate) const MAX_FAILED: usize = 5;

/// One thing the transcript says, in its order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Item {
    /// A task the agent was given: the user's prompt.
    Task {
        /// The prompt.
        text: String,
        /// When (RFC 3339, UTC), if the line says.
        at: Option<String>,
    },
    /// What the agent said.
    Text {
        /// Its words.
        text: String,
    },
    /// A tool the agent called.
    Call {
        /// The call's id (its result names it).
        id: String,
        /// The tool's name (`Write`, `Bash`, `exec_command`...).
        tool: String,
        /// Its arguments, as the agent wrote them (JSON text, or the tool's own input).
        input: String,
    },
    /// What a tool call gave back.
    Result {
        /// The call's id.
        id: String,
        /// The tool's name, from its call (empty when the call was not read).
        tool: String,
        /// Whether it worked: not an error, not a nonzero exit.
        ok: bool,
        /// What it gave back.
        text: String,
    },
    /// The agent's own error: the model's API refused, a turn aborted.
    Error {
        /// What it said.
        text: String,
        /// When, if the line says.
        at: Option<String>,
    },
    /// The agent's turn ended: its task is over.
    End {
        /// When, if the line says.
        at: Option<String>,
    },
    /// Lines that could not be read: longer than `MAX_LINE`, or not JSON.
    Skipped {
        /// How many.
        lines: u64,
        /// Their bytes.
        bytes: u64,
    },
}

impl Item {
    /// This item with every text the member wrote escaped (`untrusted::shown`), for a
    /// document: JSON escapes control characters but not bidirectional overrides or line
    /// separators.
    pub fn shown(self) -> Item {
        let e = |s: String| crate::core::untrusted::shown(&s).into_owned();
        match self {
            Item::Task { text, at } => Item::Task {
                text: e(text),
                at: at.map(e),
            },
            Item::Text { text } => Item::Text { text: e(text) },
            Item::Call { id, tool, input } => Item::Call {
                id: e(id),
                tool: e(tool),
                input: e(input),
            },
            Item::Result { id, tool, ok, text } => Item::Result {
                id: e(id),
                tool: e(tool),
                ok,
                text: e(text),
            },
            Item::Error { text, at } => Item::Error {
                text: e(text),
                at: at.map(e),
            },
            Item::End { at } => Item::End { at: at.map(e) },
            s @ Item::Skipped { .. } => s,
        }
    }
}

/// Reads an agent's transcript line by line, as it grows. Keeps what a later line needs
/// (which tool a call id names, a Codex command's exit code), bounded.
#[derive(Debug)]
pub struct Parser {
    agent: AgentKind,
    /// Call id -> tool name.
    tools: std::collections::HashMap<String, String>,
    /// Codex: call id -> whether the command worked, when told before its output.
    worked: std::collections::HashMap<String, bool>,
    /// The start of a line whose end has not come yet.
    pending: Vec<u8>,
    /// The pending line went over `MAX_LINE`: drop the rest of it.
    overlong: Option<u64>,
}

/// Calls remembered at most (a member could make ids without end).
const MAX_CALLS: usize = 4096;

impl Parser {
    /// A parser of `agent`'s transcripts.
    pub fn new(agent: AgentKind) -> Parser {
        Parser {
            agent,
            tools: Default::default(),
            worked: Default::default(),
            pending: Vec::new(),
            overlong: None,
        }
    }

    /// Takes in the next bytes of the file: the items of the lines they complete. A line
    /// whose end has not come yet (the agent is writing it) waits for the next bytes.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Item> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = (&rest[..nl], &rest[nl + 1..]);
            rest = tail;
            if let Some(seen) = self.overlong.take() {
                push_skipped(&mut out, seen + head.len() as u64 + 1);
                continue;
            }
            if self.pending.is_empty() {
                out.extend(self.line(head));
            } else {
                let mut line = std::mem::take(&mut self.pending);
                line.extend_from_slice(head);
                out.extend(self.line(&line));
            }
        }
        match &mut self.overlong {
            Some(seen) => *seen += rest.len() as u64,
            None if self.pending.len() + rest.len() > MAX_LINE => {
                self.overlong = Some((self.pending.len() + rest.len()) as u64);
                self.pending = Vec::new();
            }
            None => self.pending.extend_from_slice(rest),
        }
        out
    }

    /// The items of one whole line (without its line end).
    pub fn line(&mut self, line: &[u8]) -> Vec<Item> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return vec![];
        }
        if line.len() > MAX_LINE {
            return vec![skipped(line.len())];
        }
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
            return vec![skipped(line.len())];
        };
        let items = match self.agent {
            AgentKind::Claude => claude::items(&v),
            AgentKind::Codex => codex::items(&v, &mut self.worked),
        };
        items
            .into_iter()
            .map(|i| self.named(i))
            .collect::<Vec<Item>>()
    }

    /// Remembers a call's tool; names the tool of a result.
    fn named(&mut self, item: Item) -> Item {
        match item {
            Item::Call { id, tool, input } => {
                if self.tools.len() >= MAX_CALLS {
                    self.tools.clear();
                }
                self.tools.insert(id.clone(), tool.clone());
                Item::Call { id, tool, input }
            }
            Item::Result { id, tool, ok, text } => {
                let tool = if tool.is_empty() {
                    self.tools.get(&id).cloned().unwrap_or_default()
                } else {
                    tool
                };
                let ok = ok && self.worked.remove(&id).unwrap_or(true);
                Item::Result { id, tool, ok, text }
            }
            other @ (Item::Task { .. }
            | Item::Text { .. }
            | Item::Error { .. }
            | Item::End { .. }
            | Item::Skipped { .. }) => other,
        }
    }
}

fn skipped(len: usize) -> Item {
    Item::Skipped {
        lines: 1,
        bytes: len as u64 + 1,
    }
}

fn push_skipped(out: &mut Vec<Item>, bytes: u64) {
    out.push(Item::Skipped { lines: 1, bytes });
}

/// Every item of the whole lines in `bytes` (a last line without its end is left out).
pub fn parse(agent: AgentKind, bytes: &[u8]) -> Vec<Item> {
    Parser::new(agent).feed(bytes)
}

/// A tool call that failed, as a person reads it: the tool and the first line of its error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailedTool {
    /// The tool's name.
    pub tool: String,
    /// The first line of what it gave back (at most 200 characters).
    pub error: String,
    /// The system refused it (permission denied, a read-only file system, no such command):
    /// the member's grants or image, not the agent's work, stand in its way.
    pub refused: bool,
}

/// What one task came to, as far as the transcript tells.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSummary {
    /// Its number among the tasks read (1 is the first).
    pub number: usize,
    /// Its prompt; empty when it began before what was read.
    pub prompt: String,
    /// When it began, if known.
    pub started_at: Option<String>,
    /// Its turn ended.
    pub ended: bool,
    /// When it ended, if known.
    pub ended_at: Option<String>,
    /// The agent's own errors (at most `MAX_FAILED`).
    pub errors: Vec<String>,
    /// Its failed tool calls (at most `MAX_FAILED`, refused ones first kept).
    pub failed_tools: Vec<FailedTool>,
    /// Failed calls beyond `failed_tools`.
    pub failed_more: usize,
    /// Tool calls made.
    pub calls: usize,
}

/// How a task, or an agent's latest task, came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// Still working at it.
    Running,
    /// Ended without an error of its own and without a refused tool call.
    Done,
    /// The agent said an error, a tool call was refused, or it exited nonzero.
    Failed,
    /// No transcript says (not started, or ended before its task did with exit 0).
    Unknown,
}

impl Verdict {
    /// Its name, as status shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Running => "running",
            Verdict::Done => "done",
            Verdict::Failed => "failed",
            Verdict::Unknown => "unknown",
        }
    }
}

impl TaskSummary {
    /// This summary with every text the member wrote escaped (`Item::shown`).
    pub fn shown(self) -> TaskSummary {
        let e = |s: String| crate::core::untrusted::shown(&s).into_owned();
        TaskSummary {
            prompt: e(self.prompt),
            started_at: self.started_at.map(e),
            ended_at: self.ended_at.map(e),
            errors: self.errors.into_iter().map(e).collect(),
            failed_tools: self
                .failed_tools
                .into_iter()
                .map(|f| FailedTool {
                    tool: e(f.tool),
                    error: e(f.error),
                    refused: f.refused,
                })
                .collect(),
            ..self
        }
    }

    /// Whether a tool call of it was refused.
    pub fn refused(&self) -> bool {
        self.failed_tools.iter().any(|f| f.refused)
    }

    /// Its verdict once ended: failed on an error of the agent's or a refused tool call.
    /// None while it has not ended.
    pub fn verdict(&self) -> Option<Verdict> {
        if !self.ended {
            return None;
        }
        Some(if !self.errors.is_empty() || self.refused() {
            Verdict::Failed
        } else {
            Verdict::Done
        })
    }

    /// Why, in one line: the agent's error, the tools that failed.
    pub fn why(&self) -> String {
        let mut parts = Vec::new();
        if let Some(e) = self.errors.first() {
            parts.push(format!("the agent's error: {e}"));
        }
        let failed: Vec<String> = self
            .failed_tools
            .iter()
            .map(|f| format!("{} ({})", f.tool, f.error))
            .collect();
        if !failed.is_empty() {
            let more = match self.failed_more {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            let what = if self.refused() {
                "the tools that failed"
            } else {
                "tool calls that failed on the way"
            };
            parts.push(format!("{what}: {}{more}", failed.join("; ")));
        }
        parts.join("; ")
    }
}

/// Builds each task's summary as items come (`tasks`, and the renderer as it follows).
#[derive(Debug, Default)]
pub(crate) struct Judge {
    tasks: Vec<TaskSummary>,
    /// A prompt, call, result or error came since the last end.
    busy: bool,
}

impl Judge {
    /// Takes in the next item; returns the task it ended, if it ended one.
    pub fn push(&mut self, item: &Item) -> Option<&TaskSummary> {
        let was_busy = self.busy;
        self.busy = match item {
            Item::Task { .. } | Item::Call { .. } | Item::Result { .. } | Item::Error { .. } => {
                true
            }
            Item::End { .. } => false,
            Item::Text { .. } | Item::Skipped { .. } => was_busy,
        };
        match item {
            Item::Task { text, at } => {
                let number = self.tasks.len() + 1;
                self.tasks.push(TaskSummary {
                    number,
                    prompt: first_chars(text, 200),
                    started_at: at.clone(),
                    ..TaskSummary::default()
                });
                None
            }
            Item::Call { .. } => {
                self.current().calls += 1;
                None
            }
            Item::Result {
                ok: false,
                tool,
                text,
                ..
            } => {
                let t = self.current();
                let f = FailedTool {
                    tool: tool.clone(),
                    error: first_chars(first_line(text), 200),
                    refused: refused(text),
                };
                if t.failed_tools.len() < MAX_FAILED {
                    t.failed_tools.push(f);
                } else if let Some(slot) = f
                    .refused
                    .then(|| t.failed_tools.iter().position(|x| !x.refused))
                    .flatten()
                {
                    // Refused calls say why a task failed: they are kept over the others.
                    t.failed_tools[slot] = f;
                    t.failed_more += 1;
                } else {
                    t.failed_more += 1;
                }
                None
            }
            Item::Error { text, .. } => {
                let t = self.current();
                if t.errors.len() < MAX_FAILED {
                    t.errors.push(first_chars(first_line(text), 300));
                }
                None
            }
            // The end of a task already ended, nothing done since: one reply written in
            // several lines (Claude Code writes a reply's blocks one per line).
            Item::End { .. } if !was_busy && self.tasks.last().is_some_and(|t| t.ended) => None,
            Item::End { at } => {
                let t = self.current();
                t.ended = true;
                t.ended_at = at.clone();
                Some(t)
            }
            Item::Result { ok: true, .. } | Item::Text { .. } | Item::Skipped { .. } => None,
        }
    }

    /// The task items go to now: the last one, or one begun before what was read.
    fn current(&mut self) -> &mut TaskSummary {
        if self.tasks.is_empty() || self.tasks.last().is_some_and(|t| t.ended) {
            // A turn after an ended one without a prompt (a retry), or the start of what
            // was read: a task of its own, its prompt unknown.
            let number = self.tasks.len() + 1;
            self.tasks.push(TaskSummary {
                number,
                ..TaskSummary::default()
            });
        }
        let last = self.tasks.len() - 1;
        &mut self.tasks[last]
    }

    /// The tasks so far.
    pub fn tasks(&self) -> &[TaskSummary] {
        &self.tasks
    }

    /// The tasks, taken.
    pub(crate) fn into_tasks(self) -> Vec<TaskSummary> {
        self.tasks
    }
}

/// Each task of `items`, in order.
pub fn tasks(items: &[Item]) -> Vec<TaskSummary> {
    let mut j = Judge::default();
    for i in items {
        j.push(i);
    }
    j.into_tasks()
}

/// Whether a tool's output says the system refused it: no permission, a read-only file
/// system, a command that is not there or cannot run. What the member's grants and image
/// allow, as opposed to the agent's own work failing (a test that fails, a grep that finds
/// nothing), which agents meet and fix all the time.
pub fn refused(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    const SIGNS: [&str; 9] = [
        "eacces",
        "permission denied",
        "eperm",
        "operation not permitted",
        "erofs",
        "read-only file system",
        "command not found",
        "exit code 126",
        "exit code 127",
    ];
    SIGNS.iter().any(|s| t.contains(s))
        || t.contains("process exited with code 126")
        || t.contains("process exited with code 127")
}

/// How the agent's process stands, as the engine says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// Its container runs.
    Running,
    /// Its container exited, with this code if the engine said one.
    Exited(Option<i64>),
    /// No container, or one not started.
    NotStarted,
}

/// An agent member's outcome: its latest task's, beside its process.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// What it came to.
    pub verdict: Verdict,
    /// Why, in one line.
    pub reason: String,
    /// The failed tool calls of the latest task.
    pub failed_tools: Vec<FailedTool>,
}

/// The outcome of an agent whose latest task is `latest` (none: no task in its transcript)
/// and whose process is `run`. A nonzero exit is failed whatever the transcript says; an
/// ended task is done or failed by its own verdict, even while the container still runs (an
/// agent that takes tasks one after another); a task not ended is running while the process
/// runs, and unknown once it exited 0.
pub fn outcome(latest: Option<&TaskSummary>, run: Run) -> Outcome {
    let failed_tools = latest.map(|t| t.failed_tools.clone()).unwrap_or_default();
    let why = latest.map(TaskSummary::why).unwrap_or_default();
    let task = latest.map(|t| format!("task {}", t.number));
    let with = |head: String| {
        if why.is_empty() {
            head
        } else {
            format!("{head}: {why}")
        }
    };
    let (verdict, reason) = match (run, latest.and_then(TaskSummary::verdict)) {
        (Run::Exited(Some(code)), _) if code != 0 => {
            (Verdict::Failed, with(format!("exited {code}")))
        }
        (_, Some(Verdict::Failed)) => (
            Verdict::Failed,
            with(format!("{} failed", task.unwrap_or_default())),
        ),
        (_, Some(v @ (Verdict::Done | Verdict::Running | Verdict::Unknown))) => {
            (v, with(format!("{} ended", task.unwrap_or_default())))
        }
        (Run::Running, None) => (
            Verdict::Running,
            match task {
                Some(t) => with(format!("{t} under way")),
                None => "no task in its transcript yet".into(),
            },
        ),
        (Run::Exited(_), None) if latest.is_some_and(TaskSummary::refused) => {
            (Verdict::Failed, with("exited before its task ended".into()))
        }
        (Run::Exited(_), None) => (
            Verdict::Unknown,
            match task {
                Some(t) => with(format!("exited before {t} ended in its transcript")),
                None => "exited; no task in its transcript".into(),
            },
        ),
        (Run::NotStarted, None) => (Verdict::Unknown, "not running".into()),
    };
    Outcome {
        verdict,
        reason,
        failed_tools,
    }
}

/// The first line of a text an agent wrote, for a one-line summary.
pub fn first_line(s: &str) -> &str {
    s.trim_start().lines().next().unwrap_or("")
}

/// At most `n` characters of `s`, `…` where cut.
pub(crate) fn first_chars(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        None => s.to_string(),
        Some((end, _)) => format!("{}…", &s[..end]),
    }
}

/// At most `MAX_TEXT` bytes of `s`, cut at a character boundary, `…` where cut.
fn bounded(s: &str) -> String {
    if s.len() <= MAX_TEXT {
        return s.to_string();
    }
    let mut end = MAX_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A line's `timestamp` (RFC 3339), as whole seconds in UTC.
fn timestamp(v: &serde_json::Value) -> Option<String> {
    let t = humantime::parse_rfc3339(v.get("timestamp")?.as_str()?).ok()?;
    Some(crate::core::container::rfc3339(t))
}

/// A JSON value as text: a string as it is, anything else as compact JSON.
#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "serde_json's Value: what is not the expected shape is read as nothing"
)]
fn text_of(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => bounded(s),
        other => bounded(&other.to_string()),
    }
}

#[cfg(test)]
mod tests;
