/* The cleave command: train, eval, generate. The only place that exits.
 * Exit status: 0 success, 2 bad input (flags, files, sizes, caps), 1 failure
 * (including a training step whose loss or gradient norm is not finite). */
#include "args.h"
#include "auto.h"
#include "bench.h"
#include "memory_cmd.h"
#include "tensorboard.h"
#include "cleave/schedule.h"
#include "cleave/comm.h"
#include "cleave/kernels.h"
#include "cleave/mesh.h"
#include "cleave/train.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

int cleave_cmd_mesh(int argc, char **argv); /* cli/mesh_cmd.c */
int cleave_cmd_schedule(int argc, char **argv); /* cli/schedule_cmd.c */
int cleave_cmd_trace(int argc, char **argv); /* cli/trace_cmd.c */
int cleave_cmd_bench(int argc, char **argv); /* cli/bench_cmd.c */
int cleave_cmd_plot(int argc, char **argv); /* cli/plot_cmd.c */
int cleave_cmd_plan(int argc, char **argv); /* cli/plan_cmd.c */
int cleave_cmd_checkpoint(int argc, char **argv); /* cli/checkpoint_cmd.c */
int cleave_cmd_tokenize(int argc, char **argv); /* cli/tokenize_cmd.c */


static const cli_flag train_flags[] = {
    {"help", "h", 0, "show this help"},
    {"config", "", 1, "read settings from this JSON file (keys: the long flag names, at top level or in their section; see above); flags given win"},
    {"print-config", "", 0, "print the resolved settings as JSON (what --config reads) and stop without running"},
    {"model", "m", 1, "preset: gpt2-tiny (default: 2 layers, 64 channels), gpt2-mini (4 layers, 128 channels), gpt2-small or gpt2 (GPT-2 small, 124M), gpt2-medium (355M), gpt2-large (774M), gpt2-xl (1.5B), mlp, cnn; Llama: llama-tiny, llama (with the flags), smollm2-135m, tinyllama-1.1b, llama-3.2-1b, llama-3-8b, llama-2-70b, llama-3-70b, llama-3.1-405b; Mixtral (Llama with experts): mixtral-tiny, mixtral-8x7b"},
    {"layers", "", 1, "GPT: number of transformer blocks (overrides the preset)"},
    {"channels", "", 1, "GPT: embedding width C"},
    {"heads", "", 1, "GPT: attention heads (must divide --channels)"},
    {"vocab", "", 1, "GPT: vocabulary size (>= the tokenizer's)"},
    {"context", "", 1, "GPT: positions the model has (n_positions)"},
    {"kv-heads", "", 1, "GPT: key-value heads (grouped-query attention; default --heads; the GPT block trains only --heads)"},
    {"mlp-width", "", 1, "GPT: the MLP's hidden width (default 4 x --channels)"},
    {"norm", "", 1, "GPT: layernorm (default) or rmsnorm (described, not trained yet)"},
    {"ffn-channels", "", 1, "Llama: the MLP's width (intermediate_size; the preset's)"},
    {"rope-theta", "", 1, "Llama: the rotary positions' base (rope_theta; the preset's)"},
    {"tie-embeddings", "", 1, "Llama: 1 ties the LM head to the embedding, 0 gives it its own lm_head.weight"},
    {"experts", "", 1, "Llama: E experts in the MoE blocks (num_local_experts; 0: dense; mixtral presets: 8)"},
    {"experts-per-token", "", 1, "Llama MoE: top-K experts per token (num_experts_per_tok), 1 <= K <= E"},
    {"moe-every", "", 1, "Llama MoE: every N-th block is an MoE block (blocks N-1, 2N-1, ...), the others dense (default 1: every block)"},
    {"moe-aux-loss-coeff", "", 1, "Llama MoE: the load-balancing loss's coefficient (router_aux_loss_coef; default 0.01)"},
    {"moe-capacity-factor", "", 1, "Llama MoE: each expert keeps ceil(F x tokens x K / E) token-slots, the rest dropped and counted (default 0: dropless)"},
    {"rope-scaling", "", 1, "Llama: none, or llama3:FACTOR,LOW,HIGH,ORIGINAL_CONTEXT (Llama 3.1's rope_scaling, e.g. llama3:8,1,4,8192; the preset's)"},
    {"seq-len", "", 1, "GPT: tokens per training sample (default: the context)"},
    {"steps", "", 1, "training steps (default 100)"},
    {"stop-after", "", 1, "stop after this step (the schedule still spans --steps), as an interrupted run would"},
    {"lr", "", 1, "peak learning rate (default 1e-3)"},
    {"min-lr", "", 1, "final learning rate of the cosine decay (default lr/10)"},
    {"warmup", "", 1, "linear warm-up steps (default 10% of steps)"},
    {"weight-decay", "", 1, "AdamW decoupled weight decay on matrices (default 0.1)"},
    {"beta1", "", 1, "AdamW beta1 (default 0.9)"},
    {"beta2", "", 1, "AdamW beta2 (default 0.95)"},
    {"eps", "", 1, "AdamW epsilon (default 1e-8)"},
    {"grad-clip", "", 1, "clip the global gradient norm to this (default 1.0, 0 = off)"},
    {"micro-batch-size", "", 1, "samples per micro-batch (default 8)"},
    {"global-batch-size", "", 1, "samples per step; a multiple of the micro-batch (default: the micro-batch)"},
    {"seed", "", 1, "seed for initialization and data order (default 1337)"},
    {"data", "", 1, "training text (GPT; default kjv.txt) or digits csv(.gz) (MLP/CNN; default digits.csv.gz) from cleave's data: $CLEAVE_DATA, the checkout's data/, PREFIX/share/cleave. GPT also: a Megatron indexed dataset PREFIX (PREFIX.idx + PREFIX.bin, from cleave tokenize; memory-mapped), a .jsonl file (a document per line), a directory of .txt and .jsonl files, or a blend \"0.7 PATH 0.3 PATH\""},
    {"data-key", "", 1, "the field of each JSONL line that holds its text (default text)"},
    {"split", "", 1, "train,validation,test fractions of each dataset, e.g. 949,50,1 (default 9,1,0)"},
    {"tokenizer", "", 1, "byte (default), gpt2 or hf (a Hugging Face tokenizer.json in --tokenizer-dir)"},
    {"tokenizer-dir", "", 1, "directory with encoder.json and vocab.bpe (default: gpt2/ in cleave's data, as for --data); for hf, with tokenizer.json (default: llama3/)"},
    {"device-memory", "", 1, "cap on this rank's device memory, e.g. 512MiB (B, KiB, MiB, GiB)"},
    {"eval-every", "", 1, "report validation loss every N steps (default: at the end only)"},
    {"eval-batches", "", 1, "validation windows per evaluation (default 16, 0 = all)"},
    {"log-file", "", 1, "write one JSON line per step to this file"},
    {"tensorboard", "", 1, "write TensorBoard event files to this directory (made if missing): loss, validation loss, learning rate, "
                           "gradient norm, throughput, each rank's peak memory by category and the pipeline bubble, every step"},
    {"plot", "", 1, "at the end, draw this run's loss and validation loss against the step as SVG to this file (as cleave plot)"},
    {"log-every", "", 1, "print every N steps (default 1)"},
    {"save", "", 1, "checkpoint directory to write"},
    {"save-every", "", 1, "checkpoint every N steps (and at the end)"},
    {"save-keep", "", 1, "keep the K newest checkpoints of this run's lineage: --save DIR holds step-NNNNNNNN directories and latest, "
                         "the newest's name (--save into such a DIR without it adds steps and prunes none)"},
    {"discard-newer-checkpoints", "", 0, "--save DIR may hold step directories beyond the resume point (refused without it): "
                                         "delete them once this run has saved its first checkpoint"},
    {"resume", "", 1, "continue from this checkpoint directory (either format, at any layout; a --save-keep DIR's latest): the model, "
                      "tokenizer, --seq-len, --global-batch-size, --seed and --data come from it, and a flag given that disagrees is "
                      "refused; the micro-batch too unless given (cut to fit a new --dp); the layout, --steps, the learning-rate and "
                      "AdamW flags, evaluation, saving and logging are this run's (give the original --steps, --lr ... to continue "
                      "it exactly)"},
    {"save-format", "", 1, "single (default: one file of whole tensors, Hugging Face names) or sharded (each rank writes its slices, plus an index)"},
    {"sample-tokens", "", 1, "tokens to generate at the end (default 200, 0 = none)"},
    {"prompt", "", 1, "prompt for the final sample (default \"And God said\")"},
    {"temperature", "", 1, "sampling temperature (default 0.8)"},
    {"top-k", "", 1, "sample from the k most likely tokens (default 40, 0 = all)"},
    {"ranks", "", 1, "ranks to run as threads in this process (default: the product of --dp --tp --pp; with --auto one per core)"},
    {"auto", "", 0, "plan for this machine (cleave plan's search on `cleave plan calibrate`'s description, else default figures) and "
                    "train with the fastest configuration that fits --ranks (with --comm mpi: mpirun -np, rank 0 planning for all) "
                    "and the memory cap; the parallel, micro-batch, schedule, "
                    "ZeRO and recompute flags given fix those dimensions; the global batch is --global-batch-size (default: "
                    "--micro-batch-size x --dp when given, else 8)"},
    {"threads", "", 1, "GEMM threads per rank (default: this process's cores shared among its ranks)"},
    {"comm", "", 1, "communicator backend: threads (default) or mpi (start with mpirun -np N)"},
    {"dp", "", 1, "data-parallel replicas (default: world / (tp * pp))"},
    {"tp", "", 1, "tensor-parallel ranks: each layer split Megatron-style (attention by heads, MLP by columns then rows, vocabulary by rows) (default 1)"},
    {"cp", "", 1, "context-parallel ranks: each sequence cut into 2 x cp chunks, rank i holding chunks i and 2cp-1-i, attention across them (default 1)"},
    {"context-parallel-size", "", 1, "same as --cp"},
    {"cp-comm", "", 1, "how --cp's attention exchanges: ring (default; keys and values around the ring, overlapped) or a2a (all-to-all "
                       "to a split of the heads, DeepSpeed Ulysses; cp must divide the heads and key-value heads)"},
    {"ep", "", 1, "expert-parallel ranks, drawn from the data-parallel ones: the MoE blocks' experts split over ep consecutive dp ranks, tokens sent to their experts by all-to-all (default 1)"},
    {"expert-model-parallel-size", "", 1, "same as --ep"},
    {"sequence-parallel", "", 0, "with --tp: shard the token rows between the split layers too (layernorms, residuals, block inputs and outputs)"},
    {"make-vocab-size-divisible-by", "", 1, "pad the vocabulary to a multiple of this times --tp; padded rows are masked out (default 128)"},
    {"offload-optimizer", "", 1, "where the AdamW moments live: none (default, on the device), host (host memory, outside --device-memory's cap) or disk (a file in --offload-dir, streamed through tiles)"},
    {"offload-dir", "", 1, "directory for --offload-optimizer disk's file (created unlinked: nothing is left behind)"},
    {"zero", "", 1, "ZeRO stage over the data-parallel replicas: 0 (default), 1 (each replica keeps the AdamW moments of its shard) 2 (and the gradients of its shard) or 3 (and the parameters of its shard, each unit's gathered just before it runs)"},
    {"zero3-prefetch", "", 1, "with --zero 3: units whose parameters are gathered ahead of the one running, to overlap the gathers with compute (default 1; 0: none)"},
    {"check-replicas", "", 0, "after every step, check that replicated parameters are bit for bit equal on every tensor-parallel rank"},
    {"pp", "", 1, "pipeline stages (default 1)"},
    {"data-parallel-size", "", 1, "same as --dp"},
    {"tensor-model-parallel-size", "", 1, "same as --tp"},
    {"pipeline-model-parallel-size", "", 1, "same as --pp"},
    {"bucket-size", "", 1, "gradient all-reduce bucket, e.g. 25MiB (default 25MiB; under --zero 2 and 3 a quarter of the shard, 64KiB to 25MiB)"},
    {"comm-timeout", "", 1, "seconds a rank waits for a peer before the run fails (default 300)"},
    {"schedule", "", 1, "pipeline schedule: gpipe, 1f1b (default), interleaved or zb-h1"},
    {"virtual-stages", "", 1, "model chunks per pipeline rank (interleaved only; default 2 there)"},
    {"trace-steps", "", 1, "steps the trace keeps: the last N (default 20, 0 = all)"},
    {"recompute", "", 1, "activation recomputation: none (default), selective (attention scores) or full (whole blocks)"},
    {"dtype", "", 1, "number format: fp32 (default) or bf16, mixed precision (F32 master weights, moments and gradients; "
                     "BF16 weight copies and GEMM inputs, F32 accumulation; the GPT and dense Llama families on one rank, pipelines, dp "
                     "with ZeRO 0-3, tp without sequence parallelism)"},
    {"grad-reduce-dtype", "", 1, "format of the data-parallel gradient reduction: fp32 (default) or bf16 (half the bytes; "
                                 "gradients still accumulate in F32, each bucket narrowed just before its collective and "
                                 "widened after; with --dtype fp32 too, as FSDP's reduce_dtype)"},
    {"trace", "", 1, "write a Chrome trace (Perfetto) of every pipeline action (and --cp ring transfer) to this file"},
    {"pp-layout", "", 1, "explicit stages, e.g. \"E,t*3|t*4|t*3,L\" (E embedding, t block, L head; default: balanced)"},
};

/* The mesh of a run. */
static cl_status check_mesh(cl_mesh *m, int world, int dp, int cp, int tp, int pp) {
    /* cp, tp and pp default to 1; dp, when not given, takes the rest of the world */
    return cl_mesh_init_cp(m, world, dp, cp ? cp : 1, tp ? tp : 1, pp ? pp : 1);
}

static int json_line(FILE *f, const cl_step_stats *st) {
    fprintf(f, "{\"step\": %d, \"loss\": %.17g, \"lr\": %.9g, \"grad_norm\": %.17g, \"ms\": %.3f, \"tokens_per_s\": %.1f, \"peak_bytes\": %zu, \"act_bytes\": %zu",
            st->step, st->loss, st->lr, st->grad_norm, st->seconds * 1e3, st->tokens_per_s, st->peak_bytes, st->act_bytes);
    if (st->z3_wait > 0) fprintf(f, ", \"zero3_wait_ms\": %.3f", st->z3_wait * 1e3);
    if (st->moe_experts) { /* the load-balancing loss, dropped token-slots, each expert's share of the slots run */
        int64_t n = 0;
        for (int e = 0; e < st->moe_experts; e++) n += st->moe_slots[e];
        fprintf(f, ", \"moe_aux\": %.17g, \"moe_dropped\": %lld, \"expert_share\": [", st->moe_aux, (long long)st->moe_dropped);
        for (int e = 0; e < st->moe_experts; e++) fprintf(f, "%s%.6f", e ? ", " : "", n ? (double)st->moe_slots[e] / (double)n : 0.0);
        fprintf(f, "]");
        if (st->comm_ep.calls[CL_COMM_KIND_ALLTOALL]) /* expert parallelism: this rank's all-to-all bytes (sent, received), time */
            fprintf(f, ", \"moe_a2a_bytes\": [%llu, %llu], \"moe_a2a_ms\": %.3f", (unsigned long long)st->comm_ep.sent[CL_COMM_KIND_ALLTOALL],
                    (unsigned long long)st->comm_ep.recvd[CL_COMM_KIND_ALLTOALL], st->comm_ep.seconds[CL_COMM_KIND_ALLTOALL] * 1e3);
    }
    if (st->bubble > 0 || st->bubble_sim > 0)
        fprintf(f, ", \"bubble\": %.6f, \"bubble_max\": %.6f, \"bubble_sim\": %.6f", st->bubble, st->bubble_max, st->bubble_sim);
    /* this rank's traffic per group and collective kind: [calls, bytes sent, bytes received] */
    const cl_comm_counts *cc[3] = {&st->comm_tp, &st->comm_dp, &st->comm_pp};
    static const char *const gname[3] = {"tp", "dp", "pp"};
    fprintf(f, ", \"comm\": {");
    for (int gi = 0; gi < 3; gi++) {
        fprintf(f, "%s\"%s\": {", gi ? ", " : "", gname[gi]);
        for (int k = 0, n = 0; k < CL_COMM_NKINDS; k++) {
            if (!cc[gi]->calls[k]) continue;
            fprintf(f, "%s\"%s\": [%llu, %llu, %llu]", n++ ? ", " : "", cl_comm_kind_name((cl_comm_kind)k),
                    (unsigned long long)cc[gi]->calls[k], (unsigned long long)cc[gi]->sent[k], (unsigned long long)cc[gi]->recvd[k]);
        }
        fprintf(f, "}");
    }
    fprintf(f, "}}\n");
    return fflush(f) != 0 || ferror(f);
}

static int val_line(FILE *f, int step, double vl) {
    return fprintf(f, "{\"step\": %d, \"val_loss\": %.17g}\n", step, vl) < 0 || fflush(f) != 0;
}

/* The log's first line (and a resumed run's first of its own): the run's
 * resolved configuration, {"config": {...}} on one line; readers of the
 * steps skip it (it has no "step"). */
static int config_line(FILE *f, const char *json) {
    if (!json) return 0;
    fputs("{\"config\": ", f);
    for (const char *p = json; *p; p++) {
        if (*p == '\n') { /* the pretty form's line breaks and indentation (strings hold none raw) */
            if (p > json && p[-1] == ',') fputc(' ', f);
            while (p[1] == ' ') p++;
            continue;
        }
        fputc(*p, f);
    }
    fputs("}\n", f);
    return fflush(f) != 0 || ferror(f);
}

/* A log that cannot be written stops the run, as a checkpoint would. */
static cl_status log_failed(const char *path, int step) {
    return cl_error(CL_ERR_IO, "--log-file %s: writing step %d failed: %s", path, step, strerror(errno));
}

static void print_header(cl_trainer *t) {
    const cl_train_config *c = cl_trainer_config(t);
    cl_model *m = cl_trainer_model(t);
    const cl_model_desc *d = cl_model_desc_of(m);
    const cl_model_config *mc = &d->cfg;
    char mem[512];
    /* the whole model's count (the whole tensors, the vocabulary unpadded),
     * and with --tp what this tensor-parallel rank holds (its slices, the
     * replicated tensors, its padded vocabulary rows) */
    int64_t whole = 0;
    for (int i = 0; i < d->nparams; i++) whole += d->params[i].full_numel;
    char per[96] = "";
    if (d->tpl.tp > 1)
        snprintf(per, sizeof per, " (%lld on each of the %d tensor-parallel ranks)", (long long)d->nparams_total, d->tpl.tp);
    char more[96] = ""; /* the family's choices past GPT-2's defaults */
    if (mc->kv_heads) snprintf(more + strlen(more), sizeof more - strlen(more), ", %d key-value heads", mc->kv_heads);
    if (mc->mlp_width) snprintf(more + strlen(more), sizeof more - strlen(more), ", MLP width %d", mc->mlp_width);
    if (cl_model_family_of(mc)->tokens)
        printf("model %s: %d layers, %d channels, %d heads%s, context %d, vocab %d; %lld parameters%s\n", mc->name, mc->layers,
               mc->channels, mc->heads, more, mc->seq_len, mc->vocab, (long long)whole, per);
    else
        printf("model %s: %d units; %lld parameters%s\n", mc->name, d->nunits, (long long)whole, per);
    if (cl_model_family_of(mc)->tokens)
        printf("data %s: %zu training and %zu validation tokens (%s tokenizer); unigram baseline loss %.4f\n", c->data,
               cl_trainer_train_tokens(t), cl_trainer_val_tokens(t), cl_tokenizer_name(cl_trainer_tokenizer(t)),
               cl_trainer_unigram_loss(t));
    else
        printf("data %s\n", c->data);
    printf("batch: %d samples per step in %d micro-batches of %d%s; gemm: %s\n", c->global_batch, c->global_batch / c->micro_batch,
           c->micro_batch, cl_model_family_of(mc)->sample, cl_gemm_backend());
    if (c->dtype == CL_BF16 && cl_gemm_bf16_note()) printf("%s\n", cl_gemm_bf16_note());
    cl_device *dev = cl_trainer_device(t);
    char cap[32];
    printf("device %s:%d memory (cap %s%s): %s\n", cl_device_name(dev), cl_device_id(dev),
           cl_device_cap(dev) ? cl_format_bytes(cl_device_cap(dev), cap, sizeof cap) : "none",
           c->device_memory_host ? ", this rank's share of the host's available memory" : "", cl_device_describe(dev, mem, sizeof mem));
    if (cl_trainer_host(t)) {
        char hb[32];
        printf("host memory (offloaded optimizer state%s, outside the device's cap): %s\n",
               c->offload_optimizer == CL_OFFLOAD_DISK ? ": the tiles it streams through from its file" : "",
               cl_format_bytes(cl_device_current_total(cl_trainer_host(t)), hb, sizeof hb));
    }
    fflush(stdout);
}

/* How a loaded model generates: kv with a KV cache, split over tp x pp ranks (threads, each with a device of
 * cap bytes; 1 x 1: on the loaded model's device), or, world not NULL, as this MPI process's rank of them. */
typedef struct {
    int kv, tp, pp;
    size_t cap;
    cl_comm *world;
} gen_how;

/* Samples with the trainer's model (t, on every rank of a pipeline) or a
 * loaded one (m, acts; as how says, timed into st: one per rank); prints when show. */
static cl_status print_sample(cl_trainer *t, cl_model *m, cl_acts *acts, const cl_tokenizer *tok, const char *prompt, int n,
                              float temp, int topk, uint64_t seed, int show, const gen_how *how, cl_gen_stats *st) {
    int32_t *ids;
    size_t np;
    cl_comm *world = how ? how->world : NULL; /* MPI: every rank encodes the same (agreed) prompt alike */
    CL_TRY(cl_comm_fail_together(world, cl_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &np)));
    if (np == 0) {
        free(ids);
        return cl_comm_fail_together(world, cl_error(CL_ERR_INVALID, "--prompt is empty"));
    }
    int32_t *out = malloc((size_t)(n > 0 ? n : 1) * sizeof *out);
    if (!out) {
        free(ids);
        return cl_error(CL_ERR_OOM, "cannot allocate the sample");
    }
    cl_status s = t                          ? cl_trainer_generate(t, ids, (int)np, n, temp, topk, seed, out)
                  : world                 ? cl_generate_split_rank(world, m, how->tp, how->pp, how->cap, ids, (int)np, n, temp, topk, seed, out, st)
                  : how->tp * how->pp > 1 ? cl_generate_split(m, how->tp, how->pp, how->cap, ids, (int)np, n, temp, topk, seed, out, st)
                                          : cl_generate_run(m, acts, how->kv, ids, (int)np, n, temp, topk, seed, out, st);
    if (!s && show) {
        fputs(prompt, stdout);
        char buf[64];
        for (int i = 0; i < n; i++) {
            int k = cl_tokenizer_decode(tok, out[i], buf, sizeof buf);
            if (k > 0) fwrite(buf, 1, (size_t)k, stdout);
        }
        fputs("\n", stdout);
    }
    free(ids);
    free(out);
    return s;
}

/* Clears the live progress line (a terminal's only) before other output. */
#define LIVE_CLEAR "\r\033[K"

/* A logged step is one plain line, on a terminal, a pipe or a file alike, so
 * the loss history stays. On a terminal (tty) a live line under them shows
 * the latest step and a bar; it is cleared (LIVE_CLEAR) before anything else
 * is printed, so neither it nor its carriage returns reach the history. */
static void progress(const cl_step_stats *st, int total, double gflops, int tty, int logged) {
    char peak[32];
    cl_format_bytes(st->peak_bytes, peak, sizeof peak);
    if (tty) fputs(LIVE_CLEAR, stdout);
    char bubble[192] = "";
    if (st->bubble > 0 || st->bubble_sim > 0)
        snprintf(bubble, sizeof bubble, " | bubble %.3f (worst rank %.3f, simulated %.3f)", st->bubble, st->bubble_max, st->bubble_sim);
    if (st->moe_experts) { /* after the bubble: the MoE blocks' aux loss, dropped slots, the busiest and idlest expert's share */
        int64_t n = 0, lo = INT64_MAX, hi = 0;
        for (int e = 0; e < st->moe_experts; e++) n += st->moe_slots[e], lo = st->moe_slots[e] < lo ? st->moe_slots[e] : lo,
                                                  hi = st->moe_slots[e] > hi ? st->moe_slots[e] : hi;
        double mean = n ? (double)n / st->moe_experts : 1;
        snprintf(bubble + strlen(bubble), sizeof bubble - strlen(bubble), " | aux %.4f | dropped %lld | experts %.2f-%.2fx mean",
                 st->moe_aux, (long long)st->moe_dropped, (double)lo / mean, (double)hi / mean);
        if (st->comm_ep.calls[CL_COMM_KIND_ALLTOALL]) /* expert parallelism: this rank's time in the all-to-alls */
            snprintf(bubble + strlen(bubble), sizeof bubble - strlen(bubble), " | a2a %.1f ms",
                     st->comm_ep.seconds[CL_COMM_KIND_ALLTOALL] * 1e3);
    }
    if (logged)
        printf("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s | %.2f GFLOP/s | peak %s%s\n", st->step, total,
               st->loss, st->lr, st->grad_norm, st->seconds * 1e3, st->tokens_per_s, gflops, peak, bubble);
    if (tty) {
        int width = 20, filled = (int)((double)st->step / total * width);
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
        bar[width] = 0;
        printf("[%s] step %d/%d | loss %.4f | %.0f tok/s", bar, st->step, total, st->loss, st->tokens_per_s);
    }
    fflush(stdout);
}

/* Everything a training run needs, shared read-only by every rank. */
typedef struct {
    cl_train_config c;
    cl_mesh mesh;
    int steps, end, log_every, eval_every, save_every, sample_tokens, topk;
    float temperature;
    const char *save, *resume, *log_path, *prompt, *comm_name, *trace_path, *plot_path;
    const char *tb_dir; /* --tensorboard */
    int gb_given, schedule_given;
    int threads; /* GEMM threads per rank; 0: derive from cores and ranks */
    int trace_steps;
    int world_rank; /* under MPI, this process's rank once it runs, else -1 */
    const cli_args *memory; /* cleave memory: its flags (--measure, --json), else NULL */
    const cli_args *autoplan; /* under MPI with --auto: the flags rank 0 plans with, else NULL */
    int measure, json; /* cleave memory --measure: the saved standard output + 1; --json */
    int sharded;       /* --save-format sharded */
    int keep;          /* --save-keep K: DIR/step-NNNNNNNN and DIR/latest, pruned to K */
    int kept;          /* saves go to DIR/step-NNNNNNNN and DIR/latest (--save-keep, or DIR already holds them); 0: DIR itself */
    int discard;       /* --discard-newer-checkpoints: DIR's steps beyond the resume point go at the first save */
    int convert;       /* cleave convert: resume, save, stop */
    int hf;            /* convert --save-format hf: a Hugging Face directory, its --dtype and --max-shard-size (0: one file) */
    cl_dtype hf_dtype;
    int64_t max_shard;
    int mb_fit;        /* the micro-batch is the checkpoint's (or the default), cut to the mesh: ckpt_micro_batch */
} train_job;

/* discard: the step beyond which DIR's kept steps are deleted after this
 * save (--discard-newer-checkpoints), -1 for none; set to -1 once saved. */
static cl_status save_ckpt(cl_trainer *t, const train_job *j, long *discard) {
    if (j->kept) {
        cl_status s = cl_trainer_save_kept(t, j->save, j->keep, j->sharded, discard ? *discard : -1);
        if (!s && discard) *discard = -1;
        return s;
    }
    if (j->hf) return cl_trainer_save_hf(t, j->save, j->hf_dtype, j->max_shard);
    return j->sharded ? cl_trainer_save_sharded(t, j->save) : cl_trainer_save(t, j->save);
}

/* --save into a directory of kept checkpoints: --save-keep, or a DIR that
 * already holds latest or step directories (added to, pruned never), and
 * --discard-newer-checkpoints only there. cleave convert --to is always one
 * checkpoint. */
static cl_status check_kept(const cli_args *a, train_job *j) {
    j->discard = cli_get(a, "discard-newer-checkpoints") != NULL;
    if (j->keep && !j->save) return cl_error(CL_ERR_INVALID, "--save-keep needs --save DIR");
    j->kept = j->save && !j->convert && (j->keep || cl_checkpoint_is_kept_dir(j->save));
    if (j->discard && !j->kept)
        return cl_error(CL_ERR_INVALID, "--discard-newer-checkpoints applies to --save DIR holding kept checkpoints "
                                        "(step-NNNNNNNN directories and latest: --save-keep K)");
    return CL_OK;
}

/* A kept directory's steps beyond the resume point refused (or, with
 * --discard-newer-checkpoints, to go at the first save) before the trainer
 * allocates; the older steps --save-keep will not prune (another lineage's)
 * noted once, and a kept directory saved into without --save-keep said so. */
static cl_status check_kept_steps(const train_job *j) {
    char note[1024];
    CL_TRY(cl_checkpoint_check_kept_steps(j->save, j->resume, j->keep, j->discard, note, sizeof note));
    const char *rank = getenv("OMPI_COMM_WORLD_RANK"); /* under mpirun: one process says it */
    if (rank && strcmp(rank, "0")) return CL_OK;
    if (note[0]) fprintf(stderr, "cleave: note: %s\n", note);
    if (!j->keep)
        fprintf(stderr, "cleave: note: %s holds kept checkpoints: this run adds step-NNNNNNNN directories and moves latest, "
                        "pruning none (--save-keep K keeps the K newest)\n", j->save);
    return CL_OK;
}

/* Default threads per rank: the cores this process may use shared among the
 * ranks it holds. Under mpirun a process bound to cores (its affinity mask
 * smaller than the machine) owns those; unbound, the machine's cores are
 * shared among the ranks on this node. */
static int default_threads(int ranks_here) {
    int cores = cl_cores_available();
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local && atoi(local) > 0) {
        if (online > 0 && cores < online) return cores;
        ranks_here = atoi(local);
    }
    int t = cores / (ranks_here > 0 ? ranks_here : 1);
    return t > 0 ? t : 1;
}

/* Start-up agreement: every rank must run the same job, or a pipeline's
 * messages (--micro-batch-size) overrun buffers and data parallelism
 * (--seed, --lr, --data ...) silently averages different runs. Each flag
 * that must be equal goes in by its resolved value (--data with its size);
 * per-rank settings are left out: --threads, --comm-timeout, --log-file,
 * --log-every (rank 0 alone logs), --ranks and --comm. */
typedef struct {
    int n;
    const char *name[64];
    const char *val[64];
    char buf[64][288];
} flag_values;

static void put(flag_values *l, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(flag_values *l, const char *name, const char *fmt, ...) {
    if (l->n == 64) return; /* not reached: agree_job puts 57 */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->buf[l->n], sizeof l->buf[0], fmt, ap);
    va_end(ap);
    l->name[l->n] = name;
    l->val[l->n] = l->buf[l->n];
    l->n++;
}

/* A float as the fewest digits that read back as the same float. */
static void float_text(float v, char *t, size_t n) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(t, n, "%.*g", prec, v);
        if ((float)strtod(t, NULL) == v) break;
    }
}

static void put_float(flag_values *l, const char *name, float v) {
    char t[32];
    float_text(v, t, sizeof t);
    put(l, name, "%s", t);
}

/* stat of --data: the file, or for an indexed dataset's PREFIX its PREFIX.idx */
static int data_stat(const char *path, struct stat *st) {
    if (stat(path, st) == 0) return 0;
    char idx[8192];
    if (snprintf(idx, sizeof idx, "%s.idx", path) >= (int)sizeof idx) return -1;
    return stat(idx, st);
}

static cl_status agree_job(cl_comm *world, const train_job *j) {
    const cl_train_config *c = &j->c;
    const cl_model_config *mc = &c->model;
    flag_values *l = calloc(1, sizeof *l);
    if (!l) return cl_error(CL_ERR_OOM, "no host memory for the start-up agreement");
    struct stat sb;
#define S(p) ((p) ? (p) : "(none)")
    put(l, "--model", "%s (kind %d)", mc->name, (int)mc->kind);
    put(l, "--layers", "%d", mc->layers);
    put(l, "--channels", "%d", mc->channels);
    put(l, "--heads", "%d", mc->heads);
    put(l, "--vocab", "%d", mc->vocab);
    put(l, "--context", "%d", mc->seq_len);
    put(l, "--seq-len", "%d", c->seq_len ? c->seq_len : mc->seq_len);
    if (c->data && !data_stat(c->data, &sb)) put(l, "--data", "%s (%lld bytes)", c->data, (long long)sb.st_size);
    else put(l, "--data", "%s (missing)", S(c->data));
    put(l, "--data-key", "%s", S(c->data_key));
    put(l, "--split", "%s", S(c->split));
    put(l, "--tokenizer", "%s", S(c->tokenizer));
    put(l, "--tokenizer-dir", "%s", S(c->tokenizer_dir));
    put(l, "--micro-batch-size", "%d", c->micro_batch);
    put(l, "--global-batch-size", "%d", c->global_batch);
    put(l, "--steps", "%d", c->steps);
    put(l, "--stop-after", "%d", j->end);
    put_float(l, "--lr", c->lr.lr);
    put_float(l, "--min-lr", c->lr.min_lr);
    put(l, "--warmup", "%d", c->lr.warmup);
    put_float(l, "--weight-decay", c->adamw.weight_decay);
    put_float(l, "--beta1", c->adamw.beta1);
    put_float(l, "--beta2", c->adamw.beta2);
    put_float(l, "--eps", c->adamw.eps);
    put_float(l, "--grad-clip", c->adamw.grad_clip);
    put(l, "--seed", "%llu", (unsigned long long)c->seed);
    put(l, "--device-memory", "%zu", c->device_memory);
    put(l, "--eval-every", "%d", j->eval_every);
    put(l, "--eval-batches", "%d", c->eval_batches);
    put(l, "--save", "%s", S(j->save));
    put(l, "--save-every", "%d", j->save_every);
    put(l, "--save-keep", "%d", j->keep);
    put(l, "--discard-newer-checkpoints", "%d", j->discard);
    put(l, "--resume", "%s", S(j->resume));
    put(l, "--save-format", "%d", j->sharded);
    put(l, "convert", "%d", j->convert);
    put(l, "--sample-tokens", "%d", j->sample_tokens);
    put(l, "--prompt", "%s", S(j->prompt));
    put_float(l, "--temperature", j->temperature);
    put(l, "--top-k", "%d", j->topk);
    put(l, "--dp", "%d", j->mesh.dp);
    put(l, "--tp", "%d", j->mesh.tp);
    put(l, "--cp", "%d", j->c.cp > 1 ? j->c.cp : 1);
    put(l, "--cp-comm", "%s", j->c.cp_comm == CL_CP_A2A ? "a2a" : "ring");
    put(l, "--ep", "%d", j->c.ep > 1 ? j->c.ep : 1);
    put(l, "--pp", "%d", j->mesh.pp);
    c->bucket_bytes ? put(l, "--bucket-size", "%zu", c->bucket_bytes) : put(l, "--bucket-size", "%s", "default");
    put(l, "--schedule", "%s", cl_sched_kind_name((cl_sched_kind)c->schedule));
    put(l, "--virtual-stages", "%d", c->virtual_stages);
    put(l, "--pp-layout", "%s", S(c->pp_layout));
    put(l, "--recompute", "%d", c->recompute);
    put(l, "--sequence-parallel", "%d", c->sequence_parallel);
    put(l, "--make-vocab-size-divisible-by", "%d", c->vocab_divisible_by);
    put(l, "--check-replicas", "%d", c->check_replicas);
    put(l, "--zero", "%d", c->zero);
    put(l, "--grad-reduce-dtype", "%d", (int)c->grad_reduce);
    put(l, "--offload-optimizer", "%d", c->offload_optimizer);
    put(l, "--trace", "%s", S(j->trace_path));
    put(l, "--trace-steps", "%d", j->trace_steps);
#undef S
    cl_status s = cl_comm_agree(world, l->name, l->val, l->n);
    free(l);
    return s;
}

/* The prediction of every rank of the run (cleave/memory.h), printed as a
 * table or JSON lines beside the measured peaks when given, against cap
 * (0: none) when given. */
static cl_status print_memory(FILE *f, const cl_train_config *c, const cl_mesh *mesh, const double *measured, int json, size_t cap) {
    int n = cl_memory_ranks(c, mesh->dp, mesh->pp);
    cl_mem_rank *pred = malloc((size_t)n * sizeof *pred);
    if (!pred) return cl_error(CL_ERR_OOM, "no host memory for the memory table");
    cl_status s = cl_memory_predict(c, mesh->dp, mesh->pp, pred);
    if (!s) cli_memory_print(f, pred, n, measured, json, cap);
    if (!s && !json && c->model.experts && c->model.moe_capacity_factor > 0) /* the MoE blocks' expert rows, as assumed */
        fprintf(f, "MoE blocks: expert rows at capacity factor %g (exact)\n", c->model.moe_capacity_factor);
    else if (!s && !json && c->model.experts)
        fprintf(f, "MoE blocks: dropless, expert rows sized for the worst case (every token-slot%s on one expert%s)\n",
                c->ep > 1 ? " of every expert-parallel rank" : "", c->ep > 1 ? " of this rank" : "");
    fflush(f);
    free(pred);
    return s;
}

/* cleave memory --measure: every rank's device peaks after its steps, summed
 * into one array (each rank fills its own row), printed on rank 0 beside
 * the prediction; the training output before it went to /dev/null. */
static cl_status gather_measured(cl_comm *world, cl_trainer *t, const train_job *j, const cl_train_config *c) {
    int n = world ? cl_comm_size(world) : 1, me = world ? cl_comm_rank(world) : 0, w = CLI_MEM_COLS;
    double *v = calloc((size_t)n * (size_t)w, sizeof *v);
    if (!v) return cl_error(CL_ERR_OOM, "no host memory for the measured peaks");
    cl_device *dev = cl_trainer_device(t);
    for (int k = 0; k < CL_MEM_NCAT; k++) v[(size_t)me * w + k] = (double)cl_device_peak(dev, (cl_mem_cat)k);
    v[(size_t)me * w + CL_MEM_NCAT] = (double)cl_device_peak_total(dev);
    if (cl_trainer_host(t)) v[(size_t)me * w + CL_MEM_NCAT + 1] = (double)cl_device_peak_total(cl_trainer_host(t));
    v[(size_t)me * w + CL_MEM_NCAT + 2] = (double)cl_trainer_offload_file_bytes(t);
    cl_status s = world ? cl_comm_allreduce(world, v, (size_t)n * w, CL_F64, CL_RED_SUM) : CL_OK;
    if (!s && me == 0) {
        fflush(stdout);
        if (dup2(j->measure - 1, STDOUT_FILENO) < 0) s = cl_error(CL_ERR_IO, "cannot restore standard output");
        if (!s) s = print_memory(stdout, c, &j->mesh, v, j->json, c->device_memory_host ? 0 : c->device_memory);
    }
    free(v);
    return s;
}

/* One rank's run (train_rank): its groups, trainer, outputs and loop state. */
typedef struct {
    const train_job *j;
    cl_comm *world;
    int lead;                /* world rank 0: logs, evaluates, checkpoints and samples */
    int split;               /* the model is split over ranks (stages, tensor slices, ZeRO-3 shards): they all evaluate and sample */
    cl_train_config c;
    cl_groups groups;
    cl_trainer *t;
    FILE *log, *plot;        /* --log-file; --plot's copy of the log's lines, in memory */
    cli_tb *tb;              /* --tensorboard: every rank's figures reach rank 0's file */
    char *plot_text;
    size_t plot_len;
    int tty;                 /* a live line on a terminal */
    long discard;            /* the resume point beyond which kept steps go at the first save, -1: none */
} rank_run;

/* The groups and the trainer (resumed), or convert's load and save. *done: nothing more to run. */
static cl_status rank_build(rank_run *r, int *done) {
    const train_job *j = r->j;
    cl_status s = CL_OK;
    *done = 0;
    if (r->world && !strcmp(j->comm_name, "threads")) CL_TRY(agree_job(r->world, j)); /* MPI: in train_rank_mpi */
    if (r->world) {
        CL_TRY(cl_groups_create(r->world, &j->mesh, &r->groups));
        CL_TRY(cl_groups_add_ep(&r->groups, j->c.ep > 1 ? j->c.ep : 1));
        r->c.groups = &r->groups;
    }
    /* rank 0 opens first, tokenizing and caching the corpus; the others then read the cache. Every rank builds at
     * once (allocating and initializing: seconds a rank for GPT-2, which one rank after another made the first step's
     * time the other ranks' building), and all are built before the first step or the load's clock starts */
    if (r->lead) s = cl_trainer_open(&r->t, &r->c);
    if (!s && r->world) s = cl_comm_barrier(r->world);
    if (!s && !r->lead) s = cl_trainer_open(&r->t, &r->c);
    if (!s) s = cl_trainer_build(&r->t);
    if (!s && r->world) s = cl_comm_barrier(r->world);
    double t0 = cl_now();
    if (!s && j->resume) s = cl_trainer_resume(r->t, j->resume);
    if (j->convert) { /* every rank: the gather (single) and the index (sharded) are collective */
        double t1 = cl_now();
        if (!s) s = save_ckpt(r->t, j, NULL);
        if (!s && r->lead) printf("converted %s (step %d) to %s (%s): loaded in %.3f s, saved in %.3f s (rank 0)\n", j->resume,
                                  cl_trainer_steps_done(r->t), j->save, j->hf ? "Hugging Face" : j->sharded ? "sharded" : "single file", t1 - t0, cl_now() - t1);
        *done = 1;
        return s;
    }
    if (!s && j->resume && cl_trainer_steps_done(r->t) >= j->end)
        s = cl_error(CL_ERR_INVALID, "--resume %s is at step %d, --%s %d leaves nothing to train", j->resume,
                     cl_trainer_steps_done(r->t), j->end < j->steps ? "stop-after" : "steps", j->end);
    return s;
}

/* Rank 0's outputs before the first step: the log (its configuration line), the header, --plot's buffer. */
static cl_status rank_open(rank_run *r) {
    const train_job *j = r->j;
    cl_trainer *t = r->t;
    if (r->lead && j->log_path && !(r->log = fopen(j->log_path, j->resume ? "a" : "w")))
        return cl_error(CL_ERR_IO, "--log-file %s: cannot open for writing", j->log_path);
    if (r->log && config_line(r->log, r->c.run_config)) return log_failed(j->log_path, cl_trainer_steps_done(t));
    if (j->tb_dir) CL_TRY(cli_tb_open(&r->tb, j->tb_dir, r->world, t)); /* every rank: each step gathers from all */
    if (r->lead) {
        print_header(t);
        if (r->world) {
            char cp[24] = ""; /* cp where the run has a context group (cleave mesh's order: dp x cp x tp x pp) */
            if (j->c.cp > 1) snprintf(cp, sizeof cp, " x cp %d", j->c.cp);
            printf("ranks: %d (%s backend), mesh dp %d%s x tp %d x pp %d; per-rank memory as above\n", cl_comm_size(r->world),
                   cl_comm_backend(r->world), j->mesh.dp, cp, j->mesh.tp, j->mesh.pp);
        }
        printf("threads per rank: %d\n", j->threads);
        if (j->mesh.pp > 1) cl_trainer_print_stages(t, stdout);
        print_memory(stdout, &r->c, &j->mesh, NULL, 0, 0);
        if (j->resume) printf("resumed from %s at step %d\n", j->resume, cl_trainer_steps_done(t));
        fflush(stdout);
    }
    /* --plot: the log's lines kept in memory too, drawn at the end as cleave plot draws a log */
    if (r->lead && j->plot_path && !(r->plot = open_memstream(&r->plot_text, &r->plot_len)))
        return cl_error(CL_ERR_OOM, "--plot: no host memory for the run's figures");
    return CL_OK;
}

/* Rank 0's step: its line, the log, evaluation and the checkpoint. */
static cl_status lead_step(rank_run *r, const cl_step_stats *st, int eval, int save) {
    const train_job *j = r->j;
    int last = st->step == j->end;
    double gflops = st->flops / (st->seconds > 0 ? st->seconds : 1e-9) / 1e9;
    int logged = st->step % j->log_every == 0 || last || st->step == 1;
    if (logged || r->tty) progress(st, j->steps, gflops, r->tty, logged);
    if (r->plot) json_line(r->plot, st);
    if (r->log && json_line(r->log, st)) return log_failed(j->log_path, st->step);
    if (eval) {
        double vl;
        CL_TRY(cl_trainer_eval(r->t, &vl));
        printf("%sstep %d: validation loss %.4f\n", r->tty ? LIVE_CLEAR : "", st->step, vl);
        if (r->plot) val_line(r->plot, st->step, vl);
        if (r->tb) CL_TRY(cli_tb_val(r->tb, st->step, vl));
        if (r->log && val_line(r->log, st->step, vl)) return log_failed(j->log_path, st->step);
    }
    if (save) {
        CL_TRY(save_ckpt(r->t, j, &r->discard));
        if (!last || j->save_every) printf("%ssaved %s at step %d\n", r->tty ? LIVE_CLEAR : "", j->save, st->step);
    }
    return CL_OK;
}

/* The steps up to the job's end, every rank. */
static cl_status rank_loop(rank_run *r) {
    const train_job *j = r->j;
    cl_status s = CL_OK;
    /* CLEAVE_PROFILE=1: this rank's steps after its first by operation (CL_PROF rows, as `cleave bench step`), rank 0's
     * table printed at the end */
    const char *pe = getenv("CLEAVE_PROFILE");
    int prof_on = pe && *pe && strcmp(pe, "0") != 0, profiled = 0;
    double prof_s = 0;
    cl_prof *prof = prof_on ? malloc(sizeof *prof) : NULL;
    if (prof_on && !prof) return cl_error(CL_ERR_OOM, "no host memory for CLEAVE_PROFILE's table");
    int first = cl_trainer_steps_done(r->t);
    while (!s && cl_trainer_steps_done(r->t) < j->end) {
        cl_step_stats st;
        if (prof && cl_trainer_steps_done(r->t) > first) { /* the step alone: not the evaluations and saves between */
            if (profiled) cl_prof_current = prof;
            else cl_prof_begin(prof);
        }
        s = cl_trainer_step(r->t, &st);
        if (cl_prof_current) {
            cl_prof_end();
            prof_s += st.seconds, profiled++;
        }
        if (s) break;
        if (r->tb && (s = cli_tb_step(r->tb, &st))) break; /* every rank: the per-rank figures reach rank 0 */
        int last = st.step == j->end;
        int eval = (j->eval_every && st.step % j->eval_every == 0) || last;
        int save = j->save && ((j->save_every && st.step % j->save_every == 0) || last);
        if (r->lead) {
            s = lead_step(r, &st, eval, save);
            continue;
        }
        /* every rank evaluates (a split model's ranks together, context ranks each its tokens, replicas each a share
         * of the batches); a model split over ranks gathers its checkpoint on all of them */
        double vl;
        if (eval) s = cl_trainer_eval(r->t, &vl);
        /* under ZeRO the replicas hold shards of the optimizer state: all of them gather */
        if (!s && save && (j->sharded || r->split || (cl_zero_shards_optim(r->c.zero) && j->mesh.dp * (j->c.cp > 1 ? j->c.cp : 1) > 1)))
            s = save_ckpt(r->t, j, &r->discard);
    }
    if (r->tty) fputs(LIVE_CLEAR, stdout);
    if (prof && !s && r->lead && profiled) {
        printf("profile (CLEAVE_PROFILE), rank 0, steps %d-%d:\n", first + 2, first + 1 + profiled);
        cli_prof_print(prof, prof_s, profiled);
    }
    free(prof);
    return s;
}

/* After the steps: the trace, the peak memory, cleave memory's measured
 * peaks, the sample and the plot. */
static cl_status rank_report(rank_run *r) {
    const train_job *j = r->j;
    cl_trainer *t = r->t;
    cl_status s = CL_OK;
    if (j->trace_path) {
        s = cl_trainer_write_trace(t, r->world, j->trace_path, j->trace_steps);
        if (!s && r->lead)
            printf("trace: %s (open in https://ui.perfetto.dev, or: cleave trace render %s --out pipeline.svg)\n", j->trace_path,
                   j->trace_path);
    }
    double peak = (double)cl_device_peak_total(cl_trainer_device(t)), top = peak;
    if (!s && r->world) s = cl_comm_allreduce(r->world, &top, 1, CL_F64, CL_RED_MAX);
    if (!s && r->lead) {
        char mem[64], mem0[64], capb[64];
        if (r->world)
            printf("peak device memory: %s on the fullest rank (rank 0: %s; cap %s per rank)\n",
                   cl_format_bytes((size_t)top, mem, sizeof mem), cl_format_bytes((size_t)peak, mem0, sizeof mem0),
                   j->c.device_memory ? cl_format_bytes(j->c.device_memory, capb, sizeof capb) : "none");
        else
            printf("peak device memory: %s\n", cl_format_bytes((size_t)peak, mem, sizeof mem));
        if (j->save) printf("checkpoint: %s\n", j->save);
    }
    if (!s && j->measure) s = gather_measured(r->world, t, j, &r->c);
    /* a split model samples on all its ranks (expert parallelism's too: every forward is the group's); otherwise rank 0 alone */
    if (!s && r->lead && j->sample_tokens > 0 && j->c.cp > 1)
        printf("sample: skipped (generation does not run under --cp yet)\n");
    else if (!s && (r->lead || r->split) && j->sample_tokens > 0 && cl_model_family_of(&r->c.model)->tokens) {
        if (r->lead) printf("sample:\n");
        s = print_sample(t, NULL, NULL, cl_trainer_tokenizer(t), j->prompt, j->sample_tokens, j->temperature, j->topk, r->c.seed,
                         r->lead, NULL, NULL);
    }
    fflush(stdout);
    int plotted = r->plot != NULL;
    if (r->plot && fclose(r->plot) != 0 && !s) s = cl_error(CL_ERR_OOM, "--plot: no host memory for the run's figures");
    r->plot = NULL;
    if (plotted && !s) {
        s = cli_plot_text(j->plot_path, j->log_path ? j->log_path : r->c.model.name, r->plot_text, r->plot_len);
        if (!s) printf("plot: %s\n", j->plot_path);
    }
    return s;
}

/* The rank program: the same on every rank, threads or MPI. Rank 0 of the
 * world logs, evaluates, checkpoints and samples; every rank trains. */
static cl_status train_rank(cl_comm *world, void *arg) {
    const train_job *j = arg;
    rank_run r = {.j = j, .world = world, .c = j->c, .discard = -1};
    r.lead = !world || cl_comm_rank(world) == 0;
    r.split = j->mesh.pp > 1 || j->mesh.tp > 1 || j->c.ep > 1 || (cl_zero_shards_params(j->c.zero) && j->mesh.dp * (j->c.cp > 1 ? j->c.cp : 1) > 1); /* ZeRO 3: parameters in shards */
    cl_set_threads(j->threads);
    int done;
    cl_status s = rank_build(&r, &done);
    if (!s && !done) {
        /* a live line on a terminal only: mpirun gives its ranks a pseudo-terminal
         * even when its output goes to a file, so under MPI none */
        r.tty = r.lead && isatty(fileno(stdout)) && strcmp(j->comm_name, "mpi");
        r.discard = j->discard ? cl_trainer_steps_done(r.t) : -1; /* the resume point: checked up front (check_kept) */
        s = rank_open(&r);
        if (!s) s = rank_loop(&r);
        if (!s) s = rank_report(&r);
    }
    fflush(stdout);
    if (r.plot) fclose(r.plot);
    free(r.plot_text);
    if (r.log && fclose(r.log) != 0 && !s) s = cl_error(CL_ERR_IO, "--log-file %s: closing failed: %s", j->log_path, strerror(errno));
    cl_status ts = cli_tb_close(r.tb);
    if (!s) s = ts;
    cl_trainer_destroy(r.t);
    cl_groups_free(&r.groups);
    return s;
}

/* Pipeline flags that can be checked before any rank starts. */
static cl_status check_pipeline(train_job *j) {
    cl_train_config *c = &j->c;
    /* the model cut for the tensor-parallel ranks: heads, columns, sequence and vocabulary checked here */
    c->tp = j->mesh.tp;
    cl_model_desc *d;
    CL_TRY(cl_train_describe(c, 0, &d));
    cl_model_desc_free(d);
    if (c->ep > 1) CL_TRY(cl_mesh_check_ep(&j->mesh, c->ep)); /* the experts' model checked by cl_train_describe; the mesh's share here */
    if (j->mesh.pp <= 1 && (c->pp_layout || c->virtual_stages || j->schedule_given))
        return cl_error(CL_ERR_INVALID, "--schedule, --virtual-stages and --pp-layout need --pp > 1");
    if (j->mesh.pp <= 1 && c->cp <= 1 && j->trace_path)
        return cl_error(CL_ERR_INVALID, "--trace needs --pp > 1 or --cp > 1 (the pipeline's actions, the context ring's transfers)");
    if (c->virtual_stages > 1 && c->schedule != CL_SCHED_INTERLEAVED)
        return cl_error(CL_ERR_INVALID, "--virtual-stages %d needs --schedule interleaved", c->virtual_stages);
    if (c->virtual_stages == 1 && c->schedule == CL_SCHED_INTERLEAVED)
        return cl_error(CL_ERR_INVALID, "--schedule interleaved needs --virtual-stages >= 2");
    int m = c->global_batch / (c->micro_batch * j->mesh.dp);
    if (j->mesh.pp > 1 && c->schedule == CL_SCHED_INTERLEAVED && m % j->mesh.pp)
        return cl_error(CL_ERR_INVALID, "--schedule interleaved needs the micro-batches per step (%d = global %d / (micro %d x dp %d)) "
                        "to be a multiple of --pp %d", m, c->global_batch, c->micro_batch, j->mesh.dp, j->mesh.pp);
    return CL_OK;
}

/* Everything else that can be checked before a rank allocates or trains:
 * output paths, the prompt, threads, and the memory cap a run without
 * --device-memory gets (its share of the host's available memory, ranks_here
 * ranks sharing this host). A run must not train for hours and then fail on
 * a flag. */
static cl_status check_job(train_job *j, int ranks_here) {
    cl_train_config *c = &j->c;
    if (j->prompt && !*j->prompt) return cl_error(CL_ERR_INVALID, "--prompt is empty (give some text, or --sample-tokens 0)");
    /* the machine's cores, not this process's share: under mpirun a process
     * bound to one core may still run a second thread there */
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int cores = cl_cores_available();
    if (online > cores) cores = (int)online;
    if (j->threads > cores)
        return cl_error(CL_ERR_INVALID, "--threads %d: this machine has %d core%s, so at most %d threads per rank", j->threads,
                        cores, cores == 1 ? "" : "s", cores);
    if (j->trace_path) CL_TRY(cl_check_output_path(j->trace_path, "--trace"));
    if (j->plot_path) CL_TRY(cl_check_output_path(j->plot_path, "--plot"));
    if (j->tb_dir) CL_TRY(cli_tb_check(j->tb_dir));
    /* a log is a stream (appended on resume, a device allowed): an existing
     * file is taken as it is; anything else must pass as an output path */
    struct stat st;
    if (j->log_path && (stat(j->log_path, &st) != 0 || S_ISDIR(st.st_mode))) CL_TRY(cl_check_output_path(j->log_path, "--log-file"));
    if (!c->device_memory) {
        size_t avail = cl_host_memory_available();
        if (avail) {
            c->device_memory = avail / (size_t)(ranks_here > 0 ? ranks_here : 1);
            c->device_memory_host = 1;
        }
    }
    return CL_OK;
}

static cl_status memory_mode(const cli_args *a, train_job *j);
static void ckpt_micro_batch(train_job *j);

/* A training run's memory check (the trainer's, cl_memory_check) before any
 * rank allocates: CL_ERR_OOM over the cap, for the caller to follow with the
 * planner's nearest configurations (cli_plan_nearest); anything else is left
 * to the trainer to report as it always has. */
static cl_status memory_first(train_job *j) {
    if (j->memory || j->convert) return CL_OK;
    cl_status s = cl_memory_check(&j->c, j->mesh.dp, j->mesh.pp);
    if (s && s != CL_ERR_OOM) cl_error_clear(), s = CL_OK;
    return s;
}

/* Under MPI the world's size is known only inside the ranks. */
static cl_status train_rank_mpi(cl_comm *world, void *arg) {
    train_job *j = arg;
    j->world_rank = cl_comm_rank(world);
    if (j->autoplan) { /* rank 0 plans, every rank applies its choice; the agreement then covers it too */
        FILE *say = j->memory && cli_get(j->memory, "json") ? stderr : stdout;
        CL_TRY(cli_train_auto_mpi(world, say, j->autoplan, &j->c, j->gb_given, &j->mesh.dp, &j->mesh.tp, &j->mesh.pp, &j->schedule_given));
        j->gb_given = 1;
    }
    CL_TRY(agree_job(world, j));
    /* the ranks agree on the flags, so these checks fail on all of them alike */
    CL_TRY(cl_comm_fail_together(world, check_mesh(&j->mesh, cl_comm_size(world), j->mesh.dp, j->c.cp, j->mesh.tp, j->mesh.pp)));
    ckpt_micro_batch(j);
    CL_TRY(cl_comm_fail_together(world, check_pipeline(j)));
    if (!j->gb_given) j->c.global_batch = j->c.micro_batch * j->mesh.dp;
    if (!j->threads) j->threads = default_threads(1);
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    CL_TRY(check_job(j, local && atoi(local) > 0 ? atoi(local) : 1));
    cl_status s = memory_first(j); /* every rank alike: refused together, rank 0 lists what fits */
    if (s && cl_comm_rank(world) == 0) {
        char refusal[1024]; /* the planner's search clears errors on its way */
        snprintf(refusal, sizeof refusal, "%s", cl_last_error());
        cli_plan_nearest(stdout, &j->c, j->mesh.dp, j->mesh.tp, j->mesh.pp);
        fflush(stdout);
        return cl_error(s, "%s", refusal);
    }
    if (s) return s;
    if (j->memory) {
        if (!cli_get(j->memory, "measure") && cl_comm_rank(world) != 0) return CL_OK;
        CL_TRY(memory_mode(j->memory, j));
        if (!j->measure) return CL_OK;
    }
    return train_rank(cl_comm_size(world) > 1 ? world : NULL, j);
}

/* cleave memory: without --measure, print the prediction and stop; with it,
 * train two quiet steps (standard output to /dev/null until the table). */
static cl_status memory_mode(const cli_args *a, train_job *j) {
    j->json = cli_get(a, "json") != NULL;
    size_t cap = j->c.device_memory_host ? 0 : j->c.device_memory; /* a --device-memory given */
    if (!cli_get(a, "measure")) {
        CL_TRY(print_memory(stdout, &j->c, &j->mesh, NULL, j->json, cap));
        if (!cap) return CL_OK;
        /* a rank over it: the trainer's refusal (exit 2), after the planner's nearest configurations */
        cl_status s = cl_memory_check(&j->c, j->mesh.dp, j->mesh.pp);
        if (s != CL_ERR_OOM) return s;
        char refusal[1024];
        snprintf(refusal, sizeof refusal, "%s", cl_last_error());
        fflush(stdout);
        cli_plan_nearest(j->json ? stderr : stdout, &j->c, j->mesh.dp, j->mesh.tp, j->mesh.pp);
        return cl_error(s, "%s", refusal);
    }
    j->steps = j->end = 2;
    j->c.steps = j->c.lr.steps = 2;
    j->sample_tokens = 0;
    j->save = NULL;
    fflush(stdout);
    int fd = dup(STDOUT_FILENO);
    if (fd < 0 || !freopen("/dev/null", "w", stdout)) return cl_error(CL_ERR_IO, "cannot hide standard output");
    j->measure = fd + 1;
    return CL_OK;
}

/* cleave memory takes train's flags and these two. */
static cli_flag memory_flags[NFLAGS(train_flags) + 2];
static const cli_flag memory_extra[] = {
    {"measure", "", 0, "also train two steps (output hidden) and print each rank's measured peaks beside the prediction"},
    {"json", "", 0, "one JSON object per rank and line: rank, dp_rank, tp_rank, pp_rank, stages (the pipeline stages it holds, "
                    "or \"all\" as in the table), predicted (and measured) bytes"},
};

/* Train's flags that only a training run reads: cleave memory accepts them
 * (with --measure they shape its two steps) but its --help leaves them out. */
static const char *const train_only[] = {
    "steps", "stop-after", "lr", "min-lr", "warmup", "weight-decay", "beta1", "beta2", "eps", "grad-clip",
    "seed", "eval-every", "eval-batches", "log-file", "plot", "tensorboard", "log-every", "save", "save-every", "save-keep",
    "discard-newer-checkpoints",
    "resume", "save-format", "sample-tokens", "prompt", "temperature", "top-k", "trace", "trace-steps",
    "check-replicas", "comm-timeout",
};

/* cleave convert takes train's flags (the model's and the new layout's) and these. */
static cli_flag convert_flags[NFLAGS(train_flags) + 4];
static const cli_flag convert_extra[] = {
    {"from", "", 1, "checkpoint to read (either format)"},
    {"to", "", 1, "checkpoint to write, at the layout the flags give, in --save-format (default single); a new or empty "
                  "directory unless --overwrite"},
    {"overwrite", "", 0, "replace the checkpoint at --to (only a checkpoint cleave wrote is replaced, never --from or a "
                         "directory it is in)"},
    {"max-shard-size", "", 1, "--save-format hf: files of at most this size (bytes, or 500MB, 5GB, 2GiB) named by "
                              "model.safetensors.index.json, as Hugging Face shards; default one model.safetensors"},
};

/* Whether path a is path b or beneath it (both resolved). */
static int within(const char *a, const char *b) {
    size_t n = strlen(b);
    return !strncmp(a, b, n) && (a[n] == 0 || a[n] == '/' || (n > 0 && b[n - 1] == '/'));
}

/* cleave convert's target: a new or empty path, or with --overwrite a
 * checkpoint cleave wrote (cl_checkpoint_check_target); never --from itself,
 * a directory inside it or one holding it (resolved, so another spelling of
 * the same directory is caught too). */
static cl_status convert_target(const char *from, const char *to, int overwrite) {
    struct stat st;
    if (!overwrite && lstat(to, &st) == 0) {
        DIR *d = S_ISDIR(st.st_mode) ? opendir(to) : NULL;
        struct dirent *e;
        int empty = d != NULL;
        while (d && (e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
        if (d) closedir(d);
        if (!empty)
            return cl_error(CL_ERR_INVALID, "--to %s already exists%s: give a new or empty directory, or --overwrite to replace the "
                            "checkpoint there", to, S_ISDIR(st.st_mode) ? " and is not empty" : " (not a directory)");
    }
    char *rf = realpath(from, NULL), *rt = realpath(to, NULL);
    int clash = rf && rt && (within(rt, rf) || within(rf, rt)); /* to is from, inside it, or holds it */
    if (rf && !rt) { /* a new path: made in its parent, which must not be from or inside it */
        char parent[4096];
        snprintf(parent, sizeof parent, "%s", to);
        char *slash = strrchr(parent, '/');
        if (slash == parent) slash[1] = 0;
        else if (slash) *slash = 0;
        else snprintf(parent, sizeof parent, ".");
        rt = realpath(parent, NULL);
        clash = rt && within(rt, rf);
    }
    free(rf);
    free(rt);
    if (clash)
        return cl_error(CL_ERR_INVALID, "--to %s is --from %s, inside it or holds it: convert never writes over its source", to, from);
    return CL_OK; /* what may be replaced there: cl_checkpoint_check_target, as for --save */
}

/* cleave train --resume DIR and cleave convert --from DIR: the run the
 * checkpoint records (cl_checkpoint_describe, read into ckpt_info by
 * cmd_train before the model flags, which start from its model) fills what
 * the flags leave out: the model, tokenizer, sequence length, global batch,
 * seed and data file, and the micro-batch unless given (cut to fit the
 * global batch at the new dp: ckpt_micro_batch). A flag given that
 * disagrees is refused, one line naming the flag and both values. The rest
 * is this run's: the layout (--dp/--tp/--pp/--zero/schedule/recompute/
 * offload/micro-batch), --steps, the learning-rate and AdamW flags (not
 * recorded), evaluation, saving, logging and sampling. A Hugging Face
 * directory records only its model (and so its tokenizer). Under mpirun
 * every process reads the same files; agree_job then checks that they
 * reached the same values. */
static cl_checkpoint_info ckpt_info; /* its strings outlive the job */

static cl_status ckpt_source(const cli_args *a, train_job *j, const char *flag) {
    const cl_checkpoint_info *in = &ckpt_info;
    cl_train_config *c = &j->c;
    const cl_model_config *m = &in->model;
    const char *dir = j->resume;
    char field[32];
    int mine, theirs;
    /* the flags' model: the checkpoint's where --model is not given, with the shape flags given on top */
    cl_model_config want = c->model;
    /* --model gpt2-tiny with the checkpoint's gpt2 tokenizer (not given) means its 50257-entry vocabulary, as when training */
    if (!cli_get(a, "tokenizer") && !cli_get(a, "vocab") && !strcmp(in->tokenizer, "gpt2") && cl_model_family_of(&want)->tokens &&
        want.vocab < 50257)
        want.vocab = 50257;
    int differs = cl_model_config_diff(&want, m, field, sizeof field, &mine, &theirs);
    if (differs && !strcmp(field, "kind"))
        return cl_error(CL_ERR_INVALID, "%s %s: --model %s disagrees with the checkpoint's %s", flag, dir, cli_get(a, "model"), m->name);
    const struct {
        const char *flag;
        int mine, theirs;
    } shape[] = {{"layers", want.layers, m->layers}, {"heads", want.heads, m->heads}, {"channels", want.channels, m->channels},
                 {"vocab", want.vocab, m->vocab}, {"context", want.seq_len, m->seq_len},
                 {"kv-heads", cl_model_kv_heads(&want), cl_model_kv_heads(m)},
                 {"mlp-width", (int)cl_model_mlp_width(&want), (int)cl_model_mlp_width(m)}};
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++)
        if (cli_get(a, shape[i].flag) && shape[i].mine != shape[i].theirs)
            return cl_error(CL_ERR_INVALID, "%s %s: --%s %d disagrees with the checkpoint's %d", flag, dir, shape[i].flag, shape[i].mine,
                            shape[i].theirs);
    if (differs && cli_get(a, "model"))
        return cl_error(CL_ERR_INVALID, "%s %s: --model %s disagrees with the checkpoint's %s (%s %d, the checkpoint's %d)", flag, dir,
                        cli_get(a, "model"), m->name, field, mine, theirs);
    if (cli_get(a, "tokenizer") && strcmp(c->tokenizer, in->tokenizer))
        return cl_error(CL_ERR_INVALID, "%s %s: --tokenizer %s disagrees with the checkpoint's %s", flag, dir, c->tokenizer, in->tokenizer);
    c->model = *m;
    c->tokenizer = in->tokenizer;
    if (!in->has_state) { /* Hugging Face's: the run's flags (or their defaults) start it */
        fprintf(stderr, "cleave: note: %s %s is a Hugging Face checkpoint: its parameters are imported; the optimizer "
                        "moments start at zero and the step at 0\n", flag, dir);
        return CL_OK;
    }
    const struct {
        const char *flag;
        int mine, theirs;
    } run[] = {{"seq-len", c->seq_len, in->seq_len}, {"global-batch-size", c->global_batch, in->global_batch}};
    for (size_t i = 0; i < sizeof run / sizeof run[0]; i++)
        if (cli_get(a, run[i].flag) && run[i].mine != run[i].theirs)
            return cl_error(CL_ERR_INVALID, "%s %s: --%s %d disagrees with the checkpoint's %d", flag, dir, run[i].flag, run[i].mine,
                            run[i].theirs);
    if (cli_get(a, "seed") && c->seed != in->seed)
        return cl_error(CL_ERR_INVALID, "%s %s: --seed %llu disagrees with the checkpoint's %llu", flag, dir,
                        (unsigned long long)c->seed, (unsigned long long)in->seed);
    /* the data file: the same file (device and inode) by whatever path; one that is gone must be given again */
    struct stat ours, rec;
    const char *data = cli_get(a, "data");
    int have = in->data[0] && data_stat(in->data, &rec) == 0;
    if (!have && strpbrk(in->data, " \t\n")) { /* a blend (cleave/dataset.h), compared as written */
        if (data && strcmp(data, in->data))
            return cl_error(CL_ERR_INVALID, "%s %s: --data \"%s\" disagrees with the checkpoint's blend \"%s\"", flag, dir, data, in->data);
        data = NULL, have = 1;
        c->data = in->data;
    }
    if (data && have && (data_stat(data, &ours) != 0 || ours.st_dev != rec.st_dev || ours.st_ino != rec.st_ino))
        return cl_error(CL_ERR_INVALID, "%s %s: --data %s disagrees with the checkpoint's %s", flag, dir, data, in->data);
    if (data && in->data[0] && !have)
        fprintf(stderr, "cleave: note: %s %s: the checkpoint's data %s is gone; --data %s stands for it\n", flag, dir, in->data, data);
    if (!data && have) c->data = in->data;
    if (!data && in->data[0] && !have && !j->convert) /* convert trains nothing: it keeps the default data */
        return cl_error(CL_ERR_INVALID, "%s %s: the checkpoint's data %s is gone (give --data FILE, where it is now)", flag, dir, in->data);
    const struct {
        const char *flag, *theirs, *dflt;
        const char **to;
    } dat[] = {{"data-key", in->data_key, "text", &c->data_key}, {"split", in->split, "9,1,0", &c->split}};
    for (size_t i = 0; i < sizeof dat / sizeof dat[0]; i++) { /* recorded where given; else the default */
        const char *mine = cli_get(a, dat[i].flag), *theirs = dat[i].theirs[0] ? dat[i].theirs : dat[i].dflt;
        if (mine && strcmp(mine, theirs))
            return cl_error(CL_ERR_INVALID, "%s %s: --%s %s disagrees with the checkpoint's %s", flag, dir, dat[i].flag, mine, theirs);
        if (!mine && dat[i].theirs[0]) *dat[i].to = dat[i].theirs;
    }
    c->seq_len = in->seq_len;
    c->global_batch = in->global_batch;
    c->seed = in->seed;
    j->gb_given = 1;
    if (!cli_get(a, "micro-batch-size") && in->micro_batch) c->micro_batch = in->micro_batch;
    j->mb_fit = !cli_get(a, "micro-batch-size");
    return CL_OK;
}

/* The micro-batch a checkpoint's run left to it (ckpt_source), cut to fit
 * the recorded global batch at this mesh's dp where it does not. */
static void ckpt_micro_batch(train_job *j) {
    cl_train_config *c = &j->c;
    int dp = j->mesh.dp;
    if (j->mb_fit && dp > 0 && c->global_batch % ((int64_t)c->micro_batch * dp) && c->global_batch % dp == 0)
        c->micro_batch = c->global_batch / dp;
}

/* The --config file's sections: the help's groups (cli_print_help_sections).
 * A flag added to train's table is a top-level key at once; listing it here
 * also lets it sit in its section. */
static const cli_section train_sections[] = {
    {"model", "model layers channels heads vocab context seq-len kv-heads mlp-width norm ffn-channels rope-theta tie-embeddings "
              "rope-scaling experts experts-per-token moe-every moe-aux-loss-coeff moe-capacity-factor"},
    {"data", "data data-key split tokenizer tokenizer-dir seed"},
    {"batch", "micro-batch-size global-batch-size"},
    {"optimizer", "steps stop-after lr min-lr warmup weight-decay beta1 beta2 eps grad-clip"},
    {"eval", "eval-every eval-batches sample-tokens prompt temperature top-k"},
    {"log", "log-file log-every plot tensorboard trace trace-steps"},
    {"checkpoint", "save save-every save-keep discard-newer-checkpoints resume save-format"},
    {"parallel", "ranks auto threads comm dp cp context-parallel-size cp-comm ep expert-model-parallel-size tp pp data-parallel-size "
                 "tensor-model-parallel-size pipeline-model-parallel-size "
                 "sequence-parallel make-vocab-size-divisible-by zero zero3-prefetch check-replicas bucket-size comm-timeout "
                 "schedule virtual-stages pp-layout"},
    {"memory", "device-memory offload-optimizer offload-dir recompute dtype grad-reduce-dtype"},
    {NULL, NULL},
};

/* What cmd_train reads besides the job: the command (train, memory or
 * convert), its flags, and the layout and launch figures the mesh is made of. */
typedef struct {
    cli_args a;
    int memory, convert;
    int ranks, dp, tp, pp, stop_after, gb_given;
    float timeout;
    const char *src_flag; /* --resume, or convert's --from */
} train_cli;

/* The command's flag table: train's, or train's with memory's or convert's own. */
static int train_table(const char *cmd, const cli_flag **flags) {
    if (!strcmp(cmd, "memory")) {
        if (!memory_flags[0].name) {
            memcpy(memory_flags, train_flags, sizeof train_flags);
            memcpy(memory_flags + NFLAGS(train_flags), memory_extra, sizeof memory_extra);
        }
        *flags = memory_flags;
        return NFLAGS(memory_flags);
    }
    if (!strcmp(cmd, "convert")) {
        if (!convert_flags[0].name) {
            memcpy(convert_flags, train_flags, sizeof train_flags);
            memcpy(convert_flags + NFLAGS(train_flags), convert_extra, sizeof convert_extra);
            for (int i = 0; i < NFLAGS(train_flags); i++) /* train's --dtype is the run's; convert's its export's */
                if (!strcmp(convert_flags[i].name, "dtype"))
                    convert_flags[i] = (cli_flag){"dtype", "", 1, "--save-format hf: the tensors' number format, f32 (default), bf16 "
                                                                  "or f16 (rounded to nearest even)"};
        }
        *flags = convert_flags;
        return NFLAGS(convert_flags);
    }
    *flags = train_flags;
    return NFLAGS(train_flags);
}

static void train_help(const train_cli *tc) {
    const cli_flag *flags = tc->a.flags;
    int nflags = tc->a.nflags;
    if (tc->memory) {
        cli_flag shown[NFLAGS(memory_flags)];
        int nshown = 0;
        for (int i = 0; i < nflags; i++) {
            int only = 0;
            for (int k = 0; k < NFLAGS(train_only); k++) only |= !strcmp(flags[i].name, train_only[k]);
            if (!only) shown[nshown++] = flags[i];
        }
        cli_print_help("usage: cleave memory [train's model, batch and parallel flags] [--measure] [--json]\n\n"
                       "Prints, before anything runs, the device bytes every rank of that training run will hold at\n"
                       "its peak, by category (parameters, gradients, optimizer state, activations, workspace,\n"
                       "communication) and in total. The prediction sums the same size statements the allocations use,\n"
                       "so with --measure (two training steps, their output hidden) the measured peaks equal it.\n"
                       "train's other flags (--steps, --lr, --save, ...) are accepted; only --measure's two steps read them.",
                       shown, nshown);
    } else if (tc->convert) {
        cli_print_help("usage: cleave convert --from DIR --to DIR2 [--save-format single|sharded|hf] [train's layout flags]\n\n"
                       "Reads a checkpoint into the layout the flags give (--dp, --tp, --pp, --zero, ...) and writes it again,\n"
                       "without a step. The model, tokenizer, sequence length, batch sizes, seed and data come from the\n"
                       "checkpoint (a model flag given must agree with it). DIR may be cleave's single file or sharded\n"
                       "checkpoint, or a Hugging Face GPT-2, Llama or Mixtral (config.json with model_type gpt2, llama or\n"
                       "mixtral and model.safetensors or HF's shards with model.safetensors.index.json; F32, BF16, Llama's\n"
                       "and Mixtral's F16 too): its parameters are imported, the optimizer moments start at zero and the\n"
                       "step at 0. --save-format hf\n"
                       "writes a Hugging Face directory (config.json, the tensors under HF's names; --dtype, --max-shard-size).",
                       flags, nflags);
    } else {
        cli_print_help_sections("usage: cleave train [--model M] [--steps N] [--lr X] [--data FILE] [flags]\n"
                                "       cleave train --config run.json [flags]       (settings from a file; flags win)\n"
                                "       cleave train --ranks N --dp N ...            (N ranks as threads in this process)\n"
                                "       mpirun -np N cleave train --comm mpi ...     (one rank per MPI process)\n\n"
                                "Trains a model and prints each step; at the end reports validation loss and prints\n"
                                "a generated sample.\n\n"
                                "--config FILE takes a JSON object whose keys are the long flag names (\"dp\": 2,\n"
                                "\"model\": \"gpt2-tiny\", a switch true or false, null for not given), at top level or in\n"
                                "the section its group below names: {\"parallel\": {\"dp\": 2}, \"optimizer\": {\"lr\": 3e-4}}.\n"
                                "--print-config prints the resolved settings in that form and stops; every checkpoint\n"
                                "(run_config.json) and --log-file (its first line, {\"config\": ...}) records them, so\n"
                                "cleave train --config CKPT/run_config.json repeats the run.",
                                train_flags, NFLAGS(train_flags), train_sections);
    }
}

/* The defaults a run starts from before its flags. */
static void job_defaults(train_job *j, train_cli *tc) {
    memset(j, 0, sizeof *j);
    cl_train_config_default(&j->c);
    j->steps = j->c.steps;
    j->log_every = 1;
    j->sample_tokens = 200;
    j->topk = 40;
    j->temperature = 0.8f;
    j->trace_steps = 20;
    tc->stop_after = tc->ranks = tc->dp = tc->tp = tc->pp = 0;
    tc->timeout = 300;
}

/* The numeric flags, each into its field. */
static cl_status parse_numbers(train_cli *tc, train_job *j) {
    const cli_args *a = &tc->a;
    cl_train_config *c = &j->c;
    cl_status s;
    if ((s = cli_int(a, "steps", &j->steps, 1, 1 << 30)) || (s = cli_float(a, "lr", &c->lr.lr, 1e-12, 10)) ||
        (s = cli_int(a, "micro-batch-size", &c->micro_batch, 1, 1 << 20)) ||
        (s = cli_int(a, "global-batch-size", &c->global_batch, 1, 1 << 30)) || (s = cli_u64(a, "seed", &c->seed)) ||
        (s = cli_float(a, "weight-decay", &c->adamw.weight_decay, 0, 10)) || (s = cli_float(a, "beta1", &c->adamw.beta1, 0, 0.999999)) ||
        (s = cli_float(a, "beta2", &c->adamw.beta2, 0, 0.99999999)) || (s = cli_float(a, "eps", &c->adamw.eps, 0, 1)) ||
        (s = cli_float(a, "grad-clip", &c->adamw.grad_clip, 0, 1e9)) || (s = cli_bytes(a, "device-memory", &c->device_memory)) ||
        (s = cli_int(a, "eval-every", &j->eval_every, 1, 1 << 30)) || (s = cli_int(a, "eval-batches", &c->eval_batches, 0, 1 << 30)) ||
        (s = cli_int(a, "log-every", &j->log_every, 1, 1 << 30)) || (s = cli_int(a, "stop-after", &tc->stop_after, 1, 1 << 30)) ||
        (s = cli_int(a, "save-every", &j->save_every, 1, 1 << 30)) || (s = cli_int(a, "save-keep", &j->keep, 1, 1 << 30)) ||
        (s = cli_int(a, "sample-tokens", &j->sample_tokens, 0, 1 << 20)) || (s = cli_int(a, "top-k", &j->topk, 0, 1 << 30)) ||
        (s = cli_float(a, "temperature", &j->temperature, 0, 100)) || (s = cli_int(a, "ranks", &tc->ranks, 1, 4096)) ||
        (s = cli_int(a, "dp", &tc->dp, 1, 4096)) || (s = cli_int(a, "tp", &tc->tp, 1, 4096)) || (s = cli_int(a, "pp", &tc->pp, 1, 4096)) ||
        (s = cli_int(a, "data-parallel-size", &tc->dp, 1, 4096)) || (s = cli_int(a, "tensor-model-parallel-size", &tc->tp, 1, 4096)) ||
        (s = cli_int(a, "pipeline-model-parallel-size", &tc->pp, 1, 4096)) || (s = cli_int(a, "cp", &c->cp, 1, 4096)) ||
        (s = cli_int(a, "context-parallel-size", &c->cp, 1, 4096)) || (s = cli_int(a, "ep", &c->ep, 1, 4096)) ||
        (s = cli_int(a, "expert-model-parallel-size", &c->ep, 1, 4096)) ||
        (s = cli_bytes(a, "bucket-size", &c->bucket_bytes)) || (s = cli_float(a, "comm-timeout", &tc->timeout, 0.1, 1e7)) ||
        (s = cli_int(a, "threads", &j->threads, 1, 4096)))
        return s;
    if (!tc->gb_given) c->global_batch = c->micro_batch * (tc->dp ? tc->dp : tc->ranks ? tc->ranks / (tc->pp ? tc->pp : 1) : 1);
    return CL_OK;
}

/* The layout's named settings: schedule, ZeRO, offload, recompute, the pipeline's layout and trace. */
static cl_status parse_layout(const cli_args *a, train_job *j) {
    cl_train_config *c = &j->c;
    if (cli_get(a, "schedule")) {
        cl_sched_kind k;
        CL_TRY(cl_sched_kind_parse(cli_get(a, "schedule"), &k));
        c->schedule = (int)k;
        j->schedule_given = 1;
    }
    CL_TRY(cli_int(a, "virtual-stages", &c->virtual_stages, 1, 64));
    c->sequence_parallel = cli_get(a, "sequence-parallel") != NULL;
    c->check_replicas = cli_get(a, "check-replicas") != NULL;
    CL_TRY(cli_int(a, "zero", &c->zero, CL_ZERO_NONE, CL_ZERO_PARAMS));
    CL_TRY(cli_int(a, "zero3-prefetch", &c->zero3_prefetch, 0, 1 << 20));
    CL_TRY(cli_offload(a, &c->offload_optimizer));
    c->offload_dir = cli_get(a, "offload-dir");
    if (c->offload_dir && c->offload_optimizer != CL_OFFLOAD_DISK) return cl_error(CL_ERR_INVALID, "--offload-dir needs --offload-optimizer disk");
    if (c->offload_optimizer == CL_OFFLOAD_DISK && !c->offload_dir) return cl_error(CL_ERR_INVALID, "--offload-optimizer disk needs --offload-dir DIR");
    if (c->offload_dir) CL_TRY(cl_check_dir_writable(c->offload_dir, "--offload-dir"));
    CL_TRY(cli_int(a, "make-vocab-size-divisible-by", &c->vocab_divisible_by, 1, 1 << 20));
    c->pp_layout = cli_get(a, "pp-layout");
    j->trace_path = cli_get(a, "trace");
    CL_TRY(cli_int(a, "trace-steps", &j->trace_steps, 0, 1 << 30));
    const char *cc = cli_get(a, "cp-comm");
    if (cc && strcmp(cc, "ring") && strcmp(cc, "a2a")) return cl_error(CL_ERR_INVALID, "unknown --cp-comm '%s' (ring or a2a)", cc);
    c->cp_comm = cc && !strcmp(cc, "a2a") ? CL_CP_A2A : CL_CP_RING;
    c->dtype = c->grad_reduce = CL_F32;
    if (!c->params_only) CL_TRY(cli_format(a, "dtype", &c->dtype)); /* convert's --dtype is its export's (parse_hf_format) */
    CL_TRY(cli_format(a, "grad-reduce-dtype", &c->grad_reduce));
    if (cli_get(a, "recompute")) {
        cl_recompute rc;
        CL_TRY(cl_recompute_parse(cli_get(a, "recompute"), &rc));
        c->recompute = (int)rc;
    }
    c->trace = j->trace_path != NULL;
    return CL_OK;
}

/* The schedule's length and learning rates, and the data and tokenizer. */
static cl_status parse_schedule_data(train_cli *tc, train_job *j) {
    const cli_args *a = &tc->a;
    cl_train_config *c = &j->c;
    c->steps = j->steps;
    c->lr.steps = j->steps;
    c->lr.min_lr = c->lr.lr / 10;
    c->lr.warmup = j->steps / 10;
    CL_TRY(cli_float(a, "min-lr", &c->lr.min_lr, 0, 10));
    CL_TRY(cli_int(a, "warmup", &c->lr.warmup, 0, 1 << 30));
    j->end = tc->stop_after && tc->stop_after < j->steps ? tc->stop_after : j->steps;
    if (cli_get(a, "data")) c->data = cli_get(a, "data");
    c->data_key = cli_get(a, "data-key");
    c->split = cli_get(a, "split");
    if (cli_get(a, "tokenizer")) c->tokenizer = cli_get(a, "tokenizer");
    if (cli_get(a, "tokenizer-dir")) c->tokenizer_dir = cli_get(a, "tokenizer-dir");
    if (!strcmp(c->tokenizer, "gpt2") && !cli_get(a, "vocab") && cl_model_family_of(&c->model)->tokens && c->model.vocab < 50257) {
        c->model.vocab = 50257;
        snprintf(c->model.name, sizeof c->model.name, "custom");
    }
    return CL_OK;
}

/* convert --save-format hf's --dtype and --max-shard-size (refused with another format). */
static cl_status parse_hf_format(train_cli *tc, train_job *j, const char *fmt) {
    const cli_args *a = &tc->a;
    const char *dt = tc->convert ? cli_get(a, "dtype") : NULL, *ms = tc->convert ? cli_get(a, "max-shard-size") : NULL;
    j->hf = fmt && !strcmp(fmt, "hf");
    if (!j->hf && (dt || ms)) return cl_error(CL_ERR_INVALID, "%s needs --save-format hf", dt ? "--dtype" : "--max-shard-size");
    j->hf_dtype = CL_F32;
    if (dt && !strcmp(dt, "bf16")) j->hf_dtype = CL_BF16;
    else if (dt && !strcmp(dt, "f16")) j->hf_dtype = CL_F16;
    else if (dt && strcmp(dt, "f32")) return cl_error(CL_ERR_INVALID, "unknown --dtype '%s' (f32, bf16 or f16)", dt);
    j->max_shard = 0;
    if (ms) CL_TRY(cl_hf_parse_size(ms, &j->max_shard));
    if (j->hf && cli_get(a, "overwrite"))
        return cl_error(CL_ERR_INVALID, "--overwrite: --save-format hf writes only to a new path or an empty directory");
    return CL_OK;
}

/* Saving, resuming (the checkpoint's run filling what the flags leave out)
 * and convert's --from/--to; a save that would fail, or replace what is not
 * a checkpoint, refused before any step. */
static cl_status parse_checkpoints(train_cli *tc, train_job *j) {
    const cli_args *a = &tc->a;
    j->save = cli_get(a, "save");
    j->resume = cli_get(a, "resume");
    const char *fmt = cli_get(a, "save-format");
    if (fmt && strcmp(fmt, "single") && strcmp(fmt, "sharded") && (strcmp(fmt, "hf") || !tc->convert))
        return cl_error(CL_ERR_INVALID, "unknown --save-format '%s' (single or sharded%s)", fmt, tc->convert ? ", or hf" : "");
    j->sharded = fmt && !strcmp(fmt, "sharded");
    CL_TRY(parse_hf_format(tc, j, fmt));
    if (tc->convert) {
        if (j->save || j->resume) return cl_error(CL_ERR_INVALID, "cleave convert takes --from and --to, not --save or --resume");
        j->resume = cli_get(a, "from");
        j->save = cli_get(a, "to");
        if (!j->resume || !j->save) return cl_error(CL_ERR_INVALID, "cleave convert needs --from DIR and --to DIR2");
        j->convert = 1;
        j->sample_tokens = 0;
        CL_TRY(convert_target(j->resume, j->save, cli_get(a, "overwrite") != NULL));
    }
    if (j->resume) CL_TRY(ckpt_source(a, j, tc->src_flag));
    tc->gb_given |= j->gb_given;
    CL_TRY(check_kept(a, j));
    if (j->save) {
        cl_status s = j->kept ? cl_checkpoint_check_kept_target(j->save) : cl_checkpoint_check_target(j->save);
        if (s) return cl_error_context(s, tc->convert ? "--to" : "--save");
    }
    if (j->kept) CL_TRY(check_kept_steps(j));
    return CL_OK;
}

/* Every flag into the job, in the order the checks have always run: the
 * checkpoint's model first, then numbers, layout, schedule and data,
 * checkpoints, and what is printed and logged. */
static cl_status resolve_job(train_cli *tc, train_job *j) {
    const cli_args *a = &tc->a;
    cl_train_config *c = &j->c;
    job_defaults(j, tc);
    /* --resume and convert's --from: the checkpoint's model is the one the model flags start from (ckpt_source) */
    const char *src = tc->convert ? cli_get(a, "from") : cli_get(a, "resume");
    tc->src_flag = tc->convert ? "--from" : "--resume";
    if (src && !*src) return cl_error(CL_ERR_INVALID, "%s: empty path", tc->src_flag);
    if (src) CL_TRY(cl_error_context(cl_checkpoint_describe(src, &ckpt_info), "%s", tc->src_flag));
    CL_TRY(cli_parse_model_from(a, src ? &ckpt_info.model : NULL, &c->model, &c->seq_len));
    /* a configuration the unit kinds cannot train yet is refused before anything starts (memory predicts it) */
    if (!tc->memory && !tc->convert && !cli_get(a, "print-config")) CL_TRY(cl_model_config_runs(&c->model));
    c->params_only = tc->convert; /* convert only moves parameters: a model the kinds cannot run yet converts */
    tc->gb_given = j->gb_given = cli_get(a, "global-batch-size") != NULL;
    CL_TRY(parse_numbers(tc, j));
    CL_TRY(parse_layout(a, j));
    CL_TRY(parse_schedule_data(tc, j));
    CL_TRY(parse_checkpoints(tc, j));
    j->log_path = cli_get(a, "log-file");
    j->plot_path = cli_get(a, "plot");
    j->tb_dir = cli_get(a, "tensorboard");
    j->prompt = cli_get(a, "prompt") ? cli_get(a, "prompt") : "And God said";
    j->comm_name = cli_get(a, "comm") ? cli_get(a, "comm") : "threads";
    if (tc->memory) j->memory = a;
    if (strcmp(j->comm_name, "mpi") && strcmp(j->comm_name, "threads"))
        return cl_error(CL_ERR_INVALID, "unknown --comm '%s' (threads or mpi)", j->comm_name);
    return CL_OK;
}

/* --auto: threads plan here (the choice fixes the layout); under MPI rank 0
 * plans inside the ranks (train_rank_mpi). */
static cl_status plan_auto(train_cli *tc, train_job *j) {
    const cli_args *a = &tc->a;
    int use_mpi = !strcmp(j->comm_name, "mpi");
    if (!cli_get(a, "auto")) return CL_OK;
    if (use_mpi && !tc->convert) {
        j->autoplan = a;
        return CL_OK;
    }
    if (tc->convert) return cl_error(CL_ERR_INVALID, "--auto plans a training run: cleave convert takes the layout its flags give");
    /* cleave memory --auto --json and --print-config: the choice on stderr, the JSON alone on stdout */
    FILE *say = (tc->memory && cli_get(a, "json")) || cli_get(a, "print-config") ? stderr : stdout;
    CL_TRY(cli_train_auto(say, a, &j->c, tc->gb_given, &tc->ranks, &tc->dp, &tc->tp, &tc->pp, &j->schedule_given));
    tc->gb_given = j->gb_given = 1;
    return CL_OK;
}

/* The resolved configuration as JSON (--print-config, run_config.json, the
 * log's first line): every flag of the table by its key, in its section,
 * from the job's resolved values; a flag this function does not know (one
 * added to the table later) as the command line or file gave it. null: not
 * given (the default found on the machine, or none). Fed back as --config
 * it resolves to the same job. */
typedef struct {
    const char *v[CLI_MAX_FLAGS]; /* the text; NULL: null */
    unsigned char set[CLI_MAX_FLAGS], num[CLI_MAX_FLAGS];
    char buf[CLI_MAX_FLAGS][48];
} resolved;

static void rput(resolved *r, const cli_args *a, const char *name, int num, const char *v) {
    for (int i = 0; i < a->nflags; i++)
        if (!strcmp(a->flags[i].name, name)) {
            r->v[i] = v, r->set[i] = 1, r->num[i] = (unsigned char)num;
            if (v && num) r->v[i] = strcpy(r->buf[i], v);
        }
}

static void rnum(resolved *r, const cli_args *a, const char *name, long long v) {
    char t[32];
    snprintf(t, sizeof t, "%lld", v);
    rput(r, a, name, 1, t);
}

static void rfloat(resolved *r, const cli_args *a, const char *name, float v) {
    char t[32];
    float_text(v, t, sizeof t); /* read back, the same float */
    rput(r, a, name, 1, t);
}

/* Whether text is a JSON number as written (so a flag's text can go bare). */
static int json_number(const char *t) {
    const char *p = t;
    if (*p == '-') p++;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (*p >= '0' && *p <= '9') p++;
    else return 0;
    if (*p == '.') {
        if (!(*++p >= '0' && *p <= '9')) return 0;
        while (*p >= '0' && *p <= '9') p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return 0;
        while (*p >= '0' && *p <= '9') p++;
    }
    return *p == 0;
}

static void resolve_values(const train_cli *tc, const train_job *j, resolved *r) {
    const cli_args *a = &tc->a;
    const cl_train_config *c = &j->c;
    const cl_model_config *mc = &c->model;
    int gpt = cl_model_family_of(mc)->tokens, mpi = !strcmp(j->comm_name, "mpi");
    int llama = !strcmp(cl_model_family_of(mc)->name, "llama");
    rput(r, a, "model", 0, cli_get(a, "model") ? cli_get(a, "model") : j->resume ? NULL : "gpt2-tiny");
    const struct {
        const char *name;
        int v;
    } shape[] = {{"layers", mc->layers}, {"channels", mc->channels}, {"heads", mc->heads}, {"vocab", mc->vocab}, {"context", mc->seq_len},
                 {"seq-len", c->seq_len ? c->seq_len : mc->seq_len}};
    for (int i = 0; i < 6; i++) gpt ? rnum(r, a, shape[i].name, shape[i].v) : rput(r, a, shape[i].name, 0, NULL);
    /* the family's choices past GPT-2's, recorded only where they differ from its defaults */
    mc->kv_heads && gpt ? rnum(r, a, "kv-heads", mc->kv_heads) : rput(r, a, "kv-heads", 0, NULL);
    mc->mlp_width && gpt ? rnum(r, a, "mlp-width", mc->mlp_width) : rput(r, a, "mlp-width", 0, NULL);
    rput(r, a, "norm", 0, mc->norm == CL_NORM_RMS && gpt ? "rmsnorm" : NULL);
    llama ? rfloat(r, a, "rope-theta", mc->rope_theta) : rput(r, a, "rope-theta", 0, NULL);
    llama ? rnum(r, a, "tie-embeddings", !mc->untied) : rput(r, a, "tie-embeddings", 0, NULL);
    int moe = llama && mc->experts; /* the mixture of experts' settings, a Llama model with experts only */
    moe ? rnum(r, a, "experts", mc->experts) : rput(r, a, "experts", 0, NULL);
    moe ? rnum(r, a, "experts-per-token", mc->experts_per_token) : rput(r, a, "experts-per-token", 0, NULL);
    moe ? rnum(r, a, "moe-every", mc->moe_every) : rput(r, a, "moe-every", 0, NULL);
    moe ? rfloat(r, a, "moe-aux-loss-coeff", (float)mc->moe_aux_coeff) : rput(r, a, "moe-aux-loss-coeff", 0, NULL);
    moe ? rfloat(r, a, "moe-capacity-factor", (float)mc->moe_capacity_factor) : rput(r, a, "moe-capacity-factor", 0, NULL);
    static char scaling[112]; /* the text rput keeps (a string, not a number) */
    snprintf(scaling, sizeof scaling, "none");
    if (mc->rope_factor)
        snprintf(scaling, sizeof scaling, "llama3:%.17g,%.17g,%.17g,%d", mc->rope_factor, mc->rope_low_freq, mc->rope_high_freq,
                 mc->rope_original_context);
    rput(r, a, "rope-scaling", 0, llama ? scaling : NULL);
    rnum(r, a, "steps", j->steps);
    j->end < j->steps ? rnum(r, a, "stop-after", j->end) : rput(r, a, "stop-after", 0, NULL);
    rfloat(r, a, "lr", c->lr.lr);
    rfloat(r, a, "min-lr", c->lr.min_lr);
    rnum(r, a, "warmup", c->lr.warmup);
    rfloat(r, a, "weight-decay", c->adamw.weight_decay);
    rfloat(r, a, "beta1", c->adamw.beta1);
    rfloat(r, a, "beta2", c->adamw.beta2);
    rfloat(r, a, "eps", c->adamw.eps);
    rfloat(r, a, "grad-clip", c->adamw.grad_clip);
    rnum(r, a, "micro-batch-size", c->micro_batch);
    rnum(r, a, "global-batch-size", c->global_batch);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->seed);
    rput(r, a, "seed", 1, seed);
    rput(r, a, "data", 0, c->data);
    rput(r, a, "tokenizer", 0, c->tokenizer);
    rput(r, a, "tokenizer-dir", 0, c->tokenizer_dir);
    c->device_memory && !c->device_memory_host ? rnum(r, a, "device-memory", (long long)c->device_memory)
                                               : rput(r, a, "device-memory", 0, NULL);
    j->eval_every ? rnum(r, a, "eval-every", j->eval_every) : rput(r, a, "eval-every", 0, NULL);
    rnum(r, a, "eval-batches", c->eval_batches);
    rput(r, a, "log-file", 0, j->log_path);
    rput(r, a, "plot", 0, j->plot_path);
    rnum(r, a, "log-every", j->log_every);
    rput(r, a, "save", 0, j->convert ? NULL : j->save);
    j->save_every ? rnum(r, a, "save-every", j->save_every) : rput(r, a, "save-every", 0, NULL);
    j->keep ? rnum(r, a, "save-keep", j->keep) : rput(r, a, "save-keep", 0, NULL);
    rput(r, a, "resume", 0, j->convert ? NULL : j->resume);
    rput(r, a, "save-format", 0, j->sharded ? "sharded" : "single");
    rnum(r, a, "sample-tokens", j->sample_tokens);
    rput(r, a, "prompt", 0, j->prompt);
    rfloat(r, a, "temperature", j->temperature);
    rnum(r, a, "top-k", j->topk);
    mpi ? rput(r, a, "ranks", 0, NULL) : rnum(r, a, "ranks", j->mesh.world);
    rput(r, a, "auto", 0, j->autoplan ? "true" : "false"); /* threads: the plan's choice is what follows */
    rput(r, a, "comm", 0, j->comm_name);
    const struct {
        const char *name;
        int v;
    } mesh[] = {{"dp", j->mesh.dp}, {"tp", j->mesh.tp}, {"pp", j->mesh.pp}};
    for (int i = 0; i < 3; i++) mesh[i].v ? rnum(r, a, mesh[i].name, mesh[i].v) : rput(r, a, mesh[i].name, 0, NULL);
    rnum(r, a, "make-vocab-size-divisible-by", c->vocab_divisible_by);
    static const char *const offload[] = {"none", "host", "disk"}, *const recompute[] = {"none", "selective", "full"};
    rput(r, a, "offload-optimizer", 0, offload[c->offload_optimizer]);
    rput(r, a, "offload-dir", 0, c->offload_dir);
    rnum(r, a, "zero", c->zero);
    rnum(r, a, "zero3-prefetch", c->zero3_prefetch);
    c->bucket_bytes ? rnum(r, a, "bucket-size", (long long)c->bucket_bytes) : rput(r, a, "bucket-size", 0, NULL);
    rfloat(r, a, "comm-timeout", tc->timeout);
    /* the pipeline's settings only where there is a pipeline (check_pipeline refuses them without) */
    rput(r, a, "schedule", 0, j->mesh.pp > 1 || j->schedule_given ? cl_sched_kind_name((cl_sched_kind)c->schedule) : NULL);
    c->virtual_stages ? rnum(r, a, "virtual-stages", c->virtual_stages) : rput(r, a, "virtual-stages", 0, NULL);
    rput(r, a, "pp-layout", 0, c->pp_layout);
    rnum(r, a, "trace-steps", j->trace_steps);
    rput(r, a, "recompute", 0, recompute[c->recompute]);
    if (c->dtype == CL_BF16) rput(r, a, "dtype", 0, "bf16"); /* fp32 left out: the resolved settings of fp32 runs unchanged */
    if (c->cp > 1) rnum(r, a, "cp", c->cp); /* --auto's choice too (1 left out, as before) */
    if (c->cp_comm == CL_CP_A2A) rput(r, a, "cp-comm", 0, "a2a"); /* ring left out, as fp32 */
    if (c->grad_reduce == CL_BF16) rput(r, a, "grad-reduce-dtype", 0, "bf16");
    rput(r, a, "trace", 0, j->trace_path);
}

static void json_value(cl_strbuf *b, const cli_args *a, const resolved *r, int f) {
    const char *v = r->set[f] ? r->v[f] : a->values[f];
    if (!a->flags[f].takes_value) cl_sb_printf(b, "%s", (r->set[f] ? v && !strcmp(v, "true") : v != NULL) ? "true" : "false");
    else if (!v) cl_sb_printf(b, "null");
    else if (r->set[f] ? r->num[f] : (a->json[f] ? a->json[f] == CL_JSON_NUMBER + 1 : json_number(v))) cl_sb_printf(b, "%s", v);
    else cl_sb_json_string(b, v, strlen(v));
}

/* The settings of one section (NULL: those in none), ", "-separated after *n earlier ones. */
static void json_members(cl_strbuf *b, const cli_args *a, const resolved *r, const char *section, const char *indent, int *n) {
    for (int f = 0; f < a->nflags; f++) {
        const char *nm = a->flags[f].name, *sec = cli_config_section(train_sections, nm);
        if (!strcmp(nm, "help") || !strcmp(nm, "config") || !strcmp(nm, "print-config") || cli_flag_canon(a, f) != f) continue;
        if (section ? !sec || strcmp(sec, section) : sec != NULL) continue;
        cl_sb_printf(b, "%s\n%s\"%s\": ", (*n)++ ? "," : "", indent, nm);
        json_value(b, a, r, f);
    }
}

static cl_status config_json(const train_cli *tc, const train_job *j, char **out) {
    resolved *r = calloc(1, sizeof *r);
    if (!r) return cl_error(CL_ERR_OOM, "no host memory for the resolved configuration");
    resolve_values(tc, j, r);
    cl_strbuf b = {0};
    int n = 0;
    cl_sb_printf(&b, "{");
    json_members(&b, &tc->a, r, NULL, "  ", &n);
    for (int k = 0; train_sections[k].name; k++) {
        int m = 0;
        cl_sb_printf(&b, "%s\n  \"%s\": {", n++ ? "," : "", train_sections[k].name);
        json_members(&b, &tc->a, r, train_sections[k].name, "    ", &m);
        cl_sb_printf(&b, "\n  }");
    }
    cl_sb_printf(&b, "\n}\n");
    free(r);
    if (b.failed) {
        cl_sb_free(&b);
        return cl_error(CL_ERR_OOM, "no host memory for the resolved configuration");
    }
    *out = b.buf;
    return CL_OK;
}

/* The resolved configuration kept for the checkpoints and the log (c->run_config);
 * with --print-config printed instead (the launching process alone under mpirun). */
static char *run_config_text;
static cl_status record_config(const train_cli *tc, train_job *j, int *printed) {
    *printed = 0;
    if (!run_config_text) CL_TRY(config_json(tc, j, &run_config_text));
    j->c.run_config = run_config_text;
    if (!cli_get(&tc->a, "print-config")) return CL_OK;
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!rank || !strcmp(rank, "0")) fputs(run_config_text, stdout);
    *printed = 1;
    return CL_OK;
}

/* Under MPI: each process a rank (the world's size from mpirun), the mesh and the plan made inside them. */
static int launch_mpi(train_cli *tc, train_job *j, int argc, char **argv) {
    if (!cl_mpi_available())
        return cli_fail(cl_error(CL_ERR_UNSUPPORTED, "--comm mpi: this cleave was built without MPI (install libopenmpi-dev and rebuild)"));
    /* the world's size comes from mpirun; the mesh is checked inside each rank */
    j->mesh.world = 0;
    j->mesh.dp = tc->dp;
    j->mesh.tp = tc->tp;
    j->mesh.pp = tc->pp;
    int printed;
    cl_status s = record_config(tc, j, &printed);
    if (s || printed) return s ? cli_fail(s) : 0;
    if (tc->ranks) fprintf(stderr, "cleave: note: --ranks is ignored with --comm mpi (mpirun -np sets the world)\n");
    j->world_rank = -1; /* until the rank runs */
    cl_launch_opts lo = {.timeout_s = tc->timeout};
    s = cl_launch_mpi(&argc, &argv, train_rank_mpi, j, &lo);
    /* a failure returned once the ranks ran is every rank's, printed by the launcher (others abort the job) */
    return !s ? 0 : j->world_rank >= 0 ? cli_exit_status(s) : cli_fail(s);
}

/* As threads: the mesh and the remaining checks here, then the ranks. */
static int launch_threads(train_cli *tc, train_job *j) {
    cl_status s;
    int cp = j->c.cp > 1 ? j->c.cp : 1;
    int ranks = tc->ranks ? tc->ranks : (tc->dp ? tc->dp : 1) * cp * (tc->tp ? tc->tp : 1) * (tc->pp ? tc->pp : 1);
    if ((s = check_mesh(&j->mesh, ranks, tc->dp, cp, tc->tp, tc->pp))) return cli_fail(s);
    if (!tc->gb_given) j->c.global_batch = j->c.micro_batch * j->mesh.dp;
    ckpt_micro_batch(j);
    if ((s = check_pipeline(j))) return cli_fail(s);
    int threads_given = j->threads;
    if (!j->threads) j->threads = default_threads(ranks);
    if ((s = check_job(j, ranks))) return cli_fail(s);
    int printed, threads = j->threads;
    j->threads = threads_given; /* the record keeps a default as "not given" */
    s = record_config(tc, j, &printed);
    j->threads = threads;
    if (s || printed) return s ? cli_fail(s) : 0;
    /* over the cap: the trainer's refusal, then the planner's nearest configurations that fit */
    if ((s = memory_first(j))) {
        int rc = cli_fail(s);
        fflush(stderr);
        cli_plan_nearest(stdout, &j->c, j->mesh.dp, j->mesh.tp, j->mesh.pp);
        return rc;
    }
    if (tc->memory && (s = memory_mode(&tc->a, j))) return cli_fail(s);
    if (tc->memory && !j->measure) return 0;
    cl_launch_opts lo = {.timeout_s = tc->timeout};
    if (ranks == 1) s = train_rank(NULL, j);
    else s = cl_launch_threads(ranks, train_rank, j, &lo);
    return s ? cli_fail(s) : 0;
}

/* cleave train, memory and convert: parse (flags, then --config under them),
 * resolve the job, plan (--auto), then launch the ranks, which build the
 * trainer, run the loop and report (train_rank). */
static int cmd_train(int argc, char **argv) {
    static train_cli tc; /* the job points into its flags for the run's life */
    static train_job j;
    tc.memory = !strcmp(argv[1], "memory");
    tc.convert = !strcmp(argv[1], "convert");
    const cli_flag *flags;
    int nflags = train_table(argv[1], &flags);
    cl_status s = cli_parse(&tc.a, flags, nflags, argc, argv, 2);
    if (s) return cli_fail(s);
    if (cli_get(&tc.a, "help")) {
        train_help(&tc);
        return 0;
    }
    if (cli_get(&tc.a, "config") && (s = cli_config_load(&tc.a, cli_get(&tc.a, "config"), train_sections))) return cli_fail(s);
    if ((s = resolve_job(&tc, &j)) || (s = plan_auto(&tc, &j))) return cli_fail(s);
    return !strcmp(j.comm_name, "mpi") ? launch_mpi(&tc, &j, argc, argv) : launch_threads(&tc, &j);
}

static const cli_flag eval_flags[] = {
    {"help", "h", 0, "show this help"},
    {"checkpoint", "", 1, "checkpoint directory (from cleave train --save)"},
    {"text", "", 1, "text file to evaluate on (all of it)"},
    {"data", "", 1, "instead of --text: data as cleave train --data takes it (a text, .jsonl, directory or blend), of which one part is evaluated"},
    {"data-key", "", 1, "the field of each JSONL line that holds its text (default text)"},
    {"split", "", 1, "train,validation,test fractions of each dataset, as cleave train --split (default 9,1,0)"},
    {"split-part", "", 1, "the part of --data to evaluate: train, validation or test (default: test when --split gives it a share, else validation)"},
    {"tokenizer-dir", "", 1, "directory with encoder.json and vocab.bpe (default: gpt2/ in cleave's data, as for --data); for hf, with tokenizer.json (default: llama3/)"},
    {"micro-batch-size", "", 1, "windows evaluated at once (default 8)"},
    {"device-memory", "", 1, "cap on device memory, e.g. 512MiB"},
};

static int cmd_eval(int argc, char **argv) {
    cli_args a;
    cl_status s = cli_parse(&a, eval_flags, NFLAGS(eval_flags), argc, argv, 2);
    if (s) return cli_fail(s);
    if (cli_get(&a, "help")) {
        cli_print_help("usage: cleave eval --checkpoint DIR (--text FILE | --data DATA [--split A,B,C] [--split-part test])\n\n"
                       "Tokenizes FILE with the checkpoint's tokenizer, cuts it into consecutive non-overlapping\n"
                       "windows of context+1 tokens (the remainder dropped) and prints the mean next-token\n"
                       "cross-entropy as the last line, 'eval loss: X'. With --data, the windows of one part\n"
                       "of each dataset, split as cleave train splits it, the datasets' windows interleaved by the blend.",
                       eval_flags, NFLAGS(eval_flags));
        return 0;
    }
    const char *dir = cli_get(&a, "checkpoint"), *text = cli_get(&a, "text"), *data = cli_get(&a, "data");
    const char *tokdir = cli_get(&a, "tokenizer-dir"), *partname = cli_get(&a, "split-part");
    if (!dir) return cli_fail(cl_error(CL_ERR_INVALID, "--checkpoint DIR is required"));
    if (!text == !data) return cli_fail(cl_error(CL_ERR_INVALID, text ? "give --text or --data, not both" : "--text FILE or --data DATA is required"));
    if (text && (cli_get(&a, "data-key") || cli_get(&a, "split") || partname))
        return cli_fail(cl_error(CL_ERR_INVALID, "--data-key, --split and --split-part go with --data, not --text"));
    static const char *parts[] = {"train", "validation", "test"};
    int part = -1;
    double w[3];
    if (data && (s = cl_split_parse(cli_get(&a, "split"), w))) return cli_fail(s);
    if (data && !partname) part = w[2] > 0 ? CL_PART_TEST : CL_PART_VALID;
    for (int i = 0; partname && i < 3; i++)
        if (!strcmp(partname, parts[i])) part = i;
    if (partname && part < 0) return cli_fail(cl_error(CL_ERR_INVALID, "--split-part %s: not train, validation or test", partname));
    int B = 8;
    size_t cap = 0;
    if ((s = cli_int(&a, "micro-batch-size", &B, 1, 1 << 20)) || (s = cli_bytes(&a, "device-memory", &cap))) return cli_fail(s);
    cl_loaded l;
    if ((s = cl_checkpoint_load(dir, tokdir, cap, B, &l))) return cli_fail(s);
    if (!cl_model_family_of(&l.desc->cfg)->tokens) {
        cl_loaded_free(&l);
        return cli_fail(cl_error(CL_ERR_INVALID, "cleave eval needs a GPT checkpoint"));
    }
    char *buf;
    size_t len;
    int32_t *ids = NULL;
    size_t n = 0, windows = 0;
    double loss = 0;
    if (data) {
        cl_dataset d;
        cl_dataset_opts o = {.data = data, .key = cli_get(&a, "data-key"), .split = cli_get(&a, "split"), .tok = l.tok, .T = l.desc->T};
        if (!(s = cl_dataset_open(&d, &o, 1 << part))) {
            n = cl_dataset_tokens(&d, part);
            s = cl_eval_dataset(l.model, &l.acts, &d, part, &loss, &windows);
            cl_dataset_close(&d);
        }
    } else if (!(s = cl_read_file(text, CL_FILE_TEXT, &buf, &len))) {
        s = cl_tokenizer_encode(l.tok, buf, len, &ids, &n);
        free(buf);
        if (!s) s = cl_eval_tokens(l.model, &l.acts, ids, n, &loss, &windows);
    }
    free(ids);
    cl_loaded_free(&l);
    if (s) return cli_fail(data ? s : cl_error_context(s, "--text %s", text)); /* --data's messages name it */
    if (data) printf("%s part: ", parts[part]);
    printf("%zu tokens, %zu windows\n", n, windows);
    printf("eval loss: %.6f\n", loss);
    return 0;
}

static const cli_flag gen_flags[] = {
    {"help", "h", 0, "show this help"},
    {"checkpoint", "", 1, "checkpoint directory (from cleave train --save)"},
    {"prompt", "", 1, "text to continue (default \"And God said\")"},
    {"tokens", "", 1, "tokens to generate (default 200)"},
    {"temperature", "", 1, "sampling temperature; 0 = greedy (default 0.8)"},
    {"top-k", "", 1, "sample from the k most likely tokens (default 40, 0 = all)"},
    {"seed", "", 1, "sampling seed (default 1337)"},
    {"tokenizer-dir", "", 1, "directory with encoder.json and vocab.bpe (default: gpt2/ in cleave's data, as for --data); for hf, with tokenizer.json (default: llama3/)"},
    {"device-memory", "", 1, "cap on device memory, e.g. 512MiB"},
    {"no-kv-cache", "", 0, "recompute the whole context for every new token instead of caching keys and values"},
    {"timing", "", 0, "print the prompt's (prefill) and the new tokens' (decode) tokens/s, and the KV cache's bytes, on stderr"},
    {"tp", "", 1, "tensor-parallel ranks (threads, or processes with --comm mpi) holding the model's heads, MLP columns, vocabulary rows and their KV cache (default 1)"},
    {"pp", "", 1, "pipeline stages (threads, or processes with --comm mpi), each holding its layers and their KV cache (default 1)"},
    {"memory", "", 0, "print each rank's device bytes (model, KV cache, decoder workspace) for --prompt-tokens P and --tokens N, predicted from the checkpoint's config; runs nothing"},
    {"prompt-tokens", "", 1, "with --memory: the prompt's length in tokens"},
    {"comm", "", 1, "ranks as threads (default) or mpi: one rank per process, started with mpirun -np TP*PP"},
};

/* cleave generate --memory: each rank's bytes, predicted (cl_generate_memory); what --timing measures. */
static cl_status gen_memory(const char *dir, const gen_how *how, int P, int n) {
    cl_checkpoint_info info;
    CL_TRY(cl_checkpoint_describe(dir, &info));
    cl_model_desc *wd;
    CL_TRY(cl_model_describe(&info.model, 0, &wd));
    int R = how->tp * how->pp;
    cl_gen_memory *g = calloc((size_t)R, sizeof *g);
    cl_status s = g ? cl_generate_memory(wd, how->tp, how->pp, P, n, g) : cl_error(CL_ERR_OOM, "cannot allocate the ranks' figures");
    for (int r = 0; r < R && !s; r++) {
        char tb[32];
        printf("rank %d (tp %d, stage %d, units %d..%d): parameters %lld, gradient buffer %lld, model workspace %lld, activations %lld, "
               "KV cache %lld for %d positions, decoder workspace %lld; total %lld bytes (%s)\n",
               r, g[r].tp_rank, g[r].stage, g[r].u0, g[r].u1 - 1, (long long)g[r].params, (long long)g[r].grads,
               (long long)g[r].model_ws, (long long)g[r].acts, (long long)g[r].cache, g[r].positions, (long long)g[r].workspace,
               (long long)g[r].total, cl_format_bytes((size_t)g[r].total, tb, sizeof tb));
        if (how->cap && (size_t)g[r].total > how->cap) printf("rank %d does not fit the --device-memory cap\n", r);
    }
    free(g);
    cl_model_desc_free(wd);
    return s;
}

/* --timing's lines on stderr: the prefill's and decode's tokens/s (lead only: st[0]'s), then the KV cache's and
 * workspace's bytes of ranks r0 .. r0 + nr - 1 (st[0 .. nr - 1]). */
static void gen_timing(const gen_how *how, const cl_gen_stats *st, int r0, int nr, int lead) {
    int split = how->tp * how->pp > 1 || how->world;
    char lay[64] = "";
    if (split) snprintf(lay, sizeof lay, ", tp %d x pp %d%s", how->tp, how->pp, how->world ? " over MPI" : "");
    if (lead)
        fprintf(stderr, "generate (%s%s): prefill %d tokens in %.4f s (%.1f tokens/s); decode %d tokens in %.4f s (%.1f tokens/s)\n",
                how->kv ? "KV cache" : "recomputing", lay, st->prefill_tokens, st->prefill_s,
                st->prefill_s > 0 ? st->prefill_tokens / st->prefill_s : 0.0, st->decode_tokens, st->decode_s,
                st->decode_s > 0 ? st->decode_tokens / st->decode_s : 0.0);
    for (int i = 0; i < nr && how->kv; i++) {
        char who[32] = "";
        if (split) snprintf(who, sizeof who, " rank %d", r0 + i);
        fprintf(stderr, "generate:%s KV cache and workspace %lld bytes predicted, %lld measured, beside the model's %lld\n", who,
                (long long)st[i].kv_predicted, (long long)st[i].kv_measured, (long long)st[i].held);
    }
}

/* cleave generate --comm mpi: what each process's rank runs. */
typedef struct {
    const char *dir, *tokdir, *prompt;
    int n, topk, timing;
    float temp;
    uint64_t seed;
    gen_how how;
    int world_rank; /* this process's, once its rank runs; else -1 */
} gen_job;

/* Every rank must generate the same thing: the flags that shape the run, agreed as train's are (agree_job). */
static cl_status gen_agree(cl_comm *world, const gen_job *g) {
    flag_values *l = calloc(1, sizeof *l);
    if (!l) return cl_error(CL_ERR_OOM, "no host memory for the start-up agreement");
    put(l, "--checkpoint", "%s", g->dir);
    put(l, "--tokenizer-dir", "%s", g->tokdir ? g->tokdir : "(none)");
    put(l, "--prompt", "%s", g->prompt);
    put(l, "--tokens", "%d", g->n);
    put_float(l, "--temperature", g->temp);
    put(l, "--top-k", "%d", g->topk);
    put(l, "--seed", "%llu", (unsigned long long)g->seed);
    put(l, "--device-memory", "%zu", g->how.cap);
    put(l, "--tp", "%d", g->how.tp);
    put(l, "--pp", "%d", g->how.pp);
    cl_status s = cl_comm_agree(world, l->name, l->val, l->n);
    free(l);
    return s;
}

static cl_status gen_rank_mpi(cl_comm *world, void *arg) {
    gen_job *g = arg;
    g->world_rank = cl_comm_rank(world);
    g->how.world = world;
    CL_TRY(gen_agree(world, g));
    cl_loaded l; /* each process the checkpoint whole in host memory, from which its rank takes its slice */
    cl_status s = cl_checkpoint_load(g->dir, g->tokdir, 0, 1, &l), loaded = s;
    if (!s && !cl_model_family_of(&l.desc->cfg)->tokens) s = cl_error(CL_ERR_INVALID, "cleave generate needs a GPT checkpoint");
    s = cl_comm_agree_status(world, s); /* a rank that cannot load fails them all, at once */
    if (s) {
        if (!loaded) cl_loaded_free(&l);
        return s;
    }
    cl_gen_stats st = {0};
    s = print_sample(NULL, l.model, &l.acts, l.tok, g->prompt, g->n, g->temp, g->topk, g->seed, g->world_rank == 0, &g->how, &st);
    fflush(stdout);
    if (!s && g->timing) gen_timing(&g->how, &st, g->world_rank, 1, g->world_rank == 0);
    cl_loaded_free(&l);
    return s;
}

/* A refusal before any rank runs: under mpirun every process refuses alike and rank 0 alone prints it. */
static int gen_refuse(int mpi, cl_status s) {
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    return mpi && rank && strcmp(rank, "0") ? cli_exit_status(s) : cli_fail(s);
}

static int cmd_generate(int argc, char **argv) {
    cli_args a;
    cl_status s = cli_parse(&a, gen_flags, NFLAGS(gen_flags), argc, argv, 2);
    if (s) return cli_fail(s);
    if (cli_get(&a, "help")) {
        cli_print_help("usage: cleave generate --checkpoint DIR [--prompt TEXT] [--tokens N]\n"
                       "       mpirun -np TP*PP cleave generate --comm mpi --tp TP --pp PP ...   (one rank per MPI process)",
                       gen_flags, NFLAGS(gen_flags));
        return 0;
    }
    const char *comm = cli_get(&a, "comm") ? cli_get(&a, "comm") : "threads";
    int mpi = !strcmp(comm, "mpi");
    if (!mpi && strcmp(comm, "threads")) return cli_fail(cl_error(CL_ERR_INVALID, "unknown --comm '%s' (threads or mpi)", comm));
    const char *dir = cli_get(&a, "checkpoint");
    const char *prompt = cli_get(&a, "prompt") ? cli_get(&a, "prompt") : "And God said";
    const char *tokdir = cli_get(&a, "tokenizer-dir");
    if (!dir) return gen_refuse(mpi, cl_error(CL_ERR_INVALID, "--checkpoint DIR is required"));
    int n = 200, topk = 40;
    float temp = 0.8f;
    uint64_t seed = 1337;
    gen_how how = {!cli_get(&a, "no-kv-cache"), 1, 1, 0, NULL};
    if ((s = cli_int(&a, "tokens", &n, 1, 1 << 20)) || (s = cli_int(&a, "top-k", &topk, 0, 1 << 30)) ||
        (s = cli_float(&a, "temperature", &temp, 0, 100)) || (s = cli_u64(&a, "seed", &seed)) ||
        (s = cli_bytes(&a, "device-memory", &how.cap)) || (s = cli_int(&a, "tp", &how.tp, 1, 4096)) || (s = cli_int(&a, "pp", &how.pp, 1, 256)))
        return gen_refuse(mpi, s);
    int split = how.tp * how.pp > 1, P = 0;
    if (cli_get(&a, "prompt-tokens") && !cli_get(&a, "memory"))
        return gen_refuse(mpi, cl_error(CL_ERR_INVALID, "--prompt-tokens goes with --memory (a run counts its --prompt's tokens)"));
    if (mpi && cli_get(&a, "memory"))
        return gen_refuse(mpi, cl_error(CL_ERR_INVALID, "--memory predicts from the config and runs no rank: drop --comm mpi"));
    if (cli_get(&a, "memory")) {
        if (!cli_get(&a, "prompt-tokens")) return cli_fail(cl_error(CL_ERR_INVALID, "--memory needs --prompt-tokens P"));
        if (!how.kv) return cli_fail(cl_error(CL_ERR_INVALID, "--memory predicts the KV cache's path, not --no-kv-cache"));
        if ((s = cli_int(&a, "prompt-tokens", &P, 1, 1 << 30)) || (s = gen_memory(dir, &how, P, n))) return cli_fail(s);
        return 0;
    }
    if (mpi && !how.kv)
        return gen_refuse(mpi, cl_error(CL_ERR_INVALID, "--no-kv-cache recomputes on one rank: --comm mpi generates split, with the KV cache"));
    if (split && !how.kv)
        return cli_fail(cl_error(CL_ERR_INVALID, "--tp and --pp generate with the KV cache: --no-kv-cache recomputes on one rank"));
    if (split && how.tp * how.pp > 4096) return gen_refuse(mpi, cl_error(CL_ERR_INVALID, "--tp %d x --pp %d: more than 4096 ranks", how.tp, how.pp));
    if (mpi) {
        if (!cl_mpi_available())
            return gen_refuse(mpi, cl_error(CL_ERR_UNSUPPORTED, "--comm mpi: this cleave was built without MPI (install libopenmpi-dev and rebuild)"));
        gen_job g = {dir, tokdir, prompt, n, topk, cli_get(&a, "timing") != NULL, temp, seed, how, -1};
        cl_launch_opts lo = {0};
        s = cl_launch_mpi(&argc, &argv, gen_rank_mpi, &g, &lo);
        /* a failure returned once the ranks ran is every rank's, printed by the launcher (others abort the job) */
        return !s ? 0 : g.world_rank >= 0 ? cli_exit_status(s) : cli_fail(s);
    }
    cl_loaded l; /* split: the checkpoint whole in host memory, from which each rank takes its slice onto its capped device */
    if ((s = cl_checkpoint_load(dir, tokdir, split ? 0 : how.cap, 1, &l))) return cli_fail(s);
    if (!cl_model_family_of(&l.desc->cfg)->tokens) {
        cl_loaded_free(&l);
        return cli_fail(cl_error(CL_ERR_INVALID, "cleave generate needs a GPT checkpoint"));
    }
    int R = how.tp * how.pp;
    cl_gen_stats *st = calloc((size_t)R, sizeof *st);
    if (!st) {
        cl_loaded_free(&l);
        return cli_fail(cl_error(CL_ERR_OOM, "cannot allocate the ranks' figures"));
    }
    s = print_sample(NULL, l.model, &l.acts, l.tok, prompt, n, temp, topk, seed, 1, &how, st);
    if (!s && cli_get(&a, "timing")) gen_timing(&how, st, 0, R, 1);
    free(st);
    cl_loaded_free(&l);
    return s ? cli_fail(s) : 0;
}

static int cmd_version(int argc, char **argv) {
    (void)argc, (void)argv;
    printf("cleave 0.1 (gemm: %s, kernels: %s, mpi: %s)\n", cl_gemm_build(), cl_kernels_isa(), cl_mpi_available() ? "yes" : "no");
    return 0;
}

/* The commands, their one-line summaries (the usage text and each man page's
 * NAME line) and what runs them: the one list that dispatch, the usage and
 * the unknown-command message all read. */
static const struct {
    const char *name, *summary;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"train", "train a model (GPT-2 family, MLP, CNN) and print each step", cmd_train},
    {"memory", "every rank's device memory of a training run by category, predicted before it runs (and measured)", cmd_train},
    {"convert", "rewrite a checkpoint at another layout or format (single file, sharded)", cmd_train},
    {"tokenize", "tokenize text and JSONL files once into a Megatron-LM indexed dataset (PREFIX.bin, PREFIX.idx)", cleave_cmd_tokenize},
    {"eval", "mean next-token loss of a checkpoint on a text file, or on a part (--split-part) of --data", cmd_eval},
    {"generate", "continue a prompt with a checkpoint", cmd_generate},
    {"checkpoint", "check a checkpoint (verify): every file's, tensor's and box's size, hash, run id and step", cleave_cmd_checkpoint},
    {"mesh", "print the dp x tp x pp mesh and its groups", cleave_cmd_mesh},
    {"schedule", "print, check and draw a pipeline schedule (per-rank actions, bubble)", cleave_cmd_schedule},
    {"trace", "draw a pipeline timeline (Chrome trace or simulated schedule) as SVG", cleave_cmd_trace},
    {"plot", "draw training logs (loss, validation loss, other figures) against the step as SVG, runs side by side", cleave_cmd_plot},
    {"bench", "this machine's FP32 peak (peak), the step's GEMMs (gemm), a step by operation (step)", cleave_cmd_bench},
    {"plan", "how to split a model over N devices: every configuration's memory and predicted step time, fastest first", cleave_cmd_plan},
    {"version", "print the version and the optional parts built in", cmd_version},
};

static const char *usage_text(void) {
    static char text[2048];
    int n = snprintf(text, sizeof text, "usage: cleave COMMAND [flags]\n\nCommands:\n");
    for (int i = 0; i < NFLAGS(commands); i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "  %-10s %s\n", commands[i].name, commands[i].summary);
    snprintf(text + n, sizeof text - (size_t)n, "\n'cleave COMMAND --help' lists each command's flags; "
             "'man cleave-COMMAND' shows the same as a manual page.");
    return text;
}

static void usage(FILE *f) {
    fprintf(f, "%s\n", usage_text());
}

/* `cleave [COMMAND [SUB]] --man`: the command's --help as a man page (the
 * Makefile generates the installed pages this way). Turns the flag into
 * --help and sets the summary that makes cli_print_help write troff. */
static int man_mode(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--man")) {
            argv[i] = "--help";
            cli_man_summary = "train neural networks across ranks (threads or MPI processes)";
            for (int c = 0; i > 1 && c < NFLAGS(commands); c++)
                if (!strcmp(argv[1], commands[c].name)) cli_man_summary = commands[c].summary;
            return i == 1;
        }
    return 0;
}

int main(int argc, char **argv) {
    /* A write past the file-size limit (ulimit -f) then fails with EFBIG, which
     * the writers report by name, instead of SIGXFSZ killing the process
     * without a word in the middle of a save or an offloaded step. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (man_mode(argc, argv)) {
        cli_print_help(usage_text(), NULL, 0);
        return 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version")) return cmd_version(argc, argv);
    char **args = argv, *help_args[64];
    if (!strcmp(cmd, "help") && argc > 2) { /* cleave help COMMAND [SUB]: that command's --help */
        if (argc > 62) argc = 62;
        help_args[0] = argv[0];
        for (int i = 2; i < argc; i++) help_args[i - 1] = argv[i];
        help_args[argc - 1] = "--help";
        help_args[argc] = NULL;
        args = help_args;
        cmd = args[1];
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    for (int i = 0; i < NFLAGS(commands); i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].run(argc, args);
    char known[512];
    int n = 0;
    for (int i = 0; i < NFLAGS(commands); i++)
        n += snprintf(known + n, sizeof known - (size_t)n, "%s%s", i ? ", " : "", commands[i].name);
    fprintf(stderr, "cleave: error: unknown command '%s' (%s; 'cleave --help' says what each does)\n", cmd, known);
    return 2;
}
