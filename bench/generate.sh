#!/usr/bin/env bash
# Generation speed: `cleave generate` with its KV cache against the
# recomputing path (--no-kv-cache) and against the PyTorch reference's
# greedy loop (tests/llama_torch.py or scripts/hf_eval.py --generate, which
# recomputes each window, F32, torch's own threads), on the same checkpoint
# (MODEL trained STEPS steps at context CONTEXT, byte vocabulary), greedy,
# NEW tokens after a prompt of PROMPT bytes. The three alternate which runs
# first each round, so load drifts hit them alike; prints each run's decode
# tokens/s (cleave's prefill too) and the medians' ratios.
#
# Knobs: MODEL (llama-tiny; or gpt2-tiny) CONTEXT (256) PROMPT (64) NEW (128)
# STEPS (2) ROUNDS (3) THREADS (1: OMP_NUM_THREADS for cleave and torch
# alike; on a loaded machine every parallel region of a decode step waits
# for a descheduled thread, and a step is many small regions).
#   bash bench/generate.sh
#   MODEL=gpt2-tiny CONTEXT=512 NEW=256 bash bench/generate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CLEAVE=${CLEAVE:-build/cleave}
PY=${PY:-/usr/bin/python3}
MODEL=${MODEL:-llama-tiny} CONTEXT=${CONTEXT:-256} PROMPT=${PROMPT:-64} NEW=${NEW:-128} STEPS=${STEPS:-2} ROUNDS=${ROUNDS:-3}
export OMP_NUM_THREADS=${THREADS:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 4000) > "$tmp/text.txt"
vocab=()
ref=tests/llama_torch.py
[ "$MODEL" = llama-tiny ] || vocab=(--vocab 256) ref=scripts/hf_eval.py
"$CLEAVE" train --model "$MODEL" "${vocab[@]}" --data "$tmp/text.txt" --context "$CONTEXT" --seq-len "$CONTEXT" --micro-batch-size 1 \
    --global-batch-size 1 --steps "$STEPS" --sample-tokens 0 --save "$tmp/ck" > /dev/null
prompt=$(head -c "$PROMPT" "$tmp/text.txt" | tr '\n' ' ')
rate() { sed -n "s/.*$1 [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1/p" | head -1; }
kvrun() { "$CLEAVE" generate --checkpoint "$tmp/ck" --prompt "$prompt" --tokens "$NEW" --temperature 0 --timing "$@" 2>&1 > /dev/null; }
pyrun() { $PY "$ref" --generate "$tmp/ck" "$prompt" "$NEW" 2>&1 > /dev/null; }
echo "$MODEL, context $CONTEXT, prompt $PROMPT bytes, $NEW new tokens, greedy, $OMP_NUM_THREADS thread(s); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round | KV prefill tok/s | KV decode tok/s | recomputing decode tok/s | PyTorch tok/s"
kd=() rd=() pd=()
for r in $(seq "$ROUNDS"); do
    case $((r % 3)) in
    1) k=$(kvrun); c=$(kvrun --no-kv-cache); p=$(pyrun) ;;
    2) c=$(kvrun --no-kv-cache); p=$(pyrun); k=$(kvrun) ;;
    0) p=$(pyrun); k=$(kvrun); c=$(kvrun --no-kv-cache) ;;
    esac
    kp=$(rate prefill <<< "$k") kv=$(rate decode <<< "$k") cv=$(rate decode <<< "$c") pv=$(rate window\): <<< "$p")
    echo "$r | $kp | $kv | $cv | $pv"
    kd+=("$kv") rd+=("$cv") pd+=("$pv")
done
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
K=$(med "${kd[@]}") R=$(med "${rd[@]}") P=$(med "${pd[@]}")
echo "median decode tok/s | KV $K | recomputing $R | PyTorch $P"
awk -v k="$K" -v r="$R" -v p="$P" 'BEGIN { printf "KV cache / recomputing %.2fx; KV cache / PyTorch %.2fx\n", k / r, k / p }'
