#!/usr/bin/env python3
"""Real agents, timed: one scripted turn of Claude Code and of Codex CLI against the stand-in
model (tests/support/model_server.py, over HTTPS as the real APIs), as an ateam member (the
example of examples/agents/, through its egress proxy, which ends the agent's TLS and injects
the key) and as a plain `docker run` of the same image (host network, no proxy, no ateam).
For each: the time to the agent's first model request and to the end of its turn (the file
written and the process exited), median of --runs.

Both sides run the example's own command and variables and reach the same stand-in at the
same address, `https://host.ateam.internal:PORT` (its certificate is for that name, from
tests/support/model-tls, whose CA the examples carry as model-ca.pem). The `docker run` side
maps that name to 127.0.0.1 (`--add-host`) and trusts the CA the way ateam makes a member
trust its team's: NODE_EXTRA_CA_CERTS names the CA, SSL_CERT_FILE and CODEX_CA_CERTIFICATE a
bundle of the image's roots and the CA (mounted read-only).

Needs the engines (scripts/engines.sh), the images (scripts/agent-images.sh) and a built
ateam (target/debug/ateam, or --ateam). Run as root, as CI does. Prints a Markdown table for
docs/agents.md. A failed run stops the bench with the agent's output and what the stand-in
saw. tests/support/test_bench_agents.py checks, without engines, that both sides still
speak to the stand-in as the examples do.

With --trace DIR, each member run's apply log (RUST_LOG=ateam=debug) with the time of its
first model request, and its proxy's log, are kept in DIR: where the time went.

With --runtime gvisor the member runs under gVisor (docs/gvisor.md): on Docker, its runtime
`runsc`; the `docker run` side stays runc, so the table's ratio is then gVisor's member over a
plain runc container, beside a runc run of the bench.

Usage: scripts/bench-agents.py [--runs 5] [--ateam PATH] [--agents claude,codex] [--trace DIR]
                               [--runtime runc|gvisor]
"""

import argparse
import glob
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
SUPPORT = os.path.join(REPO, "tests", "support")
sys.path.insert(0, SUPPORT)
import model_server  # noqa: E402

DOCKER = ["docker", "-H", "unix:///run/ateam-ci/docker.sock"]
IMAGES = {"claude": "ateam-claude:2.1.332", "codex": "ateam-codex:0.171.0"}
KEYS = {"claude": "ANTHROPIC_API_KEY", "codex": "OPENAI_API_KEY"}
OWNER = 4242  # the owner of the folders, as in tests/agents.rs
MODEL_HOST = "host.ateam.internal"
EXAMPLE_PORT = 8790  # the examples' model server: host.ateam.internal:8790
TLS = (os.path.join(SUPPORT, "model-tls", "cert.pem"), os.path.join(SUPPORT, "model-tls", "key.pem"))
# Where the `docker run` side finds the stand-in's CA (as ateam's /.ateam/ca.pem and
# /.ateam/ca-bundle.pem in a member).
CA_DIR = "/.bench"
# Where ateam mounts an agent's build in a member (core::agents::AGENT_DIR); `docker run` gets
# the same folder of ateam's agent cache there.
AGENT_DIR = "/opt/ateam-agent"
# Where the transcript folder stands in the variables `member_of` returns.
TRANSCRIPT = "@TRANSCRIPT@"
CA_ENV = {
    "NODE_EXTRA_CA_CERTS": f"{CA_DIR}/ca.pem",  # Claude Code (Bun): adds to its own roots
    "SSL_CERT_FILE": f"{CA_DIR}/ca-bundle.pem",  # Codex (rustls) and most others: one bundle
    "CODEX_CA_CERTIFICATE": f"{CA_DIR}/ca-bundle.pem",
}
IMAGE_ROOTS = "/etc/ssl/certs/ca-certificates.crt"
TURN = 120  # seconds a turn may take before the bench gives up on it


class RunFailed(Exception):
    """A run that did not end with the file written: the message says what was seen."""


def example(agent):
    return os.path.join(REPO, "examples", "agents", agent)


def example_text(agent, port):
    """The example's team.yaml, its model server moved to the stand-in's port (as
    tests/agents.rs's model_address does)."""
    with open(os.path.join(example(agent), "team.yaml")) as f:
        text = f.read()
    return text.replace(f"{MODEL_HOST}:{EXAMPLE_PORT}", f"{MODEL_HOST}:{port}")


def member_of(agent, port, ateam):
    """(command, env, agent dir) of the example's Member as ateam expands it (`agent:`: the
    command, its flags, the agent's variables, and the host folder of the agent's build that
    ateam mounts at AGENT_DIR), read from `ateam validate --show=json` of the example with its
    model moved to `port`; its transcript folder in the variables is `TRANSCRIPT`."""
    d = tempfile.mkdtemp(prefix="bench-agents-example-")
    try:
        shutil.copytree(example(agent), d, dirs_exist_ok=True)
        with open(os.path.join(d, "team.yaml"), "w") as f:
            f.write(example_text(agent, port))
        env = dict(os.environ, ATEAM_STATE_DIR=os.path.join(d, "state"))
        out = subprocess.run([ateam, "validate", "--show=json", "-f", os.path.join(d, "team.yaml")],
                             env=env, capture_output=True)
        if out.returncode != 0:
            raise RunFailed(f"ateam validate of the {agent} example:\n{output(out.stdout, out.stderr)}")
        member = json.loads(out.stdout)["teams"][0]["members"][0]
        transcript = member["transcript_dir"]
        vars_ = {k: v.replace(transcript, TRANSCRIPT) for k, v in member["env"].items()}
        return member["command"], vars_, member["agent"]["dir"]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def start_model(log):
    """The stand-in, over HTTPS with the certificate for host.ateam.internal, on a free port
    of 127.0.0.1: (server, port)."""
    srv = model_server.serve("127.0.0.1", 0, log, tls=TLS)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


def requests_since(log, since):
    try:
        with open(log) as f:
            rs = [json.loads(line) for line in f]
    except FileNotFoundError:
        return []
    return [r for r in rs if r["t"] >= since]


def first_request(log, since):
    ts = [r["t"] for r in requests_since(log, since)]
    return min(ts) - since if ts else None


def seen(log, since):
    rs = requests_since(log, since)
    if not rs:
        return "the stand-in saw no request"
    return "the stand-in saw: " + ", ".join(f"{r['method']} {r['path']} ({r['step']})" for r in rs)


def check_turn(agent, log, since, out, file):
    """Raise RunFailed unless the agent wrote its file and the stand-in played the whole turn
    (out: the agent's output, or a function that fetches it, for the message)."""
    want = f"hello from {agent}\n"
    try:
        with open(file) as f:
            got = f.read()
    except FileNotFoundError:
        got = None
    steps = [r["step"] for r in requests_since(log, since)]
    if got != want or "done" not in steps:
        what = "no file written" if got is None else f"the file holds {got!r}, not {want!r}"
        raise RunFailed(f"{what}; {seen(log, since)}\n{out() if callable(out) else out}")


def tail(b, n=4000):
    s = b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
    return s if len(s) <= n else "[...]\n" + s[-n:]


def output(stdout, stderr):
    return f"--- stdout\n{tail(stdout)}\n--- stderr\n{tail(stderr)}"


def ca_files(agent, d):
    """The stand-in's CA and a bundle of the image's roots and it, in folder d, readable by
    the agent's user (ateam makes the same two for a member: docs/egress.md)."""
    with open(os.path.join(example(agent), "model-ca.pem")) as f:
        ca = f.read()
    roots = subprocess.run(DOCKER + ["run", "--rm", "--entrypoint", "cat", IMAGES[agent], IMAGE_ROOTS],
                           capture_output=True)
    if roots.returncode != 0:
        raise RunFailed(f"the roots of {IMAGES[agent]} ({IMAGE_ROOTS}):\n{output(roots.stdout, roots.stderr)}")
    with open(os.path.join(d, "ca.pem"), "w") as f:
        f.write(ca)
    with open(os.path.join(d, "ca-bundle.pem"), "w") as f:
        f.write(roots.stdout.decode().rstrip("\n") + "\n" + ca)
    os.chmod(d, 0o755)
    for name in ("ca.pem", "ca-bundle.pem"):
        os.chmod(os.path.join(d, name), 0o644)


def docker_command(agent, port, work, cadir, name, ateam):
    """The example's command and variables as ateam expands them, for `docker run` on the
    host's network, the model at https://host.ateam.internal:PORT (127.0.0.1), its CA trusted,
    the key in the environment (no proxy to inject it), the agent's state under `work`."""
    command, env, agent_dir = member_of(agent, port, ateam)
    state = f"{work}/.state"
    env = {k: v.replace(TRANSCRIPT, state) for k, v in env.items()}
    env.update(CA_ENV)
    env[KEYS[agent]] = "test-key"
    args = DOCKER + ["run", "--rm", "--name", name, "--network", "host",
                     "--add-host", f"{MODEL_HOST}:127.0.0.1", "-u", f"{OWNER}:{OWNER}",
                     "--read-only", "--tmpfs", "/tmp", "--tmpfs", f"/home/agent:uid={OWNER}",
                     "-v", f"{cadir}:{CA_DIR}:ro", "-v", f"{agent_dir}:{AGENT_DIR}:ro",
                     "-v", f"{work}:{work}", "-w", work]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    return args + [IMAGES[agent]] + command


def run_docker(agent, port, log, cadir, n, ateam):
    work = tempfile.mkdtemp(prefix="bench-agents-")
    # The agent's state folder, as ateam makes it in a member's transcript folder.
    for sub in (".state", f".state/{agent}"):
        os.makedirs(os.path.join(work, sub), exist_ok=True)
    for d in (work, f"{work}/.state", f"{work}/.state/{agent}"):
        os.chown(d, OWNER, OWNER)
    name = f"bench-agents-{agent}-{os.getpid()}-{n}"
    t0 = time.time()
    try:
        try:
            p = subprocess.run(docker_command(agent, port, work, cadir, name, ateam),
                               capture_output=True, timeout=TURN)
        except subprocess.TimeoutExpired as e:
            subprocess.run(DOCKER + ["rm", "-f", name], capture_output=True)
            raise RunFailed(f"no end of the turn in {TURN} s; {seen(log, t0)}\n"
                            f"{output(e.stdout, e.stderr)}") from None
        whole = time.time() - t0
        out = output(p.stdout, p.stderr)
        if p.returncode != 0:
            raise RunFailed(f"exit {p.returncode}; {seen(log, t0)}\n{out}")
        check_turn(agent, log, t0, out, os.path.join(work, "hello.txt"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return first_request(log, t0), whole


def ateam_env(state):
    env = dict(os.environ, ATEAM_STATE_DIR=state)
    env["DOCKER_HOST"] = "unix:///run/ateam-ci/docker.sock"
    return env


def ateam_run(ateam, env, *args):
    return subprocess.run([ateam, "--backend", "docker", *args], env=env, capture_output=True)


def coder_row(ateam, env):
    p = ateam_run(ateam, env, "status", "-o", "json")
    if p.returncode != 0:
        raise RunFailed(f"status -o json: exit {p.returncode}\n{output(p.stdout, p.stderr)}")
    for t in json.loads(p.stdout)["teams"]:
        for m in t["members"]:
            if m["name"] == "coder":
                return m
    return {}


def member_output(ateam, env):
    logs = ateam_run(ateam, env, "logs", "coder")
    egress = ateam_run(ateam, env, "logs", "coder", "--egress")
    return (f"{output(logs.stdout, logs.stderr)}\n--- egress log\n"
            f"{tail(egress.stdout)}{tail(egress.stderr)}")


def run_ateam(agent, port, log, ateam, n, state, trace=None, runtime="runc"):
    """Apply the example (pointed at the stand-in like tests/agents.rs does) and time it.
    `state` is ateam's state folder, the same for every run of the bench, as a person's is
    from one apply to the next (what ateam keeps by image id is read once)."""
    d = tempfile.mkdtemp(prefix="bench-agents-")
    shutil.copytree(example(agent), d, dirs_exist_ok=True)
    path = os.path.join(d, "team.yaml")
    text = example_text(agent, port)
    # A team of its own: not one a crashed bench left behind.
    text = text.replace(f"name: {agent}-agent\n", f"name: bench{agent}{os.getpid() % 100000}r{n}\n")
    if runtime != "runc":
        text = text.replace("\nspec:\n", f"\nspec:\n  runtime: {runtime}\n", 1)
    with open(path, "w") as f:
        f.write(text)
    # A user's folder: a root caller's members run as its owner (docs/manifests.md).
    for root, dirs, files in os.walk(d):
        for x in [root] + [os.path.join(root, f) for f in files]:
            os.lchown(x, OWNER, OWNER)
    env = ateam_env(state)
    env[KEYS[agent]] = "test-key"
    if trace:
        env["RUST_LOG"] = "ateam=debug"
    t0 = time.time()
    try:
        p = ateam_run(ateam, env, "apply", "-f", path)
        applied = time.time() - t0
        if trace:
            with open(os.path.join(trace, f"{agent}-{n}.log"), "wb") as f:
                f.write(f"t0 {t0:.6f} (apply began); applied at +{applied * 1000:.1f} ms\n".encode())
                f.write(p.stderr)
        if p.returncode != 0:
            raise RunFailed(f"apply: exit {p.returncode}\n{output(p.stdout, p.stderr)}")
        # `status` is asked only once the agent's first request arrived: each is an ateam
        # process on the machine's CPUs, which the agent's start shares (the `docker run`
        # side has no such watcher).
        while first_request(log, t0) is None and time.time() - t0 < TURN:
            time.sleep(0.01)
        while True:
            row = coder_row(ateam, env)
            state = row.get("state") or ""
            if state.startswith("exited"):
                break
            if time.time() - t0 > TURN:
                raise RunFailed(f"no end of the turn in {TURN} s (coder: {state or 'absent'}); "
                                f"{seen(log, t0)}\n{member_output(ateam, env)}")
            time.sleep(0.05)
        whole = time.time() - t0
        if state != "exited 0":
            raise RunFailed(f"coder {state}; {seen(log, t0)}\n{member_output(ateam, env)}")
        check_turn(agent, log, t0, lambda: member_output(ateam, env),
                   os.path.join(d, "workspace", "repo", "hello.txt"))
    finally:
        if trace:
            # The proxy's own log, with its timestamps (what `logs --egress` shows).
            for log_path in glob.glob(os.path.join(env["ATEAM_STATE_DIR"], "teams", "*", "members",
                                                   "coder", "egress", "log.jsonl")):
                shutil.copy(log_path, os.path.join(trace, f"{agent}-{n}.egress.jsonl"))
        ateam_run(ateam, env, "delete", "-f", path, "--purge")
        shutil.rmtree(d, ignore_errors=True)
    if trace:
        with open(os.path.join(trace, f"{agent}-{n}.log"), "a") as f:
            f.write(f"first model request at +{first_request(log, t0) * 1000:.1f} ms\n")
    return applied, first_request(log, t0), whole


def med(xs):
    return f"{statistics.median(xs):.2f} s"


def ratio(a, b):
    return f"{statistics.median(a) / statistics.median(b):.2f}x"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    # The build users run (cargo install), as the other benches; the dev build without one.
    release = os.path.join(REPO, "target", "release", "ateam")
    ap.add_argument("--ateam", default=release if os.path.exists(release)
                    else os.path.join(REPO, "target", "debug", "ateam"))
    ap.add_argument("--agents", default="claude,codex")
    ap.add_argument("--runtime", choices=["runc", "gvisor"], default="runc",
                    help="the member's runtime (the `docker run` side is runc either way)")
    ap.add_argument("--trace", metavar="DIR",
                    help="write each member run's apply log (RUST_LOG=ateam=debug, which costs "
                         "some time itself) and its first request's time into DIR")
    a = ap.parse_args()
    if a.trace:
        os.makedirs(a.trace, exist_ok=True)
    log = tempfile.mktemp(suffix=".jsonl")
    srv, port = start_model(log)
    cadir = tempfile.mkdtemp(prefix="bench-agents-ca-")
    state = tempfile.mkdtemp(prefix="bench-agents-state-")
    print(f"{a.runs} runs each (after one not counted), alternating, median; {a.ateam}; "
          f"stand-in model at https://{MODEL_HOST}:{port} (127.0.0.1)\n")
    rows = []
    try:
        for agent in a.agents.split(","):
            how = "docker run"
            try:
                # Both sides run the build of ateam's agent cache: fetched once, before.
                pulled = subprocess.run([a.ateam, "agents", "pull", agent], capture_output=True)
                if pulled.returncode != 0:
                    raise RunFailed(f"ateam agents pull {agent}:\n{output(pulled.stdout, pulled.stderr)}")
                ca_files(agent, cadir)
                # Alternating, so that a change in the machine's load falls on both sides; the
                # first of each warms what a person's machine has warm (page cache, images).
                dr, ar = [], []
                for i in range(a.runs + 1):
                    how = "docker run"
                    d = run_docker(agent, port, log, cadir, i, a.ateam)
                    how = "ateam member"
                    m = run_ateam(agent, port, log, a.ateam, i, state, a.trace, a.runtime)
                    if i > 0:
                        dr.append(d)
                        ar.append(m)
            except RunFailed as e:
                raise SystemExit(f"bench-agents: {agent} as {how} failed: {e}") from None
            rows.append((agent, dr, ar))
    finally:
        srv.shutdown()
        shutil.rmtree(cadir, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
        if os.path.exists(log):
            os.unlink(log)
    print("| agent | how | apply returns | first model request | whole turn (file written, exited) |")
    print("|---|---|---|---|---|")
    for agent, dr, ar in rows:
        print(f"| {agent} | `docker run` | - | {med([r[0] for r in dr])} | {med([r[1] for r in dr])} |")
        print(f"| {agent} | ateam member | {med([r[0] for r in ar])} | "
              f"{med([r[1] for r in ar])} | {med([r[2] for r in ar])} |")
        print(f"| {agent} | member / `docker run` | | {ratio([r[1] for r in ar], [r[0] for r in dr])} | "
              f"{ratio([r[2] for r in ar], [r[1] for r in dr])} |")


if __name__ == "__main__":
    main()
