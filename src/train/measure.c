/* What the pipeline executor (pipeline.c) reports about itself: the stage
 * table (cleave train prints it), each action's time into the per-stage
 * cost sums and the timeline (--trace, gathered to world rank 0 as a Chrome
 * trace), and each step's measured bubble beside the simulator's figure on
 * the measured stage times. */
#include "cleave/comm.h"
#include "cleave/schedule.h"
#include "cleave/trace.h"
#include "cleave/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/pp.h"

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

cl_status cl_pp_record(struct cl_pp *pp, int trace, int step, const cl_action *a, double t0, double t1) {
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

/* Measured bubble and the simulator's figure on this step's measured
 * per-stage times. */
cl_status cl_pp_bubble_figures(struct cl_pp *pp, double busy, double span, cl_step_stats *st) {
    int p = pp->p, S = pp->S;
    double *v = calloc((size_t)(2 * p + 6 * S), sizeof *v);
    if (!v) return cl_error(CL_ERR_OOM, "cannot allocate bubble figures");
    v[pp->r] = busy;
    v[p + pp->r] = span;
    for (int i = 0; i < 3 * S; i++) {
        v[2 * p + i] = pp->cost_sum[i];
        v[2 * p + 3 * S + i] = pp->cost_n[i];
    }
    cl_status s = cl_comm_allreduce(pp->comm, v, (size_t)(2 * p + 6 * S), CL_F64, CL_RED_SUM);
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

/* ---- the timeline ------------------------------------------------------------ */

#define TRACE_TAG CL_TAG_FIRST(CL_TAG_TRACE)

cl_status cl_trainer_write_trace(cl_trainer *t, cl_comm *world, const char *path, int last_steps) {
    struct cl_pp *pp = t->pp;
    if (pp->p < 2 && t->cp < 2) return cl_error(CL_ERR_INVALID, "--trace needs a pipeline (--pp > 1) or a context ring (--cp > 1)");
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
