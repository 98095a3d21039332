/* ZeRO 3 over a rank's pipeline chunks (the model side is src/nn/zero3.c):
 * every chunk's parameters whole around the initialization, a checkpoint's
 * gather or load and the replica check, and the seconds the chunks waited
 * for their parameter gathers. */
#include "cleave/train.h"

#include "train/pp.h"

void cl_pp_init(cl_trainer *t, uint64_t seed) {
    for (int c = 0; c < t->pp->v; c++) {
        cl_model *m = t->pp->ch[c].m;
        cl_status s = cl_model_z3_whole(m, 0); /* ZeRO 3: drawn whole, the shard kept */
        CL_ASSERT(s == CL_OK);
        cl_model_init(m, seed);
        cl_model_z3_end_whole(m, 1);
    }
}

/* ZeRO 3: the parameters whole in host memory around a checkpoint's gather
 * (all-gathered from the shards) or a load (each replica keeps its shard). */
cl_status cl_pp_z3_whole(struct cl_pp *pp, int gather) {
    cl_status s = CL_OK;
    for (int c = 0; c < pp->v && !s; c++) s = cl_model_z3_whole(pp->ch[c].m, gather);
    return s;
}

void cl_pp_z3_end_whole(struct cl_pp *pp, int keep) {
    for (int c = 0; c < pp->v; c++) cl_model_z3_end_whole(pp->ch[c].m, keep);
}

double cl_pp_z3_wait(cl_trainer *t) {
    double w = 0;
    for (int c = 0; c < t->pp->v; c++) w += cl_model_z3_take_wait(t->pp->ch[c].m);
    return w;
}
