/* Text generation by sampling: temperature and top-k over the logits of the
 * last position. Where the logits come from is a function: one device
 * recomputing the whole (at most T-token) context for each new token
 * (cl_generate), one device with a KV cache (cl_generate_run: the tokens
 * not yet cached run through cl_decoder_step, src/nn/decode.c), or a
 * pipeline whose every rank samples the same token from the same broadcast
 * logits. Each call for logits is timed: the first is the prompt's
 * (prefill), the others one new token each (decode). */
#include "cleave/train.h"

#include "cleave/comm.h"
#include "cleave/core.h"
#include "cleave/mesh.h"
#include "cleave/pipeline.h"

#include "train/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { float v; int i; } scored;

static int by_value_desc(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return x->i - y->i;
}

typedef struct {
    cl_model *m;
    cl_acts *a;
} one_device;

static cl_status one_device_logits(void *ctx, const int32_t *tokens, int T, float *logits) {
    one_device *o = ctx;
    return cl_model_logits_last(o->m, tokens, T, o->a, logits);
}

cl_status cl_generate(cl_model *m, cl_acts *a, const int32_t *prompt, int nprompt, int n, float temperature, int top_k,
                      uint64_t seed, int32_t *out) {
    if (!cl_model_family_of(&cl_model_desc_of(m)->cfg)->tokens) return cl_error(CL_ERR_INVALID, "generation needs a GPT model");
    CL_TRY(cl_model_refresh_low(m)); /* bf16: the weights' BF16 copy */
    one_device o = {m, a};
    return cl_generate_with(one_device_logits, &o, cl_model_desc_of(m)->cfg.vocab, cl_model_desc_of(m)->T, prompt, nprompt, n, temperature, top_k,
                            seed, out);
}

/* The KV cache's logits: the tokens past the longest prefix the cache holds (at most T - 1 of them, so
 * at least one row runs) go through the decoder at their positions; a window that slid shares no prefix
 * and runs whole from position 0, as the recomputing path runs it. */
typedef struct {
    cl_decoder *dc;
    int32_t *cached;
    int ncached;
} kv_state;

static cl_status kv_logits(void *ctx, const int32_t *tokens, int T, float *logits) {
    kv_state *k = ctx;
    int L = 0;
    while (L < k->ncached && L < T - 1 && k->cached[L] == tokens[L]) L++;
    k->ncached = 0;
    CL_TRY(cl_decoder_step(k->dc, tokens + L, T - L, L, logits));
    memcpy(k->cached + L, tokens + L, (size_t)(T - L) * sizeof *tokens);
    k->ncached = T;
    return CL_OK;
}

/* Tmax for a prompt of nprompt and n new tokens: min(context, nprompt + n - 1), at least 1. */
static int kv_positions(const cl_model_desc *d, int nprompt, int n) {
    int64_t want = (int64_t)nprompt + n - 1;
    return want < 1 ? 1 : want < d->T ? (int)want : d->T;
}

/* The decoder's bytes (need) against what the device's cap leaves beside what it holds: refused in one line. */
static cl_status kv_fits(cl_device *dev, const cl_decoder_bytes *need, int Tmax) {
    size_t cap = cl_device_cap(dev), held = cl_device_current_total(dev), total = (size_t)(need->cache + need->workspace);
    if (!cap || (held <= cap && total <= cap - held)) return CL_OK;
    char kb[32], wb[32], cb[32], lb[32];
    cl_format_bytes((size_t)need->cache, kb, sizeof kb), cl_format_bytes((size_t)need->workspace, wb, sizeof wb);
    cl_format_bytes(cap, cb, sizeof cb), cl_format_bytes(held < cap ? cap - held : 0, lb, sizeof lb);
    return cl_error(CL_ERR_INVALID,
                    "generation's KV cache (%s for %d positions) and its workspace (%s) do not fit the %s --device-memory "
                    "cap: %s left after the model; raise the cap, generate fewer tokens or use --no-kv-cache",
                    kb, Tmax, wb, cb, lb);
}

/* Generation through a created decoder (cl_generate_timed with kv_logits), its bytes into st. */
static cl_status kv_generate(cl_decoder *dc, const cl_model_desc *d, int Tmax, const int32_t *prompt, int nprompt, int n,
                             float temperature, int top_k, uint64_t seed, int32_t *out, cl_gen_stats *st) {
    kv_state k = {dc, malloc((size_t)Tmax * sizeof(int32_t)), 0};
    if (!k.cached) return cl_error(CL_ERR_OOM, "cannot allocate generation buffers");
    cl_status s = cl_generate_timed(kv_logits, &k, d->cfg.vocab, d->T, prompt, nprompt, n, temperature, top_k, seed, out, st);
    free(k.cached);
    return s;
}

cl_status cl_generate_run(cl_model *m, cl_acts *a, int kv, const int32_t *prompt, int nprompt, int n, float temperature,
                          int top_k, uint64_t seed, int32_t *out, cl_gen_stats *st) {
    const cl_model_desc *d = cl_model_desc_of(m);
    if (!cl_model_family_of(&d->cfg)->tokens) return cl_error(CL_ERR_INVALID, "generation needs a GPT model");
    if (!kv) {
        one_device o = {m, a};
        return cl_generate_timed(one_device_logits, &o, d->cfg.vocab, d->T, prompt, nprompt, n, temperature, top_k, seed, out, st);
    }
    int Tmax = kv_positions(d, nprompt, n);
    cl_decoder_bytes need;
    CL_TRY(cl_decoder_size(d, 1, Tmax, &need));
    cl_device *dev = cl_model_device(m);
    CL_TRY(kv_fits(dev, &need, Tmax));
    size_t held = cl_device_current_total(dev);
    cl_decoder *dc;
    CL_TRY(cl_decoder_create(m, 1, Tmax, &dc));
    size_t took = cl_device_current_total(dev) - held;
    cl_status s = kv_generate(dc, d, Tmax, prompt, nprompt, n, temperature, top_k, seed, out, st);
    if (!s && st) st->kv_predicted = need.cache + need.workspace, st->kv_measured = (int64_t)took, st->held = (int64_t)held;
    cl_decoder_free(dc);
    return s;
}

/* ---- generation split over tp x pp ranks (threads, or MPI processes) ---- */

typedef struct {
    const cl_model *whole; /* the checkpoint's model, whole, read by the rank (threads: every rank the one copy) */
    int tp, pp;
    size_t cap;
    const int32_t *prompt;
    int nprompt, n, top_k;
    float temperature;
    uint64_t seed;
} split_job;

/* The slice of the whole model wd that tensor-parallel rank tr of tp holds (cl_model_describe_tp, no sequence
 * parallelism), and the units [u0, u1) of stage `stage` of pp (the balanced partition). */
static cl_status split_part(const cl_model_desc *wd, int tp, int pp, int tr, int stage, cl_model_desc **d, int *u0, int *u1) {
    cl_tp_layout tl = wd->tpl;
    tl.tp = tp, tl.rank = tr, tl.sp = 0;
    CL_TRY(cl_model_describe_tp(&wd->cfg, wd->T, &tl, d));
    cl_pp_stage_opts o[CL_PP_MAX_STAGES] = {0};
    for (int s = 0; s < pp && s < CL_PP_MAX_STAGES; s++) o[s].B = 1, o[s].live = 1;
    cl_pp_partition part;
    cl_status s = cl_pp_partition_balanced(*d, pp, o, NULL, 0, &part);
    if (s) {
        cl_model_desc_free(*d);
        *d = NULL;
        return cl_error_context(s, "--pp %d", pp);
    }
    *u0 = part.u0[stage], *u1 = part.u1[stage];
    return CL_OK;
}

cl_status cl_generate_memory(const cl_model_desc *wd, int tp, int pp, int nprompt, int n, cl_gen_memory *out) {
    if (tp < 1 || pp < 1 || tp * pp > 4096) return cl_error(CL_ERR_INVALID, "--tp %d x --pp %d ranks", tp, pp);
    int Tmax = kv_positions(wd, nprompt, n), one = tp * pp == 1;
    for (int r = 0; r < tp * pp; r++) {
        cl_mesh mesh;
        CL_TRY(cl_mesh_init(&mesh, tp * pp, 1, tp, pp));
        cl_coord c = cl_mesh_coord(&mesh, r);
        cl_model_desc *d;
        int u0, u1;
        CL_TRY(split_part(wd, tp, pp, c.tp, c.pp, &d, &u0, &u1));
        cl_decoder_bytes need;
        cl_status s = cl_decoder_size_part(d, u0, u1, 1, Tmax, &need);
        cl_part_sizes z;
        cl_model_part_sizes(d, u0, u1, 1, CL_RECOMPUTE_NONE, NULL, &z);
        cl_model_desc_free(d);
        CL_TRY(s);
        int64_t f = (int64_t)sizeof(float);
        cl_gen_memory *o = &out[r];
        *o = (cl_gen_memory){.tp_rank = c.tp, .stage = c.pp, .u0 = u0, .u1 = u1, .positions = Tmax, .cache = need.cache, .workspace = need.workspace};
        o->params = (z.params + z.npwork * z.pwork + z.wlow) * f;
        /* one rank: the loaded model's gradient buffer (cl_checkpoint_load's, unused); a split part has none
         * (cl_model_create_infer) */
        o->grads = one ? (z.grads + z.whole + z.nbuf * z.bucket + z.halo) * f : 0;
        o->model_ws = (z.scratch + 2 * z.io + z.tables) * f;
        o->acts = one ? z.acts * f : 0; /* one rank: the loaded model's activations (cl_checkpoint_load's) */
        o->total = o->params + o->grads + o->model_ws + o->acts + o->cache + o->workspace;
    }
    return CL_OK;
}

/* This rank's share of the split over world (tp x pp ranks, the mesh's dp 1): its part of the whole model, a decoder
 * stage over it, the tokens into out (NULL: a buffer of its own; every rank samples the same tokens), its figures
 * into *st. Two agreements over the world: on what the ranks built and checked against their caps before the
 * decoder, and on the decoder's allocation, so a rank that fails either is every rank's failure at once. */
static cl_status split_run(cl_comm *world, const split_job *j, int32_t *out, cl_gen_stats *st_out) {
    const cl_model_desc *wd = cl_model_desc_of(j->whole);
    int r = cl_comm_rank(world);
    cl_mesh mesh;
    cl_groups g = {0};
    CL_TRY(cl_mesh_init(&mesh, j->tp * j->pp, 1, j->tp, j->pp));
    CL_TRY(cl_groups_create(world, &mesh, &g));
    cl_coord c = cl_mesh_coord(&mesh, r);
    cl_model_desc *d = NULL;
    cl_device *dev = NULL;
    cl_model *m = NULL;
    cl_decoder *dc = NULL;
    int u0 = 0, u1 = 0, Tmax = kv_positions(wd, j->nprompt, j->n);
    int32_t *buf = out ? out : malloc((size_t)(j->n > 0 ? j->n : 1) * sizeof *buf);
    cl_decoder_bytes need = {0};
    cl_status s = buf ? CL_OK : cl_error(CL_ERR_OOM, "cannot allocate generation buffers");
    if (!s) s = split_part(wd, j->tp, j->pp, c.tp, c.pp, &d, &u0, &u1);
    if (!s) s = cl_decoder_size_part(d, u0, u1, 1, Tmax, &need);
    if (!s) s = cl_device_create_cpu(&dev, j->cap, r);
    if (!s) s = cl_model_create_infer(&m, d, dev, 1, u0, u1);
    if (!s && j->tp > 1) s = cl_model_set_tp(m, g.tp);
    for (int i = 0; !s && i < d->nparams; i++) /* this rank's slice of each parameter it holds, from the whole model */
        if (cl_model_holds_param(m, i))
            cl_ckpt_slice_copy(dev, &d->params[i], c.tp, cl_model_param(m, i), cl_model_param(j->whole, i), 0);
    if (!s) s = cl_model_refresh_low(m);
    if (!s) s = kv_fits(dev, &need, Tmax);
    s = cl_comm_agree_status(world, s ? cl_error_context(s, "rank %d (tp %d, stage %d)", r, c.tp, c.pp) : CL_OK);
    size_t held = dev ? cl_device_current_total(dev) : 0, took = 0;
    if (!s) { /* every rank here, or none */
        s = cl_decoder_create(m, 1, Tmax, &dc);
        took = cl_device_current_total(dev) - held;
        if (!s) s = cl_decoder_set_pp(dc, g.pp);
        s = cl_comm_agree_status(world, s ? cl_error_context(s, "rank %d (tp %d, stage %d)", r, c.tp, c.pp) : CL_OK);
    }
    cl_gen_stats st = {0};
    if (!s) s = kv_generate(dc, d, Tmax, j->prompt, j->nprompt, j->n, j->temperature, j->top_k, j->seed, buf, &st);
    if (buf != out) free(buf);
    st.kv_predicted = need.cache + need.workspace, st.kv_measured = (int64_t)took, st.held = (int64_t)held;
    if (st_out) *st_out = st;
    cl_decoder_free(dc);
    if (m) cl_model_destroy(m);
    cl_device_destroy(dev);
    cl_model_desc_free(d);
    cl_groups_free(&g);
    return s;
}

/* What every rank checks alike before it runs: the model generates, the prompt is not empty, the layout's size. */
static cl_status split_check(const cl_model_desc *wd, int tp, int pp, int nprompt) {
    if (!cl_model_family_of(&wd->cfg)->tokens) return cl_error(CL_ERR_INVALID, "generation needs a GPT model");
    if (tp < 1 || pp < 1 || tp * pp > 4096) return cl_error(CL_ERR_INVALID, "--tp %d x --pp %d ranks", tp, pp);
    if (nprompt < 1) return cl_error(CL_ERR_INVALID, "generation needs a prompt of at least one token");
    return CL_OK;
}

cl_status cl_generate_split_rank(cl_comm *world, const cl_model *whole, int tp, int pp, size_t cap, const int32_t *prompt,
                                 int nprompt, int n, float temperature, int top_k, uint64_t seed, int32_t *out,
                                 cl_gen_stats *st) {
    cl_status s = split_check(cl_model_desc_of(whole), tp, pp, nprompt);
    if (!s && cl_comm_size(world) != tp * pp)
        s = cl_error(CL_ERR_INVALID, "--tp %d x --pp %d generates on %d ranks, but this world has %d (mpirun -np %d)", tp, pp, tp * pp,
                     cl_comm_size(world), tp * pp);
    CL_TRY(cl_comm_fail_together(world, s)); /* every rank checked the same values */
    split_job j = {whole, tp, pp, cap, prompt, nprompt, n, top_k, temperature, seed};
    return split_run(world, &j, out, st);
}

typedef struct {
    split_job j;
    int32_t *out; /* rank 0's tokens */
    cl_gen_stats *st; /* [tp pp], by world rank */
} split_threads;

static cl_status split_thread(cl_comm *world, void *arg) {
    split_threads *t = arg;
    int r = cl_comm_rank(world);
    return split_run(world, &t->j, r ? NULL : t->out, &t->st[r]);
}

cl_status cl_generate_split(const cl_model *whole, int tp, int pp, size_t cap, const int32_t *prompt, int nprompt, int n,
                            float temperature, int top_k, uint64_t seed, int32_t *out, cl_gen_stats *st) {
    const cl_model_desc *wd = cl_model_desc_of(whole);
    CL_TRY(split_check(wd, tp, pp, nprompt));
    split_threads t = {{whole, tp, pp, cap, prompt, nprompt, n, top_k, temperature, seed}, out, st};
    /* the layout checked here, before any rank starts: each tensor-parallel rank's slice and the stages */
    for (int tr = 0; tr < tp; tr++) {
        cl_model_desc *d;
        int u0, u1;
        CL_TRY(split_part(wd, tp, pp, tr, 0, &d, &u0, &u1));
        cl_decoder_bytes need;
        cl_status s = cl_decoder_size_part(d, 0, d->nunits, 1, kv_positions(d, nprompt, n), &need);
        cl_model_desc_free(d);
        CL_TRY(s);
    }
    cl_launch_opts o = {0};
    return cl_launch_threads(tp * pp, split_thread, &t, &o);
}

cl_status cl_generate_with(cl_logits_fn logits_of, void *arg, int V, int T, const int32_t *prompt, int nprompt, int n,
                           float temperature, int top_k, uint64_t seed, int32_t *out) {
    return cl_generate_timed(logits_of, arg, V, T, prompt, nprompt, n, temperature, top_k, seed, out, NULL);
}

cl_status cl_generate_timed(cl_logits_fn logits_of, void *arg, int V, int T, const int32_t *prompt, int nprompt, int n,
                            float temperature, int top_k, uint64_t seed, int32_t *out, cl_gen_stats *st) {
    if (nprompt < 1) return cl_error(CL_ERR_INVALID, "generation needs a prompt of at least one token");
    if (n < 0) return cl_error(CL_ERR_INVALID, "--tokens must be >= 0");
    float *logits = malloc((size_t)V * sizeof *logits);
    scored *sc = malloc((size_t)V * sizeof *sc);
    int32_t *seq = malloc(((size_t)nprompt + (size_t)n) * sizeof *seq);
    if (!logits || !sc || !seq) {
        free(logits);
        free(sc);
        free(seq);
        return cl_error(CL_ERR_OOM, "cannot allocate generation buffers");
    }
    memcpy(seq, prompt, (size_t)nprompt * sizeof *seq);
    cl_rng r;
    cl_rng_seed(&r, seed);
    if (st) *st = (cl_gen_stats){0};
    cl_status s = CL_OK;
    for (int k = 0; k < n && !s; k++) {
        int len = nprompt + k, ctx = len < T ? len : T;
        double t0 = cl_now();
        s = logits_of(arg, seq + len - ctx, ctx, logits);
        if (s) break;
        if (st && k == 0) st->prefill_tokens = ctx, st->prefill_s = cl_now() - t0;
        else if (st) st->decode_tokens++, st->decode_s += cl_now() - t0;
        int next;
        if (temperature <= 0) {
            next = 0;
            for (int i = 1; i < V; i++)
                if (logits[i] > logits[next]) next = i;
        } else {
            for (int i = 0; i < V; i++) sc[i] = (scored){logits[i], i};
            int kk = V;
            if (top_k > 0 && top_k < V) {
                qsort(sc, (size_t)V, sizeof *sc, by_value_desc);
                kk = top_k;
            }
            float mx = sc[0].v;
            for (int i = 1; i < kk; i++)
                if (sc[i].v > mx) mx = sc[i].v;
            double total = 0;
            for (int i = 0; i < kk; i++) total += exp((double)(sc[i].v - mx) / temperature);
            double u = (double)cl_rng_uniform(&r) * total, acc = 0;
            next = sc[kk - 1].i;
            for (int i = 0; i < kk; i++) {
                acc += exp((double)(sc[i].v - mx) / temperature);
                if (u < acc) {
                    next = sc[i].i;
                    break;
                }
            }
        }
        seq[len] = next;
        out[k] = next;
    }
    free(logits);
    free(sc);
    free(seq);
    return s;
}
