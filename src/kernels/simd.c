/* Which vector path the kernels take (simd.h). */
#include "kernels/simd.h"

#include "cleave/kernels.h"
#include "cleave/core.h"

#include <stdatomic.h>

static atomic_int g_force_plain;

int cl_kernels_force_plain(int on) { return atomic_exchange(&g_force_plain, on ? 1 : 0); }

int cl_simd(void) {
    if (atomic_load_explicit(&g_force_plain, memory_order_relaxed)) return CL_SIMD_PLAIN;
    unsigned need = CL_CPU_AVX2 | CL_CPU_FMA;
    return (cl_cpu_features() & need) == need ? CL_SIMD_AVX2 : CL_SIMD_PLAIN;
}

const char *cl_kernels_isa(void) { return cl_simd() == CL_SIMD_AVX2 ? "avx2" : "plain"; }
