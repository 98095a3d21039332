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
 * (-std=c11, the build's), and the pragmas below say so for the rest.
 * gscale folds gradient clipping into the same pass: g * gscale is the one
 * rounding torch's clip_grad_norm_ makes when it scales g in place, so the
 * result is the same bits as clipping first, without the extra pass.
 * cl_adamw_update_bf16 is the same update that also writes the BF16 copy
 * of each new weight (bf16 mixed precision's forward/backward weights),
 * block by block while the block is in cache: the bits of cl_adamw_update
 * then cl_bf16_pack, without a second pass over the weights. */
#include "cleave/kernels.h"
#include "kernels/simd.h"

#include "kernels/fp_exact.h"

#include <math.h>

typedef struct {
    float decay, b1, b2, omb1, omb2, step_size, bc2_sqrt, eps, gscale;
} adamw_consts;

static void adamw_plain(float *p, const float *g, float *m, float *v, int64_t n, const adamw_consts *k) {
    for (int64_t i = 0; i < n; i++) {
        float gi = k->gscale == 1.0f ? g[i] : g[i] * k->gscale;
        float pi = p[i] * k->decay;
        float mi = m[i] * k->b1 + k->omb1 * gi;
        float vi = v[i] * k->b2 + k->omb2 * gi * gi;
        float denom = sqrtf(vi) / k->bc2_sqrt + k->eps;
        p[i] = pi - k->step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

#ifdef CL_SIMD_X86
/* The same operations in the same order, 8 at a time and without FMA: IEEE
 * multiply, add, divide and square root round alike in both, so the bits
 * equal the plain path's. The AVX-512 body below likewise (on a Zen 5,
 * bench/kernel_paths.c: 1.1x-1.7x the AVX2 body on 64-byte-aligned arrays;
 * on arrays 16 bytes off it ran 0.74-0.81x at 4M-16M parameters, its
 * 64-byte accesses splitting cache lines). */
CL_AVX2 static void adamw_avx2(float *p, const float *g, float *m, float *v, int64_t n, const adamw_consts *k) {
    const __m256 decay = _mm256_set1_ps(k->decay), b1 = _mm256_set1_ps(k->b1), b2 = _mm256_set1_ps(k->b2);
    const __m256 omb1 = _mm256_set1_ps(k->omb1), omb2 = _mm256_set1_ps(k->omb2);
    const __m256 ss = _mm256_set1_ps(k->step_size), bc2 = _mm256_set1_ps(k->bc2_sqrt), eps = _mm256_set1_ps(k->eps);
    const __m256 gs = _mm256_set1_ps(k->gscale);
    int scaled = k->gscale != 1.0f;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gi = _mm256_loadu_ps(g + i);
        if (scaled) gi = _mm256_mul_ps(gi, gs);
        __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), decay);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1), _mm256_mul_ps(omb1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2), _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
        _mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_div_ps(_mm256_mul_ps(ss, mi), denom)));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
    }
    adamw_plain(p + i, g + i, m + i, v + i, n - i, k);
}

/* 16 at a time, the same operations in the same order: the same bits again. */
CL_AVX512 static void adamw_avx512(float *p, const float *g, float *m, float *v, int64_t n, const adamw_consts *k) {
    const __m512 decay = _mm512_set1_ps(k->decay), b1 = _mm512_set1_ps(k->b1), b2 = _mm512_set1_ps(k->b2);
    const __m512 omb1 = _mm512_set1_ps(k->omb1), omb2 = _mm512_set1_ps(k->omb2);
    const __m512 ss = _mm512_set1_ps(k->step_size), bc2 = _mm512_set1_ps(k->bc2_sqrt), eps = _mm512_set1_ps(k->eps);
    const __m512 gs = _mm512_set1_ps(k->gscale);
    int scaled = k->gscale != 1.0f;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 gi = _mm512_loadu_ps(g + i);
        if (scaled) gi = _mm512_mul_ps(gi, gs);
        __m512 pi = _mm512_mul_ps(_mm512_loadu_ps(p + i), decay);
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(m + i), b1), _mm512_mul_ps(omb1, gi));
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + i), b2), _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
        _mm512_storeu_ps(p + i, _mm512_sub_ps(pi, _mm512_div_ps(_mm512_mul_ps(ss, mi), denom)));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
    }
    adamw_avx2(p + i, g + i, m + i, v + i, n - i, k);
}
#endif

static void adamw_consts_make(adamw_consts *k, float lr, float b1, float b2, float eps, float wd, int t, float gscale) {
    k->gscale = gscale;
    k->decay = (float)(1.0 - (double)lr * (double)wd);
    k->b1 = b1;
    k->b2 = b2;
    k->omb1 = (float)(1.0 - (double)b1);
    k->omb2 = (float)(1.0 - (double)b2);
    double bc1 = 1.0 - pow((double)b1, (double)t);
    double bc2 = 1.0 - pow((double)b2, (double)t);
    k->step_size = (float)((double)lr / bc1);
    k->bc2_sqrt = (float)sqrt(bc2);
    k->eps = eps;
}

/* The update over [0, n) by blocks; with pbf, each block's new weights are
 * rounded into pbf right after the block is written (still in cache). */
static void adamw_run(float *p, uint16_t *pbf, const float *g, float *m, float *v, int64_t n, const adamw_consts *k) {
    int vec = cl_simd_level();
    (void)vec;
    CL_FOR_BLOCKS(n, lo, len, {
#ifdef CL_SIMD_X86
        if (vec >= CL_ISA_AVX512) adamw_avx512(p + lo, g + lo, m + lo, v + lo, len, k);
        else if (vec == CL_ISA_AVX2) adamw_avx2(p + lo, g + lo, m + lo, v + lo, len, k);
        else
#endif
            adamw_plain(p + lo, g + lo, m + lo, v + lo, len, k);
        if (pbf) cl_bf16_pack_serial(pbf + lo, p + lo, len, vec);
    });
}

void cl_adamw_update(float *p, const float *g, float *m, float *v, int64_t n,
                     float lr, float b1, float b2, float eps, float wd, int t, float gscale) {
    adamw_consts k;
    adamw_consts_make(&k, lr, b1, b2, eps, wd, t, gscale);
    adamw_run(p, NULL, g, m, v, n, &k);
}

void cl_adamw_update_bf16(float *p, uint16_t *pbf, const float *g, float *m, float *v, int64_t n, float lr, float b1,
                          float b2, float eps, float wd, int t, float gscale) {
    adamw_consts k;
    adamw_consts_make(&k, lr, b1, b2, eps, wd, t, gscale);
    adamw_run(p, pbf, g, m, v, n, &k);
}

static double sumsq_plain(const float *x, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

#ifdef CL_SIMD_X86
CL_AVX2 static double sumsq_avx2(const float *x, int64_t n) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_fmadd_pd(lo, lo, s0);
        s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
    return cl_hsum4d(_mm256_add_pd(s0, s1)) + sumsq_plain(x + i, n - i);
}
#endif

_Static_assert(CL_SUMSQ_BLOCK == CL_SIMD_BLOCK, "cl_sumsq's blocks are CL_SIMD_BLOCK");

double cl_sumsq_block(const float *x, int64_t n) {
#ifdef CL_SIMD_X86
    if (cl_simd() == CL_SIMD_AVX2) return sumsq_avx2(x, n);
#endif
    return sumsq_plain(x, n);
}

/* Blocks of CL_SIMD_BLOCK are summed on any thread, their sums then in
 * block order: the same bits for every thread count. */
double cl_sumsq(const float *x, int64_t n) {
    enum { GROUP = 256 };
    double total = 0.0;
    for (int64_t g0 = 0; g0 < n; g0 += (int64_t)GROUP * CL_SIMD_BLOCK) {
        int64_t gn = n - g0 < (int64_t)GROUP * CL_SIMD_BLOCK ? n - g0 : (int64_t)GROUP * CL_SIMD_BLOCK;
        double part[GROUP];
        const float *xg = x + g0;
        CL_FOR_BLOCKS(gn, lo, len, { part[lo / CL_SIMD_BLOCK] = cl_sumsq_block(xg + lo, len); });
        int64_t nb = (gn + CL_SIMD_BLOCK - 1) / CL_SIMD_BLOCK;
        for (int64_t b = 0; b < nb; b++) total += part[b];
    }
    return total;
}

void cl_scale(float *x, float s, int64_t n) {
    CL_FOR_BLOCKS(n, lo, len, {
        for (int64_t i = lo; i < lo + len; i++) x[i] *= s;
    });
}
