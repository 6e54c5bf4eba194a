#!/usr/bin/env bash
# What one keyed check executes and misses, ratekeeper's in-memory table
# beside governor's keyed limiter (each on its default clock, 100,000
# distinct keys walked round-robin, every check allowed), counted by
# valgrind's callgrind with its cache simulation: unlike the criterion
# bench's times, the counts do not move with the machine's load.
#
#   scripts/callgrind-keyed.sh [checks]
#   LL=8388608,16,64 scripts/callgrind-keyed.sh [checks]
#
# Each limiter runs twice, with `checks` and 3x `checks` measured checks
# after the same warm-up; the difference divided by 2x `checks` is the
# steady walk's cost per check, without the warm-up's first checks of each
# key. The cache geometry is the host's, as callgrind reads it, unless LL
# gives the last level's (size,associativity,line size): on this VM
# callgrind reads a 256 MiB direct-mapped last level, which nothing misses,
# where the L3 share a load actually finds is 8-16 MiB (BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
checks="${1:-200000}"
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install -y valgrind" >&2; exit 1; }
cargo build --release -q -p ratekeeper --example keyed_walk
binary="${CARGO_TARGET_DIR:-target}/release/examples/keyed_walk"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
counts() { # LIMITER CHECKS -> "Ir D1-read-misses LL-read-misses"
  valgrind --tool=callgrind --cache-sim=yes ${LL:+--LL=$LL} --toggle-collect='keyed_walk::walk' \
    --callgrind-out-file="$out/cg" "$binary" "$1" "$2" 2>&1 >/dev/null |
    awk '/Collected :/ {print $4, $8, $11}'
}
printf '%-11s %14s %18s %18s\n' limiter 'instructions' 'D1 read misses' 'LL read misses'
for limiter in ratekeeper governor; do
  read -r ir1 d1 ll1 <<<"$(counts "$limiter" "$checks")"
  read -r ir3 d3 ll3 <<<"$(counts "$limiter" $((3 * checks)))"
  awk -v n=$((2 * checks)) -v l="$limiter" -v a="$ir1" -v b="$ir3" -v c="$d1" -v d="$d3" -v e="$ll1" -v f="$ll3" \
    'BEGIN { printf "%-11s %14.1f %18.3f %18.3f\n", l, (b - a) / n, (d - c) / n, (f - e) / n }'
done
