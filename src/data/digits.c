/* cleave data: the 8x8 digits image set (scikit-learn's digits.csv.gz).
 *
 * Why: a small, real, offline image set for the CNN and MLP examples; setup.sh
 * takes it from Debian's python3-sklearn package.
 * Format: one image per line, its pixel values 0..16 then the label 0..9,
 * comma separated; blank lines are skipped. The pixel count is read from the
 * first row (64 in the 8x8 set) and every row must have it: the model's
 * input width is checked against it by the trainer, not assumed here. Numbers are parsed without the C
 * locale's help, so a program's setlocale() cannot change the result.
 * Invariants: on success every image value is in [0, 1] (pixel / 16) and
 * every label in 0..9; on failure nothing is allocated and the message names
 * the file and line. */
#include <stdlib.h>
#include <string.h>

#include "cleave/data.h"
#ifdef CL_HAVE_ZLIB
#include <zlib.h>
#endif


#ifdef CL_HAVE_ZLIB
/* zlib's message, without the "path: " it prefixes */
static const char *gz_message(gzFile g, const char *path, int *errnum)
{
    const char *m = gzerror(g, errnum);
    if (!m || !*m) return "zlib error";
    size_t n = strlen(path);
    if (strncmp(m, path, n) == 0 && m[n] == ':' && m[n + 1] == ' ') m += n + 2;
    return m;
}
#endif

/* Reads the file, decompressing gzip when zlib is built in: at most
 * CL_FILE_DIGITS bytes of text, however few compressed bytes make them (a
 * gzip bomb stops at the bound, as /dev/zero read plainly does). */
static cl_status read_maybe_gz(const char *path, char **out, size_t *len)
{
#ifdef CL_HAVE_ZLIB
    *out = NULL;
    *len = 0;
    gzFile g = gzopen(path, "rb");
    if (!g) {
        /* gzopen failing is an open failure; let cl_read_file word it */
        char *tmp;
        size_t n;
        CL_TRY(cl_read_file(path, CL_FILE_DIGITS, &tmp, &n));
        free(tmp);
        return cl_error(CL_ERR_IO, "cannot open %s with zlib", path);
    }
    size_t max = cl_file_bound(CL_FILE_DIGITS), cap = max + 2 < (1u << 20) ? max + 2 : 1u << 20, n = 0;
    char *buf = malloc(cap);
    if (!buf) { gzclose(g); return cl_error(CL_ERR_OOM, "reading %s: out of host memory", path); }
    for (;;) {
        size_t want = max + 1 - n < 65536 ? max + 1 - n : 65536; /* never past the bound's next byte */
        if (cap - n < want + 1) {
            size_t c = cap > (max + 2) / 2 ? max + 2 : cap * 2;
            char *p = realloc(buf, c);
            if (!p) { free(buf); gzclose(g); return cl_error(CL_ERR_OOM, "reading %s: out of host memory", path); }
            buf = p;
            cap = c;
        }
        int k = gzread(g, buf + n, (unsigned)want);
        if (k < 0) {
            int errnum;
            cl_status st = cl_error(CL_ERR_FORMAT, "cannot decompress %s: %s", path, gz_message(g, path, &errnum));
            free(buf);
            gzclose(g);
            return st;
        }
        if (k == 0) break;
        n += (size_t)k;
        if (n > max) {
            free(buf);
            gzclose(g);
            return cl_file_too_big(path, CL_FILE_DIGITS, 0);
        }
    }
    int errnum = Z_OK;
    const char *msg = gz_message(g, path, &errnum);
    if (errnum != Z_OK) { /* e.g. Z_BUF_ERROR: the compressed stream ends early */
        cl_status st = cl_error(CL_ERR_FORMAT, "cannot decompress %s: %s", path, msg);
        free(buf);
        gzclose(g);
        return st;
    }
    gzclose(g);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return CL_OK;
#else
    CL_TRY(cl_read_file(path, CL_FILE_DIGITS, out, len));
    if (*len >= 2 && (unsigned char)(*out)[0] == 0x1f && (unsigned char)(*out)[1] == 0x8b) {
        free(*out);
        *out = NULL;
        return cl_error(CL_ERR_UNSUPPORTED, "%s is gzip-compressed but this build has no zlib: "
                        "gunzip it, or install zlib1g-dev and rebuild", path);
    }
    return CL_OK;
#endif
}

/* Parses a number "ddd" or "ddd.ddd" with optional surrounding spaces from
 * s[0..n); returns 0 unless the whole field is such a number. */
static int parse_field(const char *s, size_t n, double *v)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    size_t d0 = i;
    double x = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') x = x * 10 + (s[i++] - '0');
    int digits = (int)(i - d0);
    if (i < n && s[i] == '.') {
        i++;
        double scale = 0.1;
        while (i < n && s[i] >= '0' && s[i] <= '9') { x += (s[i++] - '0') * scale; scale /= 10; digits++; }
    }
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
    if (!digits || i != n || i - d0 > 32) return 0;
    *v = x;
    return 1;
}

cl_status cl_digits_load(const char *path, cl_digits *out)
{
    memset(out, 0, sizeof *out);
    if (!path) return cl_error(CL_ERR_INVALID, "digits: no path given");
    char *text;
    size_t len;
    CL_TRY(read_maybe_gz(path, &text, &len));
    size_t rows = 0;
    for (size_t i = 0; i < len; i++) rows += text[i] == '\n';
    rows++;
    /* the pixels per image: the first non-blank row's fields, less the label */
    int fields = 0;
    size_t first_line = 0;
    for (size_t i = 0, line = 1; i < len && !fields; line++) {
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        size_t k = i;
        while (k < e && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r')) k++;
        if (k < e) {
            fields = 1;
            for (size_t j = i; j < e; j++) fields += text[j] == ',';
            first_line = line;
        }
        i = e + 1;
    }
    float *img = NULL;
    int32_t *lab = NULL;
    cl_status st = CL_OK;
    if (fields == 1) {
        st = cl_error(CL_ERR_FORMAT, "%s line %zu: one field: expected pixels and a label, comma-separated", path, first_line);
        goto fail;
    }
    size_t px = fields ? (size_t)fields - 1 : 0;
    /* a row of `fields` numbers takes at least 2 fields - 1 bytes: no more rows than that can be read (and
     * rows x px floats stay within the file's size, however many blank lines or long rows it holds) */
    if (fields && rows > len / (2 * (size_t)fields - 1) + 1) rows = len / (2 * (size_t)fields - 1) + 1;
    img = malloc((px ? rows * px : 1) * sizeof *img);
    lab = malloc(rows * sizeof *lab);
    if (!img || !lab) { st = cl_error(CL_ERR_OOM, "%s: out of host memory", path); goto fail; }
    size_t n = 0, line = 0, i = 0;
    while (i < len) {
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        line++;
        size_t b = i;
        i = e + 1;
        size_t k = b;
        while (k < e && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r')) k++;
        if (k == e) continue; /* blank line */
        int nf = 1;
        for (size_t j = b; j < e; j++) nf += text[j] == ',';
        if (nf != fields) {
            st = cl_error(CL_ERR_FORMAT, "%s line %zu: expected %d comma-separated fields (%zu pixels and a label, as line %zu), found %d",
                          path, line, fields, px, first_line, nf);
            goto fail;
        }
        size_t f0 = b;
        for (int f = 0; f < fields; f++) {
            size_t f1 = f0;
            while (f1 < e && text[f1] != ',') f1++;
            double v;
            if (!parse_field(text + f0, f1 - f0, &v)) {
                st = cl_error(CL_ERR_FORMAT, "%s line %zu: field %d is '%.*s', not a number",
                              path, line, f + 1, (int)(f1 - f0 < 32 ? f1 - f0 : 32), text + f0);
                goto fail;
            }
            if ((size_t)f < px) {
                if (v > 16) {
                    st = cl_error(CL_ERR_FORMAT, "%s line %zu: pixel %d is %g, outside 0..16", path, line, f + 1, v);
                    goto fail;
                }
                img[n * px + (size_t)f] = (float)(v / 16.0);
            } else {
                if (v > 9 || v != (double)(int)v) {
                    st = cl_error(CL_ERR_FORMAT, "%s line %zu: label is %g, not an integer 0..9", path, line, v);
                    goto fail;
                }
                lab[n] = (int32_t)v;
            }
            f0 = f1 + 1;
        }
        n++;
    }
    if (n == 0) { st = cl_error(CL_ERR_FORMAT, "%s: no rows (expected lines of pixels and a label)", path); goto fail; }
    if (n > 0x7fffffff || px > 0x7fffffff) { st = cl_error(CL_ERR_FORMAT, "%s: too many rows or pixels", path); goto fail; }
    free(text);
    out->images = img;
    out->labels = lab;
    out->n = (int)n;
    out->pixels = (int)px;
    return CL_OK;
fail:
    free(text);
    free(img);
    free(lab);
    return st;
}

void cl_digits_free(cl_digits *d)
{
    if (!d) return;
    free(d->images);
    free(d->labels);
    d->images = NULL;
    d->labels = NULL;
    d->n = 0;
    d->pixels = 0;
}
