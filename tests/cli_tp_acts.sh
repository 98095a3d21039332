#!/usr/bin/env bash
# Activation memory under tensor and sequence parallelism against
# Korthikanti et al. ("Reducing Activation Recomputation in Large
# Transformer Models", 2022). Their per-layer figure with sequence
# parallelism and selective recompute is 34 s b h / t bytes in 16-bit with
# dropout masks; cleave keeps fp32 and has no dropout, so the same sixteen
# values per token and channel (ln_1, qkv, attention output, residual, ln_2,
# fc, GELU, block output) give 64 s b h / t bytes, plus the two layernorms'
# mean and rstd (16 s b / t). Measured: the activation peak of L + 2 blocks
# minus that of L blocks, halved (one micro-batch live, pp 1), from `cleave
# memory --measure`; it must be within 5% of 64 s b h / t and equal the
# fp32 form with the statistics exactly. Without sequence parallelism the
# token-row values stay whole: (16 + 48/t) s b h + 16 s b bytes (Korthikanti's
# s b h (10 + 24/t) in their accounting). The prediction equals the
# measurement in every case (cli_memory.sh's rule).
set -u
source "$(dirname "$0")/lib.sh"
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 2000) > "$tmp/text.txt"
s=64; b=4; h=64
acts() { # layers, extra flags -> measured activation bytes of rank 0 (checks predicted == measured)
    local L=$1; shift
    timeout 120 "$CLEAVE" memory --measure --json --threads 1 --eval-batches 1 --data "$tmp/text.txt" --layers "$L" \
        --channels $h --heads 4 --seq-len $s --micro-batch-size $b "$@" > "$tmp/m.json" 2> "$tmp/err" || { echo "FAILED: $(cat "$tmp/err")" >&2; echo 0; return; }
    python3 - "$tmp/m.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
same = all(r["predicted"][k] == r["measured"][k] for r in rows for k in r["predicted"])
print(rows[0]["measured"]["activations"] if same else -1)
PY
}
for t in 2 4; do
    for mode in sp nosp; do
        flags=(--tp $t --recompute selective)
        [ $mode = sp ] && flags+=(--sequence-parallel)
        a2=$(acts 2 "${flags[@]}"); a4=$(acts 4 "${flags[@]}")
        check '[ "$a2" -gt 0 ] && [ "$a4" -gt 0 ]' "tp $t $mode: memory --measure failed or predicted != measured ($a2, $a4)"
        per=$(( (a4 - a2) / 2 ))
        if [ $mode = sp ]; then
            k=$(( 64 * s * b * h / t )); exact=$(( (64 * s * b * h + 16 * s * b) / t ))
        else
            k=$(( (16 + 48 / t) * s * b * h )); exact=$(( k + 16 * s * b ))
        fi
        rel=$(python3 -c "print(abs($per - $k) / $k)")
        echo "tp $t $mode selective: per layer $per bytes; Korthikanti fp32 form $k (rel diff $rel); with the statistics $exact"
        check 'python3 -c "import sys; sys.exit(not ($rel <= 0.05))"' "tp $t $mode: per-layer activations $per are not within 5% of $k"
        check '[ "$per" -eq "$exact" ]' "tp $t $mode: per-layer activations $per != $exact"
    done
done
finish cli_tp_acts
