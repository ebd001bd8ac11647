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


if __name__ == "__main__":
    unittest.main()
