/* cleave's Mixtral block against an independent PyTorch Mixtral
 * (tests/mixtral_torch.py, written from Hugging Face's MixtralForCausalLM
 * equations): the LM loss, the load-balancing loss and every parameter
 * gradient of one forward and backward on one batch of mixtral-tiny.
 *
 *   moe_torch_driver CASE --write-input IN   mixtral-tiny initialised as
 *       training initialises it, its weights under Hugging Face's names
 *       (linear weights [in, out], as cleave stores them), the batch and the
 *       configuration (metadata "config": MixtralConfig's keys and cleave's
 *       moe_capacity_factor)
 *   moe_torch_driver CASE --torch IN REF     the same model and batch read
 *       back; the LM loss against REF's "loss", the aux loss (the sum over
 *       blocks of E sum f P) against "aux", each gradient of
 *       loss + coeff aux against "grad.<name>": max |a - b| / max |b| <= 1e-5.
 *   moe_torch_driver CASE --grads-bf16 IN OUT  the same model and batch, one
 *       forward and backward at --dtype bf16: "loss", "aux", "dropped" (F64),
 *       "slots" (F64 [E]: the token-slots each expert ran, summed over the
 *       blocks: the routing) and "grad.<name>" (F32) of loss + coeff aux, for
 *       tests/mixtral_torch.py --autocast (tests/cli_bf16_moe.sh).
 *
 * CASE: plain (mixtral-tiny, dropless); tie (layer 0's router weights zero:
 * every probability 1/E, so the top-k is decided by the tie rule, the lower
 * experts); cap (capacity factor 0.5: slots dropped, their count checked
 * against the reference's). tests/cli_moe_train.sh runs both around the
 * Python reference. */
#include "cleave/kernels.h"
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

static cl_status make_setup(const char *kase, cl_dtype dt, setup *s) {
    memset(s, 0, sizeof *s);
    cl_model_config c;
    CL_TRY(cl_model_preset("mixtral-tiny", &c));
    if (!strcmp(kase, "cap")) c.moe_capacity_factor = 0.5;
    else if (strcmp(kase, "plain") && strcmp(kase, "tie")) return cl_error(CL_ERR_INVALID, "unknown case %s (plain, tie, cap)", kase);
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

static int write_input(const char *kase, const char *path) {
    setup s;
    cl_status st = make_setup(kase, CL_F32, &s);
    if (st) {
        fprintf(stderr, "%s\n", cl_last_error());
        return 1;
    }
    cl_model_init(s.m, 42);
    if (!strcmp(kase, "tie")) {
        int i = cl_model_find_param(s.d, "model.layers.0.block_sparse_moe.gate.weight");
        if (i >= 0) memset(cl_model_param(s.m, i), 0, (size_t)s.d->params[i].numel * sizeof(float));
    }
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
    char config[768];
    snprintf(config, sizeof config,
             "{\"num_hidden_layers\": %d, \"hidden_size\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
             "\"intermediate_size\": %lld, \"vocab_size\": %d, \"rope_theta\": %.17g, \"rms_norm_eps\": %.17g, "
             "\"tie_word_embeddings\": %s, \"num_local_experts\": %d, \"num_experts_per_tok\": %d, \"router_aux_loss_coef\": %.17g, "
             "\"moe_capacity_factor\": %.17g}",
             c->layers, c->channels, c->heads, cl_model_kv_heads(c), (long long)cl_model_mlp_width(c), c->vocab, c->rope_theta,
             c->rms_norm_eps, c->untied ? "false" : "true", c->experts, c->experts_per_token, c->moe_aux_coeff, c->moe_capacity_factor);
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

static int ref_f64(cl_st_file *ref, const char *name, double *out) {
    const cl_st_entry *e = cl_st_find(ref, name);
    if (!e || e->dtype != CL_F64) return 0;
    memcpy(out, e->data, sizeof *out);
    return 1;
}

static const float *ref_tensor(cl_st_file *ref, const char *name, int64_t numel, cl_dtype dt) {
    const cl_st_entry *e = cl_st_find(ref, name);
    if (!e) return NULL;
    int64_t k = 1;
    for (int i = 0; i < e->ndim; i++) k *= e->shape[i];
    return k == numel && e->dtype == dt ? e->data : NULL;
}

static void compare(const char *kase, const char *inpath, const char *refpath) {
    setup s;
    CHECK_OK(make_setup(kase, CL_F32, &s));
    cl_st_file *in = NULL, *ref = NULL;
    CHECK_OK(cl_st_open(&in, inpath));
    CHECK_OK(cl_st_open(&ref, refpath));
    if (cl_test_failures || !in || !ref) goto done;
    const cl_model_desc *d = s.d;
    for (int i = 0; i < d->nparams; i++)
        CHECK_OK(cl_st_read_tensor(in, d->params[i].name, CL_F32, d->params[i].ndim, d->params[i].shape, cl_model_param(s.m, i)));
    int64_t sh[2] = {B, T};
    CHECK_OK(cl_st_read_tensor(in, "tokens", CL_F32, 2, sh, s.tok_f));
    CHECK_OK(cl_st_read_tensor(in, "targets", CL_F32, 2, sh, s.tgt_f));
    for (int i = 0; i < B * T; i++) s.tokens[i] = (int32_t)s.tok_f[i], s.targets[i] = (int32_t)s.tgt_f[i];
    double loss_sum, aux, rl, ra, rd;
    int64_t dropped, slots[CL_MOE_MAX_EXPERTS];
    cl_model_zero_grads(s.m);
    CHECK_OK(cl_model_forward_backward(s.m, &s.mb, &s.a, &loss_sum, 1));
    cl_model_moe_take(s.m, &aux, &dropped, slots);
    double loss = loss_sum / (B * T);
    CHECK(ref_f64(ref, "loss", &rl) && ref_f64(ref, "aux", &ra) && ref_f64(ref, "dropped", &rd), "reference loss, aux or dropped missing");
    if (!cl_test_failures) {
        printf("%s: loss %.9f, torch %.9f (rel %.3g); aux %.9f, torch %.9f (rel %.3g); dropped %lld, torch %.0f\n", kase, loss, rl,
               fabs(loss - rl) / fabs(rl), aux, ra, fabs(aux - ra) / fabs(ra), (long long)dropped, rd);
        CHECK(fabs(loss - rl) <= 1e-5 * fabs(rl), "loss %.9g vs torch %.9g", loss, rl);
        CHECK(fabs(aux - ra) <= 1e-5 * fabs(ra), "aux %.9g vs torch %.9g", aux, ra);
        CHECK((double)dropped == rd, "dropped %lld vs torch %.0f", (long long)dropped, rd);
        CHECK(strcmp(kase, "cap") || dropped > 0, "the capacity case dropped nothing");
        int64_t total = 0;
        for (int e = 0; e < d->cfg.experts; e++) total += slots[e];
        CHECK(total + dropped == (int64_t)d->cfg.layers * B * T * d->cfg.experts_per_token, "token-slots %lld run, %lld dropped",
              (long long)total, (long long)dropped);
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
    printf("%s: %d gradients, max rel err %.3g (%s)\n", kase, d->nparams, worst, worst_name);
done:
    cl_st_close(in);
    cl_st_close(ref);
    free_setup(&s);
}

/* --grads-bf16: IN's weights and batch at --dtype bf16, one forward and backward, into OUT. */
static int grads_bf16(const char *kase, const char *inpath, const char *outpath) {
    setup s;
    cl_st_file *in = NULL;
    cl_status st = make_setup(kase, CL_BF16, &s);
    if (!st) st = cl_st_open(&in, inpath);
    const cl_model_desc *d = s.d;
    for (int i = 0; !st && i < d->nparams; i++)
        st = cl_st_read_tensor(in, d->params[i].name, CL_F32, d->params[i].ndim, d->params[i].shape, cl_model_param(s.m, i));
    int64_t sh[2] = {B, T};
    if (!st) st = cl_st_read_tensor(in, "tokens", CL_F32, 2, sh, s.tok_f);
    if (!st) st = cl_st_read_tensor(in, "targets", CL_F32, 2, sh, s.tgt_f);
    cl_st_close(in);
    for (int i = 0; i < B * T; i++) s.tokens[i] = (int32_t)s.tok_f[i], s.targets[i] = (int32_t)s.tgt_f[i];
    if (!st) st = cl_model_refresh_low(s.m); /* the weights' BF16 copy from the master just read */
    double loss_sum = 0, vals[3] = {0}, slots[CL_MOE_MAX_EXPERTS] = {0};
    int64_t dropped = 0, slot[CL_MOE_MAX_EXPERTS] = {0};
    if (!st) {
        cl_model_zero_grads(s.m);
        st = cl_model_forward_backward(s.m, &s.mb, &s.a, &loss_sum, 1);
    }
    int n = st ? 0 : d->nparams, E = st ? 0 : d->cfg.experts;
    if (!st) {
        cl_model_moe_take(s.m, &vals[1], &dropped, slot);
        vals[0] = loss_sum / (B * T), vals[2] = (double)dropped;
        for (int e = 0; e < E; e++) slots[e] = (double)slot[e];
    }
    cl_st_item *items = calloc((size_t)n + 4, sizeof *items);
    char (*names)[128] = calloc((size_t)n + 1, sizeof *names);
    if (!st && (!items || !names)) st = cl_error(CL_ERR_OOM, "items");
    for (int i = 0; !st && i < n; i++) {
        snprintf(names[i], sizeof names[i], "grad.%s", d->params[i].name);
        items[i] = (cl_st_item){names[i], cl_tensor_make(cl_model_grad(s.m, i), CL_F32, d->params[i].ndim, d->params[i].shape)};
    }
    int64_t one = 1, ne = E;
    if (!st) {
        items[n] = (cl_st_item){"loss", cl_tensor_make(&vals[0], CL_F64, 1, &one)};
        items[n + 1] = (cl_st_item){"aux", cl_tensor_make(&vals[1], CL_F64, 1, &one)};
        items[n + 2] = (cl_st_item){"dropped", cl_tensor_make(&vals[2], CL_F64, 1, &one)};
        items[n + 3] = (cl_st_item){"slots", cl_tensor_make(slots, CL_F64, 1, &ne)};
        st = cl_st_write(outpath, items, n + 4, NULL, 0);
    }
    if (!st) printf("%s bf16: loss %.9f, aux %.9f, dropped %lld\n", kase, vals[0], vals[1], (long long)dropped);
    else fprintf(stderr, "moe_torch_driver: %s\n", cl_last_error());
    free(items);
    free(names);
    free_setup(&s);
    return st ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[2], "--write-input")) return write_input(argv[1], argv[3]);
    if (argc == 5 && !strcmp(argv[2], "--grads-bf16")) return grads_bf16(argv[1], argv[3], argv[4]);
    if (argc == 5 && !strcmp(argv[2], "--torch")) {
        compare(argv[1], argv[3], argv[4]);
        return cl_test_report("moe_torch_driver");
    }
    fprintf(stderr, "usage: moe_torch_driver plain|tie|cap --write-input IN | --torch IN REF | --grads-bf16 IN OUT\n");
    return 2;
}
