/* cleave data: read a whole file into memory, or a whole JSON file into a
 * parsed document, never more of it than its kind's bound (core.h,
 * cl_file_kind).
 *
 * Why: tokenizer files, text corpora and configs are read whole; one checked
 * helper gives every caller the same clear messages (the path and the
 * system's reason), and stops a file that never ends (/dev/zero, a pipe) or
 * that is far larger than its kind can be before it fills memory.
 * Invariants: on success *out is malloc'ed, NUL-terminated, and *len is the
 * byte count without that NUL; on failure *out is NULL and nothing leaks.
 * At most bound + 1 bytes are read and at most bound + 2 held, whatever the
 * file is; a regular file whose size is over the bound is refused before any
 * is read. Works for pipes, devices and files whose size changes while being
 * read. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleave/data.h"

static cl_status read_fail(int fd, char *buf, cl_status s) {
    free(buf);
    close(fd);
    return s;
}

cl_status cl_read_file(const char *path, cl_file_kind kind, char **out, size_t *len)
{
    *out = NULL;
    if (len) *len = 0;
    if (!path) return cl_error(CL_ERR_INVALID, "read file: no path given");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cl_error(CL_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    size_t max = cl_file_bound(kind), cap = 65536;
    struct stat sb;
    if (fstat(fd, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) return read_fail(fd, NULL, cl_error(CL_ERR_IO, "cannot read %s: it is a directory", path));
        if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > max) return read_fail(fd, NULL, cl_file_too_big(path, kind, (uint64_t)sb.st_size));
        if (S_ISREG(sb.st_mode)) cap = (size_t)sb.st_size + 2; /* the NUL, and room to see the end */
    }
    if (cap > max + 2) cap = max + 2;
    char *buf = malloc(cap);
    if (!buf) return read_fail(fd, NULL, cl_error(CL_ERR_OOM, "reading %s: no host memory for %zu bytes", path, cap));
    size_t n = 0;
    for (;;) {
        if (n + 1 == cap) { /* full: grow, up to the bound and one byte more */
            size_t c = cap > (max + 2) / 2 ? max + 2 : cap * 2;
            char *p = realloc(buf, c);
            if (!p) return read_fail(fd, buf, cl_error(CL_ERR_OOM, "reading %s: no host memory for %zu bytes", path, c));
            buf = p;
            cap = c;
        }
        ssize_t k = read(fd, buf + n, cap - 1 - n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            int e = errno;
            return read_fail(fd, buf, cl_error(CL_ERR_IO, "error reading %s: %s", path, strerror(e)));
        }
        if (k == 0) break;
        n += (size_t)k;
        if (n > max) return read_fail(fd, buf, cl_file_too_big(path, kind, 0));
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return CL_OK;
}

cl_status cl_json_parse_file_as(cl_json_doc **out, const char *path, cl_file_kind kind)
{
    *out = NULL;
    char *text;
    size_t len;
    CL_TRY(cl_read_file(path, kind, &text, &len));
    cl_status s = cl_json_parse(out, text, len);
    free(text);
    if (s) return cl_error_context(s, "%s: not a JSON file", path);
    return CL_OK;
}

cl_status cl_json_parse_file(cl_json_doc **out, const char *path) { return cl_json_parse_file_as(out, path, CL_FILE_JSON); }
