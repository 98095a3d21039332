/* cleave training: optimizer, learning-rate schedule, data feeding, the
 * training step, evaluation, generation and checkpoints, on one rank.
 *
 * One step = zero the gradients; for each of the step's micro-batches run
 * forward and backward (gradients accumulate, each position's loss weighted
 * 1/(positions in the global batch)); clip to the global norm; AdamW.
 * Samples are addressed by their global index (step * global_batch + j), so a
 * step's data is a pure function of the step number: resuming needs only the
 * step, and later data-parallel replicas take disjoint slices of the same
 * index range. */
#ifndef CLEAVE_TRAIN_H
#define CLEAVE_TRAIN_H

#include <stdio.h>

#include "cleave/comm.h"
#include "cleave/core.h"
#include "cleave/data.h"
#include "cleave/dataset.h"
#include "cleave/device.h"
#include "cleave/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float lr, min_lr;       /* peak and floor of the schedule */
    int warmup, steps;      /* linear warm-up steps, total steps */
} cl_lr_schedule;

/* step is 0-based. Warm-up: lr * (step+1) / warmup for step < warmup; then
 * cosine from lr down to min_lr at step == steps - 1 (min_lr after). */
float cl_lr_at(const cl_lr_schedule *s, int step);

typedef struct {
    float beta1, beta2, eps, weight_decay, grad_clip; /* grad_clip <= 0: off */
} cl_adamw_opts;

typedef struct {
    float *m, *v;           /* CL_MEM_OPTIM on dev, same layout as the parameters (or this replica's ZeRO shard); NULL on disk */
    cl_device *dev;         /* where they live: the model's device, or the host's (offload) */
    int t;                  /* steps taken */
    cl_adamw_opts o;
    /* offload to disk (cl_optimizer_create_disk): both moments in a file
     * (m then v, nfloats each), updated through two pairs of tiles on dev */
    int fd;                 /* -1 when the moments are in memory */
    int64_t nfloats, tile_floats;
    float *tile[2][2];      /* [buffer][m or v] */
} cl_optimizer;

cl_status cl_optimizer_create(cl_optimizer *o, cl_model *m, const cl_adamw_opts *opts);
/* The same with the moments on another device (offload: the host's). */
cl_status cl_optimizer_create_on(cl_optimizer *o, cl_model *m, cl_device *dev, const cl_adamw_opts *opts);
/* The moments in a new file in dir (unlinked at once: nothing is left behind
 * by a crash; its space reserved with posix_fallocate, so a full disk fails
 * here), streamed through tiles of at most CL_OFFLOAD_TILE floats (four,
 * CL_MEM_OPTIM on dev) by the step: reading the next tile overlaps updating
 * the current one. Every read and write is checked: a short or failed one
 * ends the step with CL_ERR_IO naming the file's directory. */
#define CL_OFFLOAD_TILE (256 * 1024)
/* Where the AdamW moments live (cl_train_config's offload_optimizer). */
typedef enum {
    CL_OFFLOAD_NONE = 0, /* on the device */
    CL_OFFLOAD_HOST,     /* in a host memory of their own */
    CL_OFFLOAD_DISK      /* in a file, streamed through tiles */
} cl_offload;
cl_status cl_optimizer_create_disk(cl_optimizer *o, cl_model *m, cl_device *dev, const char *dir, const cl_adamw_opts *opts);
/* Tile floats of a disk-offloaded optimizer of `moments` floats each. */
int64_t cl_offload_tile_floats(int64_t moments);
/* Both moments whole: copies into m and v (nfloats each, the caller's). */
cl_status cl_optimizer_get_moments(const cl_optimizer *o, float *m, float *v);
/* And back: the optimizer's moments from m and v. */
cl_status cl_optimizer_set_moments(cl_optimizer *o, const float *m, const float *v);
void cl_optimizer_destroy(cl_optimizer *o, cl_model *m);
/* Global L2 norm of the gradients (double accumulation) of the parameters
 * this part owns (cl_model_owns_param), summed per parameter in order. */
double cl_grad_norm(const cl_model *m);
/* The per-parameter pieces of that sum, for a norm over pipeline stages:
 * per_param[i] = sum of squares of parameter i's gradient where this part
 * owns it (left as it is elsewhere, so zeroed vectors from every stage can
 * be summed exactly and cl_grad_norm_of gives one device's bits). */
void cl_grad_sumsq(const cl_model *m, double *per_param);
double cl_grad_norm_of(const double *per_param, int n);
/* Scales gradients by min(1, clip / (norm + 1e-6)) as torch's clip_grad_norm_. */
void cl_grad_clip(cl_model *m, double norm, float clip);
/* One AdamW step over every parameter; decay only where the spec says. */
void cl_optimizer_step(cl_optimizer *o, cl_model *m, float lr);
/* The clipping coefficient min(1, clip / (norm + 1e-6)) (1 when clip <= 0),
 * and the step that reads each gradient times it: cl_grad_clip followed by
 * cl_optimizer_step, bit for bit, in one pass (the gradients stay unscaled). */
float cl_grad_clip_coef(double norm, float clip);
void cl_optimizer_step_scaled(cl_optimizer *o, cl_model *m, float lr, float gscale);
/* The same, returning the I/O errors of a disk-offloaded optimizer. */
cl_status cl_optimizer_step_checked(cl_optimizer *o, cl_model *m, float lr, float gscale);


typedef struct {
    cl_model_config model;
    int seq_len;            /* GPT tokens per sample; 0 = model's context */
    int micro_batch;        /* samples per micro-batch */
    int global_batch;       /* samples per step (a multiple of micro_batch) */
    int steps;
    uint64_t seed;
    cl_lr_schedule lr;
    cl_adamw_opts adamw;
    size_t device_memory;   /* cap in bytes, 0 = none */
    int device_memory_host; /* the cap is this rank's share of the host's available memory, not a user's --device-memory */
    const char *data;       /* text file (GPT) or digits csv(.gz) (MLP/CNN); NULL: cleave's kjv.txt or digits.csv.gz (cl_data_find) */
    const char *tokenizer;  /* "byte" or "gpt2" */
    const char *tokenizer_dir; /* for gpt2: encoder.json and vocab.bpe; NULL: cleave's gpt2/ (cl_data_find) */
    const char *data_key;   /* GPT: JSONL documents' field (NULL: "text"); data may also be a directory or a blend (cleave/dataset.h) */
    const char *split;      /* GPT: "train,validation,test" fractions of each source (NULL: 9,1,0) */
    int eval_batches;       /* validation windows per evaluation (0 = all) */
    /* The mesh's process groups (comm.h, cl_groups_create), which must
     * outlive the trainer; NULL: one rank.
     * Data parallelism: groups->dp, the replicas (size 1: one replica).
     * Replica r of d takes samples [r*G/d, (r+1)*G/d) of each step's global
     * batch; gradients are summed across replicas in buckets of about
     * bucket_bytes, each launched (non-blocking) as soon as the last
     * micro-batch's backward has finished its units, so communication
     * overlaps the rest of the backward pass. */
    const cl_groups *groups;
    size_t bucket_bytes;    /* 0 (the default): each part's cl_zero_bucket_default (25 MiB, or under ZeRO 2 and 3 from the shard) */
    /* Pipeline parallelism: groups->pp, the pipeline group (size 1: no
     * pipeline). Its p ranks each hold virtual_stages chunks of the
     * model (stage s = chunk * p + rank, S = p * virtual_stages stages) cut
     * by pp_layout (see pipeline.h) or, when NULL, by the balanced
     * partition under device_memory; each step runs `schedule` over the
     * step's micro-batches (global / (micro * dp)) with activations sent
     * forward and gradients back. */
    int schedule;           /* cl_sched_kind; default 1F1B */
    int virtual_stages;     /* chunks per rank: 1, or >= 2 for interleaved (0: 2 for interleaved, else 1) */
    const char *pp_layout;
    int trace;              /* keep a timeline of every action (cl_trainer_write_trace) */
    int recompute;          /* cl_recompute (model.h): none, selective, full */
    /* Tensor parallelism: groups->tp, the ranks that split each layer
     * (Megatron-LM: attention by heads, the MLP by columns then rows, the
     * vocabulary by rows of wte), whose size tp must be (0 or 1 without
     * groups). sequence_parallel shards the token rows between the split
     * layers too; the vocabulary is padded to a multiple of
     * vocab_divisible_by * tp (default 128) and the padding masked out. With
     * check_replicas every step ends by comparing, bit for bit, every
     * replicated parameter across the tp group (an error names the first
     * that differs). */
    int tp;
    int sequence_parallel;
    /* Context parallelism: groups->cp, the ranks that share each sample's
     * sequence (0 or 1: none; its size must be the group's). The sequence
     * is cut into 2 cp chunks, rank i holding chunks i and 2 cp - 1 - i;
     * the model is described for those T / cp tokens (cl_train_describe);
     * attention passes keys and values over the group (src/nn/cp_attention.c),
     * around the ring or by all-to-all as cp_comm (a cl_cp_comm) says. */
    int cp;
    int cp_comm;
    /* Expert parallelism (--ep): groups->ep, ep consecutive data-parallel ranks that compute the MoE blocks'
     * experts between them, E / ep each, the tokens sent to them and back by all-to-all (0 or 1: none). */
    int ep;
    int vocab_divisible_by;
    int check_replicas;
    /* ZeRO over the data-parallel group (model.h's cl_zero, a cl_zero_stage):
     * 0 none; 1 each replica keeps the AdamW moments of its shard of every
     * part's flat buffer, updates that shard and all-gathers the parameters;
     * 2 also keeps only the shard's gradients (each bucket reduce-scattered
     * into it, see cleave/dp.h); 3 also only the shard's parameters, each
     * unit's gathered before its passes (cl_model_z3_pass). */
    int zero;
    int zero3_prefetch;     /* ZeRO 3: units whose parameters are gathered ahead of the one running (default 1) */
    int params_only;        /* cleave convert: the model holds parameters, runs no step (cl_model_desc's params_only) */
    /* Offload of the AdamW moments (a cl_offload): none, host: they live in a host
     * memory of their own (cl_trainer_host), outside device_memory's cap,
     * and the update reads them there (on a CPU the host's memory is the
     * device's: what moves is the accounting and the cap). */
    int offload_optimizer;  /* disk: a file in offload_dir */
    const char *offload_dir;
    /* The run's resolved configuration as JSON text (the command line's
     * settings, cleave train --print-config), written as run_config.json into
     * every checkpoint and listed in its marker; NULL: none written. */
    const char *run_config;
    /* The compute format: CL_F32 (the default) or CL_BF16, bf16 mixed precision (F32 master weights, moments and
     * gradients; BF16 weight copies and GEMM inputs; docs/ARCHITECTURE.md "bf16 mixed precision"): the GPT family
     * on one rank, pipelines and dp with ZeRO 0-3 (cl_train_describe refuses the rest). */
    cl_dtype dtype;
    /* The format of the data-parallel gradient reduction (--grad-reduce-dtype): CL_F32 (the default) or CL_BF16, at
     * any dtype, as FSDP's reduce_dtype: gradients accumulate in F32, each bucket is narrowed to BF16 just before its
     * all-reduce (ZeRO 0-1) or reduce-scatter (ZeRO 2-3) and widened after (docs/ARCHITECTURE.md, "ZeRO"). */
    cl_dtype grad_reduce;
} cl_train_config;

/* Defaults: gpt2-tiny, tp 1, vocabulary padded to a multiple of 128, micro 8, global 8, 100 steps, lr 1e-3 to 1e-4 with 10%
 * warm-up, AdamW (0.9, 0.95, 1e-8, wd 0.1), clip 1.0, byte tokenizer, data
 * and tokenizer_dir NULL (cleave's prepared data, found by cl_data_find). */
void cl_train_config_default(cl_train_config *c);

/* The slice of cfg's model that tensor-parallel rank tp_rank holds
 * (cfg->tp, sequence_parallel, vocab_divisible_by; with cfg->cp > 1 sized
 * for the T / cp tokens of a context rank): the checks a run of cfg would
 * fail on its model's split, made before anything starts. */
cl_status cl_train_describe(const cl_train_config *cfg, int tp_rank, cl_model_desc **out);

typedef struct {
    int step;               /* 1-based step just finished */
    double loss;            /* mean over the global batch */
    float lr;
    double grad_norm;       /* before clipping */
    double seconds;
    double tokens_per_s;    /* samples/s for MLP/CNN */
    double flops;           /* model FLOPs of the step (fwd + bwd = 3x fwd) */
    size_t peak_bytes;
    size_t act_bytes;       /* peak of the saved activations (CL_MEM_ACTS) */
    /* pipeline only (groups->pp of size > 1), 0 otherwise: */
    double bubble;          /* measured: idle / makespan of the step's forward and backward work, mean over ranks */
    double bubble_sim;      /* the simulator's, on this schedule with this step's measured per-stage times */
    double bubble_max;      /* measured, the worst rank */
    double bubble_rank;     /* measured, this pipeline rank's own */
    /* this rank's traffic in the step, by group (comm.h's counts; zero without groups) */
    cl_comm_counts comm_tp, comm_dp, comm_pp;
    cl_comm_counts comm_ep; /* expert parallelism: the MoE blocks' all-to-alls (tokens out, results back) */
    double z3_wait;         /* ZeRO 3: seconds this rank waited for parameter gathers (not hidden by prefetch) */
    /* a model with MoE blocks (moe_experts > 0; cl_model_moe_take), over the whole step, every rank the same: */
    int moe_experts;
    double moe_aux;         /* the mean over micro-batches of the sum over MoE blocks of E sum f P (the trained loss is
                             * loss + moe_aux_coeff x moe_aux) */
    int64_t moe_dropped;    /* token-slots over capacity, summed over blocks and micro-batches */
    int64_t moe_slots[256]; /* token-slots each expert ran, summed over blocks and micro-batches */
} cl_step_stats;

typedef struct cl_trainer cl_trainer;

cl_status cl_trainer_create(cl_trainer **out, const cl_train_config *cfg);
/* cl_trainer_create in its two halves, for a caller that runs the first on
 * one rank before the others (the CLI: rank 0 tokenizes and caches the
 * corpus, the others read the cache). open checks the configuration,
 * describes the model, checks the memory cap and opens the data; build
 * allocates the device, the model and the optimizer and initializes the
 * weights (the long half, which ranks run at once). Neither is a
 * collective. On failure each destroys the trainer and sets *t to NULL. */
cl_status cl_trainer_open(cl_trainer **t, const cl_train_config *cfg);
cl_status cl_trainer_build(cl_trainer **t);
void cl_trainer_destroy(cl_trainer *t);
cl_status cl_trainer_step(cl_trainer *t, cl_step_stats *st);
int cl_trainer_steps_done(const cl_trainer *t);
/* The run's identifier: CL_RUN_ID_LEN lowercase hex digits, minted when the
 * trainer is created and taken from the checkpoint by a resume, so a run
 * and its resumptions share one lineage; checkpoints record it. Ranks mint
 * their own (creation is no collective); world rank 0's is the run's, and
 * every rank holds it after a resume or a sharded save. */
#define CL_RUN_ID_LEN 16
const char *cl_trainer_run_id(const cl_trainer *t);
/* Mean loss over validation windows (GPT: consecutive non-overlapping windows
 * of T+1 tokens; MLP/CNN: the validation images). A collective: every rank
 * of the trainer's groups calls it. Data-parallel replicas share the
 * batches (but with --ep), with the loss one replica alone gives, bit for
 * bit; with --ep each runs them all. */
cl_status cl_trainer_eval(cl_trainer *t, double *loss);
/* Unigram cross-entropy of the validation tokens under the training tokens'
 * frequencies (add-one smoothed): the baseline a language model must beat. */
double cl_trainer_unigram_loss(const cl_trainer *t);
cl_model *cl_trainer_model(cl_trainer *t);
cl_device *cl_trainer_device(cl_trainer *t);
/* The host memory holding offloaded optimizer state, or NULL without offload. */
cl_device *cl_trainer_host(cl_trainer *t);
/* Bytes of this rank's offloaded optimizer state files as the file system
 * has them (fstat), 0 without offload to disk. */
size_t cl_trainer_offload_file_bytes(const cl_trainer *t);
const cl_train_config *cl_trainer_config(const cl_trainer *t);
const cl_tokenizer *cl_trainer_tokenizer(const cl_trainer *t);
size_t cl_trainer_train_tokens(const cl_trainer *t);
size_t cl_trainer_val_tokens(const cl_trainer *t);
/* Pipeline runs: every stage's rank, chunk, units, predicted compute share
 * and memory (parameters with gradients and AdamW moments; activations of
 * the most micro-batches the schedule keeps live there), and the schedule's
 * theoretical bubble. Nothing without a pipeline. */
void cl_trainer_print_stages(const cl_trainer *t, FILE *f);
/* Pipeline runs with cfg.trace: every rank's timeline (of the last
 * last_steps steps; 0 = all) gathered on world rank 0, which writes one
 * Chrome trace (trace.h) to path. Every rank of world calls it; world NULL
 * means one process. */
cl_status cl_trainer_write_trace(cl_trainer *t, cl_comm *world, const char *path, int last_steps);

/* Checkpoints: DIR/model.safetensors (HF GPT-2 names), DIR/config.json,
 * DIR/optimizer.safetensors, DIR/trainer_state.json and the marker
 * DIR/cleave-checkpoint.json. Saved into a new directory beside DIR
 * (DIR.tmp.PID.N) and swapped into place atomically (renameat2
 * RENAME_EXCHANGE), so a crash mid-save leaves the previous checkpoint
 * intact. A save replaces only nothing, an empty directory, or a directory
 * with the marker holding only the files above (CL_ERR_INVALID otherwise). */
cl_status cl_trainer_save(cl_trainer *t, const char *dir);
/* The sharded format (docs/ARCHITECTURE.md, "Sharded checkpoints"): every
 * rank that holds data writes DIR/rank-NNNNN.safetensors with its slices
 * (boxes of the whole tensors, under their global names), world rank 0
 * writes DIR/cleave-index.json last; the directory is swapped into place as
 * above. Every rank of the world calls it. cl_trainer_resume reads either
 * format, at any layout: each rank reads only the byte ranges it holds. */
cl_status cl_trainer_save_sharded(cl_trainer *t, const char *dir);
/* A Hugging Face directory (src/train/hf_export.c; cleave convert --save-format hf) of the whole parameters:
 * config.json with the family's keys and torch_dtype, the tensors under Hugging Face's names and layouts as
 * dtype (F32, BF16 or F16), in model.safetensors, or with max_shard > 0 in files of at most max_shard bytes
 * (a larger tensor alone) named by model.safetensors.index.json; onto a missing path or an empty directory
 * only, moved into place whole. Collective: every rank calls it. */
cl_status cl_trainer_save_hf(cl_trainer *t, const char *dir, cl_dtype dtype, int64_t max_shard);
/* --max-shard-size as Hugging Face spells it: bytes, or with B, KB, MB, GB, KiB, MiB, GiB. */
cl_status cl_hf_parse_size(const char *text, int64_t *out);
/* Longest checkpoint path (bytes), and the most steps a checkpoint may record. */
#define CL_MAX_STEPS (1 << 30)
/* Whether dir is a path a save may write (not empty, not longer than
 * CL_PATH_MAX, and holding what cl_trainer_save may replace) in
 * a directory where files can be created (a probe file is created and
 * removed there). CL_ERR_INVALID with the path and the reason otherwise. */
cl_status cl_checkpoint_check_target(const char *dir);
/* Kept checkpoints (--save-keep): saves into DIR/step-NNNNNNNN (the step,
 * 8 digits) in the single (sharded = 0) or sharded format, then world rank 0
 * points DIR/latest at it (written whole, renamed, fsync'd), then, with
 * discard_beyond >= 0, removes every step directory beyond that step but the
 * one just written (--discard-newer-checkpoints: pass it at the run's first
 * save only, -1 after), then with keep >= 1 removes this run's lineage's
 * (cl_trainer_run_id) step directories older than the one just written
 * beyond the keep - 1 newest of them; keep 0 prunes none. Never another
 * lineage's, nor one whose run id cannot be read. Every rank calls it, as
 * the format's save. Resume, eval and convert given DIR follow DIR/latest.
 * check_kept_target: whether DIR may hold them (missing, or a directory
 * that is not itself a checkpoint, writable). is_kept_dir: 1 if DIR is a
 * directory of them (not itself a checkpoint; holding latest or a step
 * directory). check_kept_steps, before a run saving into DIR: CL_ERR_INVALID
 * naming DIR's step directories beyond the resume point (resume's step; 0
 * when resume is NULL) unless discard, and with discard any of them that is
 * not a cleave checkpoint; with keep >= 1, note (nn bytes; "" when none) gets
 * a line naming the older steps keep will never prune (another lineage's). */
cl_status cl_trainer_save_kept(cl_trainer *t, const char *dir, int keep, int sharded, long discard_beyond);
cl_status cl_checkpoint_check_kept_target(const char *dir);
int cl_checkpoint_is_kept_dir(const char *dir);
cl_status cl_checkpoint_check_kept_steps(const char *dir, const char *resume, int keep, int discard, char *note, size_t nn);
/* (A pipeline's every rank calls it: the stages of data-parallel replica 0
 * send their parameters and moments to its first stage, which writes the
 * one checkpoint; a checkpoint is the same whatever the pipeline, and any
 * pipeline, or one device, resumes from it.) */
/* Restores parameters, optimizer state and step: later steps equal the
 * uninterrupted run's bit for bit. The checkpoint's model must match. */
cl_status cl_trainer_resume(cl_trainer *t, const char *dir);

/* What a checkpoint directory holds, read without loading it: its format
 * (cleave's single file or sharded, or a Hugging Face GPT-2: a directory
 * with config.json and model.safetensors and neither of cleave's marker and
 * index), its model and tokenizer, and (has_state: cleave's formats) the
 * step and the run's sequence length, batch sizes, seed and data file, which
 * `cleave convert` takes where its flags leave them out. A Hugging Face
 * checkpoint resumes with the optimizer moments zero at step 0. */
typedef enum { CL_CKPT_SINGLE, CL_CKPT_SHARDED, CL_CKPT_HF } cl_ckpt_format;
typedef struct {
    cl_ckpt_format format;
    cl_model_config model;
    char tokenizer[64];
    int has_state, step, seq_len, global_batch, micro_batch; /* micro_batch 0: not recorded */
    uint64_t seed;
    char data[4096]; /* "" when not recorded */
    char data_key[256], split[256]; /* --data-key and --split; "" when not given (the defaults) or not recorded */
    char run_id[CL_RUN_ID_LEN + 1]; /* "" when not recorded (Hugging Face, or saved before run ids) */
} cl_checkpoint_info;
cl_status cl_checkpoint_describe(const char *dir, cl_checkpoint_info *out);
/* cl_model_config_diff (a checkpoint's model against a run's) is in model.h. */
/* Checks a checkpoint directory (DIR/latest followed) without loading a
 * model: every file read, every size, content hash, run id and step against
 * what it records (docs/ARCHITECTURE.md, "Checkpoint integrity"). CL_OK with
 * a one-line summary in summary (n bytes); else CL_ERR_FORMAT naming the
 * first file, tensor or box that differs and how. A checkpoint written
 * before hashes, or a Hugging Face one, has nothing to check: refused too. */
cl_status cl_checkpoint_verify(const char *dir, char *summary, size_t n);

/* Loading a model for eval/generate. */
typedef struct {
    cl_model_desc *desc;
    cl_model *model;
    cl_device *dev;
    cl_tokenizer *tok;
    cl_acts acts;
} cl_loaded;
cl_status cl_checkpoint_load(const char *dir, const char *tokenizer_dir, size_t cap, int B, cl_loaded *out);
void cl_loaded_free(cl_loaded *l);
/* Mean next-token loss over consecutive non-overlapping windows of T+1. */
cl_status cl_eval_tokens(cl_model *m, cl_acts *a, const int32_t *tok, size_t n, double *loss, size_t *windows);
/* The same over part `part` (CL_PART_*) of a dataset: its windows in cl_dataset_window's order. */
cl_status cl_eval_dataset(cl_model *m, cl_acts *a, cl_dataset *d, int part, double *loss, size_t *windows);
/* The logits [V] of the last of T tokens (T <= the model's context). */
typedef cl_status (*cl_logits_fn)(void *ctx, const int32_t *tokens, int T, float *logits);
/* Sampling over any source of logits, V classes, context T (cl_generate's loop). */
cl_status cl_generate_with(cl_logits_fn logits_of, void *ctx, int V, int T, const int32_t *prompt, int nprompt, int n,
                           float temperature, int top_k, uint64_t seed, int32_t *out);
/* A trainer's model, one device or a pipeline (every rank of the pipeline
 * calls it and gets the same tokens). */
cl_status cl_trainer_generate(cl_trainer *t, const int32_t *prompt, int nprompt, int n, float temperature, int top_k,
                              uint64_t seed, int32_t *out);
/* Appends n sampled tokens to a prompt (temperature <= 0: greedy; top_k <= 0: all). */
cl_status cl_generate(cl_model *m, cl_acts *a, const int32_t *prompt, int nprompt, int n, float temperature,
                      int top_k, uint64_t seed, int32_t *out);
/* How a generation went: the first call for logits (the prompt: prefill) and the others (one new token
 * each: decode), their tokens and wall seconds; with a KV cache, the device bytes its decoder was
 * predicted to take (cl_decoder_size) and took (the device's count before and after). */
typedef struct {
    int prefill_tokens, decode_tokens;
    double prefill_s, decode_s;
    int64_t kv_predicted, kv_measured, held; /* held: the device's bytes before the decoder (the model's) */
} cl_gen_stats;
/* cl_generate_with, timing each call for logits into st (NULL: none). */
cl_status cl_generate_timed(cl_logits_fn logits_of, void *ctx, int V, int T, const int32_t *prompt, int nprompt, int n,
                            float temperature, int top_k, uint64_t seed, int32_t *out, cl_gen_stats *st);
/* cl_generate with a KV cache (cl_decoder, B = 1, Tmax = min(context, prompt + n - 1)): the prompt once,
 * then one token a step; past the context each step runs the whole window again from position 0 (the
 * recomputing path's window). The same tokens as cl_generate up to F32 rounding (greedy: tests hold them
 * equal). kv 0: cl_generate's recomputation (a holds its activations; unused with kv). */
cl_status cl_generate_run(cl_model *m, cl_acts *a, int kv, const int32_t *prompt, int nprompt, int n, float temperature,
                          int top_k, uint64_t seed, int32_t *out, cl_gen_stats *st);
/* cl_generate_run with the KV cache split over tp x pp ranks (threads of this process): each rank a device
 * of cap bytes (0: none) holding its tensor-parallel slice (cl_model_describe_tp, no sequence parallelism) of
 * its pipeline stage's units (the balanced partition) with no gradient buffers (cl_model_create_infer), sliced
 * from whole (the checkpoint's model, read by every rank), and their decoder (cl_decoder_set_pp); the decoder's
 * bytes checked against what the part leaves under the cap before it is allocated, and the ranks agree
 * (cl_comm_agree_status) on that check and again on the decoder's allocation: any rank's refusal is every
 * rank's at once, one line naming it. Every rank samples the same tokens (out: rank 0's); st[r] (tp pp of
 * them, world rank r = the mesh's) its timing and bytes. */
/* What generation holds on each of tp x pp ranks (cleave generate --memory), in bytes, predicted before anything
 * is allocated and equal to what cl_generate_split (tp pp > 1) or cl_generate_run (one rank, beside the loaded
 * model's activations) measure: the part's parameters, workspace and tables (a split part, cl_model_create_infer,
 * has no gradient buffer; one rank's loaded model carries one, unused: grads), and the decoder's caches and
 * workspace (cl_decoder_size_part) for a prompt of nprompt tokens and n new ones. out has tp pp entries, by
 * world rank. */
typedef struct {
    int tp_rank, stage, u0, u1, positions;
    int64_t params, grads, model_ws, acts, cache, workspace, total;
} cl_gen_memory;
cl_status cl_generate_memory(const cl_model_desc *whole, int tp, int pp, int nprompt, int n, cl_gen_memory *out);
cl_status cl_generate_split(const cl_model *whole, int tp, int pp, size_t cap, const int32_t *prompt, int nprompt, int n,
                            float temperature, int top_k, uint64_t seed, int32_t *out, cl_gen_stats *st);
/* One rank of cl_generate_split on world (its size tp pp, else refused on every rank alike; MPI: each process
 * one rank, each with the whole model it loaded): the same tokens into out (n of them, on every rank) and this
 * rank's figures into *st (NULL: none). */
cl_status cl_generate_split_rank(cl_comm *world, const cl_model *whole, int tp, int pp, size_t cap, const int32_t *prompt,
                                 int nprompt, int n, float temperature, int top_k, uint64_t seed, int32_t *out,
                                 cl_gen_stats *st);

#ifdef __cplusplus
}
#endif

#endif
