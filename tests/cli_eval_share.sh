#!/usr/bin/env bash
# Evaluation shared by the data-parallel replicas (cl_trainer_eval): batch b runs on dp rank b mod dp and the batch
# sums meet in one all-reduce, summed in batch order after it, so the validation loss is the one a replica alone
# gives, bit for bit. Each run below trains 4 steps with evaluations at steps 2 and 4 and again with every replica
# running every batch (CLEAVE_EVAL_SHARE=0), and every figure must be the same bits: dp 2 and 4 (19 batches: uneven;
# 20; 2 at dp 4, two replicas with none), ZeRO 2, ZeRO 3 (its forwards gather over the replicas: each runs as many,
# one past the end repeating the last batch; with cp 2, and with pp 2 in bf16), dp x pp, dp x tp in bf16, dp x cp,
# Llama, the MLP's digits, MPI; one batch (not shared) runs the old way both times.
set -u
source "$(dirname "$0")/lib.sh"

head -c 200000 data/kjv.txt > "$tmp/text.txt"
gpt=(--model gpt2-tiny --data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --steps 4 --sample-tokens 0
     --eval-batches 38 --eval-every 2 --threads 1 --comm-timeout 60)
llama=("${gpt[@]}")
llama[1]=llama-tiny
both() { # name args...: the run with the replicas sharing the evaluation and with each running all of it
    local name=$1; shift
    same_both_ways "$name" CLEAVE_EVAL_SHARE=0 "the shared evaluation differs" "$@"
    check '[ "$(grep -c val_loss "$tmp/$name.jsonl")" -eq 2 ]' "$name: $(grep -c val_loss "$tmp/$name.jsonl") validations, want 2"
    echo "$name: $figured figures (2 validations) the same bits both ways"
}

both dp2 "${gpt[@]}" --dp 2 --global-batch-size 4
both dp4 "${gpt[@]}" --dp 4 --global-batch-size 8
both dp2-even "${gpt[@]}" --dp 2 --global-batch-size 4 --eval-batches 40
both dp4-two-batches "${gpt[@]}" --dp 4 --global-batch-size 8 --eval-batches 4
both dp2-zero2 "${gpt[@]}" --dp 2 --zero 2 --global-batch-size 4
both dp2-pp2 "${gpt[@]}" --dp 2 --pp 2 --global-batch-size 4
both dp2-tp2-bf16 "${gpt[@]}" --dp 2 --tp 2 --global-batch-size 4 --dtype bf16
both dp2-cp2 "${gpt[@]}" --dp 2 --cp 2 --global-batch-size 4
both dp2-zero3 "${gpt[@]}" --dp 2 --zero 3 --global-batch-size 4
both dp4-zero3-two-batches "${gpt[@]}" --dp 4 --zero 3 --global-batch-size 8 --eval-batches 4
both dp2-cp2-zero3 "${gpt[@]}" --dp 2 --cp 2 --zero 3 --global-batch-size 4
both dp2-zero3-pp2-bf16 "${gpt[@]}" --dp 2 --zero 3 --pp 2 --global-batch-size 4 --dtype bf16
both dp2-one-batch "${gpt[@]}" --dp 2 --global-batch-size 4 --eval-batches 2
both llama-dp2 "${llama[@]}" --dp 2 --global-batch-size 4
both mlp-dp2 --model mlp --steps 4 --micro-batch-size 8 --global-batch-size 16 --eval-every 2 --threads 1 --dp 2
mpi_or_skip cli_eval_share
timeout -k 5 300 mpirun --oversubscribe -np 2 "$CLEAVE" train "${gpt[@]}" --global-batch-size 4 --comm mpi \
    --log-file "$tmp/mpi2.jsonl" > "$tmp/mpi2.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "dp 2 under MPI failed: $(tail -5 "$tmp/mpi2.out")"
check '[ "$(step_val_figures "$tmp/mpi2.jsonl")" = "$(step_val_figures "$tmp/dp2.jsonl")" ]' \
    "MPI's shared evaluation differs from the threads': $(diff <(step_val_figures "$tmp/mpi2.jsonl") <(step_val_figures "$tmp/dp2.jsonl") | head -4)"
echo "mpi dp 2: the figures of the threads' dp 2, bit for bit"
finish cli_eval_share
