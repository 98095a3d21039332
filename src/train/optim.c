/* AdamW over a model's flat parameters, global-norm clipping, and the
 * warm-up + cosine learning-rate schedule (see train.h). */
#include "cleave/kernels.h"
#include "cleave/train.h"

#include <math.h>
#include <string.h>

float cl_lr_at(const cl_lr_schedule *s, int step) {
    if (s->warmup > 0 && step < s->warmup) return s->lr * (float)(step + 1) / (float)s->warmup;
    int decay_steps = s->steps - 1 - s->warmup;
    if (decay_steps <= 0 || step >= s->steps - 1) return step >= s->steps - 1 && decay_steps > 0 ? s->min_lr : s->lr;
    double frac = (double)(step - s->warmup) / (double)decay_steps;
    double coeff = 0.5 * (1.0 + cos(M_PI * frac));
    return (float)(s->min_lr + coeff * (s->lr - s->min_lr));
}

cl_status cl_optimizer_create(cl_optimizer *o, cl_model *m, const cl_adamw_opts *opts) {
    return cl_optimizer_create_on(o, m, m->dev, opts);
}

cl_status cl_optimizer_create_on(cl_optimizer *o, cl_model *m, cl_device *dev, const cl_adamw_opts *opts) {
    memset(o, 0, sizeof *o);
    o->o = *opts;
    o->dev = dev;
    CL_TRY(cl_device_alloc_f32(dev, CL_MEM_OPTIM, (size_t)m->sizes.moments, &o->m));
    cl_status s = cl_device_alloc_f32(dev, CL_MEM_OPTIM, (size_t)m->sizes.moments, &o->v);
    if (s) {
        cl_device_free(dev, o->m);
        o->m = NULL;
    }
    return s;
}

void cl_optimizer_destroy(cl_optimizer *o, cl_model *m) {
    cl_device *dev = o->dev ? o->dev : m->dev;
    cl_device_free(dev, o->m);
    cl_device_free(dev, o->v);
    o->m = o->v = NULL;
}

void cl_grad_sumsq(const cl_model *m, double *per_param) {
    for (int i = 0; i < m->desc->nparams; i++)
        if (cl_model_owns_param(m, i)) per_param[i] = cl_sumsq(m->g[i], m->desc->params[i].numel);
}

double cl_grad_norm_of(const double *per_param, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += per_param[i];
    return sqrt(s);
}

double cl_grad_norm(const cl_model *m) {
    double s = 0;
    for (int i = 0; i < m->desc->nparams; i++)
        if (cl_model_owns_param(m, i)) s += cl_sumsq(m->g[i], m->desc->params[i].numel);
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
    for (int i = 0; i < m->desc->nparams; i++)
        if (m->g[i]) cl_scale(m->g[i], coef, m->desc->params[i].numel);
}

void cl_optimizer_step(cl_optimizer *o, cl_model *m, float lr) { cl_optimizer_step_scaled(o, m, lr, 1.0f); }

/* Under ZeRO stage 1 each parameter's part inside this rank's shard only,
 * its moments at their place in the shard: AdamW is elementwise, so the
 * shards' updates are the same bits as the whole buffer's. */
void cl_optimizer_step_scaled(cl_optimizer *o, cl_model *m, float lr, float gscale) {
    o->t++;
    const cl_part_sizes *z = &m->sizes;
    for (int i = 0; i < m->desc->nparams; i++) {
        const cl_param_spec *ps = &m->desc->params[i];
        if (!m->p[i]) continue;
        int64_t a = m->loc[i], n = ps->numel, mo = a;
        if (m->zero.stage >= 1) {
            n = cl_zero_overlap(m->loc[i], m->loc[i] + ps->numel, z->shard_lo, z->shard, &a);
            mo = a - z->shard_lo;
            if (!n) continue;
        }
        cl_adamw_update(m->params + a, m->grads + a, o->m + mo, o->v + mo, n, lr, o->o.beta1, o->o.beta2, o->o.eps,
                        ps->decay ? o->o.weight_decay : 0.0f, o->t, gscale);
    }
}
