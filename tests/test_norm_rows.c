/* The normalizations' row groups (src/kernels/layernorm.c, rmsnorm.c) keep
 * each row's bits: the kernels take rows four at a time, their double sums'
 * chains interleaved, and a group's rows must come out as the same rows
 * taken one call each (a one-row call never forms a group, so it runs each
 * sum alone, in order). Checked bit for bit on every LayerNorm and RMSNorm
 * kernel, F32 and BF16 forms, forward (plain, residual, residual in place)
 * and backward (input, in place on dout, and weight: its column sums over
 * rows in row order, so one row a call in turn is the same sum; C a whole
 * number of 64-column blocks and not), N a multiple of four and not, one
 * thread and two. Reordering a group's sums (or mixing its rows) fails it. */
#include "cleave/core.h"
#include "cleave/kernels.h"
#include "common/check.h"

#include <stdlib.h>
#include <string.h>

static cl_rng g_rng;

static float *vec(size_t n) {
    float *p = malloc(n * sizeof *p + 16);
    CHECK(p != NULL, "no memory for %zu floats", n);
    if (!p) exit(1);
    for (size_t i = 0; i < n; i++) p[i] = 2.0f * cl_rng_normal(&g_rng) + 0.25f;
    return p;
}

static float *dup(const float *x, size_t n) {
    float *p = malloc(n * sizeof *p + 16);
    if (!p) exit(1);
    memcpy(p, x, n * sizeof *p);
    return p;
}

static uint16_t *hvec(size_t n) {
    uint16_t *p = calloc(n + 8, sizeof *p);
    if (!p) exit(1);
    return p;
}

#define SAME(a, b, n) (memcmp((a), (b), (n) * sizeof *(a)) == 0)

static void layernorm_case(int N, int C) {
    size_t n = (size_t)N * C;
    float *x = vec(n), *r = vec(n), *w = vec(C), *b = vec(C), *d = vec(n);
    float *o1 = vec(n), *o2 = vec(n), *m1 = vec(N), *m2 = vec(N), *s1 = vec(N), *s2 = vec(N), *res1 = vec(n), *res2 = vec(n);
    uint16_t *h1 = hvec(n), *h2 = hvec(n);
    cl_layernorm_forward(o1, m1, s1, x, w, b, N, C);
    for (int i = 0; i < N; i++) cl_layernorm_forward(o2 + (size_t)i * C, m2 + i, s2 + i, x + (size_t)i * C, w, b, 1, C);
    CHECK(SAME(o1, o2, n) && SAME(m1, m2, N) && SAME(s1, s2, N), "layernorm_forward N %d C %d: rows in groups differ", N, C);
    cl_residual_layernorm_forward(res1, o1, m1, s1, x, r, w, b, N, C);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        cl_residual_layernorm_forward(res2 + o, o2 + o, m2 + i, s2 + i, x + o, r + o, w, b, 1, C);
    }
    CHECK(SAME(o1, o2, n) && SAME(res1, res2, n) && SAME(s1, s2, N), "residual_layernorm_forward N %d C %d", N, C);
    memcpy(res1, x, n * sizeof *x), memcpy(res2, x, n * sizeof *x); /* in place: res is a */
    cl_residual_layernorm_forward(res1, o1, m1, s1, res1, r, w, b, N, C);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        cl_residual_layernorm_forward(res2 + o, o2 + o, m2 + i, s2 + i, res2 + o, r + o, w, b, 1, C);
    }
    CHECK(SAME(o1, o2, n) && SAME(res1, res2, n), "residual_layernorm_forward in place N %d C %d", N, C);
    cl_layernorm_forward_bf16(h1, NULL, m1, s1, x, w, b, N, C);
    for (int i = 0; i < N; i++) cl_layernorm_forward_bf16(h2 + (size_t)i * C, NULL, m2 + i, s2 + i, x + (size_t)i * C, w, b, 1, C);
    CHECK(SAME(h1, h2, n) && SAME(s1, s2, N), "layernorm_forward_bf16 N %d C %d", N, C);
    cl_residual_layernorm_forward_bf16(res1, h1, o1, m1, s1, x, r, w, b, N, C);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        cl_residual_layernorm_forward_bf16(res2 + o, h2 + o, o2 + o, m2 + i, s2 + i, x + o, r + o, w, b, 1, C);
    }
    CHECK(SAME(h1, h2, n) && SAME(o1, o2, n) && SAME(res1, res2, n), "residual_layernorm_forward_bf16 N %d C %d", N, C);
    float *g1 = vec(n), *g2 = dup(g1, n);
    cl_layernorm_backward_input(g1, d, x, w, m1, s1, N, C);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        cl_layernorm_backward_input(g2 + o, d + o, x + o, w, m1 + i, s1 + i, 1, C);
    }
    CHECK(SAME(g1, g2, n), "layernorm_backward_input N %d C %d", N, C);
    cl_layernorm_backward_input_bf16(g1, h1, d, x, w, m1, s1, N, C);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        cl_layernorm_backward_input_bf16(g2 + o, h2 + o, d + o, x + o, w, m1 + i, s1 + i, 1, C);
    }
    CHECK(SAME(g1, g2, n) && SAME(h1, h2, n), "layernorm_backward_input_bf16 N %d C %d", N, C);
    memcpy(g1, d, n * sizeof *d), memcpy(g2, d, n * sizeof *d); /* din is dout */
    cl_layernorm_backward_input(g1, g1, x, w, m1, s1, N, C);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        cl_layernorm_backward_input(g2 + o, g2 + o, x + o, w, m1 + i, s1 + i, 1, C);
    }
    CHECK(SAME(g1, g2, n), "layernorm_backward_input in place N %d C %d", N, C);
    float *dw1 = vec(C), *db1 = vec(C), *dw2 = dup(dw1, C), *db2 = dup(db1, C);
    cl_layernorm_backward_weight(dw1, db1, d, x, m1, s1, N, C);
    for (int i = 0; i < N; i++) cl_layernorm_backward_weight(dw2, db2, d + (size_t)i * C, x + (size_t)i * C, m1 + i, s1 + i, 1, C);
    CHECK(SAME(dw1, dw2, C) && SAME(db1, db2, C), "layernorm_backward_weight N %d C %d", N, C);
    free(x), free(r), free(w), free(b), free(d), free(o1), free(o2), free(m1), free(m2), free(s1), free(s2), free(res1), free(res2);
    free(h1), free(h2), free(g1), free(g2), free(dw1), free(db1), free(dw2), free(db2);
}

static void rmsnorm_case(int N, int C) {
    size_t n = (size_t)N * C;
    const float eps = 1e-6f;
    float *x = vec(n), *r = vec(n), *w = vec(C), *d = vec(n);
    float *o1 = vec(n), *o2 = vec(n), *s1 = vec(N), *s2 = vec(N), *res1 = vec(n), *res2 = vec(n);
    uint16_t *h1 = hvec(n), *h2 = hvec(n);
    cl_rmsnorm_forward(o1, s1, x, w, eps, N, C);
    for (int i = 0; i < N; i++) cl_rmsnorm_forward(o2 + (size_t)i * C, s2 + i, x + (size_t)i * C, w, eps, 1, C);
    CHECK(SAME(o1, o2, n) && SAME(s1, s2, N), "rmsnorm_forward N %d C %d: rows in groups differ", N, C);
    cl_residual_rmsnorm_forward(res1, o1, s1, x, r, w, eps, N, C);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        cl_residual_rmsnorm_forward(res2 + o, o2 + o, s2 + i, x + o, r + o, w, eps, 1, C);
    }
    CHECK(SAME(o1, o2, n) && SAME(res1, res2, n) && SAME(s1, s2, N), "residual_rmsnorm_forward N %d C %d", N, C);
    memcpy(res1, x, n * sizeof *x), memcpy(res2, x, n * sizeof *x);
    cl_residual_rmsnorm_forward(res1, o1, s1, res1, r, w, eps, N, C);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        cl_residual_rmsnorm_forward(res2 + o, o2 + o, s2 + i, res2 + o, r + o, w, eps, 1, C);
    }
    CHECK(SAME(o1, o2, n) && SAME(res1, res2, n), "residual_rmsnorm_forward in place N %d C %d", N, C);
    cl_rmsnorm_forward_bf16(h1, s1, x, w, eps, N, C);
    for (int i = 0; i < N; i++) cl_rmsnorm_forward_bf16(h2 + (size_t)i * C, s2 + i, x + (size_t)i * C, w, eps, 1, C);
    CHECK(SAME(h1, h2, n) && SAME(s1, s2, N), "rmsnorm_forward_bf16 N %d C %d", N, C);
    cl_residual_rmsnorm_forward_bf16(res1, h1, s1, x, r, w, eps, N, C);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        cl_residual_rmsnorm_forward_bf16(res2 + o, h2 + o, s2 + i, x + o, r + o, w, eps, 1, C);
    }
    CHECK(SAME(h1, h2, n) && SAME(res1, res2, n), "residual_rmsnorm_forward_bf16 N %d C %d", N, C);
    float *g1 = vec(n), *g2 = dup(g1, n);
    cl_rmsnorm_backward_input(g1, d, x, w, s1, N, C);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        cl_rmsnorm_backward_input(g2 + o, d + o, x + o, w, s1 + i, 1, C);
    }
    CHECK(SAME(g1, g2, n), "rmsnorm_backward_input N %d C %d", N, C);
    memcpy(g1, d, n * sizeof *d), memcpy(g2, d, n * sizeof *d);
    cl_rmsnorm_backward_input(g1, g1, x, w, s1, N, C);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        cl_rmsnorm_backward_input(g2 + o, g2 + o, x + o, w, s1 + i, 1, C);
    }
    CHECK(SAME(g1, g2, n), "rmsnorm_backward_input in place N %d C %d", N, C);
    float *dw1 = vec(C), *dw2 = dup(dw1, C);
    cl_rmsnorm_backward_weight(dw1, d, x, s1, N, C);
    for (int i = 0; i < N; i++) cl_rmsnorm_backward_weight(dw2, d + (size_t)i * C, x + (size_t)i * C, s1 + i, 1, C);
    CHECK(SAME(dw1, dw2, C), "rmsnorm_backward_weight N %d C %d", N, C);
    free(x), free(r), free(w), free(d), free(o1), free(o2), free(s1), free(s2), free(res1), free(res2);
    free(h1), free(h2), free(g1), free(g2), free(dw1), free(dw2);
}

int main(void) {
    cl_rng_seed(&g_rng, 44);
    static const int Ns[] = {1, 3, 4, 5, 8, 11, 96}, Cs[] = {1, 7, 64, 100, 128, 257};
    for (int th = 1; th <= 2; th++) {
        int was = cl_threads();
        cl_set_threads(th);
        for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++)
            for (size_t c = 0; c < sizeof Cs / sizeof Cs[0]; c++) {
                layernorm_case(Ns[a], Cs[c]);
                rmsnorm_case(Ns[a], Cs[c]);
            }
        layernorm_case(1000, 768); /* past the team's threshold: the groups split over threads */
        rmsnorm_case(1000, 768);
        cl_set_threads(was);
    }
    return cl_test_report("test_norm_rows");
}
