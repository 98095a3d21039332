/* libFuzzer target for a checkpoint's JSON files, config.json and
 * trainer_state.json, through the very functions checkpoint loading uses
 * (src/train/ckpt_json.c: cl_ckpt_config_parse, cl_ckpt_state_parse).
 *
 * Why: a checkpoint directory comes from anywhere; a hostile config must be
 * refused, or described without a crash, overflow or undefined behaviour.
 * Each input is parsed with cl_json_parse and read both as a trainer state
 * and as a config; a config the parser accepts (it has passed
 * cl_model_config_check) is described for T = 0 (the model's own, as
 * checkpoint loading does) and for the state's seq_len when that parsed,
 * then freed. */
#include "cleave/json.h"
#include "cleave/model.h"
#include "train/ckpt_json.h"

#include <stdlib.h>

static void describe(const cl_model_config *c, int T) {
    cl_model_desc *d = NULL;
    if (cl_model_describe(c, T, &d) == CL_OK) {
        if (!d || d->nunits < 1 || d->nparams < 0) abort();
        cl_model_desc_free(d);
    } else if (d) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cl_json_doc *doc = NULL;
    if (cl_json_parse(&doc, (const char *)data, size) != CL_OK) {
        if (doc) abort();
        return 0;
    }
    const cl_json *r = cl_json_root(doc);
    int step = 0, opt_t = 0, T = 0, gb = 0;
    uint64_t seed = 0;
    char run_id[CL_RUN_ID_LEN + 1];
    if (cl_ckpt_state_parse(r, "trainer_state.json", &step, &opt_t, &T, &gb, &seed) != CL_OK ||
        cl_ckpt_run_id_parse(r, "trainer_state.json", run_id) != CL_OK)
        T = 0;
    cl_model_config c;
    char tok[64];
    if (cl_ckpt_config_parse(r, "config.json", &c, tok, sizeof tok) == CL_OK) {
        describe(&c, 0);
        if (T > 0) describe(&c, T);
    }
    cl_json_free(doc);
    return 0;
}
