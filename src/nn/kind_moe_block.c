/* The Mixtral block (Hugging Face's MixtralDecoderLayer) as a unit kind
 * (kind.h): the Llama block's attention half (llama_attn.c, shared), then
 * instead of the dense SwiGLU MLP the sparse one (MixtralSparseMoeBlock):
 *
 *   logits = ln2 W_g                 W_g [C, E] (block_sparse_moe.gate)
 *   p = softmax(logits) in F32, top-K per token (ties to the lower expert),
 *   the K weights renormalized; each token-slot's row through its expert
 *   e: w2_e(silu(w1_e x) * w3_e x), w1/w3 [C, F], w2 [F, C] ([in, out], as
 *   cleave stores linear weights; HF's nn.Linear is [out, in]);
 *   out = res2 + sum_i w_i expert_{e_i}(ln2)
 *
 * and the load-balancing loss aux = E sum_e f_e P_e of the micro-batch
 * (moe.c's per-slot form: f_e the share of the N K token-slots routed to e,
 * P_e the mean probability; HF's load_balancing_loss_func is K times it and
 * pools every layer before the product: cleave sums per-block terms, as
 * Switch and Megatron-LM do). The step's loss gets moe_aux_coeff x the
 * per-micro-batch sums averaged as the LM loss is (weight dloss B T per
 * micro-batch); its gradient goes into the router only (f is piecewise
 * constant). A capacity factor cf keeps the first ceil(cf N K / E) slots of
 * each expert in token order (the rest dropped: no output, no gradient,
 * counted); 0 is dropless.
 *
 * The saved activations are sized for the worst case, R = N K expert rows
 * (every slot on one expert) when dropless, or min(N K, E cap) with a
 * capacity: the memory predictor then holds whatever the routing does.
 * Tensor parallelism (Megatron-core's expert tensor parallelism = tp): the
 * router replicated (every rank routes every token from ln2 whole, gathered
 * under sequence parallelism), each expert's w1/w3 by columns and w2 by rows;
 * the combine's partial sums summed over the group once (reduce-scattered
 * under sp); the backward all-reduces the combine weights' gradient and sums
 * the experts' part of ln2's gradient before the router's part is added for
 * this rank's rows (counted once). pp and dp need nothing of the kind. Expert parallelism (--ep,
 * moe_dispatch.c): the routed rows go by all-to-all to the ranks computing
 * their experts (E / ep each) and the results come back; the expert GEMMs
 * run per block of received rows (source rank, then expert), and the saved
 * rows and workspace hold the worst case of what ep ranks can send.
 *
 * bf16 (cl_nn_bf16; docs/ARCHITECTURE.md "The MoE block in bf16"), as the dense Llama block's: ln2, the gathered
 * expert rows and the SwiGLU product BF16; every product BF16 x BF16 with F32 sums (the weights' copies); the
 * router's logits rounded once to BF16 (autocast's linear output) and widened for the F32 softmax and top-K; the
 * combine, the residual, the aux loss and every backward kernel F32, the gradients the products read narrowed
 * into one BF16 array of the workspace (moe_lo_floats). With expert parallelism the rows to the experts and
 * their output gradients move as BF16, the results and input gradients as F32.
 *
 * Invariants: parameters in checkpoint order (the attention half's six, the
 * router, then experts 0..E-1 each w1, w2, w3) under HF Mixtral's names;
 * the integer arrays (top-k indices, slot rows, dispatch order, counts) live
 * in float-sized slots of the activations; every result depends on the
 * inputs alone (moe.c's kernels and the GEMMs in expert order). */
#include "nn/kind.h"
#include "nn/llama_attn.h"
#include "nn/model_impl.h"
#include "nn/moe_dispatch.h"

#include "cleave/kernels.h"
#include "cleave/prof.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { NATT = 6 }; /* input_layernorm, q, k, v, o, post_attention_layernorm: llama_attn.h's weights, in order */

static const char *const att_names[NATT] = {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                            "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight"};

static int moe_param_list(const cl_model_desc *d, const cl_unit *un, int i, cl_kind_param *kp, char *name, size_t cap) {
    (void)un;
    int E = d->cfg.experts;
    if (i < 0) return NATT + 1 + 3 * E;
    memset(kp, 0, sizeof *kp);
    kp->decay = 1;
    kp->init = CL_INIT_NORMAL;
    kp->tp = CL_TPS_REPLICATED;
    if (i < NATT) {
        snprintf(name, cap, "%s", att_names[i]);
        int norm = i == 0 || i == NATT - 1;
        kp->tp = norm ? CL_TPS_NORM : i == 4 ? CL_TPS_ROWS : i == 2 || i == 3 ? CL_TPS_KV : CL_TPS_COLUMNS;
        kp->decay = !norm;
        kp->init = norm ? CL_INIT_ONES : CL_INIT_NORMAL;
    } else if (i == NATT) {
        snprintf(name, cap, "block_sparse_moe.gate.weight"); /* replicated over tp: every rank routes every token */
    } else {
        int e = (i - NATT - 1) / 3, w = (i - NATT - 1) % 3;
        snprintf(name, cap, "block_sparse_moe.experts.%d.w%d.weight", e, w + 1);
        kp->tp = w == 1 ? CL_TPS_ROWS : CL_TPS_COLUMNS; /* w1, w3 [C, F] by columns, w2 [F, C] by rows: the dense MLP's split */
    }
    return NATT + 1 + 3 * E;
}

/* Whole shapes, [in, out]: the attention half's as the Llama block's; the router C x E; w1, w3 C x F, w2 F x C;
 * normal(0, 0.02), o and w2 scaled by 1/sqrt(2 x layers) as the Llama block's residual projections. */
static void moe_param(const cl_model_desc *d, const cl_unit *un, int i, cl_param_shape *o) {
    (void)un;
    int64_t C = d->cfg.channels, K = (int64_t)cl_model_kv_heads(&d->cfg) * (C / d->cfg.heads), Fw = cl_model_mlp_width(&d->cfg);
    float res = 0.02f / sqrtf(2.0f * (float)d->cfg.layers);
    o->ndim = 2;
    o->scale = 0.02f;
    if (i == 0 || i == NATT - 1) {
        o->ndim = 1, o->shape[0] = C, o->scale = 0;
    } else if (i < NATT) {
        o->shape[0] = C;
        o->shape[1] = i == 2 || i == 3 ? K : C;
        if (i == 4) o->scale = res;
    } else if (i == NATT) {
        o->shape[0] = C, o->shape[1] = d->cfg.experts;
    } else {
        int w = (i - NATT - 1) % 3; /* 0: w1, 1: w2, 2: w3 */
        o->shape[0] = w == 1 ? Fw : C;
        o->shape[1] = w == 1 ? C : Fw;
        if (w == 1) o->scale = res;
    }
}

/* the expert of parameter i: experts 0..E-1 each w1, w2, w3 after the router */
static int moe_expert_of(const cl_model_desc *d, const cl_unit *un, int i) {
    (void)d, (void)un;
    return i > NATT ? (i - NATT - 1) / 3 : -1;
}

static int64_t moe_capacity(const cl_model_desc *d, int64_t N) {
    int64_t E = d->cfg.experts, K = d->cfg.experts_per_token;
    double cf = d->cfg.moe_capacity_factor;
    if (!(cf > 0)) return 0;
    return (int64_t)ceil(cf * (double)(N * K) / (double)E);
}
/* Expert rows from `senders` ranks' micro-batches of N tokens: senders N K dropless (the worst case: every slot on
 * one expert), else min(senders N K, E cap) (a sender keeps cap slots of each expert: senders x E/ep experts x cap).
 * moe_rows: a rank's own slots; moe_rows_in: the rows its experts can receive under expert parallelism (ep 1: the
 * same). */
static int moe_ep(const cl_model_desc *d) { return d->tpl.ep > 1 ? d->tpl.ep : 1; }
static int64_t moe_rows_from(const cl_model_desc *d, int64_t N, int64_t senders) {
    int64_t NK = senders * N * d->cfg.experts_per_token, cap = moe_capacity(d, N), ecap = cap * d->cfg.experts;
    return cap > 0 && ecap < NK ? ecap : NK;
}
static int64_t moe_rows(const cl_model_desc *d, int64_t N) { return moe_rows_from(d, N, 1); }
static int64_t moe_rows_in(const cl_model_desc *d, int64_t N) { return moe_rows_from(d, N, moe_ep(d)); }

typedef struct {
    cl_llama_attn_acts at;
    float *probs, *wts, *frac, *xe, *gate, *up, *h, *ye, *xr, *yr, *out;
    int32_t *idx, *row, *perm, *counts, *rcounts;
} moe_acts;

/* From base, after the attention half: probs N E, wts, idx, row N K each, perm R, counts E, frac E, xe R C,
 * gate, up, h Rr F each, ye R C, with expert parallelism rcounts E and the received rows xr, their results yr
 * (Rr C each; ep 1: rcounts, xr and yr are counts, xe and ye), out N C. R: moe_rows, Rr: moe_rows_in. bf16: xe,
 * xr and h (the experts' GEMM inputs) are BF16, (n + 1) / 2 floats for n values (cl_nn_gemm_in_floats). */
static moe_acts moe_layout_at(const cl_model_desc *d, float *base, int64_t B, int64_t T, float *lse_apart) {
    int64_t N = B * T, E = d->cfg.experts, K = d->cfg.experts_per_token, C = d->cfg.channels, Fl = d->mlp_local;
    int64_t R = moe_rows(d, N), Rr = moe_rows_in(d, N);
    moe_acts a;
    float *p = cl_llama_attn_layout(d, base, B, T, lse_apart, &a.at);
    a.probs = p; p += N * E;
    a.wts = p; p += N * K;
    a.idx = (int32_t *)p; p += N * K;
    a.row = (int32_t *)p; p += N * K;
    a.perm = (int32_t *)p; p += R;
    a.counts = (int32_t *)p; p += E;
    a.frac = p; p += E;
    a.xe = p; p += cl_nn_gemm_in_floats(d, R * C); /* BF16 in bf16 (w1's and w3's input only) */
    a.gate = p; p += Rr * Fl;
    a.up = p; p += Rr * Fl;
    a.h = p; p += cl_nn_gemm_in_floats(d, Rr * Fl); /* BF16 in bf16 (w2's input only) */
    a.ye = p; p += R * C;
    a.rcounts = a.counts, a.xr = a.xe, a.yr = a.ye;
    if (moe_ep(d) > 1) {
        a.rcounts = (int32_t *)p; p += E;
        a.xr = p; p += cl_nn_gemm_in_floats(d, Rr * C);
        a.yr = p; p += Rr * C;
    }
    a.out = p;
    return a;
}

/* the floats moe_layout_at lays out for B x T, the attention's lse included, out included */
static int64_t moe_floats(const cl_model_desc *d, int64_t B, cl_sizer *z) {
    int64_t N = B * d->T, E = d->cfg.experts, K = d->cfg.experts_per_token, C = d->cfg.channels, Fl = d->mlp_local;
    int64_t R = moe_rows(d, N), Rr = moe_rows_in(d, N);
    int64_t att = cl_size_mul(z, B, cl_llama_attn_act_floats(d, z));
    int64_t tok = cl_size_add(z, cl_size_mul(z, N, E + 3 * K), cl_size_mul(z, cl_nn_rows_here(d, N), C)); /* ... and out, Ns C */
    /* moe_layout_at's rows: perm R, ye R C, gate and up Rr F each; xe and h the experts' GEMM inputs (BF16 in bf16) */
    int64_t xe = cl_nn_gemm_in_floats(d, cl_size_mul(z, R, C)), h = cl_nn_gemm_in_floats(d, cl_size_mul(z, Rr, Fl));
    int64_t rows = cl_size_add(z, cl_size_add(z, cl_size_mul(z, R, C + 1), xe), cl_size_add(z, cl_size_mul(z, Rr, 2 * Fl), h));
    if (moe_ep(d) > 1) /* rcounts E, yr Rr C, xr (a GEMM input) */
        rows = cl_size_add(z, rows, cl_size_add(z, cl_size_add(z, cl_size_mul(z, Rr, C), E), cl_nn_gemm_in_floats(d, cl_size_mul(z, Rr, C))));
    return cl_size_add(z, cl_size_add(z, att, tok), cl_size_add(z, rows, 2 * E));
}

static moe_acts moe_acts_of(const cl_model *m, float *base, int64_t B, int64_t T) {
    const cl_model_desc *d = m->desc;
    if (m->recompute == CL_RECOMPUTE_SELECTIVE) return moe_layout_at(d, base, B, T, m->rc_buf);
    if (m->recompute == CL_RECOMPUTE_FULL) {
        moe_acts a = moe_layout_at(d, m->rc_buf, B, T, NULL);
        a.out = base; /* the one thing kept */
        return a;
    }
    return moe_layout_at(d, base, B, T, NULL);
}

static float *moe_output(const cl_model *m, float *base, int B, int T) { return moe_acts_of(m, base, B, T).out; }

typedef struct {
    cl_llama_attn_weights at;
    float *gate;        /* the router, [C, E] */
    float *const *ex;   /* expert e: ex[3 e] w1 [C, F], ex[3 e + 1] w2 [F, C], ex[3 e + 2] w3 [C, F] */
} moe_weights;

static moe_weights moe_bind(float *const *p) {
    moe_weights w;
    w.at = (cl_llama_attn_weights){p[0], p[1], p[2], p[3], p[4], p[5]};
    w.gate = p[NATT];
    w.ex = p + NATT + 1;
    return w;
}

/* The forward; *aux, *dropped: the micro-batch's aux loss and dropped slots. */
static cl_status moe_pass(const cl_model *m, const moe_acts *s, const float *in, const moe_weights *w, int B, int T, float *aux,
                          int64_t *dropped) {
    const cl_model_desc *d = m->desc;
    const cl_kernels *Kn = cl_kern(m);
    int64_t N = (int64_t)B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Fl = d->mlp_local;
    int E = d->cfg.experts, K = d->cfg.experts_per_token, iN = (int)N, iC = (int)C, iF = (int)Fl;
    if (cl_moe_ep_size(m) != moe_ep(d))
        return cl_error(CL_ERR_INVALID, "an MoE block described for --ep %d runs without its expert-parallel group (cl_model_set_ep)", moe_ep(d));
    CL_TRY(cl_llama_attn_forward(m, &s->at, in, &w->at, B, T));
    /* the scratch: logits N E, pmean E, bf16's BF16 logits, then under sequence parallelism the gathered ln2 (G)
     * and the combine's partial sums (P), N C each */
    float *logits = m->scratch, *pmean = m->scratch + N * E, *G = m->scratch + 2 * N * E + E, *P = G + N * C;
    int lo = cl_nn_bf16(d);
    /* tensor parallelism: every rank routes all N tokens from ln2 whole (sequence parallelism: gathered first) */
    const float *x;
    CL_TRY(cl_nn_col_input(m, s->at.ln2, G, Ns, C, &x));
    cl_dtype xf = lo ? CL_BF16 : CL_F32; /* the experts' input rows' format */
    if (lo) { /* autocast's router: ln2 (BF16) x the BF16 copy, F32 sums, the output rounded to BF16 (autocast's
               * linear returns BF16), widened for the F32 softmax (HF's softmax(..., dtype=float)) */
        void *lg = m->scratch + N * E + E;
        CL_PROF("fwd router", 2.0 * (double)N * C * E, cl_nn_gemm_lo(m, 0, 0, iN, E, iC, x, iC, cl_nn_wlo(m, w->gate), E, 0.0f, logits, E));
        CL_TRY(cl_nn_narrow(m, lg, logits, N * E));
        CL_TRY(cl_device_convert(m->dev, logits, CL_F32, lg, CL_BF16, (size_t)(N * E)));
    } else {
        CL_PROF("fwd router", 2.0 * (double)N * C * E, cl_sgemm(Kn, 0, 0, iN, E, iC, 1.0f, x, iC, w->gate, E, 0.0f, logits, E));
    }
    CL_PROF("fwd topk", 0, Kn->moe_router_forward(s->probs, s->idx, s->wts, logits, iN, E, K));
    *aux = Kn->moe_aux_loss(s->frac, pmean, s->probs, s->idx, iN, E, K);
    *dropped = Kn->moe_dispatch(s->perm, s->row, s->counts, s->idx, iN, E, K, (int)moe_capacity(d, N));
    int64_t rows = N * K - *dropped;
    if (lo) CL_PROF("fwd dispatch", 0, Kn->moe_gather_bf16((uint16_t *)s->xe, (const uint16_t *)x, s->perm, rows, iC, K));
    else CL_PROF("fwd dispatch", 0, Kn->moe_gather(s->xe, x, s->perm, rows, iC, K));
    /* expert parallelism: the rows to their experts' ranks (ep 1: the blocks are this rank's E experts, no copy) */
    cl_moe_blocks bl;
    CL_PROF("fwd a2a counts", 0, CL_TRY(cl_moe_ep_counts(m, s->counts, s->rcounts, E, &bl)));
    CL_PROF("fwd a2a rows", 0, CL_TRY(cl_moe_ep_rows(m, s->xe, s->xr, s->counts, s->rcounts, E, C, xf, 0)));
    const uint16_t *xlo = (const uint16_t *)s->xr, *hlo = (const uint16_t *)s->h; /* bf16: the BF16 rows */
    int64_t o = 0;
    for (int b = 0; b < bl.n; b++) {
        int n = bl.rows[b];
        float *const *x = w->ex + 3 * bl.e[b];
        double fl = 2.0 * n * (double)C * Fl;
        if (lo)
            CL_PROF("fwd experts w1 w3", 2 * fl, (cl_nn_gemm_lo_rows(m, 0, 0, n, iF, iC, xlo + o * C, iC, cl_nn_wlo(m, x[0]), iF, 0.0f, s->gate + o * Fl, iF),
                                                  cl_nn_gemm_lo_rows(m, 0, 0, n, iF, iC, xlo + o * C, iC, cl_nn_wlo(m, x[2]), iF, 0.0f, s->up + o * Fl, iF)));
        else
            CL_PROF("fwd experts w1 w3", 2 * fl, (cl_sgemm(Kn, 0, 0, n, iF, iC, 1.0f, s->xr + o * C, iC, x[0], iF, 0.0f, s->gate + o * Fl, iF),
                                                  cl_sgemm(Kn, 0, 0, n, iF, iC, 1.0f, s->xr + o * C, iC, x[2], iF, 0.0f, s->up + o * Fl, iF)));
        o += n;
    }
    if (lo) CL_PROF("fwd swiglu", 0, Kn->swiglu_forward_bf16((uint16_t *)s->h, s->gate, s->up, bl.total * Fl));
    else CL_PROF("fwd swiglu", 0, Kn->swiglu_forward(s->h, s->gate, s->up, bl.total * Fl));
    o = 0;
    for (int b = 0; b < bl.n; b++) {
        int n = bl.rows[b];
        if (lo)
            CL_PROF("fwd experts w2", 2.0 * n * (double)C * Fl,
                    cl_nn_gemm_lo_rows(m, 0, 0, n, iC, iF, hlo + o * Fl, iF, cl_nn_wlo(m, w->ex[3 * bl.e[b] + 1]), iC, 0.0f, s->yr + o * C, iC));
        else
            CL_PROF("fwd experts w2", 2.0 * n * (double)C * Fl,
                    cl_sgemm(Kn, 0, 0, n, iC, iF, 1.0f, s->h + o * Fl, iF, w->ex[3 * bl.e[b] + 1], iC, 0.0f, s->yr + o * C, iC));
        o += n;
    }
    CL_PROF("fwd a2a back", 0, CL_TRY(cl_moe_ep_rows(m, s->yr, s->ye, s->counts, s->rcounts, E, C, CL_F32, 1))); /* the results back, in this rank's order */
    /* tensor parallelism: each rank's results are partial sums over its columns of every expert; the combine is
     * linear, so its output is summed over the group once (sequence parallelism: reduce-scattered to this rank's rows) */
    float *part = d->tpl.sp ? P : s->out;
    CL_PROF("fwd combine", 0, Kn->moe_combine_forward(part, s->ye, s->wts, s->row, iN, iC, K));
    if (d->tpl.sp) CL_TRY(cl_tp_forward(&m->tp, CL_TP_SCATTER, part, s->out, (size_t)(Ns * C)));
    else CL_TRY(cl_tp_forward(&m->tp, CL_TP_REDUCE, part, s->out, (size_t)(N * C)));
    CL_PROF("fwd residual", 0, Kn->add_inplace(s->out, s->at.res2, Ns * C));
    return CL_OK;
}

static cl_status moe_forward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base, float *const *p) {
    (void)un;
    moe_weights w = moe_bind(p);
    moe_acts s = moe_acts_of(m, base, mb->B, mb->T);
    float aux;
    int64_t dropped;
    CL_TRY(moe_pass(m, &s, in, &w, mb->B, mb->T, &aux, &dropped));
    if (!(mb->dloss > 0)) return CL_OK; /* an evaluation: not the step's */
    m->moe_aux += (double)aux * mb->dloss * mb->B * mb->T; /* the micro-batch's share of the step (0 in evaluation) */
    m->moe_dropped += dropped;
    for (int e = 0; e < m->desc->cfg.experts; e++) m->moe_slots[e] += s.counts[e];
    return CL_OK;
}

/* bf16: the floats of the backward's BF16 gradient array (moe_backward's Lm), which holds in turn the experts'
 * output gradients (Rr C), dgate and dup (2 Rr F) and dlogits (N E) narrowed for the products that read them;
 * 0 in fp32. */
static int64_t moe_lo_floats(const cl_model_desc *d, int64_t N) {
    if (!cl_nn_bf16(d)) return 0;
    int64_t Rr = moe_rows_in(d, N), a = Rr * d->cfg.channels, b = 2 * Rr * d->mlp_local, c = N * d->cfg.experts;
    int64_t w = a > b ? a : b;
    return cl_nn_bf16_floats(w > c ? w : c);
}

/* The backward workspace from m->scratch at B: dres2, dln2 (N C each), dlogits (N E), dwts (N K), dye, dxe
 * (R C each), dgate, dup, dh (Rr F each), with expert parallelism dyr, dxr (Rr C each: the received rows'),
 * with sequence parallelism the gathered output gradient and ln2 (N C each) and dln2's reduce-scattered rows
 * (Ns C), bf16's Lm (moe_lo_floats), then the attention half's (cl_llama_attn_scratch_floats) and the blockwise
 * attention's tiles; bf16: the attention half's BF16 arrays at the scratch's end (cl_llama_lo). */
static int64_t moe_scratch(const cl_model_desc *d, const cl_unit *un, int B) {
    (void)un;
    cl_sizer z = {0};
    int64_t N = (int64_t)B * d->T, C = d->cfg.channels, R = moe_rows(d, N), Rr = moe_rows_in(d, N), Fl = d->mlp_local;
    int hd = d->cfg.channels / d->cfg.heads, KVl = (int)(d->kv_channels_local / hd);
    int64_t n = N * (2 * C + d->cfg.experts + d->cfg.experts_per_token) + R * 2 * C + Rr * 3 * Fl;
    if (moe_ep(d) > 1) n += Rr * 2 * C;
    if (d->tpl.sp) n += 2 * N * C + cl_nn_rows_here(d, N) * C;
    n += (int64_t)B * cl_llama_attn_scratch_floats(d, &z);
    n += moe_lo_floats(d, N) + (int64_t)B * cl_llama_lo_floats(d, &z); /* 0 in fp32 */
    return n + cl_flash_scratch_floats(B, (int)d->T, (int)d->channels_local, KVl);
}

static cl_status moe_backward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base, float *const *p,
                              float *const *g, const float *dout, float *din, int what) {
    (void)un;
    const cl_model_desc *d = m->desc;
    const cl_kernels *Kn = cl_kern(m);
    moe_weights w = moe_bind(p), gw = moe_bind(g);
    int B = mb->B, T = mb->T, ww = (what & CL_BWD_WEIGHT) != 0;
    int64_t N = (int64_t)B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Fl = d->mlp_local, R = moe_rows(d, N),
            Rr = moe_rows_in(d, N);
    int E = d->cfg.experts, K = d->cfg.experts_per_token, iN = (int)N, iNs = (int)Ns, iC = (int)C, iF = (int)Fl, sp = d->tpl.sp;
    moe_acts s = moe_acts_of(m, base, B, T);
    if (m->recompute == CL_RECOMPUTE_FULL) { /* everything again, the same bits */
        float aux;
        int64_t dropped;
        CL_TRY(moe_pass(m, &s, in, &w, B, T, &aux, &dropped));
    } else if (m->recompute == CL_RECOMPUTE_SELECTIVE) {
        CL_TRY(cl_llama_attn_relse(m, &s.at, B, T));
    }
    float *ws = m->scratch;
    float *dres2 = ws; ws += N * C;
    float *dln2 = ws; ws += N * C;
    float *dlogits = ws; ws += N * E;
    float *dwts = ws; ws += N * K;
    float *dye = ws; ws += R * C;
    float *dxe = ws; ws += R * C;
    float *dgate = ws; ws += Rr * Fl;
    float *dup = ws; ws += Rr * Fl;
    float *dh = ws; ws += Rr * Fl;
    float *dyr = dye, *dxr = dxe; /* the received rows' (expert parallelism), else this rank's own */
    if (moe_ep(d) > 1) {
        dyr = ws; ws += Rr * C;
        dxr = ws; ws += Rr * C;
    }
    float *dof = NULL, *G = NULL, *dln2s = NULL; /* sequence parallelism: dout and ln2 gathered, dln2's rows here */
    if (sp) {
        dof = ws; ws += N * C;
        G = ws; ws += N * C;
        dln2s = ws; ws += Ns * C;
    }
    /* bf16: Lm, the gradient each product reads narrowed to BF16 (dyr, then dgate and dup, then dlogits) */
    int lo = cl_nn_bf16(d);
    uint16_t *Lm = (uint16_t *)ws;
    ws += moe_lo_floats(d, N);
    const uint16_t *xlo = (const uint16_t *)s.xr, *hlo = (const uint16_t *)s.h;
    cl_moe_blocks bl;
    cl_moe_ep_blocks(m, s.rcounts, E, &bl);
    const uint16_t *dglo = Lm, *dulo = Lm + bl.total * Fl;
    /* swiglu_backward adds into dgate and dup: only the rows the experts run (bl.total of the worst case's Rr) */
    CL_PROF("bwd zero", 0, (cl_device_fill(m->dev, dln2, 0, (size_t)(N * (C + E + K) + R * C) * sizeof(float)),
                            cl_device_fill(m->dev, dgate, 0, (size_t)(bl.total * Fl) * sizeof(float)),
                            cl_device_fill(m->dev, dup, 0, (size_t)(bl.total * Fl) * sizeof(float))));
    CL_PROF("bwd residual", 0, cl_device_copy(m->dev, dres2, dout, (size_t)(Ns * C) * sizeof(float)));
    /* tensor parallelism: the combine's output gradient whole on every rank (sequence parallelism: gathered); the
     * weights' gradients are then partial sums (each rank's ye is its columns' share), summed over the group */
    cl_nn_keep k = {NULL, 0, m->dev};
    const float *dO;
    CL_TRY(cl_nn_row_dout(m, &k, 1, dout, dof, Ns, &dO));
    CL_PROF("bwd combine", 0, Kn->moe_combine_backward(dye, dwts, dO, s.ye, s.wts, s.row, iN, iC, K));
    CL_TRY(cl_tp_forward(&m->tp, CL_TP_REDUCE, dwts, dwts, (size_t)(N * K)));
    /* the outputs' gradients to the experts' ranks; bf16 with expert parallelism: narrowed before they go (into dxe,
     * unused until the inputs' gradients come back), so they move as BF16 into Lm (the same values as narrowing after) */
    if (lo && moe_ep(d) > 1) {
        int64_t own = 0; /* this rank's kept slots */
        for (int e = 0; e < E; e++) own += s.counts[e];
        CL_TRY(cl_nn_narrow(m, dxe, dye, own * C));
        CL_PROF("bwd a2a rows", 0, CL_TRY(cl_moe_ep_rows(m, dxe, Lm, s.counts, s.rcounts, E, C, CL_BF16, 0)));
    } else {
        CL_PROF("bwd a2a rows", 0, CL_TRY(cl_moe_ep_rows(m, dye, dyr, s.counts, s.rcounts, E, C, CL_F32, 0)));
        if (lo) CL_TRY(cl_nn_narrow(m, Lm, dyr, bl.total * C));
    }
    int64_t o = 0;
    for (int b = 0; b < bl.n; b++) {
        int n = bl.rows[b], e = bl.e[b];
        double fl = 2.0 * n * (double)C * Fl;
        if (lo) {
            CL_PROF("bwd experts w2", fl, cl_nn_gemm_lo_rows(m, 0, 1, n, iF, iC, Lm + o * C, iC, cl_nn_wlo(m, w.ex[3 * e + 1]), iC, 0.0f, dh + o * Fl, iF));
            if (ww) CL_PROF("bwd experts w2 w", fl, cl_nn_gemm_lo_rows(m, 1, 0, iF, iC, n, hlo + o * Fl, iF, Lm + o * C, iC, 1.0f, gw.ex[3 * e + 1], iC));
        } else {
            CL_PROF("bwd experts w2", fl, cl_sgemm(Kn, 0, 1, n, iF, iC, 1.0f, dyr + o * C, iC, w.ex[3 * e + 1], iC, 0.0f, dh + o * Fl, iF));
            if (ww) CL_PROF("bwd experts w2 w", fl, cl_sgemm(Kn, 1, 0, iF, iC, n, 1.0f, s.h + o * Fl, iF, dyr + o * C, iC, 1.0f, gw.ex[3 * e + 1], iC));
        }
        o += n;
    }
    CL_PROF("bwd swiglu", 0, Kn->swiglu_backward(dgate, dup, dh, s.gate, s.up, bl.total * Fl));
    if (lo) {
        CL_TRY(cl_nn_narrow(m, Lm, dgate, bl.total * Fl));
        CL_TRY(cl_nn_narrow(m, Lm + bl.total * Fl, dup, bl.total * Fl));
    }
    o = 0;
    for (int b = 0; b < bl.n; b++) {
        int n = bl.rows[b], e = bl.e[b];
        double fl = 2.0 * n * (double)C * Fl;
        const float *xe = s.xr + o * C, *dg = dgate + o * Fl, *du = dup + o * Fl;
        if (lo) {
            const uint16_t *gl = dglo + o * Fl, *ul = dulo + o * Fl, *xl = xlo + o * C;
            CL_PROF("bwd experts w1 w3", 2 * fl, (cl_nn_gemm_lo_rows(m, 0, 1, n, iC, iF, gl, iF, cl_nn_wlo(m, w.ex[3 * e]), iF, 0.0f, dxr + o * C, iC),
                                                  cl_nn_gemm_lo_rows(m, 0, 1, n, iC, iF, ul, iF, cl_nn_wlo(m, w.ex[3 * e + 2]), iF, 1.0f, dxr + o * C, iC)));
            if (ww)
                CL_PROF("bwd experts w1 w3 w", 2 * fl, (cl_nn_gemm_lo_rows(m, 1, 0, iC, iF, n, xl, iC, gl, iF, 1.0f, gw.ex[3 * e], iF),
                                                        cl_nn_gemm_lo_rows(m, 1, 0, iC, iF, n, xl, iC, ul, iF, 1.0f, gw.ex[3 * e + 2], iF)));
            o += n;
            continue;
        }
        CL_PROF("bwd experts w1 w3", 2 * fl, (cl_sgemm(Kn, 0, 1, n, iC, iF, 1.0f, dg, iF, w.ex[3 * e], iF, 0.0f, dxr + o * C, iC),
                                              cl_sgemm(Kn, 0, 1, n, iC, iF, 1.0f, du, iF, w.ex[3 * e + 2], iF, 1.0f, dxr + o * C, iC)));
        if (ww)
            CL_PROF("bwd experts w1 w3 w", 2 * fl, (cl_sgemm(Kn, 1, 0, iC, iF, n, 1.0f, xe, iC, dg, iF, 1.0f, gw.ex[3 * e], iF),
                                                    cl_sgemm(Kn, 1, 0, iC, iF, n, 1.0f, xe, iC, du, iF, 1.0f, gw.ex[3 * e + 2], iF)));
        o += n;
    }
    CL_PROF("bwd a2a back", 0, CL_TRY(cl_moe_ep_rows(m, dxr, dxe, s.counts, s.rcounts, E, C, CL_F32, 1))); /* the inputs' gradients back */
    CL_PROF("bwd dispatch", 0, Kn->moe_gather_backward(dln2, dxe, s.row, iN, iC, K));
    /* tensor parallelism: the experts' part of ln2's gradient is a partial sum over the ranks' columns: summed
     * over the group (sequence parallelism: reduce-scattered to this rank's rows) before the router's part, which
     * every rank computes whole and adds once, for its own rows */
    const float *dl2c;
    CL_TRY(cl_nn_col_dinput(m, &k, 1, dln2, dln2s, Ns, &dl2c));
    float *dl2 = sp ? dln2s : dln2;
    const float *x; /* ln2 whole (sequence parallelism: gathered again, not kept) */
    CL_TRY(cl_nn_col_input(m, s.at.ln2, G, Ns, C, &x));
    int64_t r0 = sp ? (int64_t)d->tpl.rank * Ns : 0; /* this rank's first row */
    /* the router: the weights' gradient, and the aux loss's at its weight in the step */
    float daux = (float)(d->cfg.moe_aux_coeff * mb->dloss * B * T);
    CL_PROF("bwd router", 0, Kn->moe_router_backward(dlogits, dwts, s.probs, s.idx, s.wts, s.frac, daux, iN, E, K));
    if (lo) { /* dlogits narrowed (autocast's BF16 logits' gradient), against the BF16 copy and ln2 (BF16) */
        CL_TRY(cl_nn_narrow(m, Lm, dlogits, N * E));
        CL_PROF("bwd router gemm", 2.0 * (double)Ns * C * E, cl_nn_gemm_lo(m, 0, 1, iNs, iC, E, Lm + r0 * E, E, cl_nn_wlo(m, w.gate), E, 1.0f, dl2, iC));
        if (ww) CL_PROF("bwd router w", 2.0 * (double)N * C * E, cl_nn_gemm_lo(m, 1, 0, iC, E, iN, x, iC, Lm, E, 1.0f, gw.gate, E));
    } else {
        CL_PROF("bwd router gemm", 2.0 * (double)Ns * C * E, cl_sgemm(Kn, 0, 1, iNs, iC, E, 1.0f, dlogits + r0 * E, E, w.gate, E, 1.0f, dl2, iC));
        if (ww) CL_PROF("bwd router w", 2.0 * (double)N * C * E, cl_sgemm(Kn, 1, 0, iC, E, iN, 1.0f, x, iC, dlogits, E, 1.0f, gw.gate, E));
    }
    return cl_llama_attn_backward(m, &k, &s.at, in, &w.at, &gw.at, dres2, dl2, din, G, ws, ww, B, T);
}

/* Generation's step (nn/decode.c): the attention half's decode (llama_attn.c), then moe_pass's MLP on the
 * step's new rows, dropless (the decoder refuses a capacity factor), in the decoder's workspace laid out as
 * cl_nn_decode_moe_floats counts it. */
static cl_status moe_decode(cl_model *m, const cl_unit *un, const cl_decode_step *st, const float *in, float *out, float *const *p) {
    (void)un;
    const cl_model_desc *d = m->desc;
    const cl_kernels *Kn = cl_kern(m);
    moe_weights w = moe_bind(p);
    int64_t N = (int64_t)st->B * st->n, C = d->cfg.channels, Fl = d->mlp_local;
    int E = d->cfg.experts, K = d->cfg.experts_per_token, iN = (int)N, iC = (int)C, iF = (int)Fl;
    int64_t R = N * K;
    cl_nn_decode_ws b = cl_nn_decode_carve(m, st);
    float *ws = b.mlp;
    float *logits = ws; ws += N * E;
    float *probs = ws; ws += N * E;
    float *wts = ws; ws += N * K;
    int32_t *idx = (int32_t *)ws; ws += N * K;
    int32_t *row = (int32_t *)ws; ws += N * K;
    int32_t *perm = (int32_t *)ws; ws += R;
    int32_t *counts = (int32_t *)ws; ws += E;
    float *xe = ws; ws += R * C;
    float *gate = ws; ws += R * Fl;
    float *up = ws; ws += R * Fl;
    float *h = ws; ws += R * Fl;
    float *ye = ws;
    CL_TRY(cl_llama_attn_decode(m, st, in, &w.at, &b));
    cl_sgemm(Kn, 0, 0, iN, E, iC, 1.0f, b.ln2, iC, w.gate, E, 0.0f, logits, E);
    Kn->moe_router_forward(probs, idx, wts, logits, iN, E, K);
    Kn->moe_dispatch(perm, row, counts, idx, iN, E, K, 0);
    Kn->moe_gather(xe, b.ln2, perm, R, iC, K);
    int64_t o = 0;
    for (int e = 0; e < E; e++) {
        int n = counts[e];
        float *const *x = w.ex + 3 * e;
        cl_sgemm(Kn, 0, 0, n, iF, iC, 1.0f, xe + o * C, iC, x[0], iF, 0.0f, gate + o * Fl, iF);
        cl_sgemm(Kn, 0, 0, n, iF, iC, 1.0f, xe + o * C, iC, x[2], iF, 0.0f, up + o * Fl, iF);
        Kn->swiglu_forward(h + o * Fl, gate + o * Fl, up + o * Fl, n * Fl);
        cl_sgemm(Kn, 0, 0, n, iC, iF, 1.0f, h + o * Fl, iF, x[1], iC, 0.0f, ye + o * C, iC);
        o += n;
    }
    Kn->moe_combine_forward(out, ye, wts, row, iN, iC, K);
    CL_TRY(cl_tp_forward(&m->tp, CL_TP_REDUCE, out, out, (size_t)(N * C))); /* tensor parallelism: the columns' partial sums */
    Kn->add_inplace(out, b.res2, N * C);
    return CL_OK;
}

/* Per sample (B = 1; the functions below are exact at any B): in and out T x C; saved and workspace as laid out
 * above; FLOPs: the attention half's and the router's, K experts' SwiGLU per token (the active work). */
static void moe_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    int64_t T = d->T, C = d->cfg.channels, Fw = cl_model_mlp_width(&d->cfg);
    int64_t Kv = (int64_t)cl_model_kv_heads(&d->cfg) * (C / d->cfg.heads);
    un->in_floats = cl_size_mul(z, cl_nn_rows_here(d, T), C);
    un->out_floats = un->in_floats;
    un->act_floats = moe_floats(d, 1, z);
    un->scratch_floats = moe_scratch(d, un, 1);
    double lin = (double)(2 * C + 2 * Kv + d->cfg.experts) * (double)C + 3.0 * d->cfg.experts_per_token * (double)Fw * (double)C;
    un->flops = (2.0 * (double)T * lin + 4.0 * (double)T * cl_nn_key_tokens(d) * (double)C) / d->tpl.tp; /* a rank's share, as the dense block's */
}

static int64_t moe_act_floats(const cl_model_desc *d, const cl_unit *un, int B, int recompute) {
    if (recompute == CL_RECOMPUTE_FULL) return un->out_floats * B;
    cl_sizer z = {0};
    int64_t n = moe_floats(d, B, &z);
    return recompute == CL_RECOMPUTE_SELECTIVE ? n - (int64_t)B * d->heads_local * d->T : n;
}

static int64_t moe_rc_floats(const cl_model_desc *d, const cl_unit *un, int B, int recompute) {
    (void)un;
    cl_sizer z = {0};
    return recompute == CL_RECOMPUTE_FULL ? moe_floats(d, B, &z) : recompute == CL_RECOMPUTE_SELECTIVE ? (int64_t)B * d->heads_local * d->T : 0;
}

/* The planner's cost of the sparse MLP (cl_llama_block_cost's mlp), as moe_pass and moe_backward run it on N = B T
 * tokens and S = N K token-slots (dropless: every slot; a capacity drops only what the routing overflows):
 * the router's product [N, C] x [C, E]; the experts' at K of E active, E products each of the S / E rows an
 * expert gets when the load is balanced (w1 and w3 [S/E, C] x [C, F], w2 [S/E, F] x [F, C]: 3 x 2 C F FLOPs a
 * slot, Megatron-LM's count for top-K), the backward's input and weight gradients the same again each; as bytes
 * the softmax and top-k, the aux loss's sums, the dispatch (order, slot rows, counts) and the gather of the slots'
 * rows, SwiGLU, the weighted combine, the residual, and their backward kernels; the zeroed gradient buffers (sized
 * for the R rows the layout holds; dgate and dup for the rows run, R under uniform routing at any ep) and the
 * residual gradient's copy as streams. Tensor parallelism: the experts'
 * products over this rank's F / tp columns (Fl), the router's whole on every rank (its input gradient on this rank's
 * rows), and the dense MLP's split pair each way (ln2 in, the combine's partial sums out: all-reduce, or all-gather
 * and reduce-scatter under sequence parallelism, which gathers ln2 again for the router's weight gradient), plus
 * the all-reduce of the combine weights' partial gradients (N K F32). Expert parallelism (ep > 1): a rank runs its E / ep experts on the rows every rank of
 * its group routes to them, ep S / E rows each under a balanced load (the same FLOPs), and the dispatch's
 * all-to-alls over the group: the forward's slot counts (E int32 a rank) and its rows out and results back, the
 * backward's output gradients out and input gradients back, each R rows of C elements, R = the slots a rank keeps
 * under uniform routing (moe_rows: N K dropless; with a capacity min(N K, E cap), every expert filled to its cap at
 * a factor <= 1), (ep - 1)/ep of them leaving the rank. */
static void moe_mlp_cost(const cl_model_desc *d, int B, double e, cl_unit_cost *o) {
    int ep = moe_ep(d);
    double N = (double)B * d->T, C = d->cfg.channels, Fl = d->mlp_local, E = d->cfg.experts,
           K = d->cfg.experts_per_token, S = N * K, R = (double)moe_rows(d, (int64_t)B * d->T), El = E / ep, Se = S * ep / E;
    cl_pass_cost *f = &o->pass[CL_PASS_F], *b = &o->pass[CL_PASS_B], *w = &o->pass[CL_PASS_W];
    cl_cost_gemm(f, N, E, C, 1, CL_GEMM_NN);
    cl_cost_gemm(f, Se, Fl, C, 2 * El, CL_GEMM_NN);
    cl_cost_gemm(f, Se, C, Fl, El, CL_GEMM_NN);
    cl_cost_alltoall(f, 4 * E, ep); /* the slot counts */
    cl_cost_alltoall(f, R * C * e, ep), cl_cost_alltoall(f, R * C * e, ep);
    cl_cost_alltoall(b, R * C * e, ep), cl_cost_alltoall(b, R * C * e, ep);
    double router = N * (2 * E + 2 * K), aux = N * (E + K) + 2 * E, dispatch = S + 2 * S + E, gather = 2 * S * C + S;
    double swiglu = 3 * S * Fl, combine = S * C + 2 * S + N * C, residual = 3 * N * C;
    f->bytes += e * (router + aux + dispatch + gather + swiglu + combine + residual);
    cl_cost_narrow(f, d, 2 * N * E, 0); /* bf16: the router's logits rounded to BF16 and widened back (read 2, write 4) */
    cl_cost_gemm(b, Se, Fl, C, El, CL_GEMM_NT);
    cl_cost_gemm(b, Se, C, Fl, 2 * El, CL_GEMM_NT);
    cl_cost_gemm(b, cl_nn_rows_here(d, (int64_t)B * d->T), C, E, 1, CL_GEMM_NT);
    int tp = d->tpl.tp, sp = d->tpl.sp;
    cl_cost_split_pair(f, N * C * e, tp, sp), cl_cost_split_pair(b, N * C * e, tp, sp);
    cl_cost_coll(b, CL_COLL_ALLREDUCE, 4 * S, tp);
    if (sp) cl_cost_coll(w, CL_COLL_ALLGATHER, N * C * e, tp);
    /* the combine's (reads dout, ye, the weights and rows; writes dye, dwts), SwiGLU's (read 3, write 2), the
     * gather's (reads dxe and the rows, adds into dln2), the router's (dwts, p, top-k, weights, f; writes dlogits) */
    double dcombine = N * C + 2 * S * C + 3 * S, dswiglu = 5 * S * Fl, dgather = S * C + S + 2 * N * C, drouter = 2 * N * E + 3 * S + E;
    b->bytes += e * (dcombine + dswiglu + dgather + drouter);
    /* bf16: the outputs' gradients (the S rows run under uniform routing), dgate and dup, and dlogits narrowed */
    cl_cost_narrow(b, d, S * C + 2 * S * Fl + N * E, 0);
    b->stream += e * (N * (C + E + K) + R * C + 2 * R * Fl + 2 * N * C); /* dgate and dup: the R rows run (uniform) */
    cl_cost_gemm(w, Fl, C, Se, El, CL_GEMM_TN);
    cl_cost_gemm(w, C, Fl, Se, 2 * El, CL_GEMM_TN);
    cl_cost_gemm(w, C, E, N, 1, CL_GEMM_TN);
}

static void moe_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal, cl_unit_cost *o) {
    (void)un;
    cl_llama_block_cost(d, B, e, recompute, causal, moe_mlp_cost, o);
}

const cl_kind cl_kind_moe_block = {
    .name = "llama_moe_block",
    .prefixed = 1,
    .nparams = 0,
    .params = NULL,
    .param_list = moe_param_list,
    .sizes = moe_sizes,
    .param = moe_param,
    .act_floats = moe_act_floats,
    .scratch_floats = moe_scratch,
    .rc_floats = moe_rc_floats,
    .cost = moe_cost,
    .repeated = 1,
    .weight_redo = 1,
    .z3_reads = CL_KIND_READS_ALL,
    .wlo = CL_KIND_WLO(1) | CL_KIND_WLO(2) | CL_KIND_WLO(3) | CL_KIND_WLO(4), /* q, k, v, o; and from the router on: */
    .gfirst = CL_KIND_GFIRST(1) | CL_KIND_GFIRST(2) | CL_KIND_GFIRST(3) | CL_KIND_GFIRST(4), /* the attention's weight products
                                                                                                   * (not the experts': an expert
                                                                                                   * may get no tokens) */
    .wlo_from = NATT, /* the router and every expert's w1, w2, w3: read only as GEMM weights (ZeRO 3 gathers them as BF16) */
    .rope = 1,
    .output = moe_output,
    .forward = moe_forward,
    .backward = moe_backward,
    .decode = moe_decode,
    .kv_cache = 1,
    .expert_of = moe_expert_of,
};
