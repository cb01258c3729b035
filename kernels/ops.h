// The op kernels of the GPT training step. Each op has a plain-C CPU reference (kernels/<op>.c,
// function <op>_cpu) and a CUDA implementation beside it (kernels/<op>.cu, function <op>_cuda);
// the mo_<op> entry points here dispatch on ctx->backend:
//   cpu  -> the reference;   cuda -> the kernel on ctx->stream;   dry -> nothing is computed.
// Scratch memory an op needs is taken from ctx->alloc by the dispatcher, on every backend (dry too),
// with a size given by a function of the shapes alone, and freed before the op returns; so the dry
// backend's peaks are the real ones.
//
// Conventions (as in llm.c): N = B*T rows; row-major; weights are (out, in).
// "+=" marks outputs that accumulate (gradients of weights, and of inputs where a residual stream
// sums several contributions); every other output is overwritten.
// All ops are deterministic: the same inputs give the same bits on every run (no atomics whose
// order varies).
#ifndef MEMOPT_OPS_H
#define MEMOPT_OPS_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- embedding ----
// out (B,T,C) = wte[inp[b,t]] (V,C) + wpe[t] (T,C)
mo_status mo_encoder_forward(mo_ctx *c, float *out, const int *inp, const float *wte, const float *wpe,
                             int B, int T, int C);
// dwte (V,C) +=, dwpe (T,C) += from dout (B,T,C). inp is on the device (cuda) / host memory (cpu);
// inp_host is always a host copy of the same tokens (the cuda kernel groups positions by token on the
// host so that each row of dwte is summed in a fixed order).
mo_status mo_encoder_backward(mo_ctx *c, float *dwte, float *dwpe, const float *dout, const int *inp,
                              const int *inp_host, int B, int T, int C, int V);

// ---- LayerNorm (eps 1e-5) ----
// out (N,C), mean (N), rstd (N) from inp (N,C), weight (C), bias (C)
mo_status mo_layernorm_forward(mo_ctx *c, float *out, float *mean, float *rstd, const float *inp,
                               const float *weight, const float *bias, int N, int C);
// dinp (N,C) +=, dweight (C) +=, dbias (C) +=
mo_status mo_layernorm_backward(mo_ctx *c, float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, const float *mean,
                                const float *rstd, int N, int C);

// ---- GEMMs (cuBLASLt on cuda; TF32 when ctx->tf32) ----
// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL.
// If gelu_out is non-NULL it receives gelu(out) (tanh approximation) as well: the cuBLASLt
// GELU_AUX epilogue keeps the pre-activation in out and writes gelu_out in one pass.
mo_status mo_matmul_forward(mo_ctx *c, float *out, float *gelu_out, const float *inp, const float *weight,
                            const float *bias, int N, int C, int OC);
// dinp (N,C) = dout (N,OC) @ weight (OC,C)     (overwritten; dinp may be NULL to skip)
// dweight (OC,C) += dout^T @ inp (N,C);  dbias (OC) += sum over rows of dout (dbias may be NULL)
mo_status mo_matmul_backward(mo_ctx *c, float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, int N, int C, int OC);

// Epilogue fusions (cuBLASLt; the cpu reference runs the two ops in turn, so its results are those of
// the unfused pair, bit for bit):
// out (N,OC) = inp @ weight^T + bias + add (N,OC): the residual add in the GEMM (C = add, beta 1).
// out must not alias add or inp.
mo_status mo_matmul_forward_add(mo_ctx *c, float *out, const float *inp, const float *weight, const float *bias,
                                const float *add, int N, int C, int OC);
// mo_matmul_backward with dinp = gelu'(gelu_pre) * (dout @ weight): the GELU backward of the layer before
// (gelu_pre (N,C) its pre-activation) in the dinp GEMM (DGELU epilogue); dinp is required.
mo_status mo_matmul_backward_dgelu(mo_ctx *c, float *dinp, float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *weight, const float *gelu_pre, int N, int C, int OC);

// ---- GELU (tanh approximation, as GPT-2) ----
mo_status mo_gelu_forward(mo_ctx *c, float *out, const float *inp, size_t n);
// dinp (n) = gelu'(inp) * dout   (overwritten; dinp may alias dout)
mo_status mo_gelu_backward(mo_ctx *c, float *dinp, const float *inp, const float *dout, size_t n);

// ---- residual ----
// out = a + b (n); out may alias a or b
mo_status mo_residual_forward(mo_ctx *c, float *out, const float *a, const float *b, size_t n);
// dst += src (n): sums gradient contributions into the residual stream
mo_status mo_accumulate(mo_ctx *c, float *dst, const float *src, size_t n);

// ---- causal self-attention ----
// qkv (B,T,3C) holds q | k | v for each position, heads of size HS = C/NH interleaved as in GPT-2.
// materialized: att (B,NH,T,T) receives the softmax probabilities (kept for backward); out (B,T,C).
mo_status mo_attention_forward(mo_ctx *c, float *out, float *att, const float *qkv, int B, int T, int C, int NH);
// dqkv (B,T,3C) overwritten, from dout (B,T,C), qkv, out and att of the forward. out may be NULL; given,
// the cuda backend may use it (attention.h: the fp32 softmax backward fused into the datt kernel).
mo_status mo_attention_backward(mo_ctx *c, float *dqkv, const float *dout, const float *qkv, const float *out,
                                const float *att, int B, int T, int C, int NH);
// fused (flash-style): stores only the row log-sum-exp lse (B,NH,T), never the (T,T) scores.
mo_status mo_attention_fused_forward(mo_ctx *c, float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
mo_status mo_attention_fused_backward(mo_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                      const float *out, const float *lse, int B, int T, int C, int NH);

// ---- classifier: softmax + cross-entropy, fused with its backward ----
// logits (B,T,V) in, overwritten in place by dlogits = (softmax - onehot(target)) * dloss;
// losses (B,T) receives -log softmax[target]. dloss is the gradient of the mean loss per position
// (1/(B*T), times any loss scale).
mo_status mo_crossentropy_fused(mo_ctx *c, float *losses, float *logits, const int *targets, int B, int T,
                                int V, float dloss);

// ---- optimizer ----
// AdamW (decoupled weight decay) with bias correction at step t (1-based); grads scaled by
// grad_scale first (gradient clipping and loss unscaling). n elements; all fp32.
mo_status mo_adamw(mo_ctx *c, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                   float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale);
// out (host) = sum of squares of g (n), deterministic (fixed reduction order). Synchronous.
mo_status mo_sumsq(mo_ctx *c, double *out, const float *g, size_t n);

// ---- scratch sizes (bytes), shared by every backend ----
size_t mo_encoder_backward_scratch_bytes(int B, int T);
size_t mo_layernorm_backward_scratch_bytes(int N, int C);
size_t mo_attention_forward_scratch_bytes(int B, int T, int C, int NH);
size_t mo_attention_backward_scratch_bytes(int B, int T, int C, int NH);
size_t mo_attention_fused_backward_scratch_bytes(int B, int T, int C, int NH); // the flash kernels' backward
// What mo_attention_fused_forward (backward 0) / _backward (1) take under c's engine (attention_fused.c)
size_t mo_attention_fused_scratch_bytes(const mo_ctx *c, int backward, int B, int T, int C, int NH);
size_t mo_sumsq_scratch_bytes(size_t n);

#ifdef __cplusplus
}
#endif

#endif
