/* Tests of the device as a backend (include/cleave/device.h,
 * src/cleave/backend.h; the CPU backend in src/kernels/cpu.c).
 *
 * Why: the units, data parallelism, the optimizer and the checkpoints
 * touch device memory only through the device's two tables, so a table
 * with a hole would crash a run and a fill, copy or conversion that did not
 * do what its name says would corrupt one. Shown here: every entry of the
 * CPU backend's memory ops and kernel table is set; fill, copy (overlapping
 * too) and the host copies move exactly the bytes asked; F32 <-> BF16
 * converts with round-to-nearest-even, keeps NaN and infinity, and round
 * trips BF16 exactly; a conversion the backend cannot do is refused naming
 * both formats; the embedding slice kernels the embedding unit calls through
 * the table give the whole-vocabulary kernels' bits on one slice and add up
 * to them over two. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleave/device.h"
#include "cleave/kernels.h"
#include "common/check.h"

static void test_tables(cl_device *d) {
    const cl_device_ops *o = cl_device_backend(d);
    CHECK(o->name && o->alloc && o->free && o->fill && o->copy && o->copy_to_host && o->copy_from_host && o->convert &&
              o->sync && o->kernels,
          "a memory op of the cpu backend is NULL");
    const cl_kernels *k = cl_device_kernels(d);
    CHECK(k == &cl_cpu_kernels && k->name && strcmp(k->name, "cpu") == 0, "the cpu device's kernel table");
    CHECK(k->gemm_formats & (1u << CL_F32), "the cpu gemm does not take F32");
    /* every member from gemm on is a function pointer */
    size_t first = offsetof(cl_kernels, gemm), slot = sizeof(void (*)(void));
    CHECK((sizeof *k - first) % slot == 0, "the table's entries are not all function pointers");
    int holes = 0, n = 0;
    for (size_t at = first; at + slot <= sizeof *k; at += slot, n++) {
        void (*f)(void);
        memcpy(&f, (const char *)k + at, slot);
        holes += f == NULL;
    }
    CHECK(holes == 0 && n >= 39, "%d of %d kernel entries NULL", holes, n);
}

/* sync: a no-op on the cpu; a backend whose issued work failed is reported
 * by cl_device_sync naming the device (the cpu's ops with a failing sync). */
static int failing_sync(void *impl) {
    (void)impl;
    return -1;
}

static void test_sync(cl_device *d) {
    CHECK_OK(cl_device_sync(d));
    cl_device_ops bad = *cl_device_backend(d);
    bad.sync = failing_sync;
    cl_device *b;
    CHECK_OK(cl_device_create(&b, &bad, NULL, 0, 7));
    cl_status s = cl_device_sync(b);
    CHECK(s == CL_ERR_INTERNAL && strstr(cl_last_error(), "device cpu:7"), "a failed sync: status %d, '%s'", (int)s,
          cl_last_error());
    cl_device_destroy(b);
}

static void test_memory(cl_device *d) {
    unsigned char *p;
    CHECK_OK(cl_device_alloc(d, CL_MEM_WORKSPACE, 256, (void **)&p));
    unsigned char host[256], back[256];
    for (int i = 0; i < 256; i++) host[i] = (unsigned char)(i * 7 + 3);
    cl_device_copy_from_host(d, p, host, 256);
    cl_device_copy_to_host(d, back, p, 256);
    CHECK(memcmp(host, back, 256) == 0, "host -> device -> host changed the bytes");
    cl_device_fill(d, p + 10, 0xAB, 20);
    cl_device_copy_to_host(d, back, p, 256);
    int fill_ok = back[9] == host[9] && back[30] == host[30];
    for (int i = 10; i < 30; i++) fill_ok &= back[i] == 0xAB;
    CHECK(fill_ok, "fill wrote other bytes than the 20 asked");
    cl_device_fill(d, p, 0, 0); /* nothing */
    /* overlapping copies behave like memmove, both ways */
    cl_device_copy_from_host(d, p, host, 256);
    cl_device_copy(d, p + 8, p, 100);
    cl_device_copy_to_host(d, back, p, 256);
    CHECK(memcmp(back + 8, host, 100) == 0 && memcmp(back, host, 8) == 0, "an overlapping copy upward");
    cl_device_copy_from_host(d, p, host, 256);
    cl_device_copy(d, p, p + 8, 100);
    cl_device_copy_to_host(d, back, p, 256);
    CHECK(memcmp(back, host + 8, 100) == 0 && memcmp(back + 100, host + 100, 156) == 0, "an overlapping copy downward");
    CHECK(cl_device_current(d, CL_MEM_WORKSPACE) == 256, "the copies changed the accounting");
    cl_device_free(d, p);
    /* a fill large enough to go over the team in pieces (cpu_fill), from an odd offset to an odd end */
    size_t big = ((size_t)23 << 20) + 77;
    cl_device *u; /* no cap */
    CHECK_OK(cl_device_create_cpu(&u, 0, 0));
    CHECK_OK(cl_device_alloc(u, CL_MEM_WORKSPACE, big, (void **)&p));
    int was = cl_threads();
    cl_set_threads(2);
    cl_device_fill(u, p, 0x5C, big);
    cl_device_fill(u, p + 3, 0xE1, big - 3 - 5);
    cl_set_threads(was);
    unsigned char *all = malloc(big);
    CHECK(all != NULL, "no host memory for the large fill's check");
    if (all) {
        cl_device_copy_to_host(u, all, p, big);
        size_t wrong = 0;
        for (size_t i = 0; i < big; i++) wrong += all[i] != (i < 3 || i >= big - 5 ? 0x5C : 0xE1);
        CHECK(wrong == 0, "a %zu-byte fill over two threads: %zu bytes wrong", big - 8, wrong);
        free(all);
    }
    cl_device_free(u, p);
    cl_device_destroy(u);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_convert(cl_device *d) {
    /* value, the BF16 it rounds to */
    static const uint32_t in[][2] = {
        {0x3F800000u, 0x3F80}, /* 1 */
        {0x3F808000u, 0x3F80}, /* 1 + 2^-8: a tie, to even (down) */
        {0x3F818000u, 0x3F82}, /* 1 + 3 2^-8: a tie, to even (up) */
        {0x3F808001u, 0x3F81}, /* just past the tie: up */
        {0xC0490FDBu, 0xC049}, /* -pi */
        {0x7F7FFFFFu, 0x7F80}, /* the largest float rounds to infinity */
        {0x7F800000u, 0x7F80}, /* infinity */
        {0xFF800000u, 0xFF80}, /* -infinity */
        {0x00000001u, 0x0000}, /* the smallest subnormal: to zero */
        {0x80000000u, 0x8000}, /* -0 */
    };
    enum { N = sizeof in / sizeof in[0] };
    float *f, *g;
    uint16_t *h;
    CHECK_OK(cl_device_alloc_f32(d, CL_MEM_WORKSPACE, N + 1, &f));
    CHECK_OK(cl_device_alloc_f32(d, CL_MEM_WORKSPACE, N + 1, &g));
    CHECK_OK(cl_device_alloc(d, CL_MEM_WORKSPACE, (N + 1) * 2, (void **)&h));
    float hf[N + 1];
    for (int i = 0; i < N; i++) hf[i] = of_bits(in[i][0]);
    hf[N] = of_bits(0x7FC12345u); /* a NaN whose payload would round into the exponent */
    cl_device_copy_from_host(d, f, hf, sizeof hf);
    CHECK_OK(cl_device_convert(d, h, CL_BF16, f, CL_F32, N + 1));
    uint16_t hb[N + 1];
    cl_device_copy_to_host(d, hb, h, sizeof hb);
    int wrong = -1;
    for (int i = 0; i < N; i++)
        if (hb[i] != in[i][1] && wrong < 0) wrong = i;
    CHECK(wrong < 0, "F32 0x%08x -> BF16 0x%04x, not 0x%04x", wrong < 0 ? 0 : in[wrong][0], wrong < 0 ? 0 : hb[wrong],
          wrong < 0 ? 0 : in[wrong][1]);
    CHECK((hb[N] & 0x7F80) == 0x7F80 && (hb[N] & 0x7F) != 0, "a NaN became 0x%04x", hb[N]);
    /* BF16 -> F32 is exact: the values come back as their upper halves */
    CHECK_OK(cl_device_convert(d, g, CL_F32, h, CL_BF16, N + 1));
    float hg[N + 1];
    cl_device_copy_to_host(d, hg, g, sizeof hg);
    int exact = 1;
    for (int i = 0; i < N + 1; i++) exact &= bits(hg[i]) == (uint32_t)hb[i] << 16;
    CHECK(exact, "BF16 -> F32 is not the upper half");
    /* same format: a copy */
    CHECK_OK(cl_device_convert(d, g, CL_F32, f, CL_F32, N));
    cl_device_copy_to_host(d, hg, g, sizeof hg);
    CHECK(memcmp(hg, hf, N * sizeof(float)) == 0, "F32 -> F32 is not a copy");
    cl_status s = cl_device_convert(d, g, CL_I32, f, CL_F32, N);
    CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "F32") && strstr(cl_last_error(), "I32"),
          "F32 -> I32: %s", cl_last_error());
    cl_device_free(d, f);
    cl_device_free(d, g);
    cl_device_free(d, h);
}

/* The slice kernels (the embedding unit's) against the whole-vocabulary ones. */
static void test_embedding_slices(cl_device *d) {
    const cl_kernels *k = cl_device_kernels(d);
    enum { B = 2, T = 5, C = 7, V = 11, NT = B * T };
    static float wte[V * C], wpe[T * C], dout[NT * C];
    int32_t tok[NT];
    for (int i = 0; i < V * C; i++) wte[i] = (float)((i * 37) % 101) / 17.0f - 2.5f;
    for (int i = 0; i < T * C; i++) wpe[i] = (float)((i * 53) % 89) / 29.0f - 1.25f;
    for (int i = 0; i < NT * C; i++) dout[i] = (float)((i * 71) % 97) / 13.0f - 3.0f;
    for (int i = 0; i < NT; i++) tok[i] = (i * 5 + 3) % V;
    static float want[NT * C], got[NT * C], part[NT * C];
    cl_embedding_forward(want, tok, wte, wpe, B, T, C);
    k->embedding_lookup(got, tok, wte, NT, C, 0, V);
    k->embedding_add_positions(got, wpe, NT, 0, T, C);
    CHECK(memcmp(want, got, sizeof got) == 0, "lookup + positions over the whole vocabulary differ from embedding_forward");
    /* two slices [0, 6) and [6, 11): each row is in one only, the other gives zeros */
    k->embedding_lookup(got, tok, wte, NT, C, 0, 6);
    k->embedding_lookup(part, tok, wte + 6 * C, NT, C, 6, V - 6);
    k->add_inplace(got, part, NT * C);
    k->embedding_add_positions(got, wpe, NT, 0, T, C);
    CHECK(memcmp(want, got, sizeof got) == 0, "two slices' lookups do not add up to the whole");
    /* positions of a later run of rows (sequence parallelism's second half) */
    k->embedding_lookup(got, tok, wte, NT, C, 0, V);
    k->embedding_add_positions(got + 4 * C, wpe, NT - 4, 4, T, C);
    k->embedding_lookup(part, tok, wte, NT, C, 0, V);
    k->embedding_add_positions(part, wpe, NT, 0, T, C);
    CHECK(memcmp(got + 4 * C, part + 4 * C, (NT - 4) * C * sizeof(float)) == 0, "positions from row 4 on");
    static float dw1[V * C], dp1[T * C], dw2[V * C], dp2[T * C];
    cl_embedding_backward_weight(dw1, dp1, dout, tok, B, T, C);
    k->embedding_backward_slice(dw2, dp2, dout, tok, NT, T, C, 0, 6);
    static float dp3[T * C];
    k->embedding_backward_slice(dw2 + 6 * C, dp3, dout, tok, NT, T, C, 6, V - 6);
    CHECK(memcmp(dw1, dw2, sizeof dw1) == 0, "two slices' wte gradients differ from the whole's");
    CHECK(memcmp(dp1, dp2, sizeof dp1) == 0 && memcmp(dp1, dp3, sizeof dp1) == 0, "each slice's wpe gradient is the whole's");
}

/* The F32 GEMM through the table is cl_gemm; add_bias adds a row vector. */
static void test_gemm_bias(cl_device *d) {
    const cl_kernels *k = cl_device_kernels(d);
    enum { M = 9, N = 13, K = 17 };
    static float A[K * M], B[K * N], c1[M * N], c2[M * N], bias[N];
    for (int i = 0; i < K * M; i++) A[i] = (float)((i * 29) % 31) / 7.0f - 2.0f;
    for (int i = 0; i < K * N; i++) B[i] = (float)((i * 43) % 47) / 11.0f - 2.0f;
    for (int i = 0; i < N; i++) bias[i] = (float)i / 3.0f;
    cl_gemm(1, 0, M, N, K, 1.0f, A, M, B, N, 0.0f, c1, N);
    cl_sgemm(k, 1, 0, M, N, K, 1.0f, A, M, B, N, 0.0f, c2, N);
    CHECK(memcmp(c1, c2, sizeof c1) == 0, "gemm through the table differs from cl_gemm");
    memcpy(c2, c1, sizeof c1);
    k->add_bias(c2, bias, M, N);
    int ok = 1;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) ok &= c2[i * N + j] == c1[i * N + j] + bias[j];
    CHECK(ok, "add_bias");
}

int main(void) {
    cl_device *d;
    CHECK_OK(cl_device_create_cpu(&d, 1 << 20, 0));
    CHECK(strcmp(cl_device_name(d), "cpu") == 0, "name %s", cl_device_name(d));
    test_tables(d);
    test_sync(d);
    test_memory(d);
    test_convert(d);
    test_embedding_slices(d);
    test_gemm_bias(d);
    CHECK(cl_device_current_total(d) == 0, "%zu bytes left allocated", cl_device_current_total(d));
    cl_device_destroy(d);
    return cl_test_report("test_device");
}
