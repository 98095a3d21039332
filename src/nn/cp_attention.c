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
 * Attention, first version (all-gather): the forward all-gathers every
 * rank's qkv rows [B, Tl, W] (W = this rank's query, key and value columns)
 * over the context group, then each local query chunk (global index jq)
 * attends to the key chunks j = 0 .. jq in order through the chunk kernels
 * (flash.c: cl_flash_forward_chunk with the causal offset (jq - j) c,
 * accumulating the online softmax from the second chunk on); the lse rows of
 * a chunk are gathered in a small buffer of NHl x c and written into the
 * block's [B, NHl, Tl] lse. The backward gathers the qkv rows again (the
 * buffer is shared by all blocks), runs each chunk pair's backward (dq into
 * the local dqkv, dk and dv into a gathered gradient buffer at the key
 * chunk's owner), reduce-scatters that buffer over the group (each owner
 * gets the sum of its rows, in rank order) and adds it into dqkv. Not yet:
 * the ring (K and V passed with isend/irecv overlapped with the chunk at
 * hand) and the all-to-all variant.
 *
 * Invariants: the gathered buffers live on the part's device as workspace
 * (CL_MEM_WORKSPACE), 2 cp B Tl W floats plus NHl c, for the part's
 * capacity B; every context rank calls the collectives in the same order
 * (same units, same micro-batches), so they match up. */
#include "nn/cp.h"
#include "nn/model_impl.h"

#include "cleave/kernels.h"

#include <stdlib.h>
#include <string.h>

struct cl_nn_cp {
    cl_comm *comm;
    int rank, size;
    float *kv;   /* gathered qkv rows: size x [B, Tl, W] */
    float *dkv;  /* their gradients, the same shape */
    float *lse;  /* one chunk's lse: NHl x c */
    int64_t n;   /* floats of one rank's [B, Tl, W] at capacity */
};

/* Global chunk of local half h (0: rows [0, c), 1: rows [c, 2c)) of context rank r of n. */
static int chunk_of(int r, int n, int h) { return h ? 2 * n - 1 - r : r; }

/* Where global chunk j lives: its rank and local half. */
static void owner_of(int j, int n, int *r, int *h) {
    *h = j >= n;
    *r = *h ? 2 * n - 1 - j : j;
}

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

cl_status cl_model_set_cp(cl_model *m, cl_comm *comm) {
    const cl_model_desc *d = m->desc;
    int n = cl_comm_size(comm);
    if (n <= 1) return CL_OK;
    if (d->T % 2) /* cl_train_describe refused the families without sequences and T not cut in 2 n chunks */
        return cl_error(CL_ERR_INVALID, "context parallelism over %d ranks needs an even local length (T = %d)", n, d->T);
    struct cl_nn_cp *cp = calloc(1, sizeof *cp);
    if (!cp) return cl_error(CL_ERR_OOM, "cannot allocate the context-parallel state");
    cp->comm = comm;
    cp->rank = cl_comm_rank(comm);
    cp->size = n;
    int64_t W = d->channels_local + 2 * (int64_t)d->kv_channels_local;
    cp->n = (int64_t)m->B * d->T * W;
    cl_status s = cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)(cp->n * n), &cp->kv);
    if (!s) s = cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)(cp->n * n), &cp->dkv);
    if (!s) s = cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)d->heads_local * (d->T / 2), &cp->lse);
    m->cp = cp;
    if (!s && m->rope) s = cp_rope_tables(m);
    if (s) cl_nn_cp_free(m);
    return s;
}

void cl_nn_cp_free(cl_model *m) {
    if (!m->cp) return;
    cl_device_free(m->dev, m->cp->kv);
    cl_device_free(m->dev, m->cp->dkv);
    cl_device_free(m->dev, m->cp->lse);
    free(m->cp);
    m->cp = NULL;
}

void cl_nn_cp_positions_forward(const cl_model *m, float *out, const float *wpe, int B, int Tl, int64_t C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) {
            float *o = out + ((int64_t)b * Tl + t) * C;
            const float *p = wpe + cl_nn_cp_position(m, t, Tl) * C;
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

/* This rank's qkv rows [B, Tl, W] gathered from every context rank into cp->kv. */
static cl_status gather_qkv(const cl_model *m, const float *qkv, int B, int Tl, int W) {
    struct cl_nn_cp *cp = m->cp;
    size_t n = (size_t)B * Tl * W;
    CL_ASSERT((int64_t)n <= cp->n);
    return cl_comm_allgather_n(cp->comm, qkv, cp->kv, n, CL_F32);
}

cl_status cl_nn_attention_forward(const cl_model *m, float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV) {
    if (!m->cp) {
        cl_kern(m)->flash_forward(out, lse, qkv, B, T, C, NH, NKV);
        return CL_OK;
    }
    struct cl_nn_cp *cp = m->cp;
    int n = cp->size, c = T / 2, hs = C / NH, W = C + 2 * NKV * hs;
    CL_TRY(gather_qkv(m, qkv, B, T, W));
    for (int b = 0; b < B; b++)
        for (int hq = 0; hq < 2; hq++) {
            int jq = chunk_of(cp->rank, n, hq);
            const float *q = qkv + ((int64_t)b * T + (int64_t)hq * c) * W;
            float *o = out + ((int64_t)b * T + (int64_t)hq * c) * C;
            for (int j = 0; j <= jq; j++) {
                int r, h;
                owner_of(j, n, &r, &h);
                const float *kv = cp->kv + (((int64_t)r * B + b) * T + (int64_t)h * c) * W;
                cl_flash_forward_chunk(o, cp->lse, q, kv, 1, c, c, (jq - j) * c, C, NH, NKV, j > 0);
            }
            for (int hh = 0; hh < NH; hh++)
                memcpy(lse + ((int64_t)b * NH + hh) * T + (int64_t)hq * c, cp->lse + (int64_t)hh * c, (size_t)c * sizeof(float));
        }
    return CL_OK;
}

cl_status cl_nn_attention_backward(const cl_model *m, float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH, int NKV) {
    if (!m->cp) {
        cl_kern(m)->flash_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV);
        return CL_OK;
    }
    struct cl_nn_cp *cp = m->cp;
    int n = cp->size, c = T / 2, hs = C / NH, W = C + 2 * NKV * hs;
    size_t local = (size_t)B * T * W;
    CL_TRY(gather_qkv(m, qkv, B, T, W));
    memset(cp->dkv, 0, local * (size_t)n * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int hq = 0; hq < 2; hq++) {
            int jq = chunk_of(cp->rank, n, hq);
            int64_t row = (int64_t)b * T + (int64_t)hq * c;
            for (int hh = 0; hh < NH; hh++)
                memcpy(cp->lse + (int64_t)hh * c, lse + ((int64_t)b * NH + hh) * T + (int64_t)hq * c, (size_t)c * sizeof(float));
            for (int j = 0; j <= jq; j++) {
                int r, h;
                owner_of(j, n, &r, &h);
                int64_t at = (((int64_t)r * B + b) * T + (int64_t)h * c) * W;
                cl_flash_backward_chunk(dqkv + row * W, cp->dkv + at, scratch, dout + row * C, qkv + row * W, cp->kv + at, out + row * C,
                                        cp->lse, 1, c, c, (jq - j) * c, C, NH, NKV);
            }
        }
    /* every owner gets the sum of its rows' key and value gradients (the query columns there are 0) */
    CL_TRY(cl_comm_reduce_scatter(cp->comm, cp->dkv, cp->kv, local, CL_F32, CL_RED_SUM));
    cl_kern(m)->add_inplace(dqkv, cp->kv, (int64_t)local);
    return CL_OK;
}
