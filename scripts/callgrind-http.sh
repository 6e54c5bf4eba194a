#!/usr/bin/env bash
# Instructions per request of the HTTP benchmark's server in each mode,
# counted by valgrind's callgrind: unlike requests/s, the count does not
# move with the machine's load. Each server gets a warm-up, then its
# counters are zeroed, N keep-alive requests are sent with ab, and the
# instructions executed by the whole process (every thread) are divided by N,
# less the in-memory store's sweeper thread (sweep_until_dropped, or
# SlotTable::sweep where the former is inlined): it runs once a second whatever
# the load, so under valgrind's slowdown it would look like a per-request
# cost it is not.
#
#   scripts/callgrind-http.sh [requests] [concurrency]
set -euo pipefail
cd "$(dirname "$0")/.."
requests="${1:-20000}"
concurrency="${2:-8}"
for tool in valgrind callgrind_control ab; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: apt-get install -y valgrind apache2-utils" >&2; exit 1; }
done
cargo build --release -q -p ratekeeper-tower --example http_bench
binary="${CARGO_TARGET_DIR:-target}/release/examples/http_bench"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
port=38090
for mode in none ratekeeper ratekeeper-headers tower-governor; do
  valgrind --tool=callgrind --callgrind-out-file="$out/$mode.%p" "$binary" "$mode" "$port" >/dev/null 2>"$out/$mode.log" &
  server=$!
  for _ in $(seq 600); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.1
  done
  ab -q -k -n 2000 -c "$concurrency" "http://127.0.0.1:$port/" >/dev/null
  callgrind_control -z "$server" >/dev/null
  ab -q -k -n "$requests" -c "$concurrency" "http://127.0.0.1:$port/" >"$out/$mode.ab"
  callgrind_control -d "$server" >/dev/null
  kill "$server"; wait "$server" 2>/dev/null || true
  # The dump after zeroing is the last numbered part; sum its totals.
  dump=$(ls -t "$out/$mode".*.* 2>/dev/null | head -1)
  total=$(awk '/^summary:|^totals:/ {print $2; exit}' "$dump")
  sweep=$(callgrind_annotate --inclusive=yes "$dump" 2>/dev/null \
    | awk '/sweep_until_dropped|SlotTable::sweep/ && !done {gsub(",", "", $1); print $1; done = 1}')
  total=$((total - ${sweep:-0}))
  failed=$(awk '/Failed requests/ {print $3}' "$out/$mode.ab")
  printf '%-20s %8.0f instructions/request  (%s failed)\n' "$mode" "$(echo "$total / $requests" | bc -l)" "$failed"
done
