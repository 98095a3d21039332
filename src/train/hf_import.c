/* Hugging Face GPT-2 checkpoints read by cleave (docs/ARCHITECTURE.md,
 * "Hugging Face import").
 *
 * A directory without cleave's marker (and without a sharded index) is read
 * as what Hugging Face's save_pretrained writes: config.json with
 * "model_type": "gpt2" and the shape (n_layer, n_head, n_embd, n_positions,
 * vocab_size), and model.safetensors with GPT-2's names, bare ("h.0.attn.
 * c_attn.weight", GPT2Model) or under "transformer." (GPT2LMHeadModel), in
 * Conv1D's [in, out] layout, which is cleave's own, so nothing is
 * transposed. The attention masks some versions store ("h.N.attn.bias",
 * "h.N.attn.masked_bias") are buffers, not parameters, and are skipped; an
 * "lm_head.weight", when present, must equal wte (cleave ties the head). F32
 * is copied, BF16 widened (exactly); other dtypes are refused. There are no
 * optimizer moments and no step in such a checkpoint: a resume starts the
 * moments at zero, the optimizer step and the data at step 0. */
#include "cleave/json.h"
#include "cleave/safetensors.h"
#include "train/ckpt_json.h"
#include "train/internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int exists(const char *dir, const char *name) {
    char path[4300];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &sb) == 0;
}

int cl_hf_foreign(const char *dir) { return !exists(dir, CL_CKPT_MARKER) && !exists(dir, CL_CKPT_INDEX); }

/* GPT-2 settings cleave's model does not have are refused, not ignored. */
static cl_status check_settings(const cl_json *r, const char *path, const cl_model_config *c) {
    const cl_json *v = cl_json_get(r, "activation_function");
    if (v && (v->type != CL_JSON_STRING || (strcmp(v->string, "gelu_new") && strcmp(v->string, "gelu_pytorch_tanh"))))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: activation_function %s: cleave's GPT-2 uses gelu_new (tanh)", path,
                        v->type == CL_JSON_STRING ? v->string : "(not a string)");
    v = cl_json_get(r, "layer_norm_epsilon");
    if (v && (v->type != CL_JSON_NUMBER || fabs(v->number - 1e-5) > 1e-12))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: layer_norm_epsilon %g: cleave's layernorm uses 1e-05", path,
                        v->type == CL_JSON_NUMBER ? v->number : NAN);
    v = cl_json_get(r, "n_inner");
    if (v && v->type != CL_JSON_NULL && !(v->type == CL_JSON_NUMBER && v->number_is_int && v->integer == 4 * (int64_t)c->channels))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: n_inner is not 4 x n_embd (%d): cleave's MLP is 4 x wide", path, 4 * c->channels);
    v = cl_json_get(r, "tie_word_embeddings");
    if (v && !(v->type == CL_JSON_BOOL && v->boolean))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: tie_word_embeddings is not true: cleave ties the LM head to wte", path);
    v = cl_json_get(r, "scale_attn_weights");
    if (v && !(v->type == CL_JSON_BOOL && v->boolean))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: scale_attn_weights is not true: cleave scales attention by 1/sqrt(head size)", path);
    v = cl_json_get(r, "scale_attn_by_inverse_layer_idx");
    if (v && !(v->type == CL_JSON_BOOL && !v->boolean))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: scale_attn_by_inverse_layer_idx is set: cleave does not scale by layer", path);
    return CL_OK;
}

cl_status cl_hf_read_config(const char *dir, cl_model_config *c, char *tok, size_t tn) {
    char path[4300];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!exists(dir, "config.json"))
        return cl_error(CL_ERR_INVALID, "%s is neither a cleave checkpoint (no %s) nor a Hugging Face one (no config.json)", dir,
                        CL_CKPT_MARKER);
    cl_json_doc *doc;
    CL_TRY(cl_json_parse_file(&doc, path));
    const cl_json *r = cl_json_root(doc), *mt = cl_json_get(r, "model_type");
    cl_status s = CL_OK;
    if (!mt || mt->type != CL_JSON_STRING)
        s = cl_error(CL_ERR_FORMAT, "%s: no \"model_type\" (and no %s beside it): not a Hugging Face or cleave checkpoint", path,
                     CL_CKPT_MARKER);
    else if (strcmp(mt->string, "gpt2"))
        s = cl_error(CL_ERR_UNSUPPORTED, "%s: model_type '%s': cleave imports Hugging Face GPT-2 (gpt2) checkpoints only", path,
                     mt->string);
    if (!s) s = cl_ckpt_config_parse(r, path, c, tok, tn);
    if (!s && c->kind != CL_MODEL_GPT) s = cl_error(CL_ERR_FORMAT, "%s: model_type gpt2 with cleave_model not gpt", path);
    if (!s) s = check_settings(r, path, c);
    /* Hugging Face's config names no tokenizer: GPT-2's vocabulary means GPT-2's BPE, a smaller one bytes */
    if (!s && !cl_json_get(r, "tokenizer")) snprintf(tok, tn, "%s", c->vocab >= 50257 ? "gpt2" : "byte");
    cl_json_free(doc);
    return s;
}

/* "h.N.attn.bias" and "h.N.attn.masked_bias": the causal mask buffers. */
static int mask_buffer(const char *n) {
    if (strncmp(n, "h.", 2)) return 0;
    n += 2;
    if (*n < '0' || *n > '9') return 0;
    while (*n >= '0' && *n <= '9') n++;
    return !strcmp(n, ".attn.bias") || !strcmp(n, ".attn.masked_bias");
}

static void shape_text(char *out, size_t n, int ndim, const int64_t *sh) {
    size_t at = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && at < n; i++) at += (size_t)snprintf(out + at, n - at, "%s%" PRId64, i ? ", " : "", sh[i]);
    if (at < n) snprintf(out + at, n - at, "]");
}

/* Entry e as F32 into dst (n floats): F32 copied, BF16 widened. */
static cl_status to_f32(const char *path, const cl_st_entry *e, float *dst, int64_t n) {
    const unsigned char *src = e->data;
    if (e->dtype == CL_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (e->dtype == CL_BF16) {
        for (int64_t j = 0; j < n; j++) {
            uint32_t u = ((uint32_t)src[2 * j] | (uint32_t)src[2 * j + 1] << 8) << 16;
            memcpy(dst + j, &u, sizeof u);
        }
    } else {
        return cl_error(CL_ERR_UNSUPPORTED, "%s: tensor '%s' is %s: cleave imports F32 and BF16", path, e->name,
                        cl_dtype_name(e->dtype));
    }
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(dst[j]))
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' holds a non-finite value (%g) at index %" PRId64, path, e->name,
                            (double)dst[j], j);
    return CL_OK;
}

/* Parameter i of d for each tensor of f (which[k]; -1: a mask buffer or the
 * head, skipped), every one of d's present once with its shape. */
static cl_status map_tensors(const cl_st_file *f, const char *path, const cl_model_desc *d, const char *prefix, int *which,
                             char *seen) {
    size_t pl = strlen(prefix);
    for (int k = 0; k < cl_st_count(f); k++) {
        const cl_st_entry *e = cl_st_get(f, k);
        const char *n = strncmp(e->name, prefix, pl) ? NULL : e->name + pl;
        which[k] = -1;
        if (!strcmp(e->name, "lm_head.weight") || (n && mask_buffer(n))) continue;
        for (int j = 0; n && j < d->nparams && which[k] < 0; j++)
            if (!strcmp(d->params[j].name, n)) which[k] = j;
        if (which[k] < 0)
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' is not a GPT-2 parameter cleave knows%s%s", path, e->name,
                            pl ? " (the file's names start with " : "", pl ? "'transformer.')" : "");
        const cl_param_spec *p = &d->params[which[k]];
        int same = e->ndim == p->ndim;
        for (int j = 0; same && j < p->ndim; j++) same = e->shape[j] == p->shape[j];
        if (!same) {
            char got[96], want[96];
            shape_text(got, sizeof got, e->ndim, e->shape);
            shape_text(want, sizeof want, p->ndim, p->shape);
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' is %s, but config.json (n_layer %d, n_head %d, n_embd %d, n_positions %d, "
                            "vocab_size %d) makes it %s", path, e->name, got, d->cfg.layers, d->cfg.heads, d->cfg.channels,
                            d->cfg.seq_len, d->cfg.vocab, want);
        }
        seen[which[k]] = 1;
    }
    for (int i = 0; i < d->nparams; i++)
        if (!seen[i])
            return cl_error(CL_ERR_FORMAT, "%s: no tensor '%s%s' (a GPT-2 of config.json's shape has it)", path, prefix, d->params[i].name);
    return CL_OK;
}

/* An untied head is another model: lm_head.weight, when present, equals wte. */
static cl_status check_head(const cl_st_file *f, const char *path, const cl_model_desc *d, const char *prefix, float *const *ptrs) {
    const cl_st_entry *head = cl_st_find(f, "lm_head.weight");
    int wte = -1;
    for (int i = 0; i < d->nparams && wte < 0; i++)
        if (!strcmp(d->params[i].name, "wte.weight")) wte = i;
    if (!head || wte < 0) return CL_OK;
    const cl_param_spec *p = &d->params[wte];
    int same = head->ndim == p->ndim && head->shape[0] == p->shape[0] && head->shape[1] == p->shape[1];
    float *h = same && ptrs ? malloc((size_t)p->numel * sizeof *h) : NULL;
    if (same && ptrs && !h) return cl_error(CL_ERR_OOM, "cannot allocate the import's lm_head buffer");
    cl_status s = h ? to_f32(path, head, h, p->numel) : CL_OK;
    if (!s && (!same || (h && memcmp(h, ptrs[wte], (size_t)p->numel * sizeof *h))))
        s = cl_error(CL_ERR_UNSUPPORTED, "%s: lm_head.weight differs from %swte.weight: cleave ties the LM head to the embedding", path,
                     prefix);
    free(h);
    return s;
}

cl_status cl_hf_read_params(const char *dir, const cl_model_desc *d, float *const *ptrs) {
    char path[4300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cl_st_file *f;
    CL_TRY(cl_st_open(&f, path));
    /* GPT2LMHeadModel's names are its GPT2Model's under "transformer." */
    const char *prefix = cl_st_find(f, "transformer.wte.weight") ? "transformer." : "";
    int *which = malloc((size_t)(cl_st_count(f) + 1) * sizeof *which);
    char *seen = calloc((size_t)d->nparams, 1);
    cl_status s = which && seen ? CL_OK : cl_error(CL_ERR_OOM, "cannot allocate the import's table");
    if (!s) s = map_tensors(f, path, d, prefix, which, seen);
    for (int k = 0; ptrs && k < cl_st_count(f) && !s; k++)
        if (which[k] >= 0) s = to_f32(path, cl_st_get(f, k), ptrs[which[k]], d->params[which[k]].numel);
    if (!s) s = check_head(f, path, d, prefix, ptrs);
    free(which);
    free(seen);
    cl_st_close(f);
    return s;
}

cl_status cl_hf_resume(cl_trainer *t, const char *dir) {
    cl_model_config c;
    char tok[64];
    CL_TRY(cl_hf_read_config(dir, &c, tok, sizeof tok));
    /* no state in the directory: this run's sequence, batch and seed are the ones it starts with */
    CL_TRY(cl_ckpt_check_match(t, dir, &c, tok, t->desc->T, t->cfg.global_batch, t->cfg.seed));
    const cl_model_desc *d = t->full;
    int n = d->nparams;
    float *host = malloc((size_t)d->nfloats * sizeof *host);
    float *zero = calloc((size_t)d->nfloats, sizeof *zero); /* both moments: read, never written */
    float **ptr = malloc((size_t)n * sizeof *ptr);
    cl_status s = host && zero && ptr ? CL_OK : cl_error(CL_ERR_OOM, "cannot allocate %s's buffers", dir);
    if (!s) memset(host, 0, (size_t)d->nfloats * sizeof *host);
    for (int i = 0; !s && i < n; i++) ptr[i] = host + d->params[i].offset;
    if (!s) s = cl_hf_read_params(dir, d, ptr);
    if (!s) s = cl_pp_load(t, host, zero, zero, 0);
    free(host);
    free(zero);
    free(ptr);
    if (!s) t->step = 0;
    return s;
}
