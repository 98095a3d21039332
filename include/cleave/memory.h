/* cleave memory: every rank's device bytes, predicted before the run.
 *
 * The prediction is the sum of the same size statements the allocations
 * use (cl_model_part_sizes, cl_pp_slot_sizes, the schedule's slot and
 * send-buffer counts), and nothing is allocated during a step, so a rank's
 * measured peak of each category equals its prediction to the byte. */
#ifndef CLEAVE_MEMORY_H
#define CLEAVE_MEMORY_H

#include "cleave/device.h"
#include "cleave/train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int rank, dp_rank, pp_rank; /* world rank and its mesh coordinates */
    int tp_rank;
    int nstages, stage[64];     /* the model stages (chunks) it holds; none on a single device */
    size_t bytes[CL_MEM_NCAT];  /* peak of each category */
    size_t total;               /* peak of their sum */
    size_t host;                /* host memory holding offloaded optimizer state (outside the device and its cap) */
    size_t disk;                /* bytes of the optimizer state file (--offload-optimizer disk) */
} cl_mem_rank;

/* Predicts every rank of a run of cfg on a dp x cfg->tp x pp mesh into
 * out[dp * tp * pp] (indexed by world rank, tp fastest then dp then pp).
 * Uses cfg's model, seq_len, tp, sequence_parallel, vocab_divisible_by,
 * micro and global batch, schedule, virtual stages, pp_layout, recompute
 * and device_memory (the balanced partition's cap);
 * not its communicators. Errors: the model or the pipeline cannot be built
 * (the messages cl_trainer_create would give). */
cl_status cl_memory_predict(const cl_train_config *cfg, int dp, int pp, cl_mem_rank *out);
/* Ranks of the prediction: dp x cfg->cp x cfg->tp x pp (out's length; under
 * context parallelism the order is tp fastest, then cp, then dp, then pp, and
 * the dp argument counts the replicas, each of cp ranks). */
int cl_memory_ranks(const cl_train_config *cfg, int dp, int pp);

/* The host memory the n ranks of a prediction on one host take when some
 * rank offloads its optimizer state (host, or disk's tiles): a CPU rank's
 * device is the host's memory, so each rank's device total plus its host
 * bytes, summed over the ranks (ranks_here of them share the host: the
 * largest rank's times ranks_here when fewer than n); 0 when none offloads. */
size_t cl_memory_host_need(const cl_mem_rank *r, int n, int ranks_here);

/* When some rank's prediction exceeds cfg->device_memory, or an offloaded
 * run's host need (cl_memory_host_need, the ranks of
 * $OMPI_COMM_WORLD_LOCAL_SIZE or all on this host) exceeds the host's
 * available memory: CL_ERR_OOM naming the rank, its stages, its largest
 * category and the bytes over the cap (or the host's figures), and up to
 * three configurations one flag away that fit both (ZeRO 1, host offload,
 * another --recompute, a smaller --micro-batch-size for the same global
 * batch, another --schedule, the balanced layout), each with its peak, or
 * that none of them does at this rank count. CL_OK when everything fits or
 * there is no cap. */
cl_status cl_memory_check(const cl_train_config *cfg, int dp, int pp);

#ifdef __cplusplus
}
#endif

#endif
