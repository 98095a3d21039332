/* A linear layer as a unit kind (kind.h): [c] -> [oc], out = in w + b with
 * w stored [in, out]. Under tensor parallelism (the unit's tp_mode, set by
 * the description: the MLP's layers go in column- then row-parallel pairs)
 * a column-parallel layer computes its own columns of the output and sums
 * its input gradient over the group; a row-parallel one takes its rows of
 * the input, sums its partial outputs over the group and adds the bias
 * once. Whole and column-parallel are one path (the same kernels; tp = 1
 * is the whole layer). */
#include "nn/kind.h"
#include "nn/model_impl.h"


#include <math.h>
#include <string.h>

typedef struct {
    float *w, *b;
} linear_weights;

#define F(x) offsetof(linear_weights, x)
static const cl_kind_param linear_params[] = {
    {"weight", F(w), CL_TPS_LINEAR, 1, CL_INIT_UNIFORM, 0},
    {"bias", F(b), CL_TPS_LINEAR, 0, CL_INIT_UNIFORM, 0},
};

/* Per sample: c -> oc (this rank's); a column-parallel layer's scratch is
 * its input gradient's partial sum before the group's sum. */
static void linear_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    (void)d, (void)z;
    un->in_floats = un->c;
    un->out_floats = un->oc;
    un->act_floats = un->oc;
    un->scratch_floats = un->tp_mode == CL_LINEAR_COLS ? un->c : 0;
    un->flops = 2.0 * (double)un->c * (double)un->oc;
}

/* weight [in, out], bias [out], whole: PyTorch's default, uniform within 1/sqrt(in) */
static void linear_param(const cl_model_desc *d, const cl_unit *un, int i, cl_param_shape *o) {
    int64_t tp = d->tpl.tp, in = un->tp_mode == CL_LINEAR_ROWS ? un->c * tp : un->c, out = un->tp_mode == CL_LINEAR_COLS ? un->oc * tp : un->oc;
    o->scale = 1.0f / sqrtf((float)in);
    o->ndim = linear_params[i].field == F(w) ? 2 : 1;
    o->shape[0] = o->ndim == 2 ? in : out;
    o->shape[1] = out;
}

/* The row-parallel layer adds its bias after the group's sum (once, not tp
 * times); the whole and column-parallel layers add it in the GEMM (beta),
 * which a whole layer cannot trade for a separate add without changing
 * its bits. */
static cl_status linear_forward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *out,
                                float *const *p) {
    linear_weights w;
    cl_kind_bind(&cl_kind_linear, p, &w);
    int B = mb->B;
    if (un->tp_mode != CL_LINEAR_ROWS) { /* whole, or column-parallel: its own columns of the output */
        cl_kern(m)->linear_forward(out, in, w.w, w.b, B, un->c, un->oc);
        return CL_OK;
    }
    cl_sgemm(cl_kern(m), 0, 0, B, un->oc, un->c, 1.0f, in, un->c, w.w, un->oc, 0.0f, out, un->oc);
    CL_TRY(cl_tp_forward(&m->tp, CL_TP_REDUCE, out, out, (size_t)B * un->oc));
    cl_kern(m)->add_bias(out, w.b, B, un->oc);
    return CL_OK;
}

static cl_status linear_backward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                                 float *const *p, float *const *g, const float *dout, float *din, int what) {
    (void)base;
    linear_weights w, gw;
    cl_kind_bind(&cl_kind_linear, p, &w);
    cl_kind_bind(&cl_kind_linear, g, &gw);
    int B = mb->B;
    if (what & CL_BWD_WEIGHT) cl_nn_linear_dweight(m, gw.w, gw.b, dout, in, B, un->c, un->oc);
    if (!din) return CL_OK;
    if (un->tp_mode != CL_LINEAR_COLS) {
        cl_kern(m)->linear_backward_input(din, dout, w.w, B, un->c, un->oc);
        return CL_OK;
    }
    /* column-parallel: a partial sum over the ranks' columns, summed (copy's backward), then added */
    float *part = m->scratch;
    cl_device_fill(m->dev, part, 0, (size_t)B * un->c * sizeof(float));
    cl_kern(m)->linear_backward_input(part, dout, w.w, B, un->c, un->oc);
    CL_TRY(cl_tp_backward(&m->tp, CL_TP_COPY, part, part, (size_t)B * un->c));
    cl_kern(m)->add_inplace(din, part, (int64_t)B * un->c);
    return CL_OK;
}

/* The planner's cost (nn/cost.h): the product and the bias; the row-parallel output's and the column-parallel
 * input gradient's partial sums reduced. */
static void linear_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal, cl_unit_cost *o) {
    (void)recompute, (void)causal;
    double e_ = e, Bd = B, ci = un->c, co = un->oc;
    int tp = d->tpl.tp;
    cl_pass_cost *f = &o->pass[CL_PASS_F], *b = &o->pass[CL_PASS_B], *w = &o->pass[CL_PASS_W];
    cl_cost_gemm(f, Bd, co, ci, 1, CL_GEMM_NN);
    f->bytes = e_ * 2 * Bd * co; /* bias */
    cl_cost_gemm(b, Bd, ci, co, 1, CL_GEMM_NT);
    cl_cost_gemm(w, ci, co, Bd, 1, CL_GEMM_TN);
    w->bytes = e_ * Bd * co;
    if (un->tp_mode == CL_LINEAR_ROWS) cl_cost_coll(f, CL_COLL_ALLREDUCE, Bd * co * e_, tp); /* row-parallel: the output's partial sums */
    if (un->tp_mode == CL_LINEAR_COLS) cl_cost_coll(b, CL_COLL_ALLREDUCE, Bd * ci * e_, tp); /* column-parallel: the input gradient's */
}

const cl_kind cl_kind_linear = {
    .name = "linear",
    .prefixed = 1,
    .nparams = 2,
    .params = linear_params,
    .sizes = linear_sizes,
    .param = linear_param,
    .z3_reads = CL_KIND_READS(CL_Z3_FORWARD) | CL_KIND_READS(CL_Z3_BACKWARD),
    .cost = linear_cost,
    .forward = linear_forward,
    .backward = linear_backward,
};
