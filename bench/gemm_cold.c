/* Why `cleave plan calibrate` takes some operands from a pool
 * (docs/PERFORMANCE.md, Planner): each of a few training shapes timed
 * through cl_gemm on one thread with every operand hot (one buffer, used
 * over and over) against the operands calibrate takes cold (the next slot
 * of an 8 MiB pool, beyond a 1 MiB L2, as a training step meets them a pass
 * after it last touched them: the weight of A B and A B^T, the input and
 * the accumulated output of the weight gradient A^T B). Best of 5 runs of
 * 64 products, in process CPU seconds, GFLOP/s.
 *
 *   build/bench/gemm_cold
 *
 * Run it on idle cores. */
#include "cleave/core.h"
#include "cleave/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { POOL = (8 << 20) / 4, REPS = 64, RUNS = 5 };

/* GFLOP/s of M x N x K in layout (ta, tb), beta 1; cold: as calibrate takes them, the weight B of
 * A B and A B^T, the input A and accumulated output C of a weight gradient A^T B, from the pools */
static double rate(const float *a, const float *b, float *c, int M, int N, int K, int ta, int tb, int cold) {
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N, slot = 0;
    int wg = ta && cold, wt = !ta && cold;
    double best = 1e30;
    for (int r = 0; r < RUNS; r++) {
        double t0 = cpu_seconds();
        for (int k = 0; k < REPS; k++, slot++)
            cl_gemm(ta, tb, M, N, K, 1.0f, wg ? a + slot * na % POOL : a, ta ? M : K, wt ? b + slot * nb % POOL : b, tb ? K : N,
                    1.0f, wg ? c + slot * nc % POOL : c, N);
        double t = (cpu_seconds() - t0) / REPS;
        if (t > 0 && t < best) best = t;
    }
    return 2.0 * M * N * K / best / 1e9;
}

int main(void) {
    static const struct {
        int M, N, K, ta, tb;
        const char *what;
    } sh[] = {
        {512, 384, 128, 0, 0, "qkv forward, micro-batch 4 x 128"},
        {128, 384, 128, 0, 0, "qkv forward, micro-batch 1 x 128"},
        {512, 512, 128, 0, 1, "mlp.c_proj input gradient, 4 x 128"},
        {128, 512, 128, 0, 1, "mlp.c_proj input gradient, 1 x 128"},
        {512, 128, 512, 0, 1, "c_fc input gradient, 4 x 128"},
        {128, 128, 512, 0, 1, "c_fc input gradient, 1 x 128"},
        {128, 512, 512, 1, 0, "c_fc weight gradient, 4 x 128"},
        {128, 512, 128, 1, 0, "c_fc weight gradient, 1 x 128"},
    };
    cl_set_threads(1);
    size_t big = 1024 * 1024;
    float *a = malloc((POOL + big) * sizeof *a), *b = malloc((POOL + big) * sizeof *b), *c = calloc(POOL + big, sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "gemm_cold: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < POOL + big; i++) a[i] = 1e-3f * (float)(i % 97);
    for (size_t i = 0; i < POOL + big; i++) b[i] = 1e-3f * (float)(i % 89);
    printf("cl_gemm (%s), one thread; GFLOP/s, best of %d runs of %d products\n", cl_gemm_backend(), RUNS, REPS);
    printf("%-38s %-3s %5s %5s %5s %8s %8s %7s\n", "product", "op", "M", "N", "K", "hot", "cold", "cold/hot");
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
        double hot = rate(a, b, c, sh[i].M, sh[i].N, sh[i].K, sh[i].ta, sh[i].tb, 0);
        double cold = rate(a, b, c, sh[i].M, sh[i].N, sh[i].K, sh[i].ta, sh[i].tb, 1);
        printf("%-38s %c%c  %5d %5d %5d %8.1f %8.1f %6.1f%%\n", sh[i].what, sh[i].ta ? 'T' : 'N', sh[i].tb ? 'T' : 'N', sh[i].M,
               sh[i].N, sh[i].K, hot, cold, 100 * (cold / hot - 1));
    }
    free(a), free(b), free(c);
    return 0;
}
