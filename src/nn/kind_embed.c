/* The GPT-2 embedding as a unit kind (kind.h): tokens -> wte[token] +
 * wpe[position]. Written once for a vocabulary slice: this rank's rows
 * [v0, v0 + Vl) of wte for its tokens, zero for the others, summed over the
 * tensor-parallel group (each position is nonzero on one rank only, so the
 * sum is exact), then the positions of this rank's token rows. One rank
 * holds every row and its sum is the identity: the same adds, the same
 * bits as a plain lookup.
 *
 * The Llama embedding (cl_kind_token_embed) is the same unit without
 * learned positions: one parameter, model.embed_tokens.weight [vocab, C],
 * the same sizes and cost less the positions' reads, and the same passes
 * (embed_forward and embed_backward skip the positions when the unit's
 * table has none: wpe NULL). */
#include "nn/cp.h"
#include "nn/kind.h"
#include "nn/model_impl.h"

#include "cleave/prof.h"

typedef struct {
    float *wte, *wpe;
} embed_weights;

#define F(x) offsetof(embed_weights, x)
static const cl_kind_param embed_params[] = {
    {"wte.weight", F(wte), CL_TPS_VOCAB, 1, CL_INIT_NORMAL, 1},
    {"wpe.weight", F(wpe), CL_TPS_REPLICATED, 1, CL_INIT_NORMAL, 0},
};

/* The output (this rank's token rows of C), kept as it is; sequence
 * parallelism's scratch: the whole lookup before its reduce-scatter, and
 * the output gradient gathered. */
static void embed_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    int64_t T = d->T, C = d->cfg.channels, Ts = d->tpl.sp ? T / d->tpl.tp : T;
    un->out_floats = cl_size_mul(z, Ts, C);
    un->act_floats = un->out_floats;
    un->scratch_floats = d->tpl.sp ? cl_size_mul(z, T, C) : 0;
}

static const cl_kind_param token_embed_params[] = {
    {"model.embed_tokens.weight", F(wte), CL_TPS_VOCAB, 1, CL_INIT_NORMAL, 1},
};

/* wte [vocab, C], wpe [context, C]: normal(0, 0.02) (the token embedding: its wte only) */
static void embed_param(const cl_model_desc *d, const cl_unit *un, int i, cl_param_shape *o) {
    o->ndim = 2;
    (void)un;
    o->shape[0] = i == 0 ? d->cfg.vocab : d->cfg.seq_len; /* wte first in both tables */
    o->shape[1] = d->cfg.channels;
    o->scale = 0.02f;
}

/* This unit's table, of the two in this file: asked here, not through kinds.c, which calls into this file. */
static const cl_kind *embed_table(const cl_unit *un) {
    return un->kind == CL_UNIT_TOKEN_EMBED ? &cl_kind_token_embed : &cl_kind_embed;
}

static cl_status embed_forward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *out,
                               float *const *p) {
    (void)in;
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)mb->B * mb->T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels;
    int V = d->cfg.vocab;
    for (int64_t i = 0; i < N; i++)
        if (mb->tokens[i] < 0 || mb->tokens[i] >= V)
            return cl_error(CL_ERR_INVALID, "token %d at position %lld is outside the vocabulary (%d)", mb->tokens[i], (long long)i, V);
    embed_weights w = {0};
    cl_kind_bind(embed_table(un), p, &w);
    float *full = d->tpl.sp ? m->scratch : out;
    CL_PROF("fwd embedding", 0, cl_kern(m)->embedding_lookup(full, mb->tokens, w.wte, N, C, d->vocab_start, d->vocab_local));
    if (d->tpl.sp) CL_TRY(cl_tp_forward(&m->tp, CL_TP_SCATTER, full, out, (size_t)(Ns * C)));
    else CL_TRY(cl_tp_forward(&m->tp, CL_TP_REDUCE, out, out, (size_t)(N * C)));
    int64_t row0 = d->tpl.sp ? Ns * m->tp.rank : 0; /* this rank's first row of the flattened [B, T] */
    if (w.wpe && cl_nn_cp_size(m) > 1) CL_PROF("fwd embedding", 0, cl_nn_cp_positions_forward(m, out, w.wpe, Ns, row0, mb->T, C));
    else if (w.wpe) CL_PROF("fwd embedding", 0, cl_kern(m)->embedding_add_positions(out, w.wpe, Ns, row0, mb->T, C));
    return CL_OK;
}

/* The weight gradient: every token row's output gradient (gathered under
 * sequence parallelism), into this rank's wte rows and into wpe (if any). There is
 * no input gradient. */
static cl_status embed_backward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                                float *const *p, float *const *g, const float *dout, float *din, int what) {
    (void)in, (void)base, (void)p, (void)din;
    if (!(what & CL_BWD_WEIGHT)) return CL_OK;
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)mb->B * mb->T, C = d->cfg.channels, v0 = d->vocab_start, Vl = d->vocab_local;
    embed_weights gw = {0};
    cl_kind_bind(embed_table(un), g, &gw);
    const float *df = dout;
    if (d->tpl.sp) {
        CL_TRY(cl_tp_backward(&m->tp, CL_TP_SCATTER, dout, m->scratch, (size_t)(cl_nn_rows_here(d, N) * C)));
        df = m->scratch;
    }
    int cp = cl_nn_cp_size(m) > 1; /* positions at their places in the whole sequence */
    CL_PROF("bwd embedding", 0, cl_kern(m)->embedding_backward_slice(gw.wte, cp ? NULL : gw.wpe, df, mb->tokens, N, mb->T, C, v0, Vl));
    if (cp && gw.wpe) CL_PROF("bwd embedding", 0, cl_nn_cp_positions_backward(m, gw.wpe, df, mb->B, mb->T, C));
    return CL_OK;
}

/* Generation's step (nn/decode.c): this rank's rows of wte for the new tokens, summed over the group, then
 * (GPT) each sample's positions pos0 .. pos0 + n - 1. The tokens were checked by the decoder. */
static cl_status embed_decode(cl_model *m, const cl_unit *un, const cl_decode_step *st, const float *in, float *out,
                              float *const *p) {
    (void)in;
    const cl_model_desc *d = m->desc;
    int64_t n = st->n, N = (int64_t)st->B * n, C = d->cfg.channels;
    embed_weights w = {0};
    cl_kind_bind(embed_table(un), p, &w);
    cl_kern(m)->embedding_lookup(out, st->tokens, w.wte, N, C, d->vocab_start, d->vocab_local);
    CL_TRY(cl_tp_forward(&m->tp, CL_TP_REDUCE, out, out, (size_t)(N * C)));
    for (int b = 0; w.wpe && b < st->B; b++) cl_kern(m)->embedding_add_positions(out + b * n * C, w.wpe, n, st->pos0, st->Tmax, C);
    return CL_OK;
}

/* The planner's cost (nn/cost.h). */
static void embed_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal, cl_unit_cost *o) {
    (void)recompute, (void)causal;
    double R = (double)B * d->T, C = d->cfg.channels, positions = un->kind == CL_UNIT_EMBED;
    int tp = d->tpl.tp, sp = d->tpl.sp;
    /* lookup of the rank's rows (+ positions: read 2, write 1 per element) */
    o->pass[CL_PASS_F].bytes = e * (2 + positions) * R * C;
    cl_cost_coll(&o->pass[CL_PASS_F], sp ? CL_COLL_REDUCE_SCATTER : CL_COLL_ALLREDUCE, R * C * e, tp);
    /* the gradient's scatter-add into wte's and wpe's rows: read dy, read and write the rows */
    o->pass[CL_PASS_W].bytes = e * 4 * R * C;
    if (sp) cl_cost_coll(&o->pass[CL_PASS_W], CL_COLL_ALLGATHER, R * C * e, tp);
}

const cl_kind cl_kind_embed = {
    .name = "embed",
    .nparams = 2,
    .params = embed_params,
    .sizes = embed_sizes,
    .param = embed_param,
    .cost = embed_cost,
    .z3_reads = CL_KIND_READS(CL_Z3_FORWARD), /* its backward reads only tokens and gradients */
    .forward = embed_forward,
    .backward = embed_backward,
    .decode = embed_decode,
};

const cl_kind cl_kind_token_embed = {
    .name = "token_embed",
    .nparams = 1,
    .params = token_embed_params,
    .sizes = embed_sizes,
    .param = embed_param,
    .cost = embed_cost,
    .z3_reads = CL_KIND_READS(CL_Z3_FORWARD),
    .forward = embed_forward,
    .backward = embed_backward,
    .decode = embed_decode,
};
