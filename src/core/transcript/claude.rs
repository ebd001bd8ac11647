//! Claude Code's session JSONL: one JSON object per line, `type` saying what it is. Read
//! here: `user` lines (a prompt, or tool results), `assistant` lines (text, tool calls, an
//! API error, the stop reason that ends a turn) and `result` lines (print mode's stream
//! output, should a transcript hold one). Everything else (attachments, request shapes,
//! costs, queue operations) is Claude Code's bookkeeping. Sidechains (a subagent's turns),
//! meta lines and compaction summaries are left out: they are not the member's task.

use serde_json::Value;

use super::{Item, bounded, text_of, timestamp};

/// The items of one line.
pub(super) fn items(v: &Value) -> Vec<Item> {
    let flag = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
    // A subagent's turns, Claude Code's own notes, and the summary it writes when it compacts
    // a long session (it goes on with the same task): not the member's tasks.
    if flag("isSidechain") || flag("isMeta") || flag("isCompactSummary") {
        return vec![];
    }
    match v.get("type").and_then(Value::as_str) {
        Some("user") => user(v),
        Some("assistant") => assistant(v),
        Some("result") => result(v),
        _ => vec![],
    }
}

/// A prompt (text), or the results of tool calls.
#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "serde_json's Value: what is not the expected shape is read as nothing"
)]
fn user(v: &Value) -> Vec<Item> {
    let Some(content) = v.pointer("/message/content") else {
        return vec![];
    };
    let at = timestamp(v);
    match content {
        Value::String(s) => task(s, at),
        Value::Array(blocks) => {
            let results: Vec<Item> = blocks.iter().filter_map(tool_result).collect();
            if !results.is_empty() {
                return results;
            }
            let text: Vec<&str> = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            task(&text.join("\n"), at)
        }
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

fn tool_result(b: &Value) -> Option<Item> {
    if b.get("type").and_then(Value::as_str) != Some("tool_result") {
        return None;
    }
    let text = match b.get("content") {
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => text_of(other),
        None => String::new(),
    };
    Some(Item::Result {
        id: b
            .get("tool_use_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        tool: String::new(),
        ok: !b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
        text: bounded(&text),
    })
}

/// What the agent said and called; an API error; the end of its turn.
fn assistant(v: &Value) -> Vec<Item> {
    let at = timestamp(v);
    let msg = v.get("message").unwrap_or(&Value::Null);
    let blocks = msg
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let said = || {
        blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if v.get("isApiErrorMessage").and_then(Value::as_bool) == Some(true) {
        let text = said();
        let text = if text.is_empty() {
            text_of(v.get("error").unwrap_or(&Value::Null))
        } else {
            text
        };
        return vec![
            Item::Error {
                text: bounded(&text),
                at: at.clone(),
            },
            Item::End { at },
        ];
    }
    // Claude Code's own placeholders ("No response requested.") are not the model's.
    if msg.get("model").and_then(Value::as_str) == Some("<synthetic>") {
        return vec![];
    }
    let mut out = Vec::new();
    let mut called = false;
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                let t = b.get("text").and_then(Value::as_str).unwrap_or("");
                if !t.trim().is_empty() {
                    out.push(Item::Text { text: bounded(t) });
                }
            }
            Some("tool_use") => {
                called = true;
                out.push(Item::Call {
                    id: b
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    tool: b
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_string(),
                    input: text_of(b.get("input").unwrap_or(&Value::Null)),
                });
            }
            _ => {}
        }
    }
    match msg.get("stop_reason").and_then(Value::as_str) {
        Some("end_turn" | "stop_sequence") if !called => out.push(Item::End { at }),
        Some(why @ ("max_tokens" | "refusal" | "model_context_window_exceeded")) if !called => {
            out.push(Item::Error {
                text: format!("the model stopped: {why}"),
                at: at.clone(),
            });
            out.push(Item::End { at });
        }
        _ => {}
    }
    out
}

/// Print mode's final result (`--output-format stream-json`), should a transcript hold one.
fn result(v: &Value) -> Vec<Item> {
    let at = timestamp(v);
    let mut out = Vec::new();
    if v.get("is_error").and_then(Value::as_bool) == Some(true) {
        let text = v
            .get("result")
            .map(text_of)
            .or_else(|| v.get("subtype").map(text_of))
            .unwrap_or_else(|| "error".into());
        out.push(Item::Error {
            text,
            at: at.clone(),
        });
    }
    out.push(Item::End { at });
    out
}
