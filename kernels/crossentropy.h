// Softmax + cross-entropy fused with its backward (the GPT-2 classifier loss): the plain-C reference and
// the CUDA launcher behind mo_crossentropy_fused (ops.h).
#ifndef MEMOPT_CROSSENTROPY_H
#define MEMOPT_CROSSENTROPY_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

// Per row r of N = B*T rows of V logits, with m = max_j x_j and S = sum_j exp(x_j - m):
//   losses[r] = log(S) - (x[target] - m)                   (= -log softmax[target], no exp underflow)
//   logits[r,j] := (exp(x_j - m) * (1/S) - [j == target]) * dloss   (overwritten in place)
// A target outside [0,V) gives a NaN loss and no one-hot term, on every backend (the cuda kernel cannot
// report an error from device data).
mo_status crossentropy_fused_cpu(float *losses, float *logits, const int *targets, int N, int V, float dloss);

// logits (N,V) on the device, losses (N), targets (N) on the device. One block per row.
mo_status crossentropy_fused_cuda(mo_ctx *c, float *losses, float *logits, const int *targets, int N, int V,
                                  float dloss);

#ifdef __cplusplus
}
#endif

#endif
