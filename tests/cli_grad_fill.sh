#!/usr/bin/env bash
# A step's gradients without zeroing the ones a weight product writes first (cl_model_begin_grads; docs/ARCHITECTURE.md
# "One training step"): those keep the last step's values until their product overwrites them, so a product that read
# them (beta 1), wrote only part of one, or came after something that added into it would carry the last step's
# gradient into this one. Each run below trains 6 steps of two micro-batches with the skip and again with every
# gradient zeroed (CLEAVE_GRAD_FILL=all), and every step's loss and gradient norm and the validation loss must be the
# same bits: GPT (fp32, bf16; pp 2 under zb-h1, whose weight passes come apart from the input passes and whose last
# stage keeps the tied wte's gradient apart; interleaved; dp 2 under ZeRO 1; tp 2; recompute full), Llama (its own
# lm_head and tied, bf16), Mixtral's MoE block (bf16; its experts are zeroed, only the attention's products skip).
set -u
source "$(dirname "$0")/lib.sh"

head -c 200000 data/kjv.txt > "$tmp/text.txt"
gpt=(--model gpt2-tiny --data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 4 --steps 6
     --sample-tokens 0 --eval-batches 2 --eval-every 3 --threads 1 --comm-timeout 60)
llama=(--model llama-tiny --data "$tmp/text.txt" --seq-len 16 --micro-batch-size 2 --global-batch-size 4 --steps 6
       --sample-tokens 0 --eval-batches 2 --eval-every 3 --threads 1 --comm-timeout 60)
mixtral=("${llama[@]}")
mixtral[1]=mixtral-tiny
both() { # name args...: the run with the skip and with every gradient zeroed, the same figures
    local name=$1; shift
    same_both_ways "$name" CLEAVE_GRAD_FILL=all "the gradients differ from the zeroed ones" "$@"
    check '[ "$figured" -ge 6 ]' "$name: $figured figures in the log, want 6 steps and more"
    echo "$name: $figured figures (steps and validations) the same bits both ways"
}

both gpt "${gpt[@]}"
both gpt-bf16 "${gpt[@]}" --dtype bf16
both gpt-zb "${gpt[@]}" --pp 2 --schedule zb-h1
both gpt-bf16-interleaved "${gpt[@]}" --dtype bf16 --pp 2 --schedule interleaved
both gpt-dp-zero1 "${gpt[@]}" --dp 2 --zero 1
both gpt-tp "${gpt[@]}" --tp 2 --dtype bf16
both gpt-recompute "${gpt[@]}" --recompute full
both llama-bf16 "${llama[@]}" --dtype bf16
both llama-tied-zb "${llama[@]}" --tie-embeddings 1 --pp 2 --schedule zb-h1
both mixtral-bf16 "${mixtral[@]}" --dtype bf16
finish cli_grad_fill
