/* ReLU as a unit kind (kind.h): elementwise, no parameters; it keeps its
 * output, which its backward reads. */
#include "nn/kind.h"
#include "nn/model_impl.h"


/* Per sample: in_floats (the description's) in and out, the output kept. */
static void relu_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    (void)d, (void)z;
    un->out_floats = un->in_floats;
    un->act_floats = un->in_floats;
}

static cl_status relu_forward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *out,
                              float *const *p) {
    (void)m, (void)p;
    cl_kern(m)->relu_forward(out, in, un->out_floats * mb->B);
    return CL_OK;
}

static cl_status relu_backward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                               float *const *p, float *const *g, const float *dout, float *din, int what) {
    (void)m, (void)in, (void)p, (void)g, (void)what;
    if (din) cl_kern(m)->relu_backward(din, dout, base, un->out_floats * mb->B);
    return CL_OK;
}

const cl_kind cl_kind_relu = {
    .name = "relu",
    .sizes = relu_sizes,
    .z3_reads = CL_KIND_READS(CL_Z3_FORWARD) | CL_KIND_READS(CL_Z3_BACKWARD),
    .forward = relu_forward,
    .backward = relu_backward,
    .cost = cl_kind_elementwise_cost,
};
