/* cleave's bf16 mixed precision against PyTorch autocast (tests/bf16_torch.py):
 * the loss and every parameter gradient of one forward and backward of
 * gpt2-tiny on one batch, at fp32 or bf16.
 *
 *   bf16_torch_driver --write-input IN          gpt2-tiny initialised as training
 *       initialises it: its weights under their Hugging Face names (linear
 *       weights [in, out], as cleave stores them) and the batch (tokens and the
 *       next tokens as targets, as floats)
 *   bf16_torch_driver --grads fp32|bf16 IN OUT  the same model and batch read back
 *       from IN, one forward and backward in that format: "loss" (F64, the
 *       mean over the batch's tokens) and "grad.<name>" (F32) into OUT.
 * tests/cli_bf16.sh runs it around the Python reference, which compares. */
#include "cleave/safetensors.h"
#include "cleave/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 32 };

typedef struct {
    cl_model_desc *d;
    cl_device *dev;
    cl_model *m;
    cl_acts a;
    float tok_f[B * T], tgt_f[B * T];
    int32_t tokens[B * T], targets[B * T];
} setup;

static cl_status make_setup(cl_dtype dt, setup *s) {
    memset(s, 0, sizeof *s);
    cl_model_config c;
    CL_TRY(cl_model_preset("gpt2-tiny", &c));
    cl_tp_layout tl = {1, 0, 0, 1, dt, 1};
    CL_TRY(cl_model_describe_tp(&c, T, &tl, &s->d));
    CL_TRY(cl_device_create_cpu(&s->dev, 0, 0));
    CL_TRY(cl_model_create(&s->m, s->d, s->dev, B));
    return cl_acts_create(s->m, B, &s->a);
}

static void free_setup(setup *s) {
    if (s->m) {
        cl_acts_destroy(s->m, &s->a);
        cl_model_destroy(s->m);
    }
    cl_device_destroy(s->dev);
    cl_model_desc_free(s->d);
}

static cl_status write_input(const char *path) {
    setup s;
    cl_status st = make_setup(CL_F32, &s);
    if (!st) {
        cl_model_init(s.m, 42);
        cl_rng r;
        cl_rng_seed(&r, 7);
        for (int b = 0; b < B; b++) { /* a window of T + 1 tokens: the targets are the next tokens */
            int32_t w[T + 1];
            for (int t = 0; t <= T; t++) w[t] = (int32_t)(cl_rng_u64(&r) % (uint64_t)s.d->cfg.vocab);
            for (int t = 0; t < T; t++) s.tok_f[b * T + t] = (float)w[t], s.tgt_f[b * T + t] = (float)w[t + 1];
        }
        int n = s.d->nparams;
        cl_st_item *items = calloc((size_t)n + 2, sizeof *items);
        if (!items) st = cl_error(CL_ERR_OOM, "items");
        for (int i = 0; !st && i < n; i++) {
            items[i].name = s.d->params[i].name;
            items[i].t = cl_tensor_make(cl_model_param(s.m, i), CL_F32, s.d->params[i].ndim, s.d->params[i].shape);
        }
        int64_t sh[2] = {B, T};
        if (!st) {
            items[n] = (cl_st_item){"tokens", cl_tensor_make(s.tok_f, CL_F32, 2, sh)};
            items[n + 1] = (cl_st_item){"targets", cl_tensor_make(s.tgt_f, CL_F32, 2, sh)};
            char config[256];
            snprintf(config, sizeof config, "{\"layers\": %d, \"channels\": %d, \"heads\": %d, \"vocab\": %d}", s.d->cfg.layers,
                     s.d->cfg.channels, s.d->cfg.heads, s.d->cfg.vocab);
            cl_st_meta meta[] = {{"config", config}};
            st = cl_st_write(path, items, n + 2, meta, 1);
        }
        free(items);
    }
    free_setup(&s);
    return st;
}

static cl_status grads(cl_dtype dt, const char *inpath, const char *outpath) {
    setup s;
    cl_st_file *in = NULL;
    cl_status st = make_setup(dt, &s);
    if (!st) st = cl_st_open(&in, inpath);
    const cl_model_desc *d = s.d;
    for (int i = 0; !st && i < d->nparams; i++)
        st = cl_st_read_tensor(in, d->params[i].name, CL_F32, d->params[i].ndim, d->params[i].shape, cl_model_param(s.m, i));
    int64_t sh[2] = {B, T};
    if (!st) st = cl_st_read_tensor(in, "tokens", CL_F32, 2, sh, s.tok_f);
    if (!st) st = cl_st_read_tensor(in, "targets", CL_F32, 2, sh, s.tgt_f);
    for (int i = 0; i < B * T; i++) s.tokens[i] = (int32_t)s.tok_f[i], s.targets[i] = (int32_t)s.tgt_f[i];
    cl_microbatch mb = {.B = B, .T = T, .tokens = s.tokens, .targets = s.targets, .dloss = 1.0f / (float)(B * T)};
    double loss_sum = 0;
    if (!st) st = cl_model_refresh_low(s.m); /* bf16: the weights' BF16 copy from the master just read */
    if (!st) {
        cl_model_zero_grads(s.m);
        st = cl_model_forward_backward(s.m, &mb, &s.a, &loss_sum, 1);
    }
    cl_st_item *items = st ? NULL : calloc((size_t)d->nparams + 1, sizeof *items);
    char (*names)[80] = st ? NULL : calloc((size_t)d->nparams, sizeof *names);
    if (!st && (!items || !names)) st = cl_error(CL_ERR_OOM, "items");
    double loss = loss_sum / (B * T);
    int64_t one = 1;
    for (int i = 0; !st && i < d->nparams; i++) {
        snprintf(names[i], sizeof names[i], "grad.%s", d->params[i].name);
        items[i] = (cl_st_item){names[i], cl_tensor_make(cl_model_grad(s.m, i), CL_F32, d->params[i].ndim, d->params[i].shape)};
    }
    if (!st) {
        items[d->nparams] = (cl_st_item){"loss", cl_tensor_make(&loss, CL_F64, 1, &one)};
        st = cl_st_write(outpath, items, d->nparams + 1, NULL, 0);
    }
    if (!st) printf("%s: loss %.9f\n", dt == CL_BF16 ? "bf16" : "fp32", loss);
    free(items);
    free(names);
    cl_st_close(in);
    free_setup(&s);
    return st;
}

int main(int argc, char **argv) {
    cl_status st = CL_ERR_INVALID;
    if (argc == 3 && !strcmp(argv[1], "--write-input")) st = write_input(argv[2]);
    else if (argc == 5 && !strcmp(argv[1], "--grads") && (!strcmp(argv[2], "fp32") || !strcmp(argv[2], "bf16")))
        st = grads(!strcmp(argv[2], "bf16") ? CL_BF16 : CL_F32, argv[3], argv[4]);
    else {
        fprintf(stderr, "usage: bf16_torch_driver --write-input IN | --grads fp32|bf16 IN OUT\n");
        return 2;
    }
    if (st) fprintf(stderr, "bf16_torch_driver: %s\n", cl_last_error());
    return st ? 1 : 0;
}
