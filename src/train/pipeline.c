/* The pipeline executor, the one step engine: runs one rank's part of a
 * schedule (schedule.h) over the pipeline communicator, for the trainer
 * (train.h, groups->pp). A single device is a pipeline of one rank and one
 * stage under 1F1B (F0 B0 F1 B1 ...: one slot), with no communicator: no
 * sends, receives or pipeline collectives.
 *
 * Every rank holds v chunks (cl_model parts); chunk c is model stage
 * s = c * p + rank. Each chunk has a pool of micro-batch slots, as many as
 * the schedule ever has live on it at once (a slot is taken by the first
 * RECV_ACT or FWD of a micro-batch and given back by its BWD, or its W under
 * zb-h1): saved activations, the received input, the micro-batch's data, and
 * under zb-h1 the output gradient of each unit that the weight pass needs.
 * The received gradient of the chunk's output is not in a slot: it is needed
 * only from its RECV_GRAD to the backward that reads it (BWD, or B under
 * zb-h1, which copies it into the slot for W), so it lands in a pool of
 * receive buffers as large as the schedule ever holds at once
 * (cl_schedule_chunk_douts: one in every built-in schedule), taken at
 * RECV_GRAD and given back when that backward ends.
 *
 * Sends are non-blocking. An activation is sent straight out of the slot's
 * saved output (which lives until the micro-batch's backward, and that
 * backward needs the gradient the receiver sends only after it has the
 * activation); an input gradient goes out of a send buffer from a pool whose
 * buffers return when their send has completed. Every send is waited for at
 * GRAD_SYNC. Receives block, with the communicator's timeout.
 *
 * Why the result equals one device bit for bit: every parameter gradient is
 * accumulated over the micro-batches in the same order (each stage runs its
 * backwards in micro-batch order), by the same kernels on the same inputs;
 * the tied wte keeps the embedding's and the head's sums apart on one device
 * too (cl_model_split_tied) and adds them once; the global norm is summed per
 * parameter, in parameter order, from per-parameter pieces that the stages
 * exchange exactly (x + 0 = x); AdamW is elementwise. */
#include "cleave/comm.h"
#include "cleave/kernels.h"
#include "cleave/pipeline.h"
#include "cleave/prof.h"
#include "cleave/schedule.h"
#include "cleave/trace.h"
#include "cleave/train.h"

#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "cleave/dp.h"
#include "train/internal.h"

#define TIE_TAG CL_COMM_TAG_MAX

typedef struct {
    int mb;              /* micro-batch in it, -1 when free */
    cl_acts acts;
    float *in;           /* received input of the chunk's first unit (not on stage 0) */
    float **udout;       /* zb-h1: each unit's output gradient, for W */
    int32_t *tokens, *targets;
    float *x;
    cl_microbatch mbd;
    cl_request *send_req; /* the activation sent out of acts */
} pp_slot;

typedef struct {
    cl_model *m;
    cl_optimizer opt;
    int stage, first, last;
    int nslots;
    pp_slot *slots;
    int *slot_of;        /* [m]: slot index of each micro-batch, -1 */
    int ngb;             /* input-gradient send buffers (cl_schedule_grad_buffers' peak for this chunk) */
    float **gb;          /* [ngb] each in_bytes */
    int *gb_mb;          /* [ngb] micro-batch whose gradient it holds or sends, -1 when free */
    cl_request **gb_req; /* [ngb] its send, once SEND_GRAD has posted it */
    int ndout;           /* output-gradient receive buffers (cl_schedule_chunk_douts; 0 on the last stage) */
    float **dob;         /* [ndout] each out_bytes */
    int *dob_mb;         /* [ndout] micro-batch whose output gradient it holds, -1 when free */
    cl_dp *dp;           /* its gradient buckets over the data-parallel replicas */
    int last_bwd;        /* index in this rank's actions of the backward that completes its weight gradients */
    size_t in_bytes, out_bytes;
} pp_chunk;

struct cl_pp {
    cl_comm *comm;              /* NULL for one rank */
    int p, r, v, m, S;
    cl_schedule sched;
    cl_pp_shape shape;          /* schedule (moved to sched), slots and send buffers per stage, partition */
    double bubble_uniform;      /* the simulator's bubble of sched with equal stage times */
    cl_pp_partition part;
    pp_chunk ch[CL_PP_MAX_CHUNKS];
    int *gb_free_at;     /* [v * m]: action index from which (mb, chunk)'s send buffer is free (cl_schedule_grad_buffers) */
    double *norm_parts;  /* [nparams + 1]: the gradients' sums of squares, then the loss */
    float *tie_buf;      /* rank 0 of a pipeline with the head elsewhere: the head's wte gradient */
    double *cost_sum;    /* [3 * S] measured F, B(or BWD), W seconds summed over this step's actions */
    int *cost_n;         /* [3 * S] */
    cl_trace trace;      /* this rank's timeline (cfg.trace) */
    int world_rank;
};

static int rank_of_stage(const struct cl_pp *pp, int s) { return s % pp->p; }

static int msg_tag(const struct cl_pp *pp, int mb, int s_hi, int dir) {
    return (int)((((int64_t)mb * pp->S + s_hi) * 2 + dir) % CL_COMM_TAG_MAX);
}

/* ---- setup ---------------------------------------------------------------- */

static cl_status slot_create(cl_trainer *t, pp_chunk *c, pp_slot *sl, int zb) {
    cl_model *m = c->m;
    cl_device *dev = t->dev;
    int B = t->cfg.micro_batch;
    const cl_model_desc *d = t->desc;
    sl->mb = -1;
    cl_pp_slot_bytes z;
    cl_pp_slot_sizes(d, m->u0, m->u1, B, zb, &z);
    CL_TRY(cl_acts_create(m, B, &sl->acts));
    if (z.in) CL_TRY(cl_device_alloc(dev, CL_MEM_ACTS, z.in, (void **)&sl->in));
    CL_TRY(cl_device_alloc(dev, CL_MEM_WORKSPACE, z.ids, (void **)&sl->tokens));
    CL_TRY(cl_device_alloc(dev, CL_MEM_WORKSPACE, z.ids, (void **)&sl->targets));
    if (z.x) CL_TRY(cl_device_alloc(dev, CL_MEM_WORKSPACE, z.x, (void **)&sl->x));
    if (zb) {
        int n = m->u1 - m->u0;
        sl->udout = calloc((size_t)n, sizeof *sl->udout);
        if (!sl->udout) return cl_error(CL_ERR_OOM, "cannot allocate the weight-pass table");
        for (int u = m->u0; u < m->u1; u++)
            CL_TRY(cl_device_alloc_f32(dev, CL_MEM_ACTS, (size_t)cl_pp_udout_floats(d, u, B), &sl->udout[u - m->u0]));
    }
    return CL_OK;
}

static void slot_destroy(cl_trainer *t, pp_chunk *c, pp_slot *sl) {
    cl_device *dev = t->dev;
    if (c->m) cl_acts_destroy(c->m, &sl->acts);
    cl_device_free(dev, sl->in);
    cl_device_free(dev, sl->tokens);
    cl_device_free(dev, sl->targets);
    cl_device_free(dev, sl->x);
    if (sl->udout) {
        for (int u = 0; c->m && u < c->m->u1 - c->m->u0; u++) cl_device_free(dev, sl->udout[u]);
        free(sl->udout);
    }
}

cl_status cl_pp_create(cl_trainer *t) {
    const cl_train_config *cfg = &t->cfg;
    const cl_model_desc *d = t->desc;
    struct cl_pp *pp = calloc(1, sizeof *pp);
    if (!pp) return cl_error(CL_ERR_OOM, "cannot allocate the pipeline state");
    t->pp = pp;
    pp->p = t->pp_size;
    if (pp->p > 1) {
        pp->comm = cfg->groups->pp;
        pp->r = cl_comm_rank(pp->comm);
        pp->world_rank = cl_comm_world_rank(pp->comm);
    }
    cl_pp_shape sh;
    CL_TRY(cl_pp_shape_make(d, cfg, pp->p, t->dp, &sh));
    pp->sched = sh.sched; /* the pipeline owns the schedule now */
    pp->v = sh.v, pp->m = sh.m, pp->S = sh.S;
    pp->shape = sh;
    memset(&pp->shape.sched, 0, sizeof pp->shape.sched);
    pp->part = sh.part;
    cl_sched_kind kind = pp->sched.kind;
    cl_sim_result res;
    CL_TRY(cl_schedule_simulate(&pp->sched, NULL, &res));
    pp->bubble_uniform = res.bubble_total;
    cl_sim_result_free(&res);
    int gb_peak[CL_PP_MAX_CHUNKS];
    pp->gb_free_at = malloc((size_t)(pp->v * pp->m) * sizeof *pp->gb_free_at);
    if (!pp->gb_free_at) return cl_error(CL_ERR_OOM, "cannot allocate the gradient buffer table");
    CL_TRY(cl_schedule_grad_buffers(&pp->sched, pp->r, pp->gb_free_at, gb_peak));
    for (int c = 0; c < pp->v; c++) {
        pp_chunk *ch = &pp->ch[c];
        ch->stage = c * pp->p + pp->r;
        ch->first = ch->stage == 0;
        ch->last = ch->stage == pp->S - 1;
        int u0 = pp->part.u0[ch->stage], u1 = pp->part.u1[ch->stage];
        cl_zero zero = {cfg->zero, t->dp, t->dp_rank, cfg->bucket_bytes, cfg->zero3_prefetch, kind == CL_SCHED_ZB_H1};
        CL_TRY(cl_model_create_zero(&ch->m, d, t->dev, cfg->micro_batch, u0, u1, &zero));
        if (t->dp > 1) CL_TRY(cl_model_set_zero3(ch->m, cfg->groups->dp)); /* ZeRO 3: no-op below it */
        if (t->tp > 1) CL_TRY(cl_model_set_tp(ch->m, cfg->groups->tp));
        CL_TRY(cl_model_split_tied(ch->m));
        CL_TRY(cl_model_set_recompute(ch->m, (cl_recompute)cfg->recompute));
        if (cfg->offload_optimizer == 2) CL_TRY(cl_optimizer_create_disk(&ch->opt, ch->m, t->host, cfg->offload_dir, &cfg->adamw));
        else CL_TRY(cl_optimizer_create_on(&ch->opt, ch->m, t->host ? t->host : t->dev, &cfg->adamw));
        CL_TRY(cl_dp_create(&ch->dp, t->dp > 1 ? cfg->groups->dp : NULL, ch->m, cfg->bucket_bytes));
        ch->last_bwd = -1;
        for (int i = 0; i < pp->sched.len[pp->r]; i++) {
            const cl_action *a = &pp->sched.acts[pp->r][i];
            if (a->chunk == c && (a->kind == CL_ACT_BWD || a->kind == CL_ACT_BWD_WEIGHT)) ch->last_bwd = i;
        }
        cl_pp_slot_bytes z;
        cl_pp_slot_sizes(d, u0, u1, cfg->micro_batch, 0, &z);
        ch->in_bytes = z.in;
        ch->out_bytes = z.dout;
        ch->nslots = pp->shape.live[ch->stage];
        ch->slots = calloc((size_t)ch->nslots, sizeof *ch->slots);
        ch->slot_of = malloc((size_t)pp->m * sizeof *ch->slot_of);
        if (!ch->slots || !ch->slot_of) return cl_error(CL_ERR_OOM, "cannot allocate micro-batch slots");
        for (int k = 0; k < ch->nslots; k++) CL_TRY(slot_create(t, ch, &ch->slots[k], kind == CL_SCHED_ZB_H1));
        ch->gb = calloc((size_t)gb_peak[c] + 1, sizeof *ch->gb);
        ch->gb_mb = malloc(((size_t)gb_peak[c] + 1) * sizeof *ch->gb_mb);
        ch->gb_req = calloc((size_t)gb_peak[c] + 1, sizeof *ch->gb_req);
        if (!ch->gb || !ch->gb_mb || !ch->gb_req) return cl_error(CL_ERR_OOM, "cannot allocate the gradient buffers");
        ch->ngb = gb_peak[c];
        for (int k = 0; k < ch->ngb; k++) ch->gb_mb[k] = -1;
        for (int k = 0; k < ch->ngb; k++) CL_TRY(cl_device_alloc(t->dev, CL_MEM_WORKSPACE, ch->in_bytes, (void **)&ch->gb[k]));
        int nd = pp->shape.ndout[ch->stage];
        ch->dob = calloc((size_t)nd + 1, sizeof *ch->dob);
        ch->dob_mb = malloc(((size_t)nd + 1) * sizeof *ch->dob_mb);
        if (!ch->dob || !ch->dob_mb) return cl_error(CL_ERR_OOM, "cannot allocate the output gradient buffers");
        ch->ndout = nd;
        for (int k = 0; k < nd; k++) ch->dob_mb[k] = -1;
        for (int k = 0; k < nd; k++) CL_TRY(cl_device_alloc(t->dev, CL_MEM_ACTS, ch->out_bytes, (void **)&ch->dob[k]));
    }
    pp->norm_parts = calloc((size_t)d->nparams + 1, sizeof *pp->norm_parts);
    pp->cost_sum = calloc((size_t)pp->S * 3, sizeof *pp->cost_sum);
    pp->cost_n = calloc((size_t)pp->S * 3, sizeof *pp->cost_n);
    if (!pp->norm_parts || !pp->cost_sum || !pp->cost_n) return cl_error(CL_ERR_OOM, "cannot allocate pipeline tables");
    if (cl_pp_shape_has_tie_buf(d, &sh, pp->r))
        CL_TRY(cl_device_alloc_f32(t->dev, CL_MEM_WORKSPACE, (size_t)d->params[d->tied_wte].numel, &pp->tie_buf));
    t->model = pp->ch[0].m;
    t->opt = &pp->ch[0].opt;
    return CL_OK;
}

void cl_pp_destroy(cl_trainer *t) {
    struct cl_pp *pp = t->pp;
    if (!pp) return;
    for (int c = 0; c < pp->v && c < CL_PP_MAX_CHUNKS; c++) {
        pp_chunk *ch = &pp->ch[c];
        for (int k = 0; ch->slots && k < ch->nslots; k++) slot_destroy(t, ch, &ch->slots[k]);
        free(ch->slots);
        free(ch->slot_of);
        for (int k = 0; k < ch->ngb; k++) {
            if (ch->gb_req[k]) cl_comm_wait(pp->comm, ch->gb_req[k]);
            cl_device_free(t->dev, ch->gb[k]);
        }
        free(ch->gb);
        free(ch->gb_mb);
        free(ch->gb_req);
        for (int k = 0; ch->dob && k < ch->ndout; k++) cl_device_free(t->dev, ch->dob[k]);
        free(ch->dob);
        free(ch->dob_mb);
        cl_dp_destroy(ch->dp);
        if (ch->m) {
            if (ch->opt.m || ch->opt.fd >= 0) cl_optimizer_destroy(&ch->opt, ch->m);
            cl_model_destroy(ch->m);
        }
    }
    free(pp->gb_free_at);
    cl_device_free(t->dev, pp->tie_buf);
    free(pp->norm_parts);
    free(pp->cost_sum);
    free(pp->cost_n);
    cl_trace_free(&pp->trace);
    cl_schedule_free(&pp->sched);
    free(pp);
    t->pp = NULL;
    t->model = NULL;
    t->opt = NULL;
}

size_t cl_trainer_offload_file_bytes(const cl_trainer *t) {
    size_t n = 0;
    for (int c = 0; t->pp && c < t->pp->v; c++) {
        struct stat st;
        if (t->pp->ch[c].opt.fd >= 0 && fstat(t->pp->ch[c].opt.fd, &st) == 0) n += (size_t)st.st_size;
    }
    return n;
}

void cl_pp_init(cl_trainer *t, uint64_t seed) {
    for (int c = 0; c < t->pp->v; c++) {
        cl_model *m = t->pp->ch[c].m;
        cl_status s = cl_model_z3_whole(m, 0); /* ZeRO 3: drawn whole, the shard kept */
        CL_ASSERT(s == CL_OK);
        cl_model_init(m, seed);
        cl_model_z3_end_whole(m, 1);
    }
}

void cl_trainer_print_stages(const cl_trainer *t, FILE *f) {
    const struct cl_pp *pp = t->pp;
    if (!pp || pp->p < 2) return; /* one device: no stages to show */
    const cl_model_desc *d = t->desc;
    char layout[512];
    cl_pp_partition_format(d, &pp->part, layout, sizeof layout);
    double total = 0;
    for (int u = 0; u < d->nunits; u++) total += d->units[u].flops;
    fprintf(f, "pipeline: %d ranks x %d chunk%s = %d stages, schedule %s, %d micro-batches of %d; layout %s%s\n", pp->p, pp->v,
            pp->v == 1 ? "" : "s", pp->S, cl_sched_kind_name(pp->sched.kind), pp->m, t->cfg.micro_batch, layout,
            t->cfg.pp_layout ? " (given)" : " (balanced)");
    for (int s = 0; s < pp->S; s++) {
        int u0 = pp->part.u0[s], u1 = pp->part.u1[s];
        int live = pp->shape.live[s];
        cl_pp_stage_opts o = cl_pp_shape_opts(&pp->shape, &t->cfg, s);
        cl_pp_stage_cost c = cl_pp_stage_predict(d, u0, u1, &o);
        cl_pp_slot_bytes z;
        cl_pp_slot_sizes(d, u0, u1, t->cfg.micro_batch, 0, &z);
        size_t douts = (size_t)o.ndout * z.dout;
        char pb[32], ab[32], wb[32], tb[32];
        cl_format_bytes(c.param_bytes, pb, sizeof pb);
        cl_format_bytes(c.act_bytes, ab, sizeof ab);
        cl_format_bytes(c.bytes[CL_MEM_WORKSPACE], wb, sizeof wb);
        cl_format_bytes(c.total_bytes, tb, sizeof tb);
        fprintf(f, "  stage %d (rank %d, chunk %d): %s..%s (%d unit%s) | %.1f%% of compute, %.3g GFLOP per micro-batch | "
                "memory %s = params+grads+adam %s + activations %s (%d live x %zu bytes + %d output gradient%s x %zu bytes) + "
                "workspace %s\n",
                s, s % pp->p, s / pp->p, d->units[u0].label, d->units[u1 - 1].label, u1 - u0, u1 - u0 == 1 ? "" : "s",
                total > 0 ? 100.0 * c.flops / (3.0 * total * t->cfg.micro_batch) : 0, c.flops / 1e9, tb, pb, ab, live,
                (c.act_bytes - douts) / (size_t)(live > 0 ? live : 1), o.ndout, o.ndout == 1 ? "" : "s", z.dout, wb);
    }
    fprintf(f, "  theoretical bubble (equal stage times): %.4f\n", pp->bubble_uniform);
}

/* ---- the step --------------------------------------------------------------- */

static pp_slot *get_slot(cl_trainer *t, pp_chunk *ch, int mb, int step) {
    if (ch->slot_of[mb] >= 0) return &ch->slots[ch->slot_of[mb]];
    for (int k = 0; k < ch->nslots; k++) {
        pp_slot *sl = &ch->slots[k];
        if (sl->mb >= 0) continue;
        sl->mb = mb;
        ch->slot_of[mb] = k;
        const cl_train_config *c = &t->cfg;
        int local = c->global_batch / t->dp;
        int64_t k0 = (int64_t)step * c->global_batch + (int64_t)t->dp_rank * local + (int64_t)mb * c->micro_batch;
        cl_trainer_fill_batch(t, k0, c->micro_batch, sl->tokens, sl->targets, sl->x, &sl->mbd);
        sl->mbd.dloss = (float)(1.0 / ((double)c->global_batch * (t->desc->cfg.kind == CL_MODEL_GPT ? t->desc->T : 1)));
        return sl;
    }
    return NULL; /* cannot happen: the pool is the schedule's peak */
}

static cl_status release_slot(struct cl_pp *pp, pp_chunk *ch, int mb) {
    pp_slot *sl = &ch->slots[ch->slot_of[mb]];
    cl_status s = CL_OK;
    if (sl->send_req) s = cl_comm_wait(pp->comm, sl->send_req); /* already done: the receiver has sent its gradient */
    sl->send_req = NULL;
    sl->mb = -1;
    ch->slot_of[mb] = -1;
    return s;
}

/* A free input-gradient buffer of chunk ch for micro-batch mb at action
 * index i: first every buffer whose send the schedule says is complete by
 * now is given back (its wait returns at once), then one is taken. The pool
 * is the schedule's peak, so one is always free. */
static cl_status gradbuf_get(struct cl_pp *pp, pp_chunk *ch, int c, int mb, int i, float **out) {
    int k = -1;
    for (int j = 0; j < ch->ngb; j++) {
        if (ch->gb_mb[j] >= 0 && ch->gb_req[j] && pp->gb_free_at[c * pp->m + ch->gb_mb[j]] <= i) {
            cl_status s = cl_comm_wait(pp->comm, ch->gb_req[j]);
            ch->gb_req[j] = NULL;
            ch->gb_mb[j] = -1;
            CL_TRY(s);
        }
        if (ch->gb_mb[j] < 0 && k < 0) k = j;
    }
    if (k < 0) return cl_error(CL_ERR_INTERNAL, "no free gradient buffer of %d for micro-batch %d", ch->ngb, mb);
    ch->gb_mb[k] = mb;
    *out = ch->gb[k];
    return CL_OK;
}

/* The first of n pool buffers whose owner (the micro-batch it holds, -1
 * when free) is mb, or -1: the input-gradient and output-gradient pools. */
static int pool_find(const int *owner, int n, int mb) {
    for (int j = 0; j < n; j++)
        if (owner[j] == mb) return j;
    return -1;
}

/* The output-gradient receive buffer of micro-batch mb in chunk ch: the one
 * holding it, else (take) a free one, which it then holds until
 * dout_release; NULL when there is none (cannot happen: the pool is the
 * schedule's peak). */
static float *dout_buf(pp_chunk *ch, int mb, int take) {
    int k = pool_find(ch->dob_mb, ch->ndout, mb);
    if (k < 0 && take && (k = pool_find(ch->dob_mb, ch->ndout, -1)) >= 0) ch->dob_mb[k] = mb;
    return k < 0 ? NULL : ch->dob[k];
}

static void dout_release(pp_chunk *ch, int mb) {
    int k = pool_find(ch->dob_mb, ch->ndout, mb);
    if (k >= 0) ch->dob_mb[k] = -1;
}

static cl_status record(struct cl_pp *pp, int trace, int step, const cl_action *a, double t0, double t1) {
    int ci = -1;
    int stage = a->chunk * pp->p + pp->r;
    switch (a->kind) {
    case CL_ACT_FWD: ci = 0; break;
    case CL_ACT_BWD: case CL_ACT_BWD_INPUT: ci = 1; break;
    case CL_ACT_BWD_WEIGHT: ci = 2; break;
    default: break;
    }
    if (ci >= 0) {
        pp->cost_sum[ci * pp->S + stage] += t1 - t0;
        pp->cost_n[ci * pp->S + stage]++;
    }
    if (!trace) return CL_OK;
    cl_trace_event e = {.rank = pp->world_rank,
                        .track = cl_trace_is_compute(a->kind) || a->kind == CL_ACT_OPT_STEP ? CL_TRACK_COMPUTE : CL_TRACK_COMM,
                        .step = step, .kind = a->kind, .mb = a->mb, .chunk = a->chunk, .t0 = t0, .t1 = t1};
    return cl_trace_add(&pp->trace, &e);
}

/* The tied wte: stage 0 (embedding) and stage S-1 (head) end with
 * embedding sum + head sum, the same bits on both. */
static cl_status tie_grads(cl_trainer *t, struct cl_pp *pp) {
    const cl_model_desc *d = t->desc;
    int w = d->tied_wte;
    if (w < 0) return CL_OK;
    size_t n = (size_t)d->params[w].numel;
    int re = 0, rh = rank_of_stage(pp, pp->S - 1);
    cl_model *me = pp->r == re ? pp->ch[0].m : NULL;
    cl_model *mh = pp->r == rh ? pp->ch[pp->v - 1].m : NULL;
    if (re == rh) { /* one rank: one part holds both; with dp > 1 its bucket hook has tied them already */
        if (t->dp == 1) cl_model_tie_grads(me);
        return CL_OK;
    }
    cl_request *req = NULL;
    if (me) {
        CL_TRY(cl_comm_isend(pp->comm, me->g[w], n * sizeof(float), rh, TIE_TAG, &req));
        cl_status s = cl_comm_recv(pp->comm, pp->tie_buf, n * sizeof(float), rh, TIE_TAG);
        cl_status s2 = cl_comm_wait(pp->comm, req);
        CL_TRY(s);
        CL_TRY(s2);
        cl_add_inplace(me->g[w], pp->tie_buf, (int64_t)n);
    } else if (mh) {
        CL_TRY(cl_comm_isend(pp->comm, mh->head_wte_g, n * sizeof(float), re, TIE_TAG, &req));
        cl_status s = cl_comm_recv(pp->comm, mh->g[w], n * sizeof(float), re, TIE_TAG);
        cl_status s2 = cl_comm_wait(pp->comm, req);
        CL_TRY(s);
        CL_TRY(s2);
        cl_add_inplace(mh->g[w], mh->head_wte_g, (int64_t)n);
    }
    return CL_OK;
}

static cl_status record(struct cl_pp *pp, int trace, int step, const cl_action *a, double t0, double t1);

/* Sequence parallelism: the layernorms' gradients are partial sums over
 * each rank's token rows; one all-reduce over the tp group sums them all,
 * packed into the part's backward workspace (idle at GRAD_SYNC), or one per
 * parameter when they do not fit there. */
static cl_status sum_partial_grads(cl_trainer *t, cl_model *m) {
    const cl_model_desc *d = t->desc;
    cl_comm *tp = t->cfg.groups->tp;
    int64_t n = 0;
    for (int i = 0; i < d->nparams; i++)
        if (d->params[i].tp_partial && cl_model_owns_param(m, i)) n += d->params[i].numel;
    if (!n) return CL_OK;
    if (n > m->sizes.scratch) {
        for (int i = 0; i < d->nparams; i++)
            if (d->params[i].tp_partial && cl_model_owns_param(m, i))
                CL_TRY(cl_comm_allreduce(tp, m->g[i], (size_t)d->params[i].numel, CL_RED_SUM));
        return CL_OK;
    }
    float *buf = m->scratch;
    for (int i = 0, at = 0; i < d->nparams; i++)
        if (d->params[i].tp_partial && cl_model_owns_param(m, i)) {
            memcpy(buf + at, m->g[i], (size_t)d->params[i].numel * sizeof(float));
            at += (int)d->params[i].numel;
        }
    CL_TRY(cl_comm_allreduce(tp, buf, (size_t)n, CL_RED_SUM));
    for (int i = 0, at = 0; i < d->nparams; i++)
        if (d->params[i].tp_partial && cl_model_owns_param(m, i)) {
            memcpy(m->g[i], buf + at, (size_t)d->params[i].numel * sizeof(float));
            at += (int)d->params[i].numel;
        }
    return CL_OK;
}

static cl_status grad_sync(cl_trainer *t, struct cl_pp *pp) {
    for (int c = 0; c < pp->v; c++)
        for (int k = 0; k < pp->ch[c].ngb; k++) {
            pp_chunk *ch = &pp->ch[c];
            cl_status s = ch->gb_req[k] ? cl_comm_wait(pp->comm, ch->gb_req[k]) : CL_OK;
            ch->gb_req[k] = NULL;
            ch->gb_mb[k] = -1;
            CL_TRY(s);
        }
    /* the buckets left during each chunk's last backward; wait for them (cleave/dp.h) */
    for (int c = 0; c < pp->v; c++) {
        CL_TRY(cl_dp_finish(pp->ch[c].dp));
        double t1 = cl_now();
        for (int k = 0; k < cl_dp_nbuckets(pp->ch[c].dp); k++) {
            cl_action a = {CL_ACT_GRAD_SYNC, 0, c};
            CL_TRY(record(pp, t->cfg.trace, t->step + 1, &a, cl_dp_launch_time(pp->ch[c].dp, k), t1));
        }
    }
    for (int c = 0; t->tp > 1 && c < pp->v; c++) CL_TRY(sum_partial_grads(t, pp->ch[c].m));
    CL_TRY(tie_grads(t, pp));
    for (int c = 0; c < pp->v; c++) cl_dp_whole_to_shard(pp->ch[c].dp); /* ZeRO 2 */
    return CL_OK;
}

static cl_status z3_whole(struct cl_pp *pp, int gather);
static void z3_end_whole(struct cl_pp *pp, int keep);

/* --check-replicas: every replicated parameter bit for bit the same on every
 * tensor-parallel rank (hashes all-gathered), else an error naming the first
 * that differs. */
static cl_status check_replicas(cl_trainer *t, struct cl_pp *pp) {
    const cl_model_desc *d = t->desc;
    cl_comm *tp = t->cfg.groups->tp;
    uint64_t *h = calloc((size_t)d->nparams * (size_t)(t->tp + 1), sizeof *h);
    if (!h) return cl_error(CL_ERR_OOM, "cannot allocate the replica check");
    for (int c = 0; c < pp->v; c++)
        for (int i = 0; i < d->nparams; i++)
            if (d->params[i].split == CL_SPLIT_NONE && cl_model_owns_param(pp->ch[c].m, i))
                h[i] = cl_hash64(pp->ch[c].m->p[i], (size_t)d->params[i].numel * sizeof(float), 1) | 1;
    uint64_t *all = h + d->nparams;
    cl_status s = cl_comm_allgather(tp, h, all, (size_t)d->nparams * sizeof *h);
    for (int i = 0; !s && i < d->nparams; i++)
        for (int r = 1; r < t->tp; r++)
            if (all[(size_t)r * d->nparams + i] != all[i]) {
                s = cl_error(CL_ERR_NUMERIC, "--check-replicas: step %d: replicated parameter %s differs between tensor-parallel ranks 0 and %d",
                             t->step + 1, d->params[i].name, r);
                break;
            }
    free(h);
    return s;
}

/* The optimizer step of every chunk here, after the global gradient norm and
 * loss (the last stage's, all its forwards done by now) are known on every
 * rank, so that all of them stop together at a non-finite one. */
static cl_status opt_step(cl_trainer *t, struct cl_pp *pp, float lr, double loss_sum, double *norm_out) {
    const cl_model_desc *d = t->desc;
    int n = d->nparams;
    memset(pp->norm_parts, 0, (size_t)n * sizeof *pp->norm_parts);
    cl_status ns = CL_OK; /* ZeRO 2: the same figures from the shards */
    CL_PROF("grad norm", 0, for (int c = 0; c < pp->v && !ns; c++) {
        if (cl_dp_sharded(pp->ch[c].dp)) ns = cl_dp_grad_sumsq(pp->ch[c].dp, pp->norm_parts);
        else cl_grad_sumsq(pp->ch[c].m, pp->norm_parts);
    });
    CL_TRY(ns);
    /* a replicated parameter counts once (tensor-parallel rank 0's), a split one over its slices; the
     * loss is the same on every tensor-parallel rank */
    for (int i = 0; t->tp_rank > 0 && i < n; i++)
        if (d->params[i].split == CL_SPLIT_NONE) pp->norm_parts[i] = 0;
    pp->norm_parts[n] = t->tp_rank == 0 ? loss_sum : 0; /* 0 but on the last stage */
    if (t->tp > 1) CL_TRY(cl_comm_allreduce_f64(t->cfg.groups->mp, pp->norm_parts, (size_t)n + 1, CL_RED_SUM));
    else if (pp->p > 1) CL_TRY(cl_comm_allreduce_f64(pp->comm, pp->norm_parts, (size_t)n + 1, CL_RED_SUM));
    if (t->dp > 1) CL_TRY(cl_comm_allreduce_f64(t->cfg.groups->dp, &pp->norm_parts[n], 1, CL_RED_SUM));
    double norm = cl_grad_norm_of(pp->norm_parts, n);
    *norm_out = norm;
    CL_TRY(cl_step_check_finite(t->step + 1, pp->norm_parts[n], norm));
    float coef = cl_grad_clip_coef(norm, t->cfg.adamw.grad_clip);
    /* clipping rides in AdamW's pass (same bits as scaling the gradients first) */
    cl_status os = CL_OK;
    CL_PROF("adamw (with clip)", 0,
            for (int c = 0; c < pp->v && !os; c++) os = cl_optimizer_step_checked(&pp->ch[c].opt, pp->ch[c].m, lr, coef));
    CL_TRY(os);
    /* ZeRO: each replica updated its shard; every replica gets every shard */
    for (int c = 0; c < pp->v; c++) {
        cl_model *m = pp->ch[c].m;
        if (m->zero.stage == 1 || m->zero.stage == 2) /* ZeRO 3 keeps the shard only */
            CL_TRY(cl_comm_allgather(t->cfg.groups->dp, m->params + m->sizes.shard_lo, m->params,
                                     (size_t)m->sizes.shard * sizeof(float)));
    }
    if (!t->cfg.check_replicas || t->tp < 2) return CL_OK;
    cl_status s = z3_whole(pp, 1); /* ZeRO 3: the parameters whole to hash them */
    if (!s) s = check_replicas(t, pp);
    z3_end_whole(pp, 0);
    return s;
}

static cl_status run_action(cl_trainer *t, struct cl_pp *pp, const cl_action *a, int i, float lr, double *loss_sum,
                            double *norm) {
    pp_chunk *ch = &pp->ch[a->chunk];
    int s = ch->stage, prev = rank_of_stage(pp, (s + pp->S - 1) % pp->S), next = rank_of_stage(pp, (s + 1) % pp->S);
    cl_model *m = ch->m;
    pp_slot *sl = NULL;
    if (a->kind <= CL_ACT_RECV_GRAD && a->kind != CL_ACT_SEND_GRAD) {
        sl = get_slot(t, ch, a->mb, t->step);
        if (!sl) return cl_error(CL_ERR_INTERNAL, "stage %d: no free slot for micro-batch %d", s, a->mb);
    }
    switch (a->kind) {
    case CL_ACT_FWD:
        CL_TRY(cl_model_stage_forward(m, &sl->mbd, ch->first ? sl->mbd.x : sl->in, &sl->acts));
        if (ch->last) *loss_sum += cl_acts_loss_sum(m, &sl->acts, m->u1 - 1, &sl->mbd);
        return CL_OK;
    case CL_ACT_BWD:
    case CL_ACT_BWD_INPUT: {
        float *din = NULL, *dout = ch->last ? NULL : dout_buf(ch, a->mb, 0);
        if (!ch->last && !dout) return cl_error(CL_ERR_INTERNAL, "stage %d: no output gradient received for micro-batch %d", s, a->mb);
        if (!ch->first) CL_TRY(gradbuf_get(pp, ch, a->chunk, a->mb, i, &din));
        int what = a->kind == CL_ACT_BWD ? CL_BWD_ALL : CL_BWD_INPUT;
        /* the chunk's last combined backward completes its gradients: buckets leave as units finish */
        int armed = 0; /* ZeRO 2: every combined backward reduce-scatters its buckets */
        if (what == CL_BWD_ALL) CL_TRY(cl_dp_begin_backward(ch->dp, i == ch->last_bwd, &armed));
        CL_TRY(cl_model_stage_backward(m, &sl->mbd, ch->first ? sl->mbd.x : sl->in, &sl->acts, dout, din, what,
                                       what == CL_BWD_INPUT ? sl->udout : NULL, armed ? cl_dp_unit_done : NULL,
                                       armed ? ch->dp : NULL));
        dout_release(ch, a->mb); /* read: W (zb-h1) reads the slot's copy */
        return a->kind == CL_ACT_BWD ? release_slot(pp, ch, a->mb) : CL_OK;
    }
    case CL_ACT_BWD_WEIGHT: {
        /* ZeRO 2: every weight pass fills and reduce-scatters the buckets (the loss units' gradients, from
         * the input pass, are kept whole); else all of the chunk's buckets leave after its last weight pass */
        int armed = 0;
        if (cl_dp_sharded(ch->dp)) CL_TRY(cl_dp_begin_backward(ch->dp, i == ch->last_bwd, &armed));
        CL_TRY(cl_model_stage_backward_weight(m, &sl->mbd, ch->first ? sl->mbd.x : sl->in, &sl->acts, sl->udout,
                                              armed ? cl_dp_unit_done : NULL, armed ? ch->dp : NULL));
        if (i == ch->last_bwd && !armed) {
            cl_dp_begin(ch->dp);
            CL_TRY(cl_dp_launch_rest(ch->dp));
        }
        return release_slot(pp, ch, a->mb);
    }
    case CL_ACT_SEND_ACT:
        return cl_comm_isend(pp->comm, cl_acts_output_mb(m, &sl->acts, m->u1 - 1, &sl->mbd), ch->out_bytes, next,
                             msg_tag(pp, a->mb, s + 1, 0), &sl->send_req);
    case CL_ACT_RECV_ACT:
        return cl_comm_recv(pp->comm, sl->in, ch->in_bytes, prev, msg_tag(pp, a->mb, s, 0));
    case CL_ACT_RECV_GRAD: {
        float *dout = dout_buf(ch, a->mb, 1);
        if (!dout) return cl_error(CL_ERR_INTERNAL, "stage %d: no free output gradient buffer of %d for micro-batch %d", s, ch->ndout, a->mb);
        return cl_comm_recv(pp->comm, dout, ch->out_bytes, next, msg_tag(pp, a->mb, s + 1, 1));
    }
    case CL_ACT_SEND_GRAD: {
        int k = pool_find(ch->gb_mb, ch->ngb, a->mb);
        if (k < 0 || ch->gb_req[k]) return cl_error(CL_ERR_INTERNAL, "stage %d: no input gradient to send for micro-batch %d", s, a->mb);
        return cl_comm_isend(pp->comm, ch->gb[k], ch->in_bytes, prev, msg_tag(pp, a->mb, s, 1), &ch->gb_req[k]);
    }
    case CL_ACT_GRAD_SYNC:
        return grad_sync(t, pp);
    case CL_ACT_OPT_STEP:
        return opt_step(t, pp, lr, *loss_sum, norm);
    }
    return cl_error(CL_ERR_INTERNAL, "unknown pipeline action %d", (int)a->kind);
}

/* Measured bubble and the simulator's figure on this step's measured
 * per-stage times. */
static cl_status bubble_figures(struct cl_pp *pp, double busy, double span, cl_step_stats *st) {
    int p = pp->p, S = pp->S;
    double *v = calloc((size_t)(2 * p + 6 * S), sizeof *v);
    if (!v) return cl_error(CL_ERR_OOM, "cannot allocate bubble figures");
    v[pp->r] = busy;
    v[p + pp->r] = span;
    for (int i = 0; i < 3 * S; i++) {
        v[2 * p + i] = pp->cost_sum[i];
        v[2 * p + 3 * S + i] = pp->cost_n[i];
    }
    cl_status s = cl_comm_allreduce_f64(pp->comm, v, (size_t)(2 * p + 6 * S), CL_RED_SUM);
    if (!s) {
        double makespan = 0, sum = 0, worst = 0;
        for (int r = 0; r < p; r++)
            if (v[p + r] > makespan) makespan = v[p + r];
        for (int r = 0; r < p; r++) {
            double b = makespan > 0 ? 1.0 - v[r] / makespan : 0;
            sum += b;
            if (b > worst) worst = b;
        }
        st->bubble = sum / p;
        st->bubble_max = worst;
        st->bubble_rank = makespan > 0 ? 1.0 - v[pp->r] / makespan : 0;
        double *cf = v + 2 * p, *cn = v + 2 * p + 3 * S;
        double *f = malloc((size_t)S * 3 * sizeof *f);
        if (!f) s = cl_error(CL_ERR_OOM, "cannot allocate simulator costs");
        if (!s) {
            for (int i = 0; i < 3 * S; i++) f[i] = cn[i] > 0 ? cf[i] / cn[i] : 0;
            cl_sched_costs costs = {0, 0, 0, f, f + S, f + 2 * S};
            cl_sim_result res;
            if (cl_schedule_simulate(&pp->sched, &costs, &res) == CL_OK) {
                st->bubble_sim = res.bubble_total;
                cl_sim_result_free(&res);
            } else {
                cl_error_clear();
            }
            free(f);
        }
    }
    free(v);
    return s;
}

cl_status cl_pp_step(cl_trainer *t, float lr, double *loss_sum, double *norm, cl_step_stats *st) {
    struct cl_pp *pp = t->pp;
    memset(pp->cost_sum, 0, (size_t)pp->S * 3 * sizeof *pp->cost_sum);
    memset(pp->cost_n, 0, (size_t)pp->S * 3 * sizeof *pp->cost_n);
    for (int c = 0; c < pp->v; c++) {
        CL_PROF("zero grads", 0, cl_model_zero_grads(pp->ch[c].m));
        for (int k = 0; k < pp->m; k++) pp->ch[c].slot_of[k] = -1;
        for (int k = 0; k < pp->ch[c].ndout; k++) pp->ch[c].dob_mb[k] = -1;
    }
    *loss_sum = 0;
    /* a common start, so idle time is measured from the same moment */
    if (pp->p > 1) CL_TRY(cl_comm_barrier(pp->comm));
    double t0 = cl_now(), busy = 0, last_end = t0;
    int trace = t->cfg.trace;
    for (int i = 0; i < pp->sched.len[pp->r]; i++) {
        const cl_action *a = &pp->sched.acts[pp->r][i];
        double a0 = cl_now();
        cl_status s = run_action(t, pp, a, i, lr, loss_sum, norm);
        if (s == CL_ERR_NUMERIC) return s; /* every rank says the same */
        if (s) {
            return cl_error_context(s, "pipeline rank %d, stage %d, step %d, %s of micro-batch %d", pp->r,
                                    a->chunk * pp->p + pp->r, t->step + 1, cl_act_kind_name(a->kind), a->mb);
        }
        double a1 = cl_now();
        if (a->kind <= CL_ACT_BWD) {
            busy += a1 - a0;
            last_end = a1;
        }
        CL_TRY(record(pp, trace, t->step + 1, a, a0, a1));
    }
    *loss_sum = pp->norm_parts[t->desc->nparams]; /* OPT_STEP's: summed over the pipeline, then the replicas */
    return pp->p > 1 ? bubble_figures(pp, busy, last_end - t0, st) : CL_OK; /* one device: no bubble */
}

/* ---- evaluation: forward only, stage after stage ---------------------------- */

cl_status cl_pp_eval_batch(void *ctx, const cl_microbatch *mb, double *sum) {
    cl_trainer *t = ctx;
    struct cl_pp *pp = t->pp;
    for (int s = 0; s < pp->S; s++) {
        if (rank_of_stage(pp, s) != pp->r) continue;
        pp_chunk *ch = &pp->ch[s / pp->p];
        pp_slot *sl = &ch->slots[0];
        size_t in_bytes = ch->in_bytes / (size_t)t->cfg.micro_batch * (size_t)mb->B;
        size_t out_bytes = ch->out_bytes / (size_t)t->cfg.micro_batch * (size_t)mb->B;
        if (!ch->first) CL_TRY(cl_comm_recv(pp->comm, sl->in, in_bytes, rank_of_stage(pp, s - 1), msg_tag(pp, 0, s, 0)));
        CL_TRY(cl_model_stage_forward(ch->m, mb, ch->first ? mb->x : sl->in, &sl->acts));
        if (ch->last && t->tp_rank == 0) *sum += cl_acts_loss_sum(ch->m, &sl->acts, ch->m->u1 - 1, mb);
        else if (!ch->last)
            CL_TRY(cl_comm_send(pp->comm, cl_acts_output_mb(ch->m, &sl->acts, ch->m->u1 - 1, mb), out_bytes,
                                rank_of_stage(pp, s + 1), msg_tag(pp, 0, s + 1, 0)));
    }
    return CL_OK;
}

/* Logits of the last position through the pipeline: forward of one window,
 * the last stage's rank broadcasts them to every rank. Tensor-parallel ranks
 * each hold a slice of the vocabulary and gather the row; under sequence
 * parallelism the window is padded at its end to a multiple of tp (causal
 * attention: later positions do not change position T-1). */
static cl_status pp_logits(void *ctx, const int32_t *tokens, int T, float *logits) {
    cl_trainer *t = ctx;
    struct cl_pp *pp = t->pp;
    const cl_model_desc *d = t->desc;
    pp_slot *sl = &pp->ch[0].slots[0];
    int Tp = d->tpl.sp ? (T + t->tp - 1) / t->tp * t->tp : T;
    memcpy(sl->tokens, tokens, (size_t)T * sizeof(int32_t));
    memset(sl->tokens + T, 0, (size_t)(Tp - T) * sizeof(int32_t));
    memset(sl->targets, 0, (size_t)Tp * sizeof(int32_t));
    cl_microbatch mb = {.B = 1, .T = Tp, .tokens = sl->tokens, .targets = sl->targets};
    double unused = 0;
    CL_TRY(cl_pp_eval_batch(t, &mb, &unused));
    int V = d->cfg.vocab, Vl = d->vocab_local, last = rank_of_stage(pp, pp->S - 1);
    cl_status s = CL_OK;
    if (pp->r == last) {
        pp_chunk *ch = &pp->ch[pp->v - 1];
        const float *lg = cl_acts_logits(ch->m, &ch->slots[0].acts, ch->m->u1 - 1, &mb) + (size_t)(T - 1) * Vl;
        if (t->tp == 1 && Vl == V) {
            memcpy(logits, lg, (size_t)V * sizeof(float));
        } else {
            float *row = malloc((size_t)d->vocab_padded * sizeof *row);
            if (!row) return cl_error(CL_ERR_OOM, "cannot allocate a row of logits");
            s = t->tp > 1 ? cl_comm_allgather(t->cfg.groups->tp, lg, row, (size_t)Vl * sizeof(float))
                          : (memcpy(row, lg, (size_t)Vl * sizeof(float)), CL_OK);
            if (!s) memcpy(logits, row, (size_t)V * sizeof(float));
            free(row);
        }
    }
    CL_TRY(s);
    return pp->p > 1 ? cl_comm_broadcast(pp->comm, logits, (size_t)V * sizeof(float), last) : CL_OK;
}

cl_status cl_trainer_generate(cl_trainer *t, const int32_t *prompt, int nprompt, int n, float temperature, int top_k,
                              uint64_t seed, int32_t *out) {
    const cl_model_desc *d = t->desc;
    if (d->cfg.kind != CL_MODEL_GPT) return cl_error(CL_ERR_INVALID, "generation needs a GPT model");
    return cl_generate_with(pp_logits, t, d->cfg.vocab, d->T, prompt, nprompt, n, temperature, top_k, seed, out);
}

/* ---- the timeline ------------------------------------------------------------ */

#define TRACE_TAG 32001

cl_status cl_trainer_write_trace(cl_trainer *t, cl_comm *world, const char *path, int last_steps) {
    struct cl_pp *pp = t->pp;
    if (pp->p < 2) return cl_error(CL_ERR_INVALID, "--trace needs a pipeline (--pp > 1)");
    if (last_steps > 0) { /* keep the last steps only */
        size_t w = 0;
        for (size_t i = 0; i < pp->trace.n; i++)
            if (pp->trace.ev[i].step > t->step - last_steps) pp->trace.ev[w++] = pp->trace.ev[i];
        pp->trace.n = w;
    }
    int n = world ? cl_comm_size(world) : 1, me = world ? cl_comm_rank(world) : 0;
    if (me != 0) {
        int64_t cnt = (int64_t)pp->trace.n;
        CL_TRY(cl_comm_send(world, &cnt, sizeof cnt, 0, TRACE_TAG));
        return cl_comm_send(world, pp->trace.ev, pp->trace.n * sizeof *pp->trace.ev, 0, TRACE_TAG);
    }
    cl_trace all = {0};
    cl_status s = cl_trace_append(&all, &pp->trace);
    for (int r = 1; !s && r < n; r++) {
        int64_t cnt = 0;
        s = cl_comm_recv(world, &cnt, sizeof cnt, r, TRACE_TAG);
        if (s) break;
        cl_trace part = {0};
        part.ev = malloc((size_t)(cnt ? cnt : 1) * sizeof *part.ev);
        if (!part.ev) {
            s = cl_error(CL_ERR_OOM, "cannot allocate rank %d's trace", r);
            break;
        }
        part.n = part.cap = (size_t)cnt;
        s = cl_comm_recv(world, part.ev, (size_t)cnt * sizeof *part.ev, r, TRACE_TAG);
        if (!s) s = cl_trace_append(&all, &part);
        cl_trace_free(&part);
    }
    if (!s) s = cl_trace_write_chrome(path, &all);
    cl_trace_free(&all);
    return s;
}

/* ---- checkpoints ------------------------------------------------------------- */

#define CKPT_TAG 32002

/* The chunk of this rank that owns parameter i, or NULL; *rank its owner. */
static pp_chunk *owner_of(struct cl_pp *pp, const cl_model_desc *d, int i, int *rank) {
    int u = d->params[i].unit;
    for (int st = 0; st < pp->S; st++)
        if (u >= pp->part.u0[st] && u < pp->part.u1[st]) {
            *rank = rank_of_stage(pp, st);
            return *rank == pp->r ? &pp->ch[st / pp->p] : NULL;
        }
    *rank = -1;
    return NULL;
}

/* Copies between a tensor-parallel rank's slice (spec ls, of rank q) and
 * the whole tensor: into the whole (to_whole) or out of it. */
static void slice_copy(const cl_param_spec *ls, int q, float *slice, float *whole, int to_whole) {
    int64_t n = cl_param_row_len(ls), rows = n ? ls->full_numel / n : 0;
    for (int64_t k = 0; k < rows; k++) {
        cl_param_run runs[3];
        int nr = cl_param_row_runs(ls, q, k, runs);
        for (int j = 0; j < nr; j++) {
            float *w = whole + k * n + runs[j].col, *sl = slice + runs[j].local;
            size_t bytes = (size_t)runs[j].len * sizeof(float);
            if (to_whole) memcpy(w, sl, bytes);
            else memcpy(sl, w, bytes);
        }
    }
}

static void unslice(const cl_param_spec *ls, int q, const float *slice, float *whole) {
    slice_copy(ls, q, (float *)slice, whole, 1);
}

/* Parameter i's value and both moments, whole, on tensor-parallel rank 0 of
 * its owner: the other ranks send their slices (replicated ones are rank
 * 0's already). dst[k] has room for the whole tensor. */
static cl_status tp_assemble(cl_trainer *t, const cl_model_desc *d, int i, const float *const src[3], float *const dst[3]) {
    const cl_param_spec *ls = &d->params[i];
    size_t bytes = (size_t)ls->numel * sizeof(float);
    cl_comm *tp = t->tp > 1 ? t->cfg.groups->tp : NULL;
    if (t->tp_rank > 0) {
        for (int k = 0; k < 3 && ls->split != CL_SPLIT_NONE; k++) CL_TRY(cl_comm_send(tp, src[k], bytes, 0, CKPT_TAG));
        return CL_OK;
    }
    for (int k = 0; k < 3; k++) unslice(ls, 0, src[k], dst[k]);
    if (ls->split == CL_SPLIT_NONE || !tp) return CL_OK;
    float *buf = malloc(bytes ? bytes : 1);
    if (!buf) return cl_error(CL_ERR_OOM, "cannot allocate a slice of %s", ls->name);
    cl_status s = CL_OK;
    for (int q = 1; !s && q < t->tp; q++)
        for (int k = 0; !s && k < 3; k++) {
            s = cl_comm_recv(tp, buf, bytes, q, CKPT_TAG);
            if (!s) unslice(ls, q, buf, dst[k]);
        }
    free(buf);
    return s;
}

static cl_status pp_gather(cl_trainer *t, float **host, int *writer, int *opt_t) {
    struct cl_pp *pp = t->pp;
    const cl_model_desc *d = t->desc, *f = t->full;
    *host = NULL;
    *writer = 0;
    *opt_t = pp->ch[0].opt.t;
    /* The moments whole in host memory where they are not in memory whole: in shards over the replicas
     * (ZeRO: every replica sends its shard) or in a file (offload to disk): [m | v], alloc floats each */
    float *mom[CL_PP_MAX_CHUNKS] = {0};
    cl_status s = CL_OK;
    int sharded = t->cfg.zero >= 1 && t->dp > 1;
    for (int c = 0; c < pp->v && !s && (sharded || t->cfg.offload_optimizer == 2); c++) {
        const cl_model *m = pp->ch[c].m;
        const cl_optimizer *o = &pp->ch[c].opt;
        size_t n = (size_t)m->sizes.alloc, sh = (size_t)m->sizes.moments;
        mom[c] = malloc(2 * n * sizeof(float));
        float *own = o->fd >= 0 ? malloc(2 * sh * sizeof(float)) : NULL;
        if (!mom[c] || (o->fd >= 0 && !own)) s = cl_error(CL_ERR_OOM, "cannot allocate the optimizer state's gather buffer");
        const float *om = o->m, *ov = o->v;
        if (!s && own) {
            s = cl_optimizer_get_moments(o, own, own + sh);
            om = own, ov = own + sh;
        }
        if (!s && sharded) s = cl_comm_allgather(t->cfg.groups->dp, om, mom[c], sh * sizeof(float));
        if (!s && sharded) s = cl_comm_allgather(t->cfg.groups->dp, ov, mom[c] + n, sh * sizeof(float));
        if (!s && !sharded) {
            memcpy(mom[c], om, n * sizeof(float));
            memcpy(mom[c] + n, ov, n * sizeof(float));
        }
        free(own);
    }
    if (s || t->dp_rank != 0) { /* replicas hold the same values */
        for (int c = 0; c < pp->v; c++) free(mom[c]);
        return s;
    }
    int lead = pp->r == 0 && t->tp_rank == 0;
    float *h = NULL, *tmp = NULL;
    if (lead) {
        h = malloc((size_t)f->nfloats * 3 * sizeof *h);
        if (!h) s = cl_error(CL_ERR_OOM, "cannot allocate the checkpoint's gather buffer");
    }
    for (int i = 0; i < d->nparams && !s; i++) {
        int owner;
        pp_chunk *ch = owner_of(pp, d, i, &owner);
        size_t n = (size_t)f->params[i].numel, bytes = n * sizeof(float);
        if (ch) {
            const float *src[3] = {ch->m->p[i], ch->opt.m + ch->m->loc[i], ch->opt.v + ch->m->loc[i]};
            float *whole = mom[ch - pp->ch];
            if (whole) {
                src[1] = whole + ch->m->loc[i];
                src[2] = whole + ch->m->sizes.alloc + ch->m->loc[i];
            }
            float *dst[3];
            if (!lead && t->tp_rank == 0) {
                free(tmp);
                tmp = malloc(3 * (bytes ? bytes : 1));
                if (!tmp) {
                    s = cl_error(CL_ERR_OOM, "cannot allocate %s for the checkpoint", f->params[i].name);
                    break;
                }
            }
            for (int k = 0; k < 3; k++) dst[k] = lead ? h + k * f->nfloats + f->params[i].offset : tmp ? tmp + k * n : NULL;
            s = tp_assemble(t, d, i, src, dst);
            for (int k = 0; k < 3 && !s && !lead && t->tp_rank == 0; k++) s = cl_comm_send(pp->comm, dst[k], bytes, 0, CKPT_TAG);
        } else if (lead) {
            for (int k = 0; k < 3 && !s; k++)
                s = cl_comm_recv(pp->comm, h + k * f->nfloats + f->params[i].offset, bytes, owner, CKPT_TAG);
        }
    }
    free(tmp);
    for (int c = 0; c < pp->v; c++) free(mom[c]);
    if (s) {
        free(h);
        return s;
    }
    *host = h;
    *writer = lead;
    return CL_OK;
}

int cl_pp_chunks(cl_trainer *t, cl_model **m, cl_optimizer **o) {
    for (int c = 0; c < t->pp->v; c++) {
        m[c] = t->pp->ch[c].m;
        o[c] = &t->pp->ch[c].opt;
    }
    return t->pp->v;
}

static cl_status pp_load(cl_trainer *t, const float *p, const float *m, const float *v, int opt_t) {
    struct cl_pp *pp = t->pp;
    const cl_model_desc *d = t->desc, *f = t->full;
    for (int c = 0; c < pp->v; c++) {
        pp_chunk *ch = &pp->ch[c];
        /* sharded (ZeRO) or in a file (disk): the part's moments whole first, then what this replica keeps */
        int whole_first = ch->m->zero.stage >= 1 || ch->opt.fd >= 0;
        float *zbuf = whole_first ? calloc(2 * (size_t)ch->m->sizes.alloc, sizeof(float)) : NULL;
        if (whole_first && !zbuf) return cl_error(CL_ERR_OOM, "cannot allocate the optimizer state's load buffer");
        for (int i = 0; i < d->nparams; i++) {
            if (!cl_model_holds_param(ch->m, i)) continue; /* the head's wte copy too: it equals the embedding's */
            const cl_param_spec *ls = &d->params[i];
            int64_t off = f->params[i].offset;
            const float *src[3] = {p + off, m + off, v + off};
            float *dst[3] = {ch->m->p[i], ch->opt.m + ch->m->loc[i], ch->opt.v + ch->m->loc[i]};
            for (int k = 0; k < 3; k++) {
                if (k && whole_first) {
                    float *whole = zbuf ? zbuf + (k - 1) * ch->m->sizes.alloc : NULL;
                    if (whole) slice_copy(ls, t->tp_rank, whole + ch->m->loc[i], (float *)src[k], 0);
                    continue;
                }
                slice_copy(ls, t->tp_rank, dst[k], (float *)src[k], 0); /* padded rows stay zero */
            }
        }
        if (zbuf) {
            const cl_part_sizes *z = &ch->m->sizes;
            cl_status s = cl_optimizer_set_moments(&ch->opt, zbuf + z->shard_lo, zbuf + z->alloc + z->shard_lo);
            free(zbuf);
            CL_TRY(s);
        }
        ch->opt.t = opt_t;
    }
    return CL_OK;
}

/* ZeRO 3: the parameters whole in host memory around a checkpoint's gather
 * (all-gathered from the shards) or a load (each replica keeps its shard). */
static cl_status z3_whole(struct cl_pp *pp, int gather) {
    cl_status s = CL_OK;
    for (int c = 0; c < pp->v && !s; c++) s = cl_model_z3_whole(pp->ch[c].m, gather);
    return s;
}

static void z3_end_whole(struct cl_pp *pp, int keep) {
    for (int c = 0; c < pp->v; c++) cl_model_z3_end_whole(pp->ch[c].m, keep);
}

cl_status cl_pp_gather(cl_trainer *t, float **host, int *writer, int *opt_t) {
    cl_status s = z3_whole(t->pp, 1);
    if (!s) s = pp_gather(t, host, writer, opt_t);
    z3_end_whole(t->pp, 0);
    return s;
}

cl_status cl_pp_load(cl_trainer *t, const float *p, const float *m, const float *v, int opt_t) {
    cl_status s = z3_whole(t->pp, 0);
    if (!s) s = pp_load(t, p, m, v, opt_t);
    z3_end_whole(t->pp, !s);
    return s;
}

double cl_pp_z3_wait(cl_trainer *t) {
    double w = 0;
    for (int c = 0; c < t->pp->v; c++) w += cl_model_z3_take_wait(t->pp->ch[c].m);
    return w;
}
