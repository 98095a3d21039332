/* Output files and host memory (see core.h).
 *
 * Why: a user's path is precious. Every file cleave writes whole (a trace, a
 * picture) goes to a temporary file made with mkstemp beside it and is renamed
 * onto the path only when complete, so a crash leaves the old file, never half
 * of a new one, and the temporary name can never be a user's file. Only a
 * regular file (or nothing) is ever replaced: a directory, a device, a pipe or
 * a symbolic link at the path is refused, since rename would replace the node
 * itself. */
#include "cleave/core.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void cl_parent_dir(const char *path, char *buf, size_t n) {
    snprintf(buf, n, "%s", path);
    char *slash = strrchr(buf, '/');
    if (!slash) snprintf(buf, n, ".");
    else if (slash == buf) buf[1] = 0;
    else *slash = 0;
}

/* What is at path, as the refusal says it, or NULL when it may be replaced. */
static const char *not_replaceable(const struct stat *st) {
    if (S_ISREG(st->st_mode)) return NULL;
    if (S_ISDIR(st->st_mode)) return "a directory";
    if (S_ISLNK(st->st_mode)) return "a symbolic link (give the file it points to)";
    if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) return "a device";
    if (S_ISFIFO(st->st_mode)) return "a pipe";
    return "not a regular file";
}

static cl_status check_path(const char *path, const char *what) {
    if (!path || !*path) return cl_error(CL_ERR_INVALID, "%s: empty path", what);
    if (strlen(path) > CL_PATH_MAX)
        return cl_error(CL_ERR_INVALID, "%s: path of %zu characters, at most %d", what, strlen(path), CL_PATH_MAX);
    struct stat st;
    if (lstat(path, &st) == 0) {
        const char *why = not_replaceable(&st);
        if (why) return cl_error(CL_ERR_INVALID, "%s %s: is %s; cleave replaces only a regular file", what, path, why);
    }
    return CL_OK;
}

/* A temporary file beside path: path.tmp.XXXXXX, opened. */
static cl_status make_temp(const char *path, const char *what, char **tmp_out, int *fd_out) {
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp) return cl_error(CL_ERR_OOM, "%s %s: no host memory for a path", what, path);
    snprintf(tmp, n, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        char dir[CL_PATH_MAX + 2];
        cl_parent_dir(path, dir, sizeof dir);
        free(tmp);
        return cl_error(CL_ERR_IO, "%s %s: cannot create a file in %s: %s", what, path, dir, strerror(e));
    }
    *tmp_out = tmp;
    *fd_out = fd;
    return CL_OK;
}

cl_status cl_check_dir_writable(const char *dir, const char *what) {
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return cl_error(CL_ERR_INVALID, "%s: the directory %s does not exist", what, dir);
    size_t n = strlen(dir) + 32;
    char *probe = malloc(n);
    if (!probe) return cl_error(CL_ERR_OOM, "%s: no host memory for a path", what);
    snprintf(probe, n, "%s/.cleave-probe-XXXXXX", dir);
    int fd = mkstemp(probe);
    cl_status s = CL_OK;
    if (fd < 0) s = cl_error(CL_ERR_INVALID, "%s: cannot create files in %s: %s", what, dir, strerror(errno));
    else {
        close(fd);
        unlink(probe);
    }
    free(probe);
    return s;
}

cl_status cl_check_output_path(const char *path, const char *what) {
    CL_TRY(check_path(path, what));
    char *tmp;
    int fd;
    CL_TRY(make_temp(path, what, &tmp, &fd));
    close(fd);
    unlink(tmp);
    free(tmp);
    return CL_OK;
}

cl_status cl_write_file_atomic(const char *path, const void *buf, size_t len, const char *what) {
    CL_TRY(check_path(path, what));
    char *tmp;
    int fd;
    CL_TRY(make_temp(path, what, &tmp, &fd));
    mode_t mask = umask(0);
    umask(mask);
    int err = fchmod(fd, 0666 & ~mask) != 0 ? errno : 0;
    const char *p = buf;
    for (size_t done = 0; !err && done < len;) {
        ssize_t k = write(fd, p + done, len - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) err = k < 0 ? errno : EIO;
        else done += (size_t)k;
    }
    if (!err && fsync(fd) != 0 && errno != EINVAL) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    cl_status s = CL_OK;
    if (err) s = cl_error(CL_ERR_IO, "%s %s: writing failed: %s (the previous file, if any, is untouched)", what, path, strerror(err));
    else if (rename(tmp, path) != 0) s = cl_error(CL_ERR_IO, "%s %s: cannot rename a finished file onto it: %s", what, path, strerror(errno));
    if (s) unlink(tmp);
    free(tmp);
    return s;
}

/* One "Key: N kB" line of /proc/meminfo, in bytes; 0 when absent. */
static uint64_t meminfo(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t v = 0;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            v = strtoull(line + kl + 1, NULL, 10) * 1024;
            break;
        }
    fclose(f);
    return v;
}

/* A cgroup v2 file holding one number (or "max"); 0 when absent or "max". */
static uint64_t cgroup_value(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "/sys/fs/cgroup/%s", name);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = {0};
    uint64_t v = 0;
    if (fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3)) v = strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

size_t cl_host_memory_available(void) {
    uint64_t avail = meminfo("MemAvailable");
    uint64_t limit = cgroup_value("memory.max");
    if (limit) {
        uint64_t used = cgroup_value("memory.current");
        uint64_t room = limit > used ? limit - used : 0;
        if (!avail || room < avail) avail = room;
    }
    return avail > SIZE_MAX ? SIZE_MAX : (size_t)avail;
}
