#!/usr/bin/env bash
# --pp 2 --dp 2 step time, before and after a change: the same run of two
# cleave binaries taken in turns (BEFORE, AFTER, BEFORE, ...), each run's
# median step time (steps after the first), and the ratio after / before.
# Made for the change that overlaps each pipeline chunk's data-parallel
# gradient reduction with its last backward (the blocking GRAD_SYNC of
# bbb0eda before it):
#
#   git worktree add /tmp/before bbb0eda && make -C /tmp/before -s build/cleave
#   BEFORE=/tmp/before/build/cleave bash bench/pp_dp_step.sh [MODEL] [GLOBAL] [MICRO] [STEPS] [ROUNDS]
#   (defaults: gpt2-mini 16 2 8 3; AFTER defaults to ./build/cleave)
#
# Four ranks share this machine's cores; ratios side by side, never absolute times.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-gpt2-mini} global=${2:-16} micro=${3:-2} steps=${4:-8} rounds=${5:-3}
before=${BEFORE:?set BEFORE to the cleave binary to compare against}
after=${AFTER:-./build/cleave}
for b in "$before" "$after"; do [ -x "$b" ] || { echo "pp_dp_step: $b is not an executable" >&2; exit 2; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
data="$tmp/text.txt"
head -c 600000 data/kjv.txt > "$data"
common=(--model "$model" ${SEQ:+--seq-len $SEQ} --pp 2 --dp 2 --global-batch-size "$global" --micro-batch-size "$micro" --steps "$steps"
        --sample-tokens 0 --eval-batches 1 --log-every 1000000 --data "$data")
median_ms() {
    grep -o '"ms": [0-9.]*' "$1" | awk 'NR > 1 { print $2 }' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit } m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'
}
printf 'model %s, --pp 2 --dp 2, global batch %s, micro-batch %s, %s steps, %s cores; median ms per step\n' \
    "$model" "$global" "$micro" "$steps" "$(nproc)"
printf '%-6s %10s %10s %8s\n' round before after ratio
for r in $(seq "$rounds"); do
    "$before" train "${common[@]}" --log-file "$tmp/b$r.json" >"$tmp/b.out" 2>&1 || { cat "$tmp/b.out" >&2; exit 1; }
    "$after" train "${common[@]}" --log-file "$tmp/a$r.json" >"$tmp/a.out" 2>&1 || { cat "$tmp/a.out" >&2; exit 1; }
    b=$(median_ms "$tmp/b$r.json") a=$(median_ms "$tmp/a$r.json")
    awk -v r="$r" -v b="$b" -v a="$a" 'BEGIN { printf "%-6s %10.1f %10.1f %8.3f\n", r, b, a, a / b }'
done
