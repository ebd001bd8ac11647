"""Unit test of the stand-in model (model_server.py): its two wire formats and its script.
Run: python3 -m unittest discover -s tests/support -p 'test_*.py'  (scripts/test.sh does)."""

import http.client
import json
import os
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import model_server  # noqa: E402

TASK = "create the file /w/out.txt containing exactly: hello there"
FIX = ("fix the failing test: run `python3 -m pytest -q`, write `/w/calc.py` as "
       "`def add(a, b): return a + b`, run the tests again, and commit as `fix add`")


def sse(raw):
    """[(event, data)] of an SSE body."""
    out = []
    for block in raw.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            out.append((lines["event"], json.loads(lines["data"])))
    return out


class StandIn(unittest.TestCase):
    def setUp(self):
        self.log = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name
        self.srv = model_server.serve("127.0.0.1", 0, self.log)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def tearDown(self):
        self.srv.shutdown()
        self.srv.server_close()
        os.unlink(self.log)

    def post(self, path, doc):
        c = http.client.HTTPConnection("127.0.0.1", self.srv.server_address[1], timeout=5)
        headers = {"Content-Type": "application/json", "x-api-key": "k1"}
        c.request("POST", path, json.dumps(doc), headers)
        r = c.getresponse()
        return r.status, r.getheader("Content-Type"), r.read()

    def steps(self):
        with open(self.log) as f:
            entries = [json.loads(line) for line in f]
        self.assertTrue(all(e["api_key"] == "k1" for e in entries), entries)
        return [e["step"] for e in entries]

    def test_anthropic_tool_then_end_turn(self):
        tools = [{"name": "Bash"}, {"name": "Write"}]
        msgs = [{"role": "user", "content": [{"type": "text", "text": TASK}]}]
        code, ctype, body = self.post("/v1/messages?beta=true", {"stream": True, "tools": tools, "messages": msgs})
        self.assertEqual((code, ctype), (200, "text/event-stream"))
        ev = sse(body)
        self.assertEqual([e for e, _ in ev][0], "message_start")
        self.assertEqual(ev[-1][0], "message_stop")
        start = [d for e, d in ev if e == "content_block_start"][0]["content_block"]
        self.assertEqual((start["type"], start["name"]), ("tool_use", "Write"))
        partial = [d["delta"]["partial_json"] for e, d in ev if e == "content_block_delta"][0]
        self.assertEqual(json.loads(partial), {"file_path": "/w/out.txt", "content": "hello there\n"})
        stop = [d for e, d in ev if e == "message_delta"][0]["delta"]["stop_reason"]
        self.assertEqual(stop, "tool_use")
        result = {"type": "tool_result", "tool_use_id": start["id"], "content": "ok"}
        msgs += [{"role": "assistant", "content": [start]}, {"role": "user", "content": [result]}]
        _, _, body = self.post("/v1/messages", {"stream": False, "tools": tools, "messages": msgs})
        doc = json.loads(body)
        self.assertEqual(doc["stop_reason"], "end_turn")
        self.assertEqual(doc["content"][0]["type"], "text")
        self.assertEqual(self.steps(), ["tool", "done"])

    def test_anthropic_without_task_or_tools_is_plain_text(self):
        msgs = [{"role": "user", "content": "a title for: " + TASK}]
        _, _, body = self.post("/v1/messages", {"messages": msgs})
        self.assertEqual(json.loads(body)["content"], [{"type": "text", "text": "OK"}])
        self.assertEqual(self.steps(), ["other"])

    def test_openai_shell_call_then_message(self):
        tools = [{"type": "function", "name": "shell", "parameters": {}}]
        inp = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": TASK}]}]
        code, ctype, body = self.post("/v1/responses", {"stream": True, "tools": tools, "input": inp})
        self.assertEqual((code, ctype), (200, "text/event-stream"))
        ev = sse(body)
        self.assertEqual(ev[0][0], "response.created")
        self.assertEqual(ev[-1][0], "response.completed")
        item = [d for e, d in ev if e == "response.output_item.done"][0]["item"]
        self.assertEqual((item["type"], item["name"]), ("function_call", "shell"))
        argv = json.loads(item["arguments"])["command"]
        self.assertEqual(argv[:2], ["bash", "-lc"])
        self.assertEqual(argv[2], "printf '%s\\n' 'hello there' > '/w/out.txt'")
        inp += [item, {"type": "function_call_output", "call_id": item["call_id"], "output": "ok"}]
        _, _, body = self.post("/v1/responses", {"stream": True, "tools": tools, "input": inp})
        done = [d for e, d in sse(body) if e == "response.completed"][0]["response"]
        self.assertEqual(done["output"][0]["type"], "message")
        self.assertEqual(self.steps(), ["tool", "done"])

    def test_openai_prefers_shell_command(self):
        tools = [{"type": "function", "name": "shell"}, {"type": "function", "name": "shell_command"}]
        _, _, body = self.post("/v1/responses", {"stream": True, "tools": tools, "input": TASK})
        item = [d for e, d in sse(body) if e == "response.output_item.done"][0]["item"]
        self.assertEqual(item["name"], "shell_command")
        self.assertIn("/w/out.txt", json.loads(item["arguments"])["command"])

    def entries(self):
        with open(self.log) as f:
            return [json.loads(line) for line in f]

    def anthropic_turn(self, tools, msgs):
        """One request; the assistant's block, appended with its result by the caller."""
        _, _, body = self.post("/v1/messages", {"stream": False, "tools": tools, "messages": msgs})
        return json.loads(body)

    def test_anthropic_fixes_a_failing_test(self):
        tools = [{"name": n} for n in ("Bash", "Read", "Write")]
        msgs = [{"role": "user", "content": [{"type": "text", "text": FIX}]}]
        results = [
            "F.\n1 failed, 1 passed in 0.02s",  # the first run: red
            "def add(a, b): return a - b",  # what Read shows
            "File written",
            "..\n2 passed in 0.01s",  # the rerun: green
            "[main 1a2b3c4] fix add",
        ]
        calls = []
        for text in results:
            doc = self.anthropic_turn(tools, msgs)
            self.assertEqual(doc["stop_reason"], "tool_use", doc)
            block = doc["content"][0]
            calls.append((block["name"], block["input"]))
            result = {"type": "tool_result", "tool_use_id": block["id"], "content": [{"type": "text", "text": text}]}
            msgs += [{"role": "assistant", "content": [block]}, {"role": "user", "content": [result]}]
        doc = self.anthropic_turn(tools, msgs)
        self.assertEqual(doc["stop_reason"], "end_turn")
        self.assertIn("fix add", doc["content"][0]["text"])
        self.assertEqual(calls, [
            ("Bash", {"command": "python3 -m pytest -q", "description": "run-tests"}),
            ("Read", {"file_path": "/w/calc.py"}),
            ("Write", {"file_path": "/w/calc.py", "content": "def add(a, b): return a + b\n"}),
            ("Bash", {"command": "python3 -m pytest -q", "description": "rerun-tests"}),
            ("Bash", {"command": "git add -- '/w/calc.py' && git commit -q -m 'fix add'", "description": "commit"}),
        ])
        log = self.entries()
        self.assertEqual([e["step"] for e in log], ["run-tests", "read", "fix", "rerun-tests", "commit", "done"])
        # Each request logs the result it carried: red before the fix, green before the commit.
        self.assertIn("1 failed", log[1]["tool_result"])
        self.assertIn("2 passed", log[4]["tool_result"])

    def test_tests_that_do_not_fail_are_not_fixed(self):
        tools = [{"name": n} for n in ("Bash", "Read", "Write")]
        msgs = [{"role": "user", "content": [{"type": "text", "text": FIX}]}]
        block = self.anthropic_turn(tools, msgs)["content"][0]
        result = {"type": "tool_result", "tool_use_id": block["id"], "content": "2 passed in 0.01s"}
        msgs += [{"role": "assistant", "content": [block]}, {"role": "user", "content": [result]}]
        doc = self.anthropic_turn(tools, msgs)
        self.assertEqual(doc["stop_reason"], "end_turn")
        self.assertEqual(self.steps(), ["run-tests", "stopped"])

    def test_openai_fixes_a_failing_test_with_its_shell(self):
        tools = [{"type": "function", "name": "shell_command"}]
        inp = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": FIX}]}]
        scripts = []
        for out in ["Exit code: 1\nOutput:\n1 failed in 0.02s", "", "Exit code: 0\nOutput:\n2 passed", "ok"]:
            _, _, body = self.post("/v1/responses", {"stream": True, "tools": tools, "input": inp})
            item = [d for e, d in sse(body) if e == "response.output_item.done"][0]["item"]
            scripts.append(json.loads(item["arguments"])["command"])
            inp += [item, {"type": "function_call_output", "call_id": item["call_id"], "output": out}]
        _, _, body = self.post("/v1/responses", {"stream": True, "tools": tools, "input": inp})
        done = [d for e, d in sse(body) if e == "response.completed"][0]["response"]
        self.assertEqual(done["output"][0]["type"], "message")
        self.assertEqual(scripts, [
            "python3 -m pytest -q",
            "printf '%s\\n' 'def add(a, b): return a + b' > '/w/calc.py'",
            "python3 -m pytest -q",
            "git add -- '/w/calc.py' && git commit -q -m 'fix add'",
        ])
        self.assertEqual(self.steps(), ["run-tests", "fix", "rerun-tests", "commit", "done"])

    def test_a_relative_path_is_the_agents_working_folder(self):
        tools = [{"type": "function", "name": "shell_command"}]
        task = FIX.replace("/w/calc.py", "calc.py")
        inp = [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<cwd>/repo</cwd>"}, {"type": "input_text", "text": task}]}]
        inp += [{"type": "function_call", "call_id": "c1"},
                {"type": "function_call_output", "call_id": "c1", "output": "1 failed"}]
        _, _, body = self.post("/v1/responses", {"stream": True, "tools": tools, "input": inp})
        item = [d for e, d in sse(body) if e == "response.output_item.done"][0]["item"]
        self.assertIn("> '/repo/calc.py'", json.loads(item["arguments"])["command"])

    def test_openai_code_mode_runs_the_shell_through_exec(self):
        # Codex's interactive UI: no `tools`, a custom `exec` tool in an input item.
        extra = {"type": "additional_tools", "tools": [{"type": "namespace", "name": "functions",
                 "tools": [{"type": "custom", "name": "exec"}]}]}
        inp = [extra, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TASK}]}]
        _, _, body = self.post("/v1/responses", {"stream": True, "input": inp})
        item = [d for e, d in sse(body) if e == "response.output_item.done"][0]["item"]
        self.assertEqual((item["type"], item["name"]), ("custom_tool_call", "exec"))
        self.assertIn("tools.exec_command(", item["input"])
        self.assertIn("/w/out.txt", item["input"])
        inp += [item, {"type": "custom_tool_call_output", "call_id": item["call_id"], "output": "{}"}]
        self.post("/v1/responses", {"stream": True, "input": inp})
        self.assertEqual(self.steps(), ["tool", "done"])

    def test_a_continued_session_does_its_newest_task(self):
        second = "create the file /w/two.txt containing exactly: again"
        tools = [{"type": "function", "name": "shell"}]
        inp = [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TASK}]},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": second}]},
        ]
        _, _, body = self.post("/v1/responses", {"stream": True, "tools": tools, "input": inp})
        item = [d for e, d in sse(body) if e == "response.output_item.done"][0]["item"]
        self.assertIn("/w/two.txt", item["arguments"])
        msgs = [
            {"role": "user", "content": TASK},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Write", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
            {"role": "assistant", "content": "Done"},
            {"role": "user", "content": second},
        ]
        _, _, body = self.post("/v1/messages", {"tools": [{"name": "Write"}], "messages": msgs})
        block = json.loads(body)["content"][0]
        self.assertEqual(block["input"]["file_path"], "/w/two.txt")
        self.assertEqual(self.steps(), ["tool", "tool"])

    def test_unknown_path_is_404_and_logged(self):
        code, _, _ = self.post("/api/event_logging/batch", {})
        self.assertEqual(code, 404)
        self.assertEqual(self.steps(), ["404"])


if __name__ == "__main__":
    unittest.main()
