#!/usr/bin/env bash
# The rough edges a new user meets (issue 27):
# - progress: into a file or pipe (and under mpirun into a file, whose ranks
#   see a pseudo-terminal) every logged step is one plain line and no
#   carriage return is written; on a terminal (script(1)'s pseudo-terminal)
#   the logged steps stay too, as rendered lines, with one live bar line
#   under them that is cleared before anything else is printed;
# - the model line gives the whole model's parameter count, and with --tp
#   what each tensor-parallel rank holds;
# - `cleave help COMMAND` is that command's --help; an unknown command's
#   message lists every command of the usage (memory, convert, version too);
#   `memory --help` leaves training-only flags out; `memory --json` says
#   "stages": "all" where the table says all;
# - `convert --to` refuses an existing non-empty target (exit 2, naming it)
#   unless --overwrite, and never writes over --from, a directory inside it
#   or one holding it, even with --overwrite; the source is left unchanged.
set -u
source "$(dirname "$0")/lib.sh"
head -c 60000 data/kjv.txt > "$tmp/text.txt"
A=(--data "$tmp/text.txt" --seq-len 16 --micro-batch-size 2 --sample-tokens 0 --eval-batches 1 --threads 1)

# progress into a file: steps 1, 2, 4, 6 logged (--log-every 2; the first and the last always)
"$CLEAVE" train "${A[@]}" --steps 6 --log-every 2 --eval-every 4 > "$tmp/file.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "train into a file failed$(excerpt 3 "$(tail -3 "$tmp/file.out")")"
check '! grep -q $'"'"'\r'"'"' "$tmp/file.out"' "a carriage return was written into the file"
steps=$(grep -o '^step *[0-9]*/6 ' "$tmp/file.out" | tr -s ' ' | tr '\n' ',')
check '[ "$steps" = "step 1/6 ,step 2/6 ,step 4/6 ,step 6/6 ," ]' "logged step lines in the file: '$steps', not steps 1, 2, 4 and 6"
check 'grep -q "^step 4: validation loss" "$tmp/file.out"' "no validation line of its own in the file"
# and through a pipe
steps=$("$CLEAVE" train "${A[@]}" --steps 3 2>&1 | tr '\r' '#' | grep -c '^step *[0-9]/3 ')
check '[ "$steps" = 3 ]' "through a pipe: $steps plain step lines, not 3"

# under mpirun, whose ranks' standard output is a pseudo-terminal even when mpirun's is a file
if "$CLEAVE" --version | grep -q "mpi: yes" && command -v mpirun > /dev/null; then
    case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun --oversubscribe -np 1 \
        "$CLEAVE" train --comm mpi "${A[@]}" --steps 3 > "$tmp/mpi.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ] && ! grep -q $'"'"'\r'"'"' "$tmp/mpi.out" && [ "$(grep -c "^step *[0-9]/3 " "$tmp/mpi.out")" -eq 3 ]' \
        "mpirun ... > file: exit $_rc, carriage returns or not 3 step lines in the file$(excerpt 6 "$(grep step "$tmp/mpi.out" | cat -A)")"
else
    echo "SKIP: no MPI in this build or no mpirun: the mpirun case is not checked"
fi

# on a terminal: what the screen shows once every carriage return and erase-line has done its work
render() { # the visible lines of a terminal's output: each line's text after its last carriage return
    python3 -c '
import re, sys
for line in sys.stdin.buffer.read().decode("utf-8", "replace").replace("\r\n", "\n").split("\n"):
    print(re.sub(r"\x1b\[K", "", line.split("\r")[-1]))'
}
if script -qc true /dev/null > /dev/null 2>&1; then
    script -qc "$(printf '%q ' "$CLEAVE" train "${A[@]}" --steps 6 --log-every 2 --eval-every 4)" /dev/null > "$tmp/tty.raw" 2>&1
    render < "$tmp/tty.raw" > "$tmp/tty.out"
    steps=$(grep -o '^step *[0-9]*/6 ' "$tmp/tty.out" | tr -s ' ' | tr '\n' ',')
    check '[ "$steps" = "step 1/6 ,step 2/6 ,step 4/6 ,step 6/6 ," ]' \
        "on a terminal the logged steps shown are '$steps', not steps 1, 2, 4 and 6$(excerpt 12 "$(cat "$tmp/tty.out")")"
    check 'grep -q "^step 4: validation loss" "$tmp/tty.out" && ! grep -q "^\[" "$tmp/tty.out"' \
        "on a terminal: the validation line is not on a line of its own, or a bar is left on the screen$(excerpt 12 "$(cat "$tmp/tty.out")")"
    check 'grep -q "\[#*\.*\] step 5/6" "$tmp/tty.raw"' "on a terminal there is no live bar for the unlogged step 5"
else
    echo "SKIP: script(1) cannot make a pseudo-terminal here: the terminal case is not checked"
fi

# the model line
one=$("$CLEAVE" train "${A[@]}" --steps 1 2>&1 | grep "^model")
two=$("$CLEAVE" train "${A[@]}" --steps 1 --tp 2 2>&1 | grep "^model")
check 'printf "%s" "$one" | grep -q "; 120576 parameters$"' "tp 1: $one"
check 'printf "%s" "$two" | grep -q "; 120576 parameters (62784 on each of the 2 tensor-parallel ranks)$"' "tp 2: $two"
pad=$("$CLEAVE" train "${A[@]}" --steps 1 --vocab 300 --tp 2 2>&1 | grep "^model")
check 'printf "%s" "$pad" | grep -q "; 123392 parameters ("' "vocabulary 300 (padded to 512 at tp 2): not the unpadded 123392: $pad"

# help and the command list
out=$("$CLEAVE" help train 2>&1); _rc=$?
check '[ $_rc -eq 0 ] && printf "%s" "$out" | head -1 | grep -q "^usage: cleave train" && printf "%s" "$out" | grep -q -- "--save-keep"' \
    "cleave help train is not train's help$(excerpt 2 "$out")"
out=$("$CLEAVE" help plan calibrate 2>&1)
check 'printf "%s" "$out" | head -1 | grep -q "^usage: cleave plan calibrate"' "cleave help plan calibrate$(excerpt 2 "$out")"
out=$("$CLEAVE" frobnicate 2>&1); _rc=$?
listed=$("$CLEAVE" --help | sed -n 's/^  \([a-z]*\) .*/\1/p')
missing=""
for c in $listed; do printf "%s" "$out" | grep -q "[(, ]$c[,;)]" || missing="$missing $c"; done
check '[ $_rc -eq 2 ] && [ -z "$missing" ] && [ "$(printf "%s\n" "$out" | grep -c "")" -eq 1 ]' \
    "unknown command (exit $_rc): the message omits$missing$(excerpt 2 "$out")"
out=$("$CLEAVE" help frobnicate 2>&1); _rc=$?
check '[ $_rc -eq 2 ] && printf "%s" "$out" | grep -q "unknown command .frobnicate."' "cleave help frobnicate: exit $_rc$(excerpt 2 "$out")"
out=$("$CLEAVE" memory --help 2>&1)
for f in --steps --lr --save --save-keep --resume --prompt --sample-tokens --log-file; do
    check '! printf "%s" "$out" | grep -q "^  $f "' "memory --help lists the training-only flag $f"
done
for f in --model --tp --zero --device-memory --measure --json; do
    check 'printf "%s" "$out" | grep -q "^  $f[ ,]"' "memory --help does not list $f"
done
out=$("$CLEAVE" memory --steps 5 --lr 1e-3 2>&1); _rc=$?
check '[ $_rc -eq 0 ]' "memory no longer accepts train's flags$(excerpt 2 "$out")"
out=$("$CLEAVE" memory --json 2>&1)
check 'printf "%s" "$out" | grep -q "\"stages\": \"all\""' "memory --json on one device$(excerpt 1 "$out")"
out=$("$CLEAVE" memory --json --pp 2 2>&1)
check 'printf "%s" "$out" | sed -n 2p | grep -q "\"stages\": \[1\]"' "memory --json --pp 2$(excerpt 2 "$out")"

# convert --to
"$CLEAVE" train "${A[@]}" --steps 2 --save "$tmp/ck" > /dev/null 2>&1 &&
    "$CLEAVE" train "${A[@]}" --steps 2 --seed 7 --save "$tmp/other" > /dev/null 2>&1 &&
    "$CLEAVE" train "${A[@]}" --steps 2 --save "$tmp/kept" --save-keep 2 > /dev/null 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "making the checkpoints failed"
cp -r "$tmp/ck" "$tmp/ck.orig"; cp -r "$tmp/other" "$tmp/other.orig"; cp -r "$tmp/kept" "$tmp/kept.orig"
refused() { # refused WHAT ARGS...: convert exits 2 with one line holding WHAT
    local want=$1; shift
    out=$("$CLEAVE" convert "$@" 2>&1); _rc=$?
    check '[ $_rc -eq 2 ] && [ "$(printf "%s\n" "$out" | grep -c "")" -eq 1 ] && printf "%s" "$out" | grep -qF -- "$want"' \
        "convert $*: exit $_rc, not 2 with '$want'$(excerpt 2 "$out")"
}
refused "--to $tmp/other already exists and is not empty" --from "$tmp/ck" --to "$tmp/other"
check 'diff -r "$tmp/other" "$tmp/other.orig" > /dev/null' "a refused convert changed --to"
echo mine > "$tmp/file"
refused "--to $tmp/file already exists" --from "$tmp/ck" --to "$tmp/file"
refused "convert never writes over its source" --from "$tmp/ck" --to "$tmp/ck" --overwrite
refused "convert never writes over its source" --from "$tmp/ck" --to "$tmp/ck/../ck/" --overwrite
refused "convert never writes over its source" --from "$tmp/ck" --to "$tmp/ck/inside"
refused "convert never writes over its source" --from "$tmp/kept" --to "$tmp/kept" --overwrite
refused "convert never writes over its source" --from "$tmp/kept/step-00000002" --to "$tmp/kept" --overwrite
check 'diff -r "$tmp/ck" "$tmp/ck.orig" > /dev/null && diff -r "$tmp/kept" "$tmp/kept.orig" > /dev/null' "a refused convert changed --from"
mkdir "$tmp/empty"
out=$("$CLEAVE" convert --from "$tmp/ck" --to "$tmp/empty" 2>&1); _rc=$?
check '[ $_rc -eq 0 ] && [ -f "$tmp/empty/model.safetensors" ]' "convert into an empty directory failed$(excerpt 2 "$out")"
out=$("$CLEAVE" convert --from "$tmp/ck" --to "$tmp/other" --overwrite 2>&1); _rc=$?
check '[ $_rc -eq 0 ] && cmp -s "$tmp/other/model.safetensors" "$tmp/ck/model.safetensors"' \
    "convert --overwrite did not replace the checkpoint at --to$(excerpt 2 "$out")"
check 'diff -r "$tmp/ck" "$tmp/ck.orig" > /dev/null' "convert changed its source"
finish cli_edges
