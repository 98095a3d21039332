/* Tests for the blockwise attention (src/kernels/flash.c) against today's
 * T x T kernels (attention.c) and against double precision.
 *
 * Errors are max|got - want| / max|want| over the whole tensor ("relative"
 * below). Bounds: out, lse and dqkv within 1e-5 of cl_attention_* on shapes
 * with T = 1, T not a multiple of the 64-row block, one head and hs = 64;
 * the probabilities exp(s - lse) within 1e-5 of today's saved att; dqkv
 * within 1e-4 of central finite differences of a double reference (the
 * kernel works in f32; the differences in double are exact to ~1e-9). The
 * backward adds into dqkv (prefilled, the prefill subtracted), reads nothing
 * of its scratch before writing it (NaN prefill) and writes nothing past
 * cl_flash_scratch_floats (a guard). The bits do not depend on the thread
 * count, and the AVX2 path is within 1e-6 of the plain one. The chunk
 * entries (context parallelism) over two chunks equal the whole sequence's
 * within 1e-5, and so do grouped-query heads against today's kernel on the
 * kv heads repeated. */
#include "cleave/core.h"
#include "cleave/kernels.h"
#include "common/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cl_rng g_rng;

static float *fvec(long n) {
    float *p = calloc(n > 0 ? (size_t)n : 1, sizeof(float));
    if (!p) {
        fprintf(stderr, "test_flash: out of memory\n");
        exit(2);
    }
    return p;
}
static float *frandn(long n, float s) {
    float *x = fvec(n);
    for (long i = 0; i < n; i++) x[i] = s * cl_rng_normal(&g_rng);
    return x;
}
static double rel(const float *a, const float *b, long n) {
    double md = 0, mb = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (isnan(d)) d = INFINITY;
        md = d > md ? d : md;
        mb = fabs((double)b[i]) > mb ? fabs((double)b[i]) : mb;
    }
    return mb > 0 ? md / mb : md;
}

/* scale q_t . k_j of head h, sample b, in double */
static double score(const float *qkv, int b, int h, int t, int j, int T, int C, int NH) {
    int hs = C / NH;
    const float *q = qkv + ((long)b * T + t) * 3 * C + h * hs, *k = qkv + ((long)b * T + j) * 3 * C + C + h * hs;
    double s = 0;
    for (int i = 0; i < hs; i++) s += (double)q[i] * k[i];
    return s / sqrt((double)hs);
}

static void flash_case(int B, int T, int C, int NH, float qscale) {
    long nq = (long)B * T * 3 * C, no = (long)B * T * C, na = (long)B * NH * T * T, nl = (long)B * NH * T;
    long ns = (long)cl_flash_scratch_floats(B, T, C, NH);
    float *qkv = frandn(nq, 1.0f), *dout = frandn(no, 1.0f), *pre = frandn(nq, 1.0f);
    for (long i = 0; i < no; i++) { /* larger q: sharper softmax rows, a max that moves block by block */
        long row = i / C, c = i % C;
        qkv[row * 3 * C + c] *= qscale;
    }
    float *o_ref = fvec(no), *att = fvec(na), *sc_ref = fvec(na), *d_ref = fvec(nq);
    float *o = fvec(no), *lse = fvec(nl), *sc = fvec(ns + 64), *d = fvec(nq);
    for (long i = 0; i < ns + 64; i++) sc[i] = NAN;
    for (long i = 0; i < no; i++) o[i] = NAN; /* overwritten, never read */
    cl_attention_forward(o_ref, att, qkv, B, T, C, NH);
    cl_attention_backward(d_ref, sc_ref, dout, qkv, att, B, T, C, NH);
    cl_flash_forward(o, lse, qkv, B, T, C, NH, NH);
    memcpy(d, pre, (size_t)nq * sizeof *d);
    cl_flash_backward(d, sc, dout, qkv, o, lse, B, T, C, NH, NH);
    for (long i = 0; i < nq; i++) d[i] -= pre[i];
    double eo = rel(o, o_ref, no), ed = rel(d, d_ref, nq);
    CHECK(eo <= 1e-5, "flash out B%d T%d C%d NH%d: %.3g from attention's (bound 1e-5)", B, T, C, NH, eo);
    CHECK(ed <= 1e-5, "flash dqkv B%d T%d C%d NH%d: %.3g from attention's (bound 1e-5)", B, T, C, NH, ed);
    /* lse against the double log-sum-exp of the scores, and exp(s - lse) against today's att */
    double el = 0, ml = 0, ea = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) mx = fmax(mx, score(qkv, b, h, t, j, T, C, NH));
                for (int j = 0; j <= t; j++) sum += exp(score(qkv, b, h, t, j, T, C, NH) - mx);
                double want = mx + log(sum), got = lse[((long)b * NH + h) * T + t];
                el = fmax(el, fabs(got - want));
                ml = fmax(ml, fabs(want));
                for (int j = 0; j <= t; j++) {
                    double p = exp(score(qkv, b, h, t, j, T, C, NH) - got);
                    ea = fmax(ea, fabs(p - att[(((long)b * NH + h) * T + t) * T + j]));
                }
            }
    el = ml > 0 ? el / ml : el;
    CHECK(el <= 1e-5, "flash lse B%d T%d C%d NH%d: %.3g from the double log-sum-exp (bound 1e-5)", B, T, C, NH, el);
    CHECK(ea <= 1e-5, "flash exp(s - lse) B%d T%d C%d NH%d: %.3g from attention's att (bound 1e-5)", B, T, C, NH, ea);
    long guard = 0;
    for (long i = ns; i < ns + 64; i++) guard += !isnan(sc[i]);
    CHECK(guard == 0, "flash backward wrote %ld floats past cl_flash_scratch_floats (%ld)", guard, ns);
    printf("flash B%d T%d C%d NH%d: out %.2g, dqkv %.2g, lse %.2g, att %.2g\n", B, T, C, NH, eo, ed, el, ea);
    free(qkv); free(dout); free(pre); free(o_ref); free(att); free(sc_ref); free(d_ref);
    free(o); free(lse); free(sc); free(d);
}

/* loss = sum(out * R) of causal attention in double */
static double ref_loss(const double *qkv, const double *R, int B, int T, int C, int NH) {
    int hs = C / NH;
    double loss = 0, *p = malloc((size_t)T * sizeof *p);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((long)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + ((long)b * T + j) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    p[j] = s / sqrt((double)hs);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int j = 0; j <= t; j++) o += p[j] / sum * qkv[((long)b * T + j) * 3 * C + 2 * C + h * hs + i];
                    loss += o * R[((long)b * T + t) * C + h * hs + i];
                }
            }
    free(p);
    return loss;
}

static void flash_fd(int B, int T, int C, int NH) {
    long nq = (long)B * T * 3 * C, no = (long)B * T * C;
    float *qkv = frandn(nq, 1.0f), *R = frandn(no, 1.0f), *o = fvec(no), *lse = fvec((long)B * NH * T);
    float *sc = fvec(cl_flash_scratch_floats(B, T, C, NH)), *d = fvec(nq);
    double *x = malloc((size_t)nq * sizeof *x), *Rd = malloc((size_t)no * sizeof *Rd);
    float *want = fvec(nq);
    for (long i = 0; i < nq; i++) x[i] = qkv[i];
    for (long i = 0; i < no; i++) Rd[i] = R[i];
    const double h = 1e-5;
    for (long i = 0; i < nq; i++) {
        double x0 = x[i];
        x[i] = x0 + h;
        double lp = ref_loss(x, Rd, B, T, C, NH);
        x[i] = x0 - h;
        double lm = ref_loss(x, Rd, B, T, C, NH);
        x[i] = x0;
        want[i] = (float)((lp - lm) / (2 * h));
    }
    cl_flash_forward(o, lse, qkv, B, T, C, NH, NH);
    cl_flash_backward(d, sc, R, qkv, o, lse, B, T, C, NH, NH);
    double e = rel(d, want, nq);
    CHECK(e <= 1e-4, "flash dqkv B%d T%d C%d NH%d: %.3g from finite differences (bound 1e-4)", B, T, C, NH, e);
    printf("flash B%d T%d C%d NH%d: dqkv %.2g from finite differences\n", B, T, C, NH, e);
    free(qkv); free(R); free(o); free(lse); free(sc); free(d); free(x); free(Rd); free(want);
}

/* Rows [r0, r0 + n) of x[B, T, W] as a [B, n, W] copy, and back. */
static float *rows_of(const float *x, int B, int T, int W, int r0, int n) {
    float *y = fvec((long)B * n * W);
    for (int b = 0; b < B; b++) memcpy(y + (long)b * n * W, x + ((long)b * T + r0) * W, (size_t)n * W * sizeof(float));
    return y;
}
static void rows_to(float *x, const float *y, int B, int T, int W, int r0, int n) {
    for (int b = 0; b < B; b++) memcpy(x + ((long)b * T + r0) * W, y + (long)b * n * W, (size_t)n * W * sizeof(float));
}

/* Context parallelism's pieces: the sequence cut into two chunks [0, T0) and
 * [T0, T); each query chunk's forward over the key chunks (the future one
 * first for chunk 0: no visible key, then the rest with accumulate) and
 * every chunk pair's backward equal the whole sequence's within 1e-5. */
static void flash_chunks(int B, int T, int T0, int C, int NH) {
    long nq = (long)B * T * 3 * C, no = (long)B * T * C;
    float *qkv = frandn(nq, 1.0f), *dout = frandn(no, 1.0f);
    float *o = fvec(no), *lse = fvec((long)B * NH * T), *d = fvec(nq);
    float *sc = fvec(cl_flash_scratch_floats(B, T, C, NH));
    cl_flash_forward(o, lse, qkv, B, T, C, NH, NH);
    cl_flash_backward(d, sc, dout, qkv, o, lse, B, T, C, NH, NH);
    const int start[2] = {0, T0}, len[2] = {T0, T - T0};
    float *cq[2], *co[2], *cl[2], *cd[2], *cdo[2];
    for (int i = 0; i < 2; i++) {
        cq[i] = rows_of(qkv, B, T, 3 * C, start[i], len[i]);
        cdo[i] = rows_of(dout, B, T, C, start[i], len[i]);
        co[i] = fvec((long)B * len[i] * C);
        cl[i] = fvec((long)B * NH * len[i]);
        cd[i] = fvec((long)B * len[i] * 3 * C);
    }
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) {
            int j = (i + 1 + k) % 2; /* the other chunk first, then the diagonal one */
            cl_flash_forward_chunk(co[i], cl[i], cq[i], cq[j], B, len[i], len[j], start[i] - start[j], C, NH, NH, k);
        }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            cl_flash_backward_chunk(cd[i], cd[j], sc, cdo[i], cq[i], cq[j], co[i], cl[i], B, len[i], len[j],
                                    start[i] - start[j], C, NH, NH);
    float *go = fvec(no), *gd = fvec(nq), *gl = fvec((long)B * NH * T);
    for (int i = 0; i < 2; i++) {
        rows_to(go, co[i], B, T, C, start[i], len[i]);
        rows_to(gd, cd[i], B, T, 3 * C, start[i], len[i]);
        for (int bh = 0; bh < B * NH; bh++)
            memcpy(gl + (long)bh * T + start[i], cl[i] + (long)bh * len[i], (size_t)len[i] * sizeof(float));
    }
    double eo = rel(go, o, no), el = rel(gl, lse, (long)B * NH * T), ed = rel(gd, d, nq);
    CHECK(eo <= 1e-5 && el <= 1e-5, "flash chunks B%d T%d at %d: out %.3g, lse %.3g from the whole sequence's (1e-5)", B,
          T, T0, eo, el);
    CHECK(ed <= 1e-5, "flash chunks B%d T%d at %d: dqkv %.3g from the whole sequence's (1e-5)", B, T, T0, ed);
    printf("flash chunks B%d T%d at %d: out %.2g, lse %.2g, dqkv %.2g\n", B, T, T0, eo, el, ed);
    for (int i = 0; i < 2; i++) {
        free(cq[i]); free(co[i]); free(cl[i]); free(cd[i]); free(cdo[i]);
    }
    free(qkv); free(dout); free(o); free(lse); free(d); free(sc); free(go); free(gd); free(gl);
}

/* Grouped-query heads: qkv rows [q (C) | k (Ckv) | v (Ckv)] against today's
 * kernel on the same heads with each kv head repeated for its group (the
 * expanded [B,T,3C] qkv); the expanded k, v gradients summed over each
 * group are the kv heads' gradients. Within 1e-5. */
static void flash_gqa(int B, int T, int C, int NH, int NKV) {
    int hs = C / NH, Ckv = NKV * hs, W = C + 2 * Ckv, G = NH / NKV;
    long nw = (long)B * T * W, nq = (long)B * T * 3 * C, no = (long)B * T * C, na = (long)B * NH * T * T;
    float *qkv = frandn(nw, 1.0f), *dout = frandn(no, 1.0f), *x = fvec(nq);
    for (long r = 0; r < (long)B * T; r++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < hs; i++) {
                int g = h / G;
                x[r * 3 * C + h * hs + i] = qkv[r * W + h * hs + i];
                x[r * 3 * C + C + h * hs + i] = qkv[r * W + C + g * hs + i];
                x[r * 3 * C + 2 * C + h * hs + i] = qkv[r * W + C + Ckv + g * hs + i];
            }
    float *o_ref = fvec(no), *att = fvec(na), *sc_ref = fvec(na), *dx = fvec(nq), *want = fvec(nw);
    cl_attention_forward(o_ref, att, x, B, T, C, NH);
    cl_attention_backward(dx, sc_ref, dout, x, att, B, T, C, NH);
    for (long r = 0; r < (long)B * T; r++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < hs; i++) {
                int g = h / G;
                want[r * W + h * hs + i] = dx[r * 3 * C + h * hs + i];
                want[r * W + C + g * hs + i] += dx[r * 3 * C + C + h * hs + i];
                want[r * W + C + Ckv + g * hs + i] += dx[r * 3 * C + 2 * C + h * hs + i];
            }
    float *o = fvec(no), *lse = fvec((long)B * NH * T), *d = fvec(nw), *sc = fvec(cl_flash_scratch_floats(B, T, C, NH));
    cl_flash_forward_chunk(o, lse, qkv, qkv, B, T, T, 0, C, NH, NKV, 0);
    cl_flash_backward_chunk(d, d, sc, dout, qkv, qkv, o, lse, B, T, T, 0, C, NH, NKV);
    double eo = rel(o, o_ref, no), ed = rel(d, want, nw);
    CHECK(eo <= 1e-5 && ed <= 1e-5, "flash gqa B%d T%d C%d NH%d NKV%d: out %.3g, dqkv %.3g from attention's (1e-5)", B, T,
          C, NH, NKV, eo, ed);
    printf("flash gqa B%d T%d C%d NH%d NKV%d: out %.2g, dqkv %.2g\n", B, T, C, NH, NKV, eo, ed);
    free(qkv); free(dout); free(x); free(o_ref); free(att); free(sc_ref); free(dx); free(want);
    free(o); free(lse); free(d); free(sc);
}

/* Same bits on 1 and 2 threads; the plain path within 1e-6 of the vector one. */
static void flash_paths(int B, int T, int C, int NH) {
    long nq = (long)B * T * 3 * C, no = (long)B * T * C, nl = (long)B * NH * T;
    float *qkv = frandn(nq, 1.0f), *dout = frandn(no, 1.0f), *sc = fvec(cl_flash_scratch_floats(B, T, C, NH));
    float *o[3], *l[3], *d[3];
    const int threads[3] = {1, 2, 2}, plain[3] = {0, 0, 1};
    int th0 = cl_threads();
    for (int r = 0; r < 3; r++) {
        o[r] = fvec(no);
        l[r] = fvec(nl);
        d[r] = fvec(nq);
        cl_set_threads(threads[r]);
        int was = cl_kernels_force_plain(plain[r]);
        cl_flash_forward(o[r], l[r], qkv, B, T, C, NH, NH);
        cl_flash_backward(d[r], sc, dout, qkv, o[r], l[r], B, T, C, NH, NH);
        cl_kernels_force_plain(was);
    }
    cl_set_threads(th0);
    CHECK(!memcmp(o[0], o[1], (size_t)no * sizeof(float)) && !memcmp(l[0], l[1], (size_t)nl * sizeof(float)) &&
              !memcmp(d[0], d[1], (size_t)nq * sizeof(float)),
          "flash T%d: the bits differ on 1 and 2 threads", T);
    double eo = rel(o[2], o[1], no), ed = rel(d[2], d[1], nq);
    CHECK(eo <= 1e-6 && ed <= 1e-5, "flash T%d: plain path %.3g (out), %.3g (dqkv) from the vector path", T, eo, ed);
    for (int r = 0; r < 3; r++) {
        free(o[r]); free(l[r]); free(d[r]);
    }
    free(qkv); free(dout); free(sc);
}

int main(void) {
    cl_rng_seed(&g_rng, 20261206);
    double t0 = cl_now();
    flash_case(1, 1, 8, 1, 1.0f);     /* T = 1 */
    flash_case(2, 5, 8, 2, 1.0f);
    flash_case(1, 130, 24, 3, 1.0f);  /* T not a multiple of the block, 3 blocks */
    flash_case(2, 64, 16, 1, 1.0f);   /* one head, exactly one block */
    flash_case(1, 200, 128, 2, 3.0f); /* hs = 64, sharp rows */
    flash_case(1, 300, 64, 1, 1.0f);  /* one head of hs = 64, 5 blocks, the last partial */
    flash_fd(1, 3, 8, 2);
    flash_fd(1, 2, 4, 1);
    flash_paths(2, 150, 32, 2);
    flash_chunks(2, 200, 90, 32, 2);
    flash_chunks(1, 300, 256, 128, 2);
    flash_gqa(2, 150, 48, 6, 2);
    flash_gqa(1, 70, 32, 4, 1);
    printf("flash: %.2f s\n", cl_now() - t0);
    return cl_test_report("test_flash");
}
