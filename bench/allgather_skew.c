/* An all-gather of per-rank pieces (cl_comm_allgather_v, threads backend)
 * when one rank holds the whole output, against the same bytes held in
 * equal pieces.
 *
 *   allgather_skew [RANKS] [MAX_MIB]      (2 ranks and 64 MiB by default)
 *
 * Why: ZeRO 3 gathers each unit from the replicas' shards; a unit lying in
 * one shard (GPT-2's 154 MB embedding in rank 0's at dp 2) is one rank's
 * piece. When each rank pushed its own piece into every rank's output, the
 * holder copied the whole unit n times and the others nothing; now each
 * rank copies an n-th of the output, whoever holds it. The ratio skewed /
 * equal is the figure: about n with pushes, about 1 when the copies are
 * split. Sizes 1 MiB to MAX_MIB by fours, each the gathered output; the time is
 * the fastest of 5 runs of back-to-back operations (runs of the two forms
 * taking turns), rank 0's clock between barriers. */
#include "cleave/comm.h"

#include <stdio.h>
#include <stdlib.h>

enum { SIZES = 8, RUNS = 5 };

typedef struct {
    int n, nsizes;
    size_t size[SIZES];
    double t[2][SIZES]; /* [equal, skewed][size] seconds an operation, written by rank 0 */
} skew;

static cl_status timed(cl_comm *c, const char *in, char *out, const size_t *counts, int iters, double *t) {
    CL_TRY(cl_comm_barrier(c));
    double t0 = cl_now();
    for (int i = 0; i < iters; i++) CL_TRY(cl_comm_allgather_v(c, in, out, counts));
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
    cl_status st = in && out && counts ? CL_OK : cl_error(CL_ERR_OOM, "allgather_skew: no memory for %zu bytes", max);
    for (size_t i = 0; st == CL_OK && i < max; i++) in[i] = (char)(i * 7 + (size_t)me), out[i] = 0;
    for (int si = 0; st == CL_OK && si < s->nsizes; si++) {
        size_t total = s->size[si];
        int iters = (int)((256u << 20) / total);
        double best[2] = {1e30, 1e30};
        for (int run = 0; st == CL_OK && run < RUNS; run++)
            for (int form = 0; st == CL_OK && form < 2; form++) {
                for (int r = 0; r < n; r++) counts[r] = form ? (r == 0 ? total : 0) : total / (size_t)n + (r == n - 1 ? total % (size_t)n : 0);
                double t = 0;
                st = timed(c, in, out, counts, iters, &t);
                if (t < best[form]) best[form] = t;
            }
        if (st == CL_OK && me == 0) s->t[0][si] = best[0], s->t[1][si] = best[1];
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
        fprintf(stderr, "usage: allgather_skew [RANKS 2..64] [MAX_MIB >= 1]\n");
        return 2;
    }
    for (size_t b = 1u << 20; s.nsizes < SIZES && b <= (size_t)max_mib << 20; b <<= 2) s.size[s.nsizes++] = b;
    cl_launch_opts o = {.timeout_s = 600};
    if (cl_launch_threads(s.n, rank_main, &s, &o) != CL_OK) {
        fprintf(stderr, "allgather_skew: %s\n", cl_last_error());
        return 1;
    }
    printf("threads backend, %d ranks: cl_comm_allgather_v, the output in equal pieces / all in rank 0's\n", s.n);
    printf("%10s | %10s %10s | %6s\n", "output", "equal ms", "skewed ms", "ratio");
    for (int si = 0; si < s.nsizes; si++)
        printf("%7zu MiB | %10.3f %10.3f | %6.2f\n", s.size[si] >> 20, s.t[0][si] * 1e3, s.t[1][si] * 1e3,
               s.t[1][si] / s.t[0][si]);
    return 0;
}
