#!/usr/bin/env bash
# Number-format conversions against PyTorch's (issue 28): every F32 -> BF16
# and F32 -> F16 rounding of tests/format_ref.py's values (ties and their
# neighbours at every exponent, overflow, subnormals, 200000 random bit
# patterns) and every 16-bit pattern widened, bit for bit (NaNs as NaNs),
# by build/tests/test_format --ref. Without PyTorch: a skip.
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
fi
finish cli_format
