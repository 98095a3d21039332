/* Rotary position embeddings in Hugging Face's rotate-half layout
 * (LlamaRotaryEmbedding and apply_rotary_pos_emb): within a head of hd
 * values, value i pairs with i + hd/2, and at position p
 *   out[i]        = x[i] cos(p f_i) - x[i + hd/2] sin(p f_i)
 *   out[i + hd/2] = x[i + hd/2] cos(p f_i) + x[i] sin(p f_i),   i < hd/2,
 * each product rounded, then the sum (HF's q * cos + rotate_half(q) * sin).
 * The backward is the transpose rotation (sin negated).
 *
 * The tables (cl_rope_table) hold cos and sin per position and i, computed
 * once: the frequencies f_i as HF computes them in F32 (inv_freq = 1 /
 * theta^(2i/hd), each operation rounded to f32, the power taken in double
 * and rounded once; Llama 3.1's "llama3" scaling with HF's _compute_llama3_parameters
 * operations in f32), the angle f_i * p rounded to f32 as HF's F32 product
 * is, its cos and sin in double rounded once to f32.
 *
 * The kernels rotate `heads` heads of hd values at the start of each row of
 * a [N, ld] array; row n is at position pos0 + n % T (T positions a sample,
 * pos0 the first, for a rank that holds a later piece of the sequence).
 * With a row of [q heads | k heads | v heads] one call with heads = H + KV
 * rotates q and k together. Rows go to the thread team whole, so the bits do
 * not depend on the thread count. */
#include "cleave/kernels.h"

#include "cleave/core.h"

#include <math.h>

static cl_status rope_check(int hd, double theta, const cl_rope_scaling *sc) {
    if (hd <= 0 || hd % 2) return cl_error(CL_ERR_INVALID, "rope: head width %d must be even and positive", hd);
    if (!(theta > 1.0) || !isfinite(theta)) return cl_error(CL_ERR_INVALID, "rope: theta %g must be above 1", theta);
    if (sc && sc->type == CL_ROPE_LLAMA3) {
        if (!(sc->factor >= 1.0) || !isfinite(sc->factor))
            return cl_error(CL_ERR_INVALID, "rope_scaling: factor %g must be at least 1", sc->factor);
        if (!(sc->low_freq_factor > 0) || !(sc->high_freq_factor > sc->low_freq_factor) ||
            !isfinite(sc->high_freq_factor))
            return cl_error(CL_ERR_INVALID, "rope_scaling: high_freq_factor %g must exceed low_freq_factor %g > 0",
                            sc->high_freq_factor, sc->low_freq_factor);
        if (sc->original_max_position_embeddings <= 0)
            return cl_error(CL_ERR_INVALID, "rope_scaling: original_max_position_embeddings %d must be positive",
                            sc->original_max_position_embeddings);
    } else if (sc && sc->type != CL_ROPE_DEFAULT) {
        return cl_error(CL_ERR_INVALID, "rope_scaling: unknown type %d", sc->type);
    }
    return CL_OK;
}

/* Frequency i < hd/2 of a checked configuration. */
static float rope_freq(int i, int hd, double theta, const cl_rope_scaling *sc) {
    /* HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), each step in f32 */
    float e = (float)(2 * i) / (float)hd;
    float f = 1.0f / (float)pow((double)(float)theta, (double)e);
    if (!sc || sc->type != CL_ROPE_LLAMA3) return f;
    /* HF's _compute_llama3_parameters, its tensor operations in f32 (a
     * Python scalar meets an f32 tensor as an f32; `s / t` is
     * reciprocal(t) * s); the wavelength bounds are Python's doubles */
    float factor = (float)sc->factor, old = (float)sc->original_max_position_embeddings;
    float low_wl = (float)(sc->original_max_position_embeddings / sc->low_freq_factor);
    float high_wl = (float)(sc->original_max_position_embeddings / sc->high_freq_factor);
    float wavelen = (1.0f / f) * (float)(2 * M_PI);
    float fl = wavelen > low_wl ? f / factor : f;
    float smooth = ((1.0f / wavelen) * old - (float)sc->low_freq_factor) / (float)(sc->high_freq_factor - sc->low_freq_factor);
    float smoothed = (1.0f - smooth) * fl / factor + smooth * fl;
    return !(wavelen < high_wl) && !(wavelen > low_wl) ? smoothed : fl;
}

cl_status cl_rope_freqs(float *inv_freq, int hd, double theta, const cl_rope_scaling *sc) {
    CL_TRY(rope_check(hd, theta, sc));
    for (int i = 0; i < hd / 2; i++) inv_freq[i] = rope_freq(i, hd, theta, sc);
    return CL_OK;
}

cl_status cl_rope_table(float *cos_t, float *sin_t, int P, int hd, double theta, const cl_rope_scaling *sc) {
    CL_TRY(rope_check(hd, theta, sc));
    if (P < 0) return cl_error(CL_ERR_INVALID, "rope: %d positions", P);
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float f = rope_freq(i, hd, theta, sc);
        for (int p = 0; p < P; p++) {
            float a = f * (float)p; /* HF's F32 product inv_freq @ position_ids */
            cos_t[(int64_t)p * half + i] = (float)cos((double)a);
            sin_t[(int64_t)p * half + i] = (float)sin((double)a);
        }
    }
    return CL_OK;
}

#define ROPE_PAR(N, W) ((int64_t)(N) * (W) >= 65536)

/* dir 1: forward rotation, out = R x; dir -1: the transpose, out = R^T x.
 * add: out += the result instead of out = (out may then not be x). */
static void rope_apply(float *out, const float *in, const float *cos_t, const float *sin_t, int N, int T, int pos0,
                       int heads, int hd, int64_t ld, int dir, int add) {
    CL_ASSERT(hd > 0 && hd % 2 == 0 && T > 0 && pos0 >= 0 && (int64_t)heads * hd <= ld);
    int half = hd / 2;
#pragma omp parallel for schedule(static) if (ROPE_PAR(N, (int64_t)heads * hd))
    for (int n = 0; n < N; n++) {
        int64_t p = pos0 + n % T;
        const float *c = cos_t + p * half, *s = sin_t + p * half;
        for (int h = 0; h < heads; h++) {
            const float *x = in + (int64_t)n * ld + (int64_t)h * hd;
            float *o = out + (int64_t)n * ld + (int64_t)h * hd;
            for (int i = 0; i < half; i++) {
                float x1 = x[i], x2 = x[i + half], y1, y2;
                if (dir > 0) {
                    y1 = x1 * c[i] + -x2 * s[i];
                    y2 = x2 * c[i] + x1 * s[i];
                } else {
                    y1 = x1 * c[i] + x2 * s[i];
                    y2 = x2 * c[i] + -(x1 * s[i]);
                }
                if (add) {
                    o[i] += y1;
                    o[i + half] += y2;
                } else {
                    o[i] = y1;
                    o[i + half] = y2;
                }
            }
        }
    }
}

void cl_rope_forward(float *out, const float *in, const float *cos_t, const float *sin_t, int N, int T, int pos0,
                     int heads, int hd, int64_t ld) {
    rope_apply(out, in, cos_t, sin_t, N, T, pos0, heads, hd, ld, 1, 0);
}

void cl_rope_backward(float *din, const float *dout, const float *cos_t, const float *sin_t, int N, int T, int pos0,
                      int heads, int hd, int64_t ld) {
    rope_apply(din, dout, cos_t, sin_t, N, T, pos0, heads, hd, ld, -1, 1);
}

void cl_rope_backward_set(float *din, const float *dout, const float *cos_t, const float *sin_t, int N, int T,
                          int pos0, int heads, int hd, int64_t ld) {
    rope_apply(din, dout, cos_t, sin_t, N, T, pos0, heads, hd, ld, -1, 0);
}
