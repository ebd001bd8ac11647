#!/usr/bin/env bash
# Everything on a fresh machine of this kind (Debian 12, as root): install and start the
# container engines and the demo image (scripts/engines.sh), build ateam, apply the example
# team and show its status. Run it again at will: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/engines.sh
# shellcheck disable=SC1091
source /run/ateam-ci/env   # DOCKER_HOST and the test sockets
cargo build --release --locked
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
echo
echo "Transcripts: examples/demo-team/sessions/members/*/transcript.log"
echo "Try: ./target/release/ateam exec reviewer -- ls /sys/class/net     (only lo)"
echo "     ./target/release/ateam delete -f examples/demo-team/team.yaml        (keeps transcripts)"
