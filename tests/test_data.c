/* Tests of cleave data: the byte and GPT-2 tokenizers, token files, the
 * digits set, cl_read_file and cl_json_parse_file, and their size bounds.
 *
 * The GPT-2 ids hard-coded here come from the gpt-3-encoder npm package;
 * tests/cli_bpe_node.sh checks the same strings against it again, and
 * compares whole texts id for id. Parts that need data/ (made by
 * scripts/setup.sh; found through $CLEAVE_DATA, ./data, or the executable's
 * ../../data) are skipped with a notice when it is missing, and fail instead
 * when CLEAVE_REQUIRE_DATA=1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleave/data.h"
#include "common/check.h"
#ifdef CL_HAVE_ZLIB
#include <zlib.h>
#endif

static char tmpdir[64];
static char data_dir[4096];

static const char *tmp_path(const char *name)
{
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot create %s", path);
    if (!f) return;
    CHECK(fwrite(p, 1, n, f) == n, "short write to %s", path);
    fclose(f);
}

static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

static int file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Finds data/ as the commands do (cl_data_find: $CLEAVE_DATA, the
 * checkout's data/ beside this program, the installed share/cleave), by the
 * directory that holds kjv.txt; "data" when none does. */
static int find_data(void)
{
    char p[sizeof data_dir];
    if (cl_data_find("kjv.txt", p, sizeof p) != CL_OK) {
        cl_error_clear();
        snprintf(data_dir, sizeof data_dir, "data");
        return 0;
    }
    snprintf(data_dir, sizeof data_dir, "%.*s", (int)(strrchr(p, '/') - p), p);
    return 1;
}

static int need_data(const char *what, const char *file)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", data_dir, file);
    if (file_exists(p)) return 1;
    const char *req = getenv("CLEAVE_REQUIRE_DATA");
    if (req && strcmp(req, "1") == 0) {
        CHECK(0, "%s needs %s (run: bash scripts/setup.sh)", what, p);
    } else {
        char why[4400];
        snprintf(why, sizeof why, "%s: %s missing (run: bash scripts/setup.sh)", what, p);
        cl_test_skip(why, 1);
    }
    return 0;
}

/* decode(ids) must equal text[0..len) exactly */
static int decodes_to(const cl_tokenizer *t, const int32_t *ids, size_t n, const char *text, size_t len)
{
    size_t pos = 0;
    char buf[512];
    for (size_t i = 0; i < n; i++) {
        int k = cl_tokenizer_decode(t, ids[i], buf, (int)sizeof buf);
        if (k < 0 || pos + (size_t)k > len || memcmp(buf, text + pos, (size_t)k) != 0) {
            fprintf(stderr, "token %zu (id %d) does not decode to the text at byte %zu\n", i, ids[i], pos);
            return 0;
        }
        pos += (size_t)k;
    }
    if (pos != len) fprintf(stderr, "decoded %zu bytes of %zu\n", pos, len);
    return pos == len;
}

/* ---- byte tokenizer ------------------------------------------------------ */

static void test_byte_tokenizer(void)
{
    cl_tokenizer *t;
    CHECK_OK(cl_tokenizer_byte(&t));
    if (!t) return;
    CHECK(strcmp(cl_tokenizer_name(t), "byte") == 0, "name %s", cl_tokenizer_name(t));
    CHECK(cl_tokenizer_vocab(t) == 256, "vocab %d", cl_tokenizer_vocab(t));
    char all[256];
    for (int i = 0; i < 256; i++) all[i] = (char)(255 - i);
    int32_t *ids;
    size_t n;
    CHECK_OK(cl_tokenizer_encode(t, all, sizeof all, &ids, &n));
    CHECK(n == 256, "n %zu", n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= ids[i] == 255 - (int)i;
    CHECK(ok, "byte ids are not the byte values");
    CHECK(decodes_to(t, ids, n, all, sizeof all), "byte round trip");
    free(ids);
    CHECK_OK(cl_tokenizer_encode(t, "", 0, &ids, &n));
    CHECK(n == 0, "empty text gives %zu tokens", n);
    free(ids);
    char b[4];
    CHECK(cl_tokenizer_decode(t, 256, b, 4) == -1, "id 256 must be out of range");
    CHECK(cl_tokenizer_decode(t, -1, b, 4) == -1, "id -1 must be out of range");
    CHECK(cl_tokenizer_decode(t, 65, b, 4) == 1 && b[0] == 'A', "decode 65");
    cl_tokenizer_free(t);
}

/* ---- GPT-2 tokenizer: a tiny hand-made vocabulary --------------------------- */

/* GPT-2's byte -> unicode map, written independently of the library. */
static int byte_char(int b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
    return 256 + n;
}

static void test_gpt2_small(void)
{
    /* 256 byte tokens written as \u escapes, then he, ll, hell, hello */
    size_t cap = 1 << 16, n = 0;
    char *js = malloc(cap);
    n += (size_t)snprintf(js + n, cap - n, "{");
    for (int b = 0; b < 256; b++)
        n += (size_t)snprintf(js + n, cap - n, "\"\\u%04x\": %d, ", byte_char(b), b);
    n += (size_t)snprintf(js + n, cap - n, "\"he\": 256, \"ll\": 257, \"hell\": 258, \"hello\": 259, "
                                           "\"\\u0120h\": 260}\n");
    mkdir(tmp_path("small"), 0700);
    write_bytes(tmp_path("small/encoder.json"), js, n);
    write_text(tmp_path("small/vocab.bpe"), "#version: 0.2\nl l\nh e\nhe ll\nhell o\n\xc4\xa0 h\n");
    cl_tokenizer *t = NULL;
    CHECK_OK(cl_tokenizer_gpt2(&t, tmp_path("small")));
    if (t) {
        CHECK(cl_tokenizer_vocab(t) == 261, "vocab %d", cl_tokenizer_vocab(t));
        CHECK(strcmp(cl_tokenizer_name(t), "gpt2") == 0, "name %s", cl_tokenizer_name(t));
        /* byte tokens have id = byte value here. Ranks: l l 0, h e 1, he ll 2,
         * hell o 3, Ġ h 4, so " hello" merges ll, he, hell, hello and never Ġh. */
        struct { const char *text; int n; int32_t ids[6]; } cases[] = {
            {"hello", 1, {259}},
            {"hell", 1, {258}},
            {"heo", 2, {256, 'o'}},
            {"lll", 2, {257, 'l'}},   /* left to right: ll, then l */
            {" hello", 2, {' ', 259}},
            {" hx", 2, {260, 'x'}},
            {"hello hello", 3, {259, ' ', 259}},
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int32_t *ids;
            size_t m;
            CHECK_OK(cl_tokenizer_encode(t, cases[c].text, strlen(cases[c].text), &ids, &m));
            int same = (int)m == cases[c].n;
            for (int k = 0; same && k < cases[c].n; k++) same = ids[k] == cases[c].ids[k];
            CHECK(same, "'%s' gave %zu ids: %d %d %d", cases[c].text, m, m > 0 ? ids[0] : -1,
                  m > 1 ? ids[1] : -1, m > 2 ? ids[2] : -1);
            CHECK(decodes_to(t, ids, m, cases[c].text, strlen(cases[c].text)), "'%s' round trip", cases[c].text);
            free(ids);
        }
        cl_tokenizer_free(t);
    }

    /* CRLF line ends and a blank line change nothing; text after the last
     * newline is not a merge (as in the JavaScript encoder) */
    write_text(tmp_path("small/vocab.bpe"), "#version: 0.2\r\nl l\r\n\r\nh e\r\nhe ll\r\nhell o\r\nh x");
    CHECK_OK(cl_tokenizer_gpt2(&t, tmp_path("small")));
    if (t) {
        int32_t *ids;
        size_t m;
        CHECK_OK(cl_tokenizer_encode(t, "hellohx", 7, &ids, &m));
        CHECK(m == 3 && ids[0] == 259 && ids[1] == 'h' && ids[2] == 'x', "CRLF vocab.bpe: %zu ids", m);
        free(ids);
        cl_tokenizer_free(t);
    }

    /* rejections, each naming the file */
    struct { const char *enc, *bpe, *what; } bad[] = {
        {"{\"a\": 1", NULL, "unterminated object"},
        {"[1, 2]", NULL, "not an object"},
        {NULL, "#version: 0.2\nh e x\n", "three symbols on a merge line"},
        {NULL, "#version: 0.2\nq z\n", "merge of unknown tokens"},
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        write_bytes(tmp_path("small/encoder.json"), js, n);
        write_text(tmp_path("small/vocab.bpe"), "#version: 0.2\nl l\n");
        if (bad[c].enc) write_text(tmp_path("small/encoder.json"), bad[c].enc);
        if (bad[c].bpe) write_text(tmp_path("small/vocab.bpe"), bad[c].bpe);
        cl_status s = cl_tokenizer_gpt2(&t, tmp_path("small"));
        CHECK(s == CL_ERR_FORMAT && t == NULL, "%s: got %s", bad[c].what, cl_status_name(s));
        CHECK(strstr(cl_last_error(), bad[c].enc ? "encoder.json" : "vocab.bpe") != NULL,
              "%s: message does not name the file: %s", bad[c].what, cl_last_error());
        if (s == CL_OK) cl_tokenizer_free(t);
    }
    CHECK(cl_tokenizer_gpt2(&t, tmp_path("no-such-dir")) == CL_ERR_IO, "missing dir must be an I/O error");
    CHECK(strstr(cl_last_error(), "no-such-dir/encoder.json") != NULL, "message: %s", cl_last_error());
    free(js);
}

/* ---- GPT-2 tokenizer: the real vocabulary ------------------------------------ */

/* Keep in step with tests/cli_bpe_node.sh, which checks these against node. */
static const struct { const char *text; int n; int32_t ids[20]; } gpt2_fixed[] = {
    {"Hello world", 2, {15496, 995}},
    {"In the beginning God created the heaven and the earth.", 11,
     {818, 262, 3726, 1793, 2727, 262, 9538, 290, 262, 4534, 13}},
    {" it's  \t\n\n caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac 42x \xf0\x9f\x98\x80!", 17,
     {340, 338, 220, 220, 197, 628, 40304, 10545, 245, 98, 17312, 105, 5433, 87, 30325, 222, 0}},
};

static void test_gpt2_real(void)
{
    if (!need_data("gpt2 tokenizer", "gpt2/encoder.json")) return;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/gpt2", data_dir);
    cl_tokenizer *t = NULL;
    double t0 = cl_now();
    CHECK_OK(cl_tokenizer_gpt2(&t, dir));
    if (!t) return;
    printf("gpt2 tokenizer loaded in %.2f s\n", cl_now() - t0);
    CHECK(cl_tokenizer_vocab(t) == 50257, "vocab %d", cl_tokenizer_vocab(t));
    for (size_t c = 0; c < sizeof gpt2_fixed / sizeof gpt2_fixed[0]; c++) {
        int32_t *ids;
        size_t n;
        size_t len = strlen(gpt2_fixed[c].text);
        CHECK_OK(cl_tokenizer_encode(t, gpt2_fixed[c].text, len, &ids, &n));
        int same = (int)n == gpt2_fixed[c].n;
        for (int k = 0; same && k < gpt2_fixed[c].n; k++) same = ids[k] == gpt2_fixed[c].ids[k];
        CHECK(same, "fixed string %zu: %zu ids, first %d", c, n, n ? ids[0] : -1);
        CHECK(decodes_to(t, ids, n, gpt2_fixed[c].text, len), "fixed string %zu round trip", c);
        free(ids);
    }
    char buf[64];
    int k = cl_tokenizer_decode(t, 50256, buf, (int)sizeof buf);
    CHECK(k == 13 && memcmp(buf, "<|endoftext|>", 13) == 0, "id 50256 decodes to %d bytes", k);
    CHECK(cl_tokenizer_decode(t, 50257, buf, 64) == -1, "id 50257 must be out of range");
    CHECK(cl_tokenizer_decode(t, 15496, buf, 3) == 3 && memcmp(buf, "Hel", 3) == 0, "decode honours cap");

    /* any bytes round trip, invalid UTF-8 included (byte fallback) */
    const char odd[] = "ok \xff\xfe bad \xc3 trunc \xe2\x82 over \xc0\xaf sur \xed\xa0\x80 big \xf4\x90\x80\x80 "
                       "ok\xe2\x82\xac \x80\x80\x80";
    int32_t *ids;
    size_t n;
    CHECK_OK(cl_tokenizer_encode(t, odd, sizeof odd - 1, &ids, &n));
    CHECK(decodes_to(t, ids, n, odd, sizeof odd - 1), "invalid UTF-8 round trip");
    free(ids);
    char all[512];
    for (int i = 0; i < 512; i++) all[i] = (char)(i * 37 % 256);
    CHECK_OK(cl_tokenizer_encode(t, all, sizeof all, &ids, &n));
    CHECK(decodes_to(t, ids, n, all, sizeof all), "all-bytes round trip");
    free(ids);
    CHECK_OK(cl_tokenizer_encode(t, "", 0, &ids, &n));
    CHECK(n == 0, "empty text gives %zu ids", n);
    free(ids);

    /* a long single pre-token stays fast (the merge loop is not quadratic) */
    size_t big = 1 << 20;
    char *run = malloc(big);
    for (size_t i = 0; i < big; i++) run[i] = "ab"[i % 2 == 0 ? 0 : (i / 7) % 2];
    t0 = cl_now();
    CHECK_OK(cl_tokenizer_encode(t, run, big, &ids, &n));
    double dt = cl_now() - t0;
    CHECK(dt < 10.0, "a 1 MiB pre-token took %.1f s", dt);
    CHECK(decodes_to(t, ids, n, run, big), "long pre-token round trip");
    free(ids);
    free(run);

    if (need_data("gpt2 round trip of kjv.txt", "kjv.txt")) {
        char path[4200], *text;
        size_t len;
        snprintf(path, sizeof path, "%s/kjv.txt", data_dir);
        CHECK_OK(cl_read_file(path, CL_FILE_TEXT, &text, &len));
        t0 = cl_now();
        CHECK_OK(cl_tokenizer_encode(t, text, len, &ids, &n));
        printf("kjv.txt: %zu bytes -> %zu gpt2 tokens in %.2f s\n", len, n, cl_now() - t0);
        CHECK(n > 1000000 && n < 1300000, "kjv.txt gave %zu tokens", n);
        CHECK(decodes_to(t, ids, n, text, len), "kjv.txt round trip");
        /* node's ids for "\nGenesis 1\n\n  1 In the beginning" (cli_bpe_node.sh compares this part) */
        CHECK(n >= 10 && memcmp(ids, (int32_t[]){198, 13746, 9339, 352, 628, 220, 352, 554, 262, 3726}, 10 * sizeof *ids) == 0,
              "kjv.txt starts with ids %d %d %d", ids[0], n > 1 ? ids[1] : -1, n > 2 ? ids[2] : -1);
        free(ids);
        free(text);
    }
    cl_tokenizer_free(t);
}

/* ---- token files ---------------------------------------------------------------- */

/* XXH64's published values (the reference implementation and the python
 * xxhash package agree on them). */
static void test_hash(void)
{
    CHECK(cl_hash64("", 0, 0) == 0xEF46DB3751D8E999ULL, "XXH64('') = %016llx", (unsigned long long)cl_hash64("", 0, 0));
    CHECK(cl_hash64("a", 1, 0) == 0xD24EC4F1A98C6E5BULL, "XXH64('a')");
    CHECK(cl_hash64("abc", 3, 0) == 0x44BC2CF5AD770999ULL, "XXH64('abc')");
    const char *spam = "Nobody inspects the spammish repetition"; /* 39 bytes: the 32-byte stripes too */
    CHECK(cl_hash64(spam, strlen(spam), 0) == 0xFBCEA83C8A378BF1ULL, "XXH64(spam) = %016llx",
          (unsigned long long)cl_hash64(spam, strlen(spam), 0));
    CHECK(cl_hash64("xxhash", 6, 20141025) == 0xB559B98D844E0635ULL, "XXH64('xxhash', seed 20141025)");
    /* the checkpoint hash: XXH3-64 (its published value for '') per 1 MiB block, summed; streamed in odd
     * pieces, and in two parts hashed apart (as two ranks do), it is the same */
    CHECK(cl_hash_block("", 0, 0) == 0x2D06800538D394C2ULL, "XXH3('') = %016llx", (unsigned long long)cl_hash_block("", 0, 0));
    {
        size_t n = 2 * CL_HASH_BLOCK + 12345;
        unsigned char *buf = malloc(n);
        CHECK(buf != NULL, "alloc");
        for (size_t i = 0; buf && i < n; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
        uint64_t whole = buf ? cl_hash_sum(buf, n) : 0;
        uint64_t terms = buf ? cl_hash_block(buf, CL_HASH_BLOCK, 0) + cl_hash_block(buf + CL_HASH_BLOCK, CL_HASH_BLOCK, 1) +
                                   cl_hash_block(buf + 2 * CL_HASH_BLOCK, 12345, 2)
                             : 1;
        CHECK(whole == terms, "cl_hash_sum is not the sum of its blocks' XXH3");
        cl_hasher *h = cl_hasher_new(), *h2 = cl_hasher_new();
        CHECK(h && h2, "cl_hasher_new");
        if (buf && h && h2) {
            for (size_t at = 0, k = 1; at < n; k = k * 7 % 1000003) {
                size_t take = k < n - at ? k : n - at;
                cl_hasher_feed(h, buf + at, take);
                at += take;
            }
            CHECK(cl_hasher_sum(h) == whole, "streamed in pieces: %016llx, not %016llx", (unsigned long long)cl_hasher_sum(h),
                  (unsigned long long)whole);
            cl_hasher_reset(h, 0);
            cl_hasher_feed(h, buf, CL_HASH_BLOCK);
            cl_hasher_reset(h2, 1);
            cl_hasher_feed(h2, buf + CL_HASH_BLOCK, n - CL_HASH_BLOCK);
            CHECK(cl_hasher_sum(h) + cl_hasher_sum(h2) == whole, "two parts hashed apart do not add up to the whole");
            buf[n / 2] ^= 1;
            CHECK(cl_hash_sum(buf, n) != whole, "one flipped bit left the hash unchanged");
        }
        cl_hasher_free(h);
        cl_hasher_free(h2);
        free(buf);
    }

    cl_tokenizer *b = NULL, *b2 = NULL;
    CHECK_OK(cl_tokenizer_byte(&b));
    CHECK_OK(cl_tokenizer_byte(&b2));
    CHECK(b && b2 && cl_tokenizer_hash(b) == cl_tokenizer_hash(b2) && cl_tokenizer_hash(b) != 0, "byte tokenizer identity");
    if (need_data("gpt2 tokenizer hash", "gpt2/vocab.bpe")) {
        char dir[4200], path[4300];
        snprintf(dir, sizeof dir, "%s/gpt2", data_dir);
        cl_tokenizer *g = NULL;
        CHECK_OK(cl_tokenizer_gpt2(&g, dir));
        if (g) {
            char *enc, *bpe;
            size_t ne, nb;
            snprintf(path, sizeof path, "%s/encoder.json", dir);
            CHECK_OK(cl_read_file(path, CL_FILE_TOKENIZER, &enc, &ne));
            snprintf(path, sizeof path, "%s/vocab.bpe", dir);
            CHECK_OK(cl_read_file(path, CL_FILE_TOKENIZER, &bpe, &nb));
            CHECK(cl_tokenizer_hash(g) == cl_hash64(bpe, nb, cl_hash64(enc, ne, 0)),
                  "gpt2 tokenizer hash is not XXH64 of encoder.json then vocab.bpe");
            free(enc);
            free(bpe);
            cl_tokenizer_free(g);
        }
        snprintf(path, sizeof path, "%s/kjv.txt", data_dir);
        char *text;
        size_t len;
        if (file_exists(path) && cl_read_file(path, CL_FILE_TEXT, &text, &len) == CL_OK) {
            double t0 = cl_now();
            uint64_t h = 0;
            for (int i = 0; i < 10; i++) h ^= cl_hash64(text, len, (uint64_t)i);
            printf("kjv.txt: %zu bytes hashed in %.2f ms (XXH64, mean of 10; %016llx)\n", len, (cl_now() - t0) * 100,
                   (unsigned long long)h);
            free(text);
        }
    }
    cl_tokenizer_free(b);
    cl_tokenizer_free(b2);
}

/* A token file's checksum recomputed by its documented definition. */
static uint64_t doc_checksum(const unsigned char *file, size_t len)
{
    return cl_hash64(file + 120, len - 120, cl_hash64(file, 112, 0));
}

static void put_sum(unsigned char *file, size_t len)
{
    uint64_t v = doc_checksum(file, len);
    for (int i = 0; i < 8; i++) file[112 + i] = (unsigned char)(v >> (8 * i));
}

static void test_tokens(void)
{
    int32_t toks[1000];
    for (int i = 0; i < 1000; i++) toks[i] = (i * 7919) % 256;
    const char *p = tmp_path("a.tok");
    cl_tokens_source src = {.text_size = 1000, .text_hash = 0x0123456789abcdefULL, .tokenizer_hash = 0xfedcba9876543210ULL};
    CHECK_OK(cl_tokens_write(p, toks, 1000, 256, "byte", &src));
    char leftover[300];
    snprintf(leftover, sizeof leftover, "%s.tmp.%ld", p, (long)getpid());
    CHECK(!file_exists(leftover), "temporary file %s left behind", leftover);
    cl_tokens r;
    CHECK_OK(cl_tokens_read(p, &r));
    CHECK(r.count == 1000 && r.vocab == 256 && strcmp(r.tokenizer, "byte") == 0,
          "read back count %zu vocab %d name %s", r.count, r.vocab, r.tokenizer);
    CHECK(r.tokens && memcmp(r.tokens, toks, sizeof toks) == 0, "tokens differ after round trip");
    CHECK(r.source.text_size == 1000 && r.source.text_hash == src.text_hash && r.source.tokenizer_hash == src.tokenizer_hash,
          "source read back as %llu %016llx %016llx", (unsigned long long)r.source.text_size,
          (unsigned long long)r.source.text_hash, (unsigned long long)r.source.tokenizer_hash);
    cl_tokens_free(&r);

    char *raw;
    size_t len;
    CHECK_OK(cl_read_file(p, CL_FILE_TOKENS, &raw, &len));
    unsigned char *u = (unsigned char *)raw;
    CHECK(len == 120 + 2000, "a 2-byte file of 1000 tokens is %zu bytes", len);
    CHECK(memcmp(raw, "CLTOK2\0\0", 8) == 0 && u[8] == 0 && u[9] == 1 && u[12] == 2 && u[16] == (1000 & 255) &&
              u[17] == (1000 >> 8) && u[88] == (1000 & 255) && u[89] == (1000 >> 8) && u[96] == 0xef && u[103] == 0x01 &&
              u[104] == 0x10 && u[111] == 0xfe,
          "header bytes are not the documented layout");
    uint64_t sum = 0;
    for (int i = 7; i >= 0; i--) sum = sum << 8 | u[112 + i];
    CHECK(sum == doc_checksum(u, len), "the checksum is not the documented XXH64 of the file");
    /* the same bytes from memory */
    CHECK_OK(cl_tokens_parse(raw, len, "mem", &r));
    CHECK(r.count == 1000 && r.tokens && memcmp(r.tokens, toks, sizeof toks) == 0, "parse from memory");
    cl_tokens_free(&r);

    /* 4-byte tokens for a big vocabulary; zero tokens; no source */
    int32_t big[3] = {0, 69999, 65536};
    CHECK_OK(cl_tokens_write(tmp_path("b.tok"), big, 3, 70000, "gpt2-ish", &src));
    CHECK_OK(cl_tokens_read(tmp_path("b.tok"), &r));
    CHECK(r.count == 3 && r.vocab == 70000 && r.tokens && r.tokens[1] == 69999 && r.tokens[2] == 65536,
          "4-byte round trip");
    cl_tokens_free(&r);
    CHECK_OK(cl_tokens_write(tmp_path("c.tok"), NULL, 0, 50257, "gpt2", NULL));
    CHECK_OK(cl_tokens_read(tmp_path("c.tok"), &r));
    CHECK(r.count == 0 && r.vocab == 50257 && r.source.text_hash == 0, "empty token file");
    cl_tokens_free(&r);

    /* rejections on read, each naming the file */
    unsigned char *bad = malloc(len + 8);
    memcpy(bad, raw, len);
    bad[0] = 'X';
    write_bytes(tmp_path("magic.tok"), bad, len);
    CHECK(cl_tokens_read(tmp_path("magic.tok"), &r) == CL_ERR_FORMAT, "bad magic accepted");
    CHECK(strstr(cl_last_error(), "magic.tok") != NULL, "message: %s", cl_last_error());
    memcpy(bad, raw, len);
    bad[5] = '1';
    write_bytes(tmp_path("v1.tok"), bad, len);
    CHECK(cl_tokens_read(tmp_path("v1.tok"), &r) == CL_ERR_FORMAT, "a CLTOK1 file accepted");
    CHECK(strstr(cl_last_error(), "older format CLTOK1") != NULL, "message: %s", cl_last_error());
    write_bytes(tmp_path("trunc.tok"), raw, len - 3);
    CHECK(cl_tokens_read(tmp_path("trunc.tok"), &r) == CL_ERR_FORMAT, "truncated file accepted");
    CHECK(strstr(cl_last_error(), "trunc.tok") != NULL, "message: %s", cl_last_error());
    write_bytes(tmp_path("head.tok"), raw, 40);
    CHECK(cl_tokens_read(tmp_path("head.tok"), &r) == CL_ERR_FORMAT, "truncated header accepted");
    memcpy(bad, raw, len);
    memcpy(bad + len, "\0\0", 2);
    write_bytes(tmp_path("long.tok"), bad, len + 2);
    CHECK(cl_tokens_read(tmp_path("long.tok"), &r) == CL_ERR_FORMAT, "file with extra bytes accepted");
    /* an in-range token changed: only the checksum can tell */
    memcpy(bad, raw, len);
    bad[120 + 2 * 500] ^= 0x01;
    write_bytes(tmp_path("flip.tok"), bad, len);
    CHECK(cl_tokens_read(tmp_path("flip.tok"), &r) == CL_ERR_FORMAT, "a changed in-range token accepted");
    CHECK(strstr(cl_last_error(), "flip.tok") != NULL && strstr(cl_last_error(), "damaged") != NULL,
          "message: %s", cl_last_error());
    CHECK(r.tokens == NULL && r.count == 0, "a failed read leaves an empty result");
    memcpy(bad, raw, len);
    bad[96] ^= 0x80; /* the recorded text hash */
    write_bytes(tmp_path("src.tok"), bad, len);
    CHECK(cl_tokens_read(tmp_path("src.tok"), &r) == CL_ERR_FORMAT, "a changed source field accepted");
    /* out of range with a matching checksum */
    memcpy(bad, raw, len);
    bad[120 + 2 * 500] = 0;
    bad[120 + 2 * 500 + 1] = 1; /* token 500 = 256 >= vocab */
    put_sum(bad, len);
    write_bytes(tmp_path("range.tok"), bad, len);
    CHECK(cl_tokens_read(tmp_path("range.tok"), &r) == CL_ERR_FORMAT, "token out of range accepted");
    CHECK(strstr(cl_last_error(), "range.tok") != NULL && strstr(cl_last_error(), "256") != NULL,
          "message: %s", cl_last_error());
    memcpy(bad, raw, len);
    bad[12] = 3;
    put_sum(bad, len);
    write_bytes(tmp_path("bpt.tok"), bad, len);
    CHECK(cl_tokens_read(tmp_path("bpt.tok"), &r) == CL_ERR_FORMAT, "3 bytes per token accepted");
    { /* a small vocabulary stored 4 bytes a token, sizes and checksum consistent (a fuzz find): the format says 2 */
        size_t n = (len - 120) / 2, wide_len = 120 + 4 * n;
        unsigned char *wide = malloc(wide_len);
        CL_ASSERT(wide);
        memcpy(wide, raw, 120);
        wide[12] = 4;
        for (size_t i = 0; i < n; i++) {
            wide[120 + 4 * i] = u[120 + 2 * i], wide[121 + 4 * i] = u[121 + 2 * i];
            wide[122 + 4 * i] = wide[123 + 4 * i] = 0;
        }
        put_sum(wide, wide_len);
        CHECK(cl_tokens_parse(wide, wide_len, "wide", &r) == CL_ERR_FORMAT && strstr(cl_last_error(), "bytes per token"),
              "4-byte tokens of a vocabulary under 65537 accepted: %s", cl_last_error());
        free(wide);
    }
    memcpy(bad, raw, len);
    bad[16] = 0xff; bad[23] = 0xff; /* a count whose byte size overflows */
    put_sum(bad, len);
    CHECK(cl_tokens_parse(bad, len, "count", &r) == CL_ERR_FORMAT, "huge count accepted");
    CHECK(cl_tokens_read(tmp_path("missing.tok"), &r) == CL_ERR_IO, "missing file must be an I/O error");
    CHECK(r.tokens == NULL && r.count == 0, "a failed read leaves an empty result");

    /* every prefix and every single-bit change of a small file is refused */
    CHECK_OK(cl_tokens_write(tmp_path("s.tok"), toks, 16, 256, "byte", &src));
    char *sraw;
    size_t slen;
    CHECK_OK(cl_read_file(tmp_path("s.tok"), CL_FILE_TOKENS, &sraw, &slen));
    int accepted = 0;
    for (size_t n = 0; n < slen; n++)
        if (cl_tokens_parse(sraw, n, "prefix", &r) != CL_ERR_FORMAT) accepted++, cl_tokens_free(&r);
    CHECK(accepted == 0, "%d truncations of a token file accepted", accepted);
    unsigned char *sb = malloc(slen);
    for (size_t i = 0; i < slen * 8; i++) {
        memcpy(sb, sraw, slen);
        sb[i / 8] ^= (unsigned char)(1u << (i % 8));
        if (cl_tokens_parse(sb, slen, "bitflip", &r) != CL_ERR_FORMAT) accepted++, cl_tokens_free(&r);
    }
    CHECK(accepted == 0, "%d single-bit changes of a token file accepted", accepted);
    /* garbage, with and without the magic */
    uint64_t x = 88172645463325252ULL;
    for (int k = 0; k < 200; k++) {
        size_t n = (size_t)(k * 7) % (slen + 40);
        for (size_t i = 0; i < n && i < slen; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            sb[i] = (unsigned char)x;
        }
        if (k % 2 && n >= 8) memcpy(sb, "CLTOK2\0\0", 8);
        if (cl_tokens_parse(sb, n < slen ? n : slen, "garbage", &r) != CL_ERR_FORMAT) accepted++, cl_tokens_free(&r);
    }
    CHECK(accepted == 0, "%d garbage token files accepted", accepted);
    CHECK(cl_tokens_parse(NULL, 0, NULL, &r) == CL_ERR_FORMAT, "no data accepted");
    free(sb);
    free(sraw);
    free(bad);
    free(raw);

    /* rejections on write */
    int32_t oor[2] = {5, 256};
    CHECK(cl_tokens_write(tmp_path("w.tok"), oor, 2, 256, "byte", NULL) == CL_ERR_INVALID, "writing token 256 of 256");
    CHECK(!file_exists(tmp_path("w.tok")), "a refused write left a file");
    char longname[80];
    memset(longname, 'n', 79);
    longname[79] = 0;
    CHECK(cl_tokens_write(tmp_path("w.tok"), toks, 2, 256, longname, NULL) == CL_ERR_INVALID, "79-byte name accepted");
    CHECK(cl_tokens_write(tmp_path("no-dir/w.tok"), toks, 2, 256, "byte", NULL) == CL_ERR_IO, "write into a missing dir");
}

/* ---- digits --------------------------------------------------------------------- */

static void test_digits(void)
{
    cl_digits d;
    if (need_data("digits", "digits.csv.gz")) {
        char path[4200];
        snprintf(path, sizeof path, "%s/digits.csv.gz", data_dir);
#ifdef CL_HAVE_ZLIB
        CHECK_OK(cl_digits_load(path, &d));
        CHECK(d.n == 1797, "n %d", d.n);
        if (d.n == 1797) {
            int counts[10] = {0}, ok = 1;
            for (int i = 0; i < d.n; i++) {
                if (d.labels[i] < 0 || d.labels[i] > 9) ok = 0;
                else counts[d.labels[i]]++;
            }
            CHECK(ok, "a label is outside 0..9");
            for (int c = 0; c < 10; c++) CHECK(counts[c] > 150, "label %d appears %d times", c, counts[c]);
            int inrange = 1;
            for (long i = 0; i < 1797L * 64; i++) inrange &= d.images[i] >= 0 && d.images[i] <= 1;
            CHECK(inrange, "an image value is outside [0, 1]");
            /* first row: 0,0,5,13,9,1,0,0,0,0,13,15,... label 0; last label 8 */
            CHECK(d.images[0] == 0 && d.images[2] == 5 / 16.0f && d.images[3] == 13 / 16.0f &&
                  d.images[10] == 13 / 16.0f && d.images[11] == 15 / 16.0f,
                  "first row starts %g %g %g %g", d.images[0], d.images[1], d.images[2], d.images[3]);
            CHECK(d.labels[0] == 0 && d.labels[1] == 1 && d.labels[2] == 2 && d.labels[1796] == 8,
                  "labels %d %d %d ... %d", d.labels[0], d.labels[1], d.labels[2], d.labels[1796]);
        }
        cl_digits_free(&d);
#else
        CHECK(cl_digits_load(path, &d) == CL_ERR_UNSUPPORTED, "a .gz without zlib must be unsupported");
        CHECK(strstr(cl_last_error(), "zlib") != NULL, "message: %s", cl_last_error());
#endif
    }

    /* a plain csv, with CRLF and a blank last line */
    char row[400], two[900];
    int k = 0;
    for (int i = 0; i < 64; i++) k += snprintf(row + k, sizeof row - (size_t)k, "%d,", i % 17);
    snprintf(two, sizeof two, "%s7\r\n%s3.0\n\n", row, row);
    write_text(tmp_path("two.csv"), two);
    CHECK_OK(cl_digits_load(tmp_path("two.csv"), &d));
    CHECK(d.n == 2 && d.labels[0] == 7 && d.labels[1] == 3 && d.images[16] == 16 / 16.0f && d.images[64 + 1] == 1 / 16.0f,
          "plain csv: n %d", d.n);
    cl_digits_free(&d);
#ifdef CL_HAVE_ZLIB
    gzFile g = gzopen(tmp_path("two.csv.gz"), "wb");
    CHECK(g != NULL, "gzopen for writing");
    if (g) {
        gzwrite(g, two, (unsigned)strlen(two));
        gzclose(g);
        CHECK_OK(cl_digits_load(tmp_path("two.csv.gz"), &d));
        CHECK(d.n == 2 && d.labels[1] == 3, "gz csv: n %d", d.n);
        cl_digits_free(&d);
    }
#endif

    struct { const char *tail, *what, *needle; } bad[] = {
        {"1\n5,5\n", "too few fields", "line 2"},
        {"1\n%s1,2\n", "too many fields", "line 2"},
        {"x\n", "a label that is not a number", "line 1"},
        {"10\n", "label 10", "line 1"},
        {"2.5\n", "label 2.5", "line 1"},
        {"-1\n", "negative label", "line 1"},
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        char text[2000];
        if (strstr(bad[c].tail, "%s")) {
            char t2[900];
            snprintf(t2, sizeof t2, "%s", row);
            snprintf(text, sizeof text, "%s1\n%s1,2\n", row, t2);
        } else {
            snprintf(text, sizeof text, "%s%s", row, bad[c].tail);
        }
        write_text(tmp_path("bad.csv"), text);
        cl_status s = cl_digits_load(tmp_path("bad.csv"), &d);
        CHECK(s == CL_ERR_FORMAT, "%s: got %s", bad[c].what, cl_status_name(s));
        CHECK(strstr(cl_last_error(), "bad.csv") && strstr(cl_last_error(), bad[c].needle),
              "%s: message: %s", bad[c].what, cl_last_error());
        CHECK(d.images == NULL && d.n == 0, "%s: a failed load leaves an empty result", bad[c].what);
    }
    char px[900];
    snprintf(px, sizeof px, "17,%s", row + 2); /* first pixel 17 */
    snprintf(px + strlen(px), sizeof px - strlen(px), "1\n");
    write_text(tmp_path("px.csv"), px);
    CHECK(cl_digits_load(tmp_path("px.csv"), &d) == CL_ERR_FORMAT, "pixel 17 accepted");
    CHECK(strstr(cl_last_error(), "0..16") != NULL, "message: %s", cl_last_error());
    /* the pixels per image are the file's: 4 here; a row of another count is refused naming its line */
    write_text(tmp_path("four.csv"), "0,16,8,4,3\n\n1,2,3,4,9\n");
    CHECK_OK(cl_digits_load(tmp_path("four.csv"), &d));
    CHECK(d.n == 2 && d.pixels == 4 && d.images[1] == 1.0f && d.images[4 + 3] == 4 / 16.0f && d.labels[1] == 9,
          "4 pixels: n %d pixels %d", d.n, d.pixels);
    cl_digits_free(&d);
    CHECK(d.pixels == 0 && d.images == NULL, "freed: pixels %d", d.pixels);
    CHECK_OK(cl_digits_load(tmp_path("two.csv"), &d));
    CHECK(d.pixels == 64, "the 8x8 rows: %d pixels", d.pixels);
    cl_digits_free(&d);
    write_text(tmp_path("mixed.csv"), "\n0,16,8,4,3\n1,2,3,4,5,6,9\n");
    cl_status ms = cl_digits_load(tmp_path("mixed.csv"), &d);
    CHECK(ms == CL_ERR_FORMAT && strstr(cl_last_error(), "mixed.csv line 3") && strstr(cl_last_error(), "4 pixels and a label, as line 2"),
          "rows of 4 and 6 pixels: %s: %s", cl_status_name(ms), cl_last_error());
    write_text(tmp_path("label.csv"), "7\n");
    ms = cl_digits_load(tmp_path("label.csv"), &d);
    CHECK(ms == CL_ERR_FORMAT && strstr(cl_last_error(), "label.csv line 1"), "a label alone: %s: %s", cl_status_name(ms), cl_last_error());
    write_text(tmp_path("empty.csv"), "\n\n");
    CHECK(cl_digits_load(tmp_path("empty.csv"), &d) == CL_ERR_FORMAT, "empty csv accepted");
    CHECK(cl_digits_load(tmp_path("none.csv"), &d) == CL_ERR_IO, "missing csv must be an I/O error");
#ifdef CL_HAVE_ZLIB
    /* a corrupted .gz: valid header, garbage body */
    write_bytes(tmp_path("bad.csv.gz"), "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbagegarbage", 24);
    cl_status s = cl_digits_load(tmp_path("bad.csv.gz"), &d);
    CHECK(s == CL_ERR_FORMAT, "corrupted gzip: got %s", cl_status_name(s));
    /* a truncated .gz must not pass for a shorter file */
    char *gz;
    size_t gzlen;
    CHECK_OK(cl_read_file(tmp_path("two.csv.gz"), CL_FILE_DIGITS, &gz, &gzlen));
    if (gz) {
        write_bytes(tmp_path("cut.csv.gz"), gz, gzlen - 10);
        s = cl_digits_load(tmp_path("cut.csv.gz"), &d);
        CHECK(s == CL_ERR_FORMAT && strstr(cl_last_error(), "cut.csv.gz"), "truncated gzip: got %s: %s",
              cl_status_name(s), cl_last_error());
        free(gz);
    }
#endif
}

/* ---- cl_read_file -------------------------------------------------------------- */

static void test_read_file(void)
{
    char data[10000];
    for (int i = 0; i < 10000; i++) data[i] = (char)(i * 13 % 251 + 1);
    data[5000] = 0;
    write_bytes(tmp_path("f.bin"), data, sizeof data);
    char *s;
    size_t n;
    CHECK_OK(cl_read_file(tmp_path("f.bin"), CL_FILE_JSON, &s, &n));
    CHECK(n == sizeof data && s && memcmp(s, data, n) == 0 && s[n] == 0, "read back %zu bytes", n);
    free(s);
    write_bytes(tmp_path("e.bin"), "", 0);
    CHECK_OK(cl_read_file(tmp_path("e.bin"), CL_FILE_JSON, &s, &n));
    CHECK(n == 0 && s && s[0] == 0, "empty file");
    free(s);
    CHECK(cl_read_file(tmp_path("nope"), CL_FILE_JSON, &s, &n) == CL_ERR_IO && s == NULL, "missing file");
    CHECK(strstr(cl_last_error(), "nope") != NULL, "message: %s", cl_last_error());
    CHECK(cl_read_file(tmpdir, CL_FILE_JSON, &s, &n) == CL_ERR_IO && s == NULL, "a directory must be refused");
    if (file_exists("/proc/self/status")) { /* size 0 in stat, content when read */
        CHECK_OK(cl_read_file("/proc/self/status", CL_FILE_JSON, &s, &n));
        CHECK(n > 0 && strstr(s, "Name:") != NULL, "/proc file read as %zu bytes", n);
        free(s);
    }
}

/* ---- size bounds ----------------------------------------------------------------- */

/* A file of size bytes (sparse: nothing written). */
static void sized_file(const char *path, size_t size)
{
    write_bytes(path, "", 0);
    CHECK(truncate(path, (off_t)size) == 0, "cannot size %s", path);
}

static void test_read_bounds(void)
{
    size_t jb = cl_file_bound(CL_FILE_JSON), text = cl_file_bound(CL_FILE_TEXT);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    CHECK(jb == 4u << 20, "a JSON config's bound is %zu bytes", jb);
    CHECK(cl_host_memory_total() > 0 && (pages <= 0 || cl_host_memory_total() <= (size_t)pages * (size_t)psz),
          "memory this process may use: %zu", cl_host_memory_total());
    CHECK(text == cl_host_memory_total() / 8, "the text bound %zu is not an eighth of %zu", text, cl_host_memory_total());
    CHECK(cl_file_bound(CL_FILE_TOKENS) == 2 * text + 120 || cl_file_bound(CL_FILE_TOKENS) == 2 * text + 121,
          "token cache bound %zu for text bound %zu", cl_file_bound(CL_FILE_TOKENS), text);
    CHECK(cl_file_bound(CL_FILE_DIGITS) <= (256u << 20) && cl_file_bound(CL_FILE_DIGITS) <= text, "digits bound %zu",
          cl_file_bound(CL_FILE_DIGITS));
    char *s = NULL;
    size_t n = 0;
    /* exactly the bound: read whole */
    sized_file(tmp_path("at.json"), jb);
    CHECK_OK(cl_read_file(tmp_path("at.json"), CL_FILE_JSON, &s, &n));
    CHECK(s && n == jb && s[n] == 0, "a file at the bound read as %zu bytes", n);
    free(s);
    /* a byte over: refused from its size, naming the file and the bound */
    sized_file(tmp_path("over.json"), jb + 1);
    CHECK(cl_read_file(tmp_path("over.json"), CL_FILE_JSON, &s, &n) == CL_ERR_FORMAT && s == NULL && n == 0, "a file over the bound read");
    CHECK(strstr(cl_last_error(), tmp_path("over.json")) && strstr(cl_last_error(), "4.0 MiB (4194304 bytes)") &&
              strstr(cl_last_error(), "a JSON description or config"),
          "message: %s", cl_last_error());
    cl_json_doc *doc = NULL;
    CHECK(cl_json_parse_file(&doc, tmp_path("over.json")) == CL_ERR_FORMAT && doc == NULL, "JSON over its bound parsed");
    /* an index may be larger than a config */
    CHECK(cl_file_bound(CL_FILE_INDEX) > jb, "index bound %zu", cl_file_bound(CL_FILE_INDEX));
    CHECK_OK(cl_read_file(tmp_path("over.json"), CL_FILE_INDEX, &s, &n));
    free(s);
    /* a device with no end: read to one byte past the bound, then refused */
    if (file_exists("/dev/zero")) {
        CHECK(cl_read_file("/dev/zero", CL_FILE_JSON, &s, &n) == CL_ERR_FORMAT && s == NULL, "/dev/zero read as JSON");
        CHECK(strstr(cl_last_error(), "/dev/zero holds more than 4.0 MiB (4194304 bytes)"), "message: %s", cl_last_error());
        CHECK(cl_json_parse_file(&doc, "/dev/zero") == CL_ERR_FORMAT && doc == NULL && strstr(cl_last_error(), "4194304 bytes"),
              "/dev/zero as JSON: %s", cl_last_error());
    }
    unlink(tmp_path("at.json"));
    unlink(tmp_path("over.json"));
}

/* ---- cl_json_parse_file ------------------------------------------------------- */

static void test_json_parse_file(void)
{
    const char *good = tmp_path("good.json"), *bad = tmp_path("bad.json");
    write_bytes(good, "{\"a\": [1, 2]}", 13);
    cl_json_doc *doc = NULL;
    CHECK_OK(cl_json_parse_file(&doc, good));
    const cl_json *a = cl_json_get(cl_json_root(doc), "a");
    CHECK(a && a->type == CL_JSON_ARRAY && a->count == 2, "parsed document");
    cl_json_free(doc);
    write_bytes(bad, "{\"a\": [1,", 9);
    char want[300];
    snprintf(want, sizeof want, "%s: not a JSON file: json: offset 9: ", bad);
    CHECK(cl_json_parse_file(&doc, bad) == CL_ERR_FORMAT && doc == NULL, "truncated JSON must be refused");
    CHECK(strncmp(cl_last_error(), want, strlen(want)) == 0, "message: %s", cl_last_error());
    CHECK(cl_json_parse_file(&doc, tmp_path("nope.json")) == CL_ERR_IO && doc == NULL, "missing file");
    CHECK(strncmp(cl_last_error(), "cannot open ", 12) == 0 && strstr(cl_last_error(), "nope.json"), "message: %s",
          cl_last_error());
}

static void remove_tree(const char *dir)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cleave-test-data.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    find_data();
    test_byte_tokenizer();
    test_gpt2_small();
    test_gpt2_real();
    test_hash();
    test_tokens();
    test_digits();
    test_read_file();
    test_read_bounds();
    test_json_parse_file();
    remove_tree(tmpdir);
    return cl_test_report("test_data");
}
