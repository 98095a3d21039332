/* Whether handing cl_gemm (dnnl_sgemm) an operand transposed first beats the layout a GPT-2 124M step uses
 * (docs/PERFORMANCE.md, "Ranks build at once ... the F32 step on a Zen 3"): each block product's weight gradient
 * dW = x^T dY (TN) against x copied transposed and then NN, and each input gradient dX = dY W^T (NT) against W
 * copied transposed and then NN, at N rows (micro-batch x T). Best of RUNS calls each, GFLOP/s without the copy,
 * the copy's best milliseconds beside, and whether the two forms give the same bits (beta 0).
 *
 *   build/bench/gemm_transpose [threads [N]]     defaults 2 and 1024
 *
 * Run it on idle cores. */
#include "cleave/core.h"
#include "cleave/kernels.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { RUNS = 5 };

static float *buf(size_t n, unsigned seed) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "gemm_transpose: out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f;
    }
    return p;
}

/* t [c x r] = a [r x c] transposed, in 32 x 32 tiles over the team; the seconds it took */
static double transpose(const float *a, int r, int c, float *t) {
    double t0 = now();
#pragma omp parallel for collapse(2) schedule(static)
    for (int i0 = 0; i0 < r; i0 += 32)
        for (int j0 = 0; j0 < c; j0 += 32)
            for (int i = i0; i < i0 + 32 && i < r; i++)
                for (int j = j0; j < j0 + 32 && j < c; j++) t[(size_t)j * r + i] = a[(size_t)i * c + j];
    return now() - t0;
}

static double best_of(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C) {
    double best = 1e30;
    for (int r = 0; r < RUNS; r++) {
        double t0 = now();
        cl_gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
        double t = now() - t0;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2, T = argc > 2 ? atoi(argv[2]) : 1024;
    if (threads < 1 || T < 1) {
        fprintf(stderr, "usage: gemm_transpose [threads [N]]\n");
        return 2;
    }
    omp_set_num_threads(threads);
    const struct {
        const char *name;
        int in, out; /* the weight is [in, out], as the step's */
    } w[] = {{"qkv", 768, 2304}, {"attn proj", 768, 768}, {"fc", 768, 3072}, {"fc proj", 3072, 768}};
    printf("gemm %s, %d threads, N %d; GFLOP/s, best of %d; the transpose's ms apart\n", cl_gemm_build(), threads, T, RUNS);
    printf("%-10s %9s %9s %8s %5s | %9s %9s %8s %5s\n", "weight", "dW TN", "dW NN", "copy ms", "bits", "dX NT", "dX NN",
           "copy ms", "bits");
    for (size_t s = 0; s < sizeof w / sizeof w[0]; s++) {
        int ci = w[s].in, co = w[s].out;
        size_t nx = (size_t)T * ci, ny = (size_t)T * co, nw = (size_t)ci * co;
        float *x = buf(nx, 1), *dy = buf(ny, 2), *W = buf(nw, 3), *xt = buf(nx, 4), *wt = buf(nw, 5);
        float *dw1 = buf(nw, 6), *dw2 = buf(nw, 7), *dx1 = buf(nx, 8), *dx2 = buf(nx, 9);
        double cx = 1e30, cw = 1e30;
        for (int r = 0; r < RUNS; r++) {
            double a = transpose(x, T, ci, xt), b = transpose(W, ci, co, wt);
            if (a < cx) cx = a;
            if (b < cw) cw = b;
        }
        double f = 2.0 * T * ci * (double)co / 1e9;
        double w_tn = best_of(1, 0, ci, co, T, x, ci, dy, co, dw1), w_nn = best_of(0, 0, ci, co, T, xt, T, dy, co, dw2);
        double x_nt = best_of(0, 1, T, ci, co, dy, co, W, co, dx1), x_nn = best_of(0, 0, T, ci, co, dy, co, wt, ci, dx2);
        printf("%-10s %9.1f %9.1f %8.2f %5s | %9.1f %9.1f %8.2f %5s\n", w[s].name, f / w_tn, f / w_nn, cx * 1e3,
               memcmp(dw1, dw2, nw * sizeof(float)) ? "diff" : "same", f / x_nt, f / x_nn, cw * 1e3,
               memcmp(dx1, dx2, nx * sizeof(float)) ? "diff" : "same");
        free(x), free(dy), free(W), free(xt), free(wt), free(dw1), free(dw2), free(dx1), free(dx2);
    }
    return 0;
}
