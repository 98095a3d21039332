/* libFuzzer target for a checkpoint's JSON files, config.json and
 * trainer_state.json, read the way src/train/checkpoint.c reads them
 * (its read_config / read_state are static there, so the field extraction
 * is repeated here, kept to the same rules: a field is used only when it is
 * an integer number within int range).
 *
 * Why: a checkpoint directory comes from anywhere; a hostile config must be
 * refused by cl_model_config_check or described without a crash, overflow or
 * undefined behaviour. Each input is parsed with cl_json_parse; the model
 * fields of the kind named by "cleave_model" (gpt by default, mlp, cnn) fill a
 * cl_model_config; when cl_model_config_check accepts it, cl_model_describe
 * builds its description for T = 0 (the model's own, as checkpoint loading
 * does) and for the state's "seq_len", then frees it. The state fields
 * (step, optimizer_step, seq_len, global_batch, the seed string) are read too.
 * One limit is the target's, not the library's: configs with more than
 * 4096 GPT layers or more than 2^26 in any width are skipped before
 * describe, since their descriptions are legitimately that big and an
 * allocation of gigabytes would be reported as a crash by libFuzzer. */
#include "cleave/json.h"
#include "cleave/model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int get_int(const cl_json *o, const char *key, int *out) {
    const cl_json *v = cl_json_get(o, key);
    if (!v || v->type != CL_JSON_NUMBER || !v->number_is_int || v->integer < INT32_MIN || v->integer > INT32_MAX) return 0;
    *out = (int)v->integer;
    return 1;
}

static int read_config(const cl_json *r, cl_model_config *c) {
    memset(c, 0, sizeof *c);
    const cl_json *kind = cl_json_get(r, "cleave_model");
    const char *k = kind && kind->type == CL_JSON_STRING ? kind->string : "gpt";
    if (!strcmp(k, "gpt")) {
        c->kind = CL_MODEL_GPT;
        return get_int(r, "n_layer", &c->layers) && get_int(r, "n_head", &c->heads) && get_int(r, "n_embd", &c->channels) &&
               get_int(r, "n_positions", &c->seq_len) && get_int(r, "vocab_size", &c->vocab);
    }
    if (!strcmp(k, "mlp")) {
        c->kind = CL_MODEL_MLP;
        const cl_json *w = cl_json_get(r, "widths");
        if (!w || w->type != CL_JSON_ARRAY || w->count < 2 || w->count > CL_MLP_MAX_WIDTHS) return 0;
        int i = 0;
        for (const cl_json *e = w->child; e; e = e->next, i++) {
            if (e->type != CL_JSON_NUMBER || !e->number_is_int || e->integer < 1 || e->integer > INT32_MAX) return 0;
            c->widths[i] = (int)e->integer;
        }
        c->nwidths = i;
        return 1;
    }
    if (!strcmp(k, "cnn")) {
        c->kind = CL_MODEL_CNN;
        return get_int(r, "in_channels", &c->in_channels) && get_int(r, "height", &c->height) && get_int(r, "width", &c->width) &&
               get_int(r, "conv_channels", &c->conv_channels) && get_int(r, "conv_kernel", &c->conv_kernel) &&
               get_int(r, "conv_stride", &c->conv_stride) && get_int(r, "conv_pad", &c->conv_pad) && get_int(r, "pool", &c->pool) &&
               get_int(r, "hidden", &c->hidden) && get_int(r, "hidden2", &c->hidden2) && get_int(r, "classes", &c->classes);
    }
    return 0;
}

static int too_big(const cl_model_config *c) {
    const int big = 1 << 26;
    if (c->kind == CL_MODEL_GPT) return c->layers > 4096 || c->channels > big || c->seq_len > big || c->vocab > big;
    if (c->kind == CL_MODEL_MLP) {
        for (int i = 0; i < c->nwidths; i++)
            if (c->widths[i] > big) return 1;
        return 0;
    }
    return c->in_channels > big || c->height > big || c->width > big || c->conv_channels > big || c->hidden > big ||
           c->hidden2 > big || c->classes > big;
}

static void describe(const cl_model_config *c, int T) {
    cl_model_desc *d = NULL;
    if (cl_model_describe(c, T, &d) == CL_OK) {
        if (!d || d->nunits < 1 || d->nparams < 0) abort();
        cl_model_desc_free(d);
    } else if (d) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cl_json_doc *doc = NULL;
    if (cl_json_parse(&doc, (const char *)data, size) != CL_OK) {
        if (doc) abort();
        return 0;
    }
    const cl_json *r = cl_json_root(doc);
    /* trainer_state.json */
    int step = 0, opt_t = 0, T = 0, gb = 0;
    const cl_json *sd = cl_json_get(r, "seed");
    if (get_int(r, "step", &step) && get_int(r, "optimizer_step", &opt_t) && get_int(r, "seq_len", &T) &&
        get_int(r, "global_batch", &gb) && sd && sd->type == CL_JSON_STRING) {
        char *end;
        errno = 0;
        (void)strtoull(sd->string, &end, 10);
    }
    /* config.json */
    cl_model_config c;
    if (read_config(r, &c) && cl_model_config_check(&c) == CL_OK && !too_big(&c)) {
        describe(&c, 0);
        if (T != 0) describe(&c, T);
    }
    cl_json_free(doc);
    return 0;
}
