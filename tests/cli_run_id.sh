#!/usr/bin/env bash
# A run's identifier (cl_trainer_run_id): every checkpoint's state records
# it ("run_id", 16 lowercase hex digits); a fresh run mints a new one, a
# resume carries the checkpoint's on (its lineage), in both formats and on
# every rank of a sharded save; a malformed one is refused by name.
set -u
source "$(dirname "$0")/lib.sh"
head -c 100000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 4 --sample-tokens 0 --eval-batches 1)
rid() { sed -n 's/.*"run_id": "\([^"]*\)".*/\1/p' "$1" | head -n 1; }

"$CLEAVE" train "${common[@]}" --steps 2 --save "$tmp/a" > "$tmp/a.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "first run failed: $(tail -2 "$tmp/a.out")"
"$CLEAVE" train "${common[@]}" --steps 2 --save "$tmp/b" > "$tmp/b.out" 2>&1
a=$(rid "$tmp/a/trainer_state.json"); b=$(rid "$tmp/b/trainer_state.json")
check '[[ "$a" =~ ^[0-9a-f]{16}$ ]]' "run_id '$a' is not 16 hex digits"
check '[ -n "$b" ] && [ "$a" != "$b" ]' "two fresh runs share run_id '$a' / '$b'"

# resume carries it on, into the single file and (4 ranks, pp 2 x dp 2) into every shard's index
"$CLEAVE" train "${common[@]}" --steps 4 --resume "$tmp/a" --save "$tmp/a2" > "$tmp/a2.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "resume failed: $(tail -2 "$tmp/a2.out")"
check '[ "$(rid "$tmp/a2/trainer_state.json")" = "$a" ]' "resume minted $(rid "$tmp/a2/trainer_state.json"), not $a"
"$CLEAVE" train "${common[@]}" --steps 4 --resume "$tmp/a" --ranks 4 --pp 2 --dp 2 --zero 1 --save "$tmp/s" --save-format sharded \
    > "$tmp/s.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "sharded resume failed: $(tail -2 "$tmp/s.out")"
check '[ "$(rid "$tmp/s/cleave-index.json")" = "$a" ]' "sharded index run_id $(rid "$tmp/s/cleave-index.json"), not $a"
"$CLEAVE" train "${common[@]}" --steps 6 --resume "$tmp/s" --save "$tmp/s2" > "$tmp/s2.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && [ "$(rid "$tmp/s2/trainer_state.json")" = "$a" ]' "resume of the sharded one: rc $_rc, run_id $(rid "$tmp/s2/trainer_state.json")"
# a fresh sharded run: all ranks write under world rank 0's identifier
"$CLEAVE" train "${common[@]}" --steps 2 --ranks 2 --dp 2 --zero 1 --save "$tmp/f" --save-format sharded > "$tmp/f.out" 2>&1
f=$(rid "$tmp/f/cleave-index.json")
check '[[ "$f" =~ ^[0-9a-f]{16}$ ]] && [ "$f" != "$a" ]' "fresh sharded run_id '$f'"

# a malformed one: refused, naming the field (the parser behind the content hash, which refuses the edit
# first: tests/cli_ckpt_integrity.sh)
cp -r "$tmp/a" "$tmp/bad"
sed -i 's/"run_id": "[0-9a-f]*"/"run_id": "XYZ"/' "$tmp/bad/trainer_state.json"
out=$(CLEAVE_CKPT_VERIFY=0 "$CLEAVE" train "${common[@]}" --steps 4 --resume "$tmp/bad" 2>&1); rc=$?
check '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q run_id' "malformed run_id: status $rc$(excerpt 3 "$out")"
finish cli_run_id
