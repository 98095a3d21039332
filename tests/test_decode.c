/* Tests for generation's attention over a KV cache (src/kernels/decode.c).
 *
 * The same q, k, v go through the training kernel (cl_flash_forward, the
 * T x T causal attention) and through the cache: appended in pieces
 * (a prefill of p rows, then pieces of every size, then one row at a time)
 * with cl_kv_append, each piece's rows attended by cl_attention_decode at
 * its pos0. Every output row must match the training kernel's within 2e-6
 * relative (max |a - b| / max |b|; the two sum in another order), for
 * multi-head (KV = NH), grouped-query and multi-query heads, B > 1, rows past
 * one block (32) and keys past one chunk (256). Cache rows beyond the step
 * are poisoned with NaN: a read past the position would show. The same bits
 * on 1 and 2 threads. */
#include "cleave/core.h"
#include "cleave/kernels.h"
#include "common/check.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cl_rng rng;

static float *newf(long n) {
    float *p = calloc(n > 0 ? (size_t)n : 1, sizeof *p);
    if (!p) abort();
    return p;
}

/* out rows of the cached path for pieces: sizes[0..np) summing to T */
static void cached(float *out, const float *qkv, int B, int T, int NH, int KV, int hd, int Tmax, const int *sizes, int np) {
    int L = (NH + 2 * KV) * hd, C = NH * hd;
    float *kc = newf((long)B * KV * Tmax * hd), *vc = newf((long)B * KV * Tmax * hd);
    for (long i = 0; i < (long)B * KV * Tmax * hd; i++) kc[i] = vc[i] = NAN;
    int pos0 = 0;
    for (int s = 0; s < np; s++) {
        int n = sizes[s];
        float *rows = newf((long)B * n * L), *o = newf((long)B * n * C);
        for (int b = 0; b < B; b++)
            memcpy(rows + (long)b * n * L, qkv + ((long)b * T + pos0) * L, (size_t)n * L * sizeof(float));
        cl_kv_append(kc, vc, rows, L, C, C + KV * hd, B, n, pos0, KV, hd, Tmax);
        cl_attention_decode(o, rows, L, kc, vc, B, n, pos0, NH, KV, hd, Tmax);
        for (int b = 0; b < B; b++)
            memcpy(out + ((long)b * T + pos0) * C, o + (long)b * n * C, (size_t)n * C * sizeof(float));
        free(rows);
        free(o);
        pos0 += n;
    }
    free(kc);
    free(vc);
}

static double relerr(const float *a, const float *b, long n) {
    double md = 0, mb = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= md)) md = d; /* NaN counts */
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / (mb > 0 ? mb : 1);
}

static void case_of(const char *what, int B, int T, int NH, int KV, int hd, int prefill) {
    int L = (NH + 2 * KV) * hd, C = NH * hd, Tmax = T + 3;
    float *qkv = newf((long)B * T * L), *want = newf((long)B * T * C), *lse = newf((long)B * NH * T);
    float *got = newf((long)B * T * C);
    for (long i = 0; i < (long)B * T * L; i++) qkv[i] = cl_rng_normal(&rng);
    cl_flash_forward(want, lse, qkv, B, T, C, NH, KV);
    /* a prefill, then growing pieces, then single rows */
    int sizes[1024], np = 0, at = 0;
    if (prefill > 0) sizes[np++] = prefill, at = prefill;
    for (int k = 2; at + k <= T - 4 && np < 40; k *= 2) sizes[np++] = k, at += k;
    while (at < T) sizes[np++] = 1, at++;
    cached(got, qkv, B, T, NH, KV, hd, Tmax, sizes, np);
    double e = relerr(got, want, (long)B * T * C);
    CHECK(e <= 2e-6, "%s: cached attention vs the T x T kernel: %.3g", what, e);
    /* the whole sequence as one prefill: the same rows */
    int one[1] = {T};
    float *got1 = newf((long)B * T * C);
    cached(got1, qkv, B, T, NH, KV, hd, Tmax, one, 1);
    e = relerr(got1, want, (long)B * T * C);
    CHECK(e <= 2e-6, "%s: one prefill vs the T x T kernel: %.3g", what, e);
    /* threads do not change the bits */
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    float *got2 = newf((long)B * T * C);
    cached(got2, qkv, B, T, NH, KV, hd, Tmax, sizes, np);
    omp_set_num_threads(nt > 1 ? nt : 2);
    CHECK(memcmp(got, got2, (size_t)B * T * C * sizeof(float)) == 0, "%s: bits depend on the thread count", what);
    omp_set_num_threads(nt);
    printf("  %-28s B %d T %3d NH %d KV %d hd %2d: rel err %.3g\n", what, B, T, NH, KV, hd, e);
    free(qkv), free(want), free(lse), free(got), free(got1), free(got2);
}

int main(void) {
    cl_rng_seed(&rng, 7);
    case_of("multi-head (GPT)", 2, 40, 4, 4, 16, 5);
    case_of("grouped-query 4/2", 2, 45, 4, 2, 16, 1);
    case_of("multi-query", 1, 37, 4, 1, 8, 0);
    case_of("rows past one block", 1, 100, 2, 1, 16, 70);
    case_of("keys past one chunk", 1, 300, 2, 2, 8, 260);
    /* a broken head mapping (the kv head of another group) is noticed */
    int B = 1, T = 20, NH = 4, KV = 2, hd = 8, L = (NH + 2 * KV) * hd, C = NH * hd;
    float *qkv = newf((long)T * L), *want = newf((long)T * C), *lse = newf((long)NH * T), *got = newf((long)T * C);
    for (long i = 0; i < (long)T * L; i++) qkv[i] = cl_rng_normal(&rng);
    cl_flash_forward(want, lse, qkv, B, T, C, NH, KV);
    for (int t = 0; t < T; t++) /* swap the two kv heads' keys: query heads 0, 1 now read head 1's */
        for (int c = 0; c < hd; c++) {
            float *k = qkv + (long)t * L + C, x = k[c];
            k[c] = k[hd + c], k[hd + c] = x;
        }
    int one[1] = {T};
    cached(got, qkv, B, T, NH, KV, hd, T, one, 1);
    CHECK(relerr(got, want, (long)T * C) > 1e-3, "a wrong kv-head mapping went unnoticed");
    free(qkv), free(want), free(lse), free(got);
    return cl_test_report("test_decode");
}
