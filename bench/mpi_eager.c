/* What OpenMPI itself costs for small messages, without cleave's code:
 *
 *   mpirun -np 2 build/bench/mpi_eager
 *
 * Two processes exchange B bytes (an Isend and an Irecv each) as one
 * message or as pieces of at most 4000 bytes, the requests polled with
 * MPI_Testsome (as cleave's waits poll) or MPI_Testall,
 * and run a 4 KiB all-gather (2 KiB each way) both as that exchange and as
 * MPI_Allgather. Times are microseconds per exchange, the best of 3 runs
 * of 20000, the variants taking turns.
 *
 * Why: the MPI backend's EAGER_BYTES / SPLIT_BYTES (src/comm/mpi.c) rest on
 * OpenMPI's shared-memory transport sending a message of up to 4096 bytes,
 * header included, at once and a larger one by a slower rendezvous; this
 * shows the step at 4096 bytes and what the pieces buy on this machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef CL_HAVE_MPI
#include <mpi.h>

enum { ITERS = 20000, RUNS = 3, PIECE = 4000 };

/* One exchange of bytes with peer in pieces of at most piece bytes, polled
 * with MPI_Testall (all) or MPI_Testsome. */
static void exchange(char *out, char *in, int bytes, int piece, int peer, int all) {
    MPI_Request r[64];
    int idx[64], n = 0;
    for (int off = 0; off < bytes; off += piece) {
        int len = bytes - off < piece ? bytes - off : piece;
        MPI_Irecv(in + off, len, MPI_BYTE, peer, 0, MPI_COMM_WORLD, &r[n++]);
        MPI_Isend(out + off, len, MPI_BYTE, peer, 0, MPI_COMM_WORLD, &r[n++]);
    }
    if (all) {
        int flag = 0;
        while (!flag) MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE);
        return;
    }
    for (int left = n; left > 0;) {
        int done = 0;
        MPI_Testsome(n, r, &done, idx, MPI_STATUSES_IGNORE);
        if (done != MPI_UNDEFINED) left -= done;
    }
}

/* Microseconds per call of variant v: 0..3 B bytes as (one message,
 * pieces) x (Testsome, Testall); 4: 2 KiB each way as one message polled
 * with Testall, plus the copy of the own piece; 5: MPI_Allgather of 2 KiB
 * per rank. */
static double run(int v, char *a, char *b, int bytes, int me) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < ITERS; i++) {
        if (v < 4) exchange(a, b, bytes, v & 1 ? PIECE : bytes, me ^ 1, v >> 1);
        else if (v == 4) {
            exchange(a, b + (me ^ 1) * 2048, 2048, 2048, me ^ 1, 1);
            memcpy(b + me * 2048, a, 2048);
        } else MPI_Allgather(a, 2048, MPI_BYTE, b, 2048, MPI_BYTE, MPI_COMM_WORLD);
    }
    double t = (MPI_Wtime() - t0) / ITERS * 1e6;
    MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return t;
}

/* The best of RUNS runs of variants v0 .. v0 + nv - 1, taking turns. */
static void best_of(int v0, int nv, char *a, char *b, int bytes, int me, double *best) {
    for (int r = 0; r < RUNS; r++)
        for (int v = 0; v < nv; v++) {
            double t = run(v0 + v, a, b, bytes, me);
            if (r == 0 || t < best[v]) best[v] = t;
        }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me = 0, n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 2) {
        if (me == 0) fprintf(stderr, "mpi_eager: run it with mpirun -np 2 (got %d processes)\n", n);
        MPI_Finalize();
        return 2;
    }
    char *a = calloc(1, 1 << 16), *b = calloc(1, 1 << 16);
    if (!a || !b) MPI_Abort(MPI_COMM_WORLD, 1);
    static const int sizes[] = {2048, 4000, 4096, 8192, 16384, 32768, 65536};
    double best[4];
    if (me == 0)
        printf("microseconds per exchange\n%8s | %22s | %22s\n%8s | %10s %11s | %10s %11s\n", "", "polled with Testsome",
               "polled with Testall", "bytes", "one message", "pieces", "one message", "pieces");
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        best_of(0, 4, a, b, sizes[s], me, best);
        if (me == 0) printf("%8d | %11.2f %10.2f | %11.2f %10.2f\n", sizes[s], best[0], best[1], best[2], best[3]);
    }
    best_of(4, 2, a, b, 0, me, best);
    if (me == 0)
        printf("4 KiB all-gather: Isend/Irecv/Testall %.2f us, MPI_Allgather %.2f us\n", best[0], best[1]);
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
#else
int main(void) {
    fprintf(stderr, "mpi_eager: this build has no MPI\n");
    return 2;
}
#endif
