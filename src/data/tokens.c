/* cleave data: token files, a text tokenized once so training need not.
 *
 * Layout "CLTOK2" (all integers little-endian), a 120-byte header then the
 * tokens:
 *     0  "CLTOK2\0\0"
 *     8  u32 vocab size
 *    12  u32 bytes per token (2 when vocab <= 65536, else 4)
 *    16  u64 token count
 *    24  64-byte tokenizer name, NUL padded
 *    88  u64 size in bytes of the text the tokens were made from
 *    96  u64 cl_hash64(text, size, 0) (XXH64) of that text
 *   104  u64 cl_tokenizer_hash of the tokenizer that made them
 *   112  u64 checksum = cl_hash64(tokens area, count * bytes per token,
 *                                  cl_hash64(header bytes 0..111, 112, 0))
 *   120  the tokens, count * bytes per token
 * The source fields (88..111) let a cache user tell a stale file from a
 * current one; the checksum covers everything else, so any flipped byte is
 * found on load. CLTOK1 files (no source fields, no checksum) are refused as
 * an older format.
 * Invariants: a file is written to "<path>.tmp.<pid>" and renamed into place,
 * so readers see either the old file or the whole new one; a file is only
 * accepted when its length is exactly header + count * bytes per token, its
 * checksum matches and every token is below the vocab size. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleave/data.h"

#define TOK_MAGIC "CLTOK2\0\0"
#define TOK_MAGIC_V1 "CLTOK1\0\0"
enum { TOK_SUM_AT = 112, TOK_HEADER = 120 };

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

/* The checksum of a whole file image whose header is complete up to TOK_SUM_AT. */
static uint64_t tok_checksum(const unsigned char *file, uint64_t body)
{
    return cl_hash64(file + TOK_HEADER, (size_t)body, cl_hash64(file, TOK_SUM_AT, 0));
}

cl_status cl_tokens_write(const char *path, const int32_t *tokens, size_t count,
                          int vocab, const char *tokenizer_name, const cl_tokens_source *src)
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
    if (count > (SIZE_MAX - TOK_HEADER) / bpt)
        return cl_error(CL_ERR_OOM, "token file %s: %zu tokens are too many", path, count);

    /* the whole file image in memory: the checksum needs all of it anyway */
    size_t body = count * bpt, total = TOK_HEADER + body;
    unsigned char *img = calloc(1, total);
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!img || !tmp) {
        free(img);
        free(tmp);
        return cl_error(CL_ERR_OOM, "token file %s: out of host memory", path);
    }
    memcpy(img, TOK_MAGIC, 8);
    put_u32(img + 8, (uint32_t)vocab);
    put_u32(img + 12, bpt);
    put_u64(img + 16, (uint64_t)count);
    memcpy(img + 24, name, name_len);
    if (src) {
        put_u64(img + 88, src->text_size);
        put_u64(img + 96, src->text_hash);
        put_u64(img + 104, src->tokenizer_hash);
    }
    for (size_t i = 0; i < count; i++) {
        if (bpt == 2) {
            img[TOK_HEADER + 2 * i] = (unsigned char)tokens[i];
            img[TOK_HEADER + 2 * i + 1] = (unsigned char)((uint32_t)tokens[i] >> 8);
        } else {
            put_u32(img + TOK_HEADER + 4 * i, (uint32_t)tokens[i]);
        }
    }
    put_u64(img + TOK_SUM_AT, tok_checksum(img, body));

    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        cl_status st = cl_error(CL_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        free(img);
        free(tmp);
        return st;
    }
    int ok = fwrite(img, 1, total, f) == total;
    int e = errno;
    free(img);
    if (fflush(f) != 0) { ok = 0; e = errno; }
    if (ok && fsync(fileno(f)) != 0) { ok = 0; e = errno; }
    if (fclose(f) != 0 && ok) { ok = 0; e = errno; }
    if (!ok || rename(tmp, path) != 0) {
        if (ok) e = errno;
        remove(tmp);
        cl_status st = cl_error(CL_ERR_IO, "cannot write token file %s: %s", path, e ? strerror(e) : "short write");
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

cl_status cl_tokens_parse(const void *data, size_t size, const char *what, cl_tokens *out)
{
    memset(out, 0, sizeof *out);
    const unsigned char *p = data;
    if (!what) what = "token data";
    if (!p && size > 0) return cl_error(CL_ERR_INVALID, "%s: no data but %zu bytes", what, size);
    if (size >= 8 && memcmp(p, TOK_MAGIC_V1, 8) == 0)
        return cl_error(CL_ERR_FORMAT, "%s is a token file of the older format CLTOK1 (this cleave reads CLTOK2)", what);
    if (size < 8 || memcmp(p, TOK_MAGIC, 8) != 0)
        return cl_error(CL_ERR_FORMAT, "%s is not a cleave token file (no CLTOK2 header)", what);
    if (size < TOK_HEADER)
        return cl_error(CL_ERR_FORMAT, "token file %s is truncated: %zu bytes, the header alone is %d", what, size, TOK_HEADER);
    uint32_t vocab = get_u32(p + 8), bpt = get_u32(p + 12);
    uint64_t count = get_u64(p + 16);
    if (vocab == 0 || vocab > INT32_MAX)
        return cl_error(CL_ERR_FORMAT, "token file %s: vocab size %u is invalid", what, (unsigned)vocab);
    if (bpt != (vocab <= 65536 ? 2u : 4u))
        return cl_error(CL_ERR_FORMAT, "token file %s: %u bytes per token for a vocabulary of %u (the format stores 2 up to 65536, else 4)",
                        what, (unsigned)bpt, (unsigned)vocab);
    if (memchr(p + 24, '\0', 64) == NULL)
        return cl_error(CL_ERR_FORMAT, "token file %s: tokenizer name is not NUL-terminated", what);
    uint64_t body = size - TOK_HEADER;
    if (count > body / bpt || body != count * bpt)
        return cl_error(CL_ERR_FORMAT, "token file %s: header says %llu tokens (%llu bytes) but %llu bytes follow the header%s",
                        what, (unsigned long long)count, (unsigned long long)count * bpt, (unsigned long long)body,
                        body < count * bpt ? " (truncated?)" : "");
    uint64_t sum = get_u64(p + TOK_SUM_AT), want = tok_checksum(p, body);
    if (sum != want)
        return cl_error(CL_ERR_FORMAT, "token file %s is damaged: its checksum %016llx does not match its content (%016llx)",
                        what, (unsigned long long)sum, (unsigned long long)want);
    int32_t *toks = malloc((size_t)(count ? count : 1) * sizeof *toks);
    if (!toks) return cl_error(CL_ERR_OOM, "token file %s: no host memory for %llu tokens", what, (unsigned long long)count);
    const unsigned char *q = p + TOK_HEADER;
    for (size_t i = 0; i < (size_t)count; i++) {
        uint32_t v = bpt == 2 ? (uint32_t)q[2 * i] | (uint32_t)q[2 * i + 1] << 8 : get_u32(q + 4 * i);
        if (v >= vocab) {
            free(toks);
            return cl_error(CL_ERR_FORMAT, "token file %s: token %zu is %u, outside the vocabulary 0..%u",
                            what, i, (unsigned)v, (unsigned)vocab - 1);
        }
        toks[i] = (int32_t)v;
    }
    out->tokens = toks;
    out->count = (size_t)count;
    out->vocab = (int)vocab;
    memcpy(out->tokenizer, p + 24, 64);
    out->source.text_size = get_u64(p + 88);
    out->source.text_hash = get_u64(p + 96);
    out->source.tokenizer_hash = get_u64(p + 104);
    return CL_OK;
}

cl_status cl_tokens_read(const char *path, cl_tokens *out)
{
    memset(out, 0, sizeof *out);
    if (!path) return cl_error(CL_ERR_INVALID, "token file: no path given");
    char *buf;
    size_t len;
    CL_TRY(cl_read_file(path, CL_FILE_TOKENS, &buf, &len));
    cl_status st = cl_tokens_parse(buf, len, path, out);
    free(buf);
    return st;
}
