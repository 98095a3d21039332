/* Generation with a KV cache: a model part run step by step on new token
 * rows only (cl_decoder, include/cleave/model.h), not by recomputing the
 * whole context for every new token (cl_model_logits_last).
 *
 * A step brings n new rows per sample at positions pos0 .. pos0 + n - 1
 * (prefill: the prompt at pos0 0; then one row a step). Each unit kind
 * runs it through its table's `decode` entry (kind.h): the embedding looks
 * the tokens up (GPT adds its learned positions pos0 + t), a block appends
 * its k and v of the new rows to its cache [B, KV heads here, Tmax, head
 * width] and attends over cache rows 0 .. position (the table's
 * kv_append and attention_decode kernels; Llama rotates q and k at pos0 + t
 * first), the head normalizes only each sample's last row and computes its
 * logits. What the kinds share is in decode_kinds.c (cl_nn_decode_attention,
 * the head's last rows and logits: kind.h); each kind's decode is written
 * beside its forward.
 *
 * Invariants: the rows between units are [B n, C] on every rank (no
 * sequence parallelism); tensor parallelism splits heads and vocabulary as
 * in training (row-parallel outputs all-reduced, the logits gathered here);
 * a pipeline stage (a part [u0, u1), cl_decoder_set_pp) receives the
 * previous stage's rows of the step, sends its own to the next, and the last
 * stage broadcasts the gathered logits over the pipeline;
 * everything lives on the model's device (its cap applies: cl_decoder_size
 * is what create allocates, caches then workspace). */
#include "nn/kind.h"
#include "nn/model_impl.h"

#include "cleave/comm.h"

#include <stdlib.h>
#include <string.h>

struct cl_decoder {
    cl_model *m;
    int B, Tmax;
    float **kc, **vc;   /* per unit of the part: its cache, or NULL */
    float *ws, *x[2];   /* workspace; the rows between units, ping-pong (x[1]: a later stage's received rows) */
    float *logits;      /* [B, vocab_local] (the head's stage only) */
    int32_t *tok;       /* [B Tmax] (the embedding's stage only) */
    float *row;         /* host: one sample's gathered logits (vocab_padded) */
    cl_comm *pp;        /* the pipeline's group (NULL: one stage) */
    int stage, nstages;
};

static int64_t cache_floats(const cl_model_desc *d, int B, int Tmax) { return (int64_t)B * d->kv_channels_local * Tmax; }

static cl_status check_part(const cl_model_desc *d, int u0, int u1, int B, int Tmax) {
    if (u0 < 0 || u1 > d->nunits || u0 >= u1) return cl_error(CL_ERR_INVALID, "a decoder of units [%d, %d) of %d", u0, u1, d->nunits);
    if (d->tpl.sp) return cl_error(CL_ERR_INVALID, "generation with a KV cache does not take sequence parallelism");
    for (int u = u0; u < u1; u++)
        if (!cl_kind_of(d->units[u].kind)->decode)
            return cl_error(CL_ERR_INVALID, "unit %s (%s) cannot run with a KV cache yet (cleave generate --no-kv-cache recomputes instead)", d->units[u].label, cl_kind_of(d->units[u].kind)->name);
    if (d->cfg.experts && d->cfg.moe_capacity_factor > 0) /* a step's capacity would be its new rows', not the window's */
        return cl_error(CL_ERR_INVALID, "generation with a KV cache does not take an MoE capacity factor (the model's %g): cleave generate --no-kv-cache recomputes instead",
                        d->cfg.moe_capacity_factor);
    if (B < 1 || Tmax < 1 || Tmax > d->T)
        return cl_error(CL_ERR_INVALID, "KV cache of %d samples x %d positions (the model is sized for 1..%d)", B, Tmax, d->T);
    return CL_OK;
}

cl_status cl_decoder_size_part(const cl_model_desc *d, int u0, int u1, int B, int Tmax, cl_decoder_bytes *o) {
    CL_TRY(check_part(d, u0, u1, B, Tmax));
    int64_t caches = 0, N = (int64_t)B * Tmax;
    for (int u = u0; u < u1; u++)
        if (cl_kind_of(d->units[u].kind)->kv_cache) caches += 2 * cache_floats(d, B, Tmax);
    o->cache = caches * (int64_t)sizeof(float);
    int64_t logits = u1 == d->nunits ? (int64_t)B * d->vocab_local : 0, tok = u0 == 0 ? N : 0;
    o->workspace = (cl_nn_decode_ws_floats(d, N) + 2 * N * d->cfg.channels + logits) * (int64_t)sizeof(float) +
                   tok * (int64_t)sizeof(int32_t);
    return CL_OK;
}

cl_status cl_decoder_size(const cl_model_desc *d, int B, int Tmax, cl_decoder_bytes *o) {
    return cl_decoder_size_part(d, 0, d->nunits, B, Tmax, o);
}

void cl_decoder_free(cl_decoder *dc) {
    if (!dc) return;
    cl_device *dev = dc->m->dev;
    int n = dc->m->u1 - dc->m->u0;
    for (int i = 0; i < n && dc->kc; i++) {
        if (dc->kc[i]) cl_device_free(dev, dc->kc[i]);
        if (dc->vc[i]) cl_device_free(dev, dc->vc[i]);
    }
    free(dc->kc);
    free(dc->vc);
    if (dc->ws) cl_device_free(dev, dc->ws);
    if (dc->x[0]) cl_device_free(dev, dc->x[0]);
    if (dc->x[1]) cl_device_free(dev, dc->x[1]);
    if (dc->logits) cl_device_free(dev, dc->logits);
    if (dc->tok) cl_device_free(dev, dc->tok);
    free(dc->row);
    free(dc);
}

cl_status cl_decoder_create(cl_model *m, int B, int Tmax, cl_decoder **out) {
    const cl_model_desc *d = m->desc;
    *out = NULL;
    CL_TRY(check_part(d, m->u0, m->u1, B, Tmax));
    cl_decoder *dc = calloc(1, sizeof *dc);
    int n = m->u1 - m->u0;
    if (!dc || !(dc->kc = calloc((size_t)n, sizeof *dc->kc)) || !(dc->vc = calloc((size_t)n, sizeof *dc->vc)) ||
        !(dc->row = malloc((size_t)d->vocab_padded * sizeof *dc->row))) {
        if (dc) free(dc->kc), free(dc->vc), free(dc);
        return cl_error(CL_ERR_OOM, "cannot allocate a decoder");
    }
    dc->m = m, dc->B = B, dc->Tmax = Tmax, dc->nstages = 1;
    int64_t N = (int64_t)B * Tmax, C = d->cfg.channels;
    cl_status s = CL_OK;
    for (int u = m->u0; u < m->u1 && !s; u++)
        if (cl_kind_of(d->units[u].kind)->kv_cache) {
            s = cl_device_alloc_f32(m->dev, CL_MEM_ACTS, (size_t)cache_floats(d, B, Tmax), &dc->kc[u - m->u0]);
            if (!s) s = cl_device_alloc_f32(m->dev, CL_MEM_ACTS, (size_t)cache_floats(d, B, Tmax), &dc->vc[u - m->u0]);
        }
    if (!s) s = cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)cl_nn_decode_ws_floats(d, N), &dc->ws);
    if (!s) s = cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)(N * C), &dc->x[0]);
    if (!s) s = cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)(N * C), &dc->x[1]);
    if (!s && m->u1 == d->nunits) s = cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)B * (size_t)d->vocab_local, &dc->logits);
    if (!s && m->u0 == 0) s = cl_device_alloc(m->dev, CL_MEM_WORKSPACE, (size_t)N * sizeof(int32_t), (void **)&dc->tok);
    if (s) {
        cl_decoder_free(dc);
        return cl_error_context(s, "the KV cache of %d samples x %d positions", B, Tmax);
    }
    *out = dc;
    return CL_OK;
}

cl_status cl_decoder_set_pp(cl_decoder *dc, cl_comm *pp) {
    int S = pp ? cl_comm_size(pp) : 1, s = pp ? cl_comm_rank(pp) : 0;
    const cl_model *m = dc->m;
    if ((s == 0) != (m->u0 == 0) || (s == S - 1) != (m->u1 == m->desc->nunits))
        return cl_error(CL_ERR_INVALID, "a decoder of units [%d, %d) as stage %d of %d", m->u0, m->u1, s, S);
    dc->pp = S > 1 ? pp : NULL, dc->stage = s, dc->nstages = S;
    return CL_OK;
}

cl_status cl_decoder_step(cl_decoder *dc, const int32_t *tokens, int n, int pos0, float *logits) {
    cl_model *m = dc->m;
    const cl_model_desc *d = m->desc;
    if (n < 1 || pos0 < 0 || pos0 + n > dc->Tmax)
        return cl_error(CL_ERR_INVALID, "a step of %d tokens at position %d past the KV cache's %d positions", n, pos0, dc->Tmax);
    int B = dc->B, V = d->cfg.vocab, Vl = d->vocab_local, last = dc->stage == dc->nstages - 1, tag = CL_TAG_FIRST(CL_TAG_PIPE);
    size_t rows = (size_t)B * (size_t)n * (size_t)d->cfg.channels * sizeof(float);
    for (int64_t i = 0; i < (int64_t)B * n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return cl_error(CL_ERR_INVALID, "token %d is outside the vocabulary (%d)", tokens[i], V);
    if (dc->tok) cl_device_copy_from_host(m->dev, dc->tok, tokens, (size_t)B * (size_t)n * sizeof(int32_t));
    cl_decode_step st = {.B = B, .n = n, .pos0 = pos0, .Tmax = dc->Tmax, .tokens = dc->tok, .ws = dc->ws, .logits = dc->logits};
    const float *in = NULL;
    if (dc->stage > 0) { /* the previous stage's rows */
        CL_TRY(cl_comm_recv(dc->pp, dc->x[1], rows, dc->stage - 1, tag));
        in = dc->x[1];
    }
    int cur = 0;
    for (int u = m->u0; u < m->u1; u++) {
        const cl_unit *un = &d->units[u];
        st.kc = dc->kc[u - m->u0], st.vc = dc->vc[u - m->u0];
        float *out = dc->x[cur];
        CL_TRY(cl_kind_of(un->kind)->decode(m, un, &st, in, out, m->p + un->first_param));
        in = out;
        cur ^= 1;
    }
    CL_TRY(cl_device_sync(m->dev));
    if (!last) CL_TRY(cl_comm_send(dc->pp, in, rows, dc->stage + 1, tag));
    for (int b = 0; b < B && last; b++) {
        const float *lg = dc->logits + (int64_t)b * Vl;
        if (m->tp.size > 1) CL_TRY(cl_comm_allgather_n(m->tp.comm, lg, dc->row, (size_t)Vl, CL_F32));
        else cl_device_copy_to_host(m->dev, dc->row, lg, (size_t)Vl * sizeof(float));
        memcpy(logits + (int64_t)b * V, dc->row, (size_t)V * sizeof(float));
    }
    /* every stage samples the same token from the last stage's logits */
    return dc->pp ? cl_comm_broadcast_n(dc->pp, logits, (size_t)B * (size_t)V, CL_F32, dc->nstages - 1) : CL_OK;
}
