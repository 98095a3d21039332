/* The GPT family (GPT-2): token embedding and learned positions, pre-LN
 * transformer blocks, an LM head tied to the embedding. Its configuration
 * carries the choices a Llama family also makes (key-value heads, MLP
 * width, norm, biases, a tied head), GPT-2's values the defaults (0); the
 * GPT kinds run GPT-2's norm, biases and tied head and as many key-value
 * heads as heads (cl_model_config_runs), and any MLP width.
 *
 * Invariants: heads divide channels and kv_heads divide heads; the
 * description's local sizes (heads, channels, key-value columns, MLP width,
 * vocabulary rows) are this tensor-parallel rank's, set before any unit. */
#include "model/family.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define LAYERS_MAX (1 << 14) /* each block adds 12 parameter entries to the description (a Llama block 9) */

static const struct {
    const char *name;
    int layers, channels, heads, seq_len, vocab;
} presets[] = {
    {"gpt2-tiny", 2, 64, 4, 64, 256},
    {"gpt2-mini", 4, 128, 4, 128, 256},
    {"gpt2-small", 12, 768, 12, 1024, 50257}, /* GPT-2 small (124M), as the paper and Hugging Face's gpt2 */
    {"gpt2", 12, 768, 12, 1024, 50257},
    {"gpt2-medium", 24, 1024, 16, 1024, 50257},
    {"gpt2-large", 36, 1280, 20, 1024, 50257},
    {"gpt2-xl", 48, 1600, 25, 1024, 50257},
};

static int gpt_preset(const char *name, cl_model_config *cfg) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].name)) continue;
        cfg->kind = CL_MODEL_GPT;
        snprintf(cfg->name, sizeof cfg->name, "%s", presets[i].name);
        cfg->layers = presets[i].layers;
        cfg->channels = presets[i].channels;
        cfg->heads = presets[i].heads;
        cfg->seq_len = presets[i].seq_len;
        cfg->vocab = presets[i].vocab;
        return 1;
    }
    return 0;
}

/* The shape checks the token families share (family.h). */
cl_status cl_family_tokens_check(const cl_model_config *c, const char *len_flag, const char *context, const char *width_flag) {
    CL_FAMILY_POS(c, layers, "--layers");
    CL_FAMILY_POS(c, channels, "--channels");
    CL_FAMILY_POS(c, heads, "--heads");
    CL_FAMILY_POS(c, seq_len, len_flag);
    CL_FAMILY_POS(c, vocab, "--vocab");
    CL_FAMILY_MAX(c, layers, "--layers", LAYERS_MAX);
    CL_FAMILY_MAX(c, seq_len, context, CL_DESC_DIM_MAX);
    if (c->channels % c->heads)
        return cl_error(CL_ERR_INVALID, "--heads (%d) must divide --channels (%d)", c->heads, c->channels);
    if (c->vocab > (1 << 30)) return cl_error(CL_ERR_INVALID, "--vocab %d is too large", c->vocab);
    if ((int64_t)c->channels * 4 > (1 << 28)) return cl_error(CL_ERR_INVALID, "--channels %d is too large", c->channels);
    if (c->kv_heads < 0 || (c->kv_heads && c->heads % c->kv_heads))
        return cl_error(CL_ERR_INVALID, "--kv-heads %d must divide --heads (%d)", c->kv_heads, c->heads);
    if (c->mlp_width < 0) return cl_error(CL_ERR_INVALID, "%s must be positive (got %d)", width_flag, c->mlp_width);
    CL_FAMILY_MAX(c, mlp_width, width_flag, CL_DESC_WIDTH_MAX);
    return CL_OK;
}

static cl_status gpt_check(const cl_model_config *c) {
    CL_TRY(cl_family_tokens_check(c, "--seq-len", "the context (n_positions)", "--mlp-width"));
    if (c->norm != CL_NORM_LAYER && c->norm != CL_NORM_RMS) return cl_error(CL_ERR_INVALID, "unknown norm %d", (int)c->norm);
    return CL_OK;
}

/* What kind_embed.c, kind_block.c and kind_head.c compute today. */
static cl_status gpt_runs(const cl_model_config *c) {
    if (cl_model_kv_heads(c) != c->heads)
        return cl_error(CL_ERR_UNSUPPORTED, "n_kv_heads %d: the GPT block runs as many key-value heads as heads (%d) (grouped-query attention is not built yet)",
                        cl_model_kv_heads(c), c->heads);
    if (c->norm != CL_NORM_LAYER) return cl_error(CL_ERR_UNSUPPORTED, "norm rmsnorm: the GPT block runs layernorm only (RMSNorm is not built yet)");
    if (c->no_bias) return cl_error(CL_ERR_UNSUPPORTED, "bias false: the GPT block runs with biases only");
    if (c->untied) return cl_error(CL_ERR_UNSUPPORTED, "tie_word_embeddings false: the GPT LM head runs tied to the embedding only");
    return CL_OK;
}

static cl_status gpt_check_tp(const cl_model_config *c, int T, const cl_tp_layout *tl) {
    int tp = tl->tp;
    if (c->heads % tp)
        return cl_error(CL_ERR_INVALID, "--tp %d must divide the %d attention heads (each rank computes whole heads)", tp, c->heads);
    if (cl_model_kv_heads(c) % tp)
        return cl_error(CL_ERR_INVALID, "--tp %d must divide the %d key-value heads", tp, cl_model_kv_heads(c));
    if (cl_model_mlp_width(c) % tp) {
        if (!c->mlp_width)
            return cl_error(CL_ERR_INVALID, "--tp %d must divide the MLP's 4 x %d = %lld columns", tp, c->channels,
                            4 * (long long)c->channels);
        return cl_error(CL_ERR_INVALID, "--tp %d must divide the MLP's %d columns (--mlp-width)", tp, c->mlp_width);
    }
    if (tl->sp && T % tp) return cl_error(CL_ERR_INVALID, "--sequence-parallel: --tp %d must divide the sequence length %d", tp, T);
    return CL_OK;
}

/* The vocabulary padded to a multiple of vocab_div x tp, and this rank's heads, columns and rows (family.h). */
cl_status cl_family_tokens_setup(cl_model_desc *d) {
    const cl_model_config *c = &d->cfg;
    const cl_tp_layout *tl = &d->tpl;
    int64_t mult = (int64_t)tl->vocab_div * tl->tp, vp = (c->vocab + mult - 1) / mult * mult;
    if (vp > (1 << 30))
        return cl_error(CL_ERR_INVALID, "the vocabulary %d padded to a multiple of %lld is too large", c->vocab, (long long)mult);
    d->vocab_padded = (int)vp;
    d->vocab_local = (int)(vp / tl->tp);
    d->vocab_start = tl->rank * d->vocab_local;
    d->heads_local = c->heads / tl->tp;
    d->channels_local = c->channels / tl->tp;
    /* past tp = kv heads (Llama), each rank holds the one key-value head its query heads read (replicated) */
    d->kv_heads_local = cl_model_kv_heads(c) >= tl->tp ? cl_model_kv_heads(c) / tl->tp : 1;
    d->kv_channels_local = d->kv_heads_local * (c->channels / c->heads);
    d->mlp_local = (int)(cl_model_mlp_width(c) / tl->tp);
    return CL_OK;
}

/* Embedding, the blocks h.0 .. h.{L-1}, the LM head; each sized by its kind for this rank's slice. */
static void gpt_describe(cl_desc_builder *b) {
    cl_model_desc *d = b->d;
    if (!cl_desc_add_unit(b, CL_UNIT_EMBED, 'E', 0, "embed")) return;
    cl_desc_add_kind(b);
    for (int l = 0; l < d->cfg.layers && !b->failed; l++) {
        char label[24];
        snprintf(label, sizeof label, "h.%d", l);
        if (!cl_desc_add_unit(b, CL_UNIT_BLOCK, 't', l, label)) return;
        cl_desc_add_kind(b);
    }
    if (!cl_desc_add_unit(b, CL_UNIT_LMHEAD, 'L', 0, "lm_head")) return;
    cl_desc_add_kind(b);
}

/* Hugging Face GPT-2's config.json, which cleave's checkpoints keep so that their transformers can load them. */
static void gpt_write_config(cl_strbuf *b, const cl_model_config *c) {
    cl_sb_printf(b, "  \"model_type\": \"gpt2\",\n  \"architectures\": [\"GPT2LMHeadModel\"],\n");
    cl_sb_printf(b, "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_embd\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n",
                 c->layers, c->heads, c->channels, c->seq_len, c->seq_len);
    cl_sb_printf(b, "  \"vocab_size\": %d,\n  \"layer_norm_epsilon\": 1e-05,\n  \"activation_function\": \"gelu_new\",\n", c->vocab);
    cl_sb_printf(b, "  \"tie_word_embeddings\": true,\n");
    if (c->mlp_width) cl_sb_printf(b, "  \"n_inner\": %d,\n", c->mlp_width);
}

static int gpt_read_config(const cl_json *r, cl_model_config *c) {
    int ok = cl_json_get_int(r, "n_layer", &c->layers) && cl_json_get_int(r, "n_head", &c->heads) &&
             cl_json_get_int(r, "n_embd", &c->channels) && cl_json_get_int(r, "n_positions", &c->seq_len) &&
             cl_json_get_int(r, "vocab_size", &c->vocab);
    /* the MLP's width (Hugging Face GPT-2's n_inner: absent or null is 4 x n_embd, kept as 0, the default) */
    const cl_json *fi = cl_json_get(r, "n_inner");
    if (ok && fi && fi->type != CL_JSON_NULL) ok = cl_json_get_int(r, "n_inner", &c->mlp_width);
    if (ok && (int64_t)c->mlp_width == 4 * (int64_t)c->channels) c->mlp_width = 0;
    return ok;
}

/* The resume match the token families share (family.h), in this order. */
int cl_family_tokens_diff(const cl_model_config *a, const cl_model_config *b, const char *width_name, char *field,
                          size_t n, int *va, int *vb) {
    CL_FAMILY_DIFF("layers", a->layers, b->layers);
    CL_FAMILY_DIFF("heads", a->heads, b->heads);
    CL_FAMILY_DIFF("channels", a->channels, b->channels);
    CL_FAMILY_DIFF("vocab", a->vocab, b->vocab);
    CL_FAMILY_DIFF("context", a->seq_len, b->seq_len);
    CL_FAMILY_DIFF(width_name, (int)cl_model_mlp_width(a), (int)cl_model_mlp_width(b));
    CL_FAMILY_DIFF("kv-heads", cl_model_kv_heads(a), cl_model_kv_heads(b));
    return 0;
}

static int gpt_config_diff(const cl_model_config *a, const cl_model_config *b, char *field, size_t n, int *va, int *vb) {
    return cl_family_tokens_diff(a, b, "mlp-width", field, n, va, vb);
}

/* Hugging Face GPT-2 settings cleave's model does not have are refused, not ignored (the import's hf_check). */
static cl_status gpt_hf_check(const cl_json *r, const char *path) {
    const cl_json *v = cl_json_get(r, "activation_function");
    if (v && (v->type != CL_JSON_STRING || (strcmp(v->string, "gelu_new") && strcmp(v->string, "gelu_pytorch_tanh"))))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: activation_function %s: cleave's GPT-2 uses gelu_new (tanh)", path,
                        v->type == CL_JSON_STRING ? v->string : "(not a string)");
    v = cl_json_get(r, "layer_norm_epsilon");
    if (v && (v->type != CL_JSON_NUMBER || fabs(v->number - 1e-5) > 1e-12))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: layer_norm_epsilon %g: cleave's layernorm uses 1e-05", path,
                        v->type == CL_JSON_NUMBER ? v->number : NAN);
    /* n_inner, the MLP's width, is the configuration's (cl_ckpt_config_parse) */
    v = cl_json_get(r, "tie_word_embeddings");
    if (v && !(v->type == CL_JSON_BOOL && v->boolean))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: tie_word_embeddings is not true: cleave ties the LM head to wte", path);
    v = cl_json_get(r, "scale_attn_weights");
    if (v && !(v->type == CL_JSON_BOOL && v->boolean))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: scale_attn_weights is not true: cleave scales attention by 1/sqrt(head size)", path);
    v = cl_json_get(r, "scale_attn_by_inverse_layer_idx");
    if (v && !(v->type == CL_JSON_BOOL && !v->boolean))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: scale_attn_by_inverse_layer_idx is set: cleave does not scale by layer", path);
    return CL_OK;
}

const cl_family cl_family_gpt = {
    /* GPT2LMHeadModel's names are GPT2Model's under "transformer."; h.N.attn.bias and .masked_bias are the causal
     * mask buffers some versions save; Conv1D stores [in, out] as cleave does, so nothing is transposed */
    .pub = {.name = "gpt", .tokens = 1, .data = "kjv.txt", .sample = "", .model_type = "gpt2", .hf_arch = "GPT2LMHeadModel",
            .hf_prefix = "transformer.", .hf_buffers = ".attn.bias .attn.masked_bias", .hf_tokenizer = "gpt2", .hf_check = gpt_hf_check},
    .kind = CL_MODEL_GPT,
    .presets = "gpt2-tiny, gpt2-mini, gpt2-small or gpt2, gpt2-medium, gpt2-large, gpt2-xl",
    .preset = gpt_preset,
    .check = gpt_check,
    .runs = gpt_runs,
    .check_tp = gpt_check_tp,
    .setup = cl_family_tokens_setup,
    .describe = gpt_describe,
    .write_config = gpt_write_config,
    .read_config = gpt_read_config,
    .config_diff = gpt_config_diff,
};
