// The GPT step's ops in the model's activation dtype dt: MO_F32 calls the fp32 ops of kernels/ops.h
// (TF32 per ctx->tf32), MO_F16 / MO_BF16 the 16-bit ops of kernels/ops_mixed*.h. Tensors are `void *`
// of dtype dt except where a comment says fp32: per-row statistics (mean, rstd, lse), losses and every
// parameter gradient (dweight, dbias) are fp32 in all precisions.
#ifndef MEMOPT_GPT_OPS_H
#define MEMOPT_GPT_OPS_H

#include "kernels/ops.h"
#include "kernels/ops_mixed.h"
#include "kernels/ops_mixed_gemm.h"
#include "kernels/attention_fused_mixed.h"

// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias; gelu_out = gelu(out) when non-NULL
static inline mo_status gpt_matmul_fwd(mo_ctx *x, mo_dtype dt, void *out, void *gelu_out, const void *inp,
                                       const void *w, const void *b, int N, int C, int OC) {
    if (dt == MO_F32) return mo_matmul_forward(x, out, gelu_out, inp, w, b, N, C, OC);
    return mo_matmul_forward_mixed(x, dt, out, gelu_out, inp, w, b, N, C, OC);
}

// dinp (N,C) = dout @ weight; dweight (OC,C) fp32 +=; dbias (OC) fp32 +=
static inline mo_status gpt_matmul_bwd(mo_ctx *x, mo_dtype dt, void *dinp, float *dw, float *db, const void *dout,
                                       const void *inp, const void *w, int N, int C, int OC) {
    if (dt == MO_F32) return mo_matmul_backward(x, dinp, dw, db, dout, inp, w, N, C, OC);
    return mo_matmul_backward_mixed(x, dt, dinp, dw, db, dout, inp, w, N, C, OC);
}

// out (N,OC) = inp @ weight^T + bias + add (the residual inside the GEMM)
static inline mo_status gpt_matmul_fwd_add(mo_ctx *x, mo_dtype dt, void *out, const void *inp, const void *w,
                                           const void *b, const void *add, int N, int C, int OC) {
    if (dt == MO_F32) return mo_matmul_forward_add(x, out, inp, w, b, add, N, C, OC);
    return mo_matmul_forward_add_mixed(x, dt, out, inp, w, b, add, N, C, OC);
}

// gpt_matmul_bwd with dinp = gelu'(pre) * (dout @ weight) (the GELU backward inside the GEMM)
static inline mo_status gpt_matmul_bwd_dgelu(mo_ctx *x, mo_dtype dt, void *dinp, float *dw, float *db,
                                             const void *dout, const void *inp, const void *w, const void *pre, int N,
                                             int C, int OC) {
    if (dt == MO_F32) return mo_matmul_backward_dgelu(x, dinp, dw, db, dout, inp, w, pre, N, C, OC);
    return mo_matmul_backward_dgelu_mixed(x, dt, dinp, dw, db, dout, inp, w, pre, N, C, OC);
}

// gpt_matmul_bwd_dgelu, 16-bit only, and dinp_db (C) fp32 += the column sums of dinp (the fc bias gradient)
static inline mo_status gpt_matmul_bwd_dgelu_bsum(mo_ctx *x, mo_dtype dt, void *dinp, float *dinp_db, float *dw,
                                                  float *db, const void *dout, const void *inp, const void *w,
                                                  const void *pre, int N, int C, int OC) {
    return mo_matmul_backward_dgelu_bsum_mixed(x, dt, dinp, dinp_db, dw, db, dout, inp, w, pre, N, C, OC);
}

// Materialized: att (B,NH,T,T) dt. Fused: att is lse (B,NH,T) fp32.
static inline mo_status gpt_attention_fwd(mo_ctx *x, mo_dtype dt, int fused, void *out, void *att, const void *qkv,
                                          int B, int T, int C, int NH) {
    if (fused) {
        if (dt == MO_F32) return mo_attention_fused_forward(x, out, att, qkv, B, T, C, NH);
        return mo_attention_fused_forward_mixed(x, dt, out, att, qkv, B, T, C, NH);
    }
    if (dt == MO_F32) return mo_attention_forward(x, out, att, qkv, B, T, C, NH);
    return mo_attention_forward_mixed(x, dt, out, att, qkv, B, T, C, NH);
}

static inline mo_status gpt_attention_bwd(mo_ctx *x, mo_dtype dt, int fused, void *dqkv, const void *dout,
                                          const void *qkv, const void *out, const void *att, int B, int T, int C,
                                          int NH) {
    if (fused) {
        if (dt == MO_F32) return mo_attention_fused_backward(x, dqkv, dout, qkv, out, att, B, T, C, NH);
        return mo_attention_fused_backward_mixed(x, dt, dqkv, dout, qkv, out, att, B, T, C, NH);
    }
    if (dt == MO_F32) return mo_attention_backward(x, dqkv, dout, qkv, out, att, B, T, C, NH);
    return mo_attention_backward_mixed(x, dt, dqkv, dout, qkv, att, B, T, C, NH);
}

#endif
