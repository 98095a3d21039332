/* The smallest use of libcleave: train the textbook CNN on the 8x8 digits
 * with the trainer API, on one device with a memory cap, and report the
 * validation loss before and after.
 *
 *   make && ./build/examples/train_digits [data/digits.csv.gz]
 *
 * Every call returns a cl_status; on failure cl_last_error() says why. */
#include <stdio.h>

#include "cleave/train.h"

int main(int argc, char **argv) {
    cl_train_config c;
    cl_train_config_default(&c);
    cl_model_preset("cnn", &c.model);  /* conv -> relu -> pool -> flatten -> fc1 | fc2 -> relu -> fc3 */
    c.data = argc > 1 ? argv[1] : "data/digits.csv.gz";
    c.micro_batch = 32;
    c.global_batch = 64;                /* two micro-batches accumulate per step */
    c.steps = c.lr.steps = 100;
    c.lr.lr = 3e-3f;
    c.lr.min_lr = 3e-4f;
    c.lr.warmup = 10;
    c.device_memory = 16u << 20;        /* 16 MiB is plenty for this model */

    cl_trainer *t;
    double before, after;
    if (cl_trainer_create(&t, &c) || cl_trainer_eval(t, &before)) goto fail;
    for (int k = 0; k < c.steps; k++)
        if (cl_trainer_step(t, NULL)) goto fail;
    if (cl_trainer_eval(t, &after)) goto fail;
    printf("cnn on digits: validation loss %.4f -> %.4f in %d steps, peak device memory %zu bytes\n", before, after, c.steps,
           cl_device_peak_total(cl_trainer_device(t)));
    cl_trainer_destroy(t);
    return 0;
fail:
    fprintf(stderr, "train_digits: %s\n", cl_last_error());
    return 1;
}
