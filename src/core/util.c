/* Byte sizes, clocks, growing arrays and the deterministic RNG (see core.h). */
#include "cleave/core.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

cl_status cl_parse_bytes(const char *s, size_t *out) {
    if (!s || !*s) return cl_error(CL_ERR_INVALID, "empty size: expected a size like 512MiB");
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v))
        return cl_error(CL_ERR_INVALID, "'%s' is not a size: expected a number with an optional unit B, KiB, MiB or GiB", s);
    while (*end == ' ') end++;
    double mul = 1;
    if (!*end || !strcasecmp(end, "b")) mul = 1;
    else if (!strcasecmp(end, "k") || !strcasecmp(end, "kb") || !strcasecmp(end, "kib")) mul = 1024.0;
    else if (!strcasecmp(end, "m") || !strcasecmp(end, "mb") || !strcasecmp(end, "mib")) mul = 1024.0 * 1024;
    else if (!strcasecmp(end, "g") || !strcasecmp(end, "gb") || !strcasecmp(end, "gib")) mul = 1024.0 * 1024 * 1024;
    else if (!strcasecmp(end, "t") || !strcasecmp(end, "tb") || !strcasecmp(end, "tib")) mul = 1024.0 * 1024 * 1024 * 1024;
    else return cl_error(CL_ERR_INVALID, "'%s': unknown unit '%s' (use B, KiB, MiB, GiB or TiB)", s, end);
    double bytes = v * mul;
    if (bytes < 1) return cl_error(CL_ERR_INVALID, "'%s': a size must be positive", s);
    if (bytes > 9.0e18) return cl_error(CL_ERR_INVALID, "'%s': size too large", s);
    *out = (size_t)bytes;
    return CL_OK;
}

char *cl_format_bytes(size_t bytes, char *buf, size_t n) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) { v /= 1024; u++; }
    if (u == 0) snprintf(buf, n, "%zu B", bytes);
    else snprintf(buf, n, "%.1f %s", v, units[u]);
    return buf;
}

cl_status cl_grow(void *array, size_t elem, size_t n, size_t *cap, size_t first, const char *what) {
    if (n < *cap) return CL_OK;
    size_t nc = *cap ? 2 * *cap : first;
    if (nc <= n) nc = n + 1;
    void *p;
    memcpy(&p, array, sizeof p); /* the caller's pointer, whatever its element type */
    if (!elem || nc > SIZE_MAX / elem || !(p = realloc(p, nc * elem))) return cl_error(CL_ERR_OOM, "cannot allocate %s", what);
    memcpy(array, &p, sizeof p);
    *cap = nc;
    return CL_OK;
}

unsigned cl_cpu_features(void) {
#if defined(__x86_64__) || defined(__i386__)
    static _Atomic int known = -1; /* every thread computes the same value */
    int k = known;
    if (k < 0) {
        __builtin_cpu_init();
        k = (__builtin_cpu_supports("avx2") ? CL_CPU_AVX2 : 0) | (__builtin_cpu_supports("fma") ? CL_CPU_FMA : 0) |
            (__builtin_cpu_supports("avx512f") ? CL_CPU_AVX512F : 0) |
            (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") ? CL_CPU_AVX512BF16 : 0);
        known = k;
    }
    return (unsigned)k;
#else
    return 0;
#endif
}

double cl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void cl_rng_seed(cl_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t cl_rng_u64(cl_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float cl_rng_uniform(cl_rng *r) { return (float)(cl_rng_u64(r) >> 40) / 16777216.0f; }

float cl_rng_normal_of(uint64_t a, uint64_t b) {
    /* Box-Muller in double; one value per pair of draws, so the stream is simple to replay. */
    double u1 = ((double)(a >> 11) + 1.0) / 9007199254740993.0; /* (0,1] */
    double u2 = (double)(b >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

float cl_rng_normal(cl_rng *r) {
    uint64_t a = cl_rng_u64(r);
    return cl_rng_normal_of(a, cl_rng_u64(r));
}
