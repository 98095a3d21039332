/* Tests of the bf16 mixed-precision kernels (src/kernels: layernorm.c,
 * activations.c, adamw.c, and Llama's rmsnorm.c, swiglu.c; the kernel
 * table's *_bf16 entries, the backward ones writing an F32 gradient and its
 * BF16 copy in one pass; and transpose_bf16, a copy): each BF16
 * output must be, bit for bit, the F32 kernel's output rounded by
 * cl_bf16_from_f32, and every F32 output (mean, rstd, res, pre, the
 * optimizer's weights and moments, RMSNorm's rstd and res) the F32 kernel's
 * own bits. Checked on
 * every vector path this CPU has (cl_kernels_max_isa), on shapes whose rows
 * are not multiples of 8 or 16, that cross a parallel block, and GPT-2's
 * width; through the CPU device's kernel table as well. */
#include "cleave/backend.h"
#include "cleave/kernels.h"
#include "cleave/tensor.h"

#include "common/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 88172645463325252ull;

static float uniform(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *rnd(int64_t n, float scale) {
    float *x = malloc((size_t)n * 4);
    if (!x) exit(1);
    for (int64_t i = 0; i < n; i++) x[i] = uniform() * scale;
    return x;
}

static float *dup(const float *x, int64_t n) {
    float *y = malloc((size_t)n * 4);
    if (!y) exit(1);
    memcpy(y, x, (size_t)n * 4);
    return y;
}

/* Values of got that are not the rounding of want. */
static int64_t bf16_misses(const uint16_t *got, const float *want, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += got[i] != cl_bf16_from_f32(want[i]);
    return bad;
}

static int same(const float *a, const float *b, int64_t n) { return !memcmp(a, b, (size_t)n * 4); }

static const cl_kernels *K;

static void layernorm_case(int N, int C, const char *isa) {
    int64_t n = (int64_t)N * C;
    float *x = rnd(n, 3.0f), *r = rnd(n, 1.0f), *w = rnd(C, 1.0f), *b = rnd(C, 0.5f);
    float *out = malloc((size_t)n * 4), *out2 = malloc((size_t)n * 4), *res = malloc((size_t)n * 4),
          *res2 = malloc((size_t)n * 4);
    float *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4), *mean2 = malloc((size_t)N * 4),
          *rstd2 = malloc((size_t)N * 4);
    uint16_t *obf = malloc((size_t)n * 2);
    if (!out || !out2 || !res || !res2 || !mean || !rstd || !mean2 || !rstd2 || !obf) exit(1);
    cl_layernorm_forward(out, mean, rstd, x, w, b, N, C);
    /* only BF16 out */
    memset(obf, 0xff, (size_t)n * 2);
    K->layernorm_forward_bf16(obf, NULL, mean2, rstd2, x, w, b, N, C);
    CHECK(bf16_misses(obf, out, n) == 0 && same(mean, mean2, N) && same(rstd, rstd2, N),
          "%s layernorm_forward_bf16 N %d C %d (BF16 only): %lld values differ from the F32 kernel's rounded", isa, N, C,
          (long long)bf16_misses(obf, out, n));
    /* both */
    memset(obf, 0xff, (size_t)n * 2);
    K->layernorm_forward_bf16(obf, out2, mean2, rstd2, x, w, b, N, C);
    CHECK(bf16_misses(obf, out, n) == 0 && same(out, out2, n), "%s layernorm_forward_bf16 N %d C %d (BF16 and F32)", isa,
          N, C);
    /* the residual form */
    cl_residual_layernorm_forward(res, out, mean, rstd, x, r, w, b, N, C);
    memset(obf, 0xff, (size_t)n * 2);
    K->residual_layernorm_forward_bf16(res2, obf, NULL, mean2, rstd2, x, r, w, b, N, C);
    CHECK(bf16_misses(obf, out, n) == 0 && same(res, res2, n) && same(mean, mean2, N) && same(rstd, rstd2, N),
          "%s residual_layernorm_forward_bf16 N %d C %d (BF16 only)", isa, N, C);
    memset(obf, 0xff, (size_t)n * 2);
    K->residual_layernorm_forward_bf16(res2, obf, out2, mean2, rstd2, x, r, w, b, N, C);
    CHECK(bf16_misses(obf, out, n) == 0 && same(out, out2, n), "%s residual_layernorm_forward_bf16 N %d C %d (both)",
          isa, N, C);
    free(x), free(r), free(w), free(b), free(out), free(out2), free(res), free(res2);
    free(mean), free(rstd), free(mean2), free(rstd2), free(obf);
}

static void gelu_case(int N, int C, const char *isa) {
    int64_t n = (int64_t)N * C;
    float *x = rnd(n, 6.0f), *bias = rnd(C, 1.0f), *out = malloc((size_t)n * 4);
    float *pre = dup(x, n), *pre2 = dup(x, n);
    uint16_t *obf = malloc((size_t)n * 2);
    if (!out || !obf) exit(1);
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 20.0f, x[3] = -20.0f; /* the tails: 0, x, and underflow to -0 */
    cl_gelu_forward(out, x, n);
    memset(obf, 0xff, (size_t)n * 2);
    K->gelu_forward_bf16(obf, x, n);
    CHECK(bf16_misses(obf, out, n) == 0, "%s gelu_forward_bf16 n %lld: %lld values differ", isa, (long long)n,
          (long long)bf16_misses(obf, out, n));
    cl_bias_gelu_forward(out, pre, bias, N, C);
    memset(obf, 0xff, (size_t)n * 2);
    K->bias_gelu_forward_bf16(obf, pre2, bias, N, C);
    CHECK(bf16_misses(obf, out, n) == 0 && same(pre, pre2, n), "%s bias_gelu_forward_bf16 N %d C %d: %lld values differ",
          isa, N, C, (long long)bf16_misses(obf, out, n));
    free(x), free(bias), free(out), free(pre), free(pre2), free(obf);
}

/* The fused backwards: din the F32 kernel's bits, dbf cl_dtype_convert of that din. */
static void backward_case(int N, int C, const char *isa) {
    int64_t n = (int64_t)N * C;
    float *x = rnd(n, 6.0f), *d = rnd(n, 1.0f), *w = rnd(C, 1.0f), *b = rnd(C, 0.5f), *want = malloc((size_t)n * 4);
    float *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4), *y = malloc((size_t)n * 4);
    uint16_t *obf = malloc((size_t)n * 2), *conv = malloc((size_t)n * 2);
    if (!want || !mean || !rstd || !y || !obf || !conv) exit(1);
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 20.0f, x[3] = -20.0f; /* GELU's tails */
    d[4 % n] = 1e-39f;                                      /* a subnormal gradient: rounded, not flushed */
    cl_gelu_backward_set(want, d, x, n);
    float *got = dup(d, n); /* in place, as the block calls it */
    memset(obf, 0xff, (size_t)n * 2);
    K->gelu_backward_set_bf16(got, obf, got, x, n);
    CHECK(cl_dtype_convert(conv, CL_BF16, want, CL_F32, (size_t)n) == CL_OK, "convert");
    CHECK(same(got, want, n) && !memcmp(obf, conv, (size_t)n * 2) && !bf16_misses(obf, want, n), "%s gelu_backward_set_bf16 N %d C %d: F32 %s, %lld BF16 values differ",
          isa, N, C, same(got, want, n) ? "same" : "differs", (long long)bf16_misses(obf, want, n));
    free(got);
    /* the layernorm's input gradient adds into din: start both from the same nonzero din */
    cl_layernorm_forward(y, mean, rstd, x, w, b, N, C);
    float *acc = rnd(n, 0.5f);
    got = dup(acc, n);
    memcpy(want, acc, (size_t)n * 4);
    cl_layernorm_backward_input(want, d, x, w, mean, rstd, N, C);
    memset(obf, 0xff, (size_t)n * 2);
    K->layernorm_backward_input_bf16(got, obf, d, x, w, mean, rstd, N, C);
    CHECK(cl_dtype_convert(conv, CL_BF16, want, CL_F32, (size_t)n) == CL_OK, "convert");
    CHECK(same(got, want, n) && !memcmp(obf, conv, (size_t)n * 2) && !bf16_misses(obf, want, n),
          "%s layernorm_backward_input_bf16 N %d C %d: F32 %s, %lld BF16 values differ", isa, N, C,
          same(got, want, n) ? "same" : "differs", (long long)bf16_misses(obf, want, n));
    free(x), free(d), free(w), free(b), free(want), free(mean), free(rstd), free(y), free(obf), free(conv), free(acc), free(got);
}

static void rmsnorm_case(int N, int C, const char *isa) {
    int64_t n = (int64_t)N * C;
    float *x = rnd(n, 3.0f), *r = rnd(n, 1.0f), *w = rnd(C, 1.0f);
    float *out = malloc((size_t)n * 4), *res = malloc((size_t)n * 4), *res2 = malloc((size_t)n * 4);
    float *rstd = malloc((size_t)N * 4), *rstd2 = malloc((size_t)N * 4);
    uint16_t *obf = malloc((size_t)n * 2);
    if (!out || !res || !res2 || !rstd || !rstd2 || !obf) exit(1);
    cl_rmsnorm_forward(out, rstd, x, w, 1e-5f, N, C);
    memset(obf, 0xff, (size_t)n * 2);
    K->rmsnorm_forward_bf16(obf, rstd2, x, w, 1e-5f, N, C);
    CHECK(bf16_misses(obf, out, n) == 0 && same(rstd, rstd2, N), "%s rmsnorm_forward_bf16 N %d C %d: %lld values differ", isa, N,
          C, (long long)bf16_misses(obf, out, n));
    cl_residual_rmsnorm_forward(res, out, rstd, x, r, w, 1e-6f, N, C);
    memset(obf, 0xff, (size_t)n * 2);
    K->residual_rmsnorm_forward_bf16(res2, obf, rstd2, x, r, w, 1e-6f, N, C);
    CHECK(bf16_misses(obf, out, n) == 0 && same(res, res2, n) && same(rstd, rstd2, N),
          "%s residual_rmsnorm_forward_bf16 N %d C %d: %lld values differ", isa, N, C, (long long)bf16_misses(obf, out, n));
    free(x), free(r), free(w), free(out), free(res), free(res2), free(rstd), free(rstd2), free(obf);
}

static void swiglu_case(int64_t n, const char *isa) {
    float *g = rnd(n, 8.0f), *u = rnd(n, 2.0f), *out = malloc((size_t)n * 4);
    uint16_t *obf = malloc((size_t)n * 2);
    if (!out || !obf) exit(1);
    g[0] = 0.0f, g[n > 1] = -100.0f; /* silu's tails: 0, and exp overflowing to a -0 product */
    cl_swiglu_forward(out, g, u, n);
    memset(obf, 0xff, (size_t)n * 2);
    K->swiglu_forward_bf16(obf, g, u, n);
    CHECK(bf16_misses(obf, out, n) == 0, "%s swiglu_forward_bf16 n %lld: %lld values differ", isa, (long long)n,
          (long long)bf16_misses(obf, out, n));
    free(g), free(u), free(out), free(obf);
}

static void adamw_case(int64_t n, float gscale, const char *isa) {
    float *p = rnd(n, 1.0f), *g = rnd(n, 0.1f), *m = rnd(n, 0.01f), *v = rnd(n, 0.001f);
    for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    p[0] = 1e-39f; /* a subnormal weight: its copy must round, not flush */
    float *p2 = dup(p, n), *m2 = dup(m, n), *v2 = dup(v, n);
    uint16_t *pbf = malloc((size_t)n * 2);
    if (!pbf) exit(1);
    for (int t = 1; t <= 3; t++) {
        cl_adamw_update(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, gscale);
        memset(pbf, 0xff, (size_t)n * 2);
        K->adamw_update_bf16(p2, pbf, g, m2, v2, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, gscale);
    }
    CHECK(same(p, p2, n) && same(m, m2, n) && same(v, v2, n), "%s adamw_update_bf16 n %lld gscale %g: F32 state differs",
          isa, (long long)n, (double)gscale);
    CHECK(bf16_misses(pbf, p, n) == 0, "%s adamw_update_bf16 n %lld: %lld BF16 copies are not the new weights rounded", isa,
          (long long)n, (long long)bf16_misses(pbf, p, n));
    free(p), free(g), free(m), free(v), free(p2), free(m2), free(v2), free(pbf);
}

/* transpose_bf16 (convert.c): every value where the definition puts it, none outside the destination's rows x cols
 * touched (strided source and destination, guard values around); shapes below, across and past the 32 x 32 vector
 * blocks and the 64 x 64 tiles, and GPT-2's [1024 x 768] (split over the team). */
static void transpose_case(int64_t rows, int64_t cols, const char *isa) {
    int64_t lds = cols + 3, ldd = rows + 5, ns = rows * lds, nd = cols * ldd;
    uint16_t *src = malloc((size_t)ns * 2), *dst = malloc((size_t)nd * 2);
    CHECK(src && dst, "alloc");
    for (int64_t i = 0; i < ns; i++) src[i] = (uint16_t)(i * 2654435761u >> 7);
    for (int64_t i = 0; i < nd; i++) dst[i] = 0xabcd;
    K->transpose_bf16(dst, src, rows, cols, lds, ldd);
    int64_t wrong = 0, touched = 0;
    for (int64_t c = 0; c < cols; c++)
        for (int64_t r = 0; r < ldd; r++) {
            uint16_t got = dst[c * ldd + r];
            if (r < rows) wrong += got != src[r * lds + c];
            else touched += got != 0xabcd;
        }
    CHECK(!wrong && !touched, "%s transpose_bf16 %lld x %lld: %lld values misplaced, %lld outside written", isa, (long long)rows,
          (long long)cols, (long long)wrong, (long long)touched);
    free(src), free(dst);
}

int main(void) {
    K = &cl_cpu_kernels;
    CHECK(K->layernorm_forward_bf16 && K->residual_layernorm_forward_bf16 && K->gelu_forward_bf16 &&
              K->bias_gelu_forward_bf16 && K->adamw_update_bf16 && K->rmsnorm_forward_bf16 &&
              K->residual_rmsnorm_forward_bf16 && K->swiglu_forward_bf16 && K->gelu_backward_set_bf16 &&
              K->layernorm_backward_input_bf16 && K->transpose_bf16,
          "the CPU table has every bf16 entry");
    static const char *name[] = {"plain", "avx2", "avx512", "avx512_bf16"};
    for (int level = 0; level <= 3; level++) {
        cl_kernels_max_isa(level);
        const char *isa = cl_kernels_isa();
        if (strcmp(isa, name[level])) continue; /* this CPU stops below the level */
        printf("  path %s\n", isa);
        layernorm_case(37, 77, isa);
        layernorm_case(64, 768, isa);
        layernorm_case(3, 1500, isa); /* rows longer than the 512-column chunk, not a multiple of it */
        gelu_case(37, 77, isa);
        gelu_case(23, 3072, isa); /* 70656 values: crosses four parallel blocks */
        gelu_case(1, 5, isa);
        backward_case(37, 77, isa);
        backward_case(23, 3072, isa); /* GELU's 70656 values cross four parallel blocks */
        backward_case(64, 768, isa);  /* GPT-2's width, enough rows to split the layernorm over the team */
        backward_case(1, 5, isa);
        rmsnorm_case(37, 77, isa);
        rmsnorm_case(3, 1500, isa); /* rows longer than the 512-column chunk */
        rmsnorm_case(64, 1024, isa); /* enough to split over the team */
        swiglu_case(23 * 3072 + 5, isa); /* crosses four parallel blocks */
        swiglu_case(3, isa);
        adamw_case(3 * 16384 + 45, 1.0f, isa);
        adamw_case(1000, 0.37f, isa);
        transpose_case(1, 1, isa);
        transpose_case(37, 77, isa);
        transpose_case(64, 32, isa);
        transpose_case(100, 130, isa); /* whole 32 x 32 blocks and the rest of a 64 x 64 tile, both ways */
        transpose_case(1024, 768, isa);
    }
    cl_kernels_max_isa(3);
    return cl_test_report("test_bf16_kernels");
}
