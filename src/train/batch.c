/* Data addressing: the micro-batch of global samples [k0, k0 + B), a
 * function of the sample index only, so every layout reads the same samples
 * (GPT: windows of the blended sources, logged with CLEAVE_DATA_LOG; MLP and
 * CNN: the digits in the trainer's shuffled order). Under context
 * parallelism a rank copies only its two chunks of each window (chunks
 * cp_rank and 2 cp - 1 - cp_rank of 2 cp), tokens and targets alike
 * (cl_cp_window_copy). The executor
 * (pipeline.c) fills its slots with it; apart from trainer.c, which calls
 * the executor, so that the executor does not call back. */
#include "cleave/train.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "train/internal.h"

void cl_cp_window_copy(cl_device *dev, int32_t *tokens, int32_t *targets, const int32_t *src, int T, int cp, int rank) {
    if (cp <= 1) {
        cl_device_copy_from_host(dev, tokens, src, (size_t)T * sizeof(int32_t));
        cl_device_copy_from_host(dev, targets, src + 1, (size_t)T * sizeof(int32_t));
        return;
    }
    int c = T / (2 * cp);
    for (int h = 0; h < 2; h++) {
        int64_t at = (int64_t)(h ? 2 * cp - 1 - rank : rank) * c;
        cl_device_copy_from_host(dev, tokens + (size_t)h * c, src + at, (size_t)c * sizeof(int32_t));
        cl_device_copy_from_host(dev, targets + (size_t)h * c, src + at + 1, (size_t)c * sizeof(int32_t));
    }
}

void cl_trainer_fill_batch(cl_trainer *t, int64_t k0, int B, int32_t *tokens, int32_t *targets, float *x, cl_microbatch *mb) {
    memset(mb, 0, sizeof *mb);
    mb->B = B;
    if (cl_model_family_of(&t->desc->cfg)->tokens) {
        int T = t->desc->T;
        int64_t gb = t->cfg.global_batch;
        cl_blend_mark(&t->ds.train, k0 / gb * gb); /* this step's samples are all at or after its first */
        for (int b = 0; b < B; b++) {
            int which;
            const int32_t *src = cl_dataset_train_window(&t->ds, k0 + b, t->win, &which);
            if (t->data_log) fprintf(t->data_log, "%" PRId64 " %d\n", k0 + b, which);
            cl_cp_window_copy(t->dev, tokens + (size_t)b * T, targets + (size_t)b * T, src, t->full->T, t->cp, t->cp_rank);
        }
        mb->T = T;
        mb->tokens = tokens;
    } else {
        for (int b = 0; b < B; b++) {
            int i = t->perm[(k0 + b) % t->ndtrain];
            size_t px = (size_t)t->digits.pixels;
            cl_device_copy_from_host(t->dev, x + (size_t)b * px, t->digits.images + (size_t)i * px, px * sizeof(float));
            cl_device_copy_from_host(t->dev, targets + b, &t->digits.labels[i], sizeof *targets);
        }
        mb->T = 1;
        mb->x = x;
    }
    mb->targets = targets;
}
