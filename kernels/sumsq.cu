// Deterministic sum of squares in two stages (see sumsq.h): per-thread double accumulation, warp
// shuffles (fixed xor order), shared memory across warps, then a single block over the partials.
// The result never depends on timing: the same n gives the same grid and the same order of additions.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "sumsq.h"

#define SUMSQ_THREADS 256
#define SUMSQ_FINAL_THREADS 1024

__device__ __forceinline__ double sumsq_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ double sumsq_block_sum(double v) { // result valid in thread 0
    __shared__ double sh[32];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = sumsq_warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = 0.0;
    if (w == 0) v = sumsq_warp_sum(lane < nw ? sh[lane] : 0.0);
    return v;
}

template <bool VEC>
__global__ void sumsq_partial(double *partial, const float *g, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    double acc = 0.0;
    if (VEC) {
        size_t n4 = n / 4;
        for (size_t i = id; i < n4; i += stride) {
            float4 v = reinterpret_cast<const float4 *>(g)[i];
            double x = v.x, y = v.y, z = v.z, w = v.w;
            acc += x * x + y * y + z * z + w * w;
        }
        if (id < n - n4 * 4) {
            double x = g[n4 * 4 + id];
            acc += x * x;
        }
    } else {
        for (size_t i = id; i < n; i += stride) {
            double x = g[i];
            acc += x * x;
        }
    }
    acc = sumsq_block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sumsq_final(double *partial, int G) { // partial[G] = sum of partial[0..G)
    double acc = 0.0;
    for (int i = threadIdx.x; i < G; i += blockDim.x) acc += partial[i];
    acc = sumsq_block_sum(acc);
    if (threadIdx.x == 0) partial[G] = acc;
}

extern "C" mo_status sumsq_cuda(mo_ctx *c, double *out, const float *g, void *scratch, size_t n) {
    if (n == 0) {
        *out = 0.0;
        return MO_OK;
    }
    cudaStream_t s = (cudaStream_t)c->stream;
    int G = sumsq_blocks(n);
    double *partial = (double *)scratch;
    if (((uintptr_t)g & 15u) == 0)
        sumsq_partial<true><<<(unsigned)G, SUMSQ_THREADS, 0, s>>>(partial, g, n);
    else
        sumsq_partial<false><<<(unsigned)G, SUMSQ_THREADS, 0, s>>>(partial, g, n);
    CUDA_CHECK_LAUNCH();
    sumsq_final<<<1, SUMSQ_FINAL_THREADS, 0, s>>>(partial, G);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpyAsync(out, partial + G, sizeof(double), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return MO_OK;
}
