#!/usr/bin/env python3
"""What issue 11's mechanics cost: a member's request for a helper, and a promotion.

For each engine:

1. helper request: a member of a team with `helperRequests: true` asks (from the host, on its
   helpers socket: the same bytes busybox wget sends from inside) for a helper that runs
   `sleep`; timed from the request to the answer, which comes once the helper's container
   runs its command (judged by the manifest rules, recorded, created, verified, released).
   Side by side: `docker|podman run -d` of the same image and command with the same
   hardening flags (the engine's own CLI, which checks nothing). REQUESTS of each.
2. promotion: `ateam apply` of a manifest that turns a running member into a MainSession
   (`promotedFrom`): stop, move the transcript, start the session, remove the container, each
   step journalled. Side by side, the same by hand with no journal nor checks:
   `<engine> stop -t 10` + `<engine> rm` + `mv` + `tmux new-session -d`. ROUNDS of each.

Prints medians, worst and the ratio; writes docs/benchmarks-sessions.md.
Usage (as root, engines up: scripts/engines.sh): scripts/bench-sessions.py [REQUESTS] [ROUNDS]
Needs a release build: cargo build --release.
"""

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ATEAM = os.path.join(REPO, "target/release/ateam")
REQUESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5


def env_file():
    env = {}
    with open("/run/ateam-ci/env") as f:
        for line in f:
            if line.startswith("export "):
                k, v = line[len("export "):].strip().split("=", 1)
                env[k] = v
    return env


ENV = env_file()
ENGINES = {
    "docker": ["docker", "-H", ENV["ATEAM_TEST_DOCKER"]],
    "podman": ["podman", "--url", ENV["ATEAM_TEST_PODMAN_ROOTFUL"]],
}
ENGINES = {e: c for e, c in ENGINES.items()
           if e in os.environ.get("BENCH_ENGINES", "docker podman").split()}

TEAM = """apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: ateam-demo:latest, sessionDir: ./sessions, maxMembers: {max}, helperRequests: true}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./repo}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: rw}}
spec: {{write: [./repo]}}
---
"""

MEMBER = """apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: a}
spec: {parent: lead, access: rw, command: [sh, -c, 'echo work > $ATEAM_SESSION_DIR/t.log; exec sleep 100000']}
"""

PROMOTED = """apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: a}
spec: {command: [sleep, "100000"], cwd: ./repo, promotedFrom: a}
"""


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


class Team:
    def __init__(self, engine, tag, max_members=4):
        self.engine = engine
        self.dir = tempfile.mkdtemp(prefix="ateam-bench-sessions-")
        os.makedirs(os.path.join(self.dir, "repo"))
        os.chown(os.path.join(self.dir, "repo"), 65534, 65534)
        self.team = f"{tag}{engine[0]}{os.getpid() % 10000}"
        self.max = max_members
        self.env = dict(os.environ, ATEAM_STATE_DIR=os.path.join(self.dir, "state"),
                        DOCKER_HOST=ENV["ATEAM_TEST_DOCKER"],
                        CONTAINER_HOST=ENV["ATEAM_TEST_PODMAN_ROOTFUL"])

    def write(self, body):
        with open(os.path.join(self.dir, "team.yaml"), "w") as f:
            f.write(TEAM.format(team=self.team, max=self.max) + body)

    def apply(self):
        t = time.perf_counter()
        run([ATEAM, "--backend", self.engine, "apply", "-f",
             os.path.join(self.dir, "team.yaml")], env=self.env, cwd=self.dir)
        return time.perf_counter() - t

    def socket(self, member):
        return os.path.join(self.dir, "state/teams", self.team, "members", member,
                            "ctl/helpers.sock")

    def close(self):
        for s in ("lead", "a"):
            sock = os.path.join(self.dir, "state/teams", self.team, "sessions", s, "tmux.sock")
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True)
        subprocess.run([ATEAM, "--backend", self.engine, "delete", "--team", self.team,
                        "--purge"], env=self.env, capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def ask(path, body):
    data = json.dumps(body).encode()
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(b"POST /helpers HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(data) + data)
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    s.close()
    status = out.split(b" ", 2)[1]
    if status != b"201":
        raise RuntimeError(out.decode(errors="replace"))
    return json.loads(out.split(b"\r\n\r\n", 1)[1])


def cli_run(cli, name):
    """The engine's CLI with the hardening ateam gives a member (no checks, no gate)."""
    t = time.perf_counter()
    run(cli + ["run", "-d", "--name", name, "--network", "none", "--cap-drop", "ALL",
               "--security-opt", "no-new-privileges", "--read-only", "--user", "65534:65534",
               "--memory", "1g", "--pids-limit", "512", "--init",
               "--tmpfs", "/tmp", "--label", "bench-sessions=1",
               "ateam-demo:latest", "sleep", "100000"])
    return time.perf_counter() - t


def bench(engine, cli):
    # 1. Helper requests.
    team = Team(engine, "bh", max_members=REQUESTS + 2)
    asks, plain = [], []
    try:
        team.write(MEMBER)
        team.apply()
        for i in range(REQUESTS):
            t = time.perf_counter()
            answer = ask(team.socket("a"), {"name": f"h{i}", "command": ["sleep", "100000"]})
            asks.append(time.perf_counter() - t)
            assert answer["state"] == "running", answer
            plain.append(cli_run(cli, f"bench-sessions-{engine}-{os.getpid()}-{i}"))
    finally:
        team.close()
        ids = run(cli + ["ps", "-aq", "--filter", "label=bench-sessions=1"]).stdout.split()
        if ids:
            run(cli + ["rm", "-f"] + ids)

    # 2. Promotions, each in a team of its own (a promoted name stays a session).
    promote, by_hand = [], []
    for r in range(ROUNDS):
        team = Team(engine, f"bp{r}")
        try:
            team.write(MEMBER)
            team.apply()
            team.write(PROMOTED)
            promote.append(team.apply())
        finally:
            team.close()
        # By hand: a container and a folder like the member's, then the same steps.
        d = tempfile.mkdtemp(prefix="ateam-bench-hand-")
        name = f"bench-sessions-hand-{engine}-{os.getpid()}-{r}"
        try:
            os.makedirs(os.path.join(d, "members/a"))
            with open(os.path.join(d, "members/a/t.log"), "w") as f:
                f.write("work\n")
            cli_run(cli, name)
            t = time.perf_counter()
            run(cli + ["stop", "-t", "10", name])
            run(cli + ["rm", name])
            os.rename(os.path.join(d, "members/a"), os.path.join(d, "a"))
            run(["tmux", "-S", os.path.join(d, "tmux.sock"), "new-session", "-d", "-s", "a",
                 "-c", os.path.join(d, "a"), "sleep", "100000"])
            by_hand.append(time.perf_counter() - t)
        finally:
            subprocess.run(["tmux", "-S", os.path.join(d, "tmux.sock"), "kill-server"],
                           capture_output=True)
            subprocess.run(cli + ["rm", "-f", name], capture_output=True)
            shutil.rmtree(d, ignore_errors=True)
    return asks, plain, promote, by_hand


def main():
    if not os.path.exists(ATEAM):
        sys.exit("no release build: cargo build --release")
    load = os.getloadavg()[0]
    rows = []
    for engine, cli in ENGINES.items():
        asks, plain, promote, by_hand = bench(engine, cli)
        for what, ours, theirs, peer in [
            ("helper request, asked to running", asks, plain, f"`{engine} run -d`"),
            ("promotion (`apply`)", promote, by_hand, "stop + rm + mv + tmux by hand"),
        ]:
            m, p = statistics.median(ours), statistics.median(theirs)
            rows.append((engine, what, m, max(ours), peer, p, m / p))
            print(f"{engine} {what}: {m:.3f} s (worst {max(ours):.3f}) vs {peer} {p:.3f} s: "
                  f"{m / p:.2f}x", flush=True)
    out = [
        "# Helper requests and promotion",
        "",
        f"`scripts/bench-sessions.py {REQUESTS} {ROUNDS}` on this machine ({os.cpu_count()} CPUs, "
        f"load average {load:.1f} at the start), release build. Medians (and worst) of "
        f"{REQUESTS} requests and {ROUNDS} promotions per engine; the peer is the engine's own CLI "
        "doing the same work without ateam's checks.",
        "",
        "| engine | what | ateam median s | worst s | peer | peer median s | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for e, what, m, worst, peer, p, ratio in rows:
        out.append(f"| {e} | {what} | {m:.3f} | {worst:.3f} | {peer} | {p:.3f} | {ratio:.2f}x |")
    out += [
        "",
        "A request's time includes judging it by the manifest rules (the team written out and "
        "validated again), recording it, the store's lock, and the member's whole verified "
        "start (pinned grants, inspect against the policy, the gate released). A promotion's "
        "includes a whole apply's look at the machine, four journal writes with fsync, the "
        "member's graceful stop and the container's removal.",
        "",
    ]
    with open(os.path.join(REPO, "docs/benchmarks-sessions.md"), "w") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main()
