/* SwiGLU, the Llama MLP's gate (Hugging Face's LlamaMLP: down_proj(silu(gate_proj(x)) * up_proj(x))):
 *   out = silu(gate) * up,  silu(x) = x / (1 + exp(-x))  (PyTorch's F.silu),
 * element by element over n = N * F values.
 * gate and up are two separate arrays, each [N, F] row-major: they are the
 * outputs of two products whose weights Hugging Face stores as two tensors
 * (gate_proj, up_proj) and tensor parallelism splits by columns alike, so
 * each is one plain GEMM into its own buffer; a fused [N, 2F] array would
 * pay only with a fused [C, 2F] weight, which the two stored tensors are not.
 * The backward keeps gate and up (2 N F floats) and recomputes silu:
 *   dgate += dout * up * silu'(gate),  silu'(x) = s (1 + x (1 - s)), s = sigmoid(x),
 *   dup   += dout * silu(gate).
 * Backward kernels add into their outputs. Blocks of CL_SIMD_BLOCK elements
 * go to the thread team, so the bits do not depend on the thread count.
 * cl_swiglu_forward_bf16 (bf16 mixed precision: the product feeds down_proj's
 * GEMM with BF16 operands) writes out as BF16, each value cl_bf16_from_f32 of
 * the F32 kernel's. */
#include "cleave/kernels.h"
#include "kernels/simd.h"

#include <math.h>

/* out[0 .. len) = silu(gate) * up over len values */
static void swiglu_block(float *out, const float *gate, const float *up, int64_t len) {
    for (int64_t i = 0; i < len; i++) {
        float x = gate[i];
        out[i] = x / (1.0f + expf(-x)) * up[i];
    }
}

void cl_swiglu_forward(float *out, const float *gate, const float *up, int64_t n) {
    CL_FOR_BLOCKS(n, lo, len, swiglu_block(out + lo, gate + lo, up + lo, len));
}

/* One block into a stack buffer, then rounded into obf. */
static void swiglu_block_bf16(uint16_t *obf, const float *gate, const float *up, int64_t len, int v) {
    float tmp[CL_SIMD_BLOCK];
    swiglu_block(tmp, gate, up, len);
    cl_bf16_pack_serial(obf, tmp, len, v);
}

void cl_swiglu_forward_bf16(uint16_t *out, const float *gate, const float *up, int64_t n) {
    int v = cl_simd_level();
    CL_FOR_BLOCKS(n, lo, len, swiglu_block_bf16(out + lo, gate + lo, up + lo, len, v));
}

void cl_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int64_t n) {
    CL_FOR_BLOCKS(n, lo, len, {
        for (int64_t i = lo; i < lo + len; i++) {
            float x = gate[i];
            float s = 1.0f / (1.0f + expf(-x));
            dgate[i] += dout[i] * up[i] * (s * (1.0f + x * (1.0f - s)));
            dup[i] += dout[i] * (x / (1.0f + expf(-x)));
        }
    });
}
