/* The MLP family: linear layers of the given widths with ReLUs between
 * them and a classifier loss; under tensor parallelism the linear layers go
 * in pairs, column- then row-parallel (Megatron's MLP).
 *
 * Invariants: widths[0] is the input, widths[n-1] the classes; every width
 * is 1 .. CL_DESC_WIDTH_MAX. */
#include "model/family.h"

#include <stdio.h>
#include <string.h>

static int mlp_preset(const char *name, cl_model_config *cfg) {
    if (strcmp(name, "mlp")) return 0;
    cfg->kind = CL_MODEL_MLP;
    snprintf(cfg->name, sizeof cfg->name, "mlp");
    cfg->nwidths = 4;
    cfg->widths[0] = 64;
    cfg->widths[1] = 128;
    cfg->widths[2] = 128;
    cfg->widths[3] = 10;
    return 1;
}

static cl_status mlp_check(const cl_model_config *c) {
    if (c->nwidths < 2 || c->nwidths > CL_MLP_MAX_WIDTHS)
        return cl_error(CL_ERR_INVALID, "an MLP needs 2 to %d widths (got %d)", CL_MLP_MAX_WIDTHS, c->nwidths);
    for (int i = 0; i < c->nwidths; i++)
        if (c->widths[i] <= 0 || c->widths[i] > CL_DESC_WIDTH_MAX)
            return cl_error(CL_ERR_INVALID, "MLP width %d must be 1 to %d (got %d)", i, CL_DESC_WIDTH_MAX, c->widths[i]);
    return CL_OK;
}

static cl_status mlp_check_tp(const cl_model_config *c, int T, const cl_tp_layout *tl) {
    (void)T;
    for (int i = 0; i + 2 < c->nwidths; i += 2)
        if (c->widths[i + 1] % tl->tp)
            return cl_error(CL_ERR_INVALID, "--tp %d must divide the MLP's column-parallel width %d (layer fc%d)", tl->tp,
                            c->widths[i + 1], i + 1);
    return CL_OK;
}

/* The ReLU between a pair works on the column-parallel layer's own columns; an odd last layer stays whole. */
static void mlp_describe(cl_desc_builder *b) {
    const cl_model_config *c = &b->d->cfg;
    int nlin = c->nwidths - 1, tp = b->d->tpl.tp;
    for (int i = 0; i + 1 < c->nwidths && !b->failed; i++) {
        char label[24];
        snprintf(label, sizeof label, "fc%d", i + 1);
        cl_linear_tp mode = tp > 1 && (i % 2 == 0 ? i + 1 < nlin : 1) ? (i % 2 == 0 ? CL_LINEAR_COLS : CL_LINEAR_ROWS) : CL_LINEAR_WHOLE;
        cl_desc_linear(b, label, i, c->widths[i], c->widths[i + 1], mode);
        if (i + 2 < c->nwidths) {
            snprintf(label, sizeof label, "relu%d", i + 1);
            cl_desc_elementwise(b, CL_UNIT_RELU, 'r', i, label, mode == CL_LINEAR_COLS ? c->widths[i + 1] / tp : c->widths[i + 1]);
        }
    }
    cl_desc_classify(b, c->widths[c->nwidths - 1]);
}

static int64_t mlp_input_floats(const cl_model_config *c) { return c->widths[0]; }
static int64_t mlp_classes(const cl_model_config *c) { return c->widths[c->nwidths - 1]; }

static void mlp_write_config(cl_strbuf *b, const cl_model_config *c) {
    cl_sb_printf(b, "  \"widths\": [");
    for (int i = 0; i < c->nwidths; i++) cl_sb_printf(b, "%s%d", i ? ", " : "", c->widths[i]);
    cl_sb_printf(b, "],\n");
}

static int mlp_read_config(const cl_json *r, cl_model_config *c) {
    const cl_json *w = cl_json_get(r, "widths");
    int ok = w && w->type == CL_JSON_ARRAY && w->count >= 2 && w->count <= CL_MLP_MAX_WIDTHS;
    int i = 0;
    for (const cl_json *e = ok ? w->child : NULL; e; e = e->next, i++) {
        if (e->type != CL_JSON_NUMBER || !e->number_is_int || e->integer < 1 || e->integer > INT32_MAX) ok = 0;
        else c->widths[i] = (int)e->integer;
    }
    c->nwidths = i;
    return ok;
}

static int mlp_config_diff(const cl_model_config *a, const cl_model_config *b, char *field, size_t n, int *va, int *vb) {
    CL_FAMILY_DIFF("widths (their number)", a->nwidths, b->nwidths);
    for (int i = 0; i < a->nwidths; i++) {
        char w[32];
        snprintf(w, sizeof w, "widths[%d]", i);
        CL_FAMILY_DIFF(w, a->widths[i], b->widths[i]);
    }
    return 0;
}

const cl_family cl_family_mlp = {
    .pub = {.name = "mlp", .tokens = 0, .data = "digits.csv.gz", .sample = " images"},
    .kind = CL_MODEL_MLP,
    .presets = "mlp",
    .preset = mlp_preset,
    .check = mlp_check,
    .check_tp = mlp_check_tp,
    .describe = mlp_describe,
    .input_floats = mlp_input_floats,
    .write_config = mlp_write_config,
    .read_config = mlp_read_config,
    .config_diff = mlp_config_diff,
    .classes = mlp_classes,
};
