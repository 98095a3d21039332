/* Layer normalization over the last dimension, PyTorch semantics:
 *   out = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + 1e-5),
 * with the biased variance (divide by C). Row statistics are computed in
 * double (two passes: mean, then centred squares) and saved as f32 mean[N],
 * rstd[N] for the backward passes, which recompute the normalized input
 * from them instead of keeping it. Backward kernels add into outputs.
 * Rows are spread over the thread team (the weight gradients by column
 * ranges, each column's sum over rows in row order on one thread), so the
 * bits do not depend on the thread count.
 * The _bf16 forms (bf16 mixed precision: the normalized row feeds a GEMM
 * with BF16 operands) write the output as BF16, and as F32 too when out is
 * given; each BF16 value is cl_bf16_from_f32 of the F32 kernel's value (the
 * same expression, then one rounding), mean and rstd F32 as always.
 * cl_layernorm_backward_input_bf16 adds into din as the F32 kernel does and
 * writes each row of the sum, once finished, rounded into a BF16 copy (the
 * block backward's next GEMM operand): no separate narrowing pass. */
#include "cleave/kernels.h"
#include "kernels/simd.h"

#include <math.h>
#include <stddef.h>

#include "kernels/fp_exact.h"
#if defined(__GNUC__) && !defined(__clang__)
/* -O2's vectorizer takes only loops it needs no alias check or remainder for; the element loops here need both
 * (out may be in, din may be dout). Vector lanes compute each element as the scalar code does, and the sums in
 * order are never vectorized (no reassociation): the same bits. */
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

#define CL_LAYERNORM_EPS 1e-5

/* Rows go in groups of LN_GROUP: each row's sums run in its own order, one value after another as ever, but
 * the group's chains are interleaved, so the adds of four rows overlap where one row's waited on each other
 * (latency-bound double sums: 2.2-2.5x on a Zen 5 core), the same bits. */
enum { LN_GROUP = 4 };

/* Split only when there is enough work to pay for waking the team. */
#define LN_PAR(N, C) ((int64_t)(N) * (C) >= 65536)

/* A row's mean and rstd: double sums, two passes. */
static void ln_stats(float *mean, float *rstd, const float *x, int C) {
    double s = 0.0;
    for (int c = 0; c < C; c++) s += x[c];
    double mu = C > 0 ? s / C : 0.0;
    double ss = 0.0;
    for (int c = 0; c < C; c++) {
        double d = x[c] - mu;
        ss += d * d;
    }
    double var = C > 0 ? ss / C : 0.0;
    *mean = (float)mu;
    *rstd = (float)(1.0 / sqrt(var + CL_LAYERNORM_EPS));
}

/* ln_stats of LN_GROUP rows (row stride ld), their chains interleaved: the same bits as ln_stats on each. */
static void ln_stats_group(float *mean, float *rstd, const float *x, int64_t ld, int C) {
    const float *x0 = x, *x1 = x + ld, *x2 = x + 2 * ld, *x3 = x + 3 * ld;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (int c = 0; c < C; c++) s0 += x0[c], s1 += x1[c], s2 += x2[c], s3 += x3[c];
    double m0 = C > 0 ? s0 / C : 0.0, m1 = C > 0 ? s1 / C : 0.0, m2 = C > 0 ? s2 / C : 0.0, m3 = C > 0 ? s3 / C : 0.0;
    double q0 = 0.0, q1 = 0.0, q2 = 0.0, q3 = 0.0;
    for (int c = 0; c < C; c++) {
        double d0 = x0[c] - m0, d1 = x1[c] - m1, d2 = x2[c] - m2, d3 = x3[c] - m3;
        q0 += d0 * d0, q1 += d1 * d1, q2 += d2 * d2, q3 += d3 * d3;
    }
    double mu[LN_GROUP] = {m0, m1, m2, m3}, ss[LN_GROUP] = {q0, q1, q2, q3};
    for (int j = 0; j < LN_GROUP; j++) {
        double var = C > 0 ? ss[j] / C : 0.0;
        mean[j] = (float)mu[j];
        rstd[j] = (float)(1.0 / sqrt(var + CL_LAYERNORM_EPS));
    }
}

/* The statistics of rows n0 .. n0 + nr (nr <= LN_GROUP) of x (row stride C): a whole group interleaved. */
static void ln_stats_rows(float *mean, float *rstd, const float *x, int nr, int C) {
    if (nr == LN_GROUP) {
        ln_stats_group(mean, rstd, x, C, C);
        return;
    }
    for (int j = 0; j < nr; j++) ln_stats(mean + j, rstd + j, x + (int64_t)j * C, C);
}

/* Columns [c0, c1) of a normalized row, written from o[0]. */
static void ln_norm(float *o, const float *x, float m, float r, const float *w, const float *b, int c0, int c1) {
    for (int c = c0; c < c1; c++) o[c - c0] = (x[c] - m) * r * w[c] + b[c];
}

/* The rows of group g (rows 4g .. 4g + 4 of N) as the row x: a, or res = a + r first when r is given (res may be
 * a); their statistics; *n0 and *nr the group's first row and count. */
static const float *ln_group_input(float *mean, float *rstd, float *res, const float *a, const float *r, int g, int N,
                                   int C, int *n0, int *nr) {
    *n0 = g * LN_GROUP;
    *nr = N - *n0 < LN_GROUP ? N - *n0 : LN_GROUP;
    int64_t o = (int64_t)*n0 * C, len = (int64_t)*nr * C;
    const float *x = a + o;
    if (r) {
        for (int64_t i = 0; i < len; i++) res[o + i] = a[o + i] + r[o + i];
        x = res + o;
    }
    ln_stats_rows(mean + *n0, rstd + *n0, x, *nr, C);
    return x;
}

#define LN_GROUPS(N) (((N) + LN_GROUP - 1) / LN_GROUP)

/* out = LN(x) by groups of rows, x = a or res = a + r (ln_group_input). */
static void ln_forward(float *out, float *mean, float *rstd, float *res, const float *a, const float *r, const float *w,
                       const float *b, int N, int C) {
#pragma omp parallel for schedule(static) if (LN_PAR(N, C))
    for (int g = 0; g < LN_GROUPS(N); g++) {
        int n0, nr;
        const float *x = ln_group_input(mean, rstd, res, a, r, g, N, C, &n0, &nr);
        for (int j = 0; j < nr; j++)
            ln_norm(out + (int64_t)(n0 + j) * C, x + (int64_t)j * C, mean[n0 + j], rstd[n0 + j], w, b, 0, C);
    }
}

void cl_layernorm_forward(float *out, float *mean, float *rstd, const float *in,
                          const float *w, const float *b, int N, int C) {
    ln_forward(out, mean, rstd, NULL, in, NULL, w, b, N, C);
}

void cl_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a,
                                   const float *r, const float *w, const float *b, int N, int C) {
    ln_forward(out, mean, rstd, res, a, r, w, b, N, C);
}

/* A row's sums for its input gradient: sum g and sum g xhat, g = dout * w, in double, in column order. */
static void ln_bwd_sums(double *sg, double *sgx, const float *d, const float *x, const float *w, float m, float r, int C) {
    double a = 0.0, b = 0.0;
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - m) * r;
        float g = d[c] * w[c];
        a += g;
        b += (double)g * xhat;
    }
    *sg = a, *sgx = b;
}

/* ln_bwd_sums of LN_GROUP rows (row stride C), their chains interleaved: the same bits as on each. */
static void ln_bwd_sums_group(double *sg, double *sgx, const float *d, const float *x, const float *w, const float *m,
                              const float *r, int C) {
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0, b0 = 0.0, b1 = 0.0, b2 = 0.0, b3 = 0.0;
    const float *d1 = d + C, *d2 = d + 2 * (int64_t)C, *d3 = d + 3 * (int64_t)C;
    const float *x1 = x + C, *x2 = x + 2 * (int64_t)C, *x3 = x + 3 * (int64_t)C;
    for (int c = 0; c < C; c++) {
        float h0 = (x[c] - m[0]) * r[0], h1 = (x1[c] - m[1]) * r[1], h2 = (x2[c] - m[2]) * r[2], h3 = (x3[c] - m[3]) * r[3];
        float g0 = d[c] * w[c], g1 = d1[c] * w[c], g2 = d2[c] * w[c], g3 = d3[c] * w[c];
        a0 += g0, a1 += g1, a2 += g2, a3 += g3;
        b0 += (double)g0 * h0, b1 += (double)g1 * h1, b2 += (double)g2 * h2, b3 += (double)g3 * h3;
    }
    sg[0] = a0, sg[1] = a1, sg[2] = a2, sg[3] = a3;
    sgx[0] = b0, sgx[1] = b1, sgx[2] = b2, sgx[3] = b3;
}

/* One row of din += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w, its sums given. */
static void ln_bwd_row(float *dx, const float *d, const float *x, const float *w, float m, float r, double sg, double sgx,
                       int C) {
    float mg = (float)(sg / C), mgx = (float)(sgx / C);
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - m) * r;
        float g = d[c] * w[c];
        dx[c] += r * (g - mg - xhat * mgx);
    }
}

/* The rows of din += the input gradient, by groups of rows (every row's sums before any row of the group is
 * written: din may be dout); with dbf, each finished row of din rounded into dbf too while it is in cache (v:
 * cl_simd_level()). */
static void ln_bwd_rows(float *din, uint16_t *dbf, const float *dout, const float *in, const float *w,
                        const float *mean, const float *rstd, int N, int C, int v) {
#pragma omp parallel for schedule(static) if (LN_PAR(N, C))
    for (int g = 0; g < LN_GROUPS(N); g++) {
        int n0 = g * LN_GROUP, nr = N - n0 < LN_GROUP ? N - n0 : LN_GROUP;
        int64_t o = (int64_t)n0 * C;
        double sg[LN_GROUP], sgx[LN_GROUP];
        if (nr == LN_GROUP) ln_bwd_sums_group(sg, sgx, dout + o, in + o, w, mean + n0, rstd + n0, C);
        else
            for (int j = 0; j < nr; j++)
                ln_bwd_sums(sg + j, sgx + j, dout + o + (int64_t)j * C, in + o + (int64_t)j * C, w, mean[n0 + j], rstd[n0 + j], C);
        for (int j = 0; j < nr; j++) {
            int64_t oj = o + (int64_t)j * C;
            ln_bwd_row(din + oj, dout + oj, in + oj, w, mean[n0 + j], rstd[n0 + j], sg[j], sgx[j], C);
            if (dbf) cl_bf16_pack_serial(dbf + oj, din + oj, C, v);
        }
    }
}

void cl_layernorm_backward_input(float *din, const float *dout, const float *in,
                                 const float *w, const float *mean, const float *rstd,
                                 int N, int C) {
    ln_bwd_rows(din, NULL, dout, in, w, mean, rstd, N, C, 0);
}

void cl_layernorm_backward_input_bf16(float *din, uint16_t *dbf, const float *dout, const float *in, const float *w,
                                      const float *mean, const float *rstd, int N, int C) {
    ln_bwd_rows(din, dbf, dout, in, w, mean, rstd, N, C, cl_simd_level());
}

void cl_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *in,
                                  const float *mean, const float *rstd, int N, int C) {
    enum { COLS = 64 };
    int nb = (C + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if (LN_PAR(N, C))
    for (int cb = 0; cb < nb; cb++) {
        int c0 = cb * COLS, c1 = c0 + COLS < C ? c0 + COLS : C;
        if (c1 - c0 == COLS) { /* a whole block in local sums (no aliasing, a fixed count: the compiler's vectors) */
            float sw[COLS], sb[COLS];
            for (int c = 0; c < COLS; c++) sw[c] = dw[c0 + c], sb[c] = db[c0 + c];
            for (int n = 0; n < N; n++) {
                const float *x = in + (int64_t)n * C + c0;
                const float *d = dout + (int64_t)n * C + c0;
                float m = mean[n], r = rstd[n];
                for (int c = 0; c < COLS; c++) {
                    sw[c] += d[c] * ((x[c] - m) * r);
                    sb[c] += d[c];
                }
            }
            for (int c = 0; c < COLS; c++) dw[c0 + c] = sw[c], db[c0 + c] = sb[c];
            continue;
        }
        for (int n = 0; n < N; n++) {
            const float *x = in + (int64_t)n * C;
            const float *d = dout + (int64_t)n * C;
            float m = mean[n], r = rstd[n];
            for (int c = c0; c < c1; c++) {
                dw[c] += d[c] * ((x[c] - m) * r);
                db[c] += d[c];
            }
        }
    }
}

/* A row of x (its statistics m, r known) normalized and rounded to BF16 into obf, and kept in F32 in o when o is
 * given: each BF16 value the F32 value rounded once (v: cl_simd_level()). */
static void ln_out_bf16(uint16_t *obf, float *o, const float *x, float m, float r, const float *w, const float *b, int C, int v) {
    if (o) {
        ln_norm(o, x, m, r, w, b, 0, C);
        cl_bf16_pack_serial(obf, o, C, v);
        return;
    }
    enum { CHUNK = 512 };
    float tmp[CHUNK];
    for (int c0 = 0; c0 < C; c0 += CHUNK) {
        int c1 = C - c0 < CHUNK ? C : c0 + CHUNK;
        ln_norm(tmp, x, m, r, w, b, c0, c1);
        cl_bf16_pack_serial(obf + c0, tmp, c1 - c0, v);
    }
}

/* ln_forward with the output in BF16 (and F32 in out when out is given). */
static void ln_forward_bf16(uint16_t *out_bf, float *out, float *mean, float *rstd, float *res, const float *a, const float *r,
                            const float *w, const float *b, int N, int C) {
    int v = cl_simd_level();
#pragma omp parallel for schedule(static) if (LN_PAR(N, C))
    for (int g = 0; g < LN_GROUPS(N); g++) {
        int n0, nr;
        const float *x = ln_group_input(mean, rstd, res, a, r, g, N, C, &n0, &nr);
        for (int j = 0; j < nr; j++) {
            int64_t o = (int64_t)(n0 + j) * C;
            ln_out_bf16(out_bf + o, out ? out + o : NULL, x + (int64_t)j * C, mean[n0 + j], rstd[n0 + j], w, b, C, v);
        }
    }
}

void cl_layernorm_forward_bf16(uint16_t *out_bf, float *out, float *mean, float *rstd, const float *in,
                               const float *w, const float *b, int N, int C) {
    ln_forward_bf16(out_bf, out, mean, rstd, NULL, in, NULL, w, b, N, C);
}

void cl_residual_layernorm_forward_bf16(float *res, uint16_t *out_bf, float *out, float *mean, float *rstd,
                                        const float *a, const float *r, const float *w, const float *b, int N,
                                        int C) {
    ln_forward_bf16(out_bf, out, mean, rstd, res, a, r, w, b, N, C);
}
