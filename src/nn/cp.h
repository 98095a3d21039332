/* Context parallelism inside a model part (src/nn/cp_attention.c): the
 * attention call the blocks make and the positions the embedding adds, both
 * the plain one-rank calls when the part has no context group
 * (cl_model_set_cp not called, or a group of one). */
#ifndef CL_NN_CP_H
#define CL_NN_CP_H

#include "cleave/model.h"

/* Context ranks of the part (1: none). */
int cl_nn_cp_size(const cl_model *m);
/* Place in the whole sequence of local token t of Tl (t itself at cp 1). */
int64_t cl_nn_cp_position(const cl_model *m, int64_t t, int Tl);
/* out's rows += wpe[position of their token]: rows rows of the micro-batch's flattened [B, Tl] from row0 (all
 * B Tl from 0, or a sequence-parallel rank's share); the backward adds all B Tl of dout's rows into dwpe's. */
void cl_nn_cp_positions_forward(const cl_model *m, float *out, const float *wpe, int64_t rows, int64_t row0, int Tl, int64_t C);
void cl_nn_cp_positions_backward(const cl_model *m, float *dwpe, const float *dout, int B, int Tl, int64_t C);
/* The blockwise attention of cl_flash_forward / cl_flash_backward (same
 * arguments; T the part's local tokens), across the context group. */
cl_status cl_nn_attention_forward(const cl_model *m, float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV);
cl_status cl_nn_attention_backward(const cl_model *m, float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH, int NKV);
/* Frees the part's context state (cl_model_destroy). */
void cl_nn_cp_free(cl_model *m);

#endif
