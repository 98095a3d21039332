/* The memory table of `cleave memory` and `cleave train` (cli/memory_cmd.c). */
#ifndef CLEAVE_CLI_MEMORY_CMD_H
#define CLEAVE_CLI_MEMORY_CMD_H

#include <stdio.h>

#include "cleave/memory.h"

/* pred[n] as a table (or, json, one object per rank and line: rank, dp_rank,
 * pp_rank, stages, predicted{category: bytes, total}); measured, when not
 * NULL, holds n x (CL_MEM_NCAT + 1) measured peaks (categories, then the
 * total), printed beside the prediction with the difference. */
void cli_memory_print(FILE *f, const cl_mem_rank *pred, int n, const double *measured, int json);

#endif
