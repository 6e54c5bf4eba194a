#!/usr/bin/env bash
# The HTTP benchmark of BENCHMARKS.md: an axum hello-world without a limiter,
# with a layer that changes nothing (what axum's layering costs any limiter),
# with ratekeeper's layer (in-memory store, per-IP key; without and with the
# draft headers) and with tower_governor set up alike, each driven by wrk on
# loopback.
#
#   scripts/bench-http.sh [seconds] [connections] [rounds]
#
# The five servers run side by side (an idle one costs nothing), and each
# round drives every one of them in turn, starting with a different one each
# round, so a change in the machine's load falls on all alike; the table
# gives each round and, last, each server's median, its ratio to the server
# without a limiter and ratekeeper's to tower_governor's (medians of each
# round's ratios). With two or more cores and taskset, the servers share
# core 0 and wrk runs on core 1, so that they do not take turns on one core.
# It also reports the CPU time each server spent per request (user and
# system, from /proc, kernel TCP work included): steadier than requests/s
# when the VM's speed swings, since waiting costs no CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-8}"
connections="${2:-64}"
rounds="${3:-5}"
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
cargo build --release -q -p ratekeeper-tower --example http_bench
binary="${CARGO_TARGET_DIR:-target}/release/examples/http_bench"
server_cpu=() load_cpu=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  server_cpu=(taskset -c 0) load_cpu=(taskset -c 1)
fi
modes=(none identity-layer ratekeeper ratekeeper-headers tower-governor)
servers=()
trap 'kill "${servers[@]}" 2>/dev/null || true' EXIT
for index in "${!modes[@]}"; do
  port=$((38080 + index))
  "${server_cpu[@]}" "$binary" "${modes[$index]}" "$port" >/dev/null &
  servers+=($!)
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.05
  done
  "${load_cpu[@]}" wrk -t1 -c"$connections" -d2s "http://127.0.0.1:$port/" >/dev/null # warm-up
done
results="$(mktemp)" cpu_results="$(mktemp)"
ticks=$(getconf CLK_TCK)
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
printf '%-6s' round; printf ' %19s' "${modes[@]}"; echo
for round in $(seq "$rounds"); do
  printf '%-6s' "$round"
  declare -A rps=()
  for step in "${!modes[@]}"; do
    index=$(((step + round) % ${#modes[@]}))
    before=$(cpu_of "${servers[$index]}")
    report=$("${load_cpu[@]}" wrk -t1 -c"$connections" -d"${seconds}s" "http://127.0.0.1:$((38080 + index))/")
    after=$(cpu_of "${servers[$index]}")
    rps[$index]=$(awk '/Requests\/sec/ {print $2}' <<<"$report")
    requests=$(awk '/requests in/ {print $1}' <<<"$report")
    echo "${modes[$index]} $(echo "($after - $before) * 1000000 / $ticks / $requests" | bc -l)" >>"$cpu_results"
  done
  for index in "${!modes[@]}"; do
    echo "${modes[$index]} ${rps[$index]}" >>"$results"
    printf ' %19.0f' "${rps[$index]}"
  done
  unset rps
  echo
done
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
printf '%-6s' median
for mode in "${modes[@]}"; do
  printf ' %19.0f' "$(awk -v mode="$mode" '$1 == mode {print $2}' "$results" | median)"
done
echo
# Each round's ratio to the server without a limiter, then their median:
# a ratio within one round is steadier than one of two medians.
printf '%-6s' ratio
for mode in "${modes[@]}"; do
  ratio=$(awk -v mode="$mode" '$1 == "none" {none[++n] = $2} $1 == mode {this[++m] = $2}
    END {for (i = 1; i <= m; i++) print this[i] / none[i]}' "$results" | median)
  printf ' %18.3fx' "$ratio"
done
echo
ratio=$(awk '$1 == "ratekeeper" {r[++n] = $2} $1 == "tower-governor" {g[++m] = $2}
  END {for (i = 1; i <= n; i++) print r[i] / g[i]}' "$results" | median)
printf 'ratekeeper / tower-governor, median of the rounds: %.3fx\n' "$ratio"
printf '%-6s' 'cpu µs'
for mode in "${modes[@]}"; do
  printf ' %19.2f' "$(awk -v mode="$mode" '$1 == mode {print $2}' "$cpu_results" | median)"
done
echo
ratio=$(awk '$1 == "ratekeeper" {r[++n] = $2} $1 == "tower-governor" {g[++m] = $2}
  END {for (i = 1; i <= n; i++) print r[i] / g[i]}' "$cpu_results" | median)
printf 'server CPU per request, ratekeeper / tower-governor, median of the rounds: %.3fx\n' "$ratio"
rm -f "$results" "$cpu_results"
