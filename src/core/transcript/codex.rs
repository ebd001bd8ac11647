//! Codex CLI's rollout JSONL: one `{timestamp, type, payload}` per line. Read here:
//! `response_item`s (the assistant's messages, function and custom tool calls and their
//! outputs) and `event_msg`s (the user's message, a command's exit, the end of a task and
//! its error). Everything else (session meta, turn context, token counts, world state) is
//! Codex's bookkeeping. The user's prompt is taken from the event (`item_completed` of a
//! `UserMessage`, or `user_message` in older versions), never from the `response_item`s, which
//! also carry the harness's own context as user messages.

use std::collections::HashMap;

use serde_json::Value;

use super::{Item, bounded, text_of, timestamp};

/// The items of one line. `worked` keeps, by call id, whether a command worked when the
/// event saying so comes before the call's output.
pub(super) fn items(v: &Value, worked: &mut HashMap<String, bool>) -> Vec<Item> {
    let Some(p) = v.get("payload") else {
        return vec![];
    };
    let kind = p.get("type").and_then(Value::as_str);
    match v.get("type").and_then(Value::as_str) {
        Some("response_item") => response_item(p, kind),
        Some("event_msg") => event(v, p, kind, worked),
        _ => vec![],
    }
}

fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "serde_json's Value: what is not the expected shape is read as nothing"
)]
fn response_item(p: &Value, kind: Option<&str>) -> Vec<Item> {
    match kind {
        Some("message") if p.get("role").and_then(Value::as_str) == Some("assistant") => {
            let text: Vec<&str> = p
                .get("content")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter_map(|c| c.get("text").and_then(Value::as_str))
                .collect();
            let text = text.join("\n");
            if text.trim().is_empty() {
                vec![]
            } else {
                vec![Item::Text {
                    text: bounded(&text),
                }]
            }
        }
        Some("function_call") => vec![Item::Call {
            id: s(p, "call_id"),
            tool: s(p, "name"),
            input: text_of(p.get("arguments").unwrap_or(&Value::Null)),
        }],
        Some("custom_tool_call") => vec![Item::Call {
            id: s(p, "call_id"),
            tool: s(p, "name"),
            input: text_of(p.get("input").unwrap_or(&Value::Null)),
        }],
        Some("local_shell_call") => vec![Item::Call {
            id: s(p, "call_id"),
            tool: "local_shell".into(),
            input: text_of(p.get("action").unwrap_or(&Value::Null)),
        }],
        Some("function_call_output" | "custom_tool_call_output") => {
            let out = p.get("output").unwrap_or(&Value::Null);
            // Older versions: `{content, success}`; now: the text.
            let (text, success) = match out {
                Value::Object(o) => (
                    o.get("content").map(text_of).unwrap_or_default(),
                    o.get("success").and_then(Value::as_bool),
                ),
                other => (text_of(other), None),
            };
            let (code, body) = output_body(&text);
            let ok = success.unwrap_or_else(|| code.is_none_or(|c| c == 0));
            let text = match (code, body.trim().is_empty()) {
                (Some(c), true) if c != 0 => format!("exit code {c}"),
                (Some(c), false) if c != 0 => format!("exit code {c}: {body}"),
                _ => body,
            };
            vec![Item::Result {
                id: s(p, "call_id"),
                tool: String::new(),
                ok,
                text,
            }]
        }
        _ => vec![],
    }
}

/// A command's output without the header Codex puts before it (`Chunk ID`, `Wall time`,
/// `Process exited with code N` or `Exit code: N`, ..., `Output:`), and the exit code the
/// header states. Text without such a header is the output.
fn output_body(text: &str) -> (Option<i64>, String) {
    let mut code = None;
    for (i, l) in text.lines().take(8).enumerate() {
        let l = l.trim_end();
        if l == "Output:" {
            let body: Vec<&str> = text.lines().skip(i + 1).collect();
            return (code, body.join("\n"));
        }
        let n = l
            .strip_prefix("Process exited with code ")
            .or_else(|| l.strip_prefix("Exit code: "));
        if let Some(n) = n {
            code = n.trim().parse().ok();
        } else if !l.contains(": ") {
            break;
        }
    }
    (None, text.to_string())
}

fn event(
    v: &Value,
    p: &Value,
    kind: Option<&str>,
    worked: &mut HashMap<String, bool>,
) -> Vec<Item> {
    let at = timestamp(v);
    let mut note = |id: String, ok: bool| {
        if worked.len() >= 4096 {
            worked.clear();
        }
        worked.insert(id, ok);
    };
    match kind {
        Some("item_completed") => {
            let item = p.get("item").unwrap_or(&Value::Null);
            match item.get("type").and_then(Value::as_str) {
                Some("UserMessage") => {
                    let text: Vec<&str> = item
                        .get("content")
                        .and_then(Value::as_array)
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|c| c.get("text").and_then(Value::as_str))
                        .collect();
                    task(&text.join("\n"), at)
                }
                Some("CommandExecution") => {
                    let code = item.get("exit_code").and_then(Value::as_i64);
                    let failed = item.get("status").and_then(Value::as_str) == Some("failed");
                    note(s(item, "id"), !failed && code.is_none_or(|c| c == 0));
                    vec![]
                }
                Some("FileChange" | "PatchApply") => {
                    let failed = item.get("status").and_then(Value::as_str) == Some("failed");
                    note(s(item, "id"), !failed);
                    vec![]
                }
                _ => vec![],
            }
        }
        Some("user_message") => task(&s(p, "message"), at),
        Some("exec_command_end") => {
            let code = p.get("exit_code").and_then(Value::as_i64);
            note(s(p, "call_id"), code.is_none_or(|c| c == 0));
            vec![]
        }
        Some("patch_apply_end") => {
            let ok = p.get("success").and_then(Value::as_bool).unwrap_or(true);
            note(s(p, "call_id"), ok);
            vec![]
        }
        Some("task_complete") => {
            let mut out = Vec::new();
            if let Some(e) = p.get("error").filter(|e| !e.is_null()) {
                let text = e.get("message").map(text_of).unwrap_or_else(|| text_of(e));
                out.push(Item::Error {
                    text,
                    at: at.clone(),
                });
            }
            out.push(Item::End { at });
            out
        }
        Some("turn_aborted") => vec![
            Item::Error {
                text: format!("the turn was aborted ({})", s(p, "reason")),
                at: at.clone(),
            },
            Item::End { at },
        ],
        // (`stream_error` is a retry under way, not an error of the task.)
        Some("error") => vec![Item::Error {
            text: text_of(p.get("message").unwrap_or(&Value::Null)),
            at,
        }],
        _ => vec![],
    }
}

fn task(text: &str, at: Option<String>) -> Vec<Item> {
    if text.trim().is_empty() {
        return vec![];
    }
    vec![Item::Task {
        text: bounded(text),
        at,
    }]
}
