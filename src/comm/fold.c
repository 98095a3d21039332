/* The reduction every backend uses (cl_fold_rows) and the copies for
 * communication buffers (cl_copy, cl_copy_stream).
 *
 * Why one place: cleave promises bitwise equal reductions across ranks,
 * runs and backends; that holds because every backend folds through this
 * code: element i of the result is ((x_0 op x_1) op x_2) ... op x_{n-1},
 * then / n for AVG, each step one IEEE operation in the element type with
 * the accumulator as the first operand (F32 and F64); the 16-bit formats
 * (BF16, F16) fold the same way in F32 and round once at the end. The SSE2 path computes exactly what
 * the scalar path does (the same single operations, element by element).
 *
 * Why one pass: the fold keeps a 64-byte line of the partial result in
 * registers, reads that line of every source once and stores it into every
 * destination; each byte crosses the memory bus once per source and once
 * per destination. (An earlier version folded 4 KiB blocks into an L1
 * array and copied it out, which added a pass and ran at about half of
 * this on the 2-core EPYC VM: docs/PERFORMANCE.md.)
 *
 * Why not memcpy everywhere: on the machines this was measured on (AMD
 * EPYC VMs), glibc's memcpy uses `rep movsb` for 2 KiB .. 64 KiB and moves
 * only 2-3 GB/s there, against 40-70 GB/s for plain vector stores; so the
 * fold never calls memcpy, and cl_copy uses vector stores below 256 KiB.
 *
 * Invariants: every source line is loaded before the same line of any
 * destination is stored, so a destination may alias a source at the same
 * offset (in-place all-reduce). With stream, stores bypass the cache
 * (non-temporal) and are fenced before returning: only for destinations
 * that are not read first (an in-place all-reduce has its lines in the
 * cache already, and streaming them measured slower). */
#include "comm/internal.h"

#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

static inline float max_f(float acc, float x) { return (x > acc || x != x) ? x : acc; }
static inline double max_d(double acc, double x) { return (x > acc || x != x) ? x : acc; }

#ifdef __SSE2__
/* acc op x for 4 floats / 2 doubles, as max_f / max_d element by element */
static inline __m128 vmax_f(__m128 acc, __m128 x) {
    __m128 k = _mm_or_ps(_mm_cmpgt_ps(x, acc), _mm_cmpunord_ps(x, x));
    return _mm_or_ps(_mm_and_ps(k, x), _mm_andnot_ps(k, acc));
}
static inline __m128d vmax_d(__m128d acc, __m128d x) {
    __m128d k = _mm_or_pd(_mm_cmpgt_pd(x, acc), _mm_cmpunord_pd(x, x));
    return _mm_or_pd(_mm_and_pd(k, x), _mm_andnot_pd(k, acc));
}
#define LINE_LOOP(T, V, LD, ST, NT, ADD, MAX, DIV, SET1)                                                        \
    {                                                                                                        \
        enum { L = sizeof(V) / sizeof(T) };                                                                  \
        V dv = SET1((T)n);                                                                                   \
        for (; i + 4 * L <= len; i += 4 * L) {                                                               \
            const T *s = (const T *)src[0] + i;                                                              \
            V a0 = LD(s), a1 = LD(s + L), a2 = LD(s + 2 * L), a3 = LD(s + 3 * L);                            \
            for (int j = 1; j < n; j++) {                                                                    \
                s = (const T *)src[j] + i;                                                                   \
                if (is_max) {                                                                                \
                    a0 = MAX(a0, LD(s)), a1 = MAX(a1, LD(s + L));                                            \
                    a2 = MAX(a2, LD(s + 2 * L)), a3 = MAX(a3, LD(s + 3 * L));                                \
                } else {                                                                                     \
                    a0 = ADD(a0, LD(s)), a1 = ADD(a1, LD(s + L));                                            \
                    a2 = ADD(a2, LD(s + 2 * L)), a3 = ADD(a3, LD(s + 3 * L));                                \
                }                                                                                            \
            }                                                                                                \
            if (avg) a0 = DIV(a0, dv), a1 = DIV(a1, dv), a2 = DIV(a2, dv), a3 = DIV(a3, dv);                 \
            for (int k = 0; k < ndst; k++) {                                                                 \
                T *d = (T *)dst[k] + i;                                                                      \
                if (stream) NT(d, a0), NT(d + L, a1), NT(d + 2 * L, a2), NT(d + 3 * L, a3);                  \
                else ST(d, a0), ST(d + L, a1), ST(d + 2 * L, a2), ST(d + 3 * L, a3);                         \
            }                                                                                                \
        }                                                                                                    \
    }
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* The same loop with 256-bit vectors where the CPU has AVX2 (chosen at run
 * time; the operations, and so the bits, are those of the SSE2 loop). */
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2")))
AVX2 static inline __m256 vmax8_f(__m256 acc, __m256 x) {
    __m256 k = _mm256_or_ps(_mm256_cmp_ps(x, acc, _CMP_GT_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_ps(acc, x, k);
}
AVX2 static inline __m256d vmax4_d(__m256d acc, __m256d x) {
    __m256d k = _mm256_or_pd(_mm256_cmp_pd(x, acc, _CMP_GT_OQ), _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_pd(acc, x, k);
}
AVX2 static size_t lines_f32_avx2(int is_max, int avg, int n, const void *const *src, void *const *dst, int ndst,
                                  size_t len, int stream) {
    size_t i = 0;
    LINE_LOOP(float, __m256, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_stream_ps, _mm256_add_ps, vmax8_f,
              _mm256_div_ps, _mm256_set1_ps)
    return i;
}
AVX2 static size_t lines_f64_avx2(int is_max, int avg, int n, const void *const *src, void *const *dst, int ndst,
                                  size_t len, int stream) {
    size_t i = 0;
    LINE_LOOP(double, __m256d, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_stream_pd, _mm256_add_pd, vmax4_d,
              _mm256_div_pd, _mm256_set1_pd)
    return i;
}
#define AVX2_LINES(fn)                                                                                       \
    if ((cl_cpu_features() & CL_CPU_AVX2) && (!stream || aligned32)) i = fn(is_max, avg, n, src, dst, ndst, len, stream);
#else
#define AVX2_LINES(fn)
#endif

#define TAIL_LOOP(T, MAXS)                                                                                   \
    for (; i < len; i++) {                                                                                   \
        T acc = ((const T *)src[0])[i];                                                                      \
        for (int j = 1; j < n; j++) {                                                                        \
            T x = ((const T *)src[j])[i];                                                                    \
            acc = is_max ? MAXS(acc, x) : acc + x;                                                           \
        }                                                                                                    \
        if (avg) acc = acc / (T)n;                                                                           \
        for (int k = 0; k < ndst; k++) ((T *)dst[k])[i] = acc;                                               \
    }

static void fold_f32(int is_max, int avg, int n, const void *const *src, void *const *dst, int ndst, size_t len,
                     int stream, int aligned32) {
    size_t i = 0;
    AVX2_LINES(lines_f32_avx2)
#ifdef __SSE2__
    LINE_LOOP(float, __m128, _mm_loadu_ps, _mm_storeu_ps, _mm_stream_ps, _mm_add_ps, vmax_f, _mm_div_ps, _mm_set1_ps)
#else
    (void)stream;
#endif
    TAIL_LOOP(float, max_f)
}

static void fold_f64(int is_max, int avg, int n, const void *const *src, void *const *dst, int ndst, size_t len,
                     int stream, int aligned32) {
    size_t i = 0;
    AVX2_LINES(lines_f64_avx2)
#ifdef __SSE2__
    LINE_LOOP(double, __m128d, _mm_loadu_pd, _mm_storeu_pd, _mm_stream_pd, _mm_add_pd, vmax_d, _mm_div_pd,
              _mm_set1_pd)
#else
    (void)stream;
#endif
    TAIL_LOOP(double, max_d)
}

/* bytes from s to d (no overlap), vector stores; stream: non-temporal */
static void put(char *d, const char *s, size_t bytes, int stream) {
    size_t i = 0;
#ifdef __SSE2__
    if (stream) {
        while (i < bytes && ((uintptr_t)(d + i) & 15)) {
            d[i] = s[i];
            i++;
        }
        for (; i + 64 <= bytes; i += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(s + i)), b = _mm_loadu_si128((const __m128i *)(s + i + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32)), e = _mm_loadu_si128((const __m128i *)(s + i + 48));
            _mm_stream_si128((__m128i *)(d + i), a);
            _mm_stream_si128((__m128i *)(d + i + 16), b);
            _mm_stream_si128((__m128i *)(d + i + 32), c);
            _mm_stream_si128((__m128i *)(d + i + 48), e);
        }
    } else {
        for (; i + 64 <= bytes; i += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(s + i)), b = _mm_loadu_si128((const __m128i *)(s + i + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32)), e = _mm_loadu_si128((const __m128i *)(s + i + 48));
            _mm_storeu_si128((__m128i *)(d + i), a);
            _mm_storeu_si128((__m128i *)(d + i + 16), b);
            _mm_storeu_si128((__m128i *)(d + i + 32), c);
            _mm_storeu_si128((__m128i *)(d + i + 48), e);
        }
    }
    for (; i + 16 <= bytes; i += 16)
        _mm_storeu_si128((__m128i *)(d + i), _mm_loadu_si128((const __m128i *)(s + i)));
    if (stream) _mm_sfence();
#else
    (void)stream;
#endif
    if (i < bytes) memcpy(d + i, s + i, bytes - i);
}

void cl_copy(void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    if (bytes >= 256 * 1024) memcpy(dst, src, bytes);
    else put(dst, src, bytes, 0);
}

void cl_copy_stream(void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    put(dst, src, bytes, 1);
}

/* 16-bit formats (BF16, F16): each element is widened to F32, folded in F32
 * as fold_f32 folds (the accumulator first, one IEEE operation a step, AVG
 * one division by n), and rounded once to the format at the end (nearest
 * even, cl_bf16_from_f32 / cl_f16_from_f32). A block of the result is kept
 * in F32 until every source of the block is read, so a destination may
 * alias a source at the same offset here too. */
static void fold_half(cl_dtype dt, int is_max, int avg, int n, const void *const *src, void *const *dst, int ndst,
                      size_t len) {
    enum { B = 256 };
    float acc[B];
    int bf = dt == CL_BF16;
    for (size_t i0 = 0; i0 < len; i0 += B) {
        size_t m = len - i0 < B ? len - i0 : B;
        const uint16_t *s = (const uint16_t *)src[0] + i0;
        for (size_t k = 0; k < m; k++) acc[k] = bf ? cl_bf16_to_f32(s[k]) : cl_f16_to_f32(s[k]);
        for (int j = 1; j < n; j++) {
            s = (const uint16_t *)src[j] + i0;
            for (size_t k = 0; k < m; k++) {
                float x = bf ? cl_bf16_to_f32(s[k]) : cl_f16_to_f32(s[k]);
                acc[k] = is_max ? max_f(acc[k], x) : acc[k] + x;
            }
        }
        if (avg)
            for (size_t k = 0; k < m; k++) acc[k] = acc[k] / (float)n;
        for (int d = 0; d < ndst; d++) {
            uint16_t *o = (uint16_t *)dst[d] + i0;
            for (size_t k = 0; k < m; k++) o[k] = bf ? cl_bf16_from_f32(acc[k]) : cl_f16_from_f32(acc[k]);
        }
    }
}

void cl_fold_rows(cl_dtype dt, cl_redop op, int n, const void *const *src, void *const *dst, int ndst, size_t len,
                  int stream) {
    if (len == 0) return;
    int aligned32 = 1; /* non-temporal stores need aligned vectors */
    for (int k = 0; k < ndst && stream; k++) {
        if ((uintptr_t)dst[k] & 15) stream = 0;
        if ((uintptr_t)dst[k] & 31) aligned32 = 0;
    }
    int is_max = op == CL_RED_MAX, avg = op == CL_RED_AVG;
    if (dt == CL_BF16 || dt == CL_F16) {
        fold_half(dt, is_max, avg, n, src, dst, ndst, len); /* cached stores: the rows are small next to F32's */
        return;
    }
    if (dt == CL_F64) fold_f64(is_max, avg, n, src, dst, ndst, len, stream, aligned32);
    else fold_f32(is_max, avg, n, src, dst, ndst, len, stream, aligned32);
#ifdef __SSE2__
    if (stream) _mm_sfence();
#endif
}
