/* Tests of the number-format conversions (tensor.h, src/core/format.c).
 *
 * Without arguments: values checked by hand (ties to even, overflow to
 * infinity, subnormals, signed zeros, NaNs kept quiet with their sign),
 * every BF16 and F16 value widened and narrowed back to itself, and
 * cl_dtype_convert's pairs and refusals; the vector array conversions
 * (cl_bf16_pack / cl_bf16_unpack, src/kernels/convert.c) on every path this
 * CPU has, against the scalar ones, over every input class and 2^21 random
 * bit patterns; and that every vector path returns with the upper halves of
 * the vector registers clean (XINUSE by xgetbv 1), as legacy-SSE code after
 * it needs to run at speed.
 *
 *   test_format --ref FILE   compares with PyTorch's conversions, FILE as
 *                            tests/format_ref.py writes it (tests/cli_format.sh):
 *                            lines "n F32 BF16 F16" (narrowing) and "w H F32BF F32H"
 *                            (widening), hexadecimal bits; NaNs compare as NaNs. */
#include "cleave/kernels.h"
#include "cleave/tensor.h"
#include "kernels/simd.h"

#include "common/check.h"

#ifdef CL_SIMD_X86
#include <cpuid.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float f_of(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static uint32_t u_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static void hand_checked(void) {
    static const struct { uint32_t f; uint16_t bf, h; const char *what; } c[] = {
        {0x3f800000u, 0x3f80, 0x3c00, "1"},
        {0xbf800000u, 0xbf80, 0xbc00, "-1"},
        {0x00000000u, 0x0000, 0x0000, "+0"},
        {0x80000000u, 0x8000, 0x8000, "-0"},
        {0x3f808000u, 0x3f80, 0x3c04, "1 + 2^-8: BF16 tie to the even 1"},
        {0x3f818000u, 0x3f82, 0x3c0c, "1 + 3*2^-8: BF16 tie up to the even 1 + 2^-6"},
        {0x3f808001u, 0x3f81, 0x3c04, "just above the BF16 tie: up"},
        {0x3f807fffu, 0x3f80, 0x3c04, "just below the BF16 tie: down"},
        {0x3f801000u, 0x3f80, 0x3c00, "1 + 2^-11: F16 tie to the even 1"},
        {0x3f803000u, 0x3f80, 0x3c02, "1 + 3*2^-11: F16 tie up to 1 + 2^-9"},
        {0x3dcccccdu, 0x3dcd, 0x2e66, "0.1"},
        {0x3eaaaaabu, 0x3eab, 0x3555, "1/3"},
        {0x7f7fffffu, 0x7f80, 0x7c00, "FLT_MAX: BF16 and F16 overflow to inf"},
        {0x7f7f7fffu, 0x7f7f, 0x7c00, "below BF16's rounding point: its largest finite"},
        {0x477fe000u, 0x4780, 0x7bff, "65504, F16's largest"},
        {0x477fefffu, 0x4780, 0x7bff, "below 65520: F16's largest"},
        {0x477ff000u, 0x4780, 0x7c00, "65520, the F16 tie past the largest: inf"},
        {0x38800000u, 0x3880, 0x0400, "2^-14, F16's smallest normal"},
        {0x387fc000u, 0x3880, 0x03ff, "F16's largest subnormal"},
        {0x33800000u, 0x3380, 0x0001, "2^-24, F16's smallest subnormal"},
        {0x33000000u, 0x3300, 0x0000, "2^-25: tie to the even zero"},
        {0x33000001u, 0x3300, 0x0001, "just above 2^-25: up"},
        {0x33c00000u, 0x33c0, 0x0002, "3*2^-25: tie between 1 and 2 units, to the even 2"},
        {0x34a00000u, 0x34a0, 0x0005, "5*2^-24 exactly"},
        {0x00000001u, 0x0000, 0x0000, "F32's smallest subnormal"},
        {0x00018000u, 0x0002, 0x0000, "F32 subnormal, BF16 tie to even 2"},
        {0x7f800000u, 0x7f80, 0x7c00, "inf"},
        {0xff800000u, 0xff80, 0xfc00, "-inf"},
        {0xc7800000u, 0xc780, 0xfc00, "-65536: -inf in F16"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        float x = f_of(c[i].f);
        uint16_t bf = cl_bf16_from_f32(x), h = cl_f16_from_f32(x);
        CHECK(bf == c[i].bf, "%s (0x%08x): BF16 0x%04x, expected 0x%04x", c[i].what, c[i].f, bf, c[i].bf);
        CHECK(h == c[i].h, "%s (0x%08x): F16 0x%04x, expected 0x%04x", c[i].what, c[i].f, h, c[i].h);
    }
    /* NaNs stay NaN, quiet, sign kept */
    CHECK(cl_bf16_from_f32(f_of(0x7fa00000u)) == 0x7fe0, "signalling NaN to BF16: 0x%04x", cl_bf16_from_f32(f_of(0x7fa00000u)));
    CHECK(cl_bf16_from_f32(f_of(0xff800001u)) == 0xffc0, "-NaN with a low payload to BF16: 0x%04x",
          cl_bf16_from_f32(f_of(0xff800001u)));
    CHECK(cl_f16_from_f32(f_of(0x7f800001u)) == 0x7e00, "NaN with a low payload to F16: 0x%04x", cl_f16_from_f32(f_of(0x7f800001u)));
    CHECK(cl_f16_from_f32(f_of(0xffc00000u)) == 0xfe00, "-NaN to F16: 0x%04x", cl_f16_from_f32(f_of(0xffc00000u)));
    /* widening, by hand */
    CHECK(u_of(cl_bf16_to_f32(0x0001)) == 0x00010000u, "BF16 0x0001 widened: 0x%08x", u_of(cl_bf16_to_f32(0x0001)));
    CHECK(u_of(cl_f16_to_f32(0x0001)) == 0x33800000u, "F16 0x0001 widened: 0x%08x", u_of(cl_f16_to_f32(0x0001)));
    CHECK(u_of(cl_f16_to_f32(0x03ff)) == 0x387fc000u, "F16 0x03ff widened: 0x%08x", u_of(cl_f16_to_f32(0x03ff)));
    CHECK(u_of(cl_f16_to_f32(0x8200)) == 0xb8000000u, "F16 0x8200 widened: 0x%08x", u_of(cl_f16_to_f32(0x8200)));
    CHECK(u_of(cl_f16_to_f32(0xfc00)) == 0xff800000u, "F16 -inf widened: 0x%08x", u_of(cl_f16_to_f32(0xfc00)));
    CHECK(isnan(cl_f16_to_f32(0x7c01)) && isnan(cl_bf16_to_f32(0xff81)), "NaNs widen to NaN");
}

/* Every 16-bit value widens exactly and narrows back to itself (NaNs to a NaN). */
static void round_trips(void) {
    int bad_bf = 0, bad_h = 0;
    for (uint32_t v = 0; v < 65536; v++) {
        uint16_t h = (uint16_t)v;
        float b = cl_bf16_to_f32(h), f = cl_f16_to_f32(h);
        if (isnan(b) ? !isnan(cl_bf16_to_f32(cl_bf16_from_f32(b))) : cl_bf16_from_f32(b) != h) bad_bf++;
        if (isnan(f) ? !isnan(cl_f16_to_f32(cl_f16_from_f32(f))) : cl_f16_from_f32(f) != h) bad_h++;
    }
    CHECK(bad_bf == 0, "%d BF16 values do not survive F32 and back", bad_bf);
    CHECK(bad_h == 0, "%d F16 values do not survive F32 and back", bad_h);
}

static void arrays(void) {
    float x[5] = {1.0f, -2.5f, 0.1f, 65520.0f, f_of(0x3f818000u)};
    uint16_t b[5], h[5];
    float back[5];
    double d[5];
    CHECK_OK(cl_dtype_convert(b, CL_BF16, x, CL_F32, 5));
    CHECK_OK(cl_dtype_convert(h, CL_F16, x, CL_F32, 5));
    int same = 1;
    for (int i = 0; i < 5; i++) same &= b[i] == cl_bf16_from_f32(x[i]) && h[i] == cl_f16_from_f32(x[i]);
    CHECK(same, "the array conversions differ from the single ones");
    CHECK_OK(cl_dtype_convert(back, CL_F32, b, CL_BF16, 5));
    CHECK(back[4] == f_of(0x3f820000u) && back[1] == -2.5f, "BF16 widened: %g %g", (double)back[4], (double)back[1]);
    CHECK_OK(cl_dtype_convert(d, CL_F64, h, CL_F16, 5));
    CHECK(d[2] == (double)cl_f16_to_f32(0x2e66) && isinf(d[3]), "F16 into F64: %g %g", d[2], d[3]);
    cl_status s = cl_dtype_convert(b, CL_BF16, d, CL_F64, 5);
    CHECK(s == CL_ERR_UNSUPPORTED && strstr(cl_last_error(), "F64 to BF16"), "F64 into BF16 refused: %s", cl_last_error());
    s = cl_dtype_convert(back, CL_F32, x, CL_I32, 5);
    CHECK(s == CL_ERR_UNSUPPORTED && strstr(cl_last_error(), "I32"), "I32 into F32 refused: %s", cl_last_error());
    CHECK_OK(cl_dtype_convert(back, CL_F32, x, CL_F32, 5));
    CHECK(!memcmp(back, x, sizeof x), "an F32 copy differs");
    CHECK(cl_dtype_size(CL_F16) == 2 && !strcmp(cl_dtype_name(CL_F16), "F16"), "F16's size and name");
}

/* A tiny generator, so the set is the same on every run. */
static uint32_t next_u32(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*st >> 32);
}

/* The array conversions on every vector path (levels up to this CPU's: the
 * cap is clamped by the CPU) give the scalar conversions' bits: every
 * special (zeros, subnormals including ones that round up into the normals,
 * ties to even both ways, the overflow boundary, infinities, signalling and
 * quiet NaNs of both signs with low and high payloads), every BF16 value's
 * F32 image and its neighbours one ulp away and at the tie, 2^21 random
 * patterns; subnormals both alone and inside a group of normal values (the
 * AVX512_BF16 instruction reads them as zero); lengths and offsets that
 * leave tails and cross a parallel block. Widening: every BF16 value. */
static void array_paths(void) {
    enum { NRAND = 1 << 21 };
    int64_t n = 0, cap = NRAND + 65536 * 4 + 64;
    uint32_t *u = malloc((size_t)cap * 4);
    uint16_t *got = malloc((size_t)cap * 2);
    float *wide = malloc(65536 * 4);
    uint16_t *all = malloc(65536 * 2);
    CHECK(u && got && wide && all, "out of memory");
    if (!u || !got || !wide || !all) return;
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x00007fffu, 0x00008000u,
                                       0x00018000u, 0x00008001u, 0x007fffffu, 0x807fffffu, 0x007f8000u, 0x007f7fffu,
                                       0x00800000u, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f7f7fffu,
                                       0x7f7f8000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u,
                                       0xff800001u, 0x7fa00000u, 0xffa00000u, 0x7fc00000u, 0xffc00000u, 0x7fffffffu,
                                       0xffffffffu, 0x7fbfffffu, 0x3dcccccdu, 0xbeaaaaabu};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) u[n++] = special[i];
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t f = h << 16;
        u[n++] = f;
        u[n++] = f | 0x7fffu;
        u[n++] = f | 0x8000u;
        u[n++] = f | 0x8001u;
    }
    uint64_t st = 29;
    for (int i = 0; i < NRAND; i++) u[n++] = next_u32(&st);
    for (uint32_t h = 0; h < 65536; h++) all[h] = (uint16_t)h;
    static const int64_t off[] = {0, 1, 7, 31};
    for (int level = 0; level <= 3; level++) {
        cl_kernels_max_isa(level);
        const char *isa = cl_kernels_isa();
        long bad = 0;
        for (size_t o = 0; o < sizeof off / sizeof off[0]; o++) {
            int64_t len = n - off[o] - (int64_t)o * 5;
            memset(got, 0, (size_t)cap * 2);
            CHECK_OK(cl_dtype_convert(got, CL_BF16, (const float *)(u + off[o]), CL_F32, (size_t)len));
            for (int64_t i = 0; i < len; i++) {
                uint16_t want = cl_bf16_from_f32(f_of(u[off[o] + i]));
                if (got[i] != want && bad++ < 5)
                    fprintf(stderr, "%s: F32 0x%08x packed to 0x%04x, the scalar gives 0x%04x\n", isa, u[off[o] + i],
                            got[i], want);
            }
        }
        CHECK(bad == 0, "%s: %ld array narrowings differ from cl_bf16_from_f32", isa, bad);
        /* a single subnormal in a run of normals, at every position of a group of 32 */
        float grp[64];
        uint16_t gb[64];
        int gbad = 0;
        for (int p = 0; p < 64; p++) {
            for (int j = 0; j < 64; j++) grp[j] = 1.0f + (float)j;
            grp[p] = f_of(p & 1 ? 0x807f8123u : 0x00018000u);
            cl_bf16_pack(gb, grp, 64);
            for (int j = 0; j < 64; j++) gbad += gb[j] != cl_bf16_from_f32(grp[j]);
        }
        CHECK(gbad == 0, "%s: %d values wrong around a subnormal among normals", isa, gbad);
        long wbad = 0;
        for (int64_t o = 0; o < 3; o++) {
            memset(wide, 0, 65536 * 4);
            CHECK_OK(cl_dtype_convert(wide, CL_F32, all + o, CL_BF16, (size_t)(65536 - o)));
            for (int64_t i = 0; i < 65536 - o; i++) wbad += u_of(wide[i]) != (uint32_t)all[o + i] << 16;
        }
        CHECK(wbad == 0, "%s: %ld array widenings differ from cl_bf16_to_f32", isa, wbad);
        printf("  %s: %lld values narrowed at 4 offsets, 65536 widened at 3\n", isa, (long long)n);
    }
    cl_kernels_max_isa(3);
    free(u);
    free(got);
    free(wide);
    free(all);
}

/* PyTorch's conversions, as tests/format_ref.py wrote them. */
static int against_ref(const char *path) {
    FILE *fp = fopen(path, "r");
    if (!fp) {
        fprintf(stderr, "cannot open %s\n", path);
        return 2;
    }
    char kind[4];
    unsigned a, b, c;
    long narrow = 0, widen = 0, bad_n = 0, bad_w = 0;
    while (fscanf(fp, "%3s %x %x %x", kind, &a, &b, &c) == 4) {
        if (kind[0] == 'n') {
            float x = f_of(a);
            uint16_t bf = cl_bf16_from_f32(x), h = cl_f16_from_f32(x);
            int ok = isnan(x) ? isnan(cl_bf16_to_f32(bf)) && isnan(cl_f16_to_f32(h)) : bf == b && h == c;
            if (!ok && bad_n++ < 5)
                fprintf(stderr, "F32 0x%08x: BF16 0x%04x (torch 0x%04x), F16 0x%04x (torch 0x%04x)\n", a, bf, b, h, c);
            narrow++;
        } else {
            uint16_t v = (uint16_t)a;
            float bf = cl_bf16_to_f32(v), h = cl_f16_to_f32(v);
            int ok = (isnan(bf) ? isnan(f_of(b)) : u_of(bf) == b) && (isnan(h) ? isnan(f_of(c)) : u_of(h) == c);
            if (!ok && bad_w++ < 5)
                fprintf(stderr, "0x%04x: as BF16 0x%08x (torch 0x%08x), as F16 0x%08x (torch 0x%08x)\n", a, u_of(bf), b, u_of(h), c);
            widen++;
        }
    }
    fclose(fp);
    CHECK(narrow > 1000 && widen == 65536, "%s: %ld narrowings and %ld widenings read", path, narrow, widen);
    CHECK(bad_n == 0, "%ld of %ld narrowings differ from PyTorch's", bad_n, narrow);
    CHECK(bad_w == 0, "%ld of %ld widenings differ from PyTorch's", bad_w, widen);
    printf("compared %ld narrowings and %ld widenings with PyTorch's\n", narrow, widen);
    return cl_test_report("test_format --ref");
}

#ifdef CL_SIMD_X86
/* XINUSE's AVX (bit 2, the upper halves of ymm0-15) and ZMM_Hi256 (bit 6,
 * of zmm0-15) bits: 0 when those halves are zero, as after vzeroupper. */
static unsigned upper_in_use(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    (void)hi;
    return lo & (1u << 2 | 1u << 6);
}
#endif

/* A vector path that returns with dirty upper halves slows every legacy-SSE
 * instruction after it (false dependencies on the full registers): the
 * kernels' scalar code runs 3-4x slower (src/kernels/convert.c). */
static void upper_clean(void) {
#ifdef CL_SIMD_X86
    unsigned a, b, c, d;
    cl_kernels_max_isa(3);
    if (!strcmp(cl_kernels_isa(), "plain") || !__get_cpuid_count(0xd, 1, &a, &b, &c, &d) || !(a & 4)) {
        printf("  vector state: SKIP (no AVX, or no xgetbv 1 here)\n");
        return;
    }
    __asm__ volatile("vzeroupper");
    if (upper_in_use()) {
        printf("  vector state: SKIP (XINUSE reports the upper halves in use after vzeroupper)\n");
        return;
    }
    float x[77];
    uint16_t h[77];
    for (int i = 0; i < 77; i++) x[i] = 0.1f * (float)i - 3.0f;
    for (int level = 1; level <= 3; level++) {
        cl_kernels_max_isa(level);
        const char *isa = cl_kernels_isa();
        int v = cl_simd_level();
        __asm__ volatile("vzeroupper");
        cl_bf16_pack_serial(h, x, 77, v);
        unsigned after_pack = upper_in_use();
        cl_bf16_unpack(x, h, 77);
        unsigned after_unpack = upper_in_use();
        CHECK(!after_pack, "%s: cl_bf16_pack_serial returns with the vector registers' upper halves in use (XINUSE 0x%x)", isa,
              after_pack);
        CHECK(!after_unpack, "%s: cl_bf16_unpack returns with the vector registers' upper halves in use (XINUSE 0x%x)", isa,
              after_unpack);
        if (!after_pack && !after_unpack) printf("  vector state after %s pack and unpack: clean\n", isa);
    }
    cl_kernels_max_isa(3);
#endif
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--ref")) return against_ref(argv[2]);
    hand_checked();
    round_trips();
    arrays();
    array_paths();
    upper_clean();
    return cl_test_report("test_format");
}
