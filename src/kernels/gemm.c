/* GEMM: the one matrix product every layer goes through.
 *
 * cl_gemm sends the product to oneDNN's dnnl_sgemm when the build found it
 * (CL_HAVE_DNNL), else to cl_gemm_ref, a plain loop nest that tests use as
 * the yardstick. Both are row-major with BLAS-style leading dimensions.
 *
 * Invariants: M, N or K == 0 never reaches the library; K == 0 gives
 * C = beta*C. beta == 0 means "overwrite": C is never read then, so garbage
 * (NaN) in C does not leak. cl_gemm_ref accumulates each C element in f32 in
 * k order and touches nothing outside the M x N block of C. */
#include "cleave/kernels.h"

#include <stdatomic.h>

#ifdef CL_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#include <omp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int g_force_reference;

int cl_gemm_force_reference(int on) { return atomic_exchange(&g_force_reference, on ? 1 : 0); }

void cl_set_threads(int n) { omp_set_num_threads(n < 1 ? 1 : n); }

int cl_threads(void) { return omp_get_max_threads(); }

int cl_cores_available(void) {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

const char *cl_gemm_backend(void) {
#ifdef CL_HAVE_DNNL
    if (!atomic_load(&g_force_reference)) return "onednn";
#endif
    return "reference";
}

const char *cl_gemm_build(void) {
#ifdef CL_HAVE_DNNL
    if (!atomic_load(&g_force_reference)) {
        static const struct {
            dnnl_cpu_isa_t isa;
            const char *name;
        } names[] = {{dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"}, {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
                     {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"}, {dnnl_cpu_isa_avx512_core, "avx512_core"},
                     {dnnl_cpu_isa_avx2_vnni, "avx2_vnni"}, {dnnl_cpu_isa_avx2, "avx2"}, {dnnl_cpu_isa_avx, "avx"},
                     {dnnl_cpu_isa_sse41, "sse41"}};
        static _Thread_local char buf[96];
        const dnnl_version_t *v = dnnl_version();
        dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
        const char *name = "unknown";
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (names[i].isa == isa) name = names[i].name;
        snprintf(buf, sizeof buf, "onednn %d.%d.%d %s", v->major, v->minor, v->patch, name);
        return buf;
    }
#endif
    return "reference";
}

/* Element (i, k) of op(A) and (k, j) of op(B). */
#define A_AT(i, k) (ta ? A[(int64_t)(k) * lda + (i)] : A[(int64_t)(i) * lda + (k)])
#define B_AT(k, j) (tb ? B[(int64_t)(j) * ldb + (k)] : B[(int64_t)(k) * ldb + (j)])

enum { GEMM_REF_JBLOCK = 64 };

void cl_gemm_ref(int ta, int tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K < 0) K = 0;
    for (int i = 0; i < M; i++) {
        float *c = C + (int64_t)i * ldc;
        if (tb) {
            /* op(B)(k, j) = B[j, k]: both operands run along k, a dot product. */
            for (int j = 0; j < N; j++) {
                const float *b = B + (int64_t)j * ldb;
                float acc = 0.0f;
                for (int k = 0; k < K; k++) acc += A_AT(i, k) * b[k];
                c[j] = beta == 0.0f ? alpha * acc : alpha * acc + beta * c[j];
            }
        } else {
            /* Rows of B are contiguous in j: accumulate a block of C's row. */
            for (int j0 = 0; j0 < N; j0 += GEMM_REF_JBLOCK) {
                int nj = N - j0 < GEMM_REF_JBLOCK ? N - j0 : GEMM_REF_JBLOCK;
                float acc[GEMM_REF_JBLOCK] = {0};
                for (int k = 0; k < K; k++) {
                    float a = A_AT(i, k);
                    const float *b = B + (int64_t)k * ldb + j0;
                    for (int jj = 0; jj < nj; jj++) acc[jj] += a * b[jj];
                }
                for (int jj = 0; jj < nj; jj++)
                    c[j0 + jj] = beta == 0.0f ? alpha * acc[jj] : alpha * acc[jj] + beta * c[j0 + jj];
            }
        }
    }
}

#ifdef CL_HAVE_DNNL
/* oneDNN 2.6's AVX2 sgemm (a Zen 3) ran an NN product whose B starts 32-byte aligned with its rows a multiple of
 * 4 KiB apart at about half speed: c_fc's forward (B [768, 3072], 12 KiB rows) 88 GFLOP/s against 139-168 with B
 * moved by 1 to 7 floats, the same bits wherever B lies (bench/gemm_align, docs/PERFORMANCE.md). Such a B is copied
 * 16 bytes past a cache line first when the product has 64 rows or more to spread the copy over. NN only (a TN
 * weight gradient with B moved ran slower, 138 against 185) and below AVX-512 only (measured nowhere else). */
static int b_unlucky(int ta, int tb, int M, int N, int K, const float *B, int ldb) {
    static atomic_int avx2 = -1;
    int a = atomic_load_explicit(&avx2, memory_order_relaxed);
    if (a < 0) {
        unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), core = (unsigned)dnnl_cpu_isa_avx512_core;
        a = (isa & core) != core;
        atomic_store(&avx2, a);
    }
    return a && !ta && !tb && M >= 64 && (uintptr_t)B % 32 == 0 && ldb % 1024 == 0 && (int64_t)K * N >= (1 << 18);
}
#endif

void cl_gemm(int ta, int tb, int M, int N, int K, float alpha,
             const float *A, int lda, const float *B, int ldb,
             float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || atomic_load_explicit(&g_force_reference, memory_order_relaxed)) {
        cl_gemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#ifdef CL_HAVE_DNNL
    float *moved = NULL;
    if (b_unlucky(ta, tb, M, N, K, B, ldb) && (moved = malloc(((size_t)K * (size_t)N + 32) * sizeof *moved))) {
        float *b = moved + (32 - (uintptr_t)moved % 64 / 4) % 16 + 4; /* 16 bytes past a 64-byte line */
        for (int k = 0; k < K; k++) memcpy(b + (int64_t)k * N, B + (int64_t)k * ldb, (size_t)N * sizeof *b);
        B = b, ldb = N;
    }
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha,
                                  A, lda, B, ldb, beta, C, ldc);
    free(moved);
    if (st == dnnl_success) return;
    /* oneDNN refused (it validates leading dimensions); cl_gemm returns
     * void, so compute the same product with the reference instead. */
#endif
    cl_gemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
