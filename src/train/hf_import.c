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
#include "train/shard_index.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int cl_hf_foreign(const char *dir) { return !cl_ckpt_has(dir, CL_CKPT_MARKER) && !cl_ckpt_has(dir, CL_CKPT_INDEX); }

/* GPT-2 settings cleave's model does not have are refused, not ignored. */
static cl_status check_settings(const cl_json *r, const char *path) {
    const cl_json *v = cl_json_get(r, "activation_function");
    if (v && (v->type != CL_JSON_STRING || (strcmp(v->string, "gelu_new") && strcmp(v->string, "gelu_pytorch_tanh"))))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: activation_function %s: cleave's GPT-2 uses gelu_new (tanh)", path,
                        v->type == CL_JSON_STRING ? v->string : "(not a string)");
    v = cl_json_get(r, "layer_norm_epsilon");
    if (v && (v->type != CL_JSON_NUMBER || fabs(v->number - 1e-5) > 1e-12))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: layer_norm_epsilon %g: cleave's layernorm uses 1e-05", path,
                        v->type == CL_JSON_NUMBER ? v->number : NAN);
    /* n_inner, the MLP's width, is the configuration's (cl_ckpt_config_parse) */
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
    if (!cl_ckpt_has(dir, "config.json"))
        return cl_error(CL_ERR_INVALID, "%s: no such file: %s is neither a cleave checkpoint (no %s) nor a Hugging Face one", path,
                        dir, CL_CKPT_MARKER);
    cl_json_doc *doc;
    CL_TRY(cl_json_parse_file(&doc, path));
    const cl_json *r = cl_json_root(doc), *mt = cl_json_get(r, "model_type");
    cl_status s = CL_OK;
    const cl_model_family *fam = NULL; /* the family that imports this model_type */
    char known[128];
    if (!mt || mt->type != CL_JSON_STRING)
        s = cl_error(CL_ERR_FORMAT, "%s: no \"model_type\" (and no %s beside it): not a Hugging Face or cleave checkpoint", path,
                     CL_CKPT_MARKER);
    else if (!(fam = cl_model_family_hf(mt->string, known, sizeof known)))
        s = cl_error(CL_ERR_UNSUPPORTED, "%s: model_type '%s': cleave imports Hugging Face checkpoints of model_type %s only", path,
                     mt->string, known);
    if (!s) s = cl_ckpt_config_parse(r, path, c, tok, tn);
    if (!s && cl_model_family_of(c) != fam)
        s = cl_error(CL_ERR_FORMAT, "%s: model_type %s with cleave_model %s, not %s", path, mt->string, cl_model_family_of(c)->name,
                     fam->name);
    if (!s) s = check_settings(r, path);
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

/* Elements [at, at + n) of entry e (mapped host memory) as F32 into dst
 * on dev: F32 copied, BF16 widened (exactly) on the host, a piece at a
 * time, then copied; non-finite values refused. */
static cl_status to_f32(const char *path, const cl_st_entry *e, int64_t at, int64_t n, cl_device *dev, float *dst) {
    const unsigned char *src = e->data;
    if (e->dtype == CL_F32) {
        cl_device_copy_from_host(dev, dst, src + 4 * at, (size_t)n * sizeof(float));
    } else if (e->dtype == CL_BF16) { /* widened on the host a piece at a time by the one conversion
                                       * (src/core/format.c: its 16-bit loads may be unaligned), then copied */
        src += 2 * at;
        float wide[1024];
        for (int64_t j0 = 0; j0 < n; j0 += 1024) {
            int64_t k = n - j0 < 1024 ? n - j0 : 1024;
            CL_TRY(cl_dtype_convert(wide, CL_F32, src + 2 * j0, CL_BF16, (size_t)k));
            cl_device_copy_from_host(dev, dst + j0, wide, (size_t)k * sizeof(float));
        }
    } else {
        return cl_error(CL_ERR_UNSUPPORTED, "%s: tensor '%s' is %s: cleave imports F32 and BF16", path, e->name,
                        cl_dtype_name(e->dtype));
    }
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(dst[j]))
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' holds a non-finite value (%g) at index %" PRId64, path, e->name,
                            (double)dst[j], at + j);
    return CL_OK;
}

/* model.safetensors mapped (read-only: a rank's reads touch only the pages
 * of its slices, and ranks in one process or on one host share the page
 * cache) and checked against the whole model d: entry[i] is d's parameter
 * i's tensor. */
typedef struct {
    char path[4300];
    void *map;
    size_t len;
    cl_st_file *f;
    const cl_st_entry **entry;
} hf_file;

static void hf_close(hf_file *h) {
    cl_st_close(h->f);
    if (h->map && h->map != MAP_FAILED) munmap(h->map, h->len);
    free(h->entry);
    memset(h, 0, sizeof *h);
}

/* Each tensor of f is a parameter of d (entry[i]) with its shape, a mask
 * buffer or the head (skipped), and every one of d's is present. */
static cl_status map_tensors(hf_file *h, const cl_model_desc *d, const char *prefix) {
    size_t pl = strlen(prefix);
    for (int k = 0; k < cl_st_count(h->f); k++) {
        const cl_st_entry *e = cl_st_get(h->f, k);
        const char *n = strncmp(e->name, prefix, pl) ? NULL : e->name + pl;
        if (!strcmp(e->name, "lm_head.weight") || (n && mask_buffer(n))) continue;
        int i = -1;
        for (int j = 0; n && j < d->nparams && i < 0; j++)
            if (!strcmp(d->params[j].name, n)) i = j;
        if (i < 0)
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' is not a GPT-2 parameter cleave knows%s%s", h->path, e->name,
                            pl ? " (the file's names start with " : "", pl ? "'transformer.')" : "");
        const cl_param_spec *p = &d->params[i];
        int same = e->ndim == p->ndim;
        for (int j = 0; same && j < p->ndim; j++) same = e->shape[j] == p->shape[j];
        if (!same) {
            char got[96], want[96];
            shape_text(got, sizeof got, e->ndim, e->shape);
            shape_text(want, sizeof want, p->ndim, p->shape);
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' is %s, but config.json (n_layer %d, n_head %d, n_embd %d, n_positions %d, "
                            "vocab_size %d) makes it %s", h->path, e->name, got, d->cfg.layers, d->cfg.heads, d->cfg.channels,
                            d->cfg.seq_len, d->cfg.vocab, want);
        }
        h->entry[i] = e;
    }
    for (int i = 0; i < d->nparams; i++)
        if (!h->entry[i])
            return cl_error(CL_ERR_FORMAT, "%s: no tensor '%s%s' (a GPT-2 of config.json's shape has it)", h->path, prefix, d->params[i].name);
    /* an untied head is another model: lm_head.weight, when present, is wte's bytes */
    const cl_st_entry *head = cl_st_find(h->f, "lm_head.weight"), *wte = NULL;
    for (int i = 0; i < d->nparams; i++)
        if (!strcmp(d->params[i].name, "wte.weight")) wte = h->entry[i];
    if (head && wte && (head->dtype != wte->dtype || head->ndim != wte->ndim || head->end - head->begin != wte->end - wte->begin ||
                        memcmp(head->data, wte->data, wte->end - wte->begin)))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: lm_head.weight differs from %swte.weight: cleave ties the LM head to the embedding",
                        h->path, prefix);
    return CL_OK;
}

static cl_status hf_open(hf_file *h, const char *dir, const cl_model_desc *d) {
    memset(h, 0, sizeof *h);
    snprintf(h->path, sizeof h->path, "%s/model.safetensors", dir);
    int fd = open(h->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cl_error(CL_ERR_INVALID, "%s: %s", h->path, strerror(errno));
    struct stat sb;
    cl_status s = fstat(fd, &sb) == 0 ? CL_OK : cl_error(CL_ERR_IO, "%s: %s", h->path, strerror(errno));
    if (!s && sb.st_size < 8) s = cl_error(CL_ERR_FORMAT, "%s: too short for a safetensors file", h->path);
    if (!s) {
        h->len = (size_t)sb.st_size;
        h->map = mmap(NULL, h->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (h->map == MAP_FAILED) s = cl_error(CL_ERR_IO, "%s: cannot map: %s", h->path, strerror(errno));
    }
    close(fd);
    if (!s) s = cl_st_parse(&h->f, h->map, h->len, h->path);
    if (!s && !(h->entry = calloc((size_t)d->nparams, sizeof *h->entry))) s = cl_error(CL_ERR_OOM, "cannot allocate the import's table");
    /* GPT2LMHeadModel's names are its GPT2Model's under "transformer." */
    if (!s) s = map_tensors(h, d, cl_st_find(h->f, "transformer.wte.weight") ? "transformer." : "");
    if (s) hf_close(h);
    return s;
}

cl_status cl_hf_read_params(const char *dir, const cl_model_desc *d, cl_device *dev, float *const *ptrs) {
    hf_file h;
    CL_TRY(hf_open(&h, dir, d));
    cl_status s = CL_OK;
    for (int i = 0; ptrs && i < d->nparams && !s; i++) s = to_f32(h.path, h.entry[i], 0, d->params[i].numel, dev, ptrs[i]);
    hf_close(&h);
    return s;
}

/* This rank's slice of parameter i (local spec ls) from its whole tensor e. */
static cl_status read_slice(const hf_file *h, const cl_st_entry *e, const cl_param_spec *ls, int tp_rank, cl_device *dev, float *dst) {
    cl_box bx[9];
    cl_device_fill(dev, dst, 0, (size_t)ls->numel * sizeof *dst); /* padded vocabulary rows are zero */
    int nb = cl_shard_slice_boxes(ls, tp_rank, 0, ls->numel, bx);
    int64_t lc = cl_shard_local_cols(ls), wc = cl_shard_whole_cols(ls);
    for (int b = 0; b < nb; b++)
        for (int64_t r = 0; r < bx[b].nr; r++)
            CL_TRY(to_f32(h->path, e, (bx[b].r0 + r) * wc + bx[b].c0, bx[b].nc, dev, dst + bx[b].l0 + r * lc));
    return CL_OK;
}

cl_status cl_hf_resume(cl_trainer *t, const char *dir) {
    cl_model_config c;
    char tok[64];
    CL_TRY(cl_hf_read_config(dir, &c, tok, sizeof tok));
    /* no state in the directory: this run's sequence, batch and seed are the ones it starts with */
    CL_TRY(cl_ckpt_check_match(t, dir, &c, tok, t->desc->T, t->cfg.global_batch, t->cfg.seed));
    hf_file h;
    CL_TRY(hf_open(&h, dir, t->full));
    cl_model *ms[CL_PP_MAX_CHUNKS];
    cl_optimizer *os[CL_PP_MAX_CHUNKS];
    int nc = cl_pp_chunks(t, ms, os);
    cl_status s = CL_OK;
    for (int k = 0; k < nc && !s; k++) {
        cl_model *m = ms[k];
        cl_optimizer *o = os[k];
        /* each rank copies only its slices (ZeRO 3: into the part's whole parameters, then keeps its shard) */
        s = cl_model_z3_whole(m, 0);
        const cl_model_desc *md = cl_model_desc_of(m);
        for (int i = 0; i < md->nparams && !s; i++)
            if (cl_model_holds_param(m, i)) s = read_slice(&h, h.entry[i], &md->params[i], t->tp_rank, cl_model_device(m), cl_model_param(m, i));
        cl_model_z3_end_whole(m, !s);
        /* the moments zero, the optimizer at step 0 */
        size_t nf = (size_t)o->nfloats;
        if (!s && o->fd < 0) {
            cl_device_fill(o->dev, o->m, 0, nf * sizeof(float));
            cl_device_fill(o->dev, o->v, 0, nf * sizeof(float));
        } else if (!s) {
            float *zero = calloc(nf ? nf : 1, sizeof *zero);
            s = zero ? cl_optimizer_set_moments(o, zero, zero) : cl_error(CL_ERR_OOM, "cannot allocate the optimizer state's zeros");
            free(zero);
        }
        o->t = 0;
    }
    hf_close(&h);
    if (!s) t->step = 0;
    return s;
}
