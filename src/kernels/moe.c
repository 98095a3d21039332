/* Mixture-of-experts kernels (issue 33): the router, the load-balancing
 * auxiliary loss, the dispatch permutation, the gather of token rows into
 * expert order and the weighted combine, forward and backward, as Hugging
 * Face's MixtralSparseMoeBlock computes them:
 *
 *   logits = x W_g               (W_g [C, E], no bias: the caller's GEMM)
 *   p      = softmax(logits)     over E, in F32
 *   top-k  of p per token        ties broken by the lower expert index
 *   w      = p[top] / sum p[top] (Mixtral renormalizes the k weights)
 *   y_t    = sum_i w_{t,i} expert_{e_{t,i}}(x_t)
 *   aux    = E * sum_e f_e P_e   f_e: fraction of the T K token-slots routed
 *                                to e; P_e: mean router probability of e
 *                                (Switch; HF's load_balancing_loss_func gives
 *                                K times this: its f is per token, sums to K)
 *
 * Token-slot s = t K + i is token t's i-th choice. Dispatch groups the slots
 * by expert (stable: by expert, then token index), so each expert's rows are
 * contiguous and its MLP is plain GEMMs on them; with a capacity, slots past
 * the first `capacity` tokens of an expert (in token order) are dropped:
 * their row is -1, they add nothing to y, and their gradients are 0.
 *
 * The experts (MixtralBlockSparseTop2MLP: w2(silu(w1 x) * w3 x), HF's
 * weights w1, w3 [F, C] and w2 [C, F] per expert) run on their contiguous
 * rows through a kernel table (cl_moe_experts_forward / _backward, at the
 * end): one GEMM per expert and product.
 *
 * Invariants: every result is a function of the inputs alone (sequential
 * loops in a fixed order, no threads; the experts' GEMMs as cl_gemm's), so
 * it does not depend on the run. Backward kernels add into their outputs
 * (kernels.h). */
#include "cleave/backend.h"
#include "cleave/kernels.h"

#include <math.h>
#include <string.h>

void cl_moe_router_forward(float *probs, int32_t *idx, float *wts, const float *logits, int T, int E, int K) {
    for (int t = 0; t < T; t++) {
        const float *l = logits + (int64_t)t * E;
        float *p = probs + (int64_t)t * E, mx = l[0], s = 0.0f;
        for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int e = 0; e < E; e++) {
            p[e] = expf(l[e] - mx);
            s += p[e];
        }
        for (int e = 0; e < E; e++) p[e] /= s;
        int32_t *ix = idx + (int64_t)t * K;
        float *w = wts + (int64_t)t * K, sum = 0.0f;
        for (int i = 0; i < K; i++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = 0; j < i; j++) taken |= ix[j] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e; /* strict: the lower index keeps a tie */
            }
            ix[i] = best;
            w[i] = p[best];
            sum += w[i];
        }
        for (int i = 0; i < K; i++) w[i] /= sum;
    }
}

float cl_moe_aux_loss(float *frac, float *pmean, const float *probs, const int32_t *idx, int T, int E, int K) {
    double loss = 0.0;
    for (int e = 0; e < E; e++) frac[e] = pmean[e] = 0.0f;
    if (T <= 0) return 0.0f;
    for (int64_t s = 0; s < (int64_t)T * K; s++) frac[idx[s]] += 1.0f;
    for (int e = 0; e < E; e++) {
        double pm = 0.0;
        for (int t = 0; t < T; t++) pm += probs[(int64_t)t * E + e];
        frac[e] = (float)(frac[e] / ((double)T * K));
        pmean[e] = (float)(pm / T);
        loss += (double)frac[e] * pmean[e];
    }
    return (float)(E * loss);
}

void cl_moe_router_backward(float *dlogits, const float *dwts, const float *probs, const int32_t *idx,
                            const float *wts, const float *frac, float daux, int T, int E, int K) {
    float dp[CL_MOE_MAX_EXPERTS];
    for (int t = 0; t < T; t++) {
        const float *p = probs + (int64_t)t * E, *w = wts + (int64_t)t * K, *dw = dwts + (int64_t)t * K;
        const int32_t *ix = idx + (int64_t)t * K;
        /* aux: d/dp_{t,e} of E sum_e f_e mean_t p_{t,e} (f is piecewise constant) */
        for (int e = 0; e < E; e++) dp[e] = frac ? daux * (float)E * frac[e] / (float)T : 0.0f;
        /* w_i = p_{e_i} / S: dp_{e_i} += (dw_i - sum_j dw_j w_j) / S */
        float S = 0.0f, dot = 0.0f;
        for (int i = 0; i < K; i++) {
            S += p[ix[i]];
            dot += dw[i] * w[i];
        }
        for (int i = 0; i < K; i++) dp[ix[i]] += (dw[i] - dot) / S;
        /* softmax: dl_j = p_j (dp_j - sum_e p_e dp_e) */
        float pd = 0.0f;
        for (int e = 0; e < E; e++) pd += p[e] * dp[e];
        float *dl = dlogits + (int64_t)t * E;
        for (int e = 0; e < E; e++) dl[e] += p[e] * (dp[e] - pd);
    }
}

int64_t cl_moe_dispatch(int32_t *perm, int32_t *row, int32_t *counts, const int32_t *idx, int T, int E, int K,
                        int capacity) {
    int64_t n = (int64_t)T * K, dropped = 0;
    for (int e = 0; e < E; e++) counts[e] = 0;
    for (int64_t s = 0; s < n; s++) { /* token order: the first `capacity` tokens of an expert stay */
        int e = idx[s];
        if (capacity > 0 && counts[e] >= capacity) {
            row[s] = -1;
            dropped++;
        } else {
            row[s] = counts[e]++; /* rank within its expert, for now */
        }
    }
    int32_t off[CL_MOE_MAX_EXPERTS + 1];
    off[0] = 0;
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + counts[e];
    for (int64_t s = 0; s < n; s++)
        if (row[s] >= 0) {
            row[s] += off[idx[s]];
            perm[row[s]] = (int32_t)s;
        }
    return dropped;
}

void cl_moe_gather(float *xe, const float *x, const int32_t *perm, int64_t rows, int C, int K) {
    for (int64_t r = 0; r < rows; r++) memcpy(xe + r * C, x + (int64_t)(perm[r] / K) * C, (size_t)C * sizeof *xe);
}

void cl_moe_gather_bf16(uint16_t *xe, const uint16_t *x, const int32_t *perm, int64_t rows, int C, int K) {
    for (int64_t r = 0; r < rows; r++) memcpy(xe + r * C, x + (int64_t)(perm[r] / K) * C, (size_t)C * sizeof *xe);
}

void cl_moe_gather_backward(float *dx, const float *dxe, const int32_t *row, int T, int C, int K) {
    for (int t = 0; t < T; t++) {
        float *d = dx + (int64_t)t * C;
        for (int i = 0; i < K; i++) {
            int32_t r = row[(int64_t)t * K + i];
            if (r < 0) continue;
            const float *g = dxe + (int64_t)r * C;
            for (int c = 0; c < C; c++) d[c] += g[c];
        }
    }
}

void cl_moe_combine_forward(float *y, const float *ye, const float *wts, const int32_t *row, int T, int C, int K) {
    for (int t = 0; t < T; t++) {
        float *o = y + (int64_t)t * C;
        for (int c = 0; c < C; c++) o[c] = 0.0f;
        for (int i = 0; i < K; i++) {
            int64_t s = (int64_t)t * K + i;
            if (row[s] < 0) continue;
            const float *v = ye + (int64_t)row[s] * C;
            for (int c = 0; c < C; c++) o[c] += wts[s] * v[c];
        }
    }
}

void cl_moe_combine_backward(float *dye, float *dwts, const float *dy, const float *ye, const float *wts,
                             const int32_t *row, int T, int C, int K) {
    for (int t = 0; t < T; t++) {
        const float *g = dy + (int64_t)t * C;
        for (int i = 0; i < K; i++) {
            int64_t s = (int64_t)t * K + i;
            if (row[s] < 0) continue;
            const float *v = ye + (int64_t)row[s] * C;
            float *dv = dye + (int64_t)row[s] * C, dot = 0.0f;
            for (int c = 0; c < C; c++) {
                dv[c] += wts[s] * g[c];
                dot += g[c] * v[c];
            }
            dwts[s] += dot;
        }
    }
}

/* ---- the experts: SwiGLU MLPs over their contiguous rows ------------------
 * A host helper over a kernel table, not a table entry: one GEMM per expert
 * and product on its rows (the dispatch order), the SwiGLU once over all
 * rows. Expert e's rows are [o_e, o_e + counts[e]), o_e the sum of the
 * counts before it; an expert with no rows runs empty GEMMs. */
void cl_moe_experts_forward(const cl_kernels *k, float *ye, float *gate, float *up, float *h, const float *xe,
                            const int32_t *counts, const float *w1, const float *w3, const float *w2, int E, int C,
                            int F) {
    int64_t o = 0, fc = (int64_t)F * C;
    for (int e = 0; e < E; e++) {
        int n = counts[e];
        cl_sgemm(k, 0, 1, n, F, C, 1.0f, xe + o * C, C, w1 + e * fc, C, 0.0f, gate + o * F, F);
        cl_sgemm(k, 0, 1, n, F, C, 1.0f, xe + o * C, C, w3 + e * fc, C, 0.0f, up + o * F, F);
        o += n;
    }
    k->swiglu_forward(h, gate, up, o * F);
    o = 0;
    for (int e = 0; e < E; e++) {
        int n = counts[e];
        cl_sgemm(k, 0, 1, n, C, F, 1.0f, h + o * F, F, w2 + e * fc, F, 0.0f, ye + o * C, C);
        o += n;
    }
}

void cl_moe_experts_backward(const cl_kernels *k, float *dxe, float *dw1, float *dw3, float *dw2, float *dgate,
                             float *dup, float *dh, const float *dye, const float *xe, const float *gate,
                             const float *up, const float *h, const int32_t *counts, const float *w1, const float *w3,
                             const float *w2, int E, int C, int F) {
    int64_t o = 0, fc = (int64_t)F * C;
    for (int e = 0; e < E; e++) {
        int n = counts[e];
        cl_sgemm(k, 0, 0, n, F, C, 1.0f, dye + o * C, C, w2 + e * fc, F, 0.0f, dh + o * F, F);
        cl_sgemm(k, 1, 0, C, F, n, 1.0f, dye + o * C, C, h + o * F, F, 1.0f, dw2 + e * fc, F);
        o += n;
    }
    k->swiglu_backward(dgate, dup, dh, gate, up, o * F);
    o = 0;
    for (int e = 0; e < E; e++) {
        int n = counts[e];
        cl_sgemm(k, 1, 0, F, C, n, 1.0f, dgate + o * F, F, xe + o * C, C, 1.0f, dw1 + e * fc, C);
        cl_sgemm(k, 1, 0, F, C, n, 1.0f, dup + o * F, F, xe + o * C, C, 1.0f, dw3 + e * fc, C);
        cl_sgemm(k, 0, 0, n, C, F, 1.0f, dgate + o * F, F, w1 + e * fc, C, 1.0f, dxe + o * C, C);
        cl_sgemm(k, 0, 0, n, C, F, 1.0f, dup + o * F, F, w3 + e * fc, C, 1.0f, dxe + o * C, C);
        o += n;
    }
}
