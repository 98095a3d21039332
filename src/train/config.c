/* The model a training configuration describes (cl_train_describe, train.h):
 * the configuration's own checks first (ZeRO stage, offload, prefetch,
 * sequence parallelism, vocabulary padding), then this tensor-parallel
 * rank's slice of the description. Apart from trainer.c because the memory
 * predictor (memory.c) describes the same model before any trainer exists,
 * and the trainer calls the predictor: one file below both.
 *
 * Context parallelism (cfg->cp > 1) is checked here too, so that a run, the
 * predictor and `cleave memory` refuse the same input with the same line:
 * a family with sequences, T cut into 2 cp equal chunks (the nearest valid
 * --seq-len named), no sequence parallelism with it; the description is
 * then sized for a context rank's T / cp tokens. */
#include "cleave/train.h"


/* --cp-comm a2a splits each tensor-parallel rank's heads over the context
 * group: cp must divide its query heads and its key-value heads (one at tp
 * past them). Refused naming the context sizes that would. */
static cl_status check_a2a(const cl_train_config *cfg, int cp) {
    int tp = cfg->tp > 1 ? cfg->tp : 1, nh = cfg->model.heads / tp, kv = cl_model_kv_heads(&cfg->model);
    int nkv = kv >= tp ? kv / tp : 1;
    if (nh % cp == 0 && nkv % cp == 0) return CL_OK;
    char ok[96] = "";
    for (int d = 2, at = 0; d <= nkv && at < (int)sizeof ok - 8; d++)
        if (nh % d == 0 && nkv % d == 0) at += snprintf(ok + at, sizeof ok - (size_t)at, "%s%d", at ? ", " : "", d);
    return cl_error(CL_ERR_INVALID,
                    "--cp %d --cp-comm a2a: the %d query heads and %d key-value heads of a%s rank do not divide by %d: use --cp %s or "
                    "--cp-comm ring", cp, nh, nkv, tp > 1 ? " tensor-parallel" : "", cp, ok[0] ? ok : "1");
}

/* The refusals of context parallelism (see above), before anything starts. */
/* Expert parallelism: a model with experts, ep dividing them; what it does not compose with refused by name (that ep
 * divides dp is the mesh's check, cl_mesh_check_ep). */
static cl_status check_ep(const cl_train_config *cfg) {
    int ep = cfg->ep, E = cfg->model.experts;
    if (ep < 0) return cl_error(CL_ERR_INVALID, "--ep must be positive (got %d)", ep);
    if (ep <= 1) return CL_OK;
    if (!E) return cl_error(CL_ERR_INVALID, "--ep %d: the model has no experts (expert parallelism needs --experts or a Mixtral model)", ep);
    if (E % ep) return cl_error(CL_ERR_INVALID, "--ep %d must divide the %d experts (each rank computes E / ep of them)", ep, E);
    return CL_OK;
}

static cl_status check_cp(const cl_train_config *cfg, int T) {
    int cp = cfg->cp;
    if (cp < 0) return cl_error(CL_ERR_INVALID, "--cp must be positive (got %d)", cp);
    if (cp <= 1) return CL_OK;
    const cl_model_family *f = cl_model_family_of(&cfg->model);
    if (!f->tokens)
        return cl_error(CL_ERR_INVALID, "--cp %d: the %s family has no sequence to split (context parallelism needs a token model)", cp,
                        f->name);
    if (cfg->model.experts) /* each rank's f_e and P_e would be its own tokens', not the sequence's */
        return cl_error(CL_ERR_UNSUPPORTED,
                        "--cp %d with --experts is not supported yet (the load-balancing loss's token fractions are not gathered over the "
                        "context group)", cp);
    if (cfg->cp_comm != CL_CP_RING && cfg->cp_comm != CL_CP_A2A) return cl_error(CL_ERR_INVALID, "--cp-comm must be ring or a2a");
    if (cfg->cp_comm == CL_CP_A2A) CL_TRY(check_a2a(cfg, cp));
    int q = 2 * cp;
    if (T % q) {
        int lo = T / q * q, hi = lo + q;
        char near[96];
        if (lo > 0) snprintf(near, sizeof near, "--seq-len %d or %d", lo, hi);
        else snprintf(near, sizeof near, "--seq-len %d", hi);
        /* the context sizes that do cut this T: the divisors d of T / 2 nearest to cp */
        int below = 0, above = 0;
        for (int d = cp - 1; d >= 1 && !below; d--)
            if (T % (2 * d) == 0) below = d;
        for (int d = cp + 1; d <= T / 2 && !above; d++)
            if (T % (2 * d) == 0) above = d;
        char cps[64] = "";
        if (below > 1 && above) snprintf(cps, sizeof cps, ", or --cp %d or %d", below, above);
        else if (above) snprintf(cps, sizeof cps, ", or --cp %d", above);
        else if (below > 1) snprintf(cps, sizeof cps, ", or --cp %d", below);
        return cl_error(CL_ERR_INVALID, "--seq-len %d does not split into 2 x --cp %d = %d equal chunks: use %s%s", T, cp, q, near, cps);
    }
    return CL_OK;
}

cl_status cl_train_describe(const cl_train_config *cfg, int tp_rank, cl_model_desc **out) {
    int tp = cfg->tp > 1 ? cfg->tp : 1;
    if (cfg->zero < CL_ZERO_NONE || cfg->zero > CL_ZERO_PARAMS) return cl_error(CL_ERR_INVALID, "--zero must be 0, 1, 2 or 3 (got %d)", cfg->zero);
    if (cfg->offload_optimizer < CL_OFFLOAD_NONE || cfg->offload_optimizer > CL_OFFLOAD_DISK)
        return cl_error(CL_ERR_INVALID, "--offload-optimizer must be none, host or disk");
    if ((cfg->offload_optimizer == CL_OFFLOAD_DISK) != (cfg->offload_dir != NULL))
        return cl_error(CL_ERR_INVALID, cfg->offload_dir ? "--offload-dir needs --offload-optimizer disk"
                                                         : "--offload-optimizer disk needs --offload-dir DIR");
    if (cfg->offload_dir) CL_TRY(cl_check_dir_writable(cfg->offload_dir, "--offload-dir"));
    if (cfg->zero3_prefetch < 0) return cl_error(CL_ERR_INVALID, "--zero3-prefetch must be 0 or more (got %d)", cfg->zero3_prefetch);
    if (cfg->sequence_parallel && tp < 2)
        return cl_error(CL_ERR_INVALID, "--sequence-parallel needs tensor parallelism (--tp 2 or more)");
    if (cfg->vocab_divisible_by < 1)
        return cl_error(CL_ERR_INVALID, "--make-vocab-size-divisible-by must be positive (got %d)", cfg->vocab_divisible_by);
    if (cfg->dtype != CL_F32 && cfg->dtype != CL_BF16) return cl_error(CL_ERR_INVALID, "--dtype must be fp32 or bf16");
    if (cfg->grad_reduce != CL_F32 && cfg->grad_reduce != CL_BF16) return cl_error(CL_ERR_INVALID, "--grad-reduce-dtype must be fp32 or bf16");
    int T = cfg->seq_len ? cfg->seq_len : cfg->model.seq_len;
    CL_TRY(check_cp(cfg, T));
    CL_TRY(check_ep(cfg));
    cl_tp_layout tl = {tp, tp_rank, cfg->sequence_parallel, cfg->vocab_divisible_by, cfg->dtype, cfg->ep};
    CL_TRY(cl_model_describe_cp(&cfg->model, cfg->cp > 1 ? T / cfg->cp : cfg->seq_len, &tl, cfg->cp, out));
    /* expert parallelism: this rank holds its E / ep experts only (every ep rank's buffers the same size: rank 0's
     * where there is no group, as `cleave memory` predicts) */
    cl_model_desc_ep_shard(*out, cfg->groups && cfg->groups->ep ? cl_comm_rank(cfg->groups->ep) : 0);
    return CL_OK;
}
