#!/usr/bin/env bash
# An agent's path (issue 12), scripted: nothing but the export folder and the commands of the agent
# guide. Starts the sandbox, deploys a two-service compose project, waits for its address (not the
# waiting page), reads its logs (compose and the SSE route), writes and reads files and a volume,
# keeps the sandbox awake. Never prints SVC_TOKEN. Every wait is bounded.
#
#   agent-path.sh EXPORT_FOLDER PROJECT_FOLDER        (test/export/agent-path.test.ts runs it)
set -euo pipefail
EXPORT=$1
PROJECT=$2
say() { printf '[agent] %s\n' "$*"; }
die() { say "FAILED: $*" >&2; exit 1; }
# until_ok SECONDS WHAT COMMAND...: retries COMMAND every 2 s until it succeeds or time runs out
until_ok() {
    local deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@"; do
        [ $SECONDS -lt $deadline ] || die "timed out waiting for $what"
        sleep 2
    done
}

# 1. Read svc.env
cd "$EXPORT"
set -a; . ./svc.env; set +a
CA=; [ -f service-ca.pem ] && CA="--cacert $PWD/service-ca.pem"
api() { curl -sf $CA -H "Authorization: Bearer $SVC_TOKEN" "$@"; }
# Readers that take all their input: under pipefail, one that stops early (grep -q, head) fails its writer.
has() { grep -c -- "$1" > /dev/null; }
field() { local json re="\"$1\":\"([^\"]*)\""; json=$(cat); [[ $json =~ $re ]] && echo "${BASH_REMATCH[1]}"; }
curl -sf $CA "$SVC_AGENT_GUIDE" | has 'X-Svc-Waiting' || die "the agent guide is not at $SVC_AGENT_GUIDE"
say "guide read from $SVC_AGENT_GUIDE"

# 2. Check the sandbox, start it
[ "$(api "$SVC_URL/me" | field sandbox)" = "$SVC_SANDBOX" ] || die "the token is not limited to $SVC_SANDBOX"
status=$(api "$SVC_URL/sandboxes/$SVC_SANDBOX" | field status)
say "sandbox $SVC_SANDBOX is $status"
export DOCKER_HOST=$SVC_DOCKER_HOST DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$PWD/docker
if [ "$status" != running ]; then
    if timeout 30 docker ps > /dev/null 2>&1; then die "the engine answered while the sandbox was $status"; fi
    say "engine refused while asleep, as the guide says; starting"
    api -X POST "$SVC_URL/sandboxes/$SVC_SANDBOX/start" > /dev/null
fi
running() { [ "$(api "$SVC_URL/sandboxes/$SVC_SANDBOX" | field status)" = running ]; }
until_ok 120 "the sandbox to run" running
say "running"
out=$(api -H 'content-type: application/json' -d '{"command": "echo from-exec; exit 4"}' "$SVC_URL/sandboxes/$SVC_SANDBOX/exec")
has '"exit_code":4' <<< "$out" || die "exec did not pass the exit code through"
has 'from-exec' <<< "$out" || die "exec did not return stdout"
say "exec ran a command in one call"
curl -sf $CA -o "$EXPORT/svc.mjs" "${SVC_URL%/api}/cli/svc.mjs" || die "the CLI is not at ${SVC_URL%/api}/cli/svc.mjs"
rc=0; node "$EXPORT/svc.mjs" exec -- sh -c 'exit 3' || rc=$?
[ "$rc" = 3 ] || die "the CLI's exec did not pass exit code 3 through (got $rc)"
say "the CLI ran a command, exit code passed through"

# 3. Deploy with docker compose
docker compose version | has ' v\?2\.' || die "docker compose v2 is needed"
docker compose -p agentapp -f "$PROJECT/compose.yaml" up -d --build --quiet-pull 2>&1 | tail -n 3
docker compose -p agentapp -f "$PROJECT/compose.yaml" ps --format '{{.Service}} {{.State}}'

# 4. Find the app's address and wait until the app itself answers
app_url() { local json re="\"(https://$SVC_SANDBOX-web\.[^\"]*)\""; json=$(api "$SVC_URL/sandboxes/$SVC_SANDBOX") && [[ $json =~ $re ]] && echo "${BASH_REMATCH[1]}"; }
until_ok 120 "the app's address in the record" test -n "$(app_url)"
URL=$(app_url)
answers() {
    local h
    h=$(curl -s $CA -D - -o "$EXPORT/.page" "$URL") && grep -q '^HTTP/[0-9.]* 200' <<< "$h" && ! grep -qi '^x-svc-waiting' <<< "$h"
}
until_ok 120 "$URL to answer (not the waiting page)" answers
grep -q 'hello from the agent app' "$EXPORT/.page" || die "$URL answered something else: $(head -c 200 "$EXPORT/.page")"
rm -f "$EXPORT/.page"
say "app answers at $URL"

# 5. Logs: compose, then the SSE route
worker_logs() { local logs; logs=$(docker compose -p agentapp -f "$PROJECT/compose.yaml" logs --tail 20 worker) && grep -q 'worker tick' <<< "$logs"; }
until_ok 60 "the worker's logs" worker_logs
# the stream stays open: read it for a few seconds (--max-time ends curl with 28, expected)
sse_line() { local events; events=$(api -N --max-time 6 "$SVC_URL/sandboxes/$SVC_SANDBOX/logs/stream?tail=5" || true); grep -q '"line":"worker tick' <<< "$events"; }
until_ok 60 "a worker line on the log stream" sse_line
say "logs read (compose and SSE)"

# 6. Files and volumes
printf 'written by the agent\n' > "$EXPORT/.note"
api -X PUT --data-binary @"$EXPORT/.note" "$SVC_URL/sandboxes/$SVC_SANDBOX/files/content?path=/srv/agent-note.txt" > /dev/null
rm -f "$EXPORT/.note"
api "$SVC_URL/sandboxes/$SVC_SANDBOX/files/text?path=/srv/agent-note.txt" | has 'written by the agent' || die "the file did not read back"
api "$SVC_URL/sandboxes/$SVC_SANDBOX/files?path=/srv" | has '"name":"agent-note.txt"' || die "the file is not listed"
volumes=$(api "$SVC_URL/sandboxes/$SVC_SANDBOX/volumes")
re='"path":"([^"]*agentapp_data[^"]*)"'
[[ $volumes =~ $re ]] && VOLUME=${BASH_REMATCH[1]} || VOLUME=""
[ -n "$VOLUME" ] || die "the volume agentapp_data is not listed"
volume_written() { api "$SVC_URL/sandboxes/$SVC_SANDBOX/files/text?path=$VOLUME/last" | has '"text":"[0-9]'; }
until_ok 60 "the worker's file in the volume" volume_written
say "files written and read; volume at $VOLUME"

# 7. Keep it awake
before=$(api "$SVC_URL/sandboxes/$SVC_SANDBOX" | field stops_at)
sleep 1
after=$(api -X POST "$SVC_URL/sandboxes/$SVC_SANDBOX/keep-awake" | field stops_at)
[[ "$after" > "$before" ]] || die "keep-awake did not move stops_at ($before → $after)"
say "kept awake: stops_at $before → $after"
say "done"
