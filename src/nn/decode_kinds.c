/* What the unit kinds' decode entries share (kind.h, generation's step;
 * the decoder that runs them is decode.c): the step's workspace size, a
 * block's attention over its KV cache (the k and v of the new rows
 * appended, then the kernel table's attention_decode), and the head's last
 * row of each sample and its logits. Apart from decode.c so that the kinds
 * calling these do not call back into the kind table (cl_kind_of). */
#include "nn/kind.h"
#include "nn/model_impl.h"

int64_t cl_nn_decode_moe_floats(const cl_model_desc *d, int64_t N) {
    int64_t E = d->cfg.experts, K = d->cfg.experts_per_token, C = d->cfg.channels, Fw = cl_model_mlp_width(&d->cfg);
    return E ? N * (2 * E + 3 * K) + N * K + E + N * K * (2 * C + 3 * Fw) : 0;
}

int64_t cl_nn_decode_ws_floats(const cl_model_desc *d, int64_t N) {
    int64_t C = d->cfg.channels, Cl = d->channels_local, Kl = d->kv_channels_local, Fl = d->mlp_local;
    /* a block: ln1, res2, ln2 (C each) and 4 row statistics, qkv (Cl + 2 Kl), atty (Cl), 3 MLP columns (Fl) */
    int64_t mlp = 3 * N * Fl, moe = cl_nn_decode_moe_floats(d, N);
    return N * (3 * C + 4 + (Cl + 2 * Kl) + Cl) + (moe > mlp ? moe : mlp);
}

cl_nn_decode_ws cl_nn_decode_carve(const cl_model *m, const cl_decode_step *st) {
    const cl_model_desc *d = m->desc;
    int64_t N = (int64_t)st->B * st->n, C = d->cfg.channels, Cl = d->channels_local, Q = Cl + 2 * (int64_t)d->kv_channels_local;
    cl_nn_decode_ws w;
    float *p = st->ws;
    w.ln1 = p; p += N * C;
    w.res2 = p; p += N * C;
    w.ln2 = p; p += N * C;
    w.stats = p; p += 4 * N;
    w.qkv = p; p += N * Q;
    w.atty = p; p += N * Cl;
    w.mlp = p;
    return w;
}

void cl_nn_decode_attention(const cl_model *m, const cl_decode_step *st, const float *qkv, float *out) {
    const cl_model_desc *d = m->desc;
    int hd = d->cfg.channels / d->cfg.heads, NH = d->heads_local, KV = d->kv_channels_local / hd, Cl = d->channels_local;
    int64_t ld = Cl + 2 * (int64_t)d->kv_channels_local;
    cl_kern(m)->kv_append(st->kc, st->vc, qkv, ld, Cl, Cl + d->kv_channels_local, st->B, st->n, st->pos0, KV, hd, st->Tmax);
    cl_kern(m)->attention_decode(out, qkv, ld, st->kc, st->vc, st->B, st->n, st->pos0, NH, KV, hd, st->Tmax);
}

void cl_nn_decode_last_rows(const cl_model *m, const cl_decode_step *st, const float *in, float *rows) {
    int64_t C = m->desc->cfg.channels;
    for (int b = 0; b < st->B; b++)
        cl_device_copy(m->dev, rows + b * C, in + ((int64_t)b * st->n + st->n - 1) * C, (size_t)C * sizeof(float));
}

void cl_nn_decode_logits(const cl_model *m, const cl_decode_step *st, const float *rows, const float *wv) {
    int C = m->desc->cfg.channels, Vl = m->desc->vocab_local;
    cl_sgemm(cl_kern(m), 0, 1, st->B, Vl, C, 1.0f, rows, C, wv, C, 0.0f, st->logits, Vl);
}
