/* Attention over a KV cache, for generation (src/nn/decode.c): the keys and
 * values of the positions already seen live in a per-layer cache
 * kc, vc [B, KV, Tmax, hd] (one kv head's positions contiguous, so a head's
 * keys are a plain [P, hd] matrix); a step brings n new token rows per
 * sample at positions pos0 .. pos0 + n - 1 (prefill: the prompt at pos0 0;
 * then one row a step).
 *
 *   cl_kv_append: copies the step's k and v columns of qkv rows [B n, ld]
 *     (k of kv head g at koff + g hd, v at voff + g hd) into cache rows
 *     pos0 .. pos0 + n - 1.
 *   cl_attention_decode: causal grouped-query attention of the new rows'
 *     queries (q rows [B n, ldq], head h at h hd) over cache rows
 *     0 .. pos0 + t (query head h reads kv head h / (NH / KV)), scaled by
 *     1/sqrt(hd); out [B n, NH hd], heads side by side, as the training
 *     kernels' output. Rows go in blocks of DBR against key chunks of DKC
 *     with an online softmax (scores in one stack tile, the sums in double),
 *     every product a cl_gemm; (b, h) pairs are spread over the thread team,
 *     each on one thread, so the bits do not depend on the thread count.
 *
 * Invariants: pos0 + n <= Tmax; the same function serves prefill (n rows)
 * and decode (n = 1); a row sees at least itself, so no row is empty.
 * tests/test_decode.c checks it against cl_flash_forward's T x T attention
 * on the same q, k, v, prefilled in pieces of every size. */
#include "cleave/kernels.h"

#include "cleave/core.h"

#include <math.h>
#include <string.h>

enum { DBR = 32, DKC = 256, DPAR = 1 << 18 };

void cl_kv_append(float *kc, float *vc, const float *qkv, int64_t ld, int koff, int voff, int B, int n, int pos0, int KV,
                  int hd, int Tmax) {
    CL_ASSERT(pos0 >= 0 && n >= 0 && pos0 + n <= Tmax);
    size_t row = (size_t)hd * sizeof(float);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++) {
            const float *x = qkv + ((int64_t)b * n + t) * ld;
            for (int g = 0; g < KV; g++) {
                int64_t at = (((int64_t)b * KV + g) * Tmax + pos0 + t) * hd;
                memcpy(kc + at, x + koff + (int64_t)g * hd, row);
                memcpy(vc + at, x + voff + (int64_t)g * hd, row);
            }
        }
}

/* Rows [r0, r1) of one (b, h): q rows at stride ldq, keys and values [P, hd], out rows at stride ldo. */
static void decode_rows(float *o, int ldo, const float *q, int64_t ldq, const float *k, const float *v, int r0, int r1, int pos0,
                        int hd, float scale) {
    float s[DBR * DKC];
    float m[DBR];
    double l[DBR];
    int nr = r1 - r0, ke = pos0 + r1; /* keys the last row sees */
    for (int i = 0; i < nr; i++) {
        m[i] = -INFINITY;
        l[i] = 0;
        memset(o + (int64_t)(r0 + i) * ldo, 0, (size_t)hd * sizeof(float));
    }
    for (int c0 = 0; c0 < ke; c0 += DKC) {
        int nc = ke - c0 < DKC ? ke - c0 : DKC;
        cl_gemm(0, 1, nr, nc, hd, scale, q + (int64_t)r0 * ldq, (int)ldq, k + (int64_t)c0 * hd, hd, 0.0f, s, DKC);
        for (int i = 0; i < nr; i++) {
            float *row = s + i * DKC;
            int see = pos0 + r0 + i + 1 - c0; /* keys of this chunk row i sees */
            see = see < 0 ? 0 : see > nc ? nc : see;
            float mx = m[i];
            for (int j = 0; j < see; j++) mx = row[j] > mx ? row[j] : mx;
            if (see == 0) {
                memset(row, 0, (size_t)nc * sizeof *row);
                continue;
            }
            double sum = 0;
            for (int j = 0; j < see; j++) sum += (row[j] = expf(row[j] - mx));
            memset(row + see, 0, (size_t)(nc - see) * sizeof *row);
            if (mx != m[i]) {
                float corr = expf(m[i] - mx); /* 0 from -inf */
                float *oo = o + (int64_t)(r0 + i) * ldo;
                for (int c = 0; c < hd; c++) oo[c] *= corr;
                l[i] *= corr;
                m[i] = mx;
            }
            l[i] += sum;
        }
        cl_gemm(0, 0, nr, hd, nc, 1.0f, s, DKC, v + (int64_t)c0 * hd, hd, 1.0f, o + (int64_t)r0 * ldo, ldo);
    }
    for (int i = 0; i < nr; i++) {
        float inv = (float)(1.0 / l[i]), *oo = o + (int64_t)(r0 + i) * ldo;
        for (int c = 0; c < hd; c++) oo[c] *= inv;
    }
}

void cl_attention_decode(float *out, const float *q, int64_t ldq, const float *kc, const float *vc, int B, int n, int pos0, int NH,
                         int KV, int hd, int Tmax) {
    CL_ASSERT(NH > 0 && KV > 0 && NH % KV == 0 && hd > 0 && pos0 >= 0 && n >= 0 && pos0 + n <= Tmax);
    int G = NH / KV, ldo = NH * hd;
    float scale = 1.0f / sqrtf((float)hd);
    /* a decode step's few products are not worth waking the team (a region costs microseconds, more under load) */
    int par = (int64_t)B * NH * n * (pos0 + n) * hd >= DPAR;
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        int64_t kv = (((int64_t)b * KV + h / G) * Tmax) * hd;
        const float *qb = q + (int64_t)b * n * ldq + (int64_t)h * hd;
        float *ob = out + (int64_t)b * n * ldo + (int64_t)h * hd;
        for (int r0 = 0; r0 < n; r0 += DBR) decode_rows(ob, ldo, qb, ldq, kc + kv, vc + kv, r0, r0 + DBR < n ? r0 + DBR : n, pos0, hd, scale);
    }
}
