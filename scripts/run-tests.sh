#!/usr/bin/env bash
# npm test after its set-up: every test/**/*.test.ts through node:test (tsx), in two lanes
# (docs/testing.md, "How they keep out of each other's way"). Files that take something of the whole
# machine run one at a time with nothing beside them: the sandbox engine's restart (sandbox-image),
# the Incus test cluster (fixed names, network namespaces and addresses; its stand-in machine's
# addresses are escapes.test.ts's). All others keep to their own service, data folder, Redis prefix,
# store table, ports and labels, and run two at a time. Exits non-zero if either lane failed; both always run.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
export NODE_ENV=test

ALONE='^test/incus/|^test/runtime/sandbox-image\.test\.ts$'
# files named on the command line (npm test -- test/x.test.ts …), else every one
if [ $# -gt 0 ]; then mapfile -t all < <(printf '%s\n' "$@"); else mapfile -t all < <(find test -name '*.test.ts' | sort); fi
mapfile -t alone < <(printf '%s\n' "${all[@]}" | grep -E "$ALONE")
mapfile -t shared < <(printf '%s\n' "${all[@]}" | grep -vE "$ALONE")

# --test-timeout: a file (a test that hangs, a process that does not exit) fails with its name
# within 10 minutes instead of at CI's limit
lane() {
    [ $# -gt 1 ] || return 0
    node_modules/.bin/tsx --test --test-concurrency="$1" --test-timeout=600000 --test-reporter=spec "${@:2}"
}

lane 2 "${shared[@]}"
shared_rc=$?
lane 1 "${alone[@]}"
alone_rc=$?
echo "run-tests: ${#shared[@]} files two at a time exited with $shared_rc; ${#alone[@]} files one at a time, alone, with $alone_rc"
[ "$shared_rc" -eq 0 ] && [ "$alone_rc" -eq 0 ]
