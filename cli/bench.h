/* The machine measurements of `cleave bench peak` (cli/bench_cmd.c), shared
 * with `cleave plan calibrate`. */
#ifndef CLEAVE_CLI_BENCH_H
#define CLEAVE_CLI_BENCH_H

#include "cleave/prof.h"

#include <stddef.h>

/* A step profile's table (`cleave bench step`, CLEAVE_PROFILE on `cleave train`): each row's ms a step, share of the
 * steps' secs, GFLOP/s and calls a step over `steps` steps, then what no row covers. */
void cli_prof_print(const cl_prof *prof, double secs, int steps);

/* "avx512", "avx2", or NULL when the CPU has neither (no peak loop). */
const char *cli_bench_isa(void);
/* FP32 FMA peak in GFLOP/s on `threads` threads at once, best of repeat. */
double cli_bench_peak(int threads, int repeat);
/* The BF16 dot-product (vdpbf16ps) peak the same way; 0 where the CPU has no AVX512_BF16. */
double cli_bench_peak_bf16(int threads, int repeat);
/* memcpy of `bytes` in GB/s (read + write), best of repeat; *read_gbs: a read pass. */
double cli_bench_copy(size_t bytes, int repeat, double *read_gbs);

/* The matrix products of one GPT training step (N = B*T rows, width C,
 * vocabulary V): out = in @ w (w is [in, out]); backward input dout @ w^T,
 * weight in^T @ dout; the head uses wte [V, C]. `cleave bench gemm` and
 * bench/gemm_matmul.c time the same list. */
typedef struct {
    const char *name;
    int ta, tb, M, N, K;
} gemm_shape;
enum { GEMM_STEP_SHAPES = 15 };
static inline void gemm_step_shapes(gemm_shape sh[GEMM_STEP_SHAPES], int Nr, int C, int V) {
    const gemm_shape s[GEMM_STEP_SHAPES] = {
        {"qkv fwd", 0, 0, Nr, 3 * C, C},          {"qkv bwd input", 0, 1, Nr, C, 3 * C},
        {"qkv bwd weight", 1, 0, C, 3 * C, Nr},   {"attn proj fwd", 0, 0, Nr, C, C},
        {"attn proj bwd input", 0, 1, Nr, C, C},  {"attn proj bwd weight", 1, 0, C, C, Nr},
        {"fc fwd", 0, 0, Nr, 4 * C, C},           {"fc bwd input", 0, 1, Nr, C, 4 * C},
        {"fc bwd weight", 1, 0, C, 4 * C, Nr},    {"fc proj fwd", 0, 0, Nr, C, 4 * C},
        {"fc proj bwd input", 0, 1, Nr, 4 * C, C}, {"fc proj bwd weight", 1, 0, 4 * C, C, Nr},
        {"logits fwd", 0, 1, Nr, V, C},           {"logits bwd input", 0, 0, Nr, C, V},
        {"logits bwd weight", 1, 0, V, C, Nr},
    };
    for (int i = 0; i < GEMM_STEP_SHAPES; i++) sh[i] = s[i];
}

#endif
