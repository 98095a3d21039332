/* The launchers (see include/cleave/comm.h): N ranks as threads of this
 * process, or one rank per MPI process; and the CLEAVE_FAULT switch.
 *
 * Why together: both launchers do the same around a rank's function (parse
 * the options and CLEAVE_FAULT, make the rank state and the world
 * communicator, name the failure, free what the rank left behind); they
 * differ in how a failure reaches the other ranks: the threads world wakes
 * every waiting rank with the failure, an MPI rank aborts the job.
 *
 * Invariants: cl_launch_threads joins every thread it started before it
 * returns, on every path; a rank's communicators are freed on the rank's
 * own thread after its function returns. */
#include "comm/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#endif

cl_status cl_fault_parse(const char *text, cl_fault *f) {
    memset(f, 0, sizeof *f);
    f->kind = -1;
    if (!text || !*text) return CL_OK;
    int rank = -1, used = 0;
    long nth = 0;
    char kind[32] = "";
    if (sscanf(text, "rank:%d:%31[a-z_]:%ld%n", &rank, kind, &nth, &used) != 3 || text[used] || rank < 0 || nth < 1)
        goto bad;
    if (strcmp(kind, "op") != 0) {
        int k;
        for (k = 0; k < CL_OP_COUNT; k++)
            if (k != CL_OP_RECV && k != CL_OP_WAIT && !strcmp(kind, cl_opkind_name((cl_opkind)k))) break;
        if (k == CL_OP_COUNT) goto bad;
        f->kind = k;
    }
    f->active = 1;
    f->rank = rank;
    f->nth = nth;
    snprintf(f->text, sizeof f->text, "%s", text);
    return CL_OK;
bad:
    return cl_error(CL_ERR_INVALID,
                    "CLEAVE_FAULT='%s': expected rank:N:op:K (world rank N >= 0 fails its K-th operation, K >= 1; "
                    "'op' counts every send and collective, or name one of send, allreduce, reduce_scatter, "
                    "allgather, broadcast, alltoall, barrier, split)",
                    text);
}

double cl_launch_timeout(const cl_launch_opts *o) {
    return (!o || o->timeout_s == 0) ? CL_COMM_DEFAULT_TIMEOUT : o->timeout_s;
}

static cl_status launch_prepare(const cl_launch_opts *o, cl_rank_fn fn, double *timeout, cl_fault *fault) {
    if (!fn) return cl_error(CL_ERR_INVALID, "launch: the rank function is NULL");
    *timeout = cl_launch_timeout(o);
    if (!(*timeout > 0)) return cl_error(CL_ERR_INVALID, "launch: timeout_s must be positive (got %g)", *timeout);
    return cl_fault_parse(getenv("CLEAVE_FAULT"), fault);
}

/* Past a leading "rank R: " or "rank R (group rank G): " naming rank R itself:
 * the failure message names the rank already. */
static const char *strip_self(const char *msg, int rank) {
    char pre[32];
    int n = snprintf(pre, sizeof pre, "rank %d", rank);
    if (strncmp(msg, pre, (size_t)n) != 0) return msg;
    const char *p = msg + n;
    if (!strncmp(p, " (group rank ", 13)) {
        p = strchr(p, ')');
        if (!p) return msg;
        p++;
    }
    return p[0] == ':' && p[1] == ' ' ? p + 2 : msg;
}

static void free_handles(cl_rank_state *rs) {
    while (rs->handles) cl_comm_free(rs->handles);
}

/* ---- threads ------------------------------------------------------------- */

typedef struct {
    cl_th_world *w;
    cl_rank_state rs;
    cl_comm *world;
    cl_rank_fn fn;
    void *arg;
    int cpu;        /* the core this rank is pinned to, or -1 */
    cl_status st;
} th_rank;

/* With at least as many ranks as cores, rank r runs on the (r mod cores)-th
 * core of the process's affinity mask: ranks do not migrate onto each
 * other's core, and a rank's single GEMM thread keeps its cache. With fewer
 * ranks than cores nothing is pinned (each rank's threads share the cores). */
static void plan_pinning(th_rank *ranks, int nranks) {
    for (int i = 0; i < nranks; i++) ranks[i].cpu = -1;
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    int n = CPU_COUNT(&set);
    if (n < 1 || nranks < n) return;
    int cpus[CPU_SETSIZE], k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < n; c++)
        if (CPU_ISSET(c, &set)) cpus[k++] = c;
    for (int i = 0; i < nranks; i++) ranks[i].cpu = cpus[i % k];
#endif
}

static void *rank_main(void *p) {
    th_rank *r = p;
#ifdef __linux__
    if (r->cpu >= 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(r->cpu, &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one); /* a refusal only costs speed */
    }
#endif
    cl_error_clear();
    cl_status st = r->fn(r->world, r->arg);
    if (st != CL_OK)
        cl_th_world_fail(r->w, r->rs.world_rank, st, r->rs.failed_op[0] ? r->rs.failed_op : NULL,
                         strip_self(cl_last_error(), r->rs.world_rank));
    free_handles(&r->rs);
    r->st = st;
    return NULL;
}

cl_status cl_launch_threads(int nranks, cl_rank_fn fn, void *arg, const cl_launch_opts *o) {
    if (nranks < 1 || nranks > 4096)
        return cl_error(CL_ERR_INVALID, "launch: the number of ranks must be 1..4096 (got %d)", nranks);
    double timeout;
    cl_fault fault;
    CL_TRY(launch_prepare(o, fn, &timeout, &fault));
    cl_th_world *w;
    CL_TRY(cl_th_world_create(nranks, timeout, &w));
    th_rank *ranks = calloc((size_t)nranks, sizeof *ranks);
    pthread_t *thr = calloc((size_t)nranks, sizeof *thr);
    if (!ranks || !thr) {
        free(ranks);
        free(thr);
        cl_th_world_destroy(w);
        return cl_error(CL_ERR_OOM, "launch: no host memory for %d ranks", nranks);
    }
    cl_status st = CL_OK;
    int made = 0;
    for (; made < nranks; made++) {
        th_rank *r = &ranks[made];
        r->w = w;
        r->rs.world_rank = made;
        r->rs.fault = fault;
        r->fn = fn;
        r->arg = arg;
        if ((st = cl_th_world_comm(w, made, &r->rs, &r->world)) != CL_OK) break;
    }
    int started = 0;
    plan_pinning(ranks, nranks);
    if (st == CL_OK) {
        for (; started < nranks; started++) {
            if (pthread_create(&thr[started], NULL, rank_main, &ranks[started]) != 0) {
                char msg[128];
                snprintf(msg, sizeof msg, "could not start a thread for rank %d of %d", started, nranks);
                cl_th_world_fail(w, started, CL_ERR_INTERNAL, NULL, msg);
                break;
            }
        }
    }
    for (int i = 0; i < started; i++) pthread_join(thr[i], NULL);
    for (int i = started; i < made; i++) free_handles(&ranks[i].rs); /* never started */
    if (st == CL_OK) st = cl_th_world_status(w); /* sets the message of the first failure */
    cl_th_world_destroy(w);
    free(ranks);
    free(thr);
    return st;
}

/* ---- MPI ----------------------------------------------------------------- */

cl_status cl_launch_mpi(int *argc, char ***argv, cl_rank_fn fn, void *arg, const cl_launch_opts *o) {
    double timeout;
    cl_fault fault;
    if (!cl_mpi_available())
        return cl_error(CL_ERR_UNSUPPORTED,
                        "this cleave was built without MPI (mpicc was not found): install libopenmpi-dev and "
                        "openmpi-bin and rebuild, or run the ranks as threads");
    CL_TRY(launch_prepare(o, fn, &timeout, &fault));
    int rank = 0, size = 0;
    CL_TRY(cl_mpi_init(argc, argv, &rank, &size));
    cl_rank_state *rs = calloc(1, sizeof *rs);
    cl_comm *world = NULL;
    cl_status st = rs ? CL_OK : cl_error(CL_ERR_OOM, "no host memory for the rank state");
    if (st == CL_OK) {
        rs->world_rank = rank;
        rs->fault = fault;
        st = cl_mpi_world_comm(rs, timeout, &world);
    }
    if (st == CL_OK) {
        cl_error_clear();
        st = fn(world, arg);
    }
    if (st != CL_OK && rs && rs->together) {
        /* every rank fails here alike: no one waits, so end normally; rank 0
         * prints, before MPI_Finalize (which no rank leaves before all enter),
         * so the line comes before mpirun's note on the exit status */
        if (rank == 0) fprintf(stderr, "cleave: error: %s\n", cl_last_error());
        fflush(stderr);
        free_handles(rs);
        free(rs);
        cl_mpi_finalize();
        return st;
    }
    if (st != CL_OK) {
        const char *what = rs && rs->failed_op[0] ? rs->failed_op : NULL, *msg = cl_last_error();
        if (strip_self(msg, rank) != msg) /* "rank R: timed out after ... in OP" says it all */
            fprintf(stderr, "cleave: %s\n", msg);
        else
            fprintf(stderr, "cleave: rank %d failed%s%s: %s\n", rank, what ? " in " : "", what ? what : "", msg);
        fflush(stderr);
        /* Not MPI_Abort, and not all at once: when several ranks fail
         * together (each saw the same bad piece), Open MPI 4.1's mpirun
         * crashed in PMIx_server_finalize (status 139) or hung there for good,
         * 1 run in 3 under load. A rank that exits non-zero without
         * MPI_Finalize ends the job as MPI_Abort does (mpirun kills the others
         * and exits with its status); rank r waits r quarter-seconds first, so
         * that the first to fail usually ends the others (12 runs of 12 clean,
         * against 4 crashed or hung before). */
        if (rank > 0) usleep((useconds_t)(rank < 8 ? rank : 8) * 250000);
        _exit(2);
        return st; /* not reached */
    }
    free_handles(rs);
    free(rs);
    cl_mpi_finalize();
    return CL_OK;
}
