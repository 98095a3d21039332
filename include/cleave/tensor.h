/* cleave tensors: non-owning, contiguous, row-major views, and the number
 * formats (cl_dtype) with the conversions between them.
 *
 * A tensor never owns its data: devices (allocators) own memory, tensors
 * describe it. dtype is f32 for all compute now; bf16 (and f16) are there
 * for mixed precision to switch on (collectives sum them in F32, layouts and
 * safetensors carry them), i32/u16 describe token data and checkpoints.
 *
 * Conversions (src/core/format.c, the one place they are written): to a
 * 16-bit format, round to nearest, ties to even, overflow to infinity, a NaN
 * stays a NaN (quiet, its sign kept); from a 16-bit format to F32 or F64,
 * exact. */
#ifndef CLEAVE_TENSOR_H
#define CLEAVE_TENSOR_H

#include "cleave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CL_MAX_DIMS 4

/* The values are fixed (new formats go at the end): FP8 would be CL_F8E4M3, CL_F8E5M2. */
typedef enum { CL_F32 = 0, CL_BF16, CL_F64, CL_I32, CL_I64, CL_U16, CL_U8, CL_F16 } cl_dtype;

typedef struct {
    void *data;
    cl_dtype dtype;
    int ndim;
    int64_t shape[CL_MAX_DIMS];
} cl_tensor;

size_t cl_dtype_size(cl_dtype t);
const char *cl_dtype_name(cl_dtype t);            /* safetensors spelling: "F32", "BF16", ... */
int64_t cl_tensor_numel(const cl_tensor *t);
size_t cl_tensor_bytes(const cl_tensor *t);
cl_tensor cl_tensor_make(void *data, cl_dtype dtype, int ndim, const int64_t *shape);

/* 1 for the floating formats (F32, BF16, F16, F64). */
int cl_dtype_is_float(cl_dtype t);
/* One value (bits of the 16-bit format as uint16_t). */
uint16_t cl_bf16_from_f32(float x);
float cl_bf16_to_f32(uint16_t h);
uint16_t cl_f16_from_f32(float x);
float cl_f16_to_f32(uint16_t h);
/* n values from src (format sf) into dst (format df), which must not
 * overlap unless df == sf; F32 and F64 buffers aligned to their size (16-bit
 * values may sit at any address). Exact or rounded once: any pair with F32 on one
 * side, a 16-bit format into F64, and df == sf (a copy). Other pairs
 * (integers, F64 into a 16-bit format, which through F32 would round
 * twice) are CL_ERR_UNSUPPORTED naming both. */
cl_status cl_dtype_convert(void *dst, cl_dtype df, const void *src, cl_dtype sf, size_t n);
/* 1 if cl_dtype_convert takes (df, sf). */
int cl_dtype_convertible(cl_dtype df, cl_dtype sf);

#ifdef __cplusplus
}
#endif

#endif
