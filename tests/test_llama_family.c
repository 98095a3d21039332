/* The Llama family's description (issue 30, items 1-2): its presets'
 * parameter counts against the published ones, llama-tiny's parameters
 * (Hugging Face's names, cleave's [in, out] linear shapes, checkpoint
 * order), a block's saved activations and scratch by the formula, the
 * tensor-parallel split (q, k, v, gate, up by columns; o, down by rows;
 * lm_head by vocabulary rows), the checks naming their field, the
 * config.json written and read back (and compared), and the refusal to
 * train until the kinds' passes exist.
 *
 * The published counts are the totals of the released safetensors as the
 * models' Hugging Face pages give them (HuggingFaceTB/SmolLM2-135M 134.5M,
 * TinyLlama/TinyLlama-1.1B 1.1B, meta-llama/Llama-3.2-1B 1.24B,
 * Meta-Llama-3-8B 8.03B, Llama-2-70b-hf 69B, Meta-Llama-3-70B 70.6B,
 * Llama-3.1-405B 406B), to the parameter: each is V C (x 2 untied) + C +
 * L (2 C + 2 C^2 + 2 C K + 3 C F), K = kv_heads x C / heads. The names
 * people use round them: "135M", "1.1B", "1B", "8B", "70B", "70B", "405B". */
#include "cleave/json.h"
#include "cleave/model.h"
#include "common/check.h"

#include <stdlib.h>
#include <string.h>

static const cl_param_spec *find(const cl_model_desc *d, const char *name) {
    int i = cl_model_find_param(d, name);
    return i >= 0 ? &d->params[i] : NULL;
}

static const struct {
    const char *name;
    long long published;
} counts[] = {
    /* confirmed in public text quoting the Hub's figures (docs/ARCHITECTURE.md, after "Adding a family, worked") */
    {"smollm2-135m", 134515008LL},      {"tinyllama-1.1b", 1100048384LL}, {"llama-3.2-1b", 1235814400LL},
    {"llama-3-8b", 8030261248LL},       {"llama-2-70b", 68976648192LL},   {"llama-3-70b", 70553706496LL},
    {"llama-3.1-405b", 405853388800LL},
};

int main(void) {
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        cl_model_config c;
        CHECK(cl_model_preset(counts[i].name, &c) == CL_OK && cl_model_config_check(&c) == CL_OK, "%s: %s", counts[i].name, cl_last_error());
        cl_model_desc *d = NULL;
        /* 64 tokens a sample: the whole context's scores would pass the description's bound for the 128K ones */
        CHECK(cl_model_describe(&c, 64, &d) == CL_OK, "describe %s: %s", counts[i].name, cl_last_error());
        if (!d) continue;
        int64_t L = c.layers, C = c.channels, K = (int64_t)cl_model_kv_heads(&c) * (C / c.heads), F = cl_model_mlp_width(&c), V = c.vocab;
        int64_t formula = V * C * (c.untied ? 2 : 1) + C + L * (2 * C + 2 * C * C + 2 * C * K + 3 * C * F);
        CHECK(d->nparams_total == formula && formula == counts[i].published, "%s: %lld described, %lld by the formula, %lld published",
              counts[i].name, (long long)d->nparams_total, (long long)formula, counts[i].published);
        CHECK(d->nparams == 1 + 9 * c.layers + 1 + c.untied, "%s: %d tensors", counts[i].name, d->nparams);
        cl_model_desc_free(d);
    }

    /* llama-tiny: L 2, C 64, H 4, KV 2 (hd 16, K 32), F 172, V 256, context 64, untied */
    cl_model_config c;
    CHECK(cl_model_preset("llama-tiny", &c) == CL_OK, "llama-tiny");
    const int64_t C = 64, H = 4, K = 32, F = 172, V = 256, T = 64;
    cl_model_desc *d = NULL;
    CHECK(cl_model_describe(&c, 0, &d) == CL_OK, "describe: %s", cl_last_error());
    if (!d) return cl_test_report("test_llama_family");
    static const char *order[] = {"model.embed_tokens.weight",
                                  "model.layers.0.input_layernorm.weight",
                                  "model.layers.0.self_attn.q_proj.weight",
                                  "model.layers.0.self_attn.k_proj.weight",
                                  "model.layers.0.self_attn.v_proj.weight",
                                  "model.layers.0.self_attn.o_proj.weight",
                                  "model.layers.0.post_attention_layernorm.weight",
                                  "model.layers.0.mlp.gate_proj.weight",
                                  "model.layers.0.mlp.up_proj.weight",
                                  "model.layers.0.mlp.down_proj.weight"};
    int in_order = d->nparams == 21;
    for (int i = 0; i < 10 && in_order; i++) in_order = !strcmp(d->params[i].name, order[i]);
    CHECK(in_order && !strcmp(d->params[19].name, "model.norm.weight") && !strcmp(d->params[20].name, "lm_head.weight"),
          "checkpoint order (%d tensors)", d->nparams);
    const cl_param_spec *q = find(d, "model.layers.1.self_attn.q_proj.weight"), *k = find(d, "model.layers.1.self_attn.k_proj.weight"),
                        *o = find(d, "model.layers.0.self_attn.o_proj.weight"), *g = find(d, "model.layers.0.mlp.gate_proj.weight"),
                        *dn = find(d, "model.layers.0.mlp.down_proj.weight"), *e = find(d, "model.embed_tokens.weight"),
                        *lm = find(d, "lm_head.weight"), *n1 = find(d, "model.layers.0.input_layernorm.weight");
    CHECK(q && q->shape[0] == C && q->shape[1] == C && k && k->shape[0] == C && k->shape[1] == K, "q [C, C], k [C, K]");
    CHECK(o && o->shape[0] == C && o->shape[1] == C && g && g->shape[0] == C && g->shape[1] == F && dn && dn->shape[0] == F &&
              dn->shape[1] == C, "o [C, C], gate [C, F], down [F, C]");
    CHECK(e && e->shape[0] == V && e->shape[1] == C && lm && lm->shape[0] == V && lm->shape[1] == C && n1 && n1->ndim == 1 &&
              n1->init == CL_INIT_ONES && !n1->decay, "embed and lm_head [V, C]; the norms [C], ones, no decay");
    CHECK(d->tied_wte == -1, "untied: no tied weight (%d)", d->tied_wte);
    CHECK(cl_model_config_runs(&c) == CL_OK, "runs: %s", cl_last_error());
    /* a block's kept activations per sample: T (4 C + 2) + T (2 C + 2 K + 3 F) + the lse, H T (blockwise attention, no
     * T x T scores); its scratch: the gradients and the backward's tile pairs, one a kv head (KV 2 64 64 at T 64) */
    const cl_unit *blk = &d->units[1];
    const int64_t KV = K / (C / H);
    CHECK(blk->kind == CL_UNIT_LLAMA_BLOCK && blk->act_floats == T * (4 * C + 2) + T * (2 * C + 2 * K + 3 * F) + H * T,
          "block acts %lld", (long long)blk->act_floats);
    CHECK(blk->scratch_floats == T * (3 * C + C + C + 2 * K + 3 * F) + KV * 2 * 64 * 64, "block scratch %lld",
          (long long)blk->scratch_floats);
    CHECK(d->units[3].kind == CL_UNIT_LLAMA_HEAD_UNTIED && d->units[3].act_floats == T * (C + V + 2) + T, "head acts %lld",
          (long long)d->units[3].act_floats);
    cl_model_desc_free(d);

    /* tied: one tensor fewer, the head reads the embedding's */
    cl_model_config tied = c;
    tied.untied = 0;
    CHECK(cl_model_describe(&tied, 0, &d) == CL_OK && d->nparams == 20 && !find(d, "lm_head.weight") &&
              d->units[3].kind == CL_UNIT_LLAMA_HEAD && d->tied_wte == 0, "tied: %s", cl_last_error());
    cl_model_desc_free(d);

    /* tp 2: q and gate by columns, k by its key-value heads' columns, o and down by rows, lm_head by vocabulary rows */
    cl_tp_layout tl = {2, 1, 0, 1, CL_F32, 1};
    CHECK(cl_model_describe_tp(&c, 0, &tl, &d) == CL_OK, "tp 2: %s", cl_last_error());
    if (d) {
        q = find(d, "model.layers.0.self_attn.q_proj.weight"), k = find(d, "model.layers.0.self_attn.v_proj.weight");
        o = find(d, "model.layers.0.self_attn.o_proj.weight"), g = find(d, "model.layers.0.mlp.up_proj.weight");
        dn = find(d, "model.layers.0.mlp.down_proj.weight"), lm = find(d, "lm_head.weight");
        CHECK(q->split == CL_SPLIT_COLS && q->shape[1] == C / 2 && k->split == CL_SPLIT_COLS && k->shape[1] == K / 2, "q, v by columns");
        CHECK(o->split == CL_SPLIT_ROWS && o->shape[0] == C / 2 && dn->split == CL_SPLIT_ROWS && dn->shape[0] == F / 2, "o, down by rows");
        CHECK(g->split == CL_SPLIT_COLS && g->shape[1] == F / 2 && lm->split == CL_SPLIT_ROWS && lm->shape[0] == V / 2,
              "up by columns, lm_head by vocabulary rows");
        CHECK(d->heads_local == 2 && d->kv_heads_local == 1 && d->kv_channels_local == 16, "local heads");
        cl_model_desc_free(d);
    }
    /* tp 4 past the 2 key-value heads: each replicated on 2 ranks (rank 3 holds head 1's columns, as rank 2) */
    cl_tp_layout t4 = {4, 3, 0, 1, CL_F32, 1};
    CHECK(cl_model_describe_tp(&c, 0, &t4, &d) == CL_OK, "tp 4: %s", cl_last_error());
    if (d) {
        k = find(d, "model.layers.0.self_attn.k_proj.weight"), q = find(d, "model.layers.0.self_attn.q_proj.weight");
        cl_param_run run[3];
        CHECK(k->split == CL_SPLIT_COLS && k->shape[1] == K / 2 && k->tp_rep == 2 && q->tp_rep == 0 && q->shape[1] == C / 4 &&
                  cl_param_row_runs(k, 3, 0, run) == 1 && run[0].col == K / 2 && cl_param_local_index(k, 3, 0) == -1 &&
                  cl_param_local_index(k, 2, K / 2) == 0,
              "k by replicated key-value heads");
        CHECK(d->heads_local == 1 && d->kv_heads_local == 1 && d->kv_channels_local == 16, "local heads at tp 4");
        cl_model_desc_free(d);
    }
    /* tp 6: a multiple of 3 key-value heads (replicated twice) is described; of 4, refused naming both */
    cl_model_config six = c;
    six.heads = 12, six.kv_heads = 3, six.channels = 96, six.mlp_width = 192;
    cl_tp_layout t6 = {6, 0, 0, 1, CL_F32, 1};
    d = NULL;
    CHECK(cl_model_describe_tp(&six, 0, &t6, &d) == CL_OK, "tp 6 of 3 kv heads: %s", cl_last_error());
    cl_model_desc_free(d);
    six.heads = 24, six.kv_heads = 4, six.channels = 192, six.mlp_width = 384;
    d = NULL;
    CHECK(cl_model_describe_tp(&six, 0, &t6, &d) != CL_OK &&
              strstr(cl_last_error(), "--tp 6 must be a multiple of the 4 key-value heads, or divide them"),
          "tp 6 of 4: %s", cl_last_error());

    /* the checks name their field */
    cl_model_config bad = c;
    bad.kv_heads = 3;
    CHECK(cl_model_config_check(&bad) == CL_ERR_INVALID && strstr(cl_last_error(), "--kv-heads 3 must divide --heads"), "%s", cl_last_error());
    bad = c, bad.rope_theta = 0.5;
    CHECK(cl_model_config_check(&bad) == CL_ERR_INVALID && strstr(cl_last_error(), "--rope-theta"), "%s", cl_last_error());
    bad = c, bad.rms_norm_eps = 0;
    CHECK(cl_model_config_check(&bad) == CL_ERR_INVALID && strstr(cl_last_error(), "rms_norm_eps"), "%s", cl_last_error());
    bad = c, bad.heads = 32; /* head width 2: even, fine */
    CHECK(cl_model_config_check(&bad) == CL_OK, "hd 2: %s", cl_last_error());
    bad = c, bad.channels = 60, bad.heads = 4, bad.kv_heads = 0; /* head width 15 */
    CHECK(cl_model_config_check(&bad) == CL_ERR_INVALID && strstr(cl_last_error(), "must be even"), "%s", cl_last_error());

    /* config.json: written with Hugging Face's keys, read back the same, a change named */
    cl_model_config w;
    CHECK(cl_model_preset("llama-3-8b", &w) == CL_OK, "llama-3-8b");
    cl_strbuf sb = {0};
    cl_sb_printf(&sb, "{\n");
    cl_model_config_json(&sb, &w);
    cl_sb_printf(&sb, "  \"cleave_model\": \"llama\"\n}\n");
    CHECK(!sb.failed && strstr(sb.buf, "\"num_key_value_heads\": 8") && strstr(sb.buf, "\"intermediate_size\": 14336") &&
              strstr(sb.buf, "\"rope_theta\": 500000") && strstr(sb.buf, "\"tie_word_embeddings\": false") &&
              strstr(sb.buf, "\"rms_norm_eps\": 1.0000000000000001e-05"), "config.json:\n%s", sb.buf);
    cl_json_doc *doc = NULL;
    cl_model_config r;
    char field[64];
    int va = 0, vb = 0;
    CHECK(cl_json_parse(&doc, sb.buf, sb.len) == CL_OK && cl_model_config_from_json(cl_json_root(doc), &r) && r.kind == CL_MODEL_LLAMA &&
              !cl_model_config_diff(&w, &r, field, sizeof field, &va, &vb) && r.rope_theta == w.rope_theta &&
              r.rms_norm_eps == w.rms_norm_eps && r.untied && r.norm == CL_NORM_RMS && r.no_bias, "read back");
    r.rope_theta = 10000;
    CHECK(cl_model_config_diff(&w, &r, field, sizeof field, &va, &vb) && !strcmp(field, "rope-theta") && va == 500000 && vb == 10000,
          "diff names %s", field);
    r = w, r.untied = 0;
    CHECK(cl_model_config_diff(&w, &r, field, sizeof field, &va, &vb) && !strcmp(field, "tie-embeddings"), "diff names %s", field);
    cl_json_free(doc);
    cl_sb_free(&sb);

    /* rope_scaling llama3: the presets that have it (Llama 3.1, 3.2), written as Llama 3.1's config.json, read back, compared */
    cl_model_config s3;
    CHECK(cl_model_preset("llama-3.1-405b", &s3) == CL_OK && s3.rope_factor == 8 && s3.rope_low_freq == 1 && s3.rope_high_freq == 4 &&
              s3.rope_original_context == 8192, "llama-3.1-405b's rope_scaling");
    CHECK(cl_model_preset("llama-3.2-1b", &w) == CL_OK && w.rope_factor == 32 && w.rope_original_context == 8192, "llama-3.2-1b's");
    CHECK(cl_model_preset("llama-3-8b", &w) == CL_OK && w.rope_factor == 0, "llama-3-8b has none");
    cl_strbuf sb3 = {0};
    cl_sb_printf(&sb3, "{\n");
    cl_model_config_json(&sb3, &s3);
    cl_sb_printf(&sb3, "  \"cleave_model\": \"llama\"\n}\n");
    CHECK(!sb3.failed && strstr(sb3.buf, "\"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                                         "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}"),
          "rope_scaling written:\n%s", sb3.buf);
    doc = NULL;
    CHECK(cl_json_parse(&doc, sb3.buf, sb3.len) == CL_OK && cl_model_config_from_json(cl_json_root(doc), &r) &&
              !cl_model_config_diff(&s3, &r, field, sizeof field, &va, &vb) && r.rope_factor == 8 && r.rope_original_context == 8192,
          "rope_scaling read back");
    r.rope_high_freq = 2;
    CHECK(cl_model_config_diff(&s3, &r, field, sizeof field, &va, &vb) && strstr(field, "high_freq") && va == 4000 && vb == 2000,
          "diff names %s", field);
    r = s3, r.rope_factor = 0, r.rope_low_freq = 0, r.rope_high_freq = 0, r.rope_original_context = 0;
    CHECK(cl_model_config_diff(&s3, &r, field, sizeof field, &va, &vb) && strstr(field, "rope factor"), "none differs: %s", field);
    bad = s3, bad.rope_high_freq = 0.5;
    CHECK(cl_model_config_check(&bad) == CL_ERR_INVALID && strstr(cl_last_error(), "high_freq_factor 0.5 must exceed"), "%s",
          cl_last_error());
    bad = s3, bad.rope_original_context = 0;
    CHECK(cl_model_config_check(&bad) == CL_ERR_INVALID && strstr(cl_last_error(), "original_max_position_embeddings 0"), "%s",
          cl_last_error());
    cl_json_free(doc);
    cl_sb_free(&sb3);
    return cl_test_report("test_llama_family");
}
