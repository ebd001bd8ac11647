#!/usr/bin/env bash
# CI for a repository of ateam teams (one folder per team under teams/), as plain shell so
# that any CI system can run it. It runs on the machine the agents run on (a self-hosted
# runner): ateam checks folders, memory and the container engine of that machine.
#
#   ci.sh validate   every manifest against every rule; changes nothing      (any change)
#   ci.sh pr         validate, then the plan a merge would carry out           (pull request)
#   ci.sh apply      make the machine match the manifests                      (merge to main)
#   ci.sh drift      fail when the machine differs from the manifests          (schedule)
#
# Environment: ATEAM (the binary, default `ateam`), TEAMS (the manifests, default teams/
# beside this script), and ateam's own (ATEAM_STATE_DIR, DOCKER_HOST, ...).
# Exit: 0 fine, 1 drift or invalid manifests, 2 an error (ateam's own code passes through).
set -euo pipefail

ATEAM=${ATEAM:-ateam}
TEAMS=${TEAMS:-$(dirname "${BASH_SOURCE[0]}")/teams}

validate() {
    "$ATEAM" validate -f "$TEAMS"
}

# `ateam diff` exits 0 when nothing would change, 1 when something would (what a pull
# request is for), 2 on an error.
plan() {
    local code=0
    "$ATEAM" diff -f "$TEAMS" || code=$?
    case $code in
        0) echo "ci: merging changes nothing on this machine" ;;
        1) echo "ci: merging carries out the plan above" ;;
        *) echo "ci: ateam diff failed (exit $code)" >&2; return "$code" ;;
    esac
}

drift() {
    local code=0
    "$ATEAM" status -f "$TEAMS" --exit-code || code=$?
    case $code in
        0) echo "ci: the machine matches the manifests" ;;
        1) echo "ci: drift: the machine differs from the manifests (see above); ateam apply -f $TEAMS puts it right" >&2 ;;
        *) echo "ci: ateam status failed (exit $code)" >&2 ;;
    esac
    return "$code"
}

case ${1:-} in
    validate) validate ;;
    pr) validate && plan ;;
    apply) validate && "$ATEAM" apply -f "$TEAMS" ;;
    drift) drift ;;
    *) sed -n '2,/^set /{/^#/p}' "$0" >&2; exit 2 ;;
esac
