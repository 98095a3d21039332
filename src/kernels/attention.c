/* Causal multi-head self-attention core (the part between c_attn and
 * c_proj in GPT-2).
 *
 * For each sample b and head h, with q, k, v read straight out of
 * qkv[B,T,3C] through a row stride of 3C (no copies):
 *   att = softmax_causal(q k^T / sqrt(hs)),  out = att v.
 * Both products go through cl_gemm. The full T x T score matrix is formed
 * and then masked: entries above the diagonal are set to exactly 0, so
 * att @ v over all T columns equals the causal sum. The softmax runs with
 * the row maximum subtracted, the sum in double.
 * Backward adds into dqkv; scratch[B,NH,T,T] holds d(scores) per (b,h). */
#include "cleave/kernels.h"

#include "cleave/core.h"

#include <math.h>

void cl_attention_forward(float *out, float *att, const float *qkv,
                          int B, int T, int C, int NH) {
    CL_ASSERT(NH > 0 && C % NH == 0);
    int hs = C / NH;
    int C3 = 3 * C;
    float scale = (float)(1.0 / sqrt((double)hs));
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (int64_t)b * T * C3 + (int64_t)h * hs;
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *a = att + ((int64_t)b * NH + h) * T * T;
            float *o = out + (int64_t)b * T * C + (int64_t)h * hs;
            cl_gemm(0, 1, T, T, hs, scale, q, C3, k, C3, 0.0f, a, T);
            for (int t = 0; t < T; t++) {
                float *row = a + (int64_t)t * T;
                float mx = row[0];
                for (int j = 1; j <= t; j++) mx = row[j] > mx ? row[j] : mx;
                double sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                float inv = (float)(1.0 / sum);
                for (int j = 0; j <= t; j++) row[j] *= inv;
                for (int j = t + 1; j < T; j++) row[j] = 0.0f;
            }
            cl_gemm(0, 0, T, hs, T, 1.0f, a, T, v, C3, 0.0f, o, C);
        }
    }
}

void cl_attention_backward(float *dqkv, float *scratch, const float *dout,
                           const float *qkv, const float *att,
                           int B, int T, int C, int NH) {
    CL_ASSERT(NH > 0 && C % NH == 0);
    int hs = C / NH;
    int C3 = 3 * C;
    float scale = (float)(1.0 / sqrt((double)hs));
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            int64_t qoff = (int64_t)b * T * C3 + (int64_t)h * hs;
            const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const float *a = att + ((int64_t)b * NH + h) * T * T;
            float *ds = scratch + ((int64_t)b * NH + h) * T * T;
            const float *d = dout + (int64_t)b * T * C + (int64_t)h * hs;
            /* datt = dout v^T; dv += att^T dout */
            cl_gemm(0, 1, T, T, hs, 1.0f, d, C, v, C3, 0.0f, ds, T);
            cl_gemm(1, 0, T, hs, T, 1.0f, a, T, d, C, 1.0f, dv, C3);
            /* softmax backward, row by row: ds = att * (datt - sum(att * datt)) */
            for (int t = 0; t < T; t++) {
                const float *ar = a + (int64_t)t * T;
                float *dr = ds + (int64_t)t * T;
                double dot = 0.0;
                for (int j = 0; j <= t; j++) dot += (double)ar[j] * dr[j];
                float fd = (float)dot;
                for (int j = 0; j <= t; j++) dr[j] = ar[j] * (dr[j] - fd);
                for (int j = t + 1; j < T; j++) dr[j] = 0.0f;
            }
            /* scores = scale * q k^T: dq += scale ds k; dk += scale ds^T q */
            cl_gemm(0, 0, T, hs, T, scale, ds, T, k, C3, 1.0f, dq, C3);
            cl_gemm(1, 0, T, hs, T, scale, ds, T, q, C3, 1.0f, dk, C3);
        }
    }
}
