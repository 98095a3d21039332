/* `cleave train --auto` and the out-of-memory refusal's nearest fitting
 * configurations (cli/auto.c), both from the planner (src/plan/). */
#ifndef CLEAVE_CLI_AUTO_H
#define CLEAVE_CLI_AUTO_H

#include <stdio.h>

#include "args.h"
#include "cleave/comm.h"
#include "cleave/train.h"

/* --auto: plans the run c describes for this machine and sets c's micro-batch,
 * tp, sequence parallelism, schedule, virtual stages, ZeRO stage and
 * recompute, *dp, *tp, *pp (0 on entry: searched) and *ranks (0 on entry:
 * one per core) to the fastest configuration that fits, printing the choice
 * on f. The flags a gives for those dimensions fix them. */
cl_status cli_train_auto(FILE *f, const cli_args *a, cl_train_config *c, int gb_given, int *ranks, int *dp, int *tp, int *pp,
                         int *schedule_given);
/* --auto under MPI, collective over world, before the trainer is created:
 * world rank 0 alone plans for the world's size (its description, printing
 * the choice on f) and broadcasts the outcome; every rank then applies the
 * configuration as cli_train_auto does (dp, tp, pp: 0 on entry searched),
 * so all run the same one whatever description each host has. Without
 * --device-memory the cap planned for is the smallest of the ranks' shares
 * of their hosts' available memory. A failed plan fails every rank alike
 * (cl_comm_fail_together) with rank 0's message. */
cl_status cli_train_auto_mpi(cl_comm *world, FILE *f, const cli_args *a, cl_train_config *c, int gb_given, int *dp, int *tp, int *pp,
                             int *schedule_given);
/* After a refusal of c on dp x tp x pp ranks (cl_memory_check): the planner's
 * fitting configurations of as many ranks nearest to it (fewest flags
 * changed, then fastest), a few lines on f, or a line saying none fits. */
void cli_plan_nearest(FILE *f, const cl_train_config *c, int dp, int tp, int pp);

#endif
