/* The cost of one unit (see plan.h): the one statement of what each unit
 * computes and moves, beside the layout statement (cl_model_describe_tp)
 * whose local sizes it reads. Matrix products are counted exactly (the
 * forward products equal cl_unit.flops); the other kernels' bytes are
 * counted as each reads its inputs and writes its outputs once, at the
 * activation precision (ebytes). */
#include "plan/plan.h"
#include "cleave/kernels.h"

#include <string.h>

/* count products of [m, k] x [k, n] of which the kernel computes the share (the causal attention's
 * skipped blocks): the FLOPs counted are the model's (the whole products), the time the work done */
static void gemm_part(cl_pass_cost *c, double m, double n, double k, double count, int layout, double share) {
    if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return;
    double work = count * share;
    if (c->ngemm < CL_COST_MAX_GEMM) c->gemm[c->ngemm++] = (cl_gemm_shape){m, n, k, work, layout};
    else c->gemm[CL_COST_MAX_GEMM - 1].count += work * m * n * k / (c->gemm[CL_COST_MAX_GEMM - 1].m *
                                                                     c->gemm[CL_COST_MAX_GEMM - 1].n *
                                                                     c->gemm[CL_COST_MAX_GEMM - 1].k);
    c->flops += 2.0 * m * n * k * count;
}

static void gemm(cl_pass_cost *c, double m, double n, double k, double count, int layout) {
    gemm_part(c, m, n, k, count, layout, 1);
}

static void coll(cl_pass_cost *c, cl_coll_kind kind, double bytes, int tp) {
    if (tp <= 1 || bytes <= 0) return;
    if (kind == CL_COLL_ALLREDUCE) c->ar_bytes += bytes, c->ar_calls++;
    else if (kind == CL_COLL_ALLGATHER) c->ag_bytes += bytes, c->ag_calls++;
    else c->rs_bytes += bytes, c->rs_calls++;
}

void cl_pass_cost_add(cl_pass_cost *acc, const cl_pass_cost *a) {
    double flops = acc->flops;
    for (int i = 0; i < a->ngemm; i++) gemm(acc, a->gemm[i].m, a->gemm[i].n, a->gemm[i].k, a->gemm[i].count, a->gemm[i].layout);
    acc->flops = flops + a->flops; /* the shapes carry the work done; the FLOPs are the model's */
    acc->bytes += a->bytes, acc->stream += a->stream;
    acc->ar_bytes += a->ar_bytes, acc->ag_bytes += a->ag_bytes, acc->rs_bytes += a->rs_bytes;
    acc->ar_calls += a->ar_calls, acc->ag_calls += a->ag_calls, acc->rs_calls += a->rs_calls;
}

/* A transformer block: ln_1, c_attn (columns of this rank's heads),
 * attention (scores, softmax, product with v), attn.c_proj (rows), residual,
 * ln_2, c_fc (columns), GELU, mlp.c_proj (rows), residual. R token rows
 * (B T), Rs of them between the split layers (sequence parallelism: R/tp). */
static void block_cost(const cl_model_desc *d, int B, double e, int recompute, int causal, cl_unit_cost *o) {
    double T = d->T, C = d->cfg.channels, Cl = d->channels_local, H = d->heads_local, hd = C / d->cfg.heads;
    int tp = d->tpl.tp, sp = d->tpl.sp;
    double R = (double)B * T, Rs = sp ? R / tp : R, act = R * C * e;
    /* causal: attention's products skip the blocks past the diagonal (cleave's kernels); its softmax
     * runs on the t + 1 causal entries of row t (tri) and zeroes the rest of the row (forward) or of
     * the row block (backward). Otherwise the whole T x T, masked (Megatron-LM's fused softmax) */
    double att = causal ? cl_attention_share((int)T) : 1, tri = causal ? (T + 1) / (2 * T) : 1;
    cl_pass_cost *f = &o->pass[CL_PASS_F], *b = &o->pass[CL_PASS_B], *w = &o->pass[CL_PASS_W], *rf = &o->pass[CL_PASS_RF];
    /* forward: c_attn, q k^T, softmax(.) v, c_proj, c_fc, mlp.c_proj */
    gemm(f, R, 3 * Cl, C, 1, CL_GEMM_NN);
    gemm_part(f, T, T, hd, B * H, CL_GEMM_NT, att);
    gemm_part(f, T, hd, T, B * H, CL_GEMM_NN, att);
    gemm(f, R, C, Cl, 1, CL_GEMM_NN);
    gemm(f, R, 4 * Cl, C, 1, CL_GEMM_NN);
    gemm(f, R, C, 4 * Cl, 1, CL_GEMM_NN);
    /* the other kernels as src/nn/kind_block.c runs them: ln_1 (read, write); c_attn's bias
     * written under its rows before the product; the softmax (read, write); c_proj's bias
     * (written before the product at tp 1, added after the reduction at tp > 1: read, write);
     * residual + ln_2 in one pass (read 2, write 2); bias + GELU in one pass (read, write);
     * mlp.c_proj's bias as c_proj's; and the last residual add (read 2, write 1), a stream */
    double scores = (double)B * H * T * T, rowbias = tp > 1 ? 2 : 1;
    f->bytes = e * (2 * Rs * C + R * 3 * Cl + 2 * tri * scores + rowbias * Rs * C + 4 * Rs * C + 2 * R * 4 * Cl + rowbias * Rs * C);
    f->stream = e * (3 * Rs * C + (1 - tri) * scores);
    if (sp) coll(f, CL_COLL_ALLGATHER, act, tp), coll(f, CL_COLL_REDUCE_SCATTER, act, tp),
            coll(f, CL_COLL_ALLGATHER, act, tp), coll(f, CL_COLL_REDUCE_SCATTER, act, tp);
    else coll(f, CL_COLL_ALLREDUCE, act, tp), coll(f, CL_COLL_ALLREDUCE, act, tp);
    /* backward-input: each linear's input gradient, the four products of attention */
    gemm(b, R, C, 3 * Cl, 1, CL_GEMM_NT);
    gemm_part(b, T, hd, T, B * H, CL_GEMM_NN, att); /* dq = ds k */
    gemm_part(b, T, hd, T, B * H, CL_GEMM_TN, att); /* dk = ds^T q */
    gemm_part(b, T, T, hd, B * H, CL_GEMM_NT, att); /* dp = dy v^T */
    gemm_part(b, T, hd, T, B * H, CL_GEMM_TN, att); /* dv = p^T dy */
    gemm(b, R, Cl, C, 1, CL_GEMM_NT);
    gemm(b, R, C, 4 * Cl, 1, CL_GEMM_NT);
    gemm(b, R, 4 * Cl, C, 1, CL_GEMM_NT);
    /* GELU and softmax backward read their input and the gradient and write one; ln_2's
     * input gradient adds into the residual's (read 3, write 1), ln_1's is written (read 2,
     * write 1); streams: dqkv zeroed, the residual gradient copied, the two added */
    b->bytes = e * (3 * R * 4 * Cl + 3 * tri * scores + 4 * Rs * C + 3 * Rs * C);
    b->stream = e * (R * 3 * Cl + 2 * Rs * C + 3 * Rs * C + (att - tri) * scores);
    if (sp) coll(b, CL_COLL_ALLGATHER, act, tp), coll(b, CL_COLL_REDUCE_SCATTER, act, tp),
            coll(b, CL_COLL_ALLGATHER, act, tp), coll(b, CL_COLL_REDUCE_SCATTER, act, tp);
    else coll(b, CL_COLL_ALLREDUCE, act, tp), coll(b, CL_COLL_ALLREDUCE, act, tp);
    /* backward-weight: dW = x^T dy of the four linears, bias and layernorm gradients (read dy, x) */
    gemm(w, C, 3 * Cl, R, 1, CL_GEMM_TN);
    gemm(w, Cl, C, R, 1, CL_GEMM_TN);
    gemm(w, C, 4 * Cl, R, 1, CL_GEMM_TN);
    gemm(w, 4 * Cl, C, R, 1, CL_GEMM_TN);
    w->bytes = e * (R * (3 * Cl + 4 * Cl) + 2 * Rs * C + 2 * 2 * Rs * C);
    if (sp) coll(w, CL_COLL_ALLGATHER, act, tp), coll(w, CL_COLL_ALLGATHER, act, tp); /* the layernorm outputs gathered again */
    if (recompute == CL_RECOMPUTE_FULL) *rf = *f;
    else if (recompute == CL_RECOMPUTE_SELECTIVE) {
        gemm_part(rf, T, T, hd, B * H, CL_GEMM_NT, att);
        gemm_part(rf, T, hd, T, B * H, CL_GEMM_NN, att);
        rf->bytes = e * 2 * tri * scores;
        rf->stream = e * (1 - tri) * scores;
    }
}

static void embed_cost(const cl_model_desc *d, int B, double e, cl_unit_cost *o) {
    double R = (double)B * d->T, C = d->cfg.channels;
    int tp = d->tpl.tp, sp = d->tpl.sp;
    /* lookup of the rank's rows + positions: read 2, write 1 per element */
    o->pass[CL_PASS_F].bytes = e * 3 * R * C;
    coll(&o->pass[CL_PASS_F], sp ? CL_COLL_REDUCE_SCATTER : CL_COLL_ALLREDUCE, R * C * e, tp);
    /* the gradient's scatter-add into wte's and wpe's rows: read dy, read and write the rows */
    o->pass[CL_PASS_W].bytes = e * 4 * R * C;
    if (sp) coll(&o->pass[CL_PASS_W], CL_COLL_ALLGATHER, R * C * e, tp);
}

static void head_cost(const cl_model_desc *d, int B, double e, cl_unit_cost *o) {
    double R = (double)B * d->T, C = d->cfg.channels, Vl = d->vocab_local;
    int tp = d->tpl.tp, sp = d->tpl.sp;
    double Rs = sp ? R / tp : R;
    cl_pass_cost *f = &o->pass[CL_PASS_F], *b = &o->pass[CL_PASS_B];
    gemm(f, R, Vl, C, 1, CL_GEMM_NT);
    /* ln_f; the softmax cross-entropy reads the logits twice (max, sums) and keeps them */
    f->bytes = e * (2 * Rs * C + 3 * R * Vl);
    if (sp) coll(f, CL_COLL_ALLGATHER, R * C * e, tp);
    coll(f, CL_COLL_ALLREDUCE, R * 4.0, tp);  /* the row max */
    coll(f, CL_COLL_ALLREDUCE, R * 16.0, tp); /* the sums of exponentials and the target's logit, doubles */
    /* the whole backward (a loss unit's B): dlogits, dx = dlogits wte, dwte = dlogits^T x, ln_f */
    gemm(b, R, C, Vl, 1, CL_GEMM_NN);
    gemm(b, Vl, C, R, 1, CL_GEMM_TN);
    b->bytes = e * (2 * R * Vl + 3 * Rs * C + 2 * Rs * C);
    coll(b, sp ? CL_COLL_REDUCE_SCATTER : CL_COLL_ALLREDUCE, R * C * e, tp);
}

void cl_unit_cost_of(const cl_model_desc *d, int u, int B, int ebytes, int recompute, int causal, cl_unit_cost *o) {
    memset(o, 0, sizeof *o);
    const cl_unit *un = &d->units[u];
    double e = ebytes, Bd = B;
    int tp = d->tpl.tp;
    cl_pass_cost *f = &o->pass[CL_PASS_F], *b = &o->pass[CL_PASS_B], *w = &o->pass[CL_PASS_W];
    switch (un->kind) {
    case CL_UNIT_BLOCK: block_cost(d, B, e, recompute, causal, o); break;
    case CL_UNIT_EMBED: embed_cost(d, B, e, o); break;
    case CL_UNIT_LMHEAD: head_cost(d, B, e, o); break;
    case CL_UNIT_LINEAR: {
        double ci = un->c, co = un->oc;
        gemm(f, Bd, co, ci, 1, CL_GEMM_NN);
        f->bytes = e * 2 * Bd * co; /* bias */
        gemm(b, Bd, ci, co, 1, CL_GEMM_NT);
        gemm(w, ci, co, Bd, 1, CL_GEMM_TN);
        w->bytes = e * Bd * co;
        if (un->tp_mode == CL_LINEAR_ROWS) coll(f, CL_COLL_ALLREDUCE, Bd * co * e, tp); /* row-parallel: the output's partial sums */
        if (un->tp_mode == CL_LINEAR_COLS) coll(b, CL_COLL_ALLREDUCE, Bd * ci * e, tp); /* column-parallel: the input gradient's */
        break;
    }
    case CL_UNIT_CONV: {
        double rows = Bd * un->oh * un->ow, kk = (double)un->c * un->k * un->k;
        gemm(f, rows, un->oc, kk, 1, CL_GEMM_NN);
        f->bytes = e * (2 * rows * kk + 2 * rows * un->oc); /* im2col, bias */
        gemm(b, rows, kk, un->oc, 1, CL_GEMM_TN);
        b->bytes = e * 2 * rows * kk; /* col2im */
        gemm(w, kk, un->oc, rows, 1, CL_GEMM_NT);
        w->bytes = e * 2 * rows * kk;
        break;
    }
    case CL_UNIT_RELU:
    case CL_UNIT_MAXPOOL:
    case CL_UNIT_FLATTEN:
        f->bytes = e * Bd * (double)(un->in_floats + un->out_floats);
        b->bytes = e * Bd * (double)(2 * un->out_floats + un->in_floats);
        break;
    case CL_UNIT_CLASSIFY:
        f->bytes = e * 2 * Bd * un->c;
        b->bytes = e * 2 * Bd * un->c;
        break;
    }
}
