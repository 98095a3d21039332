/* Sharded checkpoints (docs/ARCHITECTURE.md, "Sharded checkpoints").
 *
 * Every tensor is seen as a matrix: rows = the product of all dimensions
 * but the last, columns = the last (a bias is one row). What a rank holds
 * of a tensor (its tensor-parallel slice, or of a moment, and under ZeRO 3
 * of a parameter too, its ZeRO shard's part of that slice) is a flat range of its row-major local slice; such a
 * range is at most 3 boxes of the slice (partial first row, whole rows,
 * partial last row), and each of those is at most 3 boxes of the whole
 * tensor (the fused c_attn's query, key and value column groups go to
 * their own thirds), clipped to the logical rows (the vocabulary's padded
 * rows are never stored). Saving writes those boxes; loading computes the
 * boxes this rank needs at its own layout and reads, from every stored box
 * that overlaps one, the overlap's rows with pread straight into place. */
#include "cleave/data.h"
#include "cleave/json.h"
#include "train/ckpt_json.h"
#include "train/internal.h"
#include "train/shard_index.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARD_TAG CL_TAG_FIRST(CL_TAG_SHARD)
#define WRITE_BUF (1 << 20)      /* bytes: the save's staging buffer */
#define READ_RUN (64 << 20)      /* bytes: the longest single pread */
#define NBOX 9                   /* int64 per box a rank reports */

/* The part [a, b) of a held parameter's local slice inside the part's
 * floats [shard_lo, shard_lo + n): the moments this optimizer keeps (n its
 * floats: the ZeRO shard, or all), or under ZeRO 3 the parameters (n the
 * shard). Element L of it is at buffer[loc - shard_lo + L]. */
static void shard_range(const cl_model *m, int64_t n, int i, int64_t *a, int64_t *b) {
    cl_shard_zero_range(cl_model_param_offset(m, i), cl_model_desc_of(m)->params[i].numel, cl_model_sizes(m)->shard_lo, n, a, b);
}
#define moment_range(m, o, i, a, b) shard_range(m, (o)->nfloats, i, a, b)
/* Where parameter i's floats start in a shard's buffer (may be negative: it starts in an earlier shard). */
static int64_t shard_off(const cl_model *m, int i) { return cl_model_param_offset(m, i) - cl_model_sizes(m)->shard_lo; }

/* ZeRO 3: the part's buffer holds only this replica's shard of the
 * parameters (cl_model_param_at); cl_model_param is aimed into gather buffers. */
static int params_sharded(const cl_model *m) { return cl_zero_shards_params(cl_model_zero(m)->stage); }

/* Every rank ends with the same status: the first failed rank's, with its message. */
static cl_status agree(cl_comm *world, cl_status s) {
    if (!world) return s;
    int me = cl_comm_rank(world);
    double who = s ? -(double)me : -1e9;
    cl_status cs = cl_comm_allreduce(world, &who, 1, CL_F64, CL_RED_MAX);
    if (cs) return cs;
    if (who <= -1e9) return CL_OK;
    int root = (int)-who;
    struct {
        int64_t code;
        char msg[1024];
    } m;
    memset(&m, 0, sizeof m);
    if (root == me) {
        m.code = s;
        snprintf(m.msg, sizeof m.msg, "%s", cl_last_error());
    }
    cs = cl_comm_broadcast(world, &m, sizeof m, root);
    if (cs) return cs;
    return root == me ? s : cl_error((cl_status)m.code, "%s", m.msg);
}

static cl_comm *world_of(const cl_trainer *t) { return t->cfg.groups ? t->cfg.groups->world : NULL; }

/* Fault injection, for tests: CLEAVE_SAVE_FAULT="rank:N:POINT:MODE:K" makes
 * world rank N, in the K-th sharded save of the process, fail (MODE fail:
 * CL_ERR_IO) or be killed (MODE kill: SIGKILL, the whole process, as kill
 * -9 would) at POINT: mid-shard (its file's header written, no data),
 * after-shard (its file closed), before-index, after-index (rank 0: the
 * index written, nothing renamed), after-rename (rank 0). */
static _Thread_local int save_count; /* this rank's sharded saves (a rank is a thread or a process) */
static cl_status save_fault(int rank, const char *point) {
    const char *f = getenv("CLEAVE_SAVE_FAULT");
    int n, k;
    char pt[32], mode[8];
    if (!f || sscanf(f, "rank:%d:%31[a-z-]:%7[a-z]:%d", &n, pt, mode, &k) != 4) return CL_OK;
    if (n != rank || k != save_count || strcmp(pt, point)) return CL_OK;
    if (!strcmp(mode, "kill")) raise(SIGKILL);
    return cl_error(CL_ERR_IO, "injected fault (CLEAVE_SAVE_FAULT=%s)", f);
}

/* ---- save -------------------------------------------------------------------- */

typedef struct {
    int t, k;
    cl_box b;
    const float *src; /* the slice's element L is src[off + L] */
    int64_t off, lc;
    int64_t begin, end; /* absolute byte range in the file */
    uint64_t hash;      /* cl_hash_sum of its bytes */
} entry;

typedef struct {
    entry *e;
    int n;
    size_t cap;
    float *own[CL_PP_MAX_CHUNKS]; /* moments read out of a disk offload */
} entries;

static cl_status add_boxes(entries *es, const cl_param_spec *ls, int tp_rank, int i, int k, int64_t a, int64_t b,
                           const float *src, int64_t off) {
    cl_box bx[9];
    int nb = cl_shard_slice_boxes(ls, tp_rank, a, b, bx);
    for (int j = 0; j < nb; j++) {
        CL_TRY(cl_grow(&es->e, sizeof *es->e, (size_t)es->n, &es->cap, 256, "the checkpoint's box list"));
        es->e[es->n++] = (entry){i, k, bx[j], src, off, cl_shard_local_cols(ls), 0, 0, 0};
    }
    return CL_OK;
}

/* What this rank writes: of each parameter its part owns, the parameter
 * (replica 0) and the moments (replica 0, or every replica's shard under
 * ZeRO), a replicated tensor by tensor-parallel rank 0 only. */
static cl_status collect(cl_trainer *t, entries *es) {
    cl_model *ms[CL_PP_MAX_CHUNKS];
    cl_optimizer *os[CL_PP_MAX_CHUNKS];
    int nc = cl_pp_chunks(t, ms, os);
    for (int c = 0; c < nc; c++) {
        cl_model *m = ms[c];
        cl_optimizer *o = os[c];
        const float *mom[2] = {o->m, o->v};
        if (o->fd >= 0) {
            es->own[c] = malloc(2 * (size_t)o->nfloats * sizeof(float));
            if (!es->own[c]) return cl_error(CL_ERR_OOM, "cannot allocate the optimizer state for the checkpoint");
            CL_TRY(cl_optimizer_get_moments(o, es->own[c], es->own[c] + o->nfloats));
            mom[0] = es->own[c];
            mom[1] = es->own[c] + o->nfloats;
        }
        int sharded = cl_zero_shards_optim(cl_model_zero(m)->stage) && cl_model_zero(m)->n > 1;
        for (int i = 0; i < cl_model_desc_of(m)->nparams; i++) {
            const cl_param_spec *ls = &cl_model_desc_of(m)->params[i];
            if (!cl_model_owns_param(m, i) || (ls->split == CL_SPLIT_NONE && t->tp_rank != 0)) continue;
            if (ls->tp_rep > 1 && t->tp_rank % ls->tp_rep) continue; /* a replicated slice written once */
            if (!ls->numel) continue; /* another expert-parallel rank's expert */
            /* the first replica holding it writes it: replica 0, or an expert weight's first in its expert-data group */
            int ep = t->cfg.ep > 1 ? t->cfg.ep : 1, first = ls->expert ? t->gdp_rank < ep : t->gdp_rank == 0;
            /* under ZeRO (shards over the expert-data group) a replicated parameter's shards are written by the first
             * expert-parallel rank's expert-data group alone */
            int copy = !ls->expert && t->gdp_rank % ep;
            int64_t a, b;
            if (params_sharded(m)) { /* every replica its shard's part, as the moments */
                shard_range(m, cl_model_sizes(m)->shard, i, &a, &b);
                if (!copy) CL_TRY(add_boxes(es, ls, t->tp_rank, i, CL_K_PARAM, a, b, cl_model_params(m), shard_off(m, i)));
            } else if (first)
                CL_TRY(add_boxes(es, ls, t->tp_rank, i, CL_K_PARAM, 0, ls->numel, cl_model_param(m, i), 0));
            /* moments: the first replica's, or under ZeRO every replica its shard's (as the parameters above) */
            if (sharded ? copy : !first) continue;
            moment_range(m, o, i, &a, &b);
            for (int k = 1; k < CL_NKINDS; k++)
                CL_TRY(add_boxes(es, ls, t->tp_rank, i, k, a, b, mom[k - 1], shard_off(m, i)));
        }
    }
    return CL_OK;
}

static cl_status write_all(int fd, const void *buf, size_t n, const char *path) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return cl_error(CL_ERR_IO, "%s: %s", path, w < 0 ? strerror(errno) : "short write");
        p += w;
        n -= (size_t)w;
    }
    return CL_OK;
}

/* Writes n bytes and feeds them to the file's hasher. */
static cl_status write_hashed(int fd, const void *buf, size_t n, const char *path, cl_hasher *fh) {
    cl_hasher_feed(fh, buf, n);
    return write_all(fd, buf, n, path);
}

/* One safetensors file of the boxes (each an F32 [nr, nc] tensor named
 * KIND.NAME[r0:r1,c0:c1]), its metadata the run id and step, streamed
 * through a bounded buffer; fills each entry's absolute byte range and
 * content hash, and the file's size and hash. */
static cl_status write_shard(const char *path, const cl_trainer *t, int rank, entries *es, int64_t *file_bytes, uint64_t *file_hash) {
    static const char *const prefix[CL_NKINDS] = {"", "exp_avg.", "exp_avg_sq."};
    const cl_model_desc *full = t->full;
    cl_strbuf h = {0};
    cl_sb_printf(&h, "{\"__metadata__\":{\"format\":\"cleave-shard\",\"" CL_CKPT_META_RUN "\":\"%s\",\"" CL_CKPT_META_STEP "\":\"%d\"}",
                 t->run_id, t->step);
    int64_t at = 0;
    for (int j = 0; j < es->n; j++) {
        entry *e = &es->e[j];
        int64_t bytes = e->b.nr * e->b.nc * (int64_t)sizeof(float);
        cl_sb_printf(&h, ",\"%s%s[%" PRId64 ":%" PRId64 ",%" PRId64 ":%" PRId64 "]\":{\"dtype\":\"F32\",\"shape\":[%" PRId64 ",%" PRId64
                         "],\"data_offsets\":[%" PRId64 ",%" PRId64 "]}",
                     prefix[e->k], full->params[e->t].name, e->b.r0, e->b.r0 + e->b.nr, e->b.c0, e->b.c0 + e->b.nc, e->b.nr,
                     e->b.nc, at, at + bytes);
        e->begin = at;
        at += bytes;
        e->end = at;
    }
    cl_sb_printf(&h, "}");
    while ((h.len + 8) % 8) cl_sb_printf(&h, " ");
    if (h.failed) {
        cl_sb_free(&h);
        return cl_error(CL_ERR_OOM, "%s: cannot build the header", path);
    }
    int64_t base = 8 + (int64_t)h.len;
    for (int j = 0; j < es->n; j++) es->e[j].begin += base, es->e[j].end += base;
    *file_bytes = base + at;
    cl_hasher *fh = cl_hasher_new(), *bh = cl_hasher_new();
    int fd = fh && bh ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
    if (fd < 0) {
        cl_sb_free(&h);
        cl_hasher_free(fh);
        cl_hasher_free(bh);
        return fh && bh ? cl_error(CL_ERR_IO, "%s: %s", path, strerror(errno)) : cl_error(CL_ERR_OOM, "%s: cannot allocate a hasher", path);
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    cl_status s = write_hashed(fd, len8, 8, path, fh);
    if (!s) s = write_hashed(fd, h.buf, h.len, path, fh);
    cl_sb_free(&h);
    if (!s) s = save_fault(rank, "mid-shard");
    float *buf = s ? NULL : malloc(WRITE_BUF);
    if (!s && !buf) s = cl_error(CL_ERR_OOM, "%s: cannot allocate the write buffer", path);
    size_t fill = 0, cap = WRITE_BUF / sizeof(float);
    for (int j = 0; j < es->n && !s; j++) {
        entry *e = &es->e[j];
        cl_hasher_reset(bh, 0);
        for (int64_t r = 0; r < e->b.nr && !s; r++) {
            const float *row = e->src + e->off + e->b.l0 + r * e->lc;
            for (int64_t c = 0; c < e->b.nc && !s;) {
                size_t take = (size_t)cl_shard_min(e->b.nc - c, (int64_t)(cap - fill));
                cl_device_copy_to_host(t->dev, buf + fill, row + c, take * sizeof(float));
                cl_hasher_feed(bh, buf + fill, take * sizeof(float)); /* the row's bytes in order: the same sum as at once */
                fill += take;
                c += (int64_t)take;
                if (fill == cap) {
                    s = write_hashed(fd, buf, fill * sizeof(float), path, fh);
                    fill = 0;
                }
            }
        }
        e->hash = cl_hasher_sum(bh);
    }
    if (!s && fill) s = write_hashed(fd, buf, fill * sizeof(float), path, fh);
    *file_hash = cl_hasher_sum(fh);
    cl_hasher_free(fh);
    cl_hasher_free(bh);
    free(buf);
    if (!s && fsync(fd) != 0) s = cl_error(CL_ERR_IO, "%s: %s", path, strerror(errno));
    if (close(fd) != 0 && !s) s = cl_error(CL_ERR_IO, "%s: %s", path, strerror(errno));
    return s;
}

/* What a rank tells world rank 0 after writing its file. */
typedef struct {
    int64_t nboxes, bytes, coord[3], nparts;
    uint64_t hash; /* the file's content hash */
    int64_t parts[CL_PP_MAX_CHUNKS][4]; /* stage, alloc, shard, shard_lo: ZeRO's padding, never data */
} report;

static int cmp_box(const void *pa, const void *pb) {
    const int64_t *a = pa, *b = pb;
    for (int i = 0; i < 5; i++) /* tensor, kind, file, row, column */
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* The index (world rank 0): reports[] and boxes[] of every rank (NBOX int64
 * each: tensor, kind, r0, c0, nr, nc, begin, end, content hash). */
static cl_status write_index(cl_trainer *t, const char *tmp, int W, const report *rep, int64_t *const *boxes, int opt_t) {
    const cl_model_desc *f = t->full;
    const cl_train_config *c = &t->cfg;
    int64_t total = 0;
    int *fidx = malloc((size_t)W * sizeof *fidx);
    for (int r = 0; r < W; r++) total += rep[r].nboxes;
    int64_t *all = malloc((size_t)(total ? total : 1) * 7 * sizeof *all);
    if (!all || !fidx) {
        free(all);
        free(fidx);
        return cl_error(CL_ERR_OOM, "cannot allocate the checkpoint index");
    }
    int nfiles = 0;
    int64_t n = 0;
    for (int r = 0; r < W; r++) {
        fidx[r] = rep[r].nboxes ? nfiles++ : -1;
        for (int64_t j = 0; j < rep[r].nboxes; j++, n++) {
            const int64_t *b = boxes[r] + NBOX * j;
            int64_t *o = all + 7 * n; /* tensor, kind, file, r0, c0 | nr, nc; begin, end kept via the lookup below */
            o[0] = b[0], o[1] = b[1], o[2] = fidx[r], o[3] = b[2], o[4] = b[3], o[5] = r, o[6] = j;
        }
    }
    qsort(all, (size_t)n, 7 * sizeof *all, cmp_box);
    cl_strbuf b = {0};
    const cl_mesh *mesh = c->groups ? &c->groups->mesh : NULL;
    cl_sb_printf(&b, "{\n\"format\": \"" CL_SHARD_FORMAT "\",\n\"version\": %d,\n\"config\": ", CL_SHARD_VERSION);
    cl_ckpt_config_json(&b, &f->cfg, t->tok ? cl_tokenizer_name(t->tok) : "none", t->cfg.dtype);
    cl_sb_printf(&b, ",\n\"state\": ");
    cl_ckpt_state_json(&b, t, opt_t);
    cl_sb_printf(&b,
                 ",\n\"written_with\": {\"world\": %d, \"dp\": %d, \"tp\": %d, \"pp\": %d, \"virtual_stages\": %d, \"zero\": %d, "
                 "\"sequence_parallel\": %d, \"vocab_divisible_by\": %d, \"vocab_padded\": %d, \"comm\": \"%s\"},\n",
                 W, t->gdp, t->tp, t->pp_size, /* dp x cp: the context ranks are replicas of the weights */ t->cfg.virtual_stages ? t->cfg.virtual_stages : 1, c->zero, c->sequence_parallel,
                 t->desc->tpl.vocab_div, t->desc->vocab_padded, mesh ? cl_comm_backend(c->groups->world) : "none");
    cl_sb_printf(&b, "\"files\": [");
    for (int r = 0, k = 0; r < W; r++) {
        if (fidx[r] < 0) continue;
        cl_sb_printf(&b, "%s\n  {\"name\": \"rank-%05d.safetensors\", \"rank\": %d, \"dp\": %" PRId64 ", \"tp\": %" PRId64
                         ", \"pp\": %" PRId64 ", \"bytes\": %" PRId64 ", \"zero_parts\": [",
                     k++ ? "," : "", r, r, rep[r].coord[0], rep[r].coord[1], rep[r].coord[2], rep[r].bytes);
        for (int64_t p = 0; p < rep[r].nparts; p++)
            cl_sb_printf(&b, "%s[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", p ? ", " : "", rep[r].parts[p][0],
                         rep[r].parts[p][1], rep[r].parts[p][2], rep[r].parts[p][3]);
        cl_sb_printf(&b, "]}");
    }
    cl_sb_printf(&b, "\n],\n\"tensors\": [");
    int64_t at = 0;
    for (int i = 0; i < f->nparams; i++) {
        const cl_param_spec *p = &f->params[i];
        cl_sb_printf(&b, "%s\n  {\"name\": \"%s\", \"dtype\": \"F32\", \"shape\": [", i ? "," : "", p->name);
        for (int d = 0; d < p->ndim; d++) cl_sb_printf(&b, "%s%" PRId64, d ? ", " : "", p->full_shape[d]);
        cl_sb_printf(&b, "], \"matrix\": [%" PRId64 ", %" PRId64 "]", cl_shard_whole_rows(p), cl_shard_whole_cols(p));
        for (int k = 0; k < CL_NKINDS; k++) {
            cl_sb_printf(&b, ",\n   \"%s\": [", cl_shard_kind_key[k]);
            for (int q = 0; at < n && all[7 * at] == i && all[7 * at + 1] == k; at++, q++) {
                const int64_t *o = all + 7 * at, *x = boxes[o[5]] + NBOX * o[6];
                cl_sb_printf(&b, "%s[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", \"%016" PRIx64 "\"]",
                             q ? ", " : "", o[2], x[2], x[3], x[4], x[5], x[6], x[7], (uint64_t)x[8]);
            }
            cl_sb_printf(&b, "]");
        }
        cl_sb_printf(&b, "}");
    }
    cl_sb_printf(&b, "\n]\n}\n");
    cl_status s = cl_ckpt_write_text(tmp, CL_CKPT_INDEX, &b);
    cl_sb_free(&b);
    free(all);
    free(fidx);
    return s;
}

cl_status cl_trainer_save_sharded(cl_trainer *t, const char *dir) {
    cl_comm *world = world_of(t);
    int me = world ? cl_comm_rank(world) : 0, W = world ? cl_comm_size(world) : 1;
    char target[4096] = "", tmp[4200] = "", path[4300];
    save_count++;
    cl_status s = me == 0 ? cl_ckpt_begin(dir, target, tmp) : CL_OK;
    CL_TRY(agree(world, s));
    /* the directory, and world rank 0's run identifier, which every rank adopts (cl_trainer_run_id) */
    if (world && ((s = cl_comm_broadcast(world, tmp, sizeof tmp, 0)) || (s = cl_comm_broadcast(world, t->run_id, sizeof t->run_id, 0)))) {
        if (me == 0) cl_ckpt_abort(tmp);
        return s;
    }
    /* every rank writes its own file at once */
    entries es = {0};
    report rep;
    memset(&rep, 0, sizeof rep);
    int64_t opt_t = t->opt->t;
    s = cl_device_sync(t->dev); /* the step's updates done before the writer reads them */
    if (!s) s = collect(t, &es);
    if (!s && es.n) {
        snprintf(path, sizeof path, "%s/rank-%05d.safetensors", tmp, me);
        s = write_shard(path, t, me, &es, &rep.bytes, &rep.hash);
        if (!s) s = save_fault(me, "after-shard");
    }
    s = agree(world, s);
    int64_t *mine = NULL;
    if (!s) {
        cl_model *ms[CL_PP_MAX_CHUNKS];
        cl_optimizer *os[CL_PP_MAX_CHUNKS];
        int nc = cl_pp_chunks(t, ms, os), pr = t->cfg.groups ? cl_comm_rank(t->cfg.groups->pp) : 0;
        rep.nboxes = es.n;
        rep.coord[0] = t->gdp_rank, rep.coord[1] = t->tp_rank, rep.coord[2] = pr;
        rep.nparts = nc;
        for (int c = 0; c < nc; c++) {
            rep.parts[c][0] = c * t->pp_size + pr;
            rep.parts[c][1] = cl_model_sizes(ms[c])->alloc;
            rep.parts[c][2] = cl_model_sizes(ms[c])->shard;
            rep.parts[c][3] = cl_model_sizes(ms[c])->shard_lo;
        }
        mine = malloc((size_t)(es.n ? es.n : 1) * NBOX * sizeof *mine);
        if (!mine) s = cl_error(CL_ERR_OOM, "cannot allocate the checkpoint's box list");
        for (int j = 0; !s && j < es.n; j++) {
            const entry *e = &es.e[j];
            int64_t v[NBOX] = {e->t, e->k, e->b.r0, e->b.c0, e->b.nr, e->b.nc, e->begin, e->end, (int64_t)e->hash};
            memcpy(mine + NBOX * j, v, sizeof v);
        }
    }
    for (int c = 0; c < CL_PP_MAX_CHUNKS; c++) free(es.own[c]);
    free(es.e);
    s = agree(world, s);
    /* the boxes to world rank 0, which writes the index last */
    report *reps = NULL;
    int64_t **boxes = NULL;
    if (!s && me != 0) {
        s = cl_comm_send(world, &rep, sizeof rep, 0, SHARD_TAG);
        if (!s && rep.nboxes) s = cl_comm_send(world, mine, (size_t)rep.nboxes * NBOX * sizeof *mine, 0, SHARD_TAG);
    } else if (!s) {
        reps = calloc((size_t)W, sizeof *reps);
        boxes = calloc((size_t)W, sizeof *boxes);
        if (!reps || !boxes) s = cl_error(CL_ERR_OOM, "cannot allocate the checkpoint index");
        if (!s) {
            reps[0] = rep;
            boxes[0] = mine;
            mine = NULL;
        }
        for (int r = 1; r < W && !s; r++) {
            s = cl_comm_recv(world, &reps[r], sizeof reps[r], r, SHARD_TAG);
            if (!s && (reps[r].nboxes < 0 || reps[r].nboxes > (1 << 26) || reps[r].nparts > CL_PP_MAX_CHUNKS))
                s = cl_error(CL_ERR_INTERNAL, "rank %d reported %" PRId64 " boxes", r, reps[r].nboxes);
            if (!s && !(boxes[r] = malloc((size_t)(reps[r].nboxes ? reps[r].nboxes : 1) * NBOX * sizeof(int64_t))))
                s = cl_error(CL_ERR_OOM, "cannot allocate the checkpoint index");
            if (!s && reps[r].nboxes) s = cl_comm_recv(world, boxes[r], (size_t)reps[r].nboxes * NBOX * sizeof(int64_t), r, SHARD_TAG);
        }
        if (!s) s = save_fault(me, "before-index");
        if (!s) s = write_index(t, tmp, W, reps, boxes, (int)opt_t);
        if (!s) s = save_fault(me, "after-index");
        /* the manifest: the index (read back and hashed) and each shard as its rank wrote and hashed it */
        cl_ckpt_manifest mf = {.version = CL_CKPT_MARKER_VERSION, .step = t->step};
        memcpy(mf.run_id, t->run_id, sizeof mf.run_id);
        if (!s) s = cl_ckpt_manifest_add(&mf, tmp, CL_CKPT_INDEX);
        if (!s) s = cl_ckpt_run_config_write(&t->cfg, tmp, &mf);
        for (int r = 0; r < W && !s; r++) {
            char nm[40];
            snprintf(nm, sizeof nm, "rank-%05d.safetensors", r);
            if (reps[r].nboxes) s = cl_ckpt_manifest_put(&mf, nm, reps[r].bytes, reps[r].hash);
        }
        s = cl_ckpt_commit(dir, target, tmp, s, &mf);
        cl_ckpt_manifest_free(&mf);
        if (!s) s = save_fault(me, "after-rename");
        for (int r = 0; boxes && r < W; r++) free(boxes[r]);
        free(boxes);
        free(reps);
    }
    free(mine);
    s = agree(world, s);
    if (s && me == 0 && tmp[0]) cl_ckpt_abort(tmp); /* a failure before the commit: nothing left behind */
    return s;
}

/* ---- load -------------------------------------------------------------------- */

/* File f's header read: its run id and step (version 2: recorded in the
 * metadata, and those of the index). */
static cl_status check_header(cl_shard_index *ix, int fd, const char *path, uint64_t hl) {
    char *h = malloc(hl + 1);
    if (!h) return cl_error(CL_ERR_OOM, "%s: cannot allocate its header", path);
    ssize_t r = pread(fd, h, hl, 8);
    cl_json_doc *doc = NULL;
    cl_status s = r == (ssize_t)hl ? cl_json_parse(&doc, h, hl) : cl_error(CL_ERR_FORMAT, "%s: shorter than its header", path);
    free(h);
    if (s) return cl_error_context(s, "%s", path);
    ix->bytes_read += (int64_t)hl, ix->bytes_head += (int64_t)hl;
    const cl_json *md = cl_json_get(cl_json_root(doc), "__metadata__");
    const cl_json *rid = cl_json_get(md, CL_CKPT_META_RUN), *st = cl_json_get(md, CL_CKPT_META_STEP);
    s = cl_ckpt_check_origin(path, "the index", rid && rid->type == CL_JSON_STRING ? rid->string : NULL,
                             st && st->type == CL_JSON_STRING ? st->string : NULL, ix->run_id, ix->step);
    cl_json_free(doc);
    return s;
}

/* File f open, its size the marker's, its run id and step the index's
 * (when there are hashes), its boxes checked against its header and size. */
static cl_status open_file(cl_shard_index *ix, int f) {
    if (ix->fd[f] >= 0) return CL_OK;
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", ix->dir, ix->fname[f]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cl_error(CL_ERR_INVALID, "%s: %s (a shard the index lists)", path, strerror(errno));
    struct stat sb;
    unsigned char h[8];
    uint64_t hl = 0;
    if (fstat(fd, &sb) != 0 || pread(fd, h, 8, 0) != 8) {
        close(fd);
        return cl_error(CL_ERR_FORMAT, "%s: too short for a safetensors file", path);
    }
    for (int i = 0; i < 8; i++) hl |= (uint64_t)h[i] << (8 * i);
    if (hl > (uint64_t)sb.st_size - 8) {
        close(fd);
        return cl_error(CL_ERR_FORMAT, "%s: its header length %" PRIu64 " passes the file's %lld bytes", path, hl, (long long)sb.st_size);
    }
    ix->bytes_read += 8;
    cl_status s = ix->m ? cl_ckpt_check_size(ix->dir, ix->m, ix->fname[f], (int64_t)sb.st_size) : CL_OK;
    if (!s && ix->m) s = check_header(ix, fd, path, hl);
    for (int i = 0; !s && i < ix->nt * CL_NKINDS; i++)
        for (int j = 0; !s && j < ix->nbx[i]; j++) {
            const cl_sbox *x = &ix->bx[i][j];
            if (x->file == f && (x->begin < 8 + (int64_t)hl || x->end > (int64_t)sb.st_size))
                s = cl_error(CL_ERR_FORMAT, "%s: a box of '%s' (bytes %" PRId64 " to %" PRId64 ") is outside its data (%" PRIu64 " to %lld)",
                             path, ix->path, x->begin, x->end, 8 + hl, (long long)sb.st_size);
        }
    if (s) {
        close(fd);
        return s;
    }
    ix->fd[f] = fd;
    return CL_OK;
}

static cl_status flush_read(cl_shard_index *ix) {
    if (ix->plen > 0 && ix->m) { /* remembered for the verification */
        CL_TRY(cl_grow(&ix->seg, sizeof *ix->seg, (size_t)ix->nseg, &ix->segcap, 1024, "the load's read list"));
        ix->seg[ix->nseg++] = (cl_sseg){ix->pfile, ix->poff, ix->plen, ix->pdst};
    }
    while (ix->plen > 0) {
        ssize_t r = pread(ix->fd[ix->pfile], ix->pdst, (size_t)ix->plen, ix->poff);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return cl_error(CL_ERR_IO, "%s/%s: %s", ix->dir, ix->fname[ix->pfile], r < 0 ? strerror(errno) : "shorter than its index says");
        ix->bytes_read += r;
        ix->pdst += r, ix->poff += r, ix->plen -= r;
    }
    return CL_OK;
}

/* ---- verification: every stored byte hashed by exactly one rank ----------------- */

static int cmp_seg(const void *pa, const void *pb) {
    const cl_sseg *a = pa, *b = pb;
    if (a->file != b->file) return a->file < b->file ? -1 : 1;
    return a->off < b->off ? -1 : a->off > b->off;
}

/* Whether this load read file f's bytes [p0, p1) whole (into memory, in
 * reads sorted by cmp_seg); fed to h in order when h is given. */
static int covered(const cl_shard_index *ix, int f, int64_t p0, int64_t p1, cl_hasher *h) {
    int lo = 0, hi = ix->nseg;
    while (lo < hi) { /* the first read past (f, p0) */
        int mid = (lo + hi) / 2;
        const cl_sseg *g = &ix->seg[mid];
        if (g->file < f || (g->file == f && g->off <= p0)) lo = mid + 1;
        else hi = mid;
    }
    int64_t p = p0;
    for (int q = lo - 1; p < p1; q++) {
        if (q < 0 || q >= ix->nseg) return 0;
        const cl_sseg *g = &ix->seg[q];
        if (g->file != f || g->off > p || g->off + g->len <= p) return 0;
        int64_t e = cl_shard_min(g->off + g->len, p1);
        if (h) cl_hasher_feed(h, g->dst + (p - g->off), (size_t)(e - p));
        p = e;
    }
    return 1;
}

/* Each box of the kinds in mask (bit k) against the index's hash. The
 * boxes' CL_HASH_BLOCK blocks are shared out: a block that some rank read
 * whole is hashed, from its memory, by the lowest such rank; any other
 * block by rank (its number modulo the world's size), which reads it for
 * that. The parts are summed across ranks (cl_hash_sum adds up), and
 * every rank compares every box. Collective over world: every rank calls
 * it, whatever it read. */
static cl_status verify_boxes(cl_shard_index *ix, cl_comm *world, int mask) {
    int me = world ? cl_comm_rank(world) : 0, W = world ? cl_comm_size(world) : 1;
    int64_t nbox = 0, nblk = 0;
    for (int i = 0; i < ix->nt * CL_NKINDS; i++)
        for (int j = 0; (mask >> (i % CL_NKINDS) & 1) && j < ix->nbx[i]; j++) {
            int64_t len = ix->bx[i][j].end - ix->bx[i][j].begin;
            nbox++;
            nblk += (len + (int64_t)CL_HASH_BLOCK - 1) / (int64_t)CL_HASH_BLOCK;
        }
    double *cov = malloc((size_t)(nblk ? nblk : 1) * sizeof *cov), *part = calloc((size_t)(nbox ? nbox : 1) * 4, sizeof *part);
    char *scratch = NULL;
    cl_status s = cov && part ? CL_OK : cl_error(CL_ERR_OOM, "cannot allocate the verification's lists");
    if (ix->nseg) qsort(ix->seg, (size_t)ix->nseg, sizeof *ix->seg, cmp_seg);
    for (int pass = 0; pass < 2; pass++) { /* 0: which blocks this rank read whole; 1: hash its share */
        int64_t g = 0, bi = 0;
        for (int i = 0; cov && part && i < ix->nt * CL_NKINDS; i++)
            for (int j = 0; (mask >> (i % CL_NKINDS) & 1) && j < ix->nbx[i]; j++, bi++) {
                const cl_sbox *x = &ix->bx[i][j];
                uint64_t sum = 0;
                int64_t g0 = g, nb = (x->end - x->begin + (int64_t)CL_HASH_BLOCK - 1) / (int64_t)CL_HASH_BLOCK;
                if (pass == 1 && !s) { /* the blocks this rank read whole and owns, from memory, over its threads */
                    int64_t hashed = 0, lost = 0;
#pragma omp parallel reduction(+ : sum, hashed, lost) if (nb > 1)
                    {
                        cl_hasher *th = cl_hasher_new();
                        lost += !th;
#pragma omp for schedule(dynamic, 4)
                        for (int64_t blk = 0; blk < nb; blk++) {
                            int64_t at = x->begin + blk * (int64_t)CL_HASH_BLOCK, e = cl_shard_min(at + (int64_t)CL_HASH_BLOCK, x->end);
                            if (!th || !(cov[g0 + blk] > -1e8) || (int)-cov[g0 + blk] != me) continue;
                            cl_hasher_reset(th, (uint64_t)blk);
                            covered(ix, x->file, at, e, th);
                            sum += cl_hasher_sum(th);
                            hashed += e - at;
                        }
                        cl_hasher_free(th);
                    }
                    ix->bytes_hashed += hashed;
                    if (lost) s = cl_error(CL_ERR_OOM, "cannot allocate the verification's hashers");
                }
                for (int64_t at = x->begin, blk = 0; at < x->end; at += (int64_t)CL_HASH_BLOCK, blk++, g++) {
                    int64_t e = cl_shard_min(at + (int64_t)CL_HASH_BLOCK, x->end);
                    if (pass == 0) {
                        cov[g] = covered(ix, x->file, at, e, NULL) ? -(double)me : -1e9;
                        continue;
                    }
                    int owner = cov[g] > -1e8 ? (int)-cov[g] : (int)(g % W);
                    if (owner != me || s || cov[g] > -1e8) continue; /* read whole: hashed above */
                    {   /* no rank read it whole: read it to hash it */
                        if (!scratch && !(scratch = malloc(CL_HASH_BLOCK))) {
                            s = cl_error(CL_ERR_OOM, "cannot allocate the verification's buffer");
                            continue;
                        }
                        s = open_file(ix, x->file);
                        ssize_t r = s ? -1 : pread(ix->fd[x->file], scratch, (size_t)(e - at), at);
                        if (!s && r != e - at)
                            s = cl_error(CL_ERR_IO, "%s/%s: %s", ix->dir, ix->fname[x->file], r < 0 ? strerror(errno) : "shorter than its index says");
                        if (s) continue;
                        ix->bytes_read += e - at, ix->bytes_verify += e - at;
                        sum += cl_hash_block(scratch, (size_t)(e - at), (uint64_t)blk);
                    }
                    ix->bytes_hashed += e - at;
                }
                for (int l = 0; pass == 1 && l < 4; l++) part[4 * bi + l] = (double)(sum >> (16 * l) & 0xffff);
            }
        /* the lowest rank that read a block whole; then the parts' 16-bit limbs summed (exact in a double) */
        cl_status cs = world ? cl_comm_allreduce(world, pass ? part : cov, (size_t)(pass ? 4 * nbox : nblk), CL_F64, pass ? CL_RED_SUM : CL_RED_MAX)
                             : CL_OK;
        if (!s) s = cs;
    }
    int64_t bi = 0;
    for (int i = 0; !s && i < ix->nt * CL_NKINDS; i++)
        for (int j = 0; !s && (mask >> (i % CL_NKINDS) & 1) && j < ix->nbx[i]; j++, bi++) {
            const cl_sbox *x = &ix->bx[i][j];
            uint64_t got = 0;
            for (int l = 0; l < 4; l++) got += (uint64_t)part[4 * bi + l] << (16 * l);
            if (got != x->hash)
                s = cl_error(CL_ERR_FORMAT,
                             "%s/%s: tensor '%s' %s box [rows %" PRId64 ":%" PRId64 ", columns %" PRId64 ":%" PRId64 "] (bytes %" PRId64
                             " to %" PRId64 "): content hash %016" PRIx64 ", %s records %016" PRIx64
                             " (the shard's bytes changed after it was written)",
                             ix->dir, ix->fname[x->file], ix->full->params[i / CL_NKINDS].name, cl_shard_kind_key[i % CL_NKINDS],
                             x->r0, x->r0 + x->nr, x->c0, x->c0 + x->nc, x->begin, x->end, got, CL_CKPT_INDEX, x->hash);
        }
    free(cov);
    free(part);
    free(scratch);
    return s;
}

/* Reads bytes [off, off + len) of file f to dst, joined to the pending
 * read when both continue it. */
static cl_status want(cl_shard_index *ix, int f, int64_t off, char *dst, int64_t len) {
    if (ix->plen && f == ix->pfile && off == ix->poff + ix->plen && dst == ix->pdst + ix->plen && ix->plen + len <= READ_RUN) {
        ix->plen += len;
        return CL_OK;
    }
    CL_TRY(flush_read(ix));
    CL_TRY(open_file(ix, f));
    ix->pfile = f, ix->poff = off, ix->pdst = dst, ix->plen = len;
    return CL_OK;
}

/* Tensor i's kind k, local range [a, b) of tensor-parallel rank r's slice
 * (spec ls), into dst[off + L] for each local index L. */
static cl_status fill(cl_shard_index *ix, int i, int k, const cl_param_spec *ls, int r, int64_t a, int64_t b, float *dst, int64_t off) {
    cl_box need[9];
    int nn = cl_shard_slice_boxes(ls, r, a, b, need);
    int64_t lc = cl_shard_local_cols(ls);
    const cl_sbox *sb = ix->bx[i * CL_NKINDS + k];
    for (int g = 0; g < nn; g++)
        for (int j = 0; j < ix->nbx[i * CL_NKINDS + k]; j++) {
            const cl_sbox *s = &sb[j];
            const cl_box *n = &need[g];
            int64_t r0 = cl_shard_max(n->r0, s->r0), r1 = cl_shard_min(n->r0 + n->nr, s->r0 + s->nr);
            int64_t c0 = cl_shard_max(n->c0, s->c0), c1 = cl_shard_min(n->c0 + n->nc, s->c0 + s->nc);
            for (int64_t row = r0; row < r1 && c0 < c1; row++) {
                int64_t foff = s->begin + ((row - s->r0) * s->nc + (c0 - s->c0)) * (int64_t)sizeof(float);
                int64_t L = n->l0 + (row - n->r0) * lc + (c0 - n->c0);
                CL_TRY(want(ix, s->file, foff, (char *)(dst + off + L), (c1 - c0) * (int64_t)sizeof(float)));
            }
        }
    return CL_OK;
}

static cl_status check_finite(const cl_shard_index *ix, const char *name, int k, const float *p, int64_t n) {
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(p[j]) || (k == CL_K_AVG_SQ && p[j] < 0))
            return cl_error(CL_ERR_FORMAT, "%s: tensor '%s' %s holds %s value (%g)", ix->dir, name, cl_shard_kind_key[k],
                            isfinite(p[j]) ? "a negative" : "a non-finite", (double)p[j]);
    return CL_OK;
}

/* A chunk's reads: the parameters (padding zero) and the moments, straight
 * into the optimizer's memory, or into *own (a host copy of the shard) when
 * they live in a file (disk offload). */
static cl_status load_reads(cl_trainer *t, cl_shard_index *ix, cl_model *m, cl_optimizer *o, float **own) {
    const cl_model_desc *d = cl_model_desc_of(m);
    int p3 = params_sharded(m);
    if (p3) cl_device_fill(cl_model_device(m), cl_model_params(m), 0, (size_t)cl_model_sizes(m)->params * sizeof(float)); /* ZeRO 3: the shard, its padding zero */
    for (int i = 0; i < d->nparams; i++) {
        if (!cl_model_holds_param(m, i)) continue; /* the head's wte copy too: it equals the embedding's */
        const cl_param_spec *ls = &d->params[i];
        int64_t a = 0, b = ls->numel;
        if (p3) {
            shard_range(m, cl_model_sizes(m)->shard, i, &a, &b);
            CL_TRY(fill(ix, i, CL_K_PARAM, ls, t->tp_rank, a, b, cl_model_params(m), shard_off(m, i)));
            continue;
        }
        cl_device_fill(cl_model_device(m), cl_model_param(m, i), 0, (size_t)ls->numel * sizeof(float)); /* padded vocabulary rows are zero */
        CL_TRY(fill(ix, i, CL_K_PARAM, ls, t->tp_rank, a, b, cl_model_param(m, i), 0));
    }
    size_t nf = (size_t)o->nfloats;
    *own = o->fd >= 0 ? calloc(2 * (nf ? nf : 1), sizeof **own) : NULL;
    if (o->fd >= 0 && !*own) return cl_error(CL_ERR_OOM, "cannot allocate the optimizer state's load buffer");
    float *mv[2] = {*own ? *own : o->m, *own ? *own + nf : o->v};
    if (!*own) {
        cl_device_fill(o->dev, mv[0], 0, nf * sizeof(float)); /* the padding between parameters stays zero */
        cl_device_fill(o->dev, mv[1], 0, nf * sizeof(float));
    }
    for (int i = 0; i < d->nparams; i++) {
        if (!cl_model_holds_param(m, i)) continue;
        int64_t a, b;
        moment_range(m, o, i, &a, &b);
        for (int k = 1; k < CL_NKINDS; k++) CL_TRY(fill(ix, i, k, &d->params[i], t->tp_rank, a, b, mv[k - 1], shard_off(m, i)));
    }
    return flush_read(ix);
}

/* After the verification: the values finite (second moments not negative),
 * and a disk offload's moments handed to it. */
static cl_status load_finish(cl_shard_index *ix, cl_model *m, cl_optimizer *o, const float *own) {
    const cl_model_desc *d = cl_model_desc_of(m);
    int p3 = params_sharded(m);
    size_t nf = (size_t)o->nfloats;
    const float *mv[2] = {own ? own : o->m, own ? own + nf : o->v};
    cl_status s = CL_OK;
    for (int i = 0; i < d->nparams && !s; i++) {
        if (!cl_model_holds_param(m, i)) continue;
        int64_t a = 0, b = d->params[i].numel;
        if (p3) shard_range(m, cl_model_sizes(m)->shard, i, &a, &b);
        const float *p = p3 ? cl_model_params(m) + shard_off(m, i) : cl_model_param(m, i);
        s = check_finite(ix, d->params[i].name, CL_K_PARAM, p + a, b - a);
        moment_range(m, o, i, &a, &b);
        for (int k = 1; k < CL_NKINDS && !s; k++)
            s = check_finite(ix, d->params[i].name, k, mv[k - 1] + shard_off(m, i) + a, b - a);
    }
    if (!s && own) s = cl_optimizer_set_moments(o, own, own + nf);
    return s;
}

/* dir's index: its config and tokenizer, and (full not NULL) its boxes
 * checked against that model's tensors. */
static cl_status open_index(cl_shard_index *ix, const char *dir, const cl_model_desc *full, cl_model_config *c, char *tok, size_t tn,
                            const cl_json **state, cl_json_doc **doc) {
    snprintf(ix->dir, sizeof ix->dir, "%s", dir);
    snprintf(ix->path, sizeof ix->path, "%s/" CL_CKPT_INDEX, dir);
    CL_TRY(cl_json_parse_file_as(doc, ix->path, CL_FILE_INDEX));
    const cl_json *root = cl_json_root(*doc);
    const cl_json *cj = cl_json_get(root, "config");
    *state = cl_json_get(root, "state");
    cl_status s = cj && *state ? CL_OK : cl_error(CL_ERR_FORMAT, "%s: no \"config\" or \"state\" object", ix->path);
    if (!s) s = cl_ckpt_config_parse(cj, ix->path, c, tok, tn);
    if (!s && full) s = cl_shard_index_parse(ix, root, full);
    return s;
}

/* Before a load reads a shard (ix parsed): with the marker's manifest m of
 * version 2, the index's size and hash, its run id and step the marker's,
 * its files exactly those the marker lists besides itself; ix is then
 * verified as it is read (open_file, verify_boxes). Version 1: the note
 * (note: print it), nothing to verify. */
static cl_status index_against_marker(cl_shard_index *ix, const cl_json *state, const cl_ckpt_manifest *m, int note) {
    int opt_t, T, gb;
    uint64_t seed;
    cl_status s = cl_ckpt_state_parse(state, ix->path, &ix->step, &opt_t, &T, &gb, &seed);
    if (!s) s = cl_ckpt_run_id_parse(state, ix->path, ix->run_id);
    if (s || m->version < 2) {
        if (!s && note) cl_ckpt_note_unhashed(ix->dir);
        return s;
    }
    if (ix->version < 2)
        return cl_error(CL_ERR_FORMAT, "%s: format version %d records no box hashes, but %s is of version %d", ix->path, ix->version,
                        CL_CKPT_MARKER, m->version);
    CL_TRY(cl_ckpt_check_file(ix->dir, m, CL_CKPT_INDEX, 1));
    char step[16];
    snprintf(step, sizeof step, "%d", ix->step);
    CL_TRY(cl_ckpt_check_origin(ix->path, CL_CKPT_MARKER, ix->run_id, step, m->run_id, m->step));
    for (int f = 0; f < ix->nfiles; f++)
        if (!cl_ckpt_manifest_find(m, ix->fname[f]))
            return cl_error(CL_ERR_FORMAT, "%s/%s: listed in the index but not in %s", ix->dir, ix->fname[f], CL_CKPT_MARKER);
    int extra;
    CL_TRY(cl_ckpt_run_config_check(ix->dir, m, &extra));
    if (m->n != ix->nfiles + 1 + extra)
        return cl_error(CL_ERR_FORMAT, "%s/%s lists %d files, the index %d shards%s", ix->dir, CL_CKPT_MARKER, m->n, ix->nfiles,
                        extra ? " and run_config.json" : "");
    ix->m = m;
    return CL_OK;
}

/* The load's figures (CLEAVE_SHARD_READ_BYTES, for tests) and times (CLEAVE_VERIFY_TIME, for the benchmark). */
static void report_load(const cl_shard_index *ix, int rank, double t0, double tv) {
    if (getenv("CLEAVE_SHARD_READ_BYTES"))
        fprintf(stderr, "shard read: rank %d read %" PRId64 " bytes (%" PRId64 " of headers, %" PRId64 " only to verify; %" PRId64 " hashed)\n",
                rank, ix->bytes_read, ix->bytes_head, ix->bytes_verify, ix->bytes_hashed);
    if (getenv("CLEAVE_VERIFY_TIME"))
        fprintf(stderr, "checkpoint load: rank %d: %.3f s, of which verification %.3f s\n", rank, cl_now() - t0, tv);
}

cl_status cl_shard_read_config(const char *dir, cl_model_config *c, char *tok, size_t tn) {
    cl_shard_index ix;
    memset(&ix, 0, sizeof ix);
    cl_json_doc *doc = NULL;
    const cl_json *state;
    cl_status s = open_index(&ix, dir, NULL, c, tok, tn, &state, &doc);
    cl_json_free(doc);
    cl_shard_index_free(&ix);
    return s;
}

cl_status cl_shard_load_model(const char *dir, cl_model *m) {
    double t0 = cl_now();
    cl_shard_index ix;
    memset(&ix, 0, sizeof ix);
    cl_json_doc *doc = NULL;
    const cl_json *state;
    cl_model_config c;
    char tok[64];
    const cl_model_desc *d = cl_model_desc_of(m);
    cl_ckpt_manifest mf;
    cl_status s = cl_ckpt_manifest_load(dir, &mf);
    if (!s) s = open_index(&ix, dir, d, &c, tok, sizeof tok, &state, &doc);
    if (!s) s = index_against_marker(&ix, state, &mf, 1);
    cl_json_free(doc);
    /* every shard's size, run id and step, the ones this load reads nothing of (moments only) too */
    for (int f = 0; f < ix.nfiles && !s && ix.m; f++) s = open_file(&ix, f);
    for (int i = 0; i < d->nparams && !s; i++) {
        if (!cl_model_holds_param(m, i)) continue;
        cl_device_fill(cl_model_device(m), cl_model_param(m, i), 0, (size_t)d->params[i].numel * sizeof(float));
        s = fill(&ix, i, CL_K_PARAM, &d->params[i], 0, 0, d->params[i].numel, cl_model_param(m, i), 0);
    }
    if (!s) s = flush_read(&ix);
    double tv = cl_now();
    if (!s && ix.m) s = verify_boxes(&ix, NULL, 1 << CL_K_PARAM); /* the parameters: what this load reads */
    tv = cl_now() - tv;
    for (int i = 0; i < d->nparams && !s; i++)
        if (cl_model_holds_param(m, i)) s = check_finite(&ix, d->params[i].name, CL_K_PARAM, cl_model_param(m, i), d->params[i].numel);
    if (!s) report_load(&ix, 0, t0, tv);
    cl_shard_index_free(&ix);
    cl_ckpt_manifest_free(&mf);
    return s;
}

/* Every rank: the index checked, its boxes read; then (collective) the
 * verification; then the values checked and the optimizer step set. */
cl_status cl_shard_resume(cl_trainer *t, const char *dir) {
    double t0 = cl_now(), tv = 0;
    cl_comm *world = world_of(t);
    int me = world ? cl_comm_rank(world) : 0;
    cl_shard_index ix;
    memset(&ix, 0, sizeof ix);
    cl_json_doc *doc = NULL;
    const cl_json *state;
    cl_model_config c;
    char tok[64];
    int step = 0, opt_t = 0, T = 0, gb = 0;
    uint64_t seed = 0;
    char run_id[CL_RUN_ID_LEN + 1] = "";
    cl_ckpt_manifest mf;
    cl_model *ms[CL_PP_MAX_CHUNKS];
    cl_optimizer *os[CL_PP_MAX_CHUNKS];
    float *own[CL_PP_MAX_CHUNKS] = {0};
    int nc = cl_pp_chunks(t, ms, os);
    cl_status s = cl_ckpt_manifest_load(dir, &mf);
    if (!s) s = open_index(&ix, dir, NULL, &c, tok, sizeof tok, &state, &doc);
    if (!s) s = cl_ckpt_state_parse(state, ix.path, &step, &opt_t, &T, &gb, &seed);
    if (!s) s = cl_ckpt_run_id_parse(state, ix.path, run_id);
    if (!s) s = cl_ckpt_check_match(t, dir, &c, tok, T, gb, seed);
    if (!s) s = cl_shard_index_parse(&ix, cl_json_root(doc), t->full);
    if (!s) s = index_against_marker(&ix, state, &mf, me == 0);
    cl_json_free(doc);
    for (int k = 0; k < nc && !s; k++) s = load_reads(t, &ix, ms[k], os[k], &own[k]);
    s = agree(world, s);
    /* every rank or none: the verification is collective */
    if (!s && ix.m) {
        tv = cl_now();
        s = agree(world, verify_boxes(&ix, world, 1 << CL_K_PARAM | 1 << CL_K_AVG | 1 << CL_K_AVG_SQ));
        tv = cl_now() - tv;
    }
    for (int k = 0; k < nc && !s; k++) {
        s = load_finish(&ix, ms[k], os[k], own[k]);
        os[k]->t = opt_t;
    }
    for (int k = 0; k < nc; k++) free(own[k]);
    if (!s) report_load(&ix, me, t0, tv);
    cl_shard_index_free(&ix);
    cl_ckpt_manifest_free(&mf);
    s = agree(world, s);
    if (!s) t->step = step;
    if (!s && run_id[0]) memcpy(t->run_id, run_id, sizeof t->run_id); /* the lineage goes on */
    return s;
}

cl_status cl_shard_verify(const char *dir, const cl_ckpt_manifest *m, char *summary, size_t n) {
    cl_shard_index ix;
    memset(&ix, 0, sizeof ix);
    cl_json_doc *doc = NULL;
    const cl_json *state;
    cl_model_config c;
    char tok[64];
    cl_model_desc *full = NULL;
    cl_status s = open_index(&ix, dir, NULL, &c, tok, sizeof tok, &state, &doc);
    if (!s && (s = cl_model_describe(&c, 0, &full))) s = cl_error_context(s, "%s", ix.path);
    if (!s) s = cl_shard_index_parse(&ix, cl_json_root(doc), full);
    if (!s) s = index_against_marker(&ix, state, m, 0);
    cl_json_free(doc);
    /* each shard's size, run id and step; every box's hash (nothing in memory: each block read); then
     * each whole file (its header too) */
    for (int f = 0; f < ix.nfiles && !s; f++) s = open_file(&ix, f);
    if (!s) s = verify_boxes(&ix, NULL, 1 << CL_K_PARAM | 1 << CL_K_AVG | 1 << CL_K_AVG_SQ);
    int64_t total = 0;
    for (int f = 0; f < ix.nfiles && !s; f++) {
        s = cl_ckpt_check_file(dir, m, ix.fname[f], 1);
        total += cl_ckpt_manifest_find(m, ix.fname[f])->bytes;
    }
    int nb = 0;
    for (int i = 0; i < ix.nt * CL_NKINDS; i++) nb += ix.nbx[i];
    if (!s)
        snprintf(summary, n, "%s: intact: sharded checkpoint of step %d, run %s: %d shards (%" PRId64 " bytes), %d boxes, every hash matches",
                 dir, ix.step, ix.run_id, ix.nfiles, total, nb);
    cl_shard_index_free(&ix);
    cl_model_desc_free(full);
    return s;
}
