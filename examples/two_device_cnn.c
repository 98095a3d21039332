/* Manual model placement: the textbook two-device CNN, placed by hand with
 * the public C API, trained on the 8x8 digits and checked against the same
 * training on one device.
 *
 *   make && ./build/examples/two_device_cnn [--steps N] [--micro-batches M]
 *            [--batch B] [--data FILE] [--lr X] [--grad-clip X] [--seed S]
 *            [--device-memory 4MiB] [--log-every K]
 *
 * The "cnn" preset's units (cl_model_describe) are
 *     conv  relu  pool  flatten | fc1  fc2  relu2  fc3  loss
 * and the cut is after flatten: device 0 (rank 0) holds the convolution
 * part, device 1 (rank 1) the classifier. Each part is a cl_model made by
 * cl_model_create_part on its own capped cl_device, with its own AdamW. The
 * cut is found from the description, not hard-coded, and the example checks
 * that the convolution part's output (flatten: conv_channels x pooled h x
 * pooled w floats per sample) is exactly fc1's input before it builds
 * anything: the shape the classifier's first linear layer is sized from.
 *
 * The two ranks are threads (cl_launch_threads). Forward: rank 0 runs its
 * units and sends the flatten output (cl_comm_isend, straight out of the
 * saved activations, which live until that micro-batch's backward); rank 1
 * receives it (cl_comm_recv), runs the classifier and the loss. Backward:
 * rank 1 sends the gradient of its input back, rank 0 receives it as the
 * gradient of its output and finishes. Then the global gradient norm: each
 * rank fills per-parameter sums of squares for its own parameters
 * (cl_grad_sumsq, zeros elsewhere), one cl_comm_allreduce (CL_F64) adds the two
 * vectors (exact: every entry is non-zero on one rank only), and both ranks
 * sum the vector in parameter order (cl_grad_norm_of) as cl_grad_norm does
 * on one device; then cl_grad_clip and cl_optimizer_step on each part.
 *
 * Runs, all on the same samples (a fixed cl_rng permutation of the training
 * images; sample j of step s is global index s * batch + j) and from the
 * same initial parameters (cl_model_init on each part draws the whole
 * model's stream and keeps its share):
 *   unsplit, 1 micro-batch    the reference: the whole model, one device;
 *   split,   1 micro-batch    mode 1: each rank idles while the other works;
 *   unsplit, M micro-batches  the reference for mode 2 (gradients accumulated);
 *   split,   M micro-batches  mode 2, GPipe: all forwards, then all
 *                             backwards in micro-batch order, every
 *                             micro-batch's activations kept until its backward.
 *
 * Bitwise equality. Each split run is compared with the unsplit run of the
 * SAME micro-batch count, and must equal it bit for bit: every step's loss
 * and gradient norm, the final validation loss and every final parameter.
 * It does because every kernel sees the same inputs with the same shapes
 * (cl_set_threads(1) in every rank and in the main thread, so the GEMM's
 * blocking, and so its rounding, is the same everywhere), each gradient
 * accumulates the same terms in the same order (backwards in micro-batch
 * order), the loss is summed per micro-batch in the same order, the norm's
 * pieces are summed in the same order, and AdamW is elementwise.
 * Mode 2 is NOT bitwise equal to the 1-micro-batch reference, and is not
 * meant to be: cutting the batch changes the arithmetic, not just the
 * placement. A weight gradient of one micro-batch of B samples is one GEMM
 * summing B products per element; M micro-batches make M partial sums of
 * B/M products, added into the gradient one after another, which rounds
 * differently in float. The example prints that difference too (about 1e-7
 * relative: float rounding), for information only; the claim it checks is
 * split == unsplit at equal micro-batching.
 *
 * Idle time. Each rank times its forward and backward work per step (busy);
 * a step's window starts after a barrier and ends when the later of the two
 * ranks finishes its last backward; idle = window - busy, so idle also holds
 * the time messages take. Printed per rank as ms per step and as the idle
 * fraction, averaged over every step but the first, beside the figure the
 * schedule simulator (schedule.h) gives for GPipe on these two stages with
 * the measured mean forward and backward time of a micro-batch and free
 * messages. The stages are unbalanced (the convolution part takes about
 * three quarters of the time), so the idle fraction falls with M far less
 * than GPipe's 1/(M+1) for equal stages: see docs/ARCHITECTURE.md.
 *
 * Exit status: 0 when every equality holds; 2 on bad flags or data (with a
 * message); 1 when training fails (a library error, e.g. a memory cap too
 * small); 3 when a split run differs from its unsplit reference. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleave/comm.h"
#include "cleave/kernels.h"
#include "cleave/schedule.h"
#include "cleave/train.h"

#define EVAL_TAG 20000 /* above 2 * max micro-batches + 1 */
#define MAX_BATCH 4096

typedef struct {
    int steps, micro, batch, log_every;
    int perturb;           /* tests: nudge one classifier weight on device 1, so the split runs must differ */
    float lr, grad_clip;
    uint64_t seed;
    size_t cap;
    const char *data;
} options;

/* Everything the runs share (read-only once set up). */
typedef struct {
    options o;
    cl_model_desc *desc;
    int cut;               /* first unit of the classifier part */
    cl_digits digits;
    int *perm;             /* training sample order */
    int ntrain, nval;      /* training images first, validation after */
    cl_lr_schedule lr;
    cl_adamw_opts adamw;
} setup;

/* One run's results. */
typedef struct {
    int M;                 /* micro-batches per step */
    double *loss, *norm;   /* per step */
    double val_loss;
    float *params;         /* final parameters in the whole model's flat layout */
    size_t peak[2];        /* per device */
    double fwd[2], bwd[2], idle[2], window; /* split runs: ms summed over the timed steps */
    int timed;             /* steps timed */
} result;

/* One device's share: a part of the model, its memory and its optimizer. */
typedef struct {
    cl_device *dev;
    cl_model *m;
    cl_optimizer opt;
    int have_opt;
    cl_acts *acts;
    int nacts;
} part;

static void part_destroy(part *p) {
    if (p->m) {
        for (int i = 0; i < p->nacts; i++) cl_acts_destroy(p->m, &p->acts[i]);
        if (p->have_opt) cl_optimizer_destroy(&p->opt, p->m);
        cl_model_destroy(p->m);
    }
    free(p->acts);
    cl_device_destroy(p->dev);
    memset(p, 0, sizeof *p);
}

/* Units [u0, u1) on a new device `id` capped at S->o.cap, micro-batches of
 * B samples, nacts activation sets (one per micro-batch kept alive). */
static cl_status part_create(part *p, const setup *S, int id, int u0, int u1, int B, int nacts) {
    memset(p, 0, sizeof *p);
    cl_status s = cl_device_create_cpu(&p->dev, S->o.cap, id);
    if (!s) s = cl_model_create_part(&p->m, S->desc, p->dev, B, u0, u1);
    if (!s) {
        cl_model_init(p->m, S->o.seed);
        s = cl_optimizer_create(&p->opt, p->m, &S->adamw);
        p->have_opt = !s;
    }
    if (!s && !(p->acts = calloc((size_t)nacts, sizeof *p->acts))) s = cl_error(CL_ERR_OOM, "no host memory for activation tables");
    for (int i = 0; !s && i < nacts; i++) {
        s = cl_acts_create(p->m, B, &p->acts[i]);
        if (!s) p->nacts = i + 1;
    }
    if (s) part_destroy(p);
    return s;
}

/* Step `step`'s samples: images into x (may be NULL), labels into y (may be NULL). */
static void fill_batch(const setup *S, int step, float *x, int32_t *y) {
    size_t px = (size_t)S->digits.pixels;
    for (int j = 0; j < S->o.batch; j++) {
        int64_t k = (int64_t)step * S->o.batch + j;
        int i = S->perm[k % S->ntrain];
        if (x) memcpy(x + (size_t)j * px, S->digits.images + (size_t)i * px, px * sizeof(float));
        if (y) y[j] = S->digits.labels[i];
    }
}

/* Validation images [k, k + n) into x / y (either may be NULL). */
static void fill_val(const setup *S, int k, int n, float *x, int32_t *y) {
    size_t px = (size_t)S->digits.pixels;
    for (int b = 0; b < n; b++) {
        int i = S->ntrain + k + b;
        if (x) memcpy(x + (size_t)b * px, S->digits.images + (size_t)i * px, px * sizeof(float));
        if (y) y[b] = S->digits.labels[i];
    }
}

static cl_microbatch micro(const setup *S, int M, int i, const float *x, const int32_t *y) {
    int B = S->o.batch / M;
    cl_microbatch mb = {.B = B, .T = 1, .dloss = (float)(1.0 / S->o.batch)};
    mb.x = x ? x + (size_t)i * B * (size_t)S->digits.pixels : NULL;
    mb.targets = y ? y + (size_t)i * B : NULL;
    return mb;
}

static cl_status clip_and_step(part *p, const setup *S, int step, double norm) {
    if (!isfinite(norm)) return cl_error(CL_ERR_INVALID, "step %d: the gradient norm is not finite (lower --lr?)", step + 1);
    cl_grad_clip(p->m, norm, S->adamw.grad_clip);
    cl_optimizer_step(&p->opt, p->m, cl_lr_at(&S->lr, step));
    return CL_OK;
}

/* Copies a part's parameters into (or compares them with) the whole
 * model's flat layout; returns the number of differing parameters. */
static int params_io(const cl_model *m, float *whole, int compare) {
    const cl_model_desc *d = cl_model_desc_of(m);
    int differ = 0;
    for (int i = 0; i < d->nparams; i++) {
        if (!cl_model_owns_param(m, i)) continue;
        float *w = cl_param_f32(whole, &d->params[i]);
        size_t bytes = (size_t)d->params[i].numel * sizeof(float);
        if (!compare) memcpy(w, cl_model_param(m, i), bytes);
        else differ += memcmp(w, cl_model_param(m, i), bytes) != 0;
    }
    return differ;
}

/* ---- the reference: the whole model on one device ------------------------ */
static cl_status run_unsplit(const setup *S, result *R) {
    cl_set_threads(1);
    int B = S->o.batch / R->M;
    part p;
    CL_TRY(part_create(&p, S, 0, 0, S->desc->nunits, B, 1));
    cl_status s = CL_OK;
    float *x = NULL;
    int32_t *y = NULL;
    s = cl_device_alloc_f32(p.dev, CL_MEM_WORKSPACE, (size_t)S->o.batch * (size_t)S->digits.pixels, &x);
    if (!s) s = cl_device_alloc(p.dev, CL_MEM_WORKSPACE, (size_t)S->o.batch * sizeof *y, (void **)&y);
    for (int step = 0; !s && step < S->o.steps; step++) {
        fill_batch(S, step, x, y);
        cl_model_zero_grads(p.m);
        double loss = 0;
        for (int i = 0; !s && i < R->M; i++) {
            cl_microbatch mb = micro(S, R->M, i, x, y);
            double ls = 0;
            s = cl_model_forward_backward(p.m, &mb, &p.acts[0], &ls, 1);
            loss += ls;
        }
        if (s) break;
        R->loss[step] = loss / S->o.batch;
        R->norm[step] = cl_grad_norm(p.m);
        s = clip_and_step(&p, S, step, R->norm[step]);
    }
    double vsum = 0;
    for (int k = 0; !s && k < S->nval; k += B) {
        int n = S->nval - k < B ? S->nval - k : B;
        fill_val(S, k, n, x, y);
        cl_microbatch mb = {.B = n, .T = 1, .x = x, .targets = y};
        double ls = 0;
        s = cl_model_forward_backward(p.m, &mb, &p.acts[0], &ls, 0);
        vsum += ls;
    }
    if (!s) {
        R->val_loss = vsum / S->nval;
        params_io(p.m, R->params, 0);
        R->peak[0] = cl_device_peak_total(p.dev);
    }
    cl_device_free(p.dev, x);
    cl_device_free(p.dev, y);
    part_destroy(&p);
    return s;
}

/* ---- split: one rank per device ----------------------------------------- */
typedef struct {
    const setup *S;
    result *R;
    const result *ref;     /* the unsplit run with the same micro-batches */
    int param_diff[2];     /* per rank: parameters not equal to ref's */
} split_job;

/* One rank's step: forwards of every micro-batch, then backwards in
 * micro-batch order. Rank 0: units [0, cut); rank 1: [cut, nunits). */
static cl_status split_step(cl_comm *w, const setup *S, part *p, int M, float *x, int32_t *y, float **io, int step,
                            double *loss, double *tf, double *tb, double *t_end) {
    int r = cl_comm_rank(w), B = S->o.batch / M;
    const cl_unit *last0 = &S->desc->units[S->cut - 1];
    size_t bytes = (size_t)B * (size_t)last0->out_floats * sizeof(float);
    cl_request **req = calloc((size_t)M, sizeof *req);
    if (!req) return cl_error(CL_ERR_OOM, "no host memory for requests");
    fill_batch(S, step, x, y);
    cl_model_zero_grads(p->m);
    *loss = *tf = *tb = 0;
    cl_status s = cl_comm_barrier(w);
    double t0 = cl_now();
    /* all forwards */
    for (int i = 0; !s && i < M; i++) {
        cl_microbatch mb = micro(S, M, i, x, y);
        if (r == 1) s = cl_comm_recv(w, io[i], bytes, 0, 2 * i);
        if (s) break;
        double a = cl_now();
        s = cl_model_stage_forward(p->m, &mb, r == 0 ? mb.x : io[i], &p->acts[i]);
        *tf += cl_now() - a;
        if (s) break;
        if (r == 0) s = cl_comm_isend(w, cl_acts_output_mb(p->m, &p->acts[i], S->cut - 1, &mb), bytes, 1, 2 * i, &req[i]);
        else *loss += cl_acts_loss_sum(p->m, &p->acts[i], S->desc->nunits - 1, &mb);
    }
    /* all backwards, in micro-batch order */
    for (int i = 0; !s && i < M; i++) {
        cl_microbatch mb = micro(S, M, i, x, y);
        if (r == 0) {
            s = cl_comm_recv(w, io[0], bytes, 1, 2 * i + 1);
            if (s) break;
            double a = cl_now();
            s = cl_model_stage_backward(p->m, &mb, mb.x, &p->acts[i], io[0], NULL, CL_BWD_ALL, NULL, NULL, NULL);
            *tb += cl_now() - a;
        } else {
            float *din = io[M + i]; /* its own buffer: the send is pending until rank 0 takes it */
            double a = cl_now();
            s = cl_model_stage_backward(p->m, &mb, io[i], &p->acts[i], NULL, din, CL_BWD_ALL, NULL, NULL, NULL);
            *tb += cl_now() - a;
            if (!s) s = cl_comm_isend(w, din, bytes, 0, 2 * i + 1, &req[i]);
        }
    }
    *t_end = cl_now() - t0;
    for (int i = 0; i < M; i++) { /* every request is waited on, after an error too */
        cl_status ws = cl_comm_wait(w, req[i]);
        if (!s) s = ws;
    }
    free(req);
    return s;
}

static cl_status split_rank(cl_comm *w, void *arg) {
    split_job *J = arg;
    const setup *S = J->S;
    result *R = J->R;
    cl_set_threads(1);
    int r = cl_comm_rank(w), M = R->M, B = S->o.batch / M;
    int u0 = r == 0 ? 0 : S->cut, u1 = r == 0 ? S->cut : S->desc->nunits;
    part p;
    CL_TRY(part_create(&p, S, r, u0, u1, B, M));
    if (r == 1 && S->o.perturb) cl_model_param(p.m, S->desc->units[S->cut].first_param)[0] += 1e-3f;
    /* rank 0: input images and one gradient buffer; rank 1: labels, M received
     * activations and M input gradients being sent */
    int nio = r == 0 ? 1 : 2 * M;
    size_t io_floats = (size_t)B * (size_t)S->desc->units[S->cut - 1].out_floats;
    float *x = NULL, **io = calloc((size_t)nio, sizeof *io);
    int32_t *y = NULL;
    double *sq = calloc((size_t)S->desc->nparams, sizeof *sq);
    cl_status s = io && sq ? CL_OK : cl_error(CL_ERR_OOM, "no host memory for rank %d's tables", r);
    if (!s && r == 0) s = cl_device_alloc_f32(p.dev, CL_MEM_WORKSPACE, (size_t)S->o.batch * (size_t)S->digits.pixels, &x);
    if (!s && r == 1) s = cl_device_alloc(p.dev, CL_MEM_WORKSPACE, (size_t)S->o.batch * sizeof *y, (void **)&y);
    for (int i = 0; !s && i < nio; i++) s = cl_device_alloc_f32(p.dev, CL_MEM_COMM, io_floats, &io[i]);
    for (int step = 0; !s && step < S->o.steps; step++) {
        double loss = 0, tf = 0, tb = 0, t_end = 0;
        s = split_step(w, S, &p, M, x, y, io, step, &loss, &tf, &tb, &t_end);
        /* the step's window ends when the later rank finishes its work */
        if (!s) s = cl_comm_allreduce(w, &t_end, 1, CL_F64, CL_RED_MAX);
        /* the global norm: per-parameter pieces, zero where not owned, added across ranks */
        memset(sq, 0, (size_t)S->desc->nparams * sizeof *sq);
        if (!s) cl_grad_sumsq(p.m, sq);
        if (!s) s = cl_comm_allreduce(w, sq, (size_t)S->desc->nparams, CL_F64, CL_RED_SUM);
        double norm = s ? 0 : cl_grad_norm_of(sq, S->desc->nparams);
        if (!s) s = clip_and_step(&p, S, step, norm);
        if (s) break;
        if (r == 1) {
            R->loss[step] = loss / S->o.batch;
            R->norm[step] = norm;
        }
        if (step > 0 || S->o.steps == 1) {
            R->fwd[r] += 1e3 * tf;
            R->bwd[r] += 1e3 * tb;
            R->idle[r] += 1e3 * (t_end - tf - tb);
            if (r == 0) {
                R->window += 1e3 * t_end;
                R->timed++;
            }
        }
    }
    /* validation: chunks of B images through both parts */
    double vsum = 0;
    for (int k = 0; !s && k < S->nval; k += B) {
        int n = S->nval - k < B ? S->nval - k : B;
        cl_microbatch mb = {.B = n, .T = 1, .x = x, .targets = y};
        size_t bytes = (size_t)n * (size_t)S->desc->units[S->cut - 1].out_floats * sizeof(float);
        fill_val(S, k, n, x, y);
        if (r == 0) {
            s = cl_model_stage_forward(p.m, &mb, x, &p.acts[0]);
            if (!s) s = cl_comm_send(w, cl_acts_output_mb(p.m, &p.acts[0], S->cut - 1, &mb), bytes, 1, EVAL_TAG);
        } else {
            s = cl_comm_recv(w, io[0], bytes, 0, EVAL_TAG);
            if (!s) s = cl_model_stage_forward(p.m, &mb, io[0], &p.acts[0]);
            if (!s) vsum += cl_acts_loss_sum(p.m, &p.acts[0], S->desc->nunits - 1, &mb);
        }
    }
    if (!s) {
        if (r == 1) R->val_loss = vsum / S->nval;
        J->param_diff[r] = params_io(p.m, J->ref->params, 1);
        R->peak[r] = cl_device_peak_total(p.dev);
    }
    for (int i = 0; io && i < nio; i++) cl_device_free(p.dev, io[i]);
    free(io);
    free(sq);
    cl_device_free(p.dev, x);
    cl_device_free(p.dev, y);
    part_destroy(&p);
    return s;
}

/* ---- printing and checks ------------------------------------------------- */
static void print_losses(const setup *S, const result *R) {
    for (int k = 0; k < S->o.steps; k++)
        if ((k + 1) % S->o.log_every == 0 || k == 0 || k == S->o.steps - 1)
            printf("  step %4d  loss %.17g  grad norm %.17g\n", k + 1, R->loss[k], R->norm[k]);
    printf("  validation loss %.17g\n", R->val_loss);
}

static double max_abs_diff(const double *a, const double *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (d > m || isnan(d)) m = d;
    }
    return m;
}

/* Prints the comparison of a split run with its unsplit reference; returns 1 if they differ. */
static int compare(const setup *S, const result *R, const result *ref, const split_job *J) {
    int n = S->o.steps;
    double dl = max_abs_diff(R->loss, ref->loss, n), dn = max_abs_diff(R->norm, ref->norm, n);
    int loss_eq = !memcmp(R->loss, ref->loss, (size_t)n * sizeof(double));
    int norm_eq = !memcmp(R->norm, ref->norm, (size_t)n * sizeof(double));
    int val_eq = !memcmp(&R->val_loss, &ref->val_loss, sizeof(double));
    int pd = J->param_diff[0] + J->param_diff[1];
    printf("  max |loss difference| vs unsplit: %.17g\n", dl);
    printf("  max |grad norm difference| vs unsplit: %.17g\n", dn);
    printf("  bitwise equal to unsplit (M=%d): losses %s, grad norms %s, validation loss %s, final parameters %s (%d of %d differ)\n",
           ref->M, loss_eq ? "yes" : "NO", norm_eq ? "yes" : "NO", val_eq ? "yes" : "NO", pd ? "NO" : "yes", pd,
           S->desc->nparams);
    return !(loss_eq && norm_eq && val_eq && pd == 0);
}

/* Mean idle fraction of both ranks over the timed steps. */
static double idle_fraction(const result *R) { return R->window > 0 ? (R->idle[0] + R->idle[1]) / (2 * R->window) : 0; }

/* Measured busy and idle time per rank, and beside them what the schedule
 * simulator gives for GPipe on 2 stages with the measured mean forward and
 * backward time of a micro-batch on each (messages cost nothing there). */
static void print_idle(const result *R) {
    int n = R->timed > 0 ? R->timed : 1;
    for (int r = 0; r < 2; r++)
        printf("  rank %d (device %d): busy %.3f ms/step (forward %.3f, backward %.3f), idle %.3f ms/step, idle fraction %.3f\n",
               r, r, (R->fwd[r] + R->bwd[r]) / n, R->fwd[r] / n, R->bwd[r] / n, R->idle[r] / n,
               R->window > 0 ? R->idle[r] / R->window : 0);
    printf("  idle fraction, both ranks: %.3f (step window %.3f ms, mean of %d steps after the first)\n", idle_fraction(R),
           R->window / n, R->timed);
    double f[2], b[2];
    for (int r = 0; r < 2; r++) {
        f[r] = R->fwd[r] / ((double)n * R->M);
        b[r] = R->bwd[r] / ((double)n * R->M);
    }
    cl_schedule sc;
    cl_sim_result sim;
    cl_sched_costs costs = {.f = f, .b = b};
    if (cl_schedule_make(CL_SCHED_GPIPE, 2, R->M, 1, &sc) == CL_OK) {
        if (cl_schedule_simulate(&sc, &costs, &sim) == CL_OK) {
            printf("  simulated GPipe with these stage times, free messages: idle fraction rank 0 %.3f, rank 1 %.3f, both %.3f "
                   "(equal stages: 1/(M+1) = %.3f)\n",
                   sim.bubble[0], sim.bubble[1], sim.bubble_total, 1.0 / (R->M + 1));
            cl_sim_result_free(&sim);
        }
        cl_schedule_free(&sc);
    }
}

static void print_peaks(const result *R, int split) {
    char a[32], b[32];
    if (split)
        printf("  peak memory: device 0 %s, device 1 %s\n", cl_format_bytes(R->peak[0], a, sizeof a),
               cl_format_bytes(R->peak[1], b, sizeof b));
    else
        printf("  peak memory: device 0 %s\n", cl_format_bytes(R->peak[0], a, sizeof a));
}

/* ---- flags --------------------------------------------------------------- */
static int usage(const char *msg) {
    if (msg) fprintf(stderr, "two_device_cnn: %s\n", msg);
    fprintf(msg ? stderr : stdout,
            "usage: two_device_cnn [--steps N] [--micro-batches M] [--batch B] [--data FILE] [--lr X]\n"
            "                      [--grad-clip X] [--seed S] [--device-memory SIZE] [--log-every K] [--perturb]\n"
            "  --steps N           training steps per run (default 60)\n"
            "  --micro-batches M   micro-batches per step in mode 2 (default 4; must divide --batch)\n"
            "  --batch B           samples per step (default 64, at most %d)\n"
            "  --data FILE         digits csv or csv.gz (default data/digits.csv.gz)\n"
            "  --lr X              peak learning rate (default 3e-3; 10%% warm-up, cosine to lr/10)\n"
            "  --grad-clip X       global-norm clip, 0 = off (default 0.5)\n"
            "  --seed S            parameter init and sample order (default 1)\n"
            "  --device-memory S   cap of each device (default 4MiB)\n"
            "  --log-every K       print the loss every K steps (default 10)\n"
            "  --perturb           (for tests) add 1e-3 to one fc1 weight on device 1 before training:\n"
            "                      the split runs then differ from the unsplit ones and the exit status is 3\n",
            MAX_BATCH);
    return 2;
}

static int parse_int(const char *flag, const char *v, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "two_device_cnn: %s needs a whole number from %ld to %ld (got '%s')\n", flag, lo, hi, v ? v : "");
        return 0;
    }
    *out = (int)x;
    return 1;
}

static int parse_float(const char *flag, const char *v, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || !*v || *end || errno || !(x >= lo && x <= hi)) {
        fprintf(stderr, "two_device_cnn: %s needs a number from %g to %g (got '%s')\n", flag, lo, hi, v ? v : "");
        return 0;
    }
    *out = (float)x;
    return 1;
}

static int parse_flags(int argc, char **argv, options *o) {
    *o = (options){.steps = 60, .micro = 4, .batch = 64, .log_every = 10, .lr = 3e-3f, .grad_clip = 0.5f, .seed = 1,
                   .cap = 4u << 20, .data = "data/digits.csv.gz"};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return usage(NULL), -1;
        if (strncmp(f, "--", 2)) {
            char m[256];
            snprintf(m, sizeof m, "unexpected argument '%s' (flags start with --; see --help)", f);
            return usage(m);
        }
        if (!strcmp(f, "--perturb")) { /* the one flag without a value */
            o->perturb = 1;
            continue;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        int seed = 0, ok = 1;
        if (!strcmp(f, "--steps")) ok = parse_int(f, v, 1, 1000000, &o->steps);
        else if (!strcmp(f, "--micro-batches")) ok = parse_int(f, v, 1, MAX_BATCH, &o->micro);
        else if (!strcmp(f, "--batch")) ok = parse_int(f, v, 1, MAX_BATCH, &o->batch);
        else if (!strcmp(f, "--log-every")) ok = parse_int(f, v, 1, 1000000, &o->log_every);
        else if (!strcmp(f, "--lr")) ok = parse_float(f, v, 1e-8, 10, &o->lr);
        else if (!strcmp(f, "--grad-clip")) ok = parse_float(f, v, 0, 1e6, &o->grad_clip);
        else if (!strcmp(f, "--seed")) {
            ok = parse_int(f, v, 0, 2147483647, &seed);
            o->seed = (uint64_t)seed;
        } else if (!strcmp(f, "--data")) {
            if (!v || !*v) ok = 0, fprintf(stderr, "two_device_cnn: --data needs a file name\n");
            else o->data = v;
        } else if (!strcmp(f, "--device-memory")) {
            if (!v || cl_parse_bytes(v, &o->cap)) {
                fprintf(stderr, "two_device_cnn: --device-memory: %s\n", v ? cl_last_error() : "needs a size, e.g. 4MiB");
                ok = 0;
            }
        } else {
            char m[256];
            snprintf(m, sizeof m, "unknown flag '%s' (see --help)", f);
            return usage(m);
        }
        if (!ok) return 2;
    }
    if (o->batch % o->micro) {
        fprintf(stderr, "two_device_cnn: --micro-batches %d must divide --batch %d\n", o->micro, o->batch);
        return 2;
    }
    return 0;
}

/* ---- setup --------------------------------------------------------------- */
static int setup_create(setup *S) {
    cl_model_config cfg;
    if (cl_model_preset("cnn", &cfg) || cl_model_describe(&cfg, 0, &S->desc)) {
        fprintf(stderr, "two_device_cnn: %s\n", cl_last_error());
        return 1;
    }
    const cl_model_desc *d = S->desc;
    S->cut = -1;
    for (int u = 0; u < d->nunits; u++)
        if (d->units[u].kind == CL_UNIT_FLATTEN) S->cut = u + 1;
    if (S->cut < 1 || S->cut >= d->nunits) {
        fprintf(stderr, "two_device_cnn: the cnn preset has no flatten unit to cut after\n");
        return 1;
    }
    /* The convolution part's output must be the classifier's input, float for float. */
    const cl_unit *out = &d->units[S->cut - 1], *in = &d->units[S->cut], *pool = &d->units[S->cut - 2];
    if (in->kind != CL_UNIT_LINEAR || out->out_floats != in->in_floats || pool->oc * pool->oh * pool->ow != in->c) {
        fprintf(stderr, "two_device_cnn: the convolution part gives %lld floats per sample but %s takes %lld\n",
                (long long)out->out_floats, in->label, (long long)in->in_floats);
        return 1;
    }
    if (cl_digits_load(S->o.data, &S->digits)) {
        fprintf(stderr, "two_device_cnn: %s\n", cl_last_error());
        return 2;
    }
    if (d->units[0].in_floats != S->digits.pixels) {
        fprintf(stderr, "two_device_cnn: %s: the images have %d pixels but the model takes %lld inputs\n", S->o.data, S->digits.pixels,
                (long long)d->units[0].in_floats);
        cl_digits_free(&S->digits);
        return 2;
    }
    S->nval = S->digits.n / 6;
    S->ntrain = S->digits.n - S->nval;
    if (S->nval < 1 || S->ntrain < 1) {
        fprintf(stderr, "two_device_cnn: %s has too few images (%d)\n", S->o.data, S->digits.n);
        return 2;
    }
    if (!(S->perm = malloc((size_t)S->ntrain * sizeof *S->perm))) {
        fprintf(stderr, "two_device_cnn: no memory for the sample order\n");
        return 1;
    }
    cl_rng g;
    cl_rng_seed(&g, S->o.seed ^ 0xd161u);
    for (int i = 0; i < S->ntrain; i++) S->perm[i] = i;
    for (int i = S->ntrain - 1; i > 0; i--) {
        int j = (int)(cl_rng_u64(&g) % (uint64_t)(i + 1)), t = S->perm[i];
        S->perm[i] = S->perm[j];
        S->perm[j] = t;
    }
    S->lr = (cl_lr_schedule){.lr = S->o.lr, .min_lr = S->o.lr / 10, .warmup = S->o.steps / 10, .steps = S->o.steps};
    S->adamw = (cl_adamw_opts){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = S->o.grad_clip};
    return 0;
}

static void describe(const setup *S) {
    const cl_model_desc *d = S->desc;
    printf("cnn preset: %d units, %lld parameters\n", d->nunits, (long long)d->nparams_total);
    for (int r = 0; r < 2; r++) {
        int u0 = r == 0 ? 0 : S->cut, u1 = r == 0 ? S->cut : d->nunits;
        int64_t np = 0;
        for (int i = 0; i < d->nparams; i++)
            if (d->params[i].unit >= u0 && d->params[i].unit < u1) np += d->params[i].numel;
        printf("  device %d (rank %d): units", r, r);
        for (int u = u0; u < u1; u++) printf(" %s", d->units[u].label);
        printf(" (%lld parameters)\n", (long long)np);
    }
    const cl_unit *pool = &d->units[S->cut - 2], *fc = &d->units[S->cut];
    printf("  cut: %s output [%d, %d, %d] = %lld floats per sample = %s input %lld\n", pool->label, pool->oc, pool->oh,
           pool->ow, (long long)d->units[S->cut - 1].out_floats, fc->label, (long long)fc->in_floats);
}

static int result_alloc(result *R, const setup *S, int M) {
    memset(R, 0, sizeof *R);
    R->M = M;
    R->loss = calloc((size_t)S->o.steps, sizeof *R->loss);
    R->norm = calloc((size_t)S->o.steps, sizeof *R->norm);
    R->params = calloc((size_t)S->desc->nfloats, sizeof *R->params);
    return R->loss && R->norm && R->params;
}

static void result_free(result *R) {
    free(R->loss);
    free(R->norm);
    free(R->params);
}

int main(int argc, char **argv) {
    setup S;
    memset(&S, 0, sizeof S);
    int rc = parse_flags(argc, argv, &S.o);
    if (rc) return rc < 0 ? 0 : rc;
    if ((rc = setup_create(&S))) goto done;
    cl_set_threads(1); /* the unsplit runs use this thread; each rank sets its own */
    describe(&S);
    int Ms[2] = {1, S.o.micro};
    result ref[2], split[2];
    int have = 0, differ = 0;
    for (have = 0; have < 2; have++)
        if (!result_alloc(&ref[have], &S, Ms[have]) || !result_alloc(&split[have], &S, Ms[have])) {
            fprintf(stderr, "two_device_cnn: no host memory for results\n");
            result_free(&ref[have]);
            result_free(&split[have]);
            rc = 1;
            goto free_results;
        }
    cl_launch_opts lo = {.timeout_s = 60};
    for (int k = 0; k < 2; k++) {
        int M = Ms[k], B = S.o.batch / M;
        printf("\nunsplit, one device, %d micro-batch%s of %d (reference)\n", M, M == 1 ? "" : "es", B);
        if (run_unsplit(&S, &ref[k])) {
            fprintf(stderr, "two_device_cnn: unsplit run: %s\n", cl_last_error());
            rc = 1;
            goto free_results;
        }
        print_losses(&S, &ref[k]);
        print_peaks(&ref[k], 0);
        if (k == 0) printf("\nmode 1: split over two devices, the whole batch of %d as one micro-batch\n", B);
        else printf("\nmode 2: split over two devices, pipelined (GPipe): %d micro-batches of %d\n", M, B);
        split_job J = {.S = &S, .R = &split[k], .ref = &ref[k]};
        if (cl_launch_threads(2, split_rank, &J, &lo)) {
            fprintf(stderr, "two_device_cnn: split run: %s\n", cl_last_error());
            rc = 1;
            goto free_results;
        }
        print_losses(&S, &split[k]);
        print_peaks(&split[k], 1);
        print_idle(&split[k]);
        differ |= compare(&S, &split[k], &ref[k], &J);
    }
    printf("\nmode 2 vs the 1-micro-batch reference (accumulating over micro-batches rounds differently; not expected to be bitwise): "
           "max |loss difference| %.3g\n",
           max_abs_diff(split[1].loss, ref[0].loss, S.o.steps));
    printf("idle fraction: mode 1 %.3f, mode 2 (M=%d) %.3f\n", idle_fraction(&split[0]), S.o.micro, idle_fraction(&split[1]));
    if (differ) {
        fprintf(stderr, "two_device_cnn: FAILED: a split run differs from its unsplit reference\n");
        rc = 3;
    } else {
        printf("split runs equal the unsplit runs bit for bit\n");
    }
free_results:
    for (int k = 0; k < have; k++) {
        result_free(&ref[k]);
        result_free(&split[k]);
    }
done:
    free(S.perm);
    cl_digits_free(&S.digits);
    cl_model_desc_free(S.desc);
    return rc;
}
