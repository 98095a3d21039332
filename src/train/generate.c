/* Text generation by sampling: temperature and top-k over the logits of the
 * last position. Where the logits come from is a function: one device
 * recomputing the whole (at most T-token) context for each new token
 * (cl_generate), one device with a KV cache (cl_generate_run: the tokens
 * not yet cached run through cl_decoder_step, src/nn/decode.c), or a
 * pipeline whose every rank samples the same token from the same broadcast
 * logits. Each call for logits is timed: the first is the prompt's
 * (prefill), the others one new token each (decode). */
#include "cleave/train.h"

#include "cleave/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { float v; int i; } scored;

static int by_value_desc(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return x->i - y->i;
}

typedef struct {
    cl_model *m;
    cl_acts *a;
} one_device;

static cl_status one_device_logits(void *ctx, const int32_t *tokens, int T, float *logits) {
    one_device *o = ctx;
    return cl_model_logits_last(o->m, tokens, T, o->a, logits);
}

cl_status cl_generate(cl_model *m, cl_acts *a, const int32_t *prompt, int nprompt, int n, float temperature, int top_k,
                      uint64_t seed, int32_t *out) {
    if (!cl_model_family_of(&cl_model_desc_of(m)->cfg)->tokens) return cl_error(CL_ERR_INVALID, "generation needs a GPT model");
    CL_TRY(cl_model_refresh_low(m)); /* bf16: the weights' BF16 copy */
    one_device o = {m, a};
    return cl_generate_with(one_device_logits, &o, cl_model_desc_of(m)->cfg.vocab, cl_model_desc_of(m)->T, prompt, nprompt, n, temperature, top_k,
                            seed, out);
}

/* The KV cache's logits: the tokens past the longest prefix the cache holds (at most T - 1 of them, so
 * at least one row runs) go through the decoder at their positions; a window that slid shares no prefix
 * and runs whole from position 0, as the recomputing path runs it. */
typedef struct {
    cl_decoder *dc;
    int32_t *cached;
    int ncached;
} kv_state;

static cl_status kv_logits(void *ctx, const int32_t *tokens, int T, float *logits) {
    kv_state *k = ctx;
    int L = 0;
    while (L < k->ncached && L < T - 1 && k->cached[L] == tokens[L]) L++;
    k->ncached = 0;
    CL_TRY(cl_decoder_step(k->dc, tokens + L, T - L, L, logits));
    memcpy(k->cached + L, tokens + L, (size_t)(T - L) * sizeof *tokens);
    k->ncached = T;
    return CL_OK;
}

cl_status cl_generate_run(cl_model *m, cl_acts *a, int kv, const int32_t *prompt, int nprompt, int n, float temperature,
                          int top_k, uint64_t seed, int32_t *out, cl_gen_stats *st) {
    const cl_model_desc *d = cl_model_desc_of(m);
    if (!cl_model_family_of(&d->cfg)->tokens) return cl_error(CL_ERR_INVALID, "generation needs a GPT model");
    if (!kv) {
        one_device o = {m, a};
        return cl_generate_timed(one_device_logits, &o, d->cfg.vocab, d->T, prompt, nprompt, n, temperature, top_k, seed, out, st);
    }
    int64_t want = (int64_t)nprompt + n - 1;
    int Tmax = want < 1 ? 1 : want < d->T ? (int)want : d->T;
    cl_decoder_bytes need;
    CL_TRY(cl_decoder_size(d, 1, Tmax, &need));
    cl_device *dev = cl_model_device(m);
    size_t cap = cl_device_cap(dev), held = cl_device_current_total(dev), total = (size_t)(need.cache + need.workspace);
    if (cap && (held > cap || total > cap - held)) {
        char kb[32], wb[32], cb[32], lb[32];
        cl_format_bytes((size_t)need.cache, kb, sizeof kb), cl_format_bytes((size_t)need.workspace, wb, sizeof wb);
        cl_format_bytes(cap, cb, sizeof cb), cl_format_bytes(held < cap ? cap - held : 0, lb, sizeof lb);
        return cl_error(CL_ERR_INVALID,
                        "generation's KV cache (%s for %d positions) and its workspace (%s) do not fit the %s --device-memory "
                        "cap: %s left after the model; raise the cap, generate fewer tokens or use --no-kv-cache",
                        kb, Tmax, wb, cb, lb);
    }
    kv_state k = {NULL, malloc((size_t)Tmax * sizeof(int32_t)), 0};
    if (!k.cached) return cl_error(CL_ERR_OOM, "cannot allocate generation buffers");
    cl_status s = cl_decoder_create(m, 1, Tmax, &k.dc);
    size_t took = cl_device_current_total(dev) - held;
    if (!s) s = cl_generate_timed(kv_logits, &k, d->cfg.vocab, d->T, prompt, nprompt, n, temperature, top_k, seed, out, st);
    if (!s && st) st->kv_predicted = need.cache + need.workspace, st->kv_measured = (int64_t)took, st->held = (int64_t)held;
    cl_decoder_free(k.dc);
    free(k.cached);
    return s;
}

cl_status cl_generate_with(cl_logits_fn logits_of, void *arg, int V, int T, const int32_t *prompt, int nprompt, int n,
                           float temperature, int top_k, uint64_t seed, int32_t *out) {
    return cl_generate_timed(logits_of, arg, V, T, prompt, nprompt, n, temperature, top_k, seed, out, NULL);
}

cl_status cl_generate_timed(cl_logits_fn logits_of, void *arg, int V, int T, const int32_t *prompt, int nprompt, int n,
                            float temperature, int top_k, uint64_t seed, int32_t *out, cl_gen_stats *st) {
    if (nprompt < 1) return cl_error(CL_ERR_INVALID, "generation needs a prompt of at least one token");
    if (n < 0) return cl_error(CL_ERR_INVALID, "--tokens must be >= 0");
    float *logits = malloc((size_t)V * sizeof *logits);
    scored *sc = malloc((size_t)V * sizeof *sc);
    int32_t *seq = malloc(((size_t)nprompt + (size_t)n) * sizeof *seq);
    if (!logits || !sc || !seq) {
        free(logits);
        free(sc);
        free(seq);
        return cl_error(CL_ERR_OOM, "cannot allocate generation buffers");
    }
    memcpy(seq, prompt, (size_t)nprompt * sizeof *seq);
    cl_rng r;
    cl_rng_seed(&r, seed);
    if (st) *st = (cl_gen_stats){0};
    cl_status s = CL_OK;
    for (int k = 0; k < n && !s; k++) {
        int len = nprompt + k, ctx = len < T ? len : T;
        double t0 = cl_now();
        s = logits_of(arg, seq + len - ctx, ctx, logits);
        if (s) break;
        if (st && k == 0) st->prefill_tokens = ctx, st->prefill_s = cl_now() - t0;
        else if (st) st->decode_tokens++, st->decode_s += cl_now() - t0;
        int next;
        if (temperature <= 0) {
            next = 0;
            for (int i = 1; i < V; i++)
                if (logits[i] > logits[next]) next = i;
        } else {
            for (int i = 0; i < V; i++) sc[i] = (scored){logits[i], i};
            int kk = V;
            if (top_k > 0 && top_k < V) {
                qsort(sc, (size_t)V, sizeof *sc, by_value_desc);
                kk = top_k;
            }
            float mx = sc[0].v;
            for (int i = 1; i < kk; i++)
                if (sc[i].v > mx) mx = sc[i].v;
            double total = 0;
            for (int i = 0; i < kk; i++) total += exp((double)(sc[i].v - mx) / temperature);
            double u = (double)cl_rng_uniform(&r) * total, acc = 0;
            next = sc[kk - 1].i;
            for (int i = 0; i < kk; i++) {
                acc += exp((double)(sc[i].v - mx) / temperature);
                if (u < acc) {
                    next = sc[i].i;
                    break;
                }
            }
        }
        seq[len] = next;
        out[k] = next;
    }
    free(logits);
    free(sc);
    free(seq);
    return s;
}
