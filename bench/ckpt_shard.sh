#!/usr/bin/env bash
# Sharded against single-file checkpoints (docs/PERFORMANCE.md, "Sharded
# checkpoints"): MODEL (default gpt2, 124M) trained one step at (tp, pp, dp) =
# (2, 2, 2) and saved sharded; then, timed by `cleave convert` (its load and
# save, after every rank's trainer is ready):
#   load sharded + save sharded at (2,2,2), load sharded + save single (the gather) at (2,2,2),
#   load sharded and load single at the LOAD layout (default (2,2,1): --dp 1) with the process's peak RSS
#     (the single file at (2,2,2) needs each of 8 ranks to hold the whole model and both moments);
# and dd (conv=fsync) of the largest shard's bytes and of the single file's.
# Bytes per rank: each shard's size (every rank writes its own at once) and the single file's (rank 0 alone).
# A step whose host memory (estimated from the model's size) is not available is skipped, said so.
# usage: bash bench/ckpt_shard.sh [MODEL]        (needs about 12 GiB of host memory for gpt2)
#        LOAD="--tp 1 --pp 1 --dp 1" ZERO=1 bash bench/ckpt_shard.sh gpt2-medium   (the issue's figures)
set -eu
model=${1:-gpt2}
load=${LOAD:---dp 1}
zero=${ZERO:-0}
CLEAVE=${CLEAVE:-build/cleave}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
head -c 300000 data/kjv.txt > "$d/text.txt"
c=(--model "$model" --data "$d/text.txt" --seq-len 64 --micro-batch-size 1 --global-batch-size 2 --steps 1 --sample-tokens 0
   --eval-batches 1 --tp 2 --pp 2 --zero "$zero")
avail() { awk '/MemAvailable/ { print int($2 / 1048576) }' /proc/meminfo; } # GiB
fits() { # GiB what: whether GiB are available now, else a line saying the step is skipped
    local a; a=$(avail)
    if [ "$a" -ge "$1" ]; then return 0; fi
    echo "skipped: $2 (needs about $1 GiB of host memory, $a GiB available)"; return 1
}
"$CLEAVE" train "${c[@]}" --dp 2 --save "$d/s" --save-format sharded > /dev/null
echo "shards (bytes, one file per rank that holds data):"; ls -l "$d"/s/rank-* | awk '{ print "  " $5, $9 }' | sed "s|$d/||"
all=$(cat "$d"/s/rank-* | wc -c) # the model and both moments, bytes
gib() { awk -v a="$all" -v k="$1" 'BEGIN { printf "%d", a * k / 2^30 + 1 }'; } # k x the checkpoint, GiB
"$CLEAVE" convert "${c[@]}" --dp 2 --from "$d/s" --to "$d/s2" --save-format sharded
# the run (two replicas of the model, gradients and moments: about 2.5 checkpoints) and rank 0's gather (1)
if fits "$(gib 3.5)" "the single-file save at (2,2,2)"; then
    "$CLEAVE" convert "${c[@]}" --dp 2 --from "$d/s" --to "$d/f" --save-format single
    echo "single file (bytes, rank 0 alone):"; ls -l "$d"/f/*.safetensors | awk '{ print "  " $5, $9 }' | sed "s|$d/||"
fi
rm -rf "$d/s2"
# shellcheck disable=SC2086
/usr/bin/time -f '  %e s wall, peak RSS %M KiB' "$CLEAVE" convert "${c[@]}" $load --from "$d/s" --to "$d/x1" --save-format sharded
rm -rf "$d/x1"
nload=$(for k in tp pp dp; do echo "$load" | grep -o -- "--$k [0-9]*" || echo "--$k 2"; done | awk '{ n = (n ? n : 1) * $2 } END { print n }')
# the run (about 1.5 checkpoints at dp 1) and every rank's whole copy (1) and file buffer (up to 2/3)
if [ -d "$d/f" ] && fits "$(gib "$(awk -v n="$nload" 'BEGIN { print 1.5 + n * 1.7 }')")" "the single-file load at ($load)"; then
    # shellcheck disable=SC2086
    /usr/bin/time -f '  %e s wall, peak RSS %M KiB' "$CLEAVE" convert "${c[@]}" $load --from "$d/f" --to "$d/x2" --save-format sharded
    rm -rf "$d/x2"
fi
big=$(ls -l "$d"/s/rank-* | awk '{ if ($5 > m) m = $5 } END { print m }')
[ -d "$d/f" ] && all=$(cat "$d"/f/*.safetensors | wc -c)
echo "dd of the largest shard ($big bytes) and of the single file ($all bytes):"
dd if=/dev/zero of="$d/dd" bs=1M count=$((big / 1048576)) conv=fsync 2>&1 | tail -1
dd if=/dev/zero of="$d/dd" bs=1M count=$((all / 1048576)) conv=fsync 2>&1 | tail -1
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
