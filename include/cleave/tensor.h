/* cleave tensors: non-owning, contiguous, row-major views.
 *
 * A tensor never owns its data: devices (allocators) own memory, tensors
 * describe it. dtype is f32 for all compute now; bf16 is reserved for mixed
 * precision, i32/u16 describe token data and checkpoints. */
#ifndef CLEAVE_TENSOR_H
#define CLEAVE_TENSOR_H

#include "cleave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CL_MAX_DIMS 4

typedef enum { CL_F32 = 0, CL_BF16, CL_F64, CL_I32, CL_I64, CL_U16, CL_U8 } cl_dtype;

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

#ifdef __cplusplus
}
#endif

#endif
