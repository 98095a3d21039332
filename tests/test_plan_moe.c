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
    q.fix = (cl_plan_cfg){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
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
    CHECK(l.n > 0 && l.r[0].fits, "a plan for mixtral-8x7b on 64 A100s");
    int split = 0; /* tensor parallelism a search dimension with experts (the experts' MLPs split by tp) */
    for (int i = 0; i < l.n; i++) split |= l.r[i].fits && l.r[i].c.tp > 1;
    CHECK(split, "mixtral-8x7b on 64 A100s: no plan with tp > 1 among the %d listed", l.n);
    if (l.n > 0) {
        const cl_plan_result *r = &l.r[0];
        CHECK(fabs(r->model_tflops * 1e12 * r->step_s * q.devices - model) <= 1e-9 * model, "TFLOP/s %.1f from the step's FLOPs",
              r->model_tflops);
        printf("fastest: dp %d tp %d pp %d v %d mb %d, %.3f s a step, %.0f model TFLOP/s a GPU\n", r->c.dp, r->c.tp, r->c.pp, r->c.v,
               r->c.mb, r->step_s, r->model_tflops);
    }
    cl_plan_list_free(&l);
}

/* The all-to-all's time (the pairwise exchange: (g - 1) latencies and (g - 1)/g of the buffer over the link) on the
 * h100 description, within a node and across nodes. */
static void test_alltoall_time(void) {
    cl_hw hw;
    CHECK_OK(cl_hw_builtin("h100", &hw));
    CHECK(cl_hw_alltoall(&hw, 1e9, 1, 0) == 0, "one rank: no exchange");
    for (int inter = 0; inter < 2; inter++)
        for (int g = 2; g <= 16; g *= 2) {
            double bw = inter ? hw.inter_bw : hw.intra_bw, lat = inter ? hw.inter_lat : hw.intra_lat, n = 3e8;
            double want = (g - 1) * lat + n * (g - 1) / g / bw, got = cl_hw_alltoall(&hw, n, g, inter);
            CHECK(fabs(got - want) <= 1e-12 * want, "all-to-all of %g B over %d (inter %d): %.9g s, the formula %.9g", n, g, inter, got, want);
        }
}

static cl_plan_query tiny_query(const char *model, int devices, int T) {
    cl_plan_query q;
    memset(&q, 0, sizeof q);
    CHECK_OK(cl_model_preset(model, &q.model));
    q.T = T, q.global_batch = 8, q.devices = devices, q.vocab_div = 128;
    CHECK_OK(cl_hw_builtin("a100", &q.hw));
    q.fix = (cl_plan_cfg){-1, -1, -1, -1, -1, -1, -1, -1, -1, 0, -1, -1, -1, -1, -1}; /* fp32: the trainer's memory statement */
    return q;
}

/* Expert parallelism in the step (mixtral-tiny, fp32 on the a100 description): per MoE block and micro-batch the
 * forward's all-to-alls of the slot counts (E int32) and of the R = N K rows out and back (C floats, dropless: the
 * slots a rank keeps under uniform routing; with a capacity factor <= 1 E cap), the backward's two, the full
 * re-forward's again; (ep - 1)/ep of each buffer leaves the rank: the step's a2a_bytes and a2a_s against those sums.
 * The FLOPs stay the balanced load's (E / ep experts of ep N K / E rows each); the memory is cl_memory_predict's
 * at that ep; and the search tries every ep dividing dp and E. */
static void test_ep_step(void) {
    for (int capf = 0; capf < 2; capf++)
        for (int ep = 2; ep <= 4; ep *= 2)
            for (int rc = 0; rc <= CL_RECOMPUTE_FULL; rc += CL_RECOMPUTE_FULL) {
                cl_plan_query q = tiny_query("mixtral-tiny", 4, 16);
                q.model.moe_capacity_factor = capf ? 0.25 : 0;
                const cl_model_config *mc = &q.model;
                double N = 2.0 * q.T, C = mc->channels, E = mc->experts, K = mc->experts_per_token, L = mc->layers, m = q.global_batch / (4 * 2);
                double R = capf ? E * ceil(0.25 * N * K / E) : N * K;
                cl_plan_cfg c = {4, 1, 1, 1, 2, CL_SCHED_1F1B, 0, rc, 0, 0, 0, 0, 1, ep, 0};
                cl_plan_result r, r1;
                CHECK_OK(cl_plan_eval(&q, &c, &r));
                c.ep = 1;
                CHECK_OK(cl_plan_eval(&q, &c, &r1));
                double f = (ep - 1.0) / ep, passes = rc == CL_RECOMPUTE_FULL ? 2 : 1; /* forward (and re-forward): counts + 2 */
                double bytes = m * L * (passes * (4 * E + 2 * R * C * 4) + 2 * R * C * 4) * f;
                double t = m * L * (passes * (cl_hw_alltoall(&q.hw, 4 * E, ep, 0) + 2 * cl_hw_alltoall(&q.hw, R * C * 4, ep, 0)) +
                                    2 * cl_hw_alltoall(&q.hw, R * C * 4, ep, 0));
                CHECK(r.a2a_bytes == bytes, "capacity %d ep %d rc %d: a2a %.0f B a step, the formula %.0f", capf, ep, rc, r.a2a_bytes, bytes);
                CHECK(fabs(r.a2a_s - t) <= 1e-12 * t, "ep %d rc %d: a2a %.9g s, the formula %.9g", ep, rc, r.a2a_s, t);
                CHECK(r1.a2a_bytes == 0 && r1.a2a_s == 0, "ep 1: no all-to-all");
                CHECK(r.step_s > r1.step_s, "ep %d adds its exchange to the step (%.6g s against %.6g)", ep, r.step_s, r1.step_s);
                /* the memory: the trainer's predictor at that ep */
                cl_train_config tc;
                cl_train_config_default(&tc);
                tc.model = q.model, tc.seq_len = q.T, tc.micro_batch = 2, tc.global_batch = q.global_batch, tc.ep = ep;
                tc.vocab_divisible_by = 128, tc.recompute = rc;
                cl_mem_rank mr[4];
                CHECK_OK(cl_memory_predict(&tc, 4, 1, mr));
                int w = 0;
                for (int k = 1; k < 4; k++)
                    if (mr[k].total > mr[w].total) w = k;
                CHECK(r.peak_bytes == (double)mr[w].total, "ep %d: planner %.0f B, cl_memory_predict %zu B", ep, r.peak_bytes, (size_t)mr[w].total);
            }
    /* the FLOPs at ep: the same, in E / ep products of ep N K / E rows */
    cl_model_config mc;
    CHECK_OK(cl_model_preset("mixtral-tiny", &mc));
    cl_tp_layout t1 = {1, 0, 0, 1, CL_F32, 1}, t4 = {1, 0, 0, 1, CL_F32, 4};
    cl_model_desc *d1 = NULL, *d4 = NULL;
    CHECK_OK(cl_model_describe_tp(&mc, 16, &t1, &d1));
    CHECK_OK(cl_model_describe_tp(&mc, 16, &t4, &d4));
    if (d1 && d4) {
        cl_unit_cost a, b;
        cl_unit_cost_of(d1, 1, 2, 4, 0, 1, &a);
        cl_unit_cost_of(d4, 1, 2, 4, 0, 1, &b);
        for (int p = 0; p < CL_NPASS; p++) CHECK(a.pass[p].flops == b.pass[p].flops, "pass %d: ep 4's FLOPs %g, ep 1's %g", p, b.pass[p].flops, a.pass[p].flops);
        double E = mc.experts, rows = 4 * 2.0 * 16 * mc.experts_per_token / E;
        int found = 0;
        for (int i = 0; i < b.pass[CL_PASS_F].ngemm; i++) {
            const cl_gemm_shape *g = &b.pass[CL_PASS_F].gemm[i];
            found += g->m == rows && g->k == mc.channels && g->count == 2 * E / 4;
        }
        CHECK(found == 1, "ep 4: w1, w3 as 2 E/4 products of %g rows (%d found)", rows, found);
    }
    cl_model_desc_free(d1);
    cl_model_desc_free(d4);
    /* the search: ep 1, 2 and 4 at dp 4; none for a dense model */
    cl_plan_query q = tiny_query("mixtral-tiny", 4, 16);
    cl_plan_list l;
    CHECK_OK(cl_plan_search(&q, &l));
    int seen[5] = {0};
    for (int i = 0; i < l.n; i++)
        if (l.r[i].c.ep >= 1 && l.r[i].c.ep <= 4) seen[l.r[i].c.ep] |= l.r[i].c.dp == 4;
    CHECK(seen[1] && seen[2] && seen[4] && !seen[3], "mixtral-tiny on 4: ep 1 %d, 2 %d, 4 %d at dp 4", seen[1], seen[2], seen[4]);
    cl_plan_list_free(&l);
    q = tiny_query("llama-tiny", 4, 16);
    CHECK_OK(cl_plan_search(&q, &l));
    int any = 0;
    for (int i = 0; i < l.n; i++) any |= l.r[i].c.ep > 1;
    CHECK(l.n > 0 && !any, "llama-tiny (no experts): ep never searched");
    cl_plan_list_free(&l);
    q.fix.ep = 2;
    CHECK(cl_plan_search(&q, &l) == CL_OK && l.considered == 0, "llama-tiny --ep 2: no configuration");
    cl_plan_list_free(&l);
}

/* Context parallelism's all-to-all (--cp-comm a2a, Ulysses) on llama-tiny at cp 2: per attention block and
 * micro-batch the forward's two exchanges (q, k, v: W = C + 2 Kv a row; the output: C), the backward's four (2 W +
 * 2 C), all blocking; the ring's time is not the a2a's. */
static void test_cp_a2a(void) {
    cl_plan_query q = tiny_query("llama-tiny", 2, 64);
    const cl_model_config *mc = &q.model;
    double C = mc->channels, Kv = (double)cl_model_kv_heads(mc) * (mc->channels / mc->heads), L = mc->layers, m = q.global_batch / 1.0;
    double rows = 1.0 * (q.T / 2) * 4, W = (C + 2 * Kv) * rows, O = C * rows;
    cl_plan_cfg c = {1, 1, 1, 1, 1, CL_SCHED_1F1B, 0, 0, 0, 0, 0, 0, 2, 1, CL_CP_A2A};
    cl_plan_result a, r;
    CHECK_OK(cl_plan_eval(&q, &c, &a));
    c.cp_comm = CL_CP_RING;
    CHECK_OK(cl_plan_eval(&q, &c, &r));
    double bytes = m * L * 3 * (W + O) / 2, t = m * L * 3 * (cl_hw_alltoall(&q.hw, W, 2, 0) + cl_hw_alltoall(&q.hw, O, 2, 0));
    CHECK(a.a2a_bytes == bytes, "cp 2 a2a: %.0f B a step, the formula %.0f", a.a2a_bytes, bytes);
    CHECK(fabs(a.a2a_s - t) <= 1e-12 * t, "cp 2 a2a: %.9g s, the formula %.9g", a.a2a_s, t);
    CHECK(r.a2a_s == 0 && r.step_s != a.step_s, "the ring: no all-to-all, another time (%.6g s against a2a's %.6g)", r.step_s, a.step_s);
}

int main(void) {
    test_block_flops();
    test_mixtral_8x7b();
    test_alltoall_time();
    test_ep_step();
    test_cp_a2a();
    return cl_test_report("test_plan_moe");
}
