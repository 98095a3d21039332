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

/* Split only when there is enough work to pay for waking the team. */
#define RMS_PAR(N, C) ((int64_t)(N) * (C) >= 65536)

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

/* Columns [c0, c1) of a row's output, o[c - c0] = w * (x * r). */
static void rms_norm(float *o, const float *x, float r, const float *w, int c0, int c1) {
    for (int c = c0; c < c1; c++) {
        float xn = x[c] * r;
        o[c - c0] = w[c] * xn;
    }
}

/* One row: out = RMSNorm(x); x is res = a + r first when r is given (res may be a). */
static void rms_row(float *o, float *rstd, float *res, const float *a, const float *r_in, const float *w, float eps,
                    int C) {
    const float *x = rms_stats(rstd, res, a, r_in, eps, C);
    rms_norm(o, x, *rstd, w, 0, C);
}

/* The row as rms_row, the output rounded to BF16 chunk by chunk. */
static void rms_row_bf16(uint16_t *obf, float *rstd, float *res, const float *a, const float *r_in, const float *w,
                         float eps, int C, int v) {
    const float *x = rms_stats(rstd, res, a, r_in, eps, C);
    enum { CHUNK = 512 };
    float tmp[CHUNK];
    for (int c0 = 0; c0 < C; c0 += CHUNK) {
        int c1 = C - c0 < CHUNK ? C : c0 + CHUNK;
        rms_norm(tmp, x, *rstd, w, c0, c1);
        cl_bf16_pack_serial(obf + c0, tmp, c1 - c0, v);
    }
}

void cl_rmsnorm_forward(float *out, float *rstd, const float *in, const float *w, float eps, int N, int C) {
#pragma omp parallel for schedule(static) if (RMS_PAR(N, C))
    for (int n = 0; n < N; n++) rms_row(out + (int64_t)n * C, rstd + n, NULL, in + (int64_t)n * C, NULL, w, eps, C);
}

void cl_residual_rmsnorm_forward(float *res, float *out, float *rstd, const float *a, const float *r, const float *w,
                                 float eps, int N, int C) {
#pragma omp parallel for schedule(static) if (RMS_PAR(N, C))
    for (int n = 0; n < N; n++) {
        int64_t o = (int64_t)n * C;
        rms_row(out + o, rstd + n, res + o, a + o, r + o, w, eps, C);
    }
}

void cl_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *in, const float *w, float eps, int N, int C) {
    int v = cl_simd_level();
#pragma omp parallel for schedule(static) if (RMS_PAR(N, C))
    for (int n = 0; n < N; n++) rms_row_bf16(out + (int64_t)n * C, rstd + n, NULL, in + (int64_t)n * C, NULL, w, eps, C, v);
}

void cl_residual_rmsnorm_forward_bf16(float *res, uint16_t *out, float *rstd, const float *a, const float *r, const float *w,
                                      float eps, int N, int C) {
    int v = cl_simd_level();
#pragma omp parallel for schedule(static) if (RMS_PAR(N, C))
    for (int n = 0; n < N; n++) {
        int64_t o = (int64_t)n * C;
        rms_row_bf16(out + o, rstd + n, res + o, a + o, r + o, w, eps, C, v);
    }
}

void cl_rmsnorm_backward_input(float *din, const float *dout, const float *in, const float *w, const float *rstd,
                               int N, int C) {
#pragma omp parallel for schedule(static) if (RMS_PAR(N, C))
    for (int n = 0; n < N; n++) {
        const float *x = in + (int64_t)n * C;
        const float *d = dout + (int64_t)n * C;
        float *dx = din + (int64_t)n * C;
        float r = rstd[n];
        double s = 0.0;
        for (int c = 0; c < C; c++) s += (double)(d[c] * w[c]) * x[c];
        float k = (float)((double)r * r * r * s / C);
        for (int c = 0; c < C; c++) dx[c] += r * (d[c] * w[c]) - x[c] * k;
    }
}

void cl_rmsnorm_backward_weight(float *dw, const float *dout, const float *in, const float *rstd, int N, int C) {
    enum { COLS = 64 };
    int nb = (C + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if (RMS_PAR(N, C))
    for (int cb = 0; cb < nb; cb++) {
        int c0 = cb * COLS, c1 = c0 + COLS < C ? c0 + COLS : C;
        for (int n = 0; n < N; n++) {
            const float *x = in + (int64_t)n * C;
            const float *d = dout + (int64_t)n * C;
            float r = rstd[n];
            for (int c = c0; c < c1; c++) dw[c] += d[c] * (x[c] * r);
        }
    }
}
