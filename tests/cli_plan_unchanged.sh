#!/usr/bin/env bash
# The planner's figures that issue 29 item 6's bf16 pricing must not move, as main printed them at 581e170
# (tests/fixtures/plan/unchanged_main.txt, written by that commit's `cleave plan` from the command lines in
# unchanged_cmds.txt): every fp32 plan, on a calibrated description of this machine (zen5_this.json: calibrate's
# output on the development machine, exact_memory) and on the a100 description, and bf16 plans on the a100 and
# h100 descriptions (a GPU description prices every product at BF16's rates as before). Each command's JSON lines
# must equal main's byte for byte. A change that means to move them rewrites the fixture from that commit's
# binary and says so in its message.
. "$(dirname "$0")/lib.sh"

fx="$(dirname "$0")/fixtures/plan"
while read -r line; do
    echo "# $line"
    # shellcheck disable=SC2086
    $CLEAVE plan $line --json 2>&1
done < "$fx/unchanged_cmds.txt" > "$tmp/now.txt"
d=$(diff "$fx/unchanged_main.txt" "$tmp/now.txt" | head -6)
check '[ -z "$d" ]' "every plan's lines as main printed them ($(wc -l < "$fx/unchanged_main.txt") lines)$(excerpt 6 "$d")"
n32=$(grep -c '"precision": "fp32"' "$tmp/now.txt"); n16=$(grep -c '"precision": "bf16"' "$tmp/now.txt")
check '[ "$n32" -ge 150 ] && [ "$n16" -ge 60 ]' "the comparison covers $n32 fp32 and $n16 GPU bf16 configurations"
finish cli_plan_unchanged
