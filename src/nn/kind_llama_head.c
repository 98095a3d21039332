/* The Llama head with its loss as unit kinds (kind.h): model.norm (RMSNorm,
 * no bias), logits against the vocabulary's [vocab, C] weight, softmax
 * cross-entropy per token row; the weight is the embedding's
 * (tie_word_embeddings, cl_kind_llama_head: d->tied_wte as GPT's head) or
 * its own lm_head.weight (cl_kind_llama_head_untied), split by vocabulary
 * rows as the embedding is. Its sizes and cost are the GPT head's
 * (kind_head.c, reached through its table), less the layernorm's mean: an
 * RMSNorm keeps one statistic per row. Its passes are the RMSNorm's, then
 * the GPT head's path after its norm (cl_nn_head_loss_forward, _backward:
 * gather, logits, softmax cross-entropy; kind_head.c), so the loss is
 * computed by the same code.
 *
 * Invariants: parameters in checkpoint order (model.norm.weight, then
 * lm_head.weight when untied), Hugging Face's names and shapes. */
#include "nn/kind.h"
#include "nn/model_impl.h"

#include "cleave/prof.h"

#include <stddef.h>

typedef struct {
    float *norm_w, *head_w;
} llama_head_weights;

#define F(x) offsetof(llama_head_weights, x)
static const cl_kind_param llama_head_params[] = {
    {"model.norm.weight", F(norm_w), CL_TPS_NORM, 0, CL_INIT_ONES, 0},
    {"lm_head.weight", F(head_w), CL_TPS_VOCAB, 1, CL_INIT_NORMAL, 0},
};

/* As GPT's head (saved: the normed rows, logits, lse, losses; scratch alike) but one statistic per row */
static void llama_head_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    cl_kind_lmhead.sizes(d, un, z);
    un->act_floats -= d->tpl.sp ? d->T / d->tpl.tp : d->T;
}

/* model.norm.weight [C] (ones); lm_head.weight [vocab, C], normal(0, 0.02) */
static void llama_head_param(const cl_model_desc *d, const cl_unit *un, int i, cl_param_shape *o) {
    (void)un;
    if (llama_head_params[i].field == F(norm_w)) {
        o->ndim = 1, o->shape[0] = d->cfg.channels, o->scale = 0;
        return;
    }
    o->ndim = 2, o->shape[0] = d->cfg.vocab, o->shape[1] = d->cfg.channels, o->scale = 0.02f;
}

/* This unit's table, of the two in this file: asked here, not through kinds.c, which calls into this file. */
static const cl_kind *llama_head_table(const cl_unit *un) {
    return un->kind == CL_UNIT_LLAMA_HEAD_UNTIED ? &cl_kind_llama_head_untied : &cl_kind_llama_head;
}

static cl_status llama_head_forward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                                    float *const *p) {
    const cl_model_desc *d = m->desc;
    CL_TRY(cl_nn_head_targets(m, mb));
    llama_head_weights w = {0};
    cl_kind_bind(llama_head_table(un), p, &w);
    int64_t N = (int64_t)mb->B * mb->T, Ns = cl_nn_rows_here(d, N);
    cl_head_acts h = cl_nn_head_layout(d, base, N, 0);
    float eps = (float)d->cfg.rms_norm_eps;
    if (cl_nn_bf16(d)) /* written into lnf as BF16 by the kernel (the logits' GEMM input only) */
        CL_PROF("fwd rmsnorm", 0, cl_kern(m)->rmsnorm_forward_bf16(cl_nn_head_mine(m, &h, N), h.rstd, in, w.norm_w, eps, (int)Ns, (int)d->cfg.channels));
    else CL_PROF("fwd rmsnorm", 0, cl_kern(m)->rmsnorm_forward(cl_nn_head_mine(m, &h, N), h.rstd, in, w.norm_w, eps, (int)Ns, (int)d->cfg.channels));
    return cl_nn_head_loss_forward(m, mb, &h, w.head_w ? w.head_w : m->p[d->tied_wte]);
}

/* The tied weight's gradient as GPT's head takes it (its own under cl_model_split_tied), or lm_head's own. */
static cl_status llama_head_backward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                                     float *const *p, float *const *g, const float *dout, float *din, int what) {
    (void)dout; /* the loss's own gradient is mb->dloss */
    const cl_model_desc *d = m->desc;
    int ww = what & CL_BWD_WEIGHT;
    llama_head_weights w = {0}, gw = {0};
    cl_kind_bind(llama_head_table(un), p, &w);
    cl_kind_bind(llama_head_table(un), g, &gw);
    int64_t N = (int64_t)mb->B * mb->T, Ns = cl_nn_rows_here(d, N);
    int iC = (int)d->cfg.channels;
    cl_head_acts h = cl_nn_head_layout(d, base, N, 0);
    const float *wv = w.head_w ? w.head_w : m->p[d->tied_wte];
    float *dwv = w.head_w ? gw.head_w : m->head_wte_g ? m->head_wte_g : m->g[d->tied_wte];
    const float *dl;
    CL_TRY(cl_nn_head_loss_backward(m, mb, &h, wv, dwv, ww, &dl));
    if (ww) CL_PROF("bwd rmsnorm w", 0, cl_kern(m)->rmsnorm_backward_weight(gw.norm_w, dl, in, h.rstd, (int)Ns, iC));
    if (din) CL_PROF("bwd rmsnorm", 0, cl_kern(m)->rmsnorm_backward_input(din, dl, in, w.norm_w, h.rstd, (int)Ns, iC));
    return CL_OK;
}

static const float *llama_head_logits(const cl_model *m, const cl_acts *a, int u, int B, int T) {
    return cl_nn_head_layout(m->desc, a->base + a->off[u - m->u0], (int64_t)B * T, 0).logits;
}

static void llama_head_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal, cl_unit_cost *o) {
    cl_kind_lmhead.cost(d, un, B, e, recompute, causal, o);
}

/* Generation's step (nn/decode.c): model.norm of each sample's last row only, its logits. */
static cl_status llama_head_decode(cl_model *m, const cl_unit *un, const cl_decode_step *st, const float *in, float *out,
                                   float *const *p) {
    (void)out;
    const cl_model_desc *d = m->desc;
    llama_head_weights w = {0};
    cl_kind_bind(llama_head_table(un), p, &w);
    int C = d->cfg.channels;
    float *rows = st->ws, *lnf = rows + (int64_t)st->B * C, *rstd = lnf + (int64_t)st->B * C;
    cl_nn_decode_last_rows(m, st, in, rows);
    cl_kern(m)->rmsnorm_forward(lnf, rstd, rows, w.norm_w, (float)d->cfg.rms_norm_eps, st->B, C);
    cl_nn_decode_logits(m, st, lnf, w.head_w ? w.head_w : m->p[d->tied_wte]);
    return CL_OK;
}

const cl_kind cl_kind_llama_head = {
    .name = "llama_head",
    .nparams = 1,
    .params = llama_head_params,
    .sizes = llama_head_sizes,
    .param = llama_head_param,
    .uses_tied = 1,
    .cost = llama_head_cost,
    .loss = CL_KIND_LOSS_TOKEN,
    .z3_reads = CL_KIND_READS(CL_Z3_FORWARD) | CL_KIND_READS(CL_Z3_BACKWARD),
    .wlo = CL_KIND_WLO_TIED, /* the logits' weight */
    .gfirst = CL_KIND_GFIRST_TIED, /* its gradient, the "bwd logits w" product (cl_nn_head_loss_backward) */
    .logits = llama_head_logits,
    .forward = llama_head_forward,
    .backward = llama_head_backward,
    .decode = llama_head_decode,
};

const cl_kind cl_kind_llama_head_untied = {
    .name = "llama_head_untied",
    .nparams = 2,
    .params = llama_head_params,
    .sizes = llama_head_sizes,
    .param = llama_head_param,
    .cost = llama_head_cost,
    .loss = CL_KIND_LOSS_TOKEN,
    .z3_reads = CL_KIND_READS(CL_Z3_FORWARD) | CL_KIND_READS(CL_Z3_BACKWARD),
    .wlo = CL_KIND_WLO(1), /* lm_head.weight, the logits' weight */
    .gfirst = CL_KIND_GFIRST(1), /* its gradient, the "bwd logits w" product (cl_nn_head_loss_backward) */
    .logits = llama_head_logits,
    .forward = llama_head_forward,
    .backward = llama_head_backward,
    .decode = llama_head_decode,
};
