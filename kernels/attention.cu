// Materialized causal attention on CUDA, as karpathy/llm.c train_gpt2_fp32.cu (attention_forward /
// attention_backward): permute qkv into per-head q, k, v, strided-batched cuBLAS GEMMs for the scores and
// for att @ v, a fused scale + causal mask + softmax kernel, and back. The kernels are written afresh:
// one warp per (T)-row with butterfly shuffles (fixed order: deterministic), any T (no T % 4 rule), and
// the masked upper triangle written as exact zeros so att is a complete tensor.
//
// Causal skipping: the queries are cut into chunks of L = mo_attn_chunk_rows(c, T) rows (ctx.h) and
// every batched GEMM runs once per chunk on the part the causal mask leaves nonzero:
//   scores / datt   query rows [i0, i1), keys [0, i1)            (att_gemm_xyT_rows)
//   y = P v, dq     query rows [i0, i1), sum over keys [0, i1)   (att_gemm_px_rows)
//   dv, dk          key rows [j0, j1), sum over queries [j0, T)  (att_gemm_pTx_rows)
// The terms left out are products with exact zeros of P (keys after the query), so each output is the
// same sum without zero terms, still one GEMM per output element (no accumulation across chunks) and
// so deterministic. The score GEMM leaves columns [i1, T) of a chunk's rows unwritten; the softmax
// reads only columns <= t < i1 and writes every column (zeros above the diagonal), so the stored att
// is complete, exactly as without chunks. The datt GEMM likewise; the softmax backward then writes
// dpreatt only up to the end of the row's chunk (zeros from t+1), which covers every element the dq
// and dk GEMMs read (dq: columns < i1 of rows in the chunk; dk: key chunk [j0, j1) of rows t >= j0,
// whose chunk ends at or after j1). L >= T (T <= 64 by default) is the unchunked computation.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <math.h>
#include <stdint.h>

#include "attention.h"
#include "cuda_check.h"

#define ATT_THREADS 256 // elementwise kernels
#define ATT_ROW_WARPS 8 // rows per block in the softmax kernels (one warp each)

static __device__ __forceinline__ float att_warp_sum(float v) {
    // xor butterfly: every lane ends with the same bits
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float att_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Index idx of a (B, NH, T, HS) tensor -> offset of the same element in a (B, T, NH*HS) row layout with
// row stride ld (3C for qkv, C for out).
static __device__ __forceinline__ size_t att_bthd_offset(size_t idx, int T, int NH, int HS, size_t ld) {
    const size_t d = idx % HS;
    const size_t t = (idx / HS) % T;
    const size_t h = (idx / ((size_t)HS * T)) % NH;
    const size_t b = idx / ((size_t)HS * T * NH);
    return (b * T + t) * ld + h * HS + d;
}

// qkv (B, T, 3C) -> q, k, v (B, NH, T, HS)
__global__ void att_permute_kernel(float *__restrict__ q, float *__restrict__ k, float *__restrict__ v,
                                   const float *__restrict__ qkv, size_t n, int T, int NH, int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const size_t C = (size_t)NH * HS;
    const size_t src = att_bthd_offset(idx, T, NH, HS, 3 * C);
    q[idx] = qkv[src];
    k[idx] = qkv[src + C];
    v[idx] = qkv[src + 2 * C];
}

// dq, dk, dv (B, NH, T, HS) -> dqkv (B, T, 3C), every element written
__global__ void att_permute_backward_kernel(float *__restrict__ dqkv, const float *__restrict__ dq,
                                            const float *__restrict__ dk, const float *__restrict__ dv, size_t n,
                                            int T, int NH, int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const size_t C = (size_t)NH * HS;
    const size_t dst = att_bthd_offset(idx, T, NH, HS, 3 * C);
    dqkv[dst] = dq[idx];
    dqkv[dst + C] = dk[idx];
    dqkv[dst + 2 * C] = dv[idx];
}

// y (B, NH, T, HS) -> out (B, T, C)
__global__ void att_unpermute_kernel(float *__restrict__ out, const float *__restrict__ y, size_t n, int T, int NH,
                                     int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    out[att_bthd_offset(idx, T, NH, HS, (size_t)NH * HS)] = y[idx];
}

// dout (B, T, C) -> dy (B, NH, T, HS)
__global__ void att_unpermute_backward_kernel(float *__restrict__ dy, const float *__restrict__ dout, size_t n,
                                              int T, int NH, int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    dy[idx] = dout[att_bthd_offset(idx, T, NH, HS, (size_t)NH * HS)];
}

// In place on att (rows = B*NH*T rows of length T; row r is query t = r % T): raw scores x in,
// softmax(scale * x) over columns 0..t out, exact zeros in columns t+1..T-1. One warp per row.
__global__ void att_softmax_forward_kernel(float *att, float scale, int rows, int T) {
    const int row = blockIdx.x * ATT_ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return; // whole warps leave together
    const int t = row % T;
    float *x = att + (size_t)row * T;
    float mx = -INFINITY;
    for (int i = lane; i <= t; i += 32) mx = fmaxf(mx, x[i]);
    mx = att_warp_max(mx); // finite: column 0 is always unmasked
    float sum = 0.0f;
    for (int i = lane; i <= t; i += 32) sum += expf(scale * (x[i] - mx));
    sum = att_warp_sum(sum);
    const float inv = 1.0f / sum;
    // each lane rewrites only the elements it read
    for (int i = lane; i < T; i += 32) x[i] = i <= t ? expf(scale * (x[i] - mx)) * inv : 0.0f;
}

// In place on datt (same rows as above): dpreatt = scale * att * (datt - sum_j att_j datt_j) on the
// causal part, exact zeros above it up to the end of the row's query chunk (chunk rows L): the dq and
// dk GEMMs that follow read no further (see the top of this file); datt is scratch.
__global__ void att_softmax_backward_kernel(float *datt, const float *__restrict__ att, float scale, int rows,
                                            int T, int L) {
    const int row = blockIdx.x * ATT_ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int t = row % T;
    const int end = (t / L + 1) * L < T ? (t / L + 1) * L : T;
    const float *a = att + (size_t)row * T;
    float *g = datt + (size_t)row * T;
    float s = 0.0f;
    for (int i = lane; i <= t; i += 32) s += a[i] * g[i];
    s = att_warp_sum(s);
    for (int i = lane; i < end; i += 32) g[i] = i <= t ? scale * a[i] * (g[i] - s) : 0.0f;
}

static unsigned att_blocks(size_t n, unsigned per_block) { return (unsigned)((n + per_block - 1) / per_block); }

// c->cublas is shared: set what these GEMMs rely on, every call (TF32 only when c->tf32).
static mo_status att_cublas_setup(mo_ctx *c) {
    cublasHandle_t h = (cublasHandle_t)c->cublas;
    CUBLAS_CHECK(cublasSetMathMode(h, c->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    return MO_OK;
}

// Batched GEMMs over the B*NH heads, every matrix column-major with the row-major (T, HS) / (T, T) data
// seen transposed (so each call computes the transpose of the row-major product in its comment). A
// row-major (T, T) matrix P is the column-major (T, T) matrix P^T with ld T: element (col t2, row t) at
// t * T + t2; a row-major (T, HS) matrix is column-major (HS, T) with ld HS. Strides are those of whole
// heads, so the sub-matrix of every head starts at the same offset from its head.
//
// S[t][t2] = X[t] . Y[t2] for query rows t in [i0, i1), keys t2 in [0, i1): the column-major
// (i1, i1 - i0) block of S^T starting at column i0 (offset i0 * T), = op_T(Y^T (HS, i1)) @ X^T (HS, rows).
static mo_status att_gemm_xyT_rows(cublasHandle_t h, float *out, const float *x, const float *y, int T, int HS, int n,
                                   int i0, int i1) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, i1, i1 - i0, HS, &one, y, HS,
                                           (long long)T * HS, x + (size_t)i0 * HS, HS, (long long)T * HS, &zero,
                                           out + (size_t)i0 * T, T, (long long)T * T, n));
    return MO_OK;
}
// out[t] = sum_{t2 < i1} P[t][t2] X[t2] for rows t in [i0, i1) (the keys t2 >= i1 > t have P = 0):
// out^T (HS, rows) = X^T (HS, i1) @ P^T block (i1, rows) starting at column i0 of P^T (offset i0 * T).
static mo_status att_gemm_px_rows(cublasHandle_t h, float *out, const float *p, const float *x, int T, int HS, int n,
                                  int i0, int i1) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, HS, i1 - i0, i1, &one, x, HS,
                                           (long long)T * HS, p + (size_t)i0 * T, T, (long long)T * T, &zero,
                                           out + (size_t)i0 * HS, HS, (long long)T * HS, n));
    return MO_OK;
}
// out[t2] = sum_{t >= j0} P[t][t2] X[t] for rows t2 in [j0, j1) (P[t][t2] = 0 for t < t2, so t < j0
// adds nothing): out^T (HS, cols) = X^T (HS, T - j0) from row j0 @ op_T(B), B the column-major
// (j1 - j0, T - j0) block of P^T at (row j0, column j0), offset j0 * T + j0: B(a, b) = P[j0 + b][j0 + a].
static mo_status att_gemm_pTx_rows(cublasHandle_t h, float *out, const float *p, const float *x, int T, int HS, int n,
                                   int j0, int j1) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, HS, j1 - j0, T - j0, &one,
                                           x + (size_t)j0 * HS, HS, (long long)T * HS, p + (size_t)j0 * T + j0, T,
                                           (long long)T * T, &zero, out + (size_t)j0 * HS, HS, (long long)T * HS, n));
    return MO_OK;
}

// The per-chunk loops (chunk rows L; the last chunk may be shorter). With L >= T each is the single
// full-size GEMM of the unchunked computation.
static mo_status att_gemm_xyT(cublasHandle_t h, float *out, const float *x, const float *y, int T, int HS, int n,
                              int L) {
    for (int i0 = 0; i0 < T; i0 += L) MO_TRY(att_gemm_xyT_rows(h, out, x, y, T, HS, n, i0, T - i0 > L ? i0 + L : T));
    return MO_OK;
}
static mo_status att_gemm_px(cublasHandle_t h, float *out, const float *p, const float *x, int T, int HS, int n,
                             int L) {
    for (int i0 = 0; i0 < T; i0 += L) MO_TRY(att_gemm_px_rows(h, out, p, x, T, HS, n, i0, T - i0 > L ? i0 + L : T));
    return MO_OK;
}
static mo_status att_gemm_pTx(cublasHandle_t h, float *out, const float *p, const float *x, int T, int HS, int n,
                              int L) {
    for (int j0 = 0; j0 < T; j0 += L) MO_TRY(att_gemm_pTx_rows(h, out, p, x, T, HS, n, j0, T - j0 > L ? j0 + L : T));
    return MO_OK;
}

mo_status attention_forward_cuda(mo_ctx *c, float *out, float *att, const float *qkv, void *scratch, int B,
                                 int T, int C, int NH) {
    cudaStream_t s = (cudaStream_t)c->stream;
    cublasHandle_t h = (cublasHandle_t)c->cublas;
    MO_TRY(att_cublas_setup(c));
    const int HS = C / NH, BH = B * NH;
    const size_t n = (size_t)B * T * C;
    float *q = (float *)scratch, *k = q + n, *v = k + n; // (B, NH, T, HS) each
    const float scale = 1.0f / sqrtf((float)HS);
    const int L = mo_attn_chunk_rows(c, T, 4, B * NH);

    att_permute_kernel<<<att_blocks(n, ATT_THREADS), ATT_THREADS, 0, s>>>(q, k, v, qkv, n, T, NH, HS);
    CUDA_CHECK_LAUNCH();
    // raw scores q k^T (B, NH, T, T) into att (the causal part of each chunk), then softmax in place
    MO_TRY(att_gemm_xyT(h, att, q, k, T, HS, BH, L));
    const int rows = BH * T;
    att_softmax_forward_kernel<<<att_blocks((size_t)rows, ATT_ROW_WARPS), ATT_ROW_WARPS * 32, 0, s>>>(att, scale,
                                                                                                     rows, T);
    CUDA_CHECK_LAUNCH();
    // y = att @ v (B, NH, T, HS) into q's slot (q is no longer needed), then heads side by side
    float *y = q;
    MO_TRY(att_gemm_px(h, y, att, v, T, HS, BH, L));
    att_unpermute_kernel<<<att_blocks(n, ATT_THREADS), ATT_THREADS, 0, s>>>(out, y, n, T, NH, HS);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

mo_status attention_backward_cuda(mo_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                  const float *att, void *scratch, int B, int T, int C, int NH) {
    cudaStream_t s = (cudaStream_t)c->stream;
    cublasHandle_t h = (cublasHandle_t)c->cublas;
    MO_TRY(att_cublas_setup(c));
    const int HS = C / NH, BH = B * NH;
    const size_t n = (size_t)B * T * C;
    float *q = (float *)scratch, *k = q + n, *v = k + n;    // (B, NH, T, HS)
    float *dq = v + n, *dk = dq + n, *dv = dk + n;          // (B, NH, T, HS)
    float *datt = (float *)scratch + attention_backward_datt_offset(B, T, C); // (B, NH, T, T)
    const float scale = 1.0f / sqrtf((float)HS);
    const int L = mo_attn_chunk_rows(c, T, 4, B * NH);

    att_permute_kernel<<<att_blocks(n, ATT_THREADS), ATT_THREADS, 0, s>>>(q, k, v, qkv, n, T, NH, HS);
    CUDA_CHECK_LAUNCH();
    // dy (B, NH, T, HS) = dout per head, held in dq's slot until dq is computed
    float *dy = dq;
    att_unpermute_backward_kernel<<<att_blocks(n, ATT_THREADS), ATT_THREADS, 0, s>>>(dy, dout, n, T, NH, HS);
    CUDA_CHECK_LAUNCH();
    MO_TRY(att_gemm_xyT(h, datt, dy, v, T, HS, BH, L)); // datt = dy @ v^T (causal part of each chunk)
    MO_TRY(att_gemm_pTx(h, dv, att, dy, T, HS, BH, L)); // dv = att^T @ dy
    const int rows = BH * T;
    att_softmax_backward_kernel<<<att_blocks((size_t)rows, ATT_ROW_WARPS), ATT_ROW_WARPS * 32, 0, s>>>(
        datt, att, scale, rows, T, L); // datt -> dpreatt (scaled) in place
    CUDA_CHECK_LAUNCH();
    MO_TRY(att_gemm_px(h, dq, datt, k, T, HS, BH, L));  // dq = dpreatt @ k (overwrites dy, used above)
    MO_TRY(att_gemm_pTx(h, dk, datt, q, T, HS, BH, L)); // dk = dpreatt^T @ q
    att_permute_backward_kernel<<<att_blocks(n, ATT_THREADS), ATT_THREADS, 0, s>>>(dqkv, dq, dk, dv, n, T, NH, HS);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}
