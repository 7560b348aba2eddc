#!/usr/bin/env bash
# Builds the fixture images tests use (no image can be pulled on our machines):
#   svc-fixture-busybox:latest  FROM scratch + Debian's busybox-static, applets as symlinks in /bin.
# The build context fixtures/busybox/ gets its rootfs in .build/ (gitignored), so tests can also build
# the same image inside a sandbox's inner engine with `docker build fixtures/busybox`.
# Rebuilds only when the Dockerfile or the busybox binary changed (label svc.inputs).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export DOCKER_BUILDKIT=0
say() { printf '[setup] %s\n' "$*"; }

busybox_bin() {
    local b
    b=$(dpkg -L busybox-static 2> /dev/null | grep -E '/bin/busybox$' | head -n 1 || true)
    [ -n "$b" ] && [ -x "$b" ] || { say "fixture images: Debian's busybox-static is not installed (apt-get install busybox-static)"; exit 1; }
    echo "$b"
}

build_busybox() {
    local ctx=$ROOT/fixtures/busybox image=svc-fixture-busybox:latest bin want have rootfs
    bin=$(busybox_bin)
    rootfs=$ctx/.build/rootfs
    want=$({ sha256sum < "$ctx/Dockerfile"; sha256sum < "$bin"; } | sha256sum | cut -c1-16)

    # The context first: tests use it even when the image exists.
    if [ "$(cat "$ctx/.build/inputs" 2> /dev/null)" != "$want" ]; then
        rm -rf "$ctx/.build"
        mkdir -p "$rootfs/bin" "$rootfs/etc" "$rootfs/root" "$rootfs/tmp" "$rootfs/var/www"
        chmod 1777 "$rootfs/tmp"
        cp "$bin" "$rootfs/bin/busybox"
        local applet
        for applet in $("$bin" --list); do
            [ "$applet" = busybox ] || ln -s busybox "$rootfs/bin/$applet"
        done
        printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$rootfs/etc/passwd"
        printf 'root:x:0:\nnogroup:x:65534:\n' > "$rootfs/etc/group"
        echo "$want" > "$ctx/.build/inputs"
    fi

    have=$(docker image inspect -f '{{ index .Config.Labels "svc.inputs" }}' "$image" 2> /dev/null || true)
    if [ "$have" = "$want" ]; then
        say "fixture images: $image up to date"
        return 0
    fi
    local log
    log=$(mktemp)
    if ! docker build --label "svc.inputs=$want" -t "$image" "$ctx" > "$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        say "fixture images: docker build of $image failed"
        exit 1
    fi
    rm -f "$log"
    docker image prune -f --filter "label=svc.inputs=$have" > /dev/null 2>&1 || true
    say "fixture images: built $image"
}

# A context holding one dynamically linked program and the libraries it loads (ldd), for FROM scratch.
build_redis() {
    local ctx=$ROOT/fixtures/redis image=svc-fixture-redis:latest bin=/usr/bin/redis-server want have rootfs lib log
    [ -x "$bin" ] || { say "fixture images: $bin is missing (apt-get install redis-server)"; exit 1; }
    rootfs=$ctx/.build/rootfs
    want=$({ sha256sum < "$ctx/Dockerfile"; sha256sum < "$bin"; } | sha256sum | cut -c1-16)
    if [ "$(cat "$ctx/.build/inputs" 2> /dev/null)" != "$want" ]; then
        rm -rf "$ctx/.build"
        mkdir -p "$rootfs/usr/bin" "$rootfs/tmp" "$rootfs/data"
        chmod 1777 "$rootfs/tmp"
        cp "$bin" "$rootfs/usr/bin/redis-server"
        for lib in $(ldd "$bin" | grep -oE '/[^ ]+\.so[^ ]*'); do
            mkdir -p "$rootfs$(dirname "$lib")"
            cp -L "$lib" "$rootfs$lib"
        done
        echo "$want" > "$ctx/.build/inputs"
    fi
    have=$(docker image inspect -f '{{ index .Config.Labels "svc.inputs" }}' "$image" 2> /dev/null || true)
    if [ "$have" = "$want" ]; then
        say "fixture images: $image up to date"
        return 0
    fi
    log=$(mktemp)
    if ! docker build --label "svc.inputs=$want" -t "$image" "$ctx" > "$log" 2>&1; then
        cat "$log" >&2; rm -f "$log"
        say "fixture images: docker build of $image failed"
        exit 1
    fi
    rm -f "$log"
    say "fixture images: built $image"
}

build_busybox
build_redis
