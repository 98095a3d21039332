#!/usr/bin/env bash
# Expert parallelism's speed (issue 33, "what it must show"): on two ranks, a
# mixtral-tiny-like model (top-2 of 8 experts) at --dp 2 --ep 2 against a
# dense Llama model with the same active parameters a token (the same shape,
# one SwiGLU MLP of twice an expert's width, --experts 0) trained --dp 2 on
# the same two ranks, alternating; and the step's all-to-all bytes
# (moe_a2a_bytes, rank 0's) against what the cost model predicts for the run
# (`cleave plan ... --json`'s a2a_bytes: dropless, uniform routing). The MoE
# model at --dp 2 without --ep (moe-ep1: every rank all experts, no
# exchange) runs beside them, to tell the exchange's cost from the sparse
# MLP's; last, the ep 2 run's all-to-all ms a step (moe_a2a_ms) and the
# busier ep rank's share of the token-slots, step by step.
#
#   bash bench/moe_step.sh                     # C 256, F 512, 4 layers, T 128
#   C=128 F=256 ROUNDS=3 bash bench/moe_step.sh
#   BALANCE=100 bash bench/moe_step.sh         # the MoE runs resume after 100 steps of training
#
# From initialization the router sends one ep rank up to 0.8 of a step's token-slots (the other waits at each
# exchange); the load-balancing loss evens that out as training goes. BALANCE > 0 first trains the MoE model
# (dp 2 ep 2) that many steps into a checkpoint, and both MoE runs resume from it, so they time a router
# trained as long as that (the dense run starts from initialization: it has no routing to balance).
#
# Each rank one thread (--threads 1), micro-batch MB of T tokens, a global
# batch of 2 MB (one micro-batch a rank a step), STEPS timed steps after
# WARMUP (the step line's ms, mean over the timed steps); the table gives the
# best round of each in tokens/s and the MoE run's share of the dense run's
# (the issue's bar: 80%). Other work on the machine moves the times: compare
# the ratio, not the absolute figures.
set -euo pipefail
cd "$(dirname "$0")/.."
C=${C:-256}
F=${F:-512}
L=${L:-4}
T=${T:-128}
MB=${MB:-4}
STEPS=${STEPS:-4}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-2}
BALANCE=${BALANCE:-0}
make -s build/cleave >/dev/null
[ -f data/kjv.txt ] || bash scripts/setup.sh >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -c 2000000 data/kjv.txt > "$tmp/text.txt"
S=(--model mixtral-tiny --layers "$L" --channels "$C" --heads 8 --kv-heads 4 --context "$T" --seq-len "$T")
P=("${S[@]}" --micro-batch-size "$MB" --global-batch-size $((2 * MB)))
M=("${P[@]}" --data "$tmp/text.txt" --sample-tokens 0 --eval-batches 1 --threads 1 --dp 2)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1 /proc/loadavg)"
echo "model: $L layers, C $C, 8 heads (4 key-value), T $T, micro-batch $MB a rank; MoE: 8 experts of width $F, top-2, ep 2;"
echo "dense: --experts 0 --ffn-channels $((2 * F)); best of $ROUNDS rounds of $STEPS timed steps after $WARMUP"
source bench/step_lib.sh
R=()
if [ "$BALANCE" -gt 0 ]; then
    echo "training the MoE model $BALANCE steps (dp 2 ep 2) first; the MoE runs resume from there"
    ./build/cleave train "${M[@]}" --ffn-channels "$F" --ep 2 --steps "$BALANCE" --save "$tmp/balanced" > "$tmp/balance.out" 2>&1 ||
        { tail -3 "$tmp/balance.out"; exit 1; }
    R=(--resume "$tmp/balanced")
fi
for ((r = 1; r <= ROUNDS; r++)); do
    echo "round $r"
    run dense --experts 0 --ffn-channels $((2 * F)) --steps $((WARMUP + STEPS))
    run moe-ep2 --ffn-channels "$F" --ep 2 --steps $((BALANCE + WARMUP + STEPS)) "${R[@]}"
    run moe-ep1 --ffn-channels "$F" --steps $((BALANCE + WARMUP + STEPS)) "${R[@]}"
done
echo
echo "| run | ms/step (best) | tokens/s | share of the dense run's speed |"
echo "|---|---|---|---|"
for n in dense moe-ep2 moe-ep1; do
    awk -v n="$n" -v t="${best[$n]}" -v o="${best[dense]}" -v tok=$((2 * MB * T)) \
        'BEGIN { printf "| %s | %.1f | %.0f | %.0f%% |\n", n, t, tok * 1000 / t, 100 * o / t }'
done
# the all-to-all's bytes: measured (rank 0's sent and received, every step) against the cost model's
pred=$(./build/cleave plan "${P[@]}" --ffn-channels "$F" --devices 2 --dp 2 --ep 2 --hardware a100 --precision fp32 --zero 0 \
       --recompute none --json --top 1 | grep -o '"a2a_bytes": [0-9]*' | awk '{print $2}')
echo
echo "all-to-all bytes a step, rank 0 (the cost model, uniform routing: $pred sent):"
grep -o '"moe_a2a_bytes": \[[0-9]*, [0-9]*\]' "$tmp/moe-ep2.jsonl" | sed 's/.*\[\([0-9]*\), \([0-9]*\)\]/\1 \2/' |
    awk -v p="$pred" '{ n++; printf "  step %d: sent %d (%.3f of predicted), received %d (%.3f)\n", n, $1, $1 / p, $2, $2 / p }'
# where ep 2's time goes (the last round's timed steps, rank 0): the all-to-alls' ms a step (moe_a2a_ms, the waits for
# the other rank included) and the busier ep rank's share of the step's token-slots (its experts' rows: 0.5 balanced)
echo
/usr/bin/python3 -c '
import json, sys
L = [json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l][int(sys.argv[2]):]
h = len(L[0]["expert_share"]) // 2
for d in L:
    s = d["expert_share"]
    print("  step %d: %.1f ms, all-to-alls %.1f ms (%.0f%%), busier ep rank %.3f of the slots" %
          (d["step"], d["ms"], d["moe_a2a_ms"], 100 * d["moe_a2a_ms"] / d["ms"], max(sum(s[:h]), sum(s[h:]))))' "$tmp/moe-ep2.jsonl" "$WARMUP"
