/* libFuzzer target for a sharded checkpoint's index (cleave-index.json),
 * through the very functions a load uses before it reads a byte
 * (src/train/ckpt_json.c's cl_ckpt_config_parse, then
 * src/train/shard_index.c's cl_shard_index_parse).
 *
 * Why: the index says which file, which bytes and which place every rank
 * reads; a hostile one must be refused with a message, never a crash, an
 * overflow or a read outside a tensor. Each input is parsed with
 * cl_json_parse; when its "config" passes, the model is described (T = 0,
 * tp 1, the layout a load checks against) and the index parsed against it;
 * an accepted index's boxes must lie inside their tensors and cover each
 * exactly once, which is checked here again element by element for small
 * tensors. */
#include "cleave/json.h"
#include "cleave/model.h"
#include "train/ckpt_json.h"
#include "train/shard_index.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cl_json_doc *doc = NULL;
    if (cl_json_parse(&doc, (const char *)data, size) != CL_OK) {
        if (doc) abort();
        return 0;
    }
    const cl_json *root = cl_json_root(doc);
    cl_model_config c;
    char tok[64];
    cl_model_desc *d = NULL;
    const cl_json *cj = cl_json_get(root, "config");
    if (cj && cl_ckpt_config_parse(cj, "index", &c, tok, sizeof tok) == CL_OK && cl_model_describe(&c, 0, &d) == CL_OK) {
        cl_shard_index ix;
        memset(&ix, 0, sizeof ix);
        if (cl_shard_index_parse(&ix, root, d) == CL_OK) {
            for (int i = 0; i < d->nparams; i++) {
                const cl_param_spec *p = &d->params[i];
                int64_t R = cl_shard_whole_rows(p), C = cl_shard_whole_cols(p);
                unsigned char *seen = R * C <= 4096 ? calloc((size_t)(R * C > 0 ? R * C : 1), 1) : NULL;
                for (int k = 0; k < CL_NKINDS; k++) {
                    if (seen) memset(seen, 0, (size_t)(R * C));
                    for (int j = 0; j < ix.nbx[i * CL_NKINDS + k]; j++) {
                        const cl_sbox *b = &ix.bx[i * CL_NKINDS + k][j];
                        if (b->r0 < 0 || b->c0 < 0 || b->r0 + b->nr > R || b->c0 + b->nc > C || b->file < 0 || b->file >= ix.nfiles)
                            abort();
                        for (int64_t r = 0; seen && r < b->nr; r++)
                            for (int64_t q = 0; q < b->nc; q++)
                                if (seen[(b->r0 + r) * C + b->c0 + q]++) abort();
                    }
                    for (int64_t e = 0; seen && e < R * C; e++)
                        if (seen[e] != 1) abort();
                }
                free(seen);
            }
        }
        cl_shard_index_free(&ix);
    }
    cl_model_desc_free(d);
    cl_json_free(doc);
    return 0;
}
