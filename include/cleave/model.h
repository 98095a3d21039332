/* cleave models: one description, many uses.
 *
 * A model is described as an ordered list of units (embedding, transformer
 * block, LM head; or conv, relu, pool, flatten, linear, classifier loss) and
 * a list of named parameters, each owned by one unit. The same description
 * drives building a rank's part, predicting memory, partitioning into
 * pipeline stages (a unit is the smallest thing a stage holds; its code
 * letter is the --pp-layout letter) and naming checkpoint tensors (Hugging
 * Face GPT-2 names and layouts for GPT models).
 *
 * All per-unit sizes are per sample; a micro-batch of B samples needs B times
 * as much. A GPT sample is T tokens (T <= the model's context length).
 *
 * Parameters live in one flat f32 buffer (offsets in floats, each 16-float
 * aligned), gradients in a second buffer of the same layout. */
#ifndef CLEAVE_MODEL_H
#define CLEAVE_MODEL_H

#include "cleave/core.h"
#include "cleave/device.h"
#include "cleave/json.h"
#include "cleave/tp.h"
#include "cleave/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CL_MODEL_GPT = 0, CL_MODEL_MLP, CL_MODEL_CNN, CL_MODEL_LLAMA } cl_model_kind;

#define CL_MLP_MAX_WIDTHS 16

/* A transformer block's normalisation: GPT-2's LayerNorm, or RMSNorm (Llama's; no GPT kind runs it yet). */
typedef enum { CL_NORM_LAYER = 0, CL_NORM_RMS } cl_norm_kind;

typedef struct {
    cl_model_kind kind;     /* its family (cl_model_family_of) */
    char name[32];          /* preset name, or "custom" */
    /* GPT */
    int layers, channels, heads, seq_len, vocab;
    /* the choices a Llama family would also make; 0 is GPT-2's value of each (cl_model_kv_heads,
     * cl_model_mlp_width), so a config zeroed and filled as before is GPT-2's. The GPT kinds run
     * kv_heads == heads, layernorm, biases and the tied head only (cl_model_config_runs) */
    int kv_heads;           /* key-value heads (grouped-query attention: dividing heads); 0: heads */
    int mlp_width;          /* the MLP's hidden width F; 0: 4 x channels */
    cl_norm_kind norm;
    int no_bias;            /* 1: the linear layers and norms have no biases */
    int untied;             /* 1: the LM head has its own weight, not the embedding's */
    /* Llama (src/model/family_llama.c; 0 for the other families): rotary positions' base and RMSNorm's epsilon */
    double rope_theta, rms_norm_eps;
    /* Llama's mixture of experts (kind_moe_block.c; 0 experts: dense): E experts, top-K per token, every
     * moe_every-th block an MoE block (0 or 1: every block), the aux loss coefficient, the capacity factor
     * (0: dropless) */
    int experts, experts_per_token, moe_every;
    double moe_aux_coeff, moe_capacity_factor;
    /* Llama 3.1's rope_scaling of type "llama3" (HF's factor, low_freq_factor, high_freq_factor,
     * original_max_position_embeddings); rope_factor 0: none (the plain rotary table) */
    double rope_factor, rope_low_freq, rope_high_freq;
    int rope_original_context;
    /* MLP: widths[0] inputs ... widths[n-1] classes */
    int nwidths;
    int widths[CL_MLP_MAX_WIDTHS];
    /* CNN: input [in_channels, height, width]; conv (conv_channels,
     * conv_kernel, conv_stride, conv_pad) -> relu -> maxpool(pool, pool) ->
     * flatten -> linear(hidden) | linear(hidden) -> relu -> linear(classes) */
    int in_channels, height, width;
    int conv_channels, conv_kernel, conv_stride, conv_pad, pool;
    int hidden, hidden2, classes;
} cl_model_config;

/* gpt2-tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl, mlp, cnn, llama-tiny, llama, smollm2-135m, ... llama-3.1-405b */
cl_status cl_model_preset(const char *name, cl_model_config *cfg);
/* Checks every size (positive, heads divide channels, shapes that fit). */
cl_status cl_model_config_check(const cl_model_config *cfg);
/* What the unit kinds can train today (after cl_model_config_check): a
 * description may be made of more (sizes, parameter shapes, memory), but a
 * model is built only of this. CL_ERR_UNSUPPORTED naming the field otherwise
 * (n_kv_heads, norm, bias, tied head). */
cl_status cl_model_config_runs(const cl_model_config *cfg);
/* GPT: the key-value heads and the MLP width, their defaults resolved. */
int cl_model_kv_heads(const cl_model_config *cfg);
int64_t cl_model_mlp_width(const cl_model_config *cfg);

/* A model family as the code outside the description sees it: one entry per
 * cl_model_kind (src/model/family_*.c), so that a property is asked of the
 * family, not of the kind by name. */
typedef struct {
    const char *name;       /* checkpoints' "cleave_model": "gpt", "mlp", "cnn" */
    int tokens;             /* a sample is T token ids (a vocabulary, a tokenizer, text data, generation, sequence
                             * parallelism, blocks to recompute); else one input vector and a class label */
    const char *data;       /* the default data file (cl_data_find) */
    const char *sample;     /* a sample in messages: "" for tokens, " images" for the others */
    const char *model_type; /* the Hugging Face config.json "model_type" it imports ("gpt2"); NULL: none */
    /* Its Hugging Face checkpoints (src/train/hf_import.c, hf_export.c), as data: */
    const char *hf_arch;    /* the architecture ("GPT2LMHeadModel", "LlamaForCausalLM"), also what messages call it */
    /* the form of a configuration with experts (cl_model_config.experts), NULL when the family has none: its
     * model_type ("mixtral"), architecture ("MixtralForCausalLM") and the config.json numbers it needs beside
     * hf_keys (space-separated); the family's write_config writes it, the import takes either type */
    const char *hf_moe_type, *hf_moe_arch, *hf_moe_keys;
    const char *hf_prefix;  /* a prefix the tensor names may carry ("transformer."), "" when none */
    const char *hf_buffers; /* name suffixes of saved buffers that are no parameters, space-separated, skipped */
    const char *hf_keys;    /* config.json keys that must be numbers, space-separated (NULL: the family's read says) */
    const char *hf_transposed; /* a name suffix whose 2-D tensors Hugging Face stores [out, in] (nn.Linear); NULL */
    const char *hf_tokenizer; /* the tokenizer a vocabulary of 50257 or more means ("gpt2"; a smaller one: bytes) */
    int hf_f16;             /* F16 tensors imported (F32 and BF16 always) */
    /* settings of its config.json the model does not have, refused naming the key (path: the file) */
    cl_status (*hf_check)(const struct cl_json *r, const char *path);
} cl_model_family;
/* The family of cfg->kind (an unknown kind: an entry named "unknown" that can do nothing). */
const cl_model_family *cl_model_family_of(const cl_model_config *cfg);
/* The family whose Hugging Face model_type (or hf_moe_type) is type; NULL when none. known (n bytes) lists the
 * types there are. */
const cl_model_family *cl_model_family_hf(const char *type, char *known, size_t n);
/* The Hugging Face architecture cfg is written as: its family's hf_moe_arch for a configuration with experts
 * where the family has one, else hf_arch (NULL: none). */
const char *cl_model_hf_arch(const cl_model_config *cfg);

/* A configuration in a checkpoint's config.json (src/model/config_json.c, each family's fields from its table):
 * the family's fields appended to b as lines "  \"key\": value,\n" (the caller opens the object and adds
 * "cleave_model", the family's name, after them); and read back: c zeroed, then its family (r's
 * "cleave_model"; absent, the family whose model_type r's "model_type" is, else GPT, what checkpoints written
 * before they named a family hold) and that family's fields, name left "" for the caller. 1, or 0 for an
 * unknown family or a field missing or not an integer in range (not yet checked: cl_model_config_check). */
void cl_model_config_json(cl_strbuf *b, const cl_model_config *c);
int cl_model_config_from_json(const cl_json *r, cl_model_config *c);
/* Whether model configs a and b differ: 0 when they describe the same model;
 * otherwise 1, with the first field that differs written to field (n bytes:
 * "kind" (values: cl_model_kind), then the family's: GPT's "layers", "heads",
 * "channels", "vocab", "context", "mlp-width", "kv-heads"; MLP's "widths
 * (their number)", "widths[i]"; CNN's config names, "in_channels" ...
 * "classes") and its values in *va, *vb. */
int cl_model_config_diff(const cl_model_config *a, const cl_model_config *b, char *field, size_t n, int *va, int *vb);
/* A classifier's classes (its last layer's outputs); 0 for a family that is not one (GPT). */
int64_t cl_model_classes(const cl_model_config *cfg);
/* Integer inputs per sample (GPT: T tokens) and float inputs (MLP/CNN). */

typedef enum { CL_INIT_ZEROS = 0, CL_INIT_ONES, CL_INIT_NORMAL, CL_INIT_UNIFORM } cl_init_kind;

/* How a parameter is split over the tensor-parallel ranks (cl_tp_layout):
 * what a rank holds of the whole tensor, which has the shape checkpoints
 * store (Hugging Face layout, linear weights [in, out]). */
typedef enum {
    CL_SPLIT_NONE = 0, /* replicated: every rank holds all of it (layernorms, row-parallel biases, positions) */
    CL_SPLIT_ROWS,     /* by dim 0: rank r holds rows [r*part, (r+1)*part) (row-parallel weights; wte by vocabulary,
                        * whose rows past the whole tensor's are padding, zero, never in a checkpoint) */
    CL_SPLIT_COLS,     /* by the last dim: [r*part, (r+1)*part) (column-parallel weights and their biases) */
    CL_SPLIT_HEADS3    /* the fused [C, Q + 2K] c_attn and its bias (Q = heads x hd query columns, K = kv_heads x
                        * hd key and as many value columns): the columns of query heads [r*H/tp, (r+1)*H/tp) and of
                        * key-value heads [r*KV/tp, (r+1)*KV/tp), three ranges of part = Q/tp columns at 0 and
                        * part_kv = K/tp at Q and Q + K (GPT-2: K = Q = C, ranges at 0, C and 2C) */
} cl_split;

typedef struct {
    char name[64];          /* checkpoint name, e.g. "h.0.attn.c_attn.weight" */
    int ndim;
    int64_t shape[4];       /* as stored (HF layout: linear weights [in, out]) */
    int64_t numel;
    cl_dtype dtype;         /* the number format of its elements (CL_F32 everywhere today) */
    int64_t byte_offset;    /* bytes into the flat buffer, a multiple of CL_PARAM_ALIGN; reach the data
                             * through cl_param_data / cl_param_f32, element ranges through cl_param_elem */
    int decay;              /* AdamW weight decay applies (matrices only) */
    cl_init_kind init;
    float scale;            /* std (normal) or bound (uniform) */
    int unit;               /* owning unit */
    /* tensor parallelism: shape/numel above are this rank's slice; the whole tensor is below */
    cl_split split;
    int64_t part;           /* the slice's extent along the split (see cl_split); 0 when not split */
    int64_t part_kv;        /* HEADS3: the extent of each of its key and value ranges (part: the query's); part when
                             * the key-value heads are the heads */
    int64_t full_shape[4];
    int64_t full_numel;
    int tp_partial;         /* replicated, but sequence parallelism leaves each rank's gradient a partial sum
                             * (the layernorms, which see only the rank's token rows): summed over the group */
    int tp_rep;             /* CL_SPLIT_COLS over fewer slices than ranks (Llama's key-value heads when tp exceeds
                             * them, replicated as Megatron does): tp_rep consecutive ranks hold the same slice,
                             * rank r slice r / tp_rep, each gradient a partial sum over them; 0 or 1: none */
    int expert;             /* an MoE block's expert weight: 1 + the expert's index (0: not an expert's) */
    int ep_owner;           /* an expert weight under expert parallelism (cl_model_desc_ep_shard): the expert-parallel
                             * rank that holds it; on the others numel and shape[0] are 0 (no room in any buffer) */
} cl_param_spec;

/* The slice tensor-parallel rank r holds of p (r itself but where replicas share one: tp_rep). */
static inline int cl_param_slice_of(const cl_param_spec *p, int r) { return p->tp_rep > 1 ? r / p->tp_rep : r; }

/* The tensor-parallel layout a description is cut for. tp = 1 is the whole
 * model (cl_model_describe). The vocabulary is padded to a multiple of
 * vocab_div * tp (Megatron-LM's --make-vocab-size-divisible-by; 0 means
 * 1) and the padded rows are masked out of the softmax, so the loss is the
 * unpadded model's. With sp (sequence parallelism, GPT) the activations
 * between blocks, the layernorms and the residuals hold a contiguous
 * 1/tp of a micro-batch's B*T token rows (T a multiple of tp). */
typedef struct {
    int tp, rank, sp, vocab_div;
    cl_dtype dtype;         /* the compute format it is cut for: CL_F32 (0, the default), or CL_BF16: bf16 mixed
                             * precision (F32 master weights, a BF16 copy the passes read, BF16 GEMM inputs saved;
                             * docs/ARCHITECTURE.md "bf16 mixed precision") */
    int ep;                 /* expert parallelism: the MoE blocks' experts computed over ep ranks (0 or 1: none);
                             * their saved rows and workspace are sized for the tokens ep ranks send (kind_moe_block.c) */
} cl_tp_layout;

typedef enum {
    CL_UNIT_EMBED = 0,  /* tokens -> x[T,C]; params wte, wpe */
    CL_UNIT_BLOCK,      /* x[T,C] -> x[T,C]; pre-LN attention + MLP */
    CL_UNIT_LMHEAD,     /* x[T,C] -> losses[T]; ln_f, tied wte, softmax xent */
    CL_UNIT_CONV,       /* [IC,H,W] -> [OC,OH,OW] */
    CL_UNIT_RELU,
    CL_UNIT_MAXPOOL,
    CL_UNIT_FLATTEN,    /* identity on the data, a shape change */
    CL_UNIT_LINEAR,     /* [IC] -> [OC] */
    CL_UNIT_CLASSIFY,   /* logits[K] -> loss[1]; softmax xent against a label */
    CL_UNIT_TOKEN_EMBED,      /* Llama: tokens -> x[T,C]; embed_tokens, no learned positions (kind_embed.c) */
    CL_UNIT_LLAMA_BLOCK,      /* Llama: x[T,C] -> x[T,C]; RMSNorm, rotary GQA attention, SwiGLU MLP */
    CL_UNIT_LLAMA_HEAD,       /* Llama: x[T,C] -> losses[T]; model.norm (RMSNorm), the tied embedding, softmax xent */
    CL_UNIT_LLAMA_HEAD_UNTIED, /* the same with its own lm_head.weight */
    CL_UNIT_MOE_BLOCK         /* Llama with a Mixtral MoE MLP: x[T,C] -> x[T,C] (kind_moe_block.c) */
} cl_unit_kind;

/* How a LINEAR unit (and a GPT block's linear layers) is split under tensor
 * parallelism (cl_unit's tp_mode). */
typedef enum {
    CL_LINEAR_WHOLE = 0, /* every rank computes all of it */
    CL_LINEAR_COLS,      /* column-parallel: c -> oc of its columns (the output split) */
    CL_LINEAR_ROWS       /* row-parallel: c of its rows -> oc partial sums, reduced */
} cl_linear_tp;

typedef struct {
    cl_unit_kind kind;
    char label[24];         /* "embed", "h.3", "lm_head", "conv1", "fc1", ... */
    char code;              /* --pp-layout letter: E, t, L; c r p f l x for CNN/MLP */
    int index;              /* block index for BLOCK, layer index otherwise */
    int first_param, nparams;
    int64_t in_floats;      /* input activation floats per sample (0 for EMBED) */
    int64_t out_floats;     /* output floats per sample */
    int64_t act_floats;     /* saved for backward per sample, output included */
    int64_t scratch_floats; /* backward workspace per sample */
    double flops;           /* forward FLOPs per sample (backward ~ 2x) */
    /* geometry for CONV/MAXPOOL/LINEAR: input [c,h,w] -> output [oc,oh,ow] */
    int c, h, w, oc, oh, ow, k, stride, pad;
    int tp_mode;            /* LINEAR under tensor parallelism: a cl_linear_tp */
} cl_unit;

typedef struct {
    cl_model_config cfg;
    int T;                  /* GPT: tokens per sample this description is sized for */
    int nunits;
    cl_unit *units;
    int nparams;
    cl_param_spec *params;
    int64_t nfloats;        /* flat buffer size, alignment padding included */
    int64_t nparams_total;  /* sum of numel: the parameter count people quote */
    int tied_wte;           /* index of wte in params (GPT), else -1 */
    int params_only;        /* a model of it holds parameters only (cleave convert): built even where the kinds
                             * cannot run it yet (cl_model_config_runs), never run */
    cl_tp_layout tpl;       /* the tensor-parallel layout it is cut for ({1, 0, 0, 1}: the whole model) */
    int vocab_padded;       /* GPT: the vocabulary padded (cl_tp_layout), a multiple of tp */
    int vocab_local;        /* rows of wte this rank holds: vocab_padded / tp */
    int vocab_start;        /* the first of them: rank * vocab_local */
    int heads_local, channels_local; /* GPT: heads / tp and channels / tp */
    int kv_heads_local, kv_channels_local; /* GPT: key-value heads / tp, and their columns (x channels / heads) */
    int mlp_local;          /* GPT: the MLP's width / tp */
    int ep_rank;            /* expert parallelism: this rank's place in its expert-parallel group (cl_model_desc_ep_shard) */
    int cp;                 /* context ranks sharing each sequence (cl_model_describe_cp; 1: none): T is one rank's
                             * T / cp tokens, its attention reads the keys of all of them (the FLOPs count those) */
} cl_model_desc;

/* T: tokens per sample for GPT (0 = the model's seq_len); ignored otherwise. */
cl_status cl_model_describe(const cl_model_config *cfg, int T, cl_model_desc **out);
/* The slice of that model one tensor-parallel rank holds: parameters at
 * their local shapes (cl_split), units sized for the local heads, columns,
 * vocabulary rows and (with sp) token rows. Errors name the size that tp
 * does not divide: heads, 4 x channels, an MLP's column-parallel width,
 * the sequence length with sp; a CNN cannot be split. */
cl_status cl_model_describe_tp(const cl_model_config *cfg, int T, const cl_tp_layout *tl, cl_model_desc **out);
/* The same for one of cp context ranks (cp 0 or 1: cl_model_describe_tp): T is the rank's T / cp tokens;
 * only the units' FLOPs differ (each query row's attention over the whole sequence's keys). */
cl_status cl_model_describe_cp(const cl_model_config *cfg, int T, const cl_tp_layout *tl, int cp, cl_model_desc **out);
void cl_model_desc_free(cl_model_desc *d);
/* Expert parallelism (tpl.ep > 1 on a model with experts): of the MoE blocks' expert weights only those of the
 * experts expert-parallel rank ep_rank computes, [ep_rank E/ep, (ep_rank + 1) E/ep), stay held; the others take no
 * room (numel 0, their ep_owner the rank that holds them) and the buffers are laid out again, so every rank's have
 * the same size and offsets (the expert ranges hold different experts on different ep ranks). Otherwise nothing. */
void cl_model_desc_ep_shard(cl_model_desc *d, int ep_rank);
/* Floats of one sample's input: an MLP's first width, a CNN's channels x
 * height x width (the images the trainer reads must have as many pixels);
 * 0 for GPT, whose input is token ids. */
int64_t cl_model_input_floats(const cl_model_config *cfg);
/* Index into the local slice (numel of spec p on tensor-parallel rank
 * `rank`) of element `full` of the whole tensor, or -1 when the rank does
 * not hold it. Every element of the whole tensor is held by exactly one
 * rank when split, by every rank when not. */
int64_t cl_param_local_index(const cl_param_spec *p, int rank, int64_t full);
/* Every parameter starts at a multiple of this many bytes of its flat
 * buffer (16 F32 values: a cache line), so each tensor begins on a line. */
#define CL_PARAM_ALIGN 64
/* Parameter p's data in a buffer laid out as its description (base: the
 * buffer's first byte; params, gradients and each AdamW moment alike). */
void *cl_param_data(void *base, const cl_param_spec *p);
/* The same for an F32 parameter as float * (NULL when p is not F32). */
float *cl_param_f32(float *base, const cl_param_spec *p);
/* p's offset in elements of its format (byte_offset / element size): the
 * unit of the element ranges (buckets, ZeRO shards) cut from the buffer. */
int64_t cl_param_elem(const cl_param_spec *p);
/* The same by runs: the whole tensor as rows of cl_param_row_len floats
 * (a dim-0 slab for NONE and ROWS, the last dimension for COLS and
 * HEADS3), and the pieces of row `row` that rank holds: up to 3 runs of
 * len floats from column col of the row to local index local. Returns the
 * number of runs (0 when the rank holds none of the row). */
typedef struct {
    int64_t col, local, len;
} cl_param_run;
int64_t cl_param_row_len(const cl_param_spec *p);
int cl_param_row_runs(const cl_param_spec *p, int rank, int64_t row, cl_param_run runs[3]);
int cl_model_find_param(const cl_model_desc *d, const char *name); /* -1 if absent */

/* ---- one rank's part of a model -------------------------------------------
 * Holds the units [u0, u1) with their parameters and gradients on one device,
 * and the workspace their backward needs, for micro-batches of up to B
 * samples. (Single device: u0 = 0, u1 = nunits.) */
/* ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
 * Trillion Parameter Models"): a part's flat buffers are cut into n equal
 * contiguous shards, one per data-parallel rank, along the 16-float blocks
 * and without regard to parameter boundaries (the buffers padded to a
 * multiple of 16 n floats). Stage 1 keeps only this rank's shard of the
 * AdamW moments and updates only its shard of the parameters. Stage 0, or
 * n <= 1: nothing is sharded. */
/* Stage 2 also keeps only this rank's shard of the gradients: each
 * micro-batch's gradients go into bucket-sized working buffers that are
 * reduce-scattered into the shard as backward completes each bucket
 * (bucket_bytes: cl_model_buckets' cut); the gradients that other sums
 * need whole (cl_model_grad_whole) are kept whole. */
/* Stage 3 also keeps only this rank's shard of the parameters: each unit's
 * parameters are all-gathered into a working buffer just before its forward
 * and its backward (prefetch: that many units of the same pass ahead) and
 * the units reach them there through cl_model_param (cl_model_set_zero3). */
/* The stages, each sharding what the one before does and one thing more;
 * the predicates say what a stage shards (stage: a cl_zero_stage). */
typedef enum {
    CL_ZERO_NONE = 0,   /* nothing sharded */
    CL_ZERO_OPTIM = 1,  /* the AdamW moments */
    CL_ZERO_GRADS = 2,  /* and the gradients */
    CL_ZERO_PARAMS = 3  /* and the parameters */
} cl_zero_stage;
static inline int cl_zero_shards_optim(int stage) { return stage >= CL_ZERO_OPTIM; }
static inline int cl_zero_shards_grads(int stage) { return stage >= CL_ZERO_GRADS; }
static inline int cl_zero_shards_params(int stage) { return stage >= CL_ZERO_PARAMS; }
typedef struct {
    int stage, n, rank; /* stage: a cl_zero_stage */
    size_t bucket_bytes; /* 0: the default, cl_zero_bucket_default of the part's shard */
    int prefetch;        /* ZeRO 3: units gathered ahead (0: none) */
    int split;           /* the backward runs split in input and weight passes (zb-h1): under stage 2 the
                          * loss units' gradients, which come in the input pass, are kept whole */
    cl_dtype reduce;     /* the format the data-parallel gradient reduction moves (--grad-reduce-dtype): CL_F32, or
                          * CL_BF16 (narrowed just before each collective, widened after); CL_F32 without one */
} cl_zero;
/* The default gradient bucket of a part whose data-parallel shard is
 * shard_floats under ZeRO stage on n replicas: stages 0 and 1 cut the
 * gradient buffer itself into buckets (no memory of their own), so
 * CL_BUCKET_DEFAULT (25 MiB, DeepSpeed's and PyTorch DDP's figure); stages 2
 * and 3 keep two bucket-sized working buffers beside the shard, so a
 * quarter of the shard's bytes rounded down to a power of two, from
 * CL_BUCKET_MIN (64 KiB) to CL_BUCKET_DEFAULT: the buffers then hold at most
 * half the shard's gradient bytes, and each bucket still moves at least
 * 64 KiB a collective (a bucket is also at least one unit's parameters). */
#define CL_BUCKET_DEFAULT ((size_t)25 << 20)
#define CL_BUCKET_MIN ((size_t)64 << 10)
size_t cl_zero_bucket_default(int stage, int n, int64_t shard_floats);
/* The part of floats [a, b) of a part's buffer inside shard [lo, lo +
 * len): its length (0 if none) and *start its first float. */
int64_t cl_zero_overlap(int64_t a, int64_t b, int64_t lo, int64_t len, int64_t *start);

/* A gradient bucket of a part: floats [lo, hi) of its flat buffer (the
 * part's local offsets, 16-float padding included), launched once the
 * backward of `unit` (its lowest) is done; hi < 0: the LM head's separate
 * wte gradient (cl_model_split_tied). */
typedef struct {
    int unit;
    int64_t lo, hi;
} cl_bucket;
/* 1 if, under ZeRO stage 2, the gradient of parameter i on the part of
 * units [u0, u1) is kept whole rather than in bucket working buffers: the
 * layernorms whose gradients are partial sums over sequence-parallel ranks
 * (summed over tp after the replicas), the tied wte on a part that
 * holds the embedding or the LM head but not both (summed between the first
 * and last pipeline stages after the replicas), and under a split backward
 * (split, cl_zero's) the loss units' parameters, whose gradients come in
 * the input pass while the buckets are filled by the weight passes. */
int cl_model_grad_whole(const cl_model_desc *d, int u0, int u1, int split, int i);
/* The buckets of the part of units [u0, u1) (parameters from the
 * description's float offset part_lo): its units, last first, cut into
 * runs of at least bucket_bytes of parameters (see cleave/dp.h). stage2:
 * each range trimmed of the whole-kept gradients (cl_model_grad_whole with
 * split) at its ends (it may become empty, lo == hi) and no range for the
 * head's wte gradient (kept whole). out has room for u1 - u0 + 1; returns how many. */
int cl_model_buckets(const cl_model_desc *d, int u0, int u1, int64_t part_lo, size_t bucket_bytes, int stage2,
                     int split, cl_bucket *out);

/* The one statement of a part's device buffers, in floats: every size the
 * functions below allocate comes from here, and so does every prediction
 * of them (cleave/memory.h), so a prediction cannot drift from what is
 * allocated. Units [u0, u1) at micro-batch B under a recompute mode. */
typedef struct {
    int64_t lo;          /* offset in the description's flat buffer of the first held parameter */
    int64_t nfloats;     /* parameter floats held, 16-aligned each (the LM head's own wte copy included) */
    int64_t tied_copy;   /* offset of the LM head's own copy of the tied wte in the part's buffer, or -1 */
    int64_t alloc;       /* floats of params and of grads: nfloats, at least 16; under ZeRO padded to a multiple of 16 n */
    int64_t shard;       /* ZeRO: floats of each data-parallel rank's shard (alloc / n); alloc when not sharded */
    int64_t shard_lo;    /* this rank's shard's first float (rank x shard; 0 when not sharded) */
    int64_t moments;     /* floats of each AdamW moment: alloc, or the shard under ZeRO stage 1 */
    int64_t grads;       /* floats of the gradient buffer: alloc, or the shard under ZeRO stage 2 */
    int64_t whole;       /* ZeRO 2: the whole-kept gradients (cl_model_grad_whole), 16-aligned each; else 0 */
    int64_t bucket;      /* ZeRO 2: floats of each bucket working buffer (the largest bucket); else 0 */
    int nbuf;            /* ZeRO 2: bucket working buffers (2, 1 with one non-empty bucket); else 0 */
    size_t bucket_bytes; /* the bucket cut's limit: zero's bucket_bytes, or when 0 (or no zero) cl_zero_bucket_default */
    int64_t halo;        /* ZeRO 2: the norm's buffer: the first min(shard, 16384) floats of every replica's
                          * shard and one 16384-float block (cl_dp_grad_sumsq); else 0 */
    int64_t params;      /* floats of the parameter buffer: alloc, or the shard under ZeRO stage 3 */
    int64_t wlow;        /* bf16 (tpl.dtype): floats of the BF16 copy of the parameter buffer (params / 2); else 0 */
    int64_t pwork;       /* ZeRO 3: floats of each parameter working buffer (the largest unit's gather: its
                          * parameters, and the tied wte for the LM head); else 0 */
    int npwork;          /* ZeRO 3: parameter working buffers (prefetch + 1, at most the units with parameters) */
    int64_t head_wte;    /* the LM head's separate wte gradient (cl_model_split_tied), 0 if none */
    int64_t gstage;      /* zero's reduce BF16: floats of the BF16 staging the reduction moves (cl_model_grads_stage):
                          * stages 0-1 the gradient buffer's (grads / 2, rounded up) and the head's wte gradient's;
                          * stages 2-3 each bucket working buffer's (nbuf x bucket / 2); else 0 */
    int64_t scratch;     /* backward workspace (conv's im2col included), at least 16 */
    int64_t io;          /* each of the two activation-gradient buffers, at least 16 */
    int64_t rc;          /* the recompute buffer of one block (cl_model_set_recompute), 0 if none */
    int64_t tables;      /* constant tables its units read, built once (the rotary cos and sin, T x head width
                          * together, when a unit's kind rotates: cl_kind's rope); 0 if none */
    int64_t acts;        /* one micro-batch's saved activations (cl_acts_create) */
} cl_part_sizes;
void cl_model_part_sizes(const cl_model_desc *d, int u0, int u1, int B, int recompute, const cl_zero *zero, cl_part_sizes *out);

/* One rank's part of a model: its units [u0, u1), their parameters and
 * gradients on a device, and the workspace their passes use. Opaque: its
 * fields are src/nn's own (src/nn/model_impl.h); everything else reads it
 * and reaches its buffers through the calls below, and asks it to do the
 * jobs on its buffers (ZeRO 2's buckets, the tied wte's sum) that need more. */
typedef struct cl_model cl_model;

/* What it is (read-only): the description, the device, units [u0, u1),
 * the micro-batch capacity B in samples, its buffers' sizes, its ZeRO. */
const cl_model_desc *cl_model_desc_of(const cl_model *m);
cl_device *cl_model_device(const cl_model *m);
void cl_model_units(const cl_model *m, int *u0, int *u1);
int cl_model_batch(const cl_model *m);
const cl_part_sizes *cl_model_sizes(const cl_model *m);
const cl_zero *cl_model_zero(const cl_model *m);

/* Its data, on the device, for those who fill or read it (initialisation,
 * checkpoints, HF import, the optimizer, the collectives):
 *   cl_model_params   the flat parameter buffer (sizes.params floats: the shard under ZeRO 3);
 *   cl_model_grads    the flat gradient buffer (sizes.grads floats: the shard under ZeRO 2);
 *   cl_model_param    parameter i's floats (NULL if not held; ZeRO 3: only while aimed,
 *                     see cl_model_z3_whole); cl_model_param_ptrs: all of them, by index;
 *   cl_model_grad     parameter i's gradient (NULL if not held; ZeRO 2: valid for the whole-kept
 *                     ones, cl_model_grad_whole, and after cl_model_whole_to_shard for none else);
 *   cl_model_param_offset  parameter i's float offset in the part's buffer (-1 if not held);
 *   cl_model_grad_at  float a of the part's gradient buffer (ZeRO 2: it must lie in the shard);
 *   cl_model_head_wte_grad  the LM head's own wte gradient (cl_model_split_tied; NULL if none). */
float *cl_model_params(const cl_model *m);
float *cl_model_grads(const cl_model *m);
float *cl_model_param(const cl_model *m, int i);
float *const *cl_model_param_ptrs(const cl_model *m);
float *cl_model_grad(const cl_model *m, int i);
int64_t cl_model_param_offset(const cl_model *m, int i);
float *cl_model_grad_at(const cl_model *m, int64_t a);
float *cl_model_head_wte_grad(const cl_model *m);
/* bf16 mixed precision: the BF16 copy of the parameters the passes read, rounded from the F32 master (call it
 * after the master changes and before the next forward: the trainer does before every step and evaluation).
 * CL_OK doing nothing for an F32 description. */
cl_status cl_model_refresh_low(cl_model *m);
/* bf16: 1 if the optimizer step writes the BF16 copy as it updates the master (AdamW's pass, the copy of each
 * new weight rounded while it is in cache), so that no refresh is needed after it: every layout but ZeRO 1
 * and 2, whose replicas update their shard and all-gather the rest as F32. cl_model_low_at: float a's BF16
 * copy for that pass (a in the shard under ZeRO 3), NULL where the optimizer does not write it. */
int cl_model_low_by_optimizer(const cl_model *m);
uint16_t *cl_model_low_at(const cl_model *m, int64_t a);
/* The part's backward workspace lent while no pass runs (GRAD_SYNC packs
 * the partial gradients there): NULL if it holds fewer than floats. */
float *cl_model_workspace(const cl_model *m, int64_t floats);

/* Attaches the tensor-parallel group of a part cut by cl_model_describe_tp:
 * its size and this rank's place in it must be the description's
 * (CL_ERR_INVALID otherwise). Without it a part of tp > 1 cannot run. */
cl_status cl_model_set_tp(cl_model *m, cl_comm *tp);
/* How the context group's attention exchanges (`--cp-comm`): CL_CP_RING
 * passes keys and values around the ring (ring attention), CL_CP_A2A
 * trades the sequence split for a head split with two all-to-alls
 * (DeepSpeed Ulysses; the heads must divide by the group). */
typedef enum { CL_CP_RING = 0, CL_CP_A2A = 1 } cl_cp_comm;
/* Context parallelism: the ranks of comm share each sequence (the part is
 * described for its T / size tokens: chunks rank and 2 size - 1 - rank of
 * the 2 size chunks); attention runs across it as `how` says and the
 * positions follow the tokens' places in the whole sequence. Allocates the
 * exchange's buffers (CL_MEM_WORKSPACE; cl_cp_buffer_floats). A group of
 * one: no-op. */
cl_status cl_model_set_cp(cl_model *m, cl_comm *comm, cl_cp_comm how);
/* Records the ring's transfers (RING_SEND / RING_RECV events on the comm
 * track of world rank `rank`: posted to completed, with the time waited) into
 * trace from now on; NULL stops. Their step, mb and chunk are left 0 for the
 * caller to fill in (the pass that ran them). No-op without a ring. */
void cl_model_cp_trace(cl_model *m, cl_trace *trace, int rank);
/* Floats of those buffers for a part of B samples over a group of n. */
int64_t cl_cp_buffer_floats(const cl_model_desc *d, int B, int n, cl_cp_comm how);
/* Expert parallelism: comm is the expert-parallel group (its size the description's tpl.ep), over which the MoE
 * blocks send each token-slot's row to the rank computing its expert and the results back (src/nn/moe_dispatch.c). */
cl_status cl_model_set_ep(cl_model *m, cl_comm *comm);
/* Floats a split backward (zb-h1) keeps per micro-batch for unit u's weight
 * pass beyond its output gradient: the results of the input pass's
 * tensor-parallel collectives (0 at tp = 1). */
int64_t cl_unit_keep_floats(const cl_model_desc *d, int u, int B);

/* Activation recomputation (Korthikanti et al., "Reducing Activation
 * Recomputation in Large Transformer Models"), for transformer blocks:
 *   NONE       keep every activation backward needs;
 *   SELECTIVE  keep all but the attention core's T x T scores per head; the
 *              block's backward recomputes them from the saved q, k (and
 *              re-forms the product with v) before it uses them;
 *   FULL       keep only each block's output (the next one's input); the
 *              block's backward first re-runs its whole forward.
 * The recomputed values are the forward's own bits (same kernels, same
 * inputs), so losses and gradients do not change. Other units keep theirs. */
typedef enum { CL_RECOMPUTE_NONE = 0, CL_RECOMPUTE_SELECTIVE, CL_RECOMPUTE_FULL } cl_recompute;
/* "none", "selective", "full" -> *out; CL_ERR_INVALID naming the value otherwise. */
cl_status cl_recompute_parse(const char *name, cl_recompute *out);

/* Allocates params (CL_MEM_PARAMS), grads (CL_MEM_GRADS) and workspace for
 * the whole model (u0 = 0, u1 = nunits). */
cl_status cl_model_create(cl_model **out, const cl_model_desc *d, cl_device *dev, int B);
/* The same for units [u0, u1) only: a pipeline stage. It holds the
 * parameters of its units, laid out as in the description (offsets shifted
 * by the first held one), plus, when it holds the LM head but not the
 * embedding, its own copy of the tied wte after them. Workspace is sized for
 * these units only. */
cl_status cl_model_create_part(cl_model **out, const cl_model_desc *d, cl_device *dev, int B, int u0, int u1);
/* The same for inference only (generation): no gradient buffers (CL_MEM_GRADS: none; its sizes' gradient
 * fields 0, its parameters' gradients NULL), so no backward or optimizer step may run on it. */
cl_status cl_model_create_infer(cl_model **out, const cl_model_desc *d, cl_device *dev, int B, int u0, int u1);
/* The same with its buffers cut into ZeRO shards (zero NULL: none). */
cl_status cl_model_create_zero(cl_model **out, const cl_model_desc *d, cl_device *dev, int B, int u0, int u1,
                               const cl_zero *zero);
/* ZeRO 3 (the part created with stage 3 over n > 1 replicas): attaches
 * the data-parallel group its parameters are gathered over. Until then,
 * and outside a unit's forward or backward, cl_model_param(m, i) is not valid. */
cl_status cl_model_set_zero3(cl_model *m, cl_comm *dp);
/* ZeRO 3: the part's parameters whole in host memory, cl_model_param aimed into
 * them (gather: all-gathered from the shards, a collective over the group;
 * else zeros), for initialisation, checkpoints and loads; the end copies
 * this replica's shard back (keep) and releases them. No-op without ZeRO 3. */
cl_status cl_model_z3_whole(cl_model *m, int gather);
void cl_model_z3_end_whole(cl_model *m, int keep);
/* ZeRO 3, used by the passes: a pass over the part's units starts, and
 * unit u is about to run: its parameters gathered (later ones issued
 * ahead), cl_model_param aimed at them. A pass gathers the units that read their
 * parameters in it, in the order it runs them (see cl_z3_pass_kind). */
typedef enum {
    CL_Z3_FORWARD = 0, /* first unit to last */
    CL_Z3_BACKWARD,    /* a combined backward or a split backward's input pass: last to first */
    CL_Z3_WEIGHT,      /* a split backward's weight pass: last to first, without the loss units (done in the input pass) */
} cl_z3_pass_kind;
cl_status cl_model_z3_pass(cl_model *m, cl_z3_pass_kind kind);
cl_status cl_model_z3_before(cl_model *m, int u);
void cl_model_z3_destroy(cl_model *m);
/* ZeRO 3: seconds spent waiting for gathers since the last call (0 without). */
double cl_model_z3_take_wait(cl_model *m);
/* The floats unit u's gather takes: its parameters' range of the flat
 * buffer (from *lo, the description's offsets, 16-aligned each), then the
 * tied wte for the LM head (*wte = 1). 0 for a unit without parameters. */
int64_t cl_model_unit_range(const cl_model_desc *d, int u, int64_t *lo, int *wte);
/* Float a of the part's parameter buffer (ZeRO 3: it must lie in this replica's shard). */
float *cl_model_param_at(const cl_model *m, int64_t a);

/* 1 if this part holds parameter i (the tied wte counts on both the
 * embedding's and the LM head's part). */
int cl_model_holds_param(const cl_model *m, int i);
/* ZeRO 2's gradient buffers (cleave/dp.h), the part's own jobs on them:
 * cl_model_bucket_begin zeroes working buffer b (of sizes.nbuf) for the
 * bucket [lo, hi) of the part's buffer, aims the gradients of the held
 * parameters placed there, but for the whole-kept ones
 * (cl_model_grad_whole), into it (float lo at its [0]) and returns it;
 * cl_model_bucket_end adds this replica's piece of it (its overlap with the
 * shard) into the shard's gradients. cl_model_grads_whole: the whole-kept
 * gradients (sizes.whole floats); cl_model_grads_halo: the norm's buffer
 * (sizes.halo floats); cl_model_whole_to_shard copies the whole-kept
 * gradients' overlap with the shard into it. */
float *cl_model_bucket_begin(cl_model *m, int b, int64_t lo, int64_t hi);
void cl_model_bucket_end(cl_model *m, int b, int64_t lo, int64_t hi);
float *cl_model_grads_whole(const cl_model *m);
float *cl_model_grads_halo(const cl_model *m);
/* --grad-reduce-dtype bf16: the BF16 staging of the reduction (sizes.gstage floats); NULL without. */
float *cl_model_grads_stage(const cl_model *m);
void cl_model_whole_to_shard(cl_model *m);
/* 1 if this part is the one that owns parameter i for sums over the whole
 * model (norms, checkpoints): the part of the unit that declares it. */
int cl_model_owns_param(const cl_model *m, int i);
/* Tied embeddings, kept apart: after this, the LM head adds its gradient of
 * the tied wte into cl_model_head_wte_grad (allocated here, CL_MEM_GRADS, zeroed by
 * cl_model_zero_grads) instead of the wte gradient; cl_model_tie_grads adds
 * it in. A trainer does this so that one device and a pipeline whose first
 * and last stages sum their two wte gradients once per step give the same
 * bits: (sum of the embedding's contributions) + (sum of the head's).
 * No-op for a part without the LM head or a model without tying. */
cl_status cl_model_split_tied(cl_model *m);
/* On a part with both the embedding and the LM head: wte grad += head_wte_g. */
void cl_model_tie_grads(cl_model *m);
void cl_model_destroy(cl_model *m);
/* GPT-2 init: normal(0, 0.02), residual projections (attn.c_proj, mlp.c_proj)
 * scaled by 1/sqrt(2 * layers), biases 0, layernorm weights 1. CNN/MLP:
 * PyTorch's default (kaiming-uniform bound 1/sqrt(fan_in) for weights and
 * biases). Parameters are drawn in description order from one RNG seeded by
 * seed, so a run is reproducible. */
void cl_model_init(cl_model *m, uint64_t seed);
/* Zeroes every gradient this part holds (ZeRO 2 and 3: the shard's and the
 * whole-kept ones; a bucket's when it begins). Until a weight pass writes a
 * gradient it counts as fresh, and that pass's first product overwrites it
 * (beta 0: the bits of adding into the zeros, without reading them), so a
 * caller that adds terms of its own into cl_model_grad(m, i) does so after
 * the backward, not between this call and it. */
void cl_model_zero_grads(cl_model *m);
/* A training step's start, for a caller that runs every unit's backward with
 * its weight pass (CL_BWD_WEIGHT) before it reads any gradient: as
 * cl_model_zero_grads, but the gradients a weight pass's first product writes
 * whole (the GEMM weights of the GPT, Llama and MoE attention blocks and the
 * LM head) keep the last step's values instead of zeros, which that product
 * overwrites (beta 0) or cl_unit_backward zeroes after a weight pass that did
 * not write them. The same gradients as cl_model_zero_grads gives, bit for bit,
 * without writing half a gigabyte of zeros a step (GPT-2 124M). ZeRO 2 and 3,
 * or CLEAVE_GRAD_FILL=all in the environment at the first call:
 * cl_model_zero_grads itself. */
void cl_model_begin_grads(cl_model *m);
/* The MoE blocks' figures since the last call, then reset (all 0 without MoE blocks): *aux the load-balancing
 * loss (each training micro-batch's sum over the part's MoE blocks of E sum_e f_e P_e, weighted by its share of
 * the step, dloss B T), *dropped the token-slots over capacity, slots[0 .. experts) the token-slots each expert
 * ran (dropped ones not counted), summed over the blocks (slots may be NULL). */
void cl_model_moe_take(cl_model *m, double *aux, int64_t *dropped, int64_t *slots);

/* One micro-batch's inputs. */
typedef struct {
    int B, T;               /* T = 1 for MLP/CNN */
    const int32_t *tokens;  /* GPT inputs [B,T] */
    const float *x;         /* MLP/CNN inputs [B, in_floats] */
    const int32_t *targets; /* GPT [B,T]; MLP/CNN [B]; -1 ignores a position */
    float dloss;            /* d(step loss)/d(each per-position loss), e.g. 1/(tokens in the global batch) */
} cl_microbatch;

/* Saved activations of one micro-batch for units [u0, u1). */
typedef struct {
    float *base;
    int64_t *off;           /* per unit (indexed u - u0), floats into base */
    int B;
} cl_acts;

cl_status cl_acts_create(cl_model *m, int B, cl_acts *a);   /* CL_MEM_ACTS */
void cl_acts_destroy(cl_model *m, cl_acts *a);
float *cl_acts_output(const cl_model *m, const cl_acts *a, int u);
/* The same for a micro-batch smaller than the buffers (a block's output moves with B and T). */
float *cl_acts_output_mb(const cl_model *m, const cl_acts *a, int u, const cl_microbatch *mb);
/* Floats cl_acts_create takes for units [u0, u1) at micro-batch B under a
 * recompute mode (each unit's share rounded up to 16). */
int64_t cl_model_act_floats(const cl_model_desc *d, int u0, int u1, int B, int recompute);
/* Sets the recompute mode of a part and allocates the one block's buffer it
 * needs (CL_MEM_WORKSPACE). Call before cl_acts_create: activation layouts
 * depend on it. */
cl_status cl_model_set_recompute(cl_model *m, cl_recompute mode);

/* Forward of unit u on a micro-batch. in: the input activations (output of
 * unit u-1, or a received buffer; ignored for EMBED). Writes the unit's saved
 * activations and its output (cl_acts_output). For the loss units the output
 * is the per-position loss. */
cl_status cl_unit_forward(cl_model *m, int u, const cl_microbatch *mb,
                          const float *in, cl_acts *a);

enum { CL_BWD_INPUT = 1, CL_BWD_WEIGHT = 2, CL_BWD_ALL = 3 };
/* Backward of unit u. dout: gradient of its output (ignored for loss units,
 * which use mb->dloss). din: ADDED to (may be NULL for the first unit or with
 * only CL_BWD_WEIGHT). Param gradients are ADDED into cl_model_grad. May overwrite the
 * unit's saved activations (they are dead after backward). */
cl_status cl_unit_backward(cl_model *m, int u, const cl_microbatch *mb,
                           const float *in, cl_acts *a, const float *dout,
                           float *din, int what);

/* Sum of the per-position losses of a loss unit's output (double). */
double cl_acts_loss_sum(const cl_model *m, const cl_acts *a, int u, const cl_microbatch *mb);

/* The logits a loss unit saw in its last forward (LMHEAD: [B*T, V] saved
 * logits; CLASSIFY: its input [B, classes]). Valid until its backward. */
const float *cl_acts_logits(const cl_model *m, const cl_acts *a, int u, const cl_microbatch *mb);

typedef cl_status (*cl_unit_done_fn)(void *ctx, int unit);
/* Forward of this part's units [u0, u1) in order. in: the input of unit u0
 * (a received activation; for the first unit of the model mb->x or ignored). */
cl_status cl_model_stage_forward(cl_model *m, const cl_microbatch *mb, const float *in, cl_acts *a);
/* Backward of this part's units, last to first, after their forward on the
 * same micro-batch with the same in. dout: gradient of unit u1-1's output
 * (NULL when it is a loss unit). din (may be NULL): gets (overwritten, not
 * added) the gradient of unit u0's input. what: CL_BWD_ALL, or CL_BWD_INPUT
 * for the first half of a split backward, in which case loss units still do
 * their whole backward and, if save_dout is given, the gradient of each
 * unit's output is copied to save_dout[u - u0] (out_floats * B floats each)
 * for cl_model_stage_backward_weight. done as in cl_model_backward. */
cl_status cl_model_stage_backward(cl_model *m, const cl_microbatch *mb, const float *in, cl_acts *a, const float *dout,
                                  float *din, int what, float *const *save_dout, cl_unit_done_fn done, void *ctx);
/* The second half: weight gradients of every non-loss unit, from the output
 * gradients the first half saved. done (may be NULL) is called after each
 * unit, the loss units (nothing to do here) included, as in
 * cl_model_backward: under ZeRO 2 the weight passes fill the buckets. */
cl_status cl_model_stage_backward_weight(cl_model *m, const cl_microbatch *mb, const float *in, cl_acts *a,
                                         float *const *saved_dout, cl_unit_done_fn done, void *ctx);
/* 1 for the units whose backward ends in a loss (LMHEAD, CLASSIFY). */
int cl_unit_is_loss(const cl_unit *u);

/* Forward then backward of all units on one micro-batch (single device). */
cl_status cl_model_forward_backward(cl_model *m, const cl_microbatch *mb, cl_acts *a,
                                    double *loss_sum, int do_backward);
/* Backward of all units of this rank, last to first, after their forward on
 * the same micro-batch; done(ctx, u), if given, runs once unit u's
 * gradients are complete (a data-parallel trainer starts a bucket's
 * all-reduce there) and an error from it stops the backward. */
cl_status cl_model_backward(cl_model *m, const cl_microbatch *mb, cl_acts *a, cl_unit_done_fn done, void *ctx);
/* Logits for the last position(s), for generation: GPT only, B = 1.
 * logits_out[V] gets the logits at position T-1 of the given tokens. */
cl_status cl_model_logits_last(cl_model *m, const int32_t *tokens, int T, cl_acts *a,
                               float *logits_out);

/* Generation with a KV cache (src/nn/decode.c): a decoder holds, on the
 * model's device, each attention block's keys and values for up to Tmax
 * positions of B samples, and the workspace of a step of B Tmax rows.
 * cl_decoder_step runs n new tokens per sample (tokens[B n], host) at
 * positions pos0 .. pos0 + n - 1 against the cached positions < pos0 and
 * caches theirs; logits[B V] (host) get each sample's last row's. Every
 * unit's kind must be able to decode (GPT's, Llama's, Mixtral's without a
 * capacity factor); tensor parallelism without sequence parallelism works
 * (each rank its heads and vocabulary rows, the logits gathered). A part
 * (a pipeline stage) decodes its units after cl_decoder_set_pp: the rows
 * come from the previous stage and go to the next (on pp, whose rank is
 * the stage), and every stage's logits are the last stage's, broadcast. */
typedef struct cl_decoder cl_decoder;
cl_status cl_decoder_create(cl_model *m, int B, int Tmax, cl_decoder **out);
void cl_decoder_free(cl_decoder *dc);
/* The pipeline's group (NULL or of one rank: the part is the whole model); CL_ERR_INVALID when the part's
 * first or last unit does not agree with its stage. */
cl_status cl_decoder_set_pp(cl_decoder *dc, cl_comm *pp);
cl_status cl_decoder_step(cl_decoder *dc, const int32_t *tokens, int n, int pos0, float *logits);
/* What a decoder takes on one rank: the caches and the workspace, in bytes (the part of units [u0, u1): its
 * caches, the logits on the head's stage, the token ids on the embedding's). */
typedef struct { int64_t cache, workspace; } cl_decoder_bytes;
cl_status cl_decoder_size(const cl_model_desc *d, int B, int Tmax, cl_decoder_bytes *out);
cl_status cl_decoder_size_part(const cl_model_desc *d, int u0, int u1, int B, int Tmax, cl_decoder_bytes *out);

#ifdef __cplusplus
}
#endif

#endif
