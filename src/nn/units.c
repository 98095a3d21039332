/* One rank's part of a model: parameters, gradients, saved activations, and
 * the forward / backward-input / backward-weight of each unit (see model.h).
 *
 * Layout of a unit's saved activations is computed from the micro-batch's
 * actual B and T, so buffers sized for the description's B and T serve any
 * smaller micro-batch (generation, a short last window).
 *
 * Backward contract (kernels.h): everything is ADDED into din and the
 * parameter gradients. CL_BWD_INPUT and CL_BWD_WEIGHT select which of the two
 * are produced; a block's weight pass needs the activation gradients of its
 * interior, so a weight-only call recomputes that chain from dout (correct,
 * not yet cheap: the zero-bubble schedule will keep it per micro-batch). */
#include "nn/cp.h"
#include "nn/kind.h"
#include "nn/model_impl.h"
#include "cleave/prof.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const cl_kind *kind_of(const cl_model_desc *d, int u) { return cl_kind_of(d->units[u].kind); }

/* Backward workspace of unit u at micro-batch B (its kind's statement). */
static int64_t unit_scratch(const cl_model_desc *d, int u, int B) {
    const cl_unit *un = &d->units[u];
    const cl_kind *k = kind_of(d, u);
    return k->scratch_floats ? k->scratch_floats(d, un, B) : un->scratch_floats * B;
}

/* Saved floats of unit u for a micro-batch of B under a recompute mode, 16-aligned. */
static int64_t unit_act_floats(const cl_model_desc *d, int u, int B, int recompute) {
    const cl_unit *un = &d->units[u];
    const cl_kind *k = kind_of(d, u);
    int64_t n = k->act_floats ? k->act_floats(d, un, B, recompute) : un->act_floats * B;
    return (n + 15) & ~(int64_t)15;
}

static int64_t align16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* The tied weight (the embedding's wte, d->tied_wte): whether the part of
 * units [u0, u1) holds the unit that owns it, and a unit whose kind reads
 * it too (the LM head). */
static int part_owns_tied(const cl_model_desc *d, int u0, int u1) {
    if (d->tied_wte < 0) return 0;
    int u = d->params[d->tied_wte].unit;
    return u >= u0 && u < u1;
}

static int uses_tied(const cl_model_desc *d, int u) { return d->tied_wte >= 0 && cl_kind_of(d->units[u].kind)->uses_tied; }

static int part_uses_tied(const cl_model_desc *d, int u0, int u1) {
    for (int u = u0; u < u1; u++)
        if (uses_tied(d, u)) return 1;
    return 0;
}

int cl_model_grad_whole(const cl_model_desc *d, int u0, int u1, int split, int i) {
    if (d->params[i].tp_partial || d->params[i].tp_rep > 1) return 1;
    if (split && cl_unit_is_loss(&d->units[d->params[i].unit])) return 1;
    if (i != d->tied_wte) return 0;
    return part_owns_tied(d, u0, u1) != part_uses_tied(d, u0, u1);
}

/* Bucket [pa..pb] of parameters: their float range, trimmed of whole-kept gradients at both ends under stage 2. */
static void bucket_range(const cl_model_desc *d, int u0, int u1, int64_t part_lo, int pa, int pb, int stage2, int split,
                         cl_bucket *b) {
    b->lo = cl_param_elem(&d->params[pa]) - part_lo;
    b->hi = cl_param_elem(&d->params[pb]) - part_lo + align16(d->params[pb].numel);
    if (!stage2) return;
    while (pa <= pb && cl_model_grad_whole(d, u0, u1, split, pa)) pa++;
    while (pb >= pa && cl_model_grad_whole(d, u0, u1, split, pb)) pb--;
    if (pa > pb) b->hi = b->lo; /* empty: all whole */
    else bucket_range(d, u0, u1, part_lo, pa, pb, 0, 0, b);
}

size_t cl_zero_bucket_default(int stage, int n, int64_t shard_floats) {
    if (!cl_zero_shards_grads(stage) || n < 2) return CL_BUCKET_DEFAULT;
    size_t want = (size_t)shard_floats * sizeof(float) / 4, b = CL_BUCKET_MIN;
    if (want >= CL_BUCKET_DEFAULT) return CL_BUCKET_DEFAULT;
    while (b * 2 <= want) b *= 2;
    return b;
}

int cl_model_buckets(const cl_model_desc *d, int u0, int u1, int64_t part_lo, size_t bucket_bytes, int stage2,
                     int split, cl_bucket *out) {
    size_t limit = bucket_bytes ? bucket_bytes : 1, bytes = 0;
    int n = 0, pb = -1, lowest_with_params = -1;
    for (int u = u0; u < u1; u++)
        if (d->units[u].nparams) {
            lowest_with_params = u;
            break;
        }
    int head_alone = part_uses_tied(d, u0, u1) && !part_owns_tied(d, u0, u1);
    for (int u = u1 - 1; u >= u0; u--) {
        const cl_unit *un = &d->units[u];
        if (head_alone && !stage2 && uses_tied(d, u)) /* the head's wte gradient is whole once the head is done */
            out[n++] = (cl_bucket){u, 0, -1};
        if (!un->nparams) continue;
        int a = un->first_param, b = un->first_param + un->nparams - 1;
        if (pb < 0) pb = b;
        for (int i = a; i <= b; i++) bytes += (size_t)d->params[i].numel * sizeof(float);
        if (bytes >= limit || u == lowest_with_params) {
            out[n].unit = u;
            bucket_range(d, u0, u1, part_lo, a, pb, stage2, split, &out[n]);
            n++;
            pb = -1;
            bytes = 0;
        }
    }
    return n;
}

void cl_model_part_sizes(const cl_model_desc *d, int u0, int u1, int B, int recompute, const cl_zero *zero, cl_part_sizes *z) {
    memset(z, 0, sizeof *z);
    /* parameters are laid out in unit order: the held ones are one range */
    int64_t lo = -1, hi = 0;
    int head = part_uses_tied(d, u0, u1), embed = part_owns_tied(d, u0, u1);
    int i0 = u0 < d->nunits ? d->units[u0].first_param : d->nparams, i1 = u1 < d->nunits ? d->units[u1].first_param : d->nparams;
    for (int i = i0; i < i1; i++) { /* units' parameters are consecutive ranges in unit order (desc_build.c) */
        if (lo < 0) lo = cl_param_elem(&d->params[i]);
        hi = cl_param_elem(&d->params[i]) + align16(d->params[i].numel);
    }
    if (lo < 0) lo = 0;
    z->lo = lo;
    z->nfloats = hi - lo;
    z->tied_copy = -1;
    z->scratch = 16;
    z->io = 16;
    for (int u = u0; u < u1; u++) {
        const cl_unit *un = &d->units[u];
        int64_t sc = unit_scratch(d, u, B), a = un->in_floats * B, b = un->out_floats * B;
        if (sc > z->scratch) z->scratch = sc;
        if (a > z->io) z->io = a;
        if (b > z->io) z->io = b;
        const cl_kind *k = kind_of(d, u);
        int64_t n = k->rc_floats ? k->rc_floats(d, un, B, recompute) : 0;
        if (n > z->rc) z->rc = n;
        if (k->rope) z->tables = (int64_t)d->T * (d->cfg.channels / d->cfg.heads); /* cos and sin, T x hd/2 each */
    }
    if (d->tied_wte >= 0 && head) {
        int64_t wte = align16(d->params[d->tied_wte].numel);
        if (!embed) { /* the head's own copy of wte, after the part's parameters */
            z->tied_copy = z->nfloats;
            z->nfloats += wte;
        }
        z->head_wte = d->params[d->tied_wte].numel;
    }
    z->alloc = z->nfloats ? z->nfloats : 16;
    z->shard = z->moments = z->alloc;
    if (zero && cl_zero_shards_optim(zero->stage) && zero->n > 1) {
        int64_t q = 16 * (int64_t)zero->n;
        z->alloc = (z->alloc + q - 1) / q * q;
        z->shard = z->alloc / zero->n;
        z->shard_lo = (int64_t)zero->rank * z->shard;
        z->moments = z->shard;
    }
    z->grads = z->alloc;
    z->bucket_bytes = zero && zero->bucket_bytes ? zero->bucket_bytes
                                                 : zero ? cl_zero_bucket_default(zero->stage, zero->n, z->shard) : CL_BUCKET_DEFAULT;
    if (zero && cl_zero_shards_grads(zero->stage) && zero->n > 1) {
        z->grads = z->shard;
        for (int i = 0; i < d->nparams; i++) {
            int u = d->params[i].unit;
            int held = (u >= u0 && u < u1) || (i == d->tied_wte && z->tied_copy >= 0);
            if (held && cl_model_grad_whole(d, u0, u1, zero->split, i)) z->whole += align16(d->params[i].numel);
        }
        cl_bucket *bk = malloc((size_t)(u1 - u0 + 1) * sizeof *bk);
        CL_ASSERT(bk != NULL);
        int nb = cl_model_buckets(d, u0, u1, lo, z->bucket_bytes, 1, zero->split, bk), used = 0;
        for (int k = 0; k < nb; k++) {
            if (bk[k].hi - bk[k].lo > z->bucket) z->bucket = bk[k].hi - bk[k].lo;
            used += bk[k].hi > bk[k].lo;
        }
        free(bk);
        z->nbuf = used > 1 ? 2 : used;
        z->halo = (int64_t)zero->n * (z->shard < CL_SUMSQ_BLOCK ? z->shard : CL_SUMSQ_BLOCK) + CL_SUMSQ_BLOCK;
    }
    z->params = z->alloc;
    if (zero && cl_zero_shards_params(zero->stage) && zero->n > 1) { /* the shard, and the working buffers the units are gathered into */
        z->params = z->shard;
        int events = 0;
        for (int u = u0; u < u1; u++) {
            int64_t at;
            int wte;
            int64_t w = cl_model_unit_range(d, u, &at, &wte);
            events += w > 0;
            if (w > z->pwork) z->pwork = w;
        }
        int k = (zero->prefetch > 0 ? zero->prefetch : 0) + 1;
        z->npwork = k < events ? k : events;
    }
    if (cl_nn_bf16(d)) z->wlow = cl_nn_bf16_floats(z->params); /* the BF16 copy the passes read */
    if (zero && zero->reduce == CL_BF16) /* what the BF16 reduction moves, staged: the buckets' ranges or working buffers */
        z->gstage = z->nbuf ? z->nbuf * cl_nn_bf16_floats(z->bucket) : cl_nn_bf16_floats(z->grads) + cl_nn_bf16_floats(z->head_wte);
    z->acts = cl_model_act_floats(d, u0, u1, B, recompute);
}

int64_t cl_model_act_floats(const cl_model_desc *d, int u0, int u1, int B, int recompute) {
    int64_t n = 0;
    for (int u = u0; u < u1; u++) n += unit_act_floats(d, u, B, recompute);
    return n;
}

cl_status cl_recompute_parse(const char *name, cl_recompute *out) {
    if (!strcmp(name, "none")) *out = CL_RECOMPUTE_NONE;
    else if (!strcmp(name, "selective")) *out = CL_RECOMPUTE_SELECTIVE;
    else if (!strcmp(name, "full")) *out = CL_RECOMPUTE_FULL;
    else return cl_error(CL_ERR_INVALID, "unknown --recompute '%s' (none, selective or full)", name);
    return CL_OK;
}

cl_status cl_model_set_recompute(cl_model *m, cl_recompute mode) {
    const cl_model_desc *d = m->desc;
    cl_device_free(m->dev, m->rc_buf);
    m->rc_buf = NULL;
    m->recompute = mode;
    cl_model_part_sizes(d, m->u0, m->u1, m->B, mode, &m->zero, &m->sizes);
    if (m->sizes.rc) CL_TRY(cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)m->sizes.rc, &m->rc_buf));
    return CL_OK;
}

/* The rotary tables of positions [0, T) (cl_rope_table: host arithmetic), built once and copied to the device. */
static cl_status rope_tables(cl_model *m) {
    const cl_model_desc *d = m->desc;
    int64_t n = m->sizes.tables, half = n / 2;
    float *host = malloc((size_t)n * sizeof *host);
    if (!host) return cl_error(CL_ERR_OOM, "cannot allocate the rotary tables");
    const cl_model_config *c = &d->cfg; /* rope_scaling llama3, or none (factor 0) */
    const cl_rope_scaling sc = {c->rope_factor ? CL_ROPE_LLAMA3 : CL_ROPE_DEFAULT, c->rope_factor, c->rope_low_freq, c->rope_high_freq,
                                c->rope_original_context};
    cl_status s = cl_rope_table(host, host + half, d->T, c->channels / c->heads, c->rope_theta, &sc);
    if (!s) s = cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)n, &m->rope);
    if (!s) cl_device_copy_from_host(m->dev, m->rope, host, (size_t)n * sizeof(float));
    free(host);
    return s;
}

cl_status cl_model_create(cl_model **out, const cl_model_desc *d, cl_device *dev, int B) {
    return cl_model_create_part(out, d, dev, B, 0, d->nunits);
}

cl_status cl_model_create_part(cl_model **out, const cl_model_desc *d, cl_device *dev, int B, int u0, int u1) {
    return cl_model_create_zero(out, d, dev, B, u0, u1, NULL);
}

/* Whether held parameter i's gradient is one a weight product writes first (its kind's gfirst): left unfilled by
 * cl_model_begin_grads. Below ZeRO 2 only, where every gradient lives in m->grads at its loc. */
static int grad_first(const cl_model *m, int i) {
    const cl_model_desc *d = m->desc;
    if (!m->grads || cl_zero_shards_grads(m->zero.stage) || m->loc[i] < 0 || d->params[i].numel <= 0) return 0;
    int u = d->params[i].unit, j = i - d->units[u].first_param;
    return u >= m->u0 && u < m->u1 && j < 31 && (kind_of(d, u)->gfirst & CL_KIND_GFIRST(j)) && m->g[i] == m->grads + m->loc[i];
}

static int cmp_range(const void *a, const void *b) {
    int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

/* cl_model_begin_grads' ranges of m->grads left unfilled, in order (fixed once the part's gradients are placed). */
static void skip_ranges(cl_model *m) {
    const cl_model_desc *d = m->desc;
    int n = 0;
    for (int i = 0; i < d->nparams; i++)
        if (grad_first(m, i)) m->gskip[n][0] = m->loc[i], m->gskip[n][1] = m->loc[i] + d->params[i].numel, n++;
    qsort(m->gskip, (size_t)n, sizeof *m->gskip, cmp_range);
    m->ngskip = n;
}

/* A part (cl_model_create_zero), with its gradient buffers when grads (else none: cl_model_create_infer). */
static cl_status create_part(cl_model **out, const cl_model_desc *d, cl_device *dev, int B, int u0, int u1, const cl_zero *zero,
                             int grads) {
    *out = NULL;
    if (!d->params_only) CL_TRY(cl_model_config_runs(&d->cfg)); /* a description may be of more than the kinds run */
    if (B < 1) return cl_error(CL_ERR_INVALID, "micro-batch size must be positive (got %d)", B);
    if (u0 < 0 || u1 > d->nunits || u0 >= u1)
        return cl_error(CL_ERR_INVALID, "units %d..%d are not a range of the model's %d units", u0, u1 - 1, d->nunits);
    cl_model *m = calloc(1, sizeof *m);
    if (!m) return cl_error(CL_ERR_OOM, "cannot allocate a model");
    m->desc = d;
    m->dev = dev;
    m->u0 = u0;
    m->u1 = u1;
    m->B = B;
    m->tp = cl_tp_of(NULL);
    m->zero = zero && cl_zero_shards_optim(zero->stage) && zero->n > 1 ? *zero : (cl_zero){0, 1, 0, 0, 0, 0, zero ? zero->reduce : CL_F32};
    m->p = calloc((size_t)d->nparams, sizeof *m->p);
    m->g = calloc((size_t)d->nparams, sizeof *m->g);
    m->loc = malloc((size_t)(d->nparams ? d->nparams : 1) * sizeof *m->loc);
    m->gfresh = calloc((size_t)d->nparams + 1, 1);
    m->gskip = malloc((size_t)(d->nparams ? d->nparams : 1) * sizeof *m->gskip);
    cl_status s = CL_OK;
    if (!m->p || !m->g || !m->loc || !m->gfresh || !m->gskip) s = cl_error(CL_ERR_OOM, "cannot allocate parameter tables");
    cl_model_part_sizes(d, u0, u1, B, CL_RECOMPUTE_NONE, &m->zero, &m->sizes);
    if (!grads) m->sizes.grads = m->sizes.whole = m->sizes.bucket = m->sizes.halo = m->sizes.gstage = 0, m->sizes.nbuf = 0;
    const cl_part_sizes *z = &m->sizes;
    m->nfloats = z->nfloats;
    for (int i = 0; !s && i < d->nparams; i++) {
        int u = d->params[i].unit;
        m->loc[i] = u >= u0 && u < u1 ? cl_param_elem(&d->params[i]) - z->lo : -1;
    }
    if (!s && z->tied_copy >= 0) m->loc[d->tied_wte] = z->tied_copy;
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_PARAMS, (size_t)z->params, &m->params);
    if (!s && z->npwork && !(m->pwork = calloc((size_t)z->npwork, sizeof *m->pwork)))
        s = cl_error(CL_ERR_OOM, "cannot allocate parameter tables");
    for (int k = 0; !s && k < z->npwork; k++) s = cl_device_alloc_f32(dev, CL_MEM_PARAMS, (size_t)z->pwork, &m->pwork[k]);
    float *wlow = NULL;
    if (!s && z->wlow) s = cl_device_alloc_f32(dev, CL_MEM_PARAMS, (size_t)z->wlow, &wlow);
    m->wlow = (uint16_t *)wlow;
    if (!s && grads) s = cl_device_alloc_f32(dev, CL_MEM_GRADS, (size_t)z->grads, &m->grads);
    if (!s && z->whole) s = cl_device_alloc_f32(dev, CL_MEM_GRADS, (size_t)z->whole, &m->gwhole);
    for (int k = 0; !s && k < z->nbuf; k++) s = cl_device_alloc_f32(dev, CL_MEM_GRADS, (size_t)z->bucket, &m->gbuf[k]);
    if (!s && z->halo) s = cl_device_alloc_f32(dev, CL_MEM_GRADS, (size_t)z->halo, &m->ghalo);
    if (!s && z->gstage) s = cl_device_alloc_f32(dev, CL_MEM_GRADS, (size_t)z->gstage, &m->gstage);
    m->max_io_floats = z->io;
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_WORKSPACE, (size_t)z->scratch, &m->scratch);
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_WORKSPACE, (size_t)z->io, &m->dbuf[0]);
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_WORKSPACE, (size_t)z->io, &m->dbuf[1]);
    if (!s && z->tables) s = rope_tables(m);
    if (s) {
        cl_model_destroy(m);
        return s;
    }
    cl_device_fill(dev, m->params, 0, (size_t)z->params * sizeof(float));
    if (m->grads) cl_device_fill(dev, m->grads, 0, (size_t)z->grads * sizeof(float));
    if (m->gwhole) cl_device_fill(dev, m->gwhole, 0, (size_t)z->whole * sizeof(float));
    int stage2 = cl_zero_shards_grads(m->zero.stage);
    for (int i = 0, w = 0; i < d->nparams; i++) {
        if (m->loc[i] < 0) continue;
        if (z->params == z->alloc) m->p[i] = m->params + m->loc[i]; /* ZeRO 3: aimed per unit (cl_model_z3_before) */
        if (!grads) continue;
        if (!stage2) m->g[i] = m->grads + m->loc[i];
        else if (cl_model_grad_whole(d, u0, u1, m->zero.split, i)) { /* whole, in parameter order; the others while their bucket runs */
            m->g[i] = m->gwhole + w;
            w += (int)align16(d->params[i].numel);
        }
    }
    skip_ranges(m);
    *out = m;
    return CL_OK;
}

cl_status cl_model_create_zero(cl_model **out, const cl_model_desc *d, cl_device *dev, int B, int u0, int u1,
                               const cl_zero *zero) {
    return create_part(out, d, dev, B, u0, u1, zero, 1);
}

cl_status cl_model_create_infer(cl_model **out, const cl_model_desc *d, cl_device *dev, int B, int u0, int u1) {
    return create_part(out, d, dev, B, u0, u1, NULL, 0);
}

int cl_model_holds_param(const cl_model *m, int i) { return i >= 0 && i < m->desc->nparams && m->loc[i] >= 0; }

int cl_model_owns_param(const cl_model *m, int i) {
    if (i < 0 || i >= m->desc->nparams) return 0;
    int u = m->desc->params[i].unit;
    return u >= m->u0 && u < m->u1;
}


cl_status cl_model_split_tied(cl_model *m) {
    const cl_model_desc *d = m->desc;
    if (!part_uses_tied(d, m->u0, m->u1) || m->head_wte_g) return CL_OK;
    size_t n = (size_t)m->sizes.head_wte;
    CL_TRY(cl_device_alloc_f32(m->dev, CL_MEM_GRADS, n, &m->head_wte_g));
    cl_device_fill(m->dev, m->head_wte_g, 0, n * sizeof(float));
    return CL_OK;
}

void cl_model_tie_grads(cl_model *m) {
    const cl_model_desc *d = m->desc;
    if (!m->head_wte_g || !cl_model_owns_param(m, d->tied_wte)) return;
    cl_kern(m)->add_inplace(m->g[d->tied_wte], m->head_wte_g, d->params[d->tied_wte].numel);
}

void cl_model_destroy(cl_model *m) {
    if (!m) return;
    cl_device_free(m->dev, m->params);
    cl_device_free(m->dev, m->wlow);
    cl_device_free(m->dev, m->grads);
    cl_device_free(m->dev, m->gwhole);
    cl_device_free(m->dev, m->gbuf[0]);
    cl_device_free(m->dev, m->gbuf[1]);
    cl_device_free(m->dev, m->ghalo);
    cl_device_free(m->dev, m->gstage);
    for (int k = 0; m->pwork && k < m->sizes.npwork; k++) cl_device_free(m->dev, m->pwork[k]);
    free(m->pwork);
    cl_model_z3_destroy(m);
    cl_nn_cp_free(m);
    cl_device_free(m->dev, m->scratch);
    cl_device_free(m->dev, m->dbuf[0]);
    cl_device_free(m->dev, m->dbuf[1]);
    cl_device_free(m->dev, m->head_wte_g);
    cl_device_free(m->dev, m->rc_buf);
    cl_device_free(m->dev, m->rope);
    free(m->loc);
    free(m->p);
    free(m->g);
    free(m->gfresh);
    free(m->gskip);
    free(m);
}

/* Tensors made in pieces of whole rows of about this many values, the pieces over the thread's team. */
enum { INIT_PIECE = 1 << 18 };

/* Rows [k0, k0 + nk) of tensor ps (n values a row), the runs of them this
 * rank holds, into p: value v of the whole tensor is made of draws
 * [v dpv, (v + 1) dpv) of the tensor's stream, which *t (at draw *pos)
 * reaches by cl_rng_skip, so it does not matter which thread makes which
 * piece. row: room for nk n floats. */
static void init_rows(const cl_model *m, const cl_param_spec *ps, float *p, int64_t n, int64_t k0, int64_t nk, cl_rng *t,
                      uint64_t *pos, float *row) {
    int dpv = ps->init == CL_INIT_NORMAL ? 2 : ps->init == CL_INIT_UNIFORM ? 1 : 0;
    for (int64_t k = 0; k < nk; k++) {
        cl_param_run runs[3];
        int nr = cl_param_row_runs(ps, m->desc->tpl.rank, k0 + k, runs);
        for (int q = 0; q < nr; q++) {
            float *x = row + k * n + runs[q].col;
            uint64_t at = (uint64_t)((k0 + k) * n + runs[q].col) * (uint64_t)dpv;
            CL_ASSERT(at >= *pos); /* the runs of a row in order */
            if (dpv) cl_rng_skip(t, at - *pos);
            for (int64_t j = 0; j < runs[q].len; j++) {
                uint64_t a = dpv ? cl_rng_u64(t) : 0;
                if (ps->init == CL_INIT_NORMAL) x[j] = ps->scale * cl_rng_normal_of(a, cl_rng_u64(t));
                else if (ps->init == CL_INIT_UNIFORM) x[j] = ps->scale * (2.0f * cl_rng_uniform_of(a) - 1.0f);
                else x[j] = ps->init == CL_INIT_ONES ? 1.0f : 0.0f;
            }
            if (dpv) *pos = at + (uint64_t)runs[q].len * (uint64_t)dpv;
            cl_device_copy_from_host(m->dev, p + runs[q].local, x, (size_t)runs[q].len * sizeof(float));
        }
    }
}

/* Every part draws the whole model's stream, parameter after parameter,
 * each tensor whole and row by row (value by value: a normal value two
 * draws, cl_rng_normal's; a uniform one, cl_rng_uniform's), and keeps what
 * it holds: every tp rank and pipeline stage starts from the one model's
 * weights. What it does not hold it skips (cl_rng_skip: microseconds for
 * any length), so a part's work is its own share; its pieces run over the
 * thread's team, each thread skipping to its first, the same bits on any
 * number of threads. */
void cl_model_init(cl_model *m, uint64_t seed) {
    cl_rng r;
    cl_rng_seed(&r, seed);
    const cl_model_desc *d = m->desc;
    for (int i = 0; i < d->nparams; i++) {
        const cl_param_spec *ps = &d->params[i];
        float *p = m->p[i]; /* NULL when not held */
        int64_t n = cl_param_row_len(ps), rows = n ? ps->full_numel / n : 0;
        int dpv = ps->init == CL_INIT_NORMAL ? 2 : ps->init == CL_INIT_UNIFORM ? 1 : 0;
        int64_t h0 = 0, h1 = 0; /* the rows [h0, h1) from the first this rank holds a run of to the last */
        for (int64_t k = 0; p && k < rows; k++) {
            cl_param_run runs[3];
            if (!cl_param_row_runs(ps, d->tpl.rank, k, runs)) continue;
            if (h1 == 0) h0 = k;
            h1 = k + 1;
        }
        /* pieces of at most INIT_PIECE values (a row at least), as many as a multiple of the team so that each
         * thread's share (contiguous: one skip to its first) is as long as the others' to a row a piece */
        int64_t per = n ? (INIT_PIECE / n > 0 ? INIT_PIECE / n : 1) : 1, th = cl_threads(), pieces = (h1 - h0 + per - 1) / per;
        pieces = (pieces + th - 1) / th * th;
        if (pieces > h1 - h0) pieces = h1 - h0;
        if (pieces) per = (h1 - h0 + pieces - 1) / pieces;
        pieces = per ? (h1 - h0 + per - 1) / per : 0;
        if (p && pieces) {
#pragma omp parallel if (pieces > 1)
            {
                float *row = malloc((size_t)(per * n) * sizeof *row);
                CL_ASSERT(row != NULL);
                cl_rng t = r;
                uint64_t pos = 0;
#pragma omp for schedule(static)
                for (int64_t q = 0; q < pieces; q++)
                    init_rows(m, ps, p, n, h0 + q * per, h1 - h0 - q * per < per ? h1 - h0 - q * per : per, &t, &pos, row);
                free(row);
            }
        }
        cl_rng_skip(&r, (uint64_t)ps->full_numel * (uint64_t)dpv);
    }
}

static pthread_once_t g_fill_once = PTHREAD_ONCE_INIT;
static int g_fill_all; /* CLEAVE_GRAD_FILL=all, read once: cl_model_begin_grads zeroes every gradient (the same bits) */

static void fill_read_env(void) {
    const char *e = getenv("CLEAVE_GRAD_FILL");
    g_fill_all = e && !strcmp(e, "all");
}

void cl_model_begin_grads(cl_model *m) {
    const cl_model_desc *d = m->desc;
    pthread_once(&g_fill_once, fill_read_env);
    if (g_fill_all || !m->grads || cl_zero_shards_grads(m->zero.stage)) { /* ZeRO 2 and 3: every gradient zeroed, as before */
        cl_model_zero_grads(m);
        return;
    }
    int64_t(*r)[2] = m->gskip, at = 0;
    int n = m->ngskip;
    for (int k = 0; k <= n; k++) { /* the gaps between them, and after the last, zeroed */
        int64_t end = k < n ? r[k][0] : m->nfloats;
        if (end > at) cl_device_fill(m->dev, m->grads + at, 0, (size_t)(end - at) * sizeof(float));
        if (k < n && r[k][1] > at) at = r[k][1];
    }
    for (int i = 0; i < d->nparams; i++) m->gfresh[i] = !m->g[i] ? 0 : grad_first(m, i) ? 2 : 1;
    int tied = 0; /* the head's copy of the tied weight's gradient, when its kind's product writes it first */
    for (int u = m->u0; m->head_wte_g && u < m->u1; u++)
        if (uses_tied(d, u) && (kind_of(d, u)->gfirst & CL_KIND_GFIRST_TIED)) tied = 1;
    if (m->head_wte_g && !tied) cl_device_fill(m->dev, m->head_wte_g, 0, (size_t)d->params[d->tied_wte].numel * sizeof(float));
    m->gfresh[d->nparams] = m->head_wte_g ? (tied ? 2 : 1) : 0;
}

void cl_model_zero_grads(cl_model *m) {
    const cl_model_desc *d = m->desc;
    int stage2 = cl_zero_shards_grads(m->zero.stage);
    cl_device_fill(m->dev, m->grads, 0, (size_t)(stage2 ? m->sizes.grads : m->nfloats) * sizeof(float));
    if (m->gwhole) cl_device_fill(m->dev, m->gwhole, 0, (size_t)m->sizes.whole * sizeof(float));
    if (m->head_wte_g) cl_device_fill(m->dev, m->head_wte_g, 0, (size_t)d->params[d->tied_wte].numel * sizeof(float));
    /* the gradients those fills zeroed (ZeRO 2 and 3: the whole-kept ones; a bucket's are zeroed when it begins) */
    for (int i = 0; i < d->nparams; i++) m->gfresh[i] = m->g[i] && (!stage2 || cl_model_grad_whole(d, m->u0, m->u1, m->zero.split, i));
    m->gfresh[d->nparams] = m->head_wte_g != NULL;
}

cl_status cl_acts_create(cl_model *m, int B, cl_acts *a) {
    memset(a, 0, sizeof *a);
    const cl_model_desc *d = m->desc;
    int n = m->u1 - m->u0;
    a->off = calloc((size_t)n + 1, sizeof *a->off);
    if (!a->off) return cl_error(CL_ERR_OOM, "cannot allocate activation offsets");
    int64_t total = 0;
    for (int u = m->u0; u < m->u1; u++) {
        a->off[u - m->u0] = total;
        total += unit_act_floats(d, u, B, m->recompute);
    }
    a->off[n] = total; /* = cl_model_act_floats(d, u0, u1, B, recompute) */
    cl_status s = cl_device_alloc_f32(m->dev, CL_MEM_ACTS, (size_t)total, &a->base);
    if (s) {
        free(a->off);
        a->off = NULL;
        return s;
    }
    a->B = B;
    return CL_OK;
}

void cl_acts_destroy(cl_model *m, cl_acts *a) {
    if (!a) return;
    cl_device_free(m->dev, a->base);
    free(a->off);
    memset(a, 0, sizeof *a);
}

float *cl_acts_output(const cl_model *m, const cl_acts *a, int u) {
    return cl_acts_output_mb(m, a, u, &(cl_microbatch){.B = a->B, .T = m->desc->T});
}

/* The output pointer for the actual micro-batch (a block's output moves with B and T). */
static float *unit_out(const cl_model *m, const cl_acts *a, int u, int B, int T) {
    const cl_kind *k = kind_of(m->desc, u);
    float *base = a->base + a->off[u - m->u0];
    return k->output ? k->output(m, base, B, T) : base; /* every other unit keeps its output first */
}

float *cl_acts_output_mb(const cl_model *m, const cl_acts *a, int u, const cl_microbatch *mb) {
    return unit_out(m, a, u, mb->B, mb->T);
}

static cl_status check_mb(const cl_model *m, int u, const cl_microbatch *mb, const cl_acts *a) {
    if (u < m->u0 || u >= m->u1) return cl_error(CL_ERR_INVALID, "unit %d is not held by this rank (holds %d..%d)", u, m->u0, m->u1 - 1);
    if (mb->B < 1 || mb->B > a->B || mb->B > m->B)
        return cl_error(CL_ERR_INVALID, "micro-batch of %d samples exceeds the capacity %d", mb->B, a->B < m->B ? a->B : m->B);
    int T = m->desc->T; /* the description's positions per sample: 1 for the families without sequences */
    if (mb->T < 1 || mb->T > T) return cl_error(CL_ERR_INVALID, "micro-batch of %d positions exceeds the %d the model was sized for", mb->T, T);
    if (m->desc->tpl.tp != m->tp.size)
        return cl_error(CL_ERR_INVALID, "a slice for %d tensor-parallel ranks runs without its group (cl_model_set_tp)", m->desc->tpl.tp);
    if (m->desc->tpl.sp && mb->T % m->desc->tpl.tp)
        return cl_error(CL_ERR_INVALID, "sequence parallelism: %d positions are not a multiple of --tp %d", mb->T, m->desc->tpl.tp);
    return CL_OK;
}

cl_status cl_model_set_tp(cl_model *m, cl_comm *comm) {
    cl_tp tp = cl_tp_of(comm);
    if (tp.size != m->desc->tpl.tp || tp.rank != m->desc->tpl.rank)
        return cl_error(CL_ERR_INVALID, "the tensor-parallel group (rank %d of %d) is not the one the model was cut for (rank %d of %d)",
                        tp.rank, tp.size, m->desc->tpl.rank, m->desc->tpl.tp);
    m->tp = tp;
    return CL_OK;
}

int64_t cl_unit_keep_floats(const cl_model_desc *d, int u, int B) {
    const cl_kind *k = kind_of(d, u);
    return k->keep_floats ? k->keep_floats(d, &d->units[u], B) : 0;
}

cl_status cl_unit_forward(cl_model *m, int u, const cl_microbatch *mb, const float *in, cl_acts *a) {
    CL_TRY(check_mb(m, u, mb, a));
    const cl_unit *un = &m->desc->units[u];
    const cl_kind *k = kind_of(m->desc, u);
    if (!k) return cl_error(CL_ERR_INTERNAL, "unknown unit kind %d", (int)un->kind);
    return k->forward(m, un, mb, in, a->base + a->off[u - m->u0], m->p + un->first_param);
}

cl_status cl_unit_backward(cl_model *m, int u, const cl_microbatch *mb, const float *in, cl_acts *a,
                           const float *dout, float *din, int what) {
    CL_TRY(check_mb(m, u, mb, a));
    const cl_unit *un = &m->desc->units[u];
    const cl_kind *k = kind_of(m->desc, u);
    if (!k) return cl_error(CL_ERR_INTERNAL, "unknown unit kind %d", (int)un->kind);
    if (!(what & CL_BWD_INPUT)) din = NULL;
    cl_status s = k->backward(m, un, mb, in, a->base + a->off[u - m->u0], m->p + un->first_param, m->g + un->first_param,
                              dout, din, what);
    /* a weight pass has written its parameters' gradients, through cl_nn_grad_beta or not: none is a fill's zeros now;
     * one cl_model_begin_grads left unfilled and no product wrote is zeroed now, before anything reads it */
    if (what & CL_BWD_WEIGHT) {
        for (int i = un->first_param; i < un->first_param + un->nparams; i++)
            if (m->gfresh[i] == 2) cl_device_fill(m->dev, m->g[i], 0, (size_t)m->desc->params[i].numel * sizeof(float));
        if (m->head_wte_g && k->uses_tied && m->gfresh[m->desc->nparams] == 2) {
            cl_device_fill(m->dev, m->head_wte_g, 0, (size_t)m->desc->params[m->desc->tied_wte].numel * sizeof(float));
            m->gfresh[m->desc->nparams] = 0;
        }
        memset(m->gfresh + un->first_param, 0, (size_t)un->nparams);
    }
    return s;
}

double cl_acts_loss_sum(const cl_model *m, const cl_acts *a, int u, const cl_microbatch *mb) {
    const float *l = unit_out(m, a, u, mb->B, mb->T);
    int n = kind_of(m->desc, u)->loss == CL_KIND_LOSS_TOKEN ? mb->B * mb->T : mb->B;
    return cl_kern(m)->sum(l, n);
}

const float *cl_acts_logits(const cl_model *m, const cl_acts *a, int u, const cl_microbatch *mb) {
    const cl_kind *k = kind_of(m->desc, u);
    if (k->logits) return k->logits(m, a, u, mb->B, mb->T);
    return k->logits_in && u > m->u0 ? unit_out(m, a, u - 1, mb->B, mb->T) : NULL;
}

int cl_unit_is_loss(const cl_unit *u) { return cl_kind_of(u->kind)->loss != 0; }

static const float *stage_input(const cl_model *m, const cl_acts *a, int u, const cl_microbatch *mb, const float *in) {
    return u == m->u0 ? in : unit_out(m, a, u - 1, mb->B, mb->T);
}

cl_status cl_model_stage_forward(cl_model *m, const cl_microbatch *mb, const float *in, cl_acts *a) {
    CL_TRY(cl_model_z3_pass(m, CL_Z3_FORWARD));
    for (int u = m->u0; u < m->u1; u++) {
        CL_TRY(cl_model_z3_before(m, u));
        CL_TRY(cl_unit_forward(m, u, mb, stage_input(m, a, u, mb, in), a));
    }
    return CL_OK;
}

cl_status cl_model_stage_backward(cl_model *m, const cl_microbatch *mb, const float *in, cl_acts *a, const float *dout,
                                  float *din, int what, float *const *save_dout, cl_unit_done_fn done, void *ctx) {
    const cl_model_desc *d = m->desc;
    int cur = 0;
    CL_TRY(cl_model_z3_pass(m, CL_Z3_BACKWARD));
    for (int u = m->u1 - 1; u >= m->u0; u--) {
        const cl_unit *un = &d->units[u];
        CL_TRY(cl_model_z3_before(m, u));
        int w = what == CL_BWD_INPUT && !cl_unit_is_loss(un) ? CL_BWD_INPUT : CL_BWD_ALL;
        if (w == CL_BWD_INPUT && save_dout && dout)
            cl_device_copy(m->dev, save_dout[u - m->u0], dout, (size_t)(un->out_floats * mb->B) * sizeof(float));
        float *dn = u > m->u0 ? m->dbuf[cur] : din;
        if (dn) cl_device_fill(m->dev, dn, 0, (size_t)(un->in_floats * mb->B) * sizeof(float));
        m->tp_keep = w == CL_BWD_INPUT && save_dout ? save_dout[u - m->u0] + un->out_floats * mb->B : NULL;
        cl_status st = cl_unit_backward(m, u, mb, stage_input(m, a, u, mb, in), a, dout, dn, w);
        m->tp_keep = NULL;
        CL_TRY(st);
        if (done) CL_TRY(done(ctx, u));
        dout = dn;
        cur ^= 1;
    }
    return CL_OK;
}

cl_status cl_model_stage_backward_weight(cl_model *m, const cl_microbatch *mb, const float *in, cl_acts *a,
                                         float *const *saved_dout, cl_unit_done_fn done, void *ctx) {
    CL_TRY(cl_model_z3_pass(m, CL_Z3_WEIGHT));
    for (int u = m->u1 - 1; u >= m->u0; u--) {
        const cl_unit *un = &m->desc->units[u];
        if (!cl_unit_is_loss(un)) {
            CL_TRY(cl_model_z3_before(m, u));
            m->tp_keep = saved_dout[u - m->u0] + un->out_floats * mb->B;
            cl_status st = cl_unit_backward(m, u, mb, stage_input(m, a, u, mb, in), a, saved_dout[u - m->u0], NULL, CL_BWD_WEIGHT);
            m->tp_keep = NULL;
            CL_TRY(st);
        }
        if (done) CL_TRY(done(ctx, u));
    }
    return CL_OK;
}

cl_status cl_model_forward_backward(cl_model *m, const cl_microbatch *mb, cl_acts *a, double *loss_sum, int do_backward) {
    if (m->u0 != 0 || m->u1 != m->desc->nunits)
        return cl_error(CL_ERR_INVALID, "forward_backward needs the whole model on this rank");
    CL_TRY(cl_model_stage_forward(m, mb, mb->x, a));
    if (loss_sum) *loss_sum = cl_acts_loss_sum(m, a, m->u1 - 1, mb);
    return do_backward ? cl_model_backward(m, mb, a, NULL, NULL) : CL_OK;
}

cl_status cl_model_backward(cl_model *m, const cl_microbatch *mb, cl_acts *a, cl_unit_done_fn done, void *ctx) {
    return cl_model_stage_backward(m, mb, mb->x, a, NULL, NULL, CL_BWD_ALL, NULL, done, ctx);
}

cl_status cl_model_logits_last(cl_model *m, const int32_t *tokens, int T, cl_acts *a, float *logits_out) {
    const cl_model_desc *d = m->desc;
    if (cl_kind_of(d->units[d->nunits - 1].kind)->loss != CL_KIND_LOSS_TOKEN)
        return cl_error(CL_ERR_INVALID, "logits_last needs a model whose last unit is a loss per token (a language model)");
    if (T < 1 || T > d->T) return cl_error(CL_ERR_INVALID, "context of %d tokens (model sized for 1..%d)", T, d->T);
    int32_t *targets = calloc((size_t)T, sizeof *targets);
    if (!targets) return cl_error(CL_ERR_OOM, "cannot allocate targets");
    cl_microbatch mb = {.B = 1, .T = T, .tokens = tokens, .targets = targets, .dloss = 0};
    cl_status s = cl_model_forward_backward(m, &mb, a, NULL, 0);
    if (!s) {
        const float *logits = cl_acts_logits(m, a, d->nunits - 1, &mb);
        cl_device_copy_to_host(m->dev, logits_out, logits + (int64_t)(T - 1) * d->cfg.vocab, (size_t)d->cfg.vocab * sizeof(float));
    }
    free(targets);
    return s;
}
