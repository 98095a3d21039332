/* cleave's Llama against an independent PyTorch Llama (tests/llama_torch.py,
 * written from Hugging Face's LlamaForCausalLM equations): the loss and
 * every parameter gradient of one forward and backward on one batch.
 *
 *   llama_torch_driver KV TIED --write-input IN   the llama-tiny shape with KV
 *       key-value heads and a tied (1) or own (0) lm_head, initialised as
 *       training initialises it: its weights under their Hugging Face names
 *       (linear weights [in, out], as cleave stores them), the batch (tokens
 *       and the next tokens as targets, as floats) and the configuration in
 *       the file's metadata
 *   llama_torch_driver KV TIED --torch IN REF     the same model and batch read
 *       back from IN; the loss (mean over the batch's tokens) and each
 *       gradient against REF's "loss" and "grad.<name>": max |a - b| over
 *       max |b| (the largest-magnitude norm) at most 1e-5 each.
 *   llama_torch_driver KV TIED --grads-bf16 IN OUT  the same model and batch,
 *       one forward and backward at --dtype bf16: "loss" (F64) and
 *       "grad.<name>" (F32) into OUT, which llama_torch.py --autocast compares.
 * tests/cli_llama_train.sh runs the first two around the Python reference,
 * tests/cli_bf16_llama.sh the last. */
#include "cleave/safetensors.h"
#include "cleave/train.h"
#include "common/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 32 };

typedef struct {
    cl_model_desc *d;
    cl_device *dev;
    cl_model *m;
    cl_acts a;
    float *tok_f, *tgt_f;
    int32_t tokens[B * T], targets[B * T];
    cl_microbatch mb;
} setup;

static cl_status make_setup(int kv, int tied, cl_dtype dt, setup *s) {
    memset(s, 0, sizeof *s);
    cl_model_config c;
    CL_TRY(cl_model_preset("llama-tiny", &c));
    c.kv_heads = kv == c.heads ? 0 : kv;
    c.untied = !tied;
    CL_TRY(cl_model_config_check(&c));
    cl_tp_layout tl = {1, 0, 0, 1, dt, 1};
    CL_TRY(cl_model_describe_tp(&c, T, &tl, &s->d));
    CL_TRY(cl_device_create_cpu(&s->dev, 0, 0));
    CL_TRY(cl_model_create(&s->m, s->d, s->dev, B));
    CL_TRY(cl_acts_create(s->m, B, &s->a));
    s->tok_f = calloc(B * T, sizeof(float));
    s->tgt_f = calloc(B * T, sizeof(float));
    if (!s->tok_f || !s->tgt_f) return cl_error(CL_ERR_OOM, "batch");
    s->mb = (cl_microbatch){.B = B, .T = T, .tokens = s->tokens, .targets = s->targets, .dloss = 1.0f / (float)(B * T)};
    return CL_OK;
}

static void free_setup(setup *s) {
    if (s->m) {
        cl_acts_destroy(s->m, &s->a);
        cl_model_destroy(s->m);
    }
    cl_device_destroy(s->dev);
    cl_model_desc_free(s->d);
    free(s->tok_f);
    free(s->tgt_f);
}

static int write_input(int kv, int tied, const char *path) {
    setup s;
    cl_status st = make_setup(kv, tied, CL_F32, &s);
    if (st) {
        fprintf(stderr, "%s\n", cl_last_error());
        return 1;
    }
    cl_model_init(s.m, 42);
    cl_rng r;
    cl_rng_seed(&r, 7);
    const cl_model_config *c = &s.d->cfg;
    for (int b = 0; b < B; b++) { /* a window of T + 1 tokens: the targets are the next tokens */
        int32_t w[T + 1];
        for (int t = 0; t <= T; t++) w[t] = (int32_t)(cl_rng_u64(&r) % (uint64_t)c->vocab);
        for (int t = 0; t < T; t++) s.tok_f[b * T + t] = (float)w[t], s.tgt_f[b * T + t] = (float)w[t + 1];
    }
    int n = s.d->nparams;
    cl_st_item *items = calloc((size_t)n + 2, sizeof *items);
    for (int i = 0; i < n; i++) {
        items[i].name = s.d->params[i].name;
        items[i].t = cl_tensor_make(cl_model_param(s.m, i), CL_F32, s.d->params[i].ndim, s.d->params[i].shape);
    }
    int64_t sh[2] = {B, T};
    items[n] = (cl_st_item){"tokens", cl_tensor_make(s.tok_f, CL_F32, 2, sh)};
    items[n + 1] = (cl_st_item){"targets", cl_tensor_make(s.tgt_f, CL_F32, 2, sh)};
    char config[512];
    snprintf(config, sizeof config,
             "{\"num_hidden_layers\": %d, \"hidden_size\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
             "\"intermediate_size\": %lld, \"vocab_size\": %d, \"rope_theta\": %.17g, \"rms_norm_eps\": %.17g, "
             "\"tie_word_embeddings\": %s}",
             c->layers, c->channels, c->heads, cl_model_kv_heads(c), (long long)cl_model_mlp_width(c), c->vocab, c->rope_theta,
             c->rms_norm_eps, c->untied ? "false" : "true");
    cl_st_meta meta[] = {{"config", config}};
    st = cl_st_write(path, items, n + 2, meta, 1);
    free(items);
    free_setup(&s);
    if (st) {
        fprintf(stderr, "%s\n", cl_last_error());
        return 1;
    }
    printf("wrote %s\n", path);
    return 0;
}

static const float *ref_tensor(cl_st_file *ref, const char *name, int64_t numel, cl_dtype dt) {
    const cl_st_entry *e = cl_st_find(ref, name);
    if (!e) return NULL;
    int64_t k = 1;
    for (int i = 0; i < e->ndim; i++) k *= e->shape[i];
    return k == numel && e->dtype == dt ? e->data : NULL;
}

/* The weights and batch of IN into s, then one forward and backward: the mean loss into *loss. */
static cl_status run_input(setup *s, const char *inpath, double *loss) {
    cl_st_file *in = NULL;
    cl_status st = cl_st_open(&in, inpath);
    const cl_model_desc *d = s->d;
    for (int i = 0; !st && i < d->nparams; i++)
        st = cl_st_read_tensor(in, d->params[i].name, CL_F32, d->params[i].ndim, d->params[i].shape, cl_model_param(s->m, i));
    int64_t sh[2] = {B, T};
    if (!st) st = cl_st_read_tensor(in, "tokens", CL_F32, 2, sh, s->tok_f);
    if (!st) st = cl_st_read_tensor(in, "targets", CL_F32, 2, sh, s->tgt_f);
    cl_st_close(in);
    for (int i = 0; i < B * T; i++) s->tokens[i] = (int32_t)s->tok_f[i], s->targets[i] = (int32_t)s->tgt_f[i];
    if (!st) st = cl_model_refresh_low(s->m); /* bf16: the weights' BF16 copy from the master just read */
    double loss_sum = 0;
    if (!st) {
        cl_model_zero_grads(s->m);
        st = cl_model_forward_backward(s->m, &s->mb, &s->a, &loss_sum, 1);
    }
    *loss = loss_sum / (B * T);
    return st;
}

static int grads_bf16(int kv, int tied, const char *inpath, const char *outpath) {
    setup s;
    double loss = 0;
    cl_status st = make_setup(kv, tied, CL_BF16, &s);
    if (!st) st = run_input(&s, inpath, &loss);
    const cl_model_desc *d = s.d;
    int n = st ? 0 : d->nparams;
    cl_st_item *items = calloc((size_t)n + 1, sizeof *items);
    char (*names)[128] = calloc((size_t)n + 1, sizeof *names);
    if (!st && (!items || !names)) st = cl_error(CL_ERR_OOM, "items");
    for (int i = 0; !st && i < n; i++) {
        snprintf(names[i], sizeof names[i], "grad.%s", d->params[i].name);
        items[i] = (cl_st_item){names[i], cl_tensor_make(cl_model_grad(s.m, i), CL_F32, d->params[i].ndim, d->params[i].shape)};
    }
    int64_t one = 1;
    if (!st) {
        items[n] = (cl_st_item){"loss", cl_tensor_make(&loss, CL_F64, 1, &one)};
        st = cl_st_write(outpath, items, n + 1, NULL, 0);
    }
    if (!st) printf("kv %d tied %d bf16: loss %.9f\n", kv, tied, loss);
    else fprintf(stderr, "llama_torch_driver: %s\n", cl_last_error());
    free(items);
    free(names);
    free_setup(&s);
    return st ? 1 : 0;
}

static void compare(int kv, int tied, const char *inpath, const char *refpath) {
    setup s;
    CHECK_OK(make_setup(kv, tied, CL_F32, &s));
    cl_st_file *ref = NULL;
    CHECK_OK(cl_st_open(&ref, refpath));
    if (cl_test_failures || !ref) goto done;
    const cl_model_desc *d = s.d;
    double loss;
    CHECK_OK(run_input(&s, inpath, &loss));
    const cl_st_entry *le = cl_st_find(ref, "loss");
    CHECK(le && le->dtype == CL_F64, "reference loss missing");
    if (le && le->dtype == CL_F64) {
        double rl;
        memcpy(&rl, le->data, sizeof rl);
        printf("kv %d tied %d: loss %.9f, torch %.9f (rel %.3g)\n", kv, tied, loss, rl, fabs(loss - rl) / fabs(rl));
        CHECK(fabs(loss - rl) <= 1e-5 * fabs(rl), "loss %.9g vs torch %.9g", loss, rl);
    }
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < d->nparams; i++) {
        char name[128];
        snprintf(name, sizeof name, "grad.%s", d->params[i].name);
        const float *rg = ref_tensor(ref, name, d->params[i].numel, CL_F32);
        CHECK(rg != NULL, "%s missing or of the wrong size", name);
        if (!rg) continue;
        long w;
        double e = cl_test_rel_err(cl_model_grad(s.m, i), rg, (long)d->params[i].numel, &w);
        if (e > worst) worst = e, worst_name = d->params[i].name;
        CHECK(e <= 1e-5, "%s: rel err %.3g at %ld (%g vs torch %g)", name, e, w, cl_model_grad(s.m, i)[w], rg[w]);
    }
    printf("kv %d tied %d: %d gradients, max rel err %.3g (%s)\n", kv, tied, d->nparams, worst, worst_name);
done:
    cl_st_close(ref);
    free_setup(&s);
}

int main(int argc, char **argv) {
    if (argc >= 5) {
        int kv = atoi(argv[1]), tied = atoi(argv[2]);
        if (argc == 5 && !strcmp(argv[3], "--write-input")) return write_input(kv, tied, argv[4]);
        if (argc == 6 && !strcmp(argv[3], "--grads-bf16")) return grads_bf16(kv, tied, argv[4], argv[5]);
        if (argc == 6 && !strcmp(argv[3], "--torch")) {
            compare(kv, tied, argv[4], argv[5]);
            return cl_test_report("llama_torch_driver");
        }
    }
    fprintf(stderr, "usage: llama_torch_driver KV TIED --write-input IN | --torch IN REF | --grads-bf16 IN OUT\n");
    return 2;
}
