#!/usr/bin/env bash
# The planner against measurement on this machine (issue 17, "time here"):
# for each point of the grid, cleave plan's predicted step time (--hardware
# this, the configuration fully given, --json's step_s) beside the measured
# median step time of `cleave train` with that configuration, the error
# (predicted / measured - 1) and the mean |error|; then whether the
# configuration the planner ranks first is within 5% of the best measured.
#
# Grid (MODEL gpt2-mini, sequence SEQ, global batch GB = 8 samples, one GEMM
# thread per rank: a device is one core, as calibrate measures it):
#   1 rank (micro-batch 4, two micro-batches); dp 2; tp 2; pp 2 with gpipe,
#   1f1b and zb-h1 at m = 2 and 8 micro-batches; zero 1 and zero 3 at dp 2;
#   recompute full (1 rank);
# and the planner's own first choice for 2 devices (a search with nothing
# fixed but the batch), measured as one more point when it is not already
# in the grid. "Ranking" compares the 2-device points: the one the planner
# predicts fastest against the fastest measured.
#
# Measurement: ROUNDS rounds, each running every point once for STEPS steps
# (the order rotates between rounds); a run's figure is the median "ms" of
# steps SKIP+1..STEPS of its --log-file, a point's the median over the
# rounds ("fastest": the fastest single step of any round, beside it: on a
# shared machine the step least slowed by other work). "CPU ms" is what
# the load cannot inflate: the process's user + system CPU time of a
# STEPS-step run less that of a SKIP-step run, per step and rank, beside
# the planner's "busy" (its step time less the bubble's idle share): on a
# shared machine a rank's step waits for a core, but the CPU it uses is
# the work's. The hardware description is cleave plan calibrate's, made first
# (HW, default build/plan-this.json; REUSE=1 keeps an existing one); it
# picks the planner's first choice. With RECAL=1 (the default) every round
# calibrates afresh and predicts each point from that round's description,
# and a point's error is the median over the rounds of (that round's
# prediction / that round's measured median - 1): this machine's speed
# drifts by 10-20% over minutes (another tenant of the host, not a process
# here), and one calibration taken in a slow or fast stretch moved every
# prediction by that much against runs made minutes later. "predicted ms"
# is then the median of the rounds' predictions. RECAL=0: one description.
#
#   bash bench/plan_grid.sh                 # about 1.5 minutes on 2 quiet cores (ROUNDS=5: 2.5)
#   ROUNDS=5 STEPS=12 SEQ=256 bash bench/plan_grid.sh
#
# Knobs: MODEL (gpt2-mini) SEQ (128) STEPS (10) SKIP (3) ROUNDS (3) HW
# REUSE (0) RECAL (1) CLEAVE (./build/cleave) DTYPE (fp32; bf16: every point in bf16 mixed precision, planned
# with calibrate's BF16 peak and gemm_bf16 table). The machine's cores are shared with
# whatever else runs: the load average is printed before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-gpt2-mini} dtype=${DTYPE:-fp32} seq=${SEQ:-128} steps=${STEPS:-10} skip=${SKIP:-3} rounds=${ROUNDS:-3} gb=8
bin=${CLEAVE:-./build/cleave}
hw=${HW:-build/plan-this.json}
[ -x "$bin" ] || { echo "plan_grid: $bin not built (make)" >&2; exit 2; }
[ "$steps" -gt "$skip" ] || { echo "plan_grid: STEPS must exceed SKIP" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; avx512: $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${REUSE:-0}" = 1 ] && [ -s "$hw" ]; then
    echo "hardware: $hw (reused)"
else
    "$bin" plan calibrate --out "$hw"
fi

# name | devices | configuration flags (shared by plan and train)
points=(
    "1 rank|1|--dp 1 --tp 1 --pp 1 --micro-batch-size 4 --zero 0 --recompute none"
    "dp 2|2|--dp 2 --tp 1 --pp 1 --micro-batch-size 4 --zero 0 --recompute none"
    "tp 2|2|--dp 1 --tp 2 --pp 1 --micro-batch-size 4 --zero 0 --recompute none"
    "pp 2 gpipe m=2|2|--dp 1 --tp 1 --pp 2 --micro-batch-size 4 --schedule gpipe --zero 0 --recompute none"
    "pp 2 1f1b m=2|2|--dp 1 --tp 1 --pp 2 --micro-batch-size 4 --schedule 1f1b --zero 0 --recompute none"
    "pp 2 zb-h1 m=2|2|--dp 1 --tp 1 --pp 2 --micro-batch-size 4 --schedule zb-h1 --zero 0 --recompute none"
    "pp 2 gpipe m=8|2|--dp 1 --tp 1 --pp 2 --micro-batch-size 1 --schedule gpipe --zero 0 --recompute none"
    "pp 2 1f1b m=8|2|--dp 1 --tp 1 --pp 2 --micro-batch-size 1 --schedule 1f1b --zero 0 --recompute none"
    "pp 2 zb-h1 m=8|2|--dp 1 --tp 1 --pp 2 --micro-batch-size 1 --schedule zb-h1 --zero 0 --recompute none"
    "zero 1 dp 2|2|--dp 2 --tp 1 --pp 1 --micro-batch-size 4 --zero 1 --recompute none"
    "zero 3 dp 2|2|--dp 2 --tp 1 --pp 1 --micro-batch-size 4 --zero 3 --recompute none"
    "recompute full|1|--dp 1 --tp 1 --pp 1 --micro-batch-size 4 --zero 0 --recompute full"
)
shape=(--model "$model" --seq-len "$seq" --global-batch-size "$gb" --dtype "$dtype")

predict() { # predict DEVICES FLAGS... -> step_s (from the description $hw)
    local n=$1; shift
    # shellcheck disable=SC2068
    CLEAVE_HW="$hw" "$bin" plan --hardware this "${shape[@]}" --devices "$n" "$@" --json | head -1 |
        grep -o '"step_s": [0-9.e+-]*' | awk '{ print $2 }'
}

# the predicted busy seconds of a rank in the step: the step less the bubble's idle share (the "CPU ms"
# column's counterpart: what a rank computes, whatever the other work on the cores)
predict_busy() {
    local n=$1; shift
    # shellcheck disable=SC2068
    CLEAVE_HW="$hw" "$bin" plan --hardware this "${shape[@]}" --devices "$n" "$@" --json | head -1 |
        awk '{ match($0, /"step_s": [0-9.e+-]*/); s = substr($0, RSTART + 10, RLENGTH - 10)
               match($0, /"bubble": [0-9.e+-]*/); b = substr($0, RSTART + 10, RLENGTH - 10); print s * (1 - b) }'
}

# the planner's first choice for 2 devices, as flags
top=$(CLEAVE_HW="$hw" "$bin" plan --hardware this "${shape[@]}" --devices 2 --top 1 --json | head -1)
field() { grep -o "\"$1\": [^,}]*" <<<"$top" | head -1 | sed 's/^[^:]*: //; s/"//g'; }
tflags="--dp $(field dp) --tp $(field tp) --pp $(field pp) --micro-batch-size $(field micro_batch_size) --zero $(field zero) --recompute $(field recompute)"
[ "$(field pp)" -gt 1 ] && tflags+=" --schedule $(field schedule)"
[ "$(field sequence_parallel)" = true ] && tflags+=" --sequence-parallel"
[ "$(field offload_optimizer)" != none ] && tflags+=" --offload-optimizer $(field offload_optimizer)"
norm() { sed 's/ --schedule 1f1b//' <<<"$1"; } # one stage: the schedule does not matter
top_name=""
for p in "${points[@]}"; do
    IFS='|' read -r name n flags <<<"$p"
    [ "$n" = 2 ] && [ "$(norm "$flags")" = "$(norm "$tflags")" ] && top_name=$name
done
if [ -z "$top_name" ]; then
    top_name="planner's top"
    points+=("$top_name|2|$tflags")
fi
echo "planner's first choice for 2 devices: $tflags ($top_name)"

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit } m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }
train() { # train STEPS DEVICES FLAGS -> $tmp/log.json, and the process's CPU seconds (user + system) in $tmp/cpu
    local k=$1 n=$2 flags=$3 extra=()
    [[ $flags == *--offload-optimizer\ disk* ]] && extra=(--offload-dir "$tmp")
    # shellcheck disable=SC2086
    /usr/bin/time -f '%U %S' -o "$tmp/time" "$bin" train "${shape[@]}" $flags "${extra[@]}" --ranks "$n" --threads 1 \
        --steps "$k" --sample-tokens 0 --eval-batches 1 --log-every 1000000 --log-file "$tmp/log.json" >"$tmp/out" 2>&1 ||
        { echo "plan_grid: train $flags failed:" >&2; tail -3 "$tmp/out" >&2; exit 1; }
    awk '{ print $1 + $2 }' "$tmp/time" >"$tmp/cpu"
}
run() { # run INDEX DEVICES FLAGS -> appends the run's median ms to $tmp/INDEX.ms, its fastest step to .min, CPU ms per rank-step to .cpu
    local i=$1 n=$2 flags=$3
    train "$skip" "$n" "$flags"
    local c0; c0=$(cat "$tmp/cpu")
    train "$steps" "$n" "$flags"
    awk -v a="$c0" -v b="$(cat "$tmp/cpu")" -v k=$((steps - skip)) -v n="$n" 'BEGIN { print 1000 * (b - a) / k / n }' >>"$tmp/$i.cpu"
    grep -o '"ms": [0-9.]*' "$tmp/log.json" | awk -v s="$skip" 'NR > s { print $2 }' >"$tmp/steps"
    median <"$tmp/steps" >>"$tmp/$i.ms"
    sort -g "$tmp/steps" | head -1 >>"$tmp/$i.min"
}

# a point's plan flags: the schedule does not matter at one stage, the rest as train's defaults
pflags() { local f=$1; echo "$f $([[ $f == *--pp\ 1* ]] && echo --schedule 1f1b) --no-sequence-parallel $([[ $f == *--offload* ]] || echo --offload-optimizer none)"; }
np=${#points[@]}
hw0=$hw
for r in $(seq 1 "$rounds"); do
    if [ "${RECAL:-1}" = 1 ]; then
        hw="$tmp/hw.$r.json"
        "$bin" plan calibrate --out "$hw" >/dev/null
    fi
    for j in $(seq 0 $((np - 1))); do
        i=$(( (j + r - 1) % np ))
        IFS='|' read -r name n flags <<<"${points[$i]}"
        run "$i" "$n" "$flags"
        # shellcheck disable=SC2046
        p=$(predict "$n" $(pflags "$flags"))
        echo "$p" >>"$tmp/$i.pred"
        awk -v p="$p" -v m="$(tail -1 "$tmp/$i.ms")" 'BEGIN { print 1000 * p / m - 1 }' >>"$tmp/$i.err"
    done
    echo "round $r of $rounds done (load average $(cut -d' ' -f1-3 /proc/loadavg))"
done

echo
echo "$model, sequence $seq, global batch $gb, one thread per rank; median of steps $((skip + 1))-$steps, median of $rounds rounds"
if [ "${RECAL:-1}" = 1 ]; then echo "error: median over the rounds of each round's prediction (calibrated that round) against its measured median"
else echo "error: the one description's prediction against the measured median"; fi
printf '%-16s %3s %12s %12s %8s %9s %8s %8s %8s\n' point ranks "predicted ms" "measured ms" error "fastest" error "CPU ms" busy
: >"$tmp/rows"
for i in $(seq 0 $((np - 1))); do
    IFS='|' read -r name n flags <<<"${points[$i]}"
    pred=$(median <"$tmp/$i.pred") err=$(median <"$tmp/$i.err")
    # shellcheck disable=SC2046
    pbusy=$(hw=$hw0 predict_busy "$n" $(pflags "$flags"))
    meas=$(median <"$tmp/$i.ms") fast=$(sort -g "$tmp/$i.min" | head -1) cpu=$(median <"$tmp/$i.cpu")
    awk -v nm="$name" -v n="$n" -v p="$pred" -v m="$meas" -v f="$fast" -v c="$cpu" -v pb="$pbusy" -v e="$err" \
        'BEGIN { printf "%-16s %3d %12.1f %12.1f %+7.1f%% %9.1f %+7.1f%% %8.1f %8.1f\n", nm, n, 1000 * p, m, 100 * e, f, 100 * (1000 * p / f - 1), c, 1000 * pb
                 printf "%s|%d|%.6g|%.6g|%.6g\n", nm, n, 1000 * p, m, e > "/dev/stderr" }' 2>>"$tmp/rows"
done
awk -F'|' '{ a = $5 < 0 ? -$5 : $5; s += a; if (a > mx) mx = a; if (a > 0.10) bad++ }
    END { printf "mean |error| %.1f%%, largest %.1f%%, %d of %d points over 10%%\n", 100 * s / NR, 100 * mx, bad, NR }' "$tmp/rows"
awk -F'|' -v top="$top_name" '$2 == 2 { if (!pb || $3 < pv) { pb = $1; pv = $3; pm = $4 } if (!mb || $4 < mv) { mb = $1; mv = $4 } if ($1 == top) tm = $4 }
    END { printf "2 devices: fastest predicted %s (measured %.1f ms), fastest measured %s (%.1f ms)\n", pb, pm, mb, mv
          r = tm / mv - 1
          printf "the planner'"'"'s first choice (%s, measured %.1f ms) is %+.1f%% from the fastest measured: %s\n", top, tm, 100 * r,
                 r <= 0.05 ? "within 5%" : "NOT within 5%" }' "$tmp/rows"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
