/* Tests of the pipeline schedules and the simulator (src/pipeline/).
 *
 * Every generator over a grid of (p, m, v), m < p and m not a multiple of p
 * included where the kind allows: the simulator accepts the schedule; each
 * rank has m*v forwards and m*v backwards (B and W, or BWD); bubble fractions
 * equal the closed forms to 1e-9; peak live micro-batches on stage 0 (GPipe m,
 * 1F1B min(p, m), ZB-H1 at most min(p, m)); one output-gradient receive
 * buffer per stage but the last (two where a receive is moved early).
 * Broken schedules (a receive
 * removed, a backward moved before its forward, a send removed, a duplicate
 * or missing compute action, two ranks waiting on each other) are rejected
 * with a message naming the rank. Bad inputs give CL_ERR_INVALID. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleave/schedule.h"
#include "common/check.h"

static const cl_sched_kind kinds[] = {CL_SCHED_GPIPE, CL_SCHED_1F1B, CL_SCHED_INTERLEAVED, CL_SCHED_ZB_H1};

static void count_actions(const cl_schedule *s) {
    for (int r = 0; r < s->p; r++) {
        int nf = 0, nb = 0, nw = 0, nbwd = 0;
        for (int i = 0; i < s->len[r]; i++) {
            cl_act_kind k = s->acts[r][i].kind;
            nf += k == CL_ACT_FWD;
            nb += k == CL_ACT_BWD_INPUT;
            nw += k == CL_ACT_BWD_WEIGHT;
            nbwd += k == CL_ACT_BWD;
        }
        int mv = s->m * s->v;
        CHECK(nf == mv, "%s p %d m %d v %d rank %d: %d forwards, want %d", cl_sched_kind_name(s->kind), s->p, s->m, s->v, r, nf, mv);
        if (s->kind == CL_SCHED_ZB_H1)
            CHECK(nb == mv && nw == mv && nbwd == 0, "zb-h1 p %d m %d rank %d: B %d W %d BWD %d, want %d %d 0", s->p, s->m, r, nb, nw, nbwd,
                  mv, mv);
        else
            CHECK(nbwd == mv && nb == 0 && nw == 0, "%s p %d m %d v %d rank %d: BWD %d B %d W %d", cl_sched_kind_name(s->kind), s->p, s->m,
                  s->v, r, nbwd, nb, nw);
    }
}

static void check_one(cl_sched_kind kind, int p, int m, int v) {
    cl_schedule s;
    cl_status st = cl_schedule_make(kind, p, m, v, &s);
    CHECK(st == CL_OK, "make %s p %d m %d v %d: %s", cl_sched_kind_name(kind), p, m, v, cl_last_error());
    if (st) return;
    count_actions(&s);
    cl_sim_result res;
    st = cl_schedule_simulate(&s, NULL, &res);
    CHECK(st == CL_OK, "simulate %s p %d m %d v %d: %s", cl_sched_kind_name(kind), p, m, v, cl_last_error());
    if (st) {
        cl_schedule_free(&s);
        return;
    }
    const char *kn = cl_sched_kind_name(kind);
    double want = cl_schedule_closed_form_bubble(kind, p, m, v, 1, 1, 1);
    if (kind == CL_SCHED_GPIPE || kind == CL_SCHED_1F1B || (kind == CL_SCHED_INTERLEAVED && m % p == 0)) {
        CHECK(fabs(res.bubble_total - want) < 1e-9, "%s p %d m %d v %d: bubble %.12f, closed form %.12f", kn, p, m, v, res.bubble_total,
              want);
        for (int r = 0; r < p; r++)
            CHECK(fabs(res.bubble[r] - want) < 1e-9, "%s p %d m %d v %d rank %d: bubble %.12f, want %.12f", kn, p, m, v, r, res.bubble[r],
                  want);
    }
    int mp = p < m ? p : m;
    if (kind == CL_SCHED_GPIPE) CHECK(res.peak_live[0] == m, "gpipe p %d m %d: peak live %d, want %d", p, m, res.peak_live[0], m);
    if (kind == CL_SCHED_1F1B) {
        CHECK(res.peak_live[0] == mp, "1f1b p %d m %d: peak live %d, want %d", p, m, res.peak_live[0], mp);
        for (int r = 0; r < p; r++) {
            int w = p - r < m ? p - r : m;
            CHECK(res.peak_live[r] == w, "1f1b p %d m %d rank %d: peak live %d, want %d", p, m, r, res.peak_live[r], w);
        }
    }
    if (kind == CL_SCHED_ZB_H1) {
        for (int r = 0; r < p; r++)
            CHECK(res.peak_live[r] <= mp, "zb-h1 p %d m %d rank %d: peak live %d > %d", p, m, r, res.peak_live[r], mp);
        if (m >= p) {
            /* idle per rank (p-1)(F+B-W) with F = B = W = 1: p - 1 */
            for (int r = 0; r < p; r++) {
                double idle = res.makespan - res.busy[r];
                CHECK(fabs(idle - (p - 1)) < 1e-9, "zb-h1 p %d m %d rank %d: idle %.6f, want %d", p, m, r, idle, p - 1);
            }
            CHECK(fabs(res.bubble_total - want) < 1e-9, "zb-h1 p %d m %d: bubble %.12f, want %.12f", p, m, res.bubble_total, want);
        }
    }
    /* input-gradient send buffers: a buffer is free again only after its
     * destination's RECV_GRAD has ended in the simulated timeline, the pool
     * holds at least one buffer where there are gradients to send, at most m */
    int *free_at = malloc((size_t)(v * m) * sizeof *free_at), peak[64];
    for (int r = 0; free_at && r < p; r++) {
        CHECK_OK(cl_schedule_grad_buffers(&s, r, free_at, peak));
        for (int c = 0; c < v; c++) {
            int st = c * p + r;
            CHECK(p == 1 || st == 0 ? peak[c] == 0 : peak[c] >= 1 && peak[c] <= m, "%s p %d m %d v %d rank %d chunk %d: %d send buffers",
                  kn, p, m, v, r, c, peak[c]);
            for (int mb = 0; p > 1 && st > 0 && mb < m; mb++) {
                int f = free_at[c * m + mb];
                int send = cl_schedule_find(&s, r, CL_ACT_SEND_GRAD, mb, c);
                int q = (st - 1) % p, ri = cl_schedule_find(&s, q, CL_ACT_RECV_GRAD, mb, (st - 1) / p);
                CHECK(send >= 0 && ri >= 0 && f > send, "%s p %d m %d rank %d mb %d: buffer free at %d before its send %d", kn, p, m, r, mb,
                      f, send);
                if (f < s.len[r] && ri >= 0)
                    CHECK(res.end[q][ri] <= res.end[r][f - 1] + 1e-12, "%s p %d m %d v %d rank %d mb %d: free at %d before the receive ended",
                          kn, p, m, v, r, mb, f);
            }
        }
    }
    free(free_at);
    /* output-gradient receive buffers: every receive comes right before its
     * backward (B under zb-h1: W reads a copy), so one on every stage but
     * the last, which receives none */
    for (int r = 0; r < p; r++)
        for (int c = 0; c < v; c++) {
            int st = c * p + r, want = p > 1 && st < p * v - 1 ? 1 : 0, got = cl_schedule_chunk_douts(&s, r, c);
            CHECK(got == want, "%s p %d m %d v %d rank %d chunk %d: %d output-gradient buffers, want %d", kn, p, m, v, r, c, got, want);
        }
    /* timeline sanity: every action ends no earlier than it starts, within the makespan */
    for (int r = 0; r < p; r++)
        for (int i = 0; i < s.len[r]; i++)
            CHECK(res.start[r][i] <= res.end[r][i] && res.end[r][i] <= res.makespan + 1e-12, "%s rank %d action %d times", kn, r, i);
    cl_sim_result_free(&res);
    cl_schedule_free(&s);
}

static void test_grid(void) {
    static const int ps[] = {1, 2, 3, 4, 8};
    static const int ms[] = {1, 2, 3, 4, 5, 7, 8, 12, 16, 24};
    for (int pi = 0; pi < 5; pi++)
        for (int mi = 0; mi < 10; mi++) {
            int p = ps[pi], m = ms[mi];
            check_one(CL_SCHED_GPIPE, p, m, 1);
            check_one(CL_SCHED_1F1B, p, m, 1);
            check_one(CL_SCHED_ZB_H1, p, m, 1);
            for (int v = 2; v <= 3; v++)
                if (m % p == 0) check_one(CL_SCHED_INTERLEAVED, p, m, v);
        }
    /* larger m for interleaved */
    check_one(CL_SCHED_INTERLEAVED, 4, 32, 4);
    check_one(CL_SCHED_INTERLEAVED, 8, 64, 2);
}

/* ZB-H1 with unequal costs: idle per rank (p-1)(T_F + T_B - T_W). The paper
 * states the formula for its hand-made ZB-H1; with this schedule it holds
 * exactly when m >= p and T_W <= T_F and T_W <= T_B (a sweep over
 * T in {0.5, 1, 1.5, 2}^3 found it exact under that condition and failing
 * whenever T_W exceeds T_F or T_B, e.g. F 1 B 1 W 2, p 2, m 2: idle 1, not 0:
 * a W longer than an F cannot hide in the gap one F leaves). */
static void zb_costs(int p, int m, double tf, double tb, double tw) {
    cl_schedule s;
    CHECK_OK(cl_schedule_make(CL_SCHED_ZB_H1, p, m, 1, &s));
    cl_sched_costs c = cl_sched_costs_uniform(tf, tb, tw);
    cl_sim_result res;
    cl_status st = cl_schedule_simulate(&s, &c, &res);
    CHECK(st == CL_OK, "zb-h1 p %d m %d: %s", p, m, cl_last_error());
    if (st == CL_OK) {
        double want = (p - 1) * (tf + tb - tw);
        for (int r = 0; r < p; r++) {
            double idle = res.makespan - res.busy[r];
            CHECK(fabs(idle - want) < 1e-9, "zb-h1 p %d m %d F %g B %g W %g rank %d: idle %.6f, want (p-1)(F+B-W) = %.6f", p, m, tf, tb, tw,
                  r, idle, want);
        }
        double cf = cl_schedule_closed_form_bubble(CL_SCHED_ZB_H1, p, m, 1, tf, tb, tw);
        CHECK(fabs(res.bubble_total - cf) < 1e-9, "zb-h1 closed form %.9f vs %.9f", cf, res.bubble_total);
        cl_sim_result_free(&res);
    }
    cl_schedule_free(&s);
}

static void test_zb_costs(void) {
    static const int ps[] = {2, 3, 4, 8};
    for (int i = 0; i < 4; i++)
        for (int m = ps[i]; m <= 3 * ps[i]; m += ps[i] - 1 > 0 ? ps[i] - 1 : 1) {
            zb_costs(ps[i], m, 1, 1, 1);
            zb_costs(ps[i], m, 1, 1.2, 0.8);
            zb_costs(ps[i], m, 1, 1, 0.5);
            zb_costs(ps[i], m, 1.5, 1.2, 1);
            zb_costs(ps[i], m, 2, 0.5, 0.5);
            zb_costs(ps[i], m, 1, 2, 1);
        }
    CHECK(cl_schedule_closed_form_bubble(CL_SCHED_ZB_H1, 4, 8, 1, 1, 1, 2) < 0, "no closed form when T_W > T_F");
    CHECK(cl_schedule_closed_form_bubble(CL_SCHED_ZB_H1, 4, 3, 1, 1, 1, 1) < 0, "no closed form when m < p");
}

/* Simulate, expect CL_ERR_INVALID with a message holding each of the words. */
static void expect_invalid(const cl_schedule *s, const char *what, const char *w1, const char *w2) {
    cl_sim_result res;
    cl_status st = cl_schedule_simulate(s, NULL, &res);
    CHECK(st == CL_ERR_INVALID, "%s: simulate gave %s, want invalid", what, cl_status_name(st));
    if (st == CL_OK) {
        cl_sim_result_free(&res);
        return;
    }
    const char *msg = cl_last_error();
    CHECK(strstr(msg, w1) && (!w2 || strstr(msg, w2)), "%s: message '%s' lacks '%s' / '%s'", what, msg, w1, w2 ? w2 : "");
}

static void test_broken(void) {
    for (int ki = 0; ki < 4; ki++) {
        cl_sched_kind k = kinds[ki];
        int v = k == CL_SCHED_INTERLEAVED ? 2 : 1, p = 4, m = 8;
        cl_schedule s;
        /* a receive removed: rank 2 forwards micro-batch 3 without its input */
        CHECK_OK(cl_schedule_make(k, p, m, v, &s));
        int i = cl_schedule_find(&s, 2, CL_ACT_RECV_ACT, 3, 0);
        CHECK(i >= 0, "%s: no RECV_ACT 3 on rank 2", cl_sched_kind_name(k));
        if (i >= 0) {
            CHECK_OK(cl_schedule_remove(&s, 2, i));
            expect_invalid(&s, "receive removed", "rank 2", "RECV_ACT");
        }
        cl_schedule_free(&s);

        /* a gradient receive removed on rank 1 */
        CHECK_OK(cl_schedule_make(k, p, m, v, &s));
        i = cl_schedule_find(&s, 1, CL_ACT_RECV_GRAD, 5, 0);
        if (i >= 0) {
            CHECK_OK(cl_schedule_remove(&s, 1, i));
            expect_invalid(&s, "grad receive removed", "rank 1", "RECV_GRAD");
        }
        cl_schedule_free(&s);

        /* a backward moved before its forward on rank 1 */
        CHECK_OK(cl_schedule_make(k, p, m, v, &s));
        cl_act_kind bk = k == CL_SCHED_ZB_H1 ? CL_ACT_BWD_INPUT : CL_ACT_BWD;
        i = cl_schedule_find(&s, 1, bk, 2, 0);
        int f = cl_schedule_find(&s, 1, CL_ACT_FWD, 2, 0);
        CHECK(i > f && f >= 0, "%s: rank 1 B 2 at %d, F 2 at %d", cl_sched_kind_name(k), i, f);
        if (i > f && f >= 0) {
            cl_action a = s.acts[1][i];
            CHECK_OK(cl_schedule_remove(&s, 1, i));
            CHECK_OK(cl_schedule_insert(&s, 1, f, a));
            expect_invalid(&s, "backward before forward", "rank 1", NULL);
        }
        cl_schedule_free(&s);

        /* a send removed: the receive on rank 3 waits forever */
        CHECK_OK(cl_schedule_make(k, p, m, v, &s));
        i = cl_schedule_find(&s, 2, CL_ACT_SEND_ACT, 4, 0);
        if (i >= 0) {
            CHECK_OK(cl_schedule_remove(&s, 2, i));
            expect_invalid(&s, "send removed", "deadlock: rank 3 is stuck", "RECV_ACT mb 4 chunk 0), waiting for stage 2 on rank 2, which has no matching send left");
        }
        cl_schedule_free(&s);

        /* a duplicate forward */
        CHECK_OK(cl_schedule_make(k, p, m, v, &s));
        f = cl_schedule_find(&s, 0, CL_ACT_FWD, 1, 0);
        CHECK_OK(cl_schedule_insert(&s, 0, f, s.acts[0][f]));
        expect_invalid(&s, "duplicate forward", "rank 0", "duplicate");
        cl_schedule_free(&s);

        /* a missing W / BWD on the last rank (its GRAD_SYNC notices) */
        CHECK_OK(cl_schedule_make(k, p, m, v, &s));
        i = cl_schedule_find(&s, 3, k == CL_SCHED_ZB_H1 ? CL_ACT_BWD_WEIGHT : CL_ACT_BWD, m - 1, 0);
        if (k != CL_SCHED_ZB_H1 && i >= 0 && i + 1 < s.len[3] && s.acts[3][i + 1].kind == CL_ACT_SEND_GRAD)
            CHECK_OK(cl_schedule_remove(&s, 3, i + 1));
        CHECK(i >= 0, "%s: no backward on rank 3", cl_sched_kind_name(k));
        if (i >= 0) {
            CHECK_OK(cl_schedule_remove(&s, 3, i));
            expect_invalid(&s, "missing backward", "rank 3", NULL);
        }
        cl_schedule_free(&s);
    }
    /* an extra send with no receive */
    cl_schedule s;
    CHECK_OK(cl_schedule_make(CL_SCHED_1F1B, 2, 2, 1, &s));
    int i = cl_schedule_find(&s, 0, CL_ACT_RECV_GRAD, 1, 0);
    CHECK_OK(cl_schedule_remove(&s, 0, i));
    i = cl_schedule_find(&s, 0, CL_ACT_BWD, 1, 0);
    CHECK_OK(cl_schedule_remove(&s, 0, i));
    CHECK_OK(cl_schedule_remove(&s, 0, s.len[0] - 1)); /* OPT_STEP */
    CHECK_OK(cl_schedule_remove(&s, 0, s.len[0] - 1)); /* GRAD_SYNC */
    expect_invalid(&s, "unreceived gradient send", "rank 1 sends the gradient of micro-batch 1", "never receives");
    cl_schedule_free(&s);
    /* two ranks waiting on each other: rank 0 waits for a gradient before sending micro-batch 0 */
    CHECK_OK(cl_schedule_make(CL_SCHED_GPIPE, 2, 2, 1, &s));
    i = cl_schedule_find(&s, 0, CL_ACT_RECV_GRAD, 0, 0);
    cl_action a = s.acts[0][i];
    CHECK_OK(cl_schedule_remove(&s, 0, i));
    CHECK_OK(cl_schedule_insert(&s, 0, 0, a));
    expect_invalid(&s, "circular wait", "deadlock: rank 0 is stuck at action 0 (RECV_GRAD mb 0 chunk 0)", "(2 ranks blocked)");
    cl_schedule_free(&s);
    /* a bad micro-batch index */
    CHECK_OK(cl_schedule_make(CL_SCHED_1F1B, 1, 2, 1, &s));
    s.acts[0][0].mb = 7;
    expect_invalid(&s, "bad micro-batch", "rank 0, action 0", "micro-batch 7 is not in 0..1");
    cl_schedule_free(&s);
    /* bad costs */
    CHECK_OK(cl_schedule_make(CL_SCHED_1F1B, 2, 2, 1, &s));
    cl_sched_costs c = cl_sched_costs_uniform(1, -1, 1);
    cl_sim_result res;
    CHECK(cl_schedule_simulate(&s, &c, &res) == CL_ERR_INVALID && strstr(cl_last_error(), "cost B"), "negative cost: %s", cl_last_error());
    cl_schedule_free(&s);
}

static void expect_make_error(cl_sched_kind k, int p, int m, int v, const char *words) {
    cl_schedule s;
    cl_status st = cl_schedule_make(k, p, m, v, &s);
    CHECK(st == CL_ERR_INVALID && strstr(cl_last_error(), words), "make %s p %d m %d v %d: %s '%s', want '%s'", cl_sched_kind_name(k), p, m,
          v, cl_status_name(st), cl_last_error(), words);
    CHECK(s.acts == NULL && s.len == NULL, "failed make leaves the schedule empty");
    if (st == CL_OK) cl_schedule_free(&s);
}

static void test_bad_input(void) {
    for (int ki = 0; ki < 4; ki++) {
        int v = kinds[ki] == CL_SCHED_INTERLEAVED ? 2 : 1;
        expect_make_error(kinds[ki], 0, 4, v, "at least one rank");
        expect_make_error(kinds[ki], -3, 4, v, "got --pp -3");
        expect_make_error(kinds[ki], 2, 0, v, "at least one micro-batch");
        expect_make_error(kinds[ki], 2, -1, v, "got -1");
        expect_make_error(kinds[ki], 2, 2, 0, "at least 1");
    }
    expect_make_error(CL_SCHED_INTERLEAVED, 4, 6, 2, "micro-batches (6) to be a multiple of the pipeline ranks (4)");
    expect_make_error(CL_SCHED_INTERLEAVED, 4, 8, 1, "at least 2 virtual stages");
    expect_make_error(CL_SCHED_1F1B, 4, 8, 2, "1f1b takes one stage per rank");
    expect_make_error(CL_SCHED_GPIPE, 4, 8, 3, "gpipe takes one stage per rank");
    expect_make_error(CL_SCHED_ZB_H1, 4, 8, 2, "zb-h1 takes one stage per rank");
    expect_make_error(CL_SCHED_1F1B, 5000, 8, 1, "at most 4096");
    expect_make_error(CL_SCHED_1F1B, 4096, 4096, 1, "past the limit");
    expect_make_error((cl_sched_kind)9, 2, 2, 1, "unknown schedule kind");
    cl_sched_kind k;
    CHECK(cl_sched_kind_parse("zb-h2", &k) == CL_ERR_INVALID && strstr(cl_last_error(), "unknown schedule 'zb-h2'"), "parse: %s",
          cl_last_error());
    static const char *const names[] = {"gpipe", "1f1b", "interleaved", "zb-h1"};
    for (int i = 0; i < 4; i++) {
        CHECK_OK(cl_sched_kind_parse(names[i], &k));
        CHECK(k == kinds[i] && !strcmp(cl_sched_kind_name(k), names[i]), "parse %s", names[i]);
    }
}

/* The 1F1B order on p 4, m 8, rank 0 and rank 3, compute only. */
static void test_orders(void) {
    cl_schedule s;
    CHECK_OK(cl_schedule_make(CL_SCHED_1F1B, 4, 8, 1, &s));
    char buf[256];
    for (int r = 0; r < 4; r += 3) {
        size_t n = 0;
        buf[0] = 0;
        for (int i = 0; i < s.len[r]; i++) {
            const cl_action *a = &s.acts[r][i];
            if (a->kind == CL_ACT_FWD || a->kind == CL_ACT_BWD)
                n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%c%d", n ? " " : "", a->kind == CL_ACT_FWD ? 'F' : 'B', a->mb);
        }
        const char *want = r == 0 ? "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7" : "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7";
        CHECK(!strcmp(buf, want), "1f1b rank %d: %s, want %s", r, buf, want);
    }
    /* rank 1 of 4: RECV_ACT before each F, SEND_ACT after, RECV_GRAD before each B, SEND_GRAD after */
    CHECK(s.acts[1][0].kind == CL_ACT_RECV_ACT && s.acts[1][1].kind == CL_ACT_FWD && s.acts[1][2].kind == CL_ACT_SEND_ACT,
          "comm placement around F");
    CHECK(s.acts[1][s.len[1] - 2].kind == CL_ACT_GRAD_SYNC && s.acts[1][s.len[1] - 1].kind == CL_ACT_OPT_STEP, "GRAD_SYNC, OPT_STEP last");
    cl_schedule_free(&s);
}

/* Receives posted early hold more output-gradient buffers: 1F1B p 2 m 4 with
 * rank 0's RECV_GRAD of micro-batch 1 moved up beside that of 0 (before the
 * backward of 0) holds two at once (the simulator still accepts it), and the
 * count is taken per chunk. */
static void test_douts_early(void) {
    cl_schedule s;
    CHECK_OK(cl_schedule_make(CL_SCHED_1F1B, 2, 4, 1, &s));
    CHECK(cl_schedule_chunk_douts(&s, 0, 0) == 1 && cl_schedule_chunk_douts(&s, 1, 0) == 0, "1f1b p 2 m 4: %d and %d buffers",
          cl_schedule_chunk_douts(&s, 0, 0), cl_schedule_chunk_douts(&s, 1, 0));
    CHECK_OK(cl_schedule_remove(&s, 0, cl_schedule_find(&s, 0, CL_ACT_RECV_GRAD, 1, 0)));
    CHECK_OK(cl_schedule_insert(&s, 0, cl_schedule_find(&s, 0, CL_ACT_RECV_GRAD, 0, 0) + 1, (cl_action){CL_ACT_RECV_GRAD, 1, 0}));
    cl_sim_result res;
    cl_status st = cl_schedule_simulate(&s, NULL, &res);
    CHECK(st == CL_OK, "early receives: %s", cl_last_error());
    if (!st) cl_sim_result_free(&res);
    CHECK(cl_schedule_chunk_douts(&s, 0, 0) == 2, "early receives: %d buffers, want 2", cl_schedule_chunk_douts(&s, 0, 0));
    CHECK(cl_schedule_chunk_douts(&s, 0, 1) == 0, "chunk 1 of a one-chunk schedule: %d buffers", cl_schedule_chunk_douts(&s, 0, 1));
    cl_schedule_free(&s);
}

int main(void) {
    test_grid();
    test_douts_early();
    test_zb_costs();
    test_broken();
    test_bad_input();
    test_orders();
    return cl_test_report("test_schedule");
}
