#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this). Safe to run again and again.
#
# 1. fmt, clippy and the tests that need no engine;
# 2. scripts/engines.sh installs and starts Docker, rootful and rootless Podman and imports
#    the demo image (idempotent; about 35 s on a fresh machine, 3 s after);
# 3. scripts/agent-images.sh builds the real agents' images (Claude Code, Codex CLI) and the
#    toolchain image (Debian's packages, mmdebstrap; about 2 to 3 minutes the first time) for
#    tests/agents.rs; cached, a few seconds after the first run;
# 4. the engine tests as root (Docker, rootful Podman), then the same cases on rootless
#    Podman as the unprivileged user the engines script made.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "tools"
# cargo-nextest runs the tests; machines of this kind do not come with it (built from
# crates.io, a few minutes the first time; nothing after).
if ! cargo nextest --version >/dev/null 2>&1; then
    cargo install --locked cargo-nextest
fi

step "format and lints"
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings

step "tests without engines"
# Real clients, for the proxy tests that need no engine (tests/egress_proxy.rs: curl, git,
# Python and Node against a local TLS upstream), Python's Prometheus parser that scrapes the
# controller's metrics (tests/controller.rs), and tmux for the unit tests that end a real main
# session's terminal (src/sessions.rs) and drive `ateam top` (tests/top.rs); engines.sh
# installs the rest.
missing=()
for p in curl git python3 python3-prometheus-client nodejs tmux; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null
fi
cargo nextest run --locked --no-fail-fast
python3 -m unittest discover -s tests/support -p 'test_*.py'

step "container engines"
bash scripts/engines.sh
# shellcheck disable=SC1091
source /run/ateam-ci/env

step "agent images (Claude Code, Codex CLI from the npm registry; the toolchain from Debian's)"
bash scripts/agent-images.sh

# The attack suite runs ateam as the rootless user too (through runuser): give it a copy of
# the binary that user can reach (the checkout may be under /root).
cargo build --locked --bin ateam
dir=/tmp/ateam-ci-tests
rm -rf "$dir" && install -d -m 0755 "$dir" && install -m 0755 target/debug/ateam "$dir/ateam"
export ATEAM_TEST_BIN="$dir/ateam"

step "the agents' builds that members run, in root's agent cache (ateam agents pull)"
# npm's own cache already holds what agent-images.sh fetched. The rootless user's cache is
# filled by its first apply, as a person's is (tests/agents.rs).
for a in claude codex; do "$dir/ateam" agents pull "$a"; done

step "engine tests: Docker and rootful Podman (as root), and the suites' rootless cases"
# A suite's rootless cases (modules `rootless_podman`: the attacks, egress, requests, board,
# agents, approvals...) run here too: the test is root, ateam runs as the unprivileged user
# through runuser (tests/common: ateam_command, ATEAM_TEST_BIN). Only engines.rs's
# `podman_rootless::` cases run whole as that user, in the next step.
cargo nextest run --locked --no-fail-fast --run-ignored only -E 'not test(/^podman_rootless::/)'

step "engine tests: rootless Podman (as $ATEAM_TEST_ROOTLESS_USER)"
# The same compiled cases, run as the unprivileged user: copy the test binary where that
# user can read it (the checkout may be under /root).
bin=$(cargo test --locked --test engines --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "engines" and m.get("executable"):
        print(m["executable"])')
install -m 0755 "$bin" "$dir/engines"
uid=$(id -u "$ATEAM_TEST_ROOTLESS_USER")
runuser -u "$ATEAM_TEST_ROOTLESS_USER" -- env -i PATH="$PATH" HOME="/home/$ATEAM_TEST_ROOTLESS_USER" \
    XDG_RUNTIME_DIR="/run/ateam-ci/user-$uid" TMPDIR=/tmp \
    ATEAM_TEST_DOCKER="$ATEAM_TEST_DOCKER" ATEAM_TEST_PODMAN_ROOTLESS="$ATEAM_TEST_PODMAN_ROOTLESS" \
    ATEAM_TEST_IMAGE="$ATEAM_TEST_IMAGE" \
    "$dir/engines" --include-ignored --test-threads 2 podman_rootless::

step "soak under the controller: Docker and rootful Podman (scripts/soak.py, fixed seeds)"
# A short form of the 1,000-event runs of docs/reliability.md: about 2.5 min each, on an
# engine of its own (a private dockerd; a second Podman service over the rootful store).
ATEAM_BIN="$dir/ateam" python3 scripts/soak.py --engine docker --events 150 --gap 0.6 --seed 18
ATEAM_BIN="$dir/ateam" python3 scripts/soak.py --engine podman --events 150 --gap 0.6 --seed 18
