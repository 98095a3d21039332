/* cleave train (internal): a sharded checkpoint's boxes and its index
 * (docs/ARCHITECTURE.md, "Sharded checkpoints").
 *
 * Why apart from ckpt_shard.c: the box arithmetic and the index reader are
 * all that stands between a checkpoint from anywhere and what a rank reads
 * where, so the unit test (tests/test_shard.c) and the fuzzer
 * (tests/fuzz/fuzz_shard_index.c) run exactly them, with nothing but the
 * JSON reader and the model description linked in. */
#ifndef CLEAVE_TRAIN_SHARD_INDEX_H
#define CLEAVE_TRAIN_SHARD_INDEX_H

#include <stdint.h>

#include "cleave/json.h"
#include "cleave/model.h"

#define CL_SHARD_VERSION 2 /* 2: each box has its content hash; 1 (before hashes) is still read */
#define CL_SHARD_FORMAT "cleave sharded checkpoint"

enum { CL_K_PARAM, CL_K_AVG, CL_K_AVG_SQ, CL_NKINDS };
extern const char *const cl_shard_kind_key[CL_NKINDS]; /* "param", "exp_avg", "exp_avg_sq" */

/* A box of the whole tensor seen as a matrix (rows: the product of all
 * dimensions but the last; a bias is one row), and the local index in a
 * rank's slice of its first element (rows of the box are the slice's row
 * length apart there). */
typedef struct {
    int64_t r0, c0, nr, nc, l0;
} cl_box;

static inline int64_t cl_shard_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t cl_shard_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t cl_shard_local_cols(const cl_param_spec *p) { return p->shape[p->ndim - 1]; }
static inline int64_t cl_shard_whole_cols(const cl_param_spec *p) { return p->full_shape[p->ndim - 1]; }
static inline int64_t cl_shard_whole_rows(const cl_param_spec *p) { return p->full_numel / cl_shard_whole_cols(p); }

/* The boxes of the whole tensor that local range [a, b) of tensor-parallel
 * rank r's slice of p holds (at most 9): the range is at most 3 boxes of the
 * slice (partial first row, whole rows, partial last row), each at most 3 of
 * the whole (HEADS3's q, k, v column groups to their own thirds), clipped to
 * the logical rows (the padded vocabulary is not data). */
int cl_shard_slice_boxes(const cl_param_spec *p, int r, int64_t a, int64_t b, cl_box out[9]);

/* The local range [a, b) of a parameter's slice (numel floats at loc in its
 * part's flat buffer) inside the part's floats [lo, lo + n): a ZeRO shard
 * (the moments from stage 1, the parameters too at stage 3). Element L of
 * the range is at shard[loc - lo + L]. a = b = 0 when they do not meet. */
static inline void cl_shard_zero_range(int64_t loc, int64_t numel, int64_t lo, int64_t n, int64_t *a, int64_t *b) {
    int64_t s = cl_shard_max(loc, lo), e = cl_shard_min(loc + numel, lo + n);
    *a = e > s ? s - loc : 0;
    *b = e > s ? e - loc : 0;
}

/* A stored box: its file (index into the index's file list), place and
 * absolute byte range. */
typedef struct {
    int file;
    int64_t r0, c0, nr, nc, begin, end;
    uint64_t hash; /* cl_hash_sum of its bytes (version 2; 0 in version 1) */
} cl_sbox;

/* A range of a file one load read into memory at dst (ckpt_shard.c). */
typedef struct {
    int file;
    int64_t off, len;
    char *dst;
} cl_sseg;

/* A parsed index, and the reads of one load (ckpt_shard.c). */
typedef struct {
    char dir[4200], path[4300];
    int nfiles;
    char (*fname)[32];
    int *fd;      /* -1 until opened */
    int nt;
    cl_sbox **bx; /* [nt * CL_NKINDS] */
    int *nbx;
    int version;  /* the index's format version */
    const cl_model_desc *full; /* the model it was checked against */
    const struct cl_ckpt_manifest *m; /* the marker's (version 2), or NULL: nothing to verify */
    char run_id[17]; /* the index's state's, and its step: what each shard's metadata must say */
    int step;
    int64_t bytes_read, bytes_head, bytes_verify, bytes_hashed; /* all read; shard headers; read only to verify; hashed */
    cl_sseg *seg; /* what this load read, for the verification */
    int nseg;
    size_t segcap;
    int pfile;    /* the pending read */
    int64_t poff, plen;
    char *pdst;
} cl_shard_index;

/* The index's root against the whole model full (path set for messages):
 * format and version, file names (rank-NNNNN.safetensors only), the
 * tensors in the model's order with its shapes, every box inside its
 * tensor with a byte range of exactly its floats, and the boxes of each
 * tensor and kind covering it exactly. CL_ERR_FORMAT naming the file and
 * the problem otherwise. The caller frees with cl_shard_index_free either way. */
cl_status cl_shard_index_parse(cl_shard_index *ix, const cl_json *root, const cl_model_desc *full);
void cl_shard_index_free(cl_shard_index *ix);
/* 16 lowercase hex digits into *out: 1, else 0. */
int cl_shard_hex_parse(const char *s, uint64_t *out);

#endif
