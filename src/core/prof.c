/* The per-operation step profile (prof.h). */
#include "cleave/prof.h"

#include <string.h>

_Thread_local cl_prof *cl_prof_current;

void cl_prof_begin(cl_prof *p) {
    if (p) memset(p, 0, sizeof *p);
    cl_prof_current = p;
}

void cl_prof_end(void) { cl_prof_current = NULL; }

void cl_prof_add(const char *name, double seconds, double flop) {
    cl_prof *p = cl_prof_current;
    if (!p) return;
    int i = 0;
    while (i < p->n && p->row[i].name != name && strcmp(p->row[i].name, name)) i++;
    if (i == p->n) {
        if (p->n == CL_PROF_ROWS) return; /* full: later labels go uncounted */
        p->row[p->n++].name = name;
    }
    p->row[i].seconds += seconds;
    p->row[i].flop += flop;
    p->row[i].calls++;
}
