/* A unit kind as one table (internal to src/nn and the description).
 *
 * Each kind of unit (embedding, GPT block, LM head with its loss; conv,
 * ReLU, max-pool, flatten, linear, classifier loss) lives in one file,
 * src/nn/kind_<name>.c, which exports one `const cl_kind`. The table says
 * what the kind is to everything else: its parameters (names, whole shapes
 * as a function of the description, how tensor parallelism splits each),
 * its sizes for a micro-batch and recompute mode, which passes read its
 * parameters, where its output and logits lie, and its forward and
 * backward. units.c dispatches through the table (cl_kind_of) and never
 * branches on a kind; src/model/describe.c builds each unit's parameter
 * list from it.
 *
 * Invariants: a kind's parameters are listed in checkpoint order, and a
 * kind's code reaches them by name through its weights struct (cl_kind_bind:
 * each entry's `field` is the offset of its pointer there), never by
 * position. Each forward and backward is written once for a tensor-parallel
 * slice; tp = 1 runs the same function (the split collectives are then the
 * identity). A kind's code computes through its device's kernel table
 * (cl_kern(m)->f, cl_sgemm) and moves device memory through the device's
 * calls (cl_device_fill, cl_device_copy, ...), never directly. */
#ifndef CLEAVE_NN_KIND_H
#define CLEAVE_NN_KIND_H

#include "cleave/backend.h"
#include "cleave/model.h"
#include "nn/cost.h"

#include <stddef.h>

/* How tensor parallelism splits one parameter (the layout a rank then holds: cl_split). */
typedef enum {
    CL_TPS_REPLICATED = 0, /* every rank holds all of it */
    CL_TPS_NORM,           /* replicated; under sequence parallelism its gradient is a partial sum (tp_partial) */
    CL_TPS_COLUMNS,        /* column-parallel: by the last (output) dimension */
    CL_TPS_HEADS,          /* column-parallel by heads: the fused q, k, v columns of this rank's heads */
    CL_TPS_ROWS,           /* row-parallel: by the first (input) dimension */
    CL_TPS_VOCAB,          /* by vocabulary rows of the padded vocabulary, at every tp (one rank: all rows) */
    CL_TPS_LINEAR,         /* a linear unit's weight or bias: as the unit's tp_mode (whole, column or row) */
    CL_TPS_KV,             /* column-parallel by key-value heads; when tp exceeds them, each head's columns on
                            * tp / kv_heads ranks (cl_param_spec's tp_rep) */
} cl_tp_split;

/* One parameter as a kind lists it. The shape and the initial scale are
 * the kind's `param` function's (they depend on the description). */
typedef struct {
    const char *name;      /* checkpoint name; after "<unit label>." when the kind is `prefixed` */
    size_t field;          /* offsetof its pointer in the kind's weights struct */
    cl_tp_split tp;
    int decay;             /* AdamW weight decay applies */
    cl_init_kind init;
    int tied;              /* the LM head's weight too (the description's tied_wte) */
} cl_kind_param;

/* One parameter of one unit, whole (before tensor parallelism cuts it). */
typedef struct {
    int ndim;
    int64_t shape[4];
    float scale;           /* std (normal) or bound (uniform) */
} cl_param_shape;

/* Size arithmetic for a description: no tensor, buffer or total is larger
 * than CL_DESC_MAX_FLOATS floats (4 TiB of them), so everything derived
 * from them (times a batch, times 4 bytes) stays far inside int64. A
 * result past it (or past int64) marks too_large and gives 0. */
#define CL_DESC_MAX_FLOATS ((int64_t)1 << 40)
typedef struct {
    int too_large;
} cl_sizer;
static inline int64_t cl_size_fits(cl_sizer *z, int overflow, int64_t r) {
    if (!overflow && r <= CL_DESC_MAX_FLOATS) return r;
    z->too_large = 1;
    return 0;
}
static inline int64_t cl_size_mul(cl_sizer *z, int64_t x, int64_t y) {
    int64_t r;
    int o = __builtin_mul_overflow(x, y, &r);
    return cl_size_fits(z, o, r);
}
static inline int64_t cl_size_add(cl_sizer *z, int64_t x, int64_t y) {
    int64_t r;
    int o = __builtin_add_overflow(x, y, &r);
    return cl_size_fits(z, o, r);
}

struct cl_decode_step; /* generation's step (below) */

typedef struct cl_kind {
    const char *name;
    int prefixed;                  /* parameter names are "<label>.<name>" */
    int nparams;
    const cl_kind_param *params;   /* in checkpoint order */
    /* the per-sample sizes of a unit whose geometry the description has set (GPT kinds: from the
     * description's T and tensor-parallel layout; CONV, MAXPOOL, LINEAR: c, h, w, oc, oh, ow, k, tp_mode;
     * the elementwise kinds: in_floats): in_floats, out_floats, act_floats, scratch_floats, flops */
    void (*sizes)(const cl_model_desc *d, cl_unit *un, cl_sizer *z);
    /* the whole shape and scale of parameter i of unit un */
    void (*param)(const cl_model_desc *d, const cl_unit *un, int i, cl_param_shape *out);
    /* floats saved per micro-batch of B under a recompute mode, before 16-alignment (NULL: act_floats x B) */
    int64_t (*act_floats)(const cl_model_desc *d, const cl_unit *un, int B, int recompute);
    /* backward workspace at B (NULL: scratch_floats x B) */
    int64_t (*scratch_floats)(const cl_model_desc *d, const cl_unit *un, int B);
    /* the part's recompute buffer this unit needs (NULL: none) */
    int64_t (*rc_floats)(const cl_model_desc *d, const cl_unit *un, int B, int recompute);
    /* what a split backward keeps for its weight pass beyond dout (NULL: none; cl_unit_keep_floats) */
    int64_t (*keep_floats)(const cl_model_desc *d, const cl_unit *un, int B);
    cl_cost_fn *cost;              /* what it computes and moves per pass, for the planner (nn/cost.h) */
    int repeated;                  /* the model's repeated body (the transformer block): every unit of the kind in a
                                    * description costs the same, and the planner's even stages split these units,
                                    * the ones before going with the first stage and the ones after with the last */
    int weight_redo;               /* a split backward's weight pass re-derives its interior gradients from its output
                                    * gradient (the input pass's work again): the planner times zb-h1's W as B + W */
    int uses_tied;                 /* reads the tied weight too (the description's tied_wte: the LM head) */
    int rope;                      /* reads the rotary tables (the part builds them once: m->rope, sizes.tables) */
    int loss;                      /* 0; or its output is a loss per token (CL_KIND_LOSS_TOKEN) or per sample */
    unsigned z3_reads;             /* bit CL_Z3_*: the passes that read its parameters (ZeRO 3 gathers them) */
    unsigned wlo;                  /* bf16: CL_KIND_WLO(i): the passes read parameter i only as its BF16 copy (cl_nn_wlo:
                                    * a GEMM's weight), CL_KIND_WLO_TIED: the tied weight too; ZeRO 3 gathers those as BF16 */
    int wlo_from;                  /* bf16: > 0: parameters wlo_from, wlo_from + 1, ... too (a kind with a parameter list
                                    * longer than wlo's bits: the MoE block's router and experts) */
    unsigned gfirst;               /* CL_KIND_GFIRST(i): parameter i's gradient is written whole, before anything in the
                                    * step reads it, by one product of the unit's weight pass that takes cl_nn_grad_beta's
                                    * beta; CL_KIND_GFIRST_TIED: the tied weight's copy under cl_model_split_tied too. A
                                    * step's fill skips those (cl_model_begin_grads) */
    /* its output in its saved activations at base (NULL: base) */
    float *(*output)(const cl_model *m, float *base, int B, int T);
    /* a loss unit's logits in its saved activations (NULL: none, or its input when logits_in) */
    const float *(*logits)(const cl_model *m, const cl_acts *a, int u, int B, int T);
    int logits_in;                 /* its logits are its input: the previous unit's output, when the part holds it */
    cl_status (*forward)(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                         float *const *p);
    /* din NULL: no input gradient; ww: add the weight gradients into g */
    cl_status (*backward)(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                          float *const *p, float *const *g, const float *dout, float *din, int ww);
    /* a parameter list that depends on the description (the MoE block's E experts; NULL: nparams and params):
     * the unit's count, and (i >= 0) parameter i's entry with its name (before the label) in name[cap] */
    int (*param_list)(const cl_model_desc *d, const cl_unit *un, int i, cl_kind_param *kp, char *name, size_t cap);
    /* generation (nn/decode.c): the step's new rows (cl_decode_step) from in into out; NULL: cannot decode */
    cl_status (*decode)(cl_model *m, const cl_unit *un, const struct cl_decode_step *st, const float *in, float *out,
                        float *const *p);
    int kv_cache;                  /* decode keeps a KV cache (the attention blocks) */
    /* the expert whose weight parameter i is (-1: none), for expert parallelism (cl_model_desc_ep_shard); NULL: none */
    int (*expert_of)(const cl_model_desc *d, const cl_unit *un, int i);
} cl_kind;

enum { CL_KIND_LOSS_TOKEN = 1, CL_KIND_LOSS_SAMPLE = 2 };
#define CL_KIND_READS(pass) (1u << (pass))
#define CL_KIND_WLO(i) (1u << (i))
#define CL_KIND_WLO_TIED (1u << 31)
#define CL_KIND_GFIRST(i) (1u << (i))
#define CL_KIND_GFIRST_TIED (1u << 31)
#define CL_KIND_READS_ALL (CL_KIND_READS(CL_Z3_FORWARD) | CL_KIND_READS(CL_Z3_BACKWARD) | CL_KIND_READS(CL_Z3_WEIGHT))

extern const cl_kind cl_kind_embed, cl_kind_block, cl_kind_lmhead, cl_kind_conv, cl_kind_relu, cl_kind_maxpool,
    cl_kind_flatten, cl_kind_linear, cl_kind_classify, cl_kind_token_embed, cl_kind_llama_block, cl_kind_llama_head,
    cl_kind_llama_head_untied, cl_kind_moe_block;

/* The table of a kind (kinds.c, the one list of them). */
const cl_kind *cl_kind_of(cl_unit_kind k);

/* ---- what the kinds share (split.c) ---- */

/* cl_kern(m), the kernel table of the model's device: nn/model_impl.h. */

/* Aims the named pointers of a kind's weights struct w at p[0 .. nparams). */
void cl_kind_bind(const cl_kind *k, float *const *p, void *w);

/* Token rows of a micro-batch of N that this rank's layernorms, residuals
 * and block inputs and outputs hold: all, or 1/tp under sequence parallelism. */
int64_t cl_nn_rows_here(const cl_model_desc *d, int64_t N);
/* The input of a column-parallel layer: every token row (gathered into buf under sequence parallelism; in bf16
 * the rows are the BF16 norm output, Ns C values in the floats of rows, gathered as BF16: half F32's bytes). */
cl_status cl_nn_col_input(const cl_model *m, const float *rows, float *buf, int64_t Ns, int64_t C, const float **out);
/* A row-parallel layer's output out = x w + bias (x: N x K, w: K x C), summed over the group. */
cl_status cl_nn_row_linear(const cl_model *m, const char *what, double flops, const float *x, const float *w, const float *bias,
                           float *out, int64_t N, int64_t K);

/* A tensor-parallel collective's result in a split backward (cl_nn_kept): computed (and kept in *keep when
 * the input pass of a split backward keeps it), or, in the weight pass, read back from *keep instead of
 * running the collective again. keep advances by n either way. keep NULL: the backward is not split. */
typedef struct {
    float *keep;
    int wonly;     /* the weight pass */
    cl_device *dev;
} cl_nn_keep;
const float *cl_nn_kept(cl_nn_keep *k, const float *computed, int64_t n, int computing);
/* In a backward: a row-parallel layer's output gradient on every token row (under sequence parallelism the
 * transpose of the forward's reduce-scatter, gathered into buf (N x C) and kept; else dout itself). run: run
 * the collectives (not the weight pass of a split backward). */
cl_status cl_nn_row_dout(const cl_model *m, cl_nn_keep *k, int run, const float *dout, float *buf, int64_t Ns, const float **out);
/* A column-parallel layer's input gradient, partial sums in part (N x C), summed over the group (under
 * sequence parallelism scattered to this rank's rows in shard) and kept; *out is this rank's rows. */
cl_status cl_nn_col_dinput(const cl_model *m, cl_nn_keep *k, int run, float *part, float *shard, int64_t Ns, const float **out);

/* ---- generation's step (nn/decode.c) ---- */

/* One step of generation through a kind's decode: n new token rows per sample (B of them) at positions
 * pos0 .. pos0 + n - 1, rows [B n, C] between units (never sequence-parallel). */
typedef struct cl_decode_step {
    int B, n, pos0, Tmax;
    const int32_t *tokens; /* device, [B n] (the embedding's) */
    float *kc, *vc;        /* a kv_cache unit's cache, [B, KV heads here, Tmax, head width] each */
    float *ws;             /* workspace, cl_nn_decode_ws_floats(d, B n) */
    float *logits;         /* the head's: [B, vocab_local], each sample's last row */
} cl_decode_step;
/* Workspace floats a step of N rows takes (the largest kind's: a block's rows and columns below, then its
 * MLP's: the dense MLP's 3 Fl columns, or an MoE block's routing and expert rows, cl_nn_decode_moe_floats). */
int64_t cl_nn_decode_ws_floats(const cl_model_desc *d, int64_t N);
/* A block's step workspace, carved from st->ws for its B n rows (one carving for every block kind): ln1, res2,
 * ln2 (N C each), stats (4 N: a layernorm's two means then two rstd, or RMSNorm's two rstd), qkv (N (Cl + 2
 * Kl)), atty (N Cl), then mlp: the rest (the MLP's columns, or an MoE block's routing and rows). */
typedef struct { float *ln1, *res2, *ln2, *stats, *qkv, *atty, *mlp; } cl_nn_decode_ws;
cl_nn_decode_ws cl_nn_decode_carve(const cl_model *m, const cl_decode_step *st);
/* An MoE block's mlp floats at N rows (R = N K expert rows, dropless): logits, probs (N E each), wts, idx, row
 * (N K each), perm (R), counts (E), xe (R C), gate, up, h (R F each), ye (R C); 0 without experts. */
int64_t cl_nn_decode_moe_floats(const cl_model_desc *d, int64_t N);
/* The block's attention of a step: k, v of qkv rows [B n, Cl + 2 Kl] (after any rotation) appended to the
 * cache, out [B n, Cl] the new rows' attention over cache rows 0 .. their positions. */
void cl_nn_decode_attention(const cl_model *m, const cl_decode_step *st, const float *qkv, float *out);
/* The head's last rows of each sample (in [B n, C]) copied to rows [B, C] at ws, for its norm. */
void cl_nn_decode_last_rows(const cl_model *m, const cl_decode_step *st, const float *in, float *rows);
/* logits [B, Vl] = rows [B, C] against wv [Vl, C]. */
void cl_nn_decode_logits(const cl_model *m, const cl_decode_step *st, const float *rows, const float *wv);

/* ---- the LM heads' path after their norm (kind_head.c; GPT's and Llama's heads) ---- */

/* A head's saved activations at base for N token rows: losses (its output), lnf (every row, gathered under
 * sequence parallelism), mean (a layernorm's, when `mean`; NULL for an RMSNorm) and rstd (this rank's rows),
 * lse, logits (this rank's vocabulary columns). */
typedef struct { float *lnf, *mean, *rstd, *logits, *lse, *losses; } cl_head_acts;
cl_head_acts cl_nn_head_layout(const cl_model_desc *d, float *base, int64_t N, int mean);
/* CL_ERR_INVALID naming a target outside the vocabulary. */
cl_status cl_nn_head_targets(const cl_model *m, const cl_microbatch *mb);
/* Where this rank's normalized rows go in h->lnf (its share under sequence parallelism; in bf16 at its BF16
 * element offset, lnf holding BF16 rows). */
void *cl_nn_head_mine(const cl_model *m, const cl_head_acts *h, int64_t N);
/* After the norm wrote this rank's rows: gather them (sequence parallelism), logits against wv [Vl, C] (this
 * rank's vocabulary rows), softmax cross-entropy into h->losses and h->lse. */
cl_status cl_nn_head_loss_forward(cl_model *m, const cl_microbatch *mb, const cl_head_acts *h, const float *wv);
/* The beta for a product that adds into gradient g (a parameter's, m->g[i], or the head's tied copy, m->head_wte_g): 0
 * while g still holds the zeros cl_model_zero_grads or cl_model_bucket_begin wrote and nothing has written it since,
 * else 1; g counts as written from here on. A product of beta 0 overwrites only what it would have added to zeros:
 * the same bits (0 + x is x), without reading the gradient (the weight products' sum post-op took 13%-30% of their
 * time at 256 rows: docs/PERFORMANCE.md). The caller writes g before anything else does in this pass;
 * cl_unit_backward marks a weight pass's parameters written whichever way they were. */
float cl_nn_grad_beta(const cl_model *m, const float *g);
/* Its backward: dlogits (in place of the logits), dwv += dlogits^T lnf when ww, *dl = the gradient of this
 * rank's normalized rows (in the part's scratch), for the norm's backward. */
cl_status cl_nn_head_loss_backward(cl_model *m, const cl_microbatch *mb, const cl_head_acts *h, const float *wv, float *dwv, int ww,
                                   const float **dl);


/* ---- bf16 mixed precision (bf16.c; docs/ARCHITECTURE.md "bf16 mixed precision") ---- */

/* The description is cut for --dtype bf16 (tpl.dtype). */
/* Keys each query row of the description's attention may read: its T tokens, times the context ranks that share the
 * sequence (d->cp: each rank's rows attend over the whole of it, the ring's chunks or the all-to-all's heads). */
static inline double cl_nn_key_tokens(const cl_model_desc *d) { return (double)d->T * (d->cp > 1 ? d->cp : 1); }
int cl_nn_bf16(const cl_model_desc *d);
/* Floats that n BF16 values take in a float buffer: (n + 1)/2. */
int64_t cl_nn_bf16_floats(int64_t n);
/* Floats of a saved GEMM input of n values: n in F32, cl_nn_bf16_floats(n) in bf16. */
int64_t cl_nn_gemm_in_floats(const cl_model_desc *d, int64_t n);
/* The BF16 copy (m->wlow) of a held parameter's F32 data w. */
const uint16_t *cl_nn_wlo(const cl_model *m, const float *w);
/* dst (BF16) = src (F32) rounded to nearest even, n values, on the model's device. */
cl_status cl_nn_narrow(const cl_model *m, void *dst, const float *src, int64_t n);
/* C (F32) = op(A) op(B) + beta C, A and B BF16 (the device's gemm with formats, F32 accumulation). */
void cl_nn_gemm_lo(const cl_model *m, int ta, int tb, int M, int N, int K, const void *A, int lda, const void *B, int ldb, float beta,
                   float *C, int ldc);
/* cl_nn_gemm_lo for row counts M and K that change from call to call (an expert's tokens: the device's gemm_rows). */
void cl_nn_gemm_lo_rows(const cl_model *m, int ta, int tb, int M, int N, int K, const void *A, int lda, const void *B, int ldb,
                        float beta, float *C, int ldc);
/* out = x w (+ bias): x BF16 [N, IC], w a parameter's F32 data [IC, OC] read as its BF16 copy, out F32. */
void cl_nn_linear_lo(const cl_model *m, float *out, const void *x, const float *w, const float *bias, int64_t N, int64_t IC, int64_t OC);
/* A linear layer's weight gradient dw [IC, OC] += x^T dout (x [N, IC] and dout_lo BF16), and db += the column sums
 * of dout (its F32 form) when db. x^T read as cl_nn_dweight_src says: through strides (ta 1), or with xt
 * (cl_nn_bf16_floats(N IC) floats of the caller's scratch) and CLEAVE_WGRAD_PLAIN first transposed there ([IC, N], the
 * device's transpose_bf16) and read plain: the same bits (oneDNN's matmul copies either layout into the same blocks). */
void cl_nn_linear_dweight_lo(const cl_model *m, float *dw, float *db, const float *dout, const void *dout_lo, const void *x,
                             void *xt, int64_t N, int64_t IC, int64_t OC);
/* The source operand of a weight-gradient product dw += x^T dy (x BF16 [N, IC]): x itself read through strides (*ta
 * 1, *lda IC); where the environment sets CLEAVE_WGRAD_PLAIN and the caller gives a scratch xt, x transposed into it
 * (the return value; *ta 0, *lda N). The same bits either way; the plain route is opt-in because the step measured
 * it slower under load (docs/PERFORMANCE.md, "The bf16 weight-gradient products' layout"): both timed on one binary. */
const void *cl_nn_dweight_src(const cl_model *m, void *xt, const void *x, int64_t N, int64_t IC, int *ta, int *lda);
/* db += the column sums of dout [N, OC] (F32). */
void cl_nn_bias_grad(const cl_model *m, float *db, const float *dout, int64_t N, int64_t OC);
/* cl_nn_linear_dweight_lo in F32, the device's linear_backward_weight with cl_nn_grad_beta's beta: dw [IC, OC] += x^T
 * dout (x [N, IC], dout [N, OC]), db += dout's column sums when db. */
void cl_nn_linear_dweight(const cl_model *m, float *dw, float *db, const float *dout, const float *x, int64_t N, int64_t IC,
                          int64_t OC);

#endif
