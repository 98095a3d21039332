/* The GPT configuration's derived widths, read by the family (checks,
 * sizes) and by the block kind (its QKV and MLP columns): pure functions of
 * the configuration, in a file that calls nothing, so the kinds below the
 * families can ask them without a circle of calls (scripts/call_cycles.py).
 * 0 in the configuration means GPT-2's value. */
#include "cleave/model.h"

int cl_model_kv_heads(const cl_model_config *c) { return c->kv_heads ? c->kv_heads : c->heads; }
int64_t cl_model_mlp_width(const cl_model_config *c) { return c->mlp_width ? c->mlp_width : 4 * (int64_t)c->channels; }
