// Sum of squares of a gradient buffer (for the global gradient norm of clipping): the plain-C reference
// and the CUDA launcher behind mo_sumsq (ops.h).
#ifndef MEMOPT_SUMSQ_H
#define MEMOPT_SUMSQ_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

// *out = sum_i (double)g[i]^2 over g (n), accumulated in double, i increasing.
mo_status sumsq_cpu(double *out, const float *g, size_t n);

// The cuda reduction: G = sumsq_blocks(n) blocks each accumulate a grid-strided share of g in double
// per thread (squares computed in double, so no fp32 rounding at all until the final sum), reduce it in
// fixed shuffle order, and write partial[blockIdx]; one block then sums the G partials in fixed order
// into partial[G], copied to *out after a stream sync. Scratch: (G + 1) doubles; G depends on n only.
int sumsq_blocks(size_t n);
mo_status sumsq_cuda(mo_ctx *c, double *out, const float *g, void *scratch, size_t n);

#ifdef __cplusplus
}
#endif

#endif
