#!/usr/bin/python3
"""OpenBLAS's sgemm as PyTorch calls it, on the forward shapes of GPT-2 124M's
step (N = micro-batch 4 x sequence 256 rows): the peer of `cleave bench gemm`
for the choice of GEMM library (docs/ARCHITECTURE.md, Choices). Then, with
--bf16, PyTorch's bf16 matmul (its bundled oneDNN) beside its f32 one at
every product `cleave bench gemm` lists (forward and both backward forms,
transposes as views, as autograd passes them): the peer of its "bf16 " rows.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_gemm.py [threads] [--bf16]

Prints GFLOP/s per shape, best of 3 after one warm-up product. Needs
Debian's python3-torch and libopenblas0 (bash scripts/setup.sh
--python-torch; apt-get install libopenblas0); leave OPENBLAS_CORETYPE unset.
"""
import sys
import time

import torch

args = [a for a in sys.argv[1:] if a != "--bf16"]
bf16 = "--bf16" in sys.argv[1:]
threads = int(args[0]) if args else 1
torch.set_num_threads(threads)


def best_of(f, repeat=3):
    f()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


for name, M, N, K in (("qkv fwd", 1024, 2304, 768), ("fc fwd", 1024, 3072, 768), ("logits fwd", 1024, 50304, 768)):
    a, b = torch.randn(M, K), torch.randn(K, N)
    best = best_of(lambda: a @ b)
    print(f"{name:12s} {M}x{N}x{K}: {2.0 * M * N * K / best / 1e9:.1f} GFLOP/s ({threads} thread(s))")

if bf16:
    Nr, C, V = 1024, 768, 50304
    shapes = (("qkv fwd", 0, 0, Nr, 3 * C, C), ("qkv bwd input", 0, 1, Nr, C, 3 * C), ("qkv bwd weight", 1, 0, C, 3 * C, Nr),
              ("attn proj fwd", 0, 0, Nr, C, C), ("attn proj bwd input", 0, 1, Nr, C, C),
              ("attn proj bwd weight", 1, 0, C, C, Nr), ("fc fwd", 0, 0, Nr, 4 * C, C), ("fc bwd input", 0, 1, Nr, C, 4 * C),
              ("fc bwd weight", 1, 0, C, 4 * C, Nr), ("fc proj fwd", 0, 0, Nr, C, 4 * C),
              ("fc proj bwd input", 0, 1, Nr, 4 * C, C), ("fc proj bwd weight", 1, 0, 4 * C, C, Nr),
              ("logits fwd", 0, 1, Nr, V, C), ("logits bwd input", 0, 0, Nr, C, V), ("logits bwd weight", 1, 0, V, C, Nr))
    tf = tb = flops = 0.0
    for name, ta, tb_, M, N, K in shapes:
        # stored as cleave stores them: A is K x M when transposed, B is N x K when transposed
        a = torch.randn(K, M).t() if ta else torch.randn(M, K)
        b = torch.randn(N, K).t() if tb_ else torch.randn(K, N)
        a16, b16 = a.bfloat16(), b.bfloat16()
        sf = best_of(lambda: a @ b)
        sb = best_of(lambda: a16 @ b16)
        fl = 2.0 * M * N * K
        tf, tb, flops = tf + sf, tb + sb, flops + fl
        op = ("T" if ta else "N") + ("T" if tb_ else "N")
        print(f"torch bf16 {name:22s} {op} {M:6d} {N:6d} {K:6d} {fl / sb / 1e9:10.1f} GFLOP/s, f32 {fl / sf / 1e9:8.1f}, "
              f"{sf / sb:.2f}x ({threads} thread(s))")
    print(f"torch bf16 all shapes once: {flops / tb / 1e9:.1f} GFLOP/s, f32 {flops / tf / 1e9:.1f}, {tf / tb:.2f}x "
          f"({threads} thread(s))")
