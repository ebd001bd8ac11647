#!/usr/bin/env bash
# ateam against its peers, side by side on the same engine (a benchmark, not a test).
#
#   scripts/bench.sh                 # Docker and rootful Podman, N = 50 200
#   BENCH_ENGINES=docker BENCH_NS="20" BENCH_RUNS=5 scripts/bench.sh
#   BENCH_KEEP=1 BENCH_ENGINES=podman scripts/bench.sh   # adds to the last run's tables
#   BENCH_COLD=0 scripts/bench.sh    # no-op apply and status only
#
# For each engine and N it times, with hyperfine:
#   cold:   ateam apply of N members | the API floor (scripts/raw-floor.py: create + start
#           through the engine API with the same flags, no checks) | a parallel loop of
#           `run -d` | docker-compose up -d (Docker) | podman kube play (Podman)
#   no-op:  ateam apply again | docker-compose up -d again
#   status: ateam status | docker/podman ps | docker-compose ps
# and writes docs/benchmarks-latest.md (tables and ratios). Needs root (it starts the
# engines with scripts/engines.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
NS=${BENCH_NS:-"50 200"}
RUNS=${BENCH_RUNS:-3}
QUICK_RUNS=${BENCH_QUICK_RUNS:-10}
ENGINES=${BENCH_ENGINES:-"docker podman"}
W=${BENCH_DIR:-/tmp/ateam-bench}
# The same bound ateam uses by default: min(8, 2 x CPUs).
P=$(( $(nproc) * 2 < 8 ? $(nproc) * 2 : 8 ))

for tool in hyperfine docker-compose; do
    command -v "$tool" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine docker-compose >/dev/null
done
bash scripts/engines.sh >/dev/null
# shellcheck disable=SC1091
source /run/ateam-ci/env
cargo build --release --locked -q
ATEAM=$REPO/target/release/ateam
# Main sessions of an earlier run would outlive their folder.
pkill -f "tmux -S $W/" 2>/dev/null || true
# BENCH_KEEP=1 keeps the results of earlier runs (one engine or N at a time, one table).
[ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$W"
mkdir -p "$W/results"

# gen_ateam DIR N: a team of N members, each with one write grant (the same folder, which
# they say they share), no network.
gen_ateam() {
    local dir=$1 n=$2 i
    mkdir -p "$dir/repo"
    # Members run as 65534 (nobody): their write grant must be theirs to write.
    chown 65534:65534 "$dir/repo"
    {
        printf 'apiVersion: ateam.dev/v1alpha1\nkind: Team\nmetadata: {name: bench}\n'
        printf 'spec: {image: ateam-demo:latest, sessionDir: ./sessions, maxMembers: %s}\n' "$n"
        printf -- '---\napiVersion: ateam.dev/v1alpha1\nkind: MainSession\nmetadata: {name: lead}\nspec: {command: [sh]}\n'
        printf -- '---\napiVersion: ateam.dev/v1alpha1\nkind: AccessGrant\nmetadata: {name: g}\nspec: {write: [./repo]}\n'
        for i in $(seq 1 "$n"); do
            printf -- '---\napiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {name: m%s, labels: {bench: "1"}}\n' "$i"
            printf 'spec: {parent: lead, access: g, resources: {memory: 64Mi, pids: 64}, shareWrites: true}\n'
        done
    } >"$dir/team.yaml"
}

# The flags ateam gives a member, for the peers.
RUN_FLAGS="--label bench=1 --network none --cap-drop ALL --security-opt no-new-privileges --read-only --init \
--user 65534:65534 --memory 64m --memory-swap 64m --pids-limit 64 --tmpfs /tmp:rw,nosuid,nodev,size=256m \
--tmpfs /home/agent:rw,nosuid,nodev,size=256m --restart no"

gen_compose() {
    local dir=$1 n=$2 i
    {
        printf 'version: "2.4"\nservices:\n'
        for i in $(seq 1 "$n"); do
            cat <<EOF2
  m$i:
    image: ateam-demo:latest
    labels: {bench: "1"}
    network_mode: none
    cap_drop: [ALL]
    security_opt: [no-new-privileges]
    read_only: true
    init: true
    user: "0:0"
    mem_limit: 64m
    memswap_limit: 64m
    pids_limit: 64
    tmpfs: ["/tmp:rw,nosuid,nodev,size=256m", "/home/agent:rw,nosuid,nodev,size=256m"]
    volumes: ["$dir/repo:$dir/repo:rw"]
EOF2
        done
    } >"$dir/compose.yml"
}

gen_kube() {
    local dir=$1 n=$2 i
    for i in $(seq 1 "$n"); do
        cat <<EOF2
---
apiVersion: v1
kind: Pod
metadata: {name: bench-m$i, labels: {bench: "1"}}
spec:
  restartPolicy: Never
  containers:
  - name: agent
    image: localhost/ateam-demo:latest
    command: [/bin/agent.sh]
    securityContext:
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      runAsUser: 0
      capabilities: {drop: [ALL]}
    resources: {limits: {memory: 64Mi}}
    volumeMounts: [{name: repo, mountPath: $dir/repo}]
  volumes: [{name: repo, hostPath: {path: $dir/repo, type: Directory}}]
EOF2
    done >"$dir/kube.yaml"
}

for engine in $ENGINES; do
    if [ "$engine" = docker ]; then
        CLI="docker -H $ATEAM_TEST_DOCKER"
        export DOCKER_HOST=$ATEAM_TEST_DOCKER
    else
        CLI="podman --url $ATEAM_TEST_PODMAN_ROOTFUL"
        export CONTAINER_HOST=$ATEAM_TEST_PODMAN_ROOTFUL
    fi
    for n in $NS; do
        d=$W/$engine-$n
        gen_ateam "$d" "$n"
        gen_compose "$d" "$n"
        gen_kube "$d" "$n"
        export ATEAM_STATE_DIR=$d/state
        A="$ATEAM --backend $engine"
        clean="$CLI rm -f \$($CLI ps -aq --filter label=bench=1) >/dev/null 2>&1; \
$CLI pod rm -f \$($CLI pod ps -q --filter label=bench=1 2>/dev/null) >/dev/null 2>&1; \
rm -rf $d/sessions/members; true"
        loop="seq 1 $n | xargs -P $P -I{} $CLI run -d --name loop-{} $RUN_FLAGS -v $d/repo:$d/repo:rw ateam-demo:latest >/dev/null"
        # The API floor: create + start through the engine API, P at a time, no checks.
        sock=$([ "$engine" = docker ] && echo "$ATEAM_TEST_DOCKER" || echo "$ATEAM_TEST_PODMAN_ROOTFUL")
        floor="python3 $REPO/scripts/raw-floor.py $engine $sock $n $d $P"
        peers=(-n "API floor (-P $P)" "$floor" -n "run -d loop (-P $P)" "$loop")
        # docker-compose 1.29 took over 7 minutes to bring up 200 services here: above 50 it
        # is left out.
        if [ "$engine" = podman ]; then
            peers+=(-n "podman kube play" "$CLI kube play --network none $d/kube.yaml >/dev/null")
        elif [ "$n" -le 50 ]; then
            peers+=(-n "docker-compose up -d" "docker-compose -p bench -f $d/compose.yml up -d >/dev/null 2>&1")
        fi
        if [ "${BENCH_COLD:-1}" = 1 ]; then
            echo "== $engine, N=$n: cold"
            hyperfine --style basic --runs "$RUNS" --prepare "$clean" --export-json "$W/results/$engine-$n-cold.json" \
                -n "ateam apply" "$A apply -f $d/team.yaml" "${peers[@]}"
        fi
        eval "$clean" || true

        echo "== $engine, N=$n: no-op and status"
        $A apply -f "$d/team.yaml" >/dev/null 2>&1
        quick=(-n "ateam apply (no-op)" "$A apply -f $d/team.yaml" -n "ateam status" "$A status" -n "$engine ps" "$CLI ps -a --filter label=bench=1")
        if [ "$engine" = docker ] && [ "$n" -le 50 ]; then
            docker-compose -p bench -f "$d/compose.yml" up -d >/dev/null 2>&1
            quick+=(-n "docker-compose up -d (no-op)" "docker-compose -p bench -f $d/compose.yml up -d" -n "docker-compose ps" "docker-compose -p bench -f $d/compose.yml ps")
        fi
        hyperfine --style basic --warmup 1 --runs "$QUICK_RUNS" --export-json "$W/results/$engine-$n-quick.json" "${quick[@]}"
        $A delete -f "$d/team.yaml" --purge >/dev/null 2>&1 || true
        [ "$engine" = docker ] && docker-compose -p bench -f "$d/compose.yml" down >/dev/null 2>&1
        eval "$clean" || true
    done
done

python3 - "$W/results" "$REPO/docs/benchmarks-latest.md" "$P" <<'EOF2'
import json, sys, pathlib, platform, subprocess
res, out, p = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
rows = {}
for f in sorted(res.glob("*.json")):
    engine, n, kind = f.stem.split("-")
    for r in json.loads(f.read_text())["results"]:
        rows.setdefault((engine, kind), {}).setdefault(r["command"], {})[int(n)] = (r["mean"], r["stddev"] or 0.0)
lines = ["# Benchmark results (generated by scripts/bench.sh)", "",
         f"Machine: {subprocess.getoutput('nproc')} CPUs, {platform.platform()}; run loops use -P {p}.",
         "Mean ± standard deviation in seconds; ratio = ateam / peer (below 1: ateam is faster).", ""]
for (engine, kind), cmds in sorted(rows.items()):
    ns = sorted({n for c in cmds.values() for n in c})
    lines += [f"## {engine}, {'cold apply' if kind == 'cold' else 'no-op apply and status'}", "",
              "| command | " + " | ".join(f"N={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
    for cmd, by_n in cmds.items():
        lines.append(f"| {cmd} | " + " | ".join(f"{by_n[n][0]:.3f} ± {by_n[n][1]:.3f}" if n in by_n else "-" for n in ns) + " |")
    ateam = {c: v for c, v in cmds.items() if c.startswith("ateam")}
    for a, av in ateam.items():
        for c, cv in cmds.items():
            if c.startswith("ateam"):
                continue
            ratios = [f"N={n}: {av[n][0] / cv[n][0]:.2f}" for n in ns if n in av and n in cv and cv[n][0] > 0]
            lines.append(f"\n{a} / {c}: " + ", ".join(ratios))
    lines.append("")
out.write_text("\n".join(lines) + "\n")
print(out.read_text())
EOF2
