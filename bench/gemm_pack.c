/* BF16 products with B packed into the matmul primitive's layout before the
 * call (cl_gemm_pack_b(1), src/kernels/gemm_bf16.c) against B given as it is
 * (cl_gemm_pack_b(0)), on GPT-2 124M's step shapes (`cleave bench gemm`'s
 * list) with BF16 operands: the two alternate product by product, best of
 * `repeat` each, so the host's drift between runs falls on both alike; the
 * results of one product are compared bit for bit (the route must keep the
 * bits). Products that do not pack (B transposed, or packed B past 8 MiB)
 * run the same route twice: their ratio is the noise floor. With route
 * ksplit, the same for a long K in pieces (cl_gemm_ksplit; off = one call):
 * there the split products' bits differ by design (another summation order),
 * which marks the products the route took.
 *
 *   build/bench/gemm_pack [threads] [repeat] [N] [pack|ksplit]
 */
#include "cleave/core.h"
#include "cleave/kernels.h"
#include "../cli/bench.h" /* the step's shapes, as `cleave bench gemm` lists them */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint16_t *bf16_rand(size_t n, cl_rng *r) {
    uint16_t *x = malloc(n * sizeof *x);
    if (!x) return NULL;
    for (size_t k = 0; k < n; k++) x[k] = cl_bf16_from_f32(cl_rng_normal(r));
    return x;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2, repeat = argc > 2 ? atoi(argv[2]) : 5, Nr = argc > 3 ? atoi(argv[3]) : 1024;
    const char *route = argc > 4 ? argv[4] : "pack";
    int ks = !strcmp(route, "ksplit");
    if (threads < 1 || repeat < 1 || Nr < 1 || (!ks && strcmp(route, "pack"))) {
        fprintf(stderr, "usage: gemm_pack [threads >= 1] [repeat >= 1] [N >= 1] [pack|ksplit]\n");
        return 2;
    }
    int (*sw)(int) = ks ? cl_gemm_ksplit : cl_gemm_pack_b; /* the route's switch */
    cl_set_threads(threads);
    int C = 768, V = 50304;
    gemm_shape sh[GEMM_STEP_SHAPES];
    gemm_step_shapes(sh, Nr, C, V);
    printf("bf16 %s: %s, bf16 path %s, %d threads, best of %d, alternating\n", ks ? "K whole vs K in pieces" : "B given vs B packed",
           cl_gemm_build(), cl_gemm_bf16_path(), threads, repeat);
    printf("%-22s %-3s %10s %10s %7s %6s %s\n", "product", "op", ks ? "whole" : "given", ks ? "pieces" : "packed", "ratio", "packs", "bits");
    double tg = 0, tp = 0;
    int prev = sw(1);
    for (int i = 0; i < GEMM_STEP_SHAPES; i++) {
        int ta = sh[i].ta, tb = sh[i].tb, M = sh[i].M, N = sh[i].N, K = sh[i].K;
        size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
        cl_rng r;
        cl_rng_seed(&r, (uint64_t)i);
        uint16_t *A = bf16_rand(na, &r), *B = bf16_rand(nb, &r);
        float *C1 = malloc(nc * 4), *C2 = malloc(nc * 4);
        if (!A || !B || !C1 || !C2) return 1;
        int lda = ta ? M : K, ldb = tb ? K : N;
        sw(0);
        cl_gemm_ex(ta, tb, M, N, K, 1.0f, A, CL_BF16, lda, B, CL_BF16, ldb, 0.0f, C1, N);
        sw(1);
        long p0 = cl_gemm_packed_count();
        cl_gemm_ex(ta, tb, M, N, K, 1.0f, A, CL_BF16, lda, B, CL_BF16, ldb, 0.0f, C2, N);
        int packs = cl_gemm_packed_count() > p0, same = !memcmp(C1, C2, nc * 4);
        double bg = 1e30, bp = 1e30;
        for (int rr = 0; rr < repeat; rr++) {
            sw(0);
            double t0 = cl_now();
            cl_gemm_ex(ta, tb, M, N, K, 1.0f, A, CL_BF16, lda, B, CL_BF16, ldb, 0.0f, C1, N);
            double t1 = cl_now();
            sw(1);
            cl_gemm_ex(ta, tb, M, N, K, 1.0f, A, CL_BF16, lda, B, CL_BF16, ldb, 0.0f, C2, N);
            double t2 = cl_now();
            if (t1 - t0 < bg) bg = t1 - t0;
            if (t2 - t1 < bp) bp = t2 - t1;
        }
        double fl = 2.0 * M * N * K;
        tg += bg, tp += bp;
        printf("%-22s %c%c  %10.1f %10.1f %6.3fx %6s %s\n", sh[i].name, ta ? 'T' : 'N', tb ? 'T' : 'N', fl / bg / 1e9, fl / bp / 1e9,
               bg / bp, packs ? "yes" : "no", same ? "same" : "differ");
        free(A), free(B), free(C1), free(C2);
    }
    sw(prev);
    printf("all shapes once: %s %.3f s, %s %.3f s, %.3fx (GFLOP/s columns above)\n", ks ? "whole" : "given", tg, ks ? "pieces" : "packed",
           tp, tp > 0 ? tg / tp : 0);
    return 0;
}
