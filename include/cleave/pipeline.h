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

#include "cleave/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int nstages;
    int u0[256], u1[256];   /* stage s holds units [u0[s], u1[s]) */
} cl_pp_partition;

#define CL_PP_MAX_STAGES 256

/* Predicted figures of units [u0, u1) as one stage holding `live`
 * micro-batches of B samples at once under a recompute mode (model.h). */
typedef struct {
    double flops;           /* forward + backward FLOPs per micro-batch */
    size_t param_bytes;     /* parameters, gradients and both AdamW moments
                               (the LM head's own copy of a tied wte included) */
    size_t act_bytes;       /* saved activations of `live` micro-batches */
    size_t total_bytes;     /* param_bytes + act_bytes + workspace */
} cl_pp_stage_cost;

cl_pp_stage_cost cl_pp_stage_predict(const cl_model_desc *d, int u0, int u1, int B, int live, int recompute);

/* The balanced partition into nstages: the one whose slowest stage is
 * fastest, among those whose every stage's predicted memory (live[s]
 * micro-batches of B on stage s; live may be NULL for 1 each) fits cap bytes
 * (0: no cap). Errors (CL_ERR_INVALID): nstages < 1 or more stages than
 * units (the message names both), or no partition fits (CL_ERR_OOM, naming
 * the smallest cap that would). */
cl_status cl_pp_partition_balanced(const cl_model_desc *d, int nstages, int B, const int *live, int recompute, size_t cap,
                                   cl_pp_partition *out);

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
