/* Checkpoints: save, resume, load-for-inference and verify (see train.h):
 * the single-file format, and the entry points that pick the format a
 * directory holds (sharded: ckpt_shard.c, Hugging Face: hf_import.c). The
 * directory handling every format shares is ckpt_dir.c's.
 *
 * A checkpoint is a directory: model.safetensors (Hugging Face GPT-2 names
 * and layouts), config.json (HF GPT-2 keys plus cleave's own), optimizer
 * .safetensors (exp_avg.NAME, exp_avg_sq.NAME) and trainer_state.json (step,
 * optimizer step count, data addressing), run_config.json (the run's
 * resolved configuration, when it has one) and cleave-checkpoint.json, the
 * marker that says cleave wrote the directory. It is written whole into a
 * new directory beside DIR (DIR.tmp.PID.N) and then swapped with DIR in one
 * renameat2(RENAME_EXCHANGE), so at every instant DIR is either the old or
 * the new checkpoint, never half of each. A save replaces only nothing, an
 * empty directory, or a directory holding the marker and nothing but the
 * files cleave writes; it never removes a file it did not write. A save
 * first removes the DIR.tmp.PID.N that saves killed earlier left (their PID
 * no longer running). */
#include "cleave/json.h"
#include "cleave/safetensors.h"
#include "train/ckpt_json.h"
#include "train/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Parses config.json into a model config and the tokenizer name. */
static cl_status read_config(const char *dir, cl_model_config *c, char *tokenizer, size_t tn) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cl_json_doc *doc;
    CL_TRY(cl_json_parse_file(&doc, path));
    cl_status s = cl_ckpt_config_parse(cl_json_root(doc), path, c, tokenizer, tn);
    cl_json_free(doc);
    return s;
}

/* Writes the n items to path with the run id, the step and each tensor's
 * content hash (cl_hash_sum) in the metadata, after the format's own pairs. */
static cl_status write_hashed(const char *path, const cl_st_item *items, int n, const cl_trainer *t, const char *format) {
    int nm = n + 3;
    cl_st_meta *meta = calloc((size_t)nm, sizeof *meta);
    char (*keys)[112] = calloc((size_t)n + 1, sizeof *keys);
    char (*vals)[20] = calloc((size_t)n + 1, sizeof *vals);
    cl_status s = meta && keys && vals ? CL_OK : cl_error(CL_ERR_OOM, "%s: cannot allocate the metadata", path);
    int k = 0;
    if (!s) {
        if (format) meta[k++] = (cl_st_meta){"format", format};
        snprintf(vals[n], sizeof vals[n], "%d", t->step);
        meta[k++] = (cl_st_meta){CL_CKPT_META_RUN, t->run_id};
        meta[k++] = (cl_st_meta){CL_CKPT_META_STEP, vals[n]};
    }
    for (int i = 0; i < n && !s; i++) {
        snprintf(keys[i], sizeof keys[i], CL_CKPT_META_HASH "%s", items[i].name);
        snprintf(vals[i], sizeof vals[i], "%016" PRIx64, cl_hash_sum(items[i].t.data, (size_t)cl_tensor_bytes(&items[i].t)));
        meta[k++] = (cl_st_meta){keys[i], vals[i]};
    }
    if (!s) s = cl_st_write(path, items, n, meta, k);
    free(meta);
    free(keys);
    free(vals);
    return s;
}

static cl_status write_params(const char *path, const cl_model_desc *d, float *const *ptrs, const cl_trainer *t) {
    cl_st_item *items = calloc((size_t)d->nparams, sizeof *items);
    if (!items) return cl_error(CL_ERR_OOM, "cannot allocate the checkpoint index");
    for (int i = 0; i < d->nparams; i++) {
        const cl_param_spec *ps = &d->params[i];
        items[i].name = ps->name;
        items[i].t = cl_tensor_make(ptrs[i], CL_F32, ps->ndim, ps->shape);
    }
    cl_status s = write_hashed(path, items, d->nparams, t, "pt");
    free(items);
    return s;
}

/* Every parameter of d, named with prefix, is in f as F32 of exactly its
 * shape: checked before anything is allocated for the model, so a
 * config.json that claims more than the file holds is refused. */
static cl_status check_params(const cl_st_file *f, const cl_model_desc *d, const char *prefix) {
    for (int i = 0; i < d->nparams; i++) {
        char name[80];
        snprintf(name, sizeof name, "%s%s", prefix, d->params[i].name);
        CL_TRY(cl_st_check_tensor(f, name, CL_F32, d->params[i].ndim, d->params[i].shape));
    }
    return CL_OK;
}

/* Copies the parameters out of f (checked by check_params) and refuses a
 * non-finite value, or a negative one where nonneg (second moments). */
static cl_status copy_params(const cl_st_file *f, const char *path, const cl_model_desc *d, float *const *ptrs,
                             const char *prefix, int nonneg) {
    cl_status s = CL_OK;
    for (int i = 0; i < d->nparams && !s; i++) {
        char name[80];
        snprintf(name, sizeof name, "%s%s", prefix, d->params[i].name);
        s = cl_st_read_tensor(f, name, CL_F32, d->params[i].ndim, d->params[i].shape, ptrs[i]);
    }
    for (int i = 0; i < d->nparams && !s; i++) {
        const float *p = ptrs[i];
        for (int64_t j = 0; j < d->params[i].numel; j++)
            if (!isfinite(p[j]) || (nonneg && p[j] < 0)) {
                s = cl_error(CL_ERR_FORMAT, "%s: tensor '%s%s' holds %s value (%g) at index %" PRId64 "%s", path, prefix,
                             d->params[i].name, isfinite(p[j]) ? "a negative" : "a non-finite", (double)p[j], j,
                             isfinite(p[j]) ? "; a second moment is never negative" : "");
                break;
            }
    }
    return s;
}

static cl_status read_params(const char *path, const cl_model_desc *d, float *const *ptrs, const char *prefix, int nonneg,
                             const cl_ckpt_manifest *m, double *tv) {
    cl_st_file *f;
    CL_TRY(cl_st_open(&f, path));
    cl_status s = check_params(f, d, prefix);
    double t0 = cl_now();
    if (!s && m) s = cl_ckpt_verify_st(f, path, m); /* once per file: the first prefix's call */
    *tv += cl_now() - t0;
    if (!s) s = copy_params(f, path, d, ptrs, prefix, nonneg);
    cl_st_close(f);
    return s;
}

static cl_status save_arrays(cl_trainer *t, const char *dir, float *const *params, float *const *mp, float *const *vp,
                             int opt_t);

cl_status cl_trainer_save(cl_trainer *t, const char *dir) {
    /* the whole tensors, in the whole model's layout: a checkpoint is the same whatever the layout that wrote it */
    const cl_model_desc *d = t->full;
    int n = d->nparams;
    float **pp = malloc((size_t)n * 3 * sizeof *pp);
    if (!pp) return cl_error(CL_ERR_OOM, "cannot allocate the checkpoint index");
    float **mp = pp + n, **vp = pp + 2 * n;
    /* every stage and tensor-parallel rank sends what it holds to the first, which writes */
    float *host = NULL;
    int writer = 0, opt_t = 0;
    cl_status s = cl_pp_gather(t, &host, &writer, &opt_t);
    if (!s && writer) {
        for (int i = 0; i < n; i++) {
            pp[i] = cl_param_f32(host, &d->params[i]);
            mp[i] = cl_param_f32(host + d->nfloats, &d->params[i]);
            vp[i] = cl_param_f32(host + 2 * d->nfloats, &d->params[i]);
        }
        s = save_arrays(t, dir, pp, mp, vp, opt_t);
    }
    free(host);
    free(pp);
    return s;
}

static cl_status save_arrays(cl_trainer *t, const char *dir, float *const *params, float *const *mp, float *const *vp,
                             int opt_t) {
    char target[4096], tmp[4200], path[4300];
    CL_TRY(cl_ckpt_begin(dir, target, tmp));
    const cl_model_desc *d = t->full;
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    cl_status s = write_params(path, d, params, t);
    if (!s) {
        snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
        /* both moments in one file: exp_avg.* then exp_avg_sq.* */
        int n = d->nparams;
        cl_st_item *items = calloc(2 * (size_t)n, sizeof *items);
        char (*names)[96] = calloc(2 * (size_t)n, sizeof *names);
        if (!items || !names) s = cl_error(CL_ERR_OOM, "cannot allocate the optimizer index");
        for (int i = 0; !s && i < n; i++) {
            snprintf(names[i], sizeof names[i], "exp_avg.%s", d->params[i].name);
            snprintf(names[n + i], sizeof names[n + i], "exp_avg_sq.%s", d->params[i].name);
            items[i].name = names[i];
            items[n + i].name = names[n + i];
            items[i].t = cl_tensor_make(mp[i], CL_F32, d->params[i].ndim, d->params[i].shape);
            items[n + i].t = cl_tensor_make(vp[i], CL_F32, d->params[i].ndim, d->params[i].shape);
        }
        if (!s) s = write_hashed(path, items, 2 * n, t, NULL);
        free(items);
        free(names);
    }
    if (!s) {
        cl_strbuf b = {0};
        cl_ckpt_config_json(&b, &d->cfg, t->tok ? cl_tokenizer_name(t->tok) : "none", t->cfg.dtype);
        s = cl_ckpt_write_text(tmp, "config.json", &b);
        cl_sb_free(&b);
    }
    if (!s) {
        cl_strbuf st = {0};
        cl_ckpt_state_json(&st, t, opt_t);
        s = cl_ckpt_write_text(tmp, "trainer_state.json", &st);
        cl_sb_free(&st);
    }
    /* the manifest: each file read back and hashed, as a load will see it */
    cl_ckpt_manifest m = {.version = CL_CKPT_MARKER_VERSION, .step = t->step};
    memcpy(m.run_id, t->run_id, sizeof m.run_id);
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors", "config.json", "trainer_state.json"};
    for (int i = 0; i < 4 && !s; i++) s = cl_ckpt_manifest_add(&m, tmp, files[i]);
    if (!s) s = cl_ckpt_run_config_write(&t->cfg, tmp, &m);
    s = cl_ckpt_commit(dir, target, tmp, s, &m);
    cl_ckpt_manifest_free(&m);
    return s;
}

static cl_status read_state(const char *dir, int *step, int *opt_t, int *T, int *gb, uint64_t *seed, char *run_id) {
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    cl_json_doc *doc;
    CL_TRY(cl_json_parse_file(&doc, path));
    cl_status s = cl_ckpt_state_parse(cl_json_root(doc), path, step, opt_t, T, gb, seed);
    if (!s) s = cl_ckpt_run_id_parse(cl_json_root(doc), path, run_id);
    cl_json_free(doc);
    return s;
}

/* A sharded checkpoint (ckpt_shard.c) is the directory that holds an index. */
static int is_sharded(const char *dir) { return cl_ckpt_has(dir, CL_CKPT_INDEX); }

cl_status cl_trainer_resume(cl_trainer *t, const char *given) {
    cl_model_config c;
    char tok[64], dir[4096];
    t->low_fresh = 0; /* bf16: the master is read anew, its BF16 copy refreshed before the next pass */
    CL_TRY(cl_ckpt_resolve("--resume", given, dir, sizeof dir)); /* DIR/latest followed */
    char path[4200];
    if (is_sharded(dir)) return cl_shard_resume(t, dir);
    if (cl_hf_foreign(dir)) return cl_hf_resume(t, dir);
    double t0 = cl_now();
    cl_ckpt_manifest m;
    CL_TRY(cl_ckpt_verify_single(dir, &m, 0)); /* files, sizes, the JSON files' hashes, run id and step */
    if (m.version < 2 && (!t->cfg.groups || cl_comm_rank(t->cfg.groups->world) == 0)) cl_ckpt_note_unhashed(dir); /* once */
    double tv = cl_now() - t0;
    int step = 0, opt_t = 0, T = 0, gb = 0;
    uint64_t seed = 0;
    char run_id[CL_RUN_ID_LEN + 1];
    cl_status s = read_config(dir, &c, tok, sizeof tok);
    if (!s) s = read_state(dir, &step, &opt_t, &T, &gb, &seed, run_id);
    if (!s) s = cl_ckpt_check_match(t, dir, &c, tok, T, gb, seed);
    if (s) {
        cl_ckpt_manifest_free(&m);
        return s;
    }
    /* every rank reads the whole files into host memory and keeps its slice */
    const cl_model_desc *d = t->full;
    int n = d->nparams;
    float *host = malloc((size_t)d->nfloats * 3 * sizeof *host);
    float **ptr = malloc((size_t)n * 3 * sizeof *ptr);
    s = host && ptr ? CL_OK : cl_error(CL_ERR_OOM, "cannot allocate %s's buffers", dir);
    for (int i = 0; !s && i < n; i++)
        for (int k = 0; k < 3; k++) ptr[k * n + i] = cl_param_f32(host + k * d->nfloats, &d->params[i]);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!s) s = read_params(path, d, ptr, "", 0, &m, &tv);
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    if (!s) s = read_params(path, d, ptr + n, "exp_avg.", 0, &m, &tv);
    if (!s) s = read_params(path, d, ptr + 2 * n, "exp_avg_sq.", 1, NULL, &tv);
    cl_ckpt_manifest_free(&m);
    if (!s && getenv("CLEAVE_VERIFY_TIME")) /* for the benchmark: what the checks cost of the whole load */
        fprintf(stderr, "checkpoint load: %.3f s, of which verification %.3f s\n", cl_now() - t0, tv);
    if (!s) s = cl_pp_load(t, host, host + d->nfloats, host + 2 * d->nfloats, opt_t);
    free(host);
    free(ptr);
    if (s) return s;
    t->step = step;
    if (run_id[0]) memcpy(t->run_id, run_id, sizeof t->run_id); /* the lineage goes on (one from before run ids: a new one) */
    return CL_OK;
}

cl_status cl_checkpoint_load(const char *given, const char *tokenizer_dir, size_t cap, int B, cl_loaded *out) {
    memset(out, 0, sizeof *out);
    cl_model_config c;
    char tok[64], dir[4096];
    CL_TRY(cl_ckpt_resolve("--checkpoint", given, dir, sizeof dir)); /* DIR/latest followed */
    char path[4200];
    int sharded = is_sharded(dir), hf = !sharded && cl_hf_foreign(dir);
    cl_ckpt_manifest m = {0}; /* a single file's (a sharded one's: cl_shard_load_model) */
    if (!sharded && !hf) CL_TRY(cl_ckpt_verify_single(dir, &m, 0));
    if (!sharded && !hf && m.version < 2) cl_ckpt_note_unhashed(dir);
    cl_status s = sharded ? cl_shard_read_config(dir, &c, tok, sizeof tok)
                  : hf    ? cl_hf_read_config(dir, &c, tok, sizeof tok)
                          : read_config(dir, &c, tok, sizeof tok);
    if (s) {
        cl_ckpt_manifest_free(&m);
        return s;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cl_st_file *f = NULL;
    s = cl_model_describe(&c, 0, &out->desc);
    if (s) s = cl_error_context(s, "%s/%s", dir, sharded ? CL_CKPT_INDEX : "config.json");
    /* the file must hold every tensor config.json implies before any is allocated (sharded: the index's
     * boxes are checked against the model before a byte is read) */
    if (!s && !sharded && !hf) s = cl_st_open(&f, path);
    if (!s && !sharded && !hf) s = check_params(f, out->desc, "");
    if (!s && !sharded && !hf) s = cl_ckpt_verify_st(f, path, &m);
    cl_ckpt_manifest_free(&m);
    if (!s && hf) s = cl_hf_read_params(dir, out->desc, NULL, NULL);
    if (!s) s = cl_device_create_cpu(&out->dev, cap, 0);
    if (!s) s = cl_model_create(&out->model, out->desc, out->dev, B);
    if (!s) s = cl_acts_create(out->model, B, &out->acts);
    if (!s) s = sharded ? cl_shard_load_model(dir, out->model)
                : hf    ? cl_hf_read_params(dir, out->desc, cl_model_device(out->model), cl_model_param_ptrs(out->model))
                        : copy_params(f, path, out->desc, cl_model_param_ptrs(out->model), "", 0);
    cl_st_close(f);
    if (!s && cl_model_family_of(&c)->tokens) {
        if (!strcmp(tok, "gpt2")) s = cl_tokenizer_gpt2(&out->tok, tokenizer_dir);
        else if (!strcmp(tok, "byte")) s = cl_tokenizer_byte(&out->tok);
        else if (!strcmp(tok, "hf")) s = cl_tokenizer_hf(&out->tok, tokenizer_dir);
        else s = cl_error(CL_ERR_FORMAT, "%s/config.json: unknown tokenizer '%s'", dir, tok);
        if (!s && cl_tokenizer_vocab(out->tok) > c.vocab)
            s = cl_error(CL_ERR_FORMAT, "%s: tokenizer %s does not fit the vocabulary %d", dir, tok, c.vocab);
    }
    if (s) cl_loaded_free(out);
    return s;
}

void cl_loaded_free(cl_loaded *l) {
    if (l->model) {
        cl_acts_destroy(l->model, &l->acts);
        cl_model_destroy(l->model);
    }
    cl_device_destroy(l->dev);
    cl_model_desc_free(l->desc);
    cl_tokenizer_free(l->tok);
    memset(l, 0, sizeof *l);
}

cl_status cl_checkpoint_verify(const char *given, char *summary, size_t n) {
    char dir[4096];
    CL_TRY(cl_ckpt_resolve("checkpoint verify", given, dir, sizeof dir)); /* DIR/latest followed */
    if (!cl_ckpt_has(dir, CL_CKPT_MARKER))
        return cl_error(CL_ERR_FORMAT, "%s: no %s: %s", dir, CL_CKPT_MARKER,
                        cl_hf_foreign(dir) ? "a Hugging Face checkpoint carries no cleave content hashes to verify"
                                           : "not a checkpoint cleave wrote");
    cl_ckpt_manifest m;
    CL_TRY(cl_ckpt_manifest_read(dir, &m));
    cl_status s = CL_OK;
    if (m.version < 2)
        s = cl_error(CL_ERR_FORMAT, "%s: written before cleave recorded content hashes (%s version 1): nothing to verify it against", dir,
                     CL_CKPT_MARKER);
    else if (cl_ckpt_has(dir, CL_CKPT_INDEX)) s = cl_shard_verify(dir, &m, summary, n);
    else {
        cl_ckpt_manifest_free(&m);
        s = cl_ckpt_verify_single(dir, &m, 1);
        int64_t total = 0;
        for (int i = 0; !s && i < m.n; i++) total += m.f[i].bytes;
        if (!s)
            snprintf(summary, n, "%s: intact: single-file checkpoint of step %d, run %s: %d files (%" PRId64 " bytes), every hash matches",
                     dir, m.step, m.run_id, m.n, total);
    }
    cl_ckpt_manifest_free(&m);
    return s;
}
