// Fused softmax cross-entropy with 16-bit logits (ops_mixed.h), the scheme of crossentropy.cu: one block
// per row, an online max / sum of exp per thread, fixed-order shuffle + shared-memory block reductions
// (deterministic), then a second pass writing dlogits (rounded once to the 16-bit type) in place.
// 8 logits per 16-byte load when V % 8 == 0 and logits is 16-byte aligned (every row then is).
// __expf/__logf as the fp32 kernel; 1/S an IEEE division. Losses are fp32.
#include <cuda_runtime.h>
#include <float.h>
#include <stdint.h>

#include "cuda_check.h"
#include "mixed_dev.cuh"
#include "ops_mixed_impl.h"

#define CEM_MAX_THREADS 1024

__device__ __forceinline__ float cem_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float cem_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Block-wide reductions (blockDim.x a multiple of 32); every thread gets the result.
__device__ float cem_block_sum(float v, float *sh) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = cem_warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = cem_warp_sum(lane < nw ? sh[lane] : 0.0f);
    __syncthreads(); // sh is reused by the next reduction
    return v;
}
__device__ float cem_block_max(float v, float *sh) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = cem_warp_max(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = cem_warp_max(lane < nw ? sh[lane] : -FLT_MAX);
    __syncthreads();
    return v;
}

template <class D, bool VEC>
__global__ void __launch_bounds__(CEM_MAX_THREADS)
    crossentropy_mixed_kernel(float *losses, uint16_t *logits, const int *targets, int V, float dloss) {
    __shared__ float sh[32];
    size_t row = blockIdx.x;
    uint16_t *x = logits + row * (size_t)V;
    const int t = targets[row];
    const bool valid = t >= 0 && t < V;
    // read x[t] now: the reductions below synchronize the block before any thread overwrites the row
    float xt = 0.0f;
    if (threadIdx.x == 0 && valid) xt = D::to_f(x[t]);

    float m = -FLT_MAX, s = 0.0f;
    if (VEC) {
        for (int i = threadIdx.x; i < V / 8; i += blockDim.x) {
            float v[8];
            mx_ld8<D>(v, x + 8 * i);
            float nm = m;
#pragma unroll
            for (int k = 0; k < 8; k++) nm = fmaxf(nm, v[k]);
            float e = 0.0f;
#pragma unroll
            for (int k = 0; k < 8; k++) e += __expf(v[k] - nm);
            s = s * __expf(m - nm) + e;
            m = nm;
        }
    } else {
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            float v = D::to_f(x[i]);
            float nm = fmaxf(m, v);
            s = s * __expf(m - nm) + __expf(v - nm);
            m = nm;
        }
    }
    const float bm = cem_block_max(m, sh);
    const float S = cem_block_sum(s * __expf(m - bm), sh);
    const float inv = __fdiv_rn(1.0f, S);
    if (threadIdx.x == 0) losses[row] = valid ? __logf(S) - (xt - bm) : __int_as_float(0x7fc00000);

    if (VEC) {
        for (int i = threadIdx.x; i < V / 8; i += blockDim.x) {
            float v[8];
            mx_ld8<D>(v, x + 8 * i);
            int j = 8 * i;
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = (__expf(v[k] - bm) * inv - (j + k == t ? 1.0f : 0.0f)) * dloss;
            mx_st8<D>(x + 8 * i, v);
        }
    } else {
        for (int i = threadIdx.x; i < V; i += blockDim.x)
            x[i] = D::from_f((__expf(D::to_f(x[i]) - bm) * inv - (i == t ? 1.0f : 0.0f)) * dloss);
    }
}

template <class D>
static mo_status crossentropy_mixed_launch(mo_ctx *c, float *losses, void *logits, const int *targets, int N, int V,
                                           float dloss) {
    cudaStream_t s = (cudaStream_t)c->stream;
    int vec = V % 8 == 0 && mx_aligned16(logits);
    int work = vec ? V / 8 : V;
    int threads = (work + 31) / 32 * 32;
    if (threads > CEM_MAX_THREADS) threads = CEM_MAX_THREADS;
    uint16_t *x = (uint16_t *)logits;
    if (vec)
        crossentropy_mixed_kernel<D, true><<<(unsigned)N, (unsigned)threads, 0, s>>>(losses, x, targets, V, dloss);
    else
        crossentropy_mixed_kernel<D, false><<<(unsigned)N, (unsigned)threads, 0, s>>>(losses, x, targets, V, dloss);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status crossentropy_fused_mixed_cuda(mo_ctx *c, mo_dtype dt, float *losses, void *logits,
                                                   const int *targets, int N, int V, float dloss) {
    return dt == MO_F16 ? crossentropy_mixed_launch<mx_f16>(c, losses, logits, targets, N, V, dloss)
                        : crossentropy_mixed_launch<mx_bf16>(c, losses, logits, targets, N, V, dloss);
}
