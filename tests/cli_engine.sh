#!/usr/bin/env bash
# One rank's training results held to the bit: gpt2-tiny (no recompute,
# selective, full, and --dp 2), the CNN and the MLP train 10 steps of
# micro-batch 2, global batch 8, --threads 1; every step's loss and gradient
# norm and every validation loss (%.17g from --log-file) and the final
# sample's bytes must equal tests/fixtures/engine/NAME.txt byte for byte.
# The fixtures were recorded from the single-device step loop that preceded
# the one step engine (a single device as a one-stage pipeline).
# The bits depend on the GEMM oneDNN dispatches to (AVX2 and AVX-512 sum in
# other orders): tests/fixtures/engine/RECORDED_ON holds the `cleave
# --version` gemm build they were recorded with. On that build every figure
# must match byte for byte; on another (an AVX2 machine, another oneDNN)
# every loss and norm within 1e-6 relative (AVX2 against AVX-512 measured
# 4.5e-8 at most: ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 machine) and the
# sample, a draw that a last-bit change may turn, is a skip.
#   bash tests/cli_engine.sh           check
#   bash tests/cli_engine.sh --write   record the fixtures from this build
set -u
source "$(dirname "$0")/lib.sh"
dir=tests/fixtures/engine
write=0
[ "${1:-}" = --write ] && write=1 && mkdir -p "$dir"
build=$("$CLEAVE" --version | sed -n 's/.*(gemm: \([^,]*\),.*/\1/p')
[ $write -eq 1 ] && printf '%s\n' "$build" > "$dir/RECORDED_ON"
recorded=$(cat "$dir/RECORDED_ON" 2>/dev/null)
exact=0
[ "$build" = "$recorded" ] && exact=1
echo "gemm build: $build; fixtures recorded on: $recorded; $([ $exact -eq 1 ] && echo "bit for bit" || echo "within 1e-6")"
# near A B: A's step and validation lines (not the sample's bytes) as many
# as B's, the same steps, every figure within 1e-6 relative
near() {
    paste -d ' ' <(grep -v '^ ' "$1") <(grep -v '^ ' "$2") |
        awk '{ h = NF / 2; if (NF % 2 || $1 != $(h + 1)) { print "line " NR ": " $0; bad = 1; next }
               for (i = 2; i <= h; i++) if ($i != "val") { d = $i - $(i + h); if (d < 0) d = -d; m = $(i + h); if (m < 0) m = -m
                   if (d > 1e-6 * m) { print "line " NR ": " $i " vs " $(i + h); bad = 1 } } }
             END { exit bad }'
}
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
    if [ $exact -eq 1 ]; then
        check 'cmp -s "$tmp/$name.txt" "$dir/$name.txt"' \
            "$name: figures differ from $dir/$name.txt$(excerpt 6 "$(diff "$dir/$name.txt" "$tmp/$name.txt")")"
    else
        near "$tmp/$name.txt" "$dir/$name.txt" > "$tmp/$name.near"
        _rc=$?; check '[ $_rc -eq 0 ]' \
            "$name: figures differ from $dir/$name.txt by more than 1e-6$(excerpt 6 "$(cat "$tmp/$name.near")")"
        skip "$name: the sample's bytes (recorded on $recorded, this build is $build)"
    fi
}
run gpt2-tiny "${gpt[@]}"
run gpt2-tiny-selective "${gpt[@]}" --recompute selective
run gpt2-tiny-full "${gpt[@]}" --recompute full
run gpt2-tiny-dp2 "${gpt[@]}" --dp 2
run cnn --model cnn
run cnn-dp2 --model cnn --dp 2
run mlp --model mlp
finish cli_engine
