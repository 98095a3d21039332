/* Tests of the pipeline timeline (src/pipeline/trace.c, cleave/trace.h):
 * the recorder grows and appends; a Chrome trace written and read back gives the same
 * events (times shifted by the minimum); a trace from the simulator of every
 * schedule kind gives, per rank, the simulator's bubble, and 1f1b p 4 m 8
 * gives (p-1)/(m+p-1) on every rank; the bubble of a hand-built trace
 * (overlaps counted once, a rank without compute); the SVG has one box per
 * compute action, the chosen step only; bad inputs (a missing file, a
 * directory, not JSON, JSON without traceEvents, a negative dur, a bad kind,
 * pid or tid, bad writer events, an absent step) are errors, not crashes;
 * every truncation and many single-byte edits of a small trace never crash
 * (run under ASan by `make SAN=1 test`); writes leave no .tmp behind. */
#include "cleave/trace.h"

#include "common/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

static int exists(const char *path) { return access(path, F_OK) == 0; }

static char *read_all(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, fp);
    b[*len] = 0;
    fclose(fp);
    return b;
}

static void write_text(const char *path, const char *text, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return;
    fwrite(text, 1, n, fp);
    fclose(fp);
}

static size_t count(const char *hay, const char *needle) {
    size_t n = 0, k = strlen(needle);
    for (const char *p = strstr(hay, needle); p; p = strstr(p + k, needle)) n++;
    return n;
}

static int same_event(const cl_trace_event *a, const cl_trace_event *b, double shift) {
    double tol = 1e-9;
    return a->rank == b->rank && a->track == b->track && a->step == b->step && a->kind == b->kind && a->mb == b->mb &&
           a->chunk == b->chunk && fabs(a->t0 - (b->t0 - shift)) < tol && fabs(a->t1 - (b->t1 - shift)) < tol;
}

/* A small trace of every kind over two ranks and two steps, origin 100 s. */
static void small_trace(cl_trace *t) {
    memset(t, 0, sizeof *t);
    for (int k = 0; k <= CL_ACT_OPT_STEP; k++) {
        int has_mb = k != CL_ACT_GRAD_SYNC && k != CL_ACT_OPT_STEP;
        cl_trace_event e = {.rank = k % 2,
                            .track = cl_trace_is_compute((cl_act_kind)k) ? CL_TRACK_COMPUTE : CL_TRACK_COMM,
                            .step = 1 + k / 5,
                            .kind = (cl_act_kind)k,
                            .mb = has_mb ? k * 3 : 0,
                            .chunk = has_mb ? k % 3 : 0,
                            .t0 = 100.0 + 0.25 * k,
                            .t1 = 100.0 + 0.25 * k + (k % 4 ? 0.125 : 0)};
        CHECK_OK(cl_trace_add(t, &e));
    }
}

static void test_add(void) {
    cl_trace t = {0};
    for (int i = 0; i < 1000; i++) {
        cl_trace_event e = {.rank = i % 7, .mb = i, .t0 = i, .t1 = i + 0.5};
        CHECK_OK(cl_trace_add(&t, &e));
    }
    CHECK(t.n == 1000 && t.cap >= 1000, "n %zu cap %zu", t.n, t.cap);
    int ok = 1;
    for (int i = 0; i < 1000; i++) ok &= t.ev[i].mb == i && t.ev[i].rank == i % 7;
    CHECK(ok, "events kept in order");
    cl_trace u = {0}, none = {0};
    CHECK_OK(cl_trace_append(&u, &t));
    CHECK_OK(cl_trace_append(&u, &none));
    CHECK_OK(cl_trace_append(&u, &t));
    CHECK(u.n == 2000 && u.ev[1999].mb == 999 && u.ev[1000].mb == 0 && u.ev[999].mb == 999, "append: %zu", u.n);
    cl_trace_free(&u);
    cl_trace_free(&t);
    CHECK(!t.ev && !t.n && !t.cap, "freed and zeroed");
    cl_trace_free(&t);
    cl_trace_free(NULL);
    CHECK(!strcmp(cl_trace_kind_letters(CL_ACT_BWD), "BW") && !strcmp(cl_trace_kind_letters((cl_act_kind)99), "?"), "letters");
}

static void test_round_trip(void) {
    char path[160], tmp[170];
    snprintf(path, sizeof path, "%s/rt.json", tmpdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cl_trace t, back;
    small_trace(&t);
    CHECK_OK(cl_trace_write_chrome(path, &t));
    CHECK(!exists(tmp), "no tmp file left after a successful write");
    CHECK_OK(cl_trace_read_chrome(path, &back));
    CHECK(back.n == t.n, "read %zu events, wrote %zu", back.n, t.n);
    for (size_t i = 0; i < t.n && i < back.n; i++)
        CHECK(same_event(&back.ev[i], &t.ev[i], 100.0), "event %zu: read rank %d track %d step %d %s mb %d chunk %d [%.9f, %.9f]", i,
              back.ev[i].rank, back.ev[i].track, back.ev[i].step, cl_act_kind_name(back.ev[i].kind), back.ev[i].mb, back.ev[i].chunk,
              back.ev[i].t0, back.ev[i].t1);
    size_t len;
    char *text = read_all(path, &len);
    CHECK(text && strstr(text, "\"name\":\"F mb0 c0\"") && strstr(text, "\"name\":\"B mb3 c1\"") && strstr(text, "\"name\":\"OPT_STEP\""),
          "event names");
    CHECK(text && strstr(text, "\"args\":{\"kind\":\"BWD_WEIGHT\",\"mb\":6,\"chunk\":2,\"step\":1}"), "args");
    CHECK(text && strstr(text, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"rank 1\"}}") &&
              strstr(text, "\"args\":{\"name\":\"send/recv\"}") && strstr(text, "\"args\":{\"name\":\"compute\"}"),
          "metadata names ranks and tracks");
    CHECK(text && strstr(text, "\"ts\":0.000000,\"dur\":0.000000") && strstr(text, "\"ts\":250000.000000,\"dur\":125000.000000"),
          "ts and dur in microseconds from the minimum");
    free(text);
    /* a second write replaces the file; reading it twice gives the same */
    cl_trace_event extra = {.rank = 3, .step = 2, .kind = CL_ACT_FWD, .mb = 1, .t0 = 99.5, .t1 = 99.75};
    CHECK_OK(cl_trace_add(&t, &extra));
    CHECK_OK(cl_trace_write_chrome(path, &t));
    cl_trace_free(&back);
    CHECK_OK(cl_trace_read_chrome(path, &back));
    CHECK(back.n == t.n && same_event(&back.ev[t.n - 1], &extra, 99.5) && same_event(&back.ev[0], &t.ev[0], 99.5), "rewrite");
    cl_trace_free(&back);
    cl_trace_free(&t);
    /* an empty trace */
    cl_trace empty = {0};
    CHECK_OK(cl_trace_write_chrome(path, &empty));
    CHECK_OK(cl_trace_read_chrome(path, &back));
    CHECK(back.n == 0, "empty trace reads back empty (%zu)", back.n);
    cl_trace_free(&back);
    /* the bare-array form, with another tool's events skipped */
    const char *arr = "[{\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":5,\"dur\":2,\"name\":\"gemm\"},"
                      "{\"ph\":\"i\",\"pid\":0,\"tid\":0,\"ts\":1},"
                      "{\"ph\":\"X\",\"pid\":2,\"tid\":1,\"ts\":10,\"dur\":0,\"args\":{\"kind\":\"RECV_ACT\",\"mb\":4}}]";
    write_text(path, arr, strlen(arr));
    CHECK_OK(cl_trace_read_chrome(path, &back));
    CHECK(back.n == 1 && back.ev[0].rank == 2 && back.ev[0].track == 1 && back.ev[0].kind == CL_ACT_RECV_ACT && back.ev[0].mb == 4 &&
              back.ev[0].chunk == 0 && back.ev[0].step == 0 && fabs(back.ev[0].t0 - 1e-5) < 1e-15,
          "bare array: %zu events", back.n);
    cl_trace_free(&back);
    unlink(path);
}

static void sim_of(cl_sched_kind kind, int p, int m, int v, cl_schedule *s, cl_sim_result *r, cl_trace *t) {
    CHECK_OK(cl_schedule_make(kind, p, m, v, s));
    CHECK_OK(cl_schedule_simulate(s, NULL, r));
    CHECK_OK(cl_trace_from_sim(s, r, t));
}

static void test_sim_bubble(void) {
    struct { cl_sched_kind k; int p, m, v; } cases[] = {
        {CL_SCHED_1F1B, 4, 8, 1}, {CL_SCHED_GPIPE, 3, 5, 1}, {CL_SCHED_INTERLEAVED, 4, 8, 2}, {CL_SCHED_ZB_H1, 4, 8, 1},
        {CL_SCHED_1F1B, 1, 3, 1}, {CL_SCHED_ZB_H1, 6, 3, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cl_schedule s;
        cl_sim_result r;
        cl_trace t;
        sim_of(cases[c].k, cases[c].p, cases[c].m, cases[c].v, &s, &r, &t);
        size_t total = 0;
        for (int k = 0; k < s.p; k++) total += (size_t)s.len[k];
        CHECK(t.n == total, "%s: %zu events for %zu actions", cl_sched_kind_name(s.kind), t.n, total);
        double bub[8];
        CHECK_OK(cl_trace_bubble(&t, 0, s.p, bub));
        for (int k = 0; k < s.p; k++)
            CHECK(fabs(bub[k] - r.bubble[k]) < 1e-12, "%s p %d m %d: rank %d bubble %.12f, simulator %.12f", cl_sched_kind_name(s.kind), s.p,
                  s.m, k, bub[k], r.bubble[k]);
        if (cases[c].k == CL_SCHED_1F1B && cases[c].p == 4)
            for (int k = 0; k < 4; k++) CHECK(fabs(bub[k] - 3.0 / 11.0) < 1e-12, "1f1b p 4 m 8 rank %d: %.12f, want 3/11", k, bub[k]);
        /* tracks and markers */
        int ok = 1;
        for (size_t i = 0; i < t.n; i++) {
            const cl_trace_event *e = &t.ev[i];
            int comp = cl_trace_is_compute(e->kind) || e->kind == CL_ACT_OPT_STEP;
            ok &= e->step == 1 && e->track == (comp ? CL_TRACK_COMPUTE : CL_TRACK_COMM) && (comp && e->kind != CL_ACT_OPT_STEP ? e->t1 > e->t0 : e->t1 == e->t0);
        }
        CHECK(ok, "%s: compute on track 0 with width, the rest zero-width markers, step 1", cl_sched_kind_name(s.kind));
        /* through a file: the same bubble */
        char path[160];
        snprintf(path, sizeof path, "%s/sim.json", tmpdir);
        cl_trace back;
        CHECK_OK(cl_trace_write_chrome(path, &t));
        CHECK_OK(cl_trace_read_chrome(path, &back));
        double bub2[8];
        CHECK_OK(cl_trace_bubble(&back, 1, s.p, bub2));
        for (int k = 0; k < s.p; k++) CHECK(fabs(bub2[k] - r.bubble[k]) < 1e-9, "via file: rank %d %.12f vs %.12f", k, bub2[k], r.bubble[k]);
        unlink(path);
        cl_trace_free(&back);
        cl_trace_free(&t);
        cl_sim_result_free(&r);
        cl_schedule_free(&s);
    }
    /* a result that does not belong to the schedule */
    cl_schedule s, s2;
    cl_sim_result r;
    cl_trace t;
    sim_of(CL_SCHED_1F1B, 2, 2, 1, &s, &r, &t);
    cl_trace_free(&t);
    CHECK_OK(cl_schedule_make(CL_SCHED_1F1B, 3, 2, 1, &s2));
    CHECK(cl_trace_from_sim(&s2, &r, &t) == CL_ERR_INVALID && t.n == 0, "mismatched result: %s", cl_last_error());
    cl_schedule_free(&s2);
    CHECK_OK(cl_schedule_make(CL_SCHED_1F1B, 2, 3, 1, &s2));
    CHECK(cl_trace_from_sim(&s2, &r, &t) == CL_ERR_INVALID && strstr(cl_last_error(), "rank 0"), "other lengths: %s", cl_last_error());
    cl_schedule_free(&s2);
    cl_sim_result_free(&r);
    cl_schedule_free(&s);
}

static void test_bubble_hand(void) {
    /* step 2 spans [10, 20]: rank 0 busy [10,14] and [12,16] (overlap: 6 s), rank 1 only a send, rank 2 busy [15, 20];
     * step 1 events elsewhere must not count */
    cl_trace t = {0};
    cl_trace_event ev[] = {
        {.rank = 0, .step = 2, .kind = CL_ACT_FWD, .t0 = 10, .t1 = 14},
        {.rank = 0, .step = 2, .kind = CL_ACT_BWD, .t0 = 12, .t1 = 16},
        {.rank = 1, .track = 1, .step = 2, .kind = CL_ACT_SEND_ACT, .t0 = 11, .t1 = 11},
        {.rank = 2, .step = 2, .kind = CL_ACT_BWD_WEIGHT, .t0 = 15, .t1 = 20},
        {.rank = 2, .step = 1, .kind = CL_ACT_FWD, .t0 = 0, .t1 = 9},
        {.rank = 0, .track = 1, .step = 2, .kind = CL_ACT_GRAD_SYNC, .t0 = 16, .t1 = 18},
    };
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++) CHECK_OK(cl_trace_add(&t, &ev[i]));
    double b[3];
    CHECK_OK(cl_trace_bubble(&t, 2, 3, b));
    CHECK(fabs(b[0] - 0.4) < 1e-12 && fabs(b[1] - 1) < 1e-12 && fabs(b[2] - 0.5) < 1e-12, "step 2: %g %g %g, want 0.4 1 0.5", b[0], b[1],
          b[2]);
    CHECK_OK(cl_trace_bubble(&t, 0, 3, b)); /* step 0 = the first present, step 1 */
    CHECK(fabs(b[2]) < 1e-12 && fabs(b[0] - 1) < 1e-12, "step 1: %g %g", b[0], b[2]);
    CHECK(cl_trace_bubble(&t, 2, 2, b) == CL_ERR_INVALID && strstr(cl_last_error(), "rank 2"), "nranks too small: %s", cl_last_error());
    CHECK(cl_trace_bubble(&t, 7, 3, b) == CL_ERR_INVALID && strstr(cl_last_error(), "step 7"), "absent step: %s", cl_last_error());
    CHECK(cl_trace_bubble(&t, 1, 0, b) == CL_ERR_INVALID, "nranks 0");
    int st;
    CHECK(cl_trace_pick_step(&t, 0, &st) == CL_OK && st == 1, "pick 0 -> %d", st);
    cl_trace_free(&t);
    CHECK(cl_trace_bubble(&t, 0, 1, b) == CL_ERR_INVALID, "empty trace: %s", cl_last_error());
}

static void test_svg(void) {
    char path[160], tmp[170];
    snprintf(path, sizeof path, "%s/t.svg", tmpdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    struct { cl_sched_kind k; int p, m, v; } cases[] = {{CL_SCHED_1F1B, 4, 8, 1}, {CL_SCHED_INTERLEAVED, 2, 4, 3}, {CL_SCHED_ZB_H1, 3, 4, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cl_schedule s;
        cl_sim_result r;
        cl_trace t;
        sim_of(cases[c].k, cases[c].p, cases[c].m, cases[c].v, &s, &r, &t);
        CHECK_OK(cl_trace_render_svg(path, &t, 0));
        CHECK(!exists(tmp), "no tmp left");
        size_t len, ncomp = 0;
        for (int k = 0; k < s.p; k++)
            for (int i = 0; i < s.len[k]; i++) ncomp += cl_trace_is_compute(s.acts[k][i].kind);
        char *svg = read_all(path, &len);
        CHECK(svg && !strncmp(svg, "<?xml", 5) && strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"") && strstr(svg, "</svg>\n"),
              "an SVG document");
        size_t boxes = svg ? count(svg, "<rect class=\"act ") : 0;
        CHECK(boxes == ncomp, "%s: %zu boxes for %zu compute actions", cl_sched_kind_name(s.kind), boxes, ncomp);
        CHECK(svg && count(svg, "\">rank ") == (size_t)s.p && count(svg, "bubble ") == (size_t)s.p, "one labelled row per rank");
        if (cases[c].k == CL_SCHED_ZB_H1)
            CHECK(svg && count(svg, "class=\"act F\"") == ncomp / 3 && count(svg, "class=\"act W\"") == ncomp / 3, "zb-h1 F and W boxes");
        if (cases[c].v > 1) CHECK(svg && strstr(svg, ">3.2</text>"), "chunk in labels when v > 1");
        else CHECK(svg && strstr(svg, ">3</text>") && !strstr(svg, ">3.0</text>"), "micro-batch labels");
        free(svg);
        cl_trace_free(&t);
        cl_sim_result_free(&r);
        cl_schedule_free(&s);
    }
    /* two steps: only the chosen one is drawn */
    cl_trace t = {0};
    for (int st = 1; st <= 2; st++)
        for (int i = 0; i < 3 * st; i++) {
            cl_trace_event e = {.rank = i % 2, .step = st, .kind = CL_ACT_FWD, .mb = i, .t0 = 100 * st + i, .t1 = 100 * st + i + 1};
            CHECK_OK(cl_trace_add(&t, &e));
        }
    size_t len;
    CHECK_OK(cl_trace_render_svg(path, &t, 2));
    char *svg = read_all(path, &len);
    CHECK(svg && count(svg, "<rect class=\"act ") == 6, "step 2: 6 boxes");
    free(svg);
    CHECK_OK(cl_trace_render_svg(path, &t, 0));
    svg = read_all(path, &len);
    CHECK(svg && count(svg, "<rect class=\"act ") == 3, "step 0 = first: 3 boxes");
    free(svg);
    CHECK(cl_trace_render_svg(path, &t, 5) == CL_ERR_INVALID && strstr(cl_last_error(), "step 5"), "absent step: %s", cl_last_error());
    /* a rank with only a send in the step still gets its (idle) row */
    cl_trace_event snd = {.rank = 5, .track = 1, .step = 2, .kind = CL_ACT_SEND_GRAD, .t0 = 201, .t1 = 201};
    CHECK_OK(cl_trace_add(&t, &snd));
    CHECK_OK(cl_trace_render_svg(path, &t, 2));
    svg = read_all(path, &len);
    CHECK(svg && count(svg, "<rect class=\"act ") == 6 && count(svg, "\">rank ") == 3 && strstr(svg, ">rank 5</text>") &&
              strstr(svg, ">bubble 100.0%</text>"),
          "comm-only rank: a row, bubble 100%%");
    free(svg);
    cl_trace_free(&t);
    cl_trace_event e = {.rank = 0, .track = 1, .step = 1, .kind = CL_ACT_SEND_ACT, .t0 = 1, .t1 = 1};
    CHECK_OK(cl_trace_add(&t, &e));
    CHECK(cl_trace_render_svg(path, &t, 0) == CL_ERR_INVALID && strstr(cl_last_error(), "no compute"), "no compute: %s", cl_last_error());
    cl_trace_free(&t);
    CHECK(cl_trace_render_svg(path, &t, 0) == CL_ERR_INVALID, "empty trace: %s", cl_last_error());
    snprintf(path, sizeof path, "%s/no/such/dir/t.svg", tmpdir);
    small_trace(&t);
    CHECK(cl_trace_render_svg(path, &t, 0) == CL_ERR_IO && strstr(cl_last_error(), path), "unwritable: %s", cl_last_error());
    cl_trace_free(&t);
}

/* expect a read of text to fail with status want and a message containing words */
static void expect_read(const char *text, cl_status want, const char *words) {
    char path[160];
    snprintf(path, sizeof path, "%s/bad.json", tmpdir);
    write_text(path, text, strlen(text));
    cl_trace t;
    cl_status s = cl_trace_read_chrome(path, &t);
    CHECK(s == want && strstr(cl_last_error(), path) && strstr(cl_last_error(), words) && t.n == 0 && !t.ev,
          "%s -> %s: %s (wanted %s, '%s')", text, cl_status_name(s), cl_last_error(), cl_status_name(want), words);
    cl_trace_free(&t);
    unlink(path);
}

static void test_bad_input(void) {
    char path[160];
    cl_trace t;
    snprintf(path, sizeof path, "%s/absent.json", tmpdir);
    CHECK(cl_trace_read_chrome(path, &t) == CL_ERR_IO && strstr(cl_last_error(), path), "missing file: %s", cl_last_error());
    CHECK(cl_trace_read_chrome(tmpdir, &t) == CL_ERR_IO && strstr(cl_last_error(), "directory"), "directory: %s", cl_last_error());
    CHECK(cl_trace_read_chrome(NULL, &t) == CL_ERR_INVALID, "NULL path");
#define EV(x) "{\"traceEvents\":[" x "]}"
#define OKX "\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":1,\"dur\":2"
    expect_read("", CL_ERR_FORMAT, "not a JSON file");
    expect_read("this is not json", CL_ERR_FORMAT, "offset 0");
    expect_read("{\"traceEvents\":[", CL_ERR_FORMAT, "not a JSON file");
    expect_read("{\"events\":[]}", CL_ERR_FORMAT, "no \"traceEvents\"");
    expect_read("{\"traceEvents\":{}}", CL_ERR_FORMAT, "not an array");
    expect_read("42", CL_ERR_FORMAT, "not a Chrome trace");
    expect_read(EV("3"), CL_ERR_FORMAT, "traceEvents[0] must be an object");
    expect_read(EV("{" OKX ",\"args\":{\"kind\":\"FWD\"}},{\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":1,\"dur\":-2,\"args\":{\"kind\":\"FWD\"}}"),
                CL_ERR_FORMAT, "traceEvents[1]: negative dur");
    expect_read(EV("{" OKX ",\"args\":{\"kind\":\"FORWARD\"}}"), CL_ERR_FORMAT, "'FORWARD'");
    expect_read(EV("{" OKX ",\"args\":{\"kind\":7}}"), CL_ERR_FORMAT, "found a number");
    expect_read(EV("{\"ph\":\"X\",\"pid\":-1,\"tid\":0,\"ts\":1,\"dur\":2,\"args\":{\"kind\":\"FWD\"}}"), CL_ERR_FORMAT, "\"pid\"");
    expect_read(EV("{\"ph\":\"X\",\"pid\":0.5,\"tid\":0,\"ts\":1,\"dur\":2,\"args\":{\"kind\":\"FWD\"}}"), CL_ERR_FORMAT, "\"pid\"");
    expect_read(EV("{\"ph\":\"X\",\"pid\":0,\"tid\":5,\"ts\":1,\"dur\":2,\"args\":{\"kind\":\"FWD\"}}"), CL_ERR_FORMAT, "\"tid\"");
    expect_read(EV("{\"ph\":\"X\",\"pid\":0,\"tid\":0,\"dur\":2,\"args\":{\"kind\":\"FWD\"}}"), CL_ERR_FORMAT, "missing \"ts\"");
    expect_read(EV("{\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":1,\"args\":{\"kind\":\"FWD\"}}"), CL_ERR_FORMAT, "missing \"dur\"");
    expect_read(EV("{\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":\"1\",\"dur\":2,\"args\":{\"kind\":\"FWD\"}}"), CL_ERR_FORMAT, "found a string");
    expect_read(EV("{\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":1e308,\"dur\":1e308,\"args\":{\"kind\":\"FWD\"}}"), CL_ERR_FORMAT, "overflows");
    expect_read(EV("{" OKX ",\"args\":{\"kind\":\"FWD\",\"mb\":-1}}"), CL_ERR_FORMAT, "\"mb\"");
    expect_read(EV("{" OKX ",\"args\":{\"kind\":\"FWD\",\"chunk\":null}}"), CL_ERR_FORMAT, "\"chunk\"");
    expect_read(EV("{" OKX ",\"args\":{\"kind\":\"FWD\",\"step\":1.5}}"), CL_ERR_FORMAT, "\"step\"");
    /* writer: bad events are refused and nothing is written */
    snprintf(path, sizeof path, "%s/w.json", tmpdir);
    cl_trace_event bad[] = {
        {.rank = -1, .kind = CL_ACT_FWD},
        {.track = 2, .kind = CL_ACT_FWD},
        {.kind = (cl_act_kind)42},
        {.kind = CL_ACT_FWD, .mb = -3},
        {.kind = CL_ACT_FWD, .t0 = 2, .t1 = 1},
        {.kind = CL_ACT_FWD, .t0 = 0, .t1 = INFINITY},
        {.kind = CL_ACT_FWD, .t0 = NAN, .t1 = 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        small_trace(&t);
        CHECK_OK(cl_trace_add(&t, &bad[i]));
        char want[32];
        snprintf(want, sizeof want, "trace event %zu", t.n - 1);
        cl_status s = cl_trace_write_chrome(path, &t);
        CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), want) && strstr(cl_last_error(), path) && !exists(path),
              "bad event %zu -> %s: %s", i, cl_status_name(s), cl_last_error());
        cl_trace_free(&t);
    }
    small_trace(&t);
    snprintf(path, sizeof path, "%s/no/such/dir/w.json", tmpdir);
    CHECK(cl_trace_write_chrome(path, &t) == CL_ERR_IO && strstr(cl_last_error(), path), "unwritable: %s", cl_last_error());
    CHECK(cl_trace_write_chrome(NULL, &t) == CL_ERR_INVALID, "NULL path");
    cl_trace_free(&t);
}

/* Every truncation and many byte edits of a small written trace: each read
 * either fails with a message or succeeds with sane events; never crashes. */
static void test_fuzz(void) {
    char path[160], cut[160];
    snprintf(path, sizeof path, "%s/f.json", tmpdir);
    snprintf(cut, sizeof cut, "%s/cut.json", tmpdir);
    cl_trace t = {0};
    for (int i = 0; i < 3; i++) {
        cl_trace_event e = {.rank = i, .track = i == 1, .step = 1, .kind = i == 1 ? CL_ACT_SEND_ACT : CL_ACT_FWD, .mb = i, .t0 = i,
                            .t1 = i + 1};
        CHECK_OK(cl_trace_add(&t, &e));
    }
    CHECK_OK(cl_trace_write_chrome(path, &t));
    size_t len;
    char *full = read_all(path, &len);
    CHECK(full && len > 100, "trace text");
    if (!full) return;
    size_t failed = 0, ok_full = 0;
    for (size_t n = 0; n < len; n++) {
        write_text(cut, full, n);
        cl_trace back;
        cl_status s = cl_trace_read_chrome(cut, &back);
        if (s) {
            failed++;
            CHECK(strlen(cl_last_error()) > 0 && back.n == 0, "truncated at %zu: a message", n);
        } else {
            ok_full += back.n == t.n;
        }
        cl_trace_free(&back);
    }
    /* only the cut of the final newline parses */
    CHECK(failed == len - 1 && ok_full == 1, "%zu of %zu truncations failed, %zu parsed whole", failed, len, ok_full);
    static const char edits[] = "\"{}[],:-0119e.xX\\";
    size_t tries = 0;
    for (size_t i = 0; i < len; i += 3)
        for (size_t k = 0; k < sizeof edits - 1; k += 4) {
            char *m = malloc(len);
            memcpy(m, full, len);
            m[i] = edits[(k + i) % (sizeof edits - 1)];
            write_text(cut, m, len);
            free(m);
            cl_trace back;
            cl_status s = cl_trace_read_chrome(cut, &back);
            if (!s) {
                int sane = 1;
                for (size_t j = 0; j < back.n; j++)
                    sane &= back.ev[j].rank >= 0 && (back.ev[j].track == 0 || back.ev[j].track == 1) && back.ev[j].t1 >= back.ev[j].t0 &&
                            (unsigned)back.ev[j].kind <= CL_ACT_OPT_STEP;
                CHECK(sane, "edit at %zu: events out of range", i);
                double b[4];
                if (back.n) cl_trace_bubble(&back, 0, 4, b);
            }
            cl_trace_free(&back);
            tries++;
        }
    CHECK(tries > 100, "%zu edits", tries);
    free(full);
    unlink(cut);
    unlink(path);
    cl_trace_free(&t);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cl_test_trace_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_add();
    test_round_trip();
    test_sim_bubble();
    test_bubble_hand();
    test_svg();
    test_bad_input();
    test_fuzz();
    rmdir(tmpdir);
    return cl_test_report("test_trace");
}
