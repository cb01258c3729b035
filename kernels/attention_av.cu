// The fp32 (no TF32) "probabilities times rows" GEMMs of the materialized attention, over the causal
// 128-row tiles, one launch each:
//   y  = att @ v,       dq = dpreatt @ k      (trans 0: out[r] = sum_k P[r][k] X[k], keys k <= tile end)
//   dv = att^T @ dy,    dk = dpreatt^T @ q    (trans 1: out[r] = sum_k P[k][r] X[k], queries k >= tile start)
// Why not cuBLAS: on the H200 cuBLAS ran them chunk by chunk with 64x64 SIMT tiles at about 36 TFLOP/s
// (ncu at 36064f8), each chunk's launch too small to fill the GPU. Here a CTA owns a 128 x 64 output
// tile (rows x HS) and runs the whole causal K range of its tile in steps of 32, double-buffered
// (the next step's copies, cp.async or register loads, are in flight while the current one computes), so each output is one
// thread's sequential fp32 sum in a fixed order: deterministic. The CPU reference is attention_av_cpu
// (attention.c).
//
// Shapes: P (B, NH, T, T) row-major; X and out (T, HS = 64) rows per head, head (b, h) at
// X + b * xsb + h * xsh, row stride ldx (in place in qkv / out / dqkv). Row tile [r0, r0 + 128):
//   trans 0 reads P[r][k] for rows r of the tile and k in [0, min(T, r0 + 128)),
//   trans 1 reads P[k][r] for k in [r0, T).
// Both read only tiles on and below the diagonal, where the caller guarantees exact zeros above the
// diagonal (the softmax forward writes them everywhere, the backward up to the end of each row's tile).
#include <cuda_runtime.h>
#include <stdint.h>

#include "attention.h"
#include "cuda_check.h"

#define AV_TILE ATTENTION_OWN_TILE
#define AV_HS 64
#define AV_BK 32
#define AV_THREADS 128 // 16 x 8 threads, each an 8 x 8 block of the 128 x 64 tile
#define AV_LDA (AV_TILE + 4) // As[k][r] row stride (16-byte aligned rows, conflict-free transposing stores)
#define AV_LDB (AV_HS + 4)   // Bs[k][d]
#define AV_STAGE_FLOATS (AV_BK * AV_LDA + AV_BK * AV_LDB)
#define AV_SMEM_BYTES (2 * AV_STAGE_FLOATS * (int)sizeof(float)) // two stages, 50 KiB

// 16 bytes global -> shared without registers (cp.async, Ampere and later); pred false writes zeros.
static __device__ __forceinline__ void av_cp16(float *dst, const float *src, bool pred) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
    const int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(src), "r"(n));
}
static __device__ __forceinline__ void av_cp_wait_all() {
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
}

// One step's operands: B (32 x 64 rows of X) and, with TRANS, A (32 rows of P, 128 columns each) are
// copied as they are with cp.async; without TRANS, A (128 rows of P, 32 columns each) goes through
// registers (8 float4 a thread) to be stored transposed.
typedef struct av_regs {
    float4 a[8];
} av_regs;

template <bool TRANS>
static __device__ __forceinline__ void av_issue(av_regs *g, float *As, float *Bs, const float *Ph, const float *Xh,
                                                int ldx, int T, int r0, int k0, int kend) {
    const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int it = 0; it < 8; it++) {
        const int f = it * AV_THREADS + threadIdx.x;
        if (!TRANS) {
            // A(r, k) = P[r0 + r][k0 + k]: lanes over 32 consecutive rows, 4 keys each (stored transposed)
            const int r = f % AV_TILE, k = (f / AV_TILE) * 4;
            g->a[it] = r0 + r < T && k0 + k < kend
                           ? *reinterpret_cast<const float4 *>(Ph + (size_t)(r0 + r) * T + k0 + k) : z;
        } else {
            // A(r, k) = P[k0 + k][r0 + r]: a P row segment is 4 consecutive r (stored as they are)
            const int k = f / (AV_TILE / 4), r = (f % (AV_TILE / 4)) * 4;
            const bool in = r0 + r < T && k0 + k < kend;
            av_cp16(As + k * AV_LDA + r, in ? Ph + (size_t)(k0 + k) * T + r0 + r : Ph, in);
        }
    }
#pragma unroll
    for (int it = 0; it < 4; it++) {
        const int f = it * AV_THREADS + threadIdx.x;
        const int k = f / (AV_HS / 4), d = (f % (AV_HS / 4)) * 4;
        const bool in = k0 + k < kend;
        av_cp16(Bs + k * AV_LDB + d, in ? Xh + (size_t)(k0 + k) * ldx + d : Xh, in);
    }
}

// Without TRANS: the registers of av_issue into As, transposed (a warp writes 32 consecutive rows).
template <bool TRANS> static __device__ __forceinline__ void av_store_a(const av_regs *g, float *As) {
#pragma unroll
    for (int it = 0; it < (TRANS ? 0 : 8); it++) {
        const int f = it * AV_THREADS + threadIdx.x;
        const int r = f % AV_TILE, k = (f / AV_TILE) * 4;
        As[(k + 0) * AV_LDA + r] = g->a[it].x;
        As[(k + 1) * AV_LDA + r] = g->a[it].y;
        As[(k + 2) * AV_LDA + r] = g->a[it].z;
        As[(k + 3) * AV_LDA + r] = g->a[it].w;
    }
}

// grid (row tiles, B * NH), block AV_THREADS, dynamic smem AV_SMEM_BYTES
// 3 CTAs an SM for TRANS (no staging registers); 2 without, whose register-staged A would otherwise
// spill at the 170 registers of 3
template <bool TRANS>
__global__ void __launch_bounds__(AV_THREADS, TRANS ? 3 : 2)
    attention_av_kernel(float *__restrict__ out, long long osb, long long osh, int ldo, const float *__restrict__ P,
                        const float *__restrict__ X, long long xsb, long long xsh, int ldx, int NH, int T) {
    extern __shared__ float4 av_smem4[];
    float *sm = reinterpret_cast<float *>(av_smem4);
    const int nb = gridDim.x;
    // the longest K ranges first: trans 0's last row tile, trans 1's first
    const int tile = TRANS ? blockIdx.x : nb - 1 - blockIdx.x;
    const int r0 = tile * AV_TILE;
    const int kbeg = TRANS ? r0 : 0, kend = TRANS ? T : (r0 + AV_TILE < T ? r0 + AV_TILE : T);
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const float *Ph = P + (size_t)blockIdx.y * T * T;
    const float *Xh = X + b * xsb + h * xsh;
    const int tx = threadIdx.x % 8, ty = threadIdx.x / 8;
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;

    av_regs g;
    const int steps = (kend - kbeg + AV_BK - 1) / AV_BK;
    av_issue<TRANS>(&g, sm, sm + AV_BK * AV_LDA, Ph, Xh, ldx, T, r0, kbeg, kend);
    av_store_a<TRANS>(&g, sm);
    av_cp_wait_all();
    __syncthreads();
    for (int s = 0; s < steps; s++) {
        const float *As = sm + (s & 1) * AV_STAGE_FLOATS, *Bs = As + AV_BK * AV_LDA;
        float *An = sm + ((s + 1) & 1) * AV_STAGE_FLOATS; // free: its last readers passed the previous sync
        if (s + 1 < steps) av_issue<TRANS>(&g, An, An + AV_BK * AV_LDA, Ph, Xh, ldx, T, r0, kbeg + (s + 1) * AV_BK, kend);
        const float *at = As + ty * 4, *bt = Bs + tx * 4;
#pragma unroll
        for (int k = 0; k < AV_BK; k++) {
            const float4 a0 = *reinterpret_cast<const float4 *>(at + k * AV_LDA);
            const float4 a1 = *reinterpret_cast<const float4 *>(at + k * AV_LDA + 64);
            const float4 b0 = *reinterpret_cast<const float4 *>(bt + k * AV_LDB);
            const float4 b1 = *reinterpret_cast<const float4 *>(bt + k * AV_LDB + 32);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
        }
        if (s + 1 < steps) av_store_a<TRANS>(&g, An);
        av_cp_wait_all();
        __syncthreads();
    }

    float *oh = out + b * osb + h * osh;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int row = r0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
        if (row >= T) continue;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const float4 v = make_float4(acc[i][half * 4 + 0], acc[i][half * 4 + 1], acc[i][half * 4 + 2],
                                         acc[i][half * 4 + 3]);
            *reinterpret_cast<float4 *>(oh + (size_t)row * ldo + half * 32 + tx * 4) = v;
        }
    }
}

int attention_av_cuda_supported(int BH, int T, int HS, int ldx, int ldo, const void *out, const void *P,
                                const void *X) {
    const int aligned = ((uintptr_t)out & 15u) == 0 && ((uintptr_t)P & 15u) == 0 && ((uintptr_t)X & 15u) == 0;
    return HS == AV_HS && T > 0 && T % 4 == 0 && ldx % 4 == 0 && ldo % 4 == 0 && aligned && BH >= 1 &&
           BH <= 65535;
}

mo_status attention_av_cuda(mo_ctx *c, int trans, float *out, long long osb, long long osh, int ldo, const float *P,
                            const float *X, long long xsb, long long xsh, int ldx, int B, int NH, int T, int HS) {
    if (!attention_av_cuda_supported(B * NH, T, HS, ldx, ldo, out, P, X))
        return MO_FAIL(MO_ERR_INVALID, "attention_av_cuda: needs HS 64 (got %d), T, ldx, ldo multiples of 4 "
                       "(got %d, %d, %d), 16-byte aligned pointers and B*NH <= 65535 (got %d)", HS, T, ldx, ldo,
                       B * NH);
    const dim3 grid((unsigned)((T + AV_TILE - 1) / AV_TILE), (unsigned)(B * NH));
    cudaStream_t s = (cudaStream_t)c->stream;
    // over 48 KiB of dynamic shared memory is opt-in, per function and device: set on every call
    if (trans) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_av_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        AV_SMEM_BYTES));
        attention_av_kernel<true><<<grid, AV_THREADS, AV_SMEM_BYTES, s>>>(out, osb, osh, ldo, P, X, xsb, xsh, ldx,
                                                                          NH, T);
    } else {
        CUDA_CHECK(cudaFuncSetAttribute(attention_av_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        AV_SMEM_BYTES));
        attention_av_kernel<false><<<grid, AV_THREADS, AV_SMEM_BYTES, s>>>(out, osb, osh, ldo, P, X, xsb, xsh, ldx,
                                                                           NH, T);
    }
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}
