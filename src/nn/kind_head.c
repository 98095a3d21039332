/* The GPT-2 LM head with its loss as a unit kind (kind.h): ln_f, logits
 * against the tied wte (the embedding's parameter, reached through
 * d->tied_wte: the head's own copy on a part without the embedding, its
 * gradient apart under cl_model_split_tied), softmax cross-entropy. Its
 * output is the loss of each token row.
 *
 * Written once for a vocabulary slice (Megatron's VocabParallelCrossEntropy);
 * the one special case, one rank with an unpadded vocabulary, stays inside
 * cl_nn_head_loss_forward and _backward (see there). The path after the norm
 * (gather, logits, loss and their backward) is shared with Llama's head
 * (kind_llama_head.c) through those two and cl_nn_head_layout (kind.h). */
#include "nn/kind.h"
#include "nn/model_impl.h"

#include "cleave/prof.h"

#include <math.h>
#include <string.h>

typedef struct {
    float *lnf_w, *lnf_b;
} head_weights;

#define F(x) offsetof(head_weights, x)
static const cl_kind_param head_params[] = {
    {"ln_f.weight", F(lnf_w), CL_TPS_NORM, 0, CL_INIT_ONES, 0},
    {"ln_f.bias", F(lnf_b), CL_TPS_NORM, 0, CL_INIT_ZEROS, 0},
};

/* the vocabulary-parallel path (see cl_nn_head_loss_forward) */
static int head_vp(const cl_model_desc *d) { return d->tpl.tp > 1 || d->vocab_padded != d->cfg.vocab; }

/* Per sample: the input and the loss of each token row. Saved: losses,
 * lnf (all rows, gathered), mean and rstd (its rows), lse, logits (its
 * vocabulary columns). Scratch: dlnf; sequence parallelism: its scattered
 * shard; the vocabulary-parallel path: the row max (f32) and sums (f64). */
static void head_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    int tp = d->tpl.tp, sp = d->tpl.sp;
    int64_t T = d->T, C = d->cfg.channels, Vl = d->vocab_local, Ts = sp ? T / tp : T;
    un->in_floats = cl_size_mul(z, Ts, C);
    un->out_floats = T;
    /* lnf BF16 in bf16 (a GEMM input only); there the backward narrows dlogits' first row through the scratch's end */
    un->act_floats = cl_size_add(z, cl_size_add(z, cl_size_mul(z, T, Vl + 2), cl_nn_gemm_in_floats(d, cl_size_mul(z, T, C))), 2 * Ts);
    un->scratch_floats = cl_size_add(z, cl_size_add(z, cl_size_mul(z, T, C), sp ? cl_size_mul(z, Ts, C) : 0),
                                     head_vp(d) ? cl_size_mul(z, T, 5) + 2 : 0);
    if (cl_nn_bf16(d)) un->scratch_floats = cl_size_add(z, un->scratch_floats, cl_nn_bf16_floats(Vl));
    un->flops = 2.0 * (double)T * (double)C * (double)Vl;
}

static void head_param(const cl_model_desc *d, const cl_unit *un, int i, cl_param_shape *o) {
    (void)un, (void)i;
    o->ndim = 1;
    o->shape[0] = d->cfg.channels;
    o->scale = 0;
}

/* lnf holds every token row (gathered under sequence parallelism), mean
 * (a layernorm's; none for an RMSNorm) and rstd this rank's rows, logits
 * this rank's Vl vocabulary columns. */
cl_head_acts cl_nn_head_layout(const cl_model_desc *d, float *base, int64_t N, int mean) {
    int64_t C = d->cfg.channels, Ns = cl_nn_rows_here(d, N);
    cl_head_acts h;
    float *p = base;
    h.losses = p; p += N; /* the output first, so cl_acts_output is the base */
    h.lnf = p; p += cl_nn_gemm_in_floats(d, N * C); /* BF16 in bf16 */
    h.mean = mean ? p : NULL; p += mean ? Ns : 0;
    h.rstd = p; p += Ns;
    h.lse = p; p += N;
    h.logits = p;
    return h;
}

/* The vocabulary-parallel head (Megatron's VocabParallelCrossEntropy):
 * logits for this rank's Vl vocabulary columns only; the row max and the
 * sums of exponentials and of the target's logit summed over the group;
 * padded columns (global index >= vocab) masked out. Used whenever tp > 1
 * or the vocabulary is padded. */

static int head_valid(const cl_model_desc *d) {
    int64_t v = (int64_t)d->cfg.vocab - d->vocab_start;
    return (int)(v < 0 ? 0 : v > d->vocab_local ? d->vocab_local : v);
}

cl_status cl_nn_head_targets(const cl_model *m, const cl_microbatch *mb) {
    int V = m->desc->cfg.vocab;
    for (int64_t i = 0; i < (int64_t)mb->B * mb->T; i++)
        if (mb->targets[i] < -1 || mb->targets[i] >= V)
            return cl_error(CL_ERR_INVALID, "target %d at position %lld is outside the vocabulary (%d)", mb->targets[i], (long long)i, V);
    return CL_OK;
}

void *cl_nn_head_mine(const cl_model *m, const cl_head_acts *h, int64_t N) {
    int64_t Ns = cl_nn_rows_here(m->desc, N), at = m->desc->tpl.sp ? Ns * m->tp.rank * m->desc->cfg.channels : 0;
    return cl_nn_bf16(m->desc) ? (void *)((uint16_t *)h->lnf + at) : (void *)(h->lnf + at);
}

/* logits = lnf wv^T (F32 products, or in bf16 BF16 lnf against wv's BF16 copy). */
static void head_logits_gemm(const cl_model *m, const cl_head_acts *h, const float *wv, int64_t N, int64_t Vl, int64_t C) {
    if (cl_nn_bf16(m->desc)) cl_nn_gemm_lo(m, 0, 1, (int)N, (int)Vl, (int)C, h->lnf, (int)C, cl_nn_wlo(m, wv), (int)C, 0.0f, h->logits, (int)Vl);
    else cl_sgemm(cl_kern(m), 0, 1, (int)N, (int)Vl, (int)C, 1.0f, h->lnf, (int)C, wv, (int)C, 0.0f, h->logits, (int)Vl);
}

/* One rank, vocabulary not padded: the plain one-pass softmax cross-entropy. The split path below would give
 * the same losses but takes two more passes over the logits (the max, then the sums) and scratch the plain
 * path does not (5T + 2 floats a sample, which every such run would then predict and hold), so the special
 * case stays, here inside the one function. */
cl_status cl_nn_head_loss_forward(cl_model *m, const cl_microbatch *mb, const cl_head_acts *h, const float *wv) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)mb->B * mb->T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Vl = d->vocab_local;
    double fl = 2.0 * N * C * Vl;
    if (!head_vp(d)) {
        CL_PROF("fwd logits", fl, head_logits_gemm(m, h, wv, N, Vl, C));
        CL_PROF("fwd softmax xent", 0, cl_kern(m)->xent_forward(h->losses, h->lse, h->logits, mb->targets, (int)N, (int)Vl));
        return CL_OK;
    }
    if (d->tpl.sp) /* in place; in bf16 the BF16 rows (half F32's bytes) */
        CL_TRY(cl_tp_forward_n(&m->tp, CL_TP_GATHER, cl_nn_head_mine(m, h, N), h->lnf, (size_t)(Ns * C), cl_nn_bf16(d) ? CL_BF16 : CL_F32));
    CL_PROF("fwd logits", fl, head_logits_gemm(m, h, wv, N, Vl, C));
    int valid = head_valid(d);
    /* after dlnf (and its shard): the row max, then (8-byte aligned) the sums of exp and the target's logit */
    int64_t at = N * C + (d->tpl.sp ? Ns * C : 0);
    float *mx = m->scratch + at;
    double *sums = (double *)(m->scratch + ((at + N + 1) & ~(int64_t)1));
    CL_PROF("fwd softmax xent", 0, cl_kern(m)->xent_vp_max(mx, h->logits, (int)N, (int)Vl, valid));
    if (m->tp.size > 1) CL_TRY(cl_comm_allreduce(m->tp.comm, mx, (size_t)N, CL_F32, CL_RED_MAX));
    CL_PROF("fwd softmax xent", 0, cl_kern(m)->xent_vp_sum(sums, sums + N, h->logits, mx, mb->targets, d->vocab_start, (int)N, (int)Vl, valid));
    if (m->tp.size > 1) CL_TRY(cl_comm_allreduce(m->tp.comm, sums, (size_t)(2 * N), CL_F64, CL_RED_SUM));
    for (int64_t i = 0; i < N; i++) {
        double l = (double)mx[i] + log(sums[i]);
        h->lse[i] = (float)l;
        h->losses[i] = mb->targets[i] < 0 ? 0.0f : (float)(l - sums[N + i]);
    }
    return CL_OK;
}

static cl_status head_forward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                              float *const *p) {
    (void)un;
    CL_TRY(cl_nn_head_targets(m, mb));
    head_weights w;
    cl_kind_bind(&cl_kind_lmhead, p, &w);
    int64_t N = (int64_t)mb->B * mb->T, Ns = cl_nn_rows_here(m->desc, N);
    cl_head_acts h = cl_nn_head_layout(m->desc, base, N, 1);
    /* under sequence parallelism this rank normalizes its rows in place in lnf, then all are gathered; bf16:
     * written into lnf as BF16 by the kernel (each value the F32 one's, rounded once) */
    int C = (int)m->desc->cfg.channels;
    if (cl_nn_bf16(m->desc))
        CL_PROF("fwd layernorm", 0, cl_kern(m)->layernorm_forward_bf16(cl_nn_head_mine(m, &h, N), NULL, h.mean, h.rstd, in, w.lnf_w, w.lnf_b, (int)Ns, C));
    else CL_PROF("fwd layernorm", 0, cl_kern(m)->layernorm_forward(cl_nn_head_mine(m, &h, N), h.mean, h.rstd, in, w.lnf_w, w.lnf_b, (int)Ns, C));
    return cl_nn_head_loss_forward(m, mb, &h, m->p[m->desc->tied_wte]);
}

/* bf16: the F32 dlogits [N, Vl] narrowed in place to BF16 rows of Vl values (row i at BF16 element i Vl): rows
 * [a, 2a) land in bytes [2 a Vl, 4 a Vl), which F32 rows [a/2, a) held, apart from their own [4 a Vl, 8 a Vl): so
 * rows 1, [2, 4), [4, 8), ... each go in one narrowing, in that order (log2 N calls, not N). Row 0 goes through
 * the scratch's last BF16 Vl values (the head's sizes count them) and is copied in last. */
static cl_status head_dlogits_narrow(const cl_model *m, float *logits, int64_t N, int64_t Vl) {
    uint16_t *lo = (uint16_t *)logits, *row0 = (uint16_t *)(m->scratch + m->sizes.scratch - cl_nn_bf16_floats(Vl));
    CL_TRY(cl_nn_narrow(m, row0, logits, Vl));
    for (int64_t a = 1; a < N; a *= 2) {
        int64_t rows = N - a < a ? N - a : a;
        CL_TRY(cl_nn_narrow(m, lo + a * Vl, logits + a * Vl, rows * Vl));
    }
    cl_device_copy(m->dev, lo, row0, (size_t)Vl * sizeof *lo);
    return CL_OK;
}

cl_status cl_nn_head_loss_backward(cl_model *m, const cl_microbatch *mb, const cl_head_acts *h, const float *wv, float *dwv, int ww,
                                   const float **dl) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)mb->B * mb->T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Vl = d->vocab_local;
    int iN = (int)N, iC = (int)C, iVl = (int)Vl;
    float *dlnf = m->scratch;
    double fl = 2.0 * N * C * Vl;
    /* dlogits replaces logits in place: the logits are dead after this */
    if (head_vp(d))
        CL_PROF("bwd softmax xent", 0,
                cl_kern(m)->xent_vp_backward(h->logits, h->logits, h->lse, mb->targets, d->vocab_start, mb->dloss, iN, iVl, head_valid(d)));
    else
        CL_PROF("bwd softmax xent", 0, cl_kern(m)->xent_backward(h->logits, h->logits, h->lse, mb->targets, mb->dloss, iN, iVl));
    if (cl_nn_bf16(d)) { /* the products read dlogits as BF16, narrowed in place */
        CL_TRY(head_dlogits_narrow(m, h->logits, N, Vl));
        if (ww) CL_PROF("bwd logits w", fl, cl_nn_gemm_lo(m, 1, 0, iVl, iC, iN, h->logits, iVl, h->lnf, iC, cl_nn_grad_beta(m, dwv), dwv, iC));
        CL_PROF("bwd logits", fl, cl_nn_gemm_lo(m, 0, 0, iN, iC, iVl, h->logits, iVl, cl_nn_wlo(m, wv), iC, 0.0f, dlnf, iC));
    } else {
        if (ww) CL_PROF("bwd logits w", fl, cl_sgemm(cl_kern(m), 1, 0, iVl, iC, iN, 1.0f, h->logits, iVl, h->lnf, iC, cl_nn_grad_beta(m, dwv), dwv, iC));
        CL_PROF("bwd logits", fl, cl_sgemm(cl_kern(m), 0, 0, iN, iC, iVl, 1.0f, h->logits, iVl, wv, iC, 0.0f, dlnf, iC));
    }
    *dl = dlnf;
    if (d->tpl.sp) {
        CL_TRY(cl_tp_backward(&m->tp, CL_TP_GATHER, dlnf, dlnf + N * C, (size_t)(Ns * C)));
        *dl = dlnf + N * C;
    } else if (m->tp.size > 1) {
        CL_TRY(cl_tp_backward(&m->tp, CL_TP_COPY, dlnf, dlnf, (size_t)(N * C)));
    }
    return CL_OK;
}

static cl_status head_backward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                               float *const *p, float *const *g, const float *dout, float *din, int what) {
    (void)un, (void)dout; /* the loss's own gradient is mb->dloss */
    const cl_model_desc *d = m->desc;
    int ww = what & CL_BWD_WEIGHT;
    head_weights w, gw;
    cl_kind_bind(&cl_kind_lmhead, p, &w);
    cl_kind_bind(&cl_kind_lmhead, g, &gw);
    int64_t N = (int64_t)mb->B * mb->T, Ns = cl_nn_rows_here(d, N);
    int iC = (int)d->cfg.channels;
    cl_head_acts h = cl_nn_head_layout(d, base, N, 1);
    const float *dl;
    CL_TRY(cl_nn_head_loss_backward(m, mb, &h, m->p[d->tied_wte], m->head_wte_g ? m->head_wte_g : m->g[d->tied_wte], ww, &dl));
    if (ww) CL_PROF("bwd layernorm w", 0, cl_kern(m)->layernorm_backward_weight(gw.lnf_w, gw.lnf_b, dl, in, h.mean, h.rstd, (int)Ns, iC));
    if (din) CL_PROF("bwd layernorm", 0, cl_kern(m)->layernorm_backward_input(din, dl, in, w.lnf_w, h.mean, h.rstd, (int)Ns, iC));
    return CL_OK;
}

static const float *head_logits(const cl_model *m, const cl_acts *a, int u, int B, int T) {
    return cl_nn_head_layout(m->desc, a->base + a->off[u - m->u0], (int64_t)B * T, 1).logits;
}

/* The planner's cost (nn/cost.h). */
static void head_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal, cl_unit_cost *o) {
    (void)un, (void)recompute, (void)causal;
    double R = (double)B * d->T, C = d->cfg.channels, Vl = d->vocab_local;
    int tp = d->tpl.tp, sp = d->tpl.sp;
    double Rs = sp ? R / tp : R;
    cl_pass_cost *f = &o->pass[CL_PASS_F], *b = &o->pass[CL_PASS_B];
    cl_cost_gemm(f, R, Vl, C, 1, CL_GEMM_NT);
    /* ln_f; the softmax cross-entropy reads the logits twice (max, sums) and keeps them */
    f->bytes = e * (2 * Rs * C + 3 * R * Vl);
    if (sp) cl_cost_coll(f, CL_COLL_ALLGATHER, R * C * e, tp);
    cl_cost_coll(f, CL_COLL_ALLREDUCE, R * 4.0, tp);  /* the row max */
    cl_cost_coll(f, CL_COLL_ALLREDUCE, R * 16.0, tp); /* the sums of exponentials and the target's logit, doubles */
    /* the whole backward (a loss unit's B): dlogits, dx = dlogits wte, dwte = dlogits^T x, ln_f */
    cl_cost_gemm(b, R, C, Vl, 1, CL_GEMM_NN);
    cl_cost_gemm(b, Vl, C, R, 1, CL_GEMM_TN);
    b->bytes = e * (2 * R * Vl + 3 * Rs * C + 2 * Rs * C);
    cl_cost_narrow(b, d, R * Vl, 0); /* bf16: dlogits narrowed in place for the two products */
    cl_cost_coll(b, sp ? CL_COLL_REDUCE_SCATTER : CL_COLL_ALLREDUCE, R * C * e, tp);
}

/* Generation's step (nn/decode.c): ln_f of each sample's last row only, its logits against the tied wte. */
static cl_status head_decode(cl_model *m, const cl_unit *un, const cl_decode_step *st, const float *in, float *out, float *const *p) {
    (void)un, (void)out;
    head_weights w;
    cl_kind_bind(&cl_kind_lmhead, p, &w);
    int C = m->desc->cfg.channels;
    float *rows = st->ws, *lnf = rows + (int64_t)st->B * C, *mean = lnf + (int64_t)st->B * C, *rstd = mean + st->B;
    cl_nn_decode_last_rows(m, st, in, rows);
    cl_kern(m)->layernorm_forward(lnf, mean, rstd, rows, w.lnf_w, w.lnf_b, st->B, C);
    cl_nn_decode_logits(m, st, lnf, m->p[m->desc->tied_wte]);
    return CL_OK;
}

const cl_kind cl_kind_lmhead = {
    .name = "lm_head",
    .nparams = 2,
    .params = head_params,
    .sizes = head_sizes,
    .param = head_param,
    .uses_tied = 1,
    .cost = head_cost,
    .loss = CL_KIND_LOSS_TOKEN,
    .z3_reads = CL_KIND_READS(CL_Z3_FORWARD) | CL_KIND_READS(CL_Z3_BACKWARD),
    .wlo = CL_KIND_WLO_TIED, /* the logits' weight */
    .gfirst = CL_KIND_GFIRST_TIED, /* its gradient, the "bwd logits w" product (cl_nn_head_loss_backward) */
    .logits = head_logits,
    .forward = head_forward,
    .backward = head_backward,
    .decode = head_decode,
};
