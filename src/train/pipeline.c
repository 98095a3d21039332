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
 * exchange exactly (x + 0 = x); AdamW is elementwise.
 *
 * Expert parallelism: the ep group of a rank is dp ranks of its stage
 * (groups->ep, split from groups->dp), and they all walk this same action
 * list, so the MoE blocks' blocking all-to-alls (F, BWD or B, and zb-h1's W,
 * which repeats B's row exchanges) pair up in order; an expert's gradient
 * sums the same micro-batch's rows from every replica in micro-batch order,
 * so the pipeline still equals one stage bit for bit.
 *
 * This file is the executor only: chunks and slots, the action interpreter,
 * cl_pp_step. Its other jobs live beside it and share its state through
 * train/pp.h: GRAD_SYNC's sums (grads.c), OPT_STEP (optim_step.c), the
 * stage table, timeline and bubble (measure.c), evaluation and generation
 * (eval.c), checkpoint gather and load (ckpt_gather.c), ZeRO 3's whole
 * parameters over the chunks (zero3_whole.c). */
#include "cleave/comm.h"
#include "cleave/pipeline.h"
#include "cleave/prof.h"
#include "cleave/schedule.h"
#include "cleave/train.h"

#include <stdlib.h>
#include <string.h>

#include "cleave/dp.h"
#include "train/pp.h"

_Static_assert(2 * CL_PP_MAX_STAGES <= CL_TAG_SEQ_MAX + 1, "a pipeline channel sequence per stage and direction");

cl_status cl_pp_msg_tag(int S, int mb, int s_hi, int dir, int *tag) {
    if (S < 1 || S > CL_PP_MAX_STAGES || s_hi < 0 || s_hi >= S || (dir != 0 && dir != 1) || mb < 0)
        return cl_error(CL_ERR_INTERNAL, "pipeline message tag of stage %d of %d, direction %d, micro-batch %d", s_hi, S, dir, mb);
    int window = (CL_TAG_SEQ_MAX + 1) / (2 * S);
    return cl_comm_tag(CL_TAG_PIPE, (int64_t)(mb % window) * 2 * S + s_hi * 2 + dir, tag);
}

/* ---- setup ---------------------------------------------------------------- */

static cl_status slot_create(cl_trainer *t, pp_chunk *c, pp_slot *sl, int zb) {
    cl_model *m = c->m;
    cl_device *dev = t->dev;
    int B = t->cfg.micro_batch;
    const cl_model_desc *d = t->desc;
    sl->mb = -1;
    cl_pp_slot_bytes z;
    int u0, u1;
    cl_model_units(m, &u0, &u1);
    cl_pp_slot_sizes(d, u0, u1, B, zb, &z);
    CL_TRY(cl_acts_create(m, B, &sl->acts));
    if (z.in) CL_TRY(cl_device_alloc(dev, CL_MEM_ACTS, z.in, (void **)&sl->in));
    CL_TRY(cl_device_alloc(dev, CL_MEM_WORKSPACE, z.ids, (void **)&sl->tokens));
    CL_TRY(cl_device_alloc(dev, CL_MEM_WORKSPACE, z.ids, (void **)&sl->targets));
    if (z.x) CL_TRY(cl_device_alloc(dev, CL_MEM_WORKSPACE, z.x, (void **)&sl->x));
    if (zb) {
        int n = u1 - u0;
        sl->udout = calloc((size_t)n, sizeof *sl->udout);
        if (!sl->udout) return cl_error(CL_ERR_OOM, "cannot allocate the weight-pass table");
        for (int u = u0; u < u1; u++)
            CL_TRY(cl_device_alloc_f32(dev, CL_MEM_ACTS, (size_t)cl_pp_udout_floats(d, u, B), &sl->udout[u - u0]));
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
        int u0 = 0, u1 = 0;
        if (c->m) cl_model_units(c->m, &u0, &u1);
        for (int u = 0; u < u1 - u0; u++) cl_device_free(dev, sl->udout[u]);
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
    }
    pp->world_rank = cfg->groups ? cl_comm_world_rank(cfg->groups->pp) : 0; /* the trace's rank */
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
        /* ZeRO's shards over its group (cl_zero_comm: with expert parallelism the expert-data group), this rank's place in it */
        cl_zero zero = {cfg->zero, cl_zero_ranks(cfg, t->gdp), t->gdp > 1 ? cl_comm_rank(cl_zero_comm(cfg)) : 0, cfg->bucket_bytes, cfg->zero3_prefetch, kind == CL_SCHED_ZB_H1,
                        t->gdp > 1 ? cfg->grad_reduce : CL_F32};
        CL_TRY(cl_model_create_zero(&ch->m, d, t->dev, cfg->micro_batch, u0, u1, &zero));
        if (t->gdp > 1) CL_TRY(cl_model_set_zero3(ch->m, cl_zero_comm(cfg))); /* ZeRO 3 (over ZeRO's group): no-op below it */
        if (t->tp > 1) CL_TRY(cl_model_set_tp(ch->m, cfg->groups->tp));
        CL_TRY(cl_model_split_tied(ch->m));
        CL_TRY(cl_model_set_recompute(ch->m, (cl_recompute)cfg->recompute));
        if (cfg->offload_optimizer == CL_OFFLOAD_DISK) CL_TRY(cl_optimizer_create_disk(&ch->opt, ch->m, t->host, cfg->offload_dir, &cfg->adamw));
        else CL_TRY(cl_optimizer_create_on(&ch->opt, ch->m, t->host ? t->host : t->dev, &cfg->adamw));
        if (t->cp > 1) CL_TRY(cl_model_set_cp(ch->m, cfg->groups->cp, (cl_cp_comm)cfg->cp_comm));
        if (cfg->ep > 1) CL_TRY(cl_model_set_ep(ch->m, cfg->groups->ep));
        CL_TRY(cl_dp_create(&ch->dp, t->gdp > 1 ? cfg->groups->dpcp : NULL, ch->m, cfg->bucket_bytes));
        if (cfg->ep > 1) CL_TRY(cl_dp_set_experts(ch->dp, cfg->groups->edp, cfg->groups->ep));
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
        sl->mbd.dloss = (float)(1.0 / ((double)c->global_batch * t->full->T)); /* T: 1 without sequences */
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

/* GRAD_SYNC: every input gradient's send is complete (the activations' were
 * waited for as their slots came back). */
static cl_status wait_sends(struct cl_pp *pp) {
    for (int c = 0; c < pp->v; c++)
        for (int k = 0; k < pp->ch[c].ngb; k++) {
            pp_chunk *ch = &pp->ch[c];
            cl_status s = ch->gb_req[k] ? cl_comm_wait(pp->comm, ch->gb_req[k]) : CL_OK;
            ch->gb_req[k] = NULL;
            ch->gb_mb[k] = -1;
            CL_TRY(s);
        }
    return CL_OK;
}

/* The part's last unit: the loss unit on the last stage, the one whose output is sent on the others. */
static int last_unit(const cl_model *m) {
    int u1;
    cl_model_units(m, NULL, &u1);
    return u1 - 1;
}

static cl_status run_action(cl_trainer *t, struct cl_pp *pp, const cl_action *a, int i, float lr, double *loss_sum,
                            double *norm) {
    pp_chunk *ch = &pp->ch[a->chunk];
    int s = ch->stage, prev = rank_of_stage(pp, (s + pp->S - 1) % pp->S), next = rank_of_stage(pp, (s + 1) % pp->S);
    int tag;
    cl_model *m = ch->m;
    pp_slot *sl = NULL;
    if (cl_act_on_microbatch(a->kind) && a->kind != CL_ACT_SEND_GRAD) { /* the actions on a slot */
        sl = get_slot(t, ch, a->mb, t->step);
        if (!sl) return cl_error(CL_ERR_INTERNAL, "stage %d: no free slot for micro-batch %d", s, a->mb);
    }
    switch (a->kind) {
    case CL_ACT_FWD:
        CL_TRY(cl_model_stage_forward(m, &sl->mbd, ch->first ? sl->mbd.x : sl->in, &sl->acts));
        if (ch->last) *loss_sum += cl_acts_loss_sum(m, &sl->acts, last_unit(m), &sl->mbd);
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
        CL_TRY(msg_tag(pp, a->mb, s + 1, 0, &tag));
        return cl_comm_isend(pp->comm, cl_acts_output_mb(m, &sl->acts, last_unit(m), &sl->mbd), ch->out_bytes, next, tag,
                             &sl->send_req);
    case CL_ACT_RECV_ACT:
        CL_TRY(msg_tag(pp, a->mb, s, 0, &tag));
        return cl_comm_recv(pp->comm, sl->in, ch->in_bytes, prev, tag);
    case CL_ACT_RECV_GRAD: {
        float *dout = dout_buf(ch, a->mb, 1);
        if (!dout) return cl_error(CL_ERR_INTERNAL, "stage %d: no free output gradient buffer of %d for micro-batch %d", s, ch->ndout, a->mb);
        CL_TRY(msg_tag(pp, a->mb, s + 1, 1, &tag));
        return cl_comm_recv(pp->comm, dout, ch->out_bytes, next, tag);
    }
    case CL_ACT_SEND_GRAD: {
        int k = pool_find(ch->gb_mb, ch->ngb, a->mb);
        if (k < 0 || ch->gb_req[k]) return cl_error(CL_ERR_INTERNAL, "stage %d: no input gradient to send for micro-batch %d", s, a->mb);
        CL_TRY(msg_tag(pp, a->mb, s, 1, &tag));
        return cl_comm_isend(pp->comm, ch->gb[k], ch->in_bytes, prev, tag, &ch->gb_req[k]);
    }
    case CL_ACT_GRAD_SYNC:
        CL_TRY(wait_sends(pp));
        return cl_pp_grad_sync(t, pp);
    case CL_ACT_OPT_STEP:
        return cl_pp_opt_step(t, pp, lr, *loss_sum, norm);
    case CL_ACT_RING_SEND: /* trace-only kinds, never in a schedule */
    case CL_ACT_RING_RECV: break;
    }
    return cl_error(CL_ERR_INTERNAL, "unknown pipeline action %d", (int)a->kind);
}

cl_status cl_pp_step(cl_trainer *t, float lr, double *loss_sum, double *norm, cl_step_stats *st) {
    struct cl_pp *pp = t->pp;
    memset(pp->cost_sum, 0, (size_t)pp->S * 3 * sizeof *pp->cost_sum);
    memset(pp->cost_n, 0, (size_t)pp->S * 3 * sizeof *pp->cost_n);
    for (int c = 0; c < pp->v; c++) {
        CL_PROF("zero grads", 0, cl_model_begin_grads(pp->ch[c].m));
        for (int k = 0; k < pp->m; k++) pp->ch[c].slot_of[k] = -1;
        for (int k = 0; k < pp->ch[c].ndout; k++) pp->ch[c].dob_mb[k] = -1;
    }
    *loss_sum = 0;
    /* a common start, so idle time is measured from the same moment */
    if (pp->p > 1) CL_TRY(cl_comm_barrier(pp->comm));
    double t0 = cl_now(), busy = 0, last_end = t0;
    int trace = t->cfg.trace;
    /* the context ring's transfers into the timeline during the step's passes (not evaluation's) */
    for (int c = 0; trace && c < pp->v; c++) cl_model_cp_trace(pp->ch[c].m, &pp->trace, pp->world_rank);
    cl_status s = CL_OK;
    for (int i = 0; i < pp->sched.len[pp->r] && !s; i++) {
        const cl_action *a = &pp->sched.acts[pp->r][i];
        size_t first = pp->trace.n; /* the ring's events of this action get its step, micro-batch and chunk */
        double a0 = cl_now();
        s = run_action(t, pp, a, i, lr, loss_sum, norm);
        if (s == CL_ERR_NUMERIC) break; /* every rank says the same */
        if (s) {
            s = cl_error_context(s, "pipeline rank %d, stage %d, step %d, %s of micro-batch %d", pp->r, a->chunk * pp->p + pp->r,
                                 t->step + 1, cl_act_kind_name(a->kind), a->mb);
            break;
        }
        s = cl_device_sync(t->dev); /* the action's time covers its kernels (cl_pp_record) */
        double a1 = cl_now();
        if (cl_act_is_compute(a->kind)) {
            busy += a1 - a0;
            last_end = a1;
        }
        for (size_t k = first; k < pp->trace.n; k++) {
            pp->trace.ev[k].step = t->step + 1;
            pp->trace.ev[k].mb = a->mb;
            pp->trace.ev[k].chunk = a->chunk;
        }
        if (!s) s = cl_pp_record(pp, trace, t->step + 1, a, a0, a1);
    }
    for (int c = 0; trace && c < pp->v; c++) cl_model_cp_trace(pp->ch[c].m, NULL, 0);
    if (s) return s;
    *loss_sum = pp->norm_parts[t->desc->nparams]; /* OPT_STEP's: summed over the pipeline, then the replicas */
    return pp->p > 1 ? cl_pp_bubble_figures(pp, busy, last_end - t0, st) : CL_OK; /* one device: no bubble */
}
