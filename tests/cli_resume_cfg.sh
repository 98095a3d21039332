#!/usr/bin/env bash
# `cleave train --resume DIR` takes the model, tokenizer, sequence length,
# global batch, seed, data file and micro-batch from the checkpoint:
# - a run with a non-default --seq-len, --global-batch-size, --seed and
#   --data, stopped at step 3 and resumed with `--resume DIR --steps 6`
#   alone, continues bitwise against the uninterrupted run (the losses of
#   its JSONL log) from a single-file, a sharded and a --save-keep
#   checkpoint, and so does the mlp model;
# - the same flags given again and agreeing (the data by another path) are
#   accepted, still bitwise; a new --dp cuts the recorded micro-batch to fit;
# - each flag given that disagrees (--model, --layers, --seq-len, --seed,
#   --global-batch-size, --data, --tokenizer) exits 2 with one line naming
#   the flag and both values, and the checkpoint is unchanged after it;
# - a recorded data file that is gone is refused by name unless --data
#   gives it again;
# - under --comm mpi (when built) every rank takes the same settings.
set -u
source "$(dirname "$0")/lib.sh"
head -c 120000 data/kjv.txt > "$tmp/text.txt"
head -c 120000 data/kjv.txt | tail -c 60000 > "$tmp/other.txt"
orig=(--data "$tmp/text.txt" --seq-len 32 --micro-batch-size 2 --global-batch-size 4 --seed 7 --sample-tokens 0 --eval-batches 1)
quiet=(--sample-tokens 0 --eval-batches 1) # run flags a resume may set freely
losses() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/' | tr '\n' ' '; }
sums() { (cd "$1" && find . -type f | sort | xargs md5sum); }

"$CLEAVE" train "${orig[@]}" --steps 6 --log-file "$tmp/full.jsonl" > "$tmp/full.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "the uninterrupted run failed: $(tail -2 "$tmp/full.out")"
want=$(losses "$tmp/full.jsonl" | cut -d' ' -f4-6)

# resumed NAME DIR [flags]: --resume DIR --steps 6 continues steps 4..6 bitwise
resumed() {
    local name=$1 dir=$2; shift 2
    "$CLEAVE" train --resume "$dir" --steps 6 "${quiet[@]}" --log-file "$tmp/$name.jsonl" "$@" > "$tmp/$name.out" 2>&1
    local rc=$?
    check '[ $rc -eq 0 ] && grep -q "resumed from .* at step 3" "$tmp/$name.out"' "$name: the resume failed ($rc): $(tail -2 "$tmp/$name.out")"
    check '[ "$(losses "$tmp/$name.jsonl")" = "$want " ]' "$name: resumed losses [$(losses "$tmp/$name.jsonl")] differ from the uninterrupted [$want ]"
}

"$CLEAVE" train "${orig[@]}" --steps 6 --stop-after 3 --save "$tmp/single" > "$tmp/s.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "the single-file save failed: $(tail -2 "$tmp/s.out")"
"$CLEAVE" train "${orig[@]}" --steps 6 --stop-after 3 --save "$tmp/sharded" --save-format sharded > "$tmp/sh.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "the sharded save failed: $(tail -2 "$tmp/sh.out")"
"$CLEAVE" train "${orig[@]}" --steps 6 --stop-after 3 --save "$tmp/kept" --save-every 2 --save-keep 2 > "$tmp/k.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && [ "$(cat "$tmp/kept/latest")" = step-00000003 ]' "the kept save failed: $(tail -2 "$tmp/k.out")"

resumed single "$tmp/single"
check 'grep -q "^batch: 4 samples per step in 2 micro-batches of 2" "$tmp/single.out" && grep -q "^data $tmp/text.txt" "$tmp/single.out"' \
    "single: the resumed run's batch or data is not the checkpoint's: $(grep -E '^(batch|data)' "$tmp/single.out")"
resumed sharded "$tmp/sharded"
resumed kept "$tmp/kept"
# every flag given again, agreeing (the data by another path): accepted
resumed agreeing "$tmp/single" --layers 2 --seq-len 32 --seed 7 --global-batch-size 4 --tokenizer byte \
    --data "$tmp/./text.txt" --micro-batch-size 2
# a new layout: the recorded micro-batch (2) cut to fit 4 samples over dp 4
"$CLEAVE" train --resume "$tmp/sharded" --steps 4 --ranks 4 --dp 4 "${quiet[@]}" > "$tmp/dp4.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && grep -q "^batch: 4 samples per step in 4 micro-batches of 1" "$tmp/dp4.out"' \
    "resume at dp 4 ($_rc): $(grep -E '^batch|error' "$tmp/dp4.out")"

# the mlp model, its seed not the default
mlp=(--model mlp --seed 9 --global-batch-size 16 --micro-batch-size 8 --eval-batches 1)
"$CLEAVE" train "${mlp[@]}" --steps 4 --log-file "$tmp/mfull.jsonl" > "$tmp/mfull.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "mlp: the uninterrupted run failed: $(tail -2 "$tmp/mfull.out")"
"$CLEAVE" train "${mlp[@]}" --steps 4 --stop-after 2 --save "$tmp/mlp" > "$tmp/m.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "mlp: the save failed: $(tail -2 "$tmp/m.out")"
"$CLEAVE" train --resume "$tmp/mlp" --steps 4 --eval-batches 1 --log-file "$tmp/mres.jsonl" > "$tmp/mres.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && grep -q "^model mlp" "$tmp/mres.out"' "mlp: the resume failed ($_rc): $(tail -2 "$tmp/mres.out")"
mwant=$(losses "$tmp/mfull.jsonl" | cut -d' ' -f3-4)
check '[ "$(losses "$tmp/mres.jsonl")" = "$mwant " ]' "mlp: resumed losses [$(losses "$tmp/mres.jsonl")] differ from [$mwant ]"

# refused DIR 'PATTERN' flags...: exit 2, one line matching, DIR unchanged (a --save into it given too)
refused() {
    local dir=$1 pat=$2; shift 2
    local before out rc
    before=$(sums "$dir")
    out=$("$CLEAVE" train --resume "$dir" --steps 6 "${quiet[@]}" --save "$dir" "$@" 2>&1); rc=$?
    check '[ $rc -eq 2 ] && [ "$(printf "%s\n" "$out" | wc -l)" -eq 1 ] && printf "%s" "$out" | grep -q -- "$pat"' \
        "$* refused with status $rc, wanted 2 and one line matching '$pat':$(excerpt 3 "$out")"
    check '[ "$(sums "$dir")" = "$before" ]' "$*: the refusal changed $dir"
}
for d in single sharded kept; do
    refused "$tmp/$d" "--resume $tmp/$d: --seq-len 16 disagrees with the checkpoint's 32" --seq-len 16
done
refused "$tmp/single" "--seed 5 disagrees with the checkpoint's 7" --seed 5
refused "$tmp/single" "--global-batch-size 8 disagrees with the checkpoint's 4" --global-batch-size 8
refused "$tmp/single" "--model gpt2-medium disagrees with the checkpoint's .* (layers 24, the checkpoint's 2)" --model gpt2-medium
refused "$tmp/single" "--model mlp disagrees with the checkpoint's " --model mlp
refused "$tmp/single" "--layers 3 disagrees with the checkpoint's 2" --layers 3
refused "$tmp/single" "--tokenizer gpt2 disagrees with the checkpoint's byte" --tokenizer gpt2
refused "$tmp/single" "--data $tmp/other.txt disagrees with the checkpoint's $tmp/text.txt" --data "$tmp/other.txt"
refused "$tmp/sharded" "--data $tmp/other.txt disagrees with the checkpoint's $tmp/text.txt" --data "$tmp/other.txt"
refused "$tmp/kept" "--seed 8 disagrees with the checkpoint's 7" --seed 8
refused "$tmp/mlp" "--seed 1337 disagrees with the checkpoint's 9" --seed 1337

# the recorded data gone: refused by name; --data where it is now resumes
mv "$tmp/text.txt" "$tmp/moved.txt"
refused "$tmp/single" "the checkpoint's data $tmp/text.txt is gone"
resumed moved "$tmp/single" --data "$tmp/moved.txt"
mv "$tmp/moved.txt" "$tmp/text.txt"

# under mpirun every rank takes the checkpoint's settings (the start-up agreement checks them)
if "$CLEAVE" --version | grep -q "mpi: yes" && command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    case "$BUILD" in *san*) export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 ;; esac
    timeout -k 5 120 mpirun --oversubscribe -np 2 "$CLEAVE" train --comm mpi --resume "$tmp/sharded" --steps 6 --dp 2 "${quiet[@]}" \
        --log-file "$tmp/mpi.jsonl" > "$tmp/mpi.out" 2>&1
    _rc=$?; check '[ $_rc -eq 0 ] && grep -q "^batch: 4 samples per step in 2 micro-batches of 2" "$tmp/mpi.out"' \
        "mpi: the resume at dp 2 failed ($_rc): $(grep -E '^batch|error' "$tmp/mpi.out" | head -3)"
    "$CLEAVE" train --resume "$tmp/sharded" --steps 6 --ranks 2 --dp 2 "${quiet[@]}" --log-file "$tmp/thr.jsonl" > "$tmp/thr.out" 2>&1
    check '[ -n "$(losses "$tmp/mpi.jsonl")" ] && [ "$(losses "$tmp/mpi.jsonl")" = "$(losses "$tmp/thr.jsonl")" ]' \
        "mpi: losses [$(losses "$tmp/mpi.jsonl")] differ from the threads run's [$(losses "$tmp/thr.jsonl")]"
else
    echo "SKIP: the mpirun part (no MPI in this build or no mpirun)"
fi
finish cli_resume_cfg
