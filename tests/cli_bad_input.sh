#!/usr/bin/env bash
# Bad input to the cleave command, one table row per case, every class a
# hostile user reaches: flags of every command, data files, tokenizer files,
# output paths, checkpoints (their JSON, tensors and optimizer state).
#
# Each row must: exit with status 2; print exactly one line on standard error,
# containing the row's words; print no sanitizer report; train no step (every
# error here can be found before the first step); and stay within a memory
# bound (prlimit --as in the normal build; ASan's hard_rss_limit_mb in the
# sanitizer build, whose shadow memory rules out an address-space limit).
# Never a crash, a hang (timeout 60 s) or exit 0.
set -u
source "$(dirname "$0")/lib.sh"
MEM_MB=${CL_BAD_INPUT_MEM_MB:-1024}
san=0
case "$BUILD" in *san*) san=1 ;; esac
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}hard_rss_limit_mb=$MEM_MB"
rows=0

run_bounded() { # stdout to $tmp/out, stderr to $tmp/err; returns the status
    if [ $san -eq 1 ]; then
        timeout 60 "$CLEAVE" "$@" >"$tmp/out" 2>"$tmp/err"
    else
        timeout 60 prlimit --as=$((MEM_MB * 1024 * 1024)) "$CLEAVE" "$@" >"$tmp/out" 2>"$tmp/err"
    fi
}

# bad "words" ARGS...: one row
bad() {
    local want=$1; shift
    rows=$((rows + 1))
    run_bounded "$@"
    local rc=$? err lines why=""
    err=$(cat "$tmp/err")
    lines=$(grep -c '' "$tmp/err")
    [ "$rc" -eq 2 ] || why="status $rc"
    [ "$lines" -eq 1 ] || why="$why; $lines lines on stderr"
    grep -qi -- "$want" "$tmp/err" || why="$why; no '$want'"
    grep -qE 'Sanitizer|runtime error:|LeakSanitizer' "$tmp/err" && why="$why; sanitizer report"
    grep -qE 'step +[0-9]+/[0-9]+ \|' "$tmp/out" && why="$why; trained a step first"
    if [ -n "$why" ]; then
        fail=$((fail + 1))
        echo "FAILED: cleave $(printf '%.200s' "$*") ->${why#;}$(excerpt 4 "$err")"
    fi
}

small="$tmp/small.txt"
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 200) > "$small"
T=(train --data "$small" --steps 1 --sample-tokens 0)
long=$(printf 'a%.0s' $(seq 5000))

# ---- flags of every command -------------------------------------------------
bad "unknown command" frobnicate
bad "unexpected argument" train stray
bad "unknown flag" train --bogus 1
bad "needs a value" train --steps
bad "takes no value" train --help=1
bad "not an integer" "${T[@]}" --layers abc
bad "not an integer" "${T[@]}" --steps 99999999999999999999
bad "not a number" "${T[@]}" --lr fast
bad "not a number" "${T[@]}" --lr nan
bad "between" "${T[@]}" --lr -1
bad "must be positive" "${T[@]}" --layers 0
bad "must be positive" "${T[@]}" --channels -8
bad "must be positive" "${T[@]}" --micro-batch-size 0
bad "must be positive" "${T[@]}" --steps -3
bad "heads (3) must divide" "${T[@]}" --heads 3
bad "longer than the model's context" "${T[@]}" --seq-len 65
bad "applies to GPT" "${T[@]}" --model mlp --layers 3
bad "unknown model" "${T[@]}" --model gpt5
bad "not a multiple" "${T[@]}" --micro-batch-size 3 --global-batch-size 8
bad "refused before allocating" "${T[@]}" --device-memory 64KiB
bad "unknown unit" "${T[@]}" --device-memory 12XB
bad "must be positive" "${T[@]}" --device-memory 0
bad "refused before allocating" "${T[@]}" --model gpt2-xl --micro-batch-size 64
bad "refused before allocating" "${T[@]}" --layers 64 --channels 4096 --heads 32
bad "threads" "${T[@]}" --threads 4096
bad "unknown --comm" "${T[@]}" --comm carrier-pigeon
bad "unknown --tokenizer" "${T[@]}" --tokenizer morse
bad "prompt is empty" "${T[@]}" --sample-tokens 5 --prompt ''
bad "need --pp > 1" "${T[@]}" --schedule gpipe
bad "virtual-stages" "${T[@]}" --pp 2 --virtual-stages 2
bad "unknown schedule" "${T[@]}" --pp 2 --schedule zigzag
bad "recompute" "${T[@]}" --recompute some
bad "tensor parallelism" "${T[@]}" --tp 2
bad "stages" "${T[@]}" --pp 9
bad "required" eval --text "$small"
bad "required" eval --checkpoint "$tmp"
bad "required" generate
bad "must be positive" generate --checkpoint "$tmp" --tokens 0
bad "not an integer" mesh --dp x
bad "must be positive" mesh --dp 0
bad "--pp is required" schedule --micro-batches 4
bad "must be positive" schedule --pp 2 --micro-batches 0
bad "unknown schedule" schedule --pp 2 --micro-batches 4 --schedule zigzag
bad "unknown trace command" trace draw
bad "nothing to draw" trace render --out "$tmp/x.svg"
bad "required" trace render --schedule 1f1b --pp 2 --micro-batches 2
bad "needs one of peak, gemm, step" bench frobnicate
bad "must be positive" bench gemm --threads 0

# ---- output paths -------------------------------------------------------------
bad "directory" "${T[@]}" --log-file "$tmp"
bad "empty path" "${T[@]}" --log-file ''
bad "cannot create" "${T[@]}" --log-file /nonexistent/dir/log.jsonl
bad "cannot create" "${T[@]}" --pp 2 --trace /nonexistent/dir/t.json
bad "at most" "${T[@]}" --pp 2 --trace "$tmp/$long"
bad "a device" trace render --schedule 1f1b --pp 2 --micro-batches 2 --out /dev/null
bad "cannot create" trace render --schedule 1f1b --pp 2 --micro-batches 2 --out /nonexistent/x.svg
bad "cannot create" trace render --schedule 1f1b --pp 2 --micro-batches 2 --out "$tmp/x.svg" --json /nonexistent/x.json

# ---- data files ---------------------------------------------------------------
: > "$tmp/empty.txt"
printf 'too short' > "$tmp/short.txt"
bad "no such file" train --data "$tmp/missing.txt" --steps 1
bad "too few" train --data "$tmp/empty.txt" --steps 1 --sample-tokens 0
bad "too few" train --data "$tmp/short.txt" --steps 1 --sample-tokens 0
bad "directory" train --data "$tmp" --steps 1 --sample-tokens 0
printf '1,2,3\n' | gzip > "$tmp/digits-short.csv.gz"
printf 'not gzip at all' > "$tmp/digits-bad.csv.gz"
bad "digits" train --model mlp --data "$tmp/digits-short.csv.gz" --steps 1
bad "digits" train --model cnn --data "$tmp/digits-bad.csv.gz" --steps 1
bad "no such file" eval --checkpoint "$tmp" --text "$tmp/missing.txt"

# ---- tokenizer files ----------------------------------------------------------
mkdir -p "$tmp/tok-empty" "$tmp/tok-bad"
printf '{"a": 1,' > "$tmp/tok-bad/encoder.json"
printf '#version: 0.2\na b\n' > "$tmp/tok-bad/vocab.bpe"
bad "encoder.json" "${T[@]}" --tokenizer gpt2 --tokenizer-dir "$tmp/tok-empty"
bad "encoder.json" "${T[@]}" --tokenizer gpt2 --tokenizer-dir "$tmp/tok-bad"

echo "cli_bad_input: $rows rows"
finish cli_bad_input
