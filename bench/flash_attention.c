/* Today's attention (attention.c: the B x NH x T x T probabilities kept,
 * a T x T scratch in the backward) against the blockwise one (flash.c: the
 * log-sum-exp per row kept, tiles in the backward), forward + backward, side
 * by side on GPT-2 124M's heads (C = 768, NH = 12, B = 1). The two run
 * alternately, best of REPS each, so a load that comes and goes hits both
 * alike; the ratio is today / blockwise (> 1: faster). Clock: wall (cl_now)
 * on several threads; on one thread the process's CPU time, which other
 * processes' load on a shared machine disturbs less.
 * Bytes: what each keeps from the forward for the backward, and the
 * backward's scratch.
 *
 *   build/bench/flash_attention [threads [T ...]]    (default: all cores, T = 1024 4096)
 *
 * Figures in docs/PERFORMANCE.md (Attention without the T x T buffer). */
#include "cleave/core.h"
#include "cleave/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { REPS = 5 };

static int g_cpu_clock; /* one thread: CPU time */

static double now(void) {
    if (!g_cpu_clock) return cl_now();
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *buf(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "flash_attention: out of memory (%lld floats)\n", (long long)n);
        exit(2);
    }
    memset(p, 0, (size_t)n * sizeof(float));
    return p;
}

static void run(int T, int threads) {
    const int B = 1, C = 768, NH = 12;
    int64_t nq = (int64_t)B * T * 3 * C, no = (int64_t)B * T * C, na = (int64_t)B * NH * T * T, nl = (int64_t)B * NH * T;
    int64_t ns = cl_flash_scratch_floats(B, T, C, NH);
    cl_rng rng;
    cl_rng_seed(&rng, 7);
    float *qkv = buf(nq), *dout = buf(no), *out = buf(no), *dqkv = buf(nq);
    for (int64_t i = 0; i < nq; i++) qkv[i] = cl_rng_normal(&rng);
    for (int64_t i = 0; i < no; i++) dout[i] = cl_rng_normal(&rng);
    float *att = buf(na), *ascr = buf(na), *lse = buf(nl), *fscr = buf(ns);
    double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}}; /* [today, flash][forward, backward] */
    for (int r = 0; r < REPS + 1; r++) { /* the first round warms up, uncounted */
        double t0 = now();
        cl_attention_forward(out, att, qkv, B, T, C, NH);
        double t1 = now();
        cl_attention_backward(dqkv, ascr, dout, qkv, att, B, T, C, NH);
        double t2 = now();
        cl_flash_forward(out, lse, qkv, B, T, C, NH, NH);
        double t3 = now();
        cl_flash_backward(dqkv, fscr, dout, qkv, out, lse, B, T, C, NH, NH);
        double t4 = now();
        if (r == 0) continue;
        double t[2][2] = {{t1 - t0, t2 - t1}, {t3 - t2, t4 - t3}};
        for (int k = 0; k < 2; k++)
            for (int p = 0; p < 2; p++) best[k][p] = t[k][p] < best[k][p] ? t[k][p] : best[k][p];
    }
    double tot0 = best[0][0] + best[0][1], tot1 = best[1][0] + best[1][1];
    printf("attention T %d C %d NH %d B %d threads %d (%s)\n", T, C, NH, B, threads, g_cpu_clock ? "cpu time" : "wall");
    printf("  today     fwd %8.1f ms  bwd %8.1f ms  total %8.1f ms  keeps %10.1f MiB  scratch %10.1f MiB\n",
           1e3 * best[0][0], 1e3 * best[0][1], 1e3 * tot0, na * 4.0 / (1 << 20), na * 4.0 / (1 << 20));
    printf("  blockwise fwd %8.1f ms  bwd %8.1f ms  total %8.1f ms  keeps %10.3f MiB  scratch %10.3f MiB\n",
           1e3 * best[1][0], 1e3 * best[1][1], 1e3 * tot1, nl * 4.0 / (1 << 20), ns * 4.0 / (1 << 20));
    printf("  ratio (today / blockwise): fwd %.2f  bwd %.2f  total %.2f\n", best[0][0] / best[1][0],
           best[0][1] / best[1][1], tot0 / tot1);
    free(qkv); free(dout); free(out); free(dqkv); free(att); free(ascr); free(lse); free(fscr);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : cl_cores_available();
    if (threads < 1) {
        fprintf(stderr, "flash_attention: threads must be at least 1, got '%s'\n", argv[1]);
        return 2;
    }
    cl_set_threads(threads);
    g_cpu_clock = threads == 1;
    printf("gemm %s, kernels %s\n", cl_gemm_build(), cl_kernels_isa());
    if (argc > 2) {
        for (int i = 2; i < argc; i++) {
            int T = atoi(argv[i]);
            if (T < 1 || T > 65536) {
                fprintf(stderr, "flash_attention: T must be in [1, 65536], got '%s'\n", argv[i]);
                return 2;
            }
            run(T, threads);
        }
    } else {
        run(1024, threads);
        run(4096, threads);
    }
    return 0;
}
