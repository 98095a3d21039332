#!/usr/bin/env bash
# ZeRO stage 2 end to end (issue 15's "What must hold", for stage 2):
# - equivalence: 20 steps of gpt2-tiny with gradient clipping active (the
#   default --grad-clip 1.0), --zero 2 against --zero 0 on the same mesh,
#   batch and micro-batches.
#   With one micro-batch per replica the losses and grad norms are bitwise
#   equal: each bucket is reduce-scattered with the fold of the all-reduce
#   (rank order, element by element), so every gradient float has --zero
#   0's bits; the norm is summed from the same per-block sums of squares as
#   cl_sumsq's (blocks of 16384 floats from each parameter's start, a block
#   that crosses into the next shards read from their all-gathered first
#   floats), added in the same order; AdamW is elementwise. Checked at dp 2
#   and dp 4 (threads), dp 2 under MPI (MPI bitwise equal to threads),
#   tp 2 x dp 2 with and without --sequence-parallel, a GPT whose sizes do
#   not divide (dp 2 and 4), the MLP at dp 4 (shards smaller than a block),
#   and dp 2 with the moments offloaded to host memory and to a file.
#   With several micro-batches per replica (gradient accumulation, and every
#   pipeline) the losses are within 1e-6 relative, not bitwise: --zero 2
#   keeps no whole gradient buffer, so each micro-batch's buckets are
#   reduce-scattered and added into the shard (sum over the replicas, then
#   over the micro-batches) where --zero 0 accumulates the micro-batches on
#   each replica first and sums over the replicas once (float addition is not
#   associative). Checked at dp 2 (4 micro-batches), pp 2 x dp 2 (1f1b,
#   interleaved, zb-h1), tp 2 x pp 2 x dp 2 on 8 thread ranks with sp.
#   Under zb-h1 (the backward split into an input pass B and a weight pass
#   W) each micro-batch's W pass fills and reduce-scatters the buckets as a
#   combined backward does, and the LM head's lnf gradient, which comes in
#   B, is kept whole (summed over the micro-batches, then the replicas);
#   also within 1e-6 of --zero 0 for the reason above.
# - communication: a --zero 2 step at dp 2 with one bucket reduce-scatters
#   and all-gathers half the part each, (N-1)/N x 4 x Psi bytes, together
#   exactly the bytes --zero 0's all-reduce sends; the norm adds two small
#   all-gathers (every shard's first 16384 floats, and 8 bytes per block).
# - memory: cleave memory --measure, every category of every rank predicted
#   == measured, and params, grads and optimizer equal the formulas from the
#   shapes (Psi_p the part's floats padded to a multiple of 16 N):
#   params 4 Psi_p, optimizer 8 Psi_p / N, grads 4 (Psi_p / N + W + H + k B + L):
#   the shard, W the gradients kept whole (the tied wte on a pipeline stage
#   holding only the embedding or only the head, the layernorms under
#   sequence parallelism), H the LM head's separate wte gradient, k (2, or 1
#   with one non-empty bucket) working buffers of B floats, the largest
#   bucket (with --bucket-size 1 a bucket is one unit: a block's floats), L
#   the norm's buffer: N min(Psi_p / N, 16384) + 16384; under zb-h1 W also
#   holds the last stage's lnf, whose bucket is then empty (k = 1 there).
# - checkpoints: a --zero 2 checkpoint (one micro-batch per replica) is the
#   --zero 0 one byte for byte; --zero 2 resumed from it, --zero 0 from it,
#   --zero 2 from a --zero 0 one continue the uninterrupted run's losses
#   bitwise, --zero 2 at dp 4 from dp 2's continues --zero 0 at dp 4 from it;
#   pp 2 x dp 2 resumes its own checkpoint bitwise.
set -u
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_lib.sh"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
base=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --steps 20 --sample-tokens 0 --eval-batches 2)
pair() { # name args...: name-z0 and name-z2
    local name=$1; shift
    train "$name-z0" "$@"
    train "$name-z2" "$@" --zero 2
}

# ---- one micro-batch per replica: losses and grad norms bitwise ------------------
pair dp2 "${base[@]}" --global-batch-size 4 --dp 2 --bucket-size 25MiB # one bucket: the byte counts below
pair dp4 "${base[@]}" --global-batch-size 8 --dp 4
clipped dp2-z0
same dp2-z2 dp2-z0
same dp4-z2 dp4-z0
# the norm's blocks across shards: a GPT whose size does not divide (the last shard ends in padding) and whose
# wte (384 x 48 = 18432 floats) is two blocks, at dp 2 and 4; the MLP 64-128-128-10 at dp 4, whose shards
# (26176 / 4 = 6544 floats) are smaller than a block, so fc2's 16384-float block spans three of them
odd=(--layers 3 --channels 48 --heads 3 --vocab 300 --context 32)
pair odd2 "${base[@]}" "${odd[@]}" --global-batch-size 4 --dp 2
pair odd4 "${base[@]}" "${odd[@]}" --global-batch-size 8 --dp 4
pair mlp4 --model mlp --micro-batch-size 2 --global-batch-size 8 --steps 20 --eval-batches 1 --dp 4
for r in odd2 odd4 mlp4; do same $r-z2 $r-z0; done
pair tp2dp2 "${base[@]}" --global-batch-size 4 --dp 2 --tp 2 --check-replicas
pair tp2dp2sp "${base[@]}" --global-batch-size 4 --dp 2 --tp 2 --sequence-parallel --check-replicas
same tp2dp2-z2 tp2dp2-z0
same tp2dp2sp-z2 tp2dp2sp-z0
# with the moments offloaded (host memory, a file): AdamW reads the shard's gradients there too
train dp2-z2-host "${base[@]}" --global-batch-size 4 --dp 2 --zero 2 --offload-optimizer host
mkdir -p "$tmp/off"
train dp2-z2-disk "${base[@]}" --global-batch-size 4 --dp 2 --zero 2 --offload-optimizer disk --offload-dir "$tmp/off"
same dp2-z2-host dp2-z0
same dp2-z2-disk dp2-z0
# one bucket (25 MiB holds gpt2-tiny; the default under --zero 2 is 64 KiB here): the reduce-scatter and the
# all-gather each move half of the 120576 floats; together zero 0's all-reduce.
# The norm's all-gathers: 16384 floats (65536 B) of rank 0's shard, and 8 B for
# each of the 13 blocks starting in it (wte, wpe and h.0's 11 tensors up to
# mlp.c_proj.weight at float 54016 < 60288; every tensor is one block here):
# 241152 + 65536 + 104 = 306792 B sent by rank 0 in 3 all-gathers
bad=$(grep '"loss"' "$tmp/dp2-z2.jsonl" | grep -vc '"allgather": \[3, 306792, ')
check '[ "$bad" -eq 0 ]' "dp2-z2: $bad steps without 3 all-gathers sending 306792 bytes$(excerpt 1 "$(grep -m1 '"loss"' "$tmp/dp2-z2.jsonl")")"
bad=$(grep '"loss"' "$tmp/dp2-z2.jsonl" | grep -vc '"reduce_scatter": \[1, 241152, 241152\]')
check '[ "$bad" -eq 0 ]' "dp2-z2: $bad steps without one reduce-scatter of 241152 bytes each way"
check 'grep -q "\"allreduce\": \[2, 482312, 482312\]" "$tmp/dp2-z0.jsonl"' \
    "dp2-z0 does not all-reduce 482304 bytes of gradients (+ 8 of the loss) a step"
echo "dp 2, one bucket: --zero 2 reduce-scatters 241152 B and all-gathers 241152 B a step, --zero 0 all-reduces 482304 B"

# ---- several micro-batches per replica: within 1e-6 relative (see the top) ------
pair dp2acc "${base[@]}" --global-batch-size 16 --dp 2
close dp2acc-z2 dp2acc-z0 1e-6 20
pair pp2dp2 "${base[@]}" --global-batch-size 16 --dp 2 --pp 2 --schedule 1f1b
close pp2dp2-z2 pp2dp2-z0 1e-6 20
clipped pp2dp2-z0
pair pp2dp2il "${base[@]}" --global-batch-size 16 --dp 2 --pp 2 --layers 4 --schedule interleaved --bucket-size 1
close pp2dp2il-z2 pp2dp2il-z0 1e-6 20
pair tp2pp2dp2 "${base[@]}" --global-batch-size 16 --dp 2 --pp 2 --tp 2 --sequence-parallel --schedule 1f1b --check-replicas
close tp2pp2dp2-z2 tp2pp2dp2-z0 1e-6 20
check 'grep -q "ranks: 8 (threads backend)" "$tmp/tp2pp2dp2-z2.out"' "tp 2 x pp 2 x dp 2 does not run 8 ranks"
pair pp2dp2zb "${base[@]}" --global-batch-size 16 --dp 2 --pp 2 --schedule zb-h1 --bucket-size 25MiB # tp 2 x pp 2 x dp 2: tests/cli_zero3.sh
close pp2dp2zb-z2 pp2dp2zb-z0 1e-6 20
clipped pp2dp2zb-z0
# each micro-batch's W pass reduce-scatters the stage's one (25 MiB) bucket (4 a step), none in B
bad=$(grep '"loss"' "$tmp/pp2dp2zb-z2.jsonl" | grep -vc '"reduce_scatter": \[4, ')
check '[ "$bad" -eq 0 ]' "pp2dp2zb-z2: $bad steps without 4 reduce-scatters$(excerpt 1 "$(grep -m1 '"loss"' "$tmp/pp2dp2zb-z2.jsonl")")"

mpi2 mpi2-z2 dp2-z2 dp2-z0 -- "${base[@]}" --global-batch-size 4 --zero 2

# ---- memory: predicted == measured, and the formulas ---------------------------
D=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 8 --bucket-size 1)
expect2() { # floats N whole head_wte nbuf bucket: "params grads optimizer" bytes of one rank under --zero 2
    local P S L
    P=$(padded $1 $2); S=$((P / $2))
    L=$(( $2 * (S < 16384 ? S : 16384) + 16384 ))
    echo "$((4 * P)) $((4 * (S + $3 + $4 + $5 * $6 + L))) $((8 * P / $2))"
}
C=64; hw=$((256 * C))
blk=$(( $(gpt_part $C 256 64 1 0 0) )) # a block's floats: the largest bucket at --bucket-size 1
psi=$(gpt_part $C 256 64 2 1 1)
echo "gpt2-tiny: Psi $psi floats, a block $blk, the head's wte gradient $hw"
for n in 2 4; do
    mem "gpt2-tiny dp $n zero 2" "$(expect2 $psi $n 0 $hw 2 $blk)" - "${D[@]}" --dp $n --zero 2
done
# 8 layers at dp 4: the shard and two blocks' buffers against zero 0's whole gradient
psi8=$(gpt_part $C 256 64 8 1 1)
mem "gpt L8 dp 4 zero 2" "$(expect2 $psi8 4 0 $hw 2 $blk)" - "${D[@]}" --layers 8 --dp 4 --zero 2
g0=$((4 * (psi8 + hw))); g2=$(expect2 $psi8 4 0 $hw 2 $blk | cut -d' ' -f2)
check '[ $g2 -lt $g0 ]' "gpt L8 dp 4: --zero 2's gradients ($g2 B) not below --zero 0's ($g0 B)"
echo "gpt L8 dp 4: gradients $g2 B under --zero 2 against $g0 B under --zero 0"
pp_tp_mem 2 expect2 # pp 2 x dp 2 and tp 2 x dp 2 with sp (tests/zero_lib.sh)
pp_mem 2 expect2 zb-h1

# ---- checkpoints: the same files; resume across zero and dp ------------------
res=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 4 --steps 6 --sample-tokens 0
     --eval-batches 2)
train full-z2 "${res[@]}" --dp 2 --zero 2
train half-z0 "${res[@]}" --dp 2 --stop-after 3 --save "$tmp/ck-z0"
train half-z2 "${res[@]}" --dp 2 --zero 2 --stop-after 3 --save "$tmp/ck-z2"
for f in model.safetensors optimizer.safetensors; do
    check 'st_same "$tmp/ck-z2/$f" "$tmp/ck-z0/$f"' "the --zero 2 checkpoint's $f differs from --zero 0's"
done
echo "checkpoint dp 2 at step 3: --zero 2's model and optimizer files cmp-equal to --zero 0's"
grep '"loss"' "$tmp/full-z2.jsonl" | tail -n 3 > "$tmp/tail-z2.jsonl"
train res-z2-from-z2 "${res[@]}" --dp 2 --zero 2 --resume "$tmp/ck-z2"
train res-z0-from-z2 "${res[@]}" --dp 2 --resume "$tmp/ck-z2"
train res-z2-from-z0 "${res[@]}" --dp 2 --zero 2 --resume "$tmp/ck-z0"
for r in res-z2-from-z2 res-z2-from-z0; do same $r tail-z2 3; done
paste -d' ' <(losses "$tmp/res-z0-from-z2.jsonl") <(losses "$tmp/tail-z2.jsonl") > "$tmp/l.txt"
check '[ "$(awk "\$1 == \$2" "$tmp/l.txt" | wc -l)" -eq 3 ]' "--zero 0 resumed from --zero 2's checkpoint: losses differ"
echo "--zero 0 resumed from --zero 2's checkpoint: 3 losses bitwise those of the uninterrupted --zero 2 run"
# dp 2 -> dp 4 (one micro-batch of 1 per replica): --zero 2 and --zero 0 resumed alike
train res-dp4-z2 "${res[@]}" --micro-batch-size 1 --dp 4 --zero 2 --resume "$tmp/ck-z2"
train res-dp4-z0 "${res[@]}" --micro-batch-size 1 --dp 4 --resume "$tmp/ck-z2"
paste -d' ' <(losses "$tmp/res-dp4-z2.jsonl") <(losses "$tmp/res-dp4-z0.jsonl") > "$tmp/l4.txt"
check '[ "$(awk "\$1 == \$2" "$tmp/l4.txt" | wc -l)" -eq 3 ]' "--zero 2 at dp 4 resumed from dp 2: losses differ from --zero 0's"
echo "dp 2 -> dp 4: --zero 2 resumed, 3 losses bitwise --zero 0's resumed from the same checkpoint"
# pp 2 x dp 2 (4 micro-batches per replica): its own checkpoint, resumed bitwise
train ppfull-z2 "${res[@]}" --global-batch-size 16 --dp 2 --pp 2 --zero 2
train pphalf-z2 "${res[@]}" --global-batch-size 16 --dp 2 --pp 2 --zero 2 --stop-after 3 --save "$tmp/ck-pp-z2"
train ppres-z2 "${res[@]}" --global-batch-size 16 --dp 2 --pp 2 --zero 2 --resume "$tmp/ck-pp-z2"
grep '"loss"' "$tmp/ppfull-z2.jsonl" | tail -n 3 > "$tmp/tail-pp.jsonl"
same ppres-z2 tail-pp 3
finish cli_zero2
