/* Stage partitions of a model's units (see pipeline.h). */
#include "cleave/pipeline.h"
#include "cleave/train.h" /* cl_offload_tile_floats */

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t cl_pp_udout_floats(const cl_model_desc *d, int u, int B) {
    return d->units[u].out_floats * B + cl_unit_keep_floats(d, u, B);
}

void cl_pp_slot_sizes(const cl_model_desc *d, int u0, int u1, int B, int zb, cl_pp_slot_bytes *o) {
    memset(o, 0, sizeof *o);
    if (u0 > 0) o->in = (size_t)(d->units[u0].in_floats * B) * sizeof(float);
    if (u1 < d->nunits) o->dout = (size_t)(d->units[u1 - 1].out_floats * B) * sizeof(float);
    for (int u = u0; zb && u < u1; u++) o->udout += (size_t)cl_pp_udout_floats(d, u, B) * sizeof(float);
    o->ids = (size_t)B * (size_t)d->T /* 1 without sequences */ * sizeof(int32_t);
    o->x = (size_t)B * (size_t)cl_model_input_floats(&d->cfg) * sizeof(float); /* images (none for GPT: token ids) */
}

cl_pp_stage_cost cl_pp_stage_predict(const cl_model_desc *d, int u0, int u1, const cl_pp_stage_opts *o) {
    cl_pp_stage_cost c;
    memset(&c, 0, sizeof c);
    for (int u = u0; u < u1; u++) c.flops += 3.0 * d->units[u].flops * o->B;
    cl_part_sizes z;
    cl_model_part_sizes(d, u0, u1, o->B, o->recompute, &o->zero, &z);
    cl_pp_slot_bytes sb;
    cl_pp_slot_sizes(d, u0, u1, o->B, o->zb, &sb);
    size_t f = sizeof(float), live = (size_t)(o->live > 0 ? o->live : 1);
    c.bytes[CL_MEM_PARAMS] = (size_t)(z.params + z.npwork * z.pwork + z.wlow) * f;
    c.bytes[CL_MEM_GRADS] = (size_t)(z.grads + z.whole + z.head_wte + z.nbuf * z.bucket + z.halo + z.gstage) * f;
    c.bytes[CL_MEM_OPTIM] = o->offload != CL_OFFLOAD_NONE ? 0 : 2 * (size_t)z.moments * f;
    c.host_bytes = o->offload == CL_OFFLOAD_HOST ? 2 * (size_t)z.moments * f : o->offload == CL_OFFLOAD_DISK ? 4 * (size_t)cl_offload_tile_floats(z.moments) * f : 0;
    c.disk_bytes = o->offload == CL_OFFLOAD_DISK ? 2 * (size_t)z.moments * f : 0;
    c.bytes[CL_MEM_ACTS] = live * ((size_t)z.acts * f + sb.in + sb.udout) + (size_t)o->ndout * sb.dout;
    c.bytes[CL_MEM_WORKSPACE] = (size_t)(z.scratch + 2 * z.io + z.rc + z.tables) * f + live * (2 * sb.ids + sb.x) +
                                (size_t)o->ngb * sb.in;
    c.param_bytes = c.bytes[CL_MEM_PARAMS] + c.bytes[CL_MEM_GRADS] + c.bytes[CL_MEM_OPTIM];
    c.act_bytes = c.bytes[CL_MEM_ACTS];
    for (int k = 0; k < CL_MEM_NCAT; k++) c.total_bytes += c.bytes[k];
    return c;
}

cl_status cl_pp_partition_balanced(const cl_model_desc *d, int nstages, const cl_pp_stage_opts *opts, const size_t *extra,
                                   size_t cap, cl_pp_partition *out) {
    int n = d->nunits;
    memset(out, 0, sizeof *out);
    if (nstages < 1 || nstages > CL_PP_MAX_STAGES)
        return cl_error(CL_ERR_INVALID, "%d pipeline stages: need 1..%d", nstages, CL_PP_MAX_STAGES);
    if (nstages > n && cl_model_family_of(&d->cfg)->tokens)
        return cl_error(CL_ERR_INVALID, "%d pipeline stages but the model has only %d units (embedding, %d blocks, head): "
                        "use fewer stages or more layers", nstages, n, n - 2);
    if (nstages > n)
        return cl_error(CL_ERR_INVALID, "%d pipeline stages but the model has only %d units: use fewer stages", nstages, n);
    /* best[k][j]: the smallest possible slowest-stage time for units [0, j) in k stages */
    size_t cells = (size_t)(nstages + 1) * (size_t)(n + 1);
    double *best = malloc(cells * sizeof *best);
    int *cut = malloc(cells * sizeof *cut);
    if (!best || !cut) {
        free(best);
        free(cut);
        return cl_error(CL_ERR_OOM, "cannot allocate the partition table");
    }
    const double INF = 1e300;
    for (size_t i = 0; i < cells; i++) best[i] = INF, cut[i] = -1;
    best[0] = 0;
    size_t min_need = (size_t)-1; /* for the error: the smallest cap of any partition */
    /* without a cap only the stages' FLOPs matter: summed once per range, in the order
     * cl_pp_stage_predict sums them (the same doubles, so the same cut), not predicted per cell */
    double *fl = NULL;
    int same_b = 1;
    for (int k = 1; k < nstages; k++) same_b &= opts[k].B == opts[0].B;
    if (!cap && same_b && (fl = malloc((size_t)(n + 1) * (size_t)(n + 1) * sizeof *fl)))
        for (int i = 0; i < n; i++) {
            double acc = 0;
            for (int j = i + 1; j <= n; j++) acc += 3.0 * d->units[j - 1].flops * opts[0].B, fl[(size_t)i * (n + 1) + j] = acc;
        }
    for (int k = 1; k <= nstages; k++) {
        for (int j = k; j <= n - (nstages - k); j++) {
            for (int i = k - 1; i < j; i++) {
                double prev = best[(size_t)(k - 1) * (n + 1) + i];
                if (prev >= INF) continue;
                double flops;
                if (fl) flops = fl[(size_t)i * (n + 1) + j];
                else {
                    cl_pp_stage_cost c = cl_pp_stage_predict(d, i, j, &opts[k - 1]);
                    size_t need = c.total_bytes + (extra ? extra[k - 1] : 0);
                    if (cap && need > cap) {
                        if (need < min_need) min_need = need;
                        continue;
                    }
                    flops = c.flops;
                }
                double t = flops > prev ? flops : prev;
                double *b = &best[(size_t)k * (n + 1) + j];
                if (t < *b) *b = t, cut[(size_t)k * (n + 1) + j] = i;
            }
        }
    }
    free(fl);
    if (best[(size_t)nstages * (n + 1) + n] >= INF) {
        free(best);
        free(cut);
        char capb[32], need[32];
        cl_format_bytes(cap, capb, sizeof capb);
        cl_format_bytes(min_need == (size_t)-1 ? 0 : min_need, need, sizeof need);
        return cl_error(CL_ERR_OOM, "no cut of the model into %d stages fits %s per rank (a stage needs at least %s "
                        "there): raise --device-memory or use more pipeline stages", nstages, capb, need);
    }
    out->nstages = nstages;
    int j = n;
    for (int k = nstages; k >= 1; k--) {
        int i = cut[(size_t)k * (n + 1) + j];
        out->u0[k - 1] = i;
        out->u1[k - 1] = j;
        j = i;
    }
    free(best);
    free(cut);
    return CL_OK;
}

cl_status cl_pp_partition_layout(const cl_model_desc *d, const char *layout, int nstages, cl_pp_partition *out) {
    memset(out, 0, sizeof *out);
    int n = d->nunits, u = 0, stage = 0, in_stage = 0;
    const char *p = layout;
    char want[8];
    out->u0[0] = 0;
    for (;;) {
        while (*p == ' ') p++;
        if (*p == '|' || *p == '\0') {
            if (!in_stage)
                return cl_error(CL_ERR_INVALID, "--pp-layout \"%s\": stage %d is empty", layout, stage);
            out->u1[stage] = u;
            stage++;
            if (*p == '\0') break;
            if (stage >= CL_PP_MAX_STAGES) return cl_error(CL_ERR_INVALID, "--pp-layout: more than %d stages", CL_PP_MAX_STAGES);
            out->u0[stage] = u;
            in_stage = 0;
            p++;
            continue;
        }
        if (*p == ',') {
            p++;
            continue;
        }
        char code = *p++;
        if (!isalpha((unsigned char)code))
            return cl_error(CL_ERR_INVALID, "--pp-layout \"%s\": unexpected '%c' at offset %d (expected a unit letter, ',', "
                            "'|' or '*N')", layout, code, (int)(p - 1 - layout));
        long rep = 1;
        while (*p == ' ') p++;
        if (*p == '*') {
            char *end;
            rep = strtol(p + 1, &end, 10);
            if (end == p + 1 || rep < 1 || rep > 100000)
                return cl_error(CL_ERR_INVALID, "--pp-layout \"%s\": '*' must be followed by a positive count", layout);
            p = end;
        }
        int known = 0;
        for (int k = 0; k < n; k++)
            if (d->units[k].code == code) known = 1;
        if (!known) {
            int w = 0;
            for (int k = 0; k < n && w < (int)sizeof want - 1; k++)
                if (!memchr(want, d->units[k].code, (size_t)w)) want[w++] = d->units[k].code;
            want[w] = 0;
            return cl_error(CL_ERR_INVALID, "--pp-layout \"%s\": unknown part '%c' (this model's parts: %s)", layout, code,
                            want);
        }
        for (long r = 0; r < rep; r++, u++) {
            if (u >= n)
                return cl_error(CL_ERR_INVALID, "--pp-layout \"%s\" names more than the model's %d units", layout, n);
            if (d->units[u].code != code)
                return cl_error(CL_ERR_INVALID, "--pp-layout \"%s\": unit %d is '%c' (%s), the layout says '%c'", layout, u,
                                d->units[u].code, d->units[u].label, code);
        }
        in_stage = 1;
    }
    if (u != n)
        return cl_error(CL_ERR_INVALID, "--pp-layout \"%s\" covers %d of the model's %d units (next: '%c', %s)", layout, u,
                        n, d->units[u].code, d->units[u].label);
    if (stage != nstages)
        return cl_error(CL_ERR_INVALID, "--pp-layout \"%s\" has %d stages but the pipeline needs %d (--pp x --virtual-stages)",
                        layout, stage, nstages);
    out->nstages = stage;
    return CL_OK;
}

void cl_pp_partition_format(const cl_model_desc *d, const cl_pp_partition *p, char *buf, size_t n) {
    size_t w = 0;
    if (n) buf[0] = 0;
    for (int s = 0; s < p->nstages; s++) {
        int first = 1;
        for (int u = p->u0[s]; u < p->u1[s];) {
            int r = 1;
            while (u + r < p->u1[s] && d->units[u + r].code == d->units[u].code) r++;
            int k = r > 1 ? snprintf(buf + w, n > w ? n - w : 0, "%s%c*%d", first ? "" : ",", d->units[u].code, r)
                          : snprintf(buf + w, n > w ? n - w : 0, "%s%c", first ? "" : ",", d->units[u].code);
            if (k > 0) w += (size_t)k;
            first = 0;
            u += r;
        }
        if (s + 1 < p->nstages) {
            int k = snprintf(buf + w, n > w ? n - w : 0, "|");
            if (k > 0) w += (size_t)k;
        }
    }
    if (n && w >= n) buf[n - 1] = 0;
}
