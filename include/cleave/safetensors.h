/* cleave safetensors: reading and writing the safetensors format.
 *
 * Format (as specified by the format's authors): 8 bytes little-endian u64 N,
 * then N bytes of UTF-8 JSON header, then the byte buffer. The header is an
 * object mapping tensor names to {"dtype", "shape", "data_offsets": [begin,
 * end]} (offsets relative to the start of the buffer), plus an optional
 * "__metadata__" object of string to string. The reader checks every rule:
 * header size within the file, valid JSON, no duplicate names, known dtypes,
 * shapes of non-negative integers whose product times the dtype size equals
 * end - begin, offsets within the buffer, tensors contiguous and non-
 * overlapping and covering the buffer exactly. Any violation is CL_ERR_FORMAT
 * with a message naming the file, the tensor and the rule; never a crash.
 *
 * The writer writes tensors in the order given, 8-byte aligned header (padded
 * with spaces, as the format allows), to FILE.tmp, fsyncs, and renames onto
 * FILE: a crash mid-save leaves the previous file intact. */
#ifndef CLEAVE_SAFETENSORS_H
#define CLEAVE_SAFETENSORS_H

#include "cleave/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char *name;
    cl_dtype dtype;
    int ndim;
    int64_t shape[CL_MAX_DIMS];
    uint64_t begin, end;     /* byte offsets into the data buffer */
    const void *data;        /* points into the loaded file */
} cl_st_entry;

typedef struct cl_st_file cl_st_file;

/* Reads and validates the whole file into host memory: a regular file of at
 * most cl_file_bound(CL_FILE_TENSORS) bytes (refused before it is read). */
cl_status cl_st_open(cl_st_file **out, const char *path);
/* The same checks over a buffer already in memory (used by the fuzz target);
 * the buffer must outlive the returned handle. */
cl_status cl_st_parse(cl_st_file **out, const void *buf, size_t len, const char *name_for_errors);
void cl_st_close(cl_st_file *f);
int cl_st_count(const cl_st_file *f);
const cl_st_entry *cl_st_get(const cl_st_file *f, int i);
const cl_st_entry *cl_st_find(const cl_st_file *f, const char *name); /* NULL if absent */
/* Metadata value for key, or NULL. */
const char *cl_st_metadata(const cl_st_file *f, const char *key);
/* Finds name and checks its dtype and shape (nothing is copied), so a
 * caller can refuse a file before allocating for it. The dtype must be
 * dtype, or one cl_st_read_tensor converts into dtype: a BF16 or F16
 * tensor into F32 (exactly), an F32 tensor into BF16 or F16 (rounded to
 * nearest even); the shape must be equal. */
cl_status cl_st_check_tensor(const cl_st_file *f, const char *name, cl_dtype dtype, int ndim, const int64_t *shape);
/* Finds name, checks dtype and shape as cl_st_check_tensor does, and copies
 * the data into dst as dtype (converted when the file holds the other of
 * F32 and BF16/F16). Errors name the tensor and what differed. */
cl_status cl_st_read_tensor(const cl_st_file *f, const char *name, cl_dtype dtype,
                            int ndim, const int64_t *shape, void *dst);

typedef struct {
    const char *name;
    cl_tensor t;
} cl_st_item;

typedef struct {
    const char *key, *value;
} cl_st_meta;

/* Writes n tensors and nmeta metadata pairs atomically (tmp + fsync + rename),
 * each as its tensor's dtype (F32, BF16, F16, F64, I32, I64, U16, U8). */
cl_status cl_st_write(const char *path, const cl_st_item *items, int n,
                      const cl_st_meta *meta, int nmeta);

#ifdef __cplusplus
}
#endif

#endif
