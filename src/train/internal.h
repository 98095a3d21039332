/* src/train's internal header: the trainer's state (struct cl_trainer) and
 * what the train files share beside the public train.h: the batch filler
 * (batch.c), the pipeline's shape (memory.c) and the step engine's entry
 * points (pipeline.c and the files beside it, train/pp.h), and the
 * checkpoint files' common ground: the directory (ckpt_dir.c), the sharded
 * and Hugging Face formats, the marker's manifest and the integrity checks
 * (ckpt_verify.c). Included by src/train's files only, never by a lower
 * module or cli/. */
#ifndef CLEAVE_TRAIN_INTERNAL_H
#define CLEAVE_TRAIN_INTERNAL_H

#include "cleave/comm.h"
#include "cleave/dataset.h"
#include "cleave/json.h"
#include "cleave/pipeline.h"
#include "cleave/schedule.h"
#include "cleave/train.h"

struct cl_trainer {
    cl_train_config cfg;
    cl_model_desc *desc;       /* this rank's slice of the model (tensor parallelism; the whole model at tp 1) */
    cl_model_desc *full;       /* the whole model, unpadded: checkpoints' layout */
    int tp, tp_rank;           /* tensor-parallel ranks and this one's index */
    cl_device *dev;
    cl_device *host;           /* offloaded optimizer state (cfg.offload_optimizer), else NULL */
    cl_model *model;           /* chunk 0's part: the whole model on one device */
    cl_optimizer *opt;         /* chunk 0's AdamW state */
    cl_tokenizer *tok;
    cl_dataset ds;             /* GPT: --data's sources, split and blend (cleave/dataset.h) */
    size_t ntrain, nval;       /* tokens of the training and validation parts, summed over the sources */
    int32_t *win;              /* one window's scratch (T + 1 tokens) */
    FILE *data_log;            /* CLEAVE_DATA_LOG: each training sample's index and dataset */
    cl_digits digits;          /* MLP/CNN */
    char data_path[4096];      /* the default data's path (cfg.data NULL: cl_data_find) */
    int *perm;                 /* digits: training order */
    int ndtrain, ndval;
    int32_t *mb_tokens, *mb_targets; /* device buffers for one micro-batch */
    float *mb_x;
    int step;
    int low_fresh;             /* bf16: every chunk's BF16 weight copy equals its master (trainer.c refresh_low) */
    char run_id[CL_RUN_ID_LEN + 1]; /* this run's lineage: minted at a fresh start, taken from the checkpoint on resume */
    int dp, dp_rank;           /* replicas (different samples) and this one's index */
    int cp, cp_rank;           /* context-parallel ranks of one sequence (groups->cp) and this one's index */
    int gdp, gdp_rank;         /* the ranks that sum gradients and hold ZeRO's shards: dp x cp (groups->dpcp) */
    int pp_size;               /* pipeline ranks; 1: a single device, a one-stage pipeline */
    double step_flops_per_sample;
    struct cl_pp *pp;          /* the step engine (pipeline.c), one device or many */
};

/* One window src of T + 1 tokens into a sample's tokens and targets: all T,
 * or under context parallelism (cp > 1) the T / cp of context rank rank,
 * its chunks rank and 2 cp - 1 - rank of 2 cp (batch.c). */
void cl_cp_window_copy(cl_device *dev, int32_t *tokens, int32_t *targets, const int32_t *src, int T, int cp, int rank);

/* Global samples [k0, k0 + B) into the given buffers (batch.c; B * T tokens and
 * targets, or B * pixels (the model's input floats) and B labels). */
void cl_trainer_fill_batch(cl_trainer *t, int64_t k0, int B, int32_t *tokens, int32_t *targets, float *x, cl_microbatch *mb);

/* A pipeline's shape (memory.c), the same for the executor and the memory
 * prediction: the schedule of p ranks and v chunks each over the step's m
 * micro-batches, the micro-batch slots (cl_schedule_chunk_live), input
 * gradient send buffers (cl_schedule_grad_buffers) and output gradient
 * receive buffers (cl_schedule_chunk_douts) of every stage, and the
 * partition (cfg->pp_layout, else balanced under cfg->device_memory). */
#define CL_PP_MAX_CHUNKS 64
typedef struct {
    cl_schedule sched;
    int p, v, m, S, zb, dp;
    int live[CL_PP_MAX_STAGES], ngb[CL_PP_MAX_STAGES], ndout[CL_PP_MAX_STAGES];
    cl_pp_partition part;
} cl_pp_shape;
cl_status cl_pp_shape_make(const cl_model_desc *d, const cl_train_config *cfg, int p, int dp, cl_pp_shape *out);
void cl_pp_shape_free(cl_pp_shape *sh);
cl_pp_stage_opts cl_pp_shape_opts(const cl_pp_shape *sh, const cl_train_config *cfg, int s);
/* Pipeline rank q keeps the other end's tied wte gradient (pipeline.c's tie_buf). */
int cl_pp_shape_has_tie_buf(const cl_model_desc *d, const cl_pp_shape *sh, int q);
/* Device bytes a rank keeps beside its stages (all CL_MEM_WORKSPACE): the
 * trainer's micro-batch buffers (evaluation's), and the tie buffer. */
size_t cl_rank_extra_bytes(const cl_model_desc *d, const cl_train_config *cfg, const cl_pp_shape *sh, int pp_rank);

/* The step engine (pipeline.c): builds the schedule, cuts the model,
 * creates this rank's chunks (t->model and t->opt are chunk 0's), their
 * optimizers and the micro-batch slots. One rank (t->pp_size 1, no pipeline
 * communicator needed) is a one-stage pipeline under 1F1B. */
/* The tag of the pipeline message crossing into stage s_hi of S (dir 0:
 * the activations forward, 1: their gradient back) for micro-batch mb, in
 * the pipeline's tag channel (CL_TAG_PIPE): (s_hi, dir) exactly, the
 * micro-batch modulo the window the channel leaves ((CL_TAG_SEQ_MAX + 1) /
 * 2S micro-batches, at least 8 at CL_PP_MAX_STAGES). Messages of two
 * (s_hi, dir) never share a tag; two of one (s_hi, dir) a window apart do,
 * and are matched in the order posted, which every schedule keeps (a
 * stage's micro-batches are sent and received in order; both backends keep
 * a pair's same-tag messages in order). CL_ERR_INTERNAL for arguments
 * outside those ranges. */
cl_status cl_pp_msg_tag(int S, int mb, int s_hi, int dir, int *tag);
cl_status cl_pp_create(cl_trainer *t);
void cl_pp_destroy(cl_trainer *t);
/* Every chunk from the one-device initialization stream (cl_model_init). */
void cl_pp_init(cl_trainer *t, uint64_t seed);
/* One training step through the schedule: forward/backward of the step's
 * micro-batches, gradient sync (data-parallel sum, tied-embedding sum),
 * global norm, clipping, AdamW. Fills the loss sum (over the global batch),
 * the norm and the bubble figures. */
cl_status cl_pp_step(cl_trainer *t, float lr, double *loss_sum, double *norm, cl_step_stats *st);
/* Before the optimizer applies step (1-based; optim_step.c): CL_ERR_NUMERIC "step N: loss
 * is nan" (or the gradient norm) unless both global values are finite. */
cl_status cl_step_check_finite(int step, double loss, double norm);
/* Forward of one evaluation batch, adding the sum of its losses to *sum;
 * cl_trainer_eval fills the batches and runs one of these on each. */
typedef cl_status (*cl_eval_batch_fn)(void *ctx, const cl_microbatch *mb, double *sum);
/* That forward through the pipeline (ctx: the trainer), stage after stage;
 * only the last stage's rank adds to *sum, so the caller sums over the
 * pipeline communicator afterwards. */
cl_status cl_pp_eval_batch(void *ctx, const cl_microbatch *mb, double *sum);
/* Checkpoints of a pipeline. gather: the ranks of data-parallel replica 0
 * send what they own to its first stage, where *host gets every parameter,
 * then both AdamW moments, each in the description's layout (3 x nfloats
 * floats, the caller frees) and *writer = 1; elsewhere *host stays NULL.
 * load: every held parameter and its moments from such arrays. */
cl_status cl_pp_gather(cl_trainer *t, float **host, int *writer, int *opt_t);
cl_status cl_pp_load(cl_trainer *t, const float *p, const float *m, const float *v, int opt_t);
/* Tensor-parallel rank q's slice of parameter ls (its local spec) from the whole tensor, row-major in its
 * checkpoint shape (to_whole 0), or back into it (to_whole 1); dev: the slice's device (NULL: host memory).
 * Padded vocabulary rows of the slice are not touched (ckpt_gather.c; the loads and generate_split.c). */
void cl_ckpt_slice_copy(cl_device *dev, const cl_param_spec *ls, int q, float *slice, float *whole, int to_whole);
/* ZeRO 3: seconds this rank's parts waited for parameter gathers since the last call. */
double cl_pp_z3_wait(cl_trainer *t);
/* The step's MoE figures into st (moe_stats.c): each chunk's, summed over the pipeline and the replicas. */
cl_status cl_pp_moe_stats(cl_trainer *t, cl_step_stats *st);

/* This rank's chunks (ckpt_gather.c): their parts and optimizers; returns how many. */
int cl_pp_chunks(cl_trainer *t, cl_model **m, cl_optimizer **o);

/* Checkpoint directories (ckpt_dir.c), shared by both formats: begin
 * makes a fresh temporary directory beside the normalized target (target
 * 4096, tmp 4200 bytes); commit writes the marker, then swaps it into
 * place (or, given a failed s, removes it and returns s). */
#define CL_CKPT_INDEX "cleave-index.json"
cl_status cl_ckpt_begin(const char *dir, char *target, char *tmp);
typedef struct cl_ckpt_manifest cl_ckpt_manifest;
cl_status cl_ckpt_commit(const char *dir, const char *target, const char *tmp, cl_status s, const cl_ckpt_manifest *m);
void cl_ckpt_abort(const char *tmp); /* also removes a kept step directory (ckpt_latest.c) */
void cl_ckpt_fsync_parent(const char *path);
/* A checkpoint directory to read (flag names the option that gave it): dir
 * itself, or where dir/latest points (ckpt_dir.c); out n bytes. A missing
 * dir, or a latest that names no step directory there: CL_ERR_INVALID. */
cl_status cl_ckpt_resolve(const char *flag, const char *dir, char *out, size_t n);
/* DIR/latest and the step directories it names (step-NNNNNNNN, 8 digits): the
 * step of such a name, or -1 (ckpt_dir.c). */
#define CL_CKPT_LATEST "latest"
#define CL_CKPT_STEP_DIGITS 8
long cl_ckpt_step_of(const char *name);
cl_status cl_ckpt_write_text(const char *tmp, const char *name, const cl_strbuf *b);
void cl_ckpt_config_json(cl_strbuf *b, const cl_model_config *c, const char *tokenizer, cl_dtype dtype);
void cl_ckpt_state_json(cl_strbuf *b, const cl_trainer *t, int opt_t);
/* A resume's checkpoint against this run: model, tokenizer, T, batch, seed. */
cl_status cl_ckpt_check_match(const cl_trainer *t, const char *dir, const cl_model_config *c, const char *tok, int T, int gb,
                              uint64_t seed);
/* A sharded checkpoint (ckpt_shard.c): each rank reads the boxes it holds. */
cl_status cl_shard_resume(cl_trainer *t, const char *dir);
/* Its model config and tokenizer; its parameters into a whole model (eval, generate). */
cl_status cl_shard_read_config(const char *dir, cl_model_config *c, char *tok, size_t tn);
cl_status cl_shard_load_model(const char *dir, cl_model *m);
/* A Hugging Face checkpoint (hf_import.c): a directory with neither the
 * marker nor an index; its config (a family's model_type: gpt2, llama), its
 * parameters into the whole model's tensors (ptrs[i] for d's parameter i),
 * and a resume (the moments zero, step 0). */
#define CL_CKPT_MARKER "cleave-checkpoint.json"
/* 1 if DIR/NAME exists (the marker of a single-file checkpoint, a sharded one's index). */
int cl_ckpt_has(const char *dir, const char *name);
int cl_hf_foreign(const char *dir);
cl_status cl_hf_read_config(const char *dir, cl_model_config *c, char *tok, size_t tn);
cl_status cl_hf_read_params(const char *dir, const cl_model_desc *d, cl_device *dev, float *const *ptrs);
cl_status cl_hf_resume(cl_trainer *t, const char *dir);
/* Whether Hugging Face stores p [out, in], transposed from cleave's [in, out] (the family's hf_transposed). */
int cl_hf_transposed(const cl_model_family *fam, const cl_param_spec *p);

/* Integrity (ckpt_verify.c; docs/ARCHITECTURE.md, "Checkpoint integrity"): the marker's manifest (version
 * 2: run id, step, each other file's size and cl_hash_sum), the run id and step in every safetensors file's
 * metadata, a single file's per-tensor hashes there. Checks refuse with CL_ERR_FORMAT naming what differs. */
#define CL_CKPT_MARKER_VERSION 2
#define CL_CKPT_HASH_NAME "xxh3-64 per MiB, summed"
#define CL_CKPT_META_RUN "cleave_run_id"
#define CL_CKPT_META_STEP "cleave_step"
#define CL_CKPT_META_HASH "cleave_hash."
typedef struct {
    char name[40];
    int64_t bytes;
    uint64_t hash;
} cl_ckpt_fsum;
struct cl_ckpt_manifest {
    int version; /* 1: written before hashes, nothing else is set */
    char run_id[CL_RUN_ID_LEN + 1];
    int step, n;
    size_t cap;
    cl_ckpt_fsum *f;
};
int cl_ckpt_hex_parse(const char *s, uint64_t *out); /* 16 lowercase hex digits */
cl_status cl_ckpt_hash_file(const char *path, int64_t *bytes, uint64_t *hash);
void cl_ckpt_marker_json(cl_strbuf *b, const cl_ckpt_manifest *m);
cl_status cl_ckpt_manifest_put(cl_ckpt_manifest *m, const char *name, int64_t bytes, uint64_t hash);
cl_status cl_ckpt_manifest_add(cl_ckpt_manifest *m, const char *dir, const char *name); /* hashes DIR/NAME */
cl_status cl_ckpt_manifest_read(const char *dir, cl_ckpt_manifest *m);
/* What a load checks against: the manifest, or with CLEAVE_CKPT_VERIFY=0 (tests of the checks behind the
 * hashes, the benchmark's baseline) nothing, as for a checkpoint before hashes but without the note. */
int cl_ckpt_verify_on(void);
cl_status cl_ckpt_manifest_load(const char *dir, cl_ckpt_manifest *m);
const cl_ckpt_fsum *cl_ckpt_manifest_find(const cl_ckpt_manifest *m, const char *name);
void cl_ckpt_manifest_free(cl_ckpt_manifest *m);
void cl_ckpt_note_unhashed(const char *dir); /* the one-line note for a version 1 marker */
cl_status cl_ckpt_check_size(const char *dir, const cl_ckpt_manifest *m, const char *name, int64_t size);
cl_status cl_ckpt_check_file(const char *dir, const cl_ckpt_manifest *m, const char *name, int hash);
/* path's recorded run id and step (NULL: absent) against those of what (the marker, the index) */
cl_status cl_ckpt_check_origin(const char *path, const char *what, const char *run_id, const char *step, const char *want_run,
                               int want_step);
struct cl_st_file;
cl_status cl_ckpt_verify_st(const struct cl_st_file *f, const char *path, const cl_ckpt_manifest *m);
/* A single-file checkpoint against its marker: file set, sizes, the JSON files' hashes, the state's run id
 * and step; hash_all: the tensors and whole files too (verify). m is freed on failure. */
cl_status cl_ckpt_verify_single(const char *dir, cl_ckpt_manifest *m, int hash_all);
/* run_config.json (cl_train_config.run_config): written into tmp and added to
 * m when the run has one; checked against m (hashed) when m lists it, and a
 * file m (version 2) does not list refused. *listed: 1 when m lists it, so
 * the callers' file counts allow for it; an older checkpoint has none. */
#define CL_CKPT_RUN_CONFIG "run_config.json"
cl_status cl_ckpt_run_config_write(const cl_train_config *c, const char *tmp, cl_ckpt_manifest *m);
cl_status cl_ckpt_run_config_check(const char *dir, const cl_ckpt_manifest *m, int *listed);
/* A sharded one, everything (verify; ckpt_shard.c). */
cl_status cl_shard_verify(const char *dir, const cl_ckpt_manifest *m, char *summary, size_t n);

/* ZeRO's group among gdp data(-context)-parallel ranks: all of them, or with expert parallelism the expert-data group
 * (the dp / ep ranks holding the same experts: every parameter's moments sharded over it, so each expert's over
 * the ranks that hold it and the replicated parameters' once per expert-parallel rank). */
static inline int cl_zero_ranks(const cl_train_config *c, int gdp) { return c->ep > 1 ? gdp / c->ep : gdp; }
static inline cl_comm *cl_zero_comm(const cl_train_config *c) { return c->ep > 1 ? c->groups->edp : c->groups->dpcp; }

#endif
