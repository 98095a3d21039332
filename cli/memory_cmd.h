/* The memory table of `cleave memory` and `cleave train` (cli/memory_cmd.c). */
#ifndef CLEAVE_CLI_MEMORY_CMD_H
#define CLEAVE_CLI_MEMORY_CMD_H

#include <stdio.h>

#include "cleave/memory.h"

/* pred[n] as a table (or, json, one object per rank and line: rank, dp_rank,
 * tp_rank, pp_rank, stages, predicted{category: bytes, total, host}); measured,
 * when not NULL, holds n x CLI_MEM_COLS measured peaks (categories, the
 * total, then the host memory of offloaded optimizer state), printed beside
 * the prediction with the difference. The host column shows when some rank
 * offloads. cap > 0 (a --device-memory given): each rank's predicted total
 * against it, a "fits" column (JSON: "fits": true or false) and a last line
 * counting the ranks that fit. */
#define CLI_MEM_COLS (CL_MEM_NCAT + 3) /* the categories, the total, host, disk */
void cli_memory_print(FILE *f, const cl_mem_rank *pred, int n, const double *measured, int json, size_t cap);

#endif
