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
# The built ateam: scripts/test.sh runs this after the tests that build it.
ATEAM = os.environ.get("ATEAM_BIN", os.path.join(REPO, "target", "debug", "ateam"))


def base_url(agent, port):
    """The example's model base URL, moved to port, as the agent's expanded command and
    variables say it."""
    command, env, _ = bench.member_of(agent, port, ATEAM)
    urls = re.findall(r"\w+://" + re.escape(f"{bench.MODEL_HOST}:{port}"),
                      " ".join([*command, *env.values()]))
    return urls


class BenchAgents(unittest.TestCase):
    def test_examples_are_read(self):
        for agent in AGENTS:
            command, env, agent_dir = bench.member_of(agent, PORT, ATEAM)
            # ateam's build of the agent, from its agent cache, where ateam mounts it.
            self.assertEqual(command[0], f"{bench.AGENT_DIR}/{agent}", command)
            self.assertIn(f"/.cache/ateam/agents/{agent}-", agent_dir)
            self.assertEqual(command[-1], f"create the file hello.txt containing exactly: hello from {agent}")
            self.assertEqual(len(set(base_url(agent, PORT))), 1, (agent, command, env))
            self.assertNotIn(":8790", " ".join(command) + " ".join(env.values()))

    def test_both_sides_use_one_model_address(self):
        for agent in AGENTS:
            text = bench.example_text(agent, PORT)
            # ateam's side: the proxy allows the stand-in's port, with the stand-in's CA.
            for line in (f"- host: {bench.MODEL_HOST}:{PORT}\n", "upstreamCA: ./model-ca.pem"):
                self.assertTrue(line in text, f"{agent}: no {line.strip()!r} in its example")
            # docker run's side: the command ateam expands, the name mapped to the host's
            # loopback, the CA mounted read-only and named as ateam names it in a member.
            command, env, agent_dir = bench.member_of(agent, PORT, ATEAM)
            cmd = bench.docker_command(agent, PORT, "/w", "/ca", "name", ATEAM)
            self.assertIn(f"{agent_dir}:{bench.AGENT_DIR}:ro", cmd)
            self.assertEqual(cmd[-len(command) - 1:], [bench.IMAGES[agent], *command])
            self.assertIn(f"{bench.MODEL_HOST}:127.0.0.1", cmd)
            self.assertIn(f"/ca:{bench.CA_DIR}:ro", cmd)
            for k, v in list(env.items()) + list(bench.CA_ENV.items()):
                self.assertIn(f"{k}={v.replace(bench.TRANSCRIPT, '/w/.state')}", cmd)

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
