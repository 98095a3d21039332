/* cleave data parallelism: one part's gradients summed over the replicas,
 * bucket by bucket, while the last micro-batch's backward still runs.
 *
 * The one module every step takes, each pipeline chunk (a single device is
 * a one-stage pipeline): the executor passes cl_dp_unit_done as the unit-done
 * hook of the backward that completes the step's gradients (the chunk's last
 * combined backward), so each bucket's all-reduce is launched as soon as the
 * units it covers are done and overlaps the rest of the backward; a split
 * backward (zb-h1) launches them all after the chunk's last weight pass.
 * cl_dp_finish launches what is left and waits for all.
 *
 * Buckets: the part's units, last to first, cut into ranges of at least
 * bucket_bytes of parameters each, every range a contiguous run of the flat
 * gradient buffer including its 16-float padding (parameters are laid out in
 * unit order), so a later reduce-scatter over dp shards can take the same
 * ranges. Reductions are deterministic (each element summed in rank order),
 * so bucketing does not change a bit. The LM head's separate wte gradient
 * (cl_model_split_tied) is one more range: added into the wte gradient
 * before the embedding's bucket leaves when the part holds both, summed over
 * the replicas on its own when the part holds only the head.
 *
 * ZeRO 2 (cl_model_zero(m)->stage 2): every combined backward, not only the last,
 * runs with the hook; before it, the first bucket gets one of the part's
 * (one or two) working buffers, zeroed, and its parameters' gradient
 * pointers are aimed into it; when the hook has seen a bucket's lowest unit
 * the bucket is reduce-scattered in place over the replicas
 * (cl_comm_ireduce_scatter_v: its pieces in each replica's shard) and the
 * next bucket takes the other buffer, first waiting for the reduce-scatter
 * still in flight from it and adding that replica's piece into the shard's
 * gradients (cl_model_grads). Gradients kept whole (cl_model_grad_whole) are left
 * out of the buckets' ends (zeros inside a range travel as zeros) and summed
 * over the replicas in cl_dp_finish, as at stage 0. */
#ifndef CLEAVE_DP_H
#define CLEAVE_DP_H

#include "cleave/comm.h"
#include "cleave/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cl_dp cl_dp;

/* Buckets of m's gradients over comm (NULL or one rank: every call is a no-op). */
cl_status cl_dp_create(cl_dp **out, cl_comm *comm, cl_model *m, size_t bucket_bytes);
void cl_dp_destroy(cl_dp *dp);
/* Expert parallelism: each bucket cut where the parameters turn from expert weights (cl_param_spec's expert) to
 * the others or back, so no bucket mixes them; the experts' buckets are summed over edp, the expert-data group
 * (NULL or one rank: not at all), the others over the replicas as before. Each bucket's sum is the one the
 * replicas made before this rank held only its experts (the others' gradients were zeros: x + 0 is x). Under
 * ZeRO 2 the part's shards are edp's (cl_zero's n its size) and a bucket stays whole but leaves as its runs of
 * one kind: expert runs reduce-scattered over edp, the others over the replicas in ep-th pieces of edp's shards
 * and gathered over ep, the expert-parallel group, so each rank's shard gets the same sums as above. */
cl_status cl_dp_set_experts(cl_dp *dp, cl_comm *edp, cl_comm *ep);
/* Before the backward that completes the gradients: nothing launched yet. */
void cl_dp_begin(cl_dp *dp);
/* Before each combined backward of the part (last: the one that completes
 * the step's gradients): *armed 1 if the backward must pass cl_dp_unit_done
 * as its hook: the last one, and under ZeRO 2 every one, whose first
 * bucket's working buffer this prepares. */
cl_status cl_dp_begin_backward(cl_dp *dp, int last, int *armed);
/* The unit-done hook (ctx: the cl_dp): launches every bucket whose lowest unit is u. */
cl_status cl_dp_unit_done(void *ctx, int u);
/* Launches every bucket not launched yet. */
cl_status cl_dp_launch_rest(cl_dp *dp);
/* Launches the rest and waits for every launched reduction (all of them,
 * even after an error); ZeRO 2: then sums the whole-kept gradients (and a
 * head-only part's wte gradient) over the replicas. */
cl_status cl_dp_finish(cl_dp *dp);
/* ZeRO 2, once the whole-kept gradients are final (after the tensor-parallel
 * and pipeline sums): their pieces inside this replica's shard copied into
 * the shard's gradients. */
void cl_dp_whole_to_shard(cl_dp *dp);
/* 1 if the part's gradients are sharded over the replicas (ZeRO 2). */
int cl_dp_sharded(const cl_dp *dp);
/* ZeRO 2 (cl_dp_sharded): cl_grad_sumsq's figures, the same bits, from the
 * shards: each replica sums the squares of the CL_SUMSQ_BLOCK blocks of
 * every parameter (cut from the parameter's start, as cl_sumsq cuts them)
 * that start in its shard, a block that runs into the next shards read from
 * their first floats (all-gathered, into cl_model_grads_halo); the blocks' sums are
 * all-gathered and added in cl_sumsq's order on every replica. */
cl_status cl_dp_grad_sumsq(cl_dp *dp, double *per_param);
/* Buckets, and the launch time (cl_now) of bucket k in the last step. */
int cl_dp_nbuckets(const cl_dp *dp);
double cl_dp_launch_time(const cl_dp *dp, int k);

#ifdef __cplusplus
}
#endif

#endif
