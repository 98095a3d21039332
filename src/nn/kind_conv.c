/* A 2-D convolution as a unit kind (kind.h): [c, h, w] -> [oc, oh, ow]
 * through im2col and a GEMM (the column buffer in the part's scratch).
 * Not split by tensor parallelism (the description refuses a CNN under tp). */
#include "nn/kind.h"
#include "nn/model_impl.h"


#include <math.h>

typedef struct {
    float *w, *b;
} conv_weights;

#define F(x) offsetof(conv_weights, x)
static const cl_kind_param conv_params[] = {
    {"weight", F(w), CL_TPS_REPLICATED, 1, CL_INIT_UNIFORM, 0},
    {"bias", F(b), CL_TPS_REPLICATED, 0, CL_INIT_UNIFORM, 0},
};

/* Per sample: [c, h, w] -> [oc, oh, ow], the output kept; the im2col
 * buffer is scratch at the batch (conv_scratch). */
static void conv_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    (void)d;
    un->in_floats = cl_size_mul(z, cl_size_mul(z, un->c, un->h), un->w);
    un->out_floats = cl_size_mul(z, cl_size_mul(z, un->oc, un->oh), un->ow);
    un->act_floats = un->out_floats;
    un->flops = 2.0 * (double)un->out_floats * un->c * un->k * un->k;
}

/* weight [oc, c, k, k], bias [oc]: PyTorch's default, uniform within 1/sqrt(fan_in) */
static void conv_param(const cl_model_desc *d, const cl_unit *un, int i, cl_param_shape *o) {
    (void)d;
    int64_t fan_in = (int64_t)un->c * un->k * un->k;
    o->scale = 1.0f / sqrtf((float)fan_in);
    o->shape[0] = un->oc;
    if (conv_params[i].field == F(b)) {
        o->ndim = 1;
        return;
    }
    o->ndim = 4;
    o->shape[1] = un->c;
    o->shape[2] = o->shape[3] = un->k;
}

static void conv_shape(cl_conv2d_shape *cs, const cl_unit *un, int B) {
    cl_conv2d_shape_init(cs, B, un->c, un->h, un->w, un->oc, un->k, un->k, un->stride, un->pad);
}

static int64_t conv_scratch(const cl_model_desc *d, const cl_unit *un, int B) {
    (void)d;
    cl_conv2d_shape cs;
    conv_shape(&cs, un, B);
    return un->scratch_floats * B + cl_conv2d_col_floats(&cs);
}

static cl_status conv_forward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *out,
                              float *const *p) {
    conv_weights w;
    cl_kind_bind(&cl_kind_conv, p, &w);
    cl_conv2d_shape cs;
    conv_shape(&cs, un, mb->B);
    cl_kern(m)->conv2d_forward(out, m->scratch, in, w.w, w.b, &cs);
    return CL_OK;
}

static cl_status conv_backward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                               float *const *p, float *const *g, const float *dout, float *din, int what) {
    (void)base;
    conv_weights w, gw;
    cl_kind_bind(&cl_kind_conv, p, &w);
    cl_kind_bind(&cl_kind_conv, g, &gw);
    cl_conv2d_shape cs;
    conv_shape(&cs, un, mb->B);
    if (what & CL_BWD_WEIGHT) cl_kern(m)->conv2d_backward_weight(gw.w, gw.b, m->scratch, dout, in, &cs);
    if (din) cl_kern(m)->conv2d_backward_input(din, m->scratch, dout, w.w, &cs);
    return CL_OK;
}

/* The planner's cost (nn/cost.h): im2col + GEMM forward with the bias, col2im backward. */
static void conv_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal, cl_unit_cost *o) {
    (void)d, (void)recompute, (void)causal;
    double Bd = B, rows = Bd * un->oh * un->ow, kk = (double)un->c * un->k * un->k;
    cl_pass_cost *f = &o->pass[CL_PASS_F], *b = &o->pass[CL_PASS_B], *w = &o->pass[CL_PASS_W];
    cl_cost_gemm(f, rows, un->oc, kk, 1, CL_GEMM_NN);
    f->bytes = e * (2 * rows * kk + 2 * rows * un->oc); /* im2col, bias */
    cl_cost_gemm(b, rows, kk, un->oc, 1, CL_GEMM_TN);
    b->bytes = e * 2 * rows * kk; /* col2im */
    cl_cost_gemm(w, kk, un->oc, rows, 1, CL_GEMM_NT);
    w->bytes = e * 2 * rows * kk;
}

const cl_kind cl_kind_conv = {
    .name = "conv",
    .prefixed = 1,
    .nparams = 2,
    .params = conv_params,
    .sizes = conv_sizes,
    .param = conv_param,
    .scratch_floats = conv_scratch,
    .z3_reads = CL_KIND_READS(CL_Z3_FORWARD) | CL_KIND_READS(CL_Z3_BACKWARD),
    .cost = conv_cost,
    .forward = conv_forward,
    .backward = conv_backward,
};
