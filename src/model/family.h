/* Model families (internal to src/model): one table per family, the one
 * place that knows what a family is. A family says its presets, how its
 * configuration is checked (and what of it the unit kinds can run), what
 * tensor parallelism must divide, the sizes a description holds beyond its
 * units, and how its unit list is built (from the unit kinds' tables,
 * nn/kind.h). describe.c holds the builder the families share and asks the
 * table; a new family (Llama: grouped-query attention, RMSNorm, rotary
 * positions, no biases) is one more file and one more line in family_of.
 * A family also says its checkpoint config.json fields (written, read,
 * compared for a resume) and its classes, so src/train names no family.
 *
 * Invariants: a family's describe adds units in model order and completes
 * each from its kind's table (cl_desc_add_kind), so parameters come in
 * checkpoint order; it never sizes a unit itself. */
#ifndef CLEAVE_MODEL_FAMILY_H
#define CLEAVE_MODEL_FAMILY_H

#include "cleave/json.h"
#include "cleave/model.h"
#include "nn/kind.h"

/* A description being built (describe.c). */
typedef struct {
    cl_model_desc *d;
    int cap_units, cap_params;
    int failed;
    cl_sizer z; /* too_large: a size passed CL_DESC_MAX_FLOATS (or int, where a unit keeps it as int) */
} cl_desc_builder;

/* A unit of this kind appended (its geometry for the caller to set), or NULL when out of memory. */
cl_unit *cl_desc_add_unit(cl_desc_builder *b, cl_unit_kind kind, char code, int index, const char *label);
/* The unit just added, its geometry set, completed from its kind's table: sizes, FLOPs, parameters. */
void cl_desc_add_kind(cl_desc_builder *b);
/* A linear unit (mode: cl_unit's tp_mode), an elementwise one of n floats, the classifier loss. */
void cl_desc_linear(cl_desc_builder *b, const char *label, int index, int64_t in, int64_t out, cl_linear_tp mode);
void cl_desc_elementwise(cl_desc_builder *b, cl_unit_kind kind, char code, int index, const char *label, int64_t n);
void cl_desc_classify(cl_desc_builder *b, int64_t classes);

/* Each size a config may give is at most this (a config.json is not trusted), so that the geometry stays
 * within int; the description then checks every product. */
#define CL_DESC_DIM_MAX (1 << 20)
#define CL_DESC_WIDTH_MAX (1 << 28)

typedef struct cl_family {
    cl_model_family pub;
    cl_model_kind kind;
    const char *presets;   /* its preset names, for the unknown-model message */
    /* 1 and cfg filled (zeroed first) if name is one of its presets, else 0 */
    int (*preset)(const char *name, cl_model_config *cfg);
    cl_status (*check)(const cl_model_config *c);
    /* what of a checked config its unit kinds run (NULL: all of it) */
    cl_status (*runs)(const cl_model_config *c);
    /* what tp > 1 (and sequence parallelism) must divide; NULL: the family is not split */
    cl_status (*check_tp)(const cl_model_config *c, int T, const cl_tp_layout *tl);
    /* the description's sizes beyond its units, before they are added (NULL: none) */
    cl_status (*setup)(cl_model_desc *d);
    void (*describe)(cl_desc_builder *b);
    /* floats of one sample's input (NULL: 0, token ids) */
    int64_t (*input_floats)(const cl_model_config *c);
    /* config.json (checkpoints, config_json.c): its own fields written as lines "  \"key\": value,\n" (the
     * family's name, preset and tokenizer follow them); read back from the object r into c (zeroed, its kind set;
     * 1, or 0 when a field is missing or not an integer in range: the caller's message); and the first of them
     * where a and b (both of this family) differ, so that a checkpoint cannot resume another model (as
     * cl_model_config_diff, through CL_FAMILY_DIFF) */
    void (*write_config)(cl_strbuf *b, const cl_model_config *c);
    int (*read_config)(const cl_json *r, cl_model_config *c);
    int (*config_diff)(const cl_model_config *a, const cl_model_config *b, char *field, size_t n, int *va, int *vb);
    /* the classes a classifier's last layer has (NULL: not a classifier, 0) */
    int64_t (*classes)(const cl_model_config *c);
} cl_family;

extern const cl_family cl_family_gpt, cl_family_mlp, cl_family_cnn, cl_family_llama;

/* The token families' (GPT, Llama) setup: the vocabulary padded to a multiple of vocab_div x tp, and this
 * tensor-parallel rank's heads, channels, key-value heads and columns, MLP width and vocabulary rows. */
cl_status cl_family_tokens_setup(cl_model_desc *d);
/* Their shared checks (GPT's and Llama's), each naming its flag: sizes positive and in range (len_flag the
 * sequence length's, context the context's words in the too-large message), heads divide channels, kv_heads
 * divide heads, the MLP width (width_flag) in range. */
cl_status cl_family_tokens_check(const cl_model_config *c, const char *len_flag, const char *context, const char *width_flag);
/* The config_diff the token families share: layers, heads, channels, vocab, context, the MLP width (named
 * width_name in the message) and the key-value heads, in that order; a family compares its own fields after. */
int cl_family_tokens_diff(const cl_model_config *a, const cl_model_config *b, const char *width_name, char *field,
                          size_t n, int *va, int *vb);

/* The family of kind k, NULL when unknown (family.c ... describe.c: the one list). */
const cl_family *cl_family_of(cl_model_kind k);
/* The family named name (its pub.name: checkpoints' "cleave_model"), NULL when none. */
const cl_family *cl_family_named(const char *name);

/* A family's check of one configuration field c->field: positive, or at most max; the message names it by what. */
#define CL_FAMILY_POS(c, field, what) \
    if ((c)->field <= 0) return cl_error(CL_ERR_INVALID, "%s must be positive (got %d)", what, (c)->field)
#define CL_FAMILY_MAX(c, field, what, max) \
    if ((c)->field > (max)) return cl_error(CL_ERR_INVALID, "%s %d is too large (at most %d)", what, (c)->field, (max))

/* In a config_diff (parameters field, n, va, vb): returns 1 naming the field if x and y differ. */
#define CL_FAMILY_DIFF(name, x, y)           \
    do {                                     \
        if ((x) != (y)) {                    \
            snprintf(field, n, "%s", name);  \
            *va = (x), *vb = (y);            \
            return 1;                        \
        }                                    \
    } while (0)

#endif
