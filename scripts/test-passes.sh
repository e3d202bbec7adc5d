#!/usr/bin/env bash
# Usage: GOTESTFLAGS=... MOTOFLAGS=... scripts/test-passes.sh (`make test` sets both: the Makefile
# defines them)
# The suite's three passes, side by side (the suite waits on emulators, timeouts and child
# processes far more than it computes: one pass at a time left the two cores idle most of the
# time), each line prefixed with its pass:
#   [race] go test -race of every package but the simulator, and the example modules, against a
#          private dynalite + fauxqs stack;
#   [moto] the packages whose tests reach the stack (scripts/stack-packages.sh), and the
#          examples, once more against a private moto_server stack, without -race (the race
#          pass proves the concurrency; this one proves the second backend's semantics);
#   [sim]  the simulator's tests without -race, at a lower priority: it lets one call through
#          its gates at a time, so the detector has little to watch there, and it only computes,
#          while the other passes hold timeouts and real-time windows.
# Exit status: non-zero when any pass failed; each pass's failures are in its own lines.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
MAKE=${MAKE:-make}
: "${GOTESTFLAGS:?set by make test (the race pass's flags)}" "${MOTOFLAGS:?set by make test (the moto pass's flags)}"
nonrace=$(sed 's/-race//' <<<"$GOTESTFLAGS")
sim=github.com/gapless-dev/gapless/internal/local/sim
others=$($GO list ./... | grep -vx "$sim" | tr '\n' ' ')
stack=$(scripts/stack-packages.sh | grep -vx "$sim" | tr '\n' ' ')

pass() { # name, command...
	local name=$1; shift
	local start=$SECONDS
	"$@" 2>&1 | sed -u "s/^/[$name] /"
	local rc=${PIPESTATUS[0]}
	echo "[$name] pass finished in $((SECONDS - start)) s (exit $rc)"
	return "$rc"
}

pass race scripts/with-stack.sh dynalite $MAKE --no-print-directory test-go GOTESTFLAGS="$GOTESTFLAGS" PKGS="$others" & race=$!
pass moto scripts/with-stack.sh moto $MAKE --no-print-directory test-go GOTESTFLAGS="$MOTOFLAGS" PKGS="$stack" & moto=$!
# shellcheck disable=SC2086 # the flags are words
pass sim nice -n 10 $GO test $nonrace "$sim" & simpid=$! # niced: it computes, the others keep time
rc=0
for p in $race $moto $simpid; do wait "$p" || rc=1; done
[ "$rc" = 0 ] && echo "all three passes passed" || echo "a pass FAILED: see its [race], [moto] or [sim] lines above"
exit "$rc"
