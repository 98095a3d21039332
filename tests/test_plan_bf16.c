/* The planner's bf16 pricing (issue 29 item 6; src/plan/hw.c cl_hw_pass_compute, src/nn/cost.c): on a
 * description of cleave's engine (exact_memory, as calibrate writes) a bf16 pass prices the linears at the
 * BF16 peak and gemm_bf16 table, the attention products (flash.c: F32 in either dtype) at the F32 peak and
 * gemm table, the other kernels' bytes at F32 width (twice the count at the activation width 2) and the
 * narrowings F32 -> BF16 the step runs (6 bytes an element, 2 for a fused kernel's extra BF16 write); on a GPU
 * description every product at the BF16 rates, the bytes as counted, no narrowings; fp32 as before. Expected
 * figures from the block's products written out here (Megatron's counts per product) and the narrowings read
 * off kind_block.c's, llama_attn.c's, kind_llama_block.c's and kind_head.c's backward and forward. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "cleave/backend.h"
#include "plan/plan.h"

/* one-row tables: every shape takes the row's efficiency per layout (NN, NT, TN) */
#define HW_JSON(exact)                                                                                                     \
    "{\"name\": \"t\", \"peak_flops\": {\"fp32\": 1e11, \"bf16\": 2e11}, "                                                 \
    "\"gemm\": {\"table\": [[64, 64, 64, 0.5, 0.4, 0.3]]}, \"gemm_bf16\": {\"table\": [[64, 64, 64, 0.8, 0.7, 0.6]]}, " \
    "\"memory_bandwidth\": 2e10, \"kernel_bandwidth\": 1e10, \"device_memory\": 4e9, \"devices_per_node\": 2, "          \
    "\"intra_node\": {\"bandwidth\": 1e10, \"latency\": 2e-5}, \"inter_node\": {\"bandwidth\": 3e9, \"latency\": 3e-5}, " \
    "\"exact_memory\": " exact "}"

static const double P32 = 1e11, P16 = 2e11, KBW = 1e10, MBW = 2e10;
static const double E32[3] = {0.5, 0.4, 0.3}, E16[3] = {0.8, 0.7, 0.6};

static cl_model_desc *describe(const char *preset, int C, int H, int T, int tp, int sp, cl_dtype dt) {
    cl_model_config mc;
    CHECK_OK(cl_model_preset(preset, &mc));
    mc.layers = 2, mc.channels = C, mc.heads = H, mc.seq_len = T;
    cl_tp_layout tl = {tp, 0, sp, 1, dt, 1};
    cl_model_desc *d = NULL;
    CHECK_OK(cl_model_describe_tp(&mc, T, &tl, &d));
    return d;
}

static int close_to(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b); }

/* GPT's block at tp 1: each pass's seconds against the products written out (R = B T rows; the attention's
 * two forward and four backward products of 2 B T^2 C at the causal share each, by layout) */
static void test_block_prices(void) {
    int B = 2, T = 256, C = 128, H = 4;
    double R = (double)B * T, lin = 2.0 * R * C * C; /* one C x C product's FLOPs: c_attn 3, c_proj 1, the MLP's 4 + 4 */
    double att1 = 2.0 * B * (double)T * T * C * cl_attention_share(T); /* one attention product's work */
    cl_hw exact, gpu;
    static const char je[] = HW_JSON("true"), jg[] = HW_JSON("false");
    CHECK_OK(cl_hw_parse(je, sizeof je - 1, "exact", &exact));
    CHECK_OK(cl_hw_parse(jg, sizeof jg - 1, "gpu", &gpu));
    cl_model_desc *d16 = describe("gpt2-tiny", C, H, T, 1, 0, CL_BF16), *d32 = describe("gpt2-tiny", C, H, T, 1, 0, CL_F32);
    if (!d16 || !d32) return;
    cl_unit_cost u16, u32;
    cl_unit_cost_of(d16, 1, B, 2, 0, 1, &u16);
    cl_unit_cost_of(d32, 1, B, 4, 0, 1, &u32);
    /* the linears' work by layout per pass (F: NN, B: NT, W: TN), attention's products by layout */
    double linw = 12 * lin;
    double attf[3] = {att1, att1, 0}, attb[3] = {att1, att1, 2 * att1}; /* F: p v (NN), q k^T (NT); B: dq, dp, dk + dv */
    const cl_pass_cost *f = &u16.pass[CL_PASS_F], *b = &u16.pass[CL_PASS_B], *w = &u16.pass[CL_PASS_W];
    /* the narrowings: forward atty (R C); backward dO (R C), dqkv (3 R C), GELU's and ln_2's fused BF16 writes
     * (4 R C, R C); weight pass atty again */
    CHECK(f->narrow == 6 * R * C, "block F narrow %g, want %g", f->narrow, 6 * R * C);
    CHECK(b->narrow == 6 * R * C + 6 * 3 * R * C + 2 * 4 * R * C + 2 * R * C, "block B narrow %g", b->narrow);
    CHECK(w->narrow == 6 * R * C, "block W narrow %g", w->narrow);
    for (int p = 0; p < CL_NPASS; p++) CHECK(u32.pass[p].narrow == 0, "fp32: no narrowing (pass %d)", p);
    for (int p = 0; p < 3; p++) {
        const cl_pass_cost *c = &u16.pass[p];
        const double *att = p == CL_PASS_F ? attf : p == CL_PASS_B ? attb : (double[3]){0, 0, 0};
        int l = p == CL_PASS_F ? CL_GEMM_NN : p == CL_PASS_B ? CL_GEMM_NT : CL_GEMM_TN;
        double tl = linw / (P16 * E16[l]), ta32 = 0, ta16 = 0;
        for (int k = 0; k < 3; k++) ta32 += att[k] / (P32 * E32[k]), ta16 += att[k] / (P16 * E16[k]);
        /* cleave's engine: attention at F32's rates, the bytes at F32 width, the narrowings added */
        double want = tl + ta32 + (2 * c->bytes + c->narrow) / KBW + 2 * c->stream / MBW;
        double got = cl_hw_pass_compute(&exact, c, 1);
        CHECK(close_to(got, want), "pass %d on cleave's engine: %.9g s, want %.9g", p, got, want);
        /* a GPU description: every product at BF16's rates, the bytes as counted, no narrowing */
        want = tl + ta16 + c->bytes / KBW + c->stream / MBW;
        got = cl_hw_pass_compute(&gpu, c, 1);
        CHECK(close_to(got, want), "pass %d on a GPU description: %.9g s, want %.9g", p, got, want);
        /* fp32 either way: everything at F32's */
        const cl_pass_cost *c32 = &u32.pass[p];
        want = linw / (P32 * E32[l]) + ta32 + c32->bytes / KBW + c32->stream / MBW;
        CHECK(close_to(cl_hw_pass_compute(&exact, c32, 0), want) && cl_hw_pass_compute(&gpu, c32, 0) == cl_hw_pass_compute(&exact, c32, 0),
              "pass %d in fp32", p);
    }
    /* the blockwise re-forward's recomputed scores q k^T: attention work, F32's on cleave's engine */
    const cl_pass_cost *rf = &u16.pass[CL_PASS_RF];
    CHECK(close_to(cl_hw_pass_compute(&exact, rf, 1), att1 / (P32 * E32[CL_GEMM_NT])), "re-forward's q k^T at F32's rate");
    /* stage sums past CL_COST_MAX_GEMM shapes merge into the last; the F32 work goes with them, weighted by size */
    cl_pass_cost acc = {0};
    double f32w = 0;
    for (int i = 0; i < 3; i++) cl_pass_cost_add(&acc, b);
    for (int i = 0; i < acc.ngemm; i++) f32w += acc.gemm[i].f32 * acc.gemm[i].m * acc.gemm[i].n * acc.gemm[i].k;
    CHECK(acc.ngemm == CL_COST_MAX_GEMM && close_to(2 * f32w, 3 * 4 * att1), "merged F32 work %g, want %g", 2 * f32w, 12 * att1);
    CHECK(acc.narrow == 3 * b->narrow, "narrow summed");
    cl_model_desc_free(d16), cl_model_desc_free(d32);
}

/* the narrowing counts of the other kinds and of sequence parallelism */
static void test_narrow_counts(void) {
    int B = 2, T = 128, C = 64, H = 4;
    double R = (double)B * T;
    /* GPT at tp 2 with sp: local columns C/2 (Cl), qkv 3 Cl, MLP 4 Cl; dR narrowed (no fused ln_2 write) */
    cl_model_desc *d = describe("gpt2-tiny", C, H, T, 2, 1, CL_BF16);
    if (!d) return;
    cl_unit_cost u;
    double Cl = C / 2.0;
    cl_unit_cost_of(d, 1, B, 2, 0, 1, &u);
    CHECK(u.pass[CL_PASS_F].narrow == 6 * R * Cl, "sp F narrow");
    CHECK(u.pass[CL_PASS_B].narrow == 6 * R * C + 6 * 3 * R * Cl + 2 * 4 * R * Cl + 6 * R * C, "sp B narrow %g",
          u.pass[CL_PASS_B].narrow);
    double Vl = d->vocab_local;
    cl_unit_cost_of(d, d->nunits - 1, B, 2, 0, 1, &u);
    CHECK(u.pass[CL_PASS_B].narrow == 6 * R * Vl, "head: dlogits narrowed");
    cl_model_desc_free(d);
    /* Llama: o_proj's input forward and again for its weight gradient; dR, dqkv; the MLP's dO, dgate and dup */
    d = describe("llama-tiny", C, H, T, 1, 0, CL_BF16);
    if (!d) return;
    double Q = d->channels_local + 2.0 * d->kv_channels_local, Fl = d->mlp_local;
    cl_unit_cost_of(d, 1, B, 2, 0, 1, &u);
    CHECK(u.pass[CL_PASS_F].narrow == 6 * R * C && u.pass[CL_PASS_W].narrow == 6 * R * C, "llama F, W narrow");
    CHECK(u.pass[CL_PASS_B].narrow == 6 * R * C + 6 * R * Q + 6 * R * C + 6 * 2 * R * Fl, "llama B narrow %g", u.pass[CL_PASS_B].narrow);
    cl_model_desc_free(d);
    /* Mixtral's MoE block: the attention half's as Llama's; the router's logits rounded and widened back (2 N E)
     * forward; the outputs' gradients (S = N K rows of C), dgate and dup (S Fl each) and dlogits (N E) backward */
    d = describe("mixtral-tiny", C, H, T, 1, 0, CL_BF16);
    if (!d) return;
    int mu = 1;
    while (mu < d->nunits && d->units[mu].kind != CL_UNIT_MOE_BLOCK) mu++;
    CHECK(mu < d->nunits, "mixtral-tiny has an MoE block");
    if (mu < d->nunits) {
        double E = d->cfg.experts, S = R * d->cfg.experts_per_token;
        Q = d->channels_local + 2.0 * d->kv_channels_local, Fl = d->mlp_local;
        cl_unit_cost_of(d, mu, B, 2, 0, 1, &u);
        CHECK(u.pass[CL_PASS_F].narrow == 6 * R * C + 6 * 2 * R * E, "moe F narrow %g", u.pass[CL_PASS_F].narrow);
        CHECK(u.pass[CL_PASS_B].narrow == 6 * R * C + 6 * R * Q + 6 * (S * C + 2 * S * Fl + R * E), "moe B narrow %g",
              u.pass[CL_PASS_B].narrow);
    }
    cl_model_desc_free(d);
}

int main(void) {
    test_block_prices();
    test_narrow_counts();
    return cl_test_report("test_plan_bf16");
}
