#!/usr/bin/env bash
# The TLS benchmark of BENCHMARKS.md: the gRPC door's requests/s and server
# CPU per request in plaintext and over TLS, with the same load client (the
# grpc_load example: closed loop, 64 requests in flight on 1 HTTP/2
# connection by default).
#
#   scripts/tls-bench.sh [seconds] [rounds] [concurrency] [conns]
#
# Two release `ratekeeper serve` processes on the in-memory store, one
# plaintext and one with [listen.tls.grpc] (an ECDSA P-256 certificate made
# here with openssl), both pinned to CPU 1; the client runs on CPU 0. The
# runs alternate (plain, tls, plain, tls, ...) so a change in the machine's
# speed falls on both alike; an idle server costs nothing. Server CPU per
# request is utime + stime from /proc over the measured window: steadier
# than requests/s on a VM whose speed swings. Check `uptime` first: another
# build on the machine distorts both.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
rounds="${2:-3}"
concurrency="${3:-64}"
conns="${4:-1}"
command -v openssl >/dev/null || { echo "openssl is missing: apt-get install -y openssl" >&2; exit 1; }
cargo build --release -q -p ratekeeper-server --bin ratekeeper --example grpc_load
release="${CARGO_TARGET_DIR:-target}/release"
server_cpu=() load_cpu=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  server_cpu=(taskset -c 1) load_cpu=(taskset -c 0)
fi

dir="$(mktemp -d)"
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${servers[@]}"; do wait "$pid" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] && echo "kept $dir" || rm -rf "$dir"
}
trap cleanup EXIT

ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${ec[@]}" -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 2 \
  -subj /CN=bench-ca 2>/dev/null
openssl req "${ec[@]}" -keyout "$dir/server.key" -out "$dir/server.csr" \
  -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$dir/ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
  -CAcreateserial -days 2 -extfile "$dir/ext" -out "$dir/server.pem" 2>/dev/null

config() { # PORT [TLS]
  cat <<EOF
[store]
kind = "memory"
max_keys = 100000

[listen]
http = "off"
grpc = "127.0.0.1:$1"
admin = "off"
EOF
  if [ -n "${2:-}" ]; then
    printf '\n[listen.tls.grpc]\ncert = "%s"\nkey = "%s"\n' "$dir/server.pem" "$dir/server.key"
  fi
  cat <<'EOF'

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

# Below the ephemeral range, so no client socket holds them.
ports=(18281 18282)
modes=(plain tls)
config "${ports[0]}" >"$dir/plain.toml"
config "${ports[1]}" tls >"$dir/tls.toml"
for index in 0 1; do
  RUST_LOG=warn "${server_cpu[@]}" "$release/ratekeeper" serve \
    --config "$dir/${modes[$index]}.toml" >"$dir/${modes[$index]}.log" 2>&1 &
  servers+=($!)
done
for port in "${ports[@]}"; do
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
  done
done

load() { # INDEX SECONDS WARMUP
  local tls=()
  [ "${modes[$1]}" = tls ] && tls=(--tls-ca "$dir/ca.pem")
  "${load_cpu[@]}" "$release/examples/grpc_load" --addr "127.0.0.1:${ports[$1]}" "${tls[@]}" \
    --concurrency "$concurrency" --conns "$conns" --seconds "$2" --warmup "$3" \
    --server-pid "${servers[$1]}" --label "${modes[$1]}"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
results="$dir/results"
for round in $(seq "$rounds"); do
  for index in 0 1; do
    report="$(load "$index" "$seconds" 2)"
    echo "$report"
    rps=$(awk '/requests\/s:/ {print $2}' <<<"$report")
    cpu=$(sed -n 's/.*server=\([0-9.]*\).*/\1/p' <<<"$report")
    echo "${modes[$index]} $round $rps $cpu" >>"$results"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| round | plain req/s | plain server µs/req | TLS req/s | TLS server µs/req |"
echo "|---|---|---|---|---|"
for round in $(seq "$rounds"); do
  plain=$(awk -v r="$round" '$1 == "plain" && $2 == r {print $3 " | " $4}' "$results")
  tls=$(awk -v r="$round" '$1 == "tls" && $2 == r {print $3 " | " $4}' "$results")
  echo "| $round | $plain | $tls |"
done
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for mode in plain tls; do
  rps=$(awk -v m="$mode" '$1 == m {print $3}' "$results" | median)
  cpu=$(awk -v m="$mode" '$1 == m {print $4}' "$results" | median)
  echo "median $mode: $rps req/s, $cpu µs server CPU per request"
done
