#!/usr/bin/env bash
# Hugging Face Llama checkpoints both ways (issue 30, item 4), with tiny
# LlamaForCausalLM directories that tests/hf_llama.py writes with torch's
# random tensors (no transformers: the safetensors files by hand):
# - F32 and BF16, one model.safetensors and HF's shards with
#   model.safetensors.index.json, tied and untied, grouped-query (4 heads,
#   2 key-value heads) and the rotary buffers older versions save: imported
#   by cleave convert (at one rank, and at tp 2 x pp 2 into a sharded
#   checkpoint) and written back with --save-format hf (--dtype bf16,
#   --max-shard-size): every tensor equal bit for bit, under HF's names and
#   [out, in] shapes, config.json with LlamaForCausalLM's keys (hf_llama.py
#   same reads cleave's export);
# - an F16 directory imported and written as F32: exact (F16 widens exactly);
# - damaged directories (a missing tensor, a wrong shape, an unknown dtype,
#   an index naming a missing file, a config whose shape disagrees, a missing
#   key, rope_scaling of another type or missing a field, a bias): one line naming the file and the tensor or
#   key, exit 2, nothing written; an export whose write fails part way leaves
#   no directory, not even its temporary one;
# - the same loss on both sides (1e-5 relative): cleave eval and the PyTorch
#   Llama of tests/llama_torch.py --eval-hf on directories PyTorch wrote, and
#   on cleave's export of a model it trained two steps from one (--resume).
# - rope_scaling llama3: scored the same by both sides (and not as the plain table), trained two
#   steps, exported as HF writes it, re-imported and exported bit for bit.
# Without torch: a skip (a failure under CI=true).
set -u
source "$(dirname "$0")/lib.sh"
HF_TORCH=llama_torch.py
source "$(dirname "$0")/hf_lib.sh"
have_torch "Hugging Face Llama directories made by PyTorch" || { finish cli_hf_llama; exit; }

# (name: make flags | export flags)
cases=("f32:--layers 2 --inv-freq|"
       "bf16:--dtype bf16 --tied|--dtype bf16"
       "shards:--shards 3 --seed 4|--max-shard-size 100KB"
       "bf16shards:--dtype bf16 --shards 2 --tied --kv 1 --seed 5|--dtype bf16 --max-shard-size 60000")
for c in "${cases[@]}"; do
    name=${c%%:*}; rest=${c#*:}; mk=${rest%%|*}; ex=${rest#*|}
    # shellcheck disable=SC2086
    $H make "$tmp/$name" $mk
    # one rank: HF -> cleave's single file -> HF
    # shellcheck disable=SC2086
    conv "$name-in" --from "$tmp/$name" --to "$tmp/$name-c"
    # shellcheck disable=SC2086
    conv "$name-out" --from "$tmp/$name-c" --to "$tmp/$name-hf" --save-format hf $ex
    same "$tmp/$name" "$tmp/$name-hf" "$name, there and back at one rank"
    case $ex in *max-shard*)
        n=$(ls "$tmp/$name-hf" | grep -c '^model-[0-9]\{5\}-of-[0-9]\{5\}\.safetensors$')
        check '[ -f "$tmp/$name-hf/model.safetensors.index.json" ] && [ "$n" -ge 2 ] && [ ! -e "$tmp/$name-hf/model.safetensors" ]' \
            "$name: --max-shard-size wrote $n shards: $(ls "$tmp/$name-hf" | tr '\n' ' ')";;
    esac
done
# through tp 2 x pp 2 (a sharded cleave checkpoint) and back (bf16shards' one key-value head replicated on both ranks)
for name in bf16 shards bf16shards; do
    ex=; [ "$name" != shards ] && ex="--dtype bf16"
    conv "$name-tp" --from "$tmp/$name" --to "$tmp/$name-tp" --tp 2 --pp 2 --save-format sharded
    # shellcheck disable=SC2086
    conv "$name-tpout" --from "$tmp/$name-tp" --to "$tmp/$name-tphf" --save-format hf $ex
    same "$tmp/$name" "$tmp/$name-tphf" "$name through tp 2 x pp 2"
done
# from a sharded HF directory straight into tp 2, and out at tp 2 x dp 2
conv tpdirect --from "$tmp/shards" --to "$tmp/tpdirect" --tp 2 --dp 2 --save-format hf
same "$tmp/shards" "$tmp/tpdirect" "HF shards to HF at tp 2 x dp 2"
# F16 widens exactly: written as F32, the values equal
$H make "$tmp/f16" --dtype f16 --seed 9
conv f16 --from "$tmp/f16" --to "$tmp/f16-hf" --save-format hf
same "$tmp/f16" "$tmp/f16-hf" "F16 imported, written as F32"

bad() { refused "$@"; } # (tests/lib.sh)
mk() { rm -rf "${tmp:?}/$1"; $H make "$tmp/$1" "${@:2}"; }
mk gone --drop model.layers.1.mlp.up_proj.weight
bad "model.safetensors: no tensor 'model.layers.1.mlp.up_proj.weight'" convert --from "$tmp/gone" --to "$tmp/no"
mk ffn --set intermediate_size=128
bad "model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' is \[96, 64\].*\[128, 64\]" convert --from "$tmp/ffn" --to "$tmp/no"
mk f64 --retype model.norm.weight=F64
bad "model.safetensors: tensor 'model.norm.weight' is F64" convert --from "$tmp/f64" --to "$tmp/no"
mk odd
$PY - "$tmp/odd/model.safetensors" << 'PYEOF'
import sys
p = sys.argv[1]; b = open(p, "rb").read().replace(b'"F32"', b'"Q4X"', 1); open(p, "wb").write(b)
PYEOF
bad "model.safetensors.*Q4X" convert --from "$tmp/odd" --to "$tmp/no"
mk lost --shards 3
rm "$tmp/lost/model-00002-of-00003.safetensors"
bad "model.safetensors.index.json: weight_map's file for tensor '.*model-00002-of-00003.safetensors" convert --from "$tmp/lost" --to "$tmp/no"
mk moved --shards 2
$PY - "$tmp/moved/model.safetensors.index.json" << 'PYEOF'
import json, sys
p = sys.argv[1]; j = json.load(open(p)); j["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors"; json.dump(j, open(p, "w"))
PYEOF
bad "weight_map puts tensor 'model.norm.weight' in model-00001-of-00002.safetensors, which does not hold it" convert --from "$tmp/moved" --to "$tmp/no"
mk deep --set num_hidden_layers=3
bad "no tensor 'model.layers.2" convert --from "$tmp/deep" --to "$tmp/no"
mk nokey --set rms_norm_eps=DELETE
bad "config.json: model_type 'llama' needs the number \"rms_norm_eps\"" convert --from "$tmp/nokey" --to "$tmp/no"
mk yarn --set 'rope_scaling={"rope_type": "yarn", "factor": 8.0}'
bad "config.json: rope_scaling of type yarn: cleave's rotary table scales by type llama3 only" convert --from "$tmp/yarn" --to "$tmp/no"
mk scaled --set 'rope_scaling={"rope_type": "llama3", "factor": 8.0}'
bad "config.json: rope_scaling of type llama3 needs the number \"low_freq_factor\"" convert --from "$tmp/scaled" --to "$tmp/no"
mk lowhigh --set 'rope_scaling={"type": "llama3", "factor": 8.0, "low_freq_factor": 4, "high_freq_factor": 1, "original_max_position_embeddings": 64}'
bad "config.json.*high_freq_factor 1 must exceed its low_freq_factor 4" convert --from "$tmp/lowhigh" --to "$tmp/no"
mk biased --set attention_bias=true
bad "config.json: attention_bias" convert --from "$tmp/biased" --to "$tmp/no"
mk tiedhead --tied
$PY - "$tmp/tiedhead" << 'PYEOF'
import sys; sys.path.insert(0, "tests"); import hf_llama as h
d = sys.argv[1]; t = {n: v for n, (_, v) in h.read_st(d + "/model.safetensors").items()}
t["lm_head.weight"] = t["model.embed_tokens.weight"] * 2
h.write_st(d + "/model.safetensors", t, {n: "F32" for n in t})
PYEOF
bad "lm_head.weight differs from model.embed_tokens.weight" convert --from "$tmp/tiedhead" --to "$tmp/no"
bad "\-\-dtype needs --save-format hf" convert --from "$tmp/f32" --to "$tmp/no" --dtype bf16
bad "\-\-max-shard-size 'lots'" convert --from "$tmp/f32" --to "$tmp/no" --save-format hf --max-shard-size lots
bad "unknown --dtype 'f8'" convert --from "$tmp/f32" --to "$tmp/no" --save-format hf --dtype f8
# the loss both sides give (issue 30 item 4): a directory PyTorch wrote, scored by cleave eval and by
# tests/llama_torch.py --eval-hf (HF's equations); then trained two steps by cleave from that directory
# (--resume), exported, and the export scored by PyTorch as cleave scores its own checkpoint (1e-5 relative)
head -c 20000 data/kjv.txt > "$tmp/score.txt"
score "a PyTorch-written F32 directory" "$tmp/f32" "$tmp/f32"
score "a PyTorch-written BF16 sharded, tied, multi-query directory" "$tmp/bf16shards" "$tmp/bf16shards"
timeout 300 "$CLEAVE" train --resume "$tmp/f32" --steps 2 --micro-batch-size 2 --seq-len 64 --sample-tokens 0 \
    --eval-batches 1 --save "$tmp/trained" > "$tmp/trained.out" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "^step *2/2" "$tmp/trained.out"' "cleave train --resume from an HF Llama directory$(excerpt 4 "$(cat "$tmp/trained.out")")"
conv trained-hf --from "$tmp/trained" --to "$tmp/trained-hf" --save-format hf
score "cleave's trained checkpoint and its HF export" "$tmp/trained" "$tmp/trained-hf"

# rope_scaling of type llama3 (Llama 3.1's): original_max_position_embeddings 64 puts the head's 8
# frequencies in all three bands (wavelengths under 16 kept, over 64 divided by 8, between blended).
# A PyTorch-written directory carrying it is scored the same by both sides, and not as the plain table
# scores it; cleave trains it two steps, exports it (rope_scaling written back as HF writes it), and
# the export re-imports bit for bit and scores as cleave's checkpoint does
rs='{"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64, "rope_type": "llama3"}'
mk rope --seed 6 --set "rope_scaling=$rs"
score "a PyTorch-written directory with rope_scaling llama3" "$tmp/rope" "$tmp/rope"
mk ropeplain --seed 6
a=$(timeout 300 "$CLEAVE" eval --checkpoint "$tmp/rope" --text "$tmp/score.txt" 2>&1 | sed -n 's/^eval loss: //p')
b=$(timeout 300 "$CLEAVE" eval --checkpoint "$tmp/ropeplain" --text "$tmp/score.txt" 2>&1 | sed -n 's/^eval loss: //p')
check '[ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ]' "rope_scaling changes the loss: scaled '$a', plain '$b'"
timeout 300 "$CLEAVE" train --resume "$tmp/rope" --steps 2 --micro-batch-size 2 --seq-len 64 --sample-tokens 0 \
    --eval-batches 1 --save "$tmp/ropetrained" > "$tmp/ropetrained.out" 2>&1
rc=$?
check '[ $rc -eq 0 ] && grep -q "^step *2/2" "$tmp/ropetrained.out" && grep -q "\"rope_type\": \"llama3\"" "$tmp/ropetrained/config.json"' \
    "cleave train --resume from a rope_scaling directory, its checkpoint keeping it$(excerpt 4 "$(cat "$tmp/ropetrained.out")")"
conv ropetrained-hf --from "$tmp/ropetrained" --to "$tmp/ropetrained-hf" --save-format hf
check 'grep -q "\"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64, \"rope_type\": \"llama3\"}" "$tmp/ropetrained-hf/config.json"' \
    "the export's rope_scaling as Hugging Face writes it: $(grep rope_scaling "$tmp/ropetrained-hf/config.json")"
score "a rope_scaling checkpoint cleave trained and its HF export" "$tmp/ropetrained" "$tmp/ropetrained-hf"
conv ropeback --from "$tmp/ropetrained-hf" --to "$tmp/ropeback"
conv ropeback-hf --from "$tmp/ropeback" --to "$tmp/ropeback-hf" --save-format hf
same "$tmp/ropetrained-hf" "$tmp/ropeback-hf" "rope_scaling llama3 exported, re-imported and exported again"

# a write that fails part way (files limited to 40 blocks, SIGXFSZ ignored so the write returns EFBIG): exit 2,
# and neither the directory nor its temporary sibling is left
(trap '' XFSZ; ulimit -f 40; "$CLEAVE" convert --from "$tmp/f32" --to "$tmp/big" --save-format hf --max-shard-size 30KB) > /dev/null 2> "$tmp/err"
rc=$?
check '[ $rc -eq 2 ] && grep -q "File too large" "$tmp/err" && [ -z "$(ls -d "$tmp"/big* 2> /dev/null)" ]' \
    "an export that fails part way: exit $rc, left $(ls -d "$tmp"/big* 2> /dev/null):$(excerpt 2 "$(cat "$tmp/err")")"

finish cli_hf_llama
