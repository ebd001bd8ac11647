//! A plain MCP client for the board's tests: JSON-RPC lines to `ateam mcp` (a main
//! session's tools) or to a member's socket through its bridge.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// The `initialize` request (id `id`) of a client of the 2025-06-18 protocol.
pub fn init(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}
    }})
}

/// The notification that ends the handshake.
pub fn initialized() -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
}

/// A `tools/call` request.
pub fn call(id: u64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args}})
}

/// One session with the server `command` starts (its stdin and stdout): the calls in order,
/// each answered before the next is sent; their answers.
pub fn session(mut command: Command, calls: &[(&str, Value)]) -> Vec<Value> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the MCP server starts");
    let mut stdin = child.stdin.take().expect("piped");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut send = |v: Value| writeln!(stdin, "{v}").expect("the server reads");
    send(init(0));
    let hello = lines.next();
    assert!(
        matches!(&hello, Some(Ok(_))),
        "no answer to initialize: {hello:?}"
    );
    send(initialized());
    let mut results = Vec::new();
    for (i, (tool, args)) in calls.iter().enumerate() {
        send(call(i as u64 + 1, tool, args.clone()));
        let line = lines.next().expect("an answer").expect("the server writes");
        results.push(serde_json::from_str::<Value>(&line).expect("JSON-RPC"));
    }
    drop(stdin);
    let _ = child.wait();
    results
}

/// A call's text answer, and whether it was an error.
pub fn answer(v: &Value) -> (String, bool) {
    let r = &v["result"];
    let text = r["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let text = if text.is_empty() { v.to_string() } else { text };
    (
        text,
        r["isError"].as_bool().unwrap_or(v.get("error").is_some()),
    )
}

/// A call's answer as JSON; panics when it was refused.
pub fn ok_answer(v: &Value) -> Value {
    let (text, err) = answer(v);
    assert!(!err, "refused: {text}");
    serde_json::from_str(&text).expect("the board answers JSON")
}
