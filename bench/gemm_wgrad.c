/* The bf16 step's weight-gradient products (dW = x^T dY, accumulated into
 * the F32 gradient: ta 1, beta 1) against alternatives, GPT-2 124M's block
 * shapes (`cleave bench gemm`'s list, N = B*T rows): the measurement behind
 * the layout cl_nn_linear_dweight_lo hands oneDNN's matmul primitive
 * (docs/PERFORMANCE.md, "The bf16 weight-gradient products' layout").
 *   strided  x^T as strides (ta 1), beta 1: as the step runs it
 *   beta0    the same with beta 0 (no sum post-op): what the sum costs
 *   plain    x transposed into a BF16 copy first (cl_bf16_transpose, as the
 *            step does with CLEAVE_WGRAD_PLAIN; ta 0, beta 1); plain+T
 *            with the transpose's time added, transp that time alone
 *   swapped  dW^T = dY^T x as one primitive writing dW through transposed
 *            strides (timed only where oneDNN offers more than its
 *            reference loops)
 * Best of 3 x `repeat` each, the three taking turns at going first; the
 * plain and swapped results are compared with the strided one (all F32
 * accumulation of the same BF16 operands).
 *
 *   build/bench/gemm_wgrad [threads] [repeat] [N]
 */
#include "cleave/core.h"
#include "cleave/kernels.h"
#include "../cli/bench.h"

#ifdef CL_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CL_HAVE_DNNL
/* The swapped form dW^T = dY^T x as one primitive writing dW through transposed strides: best seconds of repeat
 * (and the implementation oneDNN picked), or 0 where it cannot. */
static double swapped(int M, int N, int K, const uint16_t *x, const uint16_t *dy, float *dw, float beta, int repeat,
                      const char **impl) {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) || dnnl_stream_create(&st, eng, dnnl_stream_default_flags)) return 0;
    /* C'[N x M] = A'[N x K] B'[K x M]: A' = dy^T (dy is [K x N]), B' = x ([K x M]), C' = dw^T (dw is [M x N]) */
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t da = {N, K}, db = {K, M}, dc = {N, M}, sa = {1, N}, sb = {M, 1}, sc = {1, N};
    dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa);
    dnnl_memory_desc_init_by_strides(&b, 2, db, dnnl_bf16, sb);
    dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc);
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t p;
    dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c);
    dnnl_primitive_attr_create(&attr);
    dnnl_post_ops_create(&po);
    if (beta != 0.0f) dnnl_post_ops_append_sum(po, beta);
    dnnl_primitive_attr_set_post_ops(attr, po);
    double best = 0;
    int ok = dnnl_primitive_desc_create(&pd, &desc, attr, eng, NULL) == dnnl_success;
    static char name[64];
    const char *s = NULL;
    if (ok) ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) == dnnl_success && s;
    snprintf(name, sizeof name, "%s", ok ? s : "none");
    *impl = name;
    ok = ok && strncmp(name, "ref", 3) != 0; /* oneDNN's reference loops: minutes, not a contender */
    if (ok) ok = dnnl_primitive_create(&p, pd) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    if (!ok) goto out;
    dnnl_memory_t ma, mb, mc;
    dnnl_memory_create(&ma, &a, eng, (void *)dy);
    dnnl_memory_create(&mb, &b, eng, (void *)x);
    dnnl_memory_create(&mc, &c, eng, dw);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    best = 1e30;
    for (int r = 0; r <= repeat; r++) {
        double t0 = cl_now();
        dnnl_primitive_execute(p, st, 3, args);
        dnnl_stream_wait(st);
        if (r) best = fmin(best, cl_now() - t0);
    }
    dnnl_memory_destroy(ma), dnnl_memory_destroy(mb), dnnl_memory_destroy(mc);
    dnnl_primitive_destroy(p);
out:
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    return best;
}
#endif

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2, repeat = argc > 2 ? atoi(argv[2]) : 5, Nr = argc > 3 ? atoi(argv[3]) : 1024;
    if (threads < 1 || repeat < 1 || Nr < 1) {
        fprintf(stderr, "usage: gemm_wgrad [threads >= 1] [repeat >= 1] [N >= 1]\n");
        return 2;
    }
    cl_set_threads(threads);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(cl_gemm_bf16_path(), "onednn matmul")) {
        printf("skip: BF16 products are %s here\n", cl_gemm_bf16_path());
        return 0;
    }
    gemm_shape sh[GEMM_STEP_SHAPES];
    gemm_step_shapes(sh, Nr, 768, 50304);
    printf("bf16 weight-gradient products (GFLOP/s), %d threads, best of 3 x %d, taking turns\n", threads, repeat);
    printf("%-22s %9s %9s %9s %9s %9s\n", "product", "strided", "beta0", "plain", "plain+T", "transp ms");
    for (int i = 0; i < GEMM_STEP_SHAPES; i++) {
        if (!sh[i].ta || sh[i].M > 4 * 768) continue; /* the blocks' weight products */
        int M = sh[i].M, N = sh[i].N, K = sh[i].K;
        size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
        uint16_t *A = malloc(na * 2), *At = malloc(na * 2), *B = malloc(nb * 2);
        float *C1 = calloc(nc, 4), *C2 = calloc(nc, 4), *tmp = malloc((na > nb ? na : nb) * 4);
        if (!A || !At || !B || !C1 || !C2 || !tmp) return 1;
        cl_rng r;
        cl_rng_seed(&r, (uint64_t)i);
        for (size_t k = 0; k < na; k++) tmp[k] = cl_rng_normal(&r);
        cl_bf16_pack(A, tmp, (int64_t)na); /* A stored [K x M]: x, rows of M */
        for (size_t k = 0; k < nb; k++) tmp[k] = cl_rng_normal(&r);
        cl_bf16_pack(B, tmp, (int64_t)nb);
        /* the primitives made outside the timing */
        cl_gemm_matmul(1, 0, M, N, K, 1.0f, A, CL_BF16, M, B, CL_BF16, N, 0.0f, C1, N);
        cl_bf16_transpose(At, A, K, M, M, K);
        cl_gemm_matmul(0, 0, M, N, K, 1.0f, At, CL_BF16, K, B, CL_BF16, N, 0.0f, C2, N);
        double err = 0, ref = 0;
        for (size_t k = 0; k < nc; k++) {
            err = fmax(err, fabs((double)C1[k] - C2[k]));
            ref = fmax(ref, fabs((double)C1[k]));
        }
        double bs = 1e30, b0 = 1e30, bp = 1e30, bt = 1e30;
        /* the three take turns at going first (the one after another finds its operands warm in cache) */
        for (int rr = 0; rr < 3 * repeat; rr++)
            for (int v = 0; v < 3; v++) {
                int w = (v + rr) % 3;
                double t0 = cl_now(), t1 = t0;
                if (w == 0) cl_gemm_matmul(1, 0, M, N, K, 1.0f, A, CL_BF16, M, B, CL_BF16, N, 1.0f, C1, N);
                if (w == 1) cl_gemm_matmul(1, 0, M, N, K, 1.0f, A, CL_BF16, M, B, CL_BF16, N, 0.0f, C1, N);
                if (w == 2) {
                    cl_bf16_transpose(At, A, K, M, M, K);
                    t1 = cl_now();
                    cl_gemm_matmul(0, 0, M, N, K, 1.0f, At, CL_BF16, K, B, CL_BF16, N, 1.0f, C2, N);
                }
                double t2 = cl_now();
                if (w == 0) bs = fmin(bs, t2 - t0);
                if (w == 1) b0 = fmin(b0, t2 - t0);
                if (w == 2) bt = fmin(bt, t1 - t0), bp = fmin(bp, t2 - t1);
            }
        double fl = 2.0 * M * N * K / 1e9;
        printf("%-22s %9.1f %9.1f %9.1f %9.1f %9.3f   max |diff| %.2g of max %.2g\n", sh[i].name, fl / bs, fl / b0, fl / bp,
               fl / (bp + bt), bt * 1e3, err, ref);
#ifdef CL_HAVE_DNNL
        const char *impl = "";
        float *C3 = calloc(nc, 4);
        double sw = swapped(M, N, K, A, B, C3, 0.0f, 1, &impl);
        double e3 = 0;
        cl_gemm_matmul(1, 0, M, N, K, 1.0f, A, CL_BF16, M, B, CL_BF16, N, 0.0f, C1, N);
        for (size_t k = 0; k < nc; k++) e3 = fmax(e3, fabs((double)C1[k] - C3[k]));
        if (sw > 0) sw = swapped(M, N, K, A, B, C3, 1.0f, repeat, &impl);
        if (sw <= 0) printf("%-22s swapped (dW^T = dY^T x): not timed, oneDNN offers [%s]\n", sh[i].name, impl);
        else printf("%-22s swapped (dW^T = dY^T x, beta 1) %9.1f GFLOP/s [%s] max |diff| %.2g\n", sh[i].name, fl / sw, impl, e3);
        free(C3);
#endif
        free(A), free(At), free(B), free(C1), free(C2), free(tmp);
    }
    return 0;
}
