#!/usr/bin/env bash
# cleave memory --device-memory says per rank whether it fits (table column,
# JSON "fits") and exits 2 with the trainer's refusal when a rank does not;
# the refusal is consistent with what follows it (never "nothing fits" above
# configurations that fit), counts the host's memory for host offload (a
# CPU rank's device is the host's memory: device bytes plus the offloaded
# state must fit what the host has), and when nothing fits at this rank
# count the planner proposes another, whose first proposal trains under the
# cap. The demo's one-rank run is refused with the figure the README quotes.
. "$(dirname "$0")/lib.sh"
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 500) > "$tmp/text.txt"
D=(--data "$tmp/text.txt" --threads 1 --eval-batches 1 --sample-tokens 0)

# fits and does not fit, per rank
out=$($CLEAVE memory --model gpt2-tiny --micro-batch-size 8 --device-memory 64MiB 2>&1); rc=$?
check '[ $rc -eq 0 ] && printf "%s" "$out" | grep -q "total  fits$" && printf "%s" "$out" | grep -q "^  0 .* yes$" &&
       printf "%s" "$out" | grep -q "64.0 MiB per rank (--device-memory): fits (1 of 1 rank fits)"' "under 64 MiB: rc $rc$(excerpt 5 "$out")"
$CLEAVE memory --model gpt2-tiny --micro-batch-size 8 --device-memory 4MiB > "$tmp/o" 2> "$tmp/e"; rc=$?
check '[ $rc -eq 2 ] && grep -q "^  0 .* no$" "$tmp/o" && grep -q "does not fit (0 of 1 rank fit)" "$tmp/o" &&
       grep -q "^cleave: error: rank 0 needs .* but the cap is 4.0 MiB" "$tmp/e"' \
    "under 4 MiB: rc $rc$(excerpt 8 "$(cat "$tmp/o" "$tmp/e")")"
# per rank: a fixed two-stage cut with the cap between its ranks' totals
L=(--model gpt2-tiny --pp 2 --pp-layout "E,t|t,L" --micro-batch-size 2 --global-batch-size 8)
t=$($CLEAVE memory "${L[@]}" --json | grep -o '"total": [0-9]*' | awk '{print $2}' | sort -n | tr '\n' ' ')
lo=${t%% *} hi=${t#* }
hi=${hi% }
cap=$(( (lo + hi) / 2 ))
$CLEAVE memory "${L[@]}" --device-memory $cap --json > "$tmp/o" 2> "$tmp/e"; rc=$?
check '[ $lo -lt $hi ] && [ $rc -eq 2 ] && [ "$(grep -c "\"fits\": true" "$tmp/o")" -eq 1 ] && [ "$(grep -c "\"fits\": false" "$tmp/o")" -eq 1 ] &&
       [ "$(grep -vc "^{" "$tmp/o")" -eq 0 ] && grep -q "^cleave: error: rank . (stage .) needs" "$tmp/e"' \
    "pp 2 under $cap ($t): one rank fits, rc $rc, JSON alone on stdout$(excerpt 6 "$(cat "$tmp/o" "$tmp/e")")"
$CLEAVE memory "${L[@]}" --device-memory $cap > "$tmp/o" 2>&1
check 'grep -q "does not fit (1 of 2 ranks fits)" "$tmp/o"' "the table counts the ranks$(excerpt 6 "$(cat "$tmp/o")")"

# no one flag change fits, the planner's do: the refusal says so, and what it lists trains
$CLEAVE train --model gpt2-tiny "${D[@]}" --micro-batch-size 2 --global-batch-size 32 --device-memory 2MiB --recompute full \
    --steps 1 > "$tmp/o" 2> "$tmp/e"; rc=$?
first=$(sed -n '/^planner, .* the nearest/{n;s/^  \(--[^:]*\): peak .* per rank, step .* s.*/\1/p}' "$tmp/o")
check '[ $rc -eq 2 ] && ! grep -qi "nothing near fits" "$tmp/e" && grep -q "No one flag change fits at 1 rank$" "$tmp/e" && [ -n "$first" ]' \
    "2 MiB: rc $rc, the refusal agrees with the list$(excerpt 6 "$(cat "$tmp/e" "$tmp/o")")"
out=$($CLEAVE train --model gpt2-tiny "${D[@]}" $first --global-batch-size 32 --device-memory 2MiB --steps 1 2>&1); rc=$?
check '[ $rc -eq 0 ]' "the first proposal ($first) under 2 MiB: rc $rc$(excerpt 3 "$out")"

# nothing fits one rank: another rank count, whose first proposal trains under the cap
$CLEAVE train --model gpt2-tiny "${D[@]}" --micro-batch-size 2 --global-batch-size 32 --device-memory 1MiB --steps 1 > "$tmp/o" 2>&1; rc=$?
other=$(sed -n 's/^  \(--ranks [0-9]* --[^:]*\): peak .* per rank, step .*/\1/p' "$tmp/o" | head -1)
check '[ $rc -eq 2 ] && grep -q "no configuration of 1 rank fits 1.0 MiB" "$tmp/o" && grep -q "^planner: with --ranks [0-9]*, " "$tmp/o" &&
       [ -n "$other" ]' "1 MiB on one rank: rc $rc, another rank count proposed$(excerpt 8 "$(cat "$tmp/o")")"
out=$($CLEAVE train --model gpt2-tiny "${D[@]}" $other --global-batch-size 32 --device-memory 1MiB --steps 1 2>&1); rc=$?
check '[ $rc -eq 0 ]' "the other count's proposal ($other) under 1 MiB: rc $rc$(excerpt 3 "$out")"

# host offload counts the host: 48B parameters' 367 GiB of moments do not fit beside 371 GiB of device bytes
avail=$(awk '/^MemAvailable:/ {printf "%d", $2 / 1024 / 1024}' /proc/meminfo) # GiB
big=(--layers 32 --channels 11264 --heads 88 --vocab 50257 --context 64 --micro-batch-size 1 --global-batch-size 1)
if [ "$avail" -lt 700 ]; then
    $CLEAVE memory "${big[@]}" --device-memory 600GiB > "$tmp/o" 2> "$tmp/e"; rc=$?
    check '[ $rc -eq 2 ] && grep -q "refused before allocating" "$tmp/e" && ! grep -q "offload-optimizer host" "$tmp/e" "$tmp/o"' \
        "600 GiB per device, host offload not proposed: rc $rc$(excerpt 6 "$(cat "$tmp/e" "$tmp/o")")"
    out=$($CLEAVE memory "${big[@]}" --device-memory 600GiB --offload-optimizer host 2>&1); rc=$?
    check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "^cleave: error: --offload-optimizer host: the 1 rank on this host needs .* but the host has .* available"' \
        "host offload given: refused on the host's memory, rc $rc$(excerpt 6 "$out")"
    cat > "$tmp/this.json" << 'EOF'
{"name": "this", "peak_flops": {"fp32": 100e9}, "gemm": {"max_efficiency": 0.6, "half_dim": 64}, "memory_bandwidth": 10e9,
 "device_memory": 8589934592, "devices_per_node": 2, "intra_node": {"bandwidth": 2e9, "latency": 20e-6},
 "inter_node": {"bandwidth": 2e9, "latency": 20e-6}, "exact_memory": true}
EOF
    out=$($CLEAVE plan --hardware "$tmp/this.json" "${big[@]}" --devices 1 --device-memory 600GiB 2>&1); rc=$?
    check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "no configuration fits 600.0 GiB per device"' \
        "plan: host offload does not fit the host: rc $rc$(excerpt 3 "$out")"
else
    echo "SKIP: this host has more than 700 GiB available"
fi

# the demo's one-rank run: refused, needing what the README says
cap=$(sed -n 's/^cap=//p' scripts/demo.sh)
run=$(sed -n 's/^run=(\(.*\) --device-memory $cap)$/\1/p' scripts/demo.sh)
need=$(grep -o 'it needs [0-9.]* [KMG]iB' README.md | head -1 | sed 's/it needs //')
out=$($CLEAVE train $run --device-memory "$cap" "${D[@]}" --steps 1 2>&1); rc=$?
check '[ -n "$run" ] && [ -n "$need" ] && [ $rc -eq 2 ] && printf "%s" "$out" | grep -q "^cleave: error: rank 0 needs $need but the cap is"' \
    "the demo's one rank under $cap ($run): rc $rc, README says it needs $need$(excerpt 3 "$out")"
check 'grep -q "grep -m1 .\^cleave: error:. build/one-rank.out" scripts/demo.sh' "the demo prints the refusal line"
finish cli_memory_cap
