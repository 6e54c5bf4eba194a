#!/usr/bin/env bash
# Instructions per ShouldRateLimit (callgrind, user space), for grpcfloor
# and the release `ratekeeper serve` (BENCHMARKS.md, "The Envoy path
# beside its floor"). Unlike CPU time, the counts do not depend on how
# busy the machine is, so they can judge a change smaller than the noise
# of timed rounds.
#
#   RLSLOAD=/path/to/rlsload GRPCFLOOR=/path/to/grpcfloor scripts/callgrind-floor.sh [in_flight]
#
# Each server runs under valgrind; rlsload warms it for 3 s, then the
# counters are zeroed, 6 s of load are counted, and the total is divided
# by the requests answered. The profiles stay in a temporary folder
# (printed) for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/floor-common.sh
in_flight="${1:-64}"
: "${RLSLOAD:?set RLSLOAD to the rlsload binary}"
: "${GRPCFLOOR:?set GRPCFLOOR to the grpcfloor binary}"
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
if [ -z "${RATEKEEPER:-}" ]; then
  cargo build --release -q -p ratekeeper-server --bin ratekeeper
  RATEKEEPER="${CARGO_TARGET_DIR:-target}/release/ratekeeper"
fi

dir="$(mktemp -d)"
vpid=""
cleanup() { [ -n "$vpid" ] && kill "$vpid" 2>/dev/null && wait "$vpid" 2>/dev/null; true; }
trap cleanup EXIT

load() {
  "$RLSLOAD" --addr "127.0.0.1:$1" --domain bench --key user --values 10000 \
    --concurrency "$in_flight" --conns 1 --seconds "$2" --warmup 0 2>&1
}

# One server: NAME PORT COMMAND...
count() {
  local name="$1" port="$2"
  shift 2
  valgrind --tool=callgrind --callgrind-out-file="$dir/$name.out" "$@" >"$dir/$name.log" 2>&1 &
  vpid=$!
  wait_port "$port"
  load "$port" 3 >/dev/null
  callgrind_control -z "$vpid" >/dev/null 2>&1
  local answered
  answered="$(load "$port" 6 | grep -o 'OK=[0-9]*' | cut -d= -f2)"
  callgrind_control -d "$vpid" >/dev/null 2>&1
  sleep 1
  kill "$vpid"
  wait "$vpid" 2>/dev/null || true
  vpid=""
  local profile
  profile="$(ls -t "$dir/$name.out".* | head -1)"
  local total
  total="$(callgrind_annotate "$profile" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}')"
  printf '%-10s %8d requests  %8d instructions a request  (%s)\n' \
    "$name" "$answered" $((total / answered)) "$profile"
}

port="$(free_port)"
count grpcfloor "$port" "$GRPCFLOOR" "127.0.0.1:$port"
port="$(free_port)"
write_bench_config "$dir/bench.toml" "$port"
count ratekeeper "$port" "$RATEKEEPER" serve --config "$dir/bench.toml"
echo "profiles in $dir"
