// The ResNet model (models/resnet.c: its table mo_resnet_model; resnet_step.c: the instance and its step;
// resnet_arch.h: the layer list and the dimension flags). Test access to an instance made by
// mo_resnet_model.create.
#ifndef MEMOPT_RESNET_H
#define MEMOPT_RESNET_H

#include <stddef.h>
#include <stdint.h>
#include "bench/config.h"
#include "kernels/ctx.h"
#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// The fp32 parameters and gradients as host copies (either may be NULL); *n: their count.
mo_status mo_resnet_read(void *rn, float *params, float *grads, size_t *n);
// Sets the fp32 parameters from a host copy (n floats) and refreshes the 16-bit working copy.
mo_status mo_resnet_write(void *rn, const float *params);
// The BN running statistics (mean, var of each unit in order) as a host copy (may be NULL); *n: their count.
mo_status mo_resnet_read_running(void *rn, float *stats, size_t *n);
// Sets the batch from host arrays: images (B,S,S,3) fp32, targets (B).
mo_status mo_resnet_set_batch(void *rn, const float *images, const int *targets);
// The synthetic batch of set_synthetic_batch as host arrays: images (B,S,S,3) uniform in [-1, 1), y (B) in [0, K).
void mo_resnet_synthetic_images(uint64_t seed, int B, int S, int K, float *img, int *y);
// fp16's loss scale from now on (the scaler's 65536 at the start overflows the tiny test models' first
// backward on every backend: a test comparing gradients sets one that does not). No-op without the scaler.
void mo_resnet_set_loss_scale(void *rn, float scale);
// Forward and backward of every micro-batch (gradients zeroed first, then accumulated), no update; the
// running statistics move once per micro-batch. *loss: the mean loss (NULL: not read; NaN on dry).
mo_status mo_resnet_forward_backward(void *rn, double *loss);

// The instance functions of the table (resnet_step.c).
struct mo_model_step_info;
mo_status mo_resnet_create(const mo_run_config *rc, mo_ctx *ctx, void **out);
void mo_resnet_destroy(void *rn);
mo_status mo_resnet_set_synthetic_batch(void *rn, uint64_t seed);
mo_status mo_resnet_step(void *rn);
void mo_resnet_info(void *rn, struct mo_model_step_info *out);

#ifdef __cplusplus
}
#endif
#endif
