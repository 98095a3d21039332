/* SVG drawing helpers shared by the pipeline diagram (trace.c) and
 * `cleave plot` (cli/plot_cmd.c); internal to cleave. */
#ifndef CLEAVE_PIPELINE_SVG_H
#define CLEAVE_PIPELINE_SVG_H

#include "cleave/json.h"

/* A tick step of 1, 2 or 5 times a power of ten giving about 8 ticks over span (> 0). */
double cl_svg_nice_step(double span);
/* The XML declaration, the <svg> element (width x height, sans-serif 11)
 * and a white background; the caller closes it with "</svg>\n". */
void cl_svg_open(cl_strbuf *b, double width, double height);
/* s as XML character data or attribute text (&, <, >, " escaped; control characters dropped). */
void cl_svg_escaped(cl_strbuf *b, const char *s);

#endif
