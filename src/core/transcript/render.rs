//! A transcript's items as lines a person reads (`ateam transcript`, `top`): each task with
//! its prompt, the agent's words, each tool call in short (its tool and main argument), the
//! first lines of what came back (more of an error), and the verdict where a task ends.
//! Every text the member wrote goes through `untrusted::shown`, line by line, as `top` shows
//! a member's output: nothing in it can steer the terminal or pass for a line of ateam's.

use std::borrow::Cow;

use super::{Item, Judge, TaskSummary, Verdict, first_chars};
use crate::core::agents::AgentKind;
use crate::core::untrusted::shown;

/// Lines of a tool's output shown when it worked, and when it failed.
const OK_LINES: usize = 3;
const FAILED_LINES: usize = 8;
/// Characters of one shown line of a tool's output or of a call's argument.
const LINE_CHARS: usize = 300;
const ARG_CHARS: usize = 160;

/// Renders items as they come (a whole file, or a file followed as it grows).
#[derive(Debug)]
pub struct Renderer {
    agent: &'static str,
    judge: Judge,
}

impl Renderer {
    /// A renderer of `agent`'s transcript.
    pub fn new(agent: AgentKind) -> Renderer {
        Renderer {
            agent: match agent {
                AgentKind::Claude => "claude",
                AgentKind::Codex => "codex",
            },
            judge: Judge::default(),
        }
    }

    /// The lines of the next item, already escaped.
    pub fn item(&mut self, item: &Item) -> Vec<String> {
        let ended = self.judge.push(item).cloned();
        match item {
            Item::Task { text, at } => {
                let n = self.judge.tasks().len();
                let mut out = vec![String::new(), task_head(n, at.as_deref())];
                out.extend(block("  > ", "    ", text, usize::MAX));
                out
            }
            Item::Text { text } => {
                let head = format!("  {}: ", self.agent);
                let pad = " ".repeat(head.len());
                block(&head, &pad, text, usize::MAX)
            }
            Item::Call { tool, input, .. } => {
                let arg = short_input(input);
                let tool = esc(tool);
                if arg.is_empty() {
                    vec![format!("  {tool}")]
                } else {
                    vec![format!("  {tool} {arg}")]
                }
            }
            Item::Result { ok, text, .. } => {
                let (head, max) = if *ok {
                    ("    ok: ", OK_LINES)
                } else {
                    ("    FAILED: ", FAILED_LINES)
                };
                let text = if text.trim().is_empty() {
                    "(nothing)"
                } else {
                    text.as_str()
                };
                block(head, "      ", text, max)
            }
            Item::Error { text, .. } => block("  ERROR: ", "    ", text, FAILED_LINES),
            Item::End { .. } => match ended {
                Some(t) => vec![end_line(&t)],
                None => vec![],
            },
            Item::Skipped { lines, bytes } => vec![format!(
                "  ({lines} line{} of {} left out: longer than {} MiB, or not JSON)",
                if *lines == 1 { "" } else { "s" },
                human(*bytes),
                super::MAX_LINE >> 20
            )],
        }
    }

    /// A last line when the latest task has not ended (the agent is at it, or stopped).
    pub fn unfinished(&self) -> Option<String> {
        let t = self.judge.tasks().last()?;
        (!t.ended).then(|| format!("  … task {} has not ended", t.number))
    }

    /// The tasks read so far.
    pub fn tasks(&self) -> &[TaskSummary] {
        self.judge.tasks()
    }
}

fn task_head(n: usize, at: Option<&str>) -> String {
    match at {
        Some(t) => format!("task {n} ({})", esc(t)),
        None => format!("task {n}"),
    }
}

/// The verdict line of an ended task.
fn end_line(t: &TaskSummary) -> String {
    let verdict = t.verdict().unwrap_or(Verdict::Unknown).as_str();
    let why = t.why();
    if why.is_empty() {
        format!("  = task {} {verdict}", t.number)
    } else {
        format!("  = task {} {verdict}: {}", t.number, esc(&why))
    }
}

/// `text` under a head: its first line after `head`, the next after `pad`, at most `max`
/// lines (then how many more), each escaped and at most `LINE_CHARS` long when `max` is
/// bounded (a tool's output); the agent's own words and prompts are shown whole.
fn block(head: &str, pad: &str, text: &str, max: usize) -> Vec<String> {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let mut out: Vec<String> = lines
        .iter()
        .take(max)
        .enumerate()
        .map(|(i, l)| {
            let l: Cow<str> = if max == usize::MAX {
                Cow::Borrowed(l)
            } else {
                Cow::Owned(first_chars(l, LINE_CHARS))
            };
            format!("{}{}", if i == 0 { head } else { pad }, esc(&l))
        })
        .collect();
    if out.is_empty() {
        out.push(head.trim_end().to_string());
    }
    if lines.len() > max {
        out.push(format!("{pad}… {} more lines", lines.len() - max));
    }
    out
}

fn esc(s: &str) -> String {
    shown(s).into_owned()
}

/// A call's main argument, short: the file, command, pattern or address it names; for a
/// patch, the files it touches; else its arguments as written, cut.
pub(crate) fn short_input(input: &str) -> String {
    const KEYS: [&str; 12] = [
        "file_path",
        "path",
        "notebook_path",
        "command",
        "cmd",
        "pattern",
        "url",
        "query",
        "description",
        "prompt",
        "skill",
        "subject",
    ];
    let arg = match serde_json::from_str::<serde_json::Value>(input) {
        Ok(serde_json::Value::Object(o)) => KEYS
            .iter()
            .find_map(|k| o.get(*k).and_then(argument))
            .unwrap_or_else(|| serde_json::Value::Object(o).to_string()),
        Ok(other) => argument(&other).unwrap_or_else(|| other.to_string()),
        Err(_) => patched_files(input).unwrap_or_else(|| super::first_line(input).to_string()),
    };
    esc(&first_chars(super::first_line(&arg), ARG_CHARS))
}

/// A value as an argument: a string, or a command line (`["bash", "-lc", "X"]` is `X`).
#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "serde_json's Value: what is not the expected shape is read as nothing"
)]
fn argument(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(a) => {
            let words: Vec<&str> = a.iter().filter_map(serde_json::Value::as_str).collect();
            match words.as_slice() {
                [shell, flag, script] if shell.ends_with("sh") && flag.starts_with('-') => {
                    Some(script.to_string())
                }
                _ => Some(words.join(" ")),
            }
        }
        _ => None,
    }
}

/// The files an `apply_patch` input touches.
fn patched_files(input: &str) -> Option<String> {
    let files: Vec<&str> = input
        .lines()
        .filter_map(|l| {
            l.strip_prefix("*** Add File: ")
                .or_else(|| l.strip_prefix("*** Update File: "))
                .or_else(|| l.strip_prefix("*** Delete File: "))
        })
        .collect();
    (!files.is_empty()).then(|| files.join(", "))
}

/// Bytes as a person reads them.
fn human(b: u64) -> String {
    match b {
        0..1024 => format!("{b} B"),
        1024..1_048_576 => format!("{:.1} KiB", b as f64 / 1024.0),
        _ => format!("{:.1} MiB", b as f64 / 1_048_576.0),
    }
}
