/* Tests of the communicators (include/cleave/comm.h).
 *
 * Without arguments: the threads backend for world sizes 1..8: every
 * collective against a serial left fold in rank order (bitwise), sizes 0, 1,
 * primes and counts the world size does not divide; point-to-point with tags
 * out of order; split groups; non-blocking collectives that progress while
 * the caller computes; failures (a rank's error, an injected fault, recv and
 * collective timeouts, a send/send deadlock) that end every rank promptly
 * with messages naming the failed rank; all-to-all (both forms, every
 * format, zero and random counts, scattered offsets, a split group) byte
 * for byte against what each sender put there, and its count checks.
 *
 * The same checks run under MPI (tests/cli_comm_mpi.sh):
 *   mpirun -np N test_comm --mpi [--hash FILE]   the checks; FILE gets a hash of the results
 *   test_comm --threads-hash N FILE              the same hash from N threads
 *   mpirun ... test_comm --mpi --fault           a loop of collectives (for CLEAVE_FAULT)
 *   mpirun ... test_comm --mpi --recv-timeout    rank 1 waits for a message that never comes
 *   mpirun ... test_comm --mpi --counts-mismatch rank 1 gives allgather_v a larger count: exit 2,
 *                                                "sent a piece of 44000 bytes where 40000 were expected"
 *   mpirun ... test_comm --mpi --a2a-mismatch    rank 0 sends rank 1 more in alltoallv than it expects: exit 2,
 *                                                "sent a piece of 44000 bytes where 40000 were expected"
 *   mpirun ... test_comm --mpi --hang PIDFILE    ranks idle in barriers; rank 1 writes its pid
 *   test_comm --has-mpi                          prints "MPI: yes" or "MPI: no"
 *
 * Rank threads share the check counters, so rank code checks with TCHECK
 * (under a mutex). */
#include "cleave/comm.h"
#include "common/check.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- inputs and the serial reference ------------------------------------ */

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Values of varying magnitude, so that the summation order shows in the bits. */
static double val(int rank, size_t i, unsigned salt) {
    uint64_t h = mix(mix((uint64_t)rank * 1000003u + salt) ^ i);
    double m = (double)(h >> 40) / 16777216.0 - 0.5;
    return ldexp(m, (int)(h & 15) - 8);
}

static float fold_f(float acc, float x, cl_redop op) {
    if (op == CL_RED_MAX) return (x > acc || isnan(x)) ? x : acc;
    return acc + x;
}

static double fold_d(double acc, double x, cl_redop op) {
    if (op == CL_RED_MAX) return (x > acc || isnan(x)) ? x : acc;
    return acc + x;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static const char *op_name(cl_redop op) { return op == CL_RED_SUM ? "sum" : op == CL_RED_AVG ? "avg" : "max"; }

/* ---- collectives ---------------------------------------------------------- */

/* ---- per-rank counts (reduce_scatter_v, allgather_v) ---------------------- */

enum { VPAT = 6 };

/* Count pattern k over n ranks: 0 all empty; 1 uneven with empty ranks; 2 one
 * rank holds everything; 3 large pieces (> 64 KiB of floats: several of
 * mpi.c's 256 KiB segments) with rank 1 empty; 4 a gradient bucket
 * [lo, hi) cut by contiguous shards of a flat buffer, as ZeRO cuts them;
 * 5 one float each. */
static void v_counts(int k, int n, size_t *counts) {
    size_t flat = 1000 * (size_t)n + 37, shard = (flat + (size_t)n - 1) / (size_t)n, lo = 333, hi = flat - 250;
    for (int r = 0; r < n; r++) {
        size_t a = (size_t)r * shard, b = a + shard;
        a = a < lo ? lo : a;
        b = b > hi ? hi : b;
        switch (k) {
        case 0: counts[r] = 0; break;
        case 1: counts[r] = r % 3 == 1 ? 0 : 1 + 13 * (size_t)r + (size_t)(r % 2) * 1000; break;
        case 2: counts[r] = r == n / 2 ? 4099 : 0; break;
        case 3: counts[r] = r == 1 ? 0 : 70001 + 1000 * (size_t)r; break;
        case 4: counts[r] = b > a ? b - a : 0; break;
        default: counts[r] = 1; break;
        }
    }
}

/* A non-blocking call gets a copy of counts that is scribbled on and freed
 * as soon as it returns: the request must hold its own. */
static size_t *counts_copy(const size_t *counts, int n) {
    size_t *v = malloc((size_t)n * sizeof *v);
    if (v) memcpy(v, counts, (size_t)n * sizeof *v);
    return v;
}

static void counts_scrap(size_t *v, int n) {
    if (v) memset(v, 0xA5, (size_t)n * sizeof *v);
    free(v);
}

/* reduce_scatter_v against the serial fold and against cl_comm_allreduce of
 * the same data; allgather_v (also in place) against the inputs. Returns a
 * hash of the results. */
static uint64_t v_checks(cl_comm *c, int full) {
    int n = cl_comm_size(c), me = cl_comm_rank(c);
    uint64_t h = 0xcbf29ce484222325ull;
    const cl_redop ops[3] = {CL_RED_SUM, CL_RED_AVG, CL_RED_MAX};
    size_t *counts = calloc((size_t)n, sizeof *counts);
    TCHECK(counts != NULL, "allocation");
    if (!counts) return h;
    for (int k = 0; k < VPAT; k++) {
        if (k == 3 && !full) continue;
        v_counts(k, n, counts);
        size_t total = 0, off = 0;
        for (int r = 0; r < n; r++) {
            if (r == me) off = total;
            total += counts[r];
        }
        size_t mine = counts[me];
        float *in = malloc((total + 1) * sizeof *in), *all = malloc((total + 1) * sizeof *all);
        float *out = malloc((mine + 1) * sizeof *out), *ref = malloc((mine + 1) * sizeof *ref);
        unsigned char *gin = malloc(total * 4 + 1), *gout = malloc(total * 4 + 1);
        TCHECK(in && all && out && ref && gin && gout, "allocation");
        for (int oi = 0; oi < 3 && in && all && out && ref && gin && gout; oi++) {
            cl_redop op = ops[oi];
            unsigned salt = (unsigned)(300 + k * 3 + oi);
            int nonblocking = (k + oi) % 2 == 1;
            for (size_t i = 0; i < total; i++) in[i] = all[i] = (float)val(me, i, salt);
            for (size_t i = 0; i < mine; i++) {
                float a = (float)val(0, off + i, salt);
                for (int r = 1; r < n; r++) a = fold_f(a, (float)val(r, off + i, salt), op);
                ref[i] = op == CL_RED_AVG ? a / (float)n : a;
            }
            if (nonblocking) {
                size_t *vc = counts_copy(counts, n);
                cl_request *rq = NULL;
                TCHECK_OK(cl_comm_ireduce_scatter_v(c, in, out, vc, CL_F32, op, &rq));
                counts_scrap(vc, n);
                TCHECK_OK(cl_comm_wait(c, rq));
            } else {
                TCHECK_OK(cl_comm_reduce_scatter_v(c, in, out, counts, CL_F32, op));
            }
            /* in place: out at this rank's piece of in (ZeRO 2's buckets); the same bits */
            for (size_t i = 0; i < total; i++) all[i] = (float)val(me, i, salt);
            if (nonblocking) {
                cl_request *rq = NULL;
                TCHECK_OK(cl_comm_ireduce_scatter_v(c, all, all + off, counts, CL_F32, op, &rq));
                TCHECK_OK(cl_comm_wait(c, rq));
            } else {
                TCHECK_OK(cl_comm_reduce_scatter_v(c, all, all + off, counts, CL_F32, op));
            }
            size_t badip = mine;
            for (size_t i = 0; i < mine && badip == mine; i++)
                if (memcmp(&all[off + i], &ref[i], sizeof *out) != 0) badip = i;
            TCHECK(badip == mine, "in-place reduce_scatter_v %s n=%d pattern %d rank %d: element %zu differs from the serial fold",
                   op_name(op), n, k, me, badip);
            for (size_t i = 0; i < total; i++) all[i] = (float)val(me, i, salt);
            TCHECK_OK(cl_comm_allreduce(c, all, total, CL_F32, op));
            size_t bad = mine, bad2 = mine;
            for (size_t i = 0; i < mine && bad == mine; i++)
                if (memcmp(&out[i], &ref[i], sizeof *out) != 0) bad = i;
            for (size_t i = 0; i < mine && bad2 == mine; i++)
                if (memcmp(&out[i], &all[off + i], sizeof *out) != 0) bad2 = i;
            TCHECK(bad == mine && bad2 == mine,
                   "%s reduce_scatter_v %s n=%d pattern %d (piece of %zu at %zu of %zu) rank %d: element %zu is %.9g, the "
                   "serial fold gives %.9g; element %zu differs from the all-reduce's",
                   nonblocking ? "non-blocking" : "blocking", op_name(op), n, k, mine, off, total, me, bad,
                   bad < mine ? out[bad] : 0.0, bad < mine ? ref[bad] : 0.0, bad2);
            h = fnv(h, out, mine * sizeof *out);
            /* the inputs untouched */
            size_t changed = 0;
            for (size_t i = 0; i < total; i++) changed += in[i] != (float)val(me, i, salt);
            TCHECK(changed == 0, "reduce_scatter_v n=%d pattern %d rank %d changed %zu inputs", n, k, me, changed);
        }
        /* all-gather of counts[r] * es bytes: es 1 (eager pieces) and 4 */
        for (int es = 1; es <= 4 && gin && gout; es += 3) {
            for (int mode = 0; mode < 3; mode++) { /* blocking, non-blocking, in place */
                size_t *bc = malloc((size_t)n * sizeof *bc), goff = off * (size_t)es, gtot = total * (size_t)es;
                TCHECK(bc != NULL, "allocation");
                if (!bc) break;
                for (int r = 0; r < n; r++) bc[r] = counts[r] * (size_t)es;
                memset(gout, 0xEE, gtot + 1);
                unsigned char *src = mode == 2 ? gout + goff : gin;
                for (size_t i = 0; i < bc[me]; i++) src[i] = (unsigned char)(mix((uint64_t)me * 7919 + i + (size_t)es) & 255);
                if (mode == 1) {
                    cl_request *rq = NULL;
                    size_t *vc = counts_copy(bc, n);
                    TCHECK_OK(cl_comm_iallgather_v(c, src, gout, vc, &rq));
                    counts_scrap(vc, n);
                    TCHECK_OK(cl_comm_wait(c, rq));
                } else {
                    TCHECK_OK(cl_comm_allgather_v(c, src, gout, bc));
                }
                size_t bad = gtot, at = 0;
                for (int r = 0; r < n; r++) {
                    for (size_t i = 0; i < bc[r] && bad == gtot; i++)
                        if (gout[at + i] != (unsigned char)(mix((uint64_t)r * 7919 + i + (size_t)es) & 255)) bad = at + i;
                    at += bc[r];
                }
                TCHECK(bad == gtot && gout[gtot] == 0xEE, "allgather_v%s n=%d pattern %d es %d rank %d: byte %zu of %zu differs",
                       mode == 2 ? " (in place)" : mode == 1 ? " (non-blocking)" : "", n, k, es, me, bad, gtot);
                h = fnv(h, gout, gtot);
                free(bc);
            }
        }
        free(in);
        free(all);
        free(out);
        free(ref);
        free(gin);
        free(gout);
    }
    /* bad arguments fail on the calling rank alone, before any communication */
    float x[4] = {0};
    TCHECK(cl_comm_reduce_scatter_v(c, x, x + 2, NULL, CL_F32, CL_RED_SUM) == CL_ERR_INVALID &&
               strstr(cl_last_error(), "counts is NULL"),
           "reduce_scatter_v without counts: %s", cl_last_error());
    for (int r = 0; r < n; r++) counts[r] = 0;
    counts[me] = 2; /* out overlaps in, but not at this rank's place (in place there is allowed) */
    TCHECK(cl_comm_reduce_scatter_v(c, x, x + 1, counts, CL_F32, CL_RED_SUM) == CL_ERR_INVALID && strstr(cl_last_error(), "overlap"),
           "reduce_scatter_v overlapping: %s", cl_last_error());
    TCHECK(cl_comm_reduce_scatter_v(c, x, x + 2, counts, CL_F32, (cl_redop)7) == CL_ERR_INVALID, "reduce_scatter_v op 7: %s",
           cl_last_error());
    cl_request *rq = (cl_request *)x;
    TCHECK(cl_comm_iallgather_v(c, x, NULL, counts, &rq) == CL_ERR_INVALID && rq == NULL, "allgather_v to NULL: %s",
           cl_last_error());
    if (n >= 2) {
        counts[me] = 2;
        counts[(me + 1) % n] = 2; /* in overlaps out, but not at this rank's place */
        TCHECK(cl_comm_allgather_v(c, (char *)x + (me < (me + 1) % n ? 1 : 3), x, counts) == CL_ERR_INVALID &&
                   strstr(cl_last_error(), "overlaps"),
               "allgather_v overlapping: %s", cl_last_error());
    }
    counts[0] = SIZE_MAX / 2;
    TCHECK(cl_comm_reduce_scatter_v(c, x, x + 2, counts, CL_F32, CL_RED_SUM) == CL_ERR_INVALID &&
               strstr(cl_last_error(), "too large"),
           "reduce_scatter_v with huge counts: %s", cl_last_error());
    free(counts);
    return h;
}

/* An all-reduce of buf, blocking or not (then waited for), checked to succeed. */
static void allreduce_either(cl_comm *c, void *buf, size_t cnt, cl_dtype f, cl_redop op, int nonblocking) {
    if (nonblocking) {
        cl_request *rq = NULL;
        TCHECK_OK(cl_comm_iallreduce(c, buf, cnt, f, op, &rq));
        TCHECK_OK(cl_comm_wait(c, rq));
    } else {
        TCHECK_OK(cl_comm_allreduce(c, buf, cnt, f, op));
    }
}

/* ---- 16-bit formats (BF16, F16) --------------------------------------------- */

static uint16_t narrow(cl_dtype f, float x) { return f == CL_BF16 ? cl_bf16_from_f32(x) : cl_f16_from_f32(x); }
static float widen(cl_dtype f, uint16_t h) { return f == CL_BF16 ? cl_bf16_to_f32(h) : cl_f16_to_f32(h); }
/* rank r's element i in format f */
static uint16_t hval(cl_dtype f, int r, size_t i, unsigned salt) { return narrow(f, (float)val(r, i, salt)); }
/* The reference: the elements widened, folded in F32 in rank order, rounded once. */
static uint16_t href(cl_dtype f, int n, size_t i, unsigned salt, cl_redop op) {
    float a = widen(f, hval(f, 0, i, salt));
    for (int r = 1; r < n; r++) a = fold_f(a, widen(f, hval(f, r, i, salt)), op);
    return narrow(f, op == CL_RED_AVG ? a / (float)n : a);
}

/* All-reduce, reduce-scatter and reduce-scatter_v of BF16 and F16 against
 * href, bit for bit; a sum that rounding at every step would get wrong (so
 * the F32 accumulation is what runs). Returns a hash of the results. */
static uint64_t half_checks(cl_comm *c, int full) {
    int n = cl_comm_size(c), me = cl_comm_rank(c);
    uint64_t h = 0xcbf29ce484222325ull;
    const cl_redop ops[3] = {CL_RED_SUM, CL_RED_AVG, CL_RED_MAX};
    const cl_dtype fmts[2] = {CL_BF16, CL_F16};
    /* 70001: n * 140 KB, over the mpi backend's one-round bound (its two-round path) */
    const size_t counts[] = {0, 1, 17, 4099, 70001};
    size_t maxc = 70001 * (size_t)(n > 8 ? n : 8);
    uint16_t *buf = malloc(maxc * 2), *ref = malloc(maxc * 2), *out = malloc(maxc * 2);
    size_t *vc = calloc((size_t)n, sizeof *vc);
    TCHECK(buf && ref && out && vc, "allocation");
    for (int fi = 0; fi < 2 && buf && ref && out && vc; fi++) {
        cl_dtype f = fmts[fi];
        const char *fn = cl_dtype_name(f);
        size_t stepwise_differs = 0;
        for (int ci = 0; ci < (full ? 5 : 4); ci++) {
            size_t cnt = counts[ci];
            for (int oi = 0; oi < 3; oi++) {
                cl_redop op = ops[oi];
                unsigned salt = (unsigned)(500 + 20 * fi + ci * 3 + oi);
                for (size_t i = 0; i < cnt; i++) buf[i] = hval(f, me, i, salt);
                for (size_t i = 0; i < cnt; i++) ref[i] = href(f, n, i, salt, op);
                if (op == CL_RED_SUM)
                    for (size_t i = 0; i < cnt; i++) { /* summed in the format itself, rounding every step */
                        float a = widen(f, hval(f, 0, i, salt));
                        for (int r = 1; r < n; r++) a = widen(f, narrow(f, a + widen(f, hval(f, r, i, salt))));
                        stepwise_differs += narrow(f, a) != ref[i];
                    }
                allreduce_either(c, buf, cnt, f, op, (ci + oi) % 2 == 1);
                size_t bad = cnt;
                for (size_t i = 0; i < cnt && bad == cnt; i++)
                    if (buf[i] != ref[i]) bad = i;
                TCHECK(bad == cnt, "%s allreduce %s n=%d count %zu rank %d: element %zu is 0x%04x, F32 fold rounded once 0x%04x", fn,
                       op_name(op), n, cnt, me, bad, bad < cnt ? buf[bad] : 0, bad < cnt ? ref[bad] : 0);
                h = fnv(h, buf, cnt * 2);
                /* reduce-scatter of cnt elements a rank */
                if ((size_t)n * cnt > maxc) continue;
                for (size_t i = 0; i < (size_t)n * cnt; i++) buf[i] = hval(f, me, i, salt);
                TCHECK_OK(cl_comm_reduce_scatter(c, buf, out, cnt, f, op));
                bad = cnt;
                for (size_t i = 0; i < cnt && bad == cnt; i++)
                    if (out[i] != href(f, n, (size_t)me * cnt + i, salt, op)) bad = i;
                TCHECK(bad == cnt, "%s reduce_scatter %s n=%d cpr %zu rank %d: element %zu differs from the F32 fold rounded once",
                       fn, op_name(op), n, cnt, me, bad);
                h = fnv(h, out, cnt * 2);
            }
        }
        /* reduce-scatter_v, in place, over uneven and large pieces */
        for (int k = 1; k <= (full ? 3 : 1); k += 2) {
            v_counts(k, n, vc);
            size_t total = 0, off = 0;
            for (int r = 0; r < n; r++) {
                if (r == me) off = total;
                total += vc[r];
            }
            if (total > maxc) continue;
            unsigned salt = (unsigned)(600 + 20 * fi + k);
            for (size_t i = 0; i < total; i++) buf[i] = hval(f, me, i, salt);
            TCHECK_OK(cl_comm_reduce_scatter_v(c, buf, buf + off, vc, f, CL_RED_SUM));
            size_t bad = vc[me];
            for (size_t i = 0; i < vc[me] && bad == vc[me]; i++)
                if (buf[off + i] != href(f, n, off + i, salt, CL_RED_SUM)) bad = i;
            TCHECK(bad == vc[me], "%s reduce_scatter_v sum n=%d pattern %d rank %d: element %zu differs from the F32 fold rounded once",
                   fn, n, k, me, bad);
            h = fnv(h, buf + off, vc[me] * 2);
        }
        /* the reference is not what summing in the format would give (n >= 3: two roundings or more) */
        if (n >= 3) TCHECK(stepwise_differs > 0, "%s n=%d: summing in the format equals the F32 fold everywhere", fn, n);
        /* by hand: 1 + 2^-8 + ... + 2^-8 (n - 1 of them) is 1 + (n-1) 2^-8 in F32, rounded once; in BF16 step by
         * step each 1 + 2^-8 ties back to 1 */
        uint16_t x = narrow(f, me == 0 ? 1.0f : 0x1p-8f), want = narrow(f, 1.0f + (float)(n - 1) * 0x1p-8f);
        TCHECK_OK(cl_comm_allreduce(c, &x, 1, f, CL_RED_SUM));
        TCHECK(x == want, "%s n=%d: 1 + %d * 2^-8 gave 0x%04x, expected 0x%04x", fn, n, n - 1, x, want);
        if (f == CL_BF16 && n >= 3) TCHECK(x != narrow(f, 1.0f), "BF16 n=%d: 1 + %d * 2^-8 summed as 1", n, n - 1);
    }
    /* the element-counted forms: count * the format's size bytes */
    if (buf && out) {
        for (size_t i = 0; i < 3; i++) buf[i] = (uint16_t)(1000 * me + (int)i);
        TCHECK_OK(cl_comm_allgather_n(c, buf, out, 3, CL_BF16));
        size_t bad = 3 * (size_t)n;
        for (size_t i = 0; i < 3 * (size_t)n && bad == 3 * (size_t)n; i++)
            if (out[i] != (uint16_t)(1000 * (int)(i / 3) + (int)(i % 3))) bad = i;
        TCHECK(bad == 3 * (size_t)n, "allgather_n of 3 BF16 a rank n=%d: element %zu wrong", n, bad);
        double d[2] = {me == n - 1 ? 2.5 : 0, me == n - 1 ? -1 : 0};
        TCHECK_OK(cl_comm_broadcast_n(c, d, 2, CL_F64, n - 1));
        TCHECK(d[0] == 2.5 && d[1] == -1, "broadcast_n of 2 F64 from rank %d: %g %g", n - 1, d[0], d[1]);
        cl_request *rs = NULL, *rr = NULL;
        float sv[2] = {(float)me, 0.5f}, rv[2] = {0, 0};
        TCHECK_OK(cl_comm_irecv_n(c, rv, 2, CL_F32, me, 9, &rr));
        TCHECK_OK(cl_comm_isend_n(c, sv, 2, CL_F32, me, 9, &rs));
        TCHECK_OK(cl_comm_wait(c, rs));
        TCHECK_OK(cl_comm_wait(c, rr));
        TCHECK(rv[0] == (float)me && rv[1] == 0.5f, "isend_n/irecv_n of 2 F32 to oneself: %g %g", rv[0], rv[1]);
        TCHECK(cl_comm_broadcast_n(c, buf, SIZE_MAX / 2, CL_F32, 0) == CL_ERR_INVALID && strstr(cl_last_error(), "too large"),
               "broadcast_n of SIZE_MAX / 2 F32: %s", cl_last_error());
    }
    /* a format that cannot be reduced */
    int32_t iv = 1;
    TCHECK(cl_comm_allreduce(c, &iv, 1, CL_I32, CL_RED_SUM) == CL_ERR_INVALID && strstr(cl_last_error(), "I32"),
           "allreduce of I32: %s", cl_last_error());
    free(buf);
    free(ref);
    free(out);
    free(vc);
    return h;
}

/* Every collective on c against the serial fold; returns a hash of every
 * result this rank got. full: the longer list of sizes. */
static uint64_t coll_checks(cl_comm *c, int full) {
    int n = cl_comm_size(c), me = cl_comm_rank(c);
    uint64_t h = 0xcbf29ce484222325ull;
    const size_t counts_full[] = {0, 1, 7, 16, 17, 100, 1009, 4099, 65537, 300007};
    const size_t counts_short[] = {0, 1, 7, 17, 1009, 4099};
    const size_t *counts = full ? counts_full : counts_short;
    int ncounts = full ? 10 : 6;
    const cl_redop ops[3] = {CL_RED_SUM, CL_RED_AVG, CL_RED_MAX};
    size_t maxc = 300007 * 2;
    float *buf = malloc(maxc * sizeof *buf), *ref = malloc(maxc * sizeof *ref);
    double *dbuf = malloc(maxc * sizeof *dbuf), *dref = malloc(maxc * sizeof *dref);
    TCHECK(buf && ref && dbuf && dref, "allocation");
    if (!buf || !ref || !dbuf || !dref) goto out;

    /* all-reduce, float */
    for (int ci = 0; ci < ncounts; ci++) {
        size_t cnt = counts[ci];
        for (int oi = 0; oi < 3; oi++) {
            cl_redop op = ops[oi];
            unsigned salt = (unsigned)(ci * 3 + oi);
            if (cnt == 300007 && op != CL_RED_SUM) continue;
            for (size_t i = 0; i < cnt; i++) buf[i] = (float)val(me, i, salt);
            for (size_t i = 0; i < cnt; i++) {
                float a = (float)val(0, i, salt);
                for (int r = 1; r < n; r++) a = fold_f(a, (float)val(r, i, salt), op);
                ref[i] = op == CL_RED_AVG ? a / (float)n : a;
            }
            int nonblocking = (ci + oi) % 2 == 1;
            allreduce_either(c, buf, cnt, CL_F32, op, nonblocking);
            size_t bad = cnt;
            for (size_t i = 0; i < cnt && bad == cnt; i++)
                if (memcmp(&buf[i], &ref[i], sizeof(float)) != 0) bad = i;
            TCHECK(bad == cnt, "%s allreduce %s n=%d count %zu rank %d: element %zu is %.9g, the serial fold gives %.9g",
                   nonblocking ? "non-blocking" : "blocking", op_name(op), n, cnt, me, bad, bad < cnt ? buf[bad] : 0.0,
                   bad < cnt ? ref[bad] : 0.0);
            h = fnv(h, buf, cnt * sizeof *buf);
            if (full && n >= 3 && op == CL_RED_SUM && cnt == 65537) {
                /* the inputs are order-sensitive: the reverse fold differs somewhere */
                size_t differs = 0;
                for (size_t i = 0; i < cnt; i++) {
                    float a = (float)val(n - 1, i, salt);
                    for (int r = n - 2; r >= 0; r--) a += (float)val(r, i, salt);
                    differs += memcmp(&a, &ref[i], sizeof a) != 0;
                }
                TCHECK(differs > 0, "n=%d: the reverse fold equals the forward one everywhere: the test data is too easy", n);
            }
        }
    }
    /* all-reduce, double */
    for (int ci = 0; ci < ncounts; ci++) {
        size_t cnt = counts[ci] > 65537 ? 65537 : counts[ci];
        for (int oi = 0; oi < 3; oi++) {
            cl_redop op = ops[oi];
            unsigned salt = (unsigned)(100 + ci * 3 + oi);
            for (size_t i = 0; i < cnt; i++) dbuf[i] = val(me, i, salt) * (1 + 1e-9 * (double)me);
            for (size_t i = 0; i < cnt; i++) {
                double a = val(0, i, salt);
                for (int r = 1; r < n; r++) a = fold_d(a, val(r, i, salt) * (1 + 1e-9 * (double)r), op);
                dref[i] = op == CL_RED_AVG ? a / (double)n : a;
            }
            TCHECK_OK(cl_comm_allreduce(c, dbuf, cnt, CL_F64, op));
            TCHECK(memcmp(dbuf, dref, cnt * sizeof *dbuf) == 0, "allreduce_f64 %s n=%d count %zu rank %d differs", op_name(op),
                   n, cnt, me);
            h = fnv(h, dbuf, cnt * sizeof *dbuf);
        }
    }
    /* NaN anywhere gives NaN under MAX and SUM */
    if (n >= 2) {
        float x[3] = {1, 2, 3};
        if (me == n - 1) x[1] = NAN;
        TCHECK_OK(cl_comm_allreduce(c, x, 3, CL_F32, CL_RED_MAX));
        TCHECK(isnan(x[1]) && !isnan(x[0]) && !isnan(x[2]), "max with a NaN on the last rank: %g %g %g", x[0], x[1], x[2]);
        /* the same through the vector loops (count 1024: whole lines on every rank) */
        for (size_t i = 0; i < 1024; i++) buf[i] = (float)i;
        if (me == n - 1) buf[37] = buf[1000] = NAN;
        TCHECK_OK(cl_comm_allreduce(c, buf, 1024, CL_F32, CL_RED_MAX));
        size_t bad = 1024;
        for (size_t i = 0; i < 1024 && bad == 1024; i++)
            if ((i == 37 || i == 1000) ? !isnan(buf[i]) : buf[i] != (float)i) bad = i;
        TCHECK(bad == 1024, "max with NaNs at 37 and 1000 on the last rank: element %zu is %g", bad,
               bad < 1024 ? buf[bad] : 0.0);
    }
    /* reduce-scatter */
    const size_t cprs[] = {0, 1, 7, 1001, 40009};
    for (int ci = 0; ci < (full ? 5 : 4); ci++) {
        size_t cpr = cprs[ci], total = cpr * (size_t)n;
        if (total > maxc) continue;
        for (int oi = 0; oi < 3; oi++) {
            cl_redop op = ops[oi];
            unsigned salt = (unsigned)(200 + ci * 3 + oi);
            for (size_t i = 0; i < total; i++) ref[i] = (float)val(me, i, salt);
            for (size_t i = 0; i < cpr; i++) {
                size_t gi = (size_t)me * cpr + i;
                float a = (float)val(0, gi, salt);
                for (int r = 1; r < n; r++) a = fold_f(a, (float)val(r, gi, salt), op);
                buf[i] = op == CL_RED_AVG ? a / (float)n : a; /* expected, in buf */
            }
            float *out = malloc((cpr ? cpr : 1) * sizeof *out);
            TCHECK(out != NULL, "allocation");
            if (!out) continue;
            if (oi == 1) {
                cl_request *rq = NULL;
                TCHECK_OK(cl_comm_ireduce_scatter(c, ref, out, cpr, CL_F32, op, &rq));
                TCHECK_OK(cl_comm_wait(c, rq));
            } else {
                TCHECK_OK(cl_comm_reduce_scatter(c, ref, out, cpr, CL_F32, op));
            }
            TCHECK(memcmp(out, buf, cpr * sizeof *out) == 0, "reduce_scatter %s n=%d cpr %zu rank %d differs", op_name(op), n,
                   cpr, me);
            h = fnv(h, out, cpr * sizeof *out);
            free(out);
        }
    }
    /* all-gather (bytes; also in place) */
    const size_t bprs[] = {0, 1, 7, 4099, 65539};
    for (int bi = 0; bi < 5; bi++) {
        size_t bpr = bprs[bi];
        unsigned char *in = malloc(bpr + 1), *out = malloc(bpr * (size_t)n + 1);
        TCHECK(in && out, "allocation");
        if (!in || !out) {
            free(in);
            free(out);
            continue;
        }
        for (size_t i = 0; i < bpr; i++) in[i] = (unsigned char)(mix((uint64_t)me * 7919 + i) & 255);
        int inplace = bi % 2 == 1;
        if (inplace) memcpy(out + (size_t)me * bpr, in, bpr);
        if (bi == 3) {
            cl_request *rq = NULL;
            TCHECK_OK(cl_comm_iallgather(c, in, out, bpr, &rq));
            TCHECK_OK(cl_comm_wait(c, rq));
        } else {
            TCHECK_OK(cl_comm_allgather(c, inplace ? out + (size_t)me * bpr : in, out, bpr));
        }
        int ok = 1;
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < bpr; i++)
                if (out[(size_t)r * bpr + i] != (unsigned char)(mix((uint64_t)r * 7919 + i) & 255)) ok = 0;
        TCHECK(ok, "allgather n=%d bytes %zu rank %d%s differs", n, bpr, me, inplace ? " (in place)" : "");
        free(in);
        free(out);
    }
    /* broadcast from several roots */
    const size_t bcs[] = {0, 1, 7, 100003, 300001};
    for (int bi = 0; bi < 5; bi++) {
        int roots[3] = {0, n - 1, n / 2};
        for (int ri = 0; ri < 3; ri++) {
            int root = roots[ri];
            size_t bytes = bcs[bi];
            unsigned char *b = malloc(bytes + 1);
            TCHECK(b != NULL, "allocation");
            if (!b) continue;
            for (size_t i = 0; i < bytes; i++) b[i] = me == root ? (unsigned char)(i * 31 + (size_t)root) : 0xEE;
            TCHECK_OK(cl_comm_broadcast(c, b, bytes, root));
            int ok = 1;
            for (size_t i = 0; i < bytes; i++)
                if (b[i] != (unsigned char)(i * 31 + (size_t)root)) ok = 0;
            TCHECK(ok, "broadcast n=%d bytes %zu root %d rank %d differs", n, bytes, root, me);
            free(b);
        }
    }
    h = fnv(h, &(uint64_t){v_checks(c, full)}, sizeof(uint64_t));
    h = fnv(h, &(uint64_t){half_checks(c, full)}, sizeof(uint64_t));
    TCHECK_OK(cl_comm_barrier(c));
out:
    free(buf);
    free(ref);
    free(dbuf);
    free(dref);
    return h;
}

/* ---- point-to-point ------------------------------------------------------- */

static void p2p_checks(cl_comm *c) {
    int n = cl_comm_size(c), me = cl_comm_rank(c);
    int right = (me + 1) % n, left = (me + n - 1) % n;
    int threads = strcmp(cl_comm_backend(c), "threads") == 0;
    /* tags out of order: sends 5..1, receives posted 1..5 */
    if (n >= 2) {
        int sbuf[5][64], rbuf[5][64];
        cl_request *sr[5], *rr[5];
        for (int t = 5; t >= 1; t--) {
            for (int i = 0; i < 64; i++) sbuf[t - 1][i] = me * 1000 + t * 100 + i;
            TCHECK_OK(cl_comm_isend(c, sbuf[t - 1], sizeof sbuf[0], right, t, &sr[t - 1]));
        }
        for (int t = 1; t <= 5; t++) TCHECK_OK(cl_comm_irecv(c, rbuf[t - 1], sizeof rbuf[0], left, t, &rr[t - 1]));
        for (int t = 5; t >= 1; t--) TCHECK_OK(cl_comm_wait(c, rr[t - 1]));
        for (int t = 1; t <= 5; t++) TCHECK_OK(cl_comm_wait(c, sr[t - 1]));
        int ok = 1;
        for (int t = 1; t <= 5; t++)
            for (int i = 0; i < 64; i++)
                if (rbuf[t - 1][i] != left * 1000 + t * 100 + i) ok = 0;
        TCHECK(ok, "rank %d: messages from rank %d with tags out of order differ", me, left);
        /* one tag, several messages: in the order sent */
        int a[3] = {11, 22, 33}, b[3] = {0, 0, 0};
        cl_request *s3[3], *r3[3];
        for (int i = 0; i < 3; i++) TCHECK_OK(cl_comm_isend(c, &a[i], sizeof a[i], right, 9, &s3[i]));
        for (int i = 0; i < 3; i++) TCHECK_OK(cl_comm_irecv(c, &b[i], sizeof b[i], left, 9, &r3[i]));
        for (int i = 2; i >= 0; i--) TCHECK_OK(cl_comm_wait(c, r3[i]));
        for (int i = 0; i < 3; i++) TCHECK_OK(cl_comm_wait(c, s3[i]));
        TCHECK(b[0] == 11 && b[1] == 22 && b[2] == 33, "rank %d: same-tag messages out of order: %d %d %d", me, b[0], b[1], b[2]);
        /* blocking, in pairs (even sends first), with a zero-byte message */
        int partner = me % 2 == 0 ? me + 1 : me - 1;
        if (partner < n) {
            double x = me + 0.5, y = -1;
            if (me % 2 == 0) {
                TCHECK_OK(cl_comm_send(c, &x, sizeof x, partner, 3));
                TCHECK_OK(cl_comm_recv(c, &y, sizeof y, partner, 3));
                TCHECK_OK(cl_comm_send(c, NULL, 0, partner, 4));
            } else {
                TCHECK_OK(cl_comm_recv(c, &y, sizeof y, partner, 3));
                TCHECK_OK(cl_comm_send(c, &x, sizeof x, partner, 3));
                TCHECK_OK(cl_comm_recv(c, NULL, 0, partner, 4));
            }
            TCHECK(y == partner + 0.5, "rank %d: blocking recv from %d got %g", me, partner, y);
        }
        /* size mismatch: the receive fails (and, on threads, the send) */
        if (partner < n) {
            char big[8] = "1234567", small[4];
            if (me % 2 == 0) {
                cl_status s = cl_comm_send(c, big, sizeof big, partner, 77);
                if (threads) TCHECK(s == CL_ERR_COMM && strstr(cl_last_error(), "bytes"), "mismatched send: %s: %s",
                                    cl_status_name(s), cl_last_error());
            } else {
                cl_status s = cl_comm_recv(c, small, sizeof small, partner, 77);
                TCHECK(s == CL_ERR_COMM && strstr(cl_last_error(), "bytes"), "mismatched recv: %s: %s", cl_status_name(s),
                       cl_last_error());
            }
            /* large enough for OpenMPI's single-copy path, which once wrote
             * the whole send into the smaller receive buffer (a heap
             * overflow under ASan): the receive must fail, naming both sizes */
            enum { BIG = 64448, SMALL = 32832 };
            char *buf = calloc(BIG, 1);
            TCHECK(buf != NULL, "no memory");
            if (buf && me % 2 == 0) {
                cl_status s = cl_comm_send(c, buf, BIG, partner, 78);
                if (threads) TCHECK(s == CL_ERR_COMM, "mismatched large send: %s", cl_status_name(s));
            } else if (buf) {
                char *rbuf = malloc(SMALL); /* exactly SMALL bytes, so ASan sees any overrun */
                cl_status s = rbuf ? cl_comm_recv(c, rbuf, SMALL, partner, 78) : CL_ERR_OOM;
                TCHECK(s == CL_ERR_COMM && strstr(cl_last_error(), "the send has 64448 bytes, the receive expects 32832"),
                       "mismatched large recv: %s: %s", cl_status_name(s), cl_last_error());
                free(rbuf);
            }
            free(buf);
        }
    }
    /* to oneself, non-blocking */
    {
        int x = 42 + me, y = 0;
        cl_request *s, *r;
        TCHECK_OK(cl_comm_irecv(c, &y, sizeof y, me, 0, &r));
        TCHECK_OK(cl_comm_isend(c, &x, sizeof x, me, 0, &s));
        int done = 0;
        for (int i = 0; i < 10000 && !done; i++) {
            TCHECK_OK(cl_comm_test(c, r, &done));
            if (!done) sleep_s(0.0001);
        }
        TCHECK(done, "rank %d: a receive from oneself never completed", me);
        if (!done) TCHECK_OK(cl_comm_wait(c, r));
        TCHECK_OK(cl_comm_wait(c, s));
        TCHECK(y == 42 + me, "rank %d: self message %d", me, y);
    }
    /* bad arguments */
    {
        int x = 0;
        cl_request *r = (cl_request *)&x;
        TCHECK(cl_comm_send(c, &x, sizeof x, n, 0) == CL_ERR_INVALID && strstr(cl_last_error(), "out of range"),
               "peer out of range: %s", cl_last_error());
        TCHECK(cl_comm_isend(c, &x, sizeof x, 0, -1, &r) == CL_ERR_INVALID && r == NULL, "negative tag: %s", cl_last_error());
        TCHECK(cl_comm_send(c, &x, sizeof x, me, 0) == CL_ERR_INVALID, "blocking send to self: %s", cl_last_error());
        TCHECK(cl_comm_allreduce(c, NULL, 3, CL_F32, CL_RED_SUM) == CL_ERR_INVALID, "NULL buffer: %s", cl_last_error());
        TCHECK(cl_comm_broadcast(c, &x, sizeof x, n) == CL_ERR_INVALID, "root out of range: %s", cl_last_error());
        TCHECK(cl_comm_wait(c, NULL) == CL_OK, "wait(NULL)");
    }
    TCHECK_OK(cl_comm_barrier(c));
}

/* ---- split ---------------------------------------------------------------- */

static void split_checks(cl_comm *world) {
    int n = cl_comm_size(world), me = cl_comm_rank(world);
    cl_comm *sub = NULL;
    TCHECK_OK(cl_comm_split(world, me % 2, -me, &sub)); /* even / odd, reversed */
    TCHECK(sub != NULL, "rank %d: split gave no communicator", me);
    if (!sub) return;
    int k = (n - me % 2 + 1) / 2; /* ranks of my parity */
    int expect_rank = (n - 1 - me) / 2; /* the members above me come first */
    TCHECK(cl_comm_size(sub) == k && cl_comm_rank(sub) == expect_rank && cl_comm_world_rank(sub) == me,
           "rank %d: sub size %d rank %d world %d, expected size %d rank %d", me, cl_comm_size(sub), cl_comm_rank(sub),
           cl_comm_world_rank(sub), k, expect_rank);
    coll_checks(sub, 0);
    /* the world ranks summed in group-rank order (largest first) */
    float x = (float)me, want = 0;
    int first = 1;
    for (int r = n - 1; r >= 0; r--)
        if (r % 2 == me % 2) {
            want = first ? (float)r : want + (float)r;
            first = 0;
        }
    TCHECK_OK(cl_comm_allreduce(sub, &x, 1, CL_F32, CL_RED_SUM));
    TCHECK(x == want, "rank %d: sum over my parity group %g, expected %g", me, x, want);
    /* tag spaces are separate: rank 0 -> rank 2 with tag 1 on both */
    if (n >= 3 && (me == 0 || me == 2)) {
        int peer_sub = (n - 1 - (2 - me)) / 2; /* the other one's rank in the even group */
        if (me == 0) {
            int a = 111, b = 222;
            cl_request *r1, *r2;
            TCHECK_OK(cl_comm_isend(world, &a, sizeof a, 2, 1, &r1));
            TCHECK_OK(cl_comm_isend(sub, &b, sizeof b, peer_sub, 1, &r2));
            TCHECK_OK(cl_comm_wait(world, r1));
            TCHECK_OK(cl_comm_wait(sub, r2));
        } else {
            int a = 0, b = 0;
            TCHECK_OK(cl_comm_recv(sub, &b, sizeof b, peer_sub, 1));
            TCHECK_OK(cl_comm_recv(world, &a, sizeof a, 0, 1));
            TCHECK(a == 111 && b == 222, "rank 2: world message %d, group message %d", a, b);
        }
    }
    /* a negative color gets no communicator; the others a group of n - 1 */
    cl_comm *rest = (cl_comm *)1;
    TCHECK_OK(cl_comm_split(world, me == 0 ? -1 : 5, 0, &rest));
    if (me == 0) TCHECK(rest == NULL, "a negative color gave a communicator");
    else {
        TCHECK(rest && cl_comm_size(rest) == n - 1 && cl_comm_rank(rest) == me - 1, "rank %d: rest size %d rank %d", me,
               rest ? cl_comm_size(rest) : -1, rest ? cl_comm_rank(rest) : -1);
        if (rest) {
            double v = 1;
            TCHECK_OK(cl_comm_allreduce(rest, &v, 1, CL_F64, CL_RED_SUM));
            TCHECK(v == n - 1, "sum over the rest %g", v);
        }
    }
    cl_comm_free(rest);
    /* sub is left for the launcher to free */
}

/* ---- non-blocking progress ------------------------------------------------ */

static void overlap_checks(cl_comm *c) {
    int n = cl_comm_size(c), me = cl_comm_rank(c);
    size_t cnt = 1 << 18;
    float *a = malloc(cnt * sizeof *a), *b = malloc(cnt * sizeof *b), *w = malloc(cnt * sizeof *w);
    TCHECK(a && b && w, "allocation");
    if (!a || !b || !w) goto out;
    for (size_t i = 0; i < cnt; i++) a[i] = (float)(me + 1);
    /* progress without the caller: poll cl_comm_test while computing */
    cl_request *r = NULL;
    TCHECK_OK(cl_comm_iallreduce(c, a, cnt, CL_F32, CL_RED_SUM, &r));
    int done = 0;
    double t0 = cl_now(), work = 0;
    while (!done && cl_now() - t0 < 20) {
        for (size_t i = 0; i < cnt; i++) w[i] = (float)i * 0.5f; /* the caller's own work */
        work += w[cnt - 1];
        TCHECK_OK(cl_comm_test(c, r, &done));
        if (!done) sleep_s(0.001);
    }
    TCHECK(done, "rank %d: iallreduce made no progress in 20 s while the caller only computed and tested", me);
    if (!done) TCHECK_OK(cl_comm_wait(c, r));
    float want = (float)n * (float)(n + 1) / 2;
    TCHECK(a[0] == want && a[cnt - 1] == want, "iallreduce gave %g, expected %g", a[0], want);
    TCHECK(work > 0, "work");
    /* issue order: two non-blocking, one blocking, waits in reverse order */
    for (size_t i = 0; i < cnt; i++) {
        a[i] = 1;
        b[i] = (float)me;
    }
    float x = (float)me;
    cl_request *ra, *rb;
    TCHECK_OK(cl_comm_iallreduce(c, a, cnt, CL_F32, CL_RED_SUM, &ra));
    TCHECK_OK(cl_comm_iallreduce(c, b, cnt, CL_F32, CL_RED_MAX, &rb));
    TCHECK_OK(cl_comm_allreduce(c, &x, 1, CL_F32, CL_RED_AVG));
    TCHECK_OK(cl_comm_wait(c, rb));
    TCHECK_OK(cl_comm_wait(c, ra));
    TCHECK(a[5] == (float)n && b[5] == (float)(n - 1), "queued results %g %g", a[5], b[5]);
    float s = 0;
    for (int r2 = 0; r2 < n; r2++) s += (float)r2;
    TCHECK(x == s / (float)n, "blocking average behind the queue %g", x);
out:
    free(a);
    free(b);
    free(w);
}

/* ---- bytes communicated ------------------------------------------------------ */

/* The expected counts of comm.h's formulas, written again here. */
static size_t chunk_len(size_t count, int p, int r) {
    size_t blocks = (count + 15) / 16, q = blocks / (size_t)p, rem = blocks % (size_t)p;
    size_t b0 = (size_t)r * q + ((size_t)r < rem ? (size_t)r : rem), b1 = b0 + q + ((size_t)r < rem);
    b0 = b0 * 16 < count ? b0 * 16 : count;
    b1 = b1 * 16 < count ? b1 * 16 : count;
    return b1 - b0;
}

static void want_coll(cl_comm_counts *w, cl_comm_kind k, size_t n, size_t es, int p, int r, int root) {
    uint64_t s = 0, v = 0, q = (uint64_t)p - 1;
    if (p > 1 && k == CL_COMM_KIND_ALLREDUCE) {
        size_t c = chunk_len(n, p, r);
        s = v = (uint64_t)p * n * es <= 65536 ? q * n * es : (n - c + q * c) * es;
    } else if (p > 1 && (k == CL_COMM_KIND_REDUCE_SCATTER || k == CL_COMM_KIND_ALLGATHER)) {
        s = v = q * n * es;
    } else if (p > 1 && n > 0 && k == CL_COMM_KIND_BROADCAST && (n < 65536 || p == 2)) {
        int vr = (r - root + p) % p;
        v = vr ? n : 0;
        for (int m = 1; m < p; m *= 2) /* children: below v's lowest set bit */
            if ((vr == 0 || m < (vr & -vr)) && vr + m < p) s += n;
    } else if (p > 1 && n > 0 && k == CL_COMM_KIND_BROADCAST) {
        size_t c = chunk_len(n, p, r);
        s = r == root ? n - c + q * c : (q - 1) * c;
        v = r == root ? 0 : n;
    }
    w->calls[k]++;
    w->sent[k] += s;
    w->recvd[k] += v;
}

static void counts_match(cl_comm *c, const cl_comm_counts *w, const char *what, size_t n) {
    cl_comm_counts got;
    cl_comm_counts_get(c, &got);
    for (int k = 0; k < CL_COMM_NKINDS; k++)
        TCHECK(got.calls[k] == w->calls[k] && got.sent[k] == w->sent[k] && got.recvd[k] == w->recvd[k],
               "rank %d of %d: after %s of %zu: %s counts %llu calls, %llu sent, %llu received; expected %llu, %llu, "
               "%llu",
               cl_comm_rank(c), cl_comm_size(c), what, n, cl_comm_kind_name(k), (unsigned long long)got.calls[k],
               (unsigned long long)got.sent[k], (unsigned long long)got.recvd[k], (unsigned long long)w->calls[k],
               (unsigned long long)w->sent[k], (unsigned long long)w->recvd[k]);
}

/* Every kind, both paths of all-reduce and broadcast, uneven chunks, the
 * non-blocking forms; then the sum over ranks: what is sent is received. */
static void count_checks(cl_comm *c) {
    int p = cl_comm_size(c), me = cl_comm_rank(c);
    cl_comm_counts w, got, zero;
    memset(&w, 0, sizeof w);
    memset(&zero, 0, sizeof zero);
    cl_comm_counts_get(NULL, &got);
    TCHECK(!memcmp(&got, &zero, sizeof got), "the counts of no communicator are not 0");
    TCHECK(!strcmp(cl_comm_kind_name(CL_COMM_KIND_REDUCE_SCATTER), "reduce_scatter") &&
               !strcmp(cl_comm_kind_name(CL_COMM_NKINDS), "?"),
           "kind names");
    cl_comm_counts_reset(c);
    size_t cap = (size_t)8 * 100003 + 64;
    float *a = calloc(cap, sizeof *a), *b = calloc(cap, sizeof *b);
    TCHECK(a && b, "allocation");
    if (!a || !b) goto out;
    const size_t ar[] = {0, 1, 17, 1000, 4096, 16385, 100003};
    for (size_t i = 0; i < sizeof ar / sizeof *ar; i++) {
        TCHECK_OK(cl_comm_allreduce(c, a, ar[i], CL_F32, CL_RED_SUM));
        want_coll(&w, CL_COMM_KIND_ALLREDUCE, ar[i], 4, p, me, 0);
        counts_match(c, &w, "allreduce", ar[i]);
        TCHECK_OK(cl_comm_allreduce(c, (double *)a, ar[i] / 2, CL_F64, CL_RED_MAX));
        want_coll(&w, CL_COMM_KIND_ALLREDUCE, ar[i] / 2, 8, p, me, 0);
        counts_match(c, &w, "allreduce_f64", ar[i] / 2);
    }
    cl_request *r = NULL;
    TCHECK_OK(cl_comm_iallreduce(c, a, 50001, CL_F32, CL_RED_SUM, &r));
    want_coll(&w, CL_COMM_KIND_ALLREDUCE, 50001, 4, p, me, 0);
    counts_match(c, &w, "iallreduce (issued)", 50001);
    TCHECK_OK(cl_comm_wait(c, r));
    const size_t rs[] = {0, 5, 1000, 30001};
    for (size_t i = 0; i < sizeof rs / sizeof *rs; i++) {
        TCHECK_OK(cl_comm_reduce_scatter(c, a, b, rs[i], CL_F32, CL_RED_SUM));
        want_coll(&w, CL_COMM_KIND_REDUCE_SCATTER, rs[i], 4, p, me, 0);
        TCHECK_OK(cl_comm_ireduce_scatter(c, a, b, rs[i], CL_F32, CL_RED_AVG, &r));
        TCHECK_OK(cl_comm_wait(c, r));
        want_coll(&w, CL_COMM_KIND_REDUCE_SCATTER, rs[i], 4, p, me, 0);
        counts_match(c, &w, "reduce_scatter", rs[i]);
        TCHECK_OK(cl_comm_allgather(c, a, b, rs[i] * 3));
        want_coll(&w, CL_COMM_KIND_ALLGATHER, rs[i] * 3, 1, p, me, 0);
        TCHECK_OK(cl_comm_iallgather(c, a, b, rs[i] * 3, &r));
        TCHECK_OK(cl_comm_wait(c, r));
        want_coll(&w, CL_COMM_KIND_ALLGATHER, rs[i] * 3, 1, p, me, 0);
        counts_match(c, &w, "allgather", rs[i] * 3);
    }
    /* the _v forms: reduce_scatter_v sends every other rank's piece and
     * receives p - 1 of its own; allgather_v the other way round */
    size_t *vc = calloc((size_t)p, sizeof *vc);
    TCHECK(vc != NULL, "allocation");
    for (int k = 0; k < VPAT && vc; k++) {
        v_counts(k, p, vc);
        uint64_t total = 0, q = (uint64_t)p - 1, mine = vc[me];
        for (int j = 0; j < p; j++) total += vc[j];
        TCHECK_OK(cl_comm_reduce_scatter_v(c, a, b, vc, CL_F32, CL_RED_SUM));
        TCHECK_OK(cl_comm_ireduce_scatter_v(c, a, b, vc, CL_F32, CL_RED_MAX, &r));
        TCHECK_OK(cl_comm_wait(c, r));
        w.calls[CL_COMM_KIND_REDUCE_SCATTER] += 2;
        w.sent[CL_COMM_KIND_REDUCE_SCATTER] += p > 1 ? 2 * (total - mine) * 4 : 0;
        w.recvd[CL_COMM_KIND_REDUCE_SCATTER] += 2 * q * mine * 4;
        counts_match(c, &w, "reduce_scatter_v of pattern", (size_t)k);
        TCHECK_OK(cl_comm_allgather_v(c, a, b, vc));
        TCHECK_OK(cl_comm_iallgather_v(c, a, b, vc, &r));
        TCHECK_OK(cl_comm_wait(c, r));
        w.calls[CL_COMM_KIND_ALLGATHER] += 2;
        w.sent[CL_COMM_KIND_ALLGATHER] += 2 * q * mine;
        w.recvd[CL_COMM_KIND_ALLGATHER] += p > 1 ? 2 * (total - mine) : 0;
        counts_match(c, &w, "allgather_v of pattern", (size_t)k);
    }
    free(vc);
    const size_t bc[] = {0, 100, 65535, 65536, 200001};
    for (size_t i = 0; i < sizeof bc / sizeof *bc; i++)
        for (int root = 0; root < p; root += p > 2 ? p - 2 : 1) {
            TCHECK_OK(cl_comm_broadcast(c, a, bc[i], root));
            want_coll(&w, CL_COMM_KIND_BROADCAST, bc[i], 1, p, me, root);
            counts_match(c, &w, "broadcast", bc[i]);
        }
    if (p >= 2 && me < 2) { /* rank 0 sends 1000 bytes and 0 bytes to rank 1 */
        if (me == 0) {
            TCHECK_OK(cl_comm_send(c, a, 1000, 1, 3));
            TCHECK_OK(cl_comm_send(c, a, 0, 1, 4));
        } else {
            TCHECK_OK(cl_comm_recv(c, a, 1000, 0, 3));
            TCHECK_OK(cl_comm_recv(c, a, 0, 0, 4));
        }
        cl_comm_kind k = me == 0 ? CL_COMM_KIND_SEND : CL_COMM_KIND_RECV;
        w.calls[k] += 2;
        (me == 0 ? w.sent : w.recvd)[k] += 1000;
        counts_match(c, &w, "send/recv", (size_t)1000);
    }
    /* over the ranks, every byte sent is received once */
    cl_comm_counts_get(c, &got);
    cl_comm_counts *all = calloc((size_t)p, sizeof *all);
    TCHECK(all != NULL, "allocation");
    if (all) {
        TCHECK_OK(cl_comm_allgather(c, &got, all, sizeof got));
        for (int k = CL_COMM_KIND_RECV; k < CL_COMM_NKINDS; k++) { /* a send's bytes are its recv's */
            int ks = k == CL_COMM_KIND_RECV ? CL_COMM_KIND_SEND : k;
            uint64_t s = 0, v = 0;
            for (int q = 0; q < p; q++) s += all[q].sent[ks], v += all[q].recvd[k];
            TCHECK(s == v, "%d ranks: %s: %llu bytes sent, %llu received", p, cl_comm_kind_name(k),
                   (unsigned long long)s, (unsigned long long)v);
        }
        free(all);
    }
    cl_comm_counts_reset(c);
    cl_comm_counts_get(c, &got);
    TCHECK(!memcmp(&got, &zero, sizeof got), "rank %d: counts after a reset are not 0", me);
out:
    free(a);
    free(b);
}

/* ---- all-to-all ------------------------------------------------------------ */

/* Elements sender i sends receiver j in pattern pat: 0 none at all; 1 random
 * counts 0..40, about a third 0; 2 only the pairs (i, i+1 mod n); 3 large
 * pieces (tens of KiB: mpi's pieces) with zeros; 4 one element each. */
static size_t a2a_count(int pat, int n, int i, int j) {
    uint64_t h = mix((uint64_t)pat * 7919u + (uint64_t)i * 131u + (uint64_t)j);
    switch (pat) {
    case 0: return 0;
    case 1: return h % 3 == 0 ? 0 : (size_t)(h >> 8) % 41;
    case 2: return j == (i + 1) % n ? 5 + (size_t)i : 0;
    case 3: return h % 4 == 0 ? 0 : 9000 + (size_t)(h >> 8) % 9000;
    default: return 1;
    }
}

/* The bytes of element k of sender i's piece for j: bytes move unchanged,
 * so any bits do (NaN patterns included). */
static unsigned char a2a_byte(int i, int j, size_t k, size_t b) {
    return (unsigned char)(mix(mix((uint64_t)i << 40 ^ (uint64_t)j << 32 ^ k) + b) >> 24);
}

/* cl_comm_alltoallv over every pattern and format, with packed (NULL) and
 * scattered offsets (pieces in reverse rank order, gaps between them that
 * must stay untouched), and cl_comm_alltoall; every received byte against
 * what its sender put there, the byte counters against comm.h's formula.
 * Returns h folded with a hash of what arrived. */
static uint64_t a2a_checks(cl_comm *c, uint64_t h, int full) {
    int n = cl_comm_size(c), me = cl_comm_rank(c);
    const cl_dtype fmts[4] = {CL_F32, CL_BF16, CL_F16, CL_F64};
    size_t *sc = calloc((size_t)n * 4, sizeof *sc), *so = sc + n, *rc = sc + 2 * n, *ro = sc + 3 * n;
    TCHECK(sc != NULL, "allocation");
    if (!sc) return h;
    for (int pat = 0; pat < 5; pat++) {
        if (pat == 3 && !full) continue;
        for (int fi = 0; fi < 4; fi++)
            for (int scatter = 0; scatter < 2; scatter++) {
                cl_dtype dt = fmts[fi];
                size_t es = cl_dtype_size(dt), sn = 0, rn = 0, gap = scatter ? 3 : 0;
                for (int k = n - 1; k >= 0; k--) { /* scattered: reverse order, with gaps */
                    int j = scatter ? k : n - 1 - k;
                    sc[j] = a2a_count(pat, n, me, j);
                    rc[j] = a2a_count(pat, n, j, me);
                    so[j] = sn;
                    ro[j] = rn;
                    sn += sc[j] + gap;
                    rn += rc[j] + gap;
                }
                unsigned char *in = malloc(sn * es + 1), *out = malloc(rn * es + 1);
                TCHECK(in && out, "allocation");
                if (!in || !out) {
                    free(in);
                    free(out);
                    continue;
                }
                memset(in, 0x5A, sn * es);
                memset(out, 0xC3, rn * es);
                for (int j = 0; j < n; j++)
                    for (size_t k = 0; k < sc[j] * es; k++) in[so[j] * es + k] = a2a_byte(me, j, k / es, k % es);
                cl_comm_counts before, after;
                cl_comm_counts_get(c, &before);
                cl_status s = cl_comm_alltoallv(c, in, sc, scatter ? so : NULL, out, rc, scatter ? ro : NULL, dt);
                TCHECK(s == CL_OK, "alltoallv pattern %d %s scatter %d over %d ranks: %s", pat, cl_dtype_name(dt),
                       scatter, n, cl_last_error());
                cl_comm_counts_get(c, &after);
                uint64_t ws = 0, wr = 0;
                for (int j = 0; j < n; j++)
                    if (j != me) {
                        ws += sc[j] * es;
                        wr += rc[j] * es;
                    }
                TCHECK(after.calls[CL_COMM_KIND_ALLTOALL] == before.calls[CL_COMM_KIND_ALLTOALL] + 1 &&
                           after.sent[CL_COMM_KIND_ALLTOALL] - before.sent[CL_COMM_KIND_ALLTOALL] == ws &&
                           after.recvd[CL_COMM_KIND_ALLTOALL] - before.recvd[CL_COMM_KIND_ALLTOALL] == wr,
                       "alltoallv counters: sent %llu recvd %llu, want %llu %llu",
                       (unsigned long long)(after.sent[CL_COMM_KIND_ALLTOALL] - before.sent[CL_COMM_KIND_ALLTOALL]),
                       (unsigned long long)(after.recvd[CL_COMM_KIND_ALLTOALL] - before.recvd[CL_COMM_KIND_ALLTOALL]),
                       (unsigned long long)ws, (unsigned long long)wr);
                TCHECK(after.seconds[CL_COMM_KIND_ALLTOALL] > before.seconds[CL_COMM_KIND_ALLTOALL] &&
                           after.seconds[CL_COMM_KIND_ALLREDUCE] == before.seconds[CL_COMM_KIND_ALLREDUCE],
                       "alltoallv's seconds: %.9f before, %.9f after; all-reduce's %.9f, %.9f", before.seconds[CL_COMM_KIND_ALLTOALL],
                       after.seconds[CL_COMM_KIND_ALLTOALL], before.seconds[CL_COMM_KIND_ALLREDUCE], after.seconds[CL_COMM_KIND_ALLREDUCE]);
                size_t bad = 0, gapbad = 0;
                for (int j = 0; j < n; j++) {
                    for (size_t k = 0; k < rc[j] * es; k++) bad += out[ro[j] * es + k] != a2a_byte(j, me, k / es, k % es);
                    if (scatter)
                        for (size_t k = 0; k < gap * es; k++) gapbad += out[(ro[j] + rc[j]) * es + k] != 0xC3;
                }
                TCHECK(bad == 0 && gapbad == 0,
                       "alltoallv pattern %d %s scatter %d, rank %d of %d: %zu bytes wrong, %zu gap bytes written",
                       pat, cl_dtype_name(dt), scatter, me, n, bad, gapbad);
                h = fnv(h, out, rn * es);
                free(in);
                free(out);
            }
    }
    /* the equal-count form, against the same bytes */
    const size_t cprs[4] = {0, 1, 7, 1000};
    for (int t = 0; t < 4; t++) {
        size_t cpr = cprs[t], es = 2;
        unsigned char *in = malloc((size_t)n * cpr * es + 1), *out = malloc((size_t)n * cpr * es + 1);
        TCHECK(in && out, "allocation");
        if (in && out) {
            for (int j = 0; j < n; j++)
                for (size_t k = 0; k < cpr * es; k++) in[(size_t)j * cpr * es + k] = a2a_byte(me, j, k / es, k % es);
            TCHECK_OK(cl_comm_alltoall(c, in, out, cpr, CL_BF16));
            size_t bad = 0;
            for (int j = 0; j < n; j++)
                for (size_t k = 0; k < cpr * es; k++) bad += out[(size_t)j * cpr * es + k] != a2a_byte(j, me, k / es, k % es);
            TCHECK(bad == 0, "alltoall of %zu per rank over %d ranks: %zu bytes wrong", cpr, n, bad);
            h = fnv(h, out, (size_t)n * cpr * es);
        }
        free(in);
        free(out);
    }
    free(sc);
    return h;
}

/* alltoallv on the groups of a split (odd and even ranks; an expert-parallel
 * group drawn from the data-parallel ranks is such a group). */
static uint64_t a2a_split_checks(cl_comm *world, uint64_t h) {
    cl_comm *g = NULL;
    int me = cl_comm_rank(world);
    TCHECK_OK(cl_comm_split(world, me % 2, me, &g));
    if (g) h = a2a_checks(g, h, 0);
    cl_comm_free(g);
    return h;
}

/* Threads only: rank 1 expects one element more from rank 0 than rank 0
 * sends it; every rank fails alike naming the pair, none copies. */
static cl_status a2a_mismatch_rank(cl_comm *w, void *p) {
    char (*msg)[400] = p;
    int n = cl_comm_size(w), me = cl_comm_rank(w);
    size_t sc[4], rc[4];
    float in[16] = {0}, out[16];
    for (int j = 0; j < n; j++) {
        sc[j] = 2;
        rc[j] = 2 + (me == 1 && j == 0);
    }
    cl_status s = cl_comm_alltoallv(w, in, sc, NULL, out, rc, NULL, CL_F32);
    snprintf(msg[me], sizeof msg[me], "%s", s == CL_OK ? "ok" : cl_last_error());
    return s == CL_ERR_INVALID ? CL_OK : CL_ERR_INTERNAL;
}

/* Bad arguments, on a world of one rank (a call refused on one rank of
 * several would leave the others waiting). */
static cl_status a2a_bad_rank(cl_comm *w, void *p) {
    (void)p;
    size_t one = 1, two = 2;
    float a[4] = {0}, b[4];
    TCHECK(cl_comm_alltoallv(w, a, NULL, NULL, b, &one, NULL, CL_F32) == CL_ERR_INVALID &&
               strstr(cl_last_error(), "send_counts is NULL"),
           "NULL send counts: %s", cl_last_error());
    TCHECK(cl_comm_alltoallv(w, a, &one, NULL, b, &two, NULL, CL_F32) == CL_ERR_INVALID &&
               strstr(cl_last_error(), "sends itself 1 elements but receives 2"),
           "self counts: %s", cl_last_error());
    TCHECK(cl_comm_alltoallv(w, a, &two, NULL, a + 1, &two, NULL, CL_F32) == CL_ERR_INVALID &&
               strstr(cl_last_error(), "overlap"),
           "overlap: %s", cl_last_error());
    TCHECK(cl_comm_alltoall(w, a, b, 1, (cl_dtype)99) == CL_ERR_INVALID && strstr(cl_last_error(), "unknown format"),
           "unknown format: %s", cl_last_error());
    TCHECK(cl_comm_alltoallv(w, NULL, &one, NULL, b, &one, NULL, CL_F32) == CL_ERR_INVALID, "NULL in");
    TCHECK_OK(cl_comm_alltoallv(w, NULL, &(size_t){0}, NULL, NULL, &(size_t){0}, NULL, CL_F32));
    return CL_OK;
}

/* One alltoall of 2 floats a peer (for CLEAVE_FAULT by the name alltoall). */
static cl_status a2a_once(cl_comm *w, void *p) {
    (void)p;
    float in[16] = {0}, out[16];
    return cl_comm_alltoall(w, in, out, 2, CL_F32);
}

static void a2a_fail_checks(void) {
    char msg[4][400];
    memset(msg, 0, sizeof msg);
    cl_launch_opts o = {.timeout_s = 30};
    cl_status s = cl_launch_threads(3, a2a_mismatch_rank, msg, &o);
    CHECK(s == CL_OK, "alltoallv mismatch: %s", cl_last_error());
    for (int r = 0; r < 3; r++)
        CHECK(strstr(msg[r], "alltoallv: the ranks disagree: rank 0 sends 2 elements to rank 1, which expects 3"),
              "rank %d: alltoallv with disagreeing counts: %s", r, msg[r]);
    CHECK_OK(cl_launch_threads(1, a2a_bad_rank, NULL, &o));
    setenv("CLEAVE_FAULT", "rank:1:alltoall:1", 1);
    s = cl_launch_threads(3, a2a_once, NULL, &o);
    unsetenv("CLEAVE_FAULT");
    CHECK(s == CL_ERR_COMM && strstr(cl_last_error(), "rank 1 failed in alltoall: injected fault"),
          "CLEAVE_FAULT=rank:1:alltoall:1: %s: %s", cl_status_name(s), cl_last_error());
}

/* ---- rank functions -------------------------------------------------------- */

typedef struct {
    uint64_t hash;
    const char *hash_file;
} all_arg;

static cl_status all_checks(cl_comm *world, void *p) {
    all_arg *arg = p;
    uint64_t h = coll_checks(world, 1);
    h = a2a_checks(world, h, 1);
    if (cl_comm_size(world) >= 2) h = a2a_split_checks(world, h);
    /* one hash over every rank's results, in rank order */
    int n = cl_comm_size(world);
    uint64_t *hs = calloc((size_t)n, sizeof *hs);
    TCHECK(hs != NULL, "allocation");
    if (hs) {
        TCHECK_OK(cl_comm_allgather(world, &h, hs, sizeof h));
        uint64_t wh = fnv(0xcbf29ce484222325ull, hs, (size_t)n * sizeof *hs);
        if (cl_comm_rank(world) == 0) {
            arg->hash = wh;
            if (arg->hash_file) {
                FILE *f = fopen(arg->hash_file, "w");
                TCHECK(f != NULL, "cannot write %s", arg->hash_file);
                if (f) {
                    fprintf(f, "%016llx\n", (unsigned long long)wh);
                    fclose(f);
                }
            }
        }
        free(hs);
    }
    p2p_checks(world);
    if (cl_comm_size(world) >= 2) split_checks(world);
    overlap_checks(world);
    count_checks(world);
    return CL_OK;
}

/* Per-rank outcomes of the failure tests. */
typedef struct {
    cl_status st[16];
    char msg[16][400];
    double t_end[16];
    int mode;
} fail_arg;

static cl_status record(fail_arg *a, int me, cl_status s) {
    a->st[me] = s;
    snprintf(a->msg[me], sizeof a->msg[me], "%s", s == CL_OK ? "" : cl_last_error());
    a->t_end[me] = cl_now();
    return s;
}

enum { F_INJECT, F_RETURN, F_RECV_TIMEOUT, F_COLL_TIMEOUT, F_DEADLOCK, F_INJECT_ASYNC, F_MISMATCH, F_MISMATCH_V, F_MISMATCH_IV, F_INJECT_V };

static cl_status fail_rank(cl_comm *w, void *p) {
    fail_arg *a = p;
    int me = cl_comm_rank(w);
    float x[100] = {0};
    cl_status s = CL_OK;
    switch (a->mode) {
    case F_INJECT: /* CLEAVE_FAULT=rank:3:op:2 */
        s = cl_comm_barrier(w);
        for (int i = 0; i < 5 && s == CL_OK; i++) s = cl_comm_allreduce(w, x, 100, CL_F32, CL_RED_SUM);
        return record(a, me, s);
    case F_RETURN:
        if (me == 2) {
            record(a, me, CL_OK);
            return cl_error(CL_ERR_INVALID, "boom");
        }
        s = cl_comm_allreduce(w, x, 100, CL_F32, CL_RED_SUM);
        if (s == CL_OK) s = cl_comm_recv(w, x, sizeof x, 2, 1);
        return record(a, me, s);
    case F_RECV_TIMEOUT:
        if (me == 0) sleep_s(0.3); /* so that rank 1's timeout comes first */
        s = me == 1 ? cl_comm_recv(w, x, sizeof x, 0, 7) : cl_comm_barrier(w);
        return record(a, me, s);
    case F_COLL_TIMEOUT:
        if (me == 2) {
            sleep_s(2.0);
            return record(a, me, CL_OK);
        }
        return record(a, me, cl_comm_allreduce(w, x, 100, CL_F32, CL_RED_SUM));
    case F_DEADLOCK: /* both send first: no buffering, so neither completes */
        return record(a, me, cl_comm_send(w, x, sizeof x, 1 - me, 0));
    case F_INJECT_ASYNC: { /* CLEAVE_FAULT=rank:1:allreduce:2, in a split group */
        cl_comm *sub = NULL;
        s = cl_comm_split(w, 0, me, &sub);
        cl_request *r = NULL;
        if (s == CL_OK) s = cl_comm_iallreduce(sub, x, 100, CL_F32, CL_RED_SUM, &r);
        if (s == CL_OK) s = cl_comm_iallreduce(sub, x + 50, 50, CL_F32, CL_RED_SUM, &r);
        if (s == CL_OK) s = cl_comm_wait(sub, r); /* the first request is left for the launcher */
        return record(a, me, s);
    }
    case F_MISMATCH:
        return record(a, me, cl_comm_allreduce(w, x, me == 1 ? 99 : 100, CL_F32, CL_RED_SUM));
    case F_MISMATCH_V: { /* rank 1 gives other counts[1] and counts[2] (the sums agree) */
        size_t cnt[3] = {5, me == 1 ? 9 : 10, me == 1 ? 11 : 10};
        return record(a, me, cl_comm_reduce_scatter_v(w, x, x + 50, cnt, CL_F32, CL_RED_SUM));
    }
    case F_MISMATCH_IV: { /* the same counts, non-blocking, but rank 2 gathers with the plain all-gather */
        size_t cnt[3] = {7, 0, 7};
        cl_request *r = NULL;
        if (me == 2) s = cl_comm_allgather(w, x, x + 50, 7);
        else s = cl_comm_iallgather_v(w, x, x + 50, cnt, &r);
        if (s == CL_OK) s = cl_comm_wait(w, r);
        return record(a, me, s);
    }
    case F_INJECT_V: { /* CLEAVE_FAULT=rank:1:reduce_scatter:2 */
        size_t cnt[3] = {3, 0, 4};
        s = cl_comm_reduce_scatter(w, x, x + 50, 4, CL_F32, CL_RED_SUM);
        if (s == CL_OK) s = cl_comm_allgather_v(w, x, x + 50, cnt);
        if (s == CL_OK) s = cl_comm_reduce_scatter_v(w, x, x + 50, cnt, CL_F32, CL_RED_SUM);
        return record(a, me, s);
    }
    }
    return CL_ERR_INTERNAL;
}

static void fail_checks(void) {
    fail_arg a;
    cl_launch_opts o = {.timeout_s = 30};
    double t0;
    cl_status s;

    /* an injected fault on rank 3's second operation (its first allreduce) */
    memset(&a, 0, sizeof a);
    a.mode = F_INJECT;
    setenv("CLEAVE_FAULT", "rank:3:op:2", 1);
    t0 = cl_now();
    s = cl_launch_threads(5, fail_rank, &a, &o);
    double dt = cl_now() - t0;
    unsetenv("CLEAVE_FAULT");
    CHECK(s == CL_ERR_COMM && strstr(cl_last_error(), "rank 3 failed in allreduce: injected fault"),
          "injected fault: %s: %s", cl_status_name(s), cl_last_error());
    CHECK(dt < 2, "the injected fault took %.2f s to end the launch", dt);
    for (int r = 0; r < 5; r++)
        CHECK(a.st[r] == CL_ERR_COMM && strstr(a.msg[r], r == 3 ? "injected fault" : "rank 3 failed in allreduce"),
              "rank %d after rank 3's fault: %s: %s", r, cl_status_name(a.st[r]), a.msg[r]);

    /* a rank returns an error; the others wait in allreduce */
    memset(&a, 0, sizeof a);
    a.mode = F_RETURN;
    t0 = cl_now();
    s = cl_launch_threads(4, fail_rank, &a, &o);
    dt = cl_now() - t0;
    CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "rank 2 failed: boom"), "returned error: %s: %s",
          cl_status_name(s), cl_last_error());
    CHECK(dt < 2, "a failed rank took %.2f s to end the launch", dt);
    for (int r = 0; r < 4; r++)
        if (r != 2)
            CHECK(a.st[r] == CL_ERR_COMM && strstr(a.msg[r], "rank 2 failed: boom") && a.t_end[r] - t0 < 1,
                  "rank %d after rank 2 failed: %s: %s (%.2f s)", r, cl_status_name(a.st[r]), a.msg[r], a.t_end[r] - t0);

    /* a receive that nothing matches times out */
    memset(&a, 0, sizeof a);
    a.mode = F_RECV_TIMEOUT;
    cl_launch_opts one = {.timeout_s = 1};
    t0 = cl_now();
    s = cl_launch_threads(2, fail_rank, &a, &one);
    dt = cl_now() - t0;
    CHECK(s == CL_ERR_COMM && strstr(cl_last_error(), "rank 1 failed in recv from rank 0 (tag 7): timed out after 1.0 s"),
          "recv timeout: %s: %s", cl_status_name(s), cl_last_error());
    CHECK(strstr(a.msg[1], "rank 1: timed out after 1.0 s in recv from rank 0 (tag 7)"), "rank 1's own message: %s", a.msg[1]);
    CHECK(a.st[0] == CL_ERR_COMM && strstr(a.msg[0], "rank 1 failed"), "rank 0 in its barrier: %s", a.msg[0]);
    CHECK(dt > 0.9 && dt < 3, "the recv timeout took %.2f s (timeout 1 s)", dt);

    /* a collective that one rank never joins */
    memset(&a, 0, sizeof a);
    a.mode = F_COLL_TIMEOUT;
    cl_launch_opts half = {.timeout_s = 0.5};
    s = cl_launch_threads(3, fail_rank, &a, &half);
    CHECK(s == CL_ERR_COMM && strstr(cl_last_error(), "timed out after 0.5 s waiting for rank 2"), "collective timeout: %s",
          cl_last_error());
    CHECK(a.st[0] == CL_ERR_COMM && a.st[1] == CL_ERR_COMM && a.st[2] == CL_OK, "collective timeout statuses %d %d %d",
          a.st[0], a.st[1], a.st[2]);

    /* send/send deadlock: the threads backend never buffers */
    memset(&a, 0, sizeof a);
    a.mode = F_DEADLOCK;
    s = cl_launch_threads(2, fail_rank, &a, &half);
    CHECK(s == CL_ERR_COMM && strstr(cl_last_error(), "timed out after 0.5 s") && strstr(cl_last_error(), "send to rank"),
          "deadlock: %s", cl_last_error());

    /* a fault on a non-blocking allreduce in a split group */
    memset(&a, 0, sizeof a);
    a.mode = F_INJECT_ASYNC;
    setenv("CLEAVE_FAULT", "rank:1:allreduce:2", 1);
    t0 = cl_now();
    s = cl_launch_threads(3, fail_rank, &a, &o);
    dt = cl_now() - t0;
    unsetenv("CLEAVE_FAULT");
    CHECK(s == CL_ERR_COMM && strstr(cl_last_error(), "rank 1 failed in allreduce: injected fault"), "async fault: %s",
          cl_last_error());
    CHECK(dt < 2, "the async fault took %.2f s", dt);
    CHECK(a.st[0] == CL_ERR_COMM && a.st[2] == CL_ERR_COMM && strstr(a.msg[0], "rank 1 failed"), "async fault: rank 0: %s",
          a.msg[0]);

    /* ranks that disagree about a count */
    memset(&a, 0, sizeof a);
    a.mode = F_MISMATCH;
    s = cl_launch_threads(3, fail_rank, &a, &o);
    CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "disagree"), "mismatch: %s: %s", cl_status_name(s), cl_last_error());
    for (int r = 0; r < 3; r++) CHECK(a.st[r] == CL_ERR_INVALID, "mismatch rank %d: %s", r, a.msg[r]);

    /* ranks that disagree about the per-rank counts: every rank fails, naming the entry */
    memset(&a, 0, sizeof a);
    a.mode = F_MISMATCH_V;
    s = cl_launch_threads(3, fail_rank, &a, &o);
    CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "counts[1] = 10, rank 1 passed counts[1] = 9"),
          "counts mismatch: %s: %s", cl_status_name(s), cl_last_error());
    for (int r = 0; r < 3; r++)
        CHECK(a.st[r] == CL_ERR_INVALID &&
                  strstr(a.msg[r], "reduce_scatter_v: the ranks disagree: rank 0 passed counts[1] = 10, rank 1 passed counts[1] = 9"),
              "counts mismatch rank %d: %s", r, a.msg[r]);
    memset(&a, 0, sizeof a);
    a.mode = F_MISMATCH_IV;
    s = cl_launch_threads(3, fail_rank, &a, &o);
    for (int r = 0; r < 3; r++)
        CHECK(a.st[r] == CL_ERR_INVALID && strstr(a.msg[r], "rank 0 called allgather_v (count 14") &&
                  strstr(a.msg[r], "rank 2 called allgather (count 7"),
              "allgather_v against allgather, rank %d: %s", r, a.msg[r]);

    /* the _v forms count as their kind for CLEAVE_FAULT */
    memset(&a, 0, sizeof a);
    a.mode = F_INJECT_V;
    setenv("CLEAVE_FAULT", "rank:1:reduce_scatter:2", 1);
    s = cl_launch_threads(3, fail_rank, &a, &o);
    unsetenv("CLEAVE_FAULT");
    CHECK(s == CL_ERR_COMM && strstr(cl_last_error(), "rank 1 failed in reduce_scatter_v: injected fault"),
          "fault in reduce_scatter_v: %s", cl_last_error());
    for (int r = 0; r < 3; r++)
        CHECK(a.st[r] == CL_ERR_COMM && strstr(a.msg[r], r == 1 ? "injected fault" : "rank 1 failed in reduce_scatter_v"),
              "rank %d after rank 1's fault in reduce_scatter_v: %s", r, a.msg[r]);

    /* bad launches */
    setenv("CLEAVE_FAULT", "rank:x:op:1", 1);
    s = cl_launch_threads(2, fail_rank, &a, &o);
    unsetenv("CLEAVE_FAULT");
    CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "CLEAVE_FAULT"), "bad CLEAVE_FAULT: %s", cl_last_error());
    CHECK(cl_launch_threads(0, fail_rank, &a, &o) == CL_ERR_INVALID, "0 ranks");
    CHECK(cl_launch_threads(2, NULL, &a, &o) == CL_ERR_INVALID, "NULL fn");
    cl_launch_opts neg = {.timeout_s = -1};
    CHECK(cl_launch_threads(2, fail_rank, &a, &neg) == CL_ERR_INVALID, "negative timeout");
    if (!cl_mpi_available()) {
        int argc = 0;
        char **argv = NULL;
        s = cl_launch_mpi(&argc, &argv, fail_rank, &a, NULL);
        CHECK(s == CL_ERR_UNSUPPORTED && strstr(cl_last_error(), "without MPI"), "launch_mpi without MPI: %s",
              cl_last_error());
    }
}

/* ---- start-up agreement ----------------------------------------------------- */

/* Ranks 2 and 3 of 5 give another --b; everyone else agrees. */
static cl_status agree_rank(cl_comm *w, void *p) {
    int me = cl_comm_rank(w), differ = p != NULL;
    const char *names[] = {"--a", "--b", "--c"};
    const char *vals[] = {"1", differ && (me == 2 || me == 3) ? "x" : "y", me == 4 ? "z" : "w"};
    cl_status s = cl_comm_agree(w, names, vals, 3);
    if (differ) {
        TCHECK(s == CL_ERR_INVALID && !strcmp(cl_last_error(), "ranks disagree on --b: rank 0 has y, rank 2 has x, rank 3 has x"),
               "rank %d: agree: %s: %s", me, cl_status_name(s), cl_last_error());
        return CL_OK;
    }
    TCHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "ranks disagree on --c: rank 0 has w, rank 4 has z"),
           "rank %d: agree on --c: %s", me, cl_last_error());
    vals[2] = "w";
    s = cl_comm_agree(w, names, vals, me == 1 ? 2 : 3); /* rank 1 compares fewer: another build */
    TCHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "different builds"), "rank %d: agree, fewer names: %s", me,
           cl_last_error());
    TCHECK_OK(cl_comm_agree(w, names, vals, 3));
    return CL_OK;
}

static void agree_checks(void) {
    int one = 1;
    CHECK_OK(cl_launch_threads(5, agree_rank, &one, NULL));
    CHECK_OK(cl_launch_threads(5, agree_rank, NULL, NULL));
}

/* ---- MPI-only modes -------------------------------------------------------- */

static cl_status mpi_fault_loop(cl_comm *w, void *p) {
    (void)p;
    float x[1000] = {0};
    for (int i = 0; i < 50; i++) CL_TRY(cl_comm_allreduce(w, x, 1000, CL_F32, CL_RED_SUM));
    return CL_OK;
}

static cl_status mpi_recv_timeout(cl_comm *w, void *p) {
    (void)p;
    int x;
    if (cl_comm_rank(w) == 1) return cl_comm_recv(w, &x, sizeof x, 0, 7);
    return cl_comm_barrier(w);
}

/* Rank 1 claims a larger piece of its own than the others expect (both
 * past the 32 KiB where OpenMPI copies straight into the receive buffer):
 * the others' receives must fail naming both sizes, never overrun. */
static cl_status mpi_counts_mismatch(cl_comm *w, void *p) {
    (void)p;
    int n = cl_comm_size(w), me = cl_comm_rank(w);
    size_t *cnt = calloc((size_t)n, sizeof *cnt), total = 0;
    if (!cnt) return CL_ERR_OOM;
    for (int r = 0; r < n; r++) total += cnt[r] = 40000 + (r == 1 && me == 1 ? 4000 : 0);
    unsigned char *in = calloc(44000, 1), *out = malloc(total); /* exactly total: ASan sees any overrun */
    cl_status s = in && out ? cl_comm_allgather_v(w, in, out, cnt) : CL_ERR_OOM;
    free(in);
    free(out);
    free(cnt);
    return s;
}

/* The same for alltoallv: rank 0 sends rank 1 more than rank 1 expects. */
static cl_status mpi_a2a_mismatch(cl_comm *w, void *p) {
    (void)p;
    int n = cl_comm_size(w), me = cl_comm_rank(w);
    size_t *sc = calloc(2 * (size_t)n, sizeof *sc), *rc = sc ? sc + n : NULL;
    if (!sc) return CL_ERR_OOM;
    for (int j = 0; j < n; j++) sc[j] = rc[j] = 10000;
    if (me == 0) sc[1] = 11000;
    unsigned char *in = calloc((size_t)n * 11000, 4), *out = malloc((size_t)n * 10000 * 4);
    cl_status s = in && out ? cl_comm_alltoallv(w, in, sc, NULL, out, rc, NULL, CL_F32) : CL_ERR_OOM;
    free(in);
    free(out);
    free(sc);
    return s;
}

static cl_status mpi_hang(cl_comm *w, void *p) {
    const char *pidfile = p;
    CL_TRY(cl_comm_barrier(w));
    if (cl_comm_rank(w) == 1) {
        FILE *f = fopen(pidfile, "w");
        if (f) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
    }
    for (double t0 = cl_now(); cl_now() - t0 < 120;) {
        float x = 1;
        CL_TRY(cl_comm_allreduce(w, &x, 1, CL_F32, CL_RED_SUM));
        sleep_s(0.05);
    }
    return CL_OK;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--has-mpi")) {
        printf("MPI: %s\n", cl_mpi_available() ? "yes" : "no");
        return 0;
    }
    if (argc >= 4 && !strcmp(argv[1], "--threads-hash")) {
        all_arg a = {0, argv[3]};
        cl_status s = cl_launch_threads(atoi(argv[2]), all_checks, &a, NULL);
        CHECK(s == CL_OK, "launch: %s", cl_last_error());
        return cl_test_report("test_comm --threads-hash");
    }
    if (argc >= 2 && !strcmp(argv[1], "--mpi")) {
        cl_launch_opts o = {.timeout_s = 60};
        cl_status s;
        if (argc >= 3 && !strcmp(argv[2], "--fault")) {
            s = cl_launch_mpi(&argc, &argv, mpi_fault_loop, NULL, &o);
        } else if (argc >= 3 && !strcmp(argv[2], "--counts-mismatch")) {
            s = cl_launch_mpi(&argc, &argv, mpi_counts_mismatch, NULL, &o);
        } else if (argc >= 3 && !strcmp(argv[2], "--a2a-mismatch")) {
            s = cl_launch_mpi(&argc, &argv, mpi_a2a_mismatch, NULL, &o);
        } else if (argc >= 3 && !strcmp(argv[2], "--recv-timeout")) {
            cl_launch_opts one = {.timeout_s = 1};
            s = cl_launch_mpi(&argc, &argv, mpi_recv_timeout, NULL, &one);
        } else if (argc >= 4 && !strcmp(argv[2], "--hang")) {
            cl_launch_opts lng = {.timeout_s = 600};
            s = cl_launch_mpi(&argc, &argv, mpi_hang, argv[3], &lng);
        } else {
            all_arg a = {0, argc >= 4 && !strcmp(argv[2], "--hash") ? argv[3] : NULL};
            s = cl_launch_mpi(&argc, &argv, all_checks, &a, &o);
        }
        CHECK(s == CL_OK, "cl_launch_mpi: %s: %s", cl_status_name(s), cl_last_error());
        return cl_test_report("test_comm --mpi");
    }

    for (int n = 1; n <= 8; n++) {
        all_arg a = {0, NULL};
        double t0 = cl_now();
        cl_status s = cl_launch_threads(n, all_checks, &a, NULL);
        CHECK(s == CL_OK, "world of %d: %s: %s", n, cl_status_name(s), cl_last_error());
        printf("threads, %d ranks: %.2f s\n", n, cl_now() - t0);
    }
    /* the same results on every run */
    all_arg h1 = {0, NULL}, h2 = {0, NULL};
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/test_comm_hash_%d", tmp, (int)getpid());
    h1.hash_file = path;
    h2.hash_file = path;
    CHECK_OK(cl_launch_threads(5, all_checks, &h1, NULL));
    CHECK_OK(cl_launch_threads(5, all_checks, &h2, NULL));
    CHECK(h1.hash == h2.hash && h1.hash != 0, "two runs of 5 ranks hash %llx and %llx", (unsigned long long)h1.hash,
          (unsigned long long)h2.hash);
    remove(path);
    fail_checks();
    a2a_fail_checks();
    agree_checks();
    return cl_test_report("test_comm");
}
