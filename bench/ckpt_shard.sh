#!/usr/bin/env bash
# Sharded against single-file checkpoints (docs/PERFORMANCE.md, "Sharded
# checkpoints"): MODEL (default gpt2, 124M) trained one step at (tp, pp, dp) =
# (2, 2, 2) and saved sharded; then, timed by `cleave convert` (its load and
# save, after every rank's trainer is ready):
#   load sharded + save sharded at (2,2,2), load sharded + save single (the gather) at (2,2,2),
#   load sharded and load single at (2,2,1) with the process's peak RSS
#     (the single file at (2,2,2) needs each of 8 ranks to hold the whole model and both moments);
# and dd (conv=fsync) of the largest shard's bytes and of the single file's.
# usage: bash bench/ckpt_shard.sh [MODEL]        (needs about 12 GiB of host memory for gpt2)
set -eu
model=${1:-gpt2}
CLEAVE=${CLEAVE:-build/cleave}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
head -c 300000 data/kjv.txt > "$d/text.txt"
c=(--model "$model" --data "$d/text.txt" --seq-len 64 --micro-batch-size 1 --global-batch-size 2 --steps 1 --sample-tokens 0
   --eval-batches 1 --tp 2 --pp 2)
"$CLEAVE" train "${c[@]}" --dp 2 --save "$d/s" --save-format sharded > /dev/null
echo "shards (bytes):"; ls -l "$d"/s/rank-* | awk '{ print "  " $5, $9 }' | sed "s|$d/||"
"$CLEAVE" convert "${c[@]}" --dp 2 --from "$d/s" --to "$d/s2" --save-format sharded
"$CLEAVE" convert "${c[@]}" --dp 2 --from "$d/s" --to "$d/f" --save-format single
echo "single file (bytes):"; ls -l "$d"/f/*.safetensors | awk '{ print "  " $5, $9 }' | sed "s|$d/||"
/usr/bin/time -f '  %e s wall, peak RSS %M KiB' "$CLEAVE" convert "${c[@]}" --dp 1 --from "$d/s" --to "$d/x1" --save-format sharded
/usr/bin/time -f '  %e s wall, peak RSS %M KiB' "$CLEAVE" convert "${c[@]}" --dp 1 --from "$d/f" --to "$d/x2" --save-format sharded
big=$(ls -l "$d"/s/rank-* | awk '{ if ($5 > m) m = $5 } END { print m }')
all=$(cat "$d"/f/*.safetensors | wc -c)
echo "dd of the largest shard ($big bytes) and of the single file ($all bytes):"
dd if=/dev/zero of="$d/dd" bs=1M count=$((big / 1048576)) conv=fsync 2>&1 | tail -1
dd if=/dev/zero of="$d/dd" bs=1M count=$((all / 1048576)) conv=fsync 2>&1 | tail -1
