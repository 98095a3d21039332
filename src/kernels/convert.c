/* F32 <-> BF16 over arrays, vectorized: cl_bf16_pack rounds n floats to
 * BF16, cl_bf16_unpack widens n BF16 values to F32. cl_dtype_convert
 * (src/core/format.c) runs them, and so does every caller of it (the
 * device's convert, collectives, safetensors); the bf16 kernels use them to
 * write their BF16 outputs.
 *
 * Invariant: every path gives the bits of the scalar cl_bf16_from_f32 /
 * cl_bf16_to_f32 (round to nearest, ties to even; past the largest finite
 * value an infinity of the sign; a NaN quiet with its sign and the top of its
 * payload; subnormals rounded, not flushed), whatever the CPU or its modes.
 * Paths: AVX512_BF16's vcvtne2ps2bf16 (two vectors of 16 into one of 32),
 * which does the same rounding and NaN quieting but reads subnormal inputs
 * as zero (it ignores MXCSR: DAZ always), so a group of 32 with a subnormal
 * takes the integer path instead; the integer rounding of format.c on
 * AVX-512 (32 lanes, one word permute to pack) and AVX2 (16 lanes); the
 * scalar function. Widening is
 * a shift by 16 on every path. tests/test_format.c checks every path on
 * every input class against the scalar function.
 * Blocks of CL_SIMD_BLOCK go to the thread team; each value is converted
 * alone, so the bits do not depend on threads or path. */
#include "cleave/kernels.h"
#include "cleave/tensor.h"
#include "core/bf16_bits.h"
#include "kernels/simd.h"

static void pack_plain(uint16_t *d, const float *s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = cl_bf16_round_bits(s[i]);
}

static void unpack_plain(float *d, const uint16_t *s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = cl_bf16_widen_bits(s[i]);
}

#ifdef CL_SIMD_X86
/* 8 floats rounded as format.c rounds them, each in the low half of a lane. */
CL_AVX2 static __m256i round8(__m256i u) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf); /* both sides < 2^31: signed compare is right */
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, nan);
}

CL_AVX2 static int64_t pack_avx2(uint16_t *d, const float *s, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = round8(_mm256_loadu_si256((const __m256i *)(s + i)));
        __m256i b = round8(_mm256_loadu_si256((const __m256i *)(s + i + 8)));
        /* packus interleaves the 128-bit lanes: a0-3 b0-3 a4-7 b4-7; the permute puts them in order */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        _mm256_storeu_si256((__m256i *)(d + i), p);
    }
    _mm256_zeroupper(); /* whatever the optimization level: GCC's own vzeroupper pass runs from -O2 on only */
    return i;
}

CL_AVX2 static int64_t unpack_avx2(float *d, const uint16_t *s, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_slli_epi32(w, 16));
    }
    _mm256_zeroupper(); /* whatever the optimization level: GCC's own vzeroupper pass runs from -O2 on only */
    return i;
}

/* 16 floats rounded as format.c rounds them, each in the low half of a lane. */
CL_AVX512 static __m512i round16(__m512i u) {
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_mask_blend_epi32(nan, r, q);
}

/* 32 floats: the low halves of two rounded vectors picked in order by one word permute. */
CL_AVX512 static void pack32(uint16_t *d, __m512i lo, __m512i hi) {
    const __m512i even = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28, 26,
                                          24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    _mm512_storeu_si512(d, _mm512_permutex2var_epi16(round16(lo), even, round16(hi)));
}

CL_AVX512 static int64_t pack_avx512(uint16_t *d, const float *s, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) pack32(d + i, _mm512_loadu_si512(s + i), _mm512_loadu_si512(s + i + 16));
    _mm256_zeroupper(); /* whatever the optimization level: GCC's own vzeroupper pass runs from -O2 on only */
    return i;
}

CL_AVX512 static int64_t unpack_avx512(float *d, const uint16_t *s, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i)));
        _mm512_storeu_si512(d + i, _mm512_slli_epi32(w, 16));
    }
    _mm256_zeroupper(); /* whatever the optimization level: GCC's own vzeroupper pass runs from -O2 on only */
    return i;
}

CL_AVX512BF16 static int64_t pack_avx512bf16(uint16_t *d, const float *s, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 lo = _mm512_loadu_ps(s + i), hi = _mm512_loadu_ps(s + i + 16);
        /* fpclass 0x20: the subnormal lanes (zeros are not) */
        if (_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20)) {
            pack32(d + i, _mm512_castps_si512(lo), _mm512_castps_si512(hi));
        } else {
            __m512bh b = _mm512_cvtne2ps_pbh(hi, lo); /* lo into the low 16 */
            _mm512_storeu_si512(d + i, (__m512i)b);
        }
    }
    _mm256_zeroupper(); /* whatever the optimization level: GCC's own vzeroupper pass runs from -O2 on only */
    return i;
}
#endif

/* The vector paths return how many values they packed (whole vectors) and
 * the plain loop packs the rest here, after they returned: a vector path
 * that ended in a tail call to pack_plain left the upper halves of the
 * vector registers dirty (GCC 12 puts no vzeroupper before a sibling call;
 * so each path now ends in an explicit one, as at -O1 GCC emits none),
 * and every legacy-SSE instruction after it (the scalar F32 and double code
 * of the kernels, built without -mavx) then waited on those registers'
 * previous values: the bf16 layernorms ran 3-4x slower than F32 ones.
 * tests/test_format.c checks that each path returns with them clean. */
void cl_bf16_pack_serial(uint16_t *dst, const float *src, int64_t n, int v) {
    int64_t i = 0;
#ifdef CL_SIMD_X86
    if (v >= CL_ISA_AVX512BF16) i = pack_avx512bf16(dst, src, n);
    else if (v == CL_ISA_AVX512) i = pack_avx512(dst, src, n);
    else if (v == CL_ISA_AVX2) i = pack_avx2(dst, src, n);
#endif
    pack_plain(dst + i, src + i, n - i);
    (void)v;
}

void cl_bf16_pack(uint16_t *dst, const float *src, int64_t n) {
    int v = cl_simd_level();
    CL_FOR_BLOCKS(n, lo, len, cl_bf16_pack_serial(dst + lo, src + lo, len, v));
}

void cl_bf16_unpack(float *dst, const uint16_t *src, int64_t n) {
    int v = cl_simd_level();
    (void)v;
    CL_FOR_BLOCKS(n, lo, len, {
        int64_t i = 0; /* the vector paths' whole vectors, then the rest (as cl_bf16_pack_serial) */
#ifdef CL_SIMD_X86
        if (v >= CL_ISA_AVX512) i = unpack_avx512(dst + lo, src + lo, len);
        else if (v == CL_ISA_AVX2) i = unpack_avx2(dst + lo, src + lo, len);
#endif
        unpack_plain(dst + lo + i, src + lo + i, len - i);
    });
}

/* ---- transposing 16-bit values -------------------------------------------- */

enum { TR_TILE = 64 };

/* One tile (nr x nc, at most TR_TILE each) a value at a time through a local copy of its source rows: each source
 * and destination row is read or written whole, never a value per line (a 2 KiB destination stride put a
 * value-at-a-time 64 x 64 tile's lines on a few L1 sets: 10x slower a byte on [1024 x 3072]). */
static void transpose_plain(uint16_t *dst, const uint16_t *src, int64_t nr, int64_t nc, int64_t lds, int64_t ldd) {
    uint16_t t[TR_TILE][TR_TILE];
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++) t[r][c] = src[r * lds + c];
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < nr; r++) dst[c * ldd + r] = t[r][c];
}

#ifdef CL_SIMD_X86
/* A 32 x 32 block transposed in five butterfly stages: at stage s (16, 8, 4, 2, 1) rows i and i + s (bit s of i
 * clear) trade the off-diagonal s x s blocks of each 2s-wide chunk (one vpermt2w each), the block-wise recursion of
 * the transpose, every level at once. After stage 16 the two halves of 16 rows go on apart, so each half is done on
 * its own (its stage-16 rows from the source read again, from L1): 16 rows and the ten selections fit the 32
 * registers, where 32 rows spilled. il[k], ih[k]: stage 16 >> k's two selections. */
CL_AVX512 static void transpose32_avx512(uint16_t *dst, const uint16_t *src, int64_t lds, int64_t ldd, const __m512i *il,
                                         const __m512i *ih) {
    for (int h = 0; h < 2; h++) {
        __m512i r[16]; /* the loops unrolled whole, so r lives in registers (at -O2 GCC keeps a looped array on the stack) */
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            r[i] = _mm512_permutex2var_epi16(_mm512_loadu_si512(src + i * lds), h ? ih[0] : il[0], _mm512_loadu_si512(src + (i + 16) * lds));
#pragma GCC unroll 4
        for (int k = 1, s = 8; k < 5; k++, s /= 2)
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                if (i & s) continue;
                __m512i a = r[i], b = r[i + s];
                r[i] = _mm512_permutex2var_epi16(a, il[k], b);
                r[i + s] = _mm512_permutex2var_epi16(a, ih[k], b);
            }
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) _mm512_storeu_si512(dst + (16 * h + i) * ldd, r[i]);
    }
}

/* The 32 x 32 blocks of nr32 rows and nc32 columns (multiples of 32), ending in an explicit vzeroupper (as
 * cl_bf16_pack_serial's paths): the plain loop does the rest after it. */
CL_AVX512 static void tile_avx512(uint16_t *dst, const uint16_t *src, int64_t nr32, int64_t nc32, int64_t lds, int64_t ldd) {
    __m512i il[5], ih[5];
    for (int k = 0, s = 16; k < 5; k++, s /= 2) {
        uint16_t lo[32], hi[32]; /* the output's 2s-wide chunk [a's first s, b's first s], then its second s of each */
        for (int j = 0; j < 32; j++) {
            int c = j / (2 * s) * (2 * s), p = j % (2 * s);
            lo[j] = (uint16_t)(p < s ? c + p : 32 + c + p - s);
            hi[j] = (uint16_t)(p < s ? c + s + p : 32 + c + p);
        }
        il[k] = _mm512_loadu_si512(lo), ih[k] = _mm512_loadu_si512(hi);
    }
    for (int64_t c = 0; c < nc32; c += 32)
        for (int64_t r = 0; r < nr32; r += 32) transpose32_avx512(dst + c * ldd + r, src + r * lds + c, lds, ldd, il, ih);
    _mm256_zeroupper();
}
#endif

void cl_bf16_transpose(uint16_t *dst, const uint16_t *src, int64_t rows, int64_t cols, int64_t lds, int64_t ldd) {
    int v = cl_simd_level();
    (void)v;
    int64_t rt = (rows + TR_TILE - 1) / TR_TILE, ct = (cols + TR_TILE - 1) / TR_TILE, nt = rt * ct;
    /* a column strip's tiles in turn down the rows, so a destination row is written from its start */
#pragma omp parallel for schedule(static) if (nt > 1 && rows * cols > CL_SIMD_BLOCK)
    for (int64_t t = 0; t < nt; t++) {
        int64_t r0 = t % rt * TR_TILE, c0 = t / rt * TR_TILE;
        int64_t nr = rows - r0 < TR_TILE ? rows - r0 : TR_TILE, nc = cols - c0 < TR_TILE ? cols - c0 : TR_TILE;
        const uint16_t *s = src + r0 * lds + c0;
        uint16_t *d = dst + c0 * ldd + r0;
        int64_t vr = 0, vc = 0;
#ifdef CL_SIMD_X86
        if (v >= CL_ISA_AVX512) {
            vr = nr / 32 * 32, vc = nc / 32 * 32;
            tile_avx512(d, s, vr, vc, lds, ldd);
        }
#endif
        /* what the blocks left: the columns past vc on every row, the rows past vr on the first vc columns */
        if (vc < nc) transpose_plain(d + vc * ldd, s + vc, nr, nc - vc, lds, ldd);
        if (vr < nr && vc) transpose_plain(d + vr, s + vr * lds, nr - vr, vc, lds, ldd);
    }
}
