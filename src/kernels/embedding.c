/* Token + position embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
 *
 * There is no backward-input (tokens are integers); the weight pass
 * scatter-adds into dwte (repeated tokens accumulate) and adds the sum over
 * the batch into dwpe. Tokens must lie in [0, V); the caller (the data
 * loader) validates them, since V is not passed here. */
#include "cleave/kernels.h"

#include "cleave/core.h"

void cl_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                          const float *wpe, int B, int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int64_t bt = (int64_t)b * T + t;
            CL_ASSERT(tokens[bt] >= 0);
            const float *e = wte + (int64_t)tokens[bt] * C;
            const float *p = wpe + (int64_t)t * C;
            float *o = out + bt * C;
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        }
    }
}

void cl_embedding_backward_weight(float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, int B, int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int64_t bt = (int64_t)b * T + t;
            CL_ASSERT(tokens[bt] >= 0);
            const float *d = dout + bt * C;
            float *e = dwte + (int64_t)tokens[bt] * C;
            float *p = dwpe + (int64_t)t * C;
            for (int c = 0; c < C; c++) {
                e[c] += d[c];
                p[c] += d[c];
            }
        }
    }
}
