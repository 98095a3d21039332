#!/usr/bin/env bash
# bf16 mixed precision in every layout (issue 29: "tp 2, dp 2 with ZeRO 3, and pp 2 in bf16 each within 10% of
# their F32 ratio to one rank"). GPT-2 124M (MODEL), sequence SEQ, micro-batch MICRO, a global batch of GB
# samples; in each round, for fp32 and then bf16, in turns: one rank with two GEMM threads (the reference), tp 2,
# dp 2 with ZeRO 3, pp 2 (1f1b), ranks as threads with one GEMM thread each. A run's figure is the mean step-line
# ms of its steps after WARMUP; each configuration keeps its best round. Printed: every figure, each layout's
# speed-up over one rank (one rank's ms / the layout's ms) in each dtype, and bf16's speed-up over fp32's
# (the issue's bar: 0.9 to 1.1).
#
#   ROUNDS=2 STEPS=3 bash bench/bf16_layouts.sh
#
# Knobs: MODEL (gpt2) SEQ (256) MICRO (4) GB (8) STEPS (3) WARMUP (1) ROUNDS (2). The cores are shared with
# whatever else runs: run it on an idle machine; the load average is printed before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-gpt2} seq=${SEQ:-256} micro=${MICRO:-4} gb=${GB:-8} steps=${STEPS:-3} rounds=${ROUNDS:-2}
WARMUP=${WARMUP:-1}
[ -x build/cleave ] || { echo "bf16_layouts: build first (make)" >&2; exit 2; }
[ "$steps" -gt "$WARMUP" ] || { echo "bf16_layouts: STEPS must exceed WARMUP" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -c 600000 data/kjv.txt > "$tmp/text.txt"
printf 'cpu: %s; %s cores; %s\n' "$(lscpu | sed -n 's/^Model name: *//p')" "$(nproc)" \
    "$(grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ' | sed 's/ $//;s/^$/no avx512/')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
M=(--model "$model" --data "$tmp/text.txt" --seq-len "$seq" --micro-batch-size "$micro" --global-batch-size "$gb"
   --steps "$steps" --sample-tokens 0 --eval-batches 1 --log-every 1)
source bench/step_lib.sh
layouts=("one|--threads 2" "tp2|--tp 2 --threads 1" "dp2z3|--dp 2 --zero 3 --threads 1" "pp2|--pp 2 --schedule 1f1b --threads 1")
for r in $(seq 1 "$rounds"); do
    echo "round $r"
    for dt in fp32 bf16; do
        for l in "${layouts[@]}"; do
            run "$dt-${l%%|*}" --dtype "$dt" ${l#*|}
        done
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '\n%-8s %12s %12s %14s %14s %16s\n' layout "fp32 ms" "bf16 ms" "fp32 speed-up" "bf16 speed-up" "bf16 / fp32 (bar 0.9-1.1)"
for l in "${layouts[@]}"; do
    n=${l%%|*}
    awk -v n="$n" -v f="${best[fp32-$n]}" -v b="${best[bf16-$n]}" -v f1="${best[fp32-one]}" -v b1="${best[bf16-one]}" \
        'BEGIN { printf "%-8s %12.1f %12.1f %14.3f %14.3f %16.3f\n", n, f, b, f1 / f, b1 / b, (b1 / b) / (f1 / f) }'
done
