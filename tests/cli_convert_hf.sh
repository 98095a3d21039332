#!/usr/bin/env bash
# Hugging Face GPT-2 checkpoints into cleave, and cleave convert taking the
# model from its source (issue 16, conversion):
# - gpt2-tiny with 6 layers and a vocabulary of 300, trained 4 steps and saved
#   (the single file: Hugging Face names and layouts), rewritten by
#   tests/hf_make.py as transformers writes it (config.json with GPT-2's keys
#   only, names under "transformer.", lm_head.weight and the attention mask
#   buffers beside them; and bare names without them), converted with no
#   model flags into sharded checkpoints at (tp 2, pp 2), (tp 4, dp 2, zero
#   1) and (dp 2, zero 3): cleave eval gives the original's loss, and gathered
#   back to the single file the parameters are cmp-equal to the original's,
#   the moments all zero, the step 0;
# - stored as BF16: imported exactly (the widened values, compared at 0 tolerance);
# - a transformers-style checkpoint of a model made by PyTorch (random
#   weights): cleave eval on it, and on its conversion to tp 2 x pp 2, gives
#   scripts/hf_eval.py's loss (stock torch.nn) within 1e-5 relative;
# - cleave convert from a sharded checkpoint with layout flags only; a model,
#   batch or seed flag that disagrees with the source: exit 2 naming it;
# - a config.json that disagrees with the tensors, a missing tensor, an
#   unknown model_type, an untied head, F16, another activation: one line, exit 2.
set -u
source "$(dirname "$0")/lib.sh"
MAKE="$PY $(dirname "$0")/hf_make.py"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
tail -c 16000 data/kjv.txt > "$tmp/ev.txt" # eval's text: short (an eval of 300 kB takes a minute on a loaded machine)
common=(--data "$tmp/text.txt" --layers 6 --vocab 300 --seq-len 32 --micro-batch-size 2 --global-batch-size 16 --sample-tokens 0
        --eval-batches 2)
run() { # name args...: cleave, output in $tmp/name.out
    local name=$1; shift
    timeout 300 "$CLEAVE" "$@" > "$tmp/$name.out" 2>&1
    local rc=$? # (before the message's $(...), which sets $?)
    check '[ $rc -eq 0 ]' "$name ($*) failed: $(tail -3 "$tmp/$name.out")"
}
evl() { "$CLEAVE" eval --checkpoint "$1" --text "$tmp/ev.txt" 2>&1 | tail -1; }
# gathered back to the single file: the parameters byte-equal to want's (header and data; the metadata's run
# id and step aside: an import starts a new run at step 0), moments zero, step 0
same_params() { # file file
    python3 - "$1" "$2" << 'EOF'
import json, struct, sys
def part(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    for k in ("cleave_run_id", "cleave_step"):
        h.get("__metadata__", {}).pop(k, None)
    return h, b[8 + n:]
sys.exit(part(sys.argv[1]) != part(sys.argv[2]))
EOF
}
imported() { # dir want what
    local want=$2
    rm -rf "$tmp/back"
    run back convert --from "$1" --to "$tmp/back"
    check 'same_params "$tmp/back/model.safetensors" "$want"' "$3: the imported parameters differ from the ones exported"
    check 'grep -q "\"step\": 0," "$tmp/back/trainer_state.json"' "$3: the imported step is not 0"
    check '$PY -c "
import sys; sys.path.insert(0, \"scripts\"); import torch_reference as r
t, _ = r.read_safetensors(\"$tmp/back/optimizer.safetensors\"); sys.exit(any(v.any() for v in t.values()))"' \
        "$3: the imported moments are not zero"
}

run train train "${common[@]}" --steps 4 --save "$tmp/ck"
want=$(evl "$tmp/ck")
$MAKE from-cleave "$tmp/ck" "$tmp/hf" --prefix --lm-head --masks
$MAKE from-cleave "$tmp/ck" "$tmp/bare"
check '[ ! -e "$tmp/hf/cleave-checkpoint.json" ] && ! grep -q tokenizer "$tmp/hf/config.json"' "hf_make.py left cleave's files"
# (--zero 3 writes the single file: its sharded save is not built on this branch)
for case in "hf:--tp 2 --pp 2 --save-format sharded" "bare:--tp 4 --dp 2 --zero 1 --save-format sharded" "hf:--dp 2 --zero 3"; do
    src=${case%%:*}; lay=${case#*:}
    rm -rf "$tmp/sh"
    # shellcheck disable=SC2086
    run import convert --from "$tmp/$src" --to "$tmp/sh" $lay
    check 'grep -q "moments start at zero" "$tmp/import.out"' "the import does not say the moments start at zero"
    got=$(evl "$tmp/sh")
    echo "$src -> $lay: cleave eval $got (the original: $want)"
    check '[ "$got" = "$want" ]' "$src at $lay: eval '$got', the original '$want'"
    imported "$tmp/sh" "$tmp/ck/model.safetensors" "$src at $lay"
done
got=$(evl "$tmp/hf")
check '[ "$got" = "$want" ]' "cleave eval on the Hugging Face directory: '$got', the original '$want'"

# BF16: widened exactly
$MAKE from-cleave "$tmp/ck" "$tmp/bf" --prefix --bf16 --want "$tmp/bf_want.safetensors"
rm -rf "$tmp/sh"; run bf convert --from "$tmp/bf" --to "$tmp/sh" --tp 2 --pp 2 --save-format sharded
rm -rf "$tmp/back"; run bfback convert --from "$tmp/sh" --to "$tmp/back"
bfcmp=$($PY scripts/compare_safetensors.py bf16 "$tmp/back/model.safetensors" "$tmp/bf_want.safetensors" 0 2>&1); rc=$?
echo "BF16 import against the widened values: $bfcmp"
check '[ $rc -eq 0 ]' "BF16 import: $bfcmp"

# a model made by PyTorch: cleave's loss is PyTorch's
if have_torch "the PyTorch-made checkpoint"; then
    $MAKE random "$tmp/rnd" --layers 3 --heads 4 --embd 64 --positions 64 --vocab 256 --seed 7 --prefix --lm-head --masks
    h=$($PY scripts/hf_eval.py "$tmp/rnd" "$tmp/ev.txt" 2>&1 | tail -1)
    c=$(evl "$tmp/rnd")
    rm -rf "$tmp/sh"; run rnd convert --from "$tmp/rnd" --to "$tmp/sh" --tp 2 --pp 2 --save-format sharded
    c2=$(evl "$tmp/sh")
    echo "PyTorch-made GPT-2: hf_eval.py $h; cleave eval $c; converted to tp 2 x pp 2: $c2"
    check 'awk -v a="${h#eval loss: }" -v b="${c#eval loss: }" "BEGIN { d = (a - b) / a; exit !(a > 0 && d < 1e-5 && d > -1e-5) }"' \
        "PyTorch's loss '$h' differs from cleave's '$c'"
    check '[ "$c2" = "$c" ]' "the PyTorch-made model converted to tp 2 x pp 2 evaluates to '$c2', not '$c'"
fi

# convert takes the model, batch, seed and data from the source; disagreeing flags are refused by name
rm -rf "$tmp/s1" "$tmp/s2"
run s1 convert --from "$tmp/ck" --to "$tmp/s1" --tp 2 --dp 2 --zero 1 --save-format sharded
run s2 convert --from "$tmp/s1" --to "$tmp/s2" --pp 2
check 'cmp -s "$tmp/s2/model.safetensors" "$tmp/ck/model.safetensors" && cmp -s "$tmp/s2/optimizer.safetensors" "$tmp/ck/optimizer.safetensors" &&
       cmp -s "$tmp/s2/trainer_state.json" "$tmp/ck/trainer_state.json"' "a flagless convert there and back changed the checkpoint"
bad() { refused "$@"; } # (tests/lib.sh): exit 2, one line on stderr matching pattern, nothing written
bad "\-\-layers 4" convert --from "$tmp/s1" --to "$tmp/no" --layers 4
bad "\-\-vocab 256" convert --from "$tmp/s1" --to "$tmp/no" --vocab 256
bad "\-\-model gpt2-mini" convert --from "$tmp/ck" --to "$tmp/no" --model gpt2-mini
bad "\-\-global-batch-size 8" convert --from "$tmp/s1" --to "$tmp/no" --global-batch-size 8
bad "\-\-seed 5" convert --from "$tmp/ck" --to "$tmp/no" --seed 5
bad "\-\-seq-len 16" convert --from "$tmp/ck" --to "$tmp/no" --seq-len 16

# damaged Hugging Face checkpoints
mk() { rm -rf "${tmp:?}/$1"; $MAKE from-cleave "$tmp/ck" "$tmp/$1" "${@:2}"; }
mk wide --prefix --set n_embd=128;             bad "c_attn.weight\|wte.weight" convert --from "$tmp/wide" --to "$tmp/no"
mk deep --set n_layer=7;                       bad "no tensor 'h.6" convert --from "$tmp/deep" --to "$tmp/no"
mk gone --prefix --drop h.3.mlp.c_fc.bias;     bad "no tensor 'transformer.h.3.mlp.c_fc.bias'" convert --from "$tmp/gone" --to "$tmp/no"
mk llama --set model_type='"llama"';           bad "model_type 'llama'" convert --from "$tmp/llama" --to "$tmp/no"
mk untied --set tie_word_embeddings=false;     bad "tie_word_embeddings" convert --from "$tmp/untied" --to "$tmp/no"
mk relu --set activation_function='"relu"';    bad "activation_function" convert --from "$tmp/relu" --to "$tmp/no"
mk f16 --f16;                                  bad "F16" convert --from "$tmp/f16" --to "$tmp/no"
mk notype --set model_type=DELETE;             bad "model_type" convert --from "$tmp/notype" --to "$tmp/no"
mk wide2 --set n_embd=128;                     bad "wte.weight\|c_attn" eval --checkpoint "$tmp/wide2" --text "$tmp/ev.txt"
mk deep2 --set n_layer=7;                      bad "no tensor" train "${common[@]}" --layers 7 --steps 2 --resume "$tmp/deep2"
# a head that differs from wte
mk head --lm-head
$PY - "$tmp/head/model.safetensors" << 'EOF'
import struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]
import json; h = json.loads(b[8:8 + n]); o = h["lm_head.weight"]["data_offsets"][0] + 8 + n
b[o:o + 4] = struct.pack("<f", 0.5); open(p, "wb").write(b)
EOF
bad "lm_head.weight differs" convert --from "$tmp/head" --to "$tmp/no"
mkdir -p "$tmp/empty";                         bad "neither a cleave checkpoint" convert --from "$tmp/empty" --to "$tmp/no"

finish cli_convert_hf
