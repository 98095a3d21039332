/* Communicator benchmark: all-reduce, all-gather, reduce-scatter and
 * all-to-all bus bandwidth over sizes 4 KiB .. 256 MiB.
 *
 *   bench_comm [--ranks 2,4,8] [--max BYTES] [--min BYTES] [--time S]
 *       threads backend, against single-thread memcpy bandwidth
 *   mpirun -np N bench_comm --mpi [--max BYTES] ...
 *       mpi backend, against MPI's own MPI_Allreduce / MPI_Allgather /
 *       MPI_Reduce_scatter_block / MPI_Alltoall in the same run
 *
 * Why: the collectives are written for bandwidth (each rank moves
 * 2 (n-1)/n of an all-reduce's buffer); this shows how close they come to
 * what the memory system (threads) or MPI itself (mpi) gives.
 *
 * Definitions as in nccl-tests: size is the whole buffer (all-reduce: the
 * buffer; all-gather: the gathered output; reduce-scatter and all-to-all:
 * the input); algbw = size / time; busbw = algbw * 2 (n-1)/n for
 * all-reduce and algbw * (n-1)/n for the others. Times are the mean of
 * a run of back-to-back operations after 17 warm-up ones, sized to about
 * --time seconds (0.2 by default), measured by rank 0 between barriers; of
 * --repeat such runs (3 by default) the fastest is reported, the runs of
 * the different collectives taking turns, and memcpy is timed the same way. */
#include "cleave/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef CL_HAVE_MPI
#include <mpi.h>
#endif

typedef struct {
    size_t min, max;
    double target;
    int repeat; /* timed runs per point; the fastest is reported */
    int mpi;
    int nranks, rank;
    /* results, written by rank 0: [collective][size index] seconds; [4..] raw MPI */
    double t[8][32];
    double memcpy_gbs[32]; /* threads: rank 0's memcpy of the same size, timed just before */
    int nsizes;
} bench;

enum { B_AR = 0, B_AG, B_RS, B_A2A, B_MPI_AR, B_MPI_AG, B_MPI_RS, B_MPI_A2A, B_KINDS = B_MPI_AR };

static size_t size_at(const bench *b, int i) { return b->min << (2 * i); }

typedef cl_status (*op_fn)(cl_comm *c, float *a, float *x, size_t bytes, int which);

static cl_status run_op(cl_comm *c, float *a, float *x, size_t bytes, int which) {
    int n = cl_comm_size(c);
    size_t count = bytes / sizeof(float);
    switch (which) {
    case B_AR: return cl_comm_allreduce(c, a, count, CL_F32, CL_RED_SUM);
    case B_AG: return cl_comm_allgather(c, x, a, bytes / (size_t)n);
    case B_RS: return cl_comm_reduce_scatter(c, a, x, count / (size_t)n, CL_F32, CL_RED_SUM);
    case B_A2A: return cl_comm_alltoall(c, a, x, count / (size_t)n, CL_F32);
#ifdef CL_HAVE_MPI
    case B_MPI_AR:
        return MPI_Allreduce(MPI_IN_PLACE, a, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS
                   ? CL_OK
                   : cl_error(CL_ERR_COMM, "MPI_Allreduce failed");
    case B_MPI_AG:
        return MPI_Allgather(x, (int)(bytes / (size_t)n), MPI_BYTE, a, (int)(bytes / (size_t)n), MPI_BYTE,
                             MPI_COMM_WORLD) == MPI_SUCCESS
                   ? CL_OK
                   : cl_error(CL_ERR_COMM, "MPI_Allgather failed");
    case B_MPI_RS:
        return MPI_Reduce_scatter_block(a, x, (int)(count / (size_t)n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) ==
                       MPI_SUCCESS
                   ? CL_OK
                   : cl_error(CL_ERR_COMM, "MPI_Reduce_scatter_block failed");
    case B_MPI_A2A:
        return MPI_Alltoall(a, (int)(count / (size_t)n), MPI_FLOAT, x, (int)(count / (size_t)n), MPI_FLOAT,
                            MPI_COMM_WORLD) == MPI_SUCCESS
                   ? CL_OK
                   : cl_error(CL_ERR_COMM, "MPI_Alltoall failed");
#endif
    default: break;
    }
    return cl_error(CL_ERR_INVALID, "collective %d", which);
}

/* How many back-to-back operations fill about --time seconds (the same on
 * every rank), from 16 after a first warm-up operation. */
static cl_status count_iters(cl_comm *c, const bench *b, float *a, float *x, size_t bytes, int which, int *iters) {
    CL_TRY(run_op(c, a, x, bytes, which)); /* first touch, MPI's connection set-up */
    CL_TRY(cl_comm_barrier(c));
    double t0 = cl_now();
    for (int i = 0; i < 16; i++) CL_TRY(run_op(c, a, x, bytes, which));
    CL_TRY(cl_comm_barrier(c));
    double first = (cl_now() - t0) / 16;
    /* a few microseconds per operation needs tens of thousands of them to
     * rise above the VM's jitter */
    int n = first > 0 ? (int)(b->target / first) : 100000;
    if (n < 1) n = 1;
    if (n > 100000) n = 100000;
    *iters = n;
    return cl_comm_broadcast(c, iters, sizeof *iters, 0);
}

/* Mean seconds per operation of one run of iters (rank 0's clock; every
 * rank returns it). */
static cl_status time_op(cl_comm *c, float *a, float *x, size_t bytes, int which, int iters, double *out) {
    CL_TRY(cl_comm_barrier(c));
    double t0 = cl_now();
    for (int i = 0; i < iters; i++) CL_TRY(run_op(c, a, x, bytes, which));
    CL_TRY(cl_comm_barrier(c));
    double t = (cl_now() - t0) / iters;
    CL_TRY(cl_comm_broadcast(c, &t, sizeof t, 0));
    *out = t;
    return CL_OK;
}

static double memcpy_gbs(size_t bytes, double target, int repeat) {
    char *s = malloc(bytes), *d = malloc(bytes);
    if (!s || !d) {
        free(s);
        free(d);
        return 0;
    }
    memset(s, 1, bytes);
    memset(d, 2, bytes);
    double t0 = cl_now();
    memcpy(d, s, bytes);
    double first = cl_now() - t0;
    int iters = first > 0 ? (int)(target / first) : 1000;
    if (iters < 1) iters = 1;
    if (iters > 10000) iters = 10000;
    double t = 0;
    for (int r = 0; r < repeat; r++) {
        t0 = cl_now();
        for (int i = 0; i < iters; i++) {
            memcpy(d, s, bytes);
            __asm__ volatile("" ::"r"(d) : "memory");
        }
        double tr = (cl_now() - t0) / iters;
        if (r == 0 || tr < t) t = tr;
    }
    free(s);
    free(d);
    return (double)bytes / t / 1e9;
}

static cl_status rank_main(cl_comm *c, void *p) {
    bench *b = p;
    int n = cl_comm_size(c);
    if (b->mpi) {
        b->rank = cl_comm_rank(c);
        b->nranks = n;
    }
    size_t maxb = size_at(b, b->nsizes - 1);
    float *a = malloc(maxb), *x = malloc(maxb);
    if (!a || !x) {
        free(a);
        free(x);
        return cl_error(CL_ERR_OOM, "no memory for 2 x %zu bytes", maxb);
    }
    for (size_t i = 0; i < maxb / sizeof(float); i++) a[i] = x[i] = (float)(i % 1000) * 1e-3f;
    cl_status st = CL_OK;
    int kinds = b->mpi ? 2 * B_KINDS : B_KINDS;
    for (int si = 0; si < b->nsizes && st == CL_OK; si++) {
        size_t bytes = size_at(b, si);
        if (bytes % ((size_t)n * sizeof(float))) bytes -= bytes % ((size_t)n * sizeof(float));
        if (!b->mpi) { /* the reference at the same moment: the VM's bandwidth drifts */
            CL_TRY(cl_comm_barrier(c));
            if (cl_comm_rank(c) == 0) b->memcpy_gbs[si] = memcpy_gbs(size_at(b, si), b->target / 2, b->repeat);
            CL_TRY(cl_comm_barrier(c));
        }
        /* the repeats go round every collective (cleave's and MPI's) in
         * turn, so that both see the same moments of a drifting machine;
         * the fastest run of each is kept */
        int iters[2 * B_KINDS];
        for (int k = 0; k < kinds && st == CL_OK; k++) st = count_iters(c, b, a, x, bytes, k, &iters[k]);
        for (int r = 0; r < b->repeat && st == CL_OK; r++)
            for (int k = 0; k < kinds && st == CL_OK; k++) {
                double t = 0;
                st = time_op(c, a, x, bytes, k, iters[k], &t);
                if (cl_comm_rank(c) == 0 && (r == 0 || t < b->t[k][si])) b->t[k][si] = t;
            }
    }
    free(a);
    free(x);
    return st;
}

static void fmt_size(size_t b, char *buf, size_t n) {
    if (b >= (1u << 20)) snprintf(buf, n, "%zu MiB", b >> 20);
    else snprintf(buf, n, "%zu KiB", b >> 10);
}

static double busbw(int k, size_t bytes, int n, double t) {
    double alg = (double)bytes / t / 1e9;
    double f = (k == B_AR || k == B_MPI_AR) ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
    return alg * f;
}

int main(int argc, char **argv) {
    static bench b;
    b.min = 4096;
    b.max = 256u << 20;
    b.target = 0.2;
    b.repeat = 3;
    char ranks[64] = "2,4,8";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mpi")) b.mpi = 1;
        else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) snprintf(ranks, sizeof ranks, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc) {
            if (cl_parse_bytes(argv[++i], &b.max) != CL_OK) { fprintf(stderr, "bench_comm: %s\n", cl_last_error()); return 2; }
        } else if (!strcmp(argv[i], "--min") && i + 1 < argc) {
            if (cl_parse_bytes(argv[++i], &b.min) != CL_OK) { fprintf(stderr, "bench_comm: %s\n", cl_last_error()); return 2; }
        } else if (!strcmp(argv[i], "--time") && i + 1 < argc) b.target = atof(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc && atoi(argv[i + 1]) > 0) b.repeat = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_comm [--ranks 2,4,8] [--min 4KiB] [--max 256MiB] [--time 0.2] [--repeat 3]\n"
                            "       mpirun -np N bench_comm --mpi [--min ...] [--max ...] [--time ...] [--repeat ...]\n");
            return 2;
        }
    }
    if (b.min < 4096) b.min = 4096;
    for (b.nsizes = 0; b.nsizes < 32 && size_at(&b, b.nsizes) <= b.max; b.nsizes++) {}
    if (b.nsizes == 0) b.nsizes = 1;
    char sz[32];

    if (b.mpi) {
#ifndef CL_HAVE_MPI
        fprintf(stderr, "bench_comm: this build has no MPI\n");
        return 2;
#else
        cl_launch_opts o = {.timeout_s = 600};
        cl_status st = cl_launch_mpi(&argc, &argv, rank_main, &b, &o);
        if (st != CL_OK) {
            fprintf(stderr, "bench_comm: %s\n", cl_last_error());
            return 1;
        }
        if (b.rank != 0) return 0;
        int n = b.nranks;
        printf("mpi backend, %d processes: cleave's deterministic collectives against MPI's own in the same run\n", n);
        printf("busbw in GB/s (nccl-tests definition); ratio = cleave busbw / MPI busbw\n");
        const char *names[B_KINDS] = {"allreduce", "allgather", "reduce_scatter", "alltoall"};
        for (int k = 0; k < B_KINDS; k++) {
            printf("\n%s\n%10s | %9s %7s | %9s %7s | %6s\n", names[k], "size", "cleave us", "busbw", "MPI us", "busbw",
                   "ratio");
            for (int si = 0; si < b.nsizes; si++) {
                size_t bytes = size_at(&b, si);
                fmt_size(bytes, sz, sizeof sz);
                double tc = b.t[k][si], tm = b.t[k + B_KINDS][si];
                printf("%10s | %9.1f %7.2f | %9.1f %7.2f | %6.2f\n", sz, tc * 1e6, busbw(k, bytes, n, tc), tm * 1e6,
                       busbw(k + B_KINDS, bytes, n, tm), tm / tc);
            }
        }
        return 0;
#endif
    }

    printf("threads backend; memcpy: one thread's memcpy bandwidth (GB/s), timed by rank 0 just before each size\n");
    printf("busbw in GB/s (nccl-tests definition), time in microseconds per operation, %%mc = busbw / memcpy\n\n");
    for (const char *p = ranks; *p;) {
        int n = atoi(p);
        if (n < 1) break;
        b.nranks = n;
        cl_launch_opts o = {.timeout_s = 600};
        double t0 = cl_now();
        cl_status st = cl_launch_threads(n, rank_main, &b, &o);
        if (st != CL_OK) {
            fprintf(stderr, "bench_comm: %d ranks: %s\n", n, cl_last_error());
            return 1;
        }
        printf("%d ranks (%.1f s)\n", n, cl_now() - t0);
        printf("%10s %8s | %9s %7s %5s | %9s %7s %5s | %9s %7s %5s | %9s %7s %5s\n", "size", "memcpy", "allreduce",
               "busbw", "%mc", "allgather", "busbw", "%mc", "red_scat", "busbw", "%mc", "alltoall", "busbw", "%mc");
        for (int si = 0; si < b.nsizes; si++) {
            size_t bytes = size_at(&b, si);
            fmt_size(bytes, sz, sizeof sz);
            double mc = b.memcpy_gbs[si];
            printf("%10s %8.2f", sz, mc);
            for (int k = 0; k < B_KINDS; k++) {
                double bw = busbw(k, bytes, n, b.t[k][si]);
                printf(" | %9.1f %7.2f %5.0f", b.t[k][si] * 1e6, bw, mc > 0 ? 100 * bw / mc : 0);
            }
            printf("\n");
        }
        printf("\n");
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return 0;
}
