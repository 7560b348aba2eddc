#!/usr/bin/env bash
# A Redis for the service with an ACL user instead of an open door (run as root):
#
#   bash scripts/redis-acl.sh start PORT DIR [LOGFILE]
#       starts redis-server on 127.0.0.1:PORT with the default user off and one user, `svc`, whose
#       random password is kept only in DIR/redis.acl and DIR/redis.url (both 0600, DIR 0700). An
#       existing pair of files is reused, so clients that read DIR/redis.url keep working after a
#       restart. The service reads /etc/svc/redis.url when REDIS_URL is unset.
#   bash scripts/redis-acl.sh ping PORT DIR
#       exit 0 if the Redis on PORT answers as user svc with the password in DIR/redis.url
#
# The password never appears on a command line (redis-cli gets it in REDISCLI_AUTH).
set -euo pipefail

usage() { sed -n '2,12p' "$0" >&2; exit 2; }
[ $# -ge 3 ] || usage
ACTION=$1 PORT=$2 DIR=$3
LOGFILE=${4:-$DIR/redis.log}
[[ $PORT =~ ^[0-9]+$ ]] || usage
ACL=$DIR/redis.acl URL=$DIR/redis.url

password() { sed -n 's|^redis://svc:\([0-9a-f]*\)@.*$|\1|p' "$URL" 2> /dev/null; }

ping_svc() {
    local pw
    pw=$(password)
    [ -n "$pw" ] || return 1
    [ "$(REDISCLI_AUTH=$pw timeout 5 redis-cli --user svc -h 127.0.0.1 -p "$PORT" ping 2> /dev/null)" = PONG ]
}

case $ACTION in
    ping) ping_svc ;;
    start)
        umask 077
        mkdir -p "$DIR"
        chmod 700 "$DIR"
        if [ -z "$(password)" ] || ! grep -q '^user svc on ' "$ACL" 2> /dev/null; then
            pw=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
            printf 'user default off\nuser svc on >%s ~* &* +@all\n' "$pw" > "$ACL.tmp"
            printf 'redis://svc:%s@127.0.0.1:%s\n' "$pw" "$PORT" > "$URL.tmp"
            chmod 600 "$ACL.tmp" "$URL.tmp"
            mv "$ACL.tmp" "$ACL"
            mv "$URL.tmp" "$URL"
        fi
        chmod 600 "$ACL" "$URL"
        # 9>&-: never hand setup's lock to a daemon
        redis-server --daemonize yes --bind 127.0.0.1 --port "$PORT" --save "" --appendonly no \
            --aclfile "$ACL" --pidfile "$DIR/redis-$PORT.pid" --logfile "$LOGFILE" > /dev/null 9>&-
        for ((i = 0; i < 100; i++)); do
            ping_svc && exit 0
            sleep 0.1
        done
        echo "redis-server on 127.0.0.1:$PORT did not answer as user svc within 10 s; see $LOGFILE" >&2
        exit 1
        ;;
    *) usage ;;
esac
