#!/usr/bin/env python3
"""A stand-in for the remote model, for the real-agent tests (tests/agents.rs) and
scripts/bench-agents.py: a fake of the model's API only, never of ateam.

It speaks the two wire formats the agents use, streaming (server-sent events) or not:
  POST /v1/messages               Anthropic Messages (Claude Code), and .../count_tokens
  POST /v1/responses              OpenAI Responses (Codex CLI)
  GET  /v1/models                 both families' model lists (Codex refreshes it)
and plays a scripted conversation. The task is read from the user's prompt, which must say

    create the file PATH containing exactly: SOME TEXT

(PATH absolute, or relative to the working directory the agent states in its request).

First turn: a tool call that writes SOME TEXT into /ABS/PATH (Claude Code's `Write`; Codex's
`shell_command`, `shell` or `exec_command`, whichever the request offers). Once the request
carries the tool's result: a short text answer and the end of the turn. A request without the
task (a title, a quota probe) gets a one-word text answer. A session that goes on with another
task (`claude -p --continue`, `codex exec resume`) holds several: the latest is played, and
every response and tool call has ids of its own (Claude Code merges messages of one id).

Every request is appended to --log as one JSON line (time, method, path, host header,
user agent, the API key it sent, which family, which step) so a test can tell when the first model request came and
that nothing else was asked. Standard library only.

Usage: model_server.py [--host 127.0.0.1] [--port 0] [--log FILE] [--port-file FILE]
(port 0: any free port, written to --port-file and printed as `listening on HOST:PORT`).
"""

import argparse
import itertools
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TASK = re.compile(r"create the file (\S+) containing exactly: ([^\n\"\\]+)")
# Where the agent works, as each says it in its request: Claude Code's environment block,
# Codex's environment context. A task's relative path is taken from there.
CWD = re.compile(r"(?:working directory: |<cwd>)(/[^\s<\"\\]+)", re.IGNORECASE)
MODEL = "stand-in-model"
# Ids of responses and tool calls: unique, also across runs of the stand-in.
IDS = itertools.count(1)
RUN = uuid.uuid4().hex[:8]


def new_id(kind):
    return f"{kind}_standin_{RUN}_{next(IDS)}"


def find_task(body):
    """(path, text) of the latest task sentence in the request (a session's last task), or
    None. A relative path is resolved against the working directory the agent states."""
    flat = json.dumps(body, ensure_ascii=False).replace("\\n", "\n")
    found = list(TASK.finditer(flat))
    if not found:
        return None
    m = found[-1]
    path = m.group(1)
    if not path.startswith("/"):
        cwd = CWD.search(flat)
        if not cwd:
            return None
        path = cwd.group(1).rstrip("/") + "/" + path.removeprefix("./")
    return (path, m.group(2).rstrip())


# ------------------------------------------------------------------ Anthropic Messages


def anthropic_has_tool_result(body):
    msgs = body.get("messages") or []
    if not msgs or msgs[-1].get("role") != "user":
        return False
    content = msgs[-1].get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def anthropic_plan(body):
    """(step, content blocks, stop_reason) for this request."""
    tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    task = find_task(body)
    if anthropic_has_tool_result(body):
        return "done", [{"type": "text", "text": "Done: the file is written."}], "end_turn"
    if task and "Write" in tools:
        path, text = task
        block = {
            "type": "tool_use",
            "id": new_id("toolu"),
            "name": "Write",
            "input": {"file_path": path, "content": text + "\n"},
        }
        return "tool", [block], "tool_use"
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


def openai_has_tool_output(body):
    """Whether a tool's output came after the user's latest message (a resumed session holds
    the outputs of its earlier tasks too)."""
    items = body.get("input")
    if not isinstance(items, list):
        return False
    users = [n for n, i in enumerate(items) if isinstance(i, dict) and i.get("role") == "user"]
    return any(
        isinstance(i, dict)
        and i.get("type") in ("function_call_output", "custom_tool_call_output")
        for i in items[(users[-1] if users else 0):]
    )


def shell_call(tools, path, text):
    """A function call item that writes the file with the first shell tool offered."""
    script = "printf '%s\\n' " + shquote(text) + " > " + shquote(path)
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
        "id": f"fc_{n}",
        "call_id": n,
        "name": name,
        "arguments": json.dumps(args),
        "status": "completed",
    }


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


def openai_plan(body):
    """(step, output items) for this request."""
    task = find_task(body)
    if openai_has_tool_output(body):
        return "done", [openai_text_item("Done: the file is written.")]
    if task:
        call = shell_call(body.get("tools") or [], *task)
        if call:
            return "tool", [call]
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


# ------------------------------------------------------------------ HTTP


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ateam-model-standin/1"

    def log_message(self, fmt, *args):  # the JSON log says it all
        pass

    def record(self, family, step):
        entry = {
            "t": time.time(),
            "method": self.command,
            "path": self.path,
            "host": self.headers.get("Host", ""),
            "user_agent": self.headers.get("User-Agent", ""),
            "api_key": self.api_key(),
            "family": family,
            "step": step,
        }
        with self.server.log_lock:
            if self.server.log_path:
                with open(self.server.log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")

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
        if path.rstrip("/").endswith("/models"):
            self.record("models", "list")
            model = {"id": MODEL, "object": "model", "type": "model", "display_name": MODEL}
            return self.send_json(200, {"object": "list", "data": [model], "models": []})
        self.record("unknown", "404")
        self.send_json(404, {"error": {"type": "not_found", "message": self.path}})

    def do_HEAD(self):
        self.record("unknown", "head")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        path = self.path.split("?")[0]
        body = self.body()
        if path.endswith("/messages/count_tokens"):
            self.record("anthropic", "count_tokens")
            return self.send_json(200, {"input_tokens": 10})
        if path.endswith("/messages"):
            step, blocks, stop = anthropic_plan(body)
            self.record("anthropic", step)
            if body.get("stream"):
                return self.send_sse(anthropic_events(blocks, stop))
            return self.send_json(200, anthropic_message(blocks, stop))
        if path.endswith("/responses"):
            step, items = openai_plan(body)
            self.record("openai", step)
            if body.get("stream", True):
                return self.send_sse(openai_events(items))
            return self.send_json(200, openai_response(items, "completed"))
        self.record("unknown", "404")
        self.send_json(404, {"error": {"type": "not_found", "message": self.path}})


def serve(host, port, log_path, tls=None):
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
    return srv


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log")
    ap.add_argument("--port-file")
    ap.add_argument("--tls-cert", help="serve HTTPS with this certificate (and --tls-key)")
    ap.add_argument("--tls-key")
    a = ap.parse_args(argv)
    tls = (a.tls_cert, a.tls_key) if a.tls_cert else None
    srv = serve(a.host, a.port, a.log, tls)
    port = srv.server_address[1]
    if a.port_file:
        with open(a.port_file + ".part", "w") as f:
            f.write(f"{port}\n")
        import os

        os.replace(a.port_file + ".part", a.port_file)
    print(f"listening on {a.host}:{port}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
