#!/usr/bin/env bash
# ZeRO stage 1 (issue 15) against plain data parallelism (--zero 0), three
# parts:
#
# 1. Step time at dp 2 (two ranks as threads, one GEMM thread each): in each
#    round --zero 0 and --zero 1 run in turns (the order alternates between
#    rounds), each for STEPS steps; a run's figure is the median "ms" of
#    steps SKIP+1..STEPS of --log-file, and the summary line the median of
#    the rounds' figures.
# 2. Bytes per step per rank on the data-parallel group, by kind (the
#    "comm" "dp" counts of --log-file, rank 0, one step after the first),
#    against the analytic counts. Psi_p = the padded floats of the flat
#    parameter buffer (cleave memory's "params" bytes / 4), N = dp, byte
#    counting as include/cleave/comm.h defines it:
#      all-reduce of the gradients (chunked path, one bucket here: equal
#        chunks since Psi_p is a multiple of 16 N):
#                      sent = received = 2 (N-1)/N x 4 Psi_p
#      + the loss, one float64, one round: (N-1) x 8
#      all-gather of the updated parameters (--zero 1 only):
#                      sent = received = (N-1)/N x 4 Psi_p
# 3. Memory per rank by category from `cleave memory --json` (rank 0's
#    prediction; every rank is the same here), with the formulas: params
#    4 Psi_p, grads 4 Psi_p + 4 V_p C (the tied LM head's separate wte
#    gradient; V_p the vocabulary padded to a multiple of VOCAB_DIV, 128,
#    cleave's default --make-vocab-size-divisible-by at tp 1), optimizer 8 Psi_p (--zero 0) or 8 Psi_p / N (--zero 1), and
#    the measured "peak_bytes" of the step against the predicted total.
#
#   bash bench/zero_step.sh                       # all parts, dp 2 and 4
#   PART=1 ROUNDS=7 STEPS=12 bash bench/zero_step.sh
#   PART=2 DPS="2 4" bash bench/zero_step.sh      # parts 2 and 3 only
#
# Knobs: MODEL (gpt2-small) SEQ (128) MICRO (4) STEPS (12) SKIP (2)
# ROUNDS (5) for part 1 (always dp 2); DPS ("2 4") for parts 2-3, which
# run BYTES_STEPS (2) steps (VOCAB_DIV, 128, as above) and take no timing
# (dp 4 is four ranks: on a small machine they share cores, so its time
# would say nothing). One micro-batch of MICRO per replica per step. Ranks
# share this machine's cores with each other and whatever else runs:
# compare within a round.
set -euo pipefail
cd "$(dirname "$0")/.."
part=${PART:-all}
model=${MODEL:-gpt2-small} seq=${SEQ:-128} micro=${MICRO:-4} steps=${STEPS:-12} skip=${SKIP:-2} rounds=${ROUNDS:-5}
dps=${DPS:-2 4} bsteps=${BYTES_STEPS:-2} vdiv=${VOCAB_DIV:-128}
bin=${CLEAVE:-./build/cleave}
[ -x "$bin" ] || { echo "zero_step: $bin not built (make)" >&2; exit 2; }
[ "$steps" -gt "$skip" ] || { echo "zero_step: STEPS must exceed SKIP" >&2; exit 2; }
[ "$bsteps" -ge 2 ] || { echo "zero_step: BYTES_STEPS must be at least 2" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; avx512: $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

common=(--model "$model" --seq-len "$seq" --micro-batch-size "$micro" --sample-tokens 0 --eval-batches 1
        --log-every 1000000 --threads 1)

train() { # train LOG DP ZERO STEPS
    local out="${1%.json}.out"
    "$bin" train "${common[@]}" --dp "$2" --ranks "$2" --global-batch-size $((micro * $2)) --zero "$3" \
        --steps "$4" --log-file "$1" >"$out" 2>&1 || { cat "$out" >&2; exit 1; }
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit } m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }
median_ms() { grep '"ms"' "$1" | grep -o '"ms": [0-9.]*' | awk -v s="$skip" 'NR > s { print $2 }' | median; }

if [ "$part" = all ] || [ "$part" = 1 ]; then
    echo
    echo "== 1. step time, $model, --dp 2 --threads 1, seq $seq, micro-batch $micro (global $((2 * micro))), $steps steps, median of steps $((skip + 1))-$steps, $rounds rounds"
    printf '%-6s %14s %14s %10s\n' round "zero 0 ms" "zero 1 ms" "z1 / z0"
    : >"$tmp/z0.all"; : >"$tmp/z1.all"
    for r in $(seq 1 "$rounds"); do
        order="0 1"; [ $((r % 2)) -eq 0 ] && order="1 0"
        for z in $order; do train "$tmp/t$z.json" 2 "$z" "$steps"; done
        a=$(median_ms "$tmp/t0.json") b=$(median_ms "$tmp/t1.json")
        echo "$a" >>"$tmp/z0.all"; echo "$b" >>"$tmp/z1.all"
        awk -v r="$r" -v o="$order" -v a="$a" -v b="$b" 'BEGIN { printf "%-6s %14.1f %14.1f %10.3f   (order: zero %s)\n", r, a, b, b / a, o }'
    done
    a=$(median <"$tmp/z0.all") b=$(median <"$tmp/z1.all")
    tok=$((2 * micro * seq))
    awk -v a="$a" -v b="$b" -v t="$tok" 'BEGIN { printf "%-6s %14.1f %14.1f %10.3f   (tokens/s: %.0f against %.0f)\n", "median", a, b, b / a, t * 1000 / a, t * 1000 / b }'
fi

if [ "$part" = all ] || [ "$part" = 2 ]; then
    for dp in $dps; do
        echo
        echo "== 2-3. bytes and memory per rank, $model, --dp $dp (step 2 of $bsteps; rank 0)"
        mem() { "$bin" memory "${common[@]}" --dp "$dp" --global-batch-size $((micro * dp)) --zero "$1" --json | head -1; }
        field() { grep -o "\"$2\": [0-9]*" <<<"$1" | head -1 | awk '{ print $2 }'; }
        m0=$(mem 0) m1=$(mem 1)
        psi_p=$(( $(field "$m1" params) / 4 ))
        for z in 0 1; do train "$tmp/b$z.json" "$dp" "$z" "$bsteps"; done
        header=$(grep -m1 '^model ' "$tmp/b0.out" || true)
        psi=$(sed -n 's/.* \([0-9]*\) parameters.*/\1/p' <<<"$header")
        vc=$(sed -n 's/.* \([0-9]*\) channels.*vocab \([0-9]*\).*/\1 \2/p' <<<"$header" | awk -v d="$vdiv" '{ print $1 * int(($2 + d - 1) / d) * d }')
        echo "Psi = ${psi:-?} parameters, Psi_p = $psi_p padded floats (multiple of 16 x $dp), V_p C = ${vc:-?} (vocabulary padded to a multiple of $vdiv)"
        printf '%-7s %-10s %6s %12s %12s %14s %8s\n' zero kind calls sent received "formula" "equal"
        for z in 0 1; do
            line=$(grep '"ms"' "$tmp/b$z.json" | sed -n 2p)
            dpc=$(sed 's/.*"dp": {\([^}]*\)}.*/\1/' <<<"$line")
            for kind in allreduce allgather; do
                v=$(grep -o "\"$kind\": \[[0-9, ]*\]" <<<"$dpc" | tr -d '[],' | awk '{ print $2, $3, $4 }' || true) 
                [ -n "$v" ] || v="0 0 0"
                if [ "$kind" = allreduce ]; then f=$(( 2 * (dp - 1) * 4 * psi_p / dp + (dp - 1) * 8 ))
                elif [ "$z" = 1 ]; then f=$(( (dp - 1) * 4 * psi_p / dp ))
                else f=0; fi
                read -r c s rcv <<<"$v"
                eq=no; [ "$s" = "$f" ] && [ "$rcv" = "$f" ] && eq=yes
                printf '%-7s %-10s %6s %12s %12s %14s %8s\n' "$z" "$kind" "$c" "$s" "$rcv" "$f" "$eq"
            done
            sent=$(grep -o '"\(allreduce\|allgather\)": \[[0-9, ]*\]' <<<"$dpc" | tr -d '[],' | awk '{ s += $3 } END { print s + 0 }')
            echo "$sent" >"$tmp/sent$z"
            peak=$(grep -o '"peak_bytes": [0-9]*' <<<"$line" | awk '{ print $2 }')
            echo "$peak" >"$tmp/peak$z"
        done
        awk -v a="$(cat "$tmp/sent0")" -v b="$(cat "$tmp/sent1")" -v p="$psi_p" 'BEGIN {
            printf "sent per rank per step: zero 0 %d B (%.3f x 4 Psi_p), zero 1 %d B (%.3f x 4 Psi_p); zero 1 / zero 0 = %.3f\n",
                   a, a / (4 * p), b, b / (4 * p), b / a }'
        echo
        printf '%-7s %12s %12s %12s %12s %12s %12s %12s %12s\n' zero params grads optimizer activations workspace total "peak (log)" "opt formula"
        for z in 0 1; do
            m=$m0; [ "$z" = 1 ] && m=$m1
            pz=$(( $(field "$m" params) / 4 ))
            fo=$(( 8 * pz )); [ "$z" = 1 ] && fo=$(( 8 * pz / dp ))
            printf '%-7s %12s %12s %12s %12s %12s %12s %12s %12s\n' "$z" "$(field "$m" params)" "$(field "$m" grads)" \
                "$(field "$m" optimizer)" "$(field "$m" activations)" "$(field "$m" workspace)" "$(field "$m" total)" \
                "$(cat "$tmp/peak$z")" "$fo"
            [ "$(field "$m" optimizer)" = "$fo" ] || echo "  zero $z: optimizer bytes differ from the formula" >&2
            [ "$(field "$m" total)" = "$(cat "$tmp/peak$z")" ] || echo "  zero $z: measured peak differs from the predicted total" >&2
            [ "$(field "$m" grads)" = "$(( 4 * pz + 4 * ${vc:-0} ))" ] || echo "  zero $z: grads bytes differ from 4 Psi_p + 4 V_p C" >&2
        done
    done
fi
