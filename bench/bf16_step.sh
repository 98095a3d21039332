#!/usr/bin/env bash
# bf16 mixed precision's speed (issue 29): cleave --dtype bf16 against cleave
# F32 and against PyTorch's bf16 autocast, back to back in one run.
#
#   bash bench/bf16_step.sh                  # threads 2, sequence 64 256
#   THREADS=2 SEQS=256 STEPS=5 ROUNDS=3 bash bench/bf16_step.sh
#
# GPT-2 124M, micro-batch 4 (bench/torch_step.sh's model; bench/gpt2_torch.py
# is the PyTorch one, --autocast bf16 for its mixed precision). For every
# (threads, sequence) point, ROUNDS rounds of four runs alternate: cleave F32,
# cleave bf16 (`cleave bench step --dtype fp32|bf16`), PyTorch F32, PyTorch
# bf16 autocast; PyTorch with OMP_WAIT_POLICY=PASSIVE, OMP_NUM_THREADS =
# OPENBLAS_NUM_THREADS = the thread count and OpenBLAS installed (its best
# settings). The table gives each one's best round in tokens/s, the ratios
# the issue names (cleave bf16 / PyTorch bf16, cleave bf16 / cleave F32) and
# cleave bf16's model FLOP/s as a share of the BF16 dot-product peak
# `cleave bench peak` measures (vdpbf16ps; "-" where the CPU has none).
# The machine line names the CPU's bf16 instructions: the ratios differ
# between AMX, AVX512_BF16-only and AVX2-only machines.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
SEQS=${SEQS:-"64 256"}
STEPS=${STEPS:-3}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-2}
PY=/usr/bin/python3

source bench/torch_deps.sh
torch_deps bf16_step.sh
make -s build/cleave >/dev/null

isa=$(grep -o -w 'amx_bf16\|avx512_bf16\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); bf16-related flags: ${isa:-none}"
echo "PyTorch $($PY -c 'import torch; print(torch.__version__)'), BLAS $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)"
echo "$(./build/cleave version)"
echo "model: GPT-2 124M, micro-batch 4, vocab 50304; best of $ROUNDS rounds of $STEPS timed steps after $WARMUP"

field() { sed -n "s#.*$1 \([0-9.]*\) $2.*#\1#p" | head -1; }
best() { printf '%s\n' "$@" | sort -g | tail -1; }

declare -A pk pkb
for n in $THREADS; do
    out=$(./build/cleave bench peak --threads "$n")
    pk[$n]=$(sed -n "s/^peak fp32 $n threads: \([0-9.]*\) GFLOP.*/\1/p" <<<"$out")
    pkb[$n]=$(sed -n "s/^peak bf16 $n threads: \([0-9.]*\) GFLOP.*/\1/p" <<<"$out")
    echo "peak, $n thread(s): fp32 ${pk[$n]} GFLOP/s, bf16 ${pkb[$n]:-none} GFLOP/s (cleave bench peak --threads $n)"
done

torch_run() { # threads seq autocast
    env OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS="$1" OPENBLAS_NUM_THREADS="$1" \
        $PY bench/gpt2_torch.py --threads "$1" --seq-len "$2" --steps "$STEPS" --warmup "$WARMUP" --autocast "$3" | grep '^torch'
}

rows=()
for n in $THREADS; do
    for T in $SEQS; do
        cf=(); cb=(); tf=(); tb=(); gb=()
        for ((r = 1; r <= ROUNDS; r++)); do
            a=$(./build/cleave bench step --threads "$n" --seq-len "$T" --steps "$STEPS" --warmup "$WARMUP" --peak "${pk[$n]}" --dtype fp32 | grep '^step:')
            b=$(./build/cleave bench step --threads "$n" --seq-len "$T" --steps "$STEPS" --warmup "$WARMUP" --peak "${pk[$n]}" --dtype bf16 | grep '^step:')
            c=$(torch_run "$n" "$T" none)
            d=$(torch_run "$n" "$T" bf16)
            echo "  threads $n seq $T round $r: cleave fp32: $a"
            echo "  threads $n seq $T round $r: cleave bf16: $b"
            echo "  threads $n seq $T round $r: $c"
            echo "  threads $n seq $T round $r: $d"
            cf+=("$(field "ms," "tokens/s" <<<"$a")"); cb+=("$(field "ms," "tokens/s" <<<"$b")")
            gb+=("$(field "tokens/s," "GFLOP/s" <<<"$b")")
            tf+=("$(field "ms," "tokens/s" <<<"$c")"); tb+=("$(field "ms," "tokens/s" <<<"$d")")
        done
        rows+=("$(awk -v n="$n" -v T="$T" -v cf="$(best "${cf[@]}")" -v cb="$(best "${cb[@]}")" -v tf="$(best "${tf[@]}")" \
            -v tb="$(best "${tb[@]}")" -v gb="$(best "${gb[@]}")" -v pkb="${pkb[$n]:-0}" 'BEGIN {
            share = pkb > 0 ? sprintf("%.0f%%", 100 * gb / pkb) : "-"
            printf "| %d | %d | %.1f | %.1f | %.1f | %.1f | %.2fx | %.2fx | %s |", n, T, cf, cb, tf, tb, cb / tb, cb / cf, share }')")
    done
done
echo
echo "| threads | seq | cleave fp32 tok/s | cleave bf16 tok/s | PyTorch fp32 tok/s | PyTorch bf16 tok/s | cleave bf16 / PyTorch bf16 | cleave bf16 / cleave fp32 | cleave bf16 % bf16 peak |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
