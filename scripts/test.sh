#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this). Safe to run again and again.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
# nextest closes with one summary line over every test binary (cargo test ends on the last
# binary, often one with no tests).
cargo nextest run --locked --no-fail-fast
