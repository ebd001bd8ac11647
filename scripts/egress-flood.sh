#!/bin/bash
# What a member's idle connections cost its egress proxy (docs/egress.md, "What a member's
# connections cost the host"): a member capped at `cpus: 100m` opens 1,100 idle connections to
# its bridge with busybox `nc`; the proxy's CPU (utime+stime from /proc/<pid>/stat) is read
# over 3..13 s and 20..30 s after the flood starts. ateam runs under a soft descriptor limit of
# 1024 (systemd's default). Needs the engines (scripts/engines.sh) and root.
#
#   scripts/egress-flood.sh [ATEAM_BINARY] [docker|podman]
set -eu
source /run/ateam-ci/env
bin=${1:-target/debug/ateam}
bin=$(realpath "$bin")
backend=${2:-docker}
dir=$(mktemp -d /tmp/ateam-egress-flood.XXXX)
trap 'ATEAM_STATE_DIR=$dir/state $bin --backend $backend delete --team flood --purge >/dev/null 2>&1; rm -rf "$dir"' EXIT
cd "$dir"
mkdir work state sessions
cat > team.yaml <<YAML
apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: flood}
spec: {image: ateam-demo:latest, sessionDir: ./sessions, allowUnenforcedLimits: true}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: lead}
spec: {command: [sleep, "100000"], cwd: ./work}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: net}
spec: {read: [./work], network: {allow: ["example.com"]}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: a}
spec: {parent: lead, access: net, command: [sleep, "100000"], resources: {memory: 512Mi, pids: 2048, cpus: 100m}}
YAML
export ATEAM_STATE_DIR=$dir/state
prlimit --nofile=1024: -- "$bin" --backend "$backend" apply -f team.yaml >/dev/null 2>&1
pid=$(cat state/teams/flood/members/a/egress/proxy.pid)
ticks() { awk '{print $14+$15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
echo "proxy $pid: $(grep 'open files' "/proc/$pid/limits" | tr -s ' ')"
"$bin" --backend "$backend" exec a --team flood -- sh -c \
  'mkfifo /tmp/f; exec 3<>/tmp/f; i=0; while [ $i -lt 1100 ]; do nc 127.0.0.1 3128 <&3 >/dev/null 2>&1 & i=$((i+1)); done; sleep 32' &
flood=$!
window() {
  local b e
  b=$(ticks); sleep 10; e=$(ticks)
  echo "$1: proxy CPU $(( (e - b) * 1000 / hz / 10 ))‰ of a core; $(ls "/proc/$pid/fd" | wc -l) descriptors; $(grep -E 'VmRSS|VmData' "/proc/$pid/status" | tr -s ' \t\n' ' ')"
}
sleep 3; window "3..13 s"
sleep 7; window "20..30 s"
wait $flood
