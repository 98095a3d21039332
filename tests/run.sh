#!/usr/bin/env bash
# Runs every test binary in $BUILD/tests and every tests/cli_*.sh script,
# each with a time limit, and prints "N passed, N failed, N skipped",
# counted in test cases: each test ends with a line "... P passed, F
# failed, S skipped" (tests/lib.sh's finish, tests/common/check.c's
# report), which is added up. A test that exits non-zero counts at least one
# failed case whatever its line says; one that prints no such line counts
# as one case, passed or failed by its exit status.
set -u
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.."
pass=0; fail=0; skip=0; failed=()
run_one() {
    local name=$1; shift
    local log="$BUILD/logs/$name.log"
    mkdir -p "$BUILD/logs"
    local t0=$SECONDS rc
    timeout -k 10 "${CL_TEST_TIMEOUT:-900}" "$@" >"$log" 2>&1
    rc=$?
    local line p=0 f=0 s=0
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$log" | tail -n 1)
    if [ -n "$line" ]; then
        p=$(sed -E 's/.* ([0-9]+) passed, [0-9]+ failed.*/\1/' <<<"$line")
        f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
        s=$(sed -nE 's/.* ([0-9]+) skipped$/\1/p' <<<"$line")
        s=${s:-0}
    elif [ $rc -eq 0 ]; then p=1
    fi
    [ $rc -ne 0 ] && [ "$f" -eq 0 ] && f=1
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    local what="$p passed, $f failed, $s skipped; $((SECONDS - t0))s"
    if [ $rc -eq 0 ] && [ "$f" -eq 0 ]; then
        echo "PASS $name ($what)"
    else
        failed+=("$name"); echo "FAIL $name ($what, status $rc)"; tail -n 30 "$log" | sed 's/^/    /'
    fi
}
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for s in tests/cli_*.sh; do
    [ -f "$s" ] || continue
    run_one "$(basename "$s" .sh)" env BUILD="$BUILD" bash "$s"
done
echo
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ -n "${CL_TEST_TALLY:-}" ] && echo "$pass $fail $skip" >> "$CL_TEST_TALLY"
[ "$fail" -eq 0 ]
