/* `cleave bench`: what this machine can do, and where a training step goes.
 *
 *   cleave bench peak   FP32 FMA peak (GFLOP/s) on --threads threads, the
 *                       BF16 dot-product peak (vdpbf16ps) where the CPU has
 *                       AVX512_BF16, and memory bandwidth (copy and read, GB/s)
 *   cleave bench gemm   GFLOP/s of every matrix product of one GPT step at
 *                       the given shapes, forward and both backward forms,
 *                       against the peak just measured; then the same
 *                       products with BF16 operands (cl_gemm_ex), "bf16 " rows
 *   cleave bench step   one rank's training step by operation, forward and
 *                       backward, in ms and % of the step (CL_PROF rows)
 *
 * Lines meant for scripts start with a fixed word ("peak fp32", "peak bf16",
 * "bf16 gemm", "step") and
 * say their unit, so the scripts in bench/ can read them with awk. */
#include "args.h"
#include "bench.h"
#include "cleave/kernels.h"
#include "cleave/prof.h"
#include "cleave/train.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- peak ---------------------------------------------------------------- */

/* Ten independent FMA chains hide the FMA latency (4 cycles, 2 ports). */
#define PEAK_CHAINS 10

/* The loops' results land here, so the compiler must compute them. */
static _Thread_local volatile float peak_sink;

static void sink(const float *v, int n) {
    float t = 0;
    for (int i = 0; i < n; i++) t += v[i];
    peak_sink = t;
}

/* The sum of n accumulators into peak_sink. */
__attribute__((target("avx512f"))) static inline void sink512(const __m512 *acc, int n) {
    __m512 s = acc[0];
    for (int i = 1; i < n; i++) s = _mm512_add_ps(s, acc[i]);
    float out[16];
    _mm512_storeu_ps(out, s);
    sink(out, 16);
}

__attribute__((target("avx512f"))) static double fma_loop_avx512(int64_t iters) {
    __m512 acc[PEAK_CHAINS];
    __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 10
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    }
    sink512(acc, PEAK_CHAINS);
    return (double)iters * PEAK_CHAINS * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma_loop_avx2(int64_t iters) {
    __m256 acc[PEAK_CHAINS];
    __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm256_set1_ps((float)i);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 10
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    }
    __m256 s = acc[0];
    for (int i = 1; i < PEAK_CHAINS; i++) s = _mm256_add_ps(s, acc[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    sink(out, 8);
    return (double)iters * PEAK_CHAINS * 8 * 2;
}

/* AVX512_BF16's dot product: each vdpbf16ps multiplies 16 x 2 BF16 pairs and
 * adds them into 16 F32 lanes, 64 FLOPs. More chains than the FMA loop: its
 * latency is longer on some cores. The operands (1 and 2^-24) keep the
 * accumulators normal and finite. */
#define PEAK_BF16_CHAINS 12
__attribute__((target("avx512f,avx512bf16"))) static double dp_loop_bf16(int64_t iters) {
    __m512 acc[PEAK_BF16_CHAINS];
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
    for (int i = 0; i < PEAK_BF16_CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < PEAK_BF16_CHAINS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    }
    sink512(acc, PEAK_BF16_CHAINS);
    return (double)iters * PEAK_BF16_CHAINS * 16 * 2 * 2;
}

/* 1 where the CPU has AVX512_BF16 (cpuid, through cl_cpu_features). */
static int has_bf16_dot(void) { return (cl_cpu_features() & CL_CPU_AVX512BF16) != 0; }

static const char *fma_isa(void) {
    unsigned f = cl_cpu_features();
    if (f & CL_CPU_AVX512F) return "avx512";
    if ((f & (CL_CPU_AVX2 | CL_CPU_FMA)) == (CL_CPU_AVX2 | CL_CPU_FMA)) return "avx2";
    return NULL;
}

typedef struct {
    int64_t iters;
    int bf16; /* the vdpbf16ps loop instead of the FMA loop */
    double flop, seconds;
    pthread_barrier_t *start;
} peak_job;

static void *peak_thread(void *arg) {
    peak_job *j = arg;
    int avx512 = !strcmp(fma_isa(), "avx512");
    pthread_barrier_wait(j->start);
    double t0 = cl_now();
    j->flop = j->bf16 ? dp_loop_bf16(j->iters) : avx512 ? fma_loop_avx512(j->iters) : fma_loop_avx2(j->iters);
    j->seconds = cl_now() - t0;
    return NULL;
}

/* Best of `repeat` runs of every thread's FMA (bf16: vdpbf16ps) loop at once; FLOPs over the slowest thread's time. */
static double measure_peak_of(int threads, int repeat, int bf16) {
    double best = 0;
    for (int r = 0; r < repeat; r++) {
        pthread_t th[256];
        peak_job job[256];
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, (unsigned)threads);
        for (int i = 0; i < threads; i++) {
            job[i] = (peak_job){.iters = bf16 ? 20000000 : 40000000, .bf16 = bf16, .start = &start};
            if (i) pthread_create(&th[i], NULL, peak_thread, &job[i]);
        }
        peak_thread(&job[0]);
        double flop = job[0].flop, slow = job[0].seconds;
        for (int i = 1; i < threads; i++) {
            pthread_join(th[i], NULL);
            flop += job[i].flop;
            if (job[i].seconds > slow) slow = job[i].seconds;
        }
        pthread_barrier_destroy(&start);
        double g = flop / slow / 1e9;
        if (g > best) best = g;
    }
    return best;
}

static double measure_peak(int threads, int repeat) { return measure_peak_of(threads, repeat, 0); }

/* The BF16 dot-product peak, 0 where the CPU has no AVX512_BF16. */
static double measure_peak_bf16(int threads, int repeat) { return has_bf16_dot() ? measure_peak_of(threads, repeat, 1) : 0; }

static double measure_copy(size_t bytes, int repeat, double *read_gbs) {
    float *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best = 0, best_read = 0;
    size_t n = bytes / sizeof(float);
    for (int r = 0; r < repeat; r++) {
        double t0 = cl_now();
        memcpy(b, a, bytes);
        double t1 = cl_now();
        double s = 0;
        for (size_t i = 0; i < n; i += 16) s += b[i] + b[i + 4] + b[i + 8] + b[i + 12]; /* touches every line */
        double t2 = cl_now();
        if (s == 1.0) fprintf(stderr, " "); /* keeps the sum alive */
        double g = 2.0 * (double)bytes / (t1 - t0) / 1e9, gr = (double)bytes / (t2 - t1) / 1e9;
        if (g > best) best = g;
        if (gr > best_read) best_read = gr;
    }
    free(a);
    free(b);
    *read_gbs = best_read;
    return best;
}

static const cli_flag peak_flags[] = {
    {"help", "h", 0, "show this help"},
    {"threads", "", 1, "threads to run the FMA loop on at once (default: the cores available)"},
    {"repeat", "", 1, "best of this many runs (default 5)"},
};

static int bench_peak(int argc, char **argv) {
    cli_args a;
    cl_status s = cli_parse(&a, peak_flags, NFLAGS(peak_flags), argc, argv, 3);
    if (s) return cli_fail(s);
    if (cli_get(&a, "help")) {
        cli_print_help("usage: cleave bench peak [--threads N]\n\n"
                       "Measures this machine's FP32 FMA peak, its BF16 dot-product peak (AVX512_BF16) and memory bandwidth.",
                       peak_flags, NFLAGS(peak_flags));
        return 0;
    }
    int threads = cl_cores_available(), repeat = 5;
    if ((s = cli_int(&a, "threads", &threads, 1, 256)) || (s = cli_int(&a, "repeat", &repeat, 1, 1000))) return cli_fail(s);
    const char *isa = fma_isa();
    if (!isa) return cli_fail(cl_error(CL_ERR_UNSUPPORTED, "bench peak needs AVX2 with FMA or AVX-512 (this CPU has neither)"));
    double one = measure_peak(1, repeat), all = threads > 1 ? measure_peak(threads, repeat) : one;
    double rd = 0, cp = measure_copy((size_t)256 << 20, repeat, &rd);
    printf("isa: %s (FMA on %d-float vectors)\n", isa, !strcmp(isa, "avx512") ? 16 : 8);
    printf("peak fp32 1 thread: %.1f GFLOP/s\n", one);
    printf("peak fp32 %d threads: %.1f GFLOP/s\n", threads, all);
    if (has_bf16_dot()) {
        double b1 = measure_peak_bf16(1, repeat), ball = threads > 1 ? measure_peak_bf16(threads, repeat) : b1;
        printf("peak bf16 1 thread: %.1f GFLOP/s (vdpbf16ps, %.2fx fp32)\n", b1, b1 / one);
        printf("peak bf16 %d threads: %.1f GFLOP/s (vdpbf16ps, %.2fx fp32)\n", threads, ball, ball / all);
    } else {
        printf("bf16: not available on this CPU (no AVX512_BF16)\n");
    }
    printf("memory copy 256 MiB: %.1f GB/s (read + write), read %.1f GB/s, 1 thread\n", cp, rd);
    return 0;
}

/* ---- gemm and step: the shared model flags ------------------------------- */

static const cli_flag step_flags[] = {
    {"help", "h", 0, "show this help"},
    {"model", "m", 1, "preset (default gpt2: GPT-2 124M)"},
    {"layers", "", 1, "GPT: transformer blocks"},
    {"channels", "", 1, "GPT: width C"},
    {"heads", "", 1, "GPT: attention heads"},
    {"vocab", "", 1, "GPT: vocabulary (default 50304 for gpt2: 50257 padded to a multiple of 64)"},
    {"context", "", 1, "GPT: positions"},
    {"seq-len", "", 1, "tokens per sample (default 256)"},
    {"micro-batch-size", "", 1, "samples per step (default 4)"},
    {"threads", "", 1, "threads (default: the cores available)"},
    {"steps", "", 1, "timed steps (default 3)"},
    {"warmup", "", 1, "untimed steps first (default 1)"},
    {"data", "", 1, "training text (default kjv.txt from cleave's data, as for train)"},
    {"peak", "", 1, "GFLOP/s to take as 100% (default: measured now, as bench peak does)"},
    {"peak-bf16", "", 1, "gemm: GFLOP/s to take as the BF16 rows' 100% (default: measured now where the CPU has AVX512_BF16)"},
    {"repeat", "", 1, "gemm: best of this many runs per shape (default 3)"},
    {"offload-optimizer", "", 1, "step: where the AdamW moments live, none (default), host or disk (as for train)"},
    {"offload-dir", "", 1, "step: directory of --offload-optimizer disk's file"},
    {"dtype", "", 1, "step: fp32 (default) or bf16, mixed precision (as for train)"},
    {"grad-reduce-dtype", "", 1, "step: fp32 (default) or bf16, as for train (one rank: no reduction to narrow)"},
};

typedef struct {
    cl_model_config mc;
    int T, B, threads, steps, warmup, repeat, offload;
    double peak, peak_bf16;
    const char *data, *offload_dir;
    cl_dtype dtype, grad_reduce;
} step_opts;

static int parse_step_opts(int argc, char **argv, const char *usage, step_opts *o) {
    cli_args a;
    cl_status s = cli_parse(&a, step_flags, NFLAGS(step_flags), argc, argv, 3);
    if (s) return cli_fail(s);
    if (cli_get(&a, "help")) {
        cli_print_help(usage, step_flags, NFLAGS(step_flags));
        return -1;
    }
    memset(o, 0, sizeof *o);
    cli_default(&a, "model", "gpt2");
    if (!strcmp(cli_get(&a, "model"), "gpt2")) cli_default(&a, "vocab", "50304");
    if (!cli_get(&a, "context")) cli_default(&a, "seq-len", "256");
    if ((s = cli_parse_model(&a, &o->mc, &o->T))) return cli_fail(s);
    if (!cl_model_family_of(&o->mc)->tokens) return cli_fail(cl_error(CL_ERR_INVALID, "cleave bench measures GPT models (got %s)", o->mc.name));
    if (!o->T) o->T = o->mc.seq_len;
    o->B = 4;
    o->threads = cl_cores_available();
    o->steps = 3;
    o->warmup = 1;
    o->repeat = 3;
    float peak = 0, peak_bf16 = 0;
    o->data = cli_get(&a, "data");
    o->offload_dir = cli_get(&a, "offload-dir");
    if ((s = cli_offload(&a, &o->offload))) return cli_fail(s);
    o->dtype = o->grad_reduce = CL_F32;
    if ((s = cli_format(&a, "dtype", &o->dtype)) || (s = cli_format(&a, "grad-reduce-dtype", &o->grad_reduce))) return cli_fail(s);
    if ((s = cli_int(&a, "micro-batch-size", &o->B, 1, 1 << 20)) || (s = cli_int(&a, "threads", &o->threads, 1, 256)) ||
        (s = cli_int(&a, "steps", &o->steps, 1, 1 << 20)) || (s = cli_int(&a, "warmup", &o->warmup, 0, 1 << 20)) ||
        (s = cli_int(&a, "repeat", &o->repeat, 1, 1000)) || (s = cli_float(&a, "peak", &peak, 1e-3, 1e9)) ||
        (s = cli_float(&a, "peak-bf16", &peak_bf16, 1e-3, 1e9)))
        return cli_fail(s);
    o->peak = peak;
    o->peak_bf16 = peak_bf16;
    if (!o->peak) {
        if (!fma_isa()) return cli_fail(cl_error(CL_ERR_UNSUPPORTED, "no AVX2/AVX-512 to measure a peak: give --peak"));
        o->peak = measure_peak(o->threads, 3);
    }
    cl_set_threads(o->threads);
    return 0;
}

/* ---- gemm ------------------------------------------------------------------ */


/* Best of `repeat` products of g with A and B rounded to BF16 (cl_gemm_ex) into *best (s); -1 out of memory. */
static int time_bf16(const gemm_shape *g, const float *A, const float *B, float *C, int repeat, double *best) {
    size_t na = (size_t)g->M * g->K, nb = (size_t)g->K * g->N;
    uint16_t *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b);
    if (!a || !b) {
        free(a);
        free(b);
        return -1;
    }
    cl_dtype_convert(a, CL_BF16, A, CL_F32, na);
    cl_dtype_convert(b, CL_BF16, B, CL_F32, nb);
    int lda = g->ta ? g->M : g->K, ldb = g->tb ? g->K : g->N;
    /* warm: pages, and the primitives of beta 0 and of the timed beta 1 (each its own cache key) */
    cl_gemm_ex(g->ta, g->tb, g->M, g->N, g->K, 1.0f, a, CL_BF16, lda, b, CL_BF16, ldb, 0.0f, C, g->N);
    cl_gemm_ex(g->ta, g->tb, g->M, g->N, g->K, 1.0f, a, CL_BF16, lda, b, CL_BF16, ldb, 1.0f, C, g->N);
    *best = 1e30;
    for (int r = 0; r < repeat; r++) {
        double t0 = cl_now();
        cl_gemm_ex(g->ta, g->tb, g->M, g->N, g->K, 1.0f, a, CL_BF16, lda, b, CL_BF16, ldb, 1.0f, C, g->N);
        double dt = cl_now() - t0;
        if (dt < *best) *best = dt;
    }
    free(a);
    free(b);
    return 0;
}

static int bench_gemm(int argc, char **argv) {
    step_opts o;
    int r = parse_step_opts(argc, argv,
                            "usage: cleave bench gemm [--model M] [--seq-len T] [--micro-batch-size B] [--threads N]\n\n"
                            "Times every matrix product of one training step's shapes through cl_gemm, then with BF16 operands.",
                            &o);
    if (r) return r < 0 ? 0 : r;
    int Nr = o.B * o.T, C = o.mc.channels, V = o.mc.vocab;
    gemm_shape sh[GEMM_STEP_SHAPES];
    gemm_step_shapes(sh, Nr, C, V);
    int n = GEMM_STEP_SHAPES;
    printf("gemm: %s, %d threads; peak %.1f GFLOP/s; N = B*T = %d, C = %d, V = %d\n", cl_gemm_backend(), o.threads, o.peak, Nr, C, V);
    printf("%-22s %-3s %6s %6s %6s %10s %10s %7s\n", "product", "op", "M", "N", "K", "ms", "GFLOP/s", "% peak");
    double tot_flop = 0, tot_s = 0, f32_s[GEMM_STEP_SHAPES], bf_s[GEMM_STEP_SHAPES];
    for (int i = 0; i < n; i++) {
        gemm_shape g = sh[i];
        size_t na = (size_t)g.M * g.K, nb = (size_t)g.K * g.N, nc = (size_t)g.M * g.N;
        float *A = malloc(na * sizeof *A), *Bm = malloc(nb * sizeof *Bm), *Cm = malloc(nc * sizeof *Cm);
        if (!A || !Bm || !Cm) {
            free(A);
            free(Bm);
            free(Cm);
            return cli_fail(cl_error(CL_ERR_OOM, "bench gemm: cannot allocate the %s operands", g.name));
        }
        for (size_t k = 0; k < na; k++) A[k] = (float)(k % 7) * 0.01f;
        for (size_t k = 0; k < nb; k++) Bm[k] = (float)(k % 5) * 0.01f;
        memset(Cm, 0, nc * sizeof *Cm);
        int lda = g.ta ? g.M : g.K, ldb = g.tb ? g.K : g.N;
        cl_gemm(g.ta, g.tb, g.M, g.N, g.K, 1.0f, A, lda, Bm, ldb, 0.0f, Cm, g.N); /* warm: JIT, pages */
        double best = 1e30;
        for (int rr = 0; rr < o.repeat; rr++) {
            double t0 = cl_now();
            cl_gemm(g.ta, g.tb, g.M, g.N, g.K, 1.0f, A, lda, Bm, ldb, 1.0f, Cm, g.N);
            double dt = cl_now() - t0;
            if (dt < best) best = dt;
        }
        double fl = 2.0 * g.M * g.N * g.K;
        tot_flop += fl;
        tot_s += best;
        f32_s[i] = best;
        if (time_bf16(&g, A, Bm, Cm, o.repeat, &bf_s[i])) {
            free(A);
            free(Bm);
            free(Cm);
            return cli_fail(cl_error(CL_ERR_OOM, "bench gemm: cannot allocate the %s BF16 operands", g.name));
        }
        printf("%-22s %c%c  %6d %6d %6d %10.3f %10.1f %6.1f%%\n", g.name, g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.M, g.N, g.K,
               best * 1e3, fl / best / 1e9, 100.0 * fl / best / 1e9 / o.peak);
        free(A);
        free(Bm);
        free(Cm);
    }
    printf("gemm all shapes once: %.1f GFLOP/s, %.1f%% of peak\n", tot_flop / tot_s / 1e9, 100.0 * tot_flop / tot_s / 1e9 / o.peak);
    /* the same products with BF16 A and B (C F32), timed right after each F32 one */
    double pb = o.peak_bf16 ? o.peak_bf16 : measure_peak_bf16(o.threads, 3), bf_tot = 0;
    char pbs[48] = "not available on this CPU";
    if (pb > 0) snprintf(pbs, sizeof pbs, "%.1f GFLOP/s", pb);
    printf("bf16 gemm: %s, %d threads; peak bf16 %s\n", cl_gemm_bf16_path(), o.threads, pbs);
    printf("bf16 %-22s %-3s %6s %6s %6s %10s %10s %7s %7s\n", "product", "op", "M", "N", "K", "ms", "GFLOP/s", "% peak",
           "x fp32");
    for (int i = 0; i < n; i++) {
        gemm_shape g = sh[i];
        double fl = 2.0 * g.M * g.N * g.K, gf = fl / bf_s[i] / 1e9;
        char pct[16] = "-";
        if (pb > 0) snprintf(pct, sizeof pct, "%.1f%%", 100.0 * gf / pb);
        bf_tot += bf_s[i];
        printf("bf16 %-22s %c%c  %6d %6d %6d %10.3f %10.1f %7s %6.2fx\n", g.name, g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.M, g.N,
               g.K, bf_s[i] * 1e3, gf, pct, f32_s[i] / bf_s[i]);
    }
    char pct[16] = "-";
    if (pb > 0) snprintf(pct, sizeof pct, "%.1f%%", 100.0 * tot_flop / bf_tot / 1e9 / pb);
    printf("bf16 gemm all shapes once: %.1f GFLOP/s, %s of bf16 peak, %.2fx fp32\n", tot_flop / bf_tot / 1e9, pct,
           tot_s / bf_tot);
    return 0;
}

/* ---- step ------------------------------------------------------------------ */

void cli_prof_print(const cl_prof *prof, double secs, int steps) {
    printf("%-20s %10s %7s %10s %8s\n", "operation", "ms/step", "%", "GFLOP/s", "calls");
    double covered = 0;
    for (int i = 0; i < prof->n; i++) {
        const cl_prof_row *w = &prof->row[i];
        covered += w->seconds;
        char g[32] = "";
        if (w->flop > 0) snprintf(g, sizeof g, "%.1f", w->flop / w->seconds / 1e9);
        printf("%-20s %10.2f %6.1f%% %10s %8lld\n", w->name, w->seconds / steps * 1e3, 100.0 * w->seconds / secs, g,
               (long long)(w->calls / steps));
    }
    printf("%-20s %10.2f %6.1f%%\n", "(other)", (secs - covered) / steps * 1e3, 100.0 * (secs - covered) / secs);
}

static int bench_step(int argc, char **argv) {
    step_opts o;
    int r = parse_step_opts(argc, argv,
                            "usage: cleave bench step [--model M] [--seq-len T] [--micro-batch-size B] [--threads N] [--steps K]\n"
                            "                         [--offload-optimizer none|host|disk [--offload-dir DIR]] [--dtype fp32|bf16]\n"
                            "                         [--grad-reduce-dtype fp32|bf16]\n\n"
                            "Trains one rank for --warmup + --steps steps and prints the timed steps by operation.",
                            &o);
    if (r) return r < 0 ? 0 : r;
    cl_train_config c;
    cl_train_config_default(&c);
    c.model = o.mc;
    c.seq_len = o.T;
    c.micro_batch = c.global_batch = o.B;
    c.steps = o.warmup + o.steps;
    c.lr.steps = c.steps;
    c.lr.warmup = 0;
    c.data = o.data;
    c.eval_batches = 1;
    c.offload_optimizer = o.offload;
    c.offload_dir = o.offload_dir;
    c.dtype = o.dtype;
    c.grad_reduce = o.grad_reduce;
    cl_trainer *t;
    cl_status s = cl_trainer_create(&t, &c);
    if (s) return cli_fail(s);
    cl_step_stats st;
    for (int i = 0; i < o.warmup && !s; i++) s = cl_trainer_step(t, &st);
    cl_prof prof;
    double secs = 0, flop = 0;
    cl_prof_begin(&prof);
    for (int i = 0; i < o.steps && !s; i++) {
        s = cl_trainer_step(t, &st);
        secs += st.seconds;
        flop += st.flops;
    }
    cl_prof_end();
    if (s) {
        cl_trainer_destroy(t);
        return cli_fail(s);
    }
    double per = secs / o.steps, gfs = flop / secs / 1e9;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("model: %d layers, %d channels, %d heads, vocab %d; micro-batch %d x seq %d; %d threads; gemm %s%s\n", o.mc.layers,
           o.mc.channels, o.mc.heads, o.mc.vocab, o.B, o.T, o.threads, cl_gemm_backend(), o.dtype == CL_BF16 ? "; bf16" : "");
    if (o.dtype == CL_BF16 && cl_gemm_bf16_note()) printf("%s\n", cl_gemm_bf16_note());
    cli_prof_print(&prof, secs, o.steps);
    printf("step: %.1f ms, %.1f tokens/s, %.1f GFLOP/s, %.1f%% of peak %.1f GFLOP/s, peak RSS %.1f MiB\n", per * 1e3,
           (double)o.B * o.T / per, gfs, 100.0 * gfs / o.peak, o.peak, ru.ru_maxrss / 1024.0);
    cl_trainer_destroy(t);
    return 0;
}

int cleave_cmd_bench(int argc, char **argv) {
    const char *sub = argc > 2 ? argv[2] : NULL;
    if (sub && !strcmp(sub, "peak")) return bench_peak(argc, argv);
    if (sub && !strcmp(sub, "gemm")) return bench_gemm(argc, argv);
    if (sub && !strcmp(sub, "step")) return bench_step(argc, argv);
    if (sub && (!strcmp(sub, "--help") || !strcmp(sub, "-h"))) {
        printf("usage: cleave bench peak|gemm|step [flags]   (cleave bench SUB --help for each)\n");
        return 0;
    }
    return cli_fail(cl_error(CL_ERR_INVALID, "cleave bench needs one of peak, gemm, step%s%s (cleave bench --help)", sub ? ", not " : "",
                             sub ? sub : ""));
}

/* For `cleave plan calibrate` (cli/plan_cmd.c): the same measurements. */
const char *cli_bench_isa(void) { return fma_isa(); }
double cli_bench_peak(int threads, int repeat) { return measure_peak(threads, repeat); }
double cli_bench_peak_bf16(int threads, int repeat) { return measure_peak_bf16(threads, repeat); }
double cli_bench_copy(size_t bytes, int repeat, double *read_gbs) { return measure_copy(bytes, repeat, read_gbs); }
