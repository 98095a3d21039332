/* cleave tensor parallelism: the four region mappings of Megatron-LM
 * (Shoeybi et al. 2019; Korthikanti et al. 2022 for the sequence-parallel
 * pair), each the transpose of its partner, as pure functions of the
 * tensor-parallel group.
 *
 *   mapping     forward                        backward
 *   COPY        identity                       all-reduce (sum)
 *   REDUCE      all-reduce (sum)               identity
 *   GATHER      all-gather along the tokens    reduce-scatter along the tokens
 *   SCATTER     reduce-scatter along tokens    all-gather along the tokens
 *
 * COPY enters the tensor-parallel region (before a column-parallel layer
 * whose input every rank holds whole), REDUCE leaves it (after a
 * row-parallel layer, whose outputs are partial sums). With sequence
 * parallelism GATHER takes the place of COPY (every rank holds a contiguous
 * 1/size of the rows of a [rows, width] activation and the layer needs all
 * of them) and SCATTER the place of REDUCE (the partial sums are summed and
 * each rank keeps its rows).
 *
 * Counts: for COPY and REDUCE n is the floats of the (whole) buffer, in ==
 * out allowed (in place); for GATHER and SCATTER n is the floats of one
 * rank's shard, the whole buffer has size * n, and in and out must not
 * overlap. On a group of one rank every mapping is a no-op (a copy when in
 * != out), so tensor parallelism of 1 runs the code it ran before. Sums are
 * the communicator's deterministic fold (comm.h): every rank gets the same
 * bits. */
#ifndef CLEAVE_TP_H
#define CLEAVE_TP_H

#include <stddef.h>

#include "cleave/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CL_TP_COPY = 0, CL_TP_REDUCE, CL_TP_GATHER, CL_TP_SCATTER, CL_TP_NMAPPINGS } cl_tp_mapping;

/* "copy", "reduce", "gather", "scatter". */
const char *cl_tp_mapping_name(cl_tp_mapping m);

/* A tensor-parallel group: comm NULL (or of one rank) is tp = 1. */
typedef struct {
    cl_comm *comm;
    int size, rank;
} cl_tp;

cl_tp cl_tp_of(cl_comm *comm);

/* The mapping's forward and its transpose, the backward (see the table). */
cl_status cl_tp_forward(const cl_tp *tp, cl_tp_mapping m, const float *in, float *out, size_t n);
cl_status cl_tp_backward(const cl_tp *tp, cl_tp_mapping m, const float *in, float *out, size_t n);

/* The forward on n elements of format dt (cl_tp_forward is it at CL_F32): GATHER moves them as they are (bf16
 * sequence parallelism gathers the BF16 norm outputs: half the bytes of F32); COPY's and SCATTER's sums are
 * the communicator's in that format (comm.h: BF16 folded in F32, rounded once). */
cl_status cl_tp_forward_n(const cl_tp *tp, cl_tp_mapping m, const void *in, void *out, size_t n, cl_dtype dt);

#ifdef __cplusplus
}
#endif

#endif
