// Residual add (karpathy/llm.c train_gpt2_fp32.cu residual_forward_kernel) and gradient accumulation,
// elementwise with float4 loads when every pointer is 16-byte aligned. No __restrict__: out may alias an
// input (each element is read and written by the same thread).
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "residual.h"

#define RES_THREADS 256
#define RES_MAX_BLOCKS 65536

static inline int res_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

static unsigned res_grid(size_t work) {
    size_t g = (work + RES_THREADS - 1) / RES_THREADS;
    if (g < 1) g = 1;
    return (unsigned)(g > RES_MAX_BLOCKS ? RES_MAX_BLOCKS : g);
}

// out = a + b; grid-stride over n/4 float4s, the first n % 4 threads also take the tail.
__global__ void residual_forward_vec4(float *out, const float *a, const float *b, size_t n) {
    size_t n4 = n / 4, stride = (size_t)gridDim.x * blockDim.x;
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = id; i < n4; i += stride) {
        float4 x = reinterpret_cast<const float4 *>(a)[i];
        float4 y = reinterpret_cast<const float4 *>(b)[i];
        reinterpret_cast<float4 *>(out)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    if (id < n - n4 * 4) out[n4 * 4 + id] = a[n4 * 4 + id] + b[n4 * 4 + id];
}

__global__ void residual_forward_scalar(float *out, const float *a, const float *b, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = a[i] + b[i];
}

extern "C" mo_status residual_forward_cuda(mo_ctx *c, float *out, const float *a, const float *b, size_t n) {
    if (n == 0) return MO_OK;
    cudaStream_t s = (cudaStream_t)c->stream;
    if (res_aligned16(out) && res_aligned16(a) && res_aligned16(b))
        residual_forward_vec4<<<res_grid(n / 4), RES_THREADS, 0, s>>>(out, a, b, n);
    else
        residual_forward_scalar<<<res_grid(n), RES_THREADS, 0, s>>>(out, a, b, n);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

// dst += src is out = dst + src with out aliasing dst.
extern "C" mo_status accumulate_cuda(mo_ctx *c, float *dst, const float *src, size_t n) {
    return residual_forward_cuda(c, dst, dst, src, n);
}
