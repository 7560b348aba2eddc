#!/usr/bin/env bash
# Sets up everything the service and its tests need on a Debian 12 or 13 machine (run as root):
# Debian packages, node_modules, a running host Docker engine, Redis, PostgreSQL with database svc_test,
# the sandbox image (svc-sandbox:latest) and the fixture images.
#
#   bash scripts/setup.sh           checks everything, installs and builds what is missing, then runs a
#                                   container to prove the engine works and runs `svc doctor` (operator/doctor.ts)
#   bash scripts/setup.sh --ensure  the same without that last proof (run by `npm test` / `npm start`)
#   SVC_RUNTIME=incus, or --incus   also Incus and the sandbox image in it (scripts/incus-host.sh, docs/incus.md);
#                                   without it only Incus's packages (the test cluster's), no daemon
#
# Idempotent: on a machine already set up either mode only checks (about half a second). Works without a
# terminal (CI). Concurrent runs wait for each other (lock in /run/lock).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODE=full
INCUS=0
[ "${SVC_RUNTIME:-}" != incus ] || INCUS=1
for a in "$@"; do
    case $a in
        --ensure) MODE=ensure ;;
        --incus) INCUS=1 ;;
        -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "usage: $0 [--ensure] [--incus]" >&2; exit 2 ;;
    esac
done

export DEBIAN_FRONTEND=noninteractive DOCKER_BUILDKIT=0
APT_PACKAGES=(docker.io containerd runc iptables redis-server redis-tools postgresql postgresql-client
    debootstrap busybox-static docker-registry openssl ca-certificates util-linux procps iproute2
    openssh-client curl zstd python3 make g++ chromium unzip prometheus libnss-myhostname haproxy wrk) # zstd: scanner reads zstd layers; python3,
    # make, g++ build native node modules (sqlite3); chromium drives the web UI tests (playwright-core, no browser download); unzip
    # reads export folders; prometheus gives promtool, which checks the /metrics scrape (its server is not started at install);
    # libnss-myhostname resolves every *.localhost name to this machine for every program (see "names" below); haproxy is
    # the data plane, which owns the public port (the service runs its own, never the package's service); wrk loads bench/edge.ts
DOCKERD_LOG=/var/log/svc-dockerd.log

T_START=${EPOCHREALTIME/,/.}
say() { printf '[setup] %s\n' "$*"; }
now() { echo "${EPOCHREALTIME/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
fail() { say "FAILED: $*" >&2; exit 1; }

# `step "label" "action" cmd...` prints "[setup] label: action ... ok (1.2s)" around a slow action.
step() {
    local label=$1 action=$2 t0
    shift 2
    t0=$(now)
    printf '[setup] %s: %s ... ' "$label" "$action"
    if "$@"; then echo "ok ($(since "$t0"))"; else echo "failed ($(since "$t0"))"; return 1; fi
}

# Wait up to $2 seconds for command $1... to succeed.
wait_for() {
    local secs=$1 i
    shift
    for ((i = 0; i < secs * 10; i++)); do
        "$@" > /dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

[ "$(id -u)" = 0 ] || fail "run as root (it installs packages and starts dockerd)"

# One setup at a time: parallel test runs would otherwise both build the image or start dockerd.
# Daemons started below get `9>&-`: one that inherited the lock would hold it for its whole life.
mkdir -p /run/lock
exec 9> /run/lock/svc-setup.lock
if ! flock -n 9; then
    say "another setup run holds /run/lock/svc-setup.lock; waiting for it ..."
    flock 9
fi

# --- Debian packages -----------------------------------------------------------------------------------
missing_packages() {
    local installed p
    # one dpkg-query for all: it is the slow part of a quick run
    # (dpkg-query fails when any package is unknown; its output for the others still counts)
    installed=" $({ dpkg-query -W -f='${db:Status-Abbrev}|${Package}\n' "${APT_PACKAGES[@]}" 2> /dev/null || true; } | sed -n 's/^ii *|//p' | tr '\n' ' ') "
    for p in "${APT_PACKAGES[@]}"; do
        [[ $installed == *" $p "* ]] || echo "$p"
    done
}
install_packages() {
    # policy-rc.d keeps package scripts from starting services: this script starts them its own way
    local policy=/usr/sbin/policy-rc.d had_policy=0
    [ -e $policy ] && had_policy=1
    if [ $had_policy = 0 ]; then printf '#!/bin/sh\nexit 101\n' > $policy; chmod +x $policy; fi
    local rc=0
    { apt-get update -q && apt-get install -y -q --no-install-recommends "$@"; } > /var/log/svc-apt.log 2>&1 || rc=$?
    [ $had_policy = 1 ] || rm -f $policy
    [ $rc = 0 ] || { tail -n 20 /var/log/svc-apt.log >&2; return $rc; }
}
missing_list=$(missing_packages)
mapfile -t missing <<< "$missing_list"
[ -n "${missing[0]:-}" ] || missing=()
if [ ${#missing[@]} -gt 0 ]; then
    step packages "apt-get install ${missing[*]}" install_packages "${missing[@]}" \
        || fail "apt-get install failed, log in /var/log/svc-apt.log"
else
    say "packages: all ${#APT_PACKAGES[@]} present"
fi

# --- names ---------------------------------------------------------------------------------------------
# The service's addresses are names under SVC_DOMAIN (localhost by default): <sandbox>-engine.localhost,
# <sandbox>-shell-tcp.localhost, the app addresses. Browsers and curl resolve *.localhost themselves; docker,
# ssh and node ask the system, which does through the myhostname module (127.0.0.1 and ::1) once it is on
# the hosts line. The package's own install puts it there; this puts it back after a hand-edited file.
NSSWITCH=/etc/nsswitch.conf
add_myhostname() {
    if grep -Eq '^hosts:.*[[:space:]]files([[:space:]]|$)' $NSSWITCH; then
        sed -i -E '/^hosts:/ s/([[:space:]])files([[:space:]]|$)/\1files myhostname\2/' $NSSWITCH
    elif grep -q '^hosts:' $NSSWITCH; then
        sed -i -E '/^hosts:/ s/$/ myhostname/' $NSSWITCH
    else
        echo 'hosts: files myhostname dns' >> $NSSWITCH
    fi
    getent hosts svc-setup-check.localhost > /dev/null
}
if grep -Eq '^hosts:.*[[:space:]]myhostname([[:space:]]|$)' $NSSWITCH; then
    say "names: *.localhost resolves to this machine (myhostname in $NSSWITCH)"
else
    step names "myhostname on the hosts line of $NSSWITCH (*.localhost is this machine)" add_myhostname \
        || fail "*.localhost does not resolve after adding myhostname to $NSSWITCH: is libnss-myhostname installed?"
fi

# --- packages from trixie: compose v2, buildx, gitleaks ------------------------------------------------
# Debian 12 has only compose v1 (python) and no gitleaks. Debian 13 (trixie) packages compose v2 and buildx
# as docker CLI plugins, and gitleaks (the reference the secret-scan tests and bench measure the scanner
# against; not used by the service); all three need only libc6 >= 2.34, which bookworm has. An apt source
# for trixie pinned to priority 1 (never chosen by itself) lets exactly these packages come from it (500).
TRIXIE_SOURCE=/etc/apt/sources.list.d/svc-trixie.sources
TRIXIE_PIN=/etc/apt/preferences.d/svc-trixie
TRIXIE_PACKAGES=(docker-compose docker-buildx gitleaks)
add_trixie_source() {
    grep -qs '^Suites:.*trixie' /etc/apt/sources.list /etc/apt/sources.list.d/* 2> /dev/null || cat > $TRIXIE_SOURCE << 'EOS'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
    # a pin written by an older setup names fewer packages: written whole each time
    cat > $TRIXIE_PIN << EOS
Package: *
Pin: release n=trixie
Pin-Priority: 1

Package: ${TRIXIE_PACKAGES[*]}
Pin: release n=trixie
Pin-Priority: 500
EOS
}
compose_v2() { docker compose version --short 2> /dev/null | grep -q '^v\?2\.'; }
if compose_v2 && docker buildx version > /dev/null 2>&1 && command -v gitleaks > /dev/null; then
    say "compose: $(docker compose version --short), buildx and gitleaks present"
else
    # on Debian 13 they are its own packages: no source, no pin (a pin would hold back its point releases)
    (. /etc/os-release && [ "${VERSION_CODENAME:-}" = trixie ]) || add_trixie_source
    step trixie "apt-get install ${TRIXIE_PACKAGES[*]} (from trixie)" \
        install_packages "${TRIXIE_PACKAGES[@]}" \
        || fail "could not install ${TRIXIE_PACKAGES[*]} from trixie, log in /var/log/svc-apt.log"
    compose_v2 || fail "docker compose is not v2 after the install: $(docker compose version 2>&1 | head -n 1)"
fi

# --- node_modules --------------------------------------------------------------------------------------
command -v node > /dev/null || fail "Node.js 20 is not installed"
if [ -L "$ROOT/node_modules" ]; then
    # a git worktree borrowing another checkout's modules: npm ci would empty that checkout's folder
    say "node modules: $ROOT/node_modules is a link to $(readlink -f "$ROOT/node_modules"); left as it is"
elif [ ! -f "$ROOT/node_modules/.package-lock.json" ] \
    || [ "$ROOT/package-lock.json" -nt "$ROOT/node_modules/.package-lock.json" ]; then
    npm_ci() { (cd "$ROOT" && npm ci --no-audit --no-fund > /tmp/svc-npm-ci.log 2>&1); }
    # npm ci refuses a lock file that is out of step with package.json; install from it anyway (the lock
    # still pins every version it has) so tests can run, and say loudly that the lock needs a fix.
    npm_install() { (cd "$ROOT" && npm install --no-save --no-audit --no-fund > /tmp/svc-npm-ci.log 2>&1) || { tail -n 30 /tmp/svc-npm-ci.log >&2; return 1; }; }
    if ! step "node modules" "npm ci" npm_ci; then
        if grep -q 'can only install packages when your package.json and package-lock.json' /tmp/svc-npm-ci.log; then
            # Seen with registries that carry only some platforms' optional packages: the lock cannot
            # list the others, so npm ci refuses it even right after npm install wrote it.
            say "note: npm ci refused the lock ($(grep -m1 'Missing:' /tmp/svc-npm-ci.log | sed 's/^npm error //')); installing the locked versions with npm install instead"
            step "node modules" "npm install --no-save (fallback)" npm_install || fail "npm install failed, log in /tmp/svc-npm-ci.log"
        else
            tail -n 30 /tmp/svc-npm-ci.log >&2
            fail "npm ci failed, log in /tmp/svc-npm-ci.log"
        fi
    fi
else
    say "node modules: up to date"
fi

# --- web UI --------------------------------------------------------------------------------------------
# Built into ui/dist when its inputs (ui/ less dist, and the lock file) differ from the last build's.
ui_inputs() {
    (cd "$ROOT" && { find ui -path ui/dist -prune -o -type f -print | LC_ALL=C sort | xargs sha256sum; sha256sum package-lock.json; } \
        | sha256sum | cut -c1-16)
}
build_ui() { (cd "$ROOT" && npx vite build ui > /tmp/svc-ui-build.log 2>&1) && ui_inputs > "$ROOT/ui/dist/.inputs"; }
if [ "$(cat "$ROOT/ui/dist/.inputs" 2> /dev/null)" = "$(ui_inputs)" ]; then
    say "web UI: built"
else
    step "web UI" "vite build ui (log /tmp/svc-ui-build.log)" build_ui \
        || fail "the web UI did not build: $(tail -n 15 /tmp/svc-ui-build.log)"
fi

# --- host Docker engine --------------------------------------------------------------------------------
docker_version() { timeout 10 docker info --format '{{.ServerVersion}}' 2> /dev/null; }
docker_answers() { [ -n "$(docker_version)" ]; }
start_dockerd() {
    # The engine's pid file may name a process that is gone (machine restored from a snapshot).
    if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2> /dev/null; then
        rm -f /var/run/docker.pid
    fi
    # setsid: the engine must outlive this script and the test run that called it
    setsid -f dockerd < /dev/null >> "$DOCKERD_LOG" 2>&1 9>&-
    wait_for 30 docker_answers
}
if version=$(docker_version) && [ -n "$version" ]; then
    say "docker engine: answering ($version)"
else
    [ -f /var/run/docker.pid ] && kill -0 "$(cat /var/run/docker.pid)" 2> /dev/null \
        && say "docker engine: dockerd (pid $(cat /var/run/docker.pid)) runs but does not answer; waiting"
    step "docker engine" "starting dockerd (log $DOCKERD_LOG)" start_dockerd \
        || fail "the Docker engine did not answer within 30 s; last lines of $DOCKERD_LOG:
$(tail -n 15 "$DOCKERD_LOG" 2> /dev/null)"
fi

# --- Redis ---------------------------------------------------------------------------------------------
# A Redis that already answers without a password (CI's, started before us) is used as it is. One this
# script starts gets an ACL user `svc` with a random password and the default user off; the URL is kept
# only in /etc/svc/redis.url (0600), which the service reads when REDIS_URL is unset.
REDIS_ACL_DIR=/etc/svc
redis_open() { [ "$(timeout 5 redis-cli -h 127.0.0.1 -p 6379 ping 2> /dev/null)" = PONG ]; }
if bash "$ROOT/scripts/redis-acl.sh" ping 6379 $REDIS_ACL_DIR; then
    say "redis: answering on 127.0.0.1:6379 (ACL user svc)"
elif redis_open; then
    say "redis: answering on 127.0.0.1:6379 (no password: started outside this script)"
    # a URL for a Redis that is gone would send the service to a password this one does not know
    [ ! -e $REDIS_ACL_DIR/redis.url ] || { rm -f $REDIS_ACL_DIR/redis.url; say "redis: removed the stale $REDIS_ACL_DIR/redis.url"; }
else
    step redis "starting redis-server on 127.0.0.1:6379 (ACL user svc, URL in $REDIS_ACL_DIR/redis.url)" \
        bash "$ROOT/scripts/redis-acl.sh" start 6379 $REDIS_ACL_DIR /var/log/svc-redis.log \
        || fail "redis did not answer, see /var/log/svc-redis.log"
fi

# --- PostgreSQL ----------------------------------------------------------------------------------------
pg_answers() { pg_isready -q -h 127.0.0.1 -t 2; }
pg_version() { ls /etc/postgresql 2> /dev/null | sort -V | tail -n 1; }
start_postgres() {
    local v
    v=$(pg_version)
    [ -n "$v" ] || { pg_createcluster --start-conf=auto "$(ls /usr/lib/postgresql | sort -V | tail -n 1)" main > /dev/null; v=$(pg_version); }
    pg_ctlcluster --skip-systemctl-redirect "$v" main start 9>&-
    wait_for 20 pg_answers
}
# Tests use role svc_test (no superuser) and its own database svc_test. Only that pair is trusted on
# loopback; the service's own database and the postgres role keep their passwords.
# quick path: one query answers "running", "svc_test may connect" and "svc_test owns its database"
svc_test_ready() { [ "$(psql -h 127.0.0.1 -U svc_test -d svc_test -w -tAc "select count(*) from pg_database where datname = 'svc_test' and pg_get_userbyid(datdba) = 'svc_test'" 2> /dev/null)" = 1 ]; }
if svc_test_ready; then
    say "postgres: answering on 127.0.0.1:5432, role and database svc_test ready"
else
    if pg_answers; then
        say "postgres: answering on 127.0.0.1:5432"
    else
        step postgres "starting PostgreSQL $(pg_version)" start_postgres || fail "PostgreSQL did not start"
    fi
    # as the postgres OS user over the local socket (peer auth on a stock Debian cluster)
    as_postgres() { (cd / && runuser -u postgres -- "$@"); }
    pg_sql() { as_postgres psql -X -q -v ON_ERROR_STOP=1 -d "${2:-postgres}" -tAc "$1"; }
    svc_test_role() {
        [ "$(pg_sql "select count(*) from pg_roles where rolname = 'svc_test'")" = 1 ] \
            || pg_sql 'create role svc_test login nosuperuser nocreatedb nocreaterole'
        if [ "$(pg_sql "select count(*) from pg_database where datname = 'svc_test'")" = 1 ]; then
            # a database made by older versions for the postgres role: hand it and its tables over
            pg_sql 'alter database svc_test owner to svc_test' \
                && pg_sql "do \$\$ declare t record; begin for t in select tablename from pg_tables where schemaname = 'public' and tableowner <> 'svc_test' loop execute format('alter table public.%I owner to svc_test', t.tablename); end loop; end \$\$" svc_test
        else
            as_postgres createdb -O svc_test svc_test
        fi
    }
    step postgres "role svc_test (no superuser) owning database svc_test" svc_test_role || fail "cannot make role and database svc_test"
    if ! svc_test_ready; then
        hba=$(pg_sql 'show hba_file')
        trust_hba() {
            sed -i '1i host svc_test svc_test 127.0.0.1/32 trust\nhost svc_test svc_test ::1/128 trust' "$hba" \
                && pg_sql 'select pg_reload_conf()' > /dev/null \
                && wait_for 5 svc_test_ready
        }
        step postgres "trust for role svc_test on database svc_test over loopback in $hba" trust_hba \
            || fail "role svc_test cannot connect to database svc_test over 127.0.0.1"
    fi
fi

# --- images --------------------------------------------------------------------------------------------
bash "$ROOT/scripts/build-sandbox-image.sh" || fail "the sandbox image could not be built"
# the pre-Debian-13 image, frozen: only the image migration test uses it
SVC_SANDBOX_SUITE=bookworm SVC_SANDBOX_IMAGE=svc-sandbox:bookworm bash "$ROOT/scripts/build-sandbox-image.sh" --if-missing \
    || fail "the legacy sandbox image (bookworm) could not be built"
bash "$ROOT/scripts/build-fixtures.sh" || fail "the fixture images could not be built"
bash "$ROOT/scripts/build-manager-image.sh" || fail "the management tool image could not be built"

# --- sandbox engine ------------------------------------------------------------------------------------
# Sandboxes run on an engine of the service's own, in a user namespace (see scripts/sandbox-engine.sh).
# Images are built on the main engine and copied over when the copy there differs.
bash "$ROOT/scripts/sandbox-engine.sh" || fail "the sandbox engine did not start, see /var/log/svc-sandbox-dockerd.log"
SANDBOX_DOCKER="docker -H unix:///run/svc-sandbox-docker.sock"
for image in svc-sandbox:latest svc-sandbox:bookworm svc-manager:latest; do
    id=$(docker image inspect -f '{{.Id}}' "$image")
    if [ "$($SANDBOX_DOCKER image inspect -f '{{.Id}}' "$image" 2> /dev/null)" = "$id" ]; then
        say "sandbox engine: $image present"
    else
        copy_image() { docker save "$image" | $SANDBOX_DOCKER load -q > /dev/null; }
        step "sandbox engine" "copying $image" copy_image || fail "could not copy $image to the sandbox engine"
    fi
done
if [ "$MODE" = full ]; then
    step "docker engine" "running a container" docker run --rm --network none svc-fixture-busybox true \
        || fail "the Docker engine cannot run containers, see $DOCKERD_LOG"
fi

# --- Incus ---------------------------------------------------------------------------------------------
# Asked for: the Incus runtime's daemon, pool, profile and the sandbox image as an Incus image
# (docs/incus.md). Always: its packages alone, no daemon on this machine (the service stays on Docker),
# for the test cluster that test/incus/cluster.test.ts makes and removes (scripts/test-cluster.sh).
if [ $INCUS = 1 ]; then
    bash "$ROOT/scripts/incus-host.sh" 9>&- || fail "Incus could not be set up (docs/incus.md)"
else
    bash "$ROOT/scripts/incus-host.sh" packages 9>&- || fail "Incus's packages could not be installed (docs/incus.md)"
fi

# --- doctor --------------------------------------------------------------------------------------------
# What the service itself needs of this host and its configuration (operator/doctor.ts), one line per check.
if [ "$MODE" = full ]; then
    (cd "$ROOT" && node_modules/.bin/tsx operator/svc.ts doctor 2>&1) | sed 's/^/[setup] doctor: /' \
        || fail "svc doctor: something the service needs is missing (FAIL lines above)"
fi

say "done ($MODE) in $(since "$T_START")"
