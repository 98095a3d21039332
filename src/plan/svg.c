/* `cleave plan --svg`: one configuration drawn. Each pipeline rank's
 * memory as a bar by category (the fullest of the dp x cp x tp ranks that share
 * that pipeline rank), and below it the simulated step through the pipeline
 * diagram's writer (src/pipeline/svg.h) with its communication. */
#include "plan/plan.h"

#include "pipeline/svg.h"

#include <stdio.h>
#include <string.h>

#define BAR_LEFT 90.0
#define BAR_RIGHT 170.0
#define BAR_H 18.0
#define BAR_PITCH 24.0

static const char *const cat_fill[CL_MEM_NCAT] = {"#4e79a7", "#59a14f", "#8e5ea2", "#f28e2b", "#76b7b2", "#e15759"};

static void gib(char *b, size_t n, double x) {
    cl_format_bytes(x > 0 ? (size_t)x : 0, b, n);
}

cl_status cl_plan_svg(const char *path, const cl_plan_query *q, const cl_plan_detail *d) {
    if (!path || !*path) return cl_error(CL_ERR_INVALID, "--svg: no output path given");
    cl_strbuf tl = {0}, b = {0};
    double tw, th;
    CL_TRY(cl_svg_timeline(&tl, &d->trace, 0, 1, &tw, &th));
    const cl_plan_cfg *c = &d->r.c;
    double width = tw > 900 ? tw : 900, bars = 110 + d->p * BAR_PITCH;
    double height = bars + th;
    double most = 0, cap = q->device_memory > 0 ? q->device_memory : q->hw.device_memory;
    for (int r = 0; r < d->p; r++) {
        double t = 0;
        for (int k = 0; k < CL_MEM_NCAT; k++) t += d->cat[r][k];
        if (t > most) most = t;
    }
    double scale_max = most > 0 ? most : 1;
    int draw_cap = cap > 0 && cap <= 1.5 * scale_max;
    if (draw_cap && cap > scale_max) scale_max = cap;
    double plot = width - BAR_LEFT - BAR_RIGHT, capb_x = BAR_LEFT + plot * cap / scale_max;
    char flags[256], capb[32], tot[32];
    cl_plan_cfg_flags(c, flags, sizeof flags);
    gib(capb, sizeof capb, cap);
    cl_svg_open(&b, width, height);
    cl_sb_printf(&b, "<text x=\"8\" y=\"20\" font-size=\"14\">");
    char title[512];
    snprintf(title, sizeof title, "%s on %d devices of %s, global batch %d x %d tokens: %s", q->model.name, q->devices, q->hw.name,
             q->global_batch, q->T, flags);
    cl_svg_escaped(&b, title);
    cl_sb_printf(&b, "</text>\n<text x=\"8\" y=\"38\">predicted step %.4g s, %.4g tokens/s, bubble %.3f, comm share %.3f; memory per "
                     "pipeline rank (its fullest of %d dp x cp x tp ranks), device memory %s</text>\n",
                 d->r.step_s, d->r.tokens_per_s, d->r.bubble, d->r.comm_share, c->dp * (c->cp > 1 ? c->cp : 1) * c->tp, capb);
    for (int r = 0; r < d->p; r++) {
        double y = 52 + r * BAR_PITCH, x = BAR_LEFT, t = 0;
        cl_sb_printf(&b, "<g class=\"membar\"><text x=\"8\" y=\"%.1f\">pp rank %d</text>\n", y + BAR_H / 2 + 4, r);
        for (int k = 0; k < CL_MEM_NCAT; k++) {
            double w = plot * d->cat[r][k] / scale_max;
            t += d->cat[r][k];
            if (!(w > 0)) continue;
            char v[32];
            gib(v, sizeof v, d->cat[r][k]);
            cl_sb_printf(&b, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"><title>pp rank %d %s: %s</title></rect>\n",
                         x, y, w, BAR_H, cat_fill[k], r, cl_mem_cat_name((cl_mem_cat)k), v);
            x += w;
        }
        gib(tot, sizeof tot, t);
        cl_sb_printf(&b, "<text x=\"%.2f\" y=\"%.1f\">%s</text></g>\n", x + 6, y + BAR_H / 2 + 4, tot);
    }
    double ly = 52 + d->p * BAR_PITCH + 6;
    if (draw_cap)
        cl_sb_printf(&b,
                     "<line x1=\"%.2f\" y1=\"48\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"black\" stroke-dasharray=\"4 3\"/>"
                     "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">device memory %s</text>\n",
                     capb_x, capb_x, ly - 4, capb_x, ly + 10, capb);
    double lx = BAR_LEFT;
    ly += draw_cap ? 16 : 0;
    for (int k = 0; k < CL_MEM_NCAT; k++) {
        cl_sb_printf(&b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx,
                     ly, cat_fill[k], lx + 16, ly + 10, cl_mem_cat_name((cl_mem_cat)k));
        lx += 110;
    }
    cl_sb_printf(&b, "<g class=\"timeline\" transform=\"translate(0,%.1f)\">\n%.*s</g>\n</svg>\n", bars, (int)tl.len, tl.buf);
    cl_status s = b.failed ? cl_error(CL_ERR_OOM, "%s: no host memory for the SVG text", path) : cl_write_file_atomic(path, b.buf, b.len, "SVG");
    cl_sb_free(&tl);
    cl_sb_free(&b);
    return s;
}
