#!/usr/bin/env bash
# The HTTP benchmark of BENCHMARKS.md: an axum hello-world without a limiter,
# with ratekeeper's layer (in-memory store, per-IP key) and with
# tower_governor set up alike, each driven by wrk on loopback.
#
#   scripts/bench-http.sh [seconds] [connections]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
connections="${2:-64}"
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
cargo build --release -q -p ratekeeper-tower --example http_bench
binary="${CARGO_TARGET_DIR:-target}/release/examples/http_bench"
port=38080
for mode in none ratekeeper ratekeeper-headers tower-governor; do
  "$binary" "$mode" "$port" >/dev/null &
  server=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.05
  done
  wrk -t1 -c"$connections" -d3s "http://127.0.0.1:$port/" >/dev/null # warm-up
  rps=$(wrk -t1 -c"$connections" -d"${seconds}s" "http://127.0.0.1:$port/" | awk '/Requests\/sec/ {print $2}')
  kill "$server"
  wait "$server" 2>/dev/null || true
  printf '%-20s %s requests/s\n' "$mode" "$rps"
done
