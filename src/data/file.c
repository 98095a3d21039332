/* cleave data: read a whole file into memory, or a whole JSON file into a
 * parsed document.
 *
 * Why: tokenizer files, text corpora and configs are read whole; one checked
 * helper gives every caller the same clear messages (the path and the
 * system's reason).
 * Invariants: on success *out is malloc'ed, NUL-terminated, and *len is the
 * byte count without that NUL; on failure *out is NULL and nothing leaks.
 * Works for pipes and files whose size changes while being read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cleave/data.h"

cl_status cl_read_file(const char *path, char **out, size_t *len)
{
    *out = NULL;
    if (len) *len = 0;
    if (!path) return cl_error(CL_ERR_INVALID, "read file: no path given");
    FILE *f = fopen(path, "rb");
    if (!f) return cl_error(CL_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    size_t cap = 4096;
    if (fstat(fileno(f), &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            fclose(f);
            return cl_error(CL_ERR_IO, "cannot read %s: it is a directory", path);
        }
        if (S_ISREG(sb.st_mode) && sb.st_size > 0) cap = (size_t)sb.st_size + 1;
    }
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return cl_error(CL_ERR_OOM, "reading %s: no host memory for %zu bytes", path, cap);
    }
    size_t n = 0;
    for (;;) {
        if (n + 1 >= cap) {
            int ch = fgetc(f); /* full: grow only if the file goes on */
            if (ch == EOF) break;
            size_t c = cap * 2;
            char *p = realloc(buf, c);
            if (!p) {
                free(buf);
                fclose(f);
                return cl_error(CL_ERR_OOM, "reading %s: no host memory for %zu bytes", path, c);
            }
            buf = p;
            cap = c;
            buf[n++] = (char)ch;
        }
        size_t want = cap - 1 - n;
        size_t k = fread(buf + n, 1, want, f);
        n += k;
        if (k < want) break;
    }
    if (ferror(f)) {
        int e = errno;
        free(buf);
        fclose(f);
        return cl_error(CL_ERR_IO, "error reading %s: %s", path, strerror(e));
    }
    fclose(f);
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return CL_OK;
}

cl_status cl_json_parse_file(cl_json_doc **out, const char *path)
{
    *out = NULL;
    char *text;
    size_t len;
    CL_TRY(cl_read_file(path, &text, &len));
    cl_status s = cl_json_parse(out, text, len);
    free(text);
    if (s) return cl_error_context(s, "%s: not a JSON file", path);
    return CL_OK;
}
