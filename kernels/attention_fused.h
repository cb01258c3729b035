// Causal self-attention, fused (flash-style, FlashAttention-2 in fp32): the (T, T) probabilities are never
// stored. Plain-C references and the CUDA kernels behind mo_attention_fused_forward / _backward (ops.h).
//
// Same qkv (B, T, 3C) / out (B, T, C) layout as the materialized op (attention.h). Kept from the forward:
// out and lse (B, NH, T), lse[t] = log sum_{t2 <= t} exp(q_t . k_t2 / sqrt(HS)). Recomputed in the
// backward: the scores and P = exp(scores - lse) per tile, from q, k and lse.
// Backward scratch: D (B, NH, T) floats, D[t] = dout_t . out_t (per head) = rowsum(dP * P).
// Head size at most MO_ATTN_FUSED_MAX_HS (the kernels keep per-head tiles in shared memory); larger
// heads are refused on every backend, so dry runs refuse what cuda would.
#ifndef MEMOPT_ATTENTION_FUSED_H
#define MEMOPT_ATTENTION_FUSED_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MO_ATTN_FUSED_MAX_HS 128

mo_status attention_fused_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
// dqkv (B, T, 3C) overwritten; Dbuf: the (B, NH, T) scratch.
mo_status attention_fused_backward_cpu(float *dqkv, float *Dbuf, const float *dout, const float *qkv,
                                       const float *out, const float *lse, int B, int T, int C, int NH);

// cuda (attention_fused.cu), on c->stream; scratch: mo_attention_fused_backward_scratch_bytes.
mo_status attention_fused_forward_cuda(mo_ctx *c, float *out, float *lse, const float *qkv, int B, int T, int C,
                                       int NH);
mo_status attention_fused_backward_cuda(mo_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                        const float *out, const float *lse, void *scratch, int B, int T, int C,
                                        int NH);

#ifdef __cplusplus
}
#endif

#endif
