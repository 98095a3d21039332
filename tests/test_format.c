/* Tests of the number-format conversions (tensor.h, src/core/format.c).
 *
 * Without arguments: values checked by hand (ties to even, overflow to
 * infinity, subnormals, signed zeros, NaNs kept quiet with their sign),
 * every BF16 and F16 value widened and narrowed back to itself, and
 * cl_dtype_convert's pairs and refusals.
 *
 *   test_format --ref FILE   compares with PyTorch's conversions, FILE as
 *                            tests/format_ref.py writes it (tests/cli_format.sh):
 *                            lines "n F32 BF16 F16" (narrowing) and "w H F32BF F32H"
 *                            (widening), hexadecimal bits; NaNs compare as NaNs. */
#include "cleave/tensor.h"

#include "common/check.h"

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

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--ref")) return against_ref(argv[2]);
    hand_checked();
    round_trips();
    arrays();
    return cl_test_report("test_format");
}
