/* Tests of the tensor-parallel region mappings (include/cleave/tp.h).
 *
 * Inputs are rank-valued small integers (rank r's element i is
 * (r+1)*1000 + i), so every sum is exact in float and the results can be
 * compared bitwise with expectations computed serially here: each mapping,
 * each direction, on groups of 1..4 thread ranks and on the groups of a
 * split communicator; in place where the mapping allows it; and the
 * transpose property, <fwd(x), y> == <x, bwd(y)> with each side summed
 * over the ranks (a tensor every rank holds whole, COPY's input and
 * REDUCE's output, counted once), exact with these integers. comm NULL is tp = 1: every mapping a copy.
 * cl_tp_forward_n's GATHER of BF16 values: each rank's 16-bit patterns in place, odd counts too. */
#include "cleave/tp.h"
#include "common/check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Rank r's input element i, salted so x and y differ. */
static float inval(int r, size_t i, int salt) { return (float)((r + 1) * 1000 + (int)i + salt * 7); }

/* The expected output of mapping m in direction dir (0 forward) on rank
 * me of p, for inputs inval(*, *, salt); n as in tp.h. */
static float expect(cl_tp_mapping m, int dir, int p, int me, size_t n, size_t i, int salt) {
    int reduce = 0, gather = 0, scatter = 0;
    switch (m) {
    case CL_TP_COPY: reduce = dir == 1; break;
    case CL_TP_REDUCE: reduce = dir == 0; break;
    case CL_TP_GATHER: gather = dir == 0, scatter = dir == 1; break;
    case CL_TP_SCATTER: scatter = dir == 0, gather = dir == 1; break;
    default: break;
    }
    if (gather) return inval((int)(i / n), i % n, salt); /* rank i/n's shard */
    float s = 0;
    size_t at = scatter ? (size_t)me * n + i : i; /* my rows of everyone's full input */
    if (!reduce && !scatter) return inval(me, i, salt);
    for (int r = 0; r < p; r++) s += inval(r, at, salt);
    return s;
}

static size_t in_len(cl_tp_mapping m, int dir, int p, size_t n) {
    int full = (m == CL_TP_SCATTER && dir == 0) || (m == CL_TP_GATHER && dir == 1);
    return full ? (size_t)p * n : n;
}

static size_t out_len(cl_tp_mapping m, int dir, int p, size_t n) {
    int full = (m == CL_TP_GATHER && dir == 0) || (m == CL_TP_SCATTER && dir == 1);
    return full ? (size_t)p * n : n;
}

static cl_status apply(const cl_tp *tp, cl_tp_mapping m, int dir, const float *in, float *out, size_t n) {
    return dir ? cl_tp_backward(tp, m, in, out, n) : cl_tp_forward(tp, m, in, out, n);
}

/* Every mapping and direction on c (NULL: tp = 1), for a few n. */
static void mapping_checks(cl_comm *c, const char *label) {
    cl_tp tp = cl_tp_of(c);
    int p = tp.size, me = tp.rank;
    const size_t ns[] = {0, 1, 5, 16, 37, 1000};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        size_t n = ns[k], full = (size_t)p * n;
        float *in = malloc((full + 1) * sizeof *in), *out = malloc((full + 1) * sizeof *out);
        float *x = malloc((full + 1) * sizeof *x), *y = malloc((full + 1) * sizeof *y);
        TCHECK(in && out && x && y, "allocation");
        if (!in || !out || !x || !y) goto next;
        for (int m = 0; m < CL_TP_NMAPPINGS; m++)
            for (int dir = 0; dir < 2; dir++) {
                size_t ni = in_len(m, dir, p, n), no = out_len(m, dir, p, n);
                for (size_t i = 0; i < ni; i++) in[i] = inval(me, i, 0);
                for (size_t i = 0; i < no; i++) out[i] = -1;
                TCHECK_OK(apply(&tp, m, dir, in, out, n));
                size_t bad = 0, first = 0;
                for (size_t i = 0; i < no; i++)
                    if (out[i] != expect(m, dir, p, me, n, i, 0) && bad++ == 0) first = i;
                TCHECK(bad == 0, "%s: rank %d of %d: %s %s, n %zu: %zu wrong, first [%zu] = %g, expected %g", label, me,
                       p, cl_tp_mapping_name(m), dir ? "backward" : "forward", n, bad, first, out[first],
                       expect(m, dir, p, me, n, first, 0));
                /* in place, where the mapping allows it */
                if (m == CL_TP_COPY || m == CL_TP_REDUCE) {
                    TCHECK_OK(apply(&tp, m, dir, in, in, n));
                    TCHECK(!memcmp(in, out, n * sizeof *in), "%s: rank %d of %d: %s %s in place differs", label, me,
                           p, cl_tp_mapping_name(m), dir ? "backward" : "forward");
                }
            }
        /* transpose: <fwd(x), y> == <x, bwd(y)>, each summed over the ranks */
        for (int m = 0; m < CL_TP_NMAPPINGS; m++) {
            size_t nx = in_len(m, 0, p, n), ny = out_len(m, 0, p, n);
            /* COPY's input and REDUCE's output are one tensor that every rank
             * holds whole: the same on every rank, its product counted once */
            int xrep = m == CL_TP_COPY, yrep = m == CL_TP_REDUCE;
            for (size_t i = 0; i < nx; i++) x[i] = (float)(((xrep ? 0 : me) + 2 * (int)i) % 5 - 2);
            for (size_t i = 0; i < ny; i++) y[i] = (float)((3 * (yrep ? 0 : me) + (int)i) % 7 - 3);
            double d[2] = {0, 0};
            TCHECK_OK(cl_tp_forward(&tp, m, x, out, n));
            for (size_t i = 0; i < ny; i++) d[0] += (double)out[i] * y[i];
            TCHECK_OK(cl_tp_backward(&tp, m, y, out, n));
            for (size_t i = 0; i < nx; i++) d[1] += (double)x[i] * out[i];
            if (me > 0 && yrep) d[0] = 0;
            if (me > 0 && xrep) d[1] = 0;
            if (c) TCHECK_OK(cl_comm_allreduce(c, d, 2, CL_F64, CL_RED_SUM));
            TCHECK(d[0] == d[1], "%s: rank %d of %d: %s, n %zu: <fwd x, y> = %.17g, <x, bwd y> = %.17g", label, me, p,
                   cl_tp_mapping_name(m), n, d[0], d[1]);
        }
    next:
        free(in);
        free(out);
        free(x);
        free(y);
    }
    /* forward of one is backward of its partner */
    static const cl_tp_mapping partner[] = {CL_TP_REDUCE, CL_TP_COPY, CL_TP_SCATTER, CL_TP_GATHER};
    size_t n = 23, full = (size_t)p * n;
    float *in = malloc(full * sizeof *in), *a = malloc(full * sizeof *a), *b = malloc(full * sizeof *b);
    TCHECK(in && a && b, "allocation");
    if (in && a && b)
        for (int m = 0; m < CL_TP_NMAPPINGS; m++) {
            for (size_t i = 0; i < in_len(m, 0, p, n); i++) in[i] = inval(me, i, 3);
            TCHECK_OK(cl_tp_forward(&tp, m, in, a, n));
            TCHECK_OK(cl_tp_backward(&tp, partner[m], in, b, n));
            TCHECK(!memcmp(a, b, out_len(m, 0, p, n) * sizeof *a), "%s: rank %d: forward of %s is not backward of %s",
                   label, me, cl_tp_mapping_name(m), cl_tp_mapping_name(partner[m]));
        }
    free(in);
    free(a);
    free(b);
    /* GATHER of BF16 rows (bf16 sequence parallelism's norm outputs): n 16-bit values a rank, odd n too, the
     * shards packed at n values apart, as is and in place (the head's rows at their BF16 offset) */
    for (size_t n16 = 1; n16 <= 37; n16 += 18) {
        size_t all = (size_t)p * n16;
        uint16_t *sh = malloc(n16 * sizeof *sh), *g = malloc((all + 1) * sizeof *g), *gi = malloc(all * sizeof *gi);
        TCHECK(sh && g && gi, "allocation");
        if (sh && g && gi) {
            for (size_t i = 0; i < n16; i++) sh[i] = gi[(size_t)me * n16 + i] = (uint16_t)(0x3f80 + 97 * me + (int)i);
            g[all] = 0xbeef;
            TCHECK_OK(cl_tp_forward_n(&tp, CL_TP_GATHER, sh, g, n16, CL_BF16));
            TCHECK_OK(cl_tp_forward_n(&tp, CL_TP_GATHER, gi + (size_t)me * n16, gi, n16, CL_BF16));
            size_t bad = 0;
            for (size_t i = 0; i < all; i++) {
                uint16_t want = (uint16_t)(0x3f80 + 97 * (int)(i / n16) + (int)(i % n16));
                bad += g[i] != want || gi[i] != want;
            }
            TCHECK(bad == 0 && g[all] == 0xbeef, "%s: rank %d of %d: BF16 gather of %zu a rank: %zu wrong (or past the end)", label, me,
                   p, n16, bad);
        }
        free(sh);
        free(g);
        free(gi);
    }
}

static cl_status world_rank(cl_comm *w, void *arg) {
    (void)arg;
    mapping_checks(w, "world");
    cl_tp t = cl_tp_of(w);
    TCHECK(t.size == cl_comm_size(w) && t.rank == cl_comm_rank(w) && (t.size == 1 ? !t.comm : t.comm == w),
           "cl_tp_of(world of %d): size %d rank %d", cl_comm_size(w), t.size, t.rank);
    return CL_OK;
}

/* 4 ranks as two groups of 2 (0,2 and 1,3): the mappings see only their group. */
static cl_status split_rank(cl_comm *w, void *arg) {
    (void)arg;
    int me = cl_comm_rank(w);
    cl_comm *g = NULL;
    TCHECK_OK(cl_comm_split(w, me % 2, me, &g));
    if (!g) return CL_OK;
    TCHECK(cl_comm_size(g) == 2 && cl_comm_rank(g) == me / 2, "rank %d: group size %d rank %d", me, cl_comm_size(g),
           cl_comm_rank(g));
    mapping_checks(g, me % 2 ? "odd group" : "even group");
    cl_comm_free(g);
    return CL_OK;
}

int main(void) {
    CHECK(strcmp(cl_tp_mapping_name(CL_TP_SCATTER), "scatter") == 0 && strcmp(cl_tp_mapping_name(CL_TP_NMAPPINGS), "?") == 0,
          "mapping names");
    /* no communicator: tp = 1, every mapping a copy (or nothing in place) */
    cl_tp one = cl_tp_of(NULL);
    CHECK(one.size == 1 && one.rank == 0 && one.comm == NULL, "cl_tp_of(NULL): size %d rank %d", one.size, one.rank);
    mapping_checks(NULL, "no communicator");
    float v[3] = {1, 2, 3}, w[3] = {0};
    CHECK(cl_tp_forward(&one, CL_TP_NMAPPINGS, v, w, 3) == CL_ERR_INVALID, "an unknown mapping is refused");
    for (int n = 1; n <= 4; n++) CHECK_OK(cl_launch_threads(n, world_rank, NULL, NULL));
    CHECK_OK(cl_launch_threads(4, split_rank, NULL, NULL));
    return cl_test_report("test_tp");
}
