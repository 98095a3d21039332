/* The model a training configuration describes (cl_train_describe, train.h):
 * the configuration's own checks first (ZeRO stage, offload, prefetch,
 * sequence parallelism, vocabulary padding), then this tensor-parallel
 * rank's slice of the description. Apart from trainer.c because the memory
 * predictor (memory.c) describes the same model before any trainer exists,
 * and the trainer calls the predictor: one file below both. */
#include "cleave/train.h"

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
    if (cfg->dtype == CL_BF16 && tp > 1)
        return cl_error(CL_ERR_UNSUPPORTED, "--dtype bf16 with --tp %d: tensor parallelism is not yet supported in bf16", tp);
    if (cfg->dtype == CL_BF16 && cfg->zero == CL_ZERO_PARAMS)
        return cl_error(CL_ERR_UNSUPPORTED, "--dtype bf16 with --zero 3: not yet supported in bf16 (ZeRO 0, 1 and 2 are)");
    cl_tp_layout tl = {tp, tp_rank, cfg->sequence_parallel, cfg->vocab_divisible_by, cfg->dtype};
    return cl_model_describe_tp(&cfg->model, cfg->seq_len, &tl, out);
}
