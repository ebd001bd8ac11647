"""Guard of scripts/bench-agents.py, without engines: both sides of the bench still reach the
stand-in model as the examples of examples/agents/ do (the same base URL, over the scheme the
examples speak, with the CA they carry), so that the bench cannot silently fall out of step
with the examples again. Run: python3 -m unittest discover -s tests/support -p 'test_*.py'
(scripts/test.sh does)."""

import http.client
import importlib.util
import os
import re
import socket
import ssl
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location(
    "bench_agents", os.path.join(REPO, "scripts", "bench-agents.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

AGENTS = ("claude", "codex")
PORT = 43210


def base_url(agent, port):
    """The example's model base URL, moved to port, as the agent's command and env say it."""
    script, env = bench.member_of(bench.example_text(agent, port))
    urls = re.findall(r"\w+://" + re.escape(f"{bench.MODEL_HOST}:{port}"),
                      " ".join([script, *env.values()]))
    return urls


class BenchAgents(unittest.TestCase):
    def test_examples_are_read(self):
        for agent in AGENTS:
            script, env = bench.member_of(bench.example_text(agent, PORT))
            self.assertIn(f"exec {agent} ", script)
            self.assertIn("create the file $PWD/hello.txt containing exactly: "
                          f"hello from {agent}", script)
            self.assertEqual(len(set(base_url(agent, PORT))), 1, (agent, script, env))
            self.assertNotIn(":8790", script + " ".join(env.values()))

    def test_both_sides_use_one_model_address(self):
        for agent in AGENTS:
            text = bench.example_text(agent, PORT)
            # ateam's side: the proxy allows the stand-in's port, with the stand-in's CA.
            for line in (f"- host: {bench.MODEL_HOST}:{PORT}\n", "upstreamCA: ./model-ca.pem"):
                self.assertTrue(line in text, f"{agent}: no {line.strip()!r} in its example")
            # docker run's side: the example's own script, the name mapped to the host's
            # loopback, the CA mounted read-only and named as ateam names it in a member.
            script, env = bench.member_of(text)
            cmd = bench.docker_command(agent, PORT, "/w", "/ca", "name")
            self.assertEqual(cmd[-4:], [bench.IMAGES[agent], "sh", "-c", script])
            self.assertIn(f"{bench.MODEL_HOST}:127.0.0.1", cmd)
            self.assertIn(f"/ca:{bench.CA_DIR}:ro", cmd)
            for k, v in list(env.items()) + list(bench.CA_ENV.items()):
                self.assertIn(f"{k}={v}", cmd)

    def test_stand_in_speaks_as_the_examples(self):
        log = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name
        srv, port = bench.start_model(log)
        try:
            for agent in AGENTS:
                (url,) = set(base_url(agent, port))
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                if url.startswith("https://"):
                    ca = os.path.join(bench.example(agent), "model-ca.pem")
                    ctx = ssl.create_default_context(cafile=ca)
                    try:
                        sock = ctx.wrap_socket(sock, server_hostname=bench.MODEL_HOST)
                    except ssl.SSLError as e:
                        sock.close()
                        self.fail(f"{agent}'s example speaks {url} with the CA it carries; "
                                  f"the bench's stand-in answered: {e}")
                c = http.client.HTTPConnection(bench.MODEL_HOST, port, timeout=5)
                c.sock = sock
                c.request("GET", "/v1/models")
                self.assertEqual(c.getresponse().status, 200, (agent, url))
                c.close()
        finally:
            srv.shutdown()
            srv.server_close()
            os.unlink(log)


if __name__ == "__main__":
    unittest.main()
