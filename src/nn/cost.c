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

/* a shape's work added: a slot of its own, or past CL_COST_MAX_GEMM merged into the last, weighted by its size */
void cl_cost_gemm_work(cl_pass_cost *c, const cl_gemm_shape *g) {
    if (c->ngemm < CL_COST_MAX_GEMM) {
        c->gemm[c->ngemm++] = *g;
        return;
    }
    cl_gemm_shape *l = &c->gemm[CL_COST_MAX_GEMM - 1];
    l->count += g->count * g->m * g->n * g->k / (l->m * l->n * l->k);
    l->f32 += g->f32 * g->m * g->n * g->k / (l->m * l->n * l->k);
}

/* count products of [m, k] x [k, n] of which the kernel computes the share (the causal attention's
 * skipped blocks), f32: run in F32 whatever the step's dtype: the FLOPs counted are the model's (the whole
 * products), the time the work done */
static void gemm_add(cl_pass_cost *c, double m, double n, double k, double count, int layout, double share, int f32) {
    if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return;
    double work = count * share;
    cl_cost_gemm_work(c, &(cl_gemm_shape){m, n, k, work, layout, f32 ? work : 0});
    c->flops += 2.0 * m * n * k * count;
}

void cl_cost_gemm_part(cl_pass_cost *c, double m, double n, double k, double count, int layout, double share) {
    gemm_add(c, m, n, k, count, layout, share, 0);
}

/* an attention product (flash.c's blockwise kernels: F32 in either dtype) */
static void att_gemm(cl_pass_cost *c, double m, double n, double k, double count, int layout, double share) {
    gemm_add(c, m, n, k, count, layout, share, 1);
}

void cl_cost_narrow(cl_pass_cost *c, const cl_model_desc *d, double n, int fused) {
    if (cl_nn_bf16(d) && n > 0) c->narrow += (fused ? 2.0 : 6.0) * n;
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
        att_gemm(f, T, K, hd, count, CL_GEMM_NT, att); /* s = q k^T */
        att_gemm(f, T, hd, K, count, CL_GEMM_NN, att); /* y = p v */
    }
    if (b) {
        att_gemm(b, T, hd, K, count, CL_GEMM_NN, att); /* dq = ds k */
        att_gemm(b, K, hd, T, count, CL_GEMM_TN, att); /* dk = ds^T q */
        att_gemm(b, T, K, hd, count, CL_GEMM_NT, att); /* dp = dy v^T */
        att_gemm(b, K, hd, T, count, CL_GEMM_TN, att); /* dv = p^T dy */
    }
}

void cl_cost_attention_rf(cl_pass_cost *rf, const cl_pass_cost *f, int recompute, int causal, double T, double K, double hd,
                          double count, double att, double attf) {
    if (recompute == CL_RECOMPUTE_FULL) *rf = *f;
    else if (recompute == CL_RECOMPUTE_SELECTIVE) {
        cl_cost_attention_products(rf, NULL, T, K, hd, count, att);
        rf->bytes = attf;
    }
    if (causal) att_gemm(rf, T, K, hd, count, CL_GEMM_NT, att);
}

void cl_kind_elementwise_cost(const cl_model_desc *d, const cl_unit *un, int B, double e, int recompute, int causal,
                              cl_unit_cost *o) {
    (void)d, (void)recompute, (void)causal;
    double Bd = B;
    o->pass[CL_PASS_F].bytes = e * Bd * (double)(un->in_floats + un->out_floats);
    o->pass[CL_PASS_B].bytes = e * Bd * (double)(2 * un->out_floats + un->in_floats);
}
