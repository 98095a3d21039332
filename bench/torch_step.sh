#!/usr/bin/env bash
# cleave's single-rank training step against PyTorch's, side by side.
#
#   bash bench/torch_step.sh                 # threads 1 2, sequence 64 256
#   THREADS=2 SEQS=256 STEPS=5 bash bench/torch_step.sh
#
# GPT-2 124M (12 layers, 768 channels, 12 heads, vocabulary 50257 padded to
# 50304, 1024 positions), micro-batch 4, AdamW with clipping, the same in
# both (bench/gpt2_torch.py is the PyTorch model). For every (threads,
# sequence) point the three runs alternate: cleave (`cleave bench step`),
# PyTorch as this machine is configured (OPENBLAS_CORETYPE as the
# environment has it), PyTorch with OPENBLAS_CORETYPE unset (its best case
# where the variable is set to an older core). PyTorch always gets
# OMP_WAIT_POLICY=PASSIVE and OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = the
# thread count; without them its OpenMP and OpenBLAS workers fight over the
# cores. Each run's FLOP/s (model FLOPs, counted alike) is a share of the
# FP32 peak `cleave bench peak` measures at that thread count. Times are
# means over STEPS steps after WARMUP untimed ones.
#
# Needs Debian's python3-torch and an optimized BLAS for it (libopenblas0);
# as root it installs them, otherwise it says what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-"1 2"}
SEQS=${SEQS:-"64 256"}
STEPS=${STEPS:-3}
WARMUP=${WARMUP:-1}
PY=/usr/bin/python3

source bench/torch_deps.sh
torch_deps torch_step.sh
[ -f data/kjv.txt ] || bash scripts/setup.sh >/dev/null
make -s build/cleave >/dev/null

configured=${OPENBLAS_CORETYPE-}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2)"
echo "PyTorch $($PY -c 'import torch; print(torch.__version__)'), BLAS $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3); OPENBLAS_CORETYPE as configured: ${configured:-(unset)}"
echo "$(./build/cleave version)"
echo "model: GPT-2 124M, micro-batch 4, vocab 50304; $STEPS timed steps after $WARMUP"

field() { sed -n "s#.*$1 \([0-9.]*\) $2.*#\1#p" | head -1; }

declare -A peak
for n in $THREADS; do
    peak[$n]=$(./build/cleave bench peak --threads "$n" | sed -n "s/^peak fp32 $n threads: \([0-9.]*\) GFLOP.*/\1/p")
    echo "peak fp32, $n thread(s): ${peak[$n]} GFLOP/s (cleave bench peak --threads $n)"
done

run_torch() { # threads seq [unset]
    local envs=(OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1)
    if [ "${3:-}" = unset ]; then env -u OPENBLAS_CORETYPE "${envs[@]}" $PY bench/gpt2_torch.py --threads "$1" --seq-len "$2" --steps "$STEPS" --warmup "$WARMUP"
    else env "${envs[@]}" $PY bench/gpt2_torch.py --threads "$1" --seq-len "$2" --steps "$STEPS" --warmup "$WARMUP"; fi
}

rows=()
for n in $THREADS; do
    for T in $SEQS; do
        c=$(./build/cleave bench step --threads "$n" --seq-len "$T" --steps "$STEPS" --warmup "$WARMUP" --peak "${peak[$n]}" | grep '^step:')
        tc=$(run_torch "$n" "$T" | grep '^torch step:')
        tb=$(run_torch "$n" "$T" unset | grep '^torch step:')
        ct=$(echo "$c" | field "ms," "tokens/s"); cg=$(echo "$c" | field "tokens/s," "GFLOP/s"); cr=$(echo "$c" | field "RSS" "MiB")
        pt=$(echo "$tc" | field "ms," "tokens/s"); pg=$(echo "$tc" | field "tokens/s," "GFLOP/s"); pr=$(echo "$tc" | field "RSS" "MiB")
        bt=$(echo "$tb" | field "ms," "tokens/s"); bg=$(echo "$tb" | field "tokens/s," "GFLOP/s"); br=$(echo "$tb" | field "RSS" "MiB")
        echo "  threads $n seq $T: cleave: $c"
        echo "  threads $n seq $T: $tc"
        echo "  threads $n seq $T: (OPENBLAS_CORETYPE unset) $tb"
        rows+=("$(awk -v n="$n" -v T="$T" -v ct="$ct" -v pt="$pt" -v bt="$bt" -v cg="$cg" -v pg="$pg" -v bg="$bg" \
            -v cr="$cr" -v pr="$pr" -v br="$br" -v pk="${peak[$n]}" 'BEGIN {
            printf "| %d | %d | %.1f | %.1f | %.2fx | %.1f | %.2fx | %.0f%% | %.0f%% | %.0f%% | %.0f | %.0f | %.0f |",
                n, T, ct, pt, ct / pt, bt, ct / bt, 100 * cg / pk, 100 * pg / pk, 100 * bg / pk, cr, pr, br }')")
    done
done
echo
echo "| threads | seq | cleave tok/s | PyTorch tok/s (configured) | ratio | PyTorch tok/s (core type unset) | ratio | cleave % peak | PyTorch % peak | PyTorch (unset) % peak | cleave RSS MiB | PyTorch RSS MiB | PyTorch (unset) RSS MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
