/* cleave json: a strict RFC 8259 reader and a growing string buffer for
 * writers (see json.h).
 *
 * Why: safetensors headers, config.json and trainer state are read from files
 * a person may have edited or a tool may have truncated; every deviation from
 * the grammar is reported with its byte offset instead of being guessed at.
 *
 * Invariants: the reader never reads past text[len - 1] and never needs a NUL
 * terminator; nesting is limited to CL_JSON_MAX_DEPTH, so recursion depth is
 * bounded whatever the input; every node and decoded string lives in the
 * document's arena and is freed with it; decoded strings are valid UTF-8,
 * NUL-terminated and contain no NUL (\u0000 is refused); a cl_strbuf's buf is
 * NUL-terminated whenever it is non-NULL, and once `failed` is set it stops
 * growing. */
#include "cleave/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CL_JSON_MAX_DEPTH 64
#define ARENA_BLOCK (64 * 1024)

typedef struct arena_block arena_block;
struct arena_block {
    arena_block *prev;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

struct cl_json_doc {
    arena_block *blocks;
    cl_json *root;
};

typedef struct {
    const unsigned char *p; /* text */
    size_t len, pos;
    cl_json_doc *doc;
} parser;

/* ---- arena ---- */

static void *arena_alloc(cl_json_doc *d, size_t n) {
    n = (n + 15) & ~(size_t)15;
    arena_block *b = d->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->prev = d->blocks;
        b->used = 0;
        b->cap = cap;
        d->blocks = b;
    }
    void *r = b->data + b->used;
    b->used += n;
    return r;
}

/* ---- errors ---- */

static cl_status fail_at(size_t off, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cl_status fail_at(size_t off, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cl_error(CL_ERR_FORMAT, "json: offset %zu: %s", off, msg);
}

static cl_status oom(void) { return cl_error(CL_ERR_OOM, "json: out of host memory while parsing"); }

/* Describes the byte at pos for messages: "'x'", "byte 0x07" or "end of input". */
static const char *describe(const parser *ps, size_t pos, char *buf, size_t n) {
    if (pos >= ps->len) snprintf(buf, n, "end of input");
    else if (ps->p[pos] > 0x20 && ps->p[pos] < 0x7f) snprintf(buf, n, "'%c'", ps->p[pos]);
    else snprintf(buf, n, "byte 0x%02x", ps->p[pos]);
    return buf;
}

/* ---- UTF-8 ---- */

/* Length of the valid UTF-8 sequence starting at s[0] (at most n bytes
 * available), or 0 if it is invalid: overlong forms, surrogates, code
 * points above U+10FFFF, stray continuation bytes and truncation. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t k;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) k = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        k = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        k = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else return 0;
    if (n < k) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return k;
}

int cl_json_utf8_valid(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        size_t k = utf8_seq(u + i, len - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

static size_t utf8_put(unsigned char *out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xc0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xe0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* ---- the grammar ---- */

static void skip_ws(parser *ps) {
    while (ps->pos < ps->len) {
        unsigned char c = ps->p[ps->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        ps->pos++;
    }
}

static int hex4(const unsigned char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = s[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        v = v * 16 + d;
    }
    *out = v;
    return 1;
}

/* Parses the string starting at the '"' at ps->pos into a fresh arena copy. */
static cl_status parse_string(parser *ps, char **out, size_t *out_len) {
    size_t start = ps->pos++;
    /* First pass: find the closing quote, validate, and size the output.
     * The decoded form is never longer than the source. */
    size_t i = ps->pos;
    for (;;) {
        if (i >= ps->len) return fail_at(start, "unterminated string");
        unsigned char c = ps->p[i];
        if (c == '"') break;
        if (c == '\\') { i += 2; continue; }
        i++;
    }
    size_t cap = i - ps->pos + 1;
    unsigned char *buf = arena_alloc(ps->doc, cap);
    if (!buf) return oom();
    size_t n = 0;
    for (;;) {
        if (ps->pos >= ps->len) return fail_at(start, "unterminated string");
        size_t at = ps->pos;
        unsigned char c = ps->p[at];
        if (c == '"') { ps->pos++; break; }
        if (c < 0x20)
            return fail_at(at, "control character 0x%02x in a string (write it as an escape, e.g. \\n or \\u%04x)", c, c);
        if (c == '\\') {
            if (at + 1 >= ps->len) return fail_at(start, "unterminated string");
            unsigned char e = ps->p[at + 1];
            ps->pos += 2;
            switch (e) {
            case '"': buf[n++] = '"'; break;
            case '\\': buf[n++] = '\\'; break;
            case '/': buf[n++] = '/'; break;
            case 'b': buf[n++] = '\b'; break;
            case 'f': buf[n++] = '\f'; break;
            case 'n': buf[n++] = '\n'; break;
            case 'r': buf[n++] = '\r'; break;
            case 't': buf[n++] = '\t'; break;
            case 'u': {
                uint32_t cp;
                if (ps->len - ps->pos < 4 || !hex4(ps->p + ps->pos, &cp))
                    return fail_at(at, "\\u must be followed by four hex digits");
                ps->pos += 4;
                if (cp >= 0xdc00 && cp <= 0xdfff)
                    return fail_at(at, "\\u%04x is a low surrogate without a high surrogate before it", cp);
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    uint32_t lo;
                    if (ps->len - ps->pos < 6 || ps->p[ps->pos] != '\\' || ps->p[ps->pos + 1] != 'u' ||
                        !hex4(ps->p + ps->pos + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                        return fail_at(at, "\\u%04x is a high surrogate not followed by a \\u escape of a low surrogate", cp);
                    ps->pos += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                if (cp == 0) return fail_at(at, "\\u0000 (NUL) is not allowed in strings");
                /* \uXXXX is 6 source bytes (12 for a pair) and at most 4 output bytes. */
                n += utf8_put(buf + n, cp);
                break;
            }
            default:
                if (e > 0x20 && e < 0x7f) return fail_at(at, "invalid escape '\\%c' in a string", e);
                return fail_at(at, "invalid escape (backslash followed by byte 0x%02x) in a string", e);
            }
            continue;
        }
        size_t k = utf8_seq(ps->p + at, ps->len - at);
        if (!k) return fail_at(at, "invalid UTF-8 (byte 0x%02x) in a string", c);
        memcpy(buf + n, ps->p + at, k);
        n += k;
        ps->pos += k;
    }
    buf[n] = 0;
    *out = (char *)buf;
    *out_len = n;
    return CL_OK;
}

static cl_status parse_number(parser *ps, cl_json *v) {
    size_t start = ps->pos, i = ps->pos;
    const unsigned char *p = ps->p;
    int neg = 0, is_int = 1;
    if (i < ps->len && p[i] == '-') { neg = 1; i++; }
    if (i >= ps->len || p[i] < '0' || p[i] > '9') {
        char d[32];
        return fail_at(i, "expected a digit after '-', found %s", describe(ps, i, d, sizeof d));
    }
    if (p[i] == '0') {
        i++;
        if (i < ps->len && p[i] >= '0' && p[i] <= '9') return fail_at(start, "numbers must not have leading zeros");
    } else {
        while (i < ps->len && p[i] >= '0' && p[i] <= '9') i++;
    }
    size_t int_end = i;
    if (i < ps->len && p[i] == '.') {
        is_int = 0;
        i++;
        if (i >= ps->len || p[i] < '0' || p[i] > '9') return fail_at(i, "expected a digit after the decimal point");
        while (i < ps->len && p[i] >= '0' && p[i] <= '9') i++;
    }
    if (i < ps->len && (p[i] == 'e' || p[i] == 'E')) {
        is_int = 0;
        i++;
        if (i < ps->len && (p[i] == '+' || p[i] == '-')) i++;
        if (i >= ps->len || p[i] < '0' || p[i] > '9') return fail_at(i, "expected a digit in the exponent");
        while (i < ps->len && p[i] >= '0' && p[i] <= '9') i++;
    }
    size_t n = i - start;
    char small[64], *tmp = small;
    if (n >= sizeof small) {
        tmp = malloc(n + 1);
        if (!tmp) return oom();
    }
    memcpy(tmp, p + start, n);
    tmp[n] = 0;
    errno = 0;
    double d = strtod(tmp, NULL);
    int range = errno == ERANGE;
    if (tmp != small) free(tmp);
    if (range && (d > 1.0 || d < -1.0)) return fail_at(start, "number out of the range of a double");
    v->type = CL_JSON_NUMBER;
    v->number = d;
    if (is_int) {
        /* Accumulate negatively so INT64_MIN fits. */
        int64_t acc = 0;
        int fits = 1;
        for (size_t k = start + (size_t)neg; k < int_end; k++) {
            int dig = p[k] - '0';
            if (acc < (INT64_MIN + dig) / 10) { fits = 0; break; }
            acc = acc * 10 - dig;
        }
        if (fits && !neg && acc == INT64_MIN) fits = 0;
        if (fits) {
            v->number_is_int = 1;
            v->integer = neg ? acc : -acc;
        }
    }
    ps->pos = i;
    return CL_OK;
}

static cl_status expect_word(parser *ps, const char *w) {
    size_t n = strlen(w);
    if (ps->len - ps->pos < n || memcmp(ps->p + ps->pos, w, n) != 0) return fail_at(ps->pos, "invalid literal (expected '%s')", w);
    ps->pos += n;
    return CL_OK;
}

static cl_status parse_value(parser *ps, cl_json *v, int depth);

static cl_status parse_array(parser *ps, cl_json *v, int depth) {
    v->type = CL_JSON_ARRAY;
    ps->pos++; /* '[' */
    skip_ws(ps);
    if (ps->pos < ps->len && ps->p[ps->pos] == ']') { ps->pos++; return CL_OK; }
    cl_json **tail = &v->child;
    for (;;) {
        cl_json *e = arena_alloc(ps->doc, sizeof *e);
        if (!e) return oom();
        memset(e, 0, sizeof *e);
        *tail = e;
        tail = &e->next;
        v->count++;
        CL_TRY(parse_value(ps, e, depth));
        skip_ws(ps);
        char d[32];
        if (ps->pos >= ps->len) return fail_at(ps->pos, "unterminated array: expected ',' or ']', found end of input");
        unsigned char c = ps->p[ps->pos];
        if (c == ']') { ps->pos++; return CL_OK; }
        if (c != ',') return fail_at(ps->pos, "expected ',' or ']' in an array, found %s", describe(ps, ps->pos, d, sizeof d));
        ps->pos++;
        skip_ws(ps);
        if (ps->pos < ps->len && ps->p[ps->pos] == ']') return fail_at(ps->pos, "trailing comma before ']'");
    }
}

static cl_status parse_object(parser *ps, cl_json *v, int depth) {
    v->type = CL_JSON_OBJECT;
    ps->pos++; /* '{' */
    skip_ws(ps);
    if (ps->pos < ps->len && ps->p[ps->pos] == '}') { ps->pos++; return CL_OK; }
    cl_json **tail = &v->child;
    char d[32];
    for (;;) {
        if (ps->pos >= ps->len || ps->p[ps->pos] != '"')
            return fail_at(ps->pos, "expected a member name in double quotes, found %s", describe(ps, ps->pos, d, sizeof d));
        cl_json *e = arena_alloc(ps->doc, sizeof *e);
        if (!e) return oom();
        memset(e, 0, sizeof *e);
        *tail = e;
        tail = &e->next;
        v->count++;
        CL_TRY(parse_string(ps, &e->key, &e->key_len));
        skip_ws(ps);
        if (ps->pos >= ps->len || ps->p[ps->pos] != ':')
            return fail_at(ps->pos, "expected ':' after member name, found %s", describe(ps, ps->pos, d, sizeof d));
        ps->pos++;
        CL_TRY(parse_value(ps, e, depth));
        skip_ws(ps);
        if (ps->pos >= ps->len) return fail_at(ps->pos, "unterminated object: expected ',' or '}', found end of input");
        unsigned char c = ps->p[ps->pos];
        if (c == '}') { ps->pos++; return CL_OK; }
        if (c != ',') return fail_at(ps->pos, "expected ',' or '}' in an object, found %s", describe(ps, ps->pos, d, sizeof d));
        ps->pos++;
        skip_ws(ps);
        if (ps->pos < ps->len && ps->p[ps->pos] == '}') return fail_at(ps->pos, "trailing comma before '}'");
    }
}

/* depth: containers already open around v. */
static cl_status parse_value(parser *ps, cl_json *v, int depth) {
    skip_ws(ps);
    char d[32];
    if (ps->pos >= ps->len) return fail_at(ps->pos, "expected a value, found end of input");
    unsigned char c = ps->p[ps->pos];
    switch (c) {
    case '{':
    case '[':
        if (depth >= CL_JSON_MAX_DEPTH) return fail_at(ps->pos, "nesting deeper than %d levels", CL_JSON_MAX_DEPTH);
        return c == '{' ? parse_object(ps, v, depth + 1) : parse_array(ps, v, depth + 1);
    case '"':
        v->type = CL_JSON_STRING;
        return parse_string(ps, &v->string, &v->string_len);
    case 't':
        v->type = CL_JSON_BOOL;
        v->boolean = 1;
        return expect_word(ps, "true");
    case 'f':
        v->type = CL_JSON_BOOL;
        return expect_word(ps, "false");
    case 'n':
        v->type = CL_JSON_NULL;
        return expect_word(ps, "null");
    case '-':
        if (ps->pos + 1 < ps->len && ps->p[ps->pos + 1] == 'I')
            return fail_at(ps->pos, "-Infinity is not valid JSON");
        return parse_number(ps, v);
    default:
        if (c >= '0' && c <= '9') return parse_number(ps, v);
        if (c == 'N' || c == 'I') return fail_at(ps->pos, "NaN and Infinity are not valid JSON");
        if (c == 0xef && ps->len - ps->pos >= 3 && ps->p[ps->pos + 1] == 0xbb && ps->p[ps->pos + 2] == 0xbf)
            return fail_at(ps->pos, "unexpected byte order mark (the text must start with a value)");
        return fail_at(ps->pos, "expected a value, found %s", describe(ps, ps->pos, d, sizeof d));
    }
}

cl_status cl_json_parse(cl_json_doc **out, const char *text, size_t len) {
    *out = NULL;
    if (!text && len) return cl_error(CL_ERR_INVALID, "json: NULL text with length %zu", len);
    cl_json_doc *doc = calloc(1, sizeof *doc);
    if (!doc) return oom();
    parser ps = {.p = (const unsigned char *)text, .len = len, .pos = 0, .doc = doc};
    cl_status s = CL_OK;
    doc->root = arena_alloc(doc, sizeof *doc->root);
    if (!doc->root) s = oom();
    if (!s) {
        memset(doc->root, 0, sizeof *doc->root);
        if (len == 0) s = fail_at(0, "empty document");
        else s = parse_value(&ps, doc->root, 0);
    }
    if (!s) {
        skip_ws(&ps);
        if (ps.pos < len) {
            char d[32];
            s = fail_at(ps.pos, "unexpected %s after the document's value", describe(&ps, ps.pos, d, sizeof d));
        }
    }
    if (s) {
        cl_json_free(doc);
        return s;
    }
    *out = doc;
    return CL_OK;
}

const cl_json *cl_json_root(const cl_json_doc *d) { return d ? d->root : NULL; }

void cl_json_free(cl_json_doc *d) {
    if (!d) return;
    arena_block *b = d->blocks;
    while (b) {
        arena_block *p = b->prev;
        free(b);
        b = p;
    }
    free(d);
}

const cl_json *cl_json_get(const cl_json *obj, const char *key) {
    if (!obj || obj->type != CL_JSON_OBJECT || !key) return NULL;
    size_t n = strlen(key);
    for (const cl_json *m = obj->child; m; m = m->next)
        if (m->key_len == n && memcmp(m->key, key, n) == 0) return m;
    return NULL;
}

int cl_json_get_int(const cl_json *obj, const char *key, int *out) {
    const cl_json *v = cl_json_get(obj, key);
    if (!v || v->type != CL_JSON_NUMBER || !v->number_is_int || v->integer < INT32_MIN || v->integer > INT32_MAX) return 0;
    *out = (int)v->integer;
    return 1;
}

/* ---- string buffer ---- */

static int sb_reserve(cl_strbuf *b, size_t extra) {
    if (b->failed) return 0;
    if (extra > SIZE_MAX - b->len - 1) { b->failed = 1; return 0; }
    size_t need = b->len + extra + 1;
    if (b->buf && need <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->buf, cap);
    if (!p) { b->failed = 1; return 0; }
    if (!b->buf) p[0] = 0;
    b->buf = p;
    b->cap = cap;
    return 1;
}

void cl_sb_printf(cl_strbuf *b, const char *fmt, ...) {
    if (b->failed) return;
    va_list ap;
    va_start(ap, fmt);
    char probe[256];
    int n = vsnprintf(probe, sizeof probe, fmt, ap);
    va_end(ap);
    if (n < 0) { b->failed = 1; return; }
    if (!sb_reserve(b, (size_t)n)) return;
    if ((size_t)n < sizeof probe) memcpy(b->buf + b->len, probe, (size_t)n + 1);
    else {
        va_start(ap, fmt);
        vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

void cl_sb_json_string(cl_strbuf *b, const char *s, size_t len) {
    /* Worst case: every byte becomes \u00XX, plus the quotes. */
    if (len > (SIZE_MAX - 2) / 6) { b->failed = 1; return; }
    if (!sb_reserve(b, len * 6 + 2)) return;
    char *o = b->buf + b->len;
    *o++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': *o++ = '\\'; *o++ = '"'; break;
        case '\\': *o++ = '\\'; *o++ = '\\'; break;
        case '\b': *o++ = '\\'; *o++ = 'b'; break;
        case '\f': *o++ = '\\'; *o++ = 'f'; break;
        case '\n': *o++ = '\\'; *o++ = 'n'; break;
        case '\r': *o++ = '\\'; *o++ = 'r'; break;
        case '\t': *o++ = '\\'; *o++ = 't'; break;
        default:
            if (c < 0x20 || c == 0x7f) {
                static const char hex[] = "0123456789abcdef";
                *o++ = '\\'; *o++ = 'u'; *o++ = '0'; *o++ = '0';
                *o++ = hex[c >> 4];
                *o++ = hex[c & 15];
            } else *o++ = (char)c;
        }
    }
    *o++ = '"';
    *o = 0;
    b->len = (size_t)(o - b->buf);
}

void cl_sb_free(cl_strbuf *b) {
    free(b->buf);
    b->buf = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
}
