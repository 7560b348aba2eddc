#!/usr/bin/env bash
# An Incus cluster on this machine, for tests, benches and CI (issue 34, docs/incus.md): N members, each
# an `incusd` in a network and mount namespace of its own, joined on one bridge, as Incus's own cluster
# suite runs them (test/includes/clustering.sh in lxc/incus).
#
#   scripts/test-cluster.sh up N        members m1 … mN (m1 bootstraps, the others join with a token),
#                                       then every member online. Idempotent: a member that answers is
#                                       left as it is, one that was killed is brought back, missing ones
#                                       are added; `up` with a smaller N removes nothing.
#   scripts/test-cluster.sh down        stops every member and removes all that `up` made: their
#                                       containers, daemons, namespaces, veths, the bridge, the iptables
#                                       rules, cgroups left by LXC, the data folders.
#   scripts/test-cluster.sh env         the SVC_* lines that point a service at the cluster:
#                                       eval "$(scripts/test-cluster.sh env)"
#   scripts/test-cluster.sh kill M      takes member M down hard: its incusd killed (SIGKILL), its link cut
#                                       (its containers keep running, unreachable, as on a host whose
#                                       network went away); `up` brings it back.
#   scripts/test-cluster.sh crash M     member M's incusd killed (SIGKILL), its link kept: its machine and
#                                       containers answer, the other members' requests to its API are
#                                       refused at once (a daemon crashed or restarting); `up` brings it back.
#   scripts/test-cluster.sh ports P,…   the service's public ports that sandboxes may reach on this
#                                       machine (443 until said; registry pushes from inside)
#   scripts/test-cluster.sh status      members as the cluster sees them (`incus cluster list`)
#   scripts/test-cluster.sh incus M ... the incus CLI on member M (`... incus m1 list`)
#
# Network: bridge svcic0 at 100.64.0.1/16 on this machine; member i is 100.64.1.<i> (its eth0, default
# route through the bridge), its API on 8443; sandboxes take routed addresses from 100.64.128.0/17 with
# parent eth0 (proxy ARP on the bridge), so this machine reaches each at its own address. Forwarding is
# allowed on the bridge alone, and the members' traffic out is NATed (rules commented svc-test-cluster);
# in each member the sandboxes' firewall of scripts/incus-host.sh (SVC-INCUS-* chains): a sandbox reaches
# the outside, not another sandbox, a member or this machine, and is reached by this machine alone. Storage: a `dir` pool `data` per member (SVC_TEST_CLUSTER_POOL=btrfs: a 5 GiB btrfs
# loop file per member instead, copy-on-write). cluster.offline_threshold is 11 s (the minimum is 10),
# as in Incus's own suite, so a killed member shows OFFLINE quickly. The sandbox image (alias
# svc-sandbox, from svc-sandbox:latest on the Docker engine) and the profile svc-sandbox are those of
# scripts/incus-host.sh.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH=/usr/libexec/incus:$PATH
STATE=/run/svc-test-cluster
DATA=/var/lib/svc-test-cluster
BRIDGE=svcic0
NET=100.64
POOL_DRIVER=${SVC_TEST_CLUSTER_POOL:-dir}
OFFLINE_THRESHOLD=11
SANDBOX_POOL=$NET.128.0/17

say() { printf '[test-cluster] %s\n' "$*"; }
die() { say "error: $*" >&2; exit 1; }
ipt() { iptables -w 5 "$@"; }
now() { echo "${EPOCHREALTIME/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

[ "$(id -u)" = 0 ] || die "run as root"
command -v incusd > /dev/null || die "Incus is not installed: SVC_RUNTIME=incus npm run setup (or bash scripts/incus-host.sh)"

member_index() { [[ $1 =~ ^m([1-9][0-9]?)$ ]] || die "no such member: $1 (m1, m2, …)"; echo "${BASH_REMATCH[1]}"; }
address_of() { echo "$NET.1.$(member_index "$1")"; }
holder_of() { cat "$STATE/$1.holder" 2> /dev/null; }
holder_alive() { local p; p=$(holder_of "$1") && [ -n "$p" ] && [ -d "/proc/$p" ] && [ "$(cat "/proc/$p/comm")" = sleep ]; }
on() { local m=$1; shift; INCUS_DIR="$DATA/$m" incus "$@"; }
answers() { [ -S "$DATA/$1/unix.socket" ] && timeout 5 env INCUS_DIR="$DATA/$1" incus query /1.0 > /dev/null 2>&1; }
members_made() { ls "$STATE" 2> /dev/null | sed -n 's/^\(m[0-9]*\)\.holder$/\1/p' | sort -V; }

# --- this machine's side: the bridge, forwarding on it alone, NAT out ----------------------------------
FWD_RULE=(-i "$BRIDGE" -o "$BRIDGE" -m comment --comment svc-test-cluster -j ACCEPT)
FWD_OUT_RULE=(-i "$BRIDGE" ! -o "$BRIDGE" -m comment --comment svc-test-cluster -j ACCEPT)
FWD_IN_RULE=(-o "$BRIDGE" -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment svc-test-cluster -j ACCEPT)
NAT_RULE=(-s "$NET.0.0/16" ! -o "$BRIDGE" -m comment --comment svc-test-cluster -j MASQUERADE)
machine_up() {
    if [ ! -e "/sys/class/net/$BRIDGE" ]; then
        ip link add "$BRIDGE" type bridge
        ip addr add "$NET.0.1/16" dev "$BRIDGE"
    fi
    ip link set "$BRIDGE" up
    # the members' traffic crosses this machine's FORWARD chain (br_netfilter), whose policy is DROP here
    local r
    for r in FWD_RULE FWD_OUT_RULE FWD_IN_RULE; do
        local -n rule=$r
        ipt -C FORWARD "${rule[@]}" 2> /dev/null || ipt -I FORWARD 1 "${rule[@]}"
    done
    ipt -t nat -C POSTROUTING "${NAT_RULE[@]}" 2> /dev/null || ipt -t nat -A POSTROUTING "${NAT_RULE[@]}"
    sysctl -qw net.ipv4.ip_forward=1
}
machine_down() {
    local r
    for r in FWD_RULE FWD_OUT_RULE FWD_IN_RULE; do
        local -n rule=$r
        while ipt -D FORWARD "${rule[@]}" 2> /dev/null; do :; done
    done
    while ipt -t nat -D POSTROUTING "${NAT_RULE[@]}" 2> /dev/null; do :; done
    [ ! -e "/sys/class/net/$BRIDGE" ] || ip link del "$BRIDGE"
}

# --- a member's namespaces ------------------------------------------------------------------------------
# A holder process (sleep) keeps a network and a mount namespace alive. In it: a fresh sysfs, so that
# /sys/class/net shows the namespace's own links (incusd reads them), with the host's cgroup mounts
# moved back under it, and a fresh proc. Mounts made there (incusd's, its pools') stay there.
namespace_up() {
    local m=$1 i veth pid
    i=$(member_index "$m")
    veth="svcic$i"
    mkdir -p "$STATE" "$DATA/$m"
    if ! holder_alive "$m"; then
        setsid -f unshare -m -n --propagation private sh -euc '
            mount --move /sys /mnt
            umount -l /proc
            mount -t sysfs sysfs /sys
            mount --move /mnt/fs/cgroup /sys/fs/cgroup
            mount -t proc proc /proc
            umount -l /mnt
            echo $$ > "$1"
            exec sleep infinity
        ' sh "$STATE/$m.holder.new" < /dev/null > /dev/null 2>&1
        local n=0
        until [ -s "$STATE/$m.holder.new" ]; do
            n=$((n + 1)); [ $n -lt 100 ] || die "the namespace of $m did not come up"; sleep 0.05
        done
        mv "$STATE/$m.holder.new" "$STATE/$m.holder"
        n=0
        until holder_alive "$m"; do n=$((n + 1)); [ $n -lt 100 ] || die "the holder of $m did not start"; sleep 0.05; done
    fi
    pid=$(holder_of "$m")
    if [ ! -e "/sys/class/net/$veth" ]; then
        ip link add "$veth" type veth peer name "$veth-n"
        ip link set "$veth-n" netns "$pid"
        ip link set "$veth" master "$BRIDGE"
        nsenter -n -t "$pid" sh -euc '
            ip link set lo up
            ip link set "$1" name eth0
            ip addr add "$2/16" dev eth0
            ip link set eth0 up
            ip route add default via "$3"
            sysctl -qw net.ipv4.ip_forward=1
        ' sh "$veth-n" "$(address_of "$m")" "$NET.0.1"
    fi
    ip link set "$veth" up
}

# The sandboxes' firewall in the member (scripts/incus-host.sh firewall): the Docker runtime's isolation
# for routed NICs. The service's address is this machine's on the bridge; the pool is the members' own.
# The service's public ports (SVC_INCUS_SERVICE_PORTS, 443) are open to sandboxes: a test service on
# another port says so with `ports` (kept in $STATE/ports for members brought back later).
member_firewall() {
    nsenter -n -t "$(holder_of "$1")" env SVC_INCUS_ADDRESS_POOL="$SANDBOX_POOL" SVC_INCUS_SERVICE_ADDRESSES="$NET.0.1" \
        SVC_INCUS_SERVICE_PORTS="$(cat "$STATE/ports" 2> /dev/null || echo 443)" bash "$ROOT/scripts/incus-host.sh" firewall
}
service_ports() {
    [[ $1 =~ ^[0-9]{1,5}(,[0-9]{1,5})*$ ]] || die "ports P[,P…]: the service's public ports, comma-separated"
    echo "$1" > "$STATE/ports"
    local m
    for m in $(members_made); do holder_alive "$m" && member_firewall "$m"; done
    say "sandboxes reach $NET.0.1 on port(s) $1"
}

# --- a member's daemon ----------------------------------------------------------------------------------
daemon_up() {
    local m=$1 pid
    answers "$m" && return 0
    pid=$(holder_of "$m")
    # a daemon killed by `kill` left its pid file and socket; incusd removes a stale socket itself
    INCUS_DIR="$DATA/$m" setsid -f nsenter -n -m -t "$pid" /usr/libexec/incus/incusd --logfile "$DATA/$m.log" \
        < /dev/null > "$DATA/$m.out" 2>&1
    local n=0
    until answers "$m"; do
        n=$((n + 1)); [ $n -lt 600 ] || die "incusd of $m did not answer within 60 s: $(tail -n 5 "$DATA/$m.log")"; sleep 0.1
    done
    on "$m" admin waitready --timeout=60 > /dev/null
}
daemon_pid() { pgrep -f "^/usr/libexec/incus/incusd --logfile $DATA/$1.log" || true; }

pool_config() {
    [ "$POOL_DRIVER" = btrfs ] && printf '  config:\n    size: 5GiB\n'
    return 0
}
bootstrap() {
    on m1 admin init --preseed > /dev/null << EOF
config:
  core.https_address: $(address_of m1):8443
  images.auto_update_interval: 0
storage_pools:
- name: data
  driver: $POOL_DRIVER
$(pool_config)
profiles:
- name: default
  devices:
    root: {path: /, pool: data, type: disk}
cluster:
  server_name: m1
  enabled: true
EOF
    # only once clustered: in 6.0.4 a server that is not yet a cluster dereferences its missing
    # heartbeat task when this key changes (a panic that closes the request: `Put …/1.0: EOF`)
    on m1 config set cluster.offline_threshold "$OFFLINE_THRESHOLD"
}
join() {
    local m=$1 token cert size=
    token=$(on m1 cluster add "$m" --quiet)
    cert=$(sed 's/^/    /' "$DATA/m1/cluster.crt")
    [ "$POOL_DRIVER" != btrfs ] || size=$'  - {entity: storage-pool, name: data, key: size, value: 5GiB}'
    on "$m" admin init --preseed > /dev/null << EOF
cluster:
  enabled: true
  server_name: $m
  server_address: $(address_of "$m"):8443
  cluster_address: $(address_of m1):8443
  cluster_certificate: |
$cert
  cluster_token: $token
  member_config:
  - {entity: storage-pool, name: data, key: source, value: ""}
$size
EOF
}
is_member() { on m1 query /1.0/cluster/members 2> /dev/null | grep -q "/1.0/cluster/members/$1\""; }

# the profile sandboxes run under and the sandbox image, as on a single machine (scripts/incus-host.sh)
cluster_contents() {
    if ! on m1 profile show svc-sandbox > /dev/null 2>&1; then
        on m1 profile create svc-sandbox < /dev/null > /dev/null  # it reads a profile from a stdin that is not a terminal
        bash "$ROOT/scripts/incus-host.sh" profile | on m1 profile edit svc-sandbox
    fi
    if ! on m1 image alias list -f csv 2> /dev/null | grep -q '^svc-sandbox,'; then
        local t0 dir
        t0=$(now)
        dir=$(mktemp -d /var/tmp/svc-test-cluster-image-XXXXXX)
        bash "$ROOT/scripts/incus-host.sh" export "$dir"
        on m1 image import "$dir/meta.tar" "$dir/rootfs.tar" --alias svc-sandbox > /dev/null
        rm -rf "$dir"
        say "image svc-sandbox imported ($(since "$t0"))"
    fi
}

# --- client certificate for the service -----------------------------------------------------------------
client_cert() {
    [ -s "$DATA/client.crt" ] && [ -s "$DATA/client.key" ] && return 0
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:secp384r1 -nodes -days 3650 -subj /CN=svc-test-cluster \
        -keyout "$DATA/client.key" -out "$DATA/client.crt" 2> /dev/null
    chmod 0600 "$DATA/client.key"
}
trust_client() {
    local fp
    fp=$(openssl x509 -in "$DATA/client.crt" -noout -fingerprint -sha256 | cut -d= -f2 | tr -d : | tr 'A-F' 'a-f')
    on m1 query "/1.0/certificates/$fp" > /dev/null 2>&1 || on m1 config trust add-certificate "$DATA/client.crt" --name svc-test-cluster
}

wait_online() {
    local want=$1 n=0 online
    while :; do
        online=$(on m1 query /1.0/cluster/members?recursion=1 2> /dev/null | jq -r '[.[] | select(.status == "Online")] | length' || echo 0)
        [ "$online" -ge "$want" ] && return 0
        n=$((n + 1)); [ $n -lt 600 ] || die "only $online of $want members online after 60 s"
        sleep 0.1
    done
}

up() {
    local n=$1 i m t0
    [[ $n =~ ^[1-9][0-9]?$ ]] || die "up N: N members, 1 to 99"
    t0=$(now)
    mkdir -p "$STATE" "$DATA"
    chmod 0711 "$DATA"  # containers' roots must pass through it (LXC: "grant it x access")
    machine_up
    for i in $(seq 1 "$n"); do
        m=m$i
        namespace_up "$m"
        member_firewall "$m"
        daemon_up "$m"
        # a member that was in the cluster has its certificate: asking m1 instead could fail for want of a
        # database leader (two of three members killed), and a bootstrap then would fail the same way
        if [ "$m" = m1 ]; then
            [ -s "$DATA/m1/cluster.crt" ] || bootstrap
        else
            [ -s "$DATA/$m/cluster.crt" ] || is_member "$m" || join "$m"
        fi
    done
    # members brought back by `up` after a `kill` beyond N
    for m in $(members_made); do
        [ "$(member_index "$m")" -le "$n" ] && continue
        namespace_up "$m"
        daemon_up "$m"
    done
    client_cert
    trust_client
    wait_online "$n"
    cluster_contents
    say "up: $(members_made | wc -l) members, all online ($(since "$t0"))"
}

# Every process of the member's containers: LXC puts them in cgroups named after the instance.
container_pids() {
    local m=$1 c
    for c in $(ls "$DATA/$m/containers" 2> /dev/null); do
        cat "/sys/fs/cgroup/pids/lxc.payload.$c/cgroup.procs" "/sys/fs/cgroup/pids/lxc.monitor.$c/cgroup.procs" 2> /dev/null || true
        find "/sys/fs/cgroup/pids/lxc.payload.$c" -name cgroup.procs -exec cat {} + 2> /dev/null || true
    done
}
remove_cgroups() {
    local m=$1 c d
    for c in $(ls "$DATA/$m/containers" 2> /dev/null); do
        for d in /sys/fs/cgroup/*/lxc.payload."$c" /sys/fs/cgroup/*/lxc.monitor."$c"; do
            [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2> /dev/null || true
        done
    done
}

member_down() {
    local m=$1 i pid
    i=$(member_index "$m")
    pid=$(daemon_pid "$m"); [ -z "$pid" ] || kill -9 $pid 2> /dev/null || true
    pid=$(container_pids "$m" | sort -u | tr '\n' ' ')
    [ -z "${pid// /}" ] || kill -9 $pid 2> /dev/null || true
    pid=$(holder_of "$m" || true)
    [ -z "$pid" ] || kill -9 "$pid" 2> /dev/null || true
    ip link del "svcic$i" 2> /dev/null || true
    rm -f "$STATE/$m.holder"
}

down() {
    local m t0 members
    t0=$(now)
    members=$( { members_made; ls "$DATA" 2> /dev/null | grep -E '^m[0-9]+$'; } | sort -uV)
    # no graceful stop: a member's daemon, its containers (found by their cgroups) and its namespace
    # holder are killed, and with their last process the namespaces and every mount in them go
    for m in $members; do member_down "$m"; done
    sleep 0.2
    for m in $members; do remove_cgroups "$m"; done
    machine_down
    # nothing of the members' mounts is visible here (their mount namespaces are gone with them)
    rm -rf "$DATA" "$STATE"
    say "down: nothing left ($(since "$t0"))"
}

kill_member() {
    local m=$1 i pid
    i=$(member_index "$m")
    holder_alive "$m" || die "$m is not up"
    pid=$(daemon_pid "$m")
    [ -z "$pid" ] || kill -9 $pid
    ip link set "svcic$i" down
    say "$m: incusd killed, link cut ($(date -u +%H:%M:%S.%N | cut -c1-12))"
}

crash_member() {
    local m=$1 pid
    member_index "$m" > /dev/null
    holder_alive "$m" || die "$m is not up"
    pid=$(daemon_pid "$m")
    [ -z "$pid" ] || kill -9 $pid
    say "$m: incusd killed, link kept ($(date -u +%H:%M:%S.%N | cut -c1-12))"
}

env_lines() {
    local m addrs=
    [ -s "$DATA/client.crt" ] || die "no cluster: scripts/test-cluster.sh up 3"
    for m in $(members_made); do addrs="$addrs${addrs:+,}https://$(address_of "$m"):8443"; done
    cat << EOF
export SVC_RUNTIME=incus
export SVC_INCUS_URLS=$addrs
export SVC_INCUS_CLIENT_CERT=$DATA/client.crt
export SVC_INCUS_CLIENT_KEY=$DATA/client.key
export SVC_INCUS_SERVER_CERT=$DATA/m1/cluster.crt
export SVC_INCUS_UNIX_SOCKET=$DATA/m1/unix.socket
export SVC_INCUS_ADDRESS_POOL=$SANDBOX_POOL
export SVC_INCUS_NIC_PARENT=eth0
EOF
}

case ${1:-} in
    up) up "${2:-3}" ;;
    down) down ;;
    env) env_lines ;;
    kill) [ -n "${2:-}" ] || die "kill MEMBER"; kill_member "$2" ;;
    crash) [ -n "${2:-}" ] || die "crash MEMBER"; crash_member "$2" ;;
    ports) [ -n "${2:-}" ] || die "ports P[,P…]"; service_ports "$2" ;;
    status) on m1 cluster list ;;
    incus) [ -n "${2:-}" ] || die "incus MEMBER ARGS…"; m=$2; shift 2; member_index "$m" > /dev/null; on "$m" "$@" ;;
    *) sed -n '2,35p' "$0" >&2; exit 2 ;;
esac
