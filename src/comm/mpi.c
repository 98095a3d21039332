/* The mpi backend: one rank per MPI process (built with CL_HAVE_MPI; without
 * it only stubs that report CL_ERR_UNSUPPORTED).
 *
 * Why not MPI's own reductions: MPI_Allreduce's summation order is
 * unspecified, and cleave promises the same bits as the threads backend. So
 * reductions run over point-to-point messages: rank r owns chunk r of the
 * buffer (cl_comm_chunk); every rank sends each owner its piece of the
 * owner's chunk, the owner folds the n pieces in rank order (cl_fold_rows),
 * then sends the result to every rank (all-gather). Each rank sends and
 * receives 2 (n-1)/n of the buffer, like a ring, in two rounds instead of
 * 2 (n-1). Chunks go in segments of SEG_BYTES, two segments in flight, so
 * scratch stays 2 (n-1) segments and folding overlaps the transfers.
 *
 * Invariants:
 * - Each communicator has two MPI communicators: p2p for the user's
 *   messages (user tags) and coll for collectives, whose tags encode the
 *   collective's sequence number, its phase and the segment, so messages of
 *   consecutive collectives or segments never match each other.
 * - Every wait polls (MPI_Testsome, then sched_yield for 5 ms, then short sleeps) so
 *   that it can give up at the timeout (or at once after another wait of
 *   the process timed out: gave_up) and so that oversubscribed ranks do
 *   not spin a core; MPI errors are returned (MPI_ERRORS_RETURN), never
 *   fatal.
 * - Messages are at most PIECE_BYTES; larger ones go as several messages
 *   with the same tag, which MPI keeps in order. */
#include "comm/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CL_HAVE_MPI

int cl_mpi_available(void) { return 0; }

cl_status cl_mpi_init(int *argc, char ***argv, int *rank, int *size) {
    (void)argc;
    (void)argv;
    *rank = 0;
    *size = 1;
    return cl_error(CL_ERR_UNSUPPORTED, "this cleave was built without MPI");
}

cl_status cl_mpi_world_comm(cl_rank_state *rs, double timeout_s, cl_comm **out) {
    (void)rs;
    (void)timeout_s;
    *out = NULL;
    return cl_error(CL_ERR_UNSUPPORTED, "this cleave was built without MPI");
}

void cl_mpi_finalize(void) {}

#else

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

enum {
    SEG_BYTES = 256 * 1024,          /* reduction segment */
    PIECE_BYTES = 64 * 1024 * 1024,  /* largest single message */
    /* OpenMPI's shared-memory transport sends a message of up to 4096 bytes,
     * its header included, at once (eagerly) and a larger one by a
     * rendezvous that costs about 2-3 us more on the 2-core VM: 4096 bytes
     * took 3.5-4.3 us as one message, 1.5-1.9 us as two (bench/mpi_eager.c). Below
     * 32 KiB pieces measured faster in a first probe and in bench_comm's
     * 16 KiB collectives; later bench/mpi_eager.c runs had them slower
     * above 8 KiB, so where the split stops is unsettled. */
    EAGER_BYTES = 4000,
    SPLIT_BYTES = 32 * 1024
};

enum { PH_RS = 0, PH_AG = 1 };

static int mpi_inited_here = 0;
static int mpi_thread_level = MPI_THREAD_SINGLE;

/* A growable set of outstanding requests, with the peer of each. */
typedef struct {
    int n, cap;
    MPI_Request *r;
    int *peer;
    int *idx;
    MPI_Status *st;
} mp_batch;

typedef struct {
    MPI_Comm p2p, coll;
    unsigned seq;
    char *scratch;
    size_t scratch_bytes;
    size_t *lo, *len; /* per-owner element ranges */
    const void **src;
    void **dst;
    mp_batch b[4];
    struct mp_msg *unmatched; /* receives not yet wholly matched, in the order posted (recv_match) */
} mp_comm;

typedef struct mp_msg {
    cl_request base;
    mp_batch b;    /* a receive's: one request per piece matched so far */
    size_t bytes;
    int is_send;
    char *buf;     /* a receive's buffer, peer and tag (see recv_match) */
    int peer, tag;
    int mismatch;  /* a receive met a send of another size: */
    size_t sent;   /* that size (or, over several pieces, what it sent up to the piece that differed) */
    struct mp_msg *next; /* in the communicator's unmatched list */
    char who[64];
} mp_msg;

static const cl_comm_ops mp_ops;

int cl_mpi_available(void) { return 1; }

static cl_status mpi_error(cl_comm *c, int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING], me[64];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    return cl_error(CL_ERR_COMM, "%s: %s: %s", cl_comm_name_rank(c, c->rank, me, sizeof me), what, s);
}

/* ---- batches and waiting ------------------------------------------------- */

static void batch_free(mp_batch *b) {
    free(b->r);
    free(b->peer);
    free(b->idx);
    free(b->st);
    memset(b, 0, sizeof *b);
}

static cl_status batch_reserve(mp_batch *b, int more) {
    if (b->n + more <= b->cap) return CL_OK;
    int cap = b->cap ? b->cap : 16;
    while (cap < b->n + more) cap *= 2;
    MPI_Request *r = realloc(b->r, (size_t)cap * sizeof *r);
    if (r) b->r = r;
    int *p = realloc(b->peer, (size_t)cap * sizeof *p);
    if (p) b->peer = p;
    int *ix = realloc(b->idx, (size_t)cap * sizeof *ix);
    if (ix) b->idx = ix;
    MPI_Status *st = realloc(b->st, (size_t)cap * sizeof *st);
    if (st) b->st = st;
    if (!r || !p || !ix || !st) return cl_error(CL_ERR_OOM, "no host memory for %d MPI requests", cap);
    b->cap = cap;
    return CL_OK;
}

/* The size of the pieces a collective's message of bytes goes in. */
static size_t coll_piece(size_t bytes) { return bytes < SPLIT_BYTES ? EAGER_BYTES : PIECE_BYTES; }

/* Posts bytes to or from peer as messages of at most PIECE_BYTES; a
 * collective's message below SPLIT_BYTES goes as EAGER_BYTES pieces (its
 * sender and receiver split alike, since a collective's sizes agree by
 * construction; a user's send and receive may disagree, and a receive in
 * more pieces than the send would wait for a piece that never comes). */
static cl_status batch_post(cl_comm *c, mp_batch *b, MPI_Comm comm, int send, void *buf, size_t bytes, int peer,
                            int tag, const char *what) {
    const mp_comm *m = c->impl;
    size_t piece = comm == m->coll ? coll_piece(bytes) : PIECE_BYTES;
    size_t pieces = bytes ? (bytes + piece - 1) / piece : 1;
    CL_TRY(batch_reserve(b, (int)pieces));
    for (size_t k = 0; k < pieces; k++) {
        size_t off = k * piece;
        int len = (int)(bytes - off < piece ? bytes - off : piece);
        char *p = (char *)buf + off;
        int rc = send ? MPI_Isend(p, len, MPI_BYTE, peer, tag, comm, &b->r[b->n])
                      : MPI_Irecv(p, len, MPI_BYTE, peer, tag, comm, &b->r[b->n]);
        if (rc != MPI_SUCCESS) return mpi_error(c, rc, what);
        b->peer[b->n++] = peer;
    }
    return CL_OK;
}

/* Between polls of a wait that began at start: yield for the first
 * SPIN_S seconds (MPI moves shared-memory data only while some call of
 * ours polls it, so sleeping there stalls the transfer: measured 3x slower
 * all-gathers at 1 MiB), then sleep 2 us .. 256 us. */
#define SPIN_S 0.005
static void pause_poll(int *polls, double start) {
    if (*polls < 32) { /* the first few microseconds: poll again at once (small messages land here) */
        (*polls)++;
        return;
    }
    if (*polls < 64 || cl_now() - start < SPIN_S) {
        if (*polls < 64) (*polls)++;
        sched_yield();
        return;
    }
    int k = (*polls)++;
    long ns = 2000L << (k - 64 < 7 ? k - 64 : 7); /* 2 us .. 256 us */
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* The host name of every world rank (MPI_Get_processor_name, gathered once
 * with the world communicator), so that a timeout names the host a lost
 * peer ran on; hosts_differ is 0 when every rank is on one host, and then
 * messages name ranks only. */
enum { HOST_CHARS = 64 };
static char (*rank_host)[HOST_CHARS];
static int rank_hosts, hosts_differ;

/* "on host NAME" for peer (a rank of c) when the ranks span hosts, else "". */
static const char *peer_host(cl_comm *c, int peer, char *buf, size_t n) {
    buf[0] = 0;
    if (!hosts_differ || peer < 0 || peer >= c->size) return buf;
    int w = c->world_ranks[peer];
    if (w >= 0 && w < rank_hosts) snprintf(buf, n, "on host %s", rank_host[w]);
    return buf;
}

/* "waiting for rank 5, rank 7" from the requests still pending. */
static void pending_peers(cl_comm *c, mp_batch *b, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "waiting for");
    int shown = 0, last = -1;
    for (int i = 0; i < b->n && len < n; i++) {
        if (b->r[i] == MPI_REQUEST_NULL || b->peer[i] == last) continue;
        last = b->peer[i];
        if (shown++ == 8) {
            len += (size_t)snprintf(buf + len, n - len, " and more");
            break;
        }
        char name[64], host[HOST_CHARS + 16];
        peer_host(c, b->peer[i], host, sizeof host);
        len += (size_t)snprintf(buf + len, n - len, "%s %s%s%s", shown > 1 ? "," : "",
                                cl_comm_name_rank(c, b->peer[i], name, sizeof name), host[0] ? " " : "", host);
    }
}

/* Set by the first wait of this process that times out. A timeout ends the
 * job (the rank fails and mpirun ends the rest), so every wait after it,
 * on any communicator of the process, gives up at once (expired) instead
 * of waiting out a timeout of its own: data parallelism waits for its
 * buckets one after another, and with a lost peer each had taken the whole
 * --comm-timeout (3 buckets of gpt2-tiny ended a job 15 s after a 5 s
 * timeout). */
static int gave_up;

/* Whether a wait that began at start is over: past the timeout, or another
 * wait has timed out. */
static int expired(cl_comm *c, double start) {
    return cl_now() > start + c->timeout_s || __atomic_load_n(&gave_up, __ATOMIC_RELAXED);
}

static cl_status timed_out(cl_comm *c, double start, const char *what, const char *detail) {
    char me[64];
    double waited = cl_now() - start;
    int first = !__atomic_exchange_n(&gave_up, 1, __ATOMIC_RELAXED);
    if (!first && waited < c->timeout_s)
        return cl_error(CL_ERR_COMM, "%s: gave up after %.1f s in %s%s%s, after another wait timed out",
                        cl_comm_name_rank(c, c->rank, me, sizeof me), waited, what, detail[0] ? " " : "", detail);
    return cl_error(CL_ERR_COMM, "%s: timed out after %.1f s in %s%s%s", cl_comm_name_rank(c, c->rank, me, sizeof me),
                    c->timeout_s, what, detail[0] ? " " : "", detail);
}

/* Waits for every request of b, then empties it. (A receive's size was
 * checked when it was matched: recv_match.) */
static cl_status batch_wait(cl_comm *c, mp_batch *b, const char *what, int peer_named) {
    double start = cl_now();
    int polls = 0, left = 0;
    for (int i = 0; i < b->n; i++) left += b->r[i] != MPI_REQUEST_NULL;
    while (left > 0) {
        int out = 0;
        int rc = MPI_Testsome(b->n, b->r, &out, b->idx, b->st);
        if (rc != MPI_SUCCESS) {
            int e = rc;
            if (rc == MPI_ERR_IN_STATUS)
                for (int i = 0; i < out; i++)
                    if (b->st[i].MPI_ERROR != MPI_SUCCESS) e = b->st[i].MPI_ERROR;
            b->n = 0;
            return mpi_error(c, e, what);
        }
        if (out == MPI_UNDEFINED) break;
        left -= out;
        if (left <= 0) break;
        if (out == 0) {
            if (expired(c, start)) {
                char detail[600] = "";
                if (!peer_named) pending_peers(c, b, detail, sizeof detail);
                else if (b->n) peer_host(c, b->peer[0], detail, sizeof detail); /* what names the peer */
                return timed_out(c, start, what, detail); /* requests left pending: the job aborts */
            }
            pause_poll(&polls, start);
        }
    }
    b->n = 0;
    return CL_OK;
}

/* ---- communicators ------------------------------------------------------- */

static cl_status make_comm(MPI_Comm p2p, cl_rank_state *rs, double timeout_s, cl_comm **out) {
    mp_comm *m = calloc(1, sizeof *m);
    if (!m) return cl_error(CL_ERR_OOM, "rank %d: no host memory for a communicator", rs->world_rank);
    m->p2p = p2p;
    m->coll = MPI_COMM_NULL;
    int rank = 0, size = 1;
    MPI_Comm_rank(p2p, &rank);
    MPI_Comm_size(p2p, &size);
    MPI_Comm_set_errhandler(p2p, MPI_ERRORS_RETURN);
    int rc = MPI_Comm_dup(p2p, &m->coll);
    int *all = malloc((size_t)size * sizeof *all), *wr = malloc((size_t)size * sizeof *wr);
    m->lo = malloc((size_t)size * sizeof *m->lo);
    m->len = malloc((size_t)size * sizeof *m->len);
    m->src = malloc((size_t)size * sizeof *m->src);
    m->dst = malloc((size_t)size * sizeof *m->dst);
    cl_status st = CL_OK;
    if (rc != MPI_SUCCESS) st = cl_error(CL_ERR_COMM, "rank %d: MPI_Comm_dup failed", rs->world_rank);
    else if (!all || !wr || !m->lo || !m->len || !m->src || !m->dst)
        st = cl_error(CL_ERR_OOM, "rank %d: no host memory for a communicator of %d ranks", rs->world_rank, size);
    if (st == CL_OK) {
        MPI_Comm_set_errhandler(m->coll, MPI_ERRORS_RETURN);
        MPI_Group g, wg;
        MPI_Comm_group(p2p, &g);
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        for (int i = 0; i < size; i++) all[i] = i;
        MPI_Group_translate_ranks(g, size, all, wg, wr);
        MPI_Group_free(&g);
        MPI_Group_free(&wg);
        st = cl_comm_new(&mp_ops, m, rank, size, wr, rs, timeout_s, mpi_thread_level == MPI_THREAD_MULTIPLE, out);
    }
    free(all);
    free(wr);
    if (st != CL_OK) {
        if (m->coll != MPI_COMM_NULL) MPI_Comm_free(&m->coll);
        MPI_Comm_free(&m->p2p);
        free(m->lo);
        free(m->len);
        free(m->src);
        free(m->dst);
        free(m);
    }
    return st;
}

static void mp_destroy(cl_comm *c) {
    mp_comm *m = c->impl;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
        MPI_Comm_free(&m->coll);
        MPI_Comm_free(&m->p2p);
    }
    for (int i = 0; i < 4; i++) batch_free(&m->b[i]);
    free(m->scratch);
    free(m->lo);
    free(m->len);
    free(m->src);
    free(m->dst);
    free(m);
}

cl_status cl_mpi_init(int *argc, char ***argv, int *rank, int *size) {
    int flag = 0;
    MPI_Finalized(&flag);
    if (flag) return cl_error(CL_ERR_UNSUPPORTED, "MPI was already finalized in this process; it cannot start again");
    MPI_Initialized(&flag);
    /* A peer that dies leaves its sockets closed; a write into one raises SIGPIPE, whose default
     * kills this rank too, and mpirun then reports the survivor ("rank 0 exited on signal 13")
     * instead of the rank that was lost. Ignored, the write fails and the error path reports. */
    signal(SIGPIPE, SIG_IGN);
    if (!flag) {
        if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &mpi_thread_level) != MPI_SUCCESS)
            return cl_error(CL_ERR_UNSUPPORTED, "MPI_Init_thread failed");
        mpi_inited_here = 1;
    } else {
        MPI_Query_thread(&mpi_thread_level);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return CL_OK;
}

/* Gathers every world rank's host name into rank_host (over c's collective
 * communicator, waited like any collective, so a rank that never comes
 * times out). */
static cl_status gather_hosts(cl_comm *c) {
    mp_comm *m = c->impl;
    char mine[HOST_CHARS] = "", name[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS) /* a longer name is cut: it only labels messages */
        memcpy(mine, name, strnlen(name, HOST_CHARS - 1));
    free(rank_host);
    rank_hosts = hosts_differ = 0;
    rank_host = calloc((size_t)c->size, sizeof *rank_host);
    if (!rank_host) return cl_error(CL_ERR_OOM, "rank %d: no host memory for %d host names", c->rs->world_rank, c->size);
    mp_batch *b = &m->b[0];
    b->n = 0;
    CL_TRY(batch_reserve(b, 1));
    int rc = MPI_Iallgather(mine, HOST_CHARS, MPI_CHAR, rank_host, HOST_CHARS, MPI_CHAR, m->coll, &b->r[0]);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "gathering host names");
    b->peer[0] = -1;
    b->n = 1;
    CL_TRY(batch_wait(c, b, "gathering host names", 1));
    rank_hosts = c->size;
    for (int r = 0; r < c->size; r++) {
        rank_host[r][HOST_CHARS - 1] = 0;
        hosts_differ |= strcmp(rank_host[r], rank_host[0]) != 0;
    }
    return CL_OK;
}

cl_status cl_mpi_world_comm(cl_rank_state *rs, double timeout_s, cl_comm **out) {
    MPI_Comm p2p;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &p2p) != MPI_SUCCESS)
        return cl_error(CL_ERR_COMM, "rank %d: MPI_Comm_dup of the world failed", rs->world_rank);
    CL_TRY(make_comm(p2p, rs, timeout_s, out));
    cl_status st = gather_hosts(*out);
    if (st != CL_OK) {
        cl_comm_free(*out);
        *out = NULL;
    }
    return st;
}


void cl_mpi_finalize(void) {
    free(rank_host);
    rank_host = NULL;
    rank_hosts = hosts_differ = 0;
    if (mpi_inited_here) MPI_Finalize();
    mpi_inited_here = 0;
}

static cl_status mp_split(cl_comm *c, int color, int key, cl_comm **out) {
    mp_comm *m = c->impl;
    MPI_Comm np = MPI_COMM_NULL;
    int rc = MPI_Comm_split(m->p2p, color < 0 ? MPI_UNDEFINED : color, key, &np);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "split");
    *out = NULL;
    if (np == MPI_COMM_NULL) return CL_OK;
    return make_comm(np, c->rs, c->timeout_s, out);
}

/* ---- point-to-point ------------------------------------------------------ */

/* A user's receive is bounded by its own size, whatever the peer sends.
 * MPI_Irecv alone is not enough: OpenMPI 4.1's shared-memory single-copy
 * path (btl vader, CMA) reads the sender's whole message into the posted
 * buffer, so a send larger than the receive overran it (a 64448-byte write
 * into a 32832-byte slot) instead of failing with MPI_ERR_TRUNCATE. So a
 * receive posts nothing at first: each piece (as batch_post cuts them) is
 * matched with MPI_Improbe, its size checked with MPI_Get_count, and only
 * then received with MPI_Imrecv into exactly that many bytes. Matched
 * probes are thread-safe, unlike MPI_Iprobe + MPI_Irecv. A send of another
 * size is received into scratch and dropped (so the sender's send
 * completes) and the receive fails naming both sizes.
 *
 * Matching runs in a receive's test and wait (and once when posted), over
 * the communicator's unmatched receives in the order they were posted, and
 * a receive is tried only when no earlier one from the same peer with the
 * same tag is still unmatched: so same-tag messages land in the order sent,
 * as MPI_Irecv's matching at post time would have it, whatever order the
 * receives are waited in. */
static cl_status recv_mismatch(cl_comm *c, const mp_msg *x) {
    char me[64];
    return cl_error(CL_ERR_COMM, "%s: %s: the send has %zu%s bytes, the receive expects %zu",
                    cl_comm_name_rank(c, c->rank, me, sizeof me), x->base.what, x->sent,
                    x->sent % PIECE_BYTES == 0 && x->sent > x->bytes ? " or more" : "", x->bytes);
}

/* Probes for the next message from peer with tag on comm: *cnt = -1 when
 * none has arrived, else its size; a message of another size than len has
 * been received into scratch and dropped (so that its send completes),
 * one of size len is left in *msg to be received. */
static cl_status probe_piece(cl_comm *c, MPI_Comm comm, int peer, int tag, size_t len, const char *what,
                             MPI_Message *msg, int *cnt) {
    int flag = 0;
    MPI_Status mst;
    int rc = MPI_Improbe(peer, tag, comm, &flag, msg, &mst);
    *cnt = -1;
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, what);
    if (!flag) return CL_OK;
    MPI_Get_count(&mst, MPI_BYTE, cnt);
    if (*cnt < 0) *cnt = 0;
    if ((size_t)*cnt != len) {
        void *drop = malloc(*cnt ? (size_t)*cnt : 1);
        if (drop) MPI_Mrecv(drop, *cnt, MPI_BYTE, msg, MPI_STATUS_IGNORE);
        free(drop);
    }
    return CL_OK;
}

/* Matches what has arrived of x's pieces; *all when every piece is. */
static cl_status match_pieces(cl_comm *c, mp_msg *x, int *all) {
    mp_comm *m = c->impl;
    size_t pieces = x->bytes ? (x->bytes + PIECE_BYTES - 1) / PIECE_BYTES : 1;
    *all = 0;
    if (x->mismatch) return recv_mismatch(c, x);
    while ((size_t)x->b.n < pieces) {
        size_t off = (size_t)x->b.n * PIECE_BYTES, len = x->bytes - off < PIECE_BYTES ? x->bytes - off : PIECE_BYTES;
        int cnt = 0;
        MPI_Message msg;
        CL_TRY(probe_piece(c, m->p2p, x->peer, x->tag, len, x->base.what, &msg, &cnt));
        if (cnt < 0) return CL_OK;
        if ((size_t)cnt != len) {
            x->mismatch = 1;
            x->sent = off + (size_t)cnt;
            return recv_mismatch(c, x);
        }
        int rc = MPI_Imrecv(x->buf + off, cnt, MPI_BYTE, &msg, &x->b.r[x->b.n]);
        if (rc != MPI_SUCCESS) return mpi_error(c, rc, x->base.what);
        x->b.peer[x->b.n++] = x->peer;
    }
    *all = 1;
    return CL_OK;
}

/* Matches the unmatched receives up to x, in order (see above); *all when x
 * is wholly matched. */
static cl_status recv_match(cl_comm *c, mp_msg *x, int *all) {
    mp_comm *m = c->impl;
    mp_msg **link = &m->unmatched;
    *all = 1;
    while (*link) {
        mp_msg *r = *link;
        int blocked = 0, done = 0;
        for (mp_msg *q = m->unmatched; q != r && !blocked; q = q->next) blocked = q->peer == r->peer && q->tag == r->tag;
        if (!blocked) CL_TRY(match_pieces(c, r, &done));
        if (done) *link = r->next; /* out of the list */
        else link = &r->next;
        if (r == x) {
            *all = done;
            break;
        }
    }
    return CL_OK;
}

/* Takes x out of the unmatched list if it is there. */
static void recv_unlink(cl_comm *c, mp_msg *x) {
    mp_comm *m = c->impl;
    for (mp_msg **link = &m->unmatched; *link; link = &(*link)->next)
        if (*link == x) {
            *link = x->next;
            return;
        }
}

static cl_status post(cl_comm *c, int send, void *buf, size_t bytes, int peer, int tag, cl_request **req) {
    mp_comm *m = c->impl;
    mp_msg *x = calloc(1, sizeof *x);
    if (!x) return cl_error(CL_ERR_OOM, "rank %d: no host memory for a message", c->rs->world_rank);
    x->base.comm = c;
    x->bytes = bytes;
    x->is_send = send;
    x->buf = buf;
    x->peer = peer;
    x->tag = tag;
    cl_comm_p2p_what(c, x->base.what, sizeof x->base.what, send, peer, tag);
    int all = 0;
    cl_status st = send ? batch_post(c, &x->b, m->p2p, send, buf, bytes, peer, tag, x->base.what)
                        : batch_reserve(&x->b, (int)(bytes ? (bytes + PIECE_BYTES - 1) / PIECE_BYTES : 1));
    if (st == CL_OK && !send) {
        mp_msg **link = &m->unmatched;
        while (*link) link = &(*link)->next;
        *link = x;
        st = recv_match(c, x, &all);
        if (st != CL_OK) recv_unlink(c, x);
    }
    if (st != CL_OK) {
        for (int i = 0; i < x->b.n; i++) {
            MPI_Cancel(&x->b.r[i]);
            MPI_Request_free(&x->b.r[i]);
        }
        batch_free(&x->b);
        free(x);
        return st;
    }
    *req = &x->base;
    return CL_OK;
}

static cl_status mp_isend(cl_comm *c, const void *buf, size_t bytes, int peer, int tag, cl_request **req) {
    return post(c, 1, (void *)buf, bytes, peer, tag, req);
}

static cl_status mp_irecv(cl_comm *c, void *buf, size_t bytes, int peer, int tag, cl_request **req) {
    return post(c, 0, buf, bytes, peer, tag, req);
}

static cl_status mp_wait(cl_comm *c, cl_request *req) {
    mp_msg *x = (mp_msg *)req;
    cl_status st = CL_OK;
    int all = x->is_send, polls = 0;
    for (double start = cl_now(); st == CL_OK && !all;) {
        if ((st = recv_match(c, x, &all)) != CL_OK || all) break;
        char host[HOST_CHARS + 16];
        if (expired(c, start)) st = timed_out(c, start, x->base.what, peer_host(c, x->peer, host, sizeof host));
        else pause_poll(&polls, start);
    }
    if (st == CL_OK) st = batch_wait(c, &x->b, x->base.what, 1);
    recv_unlink(c, x);
    batch_free(&x->b);
    free(x);
    return st;
}

static cl_status mp_test(cl_comm *c, cl_request *req, int *done) {
    mp_msg *x = (mp_msg *)req;
    int flag = 0, all = x->is_send;
    cl_status st = all ? CL_OK : recv_match(c, x, &all);
    if (st == CL_OK && !all) {
        *done = 0;
        return CL_OK;
    }
    /* Testall leaves the requests alone unless all are complete. */
    int rc = st == CL_OK ? MPI_Testall(x->b.n, x->b.r, &flag, x->b.st) : MPI_SUCCESS;
    *done = st != CL_OK || rc != MPI_SUCCESS || flag;
    if (!*done) return CL_OK;
    if (st == CL_OK && rc != MPI_SUCCESS) st = mpi_error(c, rc, x->base.what);
    recv_unlink(c, x);
    batch_free(&x->b);
    free(x);
    return st;
}

/* ---- collectives --------------------------------------------------------- */

static int coll_tag(unsigned seq, int phase, size_t k) {
    return (int)(((seq & 127u) << 8) | ((unsigned)phase << 7) | (unsigned)(k & 127u));
}

static cl_status scratch_reserve(cl_comm *c, size_t bytes) {
    mp_comm *m = c->impl;
    if (m->scratch_bytes >= bytes) return CL_OK;
    char *p = realloc(m->scratch, bytes);
    if (!p) return cl_error(CL_ERR_OOM, "rank %d: no host memory for %zu bytes of reduction scratch", c->rs->world_rank, bytes);
    m->scratch = p;
    m->scratch_bytes = bytes;
    return CL_OK;
}

/* ---- receives of sizes the caller gave ------------------------------------
 * The _v collectives take their sizes from the caller's counts, which the
 * ranks may disagree on, and a receive posted with MPI_Irecv is not safe
 * against a larger send (OpenMPI's single-copy path overruns it: see
 * recv_match). So their receives are matched first, piece by piece as
 * batch_post cuts a collective's message: MPI_Improbe, the piece's size
 * checked, then MPI_Imrecv into exactly that many bytes; a piece of
 * another size is received into scratch and dropped, and the collective
 * fails naming both sizes. (A send with more pieces than expected is not
 * seen; one with fewer makes the receive time out.) Zero-byte pieces are
 * neither sent nor received. */
typedef struct {
    char *buf;
    size_t bytes, off; /* off: bytes matched so far */
    int peer, tag;
} mp_checked;

/* Matches what has arrived of x[0..n), receiving each matched piece into b;
 * *left: how many are not wholly matched. */
static cl_status checked_match(cl_comm *c, mp_checked *x, int n, mp_batch *b, const char *what, int *left) {
    mp_comm *m = c->impl;
    *left = 0;
    for (int i = 0; i < n; i++) {
        size_t piece = coll_piece(x[i].bytes);
        while (x[i].off < x[i].bytes) {
            size_t len = x[i].bytes - x[i].off < piece ? x[i].bytes - x[i].off : piece;
            int cnt = 0;
            MPI_Message msg;
            CL_TRY(probe_piece(c, m->coll, x[i].peer, x[i].tag, len, what, &msg, &cnt));
            if (cnt < 0) break;
            if ((size_t)cnt != len) {
                char me[64], peer[64];
                return cl_error(CL_ERR_COMM, "%s: %s: %s sent a piece of %d bytes where %zu were expected (at byte %zu "
                                "of %zu): do the ranks pass the same counts?", cl_comm_name_rank(c, c->rank, me, sizeof me),
                                what, cl_comm_name_rank(c, x[i].peer, peer, sizeof peer), cnt, len, x[i].off, x[i].bytes);
            }
            CL_TRY(batch_reserve(b, 1));
            int rc = MPI_Imrecv(x[i].buf + x[i].off, cnt, MPI_BYTE, &msg, &b->r[b->n]);
            if (rc != MPI_SUCCESS) return mpi_error(c, rc, what);
            b->peer[b->n++] = x[i].peer;
            x[i].off += len;
        }
        *left += x[i].off < x[i].bytes;
    }
    return CL_OK;
}

/* Matches every receive of x[0..n) (see above), then waits for b. */
static cl_status checked_wait(cl_comm *c, mp_checked *x, int n, mp_batch *b, const char *what) {
    double start = cl_now();
    int polls = 0, left = 0;
    for (;;) {
        CL_TRY(checked_match(c, x, n, b, what, &left));
        if (!left) break;
        if (expired(c, start)) {
            char detail[600], name[64], host[HOST_CHARS + 16];
            size_t len = (size_t)snprintf(detail, sizeof detail, "waiting for");
            for (int i = 0, shown = 0; i < n && len < sizeof detail; i++)
                if (x[i].off < x[i].bytes) {
                    peer_host(c, x[i].peer, host, sizeof host);
                    len += (size_t)snprintf(detail + len, sizeof detail - len, "%s %s%s%s", shown++ ? "," : "",
                                            cl_comm_name_rank(c, x[i].peer, name, sizeof name), host[0] ? " " : "",
                                            host);
                }
            return timed_out(c, start, what, detail);
        }
        pause_poll(&polls, start);
    }
    return batch_wait(c, b, what, 0);
}

/* The reduction: chunk o of the element space is [lo[o], lo[o]+len[o]) of
 * in; this rank folds its own chunk into out (len[me] elements). With ag, out
 * is in + lo[me]*es and every chunk's result is then sent to every rank
 * (in place). ck: room for 2 (n-1) checked receives (the chunks come from
 * the caller's counts, see checked_match), or NULL. */
static cl_status reduce_chunks(cl_comm *c, cl_dtype dt, cl_redop op, char *in, char *out, int ag, mp_checked *ck,
                               const char *what) {
    mp_comm *m = c->impl;
    int n = c->size, me = c->rank;
    size_t es = cl_dtype_size(dt), S = SEG_BYTES / es, maxlen = 0;
    for (int o = 0; o < n; o++)
        if (m->len[o] > maxlen) maxlen = m->len[o];
    size_t nseg = (maxlen + S - 1) / S;
    unsigned seq = m->seq++;
    if (nseg == 0) return CL_OK;
    size_t slab = (size_t)(n - 1) * S * es; /* one segment's pieces from every peer */
    CL_TRY(scratch_reserve(c, 2 * slab));
    mp_batch *rs = &m->b[0], *agb = &m->b[2];
    rs[0].n = rs[1].n = agb[0].n = agb[1].n = 0;
    cl_status st = CL_OK;

#define PIECE(o, k) ((k) * S < m->len[o] ? (m->len[o] - (k) * S < S ? m->len[o] - (k) * S : S) : 0)
#define SLOT(p) ((p) < me ? (p) : (p) - 1)

    for (size_t k = 0; k <= nseg && st == CL_OK; k++) {
        /* post the reduce-scatter messages of segment k */
        if (k < nseg) {
            mp_batch *b = &rs[k % 2];
            char *sc = m->scratch + (k % 2) * slab;
            int tag = coll_tag(seq, PH_RS, k);
            size_t mine = PIECE(me, k);
            mp_checked *x = ck ? ck + (k % 2) * (size_t)(n - 1) : NULL;
            for (int p = 0; p < n && st == CL_OK; p++) {
                if (p == me) continue;
                if (mine && x)
                    x[SLOT(p)] = (mp_checked){sc + (size_t)SLOT(p) * S * es, mine * es, 0, p, tag};
                else if (mine)
                    st = batch_post(c, b, m->coll, 0, sc + (size_t)SLOT(p) * S * es, mine * es, p, tag, what);
                size_t theirs = PIECE(p, k);
                if (st == CL_OK && theirs)
                    st = batch_post(c, b, m->coll, 1, in + (m->lo[p] + k * S) * es, theirs * es, p, tag, what);
            }
        }
        if (k == 0 || st != CL_OK) continue;
        /* finish segment j = k - 1: fold it, then send it to everyone */
        size_t j = k - 1;
        mp_batch *b = &rs[j % 2];
        size_t mine = PIECE(me, j);
        if (ck) st = checked_wait(c, ck + (j % 2) * (size_t)(n - 1), mine ? n - 1 : 0, b, what);
        else st = batch_wait(c, b, what, 0);
        if (st != CL_OK) break;
        if (mine) {
            char *sc = m->scratch + (j % 2) * slab;
            for (int p = 0; p < n; p++)
                m->src[p] = p == me ? in + (m->lo[me] + j * S) * es : sc + (size_t)SLOT(p) * S * es;
            m->dst[0] = out + j * S * es;
            cl_fold_rows(dt, op, n, m->src, m->dst, 1, mine, 0);
        }
        if (!ag) continue;
        mp_batch *a = &agb[j % 2];
        if ((st = batch_wait(c, a, what, 0)) != CL_OK) break; /* segment j - 2 */
        int tag = coll_tag(seq, PH_AG, j);
        for (int p = 0; p < n && st == CL_OK; p++) {
            if (p == me) continue;
            if (mine) st = batch_post(c, a, m->coll, 1, out + j * S * es, mine * es, p, tag, what);
            size_t theirs = PIECE(p, j);
            if (st == CL_OK && theirs)
                st = batch_post(c, a, m->coll, 0, in + (m->lo[p] + j * S) * es, theirs * es, p, tag, what);
        }
    }
#undef PIECE
#undef SLOT
    if (st == CL_OK && ag) st = batch_wait(c, &agb[0], what, 0);
    if (st == CL_OK && ag) st = batch_wait(c, &agb[1], what, 0);
    return st;
}

/* Posts the messages of an all-gather of bpr bytes per rank: mine to every
 * peer, and each peer's into out + peer * bpr (this rank's slot is left
 * alone). One tag for all: MPI keeps each pair's messages in order. */
static cl_status post_gather(cl_comm *c, mp_batch *b, const void *mine, char *out, size_t bpr, int tag,
                             const char *what) {
    mp_comm *m = c->impl;
    int n = c->size, me = c->rank;
    for (int k = 1; k < n; k++) {
        int to = (me + k) % n, from = (me - k + n) % n; /* spread the peers */
        CL_TRY(batch_post(c, b, m->coll, 0, out + (size_t)from * bpr, bpr, from, tag, what));
        CL_TRY(batch_post(c, b, m->coll, 1, (void *)mine, bpr, to, tag, what));
    }
    return CL_OK;
}

/* Small all-reduce in one round instead of two: every rank sends its whole
 * buffer to every peer and folds all n rows in rank order itself. The fold
 * is the same (cl_fold_rows over the same values in the same order), so the
 * bits are those of the two-round path and of the threads backend; it moves
 * n - 1 buffers per rank instead of 2 (n-1)/n, so only below CL_SMALL_AR_BYTES
 * of gathered data, where latency rules. Point-to-point messages rather
 * than MPI_Iallgather: batch_post splits them into eager pieces, where
 * OpenMPI's non-blocking all-gather sends a 4 KiB buffer by rendezvous
 * (measured 2x slower at 4 KiB on two ranks, docs/PERFORMANCE.md). */
static cl_status small_allreduce(cl_comm *c, void *buf, size_t count, cl_dtype dt, cl_redop op, const char *what) {
    mp_comm *m = c->impl;
    int n = c->size, me = c->rank, tag = coll_tag(m->seq++, PH_AG, 0);
    size_t bytes = count * cl_dtype_size(dt);
    if (count == 0) return CL_OK;
    CL_TRY(scratch_reserve(c, (size_t)n * bytes));
    mp_batch *b = &m->b[0];
    b->n = 0;
    CL_TRY(post_gather(c, b, buf, m->scratch, bytes, tag, what));
    CL_TRY(batch_wait(c, b, what, 0));
    for (int p = 0; p < n; p++) m->src[p] = p == me ? buf : m->scratch + (size_t)p * bytes;
    m->dst[0] = buf; /* aliases src[me] at the same offset, which the fold allows */
    cl_fold_rows(dt, op, n, m->src, m->dst, 1, count, 0);
    return CL_OK;
}

static cl_status mp_allreduce(cl_comm *c, void *buf, size_t count, cl_dtype dt, cl_redop op) {
    mp_comm *m = c->impl;
    const char *what = "allreduce";
    int n = c->size;
    for (int o = 0; o < n; o++) {
        size_t lo, hi;
        cl_comm_chunk(count, n, o, &lo, &hi);
        m->lo[o] = lo;
        m->len[o] = hi - lo;
    }
    if (n == 1) {
        m->src[0] = buf;
        m->dst[0] = buf;
        cl_fold_rows(dt, op, 1, m->src, m->dst, 1, count, 0);
        return CL_OK;
    }
    size_t es = cl_dtype_size(dt);
    if ((size_t)n * count * es <= CL_SMALL_AR_BYTES) return small_allreduce(c, buf, count, dt, op, what);
    char *b = buf;
    return reduce_chunks(c, dt, op, b, b + m->lo[c->rank] * es, 1, NULL, what);
}

static cl_status mp_reduce_scatter(cl_comm *c, const void *in, void *out, size_t cpr, cl_dtype dt, cl_redop op) {
    mp_comm *m = c->impl;
    int n = c->size;
    for (int o = 0; o < n; o++) {
        m->lo[o] = (size_t)o * cpr;
        m->len[o] = cpr;
    }
    if (n == 1) {
        m->src[0] = in;
        m->dst[0] = out;
        cl_fold_rows(dt, op, 1, m->src, m->dst, 1, cpr, 0);
        return CL_OK;
    }
    return reduce_chunks(c, dt, op, (char *)in, (char *)out, 0, NULL, "reduce_scatter");
}

static cl_status mp_allgather(cl_comm *c, const void *in, void *out, size_t bpr) {
    mp_comm *m = c->impl;
    int n = c->size;
    char *mine = (char *)out + (size_t)c->rank * bpr;
    unsigned seq = m->seq++;
    /* my own piece: small ones are copied while the messages move (copying
     * first measured 10-50% slower at 32-512 KiB on 2 ranks), large ones
     * first (a few % faster from 4 MiB: the copy and the transfer share
     * the memory bus either way) */
    int copy_first = n == 1 || bpr >= (1u << 20);
    if (copy_first && mine != in) cl_copy(mine, in, bpr);
    if (n == 1 || bpr == 0) return CL_OK;
    /* every message at once (no scratch to bound): measured faster than
     * 4 MiB pieces two at a time, which left MPI idle between pieces */
    mp_batch *b = &m->b[0];
    b->n = 0;
    cl_status st = post_gather(c, b, in, out, bpr, coll_tag(seq, PH_AG, 0), "allgather");
    if (!copy_first && mine != in) cl_copy(mine, in, bpr);
    if (st == CL_OK) st = batch_wait(c, b, "allgather", 0);
    return st;
}

/* The chunks of a _v collective: chunk o at lo[o] (prefix sums), len[o] = counts[o]. */
static void v_chunks(cl_comm *c, const size_t *counts) {
    mp_comm *m = c->impl;
    size_t off = 0;
    for (int o = 0; o < c->size; o++) {
        m->lo[o] = off;
        m->len[o] = counts[o];
        off += counts[o];
    }
}

/* reduce_chunks over the caller's chunks, with checked receives. */
static cl_status mp_reduce_scatter_v(cl_comm *c, const void *in, void *out, const size_t *counts, cl_dtype dt,
                                     cl_redop op) {
    mp_comm *m = c->impl;
    int n = c->size;
    v_chunks(c, counts);
    if (n == 1) {
        m->src[0] = in;
        m->dst[0] = out;
        cl_fold_rows(dt, op, 1, m->src, m->dst, 1, counts[0], 0);
        return CL_OK;
    }
    mp_checked *ck = malloc(2 * (size_t)(n - 1) * sizeof *ck);
    if (!ck) return cl_error(CL_ERR_OOM, "rank %d: no host memory for %d receives", c->rs->world_rank, 2 * (n - 1));
    cl_status st = reduce_chunks(c, dt, op, (char *)in, (char *)out, 0, ck, "reduce_scatter_v");
    free(ck);
    return st;
}

/* The exchange of the _v all-gather and the all-to-all, over point-to-point
 * with checked receives: x holds 4 n byte values (send counts, send
 * offsets into in, receive counts, receive offsets into out, one a peer);
 * every other rank's piece is one message (in pieces) per pair with a
 * nonzero count, this rank's own is left to the caller. A receive of
 * another size than the sender's fails naming both sizes; a sender with 0
 * where the receiver expects more makes the receive time out. */
static cl_status exchange(cl_comm *c, unsigned seq, const void *in, void *out, const size_t *x, const char *what) {
    mp_comm *m = c->impl;
    int n = c->size, me = c->rank;
    size_t p = (size_t)n;
    if (n == 1) return CL_OK;
    mp_checked *ck = malloc((size_t)(n - 1) * sizeof *ck);
    if (!ck) return cl_error(CL_ERR_OOM, "rank %d: no host memory for %d receives", c->rs->world_rank, n - 1);
    mp_batch *b = &m->b[0];
    b->n = 0;
    int tag = coll_tag(seq, PH_AG, 0), nck = 0;
    cl_status st = CL_OK;
    for (int k = 1; k < n && st == CL_OK; k++) {
        int to = (me + k) % n, from = (me - k + n) % n; /* spread the peers */
        size_t rb = x[2 * p + (size_t)from], sb = x[to];
        if (rb) ck[nck++] = (mp_checked){(char *)out + x[3 * p + (size_t)from], rb, 0, from, tag};
        if (sb) st = batch_post(c, b, m->coll, 1, (char *)in + x[p + (size_t)to], sb, to, tag, what);
    }
    if (st == CL_OK) st = checked_wait(c, ck, nck, b, what);
    free(ck);
    return st;
}

/* As mp_allgather, with pieces of the caller's sizes (an exchange); empty
 * pieces move no message. */
static cl_status mp_allgather_v(cl_comm *c, const void *in, void *out, const size_t *counts) {
    mp_comm *m = c->impl;
    int n = c->size, me = c->rank;
    size_t p = (size_t)n;
    unsigned seq = m->seq++;
    v_chunks(c, counts);
    size_t mine = counts[me];
    char *dst = (char *)out + m->lo[me];
    if (dst != in) cl_copy(dst, in, mine);
    if (n == 1) return CL_OK;
    size_t *x = malloc(4 * p * sizeof *x);
    if (!x) return cl_error(CL_ERR_OOM, "rank %d: no host memory for %d counts", c->rs->world_rank, 4 * n);
    for (size_t j = 0; j < p; j++) {
        x[j] = mine;
        x[p + j] = 0;
        x[2 * p + j] = m->len[j];
        x[3 * p + j] = m->lo[j];
    }
    cl_status st = exchange(c, seq, in, out, x, "allgather_v");
    free(x);
    return st;
}

/* This rank's own piece copied, the others an exchange. */
static cl_status mp_alltoallv(cl_comm *c, const void *in, void *out, const size_t *x, cl_dtype dt, const char *what) {
    mp_comm *m = c->impl;
    size_t p = (size_t)c->size, me = (size_t)c->rank;
    unsigned seq = m->seq++;
    (void)dt;
    if (x[me]) cl_copy((char *)out + x[3 * p + me], (const char *)in + x[p + me], x[me]);
    return exchange(c, seq, in, out, x, what);
}

static cl_status mp_broadcast(cl_comm *c, void *buf, size_t bytes, int root) {
    mp_comm *m = c->impl;
    int n = c->size, me = c->rank;
    unsigned seq = m->seq++;
    if (n == 1 || bytes == 0) return CL_OK;
    mp_batch *b = &m->b[0];
    b->n = 0;
    cl_status st = CL_OK;
    int tag = coll_tag(seq, PH_RS, 0);
    if (bytes < CL_BCAST_TREE_BYTES || n == 2) { /* binomial tree over ranks relative to root */
        int vr = (me - root + n) % n, mask = 1;
        while (mask < n) {
            if (vr & mask) {
                st = batch_post(c, b, m->coll, 0, buf, bytes, (vr - mask + root) % n, tag, "broadcast");
                if (st == CL_OK) st = batch_wait(c, b, "broadcast", 0);
                break;
            }
            mask <<= 1;
        }
        for (mask >>= 1; mask > 0 && st == CL_OK; mask >>= 1)
            if (vr + mask < n) st = batch_post(c, b, m->coll, 1, buf, bytes, (vr + mask + root) % n, tag, "broadcast");
        if (st == CL_OK) st = batch_wait(c, b, "broadcast", 0);
        return st;
    }
    /* scatter the chunks from root, then every rank sends its chunk to the others */
    char *p = buf;
    size_t lo, hi;
    if (me == root) {
        for (int r = 0; r < n && st == CL_OK; r++) {
            cl_comm_chunk(bytes, n, r, &lo, &hi);
            if (r != root && hi > lo) st = batch_post(c, b, m->coll, 1, p + lo, hi - lo, r, tag, "broadcast");
        }
    } else {
        cl_comm_chunk(bytes, n, me, &lo, &hi);
        if (hi > lo) st = batch_post(c, b, m->coll, 0, p + lo, hi - lo, root, tag, "broadcast");
    }
    if (st == CL_OK) st = batch_wait(c, b, "broadcast", 0);
    int tag2 = coll_tag(seq, PH_AG, 0);
    cl_comm_chunk(bytes, n, me, &lo, &hi);
    for (int r = 0; r < n && st == CL_OK; r++) {
        if (r == me || r == root || hi == lo) continue;
        st = batch_post(c, b, m->coll, 1, p + lo, hi - lo, r, tag2, "broadcast");
    }
    if (me != root) {
        for (int r = 0; r < n && st == CL_OK; r++) {
            size_t l2, h2;
            cl_comm_chunk(bytes, n, r, &l2, &h2);
            if (r == me || h2 == l2) continue;
            st = batch_post(c, b, m->coll, 0, p + l2, h2 - l2, r, tag2, "broadcast");
        }
    }
    if (st == CL_OK) st = batch_wait(c, b, "broadcast", 0);
    return st;
}

static cl_status mp_barrier(cl_comm *c) {
    mp_comm *m = c->impl;
    mp_batch *b = &m->b[0];
    b->n = 0;
    CL_TRY(batch_reserve(b, 1));
    int rc = MPI_Ibarrier(m->coll, &b->r[0]);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "barrier");
    b->peer[0] = -1;
    b->n = 1;
    return batch_wait(c, b, "barrier", 1);
}

static const cl_comm_ops mp_ops = {
    .name = "mpi",
    .isend = mp_isend,
    .irecv = mp_irecv,
    .wait = mp_wait,
    .test = mp_test,
    .allreduce = mp_allreduce,
    .reduce_scatter = mp_reduce_scatter,
    .allgather = mp_allgather,
    .reduce_scatter_v = mp_reduce_scatter_v,
    .allgather_v = mp_allgather_v,
    .alltoallv = mp_alltoallv,
    .broadcast = mp_broadcast,
    .barrier = mp_barrier,
    .split = mp_split,
    .fail = NULL,
    .destroy = mp_destroy,
};

#endif
