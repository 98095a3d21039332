/* The reduction every backend uses (cl_fold_rows) and a copy for
 * communication buffers (cl_copy).
 *
 * Why one place: cleave promises bitwise equal reductions across ranks,
 * runs and backends; that holds because every backend folds through this
 * code: element i of the result is ((x_0 op x_1) op x_2) ... op x_{n-1},
 * then / n for AVG, each step one IEEE operation in the element type with
 * the accumulator as the first operand. The SSE2 path computes exactly what
 * the scalar path does (the same single operations, element by element).
 *
 * Why not memcpy everywhere: on the machines this was measured on (AMD
 * EPYC VMs), glibc's memcpy uses `rep movsb` for 2 KiB .. 64 KiB and moves
 * only 2-3 GB/s there, against 40-70 GB/s for plain vector stores; so the
 * fold never calls memcpy, and cl_copy uses vector stores below 256 KiB.
 *
 * Invariants: the partial result of a block lives in a local array (L1), so
 * a destination may alias a source at the same offset (in-place
 * all-reduce). With stream, stores bypass the cache (non-temporal) and are
 * fenced before returning, for buffers much larger than the caches. */
#include "comm/internal.h"

#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

enum { BLOCK_BYTES = 4096 };

static inline float max_f(float acc, float x) { return (x > acc || x != x) ? x : acc; }
static inline double max_d(double acc, double x) { return (x > acc || x != x) ? x : acc; }

/* t = a op b (a the accumulator) */
static void comb_f32(float *t, const float *a, const float *b, size_t m, int is_max) {
    size_t i = 0;
#ifdef __SSE2__
    if (is_max) {
        for (; i + 4 <= m; i += 4) {
            __m128 acc = _mm_loadu_ps(a + i), x = _mm_loadu_ps(b + i);
            __m128 k = _mm_or_ps(_mm_cmpgt_ps(x, acc), _mm_cmpunord_ps(x, x));
            _mm_storeu_ps(t + i, _mm_or_ps(_mm_and_ps(k, x), _mm_andnot_ps(k, acc)));
        }
    } else {
        for (; i + 4 <= m; i += 4) _mm_storeu_ps(t + i, _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
    }
#endif
    for (; i < m; i++) t[i] = is_max ? max_f(a[i], b[i]) : a[i] + b[i];
}

static void comb_f64(double *t, const double *a, const double *b, size_t m, int is_max) {
    size_t i = 0;
#ifdef __SSE2__
    if (is_max) {
        for (; i + 2 <= m; i += 2) {
            __m128d acc = _mm_loadu_pd(a + i), x = _mm_loadu_pd(b + i);
            __m128d k = _mm_or_pd(_mm_cmpgt_pd(x, acc), _mm_cmpunord_pd(x, x));
            _mm_storeu_pd(t + i, _mm_or_pd(_mm_and_pd(k, x), _mm_andnot_pd(k, acc)));
        }
    } else {
        for (; i + 2 <= m; i += 2) _mm_storeu_pd(t + i, _mm_add_pd(_mm_loadu_pd(a + i), _mm_loadu_pd(b + i)));
    }
#endif
    for (; i < m; i++) t[i] = is_max ? max_d(a[i], b[i]) : a[i] + b[i];
}

static void div_f32(float *t, size_t m, float d) {
    size_t i = 0;
#ifdef __SSE2__
    __m128 v = _mm_set1_ps(d);
    for (; i + 4 <= m; i += 4) _mm_storeu_ps(t + i, _mm_div_ps(_mm_loadu_ps(t + i), v));
#endif
    for (; i < m; i++) t[i] = t[i] / d;
}

static void div_f64(double *t, size_t m, double d) {
    size_t i = 0;
#ifdef __SSE2__
    __m128d v = _mm_set1_pd(d);
    for (; i + 2 <= m; i += 2) _mm_storeu_pd(t + i, _mm_div_pd(_mm_loadu_pd(t + i), v));
#endif
    for (; i < m; i++) t[i] = t[i] / d;
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

void cl_fold_rows(cl_dtype dt, cl_redop op, int n, const void *const *src, void *const *dst, int ndst, size_t len,
                  int stream) {
    if (len == 0) return;
    size_t es = cl_dtype_size(dt), block = BLOCK_BYTES / es;
    int is_max = op == CL_RED_MAX;
    union {
        float f[BLOCK_BYTES / sizeof(float)];
        double d[BLOCK_BYTES / sizeof(double)];
    } t;
    for (size_t off = 0; off < len; off += block) {
        size_t m = len - off < block ? len - off : block;
        if (dt == CL_DT_F64) {
            if (n == 1) put((char *)t.d, (const char *)((const double *)src[0] + off), m * es, 0);
            else comb_f64(t.d, (const double *)src[0] + off, (const double *)src[1] + off, m, is_max);
            for (int j = 2; j < n; j++) comb_f64(t.d, t.d, (const double *)src[j] + off, m, is_max);
            if (op == CL_RED_AVG) div_f64(t.d, m, (double)n);
        } else {
            if (n == 1) put((char *)t.f, (const char *)((const float *)src[0] + off), m * es, 0);
            else comb_f32(t.f, (const float *)src[0] + off, (const float *)src[1] + off, m, is_max);
            for (int j = 2; j < n; j++) comb_f32(t.f, t.f, (const float *)src[j] + off, m, is_max);
            if (op == CL_RED_AVG) div_f32(t.f, m, (float)n);
        }
        for (int k = 0; k < ndst; k++) put((char *)dst[k] + off * es, (const char *)t.f, m * es, stream);
    }
#ifdef __SSE2__
    if (stream) _mm_sfence();
#endif
}
