/* Per-operation timing of a training step, for `cleave bench step`.
 *
 * Off by default and then free but for one thread-local load per operation.
 * cl_prof_begin(p) makes p this thread's table; every CL_PROF in the model
 * code run by this thread then adds its wall time and its FLOPs to the row
 * named by its label (a string literal: rows are keyed by the pointer, then
 * by the text). A table is one rank's; nothing is shared between threads. */
#ifndef CLEAVE_PROF_H
#define CLEAVE_PROF_H

#include "cleave/core.h"

enum { CL_PROF_ROWS = 64 };

typedef struct {
    const char *name;
    double seconds;
    double flop;
    int64_t calls;
} cl_prof_row;

typedef struct {
    cl_prof_row row[CL_PROF_ROWS];
    int n;
} cl_prof;

extern _Thread_local cl_prof *cl_prof_current;

/* Make p (cleared first) the table of this thread; NULL stops timing. */
void cl_prof_begin(cl_prof *p);
void cl_prof_end(void);
/* Add one call's time and FLOPs to the row `name` of this thread's table. */
void cl_prof_add(const char *name, double seconds, double flop);

/* Runs stmt; when a table is active, charges its wall time to name. */
#define CL_PROF(name, flop, stmt)                                    \
    do {                                                             \
        if (cl_prof_current) {                                       \
            double cl_prof_t0_ = cl_now();                           \
            stmt;                                                    \
            cl_prof_add(name, cl_now() - cl_prof_t0_, (double)(flop)); \
        } else {                                                     \
            stmt;                                                    \
        }                                                            \
    } while (0)

#endif
