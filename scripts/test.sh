#!/usr/bin/env bash
# The README's second command: set up (as root, on a fresh Debian 12), build,
# and run the whole suite: the tests, the PyTorch fixtures recomputed and
# compared, the suite again under AddressSanitizer + UndefinedBehaviorSanitizer,
# a bounded fuzz run of the safetensors reader, and the README's first command
# checked to learn. Ends with one line "N passed, N failed, N skipped", in
# test cases (tests/run.sh); a failed phase adds one failed case.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --python-torch || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
jobs=$(nproc)
tally=$(mktemp)
trap 'rm -f "$tally"' EXIT
export CL_TEST_TALLY="$tally"
export CLEAVE_REQUIRE_DATA=1
phase_fail=0
phase() { # name, command...
    local name=$1; shift
    echo "== $name"
    if "$@"; then echo "== $name: ok"; else echo "== $name: FAILED"; phase_fail=$((phase_fail + 1)); fi
}
phase "build" make -s -j"$jobs"
phase "tests" make -s test
phase "fixtures against PyTorch" bash scripts/check_fixtures.sh
phase "build with sanitizers" make -s -j"$jobs" SAN=1
phase "tests with sanitizers" make -s SAN=1 test
phase "fuzz the safetensors reader" bash scripts/fuzz.sh "${CL_FUZZ_SECONDS:-60}"
phase "README first command learns" bash tests/readme_learns.sh
pass=0; fail=0; skip=0
while read -r p f s; do pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + ${s:-0})); done < "$tally"
echo
echo "phases failed: $phase_fail"
[ "$phase_fail" -gt 0 ] && fail=$((fail + phase_fail))
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
