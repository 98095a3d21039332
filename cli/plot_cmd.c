/* `cleave plot`: training logs (cleave train --log-file, one JSON object per
 * line) drawn as one SVG chart, a line per run against the step, so runs can
 * be compared by eye. The loss chart adds each run's validation loss (dashed)
 * where the log has it. `cleave train --plot` draws its own run the same way
 * (cli_plot_text). A log's {"config": ...} line (the run's settings) is
 * skipped. Errors exit 2 with one line (cli_fail). */
#include "args.h"
#include "cleave/data.h"
#include "pipeline/svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const metrics[] = {"loss", "tokens_per_s", "grad_norm", "lr", "bubble", "peak_bytes"};
static const char *const metric_titles[] = {"loss", "tokens/s", "gradient norm", "learning rate", "pipeline bubble",
                                            "peak device memory (bytes)"};

/* One line of a chart: (step, value) points. */
typedef struct {
    double *x, *y;
    size_t n, cap;
} series;

typedef struct {
    const char *label;
    series main, val; /* the metric; validation loss (loss chart only) */
} plot_run;

static cl_status series_add(series *s, double x, double y) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, cap * sizeof *nx);
        if (nx) s->x = nx;
        double *ny = nx ? realloc(s->y, cap * sizeof *ny) : NULL;
        if (!ny) return cl_error(CL_ERR_OOM, "plot: no host memory for %zu points", cap);
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
    return CL_OK;
}

static void run_free(plot_run *r) {
    free(r->main.x);
    free(r->main.y);
    free(r->val.x);
    free(r->val.y);
}

/* The points of `metric` (and val_loss for loss) in a log's text; name is the
 * log's for messages. */
static cl_status parse_log(const char *name, const char *text, size_t len, int metric, plot_run *r) {
    size_t lines = 0;
    for (size_t at = 0, lineno = 1; at < len; lineno++) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        const char *line = text + at;
        size_t n = end - at;
        at = end + 1;
        while (n && (line[n - 1] == '\r' || line[n - 1] == ' ')) n--;
        if (!n) continue;
        lines++;
        cl_json_doc *doc;
        cl_status s = cl_json_parse(&doc, line, n);
        if (s) return cl_error_context(s, "%s:%zu: not a log line", name, lineno);
        const cl_json *root = cl_json_root(doc), *step = cl_json_get(root, "step");
        if (!step && cl_json_get(root, "config") && root->count == 1) { /* the run's configuration, a log's first line */
            cl_json_free(doc);
            continue;
        }
        const cl_json *v = cl_json_get(root, metrics[metric]), *vl = metric == 0 ? cl_json_get(root, "val_loss") : NULL;
        if (!step || step->type != CL_JSON_NUMBER || (v && v->type != CL_JSON_NUMBER) || (vl && vl->type != CL_JSON_NUMBER)) {
            cl_json_free(doc);
            return cl_error(CL_ERR_FORMAT, "%s:%zu: not a cleave log line (a number \"step\" and numbers for the figures)", name, lineno);
        }
        if (v) s = series_add(&r->main, step->number, v->number);
        if (!s && vl) s = series_add(&r->val, step->number, vl->number);
        cl_json_free(doc);
        if (s) return s;
    }
    if (!lines) return cl_error(CL_ERR_FORMAT, "%s: empty log (no JSON lines; write one with cleave train --log-file)", name);
    if (!r->main.n) return cl_error(CL_ERR_INVALID, "%s: no line logs \"%s\" (%zu lines)", name, metrics[metric], lines);
    return CL_OK;
}

static const char *const colours[] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#8e5ea2", "#76b7b2", "#edc948", "#9c755f"};

static void polyline(cl_strbuf *b, const series *s, int run, const char *cls, const char *dash, double x0, double xs, double y0,
                     double ys, double lo_x, double lo_y) {
    cl_sb_printf(b, "<polyline class=\"%s\" data-run=\"%d\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"", cls, run,
                 colours[run % 8], dash);
    for (size_t i = 0; i < s->n; i++)
        cl_sb_printf(b, "%s%.2f,%.2f", i ? " " : "", x0 + (s->x[i] - lo_x) * xs, y0 - (s->y[i] - lo_y) * ys);
    cl_sb_printf(b, "\"/>\n");
}

/* Draws the runs' metric against the step into path (written whole). */
static cl_status draw(const char *path, const plot_run *runs, int nruns, int metric) {
    double lx = INFINITY, hx = -INFINITY, ly = INFINITY, hy = -INFINITY;
    for (int r = 0; r < nruns; r++)
        for (int k = 0; k < 2; k++) {
            const series *s = k ? &runs[r].val : &runs[r].main;
            for (size_t i = 0; i < s->n; i++) {
                if (!isfinite(s->x[i]) || !isfinite(s->y[i]))
                    return cl_error(CL_ERR_FORMAT, "%s: step %g has a value that is not finite", runs[r].label, s->x[i]);
                lx = fmin(lx, s->x[i]), hx = fmax(hx, s->x[i]), ly = fmin(ly, s->y[i]), hy = fmax(hy, s->y[i]);
            }
        }
    if (hx <= lx) hx = lx + 1;
    if (hy <= ly) hy = ly + (ly ? fabs(ly) * 0.1 : 1), ly -= hy - ly;
    const double left = 80, top = 40, pw = 640, ph = 360, legend_w = 260;
    double width = left + pw + 20 + legend_w, height = top + ph + 60;
    double xs = pw / (hx - lx), ys = ph / (hy - ly), y0 = top + ph;
    cl_strbuf b = {0};
    cl_svg_open(&b, width, height);
    cl_sb_printf(&b, "<text x=\"%.0f\" y=\"24\" font-size=\"14\">%s against step, %d run%s</text>\n", left, metric_titles[metric], nruns,
                 nruns == 1 ? "" : "s");
    cl_sb_printf(&b, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"black\"/>\n", left, top, pw, ph);
    double tx = fmax(cl_svg_nice_step(hx - lx), 1), ty = cl_svg_nice_step(hy - ly);
    for (double v = ceil(lx / tx) * tx; v <= hx + tx * 1e-9; v += tx) {
        double x = left + (v - lx) * xs;
        cl_sb_printf(&b, "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"black\"/>", x, y0, x, y0 + 5);
        cl_sb_printf(&b, "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\">%g</text>\n", x, y0 + 18, v);
    }
    for (double v = ceil(ly / ty) * ty; v <= hy + ty * 1e-9; v += ty) {
        double y = y0 - (v - ly) * ys;
        cl_sb_printf(&b, "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#dddddd\"/>", left, y, left + pw, y);
        cl_sb_printf(&b, "<text x=\"%.0f\" y=\"%.2f\" text-anchor=\"end\">%.4g</text>\n", left - 6, y + 4, fabs(v) < ty * 1e-6 ? 0 : v);
    }
    cl_sb_printf(&b, "<text class=\"xlabel\" x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n", left + pw / 2, y0 + 40);
    cl_sb_printf(&b, "<text class=\"ylabel\" x=\"18\" y=\"%.0f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.0f)\">%s</text>\n",
                 top + ph / 2, top + ph / 2, metric_titles[metric]);
    double ly_at = top + 10;
    for (int r = 0; r < nruns; r++) {
        polyline(&b, &runs[r].main, r, "run", "", left, xs, y0, ys, lx, ly);
        if (runs[r].val.n) polyline(&b, &runs[r].val, r, "run val", " stroke-dasharray=\"5,3\"", left, xs, y0, ys, lx, ly);
        for (int k = 0; k < (runs[r].val.n ? 2 : 1); k++, ly_at += 18) {
            double x = left + pw + 20;
            cl_sb_printf(&b, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"1.5\"%s/>", x, ly_at, x + 24,
                         ly_at, colours[r % 8], k ? " stroke-dasharray=\"5,3\"" : "");
            cl_sb_printf(&b, "<text class=\"legend\" data-run=\"%d\" x=\"%.0f\" y=\"%.0f\">", r, x + 30, ly_at + 4);
            cl_svg_escaped(&b, runs[r].label);
            cl_sb_printf(&b, "%s</text>\n", k ? " (validation)" : "");
        }
    }
    cl_sb_printf(&b, "</svg>\n");
    cl_status s = b.failed ? cl_error(CL_ERR_OOM, "%s: no host memory for the SVG text", path) : cl_write_file_atomic(path, b.buf, b.len, "SVG");
    cl_sb_free(&b);
    return s;
}

static cl_status metric_index(const char *name, int *out) {
    for (int i = 0; i < NFLAGS(metrics); i++)
        if (!strcmp(name, metrics[i])) {
            *out = i;
            return CL_OK;
        }
    return cl_error(CL_ERR_INVALID, "--metric %s: unknown (loss, tokens_per_s, grad_norm, lr, bubble or peak_bytes)", name);
}

cl_status cli_plot_text(const char *path, const char *label, const char *text, size_t len) {
    plot_run r = {.label = label};
    cl_status s = parse_log(label, text, len, 0, &r);
    if (!s) s = draw(path, &r, 1, 0);
    run_free(&r);
    return s;
}

static const cli_flag plot_flags[] = {
    {"help", "h", 0, "show this help"},
    {"out", "o", 1, "SVG file to write (required)"},
    {"metric", "", 1, "the figure to draw: loss (default; with validation loss where logged), tokens_per_s, grad_norm, lr, bubble, peak_bytes"},
};

int cleave_cmd_plot(int argc, char **argv) {
    /* the logs come first, then the flags */
    int nlogs = 0;
    while (2 + nlogs < argc && argv[2 + nlogs][0] != '-') nlogs++;
    cli_args a;
    cl_status s = cli_parse(&a, plot_flags, NFLAGS(plot_flags), argc, argv, 2 + nlogs);
    if (s) return cli_fail(s);
    if (cli_get(&a, "help")) {
        cli_print_help("usage: cleave plot LOG.jsonl [LOG2.jsonl ...] --out F.svg [--metric M]\n\n"
                       "Draws training logs (cleave train --log-file) as one chart against the step, a line per\n"
                       "run labelled with its log's name, so runs can be compared by eye: the loss with each run's\n"
                       "validation loss dashed where it was logged, or another logged figure with --metric.",
                       plot_flags, NFLAGS(plot_flags));
        return 0;
    }
    const char *out = cli_get(&a, "out");
    int metric = 0;
    if (!nlogs) return cli_fail(cl_error(CL_ERR_INVALID, "cleave plot needs at least one LOG.jsonl (see --help)"));
    if (!out) return cli_fail(cl_error(CL_ERR_INVALID, "--out F.svg is required"));
    if (cli_get(&a, "metric") && (s = metric_index(cli_get(&a, "metric"), &metric))) return cli_fail(s);
    if ((s = cl_check_output_path(out, "--out"))) return cli_fail(s);
    plot_run *runs = calloc((size_t)nlogs, sizeof *runs);
    if (!runs) return cli_fail(cl_error(CL_ERR_OOM, "plot: no host memory"));
    for (int i = 0; i < nlogs && !s; i++) {
        char *text;
        size_t len;
        runs[i].label = argv[2 + i];
        if (!(s = cl_read_file(argv[2 + i], CL_FILE_LOG, &text, &len))) {
            s = parse_log(argv[2 + i], text, len, metric, &runs[i]);
            free(text);
        }
    }
    if (!s) s = draw(out, runs, nlogs, metric);
    for (int i = 0; i < nlogs; i++) run_free(&runs[i]);
    free(runs);
    if (s) return cli_fail(s);
    printf("plot: %s of %d run%s in %s\n", metrics[metric], nlogs, nlogs == 1 ? "" : "s", out);
    return 0;
}
