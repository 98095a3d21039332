#!/usr/bin/env bash
# Where dp 2 with ZeRO 3 loses against one rank, per dtype (issue 29's "dp 2 with ZeRO 3 ... within 10% of
# their F32 ratio to one rank"; docs/PERFORMANCE.md, "bf16 in every layout"). In each round, for fp32 and
# then bf16: one rank with two GEMM threads and a global batch of GB (the reference, as bench/bf16_layouts.sh),
# one rank with one thread and GB / 2 samples (what a dp rank computes, alone on the cores), dp 2 without
# ZeRO, dp 2 with ZeRO 3 (ranks as threads, one thread each). solo / one shows the compute's split over two
# ranks without any exchange; dp0 against solo the gradient all-reduce; dp2z3 against dp0 ZeRO 3's gathers
# and reduce-scatters. A run's figure is the mean step-line ms after WARMUP; each keeps its best round.
#
#   ROUNDS=2 STEPS=3 bash bench/bf16_dp_parts.sh
#
# Knobs: MODEL (gpt2) LAYERS (the preset's) SEQ (256) MICRO (4) GB (8) STEPS (3) WARMUP (1) ROUNDS (2). Run it
# on idle cores: the load average is printed before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-gpt2} seq=${SEQ:-256} micro=${MICRO:-4} gb=${GB:-8} steps=${STEPS:-3} rounds=${ROUNDS:-2}
WARMUP=${WARMUP:-1}
[ -x build/cleave ] || { echo "bf16_dp_parts: build first (make)" >&2; exit 2; }
[ "$steps" -gt "$WARMUP" ] || { echo "bf16_dp_parts: STEPS must exceed WARMUP" >&2; exit 2; }
[ $((gb % (2 * micro))) -eq 0 ] || { echo "bf16_dp_parts: GB must be a multiple of 2 x MICRO" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -c 600000 data/kjv.txt > "$tmp/text.txt"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
M=(--model "$model" ${LAYERS:+--layers "$LAYERS"} --data "$tmp/text.txt" --seq-len "$seq" --micro-batch-size "$micro"
   --steps "$steps" --sample-tokens 0 --eval-batches 1 --log-every 1)
source bench/step_lib.sh
parts=("one|--threads 2 --global-batch-size $gb" "solo|--threads 1 --global-batch-size $((gb / 2))"
       "dp0|--dp 2 --threads 1 --global-batch-size $gb" "dp2z3|--dp 2 --zero 3 --threads 1 --global-batch-size $gb")
for r in $(seq 1 "$rounds"); do
    echo "round $r"
    for dt in fp32 bf16; do
        for p in "${parts[@]}"; do run "$dt-${p%%|*}" --dtype "$dt" ${p#*|}; done
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '\n%-6s %10s %10s %10s %10s %12s %12s %12s\n' dtype "one ms" "solo ms" "dp0 ms" "dp2z3 ms" "one / solo" "one / dp0" "one / dp2z3"
for dt in fp32 bf16; do
    awk -v d="$dt" -v o="${best[$dt-one]}" -v s="${best[$dt-solo]}" -v z="${best[$dt-dp0]}" -v t="${best[$dt-dp2z3]}" \
        'BEGIN { printf "%-6s %10.1f %10.1f %10.1f %10.1f %12.3f %12.3f %12.3f\n", d, o, s, z, t, o / s, o / z, o / t }'
done
