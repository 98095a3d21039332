/* `cleave trace render`: draws a pipeline timeline as SVG, either from a
 * Chrome trace file (one step of it) or from a schedule run through the
 * simulator (which can also be written as a Chrome trace with --json). Prints
 * one line saying what it drew and the measured bubble per rank, and with
 * the context ring's transfers in the step a second line: how much of their
 * flight was hidden behind compute (cl_trace_ring_summary). Errors exit
 * 2 with one line (cli_fail). */
#include "args.h"
#include "cleave/schedule.h"
#include "cleave/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const cli_flag render_flags[] = {
    {"help", "h", 0, "show this help"},
    {"out", "o", 1, "SVG file to write (required)"},
    {"step", "", 1, "training step to draw (default 0: the first in the trace)"},
    {"schedule", "", 1, "draw a simulated schedule instead of a file: gpipe, 1f1b, interleaved or zb-h1"},
    {"pp", "", 1, "with --schedule: pipeline ranks p"},
    {"micro-batches", "", 1, "with --schedule: micro-batches per step m"},
    {"virtual-stages", "", 1, "with --schedule: chunks per rank v (interleaved: default 2, else 1)"},
    {"json", "", 1, "with --schedule: also write the simulated step as a Chrome trace to this file"},
};

static const char *const render_usage =
    "usage: cleave trace render FILE --out F.svg [--step N]\n"
    "       cleave trace render --schedule KIND --pp P --micro-batches M [--virtual-stages V] --out F.svg [--json F.json]\n\n"
    "Draws one training step as a pipeline diagram: one row per rank, a box per compute action\n"
    "(F forward blue, B backward-input green, W backward-weight purple, BWD combined backward orange),\n"
    "labelled with the micro-batch (mb.chunk with virtual stages), idle time blank, a time axis and\n"
    "the measured bubble of each rank (1 - busy / the step's span). FILE is a Chrome trace as cleave\n"
    "writes it (opens in Perfetto or chrome://tracing). A trace of a --cp ring also draws each rank's ring\n"
    "transfers as a strip under its boxes (in flight light, waited dark) and prints the share of their\n"
    "flight hidden behind compute (1 - waited / in flight). With --schedule the step is simulated instead\n"
    "(unit costs, one unit drawn as one second), as `cleave schedule` prints it.";

static void usage(FILE *f) {
    fprintf(f, "usage: cleave trace render FILE --out F.svg [--step N]\n"
               "       cleave trace render --schedule KIND --pp P --micro-batches M [--virtual-stages V] --out F.svg\n\n"
               "'cleave trace render --help' lists the flags.\n");
}

static cl_status sim_trace(const cli_args *a, cl_trace *tr) {
    static const char *const needs[] = {"pp", "micro-batches"};
    for (int i = 0; i < 2; i++)
        if (!cli_get(a, needs[i])) return cl_error(CL_ERR_INVALID, "--schedule needs --%s", needs[i]);
    cl_sched_kind kind;
    int p = 0, m = 0, v;
    CL_TRY(cl_sched_kind_parse(cli_get(a, "schedule"), &kind));
    CL_TRY(cli_int(a, "pp", &p, 1, 4096));
    CL_TRY(cli_int(a, "micro-batches", &m, 1, 1 << 20));
    v = kind == CL_SCHED_INTERLEAVED ? 2 : 1;
    CL_TRY(cli_int(a, "virtual-stages", &v, 1, 64));
    cl_schedule sc;
    CL_TRY(cl_schedule_make(kind, p, m, v, &sc));
    cl_sim_result res;
    cl_status s = cl_schedule_simulate(&sc, NULL, &res);
    if (s) {
        cl_schedule_free(&sc);
        return cl_error_context(CL_ERR_INTERNAL, "the generated schedule failed its check");
    }
    s = cl_trace_from_sim(&sc, &res, tr);
    cl_sim_result_free(&res);
    cl_schedule_free(&sc);
    if (!s && cli_get(a, "json")) s = cl_trace_write_chrome(cli_get(a, "json"), tr);
    if (s) cl_trace_free(tr); /* the caller frees only what it was given */
    return s;
}

static int cmd_render(int argc, char **argv) {
    /* one positional argument, the trace file, right after "render" */
    const char *file = NULL;
    int start = 3;
    if (argc > 3 && (argv[3][0] != '-' || !argv[3][1])) {
        file = argv[3];
        start = 4;
    }
    cli_args a;
    cl_status s = cli_parse(&a, render_flags, NFLAGS(render_flags), argc, argv, start);
    if (s) return cli_fail(s);
    if (cli_get(&a, "help")) {
        cli_print_help(render_usage, render_flags, NFLAGS(render_flags));
        return 0;
    }
    const char *out = cli_get(&a, "out"), *sched = cli_get(&a, "schedule");
    if (file && sched) return cli_fail(cl_error(CL_ERR_INVALID, "give a trace FILE or --schedule, not both"));
    if (!file && !sched) return cli_fail(cl_error(CL_ERR_INVALID, "nothing to draw: give a trace FILE or --schedule KIND (see --help)"));
    if (!out) return cli_fail(cl_error(CL_ERR_INVALID, "--out F.svg is required"));
    if (file) {
        static const char *const sim_only[] = {"pp", "micro-batches", "virtual-stages", "json"};
        for (int i = 0; i < 4; i++)
            if (cli_get(&a, sim_only[i])) return cli_fail(cl_error(CL_ERR_INVALID, "--%s goes with --schedule, not a trace FILE", sim_only[i]));
    }
    int step = 0;
    if ((s = cli_int(&a, "step", &step, 0, 1 << 30))) return cli_fail(s);
    cl_trace tr;
    s = file ? cl_trace_read_chrome(file, &tr) : sim_trace(&a, &tr);
    if (s) return cli_fail(s);
    int st = 0, nranks = 0;
    size_t nbox = 0;
    double *bub = NULL;
    s = cl_trace_pick_step(&tr, step, &st);
    if (s && file) s = cl_error_context(s, "%s", file);
    if (!s) s = cl_trace_render_svg(out, &tr, st);
    if (!s) {
        for (size_t i = 0; i < tr.n; i++)
            if (tr.ev[i].step == st) {
                if (tr.ev[i].rank + 1 > nranks) nranks = tr.ev[i].rank + 1;
                nbox += cl_trace_is_compute(tr.ev[i].kind);
            }
        if (!(bub = malloc((size_t)nranks * sizeof *bub))) s = cl_error(CL_ERR_OOM, "no host memory for %d ranks", nranks);
        else s = cl_trace_bubble(&tr, st, nranks, bub);
    }
    if (!s) {
        printf("wrote %s: step %d, %d rank%s, %zu compute actions; bubble:", out, st, nranks, nranks == 1 ? "" : "s", nbox);
        for (int r = 0; r < nranks; r++) printf(" rank %d %.4f%s", r, bub[r], r + 1 < nranks ? ";" : "");
        printf("\n");
        cl_trace_ring ring;
        s = cl_trace_ring_summary(&tr, st, &ring);
        if (!s && ring.n)
            printf("ring transfers (context parallelism): %zu in step %d, %.3f ms in flight, %.3f ms waited: %.1f%% of the flight "
                   "hidden behind compute\n",
                   ring.n, st, ring.flight * 1e3, ring.waited * 1e3, 100 * ring.hidden);
        if (cli_get(&a, "json")) printf("wrote %s\n", cli_get(&a, "json"));
    }
    free(bub);
    cl_trace_free(&tr);
    return s ? cli_fail(s) : 0;
}

int cleave_cmd_trace(int argc, char **argv) {
    if (argc < 3) {
        usage(stderr);
        return 2;
    }
    const char *sub = argv[2];
    if (!strcmp(sub, "render")) return cmd_render(argc, argv);
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        usage(stdout);
        return 0;
    }
    return cli_fail(cl_error(CL_ERR_INVALID, "unknown trace command '%s' (render)", sub));
}
