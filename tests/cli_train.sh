#!/usr/bin/env bash
# The cleave command end to end: train with a log and a checkpoint; resume
# from the midpoint checkpoint and get bit-identical losses in the log; eval
# and generate from the checkpoint; a corrupted checkpoint is a clear error.
set -u
source "$(dirname "$0")/lib.sh"
head -c 300000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 4 --global-batch-size 8 --steps 10 --sample-tokens 0)

"$CLEAVE" train "${common[@]}" --log-file "$tmp/full.jsonl" > "$tmp/full.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "full run failed: $(tail -3 "$tmp/full.out")"
"$CLEAVE" train "${common[@]}" --save "$tmp/ck" --save-every 5 --log-file "$tmp/a.jsonl" > "$tmp/a.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "run with checkpoints failed: $(tail -3 "$tmp/a.out")"
# an interrupted run: the same 10-step schedule stopped after step 5
"$CLEAVE" train "${common[@]}" --save "$tmp/stop5" --save-every 5 --log-file "$tmp/b1.jsonl" --stop-after 5 > "$tmp/b1.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "stopping at step 5 failed: $(tail -3 "$tmp/b1.out")"
"$CLEAVE" train "${common[@]}" --resume "$tmp/stop5" --log-file "$tmp/b2.jsonl" > "$tmp/b2.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "resume failed: $(tail -3 "$tmp/b2.out")"
full=$(grep '"loss"' "$tmp/full.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/' | tr '\n' ' ')
resumed=$(cat "$tmp/b1.jsonl" "$tmp/b2.jsonl" | grep '"loss"' | sed 's/.*"loss": \([^,]*\),.*/\1/' | tr '\n' ' ')
check '[ -n "$full" ] && [ "$full" = "$resumed" ]' "resumed losses differ: full [$full] resumed [$resumed]"
check 'grep -q "resumed from" "$tmp/b2.out"' "resume not reported"

out=$("$CLEAVE" eval --checkpoint "$tmp/ck" --text "$tmp/text.txt" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && printf "%s" "$out" | tail -1 | grep -Eq "^eval loss: [0-9.]+$"' "eval: $out"
out=$("$CLEAVE" generate --checkpoint "$tmp/ck" --prompt "And God" --tokens 20 --seed 1 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && printf "%s" "$out" | grep -q "^And God"' "generate: $out"
out2=$("$CLEAVE" generate --checkpoint "$tmp/ck" --prompt "And God" --tokens 20 --seed 1 2>&1)
check '[ "$out" = "$out2" ]' "generation with the same seed differs"

# a corrupted checkpoint: one byte of the header length changed
cp -r "$tmp/ck" "$tmp/bad"
printf '\xff' | dd of="$tmp/bad/model.safetensors" bs=1 seek=3 conv=notrunc 2>/dev/null
out=$("$CLEAVE" eval --checkpoint "$tmp/bad" --text "$tmp/text.txt" 2>&1); rc=$?
check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "model.safetensors"' "corrupted checkpoint: status $rc: $out"
out=$("$CLEAVE" train "${common[@]}" --resume "$tmp/bad" 2>&1); rc=$?
check '[ $rc -eq 2 ]' "resume from a corrupted checkpoint: status $rc: $out"
# a cap under the parameters
out=$("$CLEAVE" train "${common[@]}" --device-memory 200KiB 2>&1); rc=$?
check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "refused before allocating"' "cap: status $rc: $out"
# the header and per-step fields
check 'grep -q "parameters" "$tmp/full.out" && grep -q "unigram baseline" "$tmp/full.out" && grep -q "GFLOP/s" "$tmp/full.out"' "header/step fields missing"
# (the first step's line: the log opens with the run's {"config": ...}, cli_config.sh)
check 'grep -m1 "\"step\"" "$tmp/full.jsonl" | grep -q "\"tokens_per_s\"" && grep -m1 "\"step\"" "$tmp/full.jsonl" | grep -q "\"peak_bytes\""' "JSON fields missing"
finish cli_train
