/* cleave datasets: what `--data` names, as token streams a trainer draws
 * windows from, blended and split as Megatron-LM does.
 *
 * A --data value is one path (a plain text file, a JSONL file, a directory
 * of them) or a blend "W1 P1 W2 P2 ...": weights, then paths, in pairs, the
 * weights normalised to sum 1. Each path becomes a source: a stream of
 * tokens addressed by offset. A source is split into train, validation and
 * test parts (contiguous token ranges, --split's fractions); sample k of
 * training comes from the source the blend index picks for k, as the j-th
 * sample drawn from it, its window of T + 1 tokens starting at (j * T) mod
 * (train tokens - T). Everything is a pure function of k, the weights and
 * the data: every rank, every resume and every launcher sees the same
 * samples.
 *
 * Invariants: sources are never empty; part bounds satisfy 0 <= train <=
 * validation <= count; a source kind supplies count and a tokens() call that
 * never fails for in-bounds ranges (the trainer checks bounds before step 1),
 * so a memory-mapped source (another kind) plugs in beside the in-memory one
 * with nothing else changed. */
#ifndef CLEAVE_DATASET_H
#define CLEAVE_DATASET_H

#include "cleave/data.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CL_PART_TRAIN = 0, CL_PART_VALID = 1, CL_PART_TEST = 2 };
#define CL_BLEND_MAX 64 /* datasets in one blend */

/* One token stream. tokens(ctx, at, n, scratch) gives tokens [at, at + n):
 * a pointer into the source's own memory, or scratch (n entries) filled. */
typedef struct cl_token_source {
    char name[4096];       /* the path it came from */
    size_t count;
    void *ctx;
    const int32_t *(*tokens)(void *ctx, size_t at, size_t n, int32_t *scratch);
    void (*release)(void *ctx);
    void (*drop)(void *ctx, size_t at, size_t n); /* optional: tokens [at, at + n) not needed soon (a mapped source's pages leave the resident set) */
    size_t part[4];        /* train [part[0], part[1]), validation [part[1], part[2]), test [part[2], part[3] = count) */
} cl_token_source;

/* A parsed --data: n paths and their weights (normalised, summing to 1). A
 * value that names an existing file or directory is one path, weight 1,
 * whatever it holds; else it must be whitespace-separated pairs of a weight
 * (a finite number >= 0) and a path, the weights summing above 0. */
typedef struct {
    int n;
    double weight[CL_BLEND_MAX];
    char *path[CL_BLEND_MAX]; /* malloc'ed */
} cl_blend_spec;
cl_status cl_blend_parse(const char *value, cl_blend_spec *out);
void cl_blend_spec_free(cl_blend_spec *b);

/* --split "A,B,C" (train, validation, test; one or two numbers leave the
 * rest 0), each finite and >= 0, summing above 0: into w[3], unnormalised.
 * NULL gives the default 9,1,0. The parts of a source of n tokens are
 * validation floor(n * B / S) and test floor(n * C / S) tokens at the end
 * (S = A + B + C; exact integer arithmetic when all three are integers),
 * training the rest before them. */
cl_status cl_split_parse(const char *value, double w[3]);
void cl_split_bounds(size_t n, const double w[3], size_t part[4]);

/* Megatron-LM's blending rule (build_blending_indices): sample i goes to
 * the dataset d whose weight[d] * max(i, 1) - drawn[d] is largest (the first
 * on ties), as its drawn[d]-th sample; then drawn[d] += 1 (a dataset of weight 0 is never drawn). A cursor walks it
 * forward; asked for an earlier i it starts again at its mark (when at or
 * before i) or at 0. cl_blend_mark(c, i) moves it to i and marks there: a
 * caller whose later requests are all >= i (a training step's samples) so
 * never walks back further than i. */
typedef struct {
    int n;
    double weight[CL_BLEND_MAX];
    int64_t at;                    /* the next sample index */
    int64_t drawn[CL_BLEND_MAX];   /* samples each dataset gave before `at` */
    int64_t mark_at, mark_drawn[CL_BLEND_MAX]; /* the state at the mark (0 and zeros: the start) */
} cl_blend_cursor;
void cl_blend_cursor_init(cl_blend_cursor *c, const double *weight, int n);
/* Dataset and within-dataset index of sample i. */
void cl_blend_pick(cl_blend_cursor *c, int64_t i, int *dataset, int64_t *nth);
void cl_blend_mark(cl_blend_cursor *c, int64_t i);


/* A dataset: the sources of a --data value, their split and blend. */
typedef struct {
    const char *data;      /* the --data value */
    const char *key;       /* JSONL field (NULL: "text") */
    const char *split;     /* --split (NULL: 9,1,0) */
    const cl_tokenizer *tok;
    int T;                 /* tokens per sample (a window is T + 1) */
} cl_dataset_opts;

typedef struct {
    int n;
    cl_token_source src[CL_BLEND_MAX];
    double weight[CL_BLEND_MAX];
    double split[3];
    int T;
    cl_blend_cursor train;  /* training's blend position */
    cl_blend_cursor part_cur[3]; /* each part's evaluation order (cl_dataset_window) */
} cl_dataset;

/* Opens every source of o->data (tokenizing each once into a cache beside
 * it, cl_dataset_load_tokens) and checks that in every source each part in
 * need (bits 1 << CL_PART_*) holds a window: training T + 2 tokens, the
 * others T + 1. Errors name the path and the problem (CL_ERR_INVALID /
 * CL_ERR_FORMAT / CL_ERR_IO). */
cl_status cl_dataset_open(cl_dataset *d, const cl_dataset_opts *o, int need);
void cl_dataset_close(cl_dataset *d);
/* Training sample k: T + 1 tokens (scratch, or a pointer into the source);
 * *which gets its dataset when not NULL. Requests may come in any order;
 * cl_blend_mark(&d->train, k0) before a step whose samples are all >= k0
 * keeps each cheap. */
const int32_t *cl_dataset_train_window(cl_dataset *d, int64_t k, int32_t *scratch, int *which);
/* A part's consecutive non-overlapping windows of T + 1 tokens, the sources'
 * interleaved by the blend (source d's j-th window when the blend's i-th
 * sample is d's j-th, j modulo d's window count): the count (the sum over
 * sources), and window i. */
size_t cl_dataset_windows(const cl_dataset *d, int part);
const int32_t *cl_dataset_window(cl_dataset *d, int part, size_t i, int32_t *scratch);
/* Tokens of a part summed over sources. */
size_t cl_dataset_tokens(const cl_dataset *d, int part);

/* One path's tokens (a plain text file; a .jsonl file, a document per line,
 * the string field key; a directory of .txt and .jsonl files, not descending
 * into subdirectories, names starting with '.' skipped, any other file
 * refused), read through a CLTOK2 cache PATH.<tokenizer>.tok (a directory's
 * beside it) that records the size and hash of everything read: file names,
 * sizes and contents, and the key. A plain text file alone is its tokens as
 * ever; every other document ends with cl_tokenizer_eod. */
cl_status cl_dataset_load_tokens(const char *path, const char *key, const cl_tokenizer *tok, cl_tokens *out);

/* A JSONL text's documents (text[0..len), read from path), one a line, blank
 * lines (spaces, tabs, a \r) holding none; the one reader of --data's .jsonl
 * files and of `cleave tokenize`. From text[*at]: the next document, the
 * string field key of its line's object, at *str (*n bytes, in *doc, which
 * the caller frees with cl_json_free); *doc NULL at the end of the text.
 * *at is then past the line, *line its number (1-based; start both at 0).
 * CL_ERR_FORMAT "PATH line N: ..." for a line not JSON, not an object,
 * without the field, or with one not a string. */
cl_status cl_jsonl_next(const char *path, const char *text, size_t len, const char *key, size_t *at, size_t *line,
                        cl_json_doc **doc, const char **str, size_t *n);

#ifdef __cplusplus
}
#endif

#endif
