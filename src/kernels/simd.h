/* Vector paths of the kernels, chosen at run time.
 *
 * Each kernel with a vector path keeps its plain C loop (the reference the
 * tests compare against) and adds an AVX2 + FMA body compiled for that ISA
 * alone (a target attribute), so one binary runs on any x86-64 and uses
 * AVX2 where the CPU has it. cl_simd() says which path runs: it is read per
 * call, so a test can force the plain path (cl_kernels_force_plain) and
 * compare. Kernels with an AVX-512 body (AVX-512 F/BW/DQ/VL, and the BF16
 * conversions where the CPU has AVX512_BF16) pick it by cl_simd_level();
 * the rest take the AVX2 path on AVX-512 machines. An AVX-512 body of an
 * element-wise map does the AVX2 body's operations in the same order, so
 * the bits do not change with the width.
 *
 * Threads: kernels split their rows or elements over the calling thread's
 * OpenMP team (cl_set_threads). Every split is by fixed-size blocks or by
 * rows, never by thread count, and no thread's result depends on another's,
 * so a kernel's output is the same bits for any thread count. */
#ifndef CLEAVE_KERNELS_SIMD_H
#define CLEAVE_KERNELS_SIMD_H

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#define CL_SIMD_X86 1
#include <immintrin.h>
#define CL_AVX2 __attribute__((target("avx2,fma")))
#define CL_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#define CL_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma")))
#endif

enum { CL_SIMD_PLAIN = 0, CL_SIMD_AVX2 = 1 };

/* The path kernels take now: CL_SIMD_AVX2 when the CPU has AVX2 and FMA and
 * the plain path is not forced. */
int cl_simd(void);

/* The widest path: the CPU's (CL_ISA_AVX512: AVX-512 F, BW, DQ and VL with
 * AVX2 and FMA; CL_ISA_AVX512BF16: that and AVX512_BF16), capped by
 * cl_kernels_max_isa and by cl_kernels_force_plain. cl_simd() is
 * CL_SIMD_AVX2 exactly when this is at least CL_ISA_AVX2. */
enum { CL_ISA_PLAIN = 0, CL_ISA_AVX2 = 1, CL_ISA_AVX512 = 2, CL_ISA_AVX512BF16 = 3 };
int cl_simd_level(void);

/* cl_bf16_pack on the calling thread alone by path v (cl_simd_level()'s
 * value, read once by the caller): for kernels that round their output
 * inside their own parallel loop (convert.c). */
void cl_bf16_pack_serial(uint16_t *dst, const float *src, int64_t n, int v);

/* Elements per parallel block of the element-wise kernels. */
#define CL_SIMD_BLOCK 16384

/* Runs body for each block [lo, lo + len) of [0, n), the blocks spread over
 * the calling thread's OpenMP team. */
#define CL_FOR_BLOCKS(n, lo, len, body)                                              \
    do {                                                                           \
        int64_t nb_ = ((n) + CL_SIMD_BLOCK - 1) / CL_SIMD_BLOCK;                   \
        _Pragma("omp parallel for schedule(static) if (nb_ > 1)")                  \
        for (int64_t b_ = 0; b_ < nb_; b_++) {                                     \
            int64_t lo = b_ * CL_SIMD_BLOCK;                                       \
            int64_t len = (n) - lo < CL_SIMD_BLOCK ? (n) - lo : CL_SIMD_BLOCK;     \
            body;                                                                  \
        }                                                                          \
    } while (0)

#ifdef CL_SIMD_X86
/* exp(x) for 8 floats: x = n ln2 + r, |r| <= ln2/2, e^r by its Taylor
 * polynomial to degree 7 (truncation below 6e-9 relative), times 2^n put
 * into the exponent. Within 2 ulp of expf over [-87.3, 88.7]; below that the
 * result is 0, above it +inf; NaN stays NaN. */
CL_AVX2 static inline __m256 cl_exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.7f), lo = _mm256_set1_ps(-87.3f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    __m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n in two halves, so that n = 128 (x near 88.7) does not overflow the exponent field */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i h1 = _mm256_srai_epi32(ni, 1), h2 = _mm256_sub_epi32(ni, h1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h2, _mm256_set1_epi32(127)), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    y = _mm256_andnot_ps(under, y);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), over);
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* tanh(u) and sech^2(u) = 1 - tanh^2(u) from e = exp(-2|u|) in (0, 1]:
 * tanh = sign(u) (1 - e) / (1 + e), sech^2 = 4 e / (1 + e)^2. Nothing
 * overflows, and sech^2 keeps its relative accuracy in the tails where
 * 1 - tanh^2 would cancel to 0. */
CL_AVX2 static inline __m256 cl_tanh8(__m256 u, __m256 *sech2) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_andnot_ps(sign, u);
    __m256 e = cl_exp8(_mm256_mul_ps(a, _mm256_set1_ps(-2.0f)));
    __m256 r = _mm256_div_ps(one, _mm256_add_ps(one, e));
    __m256 t = _mm256_or_ps(_mm256_mul_ps(_mm256_sub_ps(one, e), r), _mm256_and_ps(u, sign));
    if (sech2) *sech2 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(4.0f), e), r), r);
    return t;
}

/* cl_exp8 and cl_tanh8 on 16 lanes: the same operations in the same order
 * (round to nearest, the same FMAs, the same divide), so each lane's bits
 * equal cl_exp8's / cl_tanh8's on that value. */
CL_AVX512 static inline __m512 cl_exp16(__m512 x) {
    const __m512 hi = _mm512_set1_ps(88.7f), lo = _mm512_set1_ps(-87.3f);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    __mmask16 over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i h1 = _mm512_srai_epi32(ni, 1), h2 = _mm512_sub_epi32(ni, h1);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(h1, _mm512_set1_epi32(127)), 23));
    __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(h2, _mm512_set1_epi32(127)), 23));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
    y = _mm512_maskz_mov_ps((__mmask16)~under, y);
    y = _mm512_mask_mov_ps(y, over, _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

CL_AVX512 static inline __m512 cl_tanh16(__m512 u, __m512 *sech2) {
    const __m512 one = _mm512_set1_ps(1.0f), sign = _mm512_set1_ps(-0.0f);
    __m512 a = _mm512_andnot_ps(sign, u);
    __m512 e = cl_exp16(_mm512_mul_ps(a, _mm512_set1_ps(-2.0f)));
    __m512 r = _mm512_div_ps(one, _mm512_add_ps(one, e));
    __m512 t = _mm512_or_ps(_mm512_mul_ps(_mm512_sub_ps(one, e), r), _mm512_and_ps(u, sign));
    if (sech2) *sech2 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(4.0f), e), r), r);
    return t;
}

/* Horizontal sums and maximum of 8 lanes. */
CL_AVX2 static inline float cl_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
CL_AVX2 static inline double cl_hsum4d(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
CL_AVX2 static inline float cl_hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

#endif
