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
 * the replicas on its own when the part holds only the head. */
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
/* Before the backward that completes the gradients: nothing launched yet. */
void cl_dp_begin(cl_dp *dp);
/* The unit-done hook (ctx: the cl_dp): launches every bucket whose lowest unit is u. */
cl_status cl_dp_unit_done(void *ctx, int u);
/* Launches every bucket not launched yet. */
cl_status cl_dp_launch_rest(cl_dp *dp);
/* Launches the rest and waits for every launched reduction (all of them, even after an error). */
cl_status cl_dp_finish(cl_dp *dp);
/* Buckets, and the launch time (cl_now) of bucket k in the last step. */
int cl_dp_nbuckets(const cl_dp *dp);
double cl_dp_launch_time(const cl_dp *dp, int k);

#ifdef __cplusplus
}
#endif

#endif
