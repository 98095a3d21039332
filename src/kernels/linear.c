/* Linear layer kernels: out[N,OC] = in[N,IC] @ w[IC,OC] + b[OC].
 *
 * The weight layout is [IC, OC] (Hugging Face GPT-2's Conv1D), so the
 * forward is a plain in @ w. All three products go through cl_gemm.
 * Backward kernels add into their outputs (the weight gradient: unless its
 * caller's beta is 0, cl_nn_grad_beta); the forward overwrites out. */
#include "cleave/kernels.h"

void cl_linear_forward(float *out, const float *in, const float *w, const float *b,
                       int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    float beta = 0.0f;
    if (b) {
        for (int n = 0; n < N; n++) {
            float *o = out + (int64_t)n * OC;
            for (int j = 0; j < OC; j++) o[j] = b[j];
        }
        beta = 1.0f;
    }
    cl_gemm(0, 0, N, OC, IC, 1.0f, in, IC, w, OC, beta, out, OC);
}

void cl_linear_backward_input(float *din, const float *dout, const float *w,
                              int N, int IC, int OC) {
    /* din[N,IC] += dout[N,OC] @ w[IC,OC]^T */
    cl_gemm(0, 1, N, IC, OC, 1.0f, dout, OC, w, OC, 1.0f, din, IC);
}

void cl_linear_backward_weight(float *dw, float *db, const float *dout, const float *in,
                               int N, int IC, int OC, float beta) {
    /* dw[IC,OC] = in[N,IC]^T @ dout[N,OC] + beta dw */
    cl_gemm(1, 0, IC, OC, N, 1.0f, in, IC, dout, OC, beta, dw, OC);
    if (db) {
        for (int n = 0; n < N; n++) {
            const float *d = dout + (int64_t)n * OC;
            for (int j = 0; j < OC; j++) db[j] += d[j];
        }
    }
}
