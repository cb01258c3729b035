// Causal self-attention in 16 bits on cuDNN's fused scaled-dot-product attention (flash attention in
// cuDNN 9), reached through the backend graph API: the implementation behind MEMOPT_ATTN_IMPL=cudnn
// under --precision bf16|fp16 --attn fused. Same contract as attention_fused_mixed.h (the default,
// MEMOPT_ATTN_IMPL=own, the suite's own kernels), so the GPT step calls the same two dispatchers and
// the knob only picks which code they run:
//   qkv (B, T, 3C) dt read in place through strides (q, k, v of head h at columns h*HS, C + h*HS,
//   2C + h*HS: cuDNN's (B, NH, T, HS) tensors with strides (3CT, HS, 3C, 1), no transpose copies);
//   out (B, T, C) dt; lse (B, NH, T) fp32 = cuDNN's softmax stats (max + log sum exp of the scaled,
//   masked scores: the same quantity as the own kernel's lse, so the stats tensor IS the caller's lse
//   buffer and nothing is allocated for it); backward dqkv (B, T, 3C) dt overwritten.
// Graphs (attention_cudnn_cuda.c) follow cudnn-frontend's composite SDPA node op for op (matmul,
// pointwise, reduction, gen-index causal mask, reshape); scale 1/sqrt(HS); built and cached per shape.
//
// Memory, identical on every backend (so dry predicts cuda to the byte):
//   forward   nothing: cuDNN's workspace is the context's GEMM workspace (32 MiB unless
//             MEMOPT_WORKSPACE_MIB; a plan that wants more is refused, MO_ERR_UNSUPPORTED, with the size).
//   backward  one scratch block (category workspace) of mo_attention_cudnn_backward_scratch_bytes:
//             dQ accumulator (B, NH, T, HS) fp32, then softmax_sum = rowsum(dout * out) (B, NH, T) fp32
//             (the own kernel's D); the plan's own workspace again the shared one.
// The cpu backend runs the plain-C references of attention_fused_mixed.c (inside the same scratch), so
// cpu and dry allocate alike under the knob too.
//
// Refused on every backend (MO_ERR_UNSUPPORTED, so dry refuses what cuda would): dtypes other than
// bf16/fp16 (fp32 never gets here: cuDNN's SDPA has no fp32), head sizes not a multiple of 8 or above
// 128, and T not a multiple of 128: cuDNN before 9.16 needs a padding-mask workaround for a key length
// that is not (cudnn-frontend adds one for <= 9.15), which this file does not build.
// Numerics differ from the own kernel (cuDNN's tiles and rounding points), within the GPU test's
// tolerances against the same references. The backward accumulates dQ with fp32 atomics (cuDNN's
// non-deterministic dQ path; its deterministic one needs a (B, NH, T, T) 16-bit dP workspace, 192 MiB
// at GPT-2 124M), so unlike the own kernel its dq bits can differ between runs.
#ifndef MEMOPT_ATTENTION_CUDNN_H
#define MEMOPT_ATTENTION_CUDNN_H

#include <stddef.h>
#include "ctx.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// ctx->attn_impl (MEMOPT_ATTN_IMPL=own|cudnn)
#define MO_ATTN_IMPL_OWN 0
#define MO_ATTN_IMPL_CUDNN 1
#define MO_ATTN_CUDNN_T_MULTIPLE 128

// MO_OK when the cudnn implementation takes this call (dt 16-bit, the shape rules above); else
// MO_ERR_UNSUPPORTED / MO_ERR_INVALID with the reason. op names the caller in the message.
mo_status mo_attention_cudnn_check(const char *op, mo_dtype dt, int B, int T, int C, int NH);
// forward: out (B,T,C) dt, lse (B,NH,T) fp32 from qkv (B,T,3C) dt.
mo_status mo_attention_cudnn_forward(mo_ctx *c, mo_dtype dt, void *out, float *lse, const void *qkv, int B, int T,
                                     int C, int NH);
// backward: dqkv (B,T,3C) dt overwritten, from dout (B,T,C), qkv, out (dt) and lse (fp32).
mo_status mo_attention_cudnn_backward(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout, const void *qkv,
                                      const void *out, const float *lse, int B, int T, int C, int NH);
// Scratch bytes of the backward (every backend): (B*NH*T*HS + B*NH*T) floats.
size_t mo_attention_cudnn_backward_scratch_bytes(int B, int T, int C, int NH);

// ---- internals (attention_cudnn_cuda.c), on c->stream ----
mo_status attention_cudnn_forward_cuda(mo_ctx *c, mo_dtype dt, void *out, float *lse, const void *qkv, int B, int T,
                                       int C, int NH);
// scratch: the block of mo_attention_cudnn_backward_scratch_bytes
mo_status attention_cudnn_backward_cuda(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout, const void *qkv,
                                        const void *out, const float *lse, void *scratch, int B, int T, int C,
                                        int NH);
// Plans built and reused so far (tests read them to see the cache work).
void mo_attention_cudnn_cache_stats(const mo_ctx *c, long *hits, long *misses);
// Frees the plan cache of c (mo_ctx_destroy calls it before the cuDNN handle goes; no-op when none).
void mo_attention_cudnn_destroy(mo_ctx *c);

#ifdef __cplusplus
}
#endif

#endif
