/* `cleave plan`: the planner (src/plan/). Given a model, a device count
 * and a hardware description, every configuration's memory and step time,
 * fastest first; `cleave plan calibrate` writes this machine's description.
 * Bad input exits 2 with one line. */
#include "args.h"
#include "bench.h"
#include "cleave/comm.h"
#include "cleave/kernels.h"
#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const cli_flag plan_flags[] = {
    {"help", "h", 0, "show this help"},
    {"model", "m", 1, "preset: gpt2-tiny (default: 2 layers, 64 channels), gpt2-mini (4 layers, 128 channels), gpt2-small or gpt2 (GPT-2 small, 124M), gpt2-medium (355M), gpt2-large (774M), gpt2-xl (1.5B), mlp, cnn"},
    {"layers", "", 1, "GPT: transformer blocks"},
    {"channels", "", 1, "GPT: width C"},
    {"heads", "", 1, "GPT: attention heads"},
    {"vocab", "", 1, "GPT: vocabulary"},
    {"context", "", 1, "GPT: positions"},
    {"kv-heads", "", 1, "GPT: key-value heads (default --heads)"},
    {"mlp-width", "", 1, "GPT: the MLP's hidden width (default 4 x --channels)"},
    {"ffn-channels", "", 1, "Llama: the MLP's width (intermediate_size; the preset's), as cleave train reads it"},
    {"rope-theta", "", 1, "Llama: the rotary base (no effect on the plan; accepted as cleave train does)"},
    {"rope-scaling", "", 1, "Llama: none or llama3:FACTOR,LOW,HIGH,ORIGINAL_CONTEXT (no effect on the plan)"},
    {"tie-embeddings", "", 1, "Llama: 1 ties the LM head to the embedding, 0 gives it its own weight"},
    {"experts", "", 1, "Llama: E experts in the MoE blocks (0: dense)"},
    {"experts-per-token", "", 1, "Llama MoE: top-K experts per token"},
    {"moe-every", "", 1, "Llama MoE: every N-th block an MoE block"},
    {"moe-aux-loss-coeff", "", 1, "Llama MoE: the load-balancing loss's coefficient (no effect on the plan)"},
    {"moe-capacity-factor", "", 1, "Llama MoE: each expert keeps ceil(F x tokens x K / E) token-slots (0: dropless, priced)"},
    {"seq-len", "", 1, "GPT: tokens per sample (default: the context)"},
    {"devices", "", 1, "devices in all (or --nodes x --devices-per-node)"},
    {"nodes", "", 1, "nodes (with --devices-per-node, default the hardware's)"},
    {"devices-per-node", "", 1, "devices per node (default: the hardware's)"},
    {"device-memory", "", 1, "memory of one device, e.g. 80GiB (default: the hardware's)"},
    {"hardware", "", 1, "a100 (default), h100, this (the file `cleave plan calibrate` wrote) or a description FILE"},
    {"global-batch-size", "", 1, "samples per step (default 8)"},
    {"precision", "", 1, "fp32 or bf16 (mixed: 16-bit weights, gradients, activations; fp32 master and moments); default bf16 "
                         "where the hardware has it"},
    {"dtype", "", 1, "same as --precision (the word train and memory use)"},
    {"dp", "", 1, "fix the data-parallel size"},
    {"cp", "", 1, "fix the context-parallel size (each sequence split over cp ranks, --cp-comm's traffic timed; 1: none)"},
    {"cp-comm", "", 1, "the context group's exchange timed: ring (default) or a2a (all-to-all, Ulysses)"},
    {"ep", "", 1, "fix the expert-parallel size (dividing dp and the experts; default: searched for models with experts)"},
    {"tp", "", 1, "fix the tensor-parallel size"},
    {"pp", "", 1, "fix the pipeline size"},
    {"virtual-stages", "", 1, "fix the chunks per pipeline rank (interleaved)"},
    {"micro-batch-size", "", 1, "fix the micro-batch"},
    {"schedule", "", 1, "fix the schedule: 1f1b, gpipe, interleaved or zb-h1"},
    {"zero", "", 1, "fix the ZeRO stage (0 to 3)"},
    {"offload-optimizer", "", 1, "fix where the AdamW moments live: none, host or disk (this machine only; default: searched, "
                                 "tried where the moments do not fit on the device)"},
    {"recompute", "", 1, "fix the recompute: none, selective or full"},
    {"sequence-parallel", "", 0, "fix sequence parallelism on (--no-sequence-parallel: off)"},
    {"no-sequence-parallel", "", 0, "fix sequence parallelism off"},
    {"make-vocab-size-divisible-by", "", 1, "vocabulary padding divisor (default 128)"},
    {"max-tp", "", 1, "largest tensor-parallel size searched (default: devices per node)"},
    {"top", "", 1, "configurations printed (default 10)"},
    {"max-sims", "", 1, "schedules simulated at most (default 64; the rest keep their closed-form time)"},
    {"json", "", 0, "one JSON object per configuration and line"},
    {"svg", "", 1, "draw the fastest configuration to this SVG file: each pipeline rank's memory by category, and the simulated "
                   "step's timeline with its communication"},
};

static const char *this_path(void) { return cl_plan_this_path(); }

static const cli_flag cal_flags[] = {
    {"help", "h", 0, "show this help"},
    {"out", "", 1, "file to write (default: $CLEAVE_HW, else cleave-this.json here)"},
    {"repeat", "", 1, "best of this many runs per measurement (default 5; the GEMM table: this many sweeps over its shapes)"},
    {"offload-dir", "", 1, "directory whose file stream gives disk_bandwidth (--offload-optimizer disk's; default $TMPDIR, else /tmp)"},
};

/* Two thread ranks all-reduce n floats `reps` times; rank 0 keeps the best time of one. */
typedef struct {
    size_t n;
    int reps;
    double best;
} ar_job;

static cl_status ar_rank(cl_comm *w, void *arg) {
    ar_job *j = arg;
    float *buf = calloc(j->n, sizeof *buf);
    if (!buf) return cl_error(CL_ERR_OOM, "calibrate: cannot allocate the all-reduce buffer");
    cl_status s = CL_OK;
    double best = 1e30;
    for (int r = 0; r < j->reps && !s; r++) {
        if ((s = cl_comm_barrier(w))) break;
        double t0 = cl_now();
        s = cl_comm_allreduce(w, buf, j->n, CL_F32, CL_RED_SUM);
        double t = cl_now() - t0;
        if (t < best) best = t;
    }
    free(buf);
    if (!s && cl_comm_rank(w) == 0) j->best = best;
    return s;
}

/* The threads backend's all-reduce on 2 ranks: latency from 1 float (2 (g-1) = 2 message steps),
 * bandwidth from 16 MiB (2 (g-1)/g n = n bytes each way). */
static cl_status measure_link(int repeat, double *bw, double *lat) {
    cl_launch_opts o = {.timeout_s = 60};
    ar_job small = {1, 20 * repeat, 0}, big = {(size_t)4 << 20, repeat, 0};
    CL_TRY(cl_launch_threads(2, ar_rank, &small, &o));
    CL_TRY(cl_launch_threads(2, ar_rank, &big, &o));
    *lat = small.best / 2;
    double t = big.best - 2 * *lat;
    *bw = t > 0 ? (double)big.n * sizeof(float) / t : (double)big.n * sizeof(float) / big.best;
    return CL_OK;
}

/* The offload file's stream: a 64 MiB unlinked file in dir written and read back in 1 MiB pieces (the
 * offload's tiles, not synced: what the page cache and the disk give it), both directions' bytes over
 * the two passes' time, the best of `repeat`. */
static cl_status measure_disk(const char *dir, int repeat, double *bw) {
    char path[4096];
    snprintf(path, sizeof path, "%s/cleave-calibrate-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) return cl_error(CL_ERR_IO, "calibrate: cannot create a file in %s (--offload-dir)", dir);
    unlink(path);
    const size_t piece = (size_t)1 << 20, total = (size_t)64 << 20;
    char *buf = malloc(piece);
    cl_status s = buf ? CL_OK : cl_error(CL_ERR_OOM, "calibrate: cannot allocate the disk buffer");
    if (buf) memset(buf, 1, piece);
    double best = 1e30;
    for (int r = 0; r < repeat && !s; r++) {
        double t0 = cl_now();
        for (size_t o = 0; o < total && !s; o += piece)
            if (pwrite(fd, buf, piece, (off_t)o) != (ssize_t)piece) s = cl_error(CL_ERR_IO, "calibrate: cannot write in %s", dir);
        for (size_t o = 0; o < total && !s; o += piece)
            if (pread(fd, buf, piece, (off_t)o) != (ssize_t)piece) s = cl_error(CL_ERR_IO, "calibrate: cannot read back in %s", dir);
        double t = cl_now() - t0;
        if (t < best) best = t;
    }
    free(buf);
    close(fd);
    if (!s) *bw = 2.0 * (double)total / best;
    return s;
}

/* This process's CPU seconds (every thread's): the GEMM table is timed in them, not in wall time, so
 * time the products spend waiting for a core that other work holds does not enter the description
 * (on a shared machine wall-timed efficiencies came out 20-35% low and moved between calibrations). */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The rate at which cleave's own layernorm and GELU kernels move
 * the bytes src/plan/cost.c counts for them (read + written floats), on a
 * GPT block's activations of 4 x 128 rows and 256 channels (cache-resident,
 * as they are in training): these kernels do arithmetic per element (a
 * tanh, a row's mean and variance) and run well below a memcpy's bandwidth
 * at these sizes. Best of repeat, in CPU seconds. */
static cl_status measure_kernels(int repeat, double *bw) {
    const int N = 512, C = 256;
    size_t nc = (size_t)N * C, n4 = 4 * nc;
    float *buf = calloc(4 * n4 + 2 * (size_t)N + 4 * (size_t)C, sizeof *buf);
    if (!buf) return cl_error(CL_ERR_OOM, "calibrate: cannot allocate the kernels' buffers");
    float *x = buf, *y = x + n4, *dy = y + n4, *dx = dy + n4, *mean = dx + n4, *rstd = mean + N, *w = rstd + N, *b = w + C,
          *dw = b + C, *db = dw + C;
    for (size_t i = 0; i < n4; i++) x[i] = 1e-3f * (float)(i % 101) - 0.05f, dy[i] = 1e-3f * (float)(i % 89);
    for (int i = 0; i < C; i++) w[i] = 1, b[i] = 0;
    double bytes = 4.0 * (2 * nc + 3 * nc + 2 * nc + 2 * n4 + 3 * n4), best = 1e30;
    int reps = 20;
    for (int r = 0; r < repeat; r++) {
        double t0 = cpu_seconds();
        for (int k = 0; k < reps; k++) {
            cl_layernorm_forward(y, mean, rstd, x, w, b, N, C);
            cl_layernorm_backward_input(dx, dy, x, w, mean, rstd, N, C);
            cl_layernorm_backward_weight(dw, db, dy, x, mean, rstd, N, C);
            cl_gelu_forward(y, x, (int64_t)n4);
            cl_gelu_backward(dx, dy, x, (int64_t)n4);
        }
        double t = (cpu_seconds() - t0) / reps;
        if (t > 0 && t < best) best = t;
    }
    free(buf);
    *bw = bytes / best;
    return CL_OK;
}

/* Each of the table's m, n, k shapes (hw->gemm_points' first three columns) in the three layouts the engine
 * calls: A B (forward), A B^T (input gradients), A^T B (weight gradients, accumulated as the engine does);
 * rate[i][layout] the best FLOP/s over repeat sweeps; bf16: the operands BF16 (cl_gemm_ex, F32 sums and
 * output), as bf16 mixed precision calls them. The operands as training meets them: a product's weight (B of
 * A B and A B^T) and a weight gradient's input and accumulated output (A and C of A^T B) were last touched a
 * whole pass ago, so they come from beyond the core's own caches; the other operand was just written. Each
 * such operand is taken from the next slot of an 8 MiB pool (8 x this machine's 1 MiB L2), so a slot is
 * reused only after the pool has been read through. With every operand hot (one buffer used over and over)
 * the table priced micro-batch 1's passes under training's and micro-batch 4's over, which made four
 * micro-batches of one look as cheap as one of four (build/bench/gemm_cold: the cost of the cold operands at
 * a few training shapes). A repeat is a whole sweep over the shapes, and a shape keeps its best: the
 * machine's speed drifts by 10-15% over seconds (a sweep takes about one), and repeating a shape back to back
 * let one slow stretch lower all its tries. */
static cl_status gemm_rates(const cl_hw *hw, int repeat, int bf16, double rate[][CL_GEMM_NLAYOUTS]) {
    const size_t pool = (size_t)8 << 20 >> 2, big = 1024 * 1024, n = pool + big; /* floats (an F32 pool's size) */
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    uint16_t *a16 = bf16 ? malloc(n * sizeof *a16) : NULL, *b16 = bf16 ? malloc(n * sizeof *b16) : NULL;
    if (!a || !b || !c || (bf16 && (!a16 || !b16))) {
        free(a), free(b), free(c), free(a16), free(b16);
        return cl_error(CL_ERR_OOM, "calibrate: cannot allocate the products");
    }
    for (size_t i = 0; i < n; i++) a[i] = b[i] = 1e-3f * (float)(i % 97), c[i] = 0;
    if (bf16) cl_dtype_convert(a16, CL_BF16, a, CL_F32, n), cl_dtype_convert(b16, CL_BF16, b, CL_F32, n);
    static const int ta[CL_GEMM_NLAYOUTS] = {0, 0, 1}, tb[CL_GEMM_NLAYOUTS] = {0, 1, 0};
    size_t slot = 0, es = bf16 ? sizeof *a16 : sizeof *a;
    const char *A0 = bf16 ? (const char *)a16 : (const char *)a, *B0 = bf16 ? (const char *)b16 : (const char *)b;
    cl_dtype f = bf16 ? CL_BF16 : CL_F32;
    for (int r = 0; r < repeat; r++)
        for (int i = 0; i < hw->ngemm_points; i++) {
            int M = (int)hw->gemm_points[i][0], N = (int)hw->gemm_points[i][1], K = (int)hw->gemm_points[i][2];
            int reps = (int)(4e8 / (2.0 * M * N * K)) + 1;
            size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
            for (int l = 0; l < CL_GEMM_NLAYOUTS; l++) {
                int lda = ta[l] ? M : K, ldb = tb[l] ? K : N, wg = l == CL_GEMM_TN;
                double t0 = cpu_seconds();
                for (int k = 0; k < reps; k++, slot++) {
                    const char *A = wg ? A0 + slot * na % pool * es : A0, *B = wg ? B0 : B0 + slot * nb % pool * es;
                    float *C = wg ? c + slot * nc % pool : c;
                    if (bf16) cl_gemm_ex(ta[l], tb[l], M, N, K, 1.0f, A, f, lda, B, f, ldb, wg ? 1.0f : 0.0f, C, N);
                    else cl_gemm(ta[l], tb[l], M, N, K, 1.0f, (const float *)A, lda, (const float *)B, ldb, wg ? 1.0f : 0.0f, C, N);
                }
                double t = (cpu_seconds() - t0) / reps;
                if (t > 0 && 2.0 * M * N * K / t > rate[i][l]) rate[i][l] = 2.0 * M * N * K / t;
            }
        }
    free(a), free(b), free(c), free(a16), free(b16);
    return CL_OK;
}

/* The rates over the peak into the table's efficiency columns, the peak first raised to the best rate. */
static void table_over_peak(double rate[][CL_GEMM_NLAYOUTS], double (*pts)[3 + CL_GEMM_NLAYOUTS], int n, double *peak) {
    for (int i = 0; i < n; i++)
        for (int l = 0; l < CL_GEMM_NLAYOUTS; l++)
            if (rate[i][l] > *peak) *peak = rate[i][l];
    for (int i = 0; i < n; i++)
        for (int l = 0; l < CL_GEMM_NLAYOUTS; l++) pts[i][3 + l] = rate[i][l] / *peak;
}

static cl_status calibrate(const char *out, int repeat, const char *dir) {
    if (!cli_bench_isa()) return cl_error(CL_ERR_UNSUPPORTED, "calibrate needs AVX2 with FMA or AVX-512 (this CPU has neither)");
    cl_hw hw;
    memset(&hw, 0, sizeof hw);
    snprintf(hw.name, sizeof hw.name, "this");
    cl_set_threads(1); /* a device is one core */
    hw.peak_fp32 = cli_bench_peak(1, repeat) * 1e9;
    static const int dims[] = {64, 128, 256, 512, 1024};
    for (int i = 0; i < 125; i++) {
        double *pt = hw.gemm_points[hw.ngemm_points++];
        pt[0] = dims[i / 25], pt[1] = dims[i / 5 % 5], pt[2] = dims[i % 5];
    }
    double rate[125][CL_GEMM_NLAYOUTS] = {{0}};
    CL_TRY(gemm_rates(&hw, repeat, 0, rate));
    /* a peak below a rate the GEMM reached was measured short (the FMA loop shares the cores with
     * other work as much as the products do): the best rate is then the peak, so every efficiency
     * is at most 1 and none is clipped */
    table_over_peak(rate, hw.gemm_points, hw.ngemm_points, &hw.peak_fp32);
    /* bf16 mixed precision's products (BF16 operands, F32 sums), over the BF16 dot-product peak where the CPU
     * has AVX512_BF16, else over their own best rate (oneDNN widens the operands there) */
    hw.peak_bf16 = cli_bench_peak_bf16(1, repeat) * 1e9;
    memcpy(hw.gemm_points_bf16, hw.gemm_points, sizeof hw.gemm_points);
    hw.ngemm_points_bf16 = hw.ngemm_points;
    memset(rate, 0, sizeof rate);
    CL_TRY(gemm_rates(&hw, repeat, 1, rate));
    table_over_peak(rate, hw.gemm_points_bf16, hw.ngemm_points_bf16, &hw.peak_bf16);
    /* memory: a 256 MiB memcpy (read + write bytes), timed in CPU seconds as the products are */
    size_t mb = (size_t)256 << 20;
    char *src = malloc(mb), *dst = malloc(mb);
    if (!src || !dst) {
        free(src), free(dst);
        return cl_error(CL_ERR_OOM, "calibrate: cannot allocate the copy");
    }
    memset(src, 1, mb), memset(dst, 2, mb);
    double best_copy = 1e30;
    for (int r = 0; r < repeat; r++) {
        double t0 = cpu_seconds();
        memcpy(dst, src, mb);
        double t = cpu_seconds() - t0;
        if (t > 0 && t < best_copy) best_copy = t;
    }
    hw.mem_bw = 2.0 * (double)mb / best_copy + 0 * dst[mb / 2];
    free(src), free(dst);
    CL_TRY(measure_kernels(repeat < 10 ? 10 : repeat, &hw.kern_bw)); /* short runs: best of at least 10 */
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    int cores = cl_cores_available();
    hw.devices_per_node = cores > 0 ? cores : 1;
    hw.device_memory = pages > 0 && psz > 0 ? (double)pages * (double)psz / hw.devices_per_node : 1e9;
    /* the links: the threads backend's all-reduce between two ranks (one machine: within and between
     * "nodes" alike) */
    CL_TRY(measure_link(repeat, &hw.intra_bw, &hw.intra_lat));
    CL_TRY(measure_disk(dir, repeat, &hw.disk_bw));
    hw.inter_bw = hw.intra_bw, hw.inter_lat = hw.intra_lat;
    hw.exact_memory = 1;
    hw.coll_on_cores = 1; /* the threads backend's copies and sums run on the ranks' cores */
    hw.attn_causal = 1;   /* cleave's attention kernels skip the blocks past the diagonal */
    char note[1536];
    snprintf(note, sizeof note,
             "cleave plan calibrate: peak = one core's FP32 FMA loop (%s), or the best GEMM rate where that is higher; gemm "
             "table = cl_gemm (%s) on one thread at m, n, k in {64, 128, 256, 512, 1024}, timed in process CPU seconds, over that peak; peak_flops.bf16 = one core's BF16 dot-product loop (vdpbf16ps, where the CPU has AVX512_BF16) or the best BF16 product's rate where that is higher; gemm_bf16 table = the same shapes with BF16 operands and F32 sums (cl_gemm_ex) over that peak; memory_bandwidth = a 256 MiB memcpy (read + write bytes) in process CPU seconds; kernel_bandwidth = cleave's layernorm (forward, both backwards), GELU (forward, backward) kernels on 512 x 256 activations (4 x that for GELU), the bytes src/plan/cost.c counts for them over their CPU time; a device = one core, its memory "
             "the host's divided by the %d cores; links = a 2-rank threads all-reduce: latency from 1 float, bandwidth from 16 MiB; collectives_on_cores: "
             "the ranks are threads on these cores and a collective's copies and sums are their work, so none hides under compute; "
             "attention_causal_blocks: cleave's attention kernels compute the score blocks on and below the diagonal only; "
             "disk_bandwidth = a 64 MiB file in %s written and read back in 1 MiB pieces (bytes both ways over the time)",
             cli_bench_isa(), cl_gemm_backend(), hw.devices_per_node, dir);
    char *text = cl_hw_to_json(&hw, note);
    if (!text) return cl_error(CL_ERR_OOM, "calibrate: cannot write the description");
    FILE *f = fopen(out, "w");
    int bad = !f || fputs(text, f) < 0;
    if (f && fclose(f)) bad = 1;
    free(text);
    if (bad) return cl_error(CL_ERR_IO, "calibrate: cannot write %s", out);
    printf("wrote %s: peak %.1f GFLOP/s per core (bf16 %.1f), memory %.1f GB/s (kernels %.1f GB/s), %d devices (cores), %.1f GiB each, link %.1f GB/s and %.1f us, "
           "disk %.2f GB/s\n",
           out, hw.peak_fp32 / 1e9, hw.peak_bf16 / 1e9, hw.mem_bw / 1e9, hw.kern_bw / 1e9, hw.devices_per_node, hw.device_memory / (1 << 30), hw.intra_bw / 1e9,
           hw.intra_lat * 1e6, hw.disk_bw / 1e9);
    return CL_OK;
}

static int cmd_calibrate(int argc, char **argv) {
    cli_args a;
    cl_status s = cli_parse(&a, cal_flags, NFLAGS(cal_flags), argc, argv, 3);
    if (s) return cli_fail(s);
    if (cli_get(&a, "help")) {
        cli_print_help("usage: cleave plan calibrate [--out FILE] [--offload-dir DIR]\n\n"
                       "Measures this machine as `cleave bench` does (one core's FP32 peak, the GEMM's efficiency at\n"
                       "125 shapes, memory bandwidth, a file's stream in DIR) and writes the hardware description `--hardware this` reads.",
                       cal_flags, NFLAGS(cal_flags));
        return 0;
    }
    int repeat = 5;
    if ((s = cli_int(&a, "repeat", &repeat, 1, 100))) return cli_fail(s);
    const char *out = cli_get(&a, "out") ? cli_get(&a, "out") : this_path();
    const char *dir = cli_get(&a, "offload-dir"), *tmp = getenv("TMPDIR");
    if (!dir) dir = tmp && *tmp ? tmp : "/tmp";
    s = calibrate(out, repeat, dir);
    return s ? cli_fail(s) : 0;
}

static cl_status load_hw(const char *name, cl_hw *hw) {
    if (!strcmp(name, "a100") || !strcmp(name, "h100")) return cl_hw_builtin(name, hw);
    if (!strcmp(name, "this")) {
        const char *p = this_path();
        if (access(p, R_OK))
            return cl_error(CL_ERR_INVALID, "--hardware this: no %s (run `cleave plan calibrate` first, or set $CLEAVE_HW)", p);
        return cl_hw_load(p, hw);
    }
    return cl_hw_load(name, hw);
}

static const char *rc_name(int r) { return r == 2 ? "full" : r == 1 ? "selective" : "none"; }

static void gib(char *b, size_t n, double x) { snprintf(b, n, "%.3g", x / (1 << 30)); }

static void print_json(const cl_plan_result *r) {
    const cl_plan_cfg *c = &r->c;
    printf("{\"dp\": %d, \"tp\": %d, \"pp\": %d, \"cp\": %d, \"cp_comm\": \"%s\", \"ep\": %d, \"a2a_s\": %.6g, \"a2a_bytes\": %.0f, \"virtual_stages\": %d, \"micro_batch_size\": %d, \"schedule\": \"%s\", \"zero\": %d, "
           "\"offload_optimizer\": \"%s\", \"recompute\": \"%s\", \"sequence_parallel\": %s, \"precision\": \"%s\", \"fits\": %s, \"step_s\": %.6g, "
           "\"tokens_per_s\": %.6g, \"model_tflops_per_device\": %.6g, \"tflops_per_device\": %.6g, \"peak_share\": %.4f, "
           "\"bubble\": %.4f, \"comm_share\": %.4f, \"simulated\": %s, \"lean\": %s, \"peak_bytes\": %.0f, \"peak_rank\": %d, \"bytes\": {",
           c->dp, c->tp, c->pp, c->cp > 1 ? c->cp : 1, c->cp_comm == CL_CP_A2A ? "a2a" : "ring", c->ep > 1 ? c->ep : 1, r->a2a_s,
           r->a2a_bytes, c->v, c->mb, cl_sched_kind_name((cl_sched_kind)c->schedule), c->zero,
           c->offload == CL_OFFLOAD_DISK ? "disk" : c->offload == CL_OFFLOAD_HOST ? "host" : "none", rc_name(c->recompute), c->sp ? "true" : "false", c->bf16 ? "bf16" : "fp32", r->fits ? "true" : "false", r->step_s, r->tokens_per_s,
           r->model_tflops, r->hw_tflops, r->peak_share, r->bubble, r->comm_share, r->simulated ? "true" : "false", c->lean ? "true" : "false", r->peak_bytes,
           r->full_rank);
    for (int k = 0; k < CL_MEM_NCAT; k++) printf("%s\"%s\": %.0f", k ? ", " : "", cl_mem_cat_name((cl_mem_cat)k), r->cat_bytes[k]);
    printf("}}\n");
}

static void print_table(const cl_plan_list *l, int top) {
    printf("  %4s %4s %3s %3s %3s %3s %2s %3s %-11s %4s %-9s %2s | %9s %10s %7s %5s %6s %5s %8s | %8s (GiB: params grads optim acts "
           "work)\n",
           "rank", "dp", "cp", "ep", "tp", "pp", "v", "mb", "schedule", "zero", "recompute", "sp", "step s", "tokens/s", "TFLOP/s", "peak",
           "bubble", "comm", "a2a s", "mem GiB");
    for (int i = 0; i < l->n && i < top; i++) {
        const cl_plan_result *r = &l->r[i];
        const cl_plan_cfg *c = &r->c;
        char cat[5][16], pk[16];
        for (int k = 0; k < 5; k++) gib(cat[k], sizeof cat[k], r->cat_bytes[k]);
        gib(pk, sizeof pk, r->peak_bytes);
        printf("  %4d %4d %3d %3d %3d %3d %2d %3d %-11s %4d %-9s %2s | %9.4g %10.4g %7.3g %4.0f%% %6.3f %5.3f %8.3g | %8s (%s %s %s %s %s)%s%s%s%s\n",
               i + 1, c->dp, c->cp > 1 ? c->cp : 1, c->ep > 1 ? c->ep : 1, c->tp, c->pp, c->v, c->mb,
               cl_sched_kind_name((cl_sched_kind)c->schedule), c->zero, rc_name(c->recompute), c->sp ? "y" : "n", r->step_s, r->tokens_per_s,
               r->model_tflops, 100 * r->peak_share, r->bubble, r->comm_share, r->a2a_s, pk,
               cat[0], cat[1], cat[2], cat[3], cat[4], r->simulated ? "" : " *", c->cp > 1 && c->cp_comm == CL_CP_A2A ? " cp-comm a2a" : "",
               c->offload == CL_OFFLOAD_DISK ? " offload disk" : c->offload == CL_OFFLOAD_HOST ? " offload host" : "",
               !c->lean ? "" : c->zero == CL_ZERO_PARAMS ? " --bucket-size 1 --zero3-prefetch 0" : " --bucket-size 1");
    }
}

int cleave_cmd_plan(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[2], "calibrate")) return cmd_calibrate(argc, argv);
    cli_args a;
    cl_status s = cli_parse(&a, plan_flags, NFLAGS(plan_flags), argc, argv, 2);
    if (s) return cli_fail(s);
    if (cli_get(&a, "help")) {
        cli_print_help("usage: cleave plan [train's model flags] --devices N [--hardware a100|h100|this|FILE] [flags]\n"
                       "       cleave plan calibrate [--out FILE]\n\n"
                       "Predicts, for every way to split the model over the devices (dp x cp x tp x pp, expert\n"
                       "parallelism for models with experts, virtual stages, micro-batch, schedule, ZeRO stage, recompute,\n"
                       "sequence parallelism), each rank's memory and the\n"
                       "step time (unit costs and the hardware run through the schedule simulator), drops what does\n"
                       "not fit, and prints the fastest first. Flags for those dimensions fix them. TFLOP/s are model\n"
                       "FLOPs (no recompute) per device; a2a s is a step's all-to-all time (the experts' dispatch, --cp-comm\n"
                       "a2a); * marks a time from the closed form (not simulated).",
                       plan_flags, NFLAGS(plan_flags));
        return 0;
    }
    cl_plan_query q;
    memset(&q, 0, sizeof q);
    q.fix = (cl_plan_cfg){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    int seq = 0;
    if ((s = cli_parse_model(&a, &q.model, &seq))) return cli_fail(s);
    q.T = cl_model_family_of(&q.model)->tokens ? (seq ? seq : q.model.seq_len) : 1;
    if ((s = load_hw(cli_get(&a, "hardware") ? cli_get(&a, "hardware") : "a100", &q.hw))) return cli_fail(s);
    int devices = 0, nodes = 0, dpn = 0, top = 10;
    q.global_batch = 8;
    q.vocab_div = 128;
    size_t mem = 0;
    if ((s = cli_int(&a, "devices", &devices, 1, 1 << 24)) || (s = cli_int(&a, "nodes", &nodes, 1, 1 << 20)) ||
        (s = cli_int(&a, "devices-per-node", &dpn, 1, 1 << 16)) || (s = cli_bytes(&a, "device-memory", &mem)) ||
        (s = cli_int(&a, "global-batch-size", &q.global_batch, 1, 1 << 30)) || (s = cli_int(&a, "dp", &q.fix.dp, 1, 1 << 24)) ||
        (s = cli_int(&a, "cp", &q.fix.cp, 1, 4096)) || (s = cli_int(&a, "ep", &q.fix.ep, 1, 4096)) ||
        (s = cli_int(&a, "tp", &q.fix.tp, 1, 1 << 16)) || (s = cli_int(&a, "pp", &q.fix.pp, 1, 4096)) ||
        (s = cli_int(&a, "virtual-stages", &q.fix.v, 1, 64)) || (s = cli_int(&a, "micro-batch-size", &q.fix.mb, 1, 1 << 20)) ||
        (s = cli_int(&a, "zero", &q.fix.zero, 0, 3)) || (s = cli_int(&a, "make-vocab-size-divisible-by", &q.vocab_div, 1, 1 << 20)) ||
        (s = cli_int(&a, "max-tp", &q.max_tp, 1, 1 << 16)) || (s = cli_int(&a, "top", &top, 1, 1 << 20)) ||
        (s = cli_int(&a, "max-sims", &q.max_sims, 1, 1 << 20)))
        return cli_fail(s);
    if (dpn) q.hw.devices_per_node = dpn;
    if (nodes) {
        if (devices && devices != nodes * q.hw.devices_per_node)
            return cli_fail(cl_error(CL_ERR_INVALID, "--devices %d is not --nodes %d x %d devices per node", devices, nodes,
                                     q.hw.devices_per_node));
        devices = nodes * q.hw.devices_per_node;
    }
    if (!devices) return cli_fail(cl_error(CL_ERR_INVALID, "give --devices N (or --nodes N)"));
    const char *svg = cli_get(&a, "svg");
    if (svg && (s = cl_check_output_path(svg, "--svg"))) return cli_fail(s);
    q.devices = devices;
    q.device_memory = (double)mem;
    if (q.hw.exact_memory) q.host_memory = (double)cl_host_memory_available(); /* this machine: offload counts its host */
    q.top = top > 64 ? 64 : top;
    if (cli_get(&a, "schedule")) {
        cl_sched_kind k;
        if ((s = cl_sched_kind_parse(cli_get(&a, "schedule"), &k))) return cli_fail(s);
        q.fix.schedule = (int)k;
    }
    if (cli_get(&a, "recompute")) {
        cl_recompute rc;
        if ((s = cl_recompute_parse(cli_get(&a, "recompute"), &rc))) return cli_fail(s);
        q.fix.recompute = (int)rc;
    }
    const char *cc = cli_get(&a, "cp-comm");
    if (cc && strcmp(cc, "ring") && strcmp(cc, "a2a")) return cli_fail(cl_error(CL_ERR_INVALID, "unknown --cp-comm '%s' (ring or a2a)", cc));
    q.fix.cp_comm = cc && !strcmp(cc, "a2a") ? CL_CP_A2A : -1;
    if (cli_get(&a, "sequence-parallel")) q.fix.sp = 1;
    if (cli_get(&a, "no-sequence-parallel")) q.fix.sp = 0;
    const char *prec = cli_get(&a, "precision"), *dtype = cli_get(&a, "dtype");
    if (prec && dtype && strcmp(prec, dtype))
        return cli_fail(cl_error(CL_ERR_INVALID, "--precision %s and --dtype %s disagree (they are one setting)", prec, dtype));
    if (!prec) prec = dtype;
    if (prec && strcmp(prec, "fp32") && strcmp(prec, "bf16"))
        return cli_fail(cl_error(CL_ERR_INVALID, "unknown --precision '%s' (fp32 or bf16)", prec));
    if (prec) q.fix.bf16 = !strcmp(prec, "bf16");
    if (q.fix.bf16 == 1 && !(q.hw.peak_bf16 > 0))
        return cli_fail(cl_error(CL_ERR_INVALID, "--precision bf16: the hardware %s has no bf16 peak%s", q.hw.name,
                                 q.hw.exact_memory ? " (run `cleave plan calibrate` again: it measures the BF16 rates)" : ""));
    const char *off = cli_get(&a, "offload-optimizer");
    if (off) {
        if ((s = cli_offload(&a, &q.fix.offload))) return cli_fail(s);
        if (q.fix.offload != CL_OFFLOAD_NONE && !q.hw.exact_memory)
            return cli_fail(cl_error(CL_ERR_UNSUPPORTED, "--offload-optimizer %s: modelled on this machine only (--hardware this)", off));
    }
    if (q.fix.cp > 1 || q.fix.ep > 1) { /* the trainer's refusals of --cp (a token family, 2 cp chunks, no sp, no experts)
                                          * and --ep (a model with experts, ep dividing them), up front */
        cl_train_config tc;
        cl_train_config_default(&tc);
        tc.model = q.model, tc.seq_len = q.T, tc.cp = q.fix.cp > 1 ? q.fix.cp : 1, tc.ep = q.fix.ep > 1 ? q.fix.ep : 1, tc.cp_comm = q.fix.cp_comm > 0 ? q.fix.cp_comm : CL_CP_RING, tc.sequence_parallel = q.fix.sp == 1, tc.tp = q.fix.tp > 0 ? q.fix.tp : 1;
        cl_model_desc *d;
        if ((s = cl_train_describe(&tc, 0, &d))) return cli_fail(s);
        cl_model_desc_free(d);
    }
    cl_plan_list l;
    double t0 = cl_now();
    if ((s = cl_plan_search(&q, &l))) return cli_fail(s);
    double dt = cl_now() - t0;
    char cap[32];
    double capb = q.device_memory > 0 ? q.device_memory : q.hw.device_memory;
    cl_format_bytes((size_t)capb, cap, sizeof cap);
    if (!l.considered && l.refused[0]) {
        s = cl_error(CL_ERR_UNSUPPORTED, "no configuration cleave can run: %s", l.refused);
        cl_plan_list_free(&l);
        return cli_fail(s);
    }
    if (!l.considered) {
        cl_plan_list_free(&l);
        return cli_fail(cl_error(CL_ERR_INVALID,
                                 "no configuration of %d devices: dp x cp x tp x pp must make %d, with dp dividing the global batch "
                                 "%d, tp dividing the heads, pp no more stages than the model has units, 2 cp dividing the "
                                 "sequence (and the fixed flags)",
                                 devices, devices, q.global_batch));
    }
    if (!l.n) {
        const cl_plan_result *r = &l.nearest;
        char need[32], over[32];
        cl_format_bytes((size_t)r->peak_bytes, need, sizeof need);
        cl_format_bytes((size_t)r->over_bytes, over, sizeof over);
        s = cl_error(CL_ERR_OOM,
                     "no configuration fits %s per device: the nearest (dp %d cp %d tp %d pp %d v %d mb %d %s zero %d recompute %s%s) "
                     "needs %s on pipeline rank %d, %s over; its largest category is %s",
                     cap, r->c.dp, r->c.cp > 1 ? r->c.cp : 1, r->c.tp, r->c.pp, r->c.v, r->c.mb, cl_sched_kind_name((cl_sched_kind)r->c.schedule), r->c.zero,
                     rc_name(r->c.recompute), r->c.sp ? " sp" : "", need, r->full_rank, over, cl_mem_cat_name((cl_mem_cat)r->over_cat));
        cl_plan_list_free(&l);
        return cli_fail(s);
    }
    if (cli_get(&a, "json")) {
        for (int i = 0; i < l.n && i < top; i++) print_json(&l.r[i]);
    } else {
        const cl_plan_result *b = &l.r[0];
        printf("plan: %s, %d devices (%d per node) of %s, %s each, global batch %d x %d tokens, %s\n", q.model.name, devices,
               q.hw.devices_per_node, q.hw.name, cap, q.global_batch, q.T, b->c.bf16 ? "bf16 mixed precision" : "fp32");
        printf("searched %ld configurations in %.2f s: %ld fit, %ld simulated; fastest first:\n", l.considered, dt, l.fitted,
               l.simulated_count);
        print_table(&l, top);
    }
    if (svg) {
        cl_plan_detail d;
        if (!(s = cl_plan_detail_of(&q, &l.r[0].c, &d))) {
            s = cl_plan_svg(svg, &q, &d);
            cl_plan_detail_free(&d);
        }
        if (!s && !cli_get(&a, "json")) printf("svg: %s (the first row)\n", svg);
    }
    cl_plan_list_free(&l);
    return s ? cli_fail(s) : 0;
}
