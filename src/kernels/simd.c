/* Which vector path the kernels take (simd.h). */
#include "kernels/simd.h"

#include "cleave/kernels.h"

#include <stdatomic.h>

static atomic_int g_force_plain;

int cl_kernels_force_plain(int on) { return atomic_exchange(&g_force_plain, on ? 1 : 0); }

static int cpu_avx2(void) {
#ifdef CL_SIMD_X86
    static atomic_int known = -1;
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k < 0) {
        __builtin_cpu_init();
        k = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k;
#else
    return 0;
#endif
}

int cl_simd(void) {
    if (atomic_load_explicit(&g_force_plain, memory_order_relaxed)) return CL_SIMD_PLAIN;
    return cpu_avx2() ? CL_SIMD_AVX2 : CL_SIMD_PLAIN;
}

const char *cl_kernels_isa(void) { return cl_simd() == CL_SIMD_AVX2 ? "avx2" : "plain"; }
