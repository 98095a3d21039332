#!/usr/bin/env bash
# The mpi backend under mpirun: the collective, point-to-point, split and
# progress checks of test_comm for 1..8 processes; the same result bits as
# the threads backend (a hash of every result, from both); a rank failed by
# CLEAVE_FAULT, a receive that times out and a process killed with -9 each
# end the whole job with a non-zero status, quickly.
#
# Why a script: mpirun starts the processes. A skip only when the build has
# no MPI (a failure under CI=true, where the set-up installed OpenMPI); a
# build with MPI but no mpirun fails. Ends with "cli_comm_mpi: P passed, F
# failed, S skipped", each "ok:" line a passed case, each failure a failed one.
#
# Under sanitizer builds OpenMPI's own allocations show up as leaks at exit,
# so leak detection is off for these MPI runs only (the threads tests keep
# it).
set -u
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.."
bin=$BUILD/tests/test_comm
[ -x "$bin" ] || { echo "FAIL: $bin is missing (run make)"; exit 1; }
has=$("$bin" --has-mpi)
if [ "$has" != "MPI: yes" ]; then
    if [ "${CI:-}" = true ]; then echo "FAILED: this build has no MPI ($has), though the set-up installs it (CI=true)"; echo "cli_comm_mpi: 0 passed, 1 failed, 0 skipped"; exit 1; fi
    echo "SKIP: this build has no MPI ($has)"
    echo "cli_comm_mpi: 0 passed, 0 failed, 1 skipped"
    exit 0
fi
command -v mpirun >/dev/null 2>&1 || { echo "FAIL: the build has MPI but mpirun is not installed"; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cli_comm_mpi.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
oks=0
ok() { echo "ok: $*"; oks=$((oks + 1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
less() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# ---- checks and bitwise equality with the threads backend ----
for n in 1 2 3 4 5 6 7 8; do
    log=$tmp/mpi_$n.log
    if ! timeout -k 5 180 mpirun --oversubscribe -np "$n" "$bin" --mpi --hash "$tmp/mpi_$n.hash" >"$log" 2>&1; then
        fail "mpirun -np $n test_comm --mpi"
        tail -n 20 "$log"
        continue
    fi
    ok=$(grep -c 'test_comm --mpi: [0-9]* checks; [0-9]* passed, 0 failed' "$log")
    [ "$ok" -eq "$n" ] || { fail "-np $n: $ok of $n ranks reported no failed checks"; tail -n 20 "$log"; }
    "$bin" --threads-hash "$n" "$tmp/threads_$n.hash" >"$tmp/threads_$n.log" 2>&1 ||
        { fail "test_comm --threads-hash $n"; tail -n 20 "$tmp/threads_$n.log"; continue; }
    if cmp -s "$tmp/mpi_$n.hash" "$tmp/threads_$n.hash"; then
        ok "$n ranks: mpi and threads results hash $(cat "$tmp/mpi_$n.hash")"
    else
        fail "$n ranks: mpi results hash $(cat "$tmp/mpi_$n.hash"), threads $(cat "$tmp/threads_$n.hash")"
    fi
done

# ---- an injected fault aborts the job ----
t0=$(now)
CLEAVE_FAULT=rank:1:op:3 timeout -k 5 60 mpirun --oversubscribe -x CLEAVE_FAULT -np 4 "$bin" --mpi --fault >"$tmp/fault.log" 2>&1
rc=$?
dt=$(since "$t0")
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "CLEAVE_FAULT: mpirun exited $rc (want non-zero, before the 60 s limit)"
grep -q 'cleave: rank 1 failed in allreduce: injected fault (CLEAVE_FAULT=rank:1:op:3)' "$tmp/fault.log" ||
    { fail "CLEAVE_FAULT: no message naming rank 1"; tail -n 20 "$tmp/fault.log"; }
less "$dt" 30 || fail "CLEAVE_FAULT: the job took $dt s to end"
ok "injected fault ended the job with status $rc in $dt s"

# ---- a piece of another size than the counts say fails with both sizes, not an overrun ----
timeout -k 5 120 mpirun --oversubscribe -np 3 "$bin" --mpi --counts-mismatch > "$tmp/mismatch.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "sent a piece of 44000 bytes where 40000 were expected" "$tmp/mismatch.log"; then
    ok "allgather_v with a larger count on one rank ended the job with status 2, naming both sizes"
else
    fail "allgather_v counts mismatch: status $rc: $(tail -n 3 "$tmp/mismatch.log")"
fi
timeout -k 5 120 mpirun --oversubscribe -np 3 "$bin" --mpi --a2a-mismatch > "$tmp/a2a_mismatch.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "alltoallv: rank 0 sent a piece of 44000 bytes where 40000 were expected" "$tmp/a2a_mismatch.log"; then
    ok "alltoallv sending more than the receiver expects ended the job with status 2, naming both sizes"
else
    fail "alltoallv counts mismatch: status $rc: $(tail -n 3 "$tmp/a2a_mismatch.log")"
fi

# ---- a receive nothing matches times out and aborts ----
t0=$(now)
timeout -k 5 60 mpirun --oversubscribe -np 2 "$bin" --mpi --recv-timeout >"$tmp/timeout.log" 2>&1
rc=$?
dt=$(since "$t0")
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "recv timeout: mpirun exited $rc"
grep -q 'rank 1: timed out after 1.0 s in recv from rank 0 (tag 7)' "$tmp/timeout.log" ||
    { fail "recv timeout: no message naming the peer and the operation"; tail -n 20 "$tmp/timeout.log"; }
less "$dt" 30 || fail "recv timeout: the job took $dt s to end"
ok "recv timeout ended the job with status $rc in $dt s"

# ---- a killed process ends the job ----
timeout -k 5 120 mpirun --oversubscribe -np 4 "$bin" --mpi --hang "$tmp/pid" >"$tmp/kill.log" 2>&1 &
job=$!
for _ in $(seq 300); do
    [ -s "$tmp/pid" ] && break
    sleep 0.1
done
if [ -s "$tmp/pid" ]; then
    pid=$(cat "$tmp/pid")
    t0=$(now)
    kill -9 "$pid"
    wait "$job"
    rc=$?
    dt=$(since "$t0")
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "kill -9: mpirun exited $rc"
    less "$dt" 30 || fail "kill -9: the job took $dt s to end"
    ok "kill -9 of rank 1 (pid $pid) ended the job with status $rc in $dt s"
else
    fail "kill -9: rank 1 never wrote its pid"
    kill "$job" 2>/dev/null
    wait "$job"
    tail -n 20 "$tmp/kill.log"
fi

echo "cli_comm_mpi: $oks passed, $failures failed, 0 skipped"
[ "$failures" -eq 0 ]
