// AdamW optimizer step (decoupled weight decay, bias correction): the plain-C reference and the CUDA
// launcher behind mo_adamw (ops.h).
#ifndef MEMOPT_ADAMW_H
#define MEMOPT_ADAMW_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

// 1 - beta^t in float (powf on the host): the one definition both backends use.
float adamw_bias_correction(float beta, int t);

// For each i of n (all fp32):
//   g = grad*grad_scale;  m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g;
//   mhat = m/(1-beta1^t); vhat = v/(1-beta2^t);
//   param -= lr * (mhat/(sqrt(vhat) + eps) + weight_decay*param)
// in exactly this order of float operations (no fused multiply-add), so cpu and cuda agree bit for bit
// on normal numbers.
mo_status adamw_cpu(float *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int t, float grad_scale);
mo_status adamw_cuda(mo_ctx *c, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale);

#ifdef __cplusplus
}
#endif

#endif
