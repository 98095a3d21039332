/* Pipeline timelines (see cleave/trace.h): the event recorder, the Chrome
 * trace writer and reader, the measured bubble and the SVG diagram.
 *
 * Why: a pipeline schedule is understood by looking at it; the simulator's
 * timeline and a measured step are drawn by the same code from the same
 * events, and the Chrome file opens in Perfetto for zooming into one rank.
 *
 * Invariants: files are written whole (cl_write_file_atomic: a temporary file, then renamed),
 * the reader takes its input from a file a person may have cut short or
 * edited, checks every field it uses and names the file and the event index
 * in its messages; every output array is freed on every error path. */
#include "cleave/trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleave/data.h"
#include "cleave/json.h"
#include "pipeline/svg.h"

#define TRACE_MIN_CAP 64

/* ---- the recorder ---- */

cl_status cl_trace_add(cl_trace *t, const cl_trace_event *e) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : TRACE_MIN_CAP;
        if (cap < t->cap || cap > SIZE_MAX / sizeof *t->ev)
            return cl_error(CL_ERR_OOM, "trace: cannot grow past %zu events", t->cap);
        cl_trace_event *p = realloc(t->ev, cap * sizeof *p);
        if (!p) return cl_error(CL_ERR_OOM, "trace: no host memory for %zu events", cap);
        t->ev = p;
        t->cap = cap;
    }
    t->ev[t->n++] = *e;
    return CL_OK;
}

cl_status cl_trace_append(cl_trace *dst, const cl_trace *src) {
    if (!src || !src->n) return CL_OK;
    if (src->n > SIZE_MAX / sizeof *dst->ev - dst->n) return cl_error(CL_ERR_OOM, "trace: %zu + %zu events overflow", dst->n, src->n);
    size_t need = dst->n + src->n;
    if (need > dst->cap) {
        size_t cap = dst->cap ? dst->cap : TRACE_MIN_CAP;
        while (cap < need) cap = cap > SIZE_MAX / 2 / sizeof *dst->ev ? need : cap * 2;
        cl_trace_event *p = realloc(dst->ev, cap * sizeof *p);
        if (!p) return cl_error(CL_ERR_OOM, "trace: no host memory for %zu events", cap);
        dst->ev = p;
        dst->cap = cap;
    }
    memcpy(dst->ev + dst->n, src->ev, src->n * sizeof *src->ev);
    dst->n = need;
    return CL_OK;
}

void cl_trace_free(cl_trace *t) {
    if (!t) return;
    free(t->ev);
    t->ev = NULL;
    t->n = t->cap = 0;
}

int cl_trace_is_compute(cl_act_kind kind) {
    return kind == CL_ACT_FWD || kind == CL_ACT_BWD_INPUT || kind == CL_ACT_BWD_WEIGHT || kind == CL_ACT_BWD;
}

const char *cl_trace_kind_letters(cl_act_kind kind) {
    static const char *const l[] = {"F", "B", "W", "BW", "SA", "RA", "SG", "RG", "SYNC", "STEP", "RS", "RR"};
    return (unsigned)kind < CL_ACT_NKINDS_TRACE ? l[kind] : "?";
}

static int kind_is_ring(cl_act_kind kind) { return kind == CL_ACT_RING_SEND || kind == CL_ACT_RING_RECV; }

static int kind_has_mb(cl_act_kind kind) { return kind != CL_ACT_GRAD_SYNC && kind != CL_ACT_OPT_STEP; }


/* ---- the Chrome writer ---- */

static cl_status check_event(const cl_trace_event *e, size_t i) {
    if (e->rank < 0 || e->rank >= CL_TRACE_MAX_RANKS)
        return cl_error(CL_ERR_INVALID, "trace event %zu: rank %d is outside 0..%d", i, e->rank, CL_TRACE_MAX_RANKS - 1);
    if (e->track != CL_TRACK_COMPUTE && e->track != CL_TRACK_COMM)
        return cl_error(CL_ERR_INVALID, "trace event %zu: track %d is neither 0 (compute) nor 1 (send/recv)", i, e->track);
    if ((unsigned)e->kind >= CL_ACT_NKINDS_TRACE) return cl_error(CL_ERR_INVALID, "trace event %zu: unknown kind %d", i, (int)e->kind);
    if (e->mb < 0 || e->chunk < 0 || e->step < 0)
        return cl_error(CL_ERR_INVALID, "trace event %zu: mb %d, chunk %d and step %d must be >= 0", i, e->mb, e->chunk, e->step);
    if (!isfinite(e->t0) || !isfinite(e->t1) || e->t1 < e->t0)
        return cl_error(CL_ERR_INVALID, "trace event %zu (%s): times [%g, %g] s must be finite with t1 >= t0", i, cl_act_kind_name(e->kind),
                        e->t0, e->t1);
    if (!isfinite(e->wait) || e->wait < 0 || e->wait > e->t1 - e->t0 + 1e-9) /* 1 ns: t1 - t0 of a trace read back rounds */
        return cl_error(CL_ERR_INVALID, "trace event %zu (%s): waited %g s of its %g s", i, cl_act_kind_name(e->kind), e->wait, e->t1 - e->t0);
    return CL_OK;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The distinct ranks of the events for which keep(i) holds (all if keep is
 * NULL), sorted, into a malloc'ed array. */
static cl_status distinct_ranks(const cl_trace *t, const unsigned char *keep, int **out, size_t *n) {
    *out = NULL;
    *n = 0;
    int *r = malloc((t->n ? t->n : 1) * sizeof *r);
    if (!r) return cl_error(CL_ERR_OOM, "trace: no host memory for %zu ranks", t->n);
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++)
        if (!keep || keep[i]) r[k++] = t->ev[i].rank;
    qsort(r, k, sizeof *r, cmp_int);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (!u || r[u - 1] != r[i]) r[u++] = r[i];
    *out = r;
    *n = u;
    return CL_OK;
}

static void event_name(const cl_trace_event *e, char *buf, size_t n) {
    if (kind_has_mb(e->kind)) snprintf(buf, n, "%s mb%d c%d", cl_trace_kind_letters(e->kind), e->mb, e->chunk);
    else snprintf(buf, n, "%s", cl_act_kind_name(e->kind));
}

cl_status cl_trace_write_chrome(const char *path, const cl_trace *t) {
    if (!path || !*path) return cl_error(CL_ERR_INVALID, "trace: no output path given");
    if (!t || (t->n && !t->ev)) return cl_error(CL_ERR_INVALID, "%s: no trace given", path);
    double tmin = 0;
    for (size_t i = 0; i < t->n; i++) {
        cl_status s = check_event(&t->ev[i], i);
        if (s) return cl_error_context(s, "%s", path);
        if (i == 0 || t->ev[i].t0 < tmin) tmin = t->ev[i].t0;
    }
    int *ranks;
    size_t nr;
    CL_TRY(distinct_ranks(t, NULL, &ranks, &nr));
    cl_strbuf b = {0};
    cl_sb_printf(&b, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"cleave\",\"events\":%zu,\"ranks\":%zu},\n"
                     "\"traceEvents\":[\n", t->n, nr);
    const char *sep = "";
    for (size_t k = 0; k < nr; k++) {
        int r = ranks[k];
        cl_sb_printf(&b, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}},\n", sep, r, r);
        cl_sb_printf(&b, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}},\n", r, r);
        cl_sb_printf(&b, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}},\n", r);
        cl_sb_printf(&b, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"send/recv\"}}", r);
        sep = ",\n";
    }
    free(ranks);
    for (size_t i = 0; i < t->n; i++) {
        const cl_trace_event *e = &t->ev[i];
        char name[64];
        event_name(e, name, sizeof name);
        cl_sb_printf(&b,
                     "%s{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.6f,\"dur\":%.6f,"
                     "\"args\":{\"kind\":\"%s\",\"mb\":%d,\"chunk\":%d,\"step\":%d",
                     sep, name, e->track == CL_TRACK_COMPUTE ? "compute" : "comm", e->rank, e->track, (e->t0 - tmin) * 1e6,
                     (e->t1 - e->t0) * 1e6, cl_act_kind_name(e->kind), e->mb, e->chunk, e->step);
        if (kind_is_ring(e->kind)) cl_sb_printf(&b, ",\"wait\":%.6f", (e->wait < e->t1 - e->t0 ? e->wait : e->t1 - e->t0) * 1e6);
        cl_sb_printf(&b, "}}");
        sep = ",\n";
    }
    cl_sb_printf(&b, "\n]}\n");
    cl_status s = b.failed ? cl_error(CL_ERR_OOM, "%s: no host memory for the trace text (%zu events)", path, t->n)
                           : cl_write_file_atomic(path, b.buf, b.len, "trace");
    cl_sb_free(&b);
    return s;
}

/* ---- the Chrome reader ---- */

static const char *json_type_name(const cl_json *v) {
    static const char *const n[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return v ? n[v->type] : "nothing";
}

/* member key of e as an int in [lo, hi]; absent: *out = dflt when dflt_ok, else an error. */
static cl_status get_int(const char *path, size_t i, const cl_json *obj, const char *key, int lo, int hi, int dflt_ok, int dflt,
                         int *out) {
    const cl_json *v = cl_json_get(obj, key);
    if (!v) {
        if (dflt_ok) {
            *out = dflt;
            return CL_OK;
        }
        return cl_error(CL_ERR_FORMAT, "%s: traceEvents[%zu]: missing \"%s\"", path, i, key);
    }
    if (v->type != CL_JSON_NUMBER || !v->number_is_int || v->integer < lo || v->integer > hi)
        return cl_error(CL_ERR_FORMAT, "%s: traceEvents[%zu]: \"%s\" must be an integer from %d to %d, found %s", path, i, key, lo, hi,
                        v->type == CL_JSON_NUMBER ? "another number" : json_type_name(v));
    *out = (int)v->integer;
    return CL_OK;
}

static cl_status get_num(const char *path, size_t i, const cl_json *obj, const char *key, double *out) {
    const cl_json *v = cl_json_get(obj, key);
    if (!v) return cl_error(CL_ERR_FORMAT, "%s: traceEvents[%zu]: missing \"%s\"", path, i, key);
    if (v->type != CL_JSON_NUMBER || !isfinite(v->number))
        return cl_error(CL_ERR_FORMAT, "%s: traceEvents[%zu]: \"%s\" must be a finite number, found %s", path, i, key, json_type_name(v));
    *out = v->number;
    return CL_OK;
}

static cl_status parse_kind(const char *path, size_t i, const cl_json *k, cl_act_kind *out) {
    if (k->type == CL_JSON_STRING)
        for (int j = 0; j < CL_ACT_NKINDS_TRACE; j++)
            if (!strcmp(k->string, cl_act_kind_name((cl_act_kind)j))) {
                *out = (cl_act_kind)j;
                return CL_OK;
            }
    return cl_error(CL_ERR_FORMAT,
                    "%s: traceEvents[%zu]: args.kind must be one of FWD, BWD_INPUT, BWD_WEIGHT, BWD, SEND_ACT, RECV_ACT, SEND_GRAD, "
                    "RECV_GRAD, GRAD_SYNC, OPT_STEP, RING_SEND, RING_RECV; found %s%s%s",
                    path, i, k->type == CL_JSON_STRING ? "'" : "", k->type == CL_JSON_STRING ? k->string : json_type_name(k),
                    k->type == CL_JSON_STRING ? "'" : "");
}

/* One element of traceEvents: appends it to out if it is a cleave X event. */
static cl_status read_event(const char *path, size_t i, const cl_json *e, cl_trace *out) {
    if (e->type != CL_JSON_OBJECT)
        return cl_error(CL_ERR_FORMAT, "%s: traceEvents[%zu] must be an object, found %s", path, i, json_type_name(e));
    const cl_json *ph = cl_json_get(e, "ph");
    if (!ph || ph->type != CL_JSON_STRING || strcmp(ph->string, "X")) return CL_OK;
    const cl_json *args = cl_json_get(e, "args");
    const cl_json *kind = cl_json_get(args, "kind");
    if (!kind) return CL_OK; /* another tool's event */
    cl_trace_event ev;
    memset(&ev, 0, sizeof ev);
    double ts, dur;
    CL_TRY(parse_kind(path, i, kind, &ev.kind));
    CL_TRY(get_int(path, i, e, "pid", 0, CL_TRACE_MAX_RANKS - 1, 0, 0, &ev.rank));
    CL_TRY(get_int(path, i, e, "tid", 0, 1, 0, 0, &ev.track));
    CL_TRY(get_num(path, i, e, "ts", &ts));
    CL_TRY(get_num(path, i, e, "dur", &dur));
    if (dur < 0) return cl_error(CL_ERR_FORMAT, "%s: traceEvents[%zu]: negative dur %g", path, i, dur);
    CL_TRY(get_int(path, i, args, "mb", 0, 1 << 30, 1, 0, &ev.mb));
    CL_TRY(get_int(path, i, args, "chunk", 0, 1 << 30, 1, 0, &ev.chunk));
    CL_TRY(get_int(path, i, args, "step", 0, 1 << 30, 1, 0, &ev.step));
    double wait = 0;
    if (cl_json_get(args, "wait")) CL_TRY(get_num(path, i, args, "wait", &wait));
    if (wait < 0 || wait > dur)
        return cl_error(CL_ERR_FORMAT, "%s: traceEvents[%zu]: args.wait %g must be from 0 to dur (%g)", path, i, wait, dur);
    ev.t0 = ts * 1e-6;
    ev.t1 = (ts + dur) * 1e-6;
    ev.wait = wait * 1e-6;
    if (!isfinite(ev.t1)) return cl_error(CL_ERR_FORMAT, "%s: traceEvents[%zu]: ts + dur overflows", path, i);
    return cl_trace_add(out, &ev);
}

cl_status cl_trace_read_chrome(const char *path, cl_trace *out) {
    memset(out, 0, sizeof *out);
    if (!path || !*path) return cl_error(CL_ERR_INVALID, "trace: no input path given");
    cl_json_doc *doc;
    CL_TRY(cl_json_parse_file_as(&doc, path, CL_FILE_TRACE));
    cl_status s = CL_OK;
    const cl_json *root = cl_json_root(doc), *evs = root;
    if (root->type == CL_JSON_OBJECT) evs = cl_json_get(root, "traceEvents");
    if (!evs || evs->type != CL_JSON_ARRAY) {
        s = cl_error(CL_ERR_FORMAT, "%s: not a Chrome trace: expected an object with a \"traceEvents\" array (or an array of events), %s",
                     path, root->type != CL_JSON_OBJECT ? "found a JSON value of another type"
                           : !evs                        ? "and there is no \"traceEvents\""
                                                         : "but \"traceEvents\" is not an array");
        cl_json_free(doc);
        return s;
    }
    size_t i = 0;
    for (const cl_json *e = evs->child; e && !s; e = e->next, i++) s = read_event(path, i, e, out);
    cl_json_free(doc);
    if (s) cl_trace_free(out);
    return s;
}

/* ---- from the simulator ---- */

cl_status cl_trace_from_sim(const cl_schedule *s, const cl_sim_result *r, cl_trace *out) {
    memset(out, 0, sizeof *out);
    if (!s || !r || !s->len || !s->acts || !r->len || !r->start || !r->end || r->p != s->p)
        return cl_error(CL_ERR_INVALID, "trace from sim: the result does not belong to the schedule (ranks %d vs %d)", r ? r->p : -1,
                        s ? s->p : -1);
    for (int k = 0; k < s->p; k++)
        if (r->len[k] != s->len[k])
            return cl_error(CL_ERR_INVALID, "trace from sim: rank %d has %d actions in the schedule but %d in the result", k, s->len[k],
                            r->len[k]);
    for (int k = 0; k < s->p; k++)
        for (int i = 0; i < s->len[k]; i++) {
            const cl_action *a = &s->acts[k][i];
            cl_trace_event e = {.rank = k,
                                .track = cl_trace_is_compute(a->kind) || a->kind == CL_ACT_OPT_STEP ? CL_TRACK_COMPUTE : CL_TRACK_COMM,
                                .step = 1,
                                .kind = a->kind,
                                .mb = kind_has_mb(a->kind) ? a->mb : 0,
                                .chunk = kind_has_mb(a->kind) ? a->chunk : 0,
                                .t0 = r->start[k][i],
                                .t1 = r->end[k][i]};
            cl_status st = cl_trace_add(out, &e);
            if (st) {
                cl_trace_free(out);
                return st;
            }
        }
    return CL_OK;
}

/* ---- steps and the bubble ---- */

cl_status cl_trace_pick_step(const cl_trace *t, int step, int *picked) {
    if (!t || !t->n) return cl_error(CL_ERR_INVALID, "trace: no events");
    int lo = t->ev[0].step, hi = lo, found = 0;
    for (size_t i = 0; i < t->n; i++) {
        int s = t->ev[i].step;
        if (s < lo) lo = s;
        if (s > hi) hi = s;
        found |= s == step;
    }
    if (step == 0) {
        *picked = lo;
        return CL_OK;
    }
    if (!found)
        return cl_error(CL_ERR_INVALID, "trace: step %d is not in the trace (its steps run from %d to %d; 0 picks the first)", step, lo,
                        hi);
    *picked = step;
    return CL_OK;
}

typedef struct {
    int rank;
    double t0, t1;
} span_ref;

static int cmp_span(const void *a, const void *b) {
    const span_ref *x = a, *y = b;
    if (x->rank != y->rank) return (x->rank > y->rank) - (x->rank < y->rank);
    return (x->t0 > y->t0) - (x->t0 < y->t0);
}

/* Step window [*lo, *hi] over all events of step; 0 if none. */
static int step_window(const cl_trace *t, int step, double *lo, double *hi) {
    int any = 0;
    for (size_t i = 0; i < t->n; i++) {
        const cl_trace_event *e = &t->ev[i];
        if (e->step != step) continue;
        if (!any || e->t0 < *lo) *lo = e->t0;
        if (!any || e->t1 > *hi) *hi = e->t1;
        any = 1;
    }
    return any;
}

cl_status cl_trace_ring_summary(const cl_trace *t, int step, cl_trace_ring *out) {
    memset(out, 0, sizeof *out);
    int st;
    CL_TRY(cl_trace_pick_step(t, step, &st));
    for (size_t i = 0; i < t->n; i++) {
        const cl_trace_event *e = &t->ev[i];
        if (e->step != st || !kind_is_ring(e->kind)) continue;
        out->n++;
        out->flight += e->t1 - e->t0;
        out->waited += e->wait;
    }
    out->hidden = out->flight > 0 ? 1.0 - out->waited / out->flight : 0;
    return CL_OK;
}

cl_status cl_trace_bubble(const cl_trace *t, int step, int nranks, double *bubble_per_rank) {
    if (nranks < 1) return cl_error(CL_ERR_INVALID, "trace bubble: nranks must be >= 1 (got %d)", nranks);
    int st;
    CL_TRY(cl_trace_pick_step(t, step, &st));
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++) {
        const cl_trace_event *e = &t->ev[i];
        if (e->step != st) continue;
        if (e->rank < 0 || e->rank >= nranks)
            return cl_error(CL_ERR_INVALID, "trace bubble: event %zu of step %d is on rank %d, outside 0..%d", i, st, e->rank, nranks - 1);
        if (!isfinite(e->t0) || !isfinite(e->t1) || e->t1 < e->t0)
            return cl_error(CL_ERR_INVALID, "trace bubble: event %zu has times [%g, %g]", i, e->t0, e->t1);
        n += cl_trace_is_compute(e->kind);
    }
    double lo = 0, hi = 0;
    step_window(t, st, &lo, &hi);
    double span = hi - lo;
    span_ref *sp = malloc((n ? n : 1) * sizeof *sp);
    if (!sp) return cl_error(CL_ERR_OOM, "trace bubble: no host memory for %zu events", n);
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        const cl_trace_event *e = &t->ev[i];
        if (e->step == st && cl_trace_is_compute(e->kind)) sp[k++] = (span_ref){e->rank, e->t0, e->t1};
    }
    qsort(sp, n, sizeof *sp, cmp_span);
    for (int r = 0; r < nranks; r++) bubble_per_rank[r] = span > 0 ? 1 : 0;
    for (size_t i = 0; i < n;) {
        int r = sp[i].rank;
        double busy = 0, a = sp[i].t0, b = sp[i].t1;
        for (; i < n && sp[i].rank == r; i++) {
            if (sp[i].t0 > b) { /* a gap: close the merged interval */
                busy += b - a;
                a = sp[i].t0;
                b = sp[i].t1;
            } else if (sp[i].t1 > b) {
                b = sp[i].t1;
            }
        }
        busy += b - a;
        bubble_per_rank[r] = span > 0 ? 1 - busy / span : 0;
    }
    free(sp);
    return CL_OK;
}

/* ---- the SVG diagram ---- */

#define SVG_LEFT 70.0     /* room for "rank N" */
#define SVG_RIGHT 110.0   /* room for the bubble figure */
#define SVG_TOP 40.0      /* title */
#define SVG_ROW 28.0      /* row pitch */
#define SVG_BOX 22.0      /* box height */
#define SVG_STRIP 8.0     /* comm mode: the strip under the boxes */
#define SVG_AXIS 40.0     /* axis and its labels */
#define SVG_LEGEND 30.0
#define SVG_MIN_PLOT 600.0
#define SVG_MAX_PLOT 3000.0
#define SVG_PX_PER_UNIT 30.0 /* pixels for the shortest compute action */

static const char *kind_fill(cl_act_kind k, int odd) {
    switch (k) {
    case CL_ACT_FWD: return odd ? "#a0c4e8" : "#4e79a7";
    case CL_ACT_BWD_INPUT: return odd ? "#a9d8a0" : "#59a14f";
    case CL_ACT_BWD_WEIGHT: return odd ? "#d3b8e0" : "#8e5ea2";
    default: return odd ? "#ffc98a" : "#f28e2b";
    }
}

/* ---- SVG helpers (pipeline/svg.h), shared with `cleave plot` ---- */

double cl_svg_nice_step(double span) {
    double raw = span / 8, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

void cl_svg_open(cl_strbuf *b, double width, double height) {
    cl_sb_printf(b,
                 "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                 "font-family=\"sans-serif\" font-size=\"11\">\n"
                 "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n",
                 width, height, width, height, width, height);
}

void cl_svg_escaped(cl_strbuf *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': cl_sb_printf(b, "&amp;"); break;
        case '<': cl_sb_printf(b, "&lt;"); break;
        case '>': cl_sb_printf(b, "&gt;"); break;
        case '"': cl_sb_printf(b, "&quot;"); break;
        default:
            if ((unsigned char)*s >= 0x20) cl_sb_printf(b, "%c", *s);
        }
    }
}

/* The comm strip's colour by its legend bit: an action kind, or
 * STRIP_TP_BIT for a compute kind on the comm track (the collectives inside
 * that pass); the strips and their legend both read it. */
#define STRIP_TP_BIT 15
#define STRIP_RING_WAIT_BIT 14 /* the part of a ring transfer its rank waited for, drawn over the transfer's strip */
static const char *strip_fill(int bit) {
    switch (bit) {
    case STRIP_TP_BIT: return "#17becf";
    case CL_ACT_RING_SEND: case CL_ACT_RING_RECV: return "#a0cbe8";
    case STRIP_RING_WAIT_BIT: return "#d37295";
    case CL_ACT_GRAD_SYNC: return "#e15759";
    case CL_ACT_OPT_STEP: return "#edc948";
    default: return "#9c9c9c";
    }
}

static int strip_bit(const cl_trace_event *e) {
    return e->track == CL_TRACK_COMM && cl_trace_is_compute(e->kind) ? STRIP_TP_BIT : (int)e->kind;
}

cl_status cl_svg_timeline(cl_strbuf *out, const cl_trace *t, int step, int comm, double *width_out, double *height_out) {
    int st;
    CL_TRY(cl_trace_pick_step(t, step, &st));
    /* keep[i]: 0 another step, 1 this step (a row for its rank), 2 a box, 3 a comm strip (comm mode) */
    unsigned char *keep = calloc(t->n, 1);
    if (!keep) return cl_error(CL_ERR_OOM, "trace render: no host memory for %zu events", t->n);
    size_t nbox = 0;
    int chunked = 0, maxrank = 0;
    double unit = 0;
    unsigned present = 0, strips = 0;
    double row_h = comm ? SVG_ROW + SVG_STRIP + 2 : SVG_ROW;
    for (size_t i = 0; i < t->n; i++) {
        const cl_trace_event *e = &t->ev[i];
        if (e->step != st) continue;
        if (e->rank < 0 || e->rank >= CL_TRACE_MAX_RANKS || !isfinite(e->t0) || !isfinite(e->t1) || e->t1 < e->t0) {
            free(keep);
            return cl_error(CL_ERR_INVALID, "trace render: event %zu has rank %d and times [%g, %g]", i, e->rank, e->t0, e->t1);
        }
        keep[i] = 1;
        if (e->rank > maxrank) maxrank = e->rank;
        if (comm && (!cl_trace_is_compute(e->kind) || e->track != CL_TRACK_COMPUTE)) {
            if (e->t1 > e->t0) keep[i] = 3, strips |= 1u << strip_bit(e);
            continue;
        }
        if (!cl_trace_is_compute(e->kind)) continue;
        keep[i] = 2;
        nbox++;
        chunked |= e->chunk > 0;
        present |= 1u << e->kind;
        double d = e->t1 - e->t0;
        if (d > 0 && (unit == 0 || d < unit)) unit = d;
    }
    if (!nbox) {
        free(keep);
        return cl_error(CL_ERR_INVALID, "trace render: step %d has no compute events (FWD, BWD_INPUT, BWD_WEIGHT, BWD) to draw", st);
    }
    int *ranks = NULL;
    size_t nr = 0;
    double *bub = NULL;
    cl_status s = distinct_ranks(t, keep, &ranks, &nr);
    if (!s && !(bub = malloc((size_t)(maxrank + 1) * sizeof *bub))) s = cl_error(CL_ERR_OOM, "trace render: no host memory");
    if (!s) s = cl_trace_bubble(t, st, maxrank + 1, bub);
    if (s) {
        free(keep);
        free(ranks);
        free(bub);
        return s;
    }
    double lo = 0, hi = 0;
    step_window(t, st, &lo, &hi);
    double span = hi > lo ? hi - lo : 1;
    if (unit <= 0) unit = span;
    double plot = span / unit * SVG_PX_PER_UNIT;
    plot = plot < SVG_MIN_PLOT ? SVG_MIN_PLOT : plot > SVG_MAX_PLOT ? SVG_MAX_PLOT : plot;
    double scale = plot / span;
    double width = SVG_LEFT + plot + SVG_RIGHT, rows_h = (double)nr * row_h;
    double height = SVG_TOP + rows_h + SVG_AXIS + SVG_LEGEND;
    /* axis unit: s, ms or us by the span */
    double umul = span >= 1 ? 1 : span >= 1e-3 ? 1e3 : 1e6;
    const char *uname = span >= 1 ? "s" : span >= 1e-3 ? "ms" : "us";

    cl_strbuf b = *out;
    cl_sb_printf(&b, "<text x=\"%.1f\" y=\"22\" font-size=\"14\">pipeline timeline, step %d: %zu rank%s, %zu compute actions</text>\n",
                 SVG_LEFT, st, nr, nr == 1 ? "" : "s", nbox);
    for (size_t k = 0; k < nr; k++) {
        double y = SVG_TOP + (double)k * row_h;
        cl_sb_printf(&b, "<text class=\"row\" x=\"8\" y=\"%.1f\">rank %d</text>\n", y + SVG_BOX / 2 + 4, ranks[k]);
        cl_sb_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#dddddd\"/>\n", SVG_LEFT, y + SVG_BOX + 0.5,
                     SVG_LEFT + plot, y + SVG_BOX + 0.5);
        cl_sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555555\">bubble %.1f%%</text>\n", SVG_LEFT + plot + 8, y + SVG_BOX / 2 + 4,
                     100 * bub[ranks[k]]);
    }
    for (size_t i = 0; i < t->n; i++) {
        if (keep[i] < 2) continue;
        const cl_trace_event *e = &t->ev[i];
        size_t row = 0, a = 0, z = nr; /* binary search of the rank's row */
        while (a < z) {
            size_t mid = (a + z) / 2;
            if (ranks[mid] < e->rank) a = mid + 1;
            else z = mid;
        }
        row = a;
        double x = SVG_LEFT + (e->t0 - lo) * scale, w = (e->t1 - e->t0) * scale, y = SVG_TOP + (double)row * row_h;
        if (w < 0.5) w = 0.5;
        if (keep[i] == 3) { /* comm mode: a strip under the rank's boxes */
            char what[32];
            if (cl_trace_is_compute(e->kind)) snprintf(what, sizeof what, "collectives in %s", cl_trace_kind_letters(e->kind));
            else snprintf(what, sizeof what, "%s", cl_act_kind_name(e->kind));
            cl_sb_printf(&b,
                         "<rect class=\"comm\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"><title>rank %d %s mb %d "
                         "chunk %d: %.6g to %.6g %s</title></rect>\n",
                         x, y + SVG_BOX + 2, w, SVG_STRIP, strip_fill(strip_bit(e)), e->rank, what, e->mb, e->chunk, (e->t0 - lo) * umul,
                         (e->t1 - lo) * umul, uname);
            if (kind_is_ring(e->kind) && e->wait > 0) { /* the waited end of the flight, over it */
                double ww = e->wait * scale < 0.5 ? 0.5 : e->wait * scale;
                strips |= 1u << STRIP_RING_WAIT_BIT;
                cl_sb_printf(&b,
                             "<rect class=\"wait\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"><title>rank %d "
                             "%s mb %d chunk %d: waited %.6g %s</title></rect>\n",
                             x + w - ww, y + SVG_BOX + 2, ww, SVG_STRIP, strip_fill(STRIP_RING_WAIT_BIT), e->rank, what, e->mb, e->chunk,
                             e->wait * umul, uname);
            }
            continue;
        }
        char label[32];
        if (chunked) snprintf(label, sizeof label, "%d.%d", e->mb, e->chunk);
        else snprintf(label, sizeof label, "%d", e->mb);
        cl_sb_printf(&b,
                     "<rect class=\"act %s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"white\" "
                     "stroke-width=\"0.5\"><title>rank %d %s mb %d chunk %d: %.6g to %.6g %s</title></rect>\n",
                     cl_trace_kind_letters(e->kind), x, y, w, SVG_BOX, kind_fill(e->kind, e->chunk % 2), e->rank, cl_act_kind_name(e->kind),
                     e->mb, e->chunk, (e->t0 - lo) * umul, (e->t1 - lo) * umul, uname);
        if (w >= 6.5 * (double)strlen(label) + 2)
            cl_sb_printf(&b, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"%s\">%s</text>\n", x + w / 2, y + SVG_BOX / 2 + 4,
                         e->chunk % 2 ? "black" : "white", label);
    }
    /* the time axis */
    double ay = SVG_TOP + rows_h + 4, tick = cl_svg_nice_step(span * umul);
    cl_sb_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", SVG_LEFT, ay, SVG_LEFT + plot, ay);
    for (long j = 0; j <= 1000; j++) {
        double v = (double)j * tick;
        if (v > span * umul * (1 + 1e-9)) break;
        double x = SVG_LEFT + v / umul * scale;
        cl_sb_printf(&b, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"black\"/>\n", x, ay, x, ay + 5);
        cl_sb_printf(&b, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x, ay + 17, v);
    }
    cl_sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">time (%s)</text>\n", SVG_LEFT + plot, ay + 32, uname);
    /* the legend: only the kinds drawn */
    static const cl_act_kind lk[] = {CL_ACT_FWD, CL_ACT_BWD_INPUT, CL_ACT_BWD_WEIGHT, CL_ACT_BWD};
    static const char *const ln[] = {"F forward", "B backward-input", "W backward-weight", "BWD backward (B+W)"};
    double lx = SVG_LEFT, ly = SVG_TOP + rows_h + SVG_AXIS + 8;
    for (int j = 0; j < 4; j++) {
        if (!(present & (1u << lk[j]))) continue;
        cl_sb_printf(&b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx,
                     ly, kind_fill(lk[j], 0), lx + 16, ly + 10, ln[j]);
        lx += 150;
    }
    static const struct {
        int bit;
        const char *name;
    } ls[] = {{STRIP_TP_BIT, "tensor-parallel collectives"}, {CL_ACT_RECV_ACT, "receive (waiting, in flight)"},
              {CL_ACT_RECV_GRAD, "receive (waiting, in flight)"}, {CL_ACT_GRAD_SYNC, "gradient sync (exposed)"},
              {CL_ACT_OPT_STEP, "optimizer step"}, {CL_ACT_RING_SEND, "ring transfer (in flight)"},
              {CL_ACT_RING_RECV, "ring transfer (in flight)"}, {STRIP_RING_WAIT_BIT, "ring transfer (waited)"}};
    for (size_t j = 0; j < sizeof ls / sizeof ls[0]; j++) {
        if (!(strips & (1u << ls[j].bit)) || (ls[j].bit == CL_ACT_RECV_GRAD && (strips & (1u << CL_ACT_RECV_ACT))) ||
            (ls[j].bit == CL_ACT_RING_RECV && (strips & (1u << CL_ACT_RING_SEND))))
            continue;
        cl_sb_printf(&b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"6\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx,
                     ly + 3, strip_fill(ls[j].bit), lx + 16, ly + 10, ls[j].name);
        lx += 190;
    }
    if (lx > width) width = lx + 10;
    if (chunked) cl_sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\">labels mb.chunk; odd chunks lighter</text>\n", lx, ly + 10);
    *out = b;
    *width_out = width, *height_out = height;
    free(keep);
    free(ranks);
    free(bub);
    return b.failed ? cl_error(CL_ERR_OOM, "trace render: no host memory for the SVG text") : CL_OK;
}

cl_status cl_trace_render_svg(const char *path, const cl_trace *t, int step) {
    if (!path || !*path) return cl_error(CL_ERR_INVALID, "trace render: no output path given");
    cl_strbuf body = {0}, b = {0};
    double width, height;
    int ring = 0; /* the ring's transfers are drawn as strips under the boxes */
    for (size_t i = 0; i < t->n && !ring; i++) ring = kind_is_ring(t->ev[i].kind);
    cl_status s = cl_svg_timeline(&body, t, step, ring, &width, &height);
    if (!s) {
        cl_svg_open(&b, width, height);
        cl_sb_printf(&b, "%.*s</svg>\n", (int)body.len, body.buf);
        s = b.failed ? cl_error(CL_ERR_OOM, "%s: no host memory for the SVG text", path) : cl_write_file_atomic(path, b.buf, b.len, "SVG");
    }
    cl_sb_free(&body);
    cl_sb_free(&b);
    return s;
}
