#!/usr/bin/env python3
"""A soak under the controller: one `ateam controller -f DIR` over two teams of members while
a seeded random mix of events hits them, then every guarantee checked (issue 18).

Events (short random gaps between them): kill -9 of a member's process; restart, stop+start,
rename, pause and update --memory through the engine's CLI; a look-alike container with a
member's labels; a valid manifest edit (a member changed, added or removed, saved as editors
save: a temp file renamed over the old one); a broken edit, then its fix; a concurrent
`ateam apply` of the same files; an engine restart; SIGTERM of the controller and a new one;
a helper request, then its requester's removal.

The engine is private to the soak, so that its restart disturbs nobody else on the machine:
for Docker a dockerd with its own data root (as tests/controller.rs's PrivateEngine); for
Podman a `podman system service` of its own over the rootful storage. Podman's containers are
run by conmon, not by the service, so restarting the service is what an upgrade of Podman or
a `systemctl restart podman.socket` does; a private --root would need its own image copy and
shares the machine-wide lock memory (/libpod_lock) with the rootful store anyway.

At the end, within BOUND seconds after the last event:
- every team converged (`ateam status --exit-code` 0);
- exactly one container per member, named as ateam names it, none for anything else (no
  stranger left, none adopted: no stranger's id is ever a member's);
- every start of a member's command was released by ateam for that very start: the member's
  command appends `<hostname> <boot id> <init start time> go=<release>` to a file in its
  write grant each time it starts (`$ATEAM_RELEASE`: the release file as the gate read it; the
  file is shared with a replacement, which rewrites it); it must name that container and start, and
  ateam's events (`created/replaced/started/restarted/released`, per container) must count at
  least as many released starts of that container as the member wrote;
- no transcript file lost or truncated (each member appends a line a second to one; sampled);
- the controller's RSS and open fds bounded (/proc, sampled each second; the last quarter of
  the run no more than the first quarter's peak by the margins below);
- no panic in any log.
Prints a summary and exits 1 on any violation (the work folder is then kept).

Usage (as root, engines up: scripts/engines.sh):
  scripts/soak.py --engine docker|podman [--seed S] [--events N] [--members N] [--bound SECS]
ATEAM_BIN picks the binary (default target/debug/ateam).
"""

import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ATEAM = os.environ.get("ATEAM_BIN", os.path.join(REPO, "target/debug/ateam"))
IMAGE = "ateam-demo:latest"
# Members of the soak run as nobody (ateam runs as root): their write grant is theirs.
NOBODY = 65534
# RSS may end this much above the first quarter's peak (allocator slack), fds not at all
# beyond a few (a reconcile in flight holds sockets).
RSS_SLACK_KB = 8 * 1024
RSS_SLACK_RATIO = 1.25
# Not counting pidfds: one per running member, as many as run (checked apart).
FD_SLACK = 8
# Samples (seconds) a controller must live for its own life to be judged apart.
LONG_LIFE = 300

KINDS = ["kill9", "restart", "stop-start", "rename", "pause", "update-memory", "stranger",
         "edit-change", "edit-add", "edit-remove", "broken-edit", "apply", "engine-restart",
         "controller-restart", "helper"]
# ateam's events that record a start it released.
STARTS = ("created", "replaced", "started", "restarted", "released")
# Relative weights: the disruptive and slow kinds less often.
WEIGHTS = {"engine-restart": 1, "controller-restart": 2, "helper": 1, "apply": 3}

# The member's command: records its start (for the gate check), then appends a line a second
# to its transcript. `W` is its write grant; the init's start time is field 22 of its stat.
MEMBER_SH = r"""
R="$SOAK_W/starts-$SOAK_NAME.log"
st=$(awk '{print $22}' /proc/1/stat)
go=$(echo "${ATEAM_RELEASE:-none}" | tr ' ' ,)
echo "$(hostname) $(cat /proc/sys/kernel/random/boot_id) $st go=$go $(date +%s)" >>"$R"
T="$ATEAM_SESSION_DIR/soak.log"
i=0
while :; do i=$((i+1)); echo "$(hostname) tick $i" >>"$T"; sleep 1; done
"""


def env_file():
    env = {}
    with open("/run/ateam-ci/env") as f:
        for line in f:
            if line.startswith("export "):
                k, v = line[len("export "):].strip().split("=", 1)
                env[k] = v
    return env


def fd_counts(pid):
    """Open fds of `pid`: (all but pidfds, pidfds)."""
    fds = pidfds = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target == "anon_inode:[pidfd]" or target.startswith("pidfd:"):
            pidfds += 1
        else:
            fds += 1
    return fds, pidfds


class Engine:
    """A private engine: started, stopped (as `systemctl stop` does) and started again."""

    def __init__(self, kind, root):
        self.kind, self.dir, self.child = kind, os.path.join(root, "engine"), None
        os.makedirs(self.dir)
        self.sock = os.path.join(self.dir, "engine.sock")
        self.uri = "unix://" + self.sock
        self.start()
        if kind == "docker":
            shared = env_file()["ATEAM_TEST_DOCKER"]
            load = f"docker -H {shared} save {IMAGE} | docker -H {self.uri} load"
            subprocess.run(["sh", "-c", load], check=True, capture_output=True)

    def cli(self):
        return [self.kind, "-H" if self.kind == "docker" else "--url", self.uri]

    def start(self):
        d = self.dir
        if self.kind == "docker":
            cmd = ["dockerd", "--host", self.uri, "--data-root", f"{d}/data", "--exec-root",
                   f"{d}/exec", "--pidfile", f"{d}/docker.pid", "--iptables=false",
                   "--ip-masq=false", "--bridge=none", "--shutdown-timeout", "2"]
        else:
            cmd = ["podman", "system", "service", "--time=0", self.uri]
        log = open(f"{d}/engine.log", "a")
        self.child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                      start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(self.sock)
                s.close()
                break
            except OSError:
                if time.monotonic() > deadline or self.child.poll() is not None:
                    raise SystemExit(f"the private {self.kind} did not start: see {d}/engine.log")
                time.sleep(0.1)

    def stop(self):
        if self.child is None:
            return
        self.child.terminate()
        try:
            self.child.wait(60)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
        self.child = None
        try:
            os.unlink(self.sock)
        except OSError:
            pass


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.root = tempfile.mkdtemp(prefix="ateam-soak-")
        os.chmod(self.root, 0o755)
        tag = f"{args.engine[0]}{os.getpid() % 10000}"
        self.teams = [f"soaka{tag}", f"soakb{tag}"]
        self.eng = Engine(args.engine, self.root)
        self.env = dict(os.environ, ATEAM_STATE_DIR=f"{self.root}/state",
                        DOCKER_HOST=self.eng.uri, CONTAINER_HOST=self.eng.uri)
        for k in ("SUDO_UID", "RUST_LOG"):
            self.env.pop(k, None)
        self.man = f"{self.root}/manifests"
        os.makedirs(self.man)
        self.members = {t: {} for t in self.teams}  # team -> member -> memory
        self.next_index = {t: 0 for t in self.teams}
        self.helpers = []  # (team, helper name)
        self.strangers = []  # container ids
        self.kinds = collections.Counter()
        self.cli_failures = collections.Counter()
        self.violations = []
        self.applies = []  # (Popen, log path)
        self.ctl, self.ctl_logs, self.ctl_exits = None, [], []
        self.samples = []  # (t, rss kB, fds)
        self.transcripts = {}  # path -> largest size seen
        self.events = {}  # a key per ateam event -> event
        self.worst_bucket, self.reconciles = 0.0, 0
        self.port = 20000 + os.getpid() % 20000
        self.stop_sampling = threading.Event()
        self.lock = threading.Lock()
        self.cleaned = False

    # --- manifests ---------------------------------------------------------------------
    def save(self, name, text):
        """As an editor saves: a temp file renamed over the old one."""
        path = os.path.join(self.man, name)
        tmp = os.path.join(self.man, f".{name}.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, path)

    def team_text(self, team):
        docs = [
            {"apiVersion": "ateam.dev/v1alpha1", "kind": "Team", "metadata": {"name": team},
             "spec": {"image": IMAGE, "sessionDir": f"../sessions-{team}", "maxMembers": 60,
                      "helperRequests": True}},
            {"apiVersion": "ateam.dev/v1alpha1", "kind": "MainSession",
             "metadata": {"name": "lead"},
             "spec": {"team": team, "command": ["sleep", "100000"], "cwd": f"../repo-{team}"}},
            {"apiVersion": "ateam.dev/v1alpha1", "kind": "AccessGrant",
             "metadata": {"name": "rw"}, "spec": {"team": team, "write": [f"../repo-{team}"]}},
        ]
        return "---\n".join(json.dumps(d) + "\n" for d in docs)

    def member_text(self, team, name, memory):
        # Every member of a team writes its one repo, and says it shares it.
        doc = {"apiVersion": "ateam.dev/v1alpha1", "kind": "Member",
               "metadata": {"name": name},
               "spec": {"team": team, "parent": "lead", "access": "rw", "restart": "Always",
                        "shareWrites": True,
                        "command": ["sh", "-c", MEMBER_SH],
                        "env": {"SOAK_NAME": name, "SOAK_W": f"{self.root}/repo-{team}"},
                        "resources": {"memory": memory, "pids": 64}}}
        return json.dumps(doc) + "\n"

    def write_member(self, team, name, memory):
        self.members[team][name] = memory
        self.save(f"{team}-{name}.yaml", self.member_text(team, name, memory))

    def new_member(self, team, prefix="m"):
        self.next_index[team] += 1
        return f"{prefix}{self.next_index[team]:02d}"

    def setup(self):
        for t in self.teams:
            for d in (f"repo-{t}", f"sessions-{t}"):
                os.makedirs(f"{self.root}/{d}")
            os.chown(f"{self.root}/repo-{t}", NOBODY, NOBODY)
            self.save(f"{t}.yaml", self.team_text(t))
            per_team = (self.args.members + len(self.teams) - 1) // len(self.teams)
            for _ in range(per_team):
                self.write_member(t, self.new_member(t), "48Mi")

    # --- processes ---------------------------------------------------------------------
    def ateam(self, *args, **kw):
        return subprocess.run([ATEAM, "--backend", self.args.engine, *args], env=self.env,
                              cwd=self.root, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, **kw)

    def start_controller(self):
        path = f"{self.root}/controller-{len(self.ctl_logs) + 1}.log"
        self.ctl_logs.append(path)
        log = open(path, "w")
        self.ctl = subprocess.Popen(
            [ATEAM, "--backend", self.args.engine, "controller", "-f", self.man, "--prune",
             "--crash-backoff", "1s", "--crash-reset", "20s",
             "--metrics", f"127.0.0.1:{self.port}"],
            env=self.env, cwd=self.root, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def stop_controller(self):
        self.scrape()
        self.ctl.send_signal(signal.SIGTERM)
        try:
            code = self.ctl.wait(90)
        except subprocess.TimeoutExpired:
            self.violations.append("the controller did not end within 90 s of SIGTERM")
            self.ctl.kill()
            code = self.ctl.wait()
        self.ctl_exits.append(code)
        if code != 0:
            self.violations.append(f"the controller exited {code} on SIGTERM")

    def engine(self, *args, timeout=60):
        try:
            r = subprocess.run(self.eng.cli() + list(args), capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            self.cli_failures[args[0]] += 1
            return None
        if r.returncode != 0:
            self.cli_failures[args[0]] += 1
            return None
        return r.stdout

    def cname(self, team, member):
        return f"ateam_{team}_{member}"

    def containers(self, team):
        """(id, name, member label) of every container with the team's label."""
        label = ('{{.Label "ateam.dev/member"}}' if self.args.engine == "docker"
                 else '{{index .Labels "ateam.dev/member"}}')
        out = self.engine("ps", "-a", "--no-trunc", "--filter", f"label=ateam.dev/team={team}",
                          "--format", "{{.ID}} {{.Names}} " + label)
        if out is None:
            self.violations.append(f"the engine could not list the containers of {team}")
        return [tuple(line.split()) for line in (out or "").splitlines() if line.strip()]

    # --- samplers ----------------------------------------------------------------------
    def sample_loop(self):
        while not self.stop_sampling.wait(1.0):
            pid = self.ctl.pid if self.ctl and self.ctl.poll() is None else None
            if pid:
                try:
                    with open(f"/proc/{pid}/status") as f:
                        rss = next(int(line.split()[1]) for line in f
                                   if line.startswith("VmRSS:"))
                    fds, pidfds = fd_counts(pid)
                    with self.lock:
                        self.samples.append((time.monotonic(), rss, fds, pid, pidfds))
                except (OSError, StopIteration):
                    pass
            self.check_transcripts()
            if int(time.monotonic()) % 3 == 0:
                self.scrape()

    def check_transcripts(self):
        for t in self.teams:
            base = f"{self.root}/sessions-{t}/members"
            for m in os.listdir(base) if os.path.isdir(base) else []:
                p = f"{base}/{m}/soak.log"
                try:
                    size = os.stat(p).st_size
                except OSError:
                    size = None
                with self.lock:
                    was = self.transcripts.get(p)
                    if size is None:
                        if was is not None:
                            self.violations.append(f"transcript {p} is gone (was {was} bytes)")
                            self.transcripts[p] = -1
                        continue
                    if was is not None and 0 <= size < was:
                        self.violations.append(f"transcript {p} shrank from {was} to {size}")
                    self.transcripts[p] = max(size, was or 0)

    def scrape(self):
        """The worst reconcile, as the upper bound of the highest filled histogram bucket."""
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                          timeout=2).read().decode()
        except OSError:
            return
        prev, count = {}, 0
        for line in body.splitlines():
            m = re.match(r'ateam_reconcile_duration_seconds_bucket\{(.*)\} (\d+)', line)
            if m:
                labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
                team, le, n = labels.get("team"), labels.get("le"), int(m.group(2))
                if n > prev.get(team, 0):
                    bound = float("inf") if le == "+Inf" else float(le)
                    with self.lock:
                        self.worst_bucket = max(self.worst_bucket, bound)
                prev[team] = n
            m = re.match(r'ateam_reconcile_duration_seconds_count\{.*\} (\d+)', line)
            if m:
                count += int(m.group(1))
        with self.lock:
            self.reconciles_now = count

    def collect_events(self):
        r = self.ateam("events", "-o", "json")
        try:
            for e in json.loads(r.stdout or "[]"):
                key = (e.get("ts"), e.get("team"), e.get("member"), e.get("kind"),
                       e.get("container"), e.get("reason"))
                self.events[key] = e
        except json.JSONDecodeError:
            self.violations.append(f"ateam events -o json: not JSON: {r.stdout[:200]!r}")

    # --- events ------------------------------------------------------------------------
    def pick(self):
        t = self.rng.choice(self.teams)
        return t, self.rng.choice(sorted(self.members[t]))

    def ev_kill9(self):
        t, m = self.pick()
        out = self.engine("inspect", "--format", "{{.State.Pid}}", self.cname(t, m))
        pid = int((out or "0").strip() or 0)
        if pid > 1:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def ev_restart(self):
        self.engine("restart", "-t", "1", self.cname(*self.pick()))

    def ev_stop_start(self):
        name = self.cname(*self.pick())
        self.engine("stop", "-t", "1", name)
        self.engine("start", name)

    def ev_rename(self):
        name = self.cname(*self.pick())
        self.engine("rename", name, f"{name}-renamed{self.rng.randrange(10 ** 6)}")

    def ev_pause(self):
        self.engine("pause", self.cname(*self.pick()))

    def ev_update_memory(self):
        self.engine("update", "--memory", "96m", "--memory-swap", "96m", self.cname(*self.pick()))

    def ev_stranger(self):
        """A container with every label of a member's (spec hash included), not ateam's."""
        t, m = self.pick()
        out = self.engine("inspect", "--format", "{{json .Config.Labels}}", self.cname(t, m))
        if not out:
            return
        labels = json.loads(out)
        args = ["run", "-d", "--name", f"soak-stranger-{self.rng.randrange(10 ** 9)}",
                "--network", "none"]
        for k, v in sorted(labels.items()):
            if k.startswith("ateam.dev/"):
                args += ["--label", f"{k}={v}"]
        cid = self.engine(*args, IMAGE, "sleep", "100000")
        if cid:
            self.strangers.append(cid.strip())

    def ev_edit_change(self):
        t, m = self.pick()
        self.write_member(t, m, "56Mi" if self.members[t][m] == "48Mi" else "48Mi")

    def ev_edit_add(self):
        t = self.rng.choice(self.teams)
        if len(self.members[t]) >= self.per_team_max:
            return self.ev_edit_change()
        self.write_member(t, self.new_member(t), "48Mi")

    def ev_edit_remove(self):
        t = self.rng.choice(self.teams)
        if sum(len(v) for v in self.members.values()) <= self.args.members:
            return self.ev_edit_change()
        m = self.rng.choice(sorted(self.members[t]))
        del self.members[t][m]
        os.unlink(os.path.join(self.man, f"{t}-{m}.yaml"))

    def ev_broken_edit(self):
        """Half a file saved, then the whole of it (as an editor's second save)."""
        t, m = self.pick()
        text = self.member_text(t, m, self.members[t][m])
        self.save(f"{t}-{m}.yaml", text[: self.rng.randrange(10, len(text) - 10)])
        time.sleep(self.rng.uniform(0.1, 2.0))
        self.save(f"{t}-{m}.yaml", text)

    def ev_apply(self):
        path = f"{self.root}/apply-{len(self.applies) + 1}.log"
        log = open(path, "w")
        p = subprocess.Popen([ATEAM, "--backend", self.args.engine, "apply", "-f", self.man,
                              "--prune"], env=self.env, cwd=self.root, stdin=subprocess.DEVNULL,
                             stdout=log, stderr=log)
        self.applies.append((p, path))

    def ev_engine_restart(self):
        self.eng.stop()
        if self.args.engine == "podman":
            # Podman's containers outlive its service: a crash while it is away.
            t, m = self.pick()
            out = subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}}",
                                  self.cname(t, m)], capture_output=True, text=True).stdout
            pid = int(out.strip() or 0)
            if pid > 1:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(self.rng.uniform(0.5, 3.0))
        self.eng.start()

    def ev_controller_restart(self):
        self.stop_controller()
        time.sleep(self.rng.uniform(0.1, 1.0))
        self.start_controller()

    def ev_helper(self):
        """A requester added; once it runs, it asks for a helper; then it is removed."""
        t = self.rng.choice(self.teams)
        rq = self.new_member(t, "rq")
        helper = f"h{rq[2:]}"
        self.save(f"{t}-{rq}.yaml", self.member_text(t, rq, "48Mi"))
        record = f"{self.root}/repo-{t}/starts-{rq}.log"
        deadline = time.monotonic() + 60
        while not os.path.exists(record) and time.monotonic() < deadline:
            time.sleep(0.2)
        body = json.dumps({"name": helper, "command": ["sleep", "100000"],
                           "resources": {"memory": "32Mi", "pids": 32}})
        r = self.ateam("exec", "--team", t, rq, "--", "sh", "-c",
                       f"wget -Y off -q -O- --post-data '{body}' \"$ATEAM_HELPERS_URL\"",
                       timeout=60)
        # Running, so applied: the record of what was applied names it before its release.
        if "no applied team has a member" in r.stderr:
            self.violations.append(f"{t}/{rq} runs, but exec does not find it: {r.stderr}")
        if r.returncode == 0:
            self.helpers.append((t, helper))
        else:
            self.cli_failures["helper-request"] += 1
            print(f"  helper request of {t}/{rq} failed: {r.stderr.strip()[-300:]}")
        time.sleep(self.rng.uniform(0.1, 1.0))
        os.unlink(os.path.join(self.man, f"{t}-{rq}.yaml"))

    def event(self, kind):
        getattr(self, "ev_" + kind.replace("-", "_"))()
        self.kinds[kind] += 1

    # --- the checks --------------------------------------------------------------------
    def converge(self):
        """Seconds from now until `status --exit-code` says 0, or None past the bound."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.args.bound:
            if self.ateam("status", "-f", self.man, "--exit-code").returncode == 0:
                return time.monotonic() - t0
            time.sleep(0.5)
        r = self.ateam("status", "-f", self.man)
        self.violations.append(f"not converged {self.args.bound:.0f} s after the last event:\n"
                               + r.stdout[-3000:] + r.stderr[-1000:])
        return None

    def check_containers(self):
        strangers = {s[:12] for s in self.strangers}
        for t in self.teams:
            by_member = collections.defaultdict(list)
            for cid, name, member in self.containers(t):
                by_member[member].append((cid, name))
                if cid[:12] in strangers:
                    self.violations.append(f"stranger {cid[:12]} still there as {name}")
            for m in self.members[t]:
                got = by_member.pop(m, [])
                if len(got) != 1 or got[0][1] != self.cname(t, m):
                    self.violations.append(f"{t}/{m}: containers {got}, want one")
            for m, got in by_member.items():
                self.violations.append(f"{t}: containers {got} of {m}, which is not wanted")
        made = {e.get("container") for e in self.events.values() if e.get("kind") in STARTS}
        for s in strangers & made:
            self.violations.append(f"stranger {s} appears in ateam's events as a member's")

    def check_starts(self):
        """Each start the members wrote down was released for that start, and counted."""
        released = collections.Counter()
        for e in self.events.values():
            if e.get("kind") in STARTS and e.get("container"):
                released[e["container"]] += 1
        starts = collections.defaultdict(set)
        total = 0
        for t in self.teams:
            base = f"{self.root}/repo-{t}"
            for f in sorted(os.listdir(base)):
                if not f.startswith("starts-"):
                    continue
                for line in open(os.path.join(base, f)):
                    total += 1
                    parts = line.split()
                    if len(parts) != 5 or not parts[3].startswith("go="):
                        self.violations.append(f"{f}: a start line not as written: {line!r}")
                        continue
                    host, boot, start, go = parts[0], parts[1], parts[2], parts[3][3:]
                    want = go.split(",")
                    if len(want) != 3 or not want[0].startswith(host) \
                            or want[1:] != [boot, start]:
                        self.violations.append(
                            f"{f}: container {host} started its command on an unchecked start "
                            f"(init {start}, release file: {go})")
                    starts[host[:12]].add((boot, start))
        for cid, s in sorted(starts.items()):
            if len(s) > released[cid]:
                self.violations.append(
                    f"container {cid}: {len(s)} starts of its command, ateam's events record "
                    f"{released[cid]} released starts")
        self.starts_total = total
        # The proof must be able to fail: every member now running wrote its start down.
        for t in self.teams:
            for cid, name, member in self.containers(t):
                if cid[:12] not in starts and not member.startswith("rq"):
                    self.violations.append(f"{name} ({cid[:12]}) runs but never wrote its start")

    def check_resources(self):
        """RSS and fds may not grow from the first quarter to the last: over the whole run (each
        controller SIGTERMed starts afresh), and over the longest-lived controller's own life,
        which is where a leak in one controller shows."""
        with self.lock:
            s = list(self.samples)
        if len(s) < 8:
            self.violations.append(f"only {len(s)} samples of the controller's RSS and fds")
            return None
        self.grew("controller", s)
        # A pidfd per running member's first process (controller/exits.rs): bounded by the
        # members that can run, which edit-add and helpers grow during the run, not by time.
        most = 2 * self.per_team_max * len(self.teams)
        peak = max(x[4] for x in s)
        if peak > most:
            self.violations.append(f"the controller held {peak} pidfds, more than {most}: "
                                   f"twice the members that can run")
        lives = collections.defaultdict(list)
        for x in s:
            lives[x[3]].append(x)
        self.longest = max(lives.values(), key=len)
        # Only a life long enough for a steady state: in its first minute a controller opens
        # its watches and streams, and one reconcile in flight holds a dozen more sockets, so
        # a short life's quarters differ without anything leaking (CI's run saw 21 then 34
        # over 50 s).
        if len(self.longest) >= LONG_LIFE:
            self.grew("the longest-lived controller", self.longest)
        return s

    def grew(self, who, s):
        q = len(s) // 4
        first, last = s[:q], s[-q:]
        rss0, rss1 = max(x[1] for x in first), max(x[1] for x in last)
        fd0, fd1 = max(x[2] for x in first), max(x[2] for x in last)
        if rss1 > rss0 * RSS_SLACK_RATIO + RSS_SLACK_KB:
            self.violations.append(f"{who}'s RSS grew: first quarter peak {rss0} kB, "
                                   f"last quarter peak {rss1} kB")
        if fd1 > fd0 + FD_SLACK:
            self.violations.append(f"{who}'s fds grew: first quarter peak {fd0}, "
                                   f"last quarter peak {fd1}")

    def check_logs(self):
        for path in self.ctl_logs + [p for _, p in self.applies]:
            text = open(path, errors="replace").read()
            if "panicked" in text or "RUST_BACKTRACE" in text:
                i = text.find("panicked")
                self.violations.append(f"panic in {path}: {text[max(0, i - 200):i + 400]}")

    def wait_applies(self):
        codes = collections.Counter()
        for p, path in self.applies:
            try:
                code = p.wait(max(1.0, self.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                code = p.wait()
                self.violations.append(f"apply ({path}) still running at the end: killed")
            codes[code] += 1
            if code not in (0, 1, 3, 4, 5):
                self.violations.append(f"apply ({path}) exited {code}: "
                                       + open(path).read()[-500:])
        return codes

    # --- the run -----------------------------------------------------------------------
    def run(self):
        a = self.args
        self.per_team_max = (a.members + 8) // len(self.teams)
        self.setup()
        print(f"soak: {a.engine}, seed {a.seed}, {a.events} events, "
              f"{sum(len(v) for v in self.members.values())} members, folder {self.root}")
        t_start = time.monotonic()
        self.start_controller()
        sampler = threading.Thread(target=self.sample_loop, daemon=True)
        sampler.start()
        # Everyone up before the first event.
        deadline = time.monotonic() + 300
        while self.ateam("status", "-f", self.man, "--exit-code").returncode != 0:
            if time.monotonic() > deadline:
                raise SystemExit("the soak's teams never came up: " + self.ateam("status", "-f", self.man).stdout)
            time.sleep(1)
        print(f"  up in {time.monotonic() - t_start:.1f} s")
        kinds = KINDS if not a.kinds else a.kinds.split(",")
        weights = [WEIGHTS.get(k, 4) for k in kinds]
        t_events = time.monotonic()
        for i in range(a.events):
            kind = self.rng.choices(kinds, weights)[0]
            self.event(kind)
            if i % 50 == 49:
                self.collect_events()
                print(f"  {i + 1} events, {time.monotonic() - t_events:.0f} s")
            time.sleep(self.rng.uniform(0.05, a.gap))
        t_last = time.monotonic()
        self.deadline = t_last + a.bound
        apply_codes = self.wait_applies()
        converged = self.converge()
        # What follows is judged once converged: give the members of the last starts a
        # moment to write theirs (bounded), then look.
        if converged is not None:
            converged = time.monotonic() - t_last
        self.collect_events()
        self.check_containers()
        self.check_starts()
        self.stop_sampling.set()
        sampler.join()
        self.check_transcripts()
        samples = self.check_resources()
        self.stop_controller()
        self.check_logs()
        self.summary(t_events, t_last, converged, apply_codes, samples)
        self.cleanup(keep=bool(self.violations))
        return 1 if self.violations else 0

    def summary(self, t_events, t_last, converged, apply_codes, samples):
        a = self.args
        print(f"\nsoak summary ({a.engine}, seed {a.seed})")
        print(f"  events: {sum(self.kinds.values())} in {t_last - t_events:.0f} s: "
              + ", ".join(f"{k} {n}" for k, n in sorted(self.kinds.items())))
        print("  converged after the last event: "
              + (f"{converged:.1f} s (bound {a.bound:.0f} s)" if converged is not None
                 else f"NOT within {a.bound:.0f} s"))
        print(f"  worst reconcile: <= {self.worst_bucket:g} s (histogram bucket); "
              f"reconciles in the last controller: {getattr(self, 'reconciles_now', 0)}")
        print(f"  member starts written: {getattr(self, 'starts_total', 0)}; ateam events "
              f"seen: {len(self.events)}; strangers made: {len(self.strangers)}; helpers "
              f"granted: {len(self.helpers)}; controllers: {len(self.ctl_logs)} "
              f"(exits {self.ctl_exits})")
        print(f"  applies by exit code: {dict(apply_codes)}; engine CLI refusals: "
              f"{dict(self.cli_failures)}")
        print(f"  transcripts watched: {len(self.transcripts)}")
        if samples:
            n = len(samples)
            line = []
            for i in range(0, 8):
                x = samples[min(n - 1, i * n // 8)]
                line.append(f"{x[0] - samples[0][0]:.0f}s {x[1] / 1024:.1f}MB {x[2]}fd")
            q = n // 4
            print("  controller RSS/fds over time: " + "; ".join(line))
            print(f"  pidfds peak {max(x[4] for x in samples)} (one per running member)")
            print(f"  first quarter peak {max(x[1] for x in samples[:q]) / 1024:.1f} MB "
                  f"{max(x[2] for x in samples[:q])} fds; last quarter peak "
                  f"{max(x[1] for x in samples[-q:]) / 1024:.1f} MB "
                  f"{max(x[2] for x in samples[-q:])} fds; overall peak "
                  f"{max(x[1] for x in samples) / 1024:.1f} MB {max(x[2] for x in samples)} fds")
            life = getattr(self, "longest", [])
            if len(life) >= 8:
                q = len(life) // 4
                print(f"  longest-lived controller: {life[-1][0] - life[0][0]:.0f} s, RSS "
                      f"{life[0][1] / 1024:.1f} MB at its start, first quarter peak "
                      f"{max(x[1] for x in life[:q]) / 1024:.1f} MB, last quarter peak "
                      f"{max(x[1] for x in life[-q:]) / 1024:.1f} MB; fds "
                      f"{max(x[2] for x in life[:q])} / {max(x[2] for x in life[-q:])}")
        if self.violations:
            print(f"\n{len(self.violations)} VIOLATIONS (folder kept: {self.root}):")
            for v in self.violations[:50]:
                print("  - " + v)
        else:
            print("  no violation")

    def cleanup(self, keep):
        if self.cleaned:
            return
        self.cleaned = True
        if keep:
            with open(f"{self.root}/events.json", "w") as f:
                json.dump(sorted(self.events.values(), key=lambda e: e.get("ts", 0)), f,
                          indent=1)
        if self.ctl and self.ctl.poll() is None:
            self.ctl.kill()
            self.ctl.wait()
        for p, _ in self.applies:
            if p.poll() is None:
                p.kill()
                p.wait()
        for t in self.teams:
            self.ateam("delete", "--team", t, "--purge")
        for s in self.strangers:
            self.engine("rm", "-f", s)
        for t in self.teams:
            for cid, _, _ in self.containers(t):
                self.engine("rm", "-f", cid)
        self.eng.stop()
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--engine", choices=["docker", "podman"], default="docker")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--events", type=int, default=150)
    p.add_argument("--members", type=int, default=22, help="at the start (at least 20)")
    p.add_argument("--bound", type=float, default=60.0,
                   help="seconds after the last event to converge in")
    p.add_argument("--gap", type=float, default=1.0, help="longest gap between events (s)")
    p.add_argument("--kinds", help="only these kinds (comma-separated), for a narrow run")
    a = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (the private engine)")
    soak = Soak(a)
    # Interrupted (Ctrl-C, SIGTERM, a closed pipe): the private engine and everything the
    # soak made still go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        code = soak.run()
    except BaseException:
        soak.cleanup(keep=True)
        raise
    sys.exit(code)


if __name__ == "__main__":
    main()
