/* Tests for the Llama kernels (src/kernels/rmsnorm.c, rope.c, swiglu.c and
 * the grouped-query attention of attention.c).
 *
 *   test_llama_kernels                    each forward against a double
 *       reference written here, each backward against central finite
 *       differences of that reference (loss = sum(out * R), so dout = R),
 *       gradient buffers pre-filled so the "backward adds" contract is
 *       checked too; the edge cases (odd head width refused, KV = 1, KV = H,
 *       T = 1); KV = H equal bit for bit to cl_attention_forward/backward;
 *       the same bits on 1 and 2 threads.
 *   test_llama_kernels --write-input IN   the inputs of the PyTorch
 *       comparison as a safetensors file (tests/llama_ref.py reads it)
 *   test_llama_kernels --torch IN REF     the kernels on IN against REF,
 *       what llama_ref.py computed with torch's own ops: outputs and
 *       gradients within 1e-5 relative (max |got - want| / max |want|),
 *       the rotary frequencies bit for bit as HF's F32 computation, the
 *       tables within 2 ulp (torch's F32 cos and sin are not correctly rounded).
 * tests/cli_llama_kernels.sh runs the three. Shapes are tiny. */
#include "cleave/core.h"
#include "cleave/kernels.h"
#include "cleave/safetensors.h"
#include "common/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cl_rng rng;

static float *newf(long n) {
    float *p = calloc(n > 0 ? (size_t)n : 1, sizeof *p);
    if (!p) abort();
    return p;
}
static double *newd(long n) {
    double *p = calloc(n > 0 ? (size_t)n : 1, sizeof *p);
    if (!p) abort();
    return p;
}
static float *randf(long n) {
    float *p = newf(n);
    for (long i = 0; i < n; i++) p[i] = cl_rng_normal(&rng);
    return p;
}
static double *widen(const float *x, long n) {
    double *d = newd(n);
    for (long i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static float *dup_f(const float *x, long n) {
    float *y = newf(n);
    memcpy(y, x, (size_t)n * sizeof *y);
    return y;
}
/* max |a - b| / max |b| */
static double relerr(const float *a, const double *b, long n) {
    double md = 0, mb = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        md = isnan(d) || d > md ? (isnan(d) ? INFINITY : d) : md;
        mb = fabs(b[i]) > mb ? fabs(b[i]) : mb;
    }
    return mb > 0 ? md / mb : md;
}
static long differ(const float *a, const float *b, long n) {
    long c = 0;
    for (long i = 0; i < n; i++) c += memcmp(a + i, b + i, sizeof *a) != 0;
    return c;
}
static void report(const char *what, double err, double tol) {
    printf("  %-52s %.2e (tol %.0e)\n", what, err, tol);
    CHECK(err <= tol, "%s: relative error %.3e > %.0e", what, err, tol);
}

/* A double reference: fills out[nout] from the double inputs the context holds. */
typedef struct {
    void (*run)(void *ctx, double *out);
    void *ctx;
    long nout;
    const double *R; /* loss = sum(out * R) */
} dref;

static double dref_loss(const dref *f, double *out) {
    f->run(f->ctx, out);
    double l = 0;
    for (long j = 0; j < f->nout; j++) l += out[j] * f->R[j];
    return l;
}
/* What a backward added to g (g0 the prefill) against central differences
 * of the reference over the n doubles at x. */
static void fd_check(const char *what, const dref *f, double *x, long n, const float *g, const float *g0) {
    double *out = newd(f->nout), *fd = newd(n);
    float *an = newf(n);
    for (long i = 0; i < n; i++) {
        double x0 = x[i], h = 1e-4;
        x[i] = x0 + h;
        double lp = dref_loss(f, out);
        x[i] = x0 - h;
        double lm = dref_loss(f, out);
        x[i] = x0;
        fd[i] = (lp - lm) / (2 * h);
        an[i] = (float)((double)g[i] - g0[i]);
    }
    report(what, relerr(an, fd, n), 1e-5);
    free(out); free(fd); free(an);
}

/* ---- RMSNorm ------------------------------------------------------------- */

typedef struct { int N, C; double eps, *x, *w; } rms_ctx;
static void rms_run(void *vc, double *out) {
    rms_ctx *c = vc;
    for (int n = 0; n < c->N; n++) {
        const double *x = c->x + (long)n * c->C;
        double ss = 0;
        for (int i = 0; i < c->C; i++) ss += x[i] * x[i];
        double r = 1 / sqrt(ss / c->C + c->eps);
        for (int i = 0; i < c->C; i++) out[(long)n * c->C + i] = c->w[i] * x[i] * r;
    }
}

static void rms_case(int N, int C) {
    char what[96];
    long n = (long)N * C;
    float eps = 1e-5f, *x = randf(n), *w = randf(C), *R = randf(n), *out = newf(n), *rstd = newf(N);
    for (int i = 0; i < C; i++) w[i] += 1.0f;
    rms_ctx c = {N, C, eps, widen(x, n), widen(w, C)};
    double *want = newd(n), *Rd = widen(R, n);
    dref f = {rms_run, &c, n, Rd};
    rms_run(&c, want);
    cl_rmsnorm_forward(out, rstd, x, w, eps, N, C);
    snprintf(what, sizeof what, "rmsnorm forward N%d C%d", N, C);
    report(what, relerr(out, want, n), 1e-6);
    float *dx = randf(n), *dx0 = dup_f(dx, n), *dw = randf(C), *dw0 = dup_f(dw, C);
    cl_rmsnorm_backward_input(dx, R, x, w, rstd, N, C);
    cl_rmsnorm_backward_weight(dw, R, x, rstd, N, C);
    snprintf(what, sizeof what, "rmsnorm backward dx N%d C%d", N, C);
    fd_check(what, &f, c.x, n, dx, dx0);
    snprintf(what, sizeof what, "rmsnorm backward dw N%d C%d", N, C);
    fd_check(what, &f, c.w, C, dw, dw0);
    /* the fused residual form: the bits of add then norm, in place too */
    float *a = randf(n), *res = newf(n), *out2 = newf(n), *rstd2 = newf(N), *sum = dup_f(a, n);
    cl_residual_rmsnorm_forward(res, out2, rstd2, a, x, w, eps, N, C);
    cl_add_inplace(sum, x, n);
    cl_rmsnorm_forward(out, rstd, sum, w, eps, N, C);
    CHECK(differ(res, sum, n) + differ(out2, out, n) + differ(rstd2, rstd, N) == 0,
          "residual + rmsnorm N%d C%d differs from add then rmsnorm", N, C);
    cl_residual_rmsnorm_forward(a, out2, rstd2, a, x, w, eps, N, C);
    CHECK(differ(a, sum, n) == 0, "residual + rmsnorm in place differs");
    free(x); free(w); free(R); free(out); free(rstd); free(c.x); free(c.w); free(want); free(Rd);
    free(dx); free(dx0); free(dw); free(dw0); free(a); free(res); free(out2); free(rstd2); free(sum);
}

/* ---- rotary embeddings --------------------------------------------------- */

typedef struct { int N, T, pos0, heads, hd; long ld; const double *cs, *sn; double *x; } rope_ctx;
static void rope_run(void *vc, double *out) {
    rope_ctx *c = vc;
    int half = c->hd / 2;
    memset(out, 0, (size_t)c->N * c->ld * sizeof *out);
    for (int n = 0; n < c->N; n++) {
        long p = c->pos0 + n % c->T;
        for (int h = 0; h < c->heads; h++) {
            const double *x = c->x + n * c->ld + (long)h * c->hd;
            double *o = out + n * c->ld + (long)h * c->hd;
            for (int i = 0; i < half; i++) {
                double co = c->cs[p * half + i], s = c->sn[p * half + i];
                o[i] = x[i] * co - x[i + half] * s;
                o[i + half] = x[i + half] * co + x[i] * s;
            }
        }
    }
}

/* The tables against the formula in double: inv_freq_i = theta^(-2i/hd)
 * (no scaling), angles p f_i; F32 roundings of f and of the angle bound the
 * error at about |angle| 2^-23 (checked at 4 ulp of the angle). */
static void rope_table_check(int P, int hd, double theta) {
    int half = hd / 2;
    float *cs = newf((long)P * half), *sn = newf((long)P * half);
    CHECK_OK(cl_rope_table(cs, sn, P, hd, theta, NULL));
    double worst = 0;
    for (int p = 0; p < P; p++)
        for (int i = 0; i < half; i++) {
            double a = p * pow(theta, -2.0 * i / hd), tol = 4 * (fabs(a) + 1) * 0x1p-24;
            double e = fmax(fabs(cs[(long)p * half + i] - cos(a)), fabs(sn[(long)p * half + i] - sin(a))) / tol;
            worst = e > worst ? e : worst;
        }
    char what[96];
    snprintf(what, sizeof what, "rope table P%d hd%d theta %g (share of bound)", P, hd, theta);
    report(what, worst, 1);
    free(cs); free(sn);
}

/* llama3 scaling: the three bands as Meta's reference states them, in double */
static void rope_llama3_check(void) {
    cl_rope_scaling sc = {CL_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192};
    int hd = 128, half = hd / 2, P = 2;
    double theta = 500000.0;
    float *cs = newf(P * half), *sn = newf(P * half);
    CHECK_OK(cl_rope_table(cs, sn, P, hd, theta, &sc));
    double worst = 0;
    int bands[3] = {0, 0, 0};
    for (int i = 0; i < half; i++) {
        double f = pow(theta, -2.0 * i / hd), wl = 2 * M_PI / f, want;
        if (wl < 8192 / 4.0) want = f, bands[0]++;
        else if (wl > 8192 / 1.0) want = f / 8, bands[2]++;
        else {
            double s = (8192 / wl - 1.0) / (4.0 - 1.0);
            want = (1 - s) * f / 8 + s * f;
            bands[1]++;
        }
        /* at position 1 the angle is the frequency: sin(f) */
        double e = fabs(asin(sn[half + i]) - want) / want;
        worst = e > worst ? e : worst;
    }
    CHECK(bands[0] && bands[1] && bands[2], "llama3 bands %d %d %d: one empty", bands[0], bands[1], bands[2]);
    report("rope llama3 frequencies, hd 128, theta 5e5, factor 8", worst, 1e-6);
    free(cs); free(sn);
}

static void rope_case(int B, int T, int pos0, int H, int KV, int hd) {
    char what[96];
    int N = B * T, heads = H + KV, half = hd / 2, P = pos0 + T;
    long ld = (long)(H + 2 * KV) * hd, n = (long)N * ld;
    float *cs = newf((long)P * half), *sn = newf((long)P * half);
    CHECK_OK(cl_rope_table(cs, sn, P, hd, 10000.0, NULL));
    float *x = randf(n), *out = randf(n), *keep = dup_f(out, n), *R = randf(n);
    double *cd = widen(cs, (long)P * half), *sd = widen(sn, (long)P * half);
    rope_ctx c = {N, T, pos0, heads, hd, ld, cd, sd, widen(x, n)};
    double *want = newd(n), *Rd = widen(R, n);
    rope_run(&c, want);
    cl_rope_forward(out, x, cs, sn, N, T, pos0, heads, hd, ld);
    /* the rotated columns, then the v columns past them untouched */
    long rot = 0, vbad = 0;
    double *wantv = newd(n);
    for (int r = 0; r < N; r++)
        for (long j = 0; j < ld; j++) {
            long k = r * ld + j;
            if (j < (long)heads * hd) wantv[rot++] = want[k];
            else vbad += memcmp(out + k, keep + k, sizeof *out) != 0;
        }
    float *got = newf(rot);
    rot = 0;
    for (int r = 0; r < N; r++)
        for (long j = 0; j < (long)heads * hd; j++) got[rot++] = out[r * ld + j];
    snprintf(what, sizeof what, "rope forward B%d T%d pos0 %d H%d KV%d hd%d", B, T, pos0, H, KV, hd);
    report(what, relerr(got, wantv, rot), 1e-6);
    CHECK(vbad == 0, "rope forward wrote %ld values past its heads", vbad);
    /* in place: the same bits */
    float *inpl = dup_f(x, n);
    cl_rope_forward(inpl, inpl, cs, sn, N, T, pos0, heads, hd, ld);
    long dbad = 0;
    for (int r = 0; r < N; r++) dbad += differ(inpl + r * ld, out + r * ld, (long)heads * hd);
    CHECK(dbad == 0, "rope forward in place differs in %ld values", dbad);
    /* backward (adds) against differences; R zero past the heads */
    for (int r = 0; r < N; r++)
        for (long j = (long)heads * hd; j < ld; j++) R[r * ld + j] = 0, Rd[r * ld + j] = 0;
    float *dx = randf(n), *dx0 = dup_f(dx, n);
    cl_rope_backward(dx, R, cs, sn, N, T, pos0, heads, hd, ld);
    dref f = {rope_run, &c, n, Rd};
    snprintf(what, sizeof what, "rope backward B%d T%d pos0 %d H%d KV%d hd%d", B, T, pos0, H, KV, hd);
    fd_check(what, &f, c.x, n, dx, dx0);
    /* the assigning form, in place, equals the adding form into zeros */
    float *z = newf(n), *s = dup_f(R, n);
    cl_rope_backward(z, R, cs, sn, N, T, pos0, heads, hd, ld);
    cl_rope_backward_set(s, s, cs, sn, N, T, pos0, heads, hd, ld);
    CHECK(differ(s, z, n) == 0, "rope backward_set in place differs from backward into zeros");
    /* rotating forward then back gives the input again (to rounding) */
    cl_rope_backward_set(inpl, inpl, cs, sn, N, T, pos0, heads, hd, ld);
    double *xd = widen(x, n);
    snprintf(what, sizeof what, "rope backward(forward(x)) = x, pos0 %d", pos0);
    report(what, relerr(inpl, xd, n), 1e-6);
    free(cs); free(sn); free(x); free(out); free(keep); free(R); free(cd); free(sd); free(c.x); free(want);
    free(Rd); free(wantv); free(got); free(inpl); free(dx); free(dx0); free(z); free(s); free(xd);
}

/* pos0: a rank holding positions [pos0, pos0 + T) of a longer sequence
 * gives the bits of those rows of the whole sequence's call. */
static void rope_pos0_check(void) {
    int T = 12, hd = 8, heads = 3, half = hd / 2, pos0 = 5, Tl = 4;
    long ld = (long)heads * hd;
    float *cs = newf((long)T * half), *sn = newf((long)T * half);
    CHECK_OK(cl_rope_table(cs, sn, T, hd, 10000.0, NULL));
    float *x = randf(T * ld), *whole = newf(T * ld), *part = newf(Tl * ld);
    cl_rope_forward(whole, x, cs, sn, T, T, 0, heads, hd, ld);
    cl_rope_forward(part, x + pos0 * ld, cs, sn, Tl, Tl, pos0, heads, hd, ld);
    CHECK(differ(part, whole + pos0 * ld, Tl * ld) == 0, "rope at pos0 %d differs from the whole sequence's rows", pos0);
    free(cs); free(sn); free(x); free(whole); free(part);
}

static void rope_refusals(void) {
    float t[64];
    cl_rope_scaling bad = {CL_ROPE_LLAMA3, 8.0, 4.0, 1.0, 8192};
    CHECK(cl_rope_table(t, t + 32, 2, 7, 10000.0, NULL) == CL_ERR_INVALID && strstr(cl_last_error(), "7"),
          "an odd head width is not refused by name: %s", cl_last_error());
    CHECK(cl_rope_table(t, t + 32, 2, 8, 0.5, NULL) == CL_ERR_INVALID, "theta 0.5 is not refused");
    CHECK(cl_rope_table(t, t + 32, 2, 8, 10000.0, &bad) == CL_ERR_INVALID && strstr(cl_last_error(), "high_freq_factor"),
          "high_freq_factor below low_freq_factor is not refused: %s", cl_last_error());
}

/* ---- SwiGLU -------------------------------------------------------------- */

typedef struct { long n; double *g, *u; } swi_ctx;
static void swi_run(void *vc, double *out) {
    swi_ctx *c = vc;
    for (long i = 0; i < c->n; i++) out[i] = c->g[i] / (1 + exp(-c->g[i])) * c->u[i];
}

static void swiglu_case(long n) {
    char what[96];
    float *g = randf(n), *u = randf(n), *R = randf(n), *out = newf(n);
    for (long i = 0; i < n; i++) g[i] *= 3; /* into silu's bend and tails */
    swi_ctx c = {n, widen(g, n), widen(u, n)};
    double *want = newd(n), *Rd = widen(R, n);
    swi_run(&c, want);
    cl_swiglu_forward(out, g, u, n);
    snprintf(what, sizeof what, "swiglu forward n %ld", n);
    report(what, relerr(out, want, n), 1e-6);
    float *dg = randf(n), *dg0 = dup_f(dg, n), *du = randf(n), *du0 = dup_f(du, n);
    cl_swiglu_backward(dg, du, R, g, u, n);
    dref f = {swi_run, &c, n, Rd};
    snprintf(what, sizeof what, "swiglu backward dgate n %ld", n);
    fd_check(what, &f, c.g, n, dg, dg0);
    snprintf(what, sizeof what, "swiglu backward dup n %ld", n);
    fd_check(what, &f, c.u, n, du, du0);
    free(g); free(u); free(R); free(out); free(c.g); free(c.u); free(want); free(Rd);
    free(dg); free(dg0); free(du); free(du0);
}

/* ---- grouped-query attention --------------------------------------------- */

typedef struct { int B, T, NH, KV, hd; double *qkv; } gqa_ctx;
static void gqa_run(void *vc, double *out) {
    gqa_ctx *c = vc;
    int T = c->T, hd = c->hd, G = c->NH / c->KV;
    long L = (long)(c->NH + 2 * c->KV) * hd, C = (long)c->NH * hd;
    double *p = newd(T);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++)
            for (int t = 0; t < T; t++) {
                const double *row = c->qkv + (long)b * T * L, *q = row + t * L + (long)h * hd;
                long ko = C + (long)(h / G) * hd, vo = C + (long)(c->KV + h / G) * hd;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double s = 0;
                    for (int i = 0; i < hd; i++) s += q[i] * row[j * L + ko + i];
                    p[j] = s / sqrt((double)hd);
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                for (int i = 0; i < hd; i++) {
                    double s = 0;
                    for (int j = 0; j <= t; j++) s += p[j] / sum * row[j * L + vo + i];
                    out[((long)b * T + t) * C + (long)h * hd + i] = s;
                }
            }
    free(p);
}

static void gqa_case(int B, int T, int NH, int KV, int hd) {
    char what[96];
    long L = (long)(NH + 2 * KV) * hd, nq = (long)B * T * L, no = (long)B * T * NH * hd, na = (long)B * NH * T * T;
    float *qkv = randf(nq), *out = newf(no), *att = newf(na), *sc = newf(na), *R = randf(no);
    for (long i = 0; i < na; i++) sc[i] = NAN; /* scratch: overwritten, never read */
    gqa_ctx c = {B, T, NH, KV, hd, widen(qkv, nq)};
    double *want = newd(no), *Rd = widen(R, no);
    gqa_run(&c, want);
    cl_attention_gqa_forward(out, att, qkv, B, T, NH, KV, hd);
    snprintf(what, sizeof what, "gqa forward B%d T%d NH%d KV%d hd%d", B, T, NH, KV, hd);
    report(what, relerr(out, want, no), 1e-5);
    float *dq = randf(nq), *dq0 = dup_f(dq, nq);
    cl_attention_gqa_backward(dq, sc, R, qkv, att, B, T, NH, KV, hd);
    dref f = {gqa_run, &c, no, Rd};
    snprintf(what, sizeof what, "gqa backward B%d T%d NH%d KV%d hd%d", B, T, NH, KV, hd);
    fd_check(what, &f, c.qkv, nq, dq, dq0);
    free(qkv); free(out); free(att); free(sc); free(R); free(c.qkv); free(want); free(Rd); free(dq); free(dq0);
}

/* KV = NH is GPT-2's attention: the same bits as the C, NH entry points */
static void gqa_same_as_mha(int B, int T, int NH, int hd) {
    int C = NH * hd;
    long nq = (long)B * T * 3 * C, no = (long)B * T * C, na = (long)B * NH * T * T;
    float *qkv = randf(nq), *d = randf(no), *o1 = newf(no), *o2 = newf(no), *a1 = newf(na), *a2 = newf(na);
    float *sc = newf(na), *g1 = newf(nq), *g2 = newf(nq);
    cl_attention_forward(o1, a1, qkv, B, T, C, NH);
    cl_attention_backward(g1, sc, d, qkv, a1, B, T, C, NH);
    cl_attention_gqa_forward(o2, a2, qkv, B, T, NH, NH, hd);
    cl_attention_gqa_backward(g2, sc, d, qkv, a2, B, T, NH, NH, hd);
    CHECK(differ(o1, o2, no) + differ(a1, a2, na) + differ(g1, g2, nq) == 0,
          "gqa at KV = NH differs from cl_attention (B%d T%d NH%d hd%d)", B, T, NH, hd);
    free(qkv); free(d); free(o1); free(o2); free(a1); free(a2); free(sc); free(g1); free(g2);
}

/* the same bits on 1 and 2 threads, on shapes that split (T past one block of 64) */
static void threads_check(void) {
    int B = 2, T = 70, NH = 4, KV = 2, hd = 16, C = 1024, N = 80;
    long L = (long)(NH + 2 * KV) * hd, nq = (long)B * T * L, no = (long)B * T * NH * hd, na = (long)B * NH * T * T;
    float *qkv = randf(nq), *d = randf(no), *sc = newf(na), *w = randf(C), *x = randf((long)N * C);
    float *o[2], *a[2], *g[2], *y[2], *r[2], *dx[2], *dw[2], *cs = newf(T * hd / 2), *sn = newf(T * hd / 2);
    CHECK_OK(cl_rope_table(cs, sn, T, hd, 10000.0, NULL));
    for (int k = 0; k < 2; k++) {
        cl_set_threads(k + 1);
        o[k] = newf(no); a[k] = newf(na); g[k] = newf(nq); y[k] = newf((long)N * C); r[k] = newf(N);
        dx[k] = newf((long)N * C); dw[k] = newf(C);
        cl_attention_gqa_forward(o[k], a[k], qkv, B, T, NH, KV, hd);
        cl_attention_gqa_backward(g[k], sc, d, qkv, a[k], B, T, NH, KV, hd);
        cl_rope_backward(g[k], d, cs, sn, B * T, T, 0, NH, hd, NH * hd);
        cl_rmsnorm_forward(y[k], r[k], x, w, 1e-6f, N, C);
        cl_rmsnorm_backward_input(dx[k], x, x, w, r[k], N, C);
        cl_rmsnorm_backward_weight(dw[k], x, x, r[k], N, C);
        cl_swiglu_backward(dx[k], y[k], x, x, x, (long)N * C);
    }
    cl_set_threads(1);
    long nd = differ(o[0], o[1], no) + differ(g[0], g[1], nq) + differ(y[0], y[1], (long)N * C) +
              differ(dx[0], dx[1], (long)N * C) + differ(dw[0], dw[1], C);
    CHECK(nd == 0, "the Llama kernels on 1 and 2 threads differ in %ld values", nd);
    for (int k = 0; k < 2; k++) {
        free(o[k]); free(a[k]); free(g[k]); free(y[k]); free(r[k]); free(dx[k]); free(dw[k]);
    }
    free(qkv); free(d); free(sc); free(w); free(x); free(cs); free(sn);
}

/* ---- the PyTorch comparison ---------------------------------------------- */

/* The shapes both sides use; llama_ref.py reads them from the file's metadata. */
enum { RN = 6, RC = 16, SN = 6, SF = 12, AB = 2, AT = 5, AH = 4, AKV = 2, AHD = 8, APOS0 = 3, TP = 4096, THD = 64 };
static const float RMS_EPS = 1e-5f;
static const cl_rope_scaling L3 = {CL_ROPE_LLAMA3, 8.0, 1.0, 4.0, 64};
static const int L3HD = 16, L3P = 512;
static const double L3THETA = 500000.0, THETA = 10000.0;

#define NIN 10
static const struct { const char *name; long n; } INPUTS[NIN] = {
    {"rms.x", RN * RC}, {"rms.w", RC}, {"rms.dout", RN * RC}, {"swi.gate", SN * SF}, {"swi.up", SN * SF},
    {"swi.dout", SN * SF}, {"att.qkv", AB * AT * (AH + 2 * AKV) * AHD}, {"att.dout", AB * AT * AH * AHD},
    {"att1.qkv", AB * AT * (AH + 2) * AHD}, {"att1.dout", AB * AT * AH * AHD},
};

static int write_input(const char *path) {
    cl_st_item it[NIN];
    float *bufs[NIN];
    for (int i = 0; i < NIN; i++) {
        bufs[i] = randf(INPUTS[i].n);
        it[i].name = INPUTS[i].name;
        it[i].t = cl_tensor_make(bufs[i], CL_F32, 1, (int64_t[]){INPUTS[i].n});
    }
    char shapes[256], eps[32], l3[128];
    snprintf(shapes, sizeof shapes, "%d %d %d %d %d %d %d %d %d %d %d", RN, RC, SN, SF, AB, AT, AH, AKV, AHD, APOS0, TP);
    snprintf(eps, sizeof eps, "%.9g", (double)RMS_EPS);
    snprintf(l3, sizeof l3, "%d %d %.17g %.17g %.17g %.17g %d %d", L3HD, L3P, L3THETA, L3.factor, L3.low_freq_factor,
             L3.high_freq_factor, L3.original_max_position_embeddings, THD);
    cl_st_meta meta[] = {{"shapes", shapes}, {"rms_eps", eps}, {"llama3", l3}};
    cl_status s = cl_st_write(path, it, NIN, meta, 3);
    for (int i = 0; i < NIN; i++) free(bufs[i]);
    if (s != CL_OK) fprintf(stderr, "test_llama_kernels: %s\n", cl_last_error());
    return s == CL_OK ? 0 : 1;
}

/* name's n floats from f into a new buffer (NULL and a failed check when absent or of another size) */
static float *st_get(const cl_st_file *f, const char *name, long n) {
    float *p = newf(n);
    cl_status s = cl_st_read_tensor(f, name, CL_F32, 1, (int64_t[]){n}, p);
    CHECK(s == CL_OK, "%s: %s", name, cl_last_error());
    return p;
}
static void vs_torch(const cl_st_file *ref, const char *name, const float *got, long n) {
    float *want = st_get(ref, name, n);
    double *wd = widen(want, n);
    char what[96];
    snprintf(what, sizeof what, "torch %s", name);
    report(what, relerr(got, wd, n), 1e-5);
    free(want); free(wd);
}
/* the tables' bits: how many of n values differ, and by how many ulp at most */
static void table_vs_torch(const cl_st_file *ref, const char *name, const float *got, long n) {
    float *want = st_get(ref, name, n);
    long nd = differ(got, want, n);
    int32_t worst = 0;
    for (long i = 0; i < n; i++) {
        int32_t a, b;
        memcpy(&a, got + i, 4);
        memcpy(&b, want + i, 4);
        int32_t u = a > b ? a - b : b - a;
        worst = u > worst ? u : worst;
    }
    printf("  torch %-46s %ld of %ld values differ, at most %d ulp\n", name, nd, n, (int)worst);
    /* within 2 ulp at every position (the angles are HF's bits; the cos and sin roundings differ) */
    CHECK(worst <= 2, "%s: %d ulp from HF's table", name, (int)worst);
    free(want);
}

static void att_vs_torch(const cl_st_file *in, const cl_st_file *ref, const char *pre, int KV) {
    char nm[64];
    int L = (AH + 2 * KV) * AHD, N = AB * AT, heads = AH + KV, half = AHD / 2;
    long nq = (long)N * L, no = (long)N * AH * AHD, na = (long)AB * AH * AT * AT;
    snprintf(nm, sizeof nm, "%s.qkv", pre);
    float *qkv = st_get(in, nm, nq);
    snprintf(nm, sizeof nm, "%s.dout", pre);
    float *d = st_get(in, nm, no);
    float *cs = newf((APOS0 + AT) * half), *sn = newf((APOS0 + AT) * half);
    CHECK_OK(cl_rope_table(cs, sn, APOS0 + AT, AHD, THETA, NULL));
    /* rope on q and k in place, attention, then back: the block's order */
    float *out = newf(no), *att = newf(na), *sc = newf(na), *dqkv = newf(nq);
    cl_rope_forward(qkv, qkv, cs, sn, N, AT, APOS0, heads, AHD, L);
    snprintf(nm, sizeof nm, "%s.qkv_rot", pre);
    vs_torch(ref, nm, qkv, nq);
    cl_attention_gqa_forward(out, att, qkv, AB, AT, AH, KV, AHD);
    snprintf(nm, sizeof nm, "%s.out", pre);
    vs_torch(ref, nm, out, no);
    cl_attention_gqa_backward(dqkv, sc, d, qkv, att, AB, AT, AH, KV, AHD);
    cl_rope_backward_set(dqkv, dqkv, cs, sn, N, AT, APOS0, heads, AHD, L);
    snprintf(nm, sizeof nm, "%s.dqkv", pre);
    vs_torch(ref, nm, dqkv, nq);
    free(qkv); free(d); free(cs); free(sn); free(out); free(att); free(sc); free(dqkv);
}

static void torch_compare(const char *in_path, const char *ref_path) {
    cl_st_file *in = NULL, *ref = NULL;
    CHECK_OK(cl_st_open(&in, in_path));
    CHECK_OK(cl_st_open(&ref, ref_path));
    if (!in || !ref) return;
    /* RMSNorm */
    float *x = st_get(in, "rms.x", RN * RC), *w = st_get(in, "rms.w", RC), *d = st_get(in, "rms.dout", RN * RC);
    float *y = newf(RN * RC), *r = newf(RN), *dx = newf(RN * RC), *dw = newf(RC);
    cl_rmsnorm_forward(y, r, x, w, RMS_EPS, RN, RC);
    cl_rmsnorm_backward_input(dx, d, x, w, r, RN, RC);
    cl_rmsnorm_backward_weight(dw, d, x, r, RN, RC);
    vs_torch(ref, "rms.out", y, RN * RC);
    vs_torch(ref, "rms.dx", dx, RN * RC);
    vs_torch(ref, "rms.dw", dw, RC);
    free(x); free(w); free(d); free(y); free(r); free(dx); free(dw);
    /* SwiGLU */
    float *g = st_get(in, "swi.gate", SN * SF), *u = st_get(in, "swi.up", SN * SF), *sd = st_get(in, "swi.dout", SN * SF);
    float *so = newf(SN * SF), *dg = newf(SN * SF), *du = newf(SN * SF);
    cl_swiglu_forward(so, g, u, SN * SF);
    cl_swiglu_backward(dg, du, sd, g, u, SN * SF);
    vs_torch(ref, "swi.out", so, SN * SF);
    vs_torch(ref, "swi.dgate", dg, SN * SF);
    vs_torch(ref, "swi.dup", du, SN * SF);
    free(g); free(u); free(sd); free(so); free(dg); free(du);
    /* rope + grouped-query attention, KV = 2 and multi-query KV = 1 */
    att_vs_torch(in, ref, "att", AKV);
    att_vs_torch(in, ref, "att1", 1);
    /* the tables: default at theta 1e4 (TP positions, hd THD), llama3 */
    long n = (long)TP * THD / 2, n3 = (long)L3P * L3HD / 2;
    float *cs = newf(n), *sn = newf(n), *c3 = newf(n3), *s3 = newf(n3);
    CHECK_OK(cl_rope_table(cs, sn, TP, THD, THETA, NULL));
    CHECK_OK(cl_rope_table(c3, s3, L3P, L3HD, L3THETA, &L3));
    table_vs_torch(ref, "rope.cos", cs, n);
    table_vs_torch(ref, "rope.sin", sn, n);
    table_vs_torch(ref, "rope3.cos", c3, n3);
    table_vs_torch(ref, "rope3.sin", s3, n3);
    /* the frequencies: HF's F32 operations, bit for bit */
    float *f1 = newf(THD / 2), *f3 = newf(L3HD / 2);
    CHECK_OK(cl_rope_freqs(f1, THD, THETA, NULL));
    CHECK_OK(cl_rope_freqs(f3, L3HD, L3THETA, &L3));
    float *w1 = st_get(ref, "rope.freq", THD / 2), *w3 = st_get(ref, "rope3.freq", L3HD / 2);
    CHECK(differ(f1, w1, THD / 2) == 0, "inv_freq: %ld of %d differ from HF's", differ(f1, w1, THD / 2), THD / 2);
    CHECK(differ(f3, w3, L3HD / 2) == 0, "llama3 inv_freq: %ld of %d differ from HF's", differ(f3, w3, L3HD / 2),
          L3HD / 2);
    printf("  torch rope.freq, rope3.freq (llama3): %ld and %ld values differ\n", differ(f1, w1, THD / 2),
           differ(f3, w3, L3HD / 2));
    /* Llama 3.1's own configuration (llama_ref.py states it too) */
    const cl_rope_scaling l31 = {CL_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192};
    float f31[64], *w31 = st_get(ref, "rope31.freq", 64);
    CHECK_OK(cl_rope_freqs(f31, 128, 500000.0, &l31));
    CHECK(differ(f31, w31, 64) == 0, "Llama 3.1's inv_freq: %ld of 64 differ from HF's", differ(f31, w31, 64));
    free(f1); free(f3); free(w1); free(w3); free(w31);
    free(cs); free(sn); free(c3); free(s3);
    cl_st_close(in);
    cl_st_close(ref);
}

int main(int argc, char **argv) {
    cl_rng_seed(&rng, 20261206);
    if (argc == 3 && !strcmp(argv[1], "--write-input")) return write_input(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "--torch")) {
        torch_compare(argv[2], argv[3]);
        return cl_test_report("test_llama_kernels --torch");
    }
    if (argc != 1) {
        fprintf(stderr, "usage: test_llama_kernels [--write-input IN | --torch IN REF]\n");
        return 2;
    }
    rms_case(3, 7);
    rms_case(2, 33);
    rope_table_check(2048, 64, 10000.0);
    rope_table_check(64, 16, 500000.0);
    rope_llama3_check();
    rope_case(2, 5, 0, 4, 2, 8);
    rope_case(1, 3, 7, 2, 1, 6);
    rope_case(2, 1, 0, 3, 3, 4);
    rope_pos0_check();
    rope_refusals();
    swiglu_case(37);
    gqa_case(2, 5, 4, 2, 6);  /* grouped: 2 query heads a key head */
    gqa_case(1, 6, 3, 1, 5);  /* multi-query, odd head width */
    gqa_case(2, 4, 2, 2, 4);  /* KV = H */
    gqa_case(2, 1, 4, 2, 3);  /* T = 1 */
    gqa_same_as_mha(2, 7, 3, 4);
    gqa_same_as_mha(1, 70, 2, 8);
    threads_check();
    return cl_test_report("test_llama_kernels");
}
