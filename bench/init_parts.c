/* The weights' initialization (cl_model_init) of one part of a model:
 * the whole model, tensor-parallel rank 0 of tp 2 and 4, and the first
 * pipeline stage of pp 2 and 4 (its share of the units).
 *
 *   init_parts [PRESET] [THREADS] [REPEAT]     (gpt2, 2 threads, 3 by default)
 *
 * Why: every part draws the whole model's stream of random numbers so that
 * each starts from the one model's weights, bit for bit; what a part does
 * with the draws it does not keep is the cost this shows. The time is the
 * fastest of REPEAT calls on one model (its memory touched once before),
 * with a hash of the part's weights to compare builds by. */
#include "cleave/device.h"
#include "cleave/kernels.h"
#include "cleave/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash_part(cl_model *m) {
    uint64_t h = 0xcbf29ce484222325ull;
    const float *p = cl_model_params(m);
    size_t n = (size_t)cl_model_sizes(m)->params;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, p + i, sizeof u);
        h = (h ^ u) * 0x100000001b3ull;
    }
    return h;
}

int main(int argc, char **argv) {
    const char *preset = argc > 1 ? argv[1] : "gpt2";
    int threads = argc > 2 ? atoi(argv[2]) : 2, repeat = argc > 3 ? atoi(argv[3]) : 3;
    cl_model_config cfg;
    if (threads < 1 || repeat < 1 || cl_model_preset(preset, &cfg) != CL_OK) {
        fprintf(stderr, "usage: init_parts [PRESET] [THREADS >= 1] [REPEAT >= 1]\n");
        return 2;
    }
    cl_set_threads(threads);
    cl_device *dev = NULL;
    if (cl_device_create_cpu(&dev, 0, 0) != CL_OK) {
        fprintf(stderr, "init_parts: %s\n", cl_last_error());
        return 1;
    }
    printf("cl_model_init of %s on %d thread(s), fastest of %d\n", preset, threads, repeat);
    printf("%-16s %14s %10s  %s\n", "part", "parameters", "ms", "hash of the part's weights");
    const struct { const char *name; int tp, pp; } parts[] = {{"whole", 1, 1}, {"tp 2, rank 0", 2, 1}, {"tp 4, rank 0", 4, 1},
                                                              {"pp 2, stage 0", 1, 2}, {"pp 4, stage 0", 1, 4}};
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        cl_tp_layout tl = {.tp = parts[k].tp, .rank = 0};
        cl_model_desc *d = NULL;
        cl_model *m = NULL;
        if (cl_model_describe_tp(&cfg, 64, &tl, &d) != CL_OK) {
            fprintf(stderr, "init_parts: %s: %s\n", parts[k].name, cl_last_error());
            return 1;
        }
        int nu = d->nunits, u1 = parts[k].pp > 1 ? (nu + parts[k].pp - 1) / parts[k].pp : nu;
        if (cl_model_create_part(&m, d, dev, 1, 0, u1) != CL_OK) {
            fprintf(stderr, "init_parts: %s: %s\n", parts[k].name, cl_last_error());
            return 1;
        }
        double best = 1e30;
        for (int r = 0; r < repeat; r++) {
            double t0 = cl_now();
            cl_model_init(m, 1234);
            double t = cl_now() - t0;
            if (t < best) best = t;
        }
        printf("%-16s %14zu %10.1f  %016llx\n", parts[k].name, (size_t)cl_model_sizes(m)->params, best * 1e3,
               (unsigned long long)hash_part(m));
        cl_model_destroy(m);
        cl_model_desc_free(d);
    }
    cl_device_destroy(dev);
    return 0;
}
