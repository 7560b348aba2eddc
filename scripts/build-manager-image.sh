#!/usr/bin/env bash
# Builds svc-manager:latest, the management tool's image (manager/), when its inputs changed.
#
# No image can be pulled on our machines, so the image is made FROM scratch: the tool bundled into
# one file by esbuild, this machine's node binary, the compose v2 CLI plugin (it runs on its own as
# docker-compose), and the shared libraries the two need (from ldd). `docker import` turns that tree
# into the image. The service loads it into a manager sandbox's own engine (docker save | load).
#
# The image carries svc.tool=manager (containers inherit it: that is how the service recognises the
# tool in any compose project) and svc.inputs=<hash of the bundle, the binaries and this script>; a
# rebuild happens only when that hash changes. Usage: build-manager-image.sh [--force]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE=${SVC_MANAGER_IMAGE:-svc-manager:latest}
COMPOSE=${SVC_COMPOSE_PLUGIN:-/usr/libexec/docker/cli-plugins/docker-compose}
NODE=$(readlink -f "$(command -v node)")

say() { printf '[setup] %s\n' "$*"; }

force=0
for a in "$@"; do
    case $a in
        --force) force=1 ;;
        *) echo "usage: $0 [--force]" >&2; exit 2 ;;
    esac
done
[ -x "$COMPOSE" ] || { say "manager image: no compose v2 plugin at $COMPOSE (setup installs it first)"; exit 1; }

work=$(mktemp -d /tmp/svc-manager-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$ROOT/node_modules/.bin/esbuild" "$ROOT/manager/main.ts" --bundle --platform=node --target=node20 --format=cjs \
    --log-level=warning --outfile="$work/manager.cjs"

want=$({ sha256sum < "$work/manager.cjs"; sha256sum < "$NODE"; sha256sum < "$COMPOSE"; sha256sum < "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16)
have=$(docker image inspect -f '{{ index .Config.Labels "svc.inputs" }}' "$IMAGE" 2> /dev/null || true)
if [ "$force" = 0 ] && [ "$have" = "$want" ]; then
    say "manager image: $IMAGE up to date (inputs $want)"
    exit 0
fi

rootfs=$work/rootfs
mkdir -p "$rootfs/app" "$rootfs/usr/local/bin" "$rootfs/tmp" "$rootfs/data" "$rootfs/etc"
chmod 1777 "$rootfs/tmp"
cp "$work/manager.cjs" "$rootfs/app/manager.cjs"
cp "$NODE" "$rootfs/usr/local/bin/node"
cp "$COMPOSE" "$rootfs/usr/local/bin/docker-compose"
# the loader and every library the two binaries link, at the paths ldd names
for lib in $(ldd "$NODE" "$COMPOSE" | grep -o '/[^ ]*\.so[^ ]*' | sort -u); do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
done
printf 'root:x:0:0:root:/tmp:/sbin/nologin\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\n' > "$rootfs/etc/group"

tar -C "$rootfs" --numeric-owner --owner=0 --group=0 -c . | docker import \
    --change 'ENTRYPOINT ["/usr/local/bin/node", "/app/manager.cjs"]' \
    --change 'ENV PATH=/usr/local/bin HOME=/tmp MANAGER_DATA_DIR=/data MANAGER_PORT=9000 MANAGER_COMPOSE_BIN=/usr/local/bin/docker-compose' \
    --change 'EXPOSE 9000' \
    --change 'LABEL svc.tool=manager' \
    --change "LABEL svc.inputs=$want" \
    - "$IMAGE" > /dev/null
# the image it replaces, now untagged
docker image prune -f --filter label=svc.tool=manager > /dev/null 2>&1 || true
say "manager image: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{ printf "%d MB", $1 / 1e6 }'), inputs $want)"
