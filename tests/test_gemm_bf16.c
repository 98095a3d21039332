/* Tests for the GEMM with BF16 operands (cl_gemm_ex, src/kernels/gemm_bf16.c).
 *
 * Every product is checked against the same product computed in double
 * from the BF16-rounded operands. The products of two BF16 values are exact
 * in F32 (8 + 8 significant bits), so the only error is F32 accumulation:
 * summed in any order, K products carry at most (K - 1) u times the sum of
 * their magnitudes (u = 2^-24), and the alpha scaling and the beta C term
 * add a rounding each: the tolerance per element is (K + 2) u (|alpha|
 * sum |a b| + |beta c|), with 1% slack for the bound's second-order term.
 * The values are normal (no denormals: AVX512_BF16 flushes them).
 *
 * Cases: every transpose combination; 1 x N, M x 1, K = 1, odd shapes;
 * leading dimensions larger than the shape (and nothing outside C's block
 * written); alpha and beta cases, beta 0 with NaN in C (must not leak);
 * K = 0; the widening fallback forced (cl_gemm_force_widen) and the F32
 * reference forced (cl_gemm_force_reference) giving the same answer within
 * the tolerance; one BF16 and one F32 operand; F32 operands equal to cl_gemm
 * bit for bit; the CPU table's gemm; four threads calling the cached
 * primitives at once (bit-equal to one thread's results); B packed before
 * the call bit for bit B as given; beta 0 the bits of beta 1 into zeros; a
 * long K in pieces; the widening path in pieces past its scratch cap; and the cache staying bounded past its capacity. */
#include "cleave/core.h"
#include "cleave/kernels.h"
#include "common/check.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cl_rng g_rng;

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test_gemm_bf16: out of memory\n");
        exit(2);
    }
    return p;
}

/* n BF16 values, normal, of magnitude 2^-3 .. 2^3 with either sign */
static uint16_t *bf16_rand(long n) {
    uint16_t *x = xmalloc((size_t)n * sizeof *x);
    for (long i = 0; i < n; i++) {
        float v = cl_rng_normal(&g_rng);
        if (fabsf(v) < 0.125f) v = v < 0 ? -0.125f : 0.125f;
        x[i] = cl_bf16_from_f32(v);
    }
    return x;
}

#define SENTINEL 4242.0f
#define U (1.0 / 16777216.0)

/* Counts elements of the M x N block of C (row stride ldc) outside the bound of the double reference. */
static long gemm_bad(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda, const uint16_t *B,
                     int ldb, float beta, const float *C0, const float *C, int ldc, double slack, double *worst) {
    long bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, m = 0;
            for (int k = 0; k < K; k++) {
                double x = cl_bf16_to_f32(ta ? A[(long)k * lda + i] : A[(long)i * lda + k]);
                double y = cl_bf16_to_f32(tb ? B[(long)j * ldb + k] : B[(long)k * ldb + j]);
                s += x * y;
                m += fabs(x * y);
            }
            double c = beta != 0.0f ? C0[(long)i * ldc + j] : 0;
            double want = alpha * s + beta * c, mag = fabs(alpha) * m + fabs(beta * c);
            double tol = slack * (K + 2) * U * mag * 1.01 + 1e-30;
            double d = fabs((double)C[(long)i * ldc + j] - want);
            if (isnan(d) || d > tol) bad++;
            if (!isnan(d) && mag > 0 && d / (tol) > *worst) *worst = d / tol;
            if (isnan(d)) *worst = INFINITY;
        }
    return bad;
}

/* Writes outside the M x N block of a C with row stride ldc (rows up to M). */
static long pad_changed(const float *C, int M, int N, int ldc) {
    long n = 0;
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) n += C[(long)i * ldc + j] != SENTINEL;
    return n;
}

/* One product through cl_gemm_ex on BF16 A and B, checked; pad adds to every leading dimension. */
static void bf16_case(int ta, int tb, int M, int N, int K, int pad, float alpha, float beta, double *worst) {
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    long ra = ta ? K : M, rb = tb ? N : K;
    uint16_t *A = bf16_rand(ra * lda), *B = bf16_rand(rb * ldb);
    float *C0 = xmalloc((size_t)M * ldc * sizeof *C0), *C = xmalloc((size_t)M * ldc * sizeof *C);
    for (long i = 0; i < (long)M * ldc; i++) C0[i] = (i % ldc) >= N ? SENTINEL : beta == 0.0f ? NAN : cl_rng_normal(&g_rng);
    memcpy(C, C0, (size_t)M * ldc * sizeof *C);
    cl_gemm_ex(ta, tb, M, N, K, alpha, A, CL_BF16, lda, B, CL_BF16, ldb, beta, C, ldc);
    long bad = gemm_bad(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, C, ldc, 1.0, worst);
    CHECK(bad == 0, "%s: ta=%d tb=%d M=%d N=%d K=%d pad=%d alpha=%g beta=%g: %ld elements outside the F32 bound",
          cl_gemm_bf16_path(), ta, tb, M, N, K, pad, alpha, beta, bad);
    CHECK(pad_changed(C, M, N, ldc) == 0, "ta=%d tb=%d M=%d N=%d K=%d: wrote outside C's block", ta, tb, M, N, K);
    free(A);
    free(B);
    free(C0);
    free(C);
}

static void run_cases(double *worst) {
    static const int shapes[][3] = {{1, 37, 19}, {23, 1, 17}, {9, 13, 1}, {1, 1, 5}, {17, 33, 29}, {64, 70, 130}, {5, 300, 96}};
    static const float ab[][2] = {{1, 0}, {0.5f, 0}, {1, 1}, {-0.75f, 0.25f}};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                for (size_t c = 0; c < sizeof ab / sizeof ab[0]; c++)
                    bf16_case(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], (int)(s + c) % 3 == 0 ? 0 : 3, ab[c][0],
                              ab[c][1], worst);
}

static void test_paths(void) {
    double w = 0;
    printf("bf16 gemm path: %s (gemm %s)\n", cl_gemm_bf16_path(), cl_gemm_build());
#ifdef CL_HAVE_DNNL
    {
        uint16_t a = cl_bf16_from_f32(1.5f), b = cl_bf16_from_f32(2.0f);
        float c = 0;
        int rc = cl_gemm_matmul(0, 0, 1, 1, 1, 1.0f, &a, CL_BF16, 1, &b, CL_BF16, 1, 0.0f, &c, 1);
        if (!strcmp(cl_gemm_bf16_path(), "onednn matmul")) CHECK(rc == 0 && c == 3.0f, "the matmul primitive: rc %d, 1.5 x 2 = %g", rc, c);
        else cl_test_skip("bf16 matmul primitive (this CPU has no AVX-512 core: widened)", 0);
    }
#else
    cl_test_skip("bf16 matmul primitive (built without oneDNN)", 0);
#endif
    run_cases(&w);
    printf("  %s: worst error %.3f of the bound\n", cl_gemm_bf16_path(), w);

    int prev = cl_gemm_force_widen(1);
    CHECK(prev == 0, "force_widen returned %d, expected 0", prev);
    CHECK(!strcmp(cl_gemm_bf16_path(), "widened to f32"), "forced path is %s", cl_gemm_bf16_path());
    w = 0;
    run_cases(&w);
    printf("  widened (forced): worst error %.3f of the bound\n", w);
    prev = cl_gemm_force_widen(0);
    CHECK(prev == 1, "force_widen returned %d, expected 1", prev);

    prev = cl_gemm_force_reference(1);
    CHECK(!strcmp(cl_gemm_bf16_path(), "widened to f32"), "with the reference forced the path is %s", cl_gemm_bf16_path());
    w = 0;
    run_cases(&w);
    printf("  widened onto cl_gemm_ref (forced): worst error %.3f of the bound\n", w);
    cl_gemm_force_reference(prev);
}

/* The matmul and the widened path on one product: each within the bound (so within twice it of each other). */
static void test_fallback_agrees(void) {
    int M = 45, N = 77, K = 301, ta = 1, tb = 0;
    uint16_t *A = bf16_rand((long)K * M), *B = bf16_rand((long)K * N);
    float *C1 = xmalloc((size_t)M * N * 4), *C2 = xmalloc((size_t)M * N * 4);
    cl_gemm_ex(ta, tb, M, N, K, 1.0f, A, CL_BF16, M, B, CL_BF16, N, 0.0f, C1, N);
    int prev = cl_gemm_force_widen(1);
    cl_gemm_ex(ta, tb, M, N, K, 1.0f, A, CL_BF16, M, B, CL_BF16, N, 0.0f, C2, N);
    cl_gemm_force_widen(prev);
    double w1 = 0, w2 = 0;
    CHECK(gemm_bad(ta, tb, M, N, K, 1.0f, A, M, B, N, 0.0f, C1, C1, N, 1.0, &w1) == 0, "first path outside the bound");
    CHECK(gemm_bad(ta, tb, M, N, K, 1.0f, A, M, B, N, 0.0f, C2, C2, N, 1.0, &w2) == 0, "widened path outside the bound");
    free(A);
    free(B);
    free(C1);
    free(C2);
}

/* K = 0: C = beta C, and beta 0 overwrites NaN with 0; M or N = 0 touches nothing. */
static void test_degenerate(void) {
    uint16_t a[4] = {0}, b[4] = {0};
    float C[6] = {1, 2, 3, 4, 5, 6};
    cl_gemm_ex(0, 0, 2, 3, 0, 1.0f, a, CL_BF16, 1, b, CL_BF16, 3, 0.5f, C, 3);
    CHECK(C[0] == 0.5f && C[5] == 3.0f, "K = 0, beta 0.5: C[0] %g C[5] %g", C[0], C[5]);
    for (int i = 0; i < 6; i++) C[i] = NAN;
    cl_gemm_ex(0, 0, 2, 3, 0, 1.0f, a, CL_BF16, 1, b, CL_BF16, 3, 0.0f, C, 3);
    int zeros = 1;
    for (int i = 0; i < 6; i++) zeros &= C[i] == 0.0f;
    CHECK(zeros, "K = 0, beta 0 must overwrite NaN with 0");
    C[0] = 7;
    cl_gemm_ex(0, 0, 0, 3, 2, 1.0f, a, CL_BF16, 2, b, CL_BF16, 3, 0.0f, C, 3);
    cl_gemm_ex(0, 0, 2, 0, 2, 1.0f, a, CL_BF16, 2, b, CL_BF16, 3, 0.0f, C, 3);
    CHECK(C[0] == 7, "M or N = 0 changed C");
}

/* One BF16 and one F32 operand; both F32 is cl_gemm bit for bit; the CPU table's entry is cl_gemm_ex. */
static void test_mixed_and_table(void) {
    int M = 31, N = 40, K = 57;
    uint16_t *A = bf16_rand((long)M * K), *B = bf16_rand((long)K * N);
    float *Bf = xmalloc((size_t)K * N * 4), *Af = xmalloc((size_t)M * K * 4), *C = xmalloc((size_t)M * N * 4),
          *C2 = xmalloc((size_t)M * N * 4);
    cl_dtype_convert(Bf, CL_F32, B, CL_BF16, (size_t)K * N);
    cl_dtype_convert(Af, CL_F32, A, CL_BF16, (size_t)M * K);
    double w = 0;
    cl_gemm_ex(0, 0, M, N, K, 1.0f, A, CL_BF16, K, Bf, CL_F32, N, 0.0f, C, N);
    CHECK(gemm_bad(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, C, N, 1.0, &w) == 0, "BF16 A x F32 B outside the bound");
    cl_gemm_ex(0, 0, M, N, K, 1.0f, Af, CL_F32, K, B, CL_BF16, N, 0.0f, C, N);
    CHECK(gemm_bad(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, C, N, 1.0, &w) == 0, "F32 A x BF16 B outside the bound");
    cl_gemm_ex(1, 0, M, N, K, 0.5f, Af, CL_F32, M, Bf, CL_F32, N, 0.0f, C, N); /* Af read as K x M: any F32 values */
    cl_gemm(1, 0, M, N, K, 0.5f, Af, M, Bf, N, 0.0f, C2, N);
    CHECK(!memcmp(C, C2, (size_t)M * N * 4), "F32 operands through cl_gemm_ex differ from cl_gemm");
    const cl_kernels *k = &cl_cpu_kernels;
    CHECK(k->gemm_formats & (1u << CL_BF16), "the cpu gemm does not take BF16");
    k->gemm(0, 0, M, N, K, 1.0f, A, CL_BF16, K, B, CL_BF16, N, 0.0f, C, CL_F32, N);
    cl_gemm_ex(0, 0, M, N, K, 1.0f, A, CL_BF16, K, B, CL_BF16, N, 0.0f, C2, N);
    CHECK(!memcmp(C, C2, (size_t)M * N * 4), "the table's gemm differs from cl_gemm_ex");
    free(A);
    free(B);
    free(Af);
    free(Bf);
    free(C);
    free(C2);
}

/* ---- several threads on the cached primitives at once ---------------------- */

enum { TH = 4, TH_SHAPES = 3, TH_ROUNDS = 6 };
static const int th_shape[TH_SHAPES][5] = {{0, 1, 48, 96, 64}, {1, 0, 64, 80, 40}, {0, 0, 33, 65, 129}};
static uint16_t *th_a[TH_SHAPES], *th_b[TH_SHAPES];
static float *th_want[TH_SHAPES];

static void th_run(int s, float *C) {
    const int *g = th_shape[s];
    int ta = g[0], tb = g[1], M = g[2], N = g[3], K = g[4];
    cl_gemm_ex(ta, tb, M, N, K, 1.0f, th_a[s], CL_BF16, ta ? M : K, th_b[s], CL_BF16, tb ? K : N, 0.0f, C, N);
}

static void *th_main(void *arg) {
    int id = (int)(intptr_t)arg;
    cl_set_threads(1);
    float *C = xmalloc(96 * 96 * 4);
    long diff = 0;
    for (int r = 0; r < TH_ROUNDS; r++)
        for (int s = 0; s < TH_SHAPES; s++) {
            int k = (s + id + r) % TH_SHAPES;
            th_run(k, C);
            diff += memcmp(C, th_want[k], (size_t)th_shape[k][2] * th_shape[k][3] * 4) != 0;
        }
    free(C);
    TCHECK(diff == 0, "thread %d: %ld products differ from one thread's bits", id, diff);
    return NULL;
}

static void test_threads(void) {
    int prev = cl_threads();
    cl_set_threads(1);
    for (int s = 0; s < TH_SHAPES; s++) {
        th_a[s] = bf16_rand((long)th_shape[s][2] * th_shape[s][4]);
        th_b[s] = bf16_rand((long)th_shape[s][3] * th_shape[s][4]);
        th_want[s] = xmalloc(96 * 96 * 4);
        th_run(s, th_want[s]);
    }
    pthread_t t[TH];
    for (int i = 0; i < TH; i++) CHECK(pthread_create(&t[i], NULL, th_main, (void *)(intptr_t)i) == 0, "pthread_create");
    for (int i = 0; i < TH; i++) pthread_join(t[i], NULL);
    for (int s = 0; s < TH_SHAPES; s++) {
        free(th_a[s]);
        free(th_b[s]);
        free(th_want[s]);
    }
    cl_set_threads(prev);
}

/* cl_gemm_ex_rows, as an expert's products call it (rows vary: forward and input gradient M, weight gradient K):
 * every product within the bound, one primitive per transposes and leading dimensions for all the counts, the same
 * bits when a count comes back, and F32 operands cl_gemm's bits. */
static void test_rows(void) {
    const int C = 24, F = 40, R = 70;
    uint16_t *x = bf16_rand((long)R * C), *w = bf16_rand((long)C * F), *dy = bf16_rand((long)R * F);
    float *out = xmalloc((size_t)R * F * sizeof *out), *dw = xmalloc((size_t)C * F * sizeof *dw),
          *again = xmalloc((size_t)R * F * sizeof *again);
    long bad = 0;
    double worst = 0;
    int before = cl_gemm_cache_count();
    for (int n = 1; n <= R; n += 3) {
        cl_gemm_ex_rows(0, 0, n, F, C, 1.0f, x, CL_BF16, C, w, CL_BF16, F, 0.0f, out, F); /* forward: M = n */
        bad += gemm_bad(0, 0, n, F, C, 1.0f, x, C, w, F, 0.0f, out, out, F, 1.0, &worst);
        cl_gemm_ex_rows(0, 1, n, C, F, 1.0f, dy, CL_BF16, F, w, CL_BF16, F, 0.0f, out, C); /* input gradient: M = n */
        bad += gemm_bad(0, 1, n, C, F, 1.0f, dy, F, w, F, 0.0f, out, out, C, 1.0, &worst);
        cl_gemm_ex_rows(1, 0, C, F, n, 1.0f, x, CL_BF16, C, dy, CL_BF16, F, 0.0f, dw, F); /* weight gradient: K = n */
        bad += gemm_bad(1, 0, C, F, n, 1.0f, x, C, dy, F, 0.0f, dw, dw, F, 1.0, &worst);
    }
    int made = cl_gemm_cache_count() - before;
    printf("  rows: %d primitives for 3 products at 24 row counts each (worst %.3g of the bound)\n", made, worst);
    CHECK(bad == 0, "cl_gemm_ex_rows: %ld elements outside the F32 bound", bad);
    if (!strcmp(cl_gemm_bf16_path(), "onednn matmul"))
        CHECK(made >= 1 && made <= 3, "cl_gemm_ex_rows made %d primitives for 3 products over 24 row counts, not 1 each", made);
    cl_gemm_ex_rows(0, 0, 7, F, C, 1.0f, x, CL_BF16, C, w, CL_BF16, F, 0.0f, out, F);
    cl_gemm_ex_rows(0, 0, 50, F, C, 1.0f, x, CL_BF16, C, w, CL_BF16, F, 0.0f, again, F);
    cl_gemm_ex_rows(0, 0, 7, F, C, 1.0f, x, CL_BF16, C, w, CL_BF16, F, 0.0f, again, F);
    CHECK(!memcmp(out, again, (size_t)7 * F * sizeof *out), "cl_gemm_ex_rows: the same count gave other bits after another");
    float *xf = xmalloc((size_t)R * C * sizeof *xf), *wf = xmalloc((size_t)C * F * sizeof *wf);
    for (long i = 0; i < (long)R * C; i++) xf[i] = cl_bf16_to_f32(x[i]);
    for (long i = 0; i < (long)C * F; i++) wf[i] = cl_bf16_to_f32(w[i]);
    cl_gemm_ex_rows(0, 0, 33, F, C, 1.0f, xf, CL_F32, C, wf, CL_F32, F, 0.0f, out, F);
    cl_gemm(0, 0, 33, F, C, 1.0f, xf, C, wf, F, 0.0f, again, F);
    CHECK(!memcmp(out, again, (size_t)33 * F * sizeof *out), "cl_gemm_ex_rows on F32 operands differs from cl_gemm");
    free(x), free(w), free(dy), free(out), free(dw), free(again), free(xf), free(wf);
}

/* B packed into the primitive's layout before the call (cl_gemm_pack_b): the same bits as B given as it is, on
 * shapes past the packing threshold with odd sizes (padding in K and N), beta 1 and alpha != 1, one thread and the
 * team; leading dimensions past the shape (where oneDNN takes its jit GEMM, which reads B as it is: not packed);
 * and the route must have run where the matmul primitive does. */
static void test_pack(void) {
    static const int shapes[][6] = {/* ta, M, N, K, pad, beta 1 */
                                    {0, 64, 512, 512, 0, 0}, {1, 70, 203, 1201, 0, 1}, {0, 100, 257, 771, 0, 0},
                                    {1, 512, 64, 640, 0, 1}, {0, 33, 1000, 513, 1, 1}, {1, 70, 203, 1201, 5, 0}};
    long before = cl_gemm_packed_count();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int ta = shapes[s][0], M = shapes[s][1], N = shapes[s][2], K = shapes[s][3], pad = shapes[s][4];
        float alpha = shapes[s][5] ? 0.5f : 1.0f, beta = shapes[s][5] ? 1.0f : 0.0f;
        int lda = (ta ? M : K) + pad, ldb = N + pad, ldc = N + pad;
        uint16_t *A = bf16_rand((long)(ta ? K : M) * lda), *B = bf16_rand((long)K * ldb);
        float *C0 = xmalloc((size_t)M * ldc * sizeof *C0), *Cp = xmalloc((size_t)M * ldc * sizeof *Cp),
              *Cq = xmalloc((size_t)M * ldc * sizeof *Cq);
        for (long i = 0; i < (long)M * ldc; i++) C0[i] = (i % ldc) >= N ? SENTINEL : cl_rng_normal(&g_rng);
        for (int th = 1; th <= 2; th++) {
            int was = cl_threads();
            cl_set_threads(th);
            memcpy(Cp, C0, (size_t)M * ldc * sizeof *Cp);
            memcpy(Cq, C0, (size_t)M * ldc * sizeof *Cq);
            int prev = cl_gemm_pack_b(0);
            cl_gemm_ex(ta, 0, M, N, K, alpha, A, CL_BF16, lda, B, CL_BF16, ldb, beta, Cq, ldc);
            cl_gemm_pack_b(1);
            cl_gemm_ex(ta, 0, M, N, K, alpha, A, CL_BF16, lda, B, CL_BF16, ldb, beta, Cp, ldc);
            cl_gemm_pack_b(prev);
            cl_set_threads(was);
            CHECK(!memcmp(Cp, Cq, (size_t)M * ldc * sizeof *Cp), "packed B: ta=%d M=%d N=%d K=%d pad=%d, %d threads: other bits than B as given",
                  ta, M, N, K, pad, th);
            double w = 0;
            CHECK(gemm_bad(ta, 0, M, N, K, alpha, A, lda, B, ldb, beta, C0, Cp, ldc, 1.0, &w) == 0,
                  "packed B: ta=%d M=%d N=%d K=%d outside the F32 bound", ta, M, N, K);
            CHECK(pad_changed(Cp, M, N, ldc) == 0, "packed B: ta=%d M=%d N=%d K=%d wrote outside C's block", ta, M, N, K);
        }
        free(A), free(B), free(C0), free(Cp), free(Cq);
    }
    long ran = cl_gemm_packed_count() - before;
    printf("  packed B: %ld of %d products packed\n", ran, (int)(sizeof shapes / sizeof shapes[0]) * 2);
    if (!strcmp(cl_gemm_bf16_path(), "onednn matmul") && ran == 0)
        cl_test_skip("packed B (oneDNN chose a B layout the packer does not write here: B given as it is)", 0);
    else if (strcmp(cl_gemm_bf16_path(), "onednn matmul")) cl_test_skip("packed B (no matmul primitive here: widened)", 0);
}

/* What cl_nn_grad_beta rests on (a weight gradient's first product of the step overwrites instead of adding into the
 * zeros): beta 0 into a C of NaN gives the bits of beta 1 into a C of zeros, the weight gradients' transposed A and
 * wide ones included (packed B, K past one block), BF16 and F32 operands, one and two threads. */
static void test_beta0_zeros(void) {
    static const int shapes[][4] = {/* ta, M, N, K */ {1, 256, 768, 256}, {1, 96, 200, 1024}, {1, 64, 3000, 64}, {0, 33, 65, 129}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int ta = shapes[s][0], M = shapes[s][1], N = shapes[s][2], K = shapes[s][3], lda = ta ? M : K;
        long na = (long)M * K, nb = (long)K * N, nc = (long)M * N;
        uint16_t *A = bf16_rand(na), *B = bf16_rand(nb);
        float *Af = xmalloc((size_t)na * sizeof *Af), *Bf = xmalloc((size_t)nb * sizeof *Bf);
        for (long i = 0; i < na; i++) Af[i] = cl_rng_normal(&g_rng);
        for (long i = 0; i < nb; i++) Bf[i] = cl_rng_normal(&g_rng);
        float *C0 = xmalloc((size_t)nc * sizeof *C0), *C1 = xmalloc((size_t)nc * sizeof *C1);
        for (int f32 = 0; f32 <= 1; f32++)
            for (int th = 1; th <= 2; th++) {
                int was = cl_threads();
                cl_set_threads(th);
                for (long i = 0; i < nc; i++) C0[i] = NAN, C1[i] = 0.0f;
                const void *a = f32 ? (const void *)Af : A, *b = f32 ? (const void *)Bf : B;
                cl_dtype t = f32 ? CL_F32 : CL_BF16;
                cl_gemm_ex(ta, 0, M, N, K, 1.0f, a, t, lda, b, t, N, 0.0f, C0, N);
                cl_gemm_ex(ta, 0, M, N, K, 1.0f, a, t, lda, b, t, N, 1.0f, C1, N);
                cl_set_threads(was);
                CHECK(!memcmp(C0, C1, (size_t)nc * sizeof *C0), "%s ta=%d M=%d N=%d K=%d, %d threads: beta 0 differs from beta 1 into zeros",
                      f32 ? "F32" : "BF16", ta, M, N, K, th);
            }
        free(A), free(B), free(Af), free(Bf), free(C0), free(C1);
    }
}

/* A long K with B past 8 MiB (the LM head's input gradient's shape, smaller): cl_gemm_ex runs it in 4096-row pieces
 * of K, the first with the caller's beta, the rest adding; within the F32 bound either way (the bound holds for any
 * summation order), and bit for bit those pieces run one by one (so the route ran: one call over K sums in another
 * order), A plain and transposed, beta 0 and 1. */
static void test_ksplit(void) {
    enum { M = 8, N = 600, K = 9000, PIECE = 4096 };
    uint16_t *A = bf16_rand((long)M * K), *B = bf16_rand((long)K * N);
    float *C0 = xmalloc((size_t)M * N * sizeof *C0), *C = xmalloc((size_t)M * N * sizeof *C), *Cp = xmalloc((size_t)M * N * sizeof *Cp),
          *Cw = xmalloc((size_t)M * N * sizeof *Cw);
    for (long i = 0; i < (long)M * N; i++) C0[i] = cl_rng_normal(&g_rng);
    for (int c = 0; c < 2; c++) {
        int ta = c, lda = ta ? M : K;
        float alpha = c ? 0.5f : 1.0f, beta = c ? 1.0f : 0.0f;
        memcpy(C, C0, (size_t)M * N * sizeof *C), memcpy(Cp, C0, (size_t)M * N * sizeof *C), memcpy(Cw, C0, (size_t)M * N * sizeof *C);
        cl_gemm_ex(ta, 0, M, N, K, alpha, A, CL_BF16, lda, B, CL_BF16, N, beta, C, N);
        for (int k0 = 0; k0 < K; k0 += PIECE) {
            int kk = K - k0 < PIECE ? K - k0 : PIECE;
            cl_gemm_ex(ta, 0, M, N, kk, alpha, ta ? A + (long)k0 * lda : A + k0, CL_BF16, lda, B + (long)k0 * N, CL_BF16, N, k0 ? 1.0f : beta,
                       Cp, N);
        }
        int prev = cl_gemm_ksplit(0);
        cl_gemm_ex(ta, 0, M, N, K, alpha, A, CL_BF16, lda, B, CL_BF16, N, beta, Cw, N);
        cl_gemm_ksplit(prev);
        double w = 0;
        CHECK(gemm_bad(ta, 0, M, N, K, alpha, A, lda, B, N, beta, C0, C, N, 1.0, &w) == 0, "K in pieces, ta=%d: outside the F32 bound", ta);
        CHECK(gemm_bad(ta, 0, M, N, K, alpha, A, lda, B, N, beta, C0, Cw, N, 1.0, &w) == 0, "K whole, ta=%d: outside the F32 bound", ta);
        /* the pieces are the matmul's route; the widening path splits by its own rule (gemm_widened), whose bits need
         * not be those of 4096-row pieces (on a Zen 3's AVX2 sgemm they are not, for ta 1) */
        if (!strcmp(cl_gemm_bf16_path(), "onednn matmul"))
            CHECK(!memcmp(C, Cp, (size_t)M * N * sizeof *C), "K in pieces, ta=%d: other bits than its 4096-row pieces one by one", ta);
        else cl_test_skip("K in pieces bit for bit (no matmul primitive here: widened)", 0);
    }
    free(A), free(B), free(C0), free(C), free(Cp), free(Cw);
}

/* The widening path past its 16 MiB of widened operands: the product in pieces of K (both operands large, the pieces
 * adding into C after the caller's beta), of A's rows, of B's columns; padded leading dimensions, every transpose. */
static void test_widen_pieces(void) {
    static const int shape[][5] = {{0, 1, 40, 40, 120000}, {1, 0, 36, 44, 110000}, {0, 0, 70000, 24, 64}, {1, 1, 66000, 20, 72},
                                   {0, 1, 24, 70000, 64}, {1, 0, 20, 66000, 72}};
    static const float ab[][2] = {{0.5f, 1.0f}, {1.0f, 0.0f}, {-0.75f, 0.25f}, {1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, 0.0f}};
    int prev = cl_gemm_force_widen(1);
    double w = 0;
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++)
        bf16_case(shape[i][0], shape[i][1], shape[i][2], shape[i][3], shape[i][4], (int)i % 2 ? 3 : 0, ab[i][0], ab[i][1], &w);
    printf("  widened in pieces: worst error %.3f of the bound\n", w);
    cl_gemm_force_widen(prev);
}

/* More keys than the cache holds: it stays bounded and every product stays right. */
static void test_cache_bound(void) {
    long bad = 0;
    double w = 0;
    uint16_t *A = bf16_rand(200 * 4), *B = bf16_rand(4 * 3);
    float C[200 * 3];
    for (int M = 1; M <= 140; M++) {
        cl_gemm_ex(0, 0, M, 3, 4, 1.0f, A, CL_BF16, 4, B, CL_BF16, 3, 0.0f, C, 3);
        bad += gemm_bad(0, 0, M, 3, 4, 1.0f, A, 4, B, 3, 0.0f, C, C, 3, 1.0, &w);
    }
    int n = cl_gemm_cache_count();
    printf("  cache: %d primitives after 140 new shapes\n", n);
    CHECK(n <= 128, "the cache holds %d primitives, more than its 128", n);
    if (!strcmp(cl_gemm_bf16_path(), "onednn matmul")) CHECK(n > 0, "the cache holds nothing after 140 matmuls");
    CHECK(bad == 0, "%ld elements outside the bound past the cache's capacity", bad);
    free(A);
    free(B);
}

int main(void) {
    cl_rng_seed(&g_rng, 29);
    test_paths();
    test_fallback_agrees();
    test_degenerate();
    test_mixed_and_table();
    test_threads();
    test_rows();
    test_pack();
    test_beta0_zeros();
    test_ksplit();
    test_widen_pieces();
    test_cache_bound();
    return cl_test_report("test_gemm_bf16");
}
