/* Kept checkpoints (--save-keep K): DIR/step-NNNNNNNN per save and DIR/latest.
 *
 * Each save writes DIR/step-NNNNNNNN (the trainer's step, 8 digits) by the
 * ordinary save of its format (a temporary directory beside it, renamed into
 * place: checkpoint.c, ckpt_shard.c), then world rank 0 rewrites DIR/latest,
 * a text file holding that directory's name (a temporary file, fsync'd,
 * renamed over latest, DIR fsync'd), and only then prunes: of the step
 * directories of this run's lineage (cl_checkpoint_describe's run_id equal to
 * cl_trainer_run_id) older than the one just written, all but the K - 1
 * newest. A newer step, another lineage's, or one whose run id cannot be
 * read is never pruned. So latest names a complete checkpoint at every
 * instant: a crash before its rename leaves it naming the previous one.
 * A directory holding steps beyond the resume point is refused before the
 * run (cl_checkpoint_check_kept_steps) unless --discard-newer-checkpoints,
 * which deletes them right after the run's first save has moved latest.
 * K = 0 (a kept directory given to --save without --save-keep) prunes none.
 * Readers (resume, eval, generate, convert) pass their directory through
 * cl_ckpt_resolve (ckpt_dir.c), which follows DIR/latest where there is one. */
#include "train/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define LATEST CL_CKPT_LATEST
#define STEP_DIGITS CL_CKPT_STEP_DIGITS

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

/* DIR's step directories (names step-NNNNNNNN that are directories, not
 * links), by step, ascending: *steps malloc'd (NULL when none). */
static cl_status list_steps(const char *dir, long **steps, size_t *n) {
    *steps = NULL;
    *n = 0;
    DIR *dp = opendir(dir);
    if (!dp) return errno == ENOENT ? CL_OK : cl_error(CL_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    size_t cap = 0;
    struct dirent *e;
    cl_status s = CL_OK;
    while (!s && (e = readdir(dp))) {
        long st = cl_ckpt_step_of(e->d_name);
        struct stat sb;
        if (st < 0 || fstatat(dirfd(dp), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (*n == cap) {
            long *g = realloc(*steps, (cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g) s = cl_error(CL_ERR_OOM, "%s: no host memory to list its step directories", dir);
            else *steps = g;
        }
        if (!s) (*steps)[(*n)++] = st;
    }
    closedir(dp);
    if (s) free(*steps), *steps = NULL, *n = 0;
    else if (*n) qsort(*steps, *n, sizeof **steps, cmp_long);
    return s;
}

static void step_path(char *out, size_t n, const char *dir, long step) {
    snprintf(out, n, "%s/step-%0*ld", dir, STEP_DIGITS, step);
}

/* 1 if DIR/step-N is a cleave checkpoint (either format) of lineage run_id
 * at step N: its state read and its run_id equal to run_id (never one that
 * cannot be read, nor one saved before run ids, "", nor one holding a latest
 * of its own, which describe would follow). */
static int of_lineage(const char *dir, long step, const char *run_id) {
    char path[4200], inner[4300];
    step_path(path, sizeof path, dir, step);
    snprintf(inner, sizeof inner, "%s/" LATEST, path);
    struct stat sb;
    if (!run_id[0] || lstat(inner, &sb) == 0 || (!cl_ckpt_has(path, CL_CKPT_MARKER) && !cl_ckpt_has(path, CL_CKPT_INDEX))) return 0;
    cl_checkpoint_info info;
    if (cl_checkpoint_describe(path, &info)) {
        cl_error_clear();
        return 0;
    }
    return info.has_state && info.step == step && !strcmp(info.run_id, run_id);
}

/* Appends "step-N" names to out (n bytes), the first 6, then a count of the rest. */
static void name_steps(char *out, size_t n, const long *steps, size_t k) {
    size_t len = strlen(out);
    for (size_t i = 0; i < k && len < n; i++) {
        if (i == 6) {
            snprintf(out + len, n - len, " and %zu more", k - 6);
            return;
        }
        len += (size_t)snprintf(out + len, n - len, "%sstep-%0*ld", i ? ", " : "", STEP_DIGITS, steps[i]);
    }
}

int cl_checkpoint_is_kept_dir(const char *dir) {
    struct stat sb;
    char path[4200];
    if (lstat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || cl_ckpt_has(dir, CL_CKPT_MARKER) || cl_ckpt_has(dir, CL_CKPT_INDEX)) return 0;
    snprintf(path, sizeof path, "%s/" LATEST, dir);
    if (lstat(path, &sb) == 0) return 1;
    long *steps;
    size_t n;
    if (list_steps(dir, &steps, &n)) {
        cl_error_clear();
        return 0;
    }
    free(steps);
    return n > 0;
}

cl_status cl_checkpoint_check_kept_steps(const char *dir, const char *resume, int keep, int discard, char *note, size_t nn) {
    if (nn) note[0] = 0;
    long *steps;
    size_t n;
    CL_TRY(list_steps(dir, &steps, &n));
    if (!n) return CL_OK;
    /* the resume point and this run's lineage: a fresh run's are 0 and one not minted yet */
    cl_checkpoint_info info = {0};
    char from[4096];
    cl_status s = resume ? cl_ckpt_resolve("--resume", resume, from, sizeof from) : CL_OK;
    if (!s && resume) s = cl_error_context(cl_checkpoint_describe(from, &info), "--resume %s", resume);
    long point = info.has_state ? info.step : 0;
    size_t first = 0; /* steps[first..n) are beyond the resume point */
    while (first < n && steps[first] <= point) first++;
    char names[512] = "", path[4200];
    if (!s && first < n && !discard) {
        name_steps(names, sizeof names, steps + first, n - first);
        const char *them = n - first > 1 ? "them" : "it";
        s = cl_error(CL_ERR_INVALID,
                     "--save %s holds %s, beyond the resume point (step %ld%s): saving here would move latest back past %s and "
                     "replace any step reached; pass --discard-newer-checkpoints to delete %s after this run's first save, "
                     "or save elsewhere",
                     dir, names, point, resume ? "" : ", a fresh run", them, them);
    }
    /* what the flag will delete must be checkpoints cleave wrote (a save would refuse a user's directory too) */
    for (size_t i = first; !s && i < n; i++) {
        step_path(path, sizeof path, dir, steps[i]);
        s = cl_error_context(cl_checkpoint_check_target(path), "--discard-newer-checkpoints");
    }
    /* the older steps --save-keep will never prune: another lineage's, or without a readable run id */
    size_t k = 0;
    for (size_t i = 0; !s && keep > 0 && i < first; i++)
        if (!of_lineage(dir, steps[i], info.run_id)) steps[k++] = steps[i];
    if (!s && k && nn) {
        names[0] = 0;
        name_steps(names, sizeof names, steps, k);
        snprintf(note, nn, "--save-keep %d never prunes %s's %s: not checkpoints of this run's lineage (%s%s)", keep, dir, names,
                 info.run_id[0] ? "run id " : "", info.run_id[0] ? info.run_id : "the one resumed has no run id: a new one starts");
    }
    free(steps);
    return s;
}

/* After the save of step current: with discard_beyond >= 0, removes the
 * cleave checkpoints beyond it (--discard-newer-checkpoints, named by the
 * up-front check), then, with keep >= 1, the step directories of this
 * run's lineage (of_lineage) older than current beyond the keep - 1 newest
 * of them. Never current, never another lineage's or one whose run id
 * cannot be read, never a newer one without discard. cl_ckpt_abort removes
 * only the files cleave writes, and the directory only when that empties it. */
static void prune(const char *dir, int keep, long current, const char *run_id, long discard_beyond) {
    long *steps;
    size_t n;
    if (list_steps(dir, &steps, &n)) {
        cl_error_clear();
        return;
    }
    char path[4200];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (steps[i] == current) continue;
        if (discard_beyond >= 0 && steps[i] > discard_beyond) {
            step_path(path, sizeof path, dir, steps[i]);
            cl_ckpt_abort(path);
        } else if (keep > 0 && steps[i] < current && of_lineage(dir, steps[i], run_id))
            steps[k++] = steps[i];
    }
    /* the current one counts as one of the keep */
    for (size_t i = 0; keep > 0 && i + (size_t)(keep - 1) < k; i++) {
        step_path(path, sizeof path, dir, steps[i]);
        cl_ckpt_abort(path);
    }
    free(steps);
}

cl_status cl_trainer_save_kept(cl_trainer *t, const char *dir, int keep, int sharded, long discard_beyond) {
    if (keep < 0) return cl_error(CL_ERR_INVALID, "--save-keep %d: must be at least 1 (0: prune nothing)", keep);
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
    prune(dir, keep, step, t->run_id, discard_beyond);
    return CL_OK;
}
