#!/usr/bin/env bash
# Installs the service as systemd units (docs/operations.md, "System service"):
#   /etc/systemd/system/svc-sandbox-engine.service   the sandbox engine (scripts/sandbox-engine.sh --foreground)
#   /etc/systemd/system/svc.service                  the service (node main.ts), after the engine, Redis, PostgreSQL
#   /etc/svc/svc.env                                 its environment (0600), only when it does not exist yet
# Both restart on failure and log to the journal (journalctl -u svc -u svc-sandbox-engine). Then, where
# systemd runs, enables and starts them, taking over from an engine setup started in the background.
#
#   bash scripts/install-service.sh [--dest DIR] [--no-start]
#     --dest DIR   install under DIR instead of / (to look at or verify the units); implies --no-start
#     --no-start   install and daemon-reload only
# Run as root from the checkout the service runs from (its path goes into the units); npm run setup first.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=/
START=1
while [ $# -gt 0 ]; do
    case $1 in
        --dest) DEST=${2:?--dest needs a folder}; START=0; shift 2 ;;
        --no-start) START=0; shift ;;
        -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "usage: $0 [--dest DIR] [--no-start]" >&2; exit 2 ;;
    esac
done

say() { printf '[install-service] %s\n' "$*"; }
fail() { say "FAILED: $*" >&2; exit 1; }

[ "$DEST" != / ] || [ "$(id -u)" = 0 ] || fail "run as root (it writes /etc/systemd/system and /etc/svc)"
NODE=$(command -v node) || fail "node is not on PATH: install Node 20"
[ -x "$ROOT/node_modules/.bin/tsx" ] || fail "$ROOT/node_modules is missing: run npm run setup first"

UNITS="$DEST/etc/systemd/system"
ENV_FILE="$DEST/etc/svc/svc.env"
mkdir -p "$UNITS"
install -d -m 700 "$(dirname "$ENV_FILE")"
for unit in svc-sandbox-engine.service svc.service; do
    sed -e "s|@ROOT@|$ROOT|g" -e "s|@NODE@|$NODE|g" "$ROOT/deploy/systemd/$unit" > "$UNITS/$unit.tmp"
    chmod 644 "$UNITS/$unit.tmp"
    mv "$UNITS/$unit.tmp" "$UNITS/$unit"
    say "wrote $UNITS/$unit"
done
if [ -e "$ENV_FILE" ]; then
    say "kept $ENV_FILE (yours)"
else
    install -m 600 "$ROOT/deploy/systemd/svc.env" "$ENV_FILE"
    say "wrote $ENV_FILE (0600): set SVC_DOMAIN and the rest there"
fi

[ "$DEST" = / ] || { say "installed under $DEST (systemd-analyze verify $UNITS/*.service checks them)"; exit 0; }
if [ ! -d /run/systemd/system ]; then
    say "systemd is not running on this machine: units installed, nothing started"
    exit 0
fi
systemctl daemon-reload
[ "$START" = 1 ] || { say "installed; start with: systemctl enable --now svc-sandbox-engine svc"; exit 0; }
# an engine that setup started in the background holds the socket: the unit takes over from it
if ! systemctl is-active -q svc-sandbox-engine && [ -f /run/svc-sandbox-docker.pid ] && kill -0 "$(cat /run/svc-sandbox-docker.pid)" 2> /dev/null; then
    say "stopping the sandbox engine setup started in the background (running sandboxes restart with it)"
    kill "$(cat /run/svc-sandbox-docker.pid)"
    for _ in $(seq 1 300); do [ -S /run/svc-sandbox-docker.sock ] || break; sleep 0.1; done
fi
systemctl enable --now svc-sandbox-engine.service svc.service
say "started: systemctl status svc; logs: journalctl -u svc -f"
