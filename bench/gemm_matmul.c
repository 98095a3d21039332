/* F32 products through oneDNN's matmul primitive (cl_gemm_matmul) against
 * dnnl_sgemm (cl_gemm), on GPT-2 124M's step shapes (N = B*T = 1024, C =
 * 768, V = 50304; `cleave bench gemm`'s list): the measurement behind the
 * choice of which F32 path cl_gemm takes (docs/PERFORMANCE.md, BF16 GEMM).
 * The two alternate, best of `repeat` each, and the results of one product
 * (beta 0) are compared bit for bit: F32 may move to the primitive only
 * where it is faster and keeps cl_gemm's bits (the tests and golden fixtures
 * hold those).
 *
 *   build/bench/gemm_matmul [threads] [repeat] [N]
 */
#include "cleave/core.h"
#include "cleave/kernels.h"
#include "../cli/bench.h" /* the step's shapes, as `cleave bench gemm` lists them */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2, repeat = argc > 2 ? atoi(argv[2]) : 3, Nr = argc > 3 ? atoi(argv[3]) : 1024;
    if (threads < 1 || repeat < 1 || Nr < 1) {
        fprintf(stderr, "usage: gemm_matmul [threads >= 1] [repeat >= 1] [N >= 1]\n");
        return 2;
    }
    cl_set_threads(threads);
    int C = 768, V = 50304;
    gemm_shape sh[GEMM_STEP_SHAPES];
    gemm_step_shapes(sh, Nr, C, V);
    printf("f32 sgemm vs matmul primitive: %s, %d threads, best of %d, alternating\n", cl_gemm_build(), threads, repeat);
    printf("%-22s %-3s %10s %10s %7s %s\n", "product", "op", "sgemm", "matmul", "ratio", "bits");
    double ts = 0, tm = 0;
    for (int i = 0; i < GEMM_STEP_SHAPES; i++) {
        int ta = sh[i].ta, tb = sh[i].tb, M = sh[i].M, N = sh[i].N, K = sh[i].K;
        size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
        float *A = malloc(na * 4), *B = malloc(nb * 4), *C1 = malloc(nc * 4), *C2 = malloc(nc * 4);
        if (!A || !B || !C1 || !C2) return 1;
        cl_rng r;
        cl_rng_seed(&r, (uint64_t)i);
        for (size_t k = 0; k < na; k++) A[k] = cl_rng_normal(&r);
        for (size_t k = 0; k < nb; k++) B[k] = cl_rng_normal(&r);
        int lda = ta ? M : K, ldb = tb ? K : N;
        cl_gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C1, N);
        int ok = cl_gemm_matmul(ta, tb, M, N, K, 1.0f, A, CL_F32, lda, B, CL_F32, ldb, 0.0f, C2, N) == 0;
        int same = ok && !memcmp(C1, C2, nc * 4);
        if (ok) /* the timed products' beta 1 is another primitive: made here, not in the timing */
            cl_gemm_matmul(ta, tb, M, N, K, 1.0f, A, CL_F32, lda, B, CL_F32, ldb, 1.0f, C2, N);
        double bs = 1e30, bm = 1e30;
        for (int rr = 0; rr < repeat && ok; rr++) {
            double t0 = cl_now();
            cl_gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C1, N);
            double t1 = cl_now();
            cl_gemm_matmul(ta, tb, M, N, K, 1.0f, A, CL_F32, lda, B, CL_F32, ldb, 1.0f, C2, N);
            double t2 = cl_now();
            if (t1 - t0 < bs) bs = t1 - t0;
            if (t2 - t1 < bm) bm = t2 - t1;
        }
        double fl = 2.0 * M * N * K;
        if (ok) {
            ts += bs;
            tm += bm;
            printf("%-22s %c%c  %10.1f %10.1f %6.2fx %s\n", sh[i].name, ta ? 'T' : 'N', tb ? 'T' : 'N', fl / bs / 1e9,
                   fl / bm / 1e9, bs / bm, same ? "same" : "differ");
        } else {
            printf("%-22s %c%c  matmul primitive not available\n", sh[i].name, ta ? 'T' : 'N', tb ? 'T' : 'N');
        }
        free(A);
        free(B);
        free(C1);
        free(C2);
    }
    printf("all shapes once: sgemm %.3f s, matmul %.3f s, matmul %.2fx sgemm's speed (GFLOP/s columns above)\n", ts, tm,
           tm > 0 ? ts / tm : 0);
    return 0;
}
