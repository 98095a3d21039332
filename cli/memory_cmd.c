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

void cli_memory_print(FILE *f, const cl_mem_rank *pred, int n, const double *measured, int json, size_t cap) {
    char b[32], st[96];
    int host = 0, disk = 0;
    for (int i = 0; i < n; i++) host |= pred[i].host > 0, disk |= pred[i].disk > 0;
    if (json) {
        for (int i = 0; i < n; i++) {
            const cl_mem_rank *r = &pred[i];
            fprintf(f, "{\"rank\": %d, \"dp_rank\": %d, \"tp_rank\": %d, \"pp_rank\": %d, \"stages\": %s", r->rank, r->dp_rank,
                    r->tp_rank, r->pp_rank, r->nstages ? "[" : "\"all\""); /* the whole model, as the table says */
            for (int k = 0; k < r->nstages; k++) fprintf(f, "%s%d%s", k ? ", " : "", r->stage[k], k + 1 == r->nstages ? "]" : "");
            fprintf(f, ", \"predicted\": {");
            for (int k = 0; k < CL_MEM_NCAT; k++) fprintf(f, "\"%s\": %zu, ", cl_mem_cat_name(k), r->bytes[k]);
            fprintf(f, "\"total\": %zu, \"host\": %zu, \"disk\": %zu}", r->total, r->host, r->disk);
            if (cap) fprintf(f, ", \"device_memory\": %zu, \"fits\": %s", cap, r->total <= cap ? "true" : "false");
            if (measured) {
                const double *m = measured + (size_t)i * CLI_MEM_COLS;
                fprintf(f, ", \"measured\": {");
                for (int k = 0; k < CL_MEM_NCAT; k++) fprintf(f, "\"%s\": %.0f, ", cl_mem_cat_name(k), m[k]);
                fprintf(f, "\"total\": %.0f, \"host\": %.0f, \"disk\": %.0f}", m[CL_MEM_NCAT], m[CL_MEM_NCAT + 1],
                        m[CL_MEM_NCAT + 2]);
            }
            fprintf(f, "}\n");
        }
        return;
    }
    int cols = CL_MEM_NCAT + 1 + (host || disk) + disk; /* the categories, the total, the host's, the file's */
    fprintf(f, "memory per rank, predicted%s (peak of each category; total = peak of the sum%s):\n",
            measured ? " | measured after two steps, difference" : "",
            disk ? "; host = the tiles the optimizer state streams through, disk = its file"
            : host ? "; host = optimizer state offloaded to host memory, outside the device" : "");
    fprintf(f, "  %-5s %-7s", "rank", "stages");
    for (int k = 0; k < CL_MEM_NCAT; k++) fprintf(f, " %11s", short_name(k));
    fprintf(f, " %11s%s%s%s\n", "total", host || disk ? "        host" : "", disk ? "        disk" : "", cap ? "  fits" : "");
    int nfit = 0;
    for (int i = 0; i < n; i++) {
        const cl_mem_rank *r = &pred[i];
        size_t want[CLI_MEM_COLS];
        for (int k = 0; k < CL_MEM_NCAT; k++) want[k] = r->bytes[k];
        want[CL_MEM_NCAT] = r->total;
        want[CL_MEM_NCAT + 1] = r->host;
        want[CL_MEM_NCAT + 2] = r->disk;
        stages_text(r, st, sizeof st);
        fprintf(f, "  %-5d %-7s", r->rank, st);
        for (int k = 0; k < cols; k++) fprintf(f, " %11s", cl_format_bytes(want[k], b, sizeof b));
        if (cap) fprintf(f, "  %s", r->total <= cap ? "yes" : "no");
        nfit += r->total <= cap;
        fprintf(f, "\n");
        if (!measured) continue;
        const double *m = measured + (size_t)i * CLI_MEM_COLS;
        fprintf(f, "  %-5s %-7s", "", "measured");
        for (int k = 0; k < cols; k++) fprintf(f, " %11s", cl_format_bytes((size_t)m[k], b, sizeof b));
        fprintf(f, "\n  %-5s %-7s", "", "diff B");
        for (int k = 0; k < cols; k++) fprintf(f, " %11.0f", m[k] - (double)want[k]);
        fprintf(f, "\n");
    }
    if (cap)
        fprintf(f, "device memory %s per rank (--device-memory): %s (%d of %d rank%s fit%s)\n", cl_format_bytes(cap, b, sizeof b),
                nfit == n ? "fits" : "does not fit", nfit, n, n == 1 ? "" : "s", nfit == 1 ? "s" : "");
}
