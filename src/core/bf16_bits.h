/* One F32 <-> BF16 conversion on the bits, inline: the definition that
 * core/format.c's cl_bf16_from_f32 / cl_bf16_to_f32 and kernels/convert.c's
 * scalar tails share, so neither file calls the other (convert.c's array
 * paths are what format.c calls; tests/cli_call_cycles.sh).
 *
 * Invariants: round to nearest, ties to even; a carry into the exponent is
 * the right rounding (to infinity too); a NaN stays a quiet NaN with its
 * sign and the top of its payload; widening is exact. */
#ifndef CLEAVE_CORE_BF16_BITS_H
#define CLEAVE_CORE_BF16_BITS_H

#include <stdint.h>
#include <string.h>

static inline uint16_t cl_bf16_round_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float cl_bf16_widen_bits(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

#endif
