/* The Llama family's mixture of experts (issue 33, item 1): mixtral-8x7b's
 * parameter count against the published one, mixtral-tiny's parameters
 * (Hugging Face Mixtral's names, cleave's [in, out] shapes, checkpoint
 * order), which blocks --moe-every makes MoE blocks, and the checks naming
 * their flag and config.json key.
 *
 * The published count: mistralai/Mixtral-8x7B-v0.1, 46,702,792,704
 * parameters (46.7B), which is V C x 2 (untied) + C + L (2 C + 2 C^2 +
 * 2 C K + C E + 3 E C F), K = kv_heads x C / heads. */
#include "cleave/model.h"
#include "common/check.h"

#include <stdio.h>
#include <string.h>

static int refused(cl_model_config c, const char *needle) {
    cl_status s = cl_model_config_check(&c);
    int ok = s != CL_OK && strstr(cl_last_error(), needle) != NULL;
    if (!ok) fprintf(stderr, "expected a refusal naming %s, got %d: %s\n", needle, (int)s, s ? cl_last_error() : "");
    return ok;
}

int main(void) {
    cl_model_config c;
    CHECK(cl_model_preset("mixtral-8x7b", &c) == CL_OK && cl_model_config_check(&c) == CL_OK, "mixtral-8x7b: %s", cl_last_error());
    cl_model_desc *d = NULL;
    CHECK(cl_model_describe(&c, 64, &d) == CL_OK, "describe mixtral-8x7b: %s", cl_last_error());
    if (d) {
        int64_t L = c.layers, C = c.channels, K = (int64_t)cl_model_kv_heads(&c) * (C / c.heads), F = cl_model_mlp_width(&c), V = c.vocab,
                E = c.experts;
        int64_t formula = 2 * V * C + C + L * (2 * C + 2 * C * C + 2 * C * K + C * E + 3 * E * C * F);
        CHECK(d->nparams_total == formula && formula == 46702792704LL, "mixtral-8x7b: %lld described, %lld by the formula",
              (long long)d->nparams_total, (long long)formula);
        CHECK(d->nparams == 1 + 32 * (6 + 1 + 3 * 8) + 2, "mixtral-8x7b: %d tensors", d->nparams);
        cl_model_desc_free(d);
    }

    /* mixtral-tiny: L 2, C 64, H 4, KV 2 (K 32), F 128, E 8, top-2, V 256, untied */
    CHECK(cl_model_preset("mixtral-tiny", &c) == CL_OK && c.experts == 8 && c.experts_per_token == 2 && c.moe_aux_coeff == 0.01,
          "mixtral-tiny");
    d = NULL;
    CHECK(cl_model_describe(&c, 0, &d) == CL_OK, "describe mixtral-tiny: %s", cl_last_error());
    if (!d) return cl_test_report("test_moe_family");
    static const char *order[] = {"model.embed_tokens.weight",
                                  "model.layers.0.input_layernorm.weight",
                                  "model.layers.0.self_attn.q_proj.weight",
                                  "model.layers.0.self_attn.k_proj.weight",
                                  "model.layers.0.self_attn.v_proj.weight",
                                  "model.layers.0.self_attn.o_proj.weight",
                                  "model.layers.0.post_attention_layernorm.weight",
                                  "model.layers.0.block_sparse_moe.gate.weight",
                                  "model.layers.0.block_sparse_moe.experts.0.w1.weight",
                                  "model.layers.0.block_sparse_moe.experts.0.w2.weight",
                                  "model.layers.0.block_sparse_moe.experts.0.w3.weight",
                                  "model.layers.0.block_sparse_moe.experts.1.w1.weight"};
    int in_order = d->nparams == 1 + 2 * 31 + 2;
    for (int i = 0; i < 12 && in_order; i++) in_order = !strcmp(d->params[i].name, order[i]);
    CHECK(in_order && !strcmp(d->params[31].name, "model.layers.0.block_sparse_moe.experts.7.w3.weight") &&
              !strcmp(d->params[63].name, "model.norm.weight") && !strcmp(d->params[64].name, "lm_head.weight"),
          "checkpoint order (%d tensors)", d->nparams);
    int g = cl_model_find_param(d, "model.layers.1.block_sparse_moe.gate.weight"),
        w1 = cl_model_find_param(d, "model.layers.1.block_sparse_moe.experts.5.w1.weight"),
        w2 = cl_model_find_param(d, "model.layers.1.block_sparse_moe.experts.5.w2.weight"),
        w3 = cl_model_find_param(d, "model.layers.1.block_sparse_moe.experts.5.w3.weight");
    CHECK(g >= 0 && d->params[g].shape[0] == 64 && d->params[g].shape[1] == 8, "router [C, E]");
    CHECK(w1 >= 0 && w3 >= 0 && d->params[w1].shape[0] == 64 && d->params[w1].shape[1] == 128 && d->params[w3].shape[0] == 64 &&
              d->params[w3].shape[1] == 128, "w1, w3 [C, F]");
    CHECK(w2 >= 0 && d->params[w2].shape[0] == 128 && d->params[w2].shape[1] == 64, "w2 [F, C]");
    CHECK(d->units[1].kind == CL_UNIT_MOE_BLOCK && d->units[2].kind == CL_UNIT_MOE_BLOCK, "every block an MoE block");
    cl_model_desc_free(d);

    /* --moe-every 2 on 4 layers: blocks 1 and 3 MoE, 0 and 2 dense */
    cl_model_config e = c;
    e.layers = 4, e.moe_every = 2;
    d = NULL;
    CHECK(cl_model_config_check(&e) == CL_OK && cl_model_describe(&e, 0, &d) == CL_OK, "moe-every 2: %s", cl_last_error());
    if (d) {
        CHECK(d->units[1].kind == CL_UNIT_LLAMA_BLOCK && d->units[2].kind == CL_UNIT_MOE_BLOCK && d->units[3].kind == CL_UNIT_LLAMA_BLOCK &&
                  d->units[4].kind == CL_UNIT_MOE_BLOCK,
              "moe-every 2: blocks 1 and 3");
        CHECK(cl_model_find_param(d, "model.layers.0.mlp.gate_proj.weight") >= 0 &&
                  cl_model_find_param(d, "model.layers.1.block_sparse_moe.experts.0.w1.weight") >= 0,
              "dense and MoE names");
        cl_model_desc_free(d);
    }

    /* the checks name the flag and the config.json key */
    e = c, e.experts_per_token = 9;
    CHECK(refused(e, "num_experts_per_tok"), "K > E");
    e = c, e.experts_per_token = 0;
    CHECK(refused(e, "num_experts_per_tok"), "K 0");
    e = c, e.experts = 300;
    CHECK(refused(e, "num_local_experts"), "E past the bound");
    e = c, e.moe_aux_coeff = -1;
    CHECK(refused(e, "router_aux_loss_coef"), "negative coefficient");
    e = c, e.moe_capacity_factor = -0.5;
    CHECK(refused(e, "--moe-capacity-factor"), "negative capacity factor");
    e = c, e.moe_every = 3;
    CHECK(refused(e, "--moe-every"), "moe-every past the layers");
    CHECK(cl_model_preset("llama-tiny", &e) == CL_OK, "llama-tiny");
    e.moe_every = 2;
    CHECK(refused(e, "need --experts"), "moe-every without experts");
    return cl_test_report("test_moe_family");
}
