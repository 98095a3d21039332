#!/usr/bin/env bash
# Optimizer offload (issue 15) against the moments in device memory, on one
# rank, two parts:
#
# 1. Step time: `cleave bench step` with --offload-optimizer none, host and
#    disk in turns (the order rotates between rounds), each STEPS timed
#    steps after one warm-up; per run the step's ms and the "adamw (with
#    clip)" row's ms (the optimizer step: for disk, the tiles' reads and
#    writes overlapped with the update); the summary is the median of the
#    rounds.
# 2. Disk bandwidth: every disk-offloaded step reads both moments from the
#    file and writes them back, 2 x D bytes with D the file's size (`cleave
#    memory`'s "disk" figure, 8 Psi_p), so the stream reached 2 D / (adamw
#    ms). Against `dd` on the same directory's file system: writing a file
#    of D bytes (bs 1 MiB, conv=fdatasync off: the offload file is not
#    synced either, both go through the page cache) and reading it back.
#    A figure near dd's says the update hides behind the I/O or the other
#    way round; far below says the tiles are too small or the worker waits.
#
#   bash bench/offload_step.sh                     # both parts, gpt2 (124M)
#   ROUNDS=5 STEPS=5 DIR=/var/tmp bash bench/offload_step.sh
#
# Knobs: MODEL (gpt2) SEQ (128) MICRO (4) STEPS (3) ROUNDS (3) THREADS
# (the cores) DIR (a directory for the offload file and dd's, default a
# fresh one under /tmp: say which file system it is). The machine's other
# load moves absolute times: compare within a round.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-gpt2} seq=${SEQ:-128} micro=${MICRO:-4} steps=${STEPS:-3} rounds=${ROUNDS:-3}
threads=${THREADS:-$(nproc)}
bin=${CLEAVE:-./build/cleave}
[ -x "$bin" ] || { echo "offload_step: $bin not built (make)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dir=${DIR:-$tmp/off}
mkdir -p "$dir"

echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; avx512: $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "offload dir: $dir on $(df -T "$dir" | awk 'NR == 2 { print $2 " (" $1 ")" }'); load average: $(cut -d' ' -f1-3 /proc/loadavg)"

shape=(--model "$model" --seq-len "$seq" --micro-batch-size "$micro")
disk=$("$bin" memory "${shape[@]}" --global-batch-size "$micro" --offload-optimizer disk --offload-dir "$dir" --json |
    grep -o '"disk": [0-9]*' | head -1 | awk '{ print $2 }')
[ -n "$disk" ] && [ "$disk" -gt 0 ] || { echo "offload_step: cleave memory gave no disk figure" >&2; exit 1; }

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit } m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }

run() { # run MODE -> "step_ms adamw_ms"
    local out
    out=$("$bin" bench step "${shape[@]}" --threads "$threads" --steps "$steps" --warmup 1 --peak 1 \
        --offload-optimizer "$1" $([ "$1" = disk ] && echo --offload-dir "$dir") 2>&1) || { echo "$out" >&2; exit 1; }
    echo "$(echo "$out" | sed -n 's/^step: \([0-9.]*\) ms.*/\1/p') $(echo "$out" | awk '/^adamw \(with clip\)/ { print $4 }')"
}

echo
echo "== 1. step time, $model, seq $seq, micro-batch $micro, $threads threads, $steps timed steps per run, $rounds rounds"
printf '%-6s %-6s %10s %10s\n' round mode "step ms" "adamw ms"
modes=(none host disk)
for r in $(seq 1 "$rounds"); do
    for k in 0 1 2; do
        m=${modes[$(((k + r - 1) % 3))]}
        read -r st ad < <(run "$m")
        echo "$st" >>"$tmp/$m.step"; echo "$ad" >>"$tmp/$m.adamw"
        printf '%-6s %-6s %10.1f %10.2f\n' "$r" "$m" "$st" "$ad"
    done
done
echo
printf '%-6s %10s %10s %12s\n' mode "step ms" "adamw ms" "step / none"
base=$(median <"$tmp/none.step")
for m in "${modes[@]}"; do
    st=$(median <"$tmp/$m.step") ad=$(median <"$tmp/$m.adamw")
    awk -v m="$m" -v s="$st" -v a="$ad" -v b="$base" 'BEGIN { printf "%-6s %10.1f %10.2f %12.3f\n", m, s, a, s / b }'
done

echo
echo "== 2. disk: the offload file streams 2 x $disk bytes per step (both moments read and written back)"
ad=$(median <"$tmp/disk.adamw")
awk -v d="$disk" -v a="$ad" 'BEGIN { printf "offload tiles: %.2f GB/s (2 x %.0f MB in %.2f ms, update included)\n", 2 * d / (a / 1e3) / 1e9, d / 1e6, a }'
mib=$(((disk + 1048575) / 1048576))
w=$({ dd if=/dev/zero of="$dir/dd.bin" bs=1M count="$mib" 2>&1 >/dev/null; } | awk '/copied/ { print $(NF-1), $NF }')
r=$({ dd if="$dir/dd.bin" of=/dev/null bs=1M 2>&1 >/dev/null; } | awk '/copied/ { print $(NF-1), $NF }')
rm -f "$dir/dd.bin"
echo "dd write $mib MiB: $w; dd read: $r"
