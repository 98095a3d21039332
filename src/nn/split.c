/* What the unit kinds share (kind.h): binding a kind's named weights, and
 * for the tensor-parallel layers which token rows a rank holds under
 * sequence parallelism, the input of a column-parallel layer and the output
 * of a row-parallel one (Megatron-LM's split), and a split backward's kept
 * collective results (cl_nn_kept; GPT's and Llama's blocks). On one rank each is the
 * plain layer: the collectives are the identity. */
#include "nn/kind.h"
#include "nn/model_impl.h"

#include "cleave/prof.h"

void cl_kind_bind(const cl_kind *k, float *const *p, void *w) {
    for (int i = 0; i < k->nparams; i++) *(float **)((char *)w + k->params[i].field) = p[i];
}

int64_t cl_nn_rows_here(const cl_model_desc *d, int64_t N) { return d->tpl.sp ? N / d->tpl.tp : N; }

cl_status cl_nn_col_input(const cl_model *m, const float *rows, float *buf, int64_t Ns, int64_t C, const float **out) {
    if (!m->desc->tpl.sp) {
        *out = rows; /* copy to the tensor-parallel region: identity forward */
        return CL_OK;
    }
    *out = buf;
    return cl_tp_forward_n(&m->tp, CL_TP_GATHER, rows, buf, (size_t)(Ns * C), cl_nn_bf16(m->desc) ? CL_BF16 : CL_F32);
}

/* The output of a row-parallel layer: partial sums in part (N x C) summed
 * over the group into out (this rank's Ns rows; out may be part when not
 * sequence-parallel), then the bias, once. */
static cl_status row_output(const cl_model *m, float *part, float *out, const float *bias, int64_t N, int64_t Ns, int64_t C) {
    if (m->desc->tpl.sp) CL_TRY(cl_tp_forward(&m->tp, CL_TP_SCATTER, part, out, (size_t)(Ns * C)));
    else CL_TRY(cl_tp_forward(&m->tp, CL_TP_REDUCE, part, out, (size_t)(N * C)));
    cl_kern(m)->add_bias(out, bias, Ns, C);
    return CL_OK;
}

/* On one rank a plain linear layer, the bias its GEMM's beta term
 * (cl_linear_forward: adding the bias after the product would change the
 * bits, so tp = 1 keeps this); on more, this rank's partial sums (in the
 * part's scratch under sequence parallelism, else in out) summed over the
 * group by row_output, then the bias once. */
cl_status cl_nn_row_linear(const cl_model *m, const char *what, double flops, const float *x, const float *w, const float *bias,
                           float *out, int64_t N, int64_t K) {
    const cl_model_desc *d = m->desc;
    int64_t C = d->cfg.channels;
    if (d->tpl.tp == 1) { /* bf16: x is BF16 */
        CL_PROF(what, flops, cl_nn_bf16(d) ? cl_nn_linear_lo(m, out, x, w, bias, N, K, C) : cl_kern(m)->linear_forward(out, x, w, bias, (int)N, (int)K, (int)C));
        return CL_OK;
    }
    float *part = d->tpl.sp ? m->scratch + N * C : out;
    if (cl_nn_bf16(d)) /* x BF16 against w's BF16 copy, the partial sums F32 */
        CL_PROF(what, flops, cl_nn_gemm_lo(m, 0, 0, (int)N, (int)C, (int)K, x, (int)K, cl_nn_wlo(m, w), (int)C, 0.0f, part, (int)C));
    else CL_PROF(what, flops, cl_sgemm(cl_kern(m), 0, 0, (int)N, (int)C, (int)K, 1.0f, x, (int)K, w, (int)C, 0.0f, part, (int)C));
    return row_output(m, part, out, bias, N, cl_nn_rows_here(d, N), C);
}

const float *cl_nn_kept(cl_nn_keep *k, const float *computed, int64_t n, int computing) {
    const float *r = computed;
    if (k->keep) {
        if (!computing) r = k->keep;
        else cl_device_copy(k->dev, k->keep, computed, (size_t)n * sizeof(float));
        k->keep += n;
    }
    return r;
}

cl_status cl_nn_row_dout(const cl_model *m, cl_nn_keep *k, int run, const float *dout, float *buf, int64_t Ns, const float **out) {
    const cl_model_desc *d = m->desc;
    *out = dout;
    if (!d->tpl.sp) return CL_OK;
    int64_t C = d->cfg.channels;
    if (run) CL_TRY(cl_tp_backward(&m->tp, CL_TP_SCATTER, dout, buf, (size_t)(Ns * C)));
    *out = cl_nn_kept(k, buf, Ns * d->tpl.tp * C, run);
    return CL_OK;
}

cl_status cl_nn_col_dinput(const cl_model *m, cl_nn_keep *k, int run, float *part, float *shard, int64_t Ns, const float **out) {
    const cl_model_desc *d = m->desc;
    int sp = d->tpl.sp;
    int64_t C = d->cfg.channels;
    if (run) {
        if (sp) CL_TRY(cl_tp_backward(&m->tp, CL_TP_GATHER, part, shard, (size_t)(Ns * C)));
        else CL_TRY(cl_tp_backward(&m->tp, CL_TP_COPY, part, part, (size_t)(Ns * C)));
    }
    *out = cl_nn_kept(k, sp ? shard : part, Ns * C, run);
    return CL_OK;
}
