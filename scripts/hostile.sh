#!/usr/bin/env bash
# The hostile-connection benchmark of issue 30 ("Hostile connections, round
# two"): each attack at full size against a release `ratekeeper serve` at its
# default settings, with a well-behaved client beside it, and the server's
# memory. Not a test: it prints figures, it does not judge them (the last
# column says whether a run met the issue's target: RSS growth < 200 MB and
# no new-connection call over 1 s).
#
#   scripts/hostile.sh [zero-window] [tls] [stalled-body]   (default: all three)
#
# - zero-window: HTTP/2 connections with SETTINGS_INITIAL_WINDOW_SIZE = 0,
#   never a WINDOW_UPDATE, each with ZW_STREAMS complete ShouldRateLimit
#   requests whose answers cannot be sent, held ZW_HOLD s, for each count in
#   ZW_CONNS; then the same client with open windows, reading every answer
#   (--read), with ZW_READ_CONNS connections.
# - tls: TLS_CONNS connections to a TLS gRPC door each sending half a
#   ClientHello, reopened when closed, for TLS_SECONDS s.
# - stalled-body: STALL_CONNS plaintext HTTP/2 connections each with a
#   request whose body never completes, reopened when closed, STALL_SECONDS s.
#
# Each run gets a fresh server (in-memory store, one generous limit, gRPC and
# admin on free loopback ports; [listen.tls.grpc] with an openssl-made
# certificate for tls), pinned to CPU 1; the attacker and the probe (the
# `hostile` example: a new connection every PROBE_EVERY ms, one call each,
# PROBE_TIMEOUT s timeout) run on CPU 0. The server's VmRSS is read before
# the attack, every 250 ms during it (the peak), and SETTLE s after the
# attacker left.
#
# Sizes (defaults are the issue's):
#   ZW_CONNS="20 200 800" ZW_STREAMS=1024 ZW_HOLD=45 ZW_READ_CONNS=200 (0: skip)
#   TLS_CONNS=6000 TLS_SECONDS=40 STALL_CONNS=6000 STALL_SECONDS=40
#   PROBE_EVERY=500 PROBE_TIMEOUT=12 SETTLE=10
# A quick try: ZW_CONNS=20 ZW_STREAMS=64 ZW_HOLD=5 ZW_READ_CONNS=0 \
#   TLS_CONNS=200 TLS_SECONDS=5 STALL_CONNS=200 STALL_SECONDS=5 scripts/hostile.sh
#
# RATEKEEPER=/path/to/ratekeeper skips building the release binary;
# HOSTILE=/path/to/hostile the example (built in the dev profile otherwise).
# KEEP=1 keeps the working directory (configs, logs, RSS samples).
# Only loopback is used. Check `uptime` first: another build on the machine
# changes the latencies.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 [zero-window] [tls] [stalled-body]" >&2; }
attacks=("$@")
[ ${#attacks[@]} -eq 0 ] && attacks=(zero-window tls stalled-body)
for attack in "${attacks[@]}"; do
  case "$attack" in
    zero-window | tls | stalled-body) ;;
    -h | --help) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done

ZW_CONNS="${ZW_CONNS:-20 200 800}"
ZW_STREAMS="${ZW_STREAMS:-1024}"
ZW_HOLD="${ZW_HOLD:-45}"
ZW_READ_CONNS="${ZW_READ_CONNS:-200}"
TLS_CONNS="${TLS_CONNS:-6000}"
TLS_SECONDS="${TLS_SECONDS:-40}"
STALL_CONNS="${STALL_CONNS:-6000}"
STALL_SECONDS="${STALL_SECONDS:-40}"
PROBE_EVERY="${PROBE_EVERY:-500}"
PROBE_TIMEOUT="${PROBE_TIMEOUT:-12}"
SETTLE="${SETTLE:-10}"

command -v openssl >/dev/null || { echo "openssl is missing: apt-get install -y openssl" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is missing: apt-get install -y curl" >&2; exit 1; }
target="${CARGO_TARGET_DIR:-target}"
if [ -z "${RATEKEEPER:-}" ]; then
  cargo build --release -q -p ratekeeper-server --bin ratekeeper
  RATEKEEPER="$target/release/ratekeeper"
fi
if [ -z "${HOSTILE:-}" ]; then
  cargo build -q -p ratekeeper-server --example hostile
  HOSTILE="$target/debug/examples/hostile"
fi
server_cpu=() client_cpu=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  server_cpu=(taskset -c 1) client_cpu=(taskset -c 0)
fi

dir="$(mktemp -d)"
pids=()
cleanup() {
  # Everything this script started, by process id; the attacker and the
  # probe stop by themselves, this is for an interrupted run.
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] && echo "kept $dir" || rm -rf "$dir"
}
trap cleanup EXIT
# Waits for PID, then drops it from the list cleanup kills (its id may be reused).
reap() {
  wait "$1" 2>/dev/null || true
  local left=() pid
  for pid in "${pids[@]}"; do [ "$pid" = "$1" ] || left+=("$pid"); done
  pids=("${left[@]}")
}
trap 'exit 130' INT TERM

ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${ec[@]}" -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 2 \
  -subj /CN=hostile-ca 2>/dev/null
openssl req "${ec[@]}" -keyout "$dir/server.key" -out "$dir/server.csr" \
  -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$dir/ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
  -CAcreateserial -days 2 -extfile "$dir/ext" -out "$dir/server.pem" 2>/dev/null

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A loopback port below the ephemeral range that nothing listens on.
free_port() {
  local port
  for _ in $(seq 200); do
    port=$((18400 + RANDOM % 600))
    listening "$port" || { echo "$port"; return; }
  done
  echo "no free port in 18400-18999" >&2
  exit 1
}

config() { # GRPC_PORT ADMIN_PORT [tls]
  cat <<EOF
[store]
kind = "memory"

[listen]
http = "off"
grpc = "127.0.0.1:$1"
admin = "127.0.0.1:$2"
EOF
  if [ -n "${3:-}" ]; then
    printf '\n[listen.tls.grpc]\ncert = "%s"\nkey = "%s"\n' "$dir/server.pem" "$dir/server.key"
  fi
  cat <<'EOF'

[[limits]]
name = "hostile"
rate = "1000000/second"
policy = "gcra"
key = ["descriptor:user"]
[limits.match]
domain = "hostile"
descriptors = [{ key = "user" }]
EOF
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
now_ms() { date +%s%3N; }
mb() { awk -v kb="$1" 'BEGIN {printf "%.0f", kb / 1024}'; }
result() { # FILE KEY: the value of KEY= on the RESULT line
  sed -n "s/^RESULT .*[ ]$2=\([^ ]*\).*/\1/p" "$1" | tail -1
}

results="$dir/results"
: >"$results"
run=0

# One attack against a fresh server, with the probe beside it.
#   measure LABEL tls|plain ATTACK_ARGS...   (the attack's subcommand and options, without --addr)
measure() {
  local label="$1" kind="$2"
  shift 2
  run=$((run + 1))
  local grpc admin tls_flag=() probe_tls=()
  grpc="$(free_port)"
  admin="$(free_port)"
  while [ "$admin" = "$grpc" ]; do admin="$(free_port)"; done
  if [ "$kind" = tls ]; then
    tls_flag=(tls)
    probe_tls=(--tls-ca "$dir/ca.pem" --server-name localhost)
  fi
  config "$grpc" "$admin" "${tls_flag[@]}" >"$dir/$run.toml"
  RUST_LOG=warn "${server_cpu[@]}" "$RATEKEEPER" serve --config "$dir/$run.toml" \
    >"$dir/$run.server.log" 2>&1 &
  local server=$!
  pids+=("$server")
  for _ in $(seq 100); do
    listening "$grpc" && break
    kill -0 "$server" 2>/dev/null || { cat "$dir/$run.server.log" >&2; exit 1; }
    sleep 0.05
  done
  listening "$grpc" || { echo "the server did not listen on $grpc" >&2; exit 1; }
  sleep 1

  echo
  echo "=== $label (server pid $server, gRPC 127.0.0.1:$grpc${tls_flag:+ TLS}) ==="
  local before
  before="$(rss_kb "$server")"
  (
    while kill -0 "$server" 2>/dev/null; do
      echo "$(now_ms) $(rss_kb "$server")"
      sleep 0.25
    done
  ) >"$dir/$run.rss" &
  local sampler=$!
  pids+=("$sampler")
  local started
  started="$(now_ms)"

  # Bounded by the attack: the probe is told to stop when the attacker is done.
  "${client_cpu[@]}" "$HOSTILE" probe --addr "127.0.0.1:$grpc" "${probe_tls[@]}" \
    --every "$PROBE_EVERY" --seconds 3600 --timeout "$PROBE_TIMEOUT" >"$dir/$run.probe" 2>&1 &
  local probe=$!
  pids+=("$probe")
  "${client_cpu[@]}" "$HOSTILE" "$@" --addr "127.0.0.1:$grpc" >"$dir/$run.attack" 2>&1 &
  local attacker=$!
  pids+=("$attacker")
  reap "$attacker"
  local left
  left="$(now_ms)"
  kill -TERM "$probe" 2>/dev/null || true
  cat "$dir/$run.attack"

  sleep "$SETTLE"
  local after peak
  after="$(rss_kb "$server")"
  peak="$(awk -v a="$started" -v b="$left" -v p="$before" \
    '$1 >= a && $1 <= b && $2 > p {p = $2} END {print p}' "$dir/$run.rss")"
  reap "$probe"
  cat "$dir/$run.probe"
  echo "server's own count of closed connections (ratekeeper_connections_closed_total):"
  curl -s --max-time 5 "http://127.0.0.1:$admin/metrics" |
    grep '^ratekeeper_connections_closed_total' | sed 's/^/  /' || echo "  (none)"
  kill "$server" 2>/dev/null || true
  reap "$server"
  reap "$sampler"
  if grep -q . "$dir/$run.server.log"; then
    echo "server log (last 5 lines of $(wc -l <"$dir/$run.server.log")):"
    tail -5 "$dir/$run.server.log" | cut -c1-300 | sed 's/^/  /'
  fi
  echo "RSS: before $(mb "$before") MB, peak $(mb "$peak") MB, ${SETTLE} s after $(mb "$after") MB"

  local calls timeouts failed median p99 max closed growth settled verdict
  calls="$(result "$dir/$run.probe" calls)"
  timeouts="$(result "$dir/$run.probe" timeouts)"
  failed="$(result "$dir/$run.probe" failed)"
  median="$(result "$dir/$run.probe" median_ms)"
  p99="$(result "$dir/$run.probe" p99_ms)"
  max="$(result "$dir/$run.probe" max_ms)"
  closed="$(result "$dir/$run.attack" server_closed)"
  growth="$(mb $((peak - before)))"
  settled="$(mb $((after - before)))"
  verdict=yes
  if [ -z "$max" ] || [ "${timeouts:-1}" != 0 ] || [ "${failed:-1}" != 0 ] ||
    awk -v g="$growth" -v m="$max" 'BEGIN {exit !(g >= 200 || m > 1000)}'; then
    verdict=NO
  fi
  [ "${failed:-0}" != 0 ] && timeouts="${timeouts} (+${failed} failed)"
  printf '| %s | %s | %s | %s | %s | %s / %s / %s | %s | %s |\n' "$label" "$growth" "$settled" \
    "${calls:-?}" "${timeouts:-?}" "${median:-?}" "${p99:-?}" "${max:-?}" "${closed:-?}" "$verdict" >>"$results"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); server: $RATEKEEPER; client: $HOSTILE"
for attack in "${attacks[@]}"; do
  case "$attack" in
    zero-window)
      for conns in $ZW_CONNS; do
        measure "zero window, $conns × $ZW_STREAMS streams" plain \
          zero-window --conns "$conns" --streams "$ZW_STREAMS" --hold "$ZW_HOLD"
      done
      if [ "${ZW_READ_CONNS:-0}" != 0 ]; then
        measure "open windows, answers read, $ZW_READ_CONNS × $ZW_STREAMS streams" plain \
          zero-window --read --conns "$ZW_READ_CONNS" --streams "$ZW_STREAMS" --hold "$ZW_HOLD"
      fi
      ;;
    tls)
      measure "half ClientHellos, $TLS_CONNS conns, $TLS_SECONDS s" tls \
        tls-handshake --conns "$TLS_CONNS" --seconds "$TLS_SECONDS"
      ;;
    stalled-body)
      measure "stalled bodies, $STALL_CONNS conns, $STALL_SECONDS s" plain \
        stalled-body --conns "$STALL_CONNS" --seconds "$STALL_SECONDS"
      ;;
  esac
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| attack | peak RSS growth (MB) | RSS growth ${SETTLE} s after (MB) | probe calls | probe timeouts | probe median / p99 / max (ms) | connections the server closed | target met |"
echo "|---|---|---|---|---|---|---|---|"
cat "$results"
