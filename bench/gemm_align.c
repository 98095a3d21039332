/* Whether where an operand starts changes cl_gemm's (dnnl_sgemm's) speed (docs/PERFORMANCE.md, "bf16 on a CPU
 * without bf16 instructions"): the F32 products of a GPT-2 124M step at N rows (micro-batch x T), each timed with
 * every operand 64-byte aligned (as a step's parameters and activations are) and with one operand moved by
 * `shift` floats, then c_fc's forward with its weight moved by 0 .. 15 floats. Wall-clock best of RUNS calls,
 * GFLOP/s, on `threads` OpenMP threads.
 *
 *   build/bench/gemm_align [threads [N]]       defaults 2 and 256
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

enum { RUNS = 12, PAD = 64 };

static float *buf(size_t n) {
    float *p = aligned_alloc(64, (n + PAD) * sizeof *p);
    if (!p) {
        fprintf(stderr, "gemm_align: out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < n + PAD; i++) p[i] = (float)(i % 13) * 0.01f - 0.06f;
    return p;
}

typedef struct {
    const char *name;
    int ta, tb, M, N, K;
} shape;

/* GFLOP/s of C = op(A) op(B) with A, B and C at the given offsets (floats) from 64-byte alignment */
static double rate(const shape *s, const float *a, const float *b, float *c, int oa, int ob, int oc) {
    double best = 1e30;
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    for (int r = 0; r < RUNS; r++) {
        double t0 = now();
        cl_gemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, a + oa, lda, b + ob, ldb, 0.0f, c + oc, s->N);
        double t = now() - t0;
        if (t < best) best = t;
    }
    return 2.0 * s->M * s->N * (double)s->K / best / 1e9;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2, N = argc > 2 ? atoi(argv[2]) : 256;
    if (threads < 1 || N < 1) {
        fprintf(stderr, "usage: gemm_align [threads [N]]\n");
        return 2;
    }
    omp_set_num_threads(threads);
    int C = 768, F = 3072, V = 50304;
    /* the weight is B in the forward (NN; the head NT), the input gradient (NT) and A in the weight gradient (TN) */
    shape sh[] = {{"qkv fwd", 0, 0, N, 3 * C, C},       {"attn proj fwd", 0, 0, N, C, C},   {"fc fwd", 0, 0, N, F, C},
                  {"fc proj fwd", 0, 0, N, C, F},       {"logits fwd", 0, 1, N, V, C},      {"fc bwd input", 0, 1, N, C, F},
                  {"fc proj bwd input", 0, 1, N, F, C}, {"fc bwd weight", 1, 0, C, F, N},   {"logits bwd input", 0, 0, N, C, V}};
    size_t most = (size_t)V * C;
    float *a = buf(most), *b = buf(most), *c = buf(most);
    printf("gemm %s, %d threads, N %d; GFLOP/s, best of %d\n", cl_gemm_build(), threads, N, RUNS);
    printf("%-18s %-3s %6s %6s %6s %9s %9s %9s %9s\n", "product", "op", "M", "N", "K", "aligned", "A +4", "B +4", "C +4");
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
        const shape *s = &sh[i];
        printf("%-18s %c%c  %6d %6d %6d %9.1f %9.1f %9.1f %9.1f\n", s->name, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->M, s->N,
               s->K, rate(s, a, b, c, 0, 0, 0), rate(s, a, b, c, 4, 0, 0), rate(s, a, b, c, 0, 4, 0), rate(s, a, b, c, 0, 0, 4));
    }
    printf("fc fwd, B moved by 0 .. 15 floats:");
    for (int o = 0; o < 16; o++) printf(" %.0f", rate(&sh[2], a, b, c, 0, o, 0));
    printf("\n");
    free(a);
    free(b);
    free(c);
    return 0;
}
