/* cleave train (internal): the fields of a checkpoint's JSON files.
 *
 * Why apart from checkpoint.c: these two functions are all that stands
 * between a file from anywhere and the sizes cleave allocates from, so the
 * fuzzer (tests/fuzz/fuzz_ckjson.c) runs exactly them, with nothing but the
 * JSON reader and the model description linked in. */
#ifndef CLEAVE_TRAIN_CKPT_JSON_H
#define CLEAVE_TRAIN_CKPT_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "cleave/json.h"
#include "cleave/model.h"
#include "cleave/train.h"

/* config.json's root into a checked model config (cl_model_config_check)
 * and the tokenizer name; path names the file in messages (CL_ERR_FORMAT). */
cl_status cl_ckpt_config_parse(const cl_json *root, const char *path, cl_model_config *c, char *tokenizer, size_t tn);
/* trainer_state.json's root: step in [0, CL_MAX_STEPS], optimizer_step equal
 * to it, sequence length, global batch and the seed (a decimal string). */
cl_status cl_ckpt_state_parse(const cl_json *root, const char *path, int *step, int *opt_t, int *T, int *gb, uint64_t *seed);

/* The state's "run_id" into out (CL_RUN_ID_LEN lowercase hex digits and a
 * NUL): "" when the field is absent (a checkpoint from before run ids),
 * CL_ERR_FORMAT when it is there but not such a string. */
cl_status cl_ckpt_run_id_parse(const cl_json *root, const char *path, char out[CL_RUN_ID_LEN + 1]);

#endif
