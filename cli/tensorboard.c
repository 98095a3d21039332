/* cleave train --tensorboard DIR: what the JSON-lines log says, where users
 * look. World rank 0 writes one event file (cleave/tfevents.h) with an Event
 * per step: loss/train, optimizer/lr, optimizer/grad_norm,
 * throughput/tokens_per_s (samples_per_s for MLP/CNN), throughput/step_ms,
 * each rank's peak device memory by category (memory/rank<r>/<category>,
 * memory/rank<r>/total, and memory/rank<r>/host with an offloaded
 * optimizer) and, in pipeline runs, the measured bubble (bubble/mean,
 * bubble/worst_rank, bubble/simulated, bubble/rank<r>); loss/validation in
 * an Event of its own at the step it was evaluated.
 *
 * Why one file: the per-rank figures reach rank 0 by one small all-reduce
 * over the world after each step (threads and MPI alike), so a run across
 * hosts still leaves its whole history in one directory, and TensorBoard
 * follows one growing file.
 *
 * Invariants: every rank calls cli_tb_step after every step, in the same
 * order relative to the world's other collectives; each Event is written
 * whole before the step's JSON line, so a crash loses at most that one; a
 * write that fails ends the run with a message naming the file and step,
 * as the log's does. */
#include "tensorboard.h"

#include "cleave/device.h"
#include "cleave/tfevents.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TB_COLS (CL_MEM_NCAT + 3) /* per rank: the categories' peaks, the total, host, the bubble */
#define TB_FIXED 5                /* loss, lr, grad norm, throughput, step time */
#define TB_BUBBLE 3               /* mean, worst rank, simulated */

struct cli_tb {
    cl_comm *world;
    cl_trainer *t;
    int n, rank, host;            /* ranks, this one, whether an offloaded optimizer's host memory is there */
    cl_tfevents *w;               /* rank 0 only */
    double *rows;                 /* n x TB_COLS */
    char (*tags)[48];             /* n x (CL_MEM_NCAT + 3): memory/rank<r>/<category>, total, host; bubble/rank<r> */
    cl_tfevents_scalar *v;        /* one step's values */
};

cl_status cli_tb_check(const char *dir) {
    return cl_tfevents_check_dir(dir, "--tensorboard");
}

cl_status cli_tb_open(cli_tb **out, const char *dir, cl_comm *world, cl_trainer *t) {
    *out = NULL;
    cli_tb *tb = calloc(1, sizeof *tb);
    if (!tb) return cl_error(CL_ERR_OOM, "--tensorboard: no host memory");
    tb->world = world;
    tb->t = t;
    tb->n = world ? cl_comm_size(world) : 1;
    tb->rank = world ? cl_comm_rank(world) : 0;
    tb->host = cl_trainer_host(t) != NULL;
    size_t cells = (size_t)tb->n * TB_COLS;
    tb->rows = calloc(cells, sizeof *tb->rows);
    if (tb->rank == 0) {
        tb->tags = calloc(cells, sizeof *tb->tags);
        tb->v = calloc(TB_FIXED + TB_BUBBLE + cells, sizeof *tb->v);
    }
    if (!tb->rows || (tb->rank == 0 && (!tb->tags || !tb->v))) {
        cli_tb_close(tb);
        return cl_error(CL_ERR_OOM, "--tensorboard: no host memory for %d ranks' figures", tb->n);
    }
    for (int r = 0; tb->tags && r < tb->n; r++) {
        char (*row)[48] = tb->tags + (size_t)r * TB_COLS;
        for (int k = 0; k < CL_MEM_NCAT; k++) snprintf(row[k], sizeof row[k], "memory/rank%d/%s", r, cl_mem_cat_name((cl_mem_cat)k));
        snprintf(row[CL_MEM_NCAT], sizeof row[0], "memory/rank%d/total", r);
        snprintf(row[CL_MEM_NCAT + 1], sizeof row[0], "memory/rank%d/host", r);
        snprintf(row[CL_MEM_NCAT + 2], sizeof row[0], "bubble/rank%d", r);
    }
    cl_status s = tb->rank == 0 ? cl_tfevents_open(&tb->w, dir, NULL) : CL_OK;
    if (s) {
        cli_tb_close(tb);
        return cl_error_context(s, "--tensorboard %s", dir);
    }
    *out = tb;
    return CL_OK;
}

cl_status cli_tb_step(cli_tb *tb, const cl_step_stats *st) {
    double *mine = tb->rows + (size_t)tb->rank * TB_COLS;
    memset(tb->rows, 0, (size_t)tb->n * TB_COLS * sizeof *tb->rows);
    cl_device *dev = cl_trainer_device(tb->t);
    for (int k = 0; k < CL_MEM_NCAT; k++) mine[k] = (double)cl_device_peak(dev, (cl_mem_cat)k);
    mine[CL_MEM_NCAT] = (double)cl_device_peak_total(dev);
    if (tb->host) mine[CL_MEM_NCAT + 1] = (double)cl_device_peak_total(cl_trainer_host(tb->t));
    mine[CL_MEM_NCAT + 2] = st->bubble_rank;
    if (tb->world) CL_TRY(cl_comm_allreduce(tb->world, tb->rows, (size_t)tb->n * TB_COLS, CL_F64, CL_RED_SUM));
    if (tb->rank != 0) return CL_OK;
    int gpt = cl_model_family_of(&cl_trainer_config(tb->t)->model)->tokens, pipeline = st->bubble > 0 || st->bubble_sim > 0, n = 0;
    cl_tfevents_scalar *v = tb->v;
    v[n++] = (cl_tfevents_scalar){"loss/train", (float)st->loss};
    v[n++] = (cl_tfevents_scalar){"optimizer/lr", st->lr};
    v[n++] = (cl_tfevents_scalar){"optimizer/grad_norm", (float)st->grad_norm};
    v[n++] = (cl_tfevents_scalar){gpt ? "throughput/tokens_per_s" : "throughput/samples_per_s", (float)st->tokens_per_s};
    v[n++] = (cl_tfevents_scalar){"throughput/step_ms", (float)(st->seconds * 1e3)};
    if (pipeline) {
        v[n++] = (cl_tfevents_scalar){"bubble/mean", (float)st->bubble};
        v[n++] = (cl_tfevents_scalar){"bubble/worst_rank", (float)st->bubble_max};
        v[n++] = (cl_tfevents_scalar){"bubble/simulated", (float)st->bubble_sim};
    }
    for (int r = 0; r < tb->n; r++) {
        const double *row = tb->rows + (size_t)r * TB_COLS;
        for (int k = 0; k < TB_COLS; k++) {
            if ((k == CL_MEM_NCAT + 1 && !tb->host) || (k == CL_MEM_NCAT + 2 && !pipeline)) continue;
            v[n++] = (cl_tfevents_scalar){tb->tags[(size_t)r * TB_COLS + k], (float)row[k]};
        }
    }
    cl_status s = cl_tfevents_write(tb->w, st->step, v, n);
    return s ? cl_error_context(s, "--tensorboard") : CL_OK;
}

cl_status cli_tb_val(cli_tb *tb, int step, double val_loss) {
    cl_tfevents_scalar v = {"loss/validation", (float)val_loss};
    cl_status s = cl_tfevents_write(tb->w, step, &v, 1);
    return s ? cl_error_context(s, "--tensorboard") : CL_OK;
}

cl_status cli_tb_close(cli_tb *tb) {
    if (!tb) return CL_OK;
    cl_status s = cl_tfevents_close(tb->w);
    free(tb->rows);
    free(tb->tags);
    free(tb->v);
    free(tb);
    return s ? cl_error_context(s, "--tensorboard") : CL_OK;
}
