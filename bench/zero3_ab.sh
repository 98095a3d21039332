#!/bin/bash
# Old binary against new on dp 2 ZeRO 3 steps, alternating, for a change to
# the ZeRO 3 gathers or the all-gathers (docs/PERFORMANCE.md, "Where dp 2
# with ZeRO 3 spends"): each pair runs OLD then NEW for each dtype, and
# prints the mean step ms after the first (WARMUP), the step's zero3_wait_ms,
# rank 0's all-gather calls and bytes (the log's comm.dp, exact whatever the
# load), the last loss (bitwise equal when the change keeps the bits) and
# the load average.
#
#   OLD=/tmp/cleave_main [NEW=build/cleave] [MODEL=gpt2] [SEQ=256] [STEPS=3] [PAIRS=2] [DTYPES="bf16 fp32"] \
#       bash bench/zero3_ab.sh
# OLD needs CLEAVE_DATA when it was built in another checkout (the tokenizer files).
set -euo pipefail
cd "$(dirname "$0")/.."
old=${OLD:?OLD=path of the old cleave binary} new=${NEW:-build/cleave}
model=${MODEL:-gpt2} seq=${SEQ:-256} steps=${STEPS:-3} pairs=${PAIRS:-2} dtypes=${DTYPES:-bf16 fp32}
WARMUP=${WARMUP:-1}
[ "$steps" -gt "$WARMUP" ] || { echo "zero3_ab: STEPS must exceed WARMUP" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -c 600000 data/kjv.txt > "$tmp/text.txt"
source bench/step_lib.sh
calls() { /usr/bin/python3 -c '
import json, sys
v = [json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l]
ag = v[-1]["comm"]["dp"]["allgather"]
print("wait %.1f ms, allgather %d calls %d sent %d received, loss %.17g" % (v[-1].get("zero3_wait_ms", 0), ag[0], ag[1], ag[2], v[-1]["loss"]))' "$1"; }
for p in $(seq 1 "$pairs"); do
    for dt in $dtypes; do
        for which in old new; do
            bin=$old
            [ "$which" = new ] && bin=$new
            "$bin" train --model "$model" --data "$tmp/text.txt" --seq-len "$seq" --micro-batch-size 4 --global-batch-size 8 \
                --steps "$steps" --sample-tokens 0 --eval-batches 1 --log-every 1 --dp 2 --zero 3 --threads 1 --dtype "$dt" \
                --log-file "$tmp/$which.jsonl" > "$tmp/$which.out" 2>&1 || { tail -3 "$tmp/$which.out"; exit 1; }
            echo "pair $p $dt $which: $(ms "$tmp/$which.jsonl") ms a step; $(calls "$tmp/$which.jsonl"); load $(cut -d' ' -f1 /proc/loadavg)"
        done
    done
done
