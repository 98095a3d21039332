#!/usr/bin/env bash
# The mixture-of-experts kernels (issue 33) against PyTorch:
# build/tests/test_moe --write-input writes the inputs, tests/moe_ref.py
# computes the Mixtral router, combine, load-balancing loss and every
# gradient from the Mixtral equations with torch's own ops in float32, and
# test_moe --torch compares (1e-5 relative; the chosen experts exactly, a
# tie case included). Without PyTorch: a skip (a failure under CI=true).
set -u
source "$(dirname "$0")/lib.sh"
if have_torch "the comparison with PyTorch"; then
    "$BUILD/tests/test_moe" --write-input "$tmp/in.safetensors"
    rc=$?
    check '[ $rc -eq 0 ]' "test_moe --write-input failed (status $rc)"
    timeout 300 $PY "$(dirname "$0")/moe_ref.py" "$tmp/in.safetensors" "$tmp/ref.safetensors"
    rc=$?
    check '[ $rc -eq 0 ]' "moe_ref.py failed (status $rc)"
    out=$("$BUILD/tests/test_moe" --torch "$tmp/in.safetensors" "$tmp/ref.safetensors" 2>&1)
    rc=$?
    echo "$out"
    check '[ $rc -eq 0 ]' "test_moe --torch: $(tail -3 <<<"$out")"
    check 'grep -q "torch tie.idx .* 12 of 12 the same" <<<"$out"' "test_moe --torch did not compare the tie case"
fi
finish cli_moe_kernels
