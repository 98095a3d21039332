/* SVG drawing helpers shared by the pipeline diagram (trace.c), `cleave
 * plot` (cli/plot_cmd.c) and `cleave plan --svg` (src/plan/svg.c); internal
 * to cleave. */
#ifndef CLEAVE_PIPELINE_SVG_H
#define CLEAVE_PIPELINE_SVG_H

#include "cleave/json.h"
#include "cleave/trace.h"

/* A tick step of 1, 2 or 5 times a power of ten giving about 8 ticks over span (> 0). */
double cl_svg_nice_step(double span);
/* The XML declaration, the <svg> element (width x height, sans-serif 11)
 * and a white background; the caller closes it with "</svg>\n". */
void cl_svg_open(cl_strbuf *b, double width, double height);
/* s as XML character data or attribute text (&, <, >, " escaped; control characters dropped). */
void cl_svg_escaped(cl_strbuf *b, const char *s);
/* The pipeline diagram of one step of t (what cl_trace_render_svg draws, its
 * title, rows, boxes, axis and legend) appended to b as SVG elements from
 * (0, 0), without the document around them; its size in *width, *height.
 * comm: also draw, as a thin strip under each rank's boxes, the events that
 * take time and are not compute on the compute track: receives (waiting and
 * flight), GRAD_SYNC, OPT_STEP, and compute kinds on the comm track (the
 * collectives inside that pass; `cleave plan --svg`). Errors as
 * cl_trace_render_svg's (b may hold part of the text then). */
cl_status cl_svg_timeline(cl_strbuf *b, const cl_trace *t, int step, int comm, double *width, double *height);

#endif
