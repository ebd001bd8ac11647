#!/usr/bin/env python3
"""The engine API's floor for a cold apply: N containers created and started through the
engine's HTTP API, P at a time, with the flags ateam gives a member and none of its checks
(no pin, no gate, no inspect, no /proc reads). scripts/bench.sh times it beside `ateam apply`,
so what ateam's checks cost is visible.

Usage: raw-floor.py docker|podman SOCKET N DIR P
Containers are labelled bench=1 and named raw-<i>; DIR/repo is bind-mounted read-write.
"""

import http.client
import json
import socket
import sys
from concurrent.futures import ThreadPoolExecutor


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def call(sock, method, url, body=None):
    c = UnixConnection(sock)
    c.request(method, url, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status >= 300:
        raise SystemExit(f"{method} {url}: {r.status} {data[:300]!r}")
    return json.loads(data) if data else None


MEM = 64 * 1024 * 1024
TMPFS = "rw,nosuid,nodev,size=256m"


def docker(sock, i, repo):
    body = {
        "Image": "ateam-demo:latest",
        "Labels": {"bench": "1"},
        "User": "65534:65534",
        "HostConfig": {
            "NetworkMode": "none", "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"],
            "ReadonlyRootfs": True, "Init": True, "Memory": MEM, "MemorySwap": MEM,
            "PidsLimit": 64, "Tmpfs": {"/tmp": TMPFS, "/home/agent": TMPFS},
            "Binds": [f"{repo}:{repo}:rw"], "RestartPolicy": {"Name": "no"},
        },
    }
    cid = call(sock, "POST", f"/containers/create?name=raw-{i}", body)["Id"]
    call(sock, "POST", f"/containers/{cid}/start")


def podman(sock, i, repo):
    tmpfs = [{"destination": d, "type": "tmpfs", "source": "tmpfs",
              "options": ["rw", "nosuid", "nodev", "size=256m"]} for d in ("/tmp", "/home/agent")]
    body = {
        "name": f"raw-{i}", "image": "localhost/ateam-demo:latest", "labels": {"bench": "1"},
        "user": "65534:65534", "netns": {"nsmode": "none"}, "cap_drop": ["ALL"],
        "no_new_privileges": True, "read_only_filesystem": True, "init": True,
        "resource_limits": {"memory": {"limit": MEM, "swap": MEM}, "pids": {"limit": 64}},
        "mounts": tmpfs + [{"destination": repo, "type": "bind", "source": repo,
                            "options": ["rw", "rbind"]}],
    }
    cid = call(sock, "POST", "/v4.0.0/libpod/containers/create", body)["Id"]
    call(sock, "POST", f"/v4.0.0/libpod/containers/{cid}/start")


def main():
    engine, sock, n, d, p = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    sock = sock.removeprefix("unix://")
    one = docker if engine == "docker" else podman
    with ThreadPoolExecutor(max_workers=p) as pool:
        list(pool.map(lambda i: one(sock, i, f"{d}/repo"), range(1, n + 1)))


if __name__ == "__main__":
    main()
