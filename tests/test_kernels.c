/* Tests for the CPU kernels (include/cleave/kernels.h).
 *
 * Each kernel is checked against an independent double-precision reference
 * written here: forwards directly, backwards against central finite
 * differences of that double reference, with loss = sum(out * R) for a
 * random R (so dout = R). Gradient buffers are pre-filled with random values
 * and the prefill subtracted afterwards, which checks the "backward adds"
 * contract at the same time. Errors are max|got - want| / max|want|; each
 * kernel prints its worst. Sizes are small: the whole file runs in well
 * under a second, also under sanitizers. */
#include "cleave/core.h"
#include "cleave/kernels.h"
#include "common/check.h"
#include "kernels/simd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------ */

static cl_rng g_rng;

static void *xcalloc(long n, size_t sz) {
    void *p = calloc(n > 0 ? (size_t)n : 1, sz);
    if (!p) {
        fprintf(stderr, "test_kernels: out of memory\n");
        exit(2);
    }
    return p;
}
static float *fvec(long n) { return xcalloc(n, sizeof(float)); }
static double *dvec(long n) { return xcalloc(n, sizeof(double)); }
static float *frandn(long n, float scale) {
    float *x = fvec(n);
    for (long i = 0; i < n; i++) x[i] = scale * cl_rng_normal(&g_rng);
    return x;
}
static float *fcopy(const float *x, long n) {
    float *y = fvec(n);
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}
static double *todouble(const float *x, long n) {
    double *y = dvec(n);
    for (long i = 0; i < n; i++) y[i] = x[i];
    return y;
}
static void ffill(float *x, long n, float v) {
    for (long i = 0; i < n; i++) x[i] = v;
}

/* max |a - b| / max |b| (NaN in a gives infinity) */
static double err_fd(const float *a, const double *b, long n) {
    double md = 0, mb = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (isnan(d)) d = INFINITY;
        if (d > md) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}
static double err_dd(const double *a, const double *b, long n) {
    double md = 0, mb = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (isnan(d)) d = INFINITY;
        if (d > md) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}
static long count_ne(const float *a, const float *b, long n) {
    long c = 0;
    for (long i = 0; i < n; i++) c += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return c;
}

typedef struct { const char *name; double worst; } kstat;

static void expect(kstat *k, const char *what, double err, double tol) {
    printf("  %-10s %-34s %.2e (tol %.0e)\n", k->name, what, err, tol);
    CHECK(err <= tol, "%s: %s: relative error %.3e > %.0e", k->name, what, err, tol);
    if (err > k->worst || isnan(err)) k->worst = err;
}
static void kdone(const kstat *k) { printf("%-10s worst relative error %.2e\n", k->name, k->worst); }

/* Gradient buffer pre-filled with random values; delta() returns what the
 * backward added. */
typedef struct { float *g, *g0; long n; } gbuf;
static gbuf gbuf_new(long n) {
    gbuf b = {frandn(n, 1.0f), NULL, n};
    b.g0 = fcopy(b.g, n);
    return b;
}
static double *gbuf_delta(const gbuf *b) {
    double *d = dvec(b->n);
    for (long i = 0; i < b->n; i++) d[i] = (double)b->g[i] - (double)b->g0[i];
    return d;
}
static void gbuf_free(gbuf *b) { free(b->g); free(b->g0); }

/* Central differences of loss = sum(out * R) on a double reference. */
typedef void (*ref_fn)(void *ctx, double *out);
static void fd_grad(double *grad, double *x, long nx, ref_fn f, void *ctx,
                    const double *R, long nout) {
    double *out = dvec(nout);
    const double h = 1e-4;
    for (long i = 0; i < nx; i++) {
        double x0 = x[i], lp = 0, lm = 0;
        x[i] = x0 + h;
        f(ctx, out);
        for (long j = 0; j < nout; j++) lp += out[j] * R[j];
        x[i] = x0 - h;
        f(ctx, out);
        for (long j = 0; j < nout; j++) lm += out[j] * R[j];
        x[i] = x0;
        grad[i] = (lp - lm) / (2 * h);
    }
    free(out);
}

/* The analytic gradient (what a backward added to g) against FD on x. */
static void expect_grad(kstat *k, const char *what, const gbuf *g, double *x, ref_fn f,
                        void *ctx, const double *R, long nout, double tol) {
    double *fd = dvec(g->n), *an = gbuf_delta(g);
    fd_grad(fd, x, g->n, f, ctx, R, nout);
    expect(k, what, err_dd(an, fd, g->n), tol);
    free(fd);
    free(an);
}

#define FWD_TOL 1e-5
#define GRAD_TOL 1e-5

/* ---- gemm ---------------------------------------------------------------- */

/* want = alpha op(A) op(B) + beta C in double; mag = the same with absolute
 * values, the scale rounding errors are measured against. */
static void dgemm(int ta, int tb, int M, int N, int K, double alpha, const float *A, int lda,
                  const float *B, int ldb, double beta, const float *C, int ldc,
                  double *want, double *mag) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, a = 0;
            for (int k = 0; k < K; k++) {
                double x = ta ? A[(long)k * lda + i] : A[(long)i * lda + k];
                double y = tb ? B[(long)j * ldb + k] : B[(long)k * ldb + j];
                s += x * y;
                a += fabs(x * y);
            }
            double c = beta != 0 ? C[(long)i * ldc + j] : 0;
            want[(long)i * N + j] = alpha * s + beta * c;
            mag[(long)i * N + j] = fabs(alpha) * a + fabs(beta * c);
        }
}

/* max |C - want| / max mag over the M x N block; want has row stride ldw */
static double gemm_err(const float *C, int ldc, const double *want, int ldw, const double *mag, int M, int N) {
    double md = 0, mm = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double d = fabs(C[(long)i * ldc + j] - want[(long)i * ldw + j]);
            if (isnan(d)) d = INFINITY;
            if (d > md) md = d;
            if (mag[(long)i * N + j] > mm) mm = mag[(long)i * N + j];
        }
    return mm > 0 ? md / mm : md;
}

#define GEMM_SENTINEL 12345.0f

/* One product through cl_gemm_ref and cl_gemm; checks both against double,
 * and that nothing outside the M x N block of C changed. */
static void gemm_case(kstat *k, int ta, int tb, int M, int N, int K, float alpha, float beta,
                      double *worst_ref, double *worst_lib, double *worst_pair) {
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
    long na = (long)(ta ? K : M) * lda, nb = (long)(tb ? N : K) * ldb, nc = (long)M * ldc;
    float *A = frandn(na, 1.0f), *B = frandn(nb, 1.0f), *C = fvec(nc);
    for (long i = 0; i < nc; i++) C[i] = (i % ldc) < N ? (beta == 0 ? NAN : cl_rng_normal(&g_rng)) : GEMM_SENTINEL;
    float *Cr = fcopy(C, nc), *Cl = fcopy(C, nc);
    double *want = dvec((long)M * N), *mag = dvec((long)M * N);
    dgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, want, mag);
    cl_gemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cr, ldc);
    cl_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cl, ldc);
    double er = gemm_err(Cr, ldc, want, N, mag, M, N), el = gemm_err(Cl, ldc, want, N, mag, M, N);
    double *crd = todouble(Cr, nc);
    double ep = gemm_err(Cl, ldc, crd, ldc, mag, M, N);
    long pad_changed = 0;
    for (long i = 0; i < nc; i++)
        if ((i % ldc) >= N) pad_changed += Cr[i] != GEMM_SENTINEL || Cl[i] != GEMM_SENTINEL;
    CHECK(er <= FWD_TOL && el <= FWD_TOL && ep <= FWD_TOL,
          "%s: ta=%d tb=%d M=%d N=%d K=%d alpha=%g beta=%g: ref %.2e, lib %.2e, lib vs ref %.2e",
          k->name, ta, tb, M, N, K, alpha, beta, er, el, ep);
    CHECK(pad_changed == 0, "gemm wrote outside C's block: ta=%d tb=%d M=%d N=%d K=%d (%ld floats)",
          ta, tb, M, N, K, pad_changed);
    if (er > *worst_ref) *worst_ref = er;
    if (el > *worst_lib) *worst_lib = el;
    if (ep > *worst_pair) *worst_pair = ep;
    free(A); free(B); free(C); free(Cr); free(Cl); free(want); free(mag); free(crd);
}

static void test_gemm(void) {
    kstat k = {"gemm", 0};
    printf("gemm backend: %s\n", cl_gemm_backend());
#ifdef CL_HAVE_DNNL
    CHECK(strcmp(cl_gemm_backend(), "onednn") == 0, "backend is %s", cl_gemm_backend());
#else
    CHECK(strcmp(cl_gemm_backend(), "reference") == 0, "backend is %s", cl_gemm_backend());
#endif
    const int sizes[] = {1, 7, 33, 65};
    const float betas[] = {0.0f, 1.0f, -0.5f};
    double wr = 0, wl = 0, wp = 0;
    int c = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int im = 0; im < 4; im++)
                for (int in = 0; in < 4; in++)
                    for (int ik = 0; ik < 4; ik++, c++)
                        gemm_case(&k, ta, tb, sizes[im], sizes[in], sizes[ik],
                                  c % 2 ? 0.7f : 1.0f, betas[c % 3], &wr, &wl, &wp);
    /* one bigger product, so the library takes its blocked paths */
    for (int ta = 0; ta < 2; ta++) gemm_case(&k, ta, !ta, 150, 131, 170, 1.0f, 0.0f, &wr, &wl, &wp);
    expect(&k, "cl_gemm_ref vs double (256 cases)", wr, FWD_TOL);
    expect(&k, "cl_gemm vs double", wl, FWD_TOL);
    expect(&k, "cl_gemm vs cl_gemm_ref", wp, FWD_TOL);

    /* degenerate sizes: nothing is read from A or B, C follows beta */
    float A[4] = {1, 2, 3, 4}, B[4] = {5, 6, 7, 8};
    for (int lib = 0; lib < 2; lib++) {
        void (*g)(int, int, int, int, int, float, const float *, int, const float *, int,
                  float, float *, int) = lib ? cl_gemm : cl_gemm_ref;
        float C[6] = {1, 2, 3, 4, 5, 6};
        g(0, 0, 0, 3, 2, 1.0f, A, 2, B, 3, 0.0f, C, 3);
        g(0, 0, 2, 0, 2, 1.0f, A, 2, B, 1, 0.0f, C, 1);
        CHECK(C[0] == 1 && C[5] == 6, "%s: M or N = 0 changed C", lib ? "cl_gemm" : "cl_gemm_ref");
        g(0, 0, 2, 3, 0, 1.0f, A, 1, B, 3, 0.5f, C, 3);
        CHECK(C[0] == 0.5f && C[1] == 1.0f && C[5] == 3.0f, "%s: K = 0, beta 0.5: C = %g %g .. %g",
              lib ? "cl_gemm" : "cl_gemm_ref", C[0], C[1], C[5]);
        g(1, 1, 2, 3, 0, 1.0f, A, 2, B, 1, 1.0f, C, 3);
        CHECK(C[0] == 0.5f && C[5] == 3.0f, "%s: K = 0, beta 1 changed C", lib ? "cl_gemm" : "cl_gemm_ref");
        float Cn[6] = {NAN, NAN, NAN, NAN, NAN, 9};
        g(0, 0, 1, 5, 0, 1.0f, A, 1, B, 5, 0.0f, Cn, 5);
        int zeros = 1;
        for (int i = 0; i < 5; i++) zeros &= Cn[i] == 0.0f && !signbit(Cn[i]);
        CHECK(zeros && Cn[5] == 9, "%s: K = 0, beta 0 must overwrite NaN with 0", lib ? "cl_gemm" : "cl_gemm_ref");
    }

    /* B 64-byte aligned with rows a multiple of 4 KiB apart (an AVX2 CPU copies it 16 bytes off first: src/kernels/
     * gemm.c): the bits of the same B anywhere else, in the dense case and with ldb past N, beta 0 and 1 */
    {
        int M = 64, K = 300, shapes[2][2] = {{1024, 1024}, {1000, 1024}};
        for (int c2 = 0; c2 < 2; c2++) {
            int N = shapes[c2][0], ldb = shapes[c2][1];
            /* values from a formula, not g_rng: the later cases' draws stay as they were */
            float *a = malloc((size_t)M * K * sizeof *a), *c1 = malloc((size_t)M * N * sizeof *c1);
            float *bal = aligned_alloc(64, ((size_t)K * ldb + 64) * sizeof *bal);
            CL_ASSERT(a && c1 && bal);
            for (long i = 0; i < (long)M * K; i++) a[i] = (float)((i * 7919) % 997) / 997.0f - 0.5f;
            for (long i = 0; i < (long)K * ldb + 64; i++) bal[i] = (float)((i * 104729) % 1009) / 1009.0f - 0.5f;
            for (long i = 0; i < (long)M * N; i++) c1[i] = (float)((i * 31) % 101) / 101.0f;
            float *boff = bal + 4, *c2b = fcopy(c1, (long)M * N), *c3 = fcopy(c1, (long)M * N);
            for (float beta = 0.0f; beta <= 1.0f; beta += 1.0f) {
                memcpy(c2b, c1, (size_t)M * N * sizeof *c1), memcpy(c3, c1, (size_t)M * N * sizeof *c1);
                cl_gemm(0, 0, M, N, K, 1.0f, a, K, bal, ldb, beta, c2b, N); /* aligned */
                memmove(boff, bal, (size_t)K * ldb * sizeof *bal);           /* the same B, 16 bytes on */
                cl_gemm(0, 0, M, N, K, 1.0f, a, K, boff, ldb, beta, c3, N);
                memmove(bal, boff, (size_t)K * ldb * sizeof *bal);
                CHECK(!memcmp(c2b, c3, (size_t)M * N * sizeof *c3), "gemm N %d ldb %d beta %g: an aligned B gives other bits", N, ldb,
                      (double)beta);
            }
            free(a), free(bal), free(c1), free(c2b), free(c3);
        }
    }

    /* forcing the reference: cl_gemm then equals cl_gemm_ref bit for bit */
    int prev = cl_gemm_force_reference(1);
    CHECK(prev == 0, "force_reference returned %d, expected 0", prev);
    CHECK(strcmp(cl_gemm_backend(), "reference") == 0, "forced backend is %s", cl_gemm_backend());
    {
        int M = 33, N = 7, K = 65;
        float *a = frandn((long)M * K, 1), *b = frandn((long)K * N, 1), *c1 = frandn((long)M * N, 1);
        float *c2 = fcopy(c1, (long)M * N);
        cl_gemm(0, 1, M, N, K, 0.5f, a, K, b, K, 0.25f, c1, N);
        cl_gemm_ref(0, 1, M, N, K, 0.5f, a, K, b, K, 0.25f, c2, N);
        CHECK(count_ne(c1, c2, (long)M * N) == 0, "forced cl_gemm differs from cl_gemm_ref");
        free(a); free(b); free(c1); free(c2);
    }
    prev = cl_gemm_force_reference(0);
    CHECK(prev == 1, "force_reference returned %d, expected 1", prev);
    kdone(&k);
}

/* ---- linear ---------------------------------------------------------------- */

typedef struct { int N, IC, OC; double *in, *w, *b; } lin_ctx;
static void lin_ref(void *vc, double *out) {
    lin_ctx *c = vc;
    for (int n = 0; n < c->N; n++)
        for (int o = 0; o < c->OC; o++) {
            double s = c->b ? c->b[o] : 0;
            for (int i = 0; i < c->IC; i++) s += c->in[n * c->IC + i] * c->w[i * c->OC + o];
            out[n * c->OC + o] = s;
        }
}

static void test_linear(void) {
    kstat k = {"linear", 0};
    int N = 5, IC = 7, OC = 6;
    long nin = (long)N * IC, nw = (long)IC * OC, nout = (long)N * OC;
    float *in = frandn(nin, 1), *w = frandn(nw, 0.5f), *b = frandn(OC, 1), *out = frandn(nout, 1);
    float *R = frandn(nout, 1);
    lin_ctx c = {N, IC, OC, todouble(in, nin), todouble(w, nw), todouble(b, OC)};
    double *want = dvec(nout), *Rd = todouble(R, nout);
    lin_ref(&c, want);
    cl_linear_forward(out, in, w, b, N, IC, OC);
    expect(&k, "forward", err_fd(out, want, nout), FWD_TOL);
    double *bsave = c.b;
    c.b = NULL;
    lin_ref(&c, want);
    cl_linear_forward(out, in, w, NULL, N, IC, OC);
    expect(&k, "forward, no bias", err_fd(out, want, nout), FWD_TOL);
    c.b = bsave;

    gbuf din = gbuf_new(nin), dw = gbuf_new(nw), db = gbuf_new(OC);
    cl_linear_backward_input(din.g, R, w, N, IC, OC);
    cl_linear_backward_weight(dw.g, db.g, R, in, N, IC, OC, 1.0f);
    expect_grad(&k, "backward input", &din, c.in, lin_ref, &c, Rd, nout, GRAD_TOL);
    expect_grad(&k, "backward weight dw", &dw, c.w, lin_ref, &c, Rd, nout, GRAD_TOL);
    expect_grad(&k, "backward weight db", &db, c.b, lin_ref, &c, Rd, nout, GRAD_TOL);
    /* db may be NULL: dw gets the same sum */
    float *dw2 = fcopy(dw.g0, nw);
    cl_linear_backward_weight(dw2, NULL, R, in, N, IC, OC, 1.0f);
    CHECK(count_ne(dw2, dw.g, nw) == 0, "linear: dw with db NULL differs");
    /* beta 0 overwrites (NaN does not survive) with the bits of beta 1 into zeros */
    float *dw0 = fcopy(dw.g0, nw);
    for (long i = 0; i < nw; i++) dw0[i] = NAN, dw2[i] = 0.0f;
    cl_linear_backward_weight(dw0, NULL, R, in, N, IC, OC, 0.0f);
    cl_linear_backward_weight(dw2, NULL, R, in, N, IC, OC, 1.0f);
    CHECK(count_ne(dw0, dw2, nw) == 0, "linear: dw with beta 0 differs from beta 1 into zeros");
    free(dw0);
    kdone(&k);
    free(in); free(w); free(b); free(out); free(R); free(c.in); free(c.w); free(c.b);
    free(want); free(Rd); free(dw2);
    gbuf_free(&din); gbuf_free(&dw); gbuf_free(&db);
}

/* ---- embedding --------------------------------------------------------------- */

typedef struct { int B, T, C; const int32_t *tok; double *wte, *wpe; } emb_ctx;
static void emb_ref(void *vc, double *out) {
    emb_ctx *c = vc;
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int ch = 0; ch < c->C; ch++)
                out[((long)b * c->T + t) * c->C + ch] =
                    c->wte[(long)c->tok[b * c->T + t] * c->C + ch] + c->wpe[(long)t * c->C + ch];
}

static void test_embedding(void) {
    kstat k = {"embedding", 0};
    enum { B = 2, T = 6, C = 4, V = 5 };
    const int32_t tok[B * T] = {0, 3, 3, 1, 4, 0, 2, 3, 0, 0, 4, 3}; /* repeats accumulate */
    long nout = (long)B * T * C;
    float *wte = frandn((long)V * C, 1), *wpe = frandn((long)T * C, 1), *out = fvec(nout);
    float *R = frandn(nout, 1);
    emb_ctx c = {B, T, C, tok, todouble(wte, (long)V * C), todouble(wpe, (long)T * C)};
    double *want = dvec(nout), *Rd = todouble(R, nout);
    emb_ref(&c, want);
    cl_embedding_forward(out, tok, wte, wpe, B, T, C);
    expect(&k, "forward", err_fd(out, want, nout), FWD_TOL);
    gbuf dwte = gbuf_new((long)V * C), dwpe = gbuf_new((long)T * C);
    cl_embedding_backward_weight(dwte.g, dwpe.g, R, tok, B, T, C);
    expect_grad(&k, "backward dwte", &dwte, c.wte, emb_ref, &c, Rd, nout, GRAD_TOL);
    expect_grad(&k, "backward dwpe", &dwpe, c.wpe, emb_ref, &c, Rd, nout, GRAD_TOL);
    kdone(&k);
    free(wte); free(wpe); free(out); free(R); free(c.wte); free(c.wpe); free(want); free(Rd);
    gbuf_free(&dwte); gbuf_free(&dwpe);
}

/* ---- layernorm ----------------------------------------------------------------- */

typedef struct { int N, C; double *in, *w, *b; double *mean, *rstd; } ln_ctx;
static void ln_ref(void *vc, double *out) {
    ln_ctx *c = vc;
    for (int n = 0; n < c->N; n++) {
        const double *x = c->in + (long)n * c->C;
        double mu = 0, var = 0;
        for (int i = 0; i < c->C; i++) mu += x[i];
        mu /= c->C;
        for (int i = 0; i < c->C; i++) var += (x[i] - mu) * (x[i] - mu);
        var /= c->C; /* biased, as torch.nn.LayerNorm */
        double r = 1 / sqrt(var + 1e-5);
        for (int i = 0; i < c->C; i++) out[(long)n * c->C + i] = (x[i] - mu) * r * c->w[i] + c->b[i];
        if (c->mean) c->mean[n] = mu;
        if (c->rstd) c->rstd[n] = r;
    }
}

static void test_layernorm(void) {
    kstat k = {"layernorm", 0};
    int N = 4, C = 10;
    long nx = (long)N * C;
    float *in = frandn(nx, 2), *w = frandn(C, 1), *b = frandn(C, 1), *out = fvec(nx);
    for (long i = 0; i < nx; i++) in[i] += 3.0f; /* a mean well away from 0 */
    in[C] = 0.001f * in[C]; /* and one row with a tiny spread: eps matters */
    for (int i = 1; i < C; i++) in[C + i] = 0.5f + 0.001f * in[C + i];
    float *mean = fvec(N), *rstd = fvec(N), *R = frandn(nx, 1);
    ln_ctx c = {N, C, todouble(in, nx), todouble(w, C), todouble(b, C), dvec(N), dvec(N)};
    double *want = dvec(nx), *Rd = todouble(R, nx);
    ln_ref(&c, want);
    cl_layernorm_forward(out, mean, rstd, in, w, b, N, C);
    expect(&k, "forward", err_fd(out, want, nx), FWD_TOL);
    expect(&k, "forward mean", err_fd(mean, c.mean, N), FWD_TOL);
    expect(&k, "forward rstd", err_fd(rstd, c.rstd, N), FWD_TOL);
    free(c.mean); free(c.rstd);
    c.mean = c.rstd = NULL;
    gbuf din = gbuf_new(nx), dw = gbuf_new(C), db = gbuf_new(C);
    cl_layernorm_backward_input(din.g, R, in, w, mean, rstd, N, C);
    cl_layernorm_backward_weight(dw.g, db.g, R, in, mean, rstd, N, C);
    /* the tiny-spread row has rstd ~ 300: f32 cancellation costs more there */
    expect_grad(&k, "backward input", &din, c.in, ln_ref, &c, Rd, nx, GRAD_TOL);
    expect_grad(&k, "backward weight dw", &dw, c.w, ln_ref, &c, Rd, nx, GRAD_TOL);
    expect_grad(&k, "backward weight db", &db, c.b, ln_ref, &c, Rd, nx, GRAD_TOL);
    kdone(&k);
    free(in); free(w); free(b); free(out); free(mean); free(rstd); free(R);
    free(c.in); free(c.w); free(c.b); free(want); free(Rd);
    gbuf_free(&din); gbuf_free(&dw); gbuf_free(&db);
}

/* ---- attention ------------------------------------------------------------------- */

typedef struct { int B, T, C, NH; double *qkv; double *att; } att_ctx;
static void att_ref(void *vc, double *out) {
    att_ctx *c = vc;
    int T = c->T, C = c->C, hs = C / c->NH;
    double *p = dvec(T);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = c->qkv + ((long)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *kk = c->qkv + ((long)b * T + j) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int i = 0; i < hs; i++) s += q[i] * kk[i];
                    p[j] = s / sqrt((double)hs);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                for (int j = 0; j <= t; j++) p[j] /= sum;
                if (c->att)
                    for (int j = 0; j < T; j++)
                        c->att[(((long)b * c->NH + h) * T + t) * T + j] = j <= t ? p[j] : 0;
                for (int i = 0; i < hs; i++) {
                    double s = 0;
                    for (int j = 0; j <= t; j++) s += p[j] * c->qkv[((long)b * T + j) * 3 * C + 2 * C + h * hs + i];
                    out[((long)b * T + t) * C + h * hs + i] = s;
                }
            }
    free(p);
}

static void attention_case(kstat *k, int B, int T, int C, int NH) {
    char what[96];
    long nqkv = (long)B * T * 3 * C, nout = (long)B * T * C, natt = (long)B * NH * T * T;
    float *qkv = frandn(nqkv, 1), *out = frandn(nout, 1), *att = fvec(natt), *R = frandn(nout, 1);
    float *scratch = fvec(natt);
    ffill(att, natt, NAN);
    ffill(scratch, natt, NAN); /* must be overwritten, never read */
    att_ctx c = {B, T, C, NH, todouble(qkv, nqkv), dvec(natt)};
    double *want = dvec(nout), *Rd = todouble(R, nout);
    att_ref(&c, want);
    cl_attention_forward(out, att, qkv, B, T, C, NH);
    snprintf(what, sizeof what, "forward out B%d T%d C%d NH%d", B, T, C, NH);
    expect(k, what, err_fd(out, want, nout), FWD_TOL);
    snprintf(what, sizeof what, "forward att B%d T%d C%d NH%d", B, T, C, NH);
    expect(k, what, err_fd(att, c.att, natt), FWD_TOL);
    long nonzero_masked = 0;
    for (long r = 0; r < (long)B * NH * T; r++)
        for (int j = (int)(r % T) + 1; j < T; j++) nonzero_masked += att[r * T + j] != 0.0f;
    CHECK(nonzero_masked == 0, "attention: %ld entries above the diagonal are not 0", nonzero_masked);
    free(c.att);
    c.att = NULL;
    gbuf dqkv = gbuf_new(nqkv);
    cl_attention_backward(dqkv.g, scratch, R, qkv, att, B, T, C, NH);
    snprintf(what, sizeof what, "backward dqkv B%d T%d C%d NH%d", B, T, C, NH);
    expect_grad(k, what, &dqkv, c.qkv, att_ref, &c, Rd, nout, GRAD_TOL);
    free(qkv); free(out); free(att); free(R); free(scratch); free(c.qkv); free(want); free(Rd);
    gbuf_free(&dqkv);
}

static void test_attention(void) {
    kstat k = {"attention", 0};
    attention_case(&k, 2, 5, 8, 2);
    attention_case(&k, 1, 7, 12, 3);
    attention_case(&k, 2, 1, 4, 1);
    kdone(&k);
}

/* ---- element-wise ------------------------------------------------------------------ */

typedef struct { long n; double *in; int relu; } ew_ctx;
static void ew_ref(void *vc, double *out) {
    ew_ctx *c = vc;
    for (long i = 0; i < c->n; i++) {
        double x = c->in[i];
        out[i] = c->relu ? (x > 0 ? x : 0)
                         : 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    }
}

static void test_elementwise(void) {
    kstat k = {"gelu", 0};
    long n = 61;
    float *in = frandn(n, 2), *out = fvec(n), *R = frandn(n, 1);
    in[0] = 0.0f; in[1] = -6.0f; in[2] = 6.0f;
    ew_ctx c = {n, todouble(in, n), 0};
    double *want = dvec(n), *Rd = todouble(R, n);
    ew_ref(&c, want);
    cl_gelu_forward(out, in, n);
    expect(&k, "forward", err_fd(out, want, n), FWD_TOL);
    gbuf din = gbuf_new(n);
    cl_gelu_backward(din.g, R, in, n);
    expect_grad(&k, "backward", &din, c.in, ew_ref, &c, Rd, n, GRAD_TOL);
    kdone(&k);
    gbuf_free(&din);

    kstat kr = {"relu", 0};
    for (long i = 0; i < n; i++) in[i] += in[i] >= 0 ? 0.05f : -0.05f; /* away from the kink */
    free(c.in);
    c.in = todouble(in, n);
    c.relu = 1;
    ew_ref(&c, want);
    cl_relu_forward(out, in, n);
    expect(&kr, "forward", err_fd(out, want, n), 0);
    din = gbuf_new(n);
    cl_relu_backward(din.g, R, out, n);
    expect_grad(&kr, "backward", &din, c.in, ew_ref, &c, Rd, n, GRAD_TOL);
    kdone(&kr);
    gbuf_free(&din);

    kstat ks = {"residual", 0};
    float *a = frandn(n, 1), *b = frandn(n, 1), *dst = fcopy(a, n);
    cl_residual_forward(out, a, b, n);
    long bad = 0;
    for (long i = 0; i < n; i++) bad += out[i] != (float)((double)a[i] + (double)b[i]);
    cl_add_inplace(dst, b, n);
    bad += count_ne(dst, out, n);
    CHECK(bad == 0, "residual/add_inplace: %ld wrong", bad);
    expect(&ks, "forward and add_inplace (exact)", (double)bad, 0);
    kdone(&ks);
    free(in); free(out); free(R); free(c.in); free(want); free(Rd); free(a); free(b); free(dst);
}

/* ---- cross-entropy ------------------------------------------------------------------ */

typedef struct { int N, V; double *logits; const int32_t *tg; double *lse; } xent_ctx;
static void xent_ref(void *vc, double *losses) {
    xent_ctx *c = vc;
    for (int n = 0; n < c->N; n++) {
        const double *x = c->logits + (long)n * c->V;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < c->V; j++) mx = fmax(mx, x[j]);
        for (int j = 0; j < c->V; j++) s += exp(x[j] - mx);
        double l = mx + log(s);
        if (c->lse) c->lse[n] = l;
        losses[n] = c->tg[n] < 0 ? 0 : l - x[c->tg[n]];
    }
}

static void test_xent(void) {
    kstat k = {"xent", 0};
    enum { N = 6, V = 9 };
    const int32_t tg[N] = {3, -1, 0, 8, -1, 5};
    long nl = (long)N * V;
    float *logits = frandn(nl, 3), *losses = frandn(N, 1), *lse = fvec(N);
    for (int j = 0; j < V; j++) logits[5 * V + j] += 100.0f; /* exp would overflow in f32 without the max */
    xent_ctx c = {N, V, todouble(logits, nl), tg, dvec(N)};
    double *want = dvec(N);
    xent_ref(&c, want);
    cl_xent_forward(losses, lse, logits, tg, N, V);
    expect(&k, "forward losses", err_fd(losses, want, N), FWD_TOL);
    expect(&k, "forward lse", err_fd(lse, c.lse, N), FWD_TOL);
    CHECK(losses[1] == 0.0f && losses[4] == 0.0f, "xent: ignored rows have loss %g, %g", losses[1], losses[4]);
    free(c.lse);
    c.lse = NULL;

    /* d(dloss * sum losses) / dlogits: R is dloss in every row */
    const float dloss = 0.37f;
    double Rd[N];
    for (int n = 0; n < N; n++) Rd[n] = dloss;
    gbuf dl = gbuf_new(nl);
    cl_xent_backward(dl.g, logits, lse, tg, dloss, N, V);
    expect_grad(&k, "backward", &dl, c.logits, xent_ref, &c, Rd, N, GRAD_TOL);
    long touched = 0;
    for (int j = 0; j < V; j++) touched += dl.g[1 * V + j] != dl.g0[1 * V + j] || dl.g[4 * V + j] != dl.g0[4 * V + j];
    CHECK(touched == 0, "xent: ignored rows got %ld gradient entries", touched);

    /* in place: dlogits == logits is assigned, the same values as added to 0 */
    float *zero = fvec(nl), *inplace = fcopy(logits, nl);
    cl_xent_backward(zero, logits, lse, tg, dloss, N, V);
    cl_xent_backward(inplace, inplace, lse, tg, dloss, N, V);
    CHECK(count_ne(inplace, zero, nl) == 0, "xent: in-place gradient differs in %ld entries", count_ne(inplace, zero, nl));
    long nz = 0;
    for (int j = 0; j < V; j++) nz += inplace[1 * V + j] != 0.0f || inplace[4 * V + j] != 0.0f;
    CHECK(nz == 0, "xent: in place, ignored rows must become 0 (%ld are not)", nz);
    kdone(&k);
    free(logits); free(losses); free(lse); free(c.logits); free(want); free(zero); free(inplace);
    gbuf_free(&dl);
}

/* ---- conv2d ----------------------------------------------------------------------------- */

typedef struct { cl_conv2d_shape s; double *in, *w, *b; } conv_ctx;
static void conv_ref(void *vc, double *out) {
    conv_ctx *c = vc;
    const cl_conv2d_shape *s = &c->s;
    for (int n = 0; n < s->B; n++)
        for (int oc = 0; oc < s->OC; oc++)
            for (int oh = 0; oh < s->OH; oh++)
                for (int ow = 0; ow < s->OW; ow++) {
                    double acc = c->b ? c->b[oc] : 0;
                    for (int ic = 0; ic < s->IC; ic++)
                        for (int kh = 0; kh < s->KH; kh++)
                            for (int kw = 0; kw < s->KW; kw++) {
                                int ih = oh * s->stride - s->pad + kh, iw = ow * s->stride - s->pad + kw;
                                if (ih < 0 || ih >= s->H || iw < 0 || iw >= s->W) continue;
                                acc += c->in[(((long)n * s->IC + ic) * s->H + ih) * s->W + iw] *
                                       c->w[(((long)oc * s->IC + ic) * s->KH + kh) * s->KW + kw];
                            }
                    out[(((long)n * s->OC + oc) * s->OH + oh) * s->OW + ow] = acc;
                }
}

static void conv_case(kstat *k, int B, int IC, int H, int W, int OC, int KH, int KW, int stride, int pad,
                      int OH, int OW) {
    char tag[64], what[128];
    snprintf(tag, sizeof tag, "%dx%dx%dx%d k%dx%d s%d p%d", B, IC, H, W, KH, KW, stride, pad);
    conv_ctx c;
    CHECK(cl_conv2d_shape_init(&c.s, B, IC, H, W, OC, KH, KW, stride, pad) == 0, "conv %s: shape refused", tag);
    CHECK(c.s.OH == OH && c.s.OW == OW, "conv %s: OH %d OW %d, expected %d %d", tag, c.s.OH, c.s.OW, OH, OW);
    const cl_conv2d_shape *s = &c.s;
    long nin = (long)B * IC * H * W, nw = (long)OC * IC * KH * KW, nout = (long)B * OC * s->OH * s->OW;
    long ncol = cl_conv2d_col_floats(s);
    CHECK(ncol == (long)IC * KH * KW * OH * OW, "conv %s: col floats %ld", tag, ncol);
    float *in = frandn(nin, 1), *w = frandn(nw, 0.5f), *b = frandn(OC, 1), *out = frandn(nout, 1);
    float *col = fvec(ncol), *R = frandn(nout, 1);
    c.in = todouble(in, nin); c.w = todouble(w, nw); c.b = todouble(b, OC);
    double *want = dvec(nout), *Rd = todouble(R, nout);
    ffill(col, ncol, NAN); /* workspace must be fully written before it is read */
    conv_ref(&c, want);
    cl_conv2d_forward(out, col, in, w, b, s);
    snprintf(what, sizeof what, "forward %s", tag);
    expect(k, what, err_fd(out, want, nout), FWD_TOL);
    double *bsave = c.b;
    c.b = NULL;
    conv_ref(&c, want);
    ffill(col, ncol, NAN);
    cl_conv2d_forward(out, col, in, w, NULL, s);
    snprintf(what, sizeof what, "forward no bias %s", tag);
    expect(k, what, err_fd(out, want, nout), FWD_TOL);
    c.b = bsave;

    gbuf din = gbuf_new(nin), dw = gbuf_new(nw), db = gbuf_new(OC);
    ffill(col, ncol, NAN);
    cl_conv2d_backward_input(din.g, col, R, w, s);
    ffill(col, ncol, NAN);
    cl_conv2d_backward_weight(dw.g, db.g, col, R, in, s);
    snprintf(what, sizeof what, "backward input %s", tag);
    expect_grad(k, what, &din, c.in, conv_ref, &c, Rd, nout, GRAD_TOL);
    snprintf(what, sizeof what, "backward dw %s", tag);
    expect_grad(k, what, &dw, c.w, conv_ref, &c, Rd, nout, GRAD_TOL);
    snprintf(what, sizeof what, "backward db %s", tag);
    expect_grad(k, what, &db, c.b, conv_ref, &c, Rd, nout, GRAD_TOL);
    float *dw2 = fcopy(dw.g0, nw);
    cl_conv2d_backward_weight(dw2, NULL, col, R, in, s);
    CHECK(count_ne(dw2, dw.g, nw) == 0, "conv %s: dw with db NULL differs", tag);
    free(in); free(w); free(b); free(out); free(col); free(R); free(c.in); free(c.w); free(c.b);
    free(want); free(Rd); free(dw2);
    gbuf_free(&din); gbuf_free(&dw); gbuf_free(&db);
}

static void test_conv2d(void) {
    kstat k = {"conv2d", 0};
    cl_conv2d_shape s;
    CHECK(cl_conv2d_shape_init(&s, 1, 1, 2, 2, 1, 5, 5, 1, 1) == -1, "conv: kernel larger than padded input accepted");
    CHECK(cl_conv2d_shape_init(&s, 1, 1, 4, 4, 1, 3, 3, 0, 0) == -1, "conv: stride 0 accepted");
    CHECK(cl_conv2d_shape_init(&s, 1, 1, 4, 4, 1, 3, 3, 1, -1) == -1, "conv: negative padding accepted");
    CHECK(cl_conv2d_shape_init(&s, 0, 1, 4, 4, 1, 3, 3, 1, 0) == -1, "conv: batch 0 accepted");
    conv_case(&k, 2, 3, 7, 6, 4, 3, 3, 2, 1, 4, 3); /* stride 2, pad 1, non-square, a column left over */
    conv_case(&k, 1, 2, 5, 8, 3, 2, 3, 1, 0, 4, 6); /* non-square kernel */
    conv_case(&k, 2, 2, 4, 4, 3, 1, 1, 1, 0, 4, 4); /* 1x1 */
    conv_case(&k, 1, 1, 3, 3, 2, 3, 3, 1, 2, 5, 5); /* padding wider than half the kernel */
    kdone(&k);
}

/* ---- maxpool -------------------------------------------------------------------------------- */

typedef struct { int B, C, H, W, K, S; double *in; int32_t *idx; } pool_ctx;
static void pool_ref(void *vc, double *out) {
    pool_ctx *c = vc;
    int OH = (c->H - c->K) / c->S + 1, OW = (c->W - c->K) / c->S + 1;
    for (long bc = 0; bc < (long)c->B * c->C; bc++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                double best = -INFINITY;
                int at = -1;
                for (int i = 0; i < c->K * c->K; i++) {
                    int h = oh * c->S + i / c->K, w = ow * c->S + i % c->K;
                    double x = c->in[bc * c->H * c->W + h * c->W + w];
                    if (at < 0 || x > best) { best = x; at = h * c->W + w; }
                }
                out[(bc * OH + oh) * OW + ow] = best;
                if (c->idx) c->idx[(bc * OH + oh) * OW + ow] = at;
            }
}

static void pool_case(kstat *k, int B, int C, int H, int W, int K, int S) {
    char what[96];
    int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
    long nin = (long)B * C * H * W, nout = (long)B * C * OH * OW;
    /* distinct values 0.01 apart, shuffled: FD steps never cross a tie */
    float *in = fvec(nin);
    for (long i = 0; i < nin; i++) in[i] = 0.01f * (float)(i - nin / 2);
    for (long i = nin - 1; i > 0; i--) {
        long j = (long)(cl_rng_u64(&g_rng) % (uint64_t)(i + 1));
        float t = in[i]; in[i] = in[j]; in[j] = t;
    }
    float *out = fvec(nout), *R = frandn(nout, 1);
    int32_t *idx = xcalloc(nout, sizeof(int32_t)), *widx = xcalloc(nout, sizeof(int32_t));
    pool_ctx c = {B, C, H, W, K, S, todouble(in, nin), widx};
    double *want = dvec(nout), *Rd = todouble(R, nout);
    pool_ref(&c, want);
    cl_maxpool_forward(out, idx, in, B, C, H, W, K, S);
    snprintf(what, sizeof what, "forward %dx%d K%d S%d", H, W, K, S);
    expect(k, what, err_fd(out, want, nout), 0);
    CHECK(memcmp(idx, widx, (size_t)nout * sizeof(int32_t)) == 0, "maxpool: argmax offsets differ");
    c.idx = NULL;
    gbuf din = gbuf_new(nin);
    cl_maxpool_backward(din.g, R, idx, B, C, H, W, K, S);
    snprintf(what, sizeof what, "backward %dx%d K%d S%d", H, W, K, S);
    expect_grad(k, what, &din, c.in, pool_ref, &c, Rd, nout, GRAD_TOL);
    free(in); free(out); free(R); free(idx); free(widx); free(c.in); free(want); free(Rd);
    gbuf_free(&din);
}

static void test_maxpool(void) {
    kstat k = {"maxpool", 0};
    pool_case(&k, 2, 2, 6, 7, 3, 2); /* overlapping windows accumulate in backward */
    pool_case(&k, 1, 3, 4, 6, 2, 2);
    /* ties: the first maximum in row-major window order wins, and gets the gradient */
    enum { H = 4, W = 4 };
    const float in[H * W] = {
        1, 2, 5, 5,
        5, 0, 1, 5,
        3, 3, 7, 7,
        3, 3, 7, 7,
    };
    float out[4], din[H * W] = {0};
    int32_t idx[4];
    const float dout[4] = {1, 2, 3, 4};
    cl_maxpool_forward(out, idx, in, 1, 1, H, W, 2, 2);
    CHECK(idx[0] == 4 && idx[1] == 2 && idx[2] == 8 && idx[3] == 10,
          "maxpool ties: idx %d %d %d %d, expected 4 2 8 10", idx[0], idx[1], idx[2], idx[3]);
    CHECK(out[0] == 5 && out[1] == 5 && out[2] == 3 && out[3] == 7, "maxpool ties: wrong maxima");
    cl_maxpool_backward(din, dout, idx, 1, 1, H, W, 2, 2);
    CHECK(din[4] == 1 && din[2] == 2 && din[8] == 3 && din[10] == 4 && din[3] == 0 && din[7] == 0 &&
              din[11] == 0 && din[9] == 0,
          "maxpool ties: gradient went to a later maximum");
    kdone(&k);
}

/* ---- AdamW ------------------------------------------------------------------------------------ */

static void test_adamw(void) {
    kstat k = {"adamw", 0};
    enum { n = 37, steps = 6 };
    const float lr = 0.05f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    for (int decay = 0; decay < 2; decay++) {
        const float wd = decay ? 0.1f : 0.0f;
        float *p = frandn(n, 0.5f), *m = fvec(n), *v = fvec(n);
        float *p0 = fcopy(p, n);
        double *pd = todouble(p, n), *md = dvec(n), *vd = dvec(n);
        float *g = fvec(n);
        for (int t = 1; t <= steps; t++) {
            for (int i = 0; i < n; i++) g[i] = i % 9 == 0 ? 0.0f : cl_rng_normal(&g_rng) * (i % 2 ? 1.0f : 1e-3f);
            cl_adamw_update(p, g, m, v, n, lr, b1, b2, eps, wd, t, 1.0f);
            /* the header's formula, in double: decay on the pre-step p */
            for (int i = 0; i < n; i++) {
                md[i] = (double)b1 * md[i] + (1 - (double)b1) * g[i];
                vd[i] = (double)b2 * vd[i] + (1 - (double)b2) * (double)g[i] * g[i];
                double mhat = md[i] / (1 - pow(b1, t)), vhat = vd[i] / (1 - pow(b2, t));
                pd[i] -= (double)lr * (mhat / (sqrt(vhat) + eps) + (double)wd * pd[i]);
            }
        }
        double *dp = dvec(n), *dpd = dvec(n);
        for (int i = 0; i < n; i++) {
            dp[i] = (double)p[i] - p0[i];
            dpd[i] = pd[i] - p0[i];
        }
        expect(&k, decay ? "p - p0, decay 0.1" : "p - p0, no decay", err_dd(dp, dpd, n), FWD_TOL);
        expect(&k, decay ? "m, decay 0.1" : "m, no decay", err_fd(m, md, n), FWD_TOL);
        expect(&k, decay ? "v, decay 0.1" : "v, no decay", err_fd(v, vd, n), FWD_TOL);
        free(p); free(m); free(v); free(p0); free(pd); free(md); free(vd); free(g); free(dp); free(dpd);
    }
    /* torch's order of f32 operations, pinned bit for bit on one step */
    {
        const float wd = 0.1f;
        const int t = 3, nb = 4096;
        float *p = fvec(nb), *g = fvec(nb), *m = fvec(nb), *v = fvec(nb);
        for (int i = 0; i < nb; i++) {
            p[i] = cl_rng_normal(&g_rng);
            g[i] = cl_rng_normal(&g_rng);
            m[i] = 0.1f * cl_rng_normal(&g_rng);
            v[i] = 0.01f * cl_rng_uniform(&g_rng);
        }
        float *pe = fcopy(p, nb), *me = fcopy(m, nb), *ve = fcopy(v, nb);
        cl_adamw_update(p, g, m, v, nb, lr, b1, b2, eps, wd, t, 1.0f);
        float decay = (float)(1.0 - (double)lr * wd), step = (float)(lr / (1.0 - pow(b1, t)));
        float bc2s = (float)sqrt(1.0 - pow(b2, t)), o1 = (float)(1.0 - b1), o2 = (float)(1.0 - b2);
        for (int i = 0; i < nb; i++) {
            volatile float x = pe[i] * decay; /* volatile: one rounding per operation */
            volatile float mb = me[i] * b1, mg = o1 * g[i];
            me[i] = mb + mg;
            volatile float vb = ve[i] * b2, gg = o2 * g[i], gg2 = gg * g[i];
            ve[i] = vb + gg2;
            volatile float sq = sqrtf(ve[i]) / bc2s;
            volatile float den = sq + eps;
            volatile float num = step * me[i];
            pe[i] = x - num / den;
        }
        long bad = count_ne(p, pe, nb) + count_ne(m, me, nb) + count_ne(v, ve, nb);
        CHECK(bad == 0, "adamw: %ld values differ from torch's operation order", bad);
        free(p); free(g); free(m); free(v); free(pe); free(me); free(ve);
    }
    kdone(&k);

    kstat ks = {"sumsq", 0};
    float *x = frandn(1001, 3);
    double want = 0;
    for (int i = 0; i < 1001; i++) want += (double)x[i] * x[i];
    expect(&ks, "sumsq", fabs(cl_sumsq(x, 1001) - want) / want, 1e-12);
    float *y = fcopy(x, 1001);
    cl_scale(y, 0.3f, 1001);
    long bad = 0;
    for (int i = 0; i < 1001; i++) bad += y[i] != x[i] * 0.3f;
    CHECK(bad == 0, "scale: %ld wrong", bad);
    kdone(&ks);
    free(x); free(y);
}

/* ---- vector paths against the plain paths ------------------------------------------------------ */

/* Runs kernel call `run` with the plain path forced, then with the vector path, on copies of the
 * same inputs. Lengths that are not multiples of 8 and that cross a parallel block (16384) are
 * what the cases below are chosen for. Thread counts: the same call on 1 and 2 threads must give
 * the same bits (kernels/simd.h's promise). */
#ifdef CL_SIMD_X86
CL_AVX2 static void exp_array(float *y, const float *x, int n) {
    for (int i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, cl_exp8(_mm256_loadu_ps(x + i)));
}
#endif

static double err_ff(const float *a, const float *b, long n) {
    double *bd = todouble(b, n);
    double e = err_fd(a, bd, n);
    free(bd);
    return e;
}

static void test_simd_exp(kstat *k) {
#ifdef CL_SIMD_X86
    if (cl_simd() != CL_SIMD_AVX2) return;
    enum { n = 4096 };
    float *x = fvec(n), *y = fvec(n);
    for (int i = 0; i < n; i++) x[i] = -87.0f + 175.5f * (float)i / (n - 1);
    exp_array(y, x, n);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double want = exp((double)x[i]);
        double ulp = nextafterf((float)want, INFINITY) - (float)want;
        double e = fabs(y[i] - want) / ulp;
        if (e > worst) worst = e;
    }
    expect(k, "cl_exp8 on [-87, 88.5], in ulp", worst, 2.0);
    const float edge[8] = {-INFINITY, -100.0f, 0.0f, 1e-30f, 89.0f, INFINITY, NAN, -0.0f};
    float out[8];
    exp_array(out, edge, 8);
    CHECK(out[0] == 0 && out[1] == 0 && out[2] == 1 && out[3] == 1 && isinf(out[4]) && isinf(out[5]) && isnan(out[6]) &&
              out[7] == 1,
          "cl_exp8 edges: %g %g %g %g %g %g %g %g", out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]);
    free(x); free(y);
#else
    (void)k;
#endif
}

/* the same call on 1 and on 2 threads: bitwise equal */
#define SAME_ON_THREADS(what, out, n, call)                                                       \
    do {                                                                                          \
        cl_set_threads(1);                                                                        \
        call;                                                                                     \
        float *one_ = fcopy(out, n);                                                              \
        cl_set_threads(2);                                                                        \
        call;                                                                                     \
        CHECK(count_ne(out, one_, n) == 0, "%s: 1 and 2 threads differ in %ld values", what, count_ne(out, one_, n)); \
        free(one_);                                                                               \
    } while (0)

static void test_simd_elementwise(kstat *k) {
    const long lens[] = {1, 7, 8, 9, 31, 1000, 16384 + 13, 3 * 16384 + 5};
    char what[96];
    for (int li = 0; li < (int)(sizeof lens / sizeof lens[0]); li++) {
        long n = lens[li];
        float *x = frandn(n, 2.5f), *d = frandn(n, 1.0f), *g0 = frandn(n, 1.0f);
        float *yp = fvec(n), *yv = fvec(n), *gp = fcopy(g0, n), *gv = fcopy(g0, n);
        cl_kernels_force_plain(1);
        cl_gelu_forward(yp, x, n);
        cl_gelu_backward(gp, d, x, n);
        cl_kernels_force_plain(0);
        cl_gelu_forward(yv, x, n);
        cl_gelu_backward(gv, d, x, n);
        snprintf(what, sizeof what, "gelu forward, n %ld", n);
        expect(k, what, err_ff(yv, yp, n), 1e-6);
        snprintf(what, sizeof what, "gelu backward (adds), n %ld", n);
        expect(k, what, err_ff(gv, gp, n), 1e-6);
        float *sp = fcopy(d, n), *sv = fcopy(d, n);
        cl_kernels_force_plain(1);
        cl_gelu_backward_set(sp, sp, x, n);
        cl_kernels_force_plain(0);
        cl_gelu_backward_set(sv, sv, x, n);
        snprintf(what, sizeof what, "gelu backward set, n %ld", n);
        expect(k, what, err_ff(sv, sp, n), 1e-6);
        for (long i = 0; i < n; i++) gp[i] -= g0[i]; /* what the adding backward added */
        snprintf(what, sizeof what, "gelu backward set = added part, n %ld", n);
        expect(k, what, err_ff(sp, gp, n), 1e-7);
        SAME_ON_THREADS("gelu forward", yv, n, cl_gelu_forward(yv, x, n));
        free(x); free(d); free(g0); free(yp); free(yv); free(gp); free(gv); free(sp); free(sv);
    }
    /* bias + GELU = a bias added, then GELU; rows of C = 13 and 768 */
    const int shapes[][2] = {{5, 13}, {3, 768}, {40, 1000}};
    for (int si = 0; si < 3; si++) {
        int N = shapes[si][0], C = shapes[si][1];
        long n = (long)N * C;
        float *x = frandn(n, 2.0f), *b = frandn(C, 1.0f);
        float *pre = fcopy(x, n), *out = fvec(n), *want_pre = fvec(n), *want = fvec(n);
        for (long i = 0; i < n; i++) want_pre[i] = x[i] + b[i % C];
        cl_kernels_force_plain(1);
        cl_gelu_forward(want, want_pre, n);
        cl_kernels_force_plain(0);
        cl_bias_gelu_forward(out, pre, b, N, C);
        snprintf(what, sizeof what, "bias+gelu pre-activation, %dx%d", N, C);
        expect(k, what, (double)count_ne(pre, want_pre, n), 0);
        snprintf(what, sizeof what, "bias+gelu vs plain gelu, %dx%d", N, C);
        expect(k, what, err_ff(out, want, n), 1e-6);
        free(x); free(b); free(pre); free(out); free(want_pre); free(want);
    }
}

static void test_simd_xent(kstat *k) {
    const int Vs[] = {1, 7, 9, 64, 1001, 50304};
    char what[96];
    for (int vi = 0; vi < 6; vi++) {
        int V = Vs[vi], N = V > 1000 ? 5 : 11;
        long n = (long)N * V;
        float *x = frandn(n, 3.0f);
        int32_t *tg = xcalloc(N, sizeof *tg);
        for (int i = 0; i < N; i++) tg[i] = i == 2 ? -1 : (int32_t)((i * 7919) % V);
        float *lp = fvec(N), *lv = fvec(N), *ep = fvec(N), *ev = fvec(N);
        float *g0 = frandn(n, 0.1f), *gp = fcopy(g0, n), *gv = fcopy(g0, n), *ip = fcopy(x, n), *iv = fcopy(x, n);
        cl_kernels_force_plain(1);
        cl_xent_forward(lp, ep, x, tg, N, V);
        cl_xent_backward(gp, x, ep, tg, 0.25f, N, V);
        cl_xent_backward(ip, ip, ep, tg, 0.25f, N, V);
        cl_kernels_force_plain(0);
        cl_xent_forward(lv, ev, x, tg, N, V);
        cl_xent_backward(gv, x, ev, tg, 0.25f, N, V);
        cl_xent_backward(iv, iv, ev, tg, 0.25f, N, V);
        snprintf(what, sizeof what, "xent losses, V %d", V);
        expect(k, what, err_ff(lv, lp, N), 1e-6);
        snprintf(what, sizeof what, "xent lse, V %d", V);
        expect(k, what, err_ff(ev, ep, N), 1e-6);
        snprintf(what, sizeof what, "xent backward (adds), V %d", V);
        expect(k, what, err_ff(gv, gp, n), 1e-5);
        snprintf(what, sizeof what, "xent backward in place, V %d", V);
        expect(k, what, err_ff(iv, ip, n), 1e-5);
        SAME_ON_THREADS("xent forward", lv, N, cl_xent_forward(lv, ev, x, tg, N, V));
        free(x); free(tg); free(lp); free(lv); free(ep); free(ev); free(g0); free(gp); free(gv); free(ip); free(iv);
    }
}

/* The vocabulary-parallel pieces against the whole-row kernels: logits
 * [N, V] cut into slices of Vl columns (the last ones padded with garbage
 * that must never be read), max and sums combined here as the caller
 * combines them after its all-reduces (MAX, then SUM in slice order). One
 * slice without padding is bitwise cl_xent_forward/backward (the same row
 * code); more slices sum in another order: losses within 1e-6 relative,
 * gradients within 1e-6 absolute. Both paths, plain and vector. */
static void xent_vp_case(kstat *k, const float *logits, const int32_t *tg, int N, int V, int ns, int Vl) {
    const float dloss = 0.37f;
    long nl = (long)N * V, ns_l = (long)N * Vl;
    float *want_loss = fvec(N), *want_lse = fvec(N), *want_g = fvec(nl), *g0 = frandn(nl, 1), *want_add = fcopy(g0, nl);
    cl_xent_forward(want_loss, want_lse, logits, tg, N, V);
    cl_xent_backward(want_g, logits, want_lse, tg, dloss, N, V); /* adds to 0 */
    cl_xent_backward(want_add, logits, want_lse, tg, dloss, N, V);
    float *x = fvec(ns * ns_l), *mx = fvec(N), *m1 = fvec(N), *lse = fvec(N), *loss = fvec(N);
    double *sum = dvec(N), *tl = dvec(N), *s1 = dvec(N), *t1 = dvec(N);
    const float junk[] = {1e30f, NAN, INFINITY, -1e30f};
    for (int s = 0; s < ns; s++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < Vl; j++) {
                int v = s * Vl + j;
                x[s * ns_l + (long)i * Vl + j] = v < V ? logits[(long)i * V + v] : junk[(i + j) % 4];
            }
#define VALID(s) (V - (s) * Vl < 0 ? 0 : V - (s) * Vl > Vl ? Vl : V - (s) * Vl)
    /* max, then an all-reduce MAX in slice order */
    for (int s = 0; s < ns; s++) {
        cl_xent_vp_max(s ? m1 : mx, x + s * ns_l, N, Vl, VALID(s));
        for (int i = 0; s && i < N; i++) mx[i] = m1[i] > mx[i] || isnan(m1[i]) ? m1[i] : mx[i];
    }
    for (int s = 0; s < ns; s++) {
        cl_xent_vp_sum(s ? s1 : sum, s ? t1 : tl, x + s * ns_l, mx, tg, s * Vl, N, Vl, VALID(s));
        for (int i = 0; s && i < N; i++) sum[i] += s1[i], tl[i] += t1[i];
    }
    for (int i = 0; i < N; i++) {
        double l = (double)mx[i] + log(sum[i]);
        lse[i] = (float)l;
        loss[i] = tg[i] < 0 ? 0.0f : (float)(l - tl[i]);
    }
    char what[128];
    int bitwise = ns == 1 && Vl == V;
    snprintf(what, sizeof what, "xent vp losses, %d slices of %d", ns, Vl);
    if (bitwise) expect(k, what, (double)count_ne(loss, want_loss, N) + (double)count_ne(lse, want_lse, N), 0);
    else expect(k, what, err_ff(loss, want_loss, N), 1e-6);
    /* backward, adding to a prefill (padding untouched) and in place (padding 0) */
    double gerr = 0;
    long moved = 0, nonzero = 0, diff = 0;
    for (int s = 0; s < ns; s++) {
        int valid = VALID(s);
        float *pre = frandn(ns_l, 1); /* the prefill: g0's columns, random padding */
        for (int i = 0; i < N; i++)
            for (int j = 0; j < valid; j++) pre[(long)i * Vl + j] = g0[(long)i * V + s * Vl + j];
        float *g = fcopy(pre, ns_l), *ip = fcopy(x + s * ns_l, ns_l);
        cl_xent_vp_backward(g, x + s * ns_l, lse, tg, s * Vl, dloss, N, Vl, valid);
        cl_xent_vp_backward(ip, ip, lse, tg, s * Vl, dloss, N, Vl, valid);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < Vl; j++) {
                long a = (long)i * Vl + j;
                if (j >= valid) {
                    moved += g[a] != pre[a];
                    nonzero += ip[a] != 0.0f;
                    continue;
                }
                long b = (long)i * V + s * Vl + j;
                gerr = fmax(gerr, fmax(fabs((double)ip[a] - want_g[b]), fabs((double)g[a] - want_add[b])));
                diff += ip[a] != want_g[b] || g[a] != want_add[b];
            }
        free(pre); free(g); free(ip);
    }
    snprintf(what, sizeof what, "xent vp backward, %d slices of %d", ns, Vl);
    expect(k, what, isnan(gerr) ? INFINITY : gerr, bitwise ? 0 : 1e-6);
    CHECK(moved == 0 && nonzero == 0, "%s: padding columns: %ld changed when adding, %ld not 0 in place", what, moved,
          nonzero);
    if (bitwise) CHECK(diff == 0, "%s: %ld gradients differ from cl_xent_backward's bits", what, diff);
    /* rows on one thread each: the pieces do not depend on the thread count */
    int last = ns - 1, valid = VALID(last);
    cl_set_threads(1);
    cl_xent_vp_sum(s1, t1, x + last * ns_l, mx, tg, last * Vl, N, Vl, valid);
    cl_set_threads(2);
    cl_xent_vp_sum(sum, tl, x + last * ns_l, mx, tg, last * Vl, N, Vl, valid);
    CHECK(!memcmp(s1, sum, (size_t)N * sizeof *sum) && !memcmp(t1, tl, (size_t)N * sizeof *tl),
          "%s: the sums differ on 1 and 2 threads", what);
#undef VALID
    free(want_loss); free(want_lse); free(want_g); free(g0); free(want_add); free(x); free(mx); free(m1); free(lse); free(loss);
    free(sum); free(tl); free(s1); free(t1);
}

static void test_xent_vp(kstat *k) {
    enum { N = 37, V = 101 };
    float *logits = frandn((long)N * V, 3.0f);
    int32_t tg[N];
    int later = 0;
    for (int i = 0; i < N; i++) {
        tg[i] = i % 5 == 1 ? -1 : (int32_t)((i * 7919 + 13) % V);
        later += tg[i] >= 60;
    }
    tg[3] = V - 1; /* in the last slice, next to its padding */
    CHECK(later > 2, "xent vp: only %d rows have targets beyond the first slices", later);
    for (int j = 0; j < V; j++) logits[4 * V + j] += 100.0f; /* exp would overflow in f32 without the max */
    /* slices, each with its row length Vl: none, then padded ones; 4 x 34
     * leaves the last slice with no valid column at all */
    const int cases[][2] = {{1, V}, {1, 128}, {2, 56}, {3, 40}, {4, 32}, {4, 34}};
    for (int plain = 1; plain >= 0; plain--) {
        cl_kernels_force_plain(plain);
        for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++)
            xent_vp_case(k, logits, tg, N, V, cases[c][0], cases[c][1]);
    }
    cl_kernels_force_plain(0);
    free(logits);
}

static void test_simd_attention(kstat *k) {
    const int cases[][4] = {{1, 1, 8, 1}, {2, 7, 16, 2}, {1, 65, 16, 4}, {2, 130, 24, 3}};
    char what[96];
    for (int ci = 0; ci < 4; ci++) {
        int B = cases[ci][0], T = cases[ci][1], C = cases[ci][2], NH = cases[ci][3];
        long nq = (long)B * T * 3 * C, no = (long)B * T * C, na = (long)B * NH * T * T;
        float *qkv = frandn(nq, 1.0f), *dout = frandn(no, 1.0f);
        float *op = fvec(no), *ov = fvec(no), *ap = fvec(na), *av = fvec(na), *sc = fvec(na);
        float *dp = fvec(nq), *dv = fvec(nq);
        cl_kernels_force_plain(1);
        cl_attention_forward(op, ap, qkv, B, T, C, NH);
        cl_attention_backward(dp, sc, dout, qkv, ap, B, T, C, NH);
        cl_kernels_force_plain(0);
        cl_attention_forward(ov, av, qkv, B, T, C, NH);
        cl_attention_backward(dv, sc, dout, qkv, av, B, T, C, NH);
        snprintf(what, sizeof what, "attention out, B%d T%d C%d NH%d", B, T, C, NH);
        expect(k, what, err_ff(ov, op, no), 1e-6);
        snprintf(what, sizeof what, "attention att, T%d", T);
        expect(k, what, err_ff(av, ap, na), 1e-6);
        snprintf(what, sizeof what, "attention dqkv, T%d", T);
        expect(k, what, err_ff(dv, dp, nq), 1e-5);
        SAME_ON_THREADS("attention forward", ov, no, cl_attention_forward(ov, av, qkv, B, T, C, NH));
        free(qkv); free(dout); free(op); free(ov); free(ap); free(av); free(sc); free(dp); free(dv);
    }
}

static void test_simd_adamw(kstat *k) {
    const long lens[] = {1, 7, 9, 1000, 16384 + 3};
    char what[96];
    for (int li = 0; li < 5; li++) {
        long n = lens[li];
        float *p = frandn(n, 1.0f), *g = frandn(n, 1.0f), *m = frandn(n, 0.1f), *v = fvec(n);
        for (long i = 0; i < n; i++) v[i] = 0.01f * cl_rng_uniform(&g_rng);
        float *p2 = fcopy(p, n), *m2 = fcopy(m, n), *v2 = fcopy(v, n);
        cl_kernels_force_plain(1);
        cl_adamw_update(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, 1.0f);
        double sp = cl_sumsq(g, n);
        cl_kernels_force_plain(0);
        cl_adamw_update(p2, g, m2, v2, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, 1.0f);
        double sv = cl_sumsq(g, n);
        snprintf(what, sizeof what, "adamw p, m, v differing bits, n %ld", n);
        expect(k, what, (double)(count_ne(p, p2, n) + count_ne(m, m2, n) + count_ne(v, v2, n)), 0);
        snprintf(what, sizeof what, "sumsq, n %ld", n);
        expect(k, what, fabs(sv - sp) / sp, 1e-12);
        /* the fused clip coefficient = cl_scale first, then the update: same bits, both paths */
        for (int plain = 0; plain < 2; plain++) {
            float *pa = fcopy(p, n), *ma = fcopy(m, n), *va = fcopy(v, n), *ga = fcopy(g, n);
            float *pb = fcopy(p, n), *mb = fcopy(m, n), *vb = fcopy(v, n);
            cl_kernels_force_plain(plain);
            cl_scale(ga, 0.37f, n);
            cl_adamw_update(pa, ga, ma, va, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 6, 1.0f);
            cl_adamw_update(pb, g, mb, vb, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 6, 0.37f);
            snprintf(what, sizeof what, "adamw gscale = scale first, %s, n %ld", plain ? "plain" : "vector", n);
            expect(k, what, (double)(count_ne(pa, pb, n) + count_ne(ma, mb, n) + count_ne(va, vb, n)), 0);
            free(pa); free(ma); free(va); free(ga); free(pb); free(mb); free(vb);
        }
        cl_kernels_force_plain(0);
        cl_set_threads(1);
        double s1 = cl_sumsq(g, n);
        cl_set_threads(2);
        double s2 = cl_sumsq(g, n);
        CHECK(s1 == s2, "sumsq: 1 and 2 threads differ (%.17g vs %.17g)", s1, s2);
        free(p); free(g); free(m); free(v); free(p2); free(m2); free(v2);
    }
}

/* the fused residual + layernorm equals the two kernels one after the other, bit for bit */
static void test_residual_layernorm(kstat *k) {
    enum { N = 37, C = 77 };
    float *a = frandn(N * C, 1.0f), *r = frandn(N * C, 1.0f), *w = frandn(C, 1.0f), *b = frandn(C, 1.0f);
    float *res = fcopy(a, N * C), *out = fvec(N * C), *mean = fvec(N), *rstd = fvec(N);
    float *res2 = fcopy(a, N * C), *out2 = fvec(N * C), *mean2 = fvec(N), *rstd2 = fvec(N);
    cl_add_inplace(res, r, N * C);
    cl_layernorm_forward(out, mean, rstd, res, w, b, N, C);
    cl_residual_layernorm_forward(res2, out2, mean2, rstd2, res2, r, w, b, N, C);
    long bad = count_ne(res, res2, N * C) + count_ne(out, out2, N * C) + count_ne(mean, mean2, N) + count_ne(rstd, rstd2, N);
    expect(k, "residual+layernorm differing bits", (double)bad, 0);
    free(a); free(r); free(w); free(b); free(res); free(out); free(mean); free(rstd);
    free(res2); free(out2); free(mean2); free(rstd2);
}

/* The AVX-512 bodies do the AVX2 bodies' operations in the same order: the
 * same bits, element for element (GPT's training bits do not change with
 * the width). Lengths leave 16-, 8- and 1-wide tails and cross blocks; bias
 * rows of C = 13 (tails inside every row) and 3072. */
static void test_simd_avx512(kstat *k) {
    cl_kernels_max_isa(2);
    int has512 = !strcmp(cl_kernels_isa(), "avx512");
    cl_kernels_max_isa(3);
    if (!has512) {
        cl_test_skip("test_kernels: AVX-512 paths (no AVX-512 on this CPU)", 0);
        return;
    }
    const long lens[] = {5, 23, 1000, 16384 + 13, 3 * 16384 + 9};
    char what[96];
    for (int li = 0; li < 5; li++) {
        long n = lens[li];
        float *x = frandn(n, 4.0f), *d = frandn(n, 1.0f), *g0 = frandn(n, 1.0f);
        float *y2 = fvec(n), *y5 = fvec(n), *b2 = fcopy(g0, n), *b5 = fcopy(g0, n), *s2 = fcopy(d, n), *s5 = fcopy(d, n);
        float *p2 = frandn(n, 1.0f), *m2 = frandn(n, 0.01f), *v2 = frandn(n, 0.001f);
        for (long i = 0; i < n; i++) v2[i] = fabsf(v2[i]);
        float *p5 = fcopy(p2, n), *m5 = fcopy(m2, n), *v5 = fcopy(v2, n);
        cl_kernels_max_isa(1);
        cl_gelu_forward(y2, x, n);
        cl_gelu_backward(b2, d, x, n);
        cl_gelu_backward_set(s2, s2, x, n);
        cl_adamw_update(p2, d, m2, v2, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, 0.5f);
        cl_kernels_max_isa(2);
        cl_gelu_forward(y5, x, n);
        cl_gelu_backward(b5, d, x, n);
        cl_gelu_backward_set(s5, s5, x, n);
        cl_adamw_update(p5, d, m5, v5, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, 0.5f);
        cl_kernels_max_isa(3);
        snprintf(what, sizeof what, "avx512 = avx2 bits: gelu forward, backward, set, n %ld", n);
        expect(k, what, (double)(count_ne(y2, y5, n) + count_ne(b2, b5, n) + count_ne(s2, s5, n)), 0);
        snprintf(what, sizeof what, "avx512 = avx2 bits: adamw p, m, v, n %ld", n);
        expect(k, what, (double)(count_ne(p2, p5, n) + count_ne(m2, m5, n) + count_ne(v2, v5, n)), 0);
        free(x); free(d); free(g0); free(y2); free(y5); free(b2); free(b5); free(s2); free(s5);
        free(p2); free(m2); free(v2); free(p5); free(m5); free(v5);
    }
    const int shapes[][2] = {{7, 13}, {9, 3072}};
    for (int si = 0; si < 2; si++) {
        int N = shapes[si][0], C = shapes[si][1];
        long n = (long)N * C;
        float *x = frandn(n, 3.0f), *b = frandn(C, 1.0f), *pre2 = fcopy(x, n), *pre5 = fcopy(x, n);
        float *o2 = fvec(n), *o5 = fvec(n);
        cl_kernels_max_isa(1);
        cl_bias_gelu_forward(o2, pre2, b, N, C);
        cl_kernels_max_isa(2);
        cl_bias_gelu_forward(o5, pre5, b, N, C);
        cl_kernels_max_isa(3);
        snprintf(what, sizeof what, "avx512 = avx2 bits: bias+gelu, %dx%d", N, C);
        expect(k, what, (double)(count_ne(o2, o5, n) + count_ne(pre2, pre5, n)), 0);
        free(x); free(b); free(pre2); free(pre5); free(o2); free(o5);
    }
}

static void test_simd(void) {
    kstat k = {"simd", 0};
    printf("  vector path: %s\n", cl_kernels_isa());
    test_simd_exp(&k);
    test_simd_elementwise(&k);
    test_simd_xent(&k);
    test_xent_vp(&k);
    test_simd_attention(&k);
    test_simd_adamw(&k);
    test_simd_avx512(&k);
    test_residual_layernorm(&k);
    cl_set_threads(1);
    kdone(&k);
}

int main(void) {
    cl_rng_seed(&g_rng, 20240601);
    double t0 = cl_now();
    test_gemm();
    test_linear();
    test_embedding();
    test_layernorm();
    test_attention();
    test_elementwise();
    test_xent();
    test_conv2d();
    test_maxpool();
    test_adamw();
    test_simd();
    printf("kernels: %.2f s\n", cl_now() - t0);
    return cl_test_report("test_kernels");
}
