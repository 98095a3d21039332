/* cleave safetensors: a validating reader and an atomic writer (see
 * safetensors.h for the format and the rules checked).
 *
 * Why: checkpoints are the one thing a long run cannot afford to lose or to
 * misread. The reader trusts nothing in the file: every length is checked
 * against the bytes present, with overflow checks, before anything is
 * indexed, and every violation names the file, the tensor and the rule. The
 * writer never overwrites a good file with a partial one. A file is read
 * whole only up to its kind's bound (core.h, CL_FILE_TENSORS).
 *
 * Invariants: after a successful parse, for every entry begin <= end <= the
 * buffer length, end - begin == numel * dtype size, and the entries sorted by
 * offset tile [0, buffer length) exactly; names are non-empty, unique, valid
 * UTF-8 without NUL. Entry data may be unaligned (other writers do not pad
 * the header), so callers copy it (cl_st_read_tensor) rather than cast it.
 * Tensor bytes are stored little-endian, as the host's (x86, arm64).
 * Reading converts between F32 and the 16-bit formats (cl_dtype_convert,
 * src/core/format.c), so a BF16 checkpoint reads into F32 parameters. */
#include "cleave/safetensors.h"

#include "cleave/json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The format's reference implementation refuses headers above 100 MB; a
 * larger one is corruption, not a model. */
#define ST_MAX_HEADER (100u * 1000 * 1000)

struct cl_st_file {
    char *name;               /* for messages */
    unsigned char *owned;     /* the file's bytes when cl_st_open read them */
    cl_json_doc *doc;         /* names and metadata point into it */
    int n;
    cl_st_entry *entries;     /* header order */
    int *by_name;             /* indices sorted by name */
    int nmeta;
    const char **meta_keys, **meta_values;
};

/* dtypes the format defines; only those mapping to a cl_dtype are read. */
static const char *const st_known_unsupported[] = {
    "I16", "I8", "BOOL", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64", NULL};
static const cl_dtype st_supported[] = {CL_F32, CL_BF16, CL_F64, CL_I32, CL_I64, CL_U16, CL_U8, CL_F16};
#define ST_NSUPPORTED ((int)(sizeof st_supported / sizeof st_supported[0]))
/* st_supported lists the cl_dtype values in order, so dtype_valid is a range check. */
_Static_assert(CL_F16 == 7 && ST_NSUPPORTED == 8, "st_supported lists every cl_dtype in order");

static int dtype_valid(cl_dtype t) { return (int)t >= 0 && (int)t < ST_NSUPPORTED; }

void cl_st_close(cl_st_file *f) {
    if (!f) return;
    free(f->name);
    free(f->owned);
    cl_json_free(f->doc);
    free(f->entries);
    free(f->by_name);
    free(f->meta_keys);
    free(f->meta_values);
    free(f);
}

/* qsort has no context argument in C11; the comparators read the file being
 * sorted from a thread-local, so parsing on several threads stays safe. */
static _Thread_local const cl_st_file *sort_ctx;
static int cmp_by_name(const void *a, const void *b) {
    return strcmp(sort_ctx->entries[*(const int *)a].name, sort_ctx->entries[*(const int *)b].name);
}
static int cmp_by_offset(const void *a, const void *b) {
    const cl_st_entry *x = &sort_ctx->entries[*(const int *)a], *y = &sort_ctx->entries[*(const int *)b];
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}
static void sort_indices(const cl_st_file *f, int *idx, int n, int (*cmp)(const void *, const void *)) {
    if (n < 2) return;
    sort_ctx = f;
    qsort(idx, (size_t)n, sizeof *idx, cmp);
    sort_ctx = NULL;
}

static void shape_str(char *buf, size_t n, const int64_t *shape, int ndim) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < ndim && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* A JSON number that is a non-negative integer, as u64. */
static int json_u64(const cl_json *v, uint64_t *out) {
    if (!v || v->type != CL_JSON_NUMBER || !v->number_is_int || v->integer < 0) return 0;
    *out = (uint64_t)v->integer;
    return 1;
}

static const char *json_type_name(const cl_json *v) {
    switch (v->type) {
    case CL_JSON_NULL: return "null";
    case CL_JSON_BOOL: return "a boolean";
    case CL_JSON_NUMBER: return "a number";
    case CL_JSON_STRING: return "a string";
    case CL_JSON_ARRAY: return "an array";
    case CL_JSON_OBJECT: return "an object";
    }
    return "?";
}

static cl_status parse_entry(const char *fn, const cl_json *m, cl_st_entry *e, uint64_t buflen) {
    const char *tn = m->key;
    if (m->type != CL_JSON_OBJECT)
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': expected an object with dtype, shape and data_offsets, found %s", fn, tn,
                        json_type_name(m));
    const cl_json *dt = NULL, *sh = NULL, *off = NULL;
    for (const cl_json *k = m->child; k; k = k->next) {
        const cl_json **slot = NULL;
        if (!strcmp(k->key, "dtype")) slot = &dt;
        else if (!strcmp(k->key, "shape")) slot = &sh;
        else if (!strcmp(k->key, "data_offsets")) slot = &off;
        else
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': unexpected field '%s' (only dtype, shape and data_offsets are allowed)",
                            fn, tn, k->key);
        if (*slot) return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': field '%s' appears twice", fn, tn, k->key);
        *slot = k;
    }
    if (!dt || !sh || !off)
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': missing field '%s'", fn, tn, !dt ? "dtype" : !sh ? "shape" : "data_offsets");

    if (dt->type != CL_JSON_STRING) return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': dtype must be a string", fn, tn);
    int found = 0;
    for (int i = 0; i < ST_NSUPPORTED; i++)
        if (!strcmp(dt->string, cl_dtype_name(st_supported[i]))) {
            e->dtype = st_supported[i];
            found = 1;
        }
    if (!found) {
        for (int i = 0; st_known_unsupported[i]; i++)
            if (!strcmp(dt->string, st_known_unsupported[i]))
                return cl_error(CL_ERR_UNSUPPORTED,
                                "%s: tensor '%s': dtype %s is not supported by cleave (it reads F32, BF16, F16, F64, I32, I64, U16, U8)",
                                fn, tn, dt->string);
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", fn, tn, dt->string);
    }

    if (sh->type != CL_JSON_ARRAY) return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': shape must be an array of integers", fn, tn);
    if (sh->count > CL_MAX_DIMS)
        return cl_error(CL_ERR_UNSUPPORTED, "%s: tensor '%s': shape has %d dimensions; cleave supports at most %d", fn, tn, sh->count,
                        CL_MAX_DIMS);
    e->ndim = 0;
    uint64_t numel = 1;
    int overflow = 0;
    for (const cl_json *d = sh->child; d; d = d->next) {
        uint64_t v;
        if (!json_u64(d, &v) || v > (uint64_t)INT64_MAX)
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': shape entry %d is not a non-negative integer", fn, tn, e->ndim);
        e->shape[e->ndim++] = (int64_t)v;
        if (v && numel > UINT64_MAX / v) overflow = 1;
        numel *= v;
    }
    /* A zero dimension makes the product 0 whatever overflowed before it. */
    for (int i = 0; i < e->ndim; i++)
        if (e->shape[i] == 0) overflow = 0, numel = 0;
    uint64_t esz = cl_dtype_size(e->dtype);
    if (!overflow && numel > UINT64_MAX / esz) overflow = 1;
    char shs[128];
    shape_str(shs, sizeof shs, e->shape, e->ndim);
    if (overflow)
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': shape %s of %s is too large (its byte size overflows 64 bits)", fn, tn, shs,
                        dt->string);

    if (off->type != CL_JSON_ARRAY || off->count != 2 || !json_u64(off->child, &e->begin) || !json_u64(off->child->next, &e->end))
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': data_offsets must be two non-negative integers [begin, end]", fn, tn);
    if (e->begin > e->end)
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", fn, tn,
                        (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > buflen)
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the %llu-byte data buffer", fn,
                        tn, (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)buflen);
    if (e->end - e->begin != numel * esz)
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape %s of %s needs %llu", fn, tn,
                        (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)(e->end - e->begin), shs,
                        dt->string, (unsigned long long)(numel * esz));
    return CL_OK;
}

static cl_status parse_metadata(cl_st_file *f, const cl_json *m) {
    const char *fn = f->name;
    if (m->type != CL_JSON_OBJECT)
        return cl_error(CL_ERR_FORMAT, "%s: __metadata__ must be an object of strings, found %s", fn, json_type_name(m));
    f->nmeta = m->count;
    f->meta_keys = calloc((size_t)m->count + 1, sizeof *f->meta_keys);
    f->meta_values = calloc((size_t)m->count + 1, sizeof *f->meta_values);
    if (!f->meta_keys || !f->meta_values) return cl_error(CL_ERR_OOM, "%s: cannot allocate the metadata index", fn);
    int i = 0;
    for (const cl_json *k = m->child; k; k = k->next, i++) {
        if (k->type != CL_JSON_STRING)
            return cl_error(CL_ERR_FORMAT, "%s: __metadata__ '%s' must be a string, found %s", fn, k->key, json_type_name(k));
        for (int j = 0; j < i; j++)
            if (!strcmp(f->meta_keys[j], k->key)) return cl_error(CL_ERR_FORMAT, "%s: __metadata__ key '%s' appears twice", fn, k->key);
        f->meta_keys[i] = k->key;
        f->meta_values[i] = k->string;
    }
    return CL_OK;
}

static cl_status st_parse(cl_st_file *f, const unsigned char *buf, size_t len) {
    const char *fn = f->name;
    if (len < 8)
        return cl_error(CL_ERR_FORMAT, "%s: file is %zu bytes, shorter than the 8-byte header length that starts a safetensors file", fn,
                        len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    if (hlen > len - 8)
        return cl_error(CL_ERR_FORMAT, "%s: header length %llu exceeds the %zu bytes that follow it (truncated or not a safetensors file)",
                        fn, (unsigned long long)hlen, len - 8);
    if (hlen > ST_MAX_HEADER)
        return cl_error(CL_ERR_FORMAT, "%s: header length %llu is over the format's limit of %u bytes", fn, (unsigned long long)hlen,
                        ST_MAX_HEADER);
    if (hlen < 2 || buf[8] != '{')
        return cl_error(CL_ERR_FORMAT, "%s: the header must be a JSON object starting with '{' right after the 8-byte length", fn);
    cl_status s = cl_json_parse(&f->doc, (const char *)buf + 8, (size_t)hlen);
    if (s) return cl_error_context(s, "%s: header", fn);
    const cl_json *root = cl_json_root(f->doc);
    if (root->type != CL_JSON_OBJECT) return cl_error(CL_ERR_FORMAT, "%s: the header must be a JSON object", fn);

    const unsigned char *data = buf + 8 + hlen;
    uint64_t buflen = len - 8 - hlen;
    int ntensors = 0, seen_meta = 0;
    for (const cl_json *m = root->child; m; m = m->next) {
        if (!strcmp(m->key, "__metadata__")) {
            if (seen_meta) return cl_error(CL_ERR_FORMAT, "%s: __metadata__ appears twice", fn);
            seen_meta = 1;
            CL_TRY(parse_metadata(f, m));
        } else ntensors++;
    }
    f->entries = calloc((size_t)ntensors + 1, sizeof *f->entries);
    f->by_name = calloc((size_t)ntensors + 1, sizeof *f->by_name);
    if (!f->entries || !f->by_name) return cl_error(CL_ERR_OOM, "%s: cannot allocate the index of %d tensors", fn, ntensors);
    int i = 0;
    for (const cl_json *m = root->child; m; m = m->next) {
        if (!strcmp(m->key, "__metadata__")) continue;
        if (!m->key_len) return cl_error(CL_ERR_FORMAT, "%s: a tensor has an empty name", fn);
        cl_st_entry *e = &f->entries[i];
        e->name = m->key;
        CL_TRY(parse_entry(fn, m, e, buflen));
        e->data = data + e->begin;
        f->by_name[i] = i;
        i++;
    }
    f->n = ntensors;

    sort_indices(f, f->by_name, ntensors, cmp_by_name);
    for (i = 1; i < ntensors; i++)
        if (!strcmp(f->entries[f->by_name[i]].name, f->entries[f->by_name[i - 1]].name))
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", fn, f->entries[f->by_name[i]].name);

    int *ord = malloc(((size_t)ntensors + 1) * sizeof *ord);
    if (!ord) return cl_error(CL_ERR_OOM, "%s: cannot allocate the index of %d tensors", fn, ntensors);
    for (i = 0; i < ntensors; i++) ord[i] = i;
    sort_indices(f, ord, ntensors, cmp_by_offset);
    uint64_t at = 0;
    const char *prev = NULL;
    s = CL_OK;
    for (i = 0; i < ntensors && !s; i++) {
        const cl_st_entry *e = &f->entries[ord[i]];
        if (e->begin > at)
            s = cl_error(CL_ERR_FORMAT, "%s: tensor '%s': data_offsets begin at %llu but %s ends at %llu: a gap of %llu bytes", fn, e->name,
                         (unsigned long long)e->begin, prev ? prev : "nothing", (unsigned long long)at,
                         (unsigned long long)(e->begin - at));
        else if (e->begin < at)
            s = cl_error(CL_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s', which ends at %llu", fn, e->name,
                         (unsigned long long)e->begin, (unsigned long long)e->end, prev, (unsigned long long)at);
        at = e->end;
        prev = e->name;
    }
    free(ord);
    if (s) return s;
    if (at != buflen)
        return cl_error(CL_ERR_FORMAT, "%s: the data buffer has %llu bytes but the tensors cover only %llu (%llu trailing bytes)", fn,
                        (unsigned long long)buflen, (unsigned long long)at, (unsigned long long)(buflen - at));
    return CL_OK;
}

static cl_status st_new(cl_st_file **out, const char *name) {
    *out = NULL;
    cl_st_file *f = calloc(1, sizeof *f);
    if (!f) return cl_error(CL_ERR_OOM, "%s: cannot allocate a safetensors handle", name);
    f->name = strdup(name);
    if (!f->name) {
        free(f);
        return cl_error(CL_ERR_OOM, "%s: cannot allocate a safetensors handle", name);
    }
    *out = f;
    return CL_OK;
}

cl_status cl_st_parse(cl_st_file **out, const void *buf, size_t len, const char *name_for_errors) {
    if (!out) return cl_error(CL_ERR_INVALID, "cl_st_parse: out is NULL");
    *out = NULL;
    const char *name = name_for_errors ? name_for_errors : "safetensors";
    if (!buf && len) return cl_error(CL_ERR_INVALID, "%s: NULL buffer of %zu bytes", name, len);
    cl_st_file *f;
    CL_TRY(st_new(&f, name));
    cl_status s = st_parse(f, buf, len);
    if (s) {
        cl_st_close(f);
        return s;
    }
    *out = f;
    return CL_OK;
}

cl_status cl_st_open(cl_st_file **out, const char *path) {
    if (!out) return cl_error(CL_ERR_INVALID, "cl_st_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return cl_error(CL_ERR_INVALID, "cl_st_open: no path given");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cl_error(CL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return cl_error(CL_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cl_error(CL_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > cl_file_bound(CL_FILE_TENSORS)) {
        close(fd);
        return cl_file_too_big(path, CL_FILE_TENSORS, (uint64_t)st.st_size);
    }
    size_t size = (size_t)st.st_size;
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        char b[32];
        return cl_error(CL_ERR_OOM, "%s: cannot allocate %s to read the file", path, cl_format_bytes(size, b, sizeof b));
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return cl_error(CL_ERR_IO, "%s: read failed after %zu of %zu bytes: %s", path, got, size, strerror(e));
        }
        if (r == 0) {
            free(buf);
            close(fd);
            return cl_error(CL_ERR_IO, "%s: file shrank while reading (%zu of %zu bytes read)", path, got, size);
        }
        got += (size_t)r;
    }
    close(fd);
    cl_st_file *f;
    cl_status s = st_new(&f, path);
    if (s) {
        free(buf);
        return s;
    }
    f->owned = buf;
    s = st_parse(f, buf, size);
    if (s) {
        cl_st_close(f);
        return s;
    }
    *out = f;
    return CL_OK;
}

int cl_st_count(const cl_st_file *f) { return f ? f->n : 0; }

const cl_st_entry *cl_st_get(const cl_st_file *f, int i) {
    if (!f || i < 0 || i >= f->n) return NULL;
    return &f->entries[i];
}

const cl_st_entry *cl_st_find(const cl_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const cl_st_entry *e = &f->entries[f->by_name[mid]];
        int c = strcmp(name, e->name);
        if (!c) return e;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *cl_st_metadata(const cl_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta_keys[i], key)) return f->meta_values[i];
    return NULL;
}

/* 1 when a tensor stored as sf is read into a destination of format df by
 * conversion: F32 and a 16-bit format (BF16, F16), either way. */
static int st_converts(cl_dtype df, cl_dtype sf) {
    int h_d = df == CL_BF16 || df == CL_F16, h_s = sf == CL_BF16 || sf == CL_F16;
    return (df == CL_F32 && h_s) || (sf == CL_F32 && h_d);
}

cl_status cl_st_check_tensor(const cl_st_file *f, const char *name, cl_dtype dtype, int ndim, const int64_t *shape) {
    if (!f || !name) return cl_error(CL_ERR_INVALID, "cl_st_check_tensor: NULL file or name");
    if (ndim < 0 || ndim > CL_MAX_DIMS || (ndim && !shape))
        return cl_error(CL_ERR_INVALID, "%s: tensor '%s': asked for %d dimensions%s", f->name, name, ndim,
                        ndim && !shape ? " with no shape" : "");
    const cl_st_entry *e = cl_st_find(f, name);
    if (!e) return cl_error(CL_ERR_FORMAT, "%s: no tensor '%s' (the file holds %d tensors)", f->name, name, f->n);
    if (e->dtype != dtype && !st_converts(dtype, e->dtype))
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' is %s, expected %s", f->name, name, cl_dtype_name(e->dtype), cl_dtype_name(dtype));
    int same = ndim == e->ndim;
    for (int i = 0; same && i < ndim; i++) same = shape[i] == e->shape[i];
    if (!same) {
        char want[128], have[128];
        shape_str(want, sizeof want, shape, ndim);
        shape_str(have, sizeof have, e->shape, e->ndim);
        return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", f->name, name, have, want);
    }
    return CL_OK;
}

cl_status cl_st_read_tensor(const cl_st_file *f, const char *name, cl_dtype dtype, int ndim, const int64_t *shape, void *dst) {
    CL_TRY(cl_st_check_tensor(f, name, dtype, ndim, shape));
    const cl_st_entry *e = cl_st_find(f, name);
    size_t bytes = (size_t)(e->end - e->begin);
    if (bytes && !dst) return cl_error(CL_ERR_INVALID, "%s: tensor '%s': NULL destination for %zu bytes", f->name, name, bytes);
    if (!bytes) return CL_OK;
    if (e->dtype == dtype) {
        memcpy(dst, e->data, bytes);
        return CL_OK;
    }
    /* the entry's data may be unaligned: convert through an aligned block */
    size_t n = bytes / cl_dtype_size(e->dtype), es = cl_dtype_size(e->dtype), ed = cl_dtype_size(dtype);
    enum { BLK = 1024 };
    union { float f[BLK]; uint16_t h[2 * BLK]; } tmp;
    for (size_t i = 0; i < n; i += BLK) {
        size_t m = n - i < BLK ? n - i : BLK;
        memcpy(&tmp, (const char *)e->data + i * es, m * es);
        CL_TRY(cl_dtype_convert((char *)dst + i * ed, dtype, &tmp, e->dtype, m));
    }
    return CL_OK;
}

/* ---- writing ---- */

static cl_status check_items(const char *path, const cl_st_item *items, int n, const cl_st_meta *meta, int nmeta) {
    if (n < 0 || nmeta < 0 || (n && !items) || (nmeta && !meta))
        return cl_error(CL_ERR_INVALID, "%s: bad tensor list (n=%d, nmeta=%d)", path, n, nmeta);
    for (int i = 0; i < n; i++) {
        const cl_st_item *it = &items[i];
        const char *nm = it->name;
        if (!nm || !*nm) return cl_error(CL_ERR_INVALID, "%s: tensor %d has no name", path, i);
        if (!cl_json_utf8_valid(nm, strlen(nm))) return cl_error(CL_ERR_INVALID, "%s: tensor %d: name is not valid UTF-8", path, i);
        if (!strcmp(nm, "__metadata__")) return cl_error(CL_ERR_INVALID, "%s: '__metadata__' cannot name a tensor", path);
        if (!dtype_valid(it->t.dtype)) return cl_error(CL_ERR_INVALID, "%s: tensor '%s': invalid dtype %d", path, nm, (int)it->t.dtype);
        if (it->t.ndim < 0 || it->t.ndim > CL_MAX_DIMS)
            return cl_error(CL_ERR_INVALID, "%s: tensor '%s': %d dimensions (0 to %d allowed)", path, nm, it->t.ndim, CL_MAX_DIMS);
        uint64_t numel = 1;
        for (int d = 0; d < it->t.ndim; d++) {
            if (it->t.shape[d] < 0) return cl_error(CL_ERR_INVALID, "%s: tensor '%s': negative dimension", path, nm);
            uint64_t v = (uint64_t)it->t.shape[d];
            if (v && numel > (uint64_t)INT64_MAX / v) return cl_error(CL_ERR_INVALID, "%s: tensor '%s': shape too large", path, nm);
            numel *= v;
        }
        if (numel > (uint64_t)INT64_MAX / 8) return cl_error(CL_ERR_INVALID, "%s: tensor '%s': shape too large", path, nm);
        if (numel && !it->t.data) return cl_error(CL_ERR_INVALID, "%s: tensor '%s': NULL data", path, nm);
        for (int j = 0; j < i; j++)
            if (!strcmp(items[j].name, nm)) return cl_error(CL_ERR_INVALID, "%s: tensor '%s' given twice", path, nm);
    }
    for (int i = 0; i < nmeta; i++) {
        const char *k = meta[i].key, *v = meta[i].value;
        if (!k || !v) return cl_error(CL_ERR_INVALID, "%s: metadata pair %d has a NULL key or value", path, i);
        if (!cl_json_utf8_valid(k, strlen(k)) || !cl_json_utf8_valid(v, strlen(v)))
            return cl_error(CL_ERR_INVALID, "%s: metadata '%s' is not valid UTF-8", path, k);
        for (int j = 0; j < i; j++)
            if (!strcmp(meta[j].key, k)) return cl_error(CL_ERR_INVALID, "%s: metadata key '%s' given twice", path, k);
    }
    return CL_OK;
}

static cl_status build_header(const char *path, const cl_st_item *items, int n, const cl_st_meta *meta, int nmeta, cl_strbuf *b) {
    cl_sb_printf(b, "{");
    if (nmeta > 0) {
        cl_sb_printf(b, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) cl_sb_printf(b, ",");
            cl_sb_json_string(b, meta[i].key, strlen(meta[i].key));
            cl_sb_printf(b, ":");
            cl_sb_json_string(b, meta[i].value, strlen(meta[i].value));
        }
        cl_sb_printf(b, "}");
    }
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        const cl_tensor *t = &items[i].t;
        if (i || nmeta > 0) cl_sb_printf(b, ",");
        cl_sb_json_string(b, items[i].name, strlen(items[i].name));
        cl_sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", cl_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) cl_sb_printf(b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        uint64_t bytes = (uint64_t)cl_tensor_bytes(t);
        cl_sb_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at, (unsigned long long)(at + bytes));
        at += bytes;
    }
    cl_sb_printf(b, "}");
    while (!b->failed && (8 + b->len) % 8) cl_sb_printf(b, " ");
    if (b->failed) return cl_error(CL_ERR_OOM, "%s: cannot allocate the header", path);
    return CL_OK;
}

static int write_all(FILE *fp, const void *p, size_t n) {
    const unsigned char *c = p;
    while (n) {
        size_t chunk = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
        if (fwrite(c, 1, chunk, fp) != chunk) return 0;
        c += chunk;
        n -= chunk;
    }
    return 1;
}

/* fsync of the directory holding path, so the rename itself is durable.
 * Some file systems refuse fsync on directories (EINVAL); that is not an error. */
static int sync_dir(const char *path) {
    char *dir = strdup(path);
    if (!dir) return ENOMEM;
    char *slash = strrchr(dir, '/');
    const char *d = dir;
    if (!slash) d = ".";
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int err = 0;
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) err = errno;
    else {
        if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS) err = errno;
        close(fd);
    }
    free(dir);
    return err;
}

cl_status cl_st_write(const char *path, const cl_st_item *items, int n, const cl_st_meta *meta, int nmeta) {
    if (!path || !*path) return cl_error(CL_ERR_INVALID, "cl_st_write: no path given");
    CL_TRY(check_items(path, items, n, meta, nmeta));
    cl_strbuf hb = {0};
    cl_status s = build_header(path, items, n, meta, nmeta, &hb);
    if (s) {
        cl_sb_free(&hb);
        return s;
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) {
        cl_sb_free(&hb);
        return cl_error(CL_ERR_OOM, "%s: cannot allocate a path", path);
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);

    /* A leftover FILE.tmp from an interrupted save is simply replaced. */
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        s = cl_error(CL_ERR_IO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        cl_sb_free(&hb);
        free(tmp);
        return s;
    }
    unsigned char lenb[8];
    uint64_t hl = hb.len;
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)(hl >> (8 * i));
    errno = 0;
    int ok = write_all(fp, lenb, 8) && write_all(fp, hb.buf, hb.len);
    for (int i = 0; ok && i < n; i++) ok = write_all(fp, items[i].t.data, cl_tensor_bytes(&items[i].t));
    int err = ok ? 0 : errno ? errno : EIO;
    if (!err && fflush(fp) != 0) err = errno;
    if (!err && fsync(fileno(fp)) != 0) err = errno;
    if (fclose(fp) != 0 && !err) err = errno;
    if (err) {
        s = cl_error(CL_ERR_IO, "%s: writing %s failed: %s (the previous file, if any, is untouched)", path, tmp, strerror(err));
        unlink(tmp);
    } else if (rename(tmp, path) != 0) {
        s = cl_error(CL_ERR_IO, "%s: cannot rename %s onto it: %s (the previous file, if any, is untouched)", path, tmp,
                     strerror(errno));
        unlink(tmp);
    } else if ((err = sync_dir(path)) != 0) {
        s = cl_error(CL_ERR_IO, "%s: written, but syncing its directory failed: %s", path, strerror(err));
    }
    cl_sb_free(&hb);
    free(tmp);
    return s;
}
