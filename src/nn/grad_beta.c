/* Whether a gradient's first product of the step may overwrite it (nn/kind.h, cl_nn_grad_beta): the flags
 * cl_model_zero_grads and cl_model_bucket_begin set where their fills zeroed a gradient, read and cleared here by the
 * product about to write it. A file of its own: the kinds call it, and it calls nothing back. */
#include "nn/kind.h"
#include "nn/model_impl.h"

float cl_nn_grad_beta(const cl_model *m, const float *g) {
    const cl_model_desc *d = m->desc;
    int i = g && g == m->head_wte_g ? d->nparams : -1;
    for (int j = 0; g && i < 0 && j < d->nparams; j++)
        if (m->g[j] == g && d->params[j].numel > 0) i = j;
    if (i < 0 || !m->gfresh[i]) return 1.0f;
    m->gfresh[i] = 0;
    return 0.0f;
}
