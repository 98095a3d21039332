/* The schedule simulator (see cleave/schedule.h). Each rank runs its list in
 * order. Compute and sends depend only on what this rank did before, so when
 * their dependency is missing it never will be there: that is an error at
 * once. Only receives wait on another rank; when no rank can move and some
 * have actions left, the schedule deadlocks. Times: an action starts when the
 * rank is free (a receive: also not before the matching send). */
#include "cleave/schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BK_NONE = 0, BK_SPLIT = 1, BK_COMBINED = 2 };

typedef struct {
    const cl_schedule *s;
    int p, m, v, S;
    double *fcost, *bcost, *wcost; /* [S] */
    double t_act, t_grad;          /* message flight times */
    const double *sync, *opt;      /* [p] or NULL */
    /* [m * S], indexed mb * S + stage; times, < 0 if not yet */
    double *f_end, *b_end, *w_end, *act_sent, *grad_sent;
    char *act_recv, *grad_recv, *bkind;
    int *pc;            /* [p] next action */
    double *free_at;    /* [p] */
    int *live, *wdone;  /* [p] */
    int *synced, *stepped; /* [p] */
    cl_sim_result *res;
} sim;

static void describe(const cl_action *a, char *buf, size_t n) {
    if (a->kind == CL_ACT_GRAD_SYNC || a->kind == CL_ACT_OPT_STEP) snprintf(buf, n, "%s", cl_act_kind_name(a->kind));
    else snprintf(buf, n, "%s mb %d chunk %d", cl_act_kind_name(a->kind), a->mb, a->chunk);
}

static cl_status bad(const sim *z, int r, const cl_action *a, const char *why) {
    char d[64];
    describe(a, d, sizeof d);
    return cl_error(CL_ERR_INVALID, "invalid schedule: rank %d, action %d (%s): %s", r, z->pc[r], d, why);
}

static int rank_of(const sim *z, int stage) { return stage % z->p; }

/* 1: executed; 0: blocked (a receive waiting for its send); CL error < 0 via *err. */
static int step(sim *z, int r, cl_status *err) {
    const cl_action *a = &z->s->acts[r][z->pc[r]];
    char why[160];
    *err = CL_OK;
    int is_comp = cl_act_is_compute(a->kind), is_comm = cl_act_is_message(a->kind);
    if ((unsigned)a->kind >= CL_ACT_NKINDS) return *err = bad(z, r, a, "unknown action kind"), -1;
    if ((is_comp || is_comm) && (a->mb < 0 || a->mb >= z->m)) {
        snprintf(why, sizeof why, "micro-batch %d is not in 0..%d", a->mb, z->m - 1);
        return *err = bad(z, r, a, why), -1;
    }
    if ((is_comp || is_comm) && (a->chunk < 0 || a->chunk >= z->v)) {
        snprintf(why, sizeof why, "chunk %d is not in 0..%d", a->chunk, z->v - 1);
        return *err = bad(z, r, a, why), -1;
    }
    int st = a->chunk * z->p + r, S = z->S;
    long ix = (long)a->mb * S + st;
    double t = z->free_at[r], dur = 0;
    int prev_local = st > 0 && rank_of(z, st - 1) == r, next_local = st < S - 1 && rank_of(z, st + 1) == r;
    switch (a->kind) {
    case CL_ACT_FWD:
        if (z->f_end[ix] >= 0) return *err = bad(z, r, a, "duplicate forward"), -1;
        if (st > 0 && prev_local && z->f_end[ix - 1] < 0) {
            snprintf(why, sizeof why, "forward before the forward of stage %d (same rank) that feeds it", st - 1);
            return *err = bad(z, r, a, why), -1;
        }
        if (st > 0 && !prev_local && !z->act_recv[ix]) {
            snprintf(why, sizeof why, "forward before its input from stage %d (rank %d) is received: no RECV_ACT before it", st - 1,
                     rank_of(z, st - 1));
            return *err = bad(z, r, a, why), -1;
        }
        dur = z->fcost[st];
        z->f_end[ix] = t + dur;
        if (++z->live[r] > z->res->peak_live[r]) z->res->peak_live[r] = z->live[r];
        break;
    case CL_ACT_BWD_INPUT:
    case CL_ACT_BWD:
        if (z->bkind[ix]) return *err = bad(z, r, a, "duplicate backward"), -1;
        if (z->f_end[ix] < 0) return *err = bad(z, r, a, "backward before its forward on this rank"), -1;
        if (st < S - 1 && next_local && z->b_end[ix + 1] < 0) {
            snprintf(why, sizeof why, "backward before the backward of stage %d (same rank) that feeds it", st + 1);
            return *err = bad(z, r, a, why), -1;
        }
        if (st < S - 1 && !next_local && !z->grad_recv[ix]) {
            snprintf(why, sizeof why, "backward before its output gradient from stage %d (rank %d) is received: no RECV_GRAD before it",
                     st + 1, rank_of(z, st + 1));
            return *err = bad(z, r, a, why), -1;
        }
        if (a->kind == CL_ACT_BWD) {
            dur = z->bcost[st] + z->wcost[st];
            z->bkind[ix] = BK_COMBINED;
            z->b_end[ix] = z->w_end[ix] = t + dur;
            z->live[r]--;
            z->wdone[r]++;
        } else {
            dur = z->bcost[st];
            z->bkind[ix] = BK_SPLIT;
            z->b_end[ix] = t + dur;
        }
        break;
    case CL_ACT_BWD_WEIGHT:
        if (z->bkind[ix] == BK_COMBINED) return *err = bad(z, r, a, "W for a micro-batch-chunk whose backward was a combined BWD"), -1;
        if (z->bkind[ix] != BK_SPLIT) return *err = bad(z, r, a, "W before its B on this rank"), -1;
        if (z->w_end[ix] >= 0) return *err = bad(z, r, a, "duplicate W"), -1;
        dur = z->wcost[st];
        z->w_end[ix] = t + dur;
        z->live[r]--;
        z->wdone[r]++;
        break;
    case CL_ACT_SEND_ACT:
        if (st == S - 1 || next_local) return *err = bad(z, r, a, "nothing to send: the next stage is absent or on this rank"), -1;
        if (z->f_end[ix] < 0) return *err = bad(z, r, a, "sends an activation before its forward"), -1;
        if (z->act_sent[ix] >= 0) return *err = bad(z, r, a, "duplicate send"), -1;
        z->act_sent[ix] = t;
        break;
    case CL_ACT_SEND_GRAD:
        if (st == 0 || prev_local) return *err = bad(z, r, a, "nothing to send: the previous stage is absent or on this rank"), -1;
        if (z->b_end[ix] < 0) return *err = bad(z, r, a, "sends a gradient before its backward"), -1;
        if (z->grad_sent[ix] >= 0) return *err = bad(z, r, a, "duplicate send"), -1;
        z->grad_sent[ix] = t;
        break;
    case CL_ACT_RECV_ACT:
        if (st == 0 || prev_local) return *err = bad(z, r, a, "nothing to receive: the previous stage is absent or on this rank"), -1;
        if (z->act_recv[ix]) return *err = bad(z, r, a, "duplicate receive"), -1;
        if (z->act_sent[ix - 1] < 0) return 0;
        if (z->act_sent[ix - 1] + z->t_act > t) t = z->act_sent[ix - 1] + z->t_act;
        z->act_recv[ix] = 1;
        break;
    case CL_ACT_RECV_GRAD:
        if (st == S - 1 || next_local) return *err = bad(z, r, a, "nothing to receive: the next stage is absent or on this rank"), -1;
        if (z->grad_recv[ix]) return *err = bad(z, r, a, "duplicate receive"), -1;
        if (z->grad_sent[ix + 1] < 0) return 0;
        if (z->grad_sent[ix + 1] + z->t_grad > t) t = z->grad_sent[ix + 1] + z->t_grad;
        z->grad_recv[ix] = 1;
        break;
    case CL_ACT_GRAD_SYNC:
        if (z->synced[r]) return *err = bad(z, r, a, "duplicate GRAD_SYNC"), -1;
        if (z->wdone[r] != z->m * z->v) {
            snprintf(why, sizeof why, "GRAD_SYNC after %d of the rank's %d weight gradients", z->wdone[r], z->m * z->v);
            return *err = bad(z, r, a, why), -1;
        }
        z->synced[r] = 1;
        dur = z->sync ? z->sync[r] : 0;
        break;
    case CL_ACT_OPT_STEP:
        if (z->stepped[r]) return *err = bad(z, r, a, "duplicate OPT_STEP"), -1;
        if (!z->synced[r]) return *err = bad(z, r, a, "OPT_STEP before GRAD_SYNC"), -1;
        z->stepped[r] = 1;
        dur = z->opt ? z->opt[r] : 0;
        break;
    case CL_ACT_RING_SEND: /* trace-only kinds, refused above */
    case CL_ACT_RING_RECV: return *err = bad(z, r, a, "unknown action kind"), -1;
    }
    z->res->start[r][z->pc[r]] = t;
    z->res->end[r][z->pc[r]] = t + dur;
    if (is_comp) z->res->busy[r] += dur;
    z->free_at[r] = t + dur;
    z->pc[r]++;
    return 1;
}

/* Names the blocked rank whose sender has no matching send left, if any (a
 * missing send); else the first blocked rank (ranks waiting on each other). */
static cl_status deadlock(sim *z) {
    int pick = -1, blocked = 0, orphan = 0;
    for (int r = 0; r < z->p; r++) {
        if (z->pc[r] >= z->s->len[r]) continue;
        blocked++;
        const cl_action *a = &z->s->acts[r][z->pc[r]];
        int st = a->chunk * z->p + r, from = a->kind == CL_ACT_RECV_ACT ? st - 1 : st + 1, q = rank_of(z, from);
        cl_act_kind want = a->kind == CL_ACT_RECV_ACT ? CL_ACT_SEND_ACT : CL_ACT_SEND_GRAD;
        int found = 0;
        for (int i = z->pc[q]; i < z->s->len[q] && !found; i++) {
            const cl_action *b = &z->s->acts[q][i];
            found = b->kind == want && b->mb == a->mb && b->chunk * z->p + q == from;
        }
        if (!found && !orphan) {
            pick = r;
            orphan = 1;
        } else if (pick < 0) {
            pick = r;
        }
    }
    const cl_action *a = &z->s->acts[pick][z->pc[pick]];
    char d[64];
    describe(a, d, sizeof d);
    int st = a->chunk * z->p + pick;
    int from = a->kind == CL_ACT_RECV_ACT ? st - 1 : st + 1;
    return cl_error(CL_ERR_INVALID,
                    "invalid schedule: deadlock: rank %d is stuck at action %d (%s), waiting for stage %d on rank %d, which %s "
                    "(%d rank%s blocked)",
                    pick, z->pc[pick], d, from, rank_of(z, from), orphan ? "has no matching send left" : "is blocked too", blocked,
                    blocked == 1 ? "" : "s");
}

static cl_status final_checks(sim *z) {
    int p = z->p, S = z->S;
    for (int pass = 0; pass < 2; pass++) /* unmatched sends first, then missing compute */
        for (int mb = 0; mb < z->m; mb++)
            for (int st = 0; st < S; st++) {
                long ix = (long)mb * S + st;
                int r = rank_of(z, st), c = st / p;
                const char *miss = z->f_end[ix] < 0 ? "FWD" : !z->bkind[ix] ? "backward (B or BWD)" : z->w_end[ix] < 0 ? "BWD_WEIGHT" : NULL;
                if (pass == 1 && miss)
                    return cl_error(CL_ERR_INVALID, "invalid schedule: rank %d has no %s for micro-batch %d chunk %d (stage %d)", r, miss, mb,
                                    c, st);
                if (pass == 0 && z->act_sent[ix] >= 0 && !z->act_recv[ix + 1])
                    return cl_error(CL_ERR_INVALID,
                                    "invalid schedule: rank %d sends the activation of micro-batch %d chunk %d to rank %d, which never "
                                    "receives it",
                                    r, mb, c, rank_of(z, st + 1));
                if (pass == 0 && z->grad_sent[ix] >= 0 && !z->grad_recv[ix - 1])
                    return cl_error(CL_ERR_INVALID,
                                    "invalid schedule: rank %d sends the gradient of micro-batch %d chunk %d to rank %d, which never "
                                    "receives it",
                                    r, mb, c, rank_of(z, st - 1));
            }
    for (int r = 0; r < p; r++) {
        if (!z->synced[r]) return cl_error(CL_ERR_INVALID, "invalid schedule: rank %d has no GRAD_SYNC", r);
        if (!z->stepped[r]) return cl_error(CL_ERR_INVALID, "invalid schedule: rank %d has no OPT_STEP", r);
    }
    return CL_OK;
}

void cl_sim_result_free(cl_sim_result *res) {
    if (!res) return;
    if (res->start) free(res->start[0]);
    free(res->start);
    free(res->end);
    free(res->busy);
    free(res->bubble);
    free(res->peak_live);
    free(res->len);
    memset(res, 0, sizeof *res);
}

static cl_status check_cost(const char *name, double x, int st) {
    if (!isfinite(x) || x < 0) {
        if (st < 0) return cl_error(CL_ERR_INVALID, "cost %s must be finite and >= 0 (got %g)", name, x);
        return cl_error(CL_ERR_INVALID, "cost %s of stage %d must be finite and >= 0 (got %g)", name, st, x);
    }
    return CL_OK;
}

cl_status cl_schedule_simulate(const cl_schedule *s, const cl_sched_costs *costs, cl_sim_result *res) {
    return cl_schedule_simulate_ex(s, costs, NULL, res);
}

cl_status cl_schedule_simulate_ex(const cl_schedule *s, const cl_sched_costs *costs, const cl_sched_extra *extra,
                                  cl_sim_result *res) {
    memset(res, 0, sizeof *res);
    cl_sched_extra none = {0, 0, NULL, NULL};
    if (!extra) extra = &none;
    if (!s || s->p < 1 || s->m < 1 || s->v < 1 || !s->len || !s->acts)
        return cl_error(CL_ERR_INVALID, "simulate: the schedule is empty or malformed");
    cl_sched_costs uni = cl_sched_costs_uniform(1, 1, 1);
    if (!costs) costs = &uni;
    CL_TRY(check_cost("F", costs->tf, -1));
    CL_TRY(check_cost("B", costs->tb, -1));
    CL_TRY(check_cost("W", costs->tw, -1));
    CL_TRY(check_cost("t_act", extra->t_act, -1));
    CL_TRY(check_cost("t_grad", extra->t_grad, -1));
    for (int r = 0; r < s->p; r++) {
        if (extra->sync) CL_TRY(check_cost("GRAD_SYNC", extra->sync[r], -1));
        if (extra->opt) CL_TRY(check_cost("OPT_STEP", extra->opt[r], -1));
    }
    sim z;
    memset(&z, 0, sizeof z);
    z.s = s;
    z.p = s->p;
    z.m = s->m;
    z.v = s->v;
    z.S = s->p * s->v;
    z.res = res;
    z.t_act = extra->t_act;
    z.t_grad = extra->t_grad;
    z.sync = extra->sync;
    z.opt = extra->opt;
    size_t n = (size_t)z.m * z.S, P = (size_t)z.p, total = 0;
    for (int r = 0; r < z.p; r++) total += (size_t)s->len[r];
    cl_status st = CL_OK;
    z.fcost = malloc((size_t)z.S * sizeof(double));
    z.bcost = malloc((size_t)z.S * sizeof(double));
    z.wcost = malloc((size_t)z.S * sizeof(double));
    z.f_end = malloc(n * sizeof(double));
    z.b_end = malloc(n * sizeof(double));
    z.w_end = malloc(n * sizeof(double));
    z.act_sent = malloc(n * sizeof(double));
    z.grad_sent = malloc(n * sizeof(double));
    z.act_recv = calloc(n, 1);
    z.grad_recv = calloc(n, 1);
    z.bkind = calloc(n, 1);
    z.pc = calloc(P, sizeof(int));
    z.free_at = calloc(P, sizeof(double));
    z.live = calloc(P, sizeof(int));
    z.wdone = calloc(P, sizeof(int));
    z.synced = calloc(P, sizeof(int));
    z.stepped = calloc(P, sizeof(int));
    res->p = z.p;
    res->busy = calloc(P, sizeof(double));
    res->bubble = calloc(P, sizeof(double));
    res->peak_live = calloc(P, sizeof(int));
    res->len = calloc(P, sizeof(int));
    res->start = calloc(P, sizeof(double *));
    res->end = calloc(P, sizeof(double *));
    double *times = malloc((2 * total + 1) * sizeof(double));
    if (!z.fcost || !z.bcost || !z.wcost || !z.f_end || !z.b_end || !z.w_end || !z.act_sent || !z.grad_sent || !z.act_recv ||
        !z.grad_recv || !z.bkind || !z.pc || !z.free_at || !z.live || !z.wdone || !z.synced || !z.stepped || !res->busy ||
        !res->bubble || !res->peak_live || !res->len || !res->start || !res->end || !times) {
        free(times);
        st = cl_error(CL_ERR_OOM, "simulate: cannot allocate the state for %d ranks x %zu actions", z.p, total);
        goto done;
    }
    for (int r = 0, off = 0; r < z.p; r++) {
        res->len[r] = s->len[r];
        res->start[r] = times + off;
        res->end[r] = times + total + off;
        off += s->len[r];
    }
    for (int i = 0; i < z.S && st == CL_OK; i++) {
        z.fcost[i] = costs->f ? costs->f[i] : costs->tf;
        z.bcost[i] = costs->b ? costs->b[i] : costs->tb;
        z.wcost[i] = costs->w ? costs->w[i] : costs->tw;
        if ((st = check_cost("F", z.fcost[i], i)) || (st = check_cost("B", z.bcost[i], i)) || (st = check_cost("W", z.wcost[i], i))) break;
    }
    if (st) goto done;
    for (size_t i = 0; i < n; i++) z.f_end[i] = z.b_end[i] = z.w_end[i] = z.act_sent[i] = z.grad_sent[i] = -1;
    for (;;) {
        int moved = 0, left = 0;
        for (int r = 0; r < z.p; r++) {
            while (z.pc[r] < s->len[r]) {
                int k = step(&z, r, &st);
                if (k < 0) goto done;
                if (k == 0) break;
                moved = 1;
            }
            if (z.pc[r] < s->len[r]) left = 1;
        }
        if (!left) break;
        if (!moved) {
            st = deadlock(&z);
            goto done;
        }
    }
    if ((st = final_checks(&z))) goto done;
    res->makespan = 0;
    for (int r = 0; r < z.p; r++)
        for (int i = 0; i < s->len[r]; i++)
            if (res->end[r][i] > res->makespan) res->makespan = res->end[r][i];
    double idle = 0;
    for (int r = 0; r < z.p; r++) {
        res->bubble[r] = res->makespan > 0 ? (res->makespan - res->busy[r]) / res->makespan : 0;
        idle += res->makespan - res->busy[r];
    }
    res->bubble_total = res->makespan > 0 ? idle / (z.p * res->makespan) : 0;
done:
    free(z.fcost);
    free(z.bcost);
    free(z.wcost);
    free(z.f_end);
    free(z.b_end);
    free(z.w_end);
    free(z.act_sent);
    free(z.grad_sent);
    free(z.act_recv);
    free(z.grad_recv);
    free(z.bkind);
    free(z.pc);
    free(z.free_at);
    free(z.live);
    free(z.wdone);
    free(z.synced);
    free(z.stepped);
    if (st) cl_sim_result_free(res);
    return st;
}
