#!/usr/bin/env python3
"""What `ateam controller --metrics` costs the idle controller.

A team of 10 members under one controller, on one engine; three runs of the controller over
the same running members, each measured over IDLE seconds of nothing happening (after the
members run and a settle time): without --metrics; with --metrics and nobody scraping; with
--metrics scraped every 15 s (Prometheus' default interval). The figure is the controller
process's CPU time (utime + stime from /proc/<pid>/stat) over the window, as a share of one
core, and the time each scrape took. The periodic resync (60 s) falls in every window alike.

Usage (as root, engines up: scripts/engines.sh): scripts/bench-metrics.py
(BENCH_IDLE_SECS=60, BENCH_ENGINE=docker|podman, ATEAM_BIN=path may be set; the default
binary is target/release/ateam: cargo build --release.)
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ATEAM = os.environ.get("ATEAM_BIN", os.path.join(REPO, "target/release/ateam"))
IDLE = float(os.environ.get("BENCH_IDLE_SECS", "60"))
ENGINE = os.environ.get("BENCH_ENGINE", "docker")
N = 10
SCRAPE_EVERY = 15.0
SETTLE = 10.0
TICK = os.sysconf("SC_CLK_TCK")


def env_file():
    env = {}
    with open("/run/ateam-ci/env") as f:
        for line in f:
            if line.startswith("export "):
                k, v = line[len("export "):].strip().split("=", 1)
                env[k] = v
    return env


ENV = env_file()

TEAM = """apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: metricsbench}
spec: {image: ateam-demo:latest, sessionDir: ../sessions, maxMembers: 20}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: lead}
spec: {command: [sleep, "100000"], cwd: ../repo}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: rw}
spec: {write: [../repo]}
"""

# Every member writes ../repo, and says it shares it.
MEMBER = """---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: w%d}
spec: {parent: lead, access: rw, restart: Always, resources: {memory: 64Mi, pids: 64}, shareWrites: true}
"""


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, utime 14, stime 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Bench:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ateam-metrics-bench-")
        for d in ["repo", "sessions", "manifests"]:
            os.mkdir(os.path.join(self.dir, d))
        os.chown(os.path.join(self.dir, "repo"), 65534, 65534)
        text = TEAM + "".join(MEMBER % i for i in range(N))
        with open(os.path.join(self.dir, "manifests", "team.yaml"), "w") as f:
            f.write(text)
        self.env = dict(os.environ, ATEAM_STATE_DIR=os.path.join(self.dir, "state"),
                        DOCKER_HOST=ENV["ATEAM_TEST_DOCKER"],
                        CONTAINER_HOST=ENV["ATEAM_TEST_PODMAN_ROOTFUL"])
        self.env.pop("RUST_LOG", None)

    def ateam(self, *args):
        return subprocess.run([ATEAM, "--backend", ENGINE, *args], cwd=self.dir, env=self.env,
                              capture_output=True, text=True)

    def running(self):
        out = self.ateam("status", "-o", "json")
        try:
            rows = json.loads(out.stdout)["teams"][0]["members"]
        except (ValueError, KeyError, IndexError):
            return 0
        return sum(1 for r in rows if r["kind"] == "Member" and r["state"] == "running")

    def controller(self, extra):
        log = open(os.path.join(self.dir, "controller.log"), "a")
        return subprocess.Popen(
            [ATEAM, "--backend", ENGINE, "controller", "-f", "manifests", *extra],
            cwd=self.dir, env=self.env, stdout=subprocess.DEVNULL, stderr=log)

    def run(self, name, metrics, scrape):
        port = free_port()
        extra = ["--metrics", f"127.0.0.1:{port}"] if metrics else []
        c = self.controller(extra)
        deadline = time.time() + 180
        while self.running() < N:
            if time.time() > deadline:
                with open(os.path.join(self.dir, "controller.log")) as f:
                    log = f.read()[-3000:]
                sys.exit(f"{name}: the members never ran; the controller's log ends:\n{log}")
            time.sleep(0.5)
        time.sleep(SETTLE)
        scrapes = []
        start_cpu, start = cpu_seconds(c.pid), time.time()
        next_scrape = start
        while time.time() - start < IDLE:
            if scrape and time.time() >= next_scrape:
                t = time.time()
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as r:
                    r.read()
                scrapes.append(time.time() - t)
                next_scrape += SCRAPE_EVERY
            time.sleep(0.2)
        used, took = cpu_seconds(c.pid) - start_cpu, time.time() - start
        c.terminate()
        c.wait(timeout=60)
        line = f"{name:28} CPU {used:6.2f} s over {took:4.0f} s = {100 * used / took:5.2f} % of a core"
        if scrapes:
            line += f"; {len(scrapes)} scrapes, median {1000 * sorted(scrapes)[len(scrapes) // 2]:.0f} ms"
        print(line, flush=True)

    def close(self):
        self.ateam("delete", "--team", "metricsbench", "--purge")
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    if not os.path.exists(ATEAM):
        sys.exit(f"{ATEAM}: build it first (cargo build --release) or set ATEAM_BIN")
    print(f"engine {ENGINE}, {N} members, {IDLE:.0f} s windows, binary {ATEAM}", flush=True)
    b = Bench()
    try:
        b.run("without --metrics", False, False)
        b.run("--metrics, not scraped", True, False)
        b.run("--metrics, scraped every 15 s", True, True)
        b.run("without --metrics (again)", False, False)
    finally:
        b.close()


if __name__ == "__main__":
    main()
