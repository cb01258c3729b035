// Causal self-attention, materialized (the (T, T) probabilities are kept for backward): the plain-C
// references and the CUDA implementation behind mo_attention_forward / mo_attention_backward (ops.h).
//
// qkv (B, T, 3C): for each position q | k | v, head h at columns h*HS .. (h+1)*HS of each, HS = C / NH.
// att (B, NH, T, T): softmax(q k^T / sqrt(HS)) under the causal mask; entries above the diagonal are 0.
// out (B, T, C) = att @ v, heads side by side.
//
// Scratch (floats; the same on every backend, see the *_scratch_bytes functions in ops.h):
//   forward   3*B*T*C            q, k, v permuted to (B, NH, T, HS) each; att @ v lands in q's slot
//   backward  6*B*T*C + B*NH*T*T q, k, v, dq, dk, dv (B, NH, T, HS) each, then datt (B, NH, T, T), which
//                                the softmax backward turns into dpreatt in place; the cpu reference uses
//                                only the datt part (same offset).
#ifndef MEMOPT_ATTENTION_H
#define MEMOPT_ATTENTION_H

#include <stddef.h>
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

// Float offset of datt inside the backward scratch.
static inline size_t attention_backward_datt_offset(int B, int T, int C) { return 6 * (size_t)B * T * C; }

// Shape rules shared by both attention flavours: positive sizes, C divisible by NH.
mo_status attention_check_shape(const char *op, int B, int T, int C, int NH);

mo_status attention_forward_cpu(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
// dqkv (B, T, 3C) overwritten; scratch as above. The reference takes no forward output: it sums
// att * datt per row itself.
mo_status attention_backward_cpu(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                 const float *att, int B, int T, int C, int NH);

// cuda (attention_materialized.cu, shared with the 16-bit path), on c->stream; batched GEMMs on c->cublas
// (TF32 when c->tf32).
mo_status attention_forward_cuda(mo_ctx *c, float *out, float *att, const float *qkv, void *scratch, int B,
                                 int T, int C, int NH);
// out (B, T, C) is the forward's output, or NULL. With it, and where the score kernel takes the shape
// (fp32 without TF32), the softmax backward runs in the datt kernel's epilogue (attention_dpreatt_cuda,
// with D = rowdot(dout, out)); without it, as its own row kernel after the datt GEMM.
mo_status attention_backward_cuda(mo_ctx *c, float *dqkv, const float *dout, const float *qkv, const float *out,
                                  const float *att, void *scratch, int B, int T, int C, int NH);

// The tiles and the head size of attention_scores.cu (the planner counts its tiles).
#define ATTENTION_SCORES_TILE 128
#define ATTENTION_SCORES_HS 64

// The fp32 score GEMM on its own (attention_scores.cu; the materialized attention uses it for fp32
// without TF32): S (B, NH, T, T) = alpha X Y^T per head, X and Y (T, HS) rows at row stride ldx / ldy,
// head (b, h) at X + b * xsb + h * xsh (elements). Writes every S[i][j] with j <= i (and the rest of the
// 128 x 128 diagonal tiles). The reference writes exactly the j <= i part. _supported says whether the
// kernel takes the shape (pure C, on every build; NULL pointers count as aligned).
int attention_scores_cuda_supported(int BH, int T, int HS, int ldx, int ldy, const void *S, const void *X,
                                    const void *Y);
mo_status attention_scores_cuda(mo_ctx *c, float *S, const float *X, long long xsb, long long xsh, int ldx,
                                const float *Y, long long ysb, long long ysh, int ldy, float alpha, int B, int NH,
                                int T, int HS);
mo_status attention_scores_cpu(float *S, const float *X, long long xsb, long long xsh, int ldx, const float *Y,
                               long long ysb, long long ysh, int ldy, float alpha, int B, int NH, int T, int HS);

// The datt GEMM with the softmax backward in its epilogue (attention_scores.cu, the same tiles as the
// score kernel): per head, with g = alpha X Y^T (X = dout, Y = v in the backward, P = att),
//   dP[i][j] = scale * P[i][j] * (g[i][j] - D[i])   for j <= i,
//   dP[i][j] = 0                                     for i < j < attention_dpreatt_zero_end(i, T, L),
// untouched beyond. D (B, NH, T) is sum_j P[i][j] g[i][j], which for P = softmax and g = dout v^T is
// dout[i] . out[i] (out = P v): attention_rowdot_* computes it from dout and out without g. L is the
// chunk rows of the GEMMs that read dP (they read up to the end of a row's chunk); the zeros always
// cover the rest of the row's 128-wide diagonal tile. P and dP (B, NH, T, T) row-major; X, Y as for
// attention_scores_cuda. _supported: attention_scores_cuda_supported plus P, D 16-byte aligned (pure C).
#ifdef __CUDACC__
#define ATTENTION_HD __host__ __device__
#else
#define ATTENTION_HD
#endif
static inline ATTENTION_HD int attention_dpreatt_zero_end(int i, int T, int L) {
    int e = (i / ATTENTION_SCORES_TILE + 1) * ATTENTION_SCORES_TILE;
    if (L > 0 && (i / L + 1) * L > e) e = (i / L + 1) * L;
    return e < T ? e : T;
}
int attention_dpreatt_cuda_supported(int BH, int T, int HS, int ldx, int ldy, const void *dP, const void *X,
                                     const void *Y, const void *P, const void *D);
mo_status attention_dpreatt_cuda(mo_ctx *c, float *dP, const float *X, long long xsb, long long xsh, int ldx,
                                 const float *Y, long long ysb, long long ysh, int ldy, float alpha, const float *P,
                                 const float *D, float scale, int L, int B, int NH, int T, int HS);
mo_status attention_dpreatt_cpu(float *dP, const float *X, long long xsb, long long xsh, int ldx, const float *Y,
                                long long ysb, long long ysh, int ldy, float alpha, const float *P, const float *D,
                                float scale, int L, int B, int NH, int T, int HS);
// D (B, NH, T): D[b][h][t] = X[t] . Y[t] over the head's HS columns, X and Y rows at strides as above
// (one warp a row, a fixed butterfly: deterministic).
mo_status attention_rowdot_cuda(mo_ctx *c, float *D, const float *X, long long xsb, long long xsh, int ldx,
                                const float *Y, long long ysb, long long ysh, int ldy, int B, int NH, int T, int HS);
mo_status attention_rowdot_cpu(float *D, const float *X, long long xsb, long long xsh, int ldx, const float *Y,
                               long long ysb, long long ysh, int ldy, int B, int NH, int T, int HS);

#ifdef __cplusplus
}
#endif

#endif
