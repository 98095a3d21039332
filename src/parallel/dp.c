/* Data-parallel gradient buckets (see cleave/dp.h). */
#include "cleave/dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cl_dp {
    cl_comm *comm;
    cl_model *m;
    int n;               /* buckets, the last units' first */
    int *unit;           /* the lowest unit of each: launch once its backward is done */
    int64_t *lo, *hi;    /* float range of the part's gradient buffer; the last may be the head's wte (hi < 0) */
    cl_request **req;
    double *t0;          /* launch times */
    int next;            /* launched so far this step */
    int embed_tie;       /* the part holds the embedding and a separate head wte gradient: tie before the embedding's bucket */
    int tied;            /* done this step */
};

static int64_t align16(int64_t n) { return (n + 15) & ~(int64_t)15; }

static int holds(const cl_model *m, cl_unit_kind k) {
    for (int u = m->u0; u < m->u1; u++)
        if (m->desc->units[u].kind == k) return 1;
    return 0;
}

cl_status cl_dp_create(cl_dp **out, cl_comm *comm, cl_model *m, size_t bucket_bytes) {
    *out = NULL;
    cl_dp *dp = calloc(1, sizeof *dp);
    if (!dp) return cl_error(CL_ERR_OOM, "cannot allocate the gradient buckets");
    const cl_model_desc *d = m->desc;
    int cap = m->u1 - m->u0 + 1;
    dp->comm = comm && cl_comm_size(comm) > 1 ? comm : NULL;
    dp->m = m;
    dp->unit = calloc((size_t)cap, sizeof *dp->unit);
    dp->lo = calloc((size_t)cap, sizeof *dp->lo);
    dp->hi = calloc((size_t)cap, sizeof *dp->hi);
    dp->req = calloc((size_t)cap, sizeof *dp->req);
    dp->t0 = calloc((size_t)cap, sizeof *dp->t0);
    if (!dp->unit || !dp->lo || !dp->hi || !dp->req || !dp->t0) {
        cl_dp_destroy(dp);
        return cl_error(CL_ERR_OOM, "cannot allocate the gradient buckets");
    }
    size_t limit = bucket_bytes ? bucket_bytes : 1;
    int64_t hi = -1;
    size_t bytes = 0;
    int lowest_with_params = -1;
    for (int u = m->u0; u < m->u1; u++)
        if (d->units[u].nparams) {
            lowest_with_params = u;
            break;
        }
    int head_alone = m->head_wte_g && !holds(m, CL_UNIT_EMBED);
    dp->embed_tie = m->head_wte_g && holds(m, CL_UNIT_EMBED);
    for (int u = m->u1 - 1; u >= m->u0; u--) {
        const cl_unit *un = &d->units[u];
        if (head_alone && un->kind == CL_UNIT_LMHEAD) { /* the head's wte gradient is whole once the head is done */
            dp->unit[dp->n] = u;
            dp->lo[dp->n] = 0;
            dp->hi[dp->n] = -1;
            dp->n++;
        }
        if (!un->nparams) continue;
        int a = un->first_param, b = un->first_param + un->nparams - 1;
        if (hi < 0) hi = m->loc[b] + align16(d->params[b].numel);
        for (int i = a; i <= b; i++) bytes += (size_t)d->params[i].numel * sizeof(float);
        if (bytes >= limit || u == lowest_with_params) {
            dp->unit[dp->n] = u;
            dp->lo[dp->n] = m->loc[a];
            dp->hi[dp->n] = hi;
            dp->n++;
            hi = -1;
            bytes = 0;
        }
    }
    *out = dp;
    return CL_OK;
}

void cl_dp_destroy(cl_dp *dp) {
    if (!dp) return;
    free(dp->unit);
    free(dp->lo);
    free(dp->hi);
    free(dp->req);
    free(dp->t0);
    free(dp);
}

void cl_dp_begin(cl_dp *dp) {
    if (dp) dp->next = dp->tied = 0;
}

/* Before the bucket holding the wte gradient leaves: the head's part added in. */
static void tie(cl_dp *dp) {
    if (!dp->embed_tie || dp->tied) return;
    cl_model_tie_grads(dp->m);
    dp->tied = 1;
}

static cl_status launch(cl_dp *dp, int k) {
    cl_model *m = dp->m;
    float *buf = dp->hi[k] < 0 ? m->head_wte_g : m->grads + dp->lo[k];
    size_t n = dp->hi[k] < 0 ? (size_t)m->sizes.head_wte : (size_t)(dp->hi[k] - dp->lo[k]);
    dp->t0[k] = cl_now();
    return cl_comm_iallreduce(dp->comm, buf, n, CL_RED_SUM, &dp->req[k]);
}

cl_status cl_dp_unit_done(void *ctx, int u) {
    cl_dp *dp = ctx;
    if (!dp || !dp->comm) return CL_OK;
    const cl_model_desc *d = dp->m->desc;
    /* the wte gradient is complete once the embedding is: add the head's part before it is sent */
    if (dp->embed_tie && u == d->params[d->tied_wte].unit) tie(dp);
    while (dp->next < dp->n && dp->unit[dp->next] == u) CL_TRY(launch(dp, dp->next++));
    return CL_OK;
}

cl_status cl_dp_launch_rest(cl_dp *dp) {
    if (!dp || !dp->comm) return CL_OK;
    tie(dp);
    while (dp->next < dp->n) CL_TRY(launch(dp, dp->next++));
    return CL_OK;
}

cl_status cl_dp_finish(cl_dp *dp) {
    if (!dp || !dp->comm) return CL_OK;
    cl_status s = cl_dp_launch_rest(dp);
    char first[1024] = ""; /* the first failure's message: later waits would overwrite it */
    if (s) snprintf(first, sizeof first, "%s", cl_last_error());
    for (int k = 0; k < dp->n; k++) {
        if (!dp->req[k]) continue;
        cl_status w = cl_comm_wait(dp->comm, dp->req[k]);
        dp->req[k] = NULL;
        if (!s && w) {
            s = w;
            snprintf(first, sizeof first, "%s", cl_last_error());
        }
    }
    return s ? cl_error(s, "%s", first) : CL_OK;
}

int cl_dp_nbuckets(const cl_dp *dp) { return dp && dp->comm ? dp->n : 0; }
double cl_dp_launch_time(const cl_dp *dp, int k) { return dp->t0[k]; }
