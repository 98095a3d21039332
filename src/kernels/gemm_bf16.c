/* GEMM with BF16 operands: oneDNN's matmul primitive, cached, and the
 * widening fallback (the F32 GEMM itself is gemm.c's cl_gemm).
 *
 * cl_gemm_ex computes C = alpha op(A) op(B) + beta C with A and B each F32
 * or BF16 and C F32, accumulating in F32. Both F32: cl_gemm (dnnl_sgemm, its
 * bits unchanged). Both BF16: cl_gemm_matmul, oneDNN's matmul primitive with
 * BF16 source and weights and an F32 destination (transposes as strides,
 * leading dimensions as row strides, alpha as an output scale, beta as a sum
 * post-op); where that cannot run (no oneDNN, no AVX-512 core, oneDNN only
 * offers its reference loops, cl_gemm_force_widen), the BF16 operands are
 * widened to F32 (exact) in a scratch and the F32 path computes the product:
 * the same answer within rounding, slower. One BF16 and one F32 operand:
 * the BF16 one is widened.
 *
 * Primitives are created once per key (transposes, M, N, K, leading
 * dimensions, formats, alpha and beta) and kept in a cache of CACHE_CAP
 * entries under one mutex, the least recently used evicted; a primitive in
 * use by another thread (refs > 0) is never evicted, and when every entry is
 * in use a primitive is made for the one call and destroyed after it. A key
 * whose primitive cannot be made is cached too (prim NULL: widen), so the
 * attempt is not repeated. Each thread executes with its own stream and its
 * own scratchpad (user-managed), freed when the thread exits; the cache and
 * the engine are freed at process exit. cl_gemm_ex_rows is for products
 * whose row counts change from call to call (an expert's tokens): its key
 * leaves M and K out and its primitive takes them at run time (oneDNN's
 * runtime dimensions), one primitive for every count where a key per count
 * would make a new primitive (milliseconds) nearly every call; its bits are
 * a function of the call's arguments alone, as the others'. Invariants: beta == 0 never reads C
 * (no sum post-op), M or N == 0 touches nothing, K == 0 gives C = beta C. */
#include "cleave/kernels.h"
#include "kernels/simd.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef CL_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

static atomic_int g_force_widen;
static atomic_int g_pack = 1; /* CLEAVE_BF16_PACK=0 (read once) or cl_gemm_pack_b(0): B as given */

int cl_gemm_force_widen(int on) { return atomic_exchange(&g_force_widen, on ? 1 : 0); }

static atomic_long g_packed; /* products that ran with B packed */

int cl_gemm_pack_b(int on) { return atomic_exchange(&g_pack, on ? 1 : 0); }

static atomic_int g_ksplit = 1; /* CLEAVE_BF16_KSPLIT=0 (read once) or cl_gemm_ksplit(0): a long K in one call */

int cl_gemm_ksplit(int on) { return atomic_exchange(&g_ksplit, on ? 1 : 0); }

long cl_gemm_packed_count(void) { return atomic_load(&g_packed); }

/* ---- the widening fallback ------------------------------------------------ */

/* The stored matrix behind op(X) (rows x cols, row stride ld) as dense F32; *own is the buffer to free. A dense
 * block is widened in one call (its blocks go to the thread team), a strided one row by row. */
static const float *widen(const void *X, cl_dtype f, int rows, int cols, int ld, int *ld_out, float **own) {
    *own = NULL;
    if (f == CL_F32) {
        *ld_out = ld;
        return X;
    }
    float *w = malloc((size_t)rows * (size_t)cols * sizeof *w + 1);
    if (!w) return NULL;
    const uint16_t *x = X;
    if (ld == cols) cl_dtype_convert(w, CL_F32, x, CL_BF16, (size_t)rows * (size_t)cols);
    else
        for (int r = 0; r < rows; r++) cl_dtype_convert(w + (size_t)r * cols, CL_F32, x + (int64_t)r * ld, CL_BF16, (size_t)cols);
    *own = w;
    *ld_out = cols;
    return w;
}

/* The widened operands of one call hold at most WIDEN_CAP bytes: a larger product runs in pieces (below). Under
 * glibc's largest mmap threshold (32 MiB), so after the first call the scratch comes from the heap: one call widening
 * the LM head's wte whole (154 MB) had the kernel map and zero fresh pages every call, 0.45x the F32 product on a
 * Zen 3 (docs/PERFORMANCE.md). */
#define WIDEN_CAP ((int64_t)16 << 20)
enum { WIDEN_STEP = 64 }; /* pieces are multiples of this many rows, columns or K */

static int64_t widen_bytes(cl_dtype f, int64_t rows, int64_t cols) { return f == CL_F32 ? 0 : rows * cols * 4; }

/* A piece of at most `cap / per` (whole WIDEN_STEPs, at least one) of `n`. */
static int widen_piece(int64_t cap, int64_t per, int n) {
    int64_t p = cap / (per > 0 ? per : 1) / WIDEN_STEP * WIDEN_STEP;
    return p < WIDEN_STEP ? WIDEN_STEP : p > n ? n : (int)p;
}

/* C = alpha op(A) op(B) + beta C through the F32 GEMM, the BF16 operands widened. Past WIDEN_CAP the product splits,
 * recursively, along the dimension that shrinks what is widened: K when both operands are large (the pieces add into C,
 * the first with the caller's beta), else M (A's rows) or N (B's columns). Each piece is an F32 product of the same
 * values; the split is a function of the shape, so the bits are the same on every run of one shape. */
static void gemm_widened(int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda, const void *B,
                         cl_dtype fb, int ldb, float beta, float *C, int ldc) {
    int64_t wa = widen_bytes(fa, M, K), wb = widen_bytes(fb, K, N);
    size_t ea = fa == CL_F32 ? 4 : 2, eb = fb == CL_F32 ? 4 : 2;
    const char *a = A, *b = B;
    if (wa + wb > WIDEN_CAP) {
        if (wa > WIDEN_CAP / 2 && wb > WIDEN_CAP / 2 && K > WIDEN_STEP) { /* both: pieces of K */
            int kc = widen_piece(WIDEN_CAP, 4 * ((int64_t)M + N), K);
            for (int k0 = 0; k0 < K; k0 += kc) {
                int kk = K - k0 < kc ? K - k0 : kc;
                gemm_widened(ta, tb, M, N, kk, alpha, a + (ta ? (int64_t)k0 * lda : k0) * (int64_t)ea, fa, lda,
                             b + (tb ? k0 : (int64_t)k0 * ldb) * (int64_t)eb, fb, ldb, k0 ? 1.0f : beta, C, ldc);
            }
            return;
        }
        if (wa >= wb && M > WIDEN_STEP) { /* A's rows */
            int mc = widen_piece(WIDEN_CAP - wb, 4 * (int64_t)K, M);
            for (int i0 = 0; i0 < M; i0 += mc)
                gemm_widened(ta, tb, M - i0 < mc ? M - i0 : mc, N, K, alpha, a + (ta ? i0 : (int64_t)i0 * lda) * (int64_t)ea, fa,
                             lda, B, fb, ldb, beta, C + (int64_t)i0 * ldc, ldc);
            return;
        }
        if (wb > wa && N > WIDEN_STEP) { /* B's columns */
            int nc = widen_piece(WIDEN_CAP - wa, 4 * (int64_t)K, N);
            for (int j0 = 0; j0 < N; j0 += nc)
                gemm_widened(ta, tb, M, N - j0 < nc ? N - j0 : nc, K, alpha, A, fa, lda,
                             b + (tb ? (int64_t)j0 * ldb : j0) * (int64_t)eb, fb, ldb, beta, C + j0, ldc);
            return;
        }
    }
    float *fa_buf, *fb_buf;
    int la, lb;
    const float *wa_p = widen(A, fa, ta ? K : M, ta ? M : K, lda, &la, &fa_buf);
    const float *wb_p = widen(B, fb, tb ? N : K, tb ? K : N, ldb, &lb, &fb_buf);
    CL_ASSERT(wa_p && wb_p); /* out of host memory for a scratch: cl_gemm returns void */
    cl_gemm(ta, tb, M, N, K, alpha, wa_p, la, wb_p, lb, beta, C, ldc);
    free(fa_buf);
    free(fb_buf);
}

#ifdef CL_HAVE_DNNL
/* ---- the primitive cache ---------------------------------------------------- */

enum { CACHE_CAP = 128 };

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc; /* rt: M and K 0, given at run time */
    int rt;
    int fa, fb;
    float alpha, beta;
    int pack; /* B packed by pack_b into the primitive's own layout before each call (want_pack) */
} mm_key;

typedef struct {
    mm_key key;
    int used;               /* slot holds a key */
    int refs;               /* executions in flight */
    unsigned long long tick; /* last use, for LRU */
    dnnl_primitive_t prim;  /* NULL: this key cannot run as a matmul (widen) */
    dnnl_memory_desc_t md_a, md_b, md_c, md_s;
    size_t scratch;
    int kb, nb;   /* key.pack: md_b's blocks, K kb (pairs inside) by N nb (pack_layout) */
    size_t bytes; /* key.pack: md_b's size, K padded to kb and N to nb */
} mm_entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_engine;
static int g_engine_ok;
static pthread_key_t g_tls;
static mm_entry g_cache[CACHE_CAP];
static unsigned long long g_tick;

typedef struct {
    dnnl_stream_t stream;
    void *scratch;
    size_t cap;
    void *packed; /* B in the primitive's layout (pack_b), at most PACK_CAP bytes */
    size_t packed_cap;
} mm_thread;

static void thread_free(void *p) {
    mm_thread *t = p;
    if (!t) return;
    if (t->stream) dnnl_stream_destroy(t->stream);
    free(t->scratch);
    free(t->packed);
    free(t);
}

/* At exit. A primitive still running on another thread (exit() called while
 * a rank thread computes) is left to the process's end, and so is the engine
 * then: freeing them under it would turn an exit into a crash. */
static void cache_free_all(void) {
    int busy = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < CACHE_CAP; i++) {
        if (g_cache[i].refs) {
            busy = 1;
            continue;
        }
        if (g_cache[i].prim) dnnl_primitive_destroy(g_cache[i].prim);
        memset(&g_cache[i], 0, sizeof g_cache[i]);
    }
    pthread_mutex_unlock(&g_mu);
    if (busy) return;
    /* the exiting thread's own stream and scratch (other threads' go when they exit) */
    thread_free(pthread_getspecific(g_tls));
    pthread_setspecific(g_tls, NULL);
    if (g_engine) dnnl_engine_destroy(g_engine);
    g_engine = NULL;
    g_engine_ok = 0;
}

static void init_once(void) {
    const char *e = getenv("CLEAVE_BF16_PACK");
    if (e && !strcmp(e, "0")) atomic_store(&g_pack, 0);
    e = getenv("CLEAVE_BF16_KSPLIT");
    if (e && !strcmp(e, "0")) atomic_store(&g_ksplit, 0);
    if (pthread_key_create(&g_tls, thread_free)) return;
    if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) return;
    g_engine_ok = 1;
    atexit(cache_free_all);
}

static int key_eq(const mm_key *a, const mm_key *b) {
    return a->rt == b->rt && a->ta == b->ta && a->tb == b->tb && a->M == b->M && a->N == b->N && a->K == b->K && a->lda == b->lda &&
           a->ldb == b->ldb && a->ldc == b->ldc && a->fa == b->fa && a->fb == b->fb && a->pack == b->pack &&
           !memcmp(&a->alpha, &b->alpha, sizeof a->alpha) && !memcmp(&a->beta, &b->beta, sizeof a->beta);
}

static dnnl_data_type_t dnnl_type(int f) { return f == CL_BF16 ? dnnl_bf16 : dnnl_f32; }

/* The memory descriptors of A [M, K], B [K, N] and C [M, N] as k lays them out (M and K as given). */
static int make_mds(const mm_key *k, int64_t M, int64_t K, dnnl_memory_desc_t *a, dnnl_memory_desc_t *b, dnnl_memory_desc_t *c) {
    dnnl_dims_t da = {M, K}, db = {K, k->N}, dc = {M, k->N};
    dnnl_dims_t sa = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1}, sb = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1},
                sc = {k->ldc, 1};
    return dnnl_memory_desc_init_by_strides(a, 2, da, dnnl_type(k->fa), sa) ||
           dnnl_memory_desc_init_by_strides(b, 2, db, dnnl_type(k->fb), sb) || dnnl_memory_desc_init_by_strides(c, 2, dc, dnnl_f32, sc);
}

/* ---- B packed before the call ----------------------------------------------
 *
 * Given B as a plain matrix, oneDNN's BF16 matmul (brgemm) copies B's blocks
 * into its VNNI layout inside the call, again for each block of A's rows
 * (GPT-2's products on this CPU: 3-27% of the call, most on the weight
 * gradients, whose B is the output gradient; docs/PERFORMANCE.md). Where B is
 * [K, N] row-major (tb 0), the product is big enough to repay one pass over B
 * and the packed B fits PACK_CAP, the primitive is made with B in the layout
 * it chooses (format any), pack_b writes B into that layout once, over the
 * team, and the primitive reads it: the same kernel over the same blocks, so
 * the same bits as B given plain (tests/test_gemm_bf16.c checks bit for bit).
 * The layout must be one pack_b writes (pack_layout), else the key stays plain. */

enum { PACK_MIN_M = 32 };
#define PACK_CAP ((size_t)8 << 20)     /* bytes of packed B a thread keeps: beside the scratchpad, outside the device's cap */
#define PACK_MIN_WORK ((int64_t)1 << 24) /* M N K below this: the pass costs more than it saves (a 37 x 45 x 19 product 2x slower) */

/* Whether md is [K, N] BF16 in blocks of N nb by K kb, pairs of K innermost (oneDNN's BA{kb/2}a{nb}b2a: value
 * (k, n) at (n / nb) Kp nb + (k / kb) kb nb + (k % kb / 2) 2 nb + (n % nb) 2 + k % 2, Kp = K rounded up to kb, the
 * padding zeros); *kb, *nb its blocks. */
static int pack_layout(const dnnl_memory_desc_t *md, int K, int N, int *kb, int *nb) {
    if (md->ndims != 2 || md->data_type != dnnl_bf16 || md->format_kind != dnnl_blocked || md->offset0 != 0) return 0;
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (b->inner_nblks != 3 || b->inner_idxs[0] != 0 || b->inner_idxs[1] != 1 || b->inner_idxs[2] != 0 || b->inner_blks[2] != 2)
        return 0;
    int64_t k = 2 * b->inner_blks[0], n = b->inner_blks[1];
    if (k < 2 || n < 1 || k > 4096 || n > 4096) return 0;
    int64_t kp = (K + k - 1) / k * k, np = (N + n - 1) / n * n;
    if (md->padded_dims[0] != kp || md->padded_dims[1] != np || b->strides[0] != k * n || b->strides[1] != kp * n) return 0;
    *kb = (int)k, *nb = (int)n;
    return 1;
}

/* One N block (columns n0 .. n0 + nc of B, nc <= nb) into its place in the packed layout: k-pairs of rows
 * interleaved a column at a time, the padding (rows past K, columns past N) zero. */
static void pack_block(uint16_t *d, const uint16_t *B, int ldb, int K, int kp, int n0, int nc, int nb) {
    for (int k = 0; k < kp; k += 2) {
        uint16_t *o = d + (int64_t)k / 2 * 2 * nb; /* (k % kb / 2) 2 nb, with the k-blocks consecutive: kb nb = (kb / 2) 2 nb */
        const uint16_t *r0 = B + (int64_t)k * ldb + n0, *r1 = r0 + ldb;
        if (k + 1 < K && nc == nb) {
            for (int j = 0; j < nb; j++) o[2 * j] = r0[j], o[2 * j + 1] = r1[j];
            continue;
        }
        for (int j = 0; j < nb; j++) {
            o[2 * j] = k < K && j < nc ? r0[j] : 0;
            o[2 * j + 1] = k + 1 < K && j < nc ? r1[j] : 0;
        }
    }
}

#ifdef CL_SIMD_X86
/* pack_block's whole k-pairs of a full block (nb a multiple of 32): 32 columns of two rows into 64 values, two
 * permutes (lo: the first 16 of each row alternating, hi: the second 16); returns the pairs done (rows k < K2). */
CL_AVX512 static int pack_pairs_avx512(uint16_t *d, const uint16_t *B, int ldb, int K2, int n0, int nb) {
    uint16_t lo[32], hi[32];
    for (int j = 0; j < 16; j++) lo[2 * j] = (uint16_t)j, lo[2 * j + 1] = (uint16_t)(32 + j), hi[2 * j] = (uint16_t)(16 + j),
                                 hi[2 * j + 1] = (uint16_t)(48 + j);
    __m512i il = _mm512_loadu_si512(lo), ih = _mm512_loadu_si512(hi);
    for (int k = 0; k < K2; k += 2) {
        uint16_t *o = d + (int64_t)k * nb;
        const uint16_t *r0 = B + (int64_t)k * ldb + n0, *r1 = r0 + ldb;
        for (int j = 0; j < nb; j += 32) {
            __m512i a = _mm512_loadu_si512(r0 + j), b = _mm512_loadu_si512(r1 + j);
            _mm512_storeu_si512(o + 2 * j, _mm512_permutex2var_epi16(a, il, b));
            _mm512_storeu_si512(o + 2 * j + 32, _mm512_permutex2var_epi16(a, ih, b));
        }
    }
    _mm256_zeroupper();
    return K2;
}
#endif

/* B ([K, N] BF16, row stride ldb) into dst in e's layout (pack_layout's), N blocks over the team. */
static void pack_b(const mm_entry *e, uint16_t *dst, const uint16_t *B, int K, int N, int ldb) {
    int kb = e->kb, nb = e->nb, blocks = (N + nb - 1) / nb;
    int kp = (K + kb - 1) / kb * kb, v = cl_simd_level();
    (void)v;
#pragma omp parallel for schedule(static) if (blocks > 1 && (int64_t)K * N > 4 * 16384)
    for (int j = 0; j < blocks; j++) {
        int n0 = j * nb, nc = N - n0 < nb ? N - n0 : nb, done = 0;
        uint16_t *d = dst + (int64_t)j * kp * nb;
#ifdef CL_SIMD_X86
        if (v >= CL_ISA_AVX512 && nc == nb && nb % 32 == 0) done = pack_pairs_avx512(d, B, ldb, K / 2 * 2, n0, nb);
#endif
        pack_block(d + (int64_t)done * nb, B + (int64_t)done * ldb, ldb, K - done, kp - done, n0, nc, nb);
    }
}

/* Whether a call packs B: both BF16, B row-major, fixed shapes, the work past PACK_MIN_WORK, B's own bytes within
 * PACK_CAP (make_primitive checks the padded layout's bytes again once it is known). */
static int want_pack(int rt, int tb, int M, int N, int K, cl_dtype fa, cl_dtype fb) {
    return atomic_load(&g_pack) && !rt && !tb && fa == CL_BF16 && fb == CL_BF16 && M >= PACK_MIN_M &&
           (int64_t)M * N * K >= PACK_MIN_WORK && (size_t)K * (size_t)N * 2 <= PACK_CAP;
}

/* Makes the primitive of k into e (e->prim NULL when oneDNN cannot, or offers only its reference loops). */
static void make_primitive(const mm_key *k, mm_entry *e) {
    memset(e, 0, sizeof *e);
    e->key = *k;
    if (make_mds(k, k->rt ? DNNL_RUNTIME_DIM_VAL : k->M, k->rt ? DNNL_RUNTIME_DIM_VAL : k->K, &e->md_a, &e->md_b, &e->md_c))
        return;
    if (k->pack) { /* B in the layout the primitive picks for itself (pack_layout checks that pack_b writes it) */
        dnnl_dims_t db = {k->K, k->N};
        if (dnnl_memory_desc_init_by_tag(&e->md_b, 2, db, dnnl_bf16, dnnl_format_tag_any)) return;
    }
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &e->md_a, &e->md_b, NULL, &e->md_c)) return;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && k->alpha != 1.0f) ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha) == dnnl_success;
    if (ok && k->beta != 0.0f)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, k->beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (ok) ok = dnnl_primitive_desc_create(&pd, &desc, attr, g_engine, NULL) == dnnl_success;
    if (ok) {
        const char *impl = NULL;
        ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
             strncmp(impl, "ref", 3) != 0;
    }
    if (ok && k->pack) {
        const dnnl_memory_desc_t *b = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        ok = b && pack_layout(b, k->K, k->N, &e->kb, &e->nb);
        if (ok) e->md_b = *b, e->bytes = dnnl_memory_desc_get_size(b);
        ok = ok && e->bytes <= PACK_CAP;
    }
    if (ok) {
        const dnnl_memory_desc_t *s = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        if (s) e->md_s = *s;
        e->scratch = s ? dnnl_memory_desc_get_size(s) : 0;
        if (dnnl_primitive_create(&e->prim, pd) != dnnl_success) e->prim = NULL;
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
}

/* The cache slot of k, made if absent, with refs taken (-1: not cached, *tmp made for this call). */
static int cache_get(const mm_key *k, mm_entry *tmp) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < CACHE_CAP; i++)
        if (g_cache[i].used && key_eq(&g_cache[i].key, k)) {
            g_cache[i].refs++;
            g_cache[i].tick = ++g_tick;
            pthread_mutex_unlock(&g_mu);
            return i;
        }
    pthread_mutex_unlock(&g_mu);
    make_primitive(k, tmp); /* outside the lock: creation takes milliseconds */
    pthread_mutex_lock(&g_mu);
    int slot = -1;
    for (int i = 0; i < CACHE_CAP; i++)
        if (g_cache[i].used && key_eq(&g_cache[i].key, k)) { /* another thread made it meanwhile */
            if (tmp->prim) dnnl_primitive_destroy(tmp->prim);
            g_cache[i].refs++;
            g_cache[i].tick = ++g_tick;
            pthread_mutex_unlock(&g_mu);
            return i;
        }
    for (int i = 0; i < CACHE_CAP; i++)
        if (!g_cache[i].used) {
            slot = i;
            break;
        }
    if (slot < 0)
        for (int i = 0; i < CACHE_CAP; i++)
            if (!g_cache[i].refs && (slot < 0 || g_cache[i].tick < g_cache[slot].tick)) slot = i;
    if (slot >= 0) {
        if (g_cache[slot].prim) dnnl_primitive_destroy(g_cache[slot].prim);
        g_cache[slot] = *tmp;
        g_cache[slot].used = 1;
        g_cache[slot].refs = 1;
        g_cache[slot].tick = ++g_tick;
    }
    pthread_mutex_unlock(&g_mu);
    return slot;
}

static void cache_put(int slot) {
    if (slot < 0) return;
    pthread_mutex_lock(&g_mu);
    g_cache[slot].refs--;
    pthread_mutex_unlock(&g_mu);
}

int cl_gemm_cache_count(void) {
    int n = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < CACHE_CAP; i++) n += g_cache[i].used;
    pthread_mutex_unlock(&g_mu);
    return n;
}

static mm_thread *thread_state(void) {
    mm_thread *t = pthread_getspecific(g_tls);
    if (t) return t;
    t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (dnnl_stream_create(&t->stream, g_engine, dnnl_stream_default_flags) != dnnl_success ||
        pthread_setspecific(g_tls, t)) {
        thread_free(t);
        return NULL;
    }
    return t;
}

/* A thread's buffer *buf (*cap bytes) grown to at least need bytes, 64-aligned (its old contents dropped); -1 when
 * out of memory (the buffer as it was). */
static int grow(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    void *p = aligned_alloc(64, (need + 63) & ~(size_t)63);
    if (!p) return -1;
    free(*buf);
    *buf = p;
    *cap = need;
    return 0;
}

/* Runs e on this thread (M and K the call's, for a run-time key); 0 on success. */
static int execute(const mm_entry *e, int M, int K, const void *A, const void *B, float *C) {
    mm_thread *t = thread_state();
    if (!t) return -1;
    dnnl_memory_desc_t ma = e->md_a, mb = e->md_b, mc = e->md_c;
    if (e->key.rt && make_mds(&e->key, M, K, &ma, &mb, &mc)) return -1;
    if (grow(&t->scratch, &t->cap, e->scratch)) return -1;
    if (e->key.pack) {
        if (grow(&t->packed, &t->packed_cap, e->bytes)) return -1;
        pack_b(e, t->packed, B, K, e->key.N, e->key.ldb);
        B = t->packed;
        atomic_fetch_add(&g_packed, 1);
    }
    dnnl_memory_t m[4] = {NULL, NULL, NULL, NULL};
    int ok = dnnl_memory_create(&m[0], &ma, g_engine, (void *)A) == dnnl_success &&
             dnnl_memory_create(&m[1], &mb, g_engine, (void *)B) == dnnl_success &&
             dnnl_memory_create(&m[2], &mc, g_engine, C) == dnnl_success &&
             (!e->scratch || dnnl_memory_create(&m[3], &e->md_s, g_engine, t->scratch) == dnnl_success);
    if (ok) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]},
                                   {DNNL_ARG_SCRATCHPAD, m[3]}};
        ok = dnnl_primitive_execute(e->prim, t->stream, e->scratch ? 4 : 3, args) == dnnl_success &&
             dnnl_stream_wait(t->stream) == dnnl_success;
    }
    for (int i = 0; i < 4; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    return ok ? 0 : -1;
}

/* Whether oneDNN runs at ISA want or above: its BF16 matmuls from AVX-512 core up (bf16 instructions from avx512_core_bf16,
 * emulated below that). */
static int isa_has(dnnl_cpu_isa_t want) {
    return ((unsigned)dnnl_get_effective_cpu_isa() & (unsigned)want) == (unsigned)want;
}
#endif

/* cl_gemm_matmul, with M and K at run time where rt. */
static int matmul(int rt, int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda, const void *B,
                  cl_dtype fb, int ldb, float beta, float *C, int ldc) {
#ifdef CL_HAVE_DNNL
    if (M <= 0 || N <= 0 || K <= 0) return -1;
    if ((fa != CL_F32 && fa != CL_BF16) || (fb != CL_F32 && fb != CL_BF16)) return -1;
    pthread_once(&g_once, init_once);
    if (!g_engine_ok) return -1;
    mm_key k = {ta != 0, tb != 0, rt ? 0 : M, N, rt ? 0 : K, lda, ldb, ldc, rt != 0, (int)fa, (int)fb, alpha, beta,
                want_pack(rt, tb, M, N, K, fa, fb)};
    mm_entry tmp;
    int slot = cache_get(&k, &tmp);
    if (k.pack && !(slot >= 0 ? g_cache[slot].prim : tmp.prim)) { /* a layout pack_b does not write (or too big): B as given */
        if (slot >= 0) cache_put(slot);
        k.pack = 0;
        slot = cache_get(&k, &tmp);
    }
    const mm_entry *e = slot >= 0 ? &g_cache[slot] : &tmp; /* the slot is not evicted while refs > 0 */
    int rc = e->prim ? execute(e, M, K, A, B, C) : -1;
    if (slot >= 0) cache_put(slot);
    else if (tmp.prim) dnnl_primitive_destroy(tmp.prim);
    return rc;
#else
    (void)rt, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)fa, (void)lda, (void)B, (void)fb,
        (void)ldb, (void)beta, (void)C, (void)ldc;
    return -1;
#endif
}

int cl_gemm_matmul(int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda, const void *B,
                   cl_dtype fb, int ldb, float beta, float *C, int ldc) {
    return matmul(0, ta, tb, M, N, K, alpha, A, fa, lda, B, fb, ldb, beta, C, ldc);
}

const char *cl_gemm_bf16_path(void) {
#ifdef CL_HAVE_DNNL
    if (!atomic_load(&g_force_widen) && strcmp(cl_gemm_backend(), "onednn") == 0 && isa_has(dnnl_cpu_isa_avx512_core))
        return "onednn matmul";
#endif
    return "widened to f32";
}

const char *cl_gemm_bf16_note(void) {
    if (strcmp(cl_gemm_bf16_path(), "onednn matmul"))
        return "note: --dtype bf16 on this CPU: no AVX-512 for oneDNN's BF16 matmul, so the products widen their operands to "
               "F32 and a step runs slower than --dtype fp32 (the same training, within rounding)";
#ifdef CL_HAVE_DNNL
    if (!isa_has(dnnl_cpu_isa_avx512_core_bf16))
        return "note: --dtype bf16 on this CPU: no bf16 instructions (AVX512_BF16 or AMX), so oneDNN emulates them on AVX-512 "
               "and a step may run slower than --dtype fp32 (the same training, within rounding)";
#endif
    return NULL;
}

/* ---- a long K in pieces ------------------------------------------------------
 *
 * Given the whole of a long K at once, oneDNN 2.6's BF16 matmul streams all of B past every block of A's rows: the
 * LM head's input gradient (dlogits [N, V] times wte [V, C], K = V = 50304, B 77 MB) ran 530 GFLOP/s on a Zen 5
 * where the same product in 4096-row pieces of K, each adding into C, ran 620-700 (docs/PERFORMANCE.md). So a
 * BF16 product with B [K, N] row-major (tb 0) past PACK_CAP and K of two pieces or more runs piece by piece, the
 * first with the caller's beta, the rest adding (beta 1): F32 accumulation as before, in another order (its last
 * bits differ from one call's; the same on every run, layout and thread count it already was). */
enum { KSPLIT = 4096 };

static int want_ksplit(int rt, int tb, int N, int K) {
#ifdef CL_HAVE_DNNL
    pthread_once(&g_once, init_once); /* CLEAVE_BF16_KSPLIT */
#endif
    return atomic_load(&g_ksplit) && !rt && !tb && K >= 2 * KSPLIT && (size_t)K * (size_t)N * 2 > PACK_CAP;
}

/* cl_gemm_ex and cl_gemm_ex_rows (rt: M and K at run time). */
static void gemm_ex(int rt, int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda, const void *B,
                    cl_dtype fb, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (fa == CL_F32 && fb == CL_F32) {
        cl_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (K <= 0) { /* C = beta C; beta 0 overwrites (NaN in C does not survive) */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float *c = C + (int64_t)i * ldc + j;
                *c = beta == 0.0f ? 0.0f : beta * *c;
            }
        return;
    }
    int mm = fa == CL_BF16 && fb == CL_BF16 && !strcmp(cl_gemm_bf16_path(), "onednn matmul");
    if (mm && want_ksplit(rt, tb, N, K)) {
        const uint16_t *a = A, *b = B;
        for (int k0 = 0; k0 < K; k0 += KSPLIT) {
            int kk = K - k0 < KSPLIT ? K - k0 : KSPLIT;
            const uint16_t *ak = ta ? a + (int64_t)k0 * lda : a + k0, *bk = b + (int64_t)k0 * ldb;
            float bt = k0 ? 1.0f : beta;
            if (matmul(0, ta, 0, M, N, kk, alpha, ak, fa, lda, bk, fb, ldb, bt, C, ldc))
                gemm_widened(ta, 0, M, N, kk, alpha, ak, fa, lda, bk, fb, ldb, bt, C, ldc);
        }
        return;
    }
    if (mm && matmul(rt, ta, tb, M, N, K, alpha, A, fa, lda, B, fb, ldb, beta, C, ldc) == 0) return;
    gemm_widened(ta, tb, M, N, K, alpha, A, fa, lda, B, fb, ldb, beta, C, ldc);
}

void cl_gemm_ex(int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda, const void *B,
                cl_dtype fb, int ldb, float beta, float *C, int ldc) {
    gemm_ex(0, ta, tb, M, N, K, alpha, A, fa, lda, B, fb, ldb, beta, C, ldc);
}

void cl_gemm_ex_rows(int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda, const void *B,
                     cl_dtype fb, int ldb, float beta, float *C, int ldc) {
    gemm_ex(1, ta, tb, M, N, K, alpha, A, fa, lda, B, fb, ldb, beta, C, ldc);
}
