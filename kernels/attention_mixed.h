// Internals of the mixed-precision materialized attention (ops_mixed_gemm.h): CPU references and the
// CUDA implementation behind mo_attention_forward_mixed / mo_attention_backward_mixed.
//
// Layouts as attention.h; every tensor dt (16-bit). Rounding points (the cpu reference rounds at the
// same ones): the scaled scores q k^T / sqrt(HS) (GEMM output, dt, written into att), the probabilities
// (softmax in fp32 from the dt scores, rounded into att), out; backward: datt = dout v^T (dt),
// dpreatt = scale * att * (datt - rowsum(att * datt)) (fp32 from dt inputs, rounded), dq, dk, dv.
//
// Scratch (dt elements; the same on every backend):
//   forward   3*B*T*C            q, k, v permuted to (B, NH, T, HS) each; att @ v lands in q's slot
//   backward  6*B*T*C + B*NH*T*T q, k, v, dq, dk, dv (B, NH, T, HS), then datt (B, NH, T, T), turned
//                                into dpreatt in place; the cpu reference uses only the datt part.
#ifndef MEMOPT_ATTENTION_MIXED_H
#define MEMOPT_ATTENTION_MIXED_H

#include <stddef.h>
#include "ctx.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// dt-element offset of datt inside the backward scratch.
static inline size_t attention_mixed_datt_offset(int B, int T, int C) { return 6 * (size_t)B * T * C; }

mo_status attention_forward_mixed_cpu(mo_dtype dt, void *out, void *att, const void *qkv, int B, int T, int C,
                                      int NH);
mo_status attention_backward_mixed_cpu(mo_dtype dt, void *dqkv, void *scratch, const void *dout, const void *qkv,
                                       const void *att, int B, int T, int C, int NH);

// cuda (attention_materialized.cu, shared with fp32): batched GEMMs on c->cublas (cublasGemmStridedBatchedEx, 16-bit A/B/C,
// CUBLAS_COMPUTE_32F), kernels on c->stream.
mo_status attention_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, void *att, const void *qkv,
                                       void *scratch, int B, int T, int C, int NH);
mo_status attention_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout, const void *qkv,
                                        const void *att, void *scratch, int B, int T, int C, int NH);

#ifdef __cplusplus
}
#endif

#endif
