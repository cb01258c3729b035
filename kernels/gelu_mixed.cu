// GELU kernels with 16-bit activations (ops_mixed.h): elementwise, 8 elements per 16-byte load when
// every pointer is 16-byte aligned (grid-stride; the first n % 8 threads of the grid also take the
// tail), fp32 math with gelu.cu's device functions (gelu_dev.cuh), one rounding per output.
// Aliasing (out == inp, dinp == dout) is safe: each element is read before it is written, by one thread.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "gelu_dev.cuh"
#include "mixed_dev.cuh"
#include "ops_mixed_impl.h"

template <class D, bool VEC> __global__ void gelu_forward_mixed_kernel(uint16_t *out, const uint16_t *inp, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x, id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (VEC) {
        size_t n8 = n / 8;
        for (size_t i = id; i < n8; i += stride) {
            float v[8];
            mx_ld8<D>(v, inp + 8 * i);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = gelu_fwd(v[k]);
            mx_st8<D>(out + 8 * i, v);
        }
        if (id < n - n8 * 8) out[n8 * 8 + id] = D::from_f(gelu_fwd(D::to_f(inp[n8 * 8 + id])));
    } else {
        for (size_t i = id; i < n; i += stride) out[i] = D::from_f(gelu_fwd(D::to_f(inp[i])));
    }
}

template <class D, bool VEC>
__global__ void gelu_backward_mixed_kernel(uint16_t *dinp, const uint16_t *inp, const uint16_t *dout, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x, id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (VEC) {
        size_t n8 = n / 8;
        for (size_t i = id; i < n8; i += stride) {
            float x[8], d[8];
            mx_ld8<D>(x, inp + 8 * i);
            mx_ld8<D>(d, dout + 8 * i);
#pragma unroll
            for (int k = 0; k < 8; k++) x[k] = gelu_grad(x[k]) * d[k];
            mx_st8<D>(dinp + 8 * i, x);
        }
        if (id < n - n8 * 8) {
            size_t i = n8 * 8 + id;
            dinp[i] = D::from_f(gelu_grad(D::to_f(inp[i])) * D::to_f(dout[i]));
        }
    } else {
        for (size_t i = id; i < n; i += stride) dinp[i] = D::from_f(gelu_grad(D::to_f(inp[i])) * D::to_f(dout[i]));
    }
}

template <class D> static mo_status gelu_forward_mixed_launch(mo_ctx *c, void *out, const void *inp, size_t n) {
    if (n == 0) return MO_OK;
    cudaStream_t s = (cudaStream_t)c->stream;
    uint16_t *o = (uint16_t *)out;
    const uint16_t *x = (const uint16_t *)inp;
    if (mx_aligned16(out) && mx_aligned16(inp))
        gelu_forward_mixed_kernel<D, true><<<mx_grid(n / 8), MX_THREADS, 0, s>>>(o, x, n);
    else
        gelu_forward_mixed_kernel<D, false><<<mx_grid(n), MX_THREADS, 0, s>>>(o, x, n);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

template <class D>
static mo_status gelu_backward_mixed_launch(mo_ctx *c, void *dinp, const void *inp, const void *dout, size_t n) {
    if (n == 0) return MO_OK;
    cudaStream_t s = (cudaStream_t)c->stream;
    uint16_t *g = (uint16_t *)dinp;
    const uint16_t *x = (const uint16_t *)inp, *d = (const uint16_t *)dout;
    if (mx_aligned16(dinp) && mx_aligned16(inp) && mx_aligned16(dout))
        gelu_backward_mixed_kernel<D, true><<<mx_grid(n / 8), MX_THREADS, 0, s>>>(g, x, d, n);
    else
        gelu_backward_mixed_kernel<D, false><<<mx_grid(n), MX_THREADS, 0, s>>>(g, x, d, n);
    CUDA_CHECK_LAUNCH();
    return MO_OK;
}

extern "C" mo_status gelu_forward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *out, const void *inp, size_t n) {
    return dt == MO_F16 ? gelu_forward_mixed_launch<mx_f16>(c, out, inp, n)
                        : gelu_forward_mixed_launch<mx_bf16>(c, out, inp, n);
}

extern "C" mo_status gelu_backward_mixed_cuda(mo_ctx *c, mo_dtype dt, void *dinp, const void *inp, const void *dout,
                                              size_t n) {
    return dt == MO_F16 ? gelu_backward_mixed_launch<mx_f16>(c, dinp, inp, dout, n)
                        : gelu_backward_mixed_launch<mx_bf16>(c, dinp, inp, dout, n);
}
