/* The CNN family: conv -> ReLU -> max-pool -> flatten -> linear(hidden) ->
 * linear(hidden2) -> ReLU -> linear(classes) -> classifier loss, on
 * [in_channels, height, width] inputs. Not split by tensor parallelism.
 *
 * Invariants: the conv's and the pool's windows fit the input (checked);
 * every size is at most CL_DESC_DIM_MAX (CL_DESC_WIDTH_MAX for widths). */
#include "model/family.h"

#include <stdio.h>
#include <string.h>

static int conv_out(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

static int cnn_preset(const char *name, cl_model_config *cfg) {
    if (strcmp(name, "cnn")) return 0;
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
    return 1;
}

static cl_status cnn_check(const cl_model_config *c) {
    CL_FAMILY_POS(c, in_channels, "CNN input channels");
    CL_FAMILY_POS(c, height, "CNN input height");
    CL_FAMILY_POS(c, width, "CNN input width");
    CL_FAMILY_POS(c, conv_channels, "CNN conv channels");
    CL_FAMILY_POS(c, conv_kernel, "CNN conv kernel");
    CL_FAMILY_POS(c, conv_stride, "CNN conv stride");
    CL_FAMILY_POS(c, pool, "CNN pool");
    CL_FAMILY_POS(c, hidden, "CNN hidden");
    CL_FAMILY_POS(c, hidden2, "CNN hidden2");
    CL_FAMILY_POS(c, classes, "CNN classes");
    if (c->conv_pad < 0) return cl_error(CL_ERR_INVALID, "CNN conv padding must be >= 0");
    CL_FAMILY_MAX(c, in_channels, "CNN input channels", CL_DESC_DIM_MAX);
    CL_FAMILY_MAX(c, height, "CNN input height", CL_DESC_DIM_MAX);
    CL_FAMILY_MAX(c, width, "CNN input width", CL_DESC_DIM_MAX);
    CL_FAMILY_MAX(c, conv_channels, "CNN conv channels", CL_DESC_DIM_MAX);
    CL_FAMILY_MAX(c, conv_kernel, "CNN conv kernel", CL_DESC_DIM_MAX);
    CL_FAMILY_MAX(c, conv_stride, "CNN conv stride", CL_DESC_DIM_MAX);
    CL_FAMILY_MAX(c, conv_pad, "CNN conv padding", CL_DESC_DIM_MAX);
    CL_FAMILY_MAX(c, pool, "CNN pool", CL_DESC_DIM_MAX);
    CL_FAMILY_MAX(c, hidden, "CNN hidden", CL_DESC_WIDTH_MAX);
    CL_FAMILY_MAX(c, hidden2, "CNN hidden2", CL_DESC_WIDTH_MAX);
    CL_FAMILY_MAX(c, classes, "CNN classes", CL_DESC_WIDTH_MAX);
    int oh = conv_out(c->height, c->conv_kernel, c->conv_stride, c->conv_pad);
    int ow = conv_out(c->width, c->conv_kernel, c->conv_stride, c->conv_pad);
    if (c->height + 2 * c->conv_pad < c->conv_kernel || c->width + 2 * c->conv_pad < c->conv_kernel || oh < c->pool || ow < c->pool)
        return cl_error(CL_ERR_INVALID, "CNN: a %dx%d input does not fit conv kernel %d (pad %d) and pool %d", c->height, c->width,
                        c->conv_kernel, c->conv_pad, c->pool);
    return CL_OK;
}

static cl_status cnn_check_tp(const cl_model_config *c, int T, const cl_tp_layout *tl) {
    (void)c, (void)T;
    return cl_error(CL_ERR_INVALID, "--tp %d: tensor parallelism splits GPT and MLP models, not the CNN", tl->tp);
}

static void cnn_describe(cl_desc_builder *b) {
    const cl_model_config *c = &b->d->cfg;
    int oh = conv_out(c->height, c->conv_kernel, c->conv_stride, c->conv_pad);
    int ow = conv_out(c->width, c->conv_kernel, c->conv_stride, c->conv_pad);
    int ph = (oh - c->pool) / c->pool + 1, pw = (ow - c->pool) / c->pool + 1;
    int64_t conv_n = cl_size_mul(&b->z, cl_size_mul(&b->z, c->conv_channels, oh), ow);
    int64_t pool_n = cl_size_mul(&b->z, cl_size_mul(&b->z, c->conv_channels, ph), pw);
    cl_unit *u = cl_desc_add_unit(b, CL_UNIT_CONV, 'c', 0, "conv");
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
    cl_desc_add_kind(b);
    cl_desc_elementwise(b, CL_UNIT_RELU, 'r', 0, "relu", conv_n);
    u = cl_desc_add_unit(b, CL_UNIT_MAXPOOL, 'p', 0, "pool");
    if (!u) return;
    u->c = c->conv_channels;
    u->h = oh;
    u->w = ow;
    u->oc = c->conv_channels;
    u->oh = ph;
    u->ow = pw;
    u->k = c->pool;
    u->stride = c->pool;
    cl_desc_add_kind(b);
    cl_desc_elementwise(b, CL_UNIT_FLATTEN, 'f', 0, "flatten", pool_n);
    cl_desc_linear(b, "fc1", 1, pool_n, c->hidden, CL_LINEAR_WHOLE);
    cl_desc_linear(b, "fc2", 2, c->hidden, c->hidden2, CL_LINEAR_WHOLE);
    cl_desc_elementwise(b, CL_UNIT_RELU, 'r', 1, "relu2", c->hidden2);
    cl_desc_linear(b, "fc3", 3, c->hidden2, c->classes, CL_LINEAR_WHOLE);
    cl_desc_classify(b, c->classes);
}

static int64_t cnn_input_floats(const cl_model_config *c) { return (int64_t)c->in_channels * c->height * c->width; }
static int64_t cnn_classes(const cl_model_config *c) { return c->classes; }

/* config.json's fields, named as cl_model_config names them, in that order. */
#define CNN_FIELDS(X)                                                                                                         \
    X(in_channels) X(height) X(width) X(conv_channels) X(conv_kernel) X(conv_stride) X(conv_pad) X(pool) X(hidden) X(hidden2) \
    X(classes)

static void cnn_write_config(cl_strbuf *b, const cl_model_config *c) {
#define WRITE(f) cl_sb_printf(b, "  \"" #f "\": %d,\n", c->f);
    CNN_FIELDS(WRITE)
#undef WRITE
}

static int cnn_read_config(const cl_json *r, cl_model_config *c) {
#define READ(f) if (!cl_json_get_int(r, #f, &c->f)) return 0;
    CNN_FIELDS(READ)
#undef READ
    return 1;
}

static int cnn_config_diff(const cl_model_config *a, const cl_model_config *b, char *field, size_t n, int *va, int *vb) {
#define DIFF(f) CL_FAMILY_DIFF(#f, a->f, b->f);
    CNN_FIELDS(DIFF)
#undef DIFF
    return 0;
}

const cl_family cl_family_cnn = {
    .pub = {.name = "cnn", .tokens = 0, .data = "digits.csv.gz", .sample = " images"},
    .kind = CL_MODEL_CNN,
    .presets = "cnn",
    .preset = cnn_preset,
    .check = cnn_check,
    .check_tp = cnn_check_tp,
    .describe = cnn_describe,
    .input_floats = cnn_input_floats,
    .write_config = cnn_write_config,
    .read_config = cnn_read_config,
    .config_diff = cnn_config_diff,
    .classes = cnn_classes,
};
