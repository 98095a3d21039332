/* Causal multi-head self-attention core (the part between c_attn and
 * c_proj in GPT-2; between the rotated q, k, v and o_proj in Llama).
 *
 * Grouped-query heads: a row of qkv holds NH query heads, then KV key heads,
 * then KV value heads, each hd wide (row stride L = (NH + 2 KV) hd); query
 * head h reads key and value head h / (NH / KV). GPT-2's layout [q | k | v],
 * 3C wide, is KV = NH, hd = C / NH, and runs the same code (the same bits).
 * For each sample b and head h, with q, k, v read straight out of qkv
 * through the row stride L (no copies):
 *   att = softmax_causal(q k^T / sqrt(hd)),  out = att v.
 * Rows go in blocks of ATT_BLOCK: the block of rows [r0, r1) needs scores
 * only for columns [0, r1), so the products skip the masked upper triangle
 * but for the diagonal blocks (about half the work at long T). Every product
 * is a cl_gemm; the (b, h) pairs are spread over the thread team with each
 * pair's products on one thread, so the bits do not depend on the thread
 * count. Saved att holds exact zeros above the diagonal. The softmax
 * subtracts the row maximum and sums in double; the AVX2 path takes its exp
 * from cl_exp8 (simd.h).
 * Backward adds into dqkv; scratch[B,NH,T,T] holds d(scores) per (b,h).
 * The backward runs each (b, key head) group on one thread, its query heads
 * in order, since they all add into the group's dk and dv; with KV = NH a
 * group is one head, as before. */
#include "cleave/kernels.h"
#include "kernels/simd.h"

#include "cleave/core.h"

#include <math.h>
#include <string.h>

enum { ATT_BLOCK = 64 };

/* row[0..n) = softmax(row[0..n)) */
static void softmax_plain(float *row, int n) {
    float mx = row[0];
    for (int j = 1; j < n; j++) mx = row[j] > mx ? row[j] : mx;
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        row[j] = expf(row[j] - mx);
        sum += row[j];
    }
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < n; j++) row[j] *= inv;
}

#ifdef CL_SIMD_X86
CL_AVX2 static void softmax_avx2(float *row, int n) {
    if (n < 8) {
        softmax_plain(row, n);
        return;
    }
    __m256 m8 = _mm256_loadu_ps(row);
    int j = 8;
    for (; j + 8 <= n; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(row + j));
    float mx = cl_hmax8(m8);
    for (; j < n; j++) mx = row[j] > mx ? row[j] : mx;
    __m256 vm = _mm256_set1_ps(mx);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 e = cl_exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm));
        _mm256_storeu_ps(row + j, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double sum = cl_hsum4d(_mm256_add_pd(s0, s1));
    for (; j < n; j++) {
        row[j] = expf(row[j] - mx);
        sum += row[j];
    }
    __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), inv));
    for (; j < n; j++) row[j] *= (float)(1.0 / sum);
}
#endif

/* One (b, h): q, k, v the head's first row's columns in qkv (row stride C3),
 * o the output's (row stride C). */
static void head_forward(float *o, float *a, const float *q, const float *k, const float *v, int T, int C, int C3,
                         int hs, float scale, int vec) {
    (void)vec;
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        cl_gemm(0, 1, r1 - r0, r1, hs, scale, q + (int64_t)r0 * C3, C3, k, C3, 0.0f, a + (int64_t)r0 * T, T);
        for (int t = r0; t < r1; t++) {
            float *row = a + (int64_t)t * T;
#ifdef CL_SIMD_X86
            if (vec == CL_SIMD_AVX2) softmax_avx2(row, t + 1);
            else
#endif
                softmax_plain(row, t + 1);
            memset(row + t + 1, 0, (size_t)(T - t - 1) * sizeof *row);
        }
        cl_gemm(0, 0, r1 - r0, hs, r1, 1.0f, a + (int64_t)r0 * T, T, v, C3, 0.0f, o + (int64_t)r0 * C, C);
    }
}

double cl_attention_share(int T) {
    if (T <= 0) return 0;
    double n = 0;
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        n += (double)(r1 - r0) * r1;
    }
    return n / ((double)T * T);
}

void cl_attention_gqa_forward(float *out, float *att, const float *qkv, int B, int T, int NH, int KV, int hd) {
    CL_ASSERT(NH > 0 && KV > 0 && NH % KV == 0 && hd > 0);
    int C = NH * hd, L = (NH + 2 * KV) * hd, G = NH / KV;
    float scale = (float)(1.0 / sqrt((double)hd));
    int vec = cl_simd();
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, g = h / G;
        const float *row = qkv + (int64_t)b * T * L;
        head_forward(out + (int64_t)b * T * C + (int64_t)h * hd, att + (int64_t)bh * T * T, row + (int64_t)h * hd,
                     row + C + (int64_t)g * hd, row + C + (int64_t)(KV + g) * hd, T, C, L, hd, scale, vec);
    }
}

void cl_attention_forward(float *out, float *att, const float *qkv,
                          int B, int T, int C, int NH) {
    CL_ASSERT(NH > 0 && C % NH == 0);
    cl_attention_gqa_forward(out, att, qkv, B, T, NH, NH, C / NH);
}

/* One (b, h): dq, dk, dv the head's columns in dqkv (row stride C3), d the
 * output gradient's (row stride C). */
static void head_backward(float *dq, float *dk, float *dv, float *ds, const float *d, const float *q, const float *k,
                          const float *v, const float *a, int T, int C, int C3, int hs, float scale) {
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        /* datt = dout v^T on the rows' causal columns */
        cl_gemm(0, 1, r1 - r0, r1, hs, 1.0f, d + (int64_t)r0 * C, C, v, C3, 0.0f, ds + (int64_t)r0 * T, T);
        /* softmax backward: ds = att * (datt - sum(att * datt)), 0 above the diagonal */
        for (int t = r0; t < r1; t++) {
            const float *ar = a + (int64_t)t * T;
            float *dr = ds + (int64_t)t * T;
            double dot = 0.0;
            for (int j = 0; j <= t; j++) dot += (double)ar[j] * dr[j];
            float fd = (float)dot;
            for (int j = 0; j <= t; j++) dr[j] = ar[j] * (dr[j] - fd);
            for (int j = t + 1; j < r1; j++) dr[j] = 0.0f;
        }
        /* scores = scale q k^T: dq += scale ds k over the causal columns */
        cl_gemm(0, 0, r1 - r0, hs, r1, scale, ds + (int64_t)r0 * T, T, k, C3, 1.0f, dq + (int64_t)r0 * C3, C3);
    }
    /* column blocks [c0, c1) of att and ds are nonzero only in rows >= c0 */
    for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
        int c1 = c0 + ATT_BLOCK < T ? c0 + ATT_BLOCK : T;
        int64_t off = (int64_t)c0 * T + c0;
        cl_gemm(1, 0, c1 - c0, hs, T - c0, 1.0f, a + off, T, d + (int64_t)c0 * C, C, 1.0f, dv + (int64_t)c0 * C3, C3);
        cl_gemm(1, 0, c1 - c0, hs, T - c0, scale, ds + off, T, q + (int64_t)c0 * C3, C3, 1.0f, dk + (int64_t)c0 * C3, C3);
    }
}

void cl_attention_gqa_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                               int B, int T, int NH, int KV, int hd) {
    CL_ASSERT(NH > 0 && KV > 0 && NH % KV == 0 && hd > 0);
    int C = NH * hd, L = (NH + 2 * KV) * hd, G = NH / KV;
    float scale = (float)(1.0 / sqrt((double)hd));
#pragma omp parallel for schedule(static)
    for (int bg = 0; bg < B * KV; bg++) {
        int b = bg / KV, g = bg % KV;
        int64_t row = (int64_t)b * T * L, koff = row + C + (int64_t)g * hd, voff = row + C + (int64_t)(KV + g) * hd;
        for (int h = g * G; h < (g + 1) * G; h++) {
            int64_t qoff = row + (int64_t)h * hd, bh = (int64_t)b * NH + h;
            head_backward(dqkv + qoff, dqkv + koff, dqkv + voff, scratch + bh * T * T,
                          dout + (int64_t)b * T * C + (int64_t)h * hd, qkv + qoff, qkv + koff, qkv + voff,
                          att + bh * T * T, T, C, L, hd, scale);
        }
    }
}

void cl_attention_backward(float *dqkv, float *scratch, const float *dout,
                           const float *qkv, const float *att,
                           int B, int T, int C, int NH) {
    CL_ASSERT(NH > 0 && C % NH == 0);
    cl_attention_gqa_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NH, C / NH);
}
