// The MLP model (models/mlp.c): its table is mo_mlp_model (models/model.h). Test access to an
// instance made by mo_mlp_model.create.
#ifndef MEMOPT_MLP_H
#define MEMOPT_MLP_H

#include <stddef.h>
#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// The fp32 parameters and gradients as host copies (either may be NULL); *n: their count.
mo_status mo_mlp_read(void *mlp, float *params, float *grads, size_t *n);
// Forward and backward of every micro-batch (gradients zeroed first, then accumulated), no update.
mo_status mo_mlp_forward_backward(void *mlp);

#ifdef __cplusplus
}
#endif
#endif
