#!/usr/bin/env bash
# BENCHMARKS.md's "envoyproxy/ratelimit's files: matching cost": the release
# `ratekeeper serve --envoy-config DIR` on its in-memory store, asked
# Envoy's ShouldRateLimit by the outside load generator rlsload (one
# descriptor `user=uN` over 10,000 values, 64 in flight), against a
# directory of 10 descriptors and one of 1,001 (100 keys of 5 exact
# values, 4 wildcards and a bare key each, beside `user`: 400 wildcards on
# the level every request is matched at). Rounds alternate the two, each
# server started fresh; it prints requests/s and the server's CPU per
# request (utime + stime from /proc over the measured window).
#
#   RLSLOAD=/path/to/rlsload scripts/bench-envoy-files.sh [seconds] [rounds]
#   RLSLOAD=/path/to/rlsload scripts/bench-envoy-files.sh callgrind [seconds]
#
# `callgrind` counts instead the instructions the server runs per request
# (valgrind's callgrind, every thread, after a warm-up; less the in-memory
# store's sweeper, which runs once a second whatever the load), which
# repeat exactly where the timings swing by a fifth.
#
# With two or more CPUs and taskset, the service runs alone on CPU 1 and
# rlsload on CPU 0: compare by server CPU per request.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=time
if [ "${1:-}" = callgrind ]; then mode=callgrind; shift; fi
seconds="${1:-5}"
rounds="${2:-3}"
[ -n "${RLSLOAD:-}" ] || { echo "set RLSLOAD (the rlsload binary; see ../shared/tools/rlsload)" >&2; exit 1; }
if [ -z "${RATEKEEPER:-}" ]; then
  cargo build --release -q -p ratekeeper-server --bin ratekeeper
  RATEKEEPER="${CARGO_TARGET_DIR:-target}/release/ratekeeper"
fi
server_cpu=() load_cpu=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  server_cpu=(taskset -c 1) load_cpu=(taskset -c 0)
fi
dir="$(mktemp -d)"
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

mkdir -p "$dir/small" "$dir/large"
python3 - "$dir" <<'PY'
import sys
d = sys.argv[1]
user = "  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000000\n"
def limit(n):
    return "    rate_limit:\n      unit: minute\n      requests_per_unit: %d\n" % n
small = "domain: bench\ndescriptors:\n" + user
for i in range(9):
    small += "  - key: k%d\n" % i + limit(100 + i)
open(d + "/small/config.yaml", "w").write(small)
large = "domain: bench\ndescriptors:\n" + user
for i in range(100):
    for j in range(5):
        large += "  - key: k%d\n    value: v%d\n" % (i, j) + limit(10 + j)
    for j in range(4):
        large += "  - key: k%d\n    value: w%d*x\n" % (i, j) + limit(20 + j)
    large += "  - key: k%d\n" % i + limit(30)
open(d + "/large/config.yaml", "w").write(large)
PY
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

if [ "$mode" = callgrind ]; then
  printf '%12s %10s %22s\n' descriptors requests 'instructions/request'
  for size in small large; do
    port=$(free_port)
    printf '[listen]\nhttp = "off"\ngrpc = "127.0.0.1:%s"\nadmin = "off"\n[runtime]\nworker_threads = 1\n[envoy]\nconfig_dir = "%s"\n' \
      "$port" "$dir/$size" >"$dir/$size.toml"
    RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$dir/$size.%p" \
      "$RATEKEEPER" serve --config "$dir/$size.toml" --watch 0 >"$dir/$size.log" 2>&1 &
    server=$!
    wait_port "$port"
    load() { "$RLSLOAD" --addr "127.0.0.1:$port" --domain bench --key user --values 10000 \
      --concurrency 8 --conns 1 --transport hyper --seconds "$1" --warmup 0 --json | sed -n 's/^JSON //p'; }
    load 2 >/dev/null
    callgrind_control -z "$server" >/dev/null
    json=$(load "$seconds")
    callgrind_control -d "$server" >/dev/null
    kill "$server"; wait "$server" 2>/dev/null || true; server=""
    dump=$(ls -t "$dir/$size".*.* | head -1)
    total=$(awk '/^summary:|^totals:/ {print $2; exit}' "$dump")
    sweep=$(callgrind_annotate --inclusive=yes "$dump" 2>/dev/null \
      | awk '/sweep_until_dropped|SlotTable::sweep/ && !done {gsub(",", "", $1); print $1; done = 1}')
    python3 -c '
import json, sys
d = json.loads(sys.argv[1])
n = d["ok"] + d["over_limit"]
print("%12d %10d %22.0f" % ({"small": 10, "large": 1001}[sys.argv[2]], n, (int(sys.argv[3]) - int(sys.argv[4])) / n))' \
      "$json" "$size" "$total" "${sweep:-0}"
  done
  exit 0
fi

printf '%-6s %12s %10s %14s\n' round descriptors 'req/s' 'server µs/req'
for round in $(seq "$rounds"); do
  for size in small large; do
    port=$(free_port)
    printf '[listen]\nhttp = "off"\ngrpc = "127.0.0.1:%s"\nadmin = "off"\n[envoy]\nconfig_dir = "%s"\n' \
      "$port" "$dir/$size" >"$dir/$size.toml"
    RUST_LOG=warn "${server_cpu[@]}" "$RATEKEEPER" serve --config "$dir/$size.toml" --watch 0 >"$dir/$size.log" 2>&1 &
    server=$!
    wait_port "$port"
    json=$("${load_cpu[@]}" "$RLSLOAD" --addr "127.0.0.1:$port" --domain bench --key user \
      --values 10000 --concurrency 64 --conns 1 --transport hyper \
      --seconds "$seconds" --warmup 1 --server-pid "$server" --json | sed -n 's/^JSON //p')
    kill "$server"; wait "$server" 2>/dev/null || true; server=""
    python3 -c '
import json, sys
d = json.loads(sys.argv[1])
n = {"small": 10, "large": 1001}[sys.argv[3]]
print("%-6s %12d %10.0f %14.2f%s" % (sys.argv[2], n, d["rps"], d["server_cores"] * 1e6 / d["rps"],
      "" if d["errors"] == 0 else "  (%d errors)" % d["errors"]))' "$json" "$round" "$size"
  done
done
