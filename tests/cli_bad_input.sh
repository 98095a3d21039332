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
# Never a crash, a hang (timeout 60 s) or exit 0. CL_BAD_INPUT_SHOW=1 prints
# every row's status, command and message.
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
    [ -n "${CL_BAD_INPUT_SHOW:-}" ] && echo "$rc | $(printf '%.150s' "$*") | $err"
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
bad "must divide the 4 attention heads" "${T[@]}" --tp 3
bad "stages" "${T[@]}" --pp 9
# tensor parallelism (the heads row is above): what --tp must divide, and what
# its companions need. The issue's "4C not divisible by tp" cannot be reached
# on a GPT (tp dividing the heads divides C, hence 4C), so the MLP's
# column-parallel width stands for it.
bad "must divide the MLP's column-parallel width 128" "${T[@]}" --model mlp --tp 3
bad "needs tensor parallelism" "${T[@]}" --sequence-parallel
bad "needs tensor parallelism" "${T[@]}" --tp 1 --sequence-parallel
bad "must divide the sequence length 33" "${T[@]}" --tp 2 --seq-len 33 --sequence-parallel
bad "make-vocab-size-divisible-by must be positive" "${T[@]}" --make-vocab-size-divisible-by 0
bad "make-vocab-size-divisible-by must be positive" "${T[@]}" --make-vocab-size-divisible-by -5
bad "not the CNN" "${T[@]}" --model cnn --tp 2
bad "must be positive" "${T[@]}" --tp 0
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
bad "--peak-bf16 must be between" bench gemm --peak-bf16 0

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
# the pixels per image are the file's (16 here): refused against the models' 64 inputs, naming the file and both counts
for i in 1 2 3; do printf '0,%.0s' $(seq 16); echo "$i"; done > "$tmp/digits16.csv"
bad "digits16.csv: the images have 16 pixels but the model takes 64 inputs" train --model mlp --data "$tmp/digits16.csv" --steps 1
bad "digits16.csv: the images have 16 pixels but the model takes 64 inputs" train --model cnn --data "$tmp/digits16.csv" --steps 1
bad "no such file" eval --checkpoint "$tmp" --text "$tmp/missing.txt"

# ---- tokenizer files ----------------------------------------------------------
mkdir -p "$tmp/tok-empty" "$tmp/tok-bad"
printf '{"a": 1,' > "$tmp/tok-bad/encoder.json"
printf '#version: 0.2\na b\n' > "$tmp/tok-bad/vocab.bpe"
bad "encoder.json" "${T[@]}" --tokenizer gpt2 --tokenizer-dir "$tmp/tok-empty"
bad "encoder.json" "${T[@]}" --tokenizer gpt2 --tokenizer-dir "$tmp/tok-bad"

# ---- checkpoints: their JSON, tensors and optimizer state ----------------------
# One good checkpoint, then copies each damaged in one way (tests/ckpt_damage.py).
"$CLEAVE" train --data "$small" --steps 2 --sample-tokens 0 --micro-batch-size 2 --save "$tmp/ck" >/dev/null 2>&1 ||
    { echo "FAILED: could not write the checkpoint the rows damage"; fail=$((fail + 1)); }
dmg() { # dmg NAME HOW...: $tmp/NAME is $tmp/ck damaged by ckpt_damage.py HOW
    rm -rf "${tmp:?}/$1"; cp -r "$tmp/ck" "$tmp/$1"
    python3 "$(dirname "$0")/ckpt_damage.py" "$tmp/$1" "${@:2}" || { echo "FAILED: ckpt_damage.py $*"; fail=$((fail + 1)); }
}
R=(train --data "$small" --steps 4 --sample-tokens 0 --micro-batch-size 2)
E=(eval --text "$small" --checkpoint)
# The checks behind the content hashes (each of these damages is first refused by its hash,
# tests/cli_ckpt_integrity.sh): a checkpoint from before hashes, or one forged with matching ones, reaches them
export CLEAVE_CKPT_VERIFY=0
dmg nocfg rm config.json;                              bad "config.json" "${E[@]}" "$tmp/nocfg"
dmg badcfg text config.json '{"n_layer": 2,';          bad "not a JSON file" "${E[@]}" "$tmp/badcfg"
dmg arrcfg text config.json '[1, 2, 3]';               bad "config.json" "${E[@]}" "$tmp/arrcfg"
dmg wide json config.json n_embd 4096;                 bad "wte.weight" "${E[@]}" "$tmp/wide"
dmg deep json config.json n_layer 2147483647;          bad "n_layer\|layers" "${E[@]}" "$tmp/deep"
dmg over json config.json n_layer 2147483648;          bad "config.json" "${E[@]}" "$tmp/over"
dmg npos json config.json n_positions 2147483647;      bad "context\|n_positions" "${E[@]}" "$tmp/npos"
dmg negh json config.json n_head -4;                   bad "config.json" "${E[@]}" "$tmp/negh"
dmg fvoc json config.json vocab_size 1.5;              bad "config.json" "${E[@]}" "$tmp/fvoc"
dmg kind json config.json cleave_model '"rnn"';        bad "config.json" "${E[@]}" "$tmp/kind"
dmg tokz json config.json tokenizer '"morse"';         bad "tokenizer" "${E[@]}" "$tmp/tokz"
dmg tokz2 json config.json tokenizer '"morse"';        bad "tokenizer" generate --checkpoint "$tmp/tokz2"
dmg nomodel rm model.safetensors;                      bad "model.safetensors" "${E[@]}" "$tmp/nomodel"
dmg trunc truncate model.safetensors 1000;             bad "model.safetensors" "${E[@]}" "$tmp/trunc"
dmg hdr byte model.safetensors 3 255;                  bad "model.safetensors" "${E[@]}" "$tmp/hdr"
dmg nan value model.safetensors wte.weight 7 nan;      bad "non-finite" "${E[@]}" "$tmp/nan"
dmg dtype dtype model.safetensors wpe.weight F16;      bad "wpe.weight" "${E[@]}" "$tmp/dtype"
dmg gone rename model.safetensors ln_f.bias ln_f.bogus; bad "ln_f.bias" "${E[@]}" "$tmp/gone"
dmg shape json config.json n_positions 32;             bad "wpe.weight" generate --checkpoint "$tmp/shape"
dmg nost rm trainer_state.json;                        bad "trainer_state.json" "${R[@]}" --resume "$tmp/nost"
dmg badst text trainer_state.json '{"step": 2';        bad "not a JSON file" "${R[@]}" --resume "$tmp/badst"
dmg bigst json trainer_state.json optimizer_step 2147483647; bad "trainer_state.json" "${R[@]}" --resume "$tmp/bigst"
dmg negst json trainer_state.json step -1;             bad "trainer_state.json" "${R[@]}" --resume "$tmp/negst"
dmg seed json trainer_state.json seed 1337;            bad "trainer_state.json" "${R[@]}" --resume "$tmp/seed"
dmg past json trainer_state.json step 9;               bad "trainer_state.json\|nothing to train" "${R[@]}" --resume "$tmp/past"
dmg noopt rm optimizer.safetensors;                    bad "optimizer.safetensors" "${R[@]}" --resume "$tmp/noopt"
dmg negv value optimizer.safetensors exp_avg_sq.h.0.mlp.c_fc.weight 17 -1; bad "exp_avg_sq.h.0.mlp.c_fc.weight" "${R[@]}" --resume "$tmp/negv"
dmg infm value optimizer.safetensors exp_avg.wte.weight 3 inf; bad "exp_avg.wte.weight" "${R[@]}" --resume "$tmp/infm"
dmg other json config.json n_embd 128;                 bad "wte.weight" "${R[@]}" --resume "$tmp/other"
unset CLEAVE_CKPT_VERIFY
bad "\-\-model cnn disagrees with the checkpoint's gpt2-tiny" train --model cnn --steps 4 --resume "$tmp/ck"
bad "seq-len\|checkpoint" "${R[@]}" --seq-len 32 --resume "$tmp/ck"
bad "empty path" "${R[@]}" --resume ''
bad "no such directory" "${R[@]}" --resume "$tmp/nope"
bad "no such directory" eval --checkpoint "$tmp/nope" --text "$small"
bad "no such directory" generate --checkpoint "$tmp/nope"
# where a save may not go
mkdir -p "$tmp/userdir"; echo mine > "$tmp/userdir/notes.txt"; cp "$small" "$tmp/user.txt"
dmg nomark rm cleave-checkpoint.json
bad "save" "${T[@]}" --save "$tmp/user.txt"
bad "save" "${T[@]}" --save "$tmp/userdir"
bad "save" "${T[@]}" --save "$tmp/nomark"
bad "save" "${T[@]}" --save ''
bad "save" "${T[@]}" --save /nonexistent/dir/ck
bad "4000" "${T[@]}" --save "$tmp/$long"
check 'cmp -s "$small" "$tmp/user.txt" && [ "$(ls "$tmp/userdir")" = notes.txt ]' "a refused --save changed what was there"

echo "cli_bad_input: $rows rows"
finish cli_bad_input
