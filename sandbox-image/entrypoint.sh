#!/bin/sh
# Entrypoint of a sandbox container: prepare what dockerd and sshd need, start sshd, then become dockerd.
#
# PID 1 is tini (see Dockerfile). Because this script ends with `exec dockerd`, the SIGTERM of
# `docker stop` goes straight to dockerd, which stops the inner containers and records them as stopped
# by a shutdown, not by a user: on the next start it restarts exactly those with restart policy
# `always` / `unless-stopped` that were running. The container exits when dockerd exits.
#
# Environment:
#   SVC_TLS_CA, SVC_TLS_CERT, SVC_TLS_KEY  PEM text (CA, server cert, server key). All three: dockerd also
#                                          listens with --tlsverify on tcp 2376. None: unix socket only.
#   SVC_DNS                                nameservers for inner containers (comma or space separated).
#                                          The sandbox's own resolver (127.0.0.11 on a user-defined
#                                          network) is unreachable from them; without this dockerd
#                                          falls back to 8.8.8.8.
#   SVC_SSH_AUTHORIZED_KEYS                newline separated keys for root; when set (even empty) it
#                                          replaces /root/.ssh/authorized_keys at the container's
#                                          first start (not at later starts, see below).
#   SVC_ENTRYPOINT_TRACE=1                 print a timestamp per step (startup time matters: wake).
#   SVC_CGROUP_HANDOVER=none               nobody hands this sandbox's cgroups over: do not wait for it
#                                          (the Incus runtime: LXC gives the container's root its cgroups
#                                          from the start; see docs/incus.md).
# Arguments are passed on to dockerd.
set -eu

log() { printf '[svc-entrypoint] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
trace() { [ "${SVC_ENTRYPOINT_TRACE:-}" != 1 ] || log "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ) $*"; }

trace start

# --- stale state from the previous run -----------------------------------------------------------------
# /run lives in the container's layer, so it survives stop/start. PIDs restart low in a new PID namespace:
# a stale containerd.pid can name a live process (sshd, say) and dockerd would then wait on it forever.
find /run -xdev -name '*.pid' -type f -delete 2>/dev/null || :
[ -d /run/sshd ] || mkdir -p /run/sshd
trace pidfiles

# --- containerd ----------------------------------------------------------------------------------------
# Left to itself, dockerd starts containerd and dials it at once; the first dial misses the socket and
# gRPC's reconnect backoff then costs about a second of every start and wake. So it is started here,
# first of all: it needs nothing of the steps below (not even its cgroups) until dockerd asks it for a
# container, and it comes up while they run. It becomes dockerd's child (this shell execs into dockerd) and ends with the
# container; dockerd still stops every inner container before it exits.
containerd_sock=/run/containerd/containerd.sock
rm -f "$containerd_sock"
containerd > /dev/null 2>&1 &
containerd_pid=$!
trace "containerd started"

# --- iptables backend ----------------------------------------------------------------------------------
# The image selects iptables-legacy: dockerd's ~100 calls at start take 340 ms instead of 600 ms with nft.
# The sandbox has its own network namespace, so only Docker's embedded-DNS rules (nft, written by the
# host engine) share it, and they touch only 127.0.0.11. A kernel without legacy xtables gets nft.
if ! iptables-legacy -w -n -t nat -L POSTROUTING > /dev/null 2>&1; then
    log "iptables-legacy unusable here; using iptables-nft"
    ln -sf /usr/sbin/iptables-nft /etc/alternatives/iptables
    ln -sf /usr/sbin/ip6tables-nft /etc/alternatives/ip6tables
fi
trace iptables

# --- neighbour discovery -------------------------------------------------------------------------------
# A wake: dockerd writes an app's port rule before the app's container has its interface, so the first
# connection to the app sends an address lookup (ARP) for a container that is not there yet, and Linux
# asks again only a second later: the app answered up to a second after it ran (0.8 s in a wake of 1.5).
# Every interface made in this network namespace (the inner engine's bridges, which it re-creates at
# each start) asks every 10 ms (the kernel's least) instead of every second, up to 30 times (0.3 s)
# before it gives up (at 100-ms retries a woken app waited 50 ms for the next ask, on average). New
# namespaces cannot change the default (the host's), hence one interface at a time, as they appear.
# Only while the inner engine restores its networks and containers: the watcher ends after two
# minutes, and the sandbox's namespace is new at its next start anyway.
watch_interfaces() {
    timeout 120 ip -o monitor link | while read -r _ name _; do
        knobs=/proc/sys/net/ipv4/neigh/${name%%[:@]*}
        [ ! -w "$knobs/retrans_time_ms" ] || { echo 10 > "$knobs/retrans_time_ms"; echo 30 > "$knobs/mcast_solicit"; } 2> /dev/null || :
    done
}
# started from a subshell that ends at once: tini, not dockerd, is its parent and reaps it
( watch_interfaces < /dev/null > /dev/null 2>&1 & )
trace neigh

# --- engine TLS ----------------------------------------------------------------------------------------
# Written at the first start of this container only: its environment cannot change after creation, and
# the files stay in its own layer, so a wake does not spend a few process starts rewriting them. A
# re-created container (deep sleep, new image) writes them again.
tls_dir=/etc/docker/tls
tls_marker=$tls_dir/.svc-written
if [ -n "${SVC_TLS_CA:-}${SVC_TLS_CERT:-}${SVC_TLS_KEY:-}" ]; then
    [ -n "${SVC_TLS_CA:-}" ] && [ -n "${SVC_TLS_CERT:-}" ] && [ -n "${SVC_TLS_KEY:-}" ] \
        || die "SVC_TLS_CA, SVC_TLS_CERT and SVC_TLS_KEY must be set together"
    if [ ! -e "$tls_marker" ]; then
        mkdir -p "$tls_dir"
        umask 077
        printf '%s\n' "$SVC_TLS_CA" > "$tls_dir/ca.pem"
        printf '%s\n' "$SVC_TLS_CERT" > "$tls_dir/cert.pem"
        printf '%s\n' "$SVC_TLS_KEY" > "$tls_dir/key.pem"
        umask 022
        chmod 0444 "$tls_dir/ca.pem" "$tls_dir/cert.pem"
        chmod 0400 "$tls_dir/key.pem"
        : > "$tls_marker"
    fi
    set -- --tlsverify --tlscacert="$tls_dir/ca.pem" --tlscert="$tls_dir/cert.pem" \
        --tlskey="$tls_dir/key.pem" -H tcp://0.0.0.0:2376 -H unix:///var/run/docker.sock "$@"
fi
ifs=$IFS
IFS=', '
for ns in ${SVC_DNS:-}; do set -- "$@" --dns "$ns"; done
IFS=$ifs
# keep the server key out of the environment of everything started below
unset SVC_TLS_CA SVC_TLS_CERT SVC_TLS_KEY SVC_DNS
trace tls

# --- ssh -----------------------------------------------------------------------------------------------
# Applied on the first start of this container only: its environment cannot change after creation, and
# the service may have pushed newer keys into the file since (docker exec), which a wake must not undo.
# The marker lives in the container's own layer, so a re-created container applies its keys again.
keys_marker=/etc/ssh/.svc-authorized-keys-applied
if [ -n "${SVC_SSH_AUTHORIZED_KEYS+set}" ] && [ ! -e "$keys_marker" ]; then
    mkdir -p /root/.ssh
    chmod 0700 /root /root/.ssh
    if [ -n "$SVC_SSH_AUTHORIZED_KEYS" ]; then
        printf '%s\n' "$SVC_SSH_AUTHORIZED_KEYS" > /root/.ssh/authorized_keys.svc-new
    else
        : > /root/.ssh/authorized_keys.svc-new
    fi
    chmod 0600 /root/.ssh/authorized_keys.svc-new
    mv -f /root/.ssh/authorized_keys.svc-new /root/.ssh/authorized_keys
    : > "$keys_marker"
fi
unset SVC_SSH_AUTHORIZED_KEYS

# Host keys sit on the /var/lib/docker volume (see sshd.conf), so clients see the same host key after the
# container is re-created. ed25519 and ecdsa only: an RSA key costs a noticeable part of a first start.
key_dir=/var/lib/docker/.svc-ssh-host-keys
for type in ed25519 ecdsa; do
    key=$key_dir/ssh_host_${type}_key
    [ -s "$key" ] && continue
    mkdir -p "$key_dir"
    chmod 0700 "$key_dir"
    rm -f "$key.new" "$key.new.pub"
    ssh-keygen -q -t "$type" -N '' -C "svc-sandbox-$(hostname)" -f "$key.new"
    mv -f "$key.new.pub" "$key.pub"
    mv -f "$key.new" "$key"
done
trace sshkeys

# sshd daemonizes: tini (PID 1) becomes its parent and reaps its sessions. A broken sshd must not keep
# the engine down, so a failure here is only logged. Started beside dockerd, not before it: the wait for
# sshd's start stays off a wake's path (from a subshell that ends at once, so tini reaps it too).
( { /usr/sbin/sshd || log "warning: sshd did not start"; } < /dev/null & )
trace sshd

# --- cgroups -------------------------------------------------------------------------------------------
# Docker gives an unprivileged container a read-only cgroup view, and dockerd needs to create cgroups for
# its containers. With a private cgroup namespace a fresh mount shows our own cgroup as the root, so we
# mount writable hierarchies over the read-only ones. Mounts die with the container: do it every start.
setup_cgroup_v1() {
    # Writable already (sysbox, --privileged): leave it.
    [ -w /sys/fs/cgroup/memory/cgroup.procs ] && return 0
    mount -t tmpfs -o nosuid,nodev,noexec,mode=755 cgroup /sys/fs/cgroup
    # One line per hierarchy the kernel has ("3:cpuset:/", "2:cpu,cpuacct:/", "1:name=systemd:/",
    # "0::/"). Controllers must be mounted in the same combinations the host uses, or mount fails (EBUSY).
    hierarchies=$(cut -d: -f2 /proc/self/cgroup)
    dirs=
    for ctrls in $hierarchies; do dirs="$dirs /sys/fs/cgroup/${ctrls#name=}"; done
    if grep -q '^0::' /proc/self/cgroup; then dirs="$dirs /sys/fs/cgroup/unified"; fi
    mkdir -p $dirs
    for ctrls in $hierarchies; do
        case $ctrls in
            name=*) mount -t cgroup -o "nosuid,nodev,noexec,none,$ctrls" cgroup "/sys/fs/cgroup/${ctrls#name=}" ;;
            *) mount -t cgroup -o "nosuid,nodev,noexec,$ctrls" cgroup "/sys/fs/cgroup/$ctrls" ;;
        esac
        # co-mounted controllers ("cpu,cpuacct") get a link per name, as systemd lays them out
        case $ctrls in
            *,*) for c in $(echo "$ctrls" | tr , ' '); do ln -sfn "$ctrls" "/sys/fs/cgroup/$c"; done ;;
        esac
    done
    # hybrid hosts also have the cgroup2 tree; mount it where the host does
    if [ -d /sys/fs/cgroup/unified ]; then
        mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup/unified || rmdir /sys/fs/cgroup/unified
    fi
}

setup_cgroup_v2() {
    # Not exercised on our cgroup v1 hosts; this is what the docker:dind image does on v2.
    [ -w /sys/fs/cgroup/cgroup.subtree_control ] \
        || mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup
    # A cgroup with processes cannot hand controllers to children: move ourselves to a leaf first.
    mkdir -p /sys/fs/cgroup/init
    xargs -rn1 < /sys/fs/cgroup/cgroup.procs > /sys/fs/cgroup/init/cgroup.procs 2>/dev/null || :
    sed -e 's/ / +/g' -e 's/^/+/' < /sys/fs/cgroup/cgroup.controllers \
        > /sys/fs/cgroup/cgroup.subtree_control
}

# In a user namespace (the sandbox engine's --userns-remap) our cgroup folders belong to the host's root
# until the service hands them to our root (lifecycle/runtime/cgroup-delegation.ts): right after a start
# of its own, or on the engine's start event (a restart policy, an engine restart). Wait for that last,
# after every step that does not need it (containerd, the iptables check, TLS, sshd: they run while the
# service hands over): the fresh cgroup mounts below and dockerd need it, and dockerd restarts inner
# containers only once, at its own start. The folder's owner tells: 0 once handed over, the overflow uid before.
in_userns() { ! grep -qE '^ +0 +0 +4294967295$' /proc/self/uid_map; }
if in_userns && [ "${SVC_CGROUP_HANDOVER:-}" != none ]; then
    own_cgroup=/sys/fs/cgroup
    [ -f /sys/fs/cgroup/cgroup.controllers ] || own_cgroup=/sys/fs/cgroup/pids
    i=0
    until [ "$(stat -c %u "$own_cgroup")" = 0 ]; do
        i=$((i + 1))
        [ $((i % 3000)) -ne 0 ] || log "waiting for the service to hand over this sandbox's cgroups ($((i / 100)) s)"
        sleep 0.01
    done
fi
trace delegated

# crun, the inner engine's default runtime (daemon.json), leaves a new v1 cpuset cgroup without CPUs and
# memory nodes (runc fills them in), and no process can join it then. With clone_children on our own
# cpuset cgroup every one made below it (the engine's "docker", a user's --cgroup-parent) copies its
# parent's. The service hands this file over with the others (lifecycle/runtime/cgroup-delegation.ts).
clone_cpusets() {
    knob=/sys/fs/cgroup/cpuset/cgroup.clone_children
    [ ! -f "$knob" ] || echo 1 2> /dev/null > "$knob" \
        || log "warning: cannot set $knob: containers may not start with crun; --runtime runc still works"
}
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then setup_cgroup_v2; else setup_cgroup_v1; clone_cpusets; fi
trace cgroups

# --- dockerd -------------------------------------------------------------------------------------------
i=0
until [ -S "$containerd_sock" ]; do
    i=$((i + 1))
    [ "$i" -le 1000 ] || die "containerd did not open $containerd_sock within 10 s"
    kill -0 "$containerd_pid" 2> /dev/null || die "containerd exited at start (run 'containerd' in the sandbox to see why)"
    sleep 0.01
done
trace containerd

exec dockerd --containerd="$containerd_sock" "$@"
