/* The machine measurements of `cleave bench peak` (cli/bench_cmd.c), shared
 * with `cleave plan calibrate`. */
#ifndef CLEAVE_CLI_BENCH_H
#define CLEAVE_CLI_BENCH_H

#include <stddef.h>

/* "avx512", "avx2", or NULL when the CPU has neither (no peak loop). */
const char *cli_bench_isa(void);
/* FP32 FMA peak in GFLOP/s on `threads` threads at once, best of repeat. */
double cli_bench_peak(int threads, int repeat);
/* memcpy of `bytes` in GB/s (read + write), best of repeat; *read_gbs: a read pass. */
double cli_bench_copy(size_t bytes, int repeat, double *read_gbs);

#endif
