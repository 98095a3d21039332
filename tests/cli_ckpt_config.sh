#!/usr/bin/env bash
# A checkpoint's config.json, written and read by each model family's table
# (src/model/config_json.c, family_*.c; issue 28, item 6): the bytes for GPT
# (with and without n_inner), the MLP and the CNN are the ones cleave wrote
# before the families held them (taken from main at 904599f), each such
# checkpoint resumes, a config.json without "cleave_model" (Hugging Face's,
# or cleave's before it named families) reads as GPT, and an unknown
# family or a missing field is refused in one line naming the file.
source "$(dirname "$0")/lib.sh"
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 500) > "$tmp/text.txt"
G=(--data "$tmp/text.txt" --threads 1 --eval-batches 1 --sample-tokens 0 --seq-len 32 --micro-batch-size 2 --global-batch-size 2)
D=(--data data/digits.csv.gz --threads 1 --eval-batches 1)
gpt_head() { # LAYERS HEADS EMBD POSITIONS VOCAB
    printf '{\n  "model_type": "gpt2",\n  "architectures": ["GPT2LMHeadModel"],\n'
    printf '  "n_layer": %d,\n  "n_head": %d,\n  "n_embd": %d,\n  "n_positions": %d,\n  "n_ctx": %d,\n' "$1" "$2" "$3" "$4" "$4"
    printf '  "vocab_size": %d,\n  "layer_norm_epsilon": 1e-05,\n  "activation_function": "gelu_new",\n' "$5"
    printf '  "tie_word_embeddings": true,\n'
}
tail_of() { printf '  "cleave_model": "%s",\n  "cleave_preset": "%s",\n  "tokenizer": "%s"\n}\n' "$1" "$2" "$3"; }
{ gpt_head 2 4 64 64 256; tail_of gpt gpt2-tiny byte; } > "$tmp/want.gpt"
{ gpt_head 2 4 64 64 256; printf '  "n_inner": 96,\n'; tail_of gpt custom byte; } > "$tmp/want.gptw"
{ printf '{\n  "widths": [64, 128, 128, 10],\n'; tail_of mlp mlp none; } > "$tmp/want.mlp"
{
    printf '{\n'
    for kv in in_channels:1 height:8 width:8 conv_channels:32 conv_kernel:3 conv_stride:1 conv_pad:1 pool:2 hidden:64 hidden2:128 classes:10; do
        printf '  "%s": %s,\n' "${kv%%:*}" "${kv#*:}"
    done
    tail_of cnn cnn none
} > "$tmp/want.cnn"

save() { # NAME ARGS...: 1 step saved to $tmp/NAME
    local n=$1
    shift
    "$CLEAVE" train "$@" --steps 1 --save "$tmp/$n" > "$tmp/o.$n" 2>&1
    _rc=$?
    check '[ $_rc -eq 0 ]' "$n: training 1 step and saving failed (exit $_rc)$(excerpt 3 "$(tail -3 "$tmp/o.$n")")"
    check 'cmp -s "$tmp/want.$n" "$tmp/$n/config.json"' "$n: config.json is not the bytes cleave has always written$(excerpt 30 "$(diff "$tmp/want.$n" "$tmp/$n/config.json")")"
}
save gpt --model gpt2-tiny "${G[@]}"
save gptw --model gpt2-tiny --mlp-width 96 "${G[@]}"
save mlp --model mlp "${D[@]}"
save cnn --model cnn "${D[@]}"

# each resumes (the family's fields read back and compared with the run's)
for r in "gpt --model gpt2-tiny ${G[*]}" "gptw --model gpt2-tiny --mlp-width 96 ${G[*]}" "mlp --model mlp ${D[*]}" "cnn --model cnn ${D[*]}"; do
    set -- $r
    n=$1
    shift
    "$CLEAVE" train "$@" --steps 2 --resume "$tmp/$n" > "$tmp/r.$n" 2>&1
    _rc=$?
    check '[ $_rc -eq 0 ] && grep -q "^step 2" "$tmp/r.$n"' "$n: resuming its checkpoint failed (exit $_rc)$(excerpt 3 "$(tail -3 "$tmp/r.$n")")"
done
# a resume of another family's checkpoint is refused, naming what differs
"$CLEAVE" train --model cnn "${D[@]}" --steps 2 --resume "$tmp/mlp" > "$tmp/o" 2>&1
_rc=$?
check '[ $_rc -eq 2 ] && grep -q "cnn disagrees with the checkpoint.s mlp" "$tmp/o"' "resuming an MLP checkpoint as a CNN was not refused naming both families (exit $_rc)$(excerpt 3 "$(cat "$tmp/o")")"

# edited copies (content hashes off: an edit is what is tested)
export CLEAVE_CKPT_VERIFY=0
edit() { # FROM TO PYTHON-STATEMENT on the dict c
    cp -r "$tmp/$1" "$tmp/$2"
    python3 -c "import json,sys; c=json.load(open(sys.argv[1])); $3; json.dump(c, open(sys.argv[1], 'w'))" "$tmp/$2/config.json"
}
edit gpt nofam 'del c["cleave_model"]'
"$CLEAVE" eval --checkpoint "$tmp/nofam" --text "$tmp/text.txt" > "$tmp/o" 2>&1
_rc=$?
check '[ $_rc -eq 0 ]' "a config.json without cleave_model did not read as GPT (exit $_rc)$(excerpt 3 "$(cat "$tmp/o")")"
edit mlp rnn 'c["cleave_model"] = "rnn"'
"$CLEAVE" train --model mlp "${D[@]}" --steps 2 --resume "$tmp/rnn" > "$tmp/o" 2>&1
_rc=$?
check '[ $_rc -eq 2 ] && [ "$(wc -l < "$tmp/o")" -eq 1 ] && grep -q "config.json: missing or invalid model fields" "$tmp/o"' \
    "cleave_model rnn was not refused in one line naming config.json (exit $_rc)$(excerpt 3 "$(cat "$tmp/o")")"
edit cnn nopool 'del c["pool"]'
"$CLEAVE" train --model cnn "${D[@]}" --steps 2 --resume "$tmp/nopool" > "$tmp/o" 2>&1
_rc=$?
check '[ $_rc -eq 2 ] && grep -q "config.json: missing or invalid model fields" "$tmp/o"' \
    "a CNN config.json without pool was not refused naming config.json (exit $_rc)$(excerpt 3 "$(cat "$tmp/o")")"
finish cli_ckpt_config
