/* AdamW over a model's flat parameters, global-norm clipping, and the
 * warm-up + cosine learning-rate schedule (see train.h). */
#include "cleave/backend.h"
#include "cleave/train.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

float cl_lr_at(const cl_lr_schedule *s, int step) {
    if (s->warmup > 0 && step < s->warmup) return s->lr * (float)(step + 1) / (float)s->warmup;
    int decay_steps = s->steps - 1 - s->warmup;
    if (decay_steps <= 0 || step >= s->steps - 1) return step >= s->steps - 1 && decay_steps > 0 ? s->min_lr : s->lr;
    double frac = (double)(step - s->warmup) / (double)decay_steps;
    double coeff = 0.5 * (1.0 + cos(M_PI * frac));
    return (float)(s->min_lr + coeff * (s->lr - s->min_lr));
}

cl_status cl_optimizer_create(cl_optimizer *o, cl_model *m, const cl_adamw_opts *opts) {
    return cl_optimizer_create_on(o, m, cl_model_device(m), opts);
}

cl_status cl_optimizer_create_on(cl_optimizer *o, cl_model *m, cl_device *dev, const cl_adamw_opts *opts) {
    memset(o, 0, sizeof *o);
    o->o = *opts;
    o->dev = dev;
    o->fd = -1;
    o->nfloats = cl_model_sizes(m)->moments;
    CL_TRY(cl_device_alloc_f32(dev, CL_MEM_OPTIM, (size_t)o->nfloats, &o->m));
    cl_status s = cl_device_alloc_f32(dev, CL_MEM_OPTIM, (size_t)o->nfloats, &o->v);
    if (s) {
        cl_device_free(dev, o->m);
        o->m = NULL;
    }
    return s;
}

void cl_optimizer_destroy(cl_optimizer *o, cl_model *m) {
    cl_device *dev = o->dev ? o->dev : cl_model_device(m);
    cl_device_free(dev, o->m);
    cl_device_free(dev, o->v);
    o->m = o->v = NULL;
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 2; k++) {
            cl_device_free(dev, o->tile[b][k]);
            o->tile[b][k] = NULL;
        }
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
}

/* ---- offload to disk ------------------------------------------------------ */

int64_t cl_offload_tile_floats(int64_t moments) {
    int64_t t = moments < CL_OFFLOAD_TILE ? moments : CL_OFFLOAD_TILE;
    return t > 16 ? t : 16;
}

cl_status cl_optimizer_create_disk(cl_optimizer *o, cl_model *m, cl_device *dev, const char *dir, const cl_adamw_opts *opts) {
    memset(o, 0, sizeof *o);
    o->o = *opts;
    o->dev = dev;
    o->nfloats = cl_model_sizes(m)->moments;
    o->tile_floats = cl_offload_tile_floats(o->nfloats);
    char path[CL_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/cleave-adamw-XXXXXX", dir);
    o->fd = mkstemp(path);
    if (o->fd < 0) return cl_error(CL_ERR_IO, "--offload-dir %s: cannot create the optimizer state file: %s", dir, strerror(errno));
    unlink(path); /* the file lives as long as the descriptor */
    off_t bytes = (off_t)(2 * o->nfloats) * (off_t)sizeof(float);
    int e = posix_fallocate(o->fd, 0, bytes);
    if (e) {
        close(o->fd);
        o->fd = -1;
        return cl_error(CL_ERR_IO, "--offload-dir %s: cannot reserve %lld bytes for the optimizer state: %s", dir, (long long)bytes,
                        strerror(e));
    }
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 2; k++) CL_TRY(cl_device_alloc_f32(dev, CL_MEM_OPTIM, (size_t)o->tile_floats, &o->tile[b][k]));
    return CL_OK;
}

/* n floats at float offset off of the file (moment k) from or into buf, whole or an error. */
static cl_status file_io(int fd, int write, int k, int64_t nfloats, int64_t off, float *buf, int64_t n) {
    char *p = (char *)buf;
    size_t left = (size_t)n * sizeof(float);
    off_t at = (off_t)(k * nfloats + off) * (off_t)sizeof(float);
    while (left) {
        ssize_t r = write ? pwrite(fd, p, left, at) : pread(fd, p, left, at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return cl_error(CL_ERR_IO, "offloaded optimizer state: %s of %zu bytes at %lld failed: %s", write ? "writing" : "reading",
                            left, (long long)at, r < 0 ? strerror(errno) : "unexpected end of file");
        p += r;
        left -= (size_t)r;
        at += r;
    }
    return CL_OK;
}

static cl_status tile_io(const cl_optimizer *o, int write, int b, int64_t t0, int64_t n) {
    CL_TRY(file_io(o->fd, write, 0, o->nfloats, t0, o->tile[b][0], n));
    return file_io(o->fd, write, 1, o->nfloats, t0, o->tile[b][1], n);
}

cl_status cl_optimizer_get_moments(const cl_optimizer *o, float *m, float *v) {
    if (o->fd < 0) {
        cl_device_copy_to_host(o->dev, m, o->m, (size_t)o->nfloats * sizeof(float));
        cl_device_copy_to_host(o->dev, v, o->v, (size_t)o->nfloats * sizeof(float));
        return CL_OK;
    }
    CL_TRY(file_io(o->fd, 0, 0, o->nfloats, 0, m, o->nfloats));
    return file_io(o->fd, 0, 1, o->nfloats, 0, v, o->nfloats);
}

cl_status cl_optimizer_set_moments(cl_optimizer *o, const float *m, const float *v) {
    if (o->fd < 0) {
        cl_device_copy_from_host(o->dev, o->m, m, (size_t)o->nfloats * sizeof(float));
        cl_device_copy_from_host(o->dev, o->v, v, (size_t)o->nfloats * sizeof(float));
        return CL_OK;
    }
    CL_TRY(file_io(o->fd, 1, 0, o->nfloats, 0, (float *)m, o->nfloats));
    return file_io(o->fd, 1, 1, o->nfloats, 0, (float *)v, o->nfloats);
}

/* The I/O beside the update of tile k: write tile k-1 back, then read tile
 * k+1 into the same buffer (the other one from tile k's). */
typedef struct {
    const cl_optimizer *o;
    int b;
    int64_t w0, wn, r0, rn; /* wn, rn 0: nothing to do */
    cl_status s;
    char msg[512];
} tile_job;

static void *tile_worker(void *p) {
    tile_job *j = p;
    j->s = CL_OK;
    if (j->wn) j->s = tile_io(j->o, 1, j->b, j->w0, j->wn);
    if (!j->s && j->rn) j->s = tile_io(j->o, 0, j->b, j->r0, j->rn);
    if (j->s) snprintf(j->msg, sizeof j->msg, "%s", cl_last_error());
    return NULL;
}

void cl_grad_sumsq(const cl_model *m, double *per_param) {
    const cl_model_desc *d = cl_model_desc_of(m);
    const cl_kernels *k = cl_device_kernels(cl_model_device(m));
    for (int i = 0; i < d->nparams; i++)
        if (cl_model_owns_param(m, i)) per_param[i] = k->sumsq(cl_model_grad(m, i), d->params[i].numel);
}

double cl_grad_norm_of(const double *per_param, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += per_param[i];
    return sqrt(s);
}

double cl_grad_norm(const cl_model *m) {
    const cl_model_desc *d = cl_model_desc_of(m);
    const cl_kernels *k = cl_device_kernels(cl_model_device(m));
    double s = 0;
    for (int i = 0; i < d->nparams; i++)
        if (cl_model_owns_param(m, i)) s += k->sumsq(cl_model_grad(m, i), d->params[i].numel);
    return sqrt(s);
}

float cl_grad_clip_coef(double norm, float clip) {
    if (clip <= 0) return 1.0f;
    /* torch.nn.utils.clip_grad_norm_: coef = max_norm / (total_norm + 1e-6), clamped to 1 */
    float coef = (float)clip / (float)(norm + 1e-6);
    return coef >= 1.0f ? 1.0f : coef;
}

void cl_grad_clip(cl_model *m, double norm, float clip) {
    float coef = cl_grad_clip_coef(norm, clip);
    if (coef == 1.0f) return;
    const cl_model_desc *d = cl_model_desc_of(m);
    const cl_kernels *k = cl_device_kernels(cl_model_device(m));
    for (int i = 0; i < d->nparams; i++)
        if (cl_model_grad(m, i)) k->scale(cl_model_grad(m, i), coef, d->params[i].numel);
}

void cl_optimizer_step(cl_optimizer *o, cl_model *m, float lr) { cl_optimizer_step_scaled(o, m, lr, 1.0f); }

/* AdamW over the moment floats [t0, t0 + n) of this part (the shard's,
 * under ZeRO), its moments at mm, mv: each parameter's piece inside it. */
static void update_range(cl_optimizer *o, cl_model *m, float lr, float gscale, int64_t t0, int64_t n, float *mm, float *mv) {
    const cl_part_sizes *z = cl_model_sizes(m);
    const cl_model_desc *d = cl_model_desc_of(m);
    const cl_kernels *k = cl_device_kernels(cl_model_device(m));
    int64_t base = cl_zero_shards_optim(cl_model_zero(m)->stage) ? z->shard_lo : 0; /* moment float j is buffer float base + j */
    for (int i = 0; i < d->nparams; i++) {
        const cl_param_spec *ps = &d->params[i];
        int64_t loc = cl_model_param_offset(m, i);
        if (loc < 0) continue;
        int64_t a;
        int64_t len = cl_zero_overlap(loc, loc + ps->numel, base + t0, n, &a);
        if (!len) continue;
        int64_t mo = a - base - t0;
        float wd = ps->decay ? o->o.weight_decay : 0.0f;
        uint16_t *lo = cl_model_low_at(m, a); /* bf16: the BF16 copy written in the same pass (same bits as a refresh) */
        if (lo)
            k->adamw_update_bf16(cl_model_param_at(m, a), lo, cl_model_grad_at(m, a), mm + mo, mv + mo, len, lr, o->o.beta1,
                                 o->o.beta2, o->o.eps, wd, o->t, gscale);
        else
            k->adamw_update(cl_model_param_at(m, a), cl_model_grad_at(m, a), mm + mo, mv + mo, len, lr, o->o.beta1, o->o.beta2,
                            o->o.eps, wd, o->t, gscale);
    }
}

/* Under ZeRO stage 1 each parameter's part inside this rank's shard only,
 * its moments at their place in the shard: AdamW is elementwise, so the
 * shards' updates are the same bits as the whole buffer's. Offloaded to
 * disk, the same update tile by tile. */
void cl_optimizer_step_scaled(cl_optimizer *o, cl_model *m, float lr, float gscale) {
    cl_status s = cl_optimizer_step_checked(o, m, lr, gscale);
    CL_ASSERT(s == CL_OK); /* in memory nothing can fail; disk callers use the checked form */
}

cl_status cl_optimizer_step_checked(cl_optimizer *o, cl_model *m, float lr, float gscale) {
    o->t++;
    if (o->fd < 0) {
        update_range(o, m, lr, gscale, 0, o->nfloats, o->m, o->v);
        return CL_OK;
    }
    int64_t T = o->tile_floats, ntiles = (o->nfloats + T - 1) / T;
    CL_TRY(tile_io(o, 0, 0, 0, o->nfloats < T ? o->nfloats : T));
    for (int64_t k = 0; k < ntiles; k++) {
        int b = (int)(k & 1);
        int64_t t0 = k * T, n = o->nfloats - t0 < T ? o->nfloats - t0 : T;
        tile_job j = {.o = o, .b = b ^ 1};
        if (k > 0) j.w0 = t0 - T, j.wn = T;
        if (k + 1 < ntiles) j.r0 = t0 + T, j.rn = o->nfloats - (t0 + T) < T ? o->nfloats - (t0 + T) : T;
        pthread_t th;
        int threaded = (j.wn || j.rn) && pthread_create(&th, NULL, tile_worker, &j) == 0;
        if (!threaded) tile_worker(&j);
        update_range(o, m, lr, gscale, t0, n, o->tile[b][0], o->tile[b][1]);
        if (threaded) pthread_join(th, NULL);
        if (j.s) return cl_error(j.s, "%s", j.msg);
        if (k + 1 == ntiles) CL_TRY(tile_io(o, 1, b, t0, n));
    }
    return CL_OK;
}
