/* The CPU backend: a cl_device whose memory is the host's and whose kernels
 * are src/kernels/'s (see src/cleave/backend.h and include/cleave/device.h).
 *
 * Memory ops are the C library's (memset, memmove, memcpy; aligned_alloc
 * with huge pages for large blocks); the kernel table points at the plain
 * functions of src/cleave/kernels.h, so a call through it runs exactly the
 * code a direct call ran (the same bits). Invariant: every entry of both
 * tables is non-NULL (tests/test_device.c). */
#include "cleave/kernels.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Blocks of 4 MiB and more start on a 2 MiB boundary and ask the kernel for
 * transparent huge pages (where it gives them only on request, as Debian's
 * "madvise" default does): the GEMMs stream weights and activations of many
 * megabytes, and with 4 KiB pages their TLB misses cost measurable time.
 * The page size changes nothing the device counts. */
#define HUGE_BYTES ((size_t)4 << 20)
#define HUGE_ALIGN ((size_t)2 << 20)
static void *cpu_alloc(void *impl, size_t bytes) {
    (void)impl;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (!rounded) rounded = 64;
    void *p;
    if (rounded >= HUGE_BYTES) {
        rounded = (rounded + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
        p = aligned_alloc(HUGE_ALIGN, rounded);
#ifdef MADV_HUGEPAGE
        if (p) madvise(p, rounded, MADV_HUGEPAGE); /* advice: a refusal only costs speed */
#endif
    } else {
        p = aligned_alloc(64, rounded);
    }
    if (p) memset(p, 0, rounded);
    return p;
}
static void cpu_free(void *impl, void *p) { (void)impl; free(p); }
/* Large fills (the step's zeroed gradients: 0.5 GB for GPT-2 124M) in 2 MiB pieces over the calling thread's team:
 * one core's memset leaves the memory's bandwidth half used (25 ms against 14 on two Zen 5 cores). */
#define FILL_PIECE ((size_t)2 << 20)
static void cpu_fill(void *impl, void *dst, int byte, size_t n) {
    (void)impl;
    int64_t pieces = (int64_t)((n + FILL_PIECE - 1) / FILL_PIECE);
#pragma omp parallel for schedule(static) if (pieces >= 8 && cl_threads() > 1)
    for (int64_t i = 0; i < pieces; i++) {
        size_t lo = (size_t)i * FILL_PIECE, len = n - lo < FILL_PIECE ? n - lo : FILL_PIECE;
        memset((char *)dst + lo, byte, len);
    }
}
static void cpu_copy(void *impl, void *dst, const void *src, size_t n) { (void)impl; memmove(dst, src, n); }
static void cpu_copy_host(void *impl, void *dst, const void *src, size_t n) { (void)impl; memcpy(dst, src, n); }

/* Conversions between formats: the one scalar conversion (src/core/format.c:
 * round to nearest even, NaN kept NaN), run on the host's memory, which on
 * the CPU is the device's. */
static int cpu_convert(void *impl, void *dst, cl_dtype dt, const void *src, cl_dtype st, size_t n) {
    (void)impl;
    if (!cl_dtype_convertible(dt, st)) return -1;
    return cl_dtype_convert(dst, dt, src, st, n) == CL_OK ? 0 : -1;
}

/* The GEMM takes F32 or BF16 A and B and an F32 C (gemm_formats names the
 * operand formats; C is F32 on the CPU); the caller checks the formats
 * against the table, so another here is a bug in cleave. All F32 runs
 * cl_gemm itself (the same bits as a direct call); BF16 goes to cl_gemm_ex. */
static void cpu_gemm(int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda, const void *B,
                     cl_dtype fb, int ldb, float beta, void *C, cl_dtype fc, int ldc) {
    CL_ASSERT((fa == CL_F32 || fa == CL_BF16) && (fb == CL_F32 || fb == CL_BF16) && fc == CL_F32);
    if (fa == CL_F32 && fb == CL_F32) cl_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else cl_gemm_ex(ta, tb, M, N, K, alpha, A, fa, lda, B, fb, ldb, beta, C, ldc);
}

static void cpu_gemm_rows(int ta, int tb, int M, int N, int K, float alpha, const void *A, cl_dtype fa, int lda, const void *B,
                          cl_dtype fb, int ldb, float beta, void *C, cl_dtype fc, int ldc) {
    CL_ASSERT((fa == CL_F32 || fa == CL_BF16) && (fb == CL_F32 || fb == CL_BF16) && fc == CL_F32);
    if (fa == CL_F32 && fb == CL_F32) cl_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else cl_gemm_ex_rows(ta, tb, M, N, K, alpha, A, fa, lda, B, fb, ldb, beta, C, ldc);
}

const cl_kernels cl_cpu_kernels = {
    .name = "cpu",
    .gemm_formats = 1u << CL_F32 | 1u << CL_BF16,
    .gemm = cpu_gemm,
    .gemm_rows = cpu_gemm_rows,
    .linear_forward = cl_linear_forward,
    .linear_backward_input = cl_linear_backward_input,
    .linear_backward_weight = cl_linear_backward_weight,
    .add_bias = cl_add_bias,
    .embedding_forward = cl_embedding_forward,
    .embedding_backward_weight = cl_embedding_backward_weight,
    .embedding_lookup = cl_embedding_lookup,
    .embedding_add_positions = cl_embedding_add_positions,
    .embedding_backward_slice = cl_embedding_backward_slice,
    .layernorm_forward = cl_layernorm_forward,
    .residual_layernorm_forward = cl_residual_layernorm_forward,
    .layernorm_backward_input = cl_layernorm_backward_input,
    .layernorm_backward_weight = cl_layernorm_backward_weight,
    .attention_forward = cl_attention_forward,
    .attention_backward = cl_attention_backward,
    .gelu_forward = cl_gelu_forward,
    .gelu_backward = cl_gelu_backward,
    .gelu_backward_set = cl_gelu_backward_set,
    .bias_gelu_forward = cl_bias_gelu_forward,
    .relu_forward = cl_relu_forward,
    .relu_backward = cl_relu_backward,
    .residual_forward = cl_residual_forward,
    .add_inplace = cl_add_inplace,
    .xent_forward = cl_xent_forward,
    .xent_backward = cl_xent_backward,
    .xent_vp_max = cl_xent_vp_max,
    .xent_vp_sum = cl_xent_vp_sum,
    .xent_vp_backward = cl_xent_vp_backward,
    .conv2d_forward = cl_conv2d_forward,
    .conv2d_backward_input = cl_conv2d_backward_input,
    .conv2d_backward_weight = cl_conv2d_backward_weight,
    .maxpool_forward = cl_maxpool_forward,
    .maxpool_backward = cl_maxpool_backward,
    .adamw_update = cl_adamw_update,
    .sum = cl_sum,
    .sumsq = cl_sumsq,
    .sumsq_block = cl_sumsq_block,
    .scale = cl_scale,
    .rmsnorm_forward = cl_rmsnorm_forward,
    .residual_rmsnorm_forward = cl_residual_rmsnorm_forward,
    .rmsnorm_backward_input = cl_rmsnorm_backward_input,
    .rmsnorm_backward_weight = cl_rmsnorm_backward_weight,
    .rope_forward = cl_rope_forward,
    .rope_backward = cl_rope_backward,
    .rope_backward_set = cl_rope_backward_set,
    .swiglu_forward = cl_swiglu_forward,
    .swiglu_backward = cl_swiglu_backward,
    .attention_gqa_forward = cl_attention_gqa_forward,
    .attention_gqa_backward = cl_attention_gqa_backward,
    .flash_forward = cl_flash_forward,
    .flash_backward = cl_flash_backward,
    .moe_router_forward = cl_moe_router_forward,
    .moe_aux_loss = cl_moe_aux_loss,
    .moe_router_backward = cl_moe_router_backward,
    .moe_dispatch = cl_moe_dispatch,
    .moe_gather = cl_moe_gather,
    .moe_gather_backward = cl_moe_gather_backward,
    .moe_combine_forward = cl_moe_combine_forward,
    .moe_combine_backward = cl_moe_combine_backward,
    .layernorm_forward_bf16 = cl_layernorm_forward_bf16,
    .residual_layernorm_forward_bf16 = cl_residual_layernorm_forward_bf16,
    .gelu_forward_bf16 = cl_gelu_forward_bf16,
    .bias_gelu_forward_bf16 = cl_bias_gelu_forward_bf16,
    .rmsnorm_forward_bf16 = cl_rmsnorm_forward_bf16,
    .residual_rmsnorm_forward_bf16 = cl_residual_rmsnorm_forward_bf16,
    .swiglu_forward_bf16 = cl_swiglu_forward_bf16,
    .layernorm_backward_input_bf16 = cl_layernorm_backward_input_bf16,
    .gelu_backward_set_bf16 = cl_gelu_backward_set_bf16,
    .transpose_bf16 = cl_bf16_transpose,
    .moe_gather_bf16 = cl_moe_gather_bf16,
    .adamw_update_bf16 = cl_adamw_update_bf16,
    .kv_append = cl_kv_append,
    .attention_decode = cl_attention_decode,
};

/* Every CPU kernel and copy is done when it returns: nothing to wait for. */
static int cpu_sync(void *impl) {
    (void)impl;
    return 0;
}

static const cl_device_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .fill = cpu_fill,
    .copy = cpu_copy,
    .copy_to_host = cpu_copy_host,
    .copy_from_host = cpu_copy_host,
    .convert = cpu_convert,
    .sync = cpu_sync,
    .kernels = &cl_cpu_kernels,
};

cl_status cl_device_create_cpu(cl_device **out, size_t cap, int id) { return cl_device_create(out, &cpu_ops, NULL, cap, id); }
