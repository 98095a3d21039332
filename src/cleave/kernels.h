/* cleave CPU kernels.
 *
 * Plain functions in llm.c's style: outputs first, then inputs, then sizes.
 * Size letters, used everywhere:
 *   B batch (samples in a micro-batch), T sequence, C channels, NH heads,
 *   V vocabulary, N rows (= B*T for token-wise ops), IC/OC in/out features.
 * All tensors are contiguous row-major f32 unless said.
 *
 * Backward contract: every backward kernel ADDS into its outputs (input
 * gradients and weight gradients alike). Callers zero a gradient buffer once;
 * residual fan-in and accumulation over micro-batches then cost nothing.
 * Forward and backward-input and backward-weight are separate entry points,
 * so that a zero-bubble pipeline can run the weight pass later.
 *
 * Linear weights are stored [IC, OC] (Hugging Face GPT-2's Conv1D layout):
 *   out[N,OC] = in[N,IC] @ w[IC,OC] + b[OC].
 * Conv weights are [OC, IC, KH, KW] (PyTorch layout). */
#ifndef CLEAVE_KERNELS_H
#define CLEAVE_KERNELS_H

#include "cleave/backend.h" /* the table these fill (cpu.c), the conv shape, CL_SUMSQ_BLOCK */

#include <stdint.h>

/* ---- GEMM ---------------------------------------------------------------
 * C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C, row-major, with
 * op(X) = X or X^T (ta/tb nonzero), leading dimensions as in BLAS row-major:
 * lda is the row stride of A as stored (K if !ta, M if ta), etc.
 * cl_gemm goes to the fastest library the build found (oneDNN), or to
 * cl_gemm_ref. cl_gemm_ref is a plain triple loop with f32 accumulation in
 * k order; tests compare the two. M, N or K may be 0. */
void cl_gemm(int ta, int tb, int M, int N, int K, float alpha,
             const float *A, int lda, const float *B, int ldb,
             float beta, float *C, int ldc);
void cl_gemm_ref(int ta, int tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc);
const char *cl_gemm_backend(void); /* "onednn" or "reference" */
/* What decides the GEMM's result bits: "onednn MAJOR.MINOR.PATCH ISA" (the
 * ISA oneDNN dispatches to here, e.g. avx2 or avx512_core_bf16, which
 * ONEDNN_MAX_CPU_ISA can lower), or "reference". */
const char *cl_gemm_build(void);
/* Forces cl_gemm onto cl_gemm_ref (tests); returns the previous setting. */
int cl_gemm_force_reference(int on);
/* The same product with A and B each F32 or BF16 and C F32, accumulating in
 * F32 (src/kernels/gemm_bf16.c). Both F32: cl_gemm, bit for bit. Both BF16:
 * oneDNN's matmul primitive (created once per shape, transposes, leading
 * dimensions, formats, alpha and beta, kept in a bounded thread-safe cache)
 * where the CPU runs it (AVX-512 core and up), else the operands widened to
 * F32 in a scratch and cl_gemm (exact widening, slower). */
void cl_gemm_ex(int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda, const void *B,
                cl_dtype fb, int ldb, float beta, float *C, int ldc);
/* cl_gemm_ex for products whose M and K are row counts that change from call
 * to call (an expert's tokens): BF16 operands through one primitive for every
 * M and K (oneDNN's run-time dimensions) where cl_gemm_ex would make one per
 * count; F32 operands exactly cl_gemm. */
void cl_gemm_ex_rows(int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda, const void *B,
                     cl_dtype fb, int ldb, float beta, float *C, int ldc);
/* cl_gemm_ex's product through the matmul primitive only (F32 or BF16 A, B):
 * 0 when it ran, -1 when it cannot here (no oneDNN, K <= 0, only oneDNN's
 * reference loops; C untouched). Benchmarks compare it with cl_gemm. */
int cl_gemm_matmul(int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda, const void *B,
                   cl_dtype fb, int ldb, float beta, float *C, int ldc);
/* Where cl_gemm_ex sends BF16 operands: "onednn matmul" or "widened to f32". */
const char *cl_gemm_bf16_path(void);
/* A one-line note for a bf16 run where this CPU has no bf16 instructions (the products widened or emulated, a step
 * slower than F32); NULL where it has them. */
const char *cl_gemm_bf16_note(void);
/* Forces cl_gemm_ex's BF16 products onto the widening path (tests); returns the previous setting. */
int cl_gemm_force_widen(int on);
/* Whether cl_gemm_ex packs a row-major BF16 B into the primitive's layout
 * before a large enough product (on by default; CLEAVE_BF16_PACK=0 at start
 * turns it off): the same bits either way, only the speed differs. Returns
 * the previous setting (tests and benchmarks compare the two). */
int cl_gemm_pack_b(int on);
/* Whether cl_gemm_ex runs a BF16 product whose B ([K, N], tb 0) is past 8 MiB and whose K is 8192 or more in
 * 4096-row pieces of K, each adding into C (on by default; CLEAVE_BF16_KSPLIT=0 at start turns it off): F32
 * accumulation either way, in another order, so other last bits. Returns the previous setting (tests and
 * benchmarks compare the two). */
int cl_gemm_ksplit(int on);
/* Products that have run with B packed so far (tests: that the route ran). */
long cl_gemm_packed_count(void);
/* Primitives the cache holds now (at most 128). */
int cl_gemm_cache_count(void);
/* Threads the calling thread's GEMMs and kernels may use (its OpenMP team). The
 * setting belongs to the calling thread, so each rank thread sets its own.
 * The count changes how a product is blocked and so its last bits: ranks
 * that must agree bitwise (threads vs MPI) run with the same count. */
void cl_set_threads(int n);
int cl_threads(void);
/* Vector paths (AVX2 + FMA, AVX-512, AVX512_BF16, picked at run time;
 * kernels/simd.h): "avx512_bf16", "avx512", "avx2" or "plain". Forcing the
 * plain loops, or capping the path at a level (0 plain, 1 AVX2, 2 AVX-512,
 * 3 AVX512_BF16: tests and benches compare the paths), returns the previous
 * setting. */
const char *cl_kernels_isa(void);
int cl_kernels_force_plain(int on);
int cl_kernels_max_isa(int level);

/* ---- F32 <-> BF16 over arrays (convert.c): cl_bf16_pack rounds n floats
 * into BF16, cl_bf16_unpack widens n BF16 values; the bits of the scalar
 * cl_bf16_from_f32 / cl_bf16_to_f32 on every path (tensor.h) ---- */
void cl_bf16_pack(uint16_t *dst, const float *src, int64_t n);
void cl_bf16_unpack(float *dst, const uint16_t *src, int64_t n);
/* dst[c * ldd + r] = src[r * lds + c] for a rows x cols matrix of 16-bit
 * values (BF16 or any: a copy, no arithmetic), in tiles over the team
 * (convert.c): the weight-gradient products' transposed operand. */
void cl_bf16_transpose(uint16_t *dst, const uint16_t *src, int64_t rows, int64_t cols, int64_t lds, int64_t ldd);
/* Cores this process may run on (its CPU affinity mask), at least 1. */
int cl_cores_available(void);

/* ---- linear: out[N,OC] = in[N,IC] @ w[IC,OC] + b[OC] (b may be NULL) ---- */
void cl_linear_forward(float *out, const float *in, const float *w, const float *b,
                       int N, int IC, int OC);
/* din[N,IC] += dout[N,OC] @ w^T */
void cl_linear_backward_input(float *din, const float *dout, const float *w,
                              int N, int IC, int OC);
/* dw[IC,OC] = in^T @ dout + beta dw (beta 0: dw not read; 1: added into);
 * db[OC] += sum over rows of dout (db may be NULL) */
void cl_linear_backward_weight(float *dw, float *db, const float *dout, const float *in,
                               int N, int IC, int OC, float beta);

/* ---- token + position embedding ----------------------------------------
 * out[B,T,C] = wte[tokens[b,t]] + wpe[t]. tokens in [0,V). */
void cl_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                          const float *wpe, int B, int T, int C);
/* dwte[V,C] += scatter of dout by token; dwpe[T,C] += sum over b of dout */
void cl_embedding_backward_weight(float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, int B, int T, int C);
/* The same for a vocabulary slice: wte holds rows [v0, v0 + Vl) of the
 * vocabulary (the embedding unit's tensor-parallel slice; one rank: all).
 * out[N,C]: the slice's row of each token, zero for a token outside it. */
void cl_embedding_lookup(float *out, const int32_t *tokens, const float *wte, int64_t N, int64_t C, int64_t v0,
                         int64_t Vl);
/* out[i] += wpe[(row0 + i) % T] for Ns token rows (T positions a sample). */
void cl_embedding_add_positions(float *out, const float *wpe, int64_t Ns, int64_t row0, int64_t T, int64_t C);
/* Row by row i < N: dwte[the slice's row of token i] (when it holds it) and
 * dwpe[i % T] += dout[i]; dwpe NULL: no positions (Llama's embedding). */
void cl_embedding_backward_slice(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int64_t N,
                                 int64_t T, int64_t C, int64_t v0, int64_t Vl);

/* ---- layernorm over the last dim C, eps = 1e-5 ---------------------------
 * out[N,C]; saves mean[N] and rstd[N] for backward. */
void cl_layernorm_forward(float *out, float *mean, float *rstd, const float *in,
                          const float *w, const float *b, int N, int C);
/* Fused residual + layernorm: res = a + r (res may be a: in place), then
 * out = layernorm(res), one pass over each row: the block's second residual
 * and ln_2. Same bits as cl_add_inplace then cl_layernorm_forward. */
void cl_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a,
                                   const float *r, const float *w, const float *b, int N, int C);
/* bf16 mixed precision: the forward above writing out_bf (BF16, each value
 * cl_bf16_from_f32 of the F32 kernel's) and, when out is not NULL, out (F32)
 * too; mean, rstd and res F32 as above. */
void cl_layernorm_forward_bf16(uint16_t *out_bf, float *out, float *mean, float *rstd, const float *in,
                               const float *w, const float *b, int N, int C);
void cl_residual_layernorm_forward_bf16(float *res, uint16_t *out_bf, float *out, float *mean, float *rstd,
                                        const float *a, const float *r, const float *w, const float *b, int N,
                                        int C);
void cl_layernorm_backward_input(float *din, const float *dout, const float *in,
                                 const float *w, const float *mean, const float *rstd,
                                 int N, int C);
/* bf16 mixed precision: the same (din += ..., the same bits) and dbf (BF16) =
 * cl_bf16_from_f32 of each value of the resulting din. */
void cl_layernorm_backward_input_bf16(float *din, uint16_t *dbf, const float *dout, const float *in, const float *w,
                                      const float *mean, const float *rstd, int N, int C);
void cl_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *in,
                                  const float *mean, const float *rstd, int N, int C);

/* ---- causal multi-head self-attention core -------------------------------
 * qkv[B,T,3C] holds q, k, v side by side (as GPT-2's c_attn produces them);
 * head h uses channels [h*hs, (h+1)*hs) of each, hs = C/NH.
 * att[B,NH,T,T] saves softmax(q k^T / sqrt(hs)) with the causal mask
 * (entries above the diagonal are 0). out[B,T,C] = att @ v, heads side by side. */
void cl_attention_forward(float *out, float *att, const float *qkv,
                          int B, int T, int C, int NH);
/* cl_attention_share (backend.h): the share of the T x T score products
 * the kernels compute: row blocks skip the columns past their last row (3/4
 * at T = 128, 0.52 at 2048); forward and backward alike. The planner prices
 * the products with it. */
/* dqkv[B,T,3C] += gradient. scratch: B*NH*T*T floats, overwritten. */
void cl_attention_backward(float *dqkv, float *scratch, const float *dout,
                           const float *qkv, const float *att,
                           int B, int T, int C, int NH);

/* ---- the same attention, blockwise with an online softmax (flash.c) -------
 * No T x T buffer: lse[B,NH,T] saves each score row's log-sum-exp (natural
 * log, of the scaled, masked scores), out[B,T,C] as cl_attention_forward's.
 * The backward recomputes the scores from qkv and lse; scratch holds
 * cl_flash_scratch_floats(B, T, C, NH) floats, overwritten (B NKV of the
 * B NH tile pairs: (B, T, C, NKV) suffice). dqkv += gradient. NKV kv heads
 * as the chunk entries below. */
void cl_flash_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV);
void cl_flash_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                       const float *lse, int B, int T, int C, int NH, int NKV);
/* The same for a query chunk against a key/value chunk (context
 * parallelism) and NKV kv heads dividing NH (grouped-query attention):
 * rows of qkv_q[B,Tq,W] and qkv_kv[B,Tk,W] are [q (C) | k (Ckv) | v (Ckv)],
 * W = C + 2 Ckv, Ckv = NKV C / NH; head h takes its queries from qkv_q and
 * the keys and values of kv head h / (NH / NKV) from qkv_kv, query t seeing
 * key j iff j <= t + qoff; out[B,Tq,C], lse[B,NH,Tq]. accumulate: 0
 * overwrites out and lse; 1 combines the chunk with the keys already in
 * (out, lse) (lse -INFINITY: none yet; a row that sees no key keeps its
 * state, or gets out 0, lse -INFINITY), so chunks in any order give the
 * whole row's softmax. The backward, with the final out and lse, adds the
 * chunk pair's share into dqkv_q (the q columns) and dqkv_kv (the k and v
 * columns); they may be the same buffer. scratch as above with T the
 * longer of Tq and Tk (it uses B NKV of the B NH tile pairs).
 * cl_flash_forward is (qkv, qkv, T, T, qoff 0, its NKV, accumulate 0): NKV =
 * NH is the multi-head attention of qkv[B,T,3C]. */
void cl_flash_forward_chunk(float *out, float *lse, const float *qkv_q, const float *qkv_kv, int B, int Tq, int Tk,
                            int qoff, int C, int NH, int NKV, int accumulate);
void cl_flash_backward_chunk(float *dqkv_q, float *dqkv_kv, float *scratch, const float *dout, const float *qkv_q,
                             const float *qkv_kv, const float *out, const float *lse, int B, int Tq, int Tk, int qoff,
                             int C, int NH, int NKV);

/* ---- GELU, GPT-2's tanh approximation ------------------------------------
 * out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void cl_gelu_forward(float *out, const float *in, int64_t n);
void cl_gelu_backward(float *din, const float *dout, const float *in, int64_t n);
/* din = GELU'(in) * dout, assigned (din may be dout: in place). */
void cl_gelu_backward_set(float *din, const float *dout, const float *in, int64_t n);
/* Fused bias + GELU after a bias-less product: pre[N,C] += bias[C] (pre is
 * kept for the backward), out = GELU(pre). One pass over the rows. */
void cl_bias_gelu_forward(float *out, float *pre, const float *bias, int N, int C);
/* bf16 mixed precision: the two forwards writing out as BF16, each value
 * cl_bf16_from_f32 of the F32 kernel's (pre F32 as above). */
void cl_gelu_forward_bf16(uint16_t *out, const float *in, int64_t n);
void cl_bias_gelu_forward_bf16(uint16_t *out, float *pre, const float *bias, int N, int C);
/* cl_gelu_backward_set (din the same bits) and dbf (BF16) = cl_bf16_from_f32
 * of each din value, written in the same pass over each block. */
void cl_gelu_backward_set_bf16(float *din, uint16_t *dbf, const float *dout, const float *in, int64_t n);

/* ---- ReLU ---------------------------------------------------------------- */
void cl_relu_forward(float *out, const float *in, int64_t n);
/* din += dout where out > 0 (out is the forward output) */
void cl_relu_backward(float *din, const float *dout, const float *out, int64_t n);

/* ---- residual: out = a + b; backward adds dout to da and db ------------- */
void cl_residual_forward(float *out, const float *a, const float *b, int64_t n);
void cl_add_inplace(float *dst, const float *src, int64_t n); /* dst += src */
/* x[rows,C] += bias[C], row by row (a row-parallel layer's bias after its sum); bias NULL: nothing */
void cl_add_bias(float *x, const float *bias, int64_t rows, int64_t C);

/* ---- fused softmax + cross-entropy ---------------------------------------
 * logits[N,V]; targets[N] in [0,V), or -1 to ignore the row.
 * losses[N] = logsumexp(logits row) - logits[target] (0 for ignored rows);
 * lse[N] saves the logsumexp for backward. Computed in double per row. */
void cl_xent_forward(float *losses, float *lse, const float *logits,
                     const int32_t *targets, int N, int V);
/* dlogits[N,V] += dloss * (softmax(row) - onehot(target)); rows with target -1
 * get nothing. dlogits may alias logits (in place, llm.c style): then the
 * forward logits are overwritten and dlogits is assigned, not added. */
void cl_xent_backward(float *dlogits, const float *logits, const float *lse,
                      const int32_t *targets, float dloss, int N, int V);

/* Vocabulary-parallel pieces of the same loss, for a rank that holds a
 * slice logits[N,Vl] (row stride Vl) whose column j is vocabulary entry
 * v0 + j; only the first `valid` columns (0 <= valid <= Vl) are real, the
 * rest padding that is never read. targets are global ids (-1: ignored).
 * The caller combines the slices:
 *   cl_xent_vp_max; all-reduce mx with MAX over the group;
 *   cl_xent_vp_sum; all-reduce sum and tlogit (double) with SUM;
 *   lse = mx + log(sum), loss = lse - tlogit (0 for ignored rows), in
 *   double, each rounded once to float;
 *   cl_xent_vp_backward with that lse.
 * With one slice and no padding (v0 0, valid == Vl == V) this gives
 * cl_xent_forward's and cl_xent_backward's bits: the rows run the same
 * code. */
/* mx[N]: max over the valid columns of each row (-INFINITY when valid is 0). */
void cl_xent_vp_max(float *mx, const float *logits, int N, int Vl, int valid);
/* sum[N] = sum over the valid columns of exp(x - mx[row]) in double (mx the
 * group's max); tlogit[N] = the target's logit when this slice holds it
 * (v0 <= target < v0 + valid), else 0. */
void cl_xent_vp_sum(double *sum, double *tlogit, const float *logits, const float *mx, const int32_t *targets,
                    int v0, int N, int Vl, int valid);
/* Like cl_xent_backward on the slice: dlogits[N,Vl] += dloss * (exp(x -
 * lse) - onehot) on the valid columns, the one-hot only in the slice that
 * holds the target; padding columns and ignored rows get nothing. In place
 * (dlogits == logits) the gradient is assigned and padding columns and
 * ignored rows become 0. */
void cl_xent_vp_backward(float *dlogits, const float *logits, const float *lse, const int32_t *targets, int v0,
                         float dloss, int N, int Vl, int valid);

/* ---- conv2d, NCHW --------------------------------------------------------
 * in[B,IC,H,W], w[OC,IC,KH,KW], b[OC] (may be NULL), out[B,OC,OH,OW] with
 * OH = (H + 2*pad - KH)/stride + 1, OW likewise. Zero padding.
 * col: workspace of cl_conv2d_col_floats() floats (im2col of one sample). */
/* cl_conv2d_shape, cl_conv2d_shape_init and cl_conv2d_col_floats: backend.h. */
void cl_conv2d_forward(float *out, float *col, const float *in, const float *w,
                       const float *b, const cl_conv2d_shape *s);
void cl_conv2d_backward_input(float *din, float *col, const float *dout, const float *w,
                              const cl_conv2d_shape *s);
void cl_conv2d_backward_weight(float *dw, float *db, float *col, const float *dout,
                               const float *in, const cl_conv2d_shape *s);

/* ---- max-pool 2d, NCHW, window K, stride S, no padding -------------------
 * in[B,C,H,W] -> out[B,C,OH,OW], OH = (H-K)/S + 1. idx[B*C*OH*OW] saves the
 * argmax offset within the (b,c) plane (first maximum wins). */
void cl_maxpool_forward(float *out, int32_t *idx, const float *in,
                        int B, int C, int H, int W, int K, int S);
void cl_maxpool_backward(float *din, const float *dout, const int32_t *idx,
                         int B, int C, int H, int W, int K, int S);

/* ---- optimizer -----------------------------------------------------------
 * AdamW (Loshchilov & Hutter) with bias correction, one pass over n floats:
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   mhat = m / (1 - b1^t); vhat = v / (1 - b2^t)
 *   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p)
 * t is the 1-based step count. As PyTorch's torch.optim.AdamW computes it:
 * the decay is applied first, p *= (1 - lr*wd), then the Adam update.
 * g is read as g * gscale (1: as is): clipping by a coefficient, fused. */
void cl_adamw_update(float *p, const float *g, float *m, float *v, int64_t n,
                     float lr, float b1, float b2, float eps, float wd, int t, float gscale);
/* bf16 mixed precision: cl_adamw_update that also writes pbf[i] =
 * cl_bf16_from_f32(new p[i]), fused (each block rounded while in cache). */
void cl_adamw_update_bf16(float *p, uint16_t *pbf, const float *g, float *m, float *v, int64_t n, float lr, float b1,
                          float b2, float eps, float wd, int t, float gscale);
/* sum of x in double, in order, one thread (a micro-batch's losses) */
double cl_sum(const float *x, int64_t n);
/* sum of squares in double, for global-norm clipping */
double cl_sumsq(const float *x, int64_t n);
/* cl_sumsq's pieces: it sums blocks of CL_SUMSQ_BLOCK floats from x (the
 * last may be shorter), each with cl_sumsq_block, then adds the blocks'
 * sums in order to 0.0; so a caller holding the blocks' sums of a vector
 * cut elsewhere (ZeRO 2's shards) gets cl_sumsq's bits. n <= CL_SUMSQ_BLOCK. */
/* CL_SUMSQ_BLOCK: backend.h */
double cl_sumsq_block(const float *x, int64_t n);
void cl_scale(float *x, float s, int64_t n);

/* ---- Llama: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention -- */
/* RMSNorm as HF's LlamaRMSNorm in F32 (rmsnorm.c): out[N,C] = w * (x * rstd),
 * rstd = 1 / sqrt(mean(x^2) + eps), saved as rstd[N] for the backward. */
void cl_rmsnorm_forward(float *out, float *rstd, const float *in, const float *w, float eps, int N, int C);
/* Fused residual + RMSNorm: res = a + r (res may be a: in place), then
 * out = RMSNorm(res), one pass over each row. Same bits as cl_add_inplace
 * then cl_rmsnorm_forward. */
void cl_residual_rmsnorm_forward(float *res, float *out, float *rstd, const float *a, const float *r, const float *w,
                                 float eps, int N, int C);
void cl_rmsnorm_backward_input(float *din, const float *dout, const float *in, const float *w, const float *rstd,
                               int N, int C);
/* bf16 mixed precision: the two forwards above writing out as BF16 only,
 * each value cl_bf16_from_f32 of the F32 kernel's; rstd and res F32. */
void cl_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *in, const float *w, float eps, int N, int C);
void cl_residual_rmsnorm_forward_bf16(float *res, uint16_t *out, float *rstd, const float *a, const float *r, const float *w,
                                      float eps, int N, int C);
/* dw[C] += sum over rows of dout * x * rstd */
void cl_rmsnorm_backward_weight(float *dw, const float *dout, const float *in, const float *rstd, int N, int C);

/* Rotary embeddings, HF's rotate-half layout (rope.c): the first heads * hd
 * values of each row of a [N, ld] array (ld the row stride of in and out
 * alike), `heads` heads of hd (even) values; row n at position pos0 + n % T;
 * cos_t, sin_t the tables of cl_rope_table (backend.h) holding at least
 * positions [0, pos0 + T). out may be in (in place). */
void cl_rope_forward(float *out, const float *in, const float *cos_t, const float *sin_t, int N, int T, int pos0,
                     int heads, int hd, int64_t ld);
/* din += R^T dout (the transpose rotation); din must not overlap dout. */
void cl_rope_backward(float *din, const float *dout, const float *cos_t, const float *sin_t, int N, int T, int pos0,
                      int heads, int hd, int64_t ld);
/* din = R^T dout, assigned (din may be dout: in place, the attention's dq and dk). */
void cl_rope_backward_set(float *din, const float *dout, const float *cos_t, const float *sin_t, int N, int T,
                          int pos0, int heads, int hd, int64_t ld);

/* SwiGLU (swiglu.c): out = silu(gate) * up over n values (gate, up: [N, F],
 * two arrays); dgate += dout * up * silu'(gate), dup += dout * silu(gate). */
void cl_swiglu_forward(float *out, const float *gate, const float *up, int64_t n);
void cl_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int64_t n);
/* bf16 mixed precision: the forward writing out as BF16, each value cl_bf16_from_f32 of the F32 kernel's. */
void cl_swiglu_forward_bf16(uint16_t *out, const float *gate, const float *up, int64_t n);

/* Causal attention with grouped-query heads (attention.c): qkv[B,T,L], L =
 * (NH + 2 KV) hd, a row holding NH query heads, KV key heads, KV value heads
 * (KV divides NH; query head h reads key/value head h / (NH / KV); KV = 1
 * is multi-query); att[B,NH,T,T], out[B,T,NH hd], scale 1/sqrt(hd).
 * cl_attention_forward / backward are KV = NH, hd = C / NH: the same code. */
void cl_attention_gqa_forward(float *out, float *att, const float *qkv, int B, int T, int NH, int KV, int hd);
/* dqkv[B,T,L] += gradient. scratch: B*NH*T*T floats, overwritten. */
void cl_attention_gqa_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                               int B, int T, int NH, int KV, int hd);

/* Attention over a KV cache for generation (decode.c): caches kc, vc
 * [B, KV, Tmax, hd]; a step's n new rows per sample at positions
 * pos0 .. pos0 + n - 1 (pos0 + n <= Tmax). cl_kv_append copies the k and v
 * columns of qkv rows [B n, ld] (kv head g's k at koff + g hd, v at
 * voff + g hd) into cache rows pos0 .. pos0 + n - 1. cl_attention_decode:
 * out[B n, NH hd] = softmax(q k^T / sqrt(hd)) v for each new row's query
 * (q rows [B n, ldq], head h at h hd) over cache rows 0 .. its position,
 * query head h on kv head h / (NH / KV): the rows cl_flash_forward would
 * give at those positions. */
void cl_kv_append(float *kc, float *vc, const float *qkv, int64_t ld, int koff, int voff, int B, int n, int pos0, int KV,
                  int hd, int Tmax);
void cl_attention_decode(float *out, const float *q, int64_t ldq, const float *kc, const float *vc, int B, int n, int pos0, int NH,
                         int KV, int hd, int Tmax);

/* Mixture of experts (moe.c), as HF's MixtralSparseMoeBlock: T tokens, E
 * experts (1 <= K <= E <= CL_MOE_MAX_EXPERTS), top-K routing; slot
 * s = t K + i is token t's i-th choice. The router logits [T, E] = x W_g
 * are the caller's GEMM.
 * Router: probs[T,E] = softmax(logits) in F32; idx[T,K] the K largest
 * probabilities in descending order, ties to the lower expert index;
 * wts[T,K] = probs[idx] / their sum (Mixtral's renormalization). */
#define CL_MOE_MAX_EXPERTS 256
void cl_moe_router_forward(float *probs, int32_t *idx, float *wts, const float *logits, int T, int E, int K);
/* The load-balancing loss E * sum_e frac[e] * pmean[e] (Switch): frac[E] the
 * fraction of the T K slots routed to e, pmean[E] the mean of probs[:, e];
 * both written. (HF's load_balancing_loss_func is K times this.) */
float cl_moe_aux_loss(float *frac, float *pmean, const float *probs, const int32_t *idx, int T, int E, int K);
/* dlogits[T,E] += the gradient through the renormalized weights (dwts[T,K])
 * and, with frac (NULL: none), through the aux loss scaled by daux (the
 * loss's gradient times the aux coefficient); f is taken as constant. */
void cl_moe_router_backward(float *dlogits, const float *dwts, const float *probs, const int32_t *idx,
                            const float *wts, const float *frac, float daux, int T, int E, int K);
/* Dispatch: counts[E] slots kept per expert; row[T K] each slot's row in the
 * expert-grouped order (by expert, then token), -1 if dropped; perm[rows]
 * the inverse (row -> slot), rows = sum counts. capacity > 0 keeps the first
 * capacity tokens of each expert in token order; <= 0 is dropless. Returns
 * the number of slots dropped. */
int64_t cl_moe_dispatch(int32_t *perm, int32_t *row, int32_t *counts, const int32_t *idx, int T, int E, int K,
                        int capacity);
/* xe[r] = x[perm[r] / K] (rows of C); backward: dx[t] += dxe[row[t K + i]]
 * over its kept slots, in i order. */
void cl_moe_gather(float *xe, const float *x, const int32_t *perm, int64_t rows, int C, int K);
void cl_moe_gather_backward(float *dx, const float *dxe, const int32_t *row, int T, int C, int K);
/* bf16 mixed precision: cl_moe_gather on rows of C BF16 values (the RMSNorm's BF16 output, the experts' GEMM input). */
void cl_moe_gather_bf16(uint16_t *xe, const uint16_t *x, const int32_t *perm, int64_t rows, int C, int K);
/* y[t] = sum over kept slots i of wts[t,i] * ye[row[t K + i]], in i order
 * (assigned); backward: dye[row[s]] += wts[s] dy[t], dwts[s] += dy[t] . ye[row[s]]. */
void cl_moe_combine_forward(float *y, const float *ye, const float *wts, const int32_t *row, int T, int C, int K);
void cl_moe_combine_backward(float *dye, float *dwts, const float *dy, const float *ye, const float *wts,
                             const int32_t *row, int T, int C, int K);

#endif
