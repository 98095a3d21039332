#!/usr/bin/env bash
# Data-parallel step time: dp=2 (two ranks as threads, each with half the
# global batch) against one rank that runs all the micro-batches itself, on
# the same cores. Prints each run's median step time (steps after the first)
# and the ratio dp2 / single; on 2 cores the ideal is 0.5.
#
#   bash bench/dp_step.sh [MODEL] [GLOBAL] [MICRO] [STEPS]   (defaults: gpt2-tiny 16 4 10)
#
# Why the median over steps 2..N: step 1 pays one-time costs (first touch,
# oneDNN's kernel choice); the median resists the noise of a shared VM.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-gpt2-tiny} global=${2:-16} micro=${3:-4} steps=${4:-10}
bin=${CLEAVE:-./build/cleave}
[ -x "$bin" ] || { echo "dp_step: $bin not built (make)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model "$model" --global-batch-size "$global" --micro-batch-size "$micro" --steps "$steps"
        --sample-tokens 0 --eval-batches 1 --log-every 1000000)

median_ms() { # the median "ms" of steps 2.. in a JSON-lines log
    grep -o '"ms": [0-9.]*' "$1" | awk 'NR > 1 { print $2 }' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit } m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'
}

"$bin" train "${common[@]}" --log-file "$tmp/one.json" >"$tmp/one.out" 2>&1 || { cat "$tmp/one.out" >&2; exit 1; }
"$bin" train "${common[@]}" --ranks 2 --dp 2 --log-file "$tmp/dp2.json" >"$tmp/dp2.out" 2>&1 || { cat "$tmp/dp2.out" >&2; exit 1; }
one=$(median_ms "$tmp/one.json")
dp2=$(median_ms "$tmp/dp2.json")
printf 'model %s, global batch %s, micro-batch %s, %s steps, %s cores\n' "$model" "$global" "$micro" "$steps" "$(nproc)"
printf '%-44s %10s\n' "run" "ms/step"
printf '%-44s %10.1f\n' "1 rank, $((global / micro)) micro-batches" "$one"
printf '%-44s %10.1f\n' "--ranks 2 --dp 2, $((global / micro / 2)) micro-batches each" "$dp2"
awk -v a="$dp2" -v b="$one" 'BEGIN { printf "ratio dp2 / 1 rank: %.2f (ideal on 2 cores: 0.50)\n", a / b }'
