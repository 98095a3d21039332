/* The Llama block (Hugging Face's LlamaDecoderLayer) as a unit kind
 * (kind.h): x + o_proj(attn(rope(q), rope(k), v)) of input_layernorm(x),
 * then + down_proj(silu(gate_proj(.)) * up_proj(.)) of
 * post_attention_layernorm(.); RMSNorm, grouped-query causal attention
 * (query head h reads key-value head h / (heads / kv_heads)), no biases.
 * Megatron-LM's split, as data: q, k, v by columns of this rank's query and
 * key-value heads (past tp = kv heads, the one key-value head its query
 * heads read, replicated on tp / kv ranks: CL_TPS_KV, its gradient summed
 * over them by the trainer), gate and up by columns, o_proj and down_proj by rows;
 * the norms replicated (a partial gradient under sequence parallelism).
 *
 * The table describes the block (parameters, sizes, saved activations,
 * scratch, cost) for the description, the memory predictor and the
 * planner; its forward and backward follow GPT's block (kind_block.c) with
 * Llama's kernels: q, k and v are three products written into the columns
 * of one [q | k | v] row (the grouped-query attention's layout), q and k
 * rotated in place at positions 0 .. T-1 from the part's tables (m->rope).
 * Attention is blockwise (flash.c, grouped-query: the table's flash entries
 * with this rank's kv heads): the block keeps its output and each score
 * row's log-sum-exp, never the T x T scores, and its backward recomputes the
 * score tiles. Recomputation (selective: the attention's lse, from the saved
 * qkv, as GPT's block; full: everything but the output) re-runs the
 * forward's own kernels, so the bits do not change.
 *
 * Invariants: parameters in checkpoint order under Hugging Face's names,
 * linear weights [in, out] as cleave stores GPT's; the saved activations
 * per sample are the layout block_sizes counts (the forward will write
 * exactly these): rows Ts of C (ln1, res2, ln2, out) and their two rstd,
 * rows T of this rank's columns (qkv after the rotation: Cl + 2 Kl; atty:
 * Cl; gate, up and their SwiGLU product: Fl each) and the attention's lse
 * (this rank's heads per token). The attention half (llama_attn.c) is
 * shared with the MoE block: its activations and weights are this block's
 * first ones.
 *
 * bf16 (cl_nn_bf16; docs/ARCHITECTURE.md "bf16 mixed precision"), as GPT's
 * block: the saved GEMM inputs (both RMSNorm outputs, the SwiGLU product)
 * BF16, written so by the kernels that compute them; every product reads
 * BF16 operands (the weights' copy m->wlow, the gradients narrowed just
 * before into the scratch's end, cl_llama_lo) with F32 accumulation and
 * output; RoPE, attention, the norms' statistics, SwiGLU and every
 * backward kernel F32. */
#include "nn/kind.h"
#include "nn/llama_attn.h"
#include "nn/model_impl.h"

#include "cleave/prof.h"

#include <math.h>
#include <stddef.h>

typedef struct {
    cl_llama_attn_weights at; /* the attention half's, first */
    float *gate_w, *up_w, *down_w;
} llama_block_weights;

#define F(x) offsetof(llama_block_weights, x)
static const cl_kind_param llama_block_params[] = {
    {"input_layernorm.weight", F(at.ln1_w), CL_TPS_NORM, 0, CL_INIT_ONES, 0},
    {"self_attn.q_proj.weight", F(at.q_w), CL_TPS_COLUMNS, 1, CL_INIT_NORMAL, 0},
    {"self_attn.k_proj.weight", F(at.k_w), CL_TPS_KV, 1, CL_INIT_NORMAL, 0},
    {"self_attn.v_proj.weight", F(at.v_w), CL_TPS_KV, 1, CL_INIT_NORMAL, 0},
    {"self_attn.o_proj.weight", F(at.o_w), CL_TPS_ROWS, 1, CL_INIT_NORMAL, 0},
    {"post_attention_layernorm.weight", F(at.ln2_w), CL_TPS_NORM, 0, CL_INIT_ONES, 0},
    {"mlp.gate_proj.weight", F(gate_w), CL_TPS_COLUMNS, 1, CL_INIT_NORMAL, 0},
    {"mlp.up_proj.weight", F(up_w), CL_TPS_COLUMNS, 1, CL_INIT_NORMAL, 0},
    {"mlp.down_proj.weight", F(down_w), CL_TPS_ROWS, 1, CL_INIT_NORMAL, 0},
};
enum { NPARAMS = sizeof llama_block_params / sizeof llama_block_params[0] };

/* Whole shapes, [in, out]: q and o C x C, k and v C x K (K = kv_heads x C / heads), gate and up C x F, down
 * F x C; normal(0, 0.02) (HF's initializer_range), o and down scaled by 1/sqrt(2 x layers) as GPT's residual
 * projections; the norms start at one. */
static void llama_block_param(const cl_model_desc *d, const cl_unit *un, int i, cl_param_shape *o) {
    (void)un;
    int64_t C = d->cfg.channels, K = (int64_t)cl_model_kv_heads(&d->cfg) * (C / d->cfg.heads), Fw = cl_model_mlp_width(&d->cfg);
    size_t f = llama_block_params[i].field;
    if (f == F(at.ln1_w) || f == F(at.ln2_w)) {
        o->ndim = 1, o->shape[0] = C, o->scale = 0;
        return;
    }
    o->ndim = 2;
    o->shape[0] = f == F(down_w) ? Fw : C;
    o->shape[1] = f == F(at.k_w) || f == F(at.v_w) ? K : f == F(gate_w) || f == F(up_w) ? Fw : C;
    o->scale = f == F(at.o_w) || f == F(down_w) ? 0.02f / sqrtf(2.0f * (float)d->cfg.layers) : 0.02f;
}

/* What selective recompute drops and redoes at micro-batch B: the attention's lse, B NHl T (its output,
 * o_proj's input, stays saved). */
static int64_t llama_block_lse_floats(const cl_model_desc *d, int B) { return (int64_t)B * d->heads_local * d->T; }

typedef struct {
    cl_llama_attn_acts at; /* the attention half's, first */
    float *gate, *up, *h, *out;
} llama_acts;

/* The saved activations from base for the actual B and T, in llama_block_sizes' order: rows Ns of C (ln1,
 * then its rstd; res2, ln2, rstd2; out) and N rows of this rank's columns (qkv: Cl + 2 Kl, atty: Cl; gate,
 * up, h: Fl each), the attention's lse (B NHl T) after atty. lse_apart: the lse lives there (selective
 * recompute), not in base. */
static llama_acts llama_layout_at(const cl_model_desc *d, float *base, int64_t B, int64_t T, float *lse_apart) {
    int64_t N = B * T, Fl = d->mlp_local;
    llama_acts a;
    float *p = cl_llama_attn_layout(d, base, B, T, lse_apart, &a.at);
    a.gate = p; p += N * Fl;
    a.up = p; p += N * Fl;
    a.h = p; p += cl_nn_gemm_in_floats(d, N * Fl); /* BF16 in bf16 (down_proj's input only) */
    a.out = p;
    return a;
}

static llama_acts llama_acts_of(const cl_model *m, float *base, int64_t B, int64_t T) {
    const cl_model_desc *d = m->desc;
    if (m->recompute == CL_RECOMPUTE_SELECTIVE) return llama_layout_at(d, base, B, T, m->rc_buf);
    if (m->recompute == CL_RECOMPUTE_FULL) {
        llama_acts a = llama_layout_at(d, m->rc_buf, B, T, NULL);
        a.out = base; /* the one thing kept */
        return a;
    }
    return llama_layout_at(d, base, B, T, NULL);
}

static float *llama_output(const cl_model *m, float *base, int B, int T) { return llama_acts_of(m, base, B, T).out; }

/* The forward (Megatron-LM's split, written once): q, k, v column-parallel by heads, o_proj row-parallel;
 * gate and up column-parallel, down_proj row-parallel. The temporaries (gathered rows, partial sums) live in
 * the part's scratch. */
static cl_status llama_pass(const cl_model *m, const llama_acts *s, const float *in, const llama_block_weights *w, int B, int T) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Fl = d->mlp_local;
    int iN = (int)N, iC = (int)C;
    float *G = m->scratch;
    double ff = 2.0 * (double)N * C * Fl;
    const float *x;
    CL_TRY(cl_llama_attn_forward(m, &s->at, in, &w->at, B, T));
    CL_TRY(cl_nn_col_input(m, s->at.ln2, G, Ns, C, &x));
    if (cl_nn_bf16(d)) { /* ln2 BF16 against the weights' copies; the SwiGLU product written as BF16 */
        CL_PROF("fwd gate up", 2 * ff, (cl_nn_linear_lo(m, s->gate, x, w->gate_w, NULL, N, C, Fl), cl_nn_linear_lo(m, s->up, x, w->up_w, NULL, N, C, Fl)));
        CL_PROF("fwd swiglu", 0, cl_kern(m)->swiglu_forward_bf16((uint16_t *)s->h, s->gate, s->up, N * Fl));
    } else {
        CL_PROF("fwd gate up", 2 * ff, (cl_sgemm(cl_kern(m), 0, 0, iN, (int)Fl, iC, 1.0f, x, iC, w->gate_w, (int)Fl, 0.0f, s->gate, (int)Fl),
                                         cl_sgemm(cl_kern(m), 0, 0, iN, (int)Fl, iC, 1.0f, x, iC, w->up_w, (int)Fl, 0.0f, s->up, (int)Fl)));
        CL_PROF("fwd swiglu", 0, cl_kern(m)->swiglu_forward(s->h, s->gate, s->up, N * Fl));
    }
    CL_TRY(cl_nn_row_linear(m, "fwd down_proj", ff, s->h, w->down_w, NULL, s->out, N, Fl));
    CL_PROF("fwd residual", 0, cl_kern(m)->add_inplace(s->out, s->at.res2, Ns * C));
    return CL_OK;
}

/* What a split backward's input pass keeps for its weight pass: as GPT's block. */
static int64_t llama_block_keep(const cl_model_desc *d, const cl_unit *un, int B) {
    (void)un;
    if (d->tpl.tp == 1) return 0;
    int64_t N = (int64_t)B * d->T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels;
    return d->tpl.sp ? 2 * N * C + 2 * Ns * C : 2 * N * C;
}

/* bf16: gate's and up's weight gradients from x (BF16 [N, C]), transposed once into xt when xt (cl_nn_dweight_src),
 * and their narrowed output gradients dglo, dulo ([N, F/tp] each). */
static void gate_up_dweight_lo(const cl_model *m, const llama_block_weights *gw, const void *x, void *xt, const uint16_t *dglo,
                               const uint16_t *dulo, int64_t N) {
    int iN = (int)N, iC = m->desc->cfg.channels, iFl = (int)m->desc->mlp_local, ta, lda;
    const void *a = cl_nn_dweight_src(m, xt, x, N, iC, &ta, &lda);
    cl_nn_gemm_lo(m, ta, 0, iC, iFl, iN, a, lda, dglo, iFl, cl_nn_grad_beta(m, gw->gate_w), gw->gate_w, iFl);
    cl_nn_gemm_lo(m, ta, 0, iC, iFl, iN, a, lda, dulo, iFl, cl_nn_grad_beta(m, gw->up_w), gw->up_w, iFl);
}

/* The backward (the forward's split, written once; a split group's weight pass reads the input pass's
 * collective results back, one rank computes its input gradients again). The scratch gradients are assigned
 * where first written (beta 0), but dgate and dup (SwiGLU's backward adds) and dqkv (attention's) start at 0. */
static cl_status llama_backward_pass(cl_model *m, const llama_acts *s, const float *in, const llama_block_weights *w,
                                     const llama_block_weights *gw, const float *dout, float *din, int wi, int ww, int B, int T) {
    const cl_model_desc *d = m->desc;
    int sp = d->tpl.sp, split = d->tpl.tp > 1;
    int64_t N = (int64_t)B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Fl = d->mlp_local;
    int iN = (int)N, iC = (int)C, iFl = (int)Fl;
    const cl_kernels *K = cl_kern(m);
    cl_nn_keep k = {split ? m->tp_keep : NULL, ww && !wi && split, m->dev};
    if (k.wonly && !k.keep) return cl_error(CL_ERR_INTERNAL, "a tensor-parallel weight pass without the input pass's results");
    int run = !k.wonly;
    float *ws = m->scratch;
    float *dres2 = ws; ws += Ns * C;
    float *dgate = ws; ws += N * Fl;
    float *dup = ws; ws += N * Fl;
    float *dh = ws; ws += N * Fl;
    float *dln2 = ws; ws += N * C;
    float *dof = NULL, *G = NULL, *dln2s = NULL;
    if (sp) {
        dof = ws; ws += N * C;
        G = ws; ws += N * C;
        dln2s = ws; ws += Ns * C;
    }
    double ff = 2.0 * (double)N * C * Fl;
    const float *x;
    /* bf16: the gradients the products read narrowed into L1 at the scratch's end (dgate and dup side by side) */
    int lo = cl_nn_bf16(d);
    void *L1 = NULL, *L2 = NULL;
    if (lo) cl_llama_lo(m, N, &L1, &L2);
    const uint16_t *dglo = L1, *dulo = dglo ? dglo + N * Fl : NULL;
    CL_PROF("bwd zero", 0, cl_device_fill(m->dev, dgate, 0, (size_t)(2 * N * Fl) * sizeof(float)));
    CL_PROF("bwd residual", 0, cl_device_copy(m->dev, dres2, dout, (size_t)(Ns * C) * sizeof(float)));
    /* down_proj, row-parallel */
    const float *dO;
    CL_TRY(cl_nn_row_dout(m, &k, run, dout, dof, Ns, &dO));
    if (lo) CL_TRY(cl_nn_narrow(m, L1, dO, N * C));
    CL_PROF("bwd down_proj", ff, lo ? cl_nn_gemm_lo(m, 0, 1, iN, iFl, iC, L1, iC, cl_nn_wlo(m, w->down_w), iC, 0.0f, dh, iFl)
                                    : cl_sgemm(K, 0, 1, iN, iFl, iC, 1.0f, dO, iC, w->down_w, iC, 0.0f, dh, iFl));
    if (ww) CL_PROF("bwd down_proj w", ff, lo ? cl_nn_linear_dweight_lo(m, gw->down_w, NULL, dO, L1, s->h, NULL, N, Fl, C)
                                              : cl_nn_linear_dweight(m, gw->down_w, NULL, dO, s->h, N, Fl, C));
    CL_PROF("bwd swiglu", 0, K->swiglu_backward(dgate, dup, dh, s->gate, s->up, N * Fl));
    if (lo) CL_TRY(cl_nn_narrow(m, L1, dgate, 2 * N * Fl)); /* dup follows dgate in the workspace */
    /* gate and up, column-parallel: the input gradient is a partial sum over the ranks' columns */
    if (run && lo)
        CL_PROF("bwd gate up", 2 * ff, (cl_nn_gemm_lo(m, 0, 1, iN, iC, iFl, dglo, iFl, cl_nn_wlo(m, w->gate_w), iFl, 0.0f, dln2, iC),
                                         cl_nn_gemm_lo(m, 0, 1, iN, iC, iFl, dulo, iFl, cl_nn_wlo(m, w->up_w), iFl, 1.0f, dln2, iC)));
    else if (run)
        CL_PROF("bwd gate up", 2 * ff, (cl_sgemm(K, 0, 1, iN, iC, iFl, 1.0f, dgate, iFl, w->gate_w, iFl, 0.0f, dln2, iC),
                                         cl_sgemm(K, 0, 1, iN, iC, iFl, 1.0f, dup, iFl, w->up_w, iFl, 1.0f, dln2, iC)));
    const float *dl2;
    CL_TRY(cl_nn_col_dinput(m, &k, run, dln2, dln2s, Ns, &dl2));
    if (ww) {
        CL_TRY(cl_nn_col_input(m, s->at.ln2, G, Ns, C, &x)); /* sequence-parallel: gathered again, not kept */
        /* bf16, with CLEAVE_WGRAD_PLAIN (cl_nn_dweight_src): x transposed once into dh (free since SwiGLU's backward
         * read it) where dh holds it (F/tp >= C/2), else read through strides; the same bits either way */
        if (lo) CL_PROF("bwd gate up w", 2 * ff, gate_up_dweight_lo(m, gw, x, Fl >= cl_nn_bf16_floats(C) ? dh : NULL, dglo, dulo, N));
        else
            CL_PROF("bwd gate up w", 2 * ff, (cl_nn_linear_dweight(m, gw->gate_w, NULL, dgate, x, N, C, Fl),
                                               cl_nn_linear_dweight(m, gw->up_w, NULL, dup, x, N, C, Fl)));
    }
    return cl_llama_attn_backward(m, &k, &s->at, in, &w->at, &gw->at, dres2, dl2, din, G, ws, ww, B, T);
}

static cl_status llama_block_forward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                                     float *const *p) {
    (void)un;
    llama_block_weights w;
    cl_kind_bind(&cl_kind_llama_block, p, &w);
    llama_acts s = llama_acts_of(m, base, mb->B, mb->T);
    return llama_pass(m, &s, in, &w, mb->B, mb->T);
}

static cl_status llama_block_backward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                                      float *const *p, float *const *g, const float *dout, float *din, int what) {
    (void)un;
    llama_block_weights w, gw;
    cl_kind_bind(&cl_kind_llama_block, p, &w);
    cl_kind_bind(&cl_kind_llama_block, g, &gw);
    int B = mb->B, T = mb->T;
    llama_acts s = llama_acts_of(m, base, B, T);
    /* what the forward did not keep, recomputed bit for bit (the output it writes again is the same) */
    if (m->recompute == CL_RECOMPUTE_FULL) CL_TRY(llama_pass(m, &s, in, &w, B, T));
    else if (m->recompute == CL_RECOMPUTE_SELECTIVE) CL_TRY(cl_llama_attn_relse(m, &s.at, B, T)); /* the lse from the kept qkv */
    return llama_backward_pass(m, &s, in, &w, &gw, dout, din, what & CL_BWD_INPUT, what & CL_BWD_WEIGHT, B, T);
}

/* Per sample: input and output Ts x C; saved as the header says; the backward's workspace: the output
 * gradient's rows (3 C: dres2, the norm's gradient, a gathered input), datty, dqkv, dgate, dup, dh and
 * the blockwise attention's tiles (cl_flash_scratch_floats with this rank's kv heads: its backward's
 * tasks are (sample, kv head)); sequence parallelism: the gathered rows as GPT's block. FLOPs: the seven
 * products and the attention's two, causal or not counted whole (as GPT's). */
static void llama_block_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    int tp = d->tpl.tp, sp = d->tpl.sp;
    int64_t T = d->T, C = d->cfg.channels, Cl = d->channels_local, Kl = d->kv_channels_local, Fl = d->mlp_local;
    int64_t Ts = sp ? T / tp : T, Fw = cl_model_mlp_width(&d->cfg);
    int64_t K = (int64_t)cl_model_kv_heads(&d->cfg) * (C / d->cfg.heads);
    un->in_floats = cl_size_mul(z, Ts, C);
    un->out_floats = un->in_floats;
    int64_t lse = cl_size_mul(z, d->heads_local, T);
    int64_t cols = 2 * Cl + 2 * Kl + 2 * Fl;
    /* ln1 and ln2 (Ts C each) and h (T Fl) are BF16 in bf16 (llama_layout_at) */
    int64_t lnC = cl_nn_gemm_in_floats(d, cl_size_mul(z, Ts, C)), hF = cl_nn_gemm_in_floats(d, cl_size_mul(z, T, Fl));
    int64_t rest = cl_size_add(z, cl_size_mul(z, Ts, 2 * C + 2), cl_size_mul(z, T, cols));
    un->act_floats = cl_size_add(z, cl_size_add(z, cl_size_add(z, rest, 2 * lnC), hF), lse);
    int64_t wcols = Cl + (Cl + 2 * Kl) + 3 * Fl;
    int64_t ws = sp ? cl_size_add(z, cl_size_mul(z, T, 5 * C + wcols), cl_size_mul(z, Ts, 3 * C)) : cl_size_mul(z, T, 3 * C + wcols);
    int KVl = (int)(Kl / (C / d->cfg.heads));
    /* bf16: the backward's BF16 gradient and o_proj input at the scratch's end (cl_llama_lo; 0 in fp32) */
    un->scratch_floats = cl_size_add(z, cl_size_add(z, ws, cl_flash_scratch_floats(1, (int)T, (int)Cl, KVl)), cl_llama_lo_floats(d, z));
    double lin = (double)(2 * C + 2 * K + 3 * Fw) * (double)C;
    un->flops = (2.0 * (double)T * lin + 4.0 * (double)T * cl_nn_key_tokens(d) * (double)C) / tp;
}

static int64_t llama_block_act_floats(const cl_model_desc *d, const cl_unit *un, int B, int recompute) {
    if (recompute == CL_RECOMPUTE_FULL) return un->out_floats * B;
    int64_t n = un->act_floats * B;
    return recompute == CL_RECOMPUTE_SELECTIVE ? n - llama_block_lse_floats(d, B) : n;
}

static int64_t llama_block_rc_floats(const cl_model_desc *d, const cl_unit *un, int B, int recompute) {
    return recompute == CL_RECOMPUTE_FULL ? un->act_floats * B : recompute == CL_RECOMPUTE_SELECTIVE ? llama_block_lse_floats(d, B) : 0;
}

/* The planner's cost (nn/cost.h): the attention half's (cl_llama_block_cost), then the dense MLP's: gate and up
 * (columns), SwiGLU, down (rows), residual. R token rows (B T), Rs of them between the split layers (sequence
 * parallelism: R / tp). */
static void llama_mlp_cost(const cl_model_desc *d, int B, double e, cl_unit_cost *o) {
    double C = d->cfg.channels, Fl = d->mlp_local;
    int tp = d->tpl.tp, sp = d->tpl.sp;
    double R = (double)B * d->T, Rs = sp ? R / tp : R, act = R * C * e;
    cl_pass_cost *f = &o->pass[CL_PASS_F], *b = &o->pass[CL_PASS_B], *w = &o->pass[CL_PASS_W];
    cl_cost_gemm(f, R, 2 * Fl, C, 1, CL_GEMM_NN);
    cl_cost_gemm(f, R, C, Fl, 1, CL_GEMM_NN);
    f->bytes += e * (3 * R * Fl + 3 * Rs * C); /* SwiGLU (read 2, write 1), the last residual (read 2, write 1) */
    cl_cost_split_pair(f, act, tp, sp);
    cl_cost_gemm(b, R, C, 2 * Fl, 1, CL_GEMM_NT);
    cl_cost_gemm(b, R, Fl, C, 1, CL_GEMM_NT);
    b->bytes += e * 5 * R * Fl; /* SwiGLU backward (read 3, write 2) */
    cl_cost_narrow(b, d, R * C, 0), cl_cost_narrow(b, d, 2 * R * Fl, 0); /* bf16: dO, dgate and dup narrowed */
    cl_cost_split_pair(b, act, tp, sp);
    cl_cost_gemm(w, C, 2 * Fl, R, 1, CL_GEMM_TN);
    cl_cost_gemm(w, Fl, C, R, 1, CL_GEMM_TN);
    w->bytes += e * 2 * R * Fl;
    if (sp) cl_cost_coll(w, CL_COLL_ALLGATHER, act, tp);
}

static void llama_block_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal, cl_unit_cost *o) {
    (void)un;
    cl_llama_block_cost(d, B, e, recompute, causal, llama_mlp_cost, o);
}

/* Generation's step (nn/decode.c): llama_pass on the step's new rows only: the attention half's decode
 * (llama_attn.c: q and k rotated at positions pos0 + t, the attention over the KV cache), then the MLP on
 * the rows in the decoder's workspace (no sequence parallelism). */
static cl_status llama_block_decode(cl_model *m, const cl_unit *un, const cl_decode_step *st, const float *in, float *out,
                                    float *const *p) {
    (void)un;
    const cl_model_desc *d = m->desc;
    llama_block_weights w;
    cl_kind_bind(&cl_kind_llama_block, p, &w);
    int64_t N = (int64_t)st->B * st->n, C = d->cfg.channels, Fl = d->mlp_local;
    int iN = (int)N, iC = (int)C;
    cl_nn_decode_ws b = cl_nn_decode_carve(m, st);
    float *gate = b.mlp, *up = b.mlp + N * Fl, *h = b.mlp + 2 * N * Fl;
    const cl_kernels *K = cl_kern(m);
    CL_TRY(cl_llama_attn_decode(m, st, in, &w.at, &b));
    cl_sgemm(K, 0, 0, iN, (int)Fl, iC, 1.0f, b.ln2, iC, w.gate_w, (int)Fl, 0.0f, gate, (int)Fl);
    cl_sgemm(K, 0, 0, iN, (int)Fl, iC, 1.0f, b.ln2, iC, w.up_w, (int)Fl, 0.0f, up, (int)Fl);
    K->swiglu_forward(h, gate, up, N * Fl);
    CL_TRY(cl_nn_row_linear(m, "dec down_proj", 0, h, w.down_w, NULL, out, N, Fl));
    K->add_inplace(out, b.res2, N * C);
    return CL_OK;
}

const cl_kind cl_kind_llama_block = {
    .name = "llama_block",
    .prefixed = 1,
    .nparams = NPARAMS,
    .params = llama_block_params,
    .sizes = llama_block_sizes,
    .param = llama_block_param,
    .act_floats = llama_block_act_floats,
    .rc_floats = llama_block_rc_floats,
    .cost = llama_block_cost,
    .repeated = 1,
    .weight_redo = 1,
    .keep_floats = llama_block_keep,
    .z3_reads = CL_KIND_READS_ALL,
    .wlo = CL_KIND_WLO(1) | CL_KIND_WLO(2) | CL_KIND_WLO(3) | CL_KIND_WLO(4) | CL_KIND_WLO(6) | CL_KIND_WLO(7) |
           CL_KIND_WLO(8), /* q, k, v, o, gate, up, down: read only as GEMM weights (ZeRO 3 gathers them as BF16) */
    .gfirst = CL_KIND_GFIRST(1) | CL_KIND_GFIRST(2) | CL_KIND_GFIRST(3) | CL_KIND_GFIRST(4) | CL_KIND_GFIRST(6) |
              CL_KIND_GFIRST(7) | CL_KIND_GFIRST(8), /* their weight products */
    .rope = 1,
    .output = llama_output,
    .forward = llama_block_forward,
    .backward = llama_block_backward,
    .decode = llama_block_decode,
    .kv_cache = 1,
};
