/* Flag parsing for the cleave command (see args.h). Accepts --flag VALUE and
 * --flag=VALUE; short aliases like -h. */
#include "args.h"
#include "cleave/train.h" /* cl_offload */

#include "cleave/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int find_flag(const cli_flag *flags, int n, const char *name, size_t len) {
    for (int i = 0; i < n; i++) {
        if (strlen(flags[i].name) == len && !strncmp(flags[i].name, name, len)) return i;
        if (flags[i].alias[0] && strlen(flags[i].alias) == len && !strncmp(flags[i].alias, name, len)) return i;
    }
    return -1;
}

cl_status cli_parse(cli_args *a, const cli_flag *flags, int nflags, int argc, char **argv, int start) {
    memset(a, 0, sizeof *a);
    if (nflags < 0 || nflags > CLI_MAX_FLAGS)
        return cl_error(CL_ERR_INTERNAL, "a flag table of %d flags: the parser holds at most %d (CLI_MAX_FLAGS, cli/args.h)", nflags,
                        CLI_MAX_FLAGS);
    a->flags = flags;
    a->nflags = nflags;
    for (int i = start; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] != '-' || !arg[1]) return cl_error(CL_ERR_INVALID, "unexpected argument '%s' (flags start with --)", arg);
        const char *name = arg + 1;
        if (*name == '-') name++;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        int f = find_flag(flags, nflags, name, len);
        if (f < 0) return cl_error(CL_ERR_INVALID, "unknown flag '%.*s' (see --help)", (int)(len + (size_t)(name - arg)), arg);
        if (flags[f].takes_value) {
            if (eq) a->values[f] = eq + 1;
            else if (i + 1 < argc) a->values[f] = argv[++i];
            else return cl_error(CL_ERR_INVALID, "flag --%s needs a value", flags[f].name);
        } else {
            if (eq) return cl_error(CL_ERR_INVALID, "flag --%s takes no value", flags[f].name);
            a->values[f] = "1";
        }
    }
    return CL_OK;
}

const char *cli_get(const cli_args *a, const char *name) {
    int f = find_flag(a->flags, a->nflags, name, strlen(name));
    return f >= 0 ? a->values[f] : NULL;
}

void cli_default(cli_args *a, const char *name, const char *value) {
    int f = find_flag(a->flags, a->nflags, name, strlen(name));
    if (f >= 0 && !a->values[f]) a->values[f] = value;
}

/* How a message names flag `name`: "--steps", or for a --config file's
 * value "run.json: \"optimizer.lr\"". */
typedef struct {
    char s[320];
} flag_label;
static flag_label label(const cli_args *a, const char *name) {
    flag_label l;
    int f = find_flag(a->flags, a->nflags, name, strlen(name));
    if (f >= 0 && a->key[f]) snprintf(l.s, sizeof l.s, "%s: \"%s\"", a->config, a->key[f]);
    else snprintf(l.s, sizeof l.s, "--%s", name);
    return l;
}

/* A numeric getter's value: NULL when absent; a --config file's JSON string refused (a number is expected). */
static cl_status numeric(const cli_args *a, const char *name, const char **v) {
    int f = find_flag(a->flags, a->nflags, name, strlen(name));
    *v = f >= 0 ? a->values[f] : NULL;
    if (*v && a->json[f] == CL_JSON_STRING + 1)
        return cl_error(CL_ERR_INVALID, "%s: \"%s\" is a string; a number is expected", label(a, name).s, *v);
    return CL_OK;
}

cl_status cli_int(const cli_args *a, const char *name, int *out, int min, int max) {
    const char *v;
    CL_TRY(numeric(a, name, &v));
    if (!v) return CL_OK;
    errno = 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno) return cl_error(CL_ERR_INVALID, "%s: '%s' is not an integer", label(a, name).s, v);
    if (x < min || x > max) {
        if (min == 1 && x < 1) return cl_error(CL_ERR_INVALID, "%s must be positive (got %s)", label(a, name).s, v);
        return cl_error(CL_ERR_INVALID, "%s must be between %d and %d (got %s)", label(a, name).s, min, max, v);
    }
    *out = (int)x;
    return CL_OK;
}

cl_status cli_u64(const cli_args *a, const char *name, uint64_t *out) {
    const char *v;
    CL_TRY(numeric(a, name, &v));
    if (!v) return CL_OK;
    errno = 0;
    char *end;
    if (*v == '-') return cl_error(CL_ERR_INVALID, "%s must be non-negative (got %s)", label(a, name).s, v);
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || *end || errno) return cl_error(CL_ERR_INVALID, "%s: '%s' is not a non-negative integer", label(a, name).s, v);
    *out = x;
    return CL_OK;
}

cl_status cli_float(const cli_args *a, const char *name, float *out, double min, double max) {
    const char *v;
    CL_TRY(numeric(a, name, &v));
    if (!v) return CL_OK;
    errno = 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x)) return cl_error(CL_ERR_INVALID, "%s: '%s' is not a number", label(a, name).s, v);
    if (x < min || x > max) return cl_error(CL_ERR_INVALID, "%s must be between %g and %g (got %s)", label(a, name).s, min, max, v);
    *out = (float)x;
    return CL_OK;
}

cl_status cli_bytes(const cli_args *a, const char *name, size_t *out) {
    const char *v = cli_get(a, name);
    if (!v) return CL_OK;
    cl_status s = cl_parse_bytes(v, out);
    return s ? cl_error_context(s, "%s", label(a, name).s) : CL_OK;
}

cl_status cli_offload(const cli_args *a, int *out) {
    const char *v = cli_get(a, "offload-optimizer");
    if (!v) return CL_OK;
    if (!strcmp(v, "none")) *out = CL_OFFLOAD_NONE;
    else if (!strcmp(v, "host")) *out = CL_OFFLOAD_HOST;
    else if (!strcmp(v, "disk")) *out = CL_OFFLOAD_DISK;
    else return cl_error(CL_ERR_INVALID, "unknown %s '%s' (none, host or disk)", label(a, "offload-optimizer").s, v);
    return CL_OK;
}

cl_status cli_format(const cli_args *a, const char *name, cl_dtype *out) {
    const char *v = cli_get(a, name);
    if (!v) return CL_OK;
    if (!strcmp(v, "fp32")) *out = CL_F32;
    else if (!strcmp(v, "bf16")) *out = CL_BF16;
    else return cl_error(CL_ERR_INVALID, "unknown %s '%s' (fp32 or bf16)", label(a, name).s, v);
    return CL_OK;
}

/* --rope-scaling none | llama3:FACTOR,LOW_FREQ_FACTOR,HIGH_FREQ_FACTOR,ORIGINAL_CONTEXT (Llama 3.1's rope_scaling; checked by the family) */
static cl_status cli_rope_scaling(const cli_args *a, cl_model_config *mc) {
    const char *v = cli_get(a, "rope-scaling");
    if (!v) return CL_OK;
    if (!strcmp(v, "none")) {
        mc->rope_factor = mc->rope_low_freq = mc->rope_high_freq = 0, mc->rope_original_context = 0;
        return CL_OK;
    }
    double f, lo, hi;
    int orig, end = 0;
    if (sscanf(v, "llama3:%lf,%lf,%lf,%d%n", &f, &lo, &hi, &orig, &end) != 4 || v[end])
        return cl_error(CL_ERR_INVALID, "--rope-scaling '%s': none, or llama3:FACTOR,LOW_FREQ_FACTOR,HIGH_FREQ_FACTOR,ORIGINAL_CONTEXT "
                                        "(Llama 3.1's: llama3:8,1,4,8192)", v);
    mc->rope_factor = f, mc->rope_low_freq = lo, mc->rope_high_freq = hi, mc->rope_original_context = orig;
    return CL_OK;
}

cl_status cli_parse_model(const cli_args *a, cl_model_config *mc, int *seq_len) { return cli_parse_model_from(a, NULL, mc, seq_len); }

cl_status cli_parse_model_from(const cli_args *a, const cl_model_config *base, cl_model_config *mc, int *seq_len) {
    const char *name = cli_get(a, "model");
    if (base && !name) *mc = *base;
    else CL_TRY(cl_model_preset(name ? name : "gpt2-tiny", mc));
    int custom = 0;
    const char *shape[] = {"layers", "channels", "heads", "vocab", "context", "kv-heads", "mlp-width", "norm",
                           "ffn-channels", "rope-theta", "tie-embeddings", "experts", "experts-per-token", "moe-every",
                           "moe-aux-loss-coeff", "moe-capacity-factor", "rope-scaling"};
    for (int i = 0; i < 17; i++)
        if (cli_get(a, shape[i])) {
            custom = 1;
            if (!cl_model_family_of(mc)->tokens) return cl_error(CL_ERR_INVALID, "--%s applies to GPT models, not %s", shape[i], mc->name);
            if (i >= 8 && strcmp(cl_model_family_of(mc)->name, "llama"))
                return cl_error(CL_ERR_INVALID, "--%s applies to Llama models (--model llama, llama-tiny, ...), not %s", shape[i], mc->name);
        }
    const cl_model_config named = *mc;
    CL_TRY(cli_int(a, "layers", &mc->layers, 1, 1 << 20));
    CL_TRY(cli_int(a, "channels", &mc->channels, 1, 1 << 20));
    CL_TRY(cli_int(a, "heads", &mc->heads, 1, 1 << 20));
    CL_TRY(cli_int(a, "vocab", &mc->vocab, 1, 1 << 30));
    CL_TRY(cli_int(a, "context", &mc->seq_len, 1, 1 << 20));
    CL_TRY(cli_int(a, "kv-heads", &mc->kv_heads, 1, 1 << 20));
    CL_TRY(cli_int(a, "mlp-width", &mc->mlp_width, 1, 1 << 28));
    /* Llama's (checked above to be one): the MLP's width by its Hugging Face meaning, the rotary base, a tied head */
    CL_TRY(cli_int(a, "ffn-channels", &mc->mlp_width, 1, 1 << 28));
    float theta = (float)mc->rope_theta;
    CL_TRY(cli_float(a, "rope-theta", &theta, 1, 1e9));
    if (cli_get(a, "rope-theta")) mc->rope_theta = theta;
    int tie = !mc->untied;
    CL_TRY(cli_int(a, "tie-embeddings", &tie, 0, 1));
    if (cli_get(a, "tie-embeddings")) mc->untied = !tie;
    /* Llama's mixture of experts (the family checks them together, naming the config.json keys) */
    CL_TRY(cli_int(a, "experts", &mc->experts, 0, 1 << 20));
    CL_TRY(cli_int(a, "experts-per-token", &mc->experts_per_token, 1, 1 << 20));
    CL_TRY(cli_int(a, "moe-every", &mc->moe_every, 0, 1 << 20));
    if (cli_get(a, "experts") && !named.experts && !cli_get(a, "moe-aux-loss-coeff")) mc->moe_aux_coeff = 0.01;
    if (!mc->experts && !cli_get(a, "experts-per-token")) mc->experts_per_token = 0;
    float coef = (float)mc->moe_aux_coeff, capf = (float)mc->moe_capacity_factor;
    CL_TRY(cli_float(a, "moe-aux-loss-coeff", &coef, 0, 1e3));
    CL_TRY(cli_float(a, "moe-capacity-factor", &capf, 0, 1e3));
    if (cli_get(a, "moe-aux-loss-coeff")) mc->moe_aux_coeff = coef;
    if (cli_get(a, "moe-capacity-factor")) mc->moe_capacity_factor = capf;
    CL_TRY(cli_rope_scaling(a, mc));
    const char *norm = cli_get(a, "norm");
    if (norm && !strcmp(norm, "layernorm")) mc->norm = CL_NORM_LAYER;
    else if (norm && !strcmp(norm, "rmsnorm")) mc->norm = CL_NORM_RMS;
    else if (norm) return cl_error(CL_ERR_INVALID, "unknown --norm '%s' (layernorm or rmsnorm)", norm);
    if (mc->kv_heads == mc->heads) mc->kv_heads = 0; /* the defaults, as a checkpoint records them */
    if ((int64_t)mc->mlp_width == 4 * (int64_t)mc->channels) mc->mlp_width = 0;
    *seq_len = 0;
    CL_TRY(cli_int(a, "seq-len", seq_len, 1, 1 << 20));
    if (cli_get(a, "seq-len") && !cl_model_family_of(mc)->tokens) return cl_error(CL_ERR_INVALID, "--seq-len applies to GPT models");
    if (custom) {
        if (!cli_get(a, "context") && *seq_len > mc->seq_len) mc->seq_len = *seq_len;
        /* the preset's name stays when the shape flags only repeat its values (a resolved configuration gives them all) */
        if (mc->layers != named.layers || mc->channels != named.channels || mc->heads != named.heads || mc->vocab != named.vocab ||
            mc->seq_len != named.seq_len || mc->kv_heads != named.kv_heads || mc->mlp_width != named.mlp_width || mc->norm != named.norm ||
            mc->rope_theta != named.rope_theta || mc->untied != named.untied || mc->experts != named.experts ||
            mc->experts_per_token != named.experts_per_token || mc->moe_every != named.moe_every ||
            mc->moe_capacity_factor != named.moe_capacity_factor || mc->rope_factor != named.rope_factor ||
            mc->rope_low_freq != named.rope_low_freq || mc->rope_high_freq != named.rope_high_freq ||
            mc->rope_original_context != named.rope_original_context)
            snprintf(mc->name, sizeof mc->name, "custom");
    }
    CL_TRY(cl_model_config_check(mc));
    if (cl_model_family_of(mc)->tokens && *seq_len > mc->seq_len)
        return cl_error(CL_ERR_INVALID, "--seq-len %d is longer than the model's context (%d)", *seq_len, mc->seq_len);
    return CL_OK;
}

const char *cli_man_summary;

/* Text as troff reads it: backslashes, hyphens and a line's leading '.' or
 * '\'' escaped; n bytes of s, or all of it for n < 0. */
static void man_text(const char *s, int n) {
    for (int i = 0; n < 0 ? s[i] != 0 : i < n; i++) {
        if (i == 0 && (s[0] == '.' || s[0] == '\'')) fputs("\\&", stdout);
        if (s[i] == '\\') fputs("\\e", stdout);
        else if (s[i] == '-') fputs("\\-", stdout);
        else putchar(s[i]);
    }
}

/* One line of usage text: [s, end of line); returns the next line or NULL. */
static const char *next_line(const char *s, int *len) {
    const char *nl = strchr(s, '\n');
    *len = nl ? (int)(nl - s) : (int)strlen(s);
    return nl ? nl + 1 : NULL;
}

static void print_man(const char *usage, const cli_flag *flags, int nflags) {
    /* the page's name: the synopsis's leading lower-case words ("cleave trace render") */
    const char *syn = strncmp(usage, "usage: ", 7) ? usage : usage + 7;
    char name[64] = "";
    size_t k = 0;
    for (const char *p = syn; *p && k + 1 < sizeof name; p++) {
        if (*p == ' ') {
            const char *w = p + 1;
            while (*w >= 'a' && *w <= 'z') w++;
            if (w == p + 1 || (*w != ' ' && *w != '\n' && *w)) break;
            name[k++] = '-';
        } else if (*p >= 'a' && *p <= 'z') {
            name[k++] = *p;
        } else {
            break;
        }
    }
    name[k] = 0;
    printf(".TH \"");
    for (size_t i = 0; i < k; i++) {
        if (name[i] == '-') fputs("\\-", stdout);
        else putchar(name[i] - 'a' + 'A');
    }
    printf("\" 1 \"\" \"cleave\" \"cleave manual\"\n.SH NAME\n");
    man_text(name, -1);
    printf(" \\- ");
    man_text(cli_man_summary, -1);
    printf("\n.SH SYNOPSIS\n.nf\n");
    int len;
    const char *line = syn, *next;
    for (; line; line = next) { /* the synopsis: lines up to the first blank one */
        next = next_line(line, &len);
        if (len == 0) break;
        int skip = 0;
        while (skip < len && line[skip] == ' ') skip++;
        man_text(line + skip, len - skip);
        putchar('\n');
    }
    printf(".fi\n");
    int verbatim = 0, para = 0;
    for (line = next; line; line = next) { /* the description: paragraphs; indented lines kept as they are */
        next = next_line(line, &len);
        if (!para++) printf(".SH DESCRIPTION\n");
        if (len == 0) {
            if (verbatim) printf(".fi\n");
            verbatim = 0;
            printf(".PP\n");
            continue;
        }
        if (line[0] == ' ' && !verbatim) printf(".nf\n");
        if (line[0] != ' ' && verbatim) printf(".fi\n");
        verbatim = line[0] == ' ';
        man_text(line, len);
        putchar('\n');
    }
    if (verbatim) printf(".fi\n");
    if (nflags) printf(".SH OPTIONS\n");
    for (int i = 0; i < nflags; i++) {
        printf(".TP\n\\fB\\-\\-");
        man_text(flags[i].name, -1);
        printf("\\fR");
        if (flags[i].alias[0]) {
            printf(", \\fB\\-");
            man_text(flags[i].alias, -1);
            printf("\\fR");
        }
        printf("%s\n", flags[i].takes_value ? " \\fIX\\fR" : "");
        man_text(flags[i].help, -1);
        putchar('\n');
    }
}

void cli_print_help(const char *usage, const cli_flag *flags, int nflags) {
    if (cli_man_summary) {
        print_man(usage, flags, nflags);
        return;
    }
    printf("%s\n\nFlags:\n", usage);
    for (int i = 0; i < nflags; i++) cli_print_flag(&flags[i]);
}

void cli_print_flag(const cli_flag *f) {
    char left[64];
    snprintf(left, sizeof left, "--%s%s%s%s", f->name, f->alias[0] ? ", -" : "", f->alias, f->takes_value ? " X" : "");
    printf("  %-34s %s\n", left, f->help);
}

int cli_exit_status(cl_status s) { return (s == CL_ERR_INTERNAL || s == CL_ERR_COMM || s == CL_ERR_NUMERIC) ? 1 : 2; }

int cli_fail(cl_status s) {
    fprintf(stderr, "cleave: error: %s\n", cl_last_error());
    return cli_exit_status(s);
}
