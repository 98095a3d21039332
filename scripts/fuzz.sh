#!/usr/bin/env bash
# cleave fuzzing: builds tests/fuzz/fuzz_*.c (safetensors, tokens, checkpoint
# JSON, sharded checkpoint index) with clang's libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer, writes a seed corpus of
# valid files (made by cl_st_write), and fuzzes the safetensors and JSON
# readers for a bounded time.
#
# usage: bash scripts/fuzz.sh [SECONDS]     (default 30)
#
# Why: the readers take files from anywhere; a crash on a hostile header is a
# bug. Invariants: everything it builds or finds lands in build/fuzz/ (the
# growing corpus in build/fuzz/corpus, crashing inputs in build/fuzz/artifacts);
# it exits non-zero if the fuzzer finds a crash, a leak or a broken invariant,
# or if the target cannot be built. It exits 0 without fuzzing only when no
# clang can be found or installed. As root it installs what is missing
# (clang, libclang-rt-N-dev for the libFuzzer runtime) with apt-get.
set -euo pipefail

secs=${1:-30}
case "$secs" in
    ''|*[!0-9]*) echo "usage: bash scripts/fuzz.sh [SECONDS] (a whole number, default 30)" >&2; exit 2 ;;
esac
[ "$secs" -ge 1 ] || { echo "fuzz: SECONDS must be at least 1" >&2; exit 2; }

cd "$(dirname "$0")/.."
out=build/fuzz
mkdir -p "$out"

source scripts/apt_lock.sh # apt_get: waits, bounded, for another apt process's lock
is_root() { [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_updated=0
apt_install() {
    # Tries without an update first; updates at most once.
    DEBIAN_FRONTEND=noninteractive apt_get install -y -q "$@" >"$out/apt.log" 2>&1 && return 0
    if [ "$apt_updated" -eq 0 ]; then
        apt_updated=1
        apt_get update -q >>"$out/apt.log" 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt_get install -y -q "$@" >>"$out/apt.log" 2>&1 && return 0
    fi
    return 1
}

find_clang() {
    local c
    for c in clang clang-14 clang-15 clang-16 clang-13; do
        if command -v "$c" >/dev/null 2>&1; then echo "$c"; return 0; fi
    done
    return 1
}

CLANG=$(find_clang || true)
if [ -z "$CLANG" ] && is_root; then
    echo "fuzz: clang not found; installing it with apt-get"
    apt_install clang || true
    CLANG=$(find_clang || true)
fi
if [ -z "$CLANG" ] && [ "${CI:-}" = true ]; then
    echo "fuzz: FAILED: no clang found, though the set-up installs it (CI=true; see build/fuzz/apt.log)" >&2
    exit 1
fi
if [ -z "$CLANG" ]; then
    echo "fuzz: SKIPPED: no clang found$(is_root && echo ' and apt-get could not install it (see build/fuzz/apt.log)' || echo ' (run as root to install it, or install clang)')"
    exit 0
fi

probe="$out/probe.c"
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe"
have_fuzzer() { "$CLANG" -fsanitize=fuzzer,address,undefined "$probe" -o "$out/probe" >"$out/probe.log" 2>&1; }
if ! have_fuzzer; then
    major=$("$CLANG" -dumpversion | cut -d. -f1)
    if is_root; then
        echo "fuzz: $CLANG cannot link libFuzzer; installing libclang-rt-$major-dev"
        apt_install "libclang-rt-$major-dev" || apt_install clang || true
    fi
    if ! have_fuzzer; then
        echo "fuzz: FAILED: $CLANG is installed but cannot build a libFuzzer target:" >&2
        sed 's/^/    /' "$out/probe.log" | tail -n 5 >&2
        echo "fuzz: install libclang-rt-$major-dev (Debian) or your distribution's compiler-rt" >&2
        exit 1
    fi
fi

flags=(-std=c11 -g -O1 -D_GNU_SOURCE -Iinclude -Isrc -pthread -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
srcs=(src/core/*.c src/io/*.c src/kernels/convert.c src/kernels/simd.c) # format.c converts arrays through convert.c
data_srcs=(src/data/tokens.c src/data/file.c)
echo "fuzz: building with $CLANG"
build_target() { # build_target NAME SOURCES...: build/fuzz/fuzz_NAME with libFuzzer
    local name=$1; shift
    "$CLANG" "${flags[@]}" -fsanitize=fuzzer,address,undefined "${srcs[@]}" "$@" -lxxhash -lm -o "$out/fuzz_$name"
}
build_target safetensors tests/fuzz/fuzz_safetensors.c
build_target tokens "${data_srcs[@]}" tests/fuzz/fuzz_tokens.c
# the model description asks each unit kind's table (src/nn/kind_*.c), whose forward and backward reach
# the kernels, the collectives and oneDNN: those come uninstrumented from the build's libcleave.a (the
# fuzzed readers and describe.c are compiled here, so the archive's copies of them are never pulled in)
make -s build/libcleave.a build/cleave.pc > /dev/null
lib=(build/libcleave.a $(sed -n 's/^Libs.private: //p' build/cleave.pc | sed 's/-fopenmp//'))
build_target ckjson src/model/describe.c src/train/ckpt_json.c tests/fuzz/fuzz_ckjson.c "${lib[@]}"
build_target shard src/model/describe.c src/train/ckpt_json.c src/train/shard_index.c tests/fuzz/fuzz_shard_index.c "${lib[@]}"
"$CLANG" "${flags[@]}" -fsanitize=address,undefined -DCL_FUZZ_SEEDGEN "${srcs[@]}" "${data_srcs[@]}" \
    tests/fuzz/fuzz_safetensors.c -lxxhash -lm -o "$out/fuzz_seedgen"

rm -rf "$out/seeds" "$out/seeds-tokens" "$out/seeds-ckjson" "$out/seeds-shard"
mkdir -p "$out/seeds" "$out/seeds-tokens" "$out/seeds-ckjson" "$out/corpus" "$out/corpus-tokens" "$out/corpus-ckjson" \
    "$out/seeds-shard" "$out/corpus-shard" "$out/artifacts"
# sharded checkpoint indexes as cleave writes them (an MLP at tp 1, a one-block GPT at tp 2)
cp tests/fixtures/shard/*.json "$out/seeds-shard/"
"$out/fuzz_seedgen" "$out/seeds" "$out/seeds-tokens"
# A few hand-written JSON seeds for the bare JSON path.
printf '{"a":[1,-2.5e3,true,false,null,"\\u00e9\\ud83d\\ude00\\n"],"b":{}}' >"$out/seeds/doc.json"
printf '[0,-0,1e-7,9223372036854775807,-9223372036854775808,18446744073709551616]' >"$out/seeds/nums.json"
# Checkpoint JSON seeds in the shapes src/train/checkpoint.c writes.
ck=$out/seeds-ckjson
cat >"$ck/gpt.json" <<'EOF'
{
  "model_type": "gpt2",
  "architectures": ["GPT2LMHeadModel"],
  "n_layer": 2,
  "n_head": 4,
  "n_embd": 64,
  "n_positions": 64,
  "n_ctx": 64,
  "vocab_size": 256,
  "layer_norm_epsilon": 1e-05,
  "activation_function": "gelu_new",
  "tie_word_embeddings": true,
  "cleave_model": "gpt",
  "cleave_preset": "gpt2-tiny",
  "tokenizer": "byte"
}
EOF
printf '{\n  "widths": [64, 32, 10],\n  "cleave_model": "mlp",\n  "cleave_preset": "mlp",\n  "tokenizer": "none"\n}\n' >"$ck/mlp.json"
cat >"$ck/cnn.json" <<'EOF'
{
  "in_channels": 1,
  "height": 8,
  "width": 8,
  "conv_channels": 8,
  "conv_kernel": 3,
  "conv_stride": 1,
  "conv_pad": 1,
  "pool": 2,
  "hidden": 32,
  "hidden2": 16,
  "classes": 10,
  "cleave_model": "cnn",
  "cleave_preset": "cnn",
  "tokenizer": "none"
}
EOF
printf '{\n  "step": 5,\n  "optimizer_step": 5,\n  "seq_len": 32,\n  "global_batch": 8,\n  "seed": "1337"\n}\n' >"$ck/trainer_state.json"
# a config and a state in one object, so describe also runs with the state's seq_len
printf '{"n_layer": 1, "n_head": 2, "n_embd": 8, "n_positions": 32, "vocab_size": 50257, "seq_len": 16, "step": 0}' \
    >"$ck/both.json"

cat >"$out/ckjson.dict" <<'EOF'
"\"n_layer\""
"\"n_head\""
"\"n_embd\""
"\"n_positions\""
"\"vocab_size\""
"\"cleave_model\""
"\"gpt\""
"\"mlp\""
"\"cnn\""
"\"widths\""
"\"in_channels\""
"\"height\""
"\"width\""
"\"conv_channels\""
"\"conv_kernel\""
"\"conv_stride\""
"\"conv_pad\""
"\"pool\""
"\"hidden\""
"\"hidden2\""
"\"classes\""
"\"step\""
"\"optimizer_step\""
"\"seq_len\""
"\"global_batch\""
"\"seed\""
"2147483647"
"-2147483648"
"65536"
"46341"
"1073741824"
EOF
cat >"$out/tokens.dict" <<'EOF'
"CLTOK2\x00\x00"
"CLTOK1\x00\x00"
"\xff\xff\xff\xff\xff\xff\xff\xff"
"\x00\x00\x01\x00"
"\x02\x00\x00\x00"
"\x04\x00\x00\x00"
EOF

cat >"$out/safetensors.dict" <<'EOF'
"\"dtype\""
"\"shape\""
"\"data_offsets\""
"\"__metadata__\""
"\"F32\""
"\"BF16\""
"\"F64\""
"\"I32\""
"\"I64\""
"\"U16\""
"\"U8\""
"\"F16\""
"\"BOOL\""
"\\u"
"\\ud800\\udc00"
"[]"
"{}"
"18446744073709551615"
"9223372036854775807"
"4294967296"
"1e400"
"        "
EOF


cat >"$out/shard.dict" <<'EOF'
"\"format\""
"\"cleave sharded checkpoint\""
"\"version\""
"\"files\""
"\"tensors\""
"\"name\""
"\"shape\""
"\"dtype\""
"\"F32\""
"\"param\""
"\"exp_avg\""
"\"exp_avg_sq\""
"\"rank-00000.safetensors\""
"9223372036854775807"
"-1"
EOF

targets=(safetensors tokens ckjson shard)
share=$((secs / ${#targets[@]}))
[ "$share" -ge 1 ] || share=1
first=$((secs - share * (${#targets[@]} - 1)))
[ "$first" -ge 1 ] || first=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for name in "${targets[@]}"; do
    case $name in
        safetensors) corpus=$out/corpus; seeds=$out/seeds; t=$first ;;
        *) corpus=$out/corpus-$name; seeds=$out/seeds-$name; t=$share ;;
    esac
    log=$out/fuzz-$name.log
    echo "fuzz: $name for ${t}s (corpus $corpus, seeds $seeds)"
    set +e
    "$out/fuzz_$name" "$corpus" "$seeds" \
        -max_total_time="$t" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
        -dict="$out/$name.dict" -artifact_prefix="$out/artifacts/$name-" -print_final_stats=1 \
        >"$log" 2>&1
    rc=$?
    set -e
    if [ "$rc" -ne 0 ]; then
        grep -m1 -A 25 -E 'ERROR: |runtime error|deadly signal|Abrt|==[0-9]+==' "$log" >&2 || tail -n 25 "$log" >&2
        echo "fuzz: FAILED (exit $rc): the $name fuzzer found a crash; inputs in $out/artifacts/$name-*, full log in $log" >&2
        failed+=("$name")
        continue
    fi
    grep -E '^(Done|stat::number_of_executed_units)' "$log" | sed 's/^/    /' || true
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]}" >&2
    ls -1 "$out/artifacts" >&2 || true
    exit 1
fi
echo "fuzz: OK, no crash in ${secs}s over ${#targets[@]} targets"
