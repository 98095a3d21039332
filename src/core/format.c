/* Conversions between number formats (see tensor.h): F32 <-> BF16 and
 * F32 <-> F16, one value or an array, written once here so that
 * collectives, safetensors and (later) kernels round alike.
 *
 * Why by integer arithmetic: the results must not depend on the compiler's
 * or the CPU's floating-point modes or on F16C/AVX-512-BF16 being present;
 * these are the IEEE 754 roundings (nearest, ties to even) on the bits.
 *
 * Invariants: to a 16-bit format, a finite value rounds once to nearest
 * even, a value past the largest finite one (after rounding) becomes an
 * infinity of its sign, a NaN stays a quiet NaN with its sign (and the top
 * bits of its payload); widening is exact (subnormals included).
 * Arrays of F32 <-> BF16 go through cl_bf16_pack / cl_bf16_unpack
 * (src/kernels/convert.c): vector paths with these very bits. */
#include "cleave/kernels.h"
#include "cleave/tensor.h"
#include "core/bf16_bits.h"

#include <string.h>

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* the bits: core/bf16_bits.h (shared with kernels/convert.c's scalar tails) */
uint16_t cl_bf16_from_f32(float x) { return cl_bf16_round_bits(x); }

float cl_bf16_to_f32(uint16_t h) { return cl_bf16_widen_bits(h); }

uint16_t cl_f16_from_f32(float x) {
    uint32_t u = bits_of(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN: quiet */
    if (a >= 0x47800000u) return (uint16_t)(sign | 0x7c00u);                      /* >= 2^16 (and inf): inf */
    if (a >= 0x38800000u) { /* a normal F16 (>= 2^-14): rebias the exponent by 127 - 15, round 13 bits */
        uint32_t r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u); /* a carry into exponent 31 gives inf, as it should */
        return (uint16_t)(sign | (r >> 13));
    }
    if (a <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25, half the smallest subnormal: ties to even, zero */
    /* a subnormal F16: the value in units of 2^-24 is m * 2^(e - 126), e <= 112 */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, s = 126u - e;
    uint32_t q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++; /* 0x400 is the smallest normal: right */
    return (uint16_t)(sign | q);
}

float cl_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return float_of(sign | 0x7f800000u | (m << 13));
    if (e) return float_of(sign | ((e + 112u) << 23) | (m << 13));
    return float_of(sign | bits_of((float)m * 0x1p-24f)); /* zero or subnormal: exact in F32 */
}

int cl_dtype_is_float(cl_dtype t) { return t == CL_F32 || t == CL_BF16 || t == CL_F16 || t == CL_F64; }

static int half_format(cl_dtype t) { return t == CL_BF16 || t == CL_F16; }

int cl_dtype_convertible(cl_dtype df, cl_dtype sf) {
    if (df == sf) return cl_dtype_size(df) != 0;
    if (!cl_dtype_is_float(df) || !cl_dtype_is_float(sf)) return 0;
    return df == CL_F32 || sf == CL_F32 || (df == CL_F64 && half_format(sf));
}

/* One value of format t at p as F32 (t F32, BF16 or F16). */
static float load_f32(const void *p, size_t i, cl_dtype t) {
    if (t == CL_F32) return ((const float *)p)[i];
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, 2);
    return t == CL_BF16 ? cl_bf16_to_f32(h) : cl_f16_to_f32(h);
}

cl_status cl_dtype_convert(void *dst, cl_dtype df, const void *src, cl_dtype sf, size_t n) {
    if (!cl_dtype_convertible(df, sf))
        return cl_error(CL_ERR_UNSUPPORTED, "no conversion from %s to %s", cl_dtype_name(sf), cl_dtype_name(df));
    if (n && (!dst || !src)) return cl_error(CL_ERR_INVALID, "cl_dtype_convert: NULL buffer for %zu values", n);
    if (!n) return CL_OK;
    if (df == sf) {
        memmove(dst, src, n * cl_dtype_size(df));
        return CL_OK;
    }
    if (df == CL_F64) {
        double *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = (double)load_f32(src, i, sf);
    } else if (sf == CL_F64) { /* into F32: the C conversion rounds to nearest even */
        const double *s = src;
        float *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = (float)s[i];
    } else if (df == CL_F32 && sf == CL_BF16) {
        cl_bf16_unpack(dst, src, (int64_t)n);
    } else if (df == CL_F32) {
        float *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = load_f32(src, i, sf);
    } else { /* F32 into a 16-bit format */
        const float *s = src;
        uint16_t *d = dst;
        if (df == CL_BF16)
            cl_bf16_pack(d, s, (int64_t)n);
        else
            for (size_t i = 0; i < n; i++) d[i] = cl_f16_from_f32(s[i]);
    }
    return CL_OK;
}
