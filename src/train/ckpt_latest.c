/* Kept checkpoints (--save-keep K): DIR/step-NNNNNNNN per save and DIR/latest.
 *
 * Each save writes DIR/step-NNNNNNNN (the trainer's step, 8 digits) by the
 * ordinary save of its format (a temporary directory beside it, renamed into
 * place: checkpoint.c, ckpt_shard.c), then world rank 0 rewrites DIR/latest,
 * a text file holding that directory's name (a temporary file, fsync'd,
 * renamed over latest, DIR fsync'd), and only then removes the oldest step
 * directories beyond K. So latest names a complete checkpoint at every
 * instant: a crash before its rename leaves it naming the previous one.
 * Readers (resume, eval, generate, convert) pass their directory through
 * cl_ckpt_resolve, which follows DIR/latest where there is one. */
#include "train/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define LATEST "latest"
#define STEP_DIGITS 8

/* The step of a name step-NNNNNNNN (exactly 8 digits), or -1. */
static long step_of(const char *name) {
    if (strncmp(name, "step-", 5) || strlen(name) != 5 + STEP_DIGITS || strspn(name + 5, "0123456789") != STEP_DIGITS) return -1;
    return strtol(name + 5, NULL, 10);
}

cl_status cl_ckpt_resolve(const char *flag, const char *dir, char *out, size_t n) {
    struct stat sb;
    if (!*dir) return cl_error(CL_ERR_INVALID, "%s: empty path", flag);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return cl_error(CL_ERR_INVALID, "%s %s: no such directory", flag, dir);
    char path[4200], name[64];
    if ((size_t)snprintf(path, sizeof path, "%s/" LATEST, dir) >= sizeof path)
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
    if (step_of(name) < 0 || strlen(name) != k)
        return cl_error(CL_ERR_INVALID, "%s: does not hold a step directory's name (step-NNNNNNNN, 8 digits)", path);
    if ((size_t)snprintf(out, n, "%s/%s", dir, name) >= n) return cl_error(CL_ERR_INVALID, "%s %s: the path is too long", flag, dir);
    if (lstat(out, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cl_error(CL_ERR_INVALID, "%s: names %s, which is not a directory there", path, name);
    return CL_OK;
}

cl_status cl_checkpoint_check_kept_target(const char *dir) {
    struct stat sb;
    char parent[4200];
    if (!*dir) return cl_error(CL_ERR_INVALID, "the checkpoint path is empty");
    if (strlen(dir) > CL_PATH_MAX - 16)
        return cl_error(CL_ERR_INVALID, "the checkpoint path is %zu bytes long, over the limit of %d", strlen(dir), CL_PATH_MAX - 16);
    if (lstat(dir, &sb) != 0) {
        if (errno != ENOENT) return cl_error(CL_ERR_IO, "%s: %s", dir, strerror(errno));
        cl_parent_dir(dir, parent, sizeof parent);
        return cl_check_dir_writable(parent, dir);
    }
    if (!S_ISDIR(sb.st_mode)) return cl_error(CL_ERR_INVALID, "%s is not a directory (--save-keep writes step directories into one)", dir);
    if (cl_ckpt_has(dir, CL_CKPT_MARKER) || cl_ckpt_has(dir, CL_CKPT_INDEX))
        return cl_error(CL_ERR_INVALID, "%s is itself a checkpoint; --save-keep writes step directories into a directory of their own", dir);
    return cl_check_dir_writable(dir, dir);
}

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* Removes DIR's step directories beyond the keep newest (by step), never
 * the one just written; cl_ckpt_abort removes only the files cleave writes,
 * and the directory only when that empties it. */
static void prune(const char *dir, int keep, long current) {
    DIR *dp = opendir(dir);
    if (!dp) return;
    long *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        long st = step_of(e->d_name);
        struct stat sb;
        if (st < 0 || st == current || fstatat(dirfd(dp), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (n == cap) {
            long *g = realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g) break;
            steps = g;
        }
        steps[n++] = st;
    }
    closedir(dp);
    if (steps) qsort(steps, n, sizeof *steps, cmp_long);
    char path[4300];
    /* the current one counts as one of the keep */
    for (size_t i = 0; i + (size_t)(keep - 1) < n; i++) {
        snprintf(path, sizeof path, "%s/step-%0*ld", dir, STEP_DIGITS, steps[i]);
        cl_ckpt_abort(path);
    }
    free(steps);
}

cl_status cl_trainer_save_kept(cl_trainer *t, const char *dir, int keep, int sharded) {
    if (keep < 1) return cl_error(CL_ERR_INVALID, "--save-keep %d: must be at least 1", keep);
    int me = t->cfg.groups ? cl_comm_rank(t->cfg.groups->world) : 0;
    long step = cl_trainer_steps_done(t);
    char sub[4200], name[32];
    snprintf(name, sizeof name, "step-%0*ld", STEP_DIGITS, step);
    if ((size_t)snprintf(sub, sizeof sub, "%s/%s", dir, name) >= sizeof sub)
        return cl_error(CL_ERR_INVALID, "saving checkpoint %s: the path is too long", dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) /* every rank: whoever comes first makes it */
        return cl_error(CL_ERR_IO, "saving checkpoint %s: cannot create it: %s", dir, strerror(errno));
    CL_TRY(sharded ? cl_trainer_save_sharded(t, sub) : cl_trainer_save(t, sub));
    if (me != 0) return CL_OK;
    /* world rank 0 (which wrote, or committed, the step directory): the pointer, then the pruning */
    char path[4200], text[40];
    snprintf(path, sizeof path, "%s/" LATEST, dir);
    int len = snprintf(text, sizeof text, "%s\n", name);
    CL_TRY(cl_write_file_atomic(path, text, (size_t)len, "checkpoint pointer"));
    cl_ckpt_fsync_parent(path);
    prune(dir, keep, step);
    return CL_OK;
}
