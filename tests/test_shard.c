/* The box arithmetic of sharded checkpoints (src/train/shard_index.h)
 * against cl_param_local_index, an independent statement of what each
 * tensor-parallel rank holds:
 * - every parameter of gpt2-tiny (vocabulary 300, padded by tp) and of an
 *   MLP at tp 1, 2 and 4: the boxes of each rank's whole slice put every
 *   element of the whole tensor at the local index cl_param_local_index
 *   gives, a split tensor's elements each on exactly one rank, a replicated
 *   one's on every rank, and no padded vocabulary row anywhere;
 * - ranges [a, b) of a slice (ZeRO shards cut them anywhere: every range of
 *   the small tensors, random ones of the large): at most 9 boxes, holding
 *   exactly the range's non-padding local indices, each at its place;
 * - ZeRO shards (cl_model_part_sizes' cut along 16-float blocks, over 2 to
 *   7 replicas, at tp 1 and 2): the boxes of every replica's piece of every
 *   parameter (cl_shard_zero_range, what a stage 3 save writes and load
 *   reads) hold each element of the whole tensor exactly once over the
 *   replicas (tp times for a replicated tensor), and each piece's elements
 *   at their places. */
#include "cleave/model.h"
#include "common/check.h"
#include "train/shard_index.h"

#include <stdlib.h>
#include <string.h>

/* inv[L] = the whole tensor's element at local index L of rank r's slice, or -1 (padding). */
static int64_t *inverse(const cl_param_spec *p, int r) {
    int64_t *inv = malloc((size_t)p->numel * sizeof *inv);
    for (int64_t L = 0; L < p->numel; L++) inv[L] = -1;
    for (int64_t g = 0; g < p->full_numel; g++) {
        int64_t L = cl_param_local_index(p, r, g);
        if (L >= 0) inv[L] = g;
    }
    return inv;
}

/* The boxes of [a, b) on rank r: each element where inv says, the count
 * that of the range's non-padding elements; hits[g] counts each element. */
static void check_range(const cl_param_spec *p, int r, int64_t a, int64_t b, const int64_t *inv, int *hits) {
    cl_box bx[9];
    int n = cl_shard_slice_boxes(p, r, a, b, bx);
    int64_t lc = cl_shard_local_cols(p), gc = cl_shard_whole_cols(p), got = 0, want = 0, bad = 0;
    CHECK(n >= 0 && n <= 9, "%s rank %d [%lld, %lld): %d boxes", p->name, r, (long long)a, (long long)b, n);
    for (int k = 0; k < n; k++)
        for (int64_t i = 0; i < bx[k].nr; i++)
            for (int64_t j = 0; j < bx[k].nc; j++) {
                int64_t g = (bx[k].r0 + i) * gc + bx[k].c0 + j, L = bx[k].l0 + i * lc + j;
                got++;
                if (L < a || L >= b || inv[L] != g) bad++;
                if (hits && g >= 0 && g < p->full_numel) hits[g]++;
            }
    for (int64_t L = a; L < b; L++) want += inv[L] >= 0;
    CHECK(bad == 0 && got == want, "%s (split %d) rank %d [%lld, %lld): %lld elements misplaced, %lld held of %lld", p->name,
          (int)p->split, r, (long long)a, (long long)b, (long long)bad, (long long)got, (long long)want);
}

/* rank r's slice p against its shards over n replicas (ZeRO 3 on the
 * whole model's part: each replica's piece, counted in hits). */
static void check_shards(const cl_model_desc *d, const cl_param_spec *p, int r, int n, const int64_t *inv, int *hits) {
    for (int z = 0; z < n; z++) {
        cl_zero zero = {.stage = 3, .n = n, .rank = z};
        cl_part_sizes sz;
        cl_model_part_sizes(d, 0, d->nunits, 1, 0, &zero, &sz);
        CHECK(sz.params == sz.shard && sz.shard * n == sz.alloc && sz.shard_lo == z * sz.shard && sz.shard % 16 == 0,
              "zero 3 over %d: replica %d's shard %lld at %lld of %lld", n, z, (long long)sz.shard, (long long)sz.shard_lo,
              (long long)sz.alloc);
        int64_t a, b;
        cl_shard_zero_range(cl_param_elem(p) - sz.lo, p->numel, sz.shard_lo, sz.shard, &a, &b);
        CHECK(a >= 0 && a <= b && b <= p->numel, "%s replica %d of %d: range [%lld, %lld)", p->name, z, n, (long long)a, (long long)b);
        check_range(p, r, a, b, inv, hits);
    }
}

/* n = 0: each rank's whole slice (counted) and sub-ranges of it; n > 0: the
 * slices' ZeRO 3 shards over n replicas (counted). */
static void check_model(const cl_model_config *cfg, int tp, int vocab_div, int n) {
    cl_model_desc *d[4] = {0};
    for (int r = 0; r < tp; r++) {
        cl_tp_layout tl = {tp, r, 0, vocab_div, CL_F32, 1};
        CHECK_OK(cl_model_describe_tp(cfg, 0, &tl, &d[r]));
        if (!d[r]) return;
    }
    uint64_t rng = 12345;
    for (int i = 0; i < d[0]->nparams; i++) {
        const cl_param_spec *p0 = &d[0]->params[i];
        int *hits = calloc((size_t)p0->full_numel, sizeof *hits);
        for (int r = 0; r < tp; r++) {
            const cl_param_spec *p = &d[r]->params[i];
            int64_t *inv = inverse(p, r);
            if (n) check_shards(d[r], p, r, n, inv, hits);
            else check_range(p, r, 0, p->numel, inv, hits);
            if (n) {
                /* the ranges are the shards', checked above */
            } else if (p->numel <= 200) {
                for (int64_t a = 0; a <= p->numel; a++)
                    for (int64_t b = a; b <= p->numel; b++) check_range(p, r, a, b, inv, NULL);
            } else {
                for (int k = 0; k < 300; k++) {
                    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
                    int64_t a = (int64_t)((rng >> 20) % (uint64_t)p->numel);
                    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
                    int64_t b = a + (int64_t)((rng >> 20) % (uint64_t)(p->numel - a + 1));
                    check_range(p, r, a, b, inv, NULL);
                }
            }
            free(inv);
        }
        int want = p0->split == CL_SPLIT_NONE ? tp : 1;
        int64_t off = 0;
        for (int64_t g = 0; g < p0->full_numel; g++) off += hits[g] != want;
        CHECK(off == 0, "%s at tp %d, zero 3 over %d: %lld elements not held %d times over the ranks and shards", p0->name, tp, n,
              (long long)off, want);
        free(hits);
    }
    for (int r = 0; r < tp; r++) cl_model_desc_free(d[r]);
}

int main(void) {
    cl_model_config gpt;
    CHECK_OK(cl_model_preset("gpt2-tiny", &gpt));
    gpt.vocab = 300;
    gpt.layers = 1;
    cl_model_config mlp;
    CHECK_OK(cl_model_preset("mlp", &mlp));
    for (int tp = 1; tp <= 4; tp *= 2) {
        check_model(&gpt, tp, 128, 0);
        check_model(&gpt, tp, 1, 0);
        check_model(&mlp, tp == 4 ? 2 : tp, 1, 0);
    }
    for (int tp = 1; tp <= 2; tp++)
        for (int n = 2; n <= 7; n++) {
            check_model(&gpt, tp, 128, n);
            check_model(&mlp, tp, 1, n);
        }
    return cl_test_report("test_shard");
}
