#!/usr/bin/env bash
# `cleave train --auto --comm mpi`: world rank 0 plans for the world's size
# and broadcasts its choice, which every rank applies as the threads path
# does (cli/auto.c):
# - under mpirun -np 2 it prints the same choice as the threads run
#   `--auto --ranks 2` on the same description, once, and trains loss for
#   loss and grad norm for grad norm bitwise the same (a fast link: data
#   parallelism with ZeRO; a slow one: a pipeline);
# - a dimension given (--pp 2) is fixed under MPI too;
# - ranks whose hosts describe the machine differently (CLEAVE_HW per rank,
#   mpirun's MPMD syntax) still run rank 0's choice, and agree;
# - a cap nothing fits ends every rank with exit 2 and one error line (rank
#   0's message, printed once), no abort and no step.
# A skip when the build has no MPI or mpirun is missing (a failure under
# CI=true, where the set-up installed OpenMPI).
set -u
source "$(dirname "$0")/lib.sh"
mpi_or_skip cli_auto_mpi
head -c 200000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --seq-len 32 --steps 4 --sample-tokens 0 --eval-batches 2 --threads 1)
desc() { # BANDWIDTH: a description of this machine's two devices (as tests/cli_auto.sh's)
    printf '{"name": "handmade", "peak_flops": {"fp32": 1e11}, "gemm": {"max_efficiency": 0.5, "half_dim": 64},
      "memory_bandwidth": 1e10, "device_memory": 4e9, "devices_per_node": 2, "intra_node": {"bandwidth": %s, "latency": 1e-5},
      "inter_node": {"bandwidth": %s, "latency": 1e-5}, "exact_memory": true}\n' "$1" "$1"
}
desc 1e12 > "$tmp/fast.json"; desc 1e3 > "$tmp/slow.json"
mpi() { timeout -k 5 120 mpirun --oversubscribe "$@"; }
chose() { grep '^auto: chose ' "$1"; }
fields() { grep -o '"\(loss\|grad_norm\)": [^,]*' "$1"; }

# the same choice as the threads run, printed once, and the same bits
for link in fast slow; do
    want=$([ $link = fast ] && echo "--dp 2 --tp 1 --pp 1 " || echo "--dp 1 --tp 1 --pp 2 ")
    CLEAVE_HW="$tmp/$link.json" $CLEAVE train --auto --ranks 2 "${common[@]}" --log-file "$tmp/thr_$link.log" > "$tmp/thr_$link.out" 2>&1
    rt=$?
    CLEAVE_HW="$tmp/$link.json" mpi -np 2 "$CLEAVE" train --auto --comm mpi "${common[@]}" --log-file "$tmp/mpi_$link.log" \
        > "$tmp/mpi_$link.out" 2>&1
    rm=$?
    check '[ $rt -eq 0 ] && [ $rm -eq 0 ] && [ "$(chose "$tmp/mpi_$link.out" | grep -c "")" -eq 1 ] &&
           [ "$(chose "$tmp/mpi_$link.out")" = "$(chose "$tmp/thr_$link.out")" ] && chose "$tmp/mpi_$link.out" | grep -q -- "$want" &&
           grep -q "ranks: 2 (mpi backend)" "$tmp/mpi_$link.out"' \
        "$link link: threads rc $rt, mpi rc $rm, want one identical choice ($want...)$(excerpt 3 "$(chose "$tmp/thr_$link.out")")$(excerpt 12 "$(cat "$tmp/mpi_$link.out")")"
    check '[ "$(fields "$tmp/thr_$link.log" | grep -c "")" -eq 8 ] && [ "$(fields "$tmp/thr_$link.log")" = "$(fields "$tmp/mpi_$link.log")" ]' \
        "$link link: mpi and threads losses differ$(excerpt 8 "$(paste <(fields "$tmp/thr_$link.log") <(fields "$tmp/mpi_$link.log"))")"
done

# a dimension given is fixed (the fast link alone would choose --dp 2)
out=$(CLEAVE_HW="$tmp/fast.json" mpi -np 2 "$CLEAVE" train --auto --comm mpi --pp 2 --micro-batch-size 2 --global-batch-size 8 \
    "${common[@]}" --steps 2 2>&1); rc=$?
check '[ $rc -eq 0 ] && printf "%s" "$out" | grep -q "^auto: chose --dp 1 --tp 1 --pp 2 --micro-batch-size 2 " &&
       printf "%s" "$out" | grep -q "mesh dp 1 x tp 1 x pp 2" && printf "%s" "$out" | grep -q "step *2/2"' \
    "--auto --comm mpi --pp 2 --micro-batch-size 2 (rc $rc)$(excerpt 12 "$out")"

# hosts that describe the machine differently: rank 0's choice (fast: --dp 2) is every rank's
out=$(mpi -np 1 env CLEAVE_HW="$tmp/fast.json" "$CLEAVE" train --auto --comm mpi "${common[@]}" --steps 2 : \
    -np 1 env CLEAVE_HW="$tmp/slow.json" "$CLEAVE" train --auto --comm mpi "${common[@]}" --steps 2 2>&1); rc=$?
check '[ $rc -eq 0 ] && [ "$(printf "%s\n" "$out" | grep -c "^auto: chose --dp 2 --tp 1 --pp 1 ")" -eq 1 ] &&
       printf "%s" "$out" | grep -q "mesh dp 2 x tp 1 x pp 1" && printf "%s" "$out" | grep -q "step *2/2"' \
    "rank 0 on the fast description, rank 1 on the slow one (rc $rc)$(excerpt 12 "$out")"

# nothing fits: every rank exits 2, one line (rank 0's), no abort, no step
out=$(CLEAVE_HW="$tmp/fast.json" mpi -np 2 "$CLEAVE" train --auto --comm mpi "${common[@]}" --device-memory 512KiB 2>&1); rc=$?
check '[ $rc -eq 2 ] && [ "$(printf "%s\n" "$out" | grep -c "^cleave")" -eq 1 ] &&
       printf "%s" "$out" | grep -q "^cleave: error: --auto: no configuration of 2 ranks fits 512.0 KiB per rank: the smallest shortfall is .* over (--dp" &&
       ! printf "%s" "$out" | grep -q "MPI_ABORT\|^step\|^auto: chose\|AddressSanitizer"' \
    "--auto --comm mpi under 512 KiB: status $rc, want 2 and one line$(excerpt 12 "$out")"
finish cli_auto_mpi
