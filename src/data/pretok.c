/* cleave data: pre-tokenizer regexes in JavaScript's dialect, run by PCRE2
 * (UTF mode, JIT when the library has it), for GPT-2's BPE and Hugging Face
 * tokenizer.json BPE.
 *
 * Why: both tokenizers' references are JavaScript (gpt-3-encoder, and
 * @lenml/tokenizers for tokenizer.json), whose /u regexes differ from
 * PCRE2's in a few classes. Measured over every code point with
 * scripts/unicode_classes.sh (node v20.20.2, Unicode 17.0, against Debian
 * 12's PCRE2 10.42, Unicode 15.0):
 *   - \s: JavaScript's is WhiteSpace and LineTerminator (tab, VT, FF, space,
 *     U+00A0, U+1680, U+2000..U+200A, U+202F, U+205F, U+3000, U+FEFF; LF, CR,
 *     U+2028, U+2029); PCRE2's (with or without UCP) lacks U+FEFF and has
 *     U+0085 and U+180E;
 *   - \p{L} and \p{N}: node's newer Unicode has 13,916 letters and 133
 *     numbers that PCRE2 10.42 does not know (Unicode 15.1 to 17.0 scripts,
 *     CJK extensions); none the other way;
 *   - \d, \w, \b: ASCII in JavaScript's /u mode, as in PCRE2 without UCP.
 * So the pattern is compiled with PCRE2_UTF and not PCRE2_UCP, and \s \S
 * \p{L} \p{N} \P{L} \P{N} are rewritten before compiling into explicit
 * classes: JavaScript's \s spelled out, \p{L} and \p{N} with the code points
 * node has beyond PCRE2's (a newer PCRE2 already holds them; a union is
 * harmless). \S, \P{L} or \P{N} inside a character class cannot be spelled
 * as a union and is refused. Other escapes keep PCRE2's meaning. Case-
 * insensitive matching in UTF mode folds with Unicode's tables in both.
 *
 * Invalid UTF-8 never reaches PCRE2 (it is matched with PCRE2_NO_UTF_CHECK):
 * each invalid byte is either a piece of its own, or (GPT-2, where the
 * hand-written matcher this replaces treated it so, keeping old token
 * caches' ids) matched as U+0001, a character that is neither letter, number
 * nor space, in a copy of the text, the pieces cut from the original bytes.
 *
 * Invariants: a cl_pretok is read-only after compiling; the pieces of a
 * split are consecutive and cover the text exactly. */
#include <stdlib.h>
#include <string.h>

#include "data/pretok.h"

int cl_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

const char cl_pretok_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

#ifndef CL_HAVE_PCRE2
cl_status cl_pretok_compile(cl_pretok **out, const char *pattern, const char *what)
{
    (void)pattern; (void)what;
    *out = NULL;
    return cl_error(CL_ERR_UNSUPPORTED, "this build has no PCRE2 (install libpcre2-dev and rebuild)");
}
void cl_pretok_free(cl_pretok *p) { (void)p; }
int cl_pretok_split(const cl_pretok *p, int invalid, const unsigned char *s, size_t n, cl_pretok_piece piece, void *ctx)
{
    (void)p; (void)invalid; (void)s; (void)n; (void)piece; (void)ctx;
    return -1;
}
int cl_pretok_whole(const cl_pretok *p, const unsigned char *s, size_t n)
{
    (void)p; (void)s; (void)n;
    return 0;
}
#else
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

struct cl_pretok {
    pcre2_code *code;
};

/* JavaScript's \s, as class members (\x20 for the space, so (?x) keeps it) */
static const char js_space[] =
    "\\x09-\\x0D\\x20\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}";
/* letters of node's Unicode 17.0 that PCRE2 10.42's \p{L} lacks (scripts/unicode_classes.sh prints them) */
static const char js_letter_extra[] =
    "\\x{88F}\\x{C5C}\\x{CDC}\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CF}\\x{A7D2}\\x{A7D4}\\x{A7DA}-\\x{A7DC}\\x{A7F1}"
    "\\x{105C0}-\\x{105F3}\\x{10940}-\\x{10959}\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC7}"
    "\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}"
    "\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11DB0}-\\x{11DDB}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}"
    "\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}\\x{16D40}-\\x{16D6C}"
    "\\x{16EA0}-\\x{16EB8}\\x{16EBB}-\\x{16ED3}\\x{16FF2}-\\x{16FF3}\\x{187F8}-\\x{187FF}\\x{18CFF}"
    "\\x{18D09}-\\x{18D1E}\\x{18D80}-\\x{18DF2}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}"
    "\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{1E6C0}-\\x{1E6DE}\\x{1E6E0}-\\x{1E6E2}"
    "\\x{1E6E4}-\\x{1E6E5}\\x{1E6E7}-\\x{1E6ED}\\x{1E6F0}-\\x{1E6F4}\\x{1E6FE}-\\x{1E6FF}\\x{2B739}-\\x{2B73F}"
    "\\x{2CEA2}-\\x{2CEAD}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{33479}";
/* numbers of node's Unicode 17.0 that PCRE2 10.42's \p{N} lacks */
static const char js_number_extra[] =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11DE0}-\\x{11DE9}\\x{11F50}-\\x{11F59}"
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{16FF4}-\\x{16FF6}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}"
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* Which of \p{L} / \p{N} the escape at s (just after "\p" or "\P") names:
 * 'L' or 'N' and its length ("{L}" 3, "L" 1), or 0. */
static int prop_at(const char *s, size_t *len)
{
    if ((s[0] == 'L' || s[0] == 'N') && s[1] != '&') { *len = 1; return s[0]; }
    if (s[0] == '{' && (s[1] == 'L' || s[1] == 'N') && s[2] == '}') { *len = 3; return s[1]; }
    return 0;
}

/* Rewrites a JavaScript /u pattern for PCRE2 (see the top of the file).
 * Returns NULL with *bad set to a reason when it cannot. */
static char *rewrite(const char *re, const char **bad)
{
    sbuf b = {0};
    int in_class = 0;
    puts_(&b, "");
    for (size_t i = 0; re[i];) {
        char c = re[i];
        if (c == '\\' && re[i + 1]) {
            char e = re[i + 1];
            size_t plen = 0;
            int prop = (e == 'p' || e == 'P') ? prop_at(re + i + 2, &plen) : 0;
            if (e == 'Q') { /* literal up to \E */
                const char *end = strstr(re + i + 2, "\\E");
                size_t k = end ? (size_t)(end - re) + 2 : strlen(re);
                put(&b, re + i, k - i);
                i = k;
                continue;
            }
            if (e == 's' || e == 'S' || prop) {
                const char *extra = prop == 'L' ? js_letter_extra : js_number_extra;
                const char *base = prop == 'L' ? "\\p{L}" : "\\p{N}";
                int neg = e == 'S' || e == 'P';
                if (in_class && neg) {
                    *bad = "\\S, \\P{L} or \\P{N} inside a character class is not supported";
                    free(b.p);
                    return NULL;
                }
                if (!in_class) puts_(&b, neg ? "[^" : "[");
                if (e == 's' || e == 'S') puts_(&b, js_space);
                else { puts_(&b, base); puts_(&b, extra); }
                if (!in_class) puts_(&b, "]");
                i += 2 + plen;
                continue;
            }
            put(&b, re + i, 2); /* any other escape, as it is */
            i += 2;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            size_t k = i + 1;
            if (re[k] == '^') k++;
            if (re[k] == ']') k++; /* a leading ']' is a member */
            put(&b, re + i, k - i);
            i = k;
            continue;
        }
        if (in_class && c == '[' && re[i + 1] == ':') { /* a POSIX class, [:name:] */
            const char *end = strstr(re + i + 2, ":]");
            size_t k = end ? (size_t)(end - re) + 2 : i + 1;
            put(&b, re + i, k - i);
            i = k;
            continue;
        }
        if (in_class && c == ']') in_class = 0;
        put(&b, re + i, 1);
        i++;
    }
    if (b.oom) {
        free(b.p);
        *bad = "out of host memory";
        return NULL;
    }
    return b.p;
}

cl_status cl_pretok_compile(cl_pretok **out, const char *pattern, const char *what)
{
    *out = NULL;
    const char *bad = NULL;
    char *re = rewrite(pattern, &bad);
    if (!re) return cl_error(CL_ERR_FORMAT, "%s: %s", what, bad);
    int err;
    PCRE2_SIZE at;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &at, NULL);
    free(re);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        /* the offset is into the rewritten pattern: name the error only */
        return cl_error(CL_ERR_FORMAT, "%s: %s", what, (const char *)msg);
    }
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* the interpreter runs the same pattern when JIT is unavailable */
    cl_pretok *p = malloc(sizeof *p);
    if (!p) {
        pcre2_code_free(code);
        return cl_error(CL_ERR_OOM, "%s: out of host memory", what);
    }
    p->code = code;
    *out = p;
    return CL_OK;
}

void cl_pretok_free(cl_pretok *p)
{
    if (!p) return;
    pcre2_code_free(p->code);
    free(p);
}

/* length of the valid UTF-8 prefix of s[0..n) */
static size_t valid_prefix(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        uint32_t cp;
        int k = cl_utf8_decode(s + i, n - i, &cp);
        if (!k) return i;
        i += (size_t)k;
    }
    return n;
}

/* Splits valid UTF-8 m[0..v) and hands out the same spans of t (t == m, or
 * the original bytes m is a cleaned copy of). */
static int split_valid(const pcre2_code *re, pcre2_match_data *md, const unsigned char *m,
                       const unsigned char *t, size_t v, cl_pretok_piece piece, void *ctx)
{
    size_t pos = 0, gap = 0;
    while (pos < v) {
        int rc = pcre2_match(re, m, v, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) {
            if (rc == PCRE2_ERROR_NOMATCH) break;
            return -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (b == a) { /* an empty match: step over one character */
            pos = a + 1;
            while (pos < v && (m[pos] & 0xC0) == 0x80) pos++;
            continue;
        }
        if (a > gap && !piece(ctx, t + gap, a - gap)) return 0;
        if (!piece(ctx, t + a, b - a)) return 0;
        gap = pos = b;
    }
    if (v > gap && !piece(ctx, t + gap, v - gap)) return 0;
    return 1;
}

int cl_pretok_split(const cl_pretok *p, int invalid, const unsigned char *s, size_t n, cl_pretok_piece piece, void *ctx)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->code, NULL);
    if (!md) return -1;
    int rc = 1;
    size_t i = 0;
    while (i < n && rc == 1) {
        size_t v = valid_prefix(s + i, n - i);
        if (v < n - i && invalid == CL_PRETOK_INVALID_OTHER) {
            /* the rest, each invalid byte matched as U+0001 */
            size_t r = n - i;
            unsigned char *copy = malloc(r);
            if (!copy) { rc = -1; break; }
            for (size_t k = 0; k < r;) {
                size_t w = valid_prefix(s + i + k, r - k);
                memcpy(copy + k, s + i + k, w);
                k += w;
                if (k < r) copy[k++] = 0x01;
            }
            rc = split_valid(p->code, md, copy, s + i, r, piece, ctx);
            free(copy);
            break;
        }
        if (v == 0) { /* an invalid byte: a piece of its own */
            rc = piece(ctx, s + i, 1) ? 1 : 0;
            i++;
            continue;
        }
        rc = split_valid(p->code, md, s + i, s + i, v, piece, ctx);
        i += v;
    }
    pcre2_match_data_free(md);
    return rc;
}

int cl_pretok_whole(const cl_pretok *p, const unsigned char *s, size_t n)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->code, NULL);
    if (!md) return 0;
    int rc = pcre2_match(p->code, s, n, 0, PCRE2_ANCHORED, md, NULL);
    int whole = rc >= 0 && pcre2_get_ovector_pointer(md)[1] == n;
    pcre2_match_data_free(md);
    return whole;
}
#endif /* CL_HAVE_PCRE2 */
