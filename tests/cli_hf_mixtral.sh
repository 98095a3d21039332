#!/usr/bin/env bash
# Hugging Face Mixtral checkpoints both ways (issue 33, item 4): tiny
# MixtralForCausalLM directories that tests/hf_llama.py --experts writes with
# torch's random tensors (no transformers: the safetensors files by hand;
# MixtralConfig's keys, block_sparse_moe.gate.weight [E, C] and the experts'
# w1, w3 [F, C], w2 [C, F] as nn.Linear stores them), mixtral-tiny's shape
# (2 layers, 64 channels, 4 heads, 2 key-value heads, F 128, 8 experts, top-2):
# (a) an F32 directory scored by cleave eval and by the independent PyTorch
#     Mixtral (tests/mixtral_torch.py --eval-hf) with the same loss (1e-5
#     relative), imported (cleave convert) and exported back bit for bit;
# (b) mixtral-tiny trained 2 steps by cleave, exported (--save-format hf):
#     PyTorch scores the export as cleave scores its checkpoint (1e-5), the
#     export re-imported equals the trained parameters bit for bit; and a
#     run resumed from a PyTorch-written directory (--resume DIR);
# (c) BF16 in HF's shards (and tied): scored the same by both sides, through
#     pp 2 (a sharded cleave checkpoint) and back to BF16 bit for bit;
# (d) damaged or mismatched directories (a missing expert tensor, a config
#     with another num_local_experts, a missing MixtralConfig key, model_type
#     llama with experts, a sliding window, router jitter) refused in one line
#     naming the tensor or key, exit 2; a model with --moe-every 2 has no
#     Mixtral form: its export refused naming --moe-every.
# Without torch: a skip (a failure under CI=true).
set -u
source "$(dirname "$0")/lib.sh"
HF_TORCH=mixtral_torch.py
source "$(dirname "$0")/hf_lib.sh"
have_torch "Hugging Face Mixtral directories made by PyTorch" || { finish cli_hf_mixtral; exit; }
mk() { rm -rf "${tmp:?}/$1"; $H make "$tmp/$1" --experts 8 --topk 2 --ffn 128 "${@:2}"; }
head -c 20000 data/kjv.txt > "$tmp/score.txt"

# (a) F32, one file: the same loss, and there and back bit for bit (config.json's keys too)
mk f32
score "(a) a PyTorch-written F32 MixtralForCausalLM directory" "$tmp/f32" "$tmp/f32"
conv f32-in --from "$tmp/f32" --to "$tmp/f32-c"
conv f32-out --from "$tmp/f32-c" --to "$tmp/f32-hf" --save-format hf
same "$tmp/f32" "$tmp/f32-hf" "(a) F32 there and back"
check 'grep -q "\"sliding_window\": null" "$tmp/f32-hf/config.json" && grep -q "\"router_aux_loss_coef\": 0.02" "$tmp/f32-hf/config.json"' \
    "(a) the export's MixtralConfig keys:$(excerpt 30 "$(cat "$tmp/f32-hf/config.json")")"

# (b) cleave trains mixtral-tiny two steps and exports it; PyTorch scores the export as cleave scores the
# checkpoint; the export re-imported holds the trained parameters bit for bit
head -c 100000 data/kjv.txt > "$tmp/text.txt"
timeout 300 "$CLEAVE" train --model mixtral-tiny --data "$tmp/text.txt" --steps 2 --micro-batch-size 2 --seq-len 64 --sample-tokens 0 \
    --eval-batches 1 --threads 1 --save "$tmp/trained" > "$tmp/trained.out" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "^step *2/2" "$tmp/trained.out"' "(b) cleave train mixtral-tiny$(excerpt 4 "$(cat "$tmp/trained.out")")"
conv trained-hf --from "$tmp/trained" --to "$tmp/trained-hf" --save-format hf
check 'grep -q "\"architectures\": \[\"MixtralForCausalLM\"\]" "$tmp/trained-hf/config.json" && grep -q "\"model_type\": \"mixtral\"" "$tmp/trained-hf/config.json"' \
    "(b) the export's config.json:$(excerpt 6 "$(cat "$tmp/trained-hf/config.json")")"
score "(b) mixtral-tiny trained 2 steps by cleave, and its HF export" "$tmp/trained" "$tmp/trained-hf"
conv back --from "$tmp/trained-hf" --to "$tmp/back"
out=$($PY - "$tmp/trained/model.safetensors" "$tmp/back/model.safetensors" << 'PYEOF' 2>&1
import sys
sys.path.insert(0, "tests")
import hf_llama as h
a, b = h.read_st(sys.argv[1]), h.read_st(sys.argv[2])
assert set(a) == set(b), sorted(set(a) ^ set(b))[:4]
for n in a:
    assert a[n][0] == b[n][0] == "F32" and h.raw(a[n][1]) == h.raw(b[n][1]), n
print(f"{len(a)} tensors equal bit for bit")
PYEOF
)
rc=$?
check '[ $rc -eq 0 ]' "(b) the export re-imported against the trained parameters: $out"
conv back-hf --from "$tmp/back" --to "$tmp/back-hf" --save-format hf
same "$tmp/trained-hf" "$tmp/back-hf" "(b) exported, re-imported and exported again"
# --resume from a PyTorch-written directory: its router_aux_loss_coef (0.02) kept
timeout 300 "$CLEAVE" train --resume "$tmp/f32" --steps 1 --micro-batch-size 2 --seq-len 64 --sample-tokens 0 --eval-batches 1 \
    --threads 1 --save "$tmp/resumed" > "$tmp/resumed.out" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "^step *1/1" "$tmp/resumed.out" && grep -q "\"router_aux_loss_coef\": 0.02" "$tmp/resumed/config.json"' \
    "(b) cleave train --resume from an HF Mixtral directory$(excerpt 4 "$(cat "$tmp/resumed.out")")"

# (c) BF16 in three shards, tied: the same loss; through pp 2 and back to BF16 bit for bit
mk bf16 --dtype bf16 --shards 3 --tied --seed 3
score "(c) a PyTorch-written BF16 sharded tied directory" "$tmp/bf16" "$tmp/bf16"
conv bf16-pp --from "$tmp/bf16" --to "$tmp/bf16-pp" --pp 2 --save-format sharded
conv bf16-out --from "$tmp/bf16-pp" --to "$tmp/bf16-hf" --save-format hf --dtype bf16 --max-shard-size 100KB
same "$tmp/bf16" "$tmp/bf16-hf" "(c) BF16 shards through pp 2"

# (d) damaged or mismatched directories: one line naming the tensor or key, exit 2, nothing written
bad() { refused "$@"; } # (tests/lib.sh)
mk gone --drop model.layers.1.block_sparse_moe.experts.3.w2.weight
bad "model.safetensors: no tensor 'model.layers.1.block_sparse_moe.experts.3.w2.weight'" convert --from "$tmp/gone" --to "$tmp/no"
mk fewer --set num_local_experts=4
bad "tensor 'model.layers.0.block_sparse_moe.\(gate.weight' is \[8, 64\].*num_local_experts 4.*\[4, 64\]\|experts.[4-7].w[123].weight' is not a MixtralForCausalLM parameter\)" \
    convert --from "$tmp/fewer" --to "$tmp/no"
mk nok --set num_experts_per_tok=DELETE
bad "config.json: model_type 'mixtral' needs the number \"num_experts_per_tok\" (MixtralForCausalLM's config has it)" \
    convert --from "$tmp/nok" --to "$tmp/no"
mk astype --set model_type='"llama"'
bad "config.json: model_type 'llama' with num_local_experts 8: a model with experts is model_type 'mixtral'" convert --from "$tmp/astype" --to "$tmp/no"
mk window --set sliding_window=16
bad "config.json: sliding_window is not null" convert --from "$tmp/window" --to "$tmp/no"
mk jitter --set router_jitter_noise=0.1
bad "config.json: router_jitter_noise is not 0" convert --from "$tmp/jitter" --to "$tmp/no"
timeout 300 "$CLEAVE" train --model mixtral-tiny --moe-every 2 --data "$tmp/text.txt" --steps 1 --micro-batch-size 2 --seq-len 64 \
    --sample-tokens 0 --eval-batches 1 --threads 1 --save "$tmp/mixed" > "$tmp/mixed.out" 2>&1
rc=$?
check '[ $rc -eq 0 ]' "(d) mixtral-tiny --moe-every 2$(excerpt 4 "$(cat "$tmp/mixed.out")")"
bad "\-\-save-format hf: a model with --moe-every 2 (dense and MoE blocks mixed) has no Hugging Face form" \
    convert --from "$tmp/mixed" --to "$tmp/no" --save-format hf

finish cli_hf_mixtral
