// Mixed-precision (16-bit activation) versions of the basic ops of ops.h, for --precision fp16|bf16.
// They dispatch exactly as the fp32 ops (cpu reference / cuda kernel on ctx->stream / dry computes
// nothing; scratch from mo_scratch_alloc on every backend, sized by the same functions as the fp32 op).
//
// Conventions (dt is MO_F16 or MO_BF16; MO_F32 routes to the fp32 op of ops.h with the same pointers):
//   - activations ((B,T,C), (B,T,4C), logits (B,T,V)) are `void *` of dtype dt (raw 16-bit patterns);
//   - parameters read by an op (wte, wpe, LayerNorm weight and bias) are the 16-bit working copy, dt;
//   - parameter gradients (dwte, dwpe, dweight, dbias) are fp32 and accumulate (+=) as in ops.h;
//   - per-row statistics (mean, rstd, losses) are fp32;
//   - activation gradients (dinp, dout, dlogits) are dt.
// All arithmetic is fp32: each 16-bit input is converted exactly to fp32, the fp32 op's formula is
// applied, and each 16-bit output is rounded once, to nearest even. "+=" on a 16-bit output means
// out = round(float(out) + value). The cpu references do exactly the fp32 references' float
// operations on the converted inputs, so cpu and cuda agree to about one ulp of dt (the fp32 results
// differ only at the level the fp32 ops already differ at).
#ifndef MEMOPT_OPS_MIXED_H
#define MEMOPT_OPS_MIXED_H

#include <stddef.h>
#include "ctx.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- embedding ----
// out (B,T,C) dt = wte[inp[b,t]] (V,C) dt + wpe[t] (T,C) dt
mo_status mo_encoder_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, const int *inp, const void *wte,
                                   const void *wpe, int B, int T, int C);
// dwte (V,C) fp32 +=, dwpe (T,C) fp32 += from dout (B,T,C) dt; inp / inp_host as mo_encoder_backward.
// Scratch: mo_encoder_backward_scratch_bytes(B, T).
mo_status mo_encoder_backward_mixed(mo_ctx *c, mo_dtype dt, float *dwte, float *dwpe, const void *dout,
                                    const int *inp, const int *inp_host, int B, int T, int C, int V);

// ---- LayerNorm (eps 1e-5) ----
// out (N,C) dt, mean (N) fp32, rstd (N) fp32 (either may be NULL) from inp (N,C) dt, weight (C) dt,
// bias (C) dt.
mo_status mo_layernorm_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, float *mean, float *rstd, const void *inp,
                                     const void *weight, const void *bias, int N, int C);
// dinp (N,C) dt +=, dweight (C) fp32 +=, dbias (C) fp32 += from dout (N,C) dt, inp (N,C) dt, weight (C) dt,
// mean, rstd (N) fp32. Scratch: mo_layernorm_backward_scratch_bytes(N, C).
mo_status mo_layernorm_backward_mixed(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias,
                                      const void *dout, const void *inp, const void *weight, const float *mean,
                                      const float *rstd, int N, int C);
// The same, and dsum (C) fp32 += the column sums of the new dinp as stored (rounded to dt): the bias gradient of
// a GEMM whose output gradient dinp is (GPT's projections read the residual stream's gradient), so that GEMM's
// backward need not read it again. 16 bits only; C <= MO_LN_DSUM_MAX_C. The cpu sums each column in double,
// in row order, as matmul_backward_cpu's dbias (the same bits); the cuda kernels in their blocks' fixed order.
// Scratch: mo_layernorm_backward_sum_scratch_bytes(N, C).
#define MO_LN_DSUM_MAX_C 8192
mo_status mo_layernorm_backward_sum_mixed(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias, float *dsum,
                                          const void *dout, const void *inp, const void *weight, const float *mean,
                                          const float *rstd, int N, int C);
size_t mo_layernorm_backward_sum_scratch_bytes(int N, int C);

// ---- GELU (tanh approximation) ----
// out (n) dt = gelu(inp (n) dt); out may alias inp.
mo_status mo_gelu_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, const void *inp, size_t n);
// dinp (n) dt = gelu'(inp) * dout (overwritten; dinp may alias dout). All dt.
mo_status mo_gelu_backward_mixed(mo_ctx *c, mo_dtype dt, void *dinp, const void *inp, const void *dout, size_t n);

// ---- residual ----
// out = a + b (n), all dt; out may alias a or b.
mo_status mo_residual_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, const void *a, const void *b, size_t n);
// dst += src (n), both dt (dst = round(dst + src)).
mo_status mo_accumulate_mixed(mo_ctx *c, mo_dtype dt, void *dst, const void *src, size_t n);

// ---- classifier ----
// logits (B,T,V) dt in, overwritten in place by dlogits (dt) = (softmax - onehot(target)) * dloss;
// losses (B,T) fp32 = -log softmax[target]. dloss as mo_crossentropy_fused: 1/(B*T), times the loss
// scale for fp16 (so that small probabilities stay representable in the 16-bit dlogits).
mo_status mo_crossentropy_fused_mixed(mo_ctx *c, mo_dtype dt, float *losses, void *logits, const int *targets,
                                      int B, int T, int V, float dloss);

// ---- precision plumbing and optimizer ----
// dst (n) of dst_dt = src (n) of src_dt, each element rounded once to nearest even (a widening copy is
// exact; a same-type copy is a plain copy). Any pair of MO_F32, MO_F16, MO_BF16; dst must not overlap src.
mo_status mo_cast_mixed(mo_ctx *c, mo_dtype dst_dt, void *dst, mo_dtype src_dt, const void *src, size_t n);
// AdamW on the fp32 master (n): bit for bit what mo_adamw computes for master, grad, m, v (all fp32),
// and in the same pass param16 (n, dt) = round(new master). dt == MO_F32: param16 is ignored (may be
// NULL) and this is mo_adamw on master.
mo_status mo_adamw_mixed(mo_ctx *c, mo_dtype dt, float *master, void *param16, const float *grad, float *m,
                         float *v, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                         int t, float grad_scale);
// *out_host = 1 if any element of g (n fp32) is inf or NaN, else 0 (the fp16 loss scaler skips the step
// on 1). Deterministic (a boolean), synchronous. Scratch: mo_nonfinite_scratch_bytes(n). Dry: 0.
mo_status mo_nonfinite(mo_ctx *c, const float *g, size_t n, int *out_host);
size_t mo_nonfinite_scratch_bytes(size_t n);

#ifdef __cplusplus
}
#endif

#endif
