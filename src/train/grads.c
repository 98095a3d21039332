/* A step's gradients made whole across the mesh at GRAD_SYNC, for the
 * pipeline executor (pipeline.c): the data-parallel buckets waited for
 * (cleave/dp.h), sequence parallelism's partial layernorm gradients summed
 * over the tensor-parallel group, the tied wte's two sums added on the
 * pipeline's first and last rank, ZeRO 2's shards kept; and the replica
 * check after the update. Every sum is in a fixed order, so every rank ends
 * with the same bits (pipeline.c says why they equal one device's). */
#include "cleave/comm.h"
#include "cleave/backend.h"
#include "cleave/train.h"

#include <stdlib.h>
#include <string.h>

#include "train/pp.h"

#define TIE_TAG CL_TAG_FIRST(CL_TAG_TIE)

/* The tied wte: stage 0 (embedding) and stage S-1 (head) end with
 * embedding sum + head sum, the same bits on both. */
static cl_status tie_grads(cl_trainer *t, struct cl_pp *pp) {
    const cl_model_desc *d = t->desc;
    int w = d->tied_wte;
    if (w < 0) return CL_OK;
    size_t n = (size_t)d->params[w].numel;
    int re = 0, rh = rank_of_stage(pp, pp->S - 1);
    cl_model *me = pp->r == re ? pp->ch[0].m : NULL;
    cl_model *mh = pp->r == rh ? pp->ch[pp->v - 1].m : NULL;
    if (re == rh) { /* one rank: one part holds both; with dp > 1 its bucket hook has tied them already */
        if (t->gdp == 1) cl_model_tie_grads(me);
        return CL_OK;
    }
    cl_request *req = NULL;
    if (me) {
        CL_TRY(cl_comm_isend_n(pp->comm, cl_model_grad(me, w), n, CL_F32, rh, TIE_TAG, &req));
        cl_status s = cl_comm_recv_n(pp->comm, pp->tie_buf, n, CL_F32, rh, TIE_TAG);
        cl_status s2 = cl_comm_wait(pp->comm, req);
        CL_TRY(s);
        CL_TRY(s2);
        cl_device_kernels(cl_model_device(me))->add_inplace(cl_model_grad(me, w), pp->tie_buf, (int64_t)n);
    } else if (mh) {
        CL_TRY(cl_comm_isend_n(pp->comm, cl_model_head_wte_grad(mh), n, CL_F32, re, TIE_TAG, &req));
        cl_status s = cl_comm_recv_n(pp->comm, cl_model_grad(mh, w), n, CL_F32, re, TIE_TAG);
        cl_status s2 = cl_comm_wait(pp->comm, req);
        CL_TRY(s);
        CL_TRY(s2);
        cl_device_kernels(cl_model_device(mh))->add_inplace(cl_model_grad(mh, w), cl_model_head_wte_grad(mh), (int64_t)n);
    }
    return CL_OK;
}

/* Sequence parallelism: the layernorms' gradients are partial sums over
 * each rank's token rows; one all-reduce over the tp group sums them all,
 * packed into the part's backward workspace (idle at GRAD_SYNC), or one per
 * parameter when they do not fit there. */
static cl_status sum_partial_grads(cl_trainer *t, cl_model *m) {
    const cl_model_desc *d = t->desc;
    cl_comm *tp = t->cfg.groups->tp;
    int64_t n = 0;
    for (int i = 0; i < d->nparams; i++)
        if (d->params[i].tp_partial && cl_model_owns_param(m, i)) n += d->params[i].numel;
    if (!n) return CL_OK;
    float *buf = cl_model_workspace(m, n);
    if (!buf) {
        for (int i = 0; i < d->nparams; i++)
            if (d->params[i].tp_partial && cl_model_owns_param(m, i))
                CL_TRY(cl_comm_allreduce(tp, cl_model_grad(m, i), (size_t)d->params[i].numel, CL_F32, CL_RED_SUM));
        return CL_OK;
    }
    cl_device *dev = cl_model_device(m);
    for (int i = 0, at = 0; i < d->nparams; i++)
        if (d->params[i].tp_partial && cl_model_owns_param(m, i)) {
            cl_device_copy(dev, buf + at, cl_model_grad(m, i), (size_t)d->params[i].numel * sizeof(float));
            at += (int)d->params[i].numel;
        }
    CL_TRY(cl_comm_allreduce(tp, buf, (size_t)n, CL_F32, CL_RED_SUM));
    for (int i = 0, at = 0; i < d->nparams; i++)
        if (d->params[i].tp_partial && cl_model_owns_param(m, i)) {
            cl_device_copy(dev, cl_model_grad(m, i), buf + at, (size_t)d->params[i].numel * sizeof(float));
            at += (int)d->params[i].numel;
        }
    return CL_OK;
}

/* Key-value heads replicated past tp = kv (tp_rep): each rank's gradient of
 * its slice is a partial sum over the tp_rep ranks holding that slice.
 * Each rank puts its gradient at its slice's place in a zeroed [slices x
 * numel] buffer (the part's backward workspace, idle here, or one
 * allocated when it does not fit) and one all-reduce over the tp group
 * sums each slice over its replicas alone (adding zeros is exact), so the
 * replicas get the same sum and stay equal. */
static cl_status sum_replica_grads(cl_trainer *t, cl_model *m) {
    const cl_model_desc *d = t->desc;
    cl_device *dev = cl_model_device(m);
    for (int i = 0; i < d->nparams; i++) {
        const cl_param_spec *p = &d->params[i];
        if (p->tp_rep <= 1 || !cl_model_owns_param(m, i)) continue;
        int64_t n = p->numel, slices = t->tp / p->tp_rep;
        float *buf = cl_model_workspace(m, n * slices), *own = NULL;
        if (!buf) {
            CL_TRY(cl_device_alloc_f32(dev, CL_MEM_WORKSPACE, (size_t)(n * slices), &own));
            buf = own;
        }
        float *at = buf + (int64_t)cl_param_slice_of(p, t->tp_rank) * n;
        cl_device_fill(dev, buf, 0, (size_t)(n * slices) * sizeof(float));
        cl_device_copy(dev, at, cl_model_grad(m, i), (size_t)n * sizeof(float));
        cl_status s = cl_comm_allreduce(t->cfg.groups->tp, buf, (size_t)(n * slices), CL_F32, CL_RED_SUM);
        if (!s) cl_device_copy(dev, cl_model_grad(m, i), at, (size_t)n * sizeof(float));
        cl_device_free(dev, own);
        CL_TRY(s);
    }
    return CL_OK;
}

cl_status cl_pp_grad_sync(cl_trainer *t, struct cl_pp *pp) {
    /* the buckets left during each chunk's last backward; wait for them (cleave/dp.h) */
    for (int c = 0; c < pp->v; c++) {
        CL_TRY(cl_dp_finish(pp->ch[c].dp));
        double t1 = cl_now();
        for (int k = 0; k < cl_dp_nbuckets(pp->ch[c].dp); k++) {
            cl_action a = {CL_ACT_GRAD_SYNC, 0, c};
            CL_TRY(cl_pp_record(pp, t->cfg.trace, t->step + 1, &a, cl_dp_launch_time(pp->ch[c].dp, k), t1));
        }
    }
    for (int c = 0; t->tp > 1 && c < pp->v; c++) CL_TRY(sum_partial_grads(t, pp->ch[c].m));
    for (int c = 0; t->tp > 1 && c < pp->v; c++) CL_TRY(sum_replica_grads(t, pp->ch[c].m));
    CL_TRY(tie_grads(t, pp));
    for (int c = 0; c < pp->v; c++) cl_dp_whole_to_shard(pp->ch[c].dp); /* ZeRO 2 */
    return CL_OK;
}


/* --check-replicas: every replicated parameter bit for bit the same on every
 * tensor-parallel rank (hashes all-gathered), else an error naming the first
 * that differs. */
cl_status cl_pp_check_replicas(cl_trainer *t, struct cl_pp *pp) {
    const cl_model_desc *d = t->desc;
    cl_comm *tp = t->cfg.groups->tp;
    uint64_t *h = calloc((size_t)d->nparams * (size_t)(t->tp + 1), sizeof *h);
    if (!h) return cl_error(CL_ERR_OOM, "cannot allocate the replica check");
    for (int c = 0; c < pp->v; c++)
        for (int i = 0; i < d->nparams; i++)
            if (d->params[i].split == CL_SPLIT_NONE && cl_model_owns_param(pp->ch[c].m, i))
                h[i] = cl_hash64(cl_model_param(pp->ch[c].m, i), (size_t)d->params[i].numel * sizeof(float), 1) | 1;
    uint64_t *all = h + d->nparams;
    cl_status s = cl_comm_allgather(tp, h, all, (size_t)d->nparams * sizeof *h);
    for (int i = 0; !s && i < d->nparams; i++)
        for (int r = 1; r < t->tp; r++)
            if (all[(size_t)r * d->nparams + i] != all[i]) {
                s = cl_error(CL_ERR_NUMERIC, "--check-replicas: step %d: replicated parameter %s differs between tensor-parallel ranks 0 and %d",
                             t->step + 1, d->params[i].name, r);
                break;
            }
    free(h);
    return s;
}
