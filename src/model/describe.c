/* Model descriptions: presets, checks, and the unit/parameter lists that
 * every other part (building, memory prediction, partitioning, checkpoint
 * names) reads. See model.h.
 *
 * Invariants: parameters are listed in checkpoint order and owned by one unit
 * each (the GPT LM head uses the embedding's wte, recorded in tied_wte);
 * offsets are 16-float aligned and increasing; a unit's params are the
 * contiguous range [first_param, first_param + nparams). */
#include "cleave/model.h"

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
    {"gpt2-small", 4, 128, 4, 128, 256},
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
                    "unknown model '%s' (known: gpt2-tiny, gpt2-small, gpt2, gpt2-medium, gpt2-large, gpt2-xl, mlp, cnn)", name);
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
    int too_large; /* a size passed DESC_MAX_FLOATS (or int, where a unit keeps it as int) */
} builder;

/* No tensor, buffer or total is larger than this many floats (4 TiB of
 * them), so everything derived from them (times a batch, times 4 bytes)
 * stays far inside int64. */
#define DESC_MAX_FLOATS ((int64_t)1 << 40)

/* A size just computed (overflow: it did not fit int64): past
 * DESC_MAX_FLOATS it marks the builder too_large and gives 0. */
static int64_t fits(builder *b, int overflow, int64_t r) {
    if (!overflow && r <= DESC_MAX_FLOATS) return r;
    b->too_large = 1;
    return 0;
}

static int64_t prod(builder *b, int64_t x, int64_t y) {
    int64_t r;
    int o = __builtin_mul_overflow(x, y, &r);
    return fits(b, o, r);
}

static int64_t sum(builder *b, int64_t x, int64_t y) {
    int64_t r;
    int o = __builtin_add_overflow(x, y, &r);
    return fits(b, o, r);
}

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

static void add_param(builder *b, const char *name, int ndim, const int64_t *shape, int decay,
                      cl_init_kind init, float scale) {
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
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->numel = prod(b, p->numel, shape[i]);
    }
    p->offset = d->nfloats;
    d->nfloats = sum(b, d->nfloats, (p->numel + 15) & ~(int64_t)15);
    d->nparams_total = sum(b, d->nparams_total, p->numel);
    p->decay = decay;
    p->init = init;
    p->scale = scale;
    p->unit = d->nunits - 1;
    d->units[d->nunits - 1].nparams++;
}

static void add_linear_params(builder *b, const char *prefix, int64_t in, int64_t out, cl_init_kind init, float wscale,
                              float bscale) {
    char name[64];
    int64_t ws[2] = {in, out}, bs[1] = {out};
    snprintf(name, sizeof name, "%s.weight", prefix);
    add_param(b, name, 2, ws, 1, init, wscale);
    snprintf(name, sizeof name, "%s.bias", prefix);
    add_param(b, name, 1, bs, 0, init == CL_INIT_NORMAL ? CL_INIT_ZEROS : init, bscale);
}

static void add_ln_params(builder *b, const char *prefix, int64_t C) {
    char name[64];
    int64_t s[1] = {C};
    snprintf(name, sizeof name, "%s.weight", prefix);
    add_param(b, name, 1, s, 0, CL_INIT_ONES, 0);
    snprintf(name, sizeof name, "%s.bias", prefix);
    add_param(b, name, 1, s, 0, CL_INIT_ZEROS, 0);
}

static void describe_gpt(builder *b, int T) {
    const cl_model_config *c = &b->d->cfg;
    int64_t C = c->channels, V = c->vocab, L = c->layers, NH = c->heads;
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)L);
    cl_unit *u = add_unit(b, CL_UNIT_EMBED, 'E', 0, "embed");
    if (!u) return;
    u->out_floats = prod(b, T, C);
    u->act_floats = u->out_floats;
    int64_t wte[2] = {V, C}, wpe[2] = {c->seq_len, C};
    add_param(b, "wte.weight", 2, wte, 1, CL_INIT_NORMAL, std);
    b->d->tied_wte = b->d->nparams - 1;
    add_param(b, "wpe.weight", 2, wpe, 1, CL_INIT_NORMAL, std);
    for (int l = 0; l < L && !b->failed; l++) {
        char label[24], pre[64];
        snprintf(label, sizeof label, "h.%d", l);
        u = add_unit(b, CL_UNIT_BLOCK, 't', l, label);
        if (!u) return;
        u->in_floats = prod(b, T, C);
        u->out_floats = u->in_floats;
        int64_t scores = prod(b, prod(b, NH, T), T);
        /* ln1, qkv, att, atty, res2, ln2, fch, fch_gelu, out + 2 (mean, rstd) x 2 */
        u->act_floats = sum(b, prod(b, T, 16 * C + 4), scores);
        u->scratch_floats = sum(b, prod(b, T, 11 * C), scores); /* dres2, dfc (4C, GELU in place), dln2, datty, dqkv (3C), dln1; d(scores) */
        u->flops = 2.0 * (double)T * 12.0 * (double)C * (double)C + 4.0 * (double)T * (double)T * (double)C;
        snprintf(pre, sizeof pre, "h.%d.ln_1", l);
        add_ln_params(b, pre, C);
        snprintf(pre, sizeof pre, "h.%d.attn.c_attn", l);
        add_linear_params(b, pre, C, 3 * C, CL_INIT_NORMAL, std, 0);
        snprintf(pre, sizeof pre, "h.%d.attn.c_proj", l);
        add_linear_params(b, pre, C, C, CL_INIT_NORMAL, proj_std, 0);
        snprintf(pre, sizeof pre, "h.%d.ln_2", l);
        add_ln_params(b, pre, C);
        snprintf(pre, sizeof pre, "h.%d.mlp.c_fc", l);
        add_linear_params(b, pre, C, 4 * C, CL_INIT_NORMAL, std, 0);
        snprintf(pre, sizeof pre, "h.%d.mlp.c_proj", l);
        add_linear_params(b, pre, 4 * C, C, CL_INIT_NORMAL, proj_std, 0);
    }
    u = add_unit(b, CL_UNIT_LMHEAD, 'L', 0, "lm_head");
    if (!u) return;
    u->in_floats = prod(b, T, C);
    u->out_floats = T;
    u->act_floats = prod(b, T, C + V + 4);
    u->scratch_floats = u->in_floats;
    u->flops = 2.0 * (double)T * (double)C * (double)V;
    add_ln_params(b, "ln_f", C);
}

/* Sets a unit's linear geometry and sizes. */
static void linear_unit(builder *b, const char *label, int index, int64_t in, int64_t out, int kaiming) {
    cl_unit *u = add_unit(b, CL_UNIT_LINEAR, 'l', index, label);
    if (!u) return;
    if (in > INT32_MAX || out > INT32_MAX) b->too_large = 1;
    u->c = (int)in;
    u->oc = (int)out;
    u->in_floats = in;
    u->out_floats = out;
    u->act_floats = out;
    u->flops = 2.0 * (double)in * (double)out;
    float bound = 1.0f / sqrtf((float)in);
    add_linear_params(b, label, in, out, kaiming ? CL_INIT_UNIFORM : CL_INIT_NORMAL, bound, bound);
}

static void elementwise_unit(builder *b, cl_unit_kind kind, char code, int index, const char *label, int64_t n) {
    cl_unit *u = add_unit(b, kind, code, index, label);
    if (!u) return;
    u->in_floats = n;
    u->out_floats = n;
    u->act_floats = n;
}

static void classify_unit(builder *b, int64_t classes) {
    cl_unit *u = add_unit(b, CL_UNIT_CLASSIFY, 'x', 0, "loss");
    if (!u) return;
    u->c = (int)classes;
    u->in_floats = classes;
    u->out_floats = 1;
    u->act_floats = 2; /* loss, logsumexp */
}

static void describe_mlp(builder *b) {
    const cl_model_config *c = &b->d->cfg;
    for (int i = 0; i + 1 < c->nwidths && !b->failed; i++) {
        char label[24];
        snprintf(label, sizeof label, "fc%d", i + 1);
        linear_unit(b, label, i, c->widths[i], c->widths[i + 1], 1);
        if (i + 2 < c->nwidths) {
            snprintf(label, sizeof label, "relu%d", i + 1);
            elementwise_unit(b, CL_UNIT_RELU, 'r', i, label, c->widths[i + 1]);
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
    u->in_floats = prod(b, prod(b, c->in_channels, c->height), c->width);
    u->out_floats = conv_n;
    u->act_floats = conv_n;
    u->flops = 2.0 * (double)conv_n * c->in_channels * c->conv_kernel * c->conv_kernel;
    int64_t fan_in = prod(b, prod(b, c->in_channels, c->conv_kernel), c->conv_kernel);
    float bound = 1.0f / sqrtf((float)fan_in);
    int64_t ws[4] = {c->conv_channels, c->in_channels, c->conv_kernel, c->conv_kernel}, bs[1] = {c->conv_channels};
    add_param(b, "conv.weight", 4, ws, 1, CL_INIT_UNIFORM, bound);
    add_param(b, "conv.bias", 1, bs, 0, CL_INIT_UNIFORM, bound);
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
    u->in_floats = conv_n;
    u->out_floats = pool_n;
    u->act_floats = prod(b, 2, pool_n); /* output and argmax indices */
    elementwise_unit(b, CL_UNIT_FLATTEN, 'f', 0, "flatten", pool_n);
    linear_unit(b, "fc1", 1, pool_n, c->hidden, 1);
    linear_unit(b, "fc2", 2, c->hidden, c->hidden2, 1);
    elementwise_unit(b, CL_UNIT_RELU, 'r', 1, "relu2", c->hidden2);
    linear_unit(b, "fc3", 3, c->hidden2, c->classes, 1);
    classify_unit(b, c->classes);
}

cl_status cl_model_describe(const cl_model_config *cfg, int T, cl_model_desc **out) {
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
    cl_model_desc *d = calloc(1, sizeof *d);
    if (!d) return cl_error(CL_ERR_OOM, "cannot allocate a model description");
    d->cfg = *cfg;
    d->T = T;
    d->tied_wte = -1;
    builder b = {.d = d};
    switch (cfg->kind) {
    case CL_MODEL_GPT: describe_gpt(&b, T); break;
    case CL_MODEL_MLP: describe_mlp(&b); break;
    case CL_MODEL_CNN: describe_cnn(&b); break;
    }
    if (b.failed || b.too_large) {
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
