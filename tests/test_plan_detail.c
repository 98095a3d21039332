/* Tests of one configuration in detail (cl_plan_detail_of: per-rank memory
 * and the simulated step as a trace) and of the helpers `cleave train
 * --auto` uses (src/plan/auto.c): the detail agrees with cl_plan_eval, its
 * ranks' bytes with cl_memory_predict on this machine, its trace with the
 * schedule's actions; the flags a configuration prints are train's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "plan/plan.h"

static void check_trace(const cl_plan_detail *d, int m, int tp_events) {
    int p = d->p, compute[64] = {0}, tpc[64] = {0}, sync[64] = {0}, opt[64] = {0};
    double end = 0;
    for (size_t i = 0; i < d->trace.n; i++) {
        const cl_trace_event *e = &d->trace.ev[i];
        CHECK(e->rank >= 0 && e->rank < p && e->t1 >= e->t0 && e->t0 >= 0, "event %zu: rank %d [%g, %g]", i, e->rank, e->t0, e->t1);
        if (e->rank < 0 || e->rank >= p) continue;
        if (e->t1 > end) end = e->t1;
        if (cl_trace_is_compute(e->kind)) (e->track == CL_TRACK_COMPUTE ? compute : tpc)[e->rank]++;
        sync[e->rank] += e->kind == CL_ACT_GRAD_SYNC;
        opt[e->rank] += e->kind == CL_ACT_OPT_STEP;
    }
    for (int r = 0; r < p; r++) {
        CHECK(compute[r] == 2 * m, "rank %d: %d compute actions, want F and BWD of %d micro-batches", r, compute[r], m);
        CHECK(tpc[r] == (tp_events ? 2 * m : 0), "rank %d: %d tensor-parallel events", r, tpc[r]);
        CHECK(sync[r] == 1 && opt[r] == 1, "rank %d: %d syncs, %d steps", r, sync[r], opt[r]);
    }
    CHECK(fabs(end - d->r.step_s) <= 1e-12 * d->r.step_s, "the trace ends at %.9g, the step is %.9g s", end, d->r.step_s);
}

/* A GPU description: the detail is cl_plan_eval's result, its fullest bar the peak. */
static void test_gpu(void) {
    cl_plan_query q;
    memset(&q, 0, sizeof q);
    CHECK_OK(cl_model_preset("gpt2", &q.model));
    q.T = 1024, q.devices = 16, q.global_batch = 32, q.vocab_div = 128;
    CHECK_OK(cl_hw_builtin("a100", &q.hw));
    cl_plan_cfg c = {2, 2, 4, 1, 2, CL_SCHED_1F1B, 1, 0, 0, 1, 0, 0, 1, 1, 0};
    cl_plan_result r;
    cl_plan_detail d;
    CHECK_OK(cl_plan_eval(&q, &c, &r));
    CHECK_OK(cl_plan_detail_of(&q, &c, &d));
    CHECK(d.p == 4 && d.r.step_s == r.step_s && d.r.peak_bytes == r.peak_bytes, "detail step %g peak %g, eval %g %g", d.r.step_s,
          d.r.peak_bytes, r.step_s, r.peak_bytes);
    double most = 0;
    for (int k = 0; k < d.p; k++) {
        double t = 0;
        for (int j = 0; j < CL_MEM_NCAT; j++) t += d.cat[k][j];
        if (t > most) most = t;
    }
    CHECK(most == r.peak_bytes, "fullest bar %g, peak %g", most, r.peak_bytes);
    check_trace(&d, 32 / (2 * 2), 1);
    cl_plan_detail_free(&d);
}

/* This machine (default figures, exact memory): each pipeline rank's bytes are cl_memory_predict's. */
static void test_this(void) {
    setenv("CLEAVE_HW", "/nonexistent/cleave-this.json", 1);
    cl_hw hw;
    int cal = 1;
    CHECK_OK(cl_plan_this_hw(&hw, &cal));
    CHECK(cal == 0 && hw.exact_memory && hw.devices_per_node >= 1 && hw.device_memory > 0, "default description");
    cl_train_config tc;
    cl_train_config_default(&tc);
    CHECK_OK(cl_model_preset("gpt2-tiny", &tc.model));
    tc.global_batch = 8;
    cl_plan_query q;
    cl_plan_query_for_train(&tc, 2, &hw, &q);
    CHECK(q.devices == 2 && q.global_batch == 8 && q.T == 64 && q.base == &tc && q.fix.dp == -1, "query for the run");
    cl_plan_cfg c = {1, 1, 2, 1, 2, CL_SCHED_ZB_H1, 0, 1, 0, 0, 0, 0, 1, 1, 0};
    cl_plan_detail d;
    CHECK_OK(cl_plan_detail_of(&q, &c, &d));
    cl_train_config run = tc;
    cl_plan_cfg_to_train(&c, &run);
    CHECK(run.micro_batch == 2 && run.schedule == CL_SCHED_ZB_H1 && run.recompute == 1 && run.tp == 1 && run.virtual_stages == 0,
          "the config into train's fields");
    cl_mem_rank mr[2];
    CHECK_OK(cl_memory_predict(&run, 1, 2, mr));
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < CL_MEM_NCAT; k++)
            CHECK(d.cat[mr[i].pp_rank][k] == (double)mr[i].bytes[k], "rank %d %s: detail %g, cl_memory_predict %zu", i,
                  cl_mem_cat_name((cl_mem_cat)k), d.cat[mr[i].pp_rank][k], mr[i].bytes[k]);
    /* zb-h1 splits the backward: F, B and W per micro-batch */
    int w = 0;
    for (size_t i = 0; i < d.trace.n; i++) w += d.trace.ev[i].kind == CL_ACT_BWD_WEIGHT;
    CHECK(w == 2 * 4, "%d W actions, want 4 micro-batches on 2 ranks", w);
    cl_plan_detail_free(&d);
}

static void test_flags(void) {
    char b[256];
    cl_plan_cfg c = {2, 1, 2, 2, 4, CL_SCHED_INTERLEAVED, 1, 2, 0, 0, 0, 0, 1, 1, 0};
    cl_plan_cfg_flags(&c, b, sizeof b);
    CHECK(!strcmp(b, "--dp 2 --tp 1 --pp 2 --micro-batch-size 4 --zero 1 --recompute full --schedule interleaved --virtual-stages 2"),
          "%s", b);
    cl_plan_cfg o = {1, 2, 1, 1, 8, CL_SCHED_1F1B, 0, 0, 1, 0, 0, 0, 1, 1, 0};
    cl_plan_cfg_flags(&o, b, sizeof b);
    CHECK(!strcmp(b, "--dp 1 --tp 2 --pp 1 --micro-batch-size 8 --zero 0 --recompute none --sequence-parallel"), "%s", b);
    cl_plan_cfg_flags(&c, b, 20); /* truncated, terminated */
    CHECK(strlen(b) == 19, "truncated to %zu", strlen(b));
    CHECK(cl_plan_cfg_distance(&c, &c) == 0 && cl_plan_cfg_distance(&o, &c) == 8, "distance %d", cl_plan_cfg_distance(&o, &c));
    cl_plan_cfg one = o;
    one.schedule = CL_SCHED_GPIPE; /* the schedule of one stage does not count */
    CHECK(cl_plan_cfg_distance(&one, &o) == 0, "one stage's schedule");
    cl_plan_cfg host = o, disk = o;
    host.offload = 1, disk.offload = 2;
    cl_plan_cfg_flags(&host, b, sizeof b);
    CHECK(strstr(b, " --offload-optimizer host") && !strstr(b, "--offload-dir"), "%s", b);
    cl_plan_cfg_flags(&disk, b, sizeof b);
    CHECK(strstr(b, " --offload-optimizer disk --offload-dir DIR"), "%s", b);
    CHECK(cl_plan_cfg_distance(&host, &o) == 1 && cl_plan_cfg_distance(&disk, &host) == 1, "offload counts as one change");
}

int main(void) {
    test_gpu();
    test_this();
    test_flags();
    return cl_test_report("test_plan_detail");
}
