/* Context parallelism inside a model part: attention across the ranks that
 * share each sequence, and the positions of their tokens in it.
 *
 * Why here: GPT's block calls cl_nn_attention_forward / _backward where it
 * called the blockwise kernels, and the embedding cl_nn_cp_positions_*; at
 * cp = 1 (no cl_model_set_cp) they are exactly the old calls, so the blocks
 * change at one call site each and one rank keeps its bits.
 *
 * The split (Megatron-LM's, balanced under the causal mask): the sequence of
 * T tokens is cut into 2 cp chunks of c = T / (2 cp); context rank i holds
 * chunks i and 2 cp - 1 - i, as its local rows [0, c) and [c, 2c) (the data
 * addressing in src/train/batch.c gives it those tokens and targets). The
 * model part is sized for Tl = 2c tokens.
 *
 * Positions: GPT's wpe rows are added at each token's place in the whole
 * sequence; Llama's rotary tables are rebuilt by cl_model_set_cp so that
 * local row t holds the rotation of its place (RoPE then runs as at cp 1).
 *
 * Attention, a ring of N = cp steps: at step s a rank holds the qkv rows
 * of rank (rank - s) mod N, and while the next rows travel (isend to the
 * next rank, irecv from the previous) each local query chunk jq attends to
 * that rank's chunks j <= jq through the chunk kernels (flash.c, causal
 * offset (jq - j) c), the online softmax carried over the steps (the lse
 * state moved between the block's [B, NHl, Tl] and one chunk's [NHl, c]).
 * The backward passes the rows round again with the running sums of their
 * key and value gradients; after N steps every owner holds its own sums
 * and adds them into dqkv (dq is added locally as it goes).
 *
 * All-to-all (`--cp-comm a2a`, DeepSpeed Ulysses): the split of the
 * sequence is traded for a split of the heads. One all-to-all sends rank g
 * the columns of head group g (q's C/N, k's and v's K/N) of this rank's
 * rows; rank g places the rows it receives at their tokens' places in the
 * whole sequence and runs the one-rank blockwise kernel over all T tokens
 * for its NH/N query and NKV/N key-value heads; a second all-to-all
 * returns each rank its rows of every group's output. Each head's
 * arithmetic is the one-rank kernel's over the whole sequence, so the
 * attention's bits are those of cp = 1. The lse is kept in the gathered
 * layout [B, NH/N, T] (as many floats as [B, NH, T/N]). The backward
 * gathers qkv, the output and its gradient the same way, runs the one-rank
 * backward and returns dqkv's columns to their rows' owners. N must divide
 * the part's query and key-value heads (cl_train_describe refuses the
 * rest); the data layout (chunks i and 2N-1-i) and positions are the
 * ring's.
 *
 * Invariants: the buffers live on the part's device as workspace
 * (CL_MEM_WORKSPACE), cl_cp_buffer_floats for the part's capacity B (the
 * ring: 4 B Tl W floats plus NHl c; all-to-all: 4 B Tl W + 2 B Tl Cl plus
 * the whole sequence's backward tiles; cl_rank_extra_bytes counts the
 * same); every context rank runs the same units on the same
 * micro-batches, so the messages (ring: tag 0 rows, 1 gradient sums, in
 * order per pair; all-to-all: collectives in one order) match up. */
#include "nn/cp.h"
#include "nn/model_impl.h"

#include "cleave/kernels.h"

#include <stdlib.h>
#include <string.h>

struct cl_nn_cp {
    cl_comm *comm;
    int rank, size;
    cl_cp_comm how;
    float *kv;   /* two [B, Tl, W] buffers: the ring's receive and the rows in use; a2a: the exchange's send and receive */
    float *dkv;  /* two more: the ring's key and value gradients' running sums; a2a: gathered qkv and its gradient */
    float *lse;  /* the ring: one chunk's lse, NHl x c; a2a: the gathered output and its gradient, 2 B Tl Cl, then the
                  * whole sequence's backward tiles */
    int64_t n;   /* floats of one rank's [B, Tl, W] at capacity */
    cl_trace *trace; /* the ring's transfers recorded here (cl_model_cp_trace; NULL: not) */
    int trace_rank;
};

/* One ring exchange in flight: its send (0) and receive (1), each posted at post[i]. */
typedef struct {
    cl_request *rq[2];
    double post[2];
} ring_xfer;

/* The all-to-all's extra floats (beside its 4 B Tl W): the gathered output and its gradient, the backward tiles. */
static int64_t a2a_floats(const cl_model_desc *d, int B, int n) {
    int NKVl = (int)(d->kv_channels_local / (d->channels_local / d->heads_local));
    return 2 * (int64_t)B * d->T * d->channels_local +
           cl_flash_scratch_floats(B, d->T * n, (int)(d->channels_local / n), NKVl / n);
}

int64_t cl_cp_buffer_floats(const cl_model_desc *d, int B, int n, cl_cp_comm how) {
    if (n <= 1) return 0;
    int64_t W = d->channels_local + 2 * d->kv_channels_local, four = 4 * (int64_t)B * d->T * W;
    return four + (how == CL_CP_A2A ? a2a_floats(d, B, n) : (int64_t)d->heads_local * (d->T / 2));
}

/* Global chunk of local half h (0: rows [0, c), 1: rows [c, 2c)) of context rank r of n. */
static int chunk_of(int r, int n, int h) { return h ? 2 * n - 1 - r : r; }

int cl_nn_cp_size(const cl_model *m) { return m->cp ? m->cp->size : 1; }

int64_t cl_nn_cp_position(const cl_model *m, int64_t t, int Tl) {
    if (!m->cp) return t;
    int c = Tl / 2, h = (int)(t / c);
    return (int64_t)chunk_of(m->cp->rank, m->cp->size, h) * c + t % c;
}

/* Llama: the part's rotary tables rebuilt so that local row t holds the
 * rotation of its place in the whole sequence (rope_forward then runs at
 * pos0 0 as before). Each row is cl_rope_table's own for that position. */
static cl_status cp_rope_tables(cl_model *m) {
    const cl_model_desc *d = m->desc;
    int Tl = d->T, T = Tl * m->cp->size, hd = d->cfg.channels / d->cfg.heads, half = hd / 2;
    CL_ASSERT(m->sizes.tables == (int64_t)Tl * hd);
    float *whole = malloc((size_t)2 * T * half * sizeof *whole), *loc = malloc((size_t)2 * Tl * half * sizeof *loc);
    cl_status s = whole && loc ? CL_OK : cl_error(CL_ERR_OOM, "cannot allocate the rotary tables");
    if (!s) s = cl_rope_table(whole, whole + (size_t)T * half, T, hd, d->cfg.rope_theta, NULL);
    for (int t = 0; !s && t < Tl; t++) {
        int64_t p = cl_nn_cp_position(m, t, Tl);
        memcpy(loc + (size_t)t * half, whole + p * half, (size_t)half * sizeof *loc);
        memcpy(loc + ((size_t)Tl + t) * half, whole + ((int64_t)T + p) * half, (size_t)half * sizeof *loc);
    }
    if (!s) cl_device_copy_from_host(m->dev, m->rope, loc, (size_t)2 * Tl * half * sizeof *loc);
    free(whole);
    free(loc);
    return s;
}

cl_status cl_model_set_cp(cl_model *m, cl_comm *comm, cl_cp_comm how) {
    const cl_model_desc *d = m->desc;
    int n = cl_comm_size(comm);
    if (n <= 1) return CL_OK;
    if (d->T % 2) /* cl_train_describe refused the families without sequences and T not cut in 2 n chunks */
        return cl_error(CL_ERR_INVALID, "context parallelism over %d ranks needs an even local length (T = %d)", n, d->T);
    int hs = (int)(d->channels_local / d->heads_local), NKVl = (int)(d->kv_channels_local / hs);
    if (how == CL_CP_A2A && (d->heads_local % n || NKVl % n)) /* cl_train_describe refused it with the valid sizes */
        return cl_error(CL_ERR_INVALID, "--cp-comm a2a over %d ranks needs heads (%d) and key-value heads (%d) that divide by it", n,
                        d->heads_local, NKVl);
    struct cl_nn_cp *cp = calloc(1, sizeof *cp);
    if (!cp) return cl_error(CL_ERR_OOM, "cannot allocate the context-parallel state");
    cp->comm = comm;
    cp->rank = cl_comm_rank(comm);
    cp->size = n;
    cp->how = how;
    int64_t W = d->channels_local + 2 * (int64_t)d->kv_channels_local;
    cp->n = (int64_t)m->B * d->T * W;
    int64_t rest = cl_cp_buffer_floats(d, m->B, n, how) - 4 * cp->n;
    cl_status s = cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)(cp->n * 2), &cp->kv);
    if (!s) s = cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)(cp->n * 2), &cp->dkv);
    if (!s) s = cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)rest, &cp->lse);
    m->cp = cp;
    if (!s && m->rope) s = cp_rope_tables(m);
    if (s) cl_nn_cp_free(m);
    return s;
}

void cl_model_cp_trace(cl_model *m, cl_trace *trace, int rank) {
    if (!m->cp || m->cp->how != CL_CP_RING) return;
    m->cp->trace = trace;
    m->cp->trace_rank = rank;
}

void cl_nn_cp_free(cl_model *m) {
    if (!m->cp) return;
    cl_device_free(m->dev, m->cp->kv);
    cl_device_free(m->dev, m->cp->dkv);
    cl_device_free(m->dev, m->cp->lse);
    free(m->cp);
    m->cp = NULL;
}

void cl_nn_cp_positions_forward(const cl_model *m, float *out, const float *wpe, int64_t rows, int64_t row0, int Tl, int64_t C) {
    for (int64_t i = 0; i < rows; i++) {
        float *o = out + i * C;
        const float *p = wpe + cl_nn_cp_position(m, (row0 + i) % Tl, Tl) * C;
        for (int64_t k = 0; k < C; k++) o[k] += p[k];
    }
}

void cl_nn_cp_positions_backward(const cl_model *m, float *dwpe, const float *dout, int B, int Tl, int64_t C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) {
            const float *g = dout + ((int64_t)b * Tl + t) * C;
            float *p = dwpe + cl_nn_cp_position(m, t, Tl) * C;
            for (int64_t k = 0; k < C; k++) p[k] += g[k];
        }
}

/* One ring exchange: buf (count floats) to the next rank, into rbuf from the previous one (tag: 0 rows, 1 gradients). */
static cl_status ring_post(struct cl_nn_cp *cp, const float *buf, float *rbuf, size_t count, int tag, ring_xfer *x) {
    int next = (cp->rank + 1) % cp->size, prev = (cp->rank + cp->size - 1) % cp->size;
    if (cp->trace) x->post[0] = cl_now();
    CL_TRY(cl_comm_isend_n(cp->comm, buf, count, CL_F32, next, tag, &x->rq[0]));
    if (cp->trace) x->post[1] = cl_now();
    return cl_comm_irecv_n(cp->comm, rbuf, count, CL_F32, prev, tag, &x->rq[1]);
}

/* The receive first: on MPI a receive is matched only in its test or wait, and a large send completes only
 * once the peer's receive is matched, so two ranks each waiting on its send first would wait forever. With a
 * trace, each transfer becomes an event from its post to its completion, waited from the wait's start. */
static cl_status ring_wait(struct cl_nn_cp *cp, ring_xfer *x) {
    double w0 = cp->trace ? cl_now() : 0;
    cl_status r = cl_comm_wait(cp->comm, x->rq[1]);
    double w1 = cp->trace ? cl_now() : 0;
    cl_status s = cl_comm_wait(cp->comm, x->rq[0]);
    x->rq[0] = x->rq[1] = NULL;
    if (cp->trace && !r && !s) {
        double w2 = cl_now();
        cl_trace_event e[2] = {
            {.rank = cp->trace_rank, .track = CL_TRACK_COMM, .kind = CL_ACT_RING_SEND, .t0 = x->post[0], .t1 = w2, .wait = w2 - w1},
            {.rank = cp->trace_rank, .track = CL_TRACK_COMM, .kind = CL_ACT_RING_RECV, .t0 = x->post[1], .t1 = w1, .wait = w1 - w0}};
        for (int i = 0; i < 2 && !s; i++) s = cl_trace_add(cp->trace, &e[i]);
    }
    return r ? r : s;
}

/* The lse rows of (b, local half hq): from the block's [B, NH, T] into the kernel's one chunk [NH, c], and back. */
static void lse_to_chunk(float *chunk, const float *lse, int b, int hq, int NH, int T) {
    int c = T / 2;
    for (int h = 0; h < NH; h++)
        memcpy(chunk + (int64_t)h * c, lse + ((int64_t)b * NH + h) * T + (int64_t)hq * c, (size_t)c * sizeof(float));
}
static void lse_from_chunk(float *lse, const float *chunk, int b, int hq, int NH, int T) {
    int c = T / 2;
    for (int h = 0; h < NH; h++)
        memcpy(lse + ((int64_t)b * NH + h) * T + (int64_t)hq * c, chunk + (int64_t)h * c, (size_t)c * sizeof(float));
}

/* ---- all-to-all (Ulysses) ------------------------------------------------ */

/* Head group g's columns of a row [q (C) | k (K) | v (K)]: q's C/n from g C/n, k's and v's K/n (K = 0: a row of C). */
static void group_cols(float *dst, const float *row, int g, int n, int C, int K) {
    int cq = C / n, ck = K / n;
    memcpy(dst, row + (int64_t)g * cq, (size_t)cq * sizeof(float));
    if (!K) return;
    memcpy(dst + cq, row + C + (int64_t)g * ck, (size_t)ck * sizeof(float));
    memcpy(dst + cq + ck, row + C + K + (int64_t)g * ck, (size_t)ck * sizeof(float));
}

/* The inverse: src's columns into head group g's places of row, written or added. */
static void group_cols_back(float *row, const float *src, int g, int n, int C, int K, int add) {
    int cq = C / n, ck = K / n;
    float *at[3] = {row + (int64_t)g * cq, row + C + (int64_t)g * ck, row + C + K + (int64_t)g * ck};
    int len[3] = {cq, K ? ck : 0, K ? ck : 0};
    for (int p = 0, o = 0; p < 3; o += len[p], p++)
        for (int k = 0; k < len[p]; k++) at[p][k] = add ? at[p][k] + src[o + k] : src[o + k];
}

/* Row of the whole sequence of local row t (of Tl) of context rank r (of n). */
static int64_t whole_row(int r, int n, int t, int Tl) {
    int c = Tl / 2;
    return (int64_t)chunk_of(r, n, t / c) * c + t % c;
}

/* This rank's rows [B, Tl, C + 2K] -> its head group's columns of every rank's rows at their places in the whole
 * sequence, [B, n Tl, (C + 2K) / n], through send and recv (B Tl (C + 2K) floats each). */
static cl_status to_heads(struct cl_nn_cp *cp, float *out, const float *in, int B, int Tl, int C, int K, float *send, float *recv) {
    int n = cp->size, Wl = C + 2 * K, Wr = Wl / n, T = Tl * n;
    int64_t piece = (int64_t)B * Tl * Wr;
    for (int g = 0; g < n; g++)
        for (int64_t r = 0; r < (int64_t)B * Tl; r++) group_cols(send + g * piece + r * Wr, in + r * Wl, g, n, C, K);
    CL_TRY(cl_comm_alltoall(cp->comm, send, recv, (size_t)piece, CL_F32));
    for (int src = 0; src < n; src++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++)
                memcpy(out + ((int64_t)b * T + whole_row(src, n, t, Tl)) * Wr, recv + src * piece + ((int64_t)b * Tl + t) * Wr,
                       (size_t)Wr * sizeof(float));
    return CL_OK;
}

/* The inverse: this rank's head group's columns of the whole sequence back to each row's owner, written (add 0) or
 * added (add 1) into its rows [B, Tl, C + 2K]. */
static cl_status to_rows(struct cl_nn_cp *cp, float *out, const float *in, int B, int Tl, int C, int K, int add, float *send,
                         float *recv) {
    int n = cp->size, Wl = C + 2 * K, Wr = Wl / n, T = Tl * n;
    int64_t piece = (int64_t)B * Tl * Wr;
    for (int dst = 0; dst < n; dst++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++)
                memcpy(send + dst * piece + ((int64_t)b * Tl + t) * Wr, in + ((int64_t)b * T + whole_row(dst, n, t, Tl)) * Wr,
                       (size_t)Wr * sizeof(float));
    CL_TRY(cl_comm_alltoall(cp->comm, send, recv, (size_t)piece, CL_F32));
    for (int g = 0; g < n; g++)
        for (int64_t r = 0; r < (int64_t)B * Tl; r++) group_cols_back(out + r * Wl, recv + g * piece + r * Wr, g, n, C, K, add);
    return CL_OK;
}

static cl_status a2a_forward(const cl_model *m, float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV) {
    struct cl_nn_cp *cp = m->cp;
    int n = cp->size, K = NKV * (C / NH);
    float *send = cp->kv, *recv = cp->kv + cp->n, *G = cp->dkv, *Og = cp->lse;
    CL_TRY(to_heads(cp, G, qkv, B, T, C, K, send, recv));
    cl_kern(m)->flash_forward(Og, lse, G, B, T * n, C / n, NH / n, NKV / n);
    return to_rows(cp, out, Og, B, T, C, 0, 0, send, recv);
}

static cl_status a2a_backward(const cl_model *m, float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                              int B, int T, int C, int NH, int NKV) {
    struct cl_nn_cp *cp = m->cp;
    int n = cp->size, K = NKV * (C / NH);
    int64_t rows = (int64_t)B * T;
    float *send = cp->kv, *recv = cp->kv + cp->n, *G = cp->dkv, *dG = cp->dkv + cp->n, *Og = cp->lse, *dOg = Og + rows * C,
          *tiles = dOg + rows * C;
    CL_TRY(to_heads(cp, G, qkv, B, T, C, K, send, recv));
    CL_TRY(to_heads(cp, Og, out, B, T, C, 0, send, recv));
    CL_TRY(to_heads(cp, dOg, dout, B, T, C, 0, send, recv));
    memset(dG, 0, (size_t)(rows * (C + 2 * K)) * sizeof(float));
    cl_kern(m)->flash_backward(dG, tiles, dOg, G, Og, lse, B, T * n, C / n, NH / n, NKV / n);
    return to_rows(cp, dqkv, dG, B, T, C, K, 1, send, recv);
}

cl_status cl_nn_attention_forward(const cl_model *m, float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV) {
    if (!m->cp) {
        cl_kern(m)->flash_forward(out, lse, qkv, B, T, C, NH, NKV);
        return CL_OK;
    }
    if (m->cp->how == CL_CP_A2A) return a2a_forward(m, out, lse, qkv, B, T, C, NH, NKV);
    struct cl_nn_cp *cp = m->cp;
    int n = cp->size, c = T / 2, hs = C / NH, W = C + 2 * NKV * hs;
    size_t local = (size_t)B * T * W;
    CL_ASSERT((int64_t)local <= cp->n);
    float *bufs[2] = {cp->kv, cp->kv + cp->n};
    const float *cur = qkv; /* step s: the rows of rank (rank - s) mod n */
    ring_xfer rq = {{NULL, NULL}, {0, 0}};
    cl_status s = CL_OK;
    for (int st = 0; st < n && !s; st++) {
        int src = (cp->rank - st + n) % n;
        if (st + 1 < n) s = ring_post(cp, cur, bufs[st % 2], local, 0, &rq); /* the next rows travel while these are used */
        for (int b = 0; b < B && !s; b++)
            for (int hq = 0; hq < 2; hq++) {
                int jq = chunk_of(cp->rank, n, hq);
                const float *q = qkv + ((int64_t)b * T + (int64_t)hq * c) * W;
                float *o = out + ((int64_t)b * T + (int64_t)hq * c) * C;
                for (int hk = 0; hk < 2; hk++) {
                    int j = chunk_of(src, n, hk), acc = !(st == 0 && hk == 0); /* own first chunk starts every row */
                    if (j > jq) continue;
                    if (acc) lse_to_chunk(cp->lse, lse, b, hq, NH, T);
                    cl_flash_forward_chunk(o, cp->lse, q, cur + ((int64_t)b * T + (int64_t)hk * c) * W, 1, c, c, (jq - j) * c, C, NH, NKV, acc);
                    lse_from_chunk(lse, cp->lse, b, hq, NH, T);
                }
            }
        if (st + 1 < n) {
            cl_status w = ring_wait(cp, &rq);
            if (!s) s = w;
            cur = bufs[st % 2];
        }
    }
    return s;
}

cl_status cl_nn_attention_backward(const cl_model *m, float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH, int NKV) {
    if (!m->cp) {
        cl_kern(m)->flash_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV);
        return CL_OK;
    }
    if (m->cp->how == CL_CP_A2A) return a2a_backward(m, dqkv, dout, qkv, out, lse, B, T, C, NH, NKV);
    struct cl_nn_cp *cp = m->cp;
    int n = cp->size, c = T / 2, hs = C / NH, W = C + 2 * NKV * hs;
    size_t local = (size_t)B * T * W;
    CL_ASSERT((int64_t)local <= cp->n);
    float *bufs[2] = {cp->kv, cp->kv + cp->n}, *dbufs[2] = {cp->dkv, cp->dkv + cp->n};
    const float *cur = qkv;
    ring_xfer rq = {{NULL, NULL}, {0, 0}}, dq = {{NULL, NULL}, {0, 0}};
    memset(dbufs[0], 0, local * sizeof(float));
    cl_status s = CL_OK;
    for (int st = 0; st < n && !s; st++) {
        int src = (cp->rank - st + n) % n;
        float *dcur = dbufs[st % 2]; /* the key and value gradients of rank src's rows, summed so far */
        if (st + 1 < n) s = ring_post(cp, cur, bufs[st % 2], local, 0, &rq);
        for (int b = 0; b < B && !s; b++)
            for (int hq = 0; hq < 2; hq++) {
                int jq = chunk_of(cp->rank, n, hq);
                int64_t row = (int64_t)b * T + (int64_t)hq * c;
                lse_to_chunk(cp->lse, lse, b, hq, NH, T);
                for (int hk = 0; hk < 2; hk++) {
                    int j = chunk_of(src, n, hk);
                    if (j > jq) continue;
                    int64_t at = ((int64_t)b * T + (int64_t)hk * c) * W;
                    cl_flash_backward_chunk(dqkv + row * W, dcur + at, scratch, dout + row * C, qkv + row * W, cur + at, out + row * C, cp->lse,
                                            1, c, c, (jq - j) * c, C, NH, NKV);
                }
            }
        /* the sums go on to the next rank; after n steps each owner has its own back */
        if (!s) s = ring_post(cp, dcur, dbufs[(st + 1) % 2], local, 1, &dq);
        cl_status w = ring_wait(cp, &dq);
        if (!s) s = w;
        if (st + 1 < n) {
            w = ring_wait(cp, &rq);
            if (!s) s = w;
            cur = bufs[st % 2];
        }
    }
    /* the query columns of the returned sums are 0 */
    if (!s) cl_kern(m)->add_inplace(dqkv, dbufs[n % 2], (int64_t)local);
    return s;
}
