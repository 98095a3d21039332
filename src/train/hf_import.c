/* Hugging Face checkpoints read by cleave (docs/ARCHITECTURE.md,
 * "Hugging Face import and export"), driven by the family's table
 * (cl_model_family's hf_* fields): no family is named here.
 *
 * A directory without cleave's marker (and without a sharded index) is read
 * as what Hugging Face's save_pretrained writes: config.json with the
 * family's "model_type" (gpt2, llama; mixtral, the Llama family's form with
 * experts) and its keys, and the tensors in one
 * model.safetensors or in HF's sharded form (model-0000K-of-0000N
 * .safetensors named tensor by tensor by model.safetensors.index.json's
 * weight_map). Names are the parameters' own, or under the family's prefix
 * (GPT2LMHeadModel's "transformer."); the buffers the family lists (GPT-2's
 * attention masks, Llama's rotary inverse frequencies) are skipped. GPT-2's
 * Conv1D stores [in, out], cleave's layout; Llama's nn.Linear weights
 * ("*_proj.weight", Mixtral's router and experts' w1, w2, w3: the family's
 * hf_transposed) are [out, in] and are transposed on the way in. A tied
 * head's "lm_head.weight", when present, must equal the embedding's bytes. F32 is copied, BF16 (and F16 where the
 * family takes it) widened exactly; other dtypes are refused. There are no
 * optimizer moments and no step in such a checkpoint: a resume starts the
 * moments at zero, the optimizer step and the data at step 0.
 *
 * Invariants: every parameter of the whole description has exactly one
 * tensor of its shape (transposed where the family says), in a file the
 * index names, before anything is read; every message names the file and
 * the tensor or key. */
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

/* Each of keys (space-separated: the family's hf_keys, its hf_moe_keys) is a number in r; arch: the type's. */
static cl_status check_keys(const cl_json *r, const char *path, const char *type, const char *arch, const char *keys) {
    for (const char *k = keys; k && *k;) {
        size_t n = strcspn(k, " ");
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(n < sizeof key ? n : sizeof key - 1), k);
        const cl_json *v = cl_json_get(r, key);
        if (!v || v->type != CL_JSON_NUMBER)
            return cl_error(CL_ERR_FORMAT, "%s: model_type '%s' needs the number \"%s\" (%s's config has it)%s", path, type, key,
                            arch, v ? ": it is not a number" : "");
        k += n;
        while (*k == ' ') k++;
    }
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
    /* the family's type, or its form with experts (Mixtral's), which needs its own keys too */
    int moe = !s && fam->hf_moe_type && !strcmp(mt->string, fam->hf_moe_type);
    if (!s) s = check_keys(r, path, mt->string, moe ? fam->hf_moe_arch : fam->hf_arch, fam->hf_keys);
    if (!s && moe) s = check_keys(r, path, mt->string, fam->hf_moe_arch, fam->hf_moe_keys);
    if (!s && fam->hf_check) s = fam->hf_check(r, path); /* before the parse, so a refused setting is named */
    if (!s) s = cl_ckpt_config_parse(r, path, c, tok, tn);
    if (!s && cl_model_family_of(c) != fam)
        s = cl_error(CL_ERR_FORMAT, "%s: model_type %s with cleave_model %s, not %s", path, mt->string, cl_model_family_of(c)->name,
                     fam->name);
    if (!s && fam->hf_moe_type && !moe && c->experts) /* a model with experts is the other type */
        s = cl_error(CL_ERR_FORMAT, "%s: model_type '%s' with num_local_experts %d: a model with experts is model_type '%s' (%s)", path,
                     mt->string, c->experts, fam->hf_moe_type, fam->hf_moe_arch);
    /* Hugging Face's config names no tokenizer: a large vocabulary means the family's, a smaller one bytes */
    if (!s && !cl_json_get(r, "tokenizer")) snprintf(tok, tn, "%s", c->vocab >= 50257 && fam->hf_tokenizer ? fam->hf_tokenizer : "byte");
    cl_json_free(doc);
    return s;
}

/* Whether name ends in one of the space-separated suffixes. */
static int ends_in(const char *name, const char *suffixes) {
    size_t n = strlen(name);
    for (const char *k = suffixes; k && *k;) {
        size_t m = strcspn(k, " ");
        if (m && m <= n && !strncmp(name + n - m, k, m)) return 1;
        k += m;
        while (*k == ' ') k++;
    }
    return 0;
}

int cl_hf_transposed(const cl_model_family *fam, const cl_param_spec *p) {
    return fam->hf_transposed && p->ndim == 2 && ends_in(p->name, fam->hf_transposed);
}

static void shape_text(char *out, size_t n, int ndim, const int64_t *sh) {
    size_t at = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && at < n; i++) at += (size_t)snprintf(out + at, n - at, "%s%" PRId64, i ? ", " : "", sh[i]);
    if (at < n) snprintf(out + at, n - at, "]");
}

/* Elements [at, at + n) of entry e (mapped host memory) as F32 into dst on dev: F32 copied, BF16 and F16
 * widened (exactly) on the host a piece at a time by the one conversion (src/core/format.c: its 16-bit loads
 * may be unaligned), then copied; non-finite values refused. */
static cl_status to_f32(const char *path, const cl_st_entry *e, int64_t at, int64_t n, cl_device *dev, float *dst) {
    const unsigned char *src = e->data;
    size_t es = cl_dtype_size(e->dtype);
    if (e->dtype == CL_F32) {
        cl_device_copy_from_host(dev, dst, src + 4 * at, (size_t)n * sizeof(float));
    } else {
        float wide[1024];
        for (int64_t j0 = 0; j0 < n; j0 += 1024) {
            int64_t k = n - j0 < 1024 ? n - j0 : 1024;
            CL_TRY(cl_dtype_convert(wide, CL_F32, src + es * (size_t)(at + j0), e->dtype, (size_t)k));
            cl_device_copy_from_host(dev, dst + j0, wide, (size_t)k * sizeof(float));
        }
    }
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(dst[j]))
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' holds a non-finite value (%g) at index %" PRId64, path, e->name,
                            (double)dst[j], at + j);
    return CL_OK;
}

/* The same for a tensor stored [out, in] (wr columns: cleave's rows): cleave's rows [r0, r0 + nr) and columns
 * [c0, c0 + nc) into dst (row pitch lc). A tile of TC stored rows (cleave's columns) is read as TR contiguous
 * values each, widened, turned in host memory and copied a row at a time, so the mapped file is read in runs. */
enum { TC = 64, TR = 256 };
static cl_status to_f32_turned(const char *path, const cl_st_entry *e, int64_t r0, int64_t nr, int64_t c0, int64_t nc, int64_t wr,
                               cl_device *dev, float *dst, int64_t lc) {
    const unsigned char *src = e->data;
    size_t es = cl_dtype_size(e->dtype);
    float *in = malloc(2 * TC * TR * sizeof *in), *out = in + TC * TR;
    if (!in) return cl_error(CL_ERR_OOM, "cannot allocate the transposition's tile");
    cl_status s = CL_OK;
    for (int64_t cb = 0; cb < nc && !s; cb += TC)
        for (int64_t rb = 0; rb < nr && !s; rb += TR) {
            int64_t cn = nc - cb < TC ? nc - cb : TC, rn = nr - rb < TR ? nr - rb : TR;
            for (int64_t k = 0; k < cn && !s; k++) {
                int64_t at = (c0 + cb + k) * wr + r0 + rb;
                s = cl_dtype_convert(in + k * TR, CL_F32, src + es * (size_t)at, e->dtype, (size_t)rn);
                for (int64_t j = 0; j < rn && !s; j++)
                    if (!isfinite(in[k * TR + j]))
                        s = cl_error(CL_ERR_FORMAT, "%s: tensor '%s' holds a non-finite value (%g) at index %" PRId64, path, e->name,
                                     (double)in[k * TR + j], at + j);
            }
            for (int64_t r = 0; r < rn && !s; r++) {
                for (int64_t k = 0; k < cn; k++) out[k] = in[k * TR + r];
                cl_device_copy_from_host(dev, dst + (rb + r) * lc + cb, out, (size_t)cn * sizeof *out);
            }
        }
    free(in);
    return s;
}

/* One safetensors file mapped (read-only: a rank's reads touch only the pages of its slices, and ranks in one
 * process or on one host share the page cache). */
typedef struct {
    char path[4300];
    void *map;
    size_t len;
    cl_st_file *f;
} hf_part;

/* The checkpoint's files checked against the whole model d: entry[i] is d's parameter i's tensor, in part
 * epart[i], stored [out, in] where trans[i]. path: model.safetensors, or the index of a sharded one. */
typedef struct {
    char path[4300];
    const cl_model_family *fam;
    hf_part *part;
    int nparts;
    const cl_st_entry **entry;
    int *epart, *trans;
} hf_file;

static void hf_close(hf_file *h) {
    for (int k = 0; k < h->nparts; k++) {
        cl_st_close(h->part[k].f);
        if (h->part[k].map && h->part[k].map != MAP_FAILED) munmap(h->part[k].map, h->part[k].len);
    }
    free(h->part);
    free(h->entry);
    free(h->epart);
    free(h->trans);
    memset(h, 0, sizeof *h);
}

static cl_status part_open(hf_part *p) {
    int fd = open(p->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cl_error(CL_ERR_INVALID, "%s: %s", p->path, strerror(errno));
    struct stat sb;
    cl_status s = fstat(fd, &sb) == 0 ? CL_OK : cl_error(CL_ERR_IO, "%s: %s", p->path, strerror(errno));
    if (!s && sb.st_size < 8) s = cl_error(CL_ERR_FORMAT, "%s: too short for a safetensors file", p->path);
    if (!s) {
        p->len = (size_t)sb.st_size;
        p->map = mmap(NULL, p->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p->map == MAP_FAILED) s = cl_error(CL_ERR_IO, "%s: cannot map: %s", p->path, strerror(errno));
    }
    close(fd);
    if (!s) s = cl_st_parse(&p->f, p->map, p->len, p->path);
    return s;
}

/* The tensor named name in any part (its part in *k), NULL when none. */
static const cl_st_entry *find_any(const hf_file *h, const char *name, int *k) {
    for (int j = 0; j < h->nparts; j++) {
        const cl_st_entry *e = cl_st_find(h->part[j].f, name);
        if (e) {
            if (k) *k = j;
            return e;
        }
    }
    return NULL;
}

/* Each tensor is a parameter of d (entry[i]) of its shape and a dtype the family imports, a listed buffer or
 * a tied head (skipped), and every one of d's is present. */
static cl_status map_tensors(hf_file *h, const cl_model_desc *d, const char *prefix) {
    const cl_model_family *fam = h->fam;
    size_t pl = strlen(prefix);
    for (int k = 0; k < h->nparts; k++)
        for (int q = 0; q < cl_st_count(h->part[k].f); q++) {
            const cl_st_entry *e = cl_st_get(h->part[k].f, q);
            const char *path = h->part[k].path, *n = strncmp(e->name, prefix, pl) ? NULL : e->name + pl;
            if (d->tied_wte >= 0 && !strcmp(e->name, "lm_head.weight")) continue; /* compared below */
            int i = -1;
            for (int j = 0; n && j < d->nparams && i < 0; j++)
                if (!strcmp(d->params[j].name, n)) i = j;
            if (i < 0 && n && ends_in(n, fam->hf_buffers)) continue;
            if (i < 0)
                return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' is not a %s parameter cleave knows%s%s%s", path, e->name,
                                cl_model_hf_arch(&d->cfg), pl ? " (the file's names start with '" : "", prefix, pl ? "')" : "");
            if (h->entry[i])
                return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' is also in %s", path, e->name, h->part[h->epart[i]].path);
            if (e->dtype != CL_F32 && e->dtype != CL_BF16 && !(e->dtype == CL_F16 && fam->hf_f16))
                return cl_error(CL_ERR_UNSUPPORTED, "%s: tensor '%s' is %s: cleave imports F32%s and BF16", path, e->name,
                                cl_dtype_name(e->dtype), fam->hf_f16 ? ", F16" : "");
            const cl_param_spec *p = &d->params[i];
            int tr = cl_hf_transposed(fam, p);
            int64_t want[4] = {0};
            for (int j = 0; j < p->ndim; j++) want[j] = tr ? p->shape[p->ndim - 1 - j] : p->shape[j];
            int same = e->ndim == p->ndim;
            for (int j = 0; same && j < p->ndim; j++) same = e->shape[j] == want[j];
            if (!same) {
                char got[96], wants[96], ex[48] = "";
                shape_text(got, sizeof got, e->ndim, e->shape);
                shape_text(wants, sizeof wants, p->ndim, want);
                if (d->cfg.experts) snprintf(ex, sizeof ex, ", num_local_experts %d", d->cfg.experts);
                return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' is %s, but config.json (layers %d, heads %d, key-value heads %d, "
                                "width %d, MLP %lld, context %d, vocabulary %d%s) makes it %s", path, e->name, got, d->cfg.layers,
                                d->cfg.heads, cl_model_kv_heads(&d->cfg), d->cfg.channels, (long long)cl_model_mlp_width(&d->cfg),
                                d->cfg.seq_len, d->cfg.vocab, ex, wants);
            }
            h->entry[i] = e, h->epart[i] = k, h->trans[i] = tr;
        }
    for (int i = 0; i < d->nparams; i++)
        if (!h->entry[i])
            return cl_error(CL_ERR_FORMAT, "%s: no tensor '%s%s' (a %s of config.json's shape has it)", h->path, prefix, d->params[i].name,
                            cl_model_hf_arch(&d->cfg));
    /* a tied head: lm_head.weight, when present, is the embedding's bytes (an untied head is another model) */
    const cl_st_entry *head = d->tied_wte >= 0 ? find_any(h, "lm_head.weight", NULL) : NULL, *wte = head ? h->entry[d->tied_wte] : NULL;
    if (head && (head->dtype != wte->dtype || head->ndim != wte->ndim || head->end - head->begin != wte->end - wte->begin ||
                 memcmp(head->data, wte->data, wte->end - wte->begin)))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: lm_head.weight differs from %s%s: cleave ties the LM head to the embedding", h->path,
                        prefix, d->params[d->tied_wte].name);
    return CL_OK;
}

/* A sharded checkpoint's files: the distinct files model.safetensors.index.json's weight_map names (plain names
 * in dir), each opened, each tensor the map names found in its file. */
static cl_status open_index(hf_file *h, const char *dir) {
    cl_json_doc *doc;
    CL_TRY(cl_json_parse_file(&doc, h->path));
    const cl_json *wm = cl_json_get(cl_json_root(doc), "weight_map");
    cl_status s = wm && wm->type == CL_JSON_OBJECT && wm->count > 0
                      ? CL_OK
                      : cl_error(CL_ERR_FORMAT, "%s: no \"weight_map\" object naming each tensor's file", h->path);
    if (!s && !(h->part = calloc((size_t)wm->count, sizeof *h->part))) s = cl_error(CL_ERR_OOM, "cannot allocate the import's files");
    for (const cl_json *m = s ? NULL : wm->child; m && !s; m = m->next) {
        if (m->type != CL_JSON_STRING || !m->string_len || strchr(m->string, '/') || !strcmp(m->string, ".."))
            s = cl_error(CL_ERR_FORMAT, "%s: weight_map's entry for '%s' is not a file name in the directory", h->path, m->key);
        int k = 0;
        while (!s && k < h->nparts && strcmp(strrchr(h->part[k].path, '/') + 1, m->string)) k++;
        if (!s && k == h->nparts) {
            snprintf(h->part[k].path, sizeof h->part[k].path, "%s/%s", dir, m->string);
            h->nparts++;
            s = part_open(&h->part[k]);
            if (s) s = cl_error_context(s, "%s: weight_map's file for tensor '%s'", h->path, m->key);
        }
        if (!s && !cl_st_find(h->part[k].f, m->key))
            s = cl_error(CL_ERR_FORMAT, "%s: weight_map puts tensor '%s' in %s, which does not hold it", h->path, m->key, m->string);
    }
    cl_json_free(doc);
    return s;
}

static cl_status hf_open(hf_file *h, const char *dir, const cl_model_desc *d) {
    memset(h, 0, sizeof *h);
    h->fam = cl_model_family_of(&d->cfg);
    if (!h->fam->hf_arch) return cl_error(CL_ERR_UNSUPPORTED, "%s: cleave reads no Hugging Face checkpoint of a %s model", dir, h->fam->name);
    cl_status s = CL_OK;
    if (cl_ckpt_has(dir, "model.safetensors.index.json")) {
        snprintf(h->path, sizeof h->path, "%s/model.safetensors.index.json", dir);
        s = open_index(h, dir);
    } else {
        snprintf(h->path, sizeof h->path, "%s/model.safetensors", dir);
        h->part = calloc(1, sizeof *h->part);
        if (!h->part) s = cl_error(CL_ERR_OOM, "cannot allocate the import's files");
        else {
            h->nparts = 1;
            snprintf(h->part[0].path, sizeof h->part[0].path, "%s", h->path);
            s = part_open(&h->part[0]);
        }
    }
    size_t np = (size_t)(d->nparams ? d->nparams : 1);
    if (!s && (!(h->entry = calloc(np, sizeof *h->entry)) || !(h->epart = calloc(np, sizeof *h->epart)) ||
               !(h->trans = calloc(np, sizeof *h->trans))))
        s = cl_error(CL_ERR_OOM, "cannot allocate the import's table");
    /* names under the family's prefix (GPT2LMHeadModel's "transformer."), when the first parameter is there */
    char first[160];
    snprintf(first, sizeof first, "%s%s", h->fam->hf_prefix ? h->fam->hf_prefix : "", d->nparams ? d->params[0].name : "");
    const char *prefix = h->fam->hf_prefix && *h->fam->hf_prefix && find_any(h, first, NULL) ? h->fam->hf_prefix : "";
    if (!s) s = map_tensors(h, d, prefix);
    if (s) hf_close(h);
    return s;
}

/* Rows [r0, r0 + nr) and columns [c0, c0 + nc) of parameter i's whole tensor (cleave's layout: wc columns,
 * wr rows) into dst (row pitch lc) on dev: a transposed tensor a tile at a time. */
static cl_status read_box(const hf_file *h, int i, int64_t r0, int64_t nr, int64_t c0, int64_t nc, int64_t wr, int64_t wc,
                          cl_device *dev, float *dst, int64_t lc) {
    const cl_st_entry *e = h->entry[i];
    const char *path = h->part[h->epart[i]].path;
    if (h->trans[i]) return to_f32_turned(path, e, r0, nr, c0, nc, wr, dev, dst, lc);
    for (int64_t r = 0; r < nr; r++) CL_TRY(to_f32(path, e, (r0 + r) * wc + c0, nc, dev, dst + r * lc));
    return CL_OK;
}

cl_status cl_hf_read_params(const char *dir, const cl_model_desc *d, cl_device *dev, float *const *ptrs) {
    hf_file h;
    CL_TRY(hf_open(&h, dir, d));
    cl_status s = CL_OK;
    for (int i = 0; ptrs && i < d->nparams && !s; i++) {
        const cl_param_spec *p = &d->params[i];
        int64_t wc = p->ndim ? p->shape[p->ndim - 1] : 1, wr = p->numel / (wc ? wc : 1);
        s = h.trans[i] ? read_box(&h, i, 0, wr, 0, wc, wr, wc, dev, ptrs[i], wc) : read_box(&h, i, 0, 1, 0, p->numel, 1, p->numel, dev, ptrs[i], 0);
    }
    hf_close(&h);
    return s;
}

/* This rank's slice of parameter i (local spec ls) from its whole tensor e. */
static cl_status read_slice(const hf_file *h, int i, const cl_param_spec *ls, int tp_rank, cl_device *dev, float *dst) {
    cl_box bx[9];
    cl_device_fill(dev, dst, 0, (size_t)ls->numel * sizeof *dst); /* padded vocabulary rows are zero */
    int nb = cl_shard_slice_boxes(ls, tp_rank, 0, ls->numel, bx);
    int64_t lc = cl_shard_local_cols(ls), wc = cl_shard_whole_cols(ls);
    for (int b = 0; b < nb; b++)
        CL_TRY(read_box(h, i, bx[b].r0, bx[b].nr, bx[b].c0, bx[b].nc, cl_shard_whole_rows(ls), wc, dev, dst + bx[b].l0, lc));
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
            if (cl_model_holds_param(m, i)) s = read_slice(&h, i, &md->params[i], t->tp_rank, cl_model_device(m), cl_model_param(m, i));
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
