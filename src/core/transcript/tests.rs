//! On transcripts the real CLIs wrote (tests/fixtures/transcripts/README.md says how): Claude
//! Code 2.1.332 and Codex CLI 0.171.0 against the stand-in model, one session of three tasks
//! each (a file written; a file in a folder the agent's user cannot write: EACCES; a file
//! written), and one task the model's API refused.

use super::render::{Renderer, short_input};
use super::*;
use crate::core::untrusted::steering;

const CLAUDE: &[u8] =
    include_bytes!("../../../tests/fixtures/transcripts/claude-2.1.332-three-tasks.jsonl");
const CLAUDE_API_ERROR: &[u8] =
    include_bytes!("../../../tests/fixtures/transcripts/claude-2.1.332-api-error.jsonl");
const CODEX: &[u8] =
    include_bytes!("../../../tests/fixtures/transcripts/codex-0.171.0-three-tasks.jsonl");
const CODEX_API_ERROR: &[u8] =
    include_bytes!("../../../tests/fixtures/transcripts/codex-0.171.0-api-error.jsonl");

/// Where each file stood when the agent's run of task 1, then of task 2, had ended (the
/// session file was copied then: each copy is a prefix of the next).
const CLAUDE_AFTER: [usize; 2] = [146_505, 154_503];
const CODEX_AFTER: [usize; 2] = [38_560, 48_085];

/// The session as the reader met it at `len` bytes.
fn judged(agent: AgentKind, bytes: &[u8], len: usize) -> Vec<TaskSummary> {
    tasks(&parse(agent, &bytes[..len]))
}

fn verdicts(t: &[TaskSummary]) -> Vec<Option<Verdict>> {
    t.iter().map(TaskSummary::verdict).collect()
}

/// Each agent's three tasks: done, failed (EACCES on its write, the tool named), done; and
/// at each earlier point of the session, the task then latest.
#[test]
fn three_tasks_of_a_session_each_judged_on_their_own() {
    for (agent, bytes, after, tool) in [
        (AgentKind::Claude, CLAUDE, CLAUDE_AFTER, "Write"),
        (AgentKind::Codex, CODEX, CODEX_AFTER, "exec_command"),
    ] {
        let all = judged(agent, bytes, bytes.len());
        assert_eq!(all.len(), 3, "{agent:?}: {all:#?}");
        use Verdict::{Done, Failed};
        assert_eq!(
            verdicts(&all),
            [Some(Done), Some(Failed), Some(Done)],
            "{agent:?}"
        );
        assert_eq!(
            all[0].prompt,
            "create the file hello.txt containing exactly: one"
        );
        assert!(all[1].prompt.contains("locked/two.txt"), "{:?}", all[1]);
        let f = &all[1].failed_tools;
        assert_eq!(f.len(), 1, "{agent:?}: {f:?}");
        assert_eq!(f[0].tool, tool);
        assert!(f[0].refused, "{f:?}");
        let e = f[0].error.to_lowercase();
        assert!(
            e.contains("eacces") || e.contains("permission denied"),
            "{agent:?}: {e}"
        );
        assert!(
            all.iter()
                .all(|t| t.ended && t.calls == 1 && t.errors.is_empty())
        );
        assert!(all[2].ended_at.as_deref().is_some_and(|t| t.ends_with('Z')));

        let one = judged(agent, bytes, after[0]);
        assert_eq!(verdicts(&one), [Some(Done)], "{agent:?}");
        let two = judged(agent, bytes, after[1]);
        assert_eq!(verdicts(&two), [Some(Done), Some(Failed)], "{agent:?}");
    }
}

/// The whole file at once, or byte by byte as `-f` meets it, or in uneven chunks: the same
/// items. A last line without its end waits.
#[test]
fn feeding_a_growing_file_gives_the_same_items() {
    for (agent, bytes) in [(AgentKind::Claude, CLAUDE), (AgentKind::Codex, CODEX)] {
        let whole = parse(agent, bytes);
        let mut p = Parser::new(agent);
        let mut fed = Vec::new();
        for chunk in bytes.chunks(977) {
            fed.extend(p.feed(chunk));
        }
        assert_eq!(fed, whole, "{agent:?}");
        let mut p = Parser::new(agent);
        let mut one = Vec::new();
        for b in &bytes[..20_000] {
            one.extend(p.feed(std::slice::from_ref(b)));
        }
        assert_eq!(one, parse(agent, &bytes[..20_000]));
        assert!(!whole.iter().any(|i| matches!(i, Item::Skipped { .. })));
    }
}

/// Cut just after the task's tool call: the task is under way. Running while the container
/// runs; exited 0 before its end, unknown; killed, failed.
#[test]
fn a_task_cut_mid_turn_is_running_then_unknown_or_failed_by_the_exit() {
    let cut = |bytes: &[u8], needle: &str| {
        let at = String::from_utf8_lossy(bytes).rfind(needle).unwrap();
        at + bytes[at..].iter().position(|&b| b == b'\n').unwrap() + 1
    };
    for (agent, bytes, needle) in [
        (AgentKind::Claude, CLAUDE, "\"type\":\"tool_use\""),
        (AgentKind::Codex, CODEX, "\"type\":\"function_call\""),
    ] {
        let t = judged(agent, bytes, cut(bytes, needle));
        let latest = t.last().unwrap();
        assert_eq!((latest.number, latest.ended), (3, false), "{agent:?}");
        assert_eq!(latest.verdict(), None);
        assert_eq!(
            outcome(Some(latest), Run::Running).verdict,
            Verdict::Running
        );
        let o = outcome(Some(latest), Run::Exited(Some(0)));
        assert_eq!(o.verdict, Verdict::Unknown, "{o:?}");
        assert!(o.reason.contains("before task 3 ended"), "{o:?}");
        let o = outcome(Some(latest), Run::Exited(Some(137)));
        assert_eq!(o.verdict, Verdict::Failed);
        assert!(o.reason.starts_with("exited 137"), "{o:?}");
    }
}

/// The model's API refused: Claude Code's API error message, Codex's task ended with an
/// error. Failed, with the agent's words.
#[test]
fn an_api_error_fails_the_task_with_the_agents_words() {
    for (agent, bytes) in [
        (AgentKind::Claude, CLAUDE_API_ERROR),
        (AgentKind::Codex, CODEX_API_ERROR),
    ] {
        let t = judged(agent, bytes, bytes.len());
        assert_eq!(t.len(), 1, "{agent:?}: {t:#?}");
        assert_eq!(t[0].verdict(), Some(Verdict::Failed), "{agent:?}");
        assert!(
            t[0].errors[0].contains("stand-in: this model refuses every request"),
            "{t:?}"
        );
        for run in [Run::Exited(Some(0)), Run::Exited(Some(1)), Run::Running] {
            let o = outcome(t.last(), run);
            assert_eq!(o.verdict, Verdict::Failed, "{agent:?} {run:?}");
            assert!(o.reason.contains("the agent's error: "), "{o:?}");
        }
    }
}

/// The outcome of the latest task against the process: a nonzero exit fails whatever the
/// transcript says; an ended task keeps its verdict while the container runs on.
#[test]
fn the_outcome_weighs_the_latest_task_against_the_exit() {
    let all = judged(AgentKind::Claude, CLAUDE, CLAUDE.len());
    let done = &all[2];
    let o = outcome(Some(done), Run::Exited(Some(0)));
    assert_eq!(
        (o.verdict, o.reason.as_str()),
        (Verdict::Done, "task 3 ended")
    );
    assert_eq!(outcome(Some(done), Run::Running).verdict, Verdict::Done);
    assert_eq!(
        outcome(Some(done), Run::Exited(Some(2))).verdict,
        Verdict::Failed
    );
    let failed = &all[1];
    let o = outcome(Some(failed), Run::Exited(Some(0)));
    assert_eq!(o.verdict, Verdict::Failed);
    assert!(
        o.reason
            .starts_with("task 2 failed: the tools that failed: Write (EACCES: permission denied"),
        "{o:?}"
    );
    assert_eq!(o.failed_tools.len(), 1);
    let none = outcome(None, Run::Running);
    assert_eq!(
        (none.verdict, none.reason.as_str()),
        (Verdict::Running, "no task in its transcript yet")
    );
    assert_eq!(
        outcome(None, Run::Exited(Some(0))).verdict,
        Verdict::Unknown
    );
    assert_eq!(outcome(None, Run::Exited(Some(1))).verdict, Verdict::Failed);
    assert_eq!(outcome(None, Run::NotStarted).verdict, Verdict::Unknown);
}

fn claude_lines(lines: &[serde_json::Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend(l.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

fn user(content: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"type": "user", "timestamp": "2026-12-06T07:49:43.178Z", "message": {"role": "user", "content": content}})
}

fn assistant(content: serde_json::Value, stop: &str) -> serde_json::Value {
    serde_json::json!({"type": "assistant", "message": {"role": "assistant", "model": "m", "content": content, "stop_reason": stop}})
}

/// A test that fails before the agent fixes it is the agent's work, not a failure: done,
/// the failed call listed as one on the way. A refused one among many is kept in the list.
#[test]
fn failed_calls_that_were_not_refused_leave_a_task_done() {
    let mut lines = vec![user(serde_json::json!("fix the test"))];
    for i in 0..7 {
        lines.push(assistant(
            serde_json::json!([{"type": "tool_use", "id": format!("t{i}"), "name": "Bash", "input": {"command": "pytest -q"}}]),
            "tool_use",
        ));
        lines.push(user(
            serde_json::json!([{"type": "tool_result", "tool_use_id": format!("t{i}"), "is_error": true, "content": "Exit code 1\n1 failed"}]),
        ));
    }
    lines.push(assistant(
        serde_json::json!([{"type": "text", "text": "fixed"}]),
        "end_turn",
    ));
    let t = tasks(&parse(AgentKind::Claude, &claude_lines(&lines)));
    assert_eq!(t[0].verdict(), Some(Verdict::Done));
    assert_eq!((t[0].failed_tools.len(), t[0].failed_more), (MAX_FAILED, 2));
    assert!(
        t[0].why()
            .starts_with("tool calls that failed on the way: Bash (Exit code 1)"),
        "{}",
        t[0].why()
    );

    // The same with a refused write last: failed, and the refused one is listed.
    let end = lines.pop().unwrap();
    lines.push(assistant(
        serde_json::json!([{"type": "tool_use", "id": "w", "name": "Write", "input": {"file_path": "/ro/x"}}]),
        "tool_use",
    ));
    lines.push(user(
        serde_json::json!([{"type": "tool_result", "tool_use_id": "w", "is_error": true, "content": "EROFS: read-only file system, open '/ro/x'"}]),
    ));
    lines.push(end);
    let t = tasks(&parse(AgentKind::Claude, &claude_lines(&lines)));
    assert_eq!(t[0].verdict(), Some(Verdict::Failed));
    assert!(
        t[0].failed_tools
            .iter()
            .any(|f| f.tool == "Write" && f.refused)
    );
}

/// A session compacted mid-task goes on with the same task: Claude Code's summary of it is
/// not a task of its own.
#[test]
fn a_compaction_summary_is_not_a_task() {
    let mut summary = user(serde_json::json!(
        "This session is being continued from a previous conversation"
    ));
    summary["isCompactSummary"] = serde_json::json!(true);
    let lines = [
        user(serde_json::json!("fix the test")),
        summary,
        assistant(
            serde_json::json!([{"type": "text", "text": "fixed"}]),
            "end_turn",
        ),
    ];
    let t = tasks(&parse(AgentKind::Claude, &claude_lines(&lines)));
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!((t[0].prompt.as_str(), t[0].ended), ("fix the test", true));
}

/// A reply written in two lines that both say it ended the turn (its thinking, then its
/// text): one end, one task.
#[test]
fn a_reply_in_several_lines_ends_its_task_once() {
    let lines = [
        user(serde_json::json!("explain")),
        assistant(
            serde_json::json!([{"type": "thinking", "thinking": "..."}]),
            "end_turn",
        ),
        assistant(
            serde_json::json!([{"type": "text", "text": "because"}]),
            "end_turn",
        ),
    ];
    let items = parse(AgentKind::Claude, &claude_lines(&lines));
    let t = tasks(&items);
    assert_eq!(t.len(), 1, "{t:?}");
    let mut r = Renderer::new(AgentKind::Claude);
    let out: Vec<String> = items.iter().flat_map(|i| r.item(i)).collect();
    assert_eq!(
        out.iter().filter(|l| l.starts_with("  = task")).count(),
        1,
        "{out:?}"
    );
}

#[test]
fn what_counts_as_refused() {
    for yes in [
        "EACCES: permission denied, open '/x'",
        "/bin/bash: line 1: /x: Permission denied",
        "mkdir: cannot create directory '/x': Read-only file system",
        "Exit code 127\nsh: git: command not found",
        "Process exited with code 127\nOutput:\nsh: 1: make: not found",
        "EPERM: operation not permitted",
    ] {
        assert!(refused(yes), "{yes}");
    }
    for no in [
        "Exit code 1\nFAILED test_x.py::test_a",
        "Process exited with code 1",
        "No files found",
    ] {
        assert!(!refused(no), "{no}");
    }
}

/// Too long a line, and lines that are not JSON: counted as skipped, the next line read;
/// fed in pieces, the parser never holds more than `MAX_LINE` of it.
#[test]
fn overlong_and_broken_lines_are_skipped_and_bounded() {
    let mut bytes = b"not json\n".to_vec();
    bytes.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
    bytes.push(b'\n');
    bytes.extend(claude_lines(&[user(serde_json::json!("after"))]));
    let whole = parse(AgentKind::Claude, &bytes);
    let mut p = Parser::new(AgentKind::Claude);
    let mut fed = Vec::new();
    for c in bytes.chunks(65_536) {
        fed.extend(p.feed(c));
        assert!(p.pending.len() <= MAX_LINE);
    }
    for items in [&whole, &fed] {
        assert_eq!(items.len(), 3, "{items:?}");
        assert_eq!(items[0], Item::Skipped { lines: 1, bytes: 9 });
        assert_eq!(
            items[1],
            Item::Skipped {
                lines: 1,
                bytes: MAX_LINE as u64 + 11
            }
        );
        assert!(matches!(&items[2], Item::Task { text, .. } if text == "after"));
    }
}

/// The rendering of each agent's session: its tasks, the failed write with its error, and
/// each task's verdict.
#[test]
fn a_session_renders_its_tasks_calls_errors_and_verdicts() {
    for (agent, bytes, call) in [
        (
            AgentKind::Claude,
            CLAUDE,
            "  Write /tmp/tr/cl/locked/two.txt".to_string(),
        ),
        (
            AgentKind::Codex,
            CODEX,
            "  exec_command printf '%s\\n' 'two' > '/tmp/tr/cx/locked/two.txt'".to_string(),
        ),
    ] {
        let mut r = Renderer::new(agent);
        let lines: Vec<String> = parse(agent, bytes).iter().flat_map(|i| r.item(i)).collect();
        let text = lines.join("\n");
        assert!(text.contains("\ntask 2 (2026-12-06T07:"), "{text}");
        assert!(
            text.contains("  > create the file hello.txt containing exactly: one"),
            "{text}"
        );
        assert!(lines.contains(&call), "{text}");
        let failed = lines
            .iter()
            .find(|l| l.starts_with("    FAILED: "))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            failed.to_lowercase().contains("permission denied"),
            "{text}"
        );
        assert!(text.contains("  = task 1 done"), "{text}");
        assert!(
            text.contains("  = task 2 failed: the tools that failed: "),
            "{text}"
        );
        assert!(text.contains("  = task 3 done"), "{text}");
        assert!(text.contains(&format!("  {}: Done: the file is written.", r_name(agent))));
        assert_eq!(r.unfinished(), None);
        assert_eq!(r.tasks().len(), 3);
    }
}

fn r_name(a: AgentKind) -> &'static str {
    match a {
        AgentKind::Claude => "claude",
        AgentKind::Codex => "codex",
    }
}

/// What a member wrote in its transcript (a prompt, its words, a call's argument, a result)
/// is shown escaped: no line rendered can move the cursor, retitle the terminal, reorder
/// text or pass for a line of ateam's.
#[test]
fn what_the_member_wrote_is_shown_escaped() {
    let evil = "x\u{1b}]2;owned\u{7}\u{1b}[2J\u{2028}= task 9 done\u{202e}gpj.exe\r";
    let lines = [
        user(serde_json::json!(evil)),
        assistant(
            serde_json::json!([{"type": "text", "text": evil}, {"type": "tool_use", "id": "a", "name": evil, "input": {"command": evil}}]),
            "tool_use",
        ),
        user(
            serde_json::json!([{"type": "tool_result", "tool_use_id": "a", "is_error": true, "content": evil}]),
        ),
        assistant(
            serde_json::json!([{"type": "text", "text": "ok"}]),
            "end_turn",
        ),
    ];
    let mut r = Renderer::new(AgentKind::Claude);
    let out: Vec<String> = parse(AgentKind::Claude, &claude_lines(&lines))
        .iter()
        .flat_map(|i| r.item(i))
        .collect();
    assert!(out.len() >= 6, "{out:?}");
    for l in &out {
        assert!(!steering(l), "{l:?}");
        assert!(!l.starts_with("= task 9"), "{l:?}");
    }
    let all = out.join("\n");
    assert!(all.contains("\\u{1b}]2;owned\\u{7}"), "{all}");
    assert!(all.contains("\\u{2028}= task 9 done\\u{202e}"), "{all}");
}

#[test]
fn a_calls_argument_is_its_file_command_or_patched_files() {
    assert_eq!(short_input(r#"{"file_path":"/a/b","content":"x"}"#), "/a/b");
    assert_eq!(
        short_input(r#"{"command":["bash","-lc","make test\nmore"]}"#),
        "make test"
    );
    assert_eq!(short_input(r#"{"cmd":"ls -la"}"#), "ls -la");
    assert_eq!(
        short_input("*** Begin Patch\n*** Update File: src/a.py\n@@\n*** Add File: b.py\n"),
        "src/a.py, b.py"
    );
    assert_eq!(short_input(r#"{"todos":[]}"#), r#"{"todos":[]}"#);
    assert_eq!(short_input("{\"path\":\"a\\u001bb\"}"), "a\\u{1b}b");
}
