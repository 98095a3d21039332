/* Step time and memory of one configuration, and the search over all of
 * them (see plan.h and docs/ARCHITECTURE.md "Planner").
 *
 * Time: every action of the schedule gets its duration from the unit costs
 * (cost.c) and the hardware (hw.c): a stage's F, B (with recompute's
 * re-forward) and W are the sums over its units of products at the
 * hardware's efficiency for their shape, other kernels at its memory
 * bandwidth, and the tensor-parallel collectives (not overlapped, as the
 * engine runs them); activations and gradients between stages fly for a
 * point-to-point message's time; GRAD_SYNC is the data-parallel reduction
 * less what hides under the rank's last backward (the engine launches its
 * buckets there), plus ZeRO's gathers; OPT_STEP streams the optimizer's
 * bytes. The schedule simulator orders the actions; its makespan is the
 * step time.
 *
 * Memory: in fp32, on any description, cl_memory_predict's bytes (what
 * cleave memory prints for the same run: on this machine, exact_memory, to
 * the byte); at bf16 on a GPU description the same statement
 * (cl_pp_stage_predict's categories over the same description) at mixed
 * precision: parameters and gradients 2 bytes, optimizer 12 bytes per float
 * (fp32 master, two moments) where cleave keeps 8, activations and
 * workspace 2 bytes, and ZeRO stages 2 and 3 sharding the gradients and
 * parameters. */
#include "plan/plan.h"
#include "nn/kind.h"

#include "cleave/memory.h"
#include "cleave/pipeline.h"
#include "cleave/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double cl_plan_model_states(double psi, int K, int zero, int n) {
    if (n < 1) n = 1;
    double w = 2 * psi, g = 2 * psi, o = K * psi;
    if (cl_zero_shards_optim(zero)) o /= n;
    if (cl_zero_shards_grads(zero)) g /= n;
    if (cl_zero_shards_params(zero)) w /= n;
    return w + g + o;
}

/* ---- per-query state -------------------------------------------------------- */

#define MAX_DESC 32
typedef struct {
    const cl_plan_query *q;
    int ndesc;
    int dtp[MAX_DESC], dsp[MAX_DESC], dcp[MAX_DESC], dep[MAX_DESC];
    int dok[MAX_DESC];           /* context parallelism of the description checked (cp_check passed) */
    int cur;                     /* the description get_desc gave last */
    cl_model_desc *desc[MAX_DESC];
    double *uparams[MAX_DESC];   /* parameters per unit of each description */
    const double *up;            /* those of the description get_desc gave last */
    int have_flops[3];
    struct live_entry {
        int kind, p, m, v;
        int *live;               /* [2 * p * v]: cl_schedule_chunk_live of rank r, chunk c at r * v + c, then
                                  * cl_schedule_chunk_douts at p * v + r * v + c */
    } lives[64];
    int nlives, next_live;
    double flops_model, flops_run[3]; /* one step's, per recompute mode */
    double (*rank_cat)[CL_MEM_NCAT];  /* cl_plan_detail_of: each pipeline rank's categories */
    cl_trace *trace;                  /* cl_plan_detail_of: the simulated step */
} plan_ctx;

/* The description of a tensor-parallel rank (tp, sp) of context rank of cp (cl_model_describe_cp: T / cp
 * tokens, each query row's attention over all T keys; cp 1: the whole sequence), of an expert-parallel group of
 * ep (the MoE blocks' rows and experts as the engine sizes them; 1: none). */
static cl_status get_desc(plan_ctx *x, int tp, int sp, int cp, int ep, cl_model_desc **out) {
    if (cp < 1) cp = 1;
    if (ep < 1) ep = 1;
    for (int i = 0; i < x->ndesc; i++)
        if (x->dtp[i] == tp && x->dsp[i] == sp && x->dcp[i] == cp && x->dep[i] == ep)
            return x->cur = i, x->up = x->uparams[i], *out = x->desc[i], CL_OK;
    cl_tp_layout tl = {tp, 0, sp, x->q->vocab_div > 0 ? x->q->vocab_div : 128, CL_F32, ep};
    cl_model_desc *d;
    CL_TRY(cl_model_describe_cp(&x->q->model, x->q->T / cp, &tl, cp, &d));
    if (ep > 1) cl_model_desc_ep_shard(d, 0); /* E / ep experts stored a rank (every ep rank the same sizes) */
    double *up = calloc((size_t)d->nunits, sizeof *up);
    if (!up) {
        cl_model_desc_free(d);
        return cl_error(CL_ERR_OOM, "cannot describe the model");
    }
    for (int i = 0; i < d->nparams; i++) up[d->params[i].unit] += (double)d->params[i].numel;
    if (x->ndesc == MAX_DESC) {
        cl_model_desc_free(x->desc[0]);
        free(x->uparams[0]);
        memmove(x->desc, x->desc + 1, (MAX_DESC - 1) * sizeof x->desc[0]);
        memmove(x->uparams, x->uparams + 1, (MAX_DESC - 1) * sizeof x->uparams[0]);
        memmove(x->dtp, x->dtp + 1, (MAX_DESC - 1) * sizeof x->dtp[0]);
        memmove(x->dsp, x->dsp + 1, (MAX_DESC - 1) * sizeof x->dsp[0]);
        memmove(x->dcp, x->dcp + 1, (MAX_DESC - 1) * sizeof x->dcp[0]);
        memmove(x->dep, x->dep + 1, (MAX_DESC - 1) * sizeof x->dep[0]);
        memmove(x->dok, x->dok + 1, (MAX_DESC - 1) * sizeof x->dok[0]);
        x->ndesc--;
    }
    x->desc[x->ndesc] = d, x->uparams[x->ndesc] = up, x->dtp[x->ndesc] = tp, x->dsp[x->ndesc] = sp, x->dcp[x->ndesc] = cp;
    x->dep[x->ndesc] = ep;
    x->dok[x->ndesc] = 0, x->cur = x->ndesc;
    x->ndesc++;
    x->up = up;
    return *out = d, CL_OK;
}

static void ctx_free(plan_ctx *x) {
    for (int i = 0; i < x->ndesc; i++) cl_model_desc_free(x->desc[i]), free(x->uparams[i]);
    for (int i = 0; i < x->nlives; i++) free(x->lives[i].live);
    x->ndesc = x->nlives = 0;
}

/* The schedule's live micro-batches per rank and chunk (the executor's slot
 * counts, cl_schedule_chunk_live), then its output-gradient receive buffers
 * (cl_schedule_chunk_douts), cached per shape. */
static cl_status get_live(plan_ctx *x, int kind, int p, int m, int v, const int **out) {
    for (int i = 0; i < x->nlives; i++) {
        struct live_entry *e = &x->lives[i];
        if (e->kind == kind && e->p == p && e->m == m && e->v == v) return *out = e->live, CL_OK;
    }
    cl_schedule sc;
    CL_TRY(cl_schedule_make((cl_sched_kind)kind, p, m, v, &sc));
    int *live = malloc((size_t)(2 * p * v) * sizeof *live);
    cl_status s = live ? CL_OK : cl_error(CL_ERR_OOM, "cannot count live micro-batches");
    for (int r = 0; !s && r < p; r++)
        for (int c = 0; c < v; c++) {
            live[r * v + c] = cl_schedule_chunk_live(&sc, r, c);
            live[p * v + r * v + c] = cl_schedule_chunk_douts(&sc, r, c);
        }
    cl_schedule_free(&sc);
    if (s) return s;
    int i = x->nlives < 64 ? x->nlives++ : x->next_live++ % 64;
    if (i < x->nlives && x->lives[i].live && x->nlives == 64) free(x->lives[i].live);
    x->lives[i] = (struct live_entry){kind, p, m, v, live};
    return *out = live, CL_OK;
}

/* Parameters of units [u0, u1) of the description get_desc gave last. */
static double params_in(const plan_ctx *x, int u0, int u1) {
    double n = 0;
    for (int u = u0; u < u1; u++) n += x->up[u];
    return n;
}

/* ---- one configuration, prepared ---------------------------------------------- */

typedef struct {
    cl_plan_cfg c;
    int p, v, S, m, kind;
    int u0[CL_PP_MAX_STAGES], u1[CL_PP_MAX_STAGES];
    double f[CL_PP_MAX_STAGES], b[CL_PP_MAX_STAGES], w[CL_PP_MAX_STAGES];
    double comm_f[CL_PP_MAX_STAGES], comm_b[CL_PP_MAX_STAGES]; /* tensor-parallel seconds inside them */
    double a2a_s[CL_PP_MAX_STAGES], a2a_b[CL_PP_MAX_STAGES];     /* all-to-all seconds and bytes leaving a rank inside
                                                                  * them, a micro-batch (every pass) */
    double p2p;
    double sync[4096], opt[4096];
} prep;

static int inter_group(const cl_hw *hw, int span) { return span > hw->devices_per_node; }

/* A pass's seconds: its compute, its tensor-parallel collectives and its all-to-alls over the expert-parallel group
 * (ep consecutive dp ranks: ep x cp x tp devices), none overlapped (the engine runs them inside the unit); adds the
 * communication to *comm, the all-to-alls' seconds to a2a[0] and the bytes leaving the rank to a2a[1]. */
static double pass_time(const plan_ctx *x, const cl_pass_cost *pc, const cl_plan_cfg *cf, double *comm, double a2a[2]) {
    const cl_hw *hw = &x->q->hw;
    int tp = cf->tp, inter = inter_group(hw, tp), ep = cf->ep > 1 ? cf->ep : 1;
    double t = cl_hw_pass_compute(hw, pc, cf->bf16), c = 0;
    if (pc->ar_calls) c += pc->ar_calls * cl_hw_coll(hw, CL_COLL_ALLREDUCE, pc->ar_bytes / pc->ar_calls, tp, inter);
    if (pc->ag_calls) c += pc->ag_calls * cl_hw_coll(hw, CL_COLL_ALLGATHER, pc->ag_bytes / pc->ag_calls, tp, inter);
    if (pc->rs_calls) c += pc->rs_calls * cl_hw_coll(hw, CL_COLL_REDUCE_SCATTER, pc->rs_bytes / pc->rs_calls, tp, inter);
    if (pc->a2a_calls && ep > 1) {
        int span = ep * (cf->cp > 1 ? cf->cp : 1) * tp;
        double at = pc->a2a_calls * cl_hw_alltoall(hw, pc->a2a_bytes / pc->a2a_calls, ep, inter_group(hw, span));
        c += at, a2a[0] += at, a2a[1] += pc->a2a_bytes * (ep - 1) / ep;
    }
    *comm += c;
    return t + c;
}

/* Context parallelism's ring (src/nn/cp_attention.c) in unit u of d (a unit with attention: its kind keeps
 * keys and values, kv_cache): per micro-batch of B samples, the forward passes cp - 1 messages of this rank's
 * rows of q, k and v's key-value part, B Tl W elements (W = Cl + 2 Kl), to the next rank, the backward twice
 * that (the rows again and their gradients' running sums), a re-forward (any recompute) the forward's again.
 * Each send overlaps that step's attention, so only what the pass's attention products do not cover is
 * exposed; with the collectives on the devices' own cores (CPU ranks) nothing hides. Adds the exposed
 * seconds of the forward to *f and of the backward (with its re-forward) to *b. */
static void ring_cost(const plan_ctx *x, const cl_model_desc *d, int u, const cl_plan_cfg *c, int eb, double *f,
                      double *b) {
    const cl_hw *hw = &x->q->hw;
    int cp = c->cp;
    if (cp < 2 || !cl_kind_of(d->units[u].kind)->kv_cache) return;
    double W = d->channels_local + 2.0 * d->kv_channels_local, K = cl_nn_key_tokens(d), hd = (double)d->cfg.channels / d->cfg.heads;
    double msg = cl_hw_p2p(hw, (double)c->mb * d->T * W * eb, inter_group(hw, cp * c->tp)); /* the context group spans cp x tp */
    cl_pass_cost af = {0}, ab = {0};
    cl_cost_attention_products(&af, &ab, d->T, K, hd, (double)c->mb * d->heads_local, hw->attn_causal ? cl_attention_share((int)K) : 1);
    double tf = cl_hw_pass_compute(hw, &af, c->bf16), tb = cl_hw_pass_compute(hw, &ab, c->bf16);
    double cf = (cp - 1) * msg, cb = 2 * (cp - 1) * msg;
    if (c->recompute != CL_RECOMPUTE_NONE) cb += cf, tb += tf; /* the re-forward's ring, under its attention */
    *f += hw->coll_on_cores ? cf : cf > tf ? cf - tf : 0;
    *b += hw->coll_on_cores ? cb : cb > tb ? cb - tb : 0;
}

/* Context parallelism by all-to-all (--cp-comm a2a, DeepSpeed Ulysses, src/nn/cp_attention.c) in unit u of d:
 * per micro-batch the forward trades this rank's rows of q, k and v (B Tl W elements, W = Cl + 2 Kl) for its head
 * group's columns of every rank's rows, then returns the output (B Tl Cl); the backward gathers q, k, v, the output
 * and its gradient (2 W + 2 Cl a row) and returns the gradients of q, k and v (W); a re-forward (any recompute) the
 * forward's again, as the ring's. Each is an all-to-all over the context group (cp x tp devices), blocking: none
 * hides. Adds the seconds to *f and *b, and to a2a[0], the bytes leaving the rank to a2a[1]. */
static void cp_a2a_cost(const plan_ctx *x, const cl_model_desc *d, int u, const cl_plan_cfg *c, int eb, double *f, double *b,
                        double a2a[2]) {
    const cl_hw *hw = &x->q->hw;
    int cp = c->cp, inter = inter_group(hw, cp * c->tp);
    if (cp < 2 || !cl_kind_of(d->units[u].kind)->kv_cache) return;
    double rows = (double)c->mb * d->T * eb, W = (d->channels_local + 2.0 * d->kv_channels_local) * rows, O = d->channels_local * rows;
    double tf = cl_hw_alltoall(hw, W, cp, inter) + cl_hw_alltoall(hw, O, cp, inter), tb = 2 * tf, lf = (W + O) * (cp - 1) / cp;
    double lb = 2 * lf;
    if (c->recompute != CL_RECOMPUTE_NONE) tb += tf, lb += lf;
    *f += tf, *b += tb, a2a[0] += tf + tb, a2a[1] += lf + lb;
}

/* Unit u's seconds per micro-batch: t[0] F, t[1] B with the re-forward, t[2] W (zb-h1's split W of a block
 * re-derives the block's interior gradients first: B's work plus W's, docs/ARCHITECTURE.md, Backward split),
 * and the communication inside them: comm[0] the forward's, comm[1] the backward's (tensor-parallel
 * collectives and the context ring's exposed part). */
static void unit_times(const plan_ctx *x, const cl_model_desc *d, int u, const cl_plan_cfg *c, int zb, int eb,
                       double t[3], double comm[2], double a2a[2]) {
    const cl_hw *hw = &x->q->hw;
    cl_unit_cost uc;
    cl_unit_cost_of(d, u, c->mb, eb, c->recompute, hw->attn_causal, &uc);
    double ring_f = 0, ring_b = 0;
    a2a[0] = a2a[1] = 0;
    if (c->cp_comm == CL_CP_A2A) cp_a2a_cost(x, d, u, c, eb, &ring_f, &ring_b, a2a);
    else ring_cost(x, d, u, c, eb, &ring_f, &ring_b);
    comm[0] = ring_f, comm[1] = ring_b;
    t[0] = pass_time(x, &uc.pass[CL_PASS_F], c, &comm[0], a2a) + ring_f;
    double af[2] = {a2a[0], a2a[1]};
    t[1] = pass_time(x, &uc.pass[CL_PASS_B], c, &comm[1], a2a) + pass_time(x, &uc.pass[CL_PASS_RF], c, &comm[1], a2a) + ring_b;
    double comm_b = comm[1], ab[2] = {a2a[0] - af[0], a2a[1] - af[1]};
    t[2] = pass_time(x, &uc.pass[CL_PASS_W], c, &comm[1], a2a);
    if (zb && cl_kind_of(d->units[u].kind)->weight_redo) t[2] += t[1], comm[1] += comm_b, a2a[0] += ab[0], a2a[1] += ab[1];
}


/* ZeRO 3 (src/nn/zero3.c): a pass all-gathers the parameters of the units
 * that read them, in the order it runs them, the next one's gather issued
 * before the current unit runs (--zero3-prefetch 1, the trainer's default):
 * forward, every unit (the LM head's gather takes the tied wte too); a
 * combined backward or zb-h1's B, every unit but the embedding (its
 * backward reads no parameter); zb-h1's W, the blocks only (the head does
 * its whole backward in B). So a pass over units u_1..u_n lasts
 * g_1 + sum_i max(c_i, g_(i+1)) with g = 0 for a unit it does not gather:
 * the first gather is exposed, each later one hides under the unit before
 * it; g_1 + sum_i (c_i + g_(i+1)) where the collectives run on the devices'
 * own cores (collectives_on_cores: the copies take the core the unit would
 * use). In the pass that makes the weight gradients (the combined backward,
 * zb-h1's W) each unit's reduce-scatter r_i leaves after the unit, on the
 * link the next gather takes: g_n + sum_i max(c_i, g_(i-1) + r_(i+1)) + r_1
 * (ZeRO's 3 Psi a step: two gathers and a reduce-scatter on each device's
 * link). Replaces the stage's F, B and W times. */
static double gathered_pass(const double *c, const double *g, const int *on, const double *rs, int u0, int u1, int dir,
                            int serial) {
    int first = dir > 0 ? u0 : u1 - 1, end = dir > 0 ? u1 : u0 - 1;
    double t = on[first] ? g[first] : 0, prev = 0;
    for (int u = first; u != end; u += dir) {
        int nx = u + dir;
        double link = (nx != end && on[nx] ? g[nx] : 0) + prev; /* the next gather and the last unit's reduce-scatter */
        t += serial ? c[u] + link : c[u] > link ? c[u] : link;
        prev = rs ? rs[u] : 0;
    }
    return t + prev; /* the pass's last reduce-scatter */
}

/* Bytes of a gradient on the data-parallel links: on a GPU description the field's (16-bit in bf16); on this
 * machine cleave's engine's, which accumulates and reduces F32 at either dtype unless --grad-reduce-dtype bf16. */
static int grad_bytes(const cl_plan_query *q, const cl_plan_cfg *c) {
    if (!q->hw.exact_memory) return c->bf16 ? 2 : 4;
    return q->base && q->base->grad_reduce == CL_BF16 ? 2 : 4;
}

static cl_status zero3_passes(plan_ctx *x, prep *P, const cl_model_desc *d, int eb, int inter, int dpc) {
    const cl_hw *hw = &x->q->hw;
    const cl_plan_cfg *c = &P->c;
    int zb = P->kind == CL_SCHED_ZB_H1, n = d->nunits;
    double wte = d->tied_wte >= 0 ? (double)d->params[d->tied_wte].numel : 0;
    int wte_unit = d->tied_wte >= 0 ? d->params[d->tied_wte].unit : -1;
    double *t = malloc(5 * (size_t)n * sizeof *t);
    int *on = malloc(3 * (size_t)n * sizeof *on);
    if (!t || !on) {
        free(t), free(on);
        return cl_error(CL_ERR_OOM, "cannot time the ZeRO 3 gathers");
    }
    double *cf = t, *cb = t + n, *cw = t + 2 * n, *g = t + 3 * n, *rs = t + 4 * n;
    int *onf = on, *onb = on + n, *onw = on + 2 * n;
    for (int u = 0; u < n; u++) {
        const cl_kind *k = cl_kind_of(d->units[u].kind);
        int same = k->repeated && u > 0 && d->units[u - 1].kind == d->units[u].kind;
        if (same) cf[u] = cf[u - 1], cb[u] = cb[u - 1], cw[u] = cw[u - 1]; /* every block costs the same */
        else {
            double ut[3], none[2], a2a[2];
            unit_times(x, d, u, c, zb, eb, ut, none, a2a);
            cf[u] = ut[0], cb[u] = ut[1], cw[u] = ut[2];
        }
        if (!zb) cb[u] += cw[u], cw[u] = 0;
        double np = x->up[u] + (k->uses_tied && wte_unit != u ? wte : 0);
        g[u] = cl_hw_coll(hw, CL_COLL_ALLGATHER, np * eb, dpc, inter);
        rs[u] = x->up[u] > 0 ? cl_hw_coll(hw, CL_COLL_REDUCE_SCATTER, x->up[u] * grad_bytes(x->q, c), dpc, inter) : 0;
        onf[u] = np > 0;
        onb[u] = np > 0 && (k->z3_reads & CL_KIND_READS(CL_Z3_BACKWARD)); /* the passes that gather it */
        onw[u] = np > 0 && (k->z3_reads & CL_KIND_READS(CL_Z3_WEIGHT));
    }
    int serial = hw->coll_on_cores || c->lean; /* lean: --zero3-prefetch 0, each gather issued before its own unit */
    /* the gradients' reduce-scatters share the link with the backward's gathers (GRAD_SYNC then finds them
     * hidden); where the collectives run on the cores GRAD_SYNC adds them whole, as before */
    const double *r = hw->coll_on_cores ? NULL : rs;
    for (int s = 0; s < P->S; s++) {
        int u0 = P->u0[s], u1 = P->u1[s];
        P->f[s] = gathered_pass(cf, g, onf, NULL, u0, u1, 1, serial);
        double b = gathered_pass(cb, g, onb, zb ? NULL : r, u0, u1, -1, serial);
        if (zb) P->b[s] = b, P->w[s] = gathered_pass(cw, g, onw, r, u0, u1, -1, serial);
        else P->b[s] = b - P->w[s]; /* the stage's B + W is the combined pass */
    }
    free(t), free(on);
    return CL_OK;
}

/* The run P's configuration describes (the query's base, else the defaults, with P's settings). */
static void train_config(const cl_plan_query *q, const prep *P, cl_train_config *tc) {
    const cl_plan_cfg *c = &P->c;
    if (q->base) *tc = *q->base;
    else cl_train_config_default(tc);
    tc->model = q->model;
    tc->seq_len = q->T;
    tc->micro_batch = c->mb;
    tc->global_batch = q->global_batch;
    tc->tp = c->tp;
    tc->cp = c->cp > 1 ? c->cp : 1;
    tc->cp_comm = c->cp_comm;
    tc->ep = c->ep > 1 ? c->ep : 1;
    tc->sequence_parallel = c->sp;
    tc->dtype = c->bf16 ? CL_BF16 : CL_F32;
    tc->vocab_divisible_by = q->vocab_div > 0 ? q->vocab_div : 128;
    tc->schedule = P->kind;
    tc->virtual_stages = P->v;
    tc->recompute = c->recompute;
    tc->zero = c->zero;
    tc->offload_optimizer = c->offload;
    if (c->lean && cl_zero_shards_grads(c->zero)) tc->bucket_bytes = 1; /* as cl_plan_cfg_to_train sets them */
    if (c->lean && cl_zero_shards_params(c->zero)) tc->zero3_prefetch = 0;
    if (c->offload == CL_OFFLOAD_DISK) { /* the file's directory does not change a byte: any writable one */
        const char *tmp = getenv("TMPDIR");
        tc->offload_dir = tmp && *tmp ? tmp : "/tmp";
    }
    tc->device_memory = (size_t)(q->device_memory > 0 ? q->device_memory : 0);
}

/* Context parallelism: what the trainer refuses (cl_train_describe's checks: a token family, T cut into
 * 2 cp equal chunks, no sequence parallelism, no experts; a2a's heads under the base's --cp-comm). */
static cl_status cp_check(const plan_ctx *x, const prep *P) {
    cl_train_config tc;
    train_config(x->q, P, &tc);
    cl_model_desc *d;
    CL_TRY(cl_train_describe(&tc, 0, &d));
    cl_model_desc_free(d);
    return CL_OK;
}

/* Checks c against the query and fills the stage times. */
static cl_status prepare(plan_ctx *x, const cl_plan_cfg *c, prep *P, cl_model_desc **dout) {
    const cl_plan_query *q = x->q;
    const cl_hw *hw = &q->hw;
    memset(P, 0, sizeof *P);
    P->c = *c;
    if (c->dp < 1 || c->tp < 1 || c->pp < 1 || c->mb < 1 || c->v < 1)
        return cl_error(CL_ERR_INVALID, "dp, tp, pp, micro-batch and virtual stages must be >= 1");
    if (P->c.cp < 1) P->c.cp = 1;
    if (P->c.ep < 1) P->c.ep = 1;
    c = &P->c;
    int E = q->model.experts;
    if (c->ep > 1 && (!E || c->dp % c->ep || E % c->ep))
        return cl_error(CL_ERR_INVALID, "ep %d must divide dp %d and the model's %d experts", c->ep, c->dp, E);
    int cp = c->cp, dpc = c->dp * cp; /* the gradients' all-reduce and ZeRO's shards span dp x cp */
    if ((long)c->dp * cp * c->tp * c->pp != q->devices)
        return cl_error(CL_ERR_INVALID, "dp %d x cp %d x tp %d x pp %d is not the %d devices", c->dp, cp, c->tp, c->pp, q->devices);
    if (q->global_batch % (c->dp * c->mb))
        return cl_error(CL_ERR_INVALID, "the global batch %d is not a multiple of dp %d x micro-batch %d", q->global_batch, c->dp, c->mb);
    if (c->bf16 && !(hw->peak_bf16 > 0))
        return cl_error(CL_ERR_INVALID, "--precision bf16: the hardware %s has no bf16 peak", hw->name);
    if (c->zero < CL_ZERO_NONE || c->zero > CL_ZERO_PARAMS) return cl_error(CL_ERR_INVALID, "ZeRO stage %d (0 to 3)", c->zero);
    if (c->offload < CL_OFFLOAD_NONE || c->offload > CL_OFFLOAD_DISK) return cl_error(CL_ERR_INVALID, "offload %d (0 none, 1 host, 2 disk)", c->offload);
    if (c->offload && !hw->exact_memory)
        return cl_error(CL_ERR_UNSUPPORTED, "optimizer offload is modelled on this machine only (%s has no host link in its description)",
                        hw->name);
    if (c->offload == CL_OFFLOAD_DISK && !(hw->disk_bw > 0))
        return cl_error(CL_ERR_UNSUPPORTED, "--offload-optimizer disk: the hardware %s has no disk_bandwidth (run `cleave plan calibrate`)",
                        hw->name);
    if (c->sp && c->tp < 2) return cl_error(CL_ERR_INVALID, "sequence parallelism needs tp > 1");
    P->p = c->pp;
    P->kind = c->pp > 1 ? c->schedule : CL_SCHED_1F1B;
    P->v = c->pp > 1 ? c->v : 1;
    if (P->v > 1 && P->kind != CL_SCHED_INTERLEAVED)
        return cl_error(CL_ERR_INVALID, "virtual stages %d need the interleaved schedule", P->v);
    if (P->kind == CL_SCHED_INTERLEAVED && P->v < 2) return cl_error(CL_ERR_INVALID, "the interleaved schedule needs v >= 2");
    P->S = P->p * P->v;
    P->m = q->global_batch / (c->dp * c->mb);
    if (P->kind == CL_SCHED_INTERLEAVED && P->m % P->p)
        return cl_error(CL_ERR_INVALID, "interleaved: %d micro-batches are not a multiple of pp %d", P->m, P->p);
    if (P->S > CL_PP_MAX_STAGES || P->p > 4096) return cl_error(CL_ERR_INVALID, "%d stages: at most %d", P->S, CL_PP_MAX_STAGES);
    cl_model_desc *d;
    CL_TRY(get_desc(x, c->tp, c->sp, cp, c->ep, &d));
    *dout = d;
    if (cp > 1 && !x->dok[x->cur]) { /* the trainer's refusals (a token family, 2 cp chunks, no experts), once a description */
        CL_TRY(cp_check(x, P));
        x->dok[x->cur] = 1;
    }
    /* stages: the trainer's rule (cl_pp_partition_balanced): at most one a unit. Their units: the
     * repeated body's (the blocks, cl_kind's repeated) split evenly (the first stages take one more
     * when they do not divide), the units before it with stage 0, the ones after with the last;
     * more stages than blocks, and models without a repeated body: the units split evenly */
    if (P->S > d->nunits)
        return cl_error(CL_ERR_INVALID, "%d pipeline stages but the model has only %d units", P->S, d->nunits);
    int body = 0, first = 0;
    for (int u = d->nunits - 1; u >= 0; u--)
        if (cl_kind_of(d->units[u].kind)->repeated) body++, first = u;
    int by_blocks = body > 0 && P->S <= body;
    int nb = by_blocks ? body : d->nunits, lo = by_blocks ? first : 0;
    for (int s = 0, at = lo; s < P->S; s++) {
        int k = nb / P->S + (s < nb % P->S);
        P->u0[s] = s == 0 ? 0 : at;
        at += k;
        P->u1[s] = s == P->S - 1 ? d->nunits : at;
    }
    /* stage times */
    int eb = c->bf16 ? 2 : 4;
    int cached_kind = -1; /* the kind of the last unit costed: a repeated kind's next unit costs the same */
    double ut[3] = {0}, uc[2] = {0}, ua[2] = {0};
    for (int s = 0; s < P->S; s++) {
        for (int u = P->u0[s]; u < P->u1[s]; u++) {
            int kind = d->units[u].kind;
            if (!(cl_kind_of(kind)->repeated && kind == cached_kind)) {
                unit_times(x, d, u, c, P->kind == CL_SCHED_ZB_H1, eb, ut, uc, ua);
                cached_kind = kind;
            }
            P->f[s] += ut[0], P->b[s] += ut[1], P->w[s] += ut[2];
            P->comm_f[s] += uc[0], P->comm_b[s] += uc[1];
            P->a2a_s[s] += ua[0], P->a2a_b[s] += ua[1];
        }
    }
    /* bytes a parameter takes in ZeRO 1 and 2's gather after the step: the 16-bit copy on a GPU description,
     * cleave's F32 master shards on this machine */
    double pb = hw->exact_memory ? 4 : eb, gb = grad_bytes(x->q, c);
    int dp_inter = inter_group(hw, dpc * c->tp);
    if (cl_zero_shards_params(c->zero) && dpc > 1) CL_TRY(zero3_passes(x, P, d, eb, dp_inter, dpc));
    /* activations (and their gradients) between stages: this rank's rows of a block's output */
    if (P->p > 1) {
        double bytes = (double)d->units[P->u1[0] - 1].out_floats * c->mb * eb;
        /* the next stage is dp x cp x tp ranks further on: in this node only when a node holds more */
        P->p2p = cl_hw_p2p(hw, bytes, dpc * c->tp >= hw->devices_per_node);
    }
    /* GRAD_SYNC and OPT_STEP per pipeline rank */
    for (int r = 0; r < P->p; r++) {
        double np = 0, last_bwd = 0, last_w = 0;
        for (int cc = 0; cc < P->v; cc++) {
            int s = cc * P->p + r;
            np += params_in(x, P->u0[s], P->u1[s]);
            if (cc == 0) last_bwd = P->b[s] + P->w[s], last_w = P->w[s];
        }
        double sync = 0;
        if (dpc > 1) {
            double g = np * gb;
            if (cl_zero_shards_grads(c->zero)) {
                /* stage 2 keeps no whole gradient: every micro-batch's buckets are reduce-scattered
                 * during its own backward (under zb-h1 its W passes), each hiding under that pass */
                double rs = cl_hw_coll(hw, CL_COLL_REDUCE_SCATTER, g, dpc, dp_inter);
                double pass = hw->coll_on_cores ? 0 : P->kind == CL_SCHED_ZB_H1 ? last_w : last_bwd;
                sync = P->m * (rs > pass ? rs - pass : 0);
            } else {
                sync = cl_hw_coll(hw, CL_COLL_ALLREDUCE, g, dpc, dp_inter);
                /* buckets leave during the chunk's last combined backward (not under a split one) */
                if (P->kind != CL_SCHED_ZB_H1 && !hw->coll_on_cores) sync = sync > last_bwd ? sync - last_bwd : 0;
            }
            if (c->zero == CL_ZERO_OPTIM || c->zero == CL_ZERO_GRADS) sync += cl_hw_coll(hw, CL_COLL_ALLGATHER, np * pb, dpc, dp_inter);
        }
        /* the tied embedding's gradients between the first and the last rank */
        if (P->p > 1 && (r == 0 || r == P->p - 1) && d->tied_wte >= 0)
            sync += cl_hw_p2p(hw, (double)d->params[d->tied_wte].numel * gb, 1);
        P->sync[r] = sync;
        /* AdamW: 28 bytes per parameter of the shard (read master, grad, m, v; write master, m, v, the 16-bit copy) */
        double shard = cl_zero_shards_optim(c->zero) && dpc > 1 ? np / dpc : np;
        P->opt[r] = shard * 28.0 / hw->mem_bw;
        /* offload: host memory is this machine's memory (the same stream); disk streams both moments
         * in and out of the file (16 bytes a parameter), a worker thread's tile I/O beside the update */
        if (c->offload == CL_OFFLOAD_DISK && shard * 16.0 / hw->disk_bw > P->opt[r]) P->opt[r] = shard * 16.0 / hw->disk_bw;
    }
    return CL_OK;
}

/* Per-rank work of one micro-batch, and the closed forms. */
static void closed_form(const prep *P, double *est, double *lower) {
    double Rmax = 0, Rsum = 0, fbw = 0, syncmax = 0;
    for (int r = 0; r < P->p; r++) {
        double R = 0;
        for (int c = 0; c < P->v; c++) {
            int s = c * P->p + r;
            R += P->f[s] + P->b[s] + P->w[s];
            fbw += P->f[s] + P->b[s] - P->w[s];
        }
        if (R > Rmax) Rmax = R;
        Rsum += R;
        if (P->sync[r] + P->opt[r] > syncmax) syncmax = P->sync[r] + P->opt[r];
    }
    double Rmean = Rsum / P->p, fill;
    if (P->kind == CL_SCHED_ZB_H1) fill = (P->p - 1) * (fbw / P->S);
    else fill = (P->p - 1) * Rmean / P->v;
    *lower = P->m * Rmax + syncmax;
    *est = *lower + fill + (P->p > 1 ? 2.0 * (P->p - 1) * P->p2p : 0);
}

/* Memory of the fullest rank: out->peak_bytes, cat_bytes, full_rank. */
static cl_status memory(plan_ctx *x, const prep *P, const cl_model_desc *d, cl_plan_result *out) {
    const cl_plan_query *q = x->q;
    const cl_plan_cfg *c = &P->c;
    memset(out->cat_bytes, 0, sizeof out->cat_bytes);
    out->peak_bytes = 0;
    int cp = c->cp > 1 ? c->cp : 1, dpc = c->dp * cp;
    if (q->hw.exact_memory || !c->bf16) { /* fp32 anywhere: the trainer's own statement */
        cl_train_config tc;
        train_config(q, P, &tc);
        int n = dpc * c->tp * c->pp;
        cl_mem_rank *mr = malloc((size_t)n * sizeof *mr);
        if (!mr) return cl_error(CL_ERR_OOM, "cannot allocate the memory prediction");
        cl_status s = cl_memory_predict(&tc, c->dp, c->pp, mr);
        if (s == CL_ERR_OOM && c->pp > 1) { /* no cut fits: the figures without the cap */
            cl_error_clear();
            tc.device_memory = 0;
            s = cl_memory_predict(&tc, c->dp, c->pp, mr);
        }
        if (!s) {
            int w = 0;
            for (int i = 1; i < n; i++)
                if (mr[i].total > mr[w].total) w = i;
            for (int i = 0; x->rank_cat && i < n; i++) /* the fullest rank of each pipeline rank */
                for (int k = 0, r = mr[i].pp_rank; k < CL_MEM_NCAT; k++)
                    if (mr[i].bytes[k] > x->rank_cat[r][k]) x->rank_cat[r][k] = (double)mr[i].bytes[k];
            out->peak_bytes = (double)mr[w].total;
            out->host_need = (double)cl_memory_host_need(mr, n, n);
            out->full_rank = mr[w].pp_rank;
            for (int k = 0; k < CL_MEM_NCAT; k++) out->cat_bytes[k] = (double)mr[w].bytes[k];
        }
        free(mr);
        return s;
    }
    /* bf16 on a GPU: the stage statement at mixed precision (see the top of this file); ZeRO's shards over the
     * expert-data group, dp x cp / ep ranks, as the trainer's (every parameter: the replicated ones too) */
    static const double scale[CL_MEM_NCAT] = {0.5, 0.5, 1.5, 0.5, 0.5, 0.5};
    int zs = dpc / (c->ep > 1 ? c->ep : 1);
    /* stages of the same units' kinds and counts cost the same: a few distinct ones, cached */
    struct {
        int first, last, n, zb, ndout;
        double one[CL_MEM_NCAT], per[CL_MEM_NCAT];
    } cache[64];
    int ncache = 0;
    const int *lives;
    CL_TRY(get_live(x, P->kind, P->p, P->m, P->v, &lives));
    for (int r = 0; r < P->p; r++) {
        double cat[CL_MEM_NCAT] = {0};
        for (int cc = 0; cc < P->v; cc++) {
            int s = cc * P->p + r, live = lives[r * P->v + cc], ndout = lives[P->p * P->v + r * P->v + cc];
            if (live < 1) live = 1;
            if (ndout < 0) ndout = 1;
            int first = P->u0[s] == 0, last = P->u1[s] == d->nunits, nu = P->u1[s] - P->u0[s], ci = 0;
            while (ci < ncache && !(cache[ci].first == first && cache[ci].last == last && cache[ci].n == nu &&
                                    cache[ci].ndout == ndout))
                ci++;
            if (ci == ncache) {
                /* the output-gradient pool is the same at any live count: `per` is one slot's bytes */
                cl_pp_stage_opts o = {.B = c->mb, .recompute = c->recompute, .live = 1, .zb = P->kind == CL_SCHED_ZB_H1,
                                      .ngb = s > 0, .ndout = ndout, .zero = {cl_zero_shards_optim(c->zero) ? CL_ZERO_OPTIM : CL_ZERO_NONE, zs, 0}};
                cl_pp_stage_cost one = cl_pp_stage_predict(d, P->u0[s], P->u1[s], &o);
                o.live = 2;
                cl_pp_stage_cost two = cl_pp_stage_predict(d, P->u0[s], P->u1[s], &o);
                if (ncache == 64) ci = 63; /* (a kind per rank's receive count, and uneven stages: the last slot is reused) */
                else ncache++;
                cache[ci].first = first, cache[ci].last = last, cache[ci].n = nu, cache[ci].ndout = ndout;
                for (int k = 0; k < CL_MEM_NCAT; k++)
                    cache[ci].one[k] = (double)one.bytes[k], cache[ci].per[k] = (double)two.bytes[k] - (double)one.bytes[k];
            }
            for (int k = 0; k < CL_MEM_NCAT; k++) {
                double b = cache[ci].one[k] + (live - 1) * cache[ci].per[k];
                if (k == CL_MEM_GRADS && cl_zero_shards_grads(c->zero)) b /= zs;
                if (k == CL_MEM_PARAMS && cl_zero_shards_params(c->zero)) b /= zs;
                cat[k] += b * scale[k];
            }
            /* the context ring's buffers (cl_model_set_cp: a set per chunk, fp32 floats at 16 bits here) */
            cat[CL_MEM_WORKSPACE] += (double)cl_cp_buffer_floats(d, c->mb, cp, (cl_cp_comm)c->cp_comm) * 4 * scale[CL_MEM_WORKSPACE];
        }
        if (cl_zero_shards_params(c->zero) && dpc > 1) { /* the gathered parameters of the largest unit, twice (prefetch; lean: once) */
            double big = 0;
            for (int u = 0; u < d->nunits; u++)
                if (x->up[u] > big) big = x->up[u];
            cat[CL_MEM_WORKSPACE] += (c->lean ? 1 : 2) * big * 2;
        }
        double tot = 0;
        for (int k = 0; k < CL_MEM_NCAT; k++) tot += cat[k];
        if (x->rank_cat) memcpy(x->rank_cat[r], cat, sizeof cat);
        if (tot > out->peak_bytes) {
            out->peak_bytes = tot;
            out->full_rank = r;
            memcpy(out->cat_bytes, cat, sizeof cat);
        }
    }
    return CL_OK;
}

void cl_plan_step_flops(const cl_plan_query *q, int recompute, double *model, double *run) {
    *model = *run = 0;
    plan_ctx x = {.q = q};
    cl_model_desc *d;
    if (get_desc(&x, 1, 0, 1, 1, &d)) {
        cl_error_clear();
        return;
    }
    cl_unit_cost uc;
    for (int u = 0; u < d->nunits; u++) {
        cl_unit_cost_of(d, u, 1, 4, recompute, q->hw.attn_causal, &uc); /* the blockwise backward's recomputed scores: run FLOPs */
        double f = uc.pass[CL_PASS_F].flops + uc.pass[CL_PASS_B].flops + uc.pass[CL_PASS_W].flops;
        *model += f * q->global_batch;
        *run += (f + uc.pass[CL_PASS_RF].flops) * q->global_batch;
    }
    ctx_free(&x);
}

static double device_memory(const cl_plan_query *q) { return q->device_memory > 0 ? q->device_memory : q->hw.device_memory; }

static void finish(plan_ctx *x, const prep *P, double step, double bubble, double comm, cl_plan_result *o) {
    const cl_plan_query *q = x->q;
    int rc = P->c.recompute;
    if (!x->have_flops[rc]) {
        cl_plan_step_flops(q, rc, &x->flops_model, &x->flops_run[rc]);
        x->have_flops[rc] = 1;
    }
    double model = x->flops_model, run = x->flops_run[rc];
    o->step_s = step;
    o->tokens_per_s = (double)q->global_batch * q->T / step;
    o->model_tflops = model / step / q->devices / 1e12;
    o->hw_tflops = run / step / q->devices / 1e12;
    double peak = P->c.bf16 ? q->hw.peak_bf16 : q->hw.peak_fp32;
    o->peak_share = o->model_tflops * 1e12 / peak;
    o->bubble = bubble;
    o->comm_share = comm / step;
    o->a2a_s = o->a2a_bytes = 0;
    for (int cc = 0; cc < P->v; cc++) o->a2a_s += P->m * P->a2a_s[cc * P->p], o->a2a_bytes += P->m * P->a2a_b[cc * P->p];
}

/* Exposed communication of rank 0 over a step, closed form: tp inside its
 * passes, its sync. */
static double comm_time(const prep *P) {
    double c = 0;
    for (int cc = 0; cc < P->v; cc++) c += P->m * (P->comm_f[cc * P->p] + P->comm_b[cc * P->p]);
    return c + P->sync[0] + (P->p > 1 ? 2.0 * (P->p - 1) * P->p2p : 0);
}

/* Each compute action's tensor-parallel collectives, at its end, on the comm track. */
static cl_status add_tp_events(const prep *P, const cl_schedule *sc, const cl_sim_result *res, cl_trace *tr) {
    for (int r = 0; r < P->p; r++)
        for (int i = 0; i < sc->len[r]; i++) {
            const cl_action *a = &sc->acts[r][i];
            int s = a->chunk * P->p + r;
            double c = a->kind == CL_ACT_FWD ? P->comm_f[s] : a->kind == CL_ACT_BWD || a->kind == CL_ACT_BWD_INPUT ? P->comm_b[s] : 0;
            if (!(c > 0)) continue;
            cl_trace_event e = {r, CL_TRACK_COMM, 1, a->kind, a->mb, a->chunk, res->end[r][i] - c, res->end[r][i], 0};
            CL_TRY(cl_trace_add(tr, &e));
        }
    return CL_OK;
}

static cl_status simulate(const prep *P, double *step, double *bubble, cl_trace *tr) {
    cl_schedule sc;
    CL_TRY(cl_schedule_make((cl_sched_kind)P->kind, P->p, P->m, P->v, &sc));
    cl_sched_costs costs = {0, 0, 0, P->f, P->b, P->w};
    cl_sched_extra extra = {P->p2p, P->p2p, P->sync, P->opt};
    cl_sim_result res;
    cl_status s = cl_schedule_simulate_ex(&sc, &costs, &extra, &res);
    if (!s) {
        *step = res.makespan;
        /* the pipeline's idle share, up to each rank's last compute action */
        double idle = 0, span = 0;
        for (int r = 0; r < P->p; r++) {
            double end = 0;
            for (int i = 0; i < sc.len[r]; i++)
                if (cl_act_is_compute(sc.acts[r][i].kind) && res.end[r][i] > end) end = res.end[r][i];
            idle += end - res.busy[r];
            span += end;
        }
        *bubble = span > 0 ? idle / span : 0;
        if (tr && !(s = cl_trace_from_sim(&sc, &res, tr)) && (s = add_tp_events(P, &sc, &res, tr))) cl_trace_free(tr);
        cl_sim_result_free(&res);
    }
    cl_schedule_free(&sc);
    return s;
}

static cl_status eval_ctx(plan_ctx *x, const cl_plan_cfg *c, int sim, cl_plan_result *o, double *lower) {
    memset(o, 0, sizeof *o);
    o->c = *c;
    static prep P; /* large; one at a time */
    cl_model_desc *d = NULL;
    CL_TRY(prepare(x, c, &P, &d));
    CL_TRY(memory(x, &P, d, o));
    double cap = device_memory(x->q);
    o->fits = o->peak_bytes <= cap;
    if (!o->fits) {
        o->over_bytes = o->peak_bytes - cap;
        int k = 0;
        for (int i = 1; i < CL_MEM_NCAT; i++)
            if (o->cat_bytes[i] > o->cat_bytes[k]) k = i;
        o->over_cat = k;
    } else if (x->q->host_memory > 0 && o->host_need > x->q->host_memory) { /* the offloaded state does not fit the host */
        o->fits = 0;
        o->over_bytes = o->host_need - x->q->host_memory;
        o->over_cat = CL_MEM_OPTIM;
    }
    double est, lo;
    closed_form(&P, &est, &lo);
    if (lower) *lower = lo;
    double step = est, bubble = P.p > 1 ? 1 - (P.m * 1.0) / (P.m + (P.p - 1.0) / P.v) : 0;
    if (x->trace) { /* detail: always the simulation */
        CL_TRY(simulate(&P, &step, &bubble, x->trace));
        sim = 1;
    }
    else if (P.p == 1) sim = 1, step = est; /* one stage: the closed form is the schedule */
    else if (sim) CL_TRY(simulate(&P, &step, &bubble, NULL));
    o->simulated = sim;
    finish(x, &P, step, bubble, comm_time(&P), o);
    return CL_OK;
}

cl_status cl_plan_eval(const cl_plan_query *q, const cl_plan_cfg *c, cl_plan_result *out) {
    plan_ctx x = {.q = q};
    cl_status s = eval_ctx(&x, c, 1, out, NULL);
    ctx_free(&x);
    return s;
}

void cl_plan_list_free(cl_plan_list *l) {
    free(l->r);
    memset(l, 0, sizeof *l);
}

static int by_step(const void *a, const void *b) {
    double x = ((const cl_plan_result *)a)->step_s, y = ((const cl_plan_result *)b)->step_s;
    return x < y ? -1 : x > y;
}

typedef struct {
    cl_plan_result r;
    double lower;
} cand;

static int by_est(const void *a, const void *b) {
    double x = ((const cand *)a)->r.step_s, y = ((const cand *)b)->r.step_s;
    return x < y ? -1 : x > y;
}

static int opts_of(int fixed, int lo, int hi, int *out) {
    int n = 0;
    if (fixed >= 0) out[n++] = fixed;
    else
        for (int i = lo; i <= hi; i++) out[n++] = i;
    return n;
}

/* Search: every configuration the query leaves open is checked for memory
 * and timed in closed form; gpipe (1F1B's time, more memory) and ZeRO
 * stages on one replica (nothing to shard) are skipped as dominated unless
 * fixed. The candidates that fit are then simulated in order of their
 * closed-form time until max_sims or until the top K simulated are all faster than
 * every remaining candidate's lower bound (its busiest rank's work without
 * any bubble), which the simulation cannot beat. */
cl_status cl_plan_search(const cl_plan_query *q, cl_plan_list *out) {
    memset(out, 0, sizeof *out);
    plan_ctx x = {.q = q};
    const cl_plan_cfg *fx = &q->fix;
    const cl_hw *hw = &q->hw;
    /* what the model's units allow, from the whole model's description: its repeated body (blocks to
     * divide among interleaved chunks, to recompute), its units (pp at most that many); and its family
     * (sequence parallelism splits token rows) */
    int body = 0, nunits = 64, recomputable = 0, tokens = cl_model_family_of(&q->model)->tokens;
    cl_model_desc *d0;
    if (get_desc(&x, 1, 0, 1, 1, &d0) == CL_OK) {
        nunits = d0->nunits;
        for (int u = 0; u < d0->nunits; u++) {
            const cl_kind *k = cl_kind_of(d0->units[u].kind);
            body += k->repeated;
            recomputable |= k->rc_floats != NULL;
        }
    }
    cl_error_clear(); /* a model that cannot be described is refused by each candidate's prepare */
    int max_tp = q->max_tp > 0 ? q->max_tp : hw->devices_per_node;
    size_t ncap = 1024, n = 0;
    cand *cs = malloc(ncap * sizeof *cs);
    if (!cs) {
        ctx_free(&x);
        return cl_error(CL_ERR_OOM, "cannot allocate the search");
    }
    cl_status st = CL_OK;
    int bf16 = fx->bf16 >= 0 ? fx->bf16 : hw->peak_bf16 > 0 && !hw->exact_memory;
    /* context parallelism: a token family's T cut into 2 cp chunks; searched only where the trainer runs it
     * (cp_check's refusals: no experts), else only where fixed (then refused by each candidate's prepare) */
    int experts = q->model.experts > 0;
    /* the context group's exchange: fixed, the run's (--cp-comm), else the ring */
    int cp_comm = fx->cp_comm > 0 ? fx->cp_comm : q->base ? q->base->cp_comm : CL_CP_RING;
    for (int tp = 1; tp <= q->devices && !st; tp++) {
        if (q->devices % tp || (fx->tp > 0 && tp != fx->tp) || (fx->tp <= 0 && tp > max_tp)) continue;
        for (int pp = 1; pp <= q->devices / tp && !st; pp++) {
            if ((q->devices / tp) % pp || (fx->pp > 0 && pp != fx->pp)) continue;
            for (int cp = 1; cp <= q->devices / tp / pp && !st; cp++) {
                if ((q->devices / tp / pp) % cp || (fx->cp > 0 && cp != fx->cp)) continue;
                if (cp > 1 && fx->cp <= 0 && (!tokens || experts || q->T % (2 * cp))) continue;
                int dp = q->devices / tp / pp / cp;
                if ((fx->dp > 0 && dp != fx->dp) || q->global_batch % dp) continue;
                int nb = nunits;
                if (pp > nb) break;
                int per = q->global_batch / dp;
                for (int mb = 1; mb <= per && mb <= 64 && !st; mb++) {
                    if (per % mb || (fx->mb > 0 && mb != fx->mb)) continue;
                    int m = per / mb;
                    int kinds[4], nk = 0;
                    if (pp == 1) kinds[nk++] = CL_SCHED_1F1B;
                    else if (fx->schedule >= 0) kinds[nk++] = fx->schedule;
                    else kinds[nk++] = CL_SCHED_1F1B, kinds[nk++] = CL_SCHED_ZB_H1, kinds[nk++] = CL_SCHED_INTERLEAVED;
                    for (int ki = 0; ki < nk && !st; ki++) {
                        int kind = kinds[ki];
                        for (int v = 1; v <= 64 && !st; v++) {
                            if (fx->v > 0 && v != fx->v && pp > 1) continue;
                            if ((kind == CL_SCHED_INTERLEAVED) != (v > 1)) continue;
                            if (kind == CL_SCHED_INTERLEAVED && m % pp) continue;
                            /* chunks of unequal blocks are valid (the trainer runs them) but searched only when
                             * --virtual-stages is fixed: they bound the search (1T on 3072: 5x the configurations) */
                            if (kind == CL_SCHED_INTERLEAVED && body && fx->v <= 0 && body % (pp * v)) continue;
                            if (pp * v > nb) break;
                            int zs[4], nz = opts_of(fx->zero, CL_ZERO_NONE, CL_ZERO_PARAMS, zs);
                            int off_hi = hw->exact_memory ? (hw->disk_bw > 0 ? CL_OFFLOAD_DISK : CL_OFFLOAD_HOST) : CL_OFFLOAD_NONE;
                            int os[3], no = opts_of(fx->offload, CL_OFFLOAD_NONE, off_hi, os);
                            int rs[3], nr = opts_of(fx->recompute, CL_RECOMPUTE_NONE, recomputable ? CL_RECOMPUTE_FULL : CL_RECOMPUTE_NONE, rs);
                            /* sequence parallelism: any tp > 1 of a token family, with or without cp (sp's rows within a
                             * context rank's chunks) */
                            int sps[2], ns = opts_of(fx->sp, 0, tp > 1 && tokens ? 1 : 0, sps), fit0 = 0;
                            /* expert parallelism: ep dividing dp and the experts (models with experts) */
                            int eps[64], nep = 0;
                            if (fx->ep > 0) eps[nep++] = fx->ep;
                            else
                                for (int e = 1; e <= dp && nep < 64; e++)
                                    if (e == 1 || (experts && dp % e == 0 && q->model.experts % e == 0)) eps[nep++] = e;
                            for (int ezi = 0; ezi < nep * nz && !st; ezi++) {
                                int zi = ezi % nz, ep = eps[ezi / nz];
                                if (dp * cp == 1 && cl_zero_shards_optim(zs[zi]) && fx->zero < 0) continue;
                                /* lean buckets and gathers: a memory option of ZeRO 2 and 3 over dp x cp > 1, as offload */
                                int nl = dp * cp > 1 && cl_zero_shards_grads(zs[zi]) ? 2 : 1;
                                for (int ri = 0; ri < nr && !st; ri++)
                                    for (int si = 0; si < ns * no * nl && !st; si++) {
                                        /* offload and lean last: memory options (host: the same time, disk and lean:
                                         * slower), tried only where the plain configuration does not fit, unless fixed */
                                        int oi = si / nl % no, li = si % nl;
                                        if (si % (no * nl) == 0) fit0 = 0;
                                        else if (fit0 && (fx->offload < 0 || oi == 0)) continue;
                                        cl_plan_cfg c = {dp, tp, pp, v, mb, kind, zs[zi], rs[ri], sps[si / (no * nl)], bf16, os[oi], li, cp, ep, cp > 1 ? cp_comm : 0};
                                        cand cd;
                                        cl_status e = eval_ctx(&x, &c, 0, &cd.r, &cd.lower);
                                        if (e == CL_ERR_INVALID || e == CL_ERR_UNSUPPORTED) {
                                            if (e == CL_ERR_UNSUPPORTED) snprintf(out->refused, sizeof out->refused, "%s", cl_last_error());
                                            cl_error_clear();
                                            continue;
                                        }
                                        if (e) {
                                            st = e;
                                            break;
                                        }
                                        out->considered++;
                                        if (si % (no * nl) == 0) fit0 = cd.r.fits;
                                        if (!cd.r.fits) {
                                            if (!out->have_nearest || cd.r.over_bytes < out->nearest.over_bytes) {
                                                out->nearest = cd.r;
                                                out->have_nearest = 1;
                                            }
                                            continue;
                                        }
                                        if (n == ncap) {
                                            cand *nc = realloc(cs, 2 * ncap * sizeof *cs);
                                            if (!nc) {
                                                st = cl_error(CL_ERR_OOM, "cannot grow the search");
                                                break;
                                            }
                                            cs = nc, ncap *= 2;
                                        }
                                        cs[n++] = cd;
                                    }
                            }
                        }
                    }
                }
            }
        }
    }
    if (!st) {
        out->fitted = (long)n;
        qsort(cs, n, sizeof *cs, by_est); /* by closed-form time */
        int top = q->top > 0 ? q->top : 10, maxs = q->max_sims > 0 ? q->max_sims : 64;
        double *best = calloc((size_t)top, sizeof *best); /* the top simulated times, ascending */
        int nbest = 0;
        if (!best) st = cl_error(CL_ERR_OOM, "cannot allocate the search");
        for (size_t i = 0; i < n && !st; i++) {
            if (cs[i].r.simulated) goto keep;
            if ((int)out->simulated_count >= maxs) continue;
            if (nbest == top && cs[i].lower >= best[top - 1]) continue;
            cl_plan_result r;
            if ((st = eval_ctx(&x, &cs[i].r.c, 1, &r, NULL))) break;
            out->simulated_count++;
            cs[i].r = r;
        keep : {
            double t = cs[i].r.step_s;
            if (nbest == top && t >= best[top - 1]) continue; /* not among the top */
            int j = nbest < top ? nbest++ : top - 1;
            while (j > 0 && best[j - 1] > t) best[j] = best[j - 1], j--;
            best[j] = t;
        }
        }
        free(best);
    }
    if (!st) {
        out->r = malloc((n ? n : 1) * sizeof *out->r);
        if (!out->r) st = cl_error(CL_ERR_OOM, "cannot allocate the results");
        for (size_t i = 0; !st && i < n; i++) out->r[i] = cs[i].r;
        if (!st) {
            out->n = (int)n;
            qsort(out->r, n, sizeof *out->r, by_step);
        }
    }
    free(cs);
    ctx_free(&x);
    if (st) cl_plan_list_free(out);
    return st;
}

/* ---- one configuration in detail --------------------------------------------- */

cl_status cl_plan_detail_of(const cl_plan_query *q, const cl_plan_cfg *c, cl_plan_detail *out) {
    memset(out, 0, sizeof *out);
    if (c->pp < 1 || c->pp > 4096) return cl_error(CL_ERR_INVALID, "pp %d: 1 to 4096", c->pp);
    out->p = c->pp;
    out->cat = calloc((size_t)c->pp, sizeof *out->cat);
    if (!out->cat) return cl_error(CL_ERR_OOM, "cannot allocate the memory of %d ranks", c->pp);
    plan_ctx x = {.q = q, .rank_cat = out->cat, .trace = &out->trace};
    cl_status s = eval_ctx(&x, c, 1, &out->r, NULL);
    ctx_free(&x);
    if (s) cl_plan_detail_free(out);
    return s;
}

void cl_plan_detail_free(cl_plan_detail *d) {
    free(d->cat);
    cl_trace_free(&d->trace);
    memset(d, 0, sizeof *d);
}
