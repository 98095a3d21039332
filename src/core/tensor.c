/* Tensor views (see tensor.h). */
#include "cleave/tensor.h"

size_t cl_dtype_size(cl_dtype t) {
    switch (t) {
    case CL_F32: case CL_I32: return 4;
    case CL_BF16: case CL_F16: case CL_U16: return 2;
    case CL_F64: case CL_I64: return 8;
    case CL_U8: return 1;
    }
    return 0;
}

const char *cl_dtype_name(cl_dtype t) {
    switch (t) {
    case CL_F32: return "F32";
    case CL_BF16: return "BF16";
    case CL_F64: return "F64";
    case CL_I32: return "I32";
    case CL_I64: return "I64";
    case CL_U16: return "U16";
    case CL_U8: return "U8";
    case CL_F16: return "F16";
    }
    return "?";
}

int64_t cl_tensor_numel(const cl_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t cl_tensor_bytes(const cl_tensor *t) { return (size_t)cl_tensor_numel(t) * cl_dtype_size(t->dtype); }

cl_tensor cl_tensor_make(void *data, cl_dtype dtype, int ndim, const int64_t *shape) {
    cl_tensor t = {.data = data, .dtype = dtype, .ndim = ndim};
    for (int i = 0; i < ndim && i < CL_MAX_DIMS; i++) t.shape[i] = shape[i];
    return t;
}
