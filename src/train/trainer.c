/* The trainer: data, model, optimizer and the training step (see train.h).
 * The step is the executor's (pipeline.c) on one device too, which is a
 * one-stage pipeline; data-parallel replicas sum their gradients in buckets
 * during each chunk's last backward (cleave/dp.h). A sample is a function of
 * its global index, so every layout reads the same samples. */
#include "cleave/kernels.h"
#include "cleave/memory.h"
#include "cleave/pipeline.h"
#include "cleave/schedule.h"
#include "cleave/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train/internal.h"

void cl_train_config_default(cl_train_config *c) {
    memset(c, 0, sizeof *c);
    cl_model_preset("gpt2-tiny", &c->model);
    c->micro_batch = 8;
    c->global_batch = 8;
    c->steps = 100;
    c->seed = 1337;
    c->lr.lr = 1e-3f;
    c->lr.min_lr = 1e-4f;
    c->lr.warmup = 10;
    c->lr.steps = 100;
    c->adamw.beta1 = 0.9f;
    c->adamw.beta2 = 0.95f;
    c->adamw.eps = 1e-8f;
    c->adamw.weight_decay = 0.1f;
    c->adamw.grad_clip = 1.0f;
    c->tokenizer = "byte";
    c->eval_batches = 16;
    c->bucket_bytes = 0; /* each part's default (cl_zero_bucket_default) */
    c->zero3_prefetch = 1;
    c->schedule = CL_SCHED_1F1B;
    c->tp = 1;
    c->vocab_divisible_by = 128;
}

static cl_status load_data(cl_trainer *t) {
    const cl_model_config *mc = &t->cfg.model;
    if (!t->cfg.data) {
        CL_TRY(cl_data_find(cl_model_family_of(mc)->data, t->data_path, sizeof t->data_path));
        t->cfg.data = t->data_path;
    }
    if (cl_model_family_of(mc)->tokens) {
        if (!strcmp(t->cfg.tokenizer, "byte")) CL_TRY(cl_tokenizer_byte(&t->tok));
        else if (!strcmp(t->cfg.tokenizer, "gpt2")) CL_TRY(cl_tokenizer_gpt2(&t->tok, t->cfg.tokenizer_dir));
        else if (!strcmp(t->cfg.tokenizer, "hf")) CL_TRY(cl_tokenizer_hf(&t->tok, t->cfg.tokenizer_dir));
        else return cl_error(CL_ERR_INVALID, "unknown --tokenizer '%s' (byte, gpt2 or hf)", t->cfg.tokenizer);
        if (cl_tokenizer_vocab(t->tok) > mc->vocab)
            return cl_error(CL_ERR_INVALID, "the %s tokenizer has %d tokens but the model's vocabulary is %d (set --vocab)",
                            cl_tokenizer_name(t->tok), cl_tokenizer_vocab(t->tok), mc->vocab);
        /* the sources, their split and blend (cleave/dataset.h): every rank draws sample k alike */
        cl_dataset_opts o = {.data = t->cfg.data, .key = t->cfg.data_key, .split = t->cfg.split, .tok = t->tok, .T = t->full->T};
        CL_TRY(cl_dataset_open(&t->ds, &o, 1 << CL_PART_TRAIN | 1 << CL_PART_VALID));
        t->ntrain = cl_dataset_tokens(&t->ds, CL_PART_TRAIN);
        t->nval = cl_dataset_tokens(&t->ds, CL_PART_VALID);
        if (!(t->win = malloc(((size_t)t->full->T + 1) * sizeof *t->win))) return cl_error(CL_ERR_OOM, "cannot allocate a window");
        const char *log = getenv("CLEAVE_DATA_LOG"); /* tests: each rank's samples, "k dataset", in PATH.<dp rank> */
        if (log && *log && t->tp_rank == 0 && (!t->cfg.groups || cl_comm_rank(t->cfg.groups->pp) == 0)) {
            char path[4200];
            snprintf(path, sizeof path, "%s.%d", log, t->dp_rank);
            if (t->cp_rank != 0) path[0] = 0; /* one log per replica: the context ranks read the same samples */
            if (path[0]) t->data_log = fopen(path, "a");
        }
        return CL_OK;
    }
    CL_TRY(cl_digits_load(t->cfg.data, &t->digits));
    int64_t in = cl_model_input_floats(mc);
    if (in != t->digits.pixels)
        return cl_error(CL_ERR_INVALID, "%s: the images have %d pixels but the model takes %lld inputs", t->cfg.data,
                        t->digits.pixels, (long long)in);
    int64_t classes = cl_model_classes(mc);
    if (classes < 10) return cl_error(CL_ERR_INVALID, "the digits have 10 classes but the model has %lld outputs", (long long)classes);
    t->ndval = t->digits.n / 6;
    t->ndtrain = t->digits.n - t->ndval;
    if (t->ndtrain < 1 || t->ndval < 1) return cl_error(CL_ERR_INVALID, "%s: too few images (%d)", t->cfg.data, t->digits.n);
    t->perm = malloc((size_t)t->ndtrain * sizeof *t->perm);
    if (!t->perm) return cl_error(CL_ERR_OOM, "cannot allocate the sample order");
    cl_rng r;
    cl_rng_seed(&r, t->cfg.seed ^ 0x5eedda7aULL);
    for (int i = 0; i < t->ndtrain; i++) t->perm[i] = i;
    for (int i = t->ndtrain - 1; i > 0; i--) {
        int j = (int)(cl_rng_u64(&r) % (uint64_t)(i + 1));
        int tmp = t->perm[i];
        t->perm[i] = t->perm[j];
        t->perm[j] = tmp;
    }
    return CL_OK;
}

/* 64 bits from the kernel's random source; without it, the clock and the
 * process mixed (an identifier, not a secret). */
static uint64_t mint_run_id(void) {
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t seed[2] = {(uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec, (uint64_t)getpid()};
        id = cl_hash64(seed, sizeof seed, 0);
    }
    return id;
}

const char *cl_trainer_run_id(const cl_trainer *t) { return t->run_id; }

cl_status cl_trainer_open(cl_trainer **out, const cl_train_config *cfg) {
    *out = NULL;
    if (cfg->micro_batch < 1) return cl_error(CL_ERR_INVALID, "--micro-batch-size must be positive (got %d)", cfg->micro_batch);
    if (cfg->global_batch < 1) return cl_error(CL_ERR_INVALID, "--global-batch-size must be positive (got %d)", cfg->global_batch);
    if (cfg->global_batch % cfg->micro_batch)
        return cl_error(CL_ERR_INVALID, "--global-batch-size %d is not a multiple of --micro-batch-size %d", cfg->global_batch,
                        cfg->micro_batch);
    if (cfg->steps < 1) return cl_error(CL_ERR_INVALID, "--steps must be positive (got %d)", cfg->steps);
    if (!(cfg->lr.lr > 0)) return cl_error(CL_ERR_INVALID, "--lr must be positive");
    int dp = cfg->groups ? cl_comm_size(cfg->groups->dp) : 1;
    if (cfg->global_batch % (cfg->micro_batch * dp))
        return cl_error(CL_ERR_INVALID,
                        "--global-batch-size %d must be a multiple of --micro-batch-size %d x %d data-parallel replicas",
                        cfg->global_batch, cfg->micro_batch, dp);
    cl_trainer *t = calloc(1, sizeof *t);
    if (!t) return cl_error(CL_ERR_OOM, "cannot allocate a trainer");
    /* creation is no collective (the CLI's rank 0 opens first, to cache the corpus): every rank mints its own, and
     * world rank 0's is the run's (a sharded save hands it to all before writing; the single file is rank 0's) */
    snprintf(t->run_id, sizeof t->run_id, "%016" PRIx64, mint_run_id());
    t->cfg = *cfg;
    t->dp = dp;
    t->dp_rank = cfg->groups ? cl_comm_rank(cfg->groups->dp) : 0;
    t->cp = cfg->groups ? cl_comm_size(cfg->groups->cp) : 1;
    t->cp_rank = cfg->groups ? cl_comm_rank(cfg->groups->cp) : 0;
    t->gdp = cfg->groups ? cl_comm_size(cfg->groups->dpcp) : 1;
    t->gdp_rank = cfg->groups ? cl_comm_rank(cfg->groups->dpcp) : 0;
    t->tp = cfg->groups ? cl_comm_size(cfg->groups->tp) : 1;
    t->tp_rank = cfg->groups ? cl_comm_rank(cfg->groups->tp) : 0;
    cl_status s = CL_OK;
    if ((cfg->tp > 1 ? cfg->tp : 1) != t->tp)
        s = cl_error(CL_ERR_INVALID, "the configuration asks for --tp %d but the tensor-parallel group has %d ranks", cfg->tp, t->tp);
    if (!s && (cfg->cp > 1 ? cfg->cp : 1) != t->cp)
        s = cl_error(CL_ERR_INVALID, "the configuration asks for --cp %d but the context-parallel group has %d ranks", cfg->cp, t->cp);
    t->cfg.tp = t->tp;
    t->cfg.cp = t->cp;
    int ep = cfg->groups && cfg->groups->ep ? cl_comm_size(cfg->groups->ep) : 1;
    if (!s && (cfg->ep > 1 ? cfg->ep : 1) != ep)
        s = cl_error(CL_ERR_INVALID, "the configuration asks for --ep %d but the expert-parallel group has %d ranks", cfg->ep, ep);
    if (!s) s = cl_train_describe(&t->cfg, t->tp_rank, &t->desc);
    if (!s) s = cl_model_describe(&cfg->model, cfg->seq_len, &t->full);
    if (!s) t->desc->params_only = t->full->params_only = cfg->params_only;
    t->pp_size = cfg->groups ? cl_comm_size(cfg->groups->pp) : 1;
    /* every rank's prediction against the cap, before anything is allocated */
    if (!s) s = cl_memory_check(&t->cfg, dp, t->pp_size);
    if (!s) s = load_data(t);
    if (s) {
        cl_trainer_destroy(t);
        return s;
    }
    *out = t;
    return CL_OK;
}

cl_status cl_trainer_build(cl_trainer **tp) {
    cl_trainer *t = *tp;
    const cl_train_config *cfg = &t->cfg;
    cl_status s = cl_device_create_cpu(&t->dev, cfg->device_memory, 0);
    if (!s && cfg->offload_optimizer != CL_OFFLOAD_NONE) s = cl_device_create_cpu(&t->host, 0, 0);
    if (!s) s = cl_pp_create(t); /* one device too: a one-stage pipeline */
    cl_pp_slot_bytes z; /* evaluation's micro-batch buffers (cl_rank_extra_bytes) */
    cl_pp_slot_sizes(t->desc, 0, t->desc->nunits, cfg->micro_batch, 0, &z);
    if (!s) s = cl_device_alloc(t->dev, CL_MEM_WORKSPACE, z.ids, (void **)&t->mb_tokens);
    if (!s) s = cl_device_alloc(t->dev, CL_MEM_WORKSPACE, z.ids, (void **)&t->mb_targets);
    if (!s && z.x) s = cl_device_alloc(t->dev, CL_MEM_WORKSPACE, z.x, (void **)&t->mb_x);
    if (s) {
        cl_trainer_destroy(t);
        *tp = NULL;
        return s;
    }
    cl_pp_init(t, cfg->seed);
    double f = 0;
    for (int u = 0; u < t->desc->nunits; u++) f += t->desc->units[u].flops;
    t->step_flops_per_sample = 3.0 * f;
    return CL_OK;
}

cl_status cl_trainer_create(cl_trainer **out, const cl_train_config *cfg) {
    CL_TRY(cl_trainer_open(out, cfg));
    return cl_trainer_build(out);
}

void cl_trainer_destroy(cl_trainer *t) {
    if (!t) return;
    cl_pp_destroy(t);
    if (t->dev) {
        cl_device_free(t->dev, t->mb_tokens);
        cl_device_free(t->dev, t->mb_targets);
        cl_device_free(t->dev, t->mb_x);
        cl_device_destroy(t->dev);
    }
    cl_device_destroy(t->host);
    cl_model_desc_free(t->desc);
    cl_model_desc_free(t->full);
    cl_tokenizer_free(t->tok);
    cl_dataset_close(&t->ds);
    free(t->win);
    if (t->data_log) fclose(t->data_log);
    cl_digits_free(&t->digits);
    free(t->perm);
    free(t);
}

static cl_status step_stats(cl_trainer *t, cl_step_stats *st, double t0, double loss_sum, double norm, float lr, int local) {
    const cl_train_config *c = &t->cfg;
    int T = t->full->T; /* the whole sequence (1 without sequences) */
    st->step = t->step;
    st->loss = loss_sum / ((double)c->global_batch * T);
    st->lr = lr;
    st->grad_norm = norm;
    st->seconds = cl_now() - t0;
    st->tokens_per_s = (double)c->global_batch * T / (st->seconds > 0 ? st->seconds : 1e-9);
    st->flops = t->step_flops_per_sample * local;
    st->peak_bytes = cl_device_peak_total(t->dev);
    st->act_bytes = cl_device_peak(t->dev, CL_MEM_ACTS);
    return CL_OK;
}

/* bf16: every chunk's BF16 weight copy from its F32 master (after init, resume or load, and after an
 * optimizer step that did not write it: ZeRO 1 and 2); nothing in F32 or while the copies are fresh (the
 * last optimizer step wrote them all, cl_model_low_by_optimizer, and nothing else changed the master since:
 * cl_trainer_resume and cl_trainer_model, which lends the master out, clear low_fresh). */
static cl_status refresh_low(cl_trainer *t) {
    cl_model *ms[CL_PP_MAX_CHUNKS];
    cl_optimizer *os[CL_PP_MAX_CHUNKS];
    int nc = cl_pp_chunks(t, ms, os);
    for (int c = 0; !t->low_fresh && c < nc; c++) CL_TRY(cl_model_refresh_low(ms[c]));
    t->low_fresh = 1;
    return CL_OK;
}

/* 1 if the optimizer step wrote every chunk's BF16 copy (0 in F32: nothing to keep fresh). */
static int low_by_optimizer(cl_trainer *t) {
    cl_model *ms[CL_PP_MAX_CHUNKS];
    cl_optimizer *os[CL_PP_MAX_CHUNKS];
    int nc = cl_pp_chunks(t, ms, os), all = nc > 0;
    for (int c = 0; c < nc; c++) all &= cl_model_low_by_optimizer(ms[c]);
    return all;
}

cl_status cl_trainer_step(cl_trainer *t, cl_step_stats *st) {
    double t0 = cl_now();
    const cl_train_config *c = &t->cfg;
    float lr = cl_lr_at(&c->lr, t->step);
    double loss_sum = 0, norm = 0;
    cl_step_stats tmp;
    if (!st) st = &tmp;
    memset(st, 0, sizeof *st);
    const cl_groups *g = c->groups;
    if (g) {
        cl_comm_counts_reset(g->tp);
        cl_comm_counts_reset(g->dpcp);
        cl_comm_counts_reset(g->pp);
        if (g->ep) cl_comm_counts_reset(g->ep);
    }
    (void)cl_pp_z3_wait(t); /* an evaluation's waits are not the step's */
    CL_TRY(refresh_low(t));
    t->low_fresh = 0; /* the optimizer step changes the master */
    CL_TRY(cl_pp_step(t, lr, &loss_sum, &norm, st));
    t->low_fresh = low_by_optimizer(t);
    if (t->desc->cfg.experts) CL_TRY(cl_pp_moe_stats(t, st));
    st->z3_wait = cl_pp_z3_wait(t);
    if (g) {
        cl_comm_counts_get(g->tp, &st->comm_tp);
        cl_comm_counts_get(g->dpcp, &st->comm_dp);
        cl_comm_counts_get(g->pp, &st->comm_pp);
        if (g->ep) cl_comm_counts_get(g->ep, &st->comm_ep);
    }
    t->step++;
    CL_TRY(cl_device_sync(t->dev)); /* the step's time covers its last kernels */
    return step_stats(t, st, t0, loss_sum, norm, lr, c->global_batch / t->dp);
}

/* ---- evaluation: one loop over the samples, a forward per batch ------------- */

/* What an evaluation runs over: n windows of T + 1 tokens (a window's first
 * T tokens are the input, its last T the targets), or, when tok is NULL, n
 * digits images (pixels each) and their labels. */
typedef struct {
    const int32_t *tok;
    cl_dataset *ds;    /* instead of tok: the windows of part `part` (cl_dataset_window) */
    int part;
    int32_t *win;      /* a window's scratch for ds */
    int T;             /* tokens of a window (the whole sequence) */
    int cp, cp_rank;   /* context parallelism: a sample holds this rank's T / cp of them (0: all) */
    size_t pixels;
    const float *images;
    const int32_t *labels;
    size_t n;
    /* replicas sharing the batches: this one runs batches first, first + stride, ... (batch b: windows [bB, bB + B))
     * and puts each one's sum in sums[b]; stride 0: every batch, each added to the sum. pad: every replica runs as
     * many forwards (their gathers are collectives), one past the last batch running the last again, its sum dropped */
    size_t first, stride;
    double *sums;
    int pad;
} eval_set;

/* The windows of tok[0, n); e->n is their count even when there are none. */
static cl_status token_windows(const int32_t *tok, size_t n, int T, eval_set *e) {
    *e = (eval_set){.tok = tok, .T = T, .n = n / ((size_t)T + 1)};
    if (e->n == 0) return cl_error(CL_ERR_INVALID, "%zu tokens are fewer than one window of %d", n, T + 1);
    return CL_OK;
}

/* Fills batches of up to B samples of e, in order, into tokens and targets
 * (B * T each) or x (B * pixels) and targets (B) of dev, and runs fwd on each. */
static cl_status eval_loop(const eval_set *e, cl_device *dev, int B, int32_t *tokens, int32_t *targets, float *x, cl_eval_batch_fn fwd,
                           void *ctx, double *sum) {
    size_t batches = (e->n + (size_t)B - 1) / (size_t)B, stride = e->stride ? e->stride : 1;
    size_t end = e->pad ? (batches + stride - 1) / stride * stride : batches;
    for (size_t bi = e->first; bi < end; bi += stride) {
        int drop = bi >= batches; /* pad's extra forward */
        size_t k = (drop ? batches - 1 : bi) * (size_t)B;
        int nb = (int)(e->n - k < (size_t)B ? e->n - k : (size_t)B);
        cl_microbatch mb = {.B = nb, .targets = targets};
        if (e->tok || e->ds) {
            int T = e->T, Tl = e->cp > 1 ? T / e->cp : T;
            for (int b = 0; b < nb; b++) {
                const int32_t *src = e->ds ? cl_dataset_window(e->ds, e->part, k + (size_t)b, e->win)
                                           : e->tok + (k + (size_t)b) * ((size_t)T + 1);
                cl_cp_window_copy(dev, tokens + (size_t)b * Tl, targets + (size_t)b * Tl, src, T, e->cp, e->cp_rank);
            }
            mb.T = Tl;
            mb.tokens = tokens;
        } else {
            for (int b = 0; b < nb; b++) {
                cl_device_copy_from_host(dev, x + (size_t)b * e->pixels, e->images + (k + (size_t)b) * e->pixels, e->pixels * sizeof *x);
                cl_device_copy_from_host(dev, targets + b, &e->labels[k + (size_t)b], sizeof *targets);
            }
            mb.T = 1;
            mb.x = x;
        }
        if (e->sums) {
            double one = 0; /* 0 + the batch's sum: the batch's sum, as the unshared loop adds it */
            CL_TRY(fwd(ctx, &mb, &one));
            if (!drop) e->sums[bi] = one;
        } else {
            CL_TRY(fwd(ctx, &mb, sum));
        }
    }
    return CL_OK;
}

/* Mean loss per target position of e from the sum of the losses. */
static double eval_mean(const eval_set *e, double sum) {
    return e->tok || e->ds ? sum / ((double)e->n * e->T) : sum / (double)e->n;
}

/* One device's forward of an evaluation batch (cl_eval_batch_fn). */
typedef struct {
    cl_model *m;
    cl_acts *a;
} model_eval;

static cl_status model_eval_batch(void *ctx, const cl_microbatch *mb, double *sum) {
    model_eval *me = ctx;
    double ls;
    CL_TRY(cl_model_forward_backward(me->m, mb, me->a, &ls, 0));
    *sum += ls;
    return CL_OK;
}

cl_status cl_eval_tokens(cl_model *m, cl_acts *a, const int32_t *tok, size_t n, double *loss, size_t *windows) {
    int T = cl_model_desc_of(m)->T, B = a->B < cl_model_batch(m) ? a->B : cl_model_batch(m);
    eval_set e;
    CL_TRY(cl_model_refresh_low(m));
    cl_status s = token_windows(tok, n, T, &e);
    if (windows) *windows = e.n;
    if (s) return s;
    int32_t *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
    if (!in || !tg) {
        free(in);
        free(tg);
        return cl_error(CL_ERR_OOM, "cannot allocate evaluation buffers");
    }
    model_eval me = {m, a};
    double sum = 0;
    s = eval_loop(&e, cl_model_device(m), B, in, tg, NULL, model_eval_batch, &me, &sum);
    free(in);
    free(tg);
    if (!s) *loss = eval_mean(&e, sum);
    return s;
}

cl_status cl_trainer_eval(cl_trainer *t, double *loss) {
    eval_set e;
    CL_TRY(refresh_low(t));
    if (cl_model_family_of(&t->desc->cfg)->tokens) {
        size_t n = cl_dataset_windows(&t->ds, CL_PART_VALID);
        if (t->cfg.eval_batches > 0 && n > (size_t)t->cfg.eval_batches) n = (size_t)t->cfg.eval_batches;
        e = (eval_set){.ds = &t->ds, .part = CL_PART_VALID, .win = t->win, .T = t->full->T, .cp = t->cp, .cp_rank = t->cp_rank, .n = n};
    } else {
        size_t px = (size_t)t->digits.pixels;
        e = (eval_set){.pixels = px, .images = t->digits.images + (size_t)t->ndtrain * px, .labels = t->digits.labels + t->ndtrain,
                       .n = (size_t)t->ndval};
    }
    /* The replicas share the batches: batch b runs on dp rank b mod dp, its sum in slot b, the slots summed over the
     * replicas (one replica's figure and zeros: exact) and then in batch order, so the sum is the one a replica makes
     * alone, bit for bit. Under ZeRO 3 a forward gathers over the replicas, so all run as many (pad). Not with
     * experts over ranks (--ep): their products take the tokens of every replica's batch at once, so a batch's
     * figures would depend on the others'; there every replica runs every batch, as with CLEAVE_EVAL_SHARE=0 (tests). */
    int B = t->cfg.micro_batch;
    size_t nb = (e.n + (size_t)B - 1) / (size_t)B;
    const char *knob = getenv("CLEAVE_EVAL_SHARE");
    if (t->dp > 1 && t->cfg.ep <= 1 && nb > 1 && !(knob && !strcmp(knob, "0"))) {
        if (!(e.sums = calloc(nb, sizeof *e.sums))) return cl_error(CL_ERR_OOM, "cannot allocate the evaluation's %zu batch sums", nb);
        e.first = (size_t)t->dp_rank, e.stride = (size_t)t->dp;
        e.pad = cl_zero_shards_params(t->cfg.zero);
    }
    /* the batches go through the stages; only the last stage's rank adds to sum */
    double sum = 0;
    cl_status s = eval_loop(&e, t->dev, B, t->mb_tokens, t->mb_targets, t->mb_x, cl_pp_eval_batch, t, &sum);
    if (!s && e.sums) s = cl_comm_allreduce(t->cfg.groups->dp, e.sums, nb, CL_F64, CL_RED_SUM);
    for (size_t b = 0; !s && e.sums && b < nb; b++) sum += e.sums[b];
    free(e.sums);
    CL_TRY(s);
    if (t->tp > 1) CL_TRY(cl_comm_allreduce(t->cfg.groups->mp, &sum, 1, CL_F64, CL_RED_SUM)); /* tp rank 0's */
    else if (t->pp_size > 1) CL_TRY(cl_comm_allreduce(t->cfg.groups->pp, &sum, 1, CL_F64, CL_RED_SUM));
    if (t->cp > 1) CL_TRY(cl_comm_allreduce(t->cfg.groups->cp, &sum, 1, CL_F64, CL_RED_SUM)); /* each rank's positions */
    *loss = eval_mean(&e, sum);
    return CL_OK;
}

/* Adds f(token) over part p of every source, read in pieces (a source may fill a scratch). */
static void part_each(const cl_dataset *d, int p, double *cnt, double *nll, double total) {
    int32_t buf[4096];
    for (int k = 0; k < d->n; k++) {
        const cl_token_source *s = &d->src[k];
        for (size_t at = s->part[p]; at < s->part[p + 1]; at += sizeof buf / sizeof buf[0]) {
            size_t n = s->part[p + 1] - at < sizeof buf / sizeof buf[0] ? s->part[p + 1] - at : sizeof buf / sizeof buf[0];
            const int32_t *tok = s->tokens(s->ctx, at, n, buf);
            for (size_t i = 0; i < n; i++)
                if (nll) *nll -= log((cnt[tok[i]] + 1) / total);
                else cnt[tok[i]] += 1;
            if (s->drop) s->drop(s->ctx, at, n); /* a mapped corpus stays out of the resident set */
        }
    }
}

double cl_trainer_unigram_loss(const cl_trainer *t) {
    if (!cl_model_family_of(&t->desc->cfg)->tokens) return log(10.0);
    int V = cl_tokenizer_vocab(t->tok);
    double *cnt = calloc((size_t)V, sizeof *cnt);
    if (!cnt) return NAN;
    double total = (double)t->ntrain + V, nll = 0;
    part_each(&t->ds, CL_PART_TRAIN, cnt, NULL, total); /* counts over the training parts, */
    part_each(&t->ds, CL_PART_VALID, cnt, &nll, total); /* the loss over the validation parts */
    free(cnt);
    return nll / (double)t->nval;
}

/* The windows of one part of a dataset (cleave eval --data). */
cl_status cl_eval_dataset(cl_model *m, cl_acts *a, cl_dataset *d, int part, double *loss, size_t *windows) {
    int T = cl_model_desc_of(m)->T, B = a->B < cl_model_batch(m) ? a->B : cl_model_batch(m);
    static const char *names[] = {"train", "validation", "test"};
    eval_set e = {.ds = d, .part = part, .T = T, .n = cl_dataset_windows(d, part)};
    CL_TRY(cl_model_refresh_low(m));
    if (windows) *windows = e.n;
    if (e.n == 0)
        return cl_error(CL_ERR_INVALID, "the %s part holds %zu tokens: fewer than one window of %d", names[part],
                        cl_dataset_tokens(d, part), T + 1);
    int32_t *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
    e.win = malloc(((size_t)T + 1) * sizeof *e.win);
    cl_status s = CL_OK;
    if (!in || !tg || !e.win) s = cl_error(CL_ERR_OOM, "cannot allocate evaluation buffers");
    model_eval me = {m, a};
    double sum = 0;
    if (!s) s = eval_loop(&e, cl_model_device(m), B, in, tg, NULL, model_eval_batch, &me, &sum);
    free(in);
    free(tg);
    free(e.win);
    if (!s) *loss = eval_mean(&e, sum);
    return s;
}

int cl_trainer_steps_done(const cl_trainer *t) { return t->step; }
cl_model *cl_trainer_model(cl_trainer *t) {
    t->low_fresh = 0; /* the caller may write the master: the next step or evaluation refreshes the BF16 copy */
    return t->model;
}
cl_device *cl_trainer_device(cl_trainer *t) { return t->dev; }
cl_device *cl_trainer_host(cl_trainer *t) { return t->host; }
const cl_train_config *cl_trainer_config(const cl_trainer *t) { return &t->cfg; }
const cl_tokenizer *cl_trainer_tokenizer(const cl_trainer *t) { return t->tok; }
size_t cl_trainer_train_tokens(const cl_trainer *t) { return t->ntrain; }
size_t cl_trainer_val_tokens(const cl_trainer *t) { return t->nval; }
