#!/usr/bin/env bash
# cleave train --tensorboard DIR: the event file's name; every record's two
# CRCs and every scalar checked against the run's JSON log by a reader
# written from the format's description (tests/tfevents_read.py, standard
# library only); a flipped byte found by that reader; a --pp 2 run's
# per-rank memory series (equal to cleave memory's prediction) and its
# measured bubble, mean, worst and per rank; the run itself unchanged by the
# flag; a run killed mid-way leaves every logged step's event whole; a write
# that fails ends the run with one line; a bad DIR is refused before step 1;
# under MPI the same (a skip without MPI).
source tests/lib.sh
PY=/usr/bin/python3 # stdlib only; the system one starts fastest
[ -x "$PY" ] || PY=python3
READ=(tests/tfevents_read.py)
head -c 200000 data/kjv.txt > "$tmp/text.txt"
R=(train --data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --sample-tokens 0 --eval-batches 2)

out=$("$PY" "${READ[@]}" selftest 2>&1)
_rc=$?; check '[ $_rc -eq 0 ]' "the reader's CRC32C check value: $out"

# one rank: a directory made with its parents, one file named as TensorBoard's writers name theirs
"$CLEAVE" "${R[@]}" --steps 5 --eval-every 2 --tensorboard "$tmp/tb1/run" --log-file "$tmp/one.jsonl" > "$tmp/one.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "training with --tensorboard failed: status $_rc$(excerpt 5 "$(tail -5 "$tmp/one.out")")"
files=$(ls -A "$tmp/tb1/run")
check '[ "$(printf "%s\n" "$files" | wc -l)" -eq 1 ] && printf "%s" "$files" | grep -Eq "^events\.out\.tfevents\.[0-9]{10}\.$(hostname)$"' \
    "--tensorboard DIR should hold one events.out.tfevents.<time>.$(hostname): $files"
ev1="$tmp/tb1/run/$(printf "%s" "$files" | head -1)"
out=$("$PY" "${READ[@]}" check "$ev1" --log "$tmp/one.jsonl" --ranks 1 2>&1)
_rc=$?; check '[ $_rc -eq 0 ]' "one rank: the events disagree with the log$(excerpt 8 "$out")"
out=$("$PY" "${READ[@]}" dump "$ev1" 2>&1)
for tag in loss/train loss/validation optimizer/lr optimizer/grad_norm throughput/tokens_per_s memory/rank0/activations memory/rank0/total; do
    check 'printf "%s\n" "$out" | grep -q "^[0-9]* $tag "' "one rank: no series $tag$(excerpt 4 "$out")"
done
check '! printf "%s\n" "$out" | grep -q " bubble/"' "one rank: a bubble series without a pipeline"

# a flipped byte is found: in a record's data, in a length, in a stored CRC
for at in mid len crc; do
    "$PY" - "$ev1" "$tmp/flip.$at" "$at" << 'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
first = 16 + struct.unpack("<Q", b[:8])[0]           # the second record starts here
n2 = struct.unpack("<Q", b[first:first + 8])[0]
at = {"mid": first + 12 + n2 // 2, "len": first + 1, "crc": first + 12 + n2 + 2}[sys.argv[3]]
b[at] ^= 0x20
open(sys.argv[2], "wb").write(b)
PY
    out=$("$PY" "${READ[@]}" check "$tmp/flip.$at" --log "$tmp/one.jsonl" 2>&1)
    _rc=$?; check '[ $_rc -eq 1 ] && printf "%s" "$out" | grep -q "crc mismatch"' "a byte flipped ($at) went unnoticed: status $_rc$(excerpt 3 "$out")"
done

# the run is the same with and without the flag: losses and each group's traffic
"$CLEAVE" "${R[@]}" --steps 5 --eval-every 2 --log-file "$tmp/plain.jsonl" > /dev/null 2>&1
same() { "$PY" -c '
import json, sys
strip = lambda p: [{k: v for k, v in json.loads(l).items() if k in ("step", "loss", "val_loss", "grad_norm", "comm")} for l in open(p)]
sys.exit(strip(sys.argv[1]) != strip(sys.argv[2]))' "$1" "$2"; }
same "$tmp/one.jsonl" "$tmp/plain.jsonl"
_rc=$?; check '[ $_rc -eq 0 ]' "--tensorboard changed the run's losses or traffic"

# a pipeline of two ranks: each rank's memory series, the measured bubble
P=("${R[@]}" --pp 2 --global-batch-size 4)
"$CLEAVE" "${P[@]}" --steps 4 --eval-every 2 --tensorboard "$tmp/tb2" --log-file "$tmp/pp.jsonl" > "$tmp/pp.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "--pp 2 with --tensorboard failed: status $_rc$(excerpt 5 "$(tail -5 "$tmp/pp.out")")"
"$CLEAVE" memory "${P[@]:1}" --json > "$tmp/pp-mem.jsonl" 2>&1
ev2=$(ls "$tmp"/tb2/events.out.tfevents.* | head -1)
out=$("$PY" "${READ[@]}" check "$ev2" --log "$tmp/pp.jsonl" --ranks 2 --memory "$tmp/pp-mem.jsonl" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ]' "--pp 2: the events disagree with the log or the memory prediction$(excerpt 8 "$out")"
out=$("$PY" "${READ[@]}" dump "$ev2" 2>&1)
for tag in bubble/mean bubble/worst_rank bubble/simulated bubble/rank0 bubble/rank1 memory/rank1/params memory/rank1/activations; do
    check 'printf "%s\n" "$out" | grep -q "^4 $tag "' "--pp 2: no series $tag at step 4$(excerpt 4 "$out")"
done
check '[ "$(printf "%s\n" "$out" | awk "\$1 == 4 && \$2 == \"memory/rank0/params\" {print \$3}")" != "$(printf "%s\n" "$out" | awk "\$1 == 4 && \$2 == \"memory/rank1/params\" {print \$3}")" ]' \
    "--pp 2: the two stages' parameter bytes should differ"

# killed mid-run: every step the log has is in the event file whole (at most a record cut short after them)
"$CLEAVE" "${R[@]}" --steps 100000 --log-every 100000 --tensorboard "$tmp/tb3" --log-file "$tmp/kill.jsonl" > /dev/null 2>&1 &
pid=$!
for _ in $(seq 600); do
    [ -f "$tmp/kill.jsonl" ] && [ "$(wc -l < "$tmp/kill.jsonl")" -ge 20 ] && break
    sleep 0.1
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
ev3=$(ls "$tmp"/tb3/events.out.tfevents.* 2>/dev/null | head -1)
out=$("$PY" "${READ[@]}" check "$ev3" --log "$tmp/kill.jsonl" --allow-truncated-tail 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && [ "$(wc -l < "$tmp/kill.jsonl")" -ge 20 ]' "killed run: the logged steps are not all in the events$(excerpt 5 "$out")"

# a write that fails (a file-size limit stands in for a full disk): one line naming the file and the step, status 2
out=$(ulimit -f 2; "$CLEAVE" "${R[@]}" --steps 50 --tensorboard "$tmp/tb4" 2>&1 >/dev/null)
_rc=$?
check '[ $_rc -eq 2 ] && [ "$(printf "%s\n" "$out" | wc -l)" -eq 1 ] && printf "%s" "$out" | grep -q "^cleave: error: --tensorboard: .*events.out.tfevents.*: writing step [0-9]* failed: File too large$"' \
    "a failed write: status $_rc$(excerpt 3 "$out")"

# bad --tensorboard: status 2, one line, before step 1
: > "$tmp/afile"
while IFS='|' read -r what dir; do
    out=$("$CLEAVE" "${R[@]}" --steps 2 --tensorboard "$dir" 2>&1)
    _rc=$?
    check '[ $_rc -eq 2 ] && [ "$(printf "%s\n" "$out" | wc -l)" -eq 1 ] && printf "%s" "$out" | grep -q "^cleave: error: --tensorboard" && ! printf "%s" "$out" | grep -q "^step"' \
        "$what: status $_rc$(excerpt 3 "$out")"
done << ROWS
a file|$tmp/afile
under a file|$tmp/afile/sub
an empty path|
ROWS

# under MPI (a process per rank): one file all the same, rank 1's series through the world's all-reduce
mpi_or_skip cli_tensorboard
out=$(timeout -k 5 180 mpirun --oversubscribe -np 2 "$CLEAVE" "${P[@]}" --comm mpi --steps 3 --eval-every 3 --tensorboard "$tmp/tb5" \
      --log-file "$tmp/mpi.jsonl" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && [ "$(ls "$tmp/tb5" | wc -l)" -eq 1 ]' "under MPI: status $_rc, files $(ls "$tmp/tb5" 2>&1)$(excerpt 5 "$out")"
ev5=$(ls "$tmp"/tb5/events.out.tfevents.* 2>/dev/null | head -1)
out=$("$PY" "${READ[@]}" check "$ev5" --log "$tmp/mpi.jsonl" --ranks 2 --memory "$tmp/pp-mem.jsonl" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ]' "under MPI: the events disagree with the log or the memory prediction$(excerpt 8 "$out")"
finish cli_tensorboard
