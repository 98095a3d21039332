#!/usr/bin/env bash
# `cleave bench`: peak prints positive FLOP/s and bandwidth (and a BF16 peak
# or its absence); gemm prints a row per product of the step with its
# GFLOP/s, F32 then BF16; step on a small GPT prints
# its operations, their times add up to at most the step, the step's
# FLOP/s line and peak RSS; bad input (no subcommand, unknown subcommand, a
# non-GPT model, a bad number) exits 2 with a message. Timing itself is a
# benchmark's business (bench/torch_step.sh), not a test's.
set -u
source "$(dirname "$0")/lib.sh"

out=$("$CLEAVE" bench peak --repeat 1 2>&1); rc=$?
check '[ $rc -eq 0 ]' "bench peak exited $rc$(excerpt 5 "$out")"
check 'echo "$out" | grep -Eq "^peak fp32 1 thread: [0-9]+\.[0-9] GFLOP/s"' "bench peak: no one-thread peak line$(excerpt 5 "$out")"
g=$(echo "$out" | sed -n 's/^peak fp32 1 thread: \([0-9.]*\) GFLOP.*/\1/p')
check 'awk -v g="${g:-0}" "BEGIN { exit !(g > 1) }"' "bench peak: one-thread peak '$g' is not above 1 GFLOP/s"
check 'echo "$out" | grep -Eq "^memory copy 256 MiB: [0-9.]+ GB/s"' "bench peak: no bandwidth line$(excerpt 5 "$out")"
# BF16: a peak line where cpuid says AVX512_BF16, else the one line saying it is not there
if grep -qw avx512_bf16 /proc/cpuinfo; then
    check 'echo "$out" | grep -Eq "^peak bf16 1 thread: [0-9]+\.[0-9] GFLOP/s \(vdpbf16ps"' "bench peak: no bf16 peak line on an AVX512_BF16 CPU$(excerpt 8 "$out")"
else
    check 'echo "$out" | grep -q "^bf16: not available on this CPU"' "bench peak: no 'bf16: not available' line$(excerpt 8 "$out")"
fi

small=(--model gpt2-tiny --seq-len 32 --micro-batch-size 2 --threads 1 --peak 50)
out=$("$CLEAVE" bench gemm "${small[@]}" --peak-bf16 100 --repeat 1 2>&1); rc=$?
check '[ $rc -eq 0 ]' "bench gemm exited $rc$(excerpt 5 "$out")"
rows=$(echo "$out" | grep -Ec '^(qkv|attn proj|fc|fc proj|logits) (fwd|bwd input|bwd weight) ')
check '[ "$rows" -eq 15 ]' "bench gemm: $rows product rows, expected 15$(excerpt 20 "$out")"
check 'echo "$out" | grep -Eq "^logits fwd +NT +64 +256 +64 "' "bench gemm: the logits shape is not N=64 x V=256 x C=64$(excerpt 20 "$out")"
rows=$(echo "$out" | grep -Ec '^bf16 (qkv|attn proj|fc|fc proj|logits) (fwd|bwd input|bwd weight) .* [0-9.]+x$')
check '[ "$rows" -eq 15 ]' "bench gemm: $rows bf16 product rows, expected 15$(excerpt 40 "$out")"
check 'echo "$out" | grep -Eq "^bf16 gemm: (onednn matmul|widened to f32), 1 threads; peak bf16 100.0 GFLOP/s"' "bench gemm: no bf16 header$(excerpt 40 "$out")"
check 'echo "$out" | grep -Eq "^bf16 gemm all shapes once: [0-9.]+ GFLOP/s, [0-9.]+% of bf16 peak, [0-9.]+x fp32"' "bench gemm: no bf16 total$(excerpt 40 "$out")"

out=$("$CLEAVE" bench step "${small[@]}" --steps 2 --warmup 1 2>&1); rc=$?
check '[ $rc -eq 0 ]' "bench step exited $rc$(excerpt 5 "$out")"
check 'echo "$out" | grep -Eq "^step: [0-9.]+ ms, [0-9.]+ tokens/s, [0-9.]+ GFLOP/s, [0-9.]+% of peak 50.0 GFLOP/s, peak RSS [0-9.]+ MiB"' \
    "bench step: no step line$(excerpt 40 "$out")"
for op in "fwd qkv" "fwd attention" "fwd bias gelu" "fwd residual layernorm" "fwd softmax xent" "bwd fc w" "bwd attention" "adamw (with clip)"; do
    check 'echo "$out" | grep -q "^$op "' "bench step: no row for '$op'$(excerpt 40 "$out")"
done
# every row's ms/step, (other) included, adds up to the step's ms within rounding
sum=$(echo "$out" | awk '/^(fwd|bwd|zero|grad|adamw|\(other\))/ { for (i = 1; i <= NF; i++) if ($i ~ /%$/) { s += $(i - 1); break } } END { printf "%.2f", s }')
step=$(echo "$out" | sed -n 's/^step: \([0-9.]*\) ms.*/\1/p')
check 'awk -v s="$sum" -v t="$step" "BEGIN { d = s - t; if (d < 0) d = -d; exit !(d <= 0.05 * t + 0.1) }"' \
    "bench step: rows add to $sum ms, the step is $step ms$(excerpt 40 "$out")"

for bad in "" "nope" "step --model mlp" "step --threads 0" "gemm --seq-len x"; do
    # shellcheck disable=SC2086
    out=$("$CLEAVE" bench $bad 2>&1); rc=$?
    check '[ $rc -eq 2 ]' "cleave bench $bad: exit $rc, expected 2$(excerpt 3 "$out")"
    check '[ -n "$out" ]' "cleave bench $bad: no message"
done
out=$("$CLEAVE" bench step --model mlp 2>&1)
check 'echo "$out" | grep -q "GPT"' "bench step --model mlp: the message does not say it needs a GPT$(excerpt 3 "$out")"

finish cli_bench
