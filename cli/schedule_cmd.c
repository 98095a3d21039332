/* `cleave schedule`: builds a pipeline schedule (gpipe, 1f1b, interleaved,
 * zb-h1), prints each rank's actions, simulates it and prints the makespan,
 * bubble fractions (with the closed form where one is known), peak live
 * micro-batches and an ASCII timeline. Runs no model. Errors exit 2 with one
 * line (cli_fail). */
#include "args.h"
#include "cleave/schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMELINE_MAX_SLOTS 2000

static const cli_flag sched_flags[] = {
    {"help", "h", 0, "show this help"},
    {"pp", "", 1, "pipeline ranks p (required)"},
    {"micro-batches", "", 1, "micro-batches per step m (required)"},
    {"schedule", "", 1, "gpipe, 1f1b (default), interleaved or zb-h1"},
    {"virtual-stages", "", 1, "chunks per rank v (interleaved only; default 2 there, 1 otherwise)"},
    {"cost-f", "", 1, "time of a forward per stage-chunk (default 1)"},
    {"cost-b", "", 1, "time of a backward-input (B) per stage-chunk (default 1)"},
    {"cost-w", "", 1, "time of a backward-weight (W) per stage-chunk (default 1); BWD costs B + W"},
    {"verbose", "v", 0, "also list sends, receives, GRAD_SYNC and OPT_STEP"},
};

static char act_letter(const cl_action *a) {
    char c;
    switch (a->kind) {
    case CL_ACT_FWD: c = 'F'; break;
    case CL_ACT_BWD_INPUT: c = 'B'; break;
    case CL_ACT_BWD_WEIGHT: c = 'W'; break;
    case CL_ACT_BWD: c = 'B'; break;
    default: return 0;
    }
    return (a->chunk % 2) ? (char)(c - 'A' + 'a') : c; /* odd chunks in lowercase */
}

static void print_action(const cl_schedule *s, const cl_action *a, int verbose) {
    char l = act_letter(a);
    if (l) {
        if (s->v > 1) printf(" %c%d.%d", l, a->mb, a->chunk);
        else printf(" %c%d", l, a->mb);
        return;
    }
    if (!verbose) return;
    switch (a->kind) {
    case CL_ACT_SEND_ACT: printf(" sa%d", a->mb); break;
    case CL_ACT_RECV_ACT: printf(" ra%d", a->mb); break;
    case CL_ACT_SEND_GRAD: printf(" sg%d", a->mb); break;
    case CL_ACT_RECV_GRAD: printf(" rg%d", a->mb); break;
    case CL_ACT_GRAD_SYNC: printf(" SYNC"); break;
    case CL_ACT_OPT_STEP: printf(" STEP"); break;
    default: break;
    }
    if (s->v > 1 && cl_act_on_microbatch(a->kind)) printf(".%d", a->chunk);
}

static void print_timeline(const cl_schedule *s, const cl_sim_result *res, double slot) {
    double ns = ceil(res->makespan / slot - 1e-9);
    if (!(ns <= TIMELINE_MAX_SLOTS)) {
        printf("timeline: %.0f slots, too wide to draw (at most %d)\n", ns, TIMELINE_MAX_SLOTS);
        return;
    }
    long nslots = (long)ns;
    int w = 1;
    for (int x = s->m - 1; x >= 10; x /= 10) w++;
    printf("timeline (one column = %g time units; F forward, %s%s; '.' idle):\n", slot,
           s->kind == CL_SCHED_ZB_H1 ? "B backward input, W weight gradient" : "B backward (B + W)",
           s->v > 1 ? "; lowercase = odd chunk" : "");
    for (int r = 0; r < s->p; r++) {
        printf("rank %-3d|", r);
        for (long t = 0; t < nslots; t++) {
            double mid = (t + 0.5) * slot;
            char c[24];
            snprintf(c, sizeof c, "%-*s", w + 1, ".");
            for (int i = 0; i < s->len[r]; i++) {
                const cl_action *a = &s->acts[r][i];
                char l = act_letter(a);
                if (l && res->start[r][i] <= mid && mid < res->end[r][i]) {
                    snprintf(c, sizeof c, "%c%-*d", l, w, a->mb);
                    break;
                }
            }
            printf("%s%s", c, t + 1 < nslots ? " " : "");
        }
        printf("|\n");
    }
}

int cleave_cmd_schedule(int argc, char **argv) {
    cli_args a;
    cl_status s = cli_parse(&a, sched_flags, NFLAGS(sched_flags), argc, argv, 2);
    if (s) return cli_fail(s);
    if (cli_get(&a, "help")) {
        cli_print_help("usage: cleave schedule --pp P --micro-batches M [--schedule gpipe|1f1b|interleaved|zb-h1]\n"
                       "                       [--virtual-stages V] [--cost-f X --cost-b Y --cost-w Z] [--verbose]\n\n"
                       "Builds one training step's pipeline schedule for P ranks and M micro-batches, prints each\n"
                       "rank's actions (F forward, B backward or backward-input, W weight gradient; with\n"
                       "--virtual-stages, F3.1 is micro-batch 3 on chunk 1), simulates it with the given\n"
                       "costs (communication free) and prints the makespan, bubble fraction per rank and overall,\n"
                       "the closed form where one is known, peak live micro-batches per rank and a timeline.\n"
                       "Chunk c on rank r is model stage c*P + r. interleaved needs M to be a multiple of P.",
                       sched_flags, NFLAGS(sched_flags));
        return 0;
    }
    if (!cli_get(&a, "pp")) return cli_fail(cl_error(CL_ERR_INVALID, "--pp is required: the number of pipeline ranks"));
    if (!cli_get(&a, "micro-batches")) return cli_fail(cl_error(CL_ERR_INVALID, "--micro-batches is required"));
    int p = 0, m = 0, v = 0;
    if ((s = cli_int(&a, "pp", &p, 1, 4096))) return cli_fail(s);
    if ((s = cli_int(&a, "micro-batches", &m, 1, 1 << 20))) return cli_fail(s);
    cl_sched_kind kind = CL_SCHED_1F1B;
    if (cli_get(&a, "schedule") && (s = cl_sched_kind_parse(cli_get(&a, "schedule"), &kind))) return cli_fail(s);
    v = kind == CL_SCHED_INTERLEAVED ? 2 : 1;
    if ((s = cli_int(&a, "virtual-stages", &v, 1, 64))) return cli_fail(s);
    float tf = 1, tb = 1, tw = 1;
    if ((s = cli_float(&a, "cost-f", &tf, 0, 1e9)) || (s = cli_float(&a, "cost-b", &tb, 0, 1e9)) ||
        (s = cli_float(&a, "cost-w", &tw, 0, 1e9)))
        return cli_fail(s);
    if (tf <= 0) return cli_fail(cl_error(CL_ERR_INVALID, "--cost-f must be positive: costs are in units of a forward"));
    cl_schedule sc;
    if ((s = cl_schedule_make(kind, p, m, v, &sc))) return cli_fail(s);
    cl_sched_costs costs = cl_sched_costs_uniform(tf, tb, tw);
    cl_sim_result res;
    if ((s = cl_schedule_simulate(&sc, &costs, &res))) {
        cl_schedule_free(&sc);
        return cli_fail(cl_error_context(CL_ERR_INTERNAL, "the generated schedule failed its check"));
    }
    int verbose = cli_get(&a, "verbose") != NULL;
    printf("schedule %s: %d rank%s, %d micro-batch%s", cl_sched_kind_name(kind), p, p == 1 ? "" : "s", m, m == 1 ? "" : "es");
    if (v > 1) printf(", %d virtual stages per rank (%d stages)", v, p * v);
    printf("; costs F %g, B %g, W %g%s\n", (double)tf, (double)tb, (double)tw,
           kind == CL_SCHED_ZB_H1 ? "" : " (a backward B costs B + W)");
    for (int r = 0; r < p; r++) {
        printf("rank %d:", r);
        for (int i = 0; i < sc.len[r]; i++) print_action(&sc, &sc.acts[r][i], verbose);
        printf("\n");
    }
    printf("makespan: %.4g (in units of F)\n", res.makespan / tf);
    printf("bubble: overall %.4f;", res.bubble_total);
    for (int r = 0; r < p; r++) printf(" rank %d %.4f", r, res.bubble[r]);
    printf("\n");
    double cf = cl_schedule_closed_form_bubble(kind, p, m, v, tf, tb, tw);
    if (cf >= 0) {
        const char *form = kind == CL_SCHED_INTERLEAVED ? "((p-1)/v)/(m+(p-1)/v)"
                           : kind == CL_SCHED_ZB_H1     ? "(p-1)(F+B-W) idle per rank"
                                                        : "(p-1)/(m+p-1)";
        printf("closed form: %.4f from %s\n", cf, form);
    } else {
        printf("closed form: none for these sizes and costs\n");
    }
    printf("peak live micro-batches:");
    for (int r = 0; r < p; r++) printf(" rank %d %d%s", r, res.peak_live[r], r + 1 < p ? ";" : "");
    printf("\n");
    double slot = tf;
    if (tb > 0 && tb < slot) slot = tb;
    if (kind == CL_SCHED_ZB_H1 && tw > 0 && tw < slot) slot = tw;
    print_timeline(&sc, &res, slot);
    cl_sim_result_free(&res);
    cl_schedule_free(&sc);
    return 0;
}
