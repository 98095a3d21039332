#!/usr/bin/env bash
# ZeRO stages 1 and 2 (issue 15) against plain data parallelism (--zero 0),
# three parts, over the stages in ZEROS ("0 1 2"):
#
# 1. Step time at dp 2 (two ranks as threads, one GEMM thread each): in each
#    round the stages run in turns (the order rotates between rounds), each
#    for STEPS steps; a run's figure is the median "ms" of steps SKIP+1..STEPS
#    of --log-file, and the summary line the median of the rounds' figures.
# 2. Bytes per step per rank on the data-parallel group, by kind (the
#    "comm" "dp" counts of --log-file, rank 0, one step after the first),
#    against the analytic counts. Psi_p = the padded floats of the flat
#    parameter buffer (cleave memory's "params" bytes / 4), N = dp, byte
#    counting as include/cleave/comm.h defines it, with one bucket (the
#    default 25 MiB holds the model; BUCKET sets --bucket-size, and with
#    more buckets the all-reduce's chunks and calls change):
#      --zero 0 and 1, all-reduce of the gradients (chunked path, equal
#        chunks since Psi_p is a multiple of 16 N):
#                      sent = received = 2 (N-1)/N x 4 Psi_p
#      + the loss, one float64, one round: (N-1) x 8 (every stage)
#      --zero 2, reduce-scatter of the gradients (any bucketing):
#                      sent = received = (N-1)/N x 4 Psi_p
#      all-gather of the updated parameters (--zero 1 and 2):
#                      sent = received = (N-1)/N x 4 Psi_p
#      + --zero 2's norm: every shard's first min(Psi_p / N, 16384) floats,
#        (N-1) x 4 min(Psi_p / N, 16384), and 8 bytes per 16384-float block
#        of a parameter that starts in this rank's shard, (N-1) x 8 x that
#        count (received: the other ranks' counts; the formula column gives
#        the first two terms, the rest is printed apart).
# 3. Memory per rank by category from `cleave memory --json` (rank 0's
#    prediction; every rank is the same here), with the formulas: params
#    4 Psi_p, optimizer 8 Psi_p (--zero 0) or 8 Psi_p / N (--zero 1, 2),
#    grads 4 Psi_p + 4 V_p C (the tied LM head's separate wte gradient; V_p
#    the vocabulary padded to a multiple of VOCAB_DIV, 128, cleave's default
#    --make-vocab-size-divisible-by at tp 1) at --zero 0 and 1, and at
#    --zero 2 4 (Psi_p / N + V_p C + k B + L): k B the working buffers
#    (cleave memory's figure minus the rest, printed), L = N min(Psi_p / N,
#    16384) + 16384 the norm's buffer; and the measured "peak_bytes" of the
#    step against the predicted total.
#
# 4. ZeRO 3 (always dp 2): step time of --zero 2 and of --zero 3 with
#    --zero3-prefetch 0 and PREFETCH (1), rounds as in part 1; and from
#    the step log the time a rank waited for its parameter gathers
#    (zero3_wait_ms, median of the same steps): what prefetch did not hide,
#    and the dp bytes of a step (each unit gathered in the forward and,
#    all but the embedding, in the backward, the LM head with the tied wte
#    both times: about 2 (N-1)/N x 4 Psi_p, plus the reduce-scatter and the
#    norm's, as --zero 2's, and no final parameter all-gather).
# 5. --schedule zb-h1 on pp 2 x dp 2 (4 ranks as threads), 4 micro-batches
#    of MICRO per replica: step time of --zero 0, 2 and 3 (rounds as in
#    part 1), the measured bubble, ZeRO 3's gather wait, and rank 0's dp
#    bytes of a step (stage 0: its W passes reduce-scatter the buckets,
#    and under --zero 3 gather the blocks again).
#
#   bash bench/zero_step.sh                       # all parts, dp 2 and 4
#   PART=1 ROUNDS=7 STEPS=12 bash bench/zero_step.sh
#   PART=2 DPS="2 4" bash bench/zero_step.sh      # parts 2 and 3 only
#   BUCKET=1 bash bench/zero_step.sh              # one unit per bucket (--bucket-size 1)
#   PART=4 ROUNDS=3 bash bench/zero_step.sh       # ZeRO 3, prefetch off and on
#   PART=5 ROUNDS=3 bash bench/zero_step.sh       # zb-h1 on pp 2 x dp 2, zero 0, 2, 3
#
# Knobs: MODEL (gpt2-mini) SEQ (128) MICRO (4) STEPS (12) SKIP (2)
# ROUNDS (5) for part 1 (always dp 2); DPS ("2 4") for parts 2-3, which
# run BYTES_STEPS (2) steps (VOCAB_DIV, 128, as above) and take no timing
# (dp 4 is four ranks: on a small machine they share cores, so its time
# would say nothing); ZEROS ("0 1 2"); BUCKET (cleave's default). One
# micro-batch of MICRO per replica per step. Ranks share this machine's
# cores with each other and whatever else runs: compare within a round.
set -euo pipefail
cd "$(dirname "$0")/.."
part=${PART:-all}
model=${MODEL:-gpt2-mini} seq=${SEQ:-128} micro=${MICRO:-4} steps=${STEPS:-12} skip=${SKIP:-2} rounds=${ROUNDS:-5}
dps=${DPS:-2 4} bsteps=${BYTES_STEPS:-2} vdiv=${VOCAB_DIV:-128} zeros=${ZEROS:-0 1 2}
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
[ -n "${BUCKET:-}" ] && common+=(--bucket-size "$BUCKET")

train() { # train LOG DP ZERO STEPS [args...]
    local out="${1%.json}.out" log=$1 dp=$2 z=$3 n=$4
    shift 4
    "$bin" train "${common[@]}" --dp "$dp" --ranks "$dp" --global-batch-size $((micro * dp)) --zero "$z" \
        --steps "$n" --log-file "$log" "$@" >"$out" 2>&1 || { cat "$out" >&2; exit 1; }
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit } m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }
median_of() { grep '"ms"' "$1" | grep -o "\"$2\": [0-9.]*" | awk -v s="$skip" 'NR > s { print $2 }' | median; }
median_ms() { median_of "$1" ms; }

if [ "$part" = all ] || [ "$part" = 1 ]; then
    echo
    echo "== 1. step time, $model, --dp 2 --threads 1, seq $seq, micro-batch $micro (global $((2 * micro))), $steps steps, median of steps $((skip + 1))-$steps, $rounds rounds"
    read -r -a zs <<<"$zeros"
    printf '%-6s' round; for z in "${zs[@]}"; do printf ' %12s' "zero $z ms"; done
    for z in "${zs[@]:1}"; do printf ' %10s' "z$z / z${zs[0]}"; done; echo
    for z in "${zs[@]}"; do : >"$tmp/z$z.all"; done
    for r in $(seq 1 "$rounds"); do
        k=$(( (r - 1) % ${#zs[@]} )); order="${zs[*]:k} ${zs[*]:0:k}"
        for z in $order; do train "$tmp/t$z.json" 2 "$z" "$steps"; done
        printf '%-6s' "$r"
        for z in "${zs[@]}"; do median_ms "$tmp/t$z.json" | tee -a "$tmp/z$z.all" | awk '{ printf " %12.1f", $1 }'; done
        a=$(median_ms "$tmp/t${zs[0]}.json")
        for z in "${zs[@]:1}"; do awk -v a="$a" -v b="$(median_ms "$tmp/t$z.json")" 'BEGIN { printf " %10.3f", b / a }'; done
        echo "   (order: zero $order)"
    done
    printf '%-6s' median
    for z in "${zs[@]}"; do median <"$tmp/z$z.all" | awk '{ printf " %12.1f", $1 }'; done
    a=$(median <"$tmp/z${zs[0]}.all")
    for z in "${zs[@]:1}"; do awk -v a="$a" -v b="$(median <"$tmp/z$z.all")" 'BEGIN { printf " %10.3f", b / a }'; done
    echo "   (tokens per step: $((2 * micro * seq)))"
fi

if [ "$part" = all ] || [ "$part" = 2 ]; then
    field() { grep -o "\"$2\": [0-9]*" <<<"$1" | head -1 | awk '{ print $2 }'; }
    for dp in $dps; do
        echo
        echo "== 2-3. bytes and memory per rank, $model, --dp $dp (step 2 of $bsteps; rank 0)"
        mem() { "$bin" memory "${common[@]}" --dp "$dp" --global-batch-size $((micro * dp)) --zero "$1" --json | head -1; }
        declare -A m=()
        for z in $zeros; do m[$z]=$(mem "$z"); done
        psi_p=$(( $(field "$(mem 1)" params) / 4 ))
        S=$((psi_p / dp)); H=$((S < 16384 ? S : 16384)); L=$((dp * H + 16384))
        for z in $zeros; do train "$tmp/b$z.json" "$dp" "$z" "$bsteps"; done
        first=${zeros%% *}
        header=$(grep -m1 '^model ' "$tmp/b$first.out" || true)
        psi=$(sed -n 's/.* \([0-9]*\) parameters.*/\1/p' <<<"$header")
        vc=$(sed -n 's/.* \([0-9]*\) channels.*vocab \([0-9]*\).*/\1 \2/p' <<<"$header" | awk -v d="$vdiv" '{ print $1 * int(($2 + d - 1) / d) * d }')
        echo "Psi = ${psi:-?} parameters, Psi_p = $psi_p padded floats (multiple of 16 x $dp), V_p C = ${vc:-?} (vocabulary padded to a multiple of $vdiv)"
        printf '%-7s %-15s %6s %12s %12s %14s %8s\n' zero kind calls sent received "formula" "equal"
        for z in $zeros; do
            line=$(grep '"ms"' "$tmp/b$z.json" | sed -n 2p)
            dpc=$(sed 's/.*"dp": {\([^}]*\)}.*/\1/' <<<"$line")
            for kind in allreduce reduce_scatter allgather; do
                v=$(grep -o "\"$kind\": \[[0-9, ]*\]" <<<"$dpc" | tr -d '[],' | awk '{ print $2, $3, $4 }' || true)
                [ -n "$v" ] || v="0 0 0"
                extra=""
                case "$z/$kind" in
                0/allreduce | 1/allreduce) f=$(( 2 * (dp - 1) * 4 * psi_p / dp + (dp - 1) * 8 )) ;;
                2/allreduce) f=$(( (dp - 1) * 8 )) ;;
                2/reduce_scatter | 1/allgather) f=$(( (dp - 1) * 4 * psi_p / dp )) ;;
                2/allgather) f=$(( (dp - 1) * 4 * psi_p / dp + (dp - 1) * 4 * H )) ;;
                *) f=0 ;;
                esac
                read -r c sn rcv <<<"$v"
                eq=no; [ "$sn" = "$f" ] && [ "$rcv" = "$f" ] && eq=yes
                if [ "$z/$kind" = 2/allgather ]; then # + the blocks' sums: 8 (N-1) per block of this rank (sent), of the others (received)
                    eq="+$((sn - f)), +$((rcv - f))"
                fi
                [ "$c" = 0 ] && [ "$f" = 0 ] && continue
                printf '%-7s %-15s %6s %12s %12s %14s %8s\n' "$z" "$kind" "$c" "$sn" "$rcv" "$f" "$eq"
            done
            grep -o '"\(allreduce\|reduce_scatter\|allgather\)": \[[0-9, ]*\]' <<<"$dpc" | tr -d '[],' | awk '{ s += $3 } END { print s + 0 }' >"$tmp/sent$z"
            grep -o '"peak_bytes": [0-9]*' <<<"$line" | awk '{ print $2 }' >"$tmp/peak$z"
        done
        printf 'sent per rank per step:'
        for z in $zeros; do awk -v a="$(cat "$tmp/sent$z")" -v p="$psi_p" -v z="$z" 'BEGIN { printf "  zero %s %d B (%.3f x 4 Psi_p)", z, a, a / (4 * p) }'; done
        echo
        echo
        printf '%-7s %12s %12s %12s %12s %12s %12s %12s %12s %12s\n' zero params grads optimizer activations workspace total "peak (log)" "opt formula" "grads form."
        for z in $zeros; do
            mz=${m[$z]}
            fo=$(( 8 * psi_p / dp )); fg=$(( 4 * psi_p + 4 * ${vc:-0} ))
            [ "$z" = 0 ] && fo=$(( 8 * $(field "$mz" params) / 4 ))
            if [ "$z" = 2 ]; then # the working buffers: what cleave memory says beyond the shard, the head's wte gradient and L
                kb=$(( $(field "$mz" grads) / 4 - S - ${vc:-0} - L ))
                fg="$(( 4 * (S + ${vc:-0} + kb + L) ))"
                echo "  zero 2 at dp $dp: working buffers k B = $kb floats ($((4 * kb)) B), the norm's L = $L floats"
            fi
            printf '%-7s %12s %12s %12s %12s %12s %12s %12s %12s %12s\n' "$z" "$(field "$mz" params)" "$(field "$mz" grads)" \
                "$(field "$mz" optimizer)" "$(field "$mz" activations)" "$(field "$mz" workspace)" "$(field "$mz" total)" \
                "$(cat "$tmp/peak$z")" "$fo" "$fg"
            [ "$(field "$mz" optimizer)" = "$fo" ] || echo "  zero $z: optimizer bytes differ from the formula" >&2
            [ "$(field "$mz" total)" = "$(cat "$tmp/peak$z")" ] || echo "  zero $z: measured peak differs from the predicted total" >&2
            [ "$(field "$mz" grads)" = "$fg" ] || echo "  zero $z: grads bytes differ from the formula" >&2
        done
    done
fi

if [ "$part" = all ] || [ "$part" = 4 ]; then
    pf=${PREFETCH:-1}
    echo
    echo "== 4. ZeRO 3, $model, --dp 2 --threads 1, seq $seq, micro-batch $micro, $steps steps, median of steps $((skip + 1))-$steps, $rounds rounds"
    runs=("z2:2:" "pf0:3:--zero3-prefetch 0" "pf$pf:3:--zero3-prefetch $pf")
    printf '%-6s %10s %10s %10s %12s %12s\n' round "zero 2 ms" "z3 pf0 ms" "z3 pf$pf ms" "pf0 wait ms" "pf$pf wait ms"
    for r in $(seq 1 "$rounds"); do
        k=$(( (r - 1) % 3 ))
        for j in $(seq 0 2); do
            e=${runs[$(( (j + k) % 3 ))]}; name=${e%%:*}; rest=${e#*:}; z=${rest%%:*}; args=${rest#*:}
            # shellcheck disable=SC2086
            train "$tmp/q$name.json" 2 "$z" "$steps" $args
        done
        printf '%-6s' "$r"
        for name in z2 pf0 "pf$pf"; do median_ms "$tmp/q$name.json" | tee -a "$tmp/q$name.all" | awk '{ printf " %10.1f", $1 }'; done
        for name in pf0 "pf$pf"; do median_of "$tmp/q$name.json" zero3_wait_ms | tee -a "$tmp/w$name.all" | awk '{ printf " %12.1f", $1 }'; done
        echo
    done
    printf '%-6s' median
    for name in z2 pf0 "pf$pf"; do median <"$tmp/q$name.all" | awk '{ printf " %10.1f", $1 }'; done
    for name in pf0 "pf$pf"; do median <"$tmp/w$name.all" | awk '{ printf " %12.1f", $1 }'; done
    echo
    line=$(grep '"ms"' "$tmp/qpf$pf.json" | sed -n 2p)
    echo "dp bytes sent by rank 0 in a --zero 3 step: $(sed 's/.*"dp": {\([^}]*\)}.*/\1/' <<<"$line")"
    line=$(grep '"ms"' "$tmp/qz2.json" | sed -n 2p)
    echo "and in a --zero 2 step:                    $(sed 's/.*"dp": {\([^}]*\)}.*/\1/' <<<"$line")"
fi

if [ "$part" = all ] || [ "$part" = 5 ]; then
    echo
    echo "== 5. zb-h1, $model, --pp 2 --dp 2 --threads 1, seq $seq, 4 micro-batches of $micro per replica, $steps steps, median of steps $((skip + 1))-$steps, $rounds rounds"
    printf '%-6s %10s %10s %10s %9s %9s %9s %12s\n' round "zero 0 ms" "zero 2 ms" "zero 3 ms" "bubble 0" "bubble 2" "bubble 3" "z3 wait ms"
    for r in $(seq 1 "$rounds"); do
        for j in 0 1 2; do
            z=$(( ((j + r - 1) % 3) == 0 ? 0 : ((j + r - 1) % 3) + 1 ))
            train "$tmp/zb$z.json" 2 "$z" "$steps" --pp 2 --ranks 4 --schedule zb-h1 --global-batch-size $((8 * micro))
        done
        printf '%-6s' "$r"
        for z in 0 2 3; do median_ms "$tmp/zb$z.json" | tee -a "$tmp/zb$z.all" | awk '{ printf " %10.1f", $1 }'; done
        for z in 0 2 3; do median_of "$tmp/zb$z.json" bubble | tee -a "$tmp/zbb$z.all" | awk '{ printf " %9.3f", $1 }'; done
        median_of "$tmp/zb3.json" zero3_wait_ms | tee -a "$tmp/zbw.all" | awk '{ printf " %12.1f", $1 }'
        echo
    done
    printf '%-6s' median
    for z in 0 2 3; do median <"$tmp/zb$z.all" | awk '{ printf " %10.1f", $1 }'; done
    for z in 0 2 3; do median <"$tmp/zbb$z.all" | awk '{ printf " %9.3f", $1 }'; done
    median <"$tmp/zbw.all" | awk '{ printf " %12.1f", $1 }'
    echo
    for z in 0 2 3; do
        line=$(grep '"ms"' "$tmp/zb$z.json" | sed -n 2p)
        echo "dp bytes sent by rank 0 (stage 0) in a --zero $z step: $(sed 's/.*"dp": {\([^}]*\)}.*/\1/' <<<"$line")"
    done
fi
