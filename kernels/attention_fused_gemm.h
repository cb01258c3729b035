// Fused causal attention in fp32 / TF32 as blocked batched GEMMs (attention_fused_gemm.cu): what
// mo_attention_fused_forward / _backward run on cuda for fp32 data when ctx->attn_fused32 is
// MO_ATTN_FUSED32_GEMM (MEMOPT_ATTN_FUSED32=gemm, the default). Same contract as the flash kernels
// (attention_fused.h): out and lse (B, NH, T) are all the forward keeps; the backward recomputes.
//
// Why: the flash kernels run fp32 on CUDA cores (and TF32 through hand-written mma), while cuBLAS's
// GEMMs are the fastest thing this GPU does in fp32 and TF32: the materialized step was 148.9 / 41.9 ms
// against the flash kernels' 175.0 / 70.2 (H200, README). Here the queries are cut into chunks of
// L = mo_attn_fused_gemm_rows rows and each chunk's (L, T) block of scores lives only in a scratch
// buffer, so the memory stays O(B NH L T) instead of the materialized O(B NH T T) per layer.
//
// Per chunk of query rows [r0, r1) (all B*NH heads in one cublasGemmBatchedEx, operands in place in qkv,
// out, dout, dqkv through per-head pointer arrays; keys only up to r1: the causal mask zeroes the rest):
//   forward   S = q_c k^T / sqrt(HS) (L, r1); P = softmax over keys <= t, lse kept; y_c = P v
//   backward  S again and dP = dy_c v^T; P = exp(S - lse), dS = P (dP - D) / sqrt(HS) (D = dy . y per
//             row, once for all rows); dv += P^T dy_c; dq_c = dS k; dk += dS^T q_c
// The backward runs the chunks from the last (keys [0, T): beta 0) to the first (beta 1 after), so dk and
// dv are sums in a fixed order: deterministic, like every GEMM here.
// Scratch (every backend, so the dry peak is exact): forward one (B*NH, L, T) fp32 buffer and the pointer
// arrays; backward D (B, NH, T) first (the cpu reference's Dbuf), then two buffers and the pointer arrays.
#ifndef MEMOPT_ATTENTION_FUSED_GEMM_H
#define MEMOPT_ATTENTION_FUSED_GEMM_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

// ctx->attn_fused32's values (MEMOPT_ATTN_FUSED32=gemm | own)
#define MO_ATTN_FUSED32_GEMM 0
#define MO_ATTN_FUSED32_OWN 1
#define MO_ATTN_FUSED32_DEFAULT MO_ATTN_FUSED32_GEMM

// The scratch budget of the chunk buffers, per head (b, h): the backward's two (L, T) fp32 rows of each
// head fit in it, so the chunk rows L do not shrink as the batch grows and the scratch grows with the
// batch, as the activations do (128 MiB for all heads made chunks of 640 rows, 126 MB, at micro-batch 2,
// which raised the peak of ckpt sqrt accum 4 by 59 MB over the flash kernels at GPT-2 124M; with 2.5 MiB a
// head the peaks are the flash kernels' on the whole dry baseline grid).
// 2.5 MiB: 320 rows of T 1024, so 4 chunks of 256 at GPT-2 T 1024, whose forward + backward took 2.44 ms
// a layer in fp32 and 1.57 in TF32 on the H100 at B 8 against 2.69 / 1.75 at 128 rows, 3.28 / 2.12 at 64,
// 2.61 / 1.60 at 512 and 3.11 / 1.86 at 1024 (gpu_ops_gemm_attn's rows timing,
// results/h100-gputest-4dd646c.log).
#ifndef MO_ATTN_FUSED_GEMM_HEAD_BUDGET
#define MO_ATTN_FUSED_GEMM_HEAD_BUDGET ((size_t)5 << 19)
#endif

// Query rows a chunk: ctx->attn_fused_rows when set (tests), else, with G the fewest chunks whose rows (a
// multiple of 64, at least 64) fit MO_ATTN_FUSED_GEMM_HEAD_BUDGET, T / G rows rounded up to a multiple of
// 64; at most T. Pure C, every backend.
int mo_attn_fused_gemm_rows(const mo_ctx *c, int B, int T, int NH);
// Where things sit in the scratch (byte offsets, each 256-aligned): D (backward only), the score buffer
// s, the dP buffer dp (backward only), the pointer arrays; total bytes; the chunk rows L and count G.
typedef struct mo_attn_fg_layout {
    size_t d, s, dp, ptrs, total;
    int L, G, jobs;
} mo_attn_fg_layout;
void mo_attn_fused_gemm_layout(const mo_ctx *c, int backward, int B, int T, int NH, mo_attn_fg_layout *l);
// Scratch bytes of the forward (backward 0) or the backward (1), the layout above. Pure C.
size_t mo_attn_fused_gemm_scratch_bytes(const mo_ctx *c, int backward, int B, int T, int C, int NH);

// cuda, on c->stream and c->cublas (TF32 when c->tf32 && c->attn_tf32); scratch as above.
mo_status attention_fused_gemm_forward_cuda(mo_ctx *c, float *out, float *lse, const float *qkv, void *scratch, int B,
                                            int T, int C, int NH);
mo_status attention_fused_gemm_backward_cuda(mo_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                             const float *out, const float *lse, void *scratch, int B, int T, int C,
                                             int NH);

#ifdef __cplusplus
}
#endif

#endif
