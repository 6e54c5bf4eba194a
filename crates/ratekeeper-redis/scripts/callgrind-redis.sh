#!/usr/bin/env bash
# Instructions per call inside redis-server, counted by valgrind's callgrind
# (they do not move with the machine's load, unlike INFO commandstats' µs):
# PING, INCR, EVALSHA of `return 1`, a script doing only TIME + GET +
# SET PX, a typical float GCRA script, and ratekeeper's script for each
# policy, allowed and denied (and allowed on one hot key), plus the floor
# with its write as PSETEX, SET PXAT and SET KEEPTTL. Then the same calls on
# a native redis-server for INFO commandstats' usec_per_call (best of 3; those
# move with the VM).
# RATEKEEPER_CALLGRIND_ONLY=a,b runs only the calls whose names contain a or b.
#
#   crates/ratekeeper-redis/scripts/callgrind-redis.sh [calls] [--keep DIR]
#
# --keep DIR keeps one callgrind dump per call for callgrind_annotate, e.g.
#   callgrind_annotate --inclusive=yes DIR/ratekeeper_gcra_allowed.callgrind
set -euo pipefail
cd "$(dirname "$0")/../../.."
for tool in valgrind callgrind_control callgrind_annotate redis-server; do
  command -v "$tool" >/dev/null || {
    echo "$tool is missing: apt-get install -y valgrind redis-server" >&2
    exit 1
  }
done
cargo build --release -q -p ratekeeper-redis --example callgrind
exec "${CARGO_TARGET_DIR:-target}/release/examples/callgrind" "$@" 2> >(grep -v '^sending command' >&2)
