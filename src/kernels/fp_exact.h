/* Included first by a kernel file whose bits are held by tests: no contraction of a multiply and an add into one
 * fused operation (the expressions round as written, whatever the target's FMA; a CL_AVX512 function or clang
 * would otherwise fuse them). */
#ifndef CL_KERNELS_FP_EXACT_H
#define CL_KERNELS_FP_EXACT_H
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#endif
