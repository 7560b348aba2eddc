#!/usr/bin/env bash
# Runner hosts on this machine, for tests, benches and CI (issue 20, docs/scale-out.md):
#
#   scripts/test-hosts.sh up N     hosts test-1 … test-N, each in a network namespace svch<i> with its own
#                                  sandbox engine (scripts/sandbox-engine.sh: own data root, exec root,
#                                  pidfile, bridge, address pool, userns-remap, cgroup parent, egress rules),
#                                  its engine reachable only over mutual TLS on 10.216.<i>.2:2376, and
#                                  registered with the service the environment names (SVC_DATA_DIR,
#                                  SVC_STORE_URL, SVC_SECRET_KEY_FILE, SVC_DOMAIN: as npm start reads them)
#                                  through `svc hosts add`. Idempotent: a host that runs is left as it is.
#   scripts/test-hosts.sh down     stops every such host and removes what `up` made: engines (their
#                                  sandboxes), network namespaces, veths, routes, iptables rules, data
#                                  roots, logs. It keeps only the image cache (below). Its registrations go
#                                  with the service's store (a test drops it; `svc hosts remove` otherwise).
#
# Network: host i is joined to this machine by a veth pair, svch<i> (here, 10.216.<i>.1/24) and svch<i>-n
# (in the namespace, 10.216.<i>.2/24); its sandboxes take addresses from 10.<216+i>.0.0/16, routed through
# it, so the service's edge reaches them as it reaches its own. Sandboxes of a test host reach the
# internet, not this machine (the service's Redis, PostgreSQL, API), nor another host or its sandboxes.
#
# Images: SVC_TEST_HOSTS_IMAGES (the sandbox image; the management tool's comes from the service's engine) are copied from
# this machine's sandbox engine (docker save | docker load), through a cache of saved images by id in
# /var/cache/svc-test-hosts: a second `up` loads from the cache; a host that has the image is skipped.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NET=10.216
CACHE=/var/cache/svc-test-hosts
STATE=/run/svc-test-hosts
LOCAL_ENGINE=${SVC_SANDBOX_DOCKER_HOST:-unix:///run/svc-sandbox-docker.sock}
IMAGES=${SVC_TEST_HOSTS_IMAGES:-${SVC_SANDBOX_IMAGE:-svc-sandbox:latest}}

say() { printf '[test-hosts] %s\n' "$*"; }
ipt() { iptables -w 5 "$@"; }

engine_of() { echo "unix:///run/svc-host-$1.sock"; }

# This machine's side: the rules that keep test hosts' sandboxes off it and off each other. Hosts' own
# engine replies come back on connections this machine opened (established); nothing else gets in.
machine_rules() {
    local c
    for c in SVC-HOSTS-IN SVC-HOSTS-FWD; do ipt -N "$c" 2> /dev/null || ipt -F "$c"; done
    ipt -A SVC-HOSTS-IN -i 'svch+' -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
    ipt -A SVC-HOSTS-IN -i 'svch+' -j DROP
    ipt -A SVC-HOSTS-FWD -o 'svch+' -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
    ipt -A SVC-HOSTS-FWD -i 'svch+' -o 'svch+' -j DROP
    ipt -A SVC-HOSTS-FWD -i 'svch+' -d 169.254.0.0/16 -j DROP
    for c in docker0 'br-+' 'svcb+'; do ipt -A SVC-HOSTS-FWD -i 'svch+' -o "$c" -j DROP; done
    ipt -A SVC-HOSTS-FWD -i 'svch+' -j ACCEPT
    ipt -A SVC-HOSTS-FWD -o 'svch+' -j DROP
    ipt -C INPUT -j SVC-HOSTS-IN 2> /dev/null || ipt -I INPUT 1 -j SVC-HOSTS-IN
    for c in FORWARD DOCKER-USER; do
        ipt -L "$c" -n > /dev/null 2>&1 || continue
        ipt -C "$c" -j SVC-HOSTS-FWD 2> /dev/null || ipt -I "$c" 1 -j SVC-HOSTS-FWD
    done
    ipt -t nat -C POSTROUTING -s "$NET.0.0/16" ! -o 'svch+' -j MASQUERADE 2> /dev/null \
        || ipt -t nat -A POSTROUTING -s "$NET.0.0/16" ! -o 'svch+' -j MASQUERADE
    sysctl -qw net.ipv4.ip_forward=1
}

link_up() {
    local i=$1 ns=svch$1
    [ -e "/run/netns/$ns" ] || ip netns add "$ns"
    if ! ip link show "$ns" > /dev/null 2>&1; then
        ip link add "$ns" type veth peer name "$ns-n" netns "$ns"
        ip addr add "$NET.$i.1/24" dev "$ns"
        ip link set "$ns" up
        ip -n "$ns" addr add "$NET.$i.2/24" dev "$ns-n"
        ip -n "$ns" link set lo up
        ip -n "$ns" link set "$ns-n" up
        ip -n "$ns" route add default via "$NET.$i.1"
    fi
    ip route replace "10.$((216 + i)).0.0/16" via "$NET.$i.2" dev "$ns"
}

# The host's engine certificate: its key made here, signed by the service CA through `svc hosts add`.
register() {
    local i=$1 tls=$STATE/svch$1/tls
    mkdir -p "$tls" && chmod 700 "$STATE/svch$i" "$tls"
    [ -f "$tls/key.pem" ] || openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$tls/key.pem" -subj "/CN=test-$i" -out "$tls/request.csr" 2> /dev/null
    local ca; ca=$(cat "$tls/ca.pem" 2> /dev/null || true)
    "$ROOT/node_modules/.bin/tsx" "$ROOT/operator/svc.ts" hosts add "test-$i" "$NET.$i.2" --pool "10.$((216 + i)).0.0/16" --same-machine --networks 4096 \
        --csr "$tls/request.csr" --certs-out "$tls" > /dev/null
    # another service's CA (a host a killed test left up): its engine read the old one at its start
    [ -z "$ca" ] || [ "$ca" = "$(cat "$tls/ca.pem")" ] || engine_stop "$i"
}

# nsenter, not `ip netns exec`: that one mounts a sysfs of its own, which leaves the engine without the
# machine's cgroup mounts; the engine runs in this machine's mount namespace, in the host's network.
engine_up() {
    local i=$1
    nsenter --net="/run/netns/svch$i" env SVC_ENGINE_NAME="svc-host-$i" SVC_SANDBOX_ADDRESS_POOL="10.$((216 + i)).0.0/16" SVC_SANDBOX_NETWORK_SIZE=28 \
        SVC_ENGINE_CGROUP_PARENT="/svc-host-$i" SVC_ENGINE_TLS_DIR="$STATE/svch$i/tls" SVC_ENGINE_LISTEN_ADDRESS="$NET.$i.2" \
        SVC_ENGINE_SERVICE_ADDRESS="$NET.$i.1" SVC_ENGINE_PRIVATE_NETWORK="$NET.0.0/16" \
        bash "$ROOT/scripts/sandbox-engine.sh" | sed "s/^\[setup\] sandbox engine/[test-hosts] test-$i engine/"
}

# The host duties (scripts/host-duties.sh), as a runner runs them: its own session, so `down` ends it whole.
duties_up() {
    local i=$1 pidfile=/run/svc-host-$1.duties.pid
    [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2> /dev/null && return 0
    setsid nsenter --net="/run/netns/svch$i" bash "$ROOT/scripts/host-duties.sh" "/run/svc-host-$i.sock" < /dev/null > /dev/null 2>&1 &
    echo $! > "$pidfile"
}

images_up() {
    local i=$1 image id
    mkdir -p "$CACHE"
    for image in $IMAGES; do
        id=$(docker -H "$LOCAL_ENGINE" image inspect --format '{{.Id}}' "$image" 2> /dev/null) || continue
        [ "$(docker -H "$(engine_of "$i")" image inspect --format '{{.Id}}' "$image" 2> /dev/null)" != "$id" ] || continue
        if [ ! -f "$CACHE/${id#sha256:}.tar" ]; then
            docker -H "$LOCAL_ENGINE" save "$image" > "$CACHE/.saving.$$" && mv "$CACHE/.saving.$$" "$CACHE/${id#sha256:}.tar"
        fi
        docker -H "$(engine_of "$i")" load -q -i "$CACHE/${id#sha256:}.tar" > /dev/null
        docker -H "$(engine_of "$i")" tag "$id" "$image"
        say "test-$i: $image loaded"
    done
}

# Only the images this machine's engine holds now stay cached.
prune_cache() {
    local tar image keep=" "
    for image in $IMAGES; do keep+="$(docker -H "$LOCAL_ENGINE" image inspect --format '{{.Id}}' "$image" 2> /dev/null | sed 's/^sha256://') "; done
    for tar in "$CACHE"/*.tar; do
        [ -e "$tar" ] || continue
        [[ $keep == *" $(basename "$tar" .tar) "* ]] || rm -f "$tar"
    done
}

up() {
    local n=$1 i
    [[ $n =~ ^[1-9][0-9]?$ ]] && [ "$n" -le 30 ] || { echo "up needs a number of hosts from 1 to 30" >&2; exit 2; }
    mkdir -p "$STATE" && chmod 700 "$STATE"
    machine_rules
    for i in $(seq 1 "$n"); do
        link_up "$i"
        register "$i"
        engine_up "$i"
        duties_up "$i"
        images_up "$i"
    done
    prune_cache
}

engine_stop() {
    local pid
    if [ -f "/run/svc-host-$1.pid" ] && pid=$(cat "/run/svc-host-$1.pid") && kill -0 "$pid" 2> /dev/null; then
        kill "$pid"
        for _ in $(seq 1 300); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2> /dev/null; then kill -9 "$pid"; fi
    fi
}

engine_down() {
    local i=$1 pidfile=/run/svc-host-$1.pid
    if [ -f "/run/svc-host-$i.duties.pid" ]; then
        kill -- "-$(cat "/run/svc-host-$i.duties.pid")" 2> /dev/null || true
        rm -f "/run/svc-host-$i.duties.pid"
    fi
    engine_stop "$i"
    # mounts a killed engine left (its containers' root file systems, its netns files); host i's
    # alone (svc-host-1 is a prefix of svc-host-10's paths, whose engine may still run)
    { grep -oE " /(var/lib|run)/svc-host-$i(/[^ ]*)? " /proc/mounts | sed 's/ $//' || true; } | sort -r | while read -r m; do umount -l "$m" || true; done
    rm -rf "/var/lib/svc-host-$i" "/run/svc-host-$i" "/run/svc-host-$i.sock" "$pidfile" "/run/svc-host-$i.docker0" "/var/log/svc-host-$i.log"
}

down() {
    local ns i
    for ns in $(ls /run/netns 2> /dev/null | grep -E '^svch[0-9]+$' || true); do
        i=${ns#svch}
        engine_down "$i"
        ip route del "10.$((216 + i)).0.0/16" 2> /dev/null || true
        ip link del "$ns" 2> /dev/null || true
        ip netns del "$ns"
        say "test-$i: down"
    done
    for i in $(ls -d /var/lib/svc-host-* 2> /dev/null | sed 's/.*svc-host-//'); do engine_down "$i"; done
    for c in INPUT:SVC-HOSTS-IN FORWARD:SVC-HOSTS-FWD DOCKER-USER:SVC-HOSTS-FWD; do
        while ipt -D "${c%%:*}" -j "${c#*:}" 2> /dev/null; do :; done
    done
    for c in SVC-HOSTS-IN SVC-HOSTS-FWD; do ipt -F "$c" 2> /dev/null && ipt -X "$c"; done
    while ipt -t nat -D POSTROUTING -s "$NET.0.0/16" ! -o 'svch+' -j MASQUERADE 2> /dev/null; do :; done
    rm -rf "$STATE"
}

case ${1:-} in
    up) up "${2:-}" ;;
    down) down ;;
    *) echo "usage: scripts/test-hosts.sh up N | down" >&2; exit 2 ;;
esac
