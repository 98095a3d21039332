/* F32 <-> BF16 array conversion speed (src/kernels/convert.c, what
 * cl_dtype_convert runs) on each vector path this CPU has, against the
 * scalar loop (the plain path): GB/s counted as bytes read + written
 * (6 a value), best of REPS, the paths alternating within each repetition
 * so a load that comes and goes hits them alike. One thread unless told.
 *
 *   build/bench/bf16_convert [threads [n ...]]   (default 1 thread; n = 65536 16777216)
 *
 * Figures in docs/PERFORMANCE.md (bf16 kernels). */
#include "cleave/core.h"
#include "cleave/kernels.h"
#include "cleave/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { REPS = 7 };

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    cl_set_threads(threads > 0 ? threads : 1);
    long sizes[8] = {65536, 16777216};
    int ns = 2;
    if (argc > 2) {
        ns = 0;
        for (int i = 2; i < argc && ns < 8; i++) sizes[ns++] = atol(argv[i]);
    }
    int top = cl_kernels_max_isa(3);
    cl_kernels_max_isa(top);
    static const char *name[] = {"plain", "avx2", "avx512", "avx512_bf16"};
    int cpu = 0;
    for (int l = 0; l <= 3; l++) { /* the levels this CPU reaches: the cap clamps to it */
        cl_kernels_max_isa(l);
        if (!strcmp(cl_kernels_isa(), name[l])) cpu = l;
    }
    cl_kernels_max_isa(top);
    printf("bf16 conversions, %d thread(s), GB/s (bytes read + written), best of %d\n", threads, REPS);
    for (int s = 0; s < ns; s++) {
        long n = sizes[s];
        float *f = aligned_alloc(64, ((size_t)n * 4 + 63) & ~(size_t)63), *back = aligned_alloc(64, ((size_t)n * 4 + 63) & ~(size_t)63);
        uint16_t *h = aligned_alloc(64, ((size_t)n * 2 + 63) & ~(size_t)63);
        if (!f || !back || !h) return 1;
        for (long i = 0; i < n; i++) f[i] = (float)((i * 2654435761u) % 100003) * 1e-3f - 50.0f;
        int reps_inner = n < 1000000 ? (int)(50000000 / n) : 1;
        double best_p[4] = {1e30, 1e30, 1e30, 1e30}, best_u[4] = {1e30, 1e30, 1e30, 1e30};
        for (int r = 0; r < REPS; r++)
            for (int l = 0; l <= cpu; l++) {
                cl_kernels_max_isa(l);
                double t0 = cl_now();
                for (int k = 0; k < reps_inner; k++) cl_bf16_pack(h, f, n);
                double t1 = cl_now();
                for (int k = 0; k < reps_inner; k++) cl_bf16_unpack(back, h, n);
                double t2 = cl_now();
                if ((t1 - t0) / reps_inner < best_p[l]) best_p[l] = (t1 - t0) / reps_inner;
                if ((t2 - t1) / reps_inner < best_u[l]) best_u[l] = (t2 - t1) / reps_inner;
            }
        cl_kernels_max_isa(top);
        for (int l = 0; l <= cpu; l++)
            printf("n %9ld  %-12s F32->BF16 %7.2f GB/s (%5.2fx plain)  BF16->F32 %7.2f GB/s (%5.2fx plain)\n", n, name[l],
                   6.0 * n / best_p[l] * 1e-9, best_p[0] / best_p[l], 6.0 * n / best_u[l] * 1e-9, best_u[0] / best_u[l]);
        free(f);
        free(back);
        free(h);
    }
    return 0;
}
