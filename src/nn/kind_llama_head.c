/* The Llama head with its loss as unit kinds (kind.h): model.norm (RMSNorm,
 * no bias), logits against the vocabulary's [vocab, C] weight, softmax
 * cross-entropy per token row; the weight is the embedding's
 * (tie_word_embeddings, cl_kind_llama_head: d->tied_wte as GPT's head) or
 * its own lm_head.weight (cl_kind_llama_head_untied), split by vocabulary
 * rows as the embedding is. Its sizes and cost are the GPT head's
 * (kind_head.c, reached through its table), less the layernorm's mean: an
 * RMSNorm keeps one statistic per row. Its forward and backward are not
 * written yet (the family refuses to build the model).
 *
 * Invariants: parameters in checkpoint order (model.norm.weight, then
 * lm_head.weight when untied), Hugging Face's names and shapes. */
#include "nn/kind.h"

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

static void llama_head_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal, cl_unit_cost *o) {
    cl_kind_lmhead.cost(d, un, B, e, recompute, causal, o);
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
};
