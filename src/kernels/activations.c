/* Element-wise kernels: GELU (GPT-2's tanh form), ReLU, residual add.
 *
 * GELU: out = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3);
 *   d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3*0.044715 x^2).
 * ReLU's backward takes the forward output: the gradient passes where
 * out > 0. Backward kernels add into din. */
#include "cleave/kernels.h"

#include <math.h>

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

void cl_gelu_forward(float *out, const float *in, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = in[i];
        float u = GELU_K * (x + GELU_C * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

void cl_gelu_backward(float *din, const float *dout, const float *in, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = in[i];
        float u = GELU_K * (x + GELU_C * x * x * x);
        float th = tanhf(u);
        float du = GELU_K * (1.0f + 3.0f * GELU_C * x * x);
        float g = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
        din[i] += g * dout[i];
    }
}

void cl_relu_forward(float *out, const float *in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void cl_relu_backward(float *din, const float *dout, const float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (out[i] > 0.0f) din[i] += dout[i];
}

void cl_residual_forward(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void cl_add_inplace(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] += src[i];
}
