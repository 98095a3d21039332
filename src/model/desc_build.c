/* The description builder the families write their unit and parameter
 * lists with (family.h: cl_desc_add_unit, cl_desc_add_kind, the linear,
 * elementwise and loss units), and the parameter-layout queries every
 * reader of a description asks (cl_param_f32, rows and runs of a split
 * parameter). It sits below the families and describe.c, which picks a
 * family and calls it, so no file calls back up (scripts/call_cycles.py).
 *
 * Invariants: parameters are appended in checkpoint order, each at a byte
 * offset aligned to CL_PARAM_ALIGN and increasing; a unit's parameters are
 * the contiguous range [first_param, first_param + nparams). */
#include "cleave/model.h"
#include "model/family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t prod(cl_desc_builder *b, int64_t x, int64_t y) { return cl_size_mul(&b->z, x, y); }
static int64_t sum(cl_desc_builder *b, int64_t x, int64_t y) { return cl_size_add(&b->z, x, y); }

cl_unit *cl_desc_add_unit(cl_desc_builder *b, cl_unit_kind kind, char code, int index, const char *label) {
    cl_model_desc *d = b->d;
    if (d->nunits == b->cap_units) {
        int nc = b->cap_units ? 2 * b->cap_units : 16;
        cl_unit *nu = realloc(d->units, (size_t)nc * sizeof *nu);
        if (!nu) { b->failed = 1; return NULL; }
        d->units = nu;
        b->cap_units = nc;
    }
    cl_unit *u = &d->units[d->nunits++];
    memset(u, 0, sizeof *u);
    u->kind = kind;
    u->code = code;
    u->index = index;
    u->first_param = d->nparams;
    snprintf(u->label, sizeof u->label, "%s", label);
    return u;
}

/* Adds a parameter whose whole tensor has shape full, of which this rank
 * holds the slice `split` of extent part (cl_split). */
static void add_param_tp(cl_desc_builder *b, const char *name, int ndim, const int64_t *full, cl_split split, int64_t part,
                         int64_t part_kv, int decay, cl_init_kind init, float scale) {
    cl_model_desc *d = b->d;
    if (b->failed) return;
    if (d->nparams == b->cap_params) {
        int nc = b->cap_params ? 2 * b->cap_params : 64;
        cl_param_spec *np = realloc(d->params, (size_t)nc * sizeof *np);
        if (!np) { b->failed = 1; return; }
        d->params = np;
        b->cap_params = nc;
    }
    cl_param_spec *p = &d->params[d->nparams++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    p->full_numel = 1;
    p->split = split;
    p->part = split == CL_SPLIT_NONE ? 0 : part;
    p->part_kv = split == CL_SPLIT_HEADS3 ? part_kv : 0;
    for (int i = 0; i < ndim; i++) {
        p->full_shape[i] = full[i];
        p->full_numel = prod(b, p->full_numel, full[i]);
        p->shape[i] = full[i];
    }
    if (split == CL_SPLIT_ROWS) p->shape[0] = part;
    if (split == CL_SPLIT_COLS) p->shape[ndim - 1] = part;
    if (split == CL_SPLIT_HEADS3) p->shape[ndim - 1] = sum(b, part, prod(b, 2, part_kv));
    for (int i = 0; i < ndim; i++) p->numel = prod(b, p->numel, p->shape[i]);
    p->dtype = CL_F32;
    /* nfloats is a multiple of 16 (CL_PARAM_ALIGN bytes) and at most CL_DESC_MAX_FLOATS, so its bytes fit an
     * int64; the sizer bounds floats, not bytes (a 310B model has 1.2e12 bytes of parameters) */
    p->byte_offset = d->nfloats * (int64_t)sizeof(float);
    d->nfloats = sum(b, d->nfloats, (p->numel + 15) & ~(int64_t)15);
    d->nparams_total = sum(b, d->nparams_total, p->numel);
    p->decay = decay;
    p->init = init;
    p->scale = scale;
    p->unit = d->nunits - 1;
    d->units[d->nunits - 1].nparams++;
}

int64_t cl_param_row_len(const cl_param_spec *p) {
    if (p->split == CL_SPLIT_COLS || p->split == CL_SPLIT_HEADS3) return p->full_shape[p->ndim - 1];
    return p->full_shape[0] ? p->full_numel / p->full_shape[0] : 0;
}

int cl_param_row_runs(const cl_param_spec *p, int rank, int64_t row, cl_param_run runs[3]) {
    int64_t n = cl_param_row_len(p), r = (int64_t)cl_param_slice_of(p, rank) * p->part;
    if (!p->numel) return 0; /* another expert-parallel rank's expert */
    switch (p->split) {
    case CL_SPLIT_NONE: runs[0] = (cl_param_run){0, row * n, n}; return 1;
    case CL_SPLIT_ROWS:
        if (row < r || row >= r + p->part) return 0;
        runs[0] = (cl_param_run){0, (row - r) * n, n};
        return 1;
    case CL_SPLIT_COLS: runs[0] = (cl_param_run){r, row * p->part, p->part}; return 1;
    case CL_SPLIT_HEADS3: {
        /* the query's Q = n - 2K columns, then the key's and the value's K; a rank's query part, then its key and value parts */
        int64_t lrow = p->part + 2 * p->part_kv, tp = n / lrow, Q = tp * p->part, K = tp * p->part_kv, rk = (int64_t)rank * p->part_kv;
        runs[0] = (cl_param_run){r, row * lrow, p->part};
        runs[1] = (cl_param_run){Q + rk, row * lrow + p->part, p->part_kv};
        runs[2] = (cl_param_run){Q + K + rk, row * lrow + p->part + p->part_kv, p->part_kv};
        return 3;
    }
    }
    return 0;
}

void *cl_param_data(void *base, const cl_param_spec *p) { return (char *)base + p->byte_offset; }

float *cl_param_f32(float *base, const cl_param_spec *p) {
    return p->dtype == CL_F32 ? (float *)cl_param_data(base, p) : NULL;
}

int64_t cl_param_elem(const cl_param_spec *p) { return p->byte_offset / (int64_t)cl_dtype_size(p->dtype); }

int64_t cl_param_local_index(const cl_param_spec *p, int rank, int64_t full) {
    if (full < 0 || full >= p->full_numel || !p->numel) return -1;
    int64_t ncol = p->full_shape[p->ndim - 1], row = full / ncol, col = full % ncol;
    switch (p->split) {
    case CL_SPLIT_NONE: return full;
    case CL_SPLIT_ROWS: {
        int64_t rowlen = p->full_numel / p->full_shape[0], r = full / rowlen - (int64_t)rank * p->part;
        return r < 0 || r >= p->part ? -1 : r * rowlen + full % rowlen;
    }
    case CL_SPLIT_COLS: {
        int64_t c = col - (int64_t)cl_param_slice_of(p, rank) * p->part;
        return c < 0 || c >= p->part ? -1 : row * p->part + c;
    }
    case CL_SPLIT_HEADS3: {
        int64_t lrow = p->part + 2 * p->part_kv, tp = ncol / lrow, Q = tp * p->part, K = tp * p->part_kv;
        int64_t which = col < Q ? 0 : col < Q + K ? 1 : 2, at = which ? Q + (which - 1) * K : 0, ext = which ? p->part_kv : p->part;
        int64_t c = col - at - (int64_t)rank * ext;
        return c < 0 || c >= ext ? -1 : row * lrow + (which ? p->part + (which - 1) * p->part_kv : 0) + c;
    }
    }
    return -1;
}

/* The unit just added, its geometry set, completed from its kind's table
 * (kind.h): its per-sample sizes and FLOPs, then its parameters (names,
 * whole shapes, initialisation, and the slice this rank holds). The splits
 * that tensor parallelism makes apply at tp > 1 only; the vocabulary is
 * split (padded) at every tp. */
void cl_desc_add_kind(cl_desc_builder *b) {
    cl_model_desc *d = b->d;
    cl_unit *un = &d->units[d->nunits - 1];
    const cl_kind *k = cl_kind_of(un->kind);
    int tp = d->tpl.tp;
    k->sizes(d, un, &b->z);
    int np = k->param_list ? k->param_list(d, un, -1, NULL, NULL, 0) : k->nparams;
    for (int i = 0; i < np && !b->failed; i++) {
        const cl_kind_param *kp = k->param_list ? NULL : &k->params[i];
        cl_kind_param listed;
        char own[48];
        if (!kp) k->param_list(d, un, i, &listed, own, sizeof own), listed.name = own, kp = &listed;
        cl_param_shape sh;
        memset(&sh, 0, sizeof sh);
        k->param(d, un, i, &sh);
        char name[64];
        if (k->prefixed) snprintf(name, sizeof name, "%s.%s", un->label, kp->name);
        else snprintf(name, sizeof name, "%s", kp->name);
        cl_tp_split how = kp->tp;
        if (how == CL_TPS_LINEAR) /* column-parallel: weight and bias by columns; row-parallel: the weight by rows */
            how = un->tp_mode == CL_LINEAR_COLS ? CL_TPS_COLUMNS : un->tp_mode == CL_LINEAR_ROWS && sh.ndim == 2 ? CL_TPS_ROWS : CL_TPS_REPLICATED;
        int64_t last = sh.shape[sh.ndim - 1];
        cl_split split = CL_SPLIT_NONE;
        int64_t part = 0;
        if (how == CL_TPS_VOCAB) split = CL_SPLIT_ROWS, part = d->vocab_local;
        else if (tp > 1 && how == CL_TPS_COLUMNS) split = CL_SPLIT_COLS, part = last / tp;
        else if (tp > 1 && how == CL_TPS_HEADS) split = CL_SPLIT_HEADS3, part = d->channels_local; /* and d->kv_channels_local */
        else if (tp > 1 && how == CL_TPS_ROWS) split = CL_SPLIT_ROWS, part = sh.shape[0] / tp;
        int rep = 1; /* key-value heads replicated past tp = kv (the families with CL_TPS_KV have kv heads) */
        if (tp > 1 && how == CL_TPS_KV) {
            int kvh = cl_model_kv_heads(&d->cfg);
            rep = kvh > 0 && tp > kvh ? tp / kvh : 1;
            split = CL_SPLIT_COLS, part = last / (tp / rep);
        }
        add_param_tp(b, name, sh.ndim, sh.shape, split, part, d->kv_channels_local, kp->decay, kp->init, sh.scale);
        if (b->failed) return;
        if (tp > 1 && how == CL_TPS_KV && rep > 1) d->params[d->nparams - 1].tp_rep = rep;
        if (how == CL_TPS_NORM) d->params[d->nparams - 1].tp_partial = d->tpl.sp;
        if (kp->tied) d->tied_wte = d->nparams - 1;
        if (k->expert_of) d->params[d->nparams - 1].expert = k->expert_of(d, un, i) + 1;
    }
}

void cl_model_desc_ep_shard(cl_model_desc *d, int ep_rank) {
    int ep = d->tpl.ep, E = d->cfg.experts;
    if (ep <= 1 || E <= 0 || E % ep) return;
    d->ep_rank = ep_rank;
    d->nfloats = d->nparams_total = 0;
    for (int i = 0; i < d->nparams; i++) { /* add_param_tp's layout again, the other ranks' experts empty */
        cl_param_spec *p = &d->params[i];
        if (p->expert) {
            p->ep_owner = (p->expert - 1) / (E / ep);
            if (p->ep_owner != ep_rank) p->numel = p->shape[0] = 0;
        }
        p->byte_offset = d->nfloats * (int64_t)sizeof(float);
        d->nfloats += (p->numel + 15) & ~(int64_t)15;
        d->nparams_total += p->numel;
    }
}

/* A linear unit's geometry; mode as cl_unit's tp_mode. */
void cl_desc_linear(cl_desc_builder *b, const char *label, int index, int64_t in, int64_t out, cl_linear_tp mode) {
    cl_unit *u = cl_desc_add_unit(b, CL_UNIT_LINEAR, 'l', index, label);
    if (!u) return;
    int tp = b->d->tpl.tp;
    int64_t lin = mode == CL_LINEAR_ROWS ? in / tp : in, lout = mode == CL_LINEAR_COLS ? out / tp : out;
    if (in > INT32_MAX || out > INT32_MAX) b->z.too_large = 1;
    u->tp_mode = mode;
    u->c = (int)lin;
    u->oc = (int)lout;
    cl_desc_add_kind(b);
}

/* A unit of n floats in and out (ReLU, flatten). */
void cl_desc_elementwise(cl_desc_builder *b, cl_unit_kind kind, char code, int index, const char *label, int64_t n) {
    cl_unit *u = cl_desc_add_unit(b, kind, code, index, label);
    if (!u) return;
    u->in_floats = n;
    cl_desc_add_kind(b);
}

void cl_desc_classify(cl_desc_builder *b, int64_t classes) {
    cl_unit *u = cl_desc_add_unit(b, CL_UNIT_CLASSIFY, 'x', 0, "loss");
    if (!u) return;
    u->c = (int)classes;
    cl_desc_add_kind(b);
}

