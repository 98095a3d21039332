/* The fields of a checkpoint's config.json and trainer_state.json (see
 * ckpt_json.h): every number must be an integer in int range before it is
 * used, and every size passes cl_model_config_check, whose limits keep the
 * description's arithmetic far from overflow. */
#include "train/ckpt_json.h"
#include "cleave/train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cl_status cl_ckpt_config_parse(const cl_json *r, const char *path, cl_model_config *c, char *tokenizer, size_t tn) {
    const cl_json *preset = cl_json_get(r, "cleave_preset"), *tok = cl_json_get(r, "tokenizer");
    /* the family and its fields: the family's table reads them (cl_model_config_from_json) */
    int ok = cl_model_config_from_json(r, c);
    snprintf(tokenizer, tn, "%s", tok && tok->type == CL_JSON_STRING ? tok->string : "byte");
    snprintf(c->name, sizeof c->name, "%s", preset && preset->type == CL_JSON_STRING ? preset->string : "custom");
    if (!ok) return cl_error(CL_ERR_FORMAT, "%s: missing or invalid model fields", path);
    /* the shape decides, not the name: a preset name recorded beside another
     * shape (gpt2-small was 4 layers of 128 channels before it took GPT-2
     * small's 124M) is not carried on */
    cl_model_config p;
    char field[32];
    int va, vb;
    if (cl_model_preset(c->name, &p) == CL_OK && cl_model_config_diff(&p, c, field, sizeof field, &va, &vb))
        snprintf(c->name, sizeof c->name, "custom");
    cl_error_clear();
    return cl_error_context(cl_model_config_check(c), "%s", path) == CL_OK ? CL_OK : CL_ERR_FORMAT;
}

cl_status cl_ckpt_state_parse(const cl_json *r, const char *path, int *step, int *opt_t, int *T, int *gb, uint64_t *seed) {
    const cl_json *sd = cl_json_get(r, "seed");
    int ok = cl_json_get_int(r, "step", step) && cl_json_get_int(r, "optimizer_step", opt_t) && cl_json_get_int(r, "seq_len", T) &&
             cl_json_get_int(r, "global_batch", gb) && sd && sd->type == CL_JSON_STRING;
    if (ok) {
        char *end;
        errno = 0;
        *seed = strtoull(sd->string, &end, 10);
        ok = !errno && *end == 0 && end != sd->string;
    }
    if (!ok) return cl_error(CL_ERR_FORMAT, "%s: missing or invalid fields", path);
    if (*step < 0 || *step > CL_MAX_STEPS)
        return cl_error(CL_ERR_FORMAT, "%s: step %d is out of range (0 to %d)", path, *step, CL_MAX_STEPS);
    /* every step is one optimizer step, so cleave saves the two equal */
    if (*opt_t != *step)
        return cl_error(CL_ERR_FORMAT, "%s: optimizer_step %d differs from step %d (a checkpoint cleave wrote has them equal)",
                        path, *opt_t, *step);
    return CL_OK;
}

cl_status cl_ckpt_run_id_parse(const cl_json *r, const char *path, char out[CL_RUN_ID_LEN + 1]) {
    const cl_json *v = cl_json_get(r, "run_id");
    out[0] = 0;
    if (!v) return CL_OK;
    int ok = v->type == CL_JSON_STRING && strlen(v->string) == CL_RUN_ID_LEN;
    for (int i = 0; ok && i < CL_RUN_ID_LEN; i++) ok = strchr("0123456789abcdef", v->string[i]) && v->string[i];
    if (!ok) return cl_error(CL_ERR_FORMAT, "%s: \"run_id\" is not %d lowercase hexadecimal digits", path, CL_RUN_ID_LEN);
    memcpy(out, v->string, CL_RUN_ID_LEN + 1);
    return CL_OK;
}
