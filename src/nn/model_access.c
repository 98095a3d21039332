/* What the outside of src/nn may do with a cl_model (cleave/model.h): read
 * what it is, reach the buffers it must fill or read, and have the part do
 * the jobs on its own buffers that ZeRO 2's buckets need. The struct stays
 * in nn/model_impl.h, so no file outside src/nn depends on its fields.
 *
 * Invariant: these calls only read fields or do what the data-parallel
 * code did with them before (same kernels, same order), so no result moves
 * by a bit. */
#include "nn/model_impl.h"

#include <string.h>

const cl_model_desc *cl_model_desc_of(const cl_model *m) { return m->desc; }
cl_device *cl_model_device(const cl_model *m) { return m->dev; }
void cl_model_units(const cl_model *m, int *u0, int *u1) {
    if (u0) *u0 = m->u0;
    if (u1) *u1 = m->u1;
}
int cl_model_batch(const cl_model *m) { return m->B; }
const cl_part_sizes *cl_model_sizes(const cl_model *m) { return &m->sizes; }
const cl_zero *cl_model_zero(const cl_model *m) { return &m->zero; }

float *cl_model_params(const cl_model *m) { return m->params; }
float *cl_model_grads(const cl_model *m) { return m->grads; }
float *cl_model_param(const cl_model *m, int i) { return i >= 0 && i < m->desc->nparams ? m->p[i] : NULL; }
float *const *cl_model_param_ptrs(const cl_model *m) { return m->p; }
float *cl_model_grad(const cl_model *m, int i) { return i >= 0 && i < m->desc->nparams ? m->g[i] : NULL; }
int64_t cl_model_param_offset(const cl_model *m, int i) { return i >= 0 && i < m->desc->nparams ? m->loc[i] : -1; }
float *cl_model_grad_at(const cl_model *m, int64_t a) {
    return cl_zero_shards_grads(m->zero.stage) ? m->grads + (a - m->sizes.shard_lo) : m->grads + a;
}
float *cl_model_head_wte_grad(const cl_model *m) { return m->head_wte_g; }
float *cl_model_workspace(const cl_model *m, int64_t floats) { return floats <= m->sizes.scratch ? m->scratch : NULL; }

float *cl_model_grads_whole(const cl_model *m) { return m->gwhole; }
float *cl_model_grads_halo(const cl_model *m) { return m->ghalo; }
float *cl_model_grads_stage(const cl_model *m) { return m->gstage; }

float *cl_model_bucket_begin(cl_model *m, int b, int64_t lo, int64_t hi) {
    const cl_model_desc *d = m->desc;
    float *buf = m->gbuf[b];
    cl_device_fill(m->dev, buf, 0, (size_t)(hi - lo) * sizeof(float));
    for (int i = 0; i < d->nparams; i++)
        if (m->loc[i] >= lo && m->loc[i] < hi && !cl_model_grad_whole(d, m->u0, m->u1, m->zero.split, i)) {
            m->g[i] = buf + (m->loc[i] - lo);
            m->gfresh[i] = 1; /* zeroed above (cl_nn_grad_beta) */
        }
    return buf;
}

void cl_model_bucket_end(cl_model *m, int b, int64_t lo, int64_t hi) {
    int64_t a, len = cl_zero_overlap(lo, hi, m->sizes.shard_lo, m->sizes.shard, &a);
    if (len) cl_kern(m)->add_inplace(m->grads + (a - m->sizes.shard_lo), m->gbuf[b] + (a - lo), len);
}

void cl_model_whole_to_shard(cl_model *m) {
    const cl_model_desc *d = m->desc;
    for (int i = 0; i < d->nparams; i++) {
        if (m->loc[i] < 0 || !cl_model_grad_whole(d, m->u0, m->u1, m->zero.split, i)) continue;
        int64_t a, len = cl_zero_overlap(m->loc[i], m->loc[i] + d->params[i].numel, m->sizes.shard_lo, m->sizes.shard, &a);
        if (len) cl_device_copy(m->dev, m->grads + (a - m->sizes.shard_lo), m->g[i] + (a - m->loc[i]), (size_t)len * sizeof(float));
    }
}

void cl_model_moe_take(cl_model *m, double *aux, int64_t *dropped, int64_t *slots) {
    *aux = m->moe_aux, *dropped = m->moe_dropped;
    for (int e = 0; slots && e < m->desc->cfg.experts; e++) slots[e] = m->moe_slots[e];
    m->moe_aux = 0, m->moe_dropped = 0;
    memset(m->moe_slots, 0, sizeof m->moe_slots);
}
