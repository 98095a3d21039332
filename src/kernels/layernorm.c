/* Layer normalization over the last dimension, PyTorch semantics:
 *   out = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + 1e-5),
 * with the biased variance (divide by C). Row statistics are computed in
 * double (two passes: mean, then centred squares) and saved as f32 mean[N],
 * rstd[N] for the backward passes, which recompute the normalized input
 * from them instead of keeping it. Backward kernels add into outputs.
 * Rows are spread over the thread team (the weight gradients by column
 * ranges, each column's sum over rows in row order on one thread), so the
 * bits do not depend on the thread count. */
#include "cleave/kernels.h"

#include <math.h>
#include <stddef.h>

#define CL_LAYERNORM_EPS 1e-5

/* Split only when there is enough work to pay for waking the team. */
#define LN_PAR(N, C) ((int64_t)(N) * (C) >= 65536)

/* One row: out = LN(x); x is res = a + r first when r is given (res may be a). */
static void ln_row(float *o, float *mean, float *rstd, float *res, const float *a, const float *r_in,
                   const float *w, const float *b, int C) {
    const float *x = a;
    if (r_in) {
        for (int c = 0; c < C; c++) res[c] = a[c] + r_in[c];
        x = res;
    }
    double s = 0.0;
    for (int c = 0; c < C; c++) s += x[c];
    double mu = C > 0 ? s / C : 0.0;
    double ss = 0.0;
    for (int c = 0; c < C; c++) {
        double d = x[c] - mu;
        ss += d * d;
    }
    double var = C > 0 ? ss / C : 0.0;
    float m = (float)mu;
    float r = (float)(1.0 / sqrt(var + CL_LAYERNORM_EPS));
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
    *mean = m;
    *rstd = r;
}

void cl_layernorm_forward(float *out, float *mean, float *rstd, const float *in,
                          const float *w, const float *b, int N, int C) {
#pragma omp parallel for schedule(static) if (LN_PAR(N, C))
    for (int n = 0; n < N; n++)
        ln_row(out + (int64_t)n * C, mean + n, rstd + n, NULL, in + (int64_t)n * C, NULL, w, b, C);
}

void cl_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a,
                                   const float *r, const float *w, const float *b, int N, int C) {
#pragma omp parallel for schedule(static) if (LN_PAR(N, C))
    for (int n = 0; n < N; n++) {
        int64_t o = (int64_t)n * C;
        ln_row(out + o, mean + n, rstd + n, res + o, a + o, r + o, w, b, C);
    }
}

/* din = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w. */
void cl_layernorm_backward_input(float *din, const float *dout, const float *in,
                                 const float *w, const float *mean, const float *rstd,
                                 int N, int C) {
#pragma omp parallel for schedule(static) if (LN_PAR(N, C))
    for (int n = 0; n < N; n++) {
        const float *x = in + (int64_t)n * C;
        const float *d = dout + (int64_t)n * C;
        float *dx = din + (int64_t)n * C;
        float m = mean[n], r = rstd[n];
        double sg = 0.0, sgx = 0.0;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * r;
            float g = d[c] * w[c];
            sg += g;
            sgx += (double)g * xhat;
        }
        float mg = (float)(sg / C), mgx = (float)(sgx / C);
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * r;
            float g = d[c] * w[c];
            dx[c] += r * (g - mg - xhat * mgx);
        }
    }
}

void cl_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *in,
                                  const float *mean, const float *rstd, int N, int C) {
    enum { COLS = 64 };
    int nb = (C + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if (LN_PAR(N, C))
    for (int cb = 0; cb < nb; cb++) {
        int c0 = cb * COLS, c1 = c0 + COLS < C ? c0 + COLS : C;
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
