#!/usr/bin/env bash
# Step time of a ZeRO 2/3 run at the default gradient bucket
# (cl_zero_bucket_default: a quarter of the shard, 64 KiB to 25 MiB)
# against an explicit one (OLD, default 25MiB: the default before issue 29),
# alternating which runs first each round, so load drifts hit both alike.
# Prints each run's median step ms (steps after SKIP) and the medians of
# the rounds. Ranks are threads on this machine's cores: compare within a
# round.
#
# Knobs: MODEL (gpt2-tiny) LAYERS (8) DP (4) ZERO (3) MICRO (1) STEPS (12)
# SKIP (2) ROUNDS (4) OLD (25MiB).
#   bash bench/bucket_step.sh
#   MODEL=gpt2-mini LAYERS=4 bash bench/bucket_step.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CLEAVE=${CLEAVE:-build/cleave}
MODEL=${MODEL:-gpt2-tiny} LAYERS=${LAYERS:-8} DP=${DP:-4} ZERO=${ZERO:-3} MICRO=${MICRO:-1}
STEPS=${STEPS:-12} SKIP=${SKIP:-2} ROUNDS=${ROUNDS:-4} OLD=${OLD:-25MiB}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 4000) > "$tmp/text.txt"
run() { # NAME [FLAGS]: one run; prints its median step ms
    local name=$1; shift
    "$CLEAVE" train --model "$MODEL" --layers "$LAYERS" --data "$tmp/text.txt" --threads 1 --eval-batches 1 --dp "$DP" \
        --zero "$ZERO" --micro-batch-size "$MICRO" --global-batch-size $((MICRO * DP)) --steps "$STEPS" --sample-tokens 0 \
        --log-file "$tmp/$name.jsonl" "$@" > /dev/null 2>&1
    python3 -c 'import json,statistics,sys
ms = [json.loads(l)["ms"] for l in open(sys.argv[1]) if "\"loss\"" in l][int(sys.argv[2]):]
print("%.1f" % statistics.median(ms))' "$tmp/$name.jsonl" "$SKIP"
}
echo "$MODEL, $LAYERS layers, dp $DP, --zero $ZERO, micro-batch $MICRO; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round | default ms | $OLD ms"
d=() o=()
for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then a=$(run def); b=$(run old --bucket-size "$OLD"); else b=$(run old --bucket-size "$OLD"); a=$(run def); fi
    echo "$r | $a | $b"
    d+=("$a") o+=("$b")
done
med() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
echo "median | $(med "${d[@]}") | $(med "${o[@]}")"
