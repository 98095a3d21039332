/* Max-pooling as a unit kind (kind.h): [c, h, w] -> [c, oh, ow], windows
 * of k at stride; it keeps its output and, after it, the argmax of each
 * window (int32) for the backward. No parameters. */
#include "nn/kind.h"
#include "nn/model_impl.h"


/* Per sample: [c, h, w] -> [oc, oh, ow]; kept: the output and the argmax indices. */
static void pool_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    (void)d;
    un->in_floats = cl_size_mul(z, cl_size_mul(z, un->c, un->h), un->w);
    un->out_floats = cl_size_mul(z, cl_size_mul(z, un->oc, un->oh), un->ow);
    un->act_floats = cl_size_mul(z, 2, un->out_floats);
}

static cl_status pool_forward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *out,
                              float *const *p) {
    (void)m, (void)p;
    int B = mb->B;
    cl_kern(m)->maxpool_forward(out, (int32_t *)(out + un->out_floats * B), in, B, un->c, un->h, un->w, un->k, un->stride);
    return CL_OK;
}

static cl_status pool_backward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                               float *const *p, float *const *g, const float *dout, float *din, int what) {
    (void)m, (void)in, (void)p, (void)g, (void)what;
    int B = mb->B;
    if (din) cl_kern(m)->maxpool_backward(din, dout, (const int32_t *)(base + un->out_floats * B), B, un->c, un->h, un->w, un->k, un->stride);
    return CL_OK;
}

const cl_kind cl_kind_maxpool = {
    .name = "maxpool",
    .sizes = pool_sizes,
    .z3_reads = CL_KIND_READS(CL_Z3_FORWARD) | CL_KIND_READS(CL_Z3_BACKWARD),
    .forward = pool_forward,
    .backward = pool_backward,
    .cost = cl_kind_elementwise_cost,
};
