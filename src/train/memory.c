/* Every rank's device bytes before the run (see memory.h), and the shape of
 * a pipeline that both the executor (pipeline.c) and the prediction take:
 * schedule, micro-batch slots, send and receive buffers per stage, partition.
 *
 * Why one place: the executor allocates what cl_pp_shape_make says and the
 * predictor sums the same, so a prediction cannot drift from a run. */
#include "cleave/memory.h"
#include "cleave/pipeline.h"
#include "cleave/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/internal.h"

size_t cl_rank_extra_bytes(const cl_model_desc *d, const cl_train_config *cfg, const cl_pp_shape *sh, int pp_rank) {
    cl_pp_slot_bytes sb;
    cl_pp_slot_sizes(d, 0, d->nunits, cfg->micro_batch, 0, &sb);
    size_t n = 2 * sb.ids + sb.x; /* the trainer's micro-batch buffers */
    if (cfg->cp > 1) /* each chunk's context-parallel buffers (cl_model_set_cp) */
        n += (size_t)sh->v * sizeof(float) * (size_t)cl_cp_buffer_floats(d, cfg->micro_batch, cfg->cp, (cl_cp_comm)cfg->cp_comm);
    if (cl_pp_shape_has_tie_buf(d, sh, pp_rank)) n += (size_t)d->params[d->tied_wte].numel * sizeof(float);
    return n;
}

int cl_pp_shape_has_tie_buf(const cl_model_desc *d, const cl_pp_shape *sh, int pp_rank) {
    return d->tied_wte >= 0 && sh->p > 1 && (pp_rank == 0 || pp_rank == (sh->S - 1) % sh->p);
}

cl_pp_stage_opts cl_pp_shape_opts(const cl_pp_shape *sh, const cl_train_config *cfg, int s) {
    cl_pp_stage_opts o = {.B = cfg->micro_batch, .recompute = cfg->recompute, .live = sh->live[s],
                          .zb = sh->zb, .ngb = sh->ngb[s], .ndout = sh->ndout[s],
                          .zero = {cfg->zero, cl_zero_ranks(cfg, sh->dp * (cfg->cp > 1 ? cfg->cp : 1)), 0, cfg->bucket_bytes, cfg->zero3_prefetch, sh->zb,
                                   sh->dp * (cfg->cp > 1 ? cfg->cp : 1) > 1 ? cfg->grad_reduce : CL_F32}, /* shards over dp x cp */
                          .offload = cfg->offload_optimizer};
    return o;
}

/* What pipeline rank q allocates under the shape (its partition set), by
 * category, and the stages it holds: its chunks' stage figures plus what it
 * keeps beside them. */
static void shape_rank(const cl_model_desc *d, const cl_train_config *cfg, const cl_pp_shape *sh, int q, cl_mem_rank *m) {
    memset(m->bytes, 0, sizeof m->bytes);
    m->host = m->disk = 0;
    m->nstages = 0;
    for (int c = 0; c < sh->v && c < 64; c++) {
        int st = c * sh->p + q;
        if (sh->p > 1) m->stage[m->nstages++] = st; /* one device: the whole model, no stage to name */
        cl_pp_stage_opts o = cl_pp_shape_opts(sh, cfg, st);
        cl_pp_stage_cost cost = cl_pp_stage_predict(d, sh->part.u0[st], sh->part.u1[st], &o);
        for (int k = 0; k < CL_MEM_NCAT; k++) m->bytes[k] += cost.bytes[k];
        m->host += cost.host_bytes;
        m->disk += cost.disk_bytes;
    }
    m->bytes[CL_MEM_WORKSPACE] += cl_rank_extra_bytes(d, cfg, sh, q);
    m->total = 0;
    for (int k = 0; k < CL_MEM_NCAT; k++) m->total += m->bytes[k];
}

void cl_pp_shape_free(cl_pp_shape *sh) {
    cl_schedule_free(&sh->sched);
    memset(sh, 0, sizeof *sh);
}

cl_status cl_pp_shape_make(const cl_model_desc *d, const cl_train_config *cfg, int p, int dp, cl_pp_shape *sh) {
    memset(sh, 0, sizeof *sh);
    /* one rank is a one-stage 1F1B pipeline: F0 B0 F1 B1 ..., one micro-batch live */
    cl_sched_kind kind = p > 1 ? (cl_sched_kind)cfg->schedule : CL_SCHED_1F1B;
    sh->p = p;
    sh->dp = dp;
    sh->zb = kind == CL_SCHED_ZB_H1;
    sh->v = p == 1 ? 1 : cfg->virtual_stages ? cfg->virtual_stages : (kind == CL_SCHED_INTERLEAVED ? 2 : 1);
    if (sh->v > 1 && kind != CL_SCHED_INTERLEAVED)
        return cl_error(CL_ERR_INVALID, "--virtual-stages %d needs --schedule interleaved (the %s schedule runs one chunk per rank)",
                        sh->v, cl_sched_kind_name(kind));
    if (sh->v > CL_PP_MAX_CHUNKS) return cl_error(CL_ERR_INVALID, "--virtual-stages %d: at most %d", sh->v, CL_PP_MAX_CHUNKS);
    sh->m = cfg->global_batch / (cfg->micro_batch * dp);
    sh->S = p * sh->v;
    if (sh->S > CL_PP_MAX_STAGES) return cl_error(CL_ERR_INVALID, "%d stages: at most %d", sh->S, CL_PP_MAX_STAGES);
    CL_TRY(cl_schedule_make(kind, p, sh->m, sh->v, &sh->sched));
    int *free_at = malloc((size_t)(sh->v * sh->m) * sizeof *free_at);
    cl_status s = free_at ? CL_OK : cl_error(CL_ERR_OOM, "cannot size the send buffers");
    for (int r = 0; !s && r < p; r++) {
        int peak[CL_PP_MAX_CHUNKS];
        s = cl_schedule_grad_buffers(&sh->sched, r, free_at, peak);
        for (int c = 0; !s && c < sh->v; c++) {
            int st = c * p + r;
            sh->ngb[st] = peak[c];
            sh->live[st] = cl_schedule_chunk_live(&sh->sched, r, c);
            sh->ndout[st] = cl_schedule_chunk_douts(&sh->sched, r, c);
            if (sh->live[st] < 0 || sh->ndout[st] < 0) s = cl_error(CL_ERR_OOM, "cannot count live micro-batches");
        }
    }
    free(free_at);
    if (!s && p == 1) {
        sh->part.nstages = 1;
        sh->part.u0[0] = 0;
        sh->part.u1[0] = d->nunits;
    } else if (!s && cfg->pp_layout) s = cl_pp_partition_layout(d, cfg->pp_layout, sh->S, &sh->part);
    else if (!s) {
        /* The cap is per rank: a rank's chunks share it with what the rank
         * keeps beside them. With one chunk per rank the partition checks
         * exactly that; with several, the fastest cut is taken when every
         * rank's total fits, else the fastest whose stages each fit an equal
         * share of the cap. */
        cl_pp_stage_opts opts[CL_PP_MAX_STAGES];
        size_t extra[CL_PP_MAX_STAGES];
        for (int st = 0; st < sh->S; st++) {
            opts[st] = cl_pp_shape_opts(sh, cfg, st);
            extra[st] = (cl_rank_extra_bytes(d, cfg, sh, st % p) + (size_t)sh->v - 1) / (size_t)sh->v;
        }
        size_t cap = cfg->device_memory;
        if (sh->v > 1 && cap) {
            s = cl_pp_partition_balanced(d, sh->S, opts, NULL, 0, &sh->part);
            cl_mem_rank m;
            for (int q = 0; !s && q < p; q++) {
                shape_rank(d, cfg, sh, q, &m);
                if (m.total > cap) s = CL_ERR_OOM;
            }
            if (!s) return CL_OK;
            cl_error_clear();
            s = CL_OK;
        }
        if (sh->v > 1) cap /= (size_t)sh->v;
        s = cl_pp_partition_balanced(d, sh->S, opts, extra, cap, &sh->part);
    }
    if (s) cl_pp_shape_free(sh);
    return s;
}

int cl_memory_ranks(const cl_train_config *cfg, int dp, int pp) { return dp * (cfg->cp > 1 ? cfg->cp : 1) * (cfg->tp > 1 ? cfg->tp : 1) * pp; }

cl_status cl_memory_predict(const cl_train_config *cfg, int dp, int pp, cl_mem_rank *out) {
    int tp = cfg->tp > 1 ? cfg->tp : 1, cp = cfg->cp > 1 ? cfg->cp : 1;
    if (dp < 1 || pp < 1) return cl_error(CL_ERR_INVALID, "a mesh of dp %d x pp %d", dp, pp);
    cl_model_desc *d;
    /* every tensor-parallel rank holds a slice of the same sizes: rank 0's stands for all */
    CL_TRY(cl_train_describe(cfg, 0, &d));
    memset(out, 0, (size_t)(dp * cp * tp * pp) * sizeof *out);
    cl_pp_shape sh;
    cl_status s = cl_pp_shape_make(d, cfg, pp, dp, &sh);
    for (int q = 0; !s && q < pp; q++) {
        cl_mem_rank *first = &out[q * dp * cp * tp];
        shape_rank(d, cfg, &sh, q, first); /* every replica (and context rank) of a stage holds the same */
        for (int r = 0; r < dp * cp * tp; r++) {
            cl_mem_rank *m = &first[r];
            if (r) *m = *first;
            m->rank = q * dp * cp * tp + r;
            m->tp_rank = r % tp;
            m->dp_rank = r / (tp * cp);
            m->pp_rank = q;
        }
    }
    if (!s) cl_pp_shape_free(&sh);
    cl_model_desc_free(d);
    return s;
}

/* The largest rank of a prediction: its index, or -1 when every rank fits cap. */
static int worst_rank(const cl_mem_rank *r, int n, size_t cap, size_t *peak) {
    int w = 0;
    for (int i = 1; i < n; i++)
        if (r[i].total > r[w].total) w = i;
    *peak = r[w].total;
    return r[w].total > cap ? w : -1;
}

size_t cl_memory_host_need(const cl_mem_rank *r, int n, int ranks_here) {
    size_t sum = 0, big = 0, off = 0;
    for (int i = 0; i < n; i++) {
        size_t b = r[i].total + r[i].host;
        off |= r[i].host;
        sum += b;
        if (b > big) big = b;
    }
    if (!off) return 0;
    return ranks_here > 0 && ranks_here < n ? big * (size_t)ranks_here : sum;
}

/* The ranks of this run on this host: mpirun's local size, else all (threads). */
static int ranks_here(int n) {
    const char *l = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int k = l ? atoi(l) : 0;
    return k > 0 && k < n ? k : n;
}

/* The peak of the fullest rank under cfg, or 0 when it cannot be built or
 * its host need exceeds avail (0: not known). */
static size_t run_peak(const cl_train_config *cfg, int dp, int pp, cl_mem_rank *buf, size_t avail) {
    size_t peak = 0;
    if (cl_memory_predict(cfg, dp, pp, buf) != CL_OK) {
        cl_error_clear();
        return 0;
    }
    int n = cl_memory_ranks(cfg, dp, pp);
    worst_rank(buf, n, (size_t)-1, &peak);
    if (avail && cl_memory_host_need(buf, n, ranks_here(n)) > avail) return 0;
    return peak;
}

/* ZeRO 2 and 3's largest bucket below cfg's under which the run fits cap:
 * powers of two from 16 MiB down to CL_BUCKET_MIN, then 1 (a bucket a
 * unit); 0 when none fits. */
static size_t smaller_bucket(const cl_train_config *cfg, int dp, int pp, cl_mem_rank *buf, size_t avail, size_t cap) {
    cl_train_config c = *cfg;
    size_t from = cfg->bucket_bytes ? cfg->bucket_bytes : CL_BUCKET_DEFAULT;
    for (size_t b = (size_t)16 << 20; b >= 1; b = b > CL_BUCKET_MIN ? b / 2 : b == CL_BUCKET_MIN ? 1 : 0) {
        if (b >= from) continue;
        c.bucket_bytes = b;
        size_t pk = run_peak(&c, dp, pp, buf, avail);
        if (pk && pk <= cap) return b;
    }
    return 0;
}

cl_status cl_memory_check(const cl_train_config *cfg, int dp, int pp) {
    size_t cap = cfg->device_memory;
    if (!cap) return CL_OK;
    int n = cl_memory_ranks(cfg, dp, pp);
    cl_mem_rank *r = malloc((size_t)n * sizeof *r), *tmp = malloc((size_t)n * sizeof *tmp);
    if (!r || !tmp) {
        free(r);
        free(tmp);
        return cl_error(CL_ERR_OOM, "cannot allocate the memory prediction");
    }
    size_t peak;
    cl_status s = cl_memory_predict(cfg, dp, pp, r);
    if (s == CL_ERR_OOM && pp > 1) {
        /* no cut fits the cap: the figures of the cut it would take without one */
        cl_train_config free_cfg = *cfg;
        free_cfg.device_memory = 0;
        cl_error_clear();
        s = cl_memory_predict(&free_cfg, dp, pp, r);
    }
    int w = s ? -1 : worst_rank(r, n, cap, &peak);
    size_t avail = cl_host_memory_available(), need = s ? 0 : cl_memory_host_need(r, n, ranks_here(n));
    int host_over = avail && need > avail;
    if (s || (w < 0 && !host_over)) {
        free(r);
        free(tmp);
        return s;
    }
    /* the nearest configurations that fit the cap and the host: one change each */
    char fits[640] = "";
    size_t used = 0;
    int nfit = 0;
    static const char *const rc_names[] = {"none", "selective", "full"};
    /* k: -4 to -1, then each recompute mode, each halving of the micro-batch, each schedule, the layout */
    enum { NRC = CL_RECOMPUTE_FULL + 1, NHALF = 16, NSCHED = CL_SCHED_NKINDS };
    for (int k = -4; k < NRC + NHALF + NSCHED + 1 && nfit < 3; k++) {
        cl_train_config c = *cfg;
        char what[96];
        if (k == -4) { /* ZeRO 2 and 3: smaller gradient buckets, the largest that fits */
            if (dp < 2 || !cl_zero_shards_grads(cfg->zero) || !(c.bucket_bytes = smaller_bucket(cfg, dp, pp, tmp, avail, cap)))
                continue;
            if (c.bucket_bytes == 1) snprintf(what, sizeof what, "--bucket-size 1");
            else snprintf(what, sizeof what, "--bucket-size %zuKiB", c.bucket_bytes >> 10);
        } else if (k == -3) { /* ZeRO 3: fewer units gathered ahead, the most that fits */
            if (dp < 2 || !cl_zero_shards_params(cfg->zero)) continue;
            for (c.zero3_prefetch = cfg->zero3_prefetch - 1; c.zero3_prefetch >= 0; c.zero3_prefetch--) {
                size_t pk = run_peak(&c, dp, pp, tmp, avail);
                if (pk && pk <= cap) break;
            }
            if (c.zero3_prefetch < 0) continue;
            snprintf(what, sizeof what, "--zero3-prefetch %d", c.zero3_prefetch);
        } else if (k == -2) { /* the optimizer state sharded over the replicas */
            if (dp < 2 || cl_zero_shards_optim(cfg->zero)) continue;
            c.zero = CL_ZERO_OPTIM;
            snprintf(what, sizeof what, "--zero 1");
        } else if (k == -1) { /* the optimizer state in host memory */
            if (cfg->offload_optimizer) continue;
            c.offload_optimizer = CL_OFFLOAD_HOST;
            snprintf(what, sizeof what, "--offload-optimizer host");
        } else if (k < NRC) { /* recompute */
            if (k == cfg->recompute) continue;
            c.recompute = k;
            snprintf(what, sizeof what, "--recompute %s", rc_names[k]);
        } else if (k < NRC + NHALF) { /* a smaller micro-batch, same global batch */
            int b = cfg->micro_batch >> (k - NRC + 1);
            if (b < 1 || (cfg->global_batch % (b * dp))) continue;
            if (cfg->schedule == CL_SCHED_INTERLEAVED && pp > 1 && (cfg->global_batch / (b * dp)) % pp) continue;
            c.micro_batch = b;
            snprintf(what, sizeof what, "--micro-batch-size %d", b);
        } else if (k < NRC + NHALF + NSCHED) { /* another schedule */
            int sk = k - NRC - NHALF;
            if (pp < 2 || sk == cfg->schedule || sk == CL_SCHED_INTERLEAVED) continue;
            c.schedule = sk;
            c.virtual_stages = 0;
            snprintf(what, sizeof what, "--schedule %s", cl_sched_kind_name((cl_sched_kind)sk));
        } else { /* the balanced layout */
            if (!cfg->pp_layout || pp < 2) continue;
            c.pp_layout = NULL;
            snprintf(what, sizeof what, "the balanced layout (no --pp-layout)");
        }
        size_t pk = run_peak(&c, dp, pp, tmp, avail);
        if (!pk || pk > cap) continue;
        char b[32];
        used += (size_t)snprintf(fits + used, sizeof fits - used, "%s%s: peak %s", nfit ? "; " : "", what,
                                 cl_format_bytes(pk, b, sizeof b));
        if (used >= sizeof fits) used = sizeof fits - 1;
        nfit++;
    }
    char none[128];
    snprintf(none, sizeof none, "No one flag change fits at %d rank%s", n, n == 1 ? "" : "s");
    if (w < 0) { /* every rank fits its cap; the host does not hold them with the offloaded state */
        char needb[32], availb[32];
        s = cl_error(CL_ERR_OOM,
                     "--offload-optimizer %s: the %d rank%s on this host need%s %s (device bytes and the offloaded optimizer "
                     "state, both in the host's memory) but the host has %s available; refused before allocating. %s%s",
                     cfg->offload_optimizer == CL_OFFLOAD_DISK ? "disk" : "host", ranks_here(n), ranks_here(n) == 1 ? "" : "s",
                     ranks_here(n) == 1 ? "s" : "",
                     cl_format_bytes(need, needb, sizeof needb), cl_format_bytes(avail, availb, sizeof availb),
                     nfit ? "Fits with " : none, fits);
        free(r);
        free(tmp);
        return s;
    }
    int big = 0;
    for (int k = 1; k < CL_MEM_NCAT; k++)
        if (r[w].bytes[k] > r[w].bytes[big]) big = k;
    char stages[96] = "", capb[32], peakb[32], overb[32], catb[32];
    for (int i = 0, u = 0; i < r[w].nstages; i++)
        u += snprintf(stages + u, sizeof stages - (size_t)u, "%s%d", i ? "," : " (stage ", r[w].stage[i]);
    if (r[w].nstages) strncat(stages, ")", sizeof stages - strlen(stages) - 1);
    s = cl_error(CL_ERR_OOM,
                 "rank %d%s needs %s but %s %s (%s over; the most is %s, %s); refused before allocating. %s%s",
                 r[w].rank, stages, cl_format_bytes(peak, peakb, sizeof peakb),
                 cfg->device_memory_host ? "without --device-memory its share of the host's available memory is" : "the cap is",
                 cl_format_bytes(cap, capb, sizeof capb),
                 cl_format_bytes(peak - cap, overb, sizeof overb), cl_mem_cat_name(big),
                 cl_format_bytes(r[w].bytes[big], catb, sizeof catb), nfit ? "Fits with " : none, fits);
    free(r);
    free(tmp);
    return s;
}
