#!/usr/bin/env bash
# The Llama family from the command line (issue 30, items 1-2): the presets
# described (cleave memory --model llama-2-70b: the F32 weights of its
# 68,976,648,192 parameters, to the byte), the flags of --model llama
# (--kv-heads --ffn-channels --rope-theta --rope-scaling --tie-embeddings) changing the
# description, Llama-only flags refused on GPT, tp past the key-value heads
# described (replicated) where a multiple of them, else refused naming both; llama-tiny trains (its loss falls) and recomputing
# (selective, full) gives the same losses bit for bit.
source "$(dirname "$0")/lib.sh"

pbytes() { "$CLEAVE" memory --json "$@" 2>&1 | sed -n 's/.*"params": \([0-9]*\).*/\1/p'; }

_p=$(pbytes --model llama-2-70b)
check '[ "$_p" = 275906592768 ]' "llama-2-70b's F32 weights: $_p bytes, not 4 x 68976648192"
"$CLEAVE" memory --model llama-2-70b > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 0 ] && grep -q "257.0 GiB" "$tmp/o"' "cleave memory --model llama-2-70b (exit $_rc)$(excerpt 4 "$(cat "$tmp/o")")"

# llama-tiny: V 256, C 64, L 2, K 32, F 172, untied: 2 V C + C + L (2 C + 2 C^2 + 2 C K + 3 C F) = 123712 floats
_p=$(pbytes --model llama-tiny)
check '[ "$_p" = $((123712 * 4)) ]' "llama-tiny's weights: $_p bytes"
# tied: one V C fewer; --ffn-channels 256 and --kv-heads 4 as the formula says (each tensor a multiple of 16 floats)
_p=$(pbytes --model llama --tie-embeddings 1)
check '[ "$_p" = $(((123712 - 16384) * 4)) ]' "--tie-embeddings 1: $_p bytes"
_p=$(pbytes --model llama --ffn-channels 256 --kv-heads 4)
check '[ "$_p" = $(((2 * 16384 + 64 + 2 * (128 + 2 * 4096 + 2 * 4096 + 3 * 64 * 256)) * 4)) ]' "--ffn-channels 256 --kv-heads 4: $_p bytes"

"$CLEAVE" memory --model gpt2-tiny --rope-theta 500000 > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 2 ] && grep -q "rope-theta applies to Llama models" "$tmp/o"' "--rope-theta on GPT not refused (exit $_rc)"
"$CLEAVE" memory --model llama --kv-heads 3 > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 2 ] && grep -q "kv-heads 3 must divide --heads (4)" "$tmp/o"' "--kv-heads 3 of 4 not refused (exit $_rc)"
"$CLEAVE" memory --model llama-tiny --tp 4 > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 0 ]' "--tp 4 past 2 key-value heads (replicated) not described (exit $_rc)$(excerpt 2 "$(cat "$tmp/o")")"
"$CLEAVE" memory --model llama --heads 6 --channels 96 --kv-heads 2 --ffn-channels 192 --tp 3 > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 2 ] && grep -q "tp 3 must be a multiple of the 2 key-value heads, or divide them" "$tmp/o"' \
    "--tp 3 of 2 key-value heads not refused (exit $_rc)$(excerpt 2 "$(cat "$tmp/o")")"
"$CLEAVE" memory --model llama-tiny --tp 2 > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 0 ]' "llama-tiny --tp 2 not described (exit $_rc)$(excerpt 2 "$(cat "$tmp/o")")"
"$CLEAVE" memory --model llama --rope-theta 1 > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 2 ] && grep -q "rope-theta" "$tmp/o"' "--rope-theta 1 not refused (exit $_rc)"
# --rope-scaling (Llama 3.1's rope_scaling llama3): the presets' own in the resolved settings, a bad one refused naming the field
_o=$("$CLEAVE" train --model llama-3.1-405b --print-config 2>&1 | grep rope-scaling)
check '[ "$(echo $_o)" = "\"rope-scaling\": \"llama3:8,1,4,8192\"," ]' "llama-3.1-405b's rope scaling: $_o"
_o=$("$CLEAVE" train --model llama-3-8b --print-config 2>&1 | grep rope-scaling)
check '[ "$(echo $_o)" = "\"rope-scaling\": \"none\"," ]' "llama-3-8b's rope scaling: $_o"
"$CLEAVE" memory --model llama --rope-scaling llama3:8,1 > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 2 ] && grep -q "rope-scaling .llama3:8,1.: none, or llama3:FACTOR" "$tmp/o"' "--rope-scaling llama3:8,1 (exit $_rc)$(excerpt 2 "$(cat "$tmp/o")")"
"$CLEAVE" memory --model llama --rope-scaling llama3:0.5,1,4,64 > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 2 ] && grep -q "factor 0.5 must be in" "$tmp/o"' "--rope-scaling factor 0.5 (exit $_rc)$(excerpt 2 "$(cat "$tmp/o")")"
"$CLEAVE" memory --model gpt2-tiny --rope-scaling none > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 2 ] && grep -q "rope-scaling applies to Llama models" "$tmp/o"' "--rope-scaling on GPT (exit $_rc)"

# llama-3.1-405b at its whole context (131072): described, the blockwise attention keeping each head's lse, not its
# T x T scores (128 heads' of those passed the description's 2^40-float bound)
"$CLEAVE" memory --model llama-3.1-405b > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 0 ] && grep -q "^ *0 *all" "$tmp/o"' "405b at 131072 (exit $_rc)$(excerpt 2 "$(cat "$tmp/o")")"
"$CLEAVE" memory --model llama-3.1-405b --seq-len 8192 --tp 8 > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 0 ]' "405b at 8192, tp 8 (exit $_rc)$(excerpt 2 "$(cat "$tmp/o")")"

# the planner costs the Llama kinds from their tables (layouts past the 8 key-value heads left out)
"$CLEAVE" plan --model llama-3-70b --devices 64 --hardware h100 > "$tmp/o" 2>&1; _rc=$?
check '[ $_rc -eq 0 ] && grep -q "^ *1 " "$tmp/o" && ! grep -Eq "^ *[0-9]+ +[0-9]+ +(16|32|64) " "$tmp/o"' \
    "cleave plan --model llama-3-70b --devices 64 (exit $_rc)$(excerpt 4 "$(cat "$tmp/o")")"

printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 200) > "$tmp/text.txt"
losses() { sed -n 's/^step *[0-9]*\/[0-9]* | loss \([0-9.]*\).*/\1/p' "$1"; }
"$CLEAVE" train --model llama-tiny --data "$tmp/text.txt" --steps 30 --micro-batch-size 4 --seq-len 32 --sample-tokens 0 > "$tmp/o" 2>&1; _rc=$?
_l=$(losses "$tmp/o")
check '[ $_rc -eq 0 ] && [ "$(echo "$_l" | wc -l)" -eq 30 ] && awk "BEGIN{exit !($(echo "$_l" | tail -1) < 0.75 * $(echo "$_l" | head -1))}"' \
    "llama-tiny's loss does not fall by a quarter in 30 steps (exit $_rc): $(echo $_l | cut -c1-80)$(excerpt 3 "$(cat "$tmp/o")")"
"$CLEAVE" train --model llama-tiny --data "$tmp/text.txt" --steps 5 --micro-batch-size 4 --seq-len 32 --sample-tokens 0 > "$tmp/o" 2>&1
_l=$(losses "$tmp/o")
for _r in selective full; do
    "$CLEAVE" train --model llama-tiny --data "$tmp/text.txt" --steps 5 --micro-batch-size 4 --seq-len 32 --sample-tokens 0 --recompute $_r > "$tmp/r" 2>&1; _rc=$?
    check '[ $_rc -eq 0 ] && [ -n "$_l" ] && [ "$(losses "$tmp/r")" = "$_l" ]' \
        "--recompute $_r: other losses (exit $_rc): $(losses "$tmp/r" | tr '\n' ' ')$(excerpt 3 "$(cat "$tmp/r")")"
done
finish cli_llama
