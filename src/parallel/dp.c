/* Data-parallel gradient buckets (see cleave/dp.h). */
#include "cleave/dp.h"
#include "cleave/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cl_dp {
    cl_comm *comm;
    cl_model *m;
    int n;               /* buckets, the last units' first */
    cl_bucket *bk;       /* cl_model_buckets' cut (expert parallelism: each bucket cut again, cl_dp_set_experts) */
    cl_comm *ecomm;      /* expert parallelism: the expert-data group (NULL: the experts' holders are alone) */
    char *expert;        /* [n] with expert parallelism: the bucket is expert weights' gradients, summed over ecomm */
    cl_request **req;    /* stages 0-1: each bucket's all-reduce */
    double *t0;          /* launch times */
    int next;            /* launched so far in this backward */
    int embed_tie;       /* the part holds the embedding and a separate head wte gradient: tie before the embedding's bucket */
    int tied;            /* done this step */
    int armed;           /* this backward launches buckets */
    int last;            /* this backward completes the step's gradients */
    /* ZeRO 2: working buffers, each free (-1) or holding the bucket whose reduce-scatter is in flight from it */
    int z2, nbuf, turn, cur;
    int buf_of[2];
    float *buf[2];       /* the part's working buffers (cl_model_bucket_begin) */
    cl_request *breq[2];
    int64_t bat[2], bn[2]; /* bf16 reduction: where this replica's piece of each buffer's bucket lies, its count */
    /* ZeRO 2 with expert parallelism (cl_dp_set_experts): the shards are the expert-data group's (ecomm); a
     * bucket leaves as runs of one kind, each its own reduce-scatter (segs, sreq: a working buffer's runs) */
    cl_comm *epc;        /* the expert-parallel group: a replicated run's pieces gathered over it */
    cl_bucket *segs[2];
    char *sex[2];
    cl_request **sreq[2];
    int nseg[2];
    int lo;              /* --grad-reduce-dtype bf16: buckets narrowed into the model's staging (cl_model_grads_stage) */
    size_t *counts;      /* [dp size] the pieces of a bucket in each replica's shard; the norm's blocks of each */
    double *bsum;        /* [nblocks] the norm: the sum of squares of each CL_SUMSQ_BLOCK block of the part's parameters */
    int64_t nblocks;
};

cl_status cl_dp_create(cl_dp **out, cl_comm *comm, cl_model *m, size_t bucket_bytes) {
    *out = NULL;
    cl_dp *dp = calloc(1, sizeof *dp);
    if (!dp) return cl_error(CL_ERR_OOM, "cannot allocate the gradient buckets");
    const cl_model_desc *d = cl_model_desc_of(m);
    const cl_part_sizes *z = cl_model_sizes(m);
    int u0, u1;
    cl_model_units(m, &u0, &u1);
    int cap = u1 - u0 + 1;
    dp->comm = comm && cl_comm_size(comm) > 1 ? comm : NULL;
    dp->m = m;
    dp->z2 = cl_zero_shards_grads(cl_model_zero(m)->stage);
    dp->lo = cl_model_zero(m)->reduce == CL_BF16;
    if (dp->comm && dp->lo && !cl_model_grads_stage(m)) {
        cl_dp_destroy(dp);
        return cl_error(CL_ERR_INTERNAL, "--grad-reduce-dtype bf16: the part has no staging buffer");
    }
    dp->nbuf = z->nbuf;
    dp->cur = -1;
    dp->buf_of[0] = dp->buf_of[1] = -1;
    dp->bk = calloc((size_t)cap, sizeof *dp->bk);
    dp->req = calloc((size_t)cap, sizeof *dp->req);
    dp->t0 = calloc((size_t)cap, sizeof *dp->t0);
    dp->counts = calloc((size_t)(dp->comm ? cl_comm_size(dp->comm) : 1), sizeof *dp->counts);
    if (!dp->bk || !dp->req || !dp->t0 || !dp->counts) {
        cl_dp_destroy(dp);
        return cl_error(CL_ERR_OOM, "cannot allocate the gradient buckets");
    }
    dp->n = cl_model_buckets(d, u0, u1, z->lo, bucket_bytes ? bucket_bytes : z->bucket_bytes, dp->z2, cl_model_zero(m)->split, dp->bk);
    for (int i = 0; dp->z2 && i < d->nparams; i++)
        if (cl_model_owns_param(m, i)) dp->nblocks += (d->params[i].numel + CL_SUMSQ_BLOCK - 1) / CL_SUMSQ_BLOCK;
    if (dp->nblocks && !(dp->bsum = calloc((size_t)dp->nblocks, sizeof *dp->bsum))) {
        cl_dp_destroy(dp);
        return cl_error(CL_ERR_OOM, "cannot allocate the gradient norm's blocks");
    }
    dp->embed_tie = cl_model_head_wte_grad(m) && cl_model_owns_param(m, d->tied_wte); /* the part of the tied weight's unit */
    *out = dp;
    return CL_OK;
}

void cl_dp_destroy(cl_dp *dp) {
    if (!dp) return;
    free(dp->bk);
    free(dp->expert);
    for (int b = 0; b < 2; b++) free(dp->segs[b]), free(dp->sex[b]), free(dp->sreq[b]);
    free(dp->req);
    free(dp->t0);
    free(dp->counts);
    free(dp->bsum);
    free(dp);
}

void cl_dp_begin(cl_dp *dp) {
    if (dp) dp->next = dp->tied = 0, dp->armed = dp->last = 1;
}

/* Before the bucket holding the wte gradient leaves: the head's part added in. */
static void tie(cl_dp *dp) {
    if (!dp->embed_tie || dp->tied) return;
    cl_model_tie_grads(dp->m);
    dp->tied = 1;
}

/* --grad-reduce-dtype bf16: the staging's BF16 image of ZeRO 2's working
 * buffer b, and the F32 <-> BF16 conversions around a collective. */
static uint16_t *stage_of(const cl_dp *dp, int b) {
    return (uint16_t *)(cl_model_grads_stage(dp->m) + (int64_t)b * ((cl_model_sizes(dp->m)->bucket + 1) / 2));
}
static cl_status narrow(const cl_dp *dp, uint16_t *dst, const float *src, int64_t n) {
    return cl_device_convert(cl_model_device(dp->m), dst, CL_BF16, src, CL_F32, (size_t)n);
}
static cl_status widen(const cl_dp *dp, float *dst, const uint16_t *src, int64_t n) {
    return cl_device_convert(cl_model_device(dp->m), dst, CL_F32, src, CL_BF16, (size_t)n);
}

/* ZeRO 0-1: bucket k's floats (a range of the gradient buffer or the head's
 * wte gradient), their count, and with a bf16 reduction their BF16 staging. */
static float *bucket_floats(const cl_dp *dp, int k, size_t *n, uint16_t **lo) {
    const cl_model *m = dp->m;
    const cl_bucket *bk = &dp->bk[k];
    const cl_part_sizes *z = cl_model_sizes(m);
    float *st = cl_model_grads_stage(m);
    *n = bk->hi < 0 ? (size_t)z->head_wte : (size_t)(bk->hi - bk->lo);
    *lo = !dp->lo ? NULL : bk->hi < 0 ? (uint16_t *)(st + (z->grads + 1) / 2) : (uint16_t *)st + bk->lo;
    return bk->hi < 0 ? cl_model_head_wte_grad(m) : cl_model_grads(m) + bk->lo;
}

/* ZeRO 2: the reduce-scatter in flight from working buffer b done, this
 * replica's piece of its bucket added into the shard's gradients. */
static cl_status complete_runs(cl_dp *dp, int b);
static cl_status complete(cl_dp *dp, int b) {
    if (dp->buf_of[b] < 0) return CL_OK;
    if (dp->epc) return complete_runs(dp, b);
    const cl_bucket *k = &dp->bk[dp->buf_of[b]];
    cl_status s = cl_comm_wait(dp->comm, dp->breq[b]);
    dp->breq[b] = NULL;
    dp->buf_of[b] = -1;
    CL_TRY(s);
    if (dp->lo) CL_TRY(widen(dp, dp->buf[b] + dp->bat[b], stage_of(dp, b) + dp->bat[b], dp->bn[b]));
    cl_model_bucket_end(dp->m, b, k->lo, k->hi);
    return CL_OK;
}

/* ZeRO 2: a working buffer for bucket k, zeroed, its parameters' gradients pointed into it. */
static cl_status prepare(cl_dp *dp, int k) {
    if (k >= dp->n || dp->bk[k].hi <= dp->bk[k].lo) return CL_OK;
    const cl_bucket *bk = &dp->bk[k];
    int b = dp->turn;
    CL_TRY(complete(dp, b));
    if (dp->nbuf > 1) dp->turn ^= 1;
    dp->buf[b] = cl_model_bucket_begin(dp->m, b, bk->lo, bk->hi);
    dp->cur = b;
    return CL_OK;
}

/* The runs of one kind (expert weights' gradients, or the rest) of floats [lo, hi) of the part's buffer, cut where
 * the parameters (in buffer order) turn from one to the other, written to bk and ex from n on; the new count. */
static int cut_kinds(const cl_dp *dp, int unit, int64_t lo, int64_t hi, cl_bucket *bk, char *ex, int n) {
    const cl_model_desc *d = cl_model_desc_of(dp->m);
    int64_t at = lo;
    int kind = 0;
    for (int i = 0; hi > lo && i < d->nparams; i++) {
        int64_t off = cl_model_param_offset(dp->m, i);
        if (!cl_model_owns_param(dp->m, i) || !d->params[i].numel || off < lo || off >= hi) continue;
        int e = d->params[i].expert != 0;
        if (e != kind && off > at) bk[n] = (cl_bucket){unit, at, off}, ex[n++] = (char)kind, at = off;
        kind = e;
    }
    bk[n] = (cl_bucket){unit, at, hi}, ex[n++] = (char)kind;
    return n;
}

/* ZeRO 2 with expert parallelism: the floats [*lo, *lo + *len) of the part's buffer that data-parallel rank q
 * reduces of a replicated run: rank q = g ep + j (g its expert-data rank, j its ep rank) takes the j-th of ep
 * pieces of shard g, so the pieces follow each other in rank order and the ep group's pieces make shard g. */
static void piece_of(const cl_dp *dp, int q, int64_t *lo, int64_t *len) {
    int64_t ep = cl_comm_size(dp->epc), g = q / ep, j = q % ep, S = cl_model_sizes(dp->m)->shard;
    *lo = g * S + j * S / ep;
    *len = g * S + (j + 1) * S / ep - *lo;
}

/* ZeRO 2 with expert parallelism: bucket k (in working buffer dp->cur) leaves as its runs of one kind, each
 * reduce-scattered in place over its group: an expert run over the expert-data group, into its shards (the
 * experts' sum over their holders); a replicated run over the replicas, each taking its piece (piece_of: the
 * sum over all of them, in rank order as an all-reduce makes it), gathered over the ep group in complete_runs. */
static cl_status launch_runs(cl_dp *dp, int k) {
    const cl_bucket *bk = &dp->bk[k];
    int b = dp->cur;
    float *buf = dp->buf[b];
    uint16_t *lo = dp->lo ? stage_of(dp, b) : NULL;
    int64_t S = cl_model_sizes(dp->m)->shard, start;
    dp->buf_of[b] = k;
    dp->cur = -1;
    dp->nseg[b] = cut_kinds(dp, bk->unit, bk->lo, bk->hi, dp->segs[b], dp->sex[b], 0);
    if (lo) CL_TRY(narrow(dp, lo, buf, bk->hi - bk->lo)); /* the shard's piece widened in complete_runs() */
    for (int s = 0; s < dp->nseg[b]; s++) {
        const cl_bucket *r = &dp->segs[b][s];
        cl_comm *c = dp->sex[b][s] ? dp->ecomm : dp->comm;
        int nr = cl_comm_size(c), me = cl_comm_rank(c);
        int64_t at = 0, off = r->lo - bk->lo;
        for (int q = 0; q < nr; q++) {
            int64_t plo = (int64_t)q * S, plen = S;
            if (!dp->sex[b][s]) piece_of(dp, q, &plo, &plen);
            dp->counts[q] = (size_t)cl_zero_overlap(r->lo, r->hi, plo, plen, &start);
            if (q < me) at += (int64_t)dp->counts[q];
        }
        if (lo) CL_TRY(cl_comm_ireduce_scatter_v(c, lo + off, lo + off + at, dp->counts, CL_BF16, CL_RED_SUM, &dp->sreq[b][s]));
        else CL_TRY(cl_comm_ireduce_scatter_v(c, buf + off, buf + off + at, dp->counts, CL_F32, CL_RED_SUM, &dp->sreq[b][s]));
    }
    return CL_OK;
}

/* ZeRO 2 with expert parallelism: working buffer b's runs reduced (every request waited, whatever fails), each
 * replicated run's pieces gathered over the ep group into this rank's shard's part of it, that part widened
 * under a bf16 reduction, and added into the shard's gradients. */
static cl_status complete_runs(cl_dp *dp, int b) {
    const cl_bucket *bk = &dp->bk[dp->buf_of[b]];
    cl_status st = CL_OK;
    for (int s = 0; s < dp->nseg[b]; s++) {
        cl_status w = cl_comm_wait(dp->sex[b][s] ? dp->ecomm : dp->comm, dp->sreq[b][s]);
        dp->sreq[b][s] = NULL;
        if (!st) st = w;
    }
    dp->buf_of[b] = -1;
    CL_TRY(st);
    float *buf = dp->buf[b];
    uint16_t *lo = dp->lo ? stage_of(dp, b) : NULL;
    size_t esz = lo ? sizeof *lo : sizeof *buf;
    int64_t S = cl_model_sizes(dp->m)->shard, g = cl_comm_rank(dp->ecomm), start;
    int ep = cl_comm_size(dp->epc), j = cl_comm_rank(dp->epc);
    for (int s = 0; s < dp->nseg[b]; s++) {
        const cl_bucket *r = &dp->segs[b][s];
        int64_t off = r->lo - bk->lo, at = cl_zero_overlap(r->lo, r->hi, 0, g * S, &start); /* shard g's part */
        if (!dp->sex[b][s]) {
            int64_t mine = at, plo, plen;
            for (int q = 0; q < ep; q++) {
                piece_of(dp, (int)g * ep + q, &plo, &plen);
                dp->counts[q] = (size_t)cl_zero_overlap(r->lo, r->hi, plo, plen, &start) * esz;
                if (q < j) mine += (int64_t)(dp->counts[q] / esz);
            }
            char *base = lo ? (char *)(lo + off) : (char *)(buf + off);
            CL_TRY(cl_comm_allgather_v(dp->epc, base + (size_t)mine * esz, base + (size_t)at * esz, dp->counts));
        }
        if (lo) CL_TRY(widen(dp, buf + off + at, lo + off + at, cl_zero_overlap(r->lo, r->hi, g * S, S, &start)));
    }
    cl_model_bucket_end(dp->m, b, bk->lo, bk->hi);
    return CL_OK;
}

/* ZeRO 0-1: the group bucket k is summed over: the replicas, or an expert bucket's expert-data group (NULL: none). */
static cl_comm *comm_of(const cl_dp *dp, int k) { return dp->expert && dp->expert[k] ? dp->ecomm : dp->comm; }

static cl_status launch(cl_dp *dp, int k) {
    cl_model *m = dp->m;
    const cl_bucket *bk = &dp->bk[k];
    dp->t0[k] = cl_now();
    if (!dp->z2) {
        size_t n;
        uint16_t *lo;
        float *buf = bucket_floats(dp, k, &n, &lo);
        cl_comm *c = comm_of(dp, k);
        if (!c) return CL_OK; /* experts no other replica holds: their gradients are this rank's alone */
        if (!lo) return cl_comm_iallreduce(c, buf, n, CL_F32, CL_RED_SUM, &dp->req[k]);
        CL_TRY(narrow(dp, lo, buf, (int64_t)n)); /* widened in cl_dp_finish */
        return cl_comm_iallreduce(c, lo, n, CL_BF16, CL_RED_SUM, &dp->req[k]);
    }
    if (bk->hi <= bk->lo) return CL_OK; /* all of it kept whole */
    if (dp->epc) return launch_runs(dp, k);
    /* in place: each replica's piece (its shard's part of the bucket) at its own place in the buffer */
    int nr = cl_comm_size(dp->comm), me = cl_comm_rank(dp->comm);
    int64_t at = 0, start;
    float *buf = dp->buf[dp->cur];
    int64_t S = cl_model_sizes(m)->shard;
    for (int r = 0; r < nr; r++) {
        dp->counts[r] = (size_t)cl_zero_overlap(bk->lo, bk->hi, (int64_t)r * S, S, &start);
        if (r < me) at += (int64_t)dp->counts[r];
    }
    dp->buf_of[dp->cur] = k;
    int b = dp->cur;
    dp->cur = -1;
    if (!dp->lo) return cl_comm_ireduce_scatter_v(dp->comm, buf, buf + at, dp->counts, CL_F32, CL_RED_SUM, &dp->breq[b]);
    uint16_t *lo = stage_of(dp, b);
    dp->bat[b] = at, dp->bn[b] = (int64_t)dp->counts[me];
    CL_TRY(narrow(dp, lo, buf, bk->hi - bk->lo)); /* this replica's piece widened in complete() */
    return cl_comm_ireduce_scatter_v(dp->comm, lo, lo + at, dp->counts, CL_BF16, CL_RED_SUM, &dp->breq[b]);
}

cl_status cl_dp_begin_backward(cl_dp *dp, int last, int *armed) {
    *armed = 0;
    if (!dp || !dp->comm) return CL_OK;
    dp->armed = last || dp->z2;
    if (!dp->armed) return CL_OK;
    *armed = 1;
    dp->next = 0;
    dp->last = last;
    if (last) dp->tied = 0;
    return dp->z2 ? prepare(dp, 0) : CL_OK;
}

cl_status cl_dp_unit_done(void *ctx, int u) {
    cl_dp *dp = ctx;
    if (!dp || !dp->comm || !dp->armed) return CL_OK;
    const cl_model_desc *d = cl_model_desc_of(dp->m);
    /* the wte gradient is complete once the embedding is: add the head's part before it is sent */
    if (dp->last && dp->embed_tie && u == d->params[d->tied_wte].unit) tie(dp);
    int launched = 0;
    while (dp->next < dp->n && dp->bk[dp->next].unit == u) {
        CL_TRY(launch(dp, dp->next++));
        launched = 1;
    }
    if (dp->z2 && launched) CL_TRY(prepare(dp, dp->next));
    return CL_OK;
}

cl_status cl_dp_launch_rest(cl_dp *dp) {
    if (!dp || !dp->comm) return CL_OK;
    if (dp->z2) { /* every backward launched its buckets as it went */
        if (dp->next < dp->n) return cl_error(CL_ERR_INTERNAL, "ZeRO 2: bucket %d of %d not launched", dp->next, dp->n);
        return CL_OK;
    }
    tie(dp);
    while (dp->next < dp->n) CL_TRY(launch(dp, dp->next++));
    return CL_OK;
}

cl_status cl_dp_finish(cl_dp *dp) {
    if (!dp || !dp->comm) return CL_OK;
    cl_status s = cl_dp_launch_rest(dp);
    char first[1024] = ""; /* the first failure's message: later waits would overwrite it */
    if (s) snprintf(first, sizeof first, "%s", cl_last_error());
    for (int k = 0; k < dp->n; k++) {
        if (!dp->req[k]) continue;
        cl_status w = cl_comm_wait(comm_of(dp, k), dp->req[k]);
        dp->req[k] = NULL;
        if (!w && dp->lo) { /* the sum back into the F32 bucket */
            size_t n;
            uint16_t *lo;
            float *buf = bucket_floats(dp, k, &n, &lo);
            w = widen(dp, buf, lo, (int64_t)n);
        }
        if (!s && w) {
            s = w;
            snprintf(first, sizeof first, "%s", cl_last_error());
        }
    }
    for (int b = 0; b < 2; b++) {
        cl_status w = complete(dp, b);
        if (!s && w) {
            s = w;
            snprintf(first, sizeof first, "%s", cl_last_error());
        }
    }
    if (s) return cl_error(s, "%s", first);
    if (!dp->z2) return CL_OK;
    /* the whole-kept gradients, accumulated over the micro-batches, summed over the replicas as stage 0 does */
    cl_model *m = dp->m;
    const cl_part_sizes *z = cl_model_sizes(m);
    float *hw = cl_model_head_wte_grad(m);
    if (z->whole) CL_TRY(cl_comm_allreduce(dp->comm, cl_model_grads_whole(m), (size_t)z->whole, CL_F32, CL_RED_SUM));
    if (hw && !dp->embed_tie) CL_TRY(cl_comm_allreduce(dp->comm, hw, (size_t)z->head_wte, CL_F32, CL_RED_SUM));
    return CL_OK;
}

void cl_dp_whole_to_shard(cl_dp *dp) {
    if (!dp || !dp->comm || !dp->z2) return;
    cl_model_whole_to_shard(dp->m);
}

/* ZeRO 2: the group whose ranks hold the shards (with expert parallelism the expert-data group's). */
static cl_comm *shard_comm(const cl_dp *dp) { return dp->epc ? dp->ecomm : dp->comm; }

/* Block b (cl_sumsq's cut: CL_SUMSQ_BLOCK floats from the parameter's
 * start) of a parameter at [start, start + len) of the part's buffer, whose
 * first float is in this replica's shard: from the shard, or assembled in
 * the halo buffer with the next replicas' heads where it runs past it. */
static const float *block_floats(const cl_dp *dp, const float *heads, int64_t start, int64_t len) {
    const cl_model *m = dp->m;
    cl_device *dev = cl_model_device(m);
    float *grads = cl_model_grads(m);
    int64_t lo = cl_model_sizes(m)->shard_lo, S = cl_model_sizes(m)->shard, H = S < CL_SUMSQ_BLOCK ? S : CL_SUMSQ_BLOCK;
    if (start + len <= lo + S) return grads + (start - lo);
    float *tmp = cl_model_grads_halo(m) + (int64_t)cl_comm_size(shard_comm(dp)) * H;
    int64_t at = lo + S - start;
    cl_device_copy(dev, tmp, grads + (start - lo), (size_t)at * sizeof(float));
    for (int q = cl_comm_rank(shard_comm(dp)) + 1; at < len; q++) {
        int64_t take = len - at < H ? len - at : H;
        cl_device_copy(dev, tmp + at, heads + (int64_t)q * H, (size_t)take * sizeof(float));
        at += take;
    }
    return tmp;
}

cl_status cl_dp_grad_sumsq(cl_dp *dp, double *per_param) {
    cl_model *m = dp->m;
    const cl_model_desc *d = cl_model_desc_of(m);
    const cl_kernels *kern = cl_device_kernels(cl_model_device(m));
    float *halo = cl_model_grads_halo(m);
    cl_comm *zc = shard_comm(dp);
    int nr = cl_comm_size(zc), me = cl_comm_rank(zc);
    int64_t S = cl_model_sizes(m)->shard, H = S < CL_SUMSQ_BLOCK ? S : CL_SUMSQ_BLOCK;
    /* every replica's first H floats: a block that starts in this shard ends in them */
    CL_TRY(cl_comm_allgather_n(zc, cl_model_grads(m), halo, (size_t)H, CL_F32));
    memset(dp->counts, 0, (size_t)nr * sizeof *dp->counts);
    int64_t k = 0;
    for (int i = 0; i < d->nparams; i++) {
        if (!cl_model_owns_param(m, i)) continue;
        for (int64_t b = 0; b < d->params[i].numel; b += CL_SUMSQ_BLOCK, k++) {
            int64_t start = cl_model_param_offset(m, i) + b, len = d->params[i].numel - b < CL_SUMSQ_BLOCK ? d->params[i].numel - b : CL_SUMSQ_BLOCK;
            int owner = (int)(start / S);
            dp->counts[owner] += sizeof(double);
            if (owner != me) continue;
            dp->bsum[k] = kern->sumsq_block(block_floats(dp, halo, start, len), len);
        }
    }
    /* blocks in parameter order start further on: their owners do not decrease, so this replica's are one run */
    size_t at = 0;
    for (int r = 0; r < me; r++) at += dp->counts[r];
    CL_TRY(cl_comm_allgather_v(zc, (char *)dp->bsum + at, dp->bsum, dp->counts));
    k = 0;
    for (int i = 0; i < d->nparams; i++) {
        if (!cl_model_owns_param(m, i)) continue;
        double total = 0.0; /* cl_sumsq's order: the blocks' sums added to 0.0 one after another */
        for (int64_t b = 0; b < d->params[i].numel; b += CL_SUMSQ_BLOCK) total += dp->bsum[k++];
        per_param[i] = total;
    }
    return CL_OK;
}

cl_status cl_dp_set_experts(cl_dp *dp, cl_comm *edp, cl_comm *ep) {
    if (!dp || !dp->comm) return CL_OK;
    const cl_model_desc *d = cl_model_desc_of(dp->m);
    int cap = dp->n + d->nparams; /* a cut at a parameter at most */
    if (dp->z2) { /* the buckets stay whole (one working buffer each); they leave as runs (launch_runs) */
        if (!edp || cl_comm_size(edp) != cl_model_zero(dp->m)->n || !ep || cl_comm_size(ep) < 2)
            return cl_error(CL_ERR_INTERNAL, "ZeRO 2 with expert parallelism: the shards must be the expert-data group's");
        for (int b = 0; b < 2; b++) {
            dp->segs[b] = calloc((size_t)d->nparams + 1, sizeof *dp->segs[b]);
            dp->sex[b] = calloc((size_t)d->nparams + 1, 1);
            dp->sreq[b] = calloc((size_t)d->nparams + 1, sizeof *dp->sreq[b]);
            if (!dp->segs[b] || !dp->sex[b] || !dp->sreq[b]) return cl_error(CL_ERR_OOM, "cannot allocate the gradient buckets");
        }
        dp->ecomm = edp, dp->epc = ep;
        return CL_OK;
    }
    cl_bucket *bk = calloc((size_t)cap, sizeof *bk);
    char *ex = calloc((size_t)cap, 1);
    cl_request **req = calloc((size_t)cap, sizeof *req);
    double *t0 = calloc((size_t)cap, sizeof *t0);
    if (!bk || !ex || !req || !t0) {
        free(bk), free(ex), free(req), free(t0);
        return cl_error(CL_ERR_OOM, "cannot allocate the gradient buckets");
    }
    int n = 0;
    for (int k = 0; k < dp->n; k++) n = cut_kinds(dp, dp->bk[k].unit, dp->bk[k].lo, dp->bk[k].hi, bk, ex, n);
    free(dp->bk), free(dp->expert), free(dp->req), free(dp->t0);
    dp->bk = bk, dp->expert = ex, dp->req = req, dp->t0 = t0, dp->n = n;
    dp->ecomm = edp && cl_comm_size(edp) > 1 ? edp : NULL;
    return CL_OK;
}

int cl_dp_sharded(const cl_dp *dp) { return dp && dp->comm && dp->z2; }

int cl_dp_nbuckets(const cl_dp *dp) { return dp && dp->comm ? dp->n : 0; }
double cl_dp_launch_time(const cl_dp *dp, int k) { return dp->t0[k]; }
