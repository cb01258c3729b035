// GELU, tanh approximation as GPT-2: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). The plain-C
// reference and the CUDA launchers behind mo_gelu_forward / mo_gelu_backward (ops.h).
#ifndef MEMOPT_GELU_H
#define MEMOPT_GELU_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

// sqrt(2/pi) correctly rounded to float; one literal for the cpu and cuda code so both use the same bits
#define MO_GELU_SCALE 0.7978845608028654f

// out (n) = gelu(inp) (n); out may alias inp.
mo_status gelu_forward_cpu(float *out, const float *inp, size_t n);
// dinp (n) = gelu'(inp) * dout (n), overwritten; dinp may alias dout.
mo_status gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t n);

mo_status gelu_forward_cuda(mo_ctx *c, float *out, const float *inp, size_t n);
mo_status gelu_backward_cuda(mo_ctx *c, float *dinp, const float *inp, const float *dout, size_t n);

#ifdef __cplusplus
}
#endif

#endif
