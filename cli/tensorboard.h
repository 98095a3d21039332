/* cleave train --tensorboard DIR: the run's scalars as TensorBoard event
 * files (cli/tensorboard.c, on cleave/tfevents.h). */
#ifndef CLEAVE_CLI_TENSORBOARD_H
#define CLEAVE_CLI_TENSORBOARD_H

#include "cleave/comm.h"
#include "cleave/train.h"

typedef struct cli_tb cli_tb;

/* Before any rank starts: DIR is (or can be made) a directory that takes files. */
cl_status cli_tb_check(const char *dir);
/* Every rank of world (NULL: one process) after its trainer is made; world
 * rank 0 opens the event file, the others only take part in cli_tb_step. */
cl_status cli_tb_open(cli_tb **out, const char *dir, cl_comm *world, cl_trainer *t);
/* Every rank after each step (a collective over world: each rank's memory
 * peaks and bubble reach rank 0), which writes the step's event. */
cl_status cli_tb_step(cli_tb *tb, const cl_step_stats *st);
/* Rank 0: the validation loss evaluated after step. */
cl_status cli_tb_val(cli_tb *tb, int step, double val_loss);
/* Every rank; NULL: nothing. */
cl_status cli_tb_close(cli_tb *tb);

#endif
