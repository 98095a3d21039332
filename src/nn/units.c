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
static int64_t unit_act_floats(const cl_model_desc *d, int u, int B, int recompute) {
    const cl_unit *un = &d->units[u];
    int64_t n = un->act_floats * B;
    if (un->kind == CL_UNIT_BLOCK && recompute == CL_RECOMPUTE_SELECTIVE)
        n -= (int64_t)B * d->cfg.heads * d->T * d->T;
    if (un->kind == CL_UNIT_BLOCK && recompute == CL_RECOMPUTE_FULL) n = un->out_floats * B;
    return (n + 15) & ~(int64_t)15;
}

static int64_t align16(int64_t n) { return (n + 15) & ~(int64_t)15; }

void cl_model_part_sizes(const cl_model_desc *d, int u0, int u1, int B, int recompute, cl_part_sizes *z) {
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
                        : recompute == CL_RECOMPUTE_SELECTIVE ? (int64_t)B * d->cfg.heads * d->T * d->T
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
    cl_model_part_sizes(d, m->u0, m->u1, m->B, mode, &m->sizes);
    if (m->sizes.rc) CL_TRY(cl_device_alloc_f32(m->dev, CL_MEM_WORKSPACE, (size_t)m->sizes.rc, &m->rc_buf));
    return CL_OK;
}

cl_status cl_model_create(cl_model **out, const cl_model_desc *d, cl_device *dev, int B) {
    return cl_model_create_part(out, d, dev, B, 0, d->nunits);
}

cl_status cl_model_create_part(cl_model **out, const cl_model_desc *d, cl_device *dev, int B, int u0, int u1) {
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
    m->p = calloc((size_t)d->nparams, sizeof *m->p);
    m->g = calloc((size_t)d->nparams, sizeof *m->g);
    m->loc = malloc((size_t)(d->nparams ? d->nparams : 1) * sizeof *m->loc);
    cl_status s = CL_OK;
    if (!m->p || !m->g || !m->loc) s = cl_error(CL_ERR_OOM, "cannot allocate parameter tables");
    cl_model_part_sizes(d, u0, u1, B, CL_RECOMPUTE_NONE, &m->sizes);
    const cl_part_sizes *z = &m->sizes;
    m->nfloats = z->nfloats;
    for (int i = 0; !s && i < d->nparams; i++) {
        int u = d->params[i].unit;
        m->loc[i] = u >= u0 && u < u1 ? d->params[i].offset - z->lo : -1;
    }
    if (!s && z->tied_copy >= 0) m->loc[d->tied_wte] = z->tied_copy;
    size_t alloc = (size_t)z->alloc;
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_PARAMS, alloc, &m->params);
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_GRADS, alloc, &m->grads);
    m->max_io_floats = z->io;
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_WORKSPACE, (size_t)z->scratch, &m->scratch);
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_WORKSPACE, (size_t)z->io, &m->dbuf[0]);
    if (!s) s = cl_device_alloc_f32(dev, CL_MEM_WORKSPACE, (size_t)z->io, &m->dbuf[1]);
    if (s) {
        cl_model_destroy(m);
        return s;
    }
    memset(m->params, 0, alloc * sizeof(float));
    memset(m->grads, 0, alloc * sizeof(float));
    for (int i = 0; i < d->nparams; i++) {
        if (m->loc[i] < 0) continue;
        m->p[i] = m->params + m->loc[i];
        m->g[i] = m->grads + m->loc[i];
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

static int holds_kind(const cl_model *m, cl_unit_kind k) {
    for (int u = m->u0; u < m->u1; u++)
        if (m->desc->units[u].kind == k) return 1;
    return 0;
}

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
    for (int i = 0; i < d->nparams; i++) {
        const cl_param_spec *ps = &d->params[i];
        float *p = m->p[i]; /* NULL when not held: the draws still happen, so every part sees the same stream */
        for (int64_t j = 0; j < ps->numel; j++) {
            float x = 0;
            switch (ps->init) {
            case CL_INIT_ZEROS: x = 0; break;
            case CL_INIT_ONES: x = 1; break;
            case CL_INIT_NORMAL: x = ps->scale * cl_rng_normal(&r); break;
            case CL_INIT_UNIFORM: x = ps->scale * (2.0f * cl_rng_uniform(&r) - 1.0f); break;
            }
            if (p) p[j] = x;
        }
    }
}

void cl_model_zero_grads(cl_model *m) {
    memset(m->grads, 0, (size_t)m->nfloats * sizeof(float));
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

/* att_apart: the scores live elsewhere (selective recompute), not in base. */
static block_acts block_layout_at(float *base, int64_t N, int64_t C, int64_t NH, int64_t B, int64_t T, float *att_apart) {
    block_acts b;
    float *p = base;
    b.ln1 = p; p += N * C;
    b.ln1_mean = p; p += N;
    b.ln1_rstd = p; p += N;
    b.qkv = p; p += N * 3 * C;
    if (att_apart) b.att = att_apart;
    else b.att = p, p += B * NH * T * T;
    b.atty = p; p += N * C;
    b.res2 = p; p += N * C;
    b.ln2 = p; p += N * C;
    b.ln2_mean = p; p += N;
    b.ln2_rstd = p; p += N;
    b.fch = p; p += N * 4 * C;
    b.fch_gelu = p; p += N * 4 * C;
    b.out = p;
    return b;
}

static block_acts block_layout(float *base, int64_t N, int64_t C, int64_t NH, int64_t B, int64_t T) {
    return block_layout_at(base, N, C, NH, B, T, NULL);
}

/* A block's activations under the model's recompute mode: base is the
 * block's saved share of a micro-batch's cl_acts. */
static block_acts block_acts_of(const cl_model *m, float *base, int64_t B, int64_t T) {
    const cl_model_desc *d = m->desc;
    int64_t C = d->cfg.channels, NH = d->cfg.heads, N = B * T;
    if (m->recompute == CL_RECOMPUTE_SELECTIVE) return block_layout_at(base, N, C, NH, B, T, m->rc_buf);
    if (m->recompute == CL_RECOMPUTE_FULL) {
        block_acts b = block_layout(m->rc_buf, N, C, NH, B, T);
        b.out = base; /* the one thing kept */
        return b;
    }
    return block_layout(base, N, C, NH, B, T);
}

typedef struct { float *lnf, *mean, *rstd, *logits, *lse, *losses; } head_acts;

static head_acts head_layout(float *base, int64_t N, int64_t C) {
    head_acts h;
    float *p = base;
    h.losses = p; p += N; /* the output first, so cl_acts_output is the base */
    h.lnf = p; p += N * C;
    h.mean = p; p += N;
    h.rstd = p; p += N;
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
    return CL_OK;
}

static void block_forward(const block_acts *s, const float *in, float *const *p, int B, int T, int C, int NH) {
    int N = B * T;
    double NC = (double)N * C, fl = 2.0 * NC * C, att = 4.0 * (double)B * T * T * C;
    CL_PROF("fwd layernorm", 0, cl_layernorm_forward(s->ln1, s->ln1_mean, s->ln1_rstd, in, p[0], p[1], N, C));
    CL_PROF("fwd qkv", 3 * fl, cl_linear_forward(s->qkv, s->ln1, p[2], p[3], N, C, 3 * C));
    CL_PROF("fwd attention", att, cl_attention_forward(s->atty, s->att, s->qkv, B, T, C, NH));
    CL_PROF("fwd attn proj", fl, cl_linear_forward(s->res2, s->atty, p[4], p[5], N, C, C));
    CL_PROF("fwd residual layernorm", 0,
            cl_residual_layernorm_forward(s->res2, s->ln2, s->ln2_mean, s->ln2_rstd, s->res2, in, p[6], p[7], N, C));
    /* c_fc without its bias, then bias + GELU in one pass */
    CL_PROF("fwd fc", 4 * fl, cl_gemm(0, 0, N, 4 * C, C, 1.0f, s->ln2, C, p[8], 4 * C, 0.0f, s->fch, 4 * C));
    CL_PROF("fwd bias gelu", 0, cl_bias_gelu_forward(s->fch_gelu, s->fch, p[9], N, 4 * C));
    CL_PROF("fwd fc proj", 4 * fl, cl_linear_forward(s->out, s->fch_gelu, p[10], p[11], N, 4 * C, C));
    CL_PROF("fwd residual", 0, cl_add_inplace(s->out, s->res2, (int64_t)N * C));
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
        CL_PROF("fwd embedding", 0, cl_embedding_forward(base, mb->tokens, p[0], p[1], B, T, C));
        return CL_OK;
    }
    case CL_UNIT_BLOCK: {
        block_acts s = block_acts_of(m, base, B, T);
        block_forward(&s, in, p, B, T, C, d->cfg.heads);
        return CL_OK;
    }
    case CL_UNIT_LMHEAD: {
        int V = d->cfg.vocab;
        head_acts h = head_layout(base, N, C);
        const float *wte = m->p[d->tied_wte];
        for (int i = 0; i < N; i++)
            if (mb->targets[i] < -1 || mb->targets[i] >= V)
                return cl_error(CL_ERR_INVALID, "target %d at position %d is outside the vocabulary (%d)", mb->targets[i], i, V);
        double fl = 2.0 * N * C * V;
        CL_PROF("fwd layernorm", 0, cl_layernorm_forward(h.lnf, h.mean, h.rstd, in, p[0], p[1], N, C));
        CL_PROF("fwd logits", fl, cl_gemm(0, 1, N, V, C, 1.0f, h.lnf, C, wte, C, 0.0f, h.logits, V));
        CL_PROF("fwd softmax xent", 0, cl_xent_forward(h.losses, h.lse, h.logits, mb->targets, N, V));
        return CL_OK;
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
        cl_linear_forward(base, in, p[0], p[1], B, un->c, un->oc);
        return CL_OK;
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
        if (ww) CL_PROF("bwd embedding", 0, cl_embedding_backward_weight(g[0], g[1], dout, mb->tokens, B, T, C));
        return CL_OK;
    case CL_UNIT_BLOCK: {
        int NH = d->cfg.heads;
        int64_t NC = (int64_t)N * C;
        block_acts s = block_acts_of(m, base, B, T);
        /* what the forward did not keep, recomputed bit for bit (the output it writes again is the same) */
        if (m->recompute == CL_RECOMPUTE_FULL) block_forward(&s, in, p, B, T, C, NH);
        else if (m->recompute == CL_RECOMPUTE_SELECTIVE) cl_attention_forward(s.atty, s.att, s.qkv, B, T, C, NH);
        float *w = m->scratch;
        float *dres2 = w; w += NC;
        float *dfchg = w; w += 4 * NC; /* d(gelu out), then d(fc out) in place */
        float *dln2 = w; w += NC;
        float *datty = w; w += NC;
        float *dqkv = w; w += 3 * NC;
        float *dln1 = w; w += NC;
        float *attscratch = w;
        double fl = 2.0 * (double)NC * C, att = 4.0 * (double)B * T * T * C;
        /* the scratch gradients are assigned where first written (beta 0), so
         * only dqkv, which attention's backward adds into, starts at zero */
        CL_PROF("bwd zero", 0, memset(dqkv, 0, (size_t)(3 * NC) * sizeof(float)));
        /* out = res2 + c_proj(gelu(c_fc(ln2(res2)))) */
        CL_PROF("bwd residual", 0, memcpy(dres2, dout, (size_t)NC * sizeof(float)));
        CL_PROF("bwd fc proj", 4 * fl, cl_gemm(0, 1, N, 4 * C, C, 1.0f, dout, C, p[10], C, 0.0f, dfchg, 4 * C));
        if (ww) CL_PROF("bwd fc proj w", 4 * fl, cl_linear_backward_weight(g[10], g[11], dout, s.fch_gelu, N, 4 * C, C));
        CL_PROF("bwd gelu", 0, cl_gelu_backward_set(dfchg, dfchg, s.fch, 4 * NC)); /* dfch, in place */
        CL_PROF("bwd fc", 4 * fl, cl_gemm(0, 1, N, C, 4 * C, 1.0f, dfchg, 4 * C, p[8], 4 * C, 0.0f, dln2, C));
        if (ww) CL_PROF("bwd fc w", 4 * fl, cl_linear_backward_weight(g[8], g[9], dfchg, s.ln2, N, C, 4 * C));
        CL_PROF("bwd layernorm", 0, cl_layernorm_backward_input(dres2, dln2, s.res2, p[6], s.ln2_mean, s.ln2_rstd, N, C));
        if (ww) CL_PROF("bwd layernorm w", 0, cl_layernorm_backward_weight(g[6], g[7], dln2, s.res2, s.ln2_mean, s.ln2_rstd, N, C));
        /* res2 = in + c_proj(attn(c_attn(ln1(in)))) */
        CL_PROF("bwd attn proj", fl, cl_gemm(0, 1, N, C, C, 1.0f, dres2, C, p[4], C, 0.0f, datty, C));
        if (ww) CL_PROF("bwd attn proj w", fl, cl_linear_backward_weight(g[4], g[5], dres2, s.atty, N, C, C));
        CL_PROF("bwd attention", 2 * att, cl_attention_backward(dqkv, attscratch, datty, s.qkv, s.att, B, T, C, NH));
        if (ww) CL_PROF("bwd qkv w", 3 * fl, cl_linear_backward_weight(g[2], g[3], dqkv, s.ln1, N, C, 3 * C));
        CL_PROF("bwd qkv", 3 * fl, cl_gemm(0, 1, N, C, 3 * C, 1.0f, dqkv, 3 * C, p[2], 3 * C, 0.0f, dln1, C));
        if (ww) CL_PROF("bwd layernorm w", 0, cl_layernorm_backward_weight(g[0], g[1], dln1, in, s.ln1_mean, s.ln1_rstd, N, C));
        if (din) {
            CL_PROF("bwd layernorm", 0, cl_layernorm_backward_input(din, dln1, in, p[0], s.ln1_mean, s.ln1_rstd, N, C));
            CL_PROF("bwd residual", 0, cl_add_inplace(din, dres2, NC));
        }
        return CL_OK;
    }
    case CL_UNIT_LMHEAD: {
        int V = d->cfg.vocab;
        head_acts h = head_layout(base, N, C);
        const float *wte = m->p[d->tied_wte];
        float *dwte = m->head_wte_g ? m->head_wte_g : m->g[d->tied_wte];
        float *dlnf = m->scratch;
        double fl = 2.0 * N * C * V;
        /* dlogits replaces logits in place: the logits are dead after this */
        CL_PROF("bwd softmax xent", 0, cl_xent_backward(h.logits, h.logits, h.lse, mb->targets, mb->dloss, N, V));
        if (ww) CL_PROF("bwd logits w", fl, cl_gemm(1, 0, V, C, N, 1.0f, h.logits, V, h.lnf, C, 1.0f, dwte, C));
        CL_PROF("bwd logits", fl, cl_gemm(0, 0, N, C, V, 1.0f, h.logits, V, wte, C, 0.0f, dlnf, C));
        if (ww) CL_PROF("bwd layernorm w", 0, cl_layernorm_backward_weight(g[0], g[1], dlnf, in, h.mean, h.rstd, N, C));
        if (din) CL_PROF("bwd layernorm", 0, cl_layernorm_backward_input(din, dlnf, in, p[0], h.mean, h.rstd, N, C));
        return CL_OK;
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
        if (ww) cl_linear_backward_weight(g[0], g[1], dout, in, B, un->c, un->oc);
        if (din) cl_linear_backward_input(din, dout, p[0], B, un->c, un->oc);
        return CL_OK;
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
        return head_layout(a->base + a->off[u - m->u0], (int64_t)mb->B * mb->T, d->cfg.channels).logits;
    if (d->units[u].kind == CL_UNIT_CLASSIFY && u > m->u0) return unit_out(m, a, u - 1, mb->B, mb->T);
    return NULL;
}

int cl_unit_is_loss(const cl_unit *u) { return u->kind == CL_UNIT_LMHEAD || u->kind == CL_UNIT_CLASSIFY; }

static const float *stage_input(const cl_model *m, const cl_acts *a, int u, const cl_microbatch *mb, const float *in) {
    return u == m->u0 ? in : unit_out(m, a, u - 1, mb->B, mb->T);
}

cl_status cl_model_stage_forward(cl_model *m, const cl_microbatch *mb, const float *in, cl_acts *a) {
    for (int u = m->u0; u < m->u1; u++) CL_TRY(cl_unit_forward(m, u, mb, stage_input(m, a, u, mb, in), a));
    return CL_OK;
}

cl_status cl_model_stage_backward(cl_model *m, const cl_microbatch *mb, const float *in, cl_acts *a, const float *dout,
                                  float *din, int what, float *const *save_dout, cl_unit_done_fn done, void *ctx) {
    const cl_model_desc *d = m->desc;
    int cur = 0;
    for (int u = m->u1 - 1; u >= m->u0; u--) {
        const cl_unit *un = &d->units[u];
        int w = what == CL_BWD_INPUT && !cl_unit_is_loss(un) ? CL_BWD_INPUT : CL_BWD_ALL;
        if (w == CL_BWD_INPUT && save_dout && dout)
            memcpy(save_dout[u - m->u0], dout, (size_t)(un->out_floats * mb->B) * sizeof(float));
        float *dn = u > m->u0 ? m->dbuf[cur] : din;
        if (dn) memset(dn, 0, (size_t)(un->in_floats * mb->B) * sizeof(float));
        CL_TRY(cl_unit_backward(m, u, mb, stage_input(m, a, u, mb, in), a, dout, dn, w));
        if (done) CL_TRY(done(ctx, u));
        dout = dn;
        cur ^= 1;
    }
    return CL_OK;
}

cl_status cl_model_stage_backward_weight(cl_model *m, const cl_microbatch *mb, const float *in, cl_acts *a,
                                         float *const *saved_dout) {
    for (int u = m->u1 - 1; u >= m->u0; u--) {
        if (cl_unit_is_loss(&m->desc->units[u])) continue;
        CL_TRY(cl_unit_backward(m, u, mb, stage_input(m, a, u, mb, in), a, saved_dout[u - m->u0], NULL, CL_BWD_WEIGHT));
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
        head_acts h = head_layout(a->base + a->off[last - m->u0], T, d->cfg.channels);
        memcpy(logits_out, h.logits + (int64_t)(T - 1) * d->cfg.vocab, (size_t)d->cfg.vocab * sizeof(float));
    }
    free(targets);
    return s;
}
