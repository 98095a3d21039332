/* The communicator front end (see include/cleave/comm.h): argument checks,
 * fault injection, byte counters, naming of failed operations, and the
 * per-communicator progress queue that runs non-blocking collectives.
 *
 * Why here and not in each backend: every backend must count operations the
 * same way for CLEAVE_FAULT, name failures the same way, and order blocking
 * and non-blocking collectives the same way; doing it once makes the
 * backends small. (The fold they all use is in fold.c.)
 *
 * Invariants:
 * - Collectives of a communicator execute one at a time in issue order: a
 *   blocking collective runs inline only when nothing is queued or running
 *   (c->pending == 0, read under c->qmu); otherwise it joins the queue and
 *   waits for its turn.
 * - The progress thread only runs queued collectives; it never touches the
 *   rank state, which belongs to the rank's thread.
 * - Every public call that fails sets rs->failed_op to what it was doing;
 *   every call that succeeds clears it.
 * - cl_comm_free runs what is queued to completion before it frees, and
 *   frees the non-blocking requests nobody waited for (a rank that fails
 *   and returns early leaks nothing). */
#include "comm/internal.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cl_opkind_name(cl_opkind k) {
    switch (k) {
    case CL_OP_SEND: return "send";
    case CL_OP_RECV: return "recv";
    case CL_OP_ALLREDUCE: return "allreduce";
    case CL_OP_REDUCE_SCATTER: return "reduce_scatter";
    case CL_OP_ALLGATHER: return "allgather";
    case CL_OP_BROADCAST: return "broadcast";
    case CL_OP_ALLTOALL: return "alltoall";
    case CL_OP_BARRIER: return "barrier";
    case CL_OP_SPLIT: return "split";
    case CL_OP_WAIT: return "wait";
    case CL_OP_COUNT: break;
    }
    return "?";
}

void cl_comm_chunk(size_t count, int n, int r, size_t *lo, size_t *hi) {
    size_t blocks = (count + 15) / 16;
    size_t q = blocks / (size_t)n, rem = blocks % (size_t)n, ur = (size_t)r;
    size_t b0 = ur * q + (ur < rem ? ur : rem);
    size_t b1 = b0 + q + (ur < rem ? 1 : 0);
    *lo = b0 * 16 < count ? b0 * 16 : count;
    *hi = b1 * 16 < count ? b1 * 16 : count;
}

/* ---- bytes communicated (comm.h) -----------------------------------------
 * Counted here, at issue, from the arguments alone: the threads backend
 * moves no messages to count, and counting where the mpi backend posts
 * them would count a queued operation on the progress thread. */

const char *cl_comm_kind_name(cl_comm_kind k) {
    return (unsigned)k < CL_COMM_NKINDS ? cl_opkind_name((cl_opkind)k) : "?";
}

void cl_comm_counts_get(const cl_comm *c, cl_comm_counts *out) {
    if (c) *out = c->counts;
    else memset(out, 0, sizeof *out);
}

void cl_comm_counts_reset(cl_comm *c) {
    if (c) memset(&c->counts, 0, sizeof c->counts);
}

/* What rank r of p sends and receives in collective k, by the messages
 * mpi.c posts (see comm.h for the same in words). n is elements of es bytes
 * (all-reduce, reduce-scatter) or bytes (all-gather, broadcast; es 1). */
static void traffic(cl_opkind k, size_t n, size_t es, int p, int r, int root, uint64_t *sent, uint64_t *recvd) {
    uint64_t up = (uint64_t)p, s = 0, v = 0;
    size_t lo, hi;
    if (p > 1) switch (k) {
    case CL_OP_ALLREDUCE:
        if (up * n * es <= CL_SMALL_AR_BYTES) {
            s = v = (up - 1) * n * es;
            break;
        }
        cl_comm_chunk(n, p, r, &lo, &hi);
        s = v = (n - (hi - lo) + (up - 1) * (hi - lo)) * es;
        break;
    case CL_OP_REDUCE_SCATTER:
    case CL_OP_ALLGATHER: s = v = (up - 1) * n * es; break;
    case CL_OP_BROADCAST:
        if (n == 0) break;
        if (n < CL_BCAST_TREE_BYTES || p == 2) { /* binomial tree relative to root */
            int vr = (r - root + p) % p, mask = 1;
            while (mask < p && !(vr & mask)) mask <<= 1;
            v = vr ? n : 0;
            for (mask >>= 1; mask > 0; mask >>= 1) s += vr + mask < p ? n : 0;
            break;
        }
        cl_comm_chunk(n, p, r, &lo, &hi); /* scatter from root, then all-gather past root */
        s = r == root ? n - (hi - lo) + (up - 1) * (hi - lo) : (up - 2) * (hi - lo);
        v = r == root ? 0 : n;
        break;
    default: break;
    }
    *sent = s;
    *recvd = v;
}

/* The same for the per-rank-count forms: rank r's piece has counts[r]
 * elements of es bytes, total in all. reduce_scatter_v: r sends every
 * other rank its piece of that rank's share and receives the p - 1 pieces
 * of its own; allgather_v: r sends its piece to the p - 1 others and
 * receives theirs. */
static void traffic_v(cl_opkind k, const size_t *counts, size_t total, size_t es, int p, int r, uint64_t *sent,
                      uint64_t *recvd) {
    uint64_t mine = (uint64_t)counts[r] * es, others = ((uint64_t)total - counts[r]) * es;
    *sent = *recvd = 0;
    if (p < 2) return;
    *sent = k == CL_OP_REDUCE_SCATTER ? others : (uint64_t)(p - 1) * mine;
    *recvd = k == CL_OP_REDUCE_SCATTER ? (uint64_t)(p - 1) * mine : others;
}

static void tally(cl_comm *c, cl_opkind k, size_t n, size_t es, int root) {
    uint64_t s, v;
    if (k == CL_OP_SEND || k == CL_OP_RECV) {
        s = k == CL_OP_SEND ? n : 0;
        v = k == CL_OP_RECV ? n : 0;
    } else {
        traffic(k, n, es, c->size, c->rank, root, &s, &v);
    }
    c->counts.calls[k]++;
    c->counts.sent[k] += s;
    c->counts.recvd[k] += v;
}

static void tally_v(cl_comm *c, cl_opkind k, const size_t *counts, size_t total, size_t es) {
    uint64_t s, v;
    traffic_v(k, counts, total, es, c->size, c->rank, &s, &v);
    c->counts.calls[k]++;
    c->counts.sent[k] += s;
    c->counts.recvd[k] += v;
}

/* ---- handles ------------------------------------------------------------- */

cl_status cl_comm_new(const cl_comm_ops *ops, void *impl, int rank, int size, const int *world_ranks,
                      cl_rank_state *rs, double timeout_s, int async, cl_comm **out) {
    cl_comm *c = calloc(1, sizeof *c);
    int *wr = malloc((size_t)size * sizeof *wr);
    if (!c || !wr) {
        free(c);
        free(wr);
        return cl_error(CL_ERR_OOM, "rank %d: no host memory for a communicator of %d ranks", rs->world_rank, size);
    }
    memcpy(wr, world_ranks, (size_t)size * sizeof *wr);
    c->ops = ops;
    c->impl = impl;
    c->rank = rank;
    c->size = size;
    c->world_ranks = wr;
    c->is_world = 1;
    for (int i = 0; i < size; i++)
        if (wr[i] != i) c->is_world = 0;
    c->rs = rs;
    c->timeout_s = timeout_s;
    c->async = async;
    pthread_mutex_init(&c->qmu, NULL);
    pthread_cond_init(&c->qcv, NULL);
    pthread_cond_init(&c->dcv, NULL);
    c->hnext = rs->handles;
    if (rs->handles) rs->handles->hprev = c;
    rs->handles = c;
    *out = c;
    return CL_OK;
}

char *cl_comm_name_rank(const cl_comm *c, int r, char *buf, size_t n) {
    if (r < 0 || r >= c->size) snprintf(buf, n, "rank %d (out of range)", r);
    else if (c->is_world) snprintf(buf, n, "rank %d", c->world_ranks[r]);
    else snprintf(buf, n, "rank %d (group rank %d)", c->world_ranks[r], r);
    return buf;
}

int cl_comm_rank(const cl_comm *c) { return c ? c->rank : -1; }
int cl_comm_size(const cl_comm *c) { return c ? c->size : 0; }
int cl_comm_world_rank(const cl_comm *c) { return c ? c->rs->world_rank : -1; }
const char *cl_comm_backend(const cl_comm *c) { return c ? c->ops->name : "none"; }

/* ---- operation bookkeeping ----------------------------------------------- */

static cl_status op_end(cl_comm *c, cl_status st, const char *what) {
    if (st != CL_OK) snprintf(c->rs->failed_op, sizeof c->rs->failed_op, "%s", what);
    else c->rs->failed_op[0] = 0;
    return st;
}

/* The injected fault, if this operation is the one CLEAVE_FAULT names. */
static cl_status op_count(cl_comm *c, cl_opkind k, const char *what) {
    cl_fault *f = &c->rs->fault;
    if (!f->active || f->rank != c->rs->world_rank || k == CL_OP_RECV || k == CL_OP_WAIT) return CL_OK;
    if (f->kind >= 0 && f->kind != (int)k) return CL_OK;
    if (++c->rs->counted != f->nth) return CL_OK;
    cl_error(CL_ERR_COMM, "injected fault (CLEAVE_FAULT=%s)", f->text);
    if (c->ops->fail) c->ops->fail(c, CL_ERR_COMM, what, cl_last_error());
    return CL_ERR_COMM;
}

static cl_status bad(cl_comm *c, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static cl_status bad(cl_comm *c, const char *what, const char *fmt, ...) {
    char me[64], msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cl_error(CL_ERR_INVALID, "%s: %s: %s", cl_comm_name_rank(c, c->rank, me, sizeof me), what, msg);
    return op_end(c, CL_ERR_INVALID, what);
}

#define CHECK_COMM(c)                                                             \
    do {                                                                          \
        if (!(c)) return cl_error(CL_ERR_INVALID, "%s: the communicator is NULL", __func__); \
    } while (0)

/* ---- the progress queue -------------------------------------------------- */

static cl_status run_req(cl_comm *c, cl_request *r) {
    if (r->kind == CL_OP_ALLTOALL) return c->ops->alltoallv(c, r->in, r->buf, r->a2a, r->dt, r->what);
    if (r->vcounts && r->kind == CL_OP_REDUCE_SCATTER)
        return c->ops->reduce_scatter_v(c, r->in, r->buf, r->vcounts, r->dt, r->op);
    if (r->vcounts && r->kind == CL_OP_ALLGATHER) return c->ops->allgather_v(c, r->in, r->buf, r->vcounts);
    switch (r->kind) {
    case CL_OP_ALLREDUCE: return c->ops->allreduce(c, r->buf, r->count, r->dt, r->op);
    case CL_OP_REDUCE_SCATTER: return c->ops->reduce_scatter(c, r->in, r->buf, r->count, r->dt, r->op);
    case CL_OP_ALLGATHER: return c->ops->allgather(c, r->in, r->buf, r->count);
    case CL_OP_BROADCAST: return c->ops->broadcast(c, r->buf, r->count, r->root);
    case CL_OP_BARRIER: return c->ops->barrier(c);
    case CL_OP_SPLIT: return c->ops->split(c, r->root, r->key, r->out);
    default: break;
    }
    return cl_error(CL_ERR_INTERNAL, "queued operation of kind %d", (int)r->kind);
}

/* Runs r (popped from the queue) and marks it done; called without qmu. */
static void run_queued(cl_comm *c, cl_request *r) {
    cl_error_clear();
    cl_status st = run_req(c, r);
    if (st != CL_OK) snprintf(r->msg, sizeof r->msg, "%s", cl_last_error());
    pthread_mutex_lock(&c->qmu);
    r->st = st;
    r->done = 1;
    c->pending--;
    pthread_cond_broadcast(&c->dcv);
    pthread_mutex_unlock(&c->qmu);
}

/* Pops the queue's head; qmu held. */
static cl_request *pop(cl_comm *c) {
    cl_request *r = c->qhead;
    if (r) {
        c->qhead = r->next;
        if (!c->qhead) c->qtail = NULL;
        r->next = NULL;
    }
    return r;
}

static void *progress_main(void *p) {
    cl_comm *c = p;
    pthread_mutex_lock(&c->qmu);
    for (;;) {
        while (!c->qhead && !c->thr_stop) pthread_cond_wait(&c->qcv, &c->qmu);
        cl_request *r = pop(c);
        if (!r) break;
        pthread_mutex_unlock(&c->qmu);
        run_queued(c, r);
        pthread_mutex_lock(&c->qmu);
    }
    pthread_mutex_unlock(&c->qmu);
    return NULL;
}

/* Appends r; starts the progress thread on first use when the backend
 * allows one. qmu not held. */
static void submit(cl_comm *c, cl_request *r) {
    pthread_mutex_lock(&c->qmu);
    r->next = NULL;
    if (c->qtail) c->qtail->next = r;
    else c->qhead = r;
    c->qtail = r;
    c->pending++;
    if (c->async && !c->thr_started) {
        if (pthread_create(&c->thr, NULL, progress_main, c) == 0) c->thr_started = 1;
        else c->async = 0; /* no thread: queued operations run at wait */
    }
    pthread_cond_signal(&c->qcv);
    pthread_mutex_unlock(&c->qmu);
}

/* Without a progress thread, runs queued operations in the caller up to
 * and including r (all of them if r is NULL). qmu held on entry and exit. */
static void drain_inline(cl_comm *c, cl_request *r) {
    while (!c->thr_started && c->qhead && (!r || !r->done)) {
        cl_request *q = pop(c);
        pthread_mutex_unlock(&c->qmu);
        run_queued(c, q);
        pthread_mutex_lock(&c->qmu);
    }
}

static void issued_unlink(cl_comm *c, cl_request *r) {
    if (r->iprev) r->iprev->inext = r->inext;
    else c->issued = r->inext;
    if (r->inext) r->inext->iprev = r->iprev;
}

static cl_status finish_queued(cl_comm *c, cl_request *r) {
    cl_status st = r->st;
    if (st != CL_OK) cl_error(st, "%s", r->msg);
    if (!r->on_stack) {
        issued_unlink(c, r);
        free(r);
    }
    return st;
}

static cl_status wait_queued(cl_comm *c, cl_request *r) {
    pthread_mutex_lock(&c->qmu);
    while (!r->done) {
        if (c->thr_started) pthread_cond_wait(&c->dcv, &c->qmu);
        else drain_inline(c, r);
    }
    pthread_mutex_unlock(&c->qmu);
    return finish_queued(c, r);
}

/* A blocking collective: inline when the queue is idle, else in turn. */
static cl_status run_blocking(cl_comm *c, cl_request *r) {
    double t0 = cl_now();
    pthread_mutex_lock(&c->qmu);
    int busy = c->pending > 0;
    pthread_mutex_unlock(&c->qmu);
    cl_status st;
    if (!busy) {
        st = run_req(c, r);
    } else {
        r->on_stack = 1;
        submit(c, r);
        st = wait_queued(c, r);
    }
    if ((int)r->kind < CL_COMM_NKINDS) c->counts.seconds[r->kind] += cl_now() - t0; /* barriers and splits: not counted */
    return op_end(c, st, r->what);
}

/* A non-blocking request copies a _v collective's counts behind itself (the
 * caller's array may go away once the call returns), so freeing the
 * request frees them. */
static cl_status run_nonblocking(cl_comm *c, cl_request *tmpl, cl_request **req) {
    size_t extra = tmpl->vcounts ? (size_t)c->size * sizeof *tmpl->vcounts : 0;
    cl_request *r = malloc(sizeof *r + extra);
    if (!r) {
        cl_error(CL_ERR_OOM, "rank %d: no host memory for a request", c->rs->world_rank);
        return op_end(c, CL_ERR_OOM, tmpl->what);
    }
    *r = *tmpl;
    if (extra) {
        size_t *copy = (size_t *)(r + 1); /* sizeof *r is a multiple of its alignment, a size_t's included */
        memcpy(copy, tmpl->vcounts, extra);
        r->vcounts = copy;
    }
    r->on_stack = 0;
    r->iprev = NULL;
    r->inext = c->issued;
    if (c->issued) c->issued->iprev = r;
    c->issued = r;
    submit(c, r);
    *req = r;
    return op_end(c, CL_OK, r->what);
}

static void req_init(cl_request *r, cl_comm *c, cl_opkind k) {
    memset(r, 0, sizeof *r);
    r->comm = c;
    r->queued = 1;
    r->kind = k;
    snprintf(r->what, sizeof r->what, "%s", cl_opkind_name(k));
}

/* ---- point-to-point ------------------------------------------------------ */

_Static_assert(CL_TAG_NCHANNELS <= 1 << CL_TAG_CHANNEL_BITS, "more tag channels than the channel bits hold");
_Static_assert((1 << (CL_TAG_CHANNEL_BITS + CL_TAG_SEQ_BITS)) - 1 == CL_COMM_TAG_MAX, "the tag fields fill 0..CL_COMM_TAG_MAX");

cl_status cl_comm_tag(cl_tag_channel ch, int64_t seq, int *tag) {
    static const char *const names[] = {"user", "pipeline", "tied embedding", "trace", "checkpoint", "checkpoint shard"};
    _Static_assert(sizeof names / sizeof names[0] == CL_TAG_NCHANNELS, "a name per tag channel");
    if ((unsigned)ch >= CL_TAG_NCHANNELS) return cl_error(CL_ERR_INVALID, "tag channel %d: not a channel (0..%d)", (int)ch, CL_TAG_NCHANNELS - 1);
    if (seq < 0 || seq > CL_TAG_SEQ_MAX)
        return cl_error(CL_ERR_INVALID, "%s message %lld: outside its channel's tags (sequence 0..%d)", names[ch], (long long)seq,
                        CL_TAG_SEQ_MAX);
    *tag = (int)ch << CL_TAG_SEQ_BITS | (int)seq;
    return CL_OK;
}

int cl_comm_tag_channel(int tag) { return tag >> CL_TAG_SEQ_BITS; }
int cl_comm_tag_seq(int tag) { return tag & CL_TAG_SEQ_MAX; }

static cl_status p2p_check(cl_comm *c, const void *buf, size_t bytes, int peer, int tag, const char *what) {
    if (peer < 0 || peer >= c->size)
        return bad(c, what, "peer %d is out of range (the communicator has %d ranks)", peer, c->size);
    if (tag < 0 || tag > CL_COMM_TAG_MAX) return bad(c, what, "tag %d is out of range (0..%d)", tag, CL_COMM_TAG_MAX);
    if (!buf && bytes) return bad(c, what, "buf is NULL but bytes is %zu", bytes);
    return CL_OK;
}

void cl_comm_p2p_what(cl_comm *c, char *what, size_t n, int send, int peer, int tag) {
    char p[64];
    snprintf(what, n, "%s %s %s (tag %d)", send ? "send" : "recv", send ? "to" : "from",
             cl_comm_name_rank(c, peer, p, sizeof p), tag);
}

cl_status cl_comm_isend(cl_comm *c, const void *buf, size_t bytes, int peer, int tag, cl_request **req) {
    CHECK_COMM(c);
    char what[96];
    cl_comm_p2p_what(c, what, sizeof what, 1, peer, tag);
    if (!req) return bad(c, what, "req is NULL");
    *req = NULL;
    CL_TRY(p2p_check(c, buf, bytes, peer, tag, what));
    cl_status st = op_count(c, CL_OP_SEND, what);
    if (st == CL_OK) st = c->ops->isend(c, buf, bytes, peer, tag, req);
    if (st == CL_OK) tally(c, CL_OP_SEND, bytes, 1, 0);
    return op_end(c, st, what);
}

cl_status cl_comm_irecv(cl_comm *c, void *buf, size_t bytes, int peer, int tag, cl_request **req) {
    CHECK_COMM(c);
    char what[96];
    cl_comm_p2p_what(c, what, sizeof what, 0, peer, tag);
    if (!req) return bad(c, what, "req is NULL");
    *req = NULL;
    CL_TRY(p2p_check(c, buf, bytes, peer, tag, what));
    cl_status st = c->ops->irecv(c, buf, bytes, peer, tag, req);
    if (st == CL_OK) tally(c, CL_OP_RECV, bytes, 1, 0);
    return op_end(c, st, what);
}

cl_status cl_comm_wait(cl_comm *c, cl_request *req) {
    CHECK_COMM(c);
    if (!req) return CL_OK;
    char what[96];
    snprintf(what, sizeof what, "%s", req->what);
    if (req->comm != c) return bad(c, what, "the request belongs to another communicator");
    cl_status st = req->queued ? wait_queued(c, req) : c->ops->wait(c, req);
    return op_end(c, st, what);
}

cl_status cl_comm_test(cl_comm *c, cl_request *req, int *done) {
    CHECK_COMM(c);
    if (!done) return cl_error(CL_ERR_INVALID, "cl_comm_test: done is NULL");
    *done = 1;
    if (!req) return CL_OK;
    char what[96];
    snprintf(what, sizeof what, "%s", req->what);
    if (req->comm != c) return bad(c, what, "the request belongs to another communicator");
    if (!req->queued) {
        *done = 0;
        cl_status st = c->ops->test(c, req, done);
        return *done ? op_end(c, st, what) : CL_OK;
    }
    pthread_mutex_lock(&c->qmu);
    drain_inline(c, req);
    int d = req->done;
    pthread_mutex_unlock(&c->qmu);
    *done = d;
    return d ? op_end(c, finish_queued(c, req), what) : CL_OK;
}

cl_status cl_comm_send(cl_comm *c, const void *buf, size_t bytes, int peer, int tag) {
    CHECK_COMM(c);
    if (peer == c->rank) {
        char what[96];
        cl_comm_p2p_what(c, what, sizeof what, 1, peer, tag);
        return bad(c, what, "a blocking send to oneself cannot complete (use cl_comm_isend)");
    }
    cl_request *r;
    CL_TRY(cl_comm_isend(c, buf, bytes, peer, tag, &r));
    return cl_comm_wait(c, r);
}

cl_status cl_comm_recv(cl_comm *c, void *buf, size_t bytes, int peer, int tag) {
    CHECK_COMM(c);
    if (peer == c->rank) {
        char what[96];
        cl_comm_p2p_what(c, what, sizeof what, 0, peer, tag);
        return bad(c, what, "a blocking receive from oneself cannot complete (use cl_comm_irecv)");
    }
    cl_request *r;
    CL_TRY(cl_comm_irecv(c, buf, bytes, peer, tag, &r));
    return cl_comm_wait(c, r);
}

/* ---- collectives --------------------------------------------------------- */

static cl_status check_op(cl_comm *c, cl_dtype dt, cl_redop op, const char *what) {
    if (op != CL_RED_SUM && op != CL_RED_AVG && op != CL_RED_MAX)
        return bad(c, what, "unknown reduction op %d", (int)op);
    if (!cl_dtype_is_float(dt))
        return bad(c, what, "cannot reduce elements of format %s (%d): F32, BF16, F16 or F64", cl_dtype_name(dt), (int)dt);
    return CL_OK;
}

static cl_status allreduce_common(cl_comm *c, void *buf, size_t count, cl_dtype dt, cl_redop op,
                                  cl_request **req) {
    cl_request r;
    req_init(&r, c, CL_OP_ALLREDUCE);
    if (dt != CL_F32 && cl_dtype_is_float(dt)) snprintf(r.what, sizeof r.what, "allreduce (%s)", cl_dtype_name(dt));
    if (req) *req = NULL;
    if (!buf && count) return bad(c, r.what, "buf is NULL but count is %zu", count);
    CL_TRY(check_op(c, dt, op, r.what));
    if (count > SIZE_MAX / 8) return bad(c, r.what, "count %zu is too large", count);
    cl_status st = op_count(c, CL_OP_ALLREDUCE, r.what);
    if (st != CL_OK) return op_end(c, st, r.what);
    tally(c, CL_OP_ALLREDUCE, count, cl_dtype_size(dt), 0);
    r.buf = buf;
    r.count = count;
    r.dt = dt;
    r.op = op;
    return req ? run_nonblocking(c, &r, req) : run_blocking(c, &r);
}

cl_status cl_comm_allreduce(cl_comm *c, void *buf, size_t count, cl_dtype dt, cl_redop op) {
    CHECK_COMM(c);
    return allreduce_common(c, buf, count, dt, op, NULL);
}

cl_status cl_comm_iallreduce(cl_comm *c, void *buf, size_t count, cl_dtype dt, cl_redop op, cl_request **req) {
    CHECK_COMM(c);
    if (!req) return bad(c, "allreduce", "req is NULL");
    return allreduce_common(c, buf, count, dt, op, req);
}

static cl_status reduce_scatter_common(cl_comm *c, const void *in, void *out, size_t cpr, cl_dtype dt, cl_redop op,
                                       cl_request **req) {
    cl_request r;
    req_init(&r, c, CL_OP_REDUCE_SCATTER);
    if (req) *req = NULL;
    if ((!in || !out) && cpr) return bad(c, r.what, "in or out is NULL but count_per_rank is %zu", cpr);
    CL_TRY(check_op(c, dt, op, r.what));
    size_t es = cl_dtype_size(dt);
    if (cpr > SIZE_MAX / es / (size_t)c->size) return bad(c, r.what, "count_per_rank %zu is too large", cpr);
    cl_status st = op_count(c, CL_OP_REDUCE_SCATTER, r.what);
    if (st != CL_OK) return op_end(c, st, r.what);
    tally(c, CL_OP_REDUCE_SCATTER, cpr, es, 0);
    r.in = in;
    r.buf = out;
    r.count = cpr;
    r.dt = dt;
    r.op = op;
    return req ? run_nonblocking(c, &r, req) : run_blocking(c, &r);
}

cl_status cl_comm_reduce_scatter(cl_comm *c, const void *in, void *out, size_t count_per_rank, cl_dtype dt,
                                 cl_redop op) {
    CHECK_COMM(c);
    return reduce_scatter_common(c, in, out, count_per_rank, dt, op, NULL);
}

cl_status cl_comm_ireduce_scatter(cl_comm *c, const void *in, void *out, size_t count_per_rank, cl_dtype dt,
                                  cl_redop op, cl_request **req) {
    CHECK_COMM(c);
    if (!req) return bad(c, "reduce_scatter", "req is NULL");
    return reduce_scatter_common(c, in, out, count_per_rank, dt, op, req);
}

static cl_status allgather_common(cl_comm *c, const void *in, void *out, size_t bpr, cl_request **req) {
    cl_request r;
    req_init(&r, c, CL_OP_ALLGATHER);
    if (req) *req = NULL;
    if ((!in || !out) && bpr) return bad(c, r.what, "in or out is NULL but bytes_per_rank is %zu", bpr);
    if (bpr > SIZE_MAX / (size_t)c->size) return bad(c, r.what, "bytes_per_rank %zu is too large", bpr);
    cl_status st = op_count(c, CL_OP_ALLGATHER, r.what);
    if (st != CL_OK) return op_end(c, st, r.what);
    tally(c, CL_OP_ALLGATHER, bpr, 1, 0);
    r.in = in;
    r.buf = out;
    r.count = bpr;
    return req ? run_nonblocking(c, &r, req) : run_blocking(c, &r);
}

cl_status cl_comm_allgather(cl_comm *c, const void *in, void *out, size_t bytes_per_rank) {
    CHECK_COMM(c);
    return allgather_common(c, in, out, bytes_per_rank, NULL);
}

cl_status cl_comm_iallgather(cl_comm *c, const void *in, void *out, size_t bytes_per_rank, cl_request **req) {
    CHECK_COMM(c);
    if (!req) return bad(c, "allgather", "req is NULL");
    return allgather_common(c, in, out, bytes_per_rank, req);
}

/* ---- per-rank counts ---------------------------------------------------- */

/* counts (one entry a rank, elements of es bytes) and their sum into *total;
 * the sum bounded so that the byte counters cannot overflow. */
static cl_status check_counts(cl_comm *c, const size_t *counts, size_t es, size_t *total, const char *what) {
    size_t t = 0, lim = SIZE_MAX / es / (size_t)c->size;
    if (!counts) return bad(c, what, "counts is NULL");
    for (int r = 0; r < c->size; r++) {
        if (counts[r] > lim - t) return bad(c, what, "the counts are too large (counts[%d] is %zu)", r, counts[r]);
        t += counts[r];
    }
    *total = t;
    return CL_OK;
}

/* 1 if the byte ranges [a, a + na) and [b, b + nb) overlap (both non-empty). */
static int overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

static cl_status reduce_scatter_v_common(cl_comm *c, const void *in, void *out, const size_t *counts, cl_dtype dt,
                                         cl_redop op, cl_request **req) {
    cl_request r;
    size_t total = 0;
    req_init(&r, c, CL_OP_REDUCE_SCATTER);
    snprintf(r.what, sizeof r.what, "reduce_scatter_v");
    if (req) *req = NULL;
    CL_TRY(check_op(c, dt, op, r.what));
    size_t es = cl_dtype_size(dt);
    CL_TRY(check_counts(c, counts, es, &total, r.what));
    size_t mine = counts[c->rank];
    if (!in && total) return bad(c, r.what, "in is NULL but the counts sum to %zu", total);
    if (!out && mine) return bad(c, r.what, "out is NULL but counts[%d] is %zu", c->rank, mine);
    size_t at = 0;
    for (int k = 0; k < c->rank; k++) at += counts[k];
    if ((const char *)out != (const char *)in + at * es && overlap(in, total * es, out, mine * es))
        return bad(c, r.what, "in and out overlap (other than out = in + this rank's offset)");
    cl_status st = op_count(c, CL_OP_REDUCE_SCATTER, r.what);
    if (st != CL_OK) return op_end(c, st, r.what);
    tally_v(c, CL_OP_REDUCE_SCATTER, counts, total, es);
    r.in = in;
    r.buf = out;
    r.count = total;
    r.vcounts = counts;
    r.dt = dt;
    r.op = op;
    return req ? run_nonblocking(c, &r, req) : run_blocking(c, &r);
}

cl_status cl_comm_reduce_scatter_v(cl_comm *c, const void *in, void *out, const size_t *counts, cl_dtype dt,
                                   cl_redop op) {
    CHECK_COMM(c);
    return reduce_scatter_v_common(c, in, out, counts, dt, op, NULL);
}

cl_status cl_comm_ireduce_scatter_v(cl_comm *c, const void *in, void *out, const size_t *counts, cl_dtype dt,
                                    cl_redop op, cl_request **req) {
    CHECK_COMM(c);
    if (!req) return bad(c, "reduce_scatter_v", "req is NULL");
    return reduce_scatter_v_common(c, in, out, counts, dt, op, req);
}

static cl_status allgather_v_common(cl_comm *c, const void *in, void *out, const size_t *counts, cl_request **req) {
    cl_request r;
    size_t total = 0, off = 0;
    req_init(&r, c, CL_OP_ALLGATHER);
    snprintf(r.what, sizeof r.what, "allgather_v");
    if (req) *req = NULL;
    CL_TRY(check_counts(c, counts, 1, &total, r.what));
    for (int j = 0; j < c->rank; j++) off += counts[j];
    size_t mine = counts[c->rank];
    if (!out && total) return bad(c, r.what, "out is NULL but the counts sum to %zu", total);
    if (!in && mine) return bad(c, r.what, "in is NULL but counts[%d] is %zu", c->rank, mine);
    if ((uintptr_t)in != (uintptr_t)out + off && overlap(in, mine, out, total))
        return bad(c, r.what, "in overlaps out but is not this rank's place in it (out + %zu)", off);
    cl_status st = op_count(c, CL_OP_ALLGATHER, r.what);
    if (st != CL_OK) return op_end(c, st, r.what);
    tally_v(c, CL_OP_ALLGATHER, counts, total, 1);
    r.in = in;
    r.buf = out;
    r.count = total;
    r.vcounts = counts;
    return req ? run_nonblocking(c, &r, req) : run_blocking(c, &r);
}

cl_status cl_comm_allgather_v(cl_comm *c, const void *in, void *out, const size_t *counts) {
    CHECK_COMM(c);
    return allgather_v_common(c, in, out, counts, NULL);
}

cl_status cl_comm_iallgather_v(cl_comm *c, const void *in, void *out, const size_t *counts, cl_request **req) {
    CHECK_COMM(c);
    if (!req) return bad(c, "allgather_v", "req is NULL");
    return allgather_v_common(c, in, out, counts, req);
}

/* ---- all-to-all ------------------------------------------------------------
 * Both forms become one backend call with byte counts and offsets
 * (x[0..p) send counts, x[p..2p) send offsets, x[2p..3p) receive counts,
 * x[3p..4p) receive offsets), checked here but for what only the other
 * ranks know (threads checks that; mpi fails or times out on it). */

/* counts and offs (NULL: packed) of format es into bytes at x, and the
 * extent they span into *end; CL_ERR_INVALID naming side on overflow. */
static cl_status a2a_side(cl_comm *c, const char *what, const char *side, const size_t *counts, const size_t *offs,
                          size_t es, size_t *x, size_t *end) {
    size_t p = (size_t)c->size, at = 0, lim = SIZE_MAX / es / 2;
    *end = 0;
    if (!counts) return bad(c, what, "%s_counts is NULL", side);
    for (size_t j = 0; j < p; j++) {
        size_t o = offs ? offs[j] : at;
        if (counts[j] > lim || o > lim - counts[j])
            return bad(c, what, "%s_counts[%zu] = %zu at offset %zu is too large", side, j, counts[j], o);
        x[j] = counts[j] * es;
        x[p + j] = o * es;
        at = o + counts[j];
        if (counts[j] && (o + counts[j]) * es > *end) *end = (o + counts[j]) * es;
    }
    return CL_OK;
}

static cl_status alltoall_common(cl_comm *c, const void *in, const size_t *sc, const size_t *so, void *out,
                                 const size_t *rc, const size_t *ro, cl_dtype dt, const char *what) {
    cl_request r;
    req_init(&r, c, CL_OP_ALLTOALL);
    snprintf(r.what, sizeof r.what, "%s", what);
    size_t es = cl_dtype_size(dt), p = (size_t)c->size, send_end, recv_end;
    if (!es) return bad(c, what, "unknown format %d", (int)dt);
    size_t *x = malloc(4 * p * sizeof *x);
    if (!x) {
        cl_error(CL_ERR_OOM, "rank %d: no host memory for %s counts", c->rs->world_rank, what);
        return op_end(c, CL_ERR_OOM, what);
    }
    cl_status st = a2a_side(c, what, "send", sc, so, es, x, &send_end);
    if (st == CL_OK) st = a2a_side(c, what, "recv", rc, ro, es, x + 2 * p, &recv_end);
    if (st == CL_OK && sc[c->rank] != rc[c->rank])
        st = bad(c, what, "this rank sends itself %zu elements but receives %zu", sc[c->rank], rc[c->rank]);
    if (st == CL_OK && !in && send_end) st = bad(c, what, "in is NULL but the sends span %zu bytes", send_end);
    if (st == CL_OK && !out && recv_end) st = bad(c, what, "out is NULL but the receives span %zu bytes", recv_end);
    if (st == CL_OK && overlap(in, send_end, out, recv_end)) st = bad(c, what, "in and out overlap");
    if (st == CL_OK) st = op_count(c, CL_OP_ALLTOALL, what);
    if (st != CL_OK) {
        free(x);
        return op_end(c, st, what);
    }
    uint64_t s = 0, v = 0;
    for (size_t j = 0; j < p; j++)
        if ((int)j != c->rank) {
            s += x[j];
            v += x[2 * p + j];
        }
    c->counts.calls[CL_OP_ALLTOALL]++;
    c->counts.sent[CL_OP_ALLTOALL] += s;
    c->counts.recvd[CL_OP_ALLTOALL] += v;
    r.in = in;
    r.buf = out;
    r.a2a = x;
    r.dt = dt;
    st = run_blocking(c, &r);
    free(x);
    return st;
}

cl_status cl_comm_alltoall(cl_comm *c, const void *in, void *out, size_t count_per_rank, cl_dtype dt) {
    CHECK_COMM(c);
    size_t p = (size_t)c->size;
    if (count_per_rank > SIZE_MAX / 16 / p)
        return bad(c, "alltoall", "count_per_rank %zu is too large", count_per_rank);
    size_t *k = malloc(p * sizeof *k);
    if (!k) return cl_error(CL_ERR_OOM, "rank %d: no host memory for alltoall counts", c->rs->world_rank);
    for (size_t j = 0; j < p; j++) k[j] = count_per_rank;
    cl_status st = alltoall_common(c, in, k, NULL, out, k, NULL, dt, "alltoall");
    free(k);
    return st;
}

cl_status cl_comm_alltoallv(cl_comm *c, const void *in, const size_t *send_counts, const size_t *send_offs, void *out,
                            const size_t *recv_counts, const size_t *recv_offs, cl_dtype dt) {
    CHECK_COMM(c);
    return alltoall_common(c, in, send_counts, send_offs, out, recv_counts, recv_offs, dt, "alltoallv");
}

cl_status cl_comm_broadcast(cl_comm *c, void *buf, size_t bytes, int root) {
    CHECK_COMM(c);
    cl_request r;
    req_init(&r, c, CL_OP_BROADCAST);
    if (!buf && bytes) return bad(c, r.what, "buf is NULL but bytes is %zu", bytes);
    if (root < 0 || root >= c->size)
        return bad(c, r.what, "root %d is out of range (the communicator has %d ranks)", root, c->size);
    cl_status st = op_count(c, CL_OP_BROADCAST, r.what);
    if (st != CL_OK) return op_end(c, st, r.what);
    tally(c, CL_OP_BROADCAST, bytes, 1, root);
    r.buf = buf;
    r.count = bytes;
    r.root = root;
    return run_blocking(c, &r);
}

cl_status cl_comm_barrier(cl_comm *c) {
    CHECK_COMM(c);
    cl_request r;
    req_init(&r, c, CL_OP_BARRIER);
    cl_status st = op_count(c, CL_OP_BARRIER, r.what);
    if (st != CL_OK) return op_end(c, st, r.what);
    return run_blocking(c, &r);
}

/* ---- element-counted forms ------------------------------------------------ */

/* count values of format dt in bytes into *bytes, or CL_ERR_INVALID naming the call. */
static cl_status n_bytes(cl_comm *c, const char *what, size_t count, cl_dtype dt, size_t *bytes) {
    size_t es = cl_dtype_size(dt);
    if (!es) return bad(c, what, "unknown format %d", (int)dt);
    if (count > SIZE_MAX / es) return bad(c, what, "count %zu of %s is too large", count, cl_dtype_name(dt));
    *bytes = count * es;
    return CL_OK;
}

cl_status cl_comm_send_n(cl_comm *c, const void *buf, size_t count, cl_dtype dt, int peer, int tag) {
    size_t b = 0;
    CHECK_COMM(c);
    CL_TRY(n_bytes(c, "send", count, dt, &b));
    return cl_comm_send(c, buf, b, peer, tag);
}

cl_status cl_comm_recv_n(cl_comm *c, void *buf, size_t count, cl_dtype dt, int peer, int tag) {
    size_t b = 0;
    CHECK_COMM(c);
    CL_TRY(n_bytes(c, "recv", count, dt, &b));
    return cl_comm_recv(c, buf, b, peer, tag);
}

cl_status cl_comm_isend_n(cl_comm *c, const void *buf, size_t count, cl_dtype dt, int peer, int tag, cl_request **req) {
    size_t b = 0;
    CHECK_COMM(c);
    if (req) *req = NULL;
    CL_TRY(n_bytes(c, "send", count, dt, &b));
    return cl_comm_isend(c, buf, b, peer, tag, req);
}

cl_status cl_comm_irecv_n(cl_comm *c, void *buf, size_t count, cl_dtype dt, int peer, int tag, cl_request **req) {
    size_t b = 0;
    CHECK_COMM(c);
    if (req) *req = NULL;
    CL_TRY(n_bytes(c, "recv", count, dt, &b));
    return cl_comm_irecv(c, buf, b, peer, tag, req);
}

cl_status cl_comm_allgather_n(cl_comm *c, const void *in, void *out, size_t count_per_rank, cl_dtype dt) {
    size_t b = 0;
    CHECK_COMM(c);
    CL_TRY(n_bytes(c, "allgather", count_per_rank, dt, &b));
    return cl_comm_allgather(c, in, out, b);
}

cl_status cl_comm_iallgather_n(cl_comm *c, const void *in, void *out, size_t count_per_rank, cl_dtype dt,
                               cl_request **req) {
    size_t b = 0;
    CHECK_COMM(c);
    if (req) *req = NULL;
    CL_TRY(n_bytes(c, "allgather", count_per_rank, dt, &b));
    return cl_comm_iallgather(c, in, out, b, req);
}

cl_status cl_comm_broadcast_n(cl_comm *c, void *buf, size_t count, cl_dtype dt, int root) {
    size_t b = 0;
    CHECK_COMM(c);
    CL_TRY(n_bytes(c, "broadcast", count, dt, &b));
    return cl_comm_broadcast(c, buf, b, root);
}

cl_status cl_comm_split(cl_comm *c, int color, int key, cl_comm **out) {
    CHECK_COMM(c);
    cl_request r;
    req_init(&r, c, CL_OP_SPLIT);
    if (!out) return bad(c, r.what, "out is NULL");
    *out = NULL;
    cl_status st = op_count(c, CL_OP_SPLIT, r.what);
    if (st != CL_OK) return op_end(c, st, r.what);
    r.root = color < 0 ? -1 : color;
    r.key = key;
    r.out = out;
    return run_blocking(c, &r);
}

void cl_comm_free(cl_comm *c) {
    if (!c) return;
    pthread_mutex_lock(&c->qmu);
    if (c->thr_started) {
        c->thr_stop = 1; /* the thread finishes what is queued, then exits */
        pthread_cond_signal(&c->qcv);
        pthread_mutex_unlock(&c->qmu);
        pthread_join(c->thr, NULL);
    } else {
        drain_inline(c, NULL); /* so that the other ranks are not left waiting */
        pthread_mutex_unlock(&c->qmu);
    }
    while (c->issued) { /* finished, never waited */
        cl_request *r = c->issued;
        c->issued = r->inext;
        free(r);
    }
    cl_rank_state *rs = c->rs;
    if (c->hprev) c->hprev->hnext = c->hnext;
    else rs->handles = c->hnext;
    if (c->hnext) c->hnext->hprev = c->hprev;
    c->ops->destroy(c);
    pthread_mutex_destroy(&c->qmu);
    pthread_cond_destroy(&c->qcv);
    pthread_cond_destroy(&c->dcv);
    free(c->world_ranks);
    free(c);
}

/* ---- start-up agreement -------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const char *s) { /* FNV-1a 64 (Fowler, Noll, Vo) */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}
#define FNV_BASIS 0xcbf29ce484222325ull

cl_status cl_comm_fail_together(cl_comm *c, cl_status s) {
    if (c && s != CL_OK) c->rs->together = 1;
    return s;
}

cl_status cl_comm_agree_status(cl_comm *c, cl_status s) {
    enum { MSG = 508 };
    typedef struct {
        int32_t st;
        char msg[MSG];
    } outcome;
    CHECK_COMM(c);
    outcome mine = {(int32_t)s, {0}}, *all = calloc((size_t)c->size, sizeof *all);
    if (!all) return cl_error(CL_ERR_OOM, "rank %d: no host memory for the ranks' outcomes", c->rs->world_rank); /* not shared: the launcher ends the others */
    if (s) snprintf(mine.msg, sizeof mine.msg, "%s", cl_last_error());
    cl_status g = cl_comm_allgather(c, &mine, all, sizeof mine), agreed = CL_OK;
    for (int r = 0; r < c->size && !g && !agreed; r++)
        if (all[r].st) agreed = cl_error((cl_status)all[r].st, "%.*s", MSG, all[r].msg);
    free(all);
    return g ? g : cl_comm_fail_together(c, agreed);
}

cl_status cl_comm_agree(cl_comm *c, const char *const *names, const char *const *values, int n) {
    CHECK_COMM(c);
    if (n < 0 || n > CL_AGREE_MAX || (n && (!names || !values)))
        return bad(c, "agree", "%d entries (at most %d, with names and values)", n, CL_AGREE_MAX);
    int size = c->size;
    enum { W = CL_AGREE_MAX + 1, VAL = 256 };
    uint64_t mine[W] = {0}, *all = malloc((size_t)size * sizeof mine);
    char *vals = malloc((size_t)size * VAL);
    if (!all || !vals) {
        free(all);
        free(vals);
        return cl_error(CL_ERR_OOM, "rank %d: no host memory for the start-up agreement", c->rs->world_rank);
    }
    /* entry 0: the list of names itself, so different builds are caught */
    mine[0] = fnv1a(FNV_BASIS, "cleave-agree-1");
    for (int i = 0; i < n; i++) {
        mine[0] = fnv1a(fnv1a(mine[0], names[i]), "\n");
        mine[1 + i] = fnv1a(FNV_BASIS, values[i] ? values[i] : "(none)");
    }
    cl_status st = cl_comm_allgather(c, mine, all, sizeof mine);
    int field = -1, first = -1;
    for (int i = 0; i < W && st == CL_OK && field < 0; i++)
        for (int r = 1; r < size && field < 0; r++)
            if (all[(size_t)r * W + i] != all[i]) field = i, first = r;
    if (st == CL_OK && field == 0) {
        st = cl_error(CL_ERR_INVALID, "ranks disagree on which settings to compare: rank 0 and rank %d run different "
                      "builds of cleave", first);
    } else if (st == CL_OK && field > 0) {
        char v[VAL] = {0};
        snprintf(v, sizeof v, "%s", values[field - 1] ? values[field - 1] : "(none)");
        st = cl_comm_allgather(c, v, vals, VAL); /* every rank knows field: all take part */
        if (st == CL_OK) {
            char msg[1024];
            size_t len = (size_t)snprintf(msg, sizeof msg, "rank 0 has %s", vals);
            int shown = 0, more = 0;
            for (int r = first; r < size; r++) {
                if (all[(size_t)r * W + field] == all[field]) continue;
                if (shown++ == 3) {
                    more++;
                    continue;
                }
                if (len < sizeof msg) len += (size_t)snprintf(msg + len, sizeof msg - len, ", rank %d has %s", r, vals + (size_t)r * VAL);
            }
            if (more && len < sizeof msg) snprintf(msg + len, sizeof msg - len, " (and %d more ranks)", more);
            st = cl_error(CL_ERR_INVALID, "ranks disagree on %s: %s", names[field - 1], msg);
        }
    }
    free(all);
    free(vals);
    if (st == CL_ERR_INVALID) cl_comm_fail_together(c, st);
    return st;
}
