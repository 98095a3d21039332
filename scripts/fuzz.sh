#!/usr/bin/env bash
# cleave fuzzing: builds tests/fuzz/fuzz_safetensors.c with clang's libFuzzer,
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

is_root() { [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_updated=0
apt_install() {
    # Tries without an update first; updates at most once.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >"$out/apt.log" 2>&1 && return 0
    if [ "$apt_updated" -eq 0 ]; then
        apt_updated=1
        apt-get update -q >>"$out/apt.log" 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >>"$out/apt.log" 2>&1 && return 0
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
srcs=(src/core/*.c src/io/*.c)
echo "fuzz: building with $CLANG"
"$CLANG" "${flags[@]}" -fsanitize=fuzzer,address,undefined "${srcs[@]}" tests/fuzz/fuzz_safetensors.c -lm -o "$out/fuzz_safetensors"
"$CLANG" "${flags[@]}" -fsanitize=address,undefined -DCL_FUZZ_SEEDGEN "${srcs[@]}" tests/fuzz/fuzz_safetensors.c -lm \
    -o "$out/fuzz_seedgen"

rm -rf "$out/seeds"
mkdir -p "$out/seeds" "$out/corpus" "$out/artifacts"
"$out/fuzz_seedgen" "$out/seeds"
# A few hand-written JSON seeds for the bare JSON path.
printf '{"a":[1,-2.5e3,true,false,null,"\\u00e9\\ud83d\\ude00\\n"],"b":{}}' >"$out/seeds/doc.json"
printf '[0,-0,1e-7,9223372036854775807,-9223372036854775808,18446744073709551616]' >"$out/seeds/nums.json"

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

echo "fuzz: running for ${secs}s (corpus $out/corpus, seeds $out/seeds)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
set +e
"$out/fuzz_safetensors" "$out/corpus" "$out/seeds" \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -dict="$out/safetensors.dict" -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
    >"$out/fuzz.log" 2>&1
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
    grep -m1 -A 25 -E 'ERROR: |runtime error|deadly signal|Abrt|==[0-9]+==' "$out/fuzz.log" >&2 || tail -n 25 "$out/fuzz.log" >&2
    echo "fuzz: FAILED (exit $rc): the fuzzer found a crash; inputs in $out/artifacts/, full log in $out/fuzz.log" >&2
    ls -1 "$out/artifacts" >&2 || true
    exit 1
fi
grep -E '^(Done|stat::)' "$out/fuzz.log" || true
echo "fuzz: OK, no crash in ${secs}s"
