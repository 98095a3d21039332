#!/usr/bin/env bash
# Runs every test binary in $BUILD/tests and every tests/cli_*.sh script,
# each with a time limit, and prints "N passed, N failed".
set -u
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.."
pass=0; fail=0; failed=()
run_one() {
    local name=$1; shift
    local log="$BUILD/logs/$name.log"
    mkdir -p "$BUILD/logs"
    local t0=$SECONDS
    if timeout -k 10 "${CL_TEST_TIMEOUT:-900}" "$@" >"$log" 2>&1; then
        pass=$((pass + 1)); echo "PASS $name ($((SECONDS - t0))s)"
    else
        fail=$((fail + 1)); failed+=("$name"); echo "FAIL $name ($((SECONDS - t0))s)"; tail -n 30 "$log" | sed 's/^/    /'
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
echo "$pass passed, $fail failed"
[ -n "${CL_TEST_TALLY:-}" ] && echo "$pass $fail" >> "$CL_TEST_TALLY"
[ "$fail" -eq 0 ]
