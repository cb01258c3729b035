// Fused causal attention on TF32 tensor cores (attention_fused_tf32.cu): what mo_attention_fused_forward /
// _backward run on cuda when ctx->tf32 is set and ctx->attn_tf32 (MEMOPT_ATTN_TF32, default on). Same
// arguments, layouts, lse and D scratch as attention_fused_forward_cuda / _backward_cuda (attention_fused.h);
// any head size up to MO_ATTN_FUSED_MAX_HS, any T. Operands (q, k, v, P, dout, dS) rounded to TF32; sums fp32.
#ifndef MEMOPT_ATTENTION_FUSED_TF32_H
#define MEMOPT_ATTENTION_FUSED_TF32_H

#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

mo_status attention_fused_tf32_forward_cuda(mo_ctx *c, float *out, float *lse, const float *qkv, int B, int T, int C,
                                            int NH);
mo_status attention_fused_tf32_backward_cuda(mo_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                             const float *out, const float *lse, void *scratch, int B, int T, int C,
                                             int NH);

#ifdef __cplusplus
}
#endif

#endif
