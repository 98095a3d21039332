/* Tests for safetensors reading and writing (safetensors.h): round trips of
 * every dtype and of edge shapes (scalar, zero elements, 4-D), metadata,
 * cl_st_read_tensor's checks, every validation rule on hand-built headers,
 * every truncation and many single-byte edits of a valid file (all must fail
 * or parse consistently, never crash), and the atomic write's guarantees. */
#include "cleave/safetensors.h"

#include "common/check.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(b, 1, (size_t)n, fp);
    fclose(fp);
    return b;
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* A safetensors image: 8-byte length, header text, datalen bytes 0..255. */
static unsigned char *make_st(const char *header, size_t datalen, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + datalen;
    unsigned char *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < datalen; i++) b[8 + h + i] = (unsigned char)i;
    return b;
}

/* The parse invariants a successful parse promises. */
static void check_invariants(const cl_st_file *f, size_t buflen, const char *what) {
    int n = cl_st_count(f);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        const cl_st_entry *e = cl_st_get(f, i);
        uint64_t numel = 1; /* unsigned: a zero dimension may follow huge ones */
        for (int d = 0; d < e->ndim; d++) numel *= (uint64_t)e->shape[d];
        CHECK(e->begin <= e->end && e->end <= buflen, "%s: offsets in range", what);
        CHECK(e->end - e->begin == numel * cl_dtype_size(e->dtype), "%s: size matches", what);
        CHECK(cl_st_find(f, e->name) == e, "%s: find(%s)", what, e->name);
        total += e->end - e->begin;
    }
    CHECK(total == buflen, "%s: tensors cover the buffer (%llu of %zu)", what, (unsigned long long)total, buflen);
}

static void expect_fail_st(const char *header, size_t datalen, cl_status want, const char *frag, const char *frag2) {
    size_t len;
    unsigned char *b = make_st(header, datalen, &len);
    cl_st_file *f = (cl_st_file *)1;
    cl_status s = cl_st_parse(&f, b, len, "bad.safetensors");
    const char *msg = cl_last_error();
    CHECK(s == want, "header %s: got %s (%s), want %s", header, cl_status_name(s), msg, cl_status_name(want));
    CHECK(f == NULL, "header %s: out not NULL", header);
    CHECK(strstr(msg, "bad.safetensors: ") == msg, "message names the file: %s", msg);
    CHECK(!frag || strstr(msg, frag), "header %s: message '%s' lacks '%s'", header, msg, frag);
    CHECK(!frag2 || strstr(msg, frag2), "header %s: message '%s' lacks '%s'", header, msg, frag2);
    if (s == CL_OK) cl_st_close(f);
    free(b);
}

static void expect_ok_st(const char *header, size_t datalen, int ntensors) {
    size_t len;
    unsigned char *b = make_st(header, datalen, &len);
    cl_st_file *f = NULL;
    cl_status s = cl_st_parse(&f, b, len, "ok.safetensors");
    CHECK(s == CL_OK, "header %s: %s", header, cl_last_error());
    if (s == CL_OK) {
        CHECK(cl_st_count(f) == ntensors, "header %s: %d tensors", header, cl_st_count(f));
        check_invariants(f, datalen, header);
        cl_st_close(f);
    }
    free(b);
}

/* ---- round trip ---- */

static float fa[6] = {1, -2, 3.5f, 1e-30f, -0.0f, 65504};
static int64_t ib[4] = {INT64_MIN, -1, 0, INT64_MAX};
static uint8_t uc[6] = {0, 1, 127, 128, 254, 255};
static uint16_t bd[5] = {0x3f80, 0xbf80, 0x7f80, 0x0001, 0xffff};
static double se = 3.25;
static uint16_t ug[4] = {1, 2, 65535, 40000};
static int32_t ih[3] = {-7, 0, 7};

#define NITEMS 8
static const char *weird_name = "w\xc3\xa9ird \"name\"\n\\/";

static void make_items(cl_st_item *it) {
    it[0] = (cl_st_item){"a", cl_tensor_make(fa, CL_F32, 2, (int64_t[]){2, 3})};
    it[1] = (cl_st_item){"b", cl_tensor_make(ib, CL_I64, 1, (int64_t[]){4})};
    it[2] = (cl_st_item){"c.4d", cl_tensor_make(uc, CL_U8, 4, (int64_t[]){3, 1, 2, 1})};
    it[3] = (cl_st_item){"d.bf16", cl_tensor_make(bd, CL_BF16, 1, (int64_t[]){5})};
    it[4] = (cl_st_item){"e.scalar", cl_tensor_make(&se, CL_F64, 0, NULL)};
    it[5] = (cl_st_item){"f.empty", cl_tensor_make(NULL, CL_I32, 2, (int64_t[]){0, 3})};
    it[6] = (cl_st_item){"g", cl_tensor_make(ug, CL_U16, 2, (int64_t[]){2, 2})};
    it[7] = (cl_st_item){weird_name, cl_tensor_make(ih, CL_I32, 1, (int64_t[]){3})};
}

static void test_round_trip(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/rt.safetensors", tmpdir);
    cl_st_item it[NITEMS];
    make_items(it);
    cl_st_meta meta[] = {{"format", "pt"}, {"note", "a \"quoted\"\nline \xc3\xa9 \\"}, {"empty", ""}};
    CHECK_OK(cl_st_write(path, it, NITEMS, meta, 3));
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(!exists(tmp), "no tmp file left after a successful write");

    size_t len = 0;
    unsigned char *raw = read_all(path, &len);
    CHECK(raw && len >= 8, "file written");
    if (!raw || len < 8) return;
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = h << 8 | raw[i];
    size_t databytes = 0;
    for (int i = 0; i < NITEMS; i++) databytes += cl_tensor_bytes(&it[i].t);
    CHECK(len == 8 + h + databytes, "file size %zu = 8 + %llu + %zu", len, (unsigned long long)h, databytes);
    CHECK((8 + h) % 8 == 0, "data starts 8-byte aligned (header %llu)", (unsigned long long)h);
    CHECK(raw[8] == '{', "header starts with '{'");
    size_t last = 8 + h - 1;
    while (last > 8 && raw[last] == ' ') last--;
    CHECK(raw[last] == '}', "header is the object then spaces");

    cl_st_file *f = NULL;
    CHECK_OK(cl_st_open(&f, path));
    if (!f) { free(raw); return; }
    CHECK(cl_st_count(f) == NITEMS, "count %d", cl_st_count(f));
    check_invariants(f, databytes, "round trip");
    uint64_t at = 0;
    for (int i = 0; i < NITEMS && i < cl_st_count(f); i++) {
        const cl_st_entry *e = cl_st_get(f, i);
        CHECK(!strcmp(e->name, it[i].name), "entry %d is %s (order kept)", i, e->name);
        CHECK(e->dtype == it[i].t.dtype && e->ndim == it[i].t.ndim, "entry %d dtype/ndim", i);
        for (int d = 0; d < e->ndim; d++) CHECK(e->shape[d] == it[i].t.shape[d], "entry %d dim %d", i, d);
        CHECK(e->begin == at, "entry %d begins at %llu", i, (unsigned long long)e->begin);
        at = e->end;
        size_t nb = cl_tensor_bytes(&it[i].t);
        unsigned char buf[64];
        memset(buf, 0xaa, sizeof buf);
        CHECK_OK(cl_st_read_tensor(f, it[i].name, it[i].t.dtype, it[i].t.ndim, it[i].t.shape, buf));
        CHECK(nb == 0 || !memcmp(buf, it[i].t.data, nb), "entry %d data round trips", i);
        CHECK(buf[nb] == 0xaa, "entry %d: nothing written past its %zu bytes", i, nb);
        CHECK(nb == 0 || !memcmp(e->data, it[i].t.data, nb), "entry %d data pointer", i);
    }
    CHECK(cl_st_get(f, -1) == NULL && cl_st_get(f, NITEMS) == NULL, "get out of range");
    CHECK(cl_st_find(f, "nope") == NULL && cl_st_find(f, "") == NULL, "find absent");
    CHECK(cl_st_find(f, weird_name) != NULL, "find escaped name");
    CHECK(cl_st_metadata(f, "format") && !strcmp(cl_st_metadata(f, "format"), "pt"), "metadata format");
    CHECK(cl_st_metadata(f, "note") && !strcmp(cl_st_metadata(f, "note"), meta[1].value), "metadata note");
    CHECK(cl_st_metadata(f, "empty") && !strcmp(cl_st_metadata(f, "empty"), ""), "metadata empty");
    CHECK(cl_st_metadata(f, "absent") == NULL, "metadata absent");
    CHECK(cl_st_find(f, "__metadata__") == NULL, "__metadata__ is not a tensor");

    /* read_tensor's checks */
    float dst[6];
    cl_status s = cl_st_read_tensor(f, "a", CL_F64, 2, (int64_t[]){2, 3}, dst);
    CHECK(s == CL_ERR_FORMAT && strstr(cl_last_error(), "'a'") && strstr(cl_last_error(), "F32") && strstr(cl_last_error(), "F64"),
          "dtype mismatch: %s", cl_last_error());
    s = cl_st_read_tensor(f, "a", CL_F32, 2, (int64_t[]){3, 2}, dst);
    CHECK(s == CL_ERR_FORMAT && strstr(cl_last_error(), "[2, 3]") && strstr(cl_last_error(), "expected [3, 2]"), "shape mismatch: %s",
          cl_last_error());
    s = cl_st_read_tensor(f, "a", CL_F32, 1, (int64_t[]){6}, dst);
    CHECK(s == CL_ERR_FORMAT && strstr(cl_last_error(), "expected [6]"), "ndim mismatch: %s", cl_last_error());
    s = cl_st_read_tensor(f, "e.scalar", CL_F64, 1, (int64_t[]){1}, dst);
    CHECK(s == CL_ERR_FORMAT && strstr(cl_last_error(), "shape []"), "scalar vs [1]: %s", cl_last_error());
    s = cl_st_read_tensor(f, "missing", CL_F32, 1, (int64_t[]){6}, dst);
    CHECK(s == CL_ERR_FORMAT && strstr(cl_last_error(), "no tensor 'missing'") && strstr(cl_last_error(), path), "missing: %s",
          cl_last_error());
    s = cl_st_read_tensor(f, "a", CL_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, dst);
    CHECK(s == CL_ERR_INVALID, "ndim 5 asked: %s", cl_last_error());
    cl_st_close(f);

    /* every truncation fails cleanly */
    int bad = 0;
    for (size_t L = 0; L < len; L++) {
        unsigned char *cut = L ? malloc(L) : NULL;
        if (L) memcpy(cut, raw, L);
        cl_st_file *g = (cl_st_file *)1;
        s = cl_st_parse(&g, cut, L, "cut");
        if (s != CL_ERR_FORMAT || g != NULL) {
            bad++;
            if (bad < 5) CHECK(0, "truncated to %zu bytes: %s %s", L, cl_status_name(s), cl_last_error());
            if (s == CL_OK) cl_st_close(g);
        }
        free(cut);
    }
    CHECK(bad == 0, "%d truncations were not rejected", bad);

    /* single-byte edits of the header: parse or fail, never crash; a parse keeps the invariants */
    const unsigned char subst[] = {0, ' ', '"', '0', '9', '[', ']', '{', '}', ',', ':', '-', '\\', 0x80, 0xff};
    unsigned char *ed = malloc(len);
    int accepted = 0;
    for (size_t p = 0; p < 8 + h; p++)
        for (size_t k = 0; k < sizeof subst; k++) {
            if (raw[p] == subst[k]) continue;
            memcpy(ed, raw, len);
            ed[p] = subst[k];
            cl_st_file *g = NULL;
            if (cl_st_parse(&g, ed, len, "edit") == CL_OK) {
                accepted++;
                check_invariants(g, databytes, "edited");
                cl_st_close(g);
            }
        }
    /* e.g. padding spaces turned into other whitespace-free bytes must fail; some edits (inside names) parse */
    CHECK(accepted > 0, "some edits (inside names or metadata) still parse: %d", accepted);
    free(ed);
    free(raw);

    /* metadata absent when nmeta == 0; an empty file of no tensors */
    CHECK_OK(cl_st_write(path, it, 2, NULL, 0));
    if (cl_st_open(&f, path) == CL_OK) {
        CHECK(cl_st_count(f) == 2 && cl_st_metadata(f, "format") == NULL, "no metadata");
        cl_st_close(f);
    } else CHECK(0, "reopen: %s", cl_last_error());
    raw = read_all(path, &len);
    CHECK(raw && !memmem(raw, len, "__metadata__", 12), "no __metadata__ written when nmeta == 0");
    free(raw);
    CHECK_OK(cl_st_write(path, NULL, 0, NULL, 0));
    if (cl_st_open(&f, path) == CL_OK) {
        CHECK(cl_st_count(f) == 0, "zero tensors");
        cl_st_close(f);
    } else CHECK(0, "reopen empty: %s", cl_last_error());
    raw = read_all(path, &len);
    CHECK(raw && len == 16 && !memcmp(raw + 8, "{}      ", 8), "empty file is 16 bytes, '{}' padded");
    free(raw);
    unlink(path);
}

static void test_hand_edited(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/edit.safetensors", tmpdir);
    cl_st_item it[1] = {{"w", cl_tensor_make(fa, CL_F32, 2, (int64_t[]){2, 3})}};
    CHECK_OK(cl_st_write(path, it, 1, NULL, 0));
    size_t len;
    unsigned char *raw = read_all(path, &len);
    unsigned char *p = raw ? memmem(raw, len, "[2,3]", 5) : NULL;
    CHECK(p != NULL, "shape text found");
    if (p) {
        p[3] = '4';
        cl_st_file *f = (cl_st_file *)1;
        cl_status s = cl_st_parse(&f, raw, len, "edit.safetensors");
        CHECK(s == CL_ERR_FORMAT && f == NULL, "edited shape rejected");
        CHECK(strstr(cl_last_error(), "edit.safetensors: tensor 'w': data_offsets [0, 24] hold 24 bytes but shape [2, 4] of F32 needs 32"),
              "message: %s", cl_last_error());
        p[3] = '3';
        unsigned char *q = memmem(raw, len, "[0,24]", 6);
        CHECK(q != NULL, "offsets text found");
        if (q) {
            q[4] = '0'; /* [0,20] */
            s = cl_st_parse(&f, raw, len, "edit.safetensors");
            CHECK(s == CL_ERR_FORMAT && strstr(cl_last_error(), "hold 20 bytes"), "edited offsets: %s", cl_last_error());
        }
    }
    free(raw);
    unlink(path);
}

static void test_bad_headers(void) {
    /* framing */
    size_t len;
    unsigned char *b = make_st("{}", 0, &len);
    for (size_t L = 0; L < 8; L++) {
        cl_st_file *f = (cl_st_file *)1;
        CHECK(cl_st_parse(&f, b, L, "x") == CL_ERR_FORMAT && f == NULL && strstr(cl_last_error(), "shorter than"), "%zu bytes", L);
    }
    b[0] = 3; /* header length 3 but only 2 bytes follow */
    cl_st_file *f = NULL;
    CHECK(cl_st_parse(&f, b, len, "x") == CL_ERR_FORMAT && strstr(cl_last_error(), "header length 3 exceeds the 2 bytes"), "%s",
          cl_last_error());
    memset(b, 0xff, 8);
    CHECK(cl_st_parse(&f, b, len, "x") == CL_ERR_FORMAT && strstr(cl_last_error(), "header length 18446744073709551615"), "%s",
          cl_last_error());
    memset(b, 0, 8);
    CHECK(cl_st_parse(&f, b, len, "x") == CL_ERR_FORMAT, "header length 0: %s", cl_last_error());
    free(b);
    CHECK(cl_st_parse(&f, NULL, 0, NULL) == CL_ERR_FORMAT, "empty buffer");
    b = make_st("{}  ", 0, &len); /* NUL padding is not whitespace */
    b[len - 1] = 0;
    CHECK(cl_st_parse(&f, b, len, "x") == CL_ERR_FORMAT && strstr(cl_last_error(), "offset 3"), "NUL padding: %s", cl_last_error());
    free(b);

    expect_ok_st("{}", 0, 0);
    expect_ok_st("{}      ", 0, 0);
    expect_ok_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}   ", 8, 1);
    expect_ok_st("{ \"a\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 8 ] , \"dtype\" : \"F32\" } }", 8, 1);
    /* zero-sized tensors may sit anywhere, even at the same offset as others */
    expect_ok_st("{\"z0\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"z1\":{\"dtype\":\"I64\",\"shape\":[3,0],\"data_offsets\":[4,4]},"
                 "\"z2\":{\"dtype\":\"I64\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[4,4]}}",
                 4, 4);
    /* tensors stored out of header order */
    expect_ok_st("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},\"a\":{\"dtype\":\"U16\",\"shape\":[],\"data_offsets\":[0,2]},"
                 "\"__metadata__\":{\"k\":\"v\"}}",
                 4, 2);

    expect_fail_st("[]", 0, CL_ERR_FORMAT, "JSON object", NULL);
    expect_fail_st(" {}", 0, CL_ERR_FORMAT, "'{'", NULL);
    expect_fail_st("{\"a\":{\"dtype\":\"F32\",}}", 0, CL_ERR_FORMAT, "header: json: offset 20", "trailing comma");
    expect_fail_st("{\"a\":1} x", 0, CL_ERR_FORMAT, "json: offset 8", NULL);
    expect_fail_st("{\"a\":5}", 0, CL_ERR_FORMAT, "tensor 'a'", "found a number");
    expect_fail_st("{\"\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, CL_ERR_FORMAT, "empty name", NULL);
    expect_fail_st("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, CL_ERR_FORMAT, "NUL", NULL);
    /* dtypes */
    expect_fail_st("{\"w\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, CL_ERR_UNSUPPORTED, "tensor 'w'", "I16");
    expect_ok_st("{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, 1);
    expect_fail_st("{\"w\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, CL_ERR_UNSUPPORTED, "tensor 'w'", "BOOL");
    expect_fail_st("{\"w\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, CL_ERR_FORMAT, "tensor 'w'", "unknown dtype 'Q7'");
    expect_fail_st("{\"w\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, CL_ERR_FORMAT, "tensor 'w'", "unknown dtype");
    expect_fail_st("{\"w\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, CL_ERR_FORMAT, "tensor 'w'", "dtype must be a string");
    /* fields */
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 0, CL_ERR_FORMAT, "tensor 'w'", "missing field 'data_offsets'");
    expect_fail_st("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, CL_ERR_FORMAT, "tensor 'w'", "missing field 'dtype'");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, CL_ERR_FORMAT, "tensor 'w'",
                   "unexpected field 'x'");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, CL_ERR_FORMAT, "tensor 'w'",
                   "field 'dtype' appears twice");
    /* shapes */
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, CL_ERR_FORMAT, "tensor 'w'", "shape entry 0");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,2.0],\"data_offsets\":[0,8]}}", 8, CL_ERR_FORMAT, "tensor 'w'", "shape entry 1");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, CL_ERR_FORMAT, "tensor 'w'", "shape entry 0");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, CL_ERR_FORMAT, "tensor 'w'", "shape must be");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[1e2],\"data_offsets\":[0,400]}}", 400, CL_ERR_FORMAT, "tensor 'w'", "shape entry");
    expect_fail_st("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,2]}}", 2, CL_ERR_UNSUPPORTED, "tensor 'w'",
                   "at most 4");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,0]}}", 0, CL_ERR_FORMAT, "tensor 'w'",
                   "overflows");
    expect_fail_st("{\"w\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}", 0, CL_ERR_FORMAT, "tensor 'w'",
                   "overflows");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,0]}}", 0, CL_ERR_FORMAT, "tensor 'w'",
                   "shape entry 0");
    /* sizes */
    expect_fail_st("{\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[0,100]}}", 100, CL_ERR_FORMAT,
                   "bad.safetensors: tensor 'h.0.attn.c_attn.weight': data_offsets [0, 100] hold 100 bytes but shape [4, 8] of F32 needs 128",
                   NULL);
    expect_fail_st("{\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, CL_ERR_FORMAT, "tensor 's'", "shape [] of F64 needs 8");
    /* offsets */
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, CL_ERR_FORMAT, "tensor 'w'", "two non-negative");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, CL_ERR_FORMAT, "tensor 'w'", "two non-negative");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, CL_ERR_FORMAT, "tensor 'w'", "two non-negative");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{\"a\":0}}}", 8, CL_ERR_FORMAT, "tensor 'w'", "two non-negative");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, CL_ERR_FORMAT, "tensor 'w'", "end before");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, CL_ERR_FORMAT, "tensor 'w'", "past the end");
    expect_fail_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[18446744073709551608,0]}}", 8, CL_ERR_FORMAT, "tensor 'w'",
                   "two non-negative");
    expect_fail_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                   12, CL_ERR_FORMAT, "tensor 'b'", "overlap tensor 'a'");
    expect_fail_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                   8, CL_ERR_FORMAT, "overlap", NULL);
    expect_fail_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                   20, CL_ERR_FORMAT, "tensor 'b'", "gap of 4 bytes");
    expect_fail_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, CL_ERR_FORMAT, "tensor 'a'", "gap");
    expect_fail_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, CL_ERR_FORMAT, "4 trailing bytes", NULL);
    expect_fail_st("{}", 3, CL_ERR_FORMAT, "3 trailing bytes", NULL);
    /* names */
    expect_fail_st("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2,
                   CL_ERR_FORMAT, "tensor 'a' appears twice", NULL);
    /* metadata */
    expect_fail_st("{\"__metadata__\":{\"k\":1}}", 0, CL_ERR_FORMAT, "__metadata__ 'k' must be a string", NULL);
    expect_fail_st("{\"__metadata__\":[\"k\"]}", 0, CL_ERR_FORMAT, "__metadata__ must be an object", NULL);
    expect_fail_st("{\"__metadata__\":{},\"__metadata__\":{}}", 0, CL_ERR_FORMAT, "__metadata__ appears twice", NULL);
    expect_fail_st("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, CL_ERR_FORMAT, "key 'k' appears twice", NULL);
}

static void test_open_errors(void) {
    char path[128];
    cl_st_file *f = (cl_st_file *)1;
    snprintf(path, sizeof path, "%s/absent.safetensors", tmpdir);
    CHECK(cl_st_open(&f, path) == CL_ERR_IO && f == NULL && strstr(cl_last_error(), path) && strstr(cl_last_error(), strerror(ENOENT)),
          "absent: %s", cl_last_error());
    CHECK(cl_st_open(&f, tmpdir) == CL_ERR_IO && strstr(cl_last_error(), "regular file"), "directory: %s", cl_last_error());
    snprintf(path, sizeof path, "%s/empty.safetensors", tmpdir);
    FILE *fp = fopen(path, "wb");
    fclose(fp);
    CHECK(cl_st_open(&f, path) == CL_ERR_FORMAT && strstr(cl_last_error(), "is 0 bytes") && strstr(cl_last_error(), path), "empty: %s",
          cl_last_error());
    unlink(path);
}

static void test_atomic_write(void) {
    cl_st_item it[NITEMS];
    make_items(it);
    char path[160], tmp[170];

    /* a missing directory: an I/O error and nothing created */
    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", tmpdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cl_status s = cl_st_write(path, it, 2, NULL, 0);
    CHECK(s == CL_ERR_IO && strstr(cl_last_error(), strerror(ENOENT)), "missing dir: %s %s", cl_status_name(s), cl_last_error());
    CHECK(!exists(path) && !exists(tmp), "nothing left behind");

    /* an existing file survives a failed write */
    snprintf(path, sizeof path, "%s/keep.safetensors", tmpdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK_OK(cl_st_write(path, it, 1, NULL, 0));
    size_t n0, n1;
    unsigned char *before = read_all(path, &n0);
    CHECK(mkdir(tmp, 0755) == 0, "mkdir %s", tmp);
    s = cl_st_write(path, it, NITEMS, NULL, 0);
    CHECK(s == CL_ERR_IO && strstr(cl_last_error(), strerror(EISDIR)), "tmp is a directory: %s %s", cl_status_name(s), cl_last_error());
    unsigned char *after = read_all(path, &n1);
    CHECK(before && after && n0 == n1 && !memcmp(before, after, n0), "old file intact");
    free(after);
    CHECK(rmdir(tmp) == 0, "the directory in the way was not touched");

    /* a leftover tmp file is replaced; a successful write replaces the file */
    FILE *fp = fopen(tmp, "wb");
    fputs("junk", fp);
    fclose(fp);
    CHECK_OK(cl_st_write(path, it, NITEMS, NULL, 0));
    CHECK(!exists(tmp), "tmp gone");
    after = read_all(path, &n1);
    CHECK(after && n1 > n0, "file replaced");
    cl_st_file *f = NULL;
    if (cl_st_open(&f, path) == CL_OK) {
        CHECK(cl_st_count(f) == NITEMS, "new contents");
        cl_st_close(f);
    } else CHECK(0, "open replaced: %s", cl_last_error());
    free(before);
    free(after);
    unlink(path);

    /* rename fails (the path is a non-empty directory): tmp removed */
    snprintf(path, sizeof path, "%s/isdir", tmpdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char inner[200];
    snprintf(inner, sizeof inner, "%s/inner", path);
    mkdir(path, 0755);
    fp = fopen(inner, "wb");
    fclose(fp);
    s = cl_st_write(path, it, 1, NULL, 0);
    CHECK(s == CL_ERR_IO && strstr(cl_last_error(), "rename"), "rename onto a directory: %s", cl_last_error());
    CHECK(!exists(tmp) && exists(inner), "tmp removed, directory untouched");
    unlink(inner);
    rmdir(path);

    /* bad arguments are refused before anything is written */
    snprintf(path, sizeof path, "%s/bad.safetensors", tmpdir);
    cl_st_item dup[2] = {it[0], it[0]};
    CHECK(cl_st_write(path, dup, 2, NULL, 0) == CL_ERR_INVALID && strstr(cl_last_error(), "twice"), "dup: %s", cl_last_error());
    cl_st_item bad = {"__metadata__", it[0].t};
    CHECK(cl_st_write(path, &bad, 1, NULL, 0) == CL_ERR_INVALID, "reserved name");
    bad = (cl_st_item){"", it[0].t};
    CHECK(cl_st_write(path, &bad, 1, NULL, 0) == CL_ERR_INVALID, "empty name");
    bad = (cl_st_item){"\xc3", it[0].t};
    CHECK(cl_st_write(path, &bad, 1, NULL, 0) == CL_ERR_INVALID, "invalid UTF-8 name");
    bad = (cl_st_item){"x", cl_tensor_make(NULL, CL_F32, 1, (int64_t[]){3})};
    CHECK(cl_st_write(path, &bad, 1, NULL, 0) == CL_ERR_INVALID, "NULL data");
    bad = (cl_st_item){"x", cl_tensor_make(fa, CL_F32, 1, (int64_t[]){-1})};
    CHECK(cl_st_write(path, &bad, 1, NULL, 0) == CL_ERR_INVALID, "negative dim");
    bad = (cl_st_item){"x", it[0].t};
    bad.t.ndim = 5;
    CHECK(cl_st_write(path, &bad, 1, NULL, 0) == CL_ERR_INVALID, "5 dims");
    cl_st_meta dm[2] = {{"k", "a"}, {"k", "b"}};
    CHECK(cl_st_write(path, it, 1, dm, 2) == CL_ERR_INVALID, "duplicate metadata");
    CHECK(!exists(path), "nothing written for bad arguments");
}

/* Number formats: tensors written as BF16 and F16 by the writer, read back
 * as stored and converted (BF16/F16 into F32 widened, F32 into BF16/F16
 * rounded to nearest even); refusals of other pairs; a BF16 tensor at an
 * odd address (another writer's unpadded header) converted. */
static void test_formats(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/fmt.safetensors", tmpdir);
    /* 1, 1 + 2^-8 (BF16 tie to 1), 1 + 3*2^-8 (tie up), 0.1, 65520 (F16: inf), 2^-24, -0 */
    uint32_t xb[7] = {0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3dcccccdu, 0x477ff000u, 0x33800000u, 0x80000000u};
    const uint16_t want_bf[7] = {0x3f80, 0x3f80, 0x3f82, 0x3dcd, 0x4780, 0x3380, 0x8000};
    const uint16_t want_h[7] = {0x3c00, 0x3c04, 0x3c0c, 0x2e66, 0x7c00, 0x0001, 0x8000};
    float x[7];
    memcpy(x, xb, sizeof x);
    uint16_t bf[7], h[7], got16[7];
    float got[7];
    CHECK_OK(cl_dtype_convert(bf, CL_BF16, x, CL_F32, 7));
    CHECK_OK(cl_dtype_convert(h, CL_F16, x, CL_F32, 7));
    int32_t iv[2] = {1, 2};
    cl_st_item it[4] = {{"x", cl_tensor_make(x, CL_F32, 1, (int64_t[]){7})},
                        {"x.bf16", cl_tensor_make(bf, CL_BF16, 1, (int64_t[]){7})},
                        {"x.f16", cl_tensor_make(h, CL_F16, 1, (int64_t[]){7})},
                        {"i", cl_tensor_make(iv, CL_I32, 1, (int64_t[]){2})}};
    CHECK_OK(cl_st_write(path, it, 4, NULL, 0));
    cl_st_file *f = NULL;
    CHECK_OK(cl_st_open(&f, path));
    if (!f) return;
    const cl_st_entry *e = cl_st_find(f, "x.f16");
    CHECK(e && e->dtype == CL_F16 && e->end - e->begin == 14, "x.f16 is stored as F16, 14 bytes");
    e = cl_st_find(f, "x.bf16");
    CHECK(e && e->dtype == CL_BF16, "x.bf16 is stored as BF16");
    int64_t sh[1] = {7};
    /* as stored */
    CHECK_OK(cl_st_read_tensor(f, "x.bf16", CL_BF16, 1, sh, got16));
    CHECK(!memcmp(got16, want_bf, sizeof got16), "BF16 read as BF16: 0x%04x 0x%04x 0x%04x", got16[0], got16[1], got16[2]);
    CHECK_OK(cl_st_read_tensor(f, "x.f16", CL_F16, 1, sh, got16));
    CHECK(!memcmp(got16, want_h, sizeof got16), "F16 read as F16: 0x%04x 0x%04x", got16[1], got16[2]);
    /* widened */
    CHECK_OK(cl_st_read_tensor(f, "x.bf16", CL_F32, 1, sh, got));
    int ok = 1;
    for (int i = 0; i < 7; i++) ok &= got[i] == cl_bf16_to_f32(want_bf[i]) && signbit(got[i]) == signbit(x[i]);
    CHECK(ok, "BF16 read into F32: %g %g %g %g", (double)got[0], (double)got[2], (double)got[3], (double)got[4]);
    CHECK_OK(cl_st_read_tensor(f, "x.f16", CL_F32, 1, sh, got));
    CHECK(got[1] == 1.00390625f && got[5] == 0x1p-24f && isinf(got[4]) && got[3] == cl_f16_to_f32(0x2e66),
          "F16 read into F32: %g %g %g", (double)got[1], (double)got[5], (double)got[4]);
    /* narrowed, rounded to nearest even */
    CHECK_OK(cl_st_read_tensor(f, "x", CL_BF16, 1, sh, got16));
    CHECK(!memcmp(got16, want_bf, sizeof got16), "F32 read into BF16: 0x%04x 0x%04x 0x%04x", got16[1], got16[2], got16[3]);
    CHECK_OK(cl_st_read_tensor(f, "x", CL_F16, 1, sh, got16));
    CHECK(!memcmp(got16, want_h, sizeof got16), "F32 read into F16: 0x%04x 0x%04x 0x%04x", got16[1], got16[4], got16[5]);
    /* pairs that do not convert */
    double dd[7];
    cl_status st = cl_st_read_tensor(f, "x.bf16", CL_F64, 1, sh, dd);
    CHECK(st == CL_ERR_FORMAT && strstr(cl_last_error(), "'x.bf16' is BF16, expected F64"), "BF16 as F64: %s", cl_last_error());
    st = cl_st_read_tensor(f, "i", CL_F32, 1, (int64_t[]){2}, got);
    CHECK(st == CL_ERR_FORMAT && strstr(cl_last_error(), "is I32, expected F32"), "I32 as F32: %s", cl_last_error());
    st = cl_st_read_tensor(f, "x.bf16", CL_F16, 1, sh, got16);
    CHECK(st == CL_ERR_FORMAT && strstr(cl_last_error(), "is BF16, expected F16"), "BF16 as F16: %s", cl_last_error());
    cl_st_close(f);
    /* an unpadded header: the BF16 data at an odd address, bytes 0..5 = 0x0100, 0x0302, 0x0504 */
    const char *hdr = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}}";
    size_t len = 0;
    unsigned char *b = make_st(hdr, 6, &len);
    cl_st_file *g = NULL;
    CHECK_OK(cl_st_parse(&g, b, len, "odd.safetensors"));
    if (g) {
        CHECK(((uintptr_t)cl_st_find(g, "w")->data & 1) == 1, "the test's data sits at an odd address");
        CHECK_OK(cl_st_read_tensor(g, "w", CL_F32, 1, (int64_t[]){3}, got));
        CHECK(got[0] == cl_bf16_to_f32(0x0100) && got[1] == cl_bf16_to_f32(0x0302) && got[2] == cl_bf16_to_f32(0x0504),
              "unaligned BF16 into F32: %g %g %g", (double)got[0], (double)got[1], (double)got[2]);
        cl_st_close(g);
    }
    free(b);
    unlink(path);
}

/* A file tests/format_ref.py wrote with PyTorch's conversions (tests/cli_format.sh):
 * "x" F32, "x.bf16" and "x.f16" torch's roundings of it, "w" BF16 and "w.f32"
 * torch's widening of it. The reader's conversions must give torch's bits. */
static int torch_file(const char *path) {
    cl_st_file *f = NULL;
    CHECK_OK(cl_st_open(&f, path));
    if (!f) return cl_test_report("test_safetensors --torch");
    const cl_st_entry *x = cl_st_find(f, "x"), *w = cl_st_find(f, "w");
    CHECK(x && w && x->ndim == 1 && w->ndim == 1, "%s holds x and w", path);
    if (x && w) {
        int64_t nx = x->shape[0], nw = w->shape[0];
        uint16_t *a = malloc((size_t)nx * 2), *b = malloc((size_t)nx * 2);
        float *c = malloc((size_t)nw * 4), *d = malloc((size_t)nw * 4);
        for (int k = 0; k < 2 && a && b; k++) {
            cl_dtype t = k ? CL_F16 : CL_BF16;
            CHECK_OK(cl_st_read_tensor(f, "x", t, 1, &nx, a));
            CHECK_OK(cl_st_read_tensor(f, k ? "x.f16" : "x.bf16", t, 1, &nx, b));
            int64_t bad = 0;
            for (int64_t i = 0; i < nx; i++)
                bad += a[i] != b[i] && !(isnan(k ? cl_f16_to_f32(a[i]) : cl_bf16_to_f32(a[i])) &&
                                         isnan(k ? cl_f16_to_f32(b[i]) : cl_bf16_to_f32(b[i])));
            CHECK(bad == 0, "F32 read as %s: %" PRId64 " of %" PRId64 " values differ from torch's", cl_dtype_name(t), bad, nx);
        }
        if (c && d) {
            CHECK_OK(cl_st_read_tensor(f, "w", CL_F32, 1, &nw, c));
            CHECK_OK(cl_st_read_tensor(f, "w.f32", CL_F32, 1, &nw, d));
            int64_t bad = 0;
            for (int64_t i = 0; i < nw; i++) bad += memcmp(&c[i], &d[i], 4) != 0 && !(isnan(c[i]) && isnan(d[i]));
            CHECK(bad == 0, "BF16 read as F32: %" PRId64 " of %" PRId64 " values differ from torch's", bad, nw);
        }
        printf("compared %" PRId64 " narrowings a format and %" PRId64 " widenings with torch's file\n", nx, nw);
        free(a);
        free(b);
        free(c);
        free(d);
    }
    cl_st_close(f);
    return cl_test_report("test_safetensors --torch");
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--torch")) return torch_file(argv[2]);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cl_test_st_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_hand_edited();
    test_bad_headers();
    test_open_errors();
    test_atomic_write();
    test_formats();
    rmdir(tmpdir);
    return cl_test_report("test_safetensors");
}
