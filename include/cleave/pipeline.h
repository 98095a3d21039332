/* Pipeline stages: cutting a model's unit sequence into S contiguous stages,
 * and what each stage is predicted to cost.
 *
 * A stage is units [u0, u1). With p pipeline ranks and v chunks per rank
 * (interleaved schedules) there are S = p * v stages and stage s runs on
 * rank s % p as its chunk s / p (see schedule.h).
 *
 * Costs are per sample: time is the unit's forward FLOPs times 3 (forward
 * + backward), so the embedding and the LM head weigh what they compute (the
 * head's V x C product is large; the embedding's lookup is small but its
 * parameters are not, which the memory figure shows). */
#ifndef CLEAVE_PIPELINE_H
#define CLEAVE_PIPELINE_H

#include "cleave/device.h"
#include "cleave/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int nstages;
    int u0[256], u1[256];   /* stage s holds units [u0[s], u1[s]) */
} cl_pp_partition;

#define CL_PP_MAX_STAGES 256

/* How a stage runs: micro-batches of B under a recompute mode, `live` of
 * them held at once (the schedule's peak for the stage: one for a single
 * device), a split backward (zb) keeping each unit's output gradient per
 * micro-batch, ngb send buffers for the gradient of the stage's input
 * (cl_schedule_grad_buffers; 0 on stage 0 and on a single device) and ndout
 * receive buffers for the gradient of its output (cl_schedule_chunk_douts:
 * held from RECV_GRAD to the backward only, so a pool apart from the live
 * slots; 0 on the last stage and on a single device). */
typedef struct {
    int B, recompute, live, zb, ngb, ndout;
    cl_zero zero;  /* ZeRO over the data-parallel ranks (zeroed: none) */
    int offload;   /* a cl_offload: the AdamW moments live in host memory or a file (host_bytes, disk_bytes), not on the device */
} cl_pp_stage_opts;

/* Figures of units [u0, u1) as one stage (or, with u0 = 0 and u1 = nunits
 * and live 1, a whole model on one device): its device bytes by category,
 * exactly what its part, AdamW, its micro-batch slots and send buffers
 * allocate (sizes from cl_model_part_sizes and cl_pp_slot_bytes). */
typedef struct {
    double flops;                /* forward + backward FLOPs per micro-batch */
    size_t bytes[CL_MEM_NCAT];   /* by category */
    size_t param_bytes;          /* parameters, gradients and both AdamW moments */
    size_t act_bytes;            /* saved activations of `live` micro-batches and the ndout output gradients (CL_MEM_ACTS) */
    size_t total_bytes;          /* the sum over categories */
    size_t host_bytes;           /* offloaded optimizer state, in host memory (not in bytes[] or the total): the
                                  * moments (host) or the four tiles they stream through (disk) */
    size_t disk_bytes;           /* the moments in the offload file (disk) */
} cl_pp_stage_cost;

cl_pp_stage_cost cl_pp_stage_predict(const cl_model_desc *d, int u0, int u1, const cl_pp_stage_opts *o);

/* Bytes of one micro-batch slot of a stage beyond its saved activations
 * (cl_model_part_sizes.acts): the received input (not on the first stage),
 * the zb per-unit output gradients, the micro-batch's token ids and targets
 * (int32 each, B x T) and its images (B x 64 floats, MLP/CNN); and dout, one
 * received output gradient (not on the last stage), which is not part of a
 * slot: the stage holds ndout of them (cl_pp_stage_opts). A single device is
 * a one-stage pipeline: one slot, no in/dout (first and last both). */
typedef struct {
    size_t in, dout, udout, ids, x;
} cl_pp_slot_bytes;
void cl_pp_slot_sizes(const cl_model_desc *d, int u0, int u1, int B, int zb, cl_pp_slot_bytes *out);
/* floats of unit u's output gradient that a split backward keeps (zb). */
int64_t cl_pp_udout_floats(const cl_model_desc *d, int u, int B);

/* The balanced partition into nstages: the one whose slowest stage is
 * fastest, among those whose every stage's predicted memory (opts[s], plus
 * extra[s] bytes the stage's rank holds beside it; extra may be NULL) fits
 * cap bytes (0: no cap). Errors (CL_ERR_INVALID): nstages < 1 or more stages than
 * units (the message names both), or no partition fits (CL_ERR_OOM, naming
 * the smallest cap that would). */
cl_status cl_pp_partition_balanced(const cl_model_desc *d, int nstages, const cl_pp_stage_opts *opts, const size_t *extra,
                                   size_t cap, cl_pp_partition *out);

/* An explicit layout: stages separated by '|', each a comma-separated list
 * of unit letters (the units' code: E embedding, t block, L head and loss;
 * c r p f l x for CNN/MLP), each optionally repeated with *N, e.g.
 * "E,t*3|t*4|t*3,L". It must spell the model's units in order, every stage
 * non-empty, and have nstages stages; otherwise CL_ERR_INVALID naming the
 * first difference (unknown letter, wrong unit at a position, too few or too
 * many units, wrong number of stages). */
cl_status cl_pp_partition_layout(const cl_model_desc *d, const char *layout, int nstages, cl_pp_partition *out);

/* Writes the layout string of a partition ("E,t*2|t*2,L"), truncated to n. */
void cl_pp_partition_format(const cl_model_desc *d, const cl_pp_partition *p, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
