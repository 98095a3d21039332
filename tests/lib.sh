# Shared start of the tests/cli_*.sh scripts (sourced): the build to test,
# a scratch directory removed on exit, a failure count, check, excerpt and
# finish.
BUILD=${BUILD:-build}
CLEAVE=${CLEAVE:-$BUILD/cleave}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# check 'shell condition' 'message when it is false'
check() { if eval "$1"; then :; else echo "FAILED: $2"; fail=$((fail + 1)); fi; }
# excerpt N TEXT: TEXT's first N lines, each on a line of its own and
# indented, to end a check's message with what a command printed
excerpt() { printf '\n%s' "$(printf '%s\n' "$2" | head -n "$1" | sed 's/^/    /')"; }
# finish NAME: the one-line tally tests/run.sh shows, and the exit status
finish() {
    if [ $fail -eq 0 ]; then echo "$1: 1 passed, 0 failed"; else echo "$1: 0 passed, 1 failed"; fi
    [ $fail -eq 0 ]
}
