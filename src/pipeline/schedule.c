/* Pipeline schedules as data (see cleave/schedule.h): generators for GPipe,
 * 1F1B, interleaved 1F1B and ZB-H1. Each generator first fixes the order of
 * compute actions per rank; add_comm then puts every receive right before
 * the action that consumes it and every send right after the action that
 * produces it, so a compute order that respects the data dependencies gives
 * a deadlock-free schedule under buffered sends. The simulator is in sim.c. */
#include "cleave/schedule.h"

#include <stdlib.h>
#include <string.h>

#define SCHED_MAX_P 4096
#define SCHED_MAX_V 64
#define SCHED_MAX_WORK (1L << 22)

static const char *const kind_names[] = {"gpipe", "1f1b", "interleaved", "zb-h1"};

cl_status cl_sched_kind_parse(const char *name, cl_sched_kind *out) {
    for (int k = 0; k < 4; k++)
        if (name && !strcmp(name, kind_names[k])) {
            *out = (cl_sched_kind)k;
            return CL_OK;
        }
    return cl_error(CL_ERR_INVALID, "unknown schedule '%s': expected gpipe, 1f1b, interleaved or zb-h1", name ? name : "(null)");
}

const char *cl_sched_kind_name(cl_sched_kind kind) { return (unsigned)kind < CL_SCHED_NKINDS ? kind_names[kind] : "?"; }

const char *cl_act_kind_name(cl_act_kind kind) {
    static const char *const n[] = {"FWD",      "BWD_INPUT", "BWD_WEIGHT", "BWD",       "SEND_ACT",
                                    "RECV_ACT", "SEND_GRAD", "RECV_GRAD",  "GRAD_SYNC", "OPT_STEP",
                                    "RING_SEND", "RING_RECV"};
    return (unsigned)kind < sizeof n / sizeof n[0] ? n[kind] : "?";
}

int cl_schedule_stage(const cl_schedule *s, int rank, int chunk) { return chunk * s->p + rank; }

cl_sched_costs cl_sched_costs_uniform(double tf, double tb, double tw) {
    cl_sched_costs c = {tf, tb, tw, NULL, NULL, NULL};
    return c;
}

void cl_schedule_free(cl_schedule *s) {
    if (!s) return;
    if (s->acts)
        for (int r = 0; r < s->p; r++) free(s->acts[r]);
    free(s->acts);
    free(s->len);
    free(s->cap);
    memset(s, 0, sizeof *s);
}

static cl_status push(cl_schedule *s, int r, cl_act_kind k, int mb, int chunk) {
    if (s->len[r] == s->cap[r]) {
        int nc = s->cap[r] ? 2 * s->cap[r] : 16;
        cl_action *n = realloc(s->acts[r], (size_t)nc * sizeof *n);
        if (!n) return cl_error(CL_ERR_OOM, "cannot allocate a schedule of %d actions on rank %d", nc, r);
        s->acts[r] = n;
        s->cap[r] = nc;
    }
    s->acts[r][s->len[r]++] = (cl_action){k, mb, chunk};
    return CL_OK;
}

cl_status cl_schedule_remove(cl_schedule *s, int rank, int i) {
    if (rank < 0 || rank >= s->p) return cl_error(CL_ERR_INVALID, "rank %d is not in 0..%d", rank, s->p - 1);
    if (i < 0 || i >= s->len[rank]) return cl_error(CL_ERR_INVALID, "rank %d has no action %d (it has %d)", rank, i, s->len[rank]);
    memmove(&s->acts[rank][i], &s->acts[rank][i + 1], (size_t)(s->len[rank] - i - 1) * sizeof(cl_action));
    s->len[rank]--;
    return CL_OK;
}

cl_status cl_schedule_insert(cl_schedule *s, int rank, int i, cl_action a) {
    if (rank < 0 || rank >= s->p) return cl_error(CL_ERR_INVALID, "rank %d is not in 0..%d", rank, s->p - 1);
    if (i < 0 || i > s->len[rank]) return cl_error(CL_ERR_INVALID, "rank %d: cannot insert at %d (it has %d actions)", rank, i, s->len[rank]);
    CL_TRY(push(s, rank, a.kind, a.mb, a.chunk));
    memmove(&s->acts[rank][i + 1], &s->acts[rank][i], (size_t)(s->len[rank] - 1 - i) * sizeof(cl_action));
    s->acts[rank][i] = a;
    return CL_OK;
}

int cl_schedule_find(const cl_schedule *s, int rank, cl_act_kind kind, int mb, int chunk) {
    if (rank < 0 || rank >= s->p) return -1;
    for (int i = 0; i < s->len[rank]; i++) {
        const cl_action *a = &s->acts[rank][i];
        if (a->kind == kind && a->mb == mb && a->chunk == chunk) return i;
    }
    return -1;
}

int cl_schedule_chunk_live(const cl_schedule *sc, int r, int c) {
    int *held = calloc((size_t)sc->m, sizeof *held);
    if (!held) return -1;
    int live = 0, peak = 0;
    for (int i = 0; i < sc->len[r]; i++) {
        const cl_action *a = &sc->acts[r][i];
        if (a->chunk != c) continue;
        if ((a->kind == CL_ACT_RECV_ACT || a->kind == CL_ACT_FWD) && !held[a->mb]) {
            held[a->mb] = 1;
            if (++live > peak) peak = live;
        }
        if ((a->kind == CL_ACT_BWD || (a->kind == CL_ACT_BWD_WEIGHT)) && held[a->mb] == 1) {
            held[a->mb] = 2;
            live--;
        }
    }
    free(held);
    return peak;
}

int cl_schedule_chunk_douts(const cl_schedule *sc, int r, int c) {
    char *held = calloc((size_t)sc->m, 1);
    if (!held) return -1;
    int n = 0, peak = 0;
    for (int i = 0; i < sc->len[r]; i++) {
        const cl_action *a = &sc->acts[r][i];
        if (a->chunk != c) continue;
        if (a->kind == CL_ACT_RECV_GRAD && !held[a->mb]) {
            held[a->mb] = 1;
            if (++n > peak) peak = n;
        } else if ((a->kind == CL_ACT_BWD || a->kind == CL_ACT_BWD_INPUT) && held[a->mb] == 1) {
            held[a->mb] = 2;
            n--;
        }
    }
    free(held);
    return peak;
}

/* Where each rank's first SEND_ACT, SEND_GRAD and RECV_GRAD of (chunk, micro-batch) stands (cl_schedule_find's
 * answers, -1 for none), looked up in one pass over the schedule instead of a search per action: at
 * [(k p + q) v m + c m + mb], k 0, 1, 2 for the three kinds. NULL when out of memory. */
static int *send_recv_index(const cl_schedule *sc) {
    int p = sc->p, vm = sc->v * sc->m;
    int *at = malloc((size_t)3 * p * vm * sizeof *at);
    if (!at) return NULL;
    for (size_t i = 0; i < (size_t)3 * p * vm; i++) at[i] = -1;
    for (int q = 0; q < p; q++)
        for (int i = 0; i < sc->len[q]; i++) {
            const cl_action *a = &sc->acts[q][i];
            int k = a->kind == CL_ACT_SEND_ACT ? 0 : a->kind == CL_ACT_SEND_GRAD ? 1 : a->kind == CL_ACT_RECV_GRAD ? 2 : -1;
            if (k < 0 || a->chunk < 0 || a->chunk >= sc->v || a->mb < 0 || a->mb >= sc->m) continue;
            int *slot = &at[(size_t)(k * p + q) * vm + (size_t)a->chunk * sc->m + a->mb];
            if (*slot < 0) *slot = i;
        }
    return at;
}

/* send_recv_index's answer for rank q's first action of kind k (0, 1, 2) on (chunk, mb); -1 out of range. */
static int index_find(const cl_schedule *sc, const int *at, int k, int q, int mb, int chunk) {
    if (q < 0 || q >= sc->p || chunk < 0 || chunk >= sc->v || mb < 0 || mb >= sc->m) return -1;
    return at[(size_t)(k * sc->p + q) * sc->v * sc->m + (size_t)chunk * sc->m + mb];
}

cl_status cl_schedule_grad_buffers(const cl_schedule *sc, int r, int *free_at, int *peak) {
    int p = sc->p, m = sc->m, v = sc->v, n = sc->len[r];
    for (int k = 0; k < v * m; k++) free_at[k] = n;
    for (int c = 0; c < v; c++) peak[c] = 0;
    if (p < 2) return CL_OK;
    int *at = send_recv_index(sc);
    if (!at) return cl_error(CL_ERR_OOM, "cannot index the schedule's sends and receives");
    /* gradients in flight: (mb, chunk), destination rank and the index of its RECV_GRAD there */
    int *fl_mb = malloc((size_t)(v * m) * sizeof *fl_mb), *fl_c = malloc((size_t)(v * m) * sizeof *fl_c);
    int *fl_dst = malloc((size_t)(v * m) * sizeof *fl_dst), *fl_ri = malloc((size_t)(v * m) * sizeof *fl_ri);
    int *seen = malloc((size_t)p * sizeof *seen), *held = calloc((size_t)v, sizeof *held);
    cl_status s = fl_mb && fl_c && fl_dst && fl_ri && seen && held ? CL_OK : cl_error(CL_ERR_OOM, "cannot size the send buffers");
    int nfl = 0;
    for (int q = 0; q < p; q++) seen[q] = -1;
    for (int i = 0; !s && i < n; i++) {
        const cl_action *a = &sc->acts[r][i];
        int st = a->chunk * p + r;
        if (a->kind == CL_ACT_RECV_ACT || a->kind == CL_ACT_RECV_GRAD) {
            /* the peer's send, and so everything before it there, is done */
            int peer_st = a->kind == CL_ACT_RECV_ACT ? st - 1 : st + 1, q = peer_st % p;
            int j = index_find(sc, at, a->kind == CL_ACT_RECV_ACT ? 0 : 1, q, a->mb, peer_st / p);
            if (j < 0) s = cl_error(CL_ERR_INVALID, "rank %d: %s of micro-batch %d has no matching send on rank %d", r,
                                    cl_act_kind_name(a->kind), a->mb, q);
            else if (j > seen[q]) seen[q] = j;
            for (int k = 0; !s && k < nfl;)
                if (seen[fl_dst[k]] > fl_ri[k]) {
                    free_at[fl_c[k] * m + fl_mb[k]] = i + 1;
                    held[fl_c[k]]--;
                    nfl--;
                    fl_mb[k] = fl_mb[nfl], fl_c[k] = fl_c[nfl], fl_dst[k] = fl_dst[nfl], fl_ri[k] = fl_ri[nfl];
                } else {
                    k++;
                }
        } else if ((a->kind == CL_ACT_BWD || a->kind == CL_ACT_BWD_INPUT) && st > 0) {
            if (++held[a->chunk] > peak[a->chunk]) peak[a->chunk] = held[a->chunk];
        } else if (a->kind == CL_ACT_SEND_GRAD) {
            int q = (st - 1) % p, ri = index_find(sc, at, 2, q, a->mb, (st - 1) / p);
            if (ri < 0) s = cl_error(CL_ERR_INVALID, "rank %d: SEND_GRAD of micro-batch %d has no matching receive on rank %d", r, a->mb, q);
            else {
                fl_mb[nfl] = a->mb, fl_c[nfl] = a->chunk, fl_dst[nfl] = q, fl_ri[nfl] = ri;
                nfl++;
            }
        }
    }
    free(fl_mb);
    free(fl_c);
    free(fl_dst);
    free(fl_ri);
    free(seen);
    free(held);
    free(at);
    return s;
}

/* Compute order -> full schedule: receives before, sends after. */
static cl_status add_compute(cl_schedule *s, int r, cl_act_kind k, int mb, int c) {
    int p = s->p, st = c * p + r, S = p * s->v;
    int comm = p > 1;
    if (k == CL_ACT_FWD) {
        if (comm && st > 0) CL_TRY(push(s, r, CL_ACT_RECV_ACT, mb, c));
        CL_TRY(push(s, r, k, mb, c));
        if (comm && st < S - 1) CL_TRY(push(s, r, CL_ACT_SEND_ACT, mb, c));
    } else if (k == CL_ACT_BWD || k == CL_ACT_BWD_INPUT) {
        if (comm && st < S - 1) CL_TRY(push(s, r, CL_ACT_RECV_GRAD, mb, c));
        CL_TRY(push(s, r, k, mb, c));
        if (comm && st > 0) CL_TRY(push(s, r, CL_ACT_SEND_GRAD, mb, c));
    } else {
        CL_TRY(push(s, r, k, mb, c));
    }
    return CL_OK;
}

static cl_status gen_gpipe(cl_schedule *s) {
    for (int r = 0; r < s->p; r++) {
        for (int i = 0; i < s->m; i++) CL_TRY(add_compute(s, r, CL_ACT_FWD, i, 0));
        for (int i = 0; i < s->m; i++) CL_TRY(add_compute(s, r, CL_ACT_BWD, i, 0));
    }
    return CL_OK;
}

static cl_status gen_1f1b(cl_schedule *s) {
    int p = s->p, m = s->m;
    for (int r = 0; r < p; r++) {
        int warm = p - r - 1 < m ? p - r - 1 : m;
        for (int i = 0; i < warm; i++) CL_TRY(add_compute(s, r, CL_ACT_FWD, i, 0));
        for (int i = 0; i < m - warm; i++) {
            CL_TRY(add_compute(s, r, CL_ACT_FWD, warm + i, 0));
            CL_TRY(add_compute(s, r, CL_ACT_BWD, i, 0));
        }
        for (int i = m - warm; i < m; i++) CL_TRY(add_compute(s, r, CL_ACT_BWD, i, 0));
    }
    return CL_OK;
}

/* Megatron-LM's forward_backward_pipelining_with_interleaving: virtual
 * micro-batch k runs chunk (k / p) % v of micro-batch (k / (p v)) p + k % p;
 * backwards visit the chunks in reverse; warm-up (p - r - 1) * 2 + (v - 1) * p. */
static cl_status gen_interleaved(cl_schedule *s) {
    int p = s->p, m = s->m, v = s->v;
    long total = (long)m * v;
    for (int r = 0; r < p; r++) {
        long warm = (long)(p - r - 1) * 2 + (long)(v - 1) * p;
        if (warm > total) warm = total;
#define VMB(k) (int)(((k) / ((long)p * v)) * p + (k) % p)
#define FCH(k) (int)(((k) % ((long)p * v)) / p)
#define BCH(k) (v - 1 - FCH(k))
        for (long k = 0; k < warm; k++) CL_TRY(add_compute(s, r, CL_ACT_FWD, VMB(k), FCH(k)));
        for (long k = 0; k < total - warm; k++) {
            long kf = k + warm;
            CL_TRY(add_compute(s, r, CL_ACT_FWD, VMB(kf), FCH(kf)));
            CL_TRY(add_compute(s, r, CL_ACT_BWD, VMB(k), BCH(k)));
        }
        for (long k = total - warm; k < total; k++) CL_TRY(add_compute(s, r, CL_ACT_BWD, VMB(k), BCH(k)));
#undef VMB
#undef FCH
#undef BCH
    }
    return CL_OK;
}

/* ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): 1F1B's order
 * of F and B passes (warm-up of p - r - 1 forwards on rank r, then one F and
 * one B in turn, then the cool-down B passes), with W split off and deferred:
 * on rank r, W of micro-batch i comes right after B of micro-batch i + r (or,
 * near the end, after the last B). Rank r then holds at most p - r + r = p
 * micro-batches live, 1F1B's peak on rank 0, and the r deferred W passes on
 * rank r fill the cool-down, where 1F1B waits for gradients. */
static cl_status gen_zbh1(cl_schedule *s) {
    int p = s->p, m = s->m;
    for (int r = 0; r < p; r++) {
        int warm = p - r - 1 < m ? p - r - 1 : m, nw = 0;
        for (int i = 0; i < warm; i++) CL_TRY(add_compute(s, r, CL_ACT_FWD, i, 0));
        for (int i = 0; i < m; i++) {
            if (i + warm < m) CL_TRY(add_compute(s, r, CL_ACT_FWD, i + warm, 0));
            CL_TRY(add_compute(s, r, CL_ACT_BWD_INPUT, i, 0));
            if (i - r >= 0) CL_TRY(add_compute(s, r, CL_ACT_BWD_WEIGHT, nw++, 0));
        }
        while (nw < m) CL_TRY(add_compute(s, r, CL_ACT_BWD_WEIGHT, nw++, 0));
    }
    return CL_OK;
}

cl_status cl_schedule_make(cl_sched_kind kind, int p, int m, int v, cl_schedule *out) {
    memset(out, 0, sizeof *out);
    if ((unsigned)kind >= CL_SCHED_NKINDS) return cl_error(CL_ERR_INVALID, "unknown schedule kind %d", (int)kind);
    const char *kn = kind_names[kind];
    if (p < 1) return cl_error(CL_ERR_INVALID, "%s: the pipeline needs at least one rank (got --pp %d)", kn, p);
    if (m < 1) return cl_error(CL_ERR_INVALID, "%s: at least one micro-batch is needed (got %d)", kn, m);
    if (v < 1) return cl_error(CL_ERR_INVALID, "%s: virtual stages per rank must be at least 1 (got %d)", kn, v);
    if (p > SCHED_MAX_P) return cl_error(CL_ERR_INVALID, "%s: at most %d pipeline ranks (got %d)", kn, SCHED_MAX_P, p);
    if (v > SCHED_MAX_V) return cl_error(CL_ERR_INVALID, "%s: at most %d virtual stages per rank (got %d)", kn, SCHED_MAX_V, v);
    if ((long)p * m > SCHED_MAX_WORK || (long)p * m * v > SCHED_MAX_WORK)
        return cl_error(CL_ERR_INVALID, "%s: %d ranks x %d micro-batches x %d chunks is past the limit of %ld", kn, p, m, v, SCHED_MAX_WORK);
    if (kind == CL_SCHED_INTERLEAVED) {
        if (v < 2)
            return cl_error(CL_ERR_INVALID, "interleaved needs at least 2 virtual stages per rank (got %d); use 1f1b for one", v);
        if (m % p)
            return cl_error(CL_ERR_INVALID, "interleaved needs the micro-batches (%d) to be a multiple of the pipeline ranks (%d)", m, p);
    } else if (v != 1) {
        return cl_error(CL_ERR_INVALID, "%s takes one stage per rank (got %d virtual stages); only interleaved takes more", kn, v);
    }
    out->kind = kind;
    out->p = p;
    out->m = m;
    out->v = v;
    out->len = calloc((size_t)p, sizeof *out->len);
    out->cap = calloc((size_t)p, sizeof *out->cap);
    out->acts = calloc((size_t)p, sizeof *out->acts);
    cl_status st;
    if (!out->len || !out->cap || !out->acts) st = cl_error(CL_ERR_OOM, "cannot allocate a schedule for %d ranks", p);
    else if (kind == CL_SCHED_GPIPE) st = gen_gpipe(out);
    else if (kind == CL_SCHED_1F1B) st = gen_1f1b(out);
    else if (kind == CL_SCHED_INTERLEAVED) st = gen_interleaved(out);
    else st = gen_zbh1(out);
    for (int r = 0; r < p && st == CL_OK; r++) {
        st = push(out, r, CL_ACT_GRAD_SYNC, 0, 0);
        if (st == CL_OK) st = push(out, r, CL_ACT_OPT_STEP, 0, 0);
    }
    if (st) cl_schedule_free(out);
    return st;
}

double cl_schedule_closed_form_bubble(cl_sched_kind kind, int p, int m, int v, double tf, double tb, double tw) {
    if (p < 1 || m < 1 || v < 1) return -1;
    switch (kind) {
    case CL_SCHED_GPIPE:
    case CL_SCHED_1F1B: return v == 1 ? (double)(p - 1) / (m + p - 1) : -1;
    case CL_SCHED_INTERLEAVED:
        if (v < 2 || m % p) return -1;
        return ((double)(p - 1) / v) / (m + (double)(p - 1) / v);
    case CL_SCHED_ZB_H1: {
        if (v != 1 || m < p || tw > tf || tw > tb) return -1;
        double idle = (p - 1) * (tf + tb - tw), busy = m * (tf + tb + tw);
        return idle + busy > 0 ? idle / (idle + busy) : 0;
    }
    }
    return -1;
}
