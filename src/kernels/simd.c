/* Which vector path the kernels take (simd.h). */
#include "kernels/simd.h"

#include "cleave/kernels.h"
#include "cleave/core.h"

#include <stdatomic.h>

static atomic_int g_force_plain;
static atomic_int g_max_isa = CL_ISA_AVX512BF16;

int cl_kernels_force_plain(int on) { return atomic_exchange(&g_force_plain, on ? 1 : 0); }

int cl_kernels_max_isa(int level) {
    return atomic_exchange(&g_max_isa, level < CL_ISA_PLAIN ? CL_ISA_PLAIN : level > CL_ISA_AVX512BF16 ? CL_ISA_AVX512BF16 : level);
}

/* The CPU's widest level, found once (every thread finds the same). */
static int cpu_level(void) {
    static atomic_int known = -1;
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k >= 0) return k;
    unsigned f = cl_cpu_features(), need = CL_CPU_AVX2 | CL_CPU_FMA;
    k = (f & need) == need ? CL_ISA_AVX2 : CL_ISA_PLAIN;
#ifdef CL_SIMD_X86
    if (k && (f & CL_CPU_AVX512F) && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        k = (f & CL_CPU_AVX512BF16) ? CL_ISA_AVX512BF16 : CL_ISA_AVX512;
#endif
    atomic_store(&known, k);
    return k;
}

int cl_simd_level(void) {
    if (atomic_load_explicit(&g_force_plain, memory_order_relaxed)) return CL_ISA_PLAIN;
    int k = cpu_level(), cap = atomic_load_explicit(&g_max_isa, memory_order_relaxed);
    return k < cap ? k : cap;
}

int cl_simd(void) { return cl_simd_level() >= CL_ISA_AVX2 ? CL_SIMD_AVX2 : CL_SIMD_PLAIN; }

const char *cl_kernels_isa(void) {
    static const char *name[] = {"plain", "avx2", "avx512", "avx512_bf16"};
    return name[cl_simd_level()];
}
