/* The classifier's loss as a unit kind (kind.h): softmax cross-entropy of
 * each sample's c logits (the previous unit's output) against its label.
 * It keeps the loss and the log-sum-exp of each sample. No parameters. */
#include "nn/kind.h"
#include "nn/model_impl.h"


/* Per sample: c logits in, one loss out; kept: the loss and the log-sum-exp. */
static void classify_sizes(const cl_model_desc *d, cl_unit *un, cl_sizer *z) {
    (void)d, (void)z;
    un->in_floats = un->c;
    un->out_floats = 1;
    un->act_floats = 2;
}

static cl_status classify_forward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *out,
                                  float *const *p) {
    (void)m, (void)p;
    int B = mb->B;
    for (int i = 0; i < B; i++)
        if (mb->targets[i] < -1 || mb->targets[i] >= un->c)
            return cl_error(CL_ERR_INVALID, "label %d of sample %d is outside the %d classes", mb->targets[i], i, un->c);
    cl_kern(m)->xent_forward(out, out + B, in, mb->targets, B, un->c);
    return CL_OK;
}

static cl_status classify_backward(cl_model *m, const cl_unit *un, const cl_microbatch *mb, const float *in, float *base,
                                   float *const *p, float *const *g, const float *dout, float *din, int what) {
    (void)m, (void)p, (void)g, (void)dout, (void)what; /* the loss's own gradient is mb->dloss */
    int B = mb->B;
    if (din) cl_kern(m)->xent_backward(din, in, base + B, mb->targets, mb->dloss, B, un->c);
    return CL_OK;
}

/* The planner's cost (nn/cost.h): the softmax cross-entropy reads and writes the logits. */
static void classify_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal, cl_unit_cost *o) {
    (void)d, (void)recompute, (void)causal;
    double Bd = B;
    o->pass[CL_PASS_F].bytes = e * 2 * Bd * un->c;
    o->pass[CL_PASS_B].bytes = e * 2 * Bd * un->c;
}

const cl_kind cl_kind_classify = {
    .name = "classify",
    .sizes = classify_sizes,
    .loss = CL_KIND_LOSS_SAMPLE,
    .z3_reads = CL_KIND_READS(CL_Z3_FORWARD) | CL_KIND_READS(CL_Z3_BACKWARD),
    .logits_in = 1,
    .cost = classify_cost,
    .forward = classify_forward,
    .backward = classify_backward,
};
