#!/usr/bin/env bash
# The pipeline's output-gradient receive buffers are a pool sized from the
# schedule (cl_schedule_chunk_douts: one per stage in every built-in
# schedule, none on the last), not one per live micro-batch slot.
# - memory: for gpipe, 1f1b, zb-h1 (pp 4) and interleaved (pp 2 x 2 chunks)
#   at m = 8, every rank's measured bytes equal the prediction, and rank q's
#   activations are live x (one slot) + pool x dout, where one slot comes
#   from the same run at m = 1 (live 1: one slot + pool x dout), dout is one
#   output gradient, B x T x C floats (the formula, from the flags), live is
#   m (gpipe), min(p - q, m) (1f1b) or the stage table's (zb-h1), and pool is
#   1 but 0 on the last stage. So the peak is exactly (live - 1) x dout
#   under one slot per live micro-batch holding its own buffer (printed).
#   Interleaved (m = 1 is not allowed there): rank 0's activations are the
#   sum over its chunks (stages 0 and 2) of the stage table's live x slot
#   bytes, plus 2 x dout.
# - training: those pipelines give the same losses and gradient norms as one
#   device, bit for bit (cli_pp.sh covers every schedule and more shapes).
set -u
source "$(dirname "$0")/lib.sh"
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 2000) > "$tmp/text.txt"
B=2 T=32 C=48
model=(--data "$tmp/text.txt" --layers 6 --channels $C --heads 3 --context $T --micro-batch-size $B --threads 1 --eval-batches 1)
dout=$((B * T * C * 4))
acts() { # json rank -> measured activations (empty unless predicted == measured on every rank)
    python3 - "$1" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
if rows and all(r["predicted"] == r["measured"] for r in rows):
    print([r for r in rows if r["rank"] == int(sys.argv[2])][0]["measured"]["activations"])
PY
}
lives() { # train output, stage -> that stage's live micro-batches in the stage table
    sed -n "s/.*stage $2 (rank .*(\([0-9]*\) live x.*/\1/p" "$1"
}
slot() { # train output, stage -> the bytes of one of its slots in the stage table
    sed -n "s/.*stage $2 (rank .*live x \([0-9]*\) bytes.*/\1/p" "$1"
}
for run in "gpipe|4|--pp 4 --schedule gpipe" "1f1b|4|--pp 4 --schedule 1f1b" "zb-h1|4|--pp 4 --schedule zb-h1" \
           "interleaved|2|--pp 2 --schedule interleaved --virtual-stages 2"; do
    IFS='|' read -r sched p flags <<< "$run"
    for m in 1 8; do
        [ "$sched" = interleaved ] && [ $m -eq 1 ] && continue
        # shellcheck disable=SC2086
        timeout 120 "$CLEAVE" memory --measure --json "${model[@]}" $flags --global-batch-size $((B * m)) > "$tmp/$sched-m$m.json" 2> "$tmp/err"
        _rc=$?; check '[ $_rc -eq 0 ]' "$sched m $m: memory --measure failed$(excerpt 3 "$(cat "$tmp/err")")"
    done
    # shellcheck disable=SC2086
    timeout 120 "$CLEAVE" train "${model[@]}" $flags --global-batch-size $((B * 8)) --steps 3 --sample-tokens 0 \
        --log-file "$tmp/$sched.jsonl" > "$tmp/$sched.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$sched: training failed$(excerpt 3 "$(tail -3 "$tmp/$sched.out")")"
    S=$p; [ "$sched" = interleaved ] && S=$((2 * p))
    report=""
    for ((q = 0; q < p; q++)); do
        a1=0; [ "$sched" = interleaved ] || a1=$(acts "$tmp/$sched-m1.json" $q)
        a8=$(acts "$tmp/$sched-m8.json" $q)
        check '[ -n "$a1" ] && [ -n "$a8" ]' "$sched rank $q: predicted != measured (or no figures)"
        [ -n "$a1" ] && [ -n "$a8" ] || continue
        if [ "$sched" = interleaved ]; then
            [ $q -eq 0 ] || continue
            # rank 0 holds stages 0 and p (chunks 0, 1), neither the last: a pool of 1 each
            l0=$(lives "$tmp/$sched.out" 0); l1=$(lives "$tmp/$sched.out" $p)
            s0=$(slot "$tmp/$sched.out" 0); s1=$(slot "$tmp/$sched.out" $p)
            live=$((l0 + l1)); pool=2
            want=$(( l0 * s0 + l1 * s1 + 2 * dout ))
            a1=$(( (s0 * l0 + s1 * l1) / live + dout )) # for the message: a mean slot
        else
            case $sched in
                gpipe) live=8 ;;
                1f1b) live=$((p - q < 8 ? p - q : 8)) ;;
                *) live=$(lives "$tmp/$sched.out" $q) ;;
            esac
            pool=$((q < S - 1 ? 1 : 0))
            want=$(( live * (a1 - pool * dout) + pool * dout ))
        fi
        check '[ -n "$live" ] && [ "$a8" -eq "$want" ]' \
            "$sched rank $q: activations $a8 at m 8, want live $live x (slot $((a1 - pool * dout))) + $pool x dout $dout = $want"
        report="$report rank $q: $a8 B ($live live, saves $(( pool > 0 ? (live - pool) * dout : 0 )) B);"
    done
    echo "$sched:$report"
done

# bitwise: every pipeline above trains to one device's figures
figures() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/'; }
timeout 120 "$CLEAVE" train "${model[@]}" --global-batch-size $((B * 8)) --steps 3 --sample-tokens 0 --log-file "$tmp/one.jsonl" > "$tmp/one.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/one.jsonl" | wc -l)" -eq 3 ]' "one device failed$(excerpt 3 "$(tail -3 "$tmp/one.out")")"
for sched in gpipe 1f1b zb-h1 interleaved; do
    check '[ "$(figures "$tmp/$sched.jsonl")" = "$(figures "$tmp/one.jsonl")" ]' \
        "$sched: losses/norms not bitwise equal to one device$(excerpt 3 "$(paste <(figures "$tmp/$sched.jsonl") <(figures "$tmp/one.jsonl"))")"
done
finish cli_pp_dout
