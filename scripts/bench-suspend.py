#!/usr/bin/env python3
"""`ateam suspend`, `ateam resume` and `ateam fork`, timed, with the memory suspend frees: one member of
ateam-demo with an allow list (so its egress proxy goes and comes back too) that fills its
HOME with --home-mib of data, suspended and resumed --runs times, then forked --runs times
(each fork dropped again). Each resume and fork is checked: the data is in HOME. Side by side, the engine's own way down and up for the same image and
hardening (read-only root, no capabilities, no-new-privileges, nobody, tmpfs HOME, the
memory and pids caps, no network): `rm -f` and `run -d` of a plain container, which keeps
nothing of HOME. Prints a Markdown table for docs/suspend.md: the medians, and ateam's over
the engine's.

Needs the engines (scripts/engines.sh) and a built ateam (target/debug/ateam, or --ateam).
Run as root, as CI does.

Usage: scripts/bench-suspend.py [--runs 7] [--engine docker|podman] [--home-mib 16] [--ateam PATH]
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The engines of scripts/engines.sh, for ateam and their CLIs alike.
HOSTS = {
    "docker": ("DOCKER_HOST", "unix:///run/ateam-ci/docker.sock"),
    "podman": ("CONTAINER_HOST", "unix:///run/ateam-ci/podman.sock"),
}
CLI = {
    "docker": ["docker", "-H", "unix:///run/ateam-ci/docker.sock"],
    "podman": ["podman", "--url", "unix:///run/ateam-ci/podman.sock"],
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


def team_yaml(team, mib):
    fill = f"dd if=/dev/zero of=$HOME/blob bs=1048576 count={mib} 2>/dev/null; exec sleep 100000"
    return f"""apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {{name: {team}}}
spec: {{image: {IMAGE}, sessionDir: ./sessions, allowUnenforcedLimits: true}}
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
spec: {{parent: lead, access: g, command: [sh, -c, '{fill}'], resources: {{memory: 128Mi, pids: 64}}}}
"""


def freed_mib(said):
    """The memory `suspend` said it freed, in MiB."""
    m = re.search(r"([0-9.]+)(KiB|MiB|GiB|B) freed", said)
    if not m:
        return None
    scale = {"B": 1 / 1048576, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[m.group(2)]
    return float(m.group(1)) * scale


def bench_ateam(args, root):
    team = f"bs{os.getpid() % 100000}"
    for d in ("work", "sessions", "state"):
        os.makedirs(os.path.join(root, d))
    os.chown(os.path.join(root, "work"), 65534, 65534)
    with open(os.path.join(root, "team.yaml"), "w") as f:
        f.write(team_yaml(team, args.home_mib))
    var, uri = HOSTS[args.engine]
    env = dict(os.environ, ATEAM_STATE_DIR=os.path.join(root, "state"), **{var: uri})
    ateam = [args.ateam, "--backend", args.engine]
    run(ateam + ["apply", "-f", "team.yaml"], env=env, cwd=root)
    size = ["exec", "a", "--team", team, "--", "sh", "-c", "wc -c < $HOME/blob"]
    want = str(args.home_mib * 1048576)
    # The command fills HOME after its gate opens: wait for all of it.
    for _ in range(100):
        if run(ateam + size, env=env, cwd=root).strip() == want:
            break
        time.sleep(0.1)
    down, up, freed, forks = [], [], [], []
    try:
        for _ in range(args.runs):
            t, said = timed(ateam + ["suspend", "a", "--team", team], env=env, cwd=root)
            down.append(t)
            freed.append(freed_mib(said))
            t, _ = timed(ateam + ["resume", "a", "--team", team], env=env, cwd=root)
            up.append(t)
            got = run(ateam + size, env=env, cwd=root).strip()
            if got != want:
                sys.exit(f"HOME not back after resume: {got} bytes, not {want}")
        for i in range(args.runs):
            t, _ = timed(ateam + ["fork", "a", "--as", f"f{i}", "--team", team], env=env, cwd=root)
            forks.append(t)
            got = run(ateam + ["exec", f"f{i}"] + size[2:], env=env, cwd=root).strip()
            if got != want:
                sys.exit(f"HOME not in the fork: {got} bytes, not {want}")
            run(ateam + ["fork", "--drop", f"f{i}", "--team", team], env=env, cwd=root)
    finally:
        subprocess.run(ateam + ["delete", "--team", team, "--purge"], env=env, cwd=root,
                       capture_output=True)
    return down, up, [f for f in freed if f is not None], forks


def bench_engine(args):
    cli = CLI[args.engine]
    name = f"bench-suspend-{os.getpid()}"
    fill = f"dd if=/dev/zero of=/home/agent/blob bs=1048576 count={args.home_mib} 2>/dev/null; exec sleep 100000"
    # Podman's --tmpfs takes no uid=: a HOME anyone may write stands in for the member's own.
    owned = "uid=65534,gid=65534,mode=0700" if args.engine == "docker" else "mode=1777"
    create = cli + [
        "run", "-d", "--name", name, "--read-only", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges", "--user", "65534:65534",
        "--tmpfs", f"/home/agent:rw,nosuid,nodev,size=256m,{owned}",
        "--tmpfs", "/tmp:rw,nosuid,nodev,size=256m", "--memory", "128m", "--pids-limit", "64",
        "--network", "none", "-e", "HOME=/home/agent", IMAGE, "sh", "-c", fill,
    ]
    run(create)
    # Podman's rm -f waits out its stop timeout for a PID 1 that ignores SIGTERM; Docker kills.
    rm = cli + ["rm", "-f"] + (["-t", "0"] if args.engine == "podman" else []) + [name]
    down, up = [], []
    try:
        for _ in range(args.runs):
            t, _ = timed(rm)
            down.append(t)
            t, _ = timed(create)
            up.append(t)
    finally:
        subprocess.run(cli + ["rm", "-f", name], capture_output=True)
    return down, up


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--engine", choices=sorted(CLI), default="docker")
    p.add_argument("--home-mib", type=int, default=16)
    p.add_argument("--ateam", default=os.path.join(REPO, "target", "debug", "ateam"))
    args = p.parse_args()
    if not shutil.which(args.ateam) and not os.access(args.ateam, os.X_OK):
        sys.exit(f"no ateam at {args.ateam}: cargo build, or --ateam")
    root = tempfile.mkdtemp(prefix="ateam-bench-suspend-")
    os.chmod(root, 0o755)
    try:
        a_down, a_up, freed, forks = bench_ateam(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    e_down, e_up = bench_engine(args)
    med = statistics.median
    print(f"{args.engine}, {args.runs} runs, {args.home_mib} MiB in HOME (medians):\n")
    print("| | ateam (HOME kept, gate, proxy) | engine `rm -f` / `run -d` (nothing kept) | ratio |")
    print("|---|---|---|---|")
    print(f"| down | {med(a_down):.3f} s (`suspend`) | {med(e_down):.3f} s | {med(a_down) / med(e_down):.2f}x |")
    print(f"| up | {med(a_up):.3f} s (`resume`) | {med(e_up):.3f} s | {med(a_up) / med(e_up):.2f}x |")
    print(f"| fork | {med(forks):.3f} s (`fork`: HOME, grant and transcript copied) | {med(e_up):.3f} s (`run -d`) | {med(forks) / med(e_up):.2f}x |")
    if freed:
        print(f"\nMemory freed by suspend (container and proxy, as counted before): {med(freed):.1f} MiB")


if __name__ == "__main__":
    main()
