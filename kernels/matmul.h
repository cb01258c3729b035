// The GEMMs of the GPT step (linear layers): the plain-C references and the cuBLASLt implementation
// behind mo_matmul_forward / mo_matmul_backward (ops.h). Conventions as llm.c: row-major, N = B*T rows,
// weights (OC, C) = (out, in), so a layer is out = inp @ weight^T + bias.
#ifndef MEMOPT_MATMUL_H
#define MEMOPT_MATMUL_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

// Scratch of mo_matmul_backward (device bytes; the same on every backend): when dbias is wanted,
//   (OC + N) floats = the bias gradient of the cuBLASLt BGRADB epilogue (OC), which overwrites, so it is
//   written there and then added to dbias; and a vector of N ones, used only if this cuBLASLt has no
//   BGRADB algorithm for the shape (then dbias += dout^T @ ones by a GEMV, still in a fixed order).
// 0 when has_dbias is 0.
size_t mo_matmul_backward_scratch_bytes(int N, int OC, int has_dbias);

// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC) (bias may be NULL); gelu_out (N,OC) = gelu(out)
// when non-NULL, GELU in its tanh approximation as GPT-2: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Sums in double.
mo_status matmul_forward_cpu(float *out, float *gelu_out, const float *inp, const float *weight,
                             const float *bias, int N, int C, int OC);
// dinp (N,C) = dout @ weight (skipped if NULL); dweight (OC,C) += dout^T @ inp; dbias (OC) += column
// sums of dout (skipped if NULL). Sums in double (host accumulators of C or OC doubles).
mo_status matmul_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                              const float *weight, int N, int C, int OC);

// cuda (matmul_cuda.c), on c->stream with c->cublaslt and the workspace c->gemm_ws.
// add (N,OC), when non-NULL (then gelu_out is NULL): out += add inside the GEMM (beta 1 on C = add), the
// residual add of mo_matmul_forward_add; out must not alias add.
mo_status matmul_forward_cuda(mo_ctx *c, float *out, float *gelu_out, const float *inp, const float *weight,
                              const float *bias, const float *add, int N, int C, int OC);
// scratch: mo_matmul_backward_scratch_bytes(N, OC, dbias != NULL) device bytes. gelu_pre (N,C), when
// non-NULL: dinp = gelu'(gelu_pre) * (dout @ weight) (cuBLASLt DGELU epilogue where it has an algorithm,
// else the GEMM and then the GELU backward kernel), the fused op of mo_matmul_backward_dgelu.
mo_status matmul_backward_cuda(mo_ctx *c, float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *gelu_pre, void *scratch, int N,
                               int C, int OC);

#ifdef __cplusplus
}
#endif

#endif
