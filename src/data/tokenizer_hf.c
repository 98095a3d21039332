/* cleave data: Hugging Face tokenizers as models ship them, read from a
 * tokenizer.json (--tokenizer hf --tokenizer-dir DIR): byte-level BPE (Llama
 * 3, GPT-2 and their kin).
 *
 * Why: Llama-family checkpoints carry their tokenizer as one tokenizer.json
 * whose pre-tokenizer is a regex; running that regex with PCRE2 (pretok.c:
 * JavaScript's classes, as @lenml/tokenizers has them; JIT when the library
 * has it) follows each file instead of hand-writing each model's pattern.
 *
 * What is read: "model" of type BPE ("vocab" string -> id; "merges" as "a b"
 * strings or as [a, b] pairs; "ignore_merges"); "pre_tokenizer" either a
 * Sequence of a Split (a "Regex" pattern, behavior Isolated, not inverted)
 * and a ByteLevel without its own regex, or a ByteLevel with use_regex (GPT-2's
 * pattern); "normalizer" null; "added_tokens" (id, content), matched before
 * the pre-tokenizer, longest first at the leftmost position. Anything else is
 * refused naming the file and the field (CL_ERR_FORMAT).
 *
 * Encoding: added tokens cut the text; each stretch of valid UTF-8 is split
 * by the regex (matches and the gaps between them are pre-tokens, empty
 * matches skipped); an invalid UTF-8 byte is a pre-token of its own, so any
 * bytes encode and decode(encode(x)) == x. A pre-token that is a whole vocab
 * entry is taken as is when ignore_merges is set; otherwise its bytes merge
 * pairwise, the lowest merge rank first and of equal ranks the leftmost (as
 * Hugging Face's BPE does).
 *
 * Invariants: after loading everything is read-only (encode keeps its scratch
 * on the call's own heap, pretok.c its own PCRE2 match data, so it is safe on many
 * threads); token id i decodes to tok_pool[tok_off[i] .. tok_off[i+1]) (ids
 * the file does not name decode to nothing); every byte has a one-byte
 * token; every merge's parts and result are in the vocabulary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"

#ifndef CL_HAVE_PCRE2
/* without PCRE2 the tokenizer is refused; nothing else here is built */
cl_status cl_tokenizer_hf(cl_tokenizer **out, const char *dir)
{
    (void)dir;
    *out = NULL;
    return cl_error(CL_ERR_UNSUPPORTED, "--tokenizer hf needs PCRE2, and this build has none (install libpcre2-dev and rebuild)");
}
cl_status cl_hf_encode(const cl_tokenizer *t, const char *text, size_t len, int32_t **out, size_t *n)
{
    (void)t; (void)text; (void)len; (void)out; (void)n;
    return cl_error(CL_ERR_UNSUPPORTED, "hf tokenizer: this build has no PCRE2");
}
void cl_hf_release(cl_tokenizer *t) { (void)t; }
#else

typedef struct {
    uint64_t key;    /* left id << 32 | right id; 0 marks an empty slot (ids are shifted by one) */
    int32_t rank, id;
} merge_slot;

typedef struct {
    uint32_t off, len, hash; /* into tok_pool; hash 0 marks an empty slot */
    int32_t id;
} tok_slot;

typedef struct {
    int32_t id;
    uint32_t off, len; /* content in tok_pool */
} added_tok;

struct cl_hf {
    merge_slot *merges;
    size_t mcap;
    tok_slot *toks;
    size_t tcap;
    added_tok *added;
    int nadded;
    unsigned char first[256]; /* 1: some added token starts with this byte */
    int ignore_merges;
};

static uint32_t hash_bytes(const unsigned char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    uint32_t r = (uint32_t)(h ^ (h >> 32));
    return r ? r : 1;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static int32_t tok_get(const cl_tokenizer *t, const unsigned char *s, size_t n)
{
    const struct cl_hf *h = t->hf;
    uint32_t hh = hash_bytes(s, n);
    for (size_t i = hh & (h->tcap - 1);; i = (i + 1) & (h->tcap - 1)) {
        const tok_slot *e = &h->toks[i];
        if (!e->hash) return -1;
        if (e->hash == hh && e->len == n && !memcmp(t->tok_pool + e->off, s, n)) return e->id;
    }
}

static const merge_slot *merge_get(const struct cl_hf *h, int32_t l, int32_t r)
{
    uint64_t k = ((uint64_t)(uint32_t)(l + 1) << 32) | (uint32_t)(r + 1);
    for (size_t i = mix64(k) & (h->mcap - 1);; i = (i + 1) & (h->mcap - 1)) {
        if (!h->merges[i].key) return NULL;
        if (h->merges[i].key == k) return &h->merges[i];
    }
}

void cl_hf_release(cl_tokenizer *t)
{
    free(t->tok_pool);
    free(t->tok_off);
    cl_pretok_free(t->pretok);
    if (t->hf) {
        free(t->hf->merges);
        free(t->hf->toks);
        free(t->hf->added);
        free(t->hf);
    }
}

/* ---- loading --------------------------------------------------------------- */

/* Byte-level string s (valid UTF-8, from the JSON reader) to raw bytes in
 * out (room for n bytes); returns the byte count, or -1 when a character is
 * outside the byte-level alphabet. */
static long bytelevel_decode(const char *s, size_t n, const int u2b[324], unsigned char *out)
{
    const unsigned char *p = (const unsigned char *)s;
    long k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        if (p[i] < 0x80) c = p[i++];
        else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n) { c = ((uint32_t)(p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F); i += 2; }
        else return -1; /* every byte-level character is below U+0800 */
        if (c >= 324 || u2b[c] < 0) return -1;
        out[k++] = (unsigned char)u2b[c];
    }
    return k;
}

static int is_str(const cl_json *j, const char *s) { return j && j->type == CL_JSON_STRING && !strcmp(j->string, s); }
static int is_true(const cl_json *j) { return j && j->type == CL_JSON_BOOL && j->boolean; }
static int is_nullish(const cl_json *j) { return !j || j->type == CL_JSON_NULL; }

/* The pre-tokenizer's regex (a pointer into the document), or an error. */
static cl_status pre_tokenizer_regex(const char *path, const cl_json *pt, const char **re)
{
    if (!pt || pt->type != CL_JSON_OBJECT)
        return cl_error(CL_ERR_FORMAT, "%s: field pre_tokenizer: missing or not an object (cleave reads a byte-level pre-tokenizer)", path);
    const cl_json *type = cl_json_get(pt, "type");
    if (is_str(type, "ByteLevel")) {
        if (is_true(cl_json_get(pt, "add_prefix_space")))
            return cl_error(CL_ERR_FORMAT, "%s: field pre_tokenizer.add_prefix_space: true is not supported", path);
        const cl_json *u = cl_json_get(pt, "use_regex");
        if (u && !is_true(u))
            return cl_error(CL_ERR_FORMAT, "%s: field pre_tokenizer: a ByteLevel without use_regex splits nothing; not supported", path);
        *re = cl_pretok_gpt2;
        return CL_OK;
    }
    if (!is_str(type, "Sequence"))
        return cl_error(CL_ERR_FORMAT, "%s: field pre_tokenizer.type: '%s' is not supported (Sequence of Split and ByteLevel, or ByteLevel)",
                        path, type && type->type == CL_JSON_STRING ? type->string : "?");
    const cl_json *seq = cl_json_get(pt, "pretokenizers");
    if (!seq || seq->type != CL_JSON_ARRAY || seq->count != 2)
        return cl_error(CL_ERR_FORMAT, "%s: field pre_tokenizer.pretokenizers: expected [Split, ByteLevel]", path);
    const cl_json *split = seq->child, *bl = seq->child->next;
    if (!is_str(cl_json_get(split, "type"), "Split") || !is_str(cl_json_get(bl, "type"), "ByteLevel"))
        return cl_error(CL_ERR_FORMAT, "%s: field pre_tokenizer.pretokenizers: expected [Split, ByteLevel]", path);
    if (is_true(cl_json_get(bl, "use_regex")) || is_true(cl_json_get(bl, "add_prefix_space")))
        return cl_error(CL_ERR_FORMAT, "%s: field pre_tokenizer.pretokenizers[1]: a ByteLevel with use_regex or add_prefix_space after a Split is not supported", path);
    if (!is_str(cl_json_get(split, "behavior"), "Isolated") || is_true(cl_json_get(split, "invert")))
        return cl_error(CL_ERR_FORMAT, "%s: field pre_tokenizer.pretokenizers[0].behavior: only Isolated, not inverted, is supported", path);
    const cl_json *pat = cl_json_get(cl_json_get(split, "pattern"), "Regex");
    if (!pat || pat->type != CL_JSON_STRING)
        return cl_error(CL_ERR_FORMAT, "%s: field pre_tokenizer.pretokenizers[0].pattern.Regex: missing or not a string", path);
    *re = pat->string;
    return CL_OK;
}

static cl_status load(cl_tokenizer *t, const char *path, const char *text, size_t len)
{
    cl_json_doc *doc = NULL;
    cl_status st = cl_json_parse(&doc, text, len);
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", cl_last_error()); /* cl_error rewrites the buffer cl_last_error reads */
        return cl_error(CL_ERR_FORMAT, "%s: not a JSON file: %s", path, why);
    }
    const cl_json *r = cl_json_root(doc);
    struct cl_hf *h = t->hf;
    int u2b[324];
    cl_byte_unicode_inverse(u2b);
    unsigned char *tmp = NULL;
    const char *re = NULL;
#define BAD(...) do { st = cl_error(CL_ERR_FORMAT, __VA_ARGS__); goto done; } while (0)
    if (!r || r->type != CL_JSON_OBJECT) BAD("%s: not a tokenizer.json (the top level is not an object)", path);
    const cl_json *model = cl_json_get(r, "model");
    if (!model || model->type != CL_JSON_OBJECT) BAD("%s: field model: missing or not an object", path);
    const cl_json *mtype = cl_json_get(model, "type");
    if (!is_str(mtype, "BPE"))
        BAD("%s: field model.type: '%s' is not supported (only BPE)", path, mtype && mtype->type == CL_JSON_STRING ? mtype->string : "?");
    if (is_true(cl_json_get(model, "byte_fallback"))) BAD("%s: field model.byte_fallback: not supported (byte-level BPE needs none)", path);
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cl_json *a = cl_json_get(model, affix[i]);
        if (!is_nullish(a) && !(a->type == CL_JSON_STRING && !a->string_len)) BAD("%s: field model.%s: not supported", path, affix[i]);
    }
    const cl_json *norm = cl_json_get(r, "normalizer");
    if (!is_nullish(norm)) BAD("%s: field normalizer: not supported (byte-level BPE models have none)", path);
    if ((st = pre_tokenizer_regex(path, cl_json_get(r, "pre_tokenizer"), &re))) goto done;
    h->ignore_merges = is_true(cl_json_get(model, "ignore_merges"));
    const cl_json *vocab = cl_json_get(model, "vocab"), *merges = cl_json_get(model, "merges");
    const cl_json *added = cl_json_get(r, "added_tokens");
    if (!vocab || vocab->type != CL_JSON_OBJECT || vocab->count == 0) BAD("%s: field model.vocab: missing, empty or not an object", path);
    if (!merges || merges->type != CL_JSON_ARRAY) BAD("%s: field model.merges: missing or not an array", path);
    if (!is_nullish(added) && added->type != CL_JSON_ARRAY) BAD("%s: field added_tokens: not an array", path);
    int nadded = is_nullish(added) ? 0 : added->count;

    /* ids: the vocabulary's and the added tokens' */
    int64_t maxid = -1;
    size_t pool = 0;
    for (const cl_json *e = vocab->child; e; e = e->next) {
        if (e->type != CL_JSON_NUMBER || !e->number_is_int || e->integer < 0 || e->integer >= (1 << 24))
            BAD("%s: field model.vocab[\"%s\"]: the id is not an integer in 0..16777215", path, e->key);
        if (e->integer > maxid) maxid = e->integer;
        pool += e->key_len;
    }
    for (const cl_json *e = nadded ? added->child : NULL; e; e = e->next) {
        const cl_json *id = cl_json_get(e, "id"), *c = cl_json_get(e, "content");
        if (!id || id->type != CL_JSON_NUMBER || !id->number_is_int || id->integer < 0 || id->integer >= (1 << 24))
            BAD("%s: field added_tokens[].id: missing or not an integer in 0..16777215", path);
        if (!c || c->type != CL_JSON_STRING || !c->string_len) BAD("%s: field added_tokens[].content: missing, empty or not a string", path);
        if (is_true(cl_json_get(e, "lstrip")) || is_true(cl_json_get(e, "rstrip")) || is_true(cl_json_get(e, "single_word")))
            BAD("%s: field added_tokens[] '%s': lstrip, rstrip and single_word are not supported", path, c->string);
        if (id->integer > maxid) maxid = id->integer;
        pool += c->string_len;
    }
    t->vocab = (int)maxid + 1;
    t->tok_pool = malloc(pool ? pool : 1);
    t->tok_off = calloc((size_t)t->vocab + 1, sizeof *t->tok_off);
    uint32_t *len_of = calloc((size_t)t->vocab, sizeof *len_of);
    uint32_t *off_of = calloc((size_t)t->vocab, sizeof *off_of);
    unsigned char *set = calloc((size_t)t->vocab, 1);
    h->tcap = 16;
    while (h->tcap < 2 * (size_t)vocab->count) h->tcap *= 2;
    h->toks = calloc(h->tcap, sizeof *h->toks);
    h->added = calloc((size_t)(nadded ? nadded : 1), sizeof *h->added);
    if (!t->tok_pool || !t->tok_off || !len_of || !off_of || !set || !h->toks || !h->added) {
        free(len_of); free(off_of); free(set);
        st = cl_error(CL_ERR_OOM, "%s: out of host memory for %d tokens", path, t->vocab);
        goto done;
    }
    size_t at = 0;
    for (const cl_json *e = vocab->child; e; e = e->next) {
        int32_t id = (int32_t)e->integer;
        long k = bytelevel_decode(e->key, e->key_len, u2b, t->tok_pool + at);
        if (k <= 0 || set[id]) {
            free(len_of); free(off_of); free(set);
            BAD("%s: field model.vocab[\"%s\"]: %s", path, e->key, k <= 0 ? "not a byte-level token" : "a second token with this id");
        }
        set[id] = 1;
        off_of[id] = (uint32_t)at;
        len_of[id] = (uint32_t)k;
        uint32_t hh = hash_bytes(t->tok_pool + at, (size_t)k);
        size_t i = hh & (h->tcap - 1);
        while (h->toks[i].hash) i = (i + 1) & (h->tcap - 1);
        h->toks[i] = (tok_slot){(uint32_t)at, (uint32_t)k, hh, id};
        at += (size_t)k;
    }
    for (const cl_json *e = nadded ? added->child : NULL; e; e = e->next) {
        const cl_json *c = cl_json_get(e, "content");
        int32_t id = (int32_t)cl_json_get(e, "id")->integer;
        memcpy(t->tok_pool + at, c->string, c->string_len);
        if (!set[id]) { set[id] = 1; off_of[id] = (uint32_t)at; len_of[id] = (uint32_t)c->string_len; }
        h->added[h->nadded++] = (added_tok){id, (uint32_t)at, (uint32_t)c->string_len};
        h->first[(unsigned char)c->string[0]] = 1;
        at += c->string_len;
    }
    /* tok_off must be increasing: lay the tokens out again in id order */
    unsigned char *ordered = malloc(at ? at : 1);
    if (!ordered) { free(len_of); free(off_of); free(set); st = cl_error(CL_ERR_OOM, "%s: out of host memory", path); goto done; }
    uint32_t o = 0;
    for (int i = 0; i < t->vocab; i++) {
        t->tok_off[i] = o;
        if (set[i]) { memcpy(ordered + o, t->tok_pool + off_of[i], len_of[i]); o += len_of[i]; }
    }
    t->tok_off[t->vocab] = o;
    /* the maps point into the pool: move their offsets to the new layout */
    for (size_t i = 0; i < h->tcap; i++)
        if (h->toks[i].hash) h->toks[i].off = t->tok_off[h->toks[i].id];
    for (int i = 0; i < h->nadded; i++) h->added[i].off = t->tok_off[h->added[i].id];
    /* an added token whose id is also a vocab entry keeps the vocab's bytes; find its content elsewhere */
    for (int i = 0; i < h->nadded; i++) {
        const added_tok *a = &h->added[i];
        if (a->len != t->tok_off[a->id + 1] - t->tok_off[a->id]) {
            free(ordered); free(len_of); free(off_of); free(set);
            BAD("%s: field added_tokens[] id %d: its content differs from model.vocab's token with that id", path, a->id);
        }
    }
    free(t->tok_pool);
    t->tok_pool = ordered;
    free(len_of); free(off_of); free(set);

    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        if ((t->byte_id[b] = tok_get(t, &c, 1)) < 0) BAD("%s: field model.vocab: no token for the byte 0x%02x (byte-level BPE needs all 256)", path, b);
    }
    t->eod = tok_get(t, (const unsigned char *)"<|end_of_text|>", 15);
    if (t->eod < 0) t->eod = tok_get(t, (const unsigned char *)"<|endoftext|>", 13);
    for (int i = 0; i < h->nadded && t->eod < 0; i++) {
        const added_tok *a = &h->added[i];
        const char *s = (const char *)t->tok_pool + a->off;
        if ((a->len == 15 && !memcmp(s, "<|end_of_text|>", 15)) || (a->len == 13 && !memcmp(s, "<|endoftext|>", 13))) t->eod = a->id;
    }

    /* merges: (left id, right id) -> (rank, merged id); a later duplicate wins, as in Hugging Face's reader */
    h->mcap = 16;
    while (h->mcap < 2 * (size_t)merges->count) h->mcap *= 2;
    h->merges = calloc(h->mcap, sizeof *h->merges);
    tmp = malloc(4096);
    if (!h->merges || !tmp) { st = cl_error(CL_ERR_OOM, "%s: out of host memory for %d merges", path, merges->count); goto done; }
    int rank = 0;
    for (const cl_json *e = merges->child; e; e = e->next, rank++) {
        const char *a, *b;
        size_t na, nb;
        if (e->type == CL_JSON_STRING) {
            const char *sp = memchr(e->string, ' ', e->string_len);
            if (!sp || memchr(sp + 1, ' ', e->string_len - (size_t)(sp + 1 - e->string)))
                BAD("%s: field model.merges[%d]: '%s' is not two tokens separated by one space", path, rank, e->string);
            a = e->string; na = (size_t)(sp - a); b = sp + 1; nb = e->string_len - na - 1;
        } else if (e->type == CL_JSON_ARRAY && e->count == 2 && e->child->type == CL_JSON_STRING && e->child->next->type == CL_JSON_STRING) {
            a = e->child->string; na = e->child->string_len; b = e->child->next->string; nb = e->child->next->string_len;
        } else {
            BAD("%s: field model.merges[%d]: neither an \"a b\" string nor a pair of strings", path, rank);
        }
        if (na + nb > 4096) BAD("%s: field model.merges[%d]: too long", path, rank);
        long ka = bytelevel_decode(a, na, u2b, tmp), kb = ka > 0 ? bytelevel_decode(b, nb, u2b, tmp + ka) : -1;
        int32_t l = ka > 0 ? tok_get(t, tmp, (size_t)ka) : -1, rr = kb > 0 ? tok_get(t, tmp + ka, (size_t)kb) : -1;
        int32_t m = (l >= 0 && rr >= 0) ? tok_get(t, tmp, (size_t)(ka + kb)) : -1;
        if (m < 0) BAD("%s: field model.merges[%d]: a part or the merged token is not in model.vocab", path, rank);
        uint64_t k = ((uint64_t)(uint32_t)(l + 1) << 32) | (uint32_t)(rr + 1);
        size_t i = mix64(k) & (h->mcap - 1);
        while (h->merges[i].key && h->merges[i].key != k) i = (i + 1) & (h->mcap - 1);
        h->merges[i] = (merge_slot){k, rank, m};
    }
    char what[4200];
    snprintf(what, sizeof what, "%s: field pre_tokenizer's Regex", path);
    st = cl_pretok_compile(&t->pretok, re, what);
done:
#undef BAD
    free(tmp);
    cl_json_free(doc);
    return st;
}

cl_status cl_tokenizer_hf(cl_tokenizer **out, const char *dir)
{
    *out = NULL;
    char found[4096];
    if (!dir) { /* Llama 3's, as scripts/setup.sh prepares it */
        CL_TRY(cl_data_find("llama3", found, sizeof found));
        dir = found;
    }
    if (!*dir) return cl_error(CL_ERR_INVALID, "hf tokenizer: no directory given (--tokenizer-dir DIR, holding tokenizer.json)");
    size_t n = strlen(dir) + 16;
    char *path = malloc(n);
    cl_tokenizer *t = calloc(1, sizeof *t);
    struct cl_hf *h = calloc(1, sizeof *h);
    char *text = NULL;
    size_t len = 0;
    cl_status st;
    if (!path || !t || !h) { st = cl_error(CL_ERR_OOM, "hf tokenizer: out of host memory"); free(h); goto fail; }
    snprintf(path, n, "%s/tokenizer.json", dir);
    t->kind = CL_TOK_HF;
    t->hf = h;
    if ((st = cl_read_file(path, CL_FILE_TOKENIZER, &text, &len))) goto fail;
    /* the seed names the encoding rules: 0x68667471 since the pre-tokenizer's
     * classes became JavaScript's (pretok.c), which changed ids of texts with
     * U+FEFF, U+0085, U+180E or Unicode 16-17 letters, so older FILE.hf.tok
     * caches are rebuilt */
    t->files_hash = cl_hash64(text, len, 0x68667471ull);
    if ((st = load(t, path, text, len))) goto fail;
    free(text);
    free(path);
    *out = t;
    return CL_OK;
fail:
    free(text);
    free(path);
    if (t) cl_hf_release(t);
    free(t);
    return st;
}

/* ---- encoding ---------------------------------------------------------------- */

typedef struct {
    const cl_tokenizer *t;
    int32_t *ids;
    size_t n, cap;
    int32_t *sym;   /* one word's symbols */
    size_t scap;
} enc_state;

static int push_id(enc_state *S, int32_t id)
{
    if (S->n == S->cap) {
        size_t c = S->cap ? 2 * S->cap : 1024;
        int32_t *p = realloc(S->ids, c * sizeof *p);
        if (!p) return 0;
        S->ids = p;
        S->cap = c;
    }
    S->ids[S->n++] = id;
    return 1;
}

/* one pre-token's ids */
static int bpe_word(const cl_tokenizer *t, enc_state *S, const unsigned char *w, size_t m)
{
    const struct cl_hf *h = t->hf;
    if (m == 0) return 1;
    if (h->ignore_merges || m == 1) {
        int32_t id = tok_get(t, w, m);
        if (id >= 0) return push_id(S, id);
    }
    if (m > S->scap) {
        int32_t *p = realloc(S->sym, m * sizeof *p);
        if (!p) return 0;
        S->sym = p;
        S->scap = m;
    }
    int32_t *s = S->sym;
    size_t k = m;
    for (size_t i = 0; i < m; i++) s[i] = t->byte_id[w[i]];
    while (k > 1) {
        int32_t best = INT32_MAX, to = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < k; i++) {
            const merge_slot *e = merge_get(h, s[i], s[i + 1]);
            if (e && e->rank < best) { best = e->rank; to = e->id; at = i; }
        }
        if (to < 0) break;
        s[at] = to;
        memmove(s + at + 1, s + at + 2, (k - at - 2) * sizeof *s);
        k--;
    }
    for (size_t i = 0; i < k; i++)
        if (!push_id(S, s[i])) return 0;
    return 1;
}

/* cl_pretok_split's piece */
static int encode_piece(void *ctx, const unsigned char *w, size_t m)
{
    enc_state *S = ctx;
    return bpe_word(S->t, S, w, m);
}

/* pre-tokenizes and encodes s[0..n), which holds no added token: 1, 0 out
 * of memory, -1 a PCRE2 failure */
static int encode_plain(const cl_tokenizer *t, enc_state *S, const unsigned char *s, size_t n)
{
    return cl_pretok_split(t->pretok, CL_PRETOK_INVALID_ALONE, s, n, encode_piece, S);
}

cl_status cl_hf_encode(const cl_tokenizer *t, const char *text, size_t len, int32_t **out, size_t *n)
{
    const struct cl_hf *h = t->hf;
    const unsigned char *s = (const unsigned char *)text;
    enc_state S = {0};
    S.t = t;
    int ok = 1;
    size_t start = 0;
    for (size_t i = 0; ok && i < len; i++) {
        if (!h->first[s[i]]) continue;
        const added_tok *best = NULL;
        for (int k = 0; k < h->nadded; k++) {
            const added_tok *a = &h->added[k];
            if (a->len <= len - i && (!best || a->len > best->len) && !memcmp(t->tok_pool + a->off, s + i, a->len)) best = a;
        }
        if (!best) continue;
        ok = encode_plain(t, &S, s + start, i - start);
        if (ok == 1) ok = push_id(&S, best->id);
        i += best->len - 1;
        start = i + 1;
    }
    if (ok == 1 && start < len) ok = encode_plain(t, &S, s + start, len - start);
    if (ok != 1) {
        free(S.ids);
        free(S.sym);
        return ok < 0 ? cl_error(CL_ERR_INVALID, "hf tokenizer: the pre-tokenizer's regex failed to match (PCRE2 error)")
                      : cl_error(CL_ERR_OOM, "hf tokenizer: out of host memory encoding %zu bytes", len);
    }
    free(S.sym);
    if (!S.ids) S.ids = malloc(sizeof *S.ids);
    if (!S.ids) return cl_error(CL_ERR_OOM, "hf tokenizer: out of host memory");
    *out = S.ids;
    *n = S.n;
    return CL_OK;
}
#endif /* CL_HAVE_PCRE2 */
