/* AdamW, the optimizer step, plus the reductions gradient clipping needs.
 *
 * cl_adamw_update reproduces torch.optim.AdamW (PyTorch 1.13, single-tensor,
 * no amsgrad) operation by operation, so that the f32 results match:
 *   p *= (1 - lr*wd)
 *   m = m*b1 + (1-b1)*g
 *   v = v*b2 + ((1-b2)*g)*g
 *   denom = sqrt(v) / sqrt(1 - b2^t) + eps
 *   p = p - ((lr / (1 - b1^t)) * m) / denom
 * Scalar factors are formed in double (as Python forms them) and rounded to
 * f32 once; per-element arithmetic is f32 in exactly this order, so the
 * compiler must not fuse a*b+c into an FMA: GCC does not in ISO mode
 * (-std=c11, the build's), and the pragmas below say so for the rest. */
#include "cleave/kernels.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>

void cl_adamw_update(float *p, const float *g, float *m, float *v, int64_t n,
                     float lr, float b1, float b2, float eps, float wd, int t) {
    float decay = (float)(1.0 - (double)lr * (double)wd);
    float omb1 = (float)(1.0 - (double)b1);
    float omb2 = (float)(1.0 - (double)b2);
    double bc1 = 1.0 - pow((double)b1, (double)t);
    double bc2 = 1.0 - pow((double)b2, (double)t);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float pi = p[i] * decay;
        float mi = m[i] * b1 + omb1 * gi;
        float vi = v[i] * b2 + omb2 * gi * gi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi - step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

double cl_sumsq(const float *x, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

void cl_scale(float *x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}
