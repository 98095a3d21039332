/* Internals shared by the communicator front end (comm.c), its backends
 * (threads.c, mpi.c) and the launchers (launch.c).
 *
 * Why: cl_comm is a Redis-style table of backend functions under one front
 * end that checks arguments, counts operations for fault injection, names
 * failed operations and runs non-blocking collectives on a per-communicator
 * progress thread, so every backend gets those the same way.
 *
 * Invariants:
 * - A cl_comm is used by its rank's thread and by its own progress thread,
 *   never by two callers at once. Collectives of one communicator run one at
 *   a time, in issue order: inline when nothing is queued, else through the
 *   queue (c->pending counts queued and running operations).
 * - cl_fold_rows is the one place where reductions are computed, so every
 *   backend folds in the same order with the same arithmetic.
 * - The per-rank state (cl_rank_state) is touched only by the rank's own
 *   thread, or by a progress thread running a blocking call (split) on its
 *   behalf while that thread waits for it. */
#ifndef CLEAVE_COMM_INTERNAL_H
#define CLEAVE_COMM_INTERNAL_H

#include <pthread.h>
#include <stddef.h>

#include "cleave/comm.h"
#include "cleave/tensor.h" /* cl_dtype: collectives reduce CL_F32, CL_F64, CL_BF16 or CL_F16 */

typedef enum {
    CL_OP_SEND = 0,
    CL_OP_RECV,
    CL_OP_ALLREDUCE,
    CL_OP_REDUCE_SCATTER,
    CL_OP_ALLGATHER,
    CL_OP_BROADCAST,
    CL_OP_ALLTOALL, /* and alltoallv */
    CL_OP_BARRIER,
    CL_OP_SPLIT,
    CL_OP_WAIT,
    CL_OP_COUNT
} cl_opkind;

const char *cl_opkind_name(cl_opkind k); /* "send", "allreduce", ... */

/* The operations that carry data are numbered as the public counter kinds. */
_Static_assert((int)CL_OP_SEND == (int)CL_COMM_KIND_SEND && (int)CL_OP_BROADCAST == (int)CL_COMM_KIND_BROADCAST &&
                   (int)CL_OP_ALLTOALL == (int)CL_COMM_KIND_ALLTOALL && (int)CL_OP_ALLTOALL + 1 == (int)CL_COMM_NKINDS,
               "cl_opkind and cl_comm_kind agree");

/* Where the mpi backend changes algorithm; comm.c counts bytes by them. */
#define CL_SMALL_AR_BYTES ((size_t)64 * 1024)   /* all-reduces whose n buffers fit take one round */
#define CL_BCAST_TREE_BYTES ((size_t)64 * 1024) /* broadcasts below this go down a binomial tree */

/* CLEAVE_FAULT, parsed (launch.c). */
typedef struct {
    int active;
    int rank;
    int kind; /* a cl_opkind, or -1 for any counted operation */
    long nth; /* 1-based */
    char text[96];
} cl_fault;

typedef struct cl_rank_state {
    int world_rank;
    cl_fault fault;
    long counted;        /* operations counted toward the fault */
    char failed_op[160]; /* what the last failing operation was doing; "" after a success */
    cl_comm *handles;    /* live communicators of this rank (launchers free leftovers) */
    int together;        /* this rank's failure is every rank's (cl_comm_fail_together) */
} cl_rank_state;

typedef struct {
    const char *name;
    /* Point-to-point: the request is the backend's own struct whose first
     * member is a struct cl_request with queued == 0; the backend fills its
     * comm and what (cl_comm_p2p_what) before another rank can see it. */
    cl_status (*isend)(cl_comm *c, const void *buf, size_t bytes, int peer, int tag, cl_request **req);
    cl_status (*irecv)(cl_comm *c, void *buf, size_t bytes, int peer, int tag, cl_request **req);
    cl_status (*wait)(cl_comm *c, cl_request *req);               /* frees req */
    cl_status (*test)(cl_comm *c, cl_request *req, int *done);    /* frees req when done */
    /* Blocking collectives, arguments already checked. */
    cl_status (*allreduce)(cl_comm *c, void *buf, size_t count, cl_dtype dt, cl_redop op);
    cl_status (*reduce_scatter)(cl_comm *c, const void *in, void *out, size_t cpr, cl_dtype dt, cl_redop op);
    cl_status (*allgather)(cl_comm *c, const void *in, void *out, size_t bpr);
    /* The per-rank-count forms (counts: one entry a rank, elements or bytes). */
    cl_status (*reduce_scatter_v)(cl_comm *c, const void *in, void *out, const size_t *counts, cl_dtype dt,
                                  cl_redop op);
    cl_status (*allgather_v)(cl_comm *c, const void *in, void *out, const size_t *counts);
    /* All-to-all (both forms): x holds 4 * size byte values, the send counts,
     * send offsets (into in), receive counts and receive offsets (into out),
     * one a rank each; checked but for the agreement between ranks. dt only
     * names the format (bytes move, no arithmetic). */
    cl_status (*alltoallv)(cl_comm *c, const void *in, void *out, const size_t *x, cl_dtype dt, const char *what);
    cl_status (*broadcast)(cl_comm *c, void *buf, size_t bytes, int root);
    cl_status (*barrier)(cl_comm *c);
    cl_status (*split)(cl_comm *c, int color, int key, cl_comm **out);
    /* Makes this rank's failure known to every rank (threads); may be NULL. */
    void (*fail)(cl_comm *c, cl_status st, const char *what, const char *msg);
    void (*destroy)(cl_comm *c); /* frees impl */
} cl_comm_ops;

struct cl_request {
    cl_comm *comm;
    int queued; /* 1: a collective on the progress queue (comm.c) */
    /* queued collectives */
    cl_opkind kind;
    void *buf;
    const void *in;
    size_t count;
    const size_t *vcounts; /* per-rank counts of reduce_scatter_v / allgather_v, else NULL;
                            * a non-blocking request's own copy, stored after it */
    const size_t *a2a; /* alltoall(v): the byte counts and offsets (blocking only) */
    cl_dtype dt;
    cl_redop op;
    int root, key;  /* broadcast root; split color (root) and key */
    cl_comm **out;  /* split */
    int done;
    int on_stack; /* a blocking call's request: not freed by the queue */
    char what[96]; /* "recv from rank 0 (tag 7)": names the operation in failures */
    cl_status st;
    char msg[768];
    struct cl_request *next;
    struct cl_request *inext, *iprev; /* c->issued: non-blocking, not yet waited */
};

struct cl_comm {
    const cl_comm_ops *ops;
    void *impl;
    int rank, size;
    int *world_ranks; /* group rank -> world rank */
    int is_world;
    cl_rank_state *rs;
    double timeout_s;
    int async; /* 1: non-blocking collectives run on a progress thread */
    pthread_mutex_t qmu;
    pthread_cond_t qcv; /* work queued, or stop */
    pthread_cond_t dcv; /* an operation finished */
    cl_request *qhead, *qtail;
    cl_request *issued; /* freed by cl_comm_free if never waited */
    int pending;
    int thr_started, thr_stop;
    pthread_t thr;
    cl_comm *hnext, *hprev; /* in rs->handles */
    cl_comm_counts counts;  /* by the caller's thread only, at issue */
};

/* Allocates the front-end part (world_ranks copied) and links it into
 * rs->handles; the backend fills ops and impl. */
cl_status cl_comm_new(const cl_comm_ops *ops, void *impl, int rank, int size, const int *world_ranks,
                      cl_rank_state *rs, double timeout_s, int async, cl_comm **out);

/* "rank 3" on a world communicator, "rank 3 (group rank 1)" on a split one:
 * names group rank r of c. Returns buf. */
char *cl_comm_name_rank(const cl_comm *c, int r, char *buf, size_t n);
/* "send to rank 1 (tag 7)" / "recv from rank 0 (tag 7)" (peer a group rank). */
void cl_comm_p2p_what(cl_comm *c, char *what, size_t n, int send, int peer, int tag);

/* Element ranges [lo, hi) of an n-rank split of count elements: chunks of
 * whole 16-element blocks (64-byte lines of floats), the first ranks taking
 * one block more; ranks past the end get empty ranges. */
void cl_comm_chunk(size_t count, int n, int r, size_t *lo, size_t *hi);

/* The reduction (fold.c): for each i < len, t = src[0][i]; t = t (op)
 * src[j][i] for j = 1..n-1; AVG: t = t / n; then every dst[d][i] = t (for
 * BF16 and F16, t is F32 and dst gets t rounded once to the format). A dst
 * may alias a src at the same offset. stream: non-temporal stores (for
 * destinations far larger than the caches and not read by the fold;
 * ignored unless every dst is 16-byte aligned). */
void cl_fold_rows(cl_dtype dt, cl_redop op, int n, const void *const *src, void *const *dst, int ndst, size_t len,
                  int stream);
/* memcpy for communication buffers (vector stores for small sizes, see fold.c). */
void cl_copy(void *dst, const void *src, size_t bytes);
/* The same with non-temporal stores (fenced), for destinations far larger
 * than the caches that nobody reads soon. */
void cl_copy_stream(void *dst, const void *src, size_t bytes);
/* Whole-collective footprint above which the threads backend streams the
 * stores of destinations it does not read (reduce-scatter, all-gather). */
#define CL_STREAM_BYTES ((size_t)16 << 20)

/* The timeout when cl_launch_opts gives 0 (or no options). */
#define CL_COMM_DEFAULT_TIMEOUT 300.0

/* ---- threads backend (threads.c), used by launch.c ---- */
typedef struct cl_th_world cl_th_world;
cl_status cl_th_world_create(int nranks, double timeout_s, cl_th_world **out);
cl_status cl_th_world_comm(cl_th_world *w, int rank, cl_rank_state *rs, cl_comm **out);
/* Records the first failure (later ones are ignored) and wakes every wait. */
void cl_th_world_fail(cl_th_world *w, int rank, cl_status st, const char *what, const char *msg);
/* CL_OK, or the first failure's status with its message set via cl_error. */
cl_status cl_th_world_status(cl_th_world *w);
void cl_th_world_destroy(cl_th_world *w);

/* ---- mpi backend (mpi.c; stubs without CL_HAVE_MPI) ---- */
/* MPI_Init_thread unless already initialized; *rank and *size of the world. */
cl_status cl_mpi_init(int *argc, char ***argv, int *rank, int *size);
cl_status cl_mpi_world_comm(cl_rank_state *rs, double timeout_s, cl_comm **out);
void cl_mpi_finalize(void);

/* ---- launch.c ---- */
cl_status cl_fault_parse(const char *text, cl_fault *f);
double cl_launch_timeout(const cl_launch_opts *o);

#endif
