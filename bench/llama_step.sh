#!/usr/bin/env bash
# Issue 30's SmolLM2-shaped benchmark: smollm2-135m (30 layers, 576 wide, 9
# heads, 3 key-value heads, MLP 1536, tied) with --vocab 128256 (Llama 3's).
#
#   bash bench/llama_step.sh                       # train 10 steps; T 64 and 256, 2 threads, 3 rounds
#   TRAIN_STEPS=0 SEQS=64 ROUNDS=2 bash bench/llama_step.sh
#
# 1. Training: `cleave train` on the King James Bible through Llama 3's
#    tokenizer.json (--tokenizer hf --tokenizer-dir data/llama3), micro-batch
#    4 (also the global batch), T 64, TRAIN_STEPS steps; prints the first and last losses and whether
#    the loss fell (exit 1 if not).
# 2. Step time against PyTorch on the same shapes, F32, micro-batch 4, T in
#    SEQS, THREADS threads: `cleave bench step` and tests/llama_torch.py
#    --time (the repository's PyTorch Llama from HF's equations: autograd,
#    clipping at 1.0, torch.optim.AdamW) alternate ROUNDS times; each prints
#    its mean over STEPS steps after WARMUP. The table gives the medians and
#    cleave's tokens/s over PyTorch's. PyTorch gets OMP_WAIT_POLICY=PASSIVE
#    and OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = the threads (as
#    bench/torch_step.sh gives it).
#
# DTYPE=bf16 times bf16 mixed precision instead: `cleave bench step --dtype
# bf16` against the same PyTorch Llama under torch.autocast("cpu",
# dtype=torch.bfloat16) (llama_torch.py --time --autocast bf16), alternating,
# and the table gives each side's best of ROUNDS (as bench/bf16_step.sh does
# for GPT-2) instead of the medians.
#
#   DTYPE=bf16 TRAIN_STEPS=0 SEQS=64 ROUNDS=2 bash bench/llama_step.sh
#
# Part 2 needs Debian's python3-torch with libopenblas0 (bench/torch_deps.sh:
# installed when run as root with apt, else it says what is missing and
# exits 2).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
SEQS=${SEQS:-"64 256"}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-3}
WARMUP=${WARMUP:-1}
TRAIN_STEPS=${TRAIN_STEPS:-10}
DTYPE=${DTYPE:-fp32}
PY=/usr/bin/python3
case "$DTYPE" in
fp32) AUTOCAST=none ;;
bf16) AUTOCAST=bf16 ;;
*) echo "llama_step.sh: DTYPE must be fp32 or bf16 (got '$DTYPE')" >&2; exit 2 ;;
esac
CLEAVE=${CLEAVE:-build/cleave}
MODEL=(--model smollm2-135m --vocab 128256)
TORCH_MODEL=(--layers 30 --channels 576 --heads 9 --kv-heads 3 --ffn 1536 --vocab 128256 --tied)

[ -f data/kjv.txt ] && [ -f data/llama3/tokenizer.json ] || bash scripts/setup.sh > /dev/null
[ "$CLEAVE" != build/cleave ] || make -s build/cleave > /dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$($CLEAVE version)"

if [ "$TRAIN_STEPS" -gt 0 ]; then
    out=$(mktemp)
    trap 'rm -f "$out"' EXIT
    echo "train: ${MODEL[*]} --tokenizer hf --tokenizer-dir data/llama3 --micro-batch-size 4 --global-batch-size 4 --seq-len 64 --steps $TRAIN_STEPS --threads $THREADS"
    "$CLEAVE" train "${MODEL[@]}" --tokenizer hf --tokenizer-dir data/llama3 --micro-batch-size 4 --global-batch-size 4 --seq-len 64 \
        --steps "$TRAIN_STEPS" --lr 1e-3 --threads "$THREADS" --sample-tokens 0 --eval-batches 1 > "$out" 2>&1 ||
        { tail -5 "$out"; exit 1; }
    l=$(sed -n 's/^step *[0-9]*\/[0-9]* | loss \([0-9.]*\).*/\1/p' "$out")
    first=$(echo "$l" | head -1); last=$(echo "$l" | tail -1)
    echo "train: loss $first at step 1, $last at step $TRAIN_STEPS (ln 128256 = 11.76)"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { echo "train: the loss did not fall"; exit 1; }
    echo "train: the loss fell"
fi

source bench/torch_deps.sh
torch_deps llama_step.sh
if [ "$DTYPE" = bf16 ]; then
    what="bf16 mixed precision (cleave --dtype bf16; PyTorch under torch.autocast(\"cpu\", dtype=torch.bfloat16))"
    isa=$(grep -o -w 'amx_bf16\|avx512_bf16\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
    echo "bf16-related CPU flags: ${isa:-none}"
else
    what=F32
fi
echo "PyTorch $($PY -c 'import torch; print(torch.__version__)'); model ${MODEL[*]}, micro-batch 4, $THREADS threads, $what; $STEPS timed steps after $WARMUP, $ROUNDS rounds alternating"
field() { sed -n "s#.*$1 \([0-9.]*\) $2.*#\1#p" | head -1; }
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# F32: the median of the rounds' ms; bf16: the best (fewest ms), as bench/bf16_step.sh
agg() { if [ "$DTYPE" = bf16 ]; then sort -g | head -1; else median; fi; }
rows=()
for T in $SEQS; do
    cs=(); ts=()
    for r in $(seq "$ROUNDS"); do
        # which runs first alternates by round
        for who in $([ $((r % 2)) = 1 ] && echo "cleave torch" || echo "torch cleave"); do
            if [ "$who" = cleave ]; then
                c=$("$CLEAVE" bench step "${MODEL[@]}" --seq-len "$T" --micro-batch-size 4 --threads "$THREADS" --steps "$STEPS" \
                    --warmup "$WARMUP" --peak 1 --dtype "$DTYPE" | grep '^step:')
                echo "  T $T round $r: cleave: $c"
                cs+=("$(echo "$c" | field "step:" "ms")")
            else
                t=$(env OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" \
                    $PY tests/llama_torch.py --time "${TORCH_MODEL[@]}" --seq-len "$T" --micro-batch-size 4 \
                    --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" --autocast "$AUTOCAST" | grep '^torch.* step:')
                echo "  T $T round $r: $t"
                ts+=("$(echo "$t" | field "step:" "ms")")
            fi
        done
    done
    cm=$(printf '%s\n' "${cs[@]}" | agg); tm=$(printf '%s\n' "${ts[@]}" | agg)
    rows+=("$(awk -v T="$T" -v c="$cm" -v t="$tm" 'BEGIN { printf "| %d | %.1f | %.1f | %.2fx |", T, c, t, t / c }')")
done
echo
how=$([ "$DTYPE" = bf16 ] && echo "best of $ROUNDS" || echo median)
echo "| seq | cleave $DTYPE ms/step ($how) | PyTorch ${DTYPE/bf16/bf16 autocast} ms/step ($how) | cleave speed / PyTorch's |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
