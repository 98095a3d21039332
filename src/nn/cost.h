/* What a unit costs, per pass (internal to src/nn and the planner): the
 * figures each unit kind's table gives (cl_kind's cost) and the planner
 * (src/plan) times against a hardware description. A unit's cost is counted
 * where its kernels are written, so that the two cannot drift apart.
 *
 * Invariants: FLOPs are the model's (the whole products, 2 m n k), the
 * shapes' counts the work the kernels do (the causal attention's skipped
 * blocks left out); bytes count each kernel reading its inputs and writing
 * its outputs once, at the activation precision; the tensor-parallel
 * collectives are counted (bytes of the whole buffer, calls) at tp > 1 only. */
#ifndef CLEAVE_NN_COST_H
#define CLEAVE_NN_COST_H

#include "cleave/model.h"

/* For a unit of a description (the tensor-parallel slice it is cut for: its
 * local heads, columns and vocabulary rows, sequence parallelism) at
 * micro-batch B: the FLOPs of its matrix products, the bytes its other
 * kernels read and write, the products' shapes (for the efficiency curve)
 * and the tensor-parallel collectives, for each pass:
 *   F   forward
 *   B   backward-input (gradient of the input; a loss unit's whole backward,
 *       as the executor runs it; attention's four products have no weight)
 *   W   backward-weight (gradients of the weights and biases)
 *   RF  the re-forward recompute adds before B: the block's forward (full),
 *       the attention core's scores and their product with v (selective) */
enum { CL_PASS_F = 0, CL_PASS_B, CL_PASS_W, CL_PASS_RF, CL_NPASS };
#define CL_COST_MAX_GEMM 16

typedef struct {
    double m, n, k, count; /* count products of [m, k] x [k, n] */
    int layout;            /* cl_gemm's operands as the engine passes them: CL_GEMM_NN (A B), _NT (A B^T), _TN (A^T B) */
    double f32;            /* of count, the work cleave's engine runs in F32 whatever the step's dtype (the attention
                            * products, flash.c); the rest runs in the step's dtype (the linears: BF16 operands in bf16) */
} cl_gemm_shape;
enum { CL_GEMM_NN = 0, CL_GEMM_NT, CL_GEMM_TN, CL_GEMM_NLAYOUTS };

typedef struct {
    double flops; /* 2 m n k count, summed over the products */
    double bytes;  /* bytes read and written by the other kernels (norms, GELU, softmax, bias loops, lookups) */
    double stream; /* bytes of plain copies, fills and adds among them (memcpy, memset, vector adds): they run
                    * at memory_bandwidth, the others at kernel_bandwidth (docs/ARCHITECTURE.md "Planner") */
    double narrow; /* bf16: bytes of cleave's engine's F32 -> BF16 narrowings of GEMM operands (cl_nn_narrow: read 4,
                    * write 2 an element; a fused kernel's extra BF16 write: 2), at kernel_bandwidth on a description
                    * of cleave's engine (exact_memory), not on a GPU description (its activations BF16 throughout) */
    int ngemm;
    cl_gemm_shape gemm[CL_COST_MAX_GEMM];
    /* tensor-parallel collectives: bytes of the whole buffer (as comm.h counts) and calls */
    double ar_bytes, ag_bytes, rs_bytes;
    int ar_calls, ag_calls, rs_calls;
    /* expert parallelism's all-to-alls (the MoE blocks' dispatch over the ep group, ep > 1 only): bytes of a
     * rank's whole send buffers (its block for every rank, its own included) and calls */
    double a2a_bytes;
    int a2a_calls;
} cl_pass_cost;

typedef struct {
    cl_pass_cost pass[CL_NPASS];
} cl_unit_cost;

typedef enum { CL_COLL_ALLREDUCE, CL_COLL_ALLGATHER, CL_COLL_REDUCE_SCATTER } cl_coll_kind;

/* count products of [m, k] x [k, n] of which the kernel computes the share (the causal attention's skipped
 * blocks): the FLOPs counted are the model's (the whole products), the time the work done */
void cl_cost_gemm_part(cl_pass_cost *c, double m, double n, double k, double count, int layout, double share);
void cl_cost_gemm(cl_pass_cost *c, double m, double n, double k, double count, int layout);
/* a shape's work (count, of it f32 in F32) added to c without FLOPs (cl_pass_cost_add: the FLOPs are summed apart) */
void cl_cost_gemm_work(cl_pass_cost *c, const cl_gemm_shape *g);
/* bf16 (d's dtype): n elements narrowed F32 -> BF16 by cl_nn_narrow (read 4, write 2 bytes an element; fused 0) or,
 * fused 1, written as BF16 beside the F32 output by a kernel that computes them (2 bytes); none in fp32 */
void cl_cost_narrow(cl_pass_cost *c, const cl_model_desc *d, double n, int fused);
/* a tensor-parallel collective of bytes over tp ranks (none at tp 1) */
void cl_cost_coll(cl_pass_cost *c, cl_coll_kind kind, double bytes, int tp);
/* an all-to-all over the g ranks of the expert-parallel group of a send buffer of bytes (none at g 1) */
void cl_cost_alltoall(cl_pass_cost *c, double bytes, int g);
/* A transformer block's two split pairs (a column-parallel layer, then a row-parallel one: attention's and the
 * MLP's) in one pass: under sequence parallelism an all-gather before each and a reduce-scatter after, else
 * one all-reduce after each; act the bytes of the pass's activation rows. cl_cost_split_pair: one of them. */
void cl_cost_block_pairs(cl_pass_cost *c, double act, int tp, int sp);
void cl_cost_split_pair(cl_pass_cost *c, double act, int tp, int sp);
/* A transformer block's attention bytes besides its products (GPT's and Llama's blocks): causal, cleave's
 * blockwise kernels (flash.c), the lse (lse = B H T floats) in the forward, the lse and D = rowsum(dy y)'s
 * reads of y and dy (R rows of Cl) in the backward; else the T x T scores kept (Megatron-LM's fused softmax),
 * read and written by the softmax (forward 2, backward 3). e bytes an element. */
/* Those figures for description d at micro-batch B (its local heads and columns, T query rows), with the keys
 * each query row meets (K: cl_nn_key_tokens) and the kernels' causal share of the products (att; 1 when not
 * causal), which cl_cost_attention_products and cl_cost_attention_rf take. */
typedef struct {
    double K, att, fwd, bwd;
} cl_cost_att;
cl_cost_att cl_cost_attention_of(const cl_model_desc *d, int B, double e, int causal);
/* A transformer block's attention products over count = B H heads, T query rows against K keys (K = T, or
 * under context parallelism all T cp of the sequence's: cl_nn_key_tokens), head size hd, the kernels
 * computing the causal share att: the forward's two (q k^T, p v) into f, the backward's four (dq, dk, dp,
 * dv) into b (either NULL: not added). */
void cl_cost_attention_products(cl_pass_cost *f, cl_pass_cost *b, double T, double K, double hd, double count, double att);
/* Its re-forward pass rf (f: the block's forward): full recompute, the whole forward; selective, the
 * attention's forward products (T x K x hd, the causal share att), bytes attf (cl_cost_attention_of's
 * forward); causal (blockwise), in every mode the backward's recomputed scores q k^T (hardware work, not
 * the model's FLOPs). */
void cl_cost_attention_rf(cl_pass_cost *rf, const cl_pass_cost *f, int recompute, int causal, double T, double K, double hd,
                          double count, double att, double attf);
/* The cost of a unit a kind's table gives (cl_kind's cost): unit un of description d at micro-batch B, e
 * bytes an activation element, a recompute mode, causal: the attention kernels skip the blocks past the
 * diagonal. o is zeroed by the caller. */
typedef void cl_cost_fn(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal, cl_unit_cost *o);
/* an elementwise unit's (ReLU, max-pool, flatten): forward reads its input and writes its output; backward
 * reads the output gradient and the output, writes the input gradient */
cl_cost_fn cl_kind_elementwise_cost;

#endif
