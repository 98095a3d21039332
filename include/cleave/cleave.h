/* cleave: train neural networks split across ranks (threads in one process
 * or MPI processes), on devices whose memory is capped and accounted.
 *
 * A worked example (the lines between the markers are a whole program: `make`
 * builds it from here as build/examples/quickstart, beside examples/, and
 * the install test builds it against the installed files): describe
 * gpt2-tiny, create a device with a cap, the model and an optimizer on it,
 * and run training steps on one batch of text.
 *
 * ---- example begin ----
// quickstart.c: train gpt2-tiny on one device under a memory cap: describe the model,
// create a capped device, the model and AdamW on it, and run training
// steps on one batch of text until its loss falls.
//   cc quickstart.c $(pkg-config --cflags --libs cleave) -o quickstart
#include <stdio.h>
#include <string.h>

#include <cleave/cleave.h>

enum { B = 2, T = 32, STEPS = 10 };

int main(void) {
    const char *text = "In the beginning God created the heaven and the earth. And the earth was without form, "
                       "and void; and darkness was upon the face of the deep.";
    int32_t tokens[B * T], targets[B * T];
    for (int i = 0; i < B * T; i++) { // byte tokens; each position predicts the next byte
        tokens[i] = (unsigned char)text[i];
        targets[i] = (unsigned char)text[i + 1];
    }

    cl_model_config cfg;
    cl_model_desc *desc = NULL;
    cl_device *dev = NULL;
    cl_model *model = NULL;
    cl_acts acts;
    cl_optimizer opt;
    cl_adamw_opts adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1.0f};
    if (cl_model_preset("gpt2-tiny", &cfg) || cl_model_describe(&cfg, T, &desc)) goto fail; // 2 blocks, 64 channels
    if (cl_device_create_cpu(&dev, 8u << 20, 0)) goto fail;                           // allocations capped at 8 MiB
    if (cl_model_create(&model, desc, dev, B) || cl_acts_create(model, B, &acts)) goto fail;
    cl_model_init(model, 1337);
    if (cl_optimizer_create(&opt, model, &adamw)) goto fail;

    cl_microbatch mb = {.B = B, .T = T, .tokens = tokens, .targets = targets, .dloss = 1.0f / (B * T)};
    for (int step = 1; step <= STEPS; step++) { // one training step: gradients, clip, AdamW
        double loss_sum;
        cl_model_zero_grads(model);
        if (cl_model_forward_backward(model, &mb, &acts, &loss_sum, 1)) goto fail;
        double norm = cl_grad_norm(model);
        cl_grad_clip(model, norm, adamw.grad_clip);
        cl_optimizer_step(&opt, model, 1e-3f);
        printf("step %d: loss %.4f, grad norm %.3f\n", step, loss_sum / (B * T), norm);
    }
    printf("peak device memory: %zu bytes (cap %zu)\n", cl_device_peak_total(dev), cl_device_cap(dev));

    cl_optimizer_destroy(&opt, model);
    cl_acts_destroy(model, &acts);
    cl_model_destroy(model);
    cl_device_destroy(dev);
    cl_model_desc_free(desc);
    return 0;
fail:
    fprintf(stderr, "quickstart: %s\n", cl_last_error());
    return 1;
}
 * ---- example end ----
 *
 * This header includes the whole public API; each header below also stands
 * alone. Link the shared library with `pkg-config --cflags --libs cleave`;
 * libcleave.a with `pkg-config --static --cflags --libs cleave` where
 * -lcleave is spelt -l:libcleave.a (the static library's own needs, OpenMP,
 * oneDNN, MPI and zlib, are in --static). Every call that can fail returns a cl_status
 * (core.h); on failure cl_last_error() is a one-line message saying why.
 *
 *   core.h         status codes, errors, byte sizes, RNG, whole-file writes
 *   device.h       devices with a memory cap, allocations by category
 *   tensor.h       non-owning tensor views
 *   model.h        model descriptions (GPT-2 family, MLP, CNN), a rank's part, forward/backward
 *   train.h        AdamW, learning-rate schedule, the trainer, checkpoints, generation
 *   data.h         tokenizers, token files, digits, cleave's data (cl_data_find)
 *   json.h         a strict JSON reader
 *   safetensors.h  safetensors files
 *   comm.h         communicators (threads, MPI) and launching ranks
 *   mesh.h         the dp x tp x pp mesh
 *   pipeline.h     pipeline stages and their predicted costs
 *   schedule.h     pipeline schedules and their simulator
 *   trace.h        pipeline timelines (Chrome traces, SVG diagrams) */
#ifndef CLEAVE_CLEAVE_H
#define CLEAVE_CLEAVE_H

#include "cleave/core.h"
#include "cleave/device.h"
#include "cleave/tensor.h"
#include "cleave/model.h"
#include "cleave/train.h"
#include "cleave/data.h"
#include "cleave/json.h"
#include "cleave/safetensors.h"
#include "cleave/tfevents.h"
#include "cleave/comm.h"
#include "cleave/mesh.h"
#include "cleave/pipeline.h"
#include "cleave/schedule.h"
#include "cleave/trace.h"
#include "cleave/memory.h"
#include "cleave/dp.h"
#include "cleave/tp.h"

#endif
