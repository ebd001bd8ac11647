#!/usr/bin/env python3
"""Real agents, timed: one scripted turn of Claude Code and of Codex CLI against the stand-in
model (tests/support/model_server.py), as an ateam member (the example of examples/agents/,
through its egress proxy) and as a plain `docker run` of the same image (host network, no
proxy, no ateam). For each: the time to the agent's first model request and to the end of
its turn (the file written and the process exited), median of --runs.

Needs the engines (scripts/engines.sh), the images (scripts/agent-images.sh) and a built
ateam (target/debug/ateam, or --ateam). Run as root, as CI does. Prints a Markdown table for
docs/agents.md.

Usage: scripts/bench-agents.py [--runs 5] [--ateam PATH] [--agents claude,codex]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "support"))
import model_server  # noqa: E402

DOCKER = ["docker", "-H", "unix:///run/ateam-ci/docker.sock"]
IMAGES = {"claude": "ateam-claude:2.1.332", "codex": "ateam-codex:0.171.0"}
KEYS = {"claude": "ANTHROPIC_API_KEY", "codex": "OPENAI_API_KEY"}
OWNER = 4242  # the owner of the folders, as in tests/agents.rs


def first_request(log, since):
    try:
        with open(log) as f:
            ts = [json.loads(line)["t"] for line in f]
    except FileNotFoundError:
        return None
    ts = [t for t in ts if t >= since]
    return min(ts) - since if ts else None


def docker_command(agent, port, work):
    """The example's command and environment, for `docker run` with the model at 127.0.0.1."""
    prompt = f"create the file {work}/hello.txt containing exactly: hello from {agent}"
    base = f"http://127.0.0.1:{port}"
    if agent == "claude":
        env = {
            "ANTHROPIC_BASE_URL": base,
            "CLAUDE_CONFIG_DIR": f"{work}/.state/claude",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        cmd = ["claude", "-p", "--dangerously-skip-permissions", prompt]
    else:
        env = {"CODEX_HOME": f"{work}/.state/codex"}
        cmd = ["sh", "-c", 'mkdir -p "$CODEX_HOME" && exec "$@" </dev/null', "sh",
               "codex", "exec", "--skip-git-repo-check",
               "--dangerously-bypass-approvals-and-sandbox",
               "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false",
               "-c", "features.plugins=false", "-c", "features.remote_plugin=false",
               "-c", "features.apps=false", "-c", "model_provider=model",
               "-c", "model_providers.model.name=model",
               "-c", f"model_providers.model.base_url={base}/v1",
               "-c", "model_providers.model.env_key=OPENAI_API_KEY",
               "-c", "model_providers.model.wire_api=responses", "-m", "stand-in-model", prompt]
    env[KEYS[agent]] = "test-key"
    args = DOCKER + ["run", "--rm", "--network", "host", "-u", f"{OWNER}:{OWNER}",
                     "--read-only", "--tmpfs", "/tmp", "--tmpfs", f"/home/agent:uid={OWNER}",
                     "-v", f"{work}:{work}", "-w", work]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    return args + [IMAGES[agent]] + cmd


def run_docker(agent, port, log):
    work = tempfile.mkdtemp(prefix="bench-agents-")
    os.chown(work, OWNER, OWNER)
    t0 = time.time()
    subprocess.run(docker_command(agent, port, work), check=True, capture_output=True)
    whole = time.time() - t0
    ok = os.path.exists(os.path.join(work, "hello.txt"))
    shutil.rmtree(work, ignore_errors=True)
    if not ok:
        raise SystemExit(f"docker run of {agent}: no file written")
    return first_request(log, t0), whole


def ateam_env(state):
    env = dict(os.environ, ATEAM_STATE_DIR=state)
    env["DOCKER_HOST"] = "unix:///run/ateam-ci/docker.sock"
    return env


def coder_state(ateam, env):
    out = subprocess.run([ateam, "--backend", "docker", "status", "-o", "json"],
                         env=env, capture_output=True, check=True).stdout
    for t in json.loads(out)["teams"]:
        for m in t["members"]:
            if m["name"] == "coder":
                return m["state"]
    return None


def run_ateam(agent, port, log, ateam, n):
    """Apply the example (pointed at the stand-in like tests/agents.rs does) and time it."""
    d = tempfile.mkdtemp(prefix="bench-agents-")
    shutil.copytree(os.path.join(REPO, "examples", "agents", agent), d, dirs_exist_ok=True)
    path = os.path.join(d, "team.yaml")
    text = open(path).read()
    text = text.replace("host.ateam.internal:8790", f"host.ateam.internal:{port}")
    text = text.replace(f"name: {agent}-agent\n", f"name: bench{agent}{n}\n")
    open(path, "w").write(text)
    # A user's folder: a root caller's members run as its owner (docs/manifests.md).
    for root, dirs, files in os.walk(d):
        for x in [root] + [os.path.join(root, f) for f in files]:
            os.lchown(x, OWNER, OWNER)
    env = ateam_env(os.path.join(d, "state"))
    env[KEYS[agent]] = "test-key"
    t0 = time.time()
    subprocess.run([ateam, "--backend", "docker", "apply", "-f", path], env=env,
                   check=True, capture_output=True)
    applied = time.time() - t0
    while not (coder_state(ateam, env) or "").startswith("exited"):
        if time.time() - t0 > 120:
            raise SystemExit(f"ateam: {agent} never ended its turn")
        time.sleep(0.05)
    whole = time.time() - t0
    state = coder_state(ateam, env)
    subprocess.run([ateam, "--backend", "docker", "delete", "-f", path, "--purge"], env=env,
                   capture_output=True)
    shutil.rmtree(d, ignore_errors=True)
    if state != "exited 0":
        raise SystemExit(f"ateam: {agent} ended {state}")
    return applied, first_request(log, t0), whole


def med(xs):
    return f"{statistics.median(xs):.2f} s"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ateam", default=os.path.join(REPO, "target", "debug", "ateam"))
    ap.add_argument("--agents", default="claude,codex")
    a = ap.parse_args()
    log = tempfile.mktemp(suffix=".jsonl")
    srv = model_server.serve("127.0.0.1", 0, log)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    print(f"{a.runs} runs each, median; stand-in model on 127.0.0.1:{port}\n")
    print("| agent | how | apply returns | first model request | whole turn (file written, exited) |")
    print("|---|---|---|---|---|")
    for agent in a.agents.split(","):
        dr = [run_docker(agent, port, log) for _ in range(a.runs)]
        ar = [run_ateam(agent, port, log, a.ateam, i) for i in range(a.runs)]
        print(f"| {agent} | `docker run` | - | {med([r[0] for r in dr])} | {med([r[1] for r in dr])} |")
        print(f"| {agent} | ateam member | {med([r[0] for r in ar])} | "
              f"{med([r[1] for r in ar])} | {med([r[2] for r in ar])} |")
    srv.shutdown()
    os.unlink(log)


if __name__ == "__main__":
    main()
