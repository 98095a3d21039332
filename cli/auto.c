/* `cleave train --auto` and the nearest fitting configurations printed
 * after an out-of-memory refusal: the planner (src/plan/) on this machine's
 * description (`cleave plan calibrate`'s file, else default figures; see
 * docs/ARCHITECTURE.md "Planner"). */
#include "auto.h"

#include "cleave/kernels.h"
#include "plan/plan.h"

#include <stdlib.h>
#include <string.h>

/* Where the description came from, for the messages. */
static void hw_note(char *b, size_t n, int calibrated) {
    if (calibrated) snprintf(b, n, "this machine as calibrated in %s", cl_plan_this_path());
    else
        snprintf(b, n, "this machine at default figures (no %s; `cleave plan calibrate` measures it)", cl_plan_this_path());
}

/* The configuration c runs as a planner configuration. */
static cl_plan_cfg cfg_of(const cl_train_config *c, int dp, int tp, int pp) {
    int v = pp > 1 && c->schedule == CL_SCHED_INTERLEAVED ? (c->virtual_stages > 1 ? c->virtual_stages : 2) : 1;
    return (cl_plan_cfg){dp, tp, pp, v, c->micro_batch, pp > 1 ? c->schedule : CL_SCHED_1F1B, c->zero, c->recompute,
                         c->sequence_parallel, 0, c->offload_optimizer, 0, c->cp > 1 ? c->cp : 1, c->ep > 1 ? c->ep : 1,
                         c->cp > 1 ? c->cp_comm : 0};
}

static void shortfall(char *b, size_t n, const cl_plan_list *l) {
    const cl_plan_result *r = &l->nearest;
    char flags[256], need[32], over[32];
    cl_plan_cfg_flags(&r->c, flags, sizeof flags);
    cl_format_bytes((size_t)r->peak_bytes, need, sizeof need);
    cl_format_bytes((size_t)r->over_bytes, over, sizeof over);
    snprintf(b, n, "the smallest shortfall is %s over (%s needs %s on pipeline rank %d, its largest category %s)", over, flags, need, r->full_rank,
             cl_mem_cat_name((cl_mem_cat)r->over_cat));
}

/* --auto's plan for *ranks ranks with the dimensions dp, tp, pp
 * (0: searched) and the flags a gives fixed: prints the choice on f, sets
 * c's global batch (and its memory cap when none was given) and *ch to the
 * fastest configuration that fits, *ranks (0: one per core) to the ranks planned. */
static cl_status auto_plan(FILE *f, const cli_args *a, cl_train_config *c, int gb_given, int *ranks, int dp, int tp, int pp,
                           int schedule_given, cl_plan_cfg *ch) {
    if (cli_get(a, "pp-layout")) return cl_error(CL_ERR_INVALID, "--auto chooses the stages itself: leave out --pp-layout");
    cl_hw hw;
    int calibrated;
    CL_TRY(cl_plan_this_hw(&hw, &calibrated));
    int n = *ranks ? *ranks : hw.devices_per_node;
    /* the global batch is the run's (the search only splits it): given, else the micro-batch x dp given, else 8 */
    if (!gb_given) c->global_batch = cli_get(a, "micro-batch-size") ? c->micro_batch * (dp ? dp : 1) : 8;
    if (!c->device_memory) { /* as a run without --device-memory: its share of the host's available memory */
        size_t avail = cl_host_memory_available();
        if (avail) c->device_memory = avail / (size_t)n, c->device_memory_host = 1;
    }
    /* disk offload is searched only where the run names the directory its file would go in */
    if (!c->offload_dir) hw.disk_bw = 0;
    cl_plan_query q;
    cl_plan_query_for_train(c, n, &hw, &q);
    q.top = 2;
    q.fix.dp = dp ? dp : -1;
    q.fix.tp = tp ? tp : -1;
    q.fix.pp = pp ? pp : -1;
    if (cli_get(a, "micro-batch-size")) q.fix.mb = c->micro_batch;
    if (cli_get(a, "virtual-stages")) q.fix.v = c->virtual_stages;
    if (schedule_given) q.fix.schedule = c->schedule;
    if (cli_get(a, "zero")) q.fix.zero = c->zero;
    if (cli_get(a, "recompute")) q.fix.recompute = c->recompute;
    if (cli_get(a, "sequence-parallel")) q.fix.sp = 1;
    if (cli_get(a, "offload-optimizer")) q.fix.offload = c->offload_optimizer;
    if (cli_get(a, "cp") || cli_get(a, "context-parallel-size")) q.fix.cp = c->cp;
    if (cli_get(a, "ep") || cli_get(a, "expert-model-parallel-size")) q.fix.ep = c->ep;
    cl_plan_list l;
    CL_TRY(cl_plan_search(&q, &l));
    char capb[32], hwn[256];
    cl_format_bytes(c->device_memory, capb, sizeof capb);
    hw_note(hwn, sizeof hwn, calibrated);
    if (!l.considered) {
        cl_plan_list_free(&l);
        return cl_error(CL_ERR_INVALID,
                        "--auto: no configuration of %d ranks: dp x cp x tp x pp must make %d, with dp dividing the global batch %d, tp "
                        "dividing the heads, pp no more stages than the model has units, and the flags given",
                        n, n, c->global_batch);
    }
    if (!l.n) {
        char why[512];
        shortfall(why, sizeof why, &l);
        cl_plan_list_free(&l);
        return cl_error(CL_ERR_OOM, "--auto: no configuration of %d ranks fits %s per rank: %s", n, capb, why);
    }
    const cl_plan_result *b = &l.r[0];
    char flags[256], peak[32];
    int big = 0;
    for (int k = 1; k < CL_MEM_NCAT; k++)
        if (b->cat_bytes[k] > b->cat_bytes[big]) big = k;
    cl_plan_cfg_flags(&b->c, flags, sizeof flags);
    cl_format_bytes((size_t)b->peak_bytes, peak, sizeof peak);
    fprintf(f, "auto: planned %d ranks of %s, %s per rank, global batch %d x %d tokens: %ld configurations, %ld fit\n", n, hwn, capb,
           c->global_batch, q.T, l.considered, l.fitted);
    fprintf(f, "auto: chose %s --global-batch-size %d: the fastest predicted that fits, step %.4g s (%.4g tokens/s), fullest rank "
           "%s (pipeline rank %d, the most %s)\n",
           flags, c->global_batch, b->step_s, b->tokens_per_s, peak, b->full_rank, cl_mem_cat_name((cl_mem_cat)big));
    if (l.n > 1) {
        const cl_plan_result *r2 = &l.r[1];
        cl_plan_cfg_flags(&r2->c, flags, sizeof flags);
        cl_format_bytes((size_t)r2->peak_bytes, peak, sizeof peak);
        fprintf(f, "auto: runner-up %s: step %.4g s (%+.1f%%), fullest rank %s\n", flags, r2->step_s, 100 * (r2->step_s / b->step_s - 1),
               peak);
    } else {
        fprintf(f, "auto: runner-up: none (one configuration fits)\n");
    }
    *ch = b->c;
    *ranks = n;
    cl_plan_list_free(&l);
    return CL_OK;
}

/* A chosen configuration applied to the run, the same on every path (threads
 * or MPI, where each rank applies the one rank 0 chose): c's micro-batch,
 * tp, context parallelism, sequence parallelism, schedule, virtual stages,
 * ZeRO stage, recompute and offload, and the mesh's dp x cp x tp x pp. */
static void auto_apply(const cl_plan_cfg *ch, cl_train_config *c, int *dp, int *tp, int *pp, int *schedule_given) {
    *dp = ch->dp, *tp = ch->tp, *pp = ch->pp;
    cl_plan_cfg_to_train(ch, c);
    *schedule_given = ch->pp > 1;
}

cl_status cli_train_auto(FILE *f, const cli_args *a, cl_train_config *c, int gb_given, int *ranks, int *dp, int *tp, int *pp,
                         int *schedule_given) {
    cl_plan_cfg ch;
    CL_TRY(auto_plan(f, a, c, gb_given, ranks, *dp, *tp, *pp, *schedule_given, &ch));
    auto_apply(&ch, c, dp, tp, pp, schedule_given);
    return CL_OK;
}

/* What world rank 0 sends every rank: its plan's outcome, and on success the
 * configuration and the global batch. */
typedef struct {
    int status; /* cl_status of rank 0's plan */
    int global_batch;
    cl_plan_cfg ch;
    char msg[1024]; /* the failure's message */
} auto_choice;

cl_status cli_train_auto_mpi(cl_comm *world, FILE *f, const cli_args *a, cl_train_config *c, int gb_given, int *dp, int *tp, int *pp,
                             int *schedule_given) {
    int n = cl_comm_size(world), me = cl_comm_rank(world);
    if (!c->device_memory) { /* the smallest of the ranks' shares of their hosts' available memory (largest negation) */
        const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        int here = local && atoi(local) > 0 ? atoi(local) : 1;
        size_t avail = cl_host_memory_available();
        double share = avail ? -(double)(avail / (size_t)here) : -1e300;
        CL_TRY(cl_comm_allreduce(world, &share, 1, CL_F64, CL_RED_MAX));
        if (share > -1e300) c->device_memory = (size_t)-share, c->device_memory_host = 1;
    }
    auto_choice rec, *b = &rec; /* on the stack: no rank can fail before the broadcast */
    memset(b, 0, sizeof *b);
    if (me == 0) {
        b->status = (int)auto_plan(f, a, c, gb_given, &n, *dp, *tp, *pp, *schedule_given, &b->ch);
        if (b->status) snprintf(b->msg, sizeof b->msg, "%s", cl_last_error());
        b->global_batch = c->global_batch;
        fflush(f);
    }
    cl_status s = cl_comm_broadcast(world, b, sizeof *b, 0);
    if (!s && b->status) s = cl_comm_fail_together(world, cl_error((cl_status)b->status, "%s", b->msg));
    if (!s) {
        c->global_batch = b->global_batch;
        auto_apply(&b->ch, c, dp, tp, pp, schedule_given);
    }
    return s;
}

typedef struct {
    const cl_plan_result *r;
    int dist;
} near_row;

static int by_near(const void *x, const void *y) {
    const near_row *a = x, *b = y;
    if (a->dist != b->dist) return a->dist - b->dist;
    return (a->r->step_s > b->r->step_s) - (a->r->step_s < b->r->step_s);
}

/* None fits at n ranks: the nearest other rank count (n+1, n-1, n+2, ..., 1
 * to 2n + 2, at most 8 searched) where some configuration fits, its fastest
 * few. A cap that is the host's share is shared again among that count. */
static void other_ranks(FILE *f, const cl_train_config *c, int n, const cl_hw *hw) {
    size_t avail = c->device_memory_host ? cl_host_memory_available() : 0;
    int tries = 0, lo = n, hi = n;
    for (int d = 1; d <= n + 2 && tries < 8; d++)
        for (int sign = 1; sign >= -1 && tries < 8; sign -= 2) {
            int m = n + sign * d;
            if (m < 1) continue;
            tries++;
            lo = m < lo ? m : lo, hi = m > hi ? m : hi;
            cl_train_config cc = *c;
            if (avail) cc.device_memory = avail / (size_t)m;
            cl_plan_query q;
            cl_plan_query_for_train(&cc, m, hw, &q);
            q.top = 3;
            cl_plan_list l;
            if (cl_plan_search(&q, &l)) {
                cl_error_clear();
                continue;
            }
            if (!l.n) {
                cl_plan_list_free(&l);
                continue;
            }
            char capb[32], flags[256], peak[32];
            cl_format_bytes(cc.device_memory, capb, sizeof capb);
            fprintf(f, "planner: with --ranks %d, %d of %d configurations fit %s per rank; the fastest:\n", m, l.n, (int)l.considered,
                    capb);
            for (int i = 0; i < l.n && i < 3; i++) {
                cl_plan_cfg_flags(&l.r[i].c, flags, sizeof flags);
                cl_format_bytes((size_t)l.r[i].peak_bytes, peak, sizeof peak);
                fprintf(f, "  --ranks %d %s: peak %s per rank, step %.4g s%s\n", m, flags, peak, l.r[i].step_s,
                        l.r[i].simulated ? "" : " (closed form)");
            }
            cl_plan_list_free(&l);
            return;
        }
    fprintf(f, "planner: nor does any with --ranks %d to %d\n", lo, hi);
}

void cli_plan_nearest(FILE *f, const cl_train_config *c, int dp, int tp, int pp) {
    cl_hw hw;
    int calibrated, n = dp * tp * pp;
    if (cl_plan_this_hw(&hw, &calibrated)) {
        fprintf(f, "planner: %s\n", cl_last_error());
        cl_error_clear();
        return;
    }
    cl_plan_query q;
    cl_plan_query_for_train(c, n, &hw, &q);
    q.top = 4;
    cl_plan_list l;
    if (cl_plan_search(&q, &l)) {
        fprintf(f, "planner: %s\n", cl_last_error());
        cl_error_clear();
        return;
    }
    char capb[32], hwn[256], flags[256], peak[32];
    cl_format_bytes(c->device_memory, capb, sizeof capb);
    hw_note(hwn, sizeof hwn, calibrated);
    if (!l.n) {
        char why[512] = "no configuration is valid";
        if (l.have_nearest) shortfall(why, sizeof why, &l);
        fprintf(f, "planner, for %s: no configuration of %d rank%s fits %s per rank: %s\n", hwn, n, n == 1 ? "" : "s", capb, why);
        cl_plan_list_free(&l);
        other_ranks(f, c, n, &hw);
        return;
    }
    near_row *rows = malloc((size_t)l.n * sizeof *rows);
    if (!rows) {
        cl_plan_list_free(&l);
        return;
    }
    cl_plan_cfg ref = cfg_of(c, dp, tp, pp);
    for (int i = 0; i < l.n; i++) rows[i] = (near_row){&l.r[i], cl_plan_cfg_distance(&l.r[i].c, &ref)};
    qsort(rows, (size_t)l.n, sizeof *rows, by_near);
    fprintf(f, "planner, for %s: %d of %d configurations of %d rank%s fit %s per rank; the nearest (fewest flags changed, then "
               "fastest):\n",
            hwn, l.n, (int)l.considered, n, n == 1 ? "" : "s", capb);
    for (int i = 0; i < l.n && i < 4; i++) {
        cl_plan_cfg_flags(&rows[i].r->c, flags, sizeof flags);
        cl_format_bytes((size_t)rows[i].r->peak_bytes, peak, sizeof peak);
        fprintf(f, "  %s: peak %s per rank, step %.4g s%s\n", flags, peak, rows[i].r->step_s, rows[i].r->simulated ? "" : " (closed form)");
    }
    free(rows);
    cl_plan_list_free(&l);
}
