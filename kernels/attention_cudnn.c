// The MEMOPT_ATTN_IMPL=cudnn dispatchers (attention_cudnn.h): shape rules, the backward's scratch on every
// backend, and the plain-C references of attention_fused_mixed.c on cpu. The cuDNN graphs are in
// attention_cudnn_cuda.c.
#include "attention_cudnn.h"

#include "attention.h"
#include "attention_fused.h"
#include "attention_fused_mixed.h"
#include "cost.h"
#include "matmul_mixed.h"

mo_status mo_attention_cudnn_check(const char *op, mo_dtype dt, int B, int T, int C, int NH) {
    if (!mo_mmg_is_16bit(dt))
        return MO_FAIL(MO_ERR_UNSUPPORTED, "%s: MEMOPT_ATTN_IMPL=cudnn takes fp16 or bf16, not %s", op,
                       mo_dtype_name(dt));
    MO_TRY(attention_check_shape(op, B, T, C, NH));
    const int HS = C / NH;
    if (HS > MO_ATTN_FUSED_MAX_HS || HS % 8 != 0)
        return MO_FAIL(MO_ERR_UNSUPPORTED,
                       "%s: MEMOPT_ATTN_IMPL=cudnn: head size %d is not a multiple of 8 up to %d", op, HS,
                       MO_ATTN_FUSED_MAX_HS);
    if (T % MO_ATTN_CUDNN_T_MULTIPLE != 0)
        return MO_FAIL(MO_ERR_UNSUPPORTED,
                       "%s: MEMOPT_ATTN_IMPL=cudnn: seq %d is not a multiple of %d (cuDNN before 9.16 needs a "
                       "padding-mask workaround otherwise, not built here; use MEMOPT_ATTN_IMPL=own)",
                       op, T, MO_ATTN_CUDNN_T_MULTIPLE);
    return MO_OK;
}

size_t mo_attention_cudnn_backward_scratch_bytes(int B, int T, int C, int NH) {
    if (B <= 0 || T <= 0 || NH <= 0 || C <= 0) return 0;
    const size_t rows = (size_t)B * NH * T; // (B, NH, T)
    return (rows * (size_t)(C / NH) + rows) * sizeof(float);
}

mo_status mo_attention_cudnn_forward(mo_ctx *c, mo_dtype dt, void *out, float *lse, const void *qkv, int B, int T,
                                     int C, int NH) {
    MO_TRY(mo_attention_cudnn_check("attention_cudnn_forward", dt, B, T, C, NH));
    mo_cost_attention_cudnn_forward(c, (int)mo_dtype_size(dt), B, T, C, NH);
    switch (c->backend) {
    case MO_BACKEND_CPU: return attention_fused_forward_mixed_cpu(dt, out, lse, qkv, B, T, C, NH);
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        return attention_cudnn_forward_cuda(c, dt, out, lse, qkv, B, T, C, NH);
#else
        return MO_FAIL(MO_ERR_UNSUPPORTED, "attention_cudnn_forward: this build has no CUDA");
#endif
    case MO_BACKEND_DRY: return MO_OK;
    }
    return MO_FAIL(MO_ERR_INTERNAL, "attention_cudnn_forward: unknown backend %d", (int)c->backend);
}

mo_status mo_attention_cudnn_backward(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout, const void *qkv,
                                      const void *out, const float *lse, int B, int T, int C, int NH) {
    MO_TRY(mo_attention_cudnn_check("attention_cudnn_backward", dt, B, T, C, NH));
    void *scratch = NULL;
    MO_TRY(mo_scratch_alloc(c, mo_attention_cudnn_backward_scratch_bytes(B, T, C, NH), &scratch));
    mo_cost_attention_cudnn_backward(c, (int)mo_dtype_size(dt), B, T, C, NH);
    mo_status st;
    switch (c->backend) {
    case MO_BACKEND_CPU: {
        // the reference's D (B, NH, T) where cuDNN keeps softmax_sum: after the dQ accumulator
        float *D = (float *)scratch + (size_t)B * NH * T * (size_t)(C / NH);
        st = attention_fused_backward_mixed_cpu(dt, dqkv, D, dout, qkv, out, lse, B, T, C, NH);
        break;
    }
    case MO_BACKEND_CUDA:
#ifdef MEMOPT_HAVE_CUDA
        st = attention_cudnn_backward_cuda(c, dt, dqkv, dout, qkv, out, lse, scratch, B, T, C, NH);
#else
        st = MO_FAIL(MO_ERR_UNSUPPORTED, "attention_cudnn_backward: this build has no CUDA");
#endif
        break;
    case MO_BACKEND_DRY: st = MO_OK; break;
    default: st = MO_FAIL(MO_ERR_INTERNAL, "attention_cudnn_backward: unknown backend %d", (int)c->backend); break;
    }
    mo_status st2 = mo_scratch_free(c, scratch);
    return st != MO_OK ? st : st2;
}

#ifndef MEMOPT_HAVE_CUDA
void mo_attention_cudnn_cache_stats(const mo_ctx *c, long *hits, long *misses) {
    (void)c;
    *hits = *misses = 0;
}
#endif
