#!/usr/bin/env bash
# What verifying a checkpoint's content hashes costs of its load (docs/PERFORMANCE.md, "Checkpoint
# integrity"): MODEL (default gpt2-medium) trained one step on one rank and saved in both formats; then
# each loaded by `cleave convert` (to a sharded copy at the same layout) with CLEAVE_VERIFY_TIME=1, which
# prints the load's wall time and, of it, the time spent verifying (hashing the tensors or boxes, the
# small files, the shard headers' run id and step); and the same load with CLEAVE_CKPT_VERIFY=0 (no
# checks) for comparison.
# usage: bash bench/ckpt_verify.sh [MODEL]      (gpt2-medium: about 12 GiB of host memory, 5 GiB of disk)
#        FORMATS=sh ...                          the sharded format only (one: the single file, slow to load)
#        CLEAVE2=OTHER/cleave ...                also load with another build, alternating (the same checkpoints)
set -eu
model=${1:-gpt2-medium}
CLEAVE=${CLEAVE:-build/cleave}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores," \
     "$(grep -o 'avx512[a-z_]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
head -c 300000 data/kjv.txt > "$d/text.txt"
c=(--model "$model" --data "$d/text.txt" --seq-len 16 --micro-batch-size 1 --global-batch-size 1 --steps 1 --sample-tokens 0
   --eval-batches 1)
"$CLEAVE" train "${c[@]}" --save "$d/one" > /dev/null
"$CLEAVE" convert "${c[@]}" --from "$d/one" --to "$d/sh" --save-format sharded > /dev/null 2>&1
# The "of which verification" figure counts only the post-pass (hashing done inside reads would not show
# there); the cost is the load's time with checks less its time without, the two
# alternating ROUNDS times (default 3) so that a change in the machine's load hits both alike.
for f in ${FORMATS:-one sh}; do
    echo "$f ($(du -sb "$d/$f" | cut -f1) bytes):"
    for i in $(seq "${ROUNDS:-3}"); do
        for bin in "$CLEAVE" ${CLEAVE2:-}; do
            for v in 1 0; do
                CLEAVE_CKPT_VERIFY=$v CLEAVE_VERIFY_TIME=1 "$bin" convert "${c[@]}" --from "$d/$f" --to "$d/x" \
                    --save-format sharded 2>&1 | grep 'checkpoint load' | sed "s|^|  $bin verify=$v: |"
                rm -rf "$d/x"
            done
        done
    done | tee "$d/times"
    # the median over the rounds of each binary's (with - without) / without
    for bin in "$CLEAVE" ${CLEAVE2:-}; do
        grep -F "  $bin verify=" "$d/times" | sed -E 's/.*verify=([01]): .*load: (rank [0-9]+: )?([0-9.]+) s.*/\1 \3/' |
            awk -v b="$bin" '$1 == 1 { w = $2 } $1 == 0 { r[n++] = (w - $2) / $2 * 100; t[n - 1] = $2 }
                END { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (r[j] < r[i]) { x = r[i]; r[i] = r[j]; r[j] = x }
                      printf "  %s: verification costs %.1f%% of the load (median of %d rounds: with checks less without, over without)\n", b, r[int((n - 1) / 2)], n }'
    done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
