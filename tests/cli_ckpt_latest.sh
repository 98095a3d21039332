#!/usr/bin/env bash
# Kept checkpoints (--save-keep K): --save DIR holds step-NNNNNNNN
# directories and DIR/latest, the newest's name; resume, eval and convert
# given DIR follow latest.
# - --save-every 2 --save-keep 2 over 7 steps leaves step-00000004 and
#   step-00000006 (the final save at step 7 too: 6 and 7), latest naming the
#   newest; in both formats;
# - --resume DIR continues bitwise against the uninterrupted run (losses);
# - a save killed mid-way (CLEAVE_SAVE_FAULT, sharded) leaves latest naming
#   the previous complete step, which resumes bitwise;
# - a hand-broken latest, --save-keep 0 or junk: one line, exit 2.
set -u
source "$(dirname "$0")/lib.sh"
head -c 200000 data/kjv.txt > "$tmp/text.txt"
common=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 4 --sample-tokens 0 --eval-batches 1)
losses() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
refused() { # name args...: exit 2, one line naming what
    local name=$1; shift
    out=$("$CLEAVE" "$@" 2>&1); rc=$?
    check '[ $rc -eq 2 ] && [ "$(printf "%s\n" "$out" | wc -l)" -eq 1 ]' "$name: status $rc$(excerpt 4 "$out")"
}

# the uninterrupted run
"$CLEAVE" train "${common[@]}" --steps 8 --log-file "$tmp/full.jsonl" > "$tmp/full.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "the uninterrupted run failed: $(tail -2 "$tmp/full.out")"

for fmt in single sharded; do
    d=$tmp/keep-$fmt
    "$CLEAVE" train "${common[@]}" --steps 8 --stop-after 7 --save "$d" --save-every 2 --save-keep 2 --save-format $fmt \
        > "$tmp/$fmt.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ]' "$fmt: the kept saves failed: $(tail -2 "$tmp/$fmt.out")"
    # step 7 is the run's last: saved too, so the two newest are 6 and 7
    got=$(ls -A "$d" | tr '\n' ' ')
    check '[ "$got" = "latest step-00000006 step-00000007 " ] && [ "$(cat "$d/latest")" = step-00000007 ]' \
        "$fmt: DIR holds '$got', latest '$(cat "$d/latest" 2> /dev/null)'"
    "$CLEAVE" train "${common[@]}" --steps 8 --resume "$d" --log-file "$tmp/$fmt.jsonl" > "$tmp/$fmt.resume.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ] && grep -q "at step 7" "$tmp/$fmt.resume.out"' "$fmt: resume from DIR failed: $(tail -2 "$tmp/$fmt.resume.out")"
    check '[ "$(losses "$tmp/$fmt.jsonl")" = "$(losses "$tmp/full.jsonl" | tail -1)" ]' \
        "$fmt: the resumed step's loss $(losses "$tmp/$fmt.jsonl") differs from the uninterrupted $(losses "$tmp/full.jsonl" | tail -1)"
done
# a run's last step always saves, so 6 steps (not 7) leave exactly 4 and 6
d=$tmp/keep6
"$CLEAVE" train "${common[@]}" --steps 6 --save "$d" --save-every 2 --save-keep 2 > "$tmp/k6.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "keep 2 over 6 steps failed: $(tail -2 "$tmp/k6.out")"
got=$(ls -A "$d" | tr '\n' ' ')
check '[ "$got" = "latest step-00000004 step-00000006 " ] && [ "$(cat "$d/latest")" = step-00000006 ]' "keep6: DIR holds '$got'"
# eval, generate and convert follow latest: the same as on the step directory itself
e1=$("$CLEAVE" eval --checkpoint "$d" --text "$tmp/text.txt" 2>&1 | tail -1)
e2=$("$CLEAVE" eval --checkpoint "$d/step-00000006" --text "$tmp/text.txt" 2>&1 | tail -1)
check '[ "$e1" = "$e2" ] && echo "$e1" | grep -q "^eval loss: [0-9]"' "eval of DIR '$e1' vs of its step directory '$e2'"
g1=$("$CLEAVE" generate --checkpoint "$d" --prompt "And" --tokens 8 --seed 3 2>&1)
g2=$("$CLEAVE" generate --checkpoint "$d/step-00000006" --prompt "And" --tokens 8 --seed 3 2>&1)
check '[ "$g1" = "$g2" ] && [ -n "$g1" ]' "generate of DIR differs from its step directory"
"$CLEAVE" convert --from "$d" --to "$tmp/conv" > "$tmp/conv.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && cmp -s "$tmp/conv/model.safetensors" "$d/step-00000006/model.safetensors"' \
    "convert --from DIR: $(tail -2 "$tmp/conv.out")"

# a fault in the second save (step 4): latest still names step-00000002, which resumes bitwise
for mode in fail kill; do
    d=$tmp/fault-$mode
    ( CLEAVE_SAVE_FAULT=rank:0:after-index:$mode:2 "$CLEAVE" train "${common[@]}" --steps 8 --save "$d" --save-every 2 \
        --save-keep 3 --save-format sharded > "$tmp/f$mode.out" 2>&1; exit $? ) 2> /dev/null
    _rc=$?
    check '[ $_rc -ne 0 ] && [ "$(cat "$d/latest")" = step-00000002 ] && [ ! -e "$d/step-00000004" ]' \
        "fault $mode: exit $_rc, latest '$(cat "$d/latest" 2> /dev/null)', DIR: $(ls -A "$d" | tr '\n' ' ')"
    "$CLEAVE" train "${common[@]}" --steps 8 --resume "$d" --save "$d" --save-every 2 --save-keep 3 --save-format sharded \
        --log-file "$tmp/f$mode.jsonl" > "$tmp/f$mode.resume.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ] && grep -q "at step 2" "$tmp/f$mode.resume.out"' "fault $mode: the resume failed: $(tail -2 "$tmp/f$mode.resume.out")"
    check '[ "$(losses "$tmp/f$mode.jsonl")" = "$(losses "$tmp/full.jsonl" | tail -6)" ]' "fault $mode: the resumed run differs"
    got=$(ls -A "$d" | tr '\n' ' ')
    check '[ "$got" = "latest step-00000004 step-00000006 step-00000008 " ]' "fault $mode: after the resumed run DIR holds '$got'"
done

# a hand-broken latest: one line naming the file, exit 2
d=$tmp/keep6
echo step-00000009 > "$d/latest"
refused "latest naming a missing step" train "${common[@]}" --steps 8 --resume "$d"
check 'printf "%s" "$out" | grep -q "latest"' "missing step: the message does not name latest: $out"
echo '../../etc' > "$d/latest"
refused "latest naming a path" eval --checkpoint "$d" --text "$tmp/text.txt"
check 'printf "%s" "$out" | grep -q "latest"' "malformed latest: the message does not name latest: $out"
printf '' > "$d/latest"
refused "an empty latest" convert --from "$d" --to "$tmp/conv2"
refused "--save-keep 0" train "${common[@]}" --steps 2 --save "$tmp/k0" --save-keep 0
refused "--save-keep junk" train "${common[@]}" --steps 2 --save "$tmp/kj" --save-keep 2x
refused "--save-keep without --save" train "${common[@]}" --steps 2 --save-keep 2
refused "--save-keep into a checkpoint" train "${common[@]}" --steps 2 --save "$tmp/conv" --save-keep 2
check '[ ! -e "$tmp/k0" ] && [ ! -e "$tmp/kj" ]' "a refused --save-keep left a directory"
finish cli_ckpt_latest
