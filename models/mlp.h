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

// A split instance (mo_mlp_model.split->create): forward and backward on every rank (gradients
// complete, no update), timed as a step.
mo_status mo_mlp_split_forward_backward(void *split);
// The parameters (what 0) or gradients (what 1) of every rank in the unsplit model's layout
// (mo_mlp_model.num_params floats, mo_mlp_read's order); a replicated tensor is taken from tp rank 0
// of its stage, and *replicas_equal (may be NULL) says whether every other tp rank holds the same bits.
mo_status mo_mlp_split_gather(void *split, int what, float *full, int *replicas_equal);

#ifdef __cplusplus
}
#endif
#endif
