/* The one list of unit kinds: cl_unit_kind -> its table (kind.h). Adding a
 * kind is its file under src/nn/, its entry in cl_unit_kind and its line
 * here. Calls go one way: units.c, zero3.c and describe.c ask here; the
 * kinds' files call only split.c. */
#include "nn/kind.h"

#include <stddef.h>

static const cl_kind *const kinds[] = {
    [CL_UNIT_EMBED] = &cl_kind_embed,     [CL_UNIT_BLOCK] = &cl_kind_block,     [CL_UNIT_LMHEAD] = &cl_kind_lmhead,
    [CL_UNIT_CONV] = &cl_kind_conv,       [CL_UNIT_RELU] = &cl_kind_relu,       [CL_UNIT_MAXPOOL] = &cl_kind_maxpool,
    [CL_UNIT_FLATTEN] = &cl_kind_flatten, [CL_UNIT_LINEAR] = &cl_kind_linear,   [CL_UNIT_CLASSIFY] = &cl_kind_classify,
    [CL_UNIT_TOKEN_EMBED] = &cl_kind_token_embed, [CL_UNIT_LLAMA_BLOCK] = &cl_kind_llama_block,
    [CL_UNIT_LLAMA_HEAD] = &cl_kind_llama_head,   [CL_UNIT_LLAMA_HEAD_UNTIED] = &cl_kind_llama_head_untied,
    [CL_UNIT_MOE_BLOCK] = &cl_kind_moe_block,
};

const cl_kind *cl_kind_of(cl_unit_kind k) {
    return (unsigned)k < sizeof kinds / sizeof kinds[0] ? kinds[k] : NULL;
}
