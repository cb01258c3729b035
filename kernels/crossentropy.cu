// Fused softmax cross-entropy kernels, after karpathy/llm.c (train_gpt2_fp32.cu fused_classifier_kernel3 and
// prepare_softmax_blockwide): one block per row, an online max/sum per thread, shuffle + shared-memory
// block reductions (fixed order: deterministic), then one more pass writing the gradient in place.
// float4 path when V % 4 == 0 and logits is 16-byte aligned (every row then is).
// exp/log are the fast-math ones (__expf, __logf: relative error ~1e-6 over the logit ranges of training),
// the 1/S is an IEEE division as on the cpu.
#include <cuda_runtime.h>
#include <float.h>
#include <stdint.h>

#include "crossentropy.h"
#include "cuda_check.h"

#define CE_MAX_THREADS 1024

__device__ __forceinline__ float ce_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float ce_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide reductions (blockDim.x a multiple of 32); every thread gets the result.
__device__ float ce_block_sum(float v, float *sh) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = ce_warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = ce_warp_sum(lane < nw ? sh[lane] : 0.0f);
    __syncthreads(); // sh is reused by the next reduction
    return v;
}
__device__ float ce_block_max(float v, float *sh) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = ce_warp_max(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = ce_warp_max(lane < nw ? sh[lane] : -FLT_MAX);
    __syncthreads();
    return v;
}

template <bool VEC>
__global__ void __launch_bounds__(CE_MAX_THREADS)
    crossentropy_kernel(float *losses, float *logits, const int *targets, int V, float dloss) {
    __shared__ float sh[32];
    size_t row = blockIdx.x;
    float *x = logits + row * (size_t)V;
    const int t = targets[row];
    const bool valid = t >= 0 && t < V;
    // read x[t] now: the reductions below synchronize the block before any thread overwrites the row
    float xt = 0.0f;
    if (threadIdx.x == 0 && valid) xt = x[t];

    // pass 1: running max m and sum s of exp(x - m) over this thread's elements
    float m = -FLT_MAX, s = 0.0f;
    if (VEC) {
        const float4 *x4 = reinterpret_cast<const float4 *>(x);
        for (int i = threadIdx.x; i < V / 4; i += blockDim.x) {
            float4 v = x4[i];
            float nm = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
            s = s * __expf(m - nm) + ((__expf(v.x - nm) + __expf(v.y - nm)) + (__expf(v.z - nm) + __expf(v.w - nm)));
            m = nm;
        }
    } else {
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            float v = x[i];
            float nm = fmaxf(m, v);
            s = s * __expf(m - nm) + __expf(v - nm);
            m = nm;
        }
    }
    const float bm = ce_block_max(m, sh);
    const float S = ce_block_sum(s * __expf(m - bm), sh);
    const float inv = __fdiv_rn(1.0f, S);
    if (threadIdx.x == 0) losses[row] = valid ? __logf(S) - (xt - bm) : __int_as_float(0x7fc00000);

    // pass 2: dlogits = (softmax - onehot) * dloss, in place
    if (VEC) {
        float4 *x4 = reinterpret_cast<float4 *>(x);
        for (int i = threadIdx.x; i < V / 4; i += blockDim.x) {
            float4 v = x4[i];
            int j = 4 * i;
            float4 g;
            g.x = (__expf(v.x - bm) * inv - (j + 0 == t ? 1.0f : 0.0f)) * dloss;
            g.y = (__expf(v.y - bm) * inv - (j + 1 == t ? 1.0f : 0.0f)) * dloss;
            g.z = (__expf(v.z - bm) * inv - (j + 2 == t ? 1.0f : 0.0f)) * dloss;
            g.w = (__expf(v.w - bm) * inv - (j + 3 == t ? 1.0f : 0.0f)) * dloss;
            x4[i] = g;
        }
    } else {
        for (int i = threadIdx.x; i < V; i += blockDim.x)
            x[i] = (__expf(x[i] - bm) * inv - (i == t ? 1.0f : 0.0f)) * dloss;
    }
}

// Register kernel: one block of CE_REG_THREADS per row, each thread holding its IT float4 of the row in
// registers between the two passes, so the row is read from DRAM once and written once (the loop kernel
// above reads it twice: 8192 rows of 50304 logits are 1.6 GB, far more than L2 holds, so its second
// pass reads DRAM again). On the H200 (58127e4ccf46) the fp32 step's loss time went 1.18 -> 0.80 ms and
// the step 149.3 -> 148.9 ms (MEMOPT_CE=loop for the old kernel). Each thread takes the max of its
// elements, then their sum of exp(x - max); the block combines them in a fixed order (deterministic).
// Elements past V are not loaded.
#define CE_REG_THREADS 512
template <int IT>
__global__ void __launch_bounds__(CE_REG_THREADS, 1)
    crossentropy_reg_kernel(float *losses, float *logits, const int *targets, int V, float dloss) {
    __shared__ float sh[32];
    const size_t row = blockIdx.x;
    float4 *x4 = reinterpret_cast<float4 *>(logits + row * (size_t)V);
    const int n4 = V / 4, t = targets[row];
    const bool valid = t >= 0 && t < V;
    float4 v[IT], xq = make_float4(0.0f, 0.0f, 0.0f, 0.0f); // xq: the float4 holding the target, if ours
    const int t4 = valid ? t / 4 : -1;
    float m = -FLT_MAX;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int i = it * CE_REG_THREADS + threadIdx.x;
        v[it] = i < n4 ? x4[i] : make_float4(-FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX);
        if (i == t4) xq = v[it]; // constant index it: v stays in registers
        m = fmaxf(m, fmaxf(fmaxf(v[it].x, v[it].y), fmaxf(v[it].z, v[it].w)));
    }
    float s = 0.0f;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int i = it * CE_REG_THREADS + threadIdx.x;
        if (i < n4)
            s += (__expf(v[it].x - m) + __expf(v[it].y - m)) + (__expf(v[it].z - m) + __expf(v[it].w - m));
    }
    // the target's logit, from the thread that holds it (the reductions below publish it via shared memory)
    __shared__ float xt_sh;
    if (valid && (t / 4) % CE_REG_THREADS == (int)threadIdx.x) {
        const int r = t % 4;
        const float4 q = xq;
        xt_sh = r == 0 ? q.x : r == 1 ? q.y : r == 2 ? q.z : q.w;
    }
    const float bm = ce_block_max(m, sh);
    const float S = ce_block_sum(s * __expf(m - bm), sh); // its barriers order xt_sh's write before the read
    const float inv = __fdiv_rn(1.0f, S);
    if (threadIdx.x == 0) losses[row] = valid ? __logf(S) - (xt_sh - bm) : __int_as_float(0x7fc00000);
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int i = it * CE_REG_THREADS + threadIdx.x;
        if (i >= n4) continue;
        const int j = 4 * i;
        float4 g;
        g.x = (__expf(v[it].x - bm) * inv - (j + 0 == t ? 1.0f : 0.0f)) * dloss;
        g.y = (__expf(v[it].y - bm) * inv - (j + 1 == t ? 1.0f : 0.0f)) * dloss;
        g.z = (__expf(v[it].z - bm) * inv - (j + 2 == t ? 1.0f : 0.0f)) * dloss;
        g.w = (__expf(v[it].w - bm) * inv - (j + 3 == t ? 1.0f : 0.0f)) * dloss;
        x4[i] = g;
    }
}

// float4s per thread of the register kernel for V (0: the loop kernel). 25 covers the padded GPT-2
// vocabulary (50304 = 4 x 12576 <= 4 x 512 x 25) within 128 registers.
static int ce_reg_it(int V, int vec) {
    if (!vec) return 0;
    const int n4 = V / 4, its[4] = {4, 8, 16, 25};
    for (int i = 0; i < 4; i++)
        if (n4 <= CE_REG_THREADS * its[i]) return its[i];
    return 0;
}

extern "C" mo_status crossentropy_fused_cuda(mo_ctx *c, float *losses, float *logits, const int *targets, int N,
                                             int V, float dloss) {
    cudaStream_t s = (cudaStream_t)c->stream;
    int vec = V % 4 == 0 && ((uintptr_t)logits & 15u) == 0;
    int work = vec ? V / 4 : V; // items per row
    int threads = (work + 31) / 32 * 32;
    if (threads > CE_MAX_THREADS) threads = CE_MAX_THREADS;
    const int it = c->ce_loop ? 0 : ce_reg_it(V, vec);
    switch (it) {
    case 4: crossentropy_reg_kernel<4><<<(unsigned)N, CE_REG_THREADS, 0, s>>>(losses, logits, targets, V, dloss); break;
    case 8: crossentropy_reg_kernel<8><<<(unsigned)N, CE_REG_THREADS, 0, s>>>(losses, logits, targets, V, dloss); break;
    case 16: crossentropy_reg_kernel<16><<<(unsigned)N, CE_REG_THREADS, 0, s>>>(losses, logits, targets, V, dloss); break;
    case 25: crossentropy_reg_kernel<25><<<(unsigned)N, CE_REG_THREADS, 0, s>>>(losses, logits, targets, V, dloss); break;
    default: break;
    }
    if (it) {
        CUDA_CHECK_LAUNCH();
        return MO_OK;
    }
    if (vec)
        crossentropy_kernel<true><<<(unsigned)N, (unsigned)threads, 0, s>>>(losses, logits, targets, V, dloss);
    else
        crossentropy_kernel<false><<<(unsigned)N, (unsigned)threads, 0, s>>>(losses, logits, targets, V, dloss);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}
