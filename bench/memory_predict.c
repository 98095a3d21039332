/* How long the memory prediction takes (cl_memory_predict): gpt2-xl (48
 * blocks, 1600 channels) on a pipeline of 8 ranks, 64 micro-batches of 1,
 * under every schedule, the balanced partition under a 100 GiB cap. It runs
 * inside searches over configurations (refusal proposals now, the planner
 * later), so it must take milliseconds.
 *
 * usage: build/bench/memory_predict [REPEATS]   (default 20) */
#include "cleave/memory.h"
#include "cleave/schedule.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps < 1) {
        fprintf(stderr, "usage: memory_predict [REPEATS >= 1]\n");
        return 2;
    }
    cl_train_config c;
    cl_train_config_default(&c);
    if (cl_model_preset("gpt2-xl", &c.model)) {
        fprintf(stderr, "%s\n", cl_last_error());
        return 1;
    }
    c.micro_batch = 1;
    c.global_batch = 64;
    c.device_memory = (size_t)100 << 30;
    enum { PP = 8 };
    cl_mem_rank r[PP];
    printf("cl_memory_predict, gpt2-xl, pp %d, m %d, best of %d (ms):\n", PP, c.global_batch, reps);
    for (int k = CL_SCHED_GPIPE; k <= CL_SCHED_ZB_H1; k++) {
        c.schedule = k;
        c.virtual_stages = k == CL_SCHED_INTERLEAVED ? 2 : 0;
        double best = 1e9;
        for (int i = 0; i < reps; i++) {
            double t0 = cl_now();
            if (cl_memory_predict(&c, 1, PP, r)) {
                fprintf(stderr, "%s\n", cl_last_error());
                return 1;
            }
            double dt = cl_now() - t0;
            if (dt < best) best = dt;
        }
        size_t top = 0;
        for (int i = 0; i < PP; i++) top = r[i].total > top ? r[i].total : top;
        char b[32];
        printf("  %-12s %8.3f ms   fullest rank %s\n", cl_sched_kind_name((cl_sched_kind)k), best * 1e3, cl_format_bytes(top, b, sizeof b));
    }
    return 0;
}
