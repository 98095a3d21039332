#!/usr/bin/env bash
# Pipeline parallelism end to end (gpt2-tiny with 6 blocks: 8 units).
# - pp=2 and pp=4, every schedule, m in {1, 4, 8} micro-batches: 20 steps'
#   losses and gradient norms bitwise equal to one device with the same
#   micro-batches. Every run uses --threads 1: the GEMM's blocking, and so
#   its rounding, depends on its thread count.
# - pp=2 under MPI bitwise equal to threads; pp=2 x dp=2 within 1e-6.
# - --recompute selective and full: the same bits as none, less activation
#   memory, and the measured peak equals live micro-batches x their size
#   plus the output-gradient receive buffers.
# - checkpoints from a pipeline equal one device's byte for byte; resuming
#   works across pipeline shapes.
# - bubble: measured figures printed beside the simulator's; --trace.
# - bad input exits 2 with a message naming the problem.
set -u
source "$(dirname "$0")/lib.sh"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --layers 6 --seq-len 16 --micro-batch-size 2 --steps 20 --sample-tokens 0
        --eval-batches 2 --threads 1 --comm-timeout 60)
figures() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/'; }
close() { # file_a file_b tol
    paste <(figures "$1") <(figures "$2") | awk -v tol="$3" '
        { n++; d = $1 - $3; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3); if (r > worst) worst = r }
        END { printf "%d steps, max rel diff %.3g\n", n, worst; exit !(n == 20 && worst <= tol) }'
}
for m in 1 4 8; do
    gb=$((2 * m))
    "$CLEAVE" train "${common[@]}" --global-batch-size $gb --log-file "$tmp/one-m$m.jsonl" > "$tmp/one-m$m.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "one device, m=$m failed: $(tail -3 "$tmp/one-m$m.out")"
    val=$(grep "validation loss" "$tmp/one-m$m.out")
    for pp in 2 4; do
        for sched in gpipe 1f1b interleaved zb-h1; do
            [ $sched = interleaved ] && [ $((m % pp)) -ne 0 ] && continue
            name="pp$pp-$sched-m$m"
            "$CLEAVE" train "${common[@]}" --global-batch-size $gb --pp $pp --schedule $sched \
                --log-file "$tmp/$name.jsonl" > "$tmp/$name.out" 2>&1
            _rc=$?; check '[ $_rc -eq 0 ]' "$name failed: $(tail -3 "$tmp/$name.out")"
            check '[ -n "$(figures "$tmp/$name.jsonl")" ] && [ "$(figures "$tmp/$name.jsonl")" = "$(figures "$tmp/one-m$m.jsonl")" ]' \
                "$name: losses/norms not bitwise equal to one device: $(paste <(figures "$tmp/$name.jsonl") <(figures "$tmp/one-m$m.jsonl") | head -3)"
            check '[ "$(grep "validation loss" "$tmp/$name.out")" = "$val" ]' "$name: validation loss differs from one device"
            check 'grep -q "bubble .*simulated" "$tmp/$name.out"' "$name: no bubble figures in the step lines"
            echo "$name: bitwise equal to one device over 20 steps; $(grep -m1 'layout' "$tmp/$name.out" | sed 's/.*layout/layout/')"
        done
    done
done
check 'grep -q "stage 3 (rank 3, chunk 0)" "$tmp/pp4-1f1b-m4.out"' "the stage table is missing"
check 'grep -q "stage 7 (rank 3, chunk 1)" "$tmp/pp4-interleaved-m4.out"' "the interleaved stage table is missing"

# an explicit layout gives the same bits too
"$CLEAVE" train "${common[@]}" --global-batch-size 8 --pp 2 --pp-layout "E,t*2|t*4,L" --log-file "$tmp/layout.jsonl" > "$tmp/layout.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/layout.jsonl")" = "$(figures "$tmp/one-m4.jsonl")" ]' "--pp-layout run differs: $(tail -3 "$tmp/layout.out")"
check 'grep -q "layout E,t\*2|t\*4,L (given)" "$tmp/layout.out"' "the given layout is not printed"

# recompute: selective and full give the same bits as none, with less
# activation memory; rank 0's measured activation peak is its stage's live
# micro-batches times the bytes of one plus its output-gradient buffers, as
# the stage table predicts
actb() { grep -o '"act_bytes": [0-9]*' "$1" | tail -1 | sed 's/.*: //'; }
for run in "one|" "pp2-1f1b|--pp 2 --schedule 1f1b" "pp2-zb|--pp 2 --schedule zb-h1"; do
    name=${run%%|*}; flags=${run#*|}
    for rc in none selective full; do
        # shellcheck disable=SC2086
        "$CLEAVE" train "${common[@]}" --global-batch-size 8 $flags --recompute $rc --log-file "$tmp/rc-$name-$rc.jsonl" \
            > "$tmp/rc-$name-$rc.out" 2>&1
        _rc=$?; check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/rc-$name-$rc.jsonl")" = "$(figures "$tmp/one-m4.jsonl")" ]' \
            "$name --recompute $rc: not bitwise equal to one device without recompute: $(tail -2 "$tmp/rc-$name-$rc.out")"
        if [ "$name" != one ]; then
            want=$(grep "stage 0 (rank 0" "$tmp/rc-$name-$rc.out" | sed -n 's/.*(\([0-9]*\) live x \([0-9]*\) bytes + \([0-9]*\) output gradients* x \([0-9]*\) bytes).*/\1 \2 \3 \4/p' |
                awk '{ print $1 * $2 + $3 * $4 }')
            check '[ -n "$want" ] && [ "$(actb "$tmp/rc-$name-$rc.jsonl")" = "$want" ]' \
                "$name --recompute $rc: activation peak $(actb "$tmp/rc-$name-$rc.jsonl") is not live x per-micro-batch ($want)"
        fi
    done
    a=$(actb "$tmp/rc-$name-none.jsonl"); b=$(actb "$tmp/rc-$name-selective.jsonl"); c=$(actb "$tmp/rc-$name-full.jsonl")
    check '[ "$a" -gt "$b" ] && [ "$b" -gt "$c" ]' "$name: activation peaks none $a, selective $b, full $c do not decrease"
    echo "$name: recompute none/selective/full bitwise equal; activation peak (rank 0) $a / $b / $c bytes"
done

# the timeline: one Chrome trace for all ranks, drawn back as the pipeline diagram
"$CLEAVE" train "${common[@]}" --steps 3 --global-batch-size 8 --pp 2 --trace "$tmp/trace.json" > "$tmp/trace.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && grep -q "\"pid\":1" "$tmp/trace.json" && grep -q "\"kind\":\"RECV_GRAD\"" "$tmp/trace.json"' \
    "--trace: no trace with both ranks: $(tail -3 "$tmp/trace.out")"
out=$("$CLEAVE" trace render "$tmp/trace.json" --step 2 --out "$tmp/trace.svg" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && [ "$(grep -c "<rect class=\"act" "$tmp/trace.svg")" -eq 16 ]' "trace render: not 16 boxes (4 micro-batches x 2 passes x 2 ranks): $out"

# checkpoints: a pipeline writes one checkpoint (the first stage gathers it);
# one device and other pipelines resume from it bit for bit, and back
"$CLEAVE" train "${common[@]}" --global-batch-size 8 --pp 2 --stop-after 10 --save "$tmp/ck-pp2" > "$tmp/ck1.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && [ -f "$tmp/ck-pp2/model.safetensors" ] && [ -f "$tmp/ck-pp2/optimizer.safetensors" ]' "pp=2 --save: $(tail -2 "$tmp/ck1.out")"
"$CLEAVE" train "${common[@]}" --global-batch-size 8 --stop-after 10 --save "$tmp/ck-one" > /dev/null 2>&1
check 'st_same "$tmp/ck-pp2/model.safetensors" "$tmp/ck-one/model.safetensors" && st_same "$tmp/ck-pp2/optimizer.safetensors" "$tmp/ck-one/optimizer.safetensors"' \
    "the pp=2 checkpoint is not byte-equal to one device's"
want=$(figures "$tmp/one-m4.jsonl" | tail -10)
for run in "one|" "pp4-zb|--pp 4 --schedule zb-h1" "pp2-int|--pp 2 --schedule interleaved"; do
    name=${run%%|*}; flags=${run#*|}
    # shellcheck disable=SC2086
    "$CLEAVE" train "${common[@]}" --global-batch-size 8 $flags --resume "$tmp/ck-pp2" --log-file "$tmp/res-$name.jsonl" > "$tmp/res-$name.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/res-$name.jsonl")" = "$want" ]' "resume of the pp=2 checkpoint on $name differs: $(tail -2 "$tmp/res-$name.out")"
done
"$CLEAVE" train "${common[@]}" --global-batch-size 8 --pp 2 --resume "$tmp/ck-one" --log-file "$tmp/res-back.jsonl" > /dev/null 2>&1
check '[ "$(figures "$tmp/res-back.jsonl")" = "$want" ]' "pp=2 resuming one device's checkpoint differs"

# the CNN and the MLP on the digits: a pipeline equals one device too
for model in cnn mlp; do
    dig=(--model $model --steps 20 --global-batch-size 32 --micro-batch-size 8 --threads 1 --eval-batches 1)
    "$CLEAVE" train "${dig[@]}" --log-file "$tmp/$model-1.jsonl" > "$tmp/$model-1.out" 2>&1
    "$CLEAVE" train "${dig[@]}" --pp 2 --schedule zb-h1 --log-file "$tmp/$model-2.jsonl" > "$tmp/$model-2.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ] && [ -n "$(figures "$tmp/$model-1.jsonl")" ] && [ "$(figures "$tmp/$model-2.jsonl")" = "$(figures "$tmp/$model-1.jsonl")" ]' \
        "$model pp=2 differs from one device: $(tail -2 "$tmp/$model-2.out")"
done

# pp=2 x dp=2 on 4 ranks: within 1e-6 of one device
"$CLEAVE" train "${common[@]}" --global-batch-size 16 --pp 2 --dp 2 --log-file "$tmp/pp2dp2.jsonl" > "$tmp/pp2dp2.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "pp=2 x dp=2 failed: $(tail -3 "$tmp/pp2dp2.out")"
echo -n "pp=2 x dp=2 vs one device: "
check 'close "$tmp/pp2dp2.jsonl" "$tmp/one-m8.jsonl" 1e-6' "pp=2 x dp=2 differs from one device"

if "$CLEAVE" --version | grep -q "mpi: yes" && command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
    timeout -k 5 300 mpirun --oversubscribe -np 2 "$CLEAVE" train "${common[@]}" --global-batch-size 8 --pp 2 --schedule 1f1b \
        --comm mpi --log-file "$tmp/mpi.jsonl" > "$tmp/mpi.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "pp=2 under MPI failed: $(tail -5 "$tmp/mpi.out")"
    check '[ "$(figures "$tmp/mpi.jsonl")" = "$(figures "$tmp/pp2-1f1b-m4.jsonl")" ]' "MPI pp=2 is not bitwise equal to threads pp=2"
    echo "mpi pp=2: bitwise equal to threads"
    timeout -k 5 300 mpirun --oversubscribe -np 4 "$CLEAVE" train "${common[@]}" --global-batch-size 16 --pp 2 --dp 2 \
        --comm mpi --log-file "$tmp/mpi22.jsonl" > "$tmp/mpi22.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/mpi22.jsonl")" = "$(figures "$tmp/pp2dp2.jsonl")" ]' \
        "MPI pp=2 x dp=2 differs from threads: $(tail -3 "$tmp/mpi22.out")"
else
    skip "MPI parts (this build has no MPI)" setup
fi

bad() { # words args...
    local want=$1; shift
    local out rc
    out=$(timeout 60 "$CLEAVE" train "${common[@]}" "$@" 2>&1 >/dev/null); rc=$?
    check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -qi -- "$want"' "bad pipeline input ($*): status $rc: $out"
}
bad "only 8 units" --pp 9 --global-batch-size 2
bad "only 8 units" --pp 4 --schedule interleaved --virtual-stages 3 --global-batch-size 8
bad "unit 6 is .t." --pp 2 --pp-layout "E,t*2|t*3,L"
bad "covers 7 of the model's 8 units" --pp 2 --pp-layout "E,t*2|t*4"
bad "unknown part 'q'" --pp 2 --pp-layout "E,t*2|q*4,L"
bad "unit 7 is 'L'" --pp 2 --pp-layout "E,t*2|t*5"
bad "has 3 stages but the pipeline needs 2" --pp 2 --pp-layout "E,t*2|t*2|t*2,L"
bad "multiple of --pp 2" --pp 2 --schedule interleaved --global-batch-size 6
bad "needs --schedule interleaved" --pp 2 --virtual-stages 2 --global-batch-size 4
bad "need --pp > 1" --schedule gpipe
bad "trace needs --pp > 1 or --cp > 1" --trace "$tmp/t.json"
bad "unknown schedule\|unknown.*'pipedream'" --pp 2 --schedule pipedream
bad "unknown --recompute 'most'" --recompute most
# a pipeline over its cap: refused before allocating (the device's message no
# longer comes from inside a step), the context joined by one ": "
out=$(timeout 60 "$CLEAVE" train --data "$tmp/text.txt" --threads 1 --pp 2 --schedule zb-h1 --micro-batch-size 2 \
    --global-batch-size 16 --device-memory 3.2MiB --steps 2 --sample-tokens 0 2>&1 >/dev/null); rc=$?
check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "refused before allocating" && ! printf "%s" "$out" | grep -q ": :"' \
    "pipeline out of memory: status $rc: $out"
out=$(timeout 60 "$CLEAVE" train --model cnn --pp 10 --micro-batch-size 2 --global-batch-size 20 --steps 1 2>&1 >/dev/null); rc=$?
check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "only 9 units: use fewer"' "cnn --pp 10: status $rc: $out"
# --pp 2 --dp 2: each chunk's gradient buckets leave during its last backward
# (the trace's GRAD_SYNC events start before that backward ends on every
# rank), and the losses are bitwise those of one bucket per chunk
ov=(--data "$tmp/text.txt" --threads 1 --pp 2 --dp 2 --micro-batch-size 1 --global-batch-size 8 --steps 3 --sample-tokens 0 --eval-batches 1)
"$CLEAVE" train "${ov[@]}" --bucket-size 4KiB --trace "$tmp/ov.json" --log-file "$tmp/ov.jsonl" > "$tmp/ov.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "pp2 x dp2 with buckets failed: $(tail -2 "$tmp/ov.out")"
"$CLEAVE" train "${ov[@]}" --bucket-size 1GiB --log-file "$tmp/ov1.jsonl" > "$tmp/ov1.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/ov.jsonl")" = "$(figures "$tmp/ov1.jsonl")" ]' "pp2 x dp2: 4 KiB buckets not bitwise equal to one bucket"
overlap=$(python3 - "$tmp/ov.json" <<'PY'
import json, sys
x = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
last = max(e["args"]["step"] for e in x)
for pid in sorted({e["pid"] for e in x}):
    mine = [e for e in x if e["pid"] == pid and e["args"]["step"] == last]
    end = max(e["ts"] + e["dur"] for e in mine if e["args"]["kind"] in ("BWD", "BWD_WEIGHT"))
    early = [e for e in mine if e["args"]["kind"] == "GRAD_SYNC" and e["ts"] < end]
    if not early:
        print("rank %d: no gradient reduction started before its last backward ended" % pid)
PY
)
check '[ -z "$overlap" ]' "pp2 x dp2 overlap: $overlap"
finish cli_pp
