#!/usr/bin/env bash
# Pipeline bubble on pp=2 (two ranks as threads on the two cores): for each
# schedule and micro-batch count, the measured bubble and the simulator's
# (same schedule, the step's measured stage times), their means over the
# last 8 of 12 steps, the closed form for equal stage times, and tokens/s;
# one rank with the same micro-batches alongside.
#   bash bench/pp_bubble.sh [extra cleave train flags]
set -u
cd "$(dirname "$0")/.."
CLEAVE=${CLEAVE:-build/cleave}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=(--seq-len 64 --micro-batch-size 8 --steps 12 --sample-tokens 0 --eval-batches 1)
mean() { grep "\"$2\"" "$1" | tail -8 | sed "s/.*\"$2\": \([0-9.e+-]*\).*/\1/" | awk '{ a += $1; n++ } END { printf "%.3f", a / n }'; }
printf "%-12s %3s  %9s %9s %11s  %8s %8s\n" schedule m measured simulated closed-form "tok/s" "1 rank"
for m in 2 8; do
    "$CLEAVE" train "${base[@]}" --global-batch-size $((8 * m)) "$@" --log-file "$tmp/one.jsonl" > /dev/null 2>&1
    one=$(mean "$tmp/one.jsonl" tokens_per_s)
    for sched in gpipe 1f1b interleaved zb-h1; do
        "$CLEAVE" train "${base[@]}" --global-batch-size $((8 * m)) --pp 2 --schedule $sched "$@" --log-file "$tmp/b.jsonl" \
            > "$tmp/b.out" 2>&1 || { echo "$sched m=$m failed: $(tail -1 "$tmp/b.out")"; continue; }
        cf=$(grep -o "theoretical bubble (equal stage times): [0-9.]*" "$tmp/b.out" | awk '{ print $NF }')
        printf "%-12s %3d  %9s %9s %11s  %8.0f %8.0f\n" $sched $m "$(mean "$tmp/b.jsonl" bubble)" "$(mean "$tmp/b.jsonl" bubble_sim)" \
            "$cf" "$(mean "$tmp/b.jsonl" tokens_per_s)" "$one"
    done
done
