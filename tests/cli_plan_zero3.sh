#!/usr/bin/env bash
# The planner's ZeRO 3 at scale against published figures (issue 29, item
# 6), on the built-in a100 description (DGX A100: 8 GPUs a node, one 200
# Gb/s HDR link a GPU), bf16, every configuration fixed as the paper ran it
# (dp = the GPUs, no tensor or pipeline parallelism, full recompute).
# Throughput compared: teraFLOP/s per GPU counting the recompute (the
# planner's tflops_per_device; Narayanan et al.'s Eq. 3 counts it too).
#
# 1. Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
#    on GPU Clusters Using Megatron-LM", Table 2, the "ZeRO-3 without Model
#    Parallelism" rows (sequence 2048, vocabulary 51200): 174.6B (96 layers,
#    12288 channels, 96 heads), batch 1536, on 384 / 768 / 1536 GPUs at
#    micro-batch 4 / 2 / 1: 144 / 88 / 44; 529.6B (105 layers, 20480, 128
#    heads) on 640 GPUs, batch 2560, micro-batch 4: 138; on 1120 / 2240 GPUs,
#    batch 2240, micro-batch 2 / 1: 98 / 48. Band: predicted / published in
#    [0.8, 1.4]. Before the backward's reduce-scatters shared the link with
#    its gathers the planner predicted 1.74x, 1.92x, 1.60x and 1.83x on
#    four of these rows (docs/PERFORMANCE.md, Planner: ZeRO 3 at scale).
#    The 529.6B row on 640 GPUs is checked apart (below): it is not in that
#    band, for a reason stated, not tuned away.
# 2. Zhao et al. 2023, "PyTorch FSDP: Experiences on Scaling Fully Sharded
#    Data Parallel" (VLDB), Section 5.4 and Figure 7(b): minGPT-175B
#    (vocabulary 50000, block 2048), full sharding, activation checkpointing,
#    bf16, "more than 173 and 186 TFLOPS per GPU with batch size equal to 1
#    and 2", 128 to 512 A100 80GB on a 2 Tb/s RoCE network. The planner
#    cannot reach these with one 25 GB/s link a GPU: a step moves 3 x 2 x 175e9
#    bytes a GPU (two gathers, one reduce-scatter), 47 s at 22.5 GB/s, where
#    173 TFLOP/s at batch 1 is a 16.6 s step. Band, stating that gap:
#    predicted / published in [0.3, 0.75] (docs/PERFORMANCE.md says why).
set -u
source "$(dirname "$0")/lib.sh"
G175=(--layers 96 --channels 12288 --heads 96 --context 2048)
G530=(--layers 105 --channels 20480 --heads 128 --context 2048)
tflops() { # PUBLISHED LO HI ARGS...: checks predicted / published in [LO, HI] (LO -: a figure, no band)
    local pub=$1 lo=$2 hi=$3; shift 3
    local out
    out=$("$CLEAVE" plan --hardware a100 --precision bf16 --tp 1 --pp 1 --zero 3 --recompute full --json "$@" 2>&1)
    local got
    got=$(printf '%s\n' "$out" | python3 -c 'import json,sys; print("%.1f" % json.loads(sys.stdin.readline())["tflops_per_device"])' 2> /dev/null)
    lean=$(printf '%s\n' "$out" | python3 -c 'import json,sys; print(str(json.loads(sys.stdin.readline())["lean"]).lower())' 2> /dev/null)
    ratio=$(python3 -c 'import sys; print("%.3f" % (float(sys.argv[1]) / float(sys.argv[2])))' "${got:-0}" "$pub")
    if [ "$lo" = - ]; then
        check '[ -n "$got" ] && [ -n "$lean" ]' "$* : no prediction$(excerpt 2 "$out")"
    else
        check '[ -n "$got" ] && python3 -c "import sys; r = float(sys.argv[1]) / float(sys.argv[2]); sys.exit(not (float(sys.argv[3]) <= r <= float(sys.argv[4])))" "$got" "$pub" "$lo" "$hi"' \
            "$* : predicted ${got:-nothing} TFLOP/s against the published $pub, outside [$lo, $hi] x$(excerpt 2 "$out")"
    fi
    echo "$*: predicted ${got:-?} TFLOP/s, published $pub"
}
# 1. Narayanan et al. 2021, Table 2, ZeRO-3 rows
tflops 144 0.8 1.4 "${G175[@]}" --vocab 51200 --devices 384 --dp 384 --global-batch-size 1536 --micro-batch-size 4
r384=$ratio
tflops 88 0.8 1.4 "${G175[@]}" --vocab 51200 --devices 768 --dp 768 --global-batch-size 1536 --micro-batch-size 2
tflops 44 0.8 1.4 "${G175[@]}" --vocab 51200 --devices 1536 --dp 1536 --global-batch-size 1536 --micro-batch-size 1
# 529.6B on 640 GPUs, micro-batch 4. The 2021 system ran full recompute with
# the T x T attention scores in memory (no blockwise attention then): with
# them (cleave before its GPT block went blockwise, commit 41a58df) two
# gathered 5 GB blocks beside micro-batch 4's activations did not fit 80 GiB,
# the planner took `lean` (one block, gathers exposed) and predicted 0.82x.
# cleave's blockwise attention holds the lse, not the scores, so the plain
# configuration fits (74.4 GiB) without the lean option the paper's system
# would have needed, and cleave is predicted faster than that system: 1.46x.
# Checked: not lean, and its error is the model's error on the row of the
# same shape (174.6B on 384 GPUs: one micro-batch of 4 a GPU, gathers hidden
# under the compute) within 10%, not the Table 2 band.
tflops 138 - - "${G530[@]}" --vocab 51200 --devices 640 --dp 640 --global-batch-size 2560 --micro-batch-size 4
check '[ "$lean" = false ] && python3 -c "import sys; sys.exit(not abs(float(sys.argv[1]) / float(sys.argv[2]) - 1) <= 0.1)" "$ratio" "$r384"' \
    "529.6B on 640 GPUs: lean ${lean:-?}, predicted / published $ratio against the 174.6B row's $r384 (expected not lean, within 10%)"
tflops 98 0.8 1.4 "${G530[@]}" --vocab 51200 --devices 1120 --dp 1120 --global-batch-size 2240 --micro-batch-size 2
tflops 48 0.8 1.4 "${G530[@]}" --vocab 51200 --devices 2240 --dp 2240 --global-batch-size 2240 --micro-batch-size 1
# 2. Zhao et al. 2023 (FSDP), Section 5.4 / Figure 7(b), at both ends of 128-512 GPUs
for n in 128 512; do
    tflops 173 0.3 0.75 "${G175[@]}" --vocab 50000 --devices $n --dp $n --global-batch-size $n --micro-batch-size 1
    tflops 186 0.3 0.75 "${G175[@]}" --vocab 50000 --devices $n --dp $n --global-batch-size $((2 * n)) --micro-batch-size 2
done
finish cli_plan_zero3
