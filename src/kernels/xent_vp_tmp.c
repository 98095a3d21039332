/* TEMPORARY plain versions until the kernels land (deleted at merge). */
#include "cleave/kernels.h"
#include <math.h>
void cl_xent_vp_max(float *mx, const float *logits, int N, int Vl, int valid);
void cl_xent_vp_sum(double *sum, double *tlogit, const float *logits, const float *mx, const int32_t *targets, int v0, int N, int Vl, int valid);
void cl_xent_vp_backward(float *dlogits, const float *logits, const float *lse, const int32_t *targets, int v0, float dloss, int N, int Vl, int valid);
void cl_xent_vp_max(float *mx, const float *logits, int N, int Vl, int valid) {
    for (int i = 0; i < N; i++) {
        float m = -INFINITY;
        for (int j = 0; j < valid; j++) m = logits[(int64_t)i * Vl + j] > m ? logits[(int64_t)i * Vl + j] : m;
        mx[i] = m;
    }
}
void cl_xent_vp_sum(double *sum, double *tlogit, const float *logits, const float *mx, const int32_t *targets, int v0, int N, int Vl, int valid) {
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int j = 0; j < valid; j++) s += exp((double)logits[(int64_t)i * Vl + j] - mx[i]);
        sum[i] = s;
        int t = targets[i] - v0;
        tlogit[i] = targets[i] >= 0 && t >= 0 && t < valid ? logits[(int64_t)i * Vl + t] : 0;
    }
}
void cl_xent_vp_backward(float *dlogits, const float *logits, const float *lse, const int32_t *targets, int v0, float dloss, int N, int Vl, int valid) {
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < Vl; j++) {
            int64_t k = (int64_t)i * Vl + j;
            float g = 0;
            if (targets[i] >= 0 && j < valid) g = dloss * ((float)exp((double)logits[k] - lse[i]) - (targets[i] - v0 == j ? 1.0f : 0.0f));
            dlogits[k] = g;
        }
    }
}
