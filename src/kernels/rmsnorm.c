/* RMS normalization over the last dimension, as Hugging Face's LlamaRMSNorm
 * computes it in F32:
 *   out = w * (x * rstd),  rstd = 1 / sqrt(mean(x^2) + eps),
 * the product x * rstd rounded first, then the weight (HF's order). The mean
 * of squares is summed in double and rstd rounded once to f32; it is saved
 * per row (rstd[N]) for the backward passes, which recompute x * rstd from
 * the input instead of keeping it. No mean, no bias.
 * Backward (g = dout * w, s = sum_c g_c x_c):
 *   din += rstd * g - x * (rstd^3 s / C),   dw += sum over rows of dout * x * rstd.
 * Backward kernels add into their outputs. Rows are spread over the thread
 * team (the weight gradient by column ranges, each column's sum over rows in
 * row order on one thread), so the bits do not depend on the thread count.
 * The _bf16 forms (bf16 mixed precision: the normalized row feeds a GEMM
 * with BF16 operands) write the output as BF16 only, each value
 * cl_bf16_from_f32 of the F32 kernel's (the same expression, then one
 * rounding), rstd and res F32 as always. */
#include "cleave/kernels.h"
#include "kernels/simd.h"

#include <math.h>
#include <stddef.h>

#include "kernels/fp_exact.h"
#if defined(__GNUC__) && !defined(__clang__)
/* the element loops vectorized with alias checks and remainders, the same bits (layernorm.c says why) */
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* Split only when there is enough work to pay for waking the team. */
#define RMS_PAR(N, C) ((int64_t)(N) * (C) >= 65536)

/* Rows go in groups of RMS_GROUP, their double sums' chains interleaved (each row's in its own order, one value
 * after another as ever: the same bits), as layernorm.c's. */
enum { RMS_GROUP = 4 };
#define RMS_GROUPS(N) (((N) + RMS_GROUP - 1) / RMS_GROUP)

/* One row's input and rstd: x is res = a + r first when r is given (res may be a). */
static const float *rms_stats(float *rstd, float *res, const float *a, const float *r_in, float eps, int C) {
    const float *x = a;
    if (r_in) {
        for (int c = 0; c < C; c++) res[c] = a[c] + r_in[c];
        x = res;
    }
    double ss = 0.0;
    for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
    double ms = C > 0 ? ss / C : 0.0;
    *rstd = (float)(1.0 / sqrt(ms + (double)eps));
    return x;
}

/* The rows of group g (rows 4g .. 4g + 4 of N) as x: a, or res = a + r first when r is given (res may be a), and
 * their rstd, four rows' sums of squares interleaved; *n0 and *nr the group's first row and count. */
static const float *rms_group_input(float *rstd, float *res, const float *a, const float *r, float eps, int g, int N, int C,
                                    int *n0, int *nr) {
    *n0 = g * RMS_GROUP;
    *nr = N - *n0 < RMS_GROUP ? N - *n0 : RMS_GROUP;
    int64_t o = (int64_t)*n0 * C;
    if (*nr < RMS_GROUP) {
        for (int j = 0; j < *nr; j++)
            rms_stats(rstd + *n0 + j, res ? res + o + (int64_t)j * C : NULL, a + o + (int64_t)j * C, r ? r + o + (int64_t)j * C : NULL,
                      eps, C);
        return r ? res + o : a + o;
    }
    const float *x = a + o;
    if (r) {
        for (int64_t i = 0; i < (int64_t)RMS_GROUP * C; i++) res[o + i] = a[o + i] + r[o + i];
        x = res + o;
    }
    const float *x1 = x + C, *x2 = x + 2 * (int64_t)C, *x3 = x + 3 * (int64_t)C;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (int c = 0; c < C; c++) {
        s0 += (double)x[c] * x[c], s1 += (double)x1[c] * x1[c];
        s2 += (double)x2[c] * x2[c], s3 += (double)x3[c] * x3[c];
    }
    double ss[RMS_GROUP] = {s0, s1, s2, s3};
    for (int j = 0; j < RMS_GROUP; j++) {
        double ms = C > 0 ? ss[j] / C : 0.0;
        rstd[*n0 + j] = (float)(1.0 / sqrt(ms + (double)eps));
    }
    return x;
}

/* Columns [c0, c1) of a row's output, o[c - c0] = w * (x * r). */
static void rms_norm(float *o, const float *x, float r, const float *w, int c0, int c1) {
    for (int c = c0; c < c1; c++) {
        float xn = x[c] * r;
        o[c - c0] = w[c] * xn;
    }
}

/* out = RMSNorm(x) by groups of rows (rms_group_input); obf: the output rounded to BF16 chunk by chunk instead
 * (v: cl_simd_level()). */
static void rms_forward(float *out, uint16_t *obf, float *rstd, float *res, const float *a, const float *r, const float *w,
                        float eps, int N, int C, int v) {
#pragma omp parallel for schedule(static) if (RMS_PAR(N, C))
    for (int g = 0; g < RMS_GROUPS(N); g++) {
        int n0, nr;
        const float *xg = rms_group_input(rstd, res, a, r, eps, g, N, C, &n0, &nr);
        for (int j = 0; j < nr; j++) {
            int64_t o = (int64_t)(n0 + j) * C;
            const float *x = xg + (int64_t)j * C;
            if (!obf) {
                rms_norm(out + o, x, rstd[n0 + j], w, 0, C);
                continue;
            }
            enum { CHUNK = 512 };
            float tmp[CHUNK];
            for (int c0 = 0; c0 < C; c0 += CHUNK) {
                int c1 = C - c0 < CHUNK ? C : c0 + CHUNK;
                rms_norm(tmp, x, rstd[n0 + j], w, c0, c1);
                cl_bf16_pack_serial(obf + o + c0, tmp, c1 - c0, v);
            }
        }
    }
}

void cl_rmsnorm_forward(float *out, float *rstd, const float *in, const float *w, float eps, int N, int C) {
    rms_forward(out, NULL, rstd, NULL, in, NULL, w, eps, N, C, 0);
}

void cl_residual_rmsnorm_forward(float *res, float *out, float *rstd, const float *a, const float *r, const float *w,
                                 float eps, int N, int C) {
    rms_forward(out, NULL, rstd, res, a, r, w, eps, N, C, 0);
}

void cl_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *in, const float *w, float eps, int N, int C) {
    rms_forward(NULL, out, rstd, NULL, in, NULL, w, eps, N, C, cl_simd_level());
}

void cl_residual_rmsnorm_forward_bf16(float *res, uint16_t *out, float *rstd, const float *a, const float *r, const float *w,
                                      float eps, int N, int C) {
    rms_forward(NULL, out, rstd, res, a, r, w, eps, N, C, cl_simd_level());
}

/* One row's sum of (dout * w) x, in double, in column order. */
static double rms_bwd_sum(const float *d, const float *x, const float *w, int C) {
    double s = 0.0;
    for (int c = 0; c < C; c++) s += (double)(d[c] * w[c]) * x[c];
    return s;
}

void cl_rmsnorm_backward_input(float *din, const float *dout, const float *in, const float *w, const float *rstd,
                               int N, int C) {
#pragma omp parallel for schedule(static) if (RMS_PAR(N, C))
    for (int g = 0; g < RMS_GROUPS(N); g++) {
        int n0 = g * RMS_GROUP, nr = N - n0 < RMS_GROUP ? N - n0 : RMS_GROUP;
        int64_t o = (int64_t)n0 * C;
        double s[RMS_GROUP]; /* every row's sum before any row of the group is written (din may be dout) */
        if (nr == RMS_GROUP) {
            const float *d = dout + o, *x = in + o;
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
            for (int c = 0; c < C; c++) {
                s0 += (double)(d[c] * w[c]) * x[c];
                s1 += (double)(d[C + c] * w[c]) * x[C + c];
                s2 += (double)(d[2 * (int64_t)C + c] * w[c]) * x[2 * (int64_t)C + c];
                s3 += (double)(d[3 * (int64_t)C + c] * w[c]) * x[3 * (int64_t)C + c];
            }
            s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3;
        } else {
            for (int j = 0; j < nr; j++) s[j] = rms_bwd_sum(dout + o + (int64_t)j * C, in + o + (int64_t)j * C, w, C);
        }
        for (int j = 0; j < nr; j++) {
            const float *x = in + o + (int64_t)j * C;
            const float *d = dout + o + (int64_t)j * C;
            float *dx = din + o + (int64_t)j * C;
            float r = rstd[n0 + j];
            float k = (float)((double)r * r * r * s[j] / C);
            for (int c = 0; c < C; c++) dx[c] += r * (d[c] * w[c]) - x[c] * k;
        }
    }
}

void cl_rmsnorm_backward_weight(float *dw, const float *dout, const float *in, const float *rstd, int N, int C) {
    enum { COLS = 64 };
    int nb = (C + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if (RMS_PAR(N, C))
    for (int cb = 0; cb < nb; cb++) {
        int c0 = cb * COLS, c1 = c0 + COLS < C ? c0 + COLS : C;
        if (c1 - c0 == COLS) { /* a whole block in local sums (no aliasing, a fixed count: the compiler's vectors) */
            float sw[COLS];
            for (int c = 0; c < COLS; c++) sw[c] = dw[c0 + c];
            for (int n = 0; n < N; n++) {
                const float *x = in + (int64_t)n * C + c0;
                const float *d = dout + (int64_t)n * C + c0;
                float r = rstd[n];
                for (int c = 0; c < COLS; c++) sw[c] += d[c] * (x[c] * r);
            }
            for (int c = 0; c < COLS; c++) dw[c0 + c] = sw[c];
            continue;
        }
        for (int n = 0; n < N; n++) {
            const float *x = in + (int64_t)n * C;
            const float *d = dout + (int64_t)n * C;
            float r = rstd[n];
            for (int c = c0; c < c1; c++) dw[c] += d[c] * (x[c] * r);
        }
    }
}
