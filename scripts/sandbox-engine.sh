#!/usr/bin/env bash
# Starts the sandbox engine: a Docker engine of the service's own, apart from the machine's main engine,
# that runs every sandbox container in a user namespace (--userns-remap): root in a sandbox is an
# unprivileged uid range on the host (100000 + n). Idempotent; `--check` only says whether it answers.
# Under systemd (deploy/systemd/svc-sandbox-engine.service): `--foreground` becomes dockerd itself (it
# tells systemd when it is ready), `--after-start` then puts back docker0 and the NAT rule.
#
#   socket     /run/svc-sandbox-docker.sock   (SVC_SANDBOX_DOCKER_HOST=unix:///run/svc-sandbox-docker.sock)
#   data root  /var/lib/svc-sandbox-docker    (images, the sandboxes' volumes)
#   log        /var/log/svc-sandbox-dockerd.log
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
set -euo pipefail

SOCK=/run/svc-sandbox-docker.sock
DATA=/var/lib/svc-sandbox-docker
EXEC_ROOT=/run/svc-sandbox-docker
PIDFILE=/run/svc-sandbox-docker.pid
LOG=/var/log/svc-sandbox-dockerd.log
POOL=${SVC_SANDBOX_ADDRESS_POOL:-10.213.0.0/16}

DOCKER0_FILE=/run/svc-sandbox-docker.docker0
DOCKERD_ARGS=(--host "unix://$SOCK" --data-root "$DATA" --exec-root "$EXEC_ROOT" --pidfile "$PIDFILE"
    --userns-remap=default --iptables=false --ip6tables=false --ip-masq=false --bridge=svcb-default
    --default-address-pool "base=$POOL,size=24" --cgroup-parent=/svc-sandboxes --exec-opt native.cgroupdriver=cgroupfs
    --log-opt max-size=10m --log-opt max-file=2)

say() { printf '[setup] %s\n' "$*"; }
answers() { timeout 10 docker -H "unix://$SOCK" info --format '{{.ServerVersion}}' > /dev/null 2>&1; }

# Outgoing NAT for the sandboxes' pool (dockerd does none with --iptables=false). Checked on every run:
# a host reboot empties the tables while the engine may come back by itself.
nat() {
    sysctl -qw net.ipv4.ip_forward=1
    iptables -w 5 -t nat -C POSTROUTING -s "$POOL" ! -o 'svcb+' -j MASQUERADE 2> /dev/null \
        || iptables -w 5 -t nat -A POSTROUTING -s "$POOL" ! -o 'svcb+' -j MASQUERADE
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
# The default bridge of this engine, outside the sandboxes' pool.
prepare() {
    if [ -f "$PIDFILE" ] && ! kill -0 "$(cat "$PIDFILE")" 2> /dev/null; then rm -f "$PIDFILE"; fi
    if ! ip link show svcb-default > /dev/null 2>&1; then
        ip link add svcb-default type bridge
        ip addr add 10.214.0.1/24 dev svcb-default
        ip link set svcb-default up
    fi
    mkdir -p "$DATA" "$EXEC_ROOT"
}
docker0_address() { ip -4 -o addr show dev docker0 2> /dev/null | awk '{ print $4 }' | head -n 1 || true; }

case ${1:-} in
    --foreground)
        prepare
        docker0_address > "$DOCKER0_FILE"
        exec dockerd "${DOCKERD_ARGS[@]}"
        ;;
    --after-start)
        for _ in $(seq 1 300); do answers && break; sleep 0.1; done
        answers || { echo "the sandbox engine does not answer on $SOCK" >&2; exit 1; }
        put_back_docker0 "$(cat "$DOCKER0_FILE" 2> /dev/null || true)"
        nat
        exit 0
        ;;
esac

if answers; then
    nat
    say "sandbox engine: answering on $SOCK"
    exit 0
fi
[ "${1:-}" != --check ] || exit 1

prepare
docker0=$(docker0_address)

t0=${EPOCHREALTIME/,/.}
printf '[setup] sandbox engine: starting dockerd --userns-remap (log %s) ... ' "$LOG"
setsid -f dockerd "${DOCKERD_ARGS[@]}" < /dev/null >> "$LOG" 2>&1 9>&-
for _ in $(seq 1 300); do answers && break; sleep 0.1; done
if ! answers; then
    echo failed
    tail -n 15 "$LOG" >&2
    exit 1
fi
put_back_docker0 "$docker0"
nat
awk -v a="$t0" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "ok (%.1fs)\n", b - a }'
