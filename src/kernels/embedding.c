/* Token + position embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
 *
 * There is no backward-input (tokens are integers); the weight pass
 * scatter-adds into dwte (repeated tokens accumulate) and adds the sum over
 * the batch into dwpe. Tokens must lie in [0, V); the caller (the data
 * loader) validates them, since V is not passed here.
 *
 * The slice kernels are the embedding unit's (src/nn/kind_embed.c): a rank
 * holding wte rows [v0, v0 + Vl) looks up its rows (zero for the others,
 * summed over the tensor-parallel group by the caller), adds positions to
 * its token rows, and adds the gradients into its rows and wpe. One rank
 * holds every row: the same adds as a plain lookup. */
#include "cleave/kernels.h"

#include "cleave/core.h"

#include <string.h>

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

void cl_embedding_lookup(float *out, const int32_t *tokens, const float *wte, int64_t N, int64_t C, int64_t v0,
                         int64_t Vl) {
    for (int64_t i = 0; i < N; i++) {
        int64_t r = tokens[i] - v0;
        float *o = out + i * C;
        if (r >= 0 && r < Vl) memcpy(o, wte + r * C, (size_t)C * sizeof(float));
        else memset(o, 0, (size_t)C * sizeof(float));
    }
}

void cl_embedding_add_positions(float *out, const float *wpe, int64_t Ns, int64_t row0, int64_t T, int64_t C) {
    for (int64_t i = 0; i < Ns; i++) {
        const float *pos = wpe + ((row0 + i) % T) * C;
        float *o = out + i * C;
        for (int64_t c = 0; c < C; c++) o[c] += pos[c];
    }
}

void cl_embedding_backward_slice(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int64_t N,
                                 int64_t T, int64_t C, int64_t v0, int64_t Vl) {
    for (int64_t i = 0; i < N; i++) {
        int64_t r = tokens[i] - v0;
        const float *dd = dout + i * C;
        if (!dwpe) { /* no learned positions (Llama's token embedding) */
            if (r >= 0 && r < Vl)
                for (int64_t c = 0; c < C; c++) dwte[r * C + c] += dout[i * C + c];
            continue;
        }
        float *pos = dwpe + (i % T) * C;
        if (r >= 0 && r < Vl) {
            float *e = dwte + r * C;
            for (int64_t c = 0; c < C; c++) {
                e[c] += dd[c];
                pos[c] += dd[c];
            }
        } else {
            for (int64_t c = 0; c < C; c++) pos[c] += dd[c];
        }
    }
}
