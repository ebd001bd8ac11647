#!/usr/bin/env python3
"""A member under gVisor against the same member under runc, on the same engine: the time of
`ateam apply` to a running, released member (start: create, start, the gate's checks, the
release), and of `ateam apply` bringing it back after the engine killed its container
(self-heal: the same apply that a controller runs on the death), alternating runc and gVisor
runs, --runs times each after one not counted. The member is ateam-demo with an allow list (so
its egress proxy and bridge come up too) and a write grant, checked before each run ends: its
kernel is the runtime's (gVisor says 4.4.0) and it answers an exec. Prints a Markdown table
for docs/gvisor.md: the medians, and gVisor's over runc's.

Docker runs both runtimes (its runtime `runsc` beside runc); Podman 4 runs one per service,
so its runc side is scripts/engines.sh's Podman service and its gVisor side that script's
gVisor service. For an agent's turn under gVisor: scripts/bench-agents.py --runtime gvisor.

Needs the engines (scripts/engines.sh) and a built ateam (target/debug/ateam, or --ateam).
Run as root, as CI does.

Usage: scripts/bench-gvisor.py [--runs 7] [--engine docker|podman] [--ateam PATH]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Each side's engine, for ateam and its CLI alike.
HOSTS = {
    ("docker", "runc"): ("DOCKER_HOST", "unix:///run/ateam-ci/docker.sock"),
    ("docker", "gvisor"): ("DOCKER_HOST", "unix:///run/ateam-ci/docker.sock"),
    ("podman", "runc"): ("CONTAINER_HOST", "unix:///run/ateam-ci/podman.sock"),
    ("podman", "gvisor"): ("CONTAINER_HOST", "unix:///run/ateam-ci/podman-gvisor.sock"),
}
IMAGE = "ateam-demo:latest"


def run(cmd, env=None, cwd=None):
    """Runs cmd; its stdout, or the bench stops with what it said."""
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout


def timed(cmd, env=None, cwd=None):
    """Seconds cmd took, and its stdout."""
    t = time.monotonic()
    out = run(cmd, env=env, cwd=cwd)
    return time.monotonic() - t, out


def team_yaml(team, runtime):
    return f"""apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: {IMAGE}, sessionDir: ./sessions, runtime: {runtime}}}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {{name: lead}}
spec: {{command: [sleep, "100000"], cwd: ./work}}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {{name: g}}
spec: {{write: [./work], network: {{allow: ["127.0.0.1:9"]}}}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {{name: a}}
spec: {{parent: lead, access: g, restart: Always, command: [sleep, "100000"], resources: {{memory: 128Mi, pids: 64}}}}
"""


def one_run(args, runtime, n):
    """(start, self-heal) seconds of one fresh team under `runtime`."""
    root = tempfile.mkdtemp(prefix="ateam-bench-gvisor-")
    os.chmod(root, 0o755)
    team = f"bg{os.getpid() % 100000}{runtime[0]}{n}"
    for d in ("work", "sessions", "state"):
        os.makedirs(os.path.join(root, d))
    os.chown(os.path.join(root, "work"), 65534, 65534)
    with open(os.path.join(root, "team.yaml"), "w") as f:
        f.write(team_yaml(team, runtime))
    var, uri = HOSTS[(args.engine, runtime)]
    env = dict(os.environ, ATEAM_STATE_DIR=os.path.join(root, "state"), **{var: uri})
    ateam = [args.ateam, "--backend", args.engine]
    cli = ["docker", "-H", uri] if args.engine == "docker" else ["podman", "--url", uri]
    kernel = "4.4.0" if runtime == "gvisor" else os.uname().release
    try:
        start, _ = timed(ateam + ["apply", "-f", "team.yaml"], env=env, cwd=root)
        said = run(ateam + ["exec", "a", "--team", team, "--", "uname", "-r"], env=env, cwd=root)
        if said.strip() != kernel:
            sys.exit(f"{runtime}: the member's kernel says {said.strip()}, not {kernel}")
        run(cli + ["kill", f"ateam_{team}_a"])
        heal, _ = timed(ateam + ["apply", "-f", "team.yaml"], env=env, cwd=root)
        run(ateam + ["exec", "a", "--team", team, "--", "true"], env=env, cwd=root)
        return start, heal
    finally:
        subprocess.run(ateam + ["delete", "--team", team, "--purge"], env=env, cwd=root,
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--engine", choices=["docker", "podman"], default="docker")
    p.add_argument("--ateam", default=os.path.join(REPO, "target", "debug", "ateam"))
    args = p.parse_args()
    if not os.access(args.ateam, os.X_OK):
        sys.exit(f"no ateam at {args.ateam}: cargo build, or --ateam")
    got = {"runc": [], "gvisor": []}
    # Alternating, so that a change in the machine's load falls on both sides.
    for i in range(args.runs + 1):
        for runtime in ("runc", "gvisor"):
            r = one_run(args, runtime, i)
            if i > 0:
                got[runtime].append(r)
    med = statistics.median
    print(f"{args.engine}, {args.runs} runs each (after one not counted), alternating, medians:\n")
    print("| | runc | gVisor | gVisor / runc |")
    print("|---|---|---|---|")
    for k, what in enumerate(["start (`apply` to released)", "self-heal (`apply` after a kill)"]):
        r = med(x[k] for x in got["runc"])
        g = med(x[k] for x in got["gvisor"])
        print(f"| {what} | {r:.3f} s | {g:.3f} s | {g / r:.2f}x |")


if __name__ == "__main__":
    main()
