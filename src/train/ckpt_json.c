/* The fields of a checkpoint's config.json and trainer_state.json (see
 * ckpt_json.h): every number must be an integer in int range before it is
 * used, and every size passes cl_model_config_check, whose limits keep the
 * description's arithmetic far from overflow. */
#include "train/ckpt_json.h"
#include "cleave/train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int get_int(const cl_json *o, const char *key, int *out) {
    const cl_json *v = cl_json_get(o, key);
    if (!v || v->type != CL_JSON_NUMBER || !v->number_is_int || v->integer < INT32_MIN || v->integer > INT32_MAX) return 0;
    *out = (int)v->integer;
    return 1;
}

cl_status cl_ckpt_config_parse(const cl_json *r, const char *path, cl_model_config *c, char *tokenizer, size_t tn) {
    memset(c, 0, sizeof *c);
    const cl_json *kind = cl_json_get(r, "cleave_model"), *preset = cl_json_get(r, "cleave_preset"),
                  *tok = cl_json_get(r, "tokenizer");
    const char *k = kind && kind->type == CL_JSON_STRING ? kind->string : "gpt";
    snprintf(tokenizer, tn, "%s", tok && tok->type == CL_JSON_STRING ? tok->string : "byte");
    snprintf(c->name, sizeof c->name, "%s", preset && preset->type == CL_JSON_STRING ? preset->string : "custom");
    int ok = 1;
    if (!strcmp(k, "gpt")) {
        c->kind = CL_MODEL_GPT;
        ok = get_int(r, "n_layer", &c->layers) && get_int(r, "n_head", &c->heads) && get_int(r, "n_embd", &c->channels) &&
             get_int(r, "n_positions", &c->seq_len) && get_int(r, "vocab_size", &c->vocab);
        /* the MLP's width (Hugging Face GPT-2's n_inner: absent or null is 4 x n_embd, kept as 0, the default) */
        const cl_json *fi = cl_json_get(r, "n_inner");
        if (ok && fi && fi->type != CL_JSON_NULL) ok = get_int(r, "n_inner", &c->mlp_width);
        if (ok && (int64_t)c->mlp_width == 4 * (int64_t)c->channels) c->mlp_width = 0;
    } else if (!strcmp(k, "mlp")) {
        c->kind = CL_MODEL_MLP;
        const cl_json *w = cl_json_get(r, "widths");
        ok = w && w->type == CL_JSON_ARRAY && w->count >= 2 && w->count <= CL_MLP_MAX_WIDTHS;
        int i = 0;
        for (const cl_json *e = ok ? w->child : NULL; e; e = e->next, i++) {
            if (e->type != CL_JSON_NUMBER || !e->number_is_int || e->integer < 1 || e->integer > INT32_MAX) ok = 0;
            else c->widths[i] = (int)e->integer;
        }
        c->nwidths = i;
    } else if (!strcmp(k, "cnn")) {
        c->kind = CL_MODEL_CNN;
        ok = get_int(r, "in_channels", &c->in_channels) && get_int(r, "height", &c->height) && get_int(r, "width", &c->width) &&
             get_int(r, "conv_channels", &c->conv_channels) && get_int(r, "conv_kernel", &c->conv_kernel) &&
             get_int(r, "conv_stride", &c->conv_stride) && get_int(r, "conv_pad", &c->conv_pad) && get_int(r, "pool", &c->pool) &&
             get_int(r, "hidden", &c->hidden) && get_int(r, "hidden2", &c->hidden2) && get_int(r, "classes", &c->classes);
    } else {
        ok = 0;
    }
    if (!ok) return cl_error(CL_ERR_FORMAT, "%s: missing or invalid model fields", path);
    /* the shape decides, not the name: a preset name recorded beside another
     * shape (gpt2-small was 4 layers of 128 channels before it took GPT-2
     * small's 124M) is not carried on */
    cl_model_config p;
    char field[32];
    int va, vb;
    if (cl_model_preset(c->name, &p) == CL_OK && cl_model_config_diff(&p, c, field, sizeof field, &va, &vb))
        snprintf(c->name, sizeof c->name, "custom");
    cl_error_clear();
    return cl_error_context(cl_model_config_check(c), "%s", path) == CL_OK ? CL_OK : CL_ERR_FORMAT;
}

cl_status cl_ckpt_state_parse(const cl_json *r, const char *path, int *step, int *opt_t, int *T, int *gb, uint64_t *seed) {
    const cl_json *sd = cl_json_get(r, "seed");
    int ok = get_int(r, "step", step) && get_int(r, "optimizer_step", opt_t) && get_int(r, "seq_len", T) &&
             get_int(r, "global_batch", gb) && sd && sd->type == CL_JSON_STRING;
    if (ok) {
        char *end;
        errno = 0;
        *seed = strtoull(sd->string, &end, 10);
        ok = !errno && *end == 0 && end != sd->string;
    }
    if (!ok) return cl_error(CL_ERR_FORMAT, "%s: missing or invalid fields", path);
    if (*step < 0 || *step > CL_MAX_STEPS)
        return cl_error(CL_ERR_FORMAT, "%s: step %d is out of range (0 to %d)", path, *step, CL_MAX_STEPS);
    /* every step is one optimizer step, so cleave saves the two equal */
    if (*opt_t != *step)
        return cl_error(CL_ERR_FORMAT, "%s: optimizer_step %d differs from step %d (a checkpoint cleave wrote has them equal)",
                        path, *opt_t, *step);
    return CL_OK;
}

cl_status cl_ckpt_run_id_parse(const cl_json *r, const char *path, char out[CL_RUN_ID_LEN + 1]) {
    const cl_json *v = cl_json_get(r, "run_id");
    out[0] = 0;
    if (!v) return CL_OK;
    int ok = v->type == CL_JSON_STRING && strlen(v->string) == CL_RUN_ID_LEN;
    for (int i = 0; ok && i < CL_RUN_ID_LEN; i++) ok = strchr("0123456789abcdef", v->string[i]) && v->string[i];
    if (!ok) return cl_error(CL_ERR_FORMAT, "%s: \"run_id\" is not %d lowercase hexadecimal digits", path, CL_RUN_ID_LEN);
    memcpy(out, v->string, CL_RUN_ID_LEN + 1);
    return CL_OK;
}
