#!/usr/bin/env bash
# The planner driving a run on this machine (issue 17):
# - `cleave train --auto` on gpt2-tiny prints its choice (flags, predicted
#   step, fullest rank, runner-up) and trains; the same run with the chosen
#   flags given explicitly logs bitwise the same losses and grad norms; a
#   flag given fixes its dimension; a cap nothing fits exits 2 with one line
#   naming the smallest shortfall;
# - the out-of-memory refusal of a run over its cap (one line on stderr, as
#   before) lists on stdout the planner's nearest fitting configurations of
#   as many ranks, and the first of them trains under that cap; under a cap
#   nothing fits it says so; under MPI rank 0 lists them once;
# - `cleave plan --svg F`: well-formed XML (python3's xml.etree) with one
#   memory bar and one timeline row per pipeline rank and communication
#   strips; a path that cannot be written exits 2 with one line;
# - context parallelism: at a long sequence under a small cap --auto chooses and runs cp 2;
# - a description file, when there is one, is used and decides (a slow link:
#   a pipeline; a fast one: data parallelism); one that is not this
#   machine's (no exact_memory) exits 2.
# Without a calibration file (CLEAVE_HW points at none) the default figures
# are used, so the choice does not depend on this machine's load.
set -u
source "$(dirname "$0")/lib.sh"
export CLEAVE_HW="$tmp/none.json"
head -c 200000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --seq-len 32 --steps 4 --sample-tokens 0 --eval-batches 2)

# --auto: choice printed, then trained
out=$($CLEAVE train --auto "${common[@]}" --log-file "$tmp/auto.log" 2>&1); rc=$?
chose=$(printf '%s\n' "$out" | sed -n 's/^auto: chose \(.*\): the fastest predicted that fits, step .*/\1/p')
check '[ $rc -eq 0 ] && [ -n "$chose" ] && printf "%s" "$out" | grep -q "^auto: runner-up" && printf "%s" "$out" | grep -q "fullest rank" &&
       [ "$(grep -c "\"loss\"" "$tmp/auto.log")" -ge 4 ]' "--auto trains and prints its choice (rc $rc)$(excerpt 6 "$out")"
# the chosen flags given explicitly: the same losses and grad norms, bit for bit
$CLEAVE train $chose "${common[@]}" --log-file "$tmp/explicit.log" > "$tmp/explicit.out" 2>&1
fields() { grep -o '"\(loss\|grad_norm\)": [^,]*' "$1"; }
check '[ -n "$(fields "$tmp/auto.log")" ] && [ "$(fields "$tmp/auto.log")" = "$(fields "$tmp/explicit.log")" ]' \
    "--auto ($chose) and the same flags given: losses differ$(excerpt 4 "$(paste <(fields "$tmp/auto.log") <(fields "$tmp/explicit.log"))")"
# a dimension given is fixed
out=$($CLEAVE train --auto --pp 2 --micro-batch-size 2 --global-batch-size 8 "${common[@]}" --steps 2 2>&1); rc=$?
check '[ $rc -eq 0 ] && printf "%s" "$out" | grep -q "^auto: chose --dp 1 --tp 1 --pp 2 --micro-batch-size 2 " &&
       printf "%s" "$out" | grep -q "mesh dp 1 x tp 1 x pp 2"' "--auto --pp 2 --micro-batch-size 2 (rc $rc)$(excerpt 4 "$out")"
# nothing fits (not even with the moments offloaded to the host, which fits under 1 MiB): exit 2,
# one line, the smallest shortfall
out=$($CLEAVE train --auto "${common[@]}" --device-memory 512KiB 2>&1); rc=$?
check '[ $rc -eq 2 ] && [ "$(printf "%s\n" "$out" | grep -c "")" -eq 1 ] &&
       printf "%s" "$out" | grep -q "no configuration of 2 ranks fits 512.0 KiB per rank: the smallest shortfall is .* over (--dp"' \
    "--auto under 512 KiB: rc $rc$(excerpt 3 "$out")"
# a description file is used when there is one, and it decides: over a slow link a pipeline (fewer
# bytes between the ranks than dp's gradient all-reduce), over a fast one data parallelism
desc() { # BANDWIDTH [exact_memory]: a description of two devices
    printf '{"name": "handmade", "peak_flops": {"fp32": 1e11}, "gemm": {"max_efficiency": 0.5, "half_dim": 64},
      "memory_bandwidth": 1e10, "device_memory": 4e9, "devices_per_node": 2, "intra_node": {"bandwidth": %s, "latency": 1e-5},
      "inter_node": {"bandwidth": %s, "latency": 1e-5}%s}\n' "$1" "$1" "${2:+, \"exact_memory\": true}"
}
desc 1e3 x > "$tmp/slow.json"; desc 1e12 x > "$tmp/fast.json"; desc 1e12 > "$tmp/gpu.json"
out=$(CLEAVE_HW="$tmp/slow.json" $CLEAVE train --auto "${common[@]}" --steps 1 2>&1); rc=$?
check '[ $rc -eq 0 ] && printf "%s" "$out" | grep -q "as calibrated in $tmp/slow.json" && printf "%s" "$out" | grep -q "^auto: chose --dp 1 --tp 1 --pp 2 "' \
    "slow link: a pipeline (rc $rc)$(excerpt 3 "$out")"
out=$(CLEAVE_HW="$tmp/fast.json" $CLEAVE train --auto "${common[@]}" --steps 1 2>&1); rc=$?
check '[ $rc -eq 0 ] && printf "%s" "$out" | grep -q "^auto: chose --dp 2 --tp 1 --pp 1 "' "fast link: data parallel (rc $rc)$(excerpt 3 "$out")"
out=$(CLEAVE_HW="$tmp/gpu.json" $CLEAVE train --auto "${common[@]}" --steps 1 2>&1); rc=$?
check '[ $rc -eq 2 ] && [ "$(printf "%s\n" "$out" | grep -c "")" -eq 1 ] && printf "%s" "$out" | grep -q "not a description of this machine"' \
    "a description without exact_memory: rc $rc$(excerpt 2 "$out")"

# the refusal lists the planner's nearest fitting configurations, and the first fits
$CLEAVE train "${common[@]}" --dp 2 --micro-batch-size 8 --global-batch-size 16 --device-memory 4MiB > "$tmp/ref.out" 2> "$tmp/ref.err"
rc=$?
first=$(sed -n '/^planner, .* the nearest/{n;s/^  \(--[^:]*\): peak .* per rank, step .* s.*/\1/p}' "$tmp/ref.out")
check '[ $rc -eq 2 ] && [ "$(grep -c "" "$tmp/ref.err")" -eq 1 ] && grep -q "refused before allocating" "$tmp/ref.err" &&
       [ "$(grep -c "^  --dp 2 " "$tmp/ref.out")" -ge 2 ] && [ -n "$first" ]' \
    "refusal (rc $rc) lists the nearest fitting configurations$(excerpt 6 "$(cat "$tmp/ref.err" "$tmp/ref.out")")"
out=$($CLEAVE train "${common[@]}" $first --global-batch-size 16 --device-memory 4MiB --steps 1 2>&1); rc=$?
check '[ $rc -eq 0 ] && printf "%s" "$out" | grep -q "step *1/1"' "the first proposal ($first) under 4 MiB: rc $rc$(excerpt 3 "$out")"
$CLEAVE train "${common[@]}" --dp 2 --micro-batch-size 8 --global-batch-size 16 --device-memory 512KiB > "$tmp/none.out" 2>&1
rc=$?
check '[ $rc -eq 2 ] && grep -q "^planner, .*: no configuration of 2 ranks fits 512.0 KiB per rank: the smallest shortfall" "$tmp/none.out"' \
    "refusal under 512 KiB says nothing fits$(excerpt 3 "$(cat "$tmp/none.out")")"
# under MPI: both ranks refuse, rank 0 lists what fits once
if "$CLEAVE" --version | grep -q "mpi: yes" && command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
    timeout -k 5 120 mpirun --oversubscribe -np 2 "$CLEAVE" train --comm mpi "${common[@]}" --dp 2 --micro-batch-size 8 \
        --global-batch-size 16 --device-memory 4MiB > "$tmp/mpi.out" 2> "$tmp/mpi.err"
    rc=$?
    check '[ $rc -ne 0 ] && [ "$(grep -c "^planner, .* the nearest" "$tmp/mpi.out")" -eq 1 ] && grep -q "^  --dp 2 " "$tmp/mpi.out" &&
           grep -q "rank 0 failed: .*refused before allocating" "$tmp/mpi.err"' \
        "MPI refusal (rc $rc)$(excerpt 4 "$(cat "$tmp/mpi.out" "$tmp/mpi.err")")"
else
    skip "MPI refusal (this build has no MPI)" setup
fi

# plan --svg: XML, a bar and a timeline row per pipeline rank, communication drawn
svgcheck() { # FILE PP: well-formed, PP bars, PP rows, some comm strips
    /usr/bin/python3 - "$1" "$2" <<'EOF'
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
pp = int(sys.argv[2])
bars = [g for g in root.iter(ns + "g") if g.get("class") == "membar"]
rows = [t for t in root.iter(ns + "text") if t.get("class") == "row"]
comm = [r for r in root.iter(ns + "rect") if r.get("class") == "comm"]
acts = [r for r in root.iter(ns + "rect") if (r.get("class") or "").startswith("act ")]
ok = root.tag == ns + "svg" and len(bars) == pp and len(rows) == pp and comm and acts
ok = ok and all(len(b.findall(ns + "rect")) >= 3 for b in bars)
print("bars", len(bars), "rows", len(rows), "comm", len(comm), "acts", len(acts))
sys.exit(0 if ok else 1)
EOF
}
out=$($CLEAVE plan --model gpt2 --devices 16 --global-batch-size 32 --pp 4 --tp 2 --micro-batch-size 2 --top 1 --svg "$tmp/a.svg" 2>&1)
rc=$?
check '[ $rc -eq 0 ] && r=$(svgcheck "$tmp/a.svg" 4)' "plan --svg, pp 4 x tp 2 on a100: $(svgcheck "$tmp/a.svg" 4 2>&1 | tail -1)$(excerpt 3 "$out")"
out=$($CLEAVE plan --model gpt2-tiny --hardware a100 --devices 2 --pp 2 --top 1 --svg "$tmp/b.svg" 2>&1)
rc=$?
check '[ $rc -eq 0 ] && r=$(svgcheck "$tmp/b.svg" 2)' "plan --svg, pp 2: $(svgcheck "$tmp/b.svg" 2 2>&1 | tail -1)$(excerpt 3 "$out")"
out=$($CLEAVE plan --devices 2 --pp 2 --svg "$tmp/no/such/dir/x.svg" 2>&1); rc=$?
check '[ $rc -eq 2 ] && [ "$(printf "%s\n" "$out" | grep -c "")" -eq 1 ] && printf "%s" "$out" | grep -q -- "--svg"' \
    "plan --svg to a bad path: rc $rc$(excerpt 2 "$out")"
# context parallelism: a long sequence for llama-tiny (T = 512) under 5.5 MiB a rank, tp fixed at 1 and no
# recompute: cp 2 is the fastest that fits (predicted 0.036 s against --cp 1's only fit, a pipeline with the
# moments on the host, 0.066 s); --auto runs it at cp 2 (the log's resolved configuration records "cp": 2)
cpb=(--model llama-tiny --context 512 --data "$tmp/text.txt" --seq-len 512 --global-batch-size 1 --micro-batch-size 1 --tp 1
     --recompute none --device-memory 5.5MiB --sample-tokens 0 --eval-batches 1 --steps 2)
out=$($CLEAVE train --auto "${cpb[@]}" --log-file "$tmp/cp.log" 2>&1); rc=$?
check '[ $rc -eq 0 ] && printf "%s" "$out" | grep -q "^auto: chose --dp 1 --cp 2 --tp 1 --pp 1 " && head -1 "$tmp/cp.log" | grep -q "\"cp\": 2" &&
       [ "$(grep -c "\"loss\"" "$tmp/cp.log")" -ge 2 ]' "--auto at T = 512 under 5.5 MiB: cp 2 (rc $rc)$(excerpt 4 "$out")"
out=$($CLEAVE train --auto "${cpb[@]}" --cp 1 --steps 1 2>&1); rc=$?
check '[ $rc -eq 0 ] && printf "%s" "$out" | grep -q "^auto: chose --dp 1 --tp 1 --pp 2 .*--offload-optimizer host"' \
    "--auto --cp 1 fixes it: a pipeline with the moments on the host (rc $rc)$(excerpt 3 "$out")"
finish cli_auto
