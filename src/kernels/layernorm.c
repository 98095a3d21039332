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

#define CL_LAYERNORM_EPS 1e-5

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

/* Columns [c0, c1) of a normalized row, written from o[0]. */
static void ln_norm(float *o, const float *x, float m, float r, const float *w, const float *b, int c0, int c1) {
    for (int c = c0; c < c1; c++) o[c - c0] = (x[c] - m) * r * w[c] + b[c];
}

/* One row: out = LN(x); x is res = a + r first when r is given (res may be a). */
static void ln_row(float *o, float *mean, float *rstd, float *res, const float *a, const float *r_in,
                   const float *w, const float *b, int C) {
    const float *x = a;
    if (r_in) {
        for (int c = 0; c < C; c++) res[c] = a[c] + r_in[c];
        x = res;
    }
    ln_stats(mean, rstd, x, C);
    ln_norm(o, x, *mean, *rstd, w, b, 0, C);
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

/* One row of din += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w. */
static void ln_bwd_row(float *dx, const float *d, const float *x, const float *w, float m, float r, int C) {
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

/* The rows of din += the input gradient; with dbf, each finished row of din
 * rounded into dbf too while it is in cache (v: cl_simd_level()). */
static void ln_bwd_rows(float *din, uint16_t *dbf, const float *dout, const float *in, const float *w,
                        const float *mean, const float *rstd, int N, int C, int v) {
#pragma omp parallel for schedule(static) if (LN_PAR(N, C))
    for (int n = 0; n < N; n++) {
        int64_t o = (int64_t)n * C;
        ln_bwd_row(din + o, dout + o, in + o, w, mean[n], rstd[n], C);
        if (dbf) cl_bf16_pack_serial(dbf + o, din + o, C, v);
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

/* The row as ln_row, the output rounded to BF16 (and kept in F32 in o when o is given). */
static void ln_row_bf16(uint16_t *obf, float *o, float *mean, float *rstd, float *res, const float *a,
                        const float *r_in, const float *w, const float *b, int C, int v) {
    if (o) {
        ln_row(o, mean, rstd, res, a, r_in, w, b, C);
        cl_bf16_pack_serial(obf, o, C, v);
        return;
    }
    const float *x = a;
    if (r_in) {
        for (int c = 0; c < C; c++) res[c] = a[c] + r_in[c];
        x = res;
    }
    ln_stats(mean, rstd, x, C);
    enum { CHUNK = 512 };
    float tmp[CHUNK];
    for (int c0 = 0; c0 < C; c0 += CHUNK) {
        int c1 = C - c0 < CHUNK ? C : c0 + CHUNK;
        ln_norm(tmp, x, *mean, *rstd, w, b, c0, c1);
        cl_bf16_pack_serial(obf + c0, tmp, c1 - c0, v);
    }
}

void cl_layernorm_forward_bf16(uint16_t *out_bf, float *out, float *mean, float *rstd, const float *in,
                               const float *w, const float *b, int N, int C) {
    int v = cl_simd_level();
#pragma omp parallel for schedule(static) if (LN_PAR(N, C))
    for (int n = 0; n < N; n++) {
        int64_t o = (int64_t)n * C;
        ln_row_bf16(out_bf + o, out ? out + o : NULL, mean + n, rstd + n, NULL, in + o, NULL, w, b, C, v);
    }
}

void cl_residual_layernorm_forward_bf16(float *res, uint16_t *out_bf, float *out, float *mean, float *rstd,
                                        const float *a, const float *r, const float *w, const float *b, int N,
                                        int C) {
    int v = cl_simd_level();
#pragma omp parallel for schedule(static) if (LN_PAR(N, C))
    for (int n = 0; n < N; n++) {
        int64_t o = (int64_t)n * C;
        ln_row_bf16(out_bf + o, out ? out + o : NULL, mean + n, rstd + n, res + o, a + o, r + o, w, b, C, v);
    }
}
