"""Unit test of the stand-in model (model_server.py): its two wire formats and its script.
Run: python3 -m unittest discover -s tests/support -p 'test_*.py'  (scripts/test.sh does)."""

import base64
import http.client
import json
import os
import sys
import tempfile
import threading
import time
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

    def test_a_continued_session_plays_its_latest_task_with_ids_of_its_own(self):
        tools = [{"name": "Write"}]
        first = {"type": "tool_use", "id": "toolu_standin_1", "name": "Write", "input": {}}
        result = {"type": "tool_result", "tool_use_id": "toolu_standin_1", "content": "ok"}
        msgs = [
            {"role": "user", "content": TASK},
            {"role": "assistant", "content": [first]},
            {"role": "user", "content": [result]},
            {"role": "assistant", "content": [{"type": "text", "text": "Done"}]},
            {"role": "user", "content": "create the file /w/two.txt containing exactly: second"},
        ]
        _, _, body = self.post("/v1/messages", {"tools": tools, "messages": msgs})
        doc = json.loads(body)
        call = doc["content"][0]
        self.assertEqual(call["input"], {"file_path": "/w/two.txt", "content": "second\n"})
        self.assertNotEqual(call["id"], first["id"])
        _, _, again = self.post("/v1/messages", {"tools": tools, "messages": msgs})
        self.assertNotEqual(json.loads(again)["id"], doc["id"])

    def test_a_resumed_codex_session_plays_its_new_task(self):
        tools = [{"type": "function", "name": "shell_command"}]
        user = lambda t: {"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]}
        inp = [
            user(TASK),
            {"type": "function_call", "call_id": "c1", "name": "shell_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            user("create the file /w/two.txt containing exactly: second"),
        ]
        _, _, body = self.post("/v1/responses", {"stream": True, "tools": tools, "input": inp})
        item = [d for e, d in sse(body) if e == "response.output_item.done"][0]["item"]
        self.assertEqual(item["type"], "function_call")
        self.assertIn("/w/two.txt", json.loads(item["arguments"])["command"])
        self.assertEqual(self.steps(), ["tool"])

    def test_unknown_path_is_404_and_logged(self):
        code, _, _ = self.post("/api/event_logging/batch", {})
        self.assertEqual(code, 404)
        self.assertEqual(self.steps(), ["404"])


    def test_a_command_comes_first_then_the_file(self):
        task = "run the command: sleep 1; echo hi, then " + TASK
        tools = [{"name": "Bash"}, {"name": "Write"}]
        msgs = [{"role": "user", "content": [{"type": "text", "text": task}]}]
        _, _, body = self.post("/v1/messages", {"tools": tools, "messages": msgs})
        first = json.loads(body)["content"][0]
        self.assertEqual((first["name"], first["input"]["command"]), ("Bash", "sleep 1; echo hi"))
        result = lambda b: {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"], "content": "ok"}]}
        msgs += [{"role": "assistant", "content": [first]}, result(first)]
        _, _, body = self.post("/v1/messages", {"tools": tools, "messages": msgs})
        second = json.loads(body)["content"][0]
        self.assertEqual((second["name"], second["input"]["file_path"]), ("Write", "/w/out.txt"))
        msgs += [{"role": "assistant", "content": [second]}, result(second)]
        _, _, body = self.post("/v1/messages", {"tools": tools, "messages": msgs})
        self.assertEqual(json.loads(body)["stop_reason"], "end_turn")
        # Codex: the same two steps with its shell tool.
        tools = [{"type": "function", "name": "shell_command"}]
        inp = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]}]
        _, _, body = self.post("/v1/responses", {"stream": False, "tools": tools, "input": inp})
        item = json.loads(body)["output"][0]
        self.assertEqual(json.loads(item["arguments"])["command"], "sleep 1; echo hi")
        inp += [item, {"type": "function_call_output", "call_id": item["call_id"], "output": "ok"}]
        _, _, body = self.post("/v1/responses", {"stream": False, "tools": tools, "input": inp})
        item2 = json.loads(body)["output"][0]
        self.assertIn("/w/out.txt", json.loads(item2["arguments"])["command"])
        self.assertNotEqual(item["call_id"], item2["call_id"])
        self.assertEqual(self.steps(), ["command", "tool", "done", "command", "tool"])


class LoginProvider(unittest.TestCase):
    """The fake login provider: rotated refresh tokens, used ones refused, and a model side
    that takes only the current access token."""

    def setUp(self):
        self.log = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name
        self.dir = tempfile.mkdtemp()
        self.srv = model_server.serve("127.0.0.1", 0, self.log, login=(60.0, 0.3))
        model_server.write_login_files(self.srv, self.dir)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def tearDown(self):
        self.srv.shutdown()
        self.srv.server_close()
        os.unlink(self.log)

    def call(self, method, path, doc=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.srv.server_address[1], timeout=5)
        c.request(method, path, json.dumps(doc) if doc is not None else None, headers or {})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"null")

    def file(self, name):
        with open(os.path.join(self.dir, name)) as f:
            return json.load(f)

    def messages(self, token):
        msgs = [{"role": "user", "content": "hi"}]
        return self.call("POST", "/v1/messages", {"messages": msgs}, {"Authorization": f"Bearer {token}"})[0]

    def test_claude_refresh_rotates_and_a_spent_token_is_refused(self):
        creds = self.file("claude-credentials.json")["claudeAiOauth"]
        self.assertEqual(oct(os.stat(os.path.join(self.dir, "claude-credentials.json")).st_mode & 0o777), "0o600")
        self.assertEqual(self.messages(creds["accessToken"]), 200)
        self.assertEqual(self.messages("sk-ant-oat01-ateam-placeholder"), 401)
        body = {"grant_type": "refresh_token", "refresh_token": creds["refreshToken"], "client_id": "c"}
        code, new = self.call("POST", "/v1/oauth/token", body)
        self.assertEqual(code, 200)
        self.assertNotEqual(new["refresh_token"], creds["refreshToken"])
        self.assertEqual(new["expires_in"], 60)
        # Spent: refused, and it changes nothing.
        code, err = self.call("POST", "/v1/oauth/token", body)
        self.assertEqual((code, err["error"]), (400, "invalid_grant"))
        self.assertEqual(self.messages(new["access_token"]), 200)
        # The one before: for the grace only.
        self.assertEqual(self.messages(creds["accessToken"]), 200)
        time.sleep(0.4)
        self.assertEqual(self.messages(creds["accessToken"]), 401)
        self.assertEqual(self.messages(new["access_token"]), 200)
        with open(self.log) as f:
            log = [json.loads(line) for line in f]
        issued = [e for e in log if e.get("step") == "issued"]
        self.assertEqual([e["login"] for e in issued], ["claude", "codex", "claude"])
        self.assertIn("401", [e["step"] for e in log])

    def test_codex_needs_the_account_and_refreshes_at_its_own_path(self):
        auth = self.file("codex-auth.json")["tokens"]
        bearer = {"Authorization": "Bearer " + auth["access_token"]}
        ok = dict(bearer, **{"chatgpt-account-id": auth["account_id"]})
        inp = {"input": "hi", "stream": False}
        self.assertEqual(self.call("POST", "/v1/responses", inp, ok)[0], 200)
        self.assertEqual(self.call("POST", "/v1/responses", inp, bearer)[0], 401)
        # Claude's token is not Codex's.
        claude = self.file("claude-credentials.json")["claudeAiOauth"]["accessToken"]
        self.assertEqual(self.call("POST", "/v1/responses", inp, {"Authorization": "Bearer " + claude})[0], 401)
        body = {"grant_type": "refresh_token", "refresh_token": auth["refresh_token"], "client_id": "c"}
        self.assertEqual(self.call("POST", "/v1/oauth/token", body)[0], 400)  # Claude's endpoint
        code, new = self.call("POST", "/oauth/token", body)
        self.assertEqual(code, 200)
        claims = json.loads(base64.urlsafe_b64decode(new["access_token"].split(".")[1] + "=="))
        self.assertEqual(claims[model_server.OPENAI_AUTH]["chatgpt_account_id"], auth["account_id"])
        self.assertIn("id_token", new)


if __name__ == "__main__":
    unittest.main()
