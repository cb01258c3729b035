// Materialized causal attention on CUDA, one implementation for fp32, fp16 and bf16 (element type E),
// as karpathy/llm.c train_gpt2_fp32.cu (attention_forward / attention_backward): permute qkv into
// per-head q, k, v, strided-batched cuBLAS GEMMs for the scores and for att @ v, a fused causal mask +
// softmax kernel, and back. The CPU references are attention.c (fp32) and attention_mixed.c (16-bit).
//
// GEMMs: cublasGemmStridedBatchedEx, A/B/C of type E, fp32 accumulation and alpha/beta
// (CUBLAS_COMPUTE_32F; CUBLAS_COMPUTE_32F_FAST_TF32 for fp32 when c->tf32), math mode
// CUBLAS_DEFAULT_MATH with reduced-precision split-K reductions disallowed, set on every call
// (c->cublas is shared). The score GEMM applies alpha = 1/sqrt(HS), so the stored scores are the scaled
// ones (in 16 bits they stay far from fp16's range limit). Rounding points: attention_mixed.h.
//
// Row kernels (one warp per row of T, butterfly shuffles in a fixed order: deterministic; fp32 inside):
// with T % V == 0 and T <= 32 * V * 8, V = 16 / sizeof(E) elements per 16-byte access, a lane keeps its
// part of the row in registers, so the row is read once and written once (vector loads and stores);
// other T take the loop kernels, which read it again per pass. The masked upper triangle is written as
// exact zeros, so att is a complete tensor.
// Permutes: 16-byte vectors with 32-bit index arithmetic when HS % V == 0, the pointers 16-byte aligned
// and the element count below 2^31; element by element otherwise.
//
// Causal skipping: the queries are cut into chunks of L = mo_attn_chunk_rows(c, T) rows (ctx.h) and
// every batched GEMM runs once per chunk on the part the causal mask leaves nonzero:
//   scores / datt   query rows [i0, i1), keys [0, i1)            (am_gemm_xyT_rows)
//   y = P v, dq     query rows [i0, i1), sum over keys [0, i1)   (am_gemm_px_rows)
//   dv, dk          key rows [j0, j1), sum over queries [j0, T)  (am_gemm_pTx_rows)
// The terms left out are products with exact zeros of P (keys after the query), so each output is the
// same sum without zero terms, still one GEMM per output element (no accumulation across chunks) and
// so deterministic. The score GEMM leaves columns [i1, T) of a chunk's rows unwritten; the softmax
// reads only columns <= t < i1 and writes every column (zeros above the diagonal), so the stored att
// is complete, exactly as without chunks. The datt GEMM likewise; the softmax backward then writes
// dpreatt only up to the end of the row's chunk (zeros from t+1), which covers every element the dq
// and dk GEMMs read (dq: columns < i1 of rows in the chunk; dk: key chunk [j0, j1) of rows t >= j0,
// whose chunk ends at or after j1). L >= T (T <= 64 by default) is the unchunked computation.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attention.h"
#include "attention_mixed.h"
#include "cuda_check.h"
#include "lib_writes.h"

#define AM_THREADS 256
#define AM_ROW_WARPS 8 // rows per block in the softmax kernels (one warp each)
#define AM_ROW_MAX_IT 8 // register kernels: up to 8 vectors per lane (T <= 1024 fp32, 2048 16-bit)

static __device__ __forceinline__ float am_f(float v) { return v; }
static __device__ __forceinline__ float am_f(__nv_bfloat16 v) { return __bfloat162float(v); }
static __device__ __forceinline__ float am_f(__half v) { return __half2float(v); }
template <typename E> static __device__ __forceinline__ E am_e(float v);
template <> __device__ __forceinline__ float am_e<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 am_e<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half am_e<__half>(float v) { return __float2half_rn(v); }

// The cuBLAS type of E
template <typename E> struct am_cuda_type;
template <> struct am_cuda_type<float> { static constexpr cudaDataType_t value = CUDA_R_32F; };
template <> struct am_cuda_type<__nv_bfloat16> { static constexpr cudaDataType_t value = CUDA_R_16BF; };
template <> struct am_cuda_type<__half> { static constexpr cudaDataType_t value = CUDA_R_16F; };

// 16 bytes = V elements of E, to and from fp32 registers
template <typename E> struct am_vec { static constexpr int V = 16 / sizeof(E); };
template <typename E> static __device__ __forceinline__ void am_load16(const E *p, float *out) {
    const int4 raw = *reinterpret_cast<const int4 *>(p);
    const E *e = reinterpret_cast<const E *>(&raw);
#pragma unroll
    for (int j = 0; j < am_vec<E>::V; j++) out[j] = am_f(e[j]);
}
template <typename E> static __device__ __forceinline__ void am_store16(E *p, const float *in) {
    int4 raw;
    E *e = reinterpret_cast<E *>(&raw);
#pragma unroll
    for (int j = 0; j < am_vec<E>::V; j++) e[j] = am_e<E>(in[j]);
    *reinterpret_cast<int4 *>(p) = raw;
}

static __device__ __forceinline__ float am_warp_sum(float v) {
    // xor butterfly: every lane ends with the same bits
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float am_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// ---- permutes: qkv (B, T, 3C) <-> q, k, v (B, NH, T, HS); out (B, T, C) <-> y (B, NH, T, HS) ----
// dir 0: head-major <- row layout (gather); dir 1: row layout <- head-major (scatter). The row layout has
// row stride ld (3C for qkv, C for out); parts 3 (q, k, v at column offsets 0, C, 2C) or 1.

// Vector version: thread i moves the 16-byte vector i of the head-major tensors (nv = n / V of them).
template <typename E, int PARTS, int DIR>
__global__ void am_permute_vec_kernel(E *__restrict__ rowl, E *__restrict__ h0, E *__restrict__ h1,
                                      E *__restrict__ h2, unsigned nv, unsigned T, unsigned NH, unsigned HS) {
    constexpr unsigned V = am_vec<E>::V;
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nv) return;
    const unsigned hv = HS / V;               // vectors per head row
    const unsigned dv = i % hv;               // (b, h, t, dv) of the head-major vector
    const unsigned t = (i / hv) % T;
    const unsigned bh = i / (hv * T);
    const unsigned h = bh % NH, b = bh / NH;
    const size_t C = (size_t)NH * HS;
    const size_t r = ((size_t)b * T + t) * (PARTS * C) + (size_t)h * HS + (size_t)dv * V; // row-layout element
    const size_t hm = (size_t)i * V;                                                      // head-major element
    E *hp[3] = {h0, h1, h2};
#pragma unroll
    for (int p = 0; p < PARTS; p++) {
        int4 *dst = reinterpret_cast<int4 *>(DIR == 0 ? hp[p] + hm : rowl + r + p * C);
        const int4 *src = reinterpret_cast<const int4 *>(DIR == 0 ? rowl + r + p * C : hp[p] + hm);
        *dst = *src;
    }
}

// Element version (any HS, alignment or size), the same mapping one element per thread.
template <typename E, int PARTS, int DIR>
__global__ void am_permute_elem_kernel(E *__restrict__ rowl, E *__restrict__ h0, E *__restrict__ h1,
                                       E *__restrict__ h2, size_t n, int T, int NH, int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const size_t C = (size_t)NH * HS;
    const size_t d = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH;
    const size_t b = idx / ((size_t)HS * T * NH);
    const size_t r = (b * T + t) * (PARTS * C) + h * HS + d;
    E *hp[3] = {h0, h1, h2};
#pragma unroll
    for (int p = 0; p < PARTS; p++) {
        if (DIR == 0) hp[p][idx] = rowl[r + p * C];
        else rowl[r + p * C] = hp[p][idx];
    }
}

static unsigned am_blocks(size_t n, unsigned per_block) { return (unsigned)((n + per_block - 1) / per_block); }
static int am_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// n = B*T*C elements per head-major tensor; h1, h2 unused (NULL) when PARTS is 1.
template <typename E, int PARTS, int DIR>
static mo_status am_permute(cudaStream_t s, E *rowl, E *h0, E *h1, E *h2, size_t n, int T, int NH, int HS) {
    constexpr int V = am_vec<E>::V;
    const int vec = HS % V == 0 && n / V < (1u << 31) && am_aligned16(rowl) && am_aligned16(h0) &&
                    (PARTS == 1 || (am_aligned16(h1) && am_aligned16(h2)));
    if (vec) {
        const unsigned nv = (unsigned)(n / V);
        am_permute_vec_kernel<E, PARTS, DIR><<<am_blocks(nv, AM_THREADS), AM_THREADS, 0, s>>>(rowl, h0, h1, h2, nv, T,
                                                                                              NH, HS);
    } else {
        am_permute_elem_kernel<E, PARTS, DIR><<<am_blocks(n, AM_THREADS), AM_THREADS, 0, s>>>(rowl, h0, h1, h2, n, T,
                                                                                              NH, HS);
    }
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// ---- softmax over the causal part of each row ----
// In place on att (rows = B*NH*T rows of length T; row r is query t = r % T): scaled scores in,
// softmax over columns 0..t out, exact zeros in columns t+1..T-1.
// The register kernels load the vector that holds the diagonal whole (16 bytes, like every other
// vector at or before t) and use only its columns <= t. Its columns past t are inside the row and were
// written by the score GEMM whenever the chunk rows are a multiple of V (the default: multiples of 64;
// the fp32 score kernel writes its whole 128 x 128 diagonal tiles); with other MEMOPT_ATTN_CHUNK_ROWS
// they may be stale, and are still never used. Loading only columns <= t (0bf00c8's am_load_upto, then
// 52cc510's predicated form) cost more than it saved: the first form put the register arrays in local
// memory (H200 bf16 step 27.2 ms against 19.7), and the second still put a branch region around every
// vector and a wait after every element load, so a row's loads ran one after another instead of all in
// flight (ptxas: 27 wait groups instead of 1 in the bf16 forward at T 1024); the H100's GPT-2 124M step
// at 3837bf5 against 3ca7c23 (tools/ab_revisions.sh): bf16 materialized 24.4 against 22.8 ms, tf32 49.5
// against 48.6. compute-sanitizer's initcheck reports these loads either way: the score GEMM stores
// through TMA, which it does not see (results/h100-sanitize-3837bf5.log).
template <typename E, int IT>
__global__ void am_softmax_forward_reg_kernel(E *att, int rows, int T) {
    constexpr int V = am_vec<E>::V;
    const int row = blockIdx.x * AM_ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return; // whole warps leave together
    const int t = row % T;
    E *x = att + (size_t)row * T;
    float v[IT][V];
    float mx = -INFINITY;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int i0 = (it * 32 + lane) * V;
#pragma unroll
        for (int j = 0; j < V; j++) v[it][j] = 0.0f;
        if (i0 <= t) am_load16(x + i0, v[it]); // columns past t: loaded whole, never used (see above)
#pragma unroll
        for (int j = 0; j < V; j++)
            if (i0 + j <= t) mx = fmaxf(mx, v[it][j]);
    }
    mx = am_warp_max(mx); // finite: column 0 is always unmasked
    float sum = 0.0f;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int i0 = (it * 32 + lane) * V;
#pragma unroll
        for (int j = 0; j < V; j++) {
            const float e = i0 + j <= t ? expf(v[it][j] - mx) : 0.0f;
            v[it][j] = e;
            sum += e;
        }
    }
    sum = am_warp_sum(sum);
    const float inv = 1.0f / sum;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int i0 = (it * 32 + lane) * V;
        if (i0 >= T) break;
#pragma unroll
        for (int j = 0; j < V; j++) v[it][j] *= inv;
        am_store16(x + i0, v[it]);
    }
}

template <typename E>
__global__ void am_softmax_forward_loop_kernel(E *att, int rows, int T) {
    const int row = blockIdx.x * AM_ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int t = row % T;
    E *x = att + (size_t)row * T;
    float mx = -INFINITY;
    for (int i = lane; i <= t; i += 32) mx = fmaxf(mx, am_f(x[i]));
    mx = am_warp_max(mx);
    float sum = 0.0f;
    for (int i = lane; i <= t; i += 32) sum += expf(am_f(x[i]) - mx);
    sum = am_warp_sum(sum);
    const float inv = 1.0f / sum;
    // each lane rewrites only the elements it read
    for (int i = lane; i < T; i += 32) x[i] = am_e<E>(i <= t ? expf(am_f(x[i]) - mx) * inv : 0.0f);
}

// In place on datt (same rows): dpreatt = scale * att * (datt - sum_j att_j datt_j) on the causal part,
// exact zeros above it up to the end of the row's query chunk (chunk rows L): the dq and dk GEMMs that
// follow read no further (see the top of this file); datt is scratch.
template <typename E, int IT>
__global__ void am_softmax_backward_reg_kernel(E *datt, const E *__restrict__ att, float scale, int rows, int T,
                                               int L) {
    constexpr int V = am_vec<E>::V;
    const int row = blockIdx.x * AM_ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int t = row % T;
    const int end = (t / L + 1) * L < T ? (t / L + 1) * L : T;
    const E *a = att + (size_t)row * T;
    E *g = datt + (size_t)row * T;
    float av[IT][V], gv[IT][V];
    float s = 0.0f;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int i0 = (it * 32 + lane) * V;
#pragma unroll
        for (int j = 0; j < V; j++) av[it][j] = gv[it][j] = 0.0f;
        if (i0 <= t) {
            am_load16(a + i0, av[it]);
            am_load16(g + i0, gv[it]);
        }
#pragma unroll
        for (int j = 0; j < V; j++)
            if (i0 + j <= t) s += av[it][j] * gv[it][j];
    }
    s = am_warp_sum(s);
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int i0 = (it * 32 + lane) * V;
        if (i0 >= end) break;
#pragma unroll
        for (int j = 0; j < V; j++) gv[it][j] = i0 + j <= t ? scale * av[it][j] * (gv[it][j] - s) : 0.0f;
        am_store16(g + i0, gv[it]);
    }
}

template <typename E>
__global__ void am_softmax_backward_loop_kernel(E *datt, const E *__restrict__ att, float scale, int rows, int T,
                                                int L) {
    const int row = blockIdx.x * AM_ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int t = row % T;
    const int end = (t / L + 1) * L < T ? (t / L + 1) * L : T;
    const E *a = att + (size_t)row * T;
    E *g = datt + (size_t)row * T;
    float s = 0.0f;
    for (int i = lane; i <= t; i += 32) s += am_f(a[i]) * am_f(g[i]);
    s = am_warp_sum(s);
    for (int i = lane; i < end; i += 32) g[i] = am_e<E>(i <= t ? scale * am_f(a[i]) * (am_f(g[i]) - s) : 0.0f);
}

// Which kernel runs depends on T and on 16-byte alignment (the two kinds sum a row in different orders);
// the allocator aligns every buffer to at least 256 bytes, so a given shape always takes the same one.
// Vectors per lane the register kernels need for T (a power of two up to AM_ROW_MAX_IT), 0 when T
// takes the loop kernels.
template <typename E> static int am_row_it(int T, const void *p0, const void *p1) {
    constexpr int V = am_vec<E>::V;
    if (T % V != 0 || !am_aligned16(p0) || !am_aligned16(p1)) return 0;
    for (int it = 1; it <= AM_ROW_MAX_IT; it *= 2)
        if (T <= 32 * V * it) return it;
    return 0;
}

template <typename E> static mo_status am_softmax_forward(cudaStream_t s, E *att, int rows, int T) {
    const unsigned g = am_blocks((size_t)rows, AM_ROW_WARPS), b = AM_ROW_WARPS * 32;
    switch (am_row_it<E>(T, att, att)) {
    case 1: am_softmax_forward_reg_kernel<E, 1><<<g, b, 0, s>>>(att, rows, T); break;
    case 2: am_softmax_forward_reg_kernel<E, 2><<<g, b, 0, s>>>(att, rows, T); break;
    case 4: am_softmax_forward_reg_kernel<E, 4><<<g, b, 0, s>>>(att, rows, T); break;
    case 8: am_softmax_forward_reg_kernel<E, 8><<<g, b, 0, s>>>(att, rows, T); break;
    default: am_softmax_forward_loop_kernel<E><<<g, b, 0, s>>>(att, rows, T); break;
    }
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

template <typename E>
static mo_status am_softmax_backward(cudaStream_t s, E *datt, const E *att, float scale, int rows, int T, int L) {
    const unsigned g = am_blocks((size_t)rows, AM_ROW_WARPS), b = AM_ROW_WARPS * 32;
    switch (am_row_it<E>(T, att, datt)) {
    case 1: am_softmax_backward_reg_kernel<E, 1><<<g, b, 0, s>>>(datt, att, scale, rows, T, L); break;
    case 2: am_softmax_backward_reg_kernel<E, 2><<<g, b, 0, s>>>(datt, att, scale, rows, T, L); break;
    case 4: am_softmax_backward_reg_kernel<E, 4><<<g, b, 0, s>>>(datt, att, scale, rows, T, L); break;
    case 8: am_softmax_backward_reg_kernel<E, 8><<<g, b, 0, s>>>(datt, att, scale, rows, T, L); break;
    default: am_softmax_backward_loop_kernel<E><<<g, b, 0, s>>>(datt, att, scale, rows, T, L); break;
    }
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// ---- the batched GEMMs over the B*NH heads ----
// Every matrix column-major with the row-major (T, HS) / (T, T) data seen transposed (so each GEMM
// computes the transpose of the row-major product in its comment). A row-major (T, T) matrix P is the
// column-major (T, T) matrix P^T with ld T: element (col t2, row t) at t * T + t2; a row-major (T, HS)
// matrix with row stride ld is the column-major (HS, T) matrix with leading dimension ld.
// An operand (am_mat): head (b, h) starts at p + b * sb + h * sh elements, leading dimension ld:
//   head-major (B, NH, T, HS)      sb NH*T*HS, sh T*HS, ld HS   (the permuted q, k, v, dy, ... of "strided")
//   in place in qkv / dqkv (B, T, 3C)  sb T*3C, sh HS, ld 3C     (q at column 0, k at C, v at 2C)
//   in place in out / dout (B, T, C)   sb T*C,  sh HS, ld C
//   att / datt (B, NH, T, T)          sb NH*T*T, sh T*T, ld T
// The three GEMM kinds, per chunk of rows [r0, r1) (A, B, C in cuBLAS's terms; offsets in elements):
//   AM_XYT  S[t][t2] = alpha X[t] . Y[t2], queries t in [r0, r1), keys t2 in [0, r1): the column-major
//           (r1, r1 - r0) block of S^T at column r0 = op_T(Y^T (HS, r1)) @ X^T (HS, rows).
//           A = Y, B = X at row r0, C = S at column r0; m r1, n r1 - r0, k HS.
//   AM_PX   out[t] = sum_{t2 < r1} P[t][t2] X[t2], rows t in [r0, r1) (keys t2 >= r1 > t have P = 0):
//           out^T (HS, rows) = X^T (HS, r1) @ P^T block (r1, rows) at column r0.
//           A = X, B = P at column r0, C = out at row r0; m HS, n r1 - r0, k r1.
//   AM_PTX  out[t2] = sum_{t >= r0} P[t][t2] X[t] for rows t2 in [r0, r1) (P[t][t2] = 0 for t < t2):
//           out^T (HS, cols) = X^T (HS, T - r0) from row r0 @ op_T(Bm), Bm the column-major
//           (r1 - r0, T - r0) block of P^T at (row r0, column r0): Bm(a, b) = P[r0 + b][r0 + a].
//           A = X at row r0, B = P at (r0, r0), C = out at row r0; m HS, n r1 - r0, k T - r0.
// Each output element is one GEMM's dot product over one chunk's range, never accumulated across
// launches, so every form is deterministic. The forms (c->attn_gemm, ctx.h) differ only in how the
// problems reach cuBLAS:
//   strided  head-major operands (the permutes around), one cublasGemmStridedBatchedEx per chunk
//   batched  operands in place (no permutes), device arrays of per-problem pointers, which a small
//            kernel writes into the scratch the permuted copies would have used; one
//            cublasGemmBatchedEx per chunk
// (A third form, every chunk of a GEMM in one cublasGemmGroupedBatchedEx, was measured at 8ced659 and
// dropped: cuBLAS runs it with a 128x128 SIMT grouped kernel, and the fp32 step took 161.3 ms against
// 154.8 batched and 156.3 strided; bf16 21.6 against 20.0 and 20.6.)
typedef struct am_mat {
    char *p; // bytes
    long long sb, sh;
    int ld;
} am_mat;
enum { AM_XYT = 0, AM_PX = 1, AM_PTX = 2 };
typedef struct am_job {
    int kind;
    am_mat a, b, c;
    float alpha;
} am_job;
#define AM_MAX_JOBS 4    // GEMMs of one call (backward: 4)

typedef struct am_gemm {
    cublasHandle_t h;
    cudaDataType_t ty;
    cublasComputeType_t compute;
    size_t esz;
    int T, HS, NH, n; // n: batch (B * NH heads)
    int L, G;         // chunk rows, chunks
    int mode;         // MO_ATTN_GEMM_*
    void **pa, **pb, **pc; // batched: pointer arrays, job j chunk g head bh at (j * G + g) * n + bh
} am_gemm;

static __host__ __device__ __forceinline__ void am_offsets(int kind, int r0, int lda, int ldb, int ldc, long long *oa,
                                                           long long *ob, long long *oc) {
    *oa = kind == AM_PTX ? (long long)r0 * lda : 0;
    *ob = (long long)r0 * ldb + (kind == AM_PTX ? r0 : 0);
    *oc = (long long)r0 * ldc;
}

typedef struct am_ptr_args {
    am_job j[AM_MAX_JOBS];
    int njobs, G, L, NH, n;
    int esz;
    void **pa, **pb, **pc;
} am_ptr_args;

// One thread per (job, chunk, head): the three pointers of that problem.
__global__ void am_fill_ptrs_kernel(am_ptr_args a) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.njobs * a.G * a.n) return;
    const int bh = i % a.n, g = (i / a.n) % a.G, jn = i / (a.n * a.G);
    const int b = bh / a.NH, h = bh % a.NH;
    const am_job *jb = &a.j[jn];
    long long oa, ob, oc;
    am_offsets(jb->kind, g * a.L, jb->a.ld, jb->b.ld, jb->c.ld, &oa, &ob, &oc);
    a.pa[i] = jb->a.p + (b * jb->a.sb + h * jb->a.sh + oa) * a.esz;
    a.pb[i] = jb->b.p + (b * jb->b.sb + h * jb->b.sh + ob) * a.esz;
    a.pc[i] = jb->c.p + (b * jb->c.sb + h * jb->c.sh + oc) * a.esz;
}

// Bytes of pointer arrays njobs GEMMs need (batched)
static size_t am_ptr_bytes(const am_gemm *g, int njobs) { return (size_t)3 * njobs * g->G * g->n * sizeof(void *); }

static mo_status am_fill_ptrs(cudaStream_t s, am_gemm *g, const am_job *jobs, int njobs, void *room) {
    am_ptr_args a;
    memset(&a, 0, sizeof a);
    for (int j = 0; j < njobs; j++) a.j[j] = jobs[j];
    a.njobs = njobs;
    a.G = g->G;
    a.L = g->L;
    a.NH = g->NH;
    a.n = g->n;
    a.esz = (int)g->esz;
    const size_t np = (size_t)njobs * g->G * g->n;
    g->pa = (void **)room;
    g->pb = g->pa + np;
    g->pc = g->pb + np;
    a.pa = g->pa;
    a.pb = g->pb;
    a.pc = g->pc;
    am_fill_ptrs_kernel<<<am_blocks(np, AM_THREADS), AM_THREADS, 0, s>>>(a);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// The shape of chunk gi of a job: ops, m, n, k
static void am_shape(const am_gemm *g, int kind, int gi, cublasOperation_t *ta, cublasOperation_t *tb, int *m, int *n,
                     int *k) {
    const int r0 = gi * g->L, r1 = r0 + g->L < g->T ? r0 + g->L : g->T;
    *ta = kind == AM_XYT ? CUBLAS_OP_T : CUBLAS_OP_N;
    *tb = kind == AM_PTX ? CUBLAS_OP_T : CUBLAS_OP_N;
    *m = kind == AM_XYT ? r1 : g->HS;
    *n = r1 - r0;
    *k = kind == AM_XYT ? g->HS : kind == AM_PX ? r1 : g->T - r0;
}

// MEMOPT_MARK_LIB_WRITES (lib_writes.h): what chunk gi's GEMMs of job jb write, head by head: the
// column-major D (m, n) at ld c.ld; a score job's rows [r0, r1) whole (T each, ld T: the head's own rows),
// since the softmax loads the 16-byte vector that holds the diagonal and uses the columns up to it only
static mo_status am_mark(mo_ctx *c, const am_gemm *g, const am_job *jb, int gi) {
    cublasOperation_t ta, tb;
    int m, n, k;
    am_shape(g, jb->kind, gi, &ta, &tb, &m, &n, &k);
    long long oa, ob, oc;
    am_offsets(jb->kind, gi * g->L, jb->a.ld, jb->b.ld, jb->c.ld, &oa, &ob, &oc);
    const size_t pitch = (size_t)jb->c.ld * g->esz, width = jb->kind == AM_XYT ? pitch : (size_t)m * g->esz;
    for (int bh = 0; bh < g->n; bh++) {
        const long long at = g->mode == MO_ATTN_GEMM_STRIDED ? bh * jb->c.sh // cuBLAS's batch stride
                                                             : (bh / g->NH) * jb->c.sb + (bh % g->NH) * jb->c.sh;
        MO_TRY(mo_mark_lib_write(c, jb->c.p + (at + oc) * (long long)g->esz, pitch, width, (size_t)n));
    }
    return MO_OK;
}

// Job jn of the call (its pointer arrays start at (jn * G) * n).
static mo_status am_run(mo_ctx *c, const am_gemm *g, const am_job *jb, int jn) {
    const float zero = 0.0f;
    cublasOperation_t ta, tb;
    int m, n, k;
    // fp32 scores and datt (K = HS = 64): the suite's own kernel, every causal tile in one launch
    if (jb->kind == AM_XYT && g->ty == CUDA_R_32F && g->compute == CUBLAS_COMPUTE_32F && c->attn_own_scores != 0 &&
        attention_scores_cuda_supported(g->n, g->T, g->HS, jb->b.ld, jb->a.ld, jb->c.p, jb->b.p, jb->a.p))
        return attention_scores_cuda(c, (float *)jb->c.p, (const float *)jb->b.p, jb->b.sb, jb->b.sh, jb->b.ld,
                                     (const float *)jb->a.p, jb->a.sb, jb->a.sh, jb->a.ld, jb->alpha, g->n / g->NH,
                                     g->NH, g->T, g->HS);
    if (c->mark_lib_writes)
        for (int gi = 0; gi < g->G; gi++) MO_TRY(am_mark(c, g, jb, gi));
    if (g->mode == MO_ATTN_GEMM_STRIDED) {
        for (int gi = 0; gi < g->G; gi++) {
            am_shape(g, jb->kind, gi, &ta, &tb, &m, &n, &k);
            long long oa, ob, oc;
            am_offsets(jb->kind, gi * g->L, jb->a.ld, jb->b.ld, jb->c.ld, &oa, &ob, &oc);
            CUBLAS_CHECK(cublasGemmStridedBatchedEx(
                g->h, ta, tb, m, n, k, &jb->alpha, jb->a.p + oa * g->esz, g->ty, jb->a.ld, jb->a.sh,
                jb->b.p + ob * g->esz, g->ty, jb->b.ld, jb->b.sh, &zero, jb->c.p + oc * g->esz, g->ty, jb->c.ld,
                jb->c.sh, g->n, g->compute, CUBLAS_GEMM_DEFAULT));
        }
        return MO_OK;
    }
    void *const *pa = g->pa + (size_t)jn * g->G * g->n, *const *pb = g->pb + (size_t)jn * g->G * g->n;
    void *const *pc = g->pc + (size_t)jn * g->G * g->n;
    for (int gi = 0; gi < g->G; gi++) {
        am_shape(g, jb->kind, gi, &ta, &tb, &m, &n, &k);
        const size_t o = (size_t)gi * g->n;
        CUBLAS_CHECK(cublasGemmBatchedEx(g->h, ta, tb, m, n, k, &jb->alpha, (const void *const *)(pa + o), g->ty,
                                         jb->a.ld, (const void *const *)(pb + o), g->ty, jb->b.ld, &zero, pc + o,
                                         g->ty, jb->c.ld, g->n, g->compute, CUBLAS_GEMM_DEFAULT));
    }
    return MO_OK;
}

// c->cublas is shared: set what these GEMMs rely on, every call. The form falls back to strided when
// the scratch cannot hold the pointer arrays (tiny heads with many chunks).
template <typename E>
static mo_status am_setup(mo_ctx *c, am_gemm *g, int B, int T, int C, int NH, int njobs, size_t room_bytes) {
    g->h = (cublasHandle_t)c->cublas;
    CUBLAS_CHECK(cublasSetMathMode(g->h, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                        CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    CUBLAS_CHECK(cublasSetPointerMode(g->h, CUBLAS_POINTER_MODE_HOST));
    g->esz = sizeof(E);
    g->ty = am_cuda_type<E>::value;
    // TF32 tensor cores only for fp32 data and only when asked for
    g->compute = g->ty == CUDA_R_32F && c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    g->T = T;
    g->HS = C / NH;
    g->NH = NH;
    g->n = B * NH;
    g->L = mo_attn_chunk_rows(c, T, (int)sizeof(E), g->n);
    g->G = (T + g->L - 1) / g->L;
    g->mode = mo_attn_gemm_mode(c, (int)sizeof(E));
    if (g->mode != MO_ATTN_GEMM_STRIDED && am_ptr_bytes(g, njobs) > room_bytes) g->mode = MO_ATTN_GEMM_STRIDED;
    g->pa = g->pb = g->pc = NULL;
    return MO_OK;
}

static am_mat am_headmajor(void *p, int T, int NH, int HS) {
    am_mat m = {(char *)p, (long long)NH * T * HS, (long long)T * HS, HS};
    return m;
}
static am_mat am_rows(const void *p, size_t esz, int T, int HS, int ld, int col) { // in place, column offset col
    am_mat m = {(char *)p + (size_t)col * esz, (long long)T * ld, HS, ld};
    return m;
}
static am_mat am_scores(const void *p, int T, int NH) {
    am_mat m = {(char *)p, (long long)NH * T * T, (long long)T * T, T};
    return m;
}
static am_job am_mkjob(int kind, am_mat a, am_mat b, am_mat c, float alpha) {
    am_job j = {kind, a, b, c, alpha};
    return j;
}

template <typename E>
static mo_status am_forward(mo_ctx *c, E *out, E *att, const E *qkv, E *scratch, int B, int T, int C, int NH) {
    cudaStream_t s = (cudaStream_t)c->stream;
    const size_t n = (size_t)B * T * C;
    am_gemm g;
    MO_TRY(am_setup<E>(c, &g, B, T, C, NH, 2, 3 * n * sizeof(E)));
    const int HS = g.HS;
    const am_mat S = am_scores(att, T, NH);
    am_mat q, k, v, y;
    if (g.mode == MO_ATTN_GEMM_STRIDED) {
        E *qh = scratch, *kh = qh + n, *vh = kh + n; // (B, NH, T, HS) each
        MO_TRY((am_permute<E, 3, 0>(s, (E *)qkv, qh, kh, vh, n, T, NH, HS)));
        q = am_headmajor(qh, T, NH, HS);
        k = am_headmajor(kh, T, NH, HS);
        v = am_headmajor(vh, T, NH, HS);
        y = q; // att @ v lands in q's slot (q is no longer needed), then heads side by side
    } else {
        q = am_rows(qkv, sizeof(E), T, HS, 3 * C, 0);
        k = am_rows(qkv, sizeof(E), T, HS, 3 * C, C);
        v = am_rows(qkv, sizeof(E), T, HS, 3 * C, 2 * C);
        y = am_rows(out, sizeof(E), T, HS, C, 0);
    }
    // scaled scores q k^T / sqrt(HS) (B, NH, T, T) into att (the causal part of each chunk), softmax in
    // place, then y = att @ v
    const am_job jobs[2] = {am_mkjob(AM_XYT, k, q, S, 1.0f / sqrtf((float)HS)), am_mkjob(AM_PX, v, S, y, 1.0f)};
    if (g.mode != MO_ATTN_GEMM_STRIDED) MO_TRY(am_fill_ptrs(s, &g, jobs, 2, scratch));
    MO_TRY(am_run(c, &g, &jobs[0], 0));
    MO_TRY(am_softmax_forward<E>(s, att, B * NH * T, T));
    MO_TRY(am_run(c, &g, &jobs[1], 1));
    if (g.mode == MO_ATTN_GEMM_STRIDED) MO_TRY((am_permute<E, 1, 1>(s, out, (E *)y.p, NULL, NULL, n, T, NH, HS)));
    return MO_OK;
}

// out: the forward's output (fp32 only; NULL otherwise), see attention_backward_cuda
template <typename E>
static mo_status am_backward(mo_ctx *c, E *dqkv, const E *dout, const E *qkv, const E *out, const E *att, E *scratch,
                             int B, int T, int C, int NH) {
    cudaStream_t s = (cudaStream_t)c->stream;
    const size_t n = (size_t)B * T * C;
    // (B, NH, T, T) after the six head-major slots; the fp32 layout (attention_backward_datt_offset) is
    // the same 6*B*T*C elements
    E *datt = scratch + attention_mixed_datt_offset(B, T, C);
    am_gemm g;
    MO_TRY(am_setup<E>(c, &g, B, T, C, NH, 4, 6 * n * sizeof(E)));
    const int HS = g.HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const am_mat P = am_scores(att, T, NH), dP = am_scores(datt, T, NH);
    am_mat q, k, v, dy, dq, dk, dv;
    if (g.mode == MO_ATTN_GEMM_STRIDED) {
        E *qh = scratch, *kh = qh + n, *vh = kh + n, *dqh = vh + n, *dkh = dqh + n, *dvh = dkh + n;
        MO_TRY((am_permute<E, 3, 0>(s, (E *)qkv, qh, kh, vh, n, T, NH, HS)));
        MO_TRY((am_permute<E, 1, 0>(s, (E *)dout, dqh, NULL, NULL, n, T, NH, HS))); // dy in dq's slot until dq
        q = am_headmajor(qh, T, NH, HS);
        k = am_headmajor(kh, T, NH, HS);
        v = am_headmajor(vh, T, NH, HS);
        dy = dq = am_headmajor(dqh, T, NH, HS);
        dk = am_headmajor(dkh, T, NH, HS);
        dv = am_headmajor(dvh, T, NH, HS);
    } else {
        q = am_rows(qkv, sizeof(E), T, HS, 3 * C, 0);
        k = am_rows(qkv, sizeof(E), T, HS, 3 * C, C);
        v = am_rows(qkv, sizeof(E), T, HS, 3 * C, 2 * C);
        dy = am_rows(dout, sizeof(E), T, HS, C, 0);
        dq = am_rows(dqkv, sizeof(E), T, HS, 3 * C, 0);
        dk = am_rows(dqkv, sizeof(E), T, HS, 3 * C, C);
        dv = am_rows(dqkv, sizeof(E), T, HS, 3 * C, 2 * C);
    }
    const am_job jobs[4] = {
        am_mkjob(AM_XYT, v, dy, dP, 1.0f), // datt = dy @ v^T (causal part of each chunk)
        am_mkjob(AM_PTX, dy, P, dv, 1.0f), // dv = att^T @ dy
        am_mkjob(AM_PX, k, dP, dq, 1.0f),  // dq = dpreatt @ k (strided: overwrites dy, used above)
        am_mkjob(AM_PTX, q, dP, dk, 1.0f), // dk = dpreatt^T @ q
    };
    if (g.mode != MO_ATTN_GEMM_STRIDED) MO_TRY(am_fill_ptrs(s, &g, jobs, 4, scratch));
    // fp32 without TF32, given the forward's out: dpreatt straight from the datt kernel's epilogue, with
    // D = rowdot(dy, out) in the scratch's dv slot (free until the dv GEMM; the batched form's pointer
    // arrays sit at the scratch's start)
    const int fuse_dpre = sizeof(E) == 4 && out != NULL && g.compute == CUBLAS_COMPUTE_32F && c->attn_own_scores &&
                          c->attn_fuse_dpre &&
                          attention_dpreatt_cuda_supported(g.n, T, HS, dy.ld, v.ld, datt, dy.p, v.p, att,
                                                           scratch + 5 * n) &&
                          (g.mode == MO_ATTN_GEMM_STRIDED || am_ptr_bytes(&g, 4) <= 5 * n * sizeof(E));
    if (fuse_dpre) {
        float *D = (float *)(scratch + 5 * n); // (B, NH, T)
        const am_mat y = am_rows(out, sizeof(E), T, HS, C, 0);
        MO_TRY(attention_rowdot_cuda(c, D, (const float *)dy.p, dy.sb, dy.sh, dy.ld, (const float *)y.p, y.sb, y.sh,
                                     y.ld, B, NH, T, HS));
        MO_TRY(attention_dpreatt_cuda(c, (float *)datt, (const float *)dy.p, dy.sb, dy.sh, dy.ld, (const float *)v.p,
                                      v.sb, v.sh, v.ld, 1.0f, (const float *)att, D, scale, g.L, B, NH, T, HS));
        MO_TRY(am_run(c, &g, &jobs[1], 1));
    } else {
        MO_TRY(am_run(c, &g, &jobs[0], 0));
        MO_TRY(am_run(c, &g, &jobs[1], 1));
        MO_TRY(am_softmax_backward<E>(s, datt, att, scale, B * NH * T, T, g.L)); // datt -> dpreatt in place
    }
    MO_TRY(am_run(c, &g, &jobs[2], 2));
    MO_TRY(am_run(c, &g, &jobs[3], 3));
    if (g.mode == MO_ATTN_GEMM_STRIDED) MO_TRY((am_permute<E, 3, 1>(s, dqkv, (E *)dq.p, (E *)dk.p, (E *)dv.p, n, T, NH, HS)));
    return MO_OK;
}

mo_status attention_forward_cuda(mo_ctx *c, float *out, float *att, const float *qkv, void *scratch, int B, int T,
                                 int C, int NH) {
    return am_forward<float>(c, out, att, qkv, (float *)scratch, B, T, C, NH);
}

mo_status attention_backward_cuda(mo_ctx *c, float *dqkv, const float *dout, const float *qkv, const float *out,
                                  const float *att, void *scratch, int B, int T, int C, int NH) {
    return am_backward<float>(c, dqkv, dout, qkv, out, att, (float *)scratch, B, T, C, NH);
}

mo_status attention_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, void *att, const void *qkv, void *scratch,
                                       int B, int T, int C, int NH) {
    if (dt == MO_BF16)
        return am_forward<__nv_bfloat16>(c, (__nv_bfloat16 *)out, (__nv_bfloat16 *)att, (const __nv_bfloat16 *)qkv,
                                         (__nv_bfloat16 *)scratch, B, T, C, NH);
    return am_forward<__half>(c, (__half *)out, (__half *)att, (const __half *)qkv, (__half *)scratch, B, T, C, NH);
}

mo_status attention_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dqkv, const void *dout, const void *qkv,
                                        const void *att, void *scratch, int B, int T, int C, int NH) {
    if (dt == MO_BF16)
        return am_backward<__nv_bfloat16>(c, (__nv_bfloat16 *)dqkv, (const __nv_bfloat16 *)dout,
                                          (const __nv_bfloat16 *)qkv, NULL, (const __nv_bfloat16 *)att,
                                          (__nv_bfloat16 *)scratch, B, T, C, NH);
    return am_backward<__half>(c, (__half *)dqkv, (const __half *)dout, (const __half *)qkv, NULL, (const __half *)att,
                               (__half *)scratch, B, T, C, NH);
}
