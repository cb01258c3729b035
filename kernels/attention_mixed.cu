// Mixed-precision materialized causal attention on CUDA: the structure of attention.cu (permute, strided
// batched GEMMs, a fused mask + softmax kernel, unpermute) with every tensor in 16 bits.
// GEMMs: cublasGemmStridedBatchedEx, A/B/C in CUDA_R_16F / CUDA_R_16BF, CUBLAS_COMPUTE_32F (tensor
// cores, fp32 accumulation, alpha/beta fp32), math mode CUBLAS_DEFAULT_MATH with reduced-precision
// split-K reductions disallowed, set on every call (c->cublas is shared). The score GEMM applies
// alpha = 1/sqrt(HS), so the stored 16-bit scores are the scaled ones (and stay far from fp16's range
// limit). Softmax kernels: one warp per row, fp32 inside, butterfly shuffles (deterministic), masked
// upper triangle written as exact zeros. Rounding points: attention_mixed.h.
// Causal skipping as attention.cu (see there): per query chunk of mo_attn_chunk_rows(c, T) rows, the
// GEMMs cover only the part the mask leaves nonzero, each output still one GEMM (deterministic); the
// stored att is complete (the softmax writes every column), dpreatt is written up to the end of each
// row's chunk, which covers all the dq / dk GEMMs read.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "attention_mixed.h"
#include "cuda_check.h"

#define AM_THREADS 256
#define AM_ROW_WARPS 8

static __device__ __forceinline__ float am_ld(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ float am_ld(const __half *p, size_t i) { return __half2float(p[i]); }
static __device__ __forceinline__ void am_st(__nv_bfloat16 *p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }
static __device__ __forceinline__ void am_st(__half *p, size_t i, float v) { p[i] = __float2half_rn(v); }

static __device__ __forceinline__ float am_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float am_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// (B, NH, T, HS) index -> offset in a (B, T, NH*HS) row layout with row stride ld
static __device__ __forceinline__ size_t am_bthd_offset(size_t idx, int T, int NH, int HS, size_t ld) {
    const size_t d = idx % HS;
    const size_t t = (idx / HS) % T;
    const size_t h = (idx / ((size_t)HS * T)) % NH;
    const size_t b = idx / ((size_t)HS * T * NH);
    return (b * T + t) * ld + h * HS + d;
}

// 16-bit copies: plain element moves (no arithmetic, bit-exact)
template <typename E>
__global__ void am_permute_kernel(E *__restrict__ q, E *__restrict__ k, E *__restrict__ v, const E *__restrict__ qkv,
                                  size_t n, int T, int NH, int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const size_t C = (size_t)NH * HS;
    const size_t src = am_bthd_offset(idx, T, NH, HS, 3 * C);
    q[idx] = qkv[src];
    k[idx] = qkv[src + C];
    v[idx] = qkv[src + 2 * C];
}

template <typename E>
__global__ void am_permute_backward_kernel(E *__restrict__ dqkv, const E *__restrict__ dq, const E *__restrict__ dk,
                                           const E *__restrict__ dv, size_t n, int T, int NH, int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const size_t C = (size_t)NH * HS;
    const size_t dst = am_bthd_offset(idx, T, NH, HS, 3 * C);
    dqkv[dst] = dq[idx];
    dqkv[dst + C] = dk[idx];
    dqkv[dst + 2 * C] = dv[idx];
}

template <typename E>
__global__ void am_unpermute_kernel(E *__restrict__ out, const E *__restrict__ y, size_t n, int T, int NH, int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    out[am_bthd_offset(idx, T, NH, HS, (size_t)NH * HS)] = y[idx];
}

template <typename E>
__global__ void am_unpermute_backward_kernel(E *__restrict__ dy, const E *__restrict__ dout, size_t n, int T, int NH,
                                             int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    dy[idx] = dout[am_bthd_offset(idx, T, NH, HS, (size_t)NH * HS)];
}

// In place on att: scaled dt scores in, dt probabilities out (fp32 inside), zeros above the diagonal.
template <typename E>
__global__ void am_softmax_forward_kernel(E *att, int rows, int T) {
    const int row = blockIdx.x * AM_ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int t = row % T;
    E *x = att + (size_t)row * T;
    float mx = -INFINITY;
    for (int i = lane; i <= t; i += 32) mx = fmaxf(mx, am_ld(x, i));
    mx = am_warp_max(mx);
    float sum = 0.0f;
    for (int i = lane; i <= t; i += 32) sum += expf(am_ld(x, i) - mx);
    sum = am_warp_sum(sum);
    const float inv = 1.0f / sum;
    for (int i = lane; i < T; i += 32) am_st(x, i, i <= t ? expf(am_ld(x, i) - mx) * inv : 0.0f);
}

// In place on datt: dpreatt = scale * att * (datt - rowsum(att * datt)), fp32 inside, zeros above it
// up to the end of the row's query chunk (chunk rows L; the GEMMs that follow read no further).
template <typename E>
__global__ void am_softmax_backward_kernel(E *datt, const E *__restrict__ att, float scale, int rows, int T, int L) {
    const int row = blockIdx.x * AM_ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int t = row % T;
    const int end = (t / L + 1) * L < T ? (t / L + 1) * L : T;
    const E *a = att + (size_t)row * T;
    E *g = datt + (size_t)row * T;
    float s = 0.0f;
    for (int i = lane; i <= t; i += 32) s += am_ld(a, i) * am_ld(g, i);
    s = am_warp_sum(s);
    for (int i = lane; i < end; i += 32) am_st(g, i, i <= t ? scale * am_ld(a, i) * (am_ld(g, i) - s) : 0.0f);
}

static unsigned am_blocks(size_t n, unsigned per_block) { return (unsigned)((n + per_block - 1) / per_block); }

static mo_status am_cublas_setup(mo_ctx *c) {
    cublasHandle_t h = (cublasHandle_t)c->cublas;
    CUBLAS_CHECK(cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                     CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    return MO_OK;
}

// The batched GEMMs of attention.cu (same column-major view, same sub-matrices per chunk: see
// att_gemm_*_rows there), 16-bit A/B/C, fp32 compute. Element offsets are in E units (esz bytes).
static inline const void *am_off(const void *p, size_t elems, size_t esz) { return (const char *)p + elems * esz; }
static inline void *am_off(void *p, size_t elems, size_t esz) { return (char *)p + elems * esz; }

// S[t][t2] = alpha * X[t] . Y[t2], query rows t in [i0, i1), keys t2 in [0, i1)
static mo_status am_gemm_xyT_rows(cublasHandle_t h, cudaDataType_t ty, size_t esz, void *out, const void *x,
                                  const void *y, float alpha, int T, int HS, int n, int i0, int i1) {
    const float zero = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, i1, i1 - i0, HS, &alpha, y, ty, HS,
                                            (long long)T * HS, am_off(x, (size_t)i0 * HS, esz), ty, HS,
                                            (long long)T * HS, &zero, am_off(out, (size_t)i0 * T, esz), ty, T,
                                            (long long)T * T, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return MO_OK;
}
// out[t] = sum_{t2 < i1} P[t][t2] X[t2], rows t in [i0, i1)
static mo_status am_gemm_px_rows(cublasHandle_t h, cudaDataType_t ty, size_t esz, void *out, const void *p,
                                 const void *x, int T, int HS, int n, int i0, int i1) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, HS, i1 - i0, i1, &one, x, ty, HS,
                                            (long long)T * HS, am_off(p, (size_t)i0 * T, esz), ty, T,
                                            (long long)T * T, &zero, am_off(out, (size_t)i0 * HS, esz), ty, HS,
                                            (long long)T * HS, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return MO_OK;
}
// out[t2] = sum_{t >= j0} P[t][t2] X[t], rows t2 in [j0, j1)
static mo_status am_gemm_pTx_rows(cublasHandle_t h, cudaDataType_t ty, size_t esz, void *out, const void *p,
                                  const void *x, int T, int HS, int n, int j0, int j1) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, HS, j1 - j0, T - j0, &one,
                                            am_off(x, (size_t)j0 * HS, esz), ty, HS, (long long)T * HS,
                                            am_off(p, (size_t)j0 * T + j0, esz), ty, T, (long long)T * T, &zero,
                                            am_off(out, (size_t)j0 * HS, esz), ty, HS, (long long)T * HS, n,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return MO_OK;
}

// Per-chunk loops (chunk rows L; L >= T: the single unchunked GEMM).
static mo_status am_gemm_xyT(cublasHandle_t h, cudaDataType_t ty, size_t esz, void *out, const void *x, const void *y,
                             float alpha, int T, int HS, int n, int L) {
    for (int i0 = 0; i0 < T; i0 += L)
        MO_TRY(am_gemm_xyT_rows(h, ty, esz, out, x, y, alpha, T, HS, n, i0, T - i0 > L ? i0 + L : T));
    return MO_OK;
}
static mo_status am_gemm_px(cublasHandle_t h, cudaDataType_t ty, size_t esz, void *out, const void *p, const void *x,
                            int T, int HS, int n, int L) {
    for (int i0 = 0; i0 < T; i0 += L)
        MO_TRY(am_gemm_px_rows(h, ty, esz, out, p, x, T, HS, n, i0, T - i0 > L ? i0 + L : T));
    return MO_OK;
}
static mo_status am_gemm_pTx(cublasHandle_t h, cudaDataType_t ty, size_t esz, void *out, const void *p, const void *x,
                             int T, int HS, int n, int L) {
    for (int j0 = 0; j0 < T; j0 += L)
        MO_TRY(am_gemm_pTx_rows(h, ty, esz, out, p, x, T, HS, n, j0, T - j0 > L ? j0 + L : T));
    return MO_OK;
}

template <typename E>
static mo_status am_forward(mo_ctx *c, cudaDataType_t ty, E *out, E *att, const E *qkv, E *scratch, int B, int T,
                            int C, int NH) {
    cudaStream_t s = (cudaStream_t)c->stream;
    cublasHandle_t h = (cublasHandle_t)c->cublas;
    MO_TRY(am_cublas_setup(c));
    const int HS = C / NH, BH = B * NH;
    const size_t n = (size_t)B * T * C;
    const int L = mo_attn_chunk_rows(c, T, 2, B * NH);
    const size_t esz = sizeof(E);
    E *q = scratch, *k = q + n, *v = k + n;
    am_permute_kernel<E><<<am_blocks(n, AM_THREADS), AM_THREADS, 0, s>>>(q, k, v, qkv, n, T, NH, HS);
    CUDA_CHECK_LAUNCH();
    MO_TRY(am_gemm_xyT(h, ty, esz, att, q, k, 1.0f / sqrtf((float)HS), T, HS, BH, L));
    const int rows = BH * T;
    am_softmax_forward_kernel<E><<<am_blocks((size_t)rows, AM_ROW_WARPS), AM_ROW_WARPS * 32, 0, s>>>(att, rows, T);
    CUDA_CHECK_LAUNCH();
    E *y = q;
    MO_TRY(am_gemm_px(h, ty, esz, y, att, v, T, HS, BH, L));
    am_unpermute_kernel<E><<<am_blocks(n, AM_THREADS), AM_THREADS, 0, s>>>(out, y, n, T, NH, HS);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

template <typename E>
static mo_status am_backward(mo_ctx *c, cudaDataType_t ty, E *dqkv, const E *dout, const E *qkv, const E *att,
                             E *scratch, int B, int T, int C, int NH) {
    cudaStream_t s = (cudaStream_t)c->stream;
    cublasHandle_t h = (cublasHandle_t)c->cublas;
    MO_TRY(am_cublas_setup(c));
    const int HS = C / NH, BH = B * NH;
    const size_t n = (size_t)B * T * C;
    E *q = scratch, *k = q + n, *v = k + n, *dq = v + n, *dk = dq + n, *dv = dk + n;
    E *datt = scratch + attention_mixed_datt_offset(B, T, C);
    const float scale = 1.0f / sqrtf((float)HS);
    const int L = mo_attn_chunk_rows(c, T, 2, B * NH);
    const size_t esz = sizeof(E);
    am_permute_kernel<E><<<am_blocks(n, AM_THREADS), AM_THREADS, 0, s>>>(q, k, v, qkv, n, T, NH, HS);
    CUDA_CHECK_LAUNCH();
    E *dy = dq; // dout per head, in dq's slot until dq is computed
    am_unpermute_backward_kernel<E><<<am_blocks(n, AM_THREADS), AM_THREADS, 0, s>>>(dy, dout, n, T, NH, HS);
    CUDA_CHECK_LAUNCH();
    MO_TRY(am_gemm_xyT(h, ty, esz, datt, dy, v, 1.0f, T, HS, BH, L)); // datt = dy @ v^T (causal part)
    MO_TRY(am_gemm_pTx(h, ty, esz, dv, att, dy, T, HS, BH, L));       // dv = att^T @ dy
    const int rows = BH * T;
    am_softmax_backward_kernel<E><<<am_blocks((size_t)rows, AM_ROW_WARPS), AM_ROW_WARPS * 32, 0, s>>>(datt, att, scale,
                                                                                                     rows, T, L);
    CUDA_CHECK_LAUNCH();
    MO_TRY(am_gemm_px(h, ty, esz, dq, datt, k, T, HS, BH, L));  // dq = dpreatt @ k (dy no longer needed)
    MO_TRY(am_gemm_pTx(h, ty, esz, dk, datt, q, T, HS, BH, L)); // dk = dpreatt^T @ q
    am_permute_backward_kernel<E><<<am_blocks(n, AM_THREADS), AM_THREADS, 0, s>>>(dqkv, dq, dk, dv, n, T, NH, HS);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

mo_status attention_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, void *att, const void *qkv,
                                       void *scratch, int B, int T, int C, int NH) {
    if (dt == MO_BF16)
        return am_forward<__nv_bfloat16>(c, CUDA_R_16BF, (__nv_bfloat16 *)out, (__nv_bfloat16 *)att,
                                         (const __nv_bfloat16 *)qkv, (__nv_bfloat16 *)scratch, B, T, C, NH);
    return am_forward<__half>(c, CUDA_R_16F, (__half *)out, (__half *)att, (const __half *)qkv, (__half *)scratch, B,
                              T, C, NH);
}

mo_status attention_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout, const void *qkv,
                                        const void *att, void *scratch, int B, int T, int C, int NH) {
    if (dt == MO_BF16)
        return am_backward<__nv_bfloat16>(c, CUDA_R_16BF, (__nv_bfloat16 *)dqkv, (const __nv_bfloat16 *)dout,
                                          (const __nv_bfloat16 *)qkv, (const __nv_bfloat16 *)att,
                                          (__nv_bfloat16 *)scratch, B, T, C, NH);
    return am_backward<__half>(c, CUDA_R_16F, (__half *)dqkv, (const __half *)dout, (const __half *)qkv,
                               (const __half *)att, (__half *)scratch, B, T, C, NH);
}
