#!/usr/bin/env bash
# Starts the sandbox engine: a Docker engine of the service's own, apart from the machine's main engine,
# that runs every sandbox container in a user namespace (--userns-remap): root in a sandbox is an
# unprivileged uid range on the host (100000 + n). Idempotent; `--check` only says whether it answers.
# An engine that answers with another pool or network size than these settings is left running (a
# restart stops every sandbox in it) and named; `--restart` stops it (dockerd stops its containers) and
# starts it with these settings. Under systemd: `systemctl restart svc-sandbox-engine` instead.
# Under systemd (deploy/systemd/svc-sandbox-engine.service): `--foreground` becomes dockerd itself (it
# tells systemd when it is ready), `--after-start` then puts back docker0 and the NAT rule.
#
#   socket     /run/svc-sandbox-docker.sock   (SVC_SANDBOX_DOCKER_HOST=unix:///run/svc-sandbox-docker.sock)
#   data root  /var/lib/svc-sandbox-docker    (images, the sandboxes' volumes)
#   log        /var/log/svc-sandbox-dockerd.log
#
# Another engine of the same kind is set by the environment (runner hosts, removed by issue 34, gave
# these; nothing in this repository sets them now); unset, the engine is the service machine's own, as above.
#   SVC_ENGINE_NAME             names socket, data root, exec root, pidfile and log (/run/NAME.sock …)
#   SVC_SANDBOX_ADDRESS_POOL    the sandboxes' pool (10.213.0.0/16): one of its own on every host
#   SVC_SANDBOX_NETWORK_SIZE    the prefix of each sandbox's network in it (28: 4096 networks in a /16; a
#                               sandbox's network holds only it and its gateway). Networks made before a
#                               change keep their subnet: the engine only cuts new ones at the new size
#   SVC_ENGINE_BRIDGE_ADDRESS   the engine's default bridge (10.214.0.1/24)
#   SVC_ENGINE_CGROUP_PARENT    (/svc-sandboxes)
#   SVC_ENGINE_TLS_DIR          ca.pem, cert.pem, key.pem: the engine also listens on tcp 2376, mutual TLS
#                               only (ca.pem is the service's CA: only a client cert it issued gets in)
#   SVC_ENGINE_LISTEN_ADDRESS   the host's private address, the one the service dials: 2376 is on it alone
#   SVC_ENGINE_SERVICE_ADDRESS  the address the service dials from: the host's egress rules (the service
#                               installs them itself on its own machine) let only it open connections to
#                               sandboxes, and let sandboxes reach the internet, not this host nor its network
#   SVC_ENGINE_DNS              nameservers its sandboxes may reach on port 53 (comma-separated)
#   SVC_ENGINE_PRIVATE_NETWORK  that network (CIDRs, comma-separated; the service's address alone if unset)
#
# Why these flags:
#   --userns-remap=default   the dockremap user and its /etc/subuid range: the isolation itself
#   --iptables=false         a second dockerd with iptables on rewrites the main engine's chains; the
#                            service installs its own egress rules for the sandbox networks instead
#   --bridge=svcb-default    sandboxes only use networks of their own (one per sandbox); the engine's
#                            default bridge is named like theirs, so the egress rules cover it too
#   --default-address-pool   apart from the main engine's pools, so the two never pick the same subnet
#   --cgroup-parent          every sandbox below /svc-sandboxes: one place to see and limit them all
#                            (with the cgroupfs driver, named: on cgroup v2 hosts dockerd would pick the
#                            systemd driver, which takes only slice names)
#   PATH=RUNTIME_DIR:...     the engine's "runc" (looked up in its PATH) is sandbox-image/runtime, which
#                            runs /usr/bin/runc with each container's network hook pointed at
#                            sandbox-image/setkey instead of dockerd's own binary: 30-40 ms off every
#                            sandbox's start (a wake's); both are copied to RUNTIME_DIR at every run
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=${SVC_ENGINE_NAME:-svc-sandbox-docker}
RUNTIME_DIR=/usr/local/libexec/$NAME
SOCK=/run/$NAME.sock
DATA=/var/lib/$NAME
EXEC_ROOT=/run/$NAME
PIDFILE=/run/$NAME.pid
LOG=/var/log/${NAME/%-docker/-dockerd}.log
POOL=${SVC_SANDBOX_ADDRESS_POOL:-10.213.0.0/16}
NETWORK_SIZE=${SVC_SANDBOX_NETWORK_SIZE:-28}
BRIDGE_ADDRESS=${SVC_ENGINE_BRIDGE_ADDRESS:-10.214.0.1/24}
TLS_DIR=${SVC_ENGINE_TLS_DIR:-}
LISTEN_ADDRESS=${SVC_ENGINE_LISTEN_ADDRESS:-}
SERVICE_ADDRESS=${SVC_ENGINE_SERVICE_ADDRESS:-}
PRIVATE_NETWORK=${SVC_ENGINE_PRIVATE_NETWORK:-$SERVICE_ADDRESS}

DOCKER0_FILE=/run/$NAME.docker0
DOCKERD_ARGS=(--host "unix://$SOCK" --data-root "$DATA" --exec-root "$EXEC_ROOT" --pidfile "$PIDFILE"
    --userns-remap=default --iptables=false --ip6tables=false --ip-masq=false --bridge=svcb-default
    --default-address-pool "base=$POOL,size=$NETWORK_SIZE" --cgroup-parent="${SVC_ENGINE_CGROUP_PARENT:-/svc-sandboxes}"
    --exec-opt native.cgroupdriver=cgroupfs --log-opt max-size=10m --log-opt max-file=2)
if [ -n "$TLS_DIR" ]; then
    [ -n "$LISTEN_ADDRESS" ] || { echo "SVC_ENGINE_TLS_DIR needs SVC_ENGINE_LISTEN_ADDRESS (the host's private address)" >&2; exit 1; }
    DOCKERD_ARGS+=(--host "tcp://$LISTEN_ADDRESS:2376" --tlsverify --tlscacert "$TLS_DIR/ca.pem" --tlscert "$TLS_DIR/cert.pem" --tlskey "$TLS_DIR/key.pem")
fi

say() { printf '[setup] %s\n' "$*"; }
answers() { timeout 10 docker -H "unix://$SOCK" info --format '{{.ServerVersion}}' > /dev/null 2>&1; }
# The pool the running engine cuts, as "base/size" ("10.213.0.0/16/28")
running_pool() { timeout 10 docker -H "unix://$SOCK" info --format '{{range .DefaultAddressPools}}{{.Base}}/{{.Size}}{{end}}' 2> /dev/null || true; }
# Stops the running engine; dockerd stops its containers first (up to its shutdown timeout, 15 s each at once)
stop_engine() {
    local pid
    pid=$(cat "$PIDFILE" 2> /dev/null || true)
    [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null || { echo "the sandbox engine answers on $SOCK but $PIDFILE names no live dockerd" >&2; exit 1; }
    say "sandbox engine: stopping dockerd $pid (its running sandboxes stop)"
    kill -TERM "$pid"
    for _ in $(seq 1 600); do kill -0 "$pid" 2> /dev/null || return 0; sleep 0.1; done
    echo "dockerd $pid did not stop within 60 s" >&2
    exit 1
}

# Outgoing NAT for the sandboxes' pool (dockerd does none with --iptables=false). Checked on every run:
# a host reboot empties the tables while the engine may come back by itself.
nat() {
    sysctl -qw net.ipv4.ip_forward=1
    iptables -w 5 -t nat -C POSTROUTING -s "$POOL" ! -o 'svcb+' -j MASQUERADE 2> /dev/null \
        || iptables -w 5 -t nat -A POSTROUTING -s "$POOL" ! -o 'svcb+' -j MASQUERADE
    [ -z "$SERVICE_ADDRESS" ] || runner_egress
}

# A runner host's egress rules: lifecycle/runtime/egress-firewall.ts's, which the service installs on its
# own machine only, plus the one way in: connections the service opens to its sandboxes (the edge).
# Sandboxes reach the internet; not this host, not the private network (the service, other hosts), not
# link-local addresses, not each other; nothing over IPv6. The chains are made again whole on every run.
runner_egress() {
    local c
    for c in SVC-SANDBOX-IN SVC-SANDBOX-FWD; do iptables -w 5 -N "$c" 2> /dev/null || iptables -w 5 -F "$c"; done
    iptables -w 5 -A SVC-SANDBOX-IN -i 'svcb+' -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
    iptables -w 5 -A SVC-SANDBOX-IN -i 'svcb+' -j DROP
    # both ways: a sandbox's answers to the service cross this host's forwarding too
    iptables -w 5 -A SVC-SANDBOX-FWD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
    iptables -w 5 -A SVC-SANDBOX-FWD -s "$SERVICE_ADDRESS" -o 'svcb+' -j ACCEPT
    iptables -w 5 -A SVC-SANDBOX-FWD -i 'svcb+' -o 'svcb+' -j DROP
    # the runner's nameservers (its sandboxes are given them: svc hosts add --dns) on port 53 alone, also
    # where they are private or link-local
    DNS=${SVC_ENGINE_DNS:-}
    for c in ${DNS//,/ }; do
        for p in udp tcp; do iptables -w 5 -A SVC-SANDBOX-FWD -i 'svcb+' -d "$c" -p $p --dport 53 -j ACCEPT; done
    done
    iptables -w 5 -A SVC-SANDBOX-FWD -i 'svcb+' -d 169.254.0.0/16 -j DROP
    for c in ${PRIVATE_NETWORK//,/ }; do iptables -w 5 -A SVC-SANDBOX-FWD -i 'svcb+' -d "$c" -j DROP; done
    iptables -w 5 -A SVC-SANDBOX-FWD -i 'svcb+' -j ACCEPT
    iptables -w 5 -A SVC-SANDBOX-FWD -o 'svcb+' -j DROP
    iptables -w 5 -C INPUT -j SVC-SANDBOX-IN 2> /dev/null || iptables -w 5 -I INPUT 1 -j SVC-SANDBOX-IN
    iptables -w 5 -C FORWARD -j SVC-SANDBOX-FWD 2> /dev/null || iptables -w 5 -I FORWARD 1 -j SVC-SANDBOX-FWD
    # IPv6 as egress-firewall.ts: sandbox networks have none, but each bridge has a link-local address
    # (the host's listeners on ::), and a sandbox's root can give itself one
    for c in SVC-SANDBOX-IN SVC-SANDBOX-FWD; do ip6tables -w 5 -N "$c" 2> /dev/null || ip6tables -w 5 -F "$c"; done
    ip6tables -w 5 -A SVC-SANDBOX-IN -i 'svcb+' -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
    ip6tables -w 5 -A SVC-SANDBOX-IN -i 'svcb+' -j DROP
    ip6tables -w 5 -A SVC-SANDBOX-FWD -i 'svcb+' -j DROP
    ip6tables -w 5 -A SVC-SANDBOX-FWD -o 'svcb+' -j DROP
    ip6tables -w 5 -C INPUT -j SVC-SANDBOX-IN 2> /dev/null || ip6tables -w 5 -I INPUT 1 -j SVC-SANDBOX-IN
    ip6tables -w 5 -C FORWARD -j SVC-SANDBOX-FWD 2> /dev/null || ip6tables -w 5 -I FORWARD 1 -j SVC-SANDBOX-FWD
}

# This dockerd removes the interface docker0 when it starts (seen with --bridge=none and with a bridge of
# its own alike): that is the main engine's default bridge. Its address is noted before, to put it back.
put_back_docker0() {
    local address=$1
    if [ -n "$address" ] && ! ip link show docker0 > /dev/null 2>&1; then
        ip link add docker0 type bridge && ip addr add "$address" dev docker0 && ip link set docker0 up \
            || echo "[setup] warning: could not put back the main engine's docker0 ($address); restart the main engine" >&2
    fi
}
# The runtime wrapper and its network hook, where the engine's PATH finds them first (see above).
install_runtime() {
    install -D -m 755 "$ROOT/sandbox-image/runtime" "$RUNTIME_DIR/runc.new" && mv -f "$RUNTIME_DIR/runc.new" "$RUNTIME_DIR/runc"
    install -m 755 "$ROOT/sandbox-image/setkey" "$RUNTIME_DIR/setkey.new" && mv -f "$RUNTIME_DIR/setkey.new" "$RUNTIME_DIR/setkey"
}
# whether the running engine ($1: its pid) was started with RUNTIME_DIR first in its PATH
has_runtime() { tr '\0' '\n' < "/proc/$1/environ" 2> /dev/null | grep -q "^PATH=$RUNTIME_DIR:"; }
# The default bridge of this engine, outside the sandboxes' pool.
prepare() {
    install_runtime
    if [ -f "$PIDFILE" ] && ! kill -0 "$(cat "$PIDFILE")" 2> /dev/null; then rm -f "$PIDFILE"; fi
    if ! ip link show svcb-default > /dev/null 2>&1; then
        ip link add svcb-default type bridge
        ip addr add "$BRIDGE_ADDRESS" dev svcb-default
        ip link set svcb-default up
    fi
    mkdir -p "$DATA" "$EXEC_ROOT"
}
docker0_address() { ip -4 -o addr show dev docker0 2> /dev/null | awk '{ print $4 }' | head -n 1 || true; }

case ${1:-} in
    --foreground)
        prepare
        docker0_address > "$DOCKER0_FILE"
        PATH=$RUNTIME_DIR:$PATH exec dockerd "${DOCKERD_ARGS[@]}"
        ;;
    --after-start)
        for _ in $(seq 1 300); do answers && break; sleep 0.1; done
        answers || { echo "the sandbox engine does not answer on $SOCK" >&2; exit 1; }
        put_back_docker0 "$(cat "$DOCKER0_FILE" 2> /dev/null || true)"
        nat
        exit 0
        ;;
esac

if answers && [ "${1:-}" = --restart ]; then
    stop_engine
elif answers; then
    nat
    install_runtime
    say "sandbox engine: answering on $SOCK"
    running=$(running_pool)
    [ "$running" = "$POOL/$NETWORK_SIZE" ] \
        || say "sandbox engine: it cuts ${running:-an unknown pool}, not $POOL/$NETWORK_SIZE; \`bash scripts/sandbox-engine.sh --restart\` starts it so (its running sandboxes stop)"
    has_runtime "$(cat "$PIDFILE" 2> /dev/null || echo none)" \
        || say "sandbox engine: started without $RUNTIME_DIR/runc (sandboxes start 30-40 ms slower); \`bash scripts/sandbox-engine.sh --restart\` starts it with it (its running sandboxes stop)"
    exit 0
fi
[ "${1:-}" != --check ] || exit 1

prepare
docker0=$(docker0_address)

t0=${EPOCHREALTIME/,/.}
printf '[setup] sandbox engine: starting dockerd --userns-remap (log %s) ... ' "$LOG"
PATH=$RUNTIME_DIR:$PATH setsid -f dockerd "${DOCKERD_ARGS[@]}" < /dev/null >> "$LOG" 2>&1 9>&-
for _ in $(seq 1 300); do answers && break; sleep 0.1; done
if ! answers; then
    echo failed
    tail -n 15 "$LOG" >&2
    exit 1
fi
put_back_docker0 "$docker0"
nat
awk -v a="$t0" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "ok (%.1fs)\n", b - a }'
