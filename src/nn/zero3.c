/* ZeRO stage 3: a part's parameters sharded over the data-parallel
 * replicas, each unit's gathered into a working buffer just before it runs
 * (see cleave/model.h and docs/ARCHITECTURE.md, "ZeRO"); and the two range
 * queries ZeRO's shards are cut by (cl_zero_overlap, cl_model_unit_range),
 * here and not in units.c so that units.c calls this file and not back. */
#include "cleave/model.h"
#include "nn/kind.h"
#include "nn/model_impl.h"

#include <stdlib.h>
#include <string.h>

/* One all-gather of a unit's, landing at byte dst of its working buffer:
 * lo 0, floats [a, a + len) of the part's buffer as F32; lo 1, the same
 * range's BF16 copy from the shard's (2 bytes a value); lo 2, F32 runs
 * z->run[a, a + len) packed one after another (see unit_pieces). */
typedef struct {
    int64_t a, len, dst;
    int lo;
} z3_piece;

struct cl_z3 {
    cl_comm *comm;
    int nr;
    int K;              /* working buffers: prefetch + 1 */
    int P;              /* the most pieces a unit has */
    int *order;         /* the pass's units with parameters, in the order they run */
    int n, issued, pos; /* units in the pass, gathers issued, units reached */
    int64_t *ulo;       /* per unit (u - u0): its range's first float in the part's buffer */
    int64_t *ulen;      /* its own parameters' floats (without the tied wte) */
    int *uwte;          /* 1: its gather also takes the tied wte (the LM head) */
    int *up;            /* [units + 1]: unit u's pieces are piece[up[u], up[u + 1]) */
    z3_piece *piece;
    z3_piece *run;      /* the F32 runs lo 2 pieces pack ({a, len}, floats of the part's buffer) */
    int64_t *pat;       /* per parameter of the part: its byte in the working buffer */
    cl_request **req;   /* [K][P]: each buffer's gathers in flight */
    size_t *counts;     /* [K][P][nr] bytes of each replica's piece (live while its gather is) */
    float *whole;       /* cl_model_z3_whole's buffer */
    double wait;        /* seconds waited for gathers (cl_model_z3_take_wait) */
};

int64_t cl_zero_overlap(int64_t a, int64_t b, int64_t lo, int64_t len, int64_t *start) {
    int64_t s = a > lo ? a : lo, e = b < lo + len ? b : lo + len;
    *start = s;
    return e > s ? e - s : 0;
}

/* 16-aligned like every parameter's place in the flat buffers (units.c). */
static int64_t align16(int64_t n) { return (n + 15) & ~(int64_t)15; }

int64_t cl_model_unit_range(const cl_model_desc *d, int u, int64_t *lo, int *wte) {
    int64_t a = -1, b = 0;
    const cl_unit *un = &d->units[u]; /* its parameters are the range [first_param, + nparams) (desc_build.c) */
    for (int i = un->first_param; i < un->first_param + un->nparams; i++) {
        if (a < 0) a = cl_param_elem(&d->params[i]);
        b = cl_param_elem(&d->params[i]) + align16(d->params[i].numel);
    }
    *lo = a < 0 ? 0 : a;
    *wte = d->tied_wte >= 0 && cl_kind_of(d->units[u].kind)->uses_tied; /* the LM head reads the tied wte */
    return (a < 0 ? 0 : b - a) + (*wte ? align16(d->params[d->tied_wte].numel) : 0);
}

double cl_model_z3_take_wait(cl_model *m) {
    if (!m->z3) return 0;
    double w = m->z3->wait;
    m->z3->wait = 0;
    return w;
}

float *cl_model_param_at(const cl_model *m, int64_t a) {
    return cl_zero_shards_params(m->zero.stage) ? m->params + (a - m->sizes.shard_lo) : m->params + a;
}

/* bf16: the copy m->wlow mirrors the buffer (the shard under ZeRO 3). ZeRO 1
 * and 2 update the shard only and all-gather the F32 master: the other
 * shards' copy would be stale, so there the copy is refreshed whole. */
int cl_model_low_by_optimizer(const cl_model *m) {
    return m->wlow && !(cl_zero_shards_optim(m->zero.stage) && !cl_zero_shards_params(m->zero.stage));
}

uint16_t *cl_model_low_at(const cl_model *m, int64_t a) {
    return cl_model_low_by_optimizer(m) ? m->wlow + (cl_model_param_at(m, a) - m->params) : NULL;
}

void cl_model_z3_destroy(cl_model *m) {
    struct cl_z3 *z = m->z3;
    if (!z) return;
    for (int k = 0; z->req && k < z->P * z->K; k++)
        if (z->req[k]) (void)cl_comm_wait(z->comm, z->req[k]);
    free(z->order);
    free(z->ulo);
    free(z->ulen);
    free(z->uwte);
    free(z->up);
    free(z->piece);
    free(z->run);
    free(z->pat);
    free(z->req);
    free(z->counts);
    free(z->whole);
    free(z);
    m->z3 = NULL;
}

/* 1 if parameter i (the j-th of its unit, of kind k) is read only as its BF16 copy. */
static int reads_low(const cl_kind *k, unsigned wlo, int j) {
    return (j < 31 && (wlo & CL_KIND_WLO(j)) != 0) || (k->wlo_from > 0 && j >= k->wlo_from);
}

/* Unit u's pieces into out (returns past the last), its parameters' bytes
 * in the working buffer into z->pat, its F32 runs (if packed) from
 * z->run + *nrun on. F32: the unit's range whole, then the LM head's tied
 * wte. bf16, a kind that reads some parameters only as their BF16 copies
 * (cl_kind's wlo and wlo_from): the range's BF16 copy whole (the copies of
 * the F32 ones, a few norms and biases, ride along unread), then the runs
 * of the parameters read as F32 packed after it, a run's piece from every
 * replica in turn: the shards are consecutive and so are the runs, so the
 * replicas' pieces end to end are the runs end to end; two gathers (three
 * with the tied wte) where one a run and one a BF16 weight took a block's
 * nine. A unit with no BF16 parameter of its own (GPT's head: its norm,
 * and the tied wte apart), or whose packed runs would not fit in its
 * buffer beside the BF16 copy, gathers each BF16 parameter and each F32
 * run alone at its place (a BF16 one in the first half of its floats). */
static z3_piece *unit_pieces(const cl_model *m, int u, int64_t ulo, int64_t ulen, int wte, z3_piece *out, int *nrun) {
    const cl_model_desc *d = m->desc;
    struct cl_z3 *z = m->z3;
    const cl_kind *k = cl_kind_of(d->units[u].kind);
    unsigned wlo = cl_nn_bf16(d) ? k->wlo : 0;
    z3_piece *first = out;
    int64_t img = align16(cl_nn_bf16_floats(ulen)), f32 = 0; /* the BF16 copy's floats, the F32 runs' */
    int r0 = *nrun, j = 0, nlo = 0;
    for (int i = 0; wlo && i < d->nparams; i++) {
        if (d->params[i].unit != u) continue;
        if (reads_low(k, wlo, j++)) {
            nlo++;
            continue;
        }
        int64_t a = m->loc[i], len = align16(d->params[i].numel);
        z->pat[i] = (img + f32) * (int64_t)sizeof(float);
        f32 += len;
        if (*nrun > r0 && z->run[*nrun - 1].a + z->run[*nrun - 1].len == a) z->run[*nrun - 1].len += len; /* the run goes on */
        else z->run[(*nrun)++] = (z3_piece){a, len, 0, 0};
    }
    if (nlo && img + f32 <= ulen) { /* packed */
        *out++ = (z3_piece){ulo, ulen, 0, 1};
        if (*nrun > r0) *out++ = (z3_piece){r0, *nrun - r0, img * (int64_t)sizeof(float), 2};
        j = 0;
        for (int i = 0; i < d->nparams; i++)
            if (d->params[i].unit == u && reads_low(k, wlo, j++)) z->pat[i] = (m->loc[i] - ulo) * (int64_t)sizeof(uint16_t);
    } else {
        *nrun = r0;
        if (!wlo && ulen) *out++ = (z3_piece){ulo, ulen, 0, 0};
        j = 0;
        for (int i = 0; i < d->nparams; i++) {
            if (d->params[i].unit != u) continue;
            int lo = wlo && reads_low(k, wlo, j++);
            int64_t a = m->loc[i], len = align16(d->params[i].numel), at = (a - ulo) * (int64_t)sizeof(float);
            z->pat[i] = at;
            if (!wlo) continue;
            if (!lo && out > first && !out[-1].lo && out[-1].a + out[-1].len == a) out[-1].len += len; /* the run goes on */
            else *out++ = (z3_piece){a, lo ? d->params[i].numel : len, at, lo};
        }
    }
    if (wte)
        *out++ = (z3_piece){m->loc[d->tied_wte], d->params[d->tied_wte].numel, ulen * (int64_t)sizeof(float),
                            (wlo & CL_KIND_WLO_TIED) != 0};
    return out;
}

cl_status cl_model_set_zero3(cl_model *m, cl_comm *dp) {
    if (m->sizes.params == m->sizes.alloc) return CL_OK; /* not sharded */
    if (!dp || cl_comm_size(dp) != m->zero.n)
        return cl_error(CL_ERR_INVALID, "ZeRO 3: the data-parallel group must have the %d replicas the part was cut for", m->zero.n);
    struct cl_z3 *z = calloc(1, sizeof *z);
    int nu = m->u1 - m->u0;
    if (z) {
        z->comm = dp;
        z->nr = cl_comm_size(dp);
        z->K = m->sizes.npwork;
        z->order = calloc((size_t)nu + 1, sizeof *z->order);
        z->ulo = calloc((size_t)nu + 1, sizeof *z->ulo);
        z->ulen = calloc((size_t)nu + 1, sizeof *z->ulen);
        z->uwte = calloc((size_t)nu + 1, sizeof *z->uwte);
        z->up = calloc((size_t)nu + 1, sizeof *z->up);
        z->piece = calloc((size_t)m->desc->nparams + 2 * (size_t)nu + 1, sizeof *z->piece);
        z->run = calloc((size_t)m->desc->nparams + 1, sizeof *z->run);
        z->pat = calloc((size_t)m->desc->nparams + 1, sizeof *z->pat);
    }
    m->z3 = z;
    if (!z || !z->order || !z->ulo || !z->ulen || !z->uwte || !z->up || !z->piece || !z->run || !z->pat) {
        cl_model_z3_destroy(m);
        return cl_error(CL_ERR_OOM, "cannot allocate the ZeRO 3 gather tables");
    }
    const cl_model_desc *d = m->desc;
    int np = 0, nrun = 0;
    for (int u = m->u0; u < m->u1; u++) {
        int64_t lo;
        int wte;
        int64_t w = cl_model_unit_range(d, u, &lo, &wte);
        if (wte && m->loc[d->tied_wte] < 0) { /* not held (cl_model_holds_param) */
            cl_model_z3_destroy(m);
            return cl_error(CL_ERR_INTERNAL, "ZeRO 3: the LM head's part does not hold the tied wte");
        }
        int j = u - m->u0;
        z->ulo[j] = lo - m->sizes.lo;
        z->uwte[j] = wte;
        z->ulen[j] = w - (wte ? align16(d->params[d->tied_wte].numel) : 0);
        z->up[j] = np;
        np = unit_pieces(m, u, z->ulo[j], z->ulen[j], wte, z->piece + np, &nrun) - z->piece;
        if (np - z->up[j] > z->P) z->P = np - z->up[j];
    }
    z->up[nu] = np;
    z->req = calloc((size_t)z->P * (size_t)z->K + 1, sizeof *z->req);
    z->counts = calloc((size_t)z->P * (size_t)z->K * (size_t)z->nr + 1, sizeof *z->counts);
    if (!z->req || !z->counts) {
        cl_model_z3_destroy(m);
        return cl_error(CL_ERR_OOM, "cannot allocate the ZeRO 3 gather tables");
    }
    return CL_OK;
}

/* 1 if unit un reads its parameters in a pass of this kind: every unit's
 * forward; a backward's input gradients and a block's interior (which its
 * weight pass re-derives) need them; the embedding's backward, a linear's
 * or a convolution's weight gradient read only activations and gradients;
 * a weight pass skips the loss units (their gradients came in the input pass). */
static int reads_params(const cl_unit *un, cl_z3_pass_kind kind) {
    return (cl_kind_of(un->kind)->z3_reads & CL_KIND_READS(kind)) != 0; /* the kind says (kind.h) */
}

cl_status cl_model_z3_pass(cl_model *m, cl_z3_pass_kind kind) {
    struct cl_z3 *z = m->z3;
    if (!z) return CL_OK;
    if (z->issued != z->pos) return cl_error(CL_ERR_INTERNAL, "ZeRO 3: a pass started with gathers in flight");
    z->n = z->issued = z->pos = 0;
    for (int j = 0; j < m->u1 - m->u0; j++) {
        int u = kind == CL_Z3_FORWARD ? m->u0 + j : m->u1 - 1 - j;
        int64_t lo;
        int wte;
        if (cl_model_unit_range(m->desc, u, &lo, &wte) && reads_params(&m->desc->units[u], kind)) z->order[z->n++] = u;
    }
    return CL_OK;
}

/* One all-gather of a piece into the working buffer out: each replica
 * sends the part of it in its shard (of the F32 parameters, or of their
 * BF16 copy; a packed piece's parts of its runs, copied first to this
 * replica's place in the output, the gather's input in place). */
static cl_status gather(cl_model *m, const z3_piece *pc, char *out, size_t *counts, cl_request **req) {
    struct cl_z3 *z = m->z3;
    int64_t S = m->sizes.shard, at;
    const z3_piece *rn = pc->lo == 2 ? z->run + pc->a : pc;
    int nrun = pc->lo == 2 ? (int)pc->len : 1;
    size_t es = pc->lo == 1 ? sizeof(uint16_t) : sizeof(float), off = 0;
    for (int r = 0; r < z->nr; r++) {
        counts[r] = 0;
        for (int q = 0; q < nrun; q++) counts[r] += (size_t)cl_zero_overlap(rn[q].a, rn[q].a + rn[q].len, (int64_t)r * S, S, &at) * es;
        if (r < m->zero.rank) off += counts[r];
    }
    const void *in = out + pc->dst + off;
    for (int q = 0; q < nrun; q++) {
        int64_t n = cl_zero_overlap(rn[q].a, rn[q].a + rn[q].len, m->sizes.shard_lo, S, &at);
        if (!n) continue;
        if (pc->lo == 1) in = m->wlow + (at - m->sizes.shard_lo);
        else if (pc->lo == 0) in = m->params + (at - m->sizes.shard_lo);
        else { /* packed: this replica's part of each run, end to end */
            cl_device_copy(m->dev, out + pc->dst + off, m->params + (at - m->sizes.shard_lo), (size_t)n * sizeof(float));
            off += (size_t)n * sizeof(float);
        }
    }
    return cl_comm_iallgather_v(z->comm, in, out + pc->dst, counts, req);
}

/* Issue the gather of the pass's j-th unit into working buffer j mod K. */
static cl_status issue(cl_model *m, int j) {
    struct cl_z3 *z = m->z3;
    int u = z->order[j] - m->u0, b = j % z->K;
    for (int k = z->up[u]; k < z->up[u + 1]; k++) {
        int q = b * z->P + (k - z->up[u]);
        CL_TRY(gather(m, &z->piece[k], (char *)m->pwork[b], z->counts + (size_t)q * z->nr, &z->req[q]));
    }
    return CL_OK;
}

cl_status cl_model_z3_before(cl_model *m, int u) {
    struct cl_z3 *z = m->z3;
    if (!z) return CL_OK;
    if (z->pos >= z->n || z->order[z->pos] != u) return CL_OK; /* no parameters */
    while (z->issued < z->n && z->issued < z->pos + z->K) CL_TRY(issue(m, z->issued++));
    int b = z->pos % z->K;
    cl_status s = CL_OK;
    double t0 = cl_now();
    for (int k = b * z->P; k < (b + 1) * z->P; k++) {
        cl_status w = z->req[k] ? cl_comm_wait(z->comm, z->req[k]) : CL_OK;
        z->req[k] = NULL;
        if (!s) s = w;
    }
    z->wait += cl_now() - t0;
    z->pos++;
    CL_TRY(s);
    const cl_model_desc *d = m->desc;
    for (int i = 0; i < d->nparams; i++)
        if (d->params[i].unit == u) m->p[i] = (float *)((char *)m->pwork[b] + z->pat[i]);
    if (z->uwte[u - m->u0]) m->p[d->tied_wte] = m->pwork[b] + z->ulen[u - m->u0];
    return CL_OK;
}

cl_status cl_model_z3_whole(cl_model *m, int gather) {
    struct cl_z3 *z = m->z3;
    if (!z) return CL_OK;
    size_t n = (size_t)m->sizes.alloc;
    z->whole = calloc(n, sizeof(float));
    if (!z->whole) return cl_error(CL_ERR_OOM, "ZeRO 3: cannot allocate the parameters whole (%zu floats) in host memory", n);
    if (gather) {
        cl_status s = cl_comm_allgather_n(z->comm, m->params, z->whole, (size_t)m->sizes.shard, CL_F32);
        if (s) {
            free(z->whole);
            z->whole = NULL;
            return s;
        }
    }
    for (int i = 0; i < m->desc->nparams; i++)
        if (m->loc[i] >= 0) m->p[i] = z->whole + m->loc[i];
    return CL_OK;
}

void cl_model_z3_end_whole(cl_model *m, int keep) {
    struct cl_z3 *z = m->z3;
    if (!z || !z->whole) return;
    if (keep) cl_device_copy_from_host(m->dev, m->params, z->whole + m->sizes.shard_lo, (size_t)m->sizes.shard * sizeof(float));
    free(z->whole);
    z->whole = NULL;
    for (int i = 0; i < m->desc->nparams; i++) m->p[i] = NULL;
}
