/* cleave against PyTorch: logits, loss, every parameter gradient and the
 * losses of 10 AdamW steps, for gpt2-tiny and the CNN, against fixtures that
 * scripts/torch_reference.py computes with an independent nn-module model.
 *
 *   test_torch                      compare against tests/fixtures/<model>/
 *   test_torch --write-input DIR    write DIR/<model>/input.safetensors (the
 *                                   initial weights, batch and hyperparameters
 *                                   the reference reads); scripts/check_fixtures.sh
 *                                   then recomputes reference.safetensors. */
#include "cleave/kernels.h"
#include "cleave/safetensors.h"
#include "cleave/train.h"
#include "common/check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define STEPS 10
static const cl_adamw_opts OPTS = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
static const float LR = 3e-3f;

typedef struct {
    const char *name;   /* fixture directory */
    const char *preset;
    int B, T;
} fixture;

static const fixture FIXTURES[] = {{"gpt2-tiny", "gpt2-tiny", 2, 32}, {"cnn", "cnn", 16, 1}};

typedef struct {
    cl_model_desc *d;
    cl_device *dev;
    cl_model *m;
    cl_acts a;
    int32_t *tokens, *targets;
    float *x;
    cl_microbatch mb;
} setup;

static cl_status make_setup(const fixture *f, setup *s) {
    memset(s, 0, sizeof *s);
    cl_model_config c;
    CL_TRY(cl_model_preset(f->preset, &c));
    CL_TRY(cl_model_describe(&c, f->T, &s->d));
    CL_TRY(cl_device_create_cpu(&s->dev, 0, 0));
    CL_TRY(cl_model_create(&s->m, s->d, s->dev, f->B));
    CL_TRY(cl_acts_create(s->m, f->B, &s->a));
    int npos = f->B * f->T;
    s->tokens = calloc((size_t)npos, sizeof(int32_t));
    s->targets = calloc((size_t)npos, sizeof(int32_t));
    s->x = calloc((size_t)f->B * 64, sizeof(float));
    s->mb = (cl_microbatch){.B = f->B, .T = c.kind == CL_MODEL_GPT ? f->T : 1, .targets = s->targets,
                            .dloss = 1.0f / (float)npos};
    if (c.kind == CL_MODEL_GPT) s->mb.tokens = s->tokens;
    else s->mb.x = s->x;
    return CL_OK;
}

static void free_setup(setup *s) {
    if (s->m) {
        cl_acts_destroy(s->m, &s->a);
        cl_model_destroy(s->m);
    }
    cl_device_destroy(s->dev);
    cl_model_desc_free(s->d);
    free(s->tokens);
    free(s->targets);
    free(s->x);
}

static int write_input(const char *root) {
    for (size_t k = 0; k < sizeof FIXTURES / sizeof FIXTURES[0]; k++) {
        const fixture *f = &FIXTURES[k];
        setup s;
        cl_status st = make_setup(f, &s);
        if (st) {
            fprintf(stderr, "%s\n", cl_last_error());
            return 1;
        }
        cl_model_init(s.m, 42);
        cl_rng r;
        cl_rng_seed(&r, 7);
        const cl_model_config *c = &s.d->cfg;
        int npos = f->B * f->T;
        if (c->kind == CL_MODEL_GPT) {
            for (int i = 0; i < npos; i++) {
                s.tokens[i] = (int32_t)(cl_rng_u64(&r) % (uint64_t)c->vocab);
                s.targets[i] = (int32_t)(cl_rng_u64(&r) % (uint64_t)c->vocab);
            }
        } else {
            for (int i = 0; i < f->B * 64; i++) s.x[i] = cl_rng_uniform(&r);
            for (int i = 0; i < f->B; i++) s.targets[i] = (int32_t)(cl_rng_u64(&r) % 10);
        }
        int n = s.d->nparams;
        cl_st_item *items = calloc((size_t)n + 2, sizeof *items);
        for (int i = 0; i < n; i++) {
            items[i].name = s.d->params[i].name;
            items[i].t = cl_tensor_make(cl_model_param(s.m, i), CL_F32, s.d->params[i].ndim, s.d->params[i].shape);
        }
        char config[512], adamw[256];
        if (c->kind == CL_MODEL_GPT) {
            int64_t sh[2] = {f->B, f->T};
            items[n] = (cl_st_item){"tokens", cl_tensor_make(s.tokens, CL_I32, 2, sh)};
            items[n + 1] = (cl_st_item){"targets", cl_tensor_make(s.targets, CL_I32, 2, sh)};
            snprintf(config, sizeof config,
                     "{\"n_layer\": %d, \"n_head\": %d, \"n_embd\": %d, \"n_positions\": %d, \"vocab_size\": %d}", c->layers,
                     c->heads, c->channels, c->seq_len, c->vocab);
        } else {
            int64_t xs[4] = {f->B, c->in_channels, c->height, c->width}, ls[1] = {f->B};
            items[n] = (cl_st_item){"x", cl_tensor_make(s.x, CL_F32, 4, xs)};
            items[n + 1] = (cl_st_item){"labels", cl_tensor_make(s.targets, CL_I32, 1, ls)};
            snprintf(config, sizeof config,
                     "{\"in_channels\": %d, \"height\": %d, \"width\": %d, \"conv_channels\": %d, \"conv_kernel\": %d, "
                     "\"conv_stride\": %d, \"conv_pad\": %d, \"pool\": %d, \"hidden\": %d, \"hidden2\": %d, \"classes\": %d}",
                     c->in_channels, c->height, c->width, c->conv_channels, c->conv_kernel, c->conv_stride, c->conv_pad, c->pool,
                     c->hidden, c->hidden2, c->classes);
        }
        snprintf(adamw, sizeof adamw,
                 "{\"lr\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, \"eps\": %.9g, \"weight_decay\": %.9g, \"grad_clip\": %.9g, "
                 "\"steps\": %d}",
                 LR, OPTS.beta1, OPTS.beta2, OPTS.eps, OPTS.weight_decay, OPTS.grad_clip, STEPS);
        cl_st_meta meta[] = {{"model", c->kind == CL_MODEL_GPT ? "gpt" : "cnn"}, {"config", config}, {"adamw", adamw}};
        char dir[1024], path[1100];
        snprintf(dir, sizeof dir, "%s/%s", root, f->name);
        if (mkdir(dir, 0755) && errno != EEXIST) {
            perror(dir);
            return 1;
        }
        snprintf(path, sizeof path, "%s/input.safetensors", dir);
        st = cl_st_write(path, items, n + 2, meta, 3);
        free(items);
        free_setup(&s);
        if (st) {
            fprintf(stderr, "%s\n", cl_last_error());
            return 1;
        }
        printf("wrote %s\n", path);
    }
    return 0;
}

static const float *ref_tensor(cl_st_file *ref, const char *name, int64_t numel, cl_dtype dt) {
    const cl_st_entry *e = cl_st_find(ref, name);
    if (!e) return NULL;
    int64_t n = 1;
    for (int i = 0; i < e->ndim; i++) n *= e->shape[i];
    if (n != numel || e->dtype != dt) return NULL;
    return e->data;
}

static void compare_fixture(const fixture *f) {
    char path[512];
    setup s;
    CHECK_OK(make_setup(f, &s));
    if (cl_test_failures) return;
    cl_st_file *in = NULL, *ref = NULL;
    snprintf(path, sizeof path, "tests/fixtures/%s/input.safetensors", f->name);
    CHECK_OK(cl_st_open(&in, path));
    snprintf(path, sizeof path, "tests/fixtures/%s/reference.safetensors", f->name);
    CHECK_OK(cl_st_open(&ref, path));
    if (!in || !ref) goto done;
    const cl_model_desc *d = s.d;
    for (int i = 0; i < d->nparams; i++)
        CHECK_OK(cl_st_read_tensor(in, d->params[i].name, CL_F32, d->params[i].ndim, d->params[i].shape, cl_model_param(s.m, i)));
    int64_t sh[2] = {f->B, f->T};
    if (d->cfg.kind == CL_MODEL_GPT) {
        CHECK_OK(cl_st_read_tensor(in, "tokens", CL_I32, 2, sh, s.tokens));
        CHECK_OK(cl_st_read_tensor(in, "targets", CL_I32, 2, sh, s.targets));
    } else {
        int64_t xs[4] = {f->B, 1, 8, 8};
        CHECK_OK(cl_st_read_tensor(in, "x", CL_F32, 4, xs, s.x));
        CHECK_OK(cl_st_read_tensor(in, "labels", CL_I32, 1, sh, s.targets));
    }
    int last = d->nunits - 1;
    int64_t nlogits = d->cfg.kind == CL_MODEL_GPT ? (int64_t)f->B * f->T * d->cfg.vocab : (int64_t)f->B * d->cfg.classes;
    double loss_sum;
    cl_model_zero_grads(s.m);
    CHECK_OK(cl_model_forward_backward(s.m, &s.mb, &s.a, &loss_sum, 0));
    const float *rl = ref_tensor(ref, "logits", nlogits, CL_F32);
    CHECK(rl != NULL, "%s: reference logits missing or of the wrong size", f->name);
    if (rl) {
        long w;
        double e = cl_test_rel_err(cl_acts_logits(s.m, &s.a, last, &s.mb), rl, (long)nlogits, &w);
        printf("%s: logits max rel err %.3g\n", f->name, e);
        CHECK(e <= 1e-5, "%s logits: rel err %.3g at %ld", f->name, e, w);
    }
    const cl_st_entry *le = cl_st_find(ref, "loss");
    double loss = loss_sum / (double)(f->B * f->T);
    CHECK(le && le->dtype == CL_F64, "%s: reference loss missing", f->name);
    if (le && le->dtype == CL_F64) {
        double rlv;
        memcpy(&rlv, le->data, sizeof rlv);
        printf("%s: loss %.9f, torch %.9f\n", f->name, loss, rlv);
        CHECK(fabs(loss - rlv) <= 1e-5 * fabs(rlv), "%s loss %.9g vs torch %.9g", f->name, loss, rlv);
    }
    cl_model_zero_grads(s.m);
    CHECK_OK(cl_model_forward_backward(s.m, &s.mb, &s.a, &loss_sum, 1));
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < d->nparams; i++) {
        char name[96];
        snprintf(name, sizeof name, "grad.%s", d->params[i].name);
        const float *rg = ref_tensor(ref, name, d->params[i].numel, CL_F32);
        CHECK(rg != NULL, "%s: %s missing", f->name, name);
        if (!rg) continue;
        long w;
        double e = cl_test_rel_err(cl_model_grad(s.m, i), rg, (long)d->params[i].numel, &w);
        if (e > worst) {
            worst = e;
            worst_name = d->params[i].name;
        }
        CHECK(e <= 1e-5, "%s %s: rel err %.3g at %ld (%g vs %g)", f->name, name, e, w, cl_model_grad(s.m, i)[w], rg[w]);
    }
    printf("%s: gradients max rel err %.3g (%s)\n", f->name, worst, worst_name);
    /* 10 AdamW steps on the same batch */
    const cl_st_entry *lse = cl_st_find(ref, "losses");
    CHECK(lse && lse->dtype == CL_F64 && lse->ndim == 1 && lse->shape[0] == STEPS, "%s: reference losses missing", f->name);
    if (lse && lse->dtype == CL_F64 && lse->shape[0] == STEPS) {
        cl_optimizer opt;
        CHECK_OK(cl_optimizer_create(&opt, s.m, &OPTS));
        double worst_l = 0;
        for (int k = 0; k < STEPS; k++) {
            cl_model_zero_grads(s.m);
            CHECK_OK(cl_model_forward_backward(s.m, &s.mb, &s.a, &loss_sum, 1));
            double l = loss_sum / (double)(f->B * f->T), r;
            memcpy(&r, (const char *)lse->data + 8 * k, 8);
            double e = fabs(l - r) / fabs(r);
            if (e > worst_l) worst_l = e;
            CHECK(e <= 1e-5, "%s step %d: loss %.9g vs torch %.9g (rel %.3g)", f->name, k + 1, l, r, e);
            cl_grad_clip(s.m, cl_grad_norm(s.m), OPTS.grad_clip);
            cl_optimizer_step(&opt, s.m, LR);
        }
        printf("%s: %d AdamW steps, loss max rel err %.3g\n", f->name, STEPS, worst_l);
        cl_optimizer_destroy(&opt, s.m);
    }
done:
    cl_st_close(in);
    cl_st_close(ref);
    free_setup(&s);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-input")) return write_input(argv[2]);
    for (size_t k = 0; k < sizeof FIXTURES / sizeof FIXTURES[0]; k++) compare_fixture(&FIXTURES[k]);
    return cl_test_report("test_torch");
}
