#!/usr/bin/python3
"""OpenBLAS's sgemm as PyTorch calls it, on the forward shapes of GPT-2 124M's
step (N = micro-batch 4 x sequence 256 rows): the peer of `cleave bench gemm`
for the choice of GEMM library (docs/ARCHITECTURE.md, Choices).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_gemm.py [threads]

Prints GFLOP/s per shape, best of 3 after one warm-up product.
"""
import sys
import time

import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)
for name, M, N, K in (("qkv fwd", 1024, 2304, 768), ("fc fwd", 1024, 3072, 768), ("logits fwd", 1024, 50304, 768)):
    a, b = torch.randn(M, K), torch.randn(K, N)
    a @ b
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    print(f"{name:12s} {M}x{N}x{K}: {2.0 * M * N * K / best / 1e9:.1f} GFLOP/s ({threads} thread(s))")
