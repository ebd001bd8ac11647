#!/usr/bin/env python3
"""A stand-in for the remote model, for the real-agent tests (tests/agents.rs) and
scripts/bench-agents.py: a fake of the model's API only, never of ateam.

It speaks the two wire formats the agents use, streaming (server-sent events) or not:
  POST /v1/messages               Anthropic Messages (Claude Code), and .../count_tokens
  POST /v1/responses              OpenAI Responses (Codex CLI)
  GET  /v1/models                 both families' model lists (Codex refreshes it)
and plays a scripted conversation. The task is read from the user's prompt, which says one of

    create the file PATH containing exactly: SOME TEXT
    fix the failing test: run `CMD`, write `PATH` as `TEXT`, run the tests again, and commit as `MSG`

(PATH absolute, or relative to the working directory the agent states in its request).

"create the file": a tool call that writes SOME TEXT into /ABS/PATH (Claude Code's `Write`;
Codex's `shell_command`, `shell` or `exec_command`, whichever the request offers); once the
request carries the tool's result, a short text answer and the end of the turn.
A session that goes on with another task (`claude -p --continue`, `codex exec resume`)
holds several: the latest is played, and every response and tool call has ids of its own
(Claude Code merges messages of one id).

"fix the failing test", one tool call per request, each after the result of the one before
(a developer's loop): run CMD with the shell tool (step `run-tests`); only if its output shows
failing tests, write TEXT into PATH (`fix`; Claude Code reads the file first, `read`, as its
Write tool wants); run CMD again (`rerun-tests`); only if its output now shows passing tests,
`git add PATH && git commit -m MSG` (`commit`); then the final answer (`done`). Tests that do
not fail first, or still fail after the fix, end the turn there with a text that says so
(`stopped`). pytest's summary tells: `N failed` (or `Exit code: 1..`) is red, `N passed`
without failures green.

A request without a task (a title, a quota probe) gets a one-word text answer.

The prompt may also say `run the command: CMD` (CMD up to the end of its line, or up to
`, then `): that comes first, as a shell tool call (Claude Code's `Bash`; Codex's shell tool),
and the file after it; the request that carries the last tool's result ends the turn.


Every request is appended to --log as one JSON line (time, method, path, host header, user
agent, the API key it sent, which family, which step, how many task sentences it carried, with a login provider `auth`: what it made of the bearer, and `tool_result`: the text of the last
tool result it carried, cut at 4000 characters) so a test can tell when the first model
request came, that nothing else was asked, and what the agent's tools answered. Standard
library only.

With --login-dir it also plays the login provider of subscription logins (a fake of the
vendors' OAuth token endpoints): one Claude and one ChatGPT login, written at start into
DIR as the agents write them on a host (`claude-credentials.json`, Claude Code's
`.credentials.json`; `codex-auth.json`, Codex's `auth.json`), whose access tokens end after
--login-ttl seconds. `POST /v1/oauth/token` (Claude's shape) and `POST /oauth/token`
(OpenAI's) take a refresh token, answer new tokens and spend it: a refresh token is good
once, a used or unknown one gets 400 `invalid_grant`. The model side then takes only the
current access token of its family (the one before it for --login-grace seconds after it
was replaced: requests in flight), Codex's with the real `chatgpt-account-id`; any other
bearer (a placeholder, an old or ended token, an API key) gets 401. Every token issued is
logged (`family: login, step: issued`), every check (`auth: ok` or why not).

Usage: model_server.py [--host 127.0.0.1] [--port 0] [--log FILE] [--port-file FILE]
    [--login-dir DIR [--login-ttl SECONDS] [--login-grace SECONDS]]
(port 0: any free port, written to --port-file and printed as `listening on HOST:PORT`).
"""

import argparse
import base64
import itertools
import json
import os
import re
import secrets
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TASK = re.compile(r"create the file (\S+) containing exactly: ([^\n\"\\]+)")
FIX = re.compile(
    r"fix the failing test: run `([^`]+)`, write `([^`]+)` as `([^`]+)`, "
    r"run the tests again, and commit as `([^`]+)`"
)
RUN = re.compile(r"run the command: (.+?)(?:, then |\n|\"|$)")
# A call of one of the team's MCP tools (ateam's board): `use the team tool TOOL with {JSON}`,
# the JSON without `;`, several in a row separated by `;`.
TEAM = re.compile(r"use the team tool (\w+) with (?=\{)")
# ateam's wake of an agent whose board has news for it (core::agents::WAKE_TASK): the model
# reads its messages.
WAKE = re.compile(r"There is news for you on the team board")
# Where the agent works, as each says it in its request: Claude Code's environment block,
# Codex's environment context. A task's relative path is taken from there.
CWD = re.compile(r"(?:working directory: |<cwd>)(/[^\s<\"\\]+)", re.IGNORECASE)
MODEL = "stand-in-model"
# Ids of responses and tool calls: unique, also across runs of the stand-in.
IDS = itertools.count(1)
RUN_ID = uuid.uuid4().hex[:8]


def new_id(kind):
    return f"{kind}_standin_{RUN_ID}_{next(IDS)}"


def find_command(body):
    """The command of the last `run the command:` sentence in the request, or None."""
    found = list(RUN.finditer(flat_text(body)))
    return found[-1].group(1).strip() if found else None


def latest_prompt(body):
    """The text of the user's latest own message (not a tool result): a continued session
    carries its earlier prompts before it."""
    for m in reversed(body.get("messages") or body.get("input") or []):
        if not isinstance(m, dict) or m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            return content
        blocks = content if isinstance(content, list) else []
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
            continue
        texts = [b.get("text", "") for b in blocks if isinstance(b, dict)]
        if any(TEAM.search(t) or WAKE.search(t) or TASK.search(t) for t in texts):
            return "\n".join(texts)
    return ""


def find_team_calls(body):
    """[(tool, arguments)] of every `use the team tool` sentence of the latest prompt, in
    order, each once (a prompt may be carried twice in one request)."""
    out, seen = [], set()
    flat = latest_prompt(body)
    found = []
    for m in TEAM.finditer(flat):
        rest = flat[m.end() : m.end() + 20000].split(";")[0]
        try:
            args, _ = json.JSONDecoder().raw_decode(rest)
        except ValueError:
            continue
        found.append((m.start(), m.group(1), args))
    found += [(m.start(), "team_message", {"action": "history"}) for m in WAKE.finditer(flat)]
    for _, tool, args in sorted(found, key=lambda f: f[0]):
        key = (tool, json.dumps(args, sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append((tool, args))
    return out


def team_prompt_is_latest(body):
    """Whether the latest prompt is one of team tool calls (or ateam's wake)."""
    return bool(find_team_calls(body))


def searched_since_prompt(body):
    """Whether the agent already called ToolSearch after the user's last own message."""
    called = False
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        blocks = m.get("content") if isinstance(m.get("content"), list) else []
        if m.get("role") == "user" and not any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks
        ):
            called = False
        if m.get("role") == "assistant":
            called = called or any(
                isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") == "ToolSearch"
                for b in blocks
            )
    return called


def tool_named(names, tool):
    """The name the agent gives the MCP tool `tool` (Claude Code: `mcp__team__team_task`)."""
    return next((n for n in names if n == tool or n.endswith("__" + tool)), None)


def namespaced(tools):
    """{qualified name: (namespace, name)} of the tools offered inside namespaces (Codex
    offers an MCP server's tools as a namespace `mcp__SERVER`)."""
    out = {}
    for t in tools or []:
        if isinstance(t, dict) and t.get("name"):
            for inner in t.get("tools") or []:
                if isinstance(inner, dict) and inner.get("name"):
                    out[t["name"] + "__" + inner["name"]] = (t["name"], inner["name"])
    return out


def tool_names(tools):
    """Every tool name offered, those inside namespaces qualified by it."""
    names = [t["name"] for t in tools or [] if isinstance(t, dict) and t.get("name")]
    return names + list(namespaced(tools))


def absolute(path, flat):
    """`path`, resolved against the working directory the agent states when relative."""
    if path.startswith("/"):
        return path
    cwd = CWD.search(flat)
    if not cwd:
        return None
    return cwd.group(1).rstrip("/") + "/" + path.removeprefix("./")


def flat_text(body):
    return json.dumps(body, ensure_ascii=False).replace("\\n", "\n")


def find_fix(body):
    """(command, abs path, text, message) of a "fix the failing test" task, or None."""
    flat = flat_text(body)
    m = FIX.search(flat)
    if not m:
        return None
    path = absolute(m.group(2), flat)
    if not path:
        return None
    unq = lambda s: s.replace('\\"', '"')  # noqa: E731  (the JSON dump escaped quotes)
    return (unq(m.group(1)), path, unq(m.group(3)), unq(m.group(4)))


RED = re.compile(r"\b\d+ failed\b|\bExit code:? [1-9]")
GREEN = re.compile(r"\b\d+ passed\b")


def tests_fail(output):
    return bool(RED.search(output or ""))


def tests_pass(output):
    return bool(GREEN.search(output or "")) and not tests_fail(output)


def fix_plan(fix, results, read_first):
    """The next step of the "fix the failing test" loop after `results` (the tool results so
    far, oldest first): (step, tool, argument) with tool `shell`, `read` or `write`, or
    (step, None, final text)."""
    cmd, path, text, msg = fix
    steps = [("run-tests", "shell", cmd)]
    if read_first:
        steps.append(("read", "read", path))
    steps += [
        ("fix", "write", (path, text)),
        ("rerun-tests", "shell", cmd),
        ("commit", "shell", "git add -- " + shquote(path) + " && git commit -q -m " + shquote(msg)),
    ]
    n = len(results)
    if n == 1 and not tests_fail(results[0]):
        return "stopped", None, "The tests do not fail: nothing to fix."
    if n == len(steps) - 1 and not tests_pass(results[-1]):
        return "stopped", None, "The tests still fail after the fix: not committed."
    if n < len(steps):
        return steps[n]
    return "done", None, f"Fixed the failing test and committed: {msg}"


def find_task(body):
    """(path, text) of the last task sentence in the request (a continued session carries
    the earlier ones before it), or None. A relative path is resolved against the working
    directory the agent states."""
    flat = flat_text(body)
    found = list(TASK.finditer(flat))
    if not found:
        return None
    m = found[-1]
    path = absolute(m.group(1), flat)
    if not path:
        return None
    return (path, m.group(2).rstrip())


# ------------------------------------------------------------------ Anthropic Messages


def anthropic_tool_results(body):
    """How many tool results came after the user's last own message (each step of the script
    is one): in a continued session the earlier tasks' results come before it."""
    n = 0
    for m in body.get("messages") or []:
        if not isinstance(m, dict) or m.get("role") != "user":
            continue
        content = m.get("content")
        blocks = content if isinstance(content, list) else []
        results = sum(1 for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result")
        n = n + results if results else 0
    return n


def result_text(content):
    """The text of a tool result, as a string or as a list of blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b.get("text", "") if isinstance(b, dict) else str(b) for b in content
        )
    if isinstance(content, dict):
        return result_text(content.get("content") or content.get("output") or "")
    return ""


def anthropic_results(body):
    """The texts of every tool result in the conversation, oldest first."""
    out = []
    for m in body.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        if m.get("role") == "user" and isinstance(content, list):
            out += [
                result_text(b.get("content"))
                for b in content
                if isinstance(b, dict) and b.get("type") == "tool_result"
            ]
    return out


def anthropic_fix(fix, results):
    step, tool, arg = fix_plan(fix, results, read_first=True)
    if tool is None:
        return step, [{"type": "text", "text": arg}], "end_turn"
    name, args = {
        "shell": lambda: ("Bash", {"command": arg, "description": step}),
        "read": lambda: ("Read", {"file_path": arg}),
        "write": lambda: ("Write", {"file_path": arg[0], "content": arg[1] + "\n"}),
    }[tool]()
    block = {"type": "tool_use", "id": "toolu_standin_" + uuid.uuid4().hex, "name": name, "input": args}
    return step, [block], "tool_use"


# Every tool call gets an id of its own: a continued session holds the earlier ones, and an
# agent pairs each result with its call by id.
def anthropic_plan(body):
    """(step, content blocks, stop_reason) for this request."""
    tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    fix = find_fix(body)
    if fix and {"Bash", "Read", "Write"} <= tools:
        return anthropic_fix(fix, anthropic_results(body))
    task, command = find_task(body), find_command(body)
    team_calls = find_team_calls(body) if team_prompt_is_latest(body) else []
    if team_calls:
        task = None
    steps = []
    if command and "Bash" in tools:
        steps.append(("command", "Bash", {"command": command, "description": "run the command"}))
    missing = any(not tool_named(tools, t) for t, _ in team_calls)
    if team_calls and (("ToolSearch" in tools and missing) or searched_since_prompt(body)):
        # Claude Code defers MCP tools: a model loads them with its ToolSearch tool first.
        wanted = sorted({"mcp__team__" + t for t, _ in team_calls})
        query = {"query": "select:" + ",".join(wanted), "max_results": len(wanted)}
        steps.append(("tool-search", "ToolSearch", query))
    for tool, args in team_calls:
        name = tool_named(tools, tool) or ("mcp__team__" + tool if "ToolSearch" in tools else None)
        if name:
            steps.append(("team-tool", name, args))
    if task and "Write" in tools:
        path, text = task
        steps.append(("tool", "Write", {"file_path": path, "content": text + "\n"}))
    done = anthropic_tool_results(body)
    if done and done >= len(steps):
        return "done", [{"type": "text", "text": "Done: the file is written."}], "end_turn"
    if steps:
        step, name, args = steps[done]
        block = {"type": "tool_use", "id": "toolu_standin_" + uuid.uuid4().hex, "name": name, "input": args}
        return step, [block], "tool_use"
    return "other", [{"type": "text", "text": "OK"}], "end_turn"


def anthropic_message(blocks, stop):
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 10},
    }


def anthropic_events(blocks, stop):
    """The SSE events of one streamed message: start, each block, delta, stop."""
    start = anthropic_message([], None)
    start["usage"] = {"input_tokens": 10, "output_tokens": 1}
    yield "message_start", {"type": "message_start", "message": start}
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            yield "content_block_start", {
                "type": "content_block_start",
                "index": i,
                "content_block": {"type": "text", "text": ""},
            }
            delta = {"type": "text_delta", "text": b["text"]}
        else:
            head = dict(b, input={})
            yield "content_block_start", {
                "type": "content_block_start",
                "index": i,
                "content_block": head,
            }
            delta = {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}
        yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield "message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": 10},
    }
    yield "message_stop", {"type": "message_stop"}


# ------------------------------------------------------------------ OpenAI Responses


def openai_tool_outputs(body):
    """How many tool outputs came after the user's last message (each step of the script is
    one): in a continued session the earlier tasks' outputs come before it."""
    items = body.get("input")
    if not isinstance(items, list):
        return 0
    users = [n for n, i in enumerate(items) if isinstance(i, dict) and i.get("role") == "user"]
    since = items[users[-1] + 1 :] if users else items
    return sum(
        1
        for i in since
        if isinstance(i, dict) and i.get("type") in ("function_call_output", "custom_tool_call_output")
    )


def code_mode(body):
    """Whether the request offers Codex's "code mode" only: its interactive UI sends no
    `tools`, but an `additional_tools` input item whose custom `exec` tool runs JavaScript
    that calls the shell tools (`tools.exec_command`)."""
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            for ns in item.get("tools") or []:
                for t in (ns.get("tools") or []) if isinstance(ns, dict) else []:
                    if isinstance(t, dict) and t.get("type") == "custom" and t.get("name") == "exec":
                        return True
    return False


def shell_call(tools, path, text, body=None):
    """A function call item that writes the file with the first shell tool offered."""
    return script_call(tools, "printf '%s\\n' " + shquote(text) + " > " + shquote(path), body)


def script_call(tools, script, body=None):
    """A call of the first shell tool offered, or of Codex's code mode, that runs `script`."""
    if not tools and body is not None and code_mode(body):
        js = "const r = await tools.exec_command({cmd: " + json.dumps(script) + "});\n"
        js += "text(JSON.stringify(r));\n"
        return {
            "type": "custom_tool_call",
            "id": "ctc_standin_" + uuid.uuid4().hex,
            "call_id": "call_standin_" + uuid.uuid4().hex,
            "name": "exec",
            "input": js,
            "status": "completed",
        }
    return shell_run(tools, script)


def shell_run(tools, script):
    """A function call item that runs `script` with the first shell tool offered."""
    names = {t.get("name") for t in tools if isinstance(t, dict)}
    if "shell_command" in names:
        name, args = "shell_command", {"command": script}
    elif "shell" in names:
        name, args = "shell", {"command": ["bash", "-lc", script]}
    elif "exec_command" in names:
        name, args = "exec_command", {"cmd": script}
    else:
        return None
    n = new_id("call")
    return {
        "type": "function_call",
        "id": "fc_standin_" + uuid.uuid4().hex,
        "call_id": "call_standin_" + uuid.uuid4().hex,
        "name": name,
        "arguments": json.dumps(args),
        "status": "completed",
    }


def function_call(name, args, namespace=None):
    """A function call item of the tool `name`, in `namespace` if it is in one (an MCP
    tool, as Codex offers it)."""
    item = {
        "type": "function_call",
        "id": "fc_standin_" + uuid.uuid4().hex,
        "call_id": "call_standin_" + uuid.uuid4().hex,
        "name": name,
        "arguments": json.dumps(args),
        "status": "completed",
    }
    if namespace:
        item["namespace"] = namespace
    return item


def shquote(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


def openai_text_item(text):
    return {
        "type": "message",
        "id": new_id("msg"),
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def openai_results(body):
    """The texts of every tool output in the conversation, oldest first."""
    items = body.get("input")
    if not isinstance(items, list):
        return []
    return [
        result_text(i.get("output"))
        for i in items
        if isinstance(i, dict)
        and i.get("type") in ("function_call_output", "custom_tool_call_output")
    ]


def openai_fix(tools, fix, results):
    step, tool, arg = fix_plan(fix, results, read_first=False)
    if tool is None:
        return step, [openai_text_item(arg)]
    script = arg if tool == "shell" else "printf '%s\\n' " + shquote(arg[1]) + " > " + shquote(arg[0])
    call = shell_run(tools, script)
    if call is None:
        return "other", [openai_text_item("OK")]
    return step, [call]


def openai_plan(body):
    """(step, output items) for this request."""
    fix = find_fix(body)
    if fix and body.get("tools"):
        return openai_fix(body.get("tools"), fix, openai_results(body))
    tools = body.get("tools") or []
    task, command = find_task(body), find_command(body)
    team_calls = find_team_calls(body) if team_prompt_is_latest(body) else []
    if team_calls:
        task = None
    steps = []
    if command:
        steps.append(("command", lambda: script_call(tools, command, body)))
    for tool, args in team_calls:
        name = tool_named(tool_names(tools), tool)
        if name:
            ns, inner = namespaced(tools).get(name, (None, name))
            steps.append(("team-tool", lambda n=inner, a=args, s=ns: function_call(n, a, s)))
    if task:
        steps.append(("tool", lambda: shell_call(tools, *task, body=body)))
    done = openai_tool_outputs(body)
    if done and done >= len(steps):
        return "done", [openai_text_item("Done: the file is written.")]
    if steps:
        step, make = steps[done]
        call = make()
        if call:
            return step, [call]
    return "other", [openai_text_item("OK")]


def openai_response(items, status, rid=None):
    return {
        "id": rid or new_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": MODEL,
        "output": items,
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 20,
        },
    }


def openai_events(items):
    rid = new_id("resp")
    yield "response.created", {
        "type": "response.created",
        "response": openai_response([], "in_progress", rid),
    }
    for i, item in enumerate(items):
        yield "response.output_item.added", {
            "type": "response.output_item.added",
            "output_index": i,
            "item": item,
        }
        if item["type"] == "message":
            yield "response.output_text.delta", {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": i,
                "content_index": 0,
                "delta": item["content"][0]["text"],
            }
        yield "response.output_item.done", {
            "type": "response.output_item.done",
            "output_index": i,
            "item": item,
        }
    yield "response.completed", {
        "type": "response.completed",
        "response": openai_response(items, "completed", rid),
    }


# ------------------------------------------------------------------ login provider

OPENAI_AUTH = "https://api.openai.com/auth"
# Where each family's login is refreshed (the vendors' paths).
TOKEN_PATHS = {"/v1/oauth/token": "claude", "/oauth/token": "codex"}


def b64url(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def fake_jwt(claims):
    """A JWT-shaped token (signed by nobody: nothing here verifies one)."""
    head = b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": "standin"}).encode())
    return f"{head}.{b64url(json.dumps(claims).encode())}.{b64url(secrets.token_bytes(16))}"


class LoginProvider:
    """A fake of the vendors' login providers: one login per family ("claude", "codex"),
    its refresh token good once (rotated by each refresh), its access token good until it
    ends, and until the next one is issued (then for `grace` seconds more)."""

    ACCOUNT = "acct-standin-real"
    PLAN = "pro"

    def __init__(self, ttl, grace, log):
        self.ttl, self.grace, self.log = ttl, grace, log
        self.lock = threading.Lock()
        self.logins = {}
        self.spent = set()
        for family in ("claude", "codex"):
            self.logins[family] = {"gen": 0, "access": None, "refresh": None, "ends": 0, "before": None}
            self.issue(family)

    def issue(self, family):
        """New tokens for `family` (the caller holds the lock, or it is the start)."""
        login = self.logins[family]
        now = time.time()
        if login["access"]:
            login["before"] = (login["access"], min(login["ends"], now + self.grace))
        login["gen"] += 1
        gen = login["gen"]
        if family == "claude":
            login["access"] = f"sk-ant-oat01-standin-real-{gen}-{secrets.token_hex(12)}"
            login["refresh"] = f"sk-ant-ort01-standin-real-{gen}-{secrets.token_hex(12)}"
        else:
            auth = {"chatgpt_account_id": self.ACCOUNT, "chatgpt_plan_type": self.PLAN}
            login["access"] = fake_jwt({"exp": int(now + self.ttl), "gen": gen, OPENAI_AUTH: auth})
            login["id"] = fake_jwt({"exp": int(now + self.ttl), "email": "person@example.com", OPENAI_AUTH: auth})
            login["refresh"] = f"rt_standin_real_{gen}_{secrets.token_hex(12)}"
        login["ends"] = now + self.ttl
        self.log({"family": "login", "step": "issued", "login": family, "gen": gen,
                  "access_token": login["access"], "refresh_token": login["refresh"]})
        return login

    def refresh(self, family, token):
        """(status, answer) of a refresh with `token`."""
        with self.lock:
            login = self.logins[family]
            if token != login["refresh"]:
                why = "spent" if token in self.spent else "unknown"
                self.log({"family": "login", "step": "refused", "login": family, "why": why})
                return 400, {"error": "invalid_grant", "error_description": f"refresh token {why}"}
            self.spent.add(token)
            login = self.issue(family)
            answer = {"access_token": login["access"], "refresh_token": login["refresh"],
                      "expires_in": int(self.ttl), "token_type": "Bearer"}
            if family == "claude":
                answer["scope"] = "user:inference user:profile"
            else:
                answer["id_token"] = login["id"]
            self.log({"family": "login", "step": "refresh", "login": family, "gen": login["gen"]})
            return 200, answer

    def check(self, families, authorization, account):
        """(ok, why) of a model request's bearer, for any of `families`."""
        token = authorization[7:] if authorization.startswith("Bearer ") else ""
        now = time.time()
        with self.lock:
            for family in families:
                login = self.logins[family]
                before = login["before"]
                current = token == login["access"] and now < login["ends"]
                recent = before is not None and token == before[0] and now < before[1]
                if not (current or recent):
                    continue
                if family == "codex" and account != self.ACCOUNT:
                    return False, f"chatgpt-account-id {account!r} is not the login's account"
                return True, f"{family} gen {login['gen'] - (0 if current else 1)}"
        return False, "not a current access token of a login"

    def files(self):
        """The logins as the agents keep them on a host."""
        c, x = self.logins["claude"], self.logins["codex"]
        claude = {"claudeAiOauth": {"accessToken": c["access"], "refreshToken": c["refresh"],
                                    "expiresAt": int(c["ends"] * 1000),
                                    "scopes": ["user:inference", "user:profile"],
                                    "subscriptionType": "max"}}
        codex = {"OPENAI_API_KEY": None, "tokens": {"id_token": x["id"], "access_token": x["access"],
                                                    "refresh_token": x["refresh"], "account_id": self.ACCOUNT},
                 "last_refresh": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        return {"claude-credentials.json": claude, "codex-auth.json": codex}


# ------------------------------------------------------------------ HTTP


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ateam-model-standin/1"

    def log_message(self, fmt, *args):  # the JSON log says it all
        pass

    def record(self, family, step, body=None, **more):
        entry = {
            "t": time.time(),
            "method": self.command,
            "path": self.path,
            "host": self.headers.get("Host", ""),
            "user_agent": self.headers.get("User-Agent", ""),
            "api_key": self.api_key(),
            "family": family,
            "step": step,
            # How many task sentences the request carried: more than one is a continued
            # session (`ateam task`), its earlier tasks in its history.
            "tasks": len(TASK.findall(json.dumps(body or {}, ensure_ascii=False))),
            "tools": tool_names((body or {}).get("tools")),
            **more,
        }
        results = []
        if family == "anthropic" and body:
            results = anthropic_results(body)
        elif family == "openai" and body:
            results = openai_results(body)
        if results:
            entry["tool_result"] = results[-1][:4000]
        append_log(self.server, entry)

    def authorized(self, families):
        """With a login provider: whether the bearer is a current access token of one of
        `families` (else 401 is sent and logged). Without one: any key will do."""
        provider = self.server.login
        if not provider:
            return True
        ok, why = provider.check(
            families, self.headers.get("Authorization", ""), self.headers.get("chatgpt-account-id")
        )
        self.auth = ("ok: " if ok else "") + why
        if ok:
            return True
        self.body()
        self.record("+".join(families), "401", auth=why)
        err = {"type": "authentication_error", "message": "invalid or expired token: " + why}
        self.send_json(401, {"type": "error", "error": err})
        return False

    def token_endpoint(self, family):
        """A refresh at the fake login provider."""
        body = self.body()
        if not self.server.login:
            self.record("unknown", "404")
            return self.send_json(404, {"error": {"type": "not_found", "message": self.path}})
        if body.get("grant_type") != "refresh_token":
            return self.send_json(400, {"error": "unsupported_grant_type"})
        code, answer = self.server.login.refresh(family, body.get("refresh_token", ""))
        return self.send_json(code, answer)

    def api_key(self):
        """The key the client sent (x-api-key, or a Bearer token): test keys only."""
        auth = self.headers.get("Authorization", "")
        bearer = auth[7:] if auth.startswith("Bearer ") else ""
        return self.headers.get("x-api-key") or bearer

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {}

    def send_json(self, code, doc):
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_sse(self, events):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for name, data in events:
            chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self):
        path = self.path.split("?")[0]
        self.auth = None
        if path.startswith("/backend-api/") and not self.authorized(["codex"]):
            return None
        if path.rstrip("/").endswith("/models"):
            if not self.authorized(["claude", "codex"]):
                return None
            self.record("models", "list", **self.auth_field())
            model = {"id": MODEL, "object": "model", "type": "model", "display_name": MODEL}
            return self.send_json(200, {"object": "list", "data": [model], "models": []})
        self.record("unknown", "404")
        self.send_json(404, {"error": {"type": "not_found", "message": self.path}})

    def do_HEAD(self):
        self.record("unknown", "head")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def auth_field(self):
        return {"auth": self.auth} if self.auth else {}

    def do_POST(self):
        path = self.path.split("?")[0]
        self.auth = None
        if path in TOKEN_PATHS:
            return self.token_endpoint(TOKEN_PATHS[path])
        if "/messages" in path and not self.authorized(["claude"]):
            return None
        if path.endswith("/responses") and not self.authorized(["codex"]):
            return None
        body = self.body()
        if path.endswith("/messages/count_tokens"):
            self.record("anthropic", "count_tokens", **self.auth_field())
            return self.send_json(200, {"input_tokens": 10})
        if path.endswith("/messages"):
            step, blocks, stop = anthropic_plan(body)
            self.record("anthropic", step, body, **self.auth_field())
            if body.get("stream"):
                return self.send_sse(anthropic_events(blocks, stop))
            return self.send_json(200, anthropic_message(blocks, stop))
        if path.endswith("/responses"):
            step, items = openai_plan(body)
            self.record("openai", step, body, **self.auth_field())
            if body.get("stream", True):
                return self.send_sse(openai_events(items))
            return self.send_json(200, openai_response(items, "completed"))
        self.record("unknown", "404")
        self.send_json(404, {"error": {"type": "not_found", "message": self.path}})


def append_log(srv, entry):
    """One JSON line of the log, whole."""
    entry.setdefault("t", time.time())
    with srv.log_lock:
        if srv.log_path:
            with open(srv.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")


def serve(host, port, log_path, tls=None, login=None):
    """The server; `login`: (ttl, grace) seconds for a login provider, or None."""
    srv = ThreadingHTTPServer((host, port), Handler)
    if tls:
        # HTTPS as the real APIs speak it (tests/support/model-tls: a certificate for
        # host.ateam.internal from a test CA whose key was thrown away).
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.daemon_threads = True
    srv.log_path = log_path
    srv.log_lock = threading.Lock()
    srv.login = LoginProvider(*login, lambda e: append_log(srv, e)) if login else None
    return srv


def write_login_files(srv, dir_path):
    """The provider's logins as the agents keep them on a host, 0600, into `dir_path`."""
    os.makedirs(dir_path, exist_ok=True)
    for name, doc in srv.login.files().items():
        path = os.path.join(dir_path, name)
        fd = os.open(path + ".part", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2)
        os.replace(path + ".part", path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log")
    ap.add_argument("--port-file")
    ap.add_argument("--tls-cert", help="serve HTTPS with this certificate (and --tls-key)")
    ap.add_argument("--tls-key")
    ap.add_argument("--login-dir", help="play the login provider; write its logins here")
    ap.add_argument("--login-ttl", type=float, default=3600.0, help="access tokens end after this")
    ap.add_argument("--login-grace", type=float, default=2.0, help="a replaced token's grace")
    a = ap.parse_args(argv)
    tls = (a.tls_cert, a.tls_key) if a.tls_cert else None
    login = (a.login_ttl, a.login_grace) if a.login_dir else None
    srv = serve(a.host, a.port, a.log, tls, login)
    if a.login_dir:
        write_login_files(srv, a.login_dir)
    port = srv.server_address[1]
    if a.port_file:
        with open(a.port_file + ".part", "w") as f:
            f.write(f"{port}\n")
        os.replace(a.port_file + ".part", a.port_file)
    print(f"listening on {a.host}:{port}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
