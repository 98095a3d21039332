/* A model configuration as a checkpoint's config.json holds it: each
 * family writes, reads and compares its own fields (family.h's
 * write_config, read_config, config_diff), so the checkpoint code
 * (src/train/ckpt_dir.c, ckpt_json.c) names no family.
 *
 * Invariants: what is written reads back to the same configuration; a
 * config.json with no "cleave_model" is GPT's (Hugging Face GPT-2's, and
 * cleave's before checkpoints named a family), or the family whose
 * Hugging Face model_type it has; values read are not yet checked
 * (cl_model_config_check does that). */
#include "model/family.h"

#include <stdio.h>
#include <string.h>

void cl_model_config_json(cl_strbuf *b, const cl_model_config *c) {
    const cl_family *f = cl_family_of(c->kind);
    if (f) f->write_config(b, c);
}

int cl_model_config_from_json(const cl_json *r, cl_model_config *c) {
    memset(c, 0, sizeof *c);
    const cl_json *name = cl_json_get(r, "cleave_model"), *type = cl_json_get(r, "model_type");
    const cl_family *f;
    if (name) {
        f = name->type == CL_JSON_STRING ? cl_family_named(name->string) : NULL;
    } else {
        char known[128];
        const cl_model_family *hf = type && type->type == CL_JSON_STRING ? cl_model_family_hf(type->string, known, sizeof known) : NULL;
        f = cl_family_named(hf ? hf->name : "gpt");
    }
    if (!f) return 0;
    c->kind = f->kind;
    return f->read_config(r, c);
}

int cl_model_config_diff(const cl_model_config *a, const cl_model_config *b, char *field, size_t n, int *va, int *vb) {
    CL_FAMILY_DIFF("kind", (int)a->kind, (int)b->kind);
    const cl_family *f = cl_family_of(a->kind);
    return f ? f->config_diff(a, b, field, n, va, vb) : 0;
}

int64_t cl_model_classes(const cl_model_config *cfg) {
    const cl_family *f = cl_family_of(cfg->kind);
    return f && f->classes ? f->classes(cfg) : 0;
}
