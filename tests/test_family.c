/* The GPT family's configuration past GPT-2's shape (issue 28, item 6),
 * described by the formula: gpt2-tiny's shape (L 2, C 64, H 4, V 256,
 * context 64) with KV = 2 key-value heads (hd = C/H = 16, K = KV hd = 32)
 * and an MLP F = 96 wide. Whole shapes: c_attn [C, C + 2K] and [C + 2K],
 * c_fc [C, F] and [F], mlp.c_proj [F, C]; parameters V C + 64 C + 2 C + L
 * (4 C + C (C + 2K) + (C + 2K) + C C + C + C F + F + F C + C); a block's
 * kept activations per sample T (4 C + 4) + T (2 C + 2K + 2F) + H T T, its
 * scratch T (3 C + C + (C + 2K) + F) + H T T; GPT-2's (KV = H, F = 4C) the
 * figures it always had.
 * At tp 2: c_attn holds C/2 query and K/2 key and value columns a rank, each
 * element of the whole tensor on exactly one rank at the place both
 * cl_param_local_index and cl_param_row_runs give. The configuration is
 * refused for training naming n_kv_heads (cl_model_config_runs and
 * cl_model_create), the MLP width alone is not; kv_heads must divide heads.
 * GPT-2's defaults (0) describe as the explicit values do. */
#include "cleave/kernels.h"
#include "cleave/model.h"
#include "common/check.h"

#include <string.h>

static const cl_param_spec *find(const cl_model_desc *d, const char *name) {
    int i = cl_model_find_param(d, name);
    return i >= 0 ? &d->params[i] : NULL;
}

int main(void) {
    cl_model_config c;
    CHECK(cl_model_preset("gpt2-tiny", &c) == CL_OK, "preset");
    const int64_t L = 2, C = 64, H = 4, V = 256, P = 64, KV = 2, F = 96, K = KV * (C / H), T = 64;
    /* the blockwise attention's backward tiles a sample: H pairs of min(64, T) x min(128, T) (flash.c) */
    const int64_t tiles = H * 2 * T * T;
    c.kv_heads = (int)KV;
    c.mlp_width = (int)F;
    CHECK(cl_model_kv_heads(&c) == KV && cl_model_mlp_width(&c) == F, "the accessors");
    cl_model_desc *d = NULL;
    CHECK(cl_model_describe(&c, 0, &d) == CL_OK, "describe: %s", cl_last_error());
    if (!d) return cl_test_report("test_family");
    const cl_param_spec *qkv = find(d, "h.0.attn.c_attn.weight"), *qkvb = find(d, "h.1.attn.c_attn.bias"),
                        *fc = find(d, "h.0.mlp.c_fc.weight"), *fcb = find(d, "h.0.mlp.c_fc.bias"), *pr = find(d, "h.1.mlp.c_proj.weight");
    CHECK(qkv && qkv->ndim == 2 && qkv->shape[0] == C && qkv->shape[1] == C + 2 * K, "c_attn [C, C + 2K]");
    CHECK(qkvb && qkvb->ndim == 1 && qkvb->shape[0] == C + 2 * K, "c_attn bias [C + 2K]");
    CHECK(fc && fc->shape[0] == C && fc->shape[1] == F && fcb && fcb->shape[0] == F, "c_fc [C, F], [F]");
    CHECK(pr && pr->shape[0] == F && pr->shape[1] == C, "mlp.c_proj [F, C]");
    int64_t blk = 4 * C + C * (C + 2 * K) + (C + 2 * K) + C * C + C + C * F + F + F * C + C;
    CHECK(d->nparams_total == V * C + P * C + 2 * C + L * blk, "parameters %lld, the formula %lld", (long long)d->nparams_total,
          (long long)(V * C + P * C + 2 * C + L * blk));
    CHECK(d->units[1].act_floats == T * (4 * C + 4) + T * (2 * C + 2 * K + 2 * F) + H * T, "block activations %lld",
          (long long)d->units[1].act_floats);
    CHECK(d->units[1].scratch_floats == T * (3 * C + C + (C + 2 * K) + F) + tiles, "block scratch %lld (dres2, dln2, dln1; "
          "datty, dqkv, dfc; the attention's tiles)", (long long)d->units[1].scratch_floats);
    CHECK(d->units[1].flops == 2.0 * T * (2 * C + 2 * K + 2 * F) * C + 4.0 * T * T * C, "block FLOPs %g", d->units[1].flops);
    /* refused for training, by name; described all the same */
    CHECK(cl_model_config_runs(&c) == CL_ERR_UNSUPPORTED && strstr(cl_last_error(), "n_kv_heads 2"), "runs: %s", cl_last_error());
    cl_device *dev = NULL;
    cl_model *m = NULL;
    CHECK(cl_device_create_cpu(&dev, 0, 0) == CL_OK, "device");
    CHECK(cl_model_create(&m, d, dev, 1) == CL_ERR_UNSUPPORTED && !m && strstr(cl_last_error(), "n_kv_heads"), "create: %s",
          cl_last_error());
    /* the MLP width alone runs */
    cl_model_config cf = c;
    cf.kv_heads = 0;
    cl_model_desc *df = NULL;
    CHECK(cl_model_config_runs(&cf) == CL_OK && cl_model_describe(&cf, 0, &df) == CL_OK, "F 96 runs: %s", cl_last_error());
    CHECK(df && cl_model_create(&m, df, dev, 1) == CL_OK && m, "F 96 builds: %s", cl_last_error());
    cl_model_destroy(m);
    cl_model_desc_free(df);
    cl_model_config norm = cf;
    norm.norm = CL_NORM_RMS;
    CHECK(cl_model_config_runs(&norm) == CL_ERR_UNSUPPORTED && strstr(cl_last_error(), "norm rmsnorm"), "rmsnorm: %s", cl_last_error());
    cl_model_config bad = c;
    bad.kv_heads = 3;
    CHECK(cl_model_config_check(&bad) == CL_ERR_INVALID && strstr(cl_last_error(), "kv-heads 3 must divide"), "kv 3: %s", cl_last_error());
    /* GPT-2's defaults: 0 and the explicit values describe alike */
    cl_model_config g0, g1;
    cl_model_preset("gpt2-tiny", &g0);
    g1 = g0;
    g1.kv_heads = (int)H;
    g1.mlp_width = (int)(4 * C);
    cl_model_desc *d0 = NULL, *d1 = NULL;
    CHECK(cl_model_describe(&g0, 0, &d0) == CL_OK && cl_model_describe(&g1, 0, &d1) == CL_OK, "defaults");
    int same = d0 && d1 && d0->nunits == d1->nunits && d0->nparams == d1->nparams && d0->nfloats == d1->nfloats;
    for (int i = 0; same && i < d0->nparams; i++)
        same = !memcmp(d0->params[i].shape, d1->params[i].shape, sizeof d0->params[i].shape) && d0->params[i].byte_offset == d1->params[i].byte_offset;
    for (int u = 0; same && u < d0->nunits; u++)
        same = d0->units[u].act_floats == d1->units[u].act_floats && d0->units[u].scratch_floats == d1->units[u].scratch_floats &&
               d0->units[u].flops == d1->units[u].flops;
    CHECK(same, "kv_heads = heads and mlp_width = 4C describe as the defaults");
    /* and as GPT-2's block has: kept T (4C + 4) + 12 T C + H T (the lse), scratch T (3C + 8C) + the tiles, FLOPs 24 T C^2 + 4 T^2 C */
    CHECK(d0 && d0->units[1].act_floats == T * (4 * C + 4) + 12 * T * C + H * T &&
              d0->units[1].scratch_floats == T * 11 * C + tiles && d0->units[1].flops == 24.0 * T * C * C + 4.0 * T * T * C,
          "GPT-2's block sizes");
    /* one of 4 context ranks: T / 4 tokens, each query row's attention over all T keys, so the ranks' FLOPs sum to one's */
    cl_tp_layout one = {1, 0, 0, 1, CL_F32, 1};
    cl_model_desc *q = NULL;
    CHECK(cl_model_describe_cp(&g0, (int)T / 4, &one, 4, &q) == CL_OK, "cp 4: %s", cl_last_error());
    double fsum = 0, fq = 0;
    for (int u = 0; d0 && q && u < d0->nunits; u++) fsum += d0->units[u].flops, fq += q->units[u].flops;
    CHECK(q && q->cp == 4 && q->units[1].flops == 24.0 * (T / 4) * C * C + 4.0 * (T / 4) * T * C && 4 * fq == fsum,
          "a context rank's FLOPs: a quarter of one device's (%g x 4 against %g)", fq, fsum);
    cl_model_desc_free(q);
    cl_model_desc_free(d0);
    cl_model_desc_free(d1);
    /* tp 2: the grouped split, each element on one rank, local index and runs agreeing */
    cl_model_desc *r[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        cl_tp_layout tl = {2, k, 0, 1, CL_F32, 1};
        CHECK(cl_model_describe_tp(&c, 0, &tl, &r[k]) == CL_OK, "tp 2 rank %d: %s", k, cl_last_error());
    }
    for (int w = 0; r[0] && r[1] && w < 2; w++) {
        const char *name = w ? "h.0.attn.c_attn.bias" : "h.0.attn.c_attn.weight";
        const cl_param_spec *p0 = find(r[0], name), *p1 = find(r[1], name);
        CHECK(p0 && p0->split == CL_SPLIT_HEADS3 && p0->part == C / 2 && p0->part_kv == K / 2 &&
                  p0->shape[p0->ndim - 1] == C / 2 + K, "%s at tp 2: C/2 query and K/2 key and value columns", name);
        if (!p0 || !p1) continue;
        int64_t rows = p0->full_numel / (C + 2 * K), wrong = 0;
        for (int64_t g = 0; g < p0->full_numel; g++) {
            int64_t row = g / (C + 2 * K), col = g % (C + 2 * K);
            int64_t part = col < C ? col / (C / 2) : col < C + K ? (col - C) / (K / 2) : (col - C - K) / (K / 2); /* its rank */
            int64_t l0 = cl_param_local_index(p0, 0, g), l1 = cl_param_local_index(p1, 1, g);
            if ((l0 >= 0) + (l1 >= 0) != 1 || (part == 0) != (l0 >= 0)) wrong++;
            (void)row;
        }
        CHECK(wrong == 0, "%s: %lld elements not on exactly their rank", name, (long long)wrong);
        for (int k = 0; k < 2; k++) {
            const cl_param_spec *p = k ? p1 : p0;
            int64_t bad_runs = 0, covered = 0;
            for (int64_t row = 0; row < rows; row++) {
                cl_param_run runs[3];
                int n = cl_param_row_runs(p, k, row, runs);
                for (int j = 0; j < n; j++)
                    for (int64_t e = 0; e < runs[j].len; e++, covered++)
                        if (cl_param_local_index(p, k, row * (C + 2 * K) + runs[j].col + e) != runs[j].local + e) bad_runs++;
            }
            CHECK(bad_runs == 0 && covered == p->numel, "%s rank %d: runs cover %lld of %lld, %lld misplaced", name, k,
                  (long long)covered, (long long)p->numel, (long long)bad_runs);
        }
    }
    cl_model_desc_free(r[0]);
    cl_model_desc_free(r[1]);
    cl_model_desc_free(d);
    /* cl_rng_skip: the state n draws later, against drawing them (below its 4096 it steps; from there it jumps
     * by x^n modulo the generator's characteristic polynomial), and jumps that add up */
    {
        const uint64_t ns[] = {0, 1, 4095, 4096, 4097, 65539, 1000003, 25000001};
        int64_t wrong = 0;
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            cl_rng a, b;
            cl_rng_seed(&a, 99 + k);
            b = a;
            for (uint64_t j = 0; j < ns[k]; j++) (void)cl_rng_u64(&a);
            cl_rng_skip(&b, ns[k]);
            wrong += cl_rng_u64(&a) != cl_rng_u64(&b);
        }
        CHECK(wrong == 0, "cl_rng_skip: %lld of %zu lengths land elsewhere than drawing that many", (long long)wrong,
              sizeof ns / sizeof ns[0]);
        cl_rng a, b;
        cl_rng_seed(&a, 7);
        b = a;
        cl_rng_skip(&a, (1ULL << 62) + 12345);
        cl_rng_skip(&a, (1ULL << 62) - 12345);
        cl_rng_skip(&b, 1ULL << 63);
        uint64_t x = cl_rng_u64(&a), y = cl_rng_u64(&b);
        CHECK(x == y, "cl_rng_skip: 2^62 + 12345 then 2^62 - 12345 is not 2^63 (%016llx against %016llx)",
              (unsigned long long)x, (unsigned long long)y);
    }
    /* cl_model_init: the stream replayed value by value on one thread (cl_rng_normal, cl_rng_uniform in parameter
     * and row order, as the init once ran) gives the bits of the init's pieces over 1 and over 2 threads; a tensor
     * parallel rank's part and a pipeline stage's (which skip what they do not hold) hold the whole model's values */
    cl_model_config gi;
    cl_model_preset("gpt2-tiny", &gi);
    gi.channels = 512; /* c_fc 512 x 2048 and the qkv 512 x 1536: several pieces of 256K values, which the team splits */
    cl_model_desc *di = NULL;
    cl_model *whole = NULL;
    CHECK(cl_model_describe(&gi, 0, &di) == CL_OK && di, "init model: %s", cl_last_error());
    for (int th = 1; di && th <= 2; th++) {
        cl_model *mi = NULL;
        CHECK(cl_model_create(&mi, di, dev, 1) == CL_OK && mi, "init model builds: %s", cl_last_error());
        if (!mi) break;
        int before = cl_threads();
        cl_set_threads(th);
        cl_model_init(mi, 1234);
        cl_set_threads(before);
        cl_rng rr;
        cl_rng_seed(&rr, 1234);
        int64_t wrong = 0, normals = 0;
        for (int i = 0; i < di->nparams; i++) {
            const cl_param_spec *ps = &di->params[i];
            const float *v = cl_model_param(mi, i);
            for (int64_t e = 0; e < ps->full_numel; e++) {
                float x = ps->init == CL_INIT_ONES ? 1.0f : 0.0f;
                if (ps->init == CL_INIT_NORMAL) x = ps->scale * cl_rng_normal(&rr), normals++;
                if (ps->init == CL_INIT_UNIFORM) x = ps->scale * (2.0f * cl_rng_uniform(&rr) - 1.0f);
                if (!v || memcmp(&x, &v[e], sizeof x)) wrong++;
            }
        }
        CHECK(wrong == 0 && normals > 1000000, "init on %d thread(s): %lld of the values differ from the stream replayed (%lld normals)",
              th, (long long)wrong, (long long)normals);
        if (whole) cl_model_destroy(mi);
        else whole = mi;
    }
    const struct { int tp, rank, u0, u1; } parts[] = {{2, 0, 0, 0}, {2, 1, 0, 0}, {4, 3, 0, 0}, {1, 0, 0, 2}, {1, 0, 2, 0}, {2, 1, 1, 3}};
    for (size_t k = 0; whole && k < sizeof parts / sizeof parts[0]; k++) {
        cl_tp_layout tl = {.tp = parts[k].tp, .rank = parts[k].rank};
        cl_model_desc *dp = NULL;
        cl_model *mp = NULL;
        CHECK(cl_model_describe_tp(&gi, 0, &tl, &dp) == CL_OK && dp, "init part %zu: %s", k, cl_last_error());
        if (!dp) continue;
        int u1 = parts[k].u1 ? parts[k].u1 : dp->nunits;
        CHECK(cl_model_create_part(&mp, dp, dev, 1, parts[k].u0, u1) == CL_OK && mp, "init part %zu builds: %s", k, cl_last_error());
        int64_t wrong = 0, held = 0;
        if (mp) {
            int before = cl_threads();
            cl_set_threads(2);
            cl_model_init(mp, 1234);
            cl_set_threads(before);
            for (int i = 0; i < dp->nparams; i++) {
                const cl_param_spec *ps = &dp->params[i];
                const float *v = cl_model_param(mp, i), *w = cl_model_param(whole, i);
                for (int64_t e = 0; v && e < ps->full_numel; e++) {
                    int64_t l = cl_param_local_index(ps, parts[k].rank, e);
                    if (l < 0) continue;
                    held++;
                    wrong += memcmp(&v[l], &w[e], sizeof *v) != 0;
                }
            }
            cl_model_destroy(mp);
        }
        CHECK(wrong == 0 && held > 100000, "init of tp %d rank %d, units [%d, %d): %lld of its %lld values are not the whole model's",
              parts[k].tp, parts[k].rank, parts[k].u0, u1, (long long)wrong, (long long)held);
        cl_model_desc_free(dp);
    }
    if (whole) cl_model_destroy(whole);
    cl_model_desc_free(di);
    cl_device_destroy(dev);
    return cl_test_report("test_family");
}
