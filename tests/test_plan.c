/* Tests of the planner (src/plan/): unit costs against hand formulas, the
 * hardware file's checks, the closed-form live counts against the
 * schedules, ZeRO's Table 1 and Megatron-LM's Table 1.
 *
 * References (numbers typed from the papers):
 *   Rajbhandari, Rasley, Ruwase, He, "ZeRO: Memory Optimizations Toward
 *   Training Trillion Parameter Models", SC 2020 (arXiv:1910.02054), Table 1:
 *   per-device model-state memory (GB) of a 7.5B-parameter model, K = 12,
 *   data-parallel degree N, stages P_os, P_os+g, P_os+g+p.
 *   Narayanan, Shoeybi, Casper, LeGresley, Patwary, Korthikanti, Vainbrand,
 *   Kashinkunti, Bernauer, Catanzaro, Phanishayee, Zaharia, "Efficient
 *   Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
 *   SC 2021 (arXiv:2104.04473), Table 1: GPT models of 1.7B to 1T
 *   parameters on A100s (Selene), sequence 2048, vocabulary 51200, their
 *   tensor (t) and pipeline (p) sizes, GPUs, batch, achieved teraFLOP/s per
 *   GPU (F = 96 B s l h^2 (1 + s / 6h + V / 16lh) per iteration: activation
 *   recomputation included). Micro-batch size 1 and the interleaved
 *   schedule with the smallest v >= 2 that divides l / p are this test's
 *   reading of the paper's setup (not listed in the table), taken the same
 *   way for every row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleave/schedule.h"
#include "common/check.h"
#include "plan/plan.h"
#include "cleave/kernels.h"

static cl_model_desc *gpt(int L, int C, int H, int T, int V, int tp, int sp) {
    cl_model_config mc;
    cl_model_preset("gpt2-tiny", &mc);
    mc.layers = L, mc.channels = C, mc.heads = H, mc.seq_len = T, mc.vocab = V;
    cl_tp_layout tl = {tp, 0, sp, 1, CL_F32, 1};
    cl_model_desc *d = NULL;
    CHECK_OK(cl_model_describe_tp(&mc, T, &tl, &d));
    return d;
}

/* Megatron's counts: a block's forward 24 B T C^2 + 4 B T^2 C (over tp), its backward twice
 * that (B: input gradients and attention's four products; W: the four weight gradients); the
 * head's forward 2 B T C V, its backward twice that; full recompute adds one forward, selective
 * the attention's; priced blockwise (causal, cleave's kernels) every mode re-forwards the
 * scores q k^T the backward recomputes, 2 B T^2 C, not the model's FLOPs. */
static void test_costs(void) {
    int B = 3, T = 32, C = 64, H = 4, V = 512;
    for (int tp = 1; tp <= 4; tp *= 2)
        for (int sp = 0; sp <= (tp > 1); sp++)
            for (int rc = 0; rc <= 5; rc++) {
                int causal = rc > 2;
                cl_model_desc *d = gpt(2, C, H, T, V, tp, sp);
                if (!d) return;
                cl_unit_cost uc;
                cl_unit_cost_of(d, 1, B, 4, rc % 3, causal, &uc);
                double fwd = (24.0 * B * T * C * C + 4.0 * B * T * T * C) / tp;
                CHECK(uc.pass[CL_PASS_F].flops == fwd, "tp %d: block F %g, want %g", tp, uc.pass[CL_PASS_F].flops, fwd);
                CHECK(uc.pass[CL_PASS_F].flops == d->units[1].flops * B, "F equals the description's count");
                double bi = 24.0 * B * T * C * C / tp + 8.0 * B * T * T * C / tp, bw = 24.0 * B * T * C * C / tp;
                CHECK(uc.pass[CL_PASS_B].flops == bi, "block B %g, want %g", uc.pass[CL_PASS_B].flops, bi);
                CHECK(uc.pass[CL_PASS_W].flops == bw, "block W %g, want %g", uc.pass[CL_PASS_W].flops, bw);
                double rf = (rc % 3 == 2 ? fwd : rc % 3 == 1 ? 4.0 * B * T * T * C / tp : 0) + (causal ? 2.0 * B * T * T * C / tp : 0);
                CHECK(uc.pass[CL_PASS_RF].flops == rf, "rc %d causal %d: re-forward %g, want %g", rc % 3, causal,
                      uc.pass[CL_PASS_RF].flops, rf);
                /* tensor-parallel traffic: 2 all-reduces of B T C each way, or sp's gathers and scatters */
                double act = (double)B * T * C * 4;
                if (tp > 1 && !sp) CHECK(uc.pass[CL_PASS_F].ar_calls == 2 && uc.pass[CL_PASS_F].ar_bytes == 2 * act, "F all-reduces");
                if (sp) CHECK(uc.pass[CL_PASS_F].ag_calls == 2 && uc.pass[CL_PASS_F].rs_calls == 2 && uc.pass[CL_PASS_W].ag_calls == 2,
                              "sp gathers");
                if (tp == 1) CHECK(uc.pass[CL_PASS_F].ar_calls + uc.pass[CL_PASS_F].ag_calls == 0, "no collectives at tp 1");
                int hu = d->nunits - 1;
                cl_unit_cost_of(d, hu, B, 4, rc % 3, causal, &uc);
                double hf = 2.0 * B * T * C * d->vocab_local;
                CHECK(uc.pass[CL_PASS_F].flops == hf && uc.pass[CL_PASS_B].flops == 2 * hf && uc.pass[CL_PASS_W].flops == 0,
                      "head F %g B %g W %g, want %g, %g, 0", uc.pass[CL_PASS_F].flops, uc.pass[CL_PASS_B].flops,
                      uc.pass[CL_PASS_W].flops, hf, 2 * hf);
                cl_unit_cost_of(d, 0, B, 4, rc % 3, causal, &uc);
                CHECK(uc.pass[CL_PASS_F].flops == 0 && uc.pass[CL_PASS_F].bytes == 3.0 * B * T * C * 4, "embedding: a lookup");
                cl_model_desc_free(d);
            }
    /* the MLP's linears: 2 B in out per pass */
    cl_model_config mc;
    cl_model_preset("mlp", &mc);
    cl_model_desc *d;
    CHECK_OK(cl_model_describe(&mc, 0, &d));
    for (int u = 0; u < d->nunits; u++) {
        if (d->units[u].kind != CL_UNIT_LINEAR) continue;
        cl_unit_cost uc;
        cl_unit_cost_of(d, u, 8, 4, 0, 0, &uc);
        double f = 2.0 * 8 * d->units[u].c * d->units[u].oc;
        CHECK(uc.pass[CL_PASS_F].flops == f && uc.pass[CL_PASS_B].flops == f && uc.pass[CL_PASS_W].flops == f, "linear %d", u);
    }
    cl_model_desc_free(d);
}

/* The causal attention's share (src/kernels/attention.c and flash.c: rows in
 * blocks of 64, each block's scores up to its last row): nb blocks of 64 compute
 * (nb + 1) / (2 nb) of the T x T products; one block (T <= 64) all of them.
 * With causal pricing the FLOPs stay the model's and the shapes carry the
 * work: the attention products' counts times the share, the rest as before. */
static void test_causal_share(void) {
    static const int Ts[] = {16, 64, 128, 192, 1024, 2048};
    for (int i = 0; i < 6; i++) {
        int T = Ts[i], nb = (T + 63) / 64;
        double want = T <= 64 ? 1 : (nb + 1.0) / (2.0 * nb);
        CHECK(fabs(cl_attention_share(T) - want) < 1e-15, "T %d: share %.6f, want %.6f", T, cl_attention_share(T), want);
    }
    cl_model_desc *d = gpt(2, 64, 4, 128, 512, 1, 0);
    if (!d) return;
    for (int p = CL_PASS_F; p <= CL_PASS_B; p++) {
        cl_unit_cost full, causal;
        cl_unit_cost_of(d, 1, 3, 4, 0, 0, &full);
        cl_unit_cost_of(d, 1, 3, 4, 0, 1, &causal);
        const cl_pass_cost *a = &full.pass[p], *b = &causal.pass[p];
        CHECK(a->flops == b->flops && a->ngemm == b->ngemm, "pass %d: the same FLOPs and products", p);
        for (int g = 0; g < a->ngemm && g < b->ngemm; g++) {
            int attn = a->gemm[g].m == 128 && (a->gemm[g].n == 128 || a->gemm[g].k == 128); /* T x T x hd and T x hd x T */
            double want = a->gemm[g].count * (attn ? 0.75 : 1);
            CHECK(b->gemm[g].count == want, "pass %d product %d: work %g, want %g", p, g, b->gemm[g].count, want);
        }
        /* the T x T path's softmax reads and writes the scores (2 forward, 3 backward); the blockwise
         * path keeps them in tiles: the lse written (forward), read with y and dy for D (backward) */
        double sc = 3.0 * 4 * 128 * 128 * 4, lse = 3.0 * 4 * 128 * 4, y = 3.0 * 128 * 64 * 4, k = p == CL_PASS_F ? 2 : 3;
        double want = a->bytes - k * sc + lse + (p == CL_PASS_F ? 0 : 2 * y);
        CHECK(fabs(b->bytes - want) < 1e-6 && b->stream == a->stream, "pass %d: bytes %g + stream %g, want %g + %g", p,
              b->bytes, b->stream, want, a->stream);
    }
    cl_model_desc_free(d);
}

/* Context parallelism. A context rank's description (cl_model_describe_cp: T / cp query rows, each against
 * all T keys): its block's FLOPs and its products' work (m n k count: the causal share of the whole
 * sequence's T x T at cleave's blocks), times cp, are one device's, in every pass. */
static void test_cp_costs(void) {
    cl_model_config mc;
    cl_model_preset("llama-tiny", &mc);
    int T = 256, B = 2;
    mc.seq_len = T;
    cl_tp_layout tl = {1, 0, 0, 1, CL_F32, 1};
    cl_model_desc *one = NULL;
    CHECK_OK(cl_model_describe_cp(&mc, T, &tl, 1, &one));
    for (int cp = 2; one && cp <= 4; cp *= 2) {
        cl_model_desc *d = NULL;
        CHECK_OK(cl_model_describe_cp(&mc, T / cp, &tl, cp, &d));
        if (!d) break;
        int u = 1; /* the first block */
        for (int causal = 0; causal <= 1; causal++)
            for (int rc = CL_RECOMPUTE_NONE; rc <= CL_RECOMPUTE_FULL; rc++) {
                cl_unit_cost a, b;
                cl_unit_cost_of(one, u, B, 4, rc, causal, &a);
                cl_unit_cost_of(d, u, B, 4, rc, causal, &b);
                for (int p = 0; p < CL_NPASS; p++) {
                    double wa = 0, wb = 0;
                    for (int g = 0; g < a.pass[p].ngemm; g++) wa += a.pass[p].gemm[g].m * a.pass[p].gemm[g].n * a.pass[p].gemm[g].k * a.pass[p].gemm[g].count;
                    for (int g = 0; g < b.pass[p].ngemm; g++) wb += b.pass[p].gemm[g].m * b.pass[p].gemm[g].n * b.pass[p].gemm[g].k * b.pass[p].gemm[g].count;
                    CHECK(fabs(b.pass[p].flops * cp - a.pass[p].flops) <= 1e-12 * a.pass[p].flops,
                          "cp %d causal %d recompute %d pass %d: FLOPs %.6g x cp = %.6g, one device %.6g", cp, causal, rc, p,
                          b.pass[p].flops, b.pass[p].flops * cp, a.pass[p].flops);
                    CHECK(fabs(wb * cp - wa) <= 1e-12 * wa, "cp %d causal %d recompute %d pass %d: work %.6g x cp, one device %.6g", cp,
                          causal, rc, p, wb, wa);
                }
                CHECK(b.pass[CL_PASS_F].flops == d->units[u].flops * B, "cp %d: F equals the description's count", cp);
            }
        cl_model_desc_free(d);
    }
    cl_model_desc_free(one);
}

/* This machine (exact memory): a cp configuration's memory is cl_memory_predict's at that cp, category by
 * category; and the long sequence of issue 32 (a Llama 4 x 256 at T = 16384, 4 devices of 400 MiB, no
 * recompute): no configuration without context parallelism fits, the planner picks one with cp > 1. */
static void test_cp_plan(void) {
    cl_plan_query q;
    memset(&q, 0, sizeof q);
    cl_model_preset("llama", &q.model);
    q.model.layers = 4, q.model.channels = 256, q.model.heads = 8, q.model.kv_heads = 4, q.model.vocab = 256;
    q.model.mlp_width = 688, q.model.seq_len = 16384;
    q.T = 16384;
    q.devices = 4;
    q.global_batch = 1;
    q.device_memory = 400.0 * 1024 * 1024;
    q.vocab_div = 128;
    CHECK_OK(cl_hw_builtin("a100", &q.hw));
    q.hw.exact_memory = 1, q.hw.coll_on_cores = 1, q.hw.attn_causal = 1, q.hw.peak_bf16 = 0;
    q.fix = (cl_plan_cfg){-1, -1, -1, -1, -1, -1, -1, -1, -1, 0, -1, -1, -1, -1, -1};
    q.fix.recompute = CL_RECOMPUTE_NONE;
    /* the predictor's figures at cp 2 x tp 2 and cp 4 */
    static const int shapes[][2] = {{2, 2}, {4, 1}};
    for (int i = 0; i < 2; i++) {
        int cp = shapes[i][0], tp = shapes[i][1];
        cl_plan_cfg c = {1, tp, 1, 1, 1, CL_SCHED_1F1B, 0, CL_RECOMPUTE_NONE, 0, 0, 0, 0, cp, 1, 0};
        cl_plan_result r;
        CHECK_OK(cl_plan_eval(&q, &c, &r));
        cl_train_config tc;
        cl_train_config_default(&tc);
        tc.model = q.model, tc.seq_len = q.T, tc.micro_batch = 1, tc.global_batch = 1, tc.tp = tp, tc.cp = cp;
        tc.vocab_divisible_by = 128, tc.recompute = CL_RECOMPUTE_NONE, tc.device_memory = (size_t)q.device_memory;
        cl_mem_rank mr[4];
        CHECK_OK(cl_memory_predict(&tc, 1, 1, mr));
        int w = 0;
        for (int k = 1; k < 4; k++)
            if (mr[k].total > mr[w].total) w = k;
        printf("  cp %d tp %d: peak %.0f B\n", cp, tp, r.peak_bytes);
        CHECK(r.peak_bytes == (double)mr[w].total, "cp %d tp %d: planner %.0f B, cl_memory_predict %zu B", cp, tp, r.peak_bytes,
              (size_t)mr[w].total);
        for (int k = 0; k < CL_MEM_NCAT; k++)
            CHECK(r.cat_bytes[k] == (double)mr[w].bytes[k], "cp %d tp %d: %s %.0f, predicted %zu", cp, tp, cl_mem_cat_name((cl_mem_cat)k),
                  r.cat_bytes[k], (size_t)mr[w].bytes[k]);
    }
    cl_plan_list l;
    q.fix.cp = 1;
    CHECK_OK(cl_plan_search(&q, &l));
    CHECK(l.considered > 0 && l.n == 0, "cp 1: %ld configurations, %d fit 400 MiB (none should)", l.considered, l.n);
    cl_plan_list_free(&l);
    q.fix.cp = -1;
    CHECK_OK(cl_plan_search(&q, &l));
    CHECK(l.n > 0 && l.r[0].c.cp > 1, "searched: %d of %ld fit, the fastest at cp %d (nearest cp %d tp %d, %.0f B over; %s)", l.n, l.considered, l.n ? l.r[0].c.cp : 0, l.nearest.c.cp, l.nearest.c.tp, l.nearest.over_bytes, l.refused);
    for (int i = 0; i < l.n; i++) CHECK(l.r[i].c.cp > 1, "configuration %d fits at cp %d", i, l.r[i].c.cp);
    cl_plan_list_free(&l);
}

/* Narayanan et al.'s per-iteration count equals the costs' sum. */
static void test_megatron_formula(void) {
    cl_plan_query q;
    memset(&q, 0, sizeof q);
    cl_model_preset("gpt2-tiny", &q.model);
    q.model.layers = 24, q.model.channels = 2304, q.model.heads = 24, q.model.seq_len = 2048, q.model.vocab = 51200;
    q.T = 2048, q.global_batch = 512, q.vocab_div = 128;
    double model, run;
    cl_plan_step_flops(&q, CL_RECOMPUTE_FULL, &model, &run);
    double B = 512, s = 2048, l = 24, h = 2304, V = 51200;
    double F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    CHECK(fabs(run - F) <= 1e-9 * F, "run FLOPs %.6e, Narayanan's formula %.6e", run, F);
    double M = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)); /* without the recompute */
    CHECK(fabs(model - M) <= 1e-9 * M, "model FLOPs %.6e, want %.6e", model, M);
}

/* cl_schedule_simulate_ex: a message's flight delays its receive; GRAD_SYNC and OPT_STEP take their time.
 * 1F1B on 2 ranks, one micro-batch, F = B = W... = 1 (BWD = b + w = 2): F0 [0,1], flight 0.5, F1 [1.5, 2.5],
 * BWD1 [2.5, 4.5], flight 0.5, BWD0 [5, 7], then rank 0's sync 0.25 and step 0.5: 7.75. */
static void test_sim_extra(void) {
    cl_schedule sc;
    CHECK_OK(cl_schedule_make(CL_SCHED_1F1B, 2, 1, 1, &sc));
    cl_sched_costs c = cl_sched_costs_uniform(1, 1, 1);
    double sync[2] = {0.25, 3}, opt[2] = {0.5, 0.5};
    cl_sched_extra x = {0.5, 0.5, sync, opt};
    cl_sim_result r;
    CHECK_OK(cl_schedule_simulate_ex(&sc, &c, &x, &r));
    CHECK(fabs(r.makespan - 8.0) < 1e-12, "makespan %g, want 8 (rank 1: 4.5 + 3 + 0.5)", r.makespan);
    CHECK(fabs(r.busy[0] - 3) < 1e-12 && fabs(r.busy[1] - 3) < 1e-12, "busy counts compute only");
    cl_sim_result_free(&r);
    sync[1] = 0;
    CHECK_OK(cl_schedule_simulate_ex(&sc, &c, &x, &r));
    CHECK(fabs(r.makespan - 7.75) < 1e-12, "makespan %g, want 7.75", r.makespan);
    cl_sim_result_free(&r);
    CHECK_OK(cl_schedule_simulate(&sc, &c, &r));
    CHECK(fabs(r.makespan - 6) < 1e-12, "without extra: %g, want 6", r.makespan);
    cl_sim_result_free(&r);
    x.t_act = -1;
    CHECK(cl_schedule_simulate_ex(&sc, &c, &x, &r) == CL_ERR_INVALID, "a negative flight is refused");
    cl_error_clear();
    cl_schedule_free(&sc);
}

/* Every numeric field of a description: a value outside its plausible range is refused naming the
 * field, the value and the range (latency 1e308, max_efficiency 1e-300 among them). */
static void test_hw_ranges(void) {
    static const char base[] =
        "{\"name\": \"x\", \"peak_flops\": {\"fp32\": 1e12, \"bf16\": 2e12}, \"gemm\": {\"max_efficiency\": 0.5, \"half_dim\": 64}, "
        "\"memory_bandwidth\": 1e10, \"memory_efficiency\": 0.8, \"kernel_bandwidth\": 2e10, \"disk_bandwidth\": 1e9, "
        "\"device_memory\": 4e9, \"devices_per_node\": 2, \"intra_node\": {\"bandwidth\": 1e10, \"efficiency\": 0.75, "
        "\"latency\": 2e-5}, \"inter_node\": {\"bandwidth\": 3e9, \"efficiency\": 0.9, \"latency\": 3e-5}}";
    static const char table[] = "{\"name\": \"x\", \"peak_flops\": {\"fp32\": 1e12}, \"gemm\": {\"table\": [[64, 64, 64, 0.5, 0.4, 0.3]]}, "
                                "\"memory_bandwidth\": 1e10, \"device_memory\": 4e9, \"devices_per_node\": 2, \"intra_node\": "
                                "{\"bandwidth\": 1e10, \"latency\": 2e-5}, \"inter_node\": {\"bandwidth\": 3e9, \"latency\": 3e-5}}";
    cl_hw hw;
    CHECK_OK(cl_hw_parse(base, sizeof base - 1, "base", &hw));
    CHECK_OK(cl_hw_parse(table, sizeof table - 1, "table", &hw));
    /* {text in the description, its replacement, the field as the message names it, the value, the range} */
    static const char *const cases[][5] = {
        {"\"fp32\": 1e12", "\"fp32\": 1e30", "peak_flops.fp32", "1e+30", "1e+06 to 1e+18"},
        {"\"bf16\": 2e12", "\"bf16\": 1e-300", "peak_flops.bf16", "1e-300", "1e+06 to 1e+18"},
        {"\"max_efficiency\": 0.5", "\"max_efficiency\": 1e-300", "gemm.max_efficiency", "1e-300", "0.001 to 1"},
        {"\"max_efficiency\": 0.5", "\"max_efficiency\": 1.5", "gemm.max_efficiency", "1.5", "0.001 to 1"},
        {"\"half_dim\": 64", "\"half_dim\": 1e300", "gemm.half_dim", "1e+300", "0.001 to 1e+06"},
        {"\"memory_bandwidth\": 1e10", "\"memory_bandwidth\": 1e308", "memory_bandwidth", "1e+308", "1e+06 to 1e+15"},
        {"\"memory_efficiency\": 0.8", "\"memory_efficiency\": 0", "memory_efficiency", "0", "0.001 to 1"},
        {"\"kernel_bandwidth\": 2e10", "\"kernel_bandwidth\": 5", "kernel_bandwidth", "5", "1e+06 to 1e+15"},
        {"\"disk_bandwidth\": 1e9", "\"disk_bandwidth\": 1e20", "disk_bandwidth", "1e+20", "1e+06 to 1e+15"},
        {"\"device_memory\": 4e9", "\"device_memory\": 1000", "device_memory", "1000", "1.04858e+06 to 1e+15"},
        {"\"devices_per_node\": 2", "\"devices_per_node\": 1e9", "devices_per_node", "1e+09", "1 to 1.04858e+06"},
        {"\"bandwidth\": 1e10, \"efficiency\": 0.75", "\"bandwidth\": 1e10, \"efficiency\": 7.5", "intra_node.efficiency", "7.5", "0.001 to 1"},
        {"\"latency\": 2e-5", "\"latency\": 1e308", "intra_node.latency", "1e+308", "0 to 1"},
        {"\"bandwidth\": 3e9", "\"bandwidth\": 0.5", "inter_node.bandwidth", "0.5", "1000 to 1e+15"},
        {"\"latency\": 3e-5", "\"latency\": 2", "inter_node.latency", "2", "0 to 1"},
        {"[64, 64, 64, 0.5", "[64, 1e300, 64, 0.5", "gemm.table[0][1] (n)", "1e+300", "1 to 1e+09"},
        {"0.4, 0.3]", "0.4, 1e-300]", "gemm.table[0][5] (efficiency tn)", "1e-300", "0.001 to 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *src = cases[i][0][0] == '[' || cases[i][0][1] == '.' ? table : base;
        const char *at = strstr(src, cases[i][0]);
        CHECK(at != NULL, "case %zu: '%s' in the description", i, cases[i][0]);
        if (!at) continue;
        char text[1024], want[256];
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - src), src, cases[i][1], at + strlen(cases[i][0]));
        snprintf(want, sizeof want, "t.json: field %s = %s is outside its plausible range %s", cases[i][2], cases[i][3], cases[i][4]);
        cl_status s = cl_hw_parse(text, strlen(text), "t.json", &hw);
        CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), want), "case %zu: want '%s', got '%s'", i, want, s ? cl_last_error() : "ok");
        cl_error_clear();
    }
}

static void test_hw(void) {
    cl_hw hw;
    CHECK_OK(cl_hw_builtin("a100", &hw));
    CHECK(hw.peak_bf16 == 312e12 && hw.devices_per_node == 8, "a100");
    CHECK_OK(cl_hw_builtin("h100", &hw));
    const char *bad[][2] = {
        {"{\"name\": \"x\"}", "missing object peak_flops"},
        {"{\"name\": \"x\", \"peak_flops\": {\"fp32\": -1}}", "peak_flops.fp32 = -1 is outside its plausible range 1e+06 to 1e+18 (FLOP/s)"},
        {"{\"name\": \"x\", \"peak_flops\": {\"fp32\": 1e12}, \"gemm\": {\"max_efficiency\": 0.5}}", "missing field gemm.half_dim"},
        {"{\"name\": \"x\", \"peak_flops\": {\"fp32\": 1e12}, \"gemm\": {\"max_efficiency\": 0.5, \"half_dim\": 8}, "
         "\"memory_bandwidth\": 1e9, \"device_memory\": 1e9, \"devices_per_node\": 2, \"intra_node\": {\"bandwidth\": 1e9}}",
         "missing field intra_node.latency"},
        {"{\"name\": \"x\", \"peak_flops\": {\"fp32\": 1e12}, \"gemm\": {\"max_efficiency\": 0.5, \"half_dim\": 8}, "
         "\"memory_bandwidth\": 1e9, \"device_memory\": 1e9, \"devices_per_node\": 2, \"intra_node\": {\"bandwidth\": 1e9, "
         "\"latency\": 0}, \"inter_node\": {\"bandwidth\": 1e9, \"latency\": -1}}",
         "inter_node.latency = -1 is outside its plausible range 0 to 1 (seconds)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cl_status s = cl_hw_parse(bad[i][0], strlen(bad[i][0]), "t.json", &hw);
        CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), bad[i][1]), "case %zu: %s", i, cl_last_error());
        cl_error_clear();
    }
    /* what calibrate writes reads back the same; a table gives the nearest shape's efficiency */
    cl_hw t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "this");
    t.peak_fp32 = 1e11, t.mem_bw = 2e10, t.device_memory = 4e9, t.devices_per_node = 2;
    t.intra_bw = t.inter_bw = 1e10, t.intra_lat = t.inter_lat = 2e-5, t.exact_memory = 1;
    /* the middle row with its own efficiency per layout (nn, nt, tn), the others one for all */
    double pts[3][6] = {{64, 64, 64, 0.25, 0.25, 0.25}, {256, 256, 256, 0.5, 0.4, 0.3}, {1024, 1024, 1024, 0.75, 0.75, 0.75}};
    memcpy(t.gemm_points, pts, sizeof pts);
    t.ngemm_points = 3;
    char *js = cl_hw_to_json(&t, "test");
    cl_hw back;
    CHECK_OK(cl_hw_parse(js, strlen(js), "round trip", &back));
    free(js);
    CHECK(back.peak_fp32 == t.peak_fp32 && back.mem_bw == t.mem_bw && back.device_memory == t.device_memory &&
              back.devices_per_node == 2 && back.intra_bw == t.intra_bw && back.inter_lat == t.inter_lat && back.exact_memory &&
              back.ngemm_points == 3 && back.peak_bf16 == 0,
          "round trip");
    CHECK(cl_hw_gemm_eff(&back, 70, 60, 50) == 0.25 && cl_hw_gemm_eff(&back, 300, 200, 250) == 0.5 &&
              cl_hw_gemm_eff(&back, 4096, 2048, 900) == 0.75,
          "table: nearest in log space");
    CHECK(cl_hw_gemm_eff_layout(&back, 300, 200, 250, CL_GEMM_NT) == 0.4 && cl_hw_gemm_eff_layout(&back, 300, 200, 250, CL_GEMM_TN) == 0.3 &&
              cl_hw_gemm_eff_layout(&back, 70, 60, 50, CL_GEMM_TN) == 0.25 && back.gemm_points[0][5] == 0.25,
          "table: each layout's efficiency read back, a row of one efficiency giving it to all three");
    /* a full grid (calibrate's): trilinear in log2 of m, n, k, clamped at the edges; exact at its points */
    t.ngemm_points = 0;
    for (int i = 0; i < 8; i++) {
        double *pt = t.gemm_points[t.ngemm_points++];
        pt[0] = i & 1 ? 256 : 64, pt[1] = i & 2 ? 1024 : 64, pt[2] = i & 4 ? 512 : 128;
        pt[3] = pt[4] = pt[5] = 0.1 + 0.1 * i; /* eff = 0.1 + 0.1 (bit m + 2 bit n + 4 bit k) */
    }
    /* in log2: m 128 half way from 64 to 256, n 512 (9) 3/4 of the way from 64 (6) to 1024 (10), k 256 half way from 128 to 512 */
    double wm = 0.5, wn = 0.75, wk = 0.5, want_e = 0.1 + 0.1 * (wm + 2 * wn + 4 * wk);
    CHECK(fabs(cl_hw_gemm_eff(&t, 128, 512, 256) - want_e) < 1e-12, "grid: %g, want %g", cl_hw_gemm_eff(&t, 128, 512, 256), want_e);
    CHECK(cl_hw_gemm_eff(&t, 256, 64, 512) == 0.1 + 0.1 * (1 + 4), "grid: exact at a point");
    CHECK(fabs(cl_hw_gemm_eff(&t, 4096, 16, 100000) - (0.1 + 0.1 * (1 + 4))) < 1e-12, "grid: clamped at the edges");
    /* the curve: max x prod d / (d + half) */
    CHECK_OK(cl_hw_builtin("a100", &hw));
    double e = cl_hw_gemm_eff(&hw, 2048, 4096, 1024), we = hw.gemm_max_eff * 2048 / (2048 + hw.gemm_half) *
                                                           4096 / (4096 + hw.gemm_half) * 1024 / (1024 + hw.gemm_half);
    CHECK(fabs(e - we) < 1e-15, "curve %g, want %g", e, we);
    /* a collective on one device costs nothing; ring all-reduce of n bytes over g: 2 (g-1)/g n / bw + 2 (g-1) lat */
    CHECK_OK(cl_hw_builtin("a100", &hw));
    CHECK(cl_hw_coll(&hw, CL_COLL_ALLREDUCE, 1e9, 1, 0) == 0, "one device");
    double want = 2 * 7.0 / 8 * 1e9 / hw.intra_bw + 14 * hw.intra_lat;
    CHECK(fabs(cl_hw_coll(&hw, CL_COLL_ALLREDUCE, 1e9, 8, 0) - want) < 1e-12, "ring all-reduce");
}

/* ZeRO Table 1, 7.5B: GB (1e9 bytes) as printed, 3 significant digits. */
static void test_zero_table(void) {
    static const int N[] = {1, 4, 16, 64, 256, 1024};
    /* as printed: each figure rounded (half up) to the decimals the paper shows */
    static const char *want[6][3] = {{"120", "120", "120"},    {"52.5", "41.3", "30"},   {"35.6", "21.6", "7.5"},
                                     {"31.4", "16.6", "1.88"}, {"30.4", "15.4", "0.47"}, {"30.1", "15.1", "0.12"}};
    for (int i = 0; i < 6; i++)
        for (int z = 1; z <= 3; z++) {
            double gb = cl_plan_model_states(7.5e9, 12, z, N[i]) / 1e9;
            const char *w = want[i][z - 1], *dot = strchr(w, '.');
            int dec = dot ? (int)strlen(dot + 1) : 0;
            double scale = pow(10, dec), got = floor(gb * scale + 0.5) / scale;
            CHECK(fabs(got - atof(w)) < 1e-9, "ZeRO stage %d, N %d: %.6g GB rounds to %.*f, the paper %s", z, N[i], gb, dec, got, w);
        }
    /* stage 0 (no sharding): 16 psi whatever N */
    CHECK(cl_plan_model_states(7.5e9, 12, 0, 64) == 120e9, "stage 0");
}

typedef struct {
    double billions;
    int heads, hidden, layers, t, p, gpus, batch;
    double tflops;
} mrow;

static const mrow table1[] = {
    {1.7, 24, 2304, 24, 1, 1, 32, 512, 137},      {3.6, 32, 3072, 30, 2, 1, 64, 512, 138},
    {7.5, 32, 4096, 36, 4, 1, 128, 512, 142},     {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135},
    {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138},   {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140},
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148}, {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163}, {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163},
};

static void row_query(const mrow *r, cl_plan_query *q) {
    memset(q, 0, sizeof *q);
    cl_model_preset("gpt2-tiny", &q->model);
    q->model.layers = r->layers, q->model.channels = r->hidden, q->model.heads = r->heads;
    q->model.seq_len = 2048, q->model.vocab = 51200;
    snprintf(q->model.name, sizeof q->model.name, "custom");
    q->T = 2048, q->devices = r->gpus, q->global_batch = r->batch, q->vocab_div = 128;
    cl_hw_builtin("a100", &q->hw);
    q->fix = (cl_plan_cfg){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
}

static cl_plan_cfg row_cfg(const mrow *r) {
    int v = 1, per = r->layers / r->p;
    if (r->p > 1)
        for (v = 2; per % v; v++) {}
    cl_plan_cfg c = {r->gpus / (r->t * r->p), r->t, r->p, v, 1, v > 1 ? CL_SCHED_INTERLEAVED : CL_SCHED_1F1B, 0, CL_RECOMPUTE_FULL, 0, 1, 0, 0, 1, 1, 0};
    return c;
}

static void test_megatron_table(int search) {
    double sum = 0;
    int n = sizeof table1 / sizeof table1[0];
    printf("Narayanan et al. 2021, Table 1, a100 description: predicted teraFLOP/s per GPU\n");
    for (int i = 0; i < n; i++) {
        const mrow *r = &table1[i];
        cl_plan_query q;
        row_query(r, &q);
        cl_plan_cfg c = row_cfg(r);
        cl_plan_result res;
        cl_status s = cl_plan_eval(&q, &c, &res);
        CHECK(s == CL_OK, "row %g: %s", r->billions, cl_last_error());
        if (s) continue;
        double err = (res.hw_tflops - r->tflops) / r->tflops;
        sum += fabs(err);
        printf("  %7.1fB t %d p %2d v %d d %3d: paper %5.1f predicted %6.1f (%+5.1f%%), bubble %.3f, comm %.3f, step %.2f s, %s, "
               "peak %.1f GiB\n",
               r->billions, r->t, r->p, c.v, c.dp, r->tflops, res.hw_tflops, 100 * err, res.bubble, res.comm_share, res.step_s,
               res.fits ? "fits" : "DOES NOT FIT", res.peak_bytes / (1 << 30));
        CHECK(fabs(err) < 0.10, "row %gB: predicted %.1f, the paper %.1f", r->billions, res.hw_tflops, r->tflops);
        if (!res.fits)
            printf("      (under cleave's memory statement the paper's configuration needs %.1f GiB on pipeline rank %d: params %.1f, "
                   "grads %.1f, optimizer %.1f, activations %.1f, workspace %.1f)\n",
                   res.peak_bytes / (1 << 30), res.full_rank, res.cat_bytes[0] / (1 << 30), res.cat_bytes[1] / (1 << 30),
                   res.cat_bytes[2] / (1 << 30), res.cat_bytes[3] / (1 << 30), res.cat_bytes[4] / (1 << 30));
        if (!search) continue;
        cl_plan_list l;
        double t0 = cl_now();
        s = cl_plan_search(&q, &l);
        double dt = cl_now() - t0;
        CHECK(s == CL_OK, "search %gB: %s", r->billions, cl_last_error());
        if (s) continue;
        int rank = -1;
        for (int k = 0; k < l.n; k++)
            if (!memcmp(&l.r[k].c, &c, sizeof c)) rank = k + 1;
        CHECK(l.n > 0 && l.r[0].step_s <= res.step_s * (1 + 1e-9), "search %gB: best %.3f s, the paper's %.3f s", r->billions,
              l.n ? l.r[0].step_s : 0, res.step_s);
        const cl_plan_cfg *b = &l.r[0].c;
        printf("      search %.2f s: %ld configurations, %ld fit, %ld simulated; best dp %d tp %d pp %d v %d mb %d %s zero %d rc %d sp %d: "
               "%.1f TFLOP/s; the paper's configuration ranks %d of %d\n",
               dt, l.considered, l.fitted, l.simulated_count, b->dp, b->tp, b->pp, b->v, b->mb, cl_sched_kind_name((cl_sched_kind)b->schedule),
               b->zero, b->recompute, b->sp, l.r[0].hw_tflops, rank, l.n);
        cl_plan_list_free(&l);
    }
    printf("  mean |error| %.2f%%\n", 100 * sum / n);
    CHECK(sum / n < 0.05, "mean error %.2f%%", 100 * sum / n);
}

int main(int argc, char **argv) {
    test_costs();
    test_causal_share();
    test_cp_costs();
    test_cp_plan();
    test_megatron_formula();
    test_sim_extra();
    test_hw();
    test_hw_ranges();
    test_zero_table();
    test_megatron_table(!(argc > 1 && !strcmp(argv[1], "--no-search")));
    return cl_test_report("test_plan");
}
