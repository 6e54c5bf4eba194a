#!/usr/bin/env bash
# The service's benchmark of BENCHMARKS.md ("The service: server CPU per request"): the
# release `ratekeeper serve` on its in-memory store, on Redis, and on Redis
# with leasing (`lease = true`: most decisions made in the process), asked
# Envoy's ShouldRateLimit by an outside load generator (rlsload, its own
# copy of Envoy's proto) and POST /v1/check by wrk, at 1, 16 and 64 requests
# in flight over 1 and 10,000 distinct values. It prints requests/s, p50 and
# p99 as the client saw them, and the server's CPU per request (utime +
# stime from /proc over the measured window, kernel TCP work included);
# with leasing, also the decisions per store call over the row (from the
# admin port's /v1/stats).
#
#   RLSLOAD=/path/to/rlsload scripts/bench-envoy.sh [seconds] [filter]
#
# RLSLOAD is the rlsload binary; or RLSLOAD_SRC=DIR, its source, which is
# built in a temporary directory (it needs protoc). RATEKEEPER=BINARY runs
# that build of the service instead of this tree's. `filter` keeps the rows
# whose name (such as "grpc memory 10000 64") contains it.
#
# With two or more CPUs and taskset, the service runs alone on CPU 1, and
# the load generators and redis-server on CPU 0: compare runs by the
# server's CPU per request, which holds on a noisy machine; requests per
# second on two shared cores swing by a fifth between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-5}"
filter="${2:-}"

if [ -z "${RLSLOAD:-}" ]; then
  [ -n "${RLSLOAD_SRC:-}" ] || { echo "set RLSLOAD (the rlsload binary) or RLSLOAD_SRC (its source)" >&2; exit 1; }
  build="$(mktemp -d)"
  cp -r "$RLSLOAD_SRC" "$build/rlsload"
  (cd "$build/rlsload" && CARGO_TARGET_DIR="$build/target" cargo build --release -q)
  RLSLOAD="$build/target/release/rlsload"
fi
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server is missing" >&2; exit 1; }
if [ -z "${RATEKEEPER:-}" ]; then
  cargo build --release -q -p ratekeeper-server --bin ratekeeper
  RATEKEEPER="${CARGO_TARGET_DIR:-target}/release/ratekeeper"
fi
binary="$RATEKEEPER"

server_cpu=() load_cpu=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  server_cpu=(taskset -c 1) load_cpu=(taskset -c 0)
fi

dir="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

redis_port=$(free_port)
"${load_cpu[@]}" redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
  --daemonize no >"$dir/redis.log" 2>&1 &
pids+=($!)
wait_port "$redis_port"

config() { # STORE HTTP_PORT GRPC_PORT ADMIN_PORT
  if [ "$1" = redis ]; then
    printf '[store]\nkind = "redis"\nurl = "redis://127.0.0.1:%s"\n' "$redis_port"
  elif [ "$1" = redis-lease ]; then
    printf '[store]\nkind = "redis"\nurl = "redis://127.0.0.1:%s"\nlease = true\n' "$redis_port"
  else
    printf '[store]\nkind = "memory"\nmax_keys = 100000\n'
  fi
  cat <<EOF

[listen]
http = "127.0.0.1:$2"
grpc = "127.0.0.1:$3"
admin = "127.0.0.1:$4"

[[limits]]
name = "bench"
rate = "1000000/second"
policy = "gcra"
key = ["descriptor:user"]
[limits.match]
domain = "bench"
descriptors = [{ key = "user" }]
EOF
}

# wrk's script: POST /v1/check with the descriptor's value cycling through
# VALUES values.
cat >"$dir/check.lua" <<'EOF'
local values = tonumber(os.getenv("VALUES"))
local n = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = (n + 1) % values
  local body = '{"domain":"bench","descriptors":[[{"key":"user","value":"u' .. n .. '"}]]}'
  return wrk.format(nil, "/v1/check", nil, body)
end
EOF

ticks=$(getconf CLK_TCK)
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# "DECISIONS STORE_CALLS" leasing made so far, or "0 0" without it.
lease_counts() {
  curl -s "http://127.0.0.1:$admin_port/v1/stats" | python3 -c '
import json, sys
l = json.load(sys.stdin)["store"].get("leasing") or {}
print(l.get("decisions", 0), l.get("store_calls", 0))'
}
# Decisions per store call between two lease_counts, or "-".
per_call() {
  python3 -c '
import sys
d = int(sys.argv[3]) - int(sys.argv[1]); c = int(sys.argv[4]) - int(sys.argv[2])
print("-" if d == 0 else ("%.0f" % (d / c) if c else "all"))' $1 $2
}

printf '%-6s %-11s %7s %9s %10s %9s %9s %14s %9s\n' door store values in-flight 'req/s' p50 p99 'server µs/req' 'dec/call'
for store in memory redis redis-lease; do
  http_port=$(free_port) grpc_port=$(free_port) admin_port=$(free_port)
  config "$store" "$http_port" "$grpc_port" "$admin_port" >"$dir/$store.toml"
  RUST_LOG=warn "${server_cpu[@]}" "$binary" serve --config "$dir/$store.toml" >"$dir/$store.log" 2>&1 &
  server=$!
  pids+=($server)
  wait_port "$grpc_port"
  for values in 1 10000; do
    for inflight in 1 16 64; do
      name="grpc $store $values $inflight"
      if [[ "$name" == *"$filter"* ]]; then
        leased_before=$(lease_counts)
        json=$("${load_cpu[@]}" "$RLSLOAD" --addr "127.0.0.1:$grpc_port" --domain bench --key user \
          --values "$values" --concurrency "$inflight" --conns 1 --transport hyper \
          --seconds "$seconds" --warmup 1 --server-pid "$server" --json | sed -n 's/^JSON //p')
        calls=$(per_call "$leased_before" "$(lease_counts)")
        python3 -c '
import json, sys
d = json.loads(sys.argv[1])
print("%-6s %-11s %7s %9s %10.0f %7dµs %7dµs %14.2f %9s%s" % (sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5],
      d["rps"], d["p50_us"], d["p99_us"], d["server_cores"] * 1e6 / d["rps"], sys.argv[6],
      "" if d["errors"] == 0 else "  (%d errors)" % d["errors"]))' "$json" grpc "$store" "$values" "$inflight" "$calls"
      fi
    done
  done
  for values in 10000; do
    for inflight in 1 16 64; do
      name="http $store $values $inflight"
      if [[ "$name" == *"$filter"* ]]; then
        url="http://127.0.0.1:$http_port/"
        VALUES=$values "${load_cpu[@]}" wrk -t1 -c"$inflight" -d1s -s "$dir/check.lua" "$url" >/dev/null
        before=$(cpu_of "$server")
        leased_before=$(lease_counts)
        report=$(VALUES=$values "${load_cpu[@]}" wrk -t1 -c"$inflight" -d"${seconds}s" --latency \
          -s "$dir/check.lua" "$url")
        after=$(cpu_of "$server")
        calls=$(per_call "$leased_before" "$(lease_counts)")
        python3 -c '
import re, sys
report, before, after, ticks = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
requests = int(re.search(r"(\d+) requests in", report).group(1))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", report).group(1))
def lat(p):
    m = re.search(r"\s%s%%\s+([\d.]+)(us|ms|s)" % p, report)
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", report)
print("%-6s %-11s %7s %9s %10.0f %7.0fµs %7.0fµs %14.2f %9s%s" % ("http", sys.argv[5], sys.argv[6], sys.argv[7],
      rps, lat(50), lat(99), (after - before) / ticks * 1e6 / requests, sys.argv[8],
      "" if errors is None else "  (%s errors)" % errors.group(1)))' \
          "$report" "$before" "$after" "$ticks" "$store" "$values" "$inflight" "$calls"
      fi
    done
  done
  kill "$server"
  wait "$server" 2>/dev/null || true
done
