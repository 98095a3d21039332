/* The trainer's state, shared by trainer.c and checkpoint.c only. */
#ifndef CLEAVE_TRAIN_INTERNAL_H
#define CLEAVE_TRAIN_INTERNAL_H

#include "cleave/comm.h"
#include "cleave/train.h"

struct cl_trainer {
    cl_train_config cfg;
    cl_model_desc *desc;
    cl_device *dev;
    cl_model *model;
    cl_acts acts;
    cl_optimizer opt;
    cl_tokenizer *tok;
    cl_tokens tokens;          /* whole corpus (GPT) */
    size_t ntrain, nval;       /* train = [0, ntrain), val = [ntrain, ntrain + nval) */
    cl_digits digits;          /* MLP/CNN */
    int *perm;                 /* digits: training order */
    int ndtrain, ndval;
    int32_t *mb_tokens, *mb_targets; /* device buffers for one micro-batch */
    float *mb_x;
    int step;
    int dp, dp_rank;           /* replicas and this one's index */
    int nbuckets;              /* gradient buckets, in backward order */
    int *bucket_unit;          /* the lowest unit of each bucket: launch after its backward */
    int64_t *bucket_lo, *bucket_hi; /* float range of the flat gradient buffer */
    cl_request **bucket_req;
    double step_flops_per_sample;
};

#endif
