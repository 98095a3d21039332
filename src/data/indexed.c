/* cleave data: Megatron-LM's indexed datasets (the .bin/.idx pair that its
 * tools/preprocess_data.py writes through IndexedDatasetBuilder), read by
 * memory map and written, and the token spans the trainer reads windows
 * through.
 *
 * Layout of PREFIX.idx, every integer little-endian, nothing aligned:
 *     0  "MMIDIDX\0\0"                  9 bytes
 *     9  u64 version, 1
 *    17  u8  dtype code of the tokens: 1 uint8, 2 int8, 3 int16, 4 int32,
 *            5 int64, 6 float64, 7 float32, 8 uint16
 *    18  u64 sequence count N
 *    26  u64 document index entries D (documents + 1)
 *    34  i32 length[N]    tokens per sequence
 *        i64 pointer[N]   byte offset of each sequence in .bin: 0, then the
 *                         previous plus its length times the dtype's size
 *        i64 docs[D]      0, then after each document the sequence count so
 *                         far (a document without sequences repeats it)
 * PREFIX.bin is the sequences' tokens back to back in that dtype.
 * Invariants: an opened dataset passed every check cl_indexed_open lists (so
 * the trainer may read any token in [0, tokens.count) without bounds
 * checks); the token area is mapped read-only and never copied, and scans
 * over it release the pages they read, so the resident size does not grow
 * with the corpus. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleave/data.h"

#define IDX_MAGIC "MMIDIDX\0\0"
enum { IDX_HEADER = 34 };

static const char *const dtype_names[9] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"};

int cl_idx_dtype_size(int dtype)
{
    switch (dtype) {
    case CL_IDX_UINT8: case CL_IDX_INT8: return 1;
    case CL_IDX_INT16: case CL_IDX_UINT16: return 2;
    case CL_IDX_INT32: return 4;
    case CL_IDX_INT64: return 8;
    default: return 0;
    }
}

int cl_idx_dtype_for_vocab(int vocab) { return vocab < 65500 ? CL_IDX_UINT16 : CL_IDX_INT32; }

static uint64_t rd_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Token i of a span as a signed 64-bit value. */
static int64_t span_at(const cl_token_span *s, size_t i)
{
    const unsigned char *p = s->data;
    switch (s->dtype) {
    case CL_IDX_UINT8: return p[i];
    case CL_IDX_INT8: return (int8_t)p[i];
    case CL_IDX_UINT16: return (int64_t)p[2 * i] | (int64_t)p[2 * i + 1] << 8;
    case CL_IDX_INT16: return (int16_t)(uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    case CL_IDX_INT32: {
        int32_t v;
        memcpy(&v, p + 4 * i, 4); /* little-endian hosts only, as the rest of cleave */
        return v;
    }
    default: {
        int64_t v;
        memcpy(&v, p + 8 * i, 8);
        return v;
    }
    }
}

cl_token_span cl_token_span_int32(const int32_t *tokens, size_t count)
{
    return (cl_token_span){.data = tokens, .count = count, .dtype = CL_IDX_INT32};
}

void cl_token_span_get(const cl_token_span *s, size_t start, size_t n, int32_t *out)
{
    if (s->dtype == CL_IDX_INT32) {
        memcpy(out, (const int32_t *)s->data + start, n * sizeof *out);
    } else if (s->dtype == CL_IDX_UINT16) {
        const unsigned char *p = (const unsigned char *)s->data + 2 * start;
        for (size_t i = 0; i < n; i++) out[i] = (int32_t)(p[2 * i] | p[2 * i + 1] << 8);
    } else {
        for (size_t i = 0; i < n; i++) out[i] = (int32_t)span_at(s, start + i);
    }
}

void cl_token_span_release(const cl_token_span *s, size_t start, size_t n)
{
    if (!s->mapped || n == 0) return;
    size_t w = (size_t)cl_idx_dtype_size(s->dtype), page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)s->data + start * w, b = a + n * w;
    a = (a + page - 1) / page * page; /* whole pages only: a neighbour's may still be wanted */
    b = b / page * page;
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

/* ---- reading ---------------------------------------------------------------- */

int cl_indexed_exists(const char *prefix)
{
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s.idx", prefix);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

void cl_indexed_close(cl_indexed *d)
{
    if (!d) return;
    if (d->idx_map) munmap(d->idx_map, d->idx_size);
    if (d->bin_map) munmap(d->bin_map, d->bin_size);
    memset(d, 0, sizeof *d);
}

/* Maps path read-only (NULL for an empty file). */
static cl_status map_file(const char *path, void **map, size_t *size)
{
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cl_error(CL_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return cl_error(CL_ERR_IO, "%s: not a regular file", path);
    }
    *size = (size_t)st.st_size;
    if (*size) {
        void *m = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return cl_error(CL_ERR_IO, "cannot map %s (%zu bytes): %s", path, *size, strerror(e));
        }
        *map = m;
    }
    close(fd);
    return CL_OK;
}

/* The checks on the index: everything but the tokens' values. */
static cl_status check_index(const char *idx, const char *bin, cl_indexed *d)
{
    const unsigned char *p = d->idx_map;
    size_t size = d->idx_size;
    if (size < IDX_HEADER)
        return cl_error(CL_ERR_FORMAT, "%s: truncated: %zu bytes, shorter than the %d-byte header of a Megatron index", idx, size,
                        IDX_HEADER);
    if (memcmp(p, IDX_MAGIC, 9) != 0)
        return cl_error(CL_ERR_FORMAT, "%s: not a Megatron indexed dataset index (no MMIDIDX header)", idx);
    uint64_t version = rd_u64(p + 9);
    if (version != 1) return cl_error(CL_ERR_FORMAT, "%s: index version %llu, but only version 1 exists", idx, (unsigned long long)version);
    int code = p[17];
    if (code < 1 || code > 8) return cl_error(CL_ERR_FORMAT, "%s: dtype code %d is none of Megatron's (1..8)", idx, code);
    if (!cl_idx_dtype_size(code))
        return cl_error(CL_ERR_FORMAT, "%s: dtype code %d (%s) holds no token ids (an integer type is needed)", idx, code, dtype_names[code]);
    uint64_t n = rd_u64(p + 18), D = rd_u64(p + 26);
    /* sizes in 128 bits of room: counts from a damaged file may be huge */
    unsigned __int128 need = (unsigned __int128)IDX_HEADER + (unsigned __int128)n * 12 + (unsigned __int128)D * 8;
    if (need > size)
        return cl_error(CL_ERR_FORMAT, "%s: truncated: %zu bytes, but %llu sequences and %llu document entries need %llu", idx, size,
                        (unsigned long long)n, (unsigned long long)D,
                        need > (unsigned __int128)UINT64_MAX ? (unsigned long long)UINT64_MAX : (unsigned long long)need);
    if (need < size)
        return cl_error(CL_ERR_FORMAT, "%s: %zu bytes, but %llu sequences and %llu document entries take %llu (%zu bytes too many: "
                        "a multimodal index, or not this pair's)", idx, size, (unsigned long long)n, (unsigned long long)D,
                        (unsigned long long)need, size - (size_t)need);
    if (D == 0) return cl_error(CL_ERR_FORMAT, "%s: the document index is empty (it starts with 0)", idx);
    int w = cl_idx_dtype_size(code);
    const unsigned char *len = p + IDX_HEADER, *ptr = len + 4 * n, *doc = ptr + 8 * n;
    uint64_t at = 0; /* where the next sequence must start in .bin */
    for (uint64_t i = 0; i < n; i++) {
        int32_t l;
        memcpy(&l, len + 4 * i, 4);
        int64_t q;
        memcpy(&q, ptr + 8 * i, 8);
        if (l < 0) return cl_error(CL_ERR_FORMAT, "%s: sequence %llu has length %d", idx, (unsigned long long)i, (int)l);
        if ((uint64_t)q != at)
            return cl_error(CL_ERR_FORMAT, "%s: sequence %llu's pointer is %lld, but the lengths before it put it at %llu", idx,
                            (unsigned long long)i, (long long)q, (unsigned long long)at);
        at += (uint64_t)l * (uint64_t)w;
        if (at > d->bin_size)
            return cl_error(CL_ERR_FORMAT, "%s: %zu bytes, but %s's sequences reach byte %llu by sequence %llu (truncated, or not this pair)",
                            bin, d->bin_size, idx, (unsigned long long)at, (unsigned long long)i);
    }
    if (at != d->bin_size)
        return cl_error(CL_ERR_FORMAT, "%s: %zu bytes, but %s's sequences end at byte %llu (not this pair)", bin, d->bin_size, idx,
                        (unsigned long long)at);
    int64_t prev = 0;
    for (uint64_t i = 0; i < D; i++) {
        int64_t v;
        memcpy(&v, doc + 8 * i, 8);
        if ((i == 0 && v != 0) || v < prev || (uint64_t)v > n)
            return cl_error(CL_ERR_FORMAT, "%s: document index entry %llu is %lld (entries run from 0, never decreasing, to the %llu sequences)",
                            idx, (unsigned long long)i, (long long)v, (unsigned long long)n);
        prev = v;
    }
    if ((uint64_t)prev != n)
        return cl_error(CL_ERR_FORMAT, "%s: the document index ends at sequence %lld, not at the sequence count %llu", idx, (long long)prev,
                        (unsigned long long)n);
    d->sequences = n;
    d->documents = D - 1;
    d->tokens = (cl_token_span){.data = d->bin_map, .count = d->bin_size / (size_t)w, .dtype = code, .mapped = 1};
    return CL_OK;
}

/* The least and greatest token of [b, e). */
static void block_range(const cl_token_span *s, size_t b, size_t e, int64_t *lo, int64_t *hi)
{
    int64_t l = 0, h = 0;
    if (s->dtype == CL_IDX_UINT16) {
        const unsigned char *p = (const unsigned char *)s->data;
        unsigned m = 0;
        for (size_t i = b; i < e; i++) {
            unsigned v = p[2 * i] | (unsigned)p[2 * i + 1] << 8;
            m = v > m ? v : m;
        }
        h = m;
    } else {
        for (size_t i = b; i < e; i++) {
            int64_t v = span_at(s, i);
            l = v < l ? v : l;
            h = v > h ? v : h;
        }
    }
    *lo = l;
    *hi = h;
}

/* Every token in [0, vocab): blocks scanned on the OpenMP threads, each
 * block's pages released after it; the message names the first bad token. */
static cl_status check_vocab(const char *bin, const cl_token_span *s, int vocab)
{
    const size_t block = (size_t)1 << 24;
    size_t nb = (s->count + block - 1) / block, first_bad = nb;
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t k = 0; k < nb; k++) {
        size_t b = k * block, e = b + block < s->count ? b + block : s->count;
        int64_t lo, hi;
        block_range(s, b, e, &lo, &hi);
        cl_token_span_release(s, b, e - b);
        if (lo < 0 || hi >= vocab) {
#pragma omp critical(cl_indexed_bad)
            if (k < first_bad) first_bad = k;
        }
    }
    if (first_bad == nb) return CL_OK;
    size_t b = first_bad * block, e = b + block < s->count ? b + block : s->count;
    for (size_t i = b; i < e; i++) {
        int64_t v = span_at(s, i);
        if (v < 0 || v >= vocab)
            return cl_error(CL_ERR_FORMAT, "%s: token %zu is %lld, outside the model's vocabulary 0..%d", bin, i, (long long)v, vocab - 1);
    }
    return cl_error(CL_ERR_INTERNAL, "%s: a block held a token outside the vocabulary, but none was found again", bin);
}

cl_status cl_indexed_open(const char *prefix, int vocab, cl_indexed *out)
{
    memset(out, 0, sizeof *out);
    size_t pl = strlen(prefix) + 8;
    char *idx = malloc(pl), *bin = malloc(pl);
    if (!idx || !bin) {
        free(idx);
        free(bin);
        return cl_error(CL_ERR_OOM, "out of host memory");
    }
    snprintf(idx, pl, "%s.idx", prefix);
    snprintf(bin, pl, "%s.bin", prefix);
    cl_status s = map_file(idx, &out->idx_map, &out->idx_size);
    if (!s) s = map_file(bin, &out->bin_map, &out->bin_size);
    if (!s) s = check_index(idx, bin, out);
    if (!s && vocab > 0) s = check_vocab(bin, &out->tokens, vocab);
    if (!s && out->bin_map) (void)madvise(out->bin_map, out->bin_size, MADV_RANDOM); /* windows land anywhere */
    if (s) cl_indexed_close(out);
    free(idx);
    free(bin);
    return s;
}

/* ---- writing ---------------------------------------------------------------- */

cl_status cl_idx_pack(int dtype, const int32_t *tokens, size_t n, void *out)
{
    int w = cl_idx_dtype_size(dtype);
    if (!w) return cl_error(CL_ERR_INVALID, "dtype code %d holds no token ids", dtype);
    int64_t lo = dtype == CL_IDX_INT8 ? -128 : dtype == CL_IDX_INT16 ? -32768 : dtype == CL_IDX_UINT8 || dtype == CL_IDX_UINT16 ? 0 : INT32_MIN;
    int64_t hi = dtype == CL_IDX_UINT8 ? 255 : dtype == CL_IDX_INT8 ? 127 : dtype == CL_IDX_INT16 ? 32767 : dtype == CL_IDX_UINT16 ? 65535
                                                                                                                               : INT32_MAX;
    unsigned char *p = out;
    for (size_t i = 0; i < n; i++) {
        int64_t v = tokens[i];
        if (v < lo || v > hi)
            return cl_error(CL_ERR_INVALID, "token %zu is %lld, which %s cannot hold", i, (long long)v, dtype_names[dtype]);
        uint64_t u = (uint64_t)v;
        for (int k = 0; k < w; k++) p[(size_t)w * i + (size_t)k] = (unsigned char)(u >> (8 * k));
    }
    return CL_OK;
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

cl_status cl_idx_write(const char *path, int dtype, const int64_t *doc_tokens, size_t ndocs)
{
    int w = cl_idx_dtype_size(dtype);
    if (!w) return cl_error(CL_ERR_INVALID, "%s: dtype code %d holds no token ids", path, dtype);
    size_t n = 0;
    for (size_t i = 0; i < ndocs; i++) {
        if (doc_tokens[i] < 0 || doc_tokens[i] > INT32_MAX)
            return cl_error(CL_ERR_INVALID, "%s: document %zu has %lld tokens; a sequence holds 0..%d", path, i, (long long)doc_tokens[i],
                            INT32_MAX);
        n += doc_tokens[i] > 0;
    }
    size_t total = IDX_HEADER + n * 12 + (ndocs + 1) * 8;
    unsigned char *img = calloc(1, total);
    if (!img) return cl_error(CL_ERR_OOM, "%s: out of host memory for a %zu-byte index", path, total);
    memcpy(img, IDX_MAGIC, 9);
    put_u64(img + 9, 1);
    img[17] = (unsigned char)dtype;
    put_u64(img + 18, n);
    put_u64(img + 26, ndocs + 1);
    unsigned char *len = img + IDX_HEADER, *ptr = len + 4 * n, *doc = ptr + 8 * n;
    uint64_t at = 0, k = 0;
    put_u64(doc, 0);
    for (size_t i = 0; i < ndocs; i++) {
        if (doc_tokens[i] > 0) {
            uint32_t l = (uint32_t)doc_tokens[i];
            for (int b = 0; b < 4; b++) len[4 * k + (uint64_t)b] = (unsigned char)(l >> (8 * b));
            put_u64(ptr + 8 * k, at);
            at += (uint64_t)l * (uint64_t)w;
            k++;
        }
        put_u64(doc + 8 * (i + 1), k);
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        cl_status st = cl_error(CL_ERR_IO, "cannot create %s: %s", path, strerror(errno));
        free(img);
        return st;
    }
    int ok = fwrite(img, 1, total, f) == total;
    int e = errno;
    free(img);
    if (fflush(f) != 0 || (ok && fsync(fileno(f)) != 0)) { ok = 0; e = errno; }
    if (fclose(f) != 0 && ok) { ok = 0; e = errno; }
    if (!ok) return cl_error(CL_ERR_IO, "cannot write %s: %s", path, e ? strerror(e) : "short write");
    return CL_OK;
}
