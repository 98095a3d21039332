/* The GPT-2 block, pre-LN: x + attn(ln_1(x)), then + mlp(ln_2(.)), as one
 * unit kind (kind.h). Megatron-LM's tensor-parallel split is written once
 * for a group of any size (one rank is the whole block, its collectives the
 * identity): c_attn column-parallel by heads, attention on this rank's
 * heads, attn.c_proj row-parallel; c_fc column-parallel, mlp.c_proj
 * row-parallel; under sequence parallelism the layernorms and residuals
 * hold 1/tp of the token rows. Recomputation (selective: the scores; full:
 * everything but the output) re-runs the forward's own kernels, so the
 * bits do not change.
 *
 * Weights by name (block_weights, bound from the table below); saved
 * activations laid out from the actual B and T (block_layout_at). */
#include "nn/kind.h"

#include "cleave/prof.h"

#include <math.h>
#include <string.h>

typedef struct {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *attn_proj_w, *attn_proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b, *fc_proj_w, *fc_proj_b;
} block_weights;

#define F(x) offsetof(block_weights, x)
static const cl_kind_param block_params[] = {
    {"ln_1.weight", F(ln1_w), CL_TPS_NORM, 0, CL_INIT_ONES, 0},
    {"ln_1.bias", F(ln1_b), CL_TPS_NORM, 0, CL_INIT_ZEROS, 0},
    {"attn.c_attn.weight", F(qkv_w), CL_TPS_HEADS, 1, CL_INIT_NORMAL, 0},
    {"attn.c_attn.bias", F(qkv_b), CL_TPS_HEADS, 0, CL_INIT_ZEROS, 0},
    {"attn.c_proj.weight", F(attn_proj_w), CL_TPS_ROWS, 1, CL_INIT_NORMAL, 0},
    {"attn.c_proj.bias", F(attn_proj_b), CL_TPS_REPLICATED, 0, CL_INIT_ZEROS, 0},
    {"ln_2.weight", F(ln2_w), CL_TPS_NORM, 0, CL_INIT_ONES, 0},
    {"ln_2.bias", F(ln2_b), CL_TPS_NORM, 0, CL_INIT_ZEROS, 0},
    {"mlp.c_fc.weight", F(fc_w), CL_TPS_COLUMNS, 1, CL_INIT_NORMAL, 0},
    {"mlp.c_fc.bias", F(fc_b), CL_TPS_COLUMNS, 0, CL_INIT_ZEROS, 0},
    {"mlp.c_proj.weight", F(fc_proj_w), CL_TPS_ROWS, 1, CL_INIT_NORMAL, 0},
    {"mlp.c_proj.bias", F(fc_proj_b), CL_TPS_REPLICATED, 0, CL_INIT_ZEROS, 0},
};
enum { NPARAMS = sizeof block_params / sizeof block_params[0] };

/* Whole shapes (HF GPT-2's, linear weights [in, out]): normal(0, 0.02), the
 * residual projections scaled by 1/sqrt(2 x layers); biases and layernorms
 * start at their constants (scale 0). */
static void block_param(const cl_model_desc *d, const cl_unit *un, int i, cl_param_shape *o) {
    (void)un;
    int64_t C = d->cfg.channels;
    size_t f = block_params[i].field;
    int weight = block_params[i].decay; /* the matrices */
    int64_t in = f == F(fc_proj_w) ? 4 * C : C;
    int64_t out = f == F(qkv_w) || f == F(qkv_b) ? 3 * C : f == F(fc_w) || f == F(fc_b) ? 4 * C : C;
    o->ndim = weight ? 2 : 1;
    o->shape[0] = weight ? in : out;
    o->shape[1] = out;
    o->scale = !weight ? 0 : f == F(attn_proj_w) || f == F(fc_proj_w) ? 0.02f / sqrtf(2.0f * (float)d->cfg.layers) : 0.02f;
}

/* One block's attention scores at micro-batch B: this rank's heads. */
static int64_t block_scores(const cl_model_desc *d, int B) { return (int64_t)B * d->heads_local * d->T * d->T; }

typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *out;
} block_acts;

/* A block's saved activations from base, for the actual B and T: rows Ns of
 * C (token rows: ln1, res2, ln2, out and the layernorm statistics) and N
 * rows of this rank's Cl columns (qkv, atty, fch, fch_gelu). att_apart: the
 * scores live elsewhere (selective recompute), not in base. */
static block_acts block_layout_at(const cl_model_desc *d, float *base, int64_t B, int64_t T, float *att_apart) {
    int64_t N = B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local;
    block_acts b;
    float *p = base;
    b.ln1 = p; p += Ns * C;
    b.ln1_mean = p; p += Ns;
    b.ln1_rstd = p; p += Ns;
    b.qkv = p; p += N * 3 * Cl;
    if (att_apart) b.att = att_apart;
    else b.att = p, p += block_scores(d, (int)B);
    b.atty = p; p += N * Cl;
    b.res2 = p; p += Ns * C;
    b.ln2 = p; p += Ns * C;
    b.ln2_mean = p; p += Ns;
    b.ln2_rstd = p; p += Ns;
    b.fch = p; p += N * 4 * Cl;
    b.fch_gelu = p; p += N * 4 * Cl;
    b.out = p;
    return b;
}

/* A block's activations under the model's recompute mode: base is the
 * block's saved share of a micro-batch's cl_acts. */
static block_acts block_acts_of(const cl_model *m, float *base, int64_t B, int64_t T) {
    const cl_model_desc *d = m->desc;
    if (m->recompute == CL_RECOMPUTE_SELECTIVE) return block_layout_at(d, base, B, T, m->rc_buf);
    if (m->recompute == CL_RECOMPUTE_FULL) {
        block_acts b = block_layout_at(d, m->rc_buf, B, T, NULL);
        b.out = base; /* the one thing kept */
        return b;
    }
    return block_layout_at(d, base, B, T, NULL);
}

/* A GPT block (Megatron-LM's split, written once for a tensor-parallel
 * group of any size; one rank is the whole block): c_attn column-parallel
 * by heads, attention on this rank's heads, attn.c_proj row-parallel; c_fc
 * column-parallel, mlp.c_proj row-parallel. The forward temporaries
 * (gathered rows, partial sums) live in the part's scratch. */
static cl_status block_pass(const cl_model *m, const block_acts *s, const float *in, const block_weights *w, int B, int T) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local;
    float *G = m->scratch;
    double fl = 2.0 * (double)N * C * Cl, att = 4.0 * (double)B * T * T * Cl;
    const float *x;
    CL_PROF("fwd layernorm", 0, cl_kern(m)->layernorm_forward(s->ln1, s->ln1_mean, s->ln1_rstd, in, w->ln1_w, w->ln1_b, (int)Ns, (int)C));
    CL_TRY(cl_nn_col_input(m, s->ln1, G, Ns, C, &x));
    CL_PROF("fwd qkv", 3 * fl, cl_kern(m)->linear_forward(s->qkv, x, w->qkv_w, w->qkv_b, (int)N, (int)C, (int)(3 * Cl)));
    CL_PROF("fwd attention", att, cl_kern(m)->attention_forward(s->atty, s->att, s->qkv, B, T, (int)Cl, d->heads_local));
    CL_TRY(cl_nn_row_linear(m, "fwd attn proj", fl, s->atty, w->attn_proj_w, w->attn_proj_b, s->res2, N, Cl));
    CL_PROF("fwd residual layernorm", 0,
            cl_kern(m)->residual_layernorm_forward(s->res2, s->ln2, s->ln2_mean, s->ln2_rstd, s->res2, in, w->ln2_w, w->ln2_b, (int)Ns, (int)C));
    CL_TRY(cl_nn_col_input(m, s->ln2, G, Ns, C, &x));
    /* c_fc without its bias, then bias + GELU in one pass */
    CL_PROF("fwd fc", 4 * fl, cl_sgemm(cl_kern(m), 0, 0, (int)N, (int)(4 * Cl), (int)C, 1.0f, x, (int)C, w->fc_w, (int)(4 * Cl), 0.0f, s->fch, (int)(4 * Cl)));
    CL_PROF("fwd bias gelu", 0, cl_kern(m)->bias_gelu_forward(s->fch_gelu, s->fch, w->fc_b, (int)N, (int)(4 * Cl)));
    CL_TRY(cl_nn_row_linear(m, "fwd fc proj", 4 * fl, s->fch_gelu, w->fc_proj_w, w->fc_proj_b, s->out, N, 4 * Cl));
    CL_PROF("fwd residual", 0, cl_kern(m)->add_inplace(s->out, s->res2, Ns * C));
    return CL_OK;
}

static int64_t block_keep(const cl_model_desc *d, const cl_unit *un, int B) {
    (void)un;
    if (d->tpl.tp == 1) return 0;
    int64_t N = (int64_t)B * d->T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels;
    /* not sequence-parallel: dln2, dln1 after their all-reduces; sequence-parallel: dout and dres2 gathered,
     * dln2 and dln1 reduce-scattered */
    return d->tpl.sp ? 2 * N * C + 2 * Ns * C : 2 * N * C;
}

/* A tensor-parallel collective's result in a backward: computed by run()
 * (and kept in *keep when the input pass of a split backward keeps it), or,
 * in the weight pass of a split backward, read back from *keep instead of
 * running the collective again. keep advances by n either way. */
typedef struct {
    float *keep;   /* m->tp_keep: NULL when the backward is not split */
    int wonly;     /* the weight pass */
    cl_device *dev;
} keep_cursor;

static const float *kept(keep_cursor *k, const float *computed, int64_t n, int computing) {
    const float *r = computed;
    if (k->keep) {
        if (!computing) r = k->keep;
        else cl_device_copy(k->dev, k->keep, computed, (size_t)n * sizeof(float));
        k->keep += n;
    }
    return r;
}

/* The block's backward (the forward's split, written once). The scratch
 * gradients are assigned where first written (beta 0), so only dqkv, which
 * attention's backward adds into, starts at zero. */
static cl_status block_backward_pass(cl_model *m, const block_acts *s, const float *in, const block_weights *w,
                                     const block_weights *gw, const float *dout, float *din, int wi, int ww, int B, int T) {
    const cl_model_desc *d = m->desc;
    const cl_tp *tp = &m->tp;
    int sp = d->tpl.sp, split = d->tpl.tp > 1;
    int64_t N = (int64_t)B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local;
    int iN = (int)N, iNs = (int)Ns, iC = (int)C, iCl = (int)Cl;
    /* a split group's weight pass reads the input pass's collective results back (tp_keep); one rank has no
     * collective to keep and computes its input gradients again (cl_unit_keep_floats is 0 there) */
    keep_cursor k = {split ? m->tp_keep : NULL, ww && !wi && split, m->dev};
    if (k.wonly && !k.keep) return cl_error(CL_ERR_INTERNAL, "a tensor-parallel weight pass without the input pass's results");
    int run = !k.wonly; /* run the collectives (not the weight pass of a split backward) */
    float *ws = m->scratch;
    float *dres2 = ws; ws += Ns * C;
    float *dfchg = ws; ws += 4 * N * Cl;
    float *dln2 = ws; ws += N * C;
    float *datty = ws; ws += N * Cl;
    float *dqkv = ws; ws += 3 * N * Cl;
    float *dln1 = ws; ws += N * C;
    float *dof = NULL, *dr2f = NULL, *G = NULL, *dln2s = NULL, *dln1s = NULL;
    if (sp) {
        dof = ws; ws += N * C;
        dr2f = ws; ws += N * C;
        G = ws; ws += N * C;
        dln2s = ws; ws += Ns * C;
        dln1s = ws; ws += Ns * C;
    }
    float *attscratch = ws;
    CL_ASSERT(attscratch + block_scores(d, B) <= m->scratch + m->sizes.scratch);
    double fl = 2.0 * (double)N * C * Cl, att = 4.0 * (double)B * T * T * Cl;
    const float *x;
    CL_PROF("bwd zero", 0, cl_device_fill(m->dev, dqkv, 0, (size_t)(3 * N * Cl) * sizeof(float)));
    CL_PROF("bwd residual", 0, cl_device_copy(m->dev, dres2, dout, (size_t)(Ns * C) * sizeof(float)));
    /* mlp.c_proj, row-parallel: the gradient of its output on every token row (the transpose of the
     * forward's reduce-scatter under sequence parallelism, else the same on every rank) */
    const float *dO = dout;
    if (sp) {
        if (run) CL_TRY(cl_tp_backward(tp, CL_TP_SCATTER, dout, dof, (size_t)(Ns * C)));
        dO = kept(&k, dof, N * C, run);
    }
    CL_PROF("bwd fc proj", 4 * fl, cl_sgemm(cl_kern(m), 0, 1, iN, 4 * iCl, iC, 1.0f, dO, iC, w->fc_proj_w, iC, 0.0f, dfchg, 4 * iCl));
    if (ww) CL_PROF("bwd fc proj w", 4 * fl, cl_kern(m)->linear_backward_weight(gw->fc_proj_w, gw->fc_proj_b, dO, s->fch_gelu, iN, 4 * iCl, iC));
    CL_PROF("bwd gelu", 0, cl_kern(m)->gelu_backward_set(dfchg, dfchg, s->fch, 4 * N * Cl));
    /* c_fc, column-parallel: the input gradient is a partial sum over the ranks' columns */
    const float *dl2 = NULL;
    if (run) {
        CL_PROF("bwd fc", 4 * fl, cl_sgemm(cl_kern(m), 0, 1, iN, iC, 4 * iCl, 1.0f, dfchg, 4 * iCl, w->fc_w, 4 * iCl, 0.0f, dln2, iC));
        if (sp) CL_TRY(cl_tp_backward(tp, CL_TP_GATHER, dln2, dln2s, (size_t)(Ns * C)));
        else CL_TRY(cl_tp_backward(tp, CL_TP_COPY, dln2, dln2, (size_t)(N * C)));
    }
    dl2 = kept(&k, sp ? dln2s : dln2, Ns * C, run);
    if (ww) {
        CL_TRY(cl_nn_col_input(m, s->ln2, G, Ns, C, &x)); /* sequence-parallel: gathered again, not kept */
        CL_PROF("bwd fc w", 4 * fl, cl_kern(m)->linear_backward_weight(gw->fc_w, gw->fc_b, dfchg, x, iN, iC, 4 * iCl));
    }
    CL_PROF("bwd layernorm", 0, cl_kern(m)->layernorm_backward_input(dres2, dl2, s->res2, w->ln2_w, s->ln2_mean, s->ln2_rstd, iNs, iC));
    if (ww) CL_PROF("bwd layernorm w", 0, cl_kern(m)->layernorm_backward_weight(gw->ln2_w, gw->ln2_b, dl2, s->res2, s->ln2_mean, s->ln2_rstd, iNs, iC));
    /* attn.c_proj, row-parallel */
    const float *dR = dres2;
    if (sp) {
        if (run) CL_TRY(cl_tp_backward(tp, CL_TP_SCATTER, dres2, dr2f, (size_t)(Ns * C)));
        dR = kept(&k, dr2f, N * C, run);
    }
    CL_PROF("bwd attn proj", fl, cl_sgemm(cl_kern(m), 0, 1, iN, iCl, iC, 1.0f, dR, iC, w->attn_proj_w, iC, 0.0f, datty, iCl));
    if (ww) CL_PROF("bwd attn proj w", fl, cl_kern(m)->linear_backward_weight(gw->attn_proj_w, gw->attn_proj_b, dR, s->atty, iN, iCl, iC));
    CL_PROF("bwd attention", 2 * att, cl_kern(m)->attention_backward(dqkv, attscratch, datty, s->qkv, s->att, B, T, iCl, d->heads_local));
    if (ww) {
        CL_TRY(cl_nn_col_input(m, s->ln1, G, Ns, C, &x));
        CL_PROF("bwd qkv w", 3 * fl, cl_kern(m)->linear_backward_weight(gw->qkv_w, gw->qkv_b, dqkv, x, iN, iC, 3 * iCl));
    }
    /* c_attn, column-parallel by heads */
    const float *dl1 = NULL;
    if (run) {
        CL_PROF("bwd qkv", 3 * fl, cl_sgemm(cl_kern(m), 0, 1, iN, iC, 3 * iCl, 1.0f, dqkv, 3 * iCl, w->qkv_w, 3 * iCl, 0.0f, dln1, iC));
        if (sp) CL_TRY(cl_tp_backward(tp, CL_TP_GATHER, dln1, dln1s, (size_t)(Ns * C)));
        else CL_TRY(cl_tp_backward(tp, CL_TP_COPY, dln1, dln1, (size_t)(N * C)));
    }
    dl1 = kept(&k, sp ? dln1s : dln1, Ns * C, run);
    if (ww) CL_PROF("bwd layernorm w", 0, cl_kern(m)->layernorm_backward_weight(gw->ln1_w, gw->ln1_b, dl1, in, s->ln1_mean, s->ln1_rstd, iNs, iC));
    if (din) {
        CL_PROF("bwd layernorm", 0, cl_kern(m)->layernorm_backward_input(din, dl1, in, w->ln1_w, s->ln1_mean, s->ln1_rstd, iNs, iC));
        CL_PROF("bwd residual", 0, cl_kern(m)->add_inplace(din, dres2, Ns * C));
    }
    return CL_OK;
}

/* Per sample, this rank's share (Cl = C/tp columns, NHl = NH/tp heads; Ts
 * = T/tp token rows under sequence parallelism, else T). Saved: ln1, res2,
 * ln2, out (token rows) and their 2 x 2 means and rstds; qkv (3), atty (1),
 * fch (4), fch_gelu (4) (columns); the scores (block_layout_at). Backward
 * workspace (block_backward_pass): dres2, dfc, dln2, datty, dqkv, dln1;
 * sequence parallelism adds the gathered dout, dres2 and layernorm output
 * and the three scattered shards; then attention's scratch (scores). */
static void block_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    int tp = d->tpl.tp, sp = d->tpl.sp;
    int64_t T = d->T, C = d->cfg.channels, Cl = C / tp, NHl = d->cfg.heads / tp, Ts = sp ? T / tp : T;
    un->in_floats = cl_size_mul(z, Ts, C);
    un->out_floats = un->in_floats;
    int64_t scores = cl_size_mul(z, cl_size_mul(z, NHl, T), T);
    un->act_floats = cl_size_add(z, cl_size_add(z, cl_size_mul(z, Ts, 4 * C + 4), cl_size_mul(z, T, 12 * Cl)), scores);
    int64_t ws = sp ? cl_size_add(z, cl_size_mul(z, T, 5 * C + 8 * Cl), cl_size_mul(z, Ts, 3 * C)) : cl_size_mul(z, T, 3 * C + 8 * Cl);
    un->scratch_floats = cl_size_add(z, ws, scores);
    un->flops = (2.0 * (double)T * 12.0 * (double)C * (double)C + 4.0 * (double)T * (double)T * (double)C) / tp;
}

static int64_t block_act_floats(const cl_model_desc *d, const cl_unit *un, int B, int recompute) {
    if (recompute == CL_RECOMPUTE_FULL) return un->out_floats * B;
    int64_t n = un->act_floats * B;
    return recompute == CL_RECOMPUTE_SELECTIVE ? n - block_scores(d, B) : n;
}

static int64_t block_rc_floats(const cl_model_desc *d, const cl_unit *un, int B, int recompute) {
    return recompute == CL_RECOMPUTE_FULL ? un->act_floats * B : recompute == CL_RECOMPUTE_SELECTIVE ? block_scores(d, B) : 0;
}

static float *block_output(const cl_model *m, float *base, int B, int T) { return block_acts_of(m, base, B, T).out; }

static cl_status block_forward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                               float *const *p) {
    (void)un;
    block_weights w;
    cl_kind_bind(&cl_kind_block, p, &w);
    block_acts s = block_acts_of(m, base, mb->B, mb->T);
    return block_pass(m, &s, in, &w, mb->B, mb->T);
}

static cl_status block_backward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                                float *const *p, float *const *g, const float *dout, float *din, int what) {
    (void)un;
    block_weights w, gw;
    cl_kind_bind(&cl_kind_block, p, &w);
    cl_kind_bind(&cl_kind_block, g, &gw);
    int B = mb->B, T = mb->T;
    block_acts s = block_acts_of(m, base, B, T);
    /* what the forward did not keep, recomputed bit for bit (the output it writes again is the same) */
    if (m->recompute == CL_RECOMPUTE_FULL) CL_TRY(block_pass(m, &s, in, &w, B, T));
    else if (m->recompute == CL_RECOMPUTE_SELECTIVE)
        cl_kern(m)->attention_forward(s.atty, s.att, s.qkv, B, T, m->desc->channels_local, m->desc->heads_local);
    return block_backward_pass(m, &s, in, &w, &gw, dout, din, what & CL_BWD_INPUT, what & CL_BWD_WEIGHT, B, T);
}

const cl_kind cl_kind_block = {
    .name = "block",
    .prefixed = 1,
    .nparams = NPARAMS,
    .params = block_params,
    .sizes = block_sizes,
    .param = block_param,
    .act_floats = block_act_floats,
    .rc_floats = block_rc_floats,
    .keep_floats = block_keep,
    .z3_reads = CL_KIND_READS_ALL, /* its weight pass re-derives the interior's gradients */
    .output = block_output,
    .forward = block_forward,
    .backward = block_backward,
};
