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
./target/release/ateam apply -f examples/demo-team/
./target/release/ateam status
echo
echo "Transcripts: examples/demo-team/sessions/members/*/transcript.log"
echo "Try: ./target/release/ateam exec reviewer -- ls /sys/class/net     (only lo)"
echo "     ./target/release/ateam delete -f examples/demo-team/                  (keeps transcripts)"
