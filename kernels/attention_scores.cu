// The fp32 (no TF32) score GEMM of the materialized attention: S = alpha X Y^T for every head, over the
// 128 x 128 tiles on and below the diagonal, in one launch. Why not cuBLAS: with HS = 64 the product has
// K = 64, and on the H200 cuBLAS ran the chunked score and datt GEMMs at about 26 TFLOP/s (64x64 and
// 128x64 SIMT tiles, a launch per chunk; ncu at 05c90eb), against about 36 for the att @ v kinds and
// 45-53 for the model's linear layers. With K = 64 a tile's whole X and Y panels fit in shared memory,
// so a CTA loads both once, runs 64 rank-1 updates of its 128 x 128 tile from registers and stores it.
// Measured on the H200 (36064f8, ncu): 5.13 ms a step for the 24 calls (about 34 TFLOP/s), against
// about 7.4 ms for cuBLAS's chunked GEMMs; the fp32 step 152.2 ms against 154.6 with cuBLAS scores
// (docs/perf-notes.md, fourth pass). The CPU reference is attention_scores_cpu (attention.c).
//
// Shapes: X, Y rows of HS = 64 floats, head (b, h) at X + b * xsb + h * xsh, row stride ldx (in place in
// qkv (B, T, 3C): xsb T*3C, xsh HS, ldx 3C); S (B, NH, T, T) row-major. Tile (bi, bj), bj <= bi, computes
// S[i][j] for i in [128 bi, 128 bi + 128), j in [128 bj, 128 bj + 128) (cut at T): every element with
// j <= i, and in the diagonal tiles the scores above the diagonal too (the softmax ignores them and
// writes zeros there). Tiles above the diagonal are not written.
// Each S[i][j] is one thread's sequential sum over d = 0..63 in fp32 FMAs: deterministic.
//
// The same kernel computes the backward's dpreatt (attention_dpreatt_cuda): the datt tile dout v^T in
// registers, the softmax backward applied in the epilogue with att and D = rowdot(dout, out) (read from
// memory), so datt is never stored and read back by a separate softmax-backward pass (in fp32 at B 8,
// T 1024 that pass moves about 0.65 GB a layer). Measured on the H200 (61a57418a7be): a layer's backward
// 0.943 ms against 1.044 with the pass apart, the fp32 step 149.3 ms against 150.5 (MEMOPT_ATTN_DPRE=0).
// CPU references: attention_dpreatt_cpu and attention_rowdot_cpu (attention.c).
#include <cuda_runtime.h>
#include "attention.h"
#include "cuda_check.h"

#define AS_TILE ATTENTION_SCORES_TILE
#define AS_HS ATTENTION_SCORES_HS
#define AS_THREADS 256 // 16 x 16 threads, each an 8 x 8 block of the tile
#define AS_SMEM_BYTES (2 * AS_HS * AS_TILE * (int)sizeof(float)) // X and Y panels, 64 KiB

// The panels are stored transposed, d-major (Xs[d][r]), so a thread's 4 consecutive rows at one d are
// one 16-byte load. Rows are swizzled in groups of 4 (XOR of the group with (d / 4) % 8): the loads
// that transpose a row's 64 values into 64 d-rows then hit 2 banks per 16 lanes instead of 1, and
// the float4 reads stay aligned and conflict-free.
static __device__ __forceinline__ int as_idx(int d, int r) {
    return d * AS_TILE + ((((r >> 2) ^ ((d >> 2) & 7)) << 2) | (r & 3));
}

// Loads rows [r0, r0 + 128) of a head's (T, 64) panel (zeros past T) into P transposed.
static __device__ __forceinline__ void as_load_panel(float *P, const float *src, int ld, int r0, int T) {
#pragma unroll
    for (int it = 0; it < AS_TILE * AS_HS / 4 / AS_THREADS; it++) { // 8 float4 per thread
        const int f = it * AS_THREADS + threadIdx.x;
        const int r = f >> 4, d = (f & 15) << 2; // 16 lanes read one row's 256 bytes
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r0 + r < T) v = *reinterpret_cast<const float4 *>(src + (size_t)(r0 + r) * ld + d);
        P[as_idx(d + 0, r)] = v.x;
        P[as_idx(d + 1, r)] = v.y;
        P[as_idx(d + 2, r)] = v.z;
        P[as_idx(d + 3, r)] = v.w;
    }
}

// The dpreatt epilogue's inputs (attention_dpreatt_cuda); unused by the plain scores.
typedef struct as_dpre {
    const float *P, *D;
    float scale;
    int L;
} as_dpre;

// grid (tiles on and below the diagonal, B * NH), block AS_THREADS, dynamic smem AS_SMEM_BYTES.
// DPRE 0: S = alpha X Y^T. DPRE 1: S = dP, the softmax backward of g = alpha X Y^T (attention.h).
template <int DPRE>
__global__ void __launch_bounds__(AS_THREADS, 2)
    attention_scores_kernel(float *__restrict__ S, const float *__restrict__ X, long long xsb, long long xsh, int ldx,
                            const float *__restrict__ Y, long long ysb, long long ysh, int ldy, float alpha, int NH,
                            int T, as_dpre dp) {
    extern __shared__ float4 as_smem4[];
    float *Xs = reinterpret_cast<float *>(as_smem4), *Ys = Xs + AS_HS * AS_TILE;
    // tile index -> (bi, bj) with bj <= bi, row by row: t = bi (bi + 1) / 2 + bj
    const int t = blockIdx.x;
    int bi = (int)((sqrtf(8.0f * t + 1.0f) - 1.0f) * 0.5f);
    while (bi * (bi + 1) / 2 > t) bi--;
    while ((bi + 1) * (bi + 2) / 2 <= t) bi++;
    const int bj = t - bi * (bi + 1) / 2;
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int i0 = bi * AS_TILE, j0 = bj * AS_TILE;
    if (DPRE) {
        // the epilogue's P tile toward L2 while the panels load and the FMAs run: each of the tile's
        // 128-byte lines once (128 rows x 4 lines, 2 per thread)
        for (int f = threadIdx.x; f < AS_TILE * 4; f += AS_THREADS) {
            const int r = i0 + (f >> 2), col = j0 + (f & 3) * 32;
            if (r < T && col < T)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(dp.P + ((size_t)blockIdx.y * T + r) * T + col));
        }
    }
    as_load_panel(Xs, X + b * xsb + h * xsh, ldx, i0, T);
    as_load_panel(Ys, Y + b * ysb + h * ysh, ldy, j0, T);
    __syncthreads();

    // thread (ty, tx): rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, the same for columns with tx
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < AS_HS; d++) {
        const int sw = (d >> 2) & 7;
        const float *xr = Xs + d * AS_TILE, *yr = Ys + d * AS_TILE;
        const float4 a0 = *reinterpret_cast<const float4 *>(xr + ((ty ^ sw) << 2));
        const float4 a1 = *reinterpret_cast<const float4 *>(xr + (((ty + 16) ^ sw) << 2));
        const float4 b0 = *reinterpret_cast<const float4 *>(yr + ((tx ^ sw) << 2));
        const float4 b1 = *reinterpret_cast<const float4 *>(yr + (((tx + 16) ^ sw) << 2));
        const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
    }

    float *Sh = S + (size_t)blockIdx.y * T * T;
    // the epilogue in two halves of 4 rows: the dpreatt inputs of 4 rows (8 float4 of P, 4 of D) are
    // loaded before any of them is used, so their latency is paid twice a tile, not once per row
#pragma unroll
    for (int i4 = 0; i4 < 8; i4 += 4) {
        float4 pv[4][2];
        float dv[4];
        if (DPRE) {
#pragma unroll
            for (int ii = 0; ii < 4; ii++) {
                const int row = i0 + i4 * 16 + ty * 4 + ii; // i4 0: rows ty*4 + ii; 4: 64 + ty*4 + ii
                dv[ii] = 0.0f;
                pv[ii][0] = pv[ii][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (row >= T) continue;
                dv[ii] = __ldg(dp.D + (size_t)blockIdx.y * T + row);
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int col = j0 + half * 64 + tx * 4;
                    if (col < T)
                        pv[ii][half] =
                            __ldg(reinterpret_cast<const float4 *>(dp.P + ((size_t)blockIdx.y * T + row) * T + col));
                }
            }
        }
#pragma unroll
        for (int ii = 0; ii < 4; ii++) {
            const int i = i4 + ii, row = i0 + i4 * 16 + ty * 4 + ii;
            if (row >= T) continue;
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int col = j0 + half * 64 + tx * 4; // T % 4 == 0: a group of 4 is wholly inside or out
                if (col >= T) continue;
                float4 v = make_float4(alpha * acc[i][half * 4 + 0], alpha * acc[i][half * 4 + 1],
                                       alpha * acc[i][half * 4 + 2], alpha * acc[i][half * 4 + 3]);
                if (DPRE) {
                    // dP = scale * P * (g - D) on the causal part, exact zeros above it
                    const float4 p = pv[ii][half];
                    const float d = dv[ii];
                    v.x = col + 0 <= row ? dp.scale * p.x * (v.x - d) : 0.0f;
                    v.y = col + 1 <= row ? dp.scale * p.y * (v.y - d) : 0.0f;
                    v.z = col + 2 <= row ? dp.scale * p.z * (v.z - d) : 0.0f;
                    v.w = col + 3 <= row ? dp.scale * p.w * (v.w - d) : 0.0f;
                }
                *reinterpret_cast<float4 *>(Sh + (size_t)row * T + col) = v;
            }
        }
    }
    // dpreatt: a diagonal tile also clears its rows past the tile up to the end of their chunk, which
    // the dq / dk GEMMs read (attention_dpreatt_zero_end). 32 threads a row, 8 rows at a time, 16-byte
    // stores where the group of 4 is wholly before the end. Any L > 0: a chunk shorter than the tile can
    // still cross into the next one (L 96: rows 96..127 read up to column 191).
    if (DPRE && bi == bj && dp.L > 0) {
        const int c0 = j0 + AS_TILE, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
        for (int r = w; r < AS_TILE && i0 + r < T; r += AS_THREADS / 32) {
            const int end = attention_dpreatt_zero_end(i0 + r, T, dp.L);
            float *srow = Sh + (size_t)(i0 + r) * T;
            for (int col = c0 + lane * 4; col < end; col += 128) {
                if (col + 4 <= end) *reinterpret_cast<float4 *>(srow + col) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                else
                    for (int q = col; q < end; q++) srow[q] = 0.0f;
            }
        }
    }
}

// One launch of the tile kernel (shapes checked by the callers).
template <int DPRE>
static mo_status as_launch(mo_ctx *c, float *S, const float *X, long long xsb, long long xsh, int ldx, const float *Y,
                           long long ysb, long long ysh, int ldy, float alpha, int B, int NH, int T, as_dpre dp) {
    // over 48 KiB of dynamic shared memory is opt-in, per function and device: set on every call (cheap,
    // and right for whichever device this thread's context uses)
    CUDA_CHECK(cudaFuncSetAttribute(attention_scores_kernel<DPRE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    AS_SMEM_BYTES));
    const int nb = (T + AS_TILE - 1) / AS_TILE;
    const dim3 grid((unsigned)(nb * (nb + 1) / 2), (unsigned)(B * NH));
    attention_scores_kernel<DPRE><<<grid, AS_THREADS, AS_SMEM_BYTES, (cudaStream_t)c->stream>>>(
        S, X, xsb, xsh, ldx, Y, ysb, ysh, ldy, alpha, NH, T, dp);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

#define AS_REFUSE(fn)                                                                                            \
    MO_FAIL(MO_ERR_INVALID, fn ": needs HS 64 (got %d), T, ldx, ldy multiples of 4 (got %d, %d, %d), 16-byte "  \
                            "aligned pointers and B*NH <= 65535 (got %d)",                                      \
            HS, T, ldx, ldy, B * NH)

mo_status attention_scores_cuda(mo_ctx *c, float *S, const float *X, long long xsb, long long xsh, int ldx,
                                const float *Y, long long ysb, long long ysh, int ldy, float alpha, int B, int NH,
                                int T, int HS) {
    if (!attention_scores_cuda_supported(B * NH, T, HS, ldx, ldy, S, X, Y)) return AS_REFUSE("attention_scores_cuda");
    const as_dpre none = {NULL, NULL, 0.0f, 0};
    return as_launch<0>(c, S, X, xsb, xsh, ldx, Y, ysb, ysh, ldy, alpha, B, NH, T, none);
}

mo_status attention_dpreatt_cuda(mo_ctx *c, float *dP, const float *X, long long xsb, long long xsh, int ldx,
                                 const float *Y, long long ysb, long long ysh, int ldy, float alpha, const float *P,
                                 const float *D, float scale, int L, int B, int NH, int T, int HS) {
    if (!attention_dpreatt_cuda_supported(B * NH, T, HS, ldx, ldy, dP, X, Y, P, D))
        return AS_REFUSE("attention_dpreatt_cuda");
    const as_dpre dp = {P, D, scale, L};
    return as_launch<1>(c, dP, X, xsb, xsh, ldx, Y, ysb, ysh, ldy, alpha, B, NH, T, dp);
}

// ---- D = rowdot(X, Y) per head: one warp a row (b, h, t), lanes over the HS columns ----
__global__ void attention_rowdot_kernel(float *__restrict__ D, const float *__restrict__ X, long long xsb,
                                        long long xsh, int ldx, const float *__restrict__ Y, long long ysb,
                                        long long ysh, int ldy, int NH, int T, int HS, int rows) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int t = row % T, bh = row / T, b = bh / NH, h = bh % NH;
    const float *x = X + b * xsb + h * xsh + (size_t)t * ldx, *y = Y + b * ysb + h * ysh + (size_t)t * ldy;
    float s = 0.0f;
    for (int d = lane; d < HS; d += 32) s = fmaf(x[d], y[d], s);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o); // every lane: the same bits
    if (lane == 0) D[row] = s;
}

mo_status attention_rowdot_cuda(mo_ctx *c, float *D, const float *X, long long xsb, long long xsh, int ldx,
                                const float *Y, long long ysb, long long ysh, int ldy, int B, int NH, int T, int HS) {
    if (B <= 0 || NH <= 0 || T <= 0 || HS <= 0 || (long long)B * NH * T > 0x7fffffffLL)
        return MO_FAIL(MO_ERR_INVALID, "attention_rowdot_cuda: bad shape B=%d NH=%d T=%d HS=%d", B, NH, T, HS);
    const int rows = B * NH * T, per_block = 8;
    attention_rowdot_kernel<<<(rows + per_block - 1) / per_block, 32 * per_block, 0, (cudaStream_t)c->stream>>>(
        D, X, xsb, xsh, ldx, Y, ysb, ysh, ldy, NH, T, HS, rows);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}
