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
 * row order on one thread), so the bits do not depend on the thread count. */
#include "cleave/kernels.h"

#include <math.h>
#include <stddef.h>

/* Split only when there is enough work to pay for waking the team. */
#define RMS_PAR(N, C) ((int64_t)(N) * (C) >= 65536)

/* One row: out = RMSNorm(x); x is res = a + r first when r is given (res may be a). */
static void rms_row(float *o, float *rstd, float *res, const float *a, const float *r_in, const float *w, float eps,
                    int C) {
    const float *x = a;
    if (r_in) {
        for (int c = 0; c < C; c++) res[c] = a[c] + r_in[c];
        x = res;
    }
    double ss = 0.0;
    for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
    double ms = C > 0 ? ss / C : 0.0;
    float r = (float)(1.0 / sqrt(ms + (double)eps));
    for (int c = 0; c < C; c++) {
        float xn = x[c] * r;
        o[c] = w[c] * xn;
    }
    *rstd = r;
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
