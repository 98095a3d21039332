/* The kernel table a device backend fills (internal to cleave).
 *
 * A cl_device is a backend: its ops (include/cleave/device.h) allocate,
 * fill, copy and convert its memory, and its kernel table, below, runs the
 * computations the units, data parallelism and the optimizer ask of it.
 * Code outside a backend reaches device memory only through these two
 * tables (cl_device_fill / cl_device_copy / ..., cl_device_kernels(dev)->f),
 * never with memset, memcpy or a kernel function of its own, so a GPU
 * backend can replace the CPU one without touching the units.
 *
 * The CPU backend (src/kernels/cpu.c) fills every entry with the functions
 * of src/cleave/kernels.h, whose comments state each kernel's contract
 * (outputs first, backward kernels add into their outputs, size letters).
 * Every tensor an entry takes is F32 but the GEMM's operands, which name
 * their format; `gemm_formats` says which formats this backend's GEMM takes
 * (the CPU: F32 and BF16 for A and B, C in F32). Invariant: every entry of a backend's table is
 * non-NULL (tests/test_device.c checks the CPU's). */
#ifndef CLEAVE_BACKEND_H
#define CLEAVE_BACKEND_H

#include "cleave/device.h"
#include "cleave/tensor.h"

#include <stdint.h>

/* Host-side shape arithmetic, the same for every backend (src/kernels/). */
typedef struct { int B, IC, H, W, OC, KH, KW, stride, pad, OH, OW; } cl_conv2d_shape;
/* Fills OH/OW; returns 0 on success, -1 if the shape is impossible. */
int cl_conv2d_shape_init(cl_conv2d_shape *s, int B, int IC, int H, int W,
                         int OC, int KH, int KW, int stride, int pad);
int64_t cl_conv2d_col_floats(const cl_conv2d_shape *s);
/* The share of the T x T score products the attention kernels compute (the planner's price). */
double cl_attention_share(int T);
/* Floats of scratch the blockwise attention's backward takes (flash.c): B NH 2 min(64, T) min(128, T)
 * (two tiles a task; for chunks, T the longer of the query and key chunks). */
int64_t cl_flash_scratch_floats(int B, int T, int C, int NH);
/* The sum of squares is cut into blocks of this many floats (see sumsq_block). */
#define CL_SUMSQ_BLOCK 16384

struct cl_kernels {
    const char *name;
    unsigned gemm_formats; /* bit (1u << cl_dtype) per format gemm's operands may have */
    /* C[M,N] = alpha op(A) op(B) + beta C, row-major, each operand in its format (cl_gemm) */
    void (*gemm)(int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda,
                 const void *B, cl_dtype fb, int ldb, float beta, void *C, cl_dtype fc, int ldc);
    /* gemm for row counts (M, K) that change from call to call, as an expert's tokens do: the device may keep one
     * compiled product for every count where gemm would keep one per shape */
    void (*gemm_rows)(int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda,
                      const void *B, cl_dtype fb, int ldb, float beta, void *C, cl_dtype fc, int ldc);
    void (*linear_forward)(float *out, const float *in, const float *w, const float *b, int N, int IC, int OC);
    void (*linear_backward_input)(float *din, const float *dout, const float *w, int N, int IC, int OC);
    void (*linear_backward_weight)(float *dw, float *db, const float *dout, const float *in, int N, int IC, int OC, float beta);
    void (*add_bias)(float *x, const float *bias, int64_t rows, int64_t C);
    void (*embedding_forward)(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T, int C);
    void (*embedding_backward_weight)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T,
                                      int C);
    void (*embedding_lookup)(float *out, const int32_t *tokens, const float *wte, int64_t N, int64_t C, int64_t v0,
                             int64_t Vl);
    void (*embedding_add_positions)(float *out, const float *wpe, int64_t Ns, int64_t row0, int64_t T, int64_t C);
    void (*embedding_backward_slice)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int64_t N,
                                     int64_t T, int64_t C, int64_t v0, int64_t Vl);
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *in, const float *w, const float *b,
                              int N, int C);
    void (*residual_layernorm_forward)(float *res, float *out, float *mean, float *rstd, const float *a, const float *r,
                                       const float *w, const float *b, int N, int C);
    void (*layernorm_backward_input)(float *din, const float *dout, const float *in, const float *w, const float *mean,
                                     const float *rstd, int N, int C);
    void (*layernorm_backward_weight)(float *dw, float *db, const float *dout, const float *in, const float *mean,
                                      const float *rstd, int N, int C);
    void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att, int B,
                               int T, int C, int NH);
    void (*gelu_forward)(float *out, const float *in, int64_t n);
    void (*gelu_backward)(float *din, const float *dout, const float *in, int64_t n);
    void (*gelu_backward_set)(float *din, const float *dout, const float *in, int64_t n);
    void (*bias_gelu_forward)(float *out, float *pre, const float *bias, int N, int C);
    void (*relu_forward)(float *out, const float *in, int64_t n);
    void (*relu_backward)(float *din, const float *dout, const float *out, int64_t n);
    void (*residual_forward)(float *out, const float *a, const float *b, int64_t n);
    void (*add_inplace)(float *dst, const float *src, int64_t n);
    void (*xent_forward)(float *losses, float *lse, const float *logits, const int32_t *targets, int N, int V);
    void (*xent_backward)(float *dlogits, const float *logits, const float *lse, const int32_t *targets, float dloss,
                          int N, int V);
    void (*xent_vp_max)(float *mx, const float *logits, int N, int Vl, int valid);
    void (*xent_vp_sum)(double *sum, double *tlogit, const float *logits, const float *mx, const int32_t *targets,
                        int v0, int N, int Vl, int valid);
    void (*xent_vp_backward)(float *dlogits, const float *logits, const float *lse, const int32_t *targets, int v0,
                             float dloss, int N, int Vl, int valid);
    void (*conv2d_forward)(float *out, float *col, const float *in, const float *w, const float *b,
                           const cl_conv2d_shape *s);
    void (*conv2d_backward_input)(float *din, float *col, const float *dout, const float *w, const cl_conv2d_shape *s);
    void (*conv2d_backward_weight)(float *dw, float *db, float *col, const float *dout, const float *in,
                                   const cl_conv2d_shape *s);
    void (*maxpool_forward)(float *out, int32_t *idx, const float *in, int B, int C, int H, int W, int K, int S);
    void (*maxpool_backward)(float *din, const float *dout, const int32_t *idx, int B, int C, int H, int W, int K,
                             int S);
    void (*adamw_update)(float *p, const float *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                         float eps, float wd, int t, float gscale);
    double (*sum)(const float *x, int64_t n);
    double (*sumsq)(const float *x, int64_t n);
    double (*sumsq_block)(const float *x, int64_t n);
    void (*scale)(float *x, float s, int64_t n);
    /* Llama's kernels (rmsnorm.c, rope.c, swiglu.c; grouped-query attention in attention.c) */
    void (*rmsnorm_forward)(float *out, float *rstd, const float *in, const float *w, float eps, int N, int C);
    void (*residual_rmsnorm_forward)(float *res, float *out, float *rstd, const float *a, const float *r, const float *w,
                                     float eps, int N, int C);
    void (*rmsnorm_backward_input)(float *din, const float *dout, const float *in, const float *w, const float *rstd,
                                   int N, int C);
    void (*rmsnorm_backward_weight)(float *dw, const float *dout, const float *in, const float *rstd, int N, int C);
    void (*rope_forward)(float *out, const float *in, const float *cos_t, const float *sin_t, int N, int T, int pos0,
                         int heads, int hd, int64_t ld);
    void (*rope_backward)(float *din, const float *dout, const float *cos_t, const float *sin_t, int N, int T, int pos0,
                          int heads, int hd, int64_t ld);
    void (*rope_backward_set)(float *din, const float *dout, const float *cos_t, const float *sin_t, int N, int T,
                              int pos0, int heads, int hd, int64_t ld);
    void (*swiglu_forward)(float *out, const float *gate, const float *up, int64_t n);
    void (*swiglu_backward)(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int64_t n);
    void (*attention_gqa_forward)(float *out, float *att, const float *qkv, int B, int T, int NH, int KV, int hd);
    void (*attention_gqa_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                                   int B, int T, int NH, int KV, int hd);
    /* blockwise attention, no T x T buffer (cl_flash_forward / cl_flash_backward); NKV kv heads
     * (grouped-query: rows [q (C) | k | v (NKV C / NH each)]; NKV = NH: GPT's [q | k | v] of 3C) */
    void (*flash_forward)(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV);
    void (*flash_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                           const float *lse, int B, int T, int C, int NH, int NKV);
    /* mixture of experts (moe.c; kernels.h states each contract) */
    void (*moe_router_forward)(float *probs, int32_t *idx, float *wts, const float *logits, int T, int E, int K);
    float (*moe_aux_loss)(float *frac, float *pmean, const float *probs, const int32_t *idx, int T, int E, int K);
    void (*moe_router_backward)(float *dlogits, const float *dwts, const float *probs, const int32_t *idx,
                                const float *wts, const float *frac, float daux, int T, int E, int K);
    int64_t (*moe_dispatch)(int32_t *perm, int32_t *row, int32_t *counts, const int32_t *idx, int T, int E, int K,
                            int capacity);
    void (*moe_gather)(float *xe, const float *x, const int32_t *perm, int64_t rows, int C, int K);
    void (*moe_gather_backward)(float *dx, const float *dxe, const int32_t *row, int T, int C, int K);
    void (*moe_combine_forward)(float *y, const float *ye, const float *wts, const int32_t *row, int T, int C, int K);
    void (*moe_combine_backward)(float *dye, float *dwts, const float *dy, const float *ye, const float *wts,
                                 const int32_t *row, int T, int C, int K);
    /* bf16 mixed precision: F32 math, a BF16 output (kernels.h; each BF16 value the F32 kernel's, rounded once) */
    void (*layernorm_forward_bf16)(uint16_t *out_bf, float *out, float *mean, float *rstd, const float *in,
                                   const float *w, const float *b, int N, int C);
    void (*residual_layernorm_forward_bf16)(float *res, uint16_t *out_bf, float *out, float *mean, float *rstd,
                                            const float *a, const float *r, const float *w, const float *b, int N,
                                            int C);
    void (*gelu_forward_bf16)(uint16_t *out, const float *in, int64_t n);
    void (*bias_gelu_forward_bf16)(uint16_t *out, float *pre, const float *bias, int N, int C);
    void (*rmsnorm_forward_bf16)(uint16_t *out, float *rstd, const float *in, const float *w, float eps, int N, int C);
    void (*residual_rmsnorm_forward_bf16)(float *res, uint16_t *out, float *rstd, const float *a, const float *r,
                                          const float *w, float eps, int N, int C);
    void (*swiglu_forward_bf16)(uint16_t *out, const float *gate, const float *up, int64_t n);
    void (*layernorm_backward_input_bf16)(float *din, uint16_t *dbf, const float *dout, const float *in, const float *w,
                                          const float *mean, const float *rstd, int N, int C);
    void (*gelu_backward_set_bf16)(float *din, uint16_t *dbf, const float *dout, const float *in, int64_t n);
    void (*transpose_bf16)(uint16_t *dst, const uint16_t *src, int64_t rows, int64_t cols, int64_t lds, int64_t ldd);
    void (*moe_gather_bf16)(uint16_t *xe, const uint16_t *x, const int32_t *perm, int64_t rows, int C, int K);
    void (*adamw_update_bf16)(float *p, uint16_t *pbf, const float *g, float *m, float *v, int64_t n, float lr,
                              float b1, float b2, float eps, float wd, int t, float gscale);
    /* generation's attention over a KV cache (decode.c; kernels.h states the contract) */
    void (*kv_append)(float *kc, float *vc, const float *qkv, int64_t ld, int koff, int voff, int B, int n, int pos0,
                      int KV, int hd, int Tmax);
    void (*attention_decode)(float *out, const float *q, int64_t ldq, const float *kc, const float *vc, int B, int n,
                             int pos0, int NH, int KV, int hd, int Tmax);
};

/* Rotary embeddings' tables, host arithmetic the same for every backend
 * (src/kernels/rope.c): cos_t and sin_t [P, hd/2], positions [0, P), as
 * Hugging Face's LlamaRotaryEmbedding computes them in F32 (rope_theta;
 * rope_scaling of type "llama3" with its four fields, or none: sc NULL or
 * CL_ROPE_DEFAULT). A backend copies them to its memory once. CL_ERR_INVALID
 * for an odd hd, theta <= 1 or a bad scaling field, named. */
typedef enum { CL_ROPE_DEFAULT = 0, CL_ROPE_LLAMA3 = 1 } cl_rope_type;
typedef struct {
    cl_rope_type type;
    double factor, low_freq_factor, high_freq_factor;
    int original_max_position_embeddings;
} cl_rope_scaling;
cl_status cl_rope_table(float *cos_t, float *sin_t, int P, int hd, double theta, const cl_rope_scaling *sc);
/* The frequencies alone, inv_freq[hd/2] (the tables' angles are inv_freq[i] * p in f32). */
cl_status cl_rope_freqs(float *inv_freq, int hd, double theta, const cl_rope_scaling *sc);

/* The CPU backend's table (src/kernels/cpu.c). */
extern const cl_kernels cl_cpu_kernels;

/* An F32 GEMM through a table: cl_gemm's arguments, every operand F32. */
static inline void cl_sgemm(const cl_kernels *k, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                            const float *B, int ldb, float beta, float *C, int ldc) {
    k->gemm(ta, tb, M, N, K, alpha, A, CL_F32, lda, B, CL_F32, ldb, beta, C, CL_F32, ldc);
}

/* The experts of a MoE layer (src/kernels/moe.c) over the dispatch order:
 * expert e (of E) takes the counts[e] rows after the rows of the experts
 * before it. Weights as HF's MixtralBlockSparseTop2MLP, stacked per expert:
 * w1, w3 [E, F, C] (gate, up), w2 [E, C, F] (down). Forward: gate, up, h
 * [rows, F] kept for the backward (h = silu(gate) * up), ye [rows, C]
 * assigned. Backward: dxe, dw1, dw3, dw2 += the gradients; dgate and dup
 * [rows, F] are added into (the caller zeroes them), dh [rows, F] is scratch. */
void cl_moe_experts_forward(const cl_kernels *k, float *ye, float *gate, float *up, float *h, const float *xe,
                            const int32_t *counts, const float *w1, const float *w3, const float *w2, int E, int C,
                            int F);
void cl_moe_experts_backward(const cl_kernels *k, float *dxe, float *dw1, float *dw3, float *dw2, float *dgate,
                             float *dup, float *dh, const float *dye, const float *xe, const float *gate,
                             const float *up, const float *h, const int32_t *counts, const float *w1, const float *w3,
                             const float *w2, int E, int C, int F);

#endif
