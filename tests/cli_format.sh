#!/usr/bin/env bash
# Number-format conversions against PyTorch's (issue 28): every F32 -> BF16
# and F32 -> F16 rounding of tests/format_ref.py's values (ties and their
# neighbours at every exponent, overflow, subnormals, 200000 random bit
# patterns) and every 16-bit pattern widened, bit for bit (NaNs as NaNs),
# by build/tests/test_format --ref; and the safetensors reader's conversions
# of a file holding torch's roundings and widenings (format_ref.py st,
# build/tests/test_safetensors --torch). Without PyTorch: a skip.
set -u
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
if ! $PY -c 'import torch' 2>/dev/null; then
    skip "the comparison with PyTorch (no torch for $PY)" setup
else
    timeout 300 $PY "$(dirname "$0")/format_ref.py" > "$tmp/ref.txt"
    rc=$?
    check '[ $rc -eq 0 ]' "format_ref.py failed (status $rc)"
    out=$("$BUILD/tests/test_format" --ref "$tmp/ref.txt" 2>&1)
    rc=$?
    echo "$out"
    check '[ $rc -eq 0 ]' "test_format --ref: $(tail -3 <<<"$out")"
    timeout 300 $PY "$(dirname "$0")/format_ref.py" st "$tmp/torch.safetensors"
    rc=$?
    check '[ $rc -eq 0 ]' "format_ref.py st failed (status $rc)"
    out=$("$BUILD/tests/test_safetensors" --torch "$tmp/torch.safetensors" 2>&1)
    rc=$?
    echo "$out"
    check '[ $rc -eq 0 ]' "test_safetensors --torch: $(tail -3 <<<"$out")"
fi
finish cli_format
