/* The element-wise kernels on each vector path (AVX2 against AVX-512,
 * src/kernels/simd.h), and the bf16 kernels against their F32 kernel
 * followed by a separate conversion pass (the block backward's GELU and
 * layernorm input gradients: F32 written, then its BF16 copy), at GPT-2 124M's sizes for
 * micro-batch 4, T = 256 (N = 1024 rows, C = 768, 4C = 3072; AdamW over
 * 16M parameters unless told). Best of REPS, the variants alternating within each
 * repetition, so a load that comes and goes hits them alike; ratios > 1:
 * the second faster. One thread unless told.
 *
 *   build/bench/kernel_paths [threads [adamw_parameters]]
 *
 * Figures in docs/PERFORMANCE.md (bf16 kernels). */
#include "cleave/core.h"
#include "cleave/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { REPS = 9, N = 1024, C = 768, F = 3072 };
static int64_t NP = 16 << 20;

static float *rnd(int64_t n, float s) {
    float *x = aligned_alloc(64, ((size_t)n * 4 + 63) & ~(size_t)63); /* as the device allocates */
    if (!x) exit(1);
    for (int64_t i = 0; i < n; i++) x[i] = ((float)((i * 2654435761u) % 1000003) / 500001.5f - 1.0f) * s;
    return x;
}

static float *g_x, *g_d, *g_o, *g_b, *g_p, *g_m, *g_v, *g_g, *g_w, *g_mean, *g_rstd;
static uint16_t *g_h;

/* variant v of test t; returns nothing, timed by the caller */
static void run(int t, int v) {
    switch (t) {
    case 0: cl_kernels_max_isa(v ? 2 : 1); cl_gelu_forward(g_o, g_x, (int64_t)N * F); break;
    case 1: cl_kernels_max_isa(v ? 2 : 1); cl_gelu_backward_set(g_o, g_d, g_x, (int64_t)N * F); break;
    case 2: cl_kernels_max_isa(v ? 2 : 1); cl_adamw_update(g_p, g_g, g_m, g_v, NP, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 1.0f); break;
    case 3:
        cl_kernels_max_isa(3);
        if (v) cl_layernorm_forward_bf16(g_h, NULL, g_mean, g_rstd, g_x, g_w, g_b, N, C);
        else cl_layernorm_forward(g_o, g_mean, g_rstd, g_x, g_w, g_b, N, C), cl_bf16_pack(g_h, g_o, (int64_t)N * C);
        break;
    case 4:
        cl_kernels_max_isa(3);
        if (v) cl_gelu_forward_bf16(g_h, g_x, (int64_t)N * F);
        else cl_gelu_forward(g_o, g_x, (int64_t)N * F), cl_bf16_pack(g_h, g_o, (int64_t)N * F);
        break;
    case 5:
        cl_kernels_max_isa(3);
        if (v) cl_adamw_update_bf16(g_p, g_h, g_g, g_m, g_v, NP, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 1.0f);
        else cl_adamw_update(g_p, g_g, g_m, g_v, NP, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 1.0f), cl_bf16_pack(g_h, g_p, NP);
        break;
    case 6: /* the block backward's dfchg: GELU's backward (there in place), then its BF16 copy */
        cl_kernels_max_isa(3);
        if (v) cl_gelu_backward_set_bf16(g_o, g_h, g_d, g_x, (int64_t)N * F);
        else cl_gelu_backward_set(g_o, g_d, g_x, (int64_t)N * F), cl_bf16_pack(g_h, g_o, (int64_t)N * F);
        break;
    case 7: /* the block backward's dres2: ln_2's input gradient added in, then its BF16 copy */
        cl_kernels_max_isa(3);
        if (v) cl_layernorm_backward_input_bf16(g_o, g_h, g_d, g_x, g_w, g_mean, g_rstd, N, C);
        else cl_layernorm_backward_input(g_o, g_d, g_x, g_w, g_mean, g_rstd, N, C), cl_bf16_pack(g_h, g_o, (int64_t)N * C);
        break;
    }
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    cl_set_threads(threads > 0 ? threads : 1);
    if (argc > 2 && atol(argv[2]) > 0) NP = atol(argv[2]);
    cl_kernels_max_isa(2);
    if (strcmp(cl_kernels_isa(), "avx512")) {
        printf("kernel_paths: no AVX-512 here (%s): nothing to compare\n", cl_kernels_isa());
        return 0;
    }
    g_x = rnd((int64_t)N * F, 4.0f), g_d = rnd((int64_t)N * F, 1.0f), g_o = rnd((int64_t)N * F, 1.0f);
    g_b = rnd(C, 0.1f), g_w = rnd(C, 1.0f), g_mean = rnd(N, 1.0f), g_rstd = rnd(N, 1.0f);
    g_p = rnd(NP, 1.0f), g_m = rnd(NP, 0.01f), g_v = rnd(NP, 0.01f), g_g = rnd(NP, 0.1f);
    for (int64_t i = 0; i < NP; i++) g_v[i] = g_v[i] < 0 ? -g_v[i] : g_v[i];
    g_h = aligned_alloc(64, ((size_t)NP * 2 + 63) & ~(size_t)63);
    if (!g_h) return 1;
    static const char *what[][3] = {
        {"GELU forward, 1024 x 3072", "avx2", "avx512"},
        {"GELU backward, 1024 x 3072", "avx2", "avx512"},
        {"AdamW (parameters: argument 2)", "avx2", "avx512"},
        {"layernorm 1024 x 768 to BF16", "F32 + pack", "fused"},
        {"GELU 1024 x 3072 to BF16", "F32 + pack", "fused"},
        {"AdamW + BF16 copy", "F32 + pack", "fused"},
        {"GELU bwd 1024 x 3072 + BF16", "F32 + pack", "fused"},
        {"LN bwd 1024 x 768 + BF16", "F32 + pack", "fused"},
    };
    printf("kernel paths, %d thread(s), best of %d, ms\n", threads, REPS);
    for (int t = 0; t < 8; t++) {
        double best[2] = {1e30, 1e30};
        for (int r = 0; r < REPS; r++)
            for (int v = 0; v < 2; v++) {
                double t0 = cl_now();
                run(t, v);
                double dt = cl_now() - t0;
                if (dt < best[v]) best[v] = dt;
            }
        printf("%-30s %-10s %8.3f  %-8s %8.3f  %.2fx\n", what[t][0], what[t][1], best[0] * 1e3, what[t][2], best[1] * 1e3,
               best[0] / best[1]);
    }
    cl_kernels_max_isa(3);
    return 0;
}
