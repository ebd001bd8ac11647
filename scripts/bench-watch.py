#!/usr/bin/env python3
"""What `ateam status -w` and `ateam top` cost while a member fills its transcript folder
with empty files (issue 34: a member must not be able to make a watcher spin). A benchmark,
not a test; rerunnable.

    scripts/bench-watch.py                        # 100,000 files, Docker, 30 s each
    BENCH_FILES=0 BENCH_SECS=20 scripts/bench-watch.py   # the baseline, an empty folder

Applies a team of one idle member (a real engine member), creates BENCH_FILES empty files
in that member's transcript folder (what the member could do from inside: it owns the
folder), then runs, one after the other, `ateam status -w` (output to /dev/null) and
`ateam top` (in an 80x24 tmux terminal), each for BENCH_SECS, and reads each one's CPU from
/proc/<pid>/stat (user+system of the process and its threads) as a percent of one core.
Needs the engines (scripts/engines.sh). ATEAM picks the binary (default: the release build
if there is one, else the debug build).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = int(os.environ.get("BENCH_FILES", "100000"))
SECS = float(os.environ.get("BENCH_SECS", "30"))
ENGINE = os.environ.get("BENCH_ENGINE", "docker")
TICK = os.sysconf("SC_CLK_TCK")


def binary():
    if os.environ.get("ATEAM"):
        return os.environ["ATEAM"]
    for build in ["release", "debug"]:
        path = os.path.join(REPO, "target", build, "ateam")
        if os.path.exists(path):
            return path
    subprocess.run(["cargo", "build", "--release", "--locked"], cwd=REPO, check=True)
    return os.path.join(REPO, "target/release/ateam")


def env():
    e = dict(os.environ)
    for line in open("/run/ateam-ci/env"):
        k, _, v = line.removeprefix("export ").strip().partition("=")
        e[k] = v
    return e


def team_yaml(name):
    return "---\n".join([
        f"apiVersion: ateam.dev/v1alpha1\nkind: Team\nmetadata: {{name: {name}}}\n"
        "spec: {image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true}\n",
        "apiVersion: ateam.dev/v1alpha1\nkind: MainSession\nmetadata: {name: lead}\n"
        'spec: {command: [sleep, "100000"], cwd: ./work}\n',
        "apiVersion: ateam.dev/v1alpha1\nkind: AccessGrant\nmetadata: {name: g}\nspec: {read: [./work]}\n",
        "apiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {name: m}\n"
        "spec: {parent: lead, access: g, resources: {memory: 32Mi, pids: 32}, "
        'command: [sleep, "100000"]}\n',
    ])


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def measure(pid):
    """CPU % of one core `pid` used over SECS, after 3 s to start."""
    time.sleep(3)
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(SECS)
    c1, t1 = cpu_seconds(pid), time.monotonic()
    return 100.0 * (c1 - c0) / (t1 - t0)


def status_watch(cmd, e):
    p = subprocess.Popen(cmd + ["status", "-w"], env=e, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        return measure(p.pid)
    finally:
        p.kill()
        p.wait()


def top(cmd, e, sock, name):
    subprocess.run(["tmux", "-S", sock, "kill-server"], stderr=subprocess.DEVNULL)
    subprocess.run(["tmux", "-S", sock, "new-session", "-d", "-x", "80", "-y", "24",
                    "exec " + " ".join(cmd + ["top"])], env=e, check=True)
    pid = int(subprocess.run(["tmux", "-S", sock, "list-panes", "-F", "#{pane_pid}"],
                             capture_output=True, text=True, check=True).stdout.split()[0])
    try:
        cpu = measure(pid)
        screen = subprocess.run(["tmux", "-S", sock, "capture-pane", "-p"],
                                capture_output=True, text=True).stdout
        if f"{name}/m" not in screen:
            sys.exit(f"ateam top did not show the member:\n{screen}")
        return cpu
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], stderr=subprocess.DEVNULL)


def main():
    ateam = binary()
    e = env()
    d = tempfile.mkdtemp(prefix="ateam-bench-watch-")
    for sub in ["work", "sessions", "state"]:
        os.makedirs(os.path.join(d, sub))
    name = f"bw{os.getpid() % 100000}"
    with open(os.path.join(d, "team.yaml"), "w") as f:
        f.write(team_yaml(name))
    e["ATEAM_STATE_DIR"] = os.path.join(d, "state")
    cmd = [ateam, "--backend", ENGINE]
    subprocess.run(cmd + ["apply", "-f", os.path.join(d, "team.yaml")], env=e, check=True,
                   stdout=subprocess.DEVNULL)
    try:
        transcript = os.path.join(d, "sessions", "members", "m")
        os.makedirs(transcript, exist_ok=True)
        for i in range(FILES):
            open(os.path.join(transcript, f"f{i}"), "w").close()
        sw = status_watch(cmd, e)
        tp = top(cmd, e, os.path.join(d, "bench.sock"), name)
        print(f"{ENGINE}, {FILES} empty files in one member's transcript folder, {SECS:.0f} s "
              f"each, CPU as % of one core ({os.path.relpath(ateam, REPO)}):")
        print(f"  ateam status -w  {sw:6.2f} %")
        print(f"  ateam top        {tp:6.2f} %")
    finally:
        subprocess.run(cmd + ["delete", "--team", name], env=e, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        subprocess.run(["tmux", "-S", os.path.join(d, "state", "teams", name, "sessions",
                                                    "lead", "tmux.sock"), "kill-server"],
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
