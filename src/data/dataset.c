/* cleave datasets (see dataset.h): --data values parsed into blends, paths
 * (text, JSONL, directories) tokenized once through a token cache, split
 * into parts, and training samples drawn by Megatron-LM's blending rule.
 *
 * Why here: the trainer and `cleave eval` read data the same way; a source
 * is an interface (count + tokens()), so the in-memory sources made here
 * and a memory-mapped indexed dataset are drawn from alike.
 * Invariants: a plain text file given alone tokenizes exactly as it always
 * has (no end-of-document token, its cache keyed by its size and hash), so
 * runs on it are unchanged; every other document is followed by the
 * tokenizer's end-of-document token; a cache is used only when it records
 * the same files, sizes, contents, key and tokenizer. */
#include "cleave/dataset.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/tokenizer.h"

/* ---- parsing --data and --split ---------------------------------------------- */

void cl_blend_spec_free(cl_blend_spec *b) {
    for (int i = 0; i < b->n; i++) free(b->path[i]);
    b->n = 0;
}

/* A finite number >= 0 spelled as the whole of s. */
static int parse_weight(const char *s, double *w) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v)) return 0;
    *w = v;
    return 1;
}

cl_status cl_blend_parse(const char *value, cl_blend_spec *out) {
    memset(out, 0, sizeof *out);
    if (!value || !*value) return cl_error(CL_ERR_INVALID, "--data: empty value");
    struct stat st;
    if (stat(value, &st) == 0 || cl_indexed_exists(value) || !strpbrk(value, " \t\n")) { /* one path, as given */
        out->path[0] = strdup(value);
        if (!out->path[0]) return cl_error(CL_ERR_OOM, "--data: out of host memory");
        out->weight[0] = 1;
        out->n = 1;
        return CL_OK;
    }
    char *copy = strdup(value);
    if (!copy) return cl_error(CL_ERR_OOM, "--data: out of host memory");
    char *save = NULL, *w = strtok_r(copy, " \t\n", &save);
    double sum = 0;
    cl_status s = CL_OK;
    while (w && !s) {
        char *p = strtok_r(NULL, " \t\n", &save);
        double v;
        if (!parse_weight(w, &v))
            s = cl_error(CL_ERR_INVALID, "--data \"%s\": the blend weight '%s' is not a number (a blend is \"WEIGHT PATH WEIGHT PATH ...\")",
                         value, w);
        else if (v < 0) s = cl_error(CL_ERR_INVALID, "--data \"%s\": the blend weight %s is negative", value, w);
        else if (!p) s = cl_error(CL_ERR_INVALID, "--data \"%s\": the weight %s has no path after it", value, w);
        else if (out->n == CL_BLEND_MAX) s = cl_error(CL_ERR_INVALID, "--data \"%s\": more than %d datasets in a blend", value, CL_BLEND_MAX);
        else if (!(out->path[out->n] = strdup(p))) s = cl_error(CL_ERR_OOM, "--data: out of host memory");
        else {
            out->weight[out->n++] = v;
            sum += v;
        }
        w = strtok_r(NULL, " \t\n", &save);
    }
    free(copy);
    if (!s && !(sum > 0)) s = cl_error(CL_ERR_INVALID, "--data \"%s\": the blend weights sum to zero", value);
    if (s) {
        cl_blend_spec_free(out);
        return s;
    }
    for (int i = 0; i < out->n; i++) out->weight[i] /= sum;
    return CL_OK;
}

cl_status cl_split_parse(const char *value, double w[3]) {
    w[0] = 9, w[1] = 1, w[2] = 0;
    if (!value) return CL_OK;
    char buf[256];
    if (strlen(value) >= sizeof buf) return cl_error(CL_ERR_INVALID, "--split: too long a value");
    snprintf(buf, sizeof buf, "%s", value);
    double v[3] = {0, 0, 0}, sum = 0;
    int n = 0;
    char *save = NULL;
    for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (n == 3) return cl_error(CL_ERR_INVALID, "--split %s: more than three parts (train,validation,test)", value);
        if (!parse_weight(p, &v[n]) || v[n] < 0)
            return cl_error(CL_ERR_INVALID, "--split %s: '%s' is not a number >= 0 (the form is train,validation,test, e.g. 949,50,1)",
                            value, p);
        sum += v[n++];
    }
    if (n == 0 || !(sum > 0)) return cl_error(CL_ERR_INVALID, "--split %s: the parts sum to zero", value);
    memcpy(w, v, sizeof v);
    return CL_OK;
}

/* floor(n * a / s): exact when a and s are integers (128-bit product), else in doubles. */
static size_t part_of(size_t n, double a, double s) {
    if (a == floor(a) && s == floor(s) && s < 18446744073709551616.0)
        return (size_t)((unsigned __int128)n * (uint64_t)a / (uint64_t)s);
    double v = floor((double)n * (a / s));
    return v < 0 ? 0 : v > (double)n ? n : (size_t)v;
}

void cl_split_bounds(size_t n, const double w[3], size_t part[4]) {
    double s = w[0] + w[1] + w[2];
    size_t valid = part_of(n, w[1], s), test = part_of(n, w[2], s);
    if (valid + test > n) test = n - valid;
    part[0] = 0;
    part[1] = n - valid - test;
    part[2] = n - test;
    part[3] = n;
}

/* ---- the blend ------------------------------------------------------------------- */

void cl_blend_cursor_init(cl_blend_cursor *c, const double *weight, int n) {
    memset(c, 0, sizeof *c);
    c->n = n;
    for (int i = 0; i < n; i++) c->weight[i] = weight[i];
}

/* One step of the rule: sample c->at's dataset, drawn[] and at advanced. */
static int blend_step(cl_blend_cursor *c) {
    double x = c->at > 1 ? (double)c->at : 1.0, err = 0;
    int best = -1;
    for (int d = 0; d < c->n; d++) {
        double e = c->weight[d] * x - (double)c->drawn[d];
        if (c->weight[d] > 0 && (best < 0 || e > err)) err = e, best = d; /* a weight 0 is never drawn */
    }
    c->drawn[best]++;
    c->at++;
    return best;
}

/* Moves the cursor to sample i (from the mark, or from 0, when i is behind it). */
static void blend_seek(cl_blend_cursor *c, int64_t i) {
    if (i < c->at) {
        if (c->mark_at <= i && c->mark_at <= c->at) {
            c->at = c->mark_at;
            memcpy(c->drawn, c->mark_drawn, sizeof c->drawn);
        } else {
            c->at = 0;
            memset(c->drawn, 0, sizeof c->drawn);
        }
    }
    while (c->at < i) blend_step(c);
}

void cl_blend_pick(cl_blend_cursor *c, int64_t i, int *dataset, int64_t *nth) {
    if (c->n <= 1) { /* one dataset: the sample is its i-th */
        *dataset = 0;
        *nth = i;
        return;
    }
    blend_seek(c, i);
    int d = blend_step(c);
    *dataset = d;
    *nth = c->drawn[d] - 1;
}

void cl_blend_mark(cl_blend_cursor *c, int64_t i) {
    if (c->n <= 1 || c->mark_at == i) return;
    blend_seek(c, i);
    c->mark_at = i;
    memcpy(c->mark_drawn, c->drawn, sizeof c->drawn);
}

/* ---- one path's tokens ------------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* A growing token array. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} tok_buf;

static cl_status tb_add(tok_buf *b, const int32_t *ids, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n) c *= 2;
        int32_t *p = realloc(b->v, c * sizeof *p);
        if (!p) return cl_error(CL_ERR_OOM, "no host memory for %zu tokens", c);
        b->v = p;
        b->cap = c;
    }
    if (n) memcpy(b->v + b->n, ids, n * sizeof *ids);
    b->n += n;
    return CL_OK;
}

/* Encodes one document and appends it and the end-of-document token. */
static cl_status add_document(tok_buf *b, const cl_tokenizer *tok, int32_t eod, const char *text, size_t len) {
    int32_t *ids;
    size_t n;
    CL_TRY(cl_tokenizer_encode(tok, text, len, &ids, &n));
    cl_status s = tb_add(b, ids, n);
    free(ids);
    if (!s) s = tb_add(b, &eod, 1);
    return s;
}

cl_status cl_jsonl_next(const char *path, const char *text, size_t len, const char *key, size_t *at, size_t *line,
                        cl_json_doc **doc, const char **str, size_t *n) {
    *doc = NULL;
    while (*at < len) {
        const char *nl = memchr(text + *at, '\n', len - *at);
        size_t end = nl ? (size_t)(nl - text) : len;
        ++*line;
        size_t a = *at, e = end;
        while (a < e && strchr(" \t\r", text[a])) a++;
        while (e > a && strchr(" \t\r", text[e - 1])) e--;
        *at = nl ? end + 1 : len;
        if (a == e) continue; /* a blank line holds no document */
        cl_json_doc *d;
        if (cl_json_parse(&d, text + a, e - a)) {
            char why[512]; /* the parser's message, copied before cl_error rewrites it */
            snprintf(why, sizeof why, "%s", cl_last_error());
            return cl_error(CL_ERR_FORMAT, "%s line %zu: not JSON: %s", path, *line, why);
        }
        const cl_json *v = cl_json_get(cl_json_root(d), key);
        cl_status s = CL_OK;
        if (cl_json_root(d)->type != CL_JSON_OBJECT) s = cl_error(CL_ERR_FORMAT, "%s line %zu: not a JSON object", path, *line);
        else if (!v) s = cl_error(CL_ERR_FORMAT, "%s line %zu: no field \"%s\" (--data-key)", path, *line, key);
        else if (v->type != CL_JSON_STRING) s = cl_error(CL_ERR_FORMAT, "%s line %zu: the field \"%s\" is not a string", path, *line, key);
        if (s) {
            cl_json_free(d);
            return s;
        }
        *doc = d;
        *str = v->string;
        *n = v->string_len;
        return CL_OK;
    }
    return CL_OK;
}

/* Every line of a JSONL file's text a document: its field key, a string. */
static cl_status add_jsonl(tok_buf *b, const cl_tokenizer *tok, int32_t eod, const char *path, const char *text, size_t len,
                           const char *key) {
    size_t at = 0, line = 0, n;
    const char *str;
    cl_json_doc *doc;
    for (;;) {
        CL_TRY(cl_jsonl_next(path, text, len, key, &at, &line, &doc, &str, &n));
        if (!doc) return CL_OK;
        cl_status s = add_document(b, tok, eod, str, n);
        cl_json_free(doc);
        if (s) return s;
    }
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The files of a directory to read, sorted by name (each malloc'ed, *n of them). */
static cl_status list_dir(const char *dir, char ***out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *dh = opendir(dir);
    if (!dh) return cl_error(CL_ERR_IO, "--data %s: cannot read the directory: %s", dir, strerror(errno));
    char **v = NULL;
    int cnt = 0, cap = 0;
    cl_status s = CL_OK;
    struct dirent *e;
    while (!s && (e = readdir(dh))) {
        const char *nm = e->d_name;
        if (nm[0] == '.' || ends_with(nm, ".tok") || strstr(nm, ".tok.tmp.")) continue; /* hidden files, cleave's token caches */
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", dir, nm);
        struct stat st;
        if (stat(full, &st) != 0) s = cl_error(CL_ERR_IO, "--data %s: cannot read %s: %s", dir, full, strerror(errno));
        else if (S_ISDIR(st.st_mode)) continue; /* not descended into */
        else if (!ends_with(nm, ".txt") && !ends_with(nm, ".jsonl"))
            s = cl_error(CL_ERR_INVALID, "--data %s: %s is neither .txt nor .jsonl (a --data directory holds only those)", dir, full);
        else if (cnt == cap && !(v = realloc(v, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *v)))
            s = cl_error(CL_ERR_OOM, "--data %s: out of host memory", dir);
        else if (!(v[cnt] = strdup(full))) s = cl_error(CL_ERR_OOM, "--data %s: out of host memory", dir);
        else cnt++;
    }
    closedir(dh);
    if (!s && cnt == 0) s = cl_error(CL_ERR_INVALID, "--data %s: the directory holds no .txt or .jsonl file", dir);
    if (s) {
        for (int i = 0; i < cnt; i++) free(v[i]);
        free(v);
        return s;
    }
    qsort(v, (size_t)cnt, sizeof *v, name_cmp);
    *out = v;
    *n = cnt;
    return CL_OK;
}

/* Tokens made afresh (tokens NULL: only the source fields, for the cache check).
 * A plain text file alone: its tokens and text hash as ever; else every file
 * read in order, each a document (.txt) or a document per line (.jsonl). */
static cl_status read_path(const char *path, const char *key, const cl_tokenizer *tok, tok_buf *tokens, cl_tokens_source *src) {
    struct stat st;
    if (stat(path, &st) != 0)
        return cl_error(CL_ERR_IO, "--data %s: no such file (run scripts/setup.sh to prepare the default corpus)", path);
    char **files = NULL, *one = (char *)path;
    int nfiles = 1, dir = S_ISDIR(st.st_mode);
    if (dir) CL_TRY(list_dir(path, &files, &nfiles));
    else files = &one;
    int plain = !dir && !ends_with(path, ".jsonl");
    int32_t eod = cl_tokenizer_eod(tok);
    cl_status s = CL_OK;
    if (!plain && eod < 0) s = cl_error(CL_ERR_INVALID, "--data %s: the %s tokenizer has no end-of-document token", path, cl_tokenizer_name(tok));
    uint64_t h = cl_hash64("cleave dataset 1", 16, 0);
    if (!plain) h = cl_hash64(key, strlen(key), h);
    src->text_size = 0;
    for (int i = 0; i < nfiles && !s; i++) {
        char *text;
        size_t len;
        if ((s = cl_read_file(files[i], CL_FILE_TEXT, &text, &len))) break;
        src->text_size += len;
        if (plain) h = cl_hash64(text, len, 0);
        else {
            const char *base = files[i] + (dir ? strlen(path) + 1 : 0);
            uint64_t size = len;
            h = cl_hash64(base, strlen(base) + 1, h);
            h = cl_hash64(&size, sizeof size, h);
            h = cl_hash64(text, len, h);
        }
        if (tokens) {
            if (plain) {
                int32_t *ids;
                size_t n;
                if (!(s = cl_tokenizer_encode(tok, text, len, &ids, &n))) {
                    tokens->v = ids, tokens->n = tokens->cap = n;
                }
            } else if (ends_with(files[i], ".jsonl")) s = add_jsonl(tokens, tok, eod, files[i], text, len, key);
            else s = add_document(tokens, tok, eod, text, len);
        }
        free(text);
    }
    src->text_hash = h;
    src->tokenizer_hash = cl_tokenizer_hash(tok);
    if (dir) {
        for (int i = 0; i < nfiles; i++) free(files[i]);
        free(files);
    }
    return s;
}

cl_status cl_dataset_load_tokens(const char *path, const char *key, const cl_tokenizer *tok, cl_tokens *out) {
    memset(out, 0, sizeof *out);
    if (!key) key = "text";
    char cache[4200];
    size_t pl = strlen(path);
    while (pl > 1 && path[pl - 1] == '/') pl--; /* a directory's cache beside it */
    if (pl > 4096) return cl_error(CL_ERR_INVALID, "--data %.64s...: the path is too long", path);
    snprintf(cache, sizeof cache, "%.*s.%s.tok", (int)pl, path, cl_tokenizer_name(tok));
    cl_tokens_source src;
    CL_TRY(read_path(path, key, tok, NULL, &src));
    cl_status r = cl_tokens_read(cache, out);
    if (r == CL_OK) {
        const cl_tokens_source *had = &out->source;
        if (out->vocab == cl_tokenizer_vocab(tok) && !strcmp(out->tokenizer, cl_tokenizer_name(tok)) && had->text_size == src.text_size &&
            had->text_hash == src.text_hash && had->tokenizer_hash == src.tokenizer_hash)
            return CL_OK;
        fprintf(stderr, "cleave: note: token cache %s was made from another text or tokenizer; rebuilding it\n", cache);
    } else if (r == CL_ERR_FORMAT) {
        fprintf(stderr, "cleave: note: %s; rebuilding the token cache\n", cl_last_error());
    }
    cl_tokens_free(out);
    cl_error_clear();
    tok_buf b = {0};
    cl_status s = read_path(path, key, tok, &b, &src);
    if (s) {
        free(b.v);
        return s;
    }
    if (!b.v && !(b.v = malloc(sizeof *b.v))) return cl_error(CL_ERR_OOM, "--data %s: out of host memory", path);
    memset(out, 0, sizeof *out);
    out->tokens = b.v;
    out->count = b.n;
    out->vocab = cl_tokenizer_vocab(tok);
    out->source = src;
    snprintf(out->tokenizer, sizeof out->tokenizer, "%s", cl_tokenizer_name(tok));
    /* The cache is an optimization: failing to write it (read-only dir) is not an error. */
    if (cl_tokens_write(cache, b.v, b.n, out->vocab, out->tokenizer, &src) != CL_OK) cl_error_clear();
    return CL_OK;
}

/* ---- the dataset -------------------------------------------------------------------- */

static size_t part_windows(const cl_token_source *s, int part, int T) {
    return (s->part[part + 1] - s->part[part]) / ((size_t)T + 1);
}

static const int32_t *mem_tokens(void *ctx, size_t at, size_t n, int32_t *scratch) {
    (void)n, (void)scratch;
    return ((const cl_tokens *)ctx)->tokens + at;
}

static void mem_release(void *ctx) {
    cl_tokens_free(ctx);
    free(ctx);
}

/* A Megatron indexed dataset (PREFIX.idx + PREFIX.bin), memory-mapped: its
 * tokens converted window by window, never copied whole. */
static const int32_t *idx_tokens(void *ctx, size_t at, size_t n, int32_t *scratch) {
    cl_token_span_get(&((const cl_indexed *)ctx)->tokens, at, n, scratch);
    return scratch;
}

static void idx_drop(void *ctx, size_t at, size_t n) { cl_token_span_release(&((const cl_indexed *)ctx)->tokens, at, n); }

static void idx_release(void *ctx) {
    cl_indexed_close(ctx);
    free(ctx);
}

/* A path as a source: an indexed dataset's PREFIX mapped, anything else
 * tokenized (through its cache) into memory. */
static cl_status open_source(cl_token_source *src, const char *path, const cl_dataset_opts *o) {
    size_t pl = strlen(path);
    if (pl > 4 && (!strcmp(path + pl - 4, ".bin") || !strcmp(path + pl - 4, ".idx"))) {
        char prefix[4096];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(pl - 4), path);
        if (cl_indexed_exists(prefix))
            return cl_error(CL_ERR_INVALID, "--data %s is a file of the indexed dataset %s: give its prefix, --data %s", path, prefix, prefix);
    }
    snprintf(src->name, sizeof src->name, "%s", path);
    if (cl_indexed_exists(path)) { /* PREFIX.idx and PREFIX.bin, every token checked below the tokenizer's vocabulary */
        cl_indexed *x = calloc(1, sizeof *x);
        if (!x) return cl_error(CL_ERR_OOM, "--data: out of host memory");
        cl_status s = cl_indexed_open(path, cl_tokenizer_vocab(o->tok), x);
        if (s) {
            free(x);
            return s;
        }
        *src = (cl_token_source){.count = x->tokens.count, .ctx = x, .tokens = idx_tokens, .release = idx_release, .drop = idx_drop};
        snprintf(src->name, sizeof src->name, "%s", path);
        return CL_OK;
    }
    cl_tokens *t = calloc(1, sizeof *t);
    if (!t) return cl_error(CL_ERR_OOM, "--data: out of host memory");
    cl_status s = cl_dataset_load_tokens(path, o->key, o->tok, t);
    if (s) {
        free(t);
        return s;
    }
    src->count = t->count;
    src->ctx = t;
    src->tokens = mem_tokens;
    src->release = mem_release;
    return CL_OK;
}

void cl_dataset_close(cl_dataset *d) {
    for (int i = 0; i < d->n; i++)
        if (d->src[i].release) d->src[i].release(d->src[i].ctx);
    d->n = 0;
}

cl_status cl_dataset_open(cl_dataset *d, const cl_dataset_opts *o, int need) {
    memset(d, 0, sizeof *d);
    d->T = o->T;
    CL_TRY(cl_split_parse(o->split, d->split));
    cl_blend_spec b;
    CL_TRY(cl_blend_parse(o->data, &b));
    cl_status s = CL_OK;
    size_t win = (size_t)o->T + 1;
    for (int i = 0; i < b.n && !s; i++) {
        cl_token_source *src = &d->src[i];
        if ((s = open_source(src, b.path[i], o))) break;
        d->weight[i] = b.weight[i];
        d->n = i + 1;
        cl_split_bounds(src->count, d->split, src->part);
        size_t ntrain = src->part[1], nval = src->part[2] - src->part[1], ntest = src->part[3] - src->part[2];
        if (((need >> CL_PART_TRAIN & 1) && ntrain < win + 1) || ((need >> CL_PART_VALID & 1) && nval < win) ||
            ((need >> CL_PART_TEST & 1) && ntest < win)) {
            if (!o->split && need == (1 << CL_PART_TRAIN | 1 << CL_PART_VALID)) /* training's message as ever */
                s = cl_error(CL_ERR_INVALID, "--data %s has %zu tokens: too few for windows of %zu tokens (train 90%%, validation 10%%)",
                             src->name, src->count, win);
            else
                s = cl_error(CL_ERR_INVALID,
                             "--data %s has %zu tokens: too few for windows of %zu tokens (--split %s: train %zu, validation %zu, test %zu)",
                             src->name, src->count, win, o->split ? o->split : "9,1,0", ntrain, nval, ntest);
        }
    }
    cl_blend_spec_free(&b);
    if (s) {
        cl_dataset_close(d);
        return s;
    }
    cl_blend_cursor_init(&d->train, d->weight, d->n);
    for (int p = 0; p < 3; p++) { /* a part's blend leaves out the sources with no window in it */
        double w[CL_BLEND_MAX];
        for (int i = 0; i < d->n; i++) w[i] = part_windows(&d->src[i], p, d->T) ? d->weight[i] : 0;
        cl_blend_cursor_init(&d->part_cur[p], w, d->n);
    }
    return CL_OK;
}

const int32_t *cl_dataset_train_window(cl_dataset *d, int64_t k, int32_t *scratch, int *which) {
    int ds;
    int64_t j;
    cl_blend_pick(&d->train, k, &ds, &j);
    const cl_token_source *src = &d->src[ds];
    size_t T = (size_t)d->T, span = src->part[1] - T; /* starts in [0, span) leave room for T+1 tokens */
    size_t start = (size_t)(((uint64_t)j * (uint64_t)T) % span);
    if (which) *which = ds;
    return src->tokens(src->ctx, src->part[0] + start, T + 1, scratch);
}

size_t cl_dataset_windows(const cl_dataset *d, int part) {
    size_t n = 0;
    for (int i = 0; i < d->n; i++) n += part_windows(&d->src[i], part, d->T);
    return n;
}

size_t cl_dataset_tokens(const cl_dataset *d, int part) {
    size_t n = 0;
    for (int i = 0; i < d->n; i++) n += d->src[i].part[part + 1] - d->src[i].part[part];
    return n;
}

const int32_t *cl_dataset_window(cl_dataset *d, int part, size_t i, int32_t *scratch) {
    int ds;
    int64_t j;
    cl_blend_pick(&d->part_cur[part], (int64_t)i, &ds, &j);
    const cl_token_source *src = &d->src[ds];
    size_t nw = part_windows(src, part, d->T), per = (size_t)d->T + 1;
    return src->tokens(src->ctx, src->part[part] + (size_t)(j % (int64_t)nw) * per, per, scratch);
}
