/* The MoE blocks' figures of a training step (issue 33): the load-balancing
 * loss, the dropped token-slots and the token-slots per expert, taken from
 * each chunk's model (cl_model_moe_take) and summed over the pipeline (the
 * stages hold different blocks) and the data-parallel replicas (each
 * micro-batch's aux is already weighted by its share of the step), so every
 * rank reports the step's figures. Called only for models with experts: a
 * dense model runs no extra collective.
 *
 * Invariants: under tensor parallelism every rank of the tp group routes
 * the same tokens with the same replicated router, so their figures are the
 * same and the tp group is not summed (the aux loss counted once). */
#include "cleave/comm.h"
#include "cleave/train.h"
#include "train/internal.h"
#include "train/pp.h"

#include <string.h>

cl_status cl_pp_moe_stats(cl_trainer *t, cl_step_stats *st) {
    struct cl_pp *pp = t->pp;
    int E = t->desc->cfg.experts;
    double v[2 + 256];
    memset(v, 0, sizeof v);
    for (int c = 0; c < pp->v; c++) {
        double aux;
        int64_t dropped, slots[256];
        cl_model_moe_take(pp->ch[c].m, &aux, &dropped, slots);
        v[0] += aux, v[1] += (double)dropped;
        for (int e = 0; e < E; e++) v[2 + e] += (double)slots[e];
    }
    const cl_groups *g = t->cfg.groups;
    if (pp->p > 1) CL_TRY(cl_comm_allreduce(pp->comm, v, (size_t)(2 + E), CL_F64, CL_RED_SUM));
    if (t->dp > 1) CL_TRY(cl_comm_allreduce(g->dp, v, (size_t)(2 + E), CL_F64, CL_RED_SUM));
    st->moe_experts = E;
    st->moe_aux = v[0];
    st->moe_dropped = (int64_t)v[1];
    for (int e = 0; e < E; e++) st->moe_slots[e] = (int64_t)v[2 + e];
    return CL_OK;
}
