#!/bin/sh
# Demo "agent" for ateam's tests (POSIX sh, runs under busybox).
# It reports who it is, what it can see and whether it has network,
# then sleeps forever so the container keeps running like a real agent.

log() {
    line="$(date -u +%Y-%m-%dT%H:%M:%SZ) agent: $*"
    echo "$line"
    # The transcript goes to the session dir when the controller gives one.
    # Says once if it cannot (e.g. root without CAP_DAC_OVERRIDE in a user's dir).
    if [ -n "${transcript:-}" ] && ! echo "$line" >>"$transcript" 2>/dev/null; then
        echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) agent: cannot write $transcript as $(id -u):$(id -g)"
        transcript=
    fi
}

# List each dir of a colon-separated list and say whether it is writable.
list_dirs() {
    kind=$1 list=$2
    old_ifs=$IFS; IFS=:
    for d in $list; do
        [ -n "$d" ] || continue
        # Really try: busybox's `test -w` says yes to root on a read-only mount.
        if touch "$d/.ateam-probe" 2>/dev/null; then rm -f "$d/.ateam-probe"; w=writable; else w=read-only; fi
        log "$kind dir $d ($w): $(ls -A "$d" 2>&1 | tr '\n' ' ')"
    done
    IFS=$old_ifs
}

# As PID 1 a signal without a handler is ignored: handle it from the start.
trap 'log "stopping on signal"; exit 0' TERM INT HUP

transcript=${ATEAM_SESSION_DIR:+$ATEAM_SESSION_DIR/transcript.log}
log "started as $(id) on $(hostname)"
log "session dir: ${ATEAM_SESSION_DIR:-<unset>}"
list_dirs read "${ATEAM_READ_DIRS:-}"
list_dirs write "${ATEAM_WRITE_DIRS:-}"

# Network probe. The default target is the Debian mirror, the one kind of
# host this CI may talk to; override with ATEAM_NET_PROBE (a URL).
# `timeout`, not `wget -T`: Debian's busybox 1.35 wget segfaults with -T.
probe=${ATEAM_NET_PROBE:-http://deb.debian.org/debian/}
if out=$(timeout 5 wget -O /dev/null "$probe" 2>&1); then
    log "network: reached $probe"
else
    case $out in
    *"server returned error"*) log "network: reached $probe (HTTP error: ${out##*error: })" ;;
    *) log "network: cannot reach $probe ($(echo "$out" | tail -n 1))" ;;
    esac
fi

log "sleeping"
# Keep running until stopped. Not `exec sleep`: as PID 1, sleep would ignore
# SIGTERM and every `stop` would wait for the engine's kill timeout. The shell
# has a trap (set at the top), so it gets the signal; `wait` returns at once.
while :; do
    sleep 2147483647 &
    wait $!
done
