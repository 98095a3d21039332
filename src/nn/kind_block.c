/* The GPT-2 block, pre-LN: x + attn(ln_1(x)), then + mlp(ln_2(.)), as one
 * unit kind (kind.h). Megatron-LM's tensor-parallel split is written once
 * for a group of any size (one rank is the whole block, its collectives the
 * identity): c_attn column-parallel by heads, attention on this rank's
 * heads, attn.c_proj row-parallel; c_fc column-parallel, mlp.c_proj
 * row-parallel; under sequence parallelism the layernorms and residuals
 * hold 1/tp of the token rows. Attention is blockwise (flash.c): the block
 * keeps its output and each score row's log-sum-exp, never the T x T
 * scores, and its backward recomputes the score tiles. Recomputation
 * (selective: the attention's lse, from the saved qkv, as Megatron-LM's
 * core-attention recompute keeps only the attention's inputs and output;
 * full: everything but the output) re-runs the forward's own kernels, so
 * the bits do not change.
 *
 * Weights by name (block_weights, bound from the table below); saved
 * activations laid out from the actual B and T (block_layout_at). */
#include "nn/cp.h"
#include "nn/kind.h"
#include "nn/model_impl.h"

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
    /* c_attn: the query's C columns, then the key's and the value's K = kv_heads x C / heads each; the MLP F wide */
    int64_t C = d->cfg.channels, K = (int64_t)cl_model_kv_heads(&d->cfg) * (C / d->cfg.heads), Fw = cl_model_mlp_width(&d->cfg);
    size_t f = block_params[i].field;
    int weight = block_params[i].decay; /* the matrices */
    int64_t in = f == F(fc_proj_w) ? Fw : C;
    int64_t out = f == F(qkv_w) || f == F(qkv_b) ? C + 2 * K : f == F(fc_w) || f == F(fc_b) ? Fw : C;
    o->ndim = weight ? 2 : 1;
    o->shape[0] = weight ? in : out;
    o->shape[1] = out;
    o->scale = !weight ? 0 : f == F(attn_proj_w) || f == F(fc_proj_w) ? 0.02f / sqrtf(2.0f * (float)d->cfg.layers) : 0.02f;
}

/* What selective recompute drops and redoes at micro-batch B: the
 * attention's lse, B NHl T (its output, c_proj's input, stays saved). */
static int64_t block_lse_floats(const cl_model_desc *d, int B) { return (int64_t)B * d->heads_local * d->T; }

typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *lse, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *out;
} block_acts;

/* A block's saved activations from base, for the actual B and T: rows Ns of
 * C (token rows: ln1, res2, ln2, out and the layernorm statistics) and N
 * rows of this rank's columns (qkv: Cl + 2 Kl, atty: Cl, fch and fch_gelu:
 * Fl), and the attention's lse (B NHl T). lse_apart: the lse lives there
 * (selective recompute), not in base. */
static block_acts block_layout_at(const cl_model_desc *d, float *base, int64_t B, int64_t T, float *lse_apart) {
    int64_t N = B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local, Kl = d->kv_channels_local,
            Fl = d->mlp_local;
    block_acts b;
    float *p = base;
    int64_t lnC = cl_nn_gemm_in_floats(d, Ns * C); /* ln1, ln2 and fch_gelu: BF16 in bf16 (GEMM inputs only) */
    b.ln1 = p; p += lnC;
    b.ln1_mean = p; p += Ns;
    b.ln1_rstd = p; p += Ns;
    b.qkv = p; p += N * (Cl + 2 * Kl);
    b.atty = p; p += N * Cl;
    if (lse_apart) b.lse = lse_apart;
    else b.lse = p, p += B * d->heads_local * T;
    b.res2 = p; p += Ns * C;
    b.ln2 = p; p += lnC;
    b.ln2_mean = p; p += Ns;
    b.ln2_rstd = p; p += Ns;
    b.fch = p; p += N * Fl;
    b.fch_gelu = p; p += cl_nn_gemm_in_floats(d, N * Fl);
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
    int64_t N = (int64_t)B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local, Fl = d->mlp_local;
    int64_t Q = Cl + 2 * (int64_t)d->kv_channels_local; /* this rank's query, key and value columns */
    float *G = m->scratch;
    double fl = 2.0 * (double)N * C * Cl, flf = 2.0 * (double)N * C * Fl, fq = 2.0 * (double)N * C * Q, att = 4.0 * (double)B * T * T * Cl;
    const float *x;
    /* bf16: ln_1's, ln_2's and GELU's outputs written as BF16 into their saved slots by the kernels that compute them
     * (each value the F32 kernel's, rounded once); c_proj's input narrowed into the scratch; the GEMMs read BF16
     * (cl_nn_linear_lo, cl_nn_row_linear) */
    int lo = cl_nn_bf16(d);
    float *f32 = m->scratch;
    const float *ay = s->atty;
    if (lo)
        CL_PROF("fwd layernorm", 0,
                cl_kern(m)->layernorm_forward_bf16((uint16_t *)s->ln1, NULL, s->ln1_mean, s->ln1_rstd, in, w->ln1_w, w->ln1_b, (int)Ns, (int)C));
    else CL_PROF("fwd layernorm", 0, cl_kern(m)->layernorm_forward(s->ln1, s->ln1_mean, s->ln1_rstd, in, w->ln1_w, w->ln1_b, (int)Ns, (int)C));
    CL_TRY(cl_nn_col_input(m, s->ln1, G, Ns, C, &x));
    CL_PROF("fwd qkv", fq, lo ? cl_nn_linear_lo(m, s->qkv, x, w->qkv_w, w->qkv_b, N, C, Q)
                              : cl_kern(m)->linear_forward(s->qkv, x, w->qkv_w, w->qkv_b, (int)N, (int)C, (int)Q));
    CL_PROF("fwd attention", att, CL_TRY(cl_nn_attention_forward(m, s->atty, s->lse, s->qkv, B, T, (int)Cl, d->heads_local, d->heads_local)));
    if (lo) {
        CL_TRY(cl_nn_narrow(m, f32, s->atty, N * Cl));
        ay = f32;
    }
    CL_TRY(cl_nn_row_linear(m, "fwd attn proj", fl, ay, w->attn_proj_w, w->attn_proj_b, s->res2, N, Cl));
    if (lo)
        CL_PROF("fwd residual layernorm", 0,
                cl_kern(m)->residual_layernorm_forward_bf16(s->res2, (uint16_t *)s->ln2, NULL, s->ln2_mean, s->ln2_rstd, s->res2, in, w->ln2_w,
                                                            w->ln2_b, (int)Ns, (int)C));
    else
        CL_PROF("fwd residual layernorm", 0,
                cl_kern(m)->residual_layernorm_forward(s->res2, s->ln2, s->ln2_mean, s->ln2_rstd, s->res2, in, w->ln2_w, w->ln2_b, (int)Ns, (int)C));
    CL_TRY(cl_nn_col_input(m, s->ln2, G, Ns, C, &x));
    /* c_fc without its bias, then bias + GELU in one pass */
    CL_PROF("fwd fc", flf, lo ? cl_nn_linear_lo(m, s->fch, x, w->fc_w, NULL, N, C, Fl)
                              : cl_sgemm(cl_kern(m), 0, 0, (int)N, (int)Fl, (int)C, 1.0f, x, (int)C, w->fc_w, (int)Fl, 0.0f, s->fch, (int)Fl));
    if (lo) CL_PROF("fwd bias gelu", 0, cl_kern(m)->bias_gelu_forward_bf16((uint16_t *)s->fch_gelu, s->fch, w->fc_b, (int)N, (int)Fl));
    else CL_PROF("fwd bias gelu", 0, cl_kern(m)->bias_gelu_forward(s->fch_gelu, s->fch, w->fc_b, (int)N, (int)Fl));
    CL_TRY(cl_nn_row_linear(m, "fwd fc proj", flf, s->fch_gelu, w->fc_proj_w, w->fc_proj_b, s->out, N, Fl));
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

/* The block's backward (the forward's split, written once). The scratch
 * gradients are assigned where first written (beta 0), so only dqkv, which
 * attention's backward adds into, starts at zero. */
static cl_status block_backward_pass(cl_model *m, const block_acts *s, const float *in, const block_weights *w,
                                     const block_weights *gw, const float *dout, float *din, int wi, int ww, int B, int T) {
    const cl_model_desc *d = m->desc;
    const cl_tp *tp = &m->tp;
    int sp = d->tpl.sp, split = d->tpl.tp > 1;
    int64_t N = (int64_t)B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local, Fl = d->mlp_local;
    int64_t Q = Cl + 2 * (int64_t)d->kv_channels_local; /* this rank's query, key and value columns */
    int iN = (int)N, iNs = (int)Ns, iC = (int)C, iCl = (int)Cl, iFl = (int)Fl, iQ = (int)Q;
    /* a split group's weight pass reads the input pass's collective results back (tp_keep); one rank has no
     * collective to keep and computes its input gradients again (cl_unit_keep_floats is 0 there) */
    cl_nn_keep k = {split ? m->tp_keep : NULL, ww && !wi && split, m->dev};
    if (k.wonly && !k.keep) return cl_error(CL_ERR_INTERNAL, "a tensor-parallel weight pass without the input pass's results");
    int run = !k.wonly; /* run the collectives (not the weight pass of a split backward) */
    float *ws = m->scratch;
    float *dres2 = ws; ws += Ns * C;
    float *dfchg = ws; ws += N * Fl;
    float *dln2 = ws; ws += N * C;
    float *datty = ws; ws += N * Cl;
    float *dqkv = ws; ws += N * Q;
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
    /* bf16: at the workspace's end, the BF16 form of the gradient the next GEMMs read (L1) and of c_proj's
     * input (L2); the GEMMs read them and the weights' BF16 copy, the bias gradients the F32 gradient */
    int lo = cl_nn_bf16(d);
    int64_t wide = C > Fl ? (C > Q ? C : Q) : (Fl > Q ? Fl : Q);
    float *L2 = m->scratch + m->sizes.scratch - (lo ? cl_nn_bf16_floats(N * Cl) : 0), *L1 = L2 - (lo ? cl_nn_bf16_floats(N * wide) : 0);
    CL_ASSERT(attscratch + cl_flash_scratch_floats(B, T, iCl, d->heads_local) <= L1);
    /* bf16, with CLEAVE_WGRAD_PLAIN (cl_nn_dweight_src): c_fc's and c_attn's weight products read their input
     * transposed ([C, N] BF16, N C / 2 floats) from dln1, which nothing holds until c_attn's input gradient is written
     * after both (a split group's weight pass never writes it): the same bits as strided, no bytes of its own */
    void *xt = lo ? dln1 : NULL;
    double fl = 2.0 * (double)N * C * Cl, flf = 2.0 * (double)N * C * Fl, fq = 2.0 * (double)N * C * Q, att = 4.0 * (double)B * T * T * Cl;
    const float *x;
    CL_PROF("bwd zero", 0, cl_device_fill(m->dev, dqkv, 0, (size_t)(N * Q) * sizeof(float)));
    CL_PROF("bwd residual", 0, cl_device_copy(m->dev, dres2, dout, (size_t)(Ns * C) * sizeof(float)));
    /* mlp.c_proj, row-parallel: the gradient of its output on every token row (the transpose of the
     * forward's reduce-scatter under sequence parallelism, else the same on every rank) */
    const float *dO = dout;
    if (sp) {
        if (run) CL_TRY(cl_tp_backward(tp, CL_TP_SCATTER, dout, dof, (size_t)(Ns * C)));
        dO = cl_nn_kept(&k, dof, N * C, run);
    }
    if (lo) CL_TRY(cl_nn_narrow(m, L1, dO, N * C));
    CL_PROF("bwd fc proj", flf, lo ? cl_nn_gemm_lo(m, 0, 1, iN, iFl, iC, L1, iC, cl_nn_wlo(m, w->fc_proj_w), iC, 0.0f, dfchg, iFl)
                                   : cl_sgemm(cl_kern(m), 0, 1, iN, iFl, iC, 1.0f, dO, iC, w->fc_proj_w, iC, 0.0f, dfchg, iFl));
    if (ww) CL_PROF("bwd fc proj w", flf, lo ? cl_nn_linear_dweight_lo(m, gw->fc_proj_w, gw->fc_proj_b, dO, L1, s->fch_gelu, NULL, N, Fl, C)
                                             : cl_nn_linear_dweight(m, gw->fc_proj_w, gw->fc_proj_b, dO, s->fch_gelu, N, Fl, C));
    /* bf16: GELU's backward writes dfchg's BF16 form into L1 in the same pass */
    if (lo) CL_PROF("bwd gelu", 0, cl_kern(m)->gelu_backward_set_bf16(dfchg, (uint16_t *)L1, dfchg, s->fch, N * Fl));
    else CL_PROF("bwd gelu", 0, cl_kern(m)->gelu_backward_set(dfchg, dfchg, s->fch, N * Fl));
    /* c_fc, column-parallel: the input gradient is a partial sum over the ranks' columns */
    const float *dl2 = NULL;
    if (run) {
        CL_PROF("bwd fc", flf, lo ? cl_nn_gemm_lo(m, 0, 1, iN, iC, iFl, L1, iFl, cl_nn_wlo(m, w->fc_w), iFl, 0.0f, dln2, iC)
                                  : cl_sgemm(cl_kern(m), 0, 1, iN, iC, iFl, 1.0f, dfchg, iFl, w->fc_w, iFl, 0.0f, dln2, iC));
        if (sp) CL_TRY(cl_tp_backward(tp, CL_TP_GATHER, dln2, dln2s, (size_t)(Ns * C)));
        else CL_TRY(cl_tp_backward(tp, CL_TP_COPY, dln2, dln2, (size_t)(N * C)));
    }
    dl2 = cl_nn_kept(&k, sp ? dln2s : dln2, Ns * C, run);
    if (ww) {
        CL_TRY(cl_nn_col_input(m, s->ln2, G, Ns, C, &x)); /* sequence-parallel: gathered again, not kept */
        CL_PROF("bwd fc w", flf, lo ? cl_nn_linear_dweight_lo(m, gw->fc_w, gw->fc_b, dfchg, L1, x, xt, N, C, Fl)
                                    : cl_nn_linear_dweight(m, gw->fc_w, gw->fc_b, dfchg, x, N, C, Fl));
    }
    /* bf16, not sequence-parallel: the layernorm's backward finishes dres2 (attn.c_proj's output gradient) and writes
     * its BF16 form into L1 in the same pass (L1's dfchg read by the two GEMMs above) */
    int fuse = lo && !sp;
    if (fuse)
        CL_PROF("bwd layernorm", 0,
                cl_kern(m)->layernorm_backward_input_bf16(dres2, (uint16_t *)L1, dl2, s->res2, w->ln2_w, s->ln2_mean, s->ln2_rstd, iNs, iC));
    else CL_PROF("bwd layernorm", 0, cl_kern(m)->layernorm_backward_input(dres2, dl2, s->res2, w->ln2_w, s->ln2_mean, s->ln2_rstd, iNs, iC));
    if (ww) CL_PROF("bwd layernorm w", 0, cl_kern(m)->layernorm_backward_weight(gw->ln2_w, gw->ln2_b, dl2, s->res2, s->ln2_mean, s->ln2_rstd, iNs, iC));
    /* attn.c_proj, row-parallel */
    const float *dR = dres2;
    if (sp) {
        if (run) CL_TRY(cl_tp_backward(tp, CL_TP_SCATTER, dres2, dr2f, (size_t)(Ns * C)));
        dR = cl_nn_kept(&k, dr2f, N * C, run);
    }
    if (lo && !fuse) CL_TRY(cl_nn_narrow(m, L1, dR, N * C));
    if (lo && ww) CL_TRY(cl_nn_narrow(m, L2, s->atty, N * Cl));
    CL_PROF("bwd attn proj", fl, lo ? cl_nn_gemm_lo(m, 0, 1, iN, iCl, iC, L1, iC, cl_nn_wlo(m, w->attn_proj_w), iC, 0.0f, datty, iCl)
                                    : cl_sgemm(cl_kern(m), 0, 1, iN, iCl, iC, 1.0f, dR, iC, w->attn_proj_w, iC, 0.0f, datty, iCl));
    if (ww) CL_PROF("bwd attn proj w", fl, lo ? cl_nn_linear_dweight_lo(m, gw->attn_proj_w, gw->attn_proj_b, dR, L1, L2, NULL, N, Cl, C)
                                              : cl_nn_linear_dweight(m, gw->attn_proj_w, gw->attn_proj_b, dR, s->atty, N, Cl, C));
    /* the score tiles recomputed (q k^T, a third product) besides the four of the gradients */
    CL_PROF("bwd attention", 2.5 * att,
            CL_TRY(cl_nn_attention_backward(m, dqkv, attscratch, datty, s->qkv, s->atty, s->lse, B, T, iCl, d->heads_local, d->heads_local)));
    if (lo) CL_TRY(cl_nn_narrow(m, L1, dqkv, N * Q));
    if (ww) {
        CL_TRY(cl_nn_col_input(m, s->ln1, G, Ns, C, &x));
        CL_PROF("bwd qkv w", fq, lo ? cl_nn_linear_dweight_lo(m, gw->qkv_w, gw->qkv_b, dqkv, L1, x, xt, N, C, Q)
                                    : cl_nn_linear_dweight(m, gw->qkv_w, gw->qkv_b, dqkv, x, N, C, Q));
    }
    /* c_attn, column-parallel by heads */
    const float *dl1 = NULL;
    if (run) {
        CL_PROF("bwd qkv", fq, lo ? cl_nn_gemm_lo(m, 0, 1, iN, iC, iQ, L1, iQ, cl_nn_wlo(m, w->qkv_w), iQ, 0.0f, dln1, iC)
                                  : cl_sgemm(cl_kern(m), 0, 1, iN, iC, iQ, 1.0f, dqkv, iQ, w->qkv_w, iQ, 0.0f, dln1, iC));
        if (sp) CL_TRY(cl_tp_backward(tp, CL_TP_GATHER, dln1, dln1s, (size_t)(Ns * C)));
        else CL_TRY(cl_tp_backward(tp, CL_TP_COPY, dln1, dln1, (size_t)(N * C)));
    }
    dl1 = cl_nn_kept(&k, sp ? dln1s : dln1, Ns * C, run);
    if (ww) CL_PROF("bwd layernorm w", 0, cl_kern(m)->layernorm_backward_weight(gw->ln1_w, gw->ln1_b, dl1, in, s->ln1_mean, s->ln1_rstd, iNs, iC));
    if (din) {
        CL_PROF("bwd layernorm", 0, cl_kern(m)->layernorm_backward_input(din, dl1, in, w->ln1_w, s->ln1_mean, s->ln1_rstd, iNs, iC));
        CL_PROF("bwd residual", 0, cl_kern(m)->add_inplace(din, dres2, Ns * C));
    }
    return CL_OK;
}

/* Per sample, this rank's share (Cl = C/tp columns, NHl = NH/tp heads, Kl
 * = K/tp key-value columns, Fl = F/tp MLP columns; Ts = T/tp token rows
 * under sequence parallelism, else T). Saved: ln1, res2, ln2, out (token
 * rows) and their 2 x 2 means and rstds; qkv (Cl + 2 Kl), atty (Cl), fch
 * (Fl), fch_gelu (Fl) (columns: 12 Cl for GPT-2); the attention's lse,
 * NHl per token (block_layout_at). Backward workspace
 * (block_backward_pass): dres2, dfc (Fl), dln2, datty, dqkv (Cl + 2 Kl),
 * dln1 (3 C + 8 Cl for GPT-2); sequence parallelism adds the gathered
 * dout, dres2 and layernorm output and the three scattered shards; then the
 * blockwise attention's tiles (cl_flash_scratch_floats: NHl 2 64 128 a
 * sample from T = 128 on, whatever T). */
static void block_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    int tp = d->tpl.tp, sp = d->tpl.sp;
    int64_t T = d->T, C = d->cfg.channels, Cl = C / tp, NHl = d->cfg.heads / tp, Ts = sp ? T / tp : T;
    int64_t Kl = d->kv_channels_local, Fl = d->mlp_local, Fw = cl_model_mlp_width(&d->cfg), cols = 2 * Cl + 2 * Kl + 2 * Fl;
    int64_t K = (int64_t)cl_model_kv_heads(&d->cfg) * (C / d->cfg.heads);
    un->in_floats = cl_size_mul(z, Ts, C);
    un->out_floats = un->in_floats;
    int64_t lse = cl_size_mul(z, NHl, T);
    /* ln1 and ln2 (Ts C each) and fch_gelu (T Fl) are BF16 in bf16 (block_layout_at) */
    int64_t lnC = cl_nn_gemm_in_floats(d, cl_size_mul(z, Ts, C)), gel = cl_nn_gemm_in_floats(d, cl_size_mul(z, T, Fl));
    int64_t rest = cl_size_add(z, cl_size_mul(z, Ts, 2 * C + 4), cl_size_mul(z, T, cols - Fl));
    un->act_floats = cl_size_add(z, cl_size_add(z, cl_size_add(z, rest, 2 * lnC), gel), lse);
    int64_t wcols = Cl + (Cl + 2 * Kl) + Fl; /* datty, dqkv, dfc: 8 Cl for GPT-2 */
    int64_t ws = sp ? cl_size_add(z, cl_size_mul(z, T, 5 * C + wcols), cl_size_mul(z, Ts, 3 * C)) : cl_size_mul(z, T, 3 * C + wcols);
    un->scratch_floats = cl_size_add(z, ws, cl_flash_scratch_floats(1, (int)T, (int)Cl, (int)NHl));
    if (cl_nn_bf16(d)) { /* the backward's BF16 gradient and c_proj input (L1, L2 in block_backward_pass) */
        int64_t wide = C > Fl ? (C > Cl + 2 * Kl ? C : Cl + 2 * Kl) : (Fl > Cl + 2 * Kl ? Fl : Cl + 2 * Kl);
        un->scratch_floats = cl_size_add(z, un->scratch_floats,
                                         cl_nn_bf16_floats(cl_size_mul(z, T, wide)) + cl_nn_bf16_floats(cl_size_mul(z, T, Cl)));
    }
    /* c_attn C (C + 2K), attn.c_proj C^2, the MLP's two 2 C F: 12 C^2 for GPT-2, written so its figure stays */
    double lin = (double)(2 * C + 2 * K + 2 * Fw) * (double)C;
    un->flops = (2.0 * (double)T * lin + 4.0 * (double)T * cl_nn_key_tokens(d) * (double)C) / tp;
}

static int64_t block_act_floats(const cl_model_desc *d, const cl_unit *un, int B, int recompute) {
    if (recompute == CL_RECOMPUTE_FULL) return un->out_floats * B;
    int64_t n = un->act_floats * B;
    return recompute == CL_RECOMPUTE_SELECTIVE ? n - block_lse_floats(d, B) : n;
}

static int64_t block_rc_floats(const cl_model_desc *d, const cl_unit *un, int B, int recompute) {
    return recompute == CL_RECOMPUTE_FULL ? un->act_floats * B : recompute == CL_RECOMPUTE_SELECTIVE ? block_lse_floats(d, B) : 0;
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
    else if (m->recompute == CL_RECOMPUTE_SELECTIVE) /* the lse from the kept qkv (the kept output written again, the same bits) */
        CL_TRY(cl_nn_attention_forward(m, s.atty, s.lse, s.qkv, B, T, m->desc->channels_local, m->desc->heads_local, m->desc->heads_local));
    return block_backward_pass(m, &s, in, &w, &gw, dout, din, what & CL_BWD_INPUT, what & CL_BWD_WEIGHT, B, T);
}

/* Generation's step (nn/decode.c): block_pass on the step's new rows only, its attention over the KV cache
 * (the rows in the decoder's workspace; no sequence parallelism). */
static cl_status block_decode(cl_model *m, const cl_unit *un, const cl_decode_step *st, const float *in, float *out,
                              float *const *p) {
    (void)un;
    const cl_model_desc *d = m->desc;
    block_weights w;
    cl_kind_bind(&cl_kind_block, p, &w);
    int64_t N = (int64_t)st->B * st->n, C = d->cfg.channels, Cl = d->channels_local, Fl = d->mlp_local, Q = Cl + 2 * (int64_t)d->kv_channels_local;
    cl_nn_decode_ws b = cl_nn_decode_carve(m, st);
    float *ln1 = b.ln1, *res2 = b.res2, *ln2 = b.ln2, *mean = b.stats, *rstd = b.stats + 2 * N, *qkv = b.qkv, *atty = b.atty;
    float *fch = b.mlp, *fchg = b.mlp + N * Fl;
    const cl_kernels *K = cl_kern(m);
    K->layernorm_forward(ln1, mean, rstd, in, w.ln1_w, w.ln1_b, (int)N, (int)C);
    K->linear_forward(qkv, ln1, w.qkv_w, w.qkv_b, (int)N, (int)C, (int)Q);
    cl_nn_decode_attention(m, st, qkv, atty);
    CL_TRY(cl_nn_row_linear(m, "dec attn proj", 0, atty, w.attn_proj_w, w.attn_proj_b, res2, N, Cl));
    K->residual_layernorm_forward(res2, ln2, mean + N, rstd + N, res2, in, w.ln2_w, w.ln2_b, (int)N, (int)C);
    cl_sgemm(K, 0, 0, (int)N, (int)Fl, (int)C, 1.0f, ln2, (int)C, w.fc_w, (int)Fl, 0.0f, fch, (int)Fl);
    K->bias_gelu_forward(fchg, fch, w.fc_b, (int)N, (int)Fl);
    CL_TRY(cl_nn_row_linear(m, "dec fc proj", 0, fchg, w.fc_proj_w, w.fc_proj_b, out, N, Fl));
    K->add_inplace(out, res2, N * C);
    return CL_OK;
}

/* The planner's cost (nn/cost.h): ln_1, c_attn (columns of this rank's heads),
 * attention (blockwise: scores, softmax, product with v tile by tile),
 * attn.c_proj (rows), residual, ln_2, c_fc (columns), GELU, mlp.c_proj
 * (rows), residual. R token rows (B T), Rs of them between the split layers
 * (sequence parallelism: R/tp). */
static void block_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal, cl_unit_cost *o) {
    (void)un;
    double T = d->T, C = d->cfg.channels, Cl = d->channels_local, H = d->heads_local, hd = C / d->cfg.heads;
    double Q = Cl + 2.0 * d->kv_channels_local, Fl = d->mlp_local; /* c_attn's and c_fc's columns here (3 Cl, 4 Cl for GPT-2) */
    int tp = d->tpl.tp, sp = d->tpl.sp;
    double R = (double)B * T, Rs = sp ? R / tp : R, act = R * C * e;
    /* causal: cleave's blockwise attention (flash.c): the products skip the tiles past the diagonal,
     * the scores live in tiles, never in memory; its bytes are the lse (B H T) and, in the backward,
     * D = rowsum(dy y) (reads y and dy); the backward recomputes the scores q k^T (re-forward work).
     * Otherwise the whole T x T scores, masked and kept (Megatron-LM's fused softmax, the built-in GPU
     * descriptions): the softmax reads and writes them (forward 2, backward 3) */
    cl_cost_att a = cl_cost_attention_of(d, B, e, causal);
    double K = a.K, att = a.att, attf = a.fwd, attb = a.bwd;
    cl_pass_cost *f = &o->pass[CL_PASS_F], *b = &o->pass[CL_PASS_B], *w = &o->pass[CL_PASS_W], *rf = &o->pass[CL_PASS_RF];
    /* forward: c_attn, q k^T, softmax(.) v, c_proj, c_fc, mlp.c_proj */
    cl_cost_gemm(f, R, Q, C, 1, CL_GEMM_NN);
    cl_cost_attention_products(f, NULL, T, K, hd, B * H, att);
    cl_cost_gemm(f, R, C, Cl, 1, CL_GEMM_NN);
    cl_cost_gemm(f, R, Fl, C, 1, CL_GEMM_NN);
    cl_cost_gemm(f, R, C, Fl, 1, CL_GEMM_NN);
    /* the other kernels as src/nn/kind_block.c runs them: ln_1 (read, write); c_attn's bias
     * written under its rows before the product; the softmax (read, write); c_proj's bias
     * (written before the product at tp 1, added after the reduction at tp > 1: read, write);
     * residual + ln_2 in one pass (read 2, write 2); bias + GELU in one pass (read, write);
     * mlp.c_proj's bias as c_proj's; and the last residual add (read 2, write 1), a stream */
    double rowbias = tp > 1 ? 2 : 1;
    f->bytes = e * (2 * Rs * C + R * Q + rowbias * Rs * C + 4 * Rs * C + 2 * R * Fl + rowbias * Rs * C) + attf;
    f->stream = e * 3 * Rs * C;
    cl_cost_narrow(f, d, R * Cl, 0); /* bf16: c_proj's input (atty) narrowed */
    cl_cost_block_pairs(f, act, tp, sp);
    /* backward-input: each linear's input gradient, the four products of attention */
    cl_cost_gemm(b, R, C, Q, 1, CL_GEMM_NT);
    cl_cost_attention_products(NULL, b, T, K, hd, B * H, att);
    cl_cost_gemm(b, R, Cl, C, 1, CL_GEMM_NT);
    cl_cost_gemm(b, R, C, Fl, 1, CL_GEMM_NT);
    cl_cost_gemm(b, R, Fl, C, 1, CL_GEMM_NT);
    /* GELU's backward reads its input and the gradient and writes one; attention's as above; ln_2's
     * input gradient adds into the residual's (read 3, write 1), ln_1's is written (read 2, write 1);
     * streams: dqkv zeroed, the residual gradient copied, the two added */
    b->bytes = e * (3 * R * Fl + 4 * Rs * C + 3 * Rs * C) + attb;
    b->stream = e * (R * Q + 2 * Rs * C + 3 * Rs * C);
    /* bf16: what the products read narrowed (dO, dqkv; dR under sequence parallelism), else written as BF16 beside
     * the F32 result by the kernel computing it (GELU's backward, and ln_2's without sequence parallelism) */
    cl_cost_narrow(b, d, R * C, 0), cl_cost_narrow(b, d, R * Q, 0), cl_cost_narrow(b, d, R * Fl, 1);
    if (sp) cl_cost_narrow(b, d, R * C, 0);
    else cl_cost_narrow(b, d, Rs * C, 1);
    cl_cost_block_pairs(b, act, tp, sp);
    /* backward-weight: dW = x^T dy of the four linears, bias and layernorm gradients (read dy, x) */
    cl_cost_gemm(w, C, Q, R, 1, CL_GEMM_TN);
    cl_cost_gemm(w, Cl, C, R, 1, CL_GEMM_TN);
    cl_cost_gemm(w, C, Fl, R, 1, CL_GEMM_TN);
    cl_cost_gemm(w, Fl, C, R, 1, CL_GEMM_TN);
    w->bytes = e * (R * (Q + Fl) + 2 * Rs * C + 2 * 2 * Rs * C);
    cl_cost_narrow(w, d, R * Cl, 0); /* bf16: c_proj's input narrowed again for its weight gradient */
    if (sp) cl_cost_coll(w, CL_COLL_ALLGATHER, act, tp), cl_cost_coll(w, CL_COLL_ALLGATHER, act, tp); /* the layernorm outputs gathered again */
    /* re-forward: the block's forward under full, the attention's under selective (for the lse, or the
     * scores); blockwise, in every mode the backward's recomputed scores q k^T (hardware work, not the
     * model's FLOPs) */
    cl_cost_attention_rf(rf, f, recompute, causal, T, K, hd, B * H, att, attf);
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
    .cost = block_cost,
    .repeated = 1,
    .weight_redo = 1,
    .z3_reads = CL_KIND_READS_ALL, /* its weight pass re-derives the interior's gradients */
    .wlo = CL_KIND_WLO(2) | CL_KIND_WLO(4) | CL_KIND_WLO(8) | CL_KIND_WLO(10), /* c_attn, attn.c_proj, c_fc, mlp.c_proj */
    .gfirst = CL_KIND_GFIRST(2) | CL_KIND_GFIRST(4) | CL_KIND_GFIRST(8) | CL_KIND_GFIRST(10), /* their weight products */
    .output = block_output,
    .forward = block_forward,
    .backward = block_backward,
    .decode = block_decode,
    .kv_cache = 1,
};
