/* Flatten as a unit kind (kind.h): the identity on the data, a change of
 * shape ([c, h, w] -> [c h w]) between the convolutional and the linear
 * units. No parameters. */
#include "nn/kind.h"
#include "nn/model_impl.h"


#include <string.h>

/* Per sample: in_floats (the description's) in and out, the output kept. */
static void flatten_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    (void)d, (void)z;
    un->out_floats = un->in_floats;
    un->act_floats = un->in_floats;
}

static cl_status flatten_forward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *out,
                                 float *const *p) {
    (void)p;
    cl_device_copy(m->dev, out, in, (size_t)(un->out_floats * mb->B) * sizeof(float));
    return CL_OK;
}

static cl_status flatten_backward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                                  float *const *p, float *const *g, const float *dout, float *din, int what) {
    (void)m, (void)in, (void)base, (void)p, (void)g, (void)what;
    if (din) cl_kern(m)->add_inplace(din, dout, un->out_floats * mb->B);
    return CL_OK;
}

const cl_kind cl_kind_flatten = {
    .name = "flatten",
    .sizes = flatten_sizes,
    .z3_reads = CL_KIND_READS(CL_Z3_FORWARD) | CL_KIND_READS(CL_Z3_BACKWARD),
    .forward = flatten_forward,
    .backward = flatten_backward,
    .cost = cl_kind_elementwise_cost,
};
