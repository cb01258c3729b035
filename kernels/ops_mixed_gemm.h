// Mixed-precision (16-bit activation) GEMM and attention ops, for --precision fp16|bf16: activations in
// 16 bits (dt = MO_F16 or MO_BF16, stored as raw 16-bit patterns), tensor-core GEMMs with fp32
// accumulation (CUBLAS_COMPUTE_32F), fp32 master weights and fp32 parameter gradients.
// Same dispatch contract as ops.h (cpu reference / cuda / dry computes nothing; scratch from ctx->alloc
// on every backend with sizes that are functions of the shapes and dt alone). Every "void *" tensor is
// of type dt unless its comment says fp32; conventions otherwise as in ops.h (N = B*T rows, weights
// (OC, C), "+=" accumulates, everything else overwritten). All ops are deterministic.
//
// CPU references convert the 16-bit inputs to fp32, compute exactly as the fp32 references (sums in
// double), and round each 16-bit output once; intermediates the GPU keeps in 16 bits (the scaled
// scores and probabilities att, the backward's datt / dpreatt) are rounded at the same points.
#ifndef MEMOPT_OPS_MIXED_GEMM_H
#define MEMOPT_OPS_MIXED_GEMM_H

#include <stddef.h>
#include "ctx.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- GEMMs (cuBLASLt, A/B 16-bit, fp32 compute) ----
// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); all dt; bias may be NULL. weight is the 16-bit
// working copy of the fp32 master. gelu_out (dt, may be NULL) = gelu(pre-activation), from the fp32
// accumulator (cuBLASLt GELU_AUX_BIAS epilogue: out = aux keeps the pre-activation in dt).
mo_status mo_matmul_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, void *gelu_out, const void *inp,
                                  const void *weight, const void *bias, int N, int C, int OC);
// dinp (N,C) dt = dout @ weight (overwritten; may be NULL to skip)
// dweight (OC,C) fp32 += dout^T @ inp (cuBLASLt, A/B dt, C/D fp32, beta 1)
// dbias (OC) fp32 += column sums of dout (may be NULL): a fixed-order fp32 reduction.
mo_status mo_matmul_backward_mixed(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias,
                                   const void *dout, const void *inp, const void *weight, int N, int C, int OC);

// Epilogue fusions, as ops.h's mo_matmul_forward_add / mo_matmul_backward_dgelu; the fp32 accumulator
// goes through the fused step before its one rounding to dt (the cpu reference rounds at that point too):
// out (N,OC) dt = round(inp @ weight^T + bias + add), add (N,OC) dt; out must not alias add or inp.
mo_status mo_matmul_forward_add_mixed(mo_ctx *c, mo_dtype dt, void *out, const void *inp, const void *weight,
                                      const void *bias, const void *add, int N, int C, int OC);
// dinp (N,C) dt = round(gelu'(gelu_pre) * (dout @ weight)), gelu_pre (N,C) dt; dweight, dbias as
// mo_matmul_backward_mixed. dinp is required.
mo_status mo_matmul_backward_dgelu_mixed(mo_ctx *c, mo_dtype dt, void *dinp, float *dweight, float *dbias,
                                         const void *dout, const void *inp, const void *weight, const void *gelu_pre,
                                         int N, int C, int OC);
// mo_matmul_backward_dgelu_mixed, and dinp_dbias (C) fp32 += the column sums of dinp over its N rows: the
// bias gradient of the GEMM whose output gelu_pre is (GPT's fc, MEMOPT_DBIAS=gelu), so that GEMM's backward
// needs no pass of its own over dinp. bf16 on cuda: cuBLASLt's DGELU_BGRAD epilogue, whose sums come out in
// D's type (cuBLASLt refuses an fp32 bias gradient beside a 16-bit D: CUBLAS_STATUS_INVALID_VALUE in the
// H200 probe, results/h200-probe-gemm-algos.log), so each is rounded once to bf16 before the fp32 add, as
// PyTorch's autocast rounds a bf16 linear's bias gradient; the cpu reference rounds the fp32 sum of the
// unrounded values. fp16 (a column sum can pass fp16's 65504 where no term does), C % 8 != 0, or no
// algorithm: the DGELU GEMM, then the default's fixed-order fp32 reduction over the rounded dinp (the cpu
// reference's double sums of those; the same bits as passing dbias to the next GEMM's backward).
mo_status mo_matmul_backward_dgelu_bsum_mixed(mo_ctx *c, mo_dtype dt, void *dinp, float *dinp_dbias, float *dweight,
                                              float *dbias, const void *dout, const void *inp, const void *weight,
                                              const void *gelu_pre, int N, int C, int OC);

// ---- causal self-attention, materialized ----
// qkv (B,T,3C), out (B,T,C), att (B,NH,T,T) all dt. att = softmax(round(q k^T / sqrt(HS))) with the
// softmax in fp32, stored rounded to dt (exact zeros above the diagonal).
mo_status mo_attention_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, void *att, const void *qkv, int B, int T,
                                     int C, int NH);
// dqkv (B,T,3C) dt overwritten, from dout (B,T,C), qkv and att (all dt).
mo_status mo_attention_backward_mixed(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout, const void *qkv,
                                      const void *att, int B, int T, int C, int NH);

// ---- scratch sizes (bytes), shared by every backend ----
size_t mo_matmul_backward_mixed_scratch_bytes(int N, int OC, int has_dbias);
size_t mo_matmul_backward_dgelu_bsum_mixed_scratch_bytes(int N, int C, int OC, int has_dbias);
size_t mo_attention_forward_mixed_scratch_bytes(mo_dtype dt, int B, int T, int C, int NH);
size_t mo_attention_backward_mixed_scratch_bytes(mo_dtype dt, int B, int T, int C, int NH);

#ifdef __cplusplus
}
#endif

#endif
