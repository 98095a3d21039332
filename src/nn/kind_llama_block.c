/* The Llama block (Hugging Face's LlamaDecoderLayer) as a unit kind
 * (kind.h): x + o_proj(attn(rope(q), rope(k), v)) of input_layernorm(x),
 * then + down_proj(silu(gate_proj(.)) * up_proj(.)) of
 * post_attention_layernorm(.); RMSNorm, grouped-query causal attention
 * (query head h reads key-value head h / (heads / kv_heads)), no biases.
 * Megatron-LM's split, as data: q, k, v by columns of this rank's query and
 * key-value heads, gate and up by columns, o_proj and down_proj by rows;
 * the norms replicated (a partial gradient under sequence parallelism).
 *
 * The table describes the block (parameters, sizes, saved activations,
 * scratch, cost) for the description, the memory predictor and the
 * planner. Its forward and backward are not written yet: the family's runs
 * refuses to build a Llama model, so they are never called.
 *
 * Invariants: parameters in checkpoint order under Hugging Face's names,
 * linear weights [in, out] as cleave stores GPT's; the saved activations
 * per sample are the layout block_sizes counts (the forward will write
 * exactly these): rows Ts of C (ln1, res2, ln2, out) and their two rstd,
 * rows T of this rank's columns (qkv after the rotation: Cl + 2 Kl; atty:
 * Cl; gate, up and their SwiGLU product: Fl each) and this rank's scores. */
#include "nn/kind.h"

#include <math.h>
#include <stddef.h>

typedef struct {
    float *ln1_w, *q_w, *k_w, *v_w, *o_w, *ln2_w, *gate_w, *up_w, *down_w;
} llama_block_weights;

#define F(x) offsetof(llama_block_weights, x)
static const cl_kind_param llama_block_params[] = {
    {"input_layernorm.weight", F(ln1_w), CL_TPS_NORM, 0, CL_INIT_ONES, 0},
    {"self_attn.q_proj.weight", F(q_w), CL_TPS_COLUMNS, 1, CL_INIT_NORMAL, 0},
    {"self_attn.k_proj.weight", F(k_w), CL_TPS_COLUMNS, 1, CL_INIT_NORMAL, 0},
    {"self_attn.v_proj.weight", F(v_w), CL_TPS_COLUMNS, 1, CL_INIT_NORMAL, 0},
    {"self_attn.o_proj.weight", F(o_w), CL_TPS_ROWS, 1, CL_INIT_NORMAL, 0},
    {"post_attention_layernorm.weight", F(ln2_w), CL_TPS_NORM, 0, CL_INIT_ONES, 0},
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
    if (f == F(ln1_w) || f == F(ln2_w)) {
        o->ndim = 1, o->shape[0] = C, o->scale = 0;
        return;
    }
    o->ndim = 2;
    o->shape[0] = f == F(down_w) ? Fw : C;
    o->shape[1] = f == F(k_w) || f == F(v_w) ? K : f == F(gate_w) || f == F(up_w) ? Fw : C;
    o->scale = f == F(o_w) || f == F(down_w) ? 0.02f / sqrtf(2.0f * (float)d->cfg.layers) : 0.02f;
}

static int64_t llama_block_scores(const cl_model_desc *d, int B) { return (int64_t)B * d->heads_local * d->T * d->T; }

/* Per sample: input and output Ts x C; saved as the header says; the backward's workspace: the output
 * gradient's rows (3 C: dres2, the norm's gradient, a gathered input), datty, dqkv, dgate, dup, dh and
 * the scores' gradient (sequence parallelism: the gathered rows as GPT's block). FLOPs: the seven
 * products and the attention's two, causal or not counted whole (as GPT's). */
static void llama_block_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    int tp = d->tpl.tp, sp = d->tpl.sp;
    int64_t T = d->T, C = d->cfg.channels, Cl = d->channels_local, Kl = d->kv_channels_local, Fl = d->mlp_local;
    int64_t Ts = sp ? T / tp : T, Fw = cl_model_mlp_width(&d->cfg);
    int64_t K = (int64_t)cl_model_kv_heads(&d->cfg) * (C / d->cfg.heads);
    un->in_floats = cl_size_mul(z, Ts, C);
    un->out_floats = un->in_floats;
    int64_t scores = cl_size_mul(z, cl_size_mul(z, d->heads_local, T), T);
    int64_t cols = 2 * Cl + 2 * Kl + 3 * Fl;
    un->act_floats = cl_size_add(z, cl_size_add(z, cl_size_mul(z, Ts, 4 * C + 2), cl_size_mul(z, T, cols)), scores);
    int64_t wcols = Cl + (Cl + 2 * Kl) + 3 * Fl;
    int64_t ws = sp ? cl_size_add(z, cl_size_mul(z, T, 5 * C + wcols), cl_size_mul(z, Ts, 3 * C)) : cl_size_mul(z, T, 3 * C + wcols);
    un->scratch_floats = cl_size_add(z, ws, scores);
    double lin = (double)(2 * C + 2 * K + 3 * Fw) * (double)C;
    un->flops = (2.0 * (double)T * lin + 4.0 * (double)T * (double)T * (double)C) / tp;
}

static int64_t llama_block_act_floats(const cl_model_desc *d, const cl_unit *un, int B, int recompute) {
    if (recompute == CL_RECOMPUTE_FULL) return un->out_floats * B;
    int64_t n = un->act_floats * B;
    return recompute == CL_RECOMPUTE_SELECTIVE ? n - llama_block_scores(d, B) : n;
}

static int64_t llama_block_rc_floats(const cl_model_desc *d, const cl_unit *un, int B, int recompute) {
    return recompute == CL_RECOMPUTE_FULL ? un->act_floats * B : recompute == CL_RECOMPUTE_SELECTIVE ? llama_block_scores(d, B) : 0;
}

/* The planner's cost (nn/cost.h): the norms, q k v (columns of this rank's heads), the rotation, attention,
 * o_proj (rows), residual, gate and up (columns), SwiGLU, down (rows), residual. R token rows (B T), Rs of them
 * between the split layers (sequence parallelism: R / tp). */
static void llama_block_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal, cl_unit_cost *o) {
    (void)un;
    double T = d->T, C = d->cfg.channels, Cl = d->channels_local, H = d->heads_local, hd = C / d->cfg.heads;
    double Q = Cl + 2.0 * d->kv_channels_local, Fl = d->mlp_local;
    int tp = d->tpl.tp, sp = d->tpl.sp;
    double R = (double)B * T, Rs = sp ? R / tp : R, act = R * C * e;
    double att = causal ? cl_attention_share((int)T) : 1, tri = causal ? (T + 1) / (2 * T) : 1, scores = (double)B * H * T * T;
    cl_pass_cost *f = &o->pass[CL_PASS_F], *b = &o->pass[CL_PASS_B], *w = &o->pass[CL_PASS_W], *rf = &o->pass[CL_PASS_RF];
    cl_cost_gemm(f, R, Q, C, 1, CL_GEMM_NN);
    cl_cost_gemm_part(f, T, T, hd, B * H, CL_GEMM_NT, att);
    cl_cost_gemm_part(f, T, hd, T, B * H, CL_GEMM_NN, att);
    cl_cost_gemm(f, R, C, Cl, 1, CL_GEMM_NN);
    cl_cost_gemm(f, R, 2 * Fl, C, 1, CL_GEMM_NN);
    cl_cost_gemm(f, R, C, Fl, 1, CL_GEMM_NN);
    /* RMSNorm (read, write), the rotation of q and k (read, write), the softmax (read, write), residual +
     * RMSNorm (read 2, write 2), SwiGLU (read 2, write 1), the last residual (read 2, write 1) */
    double qk = R * (Q - d->kv_channels_local);
    f->bytes = e * (2 * Rs * C + 2 * qk + 2 * tri * scores + 4 * Rs * C + 3 * R * Fl + 3 * Rs * C);
    f->stream = e * (1 - tri) * scores;
    cl_cost_block_pairs(f, act, tp, sp);
    cl_cost_gemm(b, R, C, Q, 1, CL_GEMM_NT);
    cl_cost_gemm_part(b, T, hd, T, B * H, CL_GEMM_NN, att);
    cl_cost_gemm_part(b, T, hd, T, B * H, CL_GEMM_TN, att);
    cl_cost_gemm_part(b, T, T, hd, B * H, CL_GEMM_NT, att);
    cl_cost_gemm_part(b, T, hd, T, B * H, CL_GEMM_TN, att);
    cl_cost_gemm(b, R, Cl, C, 1, CL_GEMM_NT);
    cl_cost_gemm(b, R, C, 2 * Fl, 1, CL_GEMM_NT);
    cl_cost_gemm(b, R, Fl, C, 1, CL_GEMM_NT);
    /* SwiGLU backward (read 3, write 2), the rotation back, softmax backward, the two norms' input gradients */
    b->bytes = e * (5 * R * Fl + 2 * qk + 3 * tri * scores + 4 * Rs * C + 3 * Rs * C);
    b->stream = e * (R * Q + 2 * Rs * C + (att - tri) * scores);
    cl_cost_block_pairs(b, act, tp, sp);
    cl_cost_gemm(w, C, Q, R, 1, CL_GEMM_TN);
    cl_cost_gemm(w, Cl, C, R, 1, CL_GEMM_TN);
    cl_cost_gemm(w, C, 2 * Fl, R, 1, CL_GEMM_TN);
    cl_cost_gemm(w, Fl, C, R, 1, CL_GEMM_TN);
    w->bytes = e * (R * (Q + 2 * Fl) + 2 * Rs * C + 2 * 2 * Rs * C);
    if (sp) cl_cost_coll(w, CL_COLL_ALLGATHER, act, tp), cl_cost_coll(w, CL_COLL_ALLGATHER, act, tp);
    if (recompute == CL_RECOMPUTE_FULL) *rf = *f;
    else if (recompute == CL_RECOMPUTE_SELECTIVE) cl_cost_attention_redo(rf, T, hd, B * H, att, tri, scores, e);
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
    .z3_reads = CL_KIND_READS_ALL,
};
