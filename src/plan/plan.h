/* The planner: what one unit costs, what a machine can do, and from both
 * the step time and memory of any (dp, cp, tp, pp, v, micro-batch, schedule,
 * ZeRO, recompute, sequence parallelism) configuration, searched.
 * See docs/ARCHITECTURE.md, "Planner".
 *
 * Internal to cleave (src/plan/); `cleave plan` (cli/plan_cmd.c) and
 * tests/test_plan.c use it. */
#ifndef CLEAVE_PLAN_PLAN_H
#define CLEAVE_PLAN_PLAN_H

#include "cleave/memory.h"
#include "cleave/model.h"
#include "cleave/schedule.h"
#include "cleave/trace.h"
#include "cleave/train.h"
#include "nn/cost.h"

/* ---- costs of one unit (cost.c; each kind's figures in its table, nn/cost.h) ---- */
/* ebytes: bytes of one activation element (4 fp32, 2 bf16). causal: the attention kernels compute
 * only the score blocks on and below the diagonal (cl_attention_share: cleave's), else the whole
 * T x T masked; the FLOPs are the model's either way, the shapes' counts the work done. */
void cl_unit_cost_of(const cl_model_desc *d, int u, int B, int ebytes, int recompute, int causal, cl_unit_cost *out);
/* Adds a's figures into acc (GEMM shapes appended while they fit, else merged into the last). */
void cl_pass_cost_add(cl_pass_cost *acc, const cl_pass_cost *a);

/* ---- hardware (hw.c) -------------------------------------------------------
 * A small JSON file (docs/ARCHITECTURE.md "Planner" lists the fields). */
#define CL_HW_MAX_GEMM_POINTS 128
typedef struct {
    char name[64];
    double peak_fp32, peak_bf16;       /* FLOP/s per device; peak_bf16 0: no 16-bit mode */
    double gemm_max_eff, gemm_half;    /* eff = max * prod over m, n, k of d / (d + half) */
    int ngemm_points;                  /* a measured table instead (calibrate): interpolated in log space on a full grid, else the nearest */
    double gemm_points[CL_HW_MAX_GEMM_POINTS][3 + CL_GEMM_NLAYOUTS]; /* m, n, k, efficiency of each layout (a row of
                                                                     * one efficiency gives it to all three) */
    int ngemm_points_bf16;             /* the same for products with BF16 operands, over peak_bf16 (optional: calibrate
                                        * measures it; without it bf16 products take the table or curve above) */
    double gemm_points_bf16[CL_HW_MAX_GEMM_POINTS][3 + CL_GEMM_NLAYOUTS];
    double mem_bw;                     /* bytes/s the non-GEMM kernels reach */
    double kern_bw;                    /* bytes/s cleave's own non-GEMM kernels reach, as cost.c counts their bytes
                                        * (optional; 0: mem_bw) */
    double disk_bw;                    /* bytes/s of the offload file's stream (optional; 0: none, disk offload refused) */
    double device_memory;              /* bytes per device */
    int devices_per_node;
    double intra_bw, intra_lat;        /* per device and direction, bytes/s; seconds per message */
    double inter_bw, inter_lat;
    int exact_memory;                  /* 1: this machine (cl_memory_predict's bytes, cleave's engine's traffic) */
    int attn_causal;                   /* 1: the attention kernels skip the score blocks past the diagonal (cleave's) */
    int coll_on_cores;                 /* 1: the collectives run on the devices' own cores (CPU ranks: the copies and
                                        * sums are the rank threads' work), so none hides under compute */
} cl_hw;

/* "a100", "h100" -> the built-in descriptions. */
cl_status cl_hw_builtin(const char *name, cl_hw *out);
/* Parses a description; errors (CL_ERR_INVALID) name the missing or bad field. */
cl_status cl_hw_parse(const char *text, size_t len, const char *what, cl_hw *out);
cl_status cl_hw_load(const char *path, cl_hw *out);
/* The JSON text of hw (what calibrate writes). Caller frees. */
char *cl_hw_to_json(const cl_hw *hw, const char *note);
/* Efficiency of one product [m,k]x[k,n] (0..1]. */
double cl_hw_gemm_eff(const cl_hw *hw, double m, double n, double k);
/* The same for one operand layout (CL_GEMM_NN, _NT, _TN). */
double cl_hw_gemm_eff_layout(const cl_hw *hw, double m, double n, double k, int layout);
/* The same for BF16 operands when bf16 (the bf16 table where there is one), else fp32's. */
double cl_hw_gemm_eff_of(const cl_hw *hw, double m, double n, double k, int layout, int bf16);
/* Seconds of a pass on one device: its products at the precision's peak (bf16: peak_bf16 and the bf16 table), its bytes at the
 * bandwidths; at bf16 on a description of cleave's engine (exact_memory) its F32 work (cl_gemm_shape.f32: attention) at
 * fp32's peak and table, its bytes at F32 width (twice the count) and its narrowings added (docs/ARCHITECTURE.md). */
double cl_hw_pass_compute(const cl_hw *hw, const cl_pass_cost *c, int bf16);
/* Seconds of a collective over g devices of bytes (the whole buffer), the
 * group within a node (inter = 0) or spanning nodes; ring and tree costs,
 * the smaller. */
double cl_hw_coll(const cl_hw *hw, cl_coll_kind kind, double bytes, int g, int inter);
/* Seconds of an all-to-all over g devices in which each sends a buffer of bytes (its block for every rank, its
 * own included): (g - 1)/g of it leaves (the pairwise exchange, hw.c). */
double cl_hw_alltoall(const cl_hw *hw, double bytes, int g, int inter);
/* Seconds of one point-to-point message. */
double cl_hw_p2p(const cl_hw *hw, double bytes, int inter);

/* ---- configurations (plan.c) ---------------------------------------------- */
typedef struct {
    int dp, tp, pp, v, mb, schedule, zero, recompute, sp, bf16;
    int offload;                 /* the AdamW moments: a cl_offload (disk: this machine only) */
    int lean;                    /* ZeRO 2 and 3 at dp > 1, a memory option like offload: 1 runs --bucket-size 1 (a
                                  * bucket a unit) and under ZeRO 3 --zero3-prefetch 0 (no gather ahead, each one
                                  * exposed); 0 the run's (the defaults) */
    int cp;                      /* context parallelism (0 or 1: none): the ranks sharing each sequence, the mesh
                                  * dp x cp x tp x pp; timed as cp_comm exchanges */
    int ep;                      /* expert parallelism (0 or 1: none): the MoE blocks' experts over ep consecutive dp
                                  * ranks (ep divides dp and the experts), tokens dispatched by all-to-all */
    int cp_comm;                 /* the context group's exchange (a cl_cp_comm: ring 0, a2a 1); not searched: a query's
                                  * fix.cp_comm > 0, else its base's --cp-comm, else the ring */
} cl_plan_cfg;

typedef struct {
    cl_plan_cfg c;
    int fits;
    double step_s, tokens_per_s;
    double model_tflops;        /* model FLOPs (6 x forward products, no recompute) per device per second, 1e12 */
    double hw_tflops;           /* FLOPs run (recompute included) per device per second, 1e12 */
    double peak_share;          /* model_tflops / peak */
    double bubble;              /* idle share of the pipeline ranks (simulated) */
    double comm_share;          /* communication time not hidden, share of the step */
    double peak_bytes;          /* the fullest rank's device bytes */
    double cat_bytes[6];        /* its categories (cl_mem_cat) */
    int full_rank;              /* which pipeline rank */
    int simulated;              /* step_s from the simulator (else the closed form) */
    double over_bytes;          /* bytes over the device memory, or over host_memory (not fitting) */
    int over_cat;               /* its largest category */
    double host_need;           /* exact memory with offload: cl_memory_host_need of its ranks (0: none offloads) */
    double a2a_s;               /* pipeline rank 0's all-to-all seconds a step (expert dispatch, cp's a2a), none hidden */
    double a2a_bytes;           /* the bytes pipeline rank 0 sends a step by all-to-all (the (g-1)/g that leaves it; the
                                 * step JSON's moe_a2a_bytes[0] under uniform routing) */
} cl_plan_result;

typedef struct {
    cl_model_config model;
    int T;                       /* tokens per sample */
    int devices, global_batch;
    double device_memory;        /* bytes; 0: the hardware's */
    double host_memory;          /* exact memory: the host's bytes its devices and offloaded state share
                                  * (cl_memory_host_need of the devices, all on one host, must fit); 0: unbounded */
    cl_hw hw;
    int vocab_div;               /* Megatron's padding divisor (128) */
    /* fixed dimensions (-1: search); bf16 -1: the hardware's (bf16 when it has it) */
    cl_plan_cfg fix;
    int max_tp;                  /* 0: devices per node */
    int top;                     /* results kept (0: 10) */
    int max_sims;                /* simulations at most (0: 64) */
    const cl_train_config *base; /* exact memory: the run's other settings (offload, buckets, ...); NULL: defaults */
} cl_plan_query;

typedef struct {
    int n, cap;
    cl_plan_result *r;           /* fastest first: those that fit, simulated */
    long considered, fitted, simulated_count;
    cl_plan_result nearest;      /* the non-fitting configuration with the smallest shortfall */
    int have_nearest;
    char refused[256];           /* why the last configuration the trainer does not run was dropped (cl_memory_predict's message) */
} cl_plan_list;

/* Evaluates one configuration (memory and time, simulated). CL_ERR_INVALID
 * when it is not a valid configuration of the query (the message says why). */
cl_status cl_plan_eval(const cl_plan_query *q, const cl_plan_cfg *c, cl_plan_result *out);
/* Searches every configuration the query leaves open. */
cl_status cl_plan_search(const cl_plan_query *q, cl_plan_list *out);
void cl_plan_list_free(cl_plan_list *l);
/* The model FLOPs of one step (forward products x 3, no recompute) and the
 * FLOPs run (recompute's re-forward included), from the unit costs. */
void cl_plan_step_flops(const cl_plan_query *q, int recompute, double *model, double *run);

/* Model states per device in bytes under mixed precision, ZeRO's
 * accounting (Rajbhandari et al. 2019, section 3.1): psi parameters, 2 psi
 * 16-bit weights + 2 psi 16-bit gradients + K psi optimizer state (K = 12:
 * fp32 master weights, momentum, variance), stage 1 shards the K psi,
 * stage 2 also the gradients, stage 3 also the weights, over n ranks. */
double cl_plan_model_states(double psi, int K, int zero, int n);

/* ---- one configuration in detail (plan.c) ------------------------------------ */
typedef struct {
    cl_plan_result r;
    int p;                       /* pipeline ranks */
    double (*cat)[CL_MEM_NCAT];  /* [p] each pipeline rank's bytes by category (the fullest of its dp x cp x tp ranks) */
    cl_trace trace;              /* the simulated step (cl_trace_from_sim, seconds), and on the comm track each
                                  * compute action's tensor-parallel collectives, at its end, with its kind */
} cl_plan_detail;
cl_status cl_plan_detail_of(const cl_plan_query *q, const cl_plan_cfg *c, cl_plan_detail *out);
void cl_plan_detail_free(cl_plan_detail *d);

/* ---- a training run on this machine (auto.c) -------------------------------- */
/* The `this` description's file: $CLEAVE_HW, else ./cleave-this.json. */
const char *cl_plan_this_path(void);
/* `this` for --auto and the out-of-memory refusal: the calibrated file when
 * there is one (*calibrated 1), else default figures for this machine: one
 * device per core, the host's memory shared among them, and round per-core
 * figures (docs/ARCHITECTURE.md "Planner"). A file that is there but bad is
 * an error. */
cl_status cl_plan_this_hw(cl_hw *hw, int *calibrated);
/* A query for the run tc describes, on `ranks` devices of hw: its model,
 * tokens, global batch, vocabulary padding and device memory cap (0: the
 * hardware's), the host's available memory, base = tc; every dimension
 * searched (fix them after). */
void cl_plan_query_for_train(const cl_train_config *tc, int ranks, const cl_hw *hw, cl_plan_query *q);
/* c's settings into tc (micro-batch, tp, cp and its exchange, ep, sequence parallelism,
 * schedule, virtual stages, ZeRO, recompute); the mesh is c->dp x c->cp x c->tp x c->pp. */
void cl_plan_cfg_to_train(const cl_plan_cfg *c, cl_train_config *tc);
/* c as `cleave train` flags: "--dp D [--cp C [--cp-comm a2a]] [--ep E] --tp T --pp P --micro-batch-size B
 * --zero Z --recompute R", with --schedule (and --virtual-stages) when pp > 1
 * and --sequence-parallel when on. */
void cl_plan_cfg_flags(const cl_plan_cfg *c, char *buf, size_t n);
/* How many of c's dimensions differ from ref's (the flags one would change). */
int cl_plan_cfg_distance(const cl_plan_cfg *c, const cl_plan_cfg *ref);

/* ---- the picture (svg.c) ---------------------------------------------------- */
/* An SVG of one configuration: each pipeline rank's memory as a bar by
 * category against the device memory, and the simulated step's timeline
 * with its communication (src/pipeline/svg.h's writer). */
cl_status cl_plan_svg(const char *path, const cl_plan_query *q, const cl_plan_detail *d);

#endif
