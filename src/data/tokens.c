/* cleave data: token files, a text tokenized once so training need not.
 *
 * Layout (all little-endian): "CLTOK1\0\0"; u32 vocab size; u32 bytes per
 * token (2 when vocab <= 65536, else 4); u64 token count; 64-byte tokenizer
 * name, NUL padded; then the tokens.
 * Invariants: a file is written to "<path>.tmp.<pid>" and renamed into place,
 * so readers see either the old file or the whole new one; a file is only
 * accepted when its length is exactly header + count * bytes per token and
 * every token is below the vocab size. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleave/data.h"

#define TOK_MAGIC "CLTOK1\0\0"
enum { TOK_HEADER = 8 + 4 + 4 + 8 + 64, TOK_CHUNK = 1 << 16 };

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

cl_status cl_tokens_write(const char *path, const int32_t *tokens, size_t count,
                          int vocab, const char *tokenizer_name)
{
    if (!path) return cl_error(CL_ERR_INVALID, "token file: no path given");
    if (vocab <= 0) return cl_error(CL_ERR_INVALID, "token file %s: vocab size %d must be positive", path, vocab);
    if (count > 0 && !tokens) return cl_error(CL_ERR_INVALID, "token file %s: %zu tokens but no array", path, count);
    const char *name = tokenizer_name ? tokenizer_name : "";
    size_t name_len = strlen(name);
    if (name_len >= 64)
        return cl_error(CL_ERR_INVALID, "token file %s: tokenizer name '%.20s...' is %zu bytes, at most 63 fit",
                        path, name, name_len);
    for (size_t i = 0; i < count; i++)
        if (tokens[i] < 0 || tokens[i] >= vocab)
            return cl_error(CL_ERR_INVALID, "token file %s: token %zu is %d, outside the vocabulary 0..%d",
                            path, i, (int)tokens[i], vocab - 1);
    uint32_t bpt = vocab <= 65536 ? 2 : 4;

    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) return cl_error(CL_ERR_OOM, "token file %s: out of host memory", path);
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        cl_status st = cl_error(CL_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    unsigned char head[TOK_HEADER] = {0};
    memcpy(head, TOK_MAGIC, 8);
    put_u32(head + 8, (uint32_t)vocab);
    put_u32(head + 12, bpt);
    put_u64(head + 16, (uint64_t)count);
    memcpy(head + 24, name, name_len);
    int ok = fwrite(head, 1, TOK_HEADER, f) == TOK_HEADER;
    unsigned char *buf = malloc((size_t)TOK_CHUNK * bpt);
    if (!buf) ok = 0;
    for (size_t i = 0; ok && i < count; i += TOK_CHUNK) {
        size_t k = count - i < TOK_CHUNK ? count - i : TOK_CHUNK;
        for (size_t j = 0; j < k; j++) {
            uint32_t v = (uint32_t)tokens[i + j];
            if (bpt == 2) { buf[2 * j] = (unsigned char)v; buf[2 * j + 1] = (unsigned char)(v >> 8); }
            else put_u32(buf + 4 * j, v);
        }
        ok = fwrite(buf, bpt, k, f) == k;
    }
    int e = errno;
    free(buf);
    if (fflush(f) != 0) { ok = 0; e = errno; }
    if (ok && fsync(fileno(f)) != 0) { ok = 0; e = errno; }
    if (fclose(f) != 0 && ok) { ok = 0; e = errno; }
    if (!ok || rename(tmp, path) != 0) {
        if (ok) e = errno;
        remove(tmp);
        cl_status st = cl_error(CL_ERR_IO, "cannot write token file %s: %s", path, e ? strerror(e) : "out of host memory");
        free(tmp);
        return st;
    }
    free(tmp);
    return CL_OK;
}

void cl_tokens_free(cl_tokens *t)
{
    if (!t) return;
    free(t->tokens);
    t->tokens = NULL;
    t->count = 0;
}

cl_status cl_tokens_read(const char *path, cl_tokens *out)
{
    memset(out, 0, sizeof *out);
    if (!path) return cl_error(CL_ERR_INVALID, "token file: no path given");
    FILE *f = fopen(path, "rb");
    if (!f) return cl_error(CL_ERR_IO, "cannot open token file %s: %s", path, strerror(errno));
    cl_status st = CL_OK;
    unsigned char head[TOK_HEADER];
    unsigned char *buf = NULL;
    int32_t *toks = NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) { st = cl_error(CL_ERR_IO, "cannot stat token file %s: %s", path, strerror(errno)); goto done; }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8 || fread(head, 1, 8, f) != 8 || memcmp(head, TOK_MAGIC, 8) != 0) {
        st = cl_error(CL_ERR_FORMAT, "%s is not a cleave token file (no CLTOK1 header)", path);
        goto done;
    }
    if (size < TOK_HEADER || fread(head + 8, 1, TOK_HEADER - 8, f) != TOK_HEADER - 8) {
        st = cl_error(CL_ERR_FORMAT, "token file %s is truncated: %llu bytes, the header alone is %d",
                      path, (unsigned long long)size, TOK_HEADER);
        goto done;
    }
    uint32_t vocab = get_u32(head + 8), bpt = get_u32(head + 12);
    uint64_t count = get_u64(head + 16);
    if (vocab == 0 || vocab > INT32_MAX) {
        st = cl_error(CL_ERR_FORMAT, "token file %s: vocab size %u is invalid", path, (unsigned)vocab);
        goto done;
    }
    if (bpt != 2 && bpt != 4) {
        st = cl_error(CL_ERR_FORMAT, "token file %s: %u bytes per token (must be 2 or 4)", path, (unsigned)bpt);
        goto done;
    }
    if (bpt == 2 && vocab > 65536) {
        st = cl_error(CL_ERR_FORMAT, "token file %s: vocab %u does not fit 2-byte tokens", path, (unsigned)vocab);
        goto done;
    }
    if (memchr(head + 24, '\0', 64) == NULL) {
        st = cl_error(CL_ERR_FORMAT, "token file %s: tokenizer name is not NUL-terminated", path);
        goto done;
    }
    uint64_t body = size - TOK_HEADER;
    if (count > body / bpt || body != count * bpt) {
        st = cl_error(CL_ERR_FORMAT, "token file %s: header says %llu tokens (%llu bytes) but %llu bytes follow the header%s",
                      path, (unsigned long long)count, (unsigned long long)count * bpt, (unsigned long long)body,
                      body < count * bpt ? " (truncated?)" : "");
        goto done;
    }
    if (count > SIZE_MAX / sizeof(int32_t) - 1) { st = cl_error(CL_ERR_OOM, "token file %s: too many tokens", path); goto done; }
    toks = malloc((size_t)(count ? count : 1) * sizeof *toks);
    buf = malloc((size_t)TOK_CHUNK * bpt);
    if (!toks || !buf) {
        st = cl_error(CL_ERR_OOM, "token file %s: no host memory for %llu tokens", path, (unsigned long long)count);
        goto done;
    }
    for (uint64_t i = 0; i < count; i += TOK_CHUNK) {
        size_t k = (size_t)(count - i < TOK_CHUNK ? count - i : TOK_CHUNK);
        if (fread(buf, bpt, k, f) != k) {
            st = cl_error(CL_ERR_IO, "error reading token file %s at token %llu: %s", path, (unsigned long long)i,
                          ferror(f) ? strerror(errno) : "unexpected end of file");
            goto done;
        }
        for (size_t j = 0; j < k; j++) {
            uint32_t v = bpt == 2 ? (uint32_t)buf[2 * j] | (uint32_t)buf[2 * j + 1] << 8 : get_u32(buf + 4 * j);
            if (v >= vocab) {
                st = cl_error(CL_ERR_FORMAT, "token file %s: token %llu is %u, outside the vocabulary 0..%u",
                              path, (unsigned long long)(i + j), (unsigned)v, (unsigned)vocab - 1);
                goto done;
            }
            toks[i + j] = (int32_t)v;
        }
    }
    out->tokens = toks;
    toks = NULL;
    out->count = (size_t)count;
    out->vocab = (int)vocab;
    memcpy(out->tokenizer, head + 24, 64);
done:
    free(toks);
    free(buf);
    fclose(f);
    return st;
}
