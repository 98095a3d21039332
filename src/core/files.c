/* Output files, host memory and the size bounds of files read whole (see core.h).
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
#include <sys/resource.h>
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

size_t cl_host_memory_total(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t m = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0, lim = cgroup_value("memory.max");
    if (lim && (!m || lim < m)) m = lim;
    const int res[2] = {RLIMIT_AS, RLIMIT_DATA};
    for (int i = 0; i < 2; i++) {
        struct rlimit rl;
        if (getrlimit(res[i], &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (!m || (uint64_t)rl.rlim_cur < m)) m = rl.rlim_cur;
    }
    if (!m) m = (uint64_t)4 << 30; /* nothing says: assume a small machine */
    return m > SIZE_MAX ? SIZE_MAX : (size_t)m;
}

/* Per kind: a fixed bound in bytes, or (mem_div) a share of
 * cl_host_memory_total, the smaller of the two when both are given; what it
 * is, and why the bound fits it ("MEM" in it stands for that memory). */
static const struct {
    uint64_t fixed;
    int mem_div;
    const char *what, *why;
} kinds[CL_FILE_NKINDS] = {
    [CL_FILE_JSON] = {4u << 20, 0, "a JSON description or config", "cleave's hardware descriptions and configs are a few KiB"},
    [CL_FILE_INDEX] = {256u << 20, 0, "a sharded checkpoint's index",
                       "it lists at most 27 boxes of some 60 bytes per tensor and tensor-parallel rank and per rank: "
                       "a 1T-parameter model saved by 8192 ranks at tp 32 needs under 100 MiB"},
    [CL_FILE_TOKENIZER] = {64u << 20, 0, "a tokenizer file", "GPT-2's are 1 MiB; a million-token vocabulary is some 30 MiB"},
    [CL_FILE_TRACE] = {256u << 20, 0, "a trace", "over a million events"},
    [CL_FILE_LOG] = {256u << 20, 0, "a training log", "over a million logged steps"},
    [CL_FILE_DIGITS] = {256u << 20, 8, "a digits CSV", "some 2 million 8x8 images, and at most an eighth of the MEM this process may use"},
    [CL_FILE_TEXT] = {0, 8, "a text corpus",
                      "an eighth of the MEM this process may use: the text, its tokens and the token cache are held together"},
    [CL_FILE_TOKENS] = {0, 4, "a token cache", "a quarter of the MEM this process may use: two bytes a token of a text within its bound"},
    [CL_FILE_TENSORS] = {0, 2, "a checkpoint's tensors file", "half the MEM this process may use: it is read whole beside the model"},
};

size_t cl_file_bound(cl_file_kind k) {
    if ((unsigned)k >= CL_FILE_NKINDS) k = CL_FILE_JSON;
    uint64_t b = kinds[k].fixed;
    if (kinds[k].mem_div) {
        uint64_t m = cl_host_memory_total() / (uint64_t)kinds[k].mem_div;
        if (!b || m < b) b = m;
    }
    if (k == CL_FILE_TOKENS) b += 120; /* the CLTOK2 header */
    return b > SIZE_MAX - 2 ? SIZE_MAX - 2 : (size_t)b;
}

cl_status cl_file_too_big(const char *path, cl_file_kind k, uint64_t size) {
    if ((unsigned)k >= CL_FILE_NKINDS) k = CL_FILE_JSON;
    char b[32], h[48] = "", mem[32];
    size_t bound = cl_file_bound(k);
    if (size) snprintf(h, sizeof h, " %" PRIu64 " bytes,", size);
    cl_format_bytes(bound, b, sizeof b);
    cl_format_bytes(cl_host_memory_total(), mem, sizeof mem);
    const char *why = kinds[k].why, *at = strstr(why, "MEM");
    int pre = at ? (int)(at - why) : (int)strlen(why);
    return cl_error(CL_ERR_FORMAT, "%s holds%s more than %s (%zu bytes), the most cleave reads of %s (%.*s%s%s)", path, h, b, bound,
                    kinds[k].what, pre, why, at ? mem : "", at ? at + 3 : "");
}
