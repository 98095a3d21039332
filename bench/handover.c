/* Two fixed costs the planner does not model yet (docs/PERFORMANCE.md,
 * Planner: the grid's misses):
 *
 *   1. The hand-over between two thread ranks: a one-float all-reduce timed
 *      from the later rank's arrival to the earlier rank's return, when the
 *      earlier rank arrived 0 us to 5 ms before (it spins, then blocks and
 *      must be woken). Mean and minimum over 30 rounds.
 *   2. One call of a small kernel (sgemm 16 x 16 x 16 in the layouts A B and
 *      A^T B, a 4 x 16 layernorm, a 64-element GELU): the call's fixed cost.
 *
 *   build/bench/handover
 *
 * Run it on idle cores: with other work on them the hand-over includes the
 * wait for a core. */
#include "cleave/comm.h"
#include "cleave/kernels.h"

#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define ROUNDS 40
#define SKIP 10

typedef struct {
    double early_s;       /* how long before the later rank the earlier one arrives */
    double enter[ROUNDS]; /* the later rank's arrival */
    double ret[ROUNDS];   /* the earlier rank's return */
} handover_job;

static cl_status handover_rank(cl_comm *w, void *arg) {
    handover_job *j = arg;
    float x = 1;
    for (int r = 0; r < ROUNDS; r++) {
        CL_TRY(cl_comm_barrier(w));
        if (cl_comm_rank(w) == 1) {
            double t0 = now();
            while (now() - t0 < j->early_s) {
            }
            j->enter[r] = now();
            CL_TRY(cl_comm_allreduce(w, &x, 1, CL_F32, CL_RED_SUM));
        } else {
            CL_TRY(cl_comm_allreduce(w, &x, 1, CL_F32, CL_RED_SUM));
            j->ret[r] = now();
        }
        CL_TRY(cl_comm_barrier(w));
    }
    return CL_OK;
}

static double per_call(int which, int n) {
    static float a[64 * 64], b[64 * 64], c[64 * 64], mean[64], rstd[64], w[64], bias[64];
    for (int i = 0; i < 64; i++) w[i] = 1, bias[i] = 0;
    for (int i = 0; i < 64 * 64; i++) a[i] = b[i] = 1e-3f * (float)(i % 97);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        for (int k = 0; k < n; k++) {
            if (which == 0) cl_gemm(0, 0, 16, 16, 16, 1.0f, a, 16, b, 16, 0.0f, c, 16);
            else if (which == 1) cl_gemm(1, 0, 16, 16, 16, 1.0f, a, 16, b, 16, 0.0f, c, 16);
            else if (which == 2) cl_layernorm_forward(c, mean, rstd, a, w, bias, 4, 16);
            else cl_gelu_forward(c, a, 64);
        }
        double t = (now() - t0) / n;
        if (t < best) best = t;
    }
    return best;
}

int main(void) {
    cl_set_threads(1);
    printf("hand-over between two thread ranks (one-float all-reduce, later arrival to earlier return)\n");
    static const double early[] = {0, 1e-5, 1e-4, 1e-3, 5e-3};
    for (size_t i = 0; i < sizeof early / sizeof early[0]; i++) {
        handover_job j = {.early_s = early[i]};
        cl_launch_opts o = {.timeout_s = 60};
        if (cl_launch_threads(2, handover_rank, &j, &o)) {
            fprintf(stderr, "handover: %s\n", cl_last_error());
            return 1;
        }
        double sum = 0, lo = 1e30;
        for (int r = SKIP; r < ROUNDS; r++) {
            double d = j.ret[r] - j.enter[r];
            sum += d;
            if (d < lo) lo = d;
        }
        printf("  earlier by %6.0f us: mean %6.1f us, min %6.1f us\n", early[i] * 1e6, sum / (ROUNDS - SKIP) * 1e6, lo * 1e6);
    }
    static const char *const names[] = {"sgemm 16x16x16 A B", "sgemm 16x16x16 A^T B", "layernorm 4 x 16", "gelu 64"};
    printf("one call of a small kernel (best of 3 runs of 20000 calls)\n");
    for (int k = 0; k < 4; k++) printf("  %-22s %6.2f us\n", names[k], per_call(k, 20000) * 1e6);
    return 0;
}
