/* Hugging Face checkpoints written by cleave (docs/ARCHITECTURE.md,
 * "Hugging Face import and export"): cleave convert --save-format hf.
 *
 * The directory save_pretrained writes, from the family's table
 * (cl_model_family's hf_* fields; no family is named here): config.json
 * with the family's Hugging Face keys (model_type, architectures and the
 * shape, as its write_config gives them) and torch_dtype; the parameters
 * under their own names (Hugging Face's), the family's [out, in] weights
 * (Llama's *_proj.weight, Mixtral's router and experts) transposed from
 * cleave's [in, out], a tied head
 * left out (save_pretrained drops it too), as F32, BF16 or F16 (rounded to
 * nearest even by the one conversion, src/core/format.c); in one
 * model.safetensors, or, given a largest shard size, in model-0000K-of-
 * 0000N.safetensors files beside model.safetensors.index.json (its
 * weight_map and total_size), each file filled in parameter order until
 * the next tensor would pass the size (a larger tensor alone in its file).
 *
 * Invariants: the whole tensors are gathered (cl_pp_gather), so the
 * directory is the same whatever the layout that wrote it; it is written
 * into a fresh directory beside the target and renamed into place only
 * when every file is written, onto a missing path or an empty directory,
 * never over anything else, so a failure leaves no half-written directory;
 * no optimizer state, no step, no cleave marker (an import reads it as
 * Hugging Face's). */
#include "cleave/json.h"
#include "cleave/safetensors.h"
#include "train/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* HF's spelling of a size: bytes, or a number with B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB. */
cl_status cl_hf_parse_size(const char *text, int64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    static const struct {
        const char *unit;
        double mul;
    } units[] = {{"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
    for (size_t i = 0; !errno && end != text && i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(end, units[i].unit) && v * units[i].mul >= 1 && v * units[i].mul <= 1e15) {
            *out = (int64_t)(v * units[i].mul);
            return CL_OK;
        }
    return cl_error(CL_ERR_INVALID, "--max-shard-size '%s': a size in bytes, or with B, KB, MB, GB, KiB, MiB or GiB (1 byte to 1 PB)", text);
}

static const char *torch_name(cl_dtype dt) { return dt == CL_BF16 ? "bfloat16" : dt == CL_F16 ? "float16" : "float32"; }

/* The files written into tmp so far, removed with it on failure. */
typedef struct {
    char tmp[4200];
    char (*names)[64];
    int n;
} hf_out;

static void out_abort(hf_out *o) {
    char path[4300];
    for (int k = 0; k < o->n; k++) {
        snprintf(path, sizeof path, "%s/%s", o->tmp, o->names[k]);
        unlink(path);
    }
    rmdir(o->tmp);
}

/* Parameter i of d (whole, F32 at src) as Hugging Face stores it, in dtype dt: *buf (the caller frees) */
static cl_status hf_tensor(const cl_model_desc *d, int i, const float *src, cl_dtype dt, void **buf) {
    const cl_param_spec *p = &d->params[i];
    int tr = cl_hf_transposed(cl_model_family_of(&d->cfg), p);
    size_t n = (size_t)p->numel;
    float *t = NULL;
    if (tr) { /* cleave's [in, out] to [out, in] */
        int64_t R = p->shape[0], Cc = p->shape[1];
        if (!(t = malloc((n ? n : 1) * sizeof *t))) return cl_error(CL_ERR_OOM, "cannot allocate tensor '%s'", p->name);
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < Cc; c++) t[c * R + r] = src[r * Cc + c];
        src = t;
    }
    void *o = malloc((n ? n : 1) * cl_dtype_size(dt));
    cl_status s = o ? cl_dtype_convert(o, dt, src, CL_F32, n) : cl_error(CL_ERR_OOM, "cannot allocate tensor '%s'", p->name);
    free(t);
    if (s) free(o);
    else *buf = o;
    return s;
}

/* Tensors [i0, i1) of d's written as one safetensors file, named o->names[o->n]. */
static cl_status write_file(hf_out *o, const cl_model_desc *d, float *const *ptrs, int i0, int i1, cl_dtype dt) {
    int n = i1 - i0;
    cl_st_item *items = calloc((size_t)(n ? n : 1), sizeof *items);
    void **bufs = calloc((size_t)(n ? n : 1), sizeof *bufs);
    cl_status s = items && bufs ? CL_OK : cl_error(CL_ERR_OOM, "cannot allocate the Hugging Face file's index");
    int m = 0;
    for (int i = i0; i < i1 && !s; i++) {
        const cl_param_spec *p = &d->params[i];
        s = hf_tensor(d, i, ptrs[i], dt, &bufs[m]);
        int64_t shape[4] = {p->shape[0], p->shape[1], p->shape[2], p->shape[3]};
        if (cl_hf_transposed(cl_model_family_of(&d->cfg), p)) shape[0] = p->shape[1], shape[1] = p->shape[0];
        items[m].name = p->name;
        if (!s) items[m].t = cl_tensor_make(bufs[m], dt, p->ndim, shape);
        m++;
    }
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", o->tmp, o->names[o->n]);
    static const cl_st_meta meta[] = {{"format", "pt"}};
    o->n++; /* removed on failure even when half-written */
    if (!s) s = cl_st_write(path, items, m, meta, 1);
    for (int k = 0; k < n && bufs; k++) free(bufs[k]);
    free(bufs);
    free(items);
    return s;
}

static cl_status write_text(hf_out *o, const char *name, const cl_strbuf *b) {
    snprintf(o->names[o->n++], sizeof o->names[0], "%s", name);
    return cl_ckpt_write_text(o->tmp, name, b);
}

/* The directory written into o->tmp from the whole parameters ptrs. */
static cl_status write_dir(hf_out *o, const cl_model_desc *d, float *const *ptrs, cl_dtype dt, int64_t max_shard) {
    int np = d->nparams;
    /* (a tied head is the embedding's: the description has no lm_head.weight to drop) */
    int *file = calloc((size_t)(np ? np : 1), sizeof *file);
    cl_status s = file ? CL_OK : cl_error(CL_ERR_OOM, "cannot allocate the Hugging Face index");
    int nfiles = 0;
    int64_t at = 0, total = 0;
    for (int i = 0; i < np && !s; i++) {
        int64_t bytes = d->params[i].numel * (int64_t)cl_dtype_size(dt);
        if (!nfiles || (max_shard > 0 && at > 0 && at + bytes > max_shard)) nfiles++, at = 0;
        file[i] = nfiles - 1;
        at += bytes, total += bytes;
    }
    if (!s && !(o->names = calloc((size_t)nfiles + 3, sizeof *o->names))) s = cl_error(CL_ERR_OOM, "cannot allocate the file names");
    int sharded = max_shard > 0;
    for (int k = 0, i0 = 0; k < nfiles && !s; k++) {
        int i1 = i0;
        while (i1 < np && file[i1] == k) i1++;
        if (sharded) snprintf(o->names[o->n], sizeof o->names[0], "model-%05d-of-%05d.safetensors", k + 1, nfiles);
        else snprintf(o->names[o->n], sizeof o->names[0], "model.safetensors");
        s = write_file(o, d, ptrs, i0, i1, dt);
        i0 = i1;
    }
    if (!s && sharded) {
        cl_strbuf b = {0};
        cl_sb_printf(&b, "{\n  \"metadata\": {\"total_size\": %" PRId64 "},\n  \"weight_map\": {", total);
        for (int i = 0; i < np; i++) {
            cl_sb_printf(&b, "%s\n    ", i ? "," : "");
            cl_sb_json_string(&b, d->params[i].name, strlen(d->params[i].name));
            cl_sb_printf(&b, ": \"model-%05d-of-%05d.safetensors\"", file[i] + 1, nfiles);
        }
        cl_sb_printf(&b, "\n  }\n}\n");
        s = write_text(o, "model.safetensors.index.json", &b);
        cl_sb_free(&b);
    }
    if (!s) {
        cl_strbuf b = {0};
        cl_sb_printf(&b, "{\n");
        cl_model_config_json(&b, &d->cfg); /* the family's keys, each line ending in a comma */
        cl_sb_printf(&b, "  \"torch_dtype\": \"%s\"\n}\n", torch_name(dt));
        s = write_text(o, "config.json", &b);
        cl_sb_free(&b);
    }
    free(file);
    return s;
}

/* Whether dir is missing or an empty directory (the only places the directory goes); *exists. */
static cl_status check_target(const char *dir, int *exists) {
    struct stat sb;
    *exists = 0;
    if (lstat(dir, &sb) != 0) return errno == ENOENT ? CL_OK : cl_error(CL_ERR_IO, "%s: %s", dir, strerror(errno));
    DIR *dp = S_ISDIR(sb.st_mode) ? opendir(dir) : NULL;
    int empty = dp != NULL;
    struct dirent *e;
    while (dp && (e = readdir(dp)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
    if (dp) closedir(dp);
    if (!empty)
        return cl_error(CL_ERR_INVALID, "%s: a Hugging Face directory is written only to a new path or an empty directory", dir);
    *exists = 1;
    return CL_OK;
}

cl_status cl_trainer_save_hf(cl_trainer *t, const char *dir, cl_dtype dt, int64_t max_shard) {
    const cl_model_desc *d = t->full;
    const cl_model_family *fam = cl_model_family_of(&d->cfg);
    if (!fam->hf_arch) return cl_error(CL_ERR_UNSUPPORTED, "--save-format hf: a %s model has no Hugging Face form", fam->name);
    if (d->cfg.experts && d->cfg.moe_every > 1) /* MixtralForCausalLM's blocks all have experts (Qwen2-MoE's layout differs) */
        return cl_error(CL_ERR_UNSUPPORTED, "--save-format hf: a model with --moe-every %d (dense and MoE blocks mixed) has no Hugging "
                        "Face form (%s has experts in every block)", d->cfg.moe_every, cl_model_hf_arch(&d->cfg));
    if (dt != CL_F32 && dt != CL_BF16 && dt != CL_F16)
        return cl_error(CL_ERR_INVALID, "--dtype %s: a Hugging Face checkpoint is written as f32, bf16 or f16", cl_dtype_name(dt));
    float *host = NULL;
    int writer = 0, opt_t = 0;
    cl_status s = cl_pp_gather(t, &host, &writer, &opt_t); /* collective: every rank sends what it holds */
    if (!s && writer) {
        int exists = 0;
        char target[4096];
        hf_out o = {0};
        float **pp = malloc((size_t)(d->nparams ? d->nparams : 1) * sizeof *pp);
        if (!pp) s = cl_error(CL_ERR_OOM, "cannot allocate the checkpoint index");
        for (int i = 0; !s && i < d->nparams; i++) pp[i] = cl_param_f32(host, &d->params[i]);
        if (!s) s = check_target(dir, &exists);
        if (!s) s = cl_ckpt_begin(dir, target, o.tmp); /* a fresh directory beside dir */
        if (!s) {
            s = write_dir(&o, d, pp, dt, max_shard);
            if (!s) cl_ckpt_fsync_parent(o.tmp);
            /* onto a missing path, never replacing one that appeared meanwhile; onto an empty directory, which
             * rename refuses to replace once it has gained an entry */
            if (!s && (exists ? rename(o.tmp, target) : renameat2(AT_FDCWD, o.tmp, AT_FDCWD, target, RENAME_NOREPLACE)) != 0)
                s = cl_error(CL_ERR_IO, "%s: cannot move the new directory into place: %s", dir, strerror(errno));
            if (s) out_abort(&o);
            else cl_ckpt_fsync_parent(target);
            free(o.names);
        }
        free(pp);
        if (s) s = cl_error_context(s, "saving the Hugging Face checkpoint %s", dir);
    }
    free(host);
    return s;
}
