#!/usr/bin/env bash
# `cleave schedule`: the 1F1B order for p 4, m 8 as Megatron runs it; every
# kind prints one line per rank, the closed-form bubble equal to the
# simulated one, and a timeline; --verbose adds sends and receives; costs
# change the makespan; --help; bad input exits 2 with one line naming it.
set -u
source "$(dirname "$0")/lib.sh"

out=$("$CLEAVE" schedule --pp 4 --micro-batches 8 --schedule 1f1b 2>&1); rc=$?
check '[ "$rc" -eq 0 ] && printf "%s\n" "$out" | grep -qx "rank 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7" &&
    printf "%s\n" "$out" | grep -qx "rank 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7" &&
    printf "%s\n" "$out" | grep -q "^makespan: 33 " && printf "%s\n" "$out" | grep -q "^bubble: overall 0.2727;" &&
    printf "%s\n" "$out" | grep -q "^closed form: 0.2727" &&
    printf "%s\n" "$out" | grep -qx "peak live micro-batches: rank 0 4; rank 1 3; rank 2 2; rank 3 1"' \
    "1f1b p 4 m 8 -> status $rc:$(excerpt 20 "$out")"

out=$("$CLEAVE" schedule --pp 4 --micro-batches 8 --schedule zb-h1 2>&1); rc=$?
check '[ "$rc" -eq 0 ] && printf "%s\n" "$out" | grep -q "^rank 0: F0 F1 F2 F3 B0 W0 F4 " &&
    printf "%s\n" "$out" | grep -q "^makespan: 27 " && printf "%s\n" "$out" | grep -q "^closed form: 0.1111" &&
    printf "%s\n" "$out" | grep -q "^bubble: overall 0.1111;" &&
    printf "%s\n" "$out" | grep -q "^rank 0  |F0 F1 F2 F3 \.  \.  \.  B0 W0 F4 "' \
    "zb-h1 p 4 m 8 -> status $rc:$(excerpt 20 "$out")"

# every kind: one action line per rank, simulated bubble equal to the closed form
for case in "gpipe|4|8|" "1f1b|3|5|" "interleaved|4|8|--virtual-stages 2" "interleaved|2|6|--virtual-stages 3" "zb-h1|8|16|" "1f1b|1|3|"; do
    IFS='|' read -r kind p m extra <<< "$case"
    # shellcheck disable=SC2086
    out=$("$CLEAVE" schedule --pp "$p" --micro-batches "$m" --schedule "$kind" $extra 2>&1); rc=$?
    lines=$(printf '%s\n' "$out" | grep -c '^rank [0-9]*:')
    sim=$(printf '%s\n' "$out" | sed -n 's/^bubble: overall \([0-9.]*\);.*/\1/p')
    cf=$(printf '%s\n' "$out" | sed -n 's/^closed form: \([0-9.]*\) .*/\1/p')
    rows=$(printf '%s\n' "$out" | grep -c '^rank [0-9]* *|')
    check '[ "$rc" -eq 0 ] && [ "$lines" -eq "$p" ] && [ "$rows" -eq "$p" ] && [ -n "$sim" ] && [ "$sim" = "$cf" ]' \
        "$kind p $p m $m $extra -> status $rc, $lines rank lines, $rows timeline rows, bubble '$sim' vs closed form '$cf'"
done

out=$("$CLEAVE" schedule --pp 2 --micro-batches 2 --verbose 2>&1); rc=$?
check '[ "$rc" -eq 0 ] && printf "%s\n" "$out" | grep -qx "rank 0: F0 sa0 F1 sa1 rg0 B0 rg1 B1 SYNC STEP" &&
    printf "%s\n" "$out" | grep -qx "rank 1: ra0 F0 B0 sg0 ra1 F1 B1 sg1 SYNC STEP"' \
    "--verbose -> status $rc:$(excerpt 6 "$out")"

out=$("$CLEAVE" schedule --pp 2 --micro-batches 4 --schedule gpipe --cost-f 1 --cost-b 2 --cost-w 1 2>&1); rc=$?
# (m + p - 1)(F + B + W) = 5 * 4 = 20
check '[ "$rc" -eq 0 ] && printf "%s\n" "$out" | grep -q "^makespan: 20 "' "costs -> status $rc:$(excerpt 8 "$out")"

out=$("$CLEAVE" schedule --help 2>&1); rc=$?
check '[ "$rc" -eq 0 ] && printf "%s" "$out" | grep -q -- "--virtual-stages"' "--help -> status $rc"

expect() { # expect "words" args...: status 2 and one line "cleave: error: ..." containing words
    local want=$1; shift
    local out rc lines
    out=$("$CLEAVE" schedule "$@" 2>&1 >/dev/null); rc=$?
    lines=$(printf '%s' "$out" | grep -c '' || true)
    check '[ "$rc" -eq 2 ] && printf "%s" "$out" | grep -q "^cleave: error: " && printf "%s" "$out" | grep -qiF -- "$want" &&
        [ "$lines" -eq 1 ]' "cleave schedule $* -> status $rc, $lines lines, wanted '$want':$(excerpt 5 "$out")"
}
expect "unknown schedule 'zb-h2'" --pp 4 --micro-batches 8 --schedule zb-h2
expect "multiple of the pipeline ranks (4)" --pp 4 --micro-batches 6 --schedule interleaved
expect "at least 2 virtual stages" --pp 4 --micro-batches 8 --schedule interleaved --virtual-stages 1
expect "1f1b takes one stage per rank" --pp 4 --micro-batches 8 --schedule 1f1b --virtual-stages 2
expect "zb-h1 takes one stage per rank" --pp 4 --micro-batches 8 --schedule zb-h1 --virtual-stages 2
expect "must be" --pp 0 --micro-batches 8
expect "must be" --pp 4 --micro-batches 0
expect "not an integer" --pp four --micro-batches 8
expect "--pp is required" --micro-batches 8
expect "--micro-batches is required" --pp 4
expect "not a number" --pp 2 --micro-batches 2 --cost-b fast
expect "must be between" --pp 2 --micro-batches 2 --cost-w -1
expect "--cost-f must be positive" --pp 2 --micro-batches 2 --cost-f 0
expect "unknown flag" --pp 2 --micro-batches 2 --bogus 1

finish cli_schedule
