/* The threads backend: the ranks of a world are threads of one process, and
 * a communicator's ranks share one group object in memory.
 *
 * Why: the default way to run cleave needs no setup, and shared memory lets
 * a collective read the other ranks' buffers directly instead of copying
 * messages: an all-reduce publishes every rank's buffer pointer, then rank r
 * folds its own 1/n slice out of all buffers in rank order and writes the
 * result into all of them.
 *
 * Every collective follows one protocol on its group:
 *   publish (the rank's slot: kind, pointers, count, op, root),
 *   barrier 1 (abortable: gives up on a failed world or on the timeout),
 *   check that every rank published the same kind/count/op/root,
 *   data phase (reads and writes the other ranks' buffers),
 *   barrier 2 (not abortable).
 * Invariants that make this safe:
 * - Barrier 1 completes only when every rank has arrived and none has
 *   withdrawn (both happen under the group mutex), so a rank that gave up
 *   can never have its buffer touched by the data phase.
 * - Once barrier 1 has completed every rank is inside the data phase, which
 *   does no waiting, so barrier 2 always completes: no rank leaves while
 *   another still reads or writes its buffer, even when the world fails.
 * - Slots are written before barrier 1 and read only between the barriers.
 * Point-to-point: a mailbox per (source, destination) pair holds posted,
 * unmatched sends and receives; the second side to arrive matches the first
 * in posting order with an equal tag, copies the data once, and marks both
 * done. A matched message is always finished (its copy is under way), so
 * waits give up only on messages still unmatched.
 * All waiting is on condition variables (CLOCK_MONOTONIC deadlines); a world
 * failure broadcasts every group's condition variable. Lock order: world
 * mutex before a group mutex. */
#include "comm/internal.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct th_group th_group;

enum { MSG_POSTED = 0, MSG_MATCHED, MSG_DONE };

typedef struct th_msg {
    cl_request base; /* first: the front end sees a cl_request; base.st/msg carry the result */
    struct th_msg *next;
    th_group *g;
    int is_send, src, dst, tag; /* group ranks */
    size_t bytes;
    const void *sbuf;
    void *rbuf;
    int state;
    char who[64]; /* the posting rank's name, for messages */
    struct th_msg *onext, *oprev; /* the handle's outstanding messages (owner only) */
} th_msg;

typedef struct {
    th_msg *sh, *st; /* sends posted by src, not yet matched */
    th_msg *rh, *rt; /* receives posted by dst, not yet matched */
} th_box;

typedef struct {
    int kind, dt, op, root;
    int color, key;
    size_t n;
    const void *p;
    void *q;
    const size_t *v; /* a _v collective's per-rank counts (NULL for the others) */
    const size_t *x; /* an all-to-all's byte counts and offsets (cl_comm_ops.alltoallv) */
} th_slot;

struct th_group {
    cl_th_world *w;
    int size;
    int is_world;
    int *wr; /* group rank -> world rank */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long gen;
    int arrived;
    unsigned char *here; /* here[r]: rank r waits in the current barrier */
    th_slot *slot;
    th_box *box; /* box[src * size + dst] */
    int refs;
    th_group *next, *prev;
};

struct cl_th_world {
    pthread_mutex_t mu;
    atomic_int failed;
    int fail_rank;
    cl_status fail_st;
    char fail_what[160];
    char fail_msg[800];
    th_group *groups;
    th_group *world;
    int nranks;
    double timeout_s;
};

typedef struct {
    th_group *g;
    const void **src; /* scratch for the fold, size entries */
    void **dst;
    th_msg *outstanding; /* posted, not yet waited */
} th_comm;

static const cl_comm_ops th_ops;

/* ---- time ---------------------------------------------------------------- */

typedef struct {
    int forever;
    struct timespec ts;
} th_deadline;

static th_deadline deadline_in(double s) {
    th_deadline d = {0, {0, 0}};
    if (!(s < 1e8)) {
        d.forever = 1;
        return d;
    }
    clock_gettime(CLOCK_MONOTONIC, &d.ts);
    double whole = (double)(long)s;
    d.ts.tv_sec += (time_t)whole;
    d.ts.tv_nsec += (long)((s - whole) * 1e9);
    if (d.ts.tv_nsec >= 1000000000L) {
        d.ts.tv_sec++;
        d.ts.tv_nsec -= 1000000000L;
    }
    return d;
}

static int passed(const th_deadline *d) {
    if (d->forever) return 0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > d->ts.tv_sec || (now.tv_sec == d->ts.tv_sec && now.tv_nsec >= d->ts.tv_nsec);
}

/* Waits on g->cv (mu held) until signalled or the deadline. */
static void wait_until(th_group *g, const th_deadline *d) {
    if (d->forever) pthread_cond_wait(&g->cv, &g->mu);
    else pthread_cond_timedwait(&g->cv, &g->mu, &d->ts);
}

/* ---- failure ------------------------------------------------------------- */

static int world_failed(cl_th_world *w) { return atomic_load_explicit(&w->failed, memory_order_acquire); }

static cl_status failed_error(cl_th_world *w) {
    return cl_error(CL_ERR_COMM, "rank %d failed%s%s: %s", w->fail_rank, w->fail_what[0] ? " in " : "", w->fail_what,
                    w->fail_msg);
}

void cl_th_world_fail(cl_th_world *w, int rank, cl_status st, const char *what, const char *msg) {
    pthread_mutex_lock(&w->mu);
    if (!atomic_load(&w->failed)) {
        w->fail_rank = rank;
        w->fail_st = st;
        snprintf(w->fail_what, sizeof w->fail_what, "%s", what ? what : "");
        snprintf(w->fail_msg, sizeof w->fail_msg, "%s", msg ? msg : "(no message)");
        atomic_store_explicit(&w->failed, 1, memory_order_release);
        for (th_group *g = w->groups; g; g = g->next) {
            pthread_mutex_lock(&g->mu);
            pthread_cond_broadcast(&g->cv);
            pthread_mutex_unlock(&g->mu);
        }
    }
    pthread_mutex_unlock(&w->mu);
}

cl_status cl_th_world_status(cl_th_world *w) {
    if (!world_failed(w)) return CL_OK;
    cl_error(w->fail_st, "rank %d failed%s%s: %s", w->fail_rank, w->fail_what[0] ? " in " : "", w->fail_what,
             w->fail_msg);
    return w->fail_st;
}

static void th_fail(cl_comm *c, cl_status st, const char *what, const char *msg) {
    th_comm *t = c->impl;
    cl_th_world_fail(t->g->w, c->rs->world_rank, st, what, msg);
}

/* This rank timed out: its own error, and the world's failure. No mutex held. */
static cl_status timed_out(cl_comm *c, const char *what, const char *detail) {
    char me[64], msg[700];
    snprintf(msg, sizeof msg, "timed out after %.1f s%s%s", c->timeout_s, detail[0] ? " " : "", detail);
    th_fail(c, CL_ERR_COMM, what, msg);
    return cl_error(CL_ERR_COMM, "%s: timed out after %.1f s in %s%s%s", cl_comm_name_rank(c, c->rank, me, sizeof me),
                    c->timeout_s, what, detail[0] ? " " : "", detail);
}

/* ---- groups -------------------------------------------------------------- */

static void group_free(th_group *g) {
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->wr);
    free(g->here);
    free(g->slot);
    free(g->box);
    free(g);
}

/* A group of size ranks (world ranks wr), registered in w, refs = size. */
static th_group *group_new(cl_th_world *w, int size, const int *wr) {
    th_group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->wr = malloc((size_t)size * sizeof *g->wr);
    g->here = calloc((size_t)size, 1);
    g->slot = calloc((size_t)size, sizeof *g->slot);
    g->box = calloc((size_t)size * (size_t)size, sizeof *g->box);
    if (!g->wr || !g->here || !g->slot || !g->box) {
        free(g->wr);
        free(g->here);
        free(g->slot);
        free(g->box);
        free(g);
        return NULL;
    }
    memcpy(g->wr, wr, (size_t)size * sizeof *wr);
    g->w = w;
    g->size = size;
    g->is_world = size == w->nranks;
    for (int i = 0; i < size && g->is_world; i++)
        if (wr[i] != i) g->is_world = 0;
    g->refs = size;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&w->mu);
    g->next = w->groups;
    if (w->groups) w->groups->prev = g;
    w->groups = g;
    pthread_mutex_unlock(&w->mu);
    return g;
}

static void group_unref(th_group *g) {
    cl_th_world *w = g->w;
    pthread_mutex_lock(&w->mu);
    int last = --g->refs == 0;
    if (last) {
        if (g->prev) g->prev->next = g->next;
        else w->groups = g->next;
        if (g->next) g->next->prev = g->prev;
    }
    pthread_mutex_unlock(&w->mu);
    if (last) group_free(g);
}

static cl_status comm_make(th_group *g, int rank, cl_rank_state *rs, double timeout_s, cl_comm **out) {
    th_comm *t = calloc(1, sizeof *t);
    if (t) {
        t->src = calloc((size_t)g->size, sizeof *t->src);
        t->dst = calloc((size_t)g->size, sizeof *t->dst);
    }
    if (!t || !t->src || !t->dst) {
        if (t) {
            free(t->src);
            free(t->dst);
        }
        free(t);
        return cl_error(CL_ERR_OOM, "rank %d: no host memory for a communicator of %d ranks", rs->world_rank, g->size);
    }
    t->g = g;
    cl_status st = cl_comm_new(&th_ops, t, rank, g->size, g->wr, rs, timeout_s, 1, out);
    if (st != CL_OK) {
        free(t->src);
        free(t->dst);
        free(t);
    }
    return st;
}

static void unpost(th_group *g, th_msg *m);

static void th_destroy(cl_comm *c) {
    th_comm *t = c->impl;
    /* messages never waited for: withdraw the unmatched, finish the matched */
    pthread_mutex_lock(&t->g->mu);
    while (t->outstanding) {
        th_msg *m = t->outstanding;
        if (m->state == MSG_POSTED) unpost(t->g, m);
        while (m->state == MSG_MATCHED) pthread_cond_wait(&t->g->cv, &t->g->mu);
        t->outstanding = m->onext;
        free(m);
    }
    pthread_mutex_unlock(&t->g->mu);
    group_unref(t->g);
    free(t->src);
    free(t->dst);
    free(t);
}

cl_status cl_th_world_create(int nranks, double timeout_s, cl_th_world **out) {
    cl_th_world *w = calloc(1, sizeof *w);
    int *wr = malloc((size_t)nranks * sizeof *wr);
    if (!w || !wr) {
        free(w);
        free(wr);
        return cl_error(CL_ERR_OOM, "no host memory for a world of %d ranks", nranks);
    }
    pthread_mutex_init(&w->mu, NULL);
    atomic_init(&w->failed, 0);
    w->nranks = nranks;
    w->timeout_s = timeout_s;
    for (int i = 0; i < nranks; i++) wr[i] = i;
    th_group *g = group_new(w, nranks, wr);
    free(wr);
    if (!g) {
        pthread_mutex_destroy(&w->mu);
        free(w);
        return cl_error(CL_ERR_OOM, "no host memory for a world of %d ranks", nranks);
    }
    w->world = g;
    *out = w;
    return CL_OK;
}

cl_status cl_th_world_comm(cl_th_world *w, int rank, cl_rank_state *rs, cl_comm **out) {
    return comm_make(w->world, rank, rs, w->timeout_s, out);
}

void cl_th_world_destroy(cl_th_world *w) {
    if (!w) return;
    th_group *g = w->groups;
    while (g) {
        th_group *n = g->next;
        group_free(g);
        g = n;
    }
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* ---- barrier ------------------------------------------------------------- */

/* "waiting for rank 5, rank 7": the ranks that have not arrived; mu held. */
static void missing_ranks(cl_comm *c, th_group *g, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "waiting for");
    int shown = 0, more = 0;
    for (int r = 0; r < g->size; r++) {
        if (g->here[r]) continue;
        if (shown == 8) {
            more++;
            continue;
        }
        char name[64];
        if (len < n) len += (size_t)snprintf(buf + len, n - len, "%s %s", shown ? "," : "", cl_comm_name_rank(c, r, name, sizeof name));
        shown++;
    }
    if (more && len < n) snprintf(buf + len, n - len, " and %d more", more);
}

/* Returns once every rank of the group has arrived. abortable: gives up,
 * withdrawing its arrival, when the world has failed or on the timeout;
 * otherwise waits unconditionally (only where every rank is known to be on
 * its way, see the file comment). */
static cl_status barrier(cl_comm *c, th_group *g, int abortable, const char *what) {
    cl_th_world *w = g->w;
    int me = c->rank;
    pthread_mutex_lock(&g->mu);
    if (abortable && world_failed(w)) {
        pthread_mutex_unlock(&g->mu);
        return failed_error(w);
    }
    unsigned long gen = g->gen;
    g->here[me] = 1;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        memset(g->here, 0, (size_t)g->size);
        g->gen++;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return CL_OK;
    }
    th_deadline d = deadline_in(abortable ? c->timeout_s : INFINITY);
    while (g->gen == gen) {
        if (abortable && world_failed(w)) {
            g->here[me] = 0;
            g->arrived--;
            pthread_mutex_unlock(&g->mu);
            return failed_error(w);
        }
        if (abortable && passed(&d)) {
            char detail[600];
            missing_ranks(c, g, detail, sizeof detail);
            g->here[me] = 0;
            g->arrived--;
            pthread_mutex_unlock(&g->mu);
            return timed_out(c, what, detail);
        }
        wait_until(g, &d);
    }
    pthread_mutex_unlock(&g->mu);
    return CL_OK;
}

/* "reduce_scatter_v" for a slot of a _v collective, else the kind's name. */
static const char *slot_name(const th_slot *s) {
    if (s->v) return s->kind == CL_OP_REDUCE_SCATTER ? "reduce_scatter_v" : "allgather_v";
    return cl_opkind_name((cl_opkind)s->kind);
}

/* After barrier 1: CL_OK if every rank published what rank 0 did (and, in
 * a _v collective, the same counts), else a message naming the first rank
 * that differs (every rank finds the same). */
static cl_status check_slots(cl_comm *c, th_group *g, const char *what) {
    const th_slot *a = &g->slot[0];
    char n0[64], n1[64];
    for (int r = 1; r < g->size; r++) {
        const th_slot *b = &g->slot[r];
        int same = b->kind == a->kind && b->dt == a->dt && b->op == a->op && b->root == a->root && !b->v == !a->v &&
                   !b->x == !a->x;
        if (same && a->v) {
            int i = 0;
            while (i < g->size && a->v[i] == b->v[i]) i++;
            if (i < g->size)
                return cl_error(CL_ERR_INVALID, "%s: the ranks disagree: %s passed counts[%d] = %zu, %s passed counts[%d] = %zu",
                                what, cl_comm_name_rank(c, 0, n0, sizeof n0), i, a->v[i],
                                cl_comm_name_rank(c, r, n1, sizeof n1), i, b->v[i]);
        }
        if (same && b->n == a->n) continue;
        return cl_error(CL_ERR_INVALID,
                        "%s: the ranks disagree: %s called %s (count %zu, op %d, root %d), %s called %s (count %zu, op %d, root %d)",
                        what, cl_comm_name_rank(c, 0, n0, sizeof n0), slot_name(a), a->n, a->op, a->root,
                        cl_comm_name_rank(c, r, n1, sizeof n1), slot_name(b), b->n, b->op, b->root);
    }
    return CL_OK;
}

static void publish(th_group *g, int me, cl_opkind kind, cl_dtype dt, cl_redop op, int root, size_t n, const void *p,
                    void *q) {
    th_slot *s = &g->slot[me];
    s->kind = (int)kind;
    s->dt = (int)dt;
    s->op = (int)op;
    s->root = root;
    s->n = n;
    s->p = p;
    s->q = q;
    s->v = NULL;
    s->x = NULL;
}

/* ---- collectives --------------------------------------------------------- */

static cl_status th_allreduce(cl_comm *c, void *buf, size_t count, cl_dtype dt, cl_redop op) {
    th_comm *t = c->impl;
    th_group *g = t->g;
    int n = g->size, me = c->rank;
    const char *what = "allreduce";
    publish(g, me, CL_OP_ALLREDUCE, dt, op, 0, count, buf, buf);
    CL_TRY(barrier(c, g, 1, what));
    cl_status st = check_slots(c, g, what);
    if (st == CL_OK) {
        size_t lo, hi, es = cl_dtype_size(dt);
        cl_comm_chunk(count, n, me, &lo, &hi);
        for (int j = 0; j < n; j++) {
            t->dst[j] = (char *)g->slot[j].q + lo * es;
            t->src[j] = t->dst[j];
        }
        cl_fold_rows(dt, op, n, t->src, t->dst, n, hi - lo, 0); /* lines just read: cached stores */
    }
    barrier(c, g, 0, what);
    return st;
}

static cl_status th_reduce_scatter(cl_comm *c, const void *in, void *out, size_t cpr, cl_dtype dt, cl_redop op) {
    th_comm *t = c->impl;
    th_group *g = t->g;
    int n = g->size, me = c->rank;
    size_t es = cl_dtype_size(dt);
    publish(g, me, CL_OP_REDUCE_SCATTER, dt, op, 0, cpr, in, out);
    CL_TRY(barrier(c, g, 1, "reduce_scatter"));
    cl_status st = check_slots(c, g, "reduce_scatter");
    if (st == CL_OK) {
        for (int j = 0; j < n; j++) t->src[j] = (const char *)g->slot[j].p + (size_t)me * cpr * es;
        t->dst[0] = out;
        cl_fold_rows(dt, op, n, t->src, t->dst, 1, cpr, (size_t)n * (size_t)n * cpr * es > CL_STREAM_BYTES);
    }
    barrier(c, g, 0, "reduce_scatter");
    return st;
}

static cl_status th_allgather(cl_comm *c, const void *in, void *out, size_t bpr) {
    th_comm *t = c->impl;
    th_group *g = t->g;
    int n = g->size, me = c->rank;
    publish(g, me, CL_OP_ALLGATHER, CL_F32, CL_RED_SUM, 0, bpr, in, out);
    CL_TRY(barrier(c, g, 1, "allgather"));
    cl_status st = check_slots(c, g, "allgather");
    if (st == CL_OK && bpr) { /* push: read my piece once, write it into every rank's out */
        int stream = (size_t)n * (size_t)n * bpr > CL_STREAM_BYTES;
        for (int k = 0; k < n; k++) {
            int j = (me + k) % n; /* spread the writers over the outputs */
            char *d = (char *)g->slot[j].q + (size_t)me * bpr;
            if (d == in) continue; /* in place: my piece is there already */
            if (stream) cl_copy_stream(d, in, bpr);
            else cl_copy(d, in, bpr);
        }
    }
    barrier(c, g, 0, "allgather");
    return st;
}

/* The sum of a _v collective's counts. */
static size_t v_total(const size_t *counts, int n) {
    size_t t = 0;
    for (int j = 0; j < n; j++) t += counts[j];
    return t;
}

static cl_status th_reduce_scatter_v(cl_comm *c, const void *in, void *out, const size_t *counts, cl_dtype dt,
                                     cl_redop op) {
    th_comm *t = c->impl;
    th_group *g = t->g;
    int n = g->size, me = c->rank;
    size_t total = v_total(counts, n), es = cl_dtype_size(dt);
    publish(g, me, CL_OP_REDUCE_SCATTER, dt, op, 0, total, in, out);
    g->slot[me].v = counts;
    CL_TRY(barrier(c, g, 1, "reduce_scatter_v"));
    cl_status st = check_slots(c, g, "reduce_scatter_v");
    if (st == CL_OK && total) {
        /* As th_allgather_v: each rank folds its chunk [lo, hi) of the whole
         * (cl_comm_chunk, as the all-reduce's) into the out of whichever
         * rank's piece it lies in, so a piece that is most of the whole (a
         * bucket inside one shard) is not one rank's fold alone. Element i
         * is folded in rank order whoever folds it: the same bits. */
        int stream = (size_t)n * total * es > CL_STREAM_BYTES;
        size_t lo, hi;
        cl_comm_chunk(total, n, me, &lo, &hi);
        for (size_t r = 0, at = 0; r < (size_t)n; at += counts[r++]) {
            size_t a = lo > at ? lo : at, b = hi < at + counts[r] ? hi : at + counts[r];
            if (a >= b) continue;
            for (int j = 0; j < n; j++) t->src[j] = (const char *)g->slot[j].p + a * es;
            t->dst[0] = (char *)g->slot[r].q + (a - at) * es;
            cl_fold_rows(dt, op, n, t->src, t->dst, 1, b - a, stream);
        }
    }
    barrier(c, g, 0, "reduce_scatter_v");
    return st;
}

static cl_status th_allgather_v(cl_comm *c, const void *in, void *out, const size_t *counts) {
    th_comm *t = c->impl;
    th_group *g = t->g;
    int n = g->size, me = c->rank;
    size_t total = v_total(counts, n);
    publish(g, me, CL_OP_ALLGATHER, CL_F32, CL_RED_SUM, 0, total, in, out);
    g->slot[me].v = counts;
    CL_TRY(barrier(c, g, 1, "allgather_v"));
    cl_status st = check_slots(c, g, "allgather_v");
    if (st == CL_OK && total) {
        /* Not a push: one rank's pieces can be most of the output (a shard
         * holding a large embedding), so each rank copies its chunk [lo, hi)
         * of the output's bytes (cl_comm_chunk) from whichever ranks' pieces
         * it lies in into every rank's out (the counts agree: checked). */
        int stream = (size_t)n * total > CL_STREAM_BYTES;
        size_t lo, hi;
        cl_comm_chunk(total, n, me, &lo, &hi);
        for (size_t r = 0, at = 0; r < (size_t)n; at += counts[r++]) {
            size_t a = lo > at ? lo : at, b = hi < at + counts[r] ? hi : at + counts[r];
            if (a >= b) continue;
            const char *src = (const char *)g->slot[r].p + (a - at);
            for (int k = 0; k < n; k++) {
                char *d = (char *)g->slot[(me + k) % n].q + a;
                if (d == src) continue; /* in place: the piece is there already */
                if (stream) cl_copy_stream(d, src, b - a);
                else cl_copy(d, src, b - a);
            }
        }
    }
    barrier(c, g, 0, "allgather_v");
    return st;
}

/* Pull: rank me copies what every rank j sends it (j's in + its send
 * offset for me) into out at its receive offset for j. Before that, every
 * rank checks every pair (sender i's count for j against receiver j's count
 * from i), so all ranks find the same first disagreement and none copies. */
static cl_status th_alltoallv(cl_comm *c, const void *in, void *out, const size_t *x, cl_dtype dt, const char *what) {
    th_comm *t = c->impl;
    th_group *g = t->g;
    int n = g->size, me = c->rank;
    size_t p = (size_t)n, es = cl_dtype_size(dt);
    publish(g, me, CL_OP_ALLTOALL, dt, CL_RED_SUM, 0, 0, in, out);
    g->slot[me].x = x;
    CL_TRY(barrier(c, g, 1, what));
    cl_status st = check_slots(c, g, what);
    for (int i = 0; i < n && st == CL_OK; i++)
        for (int j = 0; j < n && st == CL_OK; j++) {
            size_t sent = g->slot[i].x[j], want = g->slot[j].x[2 * p + (size_t)i];
            char ni[64], nj[64];
            if (sent != want)
                st = cl_error(CL_ERR_INVALID, "%s: the ranks disagree: %s sends %zu elements to %s, which expects %zu",
                              what, cl_comm_name_rank(c, i, ni, sizeof ni), sent / es,
                              cl_comm_name_rank(c, j, nj, sizeof nj), want / es);
        }
    if (st == CL_OK)
        for (int k = 0; k < n; k++) {
            int j = (me + k) % n; /* spread the readers over the inputs */
            const th_slot *sj = &g->slot[j];
            size_t bytes = x[2 * p + (size_t)j];
            if (bytes) cl_copy((char *)out + x[3 * p + (size_t)j], (const char *)sj->p + sj->x[p + (size_t)me], bytes);
        }
    barrier(c, g, 0, what);
    return st;
}

static cl_status th_broadcast(cl_comm *c, void *buf, size_t bytes, int root) {
    th_comm *t = c->impl;
    th_group *g = t->g;
    int me = c->rank;
    publish(g, me, CL_OP_BROADCAST, CL_F32, CL_RED_SUM, root, bytes, buf, buf);
    CL_TRY(barrier(c, g, 1, "broadcast"));
    cl_status st = check_slots(c, g, "broadcast");
    if (st == CL_OK && me != root) cl_copy(buf, g->slot[root].p, bytes);
    barrier(c, g, 0, "broadcast");
    return st;
}

static cl_status th_barrier(cl_comm *c) {
    th_comm *t = c->impl;
    th_group *g = t->g;
    publish(g, c->rank, CL_OP_BARRIER, CL_F32, CL_RED_SUM, 0, 0, NULL, NULL);
    CL_TRY(barrier(c, g, 1, "barrier"));
    cl_status st = check_slots(c, g, "barrier");
    barrier(c, g, 0, "barrier");
    return st;
}

typedef struct {
    int key, rank;
} th_member;

static int member_cmp(const void *a, const void *b) {
    const th_member *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static cl_status th_split(cl_comm *c, int color, int key, cl_comm **out) {
    th_comm *t = c->impl;
    th_group *g = t->g;
    int n = g->size, me = c->rank;
    *out = NULL;
    publish(g, me, CL_OP_SPLIT, CL_F32, CL_RED_SUM, 0, 0, NULL, NULL);
    g->slot[me].color = color;
    g->slot[me].key = key;
    CL_TRY(barrier(c, g, 1, "split"));
    cl_status st = check_slots(c, g, "split");
    th_member *m = NULL;
    int k = 0, myrank = -1;
    if (st == CL_OK && color >= 0) {
        m = malloc((size_t)n * sizeof *m);
        if (!m) st = cl_error(CL_ERR_OOM, "split: no host memory for %d members", n);
    }
    if (m) {
        for (int j = 0; j < n; j++)
            if (g->slot[j].color == color) m[k++] = (th_member){g->slot[j].key, j};
        qsort(m, (size_t)k, sizeof *m, member_cmp);
        for (int i = 0; i < k; i++)
            if (m[i].rank == me) myrank = i;
        if (myrank == 0) { /* the leader makes the group */
            int *wr = malloc((size_t)k * sizeof *wr);
            th_group *ng = NULL;
            if (wr) {
                for (int i = 0; i < k; i++) wr[i] = g->wr[m[i].rank];
                ng = group_new(g->w, k, wr);
                free(wr);
            }
            g->slot[me].q = ng;
        }
    }
    barrier(c, g, 0, "split");
    if (m) {
        th_group *ng = g->slot[m[0].rank].q;
        if (!ng) st = cl_error(CL_ERR_OOM, "split: no host memory for a group of %d ranks", k);
        else if ((st = comm_make(ng, myrank, c->rs, c->timeout_s, out)) != CL_OK) group_unref(ng);
    }
    barrier(c, g, 0, "split");
    free(m);
    return st;
}

/* ---- point-to-point ------------------------------------------------------ */

static void box_append(th_msg **h, th_msg **t, th_msg *m) {
    m->next = NULL;
    if (*t) (*t)->next = m;
    else *h = m;
    *t = m;
}

/* Removes and returns the first message of the list with this tag. */
static th_msg *box_take(th_msg **h, th_msg **t, int tag) {
    th_msg *prev = NULL;
    for (th_msg *m = *h; m; prev = m, m = m->next) {
        if (m->tag != tag) continue;
        if (prev) prev->next = m->next;
        else *h = m->next;
        if (*t == m) *t = prev;
        m->next = NULL;
        return m;
    }
    return NULL;
}

static void box_remove(th_msg **h, th_msg **t, th_msg *m) {
    th_msg *prev = NULL;
    for (th_msg *x = *h; x; prev = x, x = x->next) {
        if (x != m) continue;
        if (prev) prev->next = x->next;
        else *h = x->next;
        if (*t == x) *t = prev;
        return;
    }
}

/* s and r were just taken out of their lists; mu held (released during the copy). */
static void deliver(th_group *g, th_msg *s, th_msg *r) {
    if (s->bytes != r->bytes) {
        s->base.st = r->base.st = CL_ERR_COMM;
        snprintf(s->base.msg, sizeof s->base.msg, "%s: %s: the receive expects %zu bytes, the send has %zu", s->who,
                 s->base.what, r->bytes, s->bytes);
        snprintf(r->base.msg, sizeof r->base.msg, "%s: %s: the send has %zu bytes, the receive expects %zu", r->who,
                 r->base.what, s->bytes, r->bytes);
        s->state = r->state = MSG_DONE;
        pthread_cond_broadcast(&g->cv);
        return;
    }
    s->state = r->state = MSG_MATCHED;
    if (s->bytes) {
        pthread_mutex_unlock(&g->mu);
        cl_copy(r->rbuf, s->sbuf, s->bytes);
        pthread_mutex_lock(&g->mu);
    }
    s->state = r->state = MSG_DONE;
    pthread_cond_broadcast(&g->cv);
}

static cl_status post(cl_comm *c, int is_send, const void *sbuf, void *rbuf, size_t bytes, int peer, int tag,
                      cl_request **req) {
    th_comm *t = c->impl;
    th_group *g = t->g;
    th_msg *m = calloc(1, sizeof *m);
    if (!m) return cl_error(CL_ERR_OOM, "rank %d: no host memory for a message", c->rs->world_rank);
    m->base.comm = c;
    m->g = g;
    m->is_send = is_send;
    m->src = is_send ? c->rank : peer;
    m->dst = is_send ? peer : c->rank;
    m->tag = tag;
    m->bytes = bytes;
    m->sbuf = sbuf;
    m->rbuf = rbuf;
    cl_comm_name_rank(c, c->rank, m->who, sizeof m->who);
    cl_comm_p2p_what(c, m->base.what, sizeof m->base.what, is_send, peer, tag);
    th_box *b = &g->box[(size_t)m->src * (size_t)g->size + (size_t)m->dst];
    pthread_mutex_lock(&g->mu);
    if (world_failed(g->w)) {
        pthread_mutex_unlock(&g->mu);
        free(m);
        return failed_error(g->w);
    }
    th_msg *other = is_send ? box_take(&b->rh, &b->rt, tag) : box_take(&b->sh, &b->st, tag);
    if (other) deliver(g, is_send ? m : other, is_send ? other : m);
    else if (is_send) box_append(&b->sh, &b->st, m);
    else box_append(&b->rh, &b->rt, m);
    pthread_mutex_unlock(&g->mu);
    m->onext = t->outstanding;
    if (t->outstanding) t->outstanding->oprev = m;
    t->outstanding = m;
    *req = &m->base;
    return CL_OK;
}

static cl_status th_isend(cl_comm *c, const void *buf, size_t bytes, int peer, int tag, cl_request **req) {
    return post(c, 1, buf, NULL, bytes, peer, tag, req);
}

static cl_status th_irecv(cl_comm *c, void *buf, size_t bytes, int peer, int tag, cl_request **req) {
    return post(c, 0, NULL, buf, bytes, peer, tag, req);
}

static void unpost(th_group *g, th_msg *m) {
    th_box *b = &g->box[(size_t)m->src * (size_t)g->size + (size_t)m->dst];
    if (m->is_send) box_remove(&b->sh, &b->st, m);
    else box_remove(&b->rh, &b->rt, m);
}

/* Forgets a waited message and frees it. */
static void release(th_msg *m) {
    th_comm *t = m->base.comm->impl;
    if (m->oprev) m->oprev->onext = m->onext;
    else t->outstanding = m->onext;
    if (m->onext) m->onext->oprev = m->oprev;
    free(m);
}

static cl_status finish(th_msg *m) {
    cl_status st = m->base.st;
    if (st != CL_OK) cl_error(st, "%s", m->base.msg);
    release(m);
    return st;
}

static cl_status th_wait(cl_comm *c, cl_request *req) {
    th_msg *m = (th_msg *)req;
    th_group *g = m->g;
    th_deadline d = deadline_in(c->timeout_s);
    pthread_mutex_lock(&g->mu);
    while (m->state != MSG_DONE) {
        if (m->state == MSG_POSTED && world_failed(g->w)) {
            unpost(g, m);
            pthread_mutex_unlock(&g->mu);
            release(m);
            return failed_error(g->w);
        }
        if (m->state == MSG_POSTED && passed(&d)) {
            unpost(g, m);
            pthread_mutex_unlock(&g->mu);
            char what[96];
            snprintf(what, sizeof what, "%s", m->base.what);
            release(m);
            return timed_out(c, what, "");
        }
        wait_until(g, &d);
    }
    pthread_mutex_unlock(&g->mu);
    return finish(m);
}

static cl_status th_test(cl_comm *c, cl_request *req, int *done) {
    (void)c;
    th_msg *m = (th_msg *)req;
    th_group *g = m->g;
    pthread_mutex_lock(&g->mu);
    if (m->state == MSG_POSTED && world_failed(g->w)) {
        unpost(g, m);
        pthread_mutex_unlock(&g->mu);
        release(m);
        *done = 1;
        return failed_error(g->w);
    }
    *done = m->state == MSG_DONE;
    pthread_mutex_unlock(&g->mu);
    return *done ? finish(m) : CL_OK;
}

static const cl_comm_ops th_ops = {
    .name = "threads",
    .isend = th_isend,
    .irecv = th_irecv,
    .wait = th_wait,
    .test = th_test,
    .allreduce = th_allreduce,
    .reduce_scatter = th_reduce_scatter,
    .allgather = th_allgather,
    .reduce_scatter_v = th_reduce_scatter_v,
    .allgather_v = th_allgather_v,
    .alltoallv = th_alltoallv,
    .broadcast = th_broadcast,
    .barrier = th_barrier,
    .split = th_split,
    .fail = th_fail,
    .destroy = th_destroy,
};
