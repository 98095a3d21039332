/* Tests of cleave/dataset.h's pure parts: the blend (Megatron-LM's rule,
 * its counts against the weights, the cursor's answers in any order), the
 * --data and --split parsers and the split's bounds (the default 9,1,0 is
 * the old n/10 validation tail exactly). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleave/dataset.h"
#include "common/check.h"

/* The rule written out plainly, for comparison: dataset of each of n samples. */
static void reference(const double *w, int nd, int64_t n, int *which, int64_t *nth) {
    int64_t drawn[CL_BLEND_MAX] = {0};
    for (int64_t i = 0; i < n; i++) {
        double x = i > 1 ? (double)i : 1.0;
        int best = 0;
        for (int d = 1; d < nd; d++)
            if (w[d] * x - (double)drawn[d] > w[best] * x - (double)drawn[best]) best = d;
        which[i] = best;
        nth[i] = drawn[best]++;
    }
}

static void test_blend_counts(void) {
    enum { N = 10000 };
    static int which[N], ref[N];
    static int64_t nth[N], refnth[N];
    double w[2] = {0.7, 0.3};
    cl_blend_cursor c;
    cl_blend_cursor_init(&c, w, 2);
    int64_t count[2] = {0, 0};
    for (int64_t i = 0; i < N; i++) {
        cl_blend_pick(&c, i, &which[i], &nth[i]);
        count[which[i]]++;
    }
    CHECK(llabs(count[0] - 7000) <= 100 && llabs(count[1] - 3000) <= 100, "0.7/0.3 over %d samples gave %lld/%lld", N,
          (long long)count[0], (long long)count[1]);
    CHECK(count[0] == 7000 && count[1] == 3000, "the rule is exact at a multiple of 10: %lld/%lld", (long long)count[0],
          (long long)count[1]);
    reference(w, 2, N, ref, refnth);
    int same = 1;
    for (int i = 0; i < N; i++) same &= which[i] == ref[i] && nth[i] == refnth[i];
    CHECK(same, "the cursor differs from the rule written out");
    /* every prefix stays within one sample of its share */
    int64_t run[2] = {0, 0}, worst = 0;
    for (int i = 0; i < N; i++) {
        run[which[i]]++;
        double off = (double)run[0] - 0.7 * (i + 1);
        if (off < 0) off = -off;
        if (off > worst) worst = (int64_t)(off + 0.999);
    }
    CHECK(worst <= 1, "a prefix is %lld samples off its share", (long long)worst);

    /* any order of requests (a resume, a rank's slice, a pipeline's refills) gives the same answers */
    cl_blend_cursor r;
    cl_blend_cursor_init(&r, w, 2);
    int ok = 1;
    for (int k = 0; k < 2000; k++) {
        int64_t i = (int64_t)((k * 7919u) % N);
        int d;
        int64_t j;
        cl_blend_pick(&r, i, &d, &j);
        ok &= d == which[i] && j == nth[i];
    }
    CHECK(ok, "random-order picks differ from the sequence");
    cl_blend_cursor m;
    cl_blend_cursor_init(&m, w, 2);
    cl_blend_mark(&m, 5000);
    ok = 1;
    for (int64_t i = 5007; i >= 5000; i--) { /* backwards within the mark: from the mark, not from 0 */
        int d;
        int64_t j;
        cl_blend_pick(&m, i, &d, &j);
        ok &= d == which[i] && j == nth[i] && m.at == i + 1;
    }
    CHECK(ok, "picks behind the cursor but after the mark");

    /* three datasets, one of weight 0 (never drawn) */
    double w3[3] = {0.5, 0, 0.5};
    cl_blend_cursor_init(&c, w3, 3);
    int64_t c3[3] = {0, 0, 0};
    for (int64_t i = 0; i < 1000; i++) {
        int d;
        int64_t j;
        cl_blend_pick(&c, i, &d, &j);
        c3[d]++;
    }
    CHECK(c3[0] == 500 && c3[1] == 0 && c3[2] == 500, "0.5/0/0.5 gave %lld/%lld/%lld", (long long)c3[0], (long long)c3[1],
          (long long)c3[2]);
}

static void test_parse(void) {
    cl_blend_spec b;
    CHECK(cl_blend_parse("0.7 web.jsonl 0.3 books.txt", &b) == CL_OK && b.n == 2 && !strcmp(b.path[1], "books.txt") &&
              b.weight[0] > 0.6999999 && b.weight[0] < 0.7000001,
          "a two-way blend");
    cl_blend_spec_free(&b);
    CHECK(cl_blend_parse("7 a 3 b", &b) == CL_OK && b.weight[0] == 0.7 && b.weight[1] == 0.3, "weights normalised");
    cl_blend_spec_free(&b);
    CHECK(cl_blend_parse("corpus.txt", &b) == CL_OK && b.n == 1 && b.weight[0] == 1, "one path");
    cl_blend_spec_free(&b);
    const struct {
        const char *v, *msg;
    } bad[] = {{"0.7 a x b", "'x' is not a number"},  {"-1 a 2 b", "negative"},       {"0 a 0 b", "sum to zero"},
               {"0.7 a 0.3", "no path after it"},    {"nan a 1 b", "not a number"},  {"1e999 a 1 b", "not a number"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cl_status s = cl_blend_parse(bad[i].v, &b);
        CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), bad[i].msg), "--data \"%s\": %s", bad[i].v, cl_last_error());
    }
    double w[3];
    CHECK(cl_split_parse(NULL, w) == CL_OK && w[0] == 9 && w[1] == 1 && w[2] == 0, "default split");
    CHECK(cl_split_parse("949,50,1", w) == CL_OK && w[0] == 949 && w[2] == 1, "949,50,1");
    CHECK(cl_split_parse("98,2", w) == CL_OK && w[1] == 2 && w[2] == 0, "two parts");
    const char *badsplit[] = {"1,2,3,4", "a,b", "0,0,0", "1,-1,0", ""};
    for (size_t i = 0; i < sizeof badsplit / sizeof badsplit[0]; i++)
        CHECK(cl_split_parse(badsplit[i], w) == CL_ERR_INVALID, "--split '%s' accepted", badsplit[i]);
}

static void test_split_bounds(void) {
    double def[3] = {9, 1, 0}, meg[3] = {949, 50, 1}, half[3] = {0.5, 0.25, 0.25};
    int ok = 1;
    for (size_t n = 0; n < 5000; n += 7) {
        size_t p[4];
        cl_split_bounds(n, def, p);
        ok &= p[0] == 0 && p[2] - p[1] == n / 10 && p[1] == n - n / 10 && p[2] == n && p[3] == n;
    }
    CHECK(ok, "9,1,0 is the old split: validation n/10 at the end");
    size_t p[4];
    cl_split_bounds(1000000, meg, p);
    CHECK(p[1] == 949000 && p[2] == 999000 && p[3] == 1000000, "949,50,1 of 1e6: %zu %zu %zu", p[1], p[2], p[3]);
    cl_split_bounds(1001, half, p);
    CHECK(p[1] + (p[2] - p[1]) + (p[3] - p[2]) == 1001 && p[2] - p[1] == 250 && p[3] - p[2] == 250, "fractions: %zu %zu %zu", p[1],
          p[2], p[3]);
}

static char tmpdir[64];

static void put_file(const char *name, const char *text) {
    char p[200];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* tokens of path under tmpdir equal want[0..n) */
static int loads_to(const cl_tokenizer *t, const char *name, const char *key, const int32_t *want, size_t n) {
    char p[200];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    cl_tokens tk;
    if (cl_dataset_load_tokens(p, key, t, &tk) != CL_OK) {
        fprintf(stderr, "%s: %s\n", name, cl_last_error());
        return 0;
    }
    int ok = tk.count == n && !memcmp(tk.tokens, want, n * sizeof *want);
    cl_tokens_free(&tk);
    return ok;
}

static void test_load(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cleave-test-dataset.XXXXXX");
    if (!mkdtemp(tmpdir)) return;
    cl_tokenizer *t;
    if (cl_tokenizer_byte(&t) != CL_OK) return;
    CHECK(cl_tokenizer_eod(t) == 0, "the byte tokenizer's end-of-document is byte 0");
    put_file("plain.txt", "ab\n");
    put_file("docs.jsonl", "{\"text\": \"ab\", \"k\": \"z\"}\n\n  {\"text\": \"c\", \"k\": \"y\"}\r\n");
    const int32_t plain[] = {'a', 'b', '\n'}, docs[] = {'a', 'b', 0, 'c', 0}, byk[] = {'z', 0, 'y', 0};
    CHECK(loads_to(t, "plain.txt", NULL, plain, 3), "a plain text is its bytes, no end token");
    CHECK(loads_to(t, "plain.txt", NULL, plain, 3), "and again from its cache");
    CHECK(loads_to(t, "docs.jsonl", NULL, docs, 5), "JSONL: a document per line, blank lines skipped");
    CHECK(loads_to(t, "docs.jsonl", "k", byk, 4), "JSONL with another key (the cache re-made)");
    CHECK(loads_to(t, "docs.jsonl", NULL, docs, 5), "and the first key again");
    char d[200];
    snprintf(d, sizeof d, "%s/dir", tmpdir);
    mkdir(d, 0700);
    snprintf(d, sizeof d, "%s/dir/sub", tmpdir);
    mkdir(d, 0700);
    put_file("dir/b.txt", "xy");
    put_file("dir/a.jsonl", "{\"text\": \"q\"}\n");
    put_file("dir/.hidden", "ignored");
    put_file("dir/sub/c.txt", "not read");
    const int32_t dir[] = {'q', 0, 'x', 'y', 0}, dir2[] = {'q', 0, 'x', 'y', 0, 'w', 0};
    CHECK(loads_to(t, "dir", NULL, dir, 5), "a directory: its files by name, each document ended");
    put_file("dir/c.txt", "w");
    CHECK(loads_to(t, "dir", NULL, dir2, 7), "a file added to the directory is read (the cache re-made)");
    put_file("dir/d.csv", "1,2");
    char p[200];
    snprintf(p, sizeof p, "%s/dir", tmpdir);
    cl_tokens tk;
    CHECK(cl_dataset_load_tokens(p, NULL, t, &tk) == CL_ERR_INVALID && strstr(cl_last_error(), "d.csv is neither"),
          "another kind of file is refused: %s", cl_last_error());
    cl_tokenizer_free(t);
    char g[4200];
    if (cl_data_find("gpt2", g, sizeof g) == CL_OK && cl_tokenizer_gpt2(&t, g) == CL_OK) {
        CHECK(cl_tokenizer_eod(t) == 50256, "GPT-2's <|endoftext|> is %d, want 50256", cl_tokenizer_eod(t));
        cl_tokenizer_free(t);
    } else {
        cl_error_clear();
        cl_test_skip("GPT-2's end-of-document token: data/gpt2 missing (run: bash scripts/setup.sh)", 1);
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

int main(void) {
    test_load();
    test_blend_counts();
    test_parse();
    test_split_bounds();
    return cl_test_report("test_dataset");
}
