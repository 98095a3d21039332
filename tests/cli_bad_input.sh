#!/usr/bin/env bash
# Bad input to the cleave command: each case must print one line naming the
# problem (containing the given words) and exit with status 2 — never crash,
# hang or exit 0.
set -u
BUILD=${BUILD:-build}
CLEAVE="$BUILD/cleave"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 200) > "$tmp/small.txt"
expect() { # expect "words" args...
    local want=$1; shift
    local out rc
    out=$(timeout 60 "$CLEAVE" "$@" 2>&1 >/dev/null); rc=$?
    local lines
    lines=$(printf '%s' "$out" | grep -c '' || true)
    if [ "$rc" -eq 2 ] && printf '%s' "$out" | grep -qi -- "$want" && [ "$lines" -eq 1 ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAILED: cleave $* -> status $rc, ${lines} lines, wanted '$want':"
        printf '%s\n' "$out" | head -5 | sed 's/^/    /'
    fi
}
T=(train --data "$tmp/small.txt" --steps 1 --sample-tokens 0)
expect "unknown flag" train --bogus 1
expect "unknown command" frobnicate
expect "not an integer" "${T[@]}" --layers abc
expect "not a number" "${T[@]}" --lr fast
expect "must be positive" "${T[@]}" --layers 0
expect "must be positive" "${T[@]}" --channels -8
expect "must be positive" "${T[@]}" --micro-batch-size 0
expect "must be positive" "${T[@]}" --steps -3
expect "heads (3) must divide" "${T[@]}" --heads 3
expect "longer than the model's context" "${T[@]}" --seq-len 65
expect "asked" "${T[@]}" --device-memory 64KiB
expect "unknown unit" "${T[@]}" --device-memory 12XB
expect "must be positive" "${T[@]}" --device-memory 0
expect "no such file" train --data "$tmp/missing.txt" --steps 1
expect "not a multiple" "${T[@]}" --micro-batch-size 3 --global-batch-size 8
expect "unknown model" "${T[@]}" --model gpt5
expect "unknown --tokenizer" "${T[@]}" --tokenizer morse
expect "needs a value" train --steps
expect "no such directory" eval --checkpoint "$tmp/nope" --text "$tmp/small.txt"
expect "required" eval --text "$tmp/small.txt"
expect "no such directory" generate --checkpoint "$tmp/nope"
expect "unexpected argument" train stray
echo "cli_bad_input: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
