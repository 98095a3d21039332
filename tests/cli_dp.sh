#!/usr/bin/env bash
# Data parallelism end to end: 20 steps of gpt2-tiny with the same global
# batch and micro-batches on dp=1, dp=2 and dp=4 (threads) and dp=2 (MPI,
# when built with it): losses within 1e-6 relative of dp=1, MPI and threads
# bitwise equal; a failing rank ends the run with a message naming it; bad
# meshes exit 2.
set -u
source "$(dirname "$0")/lib.sh"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 8 --steps 20 --sample-tokens 0
        --eval-batches 2 --bucket-size 64KiB)
losses() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
close() { # file_a file_b tol
    paste <(losses "$1") <(losses "$2") | awk -v tol="$3" '
        { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > worst) worst = r }
        END { printf "%d steps, max rel diff %.3g\n", n, worst; exit !(n == 20 && worst <= tol) }'
}
"$CLEAVE" train "${common[@]}" --log-file "$tmp/dp1.jsonl" > "$tmp/dp1.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "dp=1 failed: $(tail -3 "$tmp/dp1.out")"
for n in 2 4; do
    "$CLEAVE" train "${common[@]}" --ranks $n --dp $n --log-file "$tmp/dp$n.jsonl" > "$tmp/dp$n.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "dp=$n failed: $(tail -3 "$tmp/dp$n.out")"
    echo -n "dp=$n vs dp=1: "
    check 'close "$tmp/dp$n.jsonl" "$tmp/dp1.jsonl" 1e-6' "dp=$n losses differ from dp=1"
done
check 'grep -q "ranks: 2 (threads backend)" "$tmp/dp2.out"' "the header does not show the ranks"

if "$CLEAVE" --version | grep -q "mpi: yes" && command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
    timeout -k 5 300 mpirun --oversubscribe -np 2 "$CLEAVE" train "${common[@]}" --comm mpi --log-file "$tmp/mpi2.jsonl" > "$tmp/mpi2.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "dp=2 under MPI failed: $(tail -5 "$tmp/mpi2.out")"
    echo -n "mpi dp=2 vs dp=1: "
    check 'close "$tmp/mpi2.jsonl" "$tmp/dp1.jsonl" 1e-6' "MPI dp=2 losses differ from dp=1"
    check '[ "$(losses "$tmp/mpi2.jsonl")" = "$(losses "$tmp/dp2.jsonl")" ]' "MPI and threads dp=2 losses are not bitwise equal"
    start=$SECONDS
    CLEAVE_FAULT=rank:1:allreduce:1 timeout -k 5 120 mpirun --oversubscribe -np 2 "$CLEAVE" train "${common[@]}" --comm mpi --comm-timeout 20 > "$tmp/mpifault.out" 2>&1
    rc=$?
    check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1" "$tmp/mpifault.out"' "MPI fault: status $rc: $(tail -3 "$tmp/mpifault.out")"
    echo "mpi fault ended the job in $((SECONDS - start)) s with status $rc"
    # a killed rank process: mpirun must end the job, non-zero, naming it
    timeout -k 5 120 mpirun --oversubscribe -np 2 "$CLEAVE" train "${common[@]}" --steps 1000000 --comm mpi --comm-timeout 20 \
        > "$tmp/mpikill.out" 2>&1 &
    job=$!
    victim=""
    for _ in $(seq 100); do
        victim=$(pgrep -f -n "cleave train .*--comm mpi --comm-timeout 20" || true)
        [ -n "$victim" ] && grep -q "^step" "$tmp/mpikill.out" && break
        sleep 0.1
    done
    start=$SECONDS
    [ -n "$victim" ] && kill -9 "$victim"
    wait $job
    rc=$?
    check '[ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qi "signal 9\|killed" "$tmp/mpikill.out"' \
        "killed MPI rank: status $rc: $(tail -5 "$tmp/mpikill.out")"
    echo "killed MPI rank ended the job in $((SECONDS - start)) s with status $rc: $(grep -m1 -i 'signal 9' "$tmp/mpikill.out")"
else
    skip "MPI parts (this build has no MPI)" setup
fi

start=$SECONDS
CLEAVE_FAULT=rank:1:allreduce:1 timeout 120 "$CLEAVE" train "${common[@]}" --ranks 2 --comm-timeout 20 > "$tmp/fault.out" 2>&1
rc=$?
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1" "$tmp/fault.out"' "threads fault: status $rc: $(tail -3 "$tmp/fault.out")"
echo "threads fault ended the run in $((SECONDS - start)) s with status $rc: $(grep -m1 'error' "$tmp/fault.out")"

bad() { # words args...
    local want=$1; shift
    local out rc
    out=$(timeout 60 "$CLEAVE" train "${common[@]}" "$@" 2>&1 >/dev/null); rc=$?
    check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -qi -- "$want"' "bad mesh ($*): status $rc: $out"
}
bad "but the world has 4" --ranks 4 --dp 3
bad "must be positive" --dp 0
bad "must be positive" --ranks -2
bad "must divide the 4 attention heads" --ranks 3 --tp 3
bad "not a multiple\|must be a multiple" --ranks 4 --dp 4 --global-batch-size 6
finish cli_dp
