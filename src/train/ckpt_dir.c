/* The checkpoint directory, whatever the format in it (checkpoint.c's
 * single file, ckpt_shard.c's shards): its path checks, the temporary
 * directory a save writes and its swap into place (see checkpoint.c's
 * opening comment), the marker, the texts every format writes (config.json,
 * trainer_state.json), a resume's match against the run, and the reading
 * of DIR/latest (ckpt_latest.c writes it). Apart from the formats because
 * every one of them, the integrity checks (ckpt_verify.c), the Hugging
 * Face import and the kept checkpoints call these, and these call none of
 * them back. */
#include "cleave/data.h"
#include "cleave/json.h"
#include "train/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void cl_ckpt_config_json(cl_strbuf *b, const cl_model_config *c, const char *tokenizer, cl_dtype dtype) {
    cl_sb_printf(b, "{\n");
    cl_model_config_json(b, c); /* the family's own fields (its table's write_config) */
    if (dtype == CL_BF16) cl_sb_printf(b, "  \"cleave_dtype\": \"bf16\",\n"); /* absent: fp32 (every checkpoint before bf16) */
    cl_sb_printf(b, "  \"cleave_model\": \"%s\",\n  \"cleave_preset\": ", cl_model_family_of(c)->name);
    cl_sb_json_string(b, c->name, strlen(c->name));
    cl_sb_printf(b, ",\n  \"tokenizer\": ");
    cl_sb_json_string(b, tokenizer, strlen(tokenizer));
    cl_sb_printf(b, "\n}\n");
}

static cl_status write_text_file(const char *path, const char *text, size_t len) {
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return cl_error(CL_ERR_IO, "%s: %s", tmp, strerror(errno));
    int ok = fwrite(text, 1, len, f) == len && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return cl_error(CL_ERR_IO, "%s: %s", path, strerror(e));
    }
    return CL_OK;
}

/* The files a checkpoint directory holds; while one is written, FILE.tmp too. */
static const char *const ckpt_files[] = {"model.safetensors", "optimizer.safetensors", "config.json", "trainer_state.json",
                                         CL_CKPT_MARKER, CL_CKPT_INDEX, CL_CKPT_RUN_CONFIG};
#define CKPT_NFILES (sizeof ckpt_files / sizeof ckpt_files[0])

static int ckpt_file_name(const char *name) {
    for (size_t i = 0; i < CKPT_NFILES; i++) {
        size_t n = strlen(ckpt_files[i]);
        if (!strncmp(name, ckpt_files[i], n) && (!name[n] || !strcmp(name + n, ".tmp"))) return 1;
    }
    /* a sharded checkpoint's (ckpt_shard.c): rank-NNNNN.safetensors */
    int k = 0;
    size_t n = strlen(name);
    if (n > 4 && !strcmp(name + n - 4, ".tmp")) n -= 4;
    if (n < 5 + 12 || strncmp(name, "rank-", 5) || strncmp(name + n - 12, ".safetensors", 12)) return 0;
    for (size_t i = 5; i < n - 12; i++, k++)
        if (name[i] < '0' || name[i] > '9') return 0;
    return k >= 5 && k <= 9;
}

/* Removes a checkpoint directory that cleave wrote: its known files only,
 * then the directory if that left it empty. */
static void remove_ckpt_dir(const char *dir) {
    char path[4200];
    DIR *dp = opendir(dir);
    struct dirent *e;
    while (dp && (e = readdir(dp)))
        if (ckpt_file_name(e->d_name)) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (dp) closedir(dp);
    rmdir(dir);
}

/* dir without trailing slashes, checked for length. */
static cl_status ckpt_path(const char *dir, char *out) {
    size_t n = strlen(dir);
    if (n == 0) return cl_error(CL_ERR_INVALID, "the checkpoint path is empty");
    if (n > CL_PATH_MAX)
        return cl_error(CL_ERR_INVALID, "the checkpoint path is %zu bytes long, over the limit of %d", n, CL_PATH_MAX);
    memcpy(out, dir, n + 1);
    while (n > 1 && out[n - 1] == '/') out[--n] = 0;
    return CL_OK;
}

typedef enum { TARGET_NONE, TARGET_EMPTY, TARGET_CKPT } target_kind;

/* What is at a save's path (normalized by ckpt_path), refusing what a save
 * must not replace. */
static cl_status classify_target(const char *dir, target_kind *kind) {
    static const char *const why = "a save replaces only a missing path, an empty directory or a cleave checkpoint";
    struct stat sb;
    if (lstat(dir, &sb) != 0) {
        if (errno == ENOENT) {
            *kind = TARGET_NONE;
            return CL_OK;
        }
        return cl_error(CL_ERR_IO, "%s: %s", dir, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode)) return cl_error(CL_ERR_INVALID, "%s is a symbolic link (%s; give the directory itself)", dir, why);
    if (!S_ISDIR(sb.st_mode)) return cl_error(CL_ERR_INVALID, "%s is a file, not a checkpoint directory (%s)", dir, why);
    DIR *dp = opendir(dir);
    if (!dp) return cl_error(CL_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    int n = 0, marker = 0;
    char stranger[256] = "";
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n++;
        struct stat es;
        int regular = fstatat(dirfd(dp), e->d_name, &es, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(es.st_mode);
        if (regular && !strcmp(e->d_name, CL_CKPT_MARKER)) marker = 1;
        if ((!regular || !ckpt_file_name(e->d_name)) && !stranger[0]) snprintf(stranger, sizeof stranger, "%s", e->d_name);
    }
    closedir(dp);
    if (n == 0) *kind = TARGET_EMPTY;
    else if (stranger[0])
        return cl_error(CL_ERR_INVALID, "%s holds '%s', which is not a file cleave writes (%s)", dir, stranger, why);
    else if (!marker)
        return cl_error(CL_ERR_INVALID, "%s has no %s, so it is not a checkpoint cleave wrote (%s)", dir, CL_CKPT_MARKER, why);
    else *kind = TARGET_CKPT;
    return CL_OK;
}

cl_status cl_checkpoint_check_target(const char *dir) {
    char norm[4096], parent[4200];
    target_kind kind;
    CL_TRY(ckpt_path(dir, norm));
    CL_TRY(classify_target(norm, &kind));
    cl_parent_dir(norm, parent, sizeof parent);
    return cl_check_dir_writable(parent, dir);
}

void cl_ckpt_fsync_parent(const char *dir) {
    char parent[4200];
    cl_parent_dir(dir, parent, sizeof parent);
    int fd = open(parent, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Removes what killed saves left beside target: TARGET.tmp.PID.N of a PID
 * that no longer runs (on this host; a live or unknown one is left), by
 * remove_ckpt_dir, so only the files cleave writes, and the directory only
 * when that empties it. */
static void remove_stale_tmp(const char *target) {
    char parent[4200], path[8400];
    cl_parent_dir(target, parent, sizeof parent);
    const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
    size_t bn = strlen(base);
    DIR *dp = opendir(parent);
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        const char *n = e->d_name;
        char *end;
        if (strncmp(n, base, bn) || strncmp(n + bn, ".tmp.", 5) || n[bn + 5] < '1' || n[bn + 5] > '9') continue;
        long pid = strtol(n + bn + 5, &end, 10);
        if (*end != '.' || !end[1] || strspn(end + 1, "0123456789") != strlen(end + 1)) continue;
        if (pid <= 0 || pid == (long)getpid() || pid != (long)(pid_t)pid || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", parent, n);
        if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_ckpt_dir(path); /* never through a link */
    }
    if (dp) closedir(dp);
}

cl_status cl_ckpt_begin(const char *dir, char *target, char *tmp) {
    target_kind kind;
    cl_status s = ckpt_path(dir, target);
    if (!s) s = classify_target(target, &kind);
    if (s) return cl_error_context(s, "saving checkpoint");
    remove_stale_tmp(target);
    /* a fresh directory beside the target: never one that was there before */
    static unsigned seq;
    int made = 0;
    for (int i = 0; i < 100 && !made; i++) {
        snprintf(tmp, 4200, "%s.tmp.%ld.%u", target, (long)getpid(), __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
        made = mkdir(tmp, 0755) == 0;
        if (!made && errno != EEXIST) break;
    }
    if (!made) return cl_error(CL_ERR_IO, "saving checkpoint %s: cannot create %s: %s", dir, tmp, strerror(errno));
    return CL_OK;
}

void cl_ckpt_abort(const char *tmp) { remove_ckpt_dir(tmp); }

void cl_ckpt_state_json(cl_strbuf *st, const cl_trainer *t, int opt_t) {
    const cl_train_config *c = &t->cfg;
    cl_sb_printf(st, "{\n  \"step\": %d,\n  \"optimizer_step\": %d,\n  \"seq_len\": %d,\n  \"global_batch\": %d,\n", t->step,
                 opt_t, t->full->T, c->global_batch);
    cl_sb_printf(st, "  \"micro_batch\": %d,\n  \"seed\": \"%" PRIu64 "\",\n  \"samples_seen\": %" PRId64 ",\n", c->micro_batch,
                 c->seed, (int64_t)t->step * c->global_batch);
    cl_sb_printf(st, "  \"run_id\": \"%s\",\n  \"data\": ", t->run_id);
    cl_sb_json_string(st, c->data, strlen(c->data));
    if (c->data_key) { /* recorded where given: a resume reads the same data */
        cl_sb_printf(st, ",\n  \"data_key\": ");
        cl_sb_json_string(st, c->data_key, strlen(c->data_key));
    }
    if (c->split) {
        cl_sb_printf(st, ",\n  \"split\": ");
        cl_sb_json_string(st, c->split, strlen(c->split));
    }
    cl_sb_printf(st, "\n}\n");
}

cl_status cl_ckpt_write_text(const char *tmp, const char *name, const cl_strbuf *b) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    return b->failed ? cl_error(CL_ERR_OOM, "%s", name) : write_text_file(path, b->buf, b->len);
}

cl_status cl_ckpt_commit(const char *dir, const char *target, const char *tmp, cl_status s, const cl_ckpt_manifest *m) {
    target_kind kind;
    if (!s) { /* the marker, last: the run, the step and every other file's size and content hash */
        cl_strbuf b = {0};
        cl_ckpt_marker_json(&b, m);
        s = cl_ckpt_write_text(tmp, CL_CKPT_MARKER, &b);
        cl_sb_free(&b);
    }
    /* what is at the target now (it may have changed while this one was written) */
    if (!s) s = classify_target(target, &kind);
    if (s) {
        remove_ckpt_dir(tmp);
        return cl_error_context(s, "saving checkpoint %s", dir);
    }
    cl_ckpt_fsync_parent(tmp);
    /* a missing target must stay missing until the rename; an empty directory
     * is replaced by rename, which fails if it has gained an entry; a
     * checkpoint is swapped, and its known files removed from the old name */
    int rc = kind == TARGET_NONE    ? renameat2(AT_FDCWD, tmp, AT_FDCWD, target, RENAME_NOREPLACE)
             : kind == TARGET_EMPTY ? rename(tmp, target)
                                    : renameat2(AT_FDCWD, tmp, AT_FDCWD, target, RENAME_EXCHANGE);
    if (rc != 0) {
        int e = errno;
        remove_ckpt_dir(tmp);
        return cl_error(CL_ERR_IO, "saving checkpoint %s: cannot move the new one into place: %s", dir, strerror(e));
    }
    if (kind == TARGET_CKPT) remove_ckpt_dir(tmp); /* now the old checkpoint */
    cl_ckpt_fsync_parent(target);
    return CL_OK;
}

/* A resume keeps the run's number format (config.json's "cleave_dtype", absent: fp32): the checkpoint holds F32
 * master weights and moments either way, but another format would silently change the run. A directory that is
 * not cleave's (no "cleave_model": a Hugging Face import) starts a run at any format. */
static cl_status check_dtype(const cl_trainer *t, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cl_json_doc *doc;
    if (cl_json_parse_file(&doc, path)) return CL_OK; /* no config.json here (the checks before named what is missing) */
    const cl_json *r = cl_json_root(doc), *v = cl_json_get(r, "cleave_dtype");
    int ours = cl_json_get(r, "cleave_model") != NULL;
    const char *theirs = v && v->type == CL_JSON_STRING ? v->string : v ? "?" : "fp32", *mine = t->cfg.dtype == CL_BF16 ? "bf16" : "fp32";
    cl_status s = ours && strcmp(theirs, mine)
                      ? cl_error(CL_ERR_INVALID, "--resume %s: the checkpoint was trained with --dtype %s, this run has --dtype %s", dir,
                                 theirs, mine)
                      : CL_OK;
    cl_json_free(doc);
    return s;
}

cl_status cl_ckpt_check_match(const cl_trainer *t, const char *dir, const cl_model_config *c, const char *tok, int T, int gb,
                              uint64_t seed) {
    char field[32];
    int theirs, mine;
    const cl_model_config *my = &t->desc->cfg;
    if (cl_model_config_diff(c, my, field, sizeof field, &theirs, &mine))
        return c->kind != my->kind
                   ? cl_error(CL_ERR_INVALID, "--resume %s: the checkpoint holds a %s model, this run a %s", dir,
                              cl_model_family_of(c)->name, cl_model_family_of(my)->name)
                   : cl_error(CL_ERR_INVALID, "--resume %s: the checkpoint's model has %s %d, this run's %d", dir, field, theirs, mine);
    CL_TRY(check_dtype(t, dir));
    const char *mytok = t->tok ? cl_tokenizer_name(t->tok) : "none";
    if (strcmp(tok, mytok))
        return cl_error(CL_ERR_INVALID, "--resume %s: the checkpoint used the %s tokenizer, this run %s", dir, tok, mytok);
    const struct {
        const char *flag;
        int theirs, mine;
    } run[] = {{"--seq-len", T, t->full->T}, {"--global-batch-size", gb, t->cfg.global_batch}};
    for (size_t i = 0; i < sizeof run / sizeof run[0]; i++)
        if (run[i].theirs != run[i].mine)
            return cl_error(CL_ERR_INVALID, "--resume %s: the checkpoint was trained with %s %d, this run has %d", dir, run[i].flag,
                            run[i].theirs, run[i].mine);
    if (seed != t->cfg.seed)
        return cl_error(CL_ERR_INVALID, "--resume %s: the checkpoint was trained with --seed %" PRIu64 ", this run has %" PRIu64, dir,
                        seed, t->cfg.seed);
    return CL_OK;
}

int cl_ckpt_has(const char *dir, const char *name) {
    char path[4300];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &sb) == 0;
}

void cl_ckpt_marker_json(cl_strbuf *b, const cl_ckpt_manifest *m) {
    cl_sb_printf(b, "{\n  \"format\": \"cleave checkpoint\",\n  \"version\": %d,\n  \"run_id\": \"%s\",\n  \"step\": %d,\n",
                 CL_CKPT_MARKER_VERSION, m->run_id, m->step);
    cl_sb_printf(b, "  \"hash\": \"" CL_CKPT_HASH_NAME "\",\n  \"files\": [");
    for (int i = 0; i < m->n; i++)
        cl_sb_printf(b, "%s\n    {\"name\": \"%s\", \"bytes\": %" PRId64 ", \"hash\": \"%016" PRIx64 "\"}", i ? "," : "", m->f[i].name,
                     m->f[i].bytes, m->f[i].hash);
    cl_sb_printf(b, "\n  ]\n}\n");
}

long cl_ckpt_step_of(const char *name) {
    if (strncmp(name, "step-", 5) || strlen(name) != 5 + CL_CKPT_STEP_DIGITS || strspn(name + 5, "0123456789") != CL_CKPT_STEP_DIGITS) return -1;
    return strtol(name + 5, NULL, 10);
}

cl_status cl_ckpt_resolve(const char *flag, const char *dir, char *out, size_t n) {
    struct stat sb;
    if (!*dir) return cl_error(CL_ERR_INVALID, "%s: empty path", flag);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return cl_error(CL_ERR_INVALID, "%s %s: no such directory", flag, dir);
    char path[4200], name[64];
    if ((size_t)snprintf(path, sizeof path, "%s/" CL_CKPT_LATEST, dir) >= sizeof path)
        return cl_error(CL_ERR_INVALID, "%s %s: the path is too long", flag, dir);
    if (lstat(path, &sb) != 0) { /* no pointer: dir is the checkpoint */
        if ((size_t)snprintf(out, n, "%s", dir) >= n) return cl_error(CL_ERR_INVALID, "%s %s: the path is too long", flag, dir);
        return CL_OK;
    }
    FILE *f = S_ISREG(sb.st_mode) ? fopen(path, "r") : NULL;
    if (!f) return cl_error(CL_ERR_INVALID, "%s: cannot read it (not a regular file, or %s)", path, strerror(errno));
    size_t k = fread(name, 1, sizeof name - 1, f);
    fclose(f);
    name[k] = 0;
    while (k > 0 && (name[k - 1] == '\n' || name[k - 1] == '\r' || name[k - 1] == ' ')) name[--k] = 0;
    if (cl_ckpt_step_of(name) < 0 || strlen(name) != k)
        return cl_error(CL_ERR_INVALID, "%s: does not hold a step directory's name (step-NNNNNNNN, 8 digits)", path);
    if ((size_t)snprintf(out, n, "%s/%s", dir, name) >= n) return cl_error(CL_ERR_INVALID, "%s %s: the path is too long", flag, dir);
    if (lstat(out, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cl_error(CL_ERR_INVALID, "%s: names %s, which is not a directory there", path, name);
    return CL_OK;
}
