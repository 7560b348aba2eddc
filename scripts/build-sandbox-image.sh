#!/usr/bin/env bash
# Builds svc-sandbox:latest from sandbox-image/ when its inputs changed (or it is missing).
#
# No base image can be pulled on our machines, so the base is a Debian rootfs made with debootstrap
# (packages from sandbox-image/packages-<suite>.txt, security updates applied) and imported as
# svc-sandbox-base:<hash>. The Dockerfile is then built on top of it with --build-arg BASE=...; on a
# machine that can pull, `docker build sandbox-image` gives the same image from debian:trixie.
#
# The image carries the label svc.inputs=<hash of the Dockerfile context + base recipe>; a rebuild
# happens only when that hash changes. Usage: build-sandbox-image.sh [--force] [--check] [--if-missing]
#   --check       exit 0 if the image is up to date, 1 if it would be built (builds nothing)
#   --if-missing  build only when the image does not exist (a frozen image: the legacy one below)
# SVC_SANDBOX_SUITE=bookworm SVC_SANDBOX_IMAGE=svc-sandbox:bookworm builds the image sandboxes had
# before Debian 13 (docker.io 20.10, no compose); the image migration test starts from it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE=${SVC_SANDBOX_IMAGE:-svc-sandbox:latest}
CACHE=${SVC_CACHE_DIR:-/var/cache/svc}
MIRROR=${SVC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${SVC_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
SUITE=${SVC_SANDBOX_SUITE:-trixie}
PACKAGES=packages-$SUITE.txt
[ -f "$ROOT/sandbox-image/$PACKAGES" ] || { echo "no package list sandbox-image/$PACKAGES for suite $SUITE" >&2; exit 2; }
export DOCKER_BUILDKIT=0 # the legacy builder: same behaviour with the host's docker 20.10

say() { printf '[setup] %s\n' "$*"; }
now() { echo "${EPOCHREALTIME/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

packages() { grep -v -e '^#' -e '^[[:space:]]*$' "$ROOT/sandbox-image/$PACKAGES"; }

# The rootfs recipe. Its hash (code of this function, with comments stripped by bash, plus the package
# list and mirrors) names the base image, so editing the recipe rebuilds the base and nothing else does.
build_rootfs() {
    local dir=$1
    local include
    include=$(packages | paste -sd, -)
    mkdir -p "$CACHE/debs"
    debootstrap --variant=minbase --components=main --cache-dir="$CACHE/debs" \
        --include="$include" "$SUITE" "$dir" "$MIRROR"
    rm -f "$dir/etc/apt/sources.list"
    cat > "$dir/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    printf '#!/bin/sh\nexit 101\n' > "$dir/usr/sbin/policy-rc.d"
    chmod +x "$dir/usr/sbin/policy-rc.d"
    unshare -m --propagation private sh -euc '
        mount -t proc proc "$1/proc"
        chroot "$1" apt-get update -q
        DEBIAN_FRONTEND=noninteractive chroot "$1" apt-get -y -q -o Dpkg::Options::=--force-confold upgrade
        chroot "$1" apt-get clean
    ' sh "$dir"
    rm -f "$dir/usr/sbin/policy-rc.d"
    # docs, and tools of docker.io that dockerd never runs (libnetwork test tools, v1 shims): about 70 MB
    cp "$ROOT/sandbox-image/dpkg-slim.cfg" "$dir/etc/dpkg/dpkg.cfg.d/01-svc-slim"
    rm -f "$dir"/usr/bin/dnet "$dir"/usr/sbin/ovrouter "$dir"/usr/bin/containerd-shim "$dir"/usr/bin/containerd-shim-runc-v1
    find "$dir/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/var/lib/apt/lists/* \
        "$dir"/var/cache/apt/* "$dir"/var/cache/debconf/*-old "$dir"/var/log/* "$dir"/etc/ssh/ssh_host_*
    find "$dir/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
    : > "$dir/etc/machine-id"
}

base_hash() {
    { declare -f build_rootfs; packages; cat "$ROOT/sandbox-image/dpkg-slim.cfg"; echo "$SUITE $MIRROR $SECURITY_MIRROR"; } | sha256sum | cut -c1-16
}

# Everything the Dockerfile sees, plus the base recipe.
inputs_hash() {
    (
        cd "$ROOT/sandbox-image"
        base_hash
        find . -type f -not -path './.build/*' | LC_ALL=C sort | xargs sha256sum
        stat -c '%a %n' entrypoint.sh
    ) | sha256sum | cut -c1-16
}

# true once process $1 has exited, false after $2 seconds
wait_exit() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        kill -0 "$1" 2> /dev/null || return 0
        sleep 0.1
    done
    return 1
}

# rm -rf that first lets go of mounts an interrupted debootstrap left inside (proc, sys)
remove_tree() {
    awk -v d="$1/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r | xargs -r umount -l
    rm -rf --one-file-system "$1"
}

image_label() { docker image inspect -f '{{ index .Config.Labels "svc.inputs" }}' "$1" 2>/dev/null || true; }

main() {
    local force=0 check=0 if_missing=0
    for a in "$@"; do
        case $a in
            --force) force=1 ;;
            --check) check=1 ;;
            --if-missing) if_missing=1 ;;
            *) echo "usage: $0 [--force] [--check] [--if-missing]" >&2; exit 2 ;;
        esac
    done
    if [ "$if_missing" = 1 ] && docker image inspect "$IMAGE" > /dev/null 2>&1; then
        say "sandbox image: $IMAGE present"
        return 0
    fi
    local want have
    want=$(inputs_hash)
    have=$(image_label "$IMAGE")
    if [ "$force" = 0 ] && [ "$have" = "$want" ]; then
        say "sandbox image: $IMAGE up to date (inputs $want)"
        return 0
    fi
    [ "$check" = 0 ] || return 1
    say "sandbox image: ${have:+stale (inputs $have), }building $IMAGE (inputs $want)"
    local t0 base bh
    t0=$(now)
    bh=$(base_hash)
    base=svc-sandbox-base:$bh
    if ! docker image inspect "$base" > /dev/null 2>&1; then
        local rootfs=$CACHE/rootfs-$bh
        remove_tree "$rootfs"
        mkdir -p "$CACHE"
        say "sandbox image: debootstrap $SUITE into $rootfs (takes a minute or more) ..."
        local t1 pid
        t1=$(now)
        # in the background so errexit stays in force inside build_rootfs; a progress line every 10 s
        build_rootfs "$rootfs" > "$CACHE/debootstrap.log" 2>&1 &
        pid=$!
        while ! wait_exit "$pid" 10; do
            say "  ... $(since "$t1"): $(grep -v '^[[:space:]]*$' "$CACHE/debootstrap.log" | tail -n 1 | cut -c1-100)"
        done
        wait "$pid" || { tail -n 20 "$CACHE/debootstrap.log" >&2; say "sandbox image: rootfs build failed, see $CACHE/debootstrap.log"; exit 1; }
        say "sandbox image: rootfs ready ($(du -sh "$rootfs" | cut -f1)) in $(since "$t1"); importing as $base ..."
        t1=$(now)
        tar -C "$rootfs" --numeric-owner -c . | docker import - "$base" > /dev/null
        remove_tree "$rootfs"
        say "sandbox image: imported in $(since "$t1")"
    fi
    local log=$CACHE/sandbox-image-build.log
    mkdir -p "$CACHE"
    if ! docker build --build-arg "BASE=$base" --build-arg "PACKAGES=$PACKAGES" --label "svc.inputs=$want" --label "svc.base=$base" \
        -t "$IMAGE" "$ROOT/sandbox-image" > "$log" 2>&1; then
        tail -n 30 "$log" >&2
        say "sandbox image: docker build failed, full log in $log"
        exit 1
    fi
    # drop old bases and the old, now untagged image so rebuilds do not pile up
    docker image ls --format '{{.Repository}}:{{.Tag}}' svc-sandbox-base | grep -vxF "$base" | xargs -r docker rmi > /dev/null 2>&1 || true
    docker image prune -f --filter "label=svc.base" > /dev/null 2>&1 || true
    say "sandbox image: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{ printf "%d MB", $1 / 1e6 }')) in $(since "$t0")"
}

main "$@"
