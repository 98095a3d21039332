/* `cleave memory`: the per-rank, per-category prediction of a run (the same
 * flags as train), and with --measure the device's measured peaks beside it
 * after two steps. The table printer is shared with `cleave train`, which
 * prints the prediction at start-up. */
#include "memory_cmd.h"

#include <stdio.h>
#include <string.h>

static const char *short_name(int k) {
    static const char *const names[CL_MEM_NCAT] = {"params", "grads", "optim", "acts", "workspace", "comm"};
    return names[k];
}

static void stages_text(const cl_mem_rank *r, char *buf, size_t n) {
    size_t u = 0;
    buf[0] = 0;
    if (!r->nstages) {
        snprintf(buf, n, "all");
        return;
    }
    for (int i = 0; i < r->nstages && u < n; i++) u += (size_t)snprintf(buf + u, n - u, "%s%d", i ? "," : "", r->stage[i]);
}

void cli_memory_print(FILE *f, const cl_mem_rank *pred, int n, const double *measured, int json) {
    char b[32], st[96];
    if (json) {
        for (int i = 0; i < n; i++) {
            const cl_mem_rank *r = &pred[i];
            fprintf(f, "{\"rank\": %d, \"dp_rank\": %d, \"tp_rank\": %d, \"pp_rank\": %d, \"stages\": [", r->rank, r->dp_rank,
                    r->tp_rank, r->pp_rank);
            for (int k = 0; k < r->nstages; k++) fprintf(f, "%s%d", k ? ", " : "", r->stage[k]);
            fprintf(f, "], \"predicted\": {");
            for (int k = 0; k < CL_MEM_NCAT; k++) fprintf(f, "\"%s\": %zu, ", cl_mem_cat_name(k), r->bytes[k]);
            fprintf(f, "\"total\": %zu}", r->total);
            if (measured) {
                const double *m = measured + (size_t)i * (CL_MEM_NCAT + 1);
                fprintf(f, ", \"measured\": {");
                for (int k = 0; k < CL_MEM_NCAT; k++) fprintf(f, "\"%s\": %.0f, ", cl_mem_cat_name(k), m[k]);
                fprintf(f, "\"total\": %.0f}", m[CL_MEM_NCAT]);
            }
            fprintf(f, "}\n");
        }
        return;
    }
    fprintf(f, "memory per rank, predicted%s (peak of each category; total = peak of the sum):\n",
            measured ? " | measured after two steps, difference" : "");
    fprintf(f, "  %-5s %-7s", "rank", "stages");
    for (int k = 0; k < CL_MEM_NCAT; k++) fprintf(f, " %11s", short_name(k));
    fprintf(f, " %11s\n", "total");
    for (int i = 0; i < n; i++) {
        const cl_mem_rank *r = &pred[i];
        stages_text(r, st, sizeof st);
        fprintf(f, "  %-5d %-7s", r->rank, st);
        for (int k = 0; k < CL_MEM_NCAT; k++) fprintf(f, " %11s", cl_format_bytes(r->bytes[k], b, sizeof b));
        fprintf(f, " %11s\n", cl_format_bytes(r->total, b, sizeof b));
        if (!measured) continue;
        const double *m = measured + (size_t)i * (CL_MEM_NCAT + 1);
        fprintf(f, "  %-5s %-7s", "", "measured");
        for (int k = 0; k <= CL_MEM_NCAT; k++) fprintf(f, " %11s", cl_format_bytes((size_t)m[k], b, sizeof b));
        fprintf(f, "\n  %-5s %-7s", "", "diff B");
        for (int k = 0; k <= CL_MEM_NCAT; k++)
            fprintf(f, " %11.0f", m[k] - (double)(k < CL_MEM_NCAT ? r->bytes[k] : r->total));
        fprintf(f, "\n");
    }
}
