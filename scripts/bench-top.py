#!/usr/bin/env python3
"""What `ateam top` costs while it watches a team (a benchmark, not a test).

    scripts/bench-top.py                 # N=50 members on Docker, 60 s each
    BENCH_N=20 BENCH_SECS=30 BENCH_ENGINE=podman scripts/bench-top.py

Applies a team of N idle members, then runs, one after the other, each in an 80x24 tmux
terminal for BENCH_SECS: `ateam top` (a look a second: list, inspects, cgroups, egress logs)
and the engine's own live view, `docker stats` / `podman stats` (the peer: what a person
watching containers runs today). Each one's CPU is read from /proc/<pid>/stat (user+system
time of the process and its threads) and given as a percent of one core, with the ratio.
Needs the engines (scripts/engines.sh) and a release build (built here if missing).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = int(os.environ.get("BENCH_N", "50"))
SECS = float(os.environ.get("BENCH_SECS", "60"))
ENGINE = os.environ.get("BENCH_ENGINE", "docker")
ATEAM = os.environ.get("ATEAM", os.path.join(REPO, "target/release/ateam"))
TICK = os.sysconf("SC_CLK_TCK")


def env():
    e = dict(os.environ)
    for line in open("/run/ateam-ci/env"):
        k, _, v = line.removeprefix("export ").strip().partition("=")
        e[k] = v
    return e


def team_yaml(name, n):
    docs = [
        f"apiVersion: ateam.dev/v1alpha1\nkind: Team\nmetadata: {{name: {name}}}\n"
        "spec: {image: ateam-demo:latest, sessionDir: ./sessions, maxMembers: 500, allowUnenforcedLimits: true}\n",
        "apiVersion: ateam.dev/v1alpha1\nkind: MainSession\nmetadata: {name: lead}\n"
        'spec: {command: [sleep, "100000"], cwd: ./work}\n',
        "apiVersion: ateam.dev/v1alpha1\nkind: AccessGrant\nmetadata: {name: g}\nspec: {read: [./work]}\n",
    ]
    for i in range(n):
        docs.append(
            f"apiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {{name: m{i}}}\n"
            "spec: {parent: lead, access: g, resources: {memory: 32Mi, pids: 32}, "
            'command: [sleep, "100000"]}\n'
        )
    return "---\n".join(docs)


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def alive_cpu(pid):
    try:
        return cpu_seconds(pid)
    except OSError:
        return 0.0


def engine_pids():
    """The engine's own processes, which do the peer's work (and serve ateam's looks)."""
    if ENGINE == "docker":
        pids = [int(open("/run/ateam-ci/docker.pid").read())]
        # containerd and its shims answer dockerd's stats calls.
        pats = ["containerd --config /run/ateam-ci", "containerd-shim-runc-v2 -namespace moby"]
    else:
        pids = []
        pats = ["podman system service --time=0 unix:///run/ateam-ci/podman.sock"]
    for pat in pats:
        out = subprocess.run(["pgrep", "-f", pat], capture_output=True, text=True).stdout
        pids += [int(p) for p in out.split()]
    return pids


def watch(cmd, e, sock):
    """CPU % of one core that `cmd` used over SECS in an 80x24 terminal, and the engine's."""
    subprocess.run(["tmux", "-S", sock, "kill-server"], stderr=subprocess.DEVNULL)
    subprocess.run(
        ["tmux", "-S", sock, "new-session", "-d", "-x", "80", "-y", "24", "exec " + cmd],
        env=e,
        check=True,
    )
    pid = int(
        subprocess.run(
            ["tmux", "-S", sock, "list-panes", "-F", "#{pane_pid}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()[0]
    )
    time.sleep(5)  # started, first looks done
    engine = engine_pids()
    c0, t0 = cpu_seconds(pid), time.monotonic()
    e0 = sum(alive_cpu(p) for p in engine)
    time.sleep(SECS)
    c1, t1 = cpu_seconds(pid), time.monotonic()
    e1 = sum(alive_cpu(p) for p in engine)
    screen = subprocess.run(
        ["tmux", "-S", sock, "capture-pane", "-p"], capture_output=True, text=True
    ).stdout
    subprocess.run(["tmux", "-S", sock, "kill-server"])
    wall = t1 - t0
    return 100.0 * (c1 - c0) / wall, 100.0 * (e1 - e0) / wall, screen


def main():
    if not os.path.exists(ATEAM):
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=REPO, check=True)
    e = env()
    d = tempfile.mkdtemp(prefix="ateam-bench-top-")
    for sub in ["work", "sessions", "state"]:
        os.makedirs(os.path.join(d, sub))
    name = f"bt{os.getpid() % 100000}"
    with open(os.path.join(d, "team.yaml"), "w") as f:
        f.write(team_yaml(name, N))
    e["ATEAM_STATE_DIR"] = os.path.join(d, "state")
    e["CONTAINER_HOST"] = e["ATEAM_TEST_PODMAN_ROOTFUL"]
    base = [ATEAM, "--backend", ENGINE]
    subprocess.run(base + ["apply", "-f", os.path.join(d, "team.yaml")], env=e, check=True,
                   stdout=subprocess.DEVNULL)
    sock = os.path.join(d, "bench.sock")
    try:
        uri = e["ATEAM_TEST_DOCKER"] if ENGINE == "docker" else e["ATEAM_TEST_PODMAN_ROOTFUL"]
        flag = "-H" if ENGINE == "docker" else "--url"
        top, top_engine, screen = watch(" ".join(base + ["top"]), e, sock)
        if f"{name}/m{min(N, 12) - 1}" not in screen:
            sys.exit(f"ateam top did not show the team:\n{screen}")
        peer, peer_engine, _ = watch(f"{ENGINE} {flag} {uri} stats", e, sock)
        print(f"{ENGINE}, {N} members, {SECS:.0f} s each, CPU as % of one core "
              "(the viewer, the engine serving it, both):")
        print(f"  ateam top     {top:6.2f} %  engine {top_engine:6.2f} %  "
              f"both {top + top_engine:6.2f} %")
        print(f"  {ENGINE} stats {peer:6.2f} %  engine {peer_engine:6.2f} %  "
              f"both {peer + peer_engine:6.2f} %")
        both = (top + top_engine) / (peer + peer_engine) if peer + peer_engine else float("inf")
        print(f"  ratio, viewer alone {top / peer if peer else float('inf'):.2f}x, "
              f"with the engine {both:.2f}x")
    finally:
        subprocess.run(base + ["delete", "--team", name], env=e, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        subprocess.run(["tmux", "-S", os.path.join(d, "state", "teams", name, "sessions",
                                                    "lead", "tmux.sock"), "kill-server"],
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
