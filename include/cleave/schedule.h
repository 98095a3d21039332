/* Pipeline-parallel schedules as data, and a simulator that checks and times
 * them. Nothing here runs a model: a schedule is, for each of p ranks, the
 * ordered list of actions that rank performs in one training step.
 *
 * Placement (Megatron-LM's interleaved placement): rank r holds v chunks
 * (virtual stages); chunk c on rank r is model stage s = c * p + r, so there
 * are S = p * v stages and stage s + 1 lives on rank (r + 1) % p.
 *
 * Communication actions name the micro-batch and the chunk of the rank that
 * performs them: SEND_ACT(mb, c) on rank r sends stage s's output to stage
 * s + 1; RECV_ACT(mb, c) receives stage s's input from stage s - 1;
 * SEND_GRAD(mb, c) sends the gradient of stage s's input to stage s - 1;
 * RECV_GRAD(mb, c) receives the gradient of stage s's output from stage s + 1.
 * With p == 1 all stages are on one rank and there is no communication.
 * Sends are treated as buffered (never block); receives block. */
#ifndef CLEAVE_SCHEDULE_H
#define CLEAVE_SCHEDULE_H

#include "cleave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CL_SCHED_GPIPE,       /* all forwards, then all (combined) backwards */
    CL_SCHED_1F1B,        /* PipeDream-Flush as Megatron: warm-up p-r-1 F, 1F1B, cool-down */
    CL_SCHED_INTERLEAVED, /* Megatron's interleaved 1F1B, v >= 2 chunks per rank, m % p == 0 */
    CL_SCHED_ZB_H1        /* Zero Bubble ZB-H1 (Qi et al.): B and W split, W deferred */
} cl_sched_kind;
#define CL_SCHED_NKINDS (CL_SCHED_ZB_H1 + 1)

typedef enum {
    CL_ACT_FWD,
    CL_ACT_BWD_INPUT,  /* "B": gradient of the input */
    CL_ACT_BWD_WEIGHT, /* "W": gradient of the weights */
    CL_ACT_BWD,        /* B and W together (schedules that do not split) */
    CL_ACT_SEND_ACT,
    CL_ACT_RECV_ACT,
    CL_ACT_SEND_GRAD,
    CL_ACT_RECV_GRAD,
    CL_ACT_GRAD_SYNC,  /* data-parallel gradient reduction: after every backward of the rank */
    CL_ACT_OPT_STEP,   /* optimizer step: after GRAD_SYNC */
    /* Trace-only kinds (never in a schedule; cl_trace_event, cleave/trace.h): one transfer of the context-parallel
     * ring attention inside a pass, from its post to its completion (src/nn/cp_attention.c). */
    CL_ACT_RING_SEND,
    CL_ACT_RING_RECV
} cl_act_kind;
#define CL_ACT_NKINDS (CL_ACT_OPT_STEP + 1) /* the kinds a schedule holds */
#define CL_ACT_NKINDS_TRACE (CL_ACT_RING_RECV + 1) /* and the trace-only ones */
/* What an action is: a pass of the model (FWD, BWD_INPUT, BWD_WEIGHT, BWD),
 * a message between stages (SEND_ACT, RECV_ACT, SEND_GRAD, RECV_GRAD), or
 * one of the step's ends (GRAD_SYNC, OPT_STEP); the first two act on a
 * micro-batch of a chunk (cl_action's mb and chunk), the ends on none. */
static inline int cl_act_is_compute(cl_act_kind k) {
    return k == CL_ACT_FWD || k == CL_ACT_BWD_INPUT || k == CL_ACT_BWD_WEIGHT || k == CL_ACT_BWD;
}
static inline int cl_act_is_message(cl_act_kind k) {
    return k == CL_ACT_SEND_ACT || k == CL_ACT_RECV_ACT || k == CL_ACT_SEND_GRAD || k == CL_ACT_RECV_GRAD;
}
static inline int cl_act_on_microbatch(cl_act_kind k) { return cl_act_is_compute(k) || cl_act_is_message(k); }

typedef struct {
    cl_act_kind kind;
    int mb;    /* micro-batch, 0..m-1 (unused, 0, for GRAD_SYNC and OPT_STEP) */
    int chunk; /* chunk on this rank, 0..v-1 (unused, 0, for GRAD_SYNC and OPT_STEP) */
} cl_action;

typedef struct {
    cl_sched_kind kind;
    int p, m, v;       /* ranks, micro-batches, chunks per rank */
    int *len;          /* [p] actions per rank */
    int *cap;          /* [p] allocated actions per rank */
    cl_action **acts;  /* [p][len[r]] */
} cl_schedule;

/* Per stage-chunk compute times. f/b/w (if non-NULL) hold S = p*v entries,
 * indexed by model stage, and override tf/tb/tw. A combined BWD costs b + w.
 * Communication takes no time (but see cl_sched_extra). */
typedef struct {
    double tf, tb, tw;
    const double *f, *b, *w;
} cl_sched_costs;

/* Communication and the step's end, for cl_schedule_simulate_ex (the
 * planner's, src/plan/): sends take no time on the sender; a receive ends
 * no earlier than its send plus t_act (activations) or t_grad (gradients),
 * the message's flight. GRAD_SYNC and OPT_STEP of rank r last sync[r] and
 * opt[r] (0 when NULL). All finite and >= 0. */
typedef struct {
    double t_act, t_grad;
    const double *sync, *opt;
} cl_sched_extra;

typedef struct {
    int p;
    double makespan;     /* end of the last action */
    double *busy;        /* [p] total compute time per rank */
    double *bubble;      /* [p] (makespan - busy) / makespan, 0 if makespan is 0 */
    double bubble_total; /* sum of idle / (p * makespan) */
    int *peak_live;      /* [p] most micro-batch-chunks live at once (FWD started, W/BWD not done) */
    int *len;            /* [p] actions per rank (as in the schedule) */
    double **start;      /* [p][len[r]] start time of each action */
    double **end;        /* [p][len[r]] end time of each action */
} cl_sim_result;

/* "gpipe", "1f1b", "interleaved", "zb-h1" -> *out. Unknown name: CL_ERR_INVALID
 * naming the name and listing the known ones. */
cl_status cl_sched_kind_parse(const char *name, cl_sched_kind *out);
/* The name cl_sched_kind_parse accepts; "?" for a value out of range. */
const char *cl_sched_kind_name(cl_sched_kind kind);
/* "FWD", "BWD_INPUT", ..., "OPT_STEP"; "?" for a value out of range. */
const char *cl_act_kind_name(cl_act_kind kind);

/* Builds the schedule of kind for p ranks, m micro-batches and v chunks per
 * rank into *out (which the caller frees with cl_schedule_free). Errors
 * (CL_ERR_INVALID, *out left empty): p < 1, m < 1, v < 1, sizes past the
 * limits (p <= 4096, v <= 64, p*m*v <= 2^22), v != 1 for a non-interleaved
 * kind, interleaved with v < 2 or m % p != 0. The schedule is deadlock-free
 * with buffered sends and blocking receives: every receive comes right before
 * the action that needs it and every send right after the action that
 * produces it. Every rank ends with GRAD_SYNC then OPT_STEP. */
cl_status cl_schedule_make(cl_sched_kind kind, int p, int m, int v, cl_schedule *out);
/* Frees what cl_schedule_make allocated and zeroes *s; NULL and zeroed are fine. */
void cl_schedule_free(cl_schedule *s);
/* Model stage of chunk on rank: chunk * p + rank. */
int cl_schedule_stage(const cl_schedule *s, int rank, int chunk);
/* Edits for building broken schedules (tests) or custom ones: removes the
 * action at index i of rank, or inserts a before index i (0..len). Errors:
 * rank or index out of range (CL_ERR_INVALID), no memory (CL_ERR_OOM). */
cl_status cl_schedule_remove(cl_schedule *s, int rank, int i);
cl_status cl_schedule_insert(cl_schedule *s, int rank, int i, cl_action a);
/* Index of the first action of rank equal to (kind, mb, chunk), or -1. */
int cl_schedule_find(const cl_schedule *s, int rank, cl_act_kind kind, int mb, int chunk);

/* Most micro-batches chunk c of rank r holds at once: taken at its first
 * RECV_ACT or FWD, given back at its BWD (or BWD_WEIGHT, split). The
 * executor's slot pool has exactly this many; -1 when out of memory. */
int cl_schedule_chunk_live(const cl_schedule *sc, int r, int c);
/* Output-gradient receive buffers of chunk c of rank r: most gradients of
 * the chunk's output held at once, each from its RECV_GRAD (a blocking
 * receive) to the backward that reads it (BWD, or BWD_INPUT under a split
 * backward: that one copies what W needs into the slot's per-unit buffers).
 * 0 on the last stage (it receives none) and with p == 1; one where every
 * receive comes right before its backward, as in the schedules
 * cl_schedule_make builds. The executor's pool has exactly this many; -1
 * when out of memory. */
int cl_schedule_chunk_douts(const cl_schedule *sc, int r, int c);
/* Input-gradient send buffers of rank r, a pool sized from the schedule
 * alone. A backward of chunk c (not model stage 0) writes the gradient of
 * its input into a buffer, which SEND_GRAD sends to stage s - 1 without
 * blocking. The buffer may be reused only once the send is known to be
 * complete, and rank r knows that from the schedule: after it has received
 * any message the destination rank sent after its RECV_GRAD of that
 * gradient (that receive blocks, so it has finished by then). free_at[c * m
 * + mb] (length v * m) is the index in rank r's action list from which the
 * buffer of (mb, c) is free again: the action after that receive, or len[r]
 * (the step's end) when no such message comes. peak[c] (length v) is the
 * most buffers chunk c holds at once under that rule (0 for stage 0).
 * Executor and memory predictor both take the pool from here, so the pool
 * never grows during a step and its size does not depend on timing.
 * Errors: CL_ERR_INVALID for a schedule whose sends and receives do not
 * match, CL_ERR_OOM. */
cl_status cl_schedule_grad_buffers(const cl_schedule *sc, int r, int *free_at, int *peak);

/* tf = tb = tw = 1, no per-stage arrays. */
cl_sched_costs cl_sched_costs_uniform(double tf, double tb, double tw);

/* Runs the schedule, event by event: each rank executes its actions in
 * order; an action starts when the rank is free and what it needs is there.
 * NULL costs means cl_sched_costs_uniform(1, 1, 1). On CL_OK, *res holds the
 * figures (free with cl_sim_result_free). On an invalid schedule,
 * CL_ERR_INVALID with a message naming the rank, the action index and the
 * action, and *res left empty. Invalid means: an action with a bad kind,
 * micro-batch or chunk; a duplicate compute action; a forward before its input
 * is there (stage s-1 not received / not computed on this rank); a backward
 * (B or BWD) before its forward on this rank, or before its output gradient is
 * received; W before its B; BWD mixed with B/W for the same micro-batch-chunk;
 * a send before what it sends is computed, or a send/receive where the
 * neighbouring stage is on the same rank or absent; a duplicate send or
 * receive; deadlock (no rank can go on while some have actions left: the
 * message names the first blocked rank, its action and what it waits for);
 * a send never received; a missing compute action; GRAD_SYNC before the
 * rank's last backward, OPT_STEP before GRAD_SYNC, or either missing or twice.
 * Costs must be finite and >= 0 (CL_ERR_INVALID otherwise). */
cl_status cl_schedule_simulate(const cl_schedule *s, const cl_sched_costs *costs, cl_sim_result *res);
/* The same with communication times and the step's end (extra NULL: none). */
cl_status cl_schedule_simulate_ex(const cl_schedule *s, const cl_sched_costs *costs, const cl_sched_extra *extra,
                                  cl_sim_result *res);
void cl_sim_result_free(cl_sim_result *res);

/* The analytic bubble fraction of kind for uniform stage costs tf, tb, tw
 * (per chunk), where one is known, else -1:
 *   gpipe, 1f1b:  (p-1) / (m+p-1)                       (any tf, tb, tw)
 *   interleaved:  ((p-1)/v) / (m + (p-1)/v)             (m % p == 0)
 *   zb-h1:        idle = (p-1)(tf+tb-tw) per rank, bubble = idle / (idle + m(tf+tb+tw))
 *                 (only when m >= p, tw <= tf and tw <= tb; see tests/test_schedule.c) */
double cl_schedule_closed_form_bubble(cl_sched_kind kind, int p, int m, int v, double tf, double tb, double tw);

#ifdef __cplusplus
}
#endif

#endif
