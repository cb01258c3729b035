// Residual stream adds: the plain-C reference and the CUDA launchers behind mo_residual_forward and
// mo_accumulate (ops.h).
#ifndef MEMOPT_RESIDUAL_H
#define MEMOPT_RESIDUAL_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

// out (n) = a (n) + b (n); out may alias a or b.
mo_status residual_forward_cpu(float *out, const float *a, const float *b, size_t n);
// dst (n) += src (n)
mo_status accumulate_cpu(float *dst, const float *src, size_t n);

mo_status residual_forward_cuda(mo_ctx *c, float *out, const float *a, const float *b, size_t n);
mo_status accumulate_cuda(mo_ctx *c, float *dst, const float *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif
