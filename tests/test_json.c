/* Tests for the strict JSON reader and the string buffer (json.h): every
 * value type, nesting, escapes and UTF-8, integer limits, every rejection
 * rule with the byte offset it reports, the depth limit on hostile input,
 * and escaping round trips through the reader. */
#include "cleave/json.h"

#include "common/check.h"

#include <stdlib.h>
#include <string.h>

static cl_json_doc *parse_ok(const char *text, size_t len) {
    cl_json_doc *d = NULL;
    cl_status s = cl_json_parse(&d, text, len);
    CHECK(s == CL_OK && d, "parse '%.*s' -> %s: %s", (int)(len > 60 ? 60 : len), text, cl_status_name(s), cl_last_error());
    return s == CL_OK ? d : NULL;
}

#define PARSE_OK(lit) parse_ok(lit, sizeof(lit) - 1)

/* Expects rejection with CL_ERR_FORMAT, "offset OFF" and `frag` in the message. */
static void reject(const char *text, size_t len, size_t off, const char *frag) {
    cl_json_doc *d = (cl_json_doc *)1;
    cl_status s = cl_json_parse(&d, text, len);
    char want[64];
    snprintf(want, sizeof want, "offset %zu:", off);
    const char *msg = cl_last_error();
    CHECK(s == CL_ERR_FORMAT, "'%.*s' should fail with bad format, got %s", (int)len, text, cl_status_name(s));
    CHECK(d == NULL, "'%.*s': out not NULL on failure", (int)len, text);
    CHECK(strstr(msg, want) != NULL, "'%.*s': message '%s' lacks '%s'", (int)len, text, msg, want);
    CHECK(!frag || strstr(msg, frag) != NULL, "'%.*s': message '%s' lacks '%s'", (int)len, text, msg, frag ? frag : "");
    if (s == CL_OK) cl_json_free(d);
}

#define REJECT(lit, off, frag) reject(lit, sizeof(lit) - 1, off, frag)

static void test_scalars(void) {
    cl_json_doc *d;
    if ((d = PARSE_OK("null"))) { CHECK(cl_json_root(d)->type == CL_JSON_NULL, "null"); cl_json_free(d); }
    if ((d = PARSE_OK(" true "))) {
        CHECK(cl_json_root(d)->type == CL_JSON_BOOL && cl_json_root(d)->boolean == 1, "true");
        cl_json_free(d);
    }
    if ((d = PARSE_OK("false"))) {
        CHECK(cl_json_root(d)->type == CL_JSON_BOOL && cl_json_root(d)->boolean == 0, "false");
        cl_json_free(d);
    }
    if ((d = PARSE_OK("\"hi\""))) {
        const cl_json *r = cl_json_root(d);
        CHECK(r->type == CL_JSON_STRING && r->string_len == 2 && !strcmp(r->string, "hi"), "string");
        cl_json_free(d);
    }
    if ((d = PARSE_OK("\"\""))) {
        const cl_json *r = cl_json_root(d);
        CHECK(r->type == CL_JSON_STRING && r->string_len == 0 && r->string && !r->string[0], "empty string");
        cl_json_free(d);
    }
    struct { const char *t; double v; int is_int; int64_t i; } nums[] = {
        {"0", 0, 1, 0},
        {"-0", 0, 1, 0},
        {"42", 42, 1, 42},
        {"-17", -17, 1, -17},
        {"9223372036854775807", 9223372036854775807.0, 1, INT64_MAX},
        {"-9223372036854775808", -9223372036854775808.0, 1, INT64_MIN},
        {"9223372036854775808", 9223372036854775808.0, 0, 0},
        {"-9223372036854775809", -9223372036854775809.0, 0, 0},
        {"123456789012345678901234567890", 1.2345678901234568e29, 0, 0},
        {"1.5", 1.5, 0, 0},
        {"-0.25", -0.25, 0, 0},
        {"1e3", 1000, 0, 0},
        {"1E+3", 1000, 0, 0},
        {"25e-2", 0.25, 0, 0},
        {"1.0", 1.0, 0, 0},
        {"1e-400", 0, 0, 0}, /* underflows to zero: representable closely enough */
    };
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) {
        if (!(d = parse_ok(nums[k].t, strlen(nums[k].t)))) continue;
        const cl_json *r = cl_json_root(d);
        CHECK(r->type == CL_JSON_NUMBER, "%s type", nums[k].t);
        CHECK(r->number == nums[k].v, "%s: number %.17g, want %.17g", nums[k].t, r->number, nums[k].v);
        CHECK(r->number_is_int == nums[k].is_int, "%s: is_int %d", nums[k].t, r->number_is_int);
        if (nums[k].is_int) CHECK(r->integer == nums[k].i, "%s: integer %lld", nums[k].t, (long long)r->integer);
        cl_json_free(d);
    }
}

static void test_containers(void) {
    const char doc[] = " {\"a\": [1, 2, {\"b\": null}], \"c\": {}, \"d\": [], \"e\": \"x\", \"a2\": true }\r\n\t";
    cl_json_doc *d = PARSE_OK(doc);
    if (!d) return;
    const cl_json *r = cl_json_root(d);
    CHECK(r->type == CL_JSON_OBJECT && r->count == 5, "root object of 5, count %d", r->count);
    const cl_json *a = cl_json_get(r, "a");
    CHECK(a && a->type == CL_JSON_ARRAY && a->count == 3, "a is an array of 3");
    if (a && a->count == 3) {
        CHECK(a->child->integer == 1 && a->child->next->integer == 2, "a[0], a[1]");
        const cl_json *o = a->child->next->next;
        CHECK(o->type == CL_JSON_OBJECT && o->count == 1 && o->next == NULL, "a[2] object, last");
        const cl_json *b = cl_json_get(o, "b");
        CHECK(b && b->type == CL_JSON_NULL && !strcmp(b->key, "b") && b->key_len == 1, "a[2].b is null");
    }
    const cl_json *c = cl_json_get(r, "c"), *dd = cl_json_get(r, "d"), *e = cl_json_get(r, "e");
    CHECK(c && c->type == CL_JSON_OBJECT && c->count == 0 && !c->child, "c empty object");
    CHECK(dd && dd->type == CL_JSON_ARRAY && dd->count == 0 && !dd->child, "d empty array");
    CHECK(e && e->type == CL_JSON_STRING && !strcmp(e->string, "x"), "e");
    CHECK(cl_json_get(r, "a2") && cl_json_get(r, "a2")->boolean == 1, "a2 (prefix of no other key)");
    CHECK(cl_json_get(r, "zz") == NULL, "absent key");
    CHECK(cl_json_get(a, "a") == NULL, "get on an array is NULL");
    CHECK(cl_json_get(NULL, "a") == NULL, "get on NULL is NULL");
    /* order of members is kept */
    const char *order[] = {"a", "c", "d", "e", "a2"};
    int i = 0;
    for (const cl_json *m = r->child; m && i < 5; m = m->next, i++) CHECK(!strcmp(m->key, order[i]), "member %d is %s", i, m->key);
    cl_json_free(d);

    /* exactly 64 levels parse; 65 do not */
    char deep[200];
    for (int k = 0; k < 64; k++) deep[k] = '[', deep[64 + k] = ']';
    if ((d = parse_ok(deep, 128))) cl_json_free(d);
    for (int k = 0; k < 65; k++) deep[k] = '[', deep[65 + k] = ']';
    reject(deep, 130, 64, "nesting deeper than 64");

    /* a hostile, very deep document fails quickly without recursing 1e6 times */
    size_t n = 1000000;
    char *big = malloc(n);
    memset(big, '[', n);
    reject(big, n, 64, "nesting");
    memset(big, '{', n);
    reject(big, n, 1, "member name");
    /* a long flat array "[0,0,...,0]" of n / 2 elements parses */
    free(big);
    big = malloc(n + 1);
    big[0] = '[';
    for (size_t k = 1; k < n; k++) big[k] = k % 2 ? '0' : ',';
    big[n] = ']';
    if ((d = parse_ok(big, n + 1))) {
        CHECK(cl_json_root(d)->count == (int)(n / 2), "long array count %d", cl_json_root(d)->count);
        cl_json_free(d);
    }
    free(big);
}

static void test_strings(void) {
    struct { const char *json; const char *want; size_t wlen; } cases[] = {
        {"\"a\\\"b\\\\c\\/d\"", "a\"b\\c/d", 7},
        {"\"\\b\\f\\n\\r\\t\"", "\b\f\n\r\t", 5},
        {"\"\\u0041\\u00e9\\u20AC\"", "A\xc3\xa9\xe2\x82\xac", 6},
        {"\"\\ud83d\\ude00\"", "\xf0\x9f\x98\x80", 4},          /* U+1F600 from a surrogate pair */
        {"\"\\uDBFF\\uDFFF\"", "\xf4\x8f\xbf\xbf", 4},          /* U+10FFFF */
        {"\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14},
        {"\"\\u007f\x7f\"", "\x7f\x7f", 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cl_json_doc *d = parse_ok(cases[k].json, strlen(cases[k].json));
        if (!d) continue;
        const cl_json *r = cl_json_root(d);
        CHECK(r->type == CL_JSON_STRING && r->string_len == cases[k].wlen && !memcmp(r->string, cases[k].want, cases[k].wlen) &&
                  r->string[r->string_len] == 0,
              "string %zu: decoded %zu bytes", k, r->string_len);
        cl_json_free(d);
    }
    /* escaped keys */
    cl_json_doc *d = PARSE_OK("{\"k\\u0065y\": 1}");
    if (d) {
        CHECK(cl_json_get(cl_json_root(d), "key") != NULL, "escaped key decoded");
        cl_json_free(d);
    }
}

static void test_rejections(void) {
    REJECT("", 0, "empty");
    REJECT("   ", 3, "end of input");
    REJECT("01", 0, "leading zeros");
    REJECT("[-012]", 1, "leading zeros");
    REJECT("[1,]", 3, "trailing comma");
    REJECT("{\"a\":1,}", 7, "trailing comma");
    REJECT("1 x", 2, "after the document");
    REJECT("{} {}", 3, "after the document");
    REJECT("[1] ]", 4, "after the document");
    REJECT("NaN", 0, "NaN");
    REJECT("Infinity", 0, "Infinity");
    REJECT("-Infinity", 0, "Infinity");
    REJECT("[1, nan]", 4, "literal");
    REJECT("tru", 0, "true");
    REJECT("nul", 0, "null");
    REJECT("falsey", 5, "after the document");
    REJECT("+1", 0, "expected a value");
    REJECT(".5", 0, "expected a value");
    REJECT("-", 1, "digit");
    REJECT("1.", 2, "decimal point");
    REJECT("1.e5", 2, "decimal point");
    REJECT("1e", 2, "exponent");
    REJECT("1e+", 3, "exponent");
    REJECT("1e400", 0, "range");
    REJECT("-1e400", 0, "range");
    REJECT("'a'", 0, "expected a value");
    REJECT("{a:1}", 1, "member name");
    REJECT("{\"a\" 1}", 5, "':'");
    REJECT("{\"a\":1 \"b\":2}", 7, "',' or '}'");
    REJECT("[1 2]", 3, "',' or ']'");
    REJECT("[1,", 3, "end of input");
    REJECT("[1", 2, "unterminated array");
    REJECT("{\"a\":1", 6, "unterminated object");
    REJECT("\"abc", 0, "unterminated string");
    REJECT("[\"abc\\\"]", 1, "unterminated string");
    REJECT("\"a\nb\"", 2, "control character");
    REJECT("\"a\tb\"", 2, "control character");
    REJECT("\"a\\xb\"", 2, "invalid escape");
    REJECT("\"\\u12\"", 1, "four hex digits");
    REJECT("\"\\u12g4\"", 1, "four hex digits");
    REJECT("\"\\ud800\"", 1, "high surrogate");
    REJECT("\"\\ud800\\u0041\"", 1, "high surrogate");
    REJECT("\"\\udc00\"", 1, "low surrogate");
    REJECT("\"\\u0000\"", 1, "NUL");
    REJECT("\"ab\xc3\"", 3, "UTF-8");          /* truncated sequence */
    REJECT("\"\xc0\xaf\"", 1, "UTF-8");        /* overlong '/' */
    REJECT("\"\xe0\x80\xaf\"", 1, "UTF-8");    /* overlong, 3 bytes */
    REJECT("\"\xed\xa0\x80\"", 1, "UTF-8");    /* encoded surrogate */
    REJECT("\"\xf4\x90\x80\x80\"", 1, "UTF-8"); /* above U+10FFFF */
    REJECT("\"\xf5\x80\x80\x80\"", 1, "UTF-8");
    REJECT("\"x\x80\"", 2, "UTF-8");           /* stray continuation */
    REJECT("\xef\xbb\xbf{}", 0, "byte order mark");
    REJECT("[1,\x01]", 3, "0x01");
    reject("[1]\0", 4, 3, "after the document"); /* embedded NUL after the value */
    reject("\"a\0b\"", 5, 2, "control character");

    cl_json_doc *d = (cl_json_doc *)1;
    CHECK(cl_json_parse(&d, NULL, 5) == CL_ERR_INVALID && d == NULL, "NULL text is invalid");
}

static void test_strbuf(void) {
    cl_strbuf b = {0};
    cl_sb_printf(&b, "%s", "");
    CHECK(b.buf && b.len == 0 && b.buf[0] == 0, "empty printf gives an empty, terminated buffer");
    cl_sb_printf(&b, "n=%d ", 5);
    for (int i = 0; i < 1000; i++) cl_sb_printf(&b, "%04d", i);
    CHECK(!b.failed && b.len == 4 + 4000, "length %zu", b.len);
    CHECK(!strncmp(b.buf, "n=5 0000000100020003", 20) && !strcmp(b.buf + b.len - 4, "0999") && b.buf[b.len] == 0, "contents");
    char longs[3000];
    memset(longs, 'q', sizeof longs - 1);
    longs[sizeof longs - 1] = 0;
    size_t before = b.len;
    cl_sb_printf(&b, "<%s>", longs); /* longer than the internal probe */
    CHECK(b.len == before + 3001 && b.buf[before] == '<' && b.buf[b.len - 1] == '>' && b.buf[b.len] == 0, "long printf");
    cl_sb_free(&b);
    CHECK(b.buf == NULL && b.len == 0, "freed");

    const char raw[] = "q\"b\\s/\n\t\r\b\f\x01\x1f\x7f caf\xc3\xa9";
    size_t rn = sizeof raw - 1;
    cl_sb_json_string(&b, raw, rn);
    CHECK(!b.failed, "escape ok");
    const char want[] = "\"q\\\"b\\\\s/\\n\\t\\r\\b\\f\\u0001\\u001f\\u007f caf\xc3\xa9\"";
    CHECK(b.len == sizeof want - 1 && !strcmp(b.buf, want), "escaped: %s", b.buf);
    cl_json_doc *d = parse_ok(b.buf, b.len);
    if (d) {
        const cl_json *r = cl_json_root(d);
        CHECK(r->string_len == rn && !memcmp(r->string, raw, rn), "escape then parse round trips");
        cl_json_free(d);
    }
    cl_sb_free(&b);

    /* every ASCII byte 1..127, round tripped as an object key */
    char all[128];
    for (int i = 0; i < 127; i++) all[i] = (char)(i + 1);
    cl_sb_printf(&b, "{");
    cl_sb_json_string(&b, all, 127);
    cl_sb_printf(&b, ":[]}");
    d = parse_ok(b.buf, b.len);
    if (d) {
        const cl_json *m = cl_json_root(d)->child;
        CHECK(m && m->key_len == 127 && !memcmp(m->key, all, 127), "all ASCII round trips as a key");
        cl_json_free(d);
    }
    cl_sb_free(&b);

    CHECK(cl_json_utf8_valid("caf\xc3\xa9", 5) == 1, "valid utf8");
    CHECK(cl_json_utf8_valid("\xc3", 1) == 0, "truncated utf8");
    CHECK(cl_json_utf8_valid("", 0) == 1, "empty utf8");
}

int main(void) {
    test_scalars();
    test_containers();
    test_strings();
    test_rejections();
    test_strbuf();
    return cl_test_report("test_json");
}
