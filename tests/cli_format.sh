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
if have_torch "the comparison with PyTorch"; then
    # compare WHAT FILE PYARGS -- TESTBIN TESTARGS: format_ref.py PYARGS, then the test binary on its output
    compare() {
        local what=$1 file=$2; shift 2
        local py=() rc out
        while [ "$1" != -- ]; do py+=("$1"); shift; done
        shift
        if [ ${#py[@]} -gt 0 ]; then timeout 300 $PY "$(dirname "$0")/format_ref.py" "${py[@]}"; else
            timeout 300 $PY "$(dirname "$0")/format_ref.py" > "$file"; fi
        rc=$?
        check '[ $rc -eq 0 ]' "format_ref.py ${py[*]} failed (status $rc)"
        out=$("$BUILD/tests/$1" "${@:2}" "$file" 2>&1)
        rc=$?
        echo "$out"
        check '[ $rc -eq 0 ]' "$what: $(tail -3 <<<"$out")"
    }
    compare "test_format --ref" "$tmp/ref.txt" -- test_format --ref
    compare "test_safetensors --torch" "$tmp/torch.safetensors" st "$tmp/torch.safetensors" -- test_safetensors --torch
fi
finish cli_format
