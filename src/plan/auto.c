/* The planner for a training run on this machine: `cleave train --auto`
 * and the out-of-memory refusal's nearest fitting configurations (see
 * plan.h and docs/ARCHITECTURE.md "Planner"). */
#include "plan/plan.h"

#include "cleave/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *cl_plan_this_path(void) {
    const char *e = getenv("CLEAVE_HW");
    return e && *e ? e : "cleave-this.json";
}

/* Without a calibration: round figures of one core of the development
 * machine's class (an AVX2 core: `cleave plan calibrate` measured 95 to 139
 * GFLOP/s FP32 peak, GEMM efficiencies about 0.5 at m, n, k 256, 10 to 17
 * GB/s memcpy), a thread all-reduce link of 2 GB/s and 20 us; the cores and
 * the memory are this machine's. They rank configurations; calibrate for
 * times of this machine. */
static void this_default(cl_hw *hw) {
    memset(hw, 0, sizeof *hw);
    snprintf(hw->name, sizeof hw->name, "this (default figures)");
    int cores = cl_cores_available();
    hw->devices_per_node = cores > 0 ? cores : 1;
    hw->peak_fp32 = 100e9;
    /* bf16: AVX512_BF16's dot product does two multiply-adds a lane where the FMA does one; without it F32's
     * figure (oneDNN widens the operands, slower than that: a ranking figure as the rest) */
    hw->peak_bf16 = cl_cpu_features() & CL_CPU_AVX512BF16 ? 2 * hw->peak_fp32 : hw->peak_fp32;
    hw->gemm_max_eff = 0.6, hw->gemm_half = 64;
    hw->mem_bw = 10e9;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    hw->device_memory = pages > 0 && psz > 0 ? (double)pages * (double)psz / hw->devices_per_node : 1e9;
    hw->intra_bw = hw->inter_bw = 2e9;
    hw->intra_lat = hw->inter_lat = 20e-6;
    hw->exact_memory = 1;
}

cl_status cl_plan_this_hw(cl_hw *hw, int *calibrated) {
    const char *p = cl_plan_this_path();
    *calibrated = 0;
    if (access(p, F_OK)) {
        this_default(hw);
        return CL_OK;
    }
    CL_TRY(cl_hw_load(p, hw));
    if (!hw->exact_memory) return cl_error(CL_ERR_INVALID, "%s: not a description of this machine (no \"exact_memory\": true)", p);
    *calibrated = 1;
    return CL_OK;
}

void cl_plan_query_for_train(const cl_train_config *tc, int ranks, const cl_hw *hw, cl_plan_query *q) {
    memset(q, 0, sizeof *q);
    int *fix = (int *)&q->fix; /* every dimension searched (-1), whatever fields cl_plan_cfg has */
    for (size_t i = 0; i < sizeof q->fix / sizeof(int); i++) fix[i] = -1;
    q->fix.bf16 = tc->dtype == CL_BF16; /* the run's own number format */
    q->model = tc->model;
    q->T = cl_model_family_of(&tc->model)->tokens ? (tc->seq_len ? tc->seq_len : tc->model.seq_len) : 1;
    q->devices = ranks;
    q->global_batch = tc->global_batch;
    q->device_memory = (double)tc->device_memory;
    q->host_memory = (double)cl_host_memory_available();
    q->hw = *hw;
    q->vocab_div = tc->vocab_divisible_by > 0 ? tc->vocab_divisible_by : 128;
    q->max_tp = ranks;
    q->base = tc;
}

void cl_plan_cfg_to_train(const cl_plan_cfg *c, cl_train_config *tc) {
    tc->micro_batch = c->mb;
    tc->tp = c->tp;
    tc->cp = c->cp > 1 ? c->cp : 1;
    if (c->cp > 1) tc->cp_comm = c->cp_comm;
    tc->ep = c->ep > 1 ? c->ep : 1;
    tc->sequence_parallel = c->sp;
    tc->schedule = c->pp > 1 ? c->schedule : CL_SCHED_1F1B;
    tc->virtual_stages = c->pp > 1 && c->schedule == CL_SCHED_INTERLEAVED ? c->v : 0;
    tc->zero = c->zero;
    tc->recompute = c->recompute;
    tc->offload_optimizer = c->offload; /* disk: chosen only where the run gave --offload-dir */
    if (c->lean && cl_zero_shards_grads(c->zero)) tc->bucket_bytes = 1;
    if (c->lean && cl_zero_shards_params(c->zero)) tc->zero3_prefetch = 0;
}

void cl_plan_cfg_flags(const cl_plan_cfg *c, char *buf, size_t n) {
    static const char *const rc[] = {"none", "selective", "full"};
    char cps[64] = "";
    if (c->cp > 1) snprintf(cps, sizeof cps, " --cp %d%s", c->cp, c->cp_comm == CL_CP_A2A ? " --cp-comm a2a" : "");
    if (c->ep > 1) snprintf(cps + strlen(cps), sizeof cps - strlen(cps), " --ep %d", c->ep);
    int k = snprintf(buf, n, "--dp %d%s --tp %d --pp %d --micro-batch-size %d --zero %d --recompute %s", c->dp, cps, c->tp, c->pp, c->mb,
                     c->zero, rc[c->recompute >= CL_RECOMPUTE_NONE && c->recompute <= CL_RECOMPUTE_FULL ? c->recompute : CL_RECOMPUTE_NONE]);
    if (k < 0 || (size_t)k >= n) return;
    if (c->pp > 1) k += snprintf(buf + k, n - (size_t)k, " --schedule %s", cl_sched_kind_name((cl_sched_kind)c->schedule));
    if (k >= 0 && (size_t)k < n && c->pp > 1 && c->schedule == CL_SCHED_INTERLEAVED)
        k += snprintf(buf + k, n - (size_t)k, " --virtual-stages %d", c->v);
    if (k >= 0 && (size_t)k < n && c->sp) k += snprintf(buf + k, n - (size_t)k, " --sequence-parallel");
    if (k >= 0 && (size_t)k < n && c->lean && cl_zero_shards_grads(c->zero))
        k += snprintf(buf + k, n - (size_t)k, cl_zero_shards_params(c->zero) ? " --bucket-size 1 --zero3-prefetch 0" : " --bucket-size 1");
    if (k >= 0 && (size_t)k < n && c->offload != CL_OFFLOAD_NONE)
        snprintf(buf + k, n - (size_t)k, c->offload == CL_OFFLOAD_DISK ? " --offload-optimizer disk --offload-dir DIR" : " --offload-optimizer host");
}

int cl_plan_cfg_distance(const cl_plan_cfg *c, const cl_plan_cfg *ref) {
    int sched = c->pp > 1 || ref->pp > 1 ? c->schedule != ref->schedule || (c->schedule == CL_SCHED_INTERLEAVED && c->v != ref->v) : 0;
    return (c->dp != ref->dp) + (c->tp != ref->tp) + (c->pp != ref->pp) + (c->mb != ref->mb) + sched + (c->zero != ref->zero) +
           (c->recompute != ref->recompute) + (c->sp != ref->sp) + (c->offload != ref->offload) + (c->lean != ref->lean) +
           ((c->cp > 1 ? c->cp : 1) != (ref->cp > 1 ? ref->cp : 1)) + ((c->ep > 1 ? c->ep : 1) != (ref->ep > 1 ? ref->ep : 1));
}
