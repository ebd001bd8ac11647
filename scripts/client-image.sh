#!/usr/bin/env bash
# Build ateam-clients:latest, an image of real HTTP clients for the egress tests
# (tests/egress_clients.rs): the host's own curl, git (with its http helper), python3 (its
# standard library, without tests and build files) and node, with the shared libraries each
# needs, plus Debian's static busybox for the shell. No registry: the rootfs is copied from
# this machine and imported (`docker import`, `podman import`) into the three engines.
#
# Usage: scripts/client-image.sh        build and import where missing or out of date
# Idempotent: the image carries its tarball's checksum; a rerun with the same host binaries
# imports nothing. Needs the engines of scripts/engines.sh (it sources /run/ateam-ci/env).
set -euo pipefail

IMAGE=ateam-clients:latest
STATE=/var/lib/ateam-ci
ROOTLESS_USER=ateamci
log() { printf '[client-image] %s\n' "$*" >&2; }
die() { printf '[client-image] ERROR: %s\n' "$*" >&2; exit 1; }

install_clients() {
    local missing=() p
    for p in curl git python3 nodejs busybox-static; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return
    log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# copy_elf ROOT FILE...: each file and every library it loads, at the same paths.
copy_elf() {
    local root=$1 f lib
    shift
    for f in "$@"; do
        install -D -m 0755 "$f" "$root$f"
        for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*' || true); do
            [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
        done
    done
}

build_rootfs_tar() (
    local out=$1 root a py
    umask 022
    root=$(mktemp -d)
    trap 'rm -rf "$root"' EXIT
    mkdir -p "$root"/{bin,etc,home,root,tmp,proc,sys,dev,usr/bin}
    chmod 755 "$root"; chmod 700 "$root/root"; chmod 1777 "$root/tmp"
    cp /bin/busybox "$root/bin/busybox"
    for a in $(/bin/busybox --list); do
        [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
    done
    py=$(readlink -f /usr/bin/python3)
    copy_elf "$root" /usr/bin/curl /usr/bin/node "$py" /usr/bin/git \
        /usr/lib/git-core/git-remote-http
    ln -sf "$(basename "$py")" "$root/usr/bin/python3"
    ln -sf git-remote-http "$root/usr/lib/git-core/git-remote-https"   # git over TLS
    # Python's standard library, as the interpreter looks for it (prefix /usr).
    local lib=/usr/lib/$(basename "$py")
    mkdir -p "$root$lib"
    tar -C "$lib" --exclude=test --exclude=idlelib --exclude=tkinter --exclude=lib2to3 \
        --exclude='config-*' --exclude=ensurepip --exclude=__pycache__ --exclude=pydoc_data \
        --exclude=site-packages --exclude=dist-packages -cf - . | tar -C "$root$lib" -xf -
    for a in "$root$lib"/lib-dynload/*.so; do
        copy_elf "$root" "${a#"$root"}" 2>/dev/null || true
    done
    # curl and git over https need the CA bundle; a member verifies its peers.
    [ -e /etc/ssl/certs/ca-certificates.crt ] &&
        install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$out" .
)

# import_image NAME CLI...: import unless the image carries the tarball's checksum.
import_image() {
    local name=$1; shift
    local have out
    have=$("$@" image inspect --format '{{ index .Config.Labels "ateam.clients.sha256" }}' "$IMAGE" 2>/dev/null || true)
    if [ "$have" = "$SUM" ]; then log "$name: $IMAGE up to date"; return; fi
    if ! out=$("$@" import --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/usr/bin:/bin' \
        --change "LABEL ateam.clients.sha256=$SUM" "$TAR" "$IMAGE" 2>&1); then
        printf '%s\n' "$out" >&2; die "$name: import of $IMAGE failed"
    fi
    log "$name: imported $IMAGE"
}

main() {
    local t0=$EPOCHREALTIME
    [ -r /run/ateam-ci/env ] || die "no /run/ateam-ci/env: run scripts/engines.sh first"
    # shellcheck disable=SC1091
    source /run/ateam-ci/env
    install_clients
    mkdir -p "$STATE"
    TAR=$STATE/ateam-clients.tar
    build_rootfs_tar "$TAR"
    chmod 644 "$TAR"
    SUM=$(sha256sum "$TAR" | cut -c1-64)
    import_image docker docker -H "$ATEAM_TEST_DOCKER"
    import_image podman podman
    local uid uhome
    uid=$(id -u "$ROOTLESS_USER")
    uhome=$(getent passwd "$ROOTLESS_USER" | cut -d: -f6)
    # As scripts/engines.sh runs the rootless user's podman (no logind here). The tarball
    # must be readable by that user.
    import_image podman-rootless setpriv --reuid="$ROOTLESS_USER" --regid="$ROOTLESS_USER" \
        --init-groups env -i -C "$uhome" HOME="$uhome" USER="$ROOTLESS_USER" \
        PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR="/run/ateam-ci/user-$uid" podman
    log "$IMAGE: $(du -h "$TAR" | cut -f1), $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }")s"
}

main "$@"
