/* Expert parallelism's exchange for the MoE block (kind_moe_block.c): each rank routes its own tokens (moe.c:
 * router, top-K, the (expert, token) dispatch), then
 *
 *   counts  an all-to-all of E / ep token-slot counts per rank: rank j learns how many rows each source rank
 *           routes to each of j's experts (rank j computes experts [j E/ep, (j+1) E/ep): Megatron-core's
 *           contiguous split);
 *   rows    an all-to-all-v of the rows themselves: this rank's rows are in (expert, token) order, so the rows
 *           for rank j's experts are one contiguous run, and they arrive source-major (source rank, then the
 *           sender's (expert, token) order), a fixed order whatever the timing;
 *   back    the same exchange reversed returns each computed row to its sender, in the sender's order.
 *
 * The backward sends the gradients of the expert outputs the same way and returns the input gradients. The rows
 * move in the format the block keeps them in (bf16: the dispatched rows, the experts' GEMM input, BF16, half the
 * bytes; results and gradients F32).
 * Counts are int32 moved as 4-byte F32 elements (the all-to-all moves bytes, no arithmetic). With ep 1 nothing
 * moves: the received rows are the rank's own, one block per expert, exactly the single-rank path.
 *
 * Invariants: every rank of the group calls these in the same order (the blocks of a micro-batch in unit
 * order); the results depend on the inputs alone. */
#include "nn/moe_dispatch.h"

#include "cleave/comm.h"

#include <string.h>

int cl_moe_ep_size(const cl_model *m) { return m->ep ? cl_comm_size(m->ep) : 1; }

cl_status cl_model_set_ep(cl_model *m, cl_comm *comm) {
    int n = comm ? cl_comm_size(comm) : 1, want = m->desc->tpl.ep > 1 ? m->desc->tpl.ep : 1;
    if (n != want)
        return cl_error(CL_ERR_INVALID, "the expert-parallel group has %d ranks, but the model was described for --ep %d", n, want);
    m->ep = n > 1 ? comm : NULL;
    return CL_OK;
}

void cl_moe_ep_blocks(const cl_model *m, const int32_t *rcounts, int E, cl_moe_blocks *b) {
    int ep = cl_moe_ep_size(m), el = E / ep, me = m->ep ? cl_comm_rank(m->ep) : 0;
    b->n = E;
    b->total = 0;
    for (int j = 0; j < ep; j++)
        for (int l = 0; l < el; l++) {
            int k = j * el + l;
            b->e[k] = me * el + l;
            b->rows[k] = rcounts[k];
            b->total += rcounts[k];
        }
}

cl_status cl_moe_ep_counts(const cl_model *m, const int32_t *counts, int32_t *rcounts, int E, cl_moe_blocks *b) {
    int ep = cl_moe_ep_size(m);
    if (ep > 1) CL_TRY(cl_comm_alltoall(m->ep, counts, rcounts, (size_t)(E / ep), CL_F32));
    else if (rcounts != counts) memcpy(rcounts, counts, (size_t)E * sizeof *rcounts);
    cl_moe_ep_blocks(m, rcounts, E, b);
    return CL_OK;
}

cl_status cl_moe_ep_rows(const cl_model *m, const void *src, void *dst, const int32_t *counts, const int32_t *rcounts, int E,
                         int64_t C, cl_dtype dt, int back) {
    int ep = cl_moe_ep_size(m), el = E / ep;
    if (ep == 1) return CL_OK;
    size_t mine[CL_MOE_MAX_EXPERTS], theirs[CL_MOE_MAX_EXPERTS]; /* rows to rank j's experts, rows from source j */
    for (int j = 0; j < ep; j++) {
        int64_t a = 0, r = 0;
        for (int l = 0; l < el; l++) a += counts[j * el + l], r += rcounts[j * el + l];
        mine[j] = (size_t)(a * C);
        theirs[j] = (size_t)(r * C);
    }
    return back ? cl_comm_alltoallv(m->ep, src, theirs, NULL, dst, mine, NULL, dt)
                : cl_comm_alltoallv(m->ep, src, mine, NULL, dst, theirs, NULL, dt);
}
