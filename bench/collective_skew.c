/* The collectives with per-rank pieces (cl_comm_allgather_v and
 * cl_comm_reduce_scatter_v, F32 sums; threads backend) when one rank's
 * piece is the whole, against the same bytes in equal pieces.
 *
 *   collective_skew [RANKS] [MAX_MIB]      (2 ranks and 64 MiB by default)
 *
 * Why: ZeRO's gathers and gradient reduce-scatters are cut by the
 * replicas' shards, and a unit or a bucket lying in one shard (GPT-2's
 * 154 MB embedding in rank 0's at dp 2; at dp 2 every bucket but one) is
 * one rank's piece. When each rank copied or summed only its own piece,
 * that rank did all of the call's work while the others waited; now each
 * does an n-th of it, whoever's piece it lies in. The ratio skewed / equal
 * is the figure: up to n when one rank works, about 1 when the work is
 * split. Sizes 1 MiB to MAX_MIB by fours (the gathered output, the summed
 * input); the time is the fastest of 5 runs of back-to-back operations
 * (runs of the forms taking turns), rank 0's clock between barriers. */
#include "cleave/comm.h"

#include <stdio.h>
#include <stdlib.h>

enum { SIZES = 8, RUNS = 5 };

typedef struct {
    int n, nsizes;
    size_t size[SIZES];
    double t[2][2][SIZES]; /* [allgather_v, reduce_scatter_v][equal, skewed][size] seconds an operation, by rank 0 */
} skew;

static cl_status timed(cl_comm *c, int op, const char *in, char *out, const size_t *counts, int iters, double *t) {
    CL_TRY(cl_comm_barrier(c));
    double t0 = cl_now();
    for (int i = 0; i < iters; i++)
        CL_TRY(op ? cl_comm_reduce_scatter_v(c, in, out, counts, CL_F32, CL_RED_SUM) : cl_comm_allgather_v(c, in, out, counts));
    CL_TRY(cl_comm_barrier(c));
    *t = (cl_now() - t0) / iters;
    return CL_OK;
}

static cl_status rank_main(cl_comm *c, void *arg) {
    skew *s = arg;
    int n = cl_comm_size(c), me = cl_comm_rank(c);
    size_t max = s->size[s->nsizes - 1];
    char *in = malloc(max), *out = malloc(max);
    size_t *counts = calloc((size_t)n, sizeof *counts);
    cl_status st = in && out && counts ? CL_OK : cl_error(CL_ERR_OOM, "collective_skew: no memory for %zu bytes", max);
    for (size_t i = 0; st == CL_OK && i < max / sizeof(float); i++) ((float *)in)[i] = (float)(i % 1000) + (float)me, ((float *)out)[i] = 0;
    for (int si = 0; st == CL_OK && si < s->nsizes; si++) {
        size_t total = s->size[si] / sizeof(float); /* floats; allgather_v's counts in bytes */
        int iters = (int)((256u << 20) / s->size[si]);
        double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}};
        for (int run = 0; st == CL_OK && run < RUNS; run++)
            for (int op = 0; op < 2; op++)
                for (int form = 0; st == CL_OK && form < 2; form++) {
                    for (int r = 0; r < n; r++) {
                        counts[r] = form ? (r == 0 ? total : 0) : total / (size_t)n + (r == n - 1 ? total % (size_t)n : 0);
                        if (!op) counts[r] *= sizeof(float);
                    }
                    double t = 0;
                    st = timed(c, op, in, out, counts, iters, &t);
                    if (t < best[op][form]) best[op][form] = t;
                }
        for (int op = 0; st == CL_OK && me == 0 && op < 2; op++) s->t[op][0][si] = best[op][0], s->t[op][1][si] = best[op][1];
    }
    free(in);
    free(out);
    free(counts);
    return st;
}

int main(int argc, char **argv) {
    static skew s;
    s.n = argc > 1 ? atoi(argv[1]) : 2;
    int max_mib = argc > 2 ? atoi(argv[2]) : 64;
    if (s.n < 2 || s.n > 64 || max_mib < 1) {
        fprintf(stderr, "usage: collective_skew [RANKS 2..64] [MAX_MIB >= 1]\n");
        return 2;
    }
    for (size_t b = 1u << 20; s.nsizes < SIZES && b <= (size_t)max_mib << 20; b <<= 2) s.size[s.nsizes++] = b;
    cl_launch_opts o = {.timeout_s = 600};
    if (cl_launch_threads(s.n, rank_main, &s, &o) != CL_OK) {
        fprintf(stderr, "collective_skew: %s\n", cl_last_error());
        return 1;
    }
    printf("threads backend, %d ranks: the pieces equal / all in rank 0's, ms an operation\n", s.n);
    printf("%10s | %10s %10s %6s | %10s %10s %6s\n", "size", "allgather_v", "skewed", "ratio", "red_scat_v", "skewed", "ratio");
    for (int si = 0; si < s.nsizes; si++) {
        printf("%6zu MiB", s.size[si] >> 20);
        for (int op = 0; op < 2; op++)
            printf(" | %10.3f %10.3f %6.2f", s.t[op][0][si] * 1e3, s.t[op][1][si] * 1e3, s.t[op][1][si] / s.t[op][0][si]);
        printf("\n");
    }
    return 0;
}
