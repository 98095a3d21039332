/* The pipeline executor's state (pipeline.c), shared by the files that do
 * its other jobs for it: gradient sync (grads.c), the optimizer step
 * (optim_step.c), measurement and the timeline (measure.c), evaluation and
 * generation (eval.c), checkpoint gather and load (ckpt_gather.c), ZeRO 3's
 * whole parameters over the chunks (zero3_whole.c). Nothing outside
 * src/train/ includes it; the trainer reaches the executor through
 * internal.h's cl_pp_* functions. */
#ifndef CLEAVE_TRAIN_PP_H
#define CLEAVE_TRAIN_PP_H

#include "cleave/comm.h"
#include "cleave/dp.h"
#include "cleave/schedule.h"
#include "cleave/trace.h"
#include "cleave/train.h"
#include "train/internal.h"

typedef struct {
    int mb;              /* micro-batch in it, -1 when free */
    cl_acts acts;
    float *in;           /* received input of the chunk's first unit (not on stage 0) */
    float **udout;       /* zb-h1: each unit's output gradient, for W */
    int32_t *tokens, *targets;
    float *x;
    cl_microbatch mbd;
    cl_request *send_req; /* the activation sent out of acts */
} pp_slot;

typedef struct {
    cl_model *m;
    cl_optimizer opt;
    int stage, first, last;
    int nslots;
    pp_slot *slots;
    int *slot_of;        /* [m]: slot index of each micro-batch, -1 */
    int ngb;             /* input-gradient send buffers (cl_schedule_grad_buffers' peak for this chunk) */
    float **gb;          /* [ngb] each in_bytes */
    int *gb_mb;          /* [ngb] micro-batch whose gradient it holds or sends, -1 when free */
    cl_request **gb_req; /* [ngb] its send, once SEND_GRAD has posted it */
    int ndout;           /* output-gradient receive buffers (cl_schedule_chunk_douts; 0 on the last stage) */
    float **dob;         /* [ndout] each out_bytes */
    int *dob_mb;         /* [ndout] micro-batch whose output gradient it holds, -1 when free */
    cl_dp *dp;           /* its gradient buckets over the data-parallel replicas */
    int last_bwd;        /* index in this rank's actions of the backward that completes its weight gradients */
    size_t in_bytes, out_bytes;
} pp_chunk;

struct cl_pp {
    cl_comm *comm;              /* NULL for one rank */
    int p, r, v, m, S;
    cl_schedule sched;
    cl_pp_shape shape;          /* schedule (moved to sched), slots and send buffers per stage, partition */
    double bubble_uniform;      /* the simulator's bubble of sched with equal stage times */
    cl_pp_partition part;
    pp_chunk ch[CL_PP_MAX_CHUNKS];
    int *gb_free_at;     /* [v * m]: action index from which (mb, chunk)'s send buffer is free (cl_schedule_grad_buffers) */
    double *norm_parts;  /* [nparams + 1]: the gradients' sums of squares, then the loss */
    float *tie_buf;      /* rank 0 of a pipeline with the head elsewhere: the head's wte gradient */
    double *cost_sum;    /* [3 * S] measured F, B(or BWD), W seconds summed over this step's actions */
    int *cost_n;         /* [3 * S] */
    cl_trace trace;      /* this rank's timeline (cfg.trace) */
    int world_rank;
};

static inline int rank_of_stage(const struct cl_pp *pp, int s) { return s % pp->p; }
static inline cl_status msg_tag(const struct cl_pp *pp, int mb, int s_hi, int dir, int *tag) {
    return cl_pp_msg_tag(pp->S, mb, s_hi, dir, tag);
}

/* Each action's time into the step's per-stage cost sums, and with trace
 * into the timeline (measure.c). */
cl_status cl_pp_record(struct cl_pp *pp, int trace, int step, const cl_action *a, double t0, double t1);
/* Measured bubble and the simulator's figure on this step's measured
 * per-stage times, into st (measure.c; p > 1). */
cl_status cl_pp_bubble_figures(struct cl_pp *pp, double busy, double span, cl_step_stats *st);
/* GRAD_SYNC after the sends are done: the data-parallel buckets, the
 * sequence-parallel partial sums, the tied wte, ZeRO 2's shards (grads.c). */
cl_status cl_pp_grad_sync(cl_trainer *t, struct cl_pp *pp);
/* --check-replicas over the tensor-parallel ranks (grads.c). */
cl_status cl_pp_check_replicas(cl_trainer *t, struct cl_pp *pp);
/* OPT_STEP: global norm, clipping, AdamW, ZeRO's all-gather (optim_step.c). */
cl_status cl_pp_opt_step(cl_trainer *t, struct cl_pp *pp, float lr, double loss_sum, double *norm_out);
/* ZeRO 3: every chunk's parameters whole, and back (zero3_whole.c). */
cl_status cl_pp_z3_whole(struct cl_pp *pp, int gather);
void cl_pp_z3_end_whole(struct cl_pp *pp, int keep);

#endif
