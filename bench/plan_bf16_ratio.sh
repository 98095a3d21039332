#!/usr/bin/env bash
# The planner's bf16 / fp32 step-time ratio against the measured one (issue 29 item 6). Other work on the cores
# moves absolute times, so this compares ratios: `cleave bench step` on one thread in fp32 and bf16 taking turns
# (PAIRS pairs, each pair's order alternating), a step's cost the process's CPU seconds (user + system) of a run
# of S2 steps less one of S1, over S2 - S1 (wall time moved 0.9x-3.9x between pairs on a loaded machine, CPU time
# is what calibrate and plan_grid measure too); and `cleave plan --hardware this` on one device (one core) for the
# same micro-batch, from a calibration made first (HW: reuse a description instead). Two points: gpt2-mini T 128
# (S1 4, S2 44) and GPT-2 124M T 256 (S1 1, S2 3); ONLY=MODEL runs one of them. MAIN: a second cleave binary whose
# prediction to print beside.
#   PAIRS=3 bash bench/plan_bf16_ratio.sh
set -euo pipefail
bin=${CLEAVE:-./build/cleave} pairs=${PAIRS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; bf16: $(grep -o 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
hw=${HW:-$tmp/hw.json}
[ -n "${HW:-}" ] || "$bin" plan calibrate --out "$hw"
predict() { # BIN MODEL T DTYPE -> step ms
    CLEAVE_HW="$hw" "$1" plan --hardware this --model "$2" --seq-len "$3" --global-batch-size 4 --precision "$4" --devices 1 \
        --dp 1 --tp 1 --pp 1 --micro-batch-size 4 --zero 0 --recompute none --schedule 1f1b --no-sequence-parallel \
        --offload-optimizer none --json | head -1 | grep -o '"step_s": [0-9.e+-]*' | awk '{ printf "%.2f", 1000 * $2 }'
}
cpu() { # MODEL T STEPS DTYPE -> the run's CPU seconds
    /usr/bin/time -f '%U %S' -o "$tmp/time" "$bin" bench step --model "$1" --seq-len "$2" --micro-batch-size 4 --threads 1 \
        --steps "$3" --dtype "$4" >/dev/null 2>&1
    awk '{ print $1 + $2 }' "$tmp/time"
}
step() { # MODEL T S1 S2 DTYPE -> CPU ms a step
    local a b
    a=$(cpu "$1" "$2" "$3" "$5") b=$(cpu "$1" "$2" "$4" "$5")
    awk -v a="$a" -v b="$b" -v k=$(($4 - $3)) 'BEGIN { printf "%.1f", 1000 * (b - a) / k }'
}
for point in "gpt2-mini 128 4 44" "gpt2 256 1 3"; do
    read -r model T s1 s2 <<<"$point"
    [ -n "${ONLY:-}" ] && [ "$ONLY" != "$model" ] && continue
    p32=$(predict "$bin" "$model" "$T" fp32) p16=$(predict "$bin" "$model" "$T" bf16)
    line="$model T $T B 4, one thread: predicted fp32 $p32 ms, bf16 $p16 ms, ratio $(awk -v a="$p32" -v b="$p16" 'BEGIN { printf "%.2f", a / b }')"
    if [ -n "${MAIN:-}" ]; then
        m32=$(predict "$MAIN" "$model" "$T" fp32) m16=$(predict "$MAIN" "$model" "$T" bf16)
        line+=" (MAIN: $m32, $m16 ms, ratio $(awk -v a="$m32" -v b="$m16" 'BEGIN { printf "%.2f", a / b }'))"
    fi
    echo "$line"
    for ((i = 0; i < pairs; i++)); do
        if ((i % 2 == 0)); then a=$(step "$model" "$T" "$s1" "$s2" fp32); b=$(step "$model" "$T" "$s1" "$s2" bf16)
        else b=$(step "$model" "$T" "$s1" "$s2" bf16); a=$(step "$model" "$T" "$s1" "$s2" fp32); fi
        echo "  pair $((i + 1)): measured fp32 $a ms, bf16 $b ms (CPU a step), ratio $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
