/* Fused softmax + cross-entropy over logits[N,V].
 *
 * Forward, per row: lse = max + log(sum exp(x - max)) with the sum in
 * double, loss = lse - x[target]. Rows with target -1 are ignored: loss 0
 * (lse is still saved). Backward: dlogits += dloss * (exp(x - lse) - onehot);
 * ignored rows get nothing. When dlogits == logits (llm.c's in-place mode,
 * which saves an N x V buffer) each row is read and then overwritten: the
 * gradient is assigned, and ignored rows become 0. Partial overlap of the
 * two buffers is not supported. Targets must be -1 or lie in [0, V).
 *
 * Each row reads the logits twice in the forward (max, then the sum) and
 * once in the backward; nothing N x V is allocated. The plain path takes exp
 * in double; the AVX2 path takes cl_exp8 in f32 (within 2 ulp) and sums in
 * double. Rows are split over the thread team, each row wholly on one
 * thread, so the result does not depend on the thread count. */
#include "cleave/kernels.h"
#include "kernels/simd.h"

#include "cleave/core.h"

#include <math.h>

static float row_max_plain(const float *x, int V) {
    float mx = -INFINITY;
    for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    return mx;
}

static double row_sum_plain(const float *x, double mx, int V) {
    double s = 0.0;
    for (int j = 0; j < V; j++) s += exp((double)x[j] - mx);
    return s;
}

static double row_lse_plain(const float *x, int V) {
    double mx = row_max_plain(x, V);
    return mx + log(row_sum_plain(x, mx, V));
}

static void row_grad_plain(float *dx, const float *x, double l, int tg, float dloss, int V, int inplace) {
    for (int j = 0; j < V; j++) {
        float p = (float)exp((double)x[j] - l);
        float g = dloss * (p - (j == tg ? 1.0f : 0.0f));
        if (inplace) dx[j] = g;
        else dx[j] += g;
    }
}

#ifdef CL_SIMD_X86
CL_AVX2 static float row_max_avx2(const float *x, int V) { /* V >= 8 */
    __m256 m8 = _mm256_loadu_ps(x);
    int j = 8;
    for (; j + 8 <= V; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(x + j));
    float mx = cl_hmax8(m8);
    for (; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    return mx;
}

/* sum of exp(x - mx) for a finite mx: exp in f32, sums in double */
CL_AVX2 static double row_sum_avx2(const float *x, float mx, int V) {
    __m256 vm = _mm256_set1_ps(mx);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int j = 0;
    for (; j + 8 <= V; j += 8) {
        __m256 e = cl_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double s = cl_hsum4d(_mm256_add_pd(s0, s1));
    for (; j < V; j++) s += exp((double)x[j] - mx);
    return s;
}

CL_AVX2 static double row_lse_avx2(const float *x, int V) {
    if (V < 8) return row_lse_plain(x, V);
    float mx = row_max_avx2(x, V);
    if (isinf(mx) || isnan(mx)) return row_lse_plain(x, V); /* +-inf or NaN rows: the plain path's answer */
    return mx + log(row_sum_avx2(x, mx, V));
}

CL_AVX2 static void row_grad_avx2(float *dx, const float *x, double l, int tg, float dloss, int V, int inplace) {
    if (!isfinite(l)) {
        row_grad_plain(dx, x, l, tg, dloss, V, inplace);
        return;
    }
    __m256 vl = _mm256_set1_ps((float)l), vd = _mm256_set1_ps(dloss);
    int j = 0;
    /* exp(x - lse) with lse rounded to f32: the softmax sums to 1 within a few ulp */
    for (; j + 8 <= V; j += 8) {
        __m256 g = _mm256_mul_ps(vd, cl_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vl)));
        if (!inplace) g = _mm256_add_ps(g, _mm256_loadu_ps(dx + j));
        _mm256_storeu_ps(dx + j, g);
    }
    for (; j < V; j++) {
        float g = dloss * (float)exp((double)x[j] - l);
        dx[j] = inplace ? g : dx[j] + g;
    }
    if (tg >= 0) dx[tg] -= dloss; /* the one-hot term, after the row is written */
}
#endif

void cl_xent_forward(float *losses, float *lse, const float *logits,
                     const int32_t *targets, int N, int V) {
    int v = cl_simd();
    (void)v;
    for (int n = 0; n < N; n++) CL_ASSERT(targets[n] >= -1 && targets[n] < V);
#pragma omp parallel for schedule(static) if (N > 1 && (int64_t)N * V > CL_SIMD_BLOCK)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (int64_t)n * V;
        int32_t tg = targets[n];
#ifdef CL_SIMD_X86
        double l = v == CL_SIMD_AVX2 ? row_lse_avx2(x, V) : row_lse_plain(x, V);
#else
        double l = row_lse_plain(x, V);
#endif
        lse[n] = (float)l;
        losses[n] = tg < 0 ? 0.0f : (float)(l - x[tg]);
    }
}

void cl_xent_backward(float *dlogits, const float *logits, const float *lse,
                      const int32_t *targets, float dloss, int N, int V) {
    int inplace = dlogits == logits;
    int v = cl_simd();
    (void)v;
    for (int n = 0; n < N; n++) CL_ASSERT(targets[n] >= -1 && targets[n] < V);
#pragma omp parallel for schedule(static) if (N > 1 && (int64_t)N * V > CL_SIMD_BLOCK)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (int64_t)n * V;
        float *dx = dlogits + (int64_t)n * V;
        int32_t tg = targets[n];
        if (tg < 0) {
            if (inplace)
                for (int j = 0; j < V; j++) dx[j] = 0.0f;
            continue;
        }
#ifdef CL_SIMD_X86
        if (v == CL_SIMD_AVX2) {
            row_grad_avx2(dx, x, lse[n], tg, dloss, V, inplace);
            continue;
        }
#endif
        row_grad_plain(dx, x, lse[n], tg, dloss, V, inplace);
    }
}

/* ---- vocabulary-parallel pieces -------------------------------------------
 * The same row functions as above on a slice's valid columns, so that one
 * slice without padding reproduces cl_xent_forward/backward bit for bit
 * (given the caller's lse = mx + log(sum), loss = lse - tlogit in double). */

/* The column of the target in a slice starting at v0, or -1 when another
 * slice holds it (or the row is ignored). */
static int slice_target(int32_t target, int v0, int valid) {
    return target >= v0 && target - v0 < valid ? target - v0 : -1;
}

void cl_xent_vp_max(float *mx, const float *logits, int N, int Vl, int valid) {
    CL_ASSERT(valid >= 0 && valid <= Vl);
    int v = cl_simd();
    (void)v;
#pragma omp parallel for schedule(static) if (N > 1 && (int64_t)N * valid > CL_SIMD_BLOCK)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (int64_t)n * Vl;
#ifdef CL_SIMD_X86
        if (v == CL_SIMD_AVX2 && valid >= 8) {
            mx[n] = row_max_avx2(x, valid);
            continue;
        }
#endif
        mx[n] = row_max_plain(x, valid);
    }
}

void cl_xent_vp_sum(double *sum, double *tlogit, const float *logits, const float *mx, const int32_t *targets, int v0,
                    int N, int Vl, int valid) {
    CL_ASSERT(valid >= 0 && valid <= Vl);
    int v = cl_simd();
    (void)v;
    for (int n = 0; n < N; n++) CL_ASSERT(targets[n] >= -1);
#pragma omp parallel for schedule(static) if (N > 1 && (int64_t)N * valid > CL_SIMD_BLOCK)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (int64_t)n * Vl;
        int t = slice_target(targets[n], v0, valid);
        tlogit[n] = t >= 0 ? (double)x[t] : 0.0;
#ifdef CL_SIMD_X86
        if (v == CL_SIMD_AVX2 && valid >= 8 && !isinf(mx[n]) && !isnan(mx[n])) {
            sum[n] = row_sum_avx2(x, mx[n], valid);
            continue;
        }
#endif
        sum[n] = row_sum_plain(x, mx[n], valid);
    }
}

void cl_xent_vp_backward(float *dlogits, const float *logits, const float *lse, const int32_t *targets, int v0,
                         float dloss, int N, int Vl, int valid) {
    CL_ASSERT(valid >= 0 && valid <= Vl);
    int inplace = dlogits == logits;
    int v = cl_simd();
    (void)v;
    for (int n = 0; n < N; n++) CL_ASSERT(targets[n] >= -1);
#pragma omp parallel for schedule(static) if (N > 1 && (int64_t)N * valid > CL_SIMD_BLOCK)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (int64_t)n * Vl;
        float *dx = dlogits + (int64_t)n * Vl;
        int tg = slice_target(targets[n], v0, valid);
        if (targets[n] < 0) {
            if (inplace)
                for (int j = 0; j < Vl; j++) dx[j] = 0.0f;
            continue;
        }
#ifdef CL_SIMD_X86
        if (v == CL_SIMD_AVX2) row_grad_avx2(dx, x, lse[n], tg, dloss, valid, inplace);
        else
#endif
            row_grad_plain(dx, x, lse[n], tg, dloss, valid, inplace);
        if (inplace)
            for (int j = valid; j < Vl; j++) dx[j] = 0.0f;
    }
}
