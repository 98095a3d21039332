/* The planner's price of the MoE block (issue 33, item 5): the Mixtral
 * block's cost (kind_moe_block.c's table, through cl_unit_cost_of) against
 * formulas written here from the shapes, at every recompute mode, causal
 * or not:
 *   forward  = the attention half's products (q, k, v, o: 2 N C (C + 2 Kv)
 *              + 2 N C^2; the scores and their product with v: 4 B T^2 C)
 *              + the router's (2 N C E)
 *              + K/E of what all E experts would cost on every token
 *              (E x 2 N x 3 C F: w1, w3 and w2);
 *   backward = the same products twice, split as the engine runs them (B:
 *              input gradients with attention's four; W: weight gradients);
 *   re-forward as the dense blocks' (full: the forward; selective: the
 *              scores; causal: the backward's recomputed q k^T).
 * The dense Llama block, which shares the attention half's pricing, keeps
 * its own formula (its MLP 2 N 3 C F a pass). The step's model FLOPs are
 * Megatron-LM's MoE count: 6 x the active parameters (attention, router, K
 * experts' weights) a token, plus attention's scores and the head; and
 * mixtral-8x7b still describes 46,702,792,704 parameters (Mistral AI's
 * published count) while `cleave plan` finds configurations for it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "plan/plan.h"

static cl_model_desc *describe(const cl_model_config *c, int T) {
    cl_tp_layout tl = {1, 0, 0, 1, CL_F32, 1};
    cl_model_desc *d = NULL;
    CHECK_OK(cl_model_describe_tp(c, T, &tl, &d));
    return d;
}

static void test_block_flops(void) {
    int B = 3, T = 32;
    cl_model_config mc;
    CHECK_OK(cl_model_preset("mixtral-tiny", &mc));
    double C = mc.channels, Kv = (double)cl_model_kv_heads(&mc) * (mc.channels / mc.heads), F = (double)cl_model_mlp_width(&mc);
    double N = (double)B * T, E = mc.experts, K = mc.experts_per_token;
    double lin = 2 * N * C * (C + 2 * Kv) + 2 * N * C * C, scores = 4.0 * B * T * T * C, router = 2 * N * C * E;
    double experts = K / E * (E * 2 * N * 3 * C * F), dense_mlp = 2 * N * 3 * C * F;
    cl_model_config dense = mc;
    dense.experts = dense.experts_per_token = 0, dense.moe_aux_coeff = 0;
    cl_model_desc *d = describe(&mc, T), *dd = describe(&dense, T);
    if (!d || !dd) return;
    CHECK(d->units[1].kind == CL_UNIT_MOE_BLOCK && dd->units[1].kind == CL_UNIT_LLAMA_BLOCK, "unit 1: the MoE block, the dense one");
    for (int rc = 0; rc < 3; rc++)
        for (int causal = 0; causal < 2; causal++) {
            cl_unit_cost m, g;
            cl_unit_cost_of(d, 1, B, 4, rc, causal, &m);
            cl_unit_cost_of(dd, 1, B, 4, rc, causal, &g);
            double f = lin + scores + router + experts, b = lin + 2 * scores + router + experts, w = lin + router + experts;
            double rf = (rc == CL_RECOMPUTE_FULL ? f : rc == CL_RECOMPUTE_SELECTIVE ? scores : 0) + (causal ? scores / 2 : 0);
            const cl_pass_cost *p = m.pass;
            CHECK(fabs(p[CL_PASS_F].flops - f) <= 1e-12 * f, "rc %d causal %d: MoE F %.17g, the formula %.17g", rc, causal,
                  p[CL_PASS_F].flops, f);
            CHECK(fabs(p[CL_PASS_B].flops - b) <= 1e-12 * b, "MoE B %.17g, the formula %.17g", p[CL_PASS_B].flops, b);
            CHECK(fabs(p[CL_PASS_W].flops - w) <= 1e-12 * w, "MoE W %.17g, the formula %.17g", p[CL_PASS_W].flops, w);
            CHECK(fabs(p[CL_PASS_RF].flops - rf) <= 1e-12 * rf, "rc %d causal %d: MoE RF %.17g, want %.17g", rc, causal,
                  p[CL_PASS_RF].flops, rf);
            /* the description's count (cleave train's GFLOP/s) is the cost table's forward */
            CHECK(fabs(p[CL_PASS_F].flops - d->units[1].flops * B) <= 1e-12 * f, "F %.17g, the description's %.17g x B",
                  p[CL_PASS_F].flops, d->units[1].flops);
            double df = lin + scores + dense_mlp, db = lin + 2 * scores + dense_mlp, dw = lin + dense_mlp;
            CHECK(g.pass[CL_PASS_F].flops == df && g.pass[CL_PASS_B].flops == db && g.pass[CL_PASS_W].flops == dw,
                  "dense Llama block F %g B %g W %g, want %g %g %g", g.pass[CL_PASS_F].flops, g.pass[CL_PASS_B].flops,
                  g.pass[CL_PASS_W].flops, df, db, dw);
            /* the sparse MLP's kernels move more than the attention half's alone and the dense MLP's SwiGLU; no
             * collective at tp 1 */
            CHECK(p[CL_PASS_F].bytes > g.pass[CL_PASS_F].bytes && p[CL_PASS_B].bytes > g.pass[CL_PASS_B].bytes &&
                      p[CL_PASS_B].stream > g.pass[CL_PASS_B].stream,
                  "MoE bytes F %g B %g stream %g against dense %g %g %g", p[CL_PASS_F].bytes, p[CL_PASS_B].bytes, p[CL_PASS_B].stream,
                  g.pass[CL_PASS_F].bytes, g.pass[CL_PASS_B].bytes, g.pass[CL_PASS_B].stream);
            CHECK(p[CL_PASS_F].ar_calls + p[CL_PASS_F].ag_calls + p[CL_PASS_F].rs_calls + p[CL_PASS_B].ar_calls == 0, "no collectives");
        }
    /* the experts' products: E of [N K / E, C] x [C, F] (w1 and w3) in the forward, the balanced load's rows */
    cl_unit_cost m;
    cl_unit_cost_of(d, 1, B, 4, 0, 0, &m);
    int found = 0;
    for (int i = 0; i < m.pass[CL_PASS_F].ngemm; i++) {
        const cl_gemm_shape *s = &m.pass[CL_PASS_F].gemm[i];
        if (s->m == N * K / E && s->n == F && s->k == C && s->count == 2 * E) found++;
    }
    CHECK(found == 1, "the forward's w1, w3 products as 2E of [NK/E, C] x [C, F] (%d found)", found);
    cl_model_desc_free(d);
    cl_model_desc_free(dd);
}

/* mixtral-8x7b: the parameters, Megatron's count of a step, and a plan */
static void test_mixtral_8x7b(void) {
    cl_plan_query q;
    memset(&q, 0, sizeof q);
    CHECK_OK(cl_model_preset("mixtral-8x7b", &q.model));
    q.T = 4096, q.global_batch = 256, q.devices = 64, q.vocab_div = 128;
    CHECK_OK(cl_hw_builtin("a100", &q.hw));
    q.fix = (cl_plan_cfg){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    cl_model_desc *d = describe(&q.model, q.T);
    if (!d) return;
    CHECK(d->nparams_total == 46702792704LL, "mixtral-8x7b: %lld parameters, not 46,702,792,704", (long long)d->nparams_total);
    cl_model_desc_free(d);
    const cl_model_config *c = &q.model;
    double C = c->channels, Kv = (double)cl_model_kv_heads(c) * (c->channels / c->heads), F = (double)cl_model_mlp_width(c);
    double L = c->layers, V = c->vocab, T = q.T, E = c->experts, K = c->experts_per_token;
    double active = 2 * C * C + 2 * C * Kv + C * E + K * 3 * C * F; /* a block's weights a token meets */
    double model, run, want = q.global_batch * (6 * T * (L * active + V * C) + 3 * L * 4 * T * T * C);
    cl_plan_step_flops(&q, CL_RECOMPUTE_NONE, &model, &run);
    CHECK(fabs(model - want) <= 1e-12 * want, "mixtral-8x7b step: %.6e model FLOPs, Megatron's 6 x active (%.0f a block) %.6e", model,
          active, want);
    printf("mixtral-8x7b: %.0f active parameters a block, %.4e model FLOPs a step of 256 x 4096 tokens\n", active, model);
    cl_plan_list l;
    memset(&l, 0, sizeof l);
    CHECK_OK(cl_plan_search(&q, &l));
    CHECK(l.n > 0 && l.r[0].fits && l.r[0].c.tp == 1, "a plan for mixtral-8x7b on 64 A100s (tp 1: the MoE block is not split)");
    if (l.n > 0) {
        const cl_plan_result *r = &l.r[0];
        CHECK(fabs(r->model_tflops * 1e12 * r->step_s * q.devices - model) <= 1e-9 * model, "TFLOP/s %.1f from the step's FLOPs",
              r->model_tflops);
        printf("fastest: dp %d tp %d pp %d v %d mb %d, %.3f s a step, %.0f model TFLOP/s a GPU\n", r->c.dp, r->c.tp, r->c.pp, r->c.v,
               r->c.mb, r->step_s, r->model_tflops);
    }
    cl_plan_list_free(&l);
}

int main(void) {
    test_block_flops();
    test_mixtral_8x7b();
    return cl_test_report("test_plan_moe");
}
