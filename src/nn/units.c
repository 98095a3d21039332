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
#include "cleave/model.h"
#include "cleave/kernels.h"
#include "cleave/prof.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t unit_scratch(const cl_model_desc *d, int u, int B) {
    const cl_unit *un = &d->units[u];
    int64_t s = un->scratch_floats * B;
    if (un->kind == CL_UNIT_CONV) {
        cl_conv2d_shape cs;
        cl_conv2d_shape_init(&cs, B, un->c, un->h, un->w, un->oc, un->k, un->k, un->stride, un->pad);
        s += cl_conv2d_col_floats(&cs);
    }
    return s;
}

/* Saved floats of unit u for a micro-batch of B under a recompute mode. */
/* One block's attention scores at micro-batch B: this rank's heads. */
static int64_t block_scores(const cl_model_desc *d, int B) { return (int64_t)B * d->heads_local * d->T * d->T; }

static int64_t unit_act_floats(const cl_model_desc *d, int u, int B, int recompute) {
    const cl_unit *un = &d->units[u];
    int64_t n = un->act_floats * B;
    if (un->kind == CL_UNIT_BLOCK && recompute == CL_RECOMPUTE_SELECTIVE) n -= block_scores(d, B);
    if (un->kind == CL_UNIT_BLOCK && recompute == CL_RECOMPUTE_FULL) n = un->out_floats * B;
    return (n + 15) & ~(int64_t)15;
}

static int64_t align16(int64_t n) { return (n + 15) & ~(int64_t)15; }

int64_t cl_zero_overlap(int64_t a, int64_t b, int64_t lo, int64_t len, int64_t *start) {
    int64_t s = a > lo ? a : lo, e = b < lo + len ? b : lo + len;
    *start = s;
    return e > s ? e - s : 0;
}

static int part_holds_kind(const cl_model_desc *d, int u0, int u1, cl_unit_kind k) {
    for (int u = u0; u < u1; u++)
        if (d->units[u].kind == k) return 1;
    return 0;
}

int cl_model_grad_whole(const cl_model_desc *d, int u0, int u1, int split, int i) {
    if (d->params[i].tp_partial) return 1;
    if (split && cl_unit_is_loss(&d->units[d->params[i].unit])) return 1;
    if (i != d->tied_wte) return 0;
    return part_holds_kind(d, u0, u1, CL_UNIT_EMBED) != part_holds_kind(d, u0, u1, CL_UNIT_LMHEAD);
}

/* Bucket [pa..pb] of parameters: their float range, trimmed of whole-kept gradients at both ends under stage 2. */
static void bucket_range(const cl_model_desc *d, int u0, int u1, int64_t part_lo, int pa, int pb, int stage2, int split,
                         cl_bucket *b) {
    b->lo = d->params[pa].offset - part_lo;
    b->hi = d->params[pb].offset - part_lo + align16(d->params[pb].numel);
    if (!stage2) return;
    while (pa <= pb && cl_model_grad_whole(d, u0, u1, split, pa)) pa++;
    while (pb >= pa && cl_model_grad_whole(d, u0, u1, split, pb)) pb--;
    if (pa > pb) b->hi = b->lo; /* empty: all whole */
    else bucket_range(d, u0, u1, part_lo, pa, pb, 0, 0, b);
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
    int head_alone = d->tied_wte >= 0 && part_holds_kind(d, u0, u1, CL_UNIT_LMHEAD) && !part_holds_kind(d, u0, u1, CL_UNIT_EMBED);
    for (int u = u1 - 1; u >= u0; u--) {
        const cl_unit *un = &d->units[u];
        if (head_alone && !stage2 && un->kind == CL_UNIT_LMHEAD) /* the head's wte gradient is whole once the head is done */
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

int64_t cl_model_unit_range(const cl_model_desc *d, int u, int64_t *lo, int *wte) {
    int64_t a = -1, b = 0;
    for (int i = 0; i < d->nparams; i++) {
        if (d->params[i].unit != u) continue;
        if (a < 0) a = d->params[i].offset;
        b = d->params[i].offset + align16(d->params[i].numel);
    }
    *lo = a < 0 ? 0 : a;
    *wte = d->units[u].kind == CL_UNIT_LMHEAD && d->tied_wte >= 0;
    return (a < 0 ? 0 : b - a) + (*wte ? align16(d->params[d->tied_wte].numel) : 0);
}

void cl_model_part_sizes(const cl_model_desc *d, int u0, int u1, int B, int recompute, const cl_zero *zero, cl_part_sizes *z) {
    memset(z, 0, sizeof *z);
    /* parameters are laid out in unit order: the held ones are one range */
    int64_t lo = -1, hi = 0;
    int head = 0, embed = 0;
    for (int i = 0; i < d->nparams; i++) {
        int u = d->params[i].unit;
        if (u < u0 || u >= u1) continue;
        if (lo < 0) lo = d->params[i].offset;
        hi = d->params[i].offset + align16(d->params[i].numel);
    }
    if (lo < 0) lo = 0;
    z->lo = lo;
    z->nfloats = hi - lo;
    z->tied_copy = -1;
    z->scratch = 16;
    z->io = 16;
    for (int u = u0; u < u1; u++) {
        const cl_unit *un = &d->units[u];
        head |= un->kind == CL_UNIT_LMHEAD;
        embed |= un->kind == CL_UNIT_EMBED;
        int64_t sc = unit_scratch(d, u, B), a = un->in_floats * B, b = un->out_floats * B;
        if (sc > z->scratch) z->scratch = sc;
        if (a > z->io) z->io = a;
        if (b > z->io) z->io = b;
        if (un->kind == CL_UNIT_BLOCK) {
            int64_t n = recompute == CL_RECOMPUTE_FULL        ? un->act_floats * B
                        : recompute == CL_RECOMPUTE_SELECTIVE ? block_scores(d, B)
                                                               : 0;
            if (n > z->rc) z->rc = n;
        }
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
    if (zero && cl_zero_shards_grads(zero->stage) && zero->n > 1) {
        z->grads = z->shard;
        for (int i = 0; i < d->nparams; i++) {
            int u = d->params[i].unit;
            int held = (u >= u0 && u < u1) || (i == d->tied_wte && z->tied_copy >= 0);
            if (held && cl_model_grad_whole(d, u0, u1, zero->split, i)) z->whole += align16(d->params[i].numel);
        }
        cl_bucket *bk = malloc((size_t)(u1 - u0 + 1) * sizeof *bk);
        CL_ASSERT(bk != NULL);
        int nb = cl_model_buckets(d, u0, u1, lo, zero->bucket_bytes, 1, zero->split, bk), used = 0;
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

cl_status cl_model_create(cl_model **out, const cl_model_desc *d, cl_device *dev, int B) {
    return cl_model_create_part(out, d, dev, B, 0, d->nunits);
}

cl_status cl_model_create_part(cl_model **out, const cl_model_desc *d, cl_device *dev, int B, int u0, int u1) {
    return cl_model_create_zero(out, d, dev, B, u0, u1, NULL);
}

cl_status cl_model_create_zero(cl_model **out, const cl_model_desc *d, cl_device *dev, int B, int u0, int u1,
                               const cl_zero *zero) {
    *out = NULL;
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
    m->zero = zero && cl_zero_shards_optim(zero->stage) && zero->n > 1 ? *zero : (cl_zero){0, 1, 0, 0, 0, 0};
    m->p = calloc((size_t)d->nparams, sizeof *m->p);
    m->g = calloc((size_t)d->nparams, sizeof *m->g);
    m->loc = malloc((size_t)(d->nparams ? d->nparams : 1) * sizeof *m->loc);
    cl_status s = CL_OK;
    if (!m->p || !m->g || !m->loc) s = cl_error(CL_ERR_OOM, "cannot allocate parameter tables");
    cl_model_part_sizes(d, u0, u1, B, CL_RECOMPUTE_NONE, &m->zero, &m->sizes);
    const cl_part_sizes *z = &m->sizes;
    m->nfloats = z->nfloats;
    for (int i = 0; !s && i < d->nparams; i++) {
        int u = d->params[i].unit;
        m->loc[i] = u >= u0 && u < u1 ? d->params[i].offset - z->lo : -1;
    }
    if (!s && z->tied_copy >= 0) m->loc[d->tied_wte] = z->tied_copy;
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_PARAMS, (size_t)z->params, &m->params);
    if (!s && z->npwork && !(m->pwork = calloc((size_t)z->npwork, sizeof *m->pwork)))
        s = cl_error(CL_ERR_OOM, "cannot allocate parameter tables");
    for (int k = 0; !s && k < z->npwork; k++) s = cl_device_alloc_f32(dev, CL_MEM_PARAMS, (size_t)z->pwork, &m->pwork[k]);
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_GRADS, (size_t)z->grads, &m->grads);
    if (!s && z->whole) s = cl_device_alloc_f32(dev, CL_MEM_GRADS, (size_t)z->whole, &m->gwhole);
    for (int k = 0; !s && k < z->nbuf; k++) s = cl_device_alloc_f32(dev, CL_MEM_GRADS, (size_t)z->bucket, &m->gbuf[k]);
    if (!s && z->halo) s = cl_device_alloc_f32(dev, CL_MEM_GRADS, (size_t)z->halo, &m->ghalo);
    m->max_io_floats = z->io;
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_WORKSPACE, (size_t)z->scratch, &m->scratch);
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_WORKSPACE, (size_t)z->io, &m->dbuf[0]);
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_WORKSPACE, (size_t)z->io, &m->dbuf[1]);
    if (s) {
        cl_model_destroy(m);
        return s;
    }
    memset(m->params, 0, (size_t)z->params * sizeof(float));
    memset(m->grads, 0, (size_t)z->grads * sizeof(float));
    if (m->gwhole) memset(m->gwhole, 0, (size_t)z->whole * sizeof(float));
    int stage2 = cl_zero_shards_grads(m->zero.stage);
    for (int i = 0, w = 0; i < d->nparams; i++) {
        if (m->loc[i] < 0) continue;
        if (z->params == z->alloc) m->p[i] = m->params + m->loc[i]; /* ZeRO 3: aimed per unit (cl_model_z3_before) */
        if (!stage2) m->g[i] = m->grads + m->loc[i];
        else if (cl_model_grad_whole(d, u0, u1, m->zero.split, i)) { /* whole, in parameter order; the others while their bucket runs */
            m->g[i] = m->gwhole + w;
            w += (int)align16(d->params[i].numel);
        }
    }
    *out = m;
    return CL_OK;
}

int cl_model_holds_param(const cl_model *m, int i) { return i >= 0 && i < m->desc->nparams && m->loc[i] >= 0; }

int cl_model_owns_param(const cl_model *m, int i) {
    if (i < 0 || i >= m->desc->nparams) return 0;
    int u = m->desc->params[i].unit;
    return u >= m->u0 && u < m->u1;
}

static int holds_kind(const cl_model *m, cl_unit_kind k) { return part_holds_kind(m->desc, m->u0, m->u1, k); }

cl_status cl_model_split_tied(cl_model *m) {
    const cl_model_desc *d = m->desc;
    if (d->tied_wte < 0 || !holds_kind(m, CL_UNIT_LMHEAD) || m->head_wte_g) return CL_OK;
    size_t n = (size_t)m->sizes.head_wte;
    CL_TRY(cl_device_alloc_f32(m->dev, CL_MEM_GRADS, n, &m->head_wte_g));
    memset(m->head_wte_g, 0, n * sizeof(float));
    return CL_OK;
}

void cl_model_tie_grads(cl_model *m) {
    const cl_model_desc *d = m->desc;
    if (!m->head_wte_g || !cl_model_owns_param(m, d->tied_wte)) return;
    cl_add_inplace(m->g[d->tied_wte], m->head_wte_g, d->params[d->tied_wte].numel);
}

void cl_model_destroy(cl_model *m) {
    if (!m) return;
    cl_device_free(m->dev, m->params);
    cl_device_free(m->dev, m->grads);
    cl_device_free(m->dev, m->gwhole);
    cl_device_free(m->dev, m->gbuf[0]);
    cl_device_free(m->dev, m->gbuf[1]);
    cl_device_free(m->dev, m->ghalo);
    for (int k = 0; m->pwork && k < m->sizes.npwork; k++) cl_device_free(m->dev, m->pwork[k]);
    free(m->pwork);
    cl_model_z3_destroy(m);
    cl_device_free(m->dev, m->scratch);
    cl_device_free(m->dev, m->dbuf[0]);
    cl_device_free(m->dev, m->dbuf[1]);
    cl_device_free(m->dev, m->head_wte_g);
    cl_device_free(m->dev, m->rc_buf);
    free(m->loc);
    free(m->p);
    free(m->g);
    free(m);
}

void cl_model_init(cl_model *m, uint64_t seed) {
    cl_rng r;
    cl_rng_seed(&r, seed);
    const cl_model_desc *d = m->desc;
    int64_t maxrow = 1;
    for (int i = 0; i < d->nparams; i++)
        if (cl_param_row_len(&d->params[i]) > maxrow) maxrow = cl_param_row_len(&d->params[i]);
    float *row = malloc((size_t)maxrow * sizeof *row);
    CL_ASSERT(row != NULL);
    for (int i = 0; i < d->nparams; i++) {
        const cl_param_spec *ps = &d->params[i];
        float *p = m->p[i]; /* NULL when not held: the draws still happen, so every part sees the same stream */
        /* the whole tensor is drawn, row by row, and this rank keeps its slice: every tp starts from the same weights */
        int64_t n = cl_param_row_len(ps), rows = n ? ps->full_numel / n : 0;
        for (int64_t k = 0; k < rows; k++) {
            for (int64_t j = 0; j < n; j++) {
                float x = 0;
                switch (ps->init) {
                case CL_INIT_ZEROS: x = 0; break;
                case CL_INIT_ONES: x = 1; break;
                case CL_INIT_NORMAL: x = ps->scale * cl_rng_normal(&r); break;
                case CL_INIT_UNIFORM: x = ps->scale * (2.0f * cl_rng_uniform(&r) - 1.0f); break;
                }
                row[j] = x;
            }
            cl_param_run runs[3];
            int nr = p ? cl_param_row_runs(ps, d->tpl.rank, k, runs) : 0;
            for (int q = 0; q < nr; q++) memcpy(p + runs[q].local, row + runs[q].col, (size_t)runs[q].len * sizeof(float));
        }
    }
    free(row);
}

void cl_model_zero_grads(cl_model *m) {
    memset(m->grads, 0, (size_t)(cl_zero_shards_grads(m->zero.stage) ? m->sizes.grads : m->nfloats) * sizeof(float));
    if (m->gwhole) memset(m->gwhole, 0, (size_t)m->sizes.whole * sizeof(float));
    if (m->head_wte_g) memset(m->head_wte_g, 0, (size_t)m->desc->params[m->desc->tied_wte].numel * sizeof(float));
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

/* ---- per-unit activation layouts (floats, from actual B and T) ---- */

typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *out;
} block_acts;

/* Token rows of a micro-batch of N that this rank's layernorms, residuals
 * and block inputs and outputs hold: all, or 1/tp under sequence parallelism. */
static int64_t rows_here(const cl_model_desc *d, int64_t N) { return d->tpl.sp ? N / d->tpl.tp : N; }

/* A block's saved activations from base, for the actual B and T: rows Ns of
 * C (token rows: ln1, res2, ln2, out and the layernorm statistics) and N
 * rows of this rank's Cl columns (qkv, atty, fch, fch_gelu). att_apart: the
 * scores live elsewhere (selective recompute), not in base. */
static block_acts block_layout_at(const cl_model_desc *d, float *base, int64_t B, int64_t T, float *att_apart) {
    int64_t N = B * T, Ns = rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local;
    block_acts b;
    float *p = base;
    b.ln1 = p; p += Ns * C;
    b.ln1_mean = p; p += Ns;
    b.ln1_rstd = p; p += Ns;
    b.qkv = p; p += N * 3 * Cl;
    if (att_apart) b.att = att_apart;
    else b.att = p, p += block_scores(d, (int)B);
    b.atty = p; p += N * Cl;
    b.res2 = p; p += Ns * C;
    b.ln2 = p; p += Ns * C;
    b.ln2_mean = p; p += Ns;
    b.ln2_rstd = p; p += Ns;
    b.fch = p; p += N * 4 * Cl;
    b.fch_gelu = p; p += N * 4 * Cl;
    b.out = p;
    return b;
}

/* A block's activations under the model's recompute mode: base is the
 * block's saved share of a micro-batch's cl_acts. */
static block_acts block_acts_of(const cl_model *m, float *base, int64_t B, int64_t T) {
    const cl_model_desc *d = m->desc;
    if (m->recompute == CL_RECOMPUTE_SELECTIVE) return block_layout_at(d, base, B, T, m->rc_buf);
    if (m->recompute == CL_RECOMPUTE_FULL) {
        block_acts b = block_layout_at(d, m->rc_buf, B, T, NULL);
        b.out = base; /* the one thing kept */
        return b;
    }
    return block_layout_at(d, base, B, T, NULL);
}

typedef struct { float *lnf, *mean, *rstd, *logits, *lse, *losses; } head_acts;

/* lnf holds every token row (gathered under sequence parallelism), mean and
 * rstd this rank's rows, logits this rank's Vl vocabulary columns. */
static head_acts head_layout(const cl_model_desc *d, float *base, int64_t N) {
    int64_t C = d->cfg.channels, Ns = rows_here(d, N);
    head_acts h;
    float *p = base;
    h.losses = p; p += N; /* the output first, so cl_acts_output is the base */
    h.lnf = p; p += N * C;
    h.mean = p; p += Ns;
    h.rstd = p; p += Ns;
    h.lse = p; p += N;
    h.logits = p;
    return h;
}

float *cl_acts_output(const cl_model *m, const cl_acts *a, int u) {
    const cl_model_desc *d = m->desc;
    const cl_unit *un = &d->units[u];
    float *base = a->base + a->off[u - m->u0];
    if (un->kind == CL_UNIT_BLOCK) return block_acts_of(m, base, a->B, d->T).out;
    return base; /* every other unit keeps its output first */
}

/* The output pointer for the actual micro-batch (block outputs move with B, T). */
static float *unit_out(const cl_model *m, const cl_acts *a, int u, int B, int T) {
    const cl_model_desc *d = m->desc;
    float *base = a->base + a->off[u - m->u0];
    if (d->units[u].kind == CL_UNIT_BLOCK) return block_acts_of(m, base, B, T).out;
    return base;
}

float *cl_acts_output_mb(const cl_model *m, const cl_acts *a, int u, const cl_microbatch *mb) {
    return unit_out(m, a, u, mb->B, mb->T);
}

static cl_status check_mb(const cl_model *m, int u, const cl_microbatch *mb, const cl_acts *a) {
    if (u < m->u0 || u >= m->u1) return cl_error(CL_ERR_INVALID, "unit %d is not held by this rank (holds %d..%d)", u, m->u0, m->u1 - 1);
    if (mb->B < 1 || mb->B > a->B || mb->B > m->B)
        return cl_error(CL_ERR_INVALID, "micro-batch of %d samples exceeds the capacity %d", mb->B, a->B < m->B ? a->B : m->B);
    int T = m->desc->cfg.kind == CL_MODEL_GPT ? m->desc->T : 1;
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

/* rows x C += bias[C], row by row. */
static void add_bias(float *x, const float *bias, int64_t rows, int64_t C) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < C; j++) x[i * C + j] += bias[j];
}

/* The input of a column-parallel layer: every token row. Under sequence
 * parallelism this rank holds Ns of them and gathers the rest into buf. */
static cl_status col_input(const cl_model *m, const float *rows, float *buf, int64_t Ns, int64_t C, const float **out) {
    if (!m->desc->tpl.sp) {
        *out = rows; /* copy to the tensor-parallel region: identity forward */
        return CL_OK;
    }
    *out = buf;
    return cl_tp_forward(&m->tp, CL_TP_GATHER, rows, buf, (size_t)(Ns * C));
}

/* The output of a row-parallel layer: partial sums in part (N x C) summed
 * over the group into out (this rank's Ns rows; out may be part when not
 * sequence-parallel), then the bias, once. */
static cl_status row_output(const cl_model *m, float *part, float *out, const float *bias, int64_t N, int64_t Ns, int64_t C) {
    if (m->desc->tpl.sp) CL_TRY(cl_tp_forward(&m->tp, CL_TP_SCATTER, part, out, (size_t)(Ns * C)));
    else CL_TRY(cl_tp_forward(&m->tp, CL_TP_REDUCE, part, out, (size_t)(N * C)));
    add_bias(out, bias, Ns, C);
    return CL_OK;
}

/* A row-parallel layer's output, out = x w + bias (x: N x K, w: K x C):
 * on one rank a plain linear layer, the bias its GEMM's beta term
 * (cl_linear_forward); on more, this rank's partial sums (in the part's
 * scratch under sequence parallelism, else in out) summed over the group by
 * row_output, then the bias once. */
static cl_status row_linear(const cl_model *m, const char *what, double flops, const float *x, const float *w, const float *bias,
                            float *out, int64_t N, int64_t K) {
    const cl_model_desc *d = m->desc;
    int64_t C = d->cfg.channels;
    if (d->tpl.tp == 1) {
        CL_PROF(what, flops, cl_linear_forward(out, x, w, bias, (int)N, (int)K, (int)C));
        return CL_OK;
    }
    float *part = d->tpl.sp ? m->scratch + N * C : out;
    CL_PROF(what, flops, cl_gemm(0, 0, (int)N, (int)C, (int)K, 1.0f, x, (int)K, w, (int)C, 0.0f, part, (int)C));
    return row_output(m, part, out, bias, N, rows_here(d, N), C);
}

/* A GPT block (Megatron-LM's split, written once for a tensor-parallel
 * group of any size; one rank is the whole block): c_attn column-parallel
 * by heads, attention on this rank's heads, attn.c_proj row-parallel; c_fc
 * column-parallel, mlp.c_proj row-parallel. The forward temporaries
 * (gathered rows, partial sums) live in the part's scratch. */
static cl_status block_forward(const cl_model *m, const block_acts *s, const float *in, float *const *p, int B, int T) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)B * T, Ns = rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local;
    float *G = m->scratch;
    double fl = 2.0 * (double)N * C * Cl, att = 4.0 * (double)B * T * T * Cl;
    const float *x;
    CL_PROF("fwd layernorm", 0, cl_layernorm_forward(s->ln1, s->ln1_mean, s->ln1_rstd, in, p[0], p[1], (int)Ns, (int)C));
    CL_TRY(col_input(m, s->ln1, G, Ns, C, &x));
    CL_PROF("fwd qkv", 3 * fl, cl_linear_forward(s->qkv, x, p[2], p[3], (int)N, (int)C, (int)(3 * Cl)));
    CL_PROF("fwd attention", att, cl_attention_forward(s->atty, s->att, s->qkv, B, T, (int)Cl, d->heads_local));
    CL_TRY(row_linear(m, "fwd attn proj", fl, s->atty, p[4], p[5], s->res2, N, Cl));
    CL_PROF("fwd residual layernorm", 0,
            cl_residual_layernorm_forward(s->res2, s->ln2, s->ln2_mean, s->ln2_rstd, s->res2, in, p[6], p[7], (int)Ns, (int)C));
    CL_TRY(col_input(m, s->ln2, G, Ns, C, &x));
    /* c_fc without its bias, then bias + GELU in one pass */
    CL_PROF("fwd fc", 4 * fl, cl_gemm(0, 0, (int)N, (int)(4 * Cl), (int)C, 1.0f, x, (int)C, p[8], (int)(4 * Cl), 0.0f, s->fch, (int)(4 * Cl)));
    CL_PROF("fwd bias gelu", 0, cl_bias_gelu_forward(s->fch_gelu, s->fch, p[9], (int)N, (int)(4 * Cl)));
    CL_TRY(row_linear(m, "fwd fc proj", 4 * fl, s->fch_gelu, p[10], p[11], s->out, N, 4 * Cl));
    CL_PROF("fwd residual", 0, cl_add_inplace(s->out, s->res2, Ns * C));
    return CL_OK;
}

int64_t cl_unit_keep_floats(const cl_model_desc *d, int u, int B) {
    const cl_unit *un = &d->units[u];
    if (d->tpl.tp == 1 || un->kind != CL_UNIT_BLOCK) return 0;
    int64_t N = (int64_t)B * d->T, Ns = rows_here(d, N), C = d->cfg.channels;
    /* not sequence-parallel: dln2, dln1 after their all-reduces; sequence-parallel: dout and dres2 gathered,
     * dln2 and dln1 reduce-scattered */
    return d->tpl.sp ? 2 * N * C + 2 * Ns * C : 2 * N * C;
}

/* A tensor-parallel collective's result in a backward: computed by run()
 * (and kept in *keep when the input pass of a split backward keeps it), or,
 * in the weight pass of a split backward, read back from *keep instead of
 * running the collective again. keep advances by n either way. */
typedef struct {
    float *keep;   /* m->tp_keep: NULL when the backward is not split */
    int wonly;     /* the weight pass */
} keep_cursor;

static const float *kept(keep_cursor *k, const float *computed, int64_t n, int computing) {
    const float *r = computed;
    if (k->keep) {
        if (!computing) r = k->keep;
        else memcpy(k->keep, computed, (size_t)n * sizeof(float));
        k->keep += n;
    }
    return r;
}

/* The block's backward (the forward's split, written once). The scratch
 * gradients are assigned where first written (beta 0), so only dqkv, which
 * attention's backward adds into, starts at zero. */
static cl_status block_backward(cl_model *m, const block_acts *s, const float *in, float *const *p, float *const *g,
                                const float *dout, float *din, int wi, int ww, int B, int T) {
    const cl_model_desc *d = m->desc;
    const cl_tp *tp = &m->tp;
    int sp = d->tpl.sp, split = d->tpl.tp > 1;
    int64_t N = (int64_t)B * T, Ns = rows_here(d, N), C = d->cfg.channels, Cl = d->channels_local;
    int iN = (int)N, iNs = (int)Ns, iC = (int)C, iCl = (int)Cl;
    /* a split group's weight pass reads the input pass's collective results back (tp_keep); one rank has no
     * collective to keep and computes its input gradients again (cl_unit_keep_floats is 0 there) */
    keep_cursor k = {split ? m->tp_keep : NULL, ww && !wi && split};
    if (k.wonly && !k.keep) return cl_error(CL_ERR_INTERNAL, "a tensor-parallel weight pass without the input pass's results");
    int run = !k.wonly; /* run the collectives (not the weight pass of a split backward) */
    float *w = m->scratch;
    float *dres2 = w; w += Ns * C;
    float *dfchg = w; w += 4 * N * Cl;
    float *dln2 = w; w += N * C;
    float *datty = w; w += N * Cl;
    float *dqkv = w; w += 3 * N * Cl;
    float *dln1 = w; w += N * C;
    float *dof = NULL, *dr2f = NULL, *G = NULL, *dln2s = NULL, *dln1s = NULL;
    if (sp) {
        dof = w; w += N * C;
        dr2f = w; w += N * C;
        G = w; w += N * C;
        dln2s = w; w += Ns * C;
        dln1s = w; w += Ns * C;
    }
    float *attscratch = w;
    CL_ASSERT(attscratch + block_scores(d, B) <= m->scratch + m->sizes.scratch);
    double fl = 2.0 * (double)N * C * Cl, att = 4.0 * (double)B * T * T * Cl;
    const float *x;
    CL_PROF("bwd zero", 0, memset(dqkv, 0, (size_t)(3 * N * Cl) * sizeof(float)));
    CL_PROF("bwd residual", 0, memcpy(dres2, dout, (size_t)(Ns * C) * sizeof(float)));
    /* mlp.c_proj, row-parallel: the gradient of its output on every token row (the transpose of the
     * forward's reduce-scatter under sequence parallelism, else the same on every rank) */
    const float *dO = dout;
    if (sp) {
        if (run) CL_TRY(cl_tp_backward(tp, CL_TP_SCATTER, dout, dof, (size_t)(Ns * C)));
        dO = kept(&k, dof, N * C, run);
    }
    CL_PROF("bwd fc proj", 4 * fl, cl_gemm(0, 1, iN, 4 * iCl, iC, 1.0f, dO, iC, p[10], iC, 0.0f, dfchg, 4 * iCl));
    if (ww) CL_PROF("bwd fc proj w", 4 * fl, cl_linear_backward_weight(g[10], g[11], dO, s->fch_gelu, iN, 4 * iCl, iC));
    CL_PROF("bwd gelu", 0, cl_gelu_backward_set(dfchg, dfchg, s->fch, 4 * N * Cl));
    /* c_fc, column-parallel: the input gradient is a partial sum over the ranks' columns */
    const float *dl2 = NULL;
    if (run) {
        CL_PROF("bwd fc", 4 * fl, cl_gemm(0, 1, iN, iC, 4 * iCl, 1.0f, dfchg, 4 * iCl, p[8], 4 * iCl, 0.0f, dln2, iC));
        if (sp) CL_TRY(cl_tp_backward(tp, CL_TP_GATHER, dln2, dln2s, (size_t)(Ns * C)));
        else CL_TRY(cl_tp_backward(tp, CL_TP_COPY, dln2, dln2, (size_t)(N * C)));
    }
    dl2 = kept(&k, sp ? dln2s : dln2, Ns * C, run);
    if (ww) {
        CL_TRY(col_input(m, s->ln2, G, Ns, C, &x)); /* sequence-parallel: gathered again, not kept */
        CL_PROF("bwd fc w", 4 * fl, cl_linear_backward_weight(g[8], g[9], dfchg, x, iN, iC, 4 * iCl));
    }
    CL_PROF("bwd layernorm", 0, cl_layernorm_backward_input(dres2, dl2, s->res2, p[6], s->ln2_mean, s->ln2_rstd, iNs, iC));
    if (ww) CL_PROF("bwd layernorm w", 0, cl_layernorm_backward_weight(g[6], g[7], dl2, s->res2, s->ln2_mean, s->ln2_rstd, iNs, iC));
    /* attn.c_proj, row-parallel */
    const float *dR = dres2;
    if (sp) {
        if (run) CL_TRY(cl_tp_backward(tp, CL_TP_SCATTER, dres2, dr2f, (size_t)(Ns * C)));
        dR = kept(&k, dr2f, N * C, run);
    }
    CL_PROF("bwd attn proj", fl, cl_gemm(0, 1, iN, iCl, iC, 1.0f, dR, iC, p[4], iC, 0.0f, datty, iCl));
    if (ww) CL_PROF("bwd attn proj w", fl, cl_linear_backward_weight(g[4], g[5], dR, s->atty, iN, iCl, iC));
    CL_PROF("bwd attention", 2 * att, cl_attention_backward(dqkv, attscratch, datty, s->qkv, s->att, B, T, iCl, d->heads_local));
    if (ww) {
        CL_TRY(col_input(m, s->ln1, G, Ns, C, &x));
        CL_PROF("bwd qkv w", 3 * fl, cl_linear_backward_weight(g[2], g[3], dqkv, x, iN, iC, 3 * iCl));
    }
    /* c_attn, column-parallel by heads */
    const float *dl1 = NULL;
    if (run) {
        CL_PROF("bwd qkv", 3 * fl, cl_gemm(0, 1, iN, iC, 3 * iCl, 1.0f, dqkv, 3 * iCl, p[2], 3 * iCl, 0.0f, dln1, iC));
        if (sp) CL_TRY(cl_tp_backward(tp, CL_TP_GATHER, dln1, dln1s, (size_t)(Ns * C)));
        else CL_TRY(cl_tp_backward(tp, CL_TP_COPY, dln1, dln1, (size_t)(N * C)));
    }
    dl1 = kept(&k, sp ? dln1s : dln1, Ns * C, run);
    if (ww) CL_PROF("bwd layernorm w", 0, cl_layernorm_backward_weight(g[0], g[1], dl1, in, s->ln1_mean, s->ln1_rstd, iNs, iC));
    if (din) {
        CL_PROF("bwd layernorm", 0, cl_layernorm_backward_input(din, dl1, in, p[0], s->ln1_mean, s->ln1_rstd, iNs, iC));
        CL_PROF("bwd residual", 0, cl_add_inplace(din, dres2, Ns * C));
    }
    return CL_OK;
}

/* The embedding of a vocabulary slice (rows [v0, v0 + Vl) of wte): this
 * rank's rows for its tokens, zero for the others, summed over the group
 * (each position is nonzero on one rank only, so the sum is exact), then the
 * positions of this rank's token rows. */
static cl_status embed_forward_tp(const cl_model *m, float *out, const cl_microbatch *mb, float *const *p) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)mb->B * mb->T, Ns = rows_here(d, N), C = d->cfg.channels, v0 = d->vocab_start, Vl = d->vocab_local;
    float *full = d->tpl.sp ? m->scratch : out;
    for (int64_t i = 0; i < N; i++) {
        int64_t r = mb->tokens[i] - v0;
        float *o = full + i * C;
        if (r >= 0 && r < Vl) memcpy(o, p[0] + r * C, (size_t)C * sizeof(float));
        else memset(o, 0, (size_t)C * sizeof(float));
    }
    if (d->tpl.sp) CL_TRY(cl_tp_forward(&m->tp, CL_TP_SCATTER, full, out, (size_t)(Ns * C)));
    else CL_TRY(cl_tp_forward(&m->tp, CL_TP_REDUCE, out, out, (size_t)(N * C)));
    int64_t row0 = d->tpl.sp ? Ns * m->tp.rank : 0;
    for (int64_t i = 0; i < Ns; i++) {
        const float *pos = p[1] + ((row0 + i) % mb->T) * C;
        float *o = out + i * C;
        for (int64_t c = 0; c < C; c++) o[c] += pos[c];
    }
    return CL_OK;
}

/* Its weight gradient: every token row's output gradient (gathered under
 * sequence parallelism), into this rank's wte rows and into wpe. */
static cl_status embed_backward_tp(cl_model *m, float *const *g, const float *dout, const cl_microbatch *mb) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)mb->B * mb->T, C = d->cfg.channels, v0 = d->vocab_start, Vl = d->vocab_local;
    const float *df = dout;
    if (d->tpl.sp) {
        CL_TRY(cl_tp_backward(&m->tp, CL_TP_SCATTER, dout, m->scratch, (size_t)(rows_here(d, N) * C)));
        df = m->scratch;
    }
    for (int64_t i = 0; i < N; i++) {
        int64_t r = mb->tokens[i] - v0;
        const float *dd = df + i * C;
        float *pos = g[1] + (i % mb->T) * C;
        float *e = r >= 0 && r < Vl ? g[0] + r * C : NULL;
        for (int64_t c = 0; c < C; c++) {
            if (e) e[c] += dd[c];
            pos[c] += dd[c];
        }
    }
    return CL_OK;
}

/* The vocabulary-parallel head (Megatron's VocabParallelCrossEntropy):
 * logits for this rank's Vl vocabulary columns only; the row max and the
 * sums of exponentials and of the target's logit summed over the group;
 * padded columns (global index >= vocab) masked out. Used whenever tp > 1
 * or the vocabulary is padded. */
static int head_vp(const cl_model_desc *d) { return d->tpl.tp > 1 || d->vocab_padded != d->cfg.vocab; }

static int head_valid(const cl_model_desc *d) {
    int64_t v = (int64_t)d->cfg.vocab - d->vocab_start;
    return (int)(v < 0 ? 0 : v > d->vocab_local ? d->vocab_local : v);
}

static cl_status head_forward(cl_model *m, const head_acts *h, const float *in, float *const *p, const cl_microbatch *mb) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)mb->B * mb->T, Ns = rows_here(d, N), C = d->cfg.channels, Vl = d->vocab_local;
    const float *wte = m->p[d->tied_wte];
    double fl = 2.0 * N * C * Vl;
    if (!head_vp(d)) {
        CL_PROF("fwd layernorm", 0, cl_layernorm_forward(h->lnf, h->mean, h->rstd, in, p[0], p[1], (int)N, (int)C));
        CL_PROF("fwd logits", fl, cl_gemm(0, 1, (int)N, (int)Vl, (int)C, 1.0f, h->lnf, (int)C, wte, (int)C, 0.0f, h->logits, (int)Vl));
        CL_PROF("fwd softmax xent", 0, cl_xent_forward(h->losses, h->lse, h->logits, mb->targets, (int)N, (int)Vl));
        return CL_OK;
    }
    /* under sequence parallelism this rank normalizes its rows in place in lnf, then all are gathered */
    float *mine = h->lnf + (d->tpl.sp ? Ns * m->tp.rank * C : 0);
    CL_PROF("fwd layernorm", 0, cl_layernorm_forward(mine, h->mean, h->rstd, in, p[0], p[1], (int)Ns, (int)C));
    if (d->tpl.sp) CL_TRY(cl_tp_forward(&m->tp, CL_TP_GATHER, mine, h->lnf, (size_t)(Ns * C)));
    CL_PROF("fwd logits", fl, cl_gemm(0, 1, (int)N, (int)Vl, (int)C, 1.0f, h->lnf, (int)C, wte, (int)C, 0.0f, h->logits, (int)Vl));
    int valid = head_valid(d);
    /* after dlnf (and its shard): the row max, then (8-byte aligned) the sums of exp and the target's logit */
    int64_t at = N * C + (d->tpl.sp ? Ns * C : 0);
    float *mx = m->scratch + at;
    double *sums = (double *)(m->scratch + ((at + N + 1) & ~(int64_t)1));
    CL_PROF("fwd softmax xent", 0, cl_xent_vp_max(mx, h->logits, (int)N, (int)Vl, valid));
    if (m->tp.size > 1) CL_TRY(cl_comm_allreduce(m->tp.comm, mx, (size_t)N, CL_RED_MAX));
    CL_PROF("fwd softmax xent", 0, cl_xent_vp_sum(sums, sums + N, h->logits, mx, mb->targets, d->vocab_start, (int)N, (int)Vl, valid));
    if (m->tp.size > 1) CL_TRY(cl_comm_allreduce_f64(m->tp.comm, sums, (size_t)(2 * N), CL_RED_SUM));
    for (int64_t i = 0; i < N; i++) {
        double l = (double)mx[i] + log(sums[i]);
        h->lse[i] = (float)l;
        h->losses[i] = mb->targets[i] < 0 ? 0.0f : (float)(l - sums[N + i]);
    }
    return CL_OK;
}

static cl_status head_backward(cl_model *m, const head_acts *h, const float *in, float *const *p, float *const *g,
                               const cl_microbatch *mb, float *din, int ww) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)mb->B * mb->T, Ns = rows_here(d, N), C = d->cfg.channels, Vl = d->vocab_local;
    int iN = (int)N, iC = (int)C, iVl = (int)Vl;
    const float *wte = m->p[d->tied_wte];
    float *dwte = m->head_wte_g ? m->head_wte_g : m->g[d->tied_wte];
    float *dlnf = m->scratch;
    double fl = 2.0 * N * C * Vl;
    /* dlogits replaces logits in place: the logits are dead after this */
    if (head_vp(d))
        CL_PROF("bwd softmax xent", 0,
                cl_xent_vp_backward(h->logits, h->logits, h->lse, mb->targets, d->vocab_start, mb->dloss, iN, iVl, head_valid(d)));
    else
        CL_PROF("bwd softmax xent", 0, cl_xent_backward(h->logits, h->logits, h->lse, mb->targets, mb->dloss, iN, iVl));
    if (ww) CL_PROF("bwd logits w", fl, cl_gemm(1, 0, iVl, iC, iN, 1.0f, h->logits, iVl, h->lnf, iC, 1.0f, dwte, iC));
    CL_PROF("bwd logits", fl, cl_gemm(0, 0, iN, iC, iVl, 1.0f, h->logits, iVl, wte, iC, 0.0f, dlnf, iC));
    const float *dl = dlnf;
    if (d->tpl.sp) {
        CL_TRY(cl_tp_backward(&m->tp, CL_TP_GATHER, dlnf, dlnf + N * C, (size_t)(Ns * C)));
        dl = dlnf + N * C;
    } else if (m->tp.size > 1) {
        CL_TRY(cl_tp_backward(&m->tp, CL_TP_COPY, dlnf, dlnf, (size_t)(N * C)));
    }
    if (ww) CL_PROF("bwd layernorm w", 0, cl_layernorm_backward_weight(g[0], g[1], dl, in, h->mean, h->rstd, (int)Ns, iC));
    if (din) CL_PROF("bwd layernorm", 0, cl_layernorm_backward_input(din, dl, in, p[0], h->mean, h->rstd, (int)Ns, iC));
    return CL_OK;
}

/* A linear unit split over the tensor-parallel ranks (cl_unit's tp_mode). */
static cl_status linear_forward_tp(const cl_model *m, const cl_unit *un, float *out, const float *in, float *const *p, int B) {
    if (un->tp_mode != CL_LINEAR_ROWS) { /* whole, or column-parallel: its own columns of the output */
        cl_linear_forward(out, in, p[0], p[1], B, un->c, un->oc);
        return CL_OK;
    }
    cl_gemm(0, 0, B, un->oc, un->c, 1.0f, in, un->c, p[0], un->oc, 0.0f, out, un->oc);
    CL_TRY(cl_tp_forward(&m->tp, CL_TP_REDUCE, out, out, (size_t)B * un->oc));
    add_bias(out, p[1], B, un->oc);
    return CL_OK;
}

static cl_status linear_backward_tp(cl_model *m, const cl_unit *un, float *const *p, float *const *g, const float *dout,
                                    const float *in, float *din, int ww, int B) {
    if (ww) cl_linear_backward_weight(g[0], g[1], dout, in, B, un->c, un->oc);
    if (!din) return CL_OK;
    if (un->tp_mode != CL_LINEAR_COLS) {
        cl_linear_backward_input(din, dout, p[0], B, un->c, un->oc);
        return CL_OK;
    }
    /* column-parallel: a partial sum over the ranks' columns, summed (copy's backward), then added */
    float *part = m->scratch;
    memset(part, 0, (size_t)B * un->c * sizeof(float));
    cl_linear_backward_input(part, dout, p[0], B, un->c, un->oc);
    CL_TRY(cl_tp_backward(&m->tp, CL_TP_COPY, part, part, (size_t)B * un->c));
    cl_add_inplace(din, part, (int64_t)B * un->c);
    return CL_OK;
}

cl_status cl_unit_forward(cl_model *m, int u, const cl_microbatch *mb, const float *in, cl_acts *a) {
    CL_TRY(check_mb(m, u, mb, a));
    const cl_model_desc *d = m->desc;
    const cl_unit *un = &d->units[u];
    float *base = a->base + a->off[u - m->u0];
    float **p = m->p + un->first_param;
    int B = mb->B, T = mb->T, N = B * T;
    int C = d->cfg.channels;
    switch (un->kind) {
    case CL_UNIT_EMBED: {
        int V = d->cfg.vocab;
        for (int i = 0; i < N; i++)
            if (mb->tokens[i] < 0 || mb->tokens[i] >= V)
                return cl_error(CL_ERR_INVALID, "token %d at position %d is outside the vocabulary (%d)", mb->tokens[i], i, V);
        if (d->tpl.tp > 1) return embed_forward_tp(m, base, mb, p);
        CL_PROF("fwd embedding", 0, cl_embedding_forward(base, mb->tokens, p[0], p[1], B, T, C));
        return CL_OK;
    }
    case CL_UNIT_BLOCK: {
        block_acts s = block_acts_of(m, base, B, T);
        return block_forward(m, &s, in, p, B, T);
    }
    case CL_UNIT_LMHEAD: {
        int V = d->cfg.vocab;
        head_acts h = head_layout(d, base, N);
        for (int i = 0; i < N; i++)
            if (mb->targets[i] < -1 || mb->targets[i] >= V)
                return cl_error(CL_ERR_INVALID, "target %d at position %d is outside the vocabulary (%d)", mb->targets[i], i, V);
        return head_forward(m, &h, in, p, mb);
    }
    case CL_UNIT_CONV: {
        cl_conv2d_shape cs;
        cl_conv2d_shape_init(&cs, B, un->c, un->h, un->w, un->oc, un->k, un->k, un->stride, un->pad);
        cl_conv2d_forward(base, m->scratch, in, p[0], p[1], &cs);
        return CL_OK;
    }
    case CL_UNIT_RELU:
        cl_relu_forward(base, in, un->out_floats * B);
        return CL_OK;
    case CL_UNIT_MAXPOOL:
        cl_maxpool_forward(base, (int32_t *)(base + un->out_floats * B), in, B, un->c, un->h, un->w, un->k, un->stride);
        return CL_OK;
    case CL_UNIT_FLATTEN:
        memcpy(base, in, (size_t)(un->out_floats * B) * sizeof(float));
        return CL_OK;
    case CL_UNIT_LINEAR:
        return linear_forward_tp(m, un, base, in, p, B);
    case CL_UNIT_CLASSIFY:
        for (int i = 0; i < B; i++)
            if (mb->targets[i] < -1 || mb->targets[i] >= un->c)
                return cl_error(CL_ERR_INVALID, "label %d of sample %d is outside the %d classes", mb->targets[i], i, un->c);
        cl_xent_forward(base, base + B, in, mb->targets, B, un->c);
        return CL_OK;
    }
    return cl_error(CL_ERR_INTERNAL, "unknown unit kind %d", (int)un->kind);
}

cl_status cl_unit_backward(cl_model *m, int u, const cl_microbatch *mb, const float *in, cl_acts *a,
                           const float *dout, float *din, int what) {
    CL_TRY(check_mb(m, u, mb, a));
    const cl_model_desc *d = m->desc;
    const cl_unit *un = &d->units[u];
    float *base = a->base + a->off[u - m->u0];
    float **p = m->p + un->first_param;
    float **g = m->g + un->first_param;
    int B = mb->B, T = mb->T, N = B * T;
    int C = d->cfg.channels;
    int wi = what & CL_BWD_INPUT, ww = what & CL_BWD_WEIGHT;
    if (!wi) din = NULL;
    switch (un->kind) {
    case CL_UNIT_EMBED:
        if (ww && d->tpl.tp > 1) return embed_backward_tp(m, g, dout, mb);
        if (ww) CL_PROF("bwd embedding", 0, cl_embedding_backward_weight(g[0], g[1], dout, mb->tokens, B, T, C));
        return CL_OK;
    case CL_UNIT_BLOCK: {
        block_acts s = block_acts_of(m, base, B, T);
        /* what the forward did not keep, recomputed bit for bit (the output it writes again is the same) */
        if (m->recompute == CL_RECOMPUTE_FULL) CL_TRY(block_forward(m, &s, in, p, B, T));
        else if (m->recompute == CL_RECOMPUTE_SELECTIVE)
            cl_attention_forward(s.atty, s.att, s.qkv, B, T, d->channels_local, d->heads_local);
        return block_backward(m, &s, in, p, g, dout, din, wi, ww, B, T);
    }
    case CL_UNIT_LMHEAD: {
        head_acts h = head_layout(d, base, N);
        return head_backward(m, &h, in, p, g, mb, din, ww);
    }
    case CL_UNIT_CONV: {
        cl_conv2d_shape cs;
        cl_conv2d_shape_init(&cs, B, un->c, un->h, un->w, un->oc, un->k, un->k, un->stride, un->pad);
        if (ww) cl_conv2d_backward_weight(g[0], g[1], m->scratch, dout, in, &cs);
        if (din) cl_conv2d_backward_input(din, m->scratch, dout, p[0], &cs);
        return CL_OK;
    }
    case CL_UNIT_RELU:
        if (din) cl_relu_backward(din, dout, base, un->out_floats * B);
        return CL_OK;
    case CL_UNIT_MAXPOOL:
        if (din) cl_maxpool_backward(din, dout, (const int32_t *)(base + un->out_floats * B), B, un->c, un->h, un->w, un->k, un->stride);
        return CL_OK;
    case CL_UNIT_FLATTEN:
        if (din) cl_add_inplace(din, dout, un->out_floats * B);
        return CL_OK;
    case CL_UNIT_LINEAR:
        return linear_backward_tp(m, un, p, g, dout, in, din, ww, B);
    case CL_UNIT_CLASSIFY:
        if (din) cl_xent_backward(din, in, base + B, mb->targets, mb->dloss, B, un->c);
        return CL_OK;
    }
    return cl_error(CL_ERR_INTERNAL, "unknown unit kind %d", (int)un->kind);
}

double cl_acts_loss_sum(const cl_model *m, const cl_acts *a, int u, const cl_microbatch *mb) {
    const float *l = unit_out(m, a, u, mb->B, mb->T);
    int n = m->desc->units[u].kind == CL_UNIT_LMHEAD ? mb->B * mb->T : mb->B;
    double s = 0;
    for (int i = 0; i < n; i++) s += l[i];
    return s;
}

const float *cl_acts_logits(const cl_model *m, const cl_acts *a, int u, const cl_microbatch *mb) {
    const cl_model_desc *d = m->desc;
    if (d->units[u].kind == CL_UNIT_LMHEAD)
        return head_layout(d, a->base + a->off[u - m->u0], (int64_t)mb->B * mb->T).logits;
    if (d->units[u].kind == CL_UNIT_CLASSIFY && u > m->u0) return unit_out(m, a, u - 1, mb->B, mb->T);
    return NULL;
}

int cl_unit_is_loss(const cl_unit *u) { return u->kind == CL_UNIT_LMHEAD || u->kind == CL_UNIT_CLASSIFY; }

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
            memcpy(save_dout[u - m->u0], dout, (size_t)(un->out_floats * mb->B) * sizeof(float));
        float *dn = u > m->u0 ? m->dbuf[cur] : din;
        if (dn) memset(dn, 0, (size_t)(un->in_floats * mb->B) * sizeof(float));
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
    if (d->cfg.kind != CL_MODEL_GPT) return cl_error(CL_ERR_INVALID, "logits_last is for GPT models");
    if (T < 1 || T > d->T) return cl_error(CL_ERR_INVALID, "context of %d tokens (model sized for 1..%d)", T, d->T);
    int32_t *targets = calloc((size_t)T, sizeof *targets);
    if (!targets) return cl_error(CL_ERR_OOM, "cannot allocate targets");
    cl_microbatch mb = {.B = 1, .T = T, .tokens = tokens, .targets = targets, .dloss = 0};
    cl_status s = cl_model_forward_backward(m, &mb, a, NULL, 0);
    if (!s) {
        int last = d->nunits - 1;
        head_acts h = head_layout(d, a->base + a->off[last - m->u0], T);
        memcpy(logits_out, h.logits + (int64_t)(T - 1) * d->cfg.vocab, (size_t)d->cfg.vocab * sizeof(float));
    }
    free(targets);
    return s;
}
