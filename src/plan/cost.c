/* The cost of one unit (see plan.h): asked of the unit's kind table (each
 * kind counts what its kernels compute and move beside them, nn/cost.h),
 * on the layout statement (cl_model_describe_tp) whose local sizes it reads.
 * Matrix products are counted exactly (the forward products equal
 * cl_unit.flops); the other kernels' bytes are counted as each reads its
 * inputs and writes its outputs once, at the activation precision (ebytes). */
#include "plan/plan.h"
#include "nn/kind.h"

#include <string.h>

void cl_pass_cost_add(cl_pass_cost *acc, const cl_pass_cost *a) {
    for (int i = 0; i < a->ngemm; i++) cl_cost_gemm_work(acc, &a->gemm[i]);
    acc->flops += a->flops; /* the shapes carry the work done (cl_cost_gemm_work adds no FLOPs); the FLOPs are the model's */
    acc->narrow += a->narrow, acc->bytes += a->bytes, acc->stream += a->stream;
    acc->ar_bytes += a->ar_bytes, acc->ag_bytes += a->ag_bytes, acc->rs_bytes += a->rs_bytes;
    acc->ar_calls += a->ar_calls, acc->ag_calls += a->ag_calls, acc->rs_calls += a->rs_calls;
    acc->a2a_bytes += a->a2a_bytes, acc->a2a_calls += a->a2a_calls;
}

void cl_unit_cost_of(const cl_model_desc *d, int u, int B, int ebytes, int recompute, int causal, cl_unit_cost *o) {
    memset(o, 0, sizeof *o);
    const cl_unit *un = &d->units[u];
    const cl_kind *k = cl_kind_of(un->kind);
    if (k->cost) k->cost(d, un, B, (double)ebytes, recompute, causal, o);
}
