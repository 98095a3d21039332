/* Expert parallelism's exchange (moe_dispatch.c): the MoE block's token rows sent to the ranks computing their
 * experts and the results back, by all-to-all over the expert-parallel group (cl_model_set_ep). Included by
 * kind_moe_block.c only. */
#ifndef CL_NN_MOE_DISPATCH_H
#define CL_NN_MOE_DISPATCH_H

#include "nn/model_impl.h"

/* The expert GEMMs' blocks of rows, in row order: block b is expert e[b]'s rows[b] rows. n = E blocks: source
 * rank j's rows for each of this rank's E / ep experts, j = 0 .. ep - 1 (ep 1: expert e's counts[e] rows). */
typedef struct {
    int n;
    int e[CL_MOE_MAX_EXPERTS];
    int32_t rows[CL_MOE_MAX_EXPERTS];
    int64_t total; /* the rows of all blocks */
} cl_moe_blocks;

/* The group's size (1 without one). */
int cl_moe_ep_size(const cl_model *m);
/* rcounts[j E/ep + l]: the rows source rank j routes to this rank's expert l, from every rank's counts[E] (an
 * all-to-all of E/ep counts per rank); ep 1: a copy of counts. Then *b, the blocks those rows form. */
cl_status cl_moe_ep_counts(const cl_model *m, const int32_t *counts, int32_t *rcounts, int E, cl_moe_blocks *b);
/* The blocks of rcounts again (the backward's, from the saved counts). */
void cl_moe_ep_blocks(const cl_model *m, const int32_t *rcounts, int E, cl_moe_blocks *b);
/* Rows of C elements of format dt (F32, or BF16 for bf16's dispatched GEMM input), all-to-all: out = 0 sends this
 * rank's rows in (expert, token) order (counts) to their experts' ranks, received into xr source-major (rcounts);
 * back = 1 returns rows of xr to where they came from. ep 1: nothing (the caller's buffers are one). */
cl_status cl_moe_ep_rows(const cl_model *m, const void *src, void *dst, const int32_t *counts, const int32_t *rcounts, int E,
                         int64_t C, cl_dtype dt, int back);

#endif
