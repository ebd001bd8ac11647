#!/usr/bin/env bash
# Install and start the container engines that ateam's integration tests use:
#   - Docker: a private dockerd on /run/ateam-ci/docker.sock
#   - rootful Podman API service on /run/ateam-ci/podman.sock
#   - rootless Podman API service of user ateamci
# and import the demo image ateam-demo:latest (images/demo) into all three.
#
# Usage:
#   scripts/engines.sh [start]     install + start everything (idempotent, fast on rerun),
#                                  then writes /run/ateam-ci/env (source it)
#   scripts/engines.sh check       smoke-test the three engines with the demo image
#   scripts/engines.sh stop        stop the daemons started by this script (pid files)
#   scripts/engines.sh rootfs OUT  only write the demo image's rootfs tarball to OUT
#
# No systemd on CI machines: daemons are started in the background here and
# tracked by pid files under /run/ateam-ci. `stop` leaves the rootless user's
# pause process (catatonit) running, as Podman does; the next start reuses it.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=/var/lib/ateam-ci               # dockerd data root, logs, image tarball
RUN=/run/ateam-ci                     # sockets, pid files, env file
ROOTLESS_USER=ateamci
IMAGE=ateam-demo:latest
DOCKER_SOCK=$RUN/docker.sock
PODMAN_SOCK=$RUN/podman.sock
PODMAN_GVISOR_SOCK=$RUN/podman-gvisor.sock   # rootful Podman that runs its containers under gVisor
WAIT_SECS=${ATEAM_ENGINES_WAIT:-60}   # how long a daemon may take to answer
declare -A LAUNCHED=()                # daemons started by this run: name -> pid

log() { printf '[engines] %s\n' "$*" >&2; }
die() { printf '[engines] ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- packages
PKGS=(podman runc uidmap slirp4netns fuse-overlayfs busybox-static tmux curl
      python3-yaml python3-jsonschema docker-registry)
# gVisor's runsc for `runtime: gvisor` members, from bookworm-backports: bookworm's own is of
# 2022-12.
BACKPORTS_PKGS=(runsc)
# docker.io without its recommends (apparmor, cgroupfs-mount, needrestart, git...):
# none is needed here. curl pings the API sockets. python3-yaml and python3-jsonschema read
# ateam's -o json|yaml documents in tests/verdict.rs, as another program would.
# docker-registry serves a local registry on 127.0.0.1:5000 for the imagePullPolicy tests
# (no public registry is reachable here).
DOCKER_PKGS=(docker.io)

install_packages() {
    local p missing=()
    for p in "${PKGS[@]}" "${DOCKER_PKGS[@]}" "${BACKPORTS_PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then log "packages: already installed"; return; fi
    log "packages: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Keep the package scripts from starting a system dockerd on the default
    # socket: we run our own. Docker-like images already ship this file.
    local policy_added=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d; policy_added=1
    fi
    backports_source
    apt-get update -qq
    apt-get install -y -qq "${PKGS[@]}" >/dev/null
    apt-get install -y -qq --no-install-recommends "${DOCKER_PKGS[@]}" >/dev/null
    apt-get install -y -qq -t bookworm-backports "${BACKPORTS_PKGS[@]}" >/dev/null
    if [ -n "$policy_added" ]; then rm -f /usr/sbin/policy-rc.d; fi
}

# Debian's backports, where apt has no source for them yet (used only with -t).
backports_source() {
    grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ && return
    cat >/etc/apt/sources.list.d/bookworm-backports.sources <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    log "added bookworm-backports to apt's sources"
}

# ---------------------------------------------------------------- config
# write_file PATH OWNER: stdin to PATH, only when the content differs.
write_file() {
    local path=$1 owner=$2 tmp
    tmp=$(mktemp)
    cat >"$tmp"
    if cmp -s "$tmp" "$path" 2>/dev/null; then rm -f "$tmp"; return; fi
    install -m 0644 -o "$owner" -g "$owner" "$tmp" "$path"
    rm -f "$tmp"
    log "wrote $path"
}

# runc, not crun (Podman's first choice), which fails on this machine's hybrid
# cgroup v1 layout. Podman's default ulimits (nofile=1048576) exceed the host's
# hard limits (20000 here) and runc then fails with "error setting rlimits for
# ready process ... operation not permitted", so ask for less.
containers_conf() {
    cat <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]

[engine]
runtime = "runc"
EOF
}

# Docker's runtimes beside runc: gVisor's runsc (`runtime: gvisor`), which connects to the
# Unix sockets mounted into a member (its egress and helper sockets) only with --host-uds=open.
docker_conf() {
    printf '{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--host-uds=open"]}}}\n'
}

# runsc's flags under a Podman service that runs every container it makes under gVisor
# (Podman 4.3 ignores the runtime a create names): no network of its own in the sandbox
# (Podman's `none` netns is not enough for runsc's netstack), host sockets as for Docker,
# and, rootless, no cgroups (runsc cannot make them for an unprivileged user on cgroup v1).
GVISOR_FLAGS=(--runtime /usr/bin/runsc --runtime-flag network=none --runtime-flag host-uds=open)

# docker_runtimes: writes the daemon's configuration; a running daemon reloads its runtimes
# on SIGHUP.
docker_runtimes() {
    local before; before=$(cat "$RUN/daemon.json" 2>/dev/null || true)
    mkdir -p "$RUN"
    docker_conf | write_file "$RUN/daemon.json" root
    if [ "$before" != "$(cat "$RUN/daemon.json")" ] && alive docker; then
        kill -HUP "$(cat "$RUN/docker.pid")"; log "docker: reloaded its runtimes"
    fi
}

user_vars() {
    local uid
    uid=$(id -u "$ROOTLESS_USER") || die "no user $ROOTLESS_USER: run '$0 start'"
    UHOME=$(getent passwd "$ROOTLESS_USER" | cut -d: -f6)
    XDG=$RUN/user-$uid                        # its XDG_RUNTIME_DIR (no logind here)
    ROOTLESS_SOCK=$XDG/podman/podman.sock
    ROOTLESS_GVISOR_SOCK=$XDG/podman/podman-gvisor.sock
    AS_USER=(setpriv --reuid="$ROOTLESS_USER" --regid="$ROOTLESS_USER" --init-groups
        env -i -C "$UHOME" HOME="$UHOME" USER="$ROOTLESS_USER" LOGNAME="$ROOTLESS_USER"
        PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR="$XDG")
}

# This VM differs from a usual systemd host in two ways rootless Podman trips on.
host_fixes() {
    # slirp4netns (rootless networking) opens /dev/net/tun as the user; here
    # it is 0600 instead of the usual 0666.
    if [ "$(stat -c %a /dev/net/tun)" != 666 ]; then
        chmod 666 /dev/net/tun; log "made /dev/net/tun 0666"
    fi
    # systemd makes / a shared mount; without it every rootless podman command
    # warns on stderr and mounts do not propagate.
    if [ "$(findmnt -no PROPAGATION /)" != shared ]; then
        mount --make-rshared /; log "made / a shared mount"
    fi
}

# Names for the egress tests (tests/egress.rs). The proxy resolves names on the host with the
# system resolver, so these resolve there to addresses it must refuse although the allow list
# names the name: loopback, the metadata address, a private address, an IPv4-mapped loopback.
# A marked block, replaced on every run (never duplicated), written in place: in a container
# /etc/hosts is often a bind mount, which a rename cannot replace.
HOSTS_BEGIN='# >>> ateam-ci: egress test names (scripts/engines.sh)'
HOSTS_END='# <<< ateam-ci: egress test names'
egress_test_names() {
    cat <<EOF
$HOSTS_BEGIN
127.0.0.1 loopback.ateam.test
169.254.169.254 metadata.ateam.test
10.11.12.13 private.ateam.test
::ffff:127.0.0.1 mapped.ateam.test
$HOSTS_END
EOF
}

hosts_entries() {
    local tmp; tmp=$(mktemp)
    awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" \
        '$0 == b { skip = 1 } !skip { print } $0 == e { skip = 0 }' /etc/hosts >"$tmp"
    egress_test_names >>"$tmp"
    if cmp -s "$tmp" /etc/hosts; then rm -f "$tmp"; return; fi
    cat "$tmp" >/etc/hosts
    rm -f "$tmp"
    log "wrote the egress test names into /etc/hosts"
}

setup_user() {
    if ! id -u "$ROOTLESS_USER" >/dev/null 2>&1; then
        useradd -m -s /bin/bash "$ROOTLESS_USER"
        log "created user $ROOTLESS_USER"
    fi
    # useradd normally adds subordinate ids; add a free range if it did not.
    local f start
    for f in /etc/subuid /etc/subgid; do
        touch "$f"
        grep -q "^$ROOTLESS_USER:" "$f" && continue
        start=$(awk -F: 'BEGIN{m=100000} {e=$2+$3; if (e>m) m=e} END{print m}' "$f")
        echo "$ROOTLESS_USER:$start:65536" >>"$f"
        log "added $ROOTLESS_USER:$start:65536 to $f"
    done
    user_vars
    # Podman does not create the socket's folder itself.
    install -d -m 0700 -o "$ROOTLESS_USER" -g "$ROOTLESS_USER" "$XDG" "$XDG/podman"
    install -d -o "$ROOTLESS_USER" -g "$ROOTLESS_USER" "$UHOME/.config" "$UHOME/.config/containers"
    containers_conf | write_file "$UHOME/.config/containers/containers.conf" "$ROOTLESS_USER"
    # Without a storage.conf, Debian's Podman 4.3 picks the slow vfs driver for
    # rootless, and records it for good at first use. The kernel does overlay
    # in a user namespace natively (>= 5.13), no fuse-overlayfs needed.
    printf '[storage]\ndriver = "overlay"\n' |
        write_file "$UHOME/.config/containers/storage.conf" "$ROOTLESS_USER"
}

# as_user CMD...: run CMD as the rootless user with its own environment.
# setpriv execs (no fork like su/runuser), so $! of `"${AS_USER[@]}" ... &` is the pid.
as_user() { "${AS_USER[@]}" "$@"; }

# ---------------------------------------------------------------- daemons
ping() { curl -sf --max-time 3 --unix-socket "$1" "http://d$2" >/dev/null 2>&1; }

# alive NAME: its pid file names a live process that is really that daemon
# (/run/ateam-ci is not a tmpfs here, so a pid file can outlive a reboot and
# its pid be reused by another process).
alive() {
    local pf=$RUN/$1.pid
    [ -f "$pf" ] && grep -qaF "$RUN/" "/proc/$(cat "$pf")/cmdline" 2>/dev/null
}

# cwd_gone NAME: the daemon runs in a folder that was deleted since (it was
# started from a checkout that is gone). It still answers, but what it spawns
# cannot (Podman's conmon: "Failed to get working directory"): it is stopped so
# that it starts again from /.
cwd_gone() {
    alive "$1" && readlink "/proc/$(cat "$RUN/$1.pid")/cwd" | grep -q ' (deleted)$'
}

# start_daemon NAME SOCK PINGPATH CMD...: reuse if answering, else start CMD
# from / in the background (own session, so it outlives this script) with a pid
# file.
start_daemon() {
    local name=$1 sock=$2 path=$3; shift 3
    if cwd_gone "$name"; then
        log "$name: its working folder was deleted; restarting it"
        kill "$(cat "$RUN/$name.pid")" 2>/dev/null || true
        local i
        for ((i = 0; i < 40; i++)); do alive "$name" || break; sleep 0.25; done
    fi
    if ping "$sock" "$path"; then log "$name: already answering on $sock"; return; fi
    if alive "$name"; then
        log "$name: running but not answering yet, waiting for it"; return
    fi
    # A stale socket or pid file from a dead daemon blocks the new one.
    rm -f "$sock" "$RUN/$name.pid"
    (cd / && exec nohup setsid "$@" >>"$STATE/$name.log" 2>&1 </dev/null) &
    LAUNCHED[$name]=$!   # the subshell, nohup and setsid exec, so this is the daemon's pid
    # dockerd writes its own pid file (a bit later); the podman services do not.
    [ "$name" = docker ] || echo $! >"$RUN/$name.pid"
    log "$name: started (log: $STATE/$name.log)"
}

# wait_daemon NAME SOCK PINGPATH: wait until it answers, or die with its log.
wait_daemon() {
    local name=$1 sock=$2 path=$3 i why="no answer after ${WAIT_SECS}s"
    for ((i = 0; i < WAIT_SECS * 4; i++)); do
        ping "$sock" "$path" && return
        if [ -n "${LAUNCHED[$name]:-}" ]; then
            kill -0 "${LAUNCHED[$name]}" 2>/dev/null || { why="it exited"; break; }
        elif ! alive "$name"; then why="it is not running"; break; fi
        sleep 0.25
    done
    log "$name: last lines of $STATE/$name.log:"
    tail -n 30 "$STATE/$name.log" >&2 || true
    die "$name does not answer on $sock: $why"
}

# reset_rootless_if_orphaned: when every process of the rootless user was
# killed (a machine's processes killed at once, not stopped), its pause process
# and conmons are gone but its runtime folder says containers still run, and
# every rootless podman command then fails with "invalid internal status, try
# resetting the pause process with podman system migrate". On a systemd host
# logind would have cleared that folder; here `podman system migrate` does what
# the message says: it marks those containers stopped and drops the stale state.
reset_rootless_if_orphaned() {
    ping "$ROOTLESS_SOCK" /v4.0.0/libpod/_ping && return
    # Any live (not zombie) process of the user may still hold its namespace.
    ps -u "$ROOTLESS_USER" -o stat= 2>/dev/null | grep -qv '^Z' && return
    as_user podman system migrate >>"$STATE/podman-rootless.log" 2>&1 ||
        log "podman-rootless: 'podman system migrate' failed (see its log)"
}

start_engines() {
    mkdir -p "$RUN" "$STATE/docker"
    chmod 755 "$RUN" "$STATE"   # the rootless user must reach its dir and the tarball
    # dockerd trusts the pid file of the containerd it ran before; if that one
    # was killed (not stopped), the file is stale and dockerd waits on it and
    # fails ("timeout waiting for containerd to start").
    local cpid=$RUN/docker-exec/containerd/containerd.pid
    if [ -f "$cpid" ] && ! ping "$DOCKER_SOCK" /_ping &&
        ! grep -qaF "$RUN/" "/proc/$(cat "$cpid")/cmdline" 2>/dev/null; then
        rm -f "$cpid"
    fi
    start_daemon docker "$DOCKER_SOCK" /_ping \
        dockerd --host "unix://$DOCKER_SOCK" --data-root "$STATE/docker" \
        --exec-root "$RUN/docker-exec" --pidfile "$RUN/docker.pid" \
        --iptables=false --ip-masq=false --bridge=none --config-file "$RUN/daemon.json"
    start_daemon podman "$PODMAN_SOCK" /v4.0.0/libpod/_ping \
        podman system service --time=0 "unix://$PODMAN_SOCK"
    start_daemon podman-gvisor "$PODMAN_GVISOR_SOCK" /v4.0.0/libpod/_ping \
        podman "${GVISOR_FLAGS[@]}" system service --time=0 "unix://$PODMAN_GVISOR_SOCK"
    reset_rootless_if_orphaned
    start_daemon podman-rootless "$ROOTLESS_SOCK" /v4.0.0/libpod/_ping \
        "${AS_USER[@]}" podman system service --time=0 "unix://$ROOTLESS_SOCK"
    start_daemon podman-rootless-gvisor "$ROOTLESS_GVISOR_SOCK" /v4.0.0/libpod/_ping \
        "${AS_USER[@]}" podman "${GVISOR_FLAGS[@]}" --runtime-flag ignore-cgroups \
        system service --time=0 "unix://$ROOTLESS_GVISOR_SOCK"
    # Started all first, so their start-ups overlap.
    wait_daemon docker "$DOCKER_SOCK" /_ping
    wait_daemon podman "$PODMAN_SOCK" /v4.0.0/libpod/_ping
    wait_daemon podman-gvisor "$PODMAN_GVISOR_SOCK" /v4.0.0/libpod/_ping
    wait_daemon podman-rootless "$ROOTLESS_SOCK" /v4.0.0/libpod/_ping
    wait_daemon podman-rootless-gvisor "$ROOTLESS_GVISOR_SOCK" /v4.0.0/libpod/_ping
}

stop_engines() {
    local name pid i
    for name in registry podman-rootless-gvisor podman-rootless podman-gvisor podman docker; do
        alive "$name" || { rm -f "$RUN/$name.pid"; continue; }
        pid=$(cat "$RUN/$name.pid")
        kill "$pid"
        for ((i = 0; i < 80; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        if kill -0 "$pid" 2>/dev/null; then log "$name: did not stop, killing"; kill -9 "$pid"; fi
        # Rootless podman that had to create its user namespace forks a child
        # that outlives the parent; it stays in the group setsid gave the daemon.
        kill -- "-$pid" 2>/dev/null || true
        rm -f "$RUN/$name.pid"
        log "$name: stopped (pid $pid)"
    done
}

# ---------------------------------------------------------------- demo image
# build_rootfs_tar OUT: the rootfs of ateam-demo as a reproducible tarball:
# Debian's static busybox with its applets, minimal /etc, and the demo agent.
build_rootfs_tar() (
    local out=$1 root a
    if [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
        die "/bin/busybox is missing or not static (apt-get install busybox-static)"
    fi
    umask 022
    root=$(mktemp -d)
    trap 'rm -rf "$root"' EXIT
    mkdir -p "$root"/{bin,etc,home,root,tmp,proc,sys,dev,usr}
    chmod 755 "$root"; chmod 700 "$root/root"; chmod 1777 "$root/tmp"   # mktemp made / 0700
    cp /bin/busybox "$root/bin/busybox"
    for a in $(/bin/busybox --list); do
        [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
    done
    # Every usual command path leads to /bin.
    ln -s bin "$root/sbin"; ln -s ../bin "$root/usr/bin"; ln -s ../bin "$root/usr/sbin"
    install -m 0755 "$REPO/images/demo/agent.sh" "$root/bin/agent.sh"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    # Fixed owners, times and order: same input, same bytes, same checksum.
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        -C "$root" -cf "$out" .
)

# import_image NAME CLI...: import the tarball unless the image already
# carries the tarball's checksum as a label.
import_image() {
    local name=$1; shift
    local have out
    have=$("$@" image inspect --format '{{ index .Config.Labels "ateam.demo.sha256" }}' "$IMAGE" 2>/dev/null || true)
    if [ "$have" = "$SUM" ]; then log "$name: $IMAGE up to date"; return; fi
    # Output only on failure: podman prints copy progress on stderr.
    if ! out=$("$@" import --change 'CMD ["/bin/agent.sh"]' --change 'ENV PATH=/bin' \
        --change "LABEL ateam.demo.sha256=$SUM" "$TAR" "$IMAGE" 2>&1); then
        printf '%s\n' "$out" >&2; die "$name: import of $IMAGE failed"
    fi
    log "$name: imported $IMAGE"
}

DOCKER=(docker -H "unix://$DOCKER_SOCK")

import_images() {
    TAR=$STATE/ateam-demo.tar
    build_rootfs_tar "$TAR"
    chmod 644 "$TAR"
    SUM=$(sha256sum "$TAR" | cut -c1-64)
    import_image docker "${DOCKER[@]}"
    import_image podman podman
    import_image podman-rootless as_user podman
}

# ---------------------------------------------------------------- check
# Smoke test: a locked-down container runs on each engine, and on rootless
# Podman --userns=keep-id maps the user to itself, also for files it writes.
check_engines() {
    local lockdown=(run --rm --network none --read-only --cap-drop ALL
        --security-opt no-new-privileges)
    local out
    out=$("${DOCKER[@]}" "${lockdown[@]}" "$IMAGE" id); log "docker:          $out"
    out=$(podman --url "unix://$PODMAN_SOCK" "${lockdown[@]}" "$IMAGE" id); log "podman rootful:  $out"
    out=$(as_user podman --url "unix://$ROOTLESS_SOCK" "${lockdown[@]}" --userns=keep-id "$IMAGE" id)
    log "podman rootless: $out"
    local dir; dir=$(as_user mktemp -d)
    as_user podman --url "unix://$ROOTLESS_SOCK" "${lockdown[@]}" --userns=keep-id \
        -v "$dir:/w" "$IMAGE" touch /w/f
    [ "$(stat -c %U "$dir/f")" = "$ROOTLESS_USER" ] ||
        die "rootless keep-id: file written in a bind mount belongs to $(stat -c %U "$dir/f")"
    rm -rf "$dir"
    log "rootless keep-id: bind-mount file owned by $ROOTLESS_USER on the host: ok"
    # gVisor's kernel says it is Linux 4.4.0, whatever the host runs.
    out=$("${DOCKER[@]}" "${lockdown[@]}" --runtime runsc "$IMAGE" uname -r); log "docker gVisor:   $out"
    out=$(podman --url "unix://$PODMAN_GVISOR_SOCK" "${lockdown[@]}" "$IMAGE" uname -r)
    log "podman gVisor:   $out"
    out=$(as_user podman --url "unix://$ROOTLESS_GVISOR_SOCK" "${lockdown[@]}" --userns=keep-id "$IMAGE" uname -r)
    log "rootless gVisor: $out"
}

# ---------------------------------------------------------------- registry
REGISTRY=localhost:5000

# The local registry: plain HTTP on loopback, no auth. Docker takes loopback registries as
# insecure by itself; Podman is told so by a registries.conf drop-in (written before its
# service starts: it reads the file once).
registry_conf() {
    cat <<EOF
version: 0.1
storage:
  filesystem:
    rootdirectory: $STATE/registry
  delete:
    enabled: true
http:
  addr: 127.0.0.1:5000
EOF
}

podman_registries_conf() {
    printf '[[registry]]\nlocation = "%s"\ninsecure = true\n' "$REGISTRY"
}

start_registry() {
    mkdir -p "$STATE/registry"
    registry_conf | write_file "$RUN/registry.yml" root
    local pf=$RUN/registry.pid
    if [ -f "$pf" ] && readlink "/proc/$(cat "$pf")/cwd" 2>/dev/null | grep -q ' (deleted)$'; then
        log "registry: its working folder was deleted; restarting it"
        kill "$(cat "$pf")" 2>/dev/null || true
        sleep 0.5
    fi
    if curl -sf --max-time 3 "http://$REGISTRY/v2/" >/dev/null 2>&1; then
        log "registry: already answering on $REGISTRY"; return
    fi
    (cd / && exec nohup setsid docker-registry serve "$RUN/registry.yml" >"$STATE/registry.log" 2>&1 </dev/null) &
    echo $! >"$RUN/registry.pid"
    local i
    for ((i = 0; i < WAIT_SECS * 4; i++)); do
        if curl -sf --max-time 3 "http://$REGISTRY/v2/" >/dev/null 2>&1; then
            log "registry: started on $REGISTRY"; return
        fi
        sleep 0.25
    done
    tail -n 30 "$STATE/registry.log" >&2 || true
    die "the registry does not answer on $REGISTRY"
}

# ---------------------------------------------------------------- main
write_env() {
    write_file "$RUN/env" root <<EOF
export DOCKER_HOST=unix://$DOCKER_SOCK
export ATEAM_TEST_DOCKER=unix://$DOCKER_SOCK
export ATEAM_TEST_PODMAN_ROOTFUL=unix://$PODMAN_SOCK
export ATEAM_TEST_PODMAN_ROOTLESS=unix://$ROOTLESS_SOCK
export ATEAM_TEST_PODMAN_GVISOR=unix://$PODMAN_GVISOR_SOCK
export ATEAM_TEST_PODMAN_ROOTLESS_GVISOR=unix://$ROOTLESS_GVISOR_SOCK
export ATEAM_TEST_ROOTLESS_USER=$ROOTLESS_USER
export ATEAM_TEST_IMAGE=$IMAGE
export ATEAM_TEST_REGISTRY=$REGISTRY
EOF
}

# server_version SOCK: "server X, API Y" from the engine's /version (curl is
# quicker than three CLIs). Podman adds its own libpod API version.
server_version() {
    curl -sf --unix-socket "$1" http://d/version | python3 -c '
import json, sys
d = json.load(sys.stdin)
libpod = [c["Details"]["APIVersion"] for c in d.get("Components", [])
          if c.get("Name") == "Podman Engine"]
print("server %s, API %s (min %s)%s" % (d["Version"], d["ApiVersion"], d["MinAPIVersion"],
      ", libpod API %s" % libpod[0] if libpod else ""))'
}

summary() {
    local t=$1
    log "docker:          $(server_version "$DOCKER_SOCK"); $(docker --version)"
    log "podman rootful:  $(server_version "$PODMAN_SOCK")"
    log "podman rootless: $(server_version "$ROOTLESS_SOCK")"
    log "env file: $RUN/env (source it)"
    log "setup took $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t }")s"
}

main() {
    local t0=$EPOCHREALTIME
    case ${1:-start} in
    start)
        install_packages
        containers_conf | write_file /etc/containers/containers.conf root
        mkdir -p /etc/containers/registries.conf.d
        podman_registries_conf | write_file /etc/containers/registries.conf.d/50-ateam-ci.conf root
        docker_runtimes
        host_fixes
        hosts_entries
        setup_user
        start_engines
        start_registry
        import_images
        write_env
        # The real HTTP clients' image of tests/egress_clients.rs (reads the env file).
        "$REPO/scripts/client-image.sh"
        check_engines
        summary "$t0"
        ;;
    check) user_vars; check_engines ;;
    stop) stop_engines ;;
    rootfs) [ $# -eq 2 ] || die "usage: $0 rootfs OUT.tar"; build_rootfs_tar "$2" ;;
    *) die "usage: $0 [start|check|stop|rootfs OUT.tar]" ;;
    esac
}

main "$@"
