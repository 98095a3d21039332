/* cleave data: GPT-2's byte-level BPE, equal to the npm package
 * gpt-3-encoder's encode() on the same text.
 *
 * How: the text is cut into pre-tokens by the package's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * run by PCRE2 with JavaScript's classes (pretok.c, cl_pretok_gpt2; a build
 * without PCRE2 refuses this tokenizer), and each pre-token's
 * bytes are merged by rank the way that package's bpe() does: each round takes
 * the lowest rank among adjacent pairs, the pair holding it at the rightmost
 * position names the merge, and every occurrence of exactly that pair is
 * merged left to right. Ranks are looked up, as in JavaScript, by the pair
 * joined with a comma ("first,second"). A heap keeps a round O(log n), so
 * long pre-tokens (CJK paragraphs, runs of one character) stay fast.
 *
 * Everything works on raw bytes: the byte-to-unicode map of GPT-2 is undone
 * once when loading encoder.json and vocab.bpe (it maps ',' to ','), so the
 * joined keys compare exactly as the JavaScript strings do.
 *
 * Invalid UTF-8: node would first replace such bytes by U+FFFD; here each
 * invalid byte is kept as itself and matched as one character that is
 * neither letter, number nor space, as U+FFFD is (CL_PRETOK_INVALID_OTHER),
 * so decode(encode(x)) == x for any bytes. Only valid UTF-8 is guaranteed to
 * match the JavaScript encoder.
 *
 * Invariants: the tokenizer is read-only after loading; encode keeps all its
 * scratch state on the call's own heap, so it is safe on many threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "data/pretok.h"

/* ---- GPT-2's byte <-> unicode map ------------------------------------ */

/* Printable Latin-1 bytes map to themselves; the other 68 bytes, in order,
 * to U+0100.. . Fills u2b[0..324) with byte or -1. */
void cl_byte_unicode_inverse(int u2b[324])
{
    for (int i = 0; i < 324; i++) u2b[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        if (printable) u2b[b] = b;
        else u2b[256 + n++] = b;
    }
}

/* ---- string map ---------------------------------------------------------- */

#define HASH_SEED 0xcbf29ce484222325ull

/* Hash of a, then (when comma) ',', then b: the map keys of merges. */
static uint32_t hash_parts(const unsigned char *a, size_t na, int comma,
                           const unsigned char *b, size_t nb)
{
    uint64_t h = HASH_SEED;
    for (size_t i = 0; i < na; i++) h = (h ^ a[i]) * 0x100000001b3ull;
    if (comma) h = (h ^ (unsigned char)',') * 0x100000001b3ull;
    for (size_t i = 0; i < nb; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    uint32_t x = (uint32_t)(h ^ (h >> 32));
    return x ? x : 1;
}

typedef cl_strmap_slot map_slot;
typedef cl_strmap map_t;

static cl_status map_init(map_t *m, size_t expect)
{
    size_t cap = 16;
    while (cap < expect * 2) cap *= 2;
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return cl_error(CL_ERR_OOM, "gpt2 tokenizer: no host memory for a %zu-slot table", cap);
    m->cap = cap;
    m->n = 0;
    return CL_OK;
}

/* Slot holding the key (a [, ',' ] b), or the empty slot where it would go. */
static map_slot *map_find(const map_t *m, uint32_t h, const unsigned char *a, size_t na,
                          int comma, const unsigned char *b, size_t nb)
{
    size_t len = na + nb + (comma ? 1 : 0);
    size_t i = h & (m->cap - 1);
    for (;;) {
        map_slot *s = &m->slots[i];
        if (s->hash == 0) return s;
        if (s->hash == h && s->len == len && memcmp(s->key, a, na) == 0 &&
            (!comma || s->key[na] == ',') && (nb == 0 || memcmp(s->key + na + (comma ? 1 : 0), b, nb) == 0))
            return s;
        i = (i + 1) & (m->cap - 1);
    }
}

static cl_status map_grow(map_t *m)
{
    map_t g = {0};
    CL_TRY(map_init(&g, m->cap));
    for (size_t i = 0; i < m->cap; i++) {
        map_slot *s = &m->slots[i];
        if (!s->hash) continue;
        size_t j = s->hash & (g.cap - 1);
        while (g.slots[j].hash) j = (j + 1) & (g.cap - 1);
        g.slots[j] = *s;
    }
    g.n = m->n;
    free(m->slots);
    *m = g;
    return CL_OK;
}

static int32_t map_get_parts(const map_t *m, const unsigned char *a, size_t na,
                             int comma, const unsigned char *b, size_t nb)
{
    map_slot *s = map_find(m, hash_parts(a, na, comma, b, nb), a, na, comma, b, nb);
    return s->hash ? s->value : -1;
}

/* ---- loading ------------------------------------------------------------ */

typedef struct {
    unsigned char *buf;
    size_t len, cap;
} bytes_t;

static int bytes_push(bytes_t *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->len + n) c *= 2;
        unsigned char *q = realloc(b->buf, c);
        if (!q) return 0;
        b->buf = q;
        b->cap = c;
    }
    memcpy(b->buf + b->len, p, n);
    b->len += n;
    return 1;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(const char *s, size_t n, size_t i, uint32_t *v)
{
    if (i + 4 > n) return 0;
    uint32_t x = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval((unsigned char)s[i + k]);
        if (h < 0) return 0;
        x = x * 16 + (uint32_t)h;
    }
    *v = x;
    return 1;
}

/* Parses the JSON string starting at s[*pos] == '"' and appends its
 * characters, mapped back through GPT-2's byte alphabet, as raw bytes. */
static cl_status parse_key(const char *path, const char *s, size_t n, size_t *pos,
                           const int u2b[324], bytes_t *out)
{
    size_t i = *pos + 1;
    for (;;) {
        if (i >= n) return cl_error(CL_ERR_FORMAT, "%s: unterminated string at byte %zu", path, *pos);
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        size_t at = i;
        if (c == '"') { i++; break; }
        if (c < 0x20) return cl_error(CL_ERR_FORMAT, "%s: control character in a string at byte %zu", path, i);
        if (c == '\\') {
            if (i + 1 >= n) return cl_error(CL_ERR_FORMAT, "%s: unterminated escape at byte %zu", path, i);
            char e = s[i + 1];
            i += 2;
            switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = 8; break;
            case 'f': cp = 12; break;
            case 'n': cp = 10; break;
            case 'r': cp = 13; break;
            case 't': cp = 9; break;
            case 'u': {
                if (!read_hex4(s, n, i, &cp)) return cl_error(CL_ERR_FORMAT, "%s: bad \\u escape at byte %zu", path, at);
                i += 4;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (i + 1 < n && s[i] == '\\' && s[i + 1] == 'u' && read_hex4(s, n, i + 2, &lo) &&
                        lo >= 0xDC00 && lo <= 0xDFFF) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        i += 6;
                    } else {
                        return cl_error(CL_ERR_FORMAT, "%s: lone surrogate \\u%04X at byte %zu", path, (unsigned)cp, at);
                    }
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    return cl_error(CL_ERR_FORMAT, "%s: lone surrogate \\u%04X at byte %zu", path, (unsigned)cp, at);
                }
                break;
            }
            default:
                return cl_error(CL_ERR_FORMAT, "%s: bad escape '\\%c' at byte %zu", path, e, at);
            }
        } else {
            int k = cl_utf8_decode((const unsigned char *)s + i, n - i, &cp);
            if (!k) return cl_error(CL_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu", path, i);
            i += (size_t)k;
        }
        if (cp >= 324 || u2b[cp] < 0)
            return cl_error(CL_ERR_FORMAT, "%s: character U+%04X at byte %zu is not in GPT-2's byte alphabet",
                            path, (unsigned)cp, at);
        unsigned char b = (unsigned char)u2b[cp];
        if (!bytes_push(out, &b, 1)) return cl_error(CL_ERR_OOM, "%s: out of host memory", path);
    }
    *pos = i;
    return CL_OK;
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

/* encoder.json: one flat JSON object of token string -> id. Fills the token
 * pool (by id), offsets and the token map. */
static cl_status load_encoder(cl_tokenizer *t, const char *path)
{
    char *s = NULL;
    size_t n = 0;
    CL_TRY(cl_read_file(path, CL_FILE_TOKENIZER, &s, &n));
    t->files_hash = cl_hash64(s, n, 0);
    int u2b[324];
    cl_byte_unicode_inverse(u2b);
    bytes_t pool = {0};
    size_t nent = 0, capent = 0;
    struct ent { size_t off, len; int64_t id; } *ents = NULL;
    cl_status st = CL_OK;
    size_t i = skip_ws(s, n, 0);
    if (i >= n || s[i] != '{') { st = cl_error(CL_ERR_FORMAT, "%s: expected a JSON object at byte %zu", path, i); goto done; }
    i = skip_ws(s, n, i + 1);
    if (i < n && s[i] == '}') { st = cl_error(CL_ERR_FORMAT, "%s: the object is empty", path); goto done; }
    for (;;) {
        if (i >= n || s[i] != '"') { st = cl_error(CL_ERR_FORMAT, "%s: expected a string key at byte %zu", path, i); goto done; }
        size_t off = pool.len;
        if ((st = parse_key(path, s, n, &i, u2b, &pool)) != CL_OK) goto done;
        size_t klen = pool.len - off;
        if (klen == 0) { st = cl_error(CL_ERR_FORMAT, "%s: empty token string before byte %zu", path, i); goto done; }
        i = skip_ws(s, n, i);
        if (i >= n || s[i] != ':') { st = cl_error(CL_ERR_FORMAT, "%s: expected ':' at byte %zu", path, i); goto done; }
        i = skip_ws(s, n, i + 1);
        size_t at = i;
        int64_t id = 0;
        if (i >= n || s[i] < '0' || s[i] > '9') { st = cl_error(CL_ERR_FORMAT, "%s: expected a token id (non-negative integer) at byte %zu", path, at); goto done; }
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            id = id * 10 + (s[i] - '0');
            if (id > (1 << 24)) { st = cl_error(CL_ERR_FORMAT, "%s: token id at byte %zu is too large", path, at); goto done; }
            i++;
        }
        if (i < n && (s[i] == '.' || s[i] == 'e' || s[i] == 'E')) { st = cl_error(CL_ERR_FORMAT, "%s: token id at byte %zu is not an integer", path, at); goto done; }
        if (nent == capent) {
            capent = capent ? capent * 2 : 65536;
            struct ent *e = realloc(ents, capent * sizeof *e);
            if (!e) { st = cl_error(CL_ERR_OOM, "%s: out of host memory", path); goto done; }
            ents = e;
        }
        ents[nent].off = off;
        ents[nent].len = klen;
        ents[nent].id = id;
        nent++;
        i = skip_ws(s, n, i);
        if (i < n && s[i] == ',') { i = skip_ws(s, n, i + 1); continue; }
        if (i < n && s[i] == '}') { i++; break; }
        st = cl_error(CL_ERR_FORMAT, "%s: expected ',' or '}' at byte %zu", path, i);
        goto done;
    }
    i = skip_ws(s, n, i);
    if (i != n) { st = cl_error(CL_ERR_FORMAT, "%s: trailing characters at byte %zu", path, i); goto done; }

    /* ids must be exactly 0..nent-1 */
    t->vocab = (int)nent;
    t->tok_off = calloc(nent + 1, sizeof *t->tok_off);
    size_t *where = malloc(nent * sizeof *where);
    if (!t->tok_off || !where) { free(where); st = cl_error(CL_ERR_OOM, "%s: out of host memory", path); goto done; }
    for (size_t k = 0; k < nent; k++) where[k] = (size_t)-1;
    for (size_t k = 0; k < nent; k++) {
        if (ents[k].id >= (int64_t)nent) {
            free(where);
            st = cl_error(CL_ERR_FORMAT, "%s: token id %lld is out of range: %zu tokens need ids 0..%zu",
                          path, (long long)ents[k].id, nent, nent - 1);
            goto done;
        }
        if (where[ents[k].id] != (size_t)-1) {
            free(where);
            st = cl_error(CL_ERR_FORMAT, "%s: token id %lld is given twice", path, (long long)ents[k].id);
            goto done;
        }
        where[ents[k].id] = k;
    }
    if (pool.len >= UINT32_MAX) { free(where); st = cl_error(CL_ERR_FORMAT, "%s: tokens too long", path); goto done; }
    t->tok_pool = malloc(pool.len ? pool.len : 1);
    if (!t->tok_pool) { free(where); st = cl_error(CL_ERR_OOM, "%s: out of host memory", path); goto done; }
    size_t o = 0;
    for (size_t id = 0; id < nent; id++) {
        const struct ent *e = &ents[where[id]];
        t->tok_off[id] = (uint32_t)o;
        memcpy(t->tok_pool + o, pool.buf + e->off, e->len);
        o += e->len;
    }
    t->tok_off[nent] = (uint32_t)o;
    free(where);

    map_t *m = &t->tokens;
    if ((st = map_init(m, nent)) != CL_OK) goto done;
    for (size_t id = 0; id < nent; id++) {
        const unsigned char *k = t->tok_pool + t->tok_off[id];
        size_t kl = t->tok_off[id + 1] - t->tok_off[id];
        uint32_t h = hash_parts(k, kl, 0, NULL, 0);
        map_slot *sl = map_find(m, h, k, kl, 0, NULL, 0);
        if (sl->hash) {
            st = cl_error(CL_ERR_FORMAT, "%s: token ids %d and %zu have the same string", path, sl->value, id);
            goto done;
        }
        sl->key = k;
        sl->len = (uint32_t)kl;
        sl->hash = h;
        sl->value = (int32_t)id;
        m->n++;
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        if (map_get_parts(&t->tokens, &c, 1, 0, NULL, 0) < 0) {
            st = cl_error(CL_ERR_FORMAT, "%s: no token for the single byte 0x%02X", path, b);
            goto done;
        }
    }
done:
    free(ents);
    free(pool.buf);
    free(s);
    return st;
}

static int is_sep(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* Decodes a byte-alphabet symbol s[0..n) into raw bytes appended to out.
 * Returns 0 when a character is not in the alphabet or not valid UTF-8. */
static int symbol_to_bytes(const unsigned char *s, size_t n, const int u2b[324], bytes_t *out, int *ok_mem)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = cl_utf8_decode(s + i, n - i, &cp);
        if (!k || cp >= 324 || u2b[cp] < 0) return 0;
        unsigned char b = (unsigned char)u2b[cp];
        if (!bytes_push(out, &b, 1)) { *ok_mem = 0; return 0; }
        i += (size_t)k;
    }
    return 1;
}

/* vocab.bpe: a version line, then one merge "first second" per line. As in
 * the JavaScript encoder, the first line and everything after the last
 * newline are ignored; merge ranks are line order from 0. */
static cl_status load_merges(cl_tokenizer *t, const char *path)
{
    char *s = NULL;
    size_t n = 0;
    CL_TRY(cl_read_file(path, CL_FILE_TOKENIZER, &s, &n));
    t->files_hash = cl_hash64(s, n, t->files_hash); /* after encoder.json's */
    int u2b[324];
    cl_byte_unicode_inverse(u2b);
    cl_status st = CL_OK;
    bytes_t pool = {0};
    size_t nm = 0, cap = 0;
    uint32_t *moff = NULL, *mfirst = NULL, *mline = NULL; /* key offset, length of first part, line */
    const unsigned char *u = (const unsigned char *)s;
    const unsigned char *nl = memchr(u, '\n', n);
    size_t line = 1;
    size_t i = nl ? (size_t)(nl - u) + 1 : n;
    while (i < n) {
        nl = memchr(u + i, '\n', n - i);
        if (!nl) break; /* the text after the last newline is not a merge */
        size_t end = (size_t)(nl - u);
        line++;
        const unsigned char *part[3];
        size_t plen[3];
        int np = 0;
        size_t j = i;
        while (j < end) {
            while (j < end && is_sep(u[j])) j++;
            if (j >= end) break;
            size_t b = j;
            while (j < end && !is_sep(u[j])) j++;
            if (np < 3) { part[np] = u + b; plen[np] = j - b; }
            np++;
        }
        if (np == 0) { /* a blank line: JavaScript's pair [] can never match */
            i = end + 1;
            continue;
        }
        if (np != 2) {
            st = cl_error(CL_ERR_FORMAT, "%s line %zu: expected two symbols separated by a space, found %d", path, line, np);
            goto done;
        }
        if (nm == cap) {
            cap = cap ? cap * 2 : 65536;
            uint32_t *a = realloc(moff, cap * sizeof *a);
            if (a) moff = a;
            uint32_t *b = a ? realloc(mfirst, cap * sizeof *b) : NULL;
            if (b) mfirst = b;
            uint32_t *c = b ? realloc(mline, cap * sizeof *c) : NULL;
            if (c) mline = c;
            if (!a || !b || !c) { st = cl_error(CL_ERR_OOM, "%s: out of host memory", path); goto done; }
        }
        size_t off = pool.len;
        int mem = 1;
        if (!symbol_to_bytes(part[0], plen[0], u2b, &pool, &mem)) goto bad_symbol;
        size_t flen = pool.len - off;
        unsigned char comma = ',';
        if (!bytes_push(&pool, &comma, 1)) { mem = 0; goto bad_symbol; }
        if (!symbol_to_bytes(part[1], plen[1], u2b, &pool, &mem)) goto bad_symbol;
        if (pool.len >= UINT32_MAX) { st = cl_error(CL_ERR_FORMAT, "%s: too large", path); goto done; }
        moff[nm] = (uint32_t)off;
        mfirst[nm] = (uint32_t)flen;
        mline[nm] = (uint32_t)line;
        nm++;
        i = end + 1;
        continue;
    bad_symbol:
        if (!mem) st = cl_error(CL_ERR_OOM, "%s: out of host memory", path);
        else st = cl_error(CL_ERR_FORMAT, "%s line %zu: a symbol is not valid UTF-8 in GPT-2's byte alphabet", path, line);
        goto done;
    }
    if (nm == 0) { st = cl_error(CL_ERR_FORMAT, "%s: no merges (expected a version line, then one merge per line)", path); goto done; }

    size_t pool_len = pool.len;
    t->merge_pool = pool.buf;
    pool.buf = NULL;
    map_t *m = &t->merges;
    if ((st = map_init(m, nm)) != CL_OK) goto done;
    for (size_t k = 0; k < nm; k++) {
        const unsigned char *key = t->merge_pool + moff[k];
        size_t klen = (k + 1 < nm ? moff[k + 1] : pool_len) - moff[k];
        size_t fl = mfirst[k];
        const unsigned char *a = key, *b = key + fl + 1;
        size_t na = fl, nb = klen - fl - 1;
        /* both symbols and their concatenation must be tokens */
        if (map_get_parts(&t->tokens, a, na, 0, NULL, 0) < 0 || map_get_parts(&t->tokens, b, nb, 0, NULL, 0) < 0 ||
            map_get_parts(&t->tokens, a, na, 0, b, nb) < 0) {
            st = cl_error(CL_ERR_FORMAT, "%s line %zu: the merge or one of its two symbols is not a token of encoder.json",
                          path, (size_t)mline[k]);
            goto done;
        }
        uint32_t h = hash_parts(key, klen, 0, NULL, 0);
        map_slot *sl = map_find(m, h, key, klen, 0, NULL, 0);
        if (!sl->hash) m->n++;
        sl->key = key; /* a repeated pair keeps its last rank, as in JavaScript */
        sl->len = (uint32_t)klen;
        sl->hash = h;
        sl->value = (int32_t)k;
    }
    st = CL_OK;
done:
    free(moff);
    free(mfirst);
    free(mline);
    free(pool.buf);
    free(s);
    return st;
}

void cl_gpt2_release(cl_tokenizer *t)
{
    free(t->tok_pool);
    free(t->tok_off);
    free(t->tokens.slots);
    free(t->merge_pool);
    free(t->merges.slots);
    cl_pretok_free(t->pretok);
}

static char *join_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

cl_status cl_tokenizer_gpt2(cl_tokenizer **out, const char *dir)
{
    *out = NULL;
#ifndef CL_HAVE_PCRE2
    return cl_error(CL_ERR_UNSUPPORTED, "--tokenizer gpt2 needs PCRE2, and this build has none (install libpcre2-dev and rebuild)");
#endif
    char found[4096];
    if (!dir) {
        CL_TRY(cl_data_find("gpt2", found, sizeof found));
        dir = found;
    }
    if (!*dir) return cl_error(CL_ERR_INVALID, "gpt2 tokenizer: no directory given (it must hold encoder.json and vocab.bpe)");
    cl_tokenizer *t = calloc(1, sizeof *t);
    char *enc = join_path(dir, "encoder.json"), *bpe = join_path(dir, "vocab.bpe");
    cl_status st = CL_OK;
    if (!t || !enc || !bpe) { st = cl_error(CL_ERR_OOM, "gpt2 tokenizer: out of host memory"); goto fail; }
    t->kind = CL_TOK_GPT2;
    if ((st = load_encoder(t, enc)) != CL_OK) goto fail;
    if ((st = load_merges(t, bpe)) != CL_OK) goto fail;
    if ((st = cl_pretok_compile(&t->pretok, cl_pretok_gpt2, "gpt2 tokenizer: its pattern")) != CL_OK) goto fail;
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = map_get_parts(&t->tokens, &c, 1, 0, NULL, 0);
    }
    t->eod = map_get_parts(&t->tokens, (const unsigned char *)"<|endoftext|>", 13, 0, NULL, 0);
    free(enc);
    free(bpe);
    *out = t;
    return CL_OK;
fail:
    if (t) cl_gpt2_release(t); /* not cl_tokenizer_free: the dispatch (tokenizer_byte.c) calls this file, not back */
    free(t);
    free(enc);
    free(bpe);
    return st;
}

/* ---- BPE of one pre-token --------------------------------------------------- */

typedef struct {
    int32_t rank, pos, right;
    uint32_t lver, rver;
} heap_ent;

typedef struct {
    int32_t *len, *prev, *next;
    uint32_t *ver;
    size_t cap;
    heap_ent *heap, *round;
    size_t hn, hcap, rcap;
    int32_t *ids;            /* the encode call's output */
    size_t nids, capids;
} bpe_state;

static int ent_less(const heap_ent *a, const heap_ent *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(bpe_state *S, heap_ent e)
{
    if (S->hn == S->hcap) {
        size_t c = S->hcap ? S->hcap * 2 : 256;
        heap_ent *h = realloc(S->heap, c * sizeof *h);
        if (!h) return 0;
        S->heap = h;
        S->hcap = c;
    }
    size_t i = S->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ent_less(&e, &S->heap[p])) break;
        S->heap[i] = S->heap[p];
        i = p;
    }
    S->heap[i] = e;
    return 1;
}

static heap_ent heap_pop(bpe_state *S)
{
    heap_ent top = S->heap[0], e = S->heap[--S->hn];
    size_t i = 0, n = S->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && ent_less(&S->heap[c + 1], &S->heap[c])) c++;
        if (!ent_less(&S->heap[c], &e)) break;
        S->heap[i] = S->heap[c];
        i = c;
    }
    if (n) S->heap[i] = e;
    return top;
}

static int ids_push(bpe_state *S, int32_t id)
{
    if (S->nids == S->capids) {
        size_t c = S->capids ? S->capids * 2 : 1024;
        int32_t *p = realloc(S->ids, c * sizeof *p);
        if (!p) return 0;
        S->ids = p;
        S->capids = c;
    }
    S->ids[S->nids++] = id;
    return 1;
}

static int entry_valid(const bpe_state *S, const heap_ent *e)
{
    return S->len[e->pos] > 0 && S->len[e->right] > 0 && S->next[e->pos] == e->right &&
           S->ver[e->pos] == e->lver && S->ver[e->right] == e->rver;
}

/* Pushes the pair (l, r) of adjacent symbols if it has a rank. */
static int push_pair(const cl_tokenizer *t, bpe_state *S, const unsigned char *w, int32_t l, int32_t r)
{
    int32_t rank = map_get_parts(&t->merges, w + l, (size_t)S->len[l], 1, w + r, (size_t)S->len[r]);
    if (rank < 0) return 1;
    heap_ent e = {rank, l, r, S->ver[l], S->ver[r]};
    return heap_push(S, e);
}

#define OOM_ENCODE() cl_error(CL_ERR_OOM, "gpt2 tokenizer: out of host memory while encoding")

/* Appends the ids of pre-token w[0..m) (m >= 1). Symbols are indexed by the
 * byte they start at; a merge grows the left symbol and removes the right. */
static cl_status bpe_word(const cl_tokenizer *t, bpe_state *S, const unsigned char *w, size_t m)
{
    if (m == 1) return ids_push(S, t->byte_id[w[0]]) ? CL_OK : OOM_ENCODE();
    if (m > (size_t)INT32_MAX / 4) return cl_error(CL_ERR_INVALID, "gpt2 tokenizer: a pre-token of %zu bytes is too long", m);
    if (m > S->cap) {
        size_t c = m < 64 ? 64 : m;
        free(S->len); free(S->prev); free(S->next); free(S->ver);
        S->len = malloc(c * sizeof *S->len);
        S->prev = malloc(c * sizeof *S->prev);
        S->next = malloc(c * sizeof *S->next);
        S->ver = malloc(c * sizeof *S->ver);
        S->cap = (S->len && S->prev && S->next && S->ver) ? c : 0;
        if (!S->cap) return OOM_ENCODE();
    }
    int32_t mm = (int32_t)m;
    for (int32_t i = 0; i < mm; i++) {
        S->len[i] = 1;
        S->prev[i] = i - 1;
        S->next[i] = i + 1 < mm ? i + 1 : -1;
        S->ver[i] = 0;
    }
    S->hn = 0;
    for (int32_t i = 0; i + 1 < mm; i++)
        if (!push_pair(t, S, w, i, i + 1)) return OOM_ENCODE();
    while (S->hn > 0) {
        heap_ent e = heap_pop(S);
        if (!entry_valid(S, &e)) continue;
        /* one round: every live pair of the lowest rank, left to right */
        size_t rn = 0;
        for (;;) {
            if (rn == S->rcap) {
                size_t c = S->rcap ? S->rcap * 2 : 64;
                heap_ent *p = realloc(S->round, c * sizeof *p);
                if (!p) return OOM_ENCODE();
                S->round = p;
                S->rcap = c;
            }
            S->round[rn++] = e;
            int more = 0;
            while (S->hn > 0 && S->heap[0].rank == e.rank) {
                heap_ent f = heap_pop(S);
                if (entry_valid(S, &f)) { e = f; more = 1; break; }
            }
            if (!more) break;
        }
        /* the rightmost pair of that rank names the merge */
        const heap_ent *last = &S->round[rn - 1];
        int32_t fo = last->pos, fl = S->len[last->pos], so = last->right, sl = S->len[last->right];
        for (size_t k = 0; k < rn; k++) {
            heap_ent g = S->round[k];
            if (!entry_valid(S, &g)) continue;
            int32_t l = g.pos, r = g.right;
            if (S->len[l] != fl || S->len[r] != sl || memcmp(w + l, w + fo, (size_t)fl) != 0 ||
                memcmp(w + r, w + so, (size_t)sl) != 0) {
                if (!heap_push(S, g)) return OOM_ENCODE(); /* same rank, other pair: a later round */
                continue;
            }
            S->len[l] += S->len[r];
            S->len[r] = 0;
            int32_t nx = S->next[r];
            S->next[l] = nx;
            if (nx >= 0) S->prev[nx] = l;
            S->ver[l]++;
            if (S->prev[l] >= 0 && !push_pair(t, S, w, S->prev[l], l)) return OOM_ENCODE();
            if (nx >= 0 && !push_pair(t, S, w, l, nx)) return OOM_ENCODE();
        }
    }
    for (int32_t i = 0; i >= 0; i = S->next[i]) {
        int32_t id = map_get_parts(&t->tokens, w + i, (size_t)S->len[i], 0, NULL, 0);
        if (id < 0)
            return cl_error(CL_ERR_FORMAT, "gpt2 tokenizer: a merge made a %d-byte string that is not a token "
                            "(vocab.bpe and encoder.json disagree)", S->len[i]);
        if (!ids_push(S, id)) return OOM_ENCODE();
    }
    return CL_OK;
}

/* ---- encode ------------------------------------------------------------------ */

enum { CACHE_MAX_LEN = 64, CACHE_MAX_ENTRIES = 1 << 20 };

/* One encode call's state: the BPE scratch and output, and a cache of the
 * ids of short pre-tokens already merged (keys point into the text). */
typedef struct {
    const cl_tokenizer *t;
    bpe_state S;
    map_t cache;                /* pre-token bytes -> index into cpos */
    uint32_t *cpos;             /* per cached pre-token: start in cids, then count */
    int32_t *cids;
    size_t ncache, capcache, ncids, capcids;
    cl_status st;
} encode_state;

/* cl_pretok_split's piece: appends the ids of pre-token w[0..m) */
static int encode_piece(void *ctx, const unsigned char *w, size_t m)
{
    encode_state *E = ctx;
    bpe_state *S = &E->S;
    if (m == 1) {
        if (!ids_push(S, E->t->byte_id[w[0]])) { E->st = OOM_ENCODE(); return 0; }
        return 1;
    }
    map_slot *slot = NULL;
    uint32_t h = 0;
    if (m <= CACHE_MAX_LEN) {
        h = hash_parts(w, m, 0, NULL, 0);
        slot = map_find(&E->cache, h, w, m, 0, NULL, 0);
        if (slot->hash) {
            uint32_t a = E->cpos[2 * slot->value], c = E->cpos[2 * slot->value + 1];
            for (uint32_t k = 0; k < c; k++)
                if (!ids_push(S, E->cids[a + k])) { E->st = OOM_ENCODE(); return 0; }
            return 1;
        }
    }
    size_t before = S->nids;
    if ((E->st = bpe_word(E->t, S, w, m)) != CL_OK) return 0;
    if (slot && E->ncache < CACHE_MAX_ENTRIES) {
        size_t c = S->nids - before;
        if (E->ncache == E->capcache) {
            E->capcache = E->capcache ? E->capcache * 2 : 4096;
            uint32_t *p = realloc(E->cpos, 2 * E->capcache * sizeof *p);
            if (!p) { E->st = OOM_ENCODE(); return 0; }
            E->cpos = p;
        }
        if (E->ncids + c > E->capcids) {
            size_t cc = E->capcids ? E->capcids : 16384;
            while (cc < E->ncids + c) cc *= 2;
            int32_t *p = realloc(E->cids, cc * sizeof *p);
            if (!p) { E->st = OOM_ENCODE(); return 0; }
            E->cids = p;
            E->capcids = cc;
        }
        memcpy(E->cids + E->ncids, S->ids + before, c * sizeof *E->cids);
        E->cpos[2 * E->ncache] = (uint32_t)E->ncids;
        E->cpos[2 * E->ncache + 1] = (uint32_t)c;
        slot->key = w;
        slot->len = (uint32_t)m;
        slot->hash = h;
        slot->value = (int32_t)E->ncache;
        E->ncache++;
        E->ncids += c;
        E->cache.n++;
        if (E->cache.n * 2 >= E->cache.cap && (E->st = map_grow(&E->cache)) != CL_OK) return 0;
    }
    return 1;
}

cl_status cl_gpt2_encode(const cl_tokenizer *t, const char *text, size_t len,
                         int32_t **out, size_t *n)
{
    encode_state E = {0};
    E.t = t;
    bpe_state *S = &E.S;
    if ((E.st = map_init(&E.cache, 4096)) != CL_OK) goto done;
    S->capids = len / 3 + 16;
    S->ids = malloc(S->capids * sizeof *S->ids);
    if (!S->ids) { E.st = OOM_ENCODE(); goto done; }
    int rc = cl_pretok_split(t->pretok, CL_PRETOK_INVALID_OTHER, (const unsigned char *)text, len, encode_piece, &E);
    if (rc < 0) { E.st = cl_error(CL_ERR_INVALID, "gpt2 tokenizer: the pre-tokenizer's regex failed to match (PCRE2 error or no memory)"); goto done; }
    if (rc == 0) goto done; /* E.st says why */
    *out = S->ids;
    *n = S->nids;
    S->ids = NULL;
done:
    free(S->ids);
    free(S->len); free(S->prev); free(S->next); free(S->ver);
    free(S->heap); free(S->round);
    free(E.cache.slots);
    free(E.cpos);
    free(E.cids);
    return E.st;
}
