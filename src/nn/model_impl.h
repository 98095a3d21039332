/* The one rank's part of a model (cl_model), whole: its fields are the nn
 * module's own. Included only by the .c files of src/nn (and tests of nn internals);
 * everything else holds a cl_model through the calls in cleave/model.h. */
#ifndef CL_NN_MODEL_IMPL_H
#define CL_NN_MODEL_IMPL_H

#include "cleave/backend.h"
#include "cleave/kernels.h"
#include "cleave/model.h"

struct cl_model {
    const cl_model_desc *desc;
    /* the MoE blocks' figures since cl_model_moe_take: the aux loss (each micro-batch's sum over the part's MoE
     * blocks, weighted by its share of the step), dropped token-slots, token-slots per expert (summed over blocks) */
    double moe_aux;
    int64_t moe_dropped, moe_slots[CL_MOE_MAX_EXPERTS];
    cl_device *dev;
    int u0, u1;
    int B;                  /* micro-batch capacity in samples */
    int64_t nfloats;        /* floats in params (and grads) on this rank */
    float *params, *grads;  /* flat, nfloats each (ZeRO 2: grads is the shard's, sizes.grads floats) */
    uint16_t *wlow;         /* bf16: the BF16 copy of params (sizes.wlow floats; cl_model_refresh_low); NULL in F32 */
    float *gwhole;          /* ZeRO 2: the whole-kept gradients (sizes.whole floats) */
    float *gbuf[2];         /* ZeRO 2: bucket working buffers (sizes.nbuf of sizes.bucket floats) */
    float *ghalo;           /* ZeRO 2: the norm's buffer (sizes.halo floats) */
    float *gstage;          /* --grad-reduce-dtype bf16: the reduction's BF16 staging (sizes.gstage floats) */
    float **pwork;          /* ZeRO 3: parameter working buffers (sizes.npwork of sizes.pwork floats) */
    struct cl_z3 *z3;       /* ZeRO 3: the gathers in flight (cl_model_set_zero3); NULL otherwise */
    float **p, **g;         /* per parameter: pointer into params/grads, NULL if not held (ZeRO 2: into
                             * gwhole, or into a working buffer while its bucket is being back-propagated) */
    int64_t *loc;           /* per parameter: offset into params (-1 if not held) */
    float *head_wte_g;      /* see cl_model_split_tied; NULL otherwise */
    uint8_t *gfresh;        /* per parameter, then one for head_wte_g: 1 while its gradient holds the zeros a fill
                             * wrote (cl_model_zero_grads, cl_model_bucket_begin) and nothing has written it since
                             * (cl_nn_grad_beta), 2 while it holds the last step's values that cl_model_begin_grads
                             * left for a weight product to overwrite (cl_unit_backward zeroes it if none did) */
    int64_t (*gskip)[2];    /* cl_model_begin_grads' ranges of m->grads left unfilled, ascending (room for nparams) */
    int ngskip;             /* how many (set when the part is made) */
    int recompute;          /* cl_recompute (cl_model_set_recompute) */
    float *rc_buf;          /* recompute: one block's attention (selective) or all its activations (full) */
    float *rope;            /* the rotary tables (sizes.tables floats): cos [T, hd/2], then sin; NULL if none */
    float *scratch;         /* backward workspace */
    float *dbuf[2];         /* ping-pong activation gradients */
    int64_t max_io_floats;  /* per micro-batch, max over units of in/out */
    cl_part_sizes sizes;    /* what it holds (cl_model_part_sizes, recompute as set) */
    cl_tp tp;               /* the tensor-parallel group its slice belongs to (cl_model_set_tp; size 1: none) */
    cl_comm *ep;            /* the expert-parallel group (cl_model_set_ep; NULL: none), nn/moe_dispatch.c */
    struct cl_nn_cp *cp;    /* the context-parallel group and its buffers (cl_model_set_cp; NULL: none), nn/cp_attention.c */
    cl_zero zero;           /* how its buffers are sharded over the data-parallel ranks (cl_model_create_zero) */
    float *tp_keep;         /* set by cl_model_stage_backward(_weight) around a unit's split backward: where
                             * the input pass keeps the results of its tensor-parallel collectives for the
                             * weight pass, which must not run them again (cl_unit_keep_floats) */
};

/* The kernel table of the model's device: cl_kern(m)->layernorm_forward(...). */
static inline const cl_kernels *cl_kern(const cl_model *m) { return cl_device_kernels(m->dev); }

#endif
