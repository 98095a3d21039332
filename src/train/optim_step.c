/* The optimizer step of a rank's chunks (OPT_STEP of the pipeline
 * executor, pipeline.c): the global gradient norm summed per parameter over
 * the stages, tensor-parallel slices and shards, the finite check that every
 * rank makes alike, clipping inside AdamW's pass (optim.c), ZeRO's
 * all-gather of the updated shards; and the offloaded state's file size. */
#include "cleave/comm.h"
#include "cleave/prof.h"
#include "cleave/train.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "train/pp.h"

cl_status cl_step_check_finite(int step, double loss, double norm) {
    const char *what = !isfinite(loss) ? "loss" : !isfinite(norm) ? "gradient norm" : NULL;
    if (!what) return CL_OK;
    double v = !isfinite(loss) ? loss : norm;
    return cl_error(CL_ERR_NUMERIC, "step %d: %s is %s; stopped before the optimizer step, nothing saved (lower --lr?)", step,
                    what, isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
}

size_t cl_trainer_offload_file_bytes(const cl_trainer *t) {
    size_t n = 0;
    for (int c = 0; t->pp && c < t->pp->v; c++) {
        struct stat st;
        if (t->pp->ch[c].opt.fd >= 0 && fstat(t->pp->ch[c].opt.fd, &st) == 0) n += (size_t)st.st_size;
    }
    return n;
}

/* The optimizer step of every chunk here, after the global gradient norm and
 * loss (the last stage's, all its forwards done by now) are known on every
 * rank, so that all of them stop together at a non-finite one. */
cl_status cl_pp_opt_step(cl_trainer *t, struct cl_pp *pp, float lr, double loss_sum, double *norm_out) {
    const cl_model_desc *d = t->desc;
    int n = d->nparams;
    memset(pp->norm_parts, 0, (size_t)n * sizeof *pp->norm_parts);
    cl_status ns = CL_OK; /* ZeRO 2: the same figures from the shards */
    CL_PROF("grad norm", 0, for (int c = 0; c < pp->v && !ns; c++) {
        if (cl_dp_sharded(pp->ch[c].dp)) ns = cl_dp_grad_sumsq(pp->ch[c].dp, pp->norm_parts);
        else cl_grad_sumsq(pp->ch[c].m, pp->norm_parts);
    });
    CL_TRY(ns);
    CL_TRY(cl_device_sync(t->dev)); /* the sums and the loss, written by kernels, read on the host from here */
    /* a replicated parameter counts once (tensor-parallel rank 0's), a split one over its slices; the
     * loss is the same on every tensor-parallel rank */
    for (int i = 0; t->tp_rank > 0 && i < n; i++)
        if (d->params[i].split == CL_SPLIT_NONE || (d->params[i].tp_rep > 1 && t->tp_rank % d->params[i].tp_rep))
            pp->norm_parts[i] = 0; /* a replicated slice (tp_rep) counts once too, its first rank's */
    pp->norm_parts[n] = t->tp_rank == 0 ? loss_sum : 0; /* 0 but on the last stage */
    if (t->tp > 1) CL_TRY(cl_comm_allreduce(t->cfg.groups->mp, pp->norm_parts, (size_t)n + 1, CL_F64, CL_RED_SUM));
    else if (pp->p > 1) CL_TRY(cl_comm_allreduce(pp->comm, pp->norm_parts, (size_t)n + 1, CL_F64, CL_RED_SUM));
    if (t->cfg.ep > 1) { /* every expert once, its holder's (the others' 0: x + 0 is x), the replicated rest ep rank 0's */
        cl_comm *ep = t->cfg.groups->ep;
        for (int i = 0; cl_comm_rank(ep) > 0 && i < n; i++)
            if (!d->params[i].expert) pp->norm_parts[i] = 0;
        CL_TRY(cl_comm_allreduce(ep, pp->norm_parts, (size_t)n, CL_F64, CL_RED_SUM));
    }
    if (t->gdp > 1) CL_TRY(cl_comm_allreduce(t->cfg.groups->dpcp, &pp->norm_parts[n], 1, CL_F64, CL_RED_SUM));
    double norm = cl_grad_norm_of(pp->norm_parts, n);
    *norm_out = norm;
    CL_TRY(cl_step_check_finite(t->step + 1, pp->norm_parts[n], norm));
    float coef = cl_grad_clip_coef(norm, t->cfg.adamw.grad_clip);
    /* clipping rides in AdamW's pass (same bits as scaling the gradients first) */
    cl_status os = CL_OK;
    CL_PROF("adamw (with clip)", 0,
            for (int c = 0; c < pp->v && !os; c++) os = cl_optimizer_step_checked(&pp->ch[c].opt, pp->ch[c].m, lr, coef));
    CL_TRY(os);
    /* ZeRO: each replica updated its shard; every replica gets every shard */
    for (int c = 0; c < pp->v; c++) {
        cl_model *m = pp->ch[c].m;
        int stage = cl_model_zero(m)->stage;
        float *params = cl_model_params(m);
        if (stage == CL_ZERO_OPTIM || stage == CL_ZERO_GRADS) /* ZeRO 3 keeps the shard only */
            CL_TRY(cl_comm_allgather_n(cl_zero_comm(&t->cfg), params + cl_model_sizes(m)->shard_lo, params,
                                       (size_t)cl_model_sizes(m)->shard, CL_F32));
    }
    if (!t->cfg.check_replicas || t->tp < 2) return CL_OK;
    cl_status s = cl_pp_z3_whole(pp, 1); /* ZeRO 3: the parameters whole to hash them */
    if (!s) s = cl_pp_check_replicas(t, pp);
    cl_pp_z3_end_whole(pp, 0);
    return s;
}
