#!/usr/bin/env bash
# The Llama kinds under every layout (issue 30, item 3), llama-tiny on the King James
# Bible, 20 steps, --threads 1 (the GEMM's rounding depends on its thread count):
# - pp 2 under gpipe, 1f1b and zb-h1: losses and gradient norms bitwise equal to one
#   device (the pipeline invariant);
# - dp 2 under ZeRO 1, 2 and 3, tp 2 (with and without sequence parallelism, and with
#   pp 2 under zb-h1: the split backward's kept collectives): within 1e-6 relative;
# - an MQA shape (--kv-heads 1, tied) under pp 2 1f1b: bitwise again;
# - tp past the key-value heads (--kv-heads 1 at tp 2 and 4, 2 at tp 4): within 1e-6; saved at
#   tp 4, resumed at tp 1 and 2: steps 11-20 within 1e-6 of one device.
set -u
source "$(dirname "$0")/lib.sh"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --seq-len 16 --micro-batch-size 2 --global-batch-size 8 --steps 20 --sample-tokens 0
        --eval-batches 2 --threads 1 --comm-timeout 60)
figures() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/'; }
close() { # file_a file_b tol
    paste <(figures "$1") <(figures "$2") | awk -v tol="$3" '
        { n++; for (i = 1; i <= 2; i++) { d = $i - $(i + 2); if (d < 0) d = -d; r = d / ($(i + 2) < 0 ? -$(i + 2) : $(i + 2)); if (r > worst) worst = r } }
        END { printf "%d steps, max rel diff %.3g\n", n, worst; exit !(n == 20 && worst <= tol) }'
}
run() { # name args...
    local name=$1; shift
    "$CLEAVE" train "${common[@]}" "$@" --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$name failed: $(tail -3 "$tmp/$name.out")"
}
for shape in "tiny --model llama-tiny" "mqa --model llama --kv-heads 1 --tie-embeddings 1"; do
    set -- $shape
    s=$1; shift
    run "$s-one" "$@"
    scheds="gpipe 1f1b zb-h1"; [ $s = mqa ] && scheds=1f1b
    for sched in $scheds; do
        run "$s-pp2-$sched" "$@" --pp 2 --schedule $sched
        check '[ -n "$(figures "$tmp/$s-pp2-$sched.jsonl")" ] && [ "$(figures "$tmp/$s-pp2-$sched.jsonl")" = "$(figures "$tmp/$s-one.jsonl")" ]' \
            "$s pp 2 $sched: losses/norms not bitwise equal to one device: $(paste <(figures "$tmp/$s-pp2-$sched.jsonl") <(figures "$tmp/$s-one.jsonl") | head -3)"
    done
    [ $s = mqa ] && continue
    for lay in "z1 --dp 2 --zero 1" "z2 --dp 2 --zero 2" "z3 --dp 2 --zero 3" "tp2 --tp 2" "tp2sp --tp 2 --sequence-parallel" \
               "tp2pp2 --tp 2 --pp 2 --schedule zb-h1"; do
        set -- $lay
        n=$1; shift
        run "$s-$n" --model llama-tiny "$@"
        out=$(close "$tmp/$s-$n.jsonl" "$tmp/$s-one.jsonl" 1e-6); _rc=$?
        echo "$s $*: $out"
        check '[ $_rc -eq 0 ]' "$s $*: not within 1e-6 of one device: $out"
    done
done
# tp past the key-value heads (each replicated on tp / kv ranks, its gradient summed over them): --kv-heads 1 at
# tp 2 and 4, llama-tiny's 2 at tp 4, within 1e-6 of one device; a checkpoint saved at tp 4 resumed at tp 1 and tp 2
run kv1-one --model llama --kv-heads 1
for lay in "kv1-tp2 --model llama --kv-heads 1 --tp 2" "kv1-tp4 --model llama --kv-heads 1 --tp 4" "tiny-tp4 --model llama-tiny --tp 4"; do
    set -- $lay
    n=$1; shift
    run "$n" "$@"
    ref=$tmp/kv1-one.jsonl; [ $n = tiny-tp4 ] && ref=$tmp/tiny-one.jsonl
    out=$(close "$tmp/$n.jsonl" "$ref" 1e-6); _rc=$?
    echo "$*: $out"
    check '[ $_rc -eq 0 ]' "$*: not within 1e-6 of one device: $out"
done
run kv1-tp4-half --model llama --kv-heads 1 --tp 4 --stop-after 10 --save "$tmp/kv1-ck"
for tp in 1 2; do
    "$CLEAVE" train "${common[@]}" --resume "$tmp/kv1-ck" --tp $tp --log-file "$tmp/kv1-res$tp.jsonl" > "$tmp/kv1-res$tp.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "resume at tp $tp failed: $(tail -3 "$tmp/kv1-res$tp.out")"
    want=$(figures "$tmp/kv1-one.jsonl" | sed -n 11,20p); got=$(figures "$tmp/kv1-res$tp.jsonl")
    out=$(paste <(echo "$want") <(echo "$got") | awk '{ for (i = 1; i <= 2; i++) { d = $i - $(i + 2); if (d < 0) d = -d; r = d / $i; if (r > w) w = r } n++ }
        END { printf "%d steps, max rel diff %.3g", n, w; exit !(n == 10 && w <= 1e-6) }'); _rc=$?
    echo "kv 1 saved at tp 4, resumed at tp $tp: $out"
    check '[ $_rc -eq 0 ]' "kv 1 saved at tp 4, resumed at tp $tp: steps 11-20 not within 1e-6 of one device: $out"
done
finish cli_llama_layouts
