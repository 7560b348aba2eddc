#!/usr/bin/env bash
# Makes this Debian 12/13 machine a runner host of an svc service (docs/scale-out.md, issue 20): its
# sandbox engine (scripts/sandbox-engine.sh: userns-remap, cgroup parent, egress rules) and, once the
# service has signed its certificate, that engine on tcp 2376 for the service alone (mutual TLS).
#
#   scripts/runner.sh NAME SERVICE_ADDRESS --pool CIDR [--private CIDRS]
#       SERVICE_ADDRESS  the service machine's IPv4 address on the private network (the only one that
#                        may open connections to sandboxes: its edge)
#       --pool           this host's sandbox addresses, a /16 no other host uses: not the service
#                        machine's own (10.213.0.0/16 unless set), whose sandboxes would then share
#                        addresses with this host's (the edge dials them by address)
#       --private        more networks sandboxes must not reach (CIDRs, comma-separated), besides
#                        SERVICE_ADDRESS and every private network (RFC 1918, 100.64/10), always kept off
#       --network-size   the prefix of each sandbox's network in the pool (28: 4096 sandboxes in a /16)
#     Starts the engine (local socket only), makes the engine's key and its certificate request, and
#     prints the one command to type on the service machine.
#   scripts/runner.sh --certs DIR     the folder that command wrote (ca.pem, cert.pem): the engine is
#                                     started again with them, listening on 2376
#   scripts/runner.sh --start         starts the engine and the host duties again as set up (after a reboot)
#   scripts/runner.sh --stop          stops the engine (its sandboxes stop; their volumes stay)
#
# Settings are kept in /etc/svc-runner/runner.env, the key and certificates in /etc/svc-runner/tls.
# The sandbox image is not built here: the service copies its own build over the engine's mutual TLS
# before the first sandbox it makes here and after each change of it (lifecycle/runtime/image-sync.ts).
# SVC_ENGINE_NAME and SVC_RUNNER_ETC move the engine and the settings (a second runner on one machine).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ETC=${SVC_RUNNER_ETC:-/etc/svc-runner}
TLS=$ETC/tls
ENGINE=${SVC_ENGINE_NAME:-svc-sandbox-docker}
export SVC_ENGINE_NAME=$ENGINE
PIDFILE=/run/$ENGINE.pid
DUTIES_PIDFILE=/run/$ENGINE.duties.pid

fail() { echo "runner: $*" >&2; exit 1; }
# Kept off sandboxes on every runner whatever --private adds: the deployment's other machines live there
PRIVATE_RANGES=10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10
[ "$(id -u)" = 0 ] || fail "run as root"

# IPv4 nameservers of this host (systemd-resolved's upstreams where resolv.conf names its stub): its
# sandboxes are given them (svc hosts add --dns) and its egress rules let them through on port 53
nameservers() {
    local f=/etc/resolv.conf
    grep -qE '^nameserver 127\.' "$f" && [ -f /run/systemd/resolve/resolv.conf ] && f=/run/systemd/resolve/resolv.conf
    awk '$1 == "nameserver" && $2 ~ /^[0-9.]+$/ && $2 !~ /^127\./ { print $2 }' "$f" | paste -sd, -
}

private_address() { ip -4 route get "$SERVICE_ADDRESS" | grep -oE 'src [0-9.]+' | cut -d' ' -f2; }

stop_engine() {
    local pid
    [ -f "$PIDFILE" ] && pid=$(cat "$PIDFILE") && kill -0 "$pid" 2> /dev/null || return 0
    kill "$pid"
    for _ in $(seq 1 300); do kill -0 "$pid" 2> /dev/null || return 0; sleep 0.1; done
    fail "the engine (pid $pid) did not stop"
}

start_engine() {
    # shellcheck source=/dev/null
    . "$ETC/runner.env"
    # EXTRA_PRIVATE: --private's networks; PRIVATE: what a runner set up before the ranges were kept
    # off wrote (the service address alone, or --private), taken as more networks to keep off
    local private="$SERVICE_ADDRESS,$PRIVATE_RANGES${EXTRA_PRIVATE:+,$EXTRA_PRIVATE}${PRIVATE:+,$PRIVATE}"
    # 2376 only on the address the service reaches this host at (the one `svc hosts add` was given)
    SVC_ENGINE_LISTEN_ADDRESS=$(private_address) SVC_SANDBOX_ADDRESS_POOL=$POOL SVC_SANDBOX_NETWORK_SIZE=$SIZE SVC_ENGINE_SERVICE_ADDRESS=$SERVICE_ADDRESS SVC_ENGINE_PRIVATE_NETWORK=$private SVC_ENGINE_DNS=$(nameservers) \
        SVC_ENGINE_TLS_DIR=$([ -f "$TLS/cert.pem" ] && echo "$TLS" || true) bash "$ROOT/scripts/sandbox-engine.sh"
    # the cgroup hand-over of every sandbox it starts (the service cannot do it from its machine)
    if ! { [ -f "$DUTIES_PIDFILE" ] && kill -0 "$(cat "$DUTIES_PIDFILE")" 2> /dev/null; }; then
        setsid bash "$ROOT/scripts/host-duties.sh" "/run/$ENGINE.sock" < /dev/null >> "/var/log/$ENGINE-duties.log" 2>&1 &
        echo $! > "$DUTIES_PIDFILE"
    fi
}

case ${1:-} in
    --start)
        [ -f "$ETC/runner.env" ] || fail "not set up yet: scripts/runner.sh NAME SERVICE_ADDRESS --pool CIDR"
        start_engine
        exit 0
        ;;
    --stop)
        [ -f "$DUTIES_PIDFILE" ] && kill -- "-$(cat "$DUTIES_PIDFILE")" 2> /dev/null && rm -f "$DUTIES_PIDFILE"
        stop_engine
        exit 0
        ;;
    --certs)
        [ -f "${2:-}/ca.pem" ] && [ -f "$2/cert.pem" ] || fail "--certs needs the folder svc hosts add wrote (ca.pem, cert.pem)"
        openssl x509 -in "$2/cert.pem" -noout -pubkey | cmp -s - <(openssl pkey -in "$TLS/key.pem" -pubout) \
            || fail "$2/cert.pem is not for this runner's key ($TLS/key.pem)"
        install -m 0644 "$2/ca.pem" "$2/cert.pem" "$TLS/"
        stop_engine
        start_engine
        echo "runner: the engine listens on 2376 for the service (mutual TLS); npx svc hosts list shows it ready"
        exit 0
        ;;
    ''|-*) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

NAME=$1 SERVICE_ADDRESS=${2:-}
shift 2 || fail "usage: scripts/runner.sh NAME SERVICE_ADDRESS --pool CIDR [--private CIDRS]"
POOL='' EXTRA_PRIVATE='' SIZE=28
while [ $# -gt 0 ]; do
    case $1 in
        --pool) POOL=$2; shift 2 ;;
        --private) EXTRA_PRIVATE=$2; shift 2 ;;
        --network-size) SIZE=$2; shift 2 ;;
        *) fail "unknown option $1" ;;
    esac
done
[[ $NAME =~ ^[a-z0-9][a-z0-9-]{0,30}$ ]] || fail "NAME: lowercase letters, digits and -, at most 31"
# without it the engine would start with no egress rules at all (sandbox-engine.sh)
[[ $SERVICE_ADDRESS =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] || fail "SERVICE_ADDRESS: the service machine's IPv4 address"
[[ $POOL =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$ ]] || fail "--pool: this host's own sandbox addresses (a CIDR like 10.220.0.0/16), none the service machine or another host uses"
for c in ${EXTRA_PRIVATE//,/ }; do
    [[ $c =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}(/[0-9]{1,2})?$ ]] || fail "--private: \"$c\" is not an IPv4 address or CIDR (comma-separated, no spaces)"
done
[ "$POOL" != 10.213.0.0/16 ] || fail "--pool: 10.213.0.0/16 is the service machine's own pool (scripts/sandbox-engine.sh)"

for tool in dockerd iptables ip openssl; do
    command -v "$tool" > /dev/null || { apt-get update -q && apt-get install -y -q docker.io iptables iproute2 openssl; break; }
done
mkdir -p "$TLS" && chmod 700 "$ETC" "$TLS"
[[ $SIZE =~ ^[0-9]+$ ]] && [ "$SIZE" -gt "${POOL#*/}" ] && [ "$SIZE" -le 29 ] || fail "--network-size must lie between the pool's prefix and 29"
printf 'NAME=%q\nSERVICE_ADDRESS=%q\nPOOL=%q\nEXTRA_PRIVATE=%q\nSIZE=%q\n' "$NAME" "$SERVICE_ADDRESS" "$POOL" "$EXTRA_PRIVATE" "$SIZE" > "$ETC/runner.env"
start_engine
[ -f "$TLS/key.pem" ] || openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$TLS/key.pem" -subj "/CN=$NAME" -out "$TLS/request.csr" 2> /dev/null
ADDRESS=$(private_address)

cat <<EOF

On the service machine, add this host (then copy the folder it writes here and run
scripts/runner.sh --certs $NAME-certs):

npx svc hosts add $NAME $ADDRESS --pool $POOL --networks $((1 << (SIZE - ${POOL#*/}))) --certs-out $NAME-certs$(DNS=$(nameservers); [ -z "$DNS" ] || echo " --dns $DNS") --csr - <<'CSR'
$(cat "$TLS/request.csr")
CSR

and route this host's sandboxes through it: ip route add $POOL via $ADDRESS
EOF
