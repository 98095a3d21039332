#!/usr/bin/env bash
# ZeRO 2 and 3's gradient buckets and gathers against the memory cap
# (issue 29, item 4):
# - the default bucket under --zero 2 and 3 is a quarter of the shard's
#   bytes, rounded down to a power of two, 64 KiB to 25 MiB
#   (cl_zero_bucket_default): gpt2-tiny with 8 layers at dp 4 (shard 105120
#   floats: 64 KiB) predicts exactly what --bucket-size 64KiB does, less
#   than --bucket-size 25MiB (one bucket, the old default), and measures
#   what it predicts, to the byte;
# - the bits do not depend on the bucket: losses and norms at the default,
#   25 MiB and one unit a bucket are bitwise equal (--zero 3 and --zero 2,
#   two micro-batches a replica);
# - a run over --device-memory is refused with a --bucket-size or a
#   --zero3-prefetch that fits, and the run with it trains under that cap;
# - the planner's nearest configurations (printed after the refusal) offer
#   --bucket-size 1 --zero3-prefetch 0, and that run fits the cap too.
# The caps are not fixed sizes: each lies halfway between two of `cleave
# memory`'s predicted peaks for the same runs (the one that must be refused,
# the one that must fit), so the assertions keep their meaning when the
# activations' or any other category's bytes change.
set -u
source "$(dirname "$0")/lib.sh"
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 2000) > "$tmp/text.txt"
M=(--threads 1 --eval-batches 1 --data "$tmp/text.txt" --layers 8 --micro-batch-size 1)
Z3=("${M[@]}" --dp 4 --zero 3 --global-batch-size 4)
pred() { python3 -c 'import json,sys; print(json.dumps(json.loads(open(sys.argv[1]).readline())["predicted"], sort_keys=True))' "$1"; }

# ---- the default bucket: its memory, predicted = measured --------------------------------
"$CLEAVE" memory --json "${Z3[@]}" > "$tmp/def.json" 2>&1
"$CLEAVE" memory --json "${Z3[@]}" --bucket-size 64KiB > "$tmp/64k.json" 2>&1
"$CLEAVE" memory --json "${Z3[@]}" --bucket-size 25MiB > "$tmp/25m.json" 2>&1
shard=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["predicted"]["optimizer"] // 8)' "$tmp/def.json")
check '[ "$shard" = 105120 ]' "gpt2-tiny, 8 layers, dp 4: shard $shard floats, expected 105120"
check '[ "$(pred "$tmp/def.json")" = "$(pred "$tmp/64k.json")" ]' "the default bucket is not 64 KiB's: $(pred "$tmp/def.json") against $(pred "$tmp/64k.json")"
total() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["predicted"][sys.argv[2]])' "$1" "$2"; }
g_def=$(total "$tmp/def.json" grads) g_25=$(total "$tmp/25m.json" grads)
check '[ "$g_def" -lt "$g_25" ]' "the default's gradients $g_def B are not below one 25 MiB bucket's $g_25 B"
echo "dp 4 --zero 3: gradients $g_def B a rank at the default bucket, $g_25 B at 25 MiB"
for a in "--dp 4 --zero 3 --global-batch-size 4" "--dp 2 --zero 2 --global-batch-size 4" "--pp 2 --dp 2 --zero 3 --layers 4 --global-batch-size 8"; do
    # shellcheck disable=SC2086
    timeout 120 "$CLEAVE" memory --measure --json "${M[@]}" $a > "$tmp/m.json" 2> "$tmp/err"
    _rc=$?
    bad=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    for k, v in r["predicted"].items():
        if r["measured"][k] != v: print("rank", r["rank"], k, v, r["measured"][k])' "$tmp/m.json")
    check '[ $_rc -eq 0 ] && [ -z "$bad" ]' "$a at the default bucket: predicted != measured: $bad$(excerpt 3 "$(cat "$tmp/err")")"
done

# ---- the bits do not depend on the bucket ---------------------------------------------------
losses() { grep '"loss"' "$1" | python3 -c 'import json,sys; print(" ".join("%r %r" % (json.loads(l)["loss"], json.loads(l)["grad_norm"]) for l in sys.stdin))'; }
for z in 3 2; do
    for b in default 25MiB 1; do
        opt=()
        [ $b != default ] && opt=(--bucket-size $b)
        timeout 120 "$CLEAVE" train "${M[@]}" --dp 4 --zero $z --global-batch-size 8 --steps 3 --sample-tokens 0 \
            --log-file "$tmp/z$z-$b.jsonl" "${opt[@]}" > "$tmp/z$z-$b.out" 2>&1
        _rc=$?; check '[ $_rc -eq 0 ]' "--zero $z --bucket-size $b failed$(excerpt 3 "$(tail -3 "$tmp/z$z-$b.out")")"
    done
    for b in 25MiB 1; do
        check '[ -n "$(losses "$tmp/z$z-default.jsonl")" ] && [ "$(losses "$tmp/z$z-default.jsonl")" = "$(losses "$tmp/z$z-$b.jsonl")" ]' \
            "--zero $z: losses at the default bucket and at $b differ: $(losses "$tmp/z$z-default.jsonl") / $(losses "$tmp/z$z-$b.jsonl")"
    done
done

# ---- the refusal proposes a bucket or a prefetch that fits ----------------------------------
peak() { # ARGS...: the largest rank's predicted total, bytes
    "$CLEAVE" memory --json "${Z3[@]}" "$@" 2> /dev/null | python3 -c 'import json,sys; print(max(json.loads(l)["predicted"]["total"] for l in sys.stdin))' 2> /dev/null
}
between() { python3 -c 'import sys; a, b = int(sys.argv[1]), int(sys.argv[2]); print((a + b) // 2 if a < b else "")' "$1" "$2"; }
fits() { # CAP ARGS...: trains 2 steps under --device-memory CAP
    local cap=$1; shift
    timeout 120 "$CLEAVE" train "${Z3[@]}" "$@" --steps 2 --sample-tokens 0 --device-memory "$cap" > "$tmp/fit.out" 2>&1
}
p_25=$(peak --bucket-size 25MiB) p_def=$(peak) p_b1=$(peak --bucket-size 1) p_pf0=$(peak --zero3-prefetch 0) p_lean=$(peak --bucket-size 1 --zero3-prefetch 0)
echo "predicted peaks: 25 MiB buckets $p_25 B, default $p_def B, --bucket-size 1 $p_b1 B, --zero3-prefetch 0 $p_pf0 B, both $p_lean B"
# cap A: over 25 MiB buckets' peak, under the default bucket's
capA=$(between "${p_def:-0}" "${p_25:-0}")
check '[ -n "$capA" ]' "no cap separates the default bucket's peak ${p_def:-?} B from 25 MiB buckets' ${p_25:-?} B"
out=$(timeout 60 "$CLEAVE" train "${Z3[@]}" --bucket-size 25MiB --device-memory "${capA:-1}" --steps 1 2>&1); rc=$?
prop=$(printf '%s' "$out" | head -1 | grep -o 'Fits with --bucket-size [0-9]*KiB' | grep -o '[0-9]*KiB')
check '[ $rc -eq 2 ] && [ -n "$prop" ]' "25 MiB buckets over a ${capA:-?} B cap: no --bucket-size proposed$(excerpt 2 "$out")"
fits "${capA:-1}" --bucket-size "${prop:-0}"
_rc=$?; check '[ $_rc -eq 0 ] && grep -q "step *2/2" "$tmp/fit.out"' "--bucket-size $prop under ${capA:-?} B does not train$(excerpt 3 "$(tail -3 "$tmp/fit.out")")"
# cap B: over the default run's peak and over one unit a bucket's (so the
# refusal's first proposal is the prefetch, not a smaller bucket), under
# --zero3-prefetch 0's; the lean pair (both) then fits too, and the plain
# configuration does not, so the planner searches lean
hiB=$p_b1
[ -n "$p_def" ] && [ -n "$p_b1" ] && [ "$p_def" -lt "$p_b1" ] && hiB=$p_def
capB=$(between "${p_pf0:-0}" "${hiB:-0}")
check '[ -n "$capB" ] && [ -n "$p_lean" ] && [ "$p_lean" -le "$capB" ]' \
    "no cap lies under the default's and one-unit buckets' peaks (${p_def:-?}, ${p_b1:-?} B) and over --zero3-prefetch 0's (${p_pf0:-?} B) and the lean pair's (${p_lean:-?} B)"
out=$(timeout 60 "$CLEAVE" train "${Z3[@]}" --device-memory "${capB:-1}" --steps 1 2>&1); rc=$?
check '[ $rc -eq 2 ] && printf "%s" "$out" | head -1 | grep -q "Fits with --zero3-prefetch 0: peak"' "prefetch 1 over a ${capB:-?} B cap: no --zero3-prefetch 0 proposed$(excerpt 2 "$out")"
fits "${capB:-1}" --zero3-prefetch 0
_rc=$?; check '[ $_rc -eq 0 ] && grep -q "step *2/2" "$tmp/fit.out"' "--zero3-prefetch 0 under ${capB:-?} B does not train$(excerpt 3 "$(tail -3 "$tmp/fit.out")")"
# the planner's list after the refusal: the lean buckets and gathers, which fit
check 'printf "%s" "$out" | grep -q -- "--dp 4 --tp 1 --pp 1 --micro-batch-size 1 --zero 3 --recompute none --bucket-size 1 --zero3-prefetch 0: peak"' \
    "the planner does not offer --bucket-size 1 --zero3-prefetch 0 under ${capB:-?} B$(excerpt 6 "$out")"
fits "${capB:-1}" --bucket-size 1 --zero3-prefetch 0
_rc=$?; check '[ $_rc -eq 0 ] && grep -q "step *2/2" "$tmp/fit.out"' "the planner's lean run under ${capB:-?} B does not train$(excerpt 3 "$(tail -3 "$tmp/fit.out")")"
finish cli_bucket
