#!/usr/bin/env bash
# Every file cleave reads whole has a size bound fitting its kind (core.h,
# cl_file_kind; docs/ARCHITECTURE.md, Reliability: "Files read whole").
# Each reader the commands reach is fed a file that never ends (/dev/zero, a
# FIFO) and a sparse file one byte over its bound: each must exit 2 within
# 20 s (60 in the sanitizer build, where reading 256 MiB of /dev/zero took
# 15 to 21 s on two loaded cores; 124 would be a read without end) with a
# last line naming the file
# and the bound, having held no more memory than the bound and 64 MiB. A
# token cache over its bound is a stale cache: noted, rebuilt, and the run
# goes on.
#
# Text corpora are bounded by memory (an eighth of what this process may
# use). /dev/zero as text is read under `prlimit --as` so the bound is small;
# the sanitizer build cannot run under an address-space limit (its shadow
# memory), so there the text bound is met with sparse files only, and
# /dev/zero's path through the same reader with the fixed-bound kinds.
set -u
source "$(dirname "$0")/lib.sh"
san=0
case "$BUILD" in *san*) san=1 ;; esac
MiB=$((1 << 20))
LIMIT=20
[ $san -eq 1 ] && LIMIT=60

# What cl_host_memory_total computes, in bytes: physical memory, or less
# where a cgroup limit or ulimit -v / -d says less.
mem_total() {
    local m v
    m=$(($(getconf _PHYS_PAGES) * $(getconf PAGESIZE)))
    v=$(cat /sys/fs/cgroup/memory.max 2>/dev/null)
    [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] && [ "$v" -lt "$m" ] && m=$v
    for v in "$(ulimit -v)" "$(ulimit -d)"; do
        [[ "$v" =~ ^[0-9]+$ ]] && [ $((v * 1024)) -lt "$m" ] && m=$((v * 1024))
    done
    echo "$m"
}
MEM=$(mem_total)
TEXT=$((MEM / 8))
AS=$((1536 * MiB)) # the --as limit for /dev/zero as text: a 192 MiB bound
AS_TEXT=$((AS < MEM ? AS / 8 : MEM / 8))

# refused WHAT BOUND FILE ARGS...: cleave ARGS (run under the command in
# $PRE, if any) exits 2 in time, its last line on stderr naming FILE ("FILE
# holds"), the bound's bytes and WHAT; in the normal build its peak memory
# (GNU time's maximum RSS) within 64 MiB of the bound
PRE=()
RSS=()
[ $san -eq 0 ] && [ -x /usr/bin/time ] && RSS=(/usr/bin/time -f %M -o "$tmp/rss")
refused() {
    local what=$1 bound=$2 file=$3 t0=$SECONDS rc err
    shift 3
    echo 0 > "$tmp/rss"
    timeout $LIMIT "${RSS[@]}" "${PRE[@]}" "$CLEAVE" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    local rss
    rss=$(tail -n 1 "$tmp/rss" | grep -E '^[0-9]+$' || echo 0)
    rss=$((rss * 1024))
    check '[ $rss -le $((bound + 64 * MiB)) ]' "cleave $*: held $rss bytes at most, over the bound $bound and 64 MiB"
    err=$(tail -n 1 "$tmp/err")
    check '[ $rc -eq 2 ]' "cleave $*: status $rc, not 2$(excerpt 3 "$err")"
    check 'grep -qF -- "$file holds" <<<"$err" && grep -qF -- "($bound bytes)" <<<"$err" && grep -qF -- "$what" <<<"$err"' \
        "cleave $*: the message does not name $file, the bound $bound and $what$(excerpt 3 "$err")"
    grep -qE 'Sanitizer|runtime error:' "$tmp/err" && check false "cleave $*: a sanitizer report$(excerpt 20 "$(cat "$tmp/err")")"
    [ -n "${CL_BOUNDS_SHOW:-}" ] && echo "$rc $((SECONDS - t0))s $((rss >> 20)) MiB | $*$(excerpt 1 "$err")"
}
# over FILE BYTES: a sparse file of BYTES bytes (nothing written)
over() { rm -f "$1" && truncate -s "$2" "$1"; }

small="$tmp/small.txt"
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 200) > "$small"
T=(train --data "$small" --steps 1 --sample-tokens 0)

# ---- hardware descriptions and other JSON (4 MiB) -----------------------------
J="a JSON description or config"
JB=$((4 * MiB))
refused "$J" $JB /dev/zero plan --hardware /dev/zero
over "$tmp/hw.json" $((JB + 1))
refused "$J" $JB "$tmp/hw.json" plan --hardware "$tmp/hw.json"
mkfifo "$tmp/hw.fifo"
(head -c $((17 * MiB)) /dev/zero > "$tmp/hw.fifo" 2>/dev/null &)
refused "$J" $JB "$tmp/hw.fifo" plan --hardware "$tmp/hw.fifo"

# ---- text corpora (an eighth of memory) and their token caches ------------------
over "$tmp/big.txt" $((TEXT + 1))
refused "a text corpus" $TEXT "$tmp/big.txt" train --data "$tmp/big.txt" --steps 1 --sample-tokens 0
if [ $san -eq 0 ]; then
    PRE=(prlimit --as=$AS)
    refused "a text corpus" $AS_TEXT /dev/zero train --data /dev/zero --steps 1 --sample-tokens 0
    PRE=()
else
    skip "train --data /dev/zero (no address-space limit under ASan; the sparse corpus above meets the text bound)"
fi
# a token cache over its bound: noted, rebuilt, trained on
over "$small.byte.tok" $((2 * TEXT + 121))
timeout 60 "$CLEAVE" "${T[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
check '[ $rc -eq 0 ]' "a token cache over its bound: status $rc$(excerpt 5 "$(cat "$tmp/err")")"
check 'grep -qF "$small.byte.tok holds" "$tmp/err" && grep -qF "the most cleave reads of a token cache" "$tmp/err" && grep -q "rebuilding" "$tmp/err"' \
    "no note of the token cache over its bound$(excerpt 5 "$(cat "$tmp/err")")"
check '[ "$(stat -c %s "$small.byte.tok")" -lt 100000 ]' "the token cache over its bound was not rebuilt"

# ---- digits: plain, and a gzip bomb (256 MiB decompressed) ----------------------
D=$((256 * MiB))
[ $((MEM / 8)) -lt $D ] && D=$((MEM / 8))
refused "a digits CSV" $D /dev/zero train --model mlp --data /dev/zero --steps 1
if ldd "$CLEAVE" | grep -q 'libz\.so'; then # built with zlib: gzip is decompressed
    head -c $MiB /dev/zero | gzip -1 > "$tmp/one.gz"
    for _ in $(seq $((D / MiB + 1))); do cat "$tmp/one.gz"; done > "$tmp/bomb.csv.gz"
    check '[ $(stat -c %s "$tmp/bomb.csv.gz") -lt $((2 * MiB)) ]' "the gzip bomb is not small"
    refused "a digits CSV" $D "$tmp/bomb.csv.gz" train --model cnn --data "$tmp/bomb.csv.gz" --steps 1
else
    skip "the gzip bomb (this build has no zlib)" setup
fi

# ---- tokenizer files (64 MiB) ---------------------------------------------------
mkdir -p "$tmp/tok1" "$tmp/tok2"
over "$tmp/tok1/encoder.json" $((64 * MiB + 1))
printf '#version: 0.2\n' > "$tmp/tok1/vocab.bpe"
refused "a tokenizer file" $((64 * MiB)) "$tmp/tok1/encoder.json" "${T[@]}" --tokenizer gpt2 --tokenizer-dir "$tmp/tok1"
G=${CLEAVE_DATA:-data}/gpt2
if [ -f "$G/encoder.json" ]; then
    cp "$G/encoder.json" "$tmp/tok2/"
    ln -s /dev/zero "$tmp/tok2/vocab.bpe"
    refused "a tokenizer file" $((64 * MiB)) "$tmp/tok2/vocab.bpe" "${T[@]}" --tokenizer gpt2 --tokenizer-dir "$tmp/tok2"
else
    skip "vocab.bpe as /dev/zero (no $G/encoder.json)" setup
fi

# ---- logs and traces (256 MiB) --------------------------------------------------
refused "a training log" $((256 * MiB)) /dev/zero plot /dev/zero --out "$tmp/p.svg"
over "$tmp/log.jsonl" $((256 * MiB + 1))
refused "a training log" $((256 * MiB)) "$tmp/log.jsonl" plot "$tmp/log.jsonl" --out "$tmp/p.svg"
refused "a trace" $((256 * MiB)) /dev/zero trace render /dev/zero --out "$tmp/t.svg"
over "$tmp/t.json" $((256 * MiB + 1))
refused "a trace" $((256 * MiB)) "$tmp/t.json" trace render "$tmp/t.json" --out "$tmp/t.svg"

# ---- checkpoints: config and state JSON, tensors, a sharded index ---------------
"$CLEAVE" "${T[@]}" --steps 2 --micro-batch-size 2 --save "$tmp/ck" >/dev/null 2>&1 &&
    "$CLEAVE" "${T[@]}" --steps 2 --micro-batch-size 2 --save "$tmp/sh" --save-format sharded >/dev/null 2>&1 ||
    check false "could not write the checkpoints to damage"
R=(train --data "$small" --steps 3 --sample-tokens 0 --micro-batch-size 2)
# The reader's bound itself, with the checkpoint's own checks off (CLEAVE_CKPT_VERIFY=0): with them on, the
# marker's recorded sizes refuse these files first (checked once below)
export CLEAVE_CKPT_VERIFY=0
cp -r "$tmp/ck" "$tmp/ck-cfg" && ln -sf /dev/zero "$tmp/ck-cfg/config.json"
refused "$J" $JB "$tmp/ck-cfg/config.json" "${R[@]}" --resume "$tmp/ck-cfg"
refused "$J" $JB "$tmp/ck-cfg/config.json" eval --checkpoint "$tmp/ck-cfg" --text "$small"
cp -r "$tmp/ck" "$tmp/ck-state" && over "$tmp/ck-state/trainer_state.json" $((JB + 1))
refused "$J" $JB "$tmp/ck-state/trainer_state.json" "${R[@]}" --resume "$tmp/ck-state"
cp -r "$tmp/ck" "$tmp/ck-model" && over "$tmp/ck-model/model.safetensors" $((MEM / 2 + 1))
refused "a checkpoint's tensors file" $((MEM / 2)) "$tmp/ck-model/model.safetensors" "${R[@]}" --resume "$tmp/ck-model"
refused "a checkpoint's tensors file" $((MEM / 2)) "$tmp/ck-model/model.safetensors" eval --checkpoint "$tmp/ck-model" --text "$small"
unset CLEAVE_CKPT_VERIFY
out=$(timeout $LIMIT "$CLEAVE" eval --checkpoint "$tmp/ck-model" --text "$small" 2>&1); rc=$?
check '[ $rc -eq 2 ] && grep -q "model.safetensors: $((MEM / 2 + 1)) bytes, cleave-checkpoint.json records" <<<"$out"' \
    "with the checkpoint's checks on, the oversized model.safetensors is not refused by its recorded size: status $rc$(excerpt 3 "$out")"
cp -r "$tmp/sh" "$tmp/sh-index" && over "$tmp/sh-index/cleave-index.json" $((256 * MiB + 1))
refused "a sharded checkpoint's index" $((256 * MiB)) "$tmp/sh-index/cleave-index.json" "${R[@]}" --resume "$tmp/sh-index"
refused "a sharded checkpoint's index" $((256 * MiB)) "$tmp/sh-index/cleave-index.json" eval --checkpoint "$tmp/sh-index" --text "$small"
mkdir -p "$tmp/hf" && ln -s /dev/zero "$tmp/hf/config.json" # a Hugging Face directory (no cleave marker)
refused "$J" $JB "$tmp/hf/config.json" eval --checkpoint "$tmp/hf" --text "$small"

# ---- eval --text: a sparse corpus over the bound, and /dev/zero -----------------
refused "a text corpus" $TEXT "$tmp/big.txt" eval --checkpoint "$tmp/ck" --text "$tmp/big.txt"
if [ $san -eq 0 ]; then
    PRE=(prlimit --as=$AS)
    refused "a text corpus" $AS_TEXT /dev/zero eval --checkpoint "$tmp/ck" --text /dev/zero
    PRE=()
else
    skip "eval --text /dev/zero (no address-space limit under ASan; the sparse corpus above meets the text bound)"
fi

finish cli_file_bounds
