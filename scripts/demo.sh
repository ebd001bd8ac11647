#!/usr/bin/env bash
# Everything on a fresh machine of this kind (Debian 12, as root): install and start the
# container engines and the demo image (scripts/engines.sh), build ateam, apply the example
# team and show its status; then one real coding agent (Claude Code, from the npm registry)
# does a task as a member, against a stand-in of the remote model on this machine
# (tests/support/model_server.py: no real model is reached). Run it again at will: every step
# is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

# What builds and installs says a lot, and nothing about ateam: it goes to a log, and each
# step says one line (the log's end is shown if a step fails).
log=${ATEAM_DEMO_LOG:-/tmp/ateam-demo.log}
: >"$log"
quietly() {
    local what=$1 start=$SECONDS
    shift
    echo "== $what (its output: $log)"
    if ! "$@" >>"$log" 2>&1; then
        tail -n 40 "$log"
        echo "failed: $what"
        exit 1
    fi
    echo "   done in $((SECONDS - start)) s"
}
quietly "installing and starting Docker and Podman, building the demo image" bash scripts/engines.sh
# shellcheck disable=SC1091
source /run/ateam-ci/env   # DOCKER_HOST and the test sockets
quietly "building ateam (cargo build --release)" cargo build --release --locked
# The example members ask for this secret; a placeholder will do for the demo agent.
export ANTHROPIC_API_KEY=${ANTHROPIC_API_KEY:-placeholder-for-the-demo}
# The reviewer's grant allows one port of this machine's loopback, host.ateam.internal:8765 (the way to
# reach a service on this machine): a small docs server.
if ! curl -sf --max-time 2 http://127.0.0.1:8765/ >/dev/null 2>&1; then
    nohup setsid python3 -m http.server 8765 --bind 127.0.0.1 \
        --directory examples/demo-team/workspace/docs >/dev/null 2>&1 </dev/null &
    sleep 0.5
fi
# Members of a root caller run as the sudo user, else the owner of the team's folder, else
# nobody (65534). In a root-owned checkout, give the writer its repository: apply refuses a
# write grant its member cannot write (exit 4, with the fix).
if [ "$(id -u)" = 0 ] && [ -z "${SUDO_UID:-}" ] && [ "$(stat -c %u examples/demo-team)" = 0 ]; then
    chown -R 65534:65534 examples/demo-team/workspace/repo
fi
./target/release/ateam apply -f examples/demo-team/team.yaml
echo
echo "== the writer writes into its repository (as the uid it runs as)"
./target/release/ateam exec writer -- sh -c 'id -u; echo "written by the writer" > demo-edit.txt && ls -ln demo-edit.txt'
echo
echo "== egress: the reviewer reaches its allowed endpoint through its proxy, and nothing else"
./target/release/ateam exec reviewer -- wget -q -O - http://host.ateam.internal:8765/ | head -n 5
./target/release/ateam exec reviewer -- wget -q -O - http://example.com/ || true
./target/release/ateam logs reviewer --egress --tail 5
echo
./target/release/ateam status
echo "(The refusals above are the point: the demo image's agent, images/demo/agent.sh, probes"
echo " http://deb.debian.org/ at start to show whether it has a network; no grant of the demo"
echo " team allows that host, so the proxy of each member with an allow list refused it (a member"
echo " with network: none has no route at all), and status says so with the grant that would"
echo " allow it. The reviewer's example.com above was refused the same way.)"

echo
echo "== a real agent: Claude Code as a member, one task, its model a stand-in on this machine"
quietly "building the agent's image (Claude Code from the npm registry)" bash scripts/agent-images.sh claude
# HTTPS, as a real API: the coder's proxy ends its TLS and puts the key in (the member holds
# a placeholder); the stand-in's certificate comes from tests/support/model-tls.
probe() { curl -s --max-time 1 --cacert tests/support/model-tls/ca.pem \
    --connect-to host.ateam.internal:8790:127.0.0.1:8790 https://host.ateam.internal:8790/v1/models >/dev/null 2>&1; }
if ! probe; then
    nohup setsid python3 tests/support/model_server.py --port 8790 \
        --tls-cert tests/support/model-tls/cert.pem --tls-key tests/support/model-tls/key.pem \
        >/tmp/ateam-demo-model.log 2>&1 </dev/null &
    for _ in $(seq 50); do probe && break; sleep 0.1; done
fi
agent=examples/agents/claude
if [ "$(id -u)" = 0 ] && [ -z "${SUDO_UID:-}" ] && [ "$(stat -c %u "$agent")" = 0 ]; then
    chown -R 65534:65534 "$agent/workspace/repo"
fi
rm -f "$agent/workspace/repo/hello.txt"
./target/release/ateam delete -f "$agent/team.yaml" >/dev/null 2>&1 || true
./target/release/ateam apply -f "$agent/team.yaml"
for _ in $(seq 120); do
    state=$(./target/release/ateam status claude-agent -o json |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(next(m["state"] for m in d["teams"][0]["members"] if m["name"]=="coder"))')
    case $state in exited*) break ;; esac
    sleep 1
done
echo "coder: $state"
echo "-- its edit, on the host:"
ls -ln "$agent/workspace/repo/hello.txt" && cat "$agent/workspace/repo/hello.txt"
echo "-- its own transcript, in ateam's transcript folder:"
find "$agent/sessions/members/coder/claude/projects" -name '*.jsonl' -printf '%s bytes  %p\n'
echo "-- its egress: the model host and nothing else (its key injected by the proxy)"
./target/release/ateam logs coder --team claude-agent --egress
./target/release/ateam status claude-agent
echo
echo "Transcripts: examples/demo-team/sessions/members/*/transcript.log"
echo "Try: ./target/release/ateam exec reviewer -- ls /sys/class/net     (only lo)"
echo "     ./target/release/ateam delete -f examples/demo-team/team.yaml        (keeps transcripts)"
echo "     docs/agents.md: Claude Code and Codex CLI as members, against a real model"
