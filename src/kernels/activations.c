/* Element-wise kernels: GELU (GPT-2's tanh form), ReLU, residual add.
 *
 * GELU: out = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3);
 *   d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3*0.044715 x^2).
 * The AVX2 path evaluates tanh and sech^2 through cl_exp8 (simd.h; the
 * AVX-512 path through cl_exp16, the same bits as AVX2's): its
 * sech^2 does not cancel in the tails as the plain path's 1 - tanh^2 does,
 * so the two agree to 1e-6 of the largest value; the tests hold them to it.
 * ReLU's backward takes the forward output: the gradient passes where
 * out > 0. Backward kernels add into din, except cl_gelu_backward_set.
 * cl_gelu_forward_bf16 / cl_bias_gelu_forward_bf16 (bf16 mixed precision:
 * GELU's output is the fc_proj GEMM's BF16 operand) run the F32 kernel's
 * path on a block into a 64 KiB buffer on the stack and round it: each
 * value is cl_bf16_from_f32 of the F32 kernel's (pre stays F32).
 * cl_gelu_backward_set_bf16 writes din as cl_gelu_backward_set and, block
 * by block while it is in cache, its BF16 copy (the c_fc GEMM's operand). */
#include "cleave/kernels.h"
#include "kernels/simd.h"

#include <math.h>

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

static float gelu_grad(float x) {
    float u = GELU_K * (x + GELU_C * x * x * x);
    float th = tanhf(u);
    float du = GELU_K * (1.0f + 3.0f * GELU_C * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

static void gelu_fwd_plain(float *out, const float *in, const float *bias, int64_t n, int64_t c0, int C, float *pre) {
    for (int64_t i = 0; i < n; i++) {
        float x = in[i];
        if (bias) {
            x += bias[(c0 + i) % C];
            pre[i] = x;
        }
        float u = GELU_K * (x + GELU_C * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

static void gelu_bwd_plain(float *din, const float *dout, const float *in, int64_t n, int set) {
    for (int64_t i = 0; i < n; i++) {
        float g = gelu_grad(in[i]) * dout[i];
        din[i] = set ? g : din[i] + g;
    }
}

#ifdef CL_SIMD_X86
CL_AVX2 static __m256 gelu8(__m256 x) {
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 u = _mm256_mul_ps(_mm256_set1_ps(GELU_K), _mm256_fmadd_ps(_mm256_set1_ps(GELU_C), x3, x));
    __m256 half_x = _mm256_mul_ps(_mm256_set1_ps(0.5f), x);
    return _mm256_fmadd_ps(half_x, cl_tanh8(u, NULL), half_x);
}

/* Rows of C with the bias added first (pre = in + bias, kept) when bias is given. */
CL_AVX2 static void gelu_fwd_avx2(float *out, const float *in, const float *bias, int64_t n, int64_t c0, int C, float *pre) {
    int64_t i = 0;
    if (!bias) {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, gelu8(_mm256_loadu_ps(in + i)));
    } else {
        /* walk row by row so the bias index is a plain offset */
        while (i < n) {
            int64_t c = (c0 + i) % C, run = C - c < n - i ? C - c : n - i, j = 0;
            for (; j + 8 <= run; j += 8) {
                __m256 x = _mm256_add_ps(_mm256_loadu_ps(in + i + j), _mm256_loadu_ps(bias + c + j));
                _mm256_storeu_ps(pre + i + j, x);
                _mm256_storeu_ps(out + i + j, gelu8(x));
            }
            gelu_fwd_plain(out + i + j, in + i + j, bias, run - j, c0 + i + j, C, pre + i + j);
            i += run;
        }
        return;
    }
    gelu_fwd_plain(out + i, in + i, NULL, n - i, 0, 1, NULL);
}

CL_AVX2 static void gelu_bwd_avx2(float *din, const float *dout, const float *in, int64_t n, int set) {
    const __m256 K = _mm256_set1_ps(GELU_K), Cc = _mm256_set1_ps(GELU_C), half = _mm256_set1_ps(0.5f);
    const __m256 one = _mm256_set1_ps(1.0f), c3 = _mm256_set1_ps(3.0f * GELU_C);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(in + i);
        __m256 xx = _mm256_mul_ps(x, x);
        __m256 u = _mm256_mul_ps(K, _mm256_fmadd_ps(Cc, _mm256_mul_ps(xx, x), x));
        __m256 sech2;
        __m256 th = cl_tanh8(u, &sech2);
        __m256 du = _mm256_mul_ps(K, _mm256_fmadd_ps(c3, xx, one));
        __m256 g = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(half, x), sech2), du, _mm256_mul_ps(half, _mm256_add_ps(one, th)));
        g = _mm256_mul_ps(g, _mm256_loadu_ps(dout + i));
        if (!set) g = _mm256_add_ps(g, _mm256_loadu_ps(din + i));
        _mm256_storeu_ps(din + i, g);
    }
    gelu_bwd_plain(din + i, dout + i, in + i, n - i, set);
}

/* The AVX2 bodies on 16 lanes, each operation as there: the same bits. */
CL_AVX512 static __m512 gelu16(__m512 x) {
    __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    __m512 u = _mm512_mul_ps(_mm512_set1_ps(GELU_K), _mm512_fmadd_ps(_mm512_set1_ps(GELU_C), x3, x));
    __m512 half_x = _mm512_mul_ps(_mm512_set1_ps(0.5f), x);
    return _mm512_fmadd_ps(half_x, cl_tanh16(u, NULL), half_x);
}

CL_AVX512 static void gelu_fwd_avx512(float *out, const float *in, const float *bias, int64_t n, int64_t c0, int C,
                                      float *pre) {
    int64_t i = 0;
    while (i < n) { /* without bias one run; with it row by row, so the bias index is a plain offset */
        int64_t c = bias ? (c0 + i) % C : 0, run = !bias ? n : C - c < n - i ? C - c : n - i, j = 0;
        for (; j + 16 <= run; j += 16) {
            __m512 x = _mm512_loadu_ps(in + i + j);
            if (bias) {
                x = _mm512_add_ps(x, _mm512_loadu_ps(bias + c + j));
                _mm512_storeu_ps(pre + i + j, x);
            }
            _mm512_storeu_ps(out + i + j, gelu16(x));
        }
        gelu_fwd_avx2(out + i + j, in + i + j, bias, run - j, c0 + i + j, C, bias ? pre + i + j : NULL);
        i += run;
    }
}

CL_AVX512 static void gelu_bwd_avx512(float *din, const float *dout, const float *in, int64_t n, int set) {
    const __m512 K = _mm512_set1_ps(GELU_K), Cc = _mm512_set1_ps(GELU_C), half = _mm512_set1_ps(0.5f);
    const __m512 one = _mm512_set1_ps(1.0f), c3 = _mm512_set1_ps(3.0f * GELU_C);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(in + i);
        __m512 xx = _mm512_mul_ps(x, x);
        __m512 u = _mm512_mul_ps(K, _mm512_fmadd_ps(Cc, _mm512_mul_ps(xx, x), x));
        __m512 sech2;
        __m512 th = cl_tanh16(u, &sech2);
        __m512 du = _mm512_mul_ps(K, _mm512_fmadd_ps(c3, xx, one));
        __m512 g = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(half, x), sech2), du, _mm512_mul_ps(half, _mm512_add_ps(one, th)));
        g = _mm512_mul_ps(g, _mm512_loadu_ps(dout + i));
        if (!set) g = _mm512_add_ps(g, _mm512_loadu_ps(din + i));
        _mm512_storeu_ps(din + i, g);
    }
    gelu_bwd_avx2(din + i, dout + i, in + i, n - i, set);
}
#endif

/* The forward on [0, n) of a block by the widest path v (cl_simd_level()). */
static void gelu_fwd_any(int v, float *out, const float *in, const float *bias, int64_t n, int64_t c0, int C, float *pre) {
#ifdef CL_SIMD_X86
    if (v >= CL_ISA_AVX512) gelu_fwd_avx512(out, in, bias, n, c0, C, pre);
    else if (v == CL_ISA_AVX2) gelu_fwd_avx2(out, in, bias, n, c0, C, pre);
    else
#endif
        gelu_fwd_plain(out, in, bias, n, c0, C, pre);
    (void)v;
}

void cl_gelu_forward(float *out, const float *in, int64_t n) {
    int v = cl_simd_level();
    CL_FOR_BLOCKS(n, lo, len, gelu_fwd_any(v, out + lo, in + lo, NULL, len, 0, 1, NULL));
}

void cl_bias_gelu_forward(float *out, float *pre, const float *bias, int N, int C) {
    int v = cl_simd_level();
    int64_t n = (int64_t)N * C;
    CL_FOR_BLOCKS(n, lo, len, gelu_fwd_any(v, out + lo, pre + lo, bias, len, lo, C, pre + lo));
}

/* din = / += GELU'(in) dout by blocks; with dbf, each finished block of din
 * rounded into dbf too while it is in cache. */
static void gelu_backward(float *din, uint16_t *dbf, const float *dout, const float *in, int64_t n, int set) {
    int v = cl_simd_level();
    CL_FOR_BLOCKS(n, lo, len, {
#ifdef CL_SIMD_X86
        if (v >= CL_ISA_AVX512) gelu_bwd_avx512(din + lo, dout + lo, in + lo, len, set);
        else if (v == CL_ISA_AVX2) gelu_bwd_avx2(din + lo, dout + lo, in + lo, len, set);
        else
#endif
            gelu_bwd_plain(din + lo, dout + lo, in + lo, len, set);
        if (dbf) cl_bf16_pack_serial(dbf + lo, din + lo, len, v);
    });
    (void)v;
}

void cl_gelu_backward(float *din, const float *dout, const float *in, int64_t n) { gelu_backward(din, NULL, dout, in, n, 0); }

void cl_gelu_backward_set(float *din, const float *dout, const float *in, int64_t n) { gelu_backward(din, NULL, dout, in, n, 1); }

void cl_gelu_backward_set_bf16(float *din, uint16_t *dbf, const float *dout, const float *in, int64_t n) {
    gelu_backward(din, dbf, dout, in, n, 1);
}

/* One block of GELU (with the bias when given) into a stack buffer, then rounded into obf. */
static void gelu_block_bf16(uint16_t *obf, const float *in, const float *bias, int64_t len, int64_t c0, int C, float *pre,
                            int v) {
    float tmp[CL_SIMD_BLOCK];
    gelu_fwd_any(v, tmp, in, bias, len, c0, C, pre);
    cl_bf16_pack_serial(obf, tmp, len, v);
}

void cl_gelu_forward_bf16(uint16_t *out, const float *in, int64_t n) {
    int v = cl_simd_level();
    CL_FOR_BLOCKS(n, lo, len, gelu_block_bf16(out + lo, in + lo, NULL, len, 0, 1, NULL, v));
}

void cl_bias_gelu_forward_bf16(uint16_t *out, float *pre, const float *bias, int N, int C) {
    int v = cl_simd_level();
    int64_t n = (int64_t)N * C;
    CL_FOR_BLOCKS(n, lo, len, gelu_block_bf16(out + lo, pre + lo, bias, len, lo, C, pre + lo, v));
}

void cl_relu_forward(float *out, const float *in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void cl_relu_backward(float *din, const float *dout, const float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (out[i] > 0.0f) din[i] += dout[i];
}

void cl_residual_forward(float *out, const float *a, const float *b, int64_t n) {
    CL_FOR_BLOCKS(n, lo, len, {
        for (int64_t i = lo; i < lo + len; i++) out[i] = a[i] + b[i];
    });
}

void cl_add_inplace(float *dst, const float *src, int64_t n) {
    CL_FOR_BLOCKS(n, lo, len, {
        for (int64_t i = lo; i < lo + len; i++) dst[i] += src[i];
    });
}

void cl_add_bias(float *x, const float *bias, int64_t rows, int64_t C) {
    if (!bias) return; /* a layer without biases (Llama's) */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < C; j++) x[i * C + j] += bias[j];
}

double cl_sum(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    return s;
}
