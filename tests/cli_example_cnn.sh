#!/usr/bin/env bash
# examples/two_device_cnn.c: the cnn placed by hand on two devices.
# - the cut after flatten: the convolution part's output is fc1's input;
# - 30 steps with M = 1 and M = 4 micro-batches: exit 0, the example's own
#   verdicts (max |loss difference| 0, every equality "yes"), and, checked
#   here from the printed figures (17 digits), each split mode's losses,
#   gradient norms and validation loss equal to its unsplit reference's;
# - idle figures printed for both ranks in both modes; the loss falls;
# - a perturbed split run is caught (exit 3);
# - bad flags and data exit 2 naming the problem; a cap too small exits 1.
set -u
source "$(dirname "$0")/lib.sh"
EX=$BUILD/examples/two_device_cnn
# the step and validation lines of the n-th ($3, default 1) section of file $1
# whose heading starts with $2 (a section ends at a blank line)
figures() {
    awk -v h="$2" -v n="${3:-1}" 'index($0, h) == 1 { on = ++k == n; next } /^$/ { on = 0 } on' "$1" |
        grep -E '^  (step|validation loss)'
}

for m in 1 4; do
    out="$tmp/m$m.out"
    "$EX" --steps 30 --micro-batches $m --log-every 1 > "$out" 2> "$tmp/m$m.err"
    _rc=$?; check '[ $_rc -eq 0 ]' "M=$m: exit status not 0: $(tail -3 "$tmp/m$m.err")"
    check 'grep -q "cut: pool output \[32, 4, 4\] = 512 floats per sample = fc1 input 512" "$out"' "M=$m: no cut line"
    check 'grep -q "device 0 (rank 0): units conv relu pool flatten" "$out" && grep -q "device 1 (rank 1): units fc1 fc2 relu2 fc3 loss" "$out"' \
        "M=$m: placement lines missing"
    check '[ "$(grep -c "max |loss difference| vs unsplit: 0$" "$out")" -eq 2 ]' "M=$m: a split mode's loss difference is not 0"
    check '[ "$(grep -c "losses yes, grad norms yes, validation loss yes, final parameters yes" "$out")" -eq 2 ]' \
        "M=$m: a split mode is not bitwise equal: $(grep bitwise "$out")"
    check 'grep -q "split runs equal the unsplit runs bit for bit" "$out"' "M=$m: no final verdict"
    # the printed figures, compared here
    one=$(figures "$out" "unsplit, one device, 1 micro-batch")
    mode1=$(figures "$out" "mode 1:")
    refm=$(figures "$out" "unsplit, one device, $m micro-batch" $((m == 1 ? 2 : 1)))
    mode2=$(figures "$out" "mode 2:")
    check '[ "$(echo "$one" | grep -c "^  step")" -eq 30 ]' "M=$m: expected 30 step lines, got: $(echo "$one" | head -3)"
    check '[ -n "$mode1" ] && [ "$mode1" = "$one" ]' "M=$m: mode 1 differs from unsplit: $(diff <(echo "$one") <(echo "$mode1") | head -4)"
    check '[ -n "$mode2" ] && [ "$mode2" = "$refm" ]' "M=$m: mode 2 differs from unsplit: $(diff <(echo "$refm") <(echo "$mode2") | head -4)"
    check '[ "$(grep -c "rank [01] (device [01]): busy .* idle .* idle fraction 0\.[0-9]*$" "$out")" -eq 4 ]' "M=$m: idle lines missing"
    check 'grep -q "^idle fraction: mode 1 0\.[0-9]*, mode 2 (M=$m) 0\.[0-9]*$" "$out"' "M=$m: no idle summary"
    first=$(echo "$one" | awk '/^  step/ { print $4; exit }')
    last=$(echo "$one" | awk '/^  step/ { l = $4 } END { print l }')
    check 'awk -v a="$first" -v b="$last" "BEGIN { exit !(b < a - 0.3) }"' "M=$m: the loss did not fall ($first -> $last)"
done
# with M = 4 the reference accumulates 4 micro-batches: not the 1-micro-batch run's bits, but close
check 'grep -q "^mode 2 vs the 1-micro-batch reference.*max |loss difference| [0-9.e-]*$" "$tmp/m4.out"' "no M=4 vs M=1 line"
check 'awk "/^mode 2 vs the 1-micro-batch/ { exit !(\$NF < 1e-5) }" "$tmp/m4.out"' "M=4 vs M=1 differ by more than 1e-5"

# a split run that differs is caught
"$EX" --steps 5 --perturb > "$tmp/p.out" 2> "$tmp/p.err"
_rc=$?; check '[ $_rc -eq 3 ]' "--perturb: exit status not 3"
check 'grep -q "FAILED: a split run differs from its unsplit reference" "$tmp/p.err"' "--perturb: no failure message"
check 'grep -q "losses NO" "$tmp/p.out"' "--perturb: losses not reported different"

# bad input
bad() { # expected-status message-pattern args...
    local want=$1 pat=$2; shift 2
    "$EX" "$@" > "$tmp/bad.out" 2> "$tmp/bad.err"
    local rc=$?
    check '[ $rc -eq $want ] && grep -q -- "$pat" "$tmp/bad.err"' "'$*': status $rc (want $want), stderr: $(head -2 "$tmp/bad.err")"
}
bad 2 "--steps needs a whole number" --steps 0
bad 2 "--steps needs a whole number" --steps abc
bad 2 "--steps needs a whole number" --steps
bad 2 "--micro-batches 3 must divide --batch 64" --micro-batches 3
bad 2 "--micro-batches needs a whole number" --micro-batches 0
bad 2 "--batch needs a whole number" --batch 99999
bad 2 "--lr needs a number" --lr -1
bad 2 "unknown flag '--bogus'" --bogus 1
bad 2 "unexpected argument 'foo'" foo
bad 2 "--device-memory" --device-memory lots
bad 2 "cannot open $tmp/none.csv" --data "$tmp/none.csv"
printf 'not,a,digits,file\n' > "$tmp/bad.csv"
"$EX" --data "$tmp/bad.csv" > /dev/null 2> "$tmp/bad.err"
_rc=$?; check '[ $_rc -eq 2 ] && [ -s "$tmp/bad.err" ]' "a malformed data file: not exit 2 with a message"
for i in 1 2 3; do printf '0,%.0s' $(seq 16); echo "$i"; done > "$tmp/digits16.csv"
bad 2 "digits16.csv: the images have 16 pixels but the model takes 64 inputs" --data "$tmp/digits16.csv"
bad 1 "raise --device-memory" --device-memory 64KiB --steps 2
"$EX" --help > "$tmp/help.out"
_rc=$?; check '[ $_rc -eq 0 ] && grep -q -- "--micro-batches M" "$tmp/help.out"' "--help"
finish cli_example_cnn
