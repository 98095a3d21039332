#!/usr/bin/env bash
# `cleave plan --precision fp32` counts memory as cleave memory does, on
# every description: on a description of this machine without a calibration
# (exact_memory, round figures) every category of the fullest rank equals
# cleave memory's to the byte; on the a100 and h100 descriptions the
# parameters, gradients and optimizer state do (one device, tp, pp, dp with
# ZeRO 1, 2 and 3). bf16 on a GPU is the mixed-precision reading of the same
# statement: parameters, gradients and activations half of fp32's, the
# optimizer 1.5 times (12 bytes a parameter where cleave keeps 8). And the
# planner takes the layouts the trainer takes: gpt2-tiny (2 blocks, 4 units)
# on 3 pipeline stages.
. "$(dirname "$0")/lib.sh"

cat > "$tmp/this.json" << 'EOF'
{"name": "this, no calibration", "peak_flops": {"fp32": 100e9}, "gemm": {"max_efficiency": 0.6, "half_dim": 64},
 "memory_bandwidth": 10e9, "device_memory": 8589934592, "devices_per_node": 8,
 "intra_node": {"bandwidth": 2e9, "latency": 20e-6}, "inter_node": {"bandwidth": 2e9, "latency": 20e-6},
 "exact_memory": true}
EOF
cats="params grads optimizer activations workspace comm"
# field NAME TEXT: the number after "NAME": in TEXT
field() { printf '%s' "$2" | grep -o "\"$1\": [0-9]*" | head -1 | awk '{print $2}'; }
for cfg in "--dp 1 --tp 1 --pp 1 --micro-batch-size 4 --zero 0 --recompute none" \
           "--dp 1 --tp 2 --pp 1 --micro-batch-size 4 --zero 0 --recompute selective" \
           "--dp 1 --tp 2 --pp 1 --micro-batch-size 2 --zero 0 --recompute none --sequence-parallel" \
           "--dp 1 --tp 1 --pp 2 --micro-batch-size 2 --schedule 1f1b --zero 0 --recompute none" \
           "--dp 2 --tp 1 --pp 1 --micro-batch-size 2 --zero 1 --recompute none" \
           "--dp 2 --tp 1 --pp 1 --micro-batch-size 2 --zero 2 --recompute full" \
           "--dp 2 --tp 1 --pp 1 --micro-batch-size 4 --zero 3 --recompute none"; do
    dev=$(( $(printf '%s' "$cfg" | sed 's/--dp \([0-9]*\) --tp \([0-9]*\) --pp \([0-9]*\).*/\1 * \2 * \3/') ))
    pcfg=$cfg
    case $cfg in *"--pp 1 "*) pcfg="$cfg --schedule 1f1b" ;; esac
    case $cfg in *sequence-parallel*) ;; *) pcfg="$pcfg --no-sequence-parallel" ;; esac
    mout=$($CLEAVE memory --model gpt2-tiny --global-batch-size 8 $cfg --json 2>&1)
    # the fullest rank (the first of the largest total, as the planner picks it)
    full=$(printf '%s\n' "$mout" | awk '{ t = $0; sub(/.*"total": /, "", t); sub(/,.*/, "", t); if (NR == 1 || t + 0 > best) { best = t + 0; line = $0 } } END { print line }')
    check '[ -n "$(field params "$full")" ]' "cleave memory $cfg$(excerpt 3 "$mout")"
    for hw in "$tmp/this.json" a100 h100; do
        out=$($CLEAVE plan --hardware "$hw" --model gpt2-tiny --devices "$dev" --global-batch-size 8 $pcfg --precision fp32 --json 2>&1); prc=$?
        check '[ $prc -eq 0 ]' "plan --hardware $hw $cfg fp32: rc $prc$(excerpt 3 "$out")"
        case $hw in a100|h100) want="params grads optimizer" ;; *) want="$cats total" ;; esac
        for k in $want; do
            p=$(field "$k" "$out") m=$(field "$k" "$full")
            [ "$k" = total ] && p=$(field peak_bytes "$out")
            check '[ -n "$p" ] && [ "$p" = "$m" ]' "plan --hardware ${hw##*/} fp32 $cfg: $k $p, cleave memory's $m"
        done
    done
done
# bf16 against fp32 on one A100: the stated mixed-precision reading of the same statement
one="--model gpt2-tiny --devices 1 --global-batch-size 8 --micro-batch-size 4 --zero 0 --recompute none"
f=$($CLEAVE plan $one --precision fp32 --json 2>&1) b=$($CLEAVE plan $one --precision bf16 --json 2>&1)
for kr in params:0.5 grads:0.5 optimizer:1.5 activations:0.5; do
    k=${kr%%:*} r=${kr#*:}
    fv=$(field "$k" "$f") bv=$(field "$k" "$b")
    check '[ -n "$fv" ] && [ -n "$bv" ] && awk -v f="$fv" -v b="$bv" -v r="$r" "BEGIN { exit !(b == f * r) }"' \
        "a100 one device: bf16 $k $bv = $r x fp32's $fv"
done
# the issue's case: gpt2-xl on one A100 in fp32 is cleave memory's figure, not the bf16 one; at micro-batch 16
# it needs 103.2 GiB (the issue's micro-batch 8 needed 101.6 GiB until the blockwise attention dropped the
# T x T scores: 63.3 GiB now, which fits)
xl="--model gpt2-xl --global-batch-size 16 --micro-batch-size 16 --recompute none --zero 0"
pf=$(field peak_bytes "$($CLEAVE plan $xl --devices 1 --device-memory 200GiB --precision fp32 --json 2>&1)")
pb=$(field peak_bytes "$($CLEAVE plan $xl --devices 1 --device-memory 200GiB --precision bf16 --json 2>&1)")
pm=$(field total "$($CLEAVE memory $xl --json 2>&1)")
check '[ -n "$pf" ] && [ "$pf" = "$pm" ] && [ "$pf" != "$pb" ]' "gpt2-xl on one A100: fp32 $pf = cleave memory's $pm, bf16 $pb differs"
out=$($CLEAVE plan --model gpt2-xl --devices 1 --global-batch-size 16 --micro-batch-size 16 --recompute none --precision fp32 2>&1); rc=$?
check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "no configuration fits 80.0 GiB"' \
    "gpt2-xl, mb 16, no recompute, fp32 does not fit one 80 GiB A100$(excerpt 3 "$out")"
# the trainer's layout rule: 3 stages of gpt2-tiny's 4 units (it trains), on a100 and on this machine
for hw in a100 "$tmp/this.json"; do
    out=$($CLEAVE plan --hardware "$hw" --model gpt2-tiny --devices 3 --top 1 --json 2>&1); rc=$?
    check '[ $rc -eq 0 ] && printf "%s" "$out" | grep -q "\"pp\": 3"' "plan --hardware ${hw##*/} --devices 3: pp 3$(excerpt 3 "$out")"
done
out=$($CLEAVE plan --model gpt2-tiny --devices 5 --pp 5 2>&1); rc=$?
check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "no configuration of 5 devices"' "5 stages of 4 units: none$(excerpt 3 "$out")"
out=$($CLEAVE train --model gpt2-tiny --auto --ranks 3 --steps 1 --sample-tokens 0 --eval-batches 1 2>&1); rc=$?
check '[ $rc -eq 0 ] && printf "%s" "$out" | grep -q "auto: chose .*--pp 3"' "--auto --ranks 3 trains on 3 stages$(excerpt 4 "$out")"
finish cli_plan_fp32
