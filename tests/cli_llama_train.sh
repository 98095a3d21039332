#!/usr/bin/env bash
# cleave's Llama against an independent PyTorch Llama (issue 30): tests/llama_torch.py,
# written from Hugging Face's LlamaForCausalLM equations, computes the loss and every
# gradient of one forward and backward on the weights and batch that
# build/tests/llama_torch_driver --write-input wrote; llama_torch_driver --torch compares
# (the loss within 1e-5 relative; each gradient max |a - b| / max |torch| <= 1e-5).
# Two shapes: llama-tiny (2 of 4 key-value heads, its own lm_head) and multi-query
# (one key-value head) with the embedding tied. Then the checkpoint cleave saves after
# 3 training steps: llama_torch.py --eval scores it on a text as `cleave eval` does,
# the same mean loss within 1e-5 relative. Without PyTorch: a skip (a failure under
# CI=true).
set -u
source "$(dirname "$0")/lib.sh"
if have_torch "the comparison with PyTorch"; then
    for shape in "2 0" "1 1"; do
        set -- $shape
        "$BUILD/tests/llama_torch_driver" $1 $2 --write-input "$tmp/in$1.safetensors" > /dev/null
        rc=$?
        check '[ $rc -eq 0 ]' "llama_torch_driver $1 $2 --write-input failed (status $rc)"
        out=$(timeout 300 $PY "$(dirname "$0")/llama_torch.py" "$tmp/in$1.safetensors" "$tmp/ref$1.safetensors" 2>&1)
        rc=$?
        check '[ $rc -eq 0 ]' "llama_torch.py failed (status $rc): $(tail -3 <<<"$out")"
        out=$("$BUILD/tests/llama_torch_driver" $1 $2 --torch "$tmp/in$1.safetensors" "$tmp/ref$1.safetensors" 2>&1)
        rc=$?
        echo "$out"
        check '[ $rc -eq 0 ] && grep -q "gradients, max rel err" <<<"$out"' "kv $1 tied $2 against torch: $(tail -4 <<<"$out")"
    done
    head -c 300000 data/kjv.txt > "$tmp/text.txt"
    head -c 20000 data/kjv.txt > "$tmp/small.txt"
    "$CLEAVE" train --model llama-tiny --data "$tmp/text.txt" --steps 3 --seq-len 32 --micro-batch-size 2 --sample-tokens 0 \
        --eval-batches 1 --save "$tmp/ck" > "$tmp/train.out" 2>&1
    rc=$?
    check '[ $rc -eq 0 ]' "training llama-tiny 3 steps with --save failed (status $rc)$(excerpt 3 "$(cat "$tmp/train.out")")"
    ours=$("$CLEAVE" eval --checkpoint "$tmp/ck" --text "$tmp/small.txt" 2>&1 | sed -n 's/^eval loss: //p')
    theirs=$(timeout 300 $PY "$(dirname "$0")/llama_torch.py" --eval "$tmp/ck" "$tmp/small.txt" 2>&1 | sed -n 's/^eval loss: //p')
    echo "checkpoint: cleave eval loss $ours, torch $theirs"
    check '[ -n "$ours" ] && [ -n "$theirs" ] && awk "BEGIN{d = $ours - $theirs; if (d < 0) d = -d; exit !(d <= 1e-5 * $theirs)}"' \
        "the saved checkpoint: cleave eval loss '$ours', torch '$theirs'"
fi
finish cli_llama_train
