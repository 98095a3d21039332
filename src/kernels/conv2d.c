/* 2-d convolution, NCHW, zero padding, through im2col + cl_gemm.
 *
 * For each sample, col[IC*KH*KW, OH*OW] gathers the input patches
 * (im2col, padding becomes 0), and then
 *   forward:         out_b[OC, P]   = w[OC, CK] @ col + b       (P = OH*OW, CK = IC*KH*KW)
 *   backward input:  col = w^T @ dout_b, scattered back into din_b (col2im, adds)
 *   backward weight: dw[OC, CK] += dout_b @ col^T,  db[oc] += sum_P dout_b[oc]
 * col is caller-provided workspace of cl_conv2d_col_floats() floats; every
 * entry is written before it is read. Backward kernels add into outputs. */
#include "cleave/kernels.h"

#include <limits.h>

int cl_conv2d_shape_init(cl_conv2d_shape *s, int B, int IC, int H, int W,
                         int OC, int KH, int KW, int stride, int pad) {
    if (B < 1 || IC < 1 || H < 1 || W < 1 || OC < 1 || KH < 1 || KW < 1 || stride < 1 || pad < 0)
        return -1;
    if ((int64_t)H + 2 * (int64_t)pad < KH || (int64_t)W + 2 * (int64_t)pad < KW) return -1;
    int64_t oh = ((int64_t)H + 2 * (int64_t)pad - KH) / stride + 1;
    int64_t ow = ((int64_t)W + 2 * (int64_t)pad - KW) / stride + 1;
    /* gemm sizes are int: the patch length and the plane must fit */
    if ((int64_t)IC * KH * KW > INT_MAX || oh * ow > INT_MAX) return -1;
    if ((int64_t)OC * IC * KH * KW > INT_MAX) return -1;
    s->B = B; s->IC = IC; s->H = H; s->W = W; s->OC = OC;
    s->KH = KH; s->KW = KW; s->stride = stride; s->pad = pad;
    s->OH = (int)oh; s->OW = (int)ow;
    return 0;
}

int64_t cl_conv2d_col_floats(const cl_conv2d_shape *s) {
    return (int64_t)s->IC * s->KH * s->KW * s->OH * s->OW;
}

/* col[(ic, kh, kw), (oh, ow)] = in[ic, oh*stride - pad + kh, ow*stride - pad + kw] or 0 */
static void im2col(float *col, const float *in, const cl_conv2d_shape *s) {
    int64_t P = (int64_t)s->OH * s->OW;
    for (int ic = 0; ic < s->IC; ic++) {
        const float *plane = in + (int64_t)ic * s->H * s->W;
        for (int kh = 0; kh < s->KH; kh++) {
            for (int kw = 0; kw < s->KW; kw++) {
                float *c = col + (((int64_t)ic * s->KH + kh) * s->KW + kw) * P;
                for (int oh = 0; oh < s->OH; oh++) {
                    int ih = oh * s->stride - s->pad + kh;
                    float *crow = c + (int64_t)oh * s->OW;
                    if (ih < 0 || ih >= s->H) {
                        for (int ow = 0; ow < s->OW; ow++) crow[ow] = 0.0f;
                        continue;
                    }
                    const float *irow = plane + (int64_t)ih * s->W;
                    for (int ow = 0; ow < s->OW; ow++) {
                        int iw = ow * s->stride - s->pad + kw;
                        crow[ow] = iw >= 0 && iw < s->W ? irow[iw] : 0.0f;
                    }
                }
            }
        }
    }
}

/* The adjoint of im2col: din += scatter of col (padding positions dropped). */
static void col2im_add(float *din, const float *col, const cl_conv2d_shape *s) {
    int64_t P = (int64_t)s->OH * s->OW;
    for (int ic = 0; ic < s->IC; ic++) {
        float *plane = din + (int64_t)ic * s->H * s->W;
        for (int kh = 0; kh < s->KH; kh++) {
            for (int kw = 0; kw < s->KW; kw++) {
                const float *c = col + (((int64_t)ic * s->KH + kh) * s->KW + kw) * P;
                for (int oh = 0; oh < s->OH; oh++) {
                    int ih = oh * s->stride - s->pad + kh;
                    if (ih < 0 || ih >= s->H) continue;
                    const float *crow = c + (int64_t)oh * s->OW;
                    float *irow = plane + (int64_t)ih * s->W;
                    for (int ow = 0; ow < s->OW; ow++) {
                        int iw = ow * s->stride - s->pad + kw;
                        if (iw >= 0 && iw < s->W) irow[iw] += crow[ow];
                    }
                }
            }
        }
    }
}

void cl_conv2d_forward(float *out, float *col, const float *in, const float *w,
                       const float *b, const cl_conv2d_shape *s) {
    int P = s->OH * s->OW, CK = s->IC * s->KH * s->KW;
    for (int n = 0; n < s->B; n++) {
        const float *x = in + (int64_t)n * s->IC * s->H * s->W;
        float *o = out + (int64_t)n * s->OC * P;
        im2col(col, x, s);
        float beta = 0.0f;
        if (b) {
            for (int oc = 0; oc < s->OC; oc++)
                for (int p = 0; p < P; p++) o[(int64_t)oc * P + p] = b[oc];
            beta = 1.0f;
        }
        cl_gemm(0, 0, s->OC, P, CK, 1.0f, w, CK, col, P, beta, o, P);
    }
}

void cl_conv2d_backward_input(float *din, float *col, const float *dout, const float *w,
                              const cl_conv2d_shape *s) {
    int P = s->OH * s->OW, CK = s->IC * s->KH * s->KW;
    for (int n = 0; n < s->B; n++) {
        const float *d = dout + (int64_t)n * s->OC * P;
        cl_gemm(1, 0, CK, P, s->OC, 1.0f, w, CK, d, P, 0.0f, col, P);
        col2im_add(din + (int64_t)n * s->IC * s->H * s->W, col, s);
    }
}

void cl_conv2d_backward_weight(float *dw, float *db, float *col, const float *dout,
                               const float *in, const cl_conv2d_shape *s) {
    int P = s->OH * s->OW, CK = s->IC * s->KH * s->KW;
    for (int n = 0; n < s->B; n++) {
        const float *d = dout + (int64_t)n * s->OC * P;
        im2col(col, in + (int64_t)n * s->IC * s->H * s->W, s);
        cl_gemm(0, 1, s->OC, CK, P, 1.0f, d, P, col, P, 1.0f, dw, CK);
        if (db) {
            for (int oc = 0; oc < s->OC; oc++) {
                const float *dr = d + (int64_t)oc * P;
                float acc = 0.0f;
                for (int p = 0; p < P; p++) acc += dr[p];
                db[oc] += acc;
            }
        }
    }
}
