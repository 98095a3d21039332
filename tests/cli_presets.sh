#!/usr/bin/env bash
# The GPT presets are named as the field names them (issue 27):
# - `--model gpt2-small` is GPT-2 small, the 124M model of the paper and of
#   Hugging Face's `gpt2` (12 layers, 768 channels, 12 heads, context 1024,
#   vocabulary 50257), the same as `--model gpt2`: cleave memory's parameter
#   bytes are 4 x about 124M;
# - the 4-layer 128-channel model is `gpt2-mini`;
# - a checkpoint written before the rename (config.json's cleave_preset
#   "gpt2-small" beside the 4 x 128 shape) still loads: the shape decides,
#   and the old name is not carried on (eval, resume as gpt2-mini, convert).
set -u
source "$(dirname "$0")/lib.sh"

params() { # memory's predicted parameter bytes of rank 0 for the flags given
    "$CLEAVE" memory "$@" --micro-batch-size 1 --seq-len 16 --json 2>&1 | head -1 |
        sed -n 's/.*"params": \([0-9]*\).*/\1/p'
}
small=$(params --model gpt2-small); g=$(params --model gpt2); mini=$(params --model gpt2-mini)
check '[ -n "$small" ] && [ "$small" -gt $((4 * 123000000)) ] && [ "$small" -lt $((4 * 126000000)) ]' \
    "--model gpt2-small: $small parameter bytes, not 4 x ~124M"
check '[ "$small" = "$g" ]' "--model gpt2-small ($small B) and --model gpt2 ($g B) differ"
check '[ -n "$mini" ] && [ "$mini" -gt $((4 * 700000)) ] && [ "$mini" -lt $((4 * 900000)) ]' \
    "--model gpt2-mini: $mini parameter bytes, not 4 x ~0.8M (4 layers, 128 channels)"
out=$("$CLEAVE" train --help 2>&1)
check 'printf "%s" "$out" | grep -q "gpt2-mini (4 layers, 128 channels), gpt2-small or gpt2 (GPT-2 small, 124M)"' \
    "train --help does not describe the presets$(excerpt 3 "$(printf "%s" "$out" | grep -- --model)")"

# a checkpoint of the 4 x 128 model as cleave wrote it when that was gpt2-small
head -c 60000 data/kjv.txt > "$tmp/text.txt"
M=(--model gpt2-mini --data "$tmp/text.txt" --seq-len 16 --micro-batch-size 2 --sample-tokens 0 --eval-batches 1 --threads 1)
"$CLEAVE" train "${M[@]}" --steps 3 --stop-after 2 --save "$tmp/ck" > "$tmp/train.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "training gpt2-mini failed$(excerpt 3 "$(tail -3 "$tmp/train.out")")"
check 'grep -q "\"cleave_preset\": \"gpt2-mini\"" "$tmp/ck/config.json"' "the checkpoint does not record gpt2-mini"
sed -i 's/"cleave_preset": "gpt2-mini"/"cleave_preset": "gpt2-small"/' "$tmp/ck/config.json"
# as cleave wrote it then: before content hashes (a marker of version 1)
printf '{\n  "format": "cleave checkpoint",\n  "version": 1\n}\n' > "$tmp/ck/cleave-checkpoint.json"
cp -r "$tmp/ck" "$tmp/orig"
out=$("$CLEAVE" eval --checkpoint "$tmp/ck" --text "$tmp/text.txt" --micro-batch-size 2 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && printf "%s" "$out" | grep -q "eval loss"' "eval of the old gpt2-small checkpoint failed$(excerpt 3 "$out")"
out=$("$CLEAVE" train "${M[@]}" --steps 3 --resume "$tmp/ck" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && printf "%s" "$out" | grep -q "resumed from .* at step 2"' \
    "resuming the old gpt2-small checkpoint as gpt2-mini failed$(excerpt 3 "$out")"
"$CLEAVE" convert --from "$tmp/ck" --to "$tmp/conv" --save-format sharded > "$tmp/conv.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "convert of the old gpt2-small checkpoint failed$(excerpt 3 "$(cat "$tmp/conv.out")")"
check '! grep -q "gpt2-small" "$tmp/conv/cleave-index.json"' "convert carried the old name gpt2-small on beside the 4 x 128 shape"
check 'diff -r "$tmp/ck" "$tmp/orig" > /dev/null' "loading the old checkpoint changed it"
finish cli_presets
