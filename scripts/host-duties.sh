#!/usr/bin/env bash
# The host duties of a runner host (docs/scale-out.md) that need root there, which the service does
# itself for its own machine's engine. For every sandbox container the engine starts (a wake, its
# restart policy, an engine restart):
#  - the cgroup hand-over (lifecycle/runtime/cgroup-delegation.ts): its own cgroup folders go to its user
#    namespace's root, so its dockerd can make cgroups for its containers; never the limit files. Its
#    entrypoint waits for this before its dockerd starts;
#  - ARP retries every 100 ms on its network's bridge (lifecycle/runtime/arp-retries.ts), so a woken
#    app is reached as soon as it runs.
#
#   scripts/host-duties.sh ENGINE_SOCKET     runs until killed (scripts/runner.sh, scripts/test-hosts.sh start
#                                            it, in the engine's network namespace)
set -uo pipefail

SOCK=$1
DELEGATED_FILES=(cgroup.procs tasks cgroup.subtree_control cgroup.threads)

# The folder of one hierarchy of /proc/<pid>/cgroup ("4:memory:/svc-sandboxes/<id>", "0::/…").
cgroup_dir() {
    local controllers=$1 rel=$2
    awk -v want="$controllers" -v rel="$rel" '
        $3 == "cgroup2" && want == "" { print $2 rel; exit }
        $3 == "cgroup" {
            n = split($4, opts, ","); k = 0; delete got
            for (i = 1; i <= n; i++) if (opts[i] !~ /^(rw|ro|nosuid|nodev|noexec|relatime|noatime|none|release_agent=.*)$/) got[++k] = opts[i]
            # sorted, as /proc/<pid>/cgroup is compared sorted
            for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (got[j] < got[i]) { t = got[i]; got[i] = got[j]; got[j] = t }
            s = ""; for (i = 1; i <= k; i++) s = s (i > 1 ? "," : "") got[i]
            if (s == want) { print $2 rel; exit }
        }' /proc/mounts
}

delegate() {
    local pid=$1 inside uid gid _ controllers rel dir f
    read -r inside uid _ < "/proc/$pid/uid_map" || return 0
    read -r _ gid _ < "/proc/$pid/gid_map" || return 0
    # no user namespace (the initial one maps 0 → 0): nothing to hand over
    [ "$inside" = 0 ] && [ "$uid" != 0 ] || return 0
    while IFS=: read -r _ controllers rel; do
        [ -n "$rel" ] && [ "$rel" != / ] && [[ $rel != *..* ]] || continue
        controllers=$(tr ',' '\n' <<< "$controllers" | sort | paste -sd, -)
        dir=$(cgroup_dir "$controllers" "$rel")
        [ -n "$dir" ] && [ -d "$dir" ] || continue
        chown "$uid:$gid" "$dir"
        for f in "${DELEGATED_FILES[@]}"; do [ ! -e "$dir/$f" ] || chown "$uid:$gid" "$dir/$f"; done
    done < "/proc/$pid/cgroup"
}

settle() {
    local pid sandbox bridge
    read -r pid sandbox < <(docker -H "unix://$SOCK" inspect --format '{{.State.Pid}} {{index .Config.Labels "svc.sandbox"}}' "$1" 2> /dev/null) || return 0
    # its network is named like it; the bridge as lifecycle/runtime/docker-runtime.ts names it (sandboxBridge)
    bridge=svcb$(printf %s "$sandbox" | sha256sum | cut -c1-11)
    echo 100 > "/proc/sys/net/ipv4/neigh/$bridge/retrans_time_ms" 2> /dev/null || true
    [ "${pid:-0}" != 0 ] && delegate "$pid" 2> /dev/null
}

while :; do
    # every running sandbox (started while this did not watch), then each start from that moment on
    since=$(date +%s)
    for id in $(docker -H "unix://$SOCK" ps -q --filter label=svc.sandbox 2> /dev/null); do settle "$id"; done
    docker -H "unix://$SOCK" events --since "$since" --filter type=container --filter event=start --filter label=svc.sandbox \
        --format '{{.ID}}' 2> /dev/null | while read -r id; do settle "$id"; done
    sleep 1 # the engine went away: watch again once it is back
done
