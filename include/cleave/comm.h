/* cleave communicators: point-to-point and collective operations among the
 * ranks of a group, and the launchers that start a world of ranks.
 *
 * Two backends run the same rank code (SPMD):
 *
 *   threads  N ranks as threads of one process (cl_launch_threads); data
 *            moves through shared memory, read straight out of the other
 *            ranks' buffers.
 *   mpi      one rank per MPI process (cl_launch_mpi under mpirun); built
 *            only when the build found mpicc (CL_HAVE_MPI).
 *
 * A rank's function receives its world communicator; cl_comm_split makes
 * groups (tensor-, data-, pipeline-parallel ...) out of it.
 *
 *     static cl_status rank_main(cl_comm *world, void *arg) {
 *         float g[1000];
 *         ...compute gradients into g...
 *         CL_TRY(cl_comm_allreduce(world, g, 1000, CL_F32, CL_RED_AVG));
 *         return CL_OK;
 *     }
 *     cl_launch_opts o = { .timeout_s = 60 };
 *     cl_status s = cl_launch_threads(8, rank_main, NULL, &o);
 *
 * Rules every backend keeps (the contract):
 *
 * - Determinism. An all-reduce or reduce-scatter computes each element as
 *   the left fold in rank order, ((x_0 + x_1) + x_2) + ... + x_{n-1}, in the
 *   element type (F32 or F64; BF16 and F16 in F32, rounded once to the
 *   format at the end, to nearest even); AVG is that sum divided by n (one
 *   division, in the type the fold runs in); MAX keeps x_i when x_i > acc or x_i is
 *   a NaN (so a NaN anywhere gives NaN). Every rank therefore gets the same
 *   bits, on every run, for every world size's fixed inputs, and the threads
 *   and the mpi backend give the same bits for the same inputs (NaN
 *   payloads aside). (The mpi
 *   backend does not call MPI_Allreduce, whose order is unspecified; it runs
 *   a direct reduce-scatter + all-gather over point-to-point messages.)
 * - Collectives are called by every rank of the communicator, in the same
 *   order, with the same counts, op and root. The threads backend checks
 *   counts and ops and fails all ranks with CL_ERR_INVALID on a mismatch;
 *   the mpi backend cannot always tell and may time out instead.
 * - A communicator handle belongs to one rank and is used by one thread at
 *   a time (the library's own progress thread aside).
 * - Buffers of a pending non-blocking operation are the library's until
 *   cl_comm_wait (or a cl_comm_test that reports done) returns; every
 *   request must be waited on (that also frees it).
 * - Failure. When any rank fails (its function returns an error, or one of
 *   its waits times out, or an injected fault fires), every other rank's
 *   pending and later operations return CL_ERR_COMM promptly with a message
 *   naming the failed rank and what it was doing:
 *       "rank 3 failed in allreduce: injected fault (CLEAVE_FAULT=rank:3:op:2)".
 *   On mpi the failing rank prints its message and aborts the job instead
 *   (MPI_Abort with status 2), so no process is left waiting.
 * - Timeouts. A wait that lasts longer than the launch's timeout_s fails
 *   with CL_ERR_COMM naming the rank, the operation and the peer:
 *       "rank 1: timed out after 5.0 s in recv from rank 0 (tag 7)".
 *   (Collectives name the ranks they still wait for. On mpi, split has no
 *   timeout, and a communicator that returned an error must not be used
 *   again: the launcher aborts the job anyway; once one wait of a process
 *   has timed out, its other waits give up at once, and when the ranks
 *   span hosts the peer's host follows: "... waiting for rank 1 on host h2".)
 *   (Ranks in messages are world ranks; on a split communicator the
 *   group rank follows in parentheses.)
 * - Sizes 0 and 1, primes and counts that the group size does not divide
 *   all work (chunks are uneven).
 *
 * Fault injection, for tests: with the environment variable
 *     CLEAVE_FAULT="rank:N:op:K"
 * set when a launcher starts, world rank N fails its K-th (1-based)
 * operation counted over every communicator of that rank (collectives,
 * including their i- forms and split, and sends; receives and waits are not
 * counted) with CL_ERR_COMM "injected fault (CLEAVE_FAULT=...)". In place of
 * "op" a name (send, allreduce, reduce_scatter, allgather, broadcast,
 * alltoall, barrier, split) counts only operations of that kind (reduce_scatter and
 * allgather include their _v forms, alltoall its alltoallv). An unparsable value
 * makes the launcher fail with CL_ERR_INVALID. */
#ifndef CLEAVE_COMM_H
#define CLEAVE_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "cleave/core.h"
#include "cleave/mesh.h"
#include "cleave/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cl_comm cl_comm;       /* opaque; one per rank per group */
typedef struct cl_request cl_request; /* opaque handle of a non-blocking op */

typedef enum { CL_RED_SUM = 0, CL_RED_AVG, CL_RED_MAX } cl_redop;

/* Tags are 0..CL_COMM_TAG_MAX (MPI's guaranteed minimum upper bound). */
#define CL_COMM_TAG_MAX 32767

/* cleave's own messages take their tags from channels, one per kind of
 * exchange: tag = channel << CL_TAG_SEQ_BITS | sequence, so tags of two
 * channels differ in the channel bits whatever their sequences, and a
 * sequence past its field is refused (cl_comm_tag), never wrapped into
 * another channel's tags. Channel 0's tags, 0..CL_TAG_SEQ_MAX, are the
 * caller's own (the tests' small tags). */
typedef enum {
    CL_TAG_USER = 0, /* the caller's own numbering */
    CL_TAG_PIPE,     /* a pipeline's activations and their gradients between stages */
    CL_TAG_TIE,      /* the tied embedding's gradient between the first and the last stage */
    CL_TAG_TRACE,    /* trace events gathered to world rank 0 */
    CL_TAG_CKPT,     /* checkpoint tensors gathered to the saving rank */
    CL_TAG_SHARD,    /* a sharded checkpoint's box reports to world rank 0 */
    CL_TAG_NCHANNELS
} cl_tag_channel;
#define CL_TAG_CHANNEL_BITS 3
#define CL_TAG_SEQ_BITS 12
#define CL_TAG_SEQ_MAX ((1 << CL_TAG_SEQ_BITS) - 1)
/* The tag of message seq of channel ch into *tag: CL_ERR_INVALID naming the
 * channel, seq and the bound when seq is outside 0..CL_TAG_SEQ_MAX or ch is
 * not a channel (*tag untouched). */
cl_status cl_comm_tag(cl_tag_channel ch, int64_t seq, int *tag);
/* A tag's channel and sequence (tag in 0..CL_COMM_TAG_MAX). */
int cl_comm_tag_channel(int tag);
int cl_comm_tag_seq(int tag);
/* A channel's first tag (sequence 0): the one tag of an exchange that needs one. */
#define CL_TAG_FIRST(ch) ((int)(ch) << CL_TAG_SEQ_BITS)

int cl_comm_rank(const cl_comm *c);
int cl_comm_size(const cl_comm *c);
/* This rank's rank in the world the communicator was split from. */
int cl_comm_world_rank(const cl_comm *c);
const char *cl_comm_backend(const cl_comm *c); /* "threads" or "mpi" */

/* ---- point-to-point ------------------------------------------------------
 * Behave like MPI_Send / MPI_Recv on a communicator of their own: messages
 * from one sender with one tag arrive in the order sent; a receive matches
 * only a send from `peer` with the same `tag`, and the byte counts must be
 * equal (else CL_ERR_COMM naming both sizes). A send may block until the
 * matching receive takes the data: never rely on buffering. (The threads
 * backend never buffers: a send completes when the receiver has copied the
 * data, which makes a program that would deadlock on MPI for lack of
 * buffering deadlock, and time out, on threads too.) peer may equal the
 * caller's own rank only with non-blocking calls. bytes may be 0. */
cl_status cl_comm_send(cl_comm *c, const void *buf, size_t bytes, int peer, int tag);
cl_status cl_comm_recv(cl_comm *c, void *buf, size_t bytes, int peer, int tag);
/* Behave like MPI_Isend / MPI_Irecv: *req is set on success (NULL on error). */
cl_status cl_comm_isend(cl_comm *c, const void *buf, size_t bytes, int peer, int tag, cl_request **req);
cl_status cl_comm_irecv(cl_comm *c, void *buf, size_t bytes, int peer, int tag, cl_request **req);
/* Behaves like MPI_Wait: blocks until req completes, returns its status and
 * frees req (on error too). req NULL is CL_OK. */
cl_status cl_comm_wait(cl_comm *c, cl_request *req);
/* Behaves like MPI_Test: *done = 1 when req has completed, in which case req
 * has been freed and its status is returned; *done = 0 leaves it pending
 * (returns CL_OK). Never blocks for long (on an mpi build without
 * MPI_THREAD_MULTIPLE it runs a queued collective to completion). */
cl_status cl_comm_test(cl_comm *c, cl_request *req, int *done);

/* ---- collectives ---------------------------------------------------------
 * Reductions take the number format of their elements, dt: CL_F32 and
 * CL_F64 fold in that format; CL_BF16 and CL_F16 are widened, folded in F32
 * and rounded once to dt at the end (see Determinism); any other format is
 * CL_ERR_INVALID. Counts are of elements.
 *
 * All-reduce in place over count elements of format dt (see Determinism above). */
cl_status cl_comm_allreduce(cl_comm *c, void *buf, size_t count, cl_dtype dt, cl_redop op);
/* The same, non-blocking: the operation runs on the communicator's progress
 * thread while the caller computes; non-blocking and blocking collectives of
 * one communicator execute in issue order. */
cl_status cl_comm_iallreduce(cl_comm *c, void *buf, size_t count, cl_dtype dt, cl_redop op, cl_request **req);
/* in holds size * count_per_rank elements; rank r's out (count_per_rank
 * elements) gets the fold of every rank's in[r*count_per_rank ...]. in and
 * out must not overlap. */
cl_status cl_comm_reduce_scatter(cl_comm *c, const void *in, void *out, size_t count_per_rank, cl_dtype dt,
                                 cl_redop op);
cl_status cl_comm_ireduce_scatter(cl_comm *c, const void *in, void *out, size_t count_per_rank, cl_dtype dt,
                                  cl_redop op, cl_request **req);
/* out (size * bytes_per_rank) gets every rank's in, in rank order. in may
 * equal out + rank * bytes_per_rank (in place); otherwise no overlap. */
cl_status cl_comm_allgather(cl_comm *c, const void *in, void *out, size_t bytes_per_rank);
cl_status cl_comm_iallgather(cl_comm *c, const void *in, void *out, size_t bytes_per_rank, cl_request **req);
/* Reduce-scatter with per-rank counts: in holds sum(counts) elements, rank
 * r's piece at element offset counts[0] + ... + counts[r-1]; rank r's out
 * (counts[r] elements, may be 0) gets the fold of every rank's piece r (the
 * fold of cl_comm_allreduce, so an element's result has the bits an
 * all-reduce of the same inputs gives it). out may be in + that offset (in
 * place: the fold may write a destination that aliases its own source at
 * the same offset, and other ranks read only their pieces); otherwise in
 * and out must not overlap. Every rank
 * passes the same counts (the threads backend checks; on mpi a receive of
 * another size fails the collective naming both sizes, or times out). The
 * non-blocking form copies counts: the array may go away once it returns. */
cl_status cl_comm_reduce_scatter_v(cl_comm *c, const void *in, void *out, const size_t *counts, cl_dtype dt,
                                   cl_redop op);
cl_status cl_comm_ireduce_scatter_v(cl_comm *c, const void *in, void *out, const size_t *counts, cl_dtype dt,
                                    cl_redop op, cl_request **req);
/* All-gather with per-rank byte counts: out (sum(counts) bytes) gets every
 * rank's in (counts[r] bytes, may be 0) in rank order. in may equal
 * out + counts[0] + ... + counts[r-1] (in place); otherwise no overlap.
 * Counts as for cl_comm_reduce_scatter_v. */
cl_status cl_comm_allgather_v(cl_comm *c, const void *in, void *out, const size_t *counts);
cl_status cl_comm_iallgather_v(cl_comm *c, const void *in, void *out, const size_t *counts, cl_request **req);
/* All-to-all (MPI_Alltoall), for dispatching tokens to the ranks holding
 * their experts and back: in holds size * count_per_rank elements of
 * format dt, piece j (elements [j * count_per_rank, (j+1) * count_per_rank))
 * goes to rank j; out (the same size) gets rank j's piece for this rank at
 * j * count_per_rank. Bytes move, no arithmetic: any format with a size
 * (F32, F64, BF16, F16, I32, ...), every rank passing the same dt. in and
 * out must not overlap. Blocking only. */
cl_status cl_comm_alltoall(cl_comm *c, const void *in, void *out, size_t count_per_rank, cl_dtype dt);
/* With per-peer counts (MPI_Alltoallv), in elements of dt: this rank sends
 * send_counts[j] elements from in + send_offs[j] to rank j and receives
 * recv_counts[j] elements from rank j into out + recv_offs[j]. Offsets NULL
 * mean packed in rank order (prefix sums of the counts). Zero counts move
 * nothing. recv_counts[j] on this rank must equal send_counts[me] on rank j
 * (the threads backend checks every pair and fails every rank with
 * CL_ERR_INVALID naming the first pair that disagrees; mpi fails the
 * receive naming both sizes, or times out when one side has 0);
 * send_counts[me] must equal recv_counts[me]. The pieces of out must not
 * overlap each other, nor in overlap out. Deterministic: every element
 * lands where the counts say, whatever the timing. */
cl_status cl_comm_alltoallv(cl_comm *c, const void *in, const size_t *send_counts, const size_t *send_offs, void *out,
                            const size_t *recv_counts, const size_t *recv_offs, cl_dtype dt);
/* Every rank's buf gets root's bytes. */
cl_status cl_comm_broadcast(cl_comm *c, void *buf, size_t bytes, int root);
/* Returns once every rank of c has entered it. */
cl_status cl_comm_barrier(cl_comm *c);

/* Element-counted forms of the byte-counted calls, for where a count of
 * values of format dt is meant: bytes = count * cl_dtype_size(dt) (an
 * unknown format or a product past SIZE_MAX is CL_ERR_INVALID); otherwise
 * exactly the byte-counted call. */
cl_status cl_comm_send_n(cl_comm *c, const void *buf, size_t count, cl_dtype dt, int peer, int tag);
cl_status cl_comm_recv_n(cl_comm *c, void *buf, size_t count, cl_dtype dt, int peer, int tag);
cl_status cl_comm_isend_n(cl_comm *c, const void *buf, size_t count, cl_dtype dt, int peer, int tag, cl_request **req);
cl_status cl_comm_irecv_n(cl_comm *c, void *buf, size_t count, cl_dtype dt, int peer, int tag, cl_request **req);
cl_status cl_comm_allgather_n(cl_comm *c, const void *in, void *out, size_t count_per_rank, cl_dtype dt);
cl_status cl_comm_iallgather_n(cl_comm *c, const void *in, void *out, size_t count_per_rank, cl_dtype dt,
                               cl_request **req);
cl_status cl_comm_broadcast_n(cl_comm *c, void *buf, size_t count, cl_dtype dt, int root);

/* ---- bytes communicated ---------------------------------------------------
 * Each communicator counts, for its own rank, the operations issued on it
 * and the bytes they send and receive, by kind. The counts are those of the
 * algorithms the mpi backend runs over point-to-point messages (mpi.c), so
 * both backends count the same (threads moves the same data through shared
 * memory). Counted when issued, on the caller's thread, blocking and
 * non-blocking forms alike; an operation that fails after it was issued
 * stays counted. Over p ranks, this rank r, es the element size
 * (cl_dtype_size of the format: 4 for F32, 2 for BF16, 8 for F64), chunk(n, r) the elements [lo, hi) of
 * cl_comm_chunk's split (whole 16-element blocks, the first ranks taking
 * one block more):
 *
 *   send, recv      sent (recvd) = bytes, peer r itself included
 *   allreduce       p * count * es <= 64 KiB (one round, every buffer to
 *                   every peer): sent = recvd = (p-1) * count * es;
 *                   larger: reduce-scatter then all-gather by chunks,
 *                   c = |chunk(count, r)|: sent = recvd = (count - c + (p-1) c) es
 *   reduce_scatter  sent = recvd = (p-1) * count_per_rank * es
 *   allgather       sent = recvd = (p-1) * bytes_per_rank
 *   reduce_scatter_v   (kind REDUCE_SCATTER) with S = sum(counts):
 *                   sent = (S - counts[r]) * es, recvd = (p-1) * counts[r] * es
 *   allgather_v     (kind ALLGATHER) sent = (p-1) * counts[r],
 *                   recvd = S - counts[r]
 *   alltoall        sent = recvd = (p-1) * count_per_rank * es
 *   alltoallv       (kind ALLTOALL) sent = sum over j != r of send_counts[j] * es,
 *                   recvd = sum over j != r of recv_counts[j] * es
 *   broadcast       bytes < 64 KiB or p == 2: a binomial tree rooted at
 *                   root: recvd = bytes except at root, sent = bytes times
 *                   the rank's children (v = (r - root) mod p has children
 *                   v + 2^k for 2^k below v's lowest set bit (any 2^k < p
 *                   for root), v + 2^k < p);
 *                   larger: root sends each rank its chunk(bytes, .), then
 *                   every rank sends its chunk to all but itself and root:
 *                   root sends bytes - c_root + (p-1) c_root and receives 0;
 *                   the others send (p-2) c_r and receive bytes.
 *
 * A group of one rank counts its collectives' calls with 0 bytes. Barriers
 * and splits are not counted; cl_comm_agree counts as the all-gathers it
 * runs. Read and reset from the rank's own thread. */
typedef enum {
    CL_COMM_KIND_SEND = 0,
    CL_COMM_KIND_RECV,
    CL_COMM_KIND_ALLREDUCE,
    CL_COMM_KIND_REDUCE_SCATTER,
    CL_COMM_KIND_ALLGATHER,
    CL_COMM_KIND_BROADCAST,
    CL_COMM_KIND_ALLTOALL,
    CL_COMM_NKINDS
} cl_comm_kind;

/* "send", "recv", "allreduce", "reduce_scatter", "allgather", "broadcast", "alltoall"; "?" otherwise. */
const char *cl_comm_kind_name(cl_comm_kind k);

typedef struct {
    uint64_t calls[CL_COMM_NKINDS];
    uint64_t sent[CL_COMM_NKINDS], recvd[CL_COMM_NKINDS];
    /* wall seconds in this rank's blocking collectives of the kind, from the call to its return (the waits for
     * the other ranks included); sends, receives, the non-blocking forms and their waits add nothing */
    double seconds[CL_COMM_NKINDS];
} cl_comm_counts;

/* The counts since the communicator was made or last reset (c NULL: zeros). */
void cl_comm_counts_get(const cl_comm *c, cl_comm_counts *out);
void cl_comm_counts_reset(cl_comm *c);

/* Start-up agreement: collective over c. Entry i of every rank is the pair
 * (names[i], values[i]), e.g. a flag and its resolved value; every rank
 * must give the same n and names (else the message says the ranks run
 * different builds). Each value is hashed (FNV-1a, 64 bits) and the hashes
 * all-gathered; the first entry whose hash differs from rank 0's fails every
 * rank alike with CL_ERR_INVALID and
 *     "ranks disagree on NAME: rank 0 has V0, rank 1 has V1"
 * (values all-gathered for the message, cut at 255 bytes; up to 4 ranks
 * named). Every rank runs the same collectives whatever the outcome, and
 * a failure is marked as every rank's (cl_comm_fail_together). n <= 128. */
#define CL_AGREE_MAX 128
cl_status cl_comm_agree(cl_comm *c, const char *const *names, const char *const *values, int n);
/* Marks the failure s, which every rank of c's world returns at the same
 * point with nothing left pending (after an agreement, or a check of
 * agreed values), as one they share: cl_launch_mpi then ends the job
 * normally (MPI_Finalize) and returns s on every rank instead of aborting
 * it. Returns s. */
cl_status cl_comm_fail_together(cl_comm *c, cl_status s);

/* Agreement on an outcome: collective over c. Every rank gives its status s
 * (its message cl_last_error() when s fails); when any rank's failed, every
 * rank returns the first failing rank's status and message (cut at 507
 * bytes), marked as every rank's (cl_comm_fail_together), so none is left
 * waiting on the one that failed; else CL_OK. A failure of the all-gather
 * itself is returned as it is. */
cl_status cl_comm_agree_status(cl_comm *c, cl_status s);

/* Behaves like MPI_Comm_split: collective over c; ranks giving the same
 * color >= 0 form one new communicator, ranked by (key, rank in c); a rank
 * giving a negative color gets *out = NULL. The new communicator has its
 * own tag space and collective sequence; free it with cl_comm_free. */
cl_status cl_comm_split(cl_comm *c, int color, int key, cl_comm **out);
/* Local (not collective). Frees a communicator made by cl_comm_split; the
 * launchers free the world and any split communicator a rank left behind.
 * Queued collectives run to completion first; requests nobody waited for
 * are freed (on threads, unmatched messages are withdrawn). On mpi, a
 * message request must be waited on before the free. NULL is a no-op. */
void cl_comm_free(cl_comm *c);

/* ---- the process groups of a mesh ----------------------------------------
 * Every communicator a rank of a dp x cp x tp x pp mesh (mesh.h) takes part in,
 * made once and passed around as one value. Each is a real communicator,
 * groups of one rank included, so no caller tests for NULL; a rank's rank
 * in each is its coordinate along the axis (in mp: tp_i + tp * pp_i), its
 * members those of cl_mesh_group.
 *
 *   world  the communicator the groups were split from (not owned)
 *   tp     same (dp, cp, pp): the shards of one layer      CL_AXIS_TP
 *   dp     same (tp, cp, pp): replicas (other samples)     CL_AXIS_DP
 *   pp     same (dp, cp, tp): the stages of one pipeline   CL_AXIS_PP
 *   embd   first and last stage of one pipeline, which      CL_AXIS_EMBED
 *          hold the tied embedding (pp == 1: the rank alone). A middle
 *          stage belongs to no embedding group: its embd is a group of
 *          itself alone, so a sum over it changes nothing.
 *   mp     same (dp, cp): the tp x pp ranks of one model   CL_AXIS_MP
 *   cp     same (dp, tp, pp): the ranks of one sequence     CL_AXIS_CP
 *          (context parallelism: they pass keys and values)
 *   dpcp   same (tp, pp): dp x cp ranks that sum gradients  CL_AXIS_DPCP
 *          and hold ZeRO's shards (cp 1: the dp group's members)
 */
typedef struct cl_groups {
    cl_mesh mesh;
    cl_comm *world;
    cl_comm *tp, *dp, *pp, *embd, *mp;
    cl_comm *cp, *dpcp;
    cl_comm *ep; /* expert parallelism: the expert-parallel group (cl_mesh_ep_group), made by cl_groups_add_ep; NULL without */
    cl_comm *edp; /* and its expert-data group, the dp / ep ranks holding the same experts (NULL without, or when alone) */
} cl_groups;

/* Collective over world, whose size must be mesh->world (else
 * CL_ERR_INVALID, nothing split); world rank r takes mesh rank r. Splits in
 * one order on every rank (tp, dp, pp, embd, mp, cp, dpcp) with the group numbers of
 * cl_mesh_group_index as colors. On error *out holds no communicator. */
cl_status cl_groups_create(cl_comm *world, const cl_mesh *mesh, cl_groups *out);
/* Local. Frees the split communicators (not world) and clears them; a
 * zeroed cl_groups, or NULL, is a no-op. */
void cl_groups_free(cl_groups *g);
/* Expert parallelism: g->ep, ep consecutive members of this rank's data-parallel group (cl_mesh_ep_group), and
 * g->edp, the members at the same place in theirs (cl_mesh_ep_group's expert-data group; made only when dp > ep),
 * split from g->dp (collective over it: every rank calls it with the same ep). ep 1: nothing made. */
cl_status cl_groups_add_ep(cl_groups *g, int ep);

/* ---- launchers ---------------------------------------------------------- */
typedef cl_status (*cl_rank_fn)(cl_comm *world, void *arg);

typedef struct {
    double timeout_s; /* a wait longer than this fails; 0 means the default, 300 */
} cl_launch_opts;

/* Runs fn(world, arg) on nranks threads of this process (1 <= nranks <=
 * 4096; o may be NULL). Returns CL_OK if every rank returned CL_OK, else the
 * status of the first failure, with the message "rank R failed[ in OP]: MSG"
 * naming the failed rank and its error. Always joins every rank. */
cl_status cl_launch_threads(int nranks, cl_rank_fn fn, void *arg, const cl_launch_opts *o);

/* One rank per MPI process: MPI_Init_thread (asking for
 * MPI_THREAD_MULTIPLE, unless MPI is already initialized) .. fn(world, arg)
 * .. MPI_Finalize (only if it initialized MPI). A failure every rank shares
 * (cl_comm_fail_together) is printed by world rank 0 alone, as
 * "cleave: error: MSG", before MPI_Finalize, and returned on every rank
 * after it. Any other failing rank prints
 * "cleave: rank R failed[ in OP]: MSG" (or "cleave: MSG" when MSG starts
 * by naming rank R, as timeouts do) to stderr and calls
 * MPI_Abort(MPI_COMM_WORLD, 2), so the others never hang; a killed process
 * makes mpirun end the job. Without MPI_THREAD_MULTIPLE, non-blocking
 * collectives run when waited on (no overlap). Returns CL_OK, or
 * CL_ERR_UNSUPPORTED with a clear message when built without MPI, or when
 * MPI cannot be initialized (or was finalized). Call it once per process. */
cl_status cl_launch_mpi(int *argc, char ***argv, cl_rank_fn fn, void *arg, const cl_launch_opts *o);

/* 1 if this build has the mpi backend. */
int cl_mpi_available(void);

#ifdef __cplusplus
}
#endif

#endif
