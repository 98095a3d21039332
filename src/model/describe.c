/* Model descriptions: presets, checks, and the unit/parameter lists that
 * every other part (building, memory prediction, partitioning, checkpoint
 * names) reads. See model.h.
 *
 * Invariants: parameters are listed in checkpoint order and owned by one unit
 * each (the GPT LM head uses the embedding's wte, recorded in tied_wte);
 * offsets are 16-float aligned and increasing; a unit's params are the
 * contiguous range [first_param, first_param + nparams). */
#include "cleave/model.h"
#include "nn/kind.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int layers, channels, heads, seq_len, vocab;
} gpt_preset;

static const gpt_preset gpt_presets[] = {
    {"gpt2-tiny", 2, 64, 4, 64, 256},
    {"gpt2-mini", 4, 128, 4, 128, 256},
    {"gpt2-small", 12, 768, 12, 1024, 50257}, /* GPT-2 small (124M), as the paper and Hugging Face's gpt2 */
    {"gpt2", 12, 768, 12, 1024, 50257},
    {"gpt2-medium", 24, 1024, 16, 1024, 50257},
    {"gpt2-large", 36, 1280, 20, 1024, 50257},
    {"gpt2-xl", 48, 1600, 25, 1024, 50257},
};

cl_status cl_model_preset(const char *name, cl_model_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < sizeof gpt_presets / sizeof gpt_presets[0]; i++) {
        const gpt_preset *p = &gpt_presets[i];
        if (strcmp(name, p->name)) continue;
        cfg->kind = CL_MODEL_GPT;
        snprintf(cfg->name, sizeof cfg->name, "%s", p->name);
        cfg->layers = p->layers;
        cfg->channels = p->channels;
        cfg->heads = p->heads;
        cfg->seq_len = p->seq_len;
        cfg->vocab = p->vocab;
        return CL_OK;
    }
    if (!strcmp(name, "mlp")) {
        cfg->kind = CL_MODEL_MLP;
        snprintf(cfg->name, sizeof cfg->name, "mlp");
        cfg->nwidths = 4;
        cfg->widths[0] = 64;
        cfg->widths[1] = 128;
        cfg->widths[2] = 128;
        cfg->widths[3] = 10;
        return CL_OK;
    }
    if (!strcmp(name, "cnn")) {
        cfg->kind = CL_MODEL_CNN;
        snprintf(cfg->name, sizeof cfg->name, "cnn");
        cfg->in_channels = 1;
        cfg->height = 8;
        cfg->width = 8;
        cfg->conv_channels = 32;
        cfg->conv_kernel = 3;
        cfg->conv_stride = 1;
        cfg->conv_pad = 1;
        cfg->pool = 2;
        cfg->hidden = 64;
        cfg->hidden2 = 128;
        cfg->classes = 10;
        return CL_OK;
    }
    return cl_error(CL_ERR_INVALID,
                    "unknown model '%s' (known: gpt2-tiny, gpt2-mini, gpt2-small or gpt2, gpt2-medium, gpt2-large, gpt2-xl, mlp, cnn)", name);
}

static int conv_out(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

/* Each size a config may give is at most this (a config.json is not trusted),
 * so that the geometry below stays within int; the description then checks
 * every product (see prod). */
#define DIM_MAX (1 << 20)
#define WIDTH_MAX (1 << 28)
#define LAYERS_MAX (1 << 14) /* each block adds 12 parameter entries to the description */

cl_status cl_model_config_check(const cl_model_config *c) {
#define POS(field, what) \
    if (c->field <= 0) return cl_error(CL_ERR_INVALID, "%s must be positive (got %d)", what, c->field)
#define MAX(field, what, max) \
    if (c->field > (max)) return cl_error(CL_ERR_INVALID, "%s %d is too large (at most %d)", what, c->field, (max))
    switch (c->kind) {
    case CL_MODEL_GPT:
        POS(layers, "--layers");
        POS(channels, "--channels");
        POS(heads, "--heads");
        POS(seq_len, "--seq-len");
        POS(vocab, "--vocab");
        MAX(layers, "--layers", LAYERS_MAX);
        MAX(seq_len, "the context (n_positions)", DIM_MAX);
        if (c->channels % c->heads)
            return cl_error(CL_ERR_INVALID, "--heads (%d) must divide --channels (%d)", c->heads, c->channels);
        if (c->vocab > (1 << 30)) return cl_error(CL_ERR_INVALID, "--vocab %d is too large", c->vocab);
        if ((int64_t)c->channels * 4 > (1 << 28)) return cl_error(CL_ERR_INVALID, "--channels %d is too large", c->channels);
        return CL_OK;
    case CL_MODEL_MLP:
        if (c->nwidths < 2 || c->nwidths > CL_MLP_MAX_WIDTHS)
            return cl_error(CL_ERR_INVALID, "an MLP needs 2 to %d widths (got %d)", CL_MLP_MAX_WIDTHS, c->nwidths);
        for (int i = 0; i < c->nwidths; i++)
            if (c->widths[i] <= 0 || c->widths[i] > WIDTH_MAX)
                return cl_error(CL_ERR_INVALID, "MLP width %d must be 1 to %d (got %d)", i, WIDTH_MAX, c->widths[i]);
        return CL_OK;
    case CL_MODEL_CNN: {
        POS(in_channels, "CNN input channels");
        POS(height, "CNN input height");
        POS(width, "CNN input width");
        POS(conv_channels, "CNN conv channels");
        POS(conv_kernel, "CNN conv kernel");
        POS(conv_stride, "CNN conv stride");
        POS(pool, "CNN pool");
        POS(hidden, "CNN hidden");
        POS(hidden2, "CNN hidden2");
        POS(classes, "CNN classes");
        if (c->conv_pad < 0) return cl_error(CL_ERR_INVALID, "CNN conv padding must be >= 0");
        MAX(in_channels, "CNN input channels", DIM_MAX);
        MAX(height, "CNN input height", DIM_MAX);
        MAX(width, "CNN input width", DIM_MAX);
        MAX(conv_channels, "CNN conv channels", DIM_MAX);
        MAX(conv_kernel, "CNN conv kernel", DIM_MAX);
        MAX(conv_stride, "CNN conv stride", DIM_MAX);
        MAX(conv_pad, "CNN conv padding", DIM_MAX);
        MAX(pool, "CNN pool", DIM_MAX);
        MAX(hidden, "CNN hidden", WIDTH_MAX);
        MAX(hidden2, "CNN hidden2", WIDTH_MAX);
        MAX(classes, "CNN classes", WIDTH_MAX);
        int oh = conv_out(c->height, c->conv_kernel, c->conv_stride, c->conv_pad);
        int ow = conv_out(c->width, c->conv_kernel, c->conv_stride, c->conv_pad);
        if (c->height + 2 * c->conv_pad < c->conv_kernel || c->width + 2 * c->conv_pad < c->conv_kernel || oh < c->pool || ow < c->pool)
            return cl_error(CL_ERR_INVALID, "CNN: a %dx%d input does not fit conv kernel %d (pad %d) and pool %d",
                            c->height, c->width, c->conv_kernel, c->conv_pad, c->pool);
        return CL_OK;
    }
    }
    return cl_error(CL_ERR_INVALID, "unknown model kind %d", (int)c->kind);
#undef POS
#undef MAX
}

/* ---- description builder ---- */

typedef struct {
    cl_model_desc *d;
    int cap_units, cap_params;
    int failed;
    cl_sizer z; /* too_large: a size passed CL_DESC_MAX_FLOATS (or int, where a unit keeps it as int) */
} builder;

static int64_t prod(builder *b, int64_t x, int64_t y) { return cl_size_mul(&b->z, x, y); }
static int64_t sum(builder *b, int64_t x, int64_t y) { return cl_size_add(&b->z, x, y); }

static cl_unit *add_unit(builder *b, cl_unit_kind kind, char code, int index, const char *label) {
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
static void add_param_tp(builder *b, const char *name, int ndim, const int64_t *full, cl_split split, int64_t part,
                         int decay, cl_init_kind init, float scale) {
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
    for (int i = 0; i < ndim; i++) {
        p->full_shape[i] = full[i];
        p->full_numel = prod(b, p->full_numel, full[i]);
        p->shape[i] = full[i];
    }
    if (split == CL_SPLIT_ROWS) p->shape[0] = part;
    if (split == CL_SPLIT_COLS) p->shape[ndim - 1] = part;
    if (split == CL_SPLIT_HEADS3) p->shape[ndim - 1] = prod(b, 3, part);
    for (int i = 0; i < ndim; i++) p->numel = prod(b, p->numel, p->shape[i]);
    p->dtype = CL_F32;
    p->byte_offset = prod(b, d->nfloats, (int64_t)sizeof(float)); /* nfloats is a multiple of 16: CL_PARAM_ALIGN bytes */
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
    int64_t n = cl_param_row_len(p), r = (int64_t)rank * p->part;
    switch (p->split) {
    case CL_SPLIT_NONE: runs[0] = (cl_param_run){0, row * n, n}; return 1;
    case CL_SPLIT_ROWS:
        if (row < r || row >= r + p->part) return 0;
        runs[0] = (cl_param_run){0, (row - r) * n, n};
        return 1;
    case CL_SPLIT_COLS: runs[0] = (cl_param_run){r, row * p->part, p->part}; return 1;
    case CL_SPLIT_HEADS3:
        for (int k = 0; k < 3; k++) runs[k] = (cl_param_run){k * (n / 3) + r, row * 3 * p->part + k * p->part, p->part};
        return 3;
    }
    return 0;
}

void *cl_param_data(void *base, const cl_param_spec *p) { return (char *)base + p->byte_offset; }

float *cl_param_f32(float *base, const cl_param_spec *p) {
    return p->dtype == CL_F32 ? (float *)cl_param_data(base, p) : NULL;
}

int64_t cl_param_elem(const cl_param_spec *p) { return p->byte_offset / (int64_t)cl_dtype_size(p->dtype); }

int64_t cl_param_local_index(const cl_param_spec *p, int rank, int64_t full) {
    if (full < 0 || full >= p->full_numel) return -1;
    int64_t ncol = p->full_shape[p->ndim - 1], row = full / ncol, col = full % ncol;
    switch (p->split) {
    case CL_SPLIT_NONE: return full;
    case CL_SPLIT_ROWS: {
        int64_t rowlen = p->full_numel / p->full_shape[0], r = full / rowlen - (int64_t)rank * p->part;
        return r < 0 || r >= p->part ? -1 : r * rowlen + full % rowlen;
    }
    case CL_SPLIT_COLS: {
        int64_t c = col - (int64_t)rank * p->part;
        return c < 0 || c >= p->part ? -1 : row * p->part + c;
    }
    case CL_SPLIT_HEADS3: {
        int64_t C = ncol / 3, which = col / C, c = col % C - (int64_t)rank * p->part;
        return c < 0 || c >= p->part ? -1 : row * 3 * p->part + which * p->part + c;
    }
    }
    return -1;
}

/* The unit just added, its geometry set, completed from its kind's table
 * (kind.h): its per-sample sizes and FLOPs, then its parameters (names,
 * whole shapes, initialisation, and the slice this rank holds). The splits
 * that tensor parallelism makes apply at tp > 1 only; the vocabulary is
 * split (padded) at every tp. */
static void add_kind(builder *b) {
    cl_model_desc *d = b->d;
    cl_unit *un = &d->units[d->nunits - 1];
    const cl_kind *k = cl_kind_of(un->kind);
    int tp = d->tpl.tp;
    k->sizes(d, un, &b->z);
    for (int i = 0; i < k->nparams && !b->failed; i++) {
        const cl_kind_param *kp = &k->params[i];
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
        else if (tp > 1 && how == CL_TPS_HEADS) split = CL_SPLIT_HEADS3, part = last / 3 / tp;
        else if (tp > 1 && how == CL_TPS_ROWS) split = CL_SPLIT_ROWS, part = sh.shape[0] / tp;
        add_param_tp(b, name, sh.ndim, sh.shape, split, part, kp->decay, kp->init, sh.scale);
        if (b->failed) return;
        if (how == CL_TPS_NORM) d->params[d->nparams - 1].tp_partial = d->tpl.sp;
        if (kp->tied) d->tied_wte = d->nparams - 1;
    }
}

/* Sizes are this tensor-parallel rank's (cl_tp_layout): Cl = C/tp columns
 * of the split matrices, NHl = NH/tp heads, Vl vocabulary rows; with
 * sequence parallelism the block's input and output, its layernorms and
 * residuals hold Ts = T/tp token rows per sample. tp = 1: the whole model. */
static void describe_gpt(builder *b) {
    cl_model_desc *d = b->d;
    if (!add_unit(b, CL_UNIT_EMBED, 'E', 0, "embed")) return;
    add_kind(b);
    for (int l = 0; l < d->cfg.layers && !b->failed; l++) {
        char label[24];
        snprintf(label, sizeof label, "h.%d", l);
        if (!add_unit(b, CL_UNIT_BLOCK, 't', l, label)) return;
        add_kind(b);
    }
    if (!add_unit(b, CL_UNIT_LMHEAD, 'L', 0, "lm_head")) return;
    add_kind(b);
}

/* A linear unit's geometry; mode as cl_unit's tp_mode. */
static void linear_unit(builder *b, const char *label, int index, int64_t in, int64_t out, cl_linear_tp mode) {
    cl_unit *u = add_unit(b, CL_UNIT_LINEAR, 'l', index, label);
    if (!u) return;
    int tp = b->d->tpl.tp;
    int64_t lin = mode == CL_LINEAR_ROWS ? in / tp : in, lout = mode == CL_LINEAR_COLS ? out / tp : out;
    if (in > INT32_MAX || out > INT32_MAX) b->z.too_large = 1;
    u->tp_mode = mode;
    u->c = (int)lin;
    u->oc = (int)lout;
    add_kind(b);
}

/* A unit of n floats in and out (ReLU, flatten). */
static void elementwise_unit(builder *b, cl_unit_kind kind, char code, int index, const char *label, int64_t n) {
    cl_unit *u = add_unit(b, kind, code, index, label);
    if (!u) return;
    u->in_floats = n;
    add_kind(b);
}

static void classify_unit(builder *b, int64_t classes) {
    cl_unit *u = add_unit(b, CL_UNIT_CLASSIFY, 'x', 0, "loss");
    if (!u) return;
    u->c = (int)classes;
    add_kind(b);
}

/* Under tensor parallelism the linear layers go in pairs, column- then
 * row-parallel (Megatron's MLP): the ReLU between them works on the
 * column-parallel layer's own columns; an odd last layer stays whole. */
static void describe_mlp(builder *b) {
    const cl_model_config *c = &b->d->cfg;
    int nlin = c->nwidths - 1, tp = b->d->tpl.tp;
    for (int i = 0; i + 1 < c->nwidths && !b->failed; i++) {
        char label[24];
        snprintf(label, sizeof label, "fc%d", i + 1);
        cl_linear_tp mode = tp > 1 && (i % 2 == 0 ? i + 1 < nlin : 1) ? (i % 2 == 0 ? CL_LINEAR_COLS : CL_LINEAR_ROWS) : CL_LINEAR_WHOLE;
        linear_unit(b, label, i, c->widths[i], c->widths[i + 1], mode);
        if (i + 2 < c->nwidths) {
            snprintf(label, sizeof label, "relu%d", i + 1);
            elementwise_unit(b, CL_UNIT_RELU, 'r', i, label, mode == CL_LINEAR_COLS ? c->widths[i + 1] / tp : c->widths[i + 1]);
        }
    }
    classify_unit(b, c->widths[c->nwidths - 1]);
}

static void describe_cnn(builder *b) {
    const cl_model_config *c = &b->d->cfg;
    int oh = conv_out(c->height, c->conv_kernel, c->conv_stride, c->conv_pad);
    int ow = conv_out(c->width, c->conv_kernel, c->conv_stride, c->conv_pad);
    int ph = (oh - c->pool) / c->pool + 1, pw = (ow - c->pool) / c->pool + 1;
    int64_t conv_n = prod(b, prod(b, c->conv_channels, oh), ow), pool_n = prod(b, prod(b, c->conv_channels, ph), pw);
    cl_unit *u = add_unit(b, CL_UNIT_CONV, 'c', 0, "conv");
    if (!u) return;
    u->c = c->in_channels;
    u->h = c->height;
    u->w = c->width;
    u->oc = c->conv_channels;
    u->oh = oh;
    u->ow = ow;
    u->k = c->conv_kernel;
    u->stride = c->conv_stride;
    u->pad = c->conv_pad;
    add_kind(b);
    elementwise_unit(b, CL_UNIT_RELU, 'r', 0, "relu", conv_n);
    u = add_unit(b, CL_UNIT_MAXPOOL, 'p', 0, "pool");
    if (!u) return;
    u->c = c->conv_channels;
    u->h = oh;
    u->w = ow;
    u->oc = c->conv_channels;
    u->oh = ph;
    u->ow = pw;
    u->k = c->pool;
    u->stride = c->pool;
    add_kind(b);
    elementwise_unit(b, CL_UNIT_FLATTEN, 'f', 0, "flatten", pool_n);
    linear_unit(b, "fc1", 1, pool_n, c->hidden, CL_LINEAR_WHOLE);
    linear_unit(b, "fc2", 2, c->hidden, c->hidden2, CL_LINEAR_WHOLE);
    elementwise_unit(b, CL_UNIT_RELU, 'r', 1, "relu2", c->hidden2);
    linear_unit(b, "fc3", 3, c->hidden2, c->classes, CL_LINEAR_WHOLE);
    classify_unit(b, c->classes);
}

int64_t cl_model_input_floats(const cl_model_config *cfg) {
    if (cfg->kind == CL_MODEL_MLP) return cfg->widths[0];
    if (cfg->kind == CL_MODEL_CNN) return (int64_t)cfg->in_channels * cfg->height * cfg->width;
    return 0;
}

cl_status cl_model_describe(const cl_model_config *cfg, int T, cl_model_desc **out) {
    cl_tp_layout whole = {1, 0, 0, 1};
    return cl_model_describe_tp(cfg, T, &whole, out);
}

/* What tp must divide, checked before anything is built. */
static cl_status check_tp(const cl_model_config *c, int T, const cl_tp_layout *tl) {
    int tp = tl->tp;
    if (tp < 1 || tl->rank < 0 || tl->rank >= tp)
        return cl_error(CL_ERR_INVALID, "tensor-parallel rank %d of %d is out of range", tl->rank, tp);
    if (tl->vocab_div < 0) return cl_error(CL_ERR_INVALID, "--make-vocab-size-divisible-by must be positive (got %d)", tl->vocab_div);
    if (tl->sp && c->kind != CL_MODEL_GPT) return cl_error(CL_ERR_INVALID, "--sequence-parallel needs a GPT model");
    if (tp == 1) return CL_OK;
    switch (c->kind) {
    case CL_MODEL_GPT:
        if (c->heads % tp)
            return cl_error(CL_ERR_INVALID, "--tp %d must divide the %d attention heads (each rank computes whole heads)", tp, c->heads);
        if ((4 * (int64_t)c->channels) % tp)
            return cl_error(CL_ERR_INVALID, "--tp %d must divide the MLP's 4 x %d = %lld columns", tp, c->channels,
                            4 * (long long)c->channels);
        if (tl->sp && T % tp)
            return cl_error(CL_ERR_INVALID, "--sequence-parallel: --tp %d must divide the sequence length %d", tp, T);
        return CL_OK;
    case CL_MODEL_MLP:
        for (int i = 0; i + 2 < c->nwidths; i += 2)
            if (c->widths[i + 1] % tp)
                return cl_error(CL_ERR_INVALID, "--tp %d must divide the MLP's column-parallel width %d (layer fc%d)", tp,
                                c->widths[i + 1], i + 1);
        return CL_OK;
    case CL_MODEL_CNN:
        return cl_error(CL_ERR_INVALID, "--tp %d: tensor parallelism splits GPT and MLP models, not the CNN", tp);
    }
    return CL_OK;
}

cl_status cl_model_describe_tp(const cl_model_config *cfg, int T, const cl_tp_layout *tl, cl_model_desc **out) {
    *out = NULL;
    CL_TRY(cl_model_config_check(cfg));
    if (cfg->kind == CL_MODEL_GPT) {
        if (T == 0) T = cfg->seq_len;
        if (T < 1) return cl_error(CL_ERR_INVALID, "sequence length must be positive (got %d)", T);
        if (T > cfg->seq_len)
            return cl_error(CL_ERR_INVALID, "sequence length %d is longer than the model's context (%d)", T, cfg->seq_len);
    } else {
        T = 1;
    }
    CL_TRY(check_tp(cfg, T, tl));
    cl_model_desc *d = calloc(1, sizeof *d);
    if (!d) return cl_error(CL_ERR_OOM, "cannot allocate a model description");
    d->cfg = *cfg;
    d->T = T;
    d->tied_wte = -1;
    d->tpl = *tl;
    if (d->tpl.vocab_div < 1) d->tpl.vocab_div = 1;
    if (cfg->kind == CL_MODEL_GPT) {
        int64_t mult = (int64_t)d->tpl.vocab_div * tl->tp, vp = (cfg->vocab + mult - 1) / mult * mult;
        if (vp > (1 << 30)) {
            free(d);
            return cl_error(CL_ERR_INVALID, "the vocabulary %d padded to a multiple of %lld is too large", cfg->vocab, (long long)mult);
        }
        d->vocab_padded = (int)vp;
        d->vocab_local = (int)(vp / tl->tp);
        d->vocab_start = tl->rank * d->vocab_local;
        d->heads_local = cfg->heads / tl->tp;
        d->channels_local = cfg->channels / tl->tp;
    }
    builder b = {.d = d};
    switch (cfg->kind) {
    case CL_MODEL_GPT: describe_gpt(&b); break;
    case CL_MODEL_MLP: describe_mlp(&b); break;
    case CL_MODEL_CNN: describe_cnn(&b); break;
    }
    if (b.failed || b.z.too_large) {
        cl_model_desc_free(d);
        if (b.failed) return cl_error(CL_ERR_OOM, "cannot allocate a model description");
        return cl_error(CL_ERR_INVALID, "the model is too large: one of its tensors or buffers passes 2^40 floats");
    }
    *out = d;
    return CL_OK;
}

void cl_model_desc_free(cl_model_desc *d) {
    if (!d) return;
    free(d->units);
    free(d->params);
    free(d);
}

int cl_model_find_param(const cl_model_desc *d, const char *name) {
    for (int i = 0; i < d->nparams; i++)
        if (!strcmp(d->params[i].name, name)) return i;
    return -1;
}
