// LayerNorm (eps 1e-5, biased variance) of GPT-2: the plain-C reference and the CUDA launchers behind
// mo_layernorm_forward / mo_layernorm_backward (ops.h).
#ifndef MEMOPT_LAYERNORM_H
#define MEMOPT_LAYERNORM_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MO_LAYERNORM_EPS 1e-5f

// out (N,C) = (inp - mean) * rstd * weight (C) + bias (C); mean (N), rstd (N) = 1/sqrt(var + eps) saved
// per row (either may be NULL to skip).
mo_status layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                                const float *bias, int N, int C);
// dinp (N,C) +=, dweight (C) +=, dbias (C) += from dout (N,C) and the forward's inp, weight, mean, rstd.
mo_status layernorm_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                 const float *weight, const float *mean, const float *rstd, int N, int C);

// The cuda backward reduces dweight/dbias in two deterministic stages: G = layernorm_backward_blocks(N)
// blocks each write a partial (2, C) = (dweight, dbias) row into the scratch (G, 2, C) floats, then a fixed
// order reduce adds the G partials to dweight, dbias. G depends on N only.
int layernorm_backward_blocks(int N);

mo_status layernorm_forward_cuda(mo_ctx *c, float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int N, int C);
// scratch: mo_layernorm_backward_scratch_bytes(N, C) device bytes.
mo_status layernorm_backward_cuda(mo_ctx *c, float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean, const float *rstd,
                                  void *scratch, int N, int C);

// Stage 2 of the cuda backward on its own: dweight (C) +=, dbias (C) += the G partial (2, C) rows, fixed
// order. Used by the mixed-precision backward (layernorm_mixed.cu), whose stage 1 writes the same layout;
// with dsum (may be NULL) the rows are (3, C) and dsum (C) += the third ones' sum.
mo_status layernorm_backward_reduce_cuda(mo_ctx *c, float *dweight, float *dbias, float *dsum, const float *partial,
                                         int G, int C);

#ifdef __cplusplus
}
#endif

#endif
