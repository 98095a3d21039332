/* Max-pool 2d, NCHW, square window K, stride S, no padding.
 *
 * The forward scans each window in row-major order and keeps the first
 * maximum (a strictly greater value replaces it), saving its offset
 * h*W + w within the (b, c) plane in idx. The backward adds dout into din
 * at the saved offsets; overlapping windows (S < K) accumulate. */
#include "cleave/kernels.h"

void cl_maxpool_forward(float *out, int32_t *idx, const float *in,
                        int B, int C, int H, int W, int K, int S) {
    int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
    for (int64_t bc = 0; bc < (int64_t)B * C; bc++) {
        const float *x = in + bc * H * W;
        float *o = out + bc * OH * OW;
        int32_t *ix = idx + bc * OH * OW;
        for (int oh = 0; oh < OH; oh++) {
            for (int ow = 0; ow < OW; ow++) {
                int h0 = oh * S, w0 = ow * S;
                int32_t best = h0 * W + w0;
                float mx = x[best];
                for (int kh = 0; kh < K; kh++) {
                    const float *row = x + (int64_t)(h0 + kh) * W + w0;
                    for (int kw = 0; kw < K; kw++) {
                        if (row[kw] > mx) {
                            mx = row[kw];
                            best = (h0 + kh) * W + w0 + kw;
                        }
                    }
                }
                o[oh * OW + ow] = mx;
                ix[oh * OW + ow] = best;
            }
        }
    }
}

void cl_maxpool_backward(float *din, const float *dout, const int32_t *idx,
                         int B, int C, int H, int W, int K, int S) {
    int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
    int64_t P = (int64_t)OH * OW;
    for (int64_t bc = 0; bc < (int64_t)B * C; bc++) {
        float *dx = din + bc * H * W;
        const float *d = dout + bc * P;
        const int32_t *ix = idx + bc * P;
        for (int64_t p = 0; p < P; p++) dx[ix[p]] += d[p];
    }
}
