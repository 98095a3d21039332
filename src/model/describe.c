/* Model descriptions: the unit/parameter lists that every other part
 * (building, memory prediction, partitioning, checkpoint names) reads, built
 * by the model's family (family.h: presets, checks, its unit list) from the
 * unit kinds' tables (nn/kind.h). See model.h.
 *
 * Invariants: parameters are listed in checkpoint order and owned by one unit
 * each (the GPT LM head uses the embedding's wte, recorded in tied_wte);
 * offsets are 16-float aligned and increasing; a unit's params are the
 * contiguous range [first_param, first_param + nparams). */
#include "cleave/model.h"
#include "model/family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cl_family *const families[] = {&cl_family_gpt, &cl_family_mlp, &cl_family_cnn, &cl_family_llama};
enum { NFAMILIES = sizeof families / sizeof families[0] };

const cl_family *cl_family_of(cl_model_kind k) {
    for (int i = 0; i < NFAMILIES; i++)
        if (families[i]->kind == k) return families[i];
    return NULL;
}

const cl_family *cl_family_named(const char *name) {
    for (int i = 0; i < NFAMILIES; i++)
        if (!strcmp(families[i]->pub.name, name)) return families[i];
    return NULL;
}

const cl_model_family *cl_model_family_hf(const char *type, char *known, size_t n) {
    const cl_model_family *f = NULL;
    if (n) known[0] = 0;
    for (int i = 0; i < 2 * NFAMILIES; i++) { /* the families' types, then their forms with experts */
        const cl_model_family *p = &families[i % NFAMILIES]->pub;
        const char *t = i < NFAMILIES ? p->model_type : p->hf_moe_type;
        if (!t) continue;
        if (!strcmp(t, type)) f = p;
        size_t at = strlen(known);
        if (at < n) snprintf(known + at, n - at, "%s%s", at ? ", " : "", t);
    }
    return f;
}

const char *cl_model_hf_arch(const cl_model_config *cfg) {
    const cl_model_family *f = cl_model_family_of(cfg);
    return cfg->experts && f->hf_moe_arch ? f->hf_moe_arch : f->hf_arch;
}

const cl_model_family *cl_model_family_of(const cl_model_config *cfg) {
    static const cl_model_family unknown = {.name = "unknown", .data = "", .sample = ""};
    const cl_family *f = cl_family_of(cfg->kind);
    return f ? &f->pub : &unknown;
}

cl_status cl_model_preset(const char *name, cl_model_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < NFAMILIES; i++)
        if (families[i]->preset(name, cfg)) return CL_OK;
    char known[640] = "";
    for (int i = 0; i < NFAMILIES; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", families[i]->presets);
    return cl_error(CL_ERR_INVALID, "unknown model '%s' (known: %s)", name, known);
}

cl_status cl_model_config_check(const cl_model_config *c) {
    const cl_family *f = cl_family_of(c->kind);
    if (!f) return cl_error(CL_ERR_INVALID, "unknown model kind %d", (int)c->kind);
    return f->check(c);
}

cl_status cl_model_config_runs(const cl_model_config *c) {
    CL_TRY(cl_model_config_check(c));
    const cl_family *f = cl_family_of(c->kind);
    return f->runs ? f->runs(c) : CL_OK;
}

int64_t cl_model_input_floats(const cl_model_config *cfg) {
    const cl_family *f = cl_family_of(cfg->kind);
    return f && f->input_floats ? f->input_floats(cfg) : 0;
}

cl_status cl_model_describe(const cl_model_config *cfg, int T, cl_model_desc **out) {
    cl_tp_layout whole = {1, 0, 0, 1, CL_F32, 1};
    return cl_model_describe_tp(cfg, T, &whole, out);
}

/* What tp must divide, checked before anything is built. */
static cl_status check_tp(const cl_family *f, const cl_model_config *c, int T, const cl_tp_layout *tl) {
    int tp = tl->tp;
    if (tp < 1 || tl->rank < 0 || tl->rank >= tp)
        return cl_error(CL_ERR_INVALID, "tensor-parallel rank %d of %d is out of range", tl->rank, tp);
    if (tl->vocab_div < 0) return cl_error(CL_ERR_INVALID, "--make-vocab-size-divisible-by must be positive (got %d)", tl->vocab_div);
    if (tl->sp && !f->pub.tokens) return cl_error(CL_ERR_INVALID, "--sequence-parallel needs a GPT model");
    /* the GPT and Llama kinds (dense and MoE blocks) have the bf16 path (docs/ARCHITECTURE.md) */
    if (tl->dtype == CL_BF16 && c->kind != CL_MODEL_GPT && c->kind != CL_MODEL_LLAMA)
        return cl_error(CL_ERR_UNSUPPORTED, "--dtype bf16: the %s family is not yet supported (the gpt and llama families are)", f->pub.name);
    if (tp == 1) return CL_OK;
    return f->check_tp(c, T, tl);
}

cl_status cl_model_describe_tp(const cl_model_config *cfg, int T, const cl_tp_layout *tl, cl_model_desc **out) {
    return cl_model_describe_cp(cfg, T, tl, 1, out);
}

cl_status cl_model_describe_cp(const cl_model_config *cfg, int T, const cl_tp_layout *tl, int cp, cl_model_desc **out) {
    *out = NULL;
    CL_TRY(cl_model_config_check(cfg));
    const cl_family *f = cl_family_of(cfg->kind);
    if (f->pub.tokens) {
        if (T == 0) T = cfg->seq_len;
        if (T < 1) return cl_error(CL_ERR_INVALID, "sequence length must be positive (got %d)", T);
        if (T > cfg->seq_len)
            return cl_error(CL_ERR_INVALID, "sequence length %d is longer than the model's context (%d)", T, cfg->seq_len);
    } else {
        T = 1;
    }
    CL_TRY(check_tp(f, cfg, T, tl));
    cl_model_desc *d = calloc(1, sizeof *d);
    if (!d) return cl_error(CL_ERR_OOM, "cannot allocate a model description");
    d->cfg = *cfg;
    d->T = T;
    d->tied_wte = -1;
    d->tpl = *tl;
    if (d->tpl.vocab_div < 1) d->tpl.vocab_div = 1;
    d->cp = cp > 1 ? cp : 1;
    cl_status s = f->setup ? f->setup(d) : CL_OK;
    if (s) {
        free(d);
        return s;
    }
    cl_desc_builder b = {.d = d};
    f->describe(&b);
    if (b.failed || b.z.too_large) {
        cl_model_desc_free(d);
        if (b.failed) return cl_error(CL_ERR_OOM, "cannot allocate a model description");
        if (f->pub.tokens) /* the activations grow with the sequence length */
            return cl_error(CL_ERR_INVALID, "the model is too large at sequence length %d: one of its tensors or buffers passes 2^40 "
                                            "floats (a shorter --seq-len shrinks the activations)", T);
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
