/* The attention half of the Llama family's blocks (internal to src/nn):
 * input_layernorm, q/k/v, RoPE, grouped-query blockwise attention, o_proj,
 * the residual and post_attention_layernorm, forward and backward, shared by
 * the dense Llama block (kind_llama_block.c) and the MoE block
 * (kind_moe_block.c), which differ only in the MLP that follows.
 *
 * Invariants: the saved activations are a prefix of the block's layout
 * (cl_llama_attn_layout: ln1, rstd1, qkv, atty, lse, res2, ln2, rstd2), the
 * weights a prefix of its parameters (input_layernorm, q, k, v, o,
 * post_attention_layernorm), so the dense block's bits and sizes are those it
 * had before the split. */
#ifndef CLEAVE_NN_LLAMA_ATTN_H
#define CLEAVE_NN_LLAMA_ATTN_H

#include "nn/kind.h"

typedef struct {
    float *ln1_w, *q_w, *k_w, *v_w, *o_w, *ln2_w;
} cl_llama_attn_weights;

typedef struct {
    float *ln1, *rstd1, *qkv, *atty, *lse, *res2, *ln2, *rstd2;
} cl_llama_attn_acts;

/* The attention half's saved activations from base for B x T (rows Ns of C for ln1, res2, ln2 and the two
 * rstd; N rows of this rank's qkv and atty columns; the lse, or lse_apart when given). Returns the first
 * float after them. */
float *cl_llama_attn_layout(const cl_model_desc *d, float *base, int64_t B, int64_t T, float *lse_apart, cl_llama_attn_acts *a);
/* Floats of that layout per sample, the lse included. */
int64_t cl_llama_attn_act_floats(const cl_model_desc *d, cl_sizer *z);
/* this rank's query and key-value heads, and the head width */
void cl_llama_heads(const cl_model_desc *d, int *NH, int *KV, int *hd);
/* The forward from in to res2 = in + o_proj(attn(.)) and ln2 = RMSNorm(res2); temporaries in the part's scratch. */
cl_status cl_llama_attn_forward(const cl_model *m, const cl_llama_attn_acts *s, const float *in, const cl_llama_attn_weights *w,
                                int B, int T);
/* bf16: the width of the backward's BF16 gradient (the widest product input gradient: C, this rank's q, k, v
 * columns, or gate and up's 2 Fl together), and the floats per sample of the two BF16 arrays at the scratch's
 * end (cl_llama_lo; 0 in fp32), which the block's sizes add to its scratch. */
int64_t cl_llama_lo_width(const cl_model_desc *d);
int64_t cl_llama_lo_floats(const cl_model_desc *d, cl_sizer *z);
/* bf16: for N token rows, L1 (N x cl_llama_lo_width BF16 values, the gradient a product reads) and L2 (N x Cl,
 * o_proj's input) at the end of the part's scratch. */
void cl_llama_lo(const cl_model *m, int64_t N, void **L1, void **L2);
/* Floats of the backward's workspace from ws per sample (datty, dqkv, dln1; sequence parallelism's gathered rows)
 * before the attention's tiles. */
int64_t cl_llama_attn_scratch_floats(const cl_model_desc *d, cl_sizer *z);
/* The backward given dres2 (the residual stream's gradient at res2, this rank's rows, without the norm's part)
 * and dl2 (ln2's gradient, this rank's rows): dres2 += the norm's, then o_proj, attention, rope, q/k/v and the
 * first norm; din (when not NULL) = the input's gradient. G: N x C for a gathered input (sequence parallelism;
 * else unused). ws: the workspace (cl_llama_attn_scratch_floats x B,
 * then the attention's tiles) inside the part's scratch. */
cl_status cl_llama_attn_backward(cl_model *m, cl_nn_keep *k, const cl_llama_attn_acts *s, const float *in,
                                 const cl_llama_attn_weights *w, const cl_llama_attn_weights *gw, float *dres2, const float *dl2,
                                 float *din, float *G, float *ws, int ww, int B, int T);
/* Generation's step (nn/decode.c) of the attention half on the step's new rows (B n of them, never
 * sequence-parallel): b->ln1, b->qkv (q and k rotated at positions pos0 + t), k and v appended to the step's
 * cache, b->atty (the attention over cache rows 0 .. position), b->res2 = in + o_proj(atty) (row-parallel, summed
 * over the group) and b->ln2 = RMSNorm(res2), the two rstd in b->stats. */
cl_status cl_llama_attn_decode(const cl_model *m, const cl_decode_step *st, const float *in, const cl_llama_attn_weights *w,
                               const cl_nn_decode_ws *b);
/* The attention's lse again from the kept qkv (selective recompute; the output written again is the same bits). */
cl_status cl_llama_attn_relse(const cl_model *m, const cl_llama_attn_acts *s, int B, int T);

/* The planner's cost of a Llama-family block (nn/cost.h, cl_kind's cost): the attention half's products, bytes
 * and split pair (input_layernorm, q k v as columns of this rank's heads, the rotation, attention, o_proj as
 * rows, the residual and post_attention_layernorm), then mlp's (the dense SwiGLU's or the experts': its
 * products, its kernels' bytes, the last residual, its split pair), then the re-forward pass (full recompute:
 * the whole forward). */
typedef void cl_llama_mlp_cost_fn(const cl_model_desc *d, int B, double e, cl_unit_cost *o);
void cl_llama_block_cost(const cl_model_desc *d, int B, double e, int recompute, int causal, cl_llama_mlp_cost_fn *mlp,
                         cl_unit_cost *o);

#endif
