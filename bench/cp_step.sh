#!/usr/bin/env bash
# Context parallelism's speed (issue 32): one sequence of T tokens trained by
# two context ranks of one thread each against one rank with two threads, on
# the same two cores, alternating.
#
#   bash bench/cp_step.sh                      # T 4096, ring and a2a, 2 rounds
#   T=1024 ROUNDS=3 COMMS=ring bash bench/cp_step.sh
#
# GPT-2 124M's shape with a context of T (12 layers, 768 wide, 12 heads,
# micro-batch 1), STEPS timed steps after WARMUP (the step line's ms, mean
# over the timed steps). Each round runs: one rank --threads 2, then each
# --cp-comm in COMMS at --cp 2 --threads 1. The table gives the best round of
# each in tokens/s and the ratio to one rank (the issue's bar: 85% at T 4096).
# The ring's runs are traced (--trace, the timed steps): each prints the share
# of its ring transfers' flight hidden behind compute in its last step
# (cleave trace render's line: 1 - time waited / time in flight, both ranks).
set -euo pipefail
cd "$(dirname "$0")/.."
T=${T:-4096}
STEPS=${STEPS:-2}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-2}
COMMS=${COMMS:-"ring a2a"}
make -s build/cleave >/dev/null
[ -f data/kjv.txt ] || bash scripts/setup.sh >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
M=(--model gpt2 --context "$T" --seq-len "$T" --micro-batch-size 1 --global-batch-size 1 --steps $((WARMUP + STEPS))
   --sample-tokens 0 --eval-batches 1)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1 /proc/loadavg)"
echo "model: GPT-2 124M shape, T $T, micro-batch 1; best of $ROUNDS rounds of $STEPS timed steps after $WARMUP"
source bench/step_lib.sh
for ((r = 1; r <= ROUNDS; r++)); do
    echo "round $r"
    run one --threads 2
    for c in $COMMS; do
        if [ "$c" = ring ]; then
            run "cp2-$c" --cp 2 --threads 1 --cp-comm "$c" --trace "$tmp/ring.json" --trace-steps "$STEPS"
            ./build/cleave trace render "$tmp/ring.json" --out "$tmp/ring.svg" --step $((WARMUP + STEPS)) | grep '^ring transfers' | sed 's/^/    /'
        else
            run "cp2-$c" --cp 2 --threads 1 --cp-comm "$c"
        fi
    done
done
echo
echo "| layout | ms/step (best) | tokens/s | share of one rank's speed |"
echo "|---|---|---|---|"
for n in one $(for c in $COMMS; do echo "cp2-$c"; done); do
    awk -v n="$n" -v t="${best[$n]}" -v o="${best[one]}" -v T="$T" 'BEGIN { printf "| %s | %.0f | %.1f | %.0f%% |\n", n, t, T * 1000 / t, 100 * o / t }'
done
