#!/usr/bin/env bash
# Incus on this machine, for the Incus runtime (docs/incus.md): installs Incus 6.0 LTS, starts its daemon
# without systemd, gives it a storage pool, a bridge and the profile sandboxes run under, and imports the
# sandbox image. Idempotent: on a machine already set up it only checks (well under a second).
# `SVC_RUNTIME=incus npm run setup` runs it; the default setup (the Docker runtime) never does.
#
#   bash scripts/incus-host.sh            all of the above
#   bash scripts/incus-host.sh image      only (re)imports the image when svc-sandbox:latest changed
#   bash scripts/incus-host.sh stop       stops incusd (its containers stop with it: `incus admin shutdown`)
#   bash scripts/incus-host.sh profile    prints the profile sandboxes run under (the test cluster uses it)
#   bash scripts/incus-host.sh export DIR writes the image's two tarballs, DIR/meta.tar and DIR/rootfs.tar
#   bash scripts/incus-host.sh firewall   only the sandboxes' firewall (below); each cluster member runs it
#   bash scripts/incus-host.sh packages   only the packages (no daemon here): what the test cluster needs
#                                         (scripts/test-cluster.sh, test/incus/cluster.test.ts)
#
#   packages   incus-base, incus-client (Debian 12: from bookworm-backports, added as an apt source of
#              its own; Debian 13: its own archive), btrfs-progs
#   daemon     /usr/libexec/incus/incusd, state in /var/lib/incus, log /var/log/incus/incus.log
#   pool       `svc`: btrfs on a loop file (/var/lib/incus/disks/svc.img, SVC_INCUS_POOL_SIZE, 30GiB),
#              so a sandbox's root is a snapshot of the image's, not a copy
#   network    none of Incus's: each sandbox gets a `routed` NIC with an address of its own from
#              SVC_INCUS_ADDRESS_POOL (100.73.0.0/16; apart from Docker's 172.17/16, 10.213/16, 10.214/24,
#              10.216+ and the test rig's 100.64/16): LXC sets the address inside (the image has no DHCP
#              client), the host routes it (a /32 per sandbox); one NAT rule takes the pool out
#   firewall   chains SVC-INCUS-IN and SVC-INCUS-FWD (first in INPUT and FORWARD), matching sandboxes by
#              their NICs' host side (svcr+, lifecycle/runtime/incus/incus-network.ts): a sandbox reaches
#              the internet and the nameservers (SVC_INCUS_DNS, else this machine's, port 53 only); not
#              this machine, not link-local addresses, not the address pool (any member's sandboxes), not
#              the private networks (SVC_INCUS_PRIVATE_NETWORKS, RFC 1918 and 100.64/10 unless set: the
#              members, the service, Redis, PostgreSQL) but the service's public ports there
#              (SVC_INCUS_SERVICE_PORTS, 443: registry pushes); it is reached by answers and by the
#              service's addresses (SVC_INCUS_SERVICE_ADDRESSES, the edge) alone. The Docker runtime's rules, said
#              for routed NICs (lifecycle/runtime/egress-firewall.ts); replaced whole at each run
#   profile    `svc-sandbox`: what a sandbox needs on top of `default` (see sandbox_profile below)
#   image      alias `svc-sandbox`: `docker export` of svc-sandbox:latest as the rootfs of a split image
#              (a metadata tarball and the rootfs tarball); its property svc.inputs is the Docker image's
#              label of the same name, so a changed image is imported again and an unchanged one is not
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ACTION=${1:-all}
export PATH=/usr/libexec/incus:$PATH DEBIAN_FRONTEND=noninteractive
DOCKER_IMAGE=${SVC_SANDBOX_IMAGE:-svc-sandbox:latest}
ALIAS=svc-sandbox
POOL_SIZE=${SVC_INCUS_POOL_SIZE:-30GiB}
ADDRESS_POOL=${SVC_INCUS_ADDRESS_POOL:-100.73.0.0/16}
LOG=/var/log/incus/incus.log
CACHE=${SVC_CACHE_DIR:-/var/cache/svc}/incus

say() { printf '[setup] incus: %s\n' "$*"; }
now() { echo "${EPOCHREALTIME/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
fail() { say "FAILED: $*" >&2; exit 1; }
step() {
    local label=$1 t0
    shift
    t0=$(now)
    printf '[setup] incus: %s ... ' "$label"
    if "$@"; then echo "ok ($(since "$t0"))"; else echo "failed ($(since "$t0"))"; return 1; fi
}

[ "$(id -u)" = 0 ] || fail "run as root"

# --- packages ------------------------------------------------------------------------------------------
BACKPORTS_SOURCE=/etc/apt/sources.list.d/svc-bookworm-backports.sources
install_packages() {
    local target=() codename
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [ "$codename" = bookworm ]; then
        # Debian 12 has Incus only in backports; `-t` takes from it exactly these packages (and the
        # dependencies they need from it), nothing else of the machine changes suite
        grep -qs '^Suites:.*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/* 2> /dev/null \
            || cat > $BACKPORTS_SOURCE << 'EOS'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
        target=(-t bookworm-backports)
    fi
    # no service starts at install (no systemd here; this script starts the daemon itself)
    local policy=/usr/sbin/policy-rc.d had_policy=0 rc=0
    [ -e $policy ] && had_policy=1
    if [ $had_policy = 0 ]; then printf '#!/bin/sh\nexit 101\n' > $policy; chmod +x $policy; fi
    { apt-get update -q && apt-get install -y -q --no-install-recommends "${target[@]}" \
        incus-base incus-client btrfs-progs jq; } > /var/log/svc-incus-apt.log 2>&1 || rc=$?
    [ $had_policy = 1 ] || rm -f $policy
    [ $rc = 0 ] || { tail -n 20 /var/log/svc-incus-apt.log >&2; return $rc; }
}

# Incus maps each container's root to a range of root's subordinate ids; with an empty /etc/subuid it
# could start none (it needs at least 65536). The package's own script adds this line on most machines.
subids() {
    local f
    for f in /etc/subuid /etc/subgid; do
        grep -q '^root:' "$f" 2> /dev/null || echo 'root:1000000:1000000000' >> "$f"
    done
}

# --- daemon --------------------------------------------------------------------------------------------
answers() { timeout 5 incus query /1.0 > /dev/null 2>&1; }
start_daemon() {
    mkdir -p "$(dirname "$LOG")"
    # setsid: the daemon outlives this script; 9>&-: it must not hold setup's lock
    (cd / && ulimit -n "$(ulimit -Hn)" && setsid -f incusd --group root --logfile="$LOG" < /dev/null >> "$LOG" 2>&1 9>&-)
    incus admin waitready --timeout=60 > /dev/null
}

# --- pool, bridge, profiles ----------------------------------------------------------------------------
init_daemon() {
    incus admin init --preseed > /dev/null << EOF
config:
  images.auto_update_interval: 0
storage_pools:
- name: svc
  driver: btrfs
  config:
    size: $POOL_SIZE
profiles:
- name: default
  devices:
    root: {path: /, pool: svc, type: disk}
EOF
}

# Sandboxes' packets out of the pool are NATed like the Docker runtime's; nothing else is touched.
nat_rule() {
    local rule=(-s "$ADDRESS_POOL" ! -d "$ADDRESS_POOL" -m comment --comment svc-incus -j MASQUERADE)
    iptables -w 5 -t nat -C POSTROUTING "${rule[@]}" 2> /dev/null || iptables -w 5 -t nat -A POSTROUTING "${rule[@]}"
    sysctl -qw net.ipv4.ip_forward=1
}

# --- firewall: the Docker runtime's isolation for routed sandboxes (egress-firewall.ts says it for Docker)
NIC=svcr+
csv() { tr ',' '\n' <<< "$1" | sed '/^$/d'; }
firewall_rules() {
    local pool=$1 dns=$2 private=$3 service=$4 ports=$5 x p
    echo '*filter'
    echo ':SVC-INCUS-FWD - [0:0]'
    echo "-A SVC-INCUS-FWD -i $NIC -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
    echo "-A SVC-INCUS-FWD -o $NIC -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
    # ACCEPT, not a later RETURN: a nameserver may be private or link-local
    for x in $(csv "$dns"); do
        echo "-A SVC-INCUS-FWD -i $NIC -d $x/32 -p udp -m udp --dport 53 -j ACCEPT"
        echo "-A SVC-INCUS-FWD -i $NIC -d $x/32 -p tcp -m tcp --dport 53 -j ACCEPT"
    done
    # the service's public ports (registry pushes from inside), as the Docker runtime opens its own
    for x in $(csv "$service"); do
        for p in $(csv "$ports"); do echo "-A SVC-INCUS-FWD -i $NIC -d $x/32 -p tcp -m tcp --dport $p -j ACCEPT"; done
    done
    echo "-A SVC-INCUS-FWD -i $NIC -d 169.254.0.0/16 -j DROP"
    echo "-A SVC-INCUS-FWD -i $NIC -d $pool -j DROP"
    for x in $(csv "$private"); do echo "-A SVC-INCUS-FWD -i $NIC -d $x -j DROP"; done
    echo "-A SVC-INCUS-FWD -i $NIC -j ACCEPT"
    for x in $(csv "$service"); do echo "-A SVC-INCUS-FWD -o $NIC -s $x -j ACCEPT"; done
    echo "-A SVC-INCUS-FWD -o $NIC -j DROP"
    echo 'COMMIT'
}
first_jump() {
    local tool=$1 parent=$2 chain=$3
    [ "$($tool -w 5 -S "$parent" | sed -n 2p)" = "-A $parent -j $chain" ] && return 0
    while $tool -w 5 -D "$parent" -j "$chain" 2> /dev/null; do :; done
    $tool -w 5 -I "$parent" 1 -j "$chain"
}
firewall() {
    local dns private service
    dns=${SVC_INCUS_DNS-$(awk '$1 == "nameserver" && $2 ~ /^[0-9.]+$/ { printf "%s%s", sep, $2; sep = "," }' /etc/resolv.conf)}
    private=${SVC_INCUS_PRIVATE_NETWORKS-10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10}
    service=${SVC_INCUS_SERVICE_ADDRESSES-}
    # one iptables-restore commit: never a moment without the chains, nor with half of them
    firewall_rules "$ADDRESS_POOL" "$dns" "$private" "$service" "${SVC_INCUS_SERVICE_PORTS-443}" | iptables-restore -w 5 --noflush
    # INPUT's chain is added to, never replaced: a service on this machine opens its public port there
    # (egress-firewall.ts openPort), between these two rules
    iptables -w 5 -N SVC-INCUS-IN 2> /dev/null || true
    local rule
    for rule in "-i $NIC -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT" "-i $NIC -j DROP"; do
        # shellcheck disable=SC2086
        iptables -w 5 -C SVC-INCUS-IN $rule 2> /dev/null || iptables -w 5 -A SVC-INCUS-IN $rule
    done
    first_jump iptables INPUT SVC-INCUS-IN
    first_jump iptables FORWARD SVC-INCUS-FWD
    # routed NICs get no IPv6 address; nothing of it goes through
    printf '*filter\n:SVC-INCUS-FWD - [0:0]\n-A SVC-INCUS-FWD -i %s -j DROP\n-A SVC-INCUS-FWD -o %s -j DROP\n:SVC-INCUS-IN - [0:0]\n-A SVC-INCUS-IN -i %s -j DROP\nCOMMIT\n' \
        "$NIC" "$NIC" "$NIC" | ip6tables-restore -w 5 --noflush
    first_jump ip6tables INPUT SVC-INCUS-IN
    first_jump ip6tables FORWARD SVC-INCUS-FWD
}

# What a sandbox needs on top of the default profile (docs/incus.md says why each line is there).
# - nesting, mknod/setxattr interception: the inner dockerd (overlay2 whiteouts, device nodes)
# - idmap.isolated: every sandbox's root is a host uid range of its own, shared with no other sandbox
# - the image's entrypoint as init (tini first, as in the Docker runtime), with a PATH (LXC's init has
#   none) and SVC_CGROUP_HANDOVER=none: nobody hands cgroups over under Incus (entrypoint.sh)
# - halt signal SIGTERM: LXC's default SIGPWR is ignored by dockerd, so `incus stop` would wait for its
#   timeout and then kill the inner containers instead of dockerd stopping them (restart policies)
sandbox_profile() {
    # keys in the order `incus profile show` prints them, so profile_current can compare the text
    cat << 'EOF'
config:
  environment.PATH: /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  environment.SVC_CGROUP_HANDOVER: none
  raw.lxc: |-
    lxc.init.cmd = /usr/bin/tini -- /usr/local/bin/svc-entrypoint
    lxc.signal.halt = SIGTERM
  security.idmap.isolated: "true"
  security.nesting: "true"
  security.syscalls.intercept.mknod: "true"
  security.syscalls.intercept.setxattr: "true"
description: svc sandbox (nested Docker, unprivileged, isolated idmap)
devices: {}
EOF
}
ensure_profile() {
    incus profile show svc-sandbox > /dev/null 2>&1 || incus profile create svc-sandbox > /dev/null
    incus profile edit svc-sandbox < <(sandbox_profile)
}
profile_current() {
    diff <(incus profile show svc-sandbox 2> /dev/null | sed -e '/^name:/d' -e '/^used_by:/,$d') <(sandbox_profile) > /dev/null
}

# --- image ---------------------------------------------------------------------------------------------
docker_inputs() { docker image inspect -f '{{index .Config.Labels "svc.inputs"}}' "$DOCKER_IMAGE"; }
incus_inputs() { incus query "/1.0/images/aliases/$ALIAS" 2> /dev/null | jq -r .target | xargs -r -I{} incus query /1.0/images/{} | jq -r '.properties["svc.inputs"] // empty'; }
# The split image's two tarballs in $1: meta.tar (metadata.yaml alone) and rootfs.tar.
export_image() {
    local dir=$1 inputs=$2 cid
    # metadata.yaml is all of the metadata tarball; the rootfs tarball is the container's file system
    # as Docker has it (its ENV and ENTRYPOINT live in the profile)
    cat > "$dir/metadata.yaml" << EOF
architecture: x86_64
creation_date: $(date +%s)
properties:
  description: svc sandbox ($DOCKER_IMAGE)
  os: debian
  svc.inputs: "$inputs"
EOF
    tar -C "$dir" -cf "$dir/meta.tar" metadata.yaml
    cid=$(docker create "$DOCKER_IMAGE")
    docker export "$cid" > "$dir/rootfs.tar" || { docker rm -f "$cid" > /dev/null; return 1; }
    docker rm -f "$cid" > /dev/null
}
import_image() {
    local inputs=$1 dir
    mkdir -p "$CACHE"
    dir=$(mktemp -d "$CACHE/image-XXXXXX")
    export_image "$dir" "$inputs" || { rm -rf "$dir"; return 1; }
    # the old image stays until the new one is in: a sandbox made meanwhile still finds the alias
    local old
    old=$(incus query "/1.0/images/aliases/$ALIAS" 2> /dev/null | jq -r '.target // empty' || true)
    [ -z "$old" ] || incus image alias delete "$ALIAS"
    if ! incus image import "$dir/meta.tar" "$dir/rootfs.tar" --alias "$ALIAS" > /dev/null; then
        [ -z "$old" ] || incus image alias create "$ALIAS" "$old"
        rm -rf "$dir"
        return 1
    fi
    [ -z "$old" ] || incus image delete "$old"
    rm -rf "$dir"
}
ensure_image() {
    local want have
    want=$(docker_inputs) || fail "no $DOCKER_IMAGE on the Docker engine: run npm run setup first"
    have=$(incus_inputs || true)
    if [ -n "$have" ] && [ "$have" = "$want" ]; then
        say "image $ALIAS: up to date ($want)"
    else
        step "image $ALIAS: importing $DOCKER_IMAGE ($want)" import_image "$want" || fail "could not import $DOCKER_IMAGE"
    fi
}

ensure_packages() {
    if command -v incus > /dev/null && [ -x /usr/libexec/incus/incusd ] && command -v mkfs.btrfs > /dev/null && command -v jq > /dev/null; then
        say "packages: $(dpkg-query -W -f='${Version}' incus-base) present"
    else
        step "apt-get install incus-base incus-client btrfs-progs" install_packages \
            || fail "apt-get install failed, log in /var/log/svc-incus-apt.log"
    fi
    subids
}

case $ACTION in
    profile) sandbox_profile; exit 0 ;;
    packages) ensure_packages; exit 0 ;;
    export)
        [ -n "${2:-}" ] || fail "export DIR"
        mkdir -p "$2"
        export_image "$2" "$(docker_inputs)"
        exit 0 ;;
    stop)
        answers && incus admin shutdown --timeout 60 || true
        exit 0 ;;
    image) ensure_image; exit 0 ;;
    firewall) firewall; exit 0 ;;
    all) ;;
    *) echo "usage: $0 [image|stop|profile|export DIR|firewall|packages]" >&2; exit 2 ;;
esac

ensure_packages

if answers; then
    say "daemon: answering"
else
    step "starting incusd (log $LOG)" start_daemon || fail "incusd did not answer within 60 s: $(tail -n 15 $LOG)"
fi
if incus storage show svc > /dev/null 2>&1; then
    say "pool svc: present"
else
    step "pool svc (btrfs, $POOL_SIZE)" init_daemon || fail "incus admin init failed"
fi
nat_rule
step "firewall (SVC-INCUS-IN, SVC-INCUS-FWD)" firewall || fail "could not install the sandboxes' firewall"
if profile_current; then
    say "profile svc-sandbox: current"
else
    step "profile svc-sandbox" ensure_profile || fail "could not write profile svc-sandbox"
fi
ensure_image
