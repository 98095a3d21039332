#!/usr/bin/env bash
# Pipeline parallelism with expert parallelism, --pp M --dp D --ep N (issue 33 item 2), on mixtral-tiny, 20 steps of
# the King James Bible, --threads 1:
# - `cleave mesh --pp 2 --dp 4 --ep 2`: each expert-parallel group is ep data-parallel ranks of one stage;
# - every schedule (gpipe, 1f1b, interleaved with 2 virtual stages, zb-h1) at pp 2 dp 2 ep 2 bitwise equal to
#   pp 1 dp 2 ep 2 (the pipeline invariant holds with experts: each stage's all-to-alls carry the same micro-batch's
#   rows from every replica, so every expert sums the same terms in the same order), every step's loss, grad norm,
#   aux loss, dropped slots and share of token-slots per expert (the report sums every stage's MoE layers); and
#   within 1e-6 relative of pp 2 dp 2 ep 1 under 1f1b and zb-h1 (ep changes only the summation order);
# - zb-h1's weight pass repeats its input pass's two row exchanges (its step's all-to-all bytes 1f1b's plus the rows'), in the
#   same order on every replica, and gives the same bits;
# - expert-data groups of 2 (pp 2 dp 4 ep 2; ZeRO 1 under zb-h1; ep 4 under gpipe), bf16, recompute full with a
#   capacity factor and recompute selective, pp 4 (stages with no MoE block), --moe-every 2 (dense blocks beside
#   MoE ones): bitwise their pp 1 runs;
# - MPI: pp 2 dp 2 ep 2 (zb-h1) bitwise the threads run;
# - checkpoints saved at pp 2 dp 2 ep 2 at step 10: sharded and single file, resumed at pp 2 ep 2 and pp 1 ep 2
#   bitwise the run that never stopped, at pp 2 ep 1 within 1e-6; the single file's tensors and moments byte-equal to
#   a pp 1 dp 2 ep 2 run's;
# - memory: predicted == measured on every rank at pp 2 dp 2 ep 2 under each schedule; the planner's peak on this
#   machine's description equal to `cleave memory`'s, pp with ep in its search, and --auto --pp 2 --ep 2 runs.
set -u
source "$(dirname "$0")/lib.sh"

out=$("$CLEAVE" mesh --pp 2 --dp 4 --ep 2 2>&1)
check 'grep -q "^data-parallel groups:     \[0, 1, 2, 3\] \[4, 5, 6, 7\]$" <<<"$out" &&
       grep -q "^expert-parallel groups:   \[0, 1\] \[2, 3\] \[4, 5\] \[6, 7\]$" <<<"$out" &&
       grep -q "^expert-data groups:       \[0, 2\] \[1, 3\] \[4, 6\] \[5, 7\]$" <<<"$out"' \
    "cleave mesh --pp 2 --dp 4 --ep 2: $(excerpt 12 "$out")"

source "$(dirname "$0")/moe_lib.sh"
# every figure of a step a pipeline could change: loss, grad norm, aux loss, dropped slots, share per expert
moe_all() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*"moe_aux": \([^,]*\), "moe_dropped": \([0-9]*\), "expert_share": \(\[[^]]*\]\).*/\1 \2 \3 \4 \5/'; }
same() { # A B: bitwise, 20 steps
    local a=$tmp/$1.jsonl b=$tmp/$2.jsonl
    check '[ "$(moe_all "$a" | wc -l)" -eq 20 ] && [ "$(moe_all "$a")" = "$(moe_all "$b")" ]' \
        "$1 not bitwise $2: $(paste -d '|' <(moe_all "$a") <(moe_all "$b") | awk -F'|' '$1 != $2' | head -2)"
}
# (close A B [FROM]: moe_lib.sh)
near() { # A B STEPS [FROM]
    local res a=$tmp/$1.jsonl n=$3
    res=$(close "$a" "$tmp/$2.jsonl" "${4:-1}"); _rc=$?
    echo "$1 against $2: $res"
    check '[ $_rc -eq 0 ] && [ "$(figures "$a" | wc -l)" -eq "$n" ]' "$1 against $2: $res"
}

run one --dp 2 --ep 2
for s in gpipe 1f1b interleaved zb-h1; do
    v=(); [ $s = interleaved ] && v=(--virtual-stages 2)
    run "$s" --pp 2 --dp 2 --ep 2 --schedule $s "${v[@]}"
    same "$s" one
done
for s in 1f1b zb-h1; do # ep 1 under a schedule without and with a split backward
    run "$s-ep1" --pp 2 --dp 2 --schedule $s
    near "$s" "$s-ep1" 20
done
a2a() { grep '"loss"' "$tmp/$1.jsonl" | sed -n "${2}s/.*\"moe_a2a_bytes\": \[\([0-9]*\),.*/\1/p"; }
# rank 0 (stage 0: one MoE block, 2 micro-batches) sends a step under 1f1b the slot counts (2 x 4 E (ep-1)/ep = 32
# bytes) and X = its rows routed away (X1) + the results of the rows it received (X2) in the forward, the same X in
# the backward (their gradients); zb-h1's weight pass repeats the backward's two exchanges: 1f1b = 32 + 2X,
# zb-h1 = 1f1b + X
f=$(a2a 1f1b 1) g=$(a2a gpipe 1) z=$(a2a zb-h1 1)
echo "all-to-all bytes rank 0 sends in step 1: 1f1b $f, gpipe $g, zb-h1 $z"
check '[ -n "$f" ] && [ "$f" = "$g" ] && [ $((2 * (z - f) + 32)) -eq "$f" ]' "all-to-all bytes: 1f1b $f, gpipe $g, zb-h1 $z (W repeats B's two exchanges)"

# expert-data groups of 2, ZeRO 1, ep 4, bf16, recompute with a capacity factor: each against its pp 1 run
run d4 --dp 4 --ep 2 --global-batch-size 16
run p-d4 --pp 2 --dp 4 --ep 2 --global-batch-size 16
same p-d4 d4
run z1 --dp 4 --ep 2 --zero 1 --global-batch-size 16
run p-z1 --pp 2 --dp 4 --ep 2 --zero 1 --schedule zb-h1 --global-batch-size 16
same p-z1 z1
run e4 --dp 4 --ep 4 --global-batch-size 16
run p-e4 --pp 2 --dp 4 --ep 4 --schedule gpipe --global-batch-size 16
same p-e4 e4
run bf --dp 2 --ep 2 --dtype bf16
run p-bf --pp 2 --dp 2 --ep 2 --dtype bf16 --schedule zb-h1
same p-bf bf
run rc --dp 2 --ep 2 --recompute full --moe-capacity-factor 0.5
run p-rc --pp 2 --dp 2 --ep 2 --recompute full --moe-capacity-factor 0.5 --schedule zb-h1
same p-rc rc
check '[ "$(grep -c "\"moe_dropped\": [1-9]" "$tmp/p-rc.jsonl")" -gt 0 ]' "capacity 0.5 at pp 2 ep 2: nothing dropped"
run sel --dp 2 --ep 2 --recompute selective
run p-sel --pp 2 --dp 2 --ep 2 --recompute selective --schedule interleaved --virtual-stages 2
same p-sel sel
# stages without MoE blocks (pp 4: the embedding and the head alone on theirs) and dense blocks beside MoE ones
run p4 --pp 4 --dp 2 --ep 2 --schedule 1f1b
same p4 one
run every --dp 2 --ep 2 --layers 4 --moe-every 2
run p-every --pp 2 --dp 2 --ep 2 --layers 4 --moe-every 2 --schedule zb-h1
same p-every every

# checkpoints: saved at pp 2 dp 2 ep 2 at step 10, resumed at pp 2 / pp 1 ep 2 (bitwise) and pp 2 ep 1 (1e-6)
"$CLEAVE" train "${common[@]}" --dp 2 --ep 2 --stop-after 10 --save "$tmp/ck-ref" --save-format single > "$tmp/ck-ref.out" 2>&1
for fmt in single sharded; do
    "$CLEAVE" train "${common[@]}" --pp 2 --dp 2 --ep 2 --stop-after 10 --save "$tmp/ck-$fmt" --save-format $fmt > "$tmp/ck-$fmt.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "save at pp 2 ep 2 ($fmt): $(tail -2 "$tmp/ck-$fmt.out")"
    for a in "--pp 2 --ep 2" "--pp 1 --ep 2" "--pp 2 --ep 1"; do
        n=res-$fmt${a// /}
        run "$n" --dp 2 $a --resume "$tmp/ck-$fmt"
        if [ "$a" = "--pp 2 --ep 1" ]; then near "$n" one 10 11; continue; fi
        check '[ "$(moe_all "$tmp/$n.jsonl" | wc -l)" -eq 10 ] && [ "$(moe_all "$tmp/$n.jsonl")" = "$(moe_all "$tmp/one.jsonl" | tail -n 10)" ]' \
            "pp 2 ep 2 checkpoint ($fmt) resumed at $a: not bitwise the run that never stopped"
    done
done
for f in model optimizer; do
    check 'st_same "$tmp/ck-single/$f.safetensors" "$tmp/ck-ref/$f.safetensors"' "pp 2 ep 2 single-file $f.safetensors differs from pp 1 ep 2's"
done

# MPI: bitwise the threads run
mpi() {
    mpi_or_skip cli_moe_ep_pp
    timeout -k 5 300 mpirun --oversubscribe -np 4 "$CLEAVE" train "${common[@]}" --pp 2 --dp 2 --ep 2 --schedule zb-h1 --comm mpi \
        --log-file "$tmp/mpi.jsonl" > "$tmp/mpi.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "pp 2 dp 2 ep 2 under MPI failed: $(tail -5 "$tmp/mpi.out")"
    same mpi zb-h1
}

# memory: predicted == measured on every rank, each schedule; the planner's peak is cleave memory's
mem=(--model mixtral-tiny --data "$tmp/text.txt" --seq-len 16 --threads 1 --eval-batches 1 --micro-batch-size 2 --global-batch-size 8
     --pp 2 --dp 2 --ep 2)
for s in gpipe 1f1b "interleaved --virtual-stages 2" zb-h1; do
    "$CLEAVE" memory --measure --json "${mem[@]}" --schedule $s > "$tmp/m.json" 2> "$tmp/m.err"
    _rc=$?
    diff=$(python3 - "$tmp/m.json" <<'PY'
import json, sys
bad, n = [], 0
for line in open(sys.argv[1]):
    r = json.loads(line); n += 1
    bad += ["rank %d %s: predicted %d, measured %d" % (r["rank"], k, v, r["measured"][k]) for k, v in r["predicted"].items() if r["measured"][k] != v]
print("; ".join(bad) if n == 4 else "%d ranks" % n)
PY
)
    check '[ $_rc -eq 0 ] && [ -z "$diff" ]' "memory --schedule $s at pp 2 dp 2 ep 2: status $_rc $diff $(head -2 "$tmp/m.err")"
done
CLEAVE_HW="$tmp/this.json" "$CLEAVE" plan calibrate --repeat 1 > "$tmp/cal" 2>&1
for s in 1f1b zb-h1; do
    out=$(CLEAVE_HW="$tmp/this.json" "$CLEAVE" plan --hardware this --model mixtral-tiny --seq-len 16 --devices 4 --dp 2 --pp 2 --ep 2 \
          --micro-batch-size 2 --global-batch-size 8 --schedule $s --zero 0 --recompute none --json 2>&1)
    peak=$(grep -o '"peak_bytes": [0-9]*' <<<"$out" | awk '{print $2}')
    want=$("$CLEAVE" memory "${mem[@]}" --schedule $s --json 2>&1 | grep -o '"total": [0-9]*' | awk '{print $2}' | sort -n | tail -1)
    check '[ -n "$peak" ] && [ "$peak" = "$want" ]' "plan at pp 2 dp 2 ep 2 ($s): peak $peak, cleave memory's $want$(excerpt 2 "$out")"
done
out=$(CLEAVE_HW="$tmp/this.json" "$CLEAVE" plan --hardware this --model mixtral-tiny --seq-len 16 --devices 4 --global-batch-size 8 \
      --top 1000 --json 2>&1)
check 'grep -q "\"pp\": 2, \"cp\": 1, \"cp_comm\": \"[a-z0-9]*\", \"ep\": 2," <<<"$out"' "the search on this machine has no pp 2 ep 2$(excerpt 2 "$out")"
"$CLEAVE" train "${common[@]}" --steps 2 --auto --ranks 4 --pp 2 --ep 2 --log-file "$tmp/auto.jsonl" > "$tmp/auto.out" 2>&1
_rc=$?
check '[ $_rc -eq 0 ] && grep -q "auto: chose --dp 2 --ep 2 --tp 1 --pp 2 " "$tmp/auto.out" && [ "$(grep -c moe_a2a_bytes "$tmp/auto.jsonl")" -eq 2 ]' \
    "--auto --pp 2 --ep 2: status $_rc$(excerpt 3 "$(grep auto: "$tmp/auto.out")")"

mpi
finish cli_moe_ep_pp
