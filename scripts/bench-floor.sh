#!/usr/bin/env bash
# The Envoy path against the floor of its stack (BENCHMARKS.md, "The Envoy
# path beside its floor"): grpcfloor (hyper's HTTP/2 answering OK without
# deciding) and the release `ratekeeper serve` on its in-memory store (one
# fixed-window limit per value), each asked ShouldRateLimit by rlsload over
# 10,000 values at 64 and 1 requests in flight, in interleaved rounds. It
# prints each server's CPU per request (utime + stime from /proc over the
# measured window) and ratekeeper's ratio to the floor in the same round.
#
#   RLSLOAD=/path/to/rlsload GRPCFLOOR=/path/to/grpcfloor scripts/bench-floor.sh [seconds] [rounds]
#
# Build both from ../shared/tools (each with `cargo build --release`).
# RATEKEEPER=BINARY runs that build of the service instead of this tree's;
# BASELINE=BINARY measures another build too, in the same rounds.
# The servers run alone on CPU 1 and rlsload on CPU 0: read the ratios,
# which hold on a noisy machine, rather than the absolute figures.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/floor-common.sh
seconds="${1:-8}"
rounds="${2:-3}"
: "${RLSLOAD:?set RLSLOAD to the rlsload binary}"
: "${GRPCFLOOR:?set GRPCFLOOR to the grpcfloor binary}"
if [ -z "${RATEKEEPER:-}" ]; then
  cargo build --release -q -p ratekeeper-server --bin ratekeeper
  RATEKEEPER="${CARGO_TARGET_DIR:-target}/release/ratekeeper"
fi

server_cpu=() load_cpu=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  server_cpu=(taskset -c 1) load_cpu=(taskset -c 0)
fi

dir="$(mktemp -d)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

# One server's CPU µs per request at `in_flight`.
measure() {
  local port="$1" in_flight="$2"
  "${load_cpu[@]}" "$RLSLOAD" --addr "127.0.0.1:$port" --domain bench --key user \
    --values 10000 --concurrency "$in_flight" --conns 1 --seconds "$seconds" --warmup 1 \
    --server-pid "$pid" --json |
    python3 -c 'import json,sys
line = [l for l in sys.stdin if l.startswith("JSON ")][-1]
run = json.loads(line[5:])
print("%.2f" % (run["server_cores"] / run["rps"] * 1e6))'
}

start_floor() {
  port="$(free_port)"
  "${server_cpu[@]}" "$GRPCFLOOR" "127.0.0.1:$port" >/dev/null 2>&1 &
  pid=$!
  wait_port "$port"
}

start_ratekeeper() {
  local binary="${1:-$RATEKEEPER}"
  port="$(free_port)"
  write_bench_config "$dir/bench.toml" "$port"
  "${server_cpu[@]}" "$binary" serve --config "$dir/bench.toml" >/dev/null 2>&1 &
  pid=$!
  wait_port "$port"
}

stop() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; pid=""; }

printf '%-6s %-9s %10s %10s %7s' round in_flight floor_us rk_us ratio
[ -n "${BASELINE:-}" ] && printf ' %12s %9s' baseline_us ratio
printf '\n'
ratio() { python3 -c "print('%.2f' % ($1 / $2))"; }
for round in $(seq "$rounds"); do
  for in_flight in 64 1; do
    start_floor; floor="$(measure "$port" "$in_flight")"; stop
    start_ratekeeper; rk="$(measure "$port" "$in_flight")"; stop
    printf '%-6s %-9s %10s %10s %7s' "$round" "$in_flight" "$floor" "$rk" "$(ratio "$rk" "$floor")"
    if [ -n "${BASELINE:-}" ]; then
      start_ratekeeper "$BASELINE"; base="$(measure "$port" "$in_flight")"; stop
      printf ' %12s %9s' "$base" "$(ratio "$base" "$floor")"
    fi
    printf '\n'
  done
done
