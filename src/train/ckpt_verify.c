/* Checkpoint integrity (docs/ARCHITECTURE.md, "Checkpoint integrity"): the
 * marker's manifest, the checks a load makes against it, and a single
 * file's whole check for `cleave checkpoint verify` (cl_checkpoint_verify,
 * checkpoint.c, which hands a sharded one to ckpt_shard.c).
 *
 * Why: nothing else proves a checkpoint's bytes are the ones written. The
 * marker (cleave-checkpoint.json, written last) records the run id, the
 * step, and every other file's size and content hash (cl_hash_sum); each
 * safetensors file records the run id and step in its __metadata__, a
 * single file also each tensor's hash, and a sharded index each box's.
 * Invariants: nothing here writes, renames or removes a file; every refusal
 * is CL_ERR_FORMAT naming the file, the tensor or box where there is one,
 * and what differs. A marker of version 1 (before hashes) is read with a
 * one-line note; a Hugging Face directory (no marker) is not checked. */
#include "cleave/json.h"
#include "cleave/safetensors.h"
#include "train/ckpt_json.h"
#include "train/internal.h"
#include "train/shard_index.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cl_ckpt_hex_parse(const char *s, uint64_t *out) { return cl_shard_hex_parse(s, out); }

cl_status cl_ckpt_hash_file(const char *path, int64_t *bytes, uint64_t *hash) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cl_error(CL_ERR_INVALID, "%s: %s", path, strerror(errno));
    cl_hasher *h = cl_hasher_new();
    char *buf = malloc(CL_HASH_BLOCK);
    cl_status s = h && buf ? CL_OK : cl_error(CL_ERR_OOM, "%s: cannot allocate the hash buffer", path);
    int64_t n = 0;
    while (!s) {
        ssize_t r = read(fd, buf, CL_HASH_BLOCK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) s = cl_error(CL_ERR_IO, "%s: %s", path, strerror(errno));
        if (r <= 0) break;
        cl_hasher_feed(h, buf, (size_t)r);
        n += r;
    }
    if (!s) *bytes = n, *hash = cl_hasher_sum(h);
    cl_hasher_free(h);
    free(buf);
    close(fd);
    return s;
}

cl_status cl_ckpt_manifest_add(cl_ckpt_manifest *m, const char *dir, const char *name) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int64_t bytes;
    uint64_t h;
    CL_TRY(cl_ckpt_hash_file(path, &bytes, &h));
    return cl_ckpt_manifest_put(m, name, bytes, h);
}

cl_status cl_ckpt_manifest_put(cl_ckpt_manifest *m, const char *name, int64_t bytes, uint64_t hash) {
    CL_TRY(cl_grow(&m->f, sizeof *m->f, (size_t)m->n, &m->cap, 8, "the checkpoint's manifest"));
    cl_ckpt_fsum *f = &m->f[m->n++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->bytes = bytes;
    f->hash = hash;
    return CL_OK;
}

void cl_ckpt_manifest_free(cl_ckpt_manifest *m) {
    free(m->f);
    memset(m, 0, sizeof *m);
}

const cl_ckpt_fsum *cl_ckpt_manifest_find(const cl_ckpt_manifest *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->f[i].name, name)) return &m->f[i];
    return NULL;
}

cl_status cl_ckpt_manifest_read(const char *dir, cl_ckpt_manifest *m) {
    memset(m, 0, sizeof *m);
    char path[4300];
    snprintf(path, sizeof path, "%s/" CL_CKPT_MARKER, dir);
    cl_json_doc *doc;
    CL_TRY(cl_json_parse_file(&doc, path));
    const cl_json *r = cl_json_get(cl_json_root(doc), "version"), *files = cl_json_get(cl_json_root(doc), "files");
    const cl_json *st = cl_json_get(cl_json_root(doc), "step"), *hn = cl_json_get(cl_json_root(doc), "hash");
    cl_status s = CL_OK;
    if (!r || r->type != CL_JSON_NUMBER || !r->number_is_int || r->integer < 1)
        s = cl_error(CL_ERR_FORMAT, "%s: no \"version\" (a positive integer)", path);
    else if (r->integer > CL_CKPT_MARKER_VERSION)
        s = cl_error(CL_ERR_FORMAT, "%s: version %" PRId64 " comes from a newer cleave (this one reads up to %d)", path, r->integer,
                     CL_CKPT_MARKER_VERSION);
    else if ((m->version = (int)r->integer) >= 2) {
        if (!st || st->type != CL_JSON_NUMBER || !st->number_is_int || st->integer < 0 || st->integer > CL_MAX_STEPS)
            s = cl_error(CL_ERR_FORMAT, "%s: no \"step\" (an integer from 0 to %d)", path, CL_MAX_STEPS);
        if (!s && (!hn || hn->type != CL_JSON_STRING || strcmp(hn->string, CL_CKPT_HASH_NAME)))
            s = cl_error(CL_ERR_FORMAT, "%s: \"hash\" is not \"%s\", the one this cleave computes", path, CL_CKPT_HASH_NAME);
        if (!s) s = cl_ckpt_run_id_parse(cl_json_root(doc), path, m->run_id);
        if (!s && !m->run_id[0]) s = cl_error(CL_ERR_FORMAT, "%s: no \"run_id\"", path);
        if (!s && (!files || files->type != CL_JSON_ARRAY)) s = cl_error(CL_ERR_FORMAT, "%s: no \"files\" array", path);
        if (!s) m->step = (int)st->integer;
        int i = 0;
        for (const cl_json *e = s ? NULL : files->child; e && !s; e = e->next, i++) {
            const cl_json *nm = cl_json_get(e, "name"), *by = cl_json_get(e, "bytes"), *h = cl_json_get(e, "hash");
            uint64_t hv;
            if (!nm || nm->type != CL_JSON_STRING || nm->string_len == 0 || nm->string_len >= sizeof m->f[0].name ||
                strchr(nm->string, '/') || !by || by->type != CL_JSON_NUMBER || !by->number_is_int || by->integer < 0 || !h ||
                h->type != CL_JSON_STRING || !cl_ckpt_hex_parse(h->string, &hv))
                s = cl_error(CL_ERR_FORMAT, "%s: file %d is not {\"name\", \"bytes\", \"hash\" (16 hex digits)}", path, i);
            else if (cl_ckpt_manifest_find(m, nm->string))
                s = cl_error(CL_ERR_FORMAT, "%s: file %s is listed twice", path, nm->string);
            else s = cl_ckpt_manifest_put(m, nm->string, by->integer, hv);
        }
    }
    cl_json_free(doc);
    if (s) cl_ckpt_manifest_free(m);
    return s;
}

int cl_ckpt_verify_on(void) {
    const char *v = getenv("CLEAVE_CKPT_VERIFY");
    return !v || strcmp(v, "0");
}

cl_status cl_ckpt_manifest_load(const char *dir, cl_ckpt_manifest *m) {
    if (cl_ckpt_verify_on()) return cl_ckpt_manifest_read(dir, m);
    memset(m, 0, sizeof *m);
    m->version = 0; /* checks off: as a checkpoint before hashes, without the note */
    return CL_OK;
}

void cl_ckpt_note_unhashed(const char *dir) {
    if (!cl_ckpt_verify_on()) return;
    fprintf(stderr, "note: %s was written before cleave recorded content hashes (marker version 1): it is read unverified\n", dir);
}

cl_status cl_ckpt_check_size(const char *dir, const cl_ckpt_manifest *m, const char *name, int64_t size) {
    const cl_ckpt_fsum *f = cl_ckpt_manifest_find(m, name);
    if (!f) return cl_error(CL_ERR_FORMAT, "%s/%s: not in %s's list of the checkpoint's files", dir, name, CL_CKPT_MARKER);
    if (f->bytes != size)
        return cl_error(CL_ERR_FORMAT, "%s/%s: %" PRId64 " bytes, %s records %" PRId64 " (the file changed after it was written)", dir,
                        name, size, CL_CKPT_MARKER, f->bytes);
    return CL_OK;
}

cl_status cl_ckpt_check_file(const char *dir, const cl_ckpt_manifest *m, const char *name, int hash) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    if (stat(path, &sb) != 0) return cl_error(CL_ERR_INVALID, "%s: %s (a file %s lists)", path, strerror(errno), CL_CKPT_MARKER);
    CL_TRY(cl_ckpt_check_size(dir, m, name, (int64_t)sb.st_size));
    if (!hash) return CL_OK;
    int64_t bytes;
    uint64_t h;
    CL_TRY(cl_ckpt_hash_file(path, &bytes, &h));
    const cl_ckpt_fsum *f = cl_ckpt_manifest_find(m, name);
    if (h != f->hash || bytes != f->bytes)
        return cl_error(CL_ERR_FORMAT, "%s: content hash %016" PRIx64 ", %s records %016" PRIx64 " (the file changed after it was written)",
                        path, h, CL_CKPT_MARKER, f->hash);
    return CL_OK;
}

cl_status cl_ckpt_check_origin(const char *path, const char *what, const char *run_id, const char *step, const char *want_run,
                               int want_step) {
    char ws[16];
    snprintf(ws, sizeof ws, "%d", want_step);
    if (!run_id || !step)
        return cl_error(CL_ERR_FORMAT, "%s: records no %s run id and step (%s: run %s, step %d)", path, what, CL_CKPT_MARKER, want_run,
                        want_step);
    if (strcmp(step, ws) || strcmp(run_id, want_run))
        return cl_error(CL_ERR_FORMAT, "%s: written at step %s of run %s, but %s is of step %d of run %s: a file from another %s", path, step,
                        run_id, what, want_step, want_run, strcmp(run_id, want_run) ? "run" : "step");
    return CL_OK;
}

/* A safetensors file of a single-file checkpoint: its run id and step, and
 * every tensor's content against the hash its metadata records. */
cl_status cl_ckpt_verify_st(const cl_st_file *f, const char *path, const cl_ckpt_manifest *m) {
    if (m->version < 2) return CL_OK;
    CL_TRY(cl_ckpt_check_origin(path, CL_CKPT_MARKER, cl_st_metadata(f, CL_CKPT_META_RUN), cl_st_metadata(f, CL_CKPT_META_STEP), m->run_id,
                                m->step));
    for (int i = 0; i < cl_st_count(f); i++) {
        const cl_st_entry *e = cl_st_get(f, i);
        char key[160];
        snprintf(key, sizeof key, CL_CKPT_META_HASH "%s", e->name);
        uint64_t want;
        if (!cl_ckpt_hex_parse(cl_st_metadata(f, key), &want))
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' has no content hash in the metadata (\"%s\")", path, e->name, key);
        uint64_t got = cl_hash_sum(e->data, (size_t)(e->end - e->begin));
        if (got != want)
            return cl_error(CL_ERR_FORMAT,
                            "%s: tensor '%s': content hash %016" PRIx64 ", the file records %016" PRIx64 " (its bytes changed after it was written)",
                            path, e->name, got, want);
    }
    return CL_OK;
}

cl_status cl_ckpt_run_config_write(const cl_train_config *c, const char *tmp, cl_ckpt_manifest *m) {
    if (!c->run_config) return CL_OK;
    cl_strbuf b = {0};
    cl_sb_printf(&b, "%s", c->run_config);
    cl_status s = b.failed ? cl_error(CL_ERR_OOM, "cannot hold %s", CL_CKPT_RUN_CONFIG) : cl_ckpt_write_text(tmp, CL_CKPT_RUN_CONFIG, &b);
    cl_sb_free(&b);
    return s ? s : cl_ckpt_manifest_add(m, tmp, CL_CKPT_RUN_CONFIG);
}

cl_status cl_ckpt_run_config_check(const char *dir, const cl_ckpt_manifest *m, int *listed) {
    *listed = 0;
    if (m->version < 2) return CL_OK;
    if (cl_ckpt_manifest_find(m, CL_CKPT_RUN_CONFIG)) {
        *listed = 1;
        return cl_ckpt_check_file(dir, m, CL_CKPT_RUN_CONFIG, 1);
    }
    if (cl_ckpt_has(dir, CL_CKPT_RUN_CONFIG))
        return cl_error(CL_ERR_FORMAT, "%s/%s: not listed in %s (a file added after the checkpoint was written)", dir, CL_CKPT_RUN_CONFIG,
                        CL_CKPT_MARKER);
    return CL_OK;
}

/* A single-file checkpoint's small files and sizes: exactly the files it
 * writes, config.json, trainer_state.json and run_config.json hashed, the others' sizes, and
 * trainer_state.json's run id and step the marker's. */
cl_status cl_ckpt_verify_single(const char *dir, cl_ckpt_manifest *m, int hash_all) {
    CL_TRY(hash_all ? cl_ckpt_manifest_read(dir, m) : cl_ckpt_manifest_load(dir, m));
    if (m->version < 2) return CL_OK;
    static const char *const names[] = {"model.safetensors", "optimizer.safetensors", "config.json", "trainer_state.json"};
    int extra;
    cl_status s = cl_ckpt_run_config_check(dir, m, &extra);
    if (!s && m->n != 4 + extra)
        s = cl_error(CL_ERR_FORMAT, "%s/%s lists %d files, a single-file checkpoint has %d", dir, CL_CKPT_MARKER, m->n, 4 + extra);
    for (int i = 0; i < 4 && !s; i++) s = cl_ckpt_check_file(dir, m, names[i], i >= 2);
    char path[4300];
    cl_json_doc *doc = NULL;
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    if (!s) s = cl_json_parse_file(&doc, path);
    if (!s) {
        char rid[CL_RUN_ID_LEN + 1], step[16] = "";
        const cl_json *st = cl_json_get(cl_json_root(doc), "step");
        if (st && st->type == CL_JSON_NUMBER && st->number_is_int) snprintf(step, sizeof step, "%" PRId64, st->integer);
        s = cl_ckpt_run_id_parse(cl_json_root(doc), path, rid);
        if (!s) s = cl_ckpt_check_origin(path, CL_CKPT_MARKER, rid, step, m->run_id, m->step);
    }
    cl_json_free(doc);
    for (int i = 0; i < 2 && !s && hash_all; i++) { /* the tensors, then the whole files (their headers too) */
        cl_st_file *f = NULL;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        s = cl_st_open(&f, path);
        if (!s) s = cl_ckpt_verify_st(f, path, m);
        cl_st_close(f);
    }
    for (int i = 0; i < 2 && !s && hash_all; i++) s = cl_ckpt_check_file(dir, m, names[i], 1);
    if (s) cl_ckpt_manifest_free(m);
    return s;
}

