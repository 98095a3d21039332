#!/usr/bin/env bash
# One rank's training results held to the bit: gpt2-tiny (no recompute,
# selective, full, and --dp 2), the CNN and the MLP train 10 steps of
# micro-batch 2, global batch 8, --threads 1; every step's loss and gradient
# norm and every validation loss (%.17g from --log-file) and the final
# sample's bytes must equal tests/fixtures/engine/NAME.txt byte for byte.
# The fixtures were recorded from the single-device step loop that preceded
# the one step engine (a single device as a one-stage pipeline).
#   bash tests/cli_engine.sh           check
#   bash tests/cli_engine.sh --write   record the fixtures from this build
set -u
source "$(dirname "$0")/lib.sh"
dir=tests/fixtures/engine
write=0
[ "${1:-}" = --write ] && write=1 && mkdir -p "$dir"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--micro-batch-size 2 --global-batch-size 8 --steps 10 --threads 1 --eval-every 5 --eval-batches 4 --comm-timeout 60)
gpt=(--data "$tmp/text.txt" --seq-len 32 --sample-tokens 16)
# figures LOG OUT: "step loss norm" per step, "step val loss" per evaluation, then the sample's bytes in hex
figures() {
    sed -n 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2 \3/p
            s/.*"step": \([0-9]*\), "val_loss": \([^}]*\)}.*/\1 val \2/p' "$1"
    sed -n '/^sample:$/,$p' "$2" | od -An -tx1 | tr -s ' \n' ' '
    echo
}
run() { # NAME FLAGS...
    local name=$1
    shift
    "$CLEAVE" train "${common[@]}" "$@" --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$name: cleave train failed$(excerpt 5 "$(tail -5 "$tmp/$name.out")")"
    figures "$tmp/$name.jsonl" "$tmp/$name.out" > "$tmp/$name.txt"
    if [ $write -eq 1 ]; then
        cp "$tmp/$name.txt" "$dir/$name.txt"
        return
    fi
    check 'cmp -s "$tmp/$name.txt" "$dir/$name.txt"' \
        "$name: figures differ from $dir/$name.txt$(excerpt 6 "$(diff "$dir/$name.txt" "$tmp/$name.txt")")"
}
run gpt2-tiny "${gpt[@]}"
run gpt2-tiny-selective "${gpt[@]}" --recompute selective
run gpt2-tiny-full "${gpt[@]}" --recompute full
run gpt2-tiny-dp2 "${gpt[@]}" --dp 2
run cnn --model cnn
run cnn-dp2 --model cnn --dp 2
run mlp --model mlp
finish cli_engine
