/* Forward-only passes through the pipeline executor's chunks (pipeline.c):
 * evaluation batches stage after stage (the trainer sums the loss over the
 * pipeline afterwards), and the logits of the last position for generation
 * (cl_generate_with, generate.c), which every rank samples alike. */
#include "cleave/comm.h"
#include "cleave/train.h"

#include <stdlib.h>
#include <string.h>

#include "train/pp.h"

cl_status cl_pp_eval_batch(void *ctx, const cl_microbatch *mb, double *sum) {
    cl_trainer *t = ctx;
    struct cl_pp *pp = t->pp;
    for (int s = 0; s < pp->S; s++) {
        if (rank_of_stage(pp, s) != pp->r) continue;
        pp_chunk *ch = &pp->ch[s / pp->p];
        pp_slot *sl = &ch->slots[0];
        size_t in_bytes = ch->in_bytes / (size_t)t->cfg.micro_batch * (size_t)mb->B;
        size_t out_bytes = ch->out_bytes / (size_t)t->cfg.micro_batch * (size_t)mb->B;
        int tag;
        if (!ch->first) {
            CL_TRY(msg_tag(pp, 0, s, 0, &tag));
            CL_TRY(cl_comm_recv(pp->comm, sl->in, in_bytes, rank_of_stage(pp, s - 1), tag));
        }
        int u1;
        cl_model_units(ch->m, NULL, &u1);
        CL_TRY(cl_model_stage_forward(ch->m, mb, ch->first ? mb->x : sl->in, &sl->acts));
        if (ch->last && t->tp_rank == 0) *sum += cl_acts_loss_sum(ch->m, &sl->acts, u1 - 1, mb);
        else if (!ch->last) {
            CL_TRY(msg_tag(pp, 0, s + 1, 0, &tag));
            CL_TRY(cl_comm_send(pp->comm, cl_acts_output_mb(ch->m, &sl->acts, u1 - 1, mb), out_bytes,
                                rank_of_stage(pp, s + 1), tag));
        }
    }
    return CL_OK;
}

/* Logits of the last position through the pipeline: forward of one window,
 * the last stage's rank broadcasts them to every rank. Tensor-parallel ranks
 * each hold a slice of the vocabulary and gather the row; under sequence
 * parallelism the window is padded at its end to a multiple of tp (causal
 * attention: later positions do not change position T-1). */
static cl_status pp_logits(void *ctx, const int32_t *tokens, int T, float *logits) {
    cl_trainer *t = ctx;
    struct cl_pp *pp = t->pp;
    const cl_model_desc *d = t->desc;
    pp_slot *sl = &pp->ch[0].slots[0];
    int Tp = d->tpl.sp ? (T + t->tp - 1) / t->tp * t->tp : T;
    cl_device *dev = t->dev; /* the slots' */
    cl_device_copy_from_host(dev, sl->tokens, tokens, (size_t)T * sizeof(int32_t));
    cl_device_fill(dev, sl->tokens + T, 0, (size_t)(Tp - T) * sizeof(int32_t));
    cl_device_fill(dev, sl->targets, 0, (size_t)Tp * sizeof(int32_t));
    cl_microbatch mb = {.B = 1, .T = Tp, .tokens = sl->tokens, .targets = sl->targets};
    double unused = 0;
    CL_TRY(cl_pp_eval_batch(t, &mb, &unused));
    int V = d->cfg.vocab, Vl = d->vocab_local, last = rank_of_stage(pp, pp->S - 1);
    cl_status s = CL_OK;
    if (pp->r == last) {
        pp_chunk *ch = &pp->ch[pp->v - 1];
        int u1;
        cl_model_units(ch->m, NULL, &u1);
        const float *lg = cl_acts_logits(ch->m, &ch->slots[0].acts, u1 - 1, &mb) + (size_t)(T - 1) * Vl;
        if (t->tp == 1 && Vl == V) {
            cl_device_copy_to_host(cl_model_device(ch->m), logits, lg, (size_t)V * sizeof(float));
        } else {
            float *row = malloc((size_t)d->vocab_padded * sizeof *row);
            if (!row) return cl_error(CL_ERR_OOM, "cannot allocate a row of logits");
            s = t->tp > 1 ? cl_comm_allgather_n(t->cfg.groups->tp, lg, row, (size_t)Vl, CL_F32)
                          : (cl_device_copy_to_host(cl_model_device(ch->m), row, lg, (size_t)Vl * sizeof(float)), CL_OK);
            if (!s) memcpy(logits, row, (size_t)V * sizeof(float));
            free(row);
        }
    }
    CL_TRY(s);
    return pp->p > 1 ? cl_comm_broadcast_n(pp->comm, logits, (size_t)V, CL_F32, last) : CL_OK;
}

cl_status cl_trainer_generate(cl_trainer *t, const int32_t *prompt, int nprompt, int n, float temperature, int top_k,
                              uint64_t seed, int32_t *out) {
    const cl_model_desc *d = t->desc;
    if (!cl_model_family_of(&d->cfg)->tokens) return cl_error(CL_ERR_INVALID, "generation needs a GPT model");
    return cl_generate_with(pp_logits, t, d->cfg.vocab, d->T, prompt, nprompt, n, temperature, top_k, seed, out);
}
