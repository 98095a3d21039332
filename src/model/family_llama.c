/* The Llama family (Hugging Face's LlamaForCausalLM): a token embedding
 * without learned positions, blocks of RMSNorm -> rotary grouped-query
 * attention -> RMSNorm -> SwiGLU MLP, no biases, a final RMSNorm and an LM
 * head tied to the embedding or its own. Its presets are llama-tiny (for
 * tests) and the shapes people train (SmolLM2, TinyLlama, Llama 2 and 3);
 * parameter names are Hugging Face's (model.layers.N.self_attn.q_proj...),
 * linear weights stored as cleave stores GPT's, [in, out] (Hugging Face's
 * nn.Linear stores [out, in]: a transposition at the format boundary); the
 * embedding and lm_head are [vocab, C], as Hugging Face's.
 *
 * Invariants: kv_heads divide heads, heads divide channels; norm is RMSNorm
 * and no_bias is set for every Llama config (the kinds have no biases and
 * no layernorm); the description's local sizes are set by the tokens
 * families' shared setup (cl_family_tokens_setup) before any unit. */
#include "model/family.h"

#include "cleave/kernels.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define LAYERS_MAX (1 << 14) /* as cl_family_tokens_check bounds --layers */

/* rope_scaling of type llama3 (Llama 3.1, 3.2: their config.json's factor, low/high_freq_factor,
 * original_max_position_embeddings); factor 0: none */
static const struct {
    const char *name;
    int layers, channels, heads, kv_heads, ffn, vocab, context, tied;
    double theta, factor, low, high;
    int original;
} presets[] = {
    /* 4 x 64 x 2/3 = 170.7, rounded up to a multiple of 4 (so tp 2 and 4 divide it) */
    {"llama-tiny", 2, 64, 4, 2, 172, 256, 64, 0, 10000, 0, 0, 0, 0},
    {"llama", 2, 64, 4, 2, 172, 256, 64, 0, 10000, 0, 0, 0, 0}, /* the base --model llama's flags change */
    {"smollm2-135m", 30, 576, 9, 3, 1536, 49152, 8192, 1, 100000, 0, 0, 0, 0},
    {"tinyllama-1.1b", 22, 2048, 32, 4, 5632, 32000, 2048, 0, 10000, 0, 0, 0, 0},
    {"llama-3.2-1b", 16, 2048, 32, 8, 8192, 128256, 131072, 1, 500000, 32, 1, 4, 8192},
    {"llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 0, 500000, 0, 0, 0, 0},
    {"llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 0, 10000, 0, 0, 0, 0},
    {"llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 0, 500000, 0, 0, 0, 0},
    {"llama-3.1-405b", 126, 16384, 128, 8, 53248, 128256, 131072, 0, 500000, 8, 1, 4, 8192},
    /* Mixtral's shapes (their experts below): mixtral-tiny, for tests, llama-tiny's attention with F = 128 and
     * the byte vocabulary; mixtral-8x7b, Mistral AI's published shape (46,702,792,704 parameters) */
    {"mixtral-tiny", 2, 64, 4, 2, 128, 256, 64, 0, 10000, 0, 0, 0, 0},
    {"mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768, 0, 1000000, 0, 0, 0, 0},
};

/* Mixtral (MixtralForCausalLM): the shape above with an MoE MLP in every block, E experts top-K, aux coefficient
 * 0.01 (MixtralConfig's router_aux_loss_coef), dropless */
static const struct {
    const char *name;
    int experts, topk;
} moe_presets[] = {{"mixtral-tiny", 8, 2}, {"mixtral-8x7b", 8, 2}};

static int llama_preset(const char *name, cl_model_config *cfg) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].name)) continue;
        cfg->kind = CL_MODEL_LLAMA;
        snprintf(cfg->name, sizeof cfg->name, "%s", presets[i].name);
        cfg->layers = presets[i].layers;
        cfg->channels = presets[i].channels;
        cfg->heads = presets[i].heads;
        cfg->kv_heads = presets[i].kv_heads;
        cfg->mlp_width = presets[i].ffn;
        cfg->vocab = presets[i].vocab;
        cfg->seq_len = presets[i].context;
        cfg->untied = !presets[i].tied;
        cfg->rope_theta = presets[i].theta;
        cfg->rope_factor = presets[i].factor, cfg->rope_low_freq = presets[i].low, cfg->rope_high_freq = presets[i].high;
        cfg->rope_original_context = presets[i].original;
        cfg->rms_norm_eps = 1e-5;
        cfg->norm = CL_NORM_RMS;
        cfg->no_bias = 1;
        for (size_t j = 0; j < sizeof moe_presets / sizeof moe_presets[0]; j++)
            if (!strcmp(name, moe_presets[j].name))
                cfg->experts = moe_presets[j].experts, cfg->experts_per_token = moe_presets[j].topk, cfg->moe_aux_coeff = 0.01;
        return 1;
    }
    return 0;
}

/* The mixture of experts' settings, each named by its flag and its config.json key. */
static cl_status llama_check_moe(const cl_model_config *c) {
    if (c->experts < 0 || c->experts > CL_MOE_MAX_EXPERTS)
        return cl_error(CL_ERR_INVALID, "--experts (num_local_experts) %d must be in [0, %d] (0: a dense MLP)", c->experts, CL_MOE_MAX_EXPERTS);
    if (!c->experts) {
        if (c->experts_per_token) return cl_error(CL_ERR_INVALID, "--experts-per-token (num_experts_per_tok) %d needs --experts", c->experts_per_token);
        if (c->moe_every || c->moe_capacity_factor)
            return cl_error(CL_ERR_INVALID, "--moe-every and --moe-capacity-factor need --experts (a dense model has no MoE blocks)");
        return CL_OK;
    }
    if (c->experts_per_token < 1 || c->experts_per_token > c->experts)
        return cl_error(CL_ERR_INVALID, "--experts-per-token (num_experts_per_tok) %d must be in [1, --experts %d]", c->experts_per_token,
                        c->experts);
    if (c->moe_every < 0 || c->moe_every > c->layers)
        return cl_error(CL_ERR_INVALID, "--moe-every %d must be in [0, --layers %d] (0 or 1: every block)", c->moe_every, c->layers);
    if (!(c->moe_aux_coeff >= 0 && c->moe_aux_coeff <= 1e3))
        return cl_error(CL_ERR_INVALID, "--moe-aux-loss-coeff (router_aux_loss_coef) %g must be in [0, 1000]", c->moe_aux_coeff);
    if (!(c->moe_capacity_factor >= 0 && c->moe_capacity_factor <= 1e3))
        return cl_error(CL_ERR_INVALID, "--moe-capacity-factor %g must be in [0, 1000] (0: dropless)", c->moe_capacity_factor);
    return CL_OK;
}

/* Block l is an MoE block: experts set and (l + 1) a multiple of moe_every (Qwen2-MoE's decoder_sparse_step rule). */
static int llama_is_moe(const cl_model_config *c, int l) {
    int every = c->moe_every > 1 ? c->moe_every : 1;
    return c->experts > 0 && (l + 1) % every == 0;
}

/* rope_scaling llama3's fields, as cl_rope_table takes them (rope.c), with finite bounds */
static cl_status rope_scaling_check(const cl_model_config *c) {
    if (c->rope_factor == 0 && c->rope_low_freq == 0 && c->rope_high_freq == 0 && c->rope_original_context == 0) return CL_OK;
    if (!(c->rope_factor >= 1 && c->rope_factor <= 1e6))
        return cl_error(CL_ERR_INVALID, "--rope-scaling: llama3's factor %g must be in [1, 1e6]", c->rope_factor);
    if (!(c->rope_low_freq > 0 && c->rope_high_freq > c->rope_low_freq && c->rope_high_freq <= 1e6))
        return cl_error(CL_ERR_INVALID, "--rope-scaling: llama3's high_freq_factor %g must exceed its low_freq_factor %g > 0 (at most 1e6)",
                        c->rope_high_freq, c->rope_low_freq);
    if (c->rope_original_context <= 0)
        return cl_error(CL_ERR_INVALID, "--rope-scaling: llama3's original_max_position_embeddings %d must be positive",
                        c->rope_original_context);
    return CL_OK;
}

/* A real as Python's json writes a float: 8.0, not 8 */
static void put_real(cl_strbuf *b, double v) {
    if (v == floor(v) && fabs(v) < 1e15) cl_sb_printf(b, "%.1f", v);
    else cl_sb_printf(b, "%.17g", v);
}

static cl_status llama_check(const cl_model_config *c) {
    CL_TRY(cl_family_tokens_check(c, "--context", "the context (max_position_embeddings)", "--ffn-channels"));
    if ((c->channels / c->heads) % 2)
        return cl_error(CL_ERR_INVALID, "the head width --channels / --heads = %d must be even (rotary positions rotate pairs)",
                        c->channels / c->heads);
    if (!(c->rope_theta > 1 && c->rope_theta <= 1e9))
        return cl_error(CL_ERR_INVALID, "--rope-theta %g must be in (1, 1e9]", c->rope_theta);
    if (!(c->rms_norm_eps > 0 && c->rms_norm_eps < 1))
        return cl_error(CL_ERR_INVALID, "rms_norm_eps %g must be in (0, 1)", c->rms_norm_eps);
    CL_TRY(rope_scaling_check(c));
    if (c->norm != CL_NORM_RMS) return cl_error(CL_ERR_INVALID, "--norm: a Llama model runs rmsnorm only");
    if (!c->no_bias) return cl_error(CL_ERR_INVALID, "bias: a Llama model has no biases");
    return llama_check_moe(c);
}

static cl_status llama_check_tp(const cl_model_config *c, int T, const cl_tp_layout *tl) {
    int tp = tl->tp, kv = cl_model_kv_heads(c);
    if (c->heads % tp)
        return cl_error(CL_ERR_INVALID, "--tp %d must divide the %d attention heads (each rank computes whole heads)", tp, c->heads);
    /* past the key-value heads each is replicated on tp / kv ranks (Megatron's), so one must divide the other */
    if (tp > kv && tp % kv)
        return cl_error(CL_ERR_INVALID, "--tp %d must be a multiple of the %d key-value heads, or divide them", tp, kv);
    if (tp <= kv && kv % tp) return cl_error(CL_ERR_INVALID, "--tp %d must divide the %d key-value heads, or be a multiple of them", tp, kv);
    if (cl_model_mlp_width(c) % tp)
        return cl_error(CL_ERR_INVALID, "--tp %d must divide the MLP's %lld columns (--ffn-channels)", tp, (long long)cl_model_mlp_width(c));
    if (tl->sp && T % tp) return cl_error(CL_ERR_INVALID, "--sequence-parallel: --tp %d must divide the sequence length %d", tp, T);
    return CL_OK;
}

/* model.embed_tokens, the blocks model.layers.0 .. L-1, the final norm with the head (tied or its own lm_head) */
static void llama_describe(cl_desc_builder *b) {
    cl_model_desc *d = b->d;
    if (!cl_desc_add_unit(b, CL_UNIT_TOKEN_EMBED, 'E', 0, "model.embed_tokens")) return;
    cl_desc_add_kind(b);
    for (int l = 0; l < d->cfg.layers && !b->failed; l++) {
        char label[24];
        snprintf(label, sizeof label, "model.layers.%d", l & (LAYERS_MAX - 1)); /* l < LAYERS_MAX: 5 digits at most */
        if (!cl_desc_add_unit(b, llama_is_moe(&d->cfg, l) ? CL_UNIT_MOE_BLOCK : CL_UNIT_LLAMA_BLOCK, 't', l, label)) return;
        cl_desc_add_kind(b);
    }
    if (!cl_desc_add_unit(b, d->cfg.untied ? CL_UNIT_LLAMA_HEAD_UNTIED : CL_UNIT_LLAMA_HEAD, 'L', 0, "lm_head")) return;
    cl_desc_add_kind(b);
    if (d->cfg.untied) d->tied_wte = -1; /* the embedding's table marks its weight tied; an untied head does not read it */
}

/* Hugging Face LlamaForCausalLM's config.json keys; with experts MixtralForCausalLM's (no bias keys: MixtralConfig
 * has none; sliding_window null: the attention sees the whole context) */
static void llama_write_config(cl_strbuf *b, const cl_model_config *c) {
    const cl_model_family *f = &cl_family_llama.pub;
    cl_sb_printf(b, "  \"model_type\": \"%s\",\n  \"architectures\": [\"%s\"],\n", c->experts ? f->hf_moe_type : f->model_type,
                 c->experts ? f->hf_moe_arch : f->hf_arch);
    cl_sb_printf(b, "  \"num_hidden_layers\": %d,\n  \"hidden_size\": %d,\n  \"num_attention_heads\": %d,\n", c->layers, c->channels, c->heads);
    cl_sb_printf(b, "  \"num_key_value_heads\": %d,\n  \"intermediate_size\": %lld,\n", cl_model_kv_heads(c), (long long)cl_model_mlp_width(c));
    cl_sb_printf(b, "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n", c->vocab, c->seq_len);
    cl_sb_printf(b, "  \"rope_theta\": %.17g,\n  \"rms_norm_eps\": %.17g,\n", c->rope_theta, c->rms_norm_eps);
    cl_sb_printf(b, "  \"tie_word_embeddings\": %s,\n  \"hidden_act\": \"silu\",\n%s", c->untied ? "false" : "true",
                 c->experts ? "  \"sliding_window\": null,\n" : "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n");
    if (!c->rope_factor) {
        cl_sb_printf(b, "  \"rope_scaling\": null,\n"); /* the plain rotary table */
    } else { /* as Llama 3.1's config.json has it */
        cl_sb_printf(b, "  \"rope_scaling\": {\"factor\": ");
        put_real(b, c->rope_factor);
        cl_sb_printf(b, ", \"low_freq_factor\": ");
        put_real(b, c->rope_low_freq);
        cl_sb_printf(b, ", \"high_freq_factor\": ");
        put_real(b, c->rope_high_freq);
        cl_sb_printf(b, ", \"original_max_position_embeddings\": %d, \"rope_type\": \"llama3\"},\n", c->rope_original_context);
    }
    if (!c->experts) return;
    /* MixtralConfig's keys, then cleave's own two where set (absent: every block, dropless) */
    cl_sb_printf(b, "  \"num_local_experts\": %d,\n  \"num_experts_per_tok\": %d,\n  \"router_aux_loss_coef\": %.17g,\n",
                 c->experts, c->experts_per_token, c->moe_aux_coeff);
    if (c->moe_every > 1) cl_sb_printf(b, "  \"moe_every\": %d,\n", c->moe_every);
    if (c->moe_capacity_factor > 0) cl_sb_printf(b, "  \"moe_capacity_factor\": %.17g,\n", c->moe_capacity_factor);
}

/* rope_scaling's type: "rope_type", or "type" as older configs spell it */
static const cl_json *rope_type(const cl_json *v) { return cl_json_get(v, "rope_type") ? cl_json_get(v, "rope_type") : cl_json_get(v, "type"); }

/* Hugging Face LlamaConfig settings cleave's Llama does not have are refused, not ignored (the import's hf_check). */
static cl_status llama_hf_check(const cl_json *r, const char *path) {
    const cl_json *v = cl_json_get(r, "hidden_act");
    if (v && (v->type != CL_JSON_STRING || strcmp(v->string, "silu")))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: hidden_act %s: cleave's Llama MLP uses silu (SwiGLU)", path,
                        v->type == CL_JSON_STRING ? v->string : "(not a string)");
    static const char *const biases[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++)
        if ((v = cl_json_get(r, biases[i])) && !(v->type == CL_JSON_BOOL && !v->boolean))
            return cl_error(CL_ERR_UNSUPPORTED, "%s: %s is not false: cleave's Llama has no biases", path, biases[i]);
    v = cl_json_get(r, "rope_scaling");
    if (v && v->type != CL_JSON_NULL) {
        const cl_json *t = v->type == CL_JSON_OBJECT ? rope_type(v) : NULL;
        if (!t || t->type != CL_JSON_STRING || strcmp(t->string, "llama3"))
            return cl_error(CL_ERR_UNSUPPORTED, "%s: rope_scaling of type %s: cleave's rotary table scales by type llama3 only (or null)",
                            path, t && t->type == CL_JSON_STRING ? t->string : "(none given)");
        static const char *const keys[] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
        for (int i = 0; i < 4; i++) {
            const cl_json *k = cl_json_get(v, keys[i]);
            if (!k || k->type != CL_JSON_NUMBER)
                return cl_error(CL_ERR_FORMAT, "%s: rope_scaling of type llama3 needs the number \"%s\"", path, keys[i]);
        }
    }
    /* MixtralConfig's: a sliding window shorter than the context masks what cleave's attention sees; the router's
     * jitter noise multiplies its input in training */
    int win, ctx;
    if ((v = cl_json_get(r, "sliding_window")) && v->type != CL_JSON_NULL &&
        !(cl_json_get_int(r, "sliding_window", &win) && cl_json_get_int(r, "max_position_embeddings", &ctx) && win >= ctx))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: sliding_window is not null (nor at least max_position_embeddings): cleave's attention "
                        "sees the whole context", path);
    if ((v = cl_json_get(r, "router_jitter_noise")) && !(v->type == CL_JSON_NUMBER && v->number == 0))
        return cl_error(CL_ERR_UNSUPPORTED, "%s: router_jitter_noise is not 0: cleave's router has no noise", path);
    int hd, C, H;
    if (cl_json_get(r, "head_dim") && cl_json_get_int(r, "head_dim", &hd) && cl_json_get_int(r, "hidden_size", &C) &&
        cl_json_get_int(r, "num_attention_heads", &H) && H > 0 && hd != C / H)
        return cl_error(CL_ERR_UNSUPPORTED, "%s: head_dim %d is not hidden_size / num_attention_heads = %d: cleave's heads split the width",
                        path, hd, C / H);
    return CL_OK;
}

static int get_num(const cl_json *r, const char *key, double *out) {
    const cl_json *v = cl_json_get(r, key);
    if (!v || v->type != CL_JSON_NUMBER) return 0;
    *out = v->number;
    return 1;
}

static int llama_read_config(const cl_json *r, cl_model_config *c) {
    int ok = cl_json_get_int(r, "num_hidden_layers", &c->layers) && cl_json_get_int(r, "hidden_size", &c->channels) &&
             cl_json_get_int(r, "num_attention_heads", &c->heads) && cl_json_get_int(r, "vocab_size", &c->vocab) &&
             cl_json_get_int(r, "max_position_embeddings", &c->seq_len) && cl_json_get_int(r, "intermediate_size", &c->mlp_width) &&
             get_num(r, "rope_theta", &c->rope_theta) && get_num(r, "rms_norm_eps", &c->rms_norm_eps);
    /* num_key_value_heads absent: as many as heads (Hugging Face's default) */
    if (ok && cl_json_get(r, "num_key_value_heads")) ok = cl_json_get_int(r, "num_key_value_heads", &c->kv_heads);
    const cl_json *t = cl_json_get(r, "tie_word_embeddings"); /* absent: false, Hugging Face LlamaConfig's default */
    if (t && t->type != CL_JSON_BOOL) ok = 0;
    c->untied = !(t && t->boolean);
    if (ok && c->kv_heads == c->heads) c->kv_heads = 0;
    /* rope_scaling: null or absent, or llama3's four numbers */
    const cl_json *sc = cl_json_get(r, "rope_scaling");
    if (ok && sc && sc->type != CL_JSON_NULL) {
        const cl_json *t = sc->type == CL_JSON_OBJECT ? rope_type(sc) : NULL;
        ok = t && t->type == CL_JSON_STRING && !strcmp(t->string, "llama3") && get_num(sc, "factor", &c->rope_factor) &&
             get_num(sc, "low_freq_factor", &c->rope_low_freq) && get_num(sc, "high_freq_factor", &c->rope_high_freq) &&
             cl_json_get_int(sc, "original_max_position_embeddings", &c->rope_original_context);
    }
    if (ok && (int64_t)c->mlp_width == 4 * (int64_t)c->channels) c->mlp_width = 0;
    c->norm = CL_NORM_RMS;
    c->no_bias = 1;
    if (ok && cl_json_get(r, "num_local_experts")) {
        double coef = 0.01; /* MixtralConfig's default */
        ok = cl_json_get_int(r, "num_local_experts", &c->experts) && cl_json_get_int(r, "num_experts_per_tok", &c->experts_per_token) &&
             (!cl_json_get(r, "router_aux_loss_coef") || get_num(r, "router_aux_loss_coef", &coef)) &&
             (!cl_json_get(r, "moe_every") || cl_json_get_int(r, "moe_every", &c->moe_every)) &&
             (!cl_json_get(r, "moe_capacity_factor") || get_num(r, "moe_capacity_factor", &c->moe_capacity_factor));
        c->moe_aux_coeff = coef;
    }
    return ok;
}

static int llama_config_diff(const cl_model_config *a, const cl_model_config *b, char *field, size_t n, int *va, int *vb) {
    if (cl_family_tokens_diff(a, b, "ffn-channels", field, n, va, vb)) return 1;
    CL_FAMILY_DIFF("tie-embeddings", !a->untied, !b->untied);
    CL_FAMILY_DIFF("experts", a->experts, b->experts);
    CL_FAMILY_DIFF("experts-per-token", a->experts_per_token, b->experts_per_token);
    CL_FAMILY_DIFF("moe-every", a->moe_every, b->moe_every);
    if (a->moe_capacity_factor != b->moe_capacity_factor) { /* the aux coefficient is a training setting: it may change */
        snprintf(field, n, "moe-capacity-factor (x 1000)");
        *va = (int)lround(a->moe_capacity_factor * 1e3), *vb = (int)lround(b->moe_capacity_factor * 1e3);
        return 1;
    }
    /* the two reals, compared exactly, reported rounded (rope_theta to an integer, the epsilon in units of 1e-9) */
    if (a->rope_theta != b->rope_theta) {
        snprintf(field, n, "rope-theta");
        *va = (int)lround(a->rope_theta), *vb = (int)lround(b->rope_theta);
        return 1;
    }
    /* rope_scaling's reals, compared exactly, reported in thousandths */
    const double ra[3] = {a->rope_factor, a->rope_low_freq, a->rope_high_freq}, rb[3] = {b->rope_factor, b->rope_low_freq, b->rope_high_freq};
    static const char *const rn[3] = {"rope factor (x 1e-3)", "rope low_freq (x 1e-3)", "rope high_freq (x 1e-3)"};
    for (int i = 0; i < 3; i++)
        if (ra[i] != rb[i]) {
            snprintf(field, n, "%s", rn[i]);
            *va = (int)lround(ra[i] * 1e3), *vb = (int)lround(rb[i] * 1e3);
            return 1;
        }
    CL_FAMILY_DIFF("rope original context", a->rope_original_context, b->rope_original_context);
    if (a->rms_norm_eps != b->rms_norm_eps) {
        snprintf(field, n, "rms_norm_eps (x 1e-9)");
        *va = (int)lround(a->rms_norm_eps * 1e9), *vb = (int)lround(b->rms_norm_eps * 1e9);
        return 1;
    }
    return 0;
}

const cl_family cl_family_llama = {
    /* LlamaForCausalLM's names are the parameters' own; its nn.Linear weights (*_proj.weight) are stored [out, in];
     * older versions save each layer's rotary inverse frequencies (a buffer). With experts MixtralForCausalLM's
     * (model_type mixtral): the router block_sparse_moe.gate and the experts' w1, w2, w3 nn.Linear too */
    .pub = {.name = "llama", .tokens = 1, .data = "kjv.txt", .sample = "", .model_type = "llama", .hf_arch = "LlamaForCausalLM",
            .hf_prefix = "", .hf_buffers = ".rotary_emb.inv_freq",
            .hf_keys = "num_hidden_layers hidden_size num_attention_heads intermediate_size vocab_size max_position_embeddings "
                       "rope_theta rms_norm_eps",
            .hf_moe_type = "mixtral", .hf_moe_arch = "MixtralForCausalLM", .hf_moe_keys = "num_local_experts num_experts_per_tok",
            .hf_transposed = "_proj.weight .block_sparse_moe.gate.weight .w1.weight .w2.weight .w3.weight", .hf_f16 = 1,
            .hf_tokenizer = "hf", .hf_check = llama_hf_check},
    .kind = CL_MODEL_LLAMA,
    .presets = "llama-tiny, llama (flags: --kv-heads --ffn-channels --rope-theta --rope-scaling --tie-embeddings --experts "
               "--experts-per-token --moe-every --moe-aux-loss-coeff --moe-capacity-factor), smollm2-135m, tinyllama-1.1b, "
               "llama-3.2-1b, llama-3-8b, llama-2-70b, llama-3-70b, llama-3.1-405b, mixtral-tiny, mixtral-8x7b",
    .preset = llama_preset,
    .check = llama_check,
    .check_tp = llama_check_tp,
    .setup = cl_family_tokens_setup,
    .describe = llama_describe,
    .write_config = llama_write_config,
    .read_config = llama_read_config,
    .config_diff = llama_config_diff,
};
