/* What a checkpoint directory holds, read without loading it (see train.h,
 * cl_checkpoint_describe): cleave's single file (config.json and
 * trainer_state.json), the sharded format (the index's "config" and
 * "state") or a Hugging Face GPT-2 (config.json only: no state). */
#include "cleave/data.h"
#include "cleave/json.h"
#include "train/ckpt_json.h"
#include "train/internal.h"

#include <stdio.h>
#include <string.h>

/* The model of config object cj (parsed from file cpath) and the run of
 * state object st (from spath). */
static cl_status describe(const cl_json *cj, const char *cpath, const cl_json *st, const char *spath, cl_checkpoint_info *out) {
    CL_TRY(cl_ckpt_config_parse(cj, cpath, &out->model, out->tokenizer, sizeof out->tokenizer));
    int opt_t;
    CL_TRY(cl_ckpt_state_parse(st, spath, &out->step, &opt_t, &out->seq_len, &out->global_batch, &out->seed));
    CL_TRY(cl_ckpt_run_id_parse(st, spath, out->run_id));
    const cl_json *mb = cl_json_get(st, "micro_batch"), *data = cl_json_get(st, "data");
    if (mb && mb->type == CL_JSON_NUMBER && mb->number_is_int && mb->integer >= 1 && mb->integer <= out->global_batch)
        out->micro_batch = (int)mb->integer;
    if (data && data->type == CL_JSON_STRING) snprintf(out->data, sizeof out->data, "%s", data->string);
    const cl_json *key = cl_json_get(st, "data_key"), *split = cl_json_get(st, "split");
    if (key && key->type == CL_JSON_STRING) snprintf(out->data_key, sizeof out->data_key, "%s", key->string);
    if (split && split->type == CL_JSON_STRING) snprintf(out->split, sizeof out->split, "%s", split->string);
    out->has_state = 1;
    return CL_OK;
}

static cl_status parse_in(const char *dir, const char *name, cl_json_doc **doc, char *path, size_t pn) {
    snprintf(path, pn, "%s/%s", dir, name);
    return cl_json_parse_file_as(doc, path, strcmp(name, CL_CKPT_INDEX) ? CL_FILE_JSON : CL_FILE_INDEX);
}

cl_status cl_checkpoint_describe(const char *given, cl_checkpoint_info *out) {
    memset(out, 0, sizeof *out);
    char dir[4096];
    CL_TRY(cl_ckpt_resolve("checkpoint", given, dir, sizeof dir)); /* DIR/latest followed */
    char path[4300], path2[4300];
    cl_json_doc *doc = NULL, *doc2 = NULL;
    cl_status s;
    if (cl_ckpt_has(dir, CL_CKPT_INDEX)) {
        out->format = CL_CKPT_SHARDED;
        s = parse_in(dir, CL_CKPT_INDEX, &doc, path, sizeof path);
        const cl_json *cj = s ? NULL : cl_json_get(cl_json_root(doc), "config"), *st = s ? NULL : cl_json_get(cl_json_root(doc), "state");
        if (!s && (!cj || !st)) s = cl_error(CL_ERR_FORMAT, "%s: no \"config\" or \"state\" object", path);
        if (!s) s = describe(cj, path, st, path, out);
    } else if (cl_hf_foreign(dir)) {
        out->format = CL_CKPT_HF;
        s = cl_hf_read_config(dir, &out->model, out->tokenizer, sizeof out->tokenizer);
    } else {
        out->format = CL_CKPT_SINGLE;
        s = parse_in(dir, "config.json", &doc, path, sizeof path);
        if (!s) s = parse_in(dir, "trainer_state.json", &doc2, path2, sizeof path2);
        if (!s) s = describe(cl_json_root(doc), path, cl_json_root(doc2), path2, out);
    }
    cl_json_free(doc);
    cl_json_free(doc2);
    return s;
}

