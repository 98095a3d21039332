/* The attention half of the Llama family's blocks (llama_attn.h): written
 * once for a tensor-parallel slice (Megatron-LM's split: q, k, v by columns
 * of this rank's query and key-value heads, o_proj by rows; the norms
 * replicated), called by the dense Llama block and the MoE block.
 *
 * Invariants: the code is the dense block's as it was (the same kernels in
 * the same order on the same buffers), so moving it here changed no bits;
 * temporaries live in the part's scratch (forward) or the workspace the
 * caller hands over (backward). bf16 (cl_nn_bf16; the dense block only, the
 * MoE block is refused there): the two RMSNorm outputs saved as BF16 (GEMM
 * inputs only), written so by the kernels that compute them; the products
 * read BF16 operands (the weights' copy, the gradients narrowed at the
 * scratch's end: cl_llama_lo); RoPE, attention and the norms' statistics
 * and backward F32, as GPT's block. */
#include "nn/cp.h"
#include "nn/llama_attn.h"
#include "nn/model_impl.h"

#include "cleave/prof.h"

#include <stddef.h>

float *cl_llama_attn_layout(const cl_model_desc *d, float *base, int64_t B, int64_t T, float *lse_apart, cl_llama_attn_acts *a) {
    int64_t N = B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local, Kl = d->kv_channels_local;
    float *p = base;
    int64_t lnC = cl_nn_gemm_in_floats(d, Ns * C); /* ln1 and ln2: BF16 in bf16 (GEMM inputs only) */
    a->ln1 = p; p += lnC;
    a->rstd1 = p; p += Ns;
    a->qkv = p; p += N * (Cl + 2 * Kl);
    a->atty = p; p += N * Cl;
    if (lse_apart) a->lse = lse_apart;
    else a->lse = p, p += B * d->heads_local * T;
    a->res2 = p; p += Ns * C;
    a->ln2 = p; p += lnC;
    a->rstd2 = p; p += Ns;
    return p;
}

int64_t cl_llama_attn_act_floats(const cl_model_desc *d, cl_sizer *z) {
    int64_t T = d->T, C = d->cfg.channels, Ts = d->tpl.sp ? T / d->tpl.tp : T;
    int64_t cols = 2 * (int64_t)d->channels_local + 2 * (int64_t)d->kv_channels_local;
    int64_t lnC = cl_nn_gemm_in_floats(d, cl_size_mul(z, Ts, C)); /* ln1 and ln2 (cl_llama_attn_layout) */
    int64_t rows = cl_size_add(z, cl_size_mul(z, Ts, C + 2), 2 * lnC);
    return cl_size_add(z, cl_size_add(z, rows, cl_size_mul(z, T, cols)), cl_size_mul(z, d->heads_local, T));
}

int64_t cl_llama_lo_width(const cl_model_desc *d) {
    int64_t C = d->cfg.channels, Q = d->channels_local + 2 * (int64_t)d->kv_channels_local, F2 = 2 * (int64_t)d->mlp_local;
    int64_t w = C > Q ? C : Q;
    return w > F2 ? w : F2;
}

int64_t cl_llama_lo_floats(const cl_model_desc *d, cl_sizer *z) {
    if (!cl_nn_bf16(d)) return 0;
    return cl_size_add(z, cl_nn_bf16_floats(cl_size_mul(z, d->T, cl_llama_lo_width(d))),
                       cl_nn_bf16_floats(cl_size_mul(z, d->T, d->channels_local)));
}

void cl_llama_lo(const cl_model *m, int64_t N, void **L1, void **L2) {
    const cl_model_desc *d = m->desc;
    float *l2 = m->scratch + m->sizes.scratch - cl_nn_bf16_floats(N * d->channels_local);
    *L2 = l2;
    *L1 = l2 - cl_nn_bf16_floats(N * cl_llama_lo_width(d));
}

void cl_llama_heads(const cl_model_desc *d, int *NH, int *KV, int *hd) {
    *hd = d->cfg.channels / d->cfg.heads;
    *NH = d->heads_local;
    *KV = d->kv_channels_local / *hd;
}

/* q, k and v into their columns of qkv [N, Q] from x (BF16, [N, C]) against the weights' BF16 copies. */
static void qkv_lo(const cl_model *m, float *qkv, const void *x, const cl_llama_attn_weights *w, int64_t N) {
    const cl_model_desc *d = m->desc;
    int iN = (int)N, iC = d->cfg.channels, Cl = d->channels_local, Kl = d->kv_channels_local, iQ = Cl + 2 * Kl;
    cl_nn_gemm_lo(m, 0, 0, iN, Cl, iC, x, iC, cl_nn_wlo(m, w->q_w), Cl, 0.0f, qkv, iQ);
    cl_nn_gemm_lo(m, 0, 0, iN, Kl, iC, x, iC, cl_nn_wlo(m, w->k_w), Kl, 0.0f, qkv + Cl, iQ);
    cl_nn_gemm_lo(m, 0, 0, iN, Kl, iC, x, iC, cl_nn_wlo(m, w->v_w), Kl, 0.0f, qkv + Cl + Kl, iQ);
}

/* The forward in bf16: input_layernorm's and post_attention_layernorm's outputs written as BF16 into their
 * saved slots by the kernels that compute them (this rank's Ns rows; under sequence parallelism the q, k, v
 * products read them gathered as BF16 into the scratch); o_proj's input narrowed into the scratch. */
static cl_status llama_attn_forward_lo(const cl_model *m, const cl_llama_attn_acts *s, const float *in, const cl_llama_attn_weights *w,
                                       int B, int T) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local,
            Q = Cl + 2 * (int64_t)d->kv_channels_local;
    int NH, KV, hd, iN = (int)N, iNs = (int)Ns, iC = (int)C;
    cl_llama_heads(d, &NH, &KV, &hd);
    float eps = (float)d->cfg.rms_norm_eps, *ay = m->scratch, *G = m->scratch;
    const float *cos_t = m->rope, *sin_t = m->rope + m->sizes.tables / 2;
    double fq = 2.0 * (double)N * C * Q, fl = 2.0 * (double)N * C * Cl, att = 4.0 * (double)B * T * T * Cl;
    const float *x;
    CL_PROF("fwd rmsnorm", 0, cl_kern(m)->rmsnorm_forward_bf16((uint16_t *)s->ln1, s->rstd1, in, w->ln1_w, eps, iNs, iC));
    CL_TRY(cl_nn_col_input(m, s->ln1, G, Ns, C, &x));
    CL_PROF("fwd qkv", fq, qkv_lo(m, s->qkv, x, w, N));
    CL_PROF("fwd rope", 0, cl_kern(m)->rope_forward(s->qkv, s->qkv, cos_t, sin_t, iN, T, 0, NH + KV, hd, Q));
    CL_PROF("fwd attention", att, CL_TRY(cl_nn_attention_forward(m, s->atty, s->lse, s->qkv, B, T, (int)Cl, NH, KV)));
    CL_TRY(cl_nn_narrow(m, ay, s->atty, N * Cl));
    CL_TRY(cl_nn_row_linear(m, "fwd o_proj", fl, ay, w->o_w, NULL, s->res2, N, Cl));
    CL_PROF("fwd residual rmsnorm", 0,
            cl_kern(m)->residual_rmsnorm_forward_bf16(s->res2, (uint16_t *)s->ln2, s->rstd2, s->res2, in, w->ln2_w, eps, iNs, iC));
    return CL_OK;
}

cl_status cl_llama_attn_forward(const cl_model *m, const cl_llama_attn_acts *s, const float *in, const cl_llama_attn_weights *w,
                                int B, int T) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local, Kl = d->kv_channels_local,
            Q = Cl + 2 * Kl;
    int NH, KV, hd, iN = (int)N, iC = (int)C, iQ = (int)Q;
    cl_llama_heads(d, &NH, &KV, &hd);
    float eps = (float)d->cfg.rms_norm_eps, *G = m->scratch;
    const float *cos_t = m->rope, *sin_t = m->rope + m->sizes.tables / 2;
    double fq = 2.0 * (double)N * C * Q, fl = 2.0 * (double)N * C * Cl, att = 4.0 * (double)B * T * T * Cl;
    const float *x;
    if (cl_nn_bf16(d)) return llama_attn_forward_lo(m, s, in, w, B, T);
    CL_PROF("fwd rmsnorm", 0, cl_kern(m)->rmsnorm_forward(s->ln1, s->rstd1, in, w->ln1_w, eps, (int)Ns, iC));
    CL_TRY(cl_nn_col_input(m, s->ln1, G, Ns, C, &x));
    CL_PROF("fwd qkv", fq, (cl_sgemm(cl_kern(m), 0, 0, iN, (int)Cl, iC, 1.0f, x, iC, w->q_w, (int)Cl, 0.0f, s->qkv, iQ),
                            cl_sgemm(cl_kern(m), 0, 0, iN, (int)Kl, iC, 1.0f, x, iC, w->k_w, (int)Kl, 0.0f, s->qkv + Cl, iQ),
                            cl_sgemm(cl_kern(m), 0, 0, iN, (int)Kl, iC, 1.0f, x, iC, w->v_w, (int)Kl, 0.0f, s->qkv + Cl + Kl, iQ)));
    CL_PROF("fwd rope", 0, cl_kern(m)->rope_forward(s->qkv, s->qkv, cos_t, sin_t, iN, T, 0, NH + KV, hd, Q));
    CL_PROF("fwd attention", att, CL_TRY(cl_nn_attention_forward(m, s->atty, s->lse, s->qkv, B, T, (int)Cl, NH, KV)));
    CL_TRY(cl_nn_row_linear(m, "fwd o_proj", fl, s->atty, w->o_w, NULL, s->res2, N, Cl));
    CL_PROF("fwd residual rmsnorm", 0, cl_kern(m)->residual_rmsnorm_forward(s->res2, s->ln2, s->rstd2, s->res2, in, w->ln2_w, eps, (int)Ns, iC));
    return CL_OK;
}

int64_t cl_llama_attn_scratch_floats(const cl_model_desc *d, cl_sizer *z) {
    int64_t T = d->T, C = d->cfg.channels, Cl = d->channels_local, Kl = d->kv_channels_local, Ts = d->tpl.sp ? T / d->tpl.tp : T;
    int64_t n = cl_size_mul(z, T, Cl + (Cl + 2 * Kl) + C);
    return d->tpl.sp ? cl_size_add(z, n, cl_size_add(z, cl_size_mul(z, T, C), cl_size_mul(z, Ts, C))) : n;
}

/* bf16: the weight gradients of q, k and v from x (BF16 [N, C]) and dqkv narrowed to BF16 ([N, Q] at dlo); with
 * CLEAVE_WGRAD_PLAIN x first transposed into xt ([C, N] BF16), one transpose for the three products, which read it
 * plain (cl_nn_dweight_src: the same bits as reading x through strides). */
static void qkv_dweight_lo(const cl_model *m, const cl_llama_attn_weights *gw, const void *x, void *xt, const void *dlo, int64_t N) {
    const cl_model_desc *d = m->desc;
    int iN = (int)N, iC = d->cfg.channels, Cl = d->channels_local, Kl = d->kv_channels_local, iQ = Cl + 2 * Kl;
    const uint16_t *dq = dlo;
    int ta, lda;
    const void *a = cl_nn_dweight_src(m, xt, x, N, iC, &ta, &lda);
    cl_nn_gemm_lo(m, ta, 0, iC, Cl, iN, a, lda, dq, iQ, cl_nn_grad_beta(m, gw->q_w), gw->q_w, Cl);
    cl_nn_gemm_lo(m, ta, 0, iC, Kl, iN, a, lda, dq + Cl, iQ, cl_nn_grad_beta(m, gw->k_w), gw->k_w, Kl);
    cl_nn_gemm_lo(m, ta, 0, iC, Kl, iN, a, lda, dq + Cl + Kl, iQ, cl_nn_grad_beta(m, gw->v_w), gw->v_w, Kl);
}

/* bf16: dln1 [N, C] = the q, k and v products' input gradient from dqkv narrowed to BF16 (dlo) and the weights' copies. */
static void qkv_dinput_lo(const cl_model *m, float *dln1, const void *dlo, const cl_llama_attn_weights *w, int64_t N) {
    const cl_model_desc *d = m->desc;
    int iN = (int)N, iC = d->cfg.channels, Cl = d->channels_local, Kl = d->kv_channels_local, iQ = Cl + 2 * Kl;
    const uint16_t *dq = dlo;
    cl_nn_gemm_lo(m, 0, 1, iN, iC, Cl, dq, iQ, cl_nn_wlo(m, w->q_w), Cl, 0.0f, dln1, iC);
    cl_nn_gemm_lo(m, 0, 1, iN, iC, Kl, dq + Cl, iQ, cl_nn_wlo(m, w->k_w), Kl, 1.0f, dln1, iC);
    cl_nn_gemm_lo(m, 0, 1, iN, iC, Kl, dq + Cl + Kl, iQ, cl_nn_wlo(m, w->v_w), Kl, 1.0f, dln1, iC);
}

cl_status cl_llama_attn_backward(cl_model *m, cl_nn_keep *k, const cl_llama_attn_acts *s, const float *in,
                                 const cl_llama_attn_weights *w, const cl_llama_attn_weights *gw, float *dres2, const float *dl2,
                                 float *din, float *G, float *ws, int ww, int B, int T) {
    const cl_model_desc *d = m->desc;
    int sp = d->tpl.sp, run = !k->wonly;
    int64_t N = (int64_t)B * T, Ns = cl_nn_rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local, Kl = d->kv_channels_local,
            Q = Cl + 2 * Kl;
    int NH, KV, hd, iN = (int)N, iNs = (int)Ns, iC = (int)C, iCl = (int)Cl, iKl = (int)Kl, iQ = (int)Q;
    cl_llama_heads(d, &NH, &KV, &hd);
    const cl_kernels *K = cl_kern(m);
    float *datty = ws; ws += N * Cl;
    float *dqkv = ws; ws += N * Q;
    float *dln1 = ws; ws += N * C;
    float *dr2f = NULL, *dln1s = NULL;
    if (sp) {
        dr2f = ws; ws += N * C;
        dln1s = ws; ws += Ns * C;
    }
    float *attscratch = ws;
    /* bf16: at the scratch's end the BF16 form of the gradient the next products read (L1) and of o_proj's input (L2) */
    int lo = cl_nn_bf16(d);
    void *L1 = NULL, *L2 = NULL;
    if (lo) cl_llama_lo(m, N, &L1, &L2);
    CL_ASSERT(attscratch + cl_flash_scratch_floats(B, T, iCl, KV) <= (lo ? (float *)L1 : m->scratch + m->sizes.scratch));
    const float *cos_t = m->rope, *sin_t = m->rope + m->sizes.tables / 2;
    double fq = 2.0 * (double)N * C * Q, fl = 2.0 * (double)N * C * Cl, att = 4.0 * (double)B * T * T * Cl;
    const float *x;
    CL_PROF("bwd zero", 0, cl_device_fill(m->dev, dqkv, 0, (size_t)(N * Q) * sizeof(float)));
    CL_PROF("bwd rmsnorm", 0, K->rmsnorm_backward_input(dres2, dl2, s->res2, w->ln2_w, s->rstd2, iNs, iC));
    if (ww) CL_PROF("bwd rmsnorm w", 0, K->rmsnorm_backward_weight(gw->ln2_w, dl2, s->res2, s->rstd2, iNs, iC));
    /* o_proj, row-parallel */
    const float *dR;
    CL_TRY(cl_nn_row_dout(m, k, run, dres2, dr2f, Ns, &dR));
    if (lo) CL_TRY(cl_nn_narrow(m, L1, dR, N * C));
    if (lo && ww) CL_TRY(cl_nn_narrow(m, L2, s->atty, N * Cl));
    CL_PROF("bwd o_proj", fl, lo ? cl_nn_gemm_lo(m, 0, 1, iN, iCl, iC, L1, iC, cl_nn_wlo(m, w->o_w), iC, 0.0f, datty, iCl)
                                 : cl_sgemm(K, 0, 1, iN, iCl, iC, 1.0f, dR, iC, w->o_w, iC, 0.0f, datty, iCl));
    if (ww) CL_PROF("bwd o_proj w", fl, lo ? cl_nn_linear_dweight_lo(m, gw->o_w, NULL, dR, L1, L2, NULL, N, Cl, C)
                                           : cl_nn_linear_dweight(m, gw->o_w, NULL, dR, s->atty, N, Cl, C));
    /* the score tiles recomputed (q k^T, a third product) besides the four of the gradients */
    CL_PROF("bwd attention", 2.5 * att, CL_TRY(cl_nn_attention_backward(m, dqkv, attscratch, datty, s->qkv, s->atty, s->lse, B, T, iCl, NH, KV)));
    /* the gradients of q and k before their rotation, in place */
    CL_PROF("bwd rope", 0, K->rope_backward_set(dqkv, dqkv, cos_t, sin_t, iN, T, 0, NH + KV, hd, Q));
    if (lo) CL_TRY(cl_nn_narrow(m, L1, dqkv, N * Q));
    if (ww) {
        CL_TRY(cl_nn_col_input(m, s->ln1, G, Ns, C, &x));
        if (lo) CL_PROF("bwd qkv w", fq, qkv_dweight_lo(m, gw, x, dln1, L1, N)); /* dln1 free until the products below */
        else
            CL_PROF("bwd qkv w", fq, (cl_sgemm(K, 1, 0, iC, iCl, iN, 1.0f, x, iC, dqkv, iQ, cl_nn_grad_beta(m, gw->q_w), gw->q_w, iCl),
                                      cl_sgemm(K, 1, 0, iC, iKl, iN, 1.0f, x, iC, dqkv + Cl, iQ, cl_nn_grad_beta(m, gw->k_w), gw->k_w, iKl),
                                      cl_sgemm(K, 1, 0, iC, iKl, iN, 1.0f, x, iC, dqkv + Cl + Kl, iQ, cl_nn_grad_beta(m, gw->v_w), gw->v_w, iKl)));
    }
    /* q, k, v, column-parallel by heads */
    if (run && lo) CL_PROF("bwd qkv", fq, qkv_dinput_lo(m, dln1, L1, w, N));
    else if (run)
        CL_PROF("bwd qkv", fq, (cl_sgemm(K, 0, 1, iN, iC, iCl, 1.0f, dqkv, iQ, w->q_w, iCl, 0.0f, dln1, iC),
                                cl_sgemm(K, 0, 1, iN, iC, iKl, 1.0f, dqkv + Cl, iQ, w->k_w, iKl, 1.0f, dln1, iC),
                                cl_sgemm(K, 0, 1, iN, iC, iKl, 1.0f, dqkv + Cl + Kl, iQ, w->v_w, iKl, 1.0f, dln1, iC)));
    const float *dl1;
    CL_TRY(cl_nn_col_dinput(m, k, run, dln1, dln1s, Ns, &dl1));
    if (ww) CL_PROF("bwd rmsnorm w", 0, K->rmsnorm_backward_weight(gw->ln1_w, dl1, in, s->rstd1, iNs, iC));
    if (din) {
        CL_PROF("bwd rmsnorm", 0, K->rmsnorm_backward_input(din, dl1, in, w->ln1_w, s->rstd1, iNs, iC));
        CL_PROF("bwd residual", 0, K->add_inplace(din, dres2, Ns * C));
    }
    return CL_OK;
}

cl_status cl_llama_attn_relse(const cl_model *m, const cl_llama_attn_acts *s, int B, int T) {
    int NH, KV, hd;
    cl_llama_heads(m->desc, &NH, &KV, &hd);
    return cl_nn_attention_forward(m, s->atty, s->lse, s->qkv, B, T, m->desc->channels_local, NH, KV);
}

/* R token rows (B T), Rs of them between the split layers (sequence parallelism: R / tp). */
void cl_llama_block_cost(const cl_model_desc *d, int B, double e, int recompute, int causal, cl_llama_mlp_cost_fn *mlp,
                         cl_unit_cost *o) {
    double T = d->T, C = d->cfg.channels, Cl = d->channels_local, H = d->heads_local, hd = C / d->cfg.heads;
    double Q = Cl + 2.0 * d->kv_channels_local;
    int tp = d->tpl.tp, sp = d->tpl.sp;
    double R = (double)B * T, Rs = sp ? R / tp : R, act = R * C * e;
    /* attention as GPT's block prices it (kind_block.c): causal, cleave's blockwise kernels (the lse's bytes, D's
     * reads in the backward, the recomputed q k^T as re-forward work); else the T x T scores kept and masked */
    cl_cost_att a = cl_cost_attention_of(d, B, e, causal);
    double K = a.K, att = a.att, attf = a.fwd, attb = a.bwd;
    cl_pass_cost *f = &o->pass[CL_PASS_F], *b = &o->pass[CL_PASS_B], *w = &o->pass[CL_PASS_W], *rf = &o->pass[CL_PASS_RF];
    cl_cost_gemm(f, R, Q, C, 1, CL_GEMM_NN);
    cl_cost_attention_products(f, NULL, T, K, hd, B * H, att);
    cl_cost_gemm(f, R, C, Cl, 1, CL_GEMM_NN);
    /* RMSNorm (read, write), the rotation of q and k (read, write), attention's as above, residual + RMSNorm (read 2,
     * write 2) */
    double qk = R * (Q - d->kv_channels_local);
    f->bytes = e * (2 * Rs * C + 2 * qk + 4 * Rs * C) + attf;
    cl_cost_narrow(f, d, R * Cl, 0); /* bf16: o_proj's input narrowed */
    cl_cost_split_pair(f, act, tp, sp);
    cl_cost_gemm(b, R, C, Q, 1, CL_GEMM_NT);
    cl_cost_attention_products(NULL, b, T, K, hd, B * H, att);
    cl_cost_gemm(b, R, Cl, C, 1, CL_GEMM_NT);
    /* the rotation back, attention's as above, the two norms' input gradients; dqkv's zeroing, the residual
     * gradient's copy and add */
    b->bytes = e * (2 * qk + 4 * Rs * C + 3 * Rs * C) + attb;
    b->stream = e * (R * Q + 2 * Rs * C);
    cl_cost_narrow(b, d, R * C, 0), cl_cost_narrow(b, d, R * Q, 0); /* bf16: dR and dqkv narrowed for the products */
    cl_cost_split_pair(b, act, tp, sp);
    cl_cost_gemm(w, C, Q, R, 1, CL_GEMM_TN);
    cl_cost_gemm(w, Cl, C, R, 1, CL_GEMM_TN);
    w->bytes = e * (R * Q + 2 * Rs * C + 2 * 2 * Rs * C);
    cl_cost_narrow(w, d, R * Cl, 0); /* bf16: o_proj's input narrowed again for its weight gradient */
    if (sp) cl_cost_coll(w, CL_COLL_ALLGATHER, act, tp);
    mlp(d, B, e, o);
    cl_cost_attention_rf(rf, f, recompute, causal, T, K, hd, B * H, att, attf);
}

cl_status cl_llama_attn_decode(const cl_model *m, const cl_decode_step *st, const float *in, const cl_llama_attn_weights *w,
                               const cl_nn_decode_ws *b) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)st->B * st->n, C = d->cfg.channels, Cl = d->channels_local, Kl = d->kv_channels_local, Q = Cl + 2 * Kl;
    int NH, KV, hd, iN = (int)N, iC = (int)C, iQ = (int)Q;
    cl_llama_heads(d, &NH, &KV, &hd);
    float eps = (float)d->cfg.rms_norm_eps;
    const cl_kernels *K = cl_kern(m);
    K->rmsnorm_forward(b->ln1, b->stats, in, w->ln1_w, eps, iN, iC);
    cl_sgemm(K, 0, 0, iN, (int)Cl, iC, 1.0f, b->ln1, iC, w->q_w, (int)Cl, 0.0f, b->qkv, iQ);
    cl_sgemm(K, 0, 0, iN, (int)Kl, iC, 1.0f, b->ln1, iC, w->k_w, (int)Kl, 0.0f, b->qkv + Cl, iQ);
    cl_sgemm(K, 0, 0, iN, (int)Kl, iC, 1.0f, b->ln1, iC, w->v_w, (int)Kl, 0.0f, b->qkv + Cl + Kl, iQ);
    K->rope_forward(b->qkv, b->qkv, m->rope, m->rope + m->sizes.tables / 2, iN, st->n, st->pos0, NH + KV, hd, Q);
    cl_nn_decode_attention(m, st, b->qkv, b->atty);
    CL_TRY(cl_nn_row_linear(m, "dec o_proj", 0, b->atty, w->o_w, NULL, b->res2, N, Cl));
    K->residual_rmsnorm_forward(b->res2, b->ln2, b->stats + N, b->res2, in, w->ln2_w, eps, iN, iC);
    return CL_OK;
}
