#!/usr/bin/env bash
# Build the member images with real coding agents, locally, from no image registry:
#   ateam-claude:<CLAUDE_VERSION>  Claude Code (its native linux-x64 build, from the npm registry)
#   ateam-codex:<CODEX_VERSION>    Codex CLI (its static linux-x64 musl build, from the npm registry)
#   ateam-toolchain:bookworm       no agent: a developer's tools from Debian 12's packages (git,
#                                  Python with pytest, Node.js, make, gcc, ripgrep), made with
#                                  mmdebstrap; ateam brings the agent into it (docs/agents.md)
# and import each into Docker, rootful Podman and rootless Podman (user ateamci), as
# scripts/engines.sh does for the demo image.
#
# Root filesystem: Debian's static busybox (applets as /bin/*), the host's bash with the glibc
# libraries it and the agent need (the host is Debian; `ldd` says which), glibc's C.UTF-8
# locale, the host's CA bundle, a minimal /etc, and the agent's files from its npm tarball.
# No npm install, no postinstall script runs: the tarballs are unpacked, nothing more.
#
# Cached: the npm tarballs and each image's rootfs tarball live under $CACHE (keyed by the
# versions and this script's checksum; the toolchain's by the code and packages that make it); an engine that already has an image with the same key
# (label ateam.agent.key) is left alone. A second run takes a few seconds.
#
# Usage: scripts/agent-images.sh [all|claude|codex|toolchain]   (needs the engines: scripts/engines.sh)
#        scripts/agent-images.sh rootfs claude|codex|toolchain OUT   only write the rootfs tarball
# Env:   ATEAM_AGENT_CACHE (default /var/cache/ateam-ci/agents), ATEAM_AGENT_ENGINES
#        (default "docker podman podman-rootless"), CLAUDE_VERSION, CODEX_VERSION,
#        DEBIAN_MIRROR (default http://deb.debian.org/debian; its -security beside it).
set -euo pipefail

CLAUDE_VERSION=${CLAUDE_VERSION:-2.1.332}
CODEX_VERSION=${CODEX_VERSION:-0.171.0}
TOOLCHAIN_SUITE=bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The toolchain: what a developer's shell has, for Python, Node.js and C projects. npm is left
# out: Debian's pulls in 24,000 files of node modules (+105 MB) for a package manager that has
# no registry to reach from a member.
TOOLCHAIN_PACKAGES=git,python3,python3-pytest,nodejs,make,gcc,libc6-dev,ripgrep,patch,bash,ca-certificates,coreutils,procps
CACHE=${ATEAM_AGENT_CACHE:-/var/cache/ateam-ci/agents}
ENGINES=${ATEAM_AGENT_ENGINES:-docker podman podman-rootless}
RUN=/run/ateam-ci
ROOTLESS_USER=ateamci
SELF_SUM=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)

log() { printf '[agent-images] %s\n' "$*" >&2; }
die() { printf '[agent-images] ERROR: %s\n' "$*" >&2; exit 1; }

# The pinned tarballs' SHA-256, checked before each build (npm checks the registry's own integrity
# hash when it fetches; this also holds the cache to what was reviewed). Another version is
# taken on npm's check alone, with a warning.
declare -A SHA256=(
    [anthropic-ai-claude-code-linux-x64-2.1.332.tgz]=1c89f2f1e0bee93742cff8de9181fc07c702ce0651f1492bb3b97487d3a84af1
    [openai-codex-0.171.0-linux-x64.tgz]=e13d67afb0533cc6160b5f4140e4ad07e2acd87adbaa081bbf69b82e90cf4e55
)

# fetch SPEC FILE: `npm pack` SPEC into $CACHE/npm unless FILE is there, then check it.
fetch() {
    local spec=$1 file=$2 want have
    if [ ! -s "$CACHE/npm/$file" ]; then
        log "npm pack $spec"
        mkdir -p "$CACHE/npm"
        (cd "$CACHE/npm" && npm pack --silent "$spec" >/dev/null)
        [ -s "$CACHE/npm/$file" ] || die "npm pack $spec did not write $file"
    fi
    want=${SHA256[$file]:-}
    if [ -z "$want" ]; then log "warning: no pinned checksum for $file"; return; fi
    have=$(sha256sum "$CACHE/npm/$file" | cut -c1-64)
    [ "$have" = "$want" ] || die "$CACHE/npm/$file: sha256 $have, expected $want (remove it to fetch again)"
}

# copy_with_libs ROOT BIN...: each binary and the shared libraries `ldd` names, same paths.
copy_with_libs() {
    local root=$1 f lib; shift
    for f in "$@"; do
        install -D -m 0755 "$f" "$root$f"
        for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*' || true); do
            [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
        done
    done
}

# base_rootfs ROOT: busybox, bash, glibc, CA bundle, /etc for root and nobody.
base_rootfs() {
    local root=$1 a
    if [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
        die "/bin/busybox is missing or not static (apt-get install busybox-static)"
    fi
    mkdir -p "$root"/{bin,etc/ssl/certs,home,root,tmp,proc,sys,dev,usr/local/bin,lib64}
    chmod 755 "$root"; chmod 700 "$root/root"; chmod 1777 "$root/tmp"
    cp /bin/busybox "$root/bin/busybox"
    for a in $(/bin/busybox --list); do
        [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
    done
    ln -s bin "$root/sbin"; ln -s ../bin "$root/usr/bin"; ln -s ../bin "$root/usr/sbin"
    rm -f "$root/bin/bash"
    copy_with_libs "$root" /bin/bash
    # The glibc pieces Claude Code's build links (librt, libpthread, libdl, libm): named here,
    # not found by ldd on a binary, so the base is the same for both images.
    local l
    for l in libc.so.6 libm.so.6 librt.so.1 libpthread.so.0 libdl.so.2; do
        install -D -m 0755 "$(readlink -f "/lib/x86_64-linux-gnu/$l")" "$root/lib/x86_64-linux-gnu/$l"
    done
    install -D -m 0755 "$(readlink -f /lib64/ld-linux-x86-64.so.2)" "$root/lib64/ld-linux-x86-64.so.2"
    install -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    # glibc's C.UTF-8 (Debian's libc-bin): Codex runs its shell tool with LC_ALL=C.UTF-8, and
    # bash warns at every command without it.
    if [ -d /usr/lib/locale/C.utf8 ]; then
        mkdir -p "$root/usr/lib/locale"; cp -r /usr/lib/locale/C.utf8 "$root/usr/lib/locale/"
    fi
    # /bin/bash is the login shell: Codex runs its shell tool with the user's shell.
    printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/home/agent:/bin/bash\n' \
        >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
}

# agent_files AGENT ROOT: the agent's own files from its npm tarball.
agent_files() {
    local agent=$1 root=$2 tmp
    tmp=$(mktemp -d)
    case $agent in
        claude)
            fetch "@anthropic-ai/claude-code-linux-x64@$CLAUDE_VERSION" \
                "anthropic-ai-claude-code-linux-x64-$CLAUDE_VERSION.tgz"
            tar -xzf "$CACHE/npm/anthropic-ai-claude-code-linux-x64-$CLAUDE_VERSION.tgz" -C "$tmp" package/claude
            install -m 0755 "$tmp/package/claude" "$root/usr/local/bin/claude"
            ;;
        codex)
            fetch "@openai/codex@$CODEX_VERSION-linux-x64" "openai-codex-$CODEX_VERSION-linux-x64.tgz"
            local v=package/vendor/x86_64-unknown-linux-musl
            # codex-code-mode-host: the interactive UI runs its tools through it ("code mode").
            tar -xzf "$CACHE/npm/openai-codex-$CODEX_VERSION-linux-x64.tgz" -C "$tmp" "$v/bin/codex" \
                "$v/bin/codex-code-mode-host" "$v/codex-path/rg"
            install -m 0755 "$tmp/$v/bin/codex" "$root/usr/local/bin/codex"
            install -m 0755 "$tmp/$v/bin/codex-code-mode-host" "$root/usr/local/bin/codex-code-mode-host"
            install -m 0755 "$tmp/$v/codex-path/rg" "$root/usr/local/bin/rg"
            ;;
        *) die "unknown agent $agent (claude or codex)" ;;
    esac
    rm -rf "$tmp"
}

# rootfs_tar AGENT OUT: a reproducible tarball (fixed owners, times, order).
rootfs_tar() (
    local agent=$1 out=$2 root
    umask 022
    root=$(mktemp -d)
    trap 'rm -rf "$root"' EXIT
    base_rootfs "$root"
    agent_files "$agent" "$root"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$out.part" .
    mv "$out.part" "$out"
)

# toolchain_tar OUT: Debian's packages, installed by mmdebstrap from the Debian mirror (no image
# registry), without manuals, translations and docs (copyright files kept); the users members
# run as, with bash and /home/agent; git trusting any repository owner (a member's uid need not
# own its grants). As root (mmdebstrap's root mode).
toolchain_tar() (
    local out=$1 root
    umask 022
    [ "$(id -u)" = 0 ] || die "the toolchain image is built as root (mmdebstrap)"
    if ! command -v mmdebstrap >/dev/null; then
        log "apt-get install mmdebstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null; }
    fi
    root=$(mktemp -d)
    trap 'rm -rf "$root"' EXIT
    local -a trim=()
    local p
    for p in 'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' \
        'path-exclude=/usr/share/locale/*' 'path-include=/usr/share/locale/locale.alias' \
        'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright'; do
        trim+=(--dpkgopt="$p")
    done
    mmdebstrap --quiet --mode=root --format=directory --variant=essential \
        --include="$TOOLCHAIN_PACKAGES" "${trim[@]}" "$TOOLCHAIN_SUITE" "$root" \
        "deb $DEBIAN_MIRROR $TOOLCHAIN_SUITE main" \
        "deb $DEBIAN_MIRROR $TOOLCHAIN_SUITE-updates main" \
        "deb ${DEBIAN_MIRROR%/debian}/debian-security $TOOLCHAIN_SUITE-security main" ||
        die "mmdebstrap failed"
    # The engine gives each container its own; these are the build machine's.
    rm -f "$root/etc/resolv.conf" "$root/etc/hostname"
    # Members run as a non-root uid with HOME=/home/agent (a tmpfs): nobody (a root apply's
    # default) and agent (1000, the usual first user) have that home and bash, which Codex
    # runs its shell tool with; other uids have no name, and get HOME from the environment.
    sed -i 's#^nobody:\([^:]*\):65534:65534:\([^:]*\):[^:]*:[^:]*$#nobody:\1:65534:65534:\2:/home/agent:/bin/bash#' \
        "$root/etc/passwd"
    grep -q '^agent:' "$root/etc/passwd" || echo 'agent:x:1000:1000:agent:/home/agent:/bin/bash' >>"$root/etc/passwd"
    grep -q '^agent:' "$root/etc/group" || echo 'agent:x:1000:' >>"$root/etc/group"
    install -d -m 0755 "$root/home/agent"
    printf '[safe]\n\tdirectory = *\n' >"$root/etc/gitconfig"
    tar --sort=name --numeric-owner --exclude='./dev/*' -C "$root" -cf "$out.part" .
    mv "$out.part" "$out"
)

version_of() {
    case $1 in claude) echo "$CLAUDE_VERSION" ;; codex) echo "$CODEX_VERSION" ;; toolchain) echo "$TOOLCHAIN_SUITE" ;; esac
}

ROOTLESS_UID=
as_user() {
    local home; home=$(getent passwd "$ROOTLESS_USER" | cut -d: -f6)
    setpriv --reuid="$ROOTLESS_USER" --regid="$ROOTLESS_USER" --init-groups \
        env -i -C "$home" HOME="$home" USER="$ROOTLESS_USER" LOGNAME="$ROOTLESS_USER" \
        PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR="$RUN/user-$ROOTLESS_UID" "$@"
}

# engine_cli ENGINE: the CLI of that engine, in CLI[].
engine_cli() {
    case $1 in
        docker) CLI=(docker -H "unix://$RUN/docker.sock") ;;
        podman) CLI=(podman --url "unix://$RUN/podman.sock") ;;
        podman-rootless) CLI=(as_user podman) ;;
        *) die "unknown engine $1" ;;
    esac
}

# has_image ENGINE IMAGE KEY: whether ENGINE has IMAGE labelled with KEY.
has_image() {
    local have
    engine_cli "$1"
    have=$("${CLI[@]}" image inspect --format '{{ index .Config.Labels "ateam.agent.key" }}' "$2" 2>/dev/null || true)
    [ "$have" = "$3" ]
}

# import_into ENGINE IMAGE KEY TAR
import_into() {
    local engine=$1 image=$2 key=$3 tar=$4 out t0=$SECONDS
    local -a changes=(--change 'ENV PATH=/usr/local/bin:/bin' --change 'CMD ["/bin/sh"]')
    case $image in
        ateam-toolchain:*)
            changes=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
                --change 'ENV SHELL=/bin/bash' --change 'ENV LANG=C.UTF-8'
                --change 'ENV PYTHONDONTWRITEBYTECODE=1' --change 'CMD ["/bin/bash"]') ;;
    esac
    engine_cli "$engine"
    if ! out=$("${CLI[@]}" import "${changes[@]}" \
        --change 'ENV HOME=/home/agent' --change "LABEL ateam.agent.key=$key" \
        "$tar" "$image" 2>&1); then
        printf '%s\n' "$out" >&2; die "$engine: import of $image failed"
    fi
    log "$engine: imported $image in $((SECONDS - t0)) s"
}

# build AGENT: its image in every engine that lacks this key; the rootfs only if one does.
build() {
    local agent=$1 ver image key tar e t0=$SECONDS
    local -a need=()
    ver=$(version_of "$agent")
    image="ateam-$agent:$ver"
    key="$agent-$ver-$SELF_SUM"
    # The toolchain's key: what makes it (not the rest of this script), so that an edit of the
    # agents' part does not rebuild it.
    if [ "$agent" = toolchain ]; then
        key="$agent-$ver-$({ declare -f toolchain_tar import_into
            echo "$TOOLCHAIN_PACKAGES $DEBIAN_MIRROR"; } | sha256sum | cut -c1-12)"
    fi
    tar="$CACHE/rootfs/$key.tar"
    for e in $ENGINES; do has_image "$e" "$image" "$key" || need+=("$e"); done
    if [ ${#need[@]} -eq 0 ]; then log "$image up to date in $ENGINES"; return; fi
    if [ ! -s "$tar" ]; then
        mkdir -p "$CACHE/rootfs"
        log "building the rootfs of $image"
        case $agent in
            toolchain) toolchain_tar "$tar" ;;
            *) rootfs_tar "$agent" "$tar" ;;
        esac
        chmod 0644 "$tar"
        # Older keys of this agent (another version, an older script) are not needed again.
        find "$CACHE/rootfs" -maxdepth 1 -name "$agent-*.tar" ! -name "$key.tar" -delete
    fi
    for e in "${need[@]}"; do import_into "$e" "$image" "$key" "$tar"; done
    log "$image ready in $((SECONDS - t0)) s ($(du -m "$tar" | cut -f1) MB rootfs)"
}

main() {
    case ${1:-all} in
        rootfs)
            [ $# -eq 3 ] || die "usage: $0 rootfs claude|codex|toolchain OUT"
            if [ "$2" = toolchain ]; then toolchain_tar "$3"; else rootfs_tar "$2" "$3"; fi
            return ;;
        all) set -- claude codex toolchain ;;
        claude | codex | toolchain) ;;
        *) die "usage: $0 [all|claude|codex|toolchain] | rootfs claude|codex|toolchain OUT" ;;
    esac
    ROOTLESS_UID=$(id -u "$ROOTLESS_USER" 2>/dev/null || true)
    case " $ENGINES " in
        *" podman-rootless "*) [ -n "$ROOTLESS_UID" ] || die "no user $ROOTLESS_USER: run scripts/engines.sh" ;;
    esac
    # The rootless user reads the tarballs from the cache.
    mkdir -p "$CACHE"; chmod 0755 "$CACHE"
    local a
    for a in "$@"; do build "$a"; done
}

main "$@"
