// Residual add with 16-bit tensors (ops_mixed.h), also the accumulate (out aliasing a): elementwise,
// 8 elements per 16-byte load when every pointer is aligned, one fp32 add, one rounding. No
// __restrict__: out may alias an input (each element is read and written by the same thread).
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "mixed_dev.cuh"
#include "ops_mixed_impl.h"

template <class D, bool VEC>
__global__ void residual_forward_mixed_kernel(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x, id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (VEC) {
        size_t n8 = n / 8;
        for (size_t i = id; i < n8; i += stride) {
            float x[8], y[8];
            mx_ld8<D>(x, a + 8 * i);
            mx_ld8<D>(y, b + 8 * i);
#pragma unroll
            for (int k = 0; k < 8; k++) x[k] += y[k];
            mx_st8<D>(out + 8 * i, x);
        }
        if (id < n - n8 * 8) {
            size_t i = n8 * 8 + id;
            out[i] = D::from_f(D::to_f(a[i]) + D::to_f(b[i]));
        }
    } else {
        for (size_t i = id; i < n; i += stride) out[i] = D::from_f(D::to_f(a[i]) + D::to_f(b[i]));
    }
}

template <class D>
static mo_status residual_forward_mixed_launch(mo_ctx *c, void *out, const void *a, const void *b, size_t n) {
    if (n == 0) return MO_OK;
    cudaStream_t s = (cudaStream_t)c->stream;
    uint16_t *o = (uint16_t *)out;
    const uint16_t *x = (const uint16_t *)a, *y = (const uint16_t *)b;
    if (mx_aligned16(out) && mx_aligned16(a) && mx_aligned16(b))
        residual_forward_mixed_kernel<D, true><<<mx_grid(n / 8), MX_THREADS, 0, s>>>(o, x, y, n);
    else
        residual_forward_mixed_kernel<D, false><<<mx_grid(n), MX_THREADS, 0, s>>>(o, x, y, n);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status residual_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *a, const void *b,
                                                 size_t n) {
    return dt == MO_F16 ? residual_forward_mixed_launch<mx_f16>(c, out, a, b, n)
                        : residual_forward_mixed_launch<mx_bf16>(c, out, a, b, n);
}
