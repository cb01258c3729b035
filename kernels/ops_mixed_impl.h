// Internals of the mixed-precision ops (ops_mixed.h): the plain-C references (<op>_mixed.c), the CUDA
// launchers (<op>_mixed.cu), and the host helpers the references share. dt is MO_F16 or MO_BF16 here
// (the dispatchers route MO_F32 to the fp32 ops and reject anything else).
#ifndef MEMOPT_OPS_MIXED_IMPL_H
#define MEMOPT_OPS_MIXED_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "ctx.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// MO_OK for MO_F16 / MO_BF16, MO_ERR_INVALID (naming op) otherwise.
mo_status mixed_check_dtype(mo_dtype dt, const char *op);

#ifndef __CUDACC__
// Element i of a 16-bit array of dtype dt, exactly as fp32; and its store, rounded to nearest even.
static inline float mixed_ld(mo_dtype dt, const void *p, size_t i) {
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == MO_F16 ? mo_f16_to_f32(h) : mo_bf16_to_f32(h);
}
static inline void mixed_st(mo_dtype dt, void *p, size_t i, float f) {
    ((uint16_t *)p)[i] = dt == MO_F16 ? mo_f32_to_f16(f) : mo_f32_to_bf16(f);
}
#endif

// ---- cpu references ----
mo_status encoder_forward_mixed_cpu(mo_dtype dt, void *out, const int *inp, const void *wte, const void *wpe, int B,
                                    int T, int C);
mo_status encoder_backward_mixed_cpu(mo_dtype dt, float *dwte, float *dwpe, const void *dout, const int *inp, int B,
                                     int T, int C, int V);
mo_status layernorm_forward_mixed_cpu(mo_dtype dt, void *out, float *mean, float *rstd, const void *inp,
                                      const void *weight, const void *bias, int N, int C);
mo_status layernorm_backward_mixed_cpu(mo_dtype dt, void *dinp, float *dweight, float *dbias, float *dsum,
                                       const void *dout, const void *inp, const void *weight, const float *mean,
                                       const float *rstd, int N, int C);
mo_status gelu_forward_mixed_cpu(mo_dtype dt, void *out, const void *inp, size_t n);
mo_status gelu_backward_mixed_cpu(mo_dtype dt, void *dinp, const void *inp, const void *dout, size_t n);
mo_status residual_forward_mixed_cpu(mo_dtype dt, void *out, const void *a, const void *b, size_t n);
mo_status crossentropy_fused_mixed_cpu(mo_dtype dt, float *losses, void *logits, const int *targets, int N, int V,
                                       float dloss);
mo_status cast_mixed_cpu(mo_dtype dst_dt, void *dst, mo_dtype src_dt, const void *src, size_t n);
mo_status adamw_mixed_cpu(mo_dtype dt, float *master, void *param16, const float *grad, float *m, float *v, size_t n,
                          float lr, float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale);
mo_status nonfinite_cpu(const float *g, size_t n, int *out);

// ---- cuda launchers (on c->stream) ----
mo_status encoder_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, const int *inp, const void *wte,
                                     const void *wpe, int B, int T, int C);
// scratch: mo_encoder_backward_scratch_bytes(B, T), the token grouping of encoder.h
mo_status encoder_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, float *dwte, float *dwpe, const void *dout,
                                      const int *inp_host, void *scratch, int B, int T, int C, int V);
mo_status layernorm_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd, const void *inp,
                                       const void *weight, const void *bias, int N, int C);
// scratch (scratch_bytes): mo_layernorm_backward_scratch_bytes(N, C), the (G, 2, C) partials of layernorm.h, or
// with dsum mo_layernorm_backward_sum_scratch_bytes(N, C), (G', 3, C) partials (G' <= 2 G / 3)
mo_status layernorm_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias, float *dsum,
                                        const void *dout, const void *inp, const void *weight, const float *mean,
                                        const float *rstd, void *scratch, size_t scratch_bytes, int N, int C);
mo_status gelu_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *inp, size_t n);
mo_status gelu_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dinp, const void *inp, const void *dout, size_t n);
mo_status residual_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *a, const void *b, size_t n);
mo_status crossentropy_fused_mixed_cuda(mo_ctx *c, mo_dtype dt, float *losses, void *logits, const int *targets,
                                        int N, int V, float dloss);
// dst_dt != src_dt (same-type copies are a cudaMemcpyAsync in the dispatcher)
mo_status cast_mixed_cuda(mo_ctx *c, mo_dtype dst_dt, void *dst, mo_dtype src_dt, const void *src, size_t n);
mo_status adamw_mixed_cuda(mo_ctx *c, mo_dtype dt, float *master, void *param16, const float *grad, float *m,
                           float *v, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                           int t, float grad_scale);
// scratch: mo_nonfinite_scratch_bytes(n) (one int flag)
mo_status nonfinite_cuda(mo_ctx *c, const float *g, void *scratch, size_t n, int *out_host);

#ifdef __cplusplus
}
#endif

#endif
