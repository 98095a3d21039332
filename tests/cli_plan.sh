#!/usr/bin/env bash
# `cleave plan`: a search prints a table fastest first and --json one object
# per configuration with its flags, fits, step_s, tokens_per_s,
# model_tflops_per_device, bubble, peak_bytes and bytes by category; a fully
# fixed configuration prints only itself; the 1T-parameter search on 3072
# A100s answers with its three fastest (its time: bench/plan_search.sh); calibrate writes a description that
# --hardware this reads and whose memory is the exact predictor's (cleave
# memory's bytes); bad input (hardware file with a missing or negative field,
# a device count nothing divides, a model that fits nothing, bf16 on a
# description without BF16 rates, offload on a GPU description, disk offload without a
# disk_bandwidth) exits 2 with one line. ZeRO 2 and 3 and optimizer offload
# on this machine: the same bytes as cleave memory, or the same refusal.
. "$(dirname "$0")/lib.sh"

out=$($CLEAVE plan --model gpt2-xl --devices 64 --global-batch-size 512 --seq-len 1024 --top 5 2>&1); rc=$?
check '[ $rc -eq 0 ] && [ "$(printf "%s\n" "$out" | grep -c "^ *[0-9]\+ ")" -eq 5 ]' "gpt2-xl on 64: five rows$(excerpt 8 "$out")"
# fastest first: step_s ascending
$CLEAVE plan --model gpt2-xl --devices 64 --global-batch-size 512 --seq-len 1024 --top 20 --json > "$tmp/j" 2>&1
check '[ "$(wc -l < "$tmp/j")" -eq 20 ]' "20 JSON lines"
check 'grep -o "\"step_s\": [0-9.e+-]*" "$tmp/j" | awk "{print \$2}" | sort -g -c' "step_s ascending"
for k in dp tp pp virtual_stages micro_batch_size schedule zero recompute sequence_parallel fits step_s tokens_per_s \
         model_tflops_per_device bubble peak_bytes '"bytes": {"params"'; do
    check 'grep -q "\"${k#\"}" "$tmp/j" || grep -q "$k" "$tmp/j"' "JSON has $k"
done
# a fully fixed configuration prints its own prediction only
out=$($CLEAVE plan --model gpt2-xl --devices 64 --global-batch-size 512 --seq-len 1024 --dp 16 --tp 1 --pp 4 --micro-batch-size 2 \
      --schedule 1f1b --zero 1 --recompute full --no-sequence-parallel --precision bf16 --json 2>&1)
check '[ "$(printf "%s\n" "$out" | wc -l)" -eq 1 ] && printf "%s" "$out" | grep -q "\"dp\": 16, \"tp\": 1, \"pp\": 4"' \
    "fixed configuration$(excerpt 3 "$out")"
# 1T parameters (Narayanan et al.'s largest row) on 3072 A100s: three rows (how fast: bench/plan_search.sh)
out=$($CLEAVE plan --layers 128 --channels 25600 --heads 160 --vocab 51200 --context 2048 --devices 3072 \
      --global-batch-size 3072 --top 3 2>&1); rc=$?
check '[ $rc -eq 0 ] && [ "$(printf "%s\n" "$out" | grep -c "^ *[0-9]\+ ")" -eq 3 ]' "1T on 3072 devices: three rows (rc $rc)$(excerpt 8 "$out")"
# this machine: calibrate, then the exact predictor's bytes
CLEAVE_HW="$tmp/this.json" $CLEAVE plan calibrate --repeat 1 > "$tmp/cal" 2>&1
check '[ -s "$tmp/this.json" ] && grep -q "\"exact_memory\": true" "$tmp/this.json"' "calibrate wrote a description$(excerpt 3 "$(cat "$tmp/cal")")"
# the fullest rank's bytes equal cleave memory's for the same run: pp 2 (1f1b, zb-h1), tp 2 with sp, dp 2 with ZeRO 1, full recompute
for cfg in "--dp 1 --tp 1 --pp 2 --micro-batch-size 2 --schedule 1f1b --zero 0 --recompute none" \
           "--dp 1 --tp 1 --pp 2 --micro-batch-size 1 --schedule zb-h1 --zero 0 --recompute selective" \
           "--dp 1 --tp 2 --pp 1 --micro-batch-size 4 --schedule 1f1b --zero 0 --recompute none --sequence-parallel" \
           "--dp 2 --tp 1 --pp 1 --micro-batch-size 2 --schedule 1f1b --zero 1 --recompute full" \
           "--dp 2 --tp 1 --pp 1 --micro-batch-size 2 --schedule 1f1b --zero 2 --recompute none" \
           "--dp 2 --tp 1 --pp 1 --micro-batch-size 4 --schedule 1f1b --zero 3 --recompute selective" \
           "--dp 1 --tp 1 --pp 2 --micro-batch-size 1 --schedule 1f1b --zero 0 --recompute none --offload-optimizer host" \
           "--dp 2 --tp 1 --pp 1 --micro-batch-size 2 --schedule 1f1b --zero 3 --recompute none --offload-optimizer disk" \
           "--dp 2 --tp 1 --pp 1 --micro-batch-size 1 --schedule 1f1b --zero 2 --recompute full --offload-optimizer host" \
           "--dp 2 --tp 1 --pp 2 --micro-batch-size 1 --schedule 1f1b --zero 3 --recompute none" \
           "--dp 2 --tp 1 --pp 2 --micro-batch-size 1 --schedule zb-h1 --zero 2 --recompute none" \
           "--dp 2 --tp 1 --pp 2 --micro-batch-size 1 --schedule zb-h1 --zero 3 --recompute none" \
           "--dtype bf16 --dp 1 --tp 1 --pp 2 --micro-batch-size 2 --schedule 1f1b --zero 0 --recompute none" \
           "--dtype bf16 --dp 1 --tp 2 --pp 1 --micro-batch-size 4 --schedule 1f1b --zero 0 --recompute none --sequence-parallel" \
           "--dtype bf16 --dp 2 --tp 1 --pp 1 --micro-batch-size 2 --schedule 1f1b --zero 1 --recompute full" \
           "--dtype bf16 --dp 2 --tp 1 --pp 1 --micro-batch-size 4 --schedule 1f1b --zero 3 --recompute selective" \
           "--dtype bf16 --dp 2 --tp 1 --pp 2 --micro-batch-size 1 --schedule zb-h1 --zero 2 --recompute none"; do
    dev=$(( $(printf '%s' "$cfg" | sed 's/.*--dp \([0-9]*\) --tp \([0-9]*\) --pp \([0-9]*\).*/\1 * \2 * \3/') ))
    out=$(CLEAVE_HW="$tmp/this.json" $CLEAVE plan --hardware this --model gpt2-tiny --devices "$dev" --global-batch-size 8 $cfg \
          --json 2>&1); prc=$?
    peak=$(printf '%s' "$out" | grep -o '"peak_bytes": [0-9]*' | awk '{print $2}')
    mcfg=$(printf '%s' "$cfg" | sed 's/--pp 1 --micro-batch-size \([0-9]*\) --schedule 1f1b/--pp 1 --micro-batch-size \1/')
    case $cfg in *disk*) mcfg="$mcfg --offload-dir $tmp" ;; esac
    mout=$($CLEAVE memory --model gpt2-tiny --global-batch-size 8 $mcfg --json 2>&1); mrc=$?
    mem=$(printf '%s' "$mout" | grep -o '"total": [0-9]*' | awk '{print $2}' | sort -n | tail -1)
    if [ $mrc -eq 0 ]; then
        check '[ $prc -eq 0 ] && [ -n "$peak" ] && [ "$peak" = "$mem" ]' \
            "this machine, $cfg: plan's peak $peak = cleave memory's $mem$(excerpt 3 "$out")"
    else # what the trainer refuses (e.g. ZeRO 2/3 under zb-h1 before it is built) the planner refuses with its reason
        why=$(printf '%s' "$mout" | sed 's/^cleave: error: //')
        check '[ $prc -eq 2 ] && printf "%s" "$out" | grep -qF -- "$why"' \
            "this machine, $cfg: cleave memory refuses ($why), so does plan$(excerpt 3 "$out")"
    fi
done
# the search: ZeRO 2 and 3 are searched on this machine; offload is tried where the moments do not fit
out=$(CLEAVE_HW="$tmp/this.json" $CLEAVE plan --hardware this --model gpt2-tiny --devices 2 --global-batch-size 8 --top 100 --json 2>&1)
for z in 2 3; do
    check 'printf "%s" "$out" | grep -q "\"zero\": $z,"' "the search on this machine has ZeRO $z$(excerpt 3 "$out")"
done
check '! printf "%s" "$out" | grep -q "\"offload_optimizer\": \"host\""' "no offload where everything fits"
# a cap the moments on the device exceed but host offload meets: zero 0 on one device, 1 rank
one=$(CLEAVE_HW="$tmp/this.json" $CLEAVE plan --hardware this --model gpt2-tiny --devices 1 --global-batch-size 8 \
      --micro-batch-size 8 --recompute none --json 2>&1 | grep -o '"optimizer": [0-9]*' | awk '{print $2}')
peak1=$(CLEAVE_HW="$tmp/this.json" $CLEAVE plan --hardware this --model gpt2-tiny --devices 1 --global-batch-size 8 \
        --micro-batch-size 8 --recompute none --json 2>&1 | grep -o '"peak_bytes": [0-9]*' | awk '{print $2}')
out=$(CLEAVE_HW="$tmp/this.json" $CLEAVE plan --hardware this --model gpt2-tiny --devices 1 --global-batch-size 8 \
      --micro-batch-size 8 --recompute none --device-memory $((peak1 - one / 2)) --json 2>&1)
check 'printf "%s" "$out" | head -1 | grep -q "\"offload_optimizer\": \"\(host\|disk\)\""' \
    "under a cap the moments exceed, the search offloads them$(excerpt 3 "$out")"
# disk offload is slower than host by the file's stream (16 bytes a parameter at disk_bandwidth)
h=$(CLEAVE_HW="$tmp/this.json" $CLEAVE plan --hardware this --model gpt2-tiny --devices 1 --global-batch-size 8 --micro-batch-size 8 \
    --recompute none --offload-optimizer host --json | grep -o '"step_s": [0-9.e+-]*' | awk '{print $2}')
d=$(CLEAVE_HW="$tmp/this.json" $CLEAVE plan --hardware this --model gpt2-tiny --devices 1 --global-batch-size 8 --micro-batch-size 8 \
    --recompute none --offload-optimizer disk --json | grep -o '"step_s": [0-9.e+-]*' | awk '{print $2}')
check '[ -n "$h" ] && [ -n "$d" ] && awk -v h="$h" -v d="$d" "BEGIN { exit !(d >= h) }"' "disk offload $d s >= host $h s"
# the threads backend's collectives run on the ranks' cores (calibrate says so): ZeRO 3's gathers add to its
# passes instead of hiding under the unit before, so the description without the field predicts less
grep -q '"collectives_on_cores": true' "$tmp/this.json"; _rc=$?
check '[ $_rc -eq 0 ]' "calibrate writes collectives_on_cores: true"
sed '/"collectives_on_cores"/d' "$tmp/this.json" > "$tmp/h4.json"
z3() { $CLEAVE plan --hardware "$1" --model gpt2-tiny --devices 2 --global-batch-size 8 --dp 2 --tp 1 --pp 1 --micro-batch-size 4 \
    --zero 3 --recompute none --json | grep -o '"step_s": [0-9.e+-]*' | awk '{print $2}'; }
on=$(z3 "$tmp/this.json") off=$(z3 "$tmp/h4.json")
check '[ -n "$on" ] && [ -n "$off" ] && awk -v a="$on" -v b="$off" "BEGIN { exit !(a > b) }"' "zero 3 on the cores $on s > overlapped $off s"
# bad input: exit 2, one line
expect2() {
    local want=$1; shift
    local o; o=$("$@" 2>&1); local r=$?
    check '[ $r -eq 2 ] && [ "$(printf "%s\n" "$o" | wc -l)" -eq 1 ] && printf "%s" "$o" | grep -q "$want"' \
        "$* -> rc $r, want 2 and '$want'$(excerpt 3 "$o")"
}
echo '{"name": "x", "peak_flops": {"fp32": 1e12}}' > "$tmp/h1.json"
sed 's/"memory_bandwidth": [0-9.e+]*/"memory_bandwidth": -5/' "$tmp/this.json" > "$tmp/h2.json"
expect2 "missing object gemm" $CLEAVE plan --hardware "$tmp/h1.json" --devices 2
expect2 "memory_bandwidth = -5 is outside its plausible range" $CLEAVE plan --hardware "$tmp/h2.json" --devices 2
expect2 "no configuration of 7 devices" $CLEAVE plan --devices 7 --global-batch-size 8 --tp 2
expect2 "no configuration fits 1.0 GiB per device: the nearest" $CLEAVE plan --model gpt2-xl --devices 8 --device-memory 1GiB
expect2 "modelled on this machine only" $CLEAVE plan --devices 8 --offload-optimizer host
expect2 "unknown --offload-optimizer" env CLEAVE_HW="$tmp/this.json" $CLEAVE plan --hardware this --devices 2 --offload-optimizer nvme
sed '/"disk_bandwidth"/d' "$tmp/this.json" > "$tmp/h3.json"
expect2 "has no disk_bandwidth" $CLEAVE plan --hardware "$tmp/h3.json" --devices 2 --dp 2 --tp 1 --pp 1 --micro-batch-size 4 \
    --zero 0 --recompute none --offload-optimizer disk
# a description from before calibrate measured the BF16 rates: bf16 refused, saying so; a bf16 table without its peak
sed -e 's/, "bf16": [0-9.e+]*//' -e '/"gemm_bf16"/,/\]\]},$/d' "$tmp/this.json" > "$tmp/h7.json"
expect2 "has no bf16 peak (run .cleave plan calibrate. again" env CLEAVE_HW="$tmp/h7.json" $CLEAVE plan --hardware this --devices 2 \
    --precision bf16
sed -e 's/, "bf16": [0-9.e+]*//' "$tmp/this.json" > "$tmp/h8.json"
expect2 "gemm_bf16 needs peak_flops.bf16" $CLEAVE plan --hardware "$tmp/h8.json" --devices 2
check 'grep -q "\"gemm_bf16\": {\"table\"" "$tmp/this.json" && grep -q "\"bf16\": [0-9]" "$tmp/this.json"' "calibrate measured the BF16 rates"
expect2 "run .cleave plan calibrate. first" env CLEAVE_HW="$tmp/none.json" $CLEAVE plan --hardware this --devices 2
expect2 "give --devices" $CLEAVE plan
sed 's/"collectives_on_cores": true/"collectives_on_cores": 1/' "$tmp/this.json" > "$tmp/h5.json"
expect2 "collectives_on_cores must be true or false" $CLEAVE plan --hardware "$tmp/h5.json" --devices 2
sed 's/"attention_causal_blocks": true/"attention_causal_blocks": "yes"/' "$tmp/this.json" > "$tmp/h6.json"
expect2 "attention_causal_blocks must be true or false" $CLEAVE plan --hardware "$tmp/h6.json" --devices 2
# context parallelism: --cp 2 fixes it (every row's cp column 2, the JSON's "cp": 2); what the trainer refuses
# (T not cut into 2 cp chunks) is refused up front in its words
out=$($CLEAVE plan --model llama-tiny --seq-len 64 --devices 4 --hardware "$tmp/this.json" --cp 2 --top 5 2>&1); rc=$?
rows=$(printf '%s\n' "$out" | awk '$1 ~ /^[0-9]+$/ && NF > 10')
check '[ $rc -eq 0 ] && [ -n "$rows" ] && printf "%s\n" "$rows" | awk "{ if (\$3 != 2) bad = 1 } END { exit bad }" &&
       printf "%s" "$out" | grep -q " cp  ep  tp "' "plan --cp 2: every row at cp 2 (rc $rc)$(excerpt 6 "$out")"
out=$($CLEAVE plan --model llama-tiny --seq-len 64 --devices 4 --hardware "$tmp/this.json" --cp 2 --json 2>&1)
check 'printf "%s\n" "$out" | grep -q "\"cp\": 2" && ! printf "%s\n" "$out" | grep -q "\"cp\": 1"' "plan --cp 2 --json$(excerpt 2 "$out")"
expect2 "does not split into 2 x --cp 2 = 4 equal chunks" $CLEAVE plan --model llama-tiny --seq-len 30 --devices 4 --cp 2
# --cp with --sequence-parallel trains (sp's shards of each context rank's rows): fixed, every row has both
out=$($CLEAVE plan --model llama-tiny --seq-len 64 --devices 4 --hardware "$tmp/this.json" --cp 2 --tp 2 --sequence-parallel --top 5 2>&1)
rc=$?; rows=$(printf '%s\n' "$out" | awk '$1 ~ /^[0-9]+$/ && NF > 10')
check '[ $rc -eq 0 ] && [ -n "$rows" ] && printf "%s\n" "$rows" | awk "{ if (\$3 != 2 || \$5 != 2 || \$12 != \"y\") bad = 1 } END { exit bad }"' \
    "plan --cp 2 --tp 2 --sequence-parallel: every row cp 2, tp 2, sp (rc $rc)$(excerpt 6 "$out")"
# and searched with cp where not fixed: --cp 2 --tp 2 alone lists rows with and without sp
out=$($CLEAVE plan --model llama-tiny --seq-len 64 --devices 4 --hardware "$tmp/this.json" --cp 2 --tp 2 --top 20 2>&1)
rows=$(printf '%s\n' "$out" | awk '$1 ~ /^[0-9]+$/ && NF > 10')
check 'printf "%s\n" "$rows" | awk "\$12 == \"y\" { y = 1 } \$12 == \"n\" { n = 1 } END { exit !(y && n) }"' \
    "plan --cp 2 --tp 2: sp not searched with cp$(excerpt 6 "$out")"
# --dtype: train's word for --precision (issue 30 item 7's `cleave plan ... --dtype bf16`), the same plan; both at
# once must agree
a=$($CLEAVE plan --model llama-tiny --devices 8 --hardware h100 --precision bf16 --json 2>&1)
b=$($CLEAVE plan --model llama-tiny --devices 8 --hardware h100 --dtype bf16 --json 2>&1)
check '[ -n "$a" ] && [ "$a" = "$b" ] && printf "%s\n" "$a" | grep -q "\"precision\": \"bf16\""' "plan --dtype bf16 differs from --precision bf16$(excerpt 2 "$b")"
expect2 "precision fp32 and --dtype bf16 disagree" $CLEAVE plan --model llama-tiny --devices 2 --hardware h100 --dtype bf16 --precision fp32
# Expert parallelism (issue 33 item 5). The step's predicted all-to-all bytes equal what a run sends
# (moe_a2a_bytes[0], this rank's) where routing fills every expert: mixtral-tiny at dp 2 ep 2 with a capacity
# factor of 0.125 (cap = ceil(0.125 x 32 x 2 / 8) = 1 slot an expert, rank and micro-batch): every expert of every
# rank, micro-batch and block filled exactly when the step drops 512 - 2 ranks x 2 micro-batches x 2 blocks x 8
# = 448 of its 512 slots; such steps must equal the plan (no recompute and full), every step at most it
head -c 300000 data/kjv.txt > "$tmp/kjv.txt"
for rc in none full; do
    "$CLEAVE" train --model mixtral-tiny --data "$tmp/kjv.txt" --seq-len 16 --micro-batch-size 2 --global-batch-size 8 --steps 6 \
        --sample-tokens 0 --eval-batches 1 --threads 1 --dp 2 --ep 2 --moe-capacity-factor 0.125 --recompute $rc \
        --log-file "$tmp/ep_$rc.jsonl" > "$tmp/ep_$rc.out" 2>&1; trc=$?
    pred=$("$CLEAVE" plan --model mixtral-tiny --seq-len 16 --devices 2 --dp 2 --ep 2 --micro-batch-size 2 --global-batch-size 8 \
        --moe-capacity-factor 0.125 --hardware a100 --precision fp32 --zero 0 --recompute $rc --json --top 1 2>&1 |
        grep -o '"a2a_bytes": [0-9]*' | awk '{print $2}')
    got=$(grep '"moe_dropped"' "$tmp/ep_$rc.jsonl" | sed 's/.*"moe_dropped": \([0-9]*\).*"moe_a2a_bytes": \[\([0-9]*\),.*/\1 \2/')
    full=$(printf '%s\n' "$got" | awk -v p="$pred" '$1 == 448 { if ($2 == p) n++; else bad = 1 } $2 > p { bad = 1 } END { print bad ? -1 : n + 0 }')
    echo "ep 2 recompute $rc: predicted $pred B a step; measured (dropped, bytes): $(echo $got)"
    check '[ $trc -eq 0 ] && [ -n "$pred" ] && [ "$pred" -gt 0 ] && [ "$full" -ge 1 ]' \
        "recompute $rc: moe_a2a_bytes (dropped, sent) $(echo $got) against the plan's $pred (rc $trc)"
done
# ep in the search and the table; --ep fixes it with its all-to-all time; mixtral-8x7b on 64 H100s
out=$($CLEAVE plan --model mixtral-8x7b --devices 64 --hardware h100 --seq-len 4096 --global-batch-size 256 --top 3 2>&1); rc=$?
check '[ $rc -eq 0 ] && printf "%s" "$out" | grep -q " cp  ep  tp .* a2a s "' "mixtral-8x7b: the ep and a2a columns$(excerpt 6 "$out")"
out=$($CLEAVE plan --model mixtral-8x7b --devices 64 --hardware h100 --seq-len 4096 --global-batch-size 256 --ep 8 --top 3 2>&1); rc=$?
rows=$(printf '%s\n' "$out" | awk '$1 ~ /^[0-9]+$/ && NF > 10')
check '[ $rc -eq 0 ] && [ -n "$rows" ] && printf "%s\n" "$rows" | awk "{ if (\$4 != 8 || !(\$20 > 0)) bad = 1 } END { exit bad }"' \
    "mixtral-8x7b --ep 8: every row at ep 8 with an all-to-all time$(excerpt 6 "$out")"
# the memory at ep: cleave memory's bytes (fp32: the trainer's predictor)
for cap in 0 0.25; do
    pj=$($CLEAVE plan --model mixtral-tiny --seq-len 16 --devices 4 --dp 4 --ep 4 --micro-batch-size 2 --global-batch-size 8 \
         --moe-capacity-factor $cap --hardware a100 --precision fp32 --zero 1 --recompute none --json 2>&1)
    peak=$(printf '%s' "$pj" | grep -o '"peak_bytes": [0-9]*' | awk '{print $2}')
    mem=$($CLEAVE memory --model mixtral-tiny --seq-len 16 --dp 4 --ep 4 --micro-batch-size 2 --global-batch-size 8 \
          --moe-capacity-factor $cap --zero 1 --json 2>&1 | grep -o '"total": [0-9]*' | awk '{print $2}' | sort -n | tail -1)
    check '[ -n "$peak" ] && [ "$peak" = "$mem" ]' "ep 4 capacity $cap: plan's peak $peak = cleave memory's $mem$(excerpt 2 "$pj")"
done
# --auto with --ep fixed runs it (its all-to-alls in the step log)
CLEAVE_HW="$tmp/none.json" "$CLEAVE" train --model mixtral-tiny --data "$tmp/kjv.txt" --seq-len 16 --global-batch-size 8 --steps 2 \
    --sample-tokens 0 --eval-batches 1 --threads 1 --auto --ranks 2 --ep 2 --log-file "$tmp/auto_ep.jsonl" > "$tmp/auto_ep.out" 2>&1; arc=$?
check '[ $arc -eq 0 ] && grep -q "auto: chose --dp 2 --ep 2 " "$tmp/auto_ep.out" && [ "$(grep -c moe_a2a_bytes "$tmp/auto_ep.jsonl")" -eq 2 ]' \
    "--auto --ep 2$(excerpt 3 "$(cat "$tmp/auto_ep.out")")"
expect2 "ep 3 must divide the 8 experts" $CLEAVE plan --model mixtral-tiny --devices 4 --ep 3
expect2 "ep 2: the model has no experts" $CLEAVE plan --model llama-tiny --devices 4 --ep 2
expect2 "unknown --cp-comm" $CLEAVE plan --model llama-tiny --devices 4 --cp 2 --cp-comm star
# --ffn-channels: accepted for Llama models as cleave train reads it (the plan's memory is cleave memory's at that
# width), refused for GPT's
pj=$($CLEAVE plan --model llama-tiny --ffn-channels 512 --seq-len 32 --devices 2 --dp 2 --micro-batch-size 2 --global-batch-size 8 \
     --hardware a100 --precision fp32 --zero 0 --recompute none --json 2>&1)
p0=$($CLEAVE plan --model llama-tiny --seq-len 32 --devices 2 --dp 2 --micro-batch-size 2 --global-batch-size 8 \
     --hardware a100 --precision fp32 --zero 0 --recompute none --json 2>&1 | grep -o '"peak_bytes": [0-9]*' | awk '{print $2}')
peak=$(printf '%s' "$pj" | grep -o '"peak_bytes": [0-9]*' | awk '{print $2}')
mem=$($CLEAVE memory --model llama-tiny --ffn-channels 512 --seq-len 32 --dp 2 --micro-batch-size 2 --global-batch-size 8 --json 2>&1 |
      grep -o '"total": [0-9]*' | awk '{print $2}' | sort -n | tail -1)
check '[ -n "$peak" ] && [ "$peak" = "$mem" ] && [ "$peak" != "$p0" ]' "--ffn-channels 512: plan $peak = memory $mem (default width: $p0)$(excerpt 2 "$pj")"
expect2 "ffn-channels applies to Llama models" $CLEAVE plan --model gpt2-tiny --ffn-channels 100 --devices 2
finish cli_plan
