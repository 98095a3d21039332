#!/usr/bin/env bash
# ZeRO 2 and 3 with expert parallelism (issue 33 item 2), on mixtral-tiny, 20 steps of the King James Bible,
# --threads 1. The shards are the expert-data group's (dp / ep ranks: each expert's over the ranks holding it, the
# replicated parameters' once per ep rank, as ZeRO 1's moments); a replicated run of a bucket is reduce-scattered
# over dp in ep-th pieces of those shards and gathered over the ep group (src/parallel/dp.c, launch_runs):
# - ZeRO 2 and 3 at dp 2 ep 2, dp 4 ep 2 and dp 4 ep 4 within 1e-6 relative of ep 1 at the same dp and stage (loss,
#   grad norm and aux loss at every step); at dp 4 ep 2 (an expert-data group of 2) ZeRO 2 and 3 bitwise ZeRO 1 with
#   one micro-batch a replica (ZeRO 2 also at --bucket-size 1, ZeRO 3 at --zero3-prefetch 0 and 3), and with two
#   (accumulation) within 1e-6 of ep 1, ZeRO 3 bitwise ZeRO 2;
# - --dtype bf16 (ZeRO 3 gathers the GEMM weights as BF16) and --grad-reduce-dtype bf16: ZeRO 2 and 3 bitwise ZeRO 1
#   at dp 4 ep 2;
# - checkpoints of dp 4 ep 2 ZeRO 2 and 3 (sharded, and ZeRO 3 single file) stopped after 4 of 8 steps: resumed at
#   the same layout bitwise an uninterrupted run; at ep 1 (ZeRO 0) and ep 4 (the same stage) within 1e-6 of an
#   uninterrupted dp 4 ep 1 run;
# - MPI (when built with it): dp 4 ep 2 ZeRO 2 and ZeRO 3 bitwise the threads runs.
# - the planner (fp32: the trainer's statement) prices dp 4 ep 2 ZeRO 2 and 3 at cleave memory's peak.
# (The memory predictor against the measured bytes at dp 4 ep 2 ZeRO 2 and 3, fp32 and bf16: tests/cli_memory.sh.)
set -u
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/moe_lib.sh"

# same A B: A's figures bitwise B's, 20 steps
same() {
    local a=$1 b=$2
    check '[ "$(figures "$tmp/$a.jsonl" | wc -l)" -eq 20 ] && [ "$(figures "$tmp/$a.jsonl")" = "$(figures "$tmp/$b.jsonl")" ]' \
        "$a not bitwise $b: $(paste <(figures "$tmp/$a.jsonl") <(figures "$tmp/$b.jsonl") | head -2)"
}

for z in 2 3; do
    run "d2z$z" --dp 2 --zero $z
    run "d2e2z$z" --dp 2 --ep 2 --zero $z
    compare "d2e2z$z" "d2z$z" 20
    run "d4z$z" --dp 4 --zero $z
    for e in 2 4; do
        run "d4e${e}z$z" --dp 4 --ep $e --zero $z
        compare "d4e${e}z$z" "d4z$z" 20
    done
done
run d4e2z1 --dp 4 --ep 2 --zero 1
same d4e2z2 d4e2z1
same d4e2z3 d4e2z1
# one unit a bucket (ZeRO 2: many runs a step); ZeRO 3 with no prefetch and with 3 units ahead
run bs1 --dp 4 --ep 2 --zero 2 --bucket-size 1
same bs1 d4e2z1
for p in 0 3; do
    run "pf$p" --dp 4 --ep 2 --zero 3 --zero3-prefetch $p
    same "pf$p" d4e2z1
done
# two micro-batches a replica: each one's buckets reduce-scattered into the shards (the replicas summed first)
run acc --dp 4 --zero 2 --micro-batch-size 1
run acce2z2 --dp 4 --ep 2 --zero 2 --micro-batch-size 1
compare acce2z2 acc 20
run acce2z3 --dp 4 --ep 2 --zero 3 --micro-batch-size 1
same acce2z3 acce2z2
for f in "--dtype bf16" "--grad-reduce-dtype bf16"; do
    n=${f#--}; n=${n%% *}
    for z in 1 2 3; do run "$n$z" --dp 4 --ep 2 --zero $z $f; done
    same "${n}2" "${n}1"
    same "${n}3" "${n}1"
done

# checkpoints: stopped after 4 of 8 steps, resumed at the same layout (bitwise) and at ep 1 and ep 4 (within 1e-6)
run full8d4 --dp 4 --steps 8
for ck in "2 sharded" "3 sharded" "3 single"; do
    set -- $ck
    z=$1 fmt=$2
    run "full8z$z" --dp 4 --ep 2 --zero $z --steps 8
    "$CLEAVE" train "${common[@]}" --dp 4 --ep 2 --zero $z --steps 8 --stop-after 4 --save "$tmp/ck-$z-$fmt" --save-format $fmt \
        > "$tmp/ck.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "save at dp 4 ep 2 ZeRO $z ($fmt): $(tail -2 "$tmp/ck.out")"
    run "res-$z-$fmt" --dp 4 --ep 2 --zero $z --steps 8 --resume "$tmp/ck-$z-$fmt"
    check '[ "$(figures "$tmp/res-$z-$fmt.jsonl" | wc -l)" -eq 4 ] && [ "$(figures "$tmp/res-$z-$fmt.jsonl")" = "$(figures "$tmp/full8z$z.jsonl" | tail -4)" ]' \
        "dp 4 ep 2 ZeRO $z ($fmt) resumed not bitwise: $(paste <(figures "$tmp/res-$z-$fmt.jsonl") <(figures "$tmp/full8z$z.jsonl" | tail -4) | head -2)"
    for a in "--ep 1" "--ep 4 --zero $z"; do
        n=res-$z-$fmt${a// /}
        run "$n" --dp 4 $a --steps 8 --resume "$tmp/ck-$z-$fmt"
        res=$(close "$tmp/$n.jsonl" "$tmp/full8d4.jsonl" 5); _rc=$?
        echo "dp 4 ep 2 ZeRO $z ($fmt) checkpoint resumed at $a: $res"
        check '[ $_rc -eq 0 ] && [ "$(figures "$tmp/$n.jsonl" | wc -l)" -eq 4 ]' "ZeRO $z ($fmt) checkpoint resumed at $a: $res"
    done
done

# the planner considers what the trainer accepts: its peak cleave memory's
for z in 2 3; do
    a=(--model mixtral-tiny --seq-len 16 --dp 4 --ep 2 --micro-batch-size 2 --global-batch-size 8 --zero $z)
    pj=$("$CLEAVE" plan "${a[@]}" --devices 4 --hardware a100 --precision fp32 --recompute none --json 2>&1)
    peak=$(printf '%s' "$pj" | grep -o '"peak_bytes": [0-9]*' | awk '{print $2}')
    mem=$("$CLEAVE" memory "${a[@]}" --json 2>&1 | grep -o '"total": [0-9]*' | awk '{print $2}' | sort -n | tail -1)
    echo "plan at dp 4 ep 2 ZeRO $z: peak $peak bytes, cleave memory $mem"
    check '[ -n "$peak" ] && [ "$peak" = "$mem" ]' "plan at dp 4 ep 2 ZeRO $z: peak $peak, cleave memory $mem$(excerpt 2 "$pj")"
done

# MPI: dp 4 ep 2 ZeRO 2 and 3 bitwise the threads runs
if "$CLEAVE" --version | grep -q "mpi: yes" && command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
    for z in 2 3; do
        timeout -k 5 300 mpirun --oversubscribe -np 4 "$CLEAVE" train "${common[@]}" --dp 4 --ep 2 --zero $z --comm mpi \
            --log-file "$tmp/mpiz$z.jsonl" > "$tmp/mpiz$z.out" 2>&1
        _rc=$?; check '[ $_rc -eq 0 ]' "dp 4 ep 2 ZeRO $z under MPI failed: $(tail -5 "$tmp/mpiz$z.out")"
        same "mpiz$z" "d4e2z$z"
    done
else
    skip "MPI parts (this build has no MPI)" setup
fi
finish cli_moe_ep_zero
