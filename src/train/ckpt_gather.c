/* A pipeline's parameters and AdamW moments whole for a single-file
 * checkpoint, and back: gather sends every parameter from the rank and
 * chunk that owns it (tensor-parallel slices assembled on their rank 0,
 * ZeRO's moment shards and disk-offloaded moments made whole first) to the
 * first stage of replica 0 (an expert another expert-parallel rank holds
 * reaches its stage's rank of replica 0 first: ep_send); load cuts each rank's slices out of the whole
 * arrays. ZeRO 3's parameters are whole around both (zero3_whole.c). */
#include "cleave/comm.h"
#include "cleave/train.h"

#include <stdlib.h>
#include <string.h>

#include "train/pp.h"

#define CKPT_TAG CL_TAG_FIRST(CL_TAG_CKPT)

/* The chunk of this rank that owns parameter i, or NULL; *rank its owner. */
static pp_chunk *owner_of(struct cl_pp *pp, const cl_model_desc *d, int i, int *rank) {
    int u = d->params[i].unit;
    for (int st = 0; st < pp->S; st++)
        if (u >= pp->part.u0[st] && u < pp->part.u1[st]) {
            *rank = rank_of_stage(pp, st);
            return *rank == pp->r ? &pp->ch[st / pp->p] : NULL;
        }
    *rank = -1;
    return NULL;
}

/* Copies between a tensor-parallel rank's slice (spec ls, of rank q) in
 * dev's memory (NULL: host memory) and the whole tensor in host memory: into
 * the whole (to_whole) or out of it. */
void cl_ckpt_slice_copy(cl_device *dev, const cl_param_spec *ls, int q, float *slice, float *whole, int to_whole) {
    int64_t n = cl_param_row_len(ls), rows = n ? ls->full_numel / n : 0;
    for (int64_t k = 0; k < rows; k++) {
        cl_param_run runs[3];
        int nr = cl_param_row_runs(ls, q, k, runs);
        for (int j = 0; j < nr; j++) {
            float *w = whole + k * n + runs[j].col, *sl = slice + runs[j].local;
            size_t bytes = (size_t)runs[j].len * sizeof(float);
            if (!dev) memcpy(to_whole ? w : sl, to_whole ? sl : w, bytes);
            else if (to_whole) cl_device_copy_to_host(dev, w, sl, bytes);
            else cl_device_copy_from_host(dev, sl, w, bytes);
        }
    }
}

static void unslice(cl_device *dev, const cl_param_spec *ls, int q, const float *slice, float *whole) {
    cl_ckpt_slice_copy(dev, ls, q, (float *)slice, whole, 1);
}

/* Parameter i's value and both moments, whole, on tensor-parallel rank 0 of
 * its owner: the other ranks send their slices (replicated ones are rank
 * 0's already). src[k] is in sdev[k]'s memory (NULL: the host's); dst[k],
 * host memory, has room for the whole tensor. */
static cl_status tp_assemble(cl_trainer *t, const cl_param_spec *ls, const float *const src[3], cl_device *const sdev[3],
                             float *const dst[3]) {
    size_t bytes = (size_t)ls->numel * sizeof(float);
    cl_comm *tp = t->tp > 1 ? t->cfg.groups->tp : NULL;
    if (t->tp_rank > 0) {
        for (int k = 0; k < 3 && ls->split != CL_SPLIT_NONE; k++) CL_TRY(cl_comm_send(tp, src[k], bytes, 0, CKPT_TAG));
        return CL_OK;
    }
    for (int k = 0; k < 3; k++) unslice(sdev[k], ls, 0, src[k], dst[k]);
    if (ls->split == CL_SPLIT_NONE || !tp) return CL_OK;
    float *buf = malloc(bytes ? bytes : 1);
    if (!buf) return cl_error(CL_ERR_OOM, "cannot allocate a slice of %s", ls->name);
    cl_status s = CL_OK;
    for (int q = 1; !s && q < t->tp; q++)
        for (int k = 0; !s && k < 3; k++) {
            s = cl_comm_recv(tp, buf, bytes, q, CKPT_TAG);
            if (!s) unslice(NULL, ls, q, buf, dst[k]);
        }
    free(buf);
    return s;
}

/* Parameter i's value and moments in chunk ch, and the device each is on (NULL: the host): the moments from
 * whole (host memory, [m | v]) when they were gathered or read there. */
static void sources(const pp_chunk *ch, int i, const float *whole, const float *src[3], cl_device *sdev[3]) {
    int64_t loc = cl_model_param_offset(ch->m, i);
    src[0] = cl_model_param(ch->m, i), src[1] = ch->opt.m + loc, src[2] = ch->opt.v + loc;
    sdev[0] = cl_model_device(ch->m), sdev[1] = sdev[2] = ch->opt.dev;
    if (whole) {
        src[1] = whole + loc;
        src[2] = whole + cl_model_sizes(ch->m)->alloc + loc;
        sdev[1] = sdev[2] = NULL;
    }
}

/* Expert parallelism: a rank of its stage's expert-parallel group (the data-parallel ranks of one tensor-parallel
 * index) whose group rank 0 is on the writer's replica sends that rank the value and moments of each expert
 * weight its chunks hold (its tensor-parallel slice), in parameter order (pp_gather receives them in the same
 * order and assembles the slices as the rank's own). */
static cl_status ep_send(cl_trainer *t, float *const *mom) {
    struct cl_pp *pp = t->pp;
    const cl_model_desc *d = t->desc;
    for (int i = 0; i < d->nparams; i++) {
        int owner;
        pp_chunk *ch = owner_of(pp, d, i, &owner);
        if (!ch || !d->params[i].expert || !d->params[i].numel) continue;
        const float *src[3];
        cl_device *sdev[3];
        sources(ch, i, mom[ch - pp->ch], src, sdev);
        for (int k = 0; k < 3; k++) CL_TRY(cl_comm_send(t->cfg.groups->ep, src[k], (size_t)d->params[i].numel * sizeof(float), 0, CKPT_TAG));
    }
    return CL_OK;
}

/* The floats of the tensor-parallel slice of p that its expert-parallel owner holds (p's own numel is 0 on the
 * other ranks: cl_model_desc_ep_shard). */
static int64_t ep_slice_numel(const cl_param_spec *p) {
    int64_t n = cl_param_row_len(p);
    if (p->split == CL_SPLIT_ROWS) return p->part * n;
    if (p->split == CL_SPLIT_COLS) return n ? p->full_numel / n * p->part : 0;
    return p->full_numel;
}

static cl_status pp_gather(cl_trainer *t, float **host, int *writer, int *opt_t) {
    struct cl_pp *pp = t->pp;
    const cl_model_desc *d = t->desc, *f = t->full;
    *host = NULL;
    *writer = 0;
    *opt_t = pp->ch[0].opt.t;
    /* The moments whole in host memory where they are not in memory whole: in shards over the replicas
     * (ZeRO: every replica sends its shard) or in a file (offload to disk): [m | v], alloc floats each */
    float *mom[CL_PP_MAX_CHUNKS] = {0};
    cl_status s = CL_OK;
    int sharded = cl_zero_shards_optim(t->cfg.zero) && cl_zero_ranks(&t->cfg, t->gdp) > 1;
    for (int c = 0; c < pp->v && !s && (sharded || t->cfg.offload_optimizer == CL_OFFLOAD_DISK); c++) {
        const cl_model *m = pp->ch[c].m;
        const cl_optimizer *o = &pp->ch[c].opt;
        size_t n = (size_t)cl_model_sizes(m)->alloc, sh = (size_t)cl_model_sizes(m)->moments;
        mom[c] = malloc(2 * n * sizeof(float));
        float *own = o->fd >= 0 ? malloc(2 * sh * sizeof(float)) : NULL;
        if (!mom[c] || (o->fd >= 0 && !own)) s = cl_error(CL_ERR_OOM, "cannot allocate the optimizer state's gather buffer");
        const float *om = o->m, *ov = o->v;
        if (!s && own) {
            s = cl_optimizer_get_moments(o, own, own + sh);
            om = own, ov = own + sh;
        }
        if (!s && sharded) s = cl_comm_allgather_n(cl_zero_comm(&t->cfg), om, mom[c], sh, CL_F32);
        if (!s && sharded) s = cl_comm_allgather_n(cl_zero_comm(&t->cfg), ov, mom[c] + n, sh, CL_F32);
        if (!s && !sharded) {
            memcpy(mom[c], om, n * sizeof(float));
            memcpy(mom[c] + n, ov, n * sizeof(float));
        }
        free(own);
    }
    /* expert parallelism: the writer's expert-parallel group sends it the experts it does not hold */
    if (!s && t->gdp_rank > 0 && t->gdp_rank < t->cfg.ep) s = ep_send(t, mom);
    if (s || t->gdp_rank != 0) { /* replicas (and context ranks) hold the same values */
        for (int c = 0; c < pp->v; c++) free(mom[c]);
        return s;
    }
    int lead = pp->r == 0 && t->tp_rank == 0;
    float *h = NULL, *tmp = NULL, *theirs = NULL;
    if (lead) {
        h = malloc((size_t)f->nfloats * 3 * sizeof *h);
        if (!h) s = cl_error(CL_ERR_OOM, "cannot allocate the checkpoint's gather buffer");
    }
    for (int i = 0; i < d->nparams && !s; i++) {
        int owner;
        pp_chunk *ch = owner_of(pp, d, i, &owner);
        size_t n = (size_t)f->params[i].numel, bytes = n * sizeof(float);
        if (ch) {
            cl_param_spec ls = d->params[i];
            const float *src[3];
            cl_device *sdev[3];
            if (!ls.numel && ls.expert) { /* another expert-parallel rank's expert: its slice from it (ep_send) */
                ls.numel = ep_slice_numel(&ls);
                size_t sb = (size_t)ls.numel * sizeof(float);
                free(theirs);
                theirs = malloc(3 * (sb ? sb : 1));
                if (!theirs) {
                    s = cl_error(CL_ERR_OOM, "cannot allocate %s for the checkpoint", f->params[i].name);
                    break;
                }
                for (int k = 0; k < 3; k++) src[k] = theirs + k * ls.numel, sdev[k] = NULL;
                for (int k = 0; k < 3 && !s; k++) s = cl_comm_recv(t->cfg.groups->ep, theirs + k * ls.numel, sb, ls.ep_owner, CKPT_TAG);
                if (s) break;
            } else {
                sources(ch, i, mom[ch - pp->ch], src, sdev);
            }
            float *dst[3];
            if (!lead && t->tp_rank == 0) {
                free(tmp);
                tmp = malloc(3 * (bytes ? bytes : 1));
                if (!tmp) {
                    s = cl_error(CL_ERR_OOM, "cannot allocate %s for the checkpoint", f->params[i].name);
                    break;
                }
            }
            for (int k = 0; k < 3; k++) dst[k] = lead ? cl_param_f32(h + k * f->nfloats, &f->params[i]) : tmp ? tmp + k * n : NULL;
            s = tp_assemble(t, &ls, src, sdev, dst);
            for (int k = 0; k < 3 && !s && !lead && t->tp_rank == 0; k++) s = cl_comm_send(pp->comm, dst[k], bytes, 0, CKPT_TAG);
        } else if (lead) {
            for (int k = 0; k < 3 && !s; k++)
                s = cl_comm_recv(pp->comm, cl_param_f32(h + k * f->nfloats, &f->params[i]), bytes, owner, CKPT_TAG);
        }
    }
    free(tmp);
    free(theirs);
    for (int c = 0; c < pp->v; c++) free(mom[c]);
    if (s) {
        free(h);
        return s;
    }
    *host = h;
    *writer = lead;
    return CL_OK;
}

int cl_pp_chunks(cl_trainer *t, cl_model **m, cl_optimizer **o) {
    for (int c = 0; c < t->pp->v; c++) {
        m[c] = t->pp->ch[c].m;
        o[c] = &t->pp->ch[c].opt;
    }
    return t->pp->v;
}

static cl_status pp_load(cl_trainer *t, const float *p, const float *m, const float *v, int opt_t) {
    struct cl_pp *pp = t->pp;
    const cl_model_desc *d = t->desc, *f = t->full;
    for (int c = 0; c < pp->v; c++) {
        pp_chunk *ch = &pp->ch[c];
        /* sharded (ZeRO) or in a file (disk): the part's moments whole first, then what this replica keeps */
        const cl_part_sizes *z = cl_model_sizes(ch->m);
        int whole_first = cl_zero_shards_optim(cl_model_zero(ch->m)->stage) || ch->opt.fd >= 0;
        float *zbuf = whole_first ? calloc(2 * (size_t)z->alloc, sizeof(float)) : NULL;
        if (whole_first && !zbuf) return cl_error(CL_ERR_OOM, "cannot allocate the optimizer state's load buffer");
        for (int i = 0; i < d->nparams; i++) {
            if (!cl_model_holds_param(ch->m, i)) continue; /* the head's wte copy too: it equals the embedding's */
            const cl_param_spec *ls = &d->params[i];
            int64_t off = cl_param_elem(&f->params[i]);
            const float *src[3] = {p + off, m + off, v + off};
            int64_t loc = cl_model_param_offset(ch->m, i);
            float *dst[3] = {cl_model_param(ch->m, i), ch->opt.m + loc, ch->opt.v + loc};
            cl_device *ddev[3] = {cl_model_device(ch->m), ch->opt.dev, ch->opt.dev};
            for (int k = 0; k < 3; k++) {
                if (k && whole_first) {
                    float *whole = zbuf ? zbuf + (k - 1) * z->alloc : NULL;
                    if (whole) cl_ckpt_slice_copy(NULL, ls, t->tp_rank, whole + loc, (float *)src[k], 0);
                    continue;
                }
                cl_ckpt_slice_copy(ddev[k], ls, t->tp_rank, dst[k], (float *)src[k], 0); /* padded rows stay zero */
            }
        }
        if (zbuf) {
            cl_status s = cl_optimizer_set_moments(&ch->opt, zbuf + z->shard_lo, zbuf + z->alloc + z->shard_lo);
            free(zbuf);
            CL_TRY(s);
        }
        ch->opt.t = opt_t;
    }
    return CL_OK;
}

cl_status cl_pp_gather(cl_trainer *t, float **host, int *writer, int *opt_t) {
    cl_status s = cl_device_sync(t->dev); /* the step's updates done before the host reads them */
    if (!s) s = cl_pp_z3_whole(t->pp, 1);
    if (!s) s = pp_gather(t, host, writer, opt_t);
    cl_pp_z3_end_whole(t->pp, 0);
    return s;
}

cl_status cl_pp_load(cl_trainer *t, const float *p, const float *m, const float *v, int opt_t) {
    cl_status s = cl_pp_z3_whole(t->pp, 0);
    if (!s) s = pp_load(t, p, m, v, opt_t);
    cl_pp_z3_end_whole(t->pp, !s);
    return s;
}
