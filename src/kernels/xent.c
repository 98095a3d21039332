/* Fused softmax + cross-entropy over logits[N,V].
 *
 * Forward, per row in double: lse = max + log(sum exp(x - max)),
 * loss = lse - x[target]. Rows with target -1 are ignored: loss 0 (lse is
 * still saved). Backward: dlogits += dloss * (exp(x - lse) - onehot);
 * ignored rows get nothing. When dlogits == logits (llm.c's in-place mode,
 * which saves an N x V buffer) each row is read and then overwritten: the
 * gradient is assigned, and ignored rows become 0. Partial overlap of the
 * two buffers is not supported. Targets must be -1 or lie in [0, V). */
#include "cleave/kernels.h"

#include "cleave/core.h"

#include <math.h>

void cl_xent_forward(float *losses, float *lse, const float *logits,
                     const int32_t *targets, int N, int V) {
    for (int n = 0; n < N; n++) {
        const float *x = logits + (int64_t)n * V;
        int32_t tg = targets[n];
        CL_ASSERT(tg >= -1 && tg < V);
        double mx = -INFINITY;
        for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        double s = 0.0;
        for (int j = 0; j < V; j++) s += exp((double)x[j] - mx);
        double l = mx + log(s);
        lse[n] = (float)l;
        losses[n] = tg < 0 ? 0.0f : (float)(l - x[tg]);
    }
}

void cl_xent_backward(float *dlogits, const float *logits, const float *lse,
                      const int32_t *targets, float dloss, int N, int V) {
    int inplace = dlogits == logits;
    for (int n = 0; n < N; n++) {
        const float *x = logits + (int64_t)n * V;
        float *dx = dlogits + (int64_t)n * V;
        int32_t tg = targets[n];
        CL_ASSERT(tg >= -1 && tg < V);
        if (tg < 0) {
            if (inplace)
                for (int j = 0; j < V; j++) dx[j] = 0.0f;
            continue;
        }
        double l = lse[n];
        for (int j = 0; j < V; j++) {
            float p = (float)exp((double)x[j] - l);
            float g = dloss * (p - (j == tg ? 1.0f : 0.0f));
            if (inplace) dx[j] = g;
            else dx[j] += g;
        }
    }
}
