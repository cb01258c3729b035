// Causal self-attention, fused (flash-style, FlashAttention-2) with 16-bit activations on tensor cores:
// the path behind `--precision bf16|fp16 --attn fused`. Plain-C references (attention_fused_mixed.c)
// and the CUDA kernels (attention_fused_mixed.cu, mma.sync m16n8k16, 16-bit A/B, fp32 accumulators).
//
// Layout and semantics as the fp32 fused op (attention_fused.h): qkv (B, T, 3C) dt, out (B, T, C) dt,
// lse (B, NH, T) fp32 with lse[t] = log sum_{t2 <= t} exp(q_t . k_t2 / sqrt(HS)); backward: dqkv
// (B, T, 3C) dt overwritten, from dout (B, T, C) dt, qkv, out and lse. dt is MO_BF16 or MO_F16;
// MO_F32 routes to the fp32 mo_attention_fused_* ops (the pointers are then float *).
// Head size HS = C / NH: any multiple of 8 from 8 to 128 (MO_ATTN_FUSED_MAX_HS); other head sizes get
// MO_ERR_UNSUPPORTED on every backend (so dry and cpu refuse what cuda would). T is arbitrary.
// CUDA needs qkv, out, dout, dqkv 16-byte aligned (the allocator's are); else MO_ERR_INVALID.
//
// Arithmetic: every sum in fp32 (double in the references); 16-bit rounding happens exactly at these
// points, on both the GPU and the references (round to nearest even):
//   forward   s = (q . k) * scale, fp32, never rounded. Online softmax over key tiles of
//             MO_ATTN_FM_KEY_TILE keys (tile j covers keys [64 j, 64 j + 64)): m_j = running row max after
//             tile j, l = sum exp(s - m) in fp32 from the UNROUNDED probabilities, and
//             acc = acc * exp(m_{j-1} - m_j) + sum_{keys of tile j} round_dt(exp(s - m_j)) * v.
//             So P is rounded to dt (relative to the running max of its tile) right before the P @ V
//             mma; the reference walks the same key tiles, so its rounded P are the same values.
//             out = round_dt(acc / l); lse = m + log(l) kept in fp32.
//   backward  D = rowsum(dout * out) in fp32 (scratch), P = exp(s - lse) fp32, dP = dout . v fp32,
//             dS = P * (dP - D) fp32 (from the unrounded P);
//             dv = round_dt(sum round_dt(P) dout),  dk = round_dt(scale * sum round_dt(dS) q),
//             dq = round_dt(scale * sum round_dt(dS) k):  P is rounded before the dV mma, dS before
//             the dK and dQ mmas, and the scale is applied to the fp32 accumulators at the end.
// Deterministic (same bits every run): no atomics; dk, dv by a kernel whose block owns a key tile and
// walks the query tiles in order, dq by a kernel whose block owns a query tile.
#ifndef MEMOPT_ATTENTION_FUSED_MIXED_H
#define MEMOPT_ATTENTION_FUSED_MIXED_H

#include <stddef.h>
#include "ctx.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// Key tile of the forward's online softmax: fixes where P is rounded (the reference uses it too).
#define MO_ATTN_FM_KEY_TILE 64

// forward: out (B,T,C) dt, lse (B,NH,T) fp32 from qkv (B,T,3C) dt. No scratch.
mo_status mo_attention_fused_forward_mixed(mo_ctx *c, mo_dtype dt, void *out, float *lse, const void *qkv, int B,
                                           int T, int C, int NH);
// backward: dqkv (B,T,3C) dt overwritten, from dout (B,T,C), qkv, out (dt) and lse (fp32).
mo_status mo_attention_fused_backward_mixed(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout, const void *qkv,
                                            const void *out, const float *lse, int B, int T, int C, int NH);
// Scratch (bytes, every backend): forward 0; backward D (B, NH, T) floats (as the fp32 op).
size_t mo_attention_fused_forward_mixed_scratch_bytes(int B, int T, int C, int NH);
size_t mo_attention_fused_backward_mixed_scratch_bytes(int B, int T, int C, int NH);

// ---- internals ----
// References: 16-bit inputs converted to fp32, sums in double, rounded at the points above.
mo_status attention_fused_forward_mixed_cpu(mo_dtype dt, void *out, float *lse, const void *qkv, int B, int T, int C,
                                            int NH);
// Dbuf: the (B, NH, T) scratch.
mo_status attention_fused_backward_mixed_cpu(mo_dtype dt, void *dqkv, float *Dbuf, const void *dout, const void *qkv,
                                             const void *out, const float *lse, int B, int T, int C, int NH);
// cuda (attention_fused_mixed.cu), on c->stream.
mo_status attention_fused_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, float *lse, const void *qkv, int B,
                                             int T, int C, int NH);
mo_status attention_fused_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout,
                                              const void *qkv, const void *out, const float *lse, void *scratch,
                                              int B, int T, int C, int NH);

#ifdef __cplusplus
}
#endif

#endif
