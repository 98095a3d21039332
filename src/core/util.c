/* Byte sizes, clocks, growing arrays and the deterministic RNG (see core.h). */
#include "cleave/core.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
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


/* Skipping ahead. xoshiro's state update (cl_rng_u64 without its output)
 * is a linear map T on 256 bits over GF(2), so T satisfies its
 * characteristic polynomial P (degree 256: the period is 2^256 - 1), and
 * T^n = R(T) with R = x^n mod P. P is found once, by Berlekamp-Massey on
 * 512 successive values of one state bit (the least linear recurrence they
 * follow; P is primitive, so every nonzero bit sequence of the generator
 * has it whole); R by squaring and shifting polynomials modulo P; and
 * T^n s as the sum of the T^i s whose coefficient in R is 1: 256 steps. */
enum { POLY_W = 5 }; /* a polynomial of degree <= 256 in 5 words: bit i the coefficient of x^i */

static uint64_t g_charpoly[POLY_W];
static pthread_once_t g_charpoly_once = PTHREAD_ONCE_INIT;

static void step_state(uint64_t *s) {
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
}

static void find_charpoly(void) {
    enum { N = 512, D = 256 };
    unsigned char bit[N], c[N + 1] = {1}, b[N + 1] = {1}, t[N + 1];
    uint64_t s[4] = {0x0123456789abcdefULL, 0xfedcba9876543210ULL, 0x0f1e2d3c4b5a6978ULL, 0x8796a5b4c3d2e1f0ULL};
    for (int n = 0; n < N; n++, step_state(s)) bit[n] = (unsigned char)(s[0] & 1);
    int L = 0, m = 1;
    for (int n = 0; n < N; n++) { /* Berlekamp-Massey over GF(2): c the connection polynomial, 1 + c1 x + ... */
        unsigned char d = bit[n];
        for (int i = 1; i <= L; i++) d ^= (unsigned char)(c[i] & bit[n - i]);
        if (!d) {
            m++;
            continue;
        }
        memcpy(t, c, sizeof t);
        for (int i = 0; i + m <= N; i++) c[i + m] ^= b[i];
        if (2 * L <= n) {
            L = n + 1 - L;
            memcpy(b, t, sizeof b);
            m = 1;
        } else {
            m++;
        }
    }
    if (L != D) return; /* not xoshiro256's (cannot happen); g_charpoly stays 0 and cl_rng_skip steps */
    for (int j = 0; j <= L; j++) /* P(x) = x^L c(1/x) */
        if (c[j]) g_charpoly[(L - j) / 64] |= 1ULL << ((L - j) % 64);
}

uint64_t cl_rng_u64(cl_rng *r) {
    uint64_t result = rotl(r->s[1] * 5, 7) * 9;
    step_state(r->s);
    return result;
}

/* acc (8 words) ^= P shifted up by sh bits. */
static void xor_shifted(uint64_t *acc, const uint64_t *p, int sh) {
    int w = sh / 64, b = sh % 64;
    for (int i = 0; i < POLY_W && i + w < 8; i++) {
        acc[i + w] ^= p[i] << b;
        if (b && i + w + 1 < 8) acc[i + w + 1] ^= p[i] >> (64 - b);
    }
}

static uint64_t spread32(uint64_t v) { /* bit i to bit 2i */
    v = (v | v << 16) & 0x0000ffff0000ffffULL;
    v = (v | v << 8) & 0x00ff00ff00ff00ffULL;
    v = (v | v << 4) & 0x0f0f0f0f0f0f0f0fULL;
    v = (v | v << 2) & 0x3333333333333333ULL;
    return (v | v << 1) & 0x5555555555555555ULL;
}

/* r = r^2 mod P (r of degree < 256, 4 words); over GF(2) a square spreads the bits. */
static void square_mod(uint64_t *r, const uint64_t *p) {
    uint64_t a[8];
    for (int i = 0; i < 4; i++) a[2 * i] = spread32(r[i] & 0xffffffffULL), a[2 * i + 1] = spread32(r[i] >> 32);
    for (int k = 511; k >= 256; k--)
        if (a[k / 64] >> (k % 64) & 1) xor_shifted(a, p, k - 256);
    memcpy(r, a, 4 * sizeof *r);
}

/* r = r x mod P. */
static void times_x_mod(uint64_t *r, const uint64_t *p) {
    uint64_t top = r[3] >> 63;
    for (int i = 3; i > 0; i--) r[i] = r[i] << 1 | r[i - 1] >> 63;
    r[0] <<= 1;
    if (top)
        for (int i = 0; i < 4; i++) r[i] ^= p[i]; /* x^256 = P - x^256 */
}

void cl_rng_skip(cl_rng *r, uint64_t n) {
    pthread_once(&g_charpoly_once, find_charpoly);
    if (n < 4096 || !g_charpoly[4]) { /* a few thousand steps cost what a jump does */
        while (n--) step_state(r->s);
        return;
    }
    uint64_t x[4] = {1, 0, 0, 0}; /* x^n mod P, from n's top bit down */
    for (int b = 63 - __builtin_clzll(n); b >= 0; b--) {
        square_mod(x, g_charpoly);
        if (n >> b & 1) times_x_mod(x, g_charpoly);
    }
    uint64_t t[4], acc[4] = {0, 0, 0, 0};
    memcpy(t, r->s, sizeof t);
    for (int i = 0; i < 256; i++, step_state(t))
        if (x[i / 64] >> (i % 64) & 1)
            for (int j = 0; j < 4; j++) acc[j] ^= t[j];
    memcpy(r->s, acc, sizeof acc);
}

float cl_rng_uniform_of(uint64_t a) { return (float)(a >> 40) / 16777216.0f; }

float cl_rng_uniform(cl_rng *r) { return cl_rng_uniform_of(cl_rng_u64(r)); }

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
