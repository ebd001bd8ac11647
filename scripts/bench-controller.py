#!/usr/bin/env python3
"""The controller's numbers: self-heal against the engine's own `--restart always`, idle cost
and edit-to-effect with 50 members.

For each engine, 20 times: kill -9 the main process of a running member (as a crash would)
and time until the member's command runs again (its demo agent appends "agent: started as"
to its transcript: after the gate, so ateam's checks are included). Side by side, the same
for a plain container with `--restart always` and the same image and command, and for that
container with `--restart no`, started again through the engine's API the moment it is killed
(the API floor: what a controller that restarts through the API pays at least, with no check
and no gate). Prints the median and worst of each and the ratios.

Then, with a team of 50 members under one controller: its CPU time over 240 s of nothing
happening and its RSS (idle), and the time from saving the manifest with one member's memory
changed to that member's new container running its command, with the other 49 untouched
(edit to effect, 5 edits). All of it goes to docs/benchmarks-controller.md.

Usage (as root, engines up: scripts/engines.sh): scripts/bench-controller.py [KILLS]
(BENCH_IDLE_SECS=240, BENCH_ENGINES="docker podman", BENCH_SIZES="50 200" (the team sizes of
the idle, edit and heal-in-a-crowd parts), BENCH_PARTS="idle heal" and ATEAM_BIN may be set.)
Needs a release build: cargo build --release.
"""

import http.client
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
ATEAM = os.environ.get("ATEAM_BIN", os.path.join(REPO, "target/release/ateam"))
KILLS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
# Two resyncs at the controller's default --resync of 120 s.
IDLE_SECS = float(os.environ.get("BENCH_IDLE_SECS", "240"))
SIZES = [int(n) for n in os.environ.get("BENCH_SIZES", "50 200").split()]
PARTS = os.environ.get("BENCH_PARTS", "idle heal").split()
EDITS = 5
# Kills of one member of each crowd (BENCH_SIZES), to compare its heal across team sizes.
CROWD_KILLS = int(os.environ.get("BENCH_CROWD_KILLS", "5"))
# Both back off restarts of a container that ran less than 10 s (Docker: 100 ms doubling;
# ateam: 10 s doubling, with --crash-reset 10s here to match): kills are 11 s apart, so each
# measures the restart of a crash after real work.
SPACING = 11.0


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
metadata: {name: heal}
spec: {image: ateam-demo:latest, sessionDir: ./sessions}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: lead}
spec: {command: [sleep, "100000"], cwd: ./repo}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: rw}
spec: {write: [./repo]}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: worker}
spec: {parent: lead, access: rw, restart: Always, resources: {memory: 64Mi, pids: 64}}
"""


def starts(path):
    try:
        with open(path) as f:
            return f.read().count("agent: started as")
    except OSError:
        return 0


def wait_starts(path, n, timeout=30.0):
    deadline = time.monotonic() + timeout
    while starts(path) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"{path}: never started {n} times")
        time.sleep(0.002)


def pid_of(cli, name):
    out = subprocess.run(cli + ["inspect", "--format", "{{.State.Pid}}", name],
                         capture_output=True, text=True).stdout.strip()
    return int(out or 0)


def kill_and_time(cli, name, transcript, heal=None):
    """Kills the container's main process; seconds until the command runs again (`heal`,
    when given, is called at once with the container's name and does the restart)."""
    n = starts(transcript)
    pid = 0
    while pid <= 1:
        pid = pid_of(cli, name)
        time.sleep(0.01)
    t0 = time.monotonic()
    os.kill(pid, 9)
    if heal:
        heal(name)
    wait_starts(transcript, n + 1)
    return time.monotonic() - t0


class Api(http.client.HTTPConnection):
    """An engine's API on its Unix socket."""

    def __init__(self, engine):
        super().__init__("localhost", timeout=30)
        key = "ATEAM_TEST_DOCKER" if engine == "docker" else "ATEAM_TEST_PODMAN_ROOTFUL"
        self.path = ENV[key].removeprefix("unix://")
        # ateam asks Podman through its own API (libpod), Docker through the Docker API.
        self.prefix = "/v1.41" if engine == "docker" else "/v4.0.0/libpod"

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)

    def call(self, method, path):
        self.request(method, self.prefix + path)
        r = self.getresponse()
        return r.status, r.read()


def api_heal(engine):
    """The least a controller that restarts through the API does, told of the death at once
    (as a pidfd tells ateam): ask until the engine says the container stopped, then start it.
    No check, no gate."""
    def heal(name):
        api = Api(engine)
        while True:
            _, body = api.call("GET", f"/containers/{name}/json")
            if not json.loads(body)["State"]["Running"]:
                break
            time.sleep(0.002)
        status, body = api.call("POST", f"/containers/{name}/start")
        if status not in (204, 304):
            raise SystemExit(f"start {name}: {status} {body!r}")
        api.close()
    return heal


def bench_ateam(engine, cli):
    d = tempfile.mkdtemp(prefix="ateam-heal-")
    os.makedirs(f"{d}/repo"), os.makedirs(f"{d}/sessions")
    os.chown(f"{d}/repo", 65534, 65534)
    with open(f"{d}/team.yaml", "w") as f:
        f.write(TEAM)
    env = dict(os.environ, ATEAM_STATE_DIR=f"{d}/state", DOCKER_HOST=ENV["ATEAM_TEST_DOCKER"],
               CONTAINER_HOST=ENV["ATEAM_TEST_PODMAN_ROOTFUL"])
    env.pop("SUDO_UID", None)
    log = open(f"{d}/controller.log", "w")
    ctl = subprocess.Popen([ATEAM, "--backend", engine, "controller", "-f", f"{d}/team.yaml",
                            "--crash-reset", "10s"],
                           env=env, cwd=d, stdout=subprocess.DEVNULL, stderr=log)
    transcript = f"{d}/sessions/members/worker/transcript.log"
    times = []
    try:
        wait_starts(transcript, 1, 60)
        for _ in range(KILLS):
            time.sleep(SPACING)
            times.append(kill_and_time(cli, "ateam_heal_worker", transcript))
    finally:
        ctl.terminate()
        ctl.wait()
        subprocess.run([ATEAM, "--backend", engine, "delete", "--team", "heal", "--purge"],
                       env=env, cwd=d, capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
    return times


def bench_engine(cli, kills=None, engine=None):
    """The engine's own `--restart always`; with `engine`, `--restart no` and `api_heal`."""
    d = tempfile.mkdtemp(prefix="engine-heal-")
    os.chmod(d, 0o777)
    name = f"heal-peer-{os.getpid()}"
    restart = "no" if engine else "always"
    heal = api_heal(engine) if engine else None
    subprocess.run(cli + ["rm", "-f", name], capture_output=True)
    subprocess.run(cli + ["run", "-d", "--name", name, "--restart", restart, "--init",
                          "--network", "none", "--cap-drop", "ALL", "--read-only",
                          "--security-opt", "no-new-privileges", "--user", "65534:65534",
                          "--memory", "64m", "--memory-swap", "64m", "--pids-limit", "64",
                          "--tmpfs", "/tmp", "-e", "ATEAM_SESSION_DIR=/t", "-v", f"{d}:/t",
                          "ateam-demo:latest"], check=True, capture_output=True)
    transcript = f"{d}/transcript.log"
    times = []
    try:
        wait_starts(transcript, 1, 60)
        for _ in range(KILLS if kills is None else kills):
            time.sleep(SPACING)
            times.append(kill_and_time(cli, name, transcript, heal))
    finally:
        subprocess.run(cli + ["rm", "-f", name], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
    return times


def team_of(n, memory_of):
    # Every member writes ./repo, and says it shares it.
    members = "".join(
        f"---\napiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {{name: m{i}}}\n"
        f"spec: {{parent: lead, access: rw, restart: Always, shareWrites: true, "
        f"resources: {{memory: {memory_of(i)}, pids: 64}}}}\n"
        for i in range(1, n + 1))
    head = TEAM.split("---\napiVersion: ateam.dev/v1alpha1\nkind: Member")[0]
    return head.replace("name: heal}", "name: idle}") \
        .replace("sessionDir: ./sessions}", f"sessionDir: ./sessions, maxMembers: {n}}}") + members


def save(path, text):
    """As an editor saves: a temp file renamed over the old one."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def proc_cpu_ms(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def proc_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def ids(cli):
    out = subprocess.run(cli + ["ps", "-a", "--no-trunc", "--filter", "label=ateam.dev/team=idle",
                                "--format", "{{.Names}} {{.ID}}"],
                         capture_output=True, text=True).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def wait_quiet(pid, limit=120):
    """Until the controller used at most 10 ms of CPU in 2 s: the start events of a cold
    bring-up each schedule a member's look, which are over some seconds after the last
    member runs (on Podman at 200, 3 s after). Idle is measured after them."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        c0 = proc_cpu_ms(pid)
        time.sleep(2)
        if proc_cpu_ms(pid) - c0 <= 10:
            return


def bench_idle_and_edit(engine, cli, n):
    """A team of n under one controller: (cpu ms over IDLE_SECS, rss MB, [edit seconds],
    untouched of n-1 after every edit, [heal seconds] of one member killed in the crowd,
    [restart seconds] of the engine's own `--restart always` beside that crowd)."""
    d = tempfile.mkdtemp(prefix="ateam-idle-")
    os.makedirs(f"{d}/repo"), os.makedirs(f"{d}/sessions")
    os.chown(f"{d}/repo", 65534, 65534)
    path = f"{d}/team.yaml"
    save(path, team_of(n, lambda i: "64Mi"))
    env = dict(os.environ, ATEAM_STATE_DIR=f"{d}/state", DOCKER_HOST=ENV["ATEAM_TEST_DOCKER"],
               CONTAINER_HOST=ENV["ATEAM_TEST_PODMAN_ROOTFUL"])
    env.pop("SUDO_UID", None)
    log = open(f"{d}/controller.log", "w")
    ctl = subprocess.Popen([ATEAM, "--backend", engine, "controller", "-f", path,
                            "--crash-reset", "10s"],
                           env=env, cwd=d, stdout=subprocess.DEVNULL, stderr=log)
    tr = lambda i: f"{d}/sessions/members/m{i}/transcript.log"
    cpu = rss = 0.0
    edits, heals, peers, untouched = [], [], [], n - 1
    try:
        for i in range(1, n + 1):
            wait_starts(tr(i), 1, 600)
        wait_quiet(ctl.pid)
        if "idle" in PARTS:
            c0 = proc_cpu_ms(ctl.pid)
            time.sleep(IDLE_SECS)
            cpu = proc_cpu_ms(ctl.pid) - c0
            rss = proc_rss_mb(ctl.pid)
            target = min(7, n)
            for e in range(EDITS):
                before = ids(cli)
                k = starts(tr(target))
                mem = "80Mi" if e % 2 == 0 else "64Mi"
                t0 = time.monotonic()
                save(path, team_of(n, lambda i: mem if i == target else "64Mi"))
                wait_starts(tr(target), k + 1, 60)
                edits.append(time.monotonic() - t0)
                time.sleep(1)
                after = ids(cli)
                same = sum(1 for name, v in before.items()
                           if name != f"ateam_idle_m{target}" and after.get(name) == v)
                untouched = min(untouched, same)
        if "heal" in PARTS:
            victim = min(3, n)
            for _ in range(CROWD_KILLS):
                time.sleep(SPACING)
                heals.append(kill_and_time(cli, f"ateam_idle_m{victim}", tr(victim)))
            # The engine's own restart beside the same crowd: what n containers cost the
            # engine itself, apart from what they cost ateam.
            peers = bench_engine(cli, CROWD_KILLS)
    finally:
        ctl.terminate()
        ctl.wait()
        subprocess.run([ATEAM, "--backend", engine, "delete", "--team", "idle", "--purge"],
                       env=env, cwd=d, capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
    return cpu, rss, edits, untouched, heals, peers


def summary(ts):
    return statistics.median(ts), max(ts)


def main():
    rows, idle = [], []
    for engine, cli in ENGINES.items():
        for n in SIZES:
            cpu, rss, edits, untouched, heals, peers = bench_idle_and_edit(engine, cli, n)
            idle.append((engine, n, cpu, rss, edits, untouched, heals, peers))
            print(f"{engine}, {n} members: idle {cpu:.0f} ms CPU over {IDLE_SECS:.0f} s, "
                  f"RSS {rss:.1f} MB; edits {json.dumps([round(t, 3) for t in edits])}, "
                  f"{untouched} of {n - 1} untouched; heals {json.dumps([round(t, 3) for t in heals])}; "
                  f"engine's own beside them {json.dumps([round(t, 3) for t in peers])}")
    if "heal" in PARTS and KILLS > 0:
        for engine, cli in ENGINES.items():
            a = bench_ateam(engine, cli)
            e = bench_engine(cli)
            fl = bench_engine(cli, engine=engine)
            rows.append((engine, a, e, fl))
            am, aw = summary(a)
            em, ew = summary(e)
            print(f"{engine}: ateam first {a[0]:.3f} s, median {am:.3f} s, worst {aw:.3f} s; "
                  f"engine --restart always median {em:.3f} s, worst {ew:.3f} s; "
                  f"API floor median {statistics.median(fl):.3f} s; "
                  f"ratio of medians {am / em:.2f}")
            print(f"  ateam: {json.dumps([round(t, 3) for t in a])}")
            print(f"  engine: {json.dumps([round(t, 3) for t in e])}")
            print(f"  API floor: {json.dumps([round(t, 3) for t in fl])}")
    write(rows, idle)


def cell(xs, f):
    return f(xs) if xs else float("nan")


def write(rows, idle):
    with open(os.path.join(REPO, "docs/benchmarks-controller.md"), "w") as f:
        f.write("# Self-heal: ateam controller against the engine's own restart\n\n")
        f.write(f"Generated by scripts/bench-controller.py: {KILLS} kills -9 of a member's main "
                f"process, {SPACING:.0f} s apart (both back off quicker crashes); time until "
                "its command runs again (for ateam: after the gate and every check). The peer "
                "is a plain container with the same image, flags and `--restart always`. The API "
                "floor is that container with `--restart no`, restarted through the engine's API "
                "by the least a controller does, told of the death at once: inspect until it is "
                "stopped, then start (no check, no gate).\n\n")
        f.write("| engine | ateam first | ateam median | ateam worst | engine median | engine worst "
                "| ratio of medians | API floor median | ateam / API floor |\n"
                "|---|---|---|---|---|---|---|---|---|\n")
        for engine, a, e, fl in rows:
            am, fm = statistics.median(a), statistics.median(fl)
            f.write(f"| {engine} | {a[0]:.3f} s | {am:.3f} s | {max(a):.3f} s "
                    f"| {statistics.median(e):.3f} s | {max(e):.3f} s "
                    f"| {am / statistics.median(e):.2f} | {fm:.3f} s | {am / fm:.2f} |\n")
        f.write(f"\n## Teams of {', '.join(str(n) for n in SIZES)} members under one controller\n\n"
                f"CPU time of the controller over {IDLE_SECS:.0f} s with nothing happening (its "
                "default resync is every 120 s), its "
                f"RSS, and from saving the manifest with one member's memory changed to that "
                f"member's new container running its command ({EDITS} edits; the editor "
                "debounce of 300 ms included), with how many of the other members kept their "
                f"container through every edit; then {CROWD_KILLS} kills -9 of one member in "
                "that crowd, each timed as above, and as many of the peer container started "
                "beside the same crowd (the engine's own restart, with n containers to "
                "keep).\n\n"
                "| engine | members | idle CPU | RSS | edit median | edit worst | others untouched "
                "| heal median | heal worst | engine's own beside them, median | ratio |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|\n")
        for engine, n, cpu, rss, edits, untouched, heals, peers in idle:
            f.write(f"| {engine} | {n} | {cpu:.0f} ms / {IDLE_SECS:.0f} s "
                    f"({cpu * 60 / IDLE_SECS:.0f} ms a minute) | {rss:.1f} MB "
                    f"| {cell(edits, statistics.median):.3f} s | {cell(edits, max):.3f} s "
                    f"| {untouched} of {n - 1} | {cell(heals, statistics.median):.3f} s "
                    f"| {cell(heals, max):.3f} s | {cell(peers, statistics.median):.3f} s "
                    f"| {cell(heals, statistics.median) / cell(peers, statistics.median):.2f} |\n")


if __name__ == "__main__":
    main()
