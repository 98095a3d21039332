/* Blockwise causal attention with an online softmax (FlashAttention's
 * algorithm: Dao et al. 2022, and FlashAttention-2's loop order), for CPUs.
 *
 * Same contract as cl_attention_forward/backward (attention.c: qkv[B,T,3C],
 * head h on channels [h*hs, (h+1)*hs) of q, k and v, out[B,T,C]) but without
 * the B x NH x T x T buffer: the forward keeps, besides out, only the
 * log-sum-exp of each score row, lse[B,NH,T]; the backward recomputes the
 * scores block by block from q, k and lse, with D_t = sum_i dout[t,i] out[t,i]
 * standing in for the softmax backward's row sums. Blocks above the causal
 * diagonal are never touched.
 *
 * Blocks: BR = 64 query rows x BC = 128 key columns in the backward, x
 * FBC = 256 in the forward (its one score tile, 64 KiB, on the stack). At
 * hs = 64 a backward step's operands (a q block, a k and a v block, two
 * 32 KiB tiles, the gradient rows) take about 150 KiB: in L2 (1 MiB a core
 * on this Zen 5, 256 KiB and more on AVX2 parts), one tile at a time in L1
 * (48 KiB). Every product is a cl_gemm on tiles (single-threaded inside the
 * parallel loop, as attention.c's are); the softmax rows run through cl_exp8
 * on the AVX2 path. Measured on the Zen 5 (bench/flash_attention, one
 * thread, T = 1024, today / blockwise, forward + backward, 2-4 rounds each
 * under load 8-11): 64 x 64 0.84-0.87 (oneDNN's per-call cost on small tiles
 * shows), 64 x 128 1.00, 128 x 64 0.95-0.97, 128 x 128 0.99-1.10, 64 x 256
 * 1.03-1.08; the forward alone at 64 x 256 1.06-1.08 against 0.97-1.00 at
 * 64 x 128, the backward best at 64 x 128. About 70% of the time is in the
 * GEMMs, 12% in exp. FLASH_BR, FLASH_BC and FLASH_FBC override the sizes
 * (benchmarks).
 *
 * Threads and bits: the forward spreads (b, h, query block) tasks over the
 * team, the backward (b, kv head) tasks (a head's key gradients gather from
 * all its query blocks); each task runs on one thread in a fixed order, so
 * the bits do not depend on the thread count. Backward adds into dqkv.
 *
 * One head's problem is a flash_head: q, k, v pointers and strides, Tq query
 * rows, Tk key rows, an offset qoff. The chunk entries (kernels.h) build it
 * for
 *  - grouped-query heads: NKV kv heads dividing NH, qkv rows [q | k | v] of
 *    C + 2 Ckv (Ckv = NKV hs, the block's layout); head h reads k and v of kv
 *    head h / (NH / NKV); the backward's tasks are (b, kv head), the group's
 *    query heads in order inside the task, so that their dk, dv sums stay on
 *    one thread;
 *  - context parallelism: the query chunk and the key/value chunk from
 *    different buffers with a causal offset qoff (query t sees key j iff
 *    j <= t + qoff: the query chunk's first position minus the key chunk's).
 *    A key chunk wholly in the future gives no blocks. The forward with
 *    accumulate starts each row from the (out, lse) there, as the softmax
 *    state (max = lse, sum = 1, out), so the key chunks of a ring go through
 *    one after the other; each chunk pair's backward, given the final out and
 *    lse, adds its own share of dq, dk, dv (nothing to merge).
 * cl_flash_forward / cl_flash_backward are the chunk entries with one qkv
 * [B,T,C + 2 Ckv] and qoff = 0 (GPT's block passes NKV = NH, Llama's its
 * kv heads). */
#include "cleave/kernels.h"
#include "kernels/simd.h"

#include "cleave/core.h"

#include <math.h>
#include <string.h>

#ifndef FLASH_BR
#define FLASH_BR 64
#endif
#ifndef FLASH_BC
#define FLASH_BC 128
#endif
#ifndef FLASH_FBC
#define FLASH_FBC 256
#endif
enum { BR = FLASH_BR, BC = FLASH_BC, FBC = FLASH_FBC };

typedef struct {
    const float *q, *k, *v; /* row 0 of this head's q, k and v */
    int ldq, ldkv;          /* row strides of q and of k, v */
    float *o;               /* row 0 of the output (forward) */
    const float *out, *dout; /* row 0 of the output and its gradient (backward), stride ldo */
    float *dq, *dk, *dv;    /* gradients, strides ldq and ldkv (backward) */
    int ldo;
    float *lse;             /* Tq floats (forward: written) */
    const float *lse_in;    /* the same (backward: read) */
    int Tq, Tk, qoff, hs;
    float scale;
} flash_head;

/* The backward's two tiles: rows min(BR, Tq), columns (the leading
 * dimension) min(BC, Tk), so a short sequence takes short tiles. */
static int tile_rows(int Tq) { return Tq < BR ? Tq : BR; }
static int tile_cols(int Tk) { return Tk < BC ? Tk : BC; }

int64_t cl_flash_scratch_floats(int B, int T, int C, int NH) {
    (void)C;
    return (int64_t)B * NH * 2 * tile_rows(T) * tile_cols(T);
}

/* Keys visible to query row t: [0, kend(t)), clamped to [0, Tk]. */
static int kend(const flash_head *f, int t) {
    int64_t e = (int64_t)t + f->qoff + 1;
    return e < 0 ? 0 : e > f->Tk ? f->Tk : (int)e;
}

/* p[0..n) = exp(s[0..n) - m) (n may be 0); returns their sum. */
static double exp_row(float *p, const float *s, int n, float m) {
    double sum = 0;
    for (int j = 0; j < n; j++) sum += (p[j] = expf(s[j] - m));
    return sum;
}
#ifdef CL_SIMD_X86
CL_AVX2 static double exp_row_avx2(float *p, const float *s, int n, float m) {
    __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = cl_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(p + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    double sum = cl_hsum8(acc);
    for (; j < n; j++) sum += (p[j] = expf(s[j] - m));
    return sum;
}
CL_AVX2 static float max_row_avx2(const float *s, int n, float m) {
    int j = 0;
    if (n >= 8) {
        __m256 vm = _mm256_loadu_ps(s);
        for (j = 8; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + j));
        float h = cl_hmax8(vm);
        m = h > m ? h : m;
    }
    for (; j < n; j++) m = s[j] > m ? s[j] : m;
    return m;
}
#endif
static float max_row(const float *s, int n, float m, int vec) {
#ifdef CL_SIMD_X86
    if (vec == CL_SIMD_AVX2) return max_row_avx2(s, n, m);
#endif
    (void)vec;
    for (int j = 0; j < n; j++) m = s[j] > m ? s[j] : m;
    return m;
}
static double exp_row_v(float *p, const float *s, int n, float m, int vec) {
#ifdef CL_SIMD_X86
    if (vec == CL_SIMD_AVX2) return exp_row_avx2(p, s, n, m);
#endif
    (void)vec;
    return exp_row(p, s, n, m);
}

/* Query rows [r0, r1) of one head: out rows and lse, the online softmax over
 * the visible key blocks. The output rows accumulate in place. accumulate:
 * the rows start from the (out, lse) already there, the softmax state
 * (max lse, sum 1, out), so the result is that of all keys seen so far. */
static void block_forward(const flash_head *f, int r0, int r1, int accumulate, int vec) {
    float s[BR * FBC];
    float m[BR];
    double l[BR];
    int nr = r1 - r0, ke = kend(f, r1 - 1), hs = f->hs;
    for (int i = 0; i < nr; i++) {
        int keep = accumulate && f->lse[r0 + i] != -INFINITY;
        m[i] = keep ? f->lse[r0 + i] : -INFINITY;
        l[i] = keep ? 1.0 : 0.0;
        if (!keep) memset(f->o + (int64_t)(r0 + i) * f->ldo, 0, (size_t)hs * sizeof(float));
    }
    for (int c0 = 0; c0 < ke; c0 += FBC) {
        int nc = ke - c0 < FBC ? ke - c0 : FBC;
        cl_gemm(0, 1, nr, nc, hs, f->scale, f->q + (int64_t)r0 * f->ldq, f->ldq, f->k + (int64_t)c0 * f->ldkv, f->ldkv,
                0.0f, s, FBC);
        for (int i = 0; i < nr; i++) {
            float *row = s + i * FBC;
            int n = kend(f, r0 + i) - c0;
            n = n < 0 ? 0 : n > nc ? nc : n;
            float mx = max_row(row, n, m[i], vec);
            if (mx == -INFINITY) { /* nothing visible yet */
                memset(row, 0, (size_t)nc * sizeof *row);
                continue;
            }
            double sum = exp_row_v(row, row, n, mx, vec);
            memset(row + n, 0, (size_t)(nc - n) * sizeof *row);
            if (mx != m[i]) {
                float corr = expf(m[i] - mx);
                float *o = f->o + (int64_t)(r0 + i) * f->ldo;
                for (int c = 0; c < hs; c++) o[c] *= corr;
                l[i] *= corr;
                m[i] = mx;
            }
            l[i] += sum;
        }
        cl_gemm(0, 0, nr, hs, nc, 1.0f, s, FBC, f->v + (int64_t)c0 * f->ldkv, f->ldkv, 1.0f, f->o + (int64_t)r0 * f->ldo,
                f->ldo);
    }
    for (int i = 0; i < nr; i++) {
        float *o = f->o + (int64_t)(r0 + i) * f->ldo;
        if (l[i] > 0) {
            float inv = (float)(1.0 / l[i]);
            for (int c = 0; c < hs; c++) o[c] *= inv;
            f->lse[r0 + i] = (float)((double)m[i] + log(l[i]));
        } else {
            f->lse[r0 + i] = -INFINITY; /* no visible key: out 0 */
        }
    }
}

/* One head's backward, query blocks in order; p and ds are tiles of
 * tile_rows(Tq) rows and ldp = tile_cols(Tk) columns. */
static void head_backward(const flash_head *f, float *p, float *ds, int ldp, int vec) {
    int hs = f->hs;
    for (int r0 = 0; r0 < f->Tq; r0 += BR) {
        int r1 = r0 + BR < f->Tq ? r0 + BR : f->Tq, nr = r1 - r0, ke = kend(f, r1 - 1);
        float D[BR];
        for (int i = 0; i < nr; i++) {
            const float *d = f->dout + (int64_t)(r0 + i) * f->ldo, *o = f->out + (int64_t)(r0 + i) * f->ldo;
            double dot = 0;
            for (int c = 0; c < hs; c++) dot += (double)d[c] * o[c];
            D[i] = (float)dot;
        }
        const float *q = f->q + (int64_t)r0 * f->ldq, *dO = f->dout + (int64_t)r0 * f->ldo;
        float *dq = f->dq + (int64_t)r0 * f->ldq;
        for (int c0 = 0; c0 < ke; c0 += BC) {
            int nc = ke - c0 < BC ? ke - c0 : BC;
            const float *k = f->k + (int64_t)c0 * f->ldkv, *v = f->v + (int64_t)c0 * f->ldkv;
            /* p = exp(scale q k^T - lse), 0 where masked */
            cl_gemm(0, 1, nr, nc, hs, f->scale, q, f->ldq, k, f->ldkv, 0.0f, p, ldp);
            for (int i = 0; i < nr; i++) {
                float *row = p + i * ldp;
                int n = kend(f, r0 + i) - c0;
                n = n < 0 ? 0 : n > nc ? nc : n;
                float lse = f->lse_in[r0 + i];
                if (lse == -INFINITY) n = 0;
                exp_row_v(row, row, n, lse, vec);
                memset(row + n, 0, (size_t)(nc - n) * sizeof *row);
            }
            /* dv += p^T dout */
            cl_gemm(1, 0, nc, hs, nr, 1.0f, p, ldp, dO, f->ldo, 1.0f, f->dv + (int64_t)c0 * f->ldkv, f->ldkv);
            /* ds = p (dout v^T - D) */
            cl_gemm(0, 1, nr, nc, hs, 1.0f, dO, f->ldo, v, f->ldkv, 0.0f, ds, ldp);
            for (int i = 0; i < nr; i++) {
                float *dr = ds + i * ldp;
                const float *pr = p + i * ldp;
                float Di = D[i];
                for (int j = 0; j < nc; j++) dr[j] = pr[j] * (dr[j] - Di);
            }
            /* scores = scale q k^T: dq += scale ds k, dk += scale ds^T q */
            cl_gemm(0, 0, nr, hs, nc, f->scale, ds, ldp, k, f->ldkv, 1.0f, dq, f->ldq);
            cl_gemm(1, 0, nc, hs, nr, f->scale, ds, ldp, q, f->ldq, 1.0f, f->dk + (int64_t)c0 * f->ldkv, f->ldkv);
        }
    }
}

/* Head (b, h) of queries from qkv_q[B,Tq,W] against keys and values of kv
 * head h / (NH / NKV) from qkv_kv[B,Tk,W], W = C + 2 Ckv, query t seeing key
 * j iff j <= t + qoff. */
static flash_head head_at(const float *qkv_q, const float *qkv_kv, int b, int h, int Tq, int Tk, int qoff, int C,
                          int NH, int NKV) {
    int hs = C / NH, Ckv = NKV * hs, W = C + 2 * Ckv, g = h / (NH / NKV);
    flash_head f = {0};
    f.q = qkv_q + (int64_t)b * Tq * W + (int64_t)h * hs;
    f.k = qkv_kv + (int64_t)b * Tk * W + C + (int64_t)g * hs;
    f.v = f.k + Ckv;
    f.ldq = f.ldkv = W;
    f.ldo = C;
    f.Tq = Tq;
    f.Tk = Tk;
    f.qoff = qoff;
    f.hs = hs;
    f.scale = (float)(1.0 / sqrt((double)hs));
    return f;
}

void cl_flash_forward_chunk(float *out, float *lse, const float *qkv_q, const float *qkv_kv, int B, int Tq, int Tk,
                            int qoff, int C, int NH, int NKV, int accumulate) {
    CL_ASSERT(NH > 0 && C % NH == 0 && NKV > 0 && NH % NKV == 0 && Tq >= 0 && Tk >= 0);
    int nq = (Tq + BR - 1) / BR, vec = cl_simd();
    int64_t tasks = (int64_t)B * NH * nq;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; task++) {
        /* the longest query blocks (last) first: better balance under the causal triangle */
        int qb = nq - 1 - (int)(task % nq);
        int bh = (int)(task / nq), b = bh / NH, h = bh % NH;
        flash_head f = head_at(qkv_q, qkv_kv, b, h, Tq, Tk, qoff, C, NH, NKV);
        f.o = out + (int64_t)b * Tq * C + (int64_t)h * f.hs;
        f.lse = lse + (int64_t)bh * Tq;
        int r0 = qb * BR, r1 = r0 + BR < Tq ? r0 + BR : Tq;
        block_forward(&f, r0, r1, accumulate, vec);
    }
}

void cl_flash_backward_chunk(float *dqkv_q, float *dqkv_kv, float *scratch, const float *dout, const float *qkv_q,
                             const float *qkv_kv, const float *out, const float *lse, int B, int Tq, int Tk, int qoff,
                             int C, int NH, int NKV) {
    CL_ASSERT(NH > 0 && C % NH == 0 && NKV > 0 && NH % NKV == 0 && Tq >= 0 && Tk >= 0);
    int vec = cl_simd(), G = NH / NKV, ldp = tile_cols(Tk);
    int64_t tile = (int64_t)tile_rows(Tq) * ldp;
    /* tasks (b, kv head): the group's query heads in order on one thread, their dk and dv sums with them */
#pragma omp parallel for schedule(dynamic, 1)
    for (int bg = 0; bg < B * NKV; bg++) {
        int b = bg / NKV, g = bg % NKV;
        float *p = scratch + (int64_t)bg * 2 * tile;
        for (int h = g * G; h < (g + 1) * G; h++) {
            flash_head f = head_at(qkv_q, qkv_kv, b, h, Tq, Tk, qoff, C, NH, NKV);
            int64_t ooff = (int64_t)b * Tq * C + (int64_t)h * f.hs;
            f.out = out + ooff;
            f.dout = dout + ooff;
            f.dq = dqkv_q + (f.q - qkv_q);
            f.dk = dqkv_kv + (f.k - qkv_kv);
            f.dv = dqkv_kv + (f.v - qkv_kv);
            f.lse_in = lse + ((int64_t)b * NH + h) * Tq;
            head_backward(&f, p, p + tile, ldp, vec);
        }
    }
}

void cl_flash_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV) {
    cl_flash_forward_chunk(out, lse, qkv, qkv, B, T, T, 0, C, NH, NKV, 0);
}

void cl_flash_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                       const float *lse, int B, int T, int C, int NH, int NKV) {
    cl_flash_backward_chunk(dqkv, dqkv, scratch, dout, qkv, qkv, out, lse, B, T, T, 0, C, NH, NKV);
}
