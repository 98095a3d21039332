/* The cost figures the unit kinds' tables give (nn/cost.h): the GEMM
 * shapes and FLOPs, the collectives, and the elementwise kinds' one cost.
 *
 * Invariants: a product's FLOPs are 2 m n k count (the model's); its shape's
 * count is the work done (count x share); past CL_COST_MAX_GEMM shapes the
 * work is merged into the last, weighted by its size; collectives count at
 * tp > 1 only. */
#include "nn/cost.h"
#include "nn/kind.h"

#include "cleave/backend.h"

/* count products of [m, k] x [k, n] of which the kernel computes the share (the causal attention's
 * skipped blocks): the FLOPs counted are the model's (the whole products), the time the work done */
void cl_cost_gemm_part(cl_pass_cost *c, double m, double n, double k, double count, int layout, double share) {
    if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return;
    double work = count * share;
    if (c->ngemm < CL_COST_MAX_GEMM) c->gemm[c->ngemm++] = (cl_gemm_shape){m, n, k, work, layout};
    else c->gemm[CL_COST_MAX_GEMM - 1].count += work * m * n * k / (c->gemm[CL_COST_MAX_GEMM - 1].m *
                                                                     c->gemm[CL_COST_MAX_GEMM - 1].n *
                                                                     c->gemm[CL_COST_MAX_GEMM - 1].k);
    c->flops += 2.0 * m * n * k * count;
}

void cl_cost_gemm(cl_pass_cost *c, double m, double n, double k, double count, int layout) {
    cl_cost_gemm_part(c, m, n, k, count, layout, 1);
}

void cl_cost_coll(cl_pass_cost *c, cl_coll_kind kind, double bytes, int tp) {
    if (tp <= 1 || bytes <= 0) return;
    if (kind == CL_COLL_ALLREDUCE) c->ar_bytes += bytes, c->ar_calls++;
    else if (kind == CL_COLL_ALLGATHER) c->ag_bytes += bytes, c->ag_calls++;
    else c->rs_bytes += bytes, c->rs_calls++;
}

void cl_cost_alltoall(cl_pass_cost *c, double bytes, int g) {
    if (g <= 1 || bytes <= 0) return;
    c->a2a_bytes += bytes, c->a2a_calls++;
}

void cl_cost_split_pair(cl_pass_cost *c, double act, int tp, int sp) {
    if (sp) cl_cost_coll(c, CL_COLL_ALLGATHER, act, tp), cl_cost_coll(c, CL_COLL_REDUCE_SCATTER, act, tp);
    else cl_cost_coll(c, CL_COLL_ALLREDUCE, act, tp);
}

void cl_cost_block_pairs(cl_pass_cost *c, double act, int tp, int sp) {
    cl_cost_split_pair(c, act, tp, sp);
    cl_cost_split_pair(c, act, tp, sp);
}

cl_cost_att cl_cost_attention_of(const cl_model_desc *d, int B, double e, int causal) {
    double T = d->T, H = d->heads_local, R = (double)B * T, Cl = d->channels_local, K = cl_nn_key_tokens(d);
    double lse = (double)B * H * T, scores = (double)B * H * T * K;
    cl_cost_att a = {K, causal ? cl_attention_share((int)K) : 1, 0, 0};
    a.fwd = causal ? e * lse : e * 2 * scores;
    a.bwd = causal ? e * (2 * R * Cl + lse) : e * 3 * scores;
    return a;
}

void cl_cost_attention_products(cl_pass_cost *f, cl_pass_cost *b, double T, double K, double hd, double count, double att) {
    if (f) {
        cl_cost_gemm_part(f, T, K, hd, count, CL_GEMM_NT, att); /* s = q k^T */
        cl_cost_gemm_part(f, T, hd, K, count, CL_GEMM_NN, att); /* y = p v */
    }
    if (b) {
        cl_cost_gemm_part(b, T, hd, K, count, CL_GEMM_NN, att); /* dq = ds k */
        cl_cost_gemm_part(b, K, hd, T, count, CL_GEMM_TN, att); /* dk = ds^T q */
        cl_cost_gemm_part(b, T, K, hd, count, CL_GEMM_NT, att); /* dp = dy v^T */
        cl_cost_gemm_part(b, K, hd, T, count, CL_GEMM_TN, att); /* dv = p^T dy */
    }
}

void cl_cost_attention_rf(cl_pass_cost *rf, const cl_pass_cost *f, int recompute, int causal, double T, double K, double hd,
                          double count, double att, double attf) {
    if (recompute == CL_RECOMPUTE_FULL) *rf = *f;
    else if (recompute == CL_RECOMPUTE_SELECTIVE) {
        cl_cost_attention_products(rf, NULL, T, K, hd, count, att);
        rf->bytes = attf;
    }
    if (causal) cl_cost_gemm_part(rf, T, K, hd, count, CL_GEMM_NT, att);
}

void cl_kind_elementwise_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal,
                              cl_unit_cost *o) {
    (void)d, (void)recompute, (void)causal;
    double Bd = B;
    o->pass[CL_PASS_F].bytes = e * Bd * (double)(un->in_floats + un->out_floats);
    o->pass[CL_PASS_B].bytes = e * Bd * (double)(2 * un->out_floats + un->in_floats);
}
