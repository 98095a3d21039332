#!/usr/bin/env bash
# The Llama kernels (issue 30) against PyTorch: build/tests/test_llama_kernels
# --write-input writes the inputs, tests/llama_ref.py computes RMSNorm,
# SwiGLU, rotary embeddings + grouped-query attention (KV 2 and 1) forward
# and backward and the rotary tables with torch's own ops in float32, and
# test_llama_kernels --torch compares (1e-5 relative; the tables within 1
# ulp of HF's). Without PyTorch: a skip (a failure under CI=true).
set -u
source "$(dirname "$0")/lib.sh"
if have_torch "the comparison with PyTorch"; then
    "$BUILD/tests/test_llama_kernels" --write-input "$tmp/in.safetensors"
    rc=$?
    check '[ $rc -eq 0 ]' "test_llama_kernels --write-input failed (status $rc)"
    timeout 300 $PY "$(dirname "$0")/llama_ref.py" "$tmp/in.safetensors" "$tmp/ref.safetensors"
    rc=$?
    check '[ $rc -eq 0 ]' "llama_ref.py failed (status $rc)"
    out=$("$BUILD/tests/test_llama_kernels" --torch "$tmp/in.safetensors" "$tmp/ref.safetensors" 2>&1)
    rc=$?
    echo "$out"
    check '[ $rc -eq 0 ]' "test_llama_kernels --torch: $(tail -3 <<<"$out")"
    check 'grep -q "torch att1.dqkv" <<<"$out"' "test_llama_kernels --torch did not reach the multi-query attention"
fi
finish cli_llama_kernels
