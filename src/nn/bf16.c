/* bf16 mixed precision's helpers for the unit kinds (kind.h; docs/
 * ARCHITECTURE.md "bf16 mixed precision"). A description cut for
 * --dtype bf16 (cl_tp_layout's dtype) keeps F32 master weights and a BF16
 * copy of the whole parameter buffer (m->wlow, the same element offsets);
 * its kinds store the GEMM inputs they save as BF16 inside the float
 * buffers (n values in (n + 1)/2 floats) and run their GEMMs with BF16
 * operands and F32 accumulation and output (the device's gemm with
 * formats). Activation gradients are F32 and are narrowed into the
 * workspace just before a GEMM reads them.
 *
 * Invariants: nothing here runs for an F32 description (the kinds branch
 * on cl_nn_bf16 and keep their F32 calls untouched, so F32 bits do not
 * change); a weight's BF16 copy is valid from cl_model_refresh_low to the
 * next change of the master. Under ZeRO 3 m->wlow is the BF16 copy of the
 * rank's shard, and a parameter read through cl_nn_wlo is gathered from the
 * replicas' copies as BF16 (half the bytes of F32 gathers) into the unit's
 * working buffer, where m->p points (src/nn/zero3.c, unit_pieces). */
#include "nn/kind.h"
#include "nn/model_impl.h"

#include <pthread.h>
#include <stdlib.h>

int cl_nn_bf16(const cl_model_desc *d) { return d->tpl.dtype == CL_BF16; }

int64_t cl_nn_bf16_floats(int64_t n) { return (n + 1) / 2; }

int64_t cl_nn_gemm_in_floats(const cl_model_desc *d, int64_t n) { return cl_nn_bf16(d) ? cl_nn_bf16_floats(n) : n; }

const uint16_t *cl_nn_wlo(const cl_model *m, const float *w) {
    if (m->z3) { /* ZeRO 3: gathered as BF16 into a working buffer, m->p[i] aimed at it (zero3.c) */
        int in = 0;
        for (int k = 0; k < m->sizes.npwork; k++) in |= w >= m->pwork[k] && w < m->pwork[k] + m->sizes.pwork;
        CL_ASSERT(in);
        return (const uint16_t *)w;
    }
    CL_ASSERT(m->wlow && w >= m->params && w < m->params + m->sizes.params);
    return m->wlow + (w - m->params);
}

cl_status cl_nn_narrow(const cl_model *m, void *dst, const float *src, int64_t n) {
    return cl_device_convert(m->dev, dst, CL_BF16, src, CL_F32, (size_t)n);
}

void cl_nn_gemm_lo(const cl_model *m, int ta, int tb, int M, int N, int K, const void *A, int lda, const void *B, int ldb, float beta,
                   float *C, int ldc) {
    cl_kern(m)->gemm(ta, tb, M, N, K, 1.0f, A, CL_BF16, lda, B, CL_BF16, ldb, beta, C, CL_F32, ldc);
}

void cl_nn_gemm_lo_rows(const cl_model *m, int ta, int tb, int M, int N, int K, const void *A, int lda, const void *B, int ldb,
                        float beta, float *C, int ldc) {
    cl_kern(m)->gemm_rows(ta, tb, M, N, K, 1.0f, A, CL_BF16, lda, B, CL_BF16, ldb, beta, C, CL_F32, ldc);
}

void cl_nn_linear_lo(const cl_model *m, float *out, const void *x, const float *w, const float *bias, int64_t N, int64_t IC, int64_t OC) {
    cl_nn_gemm_lo(m, 0, 0, (int)N, (int)OC, (int)IC, x, (int)IC, cl_nn_wlo(m, w), (int)OC, 0.0f, out, (int)OC);
    if (bias) cl_kern(m)->add_bias(out, bias, N, OC);
}

void cl_nn_bias_grad(const cl_model *m, float *db, const float *dout, int64_t N, int64_t OC) {
    /* the weight part with no input columns (IC 0: an empty product) leaves only the bias sum */
    cl_kern(m)->linear_backward_weight(db, db, dout, NULL, (int)N, 0, (int)OC, 1.0f);
}

static pthread_once_t g_wgrad_once = PTHREAD_ONCE_INIT;
static int g_wgrad_plain; /* CLEAVE_WGRAD_PLAIN, read once (not a scan of the environment per product) */

static void wgrad_read_env(void) { g_wgrad_plain = getenv("CLEAVE_WGRAD_PLAIN") != NULL; }

const void *cl_nn_dweight_src(const cl_model *m, void *xt, const void *x, int64_t N, int64_t IC, int *ta, int *lda) {
    pthread_once(&g_wgrad_once, wgrad_read_env);
    if (!xt || !g_wgrad_plain) { /* strided unless asked: the step measured the plain route slower (PERFORMANCE.md) */
        *ta = 1, *lda = (int)IC;
        return x;
    }
    cl_kern(m)->transpose_bf16(xt, x, N, IC, IC, N);
    *ta = 0, *lda = (int)N;
    return xt;
}

void cl_nn_linear_dweight_lo(const cl_model *m, float *dw, float *db, const float *dout, const void *dout_lo, const void *x,
                             void *xt, int64_t N, int64_t IC, int64_t OC) {
    int ta, lda;
    const void *a = cl_nn_dweight_src(m, xt, x, N, IC, &ta, &lda);
    cl_nn_gemm_lo(m, ta, 0, (int)IC, (int)OC, (int)N, a, lda, dout_lo, (int)OC, cl_nn_grad_beta(m, dw), dw, (int)OC);
    if (db) cl_nn_bias_grad(m, db, dout, N, OC);
}

void cl_nn_linear_dweight(const cl_model *m, float *dw, float *db, const float *dout, const float *x, int64_t N, int64_t IC,
                          int64_t OC) {
    cl_kern(m)->linear_backward_weight(dw, db, dout, x, (int)N, (int)IC, (int)OC, cl_nn_grad_beta(m, dw));
}

cl_status cl_model_refresh_low(cl_model *m) {
    if (!m->wlow) return CL_OK;
    return cl_device_convert(m->dev, m->wlow, CL_BF16, m->params, CL_F32, (size_t)m->sizes.params);
}
